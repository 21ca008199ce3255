//! A timeline event as its model input ([`timeline_input`]): the IO half (a
//! reply's parent fetched, the sender's display name read from the room, through
//! [`RoomView`]); which input it becomes is [`mc_adapters::timeline`].

use crate::decode;
use matrix_sdk::Room;
use mc_adapters::timeline;
use mc_model::{DeviceTrust, IdentityId, Input};

/// What [`timeline_input`] needs from a room beyond the event itself: the room's
/// id, another event's JSON (a reply's parent) and a member's display name. A
/// joined [`Room`] in production; an in-memory room in the conformance tests.
#[async_trait::async_trait]
pub trait RoomView: Sync {
    /// The room id, `!opaque:server`.
    fn id(&self) -> mc_model::RoomId;
    /// The event's JSON as the homeserver serves it (`GET /rooms/{id}/event/{eventId}`,
    /// with bundled relations), `None` when it cannot be read.
    async fn event_json(&self, event_id: &str) -> Option<String>;
    /// The member's display name in this room, if they have one.
    async fn display_name(&self, user_id: &str) -> Option<String>;
}

#[async_trait::async_trait]
impl RoomView for Room {
    fn id(&self) -> mc_model::RoomId {
        mc_model::RoomId(self.room_id().to_string())
    }

    async fn event_json(&self, event_id: &str) -> Option<String> {
        fetch_raw(self, event_id).await
    }

    async fn display_name(&self, user_id: &str) -> Option<String> {
        let user = matrix_sdk::ruma::UserId::parse(user_id).ok()?;
        let member = self.get_member_no_sync(&user).await.ok()??;
        member.display_name().map(str::to_string)
    }
}

/// Decodes one timeline event into its model input, resolving what the model
/// cannot: a reply's parent (fetched from the homeserver) and the sender's display
/// name; which input it becomes is [`mc_adapters::timeline`]'s. Every event is one
/// input: a membership ([`Input::Membership`]), and what is no input of the core's
/// (state, other types, malformed, or not even a readable envelope) as
/// [`Input::Unhandled`], which the model drops with its reason. An event the SDK
/// could not decrypt is [`Input::Undecryptable`]. `device` is what the SDK says of
/// the device a decrypted event came from ([`super::sender_device`]).
pub async fn timeline_input(
    identity: &IdentityId,
    room: &impl RoomView,
    raw: &str,
    device: DeviceTrust,
) -> Input {
    let decoded = match decode::decode_timeline_event(&room.id(), raw, device) {
        Ok(decoded) => decoded,
        Err(e) => return timeline::unreadable(identity, room.id(), &e),
    };
    let wanted = timeline::lookups(&decoded);
    let mut found = timeline::Found::default();
    if let Some(parent) = &wanted.parent {
        found.parent_json = room.event_json(&parent.0).await;
    }
    if let Some(user) = &wanted.display_name {
        found.display_name = room.display_name(&user.0).await;
    }
    timeline::input(identity, room.id(), decoded, found)
}

/// Fetches an event's JSON from the homeserver, `None` when it cannot be read.
pub async fn fetch_raw(room: &Room, event_id: &str) -> Option<String> {
    let id = matrix_sdk::ruma::EventId::parse(event_id).ok()?;
    match room.event(&id, None).await {
        Ok(event) => Some(event.raw().json().get().to_string()),
        Err(e) => {
            tracing::debug!(%event_id, "fetching an event failed: {e}");
            None
        }
    }
}
