//! The action alphabet, generated from one list by [`alphabet!`]: the [`Action`] enum,
//! its [`ActionKind`]s, the [`Adapter`] trait with one method per action, and
//! [`drive`], the exhaustive dispatch. Every action is named after the model
//! [`Input`] it becomes; [`kind_of`] maps every `Input` variant back to its action
//! with an exhaustive `match`. So a new `Input` variant fails to compile here, and a
//! new action fails to compile in every adapter, until each handles it.

use crate::world::{
    AgentOp, BadRequest, Change, Ident, Key, Lbl, Odd, Redactor, Rel, Rid, Sel, Sess, Text, Who,
    World,
};
use mc_model::Input;
use serde::{Deserialize, Serialize};

macro_rules! alphabet {
    ($(
        $(#[$doc:meta])*
        $variant:ident { $($field:ident : $ty:ty),* $(,)? } => $method:ident
    ),+ $(,)?) => {
        /// One step of a generated sequence. See the module docs.
        #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(tag = "action", rename_all = "snake_case")]
        pub enum Action {
            $( $(#[$doc])* $variant { $($field: $ty),* } ),+
        }

        /// The variants of [`Action`], without their fields.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum ActionKind { $($variant),+ }

        impl ActionKind {
            /// Every kind, in declaration order.
            pub const ALL: &'static [ActionKind] = &[$(ActionKind::$variant),+];

            /// The snake_case name, as in the skip list (`conformance/skip.txt`).
            pub fn name(self) -> &'static str {
                match self { $(ActionKind::$variant => stringify!($method)),+ }
            }
        }

        impl Action {
            pub fn kind(&self) -> ActionKind {
                match self { $(Action::$variant { .. } => ActionKind::$variant),+ }
            }
        }

        /// Turns each action into real traffic for one target. `world` is the
        /// reference state *after* the action (it holds the event the action created,
        /// with its symbolic id and content).
        pub trait Adapter {
            $( fn $method(&mut self, world: &World, $($field: &$ty),*) -> Result<(), String>; )+
        }

        /// Hands `action` to the adapter's method for it.
        pub fn drive<A: Adapter + ?Sized>(
            adapter: &mut A,
            world: &World,
            action: &Action,
        ) -> Result<(), String> {
            match action { $( Action::$variant { $($field),* } => adapter.$method(world, $($field),*) ),+ }
        }
    };
}

alphabet! {
    /// `Input::Attach`: the session's channel stream opens (a known session's with
    /// the label its MCP session was created with).
    Attach { session: Sess } => attach,
    /// `Input::Attach` with a label: a new MCP session is created on
    /// `/channel?room=<label>` and its stream opens. Only a label the identity has
    /// bound (to a room or to none): a room the model asks to create is not in the
    /// world (conformance/skip.txt).
    AttachLabelled { session: Sess, label: Lbl } => attach_labelled,
    /// `Input::Bind`: the operator binds `label` to the identity's room number `room`
    /// (`matrix-channel bind`), or unbinds it with `None` (`--unbind`).
    Bind { ident: Ident, label: Lbl, room: Option<u8> } => bind,
    /// `Input::Revoke`: the operator revokes the identity's grant `grant`
    /// (`matrix-channel revoke`), or every grant with `None` (`--all`).
    Revoke { ident: Ident, grant: Option<u8> } => revoke,
    /// `Input::Detach`: the session's channel stream closes.
    Detach { session: Sess } => detach,
    /// `Input::Message`: `sender` sends an `m.room.message` in the identity's room
    /// number `room`.
    Message { ident: Ident, sender: Who, room: u8, text: Text, rel: Rel } => message,
    /// `Input::Reaction`: an `m.annotation` of the event `target` picks.
    Reaction { sender: Who, target: Sel, key: Key } => reaction,
    /// `Input::Redaction`: the n-th message or reaction not yet redacted is redacted.
    Redaction { by: Redactor, target: usize } => redaction,
    /// `Input::PermissionRequest`: the session sends
    /// `notifications/claude/channel/permission_request`.
    PermissionRequest { session: Sess, rid: Rid } => permission_request,
    /// `Input::InvalidPermissionRequest`: the session sends a
    /// `permission_request` the server cannot read.
    InvalidPermissionRequest { session: Sess, bad: BadRequest } => invalid_permission_request,
    /// `Input::AgentWrite`: the agent writes to Matrix through the identity's tools
    /// (`send_message`, `edit_message`, `send_reaction`, `redact`); `ident` is the
    /// identity when the write has no target (else the target's).
    AgentWrite { ident: Ident, op: AgentOp } => agent_write,
    /// `Input::Acknowledge`: the agent acknowledges the identity's n-th message, through
    /// the session or (`None`) through the identity's tools.
    Acknowledge { ident: Ident, session: Option<Sess>, target: usize } => acknowledge,
    /// `Input::Completed` with `Failed`: the session's stream breaks, so the next
    /// notification written to it fails (successful outcomes come from the wire).
    BreakStream { session: Sess } => break_stream,
    /// `Input::Tick`: `ms` milliseconds pass.
    Tick { ms: u64 } => tick,
    /// `Input::Restarted`: the server process is killed and a new one starts on the
    /// same state (it loads the state and reports the rooms it is in). With `request`,
    /// the kill lands while that session's permission request is being handled: its
    /// prompt post is in flight, and `reached` says whether the homeserver has the
    /// event (in process only).
    Restart { request: Option<(Sess, Rid)>, reached: bool } => restart,
    /// A sync delivers the n-th delivered event (a person's message, edit, reaction
    /// or redaction, not redacted) again, as a replayed response does.
    Redeliver { target: usize } => redeliver,
    /// `Input::Membership`: the identity's own `m.room.member` event in its room
    /// number `room`: it left (or was kicked), or `by` invites it (an allowed
    /// sender's invite is joined, a stranger's never).
    Membership { ident: Ident, room: u8, change: Change } => membership,
    /// `Input::Unhandled`: `sender` puts a timeline event that is no input in the
    /// identity's room number `room` (a state event, another event type, a malformed
    /// reaction).
    Unhandled { ident: Ident, sender: Who, room: u8, kind: Odd } => unhandled,
    /// `Input::Undecryptable`: `sender`'s event in the identity's room number `room`
    /// arrives as an `m.room.encrypted` the server cannot decrypt (no room key for its
    /// Megolm session has reached the identity's device).
    Undecryptable { ident: Ident, sender: Who, room: u8 } => undecryptable,
    /// The room key of the n-th still-undecrypted encrypted event arrives: the same
    /// event id comes again decrypted, as an `m.text` message from the same sender
    /// saying `text`.
    Decrypt { target: usize, text: Text } => decrypt,
    /// `Input::GapCut`: a sync's gap in the identity's room number `room` was larger
    /// than the server backfills (handed as the input itself: the backfill is the
    /// driver's IO, tested end to end).
    GapCut { ident: Ident, room: u8 } => gap_cut,
}

/// The action an input comes from. Exhaustive: a new `Input` variant fails to compile
/// here until the alphabet has an action for it.
pub fn kind_of(input: &Input) -> ActionKind {
    match input {
        Input::Attach { label: None, .. } => ActionKind::Attach,
        Input::Attach { label: Some(_), .. } => ActionKind::AttachLabelled,
        Input::Bind { .. } => ActionKind::Bind,
        Input::Revoke { .. } => ActionKind::Revoke,
        Input::Detach { .. } => ActionKind::Detach,
        Input::Message { .. } => ActionKind::Message,
        Input::Reaction { .. } => ActionKind::Reaction,
        Input::Redaction { .. } => ActionKind::Redaction,
        Input::PermissionRequest { .. } => ActionKind::PermissionRequest,
        Input::InvalidPermissionRequest { .. } => ActionKind::InvalidPermissionRequest,
        Input::AgentWrite { .. } => ActionKind::AgentWrite,
        Input::Acknowledge { .. } => ActionKind::Acknowledge,
        Input::Completed { .. } => ActionKind::BreakStream,
        Input::Tick => ActionKind::Tick,
        Input::Restarted => ActionKind::Restart,
        Input::Membership { .. } => ActionKind::Membership,
        Input::Unhandled { .. } => ActionKind::Unhandled,
        Input::Undecryptable { .. } => ActionKind::Undecryptable,
        Input::GapCut { .. } => ActionKind::GapCut,
    }
}
