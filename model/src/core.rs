//! The state machine: [`Channel::handle`] and [`Channel::next_deadline`].

use crate::agent::{matrix_to, names_request_id, AgentWrite};
use crate::classify::{classify_message, classify_reaction, MessageClass, ReactionClass};
use crate::config::{ConfigError, Gate, IdentityConfig};
use crate::effect::{
    ChannelNotification, Decision, DropReason, Effect, PermissionVerdict, PromptText, VerdictSource,
};
use crate::event::{
    Input, Membership, Message, MsgType, Outcome, PermissionRequest, Reaction, Redaction,
    Undecryptable,
};
use crate::ids::{CallId, EffectId, EventId, IdentityId, Millis, RoomId, SessionId, UserId};
use crate::meta::MetaKey;
use crate::prompt_text::{render_outcome, render_prompt, PromptOutcome};
use crate::render::{
    render_edit, render_gap_cut, render_message, render_reaction, render_replay_cut,
    render_retraction, render_undecryptable, undecryptable_notice_text, PushKind,
};
use crate::verdict::{Behavior, RequestId, TextVerdict};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The whole core: every identity's state, and the effects in flight.
///
/// Serializable: the server persists it after every transition that changed it, so
/// a restart loses no pending prompt and no delivery record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Channel {
    now: Millis,
    next_effect_id: u64,
    identities: BTreeMap<IdentityId, IdentityState>,
    in_flight: BTreeMap<EffectId, InFlight>,
}

/// One identity's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct IdentityState {
    config: IdentityConfig,
    sessions: BTreeMap<SessionId, SessionState>,
    /// Which attach of each session is the current one: a failure reported for a
    /// push or verdict sent to an earlier attach does not detach the session.
    generations: BTreeMap<SessionId, u64>,
    attaches: u64,
    last_room: Option<RoomId>,
    prompts: Vec<Prompt>,
    next_serial: u64,
    next_seq: u64,
    log: BTreeMap<EventId, LogEntry>,
    log_order: VecDeque<EventId>,
    queue: VecDeque<Queued>,
    /// Messages of retired prompts, oldest first, at most `config.prompt_memory`:
    /// the agent may touch these as little as a live prompt's.
    #[serde(default)]
    retired_prompts: VecDeque<EventId>,
    /// The identity's membership of each room it heard of (`Input::Membership`).
    /// Only events of a room in `Joined` are input.
    #[serde(default)]
    rooms: BTreeMap<RoomId, RoomState>,
    /// Events dropped as `NotJoined`, oldest first, at most [`HISTORY_MEMORY`]: a sync
    /// that delivers them again after the join (a response replayed after a crash)
    /// must not make history input.
    #[serde(default)]
    history: VecDeque<EventId>,
    /// Undecryptable events from allowed senders waiting for their room key, oldest
    /// first, at most [`UNDECRYPTABLE_MEMORY`] (see `Input::Undecryptable`).
    #[serde(default)]
    undecryptable: VecDeque<Parked>,
    /// Rooms whose sync gap was cut while no session was live, oldest first: told to
    /// the next session that attaches (see `Input::GapCut`).
    #[serde(default)]
    gap_cuts: Vec<RoomId>,
    /// What was delivered to each session in [`SessionState::Attaching`], oldest
    /// first: pushed when its grace ends, or delivered again (elsewhere or to the
    /// queue) when it detaches first.
    #[serde(default)]
    held: BTreeMap<SessionId, Vec<Queued>>,
    /// Live sessions not pushed to since they became live: their next push carries
    /// [`MetaKey::Security`] (Claude Code leaves the server's instructions out of the
    /// first model call a channel event starts).
    #[serde(default)]
    unbriefed: BTreeSet<SessionId>,
}

/// How many undecryptable events each identity parks at once; beyond it the oldest
/// is told as undecryptable at once.
pub const UNDECRYPTABLE_MEMORY: usize = 1_000;

/// An undecryptable event waiting for its room key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Parked {
    pub event: Undecryptable,
    /// When the sessions are told it exists, unless it came decrypted before.
    pub until: Millis,
}

/// How many events dropped as history (`NotJoined`) each identity remembers. A sync
/// response carries at most its timeline limit per room (50 in the server's filter).
pub const HISTORY_MEMORY: usize = 1_000;

/// The identity's membership of one room, as the core knows it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RoomState {
    /// Invited by `by`, and not joining (`by` is no allowed sender, or the join
    /// failed).
    Invited { by: UserId },
    /// A join on `by`'s invite is in flight or done; the join event has not come.
    Joining { by: UserId },
    /// Joined: the room's events are input.
    Joined,
    /// Left, kicked or banned.
    Left,
}

/// Whether a session's stream is open, and whether it is pushed to yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// Attached, inside its attach grace ([`IdentityConfig::attach_grace_ms`]):
    /// nothing is pushed to it before `until` (ms). What is delivered to it
    /// meanwhile is held, in order, and pushed when the grace ends, after its
    /// verdicts, gap cuts and replay.
    Attaching {
        until: Millis,
    },
    /// Pushed to.
    Live,
    Detached,
}

/// A permission prompt, owned by the session that asked.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Prompt {
    /// The session that asked; the only one a verdict goes to.
    pub session: SessionId,
    /// Unique per identity, increasing: tells a re-issued prompt from the old one.
    pub serial: u64,
    pub request: PermissionRequest,
    pub room: RoomId,
    pub created_at: Millis,
    /// After this instant an unanswered prompt expires.
    pub expires_at: Millis,
    pub phase: Phase,
}

/// Where a prompt is in its life. Expired and delivered prompts are gone.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum Phase {
    /// Being posted; not answerable until Matrix gave it an event id.
    Posting { post: EffectId },
    /// Posted as `message`; waiting for an answer.
    Pending { message: EventId },
    /// Approvers reacted; the verdict is taken when the window ends at `until`, on the
    /// votes still there. Votes are in arrival order, keyed by reaction event.
    Settling {
        message: EventId,
        until: Millis,
        votes: Vec<(EventId, Vote)>,
    },
    /// Answered; waiting for the owner session to be live.
    Decided {
        message: EventId,
        decision: Decision,
    },
    /// Answered; the verdict send `send` is in flight.
    Delivering {
        message: EventId,
        decision: Decision,
        send: EffectId,
    },
}

impl Phase {
    /// The prompt message, once posted.
    pub fn message(&self) -> Option<&EventId> {
        match self {
            Phase::Posting { .. } => None,
            Phase::Pending { message }
            | Phase::Settling { message, .. }
            | Phase::Decided { message, .. }
            | Phase::Delivering { message, .. } => Some(message),
        }
    }

    /// Whether an approver can still answer.
    pub fn is_answerable(&self) -> bool {
        matches!(self, Phase::Pending { .. } | Phase::Settling { .. })
    }
}

/// An approver's reaction on a prompt.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Vote {
    pub voter: UserId,
    /// The raw key, for display (`yes` for a text allow that joined the window).
    pub key: String,
    pub behavior: Behavior,
    /// A text allow typed while a deny was settling, rather than a reaction.
    pub by_text: bool,
}

/// The delivery log's record of one event that passed the gate.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LogEntry {
    /// Arrival order within the identity.
    pub seq: u64,
    pub sender: UserId,
    pub record: Record,
}

/// What became of a logged event.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum Record {
    /// Pushed (or queued to be): `delivered` holds the sessions it was sent to.
    Pushed {
        kind: PushKind,
        delivered: BTreeSet<SessionId>,
        acked: bool,
        /// Redacted in Matrix: never delivered again.
        redacted: bool,
    },
    /// A text verdict; never pushed.
    Verdict,
    /// A vote on a prompt; never pushed.
    Vote,
    /// Passed the gate but was not pushed (see the `Dropped` effect emitted then).
    NotPushed,
}

/// An event waiting for a session.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Queued {
    pub seq: u64,
    pub event_id: EventId,
    pub notification: ChannelNotification,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum InFlight {
    Push {
        identity: IdentityId,
        session: SessionId,
        generation: u64,
        event_id: Option<EventId>,
        seq: u64,
        notification: ChannelNotification,
    },
    Post {
        identity: IdentityId,
        room: RoomId,
        request: PermissionRequest,
        /// Set when the prompt is retired while still being posted: what the posted
        /// message then shows.
        retired: Option<PromptText>,
    },
    Write {
        identity: IdentityId,
        call: CallId,
    },
    Join {
        identity: IdentityId,
        room: RoomId,
        by: UserId,
        /// The identity's own membership event of the room came since: whatever
        /// the join's outcome, the room is as that event left it.
        #[serde(default)]
        settled: bool,
    },
    Verdict {
        identity: IdentityId,
        serial: u64,
        generation: u64,
        /// What the prompt message shows once the send succeeds, even if the
        /// prompt was evicted or replaced meanwhile.
        room: RoomId,
        message: EventId,
        request: PermissionRequest,
        decision: Decision,
    },
}

/// Where effects go while one input is handled.
struct Out<'a> {
    now: Millis,
    identity: IdentityId,
    next_effect_id: &'a mut u64,
    in_flight: &'a mut BTreeMap<EffectId, InFlight>,
    effects: &'a mut Vec<Effect>,
}

impl Out<'_> {
    fn id(&mut self) -> EffectId {
        let id = EffectId(*self.next_effect_id);
        *self.next_effect_id += 1;
        id
    }

    fn drop(&mut self, event_id: Option<&EventId>, reason: DropReason) {
        self.effects.push(Effect::Dropped {
            identity: Some(self.identity.clone()),
            event_id: event_id.cloned(),
            reason,
        });
    }

    fn notice(&mut self, room: &RoomId, in_reply_to: &EventId, text: String) {
        self.effects.push(Effect::Notice {
            identity: self.identity.clone(),
            room: room.clone(),
            in_reply_to: in_reply_to.clone(),
            text,
        });
    }
}

impl Channel {
    /// An empty core with no identities.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an identity, or replaces its settings (the operator's reload); its state
    /// is kept. Errors: the settings do not [`IdentityConfig::validate`].
    pub fn add_identity(
        &mut self,
        identity: IdentityId,
        config: IdentityConfig,
    ) -> Result<(), ConfigError> {
        config.validate()?;
        match self.identities.get_mut(&identity) {
            Some(state) => state.config = config,
            None => {
                self.identities.insert(identity, IdentityState::new(config));
            }
        }
        Ok(())
    }

    /// The current time as the core knows it: the largest `now` handled so far.
    pub fn now(&self) -> Millis {
        self.now
    }

    /// One identity's state, for the server's tools and for properties.
    pub fn identity(&self, identity: &IdentityId) -> Option<&IdentityState> {
        self.identities.get(identity)
    }

    /// All identities.
    pub fn identities(&self) -> impl Iterator<Item = (&IdentityId, &IdentityState)> {
        self.identities.iter()
    }

    /// How many effects are waiting for an outcome.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// The ids of the effects waiting for an outcome, in issue order. (A server that
    /// restarts says so with [`Input::Restarted`]; the core decides what becomes of
    /// each.)
    pub fn in_flight_ids(&self) -> Vec<EffectId> {
        self.in_flight.keys().copied().collect()
    }

    /// The earliest instant at which a timer fires (a settle window ends, a prompt
    /// expires, an undecryptable event's grace period ends, or a session's attach
    /// grace), if any. The server calls [`Channel::handle`] with [`Input::Tick`]
    /// then (or earlier).
    pub fn next_deadline(&self) -> Option<Millis> {
        let prompts = self
            .identities
            .values()
            .flat_map(|state| state.prompts.iter())
            .filter_map(|prompt| match &prompt.phase {
                Phase::Settling { until, .. } => Some((*until).min(prompt.expires_at)),
                Phase::Posting { .. } | Phase::Pending { .. } => Some(prompt.expires_at),
                Phase::Decided { .. } | Phase::Delivering { .. } => None,
            });
        let parked = self
            .identities
            .values()
            .flat_map(|state| state.undecryptable.iter().map(|p| p.until));
        let attaching = self
            .identities
            .values()
            .flat_map(|state| state.sessions.values())
            .filter_map(|session| match session {
                SessionState::Attaching { until } => Some(*until),
                SessionState::Live | SessionState::Detached => None,
            });
        prompts.chain(parked).chain(attaching).min()
    }

    /// Handles one input at `now` (milliseconds; a `now` earlier than one already seen
    /// is taken as that one, so time never runs backwards). Timers that are due fire
    /// first, then the input is applied. Returns the effects in the order to execute.
    pub fn handle(&mut self, now: Millis, input: Input) -> Vec<Effect> {
        self.now = self.now.max(now);
        let now = self.now;
        let mut effects = Vec::new();
        for (identity, state) in self.identities.iter_mut() {
            let mut out = Out {
                now,
                identity: identity.clone(),
                next_effect_id: &mut self.next_effect_id,
                in_flight: &mut self.in_flight,
                effects: &mut effects,
            };
            state.fire_timers(&mut out);
        }
        let (identity, event) = match input {
            Input::Tick => return effects,
            Input::Restarted => {
                self.restarted(now, &mut effects);
                return effects;
            }
            Input::Completed { id, outcome } => {
                match self.in_flight.remove(&id) {
                    Some(flight) => self.complete(now, id, flight, outcome, &mut effects),
                    None => effects.push(Effect::Dropped {
                        identity: None,
                        event_id: None,
                        reason: DropReason::StaleOutcome,
                    }),
                }
                return effects;
            }
            Input::Attach { identity, session } => (identity, Event::Attach(session)),
            Input::Detach { identity, session } => (identity, Event::Detach(session)),
            Input::Message { identity, message } => (identity, Event::Message(message)),
            Input::Reaction { identity, reaction } => (identity, Event::Reaction(reaction)),
            Input::Redaction {
                identity,
                redaction,
            } => (identity, Event::Redaction(redaction)),
            Input::PermissionRequest {
                identity,
                session,
                request,
            } => (identity, Event::Request(session, request)),
            Input::Acknowledge {
                identity,
                session,
                event_id,
            } => (identity, Event::Ack(session, event_id)),
            Input::InvalidPermissionRequest {
                identity,
                session,
                error,
            } => (identity, Event::InvalidRequest(session, error)),
            Input::AgentWrite {
                identity,
                call,
                write,
            } => (identity, Event::Write(call, write)),
            Input::Membership {
                identity,
                room,
                event_id,
                user,
                membership,
            } => (
                identity,
                Event::Membership(room, event_id, user, membership),
            ),
            Input::NotInput {
                identity,
                event_id,
                sender,
                what,
                ..
            } => (identity, Event::NotInput(event_id, sender, what)),
            Input::Undecryptable { identity, event } => (identity, Event::Undecryptable(event)),
            Input::GapCut { identity, room } => (identity, Event::GapCut(room)),
        };
        // Every identity's prompts are off limits to every identity's agent: one
        // identity's agent touching another's prompt, or naming its open id, is
        // refused as its own would be (identities are isolated).
        let foreign = match &event {
            Event::Write(_, write) => self
                .identities
                .iter()
                .filter(|(other, _)| **other != identity)
                .find_map(|(_, other)| other.judge_prompt_rules(write).err()),
            _ => None,
        };
        let Some(state) = self.identities.get_mut(&identity) else {
            if let Event::Write(call, _) = event {
                effects.push(Effect::WriteRefused {
                    identity,
                    call,
                    reason: DropReason::UnknownIdentity,
                });
                return effects;
            }
            effects.push(Effect::Dropped {
                identity: Some(identity),
                event_id: None,
                reason: DropReason::UnknownIdentity,
            });
            return effects;
        };
        let mut out = Out {
            now,
            identity,
            next_effect_id: &mut self.next_effect_id,
            in_flight: &mut self.in_flight,
            effects: &mut effects,
        };
        if let Some((event_id, sender)) = event.matrix_event() {
            state.decrypted(event_id, sender);
        }
        match event {
            Event::Attach(session) => state.attach(session, &mut out),
            Event::Detach(session) => state.detach(&session, &mut out),
            Event::Message(message) => state.on_message(message, &mut out),
            Event::Reaction(reaction) => state.on_reaction(reaction, &mut out),
            Event::Redaction(redaction) => state.on_redaction(redaction, &mut out),
            Event::Request(session, request) => state.on_request(session, request, &mut out),
            Event::Ack(session, event_id) => state.on_ack(session.as_ref(), &event_id, &mut out),
            Event::InvalidRequest(session, error) => {
                state.on_invalid_request(session, error, &mut out)
            }
            Event::Write(call, write) => state.on_agent_write(call, write, foreign, &mut out),
            Event::Membership(room, event_id, user, membership) => {
                state.on_membership(room, event_id, user, membership, &mut out)
            }
            Event::NotInput(event_id, sender, what) => {
                state.on_not_input(event_id, sender, what, &mut out)
            }
            Event::Undecryptable(event) => state.on_undecryptable(event, &mut out),
            Event::GapCut(room) => state.on_gap_cut(room, &mut out),
        }
        effects
    }

    /// See [`Input::Restarted`]. Sessions are detached first, so what the failed
    /// pushes carried goes back to the queue rather than to a stream that is gone.
    fn restarted(&mut self, now: Millis, effects: &mut Vec<Effect>) {
        for (identity, state) in self.identities.iter_mut() {
            let mut out = Out {
                now,
                identity: identity.clone(),
                next_effect_id: &mut self.next_effect_id,
                in_flight: &mut self.in_flight,
                effects,
            };
            // Every session is detached before any held push is given back, or one
            // would be delivered to a session the loop has not reached yet.
            for session in state.sessions.values_mut() {
                *session = SessionState::Detached;
            }
            let sessions: Vec<SessionId> = state.sessions.keys().cloned().collect();
            for session in sessions {
                state.set_detached(&session, &mut out);
            }
        }
        let ids: Vec<EffectId> = self.in_flight.keys().copied().collect();
        for id in ids {
            match self.in_flight.get(&id) {
                Some(InFlight::Post {
                    identity,
                    room,
                    request,
                    ..
                }) => {
                    let Some(state) = self.identities.get(identity) else {
                        continue;
                    };
                    effects.push(Effect::PostPrompt {
                        id,
                        identity: identity.clone(),
                        room: room.clone(),
                        request_id: request.request_id.clone(),
                        text: render_prompt(&state.config, request),
                    });
                }
                Some(_) => {
                    if let Some(flight) = self.in_flight.remove(&id) {
                        let outcome = Outcome::Failed {
                            reason: "the server restarted".to_owned(),
                        };
                        self.complete(now, id, flight, outcome, effects);
                    }
                }
                None => {}
            }
        }
    }

    fn complete(
        &mut self,
        now: Millis,
        id: EffectId,
        flight: InFlight,
        outcome: Outcome,
        effects: &mut Vec<Effect>,
    ) {
        let identity = match &flight {
            InFlight::Push { identity, .. }
            | InFlight::Post { identity, .. }
            | InFlight::Write { identity, .. }
            | InFlight::Join { identity, .. }
            | InFlight::Verdict { identity, .. } => identity.clone(),
        };
        let Some(state) = self.identities.get_mut(&identity) else {
            return;
        };
        let mut out = Out {
            now,
            identity,
            next_effect_id: &mut self.next_effect_id,
            in_flight: &mut self.in_flight,
            effects,
        };
        match flight {
            InFlight::Push {
                session,
                generation,
                event_id,
                seq,
                notification,
                ..
            } => {
                if matches!(outcome, Outcome::Failed { .. }) {
                    state.lost_stream(&session, generation, &mut out);
                    state.push_failed(&session, event_id, seq, notification, &mut out);
                }
            }
            InFlight::Post {
                room,
                request,
                retired,
                ..
            } => {
                let shown =
                    retired.unwrap_or_else(|| render_outcome(&request, PromptOutcome::Expired));
                state.post_completed(id, room, shown, outcome, &mut out)
            }
            // The tool call is answered from the outcome by the server; the core
            // only stops waiting for it.
            InFlight::Write { .. } => {}
            InFlight::Join {
                room, by, settled, ..
            } => {
                if let Outcome::Failed { .. } = outcome {
                    state.join_failed(room, by, settled, &mut out);
                }
            }
            InFlight::Verdict {
                serial,
                generation,
                room,
                message,
                request,
                decision,
                ..
            } => {
                let shown = render_outcome(&request, PromptOutcome::Decided(&decision));
                state.verdict_completed(
                    id,
                    serial,
                    generation,
                    outcome,
                    (room, message, shown),
                    &mut out,
                )
            }
        }
    }
}

/// An input for one identity, unpacked. Moved once, like [`Input`].
#[allow(clippy::large_enum_variant)]
enum Event {
    Attach(SessionId),
    Detach(SessionId),
    Message(Message),
    Reaction(Reaction),
    Redaction(Redaction),
    Request(SessionId, PermissionRequest),
    Ack(Option<SessionId>, EventId),
    InvalidRequest(SessionId, String),
    Write(CallId, AgentWrite),
    Membership(RoomId, Option<EventId>, UserId, Membership),
    NotInput(Option<EventId>, Option<UserId>, String),
    Undecryptable(Undecryptable),
    GapCut(RoomId),
}

impl Event {
    /// The Matrix event this input is, with its sender, when it could be the
    /// decryption of an event that came undecryptable before.
    fn matrix_event(&self) -> Option<(&EventId, Option<&UserId>)> {
        match self {
            Event::Message(m) => Some((&m.event_id, Some(&m.sender))),
            Event::Reaction(r) => Some((&r.event_id, Some(&r.sender))),
            Event::Redaction(r) => Some((&r.event_id, Some(&r.sender))),
            Event::NotInput(Some(id), sender, _) => Some((id, sender.as_ref())),
            _ => None,
        }
    }
}

impl IdentityState {
    fn new(config: IdentityConfig) -> Self {
        Self {
            config,
            sessions: BTreeMap::new(),
            generations: BTreeMap::new(),
            attaches: 0,
            last_room: None,
            prompts: Vec::new(),
            next_serial: 0,
            next_seq: 0,
            log: BTreeMap::new(),
            log_order: VecDeque::new(),
            queue: VecDeque::new(),
            retired_prompts: VecDeque::new(),
            rooms: BTreeMap::new(),
            history: VecDeque::new(),
            undecryptable: VecDeque::new(),
            gap_cuts: Vec::new(),
            held: BTreeMap::new(),
            unbriefed: BTreeSet::new(),
        }
    }

    /// Rooms whose sync gap was cut while no session was live, to tell the next
    /// session that attaches (see `Input::GapCut`).
    pub fn gap_cuts(&self) -> &[RoomId] {
        &self.gap_cuts
    }

    /// The identity's membership of each room it heard of.
    pub fn rooms(&self) -> &BTreeMap<RoomId, RoomState> {
        &self.rooms
    }

    /// The undecryptable events waiting for their room key, oldest first.
    pub fn undecryptable(&self) -> &VecDeque<Parked> {
        &self.undecryptable
    }

    fn is_joined(&self, room: &RoomId) -> bool {
        self.rooms.get(room) == Some(&RoomState::Joined)
    }

    /// Whether the event is input by its room: the room is joined now and the event
    /// did not arrive before the join (history delivered again after it). An event
    /// that is not is remembered as history, once.
    fn is_history(&mut self, room: &RoomId, event_id: &EventId) -> bool {
        if self.is_joined(room) && !self.history.contains(event_id) {
            return false;
        }
        if !self.history.contains(event_id) {
            self.history.push_back(event_id.clone());
            if self.history.len() > HISTORY_MEMORY {
                self.history.pop_front();
            }
        }
        true
    }

    /// The operator's settings.
    pub fn config(&self) -> &IdentityConfig {
        &self.config
    }

    /// Known sessions and whether each is live.
    pub fn sessions(&self) -> &BTreeMap<SessionId, SessionState> {
        &self.sessions
    }

    /// The room an allowed sender last wrote in.
    pub fn last_room(&self) -> Option<&RoomId> {
        self.last_room.as_ref()
    }

    /// Live prompts, oldest first.
    pub fn prompts(&self) -> &[Prompt] {
        &self.prompts
    }

    /// What was delivered to each session inside its attach grace, oldest first.
    pub fn held(&self) -> &BTreeMap<SessionId, Vec<Queued>> {
        &self.held
    }

    /// Events waiting for a session, oldest first.
    pub fn queue(&self) -> &VecDeque<Queued> {
        &self.queue
    }

    /// The delivery log entry of `event_id`, if it is still remembered.
    pub fn log_entry(&self, event_id: &EventId) -> Option<&LogEntry> {
        self.log.get(event_id)
    }

    /// Whether `event_id` is a permission prompt's message: of a prompt the core
    /// holds (in any phase), or of one of the last retired ones. The one definition
    /// the agent's writes are judged by.
    pub fn is_prompt_message(&self, event_id: &EventId) -> bool {
        self.prompts
            .iter()
            .any(|p| p.phase.message() == Some(event_id))
            || self.retired_prompts.contains(event_id)
    }

    /// The request ids of the prompts the core holds, in any phase (being posted,
    /// pending, settling, decided or being delivered): the ids the agent's text may
    /// not name.
    pub fn open_request_ids(&self) -> Vec<RequestId> {
        let mut ids: Vec<RequestId> = self
            .prompts
            .iter()
            .map(|p| p.request.request_id.clone())
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// Remembers a retired prompt's message once, forgetting the oldest beyond
    /// `prompt_memory`.
    fn remember_prompt(&mut self, message: EventId) {
        // A prompt evicted while its verdict was in flight is retired, then its
        // send completes: one slot, not two (a duplicate pushed an older one out).
        if self.retired_prompts.contains(&message) {
            return;
        }
        self.retired_prompts.push_back(message);
        while self.retired_prompts.len() > self.config.prompt_memory {
            self.retired_prompts.pop_front();
        }
    }

    fn is_live(&self, session: &SessionId) -> bool {
        self.sessions.get(session) == Some(&SessionState::Live)
    }

    fn live_sessions(&self) -> Vec<SessionId> {
        self.sessions
            .iter()
            .filter(|(_, state)| **state == SessionState::Live)
            .map(|(session, _)| session.clone())
            .collect()
    }

    /// Whether `session`'s stream is open: live, or inside its attach grace.
    fn is_attached(&self, session: &SessionId) -> bool {
        matches!(
            self.sessions.get(session),
            Some(SessionState::Live | SessionState::Attaching { .. })
        )
    }

    /// The sessions delivered to: the live ones and the attaching ones.
    fn attached_sessions(&self) -> Vec<SessionId> {
        self.sessions
            .iter()
            .filter(|(session, _)| self.is_attached(session))
            .map(|(session, _)| session.clone())
            .collect()
    }

    /// Marks `session` detached; what was held for it is delivered again, to the
    /// sessions that lack it or to the queue.
    fn set_detached(&mut self, session: &SessionId, out: &mut Out<'_>) {
        if let Some(state) = self.sessions.get_mut(session) {
            *state = SessionState::Detached;
        }
        self.unbriefed.remove(session);
        for held in self.held.remove(session).unwrap_or_default() {
            self.push_failed(
                session,
                Some(held.event_id),
                held.seq,
                held.notification,
                out,
            );
        }
    }

    // ----- sessions -------------------------------------------------------------

    /// A session's stream opened. It is live at once when the grace is 0, else when
    /// the grace ends ([`IdentityState::fire_attach_graces`]); attaching again restarts
    /// the grace and keeps what is held.
    fn attach(&mut self, session: SessionId, out: &mut Out<'_>) {
        self.attaches += 1;
        self.generations.insert(session.clone(), self.attaches);
        if self.config.attach_grace_ms == 0 {
            return self.become_live(session, out);
        }
        let until = out.now.saturating_add(self.config.attach_grace_ms);
        self.unbriefed.remove(&session);
        self.sessions
            .insert(session, SessionState::Attaching { until });
    }

    /// The attach grace ended: its decided verdicts are sent, then the gap cuts, the
    /// queue's replay and what was held for it are pushed, in that order.
    fn become_live(&mut self, session: SessionId, out: &mut Out<'_>) {
        self.sessions.insert(session.clone(), SessionState::Live);
        self.unbriefed.insert(session.clone());
        let decided: Vec<u64> = self
            .prompts
            .iter()
            .filter(|p| p.session == session && matches!(p.phase, Phase::Decided { .. }))
            .map(|p| p.serial)
            .collect();
        for serial in decided {
            self.start_delivery(serial, out);
        }
        for room in std::mem::take(&mut self.gap_cuts) {
            self.push(&session, None, 0, render_gap_cut(&room), out);
        }
        self.replay(&session, out);
        for held in self.held.remove(&session).unwrap_or_default() {
            self.push(
                &session,
                Some(held.event_id),
                held.seq,
                held.notification,
                out,
            );
        }
    }

    /// Every session whose attach grace is over becomes live.
    fn fire_attach_graces(&mut self, out: &mut Out<'_>) {
        let due: Vec<SessionId> = self
            .sessions
            .iter()
            .filter(|(_, state)| {
                matches!(state, SessionState::Attaching { until } if *until <= out.now)
            })
            .map(|(session, _)| session.clone())
            .collect();
        for session in due {
            self.become_live(session, out);
        }
    }

    /// See [`Input::GapCut`]: every live session is told now; with none, or with one
    /// inside its attach grace, the next one to become live is (a room's cut is kept
    /// once).
    fn on_gap_cut(&mut self, room: RoomId, out: &mut Out<'_>) {
        if !self.is_joined(&room) {
            return out.drop(None, DropReason::NotJoined);
        }
        out.drop(None, DropReason::GapCut { room: room.clone() });
        let live = self.live_sessions();
        let attaching = self
            .sessions
            .values()
            .any(|state| matches!(state, SessionState::Attaching { .. }));
        if (live.is_empty() || attaching) && !self.gap_cuts.contains(&room) {
            self.gap_cuts.push(room.clone());
        }
        for session in live {
            self.push(&session, None, 0, render_gap_cut(&room), out);
        }
    }

    fn detach(&mut self, session: &SessionId, out: &mut Out<'_>) {
        if self.sessions.contains_key(session) {
            self.set_detached(session, out);
        } else {
            out.drop(None, DropReason::UnknownSession);
        }
    }

    /// Replays the queue to `session`, oldest first, cut to the replay budget (the
    /// newest events are kept; a notice says how many older ones were omitted).
    fn replay(&mut self, session: &SessionId, out: &mut Out<'_>) {
        let omitted = self.queue.len().saturating_sub(self.config.replay_budget);
        if omitted > 0 {
            self.queue.drain(..omitted);
            out.drop(None, DropReason::ReplayCut { omitted });
            self.push(session, None, 0, render_replay_cut(omitted), out);
        }
        for queued in std::mem::take(&mut self.queue) {
            let mut notification = queued.notification.clone();
            notification.meta.set(MetaKey::Replayed, crate::meta::FLAG);
            self.record_delivery(&queued.event_id, session);
            self.push_raw(
                session,
                Some(queued.event_id),
                queued.seq,
                notification,
                queued.notification,
                out,
            );
        }
    }

    fn generation(&self, session: &SessionId) -> u64 {
        self.generations.get(session).copied().unwrap_or(0)
    }

    /// A send to `session`'s attach `generation` failed: that stream is gone. The
    /// session is detached only if it has not attached again since.
    fn lost_stream(&mut self, session: &SessionId, generation: u64, out: &mut Out<'_>) {
        if self.generation(session) == generation && self.sessions.contains_key(session) {
            self.set_detached(session, out);
        }
    }

    // ----- delivery -------------------------------------------------------------

    fn log(
        &mut self,
        event_id: &EventId,
        sender: &UserId,
        record: Record,
        out: &mut Out<'_>,
    ) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        let entry = LogEntry {
            seq,
            sender: sender.clone(),
            record,
        };
        self.log.insert(event_id.clone(), entry);
        self.log_order.push_back(event_id.clone());
        while self.log_order.len() > self.config.log_cap {
            if let Some(old) = self.log_order.pop_front() {
                self.log.remove(&old);
                self.forget_queued(&old, out);
            }
        }
        seq
    }

    /// An event the log no longer remembers cannot be redacted, acknowledged or
    /// deduplicated any more, so it leaves the queue too (visibly).
    fn forget_queued(&mut self, event_id: &EventId, out: &mut Out<'_>) {
        let before = self.queue.len();
        self.queue.retain(|q| q.event_id != *event_id);
        if self.queue.len() < before {
            out.drop(Some(event_id), DropReason::QueueFull);
        }
    }

    fn record_delivery(&mut self, event_id: &EventId, session: &SessionId) {
        if let Some(LogEntry {
            record: Record::Pushed { delivered, .. },
            ..
        }) = self.log.get_mut(event_id)
        {
            delivered.insert(session.clone());
        }
    }

    /// Delivers a logged event to every live session that does not have it, or queues
    /// it when none is live.
    fn deliver(
        &mut self,
        event_id: &EventId,
        seq: u64,
        notification: ChannelNotification,
        out: &mut Out<'_>,
    ) {
        let have = match self.log.get(event_id) {
            Some(LogEntry {
                record: Record::Pushed { delivered, .. },
                ..
            }) => delivered.clone(),
            _ => BTreeSet::new(),
        };
        let targets: Vec<SessionId> = self
            .attached_sessions()
            .into_iter()
            .filter(|s| !have.contains(s))
            .collect();
        if targets.is_empty() {
            if have.is_empty() {
                self.enqueue(event_id, seq, notification, out);
            }
            return;
        }
        for session in targets {
            self.record_delivery(event_id, &session);
            if !self.is_live(&session) {
                self.held.entry(session).or_default().push(Queued {
                    seq,
                    event_id: event_id.clone(),
                    notification: notification.clone(),
                });
                continue;
            }
            self.push(
                &session,
                Some(event_id.clone()),
                seq,
                notification.clone(),
                out,
            );
        }
    }

    fn enqueue(
        &mut self,
        event_id: &EventId,
        seq: u64,
        notification: ChannelNotification,
        out: &mut Out<'_>,
    ) {
        let at = self.queue.partition_point(|q| q.seq < seq);
        self.queue.insert(
            at,
            Queued {
                seq,
                event_id: event_id.clone(),
                notification,
            },
        );
        while self.queue.len() > self.config.queue_cap {
            if let Some(old) = self.queue.pop_front() {
                out.drop(Some(&old.event_id), DropReason::QueueFull);
            }
        }
    }

    fn push(
        &mut self,
        session: &SessionId,
        event_id: Option<EventId>,
        seq: u64,
        notification: ChannelNotification,
        out: &mut Out<'_>,
    ) {
        self.push_raw(
            session,
            event_id,
            seq,
            notification.clone(),
            notification,
            out,
        );
    }

    /// Emits a push of `sent`; `base` is what goes back to the queue if it fails.
    fn push_raw(
        &mut self,
        session: &SessionId,
        event_id: Option<EventId>,
        seq: u64,
        sent: ChannelNotification,
        base: ChannelNotification,
        out: &mut Out<'_>,
    ) {
        let mut sent = sent;
        if self.unbriefed.remove(session) {
            sent.meta
                .set(MetaKey::Security, crate::meta::SECURITY_POINTER);
        }
        let id = out.id();
        out.in_flight.insert(
            id,
            InFlight::Push {
                identity: out.identity.clone(),
                session: session.clone(),
                generation: self.generation(session),
                event_id: event_id.clone(),
                seq,
                notification: base,
            },
        );
        out.effects.push(Effect::Push {
            id,
            identity: out.identity.clone(),
            session: session.clone(),
            event_id,
            notification: sent,
        });
    }

    /// A push failed. The event goes to every live session that lacks it (the same
    /// session too, if it attached again since), or back to the queue when nobody
    /// has it, unless the agent acknowledged it or it was redacted.
    fn push_failed(
        &mut self,
        session: &SessionId,
        event_id: Option<EventId>,
        seq: u64,
        notification: ChannelNotification,
        out: &mut Out<'_>,
    ) {
        let Some(event_id) = event_id else { return };
        let Some(LogEntry {
            record:
                Record::Pushed {
                    kind,
                    delivered,
                    acked,
                    redacted,
                },
            ..
        }) = self.log.get_mut(&event_id)
        else {
            return;
        };
        // The push of what the log no longer holds for this event (its undecryptable
        // push, after the event came decrypted) is not sent again.
        if notification.meta.get(MetaKey::Kind) != Some(kind.as_str()) {
            return;
        }
        delivered.remove(session);
        if !*acked && !*redacted {
            self.deliver(&event_id, seq, notification, out);
        }
    }

    // ----- Matrix events --------------------------------------------------------

    fn on_message(&mut self, message: Message, out: &mut Out<'_>) {
        if self.is_history(&message.room, &message.event_id) {
            return out.drop(Some(&message.event_id), DropReason::NotJoined);
        }
        let gate = self.config.gate(&message.sender);
        let class = classify_message(gate, &message);
        if matches!(gate, Gate::Own | Gate::Stranger) {
            if let MessageClass::Drop(reason) = class {
                out.drop(Some(&message.event_id), reason);
            }
            return;
        }
        if self.log.contains_key(&message.event_id) {
            out.drop(Some(&message.event_id), DropReason::Duplicate);
            return;
        }
        if message
            .content
            .as_ref()
            .is_some_and(|c| c.msgtype != MsgType::Notice)
        {
            self.last_room = Some(message.room.clone());
        }
        match class {
            MessageClass::Drop(reason) => {
                self.log(&message.event_id, &message.sender, Record::NotPushed, out);
                out.drop(Some(&message.event_id), reason);
            }
            MessageClass::Verdict(verdict) => {
                self.log(&message.event_id, &message.sender, Record::Verdict, out);
                self.on_text_verdict(&message, verdict, out);
            }
            MessageClass::Chat(content) => {
                let notification = render_message(&self.config, &message, content);
                self.log_and_deliver(
                    &message.event_id,
                    &message.sender,
                    PushKind::Message,
                    notification,
                    out,
                );
            }
            MessageClass::Edit {
                original,
                new_content,
            } => {
                let accepted = matches!(
                    self.log.get(original),
                    Some(LogEntry { sender, record: Record::Pushed { kind: PushKind::Message, .. }, .. })
                        if *sender == message.sender
                );
                if accepted {
                    let notification = render_edit(&self.config, &message, original, new_content);
                    self.log_and_deliver(
                        &message.event_id,
                        &message.sender,
                        PushKind::Edit,
                        notification,
                        out,
                    );
                } else {
                    self.log(&message.event_id, &message.sender, Record::NotPushed, out);
                    out.drop(Some(&message.event_id), DropReason::EditRejected);
                }
            }
        }
    }

    fn log_and_deliver(
        &mut self,
        event_id: &EventId,
        sender: &UserId,
        kind: PushKind,
        notification: ChannelNotification,
        out: &mut Out<'_>,
    ) {
        let record = Record::Pushed {
            kind,
            delivered: BTreeSet::new(),
            acked: false,
            redacted: false,
        };
        let seq = self.log(event_id, sender, record, out);
        self.deliver(event_id, seq, notification, out);
    }

    fn on_reaction(&mut self, reaction: Reaction, out: &mut Out<'_>) {
        if self.is_history(&reaction.room, &reaction.event_id) {
            return out.drop(Some(&reaction.event_id), DropReason::NotJoined);
        }
        let gate = self.config.gate(&reaction.sender);
        let prompt = self
            .prompts
            .iter()
            .position(|p| p.phase.message() == Some(&reaction.relates_to));
        let class = classify_reaction(
            gate,
            &self.config.reaction_keys,
            prompt.is_some(),
            &reaction.key,
        );
        if let ReactionClass::Drop(reason @ (DropReason::OwnEvent | DropReason::Stranger)) = class {
            out.drop(Some(&reaction.event_id), reason);
            return;
        }
        if self.log.contains_key(&reaction.event_id) {
            out.drop(Some(&reaction.event_id), DropReason::Duplicate);
            return;
        }
        // A vote from a device the settings do not admit is no vote; the notice
        // replies to the prompt it was meant for.
        if let (ReactionClass::Vote(_), Some(_)) = (&class, prompt) {
            if let Err(reason) = self.config.verdict_devices.admits(reaction.device) {
                self.log(&reaction.event_id, &reaction.sender, Record::NotPushed, out);
                let text = refused_device_text(&reason, "This reaction");
                out.notice(&reaction.room, &reaction.relates_to, text);
                return out.drop(Some(&reaction.event_id), reason);
            }
        }
        match (class, prompt) {
            (ReactionClass::Vote(behavior), Some(index)) => {
                self.log(&reaction.event_id, &reaction.sender, Record::Vote, out);
                let vote = Vote {
                    voter: reaction.sender.clone(),
                    key: reaction.key.clone(),
                    behavior,
                    by_text: false,
                };
                self.on_vote(index, reaction.event_id, vote, out);
            }
            (ReactionClass::Drop(reason), _) => {
                self.log(&reaction.event_id, &reaction.sender, Record::NotPushed, out);
                out.drop(Some(&reaction.event_id), reason);
            }
            // A vote is only ever classified on a prompt, so `(Vote, None)` is chat.
            (ReactionClass::Chat | ReactionClass::Vote(_), _) => {
                let notification = render_reaction(&reaction);
                self.log_and_deliver(
                    &reaction.event_id,
                    &reaction.sender,
                    PushKind::Reaction,
                    notification,
                    out,
                );
            }
        }
    }

    fn on_vote(&mut self, index: usize, reaction: EventId, vote: Vote, out: &mut Out<'_>) {
        let prompt = &mut self.prompts[index];
        match &mut prompt.phase {
            Phase::Pending { message } => {
                prompt.phase = Phase::Settling {
                    message: message.clone(),
                    until: out.now.saturating_add(self.config.settle_ms),
                    votes: vec![(reaction, vote)],
                };
            }
            Phase::Settling { votes, .. } => votes.push((reaction, vote)),
            Phase::Posting { .. } | Phase::Decided { .. } | Phase::Delivering { .. } => {
                out.drop(Some(&reaction), DropReason::AlreadyAnswered)
            }
        }
    }

    fn on_redaction(&mut self, redaction: Redaction, out: &mut Out<'_>) {
        if self.is_history(&redaction.room, &redaction.event_id) {
            return out.drop(Some(&redaction.event_id), DropReason::NotJoined);
        }
        match self.config.gate(&redaction.sender) {
            Gate::Own => return out.drop(Some(&redaction.event_id), DropReason::OwnEvent),
            Gate::Stranger => return out.drop(Some(&redaction.event_id), DropReason::Stranger),
            Gate::Allowed | Gate::Approver => {}
        }
        if self.log.contains_key(&redaction.event_id) {
            return out.drop(Some(&redaction.event_id), DropReason::Duplicate);
        }
        // A parked undecryptable event redacted by its sender: it will never be read.
        if let Some(at) = self.undecryptable.iter().position(|p| {
            p.event.event_id == redaction.redacts && p.event.sender == redaction.sender
        }) {
            self.undecryptable.remove(at);
            self.log(
                &redaction.event_id,
                &redaction.sender,
                Record::NotPushed,
                out,
            );
            return out.drop(Some(&redaction.redacts), DropReason::RedactedBeforeDelivery);
        }
        // A withdrawal: the voter redacts their own vote inside the settle window.
        for prompt in &mut self.prompts {
            if let Phase::Settling { votes, .. } = &mut prompt.phase {
                if let Some(at) = votes.iter().position(|(id, _)| *id == redaction.redacts) {
                    if votes[at].1.voter == redaction.sender {
                        votes.remove(at);
                        self.log(
                            &redaction.event_id,
                            &redaction.sender,
                            Record::NotPushed,
                            out,
                        );
                    } else {
                        self.log(
                            &redaction.event_id,
                            &redaction.sender,
                            Record::NotPushed,
                            out,
                        );
                        out.drop(Some(&redaction.event_id), DropReason::WithdrawalByOther);
                    }
                    return;
                }
            }
        }
        let delivered = match self.log.get_mut(&redaction.redacts) {
            Some(LogEntry {
                record:
                    Record::Pushed {
                        delivered,
                        redacted,
                        ..
                    },
                ..
            }) => {
                *redacted = true;
                delivered.len()
            }
            _ => {
                self.log(
                    &redaction.event_id,
                    &redaction.sender,
                    Record::NotPushed,
                    out,
                );
                return out.drop(Some(&redaction.event_id), DropReason::RedactionOfUnpushed);
            }
        };
        if delivered == 0 {
            // Still queued: no session saw it, so none will.
            self.queue.retain(|q| q.event_id != redaction.redacts);
            self.log(
                &redaction.event_id,
                &redaction.sender,
                Record::NotPushed,
                out,
            );
            return out.drop(Some(&redaction.redacts), DropReason::RedactedBeforeDelivery);
        }
        let notification = render_retraction(&redaction);
        self.log_and_deliver(
            &redaction.event_id,
            &redaction.sender,
            PushKind::Retraction,
            notification,
            out,
        );
    }

    fn on_ack(&mut self, session: Option<&SessionId>, event_id: &EventId, out: &mut Out<'_>) {
        if session.is_some_and(|s| !self.sessions.contains_key(s)) {
            return out.drop(Some(event_id), DropReason::UnknownSession);
        }
        match self.log.get_mut(event_id) {
            Some(LogEntry {
                record: Record::Pushed { acked, .. },
                ..
            }) => {
                *acked = true;
                self.queue.retain(|q| q.event_id != *event_id);
            }
            _ => out.drop(Some(event_id), DropReason::UnknownEvent),
        }
    }

    // ----- rooms ----------------------------------------------------------------

    /// The identity's own membership changed, or it was invited. An invite is
    /// judged by the sender gate: an allowed sender's is joined, once (a room being
    /// joined or joined is not joined again); another's stays pending (a stranger
    /// cannot pull the identity into a room).
    fn on_membership(
        &mut self,
        room: RoomId,
        event_id: Option<EventId>,
        user: UserId,
        membership: Membership,
        out: &mut Out<'_>,
    ) {
        if user != self.config.user_id {
            return out.drop(event_id.as_ref(), DropReason::OtherMember);
        }
        if !matches!(membership, Membership::Invited { .. }) {
            for flight in out.in_flight.values_mut() {
                if let InFlight::Join {
                    identity,
                    room: r,
                    settled,
                    ..
                } = flight
                {
                    if *identity == out.identity && *r == room {
                        *settled = true;
                    }
                }
            }
        }
        let by = match membership {
            Membership::Joined => {
                self.rooms.insert(room, RoomState::Joined);
                return;
            }
            Membership::Left | Membership::Banned => {
                // A prompt posted there could not be seen nor answered.
                if self.last_room.as_ref() == Some(&room) {
                    self.last_room = None;
                }
                self.rooms.insert(room, RoomState::Left);
                return;
            }
            Membership::Invited { by } => by,
        };
        match self.rooms.get(&room) {
            Some(RoomState::Joining { .. } | RoomState::Joined) => {
                return out.drop(event_id.as_ref(), DropReason::AlreadyInvited);
            }
            // An invite not acted on is judged again when it is reported again (the
            // server reports pending invites when it starts): a join that failed
            // is tried again; a stranger's invite stays refused.
            Some(RoomState::Invited { .. } | RoomState::Left) | None => {}
        }
        match self.config.gate(&by) {
            Gate::Allowed | Gate::Approver => {
                let id = out.id();
                out.in_flight.insert(
                    id,
                    InFlight::Join {
                        identity: out.identity.clone(),
                        room: room.clone(),
                        by: by.clone(),
                        settled: false,
                    },
                );
                out.effects.push(Effect::JoinRoom {
                    id,
                    identity: out.identity.clone(),
                    room: room.clone(),
                });
                self.rooms.insert(room, RoomState::Joining { by });
            }
            gate @ (Gate::Own | Gate::Stranger) => {
                self.rooms.insert(room, RoomState::Invited { by });
                let reason = match gate {
                    Gate::Own => DropReason::OwnEvent,
                    _ => DropReason::Stranger,
                };
                out.drop(event_id.as_ref(), reason);
            }
        }
    }

    /// A join on an invite failed: the invite is pending again (a restart, or
    /// another invite, tries again), unless the identity's own membership event of
    /// the room came since (`settled`): the room was joined or left meanwhile, and a
    /// join on a later invite may be the one in flight now.
    fn join_failed(&mut self, room: RoomId, by: UserId, settled: bool, out: &mut Out<'_>) {
        if !settled && self.rooms.get(&room) == Some(&RoomState::Joining { by: by.clone() }) {
            self.rooms.insert(room, RoomState::Invited { by });
        }
        out.drop(None, DropReason::JoinFailed);
    }

    /// An event that is no input: the gate first (own and strangers' events say
    /// only that), then what it is.
    fn on_not_input(
        &mut self,
        event_id: Option<EventId>,
        sender: Option<UserId>,
        what: String,
        out: &mut Out<'_>,
    ) {
        let reason = match sender.map(|s| self.config.gate(&s)) {
            Some(Gate::Own) => DropReason::OwnEvent,
            Some(Gate::Stranger) => DropReason::Stranger,
            Some(Gate::Allowed | Gate::Approver) | None => DropReason::NotInput { what },
        };
        out.drop(event_id.as_ref(), reason);
    }

    // ----- undecryptable events -------------------------------------------------

    /// See [`Input::Undecryptable`]: the gate first, then the event is parked.
    fn on_undecryptable(&mut self, event: Undecryptable, out: &mut Out<'_>) {
        if self.is_history(&event.room, &event.event_id) {
            return out.drop(Some(&event.event_id), DropReason::NotJoined);
        }
        match self.config.gate(&event.sender) {
            Gate::Own => return out.drop(Some(&event.event_id), DropReason::OwnEvent),
            Gate::Stranger => return out.drop(Some(&event.event_id), DropReason::Stranger),
            Gate::Allowed | Gate::Approver => {}
        }
        let parked = self
            .undecryptable
            .iter()
            .any(|p| p.event.event_id == event.event_id);
        if parked || self.log.contains_key(&event.event_id) {
            return out.drop(Some(&event.event_id), DropReason::Duplicate);
        }
        out.drop(Some(&event.event_id), DropReason::Undecryptable);
        let until = out.now.saturating_add(self.config.undecryptable_grace_ms);
        self.undecryptable.push_back(Parked { event, until });
        if self.undecryptable.len() > UNDECRYPTABLE_MEMORY {
            if let Some(oldest) = self.undecryptable.pop_front() {
                self.tell_undecryptable(oldest.event, out);
            }
        }
        self.fire_undecryptable(out);
    }

    /// `event_id` came as an input of its own kind (decrypted, if it was encrypted):
    /// it is parked no longer, and the push that said it was undecryptable leaves
    /// the log (and the queue, where it gives its place to the event itself), so the
    /// event is handled now as what it is. Only the same sender's event matches.
    fn decrypted(&mut self, event_id: &EventId, sender: Option<&UserId>) {
        let same = |who: &UserId| sender.is_none_or(|s| s == who);
        if let Some(at) = self
            .undecryptable
            .iter()
            .position(|p| p.event.event_id == *event_id && same(&p.event.sender))
        {
            self.undecryptable.remove(at);
        } else if matches!(
            self.log.get(event_id),
            Some(LogEntry { sender, record: Record::Pushed { kind: PushKind::Undecryptable, .. }, .. })
                if same(sender)
        ) {
            self.log.remove(event_id);
            self.log_order.retain(|id| id != event_id);
            self.queue.retain(|q| q.event_id != *event_id);
        }
    }

    /// Tells the sessions of every parked event whose grace period is over.
    fn fire_undecryptable(&mut self, out: &mut Out<'_>) {
        while let Some(at) = self.undecryptable.iter().position(|p| p.until <= out.now) {
            if let Some(parked) = self.undecryptable.remove(at) {
                self.tell_undecryptable(parked.event, out);
            }
        }
    }

    /// The metadata-only push that says `event` exists, and the notice to its sender
    /// when the identity's `undecryptable_notice` is on and the room is still joined.
    fn tell_undecryptable(&mut self, event: Undecryptable, out: &mut Out<'_>) {
        // Another event took this id into the log meanwhile: the id is not told twice.
        if self.log.contains_key(&event.event_id) {
            return out.drop(Some(&event.event_id), DropReason::Duplicate);
        }
        let notification = render_undecryptable(&event);
        self.log_and_deliver(
            &event.event_id,
            &event.sender,
            PushKind::Undecryptable,
            notification,
            out,
        );
        if self.config.undecryptable_notice && self.is_joined(&event.room) {
            out.notice(&event.room, &event.event_id, undecryptable_notice_text());
        }
    }

    // ----- the agent's writes ---------------------------------------------------

    /// Judges an agent's write by the rules of [`crate::agent`], in their order, and
    /// either performs it or refuses it: one transition, so nothing can change
    /// between the check and the send.
    /// `foreign`: why another identity's prompts refuse the write, if they do
    /// (judged by the same rules, [`IdentityState::judge_prompt_rules`]).
    fn on_agent_write(
        &mut self,
        call: CallId,
        write: AgentWrite,
        foreign: Option<DropReason>,
        out: &mut Out<'_>,
    ) {
        let judged = self
            .judge_write(&write)
            .and_then(|()| foreign.map_or(Ok(()), Err));
        match judged {
            Err(reason) => out.effects.push(Effect::WriteRefused {
                identity: out.identity.clone(),
                call,
                reason,
            }),
            Ok(()) => {
                let id = out.id();
                out.in_flight.insert(
                    id,
                    InFlight::Write {
                        identity: out.identity.clone(),
                        call,
                    },
                );
                out.effects.push(Effect::Write {
                    id,
                    identity: out.identity.clone(),
                    call,
                    write,
                });
            }
        }
    }

    /// The identity's own agent's write, by every rule, in order: no prompt
    /// touched, only its own messages edited, no open request id named, no room of a
    /// held prompt left.
    fn judge_write(&self, write: &AgentWrite) -> Result<(), DropReason> {
        if self.targets_a_prompt(write) {
            return Err(DropReason::PromptTarget);
        }
        if let AgentWrite::Edit {
            original_sender, ..
        } = write
        {
            if *original_sender != self.config.user_id {
                return Err(DropReason::NotOwnMessage);
            }
        }
        if let Some(request_id) = self.named_open_id(write) {
            return Err(DropReason::NamesOpenRequest { request_id });
        }
        if let AgentWrite::Leave { room } = write {
            if self.prompts.iter().any(|p| p.room == *room) {
                return Err(DropReason::LeavesPromptRoom);
            }
        }
        Ok(())
    }

    /// The rules this identity's prompts set for any agent's write, its own or
    /// another identity's: no target is one of its prompts
    /// ([`IdentityState::is_prompt_message`]), and no text field names one of its
    /// open request ids ([`names_request_id`]).
    /// Errors: `PromptTarget`, `NamesOpenRequest`.
    pub fn judge_prompt_rules(&self, write: &AgentWrite) -> Result<(), DropReason> {
        if self.targets_a_prompt(write) {
            return Err(DropReason::PromptTarget);
        }
        match self.named_open_id(write) {
            Some(request_id) => Err(DropReason::NamesOpenRequest { request_id }),
            None => Ok(()),
        }
    }

    /// Whether a target of `write` (`AgentWrite::targets`) is one of this
    /// identity's prompts.
    fn targets_a_prompt(&self, write: &AgentWrite) -> bool {
        write
            .targets()
            .into_iter()
            .any(|t| self.is_prompt_message(t))
    }

    /// The first open request id of this identity a text field of `write` names.
    fn named_open_id(&self, write: &AgentWrite) -> Option<RequestId> {
        let open = self.open_request_ids();
        write
            .texts()
            .into_iter()
            .find_map(|text| names_request_id(text, &open))
            .cloned()
    }

    /// A `permission_request` the server could not read: the session hears why
    /// (Claude Code's own dialog in the terminal still answers it), the operator's
    /// log says so, and nothing is posted.
    fn on_invalid_request(&mut self, session: SessionId, error: String, out: &mut Out<'_>) {
        out.effects.push(Effect::LogMessage {
            identity: out.identity.clone(),
            session,
            message: format!(
                "matrix-channel did not relay a permission_request: {error}. Nothing was \
                 posted to Matrix; answer it in Claude Code."
            ),
        });
        out.drop(None, DropReason::InvalidPermissionRequest);
    }

    // ----- prompts --------------------------------------------------------------

    fn on_request(&mut self, session: SessionId, request: PermissionRequest, out: &mut Out<'_>) {
        if !self.is_attached(&session) {
            return out.drop(None, DropReason::UnknownSession);
        }
        if !self.config.relays_permissions() {
            return out.drop(None, DropReason::NoApprovers);
        }
        let Some(room) = self
            .config
            .permission_room
            .clone()
            .or_else(|| self.last_room.clone())
        else {
            return out.drop(None, DropReason::NoPromptRoom);
        };
        if let Some(index) = self
            .prompts
            .iter()
            .position(|p| p.session == session && p.request.request_id == request.request_id)
        {
            self.retire(index, DropReason::PromptSuperseded, out);
        }
        while !self.prompts.is_empty() && self.prompts.len() >= self.config.max_prompts {
            // The oldest prompt nobody answered goes first; an answered one waiting
            // for its session goes only when every prompt is answered.
            let oldest = self
                .prompts
                .iter()
                .position(|p| p.phase.is_answerable() || matches!(p.phase, Phase::Posting { .. }))
                .unwrap_or(0);
            self.retire(oldest, DropReason::PromptEvicted, out);
        }
        let serial = self.next_serial;
        self.next_serial += 1;
        let post = out.id();
        let text = render_prompt(&self.config, &request);
        out.in_flight.insert(
            post,
            InFlight::Post {
                identity: out.identity.clone(),
                room: room.clone(),
                request: request.clone(),
                retired: None,
            },
        );
        out.effects.push(Effect::PostPrompt {
            id: post,
            identity: out.identity.clone(),
            room: room.clone(),
            request_id: request.request_id.clone(),
            text,
        });
        self.prompts.push(Prompt {
            session,
            serial,
            request,
            room,
            created_at: out.now,
            expires_at: out.now.saturating_add(self.config.prompt_ttl_ms),
            phase: Phase::Posting { post },
        });
    }

    /// Removes the prompt at `index` before its verdict reached the session; its
    /// message says why (expired, replaced, or dropped at the cap).
    fn retire(&mut self, index: usize, reason: DropReason, out: &mut Out<'_>) {
        let prompt = self.prompts.remove(index);
        let outcome = match reason {
            DropReason::PromptSuperseded => PromptOutcome::Superseded,
            DropReason::PromptEvicted => PromptOutcome::Evicted,
            _ => PromptOutcome::Expired,
        };
        let text = render_outcome(&prompt.request, outcome);
        match &prompt.phase {
            Phase::Posting { post } => {
                if let Some(InFlight::Post { retired, .. }) = out.in_flight.get_mut(post) {
                    *retired = Some(text);
                }
            }
            Phase::Pending { message }
            | Phase::Settling { message, .. }
            | Phase::Decided { message, .. }
            | Phase::Delivering { message, .. } => {
                self.remember_prompt(message.clone());
                out.effects.push(Effect::EditPrompt {
                    identity: out.identity.clone(),
                    room: prompt.room.clone(),
                    event_id: message.clone(),
                    text,
                })
            }
        }
        out.drop(prompt.phase.message(), reason);
    }

    /// A prompt post ended. The post's effect id names the prompt (ids are never
    /// reused), so a re-issued prompt is never mistaken for the one posted.
    fn post_completed(
        &mut self,
        id: EffectId,
        room: RoomId,
        shown: PromptText,
        outcome: Outcome,
        out: &mut Out<'_>,
    ) {
        let current = self
            .prompts
            .iter()
            .position(|p| p.phase == Phase::Posting { post: id });
        match (current, outcome) {
            (Some(index), Outcome::Posted { event_id }) => {
                self.prompts[index].phase = Phase::Pending { message: event_id };
            }
            (Some(index), Outcome::Sent | Outcome::Failed { .. }) => {
                self.prompts.remove(index);
                out.drop(None, DropReason::PromptPostFailed);
            }
            (None, Outcome::Posted { event_id }) => {
                // The prompt expired or was replaced while it was being posted.
                self.remember_prompt(event_id.clone());
                out.effects.push(Effect::EditPrompt {
                    identity: out.identity.clone(),
                    room,
                    event_id,
                    text: shown,
                });
            }
            (None, Outcome::Sent | Outcome::Failed { .. }) => {
                out.drop(None, DropReason::StaleOutcome);
            }
        }
    }

    fn on_text_verdict(&mut self, message: &Message, verdict: TextVerdict, out: &mut Out<'_>) {
        let id = &verdict.request_id;
        if let Err(reason) = self.config.verdict_devices.admits(message.device) {
            let text = refused_device_text(&reason, &format!("This answer to {id}"));
            out.notice(&message.room, &message.event_id, text);
            return out.drop(Some(&message.event_id), reason);
        }
        let reply_target = message
            .content
            .as_ref()
            .and_then(|c| c.relation.as_ref())
            .and_then(|r| r.reply_to())
            .map(|r| &r.event_id);
        let same_id: Vec<usize> = (0..self.prompts.len())
            .filter(|&i| {
                let p = &self.prompts[i];
                p.request.request_id == *id && p.phase.message().is_some()
            })
            .collect();
        // Without a reply, only the prompts posted in the room the answer was typed
        // in, and every one of them counts (answered or not) for ambiguity.
        let in_room: Vec<usize> = same_id
            .iter()
            .copied()
            .filter(|&i| self.prompts[i].room == message.room)
            .collect();
        // A reply names what it answers: the prompt it replies to, or nothing.
        let replied = reply_target.map(|target| {
            same_id
                .iter()
                .copied()
                .find(|&i| self.prompts[i].phase.message() == Some(target))
        });
        let target = match (replied, in_room.as_slice()) {
            (Some(Some(index)), _) => index,
            (Some(None), _) => {
                let answerable: Vec<usize> = in_room
                    .iter()
                    .copied()
                    .filter(|&i| self.prompts[i].phase.is_answerable())
                    .collect();
                let pointer = match answerable.as_slice() {
                    [index] => {
                        let prompt = &self.prompts[*index];
                        let link = prompt
                            .phase
                            .message()
                            .map(|m| matrix_to(&prompt.room, m))
                            .unwrap_or_default();
                        format!(
                            " The prompt for {id} is {link}: reply to it, or answer without a reply."
                        )
                    }
                    _ => String::new(),
                };
                out.notice(
                    &message.room,
                    &message.event_id,
                    format!("This replies to a message that is not the pending prompt for {id}, so it answers nothing.{pointer}"),
                );
                return out.drop(Some(&message.event_id), DropReason::ReplyNotToPrompt);
            }
            (None, [index]) => *index,
            (None, []) => {
                out.notice(
                    &message.room,
                    &message.event_id,
                    format!("No pending permission request {id}: it expired, was answered, or was never issued."),
                );
                return out.drop(Some(&message.event_id), DropReason::UnknownRequest);
            }
            (None, _) => {
                out.notice(
                    &message.room,
                    &message.event_id,
                    format!("Several sessions are waiting on {id}: reply to the prompt you mean."),
                );
                return out.drop(Some(&message.event_id), DropReason::AmbiguousRequest);
            }
        };
        if !self.prompts[target].phase.is_answerable() {
            return self.already_answered(message, id, out);
        }
        let decision = Decision {
            behavior: verdict.behavior,
            by: message.sender.clone(),
            via: VerdictSource::Text {
                event_id: message.event_id.clone(),
            },
        };
        if verdict.behavior == Behavior::Allow && self.deny_is_settling(target) {
            // Deny wins: an allow typed while an approver's deny reaction settles
            // joins the votes and is weighed when the window ends.
            if let Phase::Settling { votes, .. } = &mut self.prompts[target].phase {
                let vote = Vote {
                    voter: message.sender.clone(),
                    key: "yes".to_owned(),
                    behavior: Behavior::Allow,
                    by_text: true,
                };
                votes.push((message.event_id.clone(), vote));
            }
            out.notice(
                &message.room,
                &message.event_id,
                format!("A deny reaction on {id} is settling: deny wins unless it is withdrawn."),
            );
            return;
        }
        self.decide(target, decision, out);
    }

    /// Whether an approver's deny vote is settling on the prompt at `index`.
    fn deny_is_settling(&self, index: usize) -> bool {
        match &self.prompts[index].phase {
            Phase::Settling { votes, .. } => votes
                .iter()
                .any(|(_, v)| v.behavior == Behavior::Deny && self.config.is_approver(&v.voter)),
            _ => false,
        }
    }

    fn already_answered(&mut self, message: &Message, id: &RequestId, out: &mut Out<'_>) {
        out.notice(
            &message.room,
            &message.event_id,
            format!("Permission request {id} was already answered."),
        );
        out.drop(Some(&message.event_id), DropReason::AlreadyAnswered);
    }

    fn decide(&mut self, index: usize, decision: Decision, out: &mut Out<'_>) {
        let prompt = &mut self.prompts[index];
        let Some(message) = prompt.phase.message().cloned() else {
            return;
        };
        out.effects.push(Effect::Decided {
            identity: out.identity.clone(),
            session: prompt.session.clone(),
            request_id: prompt.request.request_id.clone(),
            decision: decision.clone(),
            at: out.now,
        });
        prompt.phase = Phase::Decided { message, decision };
        let (session, serial) = (prompt.session.clone(), prompt.serial);
        if self.is_live(&session) {
            self.start_delivery(serial, out);
        }
    }

    fn start_delivery(&mut self, serial: u64, out: &mut Out<'_>) {
        let generations = &self.generations;
        let Some(prompt) = self.prompts.iter_mut().find(|p| p.serial == serial) else {
            return;
        };
        let generation = generations.get(&prompt.session).copied().unwrap_or(0);
        let Phase::Decided { message, decision } = &prompt.phase else {
            return;
        };
        let send = out.id();
        out.in_flight.insert(
            send,
            InFlight::Verdict {
                identity: out.identity.clone(),
                serial,
                generation,
                room: prompt.room.clone(),
                message: message.clone(),
                request: prompt.request.clone(),
                decision: decision.clone(),
            },
        );
        out.effects.push(Effect::SendVerdict {
            id: send,
            identity: out.identity.clone(),
            session: prompt.session.clone(),
            verdict: PermissionVerdict {
                request_id: prompt.request.request_id.clone(),
                behavior: decision.behavior,
            },
        });
        prompt.phase = Phase::Delivering {
            message: message.clone(),
            decision: decision.clone(),
            send,
        };
    }

    /// A verdict send ended. `shown` is the prompt message and its outcome text.
    fn verdict_completed(
        &mut self,
        id: EffectId,
        serial: u64,
        generation: u64,
        outcome: Outcome,
        shown: (RoomId, EventId, PromptText),
        out: &mut Out<'_>,
    ) {
        // The send's effect id names the delivery (ids are never reused), so a
        // prompt re-issued under the same request id is never mistaken for it.
        let current = self
            .prompts
            .iter()
            .position(|p| matches!(p.phase, Phase::Delivering { send, .. } if send == id));
        let Some(index) = current else {
            // The prompt was evicted or replaced while its verdict was in flight.
            // If the verdict arrived, the message still shows what was decided.
            if outcome == Outcome::Sent {
                let (room, event_id, text) = shown;
                self.remember_prompt(event_id.clone());
                out.effects.push(Effect::EditPrompt {
                    identity: out.identity.clone(),
                    room,
                    event_id,
                    text,
                });
            }
            return out.drop(None, DropReason::StaleOutcome);
        };
        let prompt = &mut self.prompts[index];
        let Phase::Delivering {
            message, decision, ..
        } = &prompt.phase
        else {
            return;
        };
        if let Outcome::Failed { .. } = outcome {
            prompt.phase = Phase::Decided {
                message: message.clone(),
                decision: decision.clone(),
            };
            let session = prompt.session.clone();
            self.lost_stream(&session, generation, out);
            // Attached again since the send: deliver to the new stream now.
            if self.is_live(&session) {
                self.start_delivery(serial, out);
            }
            return;
        }
        let (room, event_id, text) = shown;
        self.prompts.remove(index);
        self.remember_prompt(event_id.clone());
        out.effects.push(Effect::EditPrompt {
            identity: out.identity.clone(),
            room,
            event_id,
            text,
        });
    }

    // ----- timers ---------------------------------------------------------------

    fn fire_timers(&mut self, out: &mut Out<'_>) {
        let now = out.now;
        let settled: Vec<u64> = self
            .prompts
            .iter()
            .filter(|p| matches!(p.phase, Phase::Settling { until, .. } if until <= now && until <= p.expires_at))
            .map(|p| p.serial)
            .collect();
        for serial in settled {
            self.settle(serial, out);
        }
        while let Some(index) = self.prompts.iter().position(|p| {
            p.expires_at <= now
                && (p.phase.is_answerable() || matches!(p.phase, Phase::Posting { .. }))
        }) {
            self.retire(index, DropReason::PromptExpired, out);
        }
        self.fire_undecryptable(out);
        self.fire_attach_graces(out);
    }

    /// The settle window ended: the verdict is taken on the votes still there, deny
    /// winning over approve; with none left, the prompt is pending again.
    fn settle(&mut self, serial: u64, out: &mut Out<'_>) {
        let Some(index) = self.prompts.iter().position(|p| p.serial == serial) else {
            return;
        };
        let prompt = &mut self.prompts[index];
        let Phase::Settling { message, votes, .. } = &prompt.phase else {
            return;
        };
        // The operator may have removed an approver while the window was open.
        let config = &self.config;
        let votes: Vec<&(EventId, Vote)> = votes
            .iter()
            .filter(|(_, v)| config.is_approver(&v.voter))
            .collect();
        let deciding = votes
            .iter()
            .copied()
            .find(|(_, v)| v.behavior == Behavior::Deny)
            .or_else(|| votes.first().copied());
        let Some((event_id, vote)) = deciding else {
            prompt.phase = Phase::Pending {
                message: message.clone(),
            };
            return;
        };
        let via = match vote.by_text {
            true => VerdictSource::Text {
                event_id: event_id.clone(),
            },
            false => VerdictSource::Reaction {
                event_id: event_id.clone(),
                key: vote.key.clone(),
            },
        };
        let decision = Decision {
            behavior: vote.behavior,
            by: vote.voter.clone(),
            via,
        };
        self.decide(index, decision, out);
    }
}

/// The notice that refuses a verdict for its device (`what` names the verdict:
/// "This answer to abcde", "This reaction"). `reason` is what
/// [`crate::VerdictDevices::admits`] answered.
fn refused_device_text(reason: &DropReason, what: &str) -> String {
    match reason {
        DropReason::ClearVerdict => format!(
            "{what} was sent unencrypted, so it says nothing of the device it came from \
             and counts for nothing: answer in an encrypted room from a device you \
             have cross-signed (a reaction is often sent unencrypted: type the answer)."
        ),
        _ => format!(
            "{what} came from a device you have not cross-signed, so it counts for \
             nothing. Verify the device from one you trust (in Element: Settings, \
             Sessions), then answer again."
        ),
    }
}
