//! The `meta` of a `notifications/claude/channel` push.
//!
//! Claude Code renders each entry as an attribute of the `<channel>` tag and drops
//! keys that do not match `^[a-zA-Z_][a-zA-Z0-9_]*$`; a key `source` would collide
//! with the attribute it writes itself (Claude Code channel contract). Keys are
//! therefore a closed enum, each a valid name, and values are always strings.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Every meta key the core ever writes. The serialized name is the wire key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MetaKey {
    /// What the push is: `message`, `edit`, `reaction`, `retraction`, `replay_cut`.
    Kind,
    /// The Matrix room id.
    RoomId,
    /// The event pushed.
    EventId,
    /// The sender's MXID: the identity that matters.
    Sender,
    /// The sender's display name (Claude Code's terminal shows this key). Display only.
    User,
    /// `origin_server_ts`, milliseconds since the epoch, decimal.
    Ts,
    /// `msgtype` of a message, for instance `m.text` or `m.emote`.
    Msgtype,
    /// The thread root, when the message is in a thread.
    ThreadRoot,
    /// The event replied to.
    InReplyTo,
    /// `quoted` (a quote follows) or `unresolved` (the parent could not be fetched).
    InReplyToStatus,
    /// Who wrote the parent: `allowed`, `own` (this identity) or `stranger`.
    InReplyToTrust,
    /// The parent's sender MXID.
    InReplyToSender,
    /// A short, sandboxed, one-line quote of the parent.
    InReplyToQuote,
    /// An edit: the event it corrects.
    EditOf,
    /// A reaction: its raw key.
    ReactionKey,
    /// A reaction: the event it annotates.
    ReactedTo,
    /// A retraction: the event redacted.
    Redacts,
    /// An attachment's kind: `image`, `file`, `audio`, `video`.
    AttachmentKind,
    /// An attachment's file name.
    AttachmentName,
    /// An attachment's size in bytes, decimal.
    AttachmentSize,
    /// An attachment's MIME type.
    AttachmentMime,
    /// `true` when the body or quote held something that looked like a tag or role
    /// marker and was neutralised.
    Suspicious,
    /// `true` when the body was cut at the byte cap.
    Truncated,
    /// The body's size before the cut, bytes.
    OriginalBytes,
    /// `true` on events replayed to a session that attached after they arrived.
    Replayed,
    /// On the replay-cut notice: how many queued events were not replayed.
    ReplayOmitted,
}

impl MetaKey {
    /// All keys, for tests and documentation.
    pub const ALL: [MetaKey; 26] = [
        MetaKey::Kind,
        MetaKey::RoomId,
        MetaKey::EventId,
        MetaKey::Sender,
        MetaKey::User,
        MetaKey::Ts,
        MetaKey::Msgtype,
        MetaKey::ThreadRoot,
        MetaKey::InReplyTo,
        MetaKey::InReplyToStatus,
        MetaKey::InReplyToTrust,
        MetaKey::InReplyToSender,
        MetaKey::InReplyToQuote,
        MetaKey::EditOf,
        MetaKey::ReactionKey,
        MetaKey::ReactedTo,
        MetaKey::Redacts,
        MetaKey::AttachmentKind,
        MetaKey::AttachmentName,
        MetaKey::AttachmentSize,
        MetaKey::AttachmentMime,
        MetaKey::Suspicious,
        MetaKey::Truncated,
        MetaKey::OriginalBytes,
        MetaKey::Replayed,
        MetaKey::ReplayOmitted,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            MetaKey::Kind => "kind",
            MetaKey::RoomId => "room_id",
            MetaKey::EventId => "event_id",
            MetaKey::Sender => "sender",
            MetaKey::User => "user",
            MetaKey::Ts => "ts",
            MetaKey::Msgtype => "msgtype",
            MetaKey::ThreadRoot => "thread_root",
            MetaKey::InReplyTo => "in_reply_to",
            MetaKey::InReplyToStatus => "in_reply_to_status",
            MetaKey::InReplyToTrust => "in_reply_to_trust",
            MetaKey::InReplyToSender => "in_reply_to_sender",
            MetaKey::InReplyToQuote => "in_reply_to_quote",
            MetaKey::EditOf => "edit_of",
            MetaKey::ReactionKey => "reaction_key",
            MetaKey::ReactedTo => "reacted_to",
            MetaKey::Redacts => "redacts",
            MetaKey::AttachmentKind => "attachment_kind",
            MetaKey::AttachmentName => "attachment_name",
            MetaKey::AttachmentSize => "attachment_size",
            MetaKey::AttachmentMime => "attachment_mime",
            MetaKey::Suspicious => "suspicious",
            MetaKey::Truncated => "truncated",
            MetaKey::OriginalBytes => "original_bytes",
            MetaKey::Replayed => "replayed",
            MetaKey::ReplayOmitted => "replay_omitted",
        }
    }
}

/// Whether `key` is a meta key Claude Code keeps: `^[A-Za-z_][A-Za-z0-9_]*$`, and not
/// `source` (which Claude Code writes itself).
pub fn is_valid_meta_key(key: &str) -> bool {
    let mut chars = key.chars();
    let head_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    head_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') && key != "source"
}

/// The meta map of one push: closed keys, string values.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Meta(BTreeMap<MetaKey, String>);

impl Meta {
    /// Sets `key` to `value`, replacing any earlier value.
    pub fn set(&mut self, key: MetaKey, value: impl Into<String>) {
        self.0.insert(key, value.into());
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: MetaKey) -> Option<&str> {
        self.0.get(&key).map(String::as_str)
    }

    /// The entries, keys as wire names, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}
