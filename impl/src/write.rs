//! The agent's writes to Matrix, as executed: [`perform`] turns one
//! [`mc_model::AgentWrite`] that the model let through ([`mc_model::Effect::Write`])
//! into exactly that event, and the tool-error contract ([`ToolError`]) every tool
//! answers with.
//!
//! The pure parts (the tool-error contract, the refusals' words, the ids, each
//! part's relation, and the encryption rule) are `mc_adapters::write_rule`,
//! re-exported here; this module maps matrix-sdk's types to its enums and performs.
//!
//! Nothing here decides whether a write may happen: the model did, in the same
//! transition that emitted the effect (see `mc_model::agent`). What is sent is what
//! the model judged: the `body` and `formatted_body` of each part, the reaction
//! key, the redaction reason, the reply and thread targets.

use crate::matrix::Identity;
use matrix_sdk::room::edit::EditedContent;
use matrix_sdk::ruma::api::client::receipt::create_receipt::v3::ReceiptType;
use matrix_sdk::ruma::events::reaction::ReactionEventContent;
use matrix_sdk::ruma::events::receipt::ReceiptThread;
use matrix_sdk::ruma::events::relation::{Annotation, InReplyTo, Reply, Thread};
use matrix_sdk::ruma::events::room::message::{
    FormattedBody, MessageType, Relation, RoomMessageEventContent,
    RoomMessageEventContentWithoutRelation, TextMessageEventContent,
};
use matrix_sdk::ruma::events::room::MediaSource;
use matrix_sdk::ruma::events::Mentions;
use matrix_sdk::ruma::events::StateEventType;
use matrix_sdk::ruma::{OwnedEventId, OwnedTransactionId, OwnedUserId};
use matrix_sdk::{EncryptionState, Room, RoomState};
pub use mc_adapters::write_rule::{
    encryption_rule, plaintext_refused, refusal, upstream, RoomEncryption, ToolError,
};
use mc_adapters::write_rule::{
    event_id, homeserver_error, part_relation, reaction_allowed, redaction_reason_allowed, room_id,
    room_or_alias_id, user_id, Errcode, PartRelation, RoomEncryptionState,
};
use mc_model::{AgentText, AgentWrite, RoomId};

/// Maps a homeserver error to the contract's kinds ([`homeserver_error`]); no API
/// error (the homeserver could not be reached, or answered nothing readable) is
/// `upstream`. A rate limit's wait is ruma's reading of it (the `Retry-After` header
/// over the body's `retry_after_ms`), a date taken as the time until it from now.
pub fn api_error(api: Option<&matrix_sdk::ruma::api::error::Error>, message: String) -> ToolError {
    use matrix_sdk::ruma::api::error::{ErrorKind, LimitExceededErrorData, RetryAfter};
    let Some(api) = api else {
        return ToolError::Upstream(message);
    };
    let errcode = match api.error_kind() {
        Some(ErrorKind::NotFound) => Errcode::NotFound,
        Some(ErrorKind::Forbidden) => Errcode::Forbidden,
        Some(ErrorKind::TooLarge) => Errcode::TooLarge,
        Some(ErrorKind::LimitExceeded(LimitExceededErrorData { retry_after, .. })) => {
            let wait = retry_after.map(|after| match after {
                RetryAfter::Delay(wait) => wait,
                RetryAfter::DateTime(at) => at
                    .duration_since(std::time::SystemTime::now())
                    .unwrap_or_default(),
            });
            Errcode::LimitExceeded {
                retry_after_ms: wait.map(mc_adapters::rate_limit::retry_after_ms),
            }
        }
        _ => Errcode::Other,
    };
    homeserver_error(errcode, api.status_code.as_u16(), message)
}

pub fn matrix_error(e: matrix_sdk::Error) -> ToolError {
    api_error(e.as_client_api_error(), e.to_string())
}

pub fn http_error(e: matrix_sdk::HttpError) -> ToolError {
    api_error(e.as_client_api_error(), e.to_string())
}

/// What a performed write made: the events sent (in order), or the room joined,
/// created or found (`created`: whether this write made it; `invited`: the users
/// the new room's request invited, as sent); for a file, whether its bytes went up
/// encrypted (`media_encrypted`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Written {
    pub event_ids: Vec<String>,
    pub room_id: Option<String>,
    pub created: bool,
    pub invited: Vec<String>,
    pub media_encrypted: bool,
}

/// The identity's room `room`, if it is joined. Errors: `invalid_params` for a
/// malformed id, `not_joined` otherwise.
pub fn joined(identity: &Identity, room: &str) -> Result<Room, ToolError> {
    let id = room_id(room)?;
    match identity.client.get_room(&id) {
        Some(r) if r.state() == RoomState::Joined => Ok(r),
        Some(r) => Err(ToolError::NotJoined(format!(
            "{} is not joined to {room} (membership: {:?})",
            identity.settings.user_id,
            r.state()
        ))),
        None => Err(ToolError::NotJoined(format!(
            "{} is not joined to {room}",
            identity.settings.user_id
        ))),
    }
}

fn room_of(identity: &Identity, room: &RoomId) -> Result<Room, ToolError> {
    joined(identity, room.as_str())
}

/// matrix-sdk's `EncryptionState` as [`encryption_rule`] reads it.
pub(crate) fn encryption_state(state: &EncryptionState) -> RoomEncryptionState {
    if state.is_encrypted() {
        RoomEncryptionState::Encrypted
    } else if state.is_unknown() {
        RoomEncryptionState::Unknown
    } else {
        RoomEncryptionState::NotEncrypted
    }
}

/// Checks `room`'s encryption right before a send: the one place every send path
/// of the server asks (the agent's writes in [`perform`], and `LiveWire`'s prompt
/// posts, outcome edits and notices in `server.rs`). Reads matrix-sdk's own
/// knowledge, `Room::latest_encryption_state()` (fetching `GET
/// /rooms/{roomId}/state/m.room.encryption/` when unknown) and the stored
/// `m.room.encryption` event, and applies [`encryption_rule`].
///
/// `Ok(Encrypted)` means `Room::send` will encrypt an `m.room.message`; a caller
/// sending something matrix-sdk never encrypts (a reaction) or that the spec keeps
/// in the clear (a redaction's `reason`) must refuse it then
/// ([`plaintext_refused`]). Errors: `encryption_unknown` when the homeserver did not
/// answer or the store failed; `would_send_plaintext` (see [`encryption_rule`]).
pub async fn ensure_encrypted_or_plain(room: &Room) -> Result<RoomEncryption, ToolError> {
    let state = room.latest_encryption_state().await.map_err(|e| {
        ToolError::EncryptionUnknown(format!(
            "cannot learn whether {} is encrypted ({e}): nothing was sent",
            room.room_id()
        ))
    })?;
    let stored = room
        .get_state_event(StateEventType::RoomEncryption, "")
        .await
        .map_err(|e| {
            ToolError::EncryptionUnknown(format!(
                "cannot read {}'s m.room.encryption from the store ({e}): nothing was sent",
                room.room_id()
            ))
        })?;
    encryption_rule(encryption_state(&state), stored.is_some())
}

/// `m.text` content of one part exactly as the model judged it.
pub fn text_content(text: &AgentText) -> RoomMessageEventContentWithoutRelation {
    let mut content = TextMessageEventContent::plain(text.body.clone());
    content.formatted = text.formatted_body.clone().map(FormattedBody::html);
    RoomMessageEventContentWithoutRelation::new(MessageType::Text(content))
}

/// An agent's text from Markdown, as `send_message` and `edit_message` send it:
/// `body` the Markdown, `formatted_body` its HTML when that differs (ruma's
/// `text_markdown`).
pub fn markdown_text(markdown: &str) -> AgentText {
    match RoomMessageEventContentWithoutRelation::text_markdown(markdown).msgtype {
        MessageType::Text(t) => AgentText {
            body: t.body,
            formatted_body: t.formatted.map(|f| f.body),
        },
        _ => AgentText::plain(markdown),
    }
}

/// `content` with the relation of one part of a message ([`part_relation`]): the
/// first part replies to `reply_to` (within the thread when there is one); every
/// part is in the thread of `thread_root`. `mention` is the replied-to event's
/// sender, added to `m.mentions` of the part that replies (the caller leaves out
/// the identity itself).
pub fn with_relation(
    content: RoomMessageEventContentWithoutRelation,
    reply_to: Option<&OwnedEventId>,
    thread_root: Option<&OwnedEventId>,
    first: bool,
    mention: Option<OwnedUserId>,
) -> RoomMessageEventContent {
    let relation = part_relation(reply_to, thread_root, first);
    let replies = relation.replies_to().is_some();
    let mut content = content.with_relation(match relation {
        PartRelation::Thread {
            root,
            reply_to: Some(target),
        } => Some(Relation::Thread(Thread::reply(
            root.clone(),
            target.clone(),
        ))),
        PartRelation::Thread {
            root,
            reply_to: None,
        } => Some(Relation::Thread(Thread::plain(root.clone(), root.clone()))),
        PartRelation::Reply { to } => Some(Relation::Reply(Reply::new(InReplyTo::new(to.clone())))),
        PartRelation::None => None,
    });
    if let (true, Some(user)) = (replies, mention) {
        content.mentions = Some(Mentions::with_user_ids([user]));
    }
    content
}

/// Performs `write` as `identity`, exactly as given. Errors: the contract's kinds
/// ([`matrix_error`]); a message whose part `i` failed has sent parts `0..i` (a
/// retry with the same `txn_id` sends each part at most once).
///
/// Never plaintext into an encrypted room: every write that sends a room event asks
/// [`ensure_encrypted_or_plain`] right before it sends, and what it means per write:
/// - a message part and an edit: sent when the room is encrypted (matrix-sdk encrypts
///   them) or plain; refused (`would_send_plaintext`, `encryption_unknown`) otherwise;
/// - a reaction: refused in an encrypted room too, since matrix-sdk 0.18 sends every
///   `m.reaction` in the clear and its key is any text the agent chose;
/// - a redaction: an `m.room.redaction` is never encrypted, since the homeserver must
///   read what it redacts to apply it ([Client-Server API, "Redactions"]; the
///   end-to-end encryption module encrypts message content, not the redaction the
///   server acts on). Without a `reason` it carries only the target id, which is in
///   the clear anyway (`m.relates_to` and `redacts` are never encrypted), so it is
///   sent; with a `reason` (free text) into an encrypted room it is refused;
/// - a file: its bytes go up encrypted (AES-CTR, matrix-sdk's
///   `upload_encrypted_file`; [Client-Server API, "Sending encrypted attachments"])
///   into an encrypted room and its event is Megolm-encrypted; plain into a plain
///   room; refused otherwise. The room's encryption is asked again right before the
///   event is sent, and a change since the upload refuses it (a plain upload is never
///   named from an encrypted room);
/// - a read receipt is no room event: an ephemeral `m.receipt` (EDU) naming an
///   event id, which the spec never encrypts ([Client-Server API, "Receipts"]), so
///   it is not checked; nor are joins, leaves and invites (membership, no content);
/// - a room's name and topic (`set_room_name`, `set_room_topic`, and those of a new
///   room) are state events, which the spec never encrypts: every member and the
///   homeserver read them in any room ([Client-Server API, "m.room.name"]); the
///   tools say so, and a new room is encrypted unless the agent asks otherwise.
///
/// [Client-Server API, "m.room.name"]: https://spec.matrix.org/v1.16/client-server-api/#mroomname
/// [Client-Server API, "Sending encrypted attachments"]: https://spec.matrix.org/v1.16/client-server-api/#sending-encrypted-attachments
///
/// [Client-Server API, "Redactions"]: https://spec.matrix.org/v1.16/client-server-api/#redactions
/// [Client-Server API, "Receipts"]: https://spec.matrix.org/v1.16/client-server-api/#receipts
pub async fn perform(identity: &Identity, write: &AgentWrite) -> Result<Written, ToolError> {
    let own = identity.settings.user_id.as_str();
    match write {
        AgentWrite::Message {
            room,
            parts,
            reply_to,
            thread_root,
            txn_id,
        } => {
            let room = room_of(identity, room)?;
            let reply_to = reply_to.as_ref().map(event_id).transpose()?;
            let thread_root = thread_root.as_ref().map(event_id).transpose()?;
            let mention = reply_mention(&room, reply_to.as_ref(), own).await?;
            let mut event_ids = Vec::new();
            for (i, part) in parts.iter().enumerate() {
                let content = with_relation(
                    text_content(part),
                    reply_to.as_ref(),
                    thread_root.as_ref(),
                    i == 0,
                    mention.clone(),
                );
                let txn = OwnedTransactionId::from(format!("{txn_id}-{i}"));
                ensure_encrypted_or_plain(&room).await?;
                let response = room
                    .send(content)
                    .with_transaction_id(txn)
                    .await
                    .map_err(matrix_error)?;
                event_ids.push(response.response.event_id.to_string());
            }
            Ok(Written {
                event_ids,
                ..Written::default()
            })
        }
        AgentWrite::Edit {
            room,
            original,
            text,
            ..
        } => {
            let room = room_of(identity, room)?;
            let edit = room
                .make_edit_event(
                    &event_id(original)?,
                    EditedContent::RoomMessage(text_content(text)),
                )
                .await
                .map_err(upstream)?;
            ensure_encrypted_or_plain(&room).await?;
            let response = room.send(edit).await.map_err(matrix_error)?;
            Ok(sent(response.response.event_id))
        }
        AgentWrite::Reaction {
            room,
            relates_to,
            key,
        } => {
            let room = room_of(identity, room)?;
            let content =
                ReactionEventContent::new(Annotation::new(event_id(relates_to)?, key.clone()));
            reaction_allowed(ensure_encrypted_or_plain(&room).await?)?;
            let response = room.send(content).await.map_err(matrix_error)?;
            Ok(sent(response.response.event_id))
        }
        AgentWrite::Redaction {
            room,
            redacts,
            reason,
        } => {
            let room = room_of(identity, room)?;
            let redacts = event_id(redacts)?;
            if reason.is_some() {
                redaction_reason_allowed(ensure_encrypted_or_plain(&room).await?)?;
            }
            let response = room
                .redact(&redacts, reason.as_deref(), None)
                .await
                .map_err(http_error)?;
            Ok(sent(response.event_id))
        }
        AgentWrite::Receipt { room, event_id } => {
            let room = room_of(identity, room)?;
            room.send_single_receipt(
                ReceiptType::Read,
                ReceiptThread::Unthreaded,
                self::event_id(event_id)?,
            )
            .await
            .map_err(matrix_error)?;
            Ok(Written::default())
        }
        AgentWrite::Join { room } => {
            let target = room_or_alias_id(room.as_str())?;
            let joined = identity
                .client
                .join_room_by_id_or_alias(&target, &[])
                .await
                .map_err(matrix_error)?;
            Ok(Written {
                room_id: Some(joined.room_id().to_string()),
                ..Written::default()
            })
        }
        AgentWrite::Leave { room } => {
            room_of(identity, room)?
                .leave()
                .await
                .map_err(matrix_error)?;
            Ok(Written::default())
        }
        AgentWrite::Invite { room, user } => {
            let room = room_of(identity, room)?;
            room.invite_user_by_id(&user_id(user)?)
                .await
                .map_err(matrix_error)?;
            Ok(Written::default())
        }
        AgentWrite::CreateRoom {
            name,
            topic,
            encrypted,
            invite,
        } => {
            let invite = invite.iter().map(user_id).collect::<Result<Vec<_>, _>>()?;
            let invited = invite.iter().map(ToString::to_string).collect();
            let request = crate::server::create_room_request(
                name.as_deref(),
                topic.as_deref(),
                invite,
                *encrypted,
            );
            let room = identity
                .client
                .create_room(request)
                .await
                .map_err(matrix_error)?;
            Ok(Written {
                room_id: Some(room.room_id().to_string()),
                created: true,
                invited,
                ..Written::default()
            })
        }
        AgentWrite::CreateDm { user } => {
            let user = user_id(user)?;
            if let Some(room) = identity.client.get_dm_room(&user) {
                return Ok(Written {
                    room_id: Some(room.room_id().to_string()),
                    ..Written::default()
                });
            }
            let room = identity
                .client
                .create_dm(&user)
                .await
                .map_err(matrix_error)?;
            Ok(Written {
                room_id: Some(room.room_id().to_string()),
                created: true,
                invited: vec![user.to_string()],
                ..Written::default()
            })
        }
        AgentWrite::SetRoomName { room, name } => {
            let response = room_of(identity, room)?
                .set_name(name.clone())
                .await
                .map_err(matrix_error)?;
            Ok(sent(response.event_id))
        }
        AgentWrite::SetRoomTopic { room, topic } => {
            let response = room_of(identity, room)?
                .set_room_topic(topic)
                .await
                .map_err(matrix_error)?;
            Ok(sent(response.event_id))
        }
        AgentWrite::File {
            room,
            name,
            caption,
            mimetype,
            size,
            sha256,
            reply_to,
            thread_root,
            txn_id,
        } => {
            let room = room_of(identity, room)?;
            let bytes = identity.outbox.get(sha256).ok_or_else(|| {
                ToolError::Upstream(format!(
                    "the bytes of {name} (sha256 {sha256}) are no longer staged: nothing was sent"
                ))
            })?;
            let mime: mime::Mime = mimetype
                .parse()
                .map_err(|e| ToolError::Invalid(format!("mimetype {mimetype:?}: {e}")))?;
            let reply_to = reply_to.as_ref().map(event_id).transpose()?;
            let thread_root = thread_root.as_ref().map(event_id).transpose()?;
            let mention = reply_mention(&room, reply_to.as_ref(), own).await?;
            let encryption = ensure_encrypted_or_plain(&room).await?;
            let source = match encryption {
                RoomEncryption::Encrypted => {
                    let mut reader = std::io::Cursor::new(bytes.as_slice());
                    let file = identity
                        .client
                        .upload_encrypted_file(&mut reader)
                        .await
                        .map_err(matrix_error)?;
                    MediaSource::Encrypted(Box::new(file))
                }
                RoomEncryption::Plain => {
                    let response = identity
                        .client
                        .media()
                        .upload(&mime, bytes.to_vec(), None)
                        .await
                        .map_err(matrix_error)?;
                    MediaSource::Plain(response.content_uri)
                }
            };
            let sniffed = mc_adapters::files::sniff(&bytes);
            let content = with_relation(
                file_content(name, caption.as_ref(), mimetype, *size, &sniffed, source),
                reply_to.as_ref(),
                thread_root.as_ref(),
                true,
                mention,
            );
            if ensure_encrypted_or_plain(&room).await? != encryption {
                return Err(ToolError::WouldSendPlaintext(format!(
                    "{}'s encryption changed while {name} was uploaded: nothing was sent",
                    room.room_id()
                )));
            }
            let response = room
                .send(content)
                .with_transaction_id(OwnedTransactionId::from(txn_id.as_str()))
                .await
                .map_err(matrix_error)?;
            Ok(Written {
                event_ids: vec![response.response.event_id.to_string()],
                media_encrypted: encryption == RoomEncryption::Encrypted,
                ..Written::default()
            })
        }
    }
}

/// The content of a file's event ([Client-Server API, "m.file"], "m.image",
/// "m.audio", "m.video"; the msgtype is `sniffed.kind`): `body` the caption's when
/// there is one (with its HTML), else `name`; `filename` always `name`, so a
/// client shows a caption only when there is one ("Media captions"); `info` the
/// mimetype, the size in bytes and, for an image, its width and height in pixels.
///
/// [Client-Server API, "m.file"]: https://spec.matrix.org/v1.16/client-server-api/#mfile
pub fn file_content(
    name: &str,
    caption: Option<&AgentText>,
    mimetype: &str,
    size: u64,
    sniffed: &mc_adapters::files::Sniffed,
    source: MediaSource,
) -> RoomMessageEventContentWithoutRelation {
    use matrix_sdk::ruma::events::room::message::{
        AudioInfo, AudioMessageEventContent, FileInfo, FileMessageEventContent,
        ImageMessageEventContent, VideoInfo, VideoMessageEventContent,
    };
    use matrix_sdk::ruma::events::room::ImageInfo;
    use matrix_sdk::ruma::UInt;
    use mc_adapters::files::MediaKind;
    let body = caption.map_or_else(|| name.to_owned(), |c| c.body.clone());
    let formatted = caption
        .and_then(|c| c.formatted_body.clone())
        .map(FormattedBody::html);
    let filename = Some(name.to_owned());
    let size = UInt::new(size);
    let mimetype = Some(mimetype.to_owned());
    let pixels = |n: Option<u32>| n.map(UInt::from);
    // One shape for the four msgtypes: the content with its caption and name, and
    // its info with the mimetype and size (and what `$dims` adds).
    macro_rules! media {
        ($variant:ident, $content:ident, $info:ident) => {
            media!($variant, $content, $info, |_info| {})
        };
        ($variant:ident, $content:ident, $info:ident, |$i:ident| $dims:block) => {{
            let mut $i = $info::new();
            $i.mimetype = mimetype;
            $i.size = size;
            $dims
            let mut c = $content::new(body, source);
            c.formatted = formatted;
            c.filename = filename;
            c.info = Some(Box::new($i));
            MessageType::$variant(c)
        }};
    }
    let msgtype = match sniffed.kind {
        MediaKind::Image => media!(Image, ImageMessageEventContent, ImageInfo, |info| {
            info.width = pixels(sniffed.width);
            info.height = pixels(sniffed.height);
        }),
        MediaKind::Video => media!(Video, VideoMessageEventContent, VideoInfo),
        MediaKind::Audio => media!(Audio, AudioMessageEventContent, AudioInfo),
        MediaKind::File => media!(File, FileMessageEventContent, FileInfo),
    };
    RoomMessageEventContentWithoutRelation::new(msgtype)
}

fn sent(event_id: OwnedEventId) -> Written {
    Written {
        event_ids: vec![event_id.to_string()],
        ..Written::default()
    }
}

/// Who a reply to `reply_to` mentions (`m.mentions`): the sender of the event it
/// replies to, unless that is the identity itself (`own`); nobody without a reply.
/// Errors: `not_found` when the homeserver does not know the event.
async fn reply_mention(
    room: &Room,
    reply_to: Option<&OwnedEventId>,
    own: &str,
) -> Result<Option<OwnedUserId>, ToolError> {
    let Some(event_id) = reply_to else {
        return Ok(None);
    };
    let event = room.event(event_id, None).await.map_err(|e| {
        ToolError::NotFound(format!(
            "reply_to {event_id}: {}",
            matrix_error(e).message()
        ))
    })?;
    Ok(event
        .raw()
        .get_field::<OwnedUserId>("sender")
        .ok()
        .flatten()
        .filter(|sender| sender.as_str() != own))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error ruma reads from a homeserver's answer of `status` with `body` and
    /// a `Retry-After` header when given.
    fn homeserver_answer(
        status: u16,
        retry_after: Option<&str>,
        body: serde_json::Value,
    ) -> matrix_sdk::ruma::api::error::Error {
        use matrix_sdk::ruma::api::EndpointError as _;
        let mut response = http::Response::builder().status(status);
        if let Some(after) = retry_after {
            response = response.header(http::header::RETRY_AFTER, after);
        }
        let response = response.body(body.to_string().into_bytes()).unwrap();
        matrix_sdk::ruma::api::error::Error::from_http_response(response)
    }

    #[test]
    fn a_homeserver_429_is_rate_limited_with_its_retry_after() {
        let limited = serde_json::json!({
            "errcode": "M_LIMIT_EXCEEDED",
            "error": "Too Many Requests",
            "retry_after_ms": 2_345,
        });
        for (retry_after, wait) in [
            // The body's `retry_after_ms`.
            (None, 2_345),
            // The header wins (seconds).
            (Some("3"), 3_000),
            // A date already past: retry at once (after 1 ms).
            (Some("Wed, 21 Oct 2015 07:28:00 GMT"), 1),
        ] {
            let api = homeserver_answer(429, retry_after, limited.clone());
            let error = api_error(Some(&api), api.to_string());
            assert_eq!(error.kind(), "rate_limited", "{retry_after:?}");
            assert_eq!(error.retry_after_ms(), Some(wait), "{retry_after:?}");
            assert!(
                error
                    .message()
                    .contains("[429 / M_LIMIT_EXCEEDED] Too Many Requests"),
                "{error}"
            );
        }
        // A date ahead: the time until it (the header has whole seconds).
        let at = std::time::SystemTime::now() + std::time::Duration::from_secs(120);
        let date =
            http::HeaderValue::try_from(&matrix_sdk::ruma::api::error::RetryAfter::DateTime(at))
                .unwrap();
        let api = homeserver_answer(429, Some(date.to_str().unwrap()), limited.clone());
        let wait = api_error(Some(&api), String::new())
            .retry_after_ms()
            .unwrap();
        assert!((118_000..=120_000).contains(&wait), "{wait}");
        // Without a wait anywhere: one second.
        let api = homeserver_answer(
            429,
            None,
            serde_json::json!({"errcode": "M_LIMIT_EXCEEDED", "error": "slow"}),
        );
        assert_eq!(
            api_error(Some(&api), String::new()).retry_after_ms(),
            Some(1_000)
        );
        // Not a rate limit: no wait.
        let api = homeserver_answer(
            403,
            None,
            serde_json::json!({"errcode": "M_FORBIDDEN", "error": "no"}),
        );
        let forbidden = api_error(Some(&api), String::new());
        assert_eq!(forbidden.kind(), "forbidden");
        assert_eq!(forbidden.retry_after_ms(), None);
    }

    #[test]
    fn a_part_is_sent_with_the_body_and_html_the_model_judged() {
        let text = markdown_text("**bold** & <tag>");
        let content = serde_json::to_value(text_content(&text)).unwrap();
        assert_eq!(content["body"], text.body);
        assert_eq!(content["msgtype"], "m.text");
        assert_eq!(
            content["formatted_body"],
            serde_json::json!(text.formatted_body.clone().unwrap())
        );
        assert_eq!(content["format"], "org.matrix.custom.html");
        let plain = serde_json::to_value(text_content(&markdown_text("plain"))).unwrap();
        assert_eq!(
            plain,
            serde_json::json!({"msgtype": "m.text", "body": "plain"})
        );
    }

    #[test]
    fn a_reply_in_a_thread_names_both_and_only_the_first_part_replies() {
        let root = OwnedEventId::try_from("$root").unwrap();
        let target = OwnedEventId::try_from("$target").unwrap();
        let ann = OwnedUserId::try_from("@ann:hs").unwrap();
        let part = || text_content(&AgentText::plain("x"));
        let first = serde_json::to_value(with_relation(
            part(),
            Some(&target),
            Some(&root),
            true,
            Some(ann.clone()),
        ))
        .unwrap();
        assert_eq!(
            first["m.relates_to"],
            serde_json::json!({"rel_type": "m.thread", "event_id": "$root",
                "m.in_reply_to": {"event_id": "$target"}})
        );
        assert_eq!(
            first["m.mentions"],
            serde_json::json!({"user_ids": ["@ann:hs"]})
        );
        let second = serde_json::to_value(with_relation(
            part(),
            Some(&target),
            Some(&root),
            false,
            Some(ann.clone()),
        ))
        .unwrap();
        assert_eq!(
            second["m.relates_to"],
            serde_json::json!({"rel_type": "m.thread", "event_id": "$root",
                "is_falling_back": true, "m.in_reply_to": {"event_id": "$root"}})
        );
        assert!(second.get("m.mentions").is_none());
        let reply =
            serde_json::to_value(with_relation(part(), Some(&target), None, true, None)).unwrap();
        assert_eq!(
            reply["m.relates_to"],
            serde_json::json!({"m.in_reply_to": {"event_id": "$target"}})
        );
    }

    #[test]
    fn matrix_sdk_encryption_states_are_read_as_the_rule_reads_them() {
        use RoomEncryption::{Encrypted, Plain};
        let rule =
            |state, ever| encryption_rule(encryption_state(&state), ever).map_err(|e| e.kind());
        assert_eq!(rule(EncryptionState::Encrypted, true), Ok(Encrypted));
        assert_eq!(rule(EncryptionState::Encrypted, false), Ok(Encrypted));
        assert_eq!(rule(EncryptionState::NotEncrypted, false), Ok(Plain));
        assert_eq!(
            rule(EncryptionState::NotEncrypted, true),
            Err("would_send_plaintext")
        );
        for ever in [false, true] {
            assert_eq!(
                rule(EncryptionState::Unknown, ever),
                Err("encryption_unknown")
            );
        }
    }
}
