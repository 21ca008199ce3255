//! Rendering events as `notifications/claude/channel` params.
//!
//! The body is untrusted prose: it goes through [`crate::sandbox::sandbox_body`].
//! Facts that must not be forged (who, where, what kind, attachment names, whether
//! something was cut or neutralised) go in [`Meta`], which Claude Code escapes.

use crate::config::{Gate, IdentityConfig};
use crate::effect::ChannelNotification;
use crate::event::{
    Message, MessageContent, MsgType, NewContent, Reaction, Redaction, ReplyTo, Undecryptable,
};
use crate::fallback::{clip_chars, quote, strip_plain_reply_fallback};
use crate::ids::{EventId, RoomId, Timestamp, UserId};
use crate::meta::{AttachmentKind, Meta, MetaKey, ReplyStatus, ReplyTrust, FLAG};
use crate::sandbox::{neutralise, sandbox_body};

/// Display names and reaction keys are clipped to this many characters.
pub const SHORT_FIELD_CHARS: usize = 100;
/// Attachment file names are clipped to this many characters.
pub const FILENAME_CHARS: usize = 200;

/// What a push is (the `kind` meta value).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum PushKind {
    Message,
    Edit,
    Reaction,
    Retraction,
    ReplayCut,
    /// An encrypted event whose room key did not come in time: metadata only.
    Undecryptable,
    /// A sync gap in a room was cut: its oldest events were not fetched.
    GapCut,
}

impl PushKind {
    /// Every kind, in declaration order.
    pub const ALL: [PushKind; 7] = [
        PushKind::Message,
        PushKind::Edit,
        PushKind::Reaction,
        PushKind::Retraction,
        PushKind::ReplayCut,
        PushKind::Undecryptable,
        PushKind::GapCut,
    ];

    /// The `kind` meta value.
    pub fn as_str(self) -> &'static str {
        match self {
            PushKind::Message => "message",
            PushKind::Edit => "edit",
            PushKind::Reaction => "reaction",
            PushKind::Retraction => "retraction",
            PushKind::ReplayCut => "replay_cut",
            PushKind::Undecryptable => "undecryptable",
            PushKind::GapCut => "gap_cut",
        }
    }
}

struct Origin<'a> {
    room: &'a RoomId,
    event_id: &'a EventId,
    sender: &'a UserId,
    sender_name: Option<&'a str>,
    ts: Timestamp,
}

fn base_meta(kind: PushKind, origin: Origin<'_>) -> Meta {
    let mut meta = Meta::default();
    meta.set(MetaKey::Kind, kind.as_str());
    meta.set(MetaKey::RoomId, origin.room.as_str());
    meta.set(MetaKey::EventId, origin.event_id.as_str());
    meta.set(MetaKey::Sender, origin.sender.as_str());
    let name = origin.sender_name.unwrap_or(origin.sender.as_str());
    meta.set(MetaKey::User, one_line(name, SHORT_FIELD_CHARS));
    meta.set(MetaKey::Ts, origin.ts.0.to_string());
    meta
}

/// A display field: one line, clipped, neutralised.
fn one_line(text: &str, max: usize) -> String {
    let folded = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let (safe, _) = neutralise(&folded);
    clip_chars(&safe, max).0.to_owned()
}

/// Sandboxes `body` into the notification content and flags what was done in meta.
fn body_into(meta: &mut Meta, body: &str, cap_bytes: usize) -> String {
    let sandboxed = sandbox_body(body, cap_bytes);
    if sandboxed.suspicious {
        meta.set(MetaKey::Suspicious, FLAG);
    }
    if let Some(cut) = sandboxed.truncated {
        meta.set(MetaKey::Truncated, FLAG);
        meta.set(MetaKey::OriginalBytes, cut.original_bytes.to_string());
    }
    sandboxed.text
}

fn reply_into(meta: &mut Meta, config: &IdentityConfig, reply: &ReplyTo) {
    meta.set(MetaKey::InReplyTo, reply.event_id.as_str());
    let Some(parent) = &reply.parent else {
        meta.set(MetaKey::InReplyToStatus, ReplyStatus::Unresolved.as_str());
        return;
    };
    let trust = match config.gate(&parent.sender) {
        Gate::Own => ReplyTrust::Own,
        Gate::Stranger => ReplyTrust::Stranger,
        Gate::Allowed | Gate::Approver => ReplyTrust::Allowed,
    };
    let quoted = quote(
        &parent.body,
        parent.has_reply_relation,
        config.quote_cap_chars,
    );
    meta.set(MetaKey::InReplyToStatus, ReplyStatus::Quoted.as_str());
    meta.set(MetaKey::InReplyToTrust, trust.as_str());
    meta.set(MetaKey::InReplyToSender, parent.sender.as_str());
    meta.set(MetaKey::InReplyToQuote, quoted.text);
    if quoted.suspicious {
        meta.set(MetaKey::Suspicious, FLAG);
    }
}

fn attachment_kind(msgtype: &MsgType) -> Option<AttachmentKind> {
    match msgtype {
        MsgType::Image => Some(AttachmentKind::Image),
        MsgType::File => Some(AttachmentKind::File),
        MsgType::Audio => Some(AttachmentKind::Audio),
        MsgType::Video => Some(AttachmentKind::Video),
        _ => None,
    }
}

/// A chat message from an allowed sender.
///
/// The reply fallback is stripped only when a reply relation is present
/// ([Client-Server API, "Fallbacks for rich replies"]). An attachment's facts go in
/// meta; its content is its caption when the body differs from the file name, and
/// otherwise the fixed text `(attachment)`.
///
/// [Client-Server API, "Fallbacks for rich replies"]: https://spec.matrix.org/v1.16/client-server-api/#fallbacks-for-rich-replies
pub fn render_message(
    config: &IdentityConfig,
    message: &Message,
    content: &MessageContent,
) -> ChannelNotification {
    let mut meta = base_meta(
        PushKind::Message,
        Origin {
            room: &message.room,
            event_id: &message.event_id,
            sender: &message.sender,
            sender_name: message.sender_name.as_deref(),
            ts: message.origin_server_ts,
        },
    );
    meta.set(MetaKey::Msgtype, content.msgtype.as_str());
    let reply = content.relation.as_ref().and_then(|r| r.reply_to());
    let body = match reply {
        Some(_) => strip_plain_reply_fallback(&content.body),
        None => content.body.as_str(),
    };
    if let Some(crate::event::Relation::Thread { root, .. }) = &content.relation {
        meta.set(MetaKey::ThreadRoot, root.as_str());
    }
    if let Some(reply) = reply {
        reply_into(&mut meta, config, reply);
    }
    let kind = attachment_kind(&content.msgtype);
    let text = match (kind, &content.attachment) {
        (Some(kind), Some(file)) => {
            meta.set(MetaKey::AttachmentKind, kind.as_str());
            meta.set(
                MetaKey::AttachmentName,
                one_line(&file.filename, FILENAME_CHARS),
            );
            if let Some(size) = file.size {
                meta.set(MetaKey::AttachmentSize, size.to_string());
            }
            if let Some(mime) = &file.mimetype {
                meta.set(MetaKey::AttachmentMime, one_line(mime, SHORT_FIELD_CHARS));
            }
            if body.is_empty() || body == file.filename {
                "(attachment)".to_owned()
            } else {
                body_into(&mut meta, body, config.body_cap_bytes)
            }
        }
        _ => body_into(&mut meta, body, config.body_cap_bytes),
    };
    ChannelNotification {
        content: text,
        meta,
    }
}

/// An edit (`m.replace`) as a correction of `original`: the text of `m.new_content`,
/// never the `* ` fallback body ([Client-Server API, "Event replacements"]).
///
/// [Client-Server API, "Event replacements"]: https://spec.matrix.org/v1.16/client-server-api/#event-replacements
pub fn render_edit(
    config: &IdentityConfig,
    message: &Message,
    original: &EventId,
    new_content: &NewContent,
) -> ChannelNotification {
    let mut meta = base_meta(
        PushKind::Edit,
        Origin {
            room: &message.room,
            event_id: &message.event_id,
            sender: &message.sender,
            sender_name: message.sender_name.as_deref(),
            ts: message.origin_server_ts,
        },
    );
    meta.set(MetaKey::EditOf, original.as_str());
    meta.set(MetaKey::Msgtype, new_content.msgtype.as_str());
    let content = body_into(&mut meta, &new_content.body, config.body_cap_bytes);
    ChannelNotification { content, meta }
}

/// A reaction that is not a verdict: its raw key and the event it annotates.
pub fn render_reaction(reaction: &Reaction) -> ChannelNotification {
    let mut meta = base_meta(
        PushKind::Reaction,
        Origin {
            room: &reaction.room,
            event_id: &reaction.event_id,
            sender: &reaction.sender,
            sender_name: None,
            ts: reaction.origin_server_ts,
        },
    );
    let key = one_line(&reaction.key, SHORT_FIELD_CHARS);
    meta.set(MetaKey::ReactionKey, key.as_str());
    meta.set(MetaKey::ReactedTo, reaction.relates_to.as_str());
    // Event ids stay in meta: a server may choose ids with any characters.
    let content = format!("reacted {key}");
    ChannelNotification { content, meta }
}

/// A redaction of something already pushed, as a retraction.
pub fn render_retraction(redaction: &Redaction) -> ChannelNotification {
    let mut meta = base_meta(
        PushKind::Retraction,
        Origin {
            room: &redaction.room,
            event_id: &redaction.event_id,
            sender: &redaction.sender,
            sender_name: None,
            ts: redaction.origin_server_ts,
        },
    );
    meta.set(MetaKey::Redacts, redaction.redacts.as_str());
    let content = "retracted an earlier event (see redacts)".to_owned();
    ChannelNotification { content, meta }
}

/// The notice sent before a replay that was cut at the budget.
/// The push for an encrypted event whose room key did not come within the grace
/// period: who sent what kind of event where and when, never content (there is
/// none to give). `kind` is `undecryptable`.
pub fn render_undecryptable(event: &Undecryptable) -> ChannelNotification {
    let meta = base_meta(
        PushKind::Undecryptable,
        Origin {
            room: &event.room,
            event_id: &event.event_id,
            sender: &event.sender,
            sender_name: event.sender_name.as_deref(),
            ts: event.origin_server_ts,
        },
    );
    let content = "An encrypted event from this sender could not be decrypted: its room \
                   key has not reached this device. Its content is unknown. If the key \
                   arrives later, the event is pushed then."
        .to_owned();
    ChannelNotification { content, meta }
}

/// The notice to the sender of an event whose room key did not come within the grace
/// period (only when the identity's `undecryptable_notice` is on).
pub fn undecryptable_notice_text() -> String {
    "I could not decrypt this message: no room key for it reached my device. If your \
     client sends only to verified devices, verify this device (or its account's \
     cross-signing identity), then send the message again."
        .to_owned()
}

/// The push that says a sync gap in `room` was cut (see `Input::GapCut`): `kind`
/// `gap_cut` and `room_id` in meta.
pub fn render_gap_cut(room: &RoomId) -> ChannelNotification {
    let mut meta = Meta::default();
    meta.set(MetaKey::Kind, PushKind::GapCut.as_str());
    meta.set(MetaKey::RoomId, room.as_str());
    let content = "More events arrived in this room while the server could not sync \
                   than it fetches again: the oldest of them are not pushed; read the \
                   room's history if they matter."
        .to_owned();
    ChannelNotification { content, meta }
}

pub fn render_replay_cut(omitted: usize) -> ChannelNotification {
    let mut meta = Meta::default();
    meta.set(MetaKey::Kind, PushKind::ReplayCut.as_str());
    meta.set(MetaKey::ReplayOmitted, omitted.to_string());
    let content = format!(
        "{omitted} older events arrived while no session was attached and are not \
         replayed; read them from the room if they matter."
    );
    ChannelNotification { content, meta }
}
