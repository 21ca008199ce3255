//! Session rooms (docs/decisions/0026-session-rooms.md): a session may bring a
//! [`Label`]; each label names one room of the identity ([`Binding`]). A labelled
//! session is pushed only its room's events and its prompts are posted there; a
//! session without a label, or whose label was unbound, gets the events of the rooms
//! bound to no label. A label's first attach creates its room; the operator
//! ([`crate::Input::Bind`]) and an approver (`bind <label>`, `unbind`, typed in a
//! room) bind and unbind.

use super::identity::IdentityState;
use super::rooms::JoinState;
use super::{InFlight, Out};
use crate::classify::RoomCommand;
use crate::effect::{DropReason, Effect};
use crate::event::{Message, Outcome};
use crate::ids::{EffectId, Label, RoomId, SessionId};
use serde::{Deserialize, Serialize};

/// What a label is bound to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "binding", rename_all = "snake_case")]
pub enum Binding {
    /// A room is being created for the label ([`Effect::CreateRoom`] `create` is in
    /// flight). Its sessions get no events meanwhile.
    Creating { create: EffectId },
    /// The label's room.
    Room { room: RoomId },
    /// Unbound by the operator or an approver: its sessions get the events of the
    /// rooms bound to no label, and no room is created for it.
    Unbound,
}

/// Where a session's events come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Route<'a> {
    /// Its label's room, and no other.
    Room(&'a RoomId),
    /// Its label's room is being created (or creating it failed): nothing yet.
    Waiting,
    /// The rooms bound to no label.
    Unbound,
}

impl IdentityState {
    /// Every label the identity knows and what it is bound to.
    pub fn bindings(&self) -> &std::collections::BTreeMap<Label, Binding> {
        &self.bindings
    }

    /// The label `session` attached with, if any.
    pub fn label_of(&self, session: &SessionId) -> Option<&Label> {
        self.labels.get(session)
    }

    /// The label `room` is bound to, if any.
    pub fn label_of_room(&self, room: &RoomId) -> Option<&Label> {
        self.bindings
            .iter()
            .find(|(_, binding)| matches!(binding, Binding::Room { room: r } if r == room))
            .map(|(label, _)| label)
    }

    /// Whether `room` is some label's room.
    pub fn is_bound_room(&self, room: &RoomId) -> bool {
        self.label_of_room(room).is_some()
    }

    pub(super) fn route(&self, session: &SessionId) -> Route<'_> {
        match self
            .labels
            .get(session)
            .map(|label| self.bindings.get(label))
        {
            None | Some(Some(Binding::Unbound)) => Route::Unbound,
            Some(Some(Binding::Room { room })) => Route::Room(room),
            Some(Some(Binding::Creating { .. }) | None) => Route::Waiting,
        }
    }

    /// Whether `session` is pushed the events of `room` (`None`: an event whose room
    /// an older state did not record, taken as a room bound to no label).
    pub fn receives(&self, session: &SessionId, room: Option<&RoomId>) -> bool {
        match (self.route(session), room) {
            (Route::Room(mine), Some(room)) => mine == room,
            (Route::Room(_) | Route::Waiting, _) => false,
            (Route::Unbound, Some(room)) => !self.is_bound_room(room),
            (Route::Unbound, None) => true,
        }
    }

    /// The room `session` lives in: its label's room, or for a session routed to the
    /// unbound rooms, the unbound room an allowed sender last wrote in. Its prompts
    /// are posted there (unless `permission_room` is set) and the agent's
    /// `send_message` without a room goes there.
    pub fn room_of(&self, session: &SessionId) -> Option<&RoomId> {
        match self.route(session) {
            Route::Room(room) => Some(room),
            Route::Waiting => None,
            Route::Unbound => self
                .last_room
                .as_ref()
                .filter(|room| !self.is_bound_room(room)),
        }
    }

    /// A session attached with `label` (or without one). A label never seen before
    /// gets a room: the core asks for it to be created, named after the label, with
    /// the identity's allowed senders invited.
    pub(super) fn attach_label(
        &mut self,
        session: &SessionId,
        label: Option<Label>,
        out: &mut Out<'_>,
    ) {
        let Some(label) = label else {
            self.labels.remove(session);
            return;
        };
        self.labels.insert(session.clone(), label.clone());
        if self.bindings.contains_key(&label) {
            return;
        }
        let create = out.id();
        out.in_flight.insert(
            create,
            InFlight::CreateRoom {
                identity: out.identity.clone(),
                label: label.clone(),
            },
        );
        out.effects.push(Effect::CreateRoom {
            id: create,
            identity: out.identity.clone(),
            label: label.clone(),
            name: format!("Claude Code: {label}"),
            invite: self.config.allowed_senders.iter().cloned().collect(),
        });
        self.bindings.insert(label, Binding::Creating { create });
    }

    /// The creation `id` of `label`'s room ended. A label bound or unbound since
    /// keeps what it was given; the new room then stays unused.
    pub(super) fn room_created(
        &mut self,
        id: EffectId,
        label: Label,
        outcome: Outcome,
        out: &mut Out<'_>,
    ) {
        if self.bindings.get(&label) != Some(&Binding::Creating { create: id }) {
            return out.drop(None, DropReason::StaleOutcome);
        }
        match outcome {
            Outcome::Created { room } => {
                self.rooms.entry(room.clone()).or_insert(JoinState::Joined);
                self.set_binding(label, Some(room), out);
            }
            Outcome::Sent | Outcome::Posted { .. } | Outcome::Failed { .. } => {
                self.bindings.remove(&label);
                let reason = match outcome {
                    Outcome::Failed { reason } => reason,
                    _ => "the homeserver named no room".to_owned(),
                };
                for session in self.attached_sessions() {
                    if self.labels.get(&session) == Some(&label) {
                        out.effects.push(Effect::LogMessage {
                            identity: out.identity.clone(),
                            session,
                            message: format!(
                                "matrix-channel could not create the room for {label}: \
                                 {reason}. This session gets no Matrix messages until it \
                                 connects again."
                            ),
                        });
                    }
                }
                out.drop(None, DropReason::RoomCreationFailed { label });
            }
        }
    }

    /// The operator's [`crate::Input::Bind`].
    pub(super) fn on_bind(&mut self, label: Label, room: Option<RoomId>, out: &mut Out<'_>) {
        if let Some(room) = &room {
            if !self.is_joined(room) {
                return out.drop(None, DropReason::NotJoined);
            }
        }
        self.set_binding(label, room, out);
    }

    /// An approver's `bind <label>` or `unbind` typed in `message.room`; the notice
    /// replying to it says what changed.
    pub(super) fn on_room_command(
        &mut self,
        message: &Message,
        command: RoomCommand,
        out: &mut Out<'_>,
    ) {
        let room = &message.room;
        let text = match command {
            RoomCommand::Grant(command) => return self.on_grant_command(message, command, out),
            RoomCommand::Bind(label) => {
                let text = format!(
                    "This room is now the room of {label}: its sessions get this room's \
                     messages and post their permission requests here."
                );
                self.set_binding(label, Some(room.clone()), out);
                text
            }
            RoomCommand::Unbind => match self.label_of_room(room).cloned() {
                Some(label) => {
                    self.set_binding(label.clone(), None, out);
                    format!(
                        "This room is no longer the room of {label}: its sessions get the \
                         messages of the rooms bound to no session."
                    )
                }
                None => "This room is the room of no session.".to_owned(),
            },
        };
        out.notice(room, &message.event_id, text);
    }

    /// Binds `label` to `room` (a room belongs to one label: the label it had is
    /// unbound), or unbinds it with `None`. Each change is told as an
    /// [`Effect::Bound`].
    fn set_binding(&mut self, label: Label, room: Option<RoomId>, out: &mut Out<'_>) {
        if let Some(room) = &room {
            let others: Vec<Label> = self
                .bindings
                .iter()
                .filter(|(other, binding)| {
                    **other != label && matches!(binding, Binding::Room { room: r } if r == room)
                })
                .map(|(other, _)| other.clone())
                .collect();
            for other in others {
                self.bindings.insert(other.clone(), Binding::Unbound);
                out.effects.push(Effect::Bound {
                    identity: out.identity.clone(),
                    label: other,
                    room: None,
                });
            }
        }
        let binding = match &room {
            Some(room) => Binding::Room { room: room.clone() },
            None => Binding::Unbound,
        };
        self.bindings.insert(label.clone(), binding);
        out.effects.push(Effect::Bound {
            identity: out.identity.clone(),
            label,
            room,
        });
        // A room that is no attached session's room any more shows no typing.
        self.stop_typing_unattended(out);
    }

    /// The identity left `room` (or was kicked or banned): a label bound to it has
    /// no room any more, and its next attach creates one.
    pub(super) fn room_gone(&mut self, room: &RoomId, out: &mut Out<'_>) {
        if let Some(label) = self.label_of_room(room).cloned() {
            self.bindings.remove(&label);
            out.effects.push(Effect::Bound {
                identity: out.identity.clone(),
                label,
                room: None,
            });
            self.stop_typing_unattended(out);
        }
    }
}
