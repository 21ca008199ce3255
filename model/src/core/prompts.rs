//! Permission requests ([`crate::Input::PermissionRequest`]) and a prompt's life
//! ([`Phase`]): the room it is posted in, its post, replacement, eviction at the cap
//! and expiry, and the messages of retired prompts the agent may not touch.

use super::identity::IdentityState;
use super::verdicts::Vote;
use super::{InFlight, Out};
use crate::effect::{Decision, DropReason, Effect, PromptText};
use crate::event::{Outcome, PermissionRequest};
use crate::ids::{EffectId, EventId, RoomId, SessionId, Timestamp, UserId};
use crate::policy::{first_match, RuleDecision, RuleMatch};
use crate::prompt_text::{render_asked, render_outcome, Asker, PromptOutcome};
use crate::verdict::RequestId;
use serde::{Deserialize, Serialize};

/// A permission prompt, owned by the session that asked.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Prompt {
    /// The session that asked; the only one a verdict goes to.
    pub session: SessionId,
    /// Unique per identity, increasing: tells a re-issued prompt from the old one.
    pub serial: u64,
    pub request: PermissionRequest,
    pub room: RoomId,
    pub created_at: Timestamp,
    /// After this instant an unanswered prompt expires.
    pub expires_at: Timestamp,
    pub phase: Phase,
    /// The policy rule that asks (`ask`), when one matched: how many approvers
    /// must allow, and no grant is made on it or answers it.
    #[serde(default)]
    pub rule: Option<RuleMatch>,
    /// The distinct approvers who allowed it so far, while its rule needs more.
    #[serde(default)]
    pub approvals: Vec<UserId>,
}

impl Prompt {
    /// How many distinct approvers must allow it: its `ask` rule's number, else 1.
    pub fn quorum(&self) -> usize {
        match self.rule.as_ref().map(|r| r.decision) {
            Some(RuleDecision::Ask { approvers }) => approvers.max(1),
            _ => 1,
        }
    }
}

/// Where a prompt is in its life. Expired and delivered prompts are gone.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum Phase {
    /// Being posted; not answerable until Matrix gave it an event id.
    Posting { post: EffectId },
    /// Posted as `message`; waiting for an answer.
    Pending { message: EventId },
    /// Approvers reacted; the verdict is taken when the window ends at `until`, on the
    /// votes still there. Votes are in arrival order, keyed by reaction event.
    Settling {
        message: EventId,
        until: Timestamp,
        votes: Vec<(EventId, Vote)>,
    },
    /// Posted as `message`, unanswered, and withdrawn: the session that asked
    /// disconnected (`Input::Detach`: its stream closed), before or while it was
    /// being posted, and has not attached since. Not answerable: a verdict or vote for it gets a
    /// notice ([`DropReason::PromptWithdrawn`]). It is `Pending` again when the
    /// session attaches, and expires at its time like a pending prompt
    /// (docs/decisions/0030-withdrawn-prompts.md).
    Withdrawn { message: EventId },
    /// Answered; waiting for the owner session to be live.
    Decided {
        message: EventId,
        decision: Decision,
    },
    /// Answered; the verdict send `send` is in flight.
    Delivering {
        message: EventId,
        decision: Decision,
        send: EffectId,
    },
}

impl Phase {
    /// The prompt message, once posted.
    pub fn message(&self) -> Option<&EventId> {
        match self {
            Phase::Posting { .. } => None,
            Phase::Pending { message }
            | Phase::Settling { message, .. }
            | Phase::Withdrawn { message }
            | Phase::Decided { message, .. }
            | Phase::Delivering { message, .. } => Some(message),
        }
    }

    /// Whether an approver can still answer.
    pub fn is_answerable(&self) -> bool {
        matches!(self, Phase::Pending { .. } | Phase::Settling { .. })
    }

    /// Whether nobody answered it yet: being posted, pending, settling or
    /// withdrawn. Such a prompt expires at its time and is evicted first at the cap.
    pub fn is_unanswered(&self) -> bool {
        self.is_answerable() || matches!(self, Phase::Posting { .. } | Phase::Withdrawn { .. })
    }
}

impl IdentityState {
    /// Whether `event_id` is a permission prompt's message: of a prompt the core
    /// holds (in any phase), or of one of the last retired ones. The one definition
    /// the agent's writes are judged by.
    pub fn is_prompt_message(&self, event_id: &EventId) -> bool {
        self.prompts
            .iter()
            .any(|p| !p.phase.is_auto() && p.phase.message() == Some(event_id))
            || self.retired_prompts.contains(event_id)
    }

    /// The request ids of the prompts the core holds, in any phase (being posted,
    /// pending, settling, decided or being delivered): the ids the agent's text may
    /// not name.
    pub fn open_request_ids(&self) -> Vec<RequestId> {
        let mut ids: Vec<RequestId> = self
            .prompts
            .iter()
            .map(|p| p.request.request_id.clone())
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// Remembers a retired prompt's message once, forgetting the oldest beyond
    /// `prompt_memory`.
    pub(super) fn remember_prompt(&mut self, message: EventId) {
        // A prompt evicted while its verdict was in flight is retired, then its
        // send completes: one slot, not two (a duplicate pushed an older one out).
        if self.retired_prompts.contains(&message) {
            return;
        }
        self.retired_prompts.push_back(message);
        while self.retired_prompts.len() > self.config.prompt_memory {
            self.retired_prompts.pop_front();
        }
    }

    /// A `permission_request` the server could not read: the session hears why
    /// (Claude Code's own dialog in the terminal still answers it), the operator's
    /// log says so, and nothing is posted.
    pub(super) fn on_invalid_request(
        &mut self,
        session: SessionId,
        error: String,
        out: &mut Out<'_>,
    ) {
        out.effects.push(Effect::LogMessage {
            identity: out.identity.clone(),
            session,
            message: format!(
                "matrix-channel did not relay a permission_request: {error}. Nothing was \
                 posted to Matrix; answer it in Claude Code."
            ),
        });
        out.drop(None, DropReason::InvalidPermissionRequest);
    }

    pub(super) fn on_request(
        &mut self,
        session: SessionId,
        request: PermissionRequest,
        out: &mut Out<'_>,
    ) {
        if !self.is_attached(&session) {
            return out.drop(None, DropReason::UnknownSession);
        }
        if !self.config.relays_permissions() {
            return out.drop(None, DropReason::NoApprovers);
        }
        // The first policy rule that matches decides; without one, a grant may.
        let rule = first_match(&self.config.policy, &request);
        let ruled = rule
            .as_ref()
            .is_some_and(|r| matches!(r.decision, RuleDecision::Allow | RuleDecision::Deny));
        // The operator's `permission_room`, else the room the session lives in. A
        // rule's or a grant's answer needs none (its line goes to the policy room or
        // the grant's own room).
        let room = self
            .config
            .permission_room
            .clone()
            .or_else(|| self.room_of(&session).cloned());
        let unasked = match &rule {
            Some(_) => ruled,
            None => self.covering_grant(&session, &request, out.now).is_some(),
        };
        if room.is_none() && !unasked {
            return out.drop(None, DropReason::NoPromptRoom);
        }
        if let Some(index) = self
            .prompts
            .iter()
            .position(|p| p.session == session && p.request.request_id == request.request_id)
        {
            self.retire(index, DropReason::PromptSuperseded, out);
        }
        // A request answered by a rule or a grant is held as a prompt until its
        // verdict is delivered: it takes a place under the cap like any other.
        while !self.prompts.is_empty() && self.prompts.len() >= self.config.max_prompts {
            // The oldest prompt nobody answered goes first; an answered one waiting
            // for its session goes only when every prompt is answered.
            let oldest = self
                .prompts
                .iter()
                .position(|p| p.phase.is_unanswered())
                .unwrap_or(0);
            self.retire(oldest, DropReason::PromptEvicted, out);
        }
        match rule {
            Some(rule) if ruled => return self.rule_answer(&session, &request, rule, room, out),
            None if self.auto_answer(&session, &request, out) => return,
            _ => {}
        }
        let Some(room) = room else {
            return out.drop(None, DropReason::NoPromptRoom);
        };
        let serial = self.next_serial;
        self.next_serial += 1;
        let post = out.id();
        let asker = Asker {
            label: self.labels.get(&session),
            session: &session,
        };
        let text = render_asked(&self.config, &request, Some(asker), rule.as_ref());
        out.in_flight.insert(
            post,
            InFlight::Post {
                identity: out.identity.clone(),
                room: room.clone(),
                request: request.clone(),
                text: Some(text.clone()),
                retired: None,
                withdrawn: false,
            },
        );
        out.effects.push(Effect::PostPrompt {
            id: post,
            identity: out.identity.clone(),
            room: room.clone(),
            request_id: request.request_id.clone(),
            text,
        });
        self.prompts.push(Prompt {
            session,
            serial,
            request,
            room,
            created_at: out.now,
            expires_at: out.now.saturating_add(self.config.prompt_ttl_ms),
            phase: Phase::Posting { post },
            rule,
            approvals: Vec::new(),
        });
    }

    /// Removes the prompt at `index` before its verdict reached the session; its
    /// message says why (expired, replaced, or dropped at the cap).
    pub(super) fn retire(&mut self, index: usize, reason: DropReason, out: &mut Out<'_>) {
        let prompt = self.prompts.remove(index);
        let outcome = match reason {
            DropReason::PromptSuperseded => PromptOutcome::Superseded,
            DropReason::PromptEvicted => PromptOutcome::Evicted,
            _ => PromptOutcome::Expired,
        };
        let text = render_outcome(&prompt.request, outcome);
        match &prompt.phase {
            Phase::Posting { post } => {
                if let Some(InFlight::Post { retired, .. }) = out.in_flight.get_mut(post) {
                    *retired = Some(text);
                }
            }
            // A grant's answer has no prompt message of its own.
            _ if prompt.phase.is_auto() => {}
            Phase::Pending { message }
            | Phase::Settling { message, .. }
            | Phase::Withdrawn { message }
            | Phase::Decided { message, .. }
            | Phase::Delivering { message, .. } => {
                self.remember_prompt(message.clone());
                out.effects.push(Effect::EditPrompt {
                    identity: out.identity.clone(),
                    room: prompt.room.clone(),
                    event_id: message.clone(),
                    text,
                })
            }
        }
        out.drop(prompt.phase.message(), reason);
    }

    /// A prompt post ended. The post's effect id names the prompt (ids are never
    /// reused), so a re-issued prompt is never mistaken for the one posted.
    /// `withdrawn`: the session's stream closed while it was being posted.
    pub(super) fn post_completed(
        &mut self,
        id: EffectId,
        room: RoomId,
        shown: PromptText,
        withdrawn: bool,
        outcome: Outcome,
        out: &mut Out<'_>,
    ) {
        let current = self
            .prompts
            .iter()
            .position(|p| p.phase == Phase::Posting { post: id });
        match (current, outcome) {
            (Some(index), Outcome::Posted { event_id }) => {
                self.prompts[index].phase = Phase::Pending { message: event_id };
                // The session's stream closed while its prompt was being posted,
                // and it has not attached again.
                if withdrawn && !self.is_attached(&self.prompts[index].session) {
                    self.withdraw(index, out);
                }
            }
            (Some(index), Outcome::Sent | Outcome::Created { .. } | Outcome::Failed { .. }) => {
                self.prompts.remove(index);
                out.drop(None, DropReason::PromptPostFailed);
            }
            (None, Outcome::Posted { event_id }) => {
                // The prompt expired or was replaced while it was being posted.
                self.remember_prompt(event_id.clone());
                out.effects.push(Effect::EditPrompt {
                    identity: out.identity.clone(),
                    room,
                    event_id,
                    text: shown,
                });
            }
            (None, Outcome::Sent | Outcome::Created { .. } | Outcome::Failed { .. }) => {
                out.drop(None, DropReason::StaleOutcome);
            }
        }
    }
}
