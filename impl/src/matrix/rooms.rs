//! Memberships in the model's terms: what the Matrix store knows of each room when
//! the server starts ([`report_rooms`]), and an `m.room.member` state as a
//! [`Membership`] ([`membership_of`]).

use super::Identity;
use crate::engine::EngineHandle;
use matrix_sdk::ruma::events::room::member::MembershipState;
use matrix_sdk::RoomState;
use mc_model::{IdentityId, Input, Membership, UserId};

/// Tells the model what the Matrix store knows of each room when the server starts
/// (before the catch-up sync, whose events follow): joined, invited (by whom),
/// left. The model joins pending invites of allowed senders (a join cut by the last
/// stop is tried again).
pub(super) async fn report_rooms(identity: &Identity, engine: &EngineHandle) {
    let id = IdentityId(identity.name.clone());
    let me = UserId(identity.settings.user_id.to_string());
    for room in identity.client.rooms() {
        let membership = match room.state() {
            RoomState::Joined => Membership::Joined,
            RoomState::Invited => match room.invite_details().await {
                Ok(invite) => match invite.inviter {
                    Some(inviter) => Membership::Invited {
                        by: UserId(inviter.user_id().to_string()),
                    },
                    None => {
                        tracing::warn!(
                            identity = %identity.name, room = %room.room_id(),
                            "an invite without a readable inviter: not reported (never joined)"
                        );
                        identity.health.invite_unreadable();
                        continue;
                    }
                },
                Err(e) => {
                    tracing::warn!(
                        identity = %identity.name, room = %room.room_id(),
                        "reading an invite failed, it is not reported (never joined): {e}"
                    );
                    identity.health.invite_unreadable();
                    continue;
                }
            },
            RoomState::Banned => Membership::Banned,
            RoomState::Left | RoomState::Knocked => Membership::Left,
        };
        let _ = engine.submit(Input::Membership {
            identity: id.clone(),
            room: mc_model::RoomId(room.room_id().to_string()),
            event_id: None,
            user: me.clone(),
            membership,
        });
    }
}

/// A membership as the model names it (`knock` is not joined: [`Membership::Left`]).
pub(super) fn membership_of(
    state: &MembershipState,
    sender: &matrix_sdk::ruma::UserId,
) -> Membership {
    match state {
        MembershipState::Invite => Membership::Invited {
            by: UserId(sender.to_string()),
        },
        MembershipState::Join => Membership::Joined,
        MembershipState::Ban => Membership::Banned,
        _ => Membership::Left,
    }
}
