//! Grants (docs/decisions/0027-grants.md): an approver's `always abcde` or `yes
//! abcde 30m` allows the prompt and makes a [`Grant`]; a later request of the
//! **same session**, for the **same tool**, whose subject the grant's
//! [`InputScope`] covers, is answered `allow` at once ([`IdentityState::auto_answer`])
//! with a line in the grant's room. A grant ends when it expires (at most
//! [`GRANT_MAX_MS`] after it was made), when its session detaches, when an
//! approver types `revoke <n>` / `revoke all` (`grants` lists them), or when the
//! operator runs `matrix-channel revoke` ([`crate::Input::Revoke`]).

use super::identity::IdentityState;
use super::prompts::{Phase, Prompt};
use super::Out;
use crate::classify::GrantCommand;
use crate::effect::{Decision, Effect, VerdictSource};
use crate::event::{Message, PermissionRequest};
use crate::fallback::clip_chars;
use crate::grant::{scope_for, subject, GrantAsk, GrantRefused, InputScope, Lasts, GRANT_MAX_MS};
use crate::ids::{EventId, RoomId, SessionId, Timestamp, UserId};
use crate::prompt_text::Asker;
use crate::verdict::Behavior;
use serde::{Deserialize, Serialize};

/// The most grants an identity holds at once; an approver asking for one more is
/// told to revoke one first (the allow itself stands).
pub const MAX_GRANTS: usize = 16;

/// At most this many characters of a grant's subject or prefix are shown in a
/// notice (the grant matches on all of it).
const SHOWN_CHARS: usize = 200;

/// A grant: requests of `session` for `tool` whose subject `scope` covers are
/// allowed until `expires_at`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Grant {
    /// Per identity, from 1, never reused: `revoke 3` names grant 3.
    pub id: u64,
    pub session: SessionId,
    /// The tool's name exactly as Claude Code sent it (`Bash`, `mcp__srv__tool`).
    pub tool: String,
    pub scope: InputScope,
    /// What the approver asked for.
    pub lasts: Lasts,
    /// Milliseconds: the grant covers nothing from this instant on.
    pub expires_at: Timestamp,
    /// The approver who made it.
    pub by: UserId,
    /// The room the approver typed it in, and the message: the grant's notices
    /// reply to it.
    pub room: RoomId,
    pub message: EventId,
}

/// Why a grant ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "ended", rename_all = "snake_case")]
pub enum GrantEnd {
    /// Its time ran out.
    Expired,
    /// Its session's stream closed (`Input::Detach`).
    SessionEnded,
    /// An approver revoked it.
    Revoked { by: UserId },
    /// The operator revoked it (`matrix-channel revoke`).
    Operator,
}

impl Grant {
    /// Whether the grant answers `request` of `session` at `now`.
    pub fn covers(&self, session: &SessionId, request: &PermissionRequest, now: Timestamp) -> bool {
        now < self.expires_at
            && self.session == *session
            && self.tool == request.tool_name
            && subject(&request.tool_name, &request.input_preview)
                .is_some_and(|s| self.scope.covers(&s))
    }

    /// `Bash calls whose input is exactly "cargo test"`, clipped for a phone.
    fn what(&self) -> String {
        let (text, cut) = clip_chars(self.scope.text(), SHOWN_CHARS);
        let text = format!("{text}{}", if cut { "…" } else { "" });
        let tool = shown(&self.tool);
        match &self.scope {
            InputScope::Exact(_) => format!("{tool} calls on exactly `{text}`"),
            InputScope::Prefix(_) => format!("{tool} calls on anything starting with `{text}`"),
        }
    }
}

/// A tool name as a notice shows it: without control and format characters,
/// clipped to [`SHOWN_CHARS`] (a grant's subject holds none: `grant::is_hidden`).
fn shown(tool: &str) -> String {
    let visible = crate::grant::visible(tool);
    clip_chars(&visible, SHOWN_CHARS).0.to_owned()
}

impl IdentityState {
    /// The identity's grants, oldest first (expired ones may linger until the next
    /// request or command prunes them; [`Grant::covers`] never counts them).
    pub fn grants(&self) -> &[Grant] {
        &self.grants
    }

    /// The first grant that answers `request` of `session` at `now`.
    pub fn covering_grant(
        &self,
        session: &SessionId,
        request: &PermissionRequest,
        now: Timestamp,
    ) -> Option<&Grant> {
        self.grants.iter().find(|g| g.covers(session, request, now))
    }

    pub(super) fn who(&self, session: &SessionId) -> String {
        Asker {
            label: self.labels.get(session),
            session,
        }
        .name()
    }

    /// Makes the grant `ask` on the prompt at `index`, answered by `message` (an
    /// approver's allow): told in a notice replying to it, and as
    /// [`Effect::Granted`]. A grant that cannot be made is told; the allow stands.
    pub(super) fn make_grant(
        &mut self,
        index: usize,
        ask: &GrantAsk,
        message: &Message,
        out: &mut Out<'_>,
    ) {
        self.prune_grants(out);
        let prompt = &self.prompts[index];
        let made = scope_for(
            &prompt.request.tool_name,
            &prompt.request.input_preview,
            ask.prefix.as_deref(),
        )
        .and_then(|scope| match self.grants.len() >= MAX_GRANTS {
            true => Err(GrantRefused::TooMany { max: MAX_GRANTS }),
            false => Ok(scope),
        })
        .and_then(|scope| match self.is_attached(&prompt.session) {
            true => Ok(scope),
            false => Err(GrantRefused::SessionGone),
        });
        let scope = match made {
            Ok(scope) => scope,
            Err(refused) => return self.grant_refused(message, refused, out),
        };
        let ms = match ask.lasts {
            Lasts::Session => GRANT_MAX_MS,
            Lasts::For { ms } => ms.min(GRANT_MAX_MS),
        };
        self.next_grant += 1;
        let grant = Grant {
            id: self.next_grant,
            session: prompt.session.clone(),
            tool: prompt.request.tool_name.clone(),
            scope,
            lasts: ask.lasts,
            expires_at: out.now.saturating_add(ms),
            by: message.sender.clone(),
            room: message.room.clone(),
            message: message.event_id.clone(),
        };
        let cap = match ask.lasts {
            Lasts::Session => " (at most 24 h)",
            Lasts::For { .. } => "",
        };
        out.notice(
            &message.room,
            &message.event_id,
            format!(
                "Grant {n}: {what} from {who} are allowed without asking, {lasts}{cap}. \
                 \"revoke {n}\" ends it; \"grants\" lists them.",
                n = grant.id,
                what = grant.what(),
                who = self.who(&grant.session),
                lasts = grant.lasts,
            ),
        );
        out.effects.push(Effect::Granted {
            identity: out.identity.clone(),
            grant: grant.clone(),
        });
        self.grants.push(grant);
    }

    /// The notice for a grant not made; the allow it came with stands.
    pub(super) fn grant_refused(
        &self,
        message: &Message,
        refused: GrantRefused,
        out: &mut Out<'_>,
    ) {
        out.notice(
            &message.room,
            &message.event_id,
            format!("Allowed once, without a grant: {refused}."),
        );
    }

    /// Answers `request` of `session` with the first grant that covers it: the
    /// request becomes a prompt decided `allow` by the grant (delivered like any
    /// verdict, exactly once), told by a line replying to the grant's message.
    /// `false`: no grant covers it.
    pub(super) fn auto_answer(
        &mut self,
        session: &SessionId,
        request: &PermissionRequest,
        out: &mut Out<'_>,
    ) -> bool {
        self.prune_grants(out);
        let Some(grant) = self.covering_grant(session, request, out.now).cloned() else {
            return false;
        };
        let serial = self.next_serial;
        self.next_serial += 1;
        // The prompt has no message of its own: it names the grant's.
        self.prompts.push(Prompt {
            session: session.clone(),
            serial,
            request: request.clone(),
            room: grant.room.clone(),
            created_at: out.now,
            expires_at: out.now.saturating_add(self.config.prompt_ttl_ms),
            phase: Phase::Pending {
                message: grant.message.clone(),
            },
            rule: None,
            approvals: Vec::new(),
        });
        out.notice(
            &grant.room,
            &grant.message,
            format!(
                "✅ Allowed by grant {}: {} request {} from {}.",
                grant.id,
                shown(&request.tool_name),
                request.request_id,
                self.who(session)
            ),
        );
        let decision = Decision {
            behavior: Behavior::Allow,
            by: grant.by.clone(),
            via: VerdictSource::Grant { grant: grant.id },
        };
        self.decide(self.prompts.len() - 1, decision, out);
        true
    }

    /// Ends the grants of a session whose stream closed.
    pub(super) fn end_session_grants(&mut self, session: &SessionId, out: &mut Out<'_>) {
        self.end_grants(|g| g.session == *session, GrantEnd::SessionEnded, out);
    }

    /// Ends expired grants.
    fn prune_grants(&mut self, out: &mut Out<'_>) {
        let now = out.now;
        self.end_grants(|g| g.expires_at <= now, GrantEnd::Expired, out);
    }

    /// Ends the grants `which` accepts, each told as [`Effect::GrantEnded`] and, but
    /// for an approver's revocation (whose command gets one notice), in a notice
    /// replying to the grant's message.
    fn end_grants(&mut self, which: impl Fn(&Grant) -> bool, why: GrantEnd, out: &mut Out<'_>) {
        let (ended, kept): (Vec<Grant>, Vec<Grant>) = std::mem::take(&mut self.grants)
            .into_iter()
            .partition(which);
        self.grants = kept;
        for grant in ended {
            let said = match &why {
                GrantEnd::Expired => Some("its time ran out"),
                GrantEnd::SessionEnded => Some("its session disconnected"),
                GrantEnd::Operator => Some("the operator revoked it"),
                GrantEnd::Revoked { .. } => None,
            };
            if let Some(said) = said {
                out.notice(
                    &grant.room,
                    &grant.message,
                    format!("Grant {} ended: {said}.", grant.id),
                );
            }
            out.effects.push(Effect::GrantEnded {
                identity: out.identity.clone(),
                id: grant.id,
                why: why.clone(),
            });
        }
    }

    /// The operator's [`crate::Input::Revoke`]: grant `which`, or every grant.
    pub(super) fn on_operator_revoke(&mut self, which: Option<u64>, out: &mut Out<'_>) {
        self.prune_grants(out);
        self.end_grants(|g| which.is_none_or(|n| g.id == n), GrantEnd::Operator, out);
    }

    /// An approver's `grants`, `revoke <n>` or `revoke all`, answered in a notice
    /// replying to it.
    pub(super) fn on_grant_command(
        &mut self,
        message: &Message,
        command: GrantCommand,
        out: &mut Out<'_>,
    ) {
        self.prune_grants(out);
        let text = match command {
            GrantCommand::List => match self.grants.as_slice() {
                [] => "No grants: every permission request is asked.".to_owned(),
                grants => {
                    let lines: Vec<String> = grants
                        .iter()
                        .map(|g| {
                            format!(
                                "{}: {} from {}, by {}, {} min left",
                                g.id,
                                g.what(),
                                self.who(&g.session),
                                g.by,
                                g.expires_at.0.saturating_sub(out.now.0).div_ceil(60_000)
                            )
                        })
                        .collect();
                    format!("Grants:\n{}", lines.join("\n"))
                }
            },
            GrantCommand::Revoke(which) => {
                let revoked = |g: &Grant| which.is_none_or(|n| g.id == n);
                let ids: Vec<u64> = self
                    .grants
                    .iter()
                    .filter(|g| revoked(g))
                    .map(|g| g.id)
                    .collect();
                self.end_grants(
                    revoked,
                    GrantEnd::Revoked {
                        by: message.sender.clone(),
                    },
                    out,
                );
                match (ids.as_slice(), which) {
                    ([], Some(n)) => format!("No grant {n}: \"grants\" lists them."),
                    ([], None) => "No grants to revoke.".to_owned(),
                    (ids, _) => {
                        let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
                        format!(
                            "Revoked: grant {}. Those requests are asked again.",
                            ids.join(", ")
                        )
                    }
                }
            }
        };
        out.notice(&message.room, &message.event_id, text);
    }
}

impl Phase {
    /// Whether a grant or a policy rule answered the prompt (it has no message of
    /// its own).
    pub fn is_auto(&self) -> bool {
        match self {
            Phase::Decided { decision, .. } | Phase::Delivering { decision, .. } => {
                decision.via.is_auto()
            }
            Phase::Posting { .. }
            | Phase::Pending { .. }
            | Phase::Settling { .. }
            | Phase::Withdrawn { .. } => false,
        }
    }
}
