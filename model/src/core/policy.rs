//! The operator's policy in a prompt's life (docs/decisions/0029-policy.md): a
//! request a rule allows or denies is answered without asking and told in a line;
//! a prompt an `ask` rule needs several approvers for is allowed only once that many
//! distinct approvers said yes (a single no denies, as any deny does).

use super::identity::IdentityState;
use super::prompts::{Phase, Prompt};
use super::Out;
use crate::effect::{Decision, Effect, VerdictSource};
use crate::event::PermissionRequest;
use crate::ids::{EventId, RoomId, SessionId};
use crate::policy::{RuleDecision, RuleMatch};
use crate::prompt_text::render_ruled;
use crate::verdict::Behavior;

/// The message an answer by rule is held under: it has none of its own (nothing
/// replies to it, nothing edits it: `Phase::is_auto`).
const RULED: &str = "$policy-rule";

impl IdentityState {
    /// Answers `request` of `session` by `rule` (an `allow` or `deny`): held as a
    /// prompt decided by the rule (delivered like any verdict, exactly once), told
    /// by an [`Effect::Announce`] in the policy room, else in `room` (where its
    /// prompt would have gone); with neither, untold.
    pub(super) fn rule_answer(
        &mut self,
        session: &SessionId,
        request: &PermissionRequest,
        rule: RuleMatch,
        room: Option<RoomId>,
        out: &mut Out<'_>,
    ) {
        let behavior = match rule.decision {
            RuleDecision::Allow => Behavior::Allow,
            RuleDecision::Deny | RuleDecision::Ask { .. } => Behavior::Deny,
        };
        let serial = self.next_serial;
        self.next_serial += 1;
        let told = self.config.policy_room.clone().or(room);
        self.prompts.push(Prompt {
            session: session.clone(),
            serial,
            request: request.clone(),
            room: told.clone().unwrap_or_else(|| RoomId(String::new())),
            created_at: out.now,
            expires_at: out.now.saturating_add(self.config.prompt_ttl_ms),
            phase: Phase::Pending {
                message: EventId(RULED.to_owned()),
            },
            rule: None,
            approvals: Vec::new(),
        });
        if let Some(room) = told {
            let mut text = render_ruled(request, behavior, rule.number);
            let who = self.who(session);
            text.plain = format!("{} from {who}: {}", text.plain, rule.what);
            text.html = format!(
                "{}<p>from {} · rule: <code>{}</code></p>",
                text.html,
                html_escape::encode_text(&who),
                html_escape::encode_text(&rule.what)
            );
            out.effects.push(Effect::Announce {
                identity: out.identity.clone(),
                room,
                text,
            });
        }
        let decision = Decision {
            behavior,
            by: self.config.user_id.clone(),
            via: VerdictSource::Policy { rule: rule.number },
        };
        self.decide(self.prompts.len() - 1, decision, out);
    }

    /// An approver's allow of the prompt at `index` (`decision`, by text or a
    /// settled reaction; a deny decides at once): decided when the prompt's quorum
    /// of distinct approvers allowed it, else counted and told in a notice replying
    /// to the prompt.
    pub(super) fn approve(&mut self, index: usize, decision: Decision, out: &mut Out<'_>) {
        let quorum = self.prompts[index].quorum();
        if decision.behavior == Behavior::Deny || quorum <= 1 {
            return self.decide(index, decision, out);
        }
        let config = &self.config;
        let prompt = &mut self.prompts[index];
        // The operator may have removed an approver since they said yes.
        prompt.approvals.retain(|a| config.is_approver(a));
        let again = prompt.approvals.contains(&decision.by);
        if !again {
            prompt.approvals.push(decision.by.clone());
        }
        if prompt.approvals.len() >= quorum {
            return self.decide(index, decision, out);
        }
        let Some(message) = prompt.phase.message().cloned() else {
            return;
        };
        let names: Vec<String> = prompt.approvals.iter().map(|a| a.to_string()).collect();
        let rule = prompt
            .rule
            .as_ref()
            .map(|r| format!(" (rule {})", r.number))
            .unwrap_or_default();
        let text = format!(
            "{head}{id}: {have} of {quorum} approvals{rule}, from {names}. {more} more \
             approver{s} must say yes; a no from any denies.",
            head = match again {
                true => format!("{} already allowed ", decision.by),
                false => "Counted for ".to_owned(),
            },
            id = prompt.request.request_id,
            have = prompt.approvals.len(),
            names = names.join(", "),
            more = quorum - prompt.approvals.len(),
            s = if quorum - prompt.approvals.len() == 1 {
                ""
            } else {
                "s"
            },
        );
        let room = prompt.room.clone();
        out.notice(&room, &message, text);
    }
}
