//! The tools that only read: the identity, its rooms, timelines, threads,
//! reactions, members and attachments. None of them writes to Matrix, so none goes
//! through the model (the source test in `mcp/mod.rs` holds that).

use super::{allowed, McpServer, ToolResult};
use crate::matrix::Identity;
use crate::summary::{self, Decryption};
use crate::write::{joined, matrix_error, ToolError};
use matrix_sdk::deserialized_responses::TimelineEventKind;
use matrix_sdk::room::{IncludeRelations, MessagesOptions, RelationsOptions};
use matrix_sdk::ruma::api::Direction;
use matrix_sdk::ruma::events::relation::RelationType;
use matrix_sdk::ruma::events::room::message::{MessageType, RoomMessageEventContent};
use matrix_sdk::ruma::events::room::power_levels::UserPowerLevel;
use matrix_sdk::ruma::{OwnedEventId, UInt};
use matrix_sdk::{Room, RoomMemberships};
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::schemars::{self, JsonSchema};
use rmcp::{tool, tool_router};
use serde::Deserialize;
use serde_json::{json, Value};

pub(super) fn parse_event(event_id: &str) -> Result<OwnedEventId, ToolError> {
    OwnedEventId::try_from(event_id)
        .map_err(|e| ToolError::Invalid(format!("event_id {event_id:?}: {e}")))
}

fn decryption_of(kind: &TimelineEventKind) -> Decryption {
    match kind {
        TimelineEventKind::PlainText { .. } => Decryption::Plaintext,
        TimelineEventKind::Decrypted(_) => Decryption::Decrypted,
        TimelineEventKind::UnableToDecrypt { .. } => Decryption::UnableToDecrypt,
    }
}

#[derive(Deserialize, JsonSchema)]
pub struct RoomArg {
    /// A room id (`!abc:server`).
    pub room_id: String,
}

#[derive(Deserialize, JsonSchema)]
pub struct ReadMessagesArgs {
    /// A room id (`!abc:server`).
    pub room_id: String,
    /// Events per page, 1 to 100 (default 20).
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<u32>,
    /// A pagination token from a previous page's `next`.
    pub from: Option<String>,
    /// `backward` (newest first, the default) or `forward`.
    pub direction: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
pub struct ReadThreadArgs {
    pub room_id: String,
    /// The thread root's event id.
    pub thread_root: String,
    /// Events per page, 1 to 100 (default 50).
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<u32>,
    pub from: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
pub struct EventArgs {
    pub room_id: String,
    pub event_id: String,
}

impl McpServer {
    async fn summarize_with_reactions(
        &self,
        identity: &Identity,
        room: &Room,
        events: Vec<matrix_sdk::deserialized_responses::TimelineEvent>,
    ) -> Vec<Value> {
        let allowed = allowed(identity);
        let mut out = Vec::with_capacity(events.len());
        for event in events {
            let raw = event.raw().json().get();
            let Some(mut s) = summary::summarize(raw, decryption_of(&event.kind), &allowed) else {
                continue;
            };
            if s["type"] == json!("m.room.message") && s["redacted"] == json!(false) {
                if let Some(id) = event.event_id() {
                    s["reactions"] = match annotations(room, &id).await {
                        Ok(list) => summary::reaction_counts(list.iter().map(String::as_str)),
                        Err(_) => json!(null),
                    };
                }
            }
            out.push(s);
        }
        out
    }
}

async fn annotations(
    room: &Room,
    event_id: &OwnedEventId,
) -> Result<Vec<String>, matrix_sdk::Error> {
    let options = RelationsOptions {
        include_relations: IncludeRelations::RelationsOfType(RelationType::Annotation),
        limit: Some(UInt::from(100u32)),
        ..Default::default()
    };
    let relations = room.relations(event_id.clone(), options).await?;
    Ok(relations
        .chunk
        .iter()
        .map(|e| e.raw().json().get().to_string())
        .collect())
}

/// The number of joined members. The sync summary carries it only when members are
/// lazy-loaded, which the sync filter does not ask for (`joined_members_count` is then
/// 0, never true of a room we are in); the local store then holds every member
/// event, so they are counted there (no request).
async fn joined_members(room: &Room) -> u64 {
    match room.joined_members_count() {
        0 => room
            .members_no_sync(RoomMemberships::JOIN)
            .await
            .map_or(0, |m| m.len() as u64),
        n => n,
    }
}

fn limit(value: Option<u32>, default: u32) -> Result<UInt, ToolError> {
    match value.unwrap_or(default) {
        n @ 1..=100 => Ok(UInt::from(n)),
        n => Err(ToolError::Invalid(format!("limit {n}: must be 1 to 100"))),
    }
}

#[tool_router(router = read_tools, vis = "pub(super)")]
impl McpServer {
    #[tool(
        description = "Who this server acts as: identity, Matrix user and device, the operator's channel settings (read-only), and `health`: whether its sync works (homeserver answers, age of the last sync, last error, rejected token), its undecryptable backlog and whether the engine keeps up, as GET /health shows it.",
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn whoami(&self, Extension(parts): Extension<http::request::Parts>) -> ToolResult {
        self.run(&parts, "whoami", move |identity| async move {
            let s = &identity.settings;
            let config = s.model_config();
            let approvers: Vec<&str> = s
                .allowed_senders
                .iter()
                .map(|u| u.as_str())
                .filter(|u| config.is_approver(&mc_model::UserId(u.to_string())))
                .collect();
            Ok(json!({
            "identity": identity.name,
            "user_id": s.user_id,
            "device_id": identity.client.device_id().map(|d| d.to_string()),
            "homeserver": s.homeserver,
            "mount": self.mount.as_str(),
            "channel": {
                "allowed_senders": s.allowed_senders,
                "approvers": approvers,
                "permission_room": s.permission_room,
                "prompt_ttl_secs": s.prompt_ttl_secs,
                "settle_ms": s.settle_ms,
                "replay_budget": s.replay_budget,
            },
            "health": crate::health::identity_report(
                &identity.name,
                &identity.health.snapshot(),
                &crate::health::probe_engine(&self.app.engine, Some(identity.name.clone())).await,
                std::time::Instant::now(),
            ),
            }))
        })
        .await
    }

    #[tool(
        description = "Rooms the identity is joined to (and invited to): room_id, name, topic, encrypted, joined_members.",
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = true)
    )]
    async fn list_rooms(&self, Extension(parts): Extension<http::request::Parts>) -> ToolResult {
        self.run(&parts, "list_rooms", move |identity| async move {
            let mut lists = [Vec::new(), Vec::new()];
            for (list, rooms) in lists.iter_mut().zip([
                identity.client.joined_rooms(),
                identity.client.invited_rooms(),
            ]) {
                for room in &rooms {
                    list.push(json!({
                        "room_id": room.room_id(),
                        "name": room.name(),
                        "topic": room.topic(),
                        "encrypted": room.encryption_state().is_encrypted(),
                        "joined_members": joined_members(room).await,
                    }));
                }
            }
            let [joined, invited] = lists;
            Ok(json!({ "joined": joined, "invited": invited }))
        })
        .await
    }

    #[tool(
        description = "A page of a room's timeline, newest first by default. Each event: event_id, type, sender, sender_allowed, ts, body, attachment {filename, size, mimetype, encrypted} (download it with download_attachment), reply_to, edit_of, thread_root, reactions {key: count}, redacted, decryption. `next` continues the page.",
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = true)
    )]
    async fn read_messages(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<ReadMessagesArgs>,
    ) -> ToolResult {
        self.run(&parts, "read_messages", move |identity| async move {
            let room = joined(identity, &args.room_id)?;
            let mut options = match args.direction.as_deref().unwrap_or("backward") {
                "backward" => MessagesOptions::backward(),
                "forward" => MessagesOptions::forward(),
                other => {
                    return Err(ToolError::Invalid(format!(
                        "direction {other:?}: use \"backward\" or \"forward\""
                    )))
                }
            };
            options.limit = limit(args.limit, 20)?;
            options.from = args.from.clone();
            let page = room.messages(options).await.map_err(matrix_error)?;
            let events = self
                .summarize_with_reactions(identity, &room, page.chunk)
                .await;
            Ok(json!({ "events": events, "next": page.end }))
        })
        .await
    }

    #[tool(
        description = "The events of a thread (m.thread relations of thread_root), with the root first on the first page.",
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = true)
    )]
    async fn read_thread(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<ReadThreadArgs>,
    ) -> ToolResult {
        self.run(&parts, "read_thread", move |identity| async move {
            let room = joined(identity, &args.room_id)?;
            let root = parse_event(&args.thread_root)?;
            let options = RelationsOptions {
                include_relations: IncludeRelations::RelationsOfType(RelationType::Thread),
                limit: Some(limit(args.limit, 50)?),
                from: args.from.clone(),
                dir: Direction::Forward,
                ..Default::default()
            };
            let relations = room
                .relations(root.clone(), options)
                .await
                .map_err(matrix_error)?;
            let mut events = Vec::new();
            if args.from.is_none() {
                let root_event = room.event(&root, None).await.map_err(matrix_error)?;
                events.push(root_event);
            }
            events.extend(relations.chunk);
            let events = self.summarize_with_reactions(identity, &room, events).await;
            Ok(json!({ "events": events, "next": relations.next_batch_token }))
        })
        .await
    }

    #[tool(
        description = "The reactions (annotations) on one event, read fresh from the homeserver: each with event_id, sender, key (raw) and ts. An empty list means none yet; a failed read is an error, never an empty list.",
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = true)
    )]
    async fn get_reactions(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<EventArgs>,
    ) -> ToolResult {
        self.run(&parts, "get_reactions", move |identity| async move {
            let room = joined(identity, &args.room_id)?;
            let event_id = parse_event(&args.event_id)?;
            let list = annotations(&room, &event_id).await.map_err(matrix_error)?;
            let reactions: Vec<Value> = list
                .iter()
                .filter_map(|raw| serde_json::from_str::<Value>(raw).ok())
                .map(|v| {
                    json!({
                        "event_id": v["event_id"],
                        "sender": v["sender"],
                        "key": v["content"]["m.relates_to"]["key"],
                        "ts": v["origin_server_ts"],
                    })
                })
                .collect();
            Ok(json!({ "event_id": args.event_id, "reactions": reactions }))
        })
        .await
    }

    #[tool(
        description = "Download the file of an m.image/m.file/m.audio/m.video event (decrypted if needed), up to the operator's size cap. Returns filename, mimetype, size and data_base64.",
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = true)
    )]
    async fn download_attachment(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<EventArgs>,
    ) -> ToolResult {
        use base64::Engine as _;
        use matrix_sdk::media::{MediaFormat, MediaRequestParameters};
        let cap = self.app.max_download_bytes;
        self.run(&parts, "download_attachment", move |identity| async move {
            let room = joined(identity, &args.room_id)?;
            let event_id = parse_event(&args.event_id)?;
            let event = room.event(&event_id, None).await.map_err(matrix_error)?;
            let content = event
                .raw()
                .get_field::<RoomMessageEventContent>("content")
                .ok()
                .flatten()
                .ok_or_else(|| {
                    ToolError::NotFound(format!("{} is not a message", args.event_id))
                })?;
            let (source, filename, mimetype, size) = match &content.msgtype {
                MessageType::Image(c) => (
                    c.source.clone(),
                    c.filename().to_string(),
                    c.info.as_ref().and_then(|i| i.mimetype.clone()),
                    c.info.as_ref().and_then(|i| i.size),
                ),
                MessageType::File(c) => (
                    c.source.clone(),
                    c.filename().to_string(),
                    c.info.as_ref().and_then(|i| i.mimetype.clone()),
                    c.info.as_ref().and_then(|i| i.size),
                ),
                MessageType::Audio(c) => (
                    c.source.clone(),
                    c.filename().to_string(),
                    c.info.as_ref().and_then(|i| i.mimetype.clone()),
                    c.info.as_ref().and_then(|i| i.size),
                ),
                MessageType::Video(c) => (
                    c.source.clone(),
                    c.filename().to_string(),
                    c.info.as_ref().and_then(|i| i.mimetype.clone()),
                    c.info.as_ref().and_then(|i| i.size),
                ),
                _ => {
                    return Err(ToolError::NotFound(format!(
                        "{} has no attachment",
                        args.event_id
                    )))
                }
            };
            if let Some(size) = size {
                if u64::from(size) > cap {
                    return Err(ToolError::TooLarge(format!(
                        "the attachment is {size} bytes; the cap is {cap}"
                    )));
                }
            }
            // An encrypted room's media is `file` {url, key, iv, hashes} (ruma's
            // `MediaSource::Encrypted`; Client-Server API, "Sending encrypted
            // attachments"): matrix-sdk downloads the ciphertext, decrypts it
            // (AES-CTR) and checks its sha256 before returning the plaintext.
            let request = MediaRequestParameters {
                source,
                format: MediaFormat::File,
            };
            let data = identity
                .client
                .media()
                .get_media_content(&request, false)
                .await
                .map_err(matrix_error)?;
            if data.len() as u64 > cap {
                return Err(ToolError::TooLarge(format!(
                    "the attachment is {} bytes; the cap is {cap}",
                    data.len()
                )));
            }
            Ok(json!({
                "filename": filename,
                "mimetype": mimetype,
                "size": data.len(),
                "data_base64": base64::engine::general_purpose::STANDARD.encode(&data),
            }))
        })
        .await
    }

    #[tool(
        description = "A joined room's facts: room_id, name, topic, canonical_alias, encrypted, joined_members.",
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = true)
    )]
    async fn room_info(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<RoomArg>,
    ) -> ToolResult {
        self.run(&parts, "room_info", move |identity| async move {
            let room = joined(identity, &args.room_id)?;
            Ok(json!({
                "room_id": room.room_id(),
                "name": room.name(),
                "topic": room.topic(),
                "canonical_alias": room.canonical_alias(),
                "encrypted": room.encryption_state().is_encrypted(),
                "joined_members": joined_members(&room).await,
            }))
        })
        .await
    }

    #[tool(
        description = "Members of a joined room (joined and invited): user_id, display_name, membership, power_level (a number; \"infinite\" for a room's creator from room version 12), allowed (passes the sender gate).",
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = true)
    )]
    async fn room_members(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<RoomArg>,
    ) -> ToolResult {
        self.run(&parts, "room_members", move |identity| async move {
            let room = joined(identity, &args.room_id)?;
            let members = room
                .members(RoomMemberships::JOIN | RoomMemberships::INVITE)
                .await
                .map_err(matrix_error)?;
            let allowed = allowed(identity);
            let list: Vec<Value> = members
                .iter()
                .map(|m| {
                    json!({
                        "user_id": m.user_id(),
                        "display_name": m.display_name(),
                        "membership": m.membership().to_string(),
                        "power_level": match m.power_level() {
                            UserPowerLevel::Int(n) => json!(n),
                            UserPowerLevel::Infinite => json!("infinite"),
                            // A level ruma may add later: unknown here.
                            _ => Value::Null,
                        },
                        "allowed": allowed(m.user_id().as_str()),
                    })
                })
                .collect();
            Ok(json!({ "members": list }))
        })
        .await
    }
}
