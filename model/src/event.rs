//! Inputs to the core: Matrix events as the server's adapters decoded them, what the
//! Claude Code sessions did, and the outcomes of effects.
//!
//! The adapters decode with ruma and resolve what the core cannot know without IO
//! (the parent of a reply); everything they hand over is a plain value.

use crate::agent::AgentWrite;
use crate::ids::{
    CallId, EffectId, EventId, IdentityId, Label, RoomId, SessionId, Timestamp, UserId,
};
use crate::verdict::RequestId;
use serde::{Deserialize, Serialize};

/// Everything that can happen to the core. Closed: the server has one arm for each.
// A message is larger than the other inputs; each input is moved once into
// `handle`, so boxing it would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Input {
    /// A Claude Code session attached to the identity (its channel stream is open).
    /// Queued events and decided verdicts for it are delivered now.
    ///
    /// With a `label`, the session lives in the label's room: it is pushed only that
    /// room's events and its prompts are posted there. A label with no room yet gets
    /// one ([`crate::Effect::CreateRoom`]). Without one, the session gets the events
    /// of rooms bound to no label (docs/decisions/0026-session-rooms.md).
    Attach {
        identity: IdentityId,
        session: SessionId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        label: Option<Label>,
    },
    /// The operator binds `label` to `room` (`matrix-channel bind`), or with `room:
    /// None` unbinds it: its sessions then get the events of unbound rooms, and no
    /// room is created for it. A room belongs to one label at most: binding it takes
    /// it from the label it had. Answered with [`crate::Effect::Bound`], or dropped
    /// as `NotJoined` for a room the identity is not joined to.
    Bind {
        identity: IdentityId,
        label: Label,
        room: Option<RoomId>,
    },
    /// The operator revokes grant `grant` of the identity (`matrix-channel revoke`),
    /// or every grant with `None` (docs/decisions/0027-grants.md). Answered with an
    /// [`crate::Effect::GrantEnded`] for each grant it ended (none: no such grant).
    Revoke {
        identity: IdentityId,
        grant: Option<u64>,
    },
    /// A session's stream closed. Its prompts stay pending; verdicts wait for it.
    Detach {
        identity: IdentityId,
        session: SessionId,
    },
    /// An `m.room.message` event in a joined room.
    Message {
        identity: IdentityId,
        message: Message,
    },
    /// An `m.reaction` event (an `m.annotation` relation).
    Reaction {
        identity: IdentityId,
        reaction: Reaction,
    },
    /// An `m.room.redaction` event.
    Redaction {
        identity: IdentityId,
        redaction: Redaction,
    },
    /// `notifications/claude/channel/permission_request` from a session.
    PermissionRequest {
        identity: IdentityId,
        session: SessionId,
        request: PermissionRequest,
    },
    /// `notifications/claude/channel/permission_request` whose params the server
    /// could not read (a missing or non-string field, a malformed `request_id`), or
    /// that came on a mount that takes none. The session is told `error`; nothing
    /// is posted.
    InvalidPermissionRequest {
        identity: IdentityId,
        session: SessionId,
        /// What is wrong, for the session and the operator's log.
        error: String,
    },
    /// A tool asks to write to Matrix as the identity (see [`crate::agent`]). The
    /// core answers `call` with [`crate::Effect::Write`] or
    /// [`crate::Effect::WriteRefused`].
    AgentWrite {
        identity: IdentityId,
        call: CallId,
        write: AgentWrite,
    },
    /// The agent acknowledged an event (the `acknowledge` tool): it is never replayed.
    Acknowledge {
        identity: IdentityId,
        /// The channel session that acknowledged, which must be one of the identity's
        /// (another is dropped as `UnknownSession`); `None` when the identity's agent
        /// acknowledged through a tool outside any channel session (the server's `/mcp`
        /// mount, which has authenticated the identity).
        session: Option<SessionId>,
        event_id: EventId,
    },
    /// The outcome of an effect that carried an [`EffectId`].
    Completed { id: EffectId, outcome: Outcome },
    /// A membership in `room`: an `m.room.member` event (the core acts on the
    /// identity's own and drops others'), handed over in timeline order with the room's
    /// other events (so what the timeline holds before the identity's join is
    /// history, whatever its senders' clocks say); an invite (the stripped state's
    /// `m.room.member`, `sender` the inviter); or, with `event_id: None`, what the
    /// server knows of the room when it starts.
    Membership {
        identity: IdentityId,
        room: RoomId,
        event_id: Option<EventId>,
        /// Whose membership it is (the event's `state_key`): anyone's but the
        /// identity's own is dropped as `OtherMember`.
        user: UserId,
        membership: Membership,
    },
    /// A timeline event the server read but that is no input of its own kind (a
    /// state event, another event type, an encrypted event it could not decrypt, a
    /// malformed one), or one it could not read at all (`event_id` and `sender`
    /// then `None` when even they were unreadable). Dropped with `what`.
    /// Journaled as `not_input` (its earlier name), so older journals stay readable.
    #[serde(rename = "not_input")]
    Unhandled {
        identity: IdentityId,
        room: RoomId,
        event_id: Option<EventId>,
        sender: Option<UserId>,
        what: String,
    },
    /// An `m.room.encrypted` event the server could not decrypt: no room key for its
    /// Megolm session has reached the identity's device (yet). From an allowed sender
    /// in a joined room it is parked, never pushed with content it does not have. When
    /// the same event id comes again decrypted (as any other input: a message, a
    /// reaction, a redaction, or no input), it is handled then as that input, judged
    /// against the state at that moment. If none came within the identity's
    /// `undecryptable_grace_ms`, its sessions get a push that says it exists (its
    /// metadata only, `kind` `undecryptable`), and a decryption after that is still
    /// handled as above. ([Client-Server API, "End-to-end encryption"].)
    ///
    /// [Client-Server API, "End-to-end encryption"]: https://spec.matrix.org/v1.16/client-server-api/#end-to-end-encryption
    Undecryptable {
        identity: IdentityId,
        event: Undecryptable,
    },
    /// A sync's timeline gap in `room` (a `limited` timeline, Client-Server API
    /// "Syncing") was larger than the server backfills: its oldest events were not
    /// fetched, and the events handed after this input are the gap's newest ones.
    /// The sessions are told (`kind` `gap_cut`, with the room): at once when one is
    /// live, else at the next attach, before the replay. Dropped as `NotJoined` for a
    /// room the identity is not joined to.
    GapCut { identity: IdentityId, room: RoomId },
    /// Only time passed. Timers that are due fire (they also fire before any input).
    Tick,
    /// The server process that handled the inputs so far is gone and a new one has
    /// loaded this state (the first input after a start). Every session that was
    /// live is detached until its stream opens again; every prompt post in flight is
    /// issued again with the same effect id (so the same transaction id: a homeserver
    /// that took the old post answers with the same event id); every other effect in
    /// flight failed with the old process (pushes go back to the queue, verdicts wait
    /// for their session, agent writes are not retried: their tool call is gone).
    Restarted,
}

impl Input {
    /// The identity the input is for; `None` for [`Input::Tick`], [`Input::Restarted`]
    /// and [`Input::Completed`], which concern the whole core.
    pub fn identity(&self) -> Option<&IdentityId> {
        match self {
            Input::Attach { identity, .. }
            | Input::Bind { identity, .. }
            | Input::Revoke { identity, .. }
            | Input::Detach { identity, .. }
            | Input::Message { identity, .. }
            | Input::Reaction { identity, .. }
            | Input::Redaction { identity, .. }
            | Input::PermissionRequest { identity, .. }
            | Input::InvalidPermissionRequest { identity, .. }
            | Input::AgentWrite { identity, .. }
            | Input::Acknowledge { identity, .. }
            | Input::Membership { identity, .. }
            | Input::Unhandled { identity, .. }
            | Input::Undecryptable { identity, .. }
            | Input::GapCut { identity, .. } => Some(identity),
            Input::Completed { .. } | Input::Tick | Input::Restarted => None,
        }
    }

    /// The Matrix event this input is, with its sender, when it could be the
    /// decryption of an event that came undecryptable before (see
    /// [`Input::Undecryptable`]).
    pub fn matrix_event(&self) -> Option<(&EventId, Option<&UserId>)> {
        match self {
            Input::Message { message: m, .. } => Some((&m.event_id, Some(&m.sender))),
            Input::Reaction { reaction: r, .. } => Some((&r.event_id, Some(&r.sender))),
            Input::Redaction { redaction: r, .. } => Some((&r.event_id, Some(&r.sender))),
            Input::Unhandled {
                event_id: Some(id),
                sender,
                ..
            } => Some((id, sender.as_ref())),
            _ => None,
        }
    }
}

/// A membership of the identity's own, as `m.room.member` names it
/// ([Client-Server API, "m.room.member"]).
///
/// [Client-Server API, "m.room.member"]: https://spec.matrix.org/v1.16/client-server-api/#mroommember
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "membership", rename_all = "snake_case")]
pub enum Membership {
    /// `invite`, by `by` (the event's `sender`).
    Invited { by: UserId },
    /// `join`.
    Joined,
    /// `leave` (left, kicked, an invite rejected or withdrawn), or `knock`.
    Left,
    /// `ban`.
    Banned,
}

/// How an effect that expects an outcome ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// A push or a verdict was written to the session's stream, or an agent's
    /// write was accepted by the homeserver.
    Sent,
    /// A prompt was posted to Matrix as `event_id`.
    Posted { event_id: EventId },
    /// A room was created as `room` ([`crate::Effect::CreateRoom`]).
    Created { room: RoomId },
    /// The effect did not happen; `reason` is for logs.
    Failed { reason: String },
}

/// `notifications/claude/channel/permission_request` params (Claude Code channel
/// contract): four strings, the id already parsed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PermissionRequest {
    /// Five letters from `a-km-z`; a hash of the tool-use id, not unique across sessions.
    pub request_id: RequestId,
    /// The tool, for instance `Bash` or `mcp__server__tool`.
    pub tool_name: String,
    /// What the tool call does, in Claude Code's words. Untrusted.
    pub description: String,
    /// JSON-shaped preview of the tool input, for display only. Untrusted.
    pub input_preview: String,
}

/// An `m.room.message` event.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Message {
    pub room: RoomId,
    pub event_id: EventId,
    pub sender: UserId,
    /// The sender's display name in the room, if any. Display only: never used to
    /// decide anything.
    pub sender_name: Option<String>,
    /// `origin_server_ts`, milliseconds.
    pub origin_server_ts: Timestamp,
    /// `None` when the event was redacted (`content: {}`) or has no `msgtype`/`body`.
    pub content: Option<MessageContent>,
    /// The device it was sent from, as far as Matrix can tell: decides whether it
    /// may be a verdict ([`crate::config::VerdictDevices`]).
    #[serde(default)]
    pub device: DeviceTrust,
}

/// What Matrix says about the device an event came from. Only an encrypted event
/// names its device: the Megolm session that decrypts it was shared by one device
/// (Matrix spec, "End-to-End Encryption", `m.megolm.v1.aes-sha2`), and the sender's
/// cross-signing identity signs the devices it owns ("Cross-signing"). matrix-sdk
/// tells it as the event's `EncryptionInfo::verification_state`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum DeviceTrust {
    /// Sent in the clear in a room that is not encrypted: Matrix names no device,
    /// anyone with the sender's access token could have sent it.
    #[default]
    PlaintextRoom,
    /// Sent in the clear in an encrypted room (or one whose state is not known):
    /// no device either. matrix-sdk and others send `m.reaction` this way.
    UnencryptedInEncryptedRoom,
    /// Encrypted, by a device that the sender's cross-signing identity signed
    /// (matrix-sdk: `Verified`, or `Unverified(UnverifiedIdentity)`: the identity is
    /// trusted on first use).
    CrossSigned,
    /// Encrypted, by a device the sender's identity did not sign, an unknown device,
    /// a device of another user, or an identity that changed after it was verified
    /// (matrix-sdk: `UnsignedDevice`, `None(_)`, `MismatchedSender`,
    /// `VerificationViolation`).
    NotCrossSigned,
}

/// The parts of `m.room.message` content the core uses.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MessageContent {
    pub msgtype: MsgType,
    /// `body`, as sent (with any reply fallback still in it).
    pub body: String,
    /// `formatted_body` when `format` is `org.matrix.custom.html`.
    pub formatted_body: Option<String>,
    /// `m.relates_to`, decoded.
    pub relation: Option<Relation>,
    /// For `m.image`, `m.file`, `m.audio`, `m.video`: what was attached.
    pub attachment: Option<Attachment>,
}

/// `msgtype` ([Client-Server API, "m.room.message msgtypes"]).
///
/// [Client-Server API, "m.room.message msgtypes"]: https://spec.matrix.org/v1.16/client-server-api/#mroommessage-msgtypes
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MsgType {
    Text,
    Emote,
    /// Bots' messages; never pushed, never verdicts.
    Notice,
    Image,
    File,
    Audio,
    Video,
    Location,
    /// Any other msgtype, by name.
    Other(String),
}

impl MsgType {
    /// The Matrix name, `m.text` and so on.
    pub fn as_str(&self) -> &str {
        match self {
            MsgType::Text => "m.text",
            MsgType::Emote => "m.emote",
            MsgType::Notice => "m.notice",
            MsgType::Image => "m.image",
            MsgType::File => "m.file",
            MsgType::Audio => "m.audio",
            MsgType::Video => "m.video",
            MsgType::Location => "m.location",
            MsgType::Other(name) => name,
        }
    }
}

/// An attachment's facts, pushed as meta and never as body text.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Attachment {
    /// `filename`, or `body` when `filename` is absent.
    pub filename: String,
    /// `info.size`, bytes.
    pub size: Option<u64>,
    /// `info.mimetype`.
    pub mimetype: Option<String>,
}

/// `m.relates_to` of a message ([Client-Server API, "Forming relationships"]).
///
/// [Client-Server API, "Forming relationships"]: https://spec.matrix.org/v1.16/client-server-api/#forming-relationships-between-events
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "rel", rename_all = "snake_case")]
pub enum Relation {
    /// A rich reply: `m.in_reply_to` without `rel_type`.
    Reply { in_reply_to: ReplyTo },
    /// `rel_type: m.replace`: an edit of `original`.
    Replacement {
        original: EventId,
        /// `m.new_content`; `None` when absent (the edit is then dropped).
        new_content: Option<NewContent>,
    },
    /// `rel_type: m.thread`. With `is_falling_back: true` the `m.in_reply_to` is only a
    /// fallback for clients without threads and is not a reply.
    Thread {
        root: EventId,
        in_reply_to: Option<ReplyTo>,
        is_falling_back: bool,
    },
}

impl Relation {
    /// The event this message really replies to: a rich reply, or a thread message
    /// whose `m.in_reply_to` is not a fallback.
    pub fn reply_to(&self) -> Option<&ReplyTo> {
        match self {
            Relation::Reply { in_reply_to } => Some(in_reply_to),
            Relation::Thread {
                in_reply_to: Some(in_reply_to),
                is_falling_back: false,
                ..
            } => Some(in_reply_to),
            Relation::Thread { .. } | Relation::Replacement { .. } => None,
        }
    }
}

/// The target of a reply, with the parent as the adapter could resolve it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ReplyTo {
    pub event_id: EventId,
    /// `None` when the parent could not be fetched (unknown, forbidden, redacted):
    /// pushed as an explicit unresolved marker.
    pub parent: Option<Parent>,
}

/// A reply's parent event, as fetched by the adapter.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Parent {
    pub sender: UserId,
    pub body: String,
    /// Whether the parent is itself a reply (its own fallback is then stripped).
    pub has_reply_relation: bool,
}

/// `m.new_content` of an edit.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NewContent {
    pub msgtype: MsgType,
    pub body: String,
}

/// An `m.room.encrypted` event that could not be decrypted, as its envelope and its
/// clear-text content tell.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Undecryptable {
    pub room: RoomId,
    pub event_id: EventId,
    pub sender: UserId,
    /// The sender's display name in the room, if any. Display only.
    pub sender_name: Option<String>,
    /// `origin_server_ts`, milliseconds.
    pub origin_server_ts: Timestamp,
    /// `content.session_id`: the Megolm session whose room key it needs (`None` for
    /// an algorithm without one). For the operator's log only.
    pub session_id: Option<String>,
}

/// An `m.reaction` event: an `m.annotation` of `relates_to` with `key`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Reaction {
    pub room: RoomId,
    pub event_id: EventId,
    pub sender: UserId,
    pub origin_server_ts: Timestamp,
    /// The annotated event.
    pub relates_to: EventId,
    /// The raw key, as sent (kept for display; normalised only to compare).
    pub key: String,
    /// The device it was sent from (see [`Message::device`]): decides whether it
    /// may be a vote.
    #[serde(default)]
    pub device: DeviceTrust,
}

/// An `m.room.redaction` event.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Redaction {
    pub room: RoomId,
    pub event_id: EventId,
    pub sender: UserId,
    pub origin_server_ts: Timestamp,
    /// The redacted event.
    pub redacts: EventId,
}
