//! Presence (docs/decisions/0026-session-rooms.md): while a session works on what it
//! was sent, the identity shows `m.typing` in the session's room. Typing starts when
//! a push of that room's event reached a session bound to it, is sent again before
//! the homeserver's timeout runs out, and stops when the agent sends a message or an
//! edit in the room, when no attached session receives the room any more, or when
//! [`crate::IdentityConfig::typing_cap_ms`] has passed since the last such push.

use super::bindings::Route;
use super::identity::IdentityState;
use super::Out;
use crate::effect::Effect;
use crate::ids::{Millis, RoomId, SessionId, Timestamp};
use serde::{Deserialize, Serialize};

/// The `timeout` of every typing notice, in milliseconds: Synapse and the spec's
/// examples use 30 s (Client-Server API, "Typing Notifications").
pub const TYPING_TIMEOUT_MS: Millis = 30_000;

/// How long after a typing notice the core sends it again, in milliseconds: before
/// [`TYPING_TIMEOUT_MS`] runs out, with room for a slow send.
pub const TYPING_REFRESH_MS: Millis = 25_000;
const _: () = assert!(TYPING_REFRESH_MS < TYPING_TIMEOUT_MS);

/// The identity shows typing in one room.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Typing {
    /// When the last push that keeps it going reached its session.
    pub since: Timestamp,
    /// When the notice is sent again.
    pub refresh_at: Timestamp,
}

impl IdentityState {
    /// The rooms the identity shows typing in.
    pub fn typing(&self) -> &std::collections::BTreeMap<RoomId, Typing> {
        &self.typing
    }

    /// When the next typing notice is due, or typing stops at the cap.
    pub(super) fn typing_deadline(&self) -> Option<Timestamp> {
        let cap = self.config.typing_cap_ms;
        self.typing
            .values()
            .map(|t| t.refresh_at.min(t.since.saturating_add(cap)))
            .min()
    }

    /// A push of an event of `room` reached `session`: when it is the session's own
    /// room, the identity shows typing there (again from now for the cap).
    pub(super) fn push_arrived(&mut self, session: &SessionId, room: &RoomId, out: &mut Out<'_>) {
        if self.config.typing_cap_ms == 0 || self.route(session) != Route::Room(room) {
            return;
        }
        let now = out.now;
        let refresh_at = now.saturating_add(TYPING_REFRESH_MS);
        match self.typing.get_mut(room) {
            Some(typing) => typing.since = now,
            None => {
                self.typing.insert(
                    room.clone(),
                    Typing {
                        since: now,
                        refresh_at,
                    },
                );
                typing_notice(room, true, out);
            }
        }
    }

    /// Stops typing in `room`, if the identity shows it.
    pub(super) fn stop_typing(&mut self, room: &RoomId, out: &mut Out<'_>) {
        if self.typing.remove(room).is_some() {
            typing_notice(room, false, out);
        }
    }

    /// Stops typing in every room no attached session receives.
    pub(super) fn stop_typing_unattended(&mut self, out: &mut Out<'_>) {
        let unattended: Vec<RoomId> = self
            .typing
            .keys()
            .filter(|room| {
                !self
                    .attached_sessions()
                    .iter()
                    .any(|session| self.route(session) == Route::Room(room))
            })
            .cloned()
            .collect();
        for room in unattended {
            self.stop_typing(&room, out);
        }
    }

    /// Typing past its cap stops; typing due for a refresh is sent again.
    pub(super) fn fire_typing(&mut self, out: &mut Out<'_>) {
        let (now, cap) = (out.now, self.config.typing_cap_ms);
        let rooms: Vec<RoomId> = self.typing.keys().cloned().collect();
        for room in rooms {
            let Some(typing) = self.typing.get_mut(&room) else {
                continue;
            };
            if typing.since.saturating_add(cap) <= now {
                self.stop_typing(&room, out);
            } else if typing.refresh_at <= now {
                typing.refresh_at = now.saturating_add(TYPING_REFRESH_MS);
                typing_notice(&room, true, out);
            }
        }
    }
}

fn typing_notice(room: &RoomId, typing: bool, out: &mut Out<'_>) {
    out.effects.push(Effect::Typing {
        identity: out.identity.clone(),
        room: room.clone(),
        typing,
    });
}
