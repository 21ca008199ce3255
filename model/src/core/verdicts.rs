//! Verdicts: text verdicts (`yes abcde`, by reply or in the prompt's room),
//! reaction votes and their settle window (deny wins, a vote can be withdrawn),
//! the decision, and its delivery to the session that asked, exactly once.

use super::identity::IdentityState;
use super::prompts::Phase;
use super::{InFlight, Out};
use crate::agent::matrix_to;
use crate::effect::{Decision, DropReason, Effect, PermissionVerdict, PromptText, VerdictSource};
use crate::event::{Message, Outcome};
use crate::ids::{EffectId, EventId, RoomId, UserId};
use crate::prompt_text::Asker;
use crate::verdict::{Behavior, RequestId, TextVerdict};
use serde::{Deserialize, Serialize};

/// An approver's reaction on a prompt.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Vote {
    pub voter: UserId,
    /// The raw key, for display (`yes` for a text allow that joined the window).
    pub key: String,
    pub behavior: Behavior,
    /// A text allow typed while a deny was settling, rather than a reaction.
    pub by_text: bool,
}

impl IdentityState {
    pub(super) fn on_vote(
        &mut self,
        index: usize,
        reaction: EventId,
        vote: Vote,
        out: &mut Out<'_>,
    ) {
        let prompt = &mut self.prompts[index];
        match &mut prompt.phase {
            Phase::Pending { message } => {
                prompt.phase = Phase::Settling {
                    message: message.clone(),
                    until: out.now.saturating_add(self.config.settle_ms),
                    votes: vec![(reaction, vote)],
                };
            }
            Phase::Settling { votes, .. } => votes.push((reaction, vote)),
            Phase::Withdrawn { message } => {
                let (room, message) = (prompt.room.clone(), message.clone());
                self.withdrawn_answered(index, &room, &message, &reaction, out)
            }
            Phase::Posting { .. } | Phase::Decided { .. } | Phase::Delivering { .. } => {
                out.drop(Some(&reaction), DropReason::AlreadyAnswered)
            }
        }
    }

    pub(super) fn on_text_verdict(
        &mut self,
        message: &Message,
        verdict: TextVerdict,
        out: &mut Out<'_>,
    ) {
        let id = &verdict.request_id;
        if let Err(reason) = self.config.verdict_devices.admits(message.device) {
            let text = refused_device_text(&reason, &format!("This answer to {id}"));
            out.notice(&message.room, &message.event_id, text);
            return out.drop(Some(&message.event_id), reason);
        }
        let reply_target = message
            .content
            .as_ref()
            .and_then(|c| c.relation.as_ref())
            .and_then(|r| r.reply_to())
            .map(|r| &r.event_id);
        let same_id: Vec<usize> = (0..self.prompts.len())
            .filter(|&i| {
                let p = &self.prompts[i];
                p.request.request_id == *id && p.phase.message().is_some()
            })
            .collect();
        // Without a reply, only the prompts posted in the room the answer was typed
        // in, and every one of them counts (answered or not) for ambiguity.
        let in_room: Vec<usize> = same_id
            .iter()
            .copied()
            .filter(|&i| self.prompts[i].room == message.room)
            .collect();
        // A reply names what it answers: the prompt it replies to, or nothing.
        let replied = reply_target.map(|target| {
            same_id
                .iter()
                .copied()
                .find(|&i| self.prompts[i].phase.message() == Some(target))
        });
        let target = match (replied, in_room.as_slice()) {
            (Some(Some(index)), _) => index,
            (Some(None), _) => {
                let answerable: Vec<usize> = in_room
                    .iter()
                    .copied()
                    .filter(|&i| self.prompts[i].phase.is_answerable())
                    .collect();
                let pointer = match answerable.as_slice() {
                    [index] => {
                        let prompt = &self.prompts[*index];
                        let link = prompt
                            .phase
                            .message()
                            .map(|m| matrix_to(&prompt.room, m))
                            .unwrap_or_default();
                        format!(
                            " The prompt for {id} is {link}: reply to it, or answer without a reply."
                        )
                    }
                    _ => String::new(),
                };
                out.notice(
                    &message.room,
                    &message.event_id,
                    format!("This replies to a message that is not the pending prompt for {id}, so it answers nothing.{pointer}"),
                );
                return out.drop(Some(&message.event_id), DropReason::ReplyNotToPrompt);
            }
            (None, [index]) => *index,
            (None, []) => {
                // Answerable prompts with this id in other rooms: the approver is
                // told where (a Matrix reply cannot cross rooms).
                let elsewhere: Vec<String> = same_id
                    .iter()
                    .map(|&i| &self.prompts[i])
                    .filter(|p| p.phase.is_answerable())
                    .filter_map(|p| p.phase.message().map(|m| matrix_to(&p.room, m)))
                    .collect();
                let text = match elsewhere.as_slice() {
                    [] => format!("No pending permission request {id}: it expired, was answered, or was never issued."),
                    [link] => format!("Permission request {id} waits in another room: {link}. Answer it there."),
                    links => format!(
                        "Permission request {id} waits in other rooms: {}. Answer it in the room of the prompt you mean.",
                        links.join(", ")
                    ),
                };
                out.notice(&message.room, &message.event_id, text);
                return out.drop(Some(&message.event_id), DropReason::UnknownRequest);
            }
            (None, _) => {
                out.notice(
                    &message.room,
                    &message.event_id,
                    format!("Several sessions are waiting on {id}: reply to the prompt you mean."),
                );
                return out.drop(Some(&message.event_id), DropReason::AmbiguousRequest);
            }
        };
        if let Phase::Withdrawn { .. } = self.prompts[target].phase {
            return self.withdrawn_answered(
                target,
                &message.room,
                &message.event_id,
                &message.event_id,
                out,
            );
        }
        if !self.prompts[target].phase.is_answerable() {
            return self.already_answered(message, id, out);
        }
        let decision = Decision {
            behavior: verdict.behavior,
            by: message.sender.clone(),
            via: VerdictSource::Text {
                event_id: message.event_id.clone(),
            },
        };
        if verdict.behavior == Behavior::Allow && self.deny_is_settling(target) {
            if verdict.grant.is_some() {
                self.grant_refused(message, crate::grant::GrantRefused::Disputed, out);
            }
            // Deny wins: an allow typed while an approver's deny reaction settles
            // joins the votes and is weighed when the window ends.
            if let Phase::Settling { votes, .. } = &mut self.prompts[target].phase {
                let vote = Vote {
                    voter: message.sender.clone(),
                    key: "yes".to_owned(),
                    behavior: Behavior::Allow,
                    by_text: true,
                };
                votes.push((message.event_id.clone(), vote));
            }
            out.notice(
                &message.room,
                &message.event_id,
                format!("A deny reaction on {id} is settling: deny wins unless it is withdrawn."),
            );
            return;
        }
        // Only an allow carries a grant (`always`, `yes <id> 30m`).
        if let Some(ask) = &verdict.grant {
            match &self.prompts[target].rule {
                // An `ask` rule's requests are asked every time.
                Some(rule) => self.grant_refused(
                    message,
                    crate::grant::GrantRefused::RuleAsks { rule: rule.number },
                    out,
                ),
                _ => self.make_grant(target, ask, message, out),
            }
        }
        self.approve(target, decision, out);
    }

    /// Whether an approver's deny vote is settling on the prompt at `index`.
    pub(super) fn deny_is_settling(&self, index: usize) -> bool {
        match &self.prompts[index].phase {
            Phase::Settling { votes, .. } => votes
                .iter()
                .any(|(_, v)| v.behavior == Behavior::Deny && self.config.is_approver(&v.voter)),
            _ => false,
        }
    }

    pub(super) fn already_answered(
        &mut self,
        message: &Message,
        id: &RequestId,
        out: &mut Out<'_>,
    ) {
        out.notice(
            &message.room,
            &message.event_id,
            format!("Permission request {id} was already answered."),
        );
        out.drop(Some(&message.event_id), DropReason::AlreadyAnswered);
    }

    pub(super) fn decide(&mut self, index: usize, decision: Decision, out: &mut Out<'_>) {
        let prompt = &mut self.prompts[index];
        let Some(message) = prompt.phase.message().cloned() else {
            return;
        };
        out.effects.push(Effect::Decided {
            identity: out.identity.clone(),
            session: prompt.session.clone(),
            request_id: prompt.request.request_id.clone(),
            decision: decision.clone(),
            at: out.now,
        });
        prompt.phase = Phase::Decided {
            message: message.clone(),
            decision,
        };
        let (session, serial, room) = (prompt.session.clone(), prompt.serial, prompt.room.clone());
        if self.is_live(&session) {
            self.start_delivery(serial, out);
        } else if !self.is_attached(&session) {
            // The approver learns the answer waits: the session that asked is gone
            // (it may come back, `claude --resume`).
            let who = Asker {
                label: self.labels.get(&session),
                session: &session,
            }
            .name();
            out.notice(
                &room,
                &message,
                format!(
                    "The session that asked, {who}, is not connected: the answer reaches it \
                     when it connects again."
                ),
            );
        }
    }

    pub(super) fn start_delivery(&mut self, serial: u64, out: &mut Out<'_>) {
        let generations = &self.generations;
        let Some(prompt) = self.prompts.iter_mut().find(|p| p.serial == serial) else {
            return;
        };
        let generation = generations.get(&prompt.session).copied().unwrap_or(0);
        let Phase::Decided { message, decision } = &prompt.phase else {
            return;
        };
        let send = out.id();
        out.in_flight.insert(
            send,
            InFlight::Verdict {
                identity: out.identity.clone(),
                serial,
                generation,
                room: prompt.room.clone(),
                message: message.clone(),
                request: prompt.request.clone(),
                decision: decision.clone(),
            },
        );
        out.effects.push(Effect::SendVerdict {
            id: send,
            identity: out.identity.clone(),
            session: prompt.session.clone(),
            verdict: PermissionVerdict {
                request_id: prompt.request.request_id.clone(),
                behavior: decision.behavior,
            },
        });
        prompt.phase = Phase::Delivering {
            message: message.clone(),
            decision: decision.clone(),
            send,
        };
    }

    /// A verdict send ended. `shown` is the prompt message and its outcome text;
    /// `None` for a grant's answer, which has no prompt message of its own.
    pub(super) fn verdict_completed(
        &mut self,
        id: EffectId,
        serial: u64,
        generation: u64,
        outcome: Outcome,
        shown: Option<(RoomId, EventId, PromptText)>,
        out: &mut Out<'_>,
    ) {
        // The send's effect id names the delivery (ids are never reused), so a
        // prompt re-issued under the same request id is never mistaken for it.
        let current = self
            .prompts
            .iter()
            .position(|p| matches!(p.phase, Phase::Delivering { send, .. } if send == id));
        let Some(index) = current else {
            // The prompt was evicted or replaced while its verdict was in flight.
            // If the verdict arrived, the message still shows what was decided.
            if let (Outcome::Sent, Some((room, event_id, text))) = (&outcome, shown) {
                self.remember_prompt(event_id.clone());
                out.effects.push(Effect::EditPrompt {
                    identity: out.identity.clone(),
                    room,
                    event_id,
                    text,
                });
            }
            return out.drop(None, DropReason::StaleOutcome);
        };
        let prompt = &mut self.prompts[index];
        let Phase::Delivering {
            message, decision, ..
        } = &prompt.phase
        else {
            return;
        };
        if let Outcome::Failed { .. } = outcome {
            prompt.phase = Phase::Decided {
                message: message.clone(),
                decision: decision.clone(),
            };
            let session = prompt.session.clone();
            self.lost_stream(&session, generation, out);
            // Attached again since the send: deliver to the new stream now.
            if self.is_live(&session) {
                self.start_delivery(serial, out);
            }
            return;
        }
        self.prompts.remove(index);
        if let Some((room, event_id, text)) = shown {
            self.remember_prompt(event_id.clone());
            out.effects.push(Effect::EditPrompt {
                identity: out.identity.clone(),
                room,
                event_id,
                text,
            });
        }
    }

    /// The settle window ended: the verdict is taken on the votes still there, deny
    /// winning over approve; with none left, the prompt is pending again.
    pub(super) fn settle(&mut self, serial: u64, out: &mut Out<'_>) {
        let Some(index) = self.prompts.iter().position(|p| p.serial == serial) else {
            return;
        };
        let prompt = &mut self.prompts[index];
        let Phase::Settling { message, votes, .. } = &prompt.phase else {
            return;
        };
        // The operator may have removed an approver while the window was open.
        let config = &self.config;
        let votes: Vec<&(EventId, Vote)> = votes
            .iter()
            .filter(|(_, v)| config.is_approver(&v.voter))
            .collect();
        let deciding = votes
            .iter()
            .copied()
            .find(|(_, v)| v.behavior == Behavior::Deny)
            .or_else(|| votes.first().copied());
        let Some((event_id, vote)) = deciding else {
            prompt.phase = Phase::Pending {
                message: message.clone(),
            };
            return;
        };
        // Every approver whose allow is still there counts towards the quorum; the
        // window is over, so the prompt is pending again until the quorum is met.
        let allowed: Vec<_> = votes
            .iter()
            .filter(|(_, v)| v.behavior == Behavior::Allow)
            .map(|(_, v)| v.voter.clone())
            .collect();
        // (A deny decides at once, and a quorum of one at the first allow: the
        // phase is then the decision's.)
        let (event_id, vote) = (event_id.clone(), vote.clone());
        prompt.phase = Phase::Pending {
            message: message.clone(),
        };
        if prompt.quorum() != 1 {
            for voter in allowed {
                if voter != vote.voter && !prompt.approvals.contains(&voter) {
                    prompt.approvals.push(voter);
                }
            }
        }
        let via = match vote.by_text {
            true => VerdictSource::Text { event_id },
            false => VerdictSource::Reaction {
                event_id,
                key: vote.key.clone(),
            },
        };
        let decision = Decision {
            behavior: vote.behavior,
            by: vote.voter,
            via,
        };
        self.approve(index, decision, out);
    }
}

/// The notice that refuses a verdict for its device (`what` names the verdict:
/// "This answer to abcde", "This reaction"). `reason` is what
/// [`crate::VerdictDevices::admits`] answered.
pub(super) fn refused_device_text(reason: &DropReason, what: &str) -> String {
    match reason {
        DropReason::ClearVerdict => format!(
            "{what} was sent unencrypted, so it says nothing of the device it came from \
             and counts for nothing: answer in an encrypted room from a device you \
             have cross-signed (a reaction is often sent unencrypted: type the answer)."
        ),
        _ => format!(
            "{what} came from a device you have not cross-signed, so it counts for \
             nothing. Verify the device from one you trust (in Element: Settings, \
             Sessions), then answer again."
        ),
    }
}
