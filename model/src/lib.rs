//! The pure core of matrix-channel: one state machine that decides everything the
//! channel and the permission relay promise, and its stateright model.
//!
//! # What it does
//! [`Channel::handle`] takes the current time (milliseconds, like Matrix
//! `origin_server_ts`) and one [`Input`] (a Matrix event as the server decoded it,
//! something a Claude Code session did, or the outcome of an earlier effect) and
//! returns the [`Effect`]s to execute, in order. [`Channel::next_deadline`] says
//! when to call it again with [`Input::Tick`]. Effects that can fail carry an
//! [`EffectId`]; the server reports how they ended with [`Input::Completed`].
//!
//! The rules, in the order they run:
//! 1. **Sender gate** ([`IdentityConfig::gate`]): exact MXID, before every other
//!    branch. The identity's own events and strangers stop here.
//! 2. **Classifier** ([`classify::classify_message`], [`classify::classify_reaction`]):
//!    notices, edits, verdicts (`yes abcde`, approvers only), votes (an approver's
//!    reaction on a prompt), chat.
//! 3. **Prompts**: a permission request is posted to the `permission_room`, or the
//!    room an allowed sender last wrote in; it is answered by text at once, or by
//!    reactions when the settle window ends (deny wins, a redacted vote is
//!    withdrawn); the verdict goes only to the session that asked, and the prompt
//!    lives until that send succeeded. Unanswered prompts expire.
//! 4. **Delivery**: chat goes to every live session of the identity, or to a queue
//!    replayed once to the next session that attaches. A delivery log per identity
//!    makes every event reach each session at most once.
//!
//! # What it does not do
//! No IO, no async, no clock, no randomness: the server (`impl/`) decodes Matrix
//! events with ruma, fetches reply parents, talks MCP with rmcp, and executes the
//! effects. It takes no decision of its own. The state is serializable so the
//! server can persist it after every transition.
//!
//! # The model check
//! `tests/check/mod.rs` is a stateright model of a bounded world that calls this
//! very [`Channel::handle`]; `tests/state_space.rs` runs it. See the README.

pub mod agent;
pub mod classify;
pub mod config;
mod core;
pub mod effect;
pub mod event;
pub mod fallback;
pub mod grant;
pub mod ids;
pub mod meta;
pub mod policy;
pub mod prompt_text;
pub mod reaction;
pub mod render;
pub mod sandbox;
pub mod verdict;

pub use crate::agent::{AgentText, AgentWrite};
pub use crate::config::{
    ConfigError, Gate, IdentityConfig, VerdictDevices, DEFAULT_ATTACH_GRACE_MS,
};
pub use crate::core::{
    Binding, Channel, Grant, GrantEnd, IdentityState, JoinState, LogEntry, Parked, Phase, Prompt,
    Queued, Record, SessionPhase, Typing, Vote, HISTORY_MEMORY, MAX_GRANTS, TYPING_REFRESH_MS,
    TYPING_TIMEOUT_MS, UNDECRYPTABLE_MEMORY,
};
pub use crate::effect::{
    ChannelNotification, Decision, DropReason, Effect, PermissionVerdict, PromptText, VerdictSource,
};
pub use crate::event::{
    Attachment, DeviceTrust, Input, Membership, Message, MessageContent, MsgType, NewContent,
    Outcome, Parent, PermissionRequest, Reaction, Redaction, Relation, ReplyTo, Undecryptable,
};
pub use crate::ids::{
    CallId, EffectId, EventId, IdentityId, Label, LabelError, Millis, RoomId, SessionId, Timestamp,
    UserId,
};
pub use crate::meta::{Meta, MetaKey, SECURITY_POINTER};
pub use crate::verdict::{Behavior, RequestId};
