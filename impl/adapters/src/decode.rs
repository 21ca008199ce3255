//! Raw Matrix timeline events (the JSON of a `/sync` timeline entry, of
//! `room.event()`, `room.messages()` or an event handler's `RawEvent`) into the
//! core's inputs: [`mc_model::Message`], [`mc_model::Reaction`],
//! [`mc_model::Redaction`].
//!
//! Parsing is done by ruma (the `ruma` that matrix-sdk uses): the envelope (`event_id`,
//! `sender`, `type`, `origin_server_ts`) is read field by field from a
//! [`Raw`] event, and the content with ruma's event types. Only one case needs
//! more than ruma gives: an edit (`m.replace`) whose `m.new_content` is missing
//! or unreadable, which ruma refuses as a whole and the core wants as
//! [`Relation::Replacement`] with `new_content: None` (it then drops the edit
//! visibly).
//!
//! What this module does not do: fetch anything (the adapter fetches a reply's
//! parent and calls [`set_reply_parent`] with [`parent_from_event`]), fill
//! `sender_name` (the adapter knows the room's members), decrypt (the SDK hands
//! over decrypted events as `m.room.message`), or decide anything about the
//! sender (the core's gate does).
//!
//! The decoder never panics, whatever the input string (a proptest checks it).
//!
//! Sources: Matrix Client-Server API v1.16,
//! [room events](https://spec.matrix.org/v1.16/client-server-api/#room-events),
//! [`m.room.message`](https://spec.matrix.org/v1.16/client-server-api/#mroommessage),
//! [relations](https://spec.matrix.org/v1.16/client-server-api/#forming-relationships-between-events),
//! [redactions](https://spec.matrix.org/v1.16/client-server-api/#redactions).

use mc_model::{
    Attachment, DeviceTrust, EventId, Membership, Message, MessageContent, MsgType, NewContent,
    Parent, Reaction, Redaction, Relation, ReplyTo, RoomId, Timestamp, Undecryptable, UserId,
};
use ruma::events::reaction::SyncReactionEvent;
use ruma::events::relation::Thread;
use ruma::events::room::encrypted::{EncryptedEventScheme, SyncRoomEncryptedEvent};
use ruma::events::room::message::{
    FormattedBody, MessageFormat, MessageType, OriginalSyncRoomMessageEvent,
    Relation as RumaRelation, RoomMessageEventContent, RoomMessageEventContentWithoutRelation,
    SyncRoomMessageEvent,
};
use ruma::events::room::redaction::SyncRoomRedactionEvent;
use ruma::events::AnySyncTimelineEvent;
use ruma::serde::Raw;
use ruma::{MilliSecondsSinceUnixEpoch, OwnedEventId, OwnedUserId, UInt};
use serde::Deserialize;

/// One timeline event, decoded for the core.
// A message is larger than the other variants; each decoded event is moved once
// into an input, so boxing it would only add an allocation (as `mc_model::Input`).
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// An `m.room.message`, original or redacted (a redacted one, or one whose
    /// content ruma cannot read, has `content: None`). `sender_name` is `None`:
    /// the adapter fills it.
    Message(Message),
    /// An `m.reaction` with an `m.annotation` relation.
    Reaction(Reaction),
    /// An `m.room.redaction`; `redacts` comes from `content.redacts` (room
    /// versions 11 and later), else from the top-level `redacts` (earlier versions).
    Redaction(Redaction),
    /// An `m.room.member` state event in the timeline: someone's membership. The
    /// adapter hands the identity's own to the core as `Input::Membership`.
    Member(Member),
    /// An `m.room.encrypted` event with its ciphertext: the SDK hands an event over
    /// this way only when it could not decrypt it (a decrypted one comes as its
    /// cleartext type). `sender_name` is `None`: the adapter fills it.
    Undecryptable(Undecryptable),
    /// Anything else, with the reason (the core drops it as
    /// `DropReason::Unhandled` with [`Ignored::describe`]).
    Ignored(Ignored),
}

/// An `m.room.member` event ([Client-Server API, "m.room.member"]).
///
/// [Client-Server API, "m.room.member"]: https://spec.matrix.org/v1.16/client-server-api/#mroommember
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub room: RoomId,
    pub event_id: EventId,
    /// Who sent it: the inviter of an invite, the member of a join.
    pub sender: UserId,
    /// Whose membership it is (`state_key`).
    pub user: UserId,
    /// `content.membership`; an invite is by `sender`.
    pub membership: Membership,
}

/// An event the core never sees, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ignored {
    /// The event's `event_id`.
    pub event_id: EventId,
    /// The event's `sender` (the identity's own events included).
    pub sender: UserId,
    /// The event's `type`, such as `m.room.member`.
    pub event_type: String,
    /// Why the core does not see it.
    pub reason: IgnoreReason,
}

/// Why an event is [`Ignored`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IgnoreReason {
    /// A state event (it has a `state_key`): room state is not chat.
    StateEvent,
    /// A message-like event of a type the channel does not handle (`m.sticker`,
    /// `m.call.*`, `m.poll.*`, any custom type).
    OtherType,
    /// An `m.room.encrypted` without its ciphertext: redacted before it was seen
    /// (`content: {}`), so no room key can ever decrypt it.
    Encrypted,
    /// An `m.reaction` redacted before it was seen (`content: {}`): its key and
    /// target are gone. The `m.room.redaction` that removed it arrives on its own.
    RedactedReaction,
    /// The event does not match the shape of its type; the text says what (for
    /// logs only, it may quote the input).
    Malformed(String),
}

/// Why not even the envelope of an event could be read: the event cannot be
/// named, so it cannot be logged or dropped by id.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The input is not a JSON object.
    #[error("the event is not a JSON object: {0}")]
    NotAnObject(String),
    /// A required envelope field is absent.
    #[error("the event has no `{0}` field")]
    Missing(&'static str),
    /// A required envelope field is present but invalid (for instance an
    /// `event_id` without its `$` sigil).
    #[error("the event's `{field}` is invalid: {reason}")]
    Invalid {
        /// `type`, `event_id` or `sender`.
        field: &'static str,
        /// serde's or ruma's explanation.
        reason: String,
    },
}

/// The fields every room event has ([Client-Server API, "Room events"]).
///
/// [Client-Server API, "Room events"]: https://spec.matrix.org/v1.16/client-server-api/#room-event-format
struct Envelope {
    event_id: OwnedEventId,
    sender: OwnedUserId,
    event_type: String,
    /// `None` when absent or invalid.
    origin_server_ts: Option<MilliSecondsSinceUnixEpoch>,
    has_state_key: bool,
}

impl Ignored {
    /// What the event is, in words, for the core's `DropReason::Unhandled`: its type
    /// and why it is no input.
    pub fn describe(&self) -> String {
        let why = match &self.reason {
            IgnoreReason::StateEvent => "a state event".to_owned(),
            IgnoreReason::OtherType => "an event type the channel does not handle".to_owned(),
            IgnoreReason::Encrypted => "an encrypted event redacted before it was seen".to_owned(),
            IgnoreReason::RedactedReaction => "a reaction redacted before it was seen".to_owned(),
            IgnoreReason::Malformed(what) => format!("malformed: {what}"),
        };
        format!("{} ({why})", self.event_type)
    }
}

impl Envelope {
    fn read(raw: &Raw<AnySyncTimelineEvent>) -> Result<Self, DecodeError> {
        fn required<'a, T: Deserialize<'a>>(
            raw: &'a Raw<AnySyncTimelineEvent>,
            field: &'static str,
        ) -> Result<T, DecodeError> {
            match raw.get_field::<T>(field) {
                Ok(Some(value)) => Ok(value),
                Ok(None) => Err(DecodeError::Missing(field)),
                Err(e) => Err(DecodeError::Invalid {
                    field,
                    reason: e.to_string(),
                }),
            }
        }
        // A non-object fails here with a type error, before any field is read.
        raw.get_field::<serde::de::IgnoredAny>("type")
            .map_err(|e| DecodeError::NotAnObject(e.to_string()))?;
        Ok(Envelope {
            event_type: required(raw, "type")?,
            event_id: required(raw, "event_id")?,
            sender: required(raw, "sender")?,
            origin_server_ts: raw.get_field("origin_server_ts").ok().flatten(),
            // ruma's rule: a `state_key` field (even empty) makes a state event.
            has_state_key: matches!(
                raw.get_field::<serde_json::Value>("state_key"),
                Ok(Some(v)) if !v.is_null()
            ),
        })
    }

    fn ignored(&self, reason: IgnoreReason) -> Decoded {
        Decoded::Ignored(Ignored {
            event_id: EventId(self.event_id.to_string()),
            sender: UserId(self.sender.to_string()),
            event_type: self.event_type.clone(),
            reason,
        })
    }
}

/// An `m.room.member` event: its `state_key` (a user id) and `content.membership`.
fn member(room: &RoomId, envelope: &Envelope, raw: &Raw<AnySyncTimelineEvent>) -> Decoded {
    let Ok(Some(user)) = raw.get_field::<OwnedUserId>("state_key") else {
        return envelope.ignored(IgnoreReason::Malformed(
            "an m.room.member whose state_key is not a user id".to_owned(),
        ));
    };
    #[derive(Deserialize)]
    struct Content {
        membership: String,
    }
    let membership = match raw.get_field::<Content>("content") {
        Ok(Some(content)) => content.membership,
        _ => {
            return envelope.ignored(IgnoreReason::Malformed(
                "an m.room.member without a membership".to_owned(),
            ));
        }
    };
    let sender = UserId(envelope.sender.to_string());
    let membership = match membership.as_str() {
        "invite" => Membership::Invited { by: sender.clone() },
        "join" => Membership::Joined,
        "leave" | "knock" => Membership::Left,
        "ban" => Membership::Banned,
        other => {
            return envelope.ignored(IgnoreReason::Malformed(format!(
                "an m.room.member with membership {other:?}"
            )));
        }
    };
    Decoded::Member(Member {
        room: room.clone(),
        event_id: EventId(envelope.event_id.to_string()),
        sender,
        user: UserId(user.to_string()),
        membership,
    })
}

/// Decodes one timeline event of `room` from its JSON.
///
/// `device` is what matrix-sdk said of the device the event came from (the raw
/// JSON cannot tell: a decrypted event reads as a clear one); a message and a
/// reaction carry it, for the verdict rule (`mc_model::VerdictDevices`).
///
/// - `m.room.message` → [`Decoded::Message`]. `content` is `None` when the event
///   was redacted (`unsigned.redacted_because` present) or its content is missing
///   or invalid; the event id is kept either way.
/// - `m.reaction` with an `m.annotation` → [`Decoded::Reaction`]; a redacted one →
///   [`IgnoreReason::RedactedReaction`].
/// - `m.room.redaction` → [`Decoded::Redaction`] (`content.redacts`, else the
///   top-level `redacts`).
/// - `m.room.member` → [`Decoded::Member`] (`leave` and `knock` are
///   [`Membership::Left`]; an unknown membership is malformed).
/// - `m.room.encrypted` (the SDK could not decrypt it) → [`Decoded::Undecryptable`]
///   with the Megolm `session_id`; a redacted one → [`IgnoreReason::Encrypted`].
/// - Other state events, other types, and events whose
///   `origin_server_ts` or content does not fit their type → [`Decoded::Ignored`].
///
/// # Errors
/// [`DecodeError`] only when the input is not a JSON object or its `type`,
/// `event_id` or `sender` is missing or invalid.
pub fn decode_timeline_event(
    room: &RoomId,
    raw_json: &str,
    device: DeviceTrust,
) -> Result<Decoded, DecodeError> {
    let raw: Raw<AnySyncTimelineEvent> =
        serde_json::from_str(raw_json).map_err(|e| DecodeError::NotAnObject(e.to_string()))?;
    let envelope = Envelope::read(&raw)?;
    if envelope.has_state_key && envelope.event_type == "m.room.member" {
        return Ok(member(room, &envelope, &raw));
    }
    if envelope.has_state_key {
        return Ok(envelope.ignored(IgnoreReason::StateEvent));
    }
    let Some(ts) = envelope.origin_server_ts else {
        return Ok(envelope.ignored(IgnoreReason::Malformed(
            "`origin_server_ts` is missing or not an unsigned integer".to_owned(),
        )));
    };
    let room = room.clone();
    let event_id = EventId(envelope.event_id.to_string());
    let sender = UserId(envelope.sender.to_string());
    let origin_server_ts = Timestamp(u64::from(ts.0));
    let decoded = match envelope.event_type.as_str() {
        "m.room.message" => Decoded::Message(Message {
            room,
            event_id,
            sender,
            sender_name: None,
            origin_server_ts,
            content: message_content(raw_json),
            device,
        }),
        "m.reaction" => match serde_json::from_str::<SyncReactionEvent>(raw_json) {
            // ruma does not check the `rel_type` tag of an annotation.
            Ok(SyncReactionEvent::Original(_))
                if !relates_to(raw_json).is_some_and(|r| r.is("m.annotation")) =>
            {
                envelope.ignored(IgnoreReason::Malformed(
                    "an m.reaction whose rel_type is not m.annotation".to_owned(),
                ))
            }
            Ok(SyncReactionEvent::Original(ev)) => Decoded::Reaction(Reaction {
                room,
                event_id,
                sender,
                origin_server_ts,
                relates_to: EventId(ev.content.relates_to.event_id.to_string()),
                key: ev.content.relates_to.key,
                device,
            }),
            Ok(SyncReactionEvent::Redacted(_)) => envelope.ignored(IgnoreReason::RedactedReaction),
            Err(e) => envelope.ignored(IgnoreReason::Malformed(format!(
                "not an m.annotation reaction: {e}"
            ))),
        },
        "m.room.redaction" => {
            let redacts = match serde_json::from_str::<SyncRoomRedactionEvent>(raw_json) {
                Ok(SyncRoomRedactionEvent::Original(ev)) => ev.content.redacts.or(ev.redacts),
                // Redacting a redaction keeps `content.redacts` (room v11+); the
                // target stays redacted.
                Ok(SyncRoomRedactionEvent::Redacted(ev)) => ev.content.redacts,
                Err(e) => {
                    return Ok(
                        envelope.ignored(IgnoreReason::Malformed(format!("not a redaction: {e}")))
                    );
                }
            };
            match redacts {
                Some(redacts) => Decoded::Redaction(Redaction {
                    room,
                    event_id,
                    sender,
                    origin_server_ts,
                    redacts: EventId(redacts.to_string()),
                }),
                None => envelope.ignored(IgnoreReason::Malformed(
                    "a redaction without `redacts`".to_owned(),
                )),
            }
        }
        "m.room.encrypted" => match serde_json::from_str::<SyncRoomEncryptedEvent>(raw_json) {
            Ok(SyncRoomEncryptedEvent::Original(ev)) => Decoded::Undecryptable(Undecryptable {
                room,
                event_id,
                sender,
                sender_name: None,
                origin_server_ts,
                session_id: match ev.content.scheme {
                    EncryptedEventScheme::MegolmV1AesSha2(megolm) => Some(megolm.session_id),
                    // Olm in a room event has no session id; ruma knows no other scheme.
                    _ => None,
                },
            }),
            Ok(SyncRoomEncryptedEvent::Redacted(_)) => envelope.ignored(IgnoreReason::Encrypted),
            Err(e) => envelope.ignored(IgnoreReason::Malformed(format!(
                "not an m.room.encrypted event: {e}"
            ))),
        },
        _ => envelope.ignored(IgnoreReason::OtherType),
    };
    Ok(decoded)
}

/// What an event's `content.m.relates_to` says, for any event type (an
/// `m.room.message`, an `m.reaction`, a sticker, an event decrypted by matrix-sdk),
/// read from the event's JSON as the homeserver serves it
/// ([Client-Server API, "Forming relationships between events"](https://spec.matrix.org/v1.16/client-server-api/#forming-relationships-between-events)).
/// The one reader of relations outside ruma's per-type contents: the decoder, the
/// read tools' summaries, the reactions a tool lists and the thread a reply joins
/// all read them here. Each field is read on its own: one of another JSON type
/// reads as absent and leaves the others as they are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RelatesTo {
    /// `rel_type`: `m.thread`, `m.replace`, `m.annotation`, `m.reference` or
    /// another; `None` for a rich reply outside a thread.
    pub rel_type: Option<String>,
    /// `event_id`: the event related to (a thread's root, the original of an edit,
    /// the event an annotation is on).
    pub event_id: Option<String>,
    /// `key`: an `m.annotation`'s key (a reaction's emoji, as sent).
    pub key: Option<String>,
    /// `m.in_reply_to.event_id`: the event replied to (in a thread, the fallback's
    /// target when `is_falling_back`).
    pub in_reply_to: Option<String>,
    /// `is_falling_back`: the thread message's `m.in_reply_to` is only the fallback
    /// for clients without threads, not a reply.
    pub is_falling_back: bool,
}

impl RelatesTo {
    /// The `content.m.relates_to` of `event` (an event's JSON), or `None` when it
    /// has none (or it is not a JSON object).
    pub fn of(event: &serde_json::Value) -> Option<RelatesTo> {
        use serde_json::Value;
        let relation = event.get("content")?.get("m.relates_to")?.as_object()?;
        let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
        Some(RelatesTo {
            rel_type: text(relation.get("rel_type")),
            event_id: text(relation.get("event_id")),
            key: text(relation.get("key")),
            in_reply_to: text(
                relation
                    .get("m.in_reply_to")
                    .and_then(|r| r.get("event_id")),
            ),
            is_falling_back: relation.get("is_falling_back") == Some(&Value::Bool(true)),
        })
    }

    /// Whether `rel_type` is `rel_type`.
    pub fn is(&self, rel_type: &str) -> bool {
        self.rel_type.as_deref() == Some(rel_type)
    }

    /// The root of the thread the event is in: the `event_id` of an `m.thread`
    /// relation.
    pub fn thread_root(&self) -> Option<&str> {
        self.event_id.as_deref().filter(|_| self.is("m.thread"))
    }

    /// The key of an `m.annotation` relation.
    pub fn annotation_key(&self) -> Option<&str> {
        self.key.as_deref().filter(|_| self.is("m.annotation"))
    }
}

/// The [`RelatesTo`] of the event `raw_json`, or `None` when the event has none or
/// is not JSON.
pub fn relates_to(raw_json: &str) -> Option<RelatesTo> {
    RelatesTo::of(&serde_json::from_str(raw_json).ok()?)
}

/// The content of an `m.room.message` event, or `None` when it was redacted or is
/// unreadable.
fn message_content(raw_json: &str) -> Option<MessageContent> {
    match serde_json::from_str::<SyncRoomMessageEvent>(raw_json) {
        Ok(SyncRoomMessageEvent::Original(ev)) => Some(content_from_ruma(&ev.content)),
        Ok(SyncRoomMessageEvent::Redacted(_)) => None,
        Err(_) => edit_without_new_content(raw_json),
    }
}

fn content_from_ruma(content: &RoomMessageEventContent) -> MessageContent {
    MessageContent {
        msgtype: msgtype_from_name(content.msgtype()),
        body: content.body().to_owned(),
        formatted_body: html_body(&content.msgtype),
        relation: content.relates_to.as_ref().and_then(relation_from_ruma),
        attachment: attachment(&content.msgtype),
    }
}

/// [`MsgType`] from the `msgtype` string; unknown names become [`MsgType::Other`].
fn msgtype_from_name(name: &str) -> MsgType {
    match name {
        "m.text" => MsgType::Text,
        "m.emote" => MsgType::Emote,
        "m.notice" => MsgType::Notice,
        "m.image" => MsgType::Image,
        "m.file" => MsgType::File,
        "m.audio" => MsgType::Audio,
        "m.video" => MsgType::Video,
        "m.location" => MsgType::Location,
        other => MsgType::Other(other.to_owned()),
    }
}

/// `formatted_body` when `format` is `org.matrix.custom.html`
/// (<https://spec.matrix.org/v1.16/client-server-api/#mroommessage-msgtypes>).
fn html_body(msgtype: &MessageType) -> Option<String> {
    let html = |formatted: &Option<FormattedBody>| {
        formatted
            .as_ref()
            .filter(|f| f.format == MessageFormat::Html)
            .map(|f| f.body.clone())
    };
    match msgtype {
        MessageType::Text(c) => html(&c.formatted),
        MessageType::Emote(c) => html(&c.formatted),
        MessageType::Notice(c) => html(&c.formatted),
        MessageType::Image(c) => html(&c.formatted),
        MessageType::File(c) => html(&c.formatted),
        MessageType::Audio(c) => html(&c.formatted),
        MessageType::Video(c) => html(&c.formatted),
        // Unknown msgtypes keep every other field in `data()`.
        other => {
            let data = other.data();
            let is_html = data.get("format").and_then(serde_json::Value::as_str)
                == Some(MessageFormat::Html.as_str());
            is_html
                .then(|| data.get("formatted_body")?.as_str().map(str::to_owned))
                .flatten()
        }
    }
}

/// What an `m.image`, `m.file`, `m.audio` or `m.video` carries: `filename`, or
/// `body` when there is none; `info.size` (bytes) and `info.mimetype`. The same for
/// a file in the clear (`url`) and an encrypted one (`file` with `key`, `iv`,
/// `hashes`: Client-Server API, "Sending encrypted attachments"), whose `info`
/// describes the plaintext.
pub(crate) fn attachment(msgtype: &MessageType) -> Option<Attachment> {
    let make =
        |filename: &Option<String>, body: &str, size: Option<UInt>, mimetype: Option<&String>| {
            Some(Attachment {
                filename: filename.clone().unwrap_or_else(|| body.to_owned()),
                size: size.map(u64::from),
                mimetype: mimetype.cloned(),
            })
        };
    // Each file msgtype has its own info type with the same fields.
    macro_rules! facts {
        ($c:expr) => {{
            let info = $c.info.as_deref();
            make(
                &$c.filename,
                &$c.body,
                info.and_then(|i| i.size),
                info.and_then(|i| i.mimetype.as_ref()),
            )
        }};
    }
    match msgtype {
        MessageType::Image(c) => facts!(c),
        MessageType::File(c) => facts!(c),
        MessageType::Audio(c) => facts!(c),
        MessageType::Video(c) => facts!(c),
        _ => None,
    }
}

fn reply_to(event_id: &OwnedEventId) -> ReplyTo {
    ReplyTo {
        event_id: EventId(event_id.to_string()),
        parent: None,
    }
}

/// ruma's relation in the core's terms. Relation types the core does not know
/// (`m.reference`, custom ones without `m.in_reply_to`) give `None`.
fn relation_from_ruma(
    relation: &RumaRelation<RoomMessageEventContentWithoutRelation>,
) -> Option<Relation> {
    match relation {
        RumaRelation::Reply(reply) => Some(Relation::Reply {
            in_reply_to: reply_to(&reply.in_reply_to.event_id),
        }),
        RumaRelation::Replacement(replacement) => Some(Relation::Replacement {
            original: EventId(replacement.event_id.to_string()),
            new_content: Some(NewContent {
                msgtype: msgtype_from_name(replacement.new_content.msgtype.msgtype()),
                body: replacement.new_content.msgtype.body().to_owned(),
            }),
        }),
        RumaRelation::Thread(Thread {
            event_id,
            in_reply_to,
            is_falling_back,
            ..
        }) => Some(Relation::Thread {
            root: EventId(event_id.to_string()),
            in_reply_to: in_reply_to.as_ref().map(|r| reply_to(&r.event_id)),
            is_falling_back: *is_falling_back,
        }),
        _ => None,
    }
}

/// An `m.replace` event that ruma refuses because its `m.new_content` is missing
/// or unreadable: still an edit of `original`, with `new_content: None`
/// (<https://spec.matrix.org/v1.16/client-server-api/#event-replacements>).
fn edit_without_new_content(raw_json: &str) -> Option<MessageContent> {
    #[derive(Deserialize)]
    struct Event {
        content: Content,
    }
    #[derive(Deserialize)]
    struct Content {
        msgtype: String,
        body: String,
        #[serde(rename = "m.relates_to")]
        relates_to: RelatesTo,
    }
    #[derive(Deserialize)]
    struct RelatesTo {
        rel_type: String,
        event_id: OwnedEventId,
    }
    let Event { content } = serde_json::from_str(raw_json).ok()?;
    (content.relates_to.rel_type == "m.replace").then(|| MessageContent {
        msgtype: msgtype_from_name(&content.msgtype),
        body: content.body,
        formatted_body: None,
        relation: Some(Relation::Replacement {
            original: EventId(content.relates_to.event_id.to_string()),
            new_content: None,
        }),
        attachment: None,
    })
}

/// The parent of a reply, from the JSON of the fetched parent event
/// (`room.event(id)`): its sender, its body, and whether it is itself a reply
/// ([`Relation::reply_to`]: then its own reply fallback is stripped when quoted).
///
/// When the server bundled an edit (`unsigned.m.relations.m.replace`) by the same
/// sender, the body is the edit's `m.new_content` body: what clients show
/// (<https://spec.matrix.org/v1.16/client-server-api/#server-side-aggregation-of-mreplace-relationships>,
/// validity rules in
/// <https://spec.matrix.org/v1.16/client-server-api/#validity-of-replacement-events>).
///
/// `None` when the event is not an `m.room.message`, is redacted, or has no
/// readable content: the core then pushes an explicit "unresolved" marker.
pub fn parent_from_event(raw_json: &str) -> Option<Parent> {
    let raw: Raw<AnySyncTimelineEvent> = serde_json::from_str(raw_json).ok()?;
    let envelope = Envelope::read(&raw).ok()?;
    if envelope.event_type != "m.room.message" || envelope.has_state_key {
        return None;
    }
    let SyncRoomMessageEvent::Original(event) = serde_json::from_str(raw_json).ok()? else {
        return None;
    };
    let content = content_from_ruma(&event.content);
    let body = latest_body(&event).unwrap_or(content.body);
    Some(Parent {
        sender: UserId(event.sender.to_string()),
        body,
        has_reply_relation: content
            .relation
            .as_ref()
            .and_then(Relation::reply_to)
            .is_some(),
    })
}

/// The body a client shows for `event`: the `m.new_content` of the bundled edit
/// when it is valid (same sender, relates to `event`), or of `event` itself when
/// it is an edit.
fn latest_body(event: &OriginalSyncRoomMessageEvent) -> Option<String> {
    let new_body =
        |content: &RoomMessageEventContent, original: &OwnedEventId| match &content.relates_to {
            Some(RumaRelation::Replacement(r)) if r.event_id == *original => {
                Some(r.new_content.msgtype.body().to_owned())
            }
            _ => None,
        };
    if let Some(edit) = event.unsigned.relations.replace.as_deref() {
        if edit.sender == event.sender {
            if let Some(body) = new_body(&edit.content, &event.event_id) {
                return Some(body);
            }
        }
    }
    match &event.content.relates_to {
        Some(RumaRelation::Replacement(r)) => Some(r.new_content.msgtype.body().to_owned()),
        _ => None,
    }
}

/// The event whose parent the adapter must fetch for `msg`: the target of a rich
/// reply, or of a thread message's `m.in_reply_to` when `is_falling_back` is
/// false ([`Relation::reply_to`]). `None` for anything else.
///
/// Source: <https://spec.matrix.org/v1.16/client-server-api/#rich-replies> and
/// <https://spec.matrix.org/v1.16/client-server-api/#fallback-for-unthreaded-clients>.
pub fn reply_target(msg: &Message) -> Option<&EventId> {
    msg.content
        .as_ref()?
        .relation
        .as_ref()?
        .reply_to()
        .map(|r| &r.event_id)
}

/// Stores the fetched `parent` (or `None`: unresolved) in the reply relation that
/// [`reply_target`] names. Does nothing to a message [`reply_target`] gives `None`
/// for (a thread fallback's `m.in_reply_to` stays without parent).
pub fn set_reply_parent(msg: &mut Message, parent: Option<Parent>) {
    let Some(relation) = msg.content.as_mut().and_then(|c| c.relation.as_mut()) else {
        return;
    };
    match relation {
        Relation::Reply { in_reply_to }
        | Relation::Thread {
            in_reply_to: Some(in_reply_to),
            is_falling_back: false,
            ..
        } => in_reply_to.parent = parent,
        Relation::Thread { .. } | Relation::Replacement { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    const TEXT: &str = include_str!("../../tests/data/events/text.json");
    const TEXT_MARKDOWN: &str = include_str!("../../tests/data/events/text_markdown.json");
    const NOTICE: &str = include_str!("../../tests/data/events/notice.json");
    const EDIT: &str = include_str!("../../tests/data/events/edit.json");
    const REPLY: &str = include_str!("../../tests/data/events/reply.json");
    const THREAD_FALLING_BACK: &str =
        include_str!("../../tests/data/events/thread_falling_back.json");
    const THREAD_REPLY: &str = include_str!("../../tests/data/events/thread_reply.json");
    const REACTION: &str = include_str!("../../tests/data/events/reaction.json");
    const REDACTION: &str = include_str!("../../tests/data/events/redaction.json");
    const REDACTION_V10: &str = include_str!("../../tests/data/events/redaction_v10.json");
    const REDACTED_MESSAGE: &str = include_str!("../../tests/data/events/redacted_message.json");
    const REDACTED_REACTION: &str = include_str!("../../tests/data/events/redacted_reaction.json");
    const IMAGE: &str = include_str!("../../tests/data/events/image.json");
    const FILE: &str = include_str!("../../tests/data/events/file.json");
    const ENCRYPTED_FILE: &str = include_str!("../../tests/data/events/encrypted_file.json");
    const UNKNOWN_MSGTYPE: &str = include_str!("../../tests/data/events/unknown_msgtype.json");
    const STATE_MEMBER: &str = include_str!("../../tests/data/events/state_member.json");
    const ENCRYPTED: &str = include_str!("../../tests/data/events/encrypted.json");
    const EDITED_PARENT: &str = include_str!("../../tests/data/events/edited_parent.json");

    const ALL: [&str; 19] = [
        TEXT,
        TEXT_MARKDOWN,
        NOTICE,
        EDIT,
        REPLY,
        THREAD_FALLING_BACK,
        THREAD_REPLY,
        REACTION,
        REDACTION,
        REDACTION_V10,
        REDACTED_MESSAGE,
        REDACTED_REACTION,
        IMAGE,
        FILE,
        ENCRYPTED_FILE,
        UNKNOWN_MSGTYPE,
        STATE_MEMBER,
        ENCRYPTED,
        EDITED_PARENT,
    ];

    const ORIGINAL: &str = "$Qaa3BP1NCNqXyOT-NwK02fMrLJGdcLlnKj5eS5bBK1I";

    fn room() -> RoomId {
        RoomId::from("!ZCB3SX-vTJ0vaZqG9V0gVB1stvnbeGnFk0XPn6pPYbc")
    }

    fn decode(json: &str) -> Decoded {
        decode_timeline_event(&room(), json, DeviceTrust::PlaintextRoom)
            .expect("the envelope is readable")
    }

    fn message(json: &str) -> Message {
        match decode(json) {
            Decoded::Message(m) => m,
            other => panic!("expected a message, got {other:?}"),
        }
    }

    fn content(json: &str) -> MessageContent {
        message(json).content.expect("content")
    }

    fn ignored(json: &str) -> Ignored {
        match decode(json) {
            Decoded::Ignored(i) => i,
            other => panic!("expected an ignored event, got {other:?}"),
        }
    }

    /// `json` with `edit` applied to its parsed value.
    fn edited(json: &str, edit: impl FnOnce(&mut Value)) -> String {
        let mut value: Value = serde_json::from_str(json).unwrap();
        edit(&mut value);
        value.to_string()
    }

    #[test]
    fn a_plain_text_message_keeps_its_envelope_and_body() {
        assert_eq!(
            message(TEXT),
            Message {
                room: room(),
                event_id: EventId::from(ORIGINAL),
                sender: UserId::from("@alice:localhost"),
                sender_name: None,
                origin_server_ts: Timestamp(1_795_991_839_700),
                content: Some(MessageContent {
                    msgtype: MsgType::Text,
                    body: "hello from alice".to_owned(),
                    formatted_body: None,
                    relation: None,
                    attachment: None,
                }),
                device: mc_model::DeviceTrust::PlaintextRoom,
            }
        );
    }

    #[test]
    fn an_html_formatted_body_is_kept() {
        let c = content(TEXT_MARKDOWN);
        assert_eq!(c.body, "**bold** and `code`");
        assert_eq!(
            c.formatted_body.as_deref(),
            Some("<strong>bold</strong> and <code>code</code>")
        );
    }

    #[test]
    fn a_formatted_body_in_another_format_is_dropped() {
        let json = edited(TEXT_MARKDOWN, |v| {
            v["content"]["format"] = json!("org.example.markdown");
        });
        let c = content(&json);
        assert_eq!(c.formatted_body, None);
        assert_eq!(c.body, "**bold** and `code`");
    }

    #[test]
    fn a_notice_is_a_notice() {
        let c = content(NOTICE);
        assert_eq!(c.msgtype, MsgType::Notice);
        assert_eq!(c.body, "Build finished: 3 passed");
    }

    #[test]
    fn every_known_msgtype_maps_to_its_variant() {
        for (name, expected) in [
            ("m.text", MsgType::Text),
            ("m.emote", MsgType::Emote),
            ("m.notice", MsgType::Notice),
            ("m.location", MsgType::Location),
            (
                "m.server_notice",
                MsgType::Other("m.server_notice".to_owned()),
            ),
        ] {
            let json = edited(TEXT, |v| {
                v["content"]["msgtype"] = json!(name);
                v["content"]["geo_uri"] = json!("geo:51.5,0.1");
                v["content"]["server_notice_type"] = json!("m.server_notice.usage_limit_reached");
            });
            assert_eq!(content(&json).msgtype, expected, "{name}");
        }
        for (name, expected) in [
            ("m.image", MsgType::Image),
            ("m.file", MsgType::File),
            ("m.audio", MsgType::Audio),
            ("m.video", MsgType::Video),
        ] {
            let json = edited(IMAGE, |v| v["content"]["msgtype"] = json!(name));
            assert_eq!(content(&json).msgtype, expected, "{name}");
        }
    }

    #[test]
    fn an_edit_carries_its_original_and_new_content_and_keeps_the_star_fallback_as_body() {
        let c = content(EDIT);
        assert_eq!(c.body, "* hello from alice (edited)");
        assert_eq!(
            c.relation,
            Some(Relation::Replacement {
                original: EventId::from(ORIGINAL),
                new_content: Some(NewContent {
                    msgtype: MsgType::Text,
                    body: "hello from alice (edited)".to_owned(),
                }),
            })
        );
    }

    #[test]
    fn an_edit_to_an_unknown_msgtype_keeps_the_name() {
        let json = edited(EDIT, |v| {
            v["content"]["m.new_content"]["msgtype"] = json!("org.example.x");
        });
        let Some(Relation::Replacement {
            new_content: Some(new_content),
            ..
        }) = content(&json).relation
        else {
            panic!("expected a replacement");
        };
        assert_eq!(
            new_content.msgtype,
            MsgType::Other("org.example.x".to_owned())
        );
    }

    #[test]
    fn an_edit_without_new_content_is_still_an_edit_of_its_original() {
        let json = edited(EDIT, |v| {
            v["content"]
                .as_object_mut()
                .unwrap()
                .remove("m.new_content");
        });
        let c = content(&json);
        assert_eq!(c.body, "* hello from alice (edited)");
        assert_eq!(c.msgtype, MsgType::Text);
        assert_eq!(
            c.relation,
            Some(Relation::Replacement {
                original: EventId::from(ORIGINAL),
                new_content: None,
            })
        );
    }

    #[test]
    fn an_edit_with_unreadable_new_content_has_no_new_content() {
        let json = edited(EDIT, |v| v["content"]["m.new_content"] = json!({"body": 5}));
        assert_eq!(
            content(&json).relation,
            Some(Relation::Replacement {
                original: EventId::from(ORIGINAL),
                new_content: None,
            })
        );
    }

    #[test]
    fn a_rich_reply_keeps_its_fallback_in_the_body_and_names_its_parent() {
        let m = message(REPLY);
        let c = m.content.clone().unwrap();
        assert!(c
            .body
            .starts_with("> <@alice:localhost> hello from alice\n\n"));
        assert!(c.formatted_body.unwrap().starts_with("<mx-reply>"));
        assert_eq!(
            c.relation,
            Some(Relation::Reply {
                in_reply_to: ReplyTo {
                    event_id: EventId::from(ORIGINAL),
                    parent: None,
                },
            })
        );
        assert_eq!(reply_target(&m), Some(&EventId::from(ORIGINAL)));
    }

    #[test]
    fn a_thread_message_falling_back_is_not_a_reply() {
        let m = message(THREAD_FALLING_BACK);
        assert_eq!(
            m.content.as_ref().unwrap().relation,
            Some(Relation::Thread {
                root: EventId::from(ORIGINAL),
                in_reply_to: Some(ReplyTo {
                    event_id: EventId::from(ORIGINAL),
                    parent: None,
                }),
                is_falling_back: true,
            })
        );
        assert_eq!(reply_target(&m), None);
    }

    #[test]
    fn a_thread_message_without_is_falling_back_is_falling_back_false() {
        let json = edited(THREAD_REPLY, |v| {
            v["content"]["m.relates_to"]
                .as_object_mut()
                .unwrap()
                .remove("is_falling_back");
        });
        assert_eq!(
            reply_target(&message(&json)),
            Some(&EventId::from(
                "$Thr3adFallbackxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
            ))
        );
    }

    #[test]
    fn a_reply_inside_a_thread_names_the_event_it_answers() {
        let m = message(THREAD_REPLY);
        assert_eq!(
            m.content.as_ref().unwrap().relation,
            Some(Relation::Thread {
                root: EventId::from(ORIGINAL),
                in_reply_to: Some(ReplyTo {
                    event_id: EventId::from("$Thr3adFallbackxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"),
                    parent: None,
                }),
                is_falling_back: false,
            })
        );
        assert_eq!(
            reply_target(&m),
            Some(&EventId::from(
                "$Thr3adFallbackxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
            ))
        );
    }

    #[test]
    fn a_thread_message_without_in_reply_to_has_no_reply_target() {
        let json = edited(THREAD_REPLY, |v| {
            v["content"]["m.relates_to"]
                .as_object_mut()
                .unwrap()
                .remove("m.in_reply_to");
        });
        let m = message(&json);
        assert_eq!(
            m.content.as_ref().unwrap().relation,
            Some(Relation::Thread {
                root: EventId::from(ORIGINAL),
                in_reply_to: None,
                is_falling_back: false,
            })
        );
        assert_eq!(reply_target(&m), None);
    }

    #[test]
    fn a_reference_relation_is_no_relation() {
        let json = edited(TEXT, |v| {
            v["content"]["m.relates_to"] = json!({"rel_type": "m.reference", "event_id": ORIGINAL});
        });
        let c = content(&json);
        assert_eq!(c.relation, None);
        assert_eq!(c.body, "hello from alice");
    }

    #[test]
    fn a_reaction_keeps_its_raw_key_with_the_variation_selector() {
        assert_eq!(
            decode(REACTION),
            Decoded::Reaction(Reaction {
                room: room(),
                event_id: EventId::from("$VnuFczD_dzR-SVIn_6u8s94qgDIyeGIedDQJd55T35M"),
                sender: UserId::from("@bob:localhost"),
                origin_server_ts: Timestamp(1_795_991_839_857),
                relates_to: EventId::from(ORIGINAL),
                key: "\u{1F44D}\u{FE0F}".to_owned(),
                device: mc_model::DeviceTrust::PlaintextRoom,
            })
        );
    }

    const ROOT: &str = "$Qaa3BP1NCNqXyOT-NwK02fMrLJGdcLlnKj5eS5bBK1I";

    #[test]
    fn the_relation_of_an_event_is_read_whatever_its_type() {
        let annotation = relates_to(REACTION).unwrap();
        assert_eq!(
            annotation,
            RelatesTo {
                rel_type: Some("m.annotation".into()),
                event_id: Some(ROOT.into()),
                key: Some("👍️".into()),
                in_reply_to: None,
                is_falling_back: false,
            }
        );
        assert_eq!(
            (annotation.annotation_key(), annotation.thread_root()),
            (Some("👍️"), None)
        );
        let fallback = relates_to(THREAD_FALLING_BACK).unwrap();
        assert_eq!(
            fallback,
            RelatesTo {
                rel_type: Some("m.thread".into()),
                event_id: Some(ROOT.into()),
                key: None,
                in_reply_to: Some(ROOT.into()),
                is_falling_back: true,
            }
        );
        assert_eq!(
            (fallback.thread_root(), fallback.annotation_key()),
            (Some(ROOT), None)
        );
        assert!(!relates_to(THREAD_REPLY).unwrap().is_falling_back);
        let reply = relates_to(REPLY).unwrap();
        assert_eq!(
            reply,
            RelatesTo {
                in_reply_to: Some(ROOT.into()),
                ..RelatesTo::default()
            }
        );
        assert!(!reply.is("m.thread"));
        // A sticker in a thread: no ruma content type of the decoder reads it.
        let sticker = edited(THREAD_FALLING_BACK, |v| v["type"] = json!("m.sticker"));
        assert_eq!(relates_to(&sticker).unwrap().thread_root(), Some(ROOT));
    }

    #[test]
    fn an_event_without_a_relation_object_has_none_and_a_field_of_another_type_reads_as_absent() {
        assert_eq!(relates_to(TEXT), None);
        assert_eq!(relates_to("not json"), None);
        assert_eq!(relates_to("[1]"), None);
        let string = edited(REACTION, |v| {
            v["content"]["m.relates_to"] = json!("m.annotation")
        });
        assert_eq!(relates_to(&string), None);
        let mistyped = edited(THREAD_FALLING_BACK, |v| {
            let relation = &mut v["content"]["m.relates_to"];
            relation["rel_type"] = json!(["m.thread"]);
            relation["is_falling_back"] = json!("true");
            relation["m.in_reply_to"] = json!(ROOT);
            relation["key"] = json!(5);
        });
        assert_eq!(
            relates_to(&mistyped).unwrap(),
            RelatesTo {
                event_id: Some(ROOT.into()),
                ..RelatesTo::default()
            }
        );
        // A thread's root and an annotation's key need their rel_type.
        let other = edited(REACTION, |v| {
            v["content"]["m.relates_to"]["rel_type"] = json!("m.reference");
        });
        let other = relates_to(&other).unwrap();
        assert_eq!((other.annotation_key(), other.thread_root()), (None, None));
        let keyless = edited(REACTION, |v| {
            v["content"]["m.relates_to"]["rel_type"] = json!("m.thread");
        });
        assert_eq!(relates_to(&keyless).unwrap().thread_root(), Some(ROOT));
    }

    #[test]
    fn a_reaction_with_another_rel_type_is_malformed() {
        let json = edited(REACTION, |v| {
            v["content"]["m.relates_to"]["rel_type"] = json!("m.reference");
        });
        let i = ignored(&json);
        assert_eq!(
            i.reason,
            IgnoreReason::Malformed("an m.reaction whose rel_type is not m.annotation".to_owned())
        );
        assert_eq!(i.event_type, "m.reaction");
        let json = edited(REACTION, |v| {
            v["content"]["m.relates_to"]
                .as_object_mut()
                .unwrap()
                .remove("key");
        });
        assert!(
            matches!(&ignored(&json).reason, IgnoreReason::Malformed(m) if m.starts_with("not an m.annotation reaction: ")),
        );
    }

    #[test]
    fn a_reaction_redacted_before_it_was_seen_is_ignored_with_its_id() {
        assert_eq!(
            ignored(REDACTED_REACTION),
            Ignored {
                event_id: EventId::from("$VnuFczD_dzR-SVIn_6u8s94qgDIyeGIedDQJd55T35M"),
                sender: UserId::from("@bob:localhost"),
                event_type: "m.reaction".to_owned(),
                reason: IgnoreReason::RedactedReaction,
            }
        );
    }

    #[test]
    fn a_redaction_names_its_target_from_the_room_v11_content() {
        assert_eq!(
            decode(REDACTION),
            Decoded::Redaction(Redaction {
                room: room(),
                event_id: EventId::from("$rU_PwRvMSCf4rzr2Ejx-Bx9-J5XbKprdT0m_SxIc7tk"),
                sender: UserId::from("@bob:localhost"),
                origin_server_ts: Timestamp(1_795_991_839_977),
                redacts: EventId::from("$VnuFczD_dzR-SVIn_6u8s94qgDIyeGIedDQJd55T35M"),
            })
        );
    }

    #[test]
    fn a_redaction_prefers_content_redacts_over_the_top_level_one() {
        let json = edited(REDACTION, |v| v["redacts"] = json!("$other"));
        let Decoded::Redaction(r) = decode(&json) else {
            panic!("expected a redaction");
        };
        assert_eq!(
            r.redacts,
            EventId::from("$VnuFczD_dzR-SVIn_6u8s94qgDIyeGIedDQJd55T35M")
        );
    }

    #[test]
    fn a_pre_v11_redaction_names_its_target_at_top_level() {
        let Decoded::Redaction(r) = decode(REDACTION_V10) else {
            panic!("expected a redaction");
        };
        assert_eq!(r.redacts, EventId::from(ORIGINAL));
    }

    #[test]
    fn a_redaction_without_any_redacts_is_malformed() {
        let json = edited(REDACTION_V10, |v| {
            v.as_object_mut().unwrap().remove("redacts");
        });
        assert_eq!(
            ignored(&json).reason,
            IgnoreReason::Malformed("not a redaction: missing field `redacts`".to_owned())
        );
    }

    #[test]
    fn a_redacted_redaction_without_redacts_is_malformed() {
        let json = edited(REDACTION_V10, |v| {
            v.as_object_mut().unwrap().remove("redacts");
            v["content"] = json!({});
            v["unsigned"]["redacted_because"] = serde_json::from_str(REDACTION).unwrap();
        });
        assert_eq!(
            ignored(&json).reason,
            IgnoreReason::Malformed("a redaction without `redacts`".to_owned())
        );
    }

    #[test]
    fn a_redacted_redaction_still_names_its_target() {
        let json = edited(REDACTION, |v| {
            v["content"] = json!({"redacts": ORIGINAL});
            v["unsigned"]["redacted_because"] = serde_json::from_str(REDACTION).unwrap();
        });
        let Decoded::Redaction(r) = decode(&json) else {
            panic!("expected a redaction");
        };
        assert_eq!(r.redacts, EventId::from(ORIGINAL));
    }

    #[test]
    fn a_redacted_message_has_no_content_but_keeps_its_id() {
        let m = message(REDACTED_MESSAGE);
        assert_eq!(m.event_id, EventId::from(ORIGINAL));
        assert_eq!(m.sender, UserId::from("@alice:localhost"));
        assert_eq!(m.origin_server_ts, Timestamp(1_795_991_839_700));
        assert_eq!(m.content, None);
    }

    #[test]
    fn a_message_with_empty_content_but_no_redaction_marker_has_no_content() {
        let json = edited(TEXT, |v| v["content"] = json!({}));
        assert_eq!(message(&json).content, None);
        let json = edited(TEXT, |v| {
            v.as_object_mut().unwrap().remove("content");
        });
        assert_eq!(message(&json).content, None);
        let json = edited(TEXT, |v| {
            v["content"]["body"] = json!(["not", "a", "string"])
        });
        assert_eq!(message(&json).content, None);
    }

    #[test]
    fn an_image_is_an_attachment_with_filename_size_and_mimetype() {
        let c = content(IMAGE);
        assert_eq!(c.msgtype, MsgType::Image);
        assert_eq!(c.body, "screenshot of the failing test");
        assert_eq!(
            c.attachment,
            Some(Attachment {
                filename: "failure.png".to_owned(),
                size: Some(48_213),
                mimetype: Some("image/png".to_owned()),
            })
        );
    }

    #[test]
    fn a_file_without_filename_is_named_by_its_body() {
        assert_eq!(
            content(FILE).attachment,
            Some(Attachment {
                filename: "build.log".to_owned(),
                size: Some(1024),
                mimetype: Some("text/plain".to_owned()),
            })
        );
    }

    #[test]
    fn an_encrypted_file_is_an_attachment_with_the_facts_of_its_info() {
        // Matrix spec "Sending encrypted attachments": `file` (url, key, iv, hashes,
        // v) instead of `url`; the size and mimetype of the plaintext stay in `info`.
        let c = content(ENCRYPTED_FILE);
        assert_eq!(c.msgtype, MsgType::File);
        assert_eq!(
            c.attachment,
            Some(Attachment {
                filename: "secrets.txt".to_owned(),
                size: Some(2048),
                mimetype: Some("text/plain".to_owned()),
            })
        );
        let image = edited(ENCRYPTED_FILE, |v| {
            v["content"]["msgtype"] = json!("m.image");
            v["content"]["filename"] = json!("shot.png");
            v["content"]["info"] = json!({"mimetype": "image/png", "size": 7});
        });
        assert_eq!(
            content(&image).attachment,
            Some(Attachment {
                filename: "shot.png".to_owned(),
                size: Some(7),
                mimetype: Some("image/png".to_owned()),
            })
        );
    }

    #[test]
    fn audio_and_video_are_attachments_and_info_is_optional() {
        for msgtype in ["m.audio", "m.video"] {
            let json = edited(IMAGE, |v| {
                v["content"]["msgtype"] = json!(msgtype);
                v["content"].as_object_mut().unwrap().remove("info");
            });
            assert_eq!(
                content(&json).attachment,
                Some(Attachment {
                    filename: "failure.png".to_owned(),
                    size: None,
                    mimetype: None,
                }),
                "{msgtype}"
            );
        }
    }

    #[test]
    fn text_has_no_attachment() {
        assert_eq!(content(TEXT).attachment, None);
        assert_eq!(content(UNKNOWN_MSGTYPE).attachment, None);
    }

    #[test]
    fn an_unknown_msgtype_is_other_with_its_name_body_and_html() {
        let c = content(UNKNOWN_MSGTYPE);
        assert_eq!(c.msgtype, MsgType::Other("org.example.custom".to_owned()));
        assert_eq!(c.body, "a poll-ish thing");
        assert_eq!(c.formatted_body.as_deref(), Some("<b>a poll-ish thing</b>"));
        let json = edited(UNKNOWN_MSGTYPE, |v| v["content"]["format"] = json!("other"));
        assert_eq!(content(&json).formatted_body, None);
    }

    #[test]
    fn a_member_event_is_a_membership_of_its_state_key() {
        assert_eq!(
            decode(STATE_MEMBER),
            Decoded::Member(Member {
                room: room(),
                event_id: EventId::from("$MemberJoinxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"),
                sender: UserId::from("@bob:localhost"),
                user: UserId::from("@bob:localhost"),
                membership: Membership::Joined,
            })
        );
        let invite = edited(STATE_MEMBER, |v| {
            v["content"]["membership"] = json!("invite");
            v["state_key"] = json!("@bot:localhost");
        });
        match decode(&invite) {
            Decoded::Member(m) => {
                assert_eq!(m.user, UserId::from("@bot:localhost"));
                assert_eq!(
                    m.membership,
                    Membership::Invited {
                        by: UserId::from("@bob:localhost")
                    }
                );
            }
            other => panic!("{other:?}"),
        }
        for (membership, expected) in [
            ("leave", Membership::Left),
            ("knock", Membership::Left),
            ("ban", Membership::Banned),
        ] {
            let json = edited(STATE_MEMBER, |v| {
                v["content"]["membership"] = json!(membership)
            });
            assert!(
                matches!(decode(&json), Decoded::Member(m) if m.membership == expected),
                "{membership}"
            );
        }
        for bad in [
            edited(STATE_MEMBER, |v| {
                v["content"]["membership"] = json!("joined")
            }),
            edited(STATE_MEMBER, |v| v["content"] = json!({})),
            edited(STATE_MEMBER, |v| v["state_key"] = json!("bob")),
        ] {
            assert!(
                matches!(ignored(&bad).reason, IgnoreReason::Malformed(_)),
                "{bad}"
            );
        }
    }

    #[test]
    fn an_ignored_event_is_described_by_its_type_and_why() {
        let i = |event_type: &str, reason| Ignored {
            event_id: EventId::from("$e"),
            sender: UserId::from("@a:hs"),
            event_type: event_type.to_owned(),
            reason,
        };
        for (ignored, says) in [
            (
                i("m.room.topic", IgnoreReason::StateEvent),
                "m.room.topic (a state event)",
            ),
            (
                i("m.sticker", IgnoreReason::OtherType),
                "m.sticker (an event type the channel does not handle)",
            ),
            (
                i("m.room.encrypted", IgnoreReason::Encrypted),
                "m.room.encrypted (an encrypted event redacted before it was seen)",
            ),
            (
                i("m.reaction", IgnoreReason::RedactedReaction),
                "m.reaction (a reaction redacted before it was seen)",
            ),
            (
                i("m.reaction", IgnoreReason::Malformed("no key".into())),
                "m.reaction (malformed: no key)",
            ),
        ] {
            assert_eq!(ignored.describe(), says);
        }
    }

    #[test]
    fn a_state_event_is_ignored_as_state() {
        let topic = edited(STATE_MEMBER, |v| {
            v["type"] = json!("m.room.topic");
            v["state_key"] = json!("");
            v["content"] = json!({"topic": "t"});
        });
        assert_eq!(
            ignored(&topic),
            Ignored {
                event_id: EventId::from("$MemberJoinxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"),
                sender: UserId::from("@bob:localhost"),
                event_type: "m.room.topic".to_owned(),
                reason: IgnoreReason::StateEvent,
            }
        );
        // Even a message type with a state key is state, as ruma has it.
        let json = edited(TEXT, |v| v["state_key"] = json!(""));
        assert_eq!(ignored(&json).reason, IgnoreReason::StateEvent);
        let json = edited(TEXT, |v| v["state_key"] = Value::Null);
        assert!(matches!(decode(&json), Decoded::Message(_)));
    }

    #[test]
    fn an_undecryptable_event_is_decoded_with_its_megolm_session() {
        assert_eq!(
            decode(ENCRYPTED),
            Decoded::Undecryptable(Undecryptable {
                room: room(),
                event_id: EventId::from("$Encrypt3dxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"),
                sender: UserId::from("@alice:localhost"),
                sender_name: None,
                origin_server_ts: Timestamp(1_795_991_840_500),
                session_id: Some("9bYk6P4QJwVsQXm3nq5Rkq2GTRk7sYgQ1yJ6hY0p5vA".to_owned()),
            })
        );
    }

    #[test]
    fn an_olm_encrypted_room_event_has_no_session() {
        let json = edited(ENCRYPTED, |v| {
            v["content"] = json!({
                "algorithm": "m.olm.v1.curve25519-aes-sha2",
                "sender_key": "tDpXnS2Tz3iBOWHuE1FQJDL0gqDnGcZB0Ez0Vd9GPCU",
                "ciphertext": {"key": {"type": 0, "body": "Awo"}}
            });
        });
        match decode(&json) {
            Decoded::Undecryptable(u) => assert_eq!(u.session_id, None),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_redacted_encrypted_event_is_ignored_as_encrypted() {
        let redacted: Value = serde_json::from_str(REDACTED_MESSAGE).unwrap();
        let json = edited(ENCRYPTED, |v| {
            v["content"] = json!({});
            v["unsigned"]["redacted_because"] = redacted["unsigned"]["redacted_because"].clone();
        });
        let i = ignored(&json);
        assert_eq!(i.reason, IgnoreReason::Encrypted);
        assert_eq!(i.event_type, "m.room.encrypted");
        assert_eq!(
            i.event_id,
            EventId::from("$Encrypt3dxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")
        );
    }

    #[test]
    fn an_encrypted_event_of_an_unknown_algorithm_is_malformed() {
        let json = edited(ENCRYPTED, |v| v["content"]["algorithm"] = json!("m.rot13"));
        assert!(matches!(ignored(&json).reason, IgnoreReason::Malformed(_)));
    }

    #[test]
    fn other_message_like_types_are_ignored_as_other() {
        let json = edited(TEXT, |v| v["type"] = json!("m.sticker"));
        assert_eq!(
            ignored(&json),
            Ignored {
                event_id: EventId::from(ORIGINAL),
                sender: UserId::from("@alice:localhost"),
                event_type: "m.sticker".to_owned(),
                reason: IgnoreReason::OtherType,
            }
        );
    }

    #[test]
    fn an_event_without_a_timestamp_is_malformed_but_named() {
        for ts in [Value::Null, json!(-5), json!("yesterday")] {
            let json = edited(TEXT, |v| v["origin_server_ts"] = ts.clone());
            let i = ignored(&json);
            assert_eq!(i.event_id, EventId::from(ORIGINAL), "{ts}");
            assert!(matches!(i.reason, IgnoreReason::Malformed(_)), "{ts}");
        }
    }

    #[test]
    fn an_unreadable_envelope_is_an_error_that_names_the_field() {
        let without = |field: &str| {
            edited(TEXT, |v| {
                v.as_object_mut().unwrap().remove(field);
            })
        };
        let r = room();
        assert_eq!(
            decode_timeline_event(&r, &without("event_id"), DeviceTrust::PlaintextRoom),
            Err(DecodeError::Missing("event_id"))
        );
        assert_eq!(
            decode_timeline_event(&r, &without("sender"), DeviceTrust::PlaintextRoom),
            Err(DecodeError::Missing("sender"))
        );
        assert_eq!(
            decode_timeline_event(&r, &without("type"), DeviceTrust::PlaintextRoom),
            Err(DecodeError::Missing("type"))
        );
        let bad_id = edited(TEXT, |v| v["event_id"] = json!("no-sigil"));
        assert!(matches!(
            decode_timeline_event(&r, &bad_id, DeviceTrust::PlaintextRoom),
            Err(DecodeError::Invalid {
                field: "event_id",
                ..
            })
        ));
        let bad_sender = edited(TEXT, |v| v["sender"] = json!("alice"));
        let err = decode_timeline_event(&r, &bad_sender, DeviceTrust::PlaintextRoom).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("the event's `sender` is invalid: "),
            "{err}"
        );
        let bad_type = edited(TEXT, |v| v["type"] = json!(7));
        assert!(matches!(
            decode_timeline_event(&r, &bad_type, DeviceTrust::PlaintextRoom),
            Err(DecodeError::Invalid { field: "type", .. })
        ));
    }

    #[test]
    fn input_that_is_not_a_json_object_is_an_error() {
        for input in [
            "",
            "not json",
            "[1,2]",
            "42",
            "\"m.room.message\"",
            "null",
            "{",
        ] {
            let err =
                decode_timeline_event(&room(), input, DeviceTrust::PlaintextRoom).unwrap_err();
            assert!(
                matches!(err, DecodeError::NotAnObject(_)),
                "{input:?}: {err:?}"
            );
            assert!(err
                .to_string()
                .starts_with("the event is not a JSON object: "));
        }
    }

    #[test]
    fn deeply_nested_input_is_an_error_not_a_stack_overflow() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(decode_timeline_event(&room(), &deep, DeviceTrust::PlaintextRoom).is_err());
        let deep_content = format!(
            r#"{{"type":"m.room.message","event_id":"$a","sender":"@a:b","origin_server_ts":1,"content":{}1{}}}"#,
            "{\"a\":".repeat(50_000),
            "}".repeat(50_000)
        );
        // Serde's recursion limit refuses the content; the event keeps its id.
        assert!(parent_from_event(&deep_content).is_none());
        let _ = decode_timeline_event(&room(), &deep_content, DeviceTrust::PlaintextRoom);
    }

    #[test]
    fn the_parent_of_a_reply_is_its_sender_and_body() {
        assert_eq!(
            parent_from_event(TEXT),
            Some(Parent {
                sender: UserId::from("@alice:localhost"),
                body: "hello from alice".to_owned(),
                has_reply_relation: false,
            })
        );
    }

    #[test]
    fn a_parent_that_is_itself_a_reply_says_so() {
        let p = parent_from_event(REPLY).unwrap();
        assert!(p.has_reply_relation);
        assert_eq!(p.sender, UserId::from("@bob:localhost"));
        assert!(parent_from_event(THREAD_REPLY).unwrap().has_reply_relation);
        assert!(
            !parent_from_event(THREAD_FALLING_BACK)
                .unwrap()
                .has_reply_relation
        );
    }

    #[test]
    fn an_edited_parent_is_quoted_as_edited() {
        assert_eq!(
            parent_from_event(EDITED_PARENT).map(|p| p.body),
            Some("hello from alice (edited)".to_owned())
        );
        assert_eq!(
            parent_from_event(EDIT).map(|p| p.body),
            Some("hello from alice (edited)".to_owned())
        );
    }

    #[test]
    fn a_bundled_edit_by_someone_else_or_of_another_event_is_not_applied() {
        let by_mallory = edited(EDITED_PARENT, |v| {
            v["unsigned"]["m.relations"]["m.replace"]["sender"] = json!("@mallory:localhost");
        });
        assert_eq!(
            parent_from_event(&by_mallory).map(|p| p.body),
            Some("hello from alice".to_owned())
        );
        let elsewhere = edited(EDITED_PARENT, |v| {
            v["unsigned"]["m.relations"]["m.replace"]["content"]["m.relates_to"]["event_id"] =
                json!("$elsewhere");
        });
        assert_eq!(
            parent_from_event(&elsewhere).map(|p| p.body),
            Some("hello from alice".to_owned())
        );
    }

    #[test]
    fn there_is_no_parent_in_a_redacted_or_non_message_event() {
        for json in [
            REDACTED_MESSAGE,
            REACTION,
            REDACTION,
            STATE_MEMBER,
            ENCRYPTED,
            "",
            "{}",
        ] {
            assert_eq!(parent_from_event(json), None, "{json}");
        }
        let no_content = edited(TEXT, |v| v["content"] = json!({}));
        assert_eq!(parent_from_event(&no_content), None);
        // With a message's content, but room state, or of another type.
        let state = edited(TEXT, |v| v["state_key"] = json!(""));
        let sticker = edited(TEXT, |v| v["type"] = json!("m.sticker"));
        for json in [state, sticker] {
            assert_eq!(parent_from_event(&json), None, "{json}");
        }
    }

    #[test]
    fn a_resolved_parent_lands_in_the_reply() {
        let parent = parent_from_event(TEXT);
        let mut m = message(REPLY);
        set_reply_parent(&mut m, parent.clone());
        let Some(Relation::Reply { in_reply_to }) = m.content.unwrap().relation else {
            panic!("expected a reply");
        };
        assert_eq!(in_reply_to.parent, parent);
        assert!(in_reply_to.parent.is_some());
    }

    #[test]
    fn a_resolved_parent_lands_in_a_thread_reply_but_not_in_a_fallback() {
        let parent = parent_from_event(THREAD_FALLING_BACK);
        let mut m = message(THREAD_REPLY);
        set_reply_parent(&mut m, parent.clone());
        let reply = m
            .content
            .as_ref()
            .unwrap()
            .relation
            .as_ref()
            .unwrap()
            .reply_to();
        assert_eq!(reply.unwrap().parent, parent);

        let mut fallback = message(THREAD_FALLING_BACK);
        let before = fallback.clone();
        set_reply_parent(&mut fallback, parent_from_event(TEXT));
        assert_eq!(fallback, before);
    }

    #[test]
    fn setting_a_parent_on_a_message_without_a_reply_changes_nothing() {
        for json in [TEXT, EDIT, REDACTED_MESSAGE] {
            let mut m = message(json);
            let before = m.clone();
            set_reply_parent(&mut m, parent_from_event(TEXT));
            assert_eq!(m, before);
            assert_eq!(reply_target(&m), None);
        }
    }

    #[test]
    fn every_sample_decodes_without_error() {
        for json in ALL {
            assert!(
                decode_timeline_event(&room(), json, DeviceTrust::PlaintextRoom).is_ok(),
                "{json}"
            );
        }
    }

    /// Arbitrary JSON values, shallow enough to print.
    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            any::<f64>().prop_map(|f| json!(f)),
            ".{0,12}".prop_map(Value::String),
            prop_oneof![
                Just("$ev"),
                Just("@u:x"),
                Just("m.room.message"),
                Just("m.reaction"),
                Just("m.room.redaction"),
                Just("m.text"),
                Just("m.image"),
                Just("m.replace"),
                Just("m.thread"),
                Just("m.annotation"),
                Just("org.matrix.custom.html"),
            ]
            .prop_map(|s| Value::String(s.to_owned())),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            let key = prop_oneof![
                Just("type".to_owned()),
                Just("event_id".to_owned()),
                Just("sender".to_owned()),
                Just("origin_server_ts".to_owned()),
                Just("content".to_owned()),
                Just("state_key".to_owned()),
                Just("redacts".to_owned()),
                Just("unsigned".to_owned()),
                Just("redacted_because".to_owned()),
                Just("msgtype".to_owned()),
                Just("body".to_owned()),
                Just("m.relates_to".to_owned()),
                Just("m.new_content".to_owned()),
                Just("m.in_reply_to".to_owned()),
                Just("rel_type".to_owned()),
                Just("key".to_owned()),
                Just("info".to_owned()),
                ".{0,6}",
            ];
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(key, inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A sample event with one value somewhere replaced by an arbitrary one.
    fn mutated_sample() -> impl Strategy<Value = String> {
        (
            prop::sample::select(ALL.to_vec()),
            prop::collection::vec(any::<prop::sample::Index>(), 1..4),
            json_value(),
        )
            .prop_map(|(json, path, replacement)| {
                let mut value: Value = serde_json::from_str(json).unwrap();
                replace_at(&mut value, &path, replacement);
                value.to_string()
            })
    }

    /// Replaces the value that `path` leads to (each index picks a member of an
    /// object or array; the walk stops at a leaf) with `replacement`.
    fn replace_at(value: &mut Value, path: &[prop::sample::Index], replacement: Value) {
        let Some((index, rest)) = path.split_first() else {
            *value = replacement;
            return;
        };
        let next = match value {
            Value::Object(map) if !map.is_empty() => {
                let key = map.keys().nth(index.index(map.len())).cloned();
                key.and_then(|k| map.get_mut(&k))
            }
            Value::Array(items) if !items.is_empty() => {
                let i = index.index(items.len());
                items.get_mut(i)
            }
            _ => None,
        };
        match next {
            Some(next) => replace_at(next, rest, replacement),
            None => *value = replacement,
        }
    }

    /// Decodes `json` every way the adapter can, and checks that what a decoded
    /// message says is consistent.
    fn decode_all_ways(json: &str) {
        let result = decode_timeline_event(&room(), json, DeviceTrust::PlaintextRoom);
        let _ = parent_from_event(json);
        if let Ok(Decoded::Message(mut m)) = result {
            let target = reply_target(&m).cloned();
            set_reply_parent(&mut m, parent_from_event(TEXT));
            assert_eq!(reply_target(&m).cloned(), target);
        }
    }

    proptest! {
        #[test]
        fn any_string_decodes_without_panicking(input in ".*") {
            decode_all_ways(&input);
        }

        #[test]
        fn any_json_value_decodes_without_panicking(value in json_value()) {
            decode_all_ways(&value.to_string());
        }

        #[test]
        fn any_mutation_of_a_real_event_decodes_without_panicking(json in mutated_sample()) {
            decode_all_ways(&json);
        }

        #[test]
        fn a_readable_envelope_is_never_an_error(json in mutated_sample()) {
            let value: Value = serde_json::from_str(&json).unwrap();
            let readable = value.get("type").is_some_and(Value::is_string)
                && value.get("event_id").and_then(Value::as_str)
                    .is_some_and(|s| ruma::EventId::parse(s).is_ok())
                && value.get("sender").and_then(Value::as_str)
                    .is_some_and(|s| ruma::UserId::parse(s).is_ok());
            let result = decode_timeline_event(&room(), &json, DeviceTrust::PlaintextRoom);
            prop_assert_eq!(result.is_ok(), readable, "{:?}", result);
        }
    }
}
