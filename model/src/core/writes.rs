//! The agent's writes ([`crate::Input::AgentWrite`]), judged by the rules of
//! [`crate::agent`] in their order and performed or refused in one transition: no
//! prompt touched, only its own messages edited, no open request id named, no room
//! of a held prompt left, no prompt room's name or topic set; another identity's
//! prompts refuse it as its own would.

use super::identity::IdentityState;
use super::{InFlight, Out};
use crate::agent::{names_request_id, AgentWrite};
use crate::effect::{DropReason, Effect};
use crate::ids::CallId;
use crate::verdict::RequestId;

impl IdentityState {
    /// Judges an agent's write by the rules of [`crate::agent`], in their order, and
    /// either performs it or refuses it: one transition, so nothing can change
    /// between the check and the send.
    /// `foreign`: why another identity's prompts refuse the write, if they do
    /// (judged by the same rules, [`IdentityState::judge_prompt_rules`]).
    pub(super) fn on_agent_write(
        &mut self,
        call: CallId,
        write: AgentWrite,
        foreign: Option<DropReason>,
        out: &mut Out<'_>,
    ) {
        let judged = self
            .judge_write(&write)
            .and_then(|()| foreign.map_or(Ok(()), Err));
        match judged {
            Err(reason) => out.effects.push(Effect::WriteRefused {
                identity: out.identity.clone(),
                call,
                reason,
            }),
            Ok(()) => {
                // The agent answers in the room: it no longer shows typing there.
                if let AgentWrite::Message { room, .. }
                | AgentWrite::Edit { room, .. }
                | AgentWrite::File { room, .. } = &write
                {
                    self.stop_typing(room, out);
                }
                // A room the agent creates has the identity's allowed senders in it.
                let write = write.with_allowed(&self.config.allowed_senders, &self.config.user_id);
                let id = out.id();
                out.in_flight.insert(
                    id,
                    InFlight::Write {
                        identity: out.identity.clone(),
                        call,
                    },
                );
                out.effects.push(Effect::Write {
                    id,
                    identity: out.identity.clone(),
                    call,
                    write,
                });
            }
        }
    }

    /// The identity's own agent's write, by every rule, in order: no prompt
    /// touched, only its own messages edited, no open request id named, no room of a
    /// held prompt left, no prompt room's name or topic set.
    pub(super) fn judge_write(&self, write: &AgentWrite) -> Result<(), DropReason> {
        if self.targets_a_prompt(write) {
            return Err(DropReason::PromptTarget);
        }
        if let AgentWrite::Edit {
            original_sender, ..
        } = write
        {
            if *original_sender != self.config.user_id {
                return Err(DropReason::NotOwnMessage);
            }
        }
        if let Some(request_id) = self.named_open_id(write) {
            return Err(DropReason::NamesOpenRequest { request_id });
        }
        if let AgentWrite::Leave { room } = write {
            if self.prompts.iter().any(|p| p.room == *room) {
                return Err(DropReason::LeavesPromptRoom);
            }
        }
        if self.holds_prompt_room(write) {
            return Err(DropReason::PromptRoomState);
        }
        Ok(())
    }

    /// Whether `write` sets the name or topic ([`AgentWrite::room_state`]) of one of
    /// this identity's prompt rooms: its `permission_room`, or a room where a
    /// prompt it holds (any phase) was posted.
    pub(super) fn holds_prompt_room(&self, write: &AgentWrite) -> bool {
        write.room_state().is_some_and(|room| {
            self.config.permission_room.as_ref() == Some(room)
                || self.prompts.iter().any(|p| p.room == *room)
        })
    }

    /// The rules this identity's prompts set for any agent's write, its own or
    /// another identity's: no target is one of its prompts
    /// ([`IdentityState::is_prompt_message`]), no text field names one of its
    /// open request ids ([`names_request_id`]), and no name or topic of one of its
    /// prompt rooms is set ([`IdentityState::holds_prompt_room`]).
    /// Errors: `PromptTarget`, `NamesOpenRequest`, `PromptRoomState`.
    pub fn judge_prompt_rules(&self, write: &AgentWrite) -> Result<(), DropReason> {
        if self.targets_a_prompt(write) {
            return Err(DropReason::PromptTarget);
        }
        if let Some(request_id) = self.named_open_id(write) {
            return Err(DropReason::NamesOpenRequest { request_id });
        }
        if self.holds_prompt_room(write) {
            return Err(DropReason::PromptRoomState);
        }
        Ok(())
    }

    /// Whether a target of `write` (`AgentWrite::targets`) is one of this
    /// identity's prompts.
    pub(super) fn targets_a_prompt(&self, write: &AgentWrite) -> bool {
        write
            .targets()
            .into_iter()
            .any(|t| self.is_prompt_message(t))
    }

    /// The first open request id of this identity a text field of `write` names.
    pub(super) fn named_open_id(&self, write: &AgentWrite) -> Option<RequestId> {
        let open = self.open_request_ids();
        write
            .texts()
            .into_iter()
            .find_map(|text| names_request_id(text, &open))
            .cloned()
    }
}
