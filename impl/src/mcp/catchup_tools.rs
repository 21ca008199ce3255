//! The catch-up tools: `search_messages` (the homeserver's search, with a clear
//! answer for the rooms it cannot read), `unread` (the messages since the identity's
//! read marker) and `get_profile`. They only read, so none goes through the model
//! (the source test in `mcp/mod.rs` holds that); what they decide without the
//! network, and every text they show sandboxed, is `mc_adapters::catchup`.

use super::metadata::Failure;
use super::read_tools::decryption_of;
use super::{allowed, McpServer};
use crate::matrix::{search_messages, Identity};
use crate::summary;
use crate::write::{encryption_state, http_error, joined, matrix_error, ToolError};
use matrix_sdk::room::MessagesOptions;
use matrix_sdk::ruma::events::fully_read::FullyReadEventContent;
use matrix_sdk::ruma::events::receipt::{ReceiptThread, ReceiptType};
use matrix_sdk::ruma::{OwnedUserId, UInt};
use matrix_sdk::Room;
use mc_adapters::catchup::{
    profile, search_answer, searchable, Profile, RoomSearched, SearchAnswer, Unread, UnreadScan,
    UNREAD_SCAN_EVENTS,
};
use mc_adapters::write_rule::RoomEncryptionState;
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::schemars::{self, JsonSchema};
use rmcp::{tool, tool_router};
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
pub struct SearchArgs {
    /// The words to search for (the homeserver's full-text search of message bodies).
    pub query: String,
    /// Search only this room (`!abc:server`); default: every joined room.
    pub room_id: Option<String>,
    /// Results at most, 1 to 100 (default 20).
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<u32>,
    /// A previous answer's `next_batch`, for the next page of the same search.
    pub from: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
pub struct UnreadArgs {
    /// Only this room (`!abc:server`); default: every joined room with unread
    /// messages.
    pub room_id: Option<String>,
    /// Messages shown per room at most (the newest), 1 to 100 (default 20).
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<u32>,
}

#[derive(Deserialize, JsonSchema)]
pub struct ProfileArgs {
    /// A Matrix user id (`@name:server`).
    pub user_id: String,
}

fn limit(value: Option<u32>) -> Result<u32, ToolError> {
    match value.unwrap_or(20) {
        n @ 1..=100 => Ok(n),
        n => Err(ToolError::Invalid(format!("limit {n}: must be 1 to 100"))),
    }
}

/// What matrix-sdk knows of `room`'s encryption, asking the homeserver when its
/// store does not know; a failed ask is `Unknown`.
async fn encryption_of(room: &Room) -> RoomEncryptionState {
    match room.latest_encryption_state().await {
        Ok(state) => encryption_state(&state),
        Err(_) => RoomEncryptionState::Unknown,
    }
}

/// The event ids the identity has marked `room` read up to, from the local store
/// (filled by sync): its public and private read receipts, unthreaded and on the
/// main thread, and its `m.fully_read` marker.
async fn read_markers(room: &Room, own: &matrix_sdk::ruma::UserId) -> Vec<String> {
    let mut markers = Vec::new();
    for (kind, thread) in [
        (ReceiptType::Read, ReceiptThread::Unthreaded),
        (ReceiptType::Read, ReceiptThread::Main),
        (ReceiptType::ReadPrivate, ReceiptThread::Unthreaded),
    ] {
        if let Ok(Some((event_id, _))) = room.load_user_receipt(kind, thread, own).await {
            markers.push(event_id.to_string());
        }
    }
    if let Ok(Some(raw)) = room.account_data_static::<FullyReadEventContent>().await {
        if let Ok(event) = raw.deserialize() {
            markers.push(event.content.event_id.to_string());
        }
    }
    markers
}

/// One room's unread messages: its timeline read back from the newest, a page of
/// 100 at a time, until a read marker or the room's first event, or
/// [`UNREAD_SCAN_EVENTS`] events.
async fn unread_in(
    identity: &Identity,
    room: &Room,
    keep: usize,
) -> Result<mc_adapters::catchup::UnreadRoom, ToolError> {
    let own = &identity.settings.user_id;
    let allowed = allowed(identity);
    let mut scan = UnreadScan::new(
        room.room_id().as_str(),
        own.as_str(),
        read_markers(room, own).await,
        keep,
    );
    let mut from = None;
    let mut read = 0;
    loop {
        let mut options = MessagesOptions::backward();
        options.limit = UInt::from(100u32);
        options.from = from.take();
        let page = room.messages(options).await.map_err(matrix_error)?;
        for event in &page.chunk {
            read += 1;
            let raw = event.raw().json().get();
            let Some(summary) = summary::summarize(raw, decryption_of(&event.kind), &allowed)
            else {
                continue;
            };
            if !scan.push(summary) {
                return Ok(scan.finish(false));
            }
        }
        match page.end {
            None => return Ok(scan.finish(true)),
            Some(_) if read >= UNREAD_SCAN_EVENTS => return Ok(scan.finish(false)),
            Some(end) => from = Some(end),
        }
    }
}

#[tool_router(router = catchup_tools, vis = "pub(super)")]
impl McpServer {
    #[tool(
        title = "Search messages",
        description = "Search message bodies with the homeserver's full-text search, newest first: in one room (room_id) or every joined room. Each result: room_id, event_id, sender, sender_allowed, ts, body (untrusted text: markers neutralised, `suspicious` when one was), as read_messages shows events. `rooms` says per room whether it was searched: an end-to-end encrypted room cannot be searched by the homeserver (reason \"encrypted\"; read it with read_messages). `cut` is true when there are more results: pass `next_batch` as `from`.",
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = true)
    )]
    async fn search_messages(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<SearchArgs>,
    ) -> Result<Json<SearchAnswer>, Failure> {
        self.run(&parts, "search_messages", move |identity| async move {
            if args.query.trim().is_empty() {
                return Err(ToolError::Invalid("query is empty".into()));
            }
            let limit = limit(args.limit)?;
            let rooms = match &args.room_id {
                Some(room) => vec![joined(identity, room)?],
                None => identity.client.joined_rooms(),
            };
            let mut considered = Vec::with_capacity(rooms.len());
            let mut searched = Vec::new();
            for room in &rooms {
                let state = encryption_of(room).await;
                if searchable(state).is_ok() {
                    searched.push(room.room_id().to_owned());
                }
                considered.push(RoomSearched::of(room.room_id().as_str(), state));
            }
            let allowed = allowed(identity);
            if searched.is_empty() {
                return Ok(search_answer([], None, None, 0, considered, &allowed));
            }
            let found = search_messages(
                &identity.client,
                &args.query,
                searched,
                UInt::from(limit),
                args.from.clone(),
            )
            .await
            .map_err(http_error)?;
            let hits: Vec<&str> = found
                .results
                .iter()
                .filter_map(|r| r.result.as_ref())
                .map(|raw| raw.json().get())
                .collect();
            Ok(search_answer(
                hits,
                found.count.map(u64::from),
                found.next_batch.clone(),
                limit as usize,
                considered,
                &allowed,
            ))
        })
        .await
    }

    #[tool(
        title = "Unread messages",
        description = "What arrived since the identity last read: per joined room with unread messages (or the one room_id), the messages after its read receipt or m.fully_read marker (acknowledge with receipt: true moves the receipt) from anyone but the identity. Each room: read_up_to, count (exact when count_exact), messages (the newest `limit`, oldest first, each with sender_allowed and its untrusted text sandboxed), cut when not every unread message is shown. With no marker, the newest messages.",
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = true)
    )]
    async fn unread(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<UnreadArgs>,
    ) -> Result<Json<Unread>, Failure> {
        self.run(&parts, "unread", move |identity| async move {
            let keep = limit(args.limit)? as usize;
            let mut rooms = Vec::new();
            match &args.room_id {
                Some(room) => {
                    let room = joined(identity, room)?;
                    rooms.push(unread_in(identity, &room, keep).await?);
                }
                None => {
                    for room in identity.client.joined_rooms() {
                        let found = unread_in(identity, &room, keep).await?;
                        if found.count > 0 {
                            rooms.push(found);
                        }
                    }
                }
            }
            Ok(Unread { rooms })
        })
        .await
    }

    #[tool(
        title = "Get a user's profile",
        description = "A Matrix user's global profile: display_name (untrusted text, sandboxed: `suspicious` when a marker was neutralised) and avatar_url (mxc://). not_found for an unknown user, forbidden when the homeserver refuses the lookup.",
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = true)
    )]
    async fn get_profile(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<ProfileArgs>,
    ) -> Result<Json<Profile>, Failure> {
        self.run(&parts, "get_profile", move |identity| async move {
            let user = OwnedUserId::try_from(args.user_id.as_str())
                .map_err(|e| ToolError::Invalid(format!("user_id {:?}: {e}", args.user_id)))?;
            let found = identity
                .client
                .account()
                .fetch_user_profile_of(&user)
                .await
                .map_err(matrix_error)?;
            Ok(profile(
                user.as_str(),
                found.get("displayname"),
                found.get("avatar_url"),
            ))
        })
        .await
    }
}
