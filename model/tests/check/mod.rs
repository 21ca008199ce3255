//! The stateright model: the bounded world in which every invariant is checked.
//!
//! [`World`] drives the very [`Channel::handle`] the server runs. Each action is one
//! thing that can happen: a Claude Code session attaches, detaches or asks for
//! permission; someone writes, replies, edits, reacts or redacts in Matrix; the agent
//! writes to Matrix through the identity's tools (the core performs or refuses each
//! write); the operator restarts the server with new settings; a verdict send
//! completes or fails; a push fails; time passes to (or just before) the next
//! deadline. The world keeps its own record of what happened in Matrix and what
//! each session received, and a monitor compares every effect with it: a violation
//! sets a bit in [`State::bad`], and each `always` property asks that its bit stays
//! clear. Each has a `sometimes` partner showing that the good path is reachable.
//!
//! A [`Fault`] makes the world (the adapters around the core, or the operator's
//! settings) misbehave in one deliberate way; the tests in `tests/state_space.rs`
//! switch each on and assert the checker finds the matching counterexample, so no
//! property holds because nothing happens.
//!
//! The cast: identity A (`@bot:a`) with approver Ann, allowed non-approver Carl, and
//! the stranger Eve (the operator's second settings make Carl the approver instead
//! of Ann), sessions S1 and S2, rooms `!r1:a` and `!r2:a`, no fixed permission room,
//! and the agent writing as `@bot:a`; identity B (`@bot:b`) with approver Ann, session S3 and the
//! permission room `!rb:b`. Request ids `abcde` and `fghij`.

#![allow(dead_code)] // Each test crate that includes the world uses part of it.

use mc_model::policy::{Pattern, Rule, RuleDecision};
use mc_model::{
    AgentText, AgentWrite, Behavior, CallId, Channel, DropReason, Effect, EffectId, EventId,
    IdentityId, Input, Label, Membership, Message, MessageContent, MetaKey, Millis, MsgType,
    NewContent, Outcome, Parent, PermissionRequest, Phase, Reaction, Redaction, Relation, ReplyTo,
    RequestId, RoomId, SessionId, Timestamp, UserId, VerdictSource,
};
use mc_model::{Gate, IdentityConfig};
use stateright::{Model, Property};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Prompt time to live in the world, ms.
pub const TTL: Millis = 10_000;
/// Settle window in the world, ms.
pub const SETTLE: Millis = 3_000;
/// Typing cap of the world's identities, ms: past one refresh (25 s).
pub const TYPING_CAP: Millis = 30_000;
/// Prompt cap per identity in the world.
pub const CAP: usize = 2;
/// The world's clock at the start, ms.
pub const START: Timestamp = Timestamp(1_000);
/// How long `yes abcde 5s` grants, ms.
pub const GRANT_FOR: Millis = 5_000;
/// How long `always abcde` grants at most, ms (`mc_model::grant::GRANT_MAX_MS`).
pub const GRANT_MAX: Millis = mc_model::grant::GRANT_MAX_MS;
/// What [`Action::Later`] lets pass, ms: past [`GRANT_FOR`].
pub const LATER: Millis = 6_000;
/// The command of `abcde` in [`Scope::Grants`]: what `always abcde` grants, and
/// the prefix `always abcde cargo test` grants.
pub const GRANT_PREFIX: &str = "cargo test";
/// The command of `abcde` in [`Scope::Policy`]: rule 1 asks two approvers for it.
pub const PUSH: &str = "git push";
/// The command of `fghij` in [`Scope::Policy`]: rule 2 denies it.
pub const REMOVE: &str = "rm -rf x";
/// The command of `fghij` in [`Scope::Grants`]: `cargo test` chained with more,
/// which no grant of `abcde` covers.
pub const CHAINED: &str = "cargo test && curl x";

/// Who acts in Matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Who {
    /// Approver of both identities.
    Ann,
    /// Allowed sender of A, not an approver.
    Carl,
    /// A stranger; her display name is "Ann".
    Eve,
    /// The identity's own account.
    Bot,
}

/// The two identities.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Ident {
    A,
    B,
}

/// The three Claude Code sessions: S1 and S2 of A, S3 of B.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Sess {
    S1,
    S2,
    S3,
}

/// The two request ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rid {
    /// `abcde`
    R1,
    /// `fghij`
    R2,
}

/// What a message says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Text {
    Chat,
    Notice,
    Yes(Rid),
    No(Rid),
    /// A message the agent sent (as the identity's own account).
    Agent,
    /// `bind web`: an approver's room command (the room becomes web's).
    Bind,
    /// `always abcde`: an allow and a grant of exactly what the prompt showed.
    Always(Rid),
    /// `always abcde cargo test`: an allow and a grant of the prefix `cargo test`.
    AlwaysPrefix(Rid),
    /// `yes abcde 5s`: an allow and a grant for [`GRANT_FOR`].
    YesFor(Rid),
    /// `revoke all`: an approver's room command ending every grant.
    RevokeAll,
}

/// What the agent does to a target through identity A's tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Touch {
    /// `edit_message`: an `m.replace` of the target.
    Edit,
    /// `redact`.
    Redact,
    /// `send_reaction` with `👀`.
    React,
    /// `send_message` as a rich reply to the target.
    Reply,
    /// `send_message` in the target's thread.
    Thread,
}

/// The event an agent's write aims at, by index in the world's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    Prompt(usize),
    Message(usize),
}

/// A text the agent sends in `!r1:a`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AgentSay {
    /// `see abcde`: names the request id as it is.
    Names(Rid),
    /// `see a\u{200B}bcde`: names it with a zero-width space inside.
    NamesHidden(Rid),
    /// `on it`: names nothing (the Prompts scope's prelude sends it).
    Innocent,
    /// A reaction on Ann's first message whose key is the request id.
    KeyNames(Rid),
}

/// A reaction key: `👍️` (with U+FE0F) or `👎🏽` (with a skin tone).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    Up,
    Down,
}

/// One step of the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Attach(Sess),
    Detach(Sess),
    /// A `permission_request` from a live session.
    Request(Sess, Rid),
    /// A message in room `room` (0 or 1 of the identity's rooms).
    Say {
        ident: Ident,
        who: Who,
        room: u8,
        text: Text,
    },
    /// Ann answers `yes <id>` as a Matrix reply to the prompt with this index.
    ReplyYes {
        prompt: usize,
    },
    /// A reaction on a prompt (by index in the world's prompts).
    ReactPrompt {
        who: Who,
        prompt: usize,
        key: Key,
    },
    /// Ann reacts 👍️ on a message (by index), which is not a prompt.
    ReactMessage {
        message: usize,
    },
    /// A reaction is redacted by `who`.
    RedactReaction {
        reaction: usize,
        who: Who,
    },
    /// Ann redacts a message (by index).
    RedactMessage {
        message: usize,
    },
    /// `who` edits a message (by index).
    Edit {
        who: Who,
        message: usize,
    },
    /// The agent acknowledges a message through a session.
    Ack(Sess, usize),
    /// An event that leaves no trace in the world's record: a stranger's, the
    /// identity's own, a notice, a non-approver's verdict. Fixed event ids, so a
    /// repeat is a duplicate.
    Noise(Noise),
    /// Carl redacts one of Ann's reactions (by index).
    CarlRedacts {
        reaction: usize,
    },
    /// A held verdict send completes.
    CompleteVerdict {
        send: EffectId,
        ok: bool,
    },
    /// The next push fails.
    ArmPushFailure,
    /// Time passes to the next deadline.
    Tick,
    /// Time passes to just before the next deadline.
    TickBefore,
    /// The agent (identity A's tools) edits, redacts, reacts to, replies to or
    /// threads on a prompt or a message.
    AgentTouch {
        touch: Touch,
        target: Target,
    },
    /// The agent sends a text.
    AgentSays(AgentSay),
    /// The operator restarts the server with new settings for A (`add_identity`
    /// keeps the state): Ann is no longer an approver and Carl is one, or
    /// (`swapped: false`) the first settings come back.
    Reconfigure {
        swapped: bool,
    },
    /// `who` invites identity A to `!r3:a` (fixed event ids: a repeat is the invite
    /// reported again, as the server does when it starts).
    Invite {
        who: Who,
    },
    /// Identity A's own membership of its room `room` (0 `!r1:a`, 2 `!r3:a`) changes.
    Member {
        room: u8,
        own: Own,
    },
    /// A held join completes (or fails).
    CompleteJoin {
        join: EffectId,
        ok: bool,
    },
    /// A held prompt post completes: Matrix gives it an event id.
    CompletePost {
        post: EffectId,
    },
    /// Sync delivers a message (by index) again, with its event id (a response
    /// replayed after a crash).
    Redeliver {
        message: usize,
    },
    /// The server restarts (`Input::Restarted`): what the old process had in flight
    /// and its sessions' streams are gone.
    Restart,
    /// [`LATER`] ms pass ([`Scope::Grants`]: a grant expires on no timer).
    Later,
}

/// Identity A's own membership event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Own {
    Joined,
    Left,
    Banned,
}

impl Own {
    fn membership(self) -> Membership {
        match self {
            Own::Joined => Membership::Joined,
            Own::Left => Membership::Left,
            Own::Banned => Membership::Banned,
        }
    }
}

/// Events that only the monitor looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Noise {
    /// Eve (display name "Ann") chats in A's second room.
    EveChat,
    /// Eve answers `yes abcde` in A.
    EveYes,
    /// The identity's own message echoed back by sync.
    BotChat,
    /// Carl sends an `m.notice`.
    CarlNotice,
    /// Carl answers `yes abcde`.
    CarlYes,
    /// Carl reacts 👍️ on a prompt (by index).
    CarlUp(usize),
    /// Eve reacts 👍️ on a prompt (by index).
    EveUp(usize),
    /// Ann answers `yes abcde` as a Matrix reply to the agent's first message, which
    /// is not a prompt (it answers nothing, so it leaves no trace either).
    AnnYesToAgent,
    /// Ann answers `yes abcde`, encrypted by a device she has not cross-signed
    /// (Prompts scope only).
    AnnUnsignedYes,
    /// Ann reacts 👍️ on a prompt (by index) from a device she has not cross-signed
    /// (Prompts scope only).
    AnnUnsignedUp(usize),
}

/// The event ids of Ann's verdicts from a device she has not cross-signed start so.
pub const ANN_UNSIGNED: &str = "$n-ann-unsigned-";

/// The event id of [`Noise::AnnYesToAgent`].
pub const ANN_YES_TO_AGENT: &str = "$n-ann-reply-yes";

/// A deliberate fault in the world around the core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The operator lists Eve as an allowed sender and approver of A.
    StrangerAllowed,
    /// The operator makes Carl an approver of A.
    CarlApprover,
    /// The server sends each verdict to every live session of the identity.
    VerdictToEverySession,
    /// The server reports a delivered verdict as failed.
    MisreportVerdicts,
    /// The server reports delivered pushes as failed.
    MisreportPushes,
    /// The adapter loses pushes yet reports them sent.
    LosePushes,
    /// The adapter mangles `yes abcde` with a zero-width space.
    DisguiseVerdicts,
    /// The adapter decodes `m.notice` as `m.text`.
    NoticeAsText,
    /// The server routes B's Matrix events to A.
    MisrouteToA,
    /// A tool call widens A's allowlist.
    WidenOnAck,
    /// The operator's cap is three, not two.
    CapThree,
    /// The adapter loses redactions.
    LoseRedactions,
    /// The adapter loses 👎 reactions.
    LoseDenyReactions,
    /// The settle window is 1 ms.
    ShortSettle,
    /// The time to live is doubled.
    LongTtl,
    /// The agent's acknowledgements are lost.
    DropAcks,
    /// The server pushes replayed events newest first.
    ReverseReplay,
    /// The adapter claims every edit comes from the original's sender.
    ForgeEditSender,
    /// The server reports a verdict send that failed as sent.
    MisreportFailedVerdicts,
    /// The server asks the core about an agent's message without its thread root,
    /// and sends it in the thread.
    AskWithoutThreadRoot,
    /// The server hands the core the agent's reaction key as empty.
    EmptyReactionKey,
    /// The server fetches the wrong sender (Ann) for the message the agent edits.
    WrongOriginalSender,
    /// The adapter drops the reply relation of a message.
    LoseReplyRelations,
    /// The operator's new settings never reach the core: it keeps the old approvers.
    StaleApprovers,
    /// The server takes an invite's inviter from the display name, so Eve's invite
    /// reads as Ann's.
    InviterByDisplayName,
    /// The adapter takes an invite's inviter from its `state_key` (the invitee).
    InviterIsInvitee,
    /// The server reports a join that succeeded as failed.
    MisreportJoins,
    /// The server's store says A is joined to `!r3:a` (it is not).
    StaleJoinedRoom,
    /// The server restarts from a state saved without the history memory.
    ForgetHistoryAtRestart,
    /// The server reports the prompt posts in flight as failed when it restarts.
    FailPostsAtRestart,
    /// The server reports the verdict sends in flight as sent when it restarts.
    VerdictsSentAtRestart,
    /// The server restarts without telling the core (no `Input::Restarted`).
    SilentRestart,
    /// The adapter loses what matrix-sdk says of the sending device: every event
    /// reads as sent in a plaintext room.
    LoseDeviceTrust,
    /// The server reports web's created room as api's room, and api's as web's.
    SwapCreatedRooms,
    /// The adapter hands Ann's `yes` typed in api's room as typed in web's.
    ForgeVerdictRoom,
    /// The server restarts from a state saved without the bindings.
    LoseBindingsAtRestart,
    /// The operator's typing cap is doubled.
    LongTypingCap,
    /// The adapter hands Carl's messages to the core as Ann's.
    CarlAsAnn,
    /// The server cuts a request's `input_preview` before ` &&`.
    CutChainedPreview,
    /// The server reports a session's stream closed (and open again) before each of
    /// its permission requests.
    DetachBeforeRequest,
    /// The operator's rule 1 asks one approver, not two.
    QuorumOfOne,
    /// The operator's deny rule never reaches the core.
    NoDenyRule,
    /// The server never tells the core that a session's stream closed.
    SilentDetach,
}

/// What the world knows of one label of identity A (`web` of S1, `api` of S2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WBinding {
    /// No session attached with it yet (every label outside [`Scope::Sessions`]).
    Unused,
    /// Its room is being created.
    Creating,
    /// Bound to A's room with this index.
    Room(u8),
    /// Unbound: its sessions get the rooms bound to no label.
    Unbound,
}

impl Fault {
    /// Whether the fault is in the agent's writes, the replies or the operator's new
    /// settings, so that its search needs those actions.
    pub fn needs_agent_or_settings(self) -> bool {
        matches!(
            self,
            Fault::AskWithoutThreadRoot
                | Fault::EmptyReactionKey
                | Fault::WrongOriginalSender
                | Fault::LoseReplyRelations
                | Fault::StaleApprovers
        )
    }
}

/// How much of each kind of action one run may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bounds {
    /// At most this many messages, reactions, redactions, edits, requests and acks
    /// in all (noise, sessions, outcomes and time are not counted).
    pub events: u8,
    pub messages: u8,
    pub reactions: u8,
    pub redactions: u8,
    pub edits: u8,
    pub requests: u8,
    pub failures: u8,
    pub acks: u8,
    pub toggles: u8,
    pub early_ticks: u8,
    /// Noise events (not counted in `events`).
    pub noise: u8,
    /// The agent's writes (counted in `events`).
    pub agent: u8,
    /// The operator's restarts with new settings (not counted in `events`).
    pub reconfigs: u8,
    /// Actions of any kind in one run: the depth of the search.
    pub steps: u8,
}

/// How many invites, memberships, re-deliveries and restarts one run may take (none
/// outside [`Scope::Rooms`]). Apart from [`Bounds`], whose fields name the older
/// scopes' alphabet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RoomBounds {
    pub invites: u8,
    /// Identity A's own joins, leaves and bans.
    pub memberships: u8,
    pub redeliveries: u8,
    pub restarts: u8,
}

impl RoomBounds {
    /// The pinned bounds of `scope`.
    pub fn pinned(scope: Scope) -> Self {
        match scope {
            Scope::Delivery | Scope::Prompts | Scope::Grants | Scope::Policy => Self::default(),
            Scope::Sessions => Self {
                restarts: 1,
                ..Self::default()
            },
            Scope::Rooms => Self {
                invites: 3,
                memberships: 2,
                redeliveries: 1,
                restarts: 2,
            },
        }
    }
}

impl Bounds {
    /// The pinned bounds of `scope`.
    pub fn pinned(scope: Scope) -> Self {
        match scope {
            Scope::Delivery => Self {
                events: 4,
                messages: 3,
                reactions: 1,
                redactions: 1,
                edits: 1,
                requests: 0,
                failures: 1,
                acks: 1,
                toggles: 3,
                early_ticks: 0,
                noise: 1,
                agent: 0,
                reconfigs: 0,
                steps: 6,
            },
            Scope::Prompts => Self {
                events: 4,
                messages: 2,
                reactions: 2,
                redactions: 1,
                edits: 0,
                requests: 3,
                failures: 1,
                acks: 0,
                toggles: 2,
                early_ticks: 1,
                noise: 1,
                agent: 1,
                reconfigs: 2,
                steps: 5,
            },
            Scope::Sessions => Self {
                events: 4,
                messages: 3,
                reactions: 0,
                redactions: 0,
                edits: 0,
                requests: 2,
                failures: 0,
                acks: 0,
                toggles: 2,
                early_ticks: 0,
                noise: 0,
                agent: 0,
                reconfigs: 0,
                steps: 6,
            },
            Scope::Grants => Self {
                events: 4,
                messages: 3,
                reactions: 0,
                redactions: 0,
                edits: 0,
                requests: 2,
                failures: 0,
                acks: 0,
                toggles: 2,
                early_ticks: 1,
                noise: 0,
                agent: 0,
                reconfigs: 0,
                steps: 6,
            },
            Scope::Policy => Self {
                events: 6,
                messages: 4,
                reactions: 0,
                redactions: 0,
                edits: 0,
                requests: 3,
                failures: 0,
                acks: 0,
                toggles: 2,
                early_ticks: 0,
                noise: 0,
                agent: 0,
                reconfigs: 0,
                steps: 8,
            },
            Scope::Rooms => Self {
                events: 2,
                messages: 2,
                reactions: 0,
                redactions: 0,
                edits: 0,
                requests: 1,
                failures: 1,
                acks: 0,
                toggles: 2,
                early_ticks: 0,
                noise: 0,
                agent: 0,
                reconfigs: 0,
                steps: 6,
            },
        }
    }
}

/// Which half of the world's alphabet is in play. One world with every action at
/// once does not fit the checker's time budget, so the bounded world is checked as
/// two pinned scopes that share the cast, the core, the monitor and every property.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Chat, the gate, edits, redactions, acknowledgements, replay, push failures and
    /// isolation; no permission requests.
    Delivery,
    /// Permission requests, verdicts by text and by reaction, withdrawal, expiry, the
    /// cap, re-issue and verdict-send failures; the agent's writes and the operator's
    /// new settings. Starts with S1 attached, Ann's first message in `!r1:a` pushed
    /// (so prompts have a room) and the agent's first message sent there.
    Prompts,
    /// Rooms and restarts: invites of A to `!r3:a` by Ann and by Eve, join outcomes,
    /// A's own joins, leaves and bans, messages in a room A has not joined (or has
    /// left) and their delivery again after the join, and the server's restart. Prompt
    /// posts are held until an action completes them. Starts with S1 attached, Ann's
    /// first message in `!r1:a` pushed and S1's request `abcde` being posted.
    Rooms,
    /// Session rooms (docs/decisions/0026-session-rooms.md): S1 attaches with the
    /// label `web`, S2 with `api`; the world creates `!web:a` and `!api:a` for them.
    /// Chat in each room and in `!r1:a`, the same request id from both sessions, a
    /// `yes` in api's room, Ann's `bind web` in `!r1:a`, and a restart. Starts with
    /// S1 and S2 attached and their rooms created.
    Sessions,
    /// Grants (docs/decisions/0027-grants.md): Ann answers S1's `abcde` (the
    /// command `cargo test`) with `always abcde`, `always abcde cargo test` or
    /// `yes abcde 5s`, and types `revoke all`; Carl types `always abcde`; S1 asks
    /// `abcde` again and `fghij` (`cargo test && curl x`), S2 asks `abcde`; S1
    /// detaches and attaches; time passes past the time box. Starts with S1 and S2
    /// attached, Ann's first message in `!r1:a` and S1's `abcde` posted there.
    Grants,
    /// The operator's policy (docs/decisions/0029-policy.md): Ann and Carl both
    /// approve A; rule 1 asks two approvers for `git push` (S1's `abcde`), rule 2
    /// denies `rm -rf x` (S1's `fghij`). Ann and Carl type `yes abcde`, Carl `no
    /// abcde`, Ann `always abcde`; S1 asks both again, detaches and attaches. Starts
    /// with S1 attached, Ann's first message in `!r1:a` and S1's `abcde` posted.
    Policy,
}

impl Scope {
    /// Every scope, in the order the full search checks them.
    pub const ALL: [Scope; 6] = [
        Scope::Delivery,
        Scope::Prompts,
        Scope::Rooms,
        Scope::Sessions,
        Scope::Grants,
        Scope::Policy,
    ];

    /// Unique states of the full search of the scope's pinned world
    /// (`World::new(scope)`): `model/tests/state_space.rs` and the bench
    /// (`bench/benches/core.rs`) both check against it. A change to the core or the
    /// world that changes one must say why in its commit.
    pub const fn pinned_states(self) -> usize {
        match self {
            // 278,842 until each attach's first push was briefed (the security
            // pointer) and a restart detached every session before it gave held
            // pushes back: the sessions not yet briefed tell more states apart.
            // 279,476 until the world recorded which sessions' streams it closed
            // (withdrawn prompts): a closed stream is told apart from a lost one.
            Scope::Delivery => 279_634,
            // 590,051 until A's agent's writes were judged against B's prompts too
            // (identities are isolated): more states tell a refusal apart.
            // 590,564 until Ann's verdicts from a device she has not cross-signed
            // (a text and a reaction, noise of this scope only) came.
            // 739,758 until the briefed first push of each attach (as above).
            // 741,043 until a closed session's prompts were withdrawn (refusing
            // answers until it attaches again) and the world recorded the closing.
            Scope::Prompts => 745_244,
            // 80,412 until the briefed first push of each attach (as above).
            // 80,620 until withdrawn prompts (as above).
            Scope::Rooms => 86_483,
            // New with session rooms (issue 26). 119,163 until typing stopped in a
            // room that stopped being its sessions' room (Ann's `bind web`).
            // 117,596 until withdrawn prompts (as above).
            Scope::Sessions => 119_704,
            // New with grants (issue 27). 107,308 until a grant was refused for a
            // session that is not connected and on a subject partly hidden.
            // 108,397 until withdrawn prompts (as above).
            Scope::Grants => 111_331,
            // New with the operator's policy (issue 27). 392,927 until withdrawn
            // prompts (as above): a withdrawn prompt keeps the approvals counted
            // before, so more quorum states are told apart.
            Scope::Policy => 535_740,
        }
    }
}

/// The checked model: scope, bounds and an optional fault.
#[derive(Clone, Debug)]
pub struct World {
    pub scope: Scope,
    pub bounds: Bounds,
    pub room_bounds: RoomBounds,
    pub fault: Option<Fault>,
    /// Only this property is checked (a fault search looks for one counterexample:
    /// the checker evaluates every property in every state it visits).
    pub focus: Option<&'static str>,
}

/// A message in the world's record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WMessage {
    pub ident: Ident,
    pub event_id: EventId,
    pub who: Who,
    pub text: Text,
    /// For an edit, the index of the original.
    pub edit_of: Option<usize>,
    pub redacted: bool,
    /// The identity's room it was sent in (see [`Ident::room`]).
    pub room: u8,
    /// The identity had joined the room when it first arrived: it is input. Otherwise
    /// it is history, and stays history.
    pub input: bool,
    /// History delivered again after the identity joined.
    pub again: bool,
}

/// What the world knows of identity A's membership of one of its rooms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WMember {
    /// Not a member (never joined, left or banned); an invite may be pending.
    Out,
    /// A join succeeded; the join event has not come yet.
    Accepted,
    /// Joined: the join event came.
    Joined,
}

/// A grant in the world's record: made for `sess` when the core said so and the
/// step was an approver's grant of an open prompt of `sess`'s ([`check_grants`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WGrant {
    pub id: u64,
    pub sess: Sess,
    pub expires: Timestamp,
    /// Not revoked, and its session has not detached since.
    pub live: bool,
}

/// A held prompt post in the world's record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WPost {
    pub ident: Ident,
    pub room: RoomId,
    pub issued: Timestamp,
}

/// A reaction in the world's record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WReaction {
    pub ident: Ident,
    pub event_id: EventId,
    pub who: Who,
    pub target: EventId,
    pub key: Key,
    pub created: Timestamp,
    /// Redacted by its own sender.
    pub redacted: bool,
    /// On a prompt, by someone who was an approver when it arrived: a vote.
    pub vote: bool,
}

/// A posted prompt in the world's record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WPrompt {
    pub ident: Ident,
    pub session: Sess,
    pub rid: Rid,
    pub message: EventId,
    pub room: RoomId,
    pub issued: Timestamp,
    /// Verdict sends to the session that completed.
    pub delivered: u8,
    /// Its message does not show an outcome yet: its request id is open.
    pub open: bool,
    /// Its message shows it unanswered (expired, replaced or dropped at the cap): no
    /// verdict is due. (The last edit counts: a verdict send that completes after its
    /// prompt was dropped shows the verdict again.)
    pub unanswered: bool,
}

/// The world's state: the core, and the world's own record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub channel: Channel,
    pub now: Timestamp,
    next_event: u32,
    used: Bounds,
    pub messages: Vec<WMessage>,
    pub reactions: Vec<WReaction>,
    pub prompts: Vec<WPrompt>,
    /// (session, event) pairs pushed.
    pub pushed: BTreeSet<(Sess, EventId)>,
    pub acked: BTreeSet<EventId>,
    /// Verdict sends in flight: effect id to prompt index.
    pub held: BTreeMap<EffectId, usize>,
    last_allowed_room: Option<RoomId>,
    attached: BTreeSet<Sess>,
    /// Sessions whose stream the world closed (`Detach`) and that have not attached
    /// since: their prompts are withdrawn (a lost send or a restart closes none).
    closed: BTreeSet<Sess>,
    push_failure_armed: bool,
    /// The operator's settings for A are the second ones: Carl approves, Ann does not.
    pub swapped: bool,
    used_rooms: RoomBounds,
    /// Identity A's membership of `!r1:a`, `!r2:a`, `!r3:a`, `!web:a` and `!api:a`,
    /// as the world knows it.
    pub member: [WMember; 5],
    /// Identity A's labels `web` and `api`, as the world knows them.
    pub labels: [WBinding; 2],
    /// The server restarted at least once.
    pub restarted: bool,
    /// Rooms A shows typing in, as the typing notices said.
    pub typing: BTreeSet<RoomId>,
    /// When a push of a label room's event last reached a session of that room.
    pub worked_on: BTreeMap<RoomId, Timestamp>,
    /// Joins in flight: effect id to A's room, or `None` once A's own membership
    /// event of that room came (the join is then settled, whatever its outcome).
    pub joins: BTreeMap<EffectId, Option<u8>>,
    /// Prompt posts in flight (held in [`Scope::Rooms`]).
    pub posts: BTreeMap<EffectId, WPost>,
    /// Sessions that were live when the server restarted and have not attached since.
    pub away: BTreeSet<Sess>,
    /// Prompts (by index) whose verdict send was in flight at a restart: the send is
    /// taken as lost with the old process, so the verdict is due when the session
    /// attaches again.
    pub resend: BTreeSet<usize>,
    /// Grants, as the world knows them (made, and whether still live).
    pub grants: Vec<WGrant>,
    /// [`Scope::Policy`]: the approvers who allowed `abcde` since it was last
    /// asked, and whether one denied it.
    pub allowed_by: BTreeSet<Who>,
    pub denied_by_one: bool,
    /// Violations seen, one bit per `always` property.
    pub bad: u64,
    /// Good things that happened in the step that led here, one bit per `sometimes`
    /// property that needs history. Cleared every step, so it does not split states.
    pub seen: u64,
}

// ----- the cast ------------------------------------------------------------------

impl Ident {
    pub fn id(self) -> IdentityId {
        match self {
            Ident::A => "a".into(),
            Ident::B => "b".into(),
        }
    }

    fn room(self, index: u8) -> RoomId {
        match (self, index) {
            (Ident::A, 0) => "!r1:a".into(),
            (Ident::A, 1) => "!r2:a".into(),
            (Ident::A, 3) => "!web:a".into(),
            (Ident::A, 4) => "!api:a".into(),
            (Ident::A, _) => "!r3:a".into(),
            (Ident::B, _) => "!rb:b".into(),
        }
    }

    fn rooms(self) -> Vec<RoomId> {
        match self {
            Ident::A => vec![self.room(0), self.room(1)],
            Ident::B => vec![self.room(0)],
        }
    }

    fn bot(self) -> UserId {
        match self {
            Ident::A => "@bot:a".into(),
            Ident::B => "@bot:b".into(),
        }
    }
}

impl Who {
    fn name(self) -> &'static str {
        match self {
            Who::Ann => "ann",
            Who::Carl => "carl",
            Who::Eve => "eve",
            Who::Bot => "bot",
        }
    }

    pub fn user(self, ident: Ident) -> UserId {
        match self {
            Who::Ann => "@ann:hs".into(),
            Who::Carl => "@carl:hs".into(),
            Who::Eve => "@eve:evil".into(),
            Who::Bot => ident.bot(),
        }
    }
}

impl Sess {
    pub fn ident(self) -> Ident {
        match self {
            Sess::S1 | Sess::S2 => Ident::A,
            Sess::S3 => Ident::B,
        }
    }

    pub fn id(self) -> SessionId {
        match self {
            Sess::S1 => "s1".into(),
            Sess::S2 => "s2".into(),
            Sess::S3 => "s3".into(),
        }
    }

    /// The label the session attaches with: only in [`Scope::Sessions`].
    fn label(self, scope: Scope) -> Option<Label> {
        let text = match (scope, self) {
            (Scope::Sessions, Sess::S1) => "web",
            (Scope::Sessions, Sess::S2) => "api",
            _ => return None,
        };
        Some(Label::parse(text).expect("constant label"))
    }

    /// The index of the session's label in [`State::labels`].
    fn label_index(self) -> Option<usize> {
        match self {
            Sess::S1 => Some(0),
            Sess::S2 => Some(1),
            Sess::S3 => None,
        }
    }

    fn from_id(id: &SessionId) -> Option<Sess> {
        [Sess::S1, Sess::S2, Sess::S3]
            .into_iter()
            .find(|s| s.id() == *id)
    }
}

impl Rid {
    pub fn id(self) -> RequestId {
        let text = match self {
            Rid::R1 => "abcde",
            Rid::R2 => "fghij",
        };
        // A constant of the request-id alphabet; the test suite parses both.
        RequestId::parse(text).expect("constant request id")
    }
}

impl Key {
    fn raw(self) -> &'static str {
        match self {
            Key::Up => "👍\u{FE0F}",
            Key::Down => "👎\u{1F3FD}",
        }
    }
}

/// Bits of [`State::bad`], one per `always` property.
mod bad {
    pub const STRANGER_VERDICT: u64 = 1 << 0;
    pub const NON_APPROVER_VERDICT: u64 = 1 << 1;
    pub const VERDICT_MISROUTED: u64 = 1 << 2;
    pub const VERDICT_TWICE: u64 = 1 << 3;
    pub const PUSH_TWICE: u64 = 1 << 4;
    pub const VERDICT_PUSHED: u64 = 1 << 5;
    pub const STRANGER_PUSHED: u64 = 1 << 6;
    pub const OWN_OR_NOTICE_PUSHED: u64 = 1 << 7;
    pub const CROSS_IDENTITY: u64 = 1 << 8;
    pub const WITHDRAWN_COUNTED: u64 = 1 << 9;
    pub const DENY_LOST: u64 = 1 << 10;
    pub const EARLY_VERDICT: u64 = 1 << 11;
    pub const EXPIRED_ANSWERED: u64 = 1 << 12;
    pub const WRONG_ROOM: u64 = 1 << 13;
    pub const ACKED_REPLAYED: u64 = 1 << 14;
    pub const FOREIGN_EDIT: u64 = 1 << 15;
    pub const REPLAY_ORDER: u64 = 1 << 16;
    pub const WRONG_RETIREMENT: u64 = 1 << 17;
    pub const PROMPT_TOUCHED: u64 = 1 << 18;
    pub const NAMES_OPEN: u64 = 1 << 19;
    pub const WRONGLY_REFUSED: u64 = 1 << 20;
    pub const REPLY_ANSWERED: u64 = 1 << 21;
    pub const HELD_BY_FORMER: u64 = 1 << 22;
    pub const STRANGER_JOINED: u64 = 1 << 23;
    pub const INVITE_NOT_JOINED: u64 = 1 << 24;
    pub const JOINED_TWICE: u64 = 1 << 25;
    pub const NOT_JOINED_INPUT: u64 = 1 << 26;
    pub const HISTORY_INPUT: u64 = 1 << 27;
    pub const POST_NOT_REISSUED: u64 = 1 << 28;
    pub const VERDICT_NOT_RESENT: u64 = 1 << 29;
    pub const PUSH_TO_AWAY: u64 = 1 << 30;
    pub const UNSIGNED_VERDICT: u64 = 1 << 31;
    pub const OUT_OF_ROOM: u64 = 1 << 32;
    pub const VERDICT_CROSS_ROOM: u64 = 1 << 33;
    pub const BINDING_LOST: u64 = 1 << 34;
    pub const TYPING_PAST_CAP: u64 = 1 << 35;
    pub const GRANT_UNFOUNDED: u64 = 1 << 36;
    pub const GRANT_OVERREACH: u64 = 1 << 37;
    pub const GRANT_IGNORED: u64 = 1 << 38;
    pub const POLICY_QUORUM: u64 = 1 << 39;
    pub const POLICY_DENY: u64 = 1 << 40;
    pub const WITHDRAWN_ANSWERED: u64 = 1 << 41;
    pub const WITHDRAWAL_HIDDEN: u64 = 1 << 42;
}

/// Bits of [`State::seen`].
mod seen {
    pub const VERDICT_S2: u64 = 1 << 0;
    pub const REANSWERED: u64 = 1 << 1;
    pub const TWO_SESSIONS: u64 = 1 << 2;
    pub const TEXT_VERDICT: u64 = 1 << 3;
    pub const REACTION_VERDICT: u64 = 1 << 4;
    pub const DENY_BY_REACTION: u64 = 1 << 5;
    pub const EXPIRED: u64 = 1 << 6;
    pub const REPLAYED: u64 = 1 << 7;
    pub const REPLAYED_TWO: u64 = 1 << 8;
    pub const EDIT_PUSHED: u64 = 1 << 9;
    pub const STALE_SEND: u64 = 1 << 11;
    pub const B_PUSHED: u64 = 1 << 12;
    pub const OWN_DROPPED: u64 = 1 << 13;
    pub const POSTED_TO_R2: u64 = 1 << 14;
    pub const VERDICT_DELIVERED: u64 = 1 << 15;
    pub const ALLOWED_PUSHED: u64 = 1 << 16;
    pub const EVICTED: u64 = 1 << 17;
    pub const PROMPT_WRITE_REFUSED: u64 = 1 << 18;
    pub const NAMING_REFUSED: u64 = 1 << 19;
    pub const WRITE_PERFORMED: u64 = 1 << 20;
    pub const REPLY_REFUSED: u64 = 1 << 21;
    pub const PAST_FORMER_DENY: u64 = 1 << 22;
    pub const STRANGER_INVITE_REFUSED: u64 = 1 << 10;
    pub const INVITE_JOINED: u64 = 1 << 23;
    pub const INVITE_NOT_REPEATED: u64 = 1 << 24;
    pub const NOT_JOINED_DROPPED: u64 = 1 << 25;
    pub const HISTORY_DROPPED: u64 = 1 << 26;
    pub const POST_REISSUED: u64 = 1 << 27;
    pub const VERDICT_RESENT: u64 = 1 << 28;
    pub const BACK_PUSHED: u64 = 1 << 29;
    pub const UNSIGNED_REFUSED: u64 = 1 << 32;
    pub const VERDICT_IN_SESSION_ROOM: u64 = 1 << 35;
    pub const BOUND_BY_COMMAND: u64 = 1 << 36;
    pub const BINDING_KEPT: u64 = 1 << 37;
    pub const TYPING_STOPPED: u64 = 1 << 38;
    pub const GRANT_MADE: u64 = 1 << 39;
    pub const AUTO_ANSWERED: u64 = 1 << 40;
    pub const UNCOVERED_ASKED: u64 = 1 << 41;
    pub const QUORUM_MET: u64 = 1 << 42;
    pub const DENIED_BY_RULE: u64 = 1 << 43;
    pub const WITHDRAWN_REFUSED: u64 = 1 << 45;
    pub const REOPENED: u64 = 1 << 46;
    /// Not a witness: the step's agent write was refused.
    pub const WRITE_REFUSED: u64 = 1 << 31;
    /// Not a witness: the step left no trace, so its state is the last one but for
    /// these bits, and has the same successors (the checker need not expand it).
    pub const NO_TRACE: u64 = 1 << 30;
}

impl World {
    /// The pinned world of `scope`, no fault.
    pub fn new(scope: Scope) -> Self {
        Self {
            scope,
            bounds: Bounds::pinned(scope),
            room_bounds: RoomBounds::pinned(scope),
            fault: None,
            focus: None,
        }
    }

    /// The pinned world of `scope` with `fault` switched on. A fault of the world
    /// before the agent's writes and the operator's new settings is searched for
    /// without them: its counterexample needs neither, and the depth-first search
    /// finds it as fast as before they came.
    pub fn with_fault(scope: Scope, fault: Fault) -> Self {
        let mut world = Self {
            fault: Some(fault),
            ..Self::new(scope)
        };
        if !fault.needs_agent_or_settings() {
            world.bounds.agent = 0;
            world.bounds.reconfigs = 0;
        }
        world
    }

    fn has(&self, fault: Fault) -> bool {
        self.fault == Some(fault)
    }

    /// The operator's first settings for `ident` in this world (faults included).
    pub fn config(&self, ident: Ident) -> IdentityConfig {
        self.settings(ident, false)
    }

    /// The operator's settings for `ident`: the first ones, or (`swapped`) A's second
    /// ones, where Carl approves instead of Ann (faults included).
    pub fn settings(&self, ident: Ident, swapped: bool) -> IdentityConfig {
        let ann = Who::Ann.user(ident);
        let mut config = match ident {
            Ident::A => {
                let carl = Who::Carl.user(ident);
                let mut c = IdentityConfig::new(ident.bot(), [ann.clone(), carl.clone()]);
                c.approvers = Some([if swapped { carl } else { ann }].into());
                c
            }
            Ident::B => {
                let mut c = IdentityConfig::new(ident.bot(), [ann]);
                c.permission_room = Some(ident.room(0));
                c
            }
        };
        config.prompt_ttl_ms = TTL;
        config.settle_ms = SETTLE;
        config.max_prompts = CAP;
        config.typing_cap_ms = TYPING_CAP;
        // A session is live the instant it attaches: a grace would spend one of the
        // few steps of each run on a tick. The grace is covered by the scenarios
        // (`scenarios/attach_grace.rs`) and the adversarial sequences.
        config.attach_grace_ms = 0;
        if ident == Ident::A && self.scope == Scope::Policy {
            let carl = Who::Carl.user(ident);
            config
                .approvers
                .get_or_insert_with(BTreeSet::new)
                .insert(carl);
            config.policy = vec![
                Rule {
                    tool: Pattern("Bash".to_owned()),
                    input: Some(Pattern(format!("*{PUSH}*"))),
                    decision: RuleDecision::Ask { approvers: 2 },
                },
                Rule {
                    tool: Pattern("Bash".to_owned()),
                    input: Some(Pattern("*rm -rf*".to_owned())),
                    decision: RuleDecision::Deny,
                },
            ];
        }
        if ident == Ident::A {
            self.configure_faults(&mut config);
        }
        config
    }

    fn configure_faults(&self, config: &mut IdentityConfig) {
        let eve = Who::Eve.user(Ident::A);
        let carl = Who::Carl.user(Ident::A);
        let approvers = config.approvers.get_or_insert_with(BTreeSet::new);
        match self.fault {
            Some(Fault::StrangerAllowed) => {
                config.allowed_senders.insert(eve.clone());
                approvers.insert(eve);
            }
            Some(Fault::CarlApprover) => {
                approvers.insert(carl);
            }
            Some(Fault::LongTypingCap) => config.typing_cap_ms = 2 * TYPING_CAP,
            Some(Fault::CapThree) => config.max_prompts = CAP + 1,
            Some(Fault::ShortSettle) => config.settle_ms = 1,
            Some(Fault::LongTtl) => config.prompt_ttl_ms = TTL * 2,
            Some(Fault::QuorumOfOne) => {
                for rule in &mut config.policy {
                    if let RuleDecision::Ask { approvers } = &mut rule.decision {
                        *approvers = 1;
                    }
                }
            }
            Some(Fault::NoDenyRule) => config.policy.retain(|r| r.decision != RuleDecision::Deny),
            _ => {}
        }
    }

    /// The agent's write as the server hands it to the core (faults included); the
    /// server performs `write` itself if the core says so.
    fn asked(&self, mut write: AgentWrite) -> AgentWrite {
        match (&mut write, self.fault) {
            (AgentWrite::Message { thread_root, .. }, Some(Fault::AskWithoutThreadRoot)) => {
                *thread_root = None
            }
            (AgentWrite::Reaction { key, .. }, Some(Fault::EmptyReactionKey)) => key.clear(),
            (
                AgentWrite::Edit {
                    original_sender, ..
                },
                Some(Fault::WrongOriginalSender),
            ) => *original_sender = Who::Ann.user(Ident::A),
            _ => {}
        }
        write
    }

    /// What `who` is to `ident` under the settings the operator meant (no fault) and
    /// has in force in `s`.
    fn gate(&self, s: &State, ident: Ident, who: Who) -> Gate {
        World::new(self.scope)
            .settings(ident, s.swapped)
            .gate(&who.user(ident))
    }
}

// ----- inputs the world builds ---------------------------------------------------

fn body(text: Text) -> String {
    match text {
        Text::Chat => "hello".to_owned(),
        Text::Notice => "beep".to_owned(),
        Text::Yes(rid) => format!("yes {}", rid.id()),
        Text::No(rid) => format!("No {}", rid.id()),
        Text::Agent => "on it".to_owned(),
        Text::Bind => "bind web".to_owned(),
        Text::Always(rid) => format!("always {}", rid.id()),
        Text::AlwaysPrefix(rid) => format!("always {} {GRANT_PREFIX}", rid.id()),
        Text::YesFor(rid) => format!("yes {} 5s", rid.id()),
        Text::RevokeAll => "revoke all".to_owned(),
    }
}

impl State {
    fn fresh_event(&mut self) -> EventId {
        self.next_event += 1;
        EventId(format!("$e{:02}", self.next_event))
    }

    fn message_input(
        &self,
        ident: Ident,
        who: Who,
        room: RoomId,
        event_id: EventId,
        content: MessageContent,
    ) -> Input {
        Input::Message {
            identity: ident.id(),
            message: Message {
                room,
                event_id,
                sender: who.user(ident),
                sender_name: Some(if who == Who::Eve { "Ann" } else { "someone" }.to_owned()),
                origin_server_ts: self.now,
                content: Some(content),
                device: mc_model::DeviceTrust::PlaintextRoom,
            },
        }
    }

    fn live(&self, sess: Sess) -> bool {
        self.attached.contains(&sess)
    }

    /// Whether A's room `room` is some label's room, as the world knows it.
    fn room_bound(&self, room: u8) -> bool {
        self.labels.contains(&WBinding::Room(room))
    }

    /// Whether the world knows `ident` joined its room `room`.
    fn joined(&self, ident: Ident, room: u8) -> bool {
        match ident {
            Ident::A => self.member[usize::from(room)] == WMember::Joined,
            Ident::B => true,
        }
    }

    /// Whether a join of A's room `room` is pending: in flight, or done and its
    /// membership event not come yet.
    fn join_pending(&self, room: u8) -> bool {
        self.member[usize::from(room)] == WMember::Accepted
            || self.joins.values().any(|r| *r == Some(room))
    }

    /// The index of `who`'s first chat message in A.
    fn first_chat(&self, who: Who) -> Option<usize> {
        self.messages.iter().position(|m| {
            m.ident == Ident::A && m.who == who && m.text == Text::Chat && m.edit_of.is_none()
        })
    }

    /// The index of the agent's latest message.
    fn last_agent_message(&self) -> Option<usize> {
        self.messages.iter().rposition(|m| m.text == Text::Agent)
    }

    /// The index of the agent's first message.
    fn first_agent_message(&self) -> Option<usize> {
        self.messages.iter().position(|m| m.text == Text::Agent)
    }
}

/// A `send_message` of one plain part.
fn agent_message(
    room: RoomId,
    text: String,
    reply_to: Option<EventId>,
    thread_root: Option<EventId>,
) -> AgentWrite {
    AgentWrite::Message {
        room,
        parts: vec![AgentText::plain(text)],
        reply_to,
        thread_root,
        txn_id: "t1".to_owned(),
    }
}

/// The input of `who`'s message `text` in `ident`'s room `room` (faults included).
fn say_input(
    world: &World,
    s: &State,
    ident: Ident,
    who: Who,
    room: u8,
    text: Text,
    event_id: EventId,
) -> Input {
    let msgtype = match (text, world.has(Fault::NoticeAsText)) {
        (Text::Notice, false) => MsgType::Notice,
        _ => MsgType::Text,
    };
    let mut body = body(text);
    if world.has(Fault::DisguiseVerdicts) {
        body = body.replacen(' ', "\u{200B} ", 1);
    }
    let routed = if world.has(Fault::MisrouteToA) {
        Ident::A
    } else {
        ident
    };
    let room = ident.room(room);
    s.message_input(routed, who, room, event_id, plain(msgtype, body, None))
}

/// The core as a server loads it from a state saved without one of each identity's
/// `#[serde(default)]` fields (`history`, `bindings`).
fn without(channel: &Channel, field: &str) -> Option<Channel> {
    let mut json = serde_json::to_value(channel).ok()?;
    for state in json.get_mut("identities")?.as_object_mut()?.values_mut() {
        state.as_object_mut()?.remove(field);
    }
    serde_json::from_value(json).ok()
}

fn plain(msgtype: MsgType, body: String, relation: Option<Relation>) -> MessageContent {
    MessageContent {
        msgtype,
        body,
        formatted_body: None,
        relation,
        attachment: None,
    }
}

// ----- the model -----------------------------------------------------------------

impl Model for World {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let mut channel = Channel::new();
        for ident in [Ident::A, Ident::B] {
            // The world's settings are valid by construction; a test checks each.
            channel
                .add_identity(ident.id(), self.config(ident))
                .expect("valid world config");
            // The server starts with the identity in its rooms (and, with the fault,
            // in one it is not in).
            let mut rooms = ident.rooms();
            if ident == Ident::A && self.has(Fault::StaleJoinedRoom) {
                rooms.push(ident.room(2));
            }
            for room in rooms {
                channel.handle(
                    START,
                    Input::Membership {
                        identity: ident.id(),
                        room,
                        event_id: None,
                        user: ident.bot(),
                        membership: Membership::Joined,
                    },
                );
            }
        }
        // Identity B's session is attached from the start: B only checks isolation.
        channel.handle(
            START,
            Input::Attach {
                identity: Ident::B.id(),
                session: Sess::S3.id(),
                label: None,
            },
        );
        let mut state = State {
            channel,
            now: START,
            next_event: 0,
            used: Bounds {
                events: 0,
                messages: 0,
                reactions: 0,
                redactions: 0,
                edits: 0,
                requests: 0,
                failures: 0,
                acks: 0,
                toggles: 0,
                early_ticks: 0,
                noise: 0,
                agent: 0,
                reconfigs: 0,
                steps: 0,
            },
            messages: Vec::new(),
            reactions: Vec::new(),
            prompts: Vec::new(),
            pushed: BTreeSet::new(),
            acked: BTreeSet::new(),
            held: BTreeMap::new(),
            last_allowed_room: None,
            attached: [Sess::S3].into(),
            push_failure_armed: false,
            swapped: false,
            used_rooms: RoomBounds::default(),
            member: [
                WMember::Joined,
                WMember::Joined,
                WMember::Out,
                WMember::Out,
                WMember::Out,
            ],
            labels: [WBinding::Unused; 2],
            restarted: false,
            typing: BTreeSet::new(),
            worked_on: BTreeMap::new(),
            joins: BTreeMap::new(),
            posts: BTreeMap::new(),
            away: BTreeSet::new(),
            closed: BTreeSet::new(),
            resend: BTreeSet::new(),
            grants: Vec::new(),
            allowed_by: BTreeSet::new(),
            denied_by_one: false,
            bad: 0,
            seen: 0,
        };
        if self.scope == Scope::Prompts {
            for action in [
                Action::Attach(Sess::S1),
                Action::Say {
                    ident: Ident::A,
                    who: Who::Ann,
                    room: 0,
                    text: Text::Chat,
                },
                Action::AgentSays(AgentSay::Innocent),
            ] {
                // The prelude's actions are always enabled in the first states.
                state = self.next_state(&state, action).expect("prelude");
            }
            state.used = Bounds {
                events: 0,
                messages: 0,
                toggles: 0,
                agent: 0,
                steps: 0,
                ..state.used
            };
        }
        // Rooms and Policy start alike: S1 attached, Ann's first message in `!r1:a`,
        // and S1's `abcde` asked.
        if matches!(self.scope, Scope::Rooms | Scope::Policy) {
            for action in [
                Action::Attach(Sess::S1),
                Action::Say {
                    ident: Ident::A,
                    who: Who::Ann,
                    room: 0,
                    text: Text::Chat,
                },
                Action::Request(Sess::S1, Rid::R1),
            ] {
                // The prelude's actions are always enabled in the first states.
                state = self.next_state(&state, action).expect("prelude");
            }
            state.used = Bounds {
                events: 0,
                messages: 0,
                requests: 0,
                toggles: 0,
                steps: 0,
                ..state.used
            };
        }
        if self.scope == Scope::Grants {
            for action in [
                Action::Attach(Sess::S1),
                Action::Attach(Sess::S2),
                Action::Say {
                    ident: Ident::A,
                    who: Who::Ann,
                    room: 0,
                    text: Text::Chat,
                },
                Action::Request(Sess::S1, Rid::R1),
            ] {
                // The prelude's actions are always enabled in the first states.
                state = self.next_state(&state, action).expect("prelude");
            }
            state.used = Bounds {
                events: 0,
                messages: 0,
                requests: 0,
                toggles: 0,
                steps: 0,
                ..state.used
            };
        }
        if self.scope == Scope::Sessions {
            for action in [Action::Attach(Sess::S1), Action::Attach(Sess::S2)] {
                // The prelude's actions are always enabled in the first states.
                state = self.next_state(&state, action).expect("prelude");
            }
            state.used = Bounds {
                toggles: 0,
                steps: 0,
                ..state.used
            };
        }
        vec![state]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let b = &self.bounds;
        let u = &s.used;
        if u.steps >= b.steps || s.seen & seen::NO_TRACE != 0 {
            return;
        }
        let room_for_events = u.events < b.events;
        // The newest actions first: the depth-first fault searches take the last
        // actions first, so the older faults are found along their old paths.
        let (rb, ru) = (&self.room_bounds, &s.used_rooms);
        if ru.restarts < rb.restarts {
            actions.push(Action::Restart);
        }
        if ru.redeliveries < rb.redeliveries {
            for (message, m) in s.messages.iter().enumerate() {
                if !m.input {
                    actions.push(Action::Redeliver { message });
                }
            }
        }
        if ru.invites < rb.invites {
            for who in [Who::Ann, Who::Eve] {
                actions.push(Action::Invite { who });
            }
        }
        if ru.memberships < rb.memberships {
            // A leaves `!r1:a` (where prompts go), and joins or is banned from `!r3:a`.
            if s.member[0] == WMember::Joined {
                actions.push(Action::Member {
                    room: 0,
                    own: Own::Left,
                });
            }
            let own = match s.member[2] {
                WMember::Joined => Own::Banned,
                WMember::Out | WMember::Accepted => Own::Joined,
            };
            actions.push(Action::Member { room: 2, own });
        }
        for &join in s.joins.keys() {
            actions.push(Action::CompleteJoin { join, ok: true });
            if u.failures < b.failures {
                actions.push(Action::CompleteJoin { join, ok: false });
            }
        }
        for &post in s.posts.keys() {
            actions.push(Action::CompletePost { post });
        }
        // The agent writes once A has posted a prompt: before, no rule can bite.
        let a_prompted = s.prompts.iter().any(|p| p.ident == Ident::A);
        if room_for_events && u.agent < b.agent && a_prompted {
            let touches = [
                Touch::Edit,
                Touch::Redact,
                Touch::React,
                Touch::Reply,
                Touch::Thread,
            ];
            // Each of A's prompts, in whatever phase (retired too).
            for (prompt, p) in s.prompts.iter().enumerate() {
                if p.ident == Ident::A {
                    for touch in touches {
                        let target = Target::Prompt(prompt);
                        actions.push(Action::AgentTouch { touch, target });
                    }
                }
            }
            if let Some(message) = s.first_chat(Who::Ann) {
                // Not an edit: Ann's message is not the agent's to edit.
                for &touch in &touches[1..] {
                    let target = Target::Message(message);
                    actions.push(Action::AgentTouch { touch, target });
                }
            }
            if let Some(message) = s.last_agent_message() {
                let target = Target::Message(message);
                actions.push(Action::AgentTouch {
                    touch: Touch::Edit,
                    target,
                });
            }
            for say in [
                AgentSay::Names(Rid::R1),
                AgentSay::NamesHidden(Rid::R1),
                AgentSay::KeyNames(Rid::R1),
            ] {
                actions.push(Action::AgentSays(say));
            }
        }
        let a_holds_prompts = s
            .channel
            .identity(&Ident::A.id())
            .is_some_and(|st| !st.prompts().is_empty());
        if u.reconfigs < b.reconfigs && a_holds_prompts {
            actions.push(Action::Reconfigure {
                swapped: !s.swapped,
            });
        }
        if u.toggles < b.toggles {
            let sessions: &[Sess] = match self.scope {
                Scope::Rooms | Scope::Grants | Scope::Policy => &[Sess::S1],
                Scope::Delivery | Scope::Prompts | Scope::Sessions => &[Sess::S1, Sess::S2],
            };
            for &sess in sessions {
                actions.push(if s.live(sess) {
                    Action::Detach(sess)
                } else {
                    Action::Attach(sess)
                });
            }
        }
        if room_for_events && u.requests < b.requests {
            for (sess, rid) in [
                (Sess::S1, Rid::R1),
                (Sess::S1, Rid::R2),
                (Sess::S2, Rid::R1),
                (Sess::S3, Rid::R1),
            ] {
                let in_scope = match self.scope {
                    Scope::Rooms => sess == Sess::S1,
                    Scope::Sessions => rid == Rid::R1 && sess != Sess::S3,
                    Scope::Grants => sess != Sess::S3 && (sess == Sess::S1 || rid == Rid::R1),
                    Scope::Policy => sess == Sess::S1,
                    Scope::Delivery | Scope::Prompts => true,
                };
                if s.live(sess) && in_scope {
                    actions.push(Action::Request(sess, rid));
                }
            }
        }
        if room_for_events && u.messages < b.messages {
            let says: &[(Ident, Who, u8, Text)] = match self.scope {
                Scope::Delivery => &[
                    (Ident::A, Who::Ann, 0, Text::Chat),
                    (Ident::A, Who::Carl, 1, Text::Chat),
                    (Ident::A, Who::Ann, 0, Text::Yes(Rid::R1)),
                    (Ident::B, Who::Ann, 0, Text::Chat),
                ],
                Scope::Prompts => &[
                    (Ident::A, Who::Carl, 1, Text::Chat),
                    (Ident::A, Who::Ann, 0, Text::Yes(Rid::R1)),
                    (Ident::A, Who::Ann, 0, Text::No(Rid::R2)),
                    (Ident::B, Who::Ann, 0, Text::Yes(Rid::R1)),
                ],
                Scope::Rooms => &[
                    (Ident::A, Who::Ann, 2, Text::Chat),
                    (Ident::A, Who::Ann, 0, Text::Yes(Rid::R1)),
                ],
                Scope::Sessions => &[
                    (Ident::A, Who::Ann, 3, Text::Chat),
                    (Ident::A, Who::Ann, 4, Text::Chat),
                    (Ident::A, Who::Ann, 0, Text::Chat),
                    (Ident::A, Who::Ann, 4, Text::Yes(Rid::R1)),
                    (Ident::A, Who::Ann, 0, Text::Bind),
                ],
                Scope::Grants => &[
                    (Ident::A, Who::Ann, 0, Text::Always(Rid::R1)),
                    (Ident::A, Who::Ann, 0, Text::AlwaysPrefix(Rid::R1)),
                    (Ident::A, Who::Ann, 0, Text::YesFor(Rid::R1)),
                    (Ident::A, Who::Ann, 0, Text::RevokeAll),
                    (Ident::A, Who::Carl, 0, Text::Always(Rid::R1)),
                ],
                Scope::Policy => &[
                    (Ident::A, Who::Ann, 0, Text::Yes(Rid::R1)),
                    (Ident::A, Who::Carl, 0, Text::Yes(Rid::R1)),
                    (Ident::A, Who::Carl, 0, Text::No(Rid::R1)),
                    (Ident::A, Who::Ann, 0, Text::Always(Rid::R1)),
                ],
            };
            for &(ident, who, room, text) in says {
                actions.push(Action::Say {
                    ident,
                    who,
                    room,
                    text,
                });
            }
            if matches!(self.scope, Scope::Delivery | Scope::Prompts) {
                for prompt in 0..s.prompts.len() {
                    actions.push(Action::ReplyYes { prompt });
                }
            }
        }
        if u.noise < b.noise {
            // Part of the agent's alphabet: a world without agent writes has none.
            if b.agent > 0 && s.first_agent_message().is_some() {
                actions.push(Action::Noise(Noise::AnnYesToAgent));
            }
            for noise in [
                Noise::EveChat,
                Noise::EveYes,
                Noise::BotChat,
                Noise::CarlNotice,
                Noise::CarlYes,
            ] {
                actions.push(Action::Noise(noise));
            }
            if self.scope == Scope::Prompts {
                actions.push(Action::Noise(Noise::AnnUnsignedYes));
            }
            for (prompt, p) in s.prompts.iter().enumerate() {
                if p.ident == Ident::A {
                    actions.push(Action::Noise(Noise::CarlUp(prompt)));
                    actions.push(Action::Noise(Noise::EveUp(prompt)));
                    if self.scope == Scope::Prompts {
                        actions.push(Action::Noise(Noise::AnnUnsignedUp(prompt)));
                    }
                }
            }
        }
        if room_for_events && u.reactions < b.reactions {
            for prompt in 0..s.prompts.len() {
                for key in [Key::Up, Key::Down] {
                    actions.push(Action::ReactPrompt {
                        who: Who::Ann,
                        prompt,
                        key,
                    });
                }
            }
            if let Some(message) = s
                .messages
                .iter()
                .position(|m| m.text == Text::Chat && m.edit_of.is_none())
            {
                actions.push(Action::ReactMessage { message });
            }
        }
        if room_for_events && u.redactions < b.redactions {
            for (reaction, r) in s.reactions.iter().enumerate().filter(|(_, r)| !r.redacted) {
                actions.push(Action::RedactReaction {
                    reaction,
                    who: r.who,
                });
                actions.push(Action::CarlRedacts { reaction });
            }
            for (message, _) in s
                .messages
                .iter()
                .enumerate()
                .filter(|(_, m)| !m.redacted && m.text == Text::Chat)
            {
                actions.push(Action::RedactMessage { message });
            }
        }
        if room_for_events && u.edits < b.edits {
            for (message, m) in s.messages.iter().enumerate() {
                if m.ident == Ident::A && m.text == Text::Chat && m.edit_of.is_none() {
                    for who in [Who::Ann, Who::Carl] {
                        actions.push(Action::Edit { who, message });
                    }
                }
            }
        }
        let s1_known = s
            .channel
            .identity(&Ident::A.id())
            .is_some_and(|st| st.sessions().contains_key(&Sess::S1.id()));
        if room_for_events && u.acks < b.acks && s1_known {
            for (message, m) in s.messages.iter().enumerate() {
                if m.text == Text::Chat && m.ident == Ident::A {
                    actions.push(Action::Ack(Sess::S1, message));
                }
            }
        }
        for (&send, _) in s.held.iter() {
            actions.push(Action::CompleteVerdict { send, ok: true });
            if u.failures < b.failures {
                actions.push(Action::CompleteVerdict { send, ok: false });
            }
        }
        if self.scope == Scope::Delivery && u.failures < b.failures && !s.push_failure_armed {
            actions.push(Action::ArmPushFailure);
        }
        if let Some(deadline) = s.channel.next_deadline() {
            actions.push(Action::Tick);
            if self.scope != Scope::Grants
                && u.early_ticks < b.early_ticks
                && deadline > s.now.saturating_add(1)
            {
                actions.push(Action::TickBefore);
            }
        }
        if self.scope == Scope::Grants && u.early_ticks < b.early_ticks && !s.grants.is_empty() {
            actions.push(Action::Later);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        s.seen = 0;
        s.used.steps += 1;
        let mut step = Step::default();
        let mut inputs: VecDeque<(Option<Ident>, Input)> = VecDeque::new();
        // The write the server performs if the core says so.
        let mut agent: Option<AgentWrite> = None;
        match action {
            Action::Attach(sess) => {
                s.used.toggles += 1;
                s.attached.insert(sess);
                s.closed.remove(&sess);
                if s.away.remove(&sess) {
                    step.back = Some(sess);
                }
                let label = sess.label(self.scope);
                if let (Some(_), Some(index)) = (&label, sess.label_index()) {
                    if s.labels[index] == WBinding::Unused {
                        s.labels[index] = WBinding::Creating;
                    }
                }
                inputs.push_back((
                    Some(sess.ident()),
                    Input::Attach {
                        identity: sess.ident().id(),
                        session: sess.id(),
                        label,
                    },
                ));
            }
            Action::Detach(sess) => {
                s.used.toggles += 1;
                s.attached.remove(&sess);
                s.closed.insert(sess);
                // Its grants end with its stream.
                for grant in s.grants.iter_mut().filter(|g| g.sess == sess) {
                    grant.live = false;
                }
                if !self.has(Fault::SilentDetach) {
                    inputs.push_back((
                        Some(sess.ident()),
                        Input::Detach {
                            identity: sess.ident().id(),
                            session: sess.id(),
                        },
                    ));
                }
            }
            Action::Request(sess, rid) => {
                step.asker = Some(sess);
                s.used.requests += 1;
                s.used.events += 1;
                let command = match (self.scope, rid) {
                    (Scope::Grants, Rid::R1) => GRANT_PREFIX,
                    (Scope::Grants, Rid::R2) if self.has(Fault::CutChainedPreview) => {
                        CHAINED.split(" &&").next().unwrap_or(CHAINED)
                    }
                    (Scope::Grants, Rid::R2) => CHAINED,
                    (Scope::Policy, Rid::R1) => PUSH,
                    (Scope::Policy, Rid::R2) => REMOVE,
                    _ => "ls",
                };
                let request = PermissionRequest {
                    request_id: rid.id(),
                    tool_name: "Bash".to_owned(),
                    description: "list files".to_owned(),
                    input_preview: serde_json::json!({ "command": command }).to_string(),
                };
                if self.has(Fault::DetachBeforeRequest) {
                    for input in [
                        Input::Detach {
                            identity: sess.ident().id(),
                            session: sess.id(),
                        },
                        Input::Attach {
                            identity: sess.ident().id(),
                            session: sess.id(),
                            label: sess.label(self.scope),
                        },
                    ] {
                        inputs.push_back((Some(sess.ident()), input));
                    }
                }
                inputs.push_back((
                    Some(sess.ident()),
                    Input::PermissionRequest {
                        identity: sess.ident().id(),
                        session: sess.id(),
                        request,
                    },
                ));
            }
            Action::Say {
                ident,
                who,
                room,
                text,
            } => {
                s.used.messages += 1;
                s.used.events += 1;
                let event_id = s.fresh_event();
                let input = s.joined(ident, room);
                s.messages.push(WMessage {
                    ident,
                    event_id: event_id.clone(),
                    who,
                    text,
                    edit_of: None,
                    redacted: false,
                    room,
                    input,
                    again: false,
                });
                let allowed = matches!(self.gate(&s, ident, who), Gate::Allowed | Gate::Approver);
                if ident == Ident::A
                    && input
                    && allowed
                    && text != Text::Notice
                    && !s.room_bound(room)
                {
                    s.last_allowed_room = Some(ident.room(room));
                }
                step.said = Some((who, text, event_id.clone()));
                if ident == Ident::A
                    && input
                    && text == Text::RevokeAll
                    && self.gate(&s, ident, who) == Gate::Approver
                {
                    for grant in s.grants.iter_mut() {
                        grant.live = false;
                    }
                }
                if ident == Ident::A && input && text == Text::Bind && who == Who::Ann {
                    // Ann's `bind web`: the room is web's, taken from the label it had.
                    for binding in s.labels.iter_mut() {
                        if *binding == WBinding::Room(room) {
                            *binding = WBinding::Unbound;
                        }
                    }
                    s.labels[0] = WBinding::Room(room);
                }
                let mut input = say_input(self, &s, ident, who, room, text, event_id);
                if let (true, Who::Carl, Input::Message { message, .. }) =
                    (self.has(Fault::CarlAsAnn), who, &mut input)
                {
                    message.sender = Who::Ann.user(ident);
                }
                if let (true, Text::Yes(_), 4, Input::Message { message, .. }) =
                    (self.has(Fault::ForgeVerdictRoom), text, room, &mut input)
                {
                    message.room = ident.room(3);
                }
                inputs.push_back((Some(ident), input));
            }
            Action::ReplyYes { prompt } => {
                s.used.messages += 1;
                s.used.events += 1;
                let p = s.prompts[prompt].clone();
                let event_id = s.fresh_event();
                let input = s.joined(p.ident, 0);
                s.messages.push(WMessage {
                    ident: p.ident,
                    event_id: event_id.clone(),
                    who: Who::Ann,
                    text: Text::Yes(p.rid),
                    edit_of: None,
                    redacted: false,
                    room: 0,
                    input,
                    again: false,
                });
                let reply = Relation::Reply {
                    in_reply_to: ReplyTo {
                        event_id: p.message.clone(),
                        parent: Some(Parent {
                            sender: p.ident.bot(),
                            body: "prompt".to_owned(),
                            has_reply_relation: false,
                        }),
                    },
                };
                let mut body =
                    format!("> <{}> prompt\n\n{}", p.ident.bot(), body(Text::Yes(p.rid)));
                let mut reply = Some(reply);
                if self.has(Fault::LoseReplyRelations) {
                    (reply, body) = (None, body.lines().last().unwrap_or_default().to_owned());
                }
                let room = p.ident.room(0);
                if p.ident == Ident::A && input {
                    s.last_allowed_room = Some(room.clone());
                }
                let input = s.message_input(
                    p.ident,
                    Who::Ann,
                    room,
                    event_id,
                    plain(MsgType::Text, body, reply),
                );
                inputs.push_back((Some(p.ident), input));
            }
            Action::ReactPrompt { who, prompt, key } => {
                let target = s.prompts[prompt].message.clone();
                let ident = s.prompts[prompt].ident;
                react(self, &mut s, ident, who, target, key, &mut inputs);
            }
            Action::ReactMessage { message } => {
                let target = s.messages[message].event_id.clone();
                let ident = s.messages[message].ident;
                react(self, &mut s, ident, Who::Ann, target, Key::Up, &mut inputs);
            }
            Action::RedactReaction { reaction, who } => {
                s.used.redactions += 1;
                s.used.events += 1;
                let (target, ident) = (
                    s.reactions[reaction].event_id.clone(),
                    s.reactions[reaction].ident,
                );
                if s.reactions[reaction].who == who {
                    s.reactions[reaction].redacted = true;
                }
                if !self.has(Fault::LoseRedactions) {
                    let input = redaction_input(&mut s, ident, who, target);
                    inputs.push_back((Some(ident), input));
                }
            }
            Action::RedactMessage { message } => {
                s.used.redactions += 1;
                s.used.events += 1;
                s.messages[message].redacted = true;
                let (target, ident) = (
                    s.messages[message].event_id.clone(),
                    s.messages[message].ident,
                );
                let input = redaction_input(&mut s, ident, Who::Ann, target);
                inputs.push_back((Some(ident), input));
            }
            Action::Edit { who, message } => {
                s.used.edits += 1;
                s.used.events += 1;
                let original = s.messages[message].clone();
                let event_id = s.fresh_event();
                let input = s.joined(original.ident, 0);
                s.messages.push(WMessage {
                    ident: original.ident,
                    event_id: event_id.clone(),
                    who,
                    text: Text::Chat,
                    edit_of: Some(message),
                    redacted: false,
                    room: 0,
                    input,
                    again: false,
                });
                let relation = Relation::Replacement {
                    original: original.event_id.clone(),
                    new_content: Some(NewContent {
                        msgtype: MsgType::Text,
                        body: "hello again".to_owned(),
                    }),
                };
                if original.ident == Ident::A
                    && input
                    && matches!(self.gate(&s, Ident::A, who), Gate::Allowed | Gate::Approver)
                {
                    s.last_allowed_room = Some(original.ident.room(0));
                }
                let sender = if self.has(Fault::ForgeEditSender) {
                    original.who
                } else {
                    who
                };
                let content = plain(MsgType::Text, "* hello again".to_owned(), Some(relation));
                let input = s.message_input(
                    original.ident,
                    sender,
                    original.ident.room(0),
                    event_id,
                    content,
                );
                inputs.push_back((Some(original.ident), input));
            }
            Action::Ack(sess, message) => {
                s.used.acks += 1;
                s.used.events += 1;
                let event_id = s.messages[message].event_id.clone();
                s.acked.insert(event_id.clone());
                if self.has(Fault::WidenOnAck) {
                    let mut widened = self.settings(Ident::A, s.swapped);
                    widened.allowed_senders.insert(Who::Eve.user(Ident::A));
                    s.channel.add_identity(Ident::A.id(), widened).ok()?;
                }
                if !self.has(Fault::DropAcks) {
                    inputs.push_back((
                        Some(sess.ident()),
                        Input::Acknowledge {
                            identity: sess.ident().id(),
                            session: Some(sess.id()),
                            event_id,
                        },
                    ));
                }
            }
            Action::Noise(noise) => {
                s.used.noise += 1;
                if matches!(
                    noise,
                    Noise::CarlYes | Noise::AnnYesToAgent | Noise::AnnUnsignedYes
                ) && s.joined(Ident::A, 0)
                {
                    s.last_allowed_room = Some(Ident::A.room(0));
                }
                let input = noise_input(self, &s, noise);
                inputs.push_back((Some(Ident::A), input));
            }
            Action::CarlRedacts { reaction } => {
                s.used.redactions += 1;
                s.used.events += 1;
                let (target, ident) = (
                    s.reactions[reaction].event_id.clone(),
                    s.reactions[reaction].ident,
                );
                let input = redaction_input(&mut s, ident, Who::Carl, target);
                inputs.push_back((Some(ident), input));
            }
            Action::CompleteVerdict { send, ok } => {
                let prompt = s.held.remove(&send)?;
                if !ok {
                    s.used.failures += 1;
                }
                let mut reported_ok = ok || self.has(Fault::MisreportFailedVerdicts);
                if ok {
                    let p = &mut s.prompts[prompt];
                    p.delivered += 1;
                    if p.delivered > 1 {
                        s.bad |= bad::VERDICT_TWICE;
                    }
                    s.seen |= seen::VERDICT_DELIVERED;
                    let on_s2 = p.session == Sess::S2;
                    if on_s2 {
                        s.seen |= seen::VERDICT_S2;
                    }
                    let (session, rid) = (p.session, p.rid);
                    if s.prompts[..prompt]
                        .iter()
                        .any(|q| q.session == session && q.rid == rid)
                    {
                        s.seen |= seen::REANSWERED;
                    }
                    if self.has(Fault::MisreportVerdicts) {
                        reported_ok = false;
                    }
                }
                let outcome = if reported_ok {
                    Outcome::Sent
                } else {
                    Outcome::Failed {
                        reason: "stream closed".to_owned(),
                    }
                };
                if !reported_ok {
                    let owner = s.prompts[prompt].session;
                    s.attached.remove(&owner);
                }
                let stale = !s.channel.identities().any(|(_, st)| {
                    st.prompts().iter().any(
                        |p| matches!(p.phase, Phase::Delivering { send: id, .. } if id == send),
                    )
                });
                if stale {
                    s.seen |= seen::STALE_SEND;
                }
                inputs.push_back((None, Input::Completed { id: send, outcome }));
            }
            Action::ArmPushFailure => {
                s.used.failures += 1;
                s.push_failure_armed = true;
            }
            Action::AgentTouch { touch, target } => {
                s.used.agent += 1;
                s.used.events += 1;
                let (event_id, sender, room) = match target {
                    Target::Prompt(i) => {
                        let p = &s.prompts[i];
                        (p.message.clone(), p.ident.bot(), p.room.clone())
                    }
                    Target::Message(i) => {
                        let m = &s.messages[i];
                        (m.event_id.clone(), m.who.user(m.ident), m.ident.room(0))
                    }
                };
                agent = Some(match touch {
                    Touch::Edit => AgentWrite::Edit {
                        room,
                        original: event_id,
                        original_sender: sender,
                        text: AgentText::plain("fixed"),
                    },
                    Touch::Redact => AgentWrite::Redaction {
                        room,
                        redacts: event_id,
                        reason: None,
                    },
                    Touch::React => AgentWrite::Reaction {
                        room,
                        relates_to: event_id,
                        key: "👀".to_owned(),
                    },
                    Touch::Reply => agent_message(room, "noted".to_owned(), Some(event_id), None),
                    Touch::Thread => agent_message(room, "noted".to_owned(), None, Some(event_id)),
                });
            }
            Action::AgentSays(say) => {
                s.used.agent += 1;
                s.used.events += 1;
                let room = Ident::A.room(0);
                agent = Some(match say {
                    AgentSay::Names(rid) => {
                        agent_message(room, format!("see {}", rid.id()), None, None)
                    }
                    AgentSay::NamesHidden(rid) => {
                        let id = rid.id();
                        let (head, tail) = id.as_str().split_at(1);
                        agent_message(room, format!("see {head}\u{200B}{tail}"), None, None)
                    }
                    AgentSay::Innocent => agent_message(room, body(Text::Agent), None, None),
                    AgentSay::KeyNames(rid) => AgentWrite::Reaction {
                        room,
                        relates_to: s.messages[s.first_chat(Who::Ann)?].event_id.clone(),
                        key: rid.id().as_str().to_owned(),
                    },
                });
            }
            Action::Reconfigure { swapped } => {
                s.used.reconfigs += 1;
                s.swapped = swapped;
                if !self.has(Fault::StaleApprovers) {
                    // A restart with new settings: the identity's state is kept.
                    s.channel
                        .add_identity(Ident::A.id(), self.settings(Ident::A, swapped))
                        .ok()?;
                }
            }
            Action::Invite { who } => {
                s.used_rooms.invites += 1;
                let a = Ident::A;
                let inviter = match self.fault {
                    Some(Fault::InviterByDisplayName) if who == Who::Eve => Who::Ann,
                    Some(Fault::InviterIsInvitee) => Who::Bot,
                    _ => who,
                };
                step.invite = Some((who, s.joined(a, 2) || s.join_pending(2)));
                let event_id = EventId(format!("$m-invite-{}", who.name()));
                inputs.push_back((
                    Some(a),
                    Input::Membership {
                        identity: a.id(),
                        room: a.room(2),
                        event_id: Some(event_id),
                        user: a.bot(),
                        membership: Membership::Invited {
                            by: inviter.user(a),
                        },
                    },
                ));
            }
            Action::Member { room, own } => {
                s.used_rooms.memberships += 1;
                let a = Ident::A;
                // Whatever became of a join in flight, this event settles it.
                for r in s.joins.values_mut().filter(|r| **r == Some(room)) {
                    *r = None;
                }
                s.member[usize::from(room)] = match own {
                    Own::Joined => WMember::Joined,
                    Own::Left | Own::Banned => WMember::Out,
                };
                if own != Own::Joined && s.last_allowed_room == Some(a.room(room)) {
                    // A prompt posted there could not be seen nor answered.
                    s.last_allowed_room = None;
                }
                let event_id = EventId(format!("$m-{own:?}-{room}").to_lowercase());
                inputs.push_back((
                    Some(a),
                    Input::Membership {
                        identity: a.id(),
                        room: a.room(room),
                        event_id: Some(event_id),
                        user: a.bot(),
                        membership: own.membership(),
                    },
                ));
            }
            Action::CompleteJoin { join, ok } => {
                let room = s.joins.remove(&join)?;
                if !ok {
                    s.used.failures += 1;
                }
                if let (true, Some(room)) = (ok, room) {
                    s.member[usize::from(room)] = WMember::Accepted;
                    s.seen |= seen::INVITE_JOINED;
                }
                let outcome = if ok && !self.has(Fault::MisreportJoins) {
                    Outcome::Sent
                } else {
                    Outcome::Failed {
                        reason: "forbidden".to_owned(),
                    }
                };
                inputs.push_back((None, Input::Completed { id: join, outcome }));
            }
            Action::CompletePost { post } => {
                let p = s.posts.remove(&post)?;
                posted(&mut s, post, p, &mut inputs);
            }
            Action::Redeliver { message } => {
                s.used_rooms.redeliveries += 1;
                let m = s.messages[message].clone();
                if s.joined(m.ident, m.room) {
                    s.messages[message].again = true;
                }
                let input = say_input(self, &s, m.ident, m.who, m.room, m.text, m.event_id);
                inputs.push_back((Some(m.ident), input));
            }
            Action::Restart => {
                s.used_rooms.restarts += 1;
                // The old process's streams are gone, and so is every send it had in
                // flight: a verdict send is taken as lost (it is due again), a join
                // failed, a post is issued again by the core.
                s.away.extend(std::mem::take(&mut s.attached));
                s.resend.extend(std::mem::take(&mut s.held).into_values());
                s.joins.clear();
                s.restarted = true;
                if self.has(Fault::ForgetHistoryAtRestart) {
                    s.channel = without(&s.channel, "history")?;
                }
                if self.has(Fault::LoseBindingsAtRestart) {
                    s.channel = without(&s.channel, "bindings")?;
                }
                let posts: BTreeSet<EffectId> = s.posts.keys().copied().collect();
                if self.has(Fault::FailPostsAtRestart) {
                    for &id in &posts {
                        s.posts.remove(&id);
                        let outcome = Outcome::Failed {
                            reason: "the server restarted".to_owned(),
                        };
                        inputs.push_back((None, Input::Completed { id, outcome }));
                    }
                }
                if self.has(Fault::VerdictsSentAtRestart) {
                    for send in last.held.keys() {
                        let outcome = Outcome::Sent;
                        inputs.push_back((None, Input::Completed { id: *send, outcome }));
                    }
                }
                if !self.has(Fault::SilentRestart) {
                    inputs.push_back((None, Input::Restarted));
                }
                step.restart_posts = Some(posts);
            }
            Action::Later => {
                s.used.early_ticks += 1;
                s.now = s.now.saturating_add(LATER);
                inputs.push_back((None, Input::Tick));
            }
            Action::Tick | Action::TickBefore => {
                let deadline = s.channel.next_deadline()?;
                if action == Action::TickBefore {
                    s.used.early_ticks += 1;
                    s.now = Timestamp(deadline.0 - 1);
                } else {
                    s.now = deadline;
                }
                inputs.push_back((None, Input::Tick));
            }
        }
        if let Some(write) = &agent {
            let input = Input::AgentWrite {
                identity: Ident::A.id(),
                call: CallId(1),
                write: self.asked(write.clone()),
            };
            inputs.push_back((Some(Ident::A), input));
        }
        while let Some((ident, input)) = inputs.pop_front() {
            let mut effects = s.channel.handle(s.now, input);
            if self.has(Fault::ReverseReplay) {
                effects.reverse();
            }
            monitor(
                self,
                &mut s,
                &mut step,
                ident,
                effects,
                &mut inputs,
                &mut agent,
            );
        }
        check_rooms(self, &action, &step, &mut s);
        check_grants(self, &action, &step, &mut s);
        check_withdrawal(last, &action, &step, &mut s);
        if self.scope == Scope::Policy {
            check_policy(self, &action, &step, &mut s);
        }
        // Typing shown past its cap: the core's timer should have stopped it.
        let past_cap = s.typing.iter().any(|room| {
            s.worked_on
                .get(room)
                .is_none_or(|since| since.saturating_add(TYPING_CAP) <= s.now)
        });
        if past_cap {
            s.bad |= bad::TYPING_PAST_CAP;
        }
        if agent_refused(&action, &s) && s.channel == last.channel {
            // A refused write changed nothing in Matrix or the core: it leaves no
            // trace but what the monitor found, and what follows it is what follows
            // the last state.
            s.used = last.used;
            s.seen |= seen::NO_TRACE;
        }
        check_settling(self, last, &mut s);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let all = properties();
        match self.focus {
            Some(name) => all.into_iter().filter(|p| p.name == name).collect(),
            None => all,
        }
    }
}

fn react(
    world: &World,
    s: &mut State,
    ident: Ident,
    who: Who,
    target: EventId,
    key: Key,
    inputs: &mut VecDeque<(Option<Ident>, Input)>,
) {
    s.used.reactions += 1;
    s.used.events += 1;
    let on_prompt = s.prompts.iter().any(|p| p.message == target);
    let event_id = s.fresh_event();
    s.reactions.push(WReaction {
        ident,
        event_id: event_id.clone(),
        who,
        target: target.clone(),
        key,
        created: s.now,
        redacted: false,
        vote: on_prompt && world.gate(s, ident, who) == Gate::Approver,
    });
    if world.has(Fault::LoseDenyReactions) && key == Key::Down {
        return;
    }
    let reaction = Reaction {
        room: ident.room(0),
        event_id,
        sender: who.user(ident),
        origin_server_ts: s.now,
        relates_to: target,
        key: key.raw().to_owned(),
        device: mc_model::DeviceTrust::PlaintextRoom,
    };
    inputs.push_back((
        Some(ident),
        Input::Reaction {
            identity: ident.id(),
            reaction,
        },
    ));
}

fn redaction_input(s: &mut State, ident: Ident, who: Who, redacts: EventId) -> Input {
    let event_id = s.fresh_event();
    Input::Redaction {
        identity: ident.id(),
        redaction: Redaction {
            room: ident.room(0),
            event_id,
            sender: who.user(ident),
            origin_server_ts: s.now,
            redacts,
        },
    }
}

/// The fixed-id input of a noise event. Ids start with `$n-` and name who and what,
/// so the monitor needs no record of them.
fn noise_input(world: &World, s: &State, noise: Noise) -> Input {
    let a = Ident::A;
    let (who, event_id, content_or_key) = match noise {
        Noise::EveChat => (
            Who::Eve,
            "$n-eve-chat".to_owned(),
            Ok((MsgType::Text, body(Text::Chat))),
        ),
        Noise::EveYes => (
            Who::Eve,
            "$n-eve-yes".to_owned(),
            Ok((MsgType::Text, body(Text::Yes(Rid::R1)))),
        ),
        Noise::BotChat => (
            Who::Bot,
            "$n-bot-chat".to_owned(),
            Ok((MsgType::Text, body(Text::Chat))),
        ),
        Noise::CarlNotice => {
            let msgtype = if world.has(Fault::NoticeAsText) {
                MsgType::Text
            } else {
                MsgType::Notice
            };
            (
                Who::Carl,
                "$n-carl-notice".to_owned(),
                Ok((msgtype, body(Text::Notice))),
            )
        }
        Noise::CarlYes => (
            Who::Carl,
            "$n-carl-yes".to_owned(),
            Ok((MsgType::Text, body(Text::Yes(Rid::R1)))),
        ),
        Noise::CarlUp(prompt) => (
            Who::Carl,
            format!("$n-carl-up-{}", s.prompts[prompt].message),
            Err(prompt),
        ),
        Noise::EveUp(prompt) => (
            Who::Eve,
            format!("$n-eve-up-{}", s.prompts[prompt].message),
            Err(prompt),
        ),
        Noise::AnnYesToAgent => return ann_yes_to_agent(world, s),
        Noise::AnnUnsignedYes => (
            Who::Ann,
            format!("{ANN_UNSIGNED}yes"),
            Ok((MsgType::Text, body(Text::Yes(Rid::R1)))),
        ),
        Noise::AnnUnsignedUp(prompt) => (
            Who::Ann,
            format!("{ANN_UNSIGNED}up-{}", s.prompts[prompt].message),
            Err(prompt),
        ),
    };
    // What the adapter says of the device: Ann's unsigned device, unless the fault
    // loses it (every event then reads as sent in a plaintext room).
    let device = if matches!(noise, Noise::AnnUnsignedYes | Noise::AnnUnsignedUp(_))
        && !world.has(Fault::LoseDeviceTrust)
    {
        mc_model::DeviceTrust::NotCrossSigned
    } else {
        mc_model::DeviceTrust::PlaintextRoom
    };
    match content_or_key {
        Ok((msgtype, text)) => {
            let room = a.room(if who == Who::Eve { 1 } else { 0 });
            let mut input =
                s.message_input(a, who, room, EventId(event_id), plain(msgtype, text, None));
            if let Input::Message { message, .. } = &mut input {
                message.device = device;
            }
            input
        }
        Err(prompt) => Input::Reaction {
            identity: a.id(),
            reaction: Reaction {
                room: a.room(0),
                event_id: EventId(event_id),
                sender: who.user(a),
                origin_server_ts: s.now,
                relates_to: s.prompts[prompt].message.clone(),
                key: Key::Up.raw().to_owned(),
                device,
            },
        },
    }
}

/// Ann's `yes abcde` as a Matrix reply to the agent's first message, without the
/// fallback quote (Matrix v1.13 dropped it).
fn ann_yes_to_agent(world: &World, s: &State) -> Input {
    let a = Ident::A;
    let parent = &s.messages[s.first_agent_message().expect("offered")];
    let reply = Relation::Reply {
        in_reply_to: ReplyTo {
            event_id: parent.event_id.clone(),
            parent: Some(Parent {
                sender: a.bot(),
                body: body(parent.text),
                has_reply_relation: false,
            }),
        },
    };
    let reply = (!world.has(Fault::LoseReplyRelations)).then_some(reply);
    let content = plain(MsgType::Text, body(Text::Yes(Rid::R1)), reply);
    let event_id = EventId(ANN_YES_TO_AGENT.to_owned());
    s.message_input(a, Who::Ann, a.room(0), event_id, content)
}

/// Compares each effect with the world's record, sets violation and witness bits,
/// and answers the effects that expect an outcome (pushes and posts at once,
/// verdict sends later by action).
fn monitor(
    world: &World,
    s: &mut State,
    step: &mut Step,
    ident: Option<Ident>,
    effects: Vec<Effect>,
    inputs: &mut VecDeque<(Option<Ident>, Input)>,
    agent: &mut Option<AgentWrite>,
) {
    let mut replayed_last: BTreeMap<Sess, EventId> = BTreeMap::new();
    let mut replayed_count = 0;
    for effect in effects {
        if let (Some(ident), Some(effect_ident)) = (ident, effect_identity(&effect)) {
            if effect_ident != ident.id() {
                s.bad |= bad::CROSS_IDENTITY;
            }
        }
        match effect {
            Effect::Push {
                id,
                identity,
                session,
                event_id,
                notification,
            } => {
                let Some(sess) = Sess::from_id(&session) else {
                    s.bad |= bad::CROSS_IDENTITY;
                    continue;
                };
                if sess.ident().id() != identity {
                    s.bad |= bad::CROSS_IDENTITY;
                }
                let replayed = notification.meta.get(MetaKey::Replayed) == Some("true");
                // An armed failure means the push did not arrive; a misreport means
                // it arrived and the server says otherwise.
                let arrived = !std::mem::take(&mut s.push_failure_armed);
                if s.away.contains(&sess) {
                    s.bad |= bad::PUSH_TO_AWAY;
                }
                if step.back == Some(sess) && arrived && event_id.is_some() {
                    s.seen |= seen::BACK_PUSHED;
                }
                if let (Some(event_id), true) = (&event_id, arrived) {
                    check_pushed_event(world, s, sess, event_id);
                    check_session_room(world, s, sess, event_id);
                    if replayed {
                        replayed_count += 1;
                        s.seen |= seen::REPLAYED;
                        if replayed_count > 1 {
                            s.seen |= seen::REPLAYED_TWO;
                        }
                        if s.acked.contains(event_id) {
                            s.bad |= bad::ACKED_REPLAYED;
                        }
                        let ordered = event_id.as_str().starts_with("$e");
                        if ordered && replayed_last.get(&sess).is_some_and(|prev| prev > event_id) {
                            s.bad |= bad::REPLAY_ORDER;
                        }
                        if ordered {
                            replayed_last.insert(sess, event_id.clone());
                        }
                    }
                    if !world.has(Fault::LosePushes) && !s.pushed.insert((sess, event_id.clone())) {
                        s.bad |= bad::PUSH_TWICE;
                    }
                    if s.pushed.iter().filter(|(_, e)| e == event_id).count() > 1 {
                        s.seen |= seen::TWO_SESSIONS;
                    }
                }
                let outcome = if !arrived || world.has(Fault::MisreportPushes) {
                    s.attached.remove(&sess);
                    Outcome::Failed {
                        reason: "stream closed".to_owned(),
                    }
                } else {
                    Outcome::Sent
                };
                inputs.push_back((None, Input::Completed { id, outcome }));
            }
            Effect::PostPrompt {
                id, identity, room, ..
            } => {
                step.prompted = true;
                let ident = if identity == Ident::A.id() {
                    Ident::A
                } else {
                    Ident::B
                };
                if let Some(post) = s.posts.get(&id) {
                    // Issued again at a restart: the same post, to the same room.
                    step.reissued.insert(id);
                    if post.room != room {
                        s.bad |= bad::POST_NOT_REISSUED;
                    }
                    continue;
                }
                let label = step
                    .asker
                    .filter(|_| world.scope == Scope::Sessions)
                    .and_then(Sess::label_index);
                let expected = match (ident, label.map(|index| s.labels[index])) {
                    (Ident::A, Some(WBinding::Room(r))) => Some(Ident::A.room(r)),
                    (Ident::A, Some(WBinding::Creating | WBinding::Unused)) => None,
                    (Ident::A, Some(WBinding::Unbound) | None) => {
                        s.last_allowed_room.clone().filter(|room| {
                            !(3..5).any(|r| Ident::A.room(r) == *room && s.room_bound(r))
                        })
                    }
                    (Ident::B, _) => Some(Ident::B.room(0)),
                };
                if Some(&room) != expected.as_ref() {
                    s.bad |= bad::WRONG_ROOM;
                }
                if room == Ident::A.room(1) {
                    s.seen |= seen::POSTED_TO_R2;
                }
                let post = WPost {
                    ident,
                    room,
                    issued: s.now,
                };
                if world.scope == Scope::Rooms {
                    s.posts.insert(id, post);
                } else {
                    posted(s, id, post, inputs);
                }
            }
            Effect::SendVerdict {
                id,
                identity,
                session,
                verdict,
            } => {
                let owner = s.channel.identity(&identity).and_then(|st| {
                    st.prompts()
                        .iter()
                        .find(|p| matches!(p.phase, Phase::Delivering { send, .. } if send == id))
                        .cloned()
                });
                match owner {
                    // A grant's answer: no prompt message; its send completes at once.
                    Some(p)
                        if p.phase.is_auto()
                            && p.session == session
                            && p.request.request_id == verdict.request_id =>
                    {
                        inputs.push_back((
                            None,
                            Input::Completed {
                                id,
                                outcome: Outcome::Sent,
                            },
                        ));
                    }
                    Some(p)
                        if p.session == session && p.request.request_id == verdict.request_id =>
                    {
                        let message = p.phase.message().cloned();
                        if let Some(index) = s
                            .prompts
                            .iter()
                            .position(|w| Some(&w.message) == message.as_ref())
                        {
                            s.held.insert(id, index);
                            if s.resend.remove(&index) {
                                s.seen |= seen::VERDICT_RESENT;
                            }
                        }
                    }
                    _ => s.bad |= bad::VERDICT_MISROUTED,
                }
                if Sess::from_id(&session).is_some_and(|sess| s.away.contains(&sess)) {
                    s.bad |= bad::PUSH_TO_AWAY;
                }
                if world.has(Fault::VerdictToEverySession) {
                    let others: Vec<Sess> = s
                        .attached
                        .iter()
                        .copied()
                        .filter(|o| o.ident().id() == identity && o.id() != session)
                        .collect();
                    if !others.is_empty() {
                        s.bad |= bad::VERDICT_MISROUTED;
                    }
                }
            }
            Effect::Decided {
                identity,
                session,
                request_id,
                decision,
                at,
            } => {
                step.decided
                    .push((session.clone(), request_id.clone(), decision.via.clone()));
                step.behaviors.push(decision.behavior);
                let answered = matches!(
                    decision.via,
                    VerdictSource::Text { .. } | VerdictSource::Reaction { .. }
                );
                if answered && s.closed.iter().any(|sess| sess.id() == session) {
                    s.bad |= bad::WITHDRAWN_ANSWERED;
                }
                check_decision(world, s, &identity, &session, &request_id, &decision, at);
                if world.scope == Scope::Sessions {
                    check_verdict_room(s, &session, &request_id, &decision);
                }
            }
            Effect::EditPrompt { event_id, text, .. } if text.plain.starts_with("⏸ Withdrawn") => {
                // Its session disconnected: the request stays open, unanswerable.
                step.withdrawn.push(event_id);
            }
            Effect::EditPrompt { event_id, text, .. } if text.plain.starts_with("🔐") => {
                // Its session attached again: the prompt shows as asked.
                s.seen |= seen::REOPENED;
                step.reopened.push(event_id);
            }
            Effect::EditPrompt { event_id, text, .. } => {
                // The message now shows an outcome: its request is no longer open.
                let unanswered = text.plain.starts_with('⌛');
                for p in s.prompts.iter_mut().filter(|p| p.message == event_id) {
                    p.open = false;
                    p.unanswered = unanswered;
                }
                if text.plain.starts_with("⌛ Expired") {
                    s.seen |= seen::EXPIRED;
                } else if text.plain.starts_with('⌛') {
                    // Replaced or dropped at the cap: unanswered, shown as such.
                } else if !s
                    .prompts
                    .iter()
                    .any(|p| p.message == event_id && p.delivered > 0)
                {
                    s.bad |= bad::WRONG_RETIREMENT;
                }
            }
            Effect::Dropped {
                reason, event_id, ..
            } => match reason {
                DropReason::OwnEvent | DropReason::Notice => s.seen |= seen::OWN_DROPPED,
                DropReason::PromptEvicted => s.seen |= seen::EVICTED,
                DropReason::PromptWithdrawn => {
                    s.seen |= seen::WITHDRAWN_REFUSED;
                    step.withdrawn_refused = true;
                }
                DropReason::ReplyNotToPrompt
                    if event_id.as_ref().map(EventId::as_str) == Some(ANN_YES_TO_AGENT) =>
                {
                    s.seen |= seen::REPLY_REFUSED
                }
                DropReason::Stranger
                    if event_id.as_ref().map(EventId::as_str) == Some("$m-invite-eve") =>
                {
                    s.seen |= seen::STRANGER_INVITE_REFUSED
                }
                DropReason::AlreadyInvited => s.seen |= seen::INVITE_NOT_REPEATED,
                DropReason::NotCrossSigned => s.seen |= seen::UNSIGNED_REFUSED,
                DropReason::NotJoined => {
                    let history = s
                        .messages
                        .iter()
                        .find(|m| Some(&m.event_id) == event_id.as_ref());
                    match history {
                        Some(m) if m.again => s.seen |= seen::HISTORY_DROPPED,
                        Some(m) if !m.input => s.seen |= seen::NOT_JOINED_DROPPED,
                        _ => {}
                    }
                }
                _ => {}
            },
            Effect::CreateRoom { id, label, .. } => {
                let index = usize::from(label.as_str() == "api");
                // A label the world saw bound is bound still (it left no room).
                if matches!(s.labels[index], WBinding::Room(_) | WBinding::Unbound) {
                    s.bad |= bad::BINDING_LOST;
                }
                let own = 3 + index as u8;
                s.labels[index] = WBinding::Room(own);
                s.member[usize::from(own)] = WMember::Joined;
                let given = if world.has(Fault::SwapCreatedRooms) {
                    7 - own
                } else {
                    own
                };
                let room = Ident::A.room(given);
                inputs.push_back((
                    None,
                    Input::Completed {
                        id,
                        outcome: Outcome::Created { room },
                    },
                ));
            }
            Effect::Typing { room, typing, .. } => {
                let on = s.typing.contains(&room);
                match (typing, on) {
                    (true, false) => {
                        let since = s.worked_on.get(&room).copied();
                        if since.is_none_or(|since| since.saturating_add(TYPING_CAP) <= s.now) {
                            s.bad |= bad::TYPING_PAST_CAP;
                        }
                        s.typing.insert(room);
                    }
                    (false, true) => {
                        s.typing.remove(&room);
                        s.seen |= seen::TYPING_STOPPED;
                    }
                    _ => {}
                }
            }
            Effect::Granted { grant, .. } => step.granted.push(grant),
            Effect::Notice { .. }
            | Effect::Announce { .. }
            | Effect::LogMessage { .. }
            | Effect::Acknowledged { .. }
            | Effect::GrantEnded { .. }
            | Effect::Bound { .. } => {}
            // Held until an action completes it.
            Effect::JoinRoom { id, room, .. } => {
                step.joins += 1;
                let index = (0..3).find(|&i| Ident::A.room(i) == room);
                s.joins.insert(id, index);
            }
            Effect::Write { id, .. } => {
                if let Some(write) = agent.take() {
                    judge_agent_write(s, &write, true);
                }
                inputs.push_back((
                    None,
                    Input::Completed {
                        id,
                        outcome: Outcome::Sent,
                    },
                ));
            }
            Effect::WriteRefused { .. } => {
                if let Some(write) = agent.take() {
                    judge_agent_write(s, &write, false);
                }
            }
        }
    }
}

fn effect_identity(effect: &Effect) -> Option<IdentityId> {
    match effect {
        Effect::Push { identity, .. }
        | Effect::PostPrompt { identity, .. }
        | Effect::SendVerdict { identity, .. }
        | Effect::EditPrompt { identity, .. }
        | Effect::Notice { identity, .. }
        | Effect::Announce { identity, .. }
        | Effect::JoinRoom { identity, .. }
        | Effect::CreateRoom { identity, .. }
        | Effect::Bound { identity, .. }
        | Effect::Typing { identity, .. }
        | Effect::Write { identity, .. }
        | Effect::WriteRefused { identity, .. }
        | Effect::LogMessage { identity, .. }
        | Effect::Decided { identity, .. }
        | Effect::Acknowledged { identity, .. }
        | Effect::Granted { identity, .. }
        | Effect::GrantEnded { identity, .. } => Some(identity.clone()),
        Effect::Dropped { identity, .. } => identity.clone(),
    }
}

/// The violation of a message of a room the identity had not joined when it first
/// arrived, taken as input: on its first delivery, or delivered again after the join.
fn history_bit(m: &WMessage) -> u64 {
    if m.again {
        bad::HISTORY_INPUT
    } else {
        bad::NOT_JOINED_INPUT
    }
}

/// What one step did that the checks after it need.
#[derive(Default)]
struct Step {
    /// The session whose permission request the step sent.
    asker: Option<Sess>,
    /// `JoinRoom` effects.
    joins: u8,
    /// The step's invite: by whom, and whether A was then joined or joining.
    invite: Option<(Who, bool)>,
    /// At a restart, the prompt posts that were in flight.
    restart_posts: Option<BTreeSet<EffectId>>,
    /// Prompt posts the core issued again.
    reissued: BTreeSet<EffectId>,
    /// A session that was live before a restart attached again.
    back: Option<Sess>,
    /// The step's message: who said what, with its event id.
    said: Option<(Who, Text, EventId)>,
    /// Grants the core made in the step.
    granted: Vec<mc_model::Grant>,
    /// Verdicts the core took in the step: the session, the request and how.
    decided: Vec<(SessionId, RequestId, VerdictSource)>,
    /// The same verdicts' behaviours, in the same order.
    behaviors: Vec<Behavior>,
    /// The step posted a prompt.
    prompted: bool,
    /// The step's answer was refused: its prompt is withdrawn.
    withdrawn_refused: bool,
    /// Prompt messages edited to show them withdrawn.
    withdrawn: Vec<EventId>,
    /// Prompt messages edited to show them asked again.
    reopened: Vec<EventId>,
}

/// A prompt post completed: the world records the prompt (if the core still holds
/// it: a prompt retired while being posted is not one) and answers with its event id.
fn posted(s: &mut State, id: EffectId, post: WPost, inputs: &mut VecDeque<(Option<Ident>, Input)>) {
    let owner = s.channel.identity(&post.ident.id()).and_then(|st| {
        st.prompts()
            .iter()
            .find(|p| p.phase == Phase::Posting { post: id })
            .map(|p| (p.session.clone(), p.request.request_id.clone()))
    });
    let message = s.fresh_event();
    if let Some((Some(session), Some(rid))) = owner.map(|(session, request_id)| {
        (
            Sess::from_id(&session),
            [Rid::R1, Rid::R2]
                .into_iter()
                .find(|r| r.id() == request_id),
        )
    }) {
        s.prompts.push(WPrompt {
            ident: post.ident,
            session,
            rid,
            message: message.clone(),
            room: post.room,
            issued: post.issued,
            delivered: 0,
            open: true,
            unanswered: false,
        });
    }
    inputs.push_back((
        None,
        Input::Completed {
            id,
            outcome: Outcome::Posted { event_id: message },
        },
    ));
}

/// After a step: the joins it caused against its invite, the prompt posts a restart
/// issued again against those in flight, the verdicts due when a session attaches,
/// and history in the queue.
fn check_rooms(world: &World, action: &Action, step: &Step, s: &mut State) {
    let allowed = |who: Who| matches!(world.gate(s, Ident::A, who), Gate::Allowed | Gate::Approver);
    let by_allowed = step.invite.is_some_and(|(who, _)| allowed(who));
    if step.joins > 0 && !by_allowed {
        s.bad |= bad::STRANGER_JOINED;
    }
    if let Some((_, in_or_joining)) = step.invite {
        if by_allowed && !in_or_joining && step.joins == 0 {
            s.bad |= bad::INVITE_NOT_JOINED;
        }
        if in_or_joining && step.joins > 0 {
            s.bad |= bad::JOINED_TWICE;
        }
    }
    if step.joins > 1 {
        s.bad |= bad::JOINED_TWICE;
    }
    if let Some(posts) = &step.restart_posts {
        if step.reissued != *posts {
            s.bad |= bad::POST_NOT_REISSUED;
        } else if !posts.is_empty() {
            s.seen |= seen::POST_REISSUED;
        }
    }
    if let Action::Attach(sess) = action {
        let due: Vec<usize> = s
            .resend
            .iter()
            .copied()
            .filter(|&p| s.prompts[p].session == *sess)
            .collect();
        for prompt in due {
            s.resend.remove(&prompt);
            if !s.prompts[prompt].unanswered {
                s.bad |= bad::VERDICT_NOT_RESENT;
            }
        }
    }
    let queued_history = s
        .channel
        .identities()
        .flat_map(|(_, st)| st.queue().iter())
        .filter_map(|q| s.messages.iter().find(|m| m.event_id == q.event_id))
        .filter(|m| !m.input)
        .fold(0, |bits, m| bits | history_bit(m));
    s.bad |= queued_history;
}

fn check_pushed_event(world: &World, s: &mut State, sess: Sess, event_id: &EventId) {
    let id = event_id.as_str();
    if id.starts_with("$n-") {
        if sess.ident() != Ident::A {
            s.bad |= bad::CROSS_IDENTITY;
        }
        if id.starts_with("$n-eve-") {
            s.bad |= bad::STRANGER_PUSHED;
        } else if id.ends_with("-yes") {
            s.bad |= bad::VERDICT_PUSHED;
        } else if id.starts_with("$n-bot-") || id.ends_with("-notice") {
            s.bad |= bad::OWN_OR_NOTICE_PUSHED;
        }
        return;
    }
    if let Some(m) = s.messages.iter().find(|m| m.event_id == *event_id) {
        if m.ident != sess.ident() {
            s.bad |= bad::CROSS_IDENTITY;
        }
        if m.ident == Ident::B {
            s.seen |= seen::B_PUSHED;
        }
        if !m.input {
            s.bad |= history_bit(m);
        }
        match m.text {
            // A verdict or an approver's room command is never chat.
            Text::Yes(_)
            | Text::No(_)
            | Text::Bind
            | Text::Always(_)
            | Text::AlwaysPrefix(_)
            | Text::YesFor(_)
            | Text::RevokeAll => s.bad |= bad::VERDICT_PUSHED,
            Text::Notice => s.bad |= bad::OWN_OR_NOTICE_PUSHED,
            Text::Chat | Text::Agent => {}
        }
        match world.gate(s, m.ident, m.who) {
            Gate::Own => s.bad |= bad::OWN_OR_NOTICE_PUSHED,
            Gate::Stranger => s.bad |= bad::STRANGER_PUSHED,
            Gate::Allowed | Gate::Approver => s.seen |= seen::ALLOWED_PUSHED,
        }
        if let Some(original) = m.edit_of {
            s.seen |= seen::EDIT_PUSHED;
            if s.messages[original].who != m.who {
                s.bad |= bad::FOREIGN_EDIT;
            }
        }
    } else if let Some(r) = s.reactions.iter().find(|r| r.event_id == *event_id) {
        if world.gate(s, Ident::A, r.who) == Gate::Stranger {
            s.bad |= bad::STRANGER_PUSHED;
        }
    }
}

/// In [`Scope::Sessions`]: a message of A's is pushed only to the sessions of its
/// room as the world knows it (a labelled session: its label's room; a session of
/// an unbound label: the rooms bound to no label).
fn check_session_room(world: &World, s: &mut State, sess: Sess, event_id: &EventId) {
    if world.scope != Scope::Sessions || sess.ident() != Ident::A {
        return;
    }
    let Some(m) = s.messages.iter().find(|m| m.event_id == *event_id) else {
        return;
    };
    let room = m.room;
    let binding = sess.label_index().map(|index| s.labels[index]);
    let ok = match binding {
        Some(WBinding::Room(r)) => r == room,
        Some(WBinding::Creating | WBinding::Unused) => false,
        Some(WBinding::Unbound) | None => !s.room_bound(room),
    };
    if !ok {
        s.bad |= bad::OUT_OF_ROOM;
    } else if matches!(binding, Some(WBinding::Room(_))) {
        s.worked_on.insert(Ident::A.room(room), s.now);
        if room == 0 {
            s.seen |= seen::BOUND_BY_COMMAND;
        }
        if s.restarted {
            s.seen |= seen::BINDING_KEPT;
        }
    }
}

/// In [`Scope::Sessions`]: a text verdict answers only a prompt posted in the room
/// it was typed in.
fn check_verdict_room(
    s: &mut State,
    session: &SessionId,
    request_id: &RequestId,
    decision: &mc_model::Decision,
) {
    let VerdictSource::Text { event_id } = &decision.via else {
        return;
    };
    let Some(typed) = s
        .messages
        .iter()
        .find(|m| m.event_id == *event_id)
        .map(|m| m.room)
    else {
        return;
    };
    let prompt_room = s
        .prompts
        .iter()
        .rev()
        .find(|p| p.session.id() == *session && p.rid.id() == *request_id)
        .map(|p| p.room.clone());
    if prompt_room != Some(Ident::A.room(typed)) {
        s.bad |= bad::VERDICT_CROSS_ROOM;
    } else if (3..5).contains(&typed) {
        s.seen |= seen::VERDICT_IN_SESSION_ROOM;
    }
}

fn check_decision(
    world: &World,
    s: &mut State,
    identity: &IdentityId,
    session: &SessionId,
    request_id: &RequestId,
    decision: &mc_model::Decision,
    at: Timestamp,
) {
    let ident = if *identity == Ident::A.id() {
        Ident::A
    } else {
        Ident::B
    };
    if let VerdictSource::Policy { .. } = &decision.via {
        // Nobody was asked: judged against the rules after the step
        // (`check_policy`).
        return;
    }
    let by = [Who::Ann, Who::Carl, Who::Eve, Who::Bot]
        .into_iter()
        .find(|w| w.user(ident) == decision.by);
    match by.map(|w| world.gate(s, ident, w)) {
        Some(Gate::Approver) => {}
        Some(Gate::Allowed) => s.bad |= bad::NON_APPROVER_VERDICT,
        _ => s.bad |= bad::STRANGER_VERDICT,
    }
    if let VerdictSource::Grant { grant } = &decision.via {
        // Judged against the world's grants after the step (`check_grants`).
        let _ = grant;
        return;
    }
    let message = s
        .channel
        .identity(identity)
        .and_then(|st| {
            st.prompts().iter().find(|p| {
                p.session == *session
                    && p.request.request_id == *request_id
                    && !p.phase.is_answerable()
            })
        })
        .and_then(|p| p.phase.message().cloned());
    let Some(prompt) = s
        .prompts
        .iter()
        .find(|p| Some(&p.message) == message.as_ref())
        .cloned()
    else {
        s.bad |= bad::VERDICT_MISROUTED;
        return;
    };
    if at > prompt.issued.saturating_add(TTL) {
        s.bad |= bad::EXPIRED_ANSWERED;
    }
    match &decision.via {
        VerdictSource::Text { event_id } => {
            s.seen |= seen::TEXT_VERDICT;
            if let Some(m) = s.messages.iter().find(|m| m.event_id == *event_id) {
                if !m.input {
                    s.bad |= history_bit(m);
                }
            }
            if event_id.as_str() == ANN_YES_TO_AGENT {
                s.bad |= bad::REPLY_ANSWERED;
            }
            if event_id.as_str().starts_with(ANN_UNSIGNED) {
                s.bad |= bad::UNSIGNED_VERDICT;
            }
        }
        VerdictSource::Reaction { event_id, .. } => {
            if event_id.as_str().starts_with(ANN_UNSIGNED) {
                s.bad |= bad::UNSIGNED_VERDICT;
            }
            s.seen |= seen::REACTION_VERDICT;
            if decision.behavior == Behavior::Deny {
                s.seen |= seen::DENY_BY_REACTION;
            }
            let votes: Vec<&WReaction> = s
                .reactions
                .iter()
                .filter(|r| {
                    r.target == prompt.message
                        && r.vote
                        && world.gate(s, ident, r.who) == Gate::Approver
                })
                .collect();
            if votes.iter().any(|r| r.event_id == *event_id && r.redacted) {
                s.bad |= bad::WITHDRAWN_COUNTED;
            }
            if decision.behavior == Behavior::Allow
                && votes.iter().any(|r| r.key == Key::Down && !r.redacted)
            {
                s.bad |= bad::DENY_LOST;
            }
            if votes
                .iter()
                .map(|r| r.created)
                .min()
                .is_some_and(|first| at < first + SETTLE)
            {
                s.bad |= bad::EARLY_VERDICT;
            }
        }
        VerdictSource::Grant { .. } | VerdictSource::Policy { .. } => {}
    }
}

/// After a step that closed a session's stream: each of its prompts that waited
/// for an answer before the step is shown withdrawn in the step. After a step that
/// attached a session: each of its withdrawn prompts is shown as asked again.
fn check_withdrawal(last: &State, action: &Action, step: &Step, s: &mut State) {
    let (sess, closing) = match action {
        Action::Detach(sess) => (*sess, true),
        Action::Attach(sess) => (*sess, false),
        _ => return,
    };
    let Some(before) = last.channel.identity(&sess.ident().id()) else {
        return;
    };
    let shown = if closing {
        &step.withdrawn
    } else {
        &step.reopened
    };
    let hidden = before
        .prompts()
        .iter()
        .filter(|p| p.session == sess.id())
        .filter(|p| match closing {
            true => p.phase.is_answerable(),
            false => matches!(p.phase, Phase::Withdrawn { .. }),
        })
        .filter_map(|p| p.phase.message())
        .any(|message| !shown.contains(message));
    if hidden {
        s.bad |= bad::WITHDRAWAL_HIDDEN;
    }
}

/// After a step of [`Scope::Policy`]: `abcde` (`git push`, rule 1) is allowed only
/// once two distinct approvers allowed it since it was last asked and none denied
/// it; `fghij` (`rm -rf x`, rule 2) is never allowed, and is denied by the rule in
/// the step that asks it, with no prompt.
fn check_policy(world: &World, action: &Action, step: &Step, s: &mut State) {
    if let Action::Request(Sess::S1, Rid::R1) = action {
        s.allowed_by.clear();
        s.denied_by_one = false;
    }
    if let Some((who, text, _)) = &step.said {
        // An answer to a withdrawn prompt counts for nothing.
        if world.gate(s, Ident::A, *who) == Gate::Approver && !step.withdrawn_refused {
            match text {
                Text::Yes(Rid::R1) | Text::Always(Rid::R1) => {
                    s.allowed_by.insert(*who);
                }
                Text::No(Rid::R1) => s.denied_by_one = true,
                _ => {}
            }
        }
    }
    for ((_, request_id, via), behavior) in step.decided.iter().zip(&step.behaviors) {
        match (request_id == &Rid::R1.id(), behavior) {
            (true, Behavior::Allow) => {
                if s.allowed_by.len() < 2 || s.denied_by_one {
                    s.bad |= bad::POLICY_QUORUM;
                } else if matches!(via, VerdictSource::Text { .. }) {
                    s.seen |= seen::QUORUM_MET;
                }
            }
            (false, Behavior::Allow) => s.bad |= bad::POLICY_DENY,
            _ => {}
        }
    }
    if let Action::Request(_, Rid::R2) = action {
        let denied =
            step.decided
                .iter()
                .zip(&step.behaviors)
                .any(|((_, request_id, via), behavior)| {
                    *request_id == Rid::R2.id()
                        && *behavior == Behavior::Deny
                        && *via == VerdictSource::Policy { rule: 2 }
                });
        if denied && !step.prompted {
            s.seen |= seen::DENIED_BY_RULE;
        } else {
            s.bad |= bad::POLICY_DENY;
        }
    }
}

/// After a step of [`Scope::Grants`]: each grant the core made was an approver's
/// grant answering an open prompt of the session it is for, connected, with what
/// the approver typed; each request a grant answered was that live grant's session's, covered
/// (only `abcde`'s `cargo test`: no grant covers `fghij`'s chained command), and
/// before its expiry; and a request a live grant covers was answered by one.
fn check_grants(world: &World, action: &Action, step: &Step, s: &mut State) {
    for grant in &step.granted {
        let asked = match &step.said {
            Some((who, text, event_id))
                if world.gate(s, Ident::A, *who) == Gate::Approver
                    && grant.message == *event_id =>
            {
                match text {
                    Text::Always(rid) => Some((rid, false, GRANT_MAX)),
                    Text::AlwaysPrefix(rid) => Some((rid, true, GRANT_MAX)),
                    Text::YesFor(rid) => Some((rid, false, GRANT_FOR)),
                    _ => None,
                }
            }
            _ => None,
        };
        let founded = asked.is_some_and(|(rid, prefix, lasts)| {
            let scope = if prefix {
                mc_model::grant::InputScope::Prefix(GRANT_PREFIX.to_owned())
            } else {
                mc_model::grant::InputScope::Exact(GRANT_PREFIX.to_owned())
            };
            let answered = step.decided.iter().any(|(session, request_id, via)| {
                *session == grant.session
                    && *request_id == rid.id()
                    && matches!(via, VerdictSource::Text { event_id } if *event_id == grant.message)
            });
            answered
                && *rid == Rid::R1
                && grant.tool == "Bash"
                && grant.scope == scope
                && grant.expires_at == s.now.saturating_add(lasts)
        });
        // Never for a session that is not connected: it would outlive the session's end.
        match (founded, Sess::from_id(&grant.session)) {
            (true, Some(sess)) if s.attached.contains(&sess) => {
                s.seen |= seen::GRANT_MADE;
                s.grants.push(WGrant {
                    id: grant.id,
                    sess,
                    expires: grant.expires_at,
                    live: true,
                });
            }
            _ => s.bad |= bad::GRANT_UNFOUNDED,
        }
    }
    let covering = |s: &State, sess: Sess, rid: Rid| {
        rid == Rid::R1
            && s.grants
                .iter()
                .any(|g| g.live && g.sess == sess && s.now < g.expires)
    };
    for (session, request_id, via) in &step.decided {
        let VerdictSource::Grant { grant } = via else {
            continue;
        };
        let sess = Sess::from_id(session);
        let rid = [Rid::R1, Rid::R2]
            .into_iter()
            .find(|r| r.id() == *request_id);
        let live = s
            .grants
            .iter()
            .any(|g| g.id == *grant && g.live && Some(g.sess) == sess && s.now < g.expires);
        if live && rid == Some(Rid::R1) {
            s.seen |= seen::AUTO_ANSWERED;
        } else {
            s.bad |= bad::GRANT_OVERREACH;
        }
    }
    if let Action::Request(sess, rid) = action {
        let auto = step
            .decided
            .iter()
            .any(|(_, _, via)| matches!(via, VerdictSource::Grant { .. }));
        if covering(s, *sess, *rid) && !auto {
            s.bad |= bad::GRANT_IGNORED;
        }
        if !covering(s, *sess, *rid) && step.prompted && s.grants.iter().any(|g| g.sess == *sess) {
            s.seen |= seen::UNCOVERED_ASKED;
        }
    }
}

/// Whether `action` was an agent's write the core refused (the world's state then
/// differs from the last one only in the monitor's bits and the budgets).
fn agent_refused(action: &Action, s: &State) -> bool {
    matches!(action, Action::AgentTouch { .. } | Action::AgentSays(_))
        && s.seen & seen::WRITE_REFUSED != 0
}

/// The events an agent's write aims at, as the world reads what it sends.
fn sent_targets(write: &AgentWrite) -> Vec<EventId> {
    match write {
        AgentWrite::Message {
            reply_to,
            thread_root,
            ..
        }
        | AgentWrite::File {
            reply_to,
            thread_root,
            ..
        } => reply_to.iter().chain(thread_root).cloned().collect(),
        AgentWrite::Edit { original, .. } => vec![original.clone()],
        AgentWrite::Reaction { relates_to, .. } => vec![relates_to.clone()],
        AgentWrite::Redaction { redacts, .. } => vec![redacts.clone()],
        AgentWrite::Receipt { .. }
        | AgentWrite::Join { .. }
        | AgentWrite::Leave { .. }
        | AgentWrite::Invite { .. }
        | AgentWrite::CreateRoom { .. }
        | AgentWrite::CreateDm { .. }
        | AgentWrite::SetRoomName { .. }
        | AgentWrite::SetRoomTopic { .. } => Vec::new(),
    }
}

/// The texts an agent's write puts where a person reads them.
fn sent_texts(write: &AgentWrite) -> Vec<&str> {
    fn text(t: &AgentText) -> Vec<&str> {
        std::iter::once(t.body.as_str())
            .chain(t.formatted_body.as_deref())
            .collect()
    }
    match write {
        AgentWrite::Message { parts, .. } => parts.iter().flat_map(text).collect(),
        AgentWrite::Edit { text: t, .. } => text(t),
        AgentWrite::Reaction { key, .. } => vec![key.as_str()],
        AgentWrite::Redaction { reason, .. } => reason.iter().map(String::as_str).collect(),
        AgentWrite::CreateRoom { name, topic, .. } => {
            name.iter().chain(topic).map(String::as_str).collect()
        }
        AgentWrite::SetRoomName { name, .. } => vec![name.as_str()],
        AgentWrite::SetRoomTopic { topic, .. } => vec![topic.as_str()],
        AgentWrite::File { name, caption, .. } => std::iter::once(name.as_str())
            .chain(caption.iter().flat_map(text))
            .collect(),
        AgentWrite::Receipt { .. }
        | AgentWrite::Join { .. }
        | AgentWrite::Leave { .. }
        | AgentWrite::Invite { .. }
        | AgentWrite::CreateDm { .. } => Vec::new(),
    }
}

/// Whether a person reading `text` sees `rid` as a word: the world's own reading of
/// the few texts it generates (zero-width spaces unseen, any case).
fn reads_as(text: &str, rid: Rid) -> bool {
    let seen: String = text
        .chars()
        .filter(|c| *c != '\u{200B}')
        .flat_map(char::to_lowercase)
        .collect();
    let id = rid.id();
    seen.split(|c: char| !c.is_alphanumeric())
        .any(|word| word == id.as_str())
}

/// Judges an agent's write the core performed or refused against the world's record:
/// which events are prompts (every prompt A or B ever posted: identities are
/// isolated, so A's agent may touch neither's), which request ids are open (their
/// prompt's message shows no outcome yet), whose message an edit changes.
/// A performed write is recorded (a message becomes one of the world's messages).
fn judge_agent_write(s: &mut State, write: &AgentWrite, performed: bool) {
    let targets = sent_targets(write);
    let touches_prompt = targets
        .iter()
        .any(|t| s.prompts.iter().any(|p| p.message == *t));
    let names_open = sent_texts(write)
        .into_iter()
        .any(|text| s.prompts.iter().any(|p| p.open && reads_as(text, p.rid)));
    let foreign_edit = match write {
        AgentWrite::Edit { original, .. } => !s
            .messages
            .iter()
            .any(|m| m.event_id == *original && m.who == Who::Bot),
        _ => false,
    };
    if performed {
        if touches_prompt {
            s.bad |= bad::PROMPT_TOUCHED;
        }
        if names_open {
            s.bad |= bad::NAMES_OPEN;
        }
        if !targets.is_empty() && !touches_prompt {
            s.seen |= seen::WRITE_PERFORMED;
        }
        if let AgentWrite::Message { .. } = write {
            let event_id = s.fresh_event();
            s.messages.push(WMessage {
                ident: Ident::A,
                event_id,
                who: Who::Bot,
                text: Text::Agent,
                edit_of: None,
                redacted: false,
                room: 0,
                input: true,
                again: false,
            });
        }
    } else {
        s.seen |= seen::WRITE_REFUSED;
        if !touches_prompt && !names_open && !foreign_edit {
            s.bad |= bad::WRONGLY_REFUSED;
        }
        if touches_prompt {
            s.seen |= seen::PROMPT_WRITE_REFUSED;
        }
        if names_open && !touches_prompt {
            s.seen |= seen::NAMING_REFUSED;
        }
    }
}

/// After a step: a `yes` the core held back in this step (it joined a settling
/// prompt's votes) must have waited for a deny reaction, not withdrawn, by someone
/// who was an approver when it arrived and is one now. Also notes a `yes` taken at
/// once on a prompt whose settling deny came from someone who no longer approves.
fn check_settling(world: &World, last: &State, s: &mut State) {
    let a = Ident::A.id();
    let (Some(before), Some(after)) = (last.channel.identity(&a), s.channel.identity(&a)) else {
        return;
    };
    let settling = |st: &mc_model::IdentityState| {
        st.prompts()
            .iter()
            .any(|p| matches!(p.phase, Phase::Settling { .. }))
    };
    if !settling(before) && !settling(after) {
        return;
    }
    let votes_before = |message: &EventId| -> Vec<EventId> {
        before
            .prompts()
            .iter()
            .find_map(|p| match &p.phase {
                Phase::Settling {
                    message: m, votes, ..
                } if m == message => Some(votes.iter().map(|(e, _)| e.clone()).collect()),
                _ => None,
            })
            .unwrap_or_default()
    };
    let held: Vec<EventId> = after
        .prompts()
        .iter()
        .filter_map(|p| match &p.phase {
            Phase::Settling { message, votes, .. } => {
                let old = votes_before(message);
                votes
                    .iter()
                    .any(|(e, v)| v.by_text && !old.contains(e))
                    .then(|| message.clone())
            }
            _ => None,
        })
        .collect();
    let who = |user: &UserId| {
        [Who::Ann, Who::Carl, Who::Eve, Who::Bot]
            .into_iter()
            .find(|w| w.user(Ident::A) == *user)
    };
    let past_former_deny = before.prompts().iter().any(|p| {
        let Phase::Settling { message, votes, .. } = &p.phase else {
            return false;
        };
        let former_deny = votes.iter().any(|(_, v)| {
            v.behavior == Behavior::Deny
                && !v.by_text
                && who(&v.voter).is_some_and(|w| world.gate(s, Ident::A, w) != Gate::Approver)
        });
        former_deny
            && after.prompts().iter().any(|q| match &q.phase {
                Phase::Decided {
                    message: m,
                    decision,
                }
                | Phase::Delivering {
                    message: m,
                    decision,
                    ..
                } => {
                    m == message
                        && matches!(&decision.via, VerdictSource::Text { event_id }
                            if !votes.iter().any(|(e, _)| e == event_id))
                }
                _ => false,
            })
    });
    for message in held {
        let denied = s.reactions.iter().any(|r| {
            r.target == message
                && r.key == Key::Down
                && r.vote
                && !r.redacted
                && world.gate(s, Ident::A, r.who) == Gate::Approver
        });
        if !denied {
            s.bad |= bad::HELD_BY_FORMER;
        }
    }
    if past_former_deny {
        s.seen |= seen::PAST_FORMER_DENY;
    }
}

// ----- properties ----------------------------------------------------------------

macro_rules! never {
    ($name:expr, $bit:expr) => {
        Property::always($name, |_, s: &State| s.bad & $bit == 0)
    };
}

macro_rules! witness {
    ($name:literal, $bit:expr) => {
        Property::sometimes($name, |_, s: &State| s.seen & $bit != 0)
    };
}

/// The `sometimes` properties the Delivery and Prompts scopes both witness.
const SHARED: [&str; 6] = [
    "an allowed sender's message is pushed",
    "an own event or a notice is seen and dropped",
    "one event reaches two sessions",
    "an event is replayed",
    "two events are replayed at once",
    "an event waits in the queue",
];

/// The `sometimes` properties each scope must witness: together they cover every
/// `sometimes` property.
pub fn witnesses(scope: Scope) -> BTreeSet<&'static str> {
    let shared: &[&str] = match scope {
        Scope::Rooms | Scope::Sessions | Scope::Grants | Scope::Policy => &[],
        Scope::Delivery | Scope::Prompts => &SHARED,
    };
    let own: &[&str] = match scope {
        Scope::Delivery => &[
            "a session acknowledges an event",
            "an edit is pushed",
            "an event of identity B reaches B's session",
        ],
        Scope::Prompts => &[
            "an approver's verdict reaches the session that asked",
            "a verdict is taken by text",
            "a verdict is taken by reaction",
            "a deny by reaction is taken",
            "a verdict reaches the second session",
            "a request id is answered after it was issued again",
            "a verdict send completes after its prompt was re-issued",
            "a withdrawn reaction leaves the prompt answerable",
            "a prompt expires",
            "a prompt goes to the second room",
            "a prompt is evicted at the cap",
            "both identities hold prompts at once",
            "an agent's write to a prompt is refused",
            "an agent's text naming an open request id is refused",
            "an answer to a withdrawn prompt is refused",
            "a withdrawn prompt opens again when its session attaches",
            "an agent's write to an ordinary message is performed",
            "a verdict replying to the agent's message answers nothing",
            "a yes is taken at once after the denier stopped being an approver",
            "a verdict from a device not cross-signed is refused",
        ],
        Scope::Rooms => &[
            "an allowed sender's message is pushed",
            "an event is replayed",
            "two events are replayed at once",
            "an event waits in the queue",
            "an approver's verdict reaches the session that asked",
            "a verdict is taken by text",
            "a request id is answered after it was issued again",
            "a verdict send completes after its prompt was re-issued",
            "a prompt expires",
            "a stranger's invite is refused",
            "an allowed sender's invite is joined",
            "an invite to a room joined or being joined is not joined again",
            "an event of a room the identity has not joined is dropped as history",
            "history delivered again after the join is dropped",
            "a prompt post in flight at a restart is issued again",
            "a verdict in flight at a restart is sent again",
            "a session live before a restart gets what waited when it attaches again",
            "an answer to a withdrawn prompt is refused",
            "a withdrawn prompt opens again when its session attaches",
        ],
        Scope::Sessions => &[
            "an allowed sender's message is pushed",
            "an event is replayed",
            "two events are replayed at once",
            "an event waits in the queue",
            "an approver's verdict reaches the session that asked",
            "a verdict is taken by text",
            "a verdict reaches the second session",
            "a request id is answered after it was issued again",
            "a verdict send completes after its prompt was re-issued",
            "a prompt expires",
            "a verdict in flight at a restart is sent again",
            "a session live before a restart gets what waited when it attaches again",
            "a verdict typed in a session's room answers its prompt",
            "a room an approver bound reaches its label's session",
            "a label's room reaches its session after a restart",
            "typing stops",
            "an answer to a withdrawn prompt is refused",
            "a withdrawn prompt opens again when its session attaches",
        ],
        Scope::Grants => &[
            "an approver's verdict reaches the session that asked",
            "a verdict is taken by text",
            "a verdict reaches the second session",
            "a request id is answered after it was issued again",
            "a verdict send completes after its prompt was re-issued",
            "a prompt expires",
            "a prompt is evicted at the cap",
            "an approver's answer makes a grant",
            "a request a grant covers is allowed without a prompt",
            "a request of a session with grants that none covers is asked",
            "an answer to a withdrawn prompt is refused",
            "a withdrawn prompt opens again when its session attaches",
        ],
        Scope::Policy => &[
            "an approver's verdict reaches the session that asked",
            "a verdict is taken by text",
            "a request id is answered after it was issued again",
            "a verdict send completes after its prompt was re-issued",
            "a prompt expires",
            "a request a rule asks two approvers for is allowed by two",
            "a request a rule denies is denied unasked",
            "an answer to a withdrawn prompt is refused",
            "a withdrawn prompt opens again when its session attaches",
        ],
    };
    shared.iter().chain(own).copied().collect()
}

/// Names of the `always` properties, for the fault tests.
pub mod names {
    pub const STRANGER_VERDICT: &str = "a stranger never causes a verdict";
    pub const NON_APPROVER_VERDICT: &str =
        "an allowed sender who is not an approver never causes a verdict";
    pub const VERDICT_MISROUTED: &str = "a verdict only goes to the session that asked";
    pub const VERDICT_TWICE: &str = "no prompt's verdict is delivered twice";
    pub const PUSH_TWICE: &str = "no session receives the same event twice";
    pub const VERDICT_PUSHED: &str = "a verdict is never pushed as chat";
    pub const STRANGER_PUSHED: &str = "a stranger's event is never pushed";
    pub const OWN_OR_NOTICE_PUSHED: &str = "the identity's own events and notices are never pushed";
    pub const CROSS_IDENTITY: &str = "one identity's events never reach another identity";
    pub const SETTINGS_UNCHANGED: &str = "no input changes the operator's settings";
    pub const CAP: &str = "an identity never holds more prompts than its cap";
    pub const WITHDRAWN_COUNTED: &str = "a withdrawn reaction never causes a verdict";
    pub const DENY_LOST: &str = "deny wins when approve and deny are both there";
    pub const EARLY_VERDICT: &str = "a verdict by reaction waits for the settle window";
    pub const EXPIRED_ANSWERED: &str = "an expired prompt is never answered";
    pub const WRONG_ROOM: &str =
        "a prompt goes only to the permission room or where an allowed sender last wrote";
    pub const ACKED_REPLAYED: &str = "an acknowledged event is never replayed";
    pub const LOST: &str = "no allowed message is lost";
    pub const FOREIGN_EDIT: &str = "an edit is pushed only from the original's sender";
    pub const REPLAY_ORDER: &str = "replay is oldest first";
    pub const WRONG_RETIREMENT: &str =
        "a prompt shows a verdict only once its verdict reached the session";
    pub const PROMPT_TOUCHED: &str =
        "the agent never edits, redacts, reacts to, replies to or threads on a prompt";
    pub const NAMES_OPEN: &str = "no text the agent sends names an open request id";
    pub const WRONGLY_REFUSED: &str = "an agent's write that breaks no rule is performed";
    pub const REPLY_ANSWERED: &str = "a verdict replying to another event answers nothing";
    pub const UNSIGNED_VERDICT: &str =
        "a verdict counts only from a device its approver cross-signed";
    pub const HELD_BY_FORMER: &str =
        "a yes is held back only by the deny of someone who is an approver now";
    pub const STRANGER_JOINED: &str = "a stranger's invite is never joined";
    pub const INVITE_NOT_JOINED: &str =
        "an allowed sender's invite to a room the identity is not in is joined";
    pub const JOINED_TWICE: &str = "an allowed sender's invite is joined once";
    pub const NOT_JOINED_INPUT: &str =
        "nothing of a room the identity has not joined is pushed, queued or counted as a vote";
    pub const HISTORY_INPUT: &str = "history delivered again after the join stays history";
    pub const POST_NOT_REISSUED: &str =
        "every prompt post in flight at a restart is issued again with its effect id";
    pub const VERDICT_NOT_RESENT: &str =
        "a verdict in flight at a restart is sent again when its session attaches";
    pub const PUSH_TO_AWAY: &str =
        "no push goes to a session that was live before a restart until it attaches again";
    pub const OUT_OF_ROOM: &str =
        "an event reaches only the sessions of its room: a label's room its label's sessions, \
         a room bound to no label the sessions without one";
    pub const VERDICT_CROSS_ROOM: &str =
        "a verdict typed in a room answers only a prompt posted in that room";
    pub const BINDING_LOST: &str = "a label's room survives a restart: it is never created twice";
    pub const TYPING_PAST_CAP: &str =
        "typing shows only after a push reached the room's session, and stops within the cap";
    pub const GRANT_UNFOUNDED: &str = "a grant is made only by an approver's grant answering \
         the connected session's open prompt, scoped to what the prompt showed and the time asked";
    pub const GRANT_OVERREACH: &str = "a grant answers only its own session's requests it \
         covers, before it expires, is revoked or its session detaches";
    pub const GRANT_IGNORED: &str = "a request a live grant covers is answered without a prompt";
    pub const POLICY_QUORUM: &str = "a request a rule asks two approvers for is allowed only \
        after two distinct approvers allowed it and none denied it";
    pub const POLICY_DENY: &str = "a request a deny rule matches is never allowed, and is denied \
        at once without a prompt";
    pub const WITHDRAWN_ANSWERED: &str = "no answer is taken for a prompt whose session's stream \
        closed, until the session attaches again";
    pub const WITHDRAWAL_HIDDEN: &str =
        "a prompt waiting for an answer is shown withdrawn when its \
        session's stream closes, and shown as asked again when the session attaches";
}

fn settings_unchanged(world: &World, s: &State) -> bool {
    [Ident::A, Ident::B].into_iter().all(|ident| {
        s.channel.identity(&ident.id()).map(|st| st.config())
            == Some(&world.settings(ident, s.swapped))
    })
}

fn under_cap(_: &World, s: &State) -> bool {
    s.channel
        .identities()
        .all(|(_, st)| st.prompts().len() <= CAP)
}

/// Every chat message of an allowed sender that was not redacted or acknowledged
/// reached a session or waits in the queue.
fn nothing_lost(world: &World, s: &State) -> bool {
    s.messages.iter().all(|m| {
        let pushable = m.text == Text::Chat
            && m.edit_of.is_none()
            && matches!(
                world.gate(s, m.ident, m.who),
                Gate::Allowed | Gate::Approver
            );
        let queued = s
            .channel
            .identity(&m.ident.id())
            .is_some_and(|st| st.queue().iter().any(|q| q.event_id == m.event_id));
        !pushable
            || !m.input
            || m.redacted
            || s.acked.contains(&m.event_id)
            || queued
            || s.pushed.iter().any(|(_, e)| *e == m.event_id)
    })
}

fn properties() -> Vec<Property<World>> {
    use names::*;
    vec![
        never!(STRANGER_VERDICT, bad::STRANGER_VERDICT),
        witness!(
            "an approver's verdict reaches the session that asked",
            seen::VERDICT_DELIVERED
        ),
        never!(NON_APPROVER_VERDICT, bad::NON_APPROVER_VERDICT),
        witness!("a verdict is taken by text", seen::TEXT_VERDICT),
        never!(VERDICT_MISROUTED, bad::VERDICT_MISROUTED),
        witness!("a verdict reaches the second session", seen::VERDICT_S2),
        never!(VERDICT_TWICE, bad::VERDICT_TWICE),
        witness!(
            "a request id is answered after it was issued again",
            seen::REANSWERED
        ),
        never!(PUSH_TWICE, bad::PUSH_TWICE),
        witness!("one event reaches two sessions", seen::TWO_SESSIONS),
        never!(VERDICT_PUSHED, bad::VERDICT_PUSHED),
        witness!(
            "an allowed sender's message is pushed",
            seen::ALLOWED_PUSHED
        ),
        never!(STRANGER_PUSHED, bad::STRANGER_PUSHED),
        witness!("an event of identity B reaches B's session", seen::B_PUSHED),
        never!(OWN_OR_NOTICE_PUSHED, bad::OWN_OR_NOTICE_PUSHED),
        witness!(
            "an own event or a notice is seen and dropped",
            seen::OWN_DROPPED
        ),
        never!(CROSS_IDENTITY, bad::CROSS_IDENTITY),
        Property::always(SETTINGS_UNCHANGED, settings_unchanged),
        Property::sometimes("a session acknowledges an event", |_, s: &State| {
            !s.acked.is_empty()
        }),
        Property::always(CAP, under_cap),
        witness!("a prompt is evicted at the cap", seen::EVICTED),
        Property::sometimes("both identities hold prompts at once", |_, s: &State| {
            s.channel
                .identities()
                .all(|(_, st)| !st.prompts().is_empty())
        }),
        never!(WITHDRAWN_COUNTED, bad::WITHDRAWN_COUNTED),
        Property::sometimes(
            "a withdrawn reaction leaves the prompt answerable",
            |_, s: &State| {
                s.reactions.iter().any(|r| {
                    r.redacted
                        && s.channel.identities().any(|(_, st)| {
                            st.prompts().iter().any(|p| {
                                p.phase
                                    == Phase::Pending {
                                        message: r.target.clone(),
                                    }
                            })
                        })
                })
            },
        ),
        never!(DENY_LOST, bad::DENY_LOST),
        witness!("a deny by reaction is taken", seen::DENY_BY_REACTION),
        never!(EARLY_VERDICT, bad::EARLY_VERDICT),
        witness!("a verdict is taken by reaction", seen::REACTION_VERDICT),
        never!(EXPIRED_ANSWERED, bad::EXPIRED_ANSWERED),
        witness!("a prompt expires", seen::EXPIRED),
        never!(WRONG_ROOM, bad::WRONG_ROOM),
        witness!("a prompt goes to the second room", seen::POSTED_TO_R2),
        never!(ACKED_REPLAYED, bad::ACKED_REPLAYED),
        witness!("an event is replayed", seen::REPLAYED),
        Property::always(LOST, nothing_lost),
        Property::sometimes("an event waits in the queue", |_, s: &State| {
            s.channel.identities().any(|(_, st)| !st.queue().is_empty())
        }),
        never!(FOREIGN_EDIT, bad::FOREIGN_EDIT),
        witness!("an edit is pushed", seen::EDIT_PUSHED),
        never!(REPLAY_ORDER, bad::REPLAY_ORDER),
        witness!("two events are replayed at once", seen::REPLAYED_TWO),
        never!(WRONG_RETIREMENT, bad::WRONG_RETIREMENT),
        witness!(
            "a verdict send completes after its prompt was re-issued",
            seen::STALE_SEND
        ),
        never!(PROMPT_TOUCHED, bad::PROMPT_TOUCHED),
        witness!(
            "an agent's write to a prompt is refused",
            seen::PROMPT_WRITE_REFUSED
        ),
        never!(NAMES_OPEN, bad::NAMES_OPEN),
        witness!(
            "an agent's text naming an open request id is refused",
            seen::NAMING_REFUSED
        ),
        never!(WRONGLY_REFUSED, bad::WRONGLY_REFUSED),
        witness!(
            "an agent's write to an ordinary message is performed",
            seen::WRITE_PERFORMED
        ),
        never!(REPLY_ANSWERED, bad::REPLY_ANSWERED),
        witness!(
            "a verdict replying to the agent's message answers nothing",
            seen::REPLY_REFUSED
        ),
        never!(UNSIGNED_VERDICT, bad::UNSIGNED_VERDICT),
        witness!(
            "a verdict from a device not cross-signed is refused",
            seen::UNSIGNED_REFUSED
        ),
        never!(HELD_BY_FORMER, bad::HELD_BY_FORMER),
        witness!(
            "a yes is taken at once after the denier stopped being an approver",
            seen::PAST_FORMER_DENY
        ),
        never!(STRANGER_JOINED, bad::STRANGER_JOINED),
        witness!(
            "a stranger's invite is refused",
            seen::STRANGER_INVITE_REFUSED
        ),
        never!(INVITE_NOT_JOINED, bad::INVITE_NOT_JOINED),
        witness!("an allowed sender's invite is joined", seen::INVITE_JOINED),
        never!(JOINED_TWICE, bad::JOINED_TWICE),
        witness!(
            "an invite to a room joined or being joined is not joined again",
            seen::INVITE_NOT_REPEATED
        ),
        never!(NOT_JOINED_INPUT, bad::NOT_JOINED_INPUT),
        witness!(
            "an event of a room the identity has not joined is dropped as history",
            seen::NOT_JOINED_DROPPED
        ),
        never!(HISTORY_INPUT, bad::HISTORY_INPUT),
        witness!(
            "history delivered again after the join is dropped",
            seen::HISTORY_DROPPED
        ),
        never!(POST_NOT_REISSUED, bad::POST_NOT_REISSUED),
        witness!(
            "a prompt post in flight at a restart is issued again",
            seen::POST_REISSUED
        ),
        never!(VERDICT_NOT_RESENT, bad::VERDICT_NOT_RESENT),
        witness!(
            "a verdict in flight at a restart is sent again",
            seen::VERDICT_RESENT
        ),
        never!(PUSH_TO_AWAY, bad::PUSH_TO_AWAY),
        witness!(
            "a session live before a restart gets what waited when it attaches again",
            seen::BACK_PUSHED
        ),
        never!(OUT_OF_ROOM, bad::OUT_OF_ROOM),
        never!(VERDICT_CROSS_ROOM, bad::VERDICT_CROSS_ROOM),
        witness!(
            "a verdict typed in a session's room answers its prompt",
            seen::VERDICT_IN_SESSION_ROOM
        ),
        witness!(
            "a room an approver bound reaches its label's session",
            seen::BOUND_BY_COMMAND
        ),
        never!(BINDING_LOST, bad::BINDING_LOST),
        witness!(
            "a label's room reaches its session after a restart",
            seen::BINDING_KEPT
        ),
        never!(TYPING_PAST_CAP, bad::TYPING_PAST_CAP),
        witness!("typing stops", seen::TYPING_STOPPED),
        never!(GRANT_UNFOUNDED, bad::GRANT_UNFOUNDED),
        witness!("an approver's answer makes a grant", seen::GRANT_MADE),
        never!(GRANT_OVERREACH, bad::GRANT_OVERREACH),
        witness!(
            "a request a grant covers is allowed without a prompt",
            seen::AUTO_ANSWERED
        ),
        never!(GRANT_IGNORED, bad::GRANT_IGNORED),
        witness!(
            "a request of a session with grants that none covers is asked",
            seen::UNCOVERED_ASKED
        ),
        never!(POLICY_QUORUM, bad::POLICY_QUORUM),
        witness!(
            "a request a rule asks two approvers for is allowed by two",
            seen::QUORUM_MET
        ),
        never!(POLICY_DENY, bad::POLICY_DENY),
        witness!(
            "a request a rule denies is denied unasked",
            seen::DENIED_BY_RULE
        ),
        never!(WITHDRAWN_ANSWERED, bad::WITHDRAWN_ANSWERED),
        witness!(
            "an answer to a withdrawn prompt is refused",
            seen::WITHDRAWN_REFUSED
        ),
        never!(WITHDRAWAL_HIDDEN, bad::WITHDRAWAL_HIDDEN),
        witness!(
            "a withdrawn prompt opens again when its session attaches",
            seen::REOPENED
        ),
    ]
}
