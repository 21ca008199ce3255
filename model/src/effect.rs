//! What the core asks the server to do. Closed: the server's executor has one arm for
//! each variant and no `_` arm.

use crate::agent::AgentWrite;
use crate::ids::{
    CallId, EffectId, EventId, IdentityId, Label, RoomId, SessionId, Timestamp, UserId,
};
use crate::meta::Meta;
use crate::verdict::{Behavior, RequestId};
use serde::{Deserialize, Serialize};

/// One thing for the server to do. Variants with an `id` expect an
/// [`crate::Input::Completed`] with that id.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Effect {
    /// Send `notifications/claude/channel` with `notification` as params to `session`.
    /// Outcome: `Sent`, or `Failed` (the session is then taken as detached and the
    /// event goes to another live session or back to the queue).
    Push {
        id: EffectId,
        identity: IdentityId,
        session: SessionId,
        /// The event pushed; `None` for the replay-cut notice, which is no event.
        event_id: Option<EventId>,
        notification: ChannelNotification,
    },
    /// Post a permission prompt to `room` as the identity. Outcome: `Posted` with the
    /// event id (the prompt becomes answerable), or `Failed` (the prompt is dropped).
    PostPrompt {
        id: EffectId,
        identity: IdentityId,
        room: RoomId,
        request_id: RequestId,
        text: PromptText,
    },
    /// Send `notifications/claude/channel/permission` to the session that asked.
    /// Outcome: `Sent` retires the prompt; `Failed` keeps the verdict for when the
    /// session attaches again.
    SendVerdict {
        id: EffectId,
        identity: IdentityId,
        session: SessionId,
        verdict: PermissionVerdict,
    },
    /// Replace the prompt message `event_id` (`m.replace`) to show its outcome.
    /// Fire and forget.
    EditPrompt {
        identity: IdentityId,
        room: RoomId,
        event_id: EventId,
        text: PromptText,
    },
    /// Tell someone in Matrix why their message did nothing (an `m.notice` replying to
    /// `in_reply_to`). Fire and forget.
    Notice {
        identity: IdentityId,
        room: RoomId,
        in_reply_to: EventId,
        text: String,
    },
    /// Tell the room something that answers no message: an `m.notice` with the
    /// text's HTML as its `formatted_body` (a request a policy rule allowed or
    /// denied, docs/decisions/0029-policy.md). Fire and forget.
    Announce {
        identity: IdentityId,
        room: RoomId,
        text: PromptText,
    },
    /// Join `room` as the identity: an allowed sender invited it. Outcome: `Sent`
    /// when the homeserver took the join (the identity's join event follows in the
    /// room's timeline), or `Failed` (the invite stays pending).
    JoinRoom {
        id: EffectId,
        identity: IdentityId,
        room: RoomId,
    },
    /// Create a room for the sessions of `label` (Client-Server API, `POST
    /// /createRoom`): named `name`, `invite` invited (the identity's allowed
    /// senders), private, encrypted when the identity's store can encrypt. Outcome:
    /// `Created` with the room id (the label is bound to it), or `Failed` (the
    /// label stays without a room until one of its sessions attaches again).
    CreateRoom {
        id: EffectId,
        identity: IdentityId,
        label: Label,
        name: String,
        invite: Vec<UserId>,
    },
    /// Show (`typing: true`) or stop showing the identity as typing in `room`
    /// (Client-Server API, `PUT /rooms/{roomId}/typing/{userId}`), with a `timeout`
    /// of [`crate::TYPING_TIMEOUT_MS`]: the core sends it again before that runs
    /// out while the session works. Fire and forget.
    Typing {
        identity: IdentityId,
        room: RoomId,
        typing: bool,
    },
    /// `label` was bound to `room`, or unbound with `None` ([`crate::Input::Bind`],
    /// an approver's `bind`/`unbind`, a room created for it). An audit record;
    /// nothing to execute.
    Bound {
        identity: IdentityId,
        label: Label,
        room: Option<RoomId>,
    },
    /// Perform the agent's `write` as the identity, exactly as given, and answer the
    /// tool call `call` with how it ended. Outcome: `Sent` or `Failed`.
    Write {
        id: EffectId,
        identity: IdentityId,
        call: CallId,
        write: AgentWrite,
    },
    /// The agent's write for `call` is not performed: answer the tool call with
    /// `reason` (see [`crate::agent`]).
    WriteRefused {
        identity: IdentityId,
        call: CallId,
        reason: DropReason,
    },
    /// Tell one MCP session something went wrong with what it sent (an MCP
    /// `notifications/message` at level `warning`, logger `matrix-channel`). Fire
    /// and forget.
    LogMessage {
        identity: IdentityId,
        session: SessionId,
        message: String,
    },
    /// A verdict was taken (an audit record; the send follows, now or on attach).
    Decided {
        identity: IdentityId,
        session: SessionId,
        request_id: RequestId,
        decision: Decision,
        at: Timestamp,
    },
    /// An approver made a grant (docs/decisions/0027-grants.md). Nothing to
    /// execute: the audit trail's record (the notice telling it is a
    /// [`Effect::Notice`] of its own).
    Granted {
        identity: IdentityId,
        grant: crate::core::Grant,
    },
    /// Grant `id` ended: expired, its session detached, or revoked. Nothing to
    /// execute.
    GrantEnded {
        identity: IdentityId,
        id: u64,
        why: crate::core::GrantEnd,
    },
    /// The agent's acknowledgement ([`crate::Input::Acknowledge`]) was taken: the
    /// event is never replayed. The server answers the `acknowledge` tool from this
    /// effect (`acknowledged: true`); an acknowledgement the core does not take
    /// yields [`Effect::Dropped`] with the event's id instead. Nothing to execute.
    Acknowledged {
        identity: IdentityId,
        /// The channel session that acknowledged, as the input named it.
        session: Option<SessionId>,
        event_id: EventId,
    },
    /// Something was not acted on, and why. The server logs it; nothing is dropped
    /// silently.
    Dropped {
        identity: Option<IdentityId>,
        event_id: Option<EventId>,
        reason: DropReason,
    },
}

/// `notifications/claude/channel` params: `{content, meta}`, every meta value a string.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChannelNotification {
    /// The sandboxed body. Claude Code inserts it raw inside `<channel …>`.
    pub content: String,
    /// Facts about the event; keys match `^[A-Za-z_][A-Za-z0-9_]*$`, never `source`.
    pub meta: Meta,
}

/// `notifications/claude/channel/permission` params.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PermissionVerdict {
    pub request_id: RequestId,
    pub behavior: Behavior,
}

/// A prompt message in both forms Matrix carries: `body` and the HTML
/// `formatted_body` (everything from the tool call escaped).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PromptText {
    pub plain: String,
    pub html: String,
}

/// A verdict taken, by whom and how.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Decision {
    pub behavior: Behavior,
    /// The approver whose answer decided.
    pub by: UserId,
    pub via: VerdictSource,
}

/// How a verdict was given.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "via", rename_all = "snake_case")]
pub enum VerdictSource {
    /// A `yes abcde` / `no abcde` message.
    Text { event_id: EventId },
    /// Reactions on the prompt that were still there when the settle window ended;
    /// `key` is the raw key of the deciding one.
    Reaction { event_id: EventId, key: String },
    /// Grant `grant` covered the request: nobody was asked
    /// (docs/decisions/0027-grants.md); `Decision::by` is who made the grant.
    Grant { grant: u64 },
    /// Rule `rule` (from 1) of the identity's policy allowed or denied the request:
    /// nobody was asked (docs/decisions/0029-policy.md); `Decision::by` is the
    /// identity's own user id.
    Policy { rule: usize },
}

impl VerdictSource {
    /// Whether nobody was asked: a grant or a policy rule answered, and the request
    /// has no prompt message of its own.
    pub fn is_auto(&self) -> bool {
        matches!(
            self,
            VerdictSource::Grant { .. } | VerdictSource::Policy { .. }
        )
    }
}

/// Why something was not acted on.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum DropReason {
    /// The identity's own event.
    OwnEvent,
    /// The sender is not in `allowed_senders`.
    Stranger,
    /// An `m.notice`: bots talk in notices, and notices are never input.
    Notice,
    /// The event's content is gone (redacted) or undecodable.
    NoContent,
    /// This event id was already processed.
    Duplicate,
    /// A verdict (text or reaction) from an allowed sender who is not an approver.
    NotApprover,
    /// An approver's verdict (text or reaction) from a device the approver has not
    /// cross-signed, while `verdict_devices` asks for one ([`crate::DeviceTrust`]).
    NotCrossSigned,
    /// An approver's verdict sent in the clear in an encrypted room, or in any room
    /// while `verdict_devices` is `encrypted_cross_signed`: it names no device.
    ClearVerdict,
    /// Verdict-shaped text that is not a verdict (an edit's new content, a caption,
    /// a msgtype other than `m.text` / `m.emote`): never pushed as chat.
    VerdictShaped,
    /// An event redacted before any session received it: removed from the queue.
    RedactedBeforeDelivery,
    /// An edit without `m.new_content`, of an event never pushed, or by someone other
    /// than the original's sender.
    EditRejected,
    /// A redaction of an event that was never pushed.
    RedactionOfUnpushed,
    /// A redaction of a vote by someone other than the voter.
    WithdrawalByOther,
    /// The session is not attached to this identity.
    UnknownSession,
    /// An acknowledgement of an event the identity never pushed.
    UnknownEvent,
    /// A permission request while the identity has no approvers.
    NoApprovers,
    /// A permission request with no room to post it in: no `permission_room`, and
    /// the session's label has no room yet, or an unlabelled session and no unbound
    /// room an allowed sender wrote in yet.
    NoPromptRoom,
    /// Creating a room for a label failed; its sessions get no room's events until
    /// one of them attaches again.
    RoomCreationFailed { label: Label },
    /// A verdict for a request id with no answerable prompt in the room it was typed
    /// in (never issued, expired, already delivered, or posted in another room: the
    /// notice then links the prompt).
    UnknownRequest,
    /// A text verdict matching prompts of several sessions, not a reply to one.
    AmbiguousRequest,
    /// A text verdict that is a Matrix reply to an event other than its request's
    /// prompt (a chat message, an imitation of a prompt, another prompt): a reply
    /// names what it answers, so it answers nothing.
    ReplyNotToPrompt,
    /// A verdict for a prompt whose verdict is already being delivered.
    AlreadyAnswered,
    /// A verdict or vote for a prompt withdrawn because the session that asked
    /// disconnected (docs/decisions/0030-withdrawn-prompts.md): it counts for
    /// nothing, and the approver is told.
    PromptWithdrawn,
    /// A prompt's time to live ran out.
    PromptExpired,
    /// A prompt was evicted because the identity reached `max_prompts`.
    PromptEvicted,
    /// A prompt was replaced by a new request under the same session and id.
    PromptSuperseded,
    /// Posting a prompt failed.
    PromptPostFailed,
    /// The queue was full; its oldest event was dropped.
    QueueFull,
    /// Replay to an attaching session was cut at the budget; these were omitted.
    ReplayCut { omitted: usize },
    /// A sync's gap in `room` was larger than the server backfills: its oldest events
    /// were never fetched (see `Input::GapCut`).
    GapCut { room: RoomId },
    /// An outcome for an effect id that is not in flight.
    StaleOutcome,
    /// An input for an identity that was never added.
    UnknownIdentity,
    /// A `permission_request` whose params could not be read, or on a mount that
    /// takes none.
    InvalidPermissionRequest,
    /// An agent's write aimed at a permission prompt's message: it would edit,
    /// redact, react to, reply to or thread on it.
    PromptTarget,
    /// An agent's edit of a message that is not the identity's own.
    NotOwnMessage,
    /// An agent's text names the open permission request `request_id`.
    NamesOpenRequest { request_id: RequestId },
    /// The agent would leave a room where one of its prompts waits.
    LeavesPromptRoom,
    /// The agent would set the name or topic of a prompt room: the operator's
    /// `permission_room`, or a room where a prompt the core holds was posted.
    PromptRoomState,
    /// An event of a room the identity is not joined to when the event comes in the
    /// room's timeline: history from before its join (also when a sync delivers it
    /// again after the join), or after it left.
    NotJoined,
    /// An `m.room.member` event of someone other than the identity.
    OtherMember,
    /// An invite the identity already acted on (it is joining or joined).
    AlreadyInvited,
    /// Joining a room on an invite failed; the invite stays pending.
    JoinFailed,
    /// A timeline event that is no input of the core's (see `Input::Unhandled`).
    #[serde(rename = "not_input")]
    Unhandled { what: String },
    /// Not pushed yet: an encrypted event that could not be decrypted, parked until
    /// it comes decrypted or its grace period ends (see `Input::Undecryptable`).
    Undecryptable,
}
