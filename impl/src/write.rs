//! The agent's writes to Matrix, as executed: [`perform`] turns one
//! [`mc_model::AgentWrite`] that the model let through ([`mc_model::Effect::Write`])
//! into exactly that event, and the tool-error contract ([`ToolError`]) every tool
//! answers with.
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
use matrix_sdk::ruma::events::Mentions;
use matrix_sdk::ruma::events::StateEventType;
use matrix_sdk::ruma::{OwnedEventId, OwnedRoomId, OwnedTransactionId, OwnedUserId};
use matrix_sdk::{EncryptionState, Room, RoomState};
use mc_model::{AgentText, AgentWrite, DropReason, EventId, RoomId, UserId};

/// A tool failure that is not a schema error (see `mcp.rs` for the contract): the
/// `kind` a result's `structuredContent.error.kind` carries, and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolError {
    /// `invalid_params`: a malformed id, an empty text, a limit out of range.
    Invalid(String),
    /// `not_joined`: the identity is not joined to the room.
    NotJoined(String),
    /// `not_found`: the homeserver does not know the event or room.
    NotFound(String),
    /// `forbidden`: the homeserver refused, or the model did (see [`refusal`]).
    Forbidden(String),
    /// `too_large`.
    TooLarge(String),
    /// `upstream`: the homeserver failed or could not be reached.
    Upstream(String),
    /// `encryption_unknown`: whether the room is encrypted could not be learnt (the
    /// homeserver did not answer for its `m.room.encryption` state), so nothing was
    /// sent (see [`ensure_encrypted_or_plain`]).
    EncryptionUnknown(String),
    /// `would_send_plaintext`: the room is or was encrypted and this send would go
    /// out in the clear, so nothing was sent (see [`ensure_encrypted_or_plain`]).
    WouldSendPlaintext(String),
}

impl ToolError {
    /// The contract's `kind` string.
    pub fn kind(&self) -> &'static str {
        match self {
            ToolError::Invalid(_) => "invalid_params",
            ToolError::NotJoined(_) => "not_joined",
            ToolError::NotFound(_) => "not_found",
            ToolError::Forbidden(_) => "forbidden",
            ToolError::TooLarge(_) => "too_large",
            ToolError::Upstream(_) => "upstream",
            ToolError::EncryptionUnknown(_) => "encryption_unknown",
            ToolError::WouldSendPlaintext(_) => "would_send_plaintext",
        }
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        match self {
            ToolError::Invalid(m)
            | ToolError::NotJoined(m)
            | ToolError::NotFound(m)
            | ToolError::Forbidden(m)
            | ToolError::TooLarge(m)
            | ToolError::Upstream(m)
            | ToolError::EncryptionUnknown(m)
            | ToolError::WouldSendPlaintext(m) => m,
        }
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind(), self.message())
    }
}

pub fn upstream(e: impl std::fmt::Display) -> ToolError {
    ToolError::Upstream(e.to_string())
}

/// Maps a homeserver error to the contract's kinds, by `errcode` or else by HTTP
/// status (Synapse answers a join of an unknown room `404 M_UNKNOWN`): what is not
/// found, forbidden or too large is not a failure of the homeserver.
pub fn api_error(api: Option<&matrix_sdk::ruma::api::error::Error>, message: String) -> ToolError {
    use matrix_sdk::ruma::api::error::ErrorKind;
    let Some(api) = api else {
        return ToolError::Upstream(message);
    };
    match (api.error_kind(), api.status_code.as_u16()) {
        (Some(ErrorKind::NotFound), _) | (_, 404) => ToolError::NotFound(message),
        (Some(ErrorKind::Forbidden), _) | (_, 403) => ToolError::Forbidden(message),
        (Some(ErrorKind::TooLarge), _) | (_, 413) => ToolError::TooLarge(message),
        _ => ToolError::Upstream(message),
    }
}

pub fn matrix_error(e: matrix_sdk::Error) -> ToolError {
    api_error(e.as_client_api_error(), e.to_string())
}

pub fn http_error(e: matrix_sdk::HttpError) -> ToolError {
    api_error(e.as_client_api_error(), e.to_string())
}

/// What the tool answers when the model refused the write (`reason` is the
/// `WriteRefused` effect's): always `forbidden`, with the rule in words.
pub fn refusal(reason: &DropReason, write: &AgentWrite, user_id: &str) -> ToolError {
    let target = write
        .targets()
        .first()
        .map_or_else(String::new, |t| t.to_string());
    ToolError::Forbidden(match reason {
        DropReason::PromptTarget => format!(
            "{target} is a permission prompt: it is the server's, and only approvers answer it"
        ),
        DropReason::NotOwnMessage => format!(
            "{target} is not a message of {user_id}: only the identity's own messages can be \
             edited"
        ),
        DropReason::NamesOpenRequest { request_id } => format!(
            "the text names the open permission request {request_id}: the agent may not write a \
             pending request's id (only the server's prompt shows it)"
        ),
        DropReason::LeavesPromptRoom => {
            "a permission prompt waits in this room: leaving it would leave the prompt \
             unanswerable"
                .to_string()
        }
        other => format!("the server refused the write: {other:?}"),
    })
}

/// What a performed write made: the events sent (in order) or the room joined.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Written {
    pub event_ids: Vec<String>,
    pub room_id: Option<String>,
}

/// The identity's room `room`, if it is joined. Errors: `invalid_params` for a
/// malformed id, `not_joined` otherwise.
pub fn joined(identity: &Identity, room: &str) -> Result<Room, ToolError> {
    let id = OwnedRoomId::try_from(room)
        .map_err(|e| ToolError::Invalid(format!("room_id {room:?}: {e}")))?;
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

fn event(id: &EventId) -> Result<OwnedEventId, ToolError> {
    OwnedEventId::try_from(id.as_str())
        .map_err(|e| ToolError::Invalid(format!("event_id {id:?}: {e}")))
}

fn room_of(identity: &Identity, room: &RoomId) -> Result<Room, ToolError> {
    joined(identity, room.as_str())
}

/// What a room's encryption allows a send to be, as [`ensure_encrypted_or_plain`]
/// found it right before the send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoomEncryption {
    /// The room is encrypted: matrix-sdk's `Room::send` Megolm-encrypts what it
    /// sends (`m.room.encrypted`), except `m.reaction`, which it always sends in the
    /// clear (matrix-sdk 0.18 `SendRawMessageLikeEvent`: "Reactions are currently
    /// famously not encrypted").
    Encrypted,
    /// The room is not encrypted and never was (no `m.room.encryption` in the store):
    /// sends go out in the clear, as everyone else's in the room do.
    Plain,
}

/// The rule "never plaintext into an encrypted room", from what matrix-sdk knows:
/// `state` is `Room::latest_encryption_state()` (which asks the homeserver for the
/// room's `m.room.encryption` state when the store does not know it), and
/// `ever_encrypted` whether the state store holds an `m.room.encryption` event of
/// the room (redacted or not: matrix-sdk ignores a redacted or unreadable one for
/// `state`, and a refetch after a state reset that lost it on the homeserver sets
/// `state` to not encrypted while the stored event stays).
///
/// Errors: `would_send_plaintext` when the room was encrypted but matrix-sdk now
/// takes it as not encrypted (its `Room::send` would send in the clear);
/// `encryption_unknown` when the state is still unknown.
pub fn encryption_rule(
    state: &EncryptionState,
    ever_encrypted: bool,
) -> Result<RoomEncryption, ToolError> {
    if state.is_encrypted() {
        Ok(RoomEncryption::Encrypted)
    } else if state.is_unknown() {
        Err(ToolError::EncryptionUnknown(
            "the room's encryption state (m.room.encryption) is unknown, even after asking \
             the homeserver: nothing was sent"
                .into(),
        ))
    } else if ever_encrypted {
        Err(ToolError::WouldSendPlaintext(
            "the room was encrypted (its m.room.encryption event is in the store) but \
             matrix-sdk now takes it as not encrypted (a state reset?): it would send in the \
             clear, so nothing was sent"
                .into(),
        ))
    } else {
        Ok(RoomEncryption::Plain)
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
    encryption_rule(&state, stored.is_some())
}

/// The refusal of a send that would carry `what` in the clear into an encrypted
/// room: `would_send_plaintext`, naming why it cannot be encrypted.
pub fn plaintext_refused(what: &str, why: &str) -> ToolError {
    ToolError::WouldSendPlaintext(format!(
        "the room is encrypted and {what} would be sent in the clear ({why}): nothing was sent"
    ))
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

/// The relation of part `index` of a message: the first part replies to `reply_to`
/// (within the thread when there is one); every part is in the thread of
/// `thread_root`. `mention` is the replied-to event's sender, added to
/// `m.mentions` when it is not the identity itself.
pub fn with_relation(
    content: RoomMessageEventContentWithoutRelation,
    reply_to: Option<&OwnedEventId>,
    thread_root: Option<&OwnedEventId>,
    first: bool,
    mention: Option<OwnedUserId>,
) -> RoomMessageEventContent {
    let reply_to = reply_to.filter(|_| first);
    let mut content = content.with_relation(match (reply_to, thread_root) {
        (Some(target), Some(root)) => Some(Relation::Thread(Thread::reply(
            root.clone(),
            target.clone(),
        ))),
        (None, Some(root)) => Some(Relation::Thread(Thread::plain(root.clone(), root.clone()))),
        (Some(target), None) => Some(Relation::Reply(Reply::new(InReplyTo::new(target.clone())))),
        (None, None) => None,
    });
    if let (Some(_), Some(user)) = (reply_to, mention) {
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
/// - a read receipt is no room event: an ephemeral `m.receipt` (EDU) naming an
///   event id, which the spec never encrypts ([Client-Server API, "Receipts"]), so
///   it is not checked; nor are joins, leaves and invites (membership, no content).
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
            let reply_to = reply_to.as_ref().map(event).transpose()?;
            let thread_root = thread_root.as_ref().map(event).transpose()?;
            let mention = match &reply_to {
                Some(target) => parent_sender(&room, target)
                    .await?
                    .filter(|sender| sender.as_str() != own),
                None => None,
            };
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
                room_id: None,
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
                    &event(original)?,
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
                ReactionEventContent::new(Annotation::new(event(relates_to)?, key.clone()));
            if ensure_encrypted_or_plain(&room).await? == RoomEncryption::Encrypted {
                return Err(plaintext_refused(
                    "the reaction's key",
                    "matrix-sdk 0.18 never encrypts m.reaction; reply with send_message instead",
                ));
            }
            let response = room.send(content).await.map_err(matrix_error)?;
            Ok(sent(response.response.event_id))
        }
        AgentWrite::Redaction {
            room,
            redacts,
            reason,
        } => {
            let room = room_of(identity, room)?;
            let redacts = event(redacts)?;
            if reason.is_some()
                && ensure_encrypted_or_plain(&room).await? == RoomEncryption::Encrypted
            {
                return Err(plaintext_refused(
                    "the redaction's reason",
                    "a redaction is never encrypted: the homeserver must read it; redact \
                     without a reason",
                ));
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
                event(event_id)?,
            )
            .await
            .map_err(matrix_error)?;
            Ok(Written::default())
        }
        AgentWrite::Join { room } => {
            let target = matrix_sdk::ruma::OwnedRoomOrAliasId::try_from(room.as_str())
                .map_err(|e| ToolError::Invalid(format!("room {room:?}: {e}")))?;
            let joined = identity
                .client
                .join_room_by_id_or_alias(&target, &[])
                .await
                .map_err(matrix_error)?;
            Ok(Written {
                event_ids: Vec::new(),
                room_id: Some(joined.room_id().to_string()),
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
    }
}

fn sent(event_id: OwnedEventId) -> Written {
    Written {
        event_ids: vec![event_id.to_string()],
        room_id: None,
    }
}

fn user_id(user: &UserId) -> Result<OwnedUserId, ToolError> {
    OwnedUserId::try_from(user.as_str())
        .map_err(|e| ToolError::Invalid(format!("user_id {user:?}: {e}")))
}

/// The sender of `event_id` in `room`. Errors: `not_found` when the homeserver does
/// not know it.
pub async fn parent_sender(
    room: &Room,
    event_id: &OwnedEventId,
) -> Result<Option<OwnedUserId>, ToolError> {
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
        .flatten())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_room_that_is_or_was_encrypted_or_is_unknown_never_takes_plaintext() {
        use RoomEncryption::{Encrypted, Plain};
        let rule = |state, ever| encryption_rule(&state, ever).map_err(|e| e.kind());
        assert_eq!(rule(EncryptionState::Encrypted, true), Ok(Encrypted));
        // matrix-sdk's state wins when it says encrypted (the event may not be stored
        // yet when the state came from the homeserver's answer).
        assert_eq!(rule(EncryptionState::Encrypted, false), Ok(Encrypted));
        assert_eq!(rule(EncryptionState::NotEncrypted, false), Ok(Plain));
        // A state reset: the homeserver lost m.room.encryption, the store has it.
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
        let refused = plaintext_refused("the reaction's key", "why");
        assert_eq!(refused.kind(), "would_send_plaintext");
        assert!(refused
            .message()
            .contains("the reaction's key would be sent in the clear (why)"));
    }

    #[test]
    fn every_refusal_is_forbidden_and_names_its_rule() {
        let write = AgentWrite::Reaction {
            room: RoomId("!r:hs".into()),
            relates_to: EventId("$p".into()),
            key: "x".into(),
        };
        let id = mc_model::RequestId::parse("abcde").unwrap();
        for (reason, says) in [
            (DropReason::PromptTarget, "$p is a permission prompt"),
            (DropReason::NotOwnMessage, "$p is not a message of @bot:hs"),
            (
                DropReason::NamesOpenRequest { request_id: id },
                "names the open permission request abcde",
            ),
            (DropReason::LeavesPromptRoom, "a permission prompt waits"),
        ] {
            let error = refusal(&reason, &write, "@bot:hs");
            assert_eq!(error.kind(), "forbidden");
            assert!(error.message().contains(says), "{error}");
        }
    }
}
