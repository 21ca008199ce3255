//! The audit trail (docs/decisions/0028-audit-trail.md): what the permission relay
//! did, one [`AuditEntry`] per fact, derived from one model step, its input and the
//! effects the model returned for it ([`audit_entries`]); the hash chain that seals
//! the entries as they are stored and checks them ([`chain`]); an entry in words
//! ([`text`]); instants in RFC 3339 and the times `--since` takes ([`time`]).
//!
//! Every [`Input`], [`Effect`], [`DropReason`], [`VerdictSource`] and [`GrantEnd`]
//! variant is matched by name, without a `_` arm: a new one fails to compile here
//! until it is given an entry or listed as none.

pub mod chain;
pub mod text;
pub mod time;

use mc_model::grant::{subject, InputScope};
use mc_model::{
    Channel, DropReason, Effect, EventId, GrantEnd, IdentityId, Input, Outcome, Phase, Prompt,
    Timestamp, VerdictSource,
};
use serde::{Deserialize, Serialize};

/// One entry of the audit trail, before the chain seals it ([`chain::seal`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    /// Milliseconds since the Unix epoch: the `now` the model was handed the step's
    /// input at.
    pub now: Timestamp,
    /// The identity it happened to.
    pub identity: IdentityId,
    pub event: AuditEvent,
}

/// What happened. As JSON, `kind` (snake case, the variant's name) and the fields;
/// the stored row keeps `kind` in a column of its own and the fields as its body
/// ([`chain::kind_and_body`]). Ids are the strings Matrix and Claude Code gave; `post`
/// and `send` are the model's effect ids (`mc-prompt-<post>` is the post's
/// transaction id).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AuditEvent {
    /// A session's `permission_request`, as it came (`description` and
    /// `input_preview` are Claude Code's text, untrusted).
    PermissionRequest {
        session: String,
        request_id: String,
        tool: String,
        description: String,
        input_preview: String,
    },
    /// A `permission_request` the server could not read: the session was told
    /// `error`, nothing was posted.
    RequestInvalid { session: String, error: String },
    /// A permission request not relayed, for `reason`: `unknown_session`,
    /// `no_approvers`, `no_prompt_room` or `unknown_identity`.
    RequestDropped {
        session: String,
        request_id: String,
        reason: String,
    },
    /// A prompt handed to Matrix to post in `room` (`text` is its plain body, what
    /// the approver reads); `reissued`: the same post again after a restart.
    /// `session`: the session that asked.
    PromptPosted {
        request_id: String,
        session: Option<String>,
        room: String,
        post: u64,
        text: String,
        reissued: bool,
    },
    /// The prompt of post `post` is the room's event `event_id` (`request_id` and
    /// `session` are `None` when the prompt ended while it was being posted).
    PromptMessage {
        post: u64,
        event_id: String,
        request_id: Option<String>,
        session: Option<String>,
    },
    /// A prompt ended without a verdict, for `reason`: `expired`, `evicted` (at
    /// `max_prompts`), `superseded` (a new request of the session with the same id)
    /// or `post_failed` (of post `post`). `prompt`: its message, once posted.
    PromptEnded {
        reason: String,
        prompt: Option<String>,
        post: Option<u64>,
    },
    /// A verdict taken on `request_id` of `session`: `behavior` (`allow`, `deny`)
    /// by `by`, given `via`. `tool` and `subject` (what the call acts on,
    /// `mc_model::grant::subject`) as the request showed them, when the prompt was
    /// still held after the step.
    Verdict {
        session: String,
        request_id: String,
        behavior: String,
        by: String,
        via: Via,
        tool: Option<String>,
        subject: Option<String>,
    },
    /// A verdict (text or reaction) not taken, for `reason`: `not_approver`,
    /// `not_cross_signed`, `clear_verdict`, `unknown_request`, `ambiguous_request`,
    /// `reply_not_to_prompt` or `already_answered`. `event_id`: the message or
    /// reaction, `sender`: who sent it.
    VerdictRefused {
        event_id: Option<String>,
        sender: Option<String>,
        reason: String,
    },
    /// A verdict handed to the session that asked (effect `send`).
    VerdictSent {
        session: String,
        request_id: String,
        behavior: String,
        send: u64,
    },
    /// Grant `grant` made by `by` in `room` (its message `message`): `tool` calls of
    /// `session` whose subject is `subject` (`scope` `exact`) or starts with it
    /// (`prefix`), `lasts` (`until the session ends`, `for 30 min`), at most until
    /// `expires_at` (milliseconds since the epoch).
    Granted {
        grant: u64,
        session: String,
        tool: String,
        scope: String,
        subject: String,
        lasts: String,
        expires_at: u64,
        by: String,
        room: String,
        message: String,
    },
    /// Grant `grant` ended, `why`: `expired`, `session_ended`, `revoked` (by the
    /// approver `by`) or `operator` (`matrix-channel revoke`).
    GrantEnded {
        grant: u64,
        why: String,
        by: Option<String>,
    },
    /// The operator's `matrix-channel revoke` of grant `grant`, or of every grant
    /// (`None`); the grants it ended follow as [`AuditEvent::GrantEnded`].
    Revoked { grant: Option<u64> },
    /// Room label `label` bound to `room`, or unbound (`None`): where its sessions'
    /// prompts go.
    Bound { label: String, room: Option<String> },
}

/// How a verdict was given ([`VerdictSource`]); as JSON, `source` and the fields.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum Via {
    /// A `yes abcde` / `no abcde` message, `event_id`.
    Text { event_id: String },
    /// The reaction `event_id` with `key`, once the settle window ended.
    Reaction { event_id: String, key: String },
    /// Grant `grant` covered the request: nobody was asked.
    Grant { grant: u64 },
    /// Rule `rule` (from 1) of the operator's policy allowed or denied it: nobody
    /// was asked.
    Policy { rule: usize },
}

impl From<&VerdictSource> for Via {
    fn from(source: &VerdictSource) -> Via {
        match source {
            VerdictSource::Text { event_id } => Via::Text {
                event_id: event_id.0.clone(),
            },
            VerdictSource::Reaction { event_id, key } => Via::Reaction {
                event_id: event_id.0.clone(),
                key: key.clone(),
            },
            VerdictSource::Grant { grant } => Via::Grant { grant: *grant },
            VerdictSource::Policy { rule } => Via::Policy { rule: *rule },
        }
    }
}

/// The audit entries of one model step: `input`, handed to the model at `now`,
/// returned `effects`, and left the state `after`. In order: the input's own entry
/// (a permission request, an unreadable one, the operator's revoke, a prompt's
/// post that came back with its event id), then one per effect that is a prompt
/// posted, a verdict taken, refused or sent, a grant made or ended, a label bound,
/// or a drop of a request or a prompt, in the model's order. Pushes, notices, edits,
/// the agent's writes, joins, typing and the other drops are no entry.
pub fn audit_entries(
    now: Timestamp,
    input: &Input,
    effects: &[Effect],
    after: &Channel,
) -> Vec<AuditEntry> {
    let of_input = of_input(input, effects, after);
    let of_effects = effects
        .iter()
        .filter_map(|effect| of_effect(effect, input, after));
    of_input
        .into_iter()
        .chain(of_effects)
        .map(|(identity, event)| AuditEntry {
            now,
            identity,
            event,
        })
        .collect()
}

fn of_input(
    input: &Input,
    effects: &[Effect],
    after: &Channel,
) -> Option<(IdentityId, AuditEvent)> {
    match input {
        Input::PermissionRequest {
            identity,
            session,
            request,
        } => Some((
            identity.clone(),
            AuditEvent::PermissionRequest {
                session: session.0.clone(),
                request_id: request.request_id.as_str().to_owned(),
                tool: request.tool_name.clone(),
                description: request.description.clone(),
                input_preview: request.input_preview.clone(),
            },
        )),
        Input::InvalidPermissionRequest {
            identity,
            session,
            error,
        } => Some((
            identity.clone(),
            AuditEvent::RequestInvalid {
                session: session.0.clone(),
                error: error.clone(),
            },
        )),
        Input::Revoke { identity, grant } => {
            Some((identity.clone(), AuditEvent::Revoked { grant: *grant }))
        }
        Input::Completed {
            id,
            outcome: Outcome::Posted { event_id },
        } => prompt_message(id.0, event_id, effects, after),
        Input::Completed { .. }
        | Input::Attach { .. }
        | Input::Bind { .. }
        | Input::Detach { .. }
        | Input::Message { .. }
        | Input::Reaction { .. }
        | Input::Redaction { .. }
        | Input::AgentWrite { .. }
        | Input::Acknowledge { .. }
        | Input::Membership { .. }
        | Input::Unhandled { .. }
        | Input::Undecryptable { .. }
        | Input::GapCut { .. }
        | Input::Tick
        | Input::Restarted => None,
    }
}

/// A prompt post that came back as `event_id`: the prompt the state holds with that
/// message, or else (it ended while being posted) the identity whose edit of it is
/// among the effects. `None` for a post the model no longer knew.
fn prompt_message(
    post: u64,
    event_id: &EventId,
    effects: &[Effect],
    after: &Channel,
) -> Option<(IdentityId, AuditEvent)> {
    let held = after.identities().find_map(|(identity, state)| {
        let prompt = state
            .prompts()
            .iter()
            .find(|p| p.phase.message() == Some(event_id))?;
        Some((identity.clone(), Some(prompt)))
    });
    let edited = || {
        effects.iter().find_map(|effect| match effect {
            Effect::EditPrompt {
                identity,
                event_id: edited,
                ..
            } if edited == event_id => Some((identity.clone(), None)),
            _ => None,
        })
    };
    let (identity, prompt): (IdentityId, Option<&Prompt>) = held.or_else(edited)?;
    Some((
        identity,
        AuditEvent::PromptMessage {
            post,
            event_id: event_id.0.clone(),
            request_id: prompt.map(|p| p.request.request_id.as_str().to_owned()),
            session: prompt.map(|p| p.session.0.clone()),
        },
    ))
}

fn of_effect(effect: &Effect, input: &Input, after: &Channel) -> Option<(IdentityId, AuditEvent)> {
    let prompts = |identity: &IdentityId| {
        after
            .identity(identity)
            .map(|state| state.prompts())
            .unwrap_or_default()
    };
    match effect {
        Effect::PostPrompt {
            id,
            identity,
            room,
            request_id,
            text,
        } => {
            let session = prompts(identity)
                .iter()
                .find(|p| p.phase == Phase::Posting { post: *id })
                .map(|p| p.session.0.clone());
            let event = AuditEvent::PromptPosted {
                request_id: request_id.as_str().to_owned(),
                session,
                room: room.0.clone(),
                post: id.0,
                text: text.plain.clone(),
                reissued: matches!(input, Input::Restarted),
            };
            Some((identity.clone(), event))
        }
        Effect::Decided {
            identity,
            session,
            request_id,
            decision,
            at: _,
        } => {
            let request = prompts(identity)
                .iter()
                .find(|p| p.session == *session && p.request.request_id == *request_id)
                .map(|p| &p.request);
            let event = AuditEvent::Verdict {
                session: session.0.clone(),
                request_id: request_id.as_str().to_owned(),
                behavior: decision.behavior.as_str().to_owned(),
                by: decision.by.0.clone(),
                via: Via::from(&decision.via),
                tool: request.map(|r| r.tool_name.clone()),
                subject: request.and_then(|r| subject(&r.tool_name, &r.input_preview)),
            };
            Some((identity.clone(), event))
        }
        Effect::SendVerdict {
            id,
            identity,
            session,
            verdict,
        } => {
            let event = AuditEvent::VerdictSent {
                session: session.0.clone(),
                request_id: verdict.request_id.as_str().to_owned(),
                behavior: verdict.behavior.as_str().to_owned(),
                send: id.0,
            };
            Some((identity.clone(), event))
        }
        Effect::Granted { identity, grant } => {
            let (scope, subject) = match &grant.scope {
                InputScope::Exact(s) => ("exact", s),
                InputScope::Prefix(s) => ("prefix", s),
            };
            let event = AuditEvent::Granted {
                grant: grant.id,
                session: grant.session.0.clone(),
                tool: grant.tool.clone(),
                scope: scope.to_owned(),
                subject: subject.clone(),
                lasts: grant.lasts.to_string(),
                expires_at: grant.expires_at.0,
                by: grant.by.0.clone(),
                room: grant.room.0.clone(),
                message: grant.message.0.clone(),
            };
            Some((identity.clone(), event))
        }
        Effect::GrantEnded { identity, id, why } => {
            let (why, by) = match why {
                GrantEnd::Expired => ("expired", None),
                GrantEnd::SessionEnded => ("session_ended", None),
                GrantEnd::Revoked { by } => ("revoked", Some(by.0.clone())),
                GrantEnd::Operator => ("operator", None),
            };
            let event = AuditEvent::GrantEnded {
                grant: *id,
                why: why.to_owned(),
                by,
            };
            Some((identity.clone(), event))
        }
        Effect::Bound {
            identity,
            label,
            room,
        } => {
            let event = AuditEvent::Bound {
                label: label.as_str().to_owned(),
                room: room.as_ref().map(|r| r.0.clone()),
            };
            Some((identity.clone(), event))
        }
        Effect::Dropped {
            identity: Some(identity),
            event_id,
            reason,
        } => Some((identity.clone(), dropped(event_id.as_ref(), reason, input)?)),
        // Only an outcome for an effect no identity owns is dropped without one.
        Effect::Dropped { identity: None, .. }
        | Effect::Push { .. }
        | Effect::EditPrompt { .. }
        | Effect::Notice { .. }
        | Effect::Announce { .. }
        | Effect::JoinRoom { .. }
        | Effect::CreateRoom { .. }
        | Effect::Typing { .. }
        | Effect::Write { .. }
        | Effect::WriteRefused { .. }
        | Effect::LogMessage { .. }
        | Effect::Acknowledged { .. } => None,
    }
}

/// The entry of a drop of `event_id` for `reason` in a step whose input is `input`.
fn dropped(event_id: Option<&EventId>, reason: &DropReason, input: &Input) -> Option<AuditEvent> {
    match (drop_is(reason), input) {
        (DropIs::PromptEnded(why), _) => Some(AuditEvent::PromptEnded {
            reason: why.to_owned(),
            prompt: event_id.map(|e| e.0.clone()),
            post: match (reason, input) {
                (DropReason::PromptPostFailed, Input::Completed { id, .. }) => Some(id.0),
                _ => None,
            },
        }),
        (
            DropIs::RequestDropped(why),
            Input::PermissionRequest {
                session, request, ..
            },
        ) => Some(AuditEvent::RequestDropped {
            session: session.0.clone(),
            request_id: request.request_id.as_str().to_owned(),
            reason: why.to_owned(),
        }),
        (DropIs::VerdictRefused(why), _) => {
            let sender = input
                .matrix_event()
                .filter(|(id, _)| Some(*id) == event_id)
                .and_then(|(_, sender)| sender);
            Some(AuditEvent::VerdictRefused {
                event_id: event_id.map(|e| e.0.clone()),
                sender: sender.map(|s| s.0.clone()),
                reason: why.to_owned(),
            })
        }
        (DropIs::RequestDropped(_), _) | (DropIs::Nothing, _) => None,
    }
}

/// What a drop is to the trail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DropIs {
    /// A prompt ended without a verdict; the reason's name.
    PromptEnded(&'static str),
    /// A permission request not relayed, when the step's input is one (the same
    /// reasons drop other inputs too).
    RequestDropped(&'static str),
    /// A verdict not taken.
    VerdictRefused(&'static str),
    /// No entry: nothing of the relay, or told by the input's own entry.
    Nothing,
}

pub(crate) fn drop_is(reason: &DropReason) -> DropIs {
    match reason {
        DropReason::PromptExpired => DropIs::PromptEnded("expired"),
        DropReason::PromptEvicted => DropIs::PromptEnded("evicted"),
        DropReason::PromptSuperseded => DropIs::PromptEnded("superseded"),
        DropReason::PromptPostFailed => DropIs::PromptEnded("post_failed"),
        DropReason::UnknownSession => DropIs::RequestDropped("unknown_session"),
        DropReason::NoApprovers => DropIs::RequestDropped("no_approvers"),
        DropReason::NoPromptRoom => DropIs::RequestDropped("no_prompt_room"),
        DropReason::UnknownIdentity => DropIs::RequestDropped("unknown_identity"),
        DropReason::NotApprover => DropIs::VerdictRefused("not_approver"),
        DropReason::NotCrossSigned => DropIs::VerdictRefused("not_cross_signed"),
        DropReason::ClearVerdict => DropIs::VerdictRefused("clear_verdict"),
        DropReason::UnknownRequest => DropIs::VerdictRefused("unknown_request"),
        DropReason::AmbiguousRequest => DropIs::VerdictRefused("ambiguous_request"),
        DropReason::ReplyNotToPrompt => DropIs::VerdictRefused("reply_not_to_prompt"),
        DropReason::AlreadyAnswered => DropIs::VerdictRefused("already_answered"),
        DropReason::PromptWithdrawn => DropIs::VerdictRefused("prompt_withdrawn"),
        // The input's own entry (`request_invalid`) tells it.
        DropReason::InvalidPermissionRequest
        | DropReason::OwnEvent
        | DropReason::Stranger
        | DropReason::Notice
        | DropReason::NoContent
        | DropReason::Duplicate
        | DropReason::VerdictShaped
        | DropReason::RedactedBeforeDelivery
        | DropReason::EditRejected
        | DropReason::RedactionOfUnpushed
        | DropReason::WithdrawalByOther
        | DropReason::UnknownEvent
        | DropReason::RoomCreationFailed { .. }
        | DropReason::QueueFull
        | DropReason::ReplayCut { .. }
        | DropReason::GapCut { .. }
        | DropReason::StaleOutcome
        | DropReason::PromptTarget
        | DropReason::NotOwnMessage
        | DropReason::NamesOpenRequest { .. }
        | DropReason::LeavesPromptRoom
        | DropReason::PromptRoomState
        | DropReason::NotJoined
        | DropReason::OtherMember
        | DropReason::AlreadyInvited
        | DropReason::JoinFailed
        | DropReason::Unhandled { .. }
        | DropReason::Undecryptable => DropIs::Nothing,
    }
}

#[cfg(test)]
mod tests;
