//! The identity's memberships ([`JoinState`]): an invite is judged by the sender
//! gate (an allowed sender's is joined once, a stranger's stays pending), joins and
//! their failures, and the events that came before a join (history, never input).

use super::identity::IdentityState;
use super::{InFlight, Out};
use crate::config::Gate;
use crate::effect::{DropReason, Effect};
use crate::event::Membership;
use crate::ids::{EventId, RoomId, UserId};
use serde::{Deserialize, Serialize};

/// How many events dropped as history (`NotJoined`) each identity remembers. A sync
/// response carries at most its timeline limit per room (50 in the server's filter).
pub const HISTORY_MEMORY: usize = 1_000;

/// The identity's membership of one room, as the core knows it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum JoinState {
    /// Invited by `by`, and not joining (`by` is no allowed sender, or the join
    /// failed).
    Invited { by: UserId },
    /// A join on `by`'s invite is in flight or done; the join event has not come.
    Joining { by: UserId },
    /// Joined: the room's events are input.
    Joined,
    /// Left, kicked or banned.
    Left,
}

impl IdentityState {
    pub(super) fn is_joined(&self, room: &RoomId) -> bool {
        self.rooms.get(room) == Some(&JoinState::Joined)
    }

    /// Whether the event is input by its room: the room is joined now and the event
    /// did not arrive before the join (history delivered again after it). An event
    /// that is not is remembered as history, once.
    pub(super) fn is_history(&mut self, room: &RoomId, event_id: &EventId) -> bool {
        if self.is_joined(room) && !self.history.contains(event_id) {
            return false;
        }
        if !self.history.contains(event_id) {
            self.history.push_back(event_id.clone());
            if self.history.len() > HISTORY_MEMORY {
                self.history.pop_front();
            }
        }
        true
    }

    /// The identity's own membership changed, or it was invited. An invite is
    /// judged by the sender gate: an allowed sender's is joined, once (a room being
    /// joined or joined is not joined again); another's stays pending (a stranger
    /// cannot pull the identity into a room).
    pub(super) fn on_membership(
        &mut self,
        room: RoomId,
        event_id: Option<EventId>,
        user: UserId,
        membership: Membership,
        out: &mut Out<'_>,
    ) {
        if user != self.config.user_id {
            return out.drop(event_id.as_ref(), DropReason::OtherMember);
        }
        if !matches!(membership, Membership::Invited { .. }) {
            for flight in out.in_flight.values_mut() {
                if let InFlight::Join {
                    identity,
                    room: r,
                    settled,
                    ..
                } = flight
                {
                    if *identity == out.identity && *r == room {
                        *settled = true;
                    }
                }
            }
        }
        let by = match membership {
            Membership::Joined => {
                self.rooms.insert(room, JoinState::Joined);
                return;
            }
            Membership::Left | Membership::Banned => {
                // A prompt posted there could not be seen nor answered.
                if self.last_room.as_ref() == Some(&room) {
                    self.last_room = None;
                }
                self.room_gone(&room, out);
                self.rooms.insert(room, JoinState::Left);
                return;
            }
            Membership::Invited { by } => by,
        };
        match self.rooms.get(&room) {
            Some(JoinState::Joining { .. } | JoinState::Joined) => {
                return out.drop(event_id.as_ref(), DropReason::AlreadyInvited);
            }
            // An invite not acted on is judged again when it is reported again (the
            // server reports pending invites when it starts): a join that failed
            // is tried again; a stranger's invite stays refused.
            Some(JoinState::Invited { .. } | JoinState::Left) | None => {}
        }
        match self.config.gate(&by) {
            Gate::Allowed | Gate::Approver => {
                let id = out.id();
                out.in_flight.insert(
                    id,
                    InFlight::Join {
                        identity: out.identity.clone(),
                        room: room.clone(),
                        by: by.clone(),
                        settled: false,
                    },
                );
                out.effects.push(Effect::JoinRoom {
                    id,
                    identity: out.identity.clone(),
                    room: room.clone(),
                });
                self.rooms.insert(room, JoinState::Joining { by });
            }
            gate @ (Gate::Own | Gate::Stranger) => {
                self.rooms.insert(room, JoinState::Invited { by });
                let reason = match gate {
                    Gate::Own => DropReason::OwnEvent,
                    _ => DropReason::Stranger,
                };
                out.drop(event_id.as_ref(), reason);
            }
        }
    }

    /// A join on an invite failed: the invite is pending again (a restart, or
    /// another invite, tries again), unless the identity's own membership event of
    /// the room came since (`settled`): the room was joined or left meanwhile, and a
    /// join on a later invite may be the one in flight now.
    pub(super) fn join_failed(
        &mut self,
        room: RoomId,
        by: UserId,
        settled: bool,
        out: &mut Out<'_>,
    ) {
        if !settled && self.rooms.get(&room) == Some(&JoinState::Joining { by: by.clone() }) {
            self.rooms.insert(room, JoinState::Invited { by });
        }
        out.drop(None, DropReason::JoinFailed);
    }

    /// An event that is no input: the gate first (own and strangers' events say
    /// only that), then what it is.
    pub(super) fn on_unhandled(
        &mut self,
        event_id: Option<EventId>,
        sender: Option<UserId>,
        what: String,
        out: &mut Out<'_>,
    ) {
        let reason = match sender.map(|s| self.config.gate(&s)) {
            Some(Gate::Own) => DropReason::OwnEvent,
            Some(Gate::Stranger) => DropReason::Stranger,
            Some(Gate::Allowed | Gate::Approver) | None => DropReason::Unhandled { what },
        };
        out.drop(event_id.as_ref(), reason);
    }
}
