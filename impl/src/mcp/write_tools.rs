//! The tools that write to Matrix as the identity. Each one checks its arguments,
//! builds one [`AgentWrite`] with every field the event will carry, and hands it to
//! the model through [`McpServer::write`]: the model refuses it or lets it through
//! (`mc_model::agent`), and the tool answers from what happened. None of them calls
//! matrix-sdk to send (the source test in `mcp/mod.rs` holds that); `write.rs`
//! performs what the model let through.

use super::metadata::Failure;
use super::read_tools::parse_event;
use super::McpServer;
use crate::decode::relates_to;
use crate::fit::{fit_parts, MAX_CONTENT_BYTES, MAX_ENCRYPTED_CONTENT_BYTES};
use crate::write::{joined, markdown_text, matrix_error, upstream, ToolError};
use matrix_sdk::ruma::{OwnedEventId, OwnedUserId, TransactionId};
use matrix_sdk::Room;
use mc_model::{AgentWrite, EventId, IdentityId, RoomId, SessionId, UserId};
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::schemars::{self, JsonSchema};
use rmcp::{tool, tool_router};
use serde::{Deserialize, Serialize};

/// The thread `event_id` is in (its `m.thread` root), if any: a reply to a thread
/// message stays in that thread, as Element's replies do. Errors: `not_found` when
/// the homeserver does not know the event.
async fn thread_of(
    room: &Room,
    event_id: &OwnedEventId,
) -> Result<Option<OwnedEventId>, ToolError> {
    let event = room.event(event_id, None).await.map_err(|e| {
        ToolError::NotFound(format!(
            "reply_to {event_id}: {}",
            matrix_error(e).message()
        ))
    })?;
    Ok(relates_to(event.raw().json().get())
        .as_ref()
        .and_then(|r| r.thread_root())
        .and_then(|root| OwnedEventId::try_from(root).ok()))
}

fn model_event(id: &OwnedEventId) -> EventId {
    EventId(id.to_string())
}

pub(super) fn model_room(room: &Room) -> RoomId {
    RoomId(room.room_id().to_string())
}

#[derive(Deserialize, JsonSchema)]
pub struct SendMessageArgs {
    /// The room. Without it, on /channel: this session's own room (its label's room,
    /// or for a session without one, where an allowed sender last wrote).
    pub room_id: Option<String>,
    /// Markdown. Over about 32 KB it is sent as several events, split on paragraphs.
    pub text: String,
    /// Reply to this event (a rich reply; in a thread, a reply within the thread).
    pub reply_to: Option<String>,
    /// Post in the thread rooted at this event.
    pub thread_root: Option<String>,
    /// An idempotency key: the same key sends each part at most once, across retries.
    pub txn_id: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
pub struct EditArgs {
    pub room_id: String,
    /// One of the identity's own messages.
    pub event_id: String,
    /// The new text, markdown.
    pub text: String,
}

#[derive(Deserialize, JsonSchema)]
pub struct ReactionArgs {
    pub room_id: String,
    pub event_id: String,
    /// The reaction key, for instance 👍.
    pub key: String,
}

#[derive(Deserialize, JsonSchema)]
pub struct RedactArgs {
    pub room_id: String,
    pub event_id: String,
    pub reason: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
pub struct AckArgs {
    /// The event id from a `<channel>` tag's `event_id`.
    pub event_id: String,
    /// With `receipt: true`, also send a read receipt in this room.
    pub room_id: Option<String>,
    pub receipt: Option<bool>,
}

#[derive(Deserialize, JsonSchema)]
pub struct JoinArgs {
    /// A room id or alias (`#room:server`).
    pub room: String,
}

#[derive(Deserialize, JsonSchema)]
pub struct InviteArgs {
    pub room_id: String,
    /// The MXID to invite.
    pub user_id: String,
}

#[derive(Deserialize, JsonSchema)]
pub struct CreateRoomArgs {
    /// The room's name (`m.room.name`). State: readable by every member and the
    /// homeserver, even in an encrypted room.
    pub name: Option<String>,
    /// The room's topic (`m.room.topic`), as readable as the name.
    pub topic: Option<String>,
    /// Whether the room is end-to-end encrypted from its first event; default true.
    pub encrypted: Option<bool>,
    /// MXIDs to invite besides the identity's allowed senders (always invited).
    #[serde(default)]
    pub invite: Vec<String>,
}

#[derive(Deserialize, JsonSchema)]
pub struct CreateDmArgs {
    /// The MXID to chat with.
    pub user_id: String,
}

#[derive(Deserialize, JsonSchema)]
pub struct SetRoomNameArgs {
    pub room_id: String,
    /// The new name; "" removes it. Readable by every member and the homeserver,
    /// even in an encrypted room.
    pub name: String,
}

#[derive(Deserialize, JsonSchema)]
pub struct SetRoomTopicArgs {
    pub room_id: String,
    /// The new topic; "" removes it. As readable as a name.
    pub topic: String,
}

/// `create_room`'s and `create_dm`'s result.
#[derive(Serialize, JsonSchema)]
pub struct RoomMade {
    /// The room (`!…`).
    pub room_id: String,
    /// Whether this call created it (`create_dm` answers `false` with the direct
    /// chat the identity already has with the user).
    pub created: bool,
    /// The users invited: for `create_room` the allowed senders and those asked
    /// for; for a new direct chat the user.
    pub invited: Vec<String>,
}

/// `set_room_name`'s and `set_room_topic`'s result.
#[derive(Serialize, JsonSchema)]
pub struct RoomStateSet {
    pub room_id: String,
    /// The state event sent (`$…`).
    pub event_id: String,
}

/// `send_message`'s result.
#[derive(Serialize, JsonSchema)]
pub struct Sent {
    /// The events sent, one per part, in order.
    #[schemars(length(min = 1))]
    pub event_ids: Vec<String>,
}

/// The result of a tool that sends one event: `edit_message` (the edit),
/// `send_reaction` (the reaction), `redact` (the redaction).
#[derive(Serialize, JsonSchema)]
pub struct SentEvent {
    /// The event sent; `null` when the homeserver named none.
    pub event_id: Option<String>,
}

/// `acknowledge`'s result.
#[derive(Serialize, JsonSchema)]
pub struct Acknowledged {
    /// Whether the event was pushed or queued for this identity (and the session is
    /// this identity's): it is never replayed again.
    pub acknowledged: bool,
    /// Whether a read receipt was sent.
    pub receipt: bool,
}

/// `join_room`'s result.
#[derive(Serialize, JsonSchema)]
pub struct JoinedRoom {
    /// The room joined; `null` when the homeserver named none.
    pub room_id: Option<String>,
}

/// `leave_room`'s result.
#[derive(Serialize, JsonSchema)]
pub struct Left {
    /// The room left.
    pub left: String,
}

/// `invite`'s result.
#[derive(Serialize, JsonSchema)]
pub struct Invited {
    /// The user invited (an MXID).
    pub invited: String,
}

impl McpServer {
    /// The channel session a request belongs to: its `Mcp-Session-Id` on /channel,
    /// `None` on /mcp.
    pub(super) fn channel_session(&self, parts: &http::request::Parts) -> Option<SessionId> {
        match self.mount {
            crate::http::Mount::Channel => parts
                .headers
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(|s| SessionId(s.to_string())),
            crate::http::Mount::Tools => None,
        }
    }
}

/// The room `session` of `identity` lives in, as the model says
/// (`IdentityState::room_of`): what `send_message` without `room_id` sends to. A
/// read of the model's own rule, not a decision of the server's: the write it fills
/// in is judged by the model as every write is.
/// Errors (`invalid_params`): no channel session (on /mcp), or a session that has no
/// room yet; `upstream`: the engine has stopped.
async fn own_room(
    engine: &crate::engine::EngineHandle,
    identity: IdentityId,
    session: Option<SessionId>,
) -> Result<String, ToolError> {
    let Some(session) = session else {
        return Err(ToolError::Invalid(
            "room_id is required: only a /channel session has a room of its own".into(),
        ));
    };
    let room = engine
        .read(move |channel| {
            channel
                .identity(&identity)
                .and_then(|state| state.room_of(&session))
                .cloned()
        })
        .await
        .map_err(upstream)?;
    room.map(|room| room.0)
        .ok_or_else(|| ToolError::Invalid("this session has no room yet: pass room_id".into()))
}

/// The joined room a message or a file goes to: `room_id`, or without it this
/// session's own room ([`own_room`]). Errors: those of [`own_room`] and [`joined`].
pub(super) async fn target_room(
    engine: &crate::engine::EngineHandle,
    identity: &crate::matrix::Identity,
    room_id: Option<String>,
    session: Option<SessionId>,
) -> Result<Room, ToolError> {
    let room_id = match room_id {
        Some(room_id) => room_id,
        None => own_room(engine, IdentityId(identity.name.clone()), session).await?,
    };
    joined(identity, &room_id)
}

/// The reply target and thread of a message or a file: `reply_to` and `thread_root`
/// parsed, and without a `thread_root` the thread `reply_to` is in ([`thread_of`]),
/// so a reply to a thread message stays in its thread. Errors: `invalid_params` for
/// a malformed id, `not_found` for a `reply_to` the homeserver does not know.
pub(super) async fn relations(
    room: &Room,
    reply_to: Option<&str>,
    thread_root: Option<&str>,
) -> Result<(Option<EventId>, Option<EventId>), ToolError> {
    let reply_to = reply_to.map(parse_event).transpose()?;
    let mut thread_root = thread_root.map(parse_event).transpose()?;
    if let Some(target) = &reply_to {
        let parent_thread = thread_of(room, target).await?;
        thread_root = thread_root.or(parent_thread);
    }
    Ok((
        reply_to.as_ref().map(model_event),
        thread_root.as_ref().map(model_event),
    ))
}

#[tool_router(router = write_tools, vis = "pub(super)")]
impl McpServer {
    #[tool(
        title = "Send a message",
        description = "Send a markdown message (rendered to HTML). Without room_id, on /channel: this session's own room. Optional reply_to (event id) and thread_root. Long text is split on paragraph boundaries into several events. Returns event_ids.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = true
        )
    )]
    async fn send_message(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<SendMessageArgs>,
    ) -> Result<Json<Sent>, Failure> {
        let session = self.channel_session(&parts);
        self.run(&parts, "send_message", move |identity| async move {
            let room = target_room(&self.app.engine, identity, args.room_id, session).await?;
            let state = room.encryption_state();
            let budget = if state.is_encrypted() || state.is_unknown() {
                MAX_ENCRYPTED_CONTENT_BYTES
            } else {
                MAX_CONTENT_BYTES
            };
            let texts = fit_parts(&args.text, budget);
            if texts.is_empty() {
                return Err(ToolError::Invalid("text is empty".to_string()));
            }
            let (reply_to, thread_root) =
                relations(&room, args.reply_to.as_deref(), args.thread_root.as_deref()).await?;
            let write = AgentWrite::Message {
                room: model_room(&room),
                parts: texts.iter().map(|t| markdown_text(t)).collect(),
                reply_to,
                thread_root,
                txn_id: args
                    .txn_id
                    .clone()
                    .unwrap_or_else(|| TransactionId::new().to_string()),
            };
            let written = self.write(identity, write).await?;
            Ok(Sent {
                event_ids: written.event_ids,
            })
        })
        .await
    }

    #[tool(
        title = "Edit a message",
        description = "Edit one of the identity's own messages (m.replace), never a permission prompt. Returns the edit's event_id.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = true
        )
    )]
    async fn edit_message(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<EditArgs>,
    ) -> Result<Json<SentEvent>, Failure> {
        self.run(&parts, "edit_message", move |identity| async move {
            let room = joined(identity, &args.room_id)?;
            let event_id = parse_event(&args.event_id)?;
            if args.text.trim().is_empty() {
                return Err(ToolError::Invalid("text is empty".to_string()));
            }
            let original = room.event(&event_id, None).await.map_err(matrix_error)?;
            let sender = original
                .raw()
                .get_field::<OwnedUserId>("sender")
                .ok()
                .flatten()
                .ok_or_else(|| ToolError::NotFound(format!("{event_id} has no sender")))?;
            let write = AgentWrite::Edit {
                room: model_room(&room),
                original: model_event(&event_id),
                original_sender: UserId(sender.to_string()),
                text: markdown_text(&args.text),
            };
            let written = self.write(identity, write).await?;
            Ok(SentEvent {
                event_id: written.event_ids.into_iter().next(),
            })
        })
        .await
    }

    #[tool(
        title = "React to an event",
        description = "React to an event with a key (an m.annotation, e.g. 👍), never to a permission prompt. Returns the reaction's event_id.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = true
        )
    )]
    async fn send_reaction(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<ReactionArgs>,
    ) -> Result<Json<SentEvent>, Failure> {
        self.run(&parts, "send_reaction", move |identity| async move {
            let room = joined(identity, &args.room_id)?;
            let event_id = parse_event(&args.event_id)?;
            if args.key.is_empty() {
                return Err(ToolError::Invalid("key is empty".to_string()));
            }
            let write = AgentWrite::Reaction {
                room: model_room(&room),
                relates_to: model_event(&event_id),
                key: args.key.clone(),
            };
            let written = self.write(identity, write).await?;
            Ok(SentEvent {
                event_id: written.event_ids.into_iter().next(),
            })
        })
        .await
    }

    #[tool(
        title = "Redact an event",
        description = "Redact (delete) an event: the identity's own (never a permission prompt), or another's where its power level allows. Returns the redaction's event_id.",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = true
        )
    )]
    async fn redact(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<RedactArgs>,
    ) -> Result<Json<SentEvent>, Failure> {
        self.run(&parts, "redact", move |identity| async move {
            let room = joined(identity, &args.room_id)?;
            let event_id = parse_event(&args.event_id)?;
            let write = AgentWrite::Redaction {
                room: model_room(&room),
                redacts: model_event(&event_id),
                reason: args.reason.clone(),
            };
            let written = self.write(identity, write).await?;
            Ok(SentEvent {
                event_id: written.event_ids.into_iter().next(),
            })
        })
        .await
    }

    #[tool(
        title = "Acknowledge a pushed event",
        description = "Acknowledge a pushed event (its <channel> event_id): it is never replayed to a session again. With receipt: true and room_id, also sends a read receipt. Returns acknowledged: false when the event was never pushed or queued for this identity (or the session is not this identity's).",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn acknowledge(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<AckArgs>,
    ) -> Result<Json<Acknowledged>, Failure> {
        // On /channel the ack names its session; on /mcp it is the identity's agent
        // acknowledging outside any channel session.
        let session = self.channel_session(&parts);
        self.run(&parts, "acknowledge", move |identity| async move {
            let event_id = parse_event(&args.event_id)?;
            let id = IdentityId(identity.name.clone());
            let ev = model_event(&event_id);
            // The answer comes from the model's transition: dropped or taken.
            let known = self
                .app
                .engine
                .acknowledge(id, session, ev)
                .await
                .map_err(upstream)?;
            let mut receipt = false;
            if args.receipt == Some(true) {
                let room_id = args
                    .room_id
                    .as_deref()
                    .ok_or_else(|| ToolError::Invalid("receipt: true needs room_id".to_string()))?;
                let room = joined(identity, room_id)?;
                let write = AgentWrite::Receipt {
                    room: model_room(&room),
                    event_id: model_event(&event_id),
                };
                self.write(identity, write).await?;
                receipt = true;
            }
            Ok(Acknowledged {
                acknowledged: known,
                receipt,
            })
        })
        .await
    }

    #[tool(
        title = "Join a room",
        description = "Join a room by id or alias. Returns room_id.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = true
        )
    )]
    async fn join_room(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<JoinArgs>,
    ) -> Result<Json<JoinedRoom>, Failure> {
        self.run(&parts, "join_room", move |identity| async move {
            matrix_sdk::ruma::OwnedRoomOrAliasId::try_from(args.room.as_str())
                .map_err(|e| ToolError::Invalid(format!("room {:?}: {e}", args.room)))?;
            let write = AgentWrite::Join {
                room: args.room.clone(),
            };
            let written = self.write(identity, write).await?;
            Ok(JoinedRoom {
                room_id: written.room_id,
            })
        })
        .await
    }

    #[tool(
        title = "Leave a room",
        description = "Leave a joined room (never the room of a pending permission prompt).",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = true
        )
    )]
    async fn leave_room(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<super::read_tools::RoomArg>,
    ) -> Result<Json<Left>, Failure> {
        self.run(&parts, "leave_room", move |identity| async move {
            let room = joined(identity, &args.room_id)?;
            let write = AgentWrite::Leave {
                room: model_room(&room),
            };
            self.write(identity, write).await?;
            Ok(Left {
                left: args.room_id.clone(),
            })
        })
        .await
    }

    #[tool(
        title = "Invite a user",
        description = "Invite a user (MXID) to a joined room.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = true
        )
    )]
    async fn invite(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<InviteArgs>,
    ) -> Result<Json<Invited>, Failure> {
        self.run(&parts, "invite", move |identity| async move {
            let room = joined(identity, &args.room_id)?;
            let user = parse_user(&args.user_id)?;
            let write = AgentWrite::Invite {
                room: model_room(&room),
                user: UserId(user.to_string()),
            };
            self.write(identity, write).await?;
            Ok(Invited {
                invited: user.to_string(),
            })
        })
        .await
    }

    #[tool(
        title = "Create a room",
        description = "Create a private room (invite only), end-to-end encrypted unless encrypted is false, with the identity's allowed senders invited and any invite you add. Its name and topic are state: the homeserver and every member read them even when the room is encrypted. Not idempotent: each call makes a room. Returns room_id and who was invited.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = true
        )
    )]
    async fn create_room(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<CreateRoomArgs>,
    ) -> Result<Json<RoomMade>, Failure> {
        self.run(&parts, "create_room", move |identity| async move {
            let invite = args
                .invite
                .iter()
                .map(|u| parse_user(u).map(|u| UserId(u.to_string())))
                .collect::<Result<Vec<_>, _>>()?;
            let write = AgentWrite::CreateRoom {
                name: args.name.clone(),
                topic: args.topic.clone(),
                encrypted: args.encrypted.unwrap_or(true),
                invite,
            };
            let written = self.write(identity, write).await?;
            Ok(RoomMade {
                room_id: written.room_id.unwrap_or_default(),
                created: written.created,
                invited: written.invited,
            })
        })
        .await
    }

    #[tool(
        title = "Open a direct chat",
        description = "The direct chat with a user: the one the identity already has (created false), or a new encrypted one with the user invited and marked direct. Returns room_id.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = true
        )
    )]
    async fn create_dm(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<CreateDmArgs>,
    ) -> Result<Json<RoomMade>, Failure> {
        self.run(&parts, "create_dm", move |identity| async move {
            let user = parse_user(&args.user_id)?;
            if user.as_str() == identity.settings.user_id.as_str() {
                return Err(ToolError::Invalid(format!(
                    "user_id {user} is this identity: a direct chat is with someone else"
                )));
            }
            let write = AgentWrite::CreateDm {
                user: UserId(user.to_string()),
            };
            let written = self.write(identity, write).await?;
            Ok(RoomMade {
                room_id: written.room_id.unwrap_or_default(),
                created: written.created,
                invited: written.invited,
            })
        })
        .await
    }

    #[tool(
        title = "Set a room's name",
        description = "Set a joined room's name (\"\" removes it). Refused in a permission prompt room. State: the homeserver and every member read it even when the room is encrypted.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = true
        )
    )]
    async fn set_room_name(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<SetRoomNameArgs>,
    ) -> Result<Json<RoomStateSet>, Failure> {
        self.run(&parts, "set_room_name", move |identity| async move {
            self.set_room_state(identity, &args.room_id, |room| AgentWrite::SetRoomName {
                room,
                name: args.name.clone(),
            })
            .await
        })
        .await
    }

    #[tool(
        title = "Set a room's topic",
        description = "Set a joined room's topic (\"\" removes it). Refused in a permission prompt room. State: the homeserver and every member read it even when the room is encrypted.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = true
        )
    )]
    async fn set_room_topic(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<SetRoomTopicArgs>,
    ) -> Result<Json<RoomStateSet>, Failure> {
        self.run(&parts, "set_room_topic", move |identity| async move {
            self.set_room_state(identity, &args.room_id, |room| AgentWrite::SetRoomTopic {
                room,
                topic: args.topic.clone(),
            })
            .await
        })
        .await
    }
}

impl McpServer {
    /// `set_room_name` and `set_room_topic`: the state write `write` makes for the
    /// joined room `room_id`, through the model. Errors: `not_joined`, the model's
    /// refusal, the homeserver's.
    async fn set_room_state(
        &self,
        identity: &crate::matrix::Identity,
        room_id: &str,
        write: impl FnOnce(RoomId) -> AgentWrite,
    ) -> Result<RoomStateSet, ToolError> {
        let room = joined(identity, room_id)?;
        let written = self.write(identity, write(model_room(&room))).await?;
        Ok(RoomStateSet {
            room_id: room_id.to_owned(),
            event_id: written.event_ids.into_iter().next().unwrap_or_default(),
        })
    }
}

/// `text` as an MXID. Errors: `invalid_params`.
fn parse_user(text: &str) -> Result<OwnedUserId, ToolError> {
    OwnedUserId::try_from(text).map_err(|e| ToolError::Invalid(format!("user_id {text:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_model::{Input, Label};

    #[tokio::test(start_paused = true)]
    async fn a_message_without_a_room_goes_to_the_sessions_room_once_it_has_one() {
        crate::testing::start_paused_clock();
        let bot = IdentityId("bot".into());
        let mut channel = mc_model::Channel::new();
        channel
            .add_identity(
                bot.clone(),
                mc_model::IdentityConfig::new(UserId("@bot:hs".into()), []),
            )
            .unwrap();
        let (engine, _task) = crate::engine::spawn(
            channel,
            std::sync::Arc::new(crate::http::testing::NoWire::default()),
            crate::engine::NoPersist,
            crate::testing::paused_clock,
        );
        let web = Label::parse("web").unwrap();
        let session = Some(SessionId("s-web".into()));
        engine
            .submit(Input::Membership {
                identity: bot.clone(),
                room: RoomId("!r:hs".into()),
                event_id: None,
                user: UserId("@bot:hs".into()),
                membership: mc_model::Membership::Joined,
            })
            .unwrap();
        engine
            .submit(Input::Attach {
                identity: bot.clone(),
                session: session.clone().unwrap(),
                label: Some(web.clone()),
            })
            .unwrap();
        crate::testing::idle().await;
        // This wire creates no room: the label has none yet.
        let err = own_room(&engine, bot.clone(), session.clone())
            .await
            .unwrap_err();
        assert_eq!(
            err,
            ToolError::Invalid("this session has no room yet: pass room_id".into())
        );
        engine
            .submit(Input::Bind {
                identity: bot.clone(),
                label: web,
                room: Some(RoomId("!r:hs".into())),
            })
            .unwrap();
        assert_eq!(
            own_room(&engine, bot.clone(), session).await.unwrap(),
            "!r:hs"
        );
        let err = own_room(&engine, bot, None).await.unwrap_err();
        assert!(
            matches!(&err, ToolError::Invalid(m) if m.contains("room_id is required")),
            "{err:?}"
        );
    }
}
