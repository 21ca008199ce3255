//! Matrix events from the timeline, after the sender gate: messages (chat, edits,
//! text verdicts, notices), reactions (votes on prompts, or chat), redactions
//! (withdrawn votes, retractions, parked events that will never be read), and the
//! agent's acknowledgements.

use super::delivery::{LogEntry, Record};
use super::identity::IdentityState;
use super::prompts::Phase;
use super::verdicts::{refused_device_text, Vote};
use super::Out;
use crate::classify::{classify_message, classify_reaction, MessageClass, ReactionClass};
use crate::config::Gate;
use crate::effect::{DropReason, Effect};
use crate::event::{Message, MsgType, Reaction, Redaction};
use crate::ids::{EventId, SessionId};
use crate::render::{render_edit, render_message, render_reaction, render_retraction, PushKind};

impl IdentityState {
    pub(super) fn on_message(&mut self, message: Message, out: &mut Out<'_>) {
        if self.is_history(&message.room, &message.event_id) {
            return out.drop(Some(&message.event_id), DropReason::NotJoined);
        }
        let gate = self.config.gate(&message.sender);
        let class = classify_message(gate, &message);
        if matches!(gate, Gate::Own | Gate::Stranger) {
            if let MessageClass::Drop(reason) = class {
                out.drop(Some(&message.event_id), reason);
            }
            return;
        }
        if self.log.contains_key(&message.event_id) {
            out.drop(Some(&message.event_id), DropReason::Duplicate);
            return;
        }
        // The room an unlabelled session's prompts go to: never a session's room.
        if message
            .content
            .as_ref()
            .is_some_and(|c| c.msgtype != MsgType::Notice)
            && !self.is_bound_room(&message.room)
        {
            self.last_room = Some(message.room.clone());
        }
        match class {
            MessageClass::Drop(reason) => {
                self.log(&message.event_id, &message.sender, Record::NotPushed, out);
                out.drop(Some(&message.event_id), reason);
            }
            MessageClass::Command(command) => {
                self.log(&message.event_id, &message.sender, Record::Command, out);
                self.on_room_command(&message, command, out);
            }
            MessageClass::Verdict(verdict) => {
                self.log(&message.event_id, &message.sender, Record::Verdict, out);
                self.on_text_verdict(&message, verdict, out);
            }
            MessageClass::Chat(content) => {
                let notification = render_message(&self.config, &message, content);
                self.log_and_deliver(
                    &message.event_id,
                    (&message.sender, &message.room),
                    PushKind::Message,
                    notification,
                    out,
                );
            }
            MessageClass::Edit {
                original,
                new_content,
            } => {
                let accepted = matches!(
                    self.log.get(original),
                    Some(LogEntry { sender, record: Record::Pushed { kind: PushKind::Message, .. }, .. })
                        if *sender == message.sender
                );
                if accepted {
                    let notification = render_edit(&self.config, &message, original, new_content);
                    self.log_and_deliver(
                        &message.event_id,
                        (&message.sender, &message.room),
                        PushKind::Edit,
                        notification,
                        out,
                    );
                } else {
                    self.log(&message.event_id, &message.sender, Record::NotPushed, out);
                    out.drop(Some(&message.event_id), DropReason::EditRejected);
                }
            }
        }
    }

    pub(super) fn on_reaction(&mut self, reaction: Reaction, out: &mut Out<'_>) {
        if self.is_history(&reaction.room, &reaction.event_id) {
            return out.drop(Some(&reaction.event_id), DropReason::NotJoined);
        }
        let gate = self.config.gate(&reaction.sender);
        let prompt = self
            .prompts
            .iter()
            .position(|p| p.phase.message() == Some(&reaction.relates_to));
        let class = classify_reaction(
            gate,
            &self.config.reaction_keys,
            prompt.is_some(),
            &reaction.key,
        );
        if let ReactionClass::Drop(reason @ (DropReason::OwnEvent | DropReason::Stranger)) = class {
            out.drop(Some(&reaction.event_id), reason);
            return;
        }
        if self.log.contains_key(&reaction.event_id) {
            out.drop(Some(&reaction.event_id), DropReason::Duplicate);
            return;
        }
        // A vote from a device the settings do not admit is no vote; the notice
        // replies to the prompt it was meant for.
        if let (ReactionClass::Vote(_), Some(_)) = (&class, prompt) {
            if let Err(reason) = self.config.verdict_devices.admits(reaction.device) {
                self.log(&reaction.event_id, &reaction.sender, Record::NotPushed, out);
                let text = refused_device_text(&reason, "This reaction");
                out.notice(&reaction.room, &reaction.relates_to, text);
                return out.drop(Some(&reaction.event_id), reason);
            }
        }
        match (class, prompt) {
            (ReactionClass::Vote(behavior), Some(index)) => {
                self.log(&reaction.event_id, &reaction.sender, Record::Vote, out);
                let vote = Vote {
                    voter: reaction.sender.clone(),
                    key: reaction.key.clone(),
                    behavior,
                    by_text: false,
                };
                self.on_vote(index, reaction.event_id, vote, out);
            }
            (ReactionClass::Drop(reason), _) => {
                self.log(&reaction.event_id, &reaction.sender, Record::NotPushed, out);
                out.drop(Some(&reaction.event_id), reason);
            }
            // A vote is only ever classified on a prompt, so `(Vote, None)` is chat.
            (ReactionClass::Chat | ReactionClass::Vote(_), _) => {
                let notification = render_reaction(&reaction);
                self.log_and_deliver(
                    &reaction.event_id,
                    (&reaction.sender, &reaction.room),
                    PushKind::Reaction,
                    notification,
                    out,
                );
            }
        }
    }

    pub(super) fn on_redaction(&mut self, redaction: Redaction, out: &mut Out<'_>) {
        if self.is_history(&redaction.room, &redaction.event_id) {
            return out.drop(Some(&redaction.event_id), DropReason::NotJoined);
        }
        match self.config.gate(&redaction.sender) {
            Gate::Own => return out.drop(Some(&redaction.event_id), DropReason::OwnEvent),
            Gate::Stranger => return out.drop(Some(&redaction.event_id), DropReason::Stranger),
            Gate::Allowed | Gate::Approver => {}
        }
        if self.log.contains_key(&redaction.event_id) {
            return out.drop(Some(&redaction.event_id), DropReason::Duplicate);
        }
        // A parked undecryptable event redacted by its sender: it will never be read.
        if let Some(at) = self.undecryptable.iter().position(|p| {
            p.event.event_id == redaction.redacts && p.event.sender == redaction.sender
        }) {
            self.undecryptable.remove(at);
            self.log(
                &redaction.event_id,
                &redaction.sender,
                Record::NotPushed,
                out,
            );
            return out.drop(Some(&redaction.redacts), DropReason::RedactedBeforeDelivery);
        }
        // A withdrawal: the voter redacts their own vote inside the settle window.
        for prompt in &mut self.prompts {
            if let Phase::Settling { votes, .. } = &mut prompt.phase {
                if let Some(at) = votes.iter().position(|(id, _)| *id == redaction.redacts) {
                    if votes[at].1.voter == redaction.sender {
                        votes.remove(at);
                        self.log(
                            &redaction.event_id,
                            &redaction.sender,
                            Record::NotPushed,
                            out,
                        );
                    } else {
                        self.log(
                            &redaction.event_id,
                            &redaction.sender,
                            Record::NotPushed,
                            out,
                        );
                        out.drop(Some(&redaction.event_id), DropReason::WithdrawalByOther);
                    }
                    return;
                }
            }
        }
        let delivered = match self.log.get_mut(&redaction.redacts) {
            Some(LogEntry {
                record:
                    Record::Pushed {
                        delivered,
                        redacted,
                        ..
                    },
                ..
            }) => {
                *redacted = true;
                delivered.len()
            }
            _ => {
                self.log(
                    &redaction.event_id,
                    &redaction.sender,
                    Record::NotPushed,
                    out,
                );
                return out.drop(Some(&redaction.event_id), DropReason::RedactionOfUnpushed);
            }
        };
        if delivered == 0 {
            // Still queued: no session saw it, so none will.
            self.queue.retain(|q| q.event_id != redaction.redacts);
            self.log(
                &redaction.event_id,
                &redaction.sender,
                Record::NotPushed,
                out,
            );
            return out.drop(Some(&redaction.redacts), DropReason::RedactedBeforeDelivery);
        }
        let notification = render_retraction(&redaction);
        self.log_and_deliver(
            &redaction.event_id,
            (&redaction.sender, &redaction.room),
            PushKind::Retraction,
            notification,
            out,
        );
    }

    pub(super) fn on_ack(
        &mut self,
        session: Option<&SessionId>,
        event_id: &EventId,
        out: &mut Out<'_>,
    ) {
        if session.is_some_and(|s| !self.sessions.contains_key(s)) {
            return out.drop(Some(event_id), DropReason::UnknownSession);
        }
        match self.log.get_mut(event_id) {
            Some(LogEntry {
                record: Record::Pushed { acked, .. },
                ..
            }) => {
                *acked = true;
                self.queue.retain(|q| q.event_id != *event_id);
                out.effects.push(Effect::Acknowledged {
                    identity: out.identity.clone(),
                    session: session.cloned(),
                    event_id: event_id.clone(),
                });
            }
            _ => out.drop(Some(event_id), DropReason::UnknownEvent),
        }
    }
}
