//! The reference: the model's [`Channel`] in a small world, and what it predicts.
//!
//! The world knows the cast (two identities, three sessions, three people, three
//! rooms), every Matrix event an action created (with a symbolic id and the content
//! the sender put on the wire), and, after each action, the [`Observation`]s the
//! server must produce: the notifications each MCP session receives and the events
//! the identity sends to Matrix. The model's inputs are built here directly from the
//! action, never by the server's decoders; the server gets the wire form.
//!
//! Outcomes follow an ideal wire: a push or verdict to a live session is `Sent`
//! (`Failed` once its stream broke), and a prompt post is `Posted` as
//! `$mc-prompt-<effect id>`. They are fed back in the order the server's engine
//! handles them: inline outcomes breadth-first after the effects of one input, prompt
//! posts after that.
//!
//! Its parts, one concern each (every public item is re-exported here):
//! - this module: the settings ([`Mode`], the times such as [`TTL`]), the cast ([`Who`], [`Ident`],
//!   [`Sess`], [`Rid`]) and the [`World`] state with its reading of the model's
//!   sessions;
//! - `values`: the values actions carry ([`Text`], [`Sel`], [`Rel`], [`Key`],
//!   [`Say`], [`AgentOp`], [`BadRequest`], [`Odd`], [`Change`], ...);
//! - `events`: the world's Matrix events ([`Ev`]), how an action's event is built
//!   and the input its delivery becomes, and the selectors that pick earlier events;
//! - `observation`: what a client can see ([`Observation`], [`ToolAnswer`]), and the
//!   run of inputs through the model with the ideal wire's outcomes that predicts it;
//! - `apply`: what each action does to the world ([`World::apply`]);
//! - `agent`: the agent's writes: the write a tool builds, the events it sends, and
//!   the generator's writes;
//! - `precondition`: whether an action can be taken ([`precondition()`]);
//! - `reference`: the state machine for proptest-state-machine ([`Reference`]) and
//!   the generator ([`transitions`]).

mod agent;
mod apply;
mod events;
mod observation;
mod precondition;
mod reference;
mod values;

pub use events::{Ev, EvKind};
pub use observation::{
    log_params, normalize_content, BindAnswer, Observation, ToolAnswer, LOG_METHOD,
};
pub use precondition::precondition;
pub use reference::{transitions, InProcessMode, ModeOf, RealMode, Reference};
pub use values::{
    AgentOp, AgentRel, BadRequest, Change, Key, Lbl, Odd, Redactor, Rel, Say, Sel, Text,
    AGENT_CHAT, CHAT,
};

use mc_model::{
    AgentWrite, Channel, EventId, IdentityConfig, IdentityId, Input, Millis, PermissionRequest,
    RequestId, RoomId, SessionId, SessionPhase, Timestamp, UserId,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// `notifications/claude/channel` (Claude Code channel contract).
pub const CHANNEL_METHOD: &str = "notifications/claude/channel";
/// `notifications/claude/channel/permission` (Claude Code channel contract).
pub const VERDICT_METHOD: &str = "notifications/claude/channel/permission";

/// The clock at the start of every sequence, ms since the epoch.
pub const START: Timestamp = Timestamp(1_700_000_000_000);

/// Which server the sequence drives; it decides the settings and which actions can
/// be generated (see `conformance/skip.txt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// The `impl` adapters and engine with in-memory queues for the network; the
    /// clock is the world's.
    InProcess,
    /// The `matrix-channel` binary, Synapse and an MCP client over HTTP; the clock is
    /// the wall clock, so prompts never expire within a sequence and the settle
    /// window is 1 ms.
    Real,
}

/// Who acts in Matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Who {
    /// Allowed sender and approver of both identities; display name "Ann".
    Ann,
    /// Allowed sender of A, not an approver; display name "Carl".
    Carl,
    /// A stranger whose display name is also "Ann".
    Eve,
    /// The identity's own account.
    Bot,
}

impl Who {
    /// The symbolic MXID; `ident` picks the bot.
    pub fn user_id(self, ident: Ident) -> UserId {
        UserId(
            match (self, ident) {
                (Who::Ann, _) => "@ann:hs",
                (Who::Carl, _) => "@carl:hs",
                (Who::Eve, _) => "@eve:hs",
                (Who::Bot, Ident::A) => "@bot-a:hs",
                (Who::Bot, Ident::B) => "@bot-b:hs",
            }
            .to_owned(),
        )
    }

    /// The display name in every room; bots have none.
    pub fn display_name(self) -> Option<&'static str> {
        match self {
            Who::Ann | Who::Eve => Some("Ann"),
            Who::Carl => Some("Carl"),
            Who::Bot => None,
        }
    }
}

/// The two identities.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Ident {
    A,
    B,
}

impl Ident {
    pub const ALL: [Ident; 2] = [Ident::A, Ident::B];

    pub fn id(self) -> IdentityId {
        IdentityId(
            match self {
                Ident::A => "a",
                Ident::B => "b",
            }
            .to_owned(),
        )
    }

    /// The identity's rooms: A has two and no permission room; B has one, its
    /// permission room.
    pub fn rooms(self) -> &'static [&'static str] {
        match self {
            Ident::A => &["!a0:hs", "!a1:hs"],
            Ident::B => &["!b0:hs"],
        }
    }

    pub fn room(self, n: u8) -> RoomId {
        let rooms = self.rooms();
        RoomId(rooms[n as usize % rooms.len()].to_owned())
    }

    /// Who may write in the identity's rooms (everyone is joined to all of them).
    pub fn members(self) -> &'static [Who] {
        match self {
            Ident::A => &[Who::Ann, Who::Carl, Who::Eve, Who::Bot],
            Ident::B => &[Who::Ann, Who::Eve, Who::Bot],
        }
    }

    /// The operator's settings for this identity in `mode`.
    pub fn config(self, mode: Mode) -> IdentityConfig {
        let ann = Who::Ann.user_id(self);
        let mut senders = vec![ann.clone()];
        if self == Ident::A {
            senders.push(Who::Carl.user_id(self));
        }
        let mut config = IdentityConfig::new(Who::Bot.user_id(self), senders);
        config.approvers = Some([ann].into_iter().collect());
        if self == Ident::B {
            config.permission_room = Some(self.room(0));
            config.policy = b_policy();
        }
        config.replay_budget = 3;
        match mode {
            Mode::InProcess => {
                config.prompt_ttl_ms = TTL;
                config.settle_ms = SETTLE;
                config.max_prompts = 2;
                config.queue_cap = 4;
                // Only the last retired prompt is remembered, so the agent's writes to
                // older prompts (its own messages) are let through.
                config.prompt_memory = 1;
                config.undecryptable_grace_ms = GRACE;
                // B's sessions wait out an attach grace (held pushes, replay on a
                // tick); A's are live at once, so its pushes, edits and replays are
                // seen as often as before the grace existed.
                config.attach_grace_ms = if self == Ident::B { ATTACH_GRACE } else { 0 };
                // A tells the sender in the room when a room key does not come; B
                // does not.
                config.undecryptable_notice = self == Ident::A;
            }
            Mode::Real => {
                config.prompt_ttl_ms = REAL_TTL;
                config.settle_ms = REAL_SETTLE;
                config.attach_grace_ms = REAL_ATTACH_GRACE;
            }
        }
        config
    }
}

/// In-process prompt time to live, ms.
pub const TTL: Millis = 10_000;
/// In-process settle window, ms.
pub const SETTLE: Millis = 3_000;
/// In-process grace period of an undecryptable event, ms: longer than the settle
/// window, shorter than the time to live.
pub const GRACE: Millis = 5_000;
/// In-process attach grace of identity B, ms (A has none): shorter than the settle
/// window, so the ticks that end one land inside or after the other.
pub const ATTACH_GRACE: Millis = 1_000;
/// Real-server attach grace, ms: it ends before the next action (like the settle
/// window), so a replay is observed with the attach that caused it.
pub const REAL_ATTACH_GRACE: Millis = 1;
/// Real-server prompt time to live, ms: longer than any sequence.
pub const REAL_TTL: Millis = 3_600_000;
/// Real-server settle window, ms: a vote settles before the next action.
pub const REAL_SETTLE: Millis = 1;

/// The three Claude Code sessions: S1 and S2 of A, S3 of B.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Sess {
    S1,
    S2,
    S3,
}

impl Sess {
    pub const ALL: [Sess; 3] = [Sess::S1, Sess::S2, Sess::S3];

    pub fn ident(self) -> Ident {
        match self {
            Sess::S1 | Sess::S2 => Ident::A,
            Sess::S3 => Ident::B,
        }
    }

    pub fn id(self) -> SessionId {
        SessionId(
            match self {
                // As long as a prompt shows of a session id (8 characters,
                // `prompt_text::SESSION_CHARS`), like the server's MCP session ids:
                // the real adapter renames one to the other, and a text clipped after
                // it (a reply's quote of the prompt) is clipped at the same place.
                Sess::S1 => "s1-00000",
                Sess::S2 => "s2-00000",
                Sess::S3 => "s3-00000",
            }
            .to_owned(),
        )
    }
}

/// The two request ids (five letters from `a-km-z`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Rid {
    R1,
    R2,
}

impl Rid {
    pub fn as_str(self) -> &'static str {
        match self {
            Rid::R1 => "abcde",
            Rid::R2 => "fghij",
        }
    }

    pub fn request(self) -> PermissionRequest {
        PermissionRequest {
            request_id: RequestId::parse(self.as_str()).expect("a valid request id"),
            tool_name: "Bash".to_owned(),
            description: format!("run step {}", self.as_str()),
            input_preview: format!("{{\"command\": \"ls {}\"}}", self.as_str()),
        }
    }

    /// The `permission_request` params Claude Code sends.
    pub fn params(self) -> Value {
        let r = self.request();
        json!({
            "request_id": r.request_id.as_str(),
            "tool_name": r.tool_name,
            "description": r.description,
            "input_preview": r.input_preview,
        })
    }
}

/// B's policy (docs/decisions/0029-policy.md): `fghij`'s command is denied
/// unasked, `abcde`'s is asked every time (no grant answers it). The real target's
/// config file says the same ([`B_POLICY_TOML`]).
pub fn b_policy() -> Vec<mc_model::policy::Rule> {
    use mc_model::policy::{Pattern, Rule, RuleDecision};
    vec![
        Rule {
            tool: Pattern("Bash".to_owned()),
            input: Some(Pattern("ls fghij".to_owned())),
            decision: RuleDecision::Deny,
        },
        Rule {
            tool: Pattern("Bash".to_owned()),
            input: Some(Pattern("ls abc*".to_owned())),
            decision: RuleDecision::Ask { approvers: 1 },
        },
    ]
}

/// [`b_policy`] as the real target's config file has it (identity `b`).
pub const B_POLICY_TOML: &str = "[[identities.b.policy]]\ntool = \"Bash\"\ninput = \"ls fghij\"\n\
    decision = \"deny\"\n[[identities.b.policy]]\ntool = \"Bash\"\ninput = \"ls abc*\"\n\
    decision = \"ask\"\n";

/// The reference state: the model and its world.
#[derive(Clone, Debug)]
pub struct World {
    pub mode: Mode,
    pub channel: Channel,
    pub now: Timestamp,
    pub events: Vec<Ev>,
    /// Sessions whose stream broke and has not reopened.
    pub broken: BTreeSet<Sess>,
    /// Sessions that have attached at least once (they have an MCP session), with the
    /// label their MCP session was created with (fixed from then on: the server
    /// reads it when the session is created).
    pub known: BTreeMap<Sess, Option<Lbl>>,
    /// What the last action must cause.
    pub expected: Vec<Observation>,
    /// The model inputs of the last action, outcomes included (for reports).
    pub inputs: Vec<Input>,
    /// The events the last action's agent write sent, in order (the in-memory
    /// homeserver names them so).
    pub wrote: Vec<EventId>,
    /// The next tool call's id (the engine numbers them from 0).
    pub next_call: u64,
    /// The last action's agent write, as the reference built it from the state before
    /// the action (selectors resolved; adapters read their targets from it).
    pub last_write: Option<(Ident, AgentWrite)>,
    /// While `Some`, prompt posts do not report back (the process dies first); the
    /// flag says whether the homeserver got the event.
    hold_posts: Option<bool>,
    /// Restarts so far (the generator keeps them rare).
    pub restarts: u8,
    /// The join events the homeserver delivered in the last action (after the joins
    /// the model asked for).
    pub joins: Vec<usize>,
    /// The finer case of the last action, where the reference tells it (an
    /// undecryptable event's fate, a decryption before or after the grace period),
    /// for the coverage.
    pub case: Option<String>,
    /// The event the last action decrypted (adapters read it from here: in the world
    /// after the action it is no longer among the undecrypted ones).
    pub decrypted: Option<usize>,
    /// The drop reasons of the last action's effects.
    drops: Vec<(Option<EventId>, mc_model::DropReason)>,
    /// The bindings the last action changed (`Effect::Bound`: label, room).
    bound: Vec<(String, Option<RoomId>)>,
    /// The grants the last action's operator revocation ended.
    revoked: Vec<u64>,
}

impl World {
    pub fn new(mode: Mode) -> World {
        let mut channel = Channel::new();
        for ident in Ident::ALL {
            channel
                .add_identity(ident.id(), ident.config(mode))
                .expect("the cast's settings are valid");
            // The identity is in its rooms before the sequence starts (the real
            // server reports them when it starts, or joins them on the invite).
            for room in ident.rooms() {
                channel.handle(
                    START,
                    Input::Membership {
                        identity: ident.id(),
                        room: RoomId((*room).to_owned()),
                        event_id: None,
                        user: Who::Bot.user_id(ident),
                        membership: mc_model::Membership::Joined,
                    },
                );
            }
        }
        World {
            mode,
            channel,
            now: START,
            events: Vec::new(),
            broken: BTreeSet::new(),
            known: BTreeMap::new(),
            expected: Vec::new(),
            inputs: Vec::new(),
            wrote: Vec::new(),
            next_call: 0,
            last_write: None,
            hold_posts: None,
            restarts: 0,
            joins: Vec::new(),
            case: None,
            decrypted: None,
            drops: Vec::new(),
            bound: Vec::new(),
            revoked: Vec::new(),
        }
    }

    /// The inputs a new process starts with, after loading the state: the
    /// configured identities applied again (`load_channel`), `Input::Restarted`, and
    /// what the store knows of each room (`report_rooms`: the cast's rooms, joined).
    pub fn restart_inputs(&self) -> Vec<Input> {
        let mut inputs = vec![Input::Restarted];
        for ident in Ident::ALL {
            let Some(state) = self.channel.identity(&ident.id()) else {
                continue;
            };
            for (room, known) in state.rooms() {
                // As the homeserver has it: a join asked for is done (the ideal wire),
                // an invite not acted on is pending.
                let membership = match known {
                    mc_model::JoinState::Joined | mc_model::JoinState::Joining { .. } => {
                        mc_model::Membership::Joined
                    }
                    mc_model::JoinState::Invited { by } => {
                        mc_model::Membership::Invited { by: by.clone() }
                    }
                    mc_model::JoinState::Left => mc_model::Membership::Left,
                };
                inputs.push(Input::Membership {
                    identity: ident.id(),
                    room: room.clone(),
                    event_id: None,
                    user: Who::Bot.user_id(ident),
                    membership,
                });
            }
        }
        inputs
    }

    /// Whether the model has the session's stream open: live, or inside its attach
    /// grace.
    pub fn is_attached(&self, session: Sess) -> bool {
        matches!(
            self.channel
                .identity(&session.ident().id())
                .and_then(|i| i.sessions().get(&session.id())),
            Some(SessionPhase::Live | SessionPhase::Attaching { .. })
        )
    }

    /// The label the session attaches with: the one its MCP session was created
    /// with, else `label` (an unknown session's attach creates its MCP session).
    pub fn label_of(&self, session: Sess, label: Option<Lbl>) -> Option<Lbl> {
        self.known.get(&session).copied().unwrap_or(label)
    }

    /// Whether the session can attach with `label` without the model asking for a
    /// room: no label, or one the identity has bound (to a room or to none). Room
    /// creation is not in the world (conformance/skip.txt).
    pub fn attach_routed(&self, session: Sess, label: Option<Lbl>) -> bool {
        label.is_none_or(|l| {
            self.channel
                .identity(&session.ident().id())
                .and_then(|i| i.bindings().get(&l.label()))
                .is_some_and(|b| !matches!(b, mc_model::Binding::Creating { .. }))
        })
    }

    /// Whether the model has the session attached and past its attach grace.
    pub fn is_live(&self, session: Sess) -> bool {
        self.channel
            .identity(&session.ident().id())
            .and_then(|i| i.sessions().get(&session.id()))
            == Some(&SessionPhase::Live)
    }
}
