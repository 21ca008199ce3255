//! One identity's state ([`IdentityState`]) and the read-only views of it that the
//! server's tools and the model check's properties use. The rules that change it
//! live in the sibling modules, one concern each (see the table in `mod.rs`).

use super::bindings::Binding;
use super::delivery::{LogEntry, Queued};
use super::grants::Grant;
use super::prompts::Prompt;
use super::rooms::JoinState;
use super::sessions::SessionPhase;
use super::typing::Typing;
use super::undecryptable::Parked;
use crate::config::IdentityConfig;
use crate::ids::{EventId, Label, RoomId, SessionId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// One identity's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct IdentityState {
    pub(super) config: IdentityConfig,
    pub(super) sessions: BTreeMap<SessionId, SessionPhase>,
    /// Which attach of each session is the current one: a failure reported for a
    /// push or verdict sent to an earlier attach does not detach the session.
    pub(super) generations: BTreeMap<SessionId, u64>,
    pub(super) attaches: u64,
    pub(super) last_room: Option<RoomId>,
    pub(super) prompts: Vec<Prompt>,
    pub(super) next_serial: u64,
    pub(super) next_seq: u64,
    pub(super) log: BTreeMap<EventId, LogEntry>,
    pub(super) log_order: VecDeque<EventId>,
    pub(super) queue: VecDeque<Queued>,
    /// Messages of retired prompts, oldest first, at most `config.prompt_memory`:
    /// the agent may touch these as little as a live prompt's.
    #[serde(default)]
    pub(super) retired_prompts: VecDeque<EventId>,
    /// The identity's membership of each room it heard of (`Input::Membership`).
    /// Only events of a room in `Joined` are input.
    #[serde(default)]
    pub(super) rooms: BTreeMap<RoomId, JoinState>,
    /// Events dropped as `NotJoined`, oldest first, at most [`HISTORY_MEMORY`]: a sync
    /// that delivers them again after the join (a response replayed after a crash)
    /// must not make history input.
    #[serde(default)]
    pub(super) history: VecDeque<EventId>,
    /// Undecryptable events from allowed senders waiting for their room key, oldest
    /// first, at most [`UNDECRYPTABLE_MEMORY`] (see `Input::Undecryptable`).
    #[serde(default)]
    pub(super) undecryptable: VecDeque<Parked>,
    /// Rooms whose sync gap was cut while no session was live, oldest first: told to
    /// the next session that attaches (see `Input::GapCut`).
    #[serde(default)]
    pub(super) gap_cuts: Vec<RoomId>,
    /// What was delivered to each session in [`SessionPhase::Attaching`], oldest
    /// first: pushed when its grace ends, or delivered again (elsewhere or to the
    /// queue) when it detaches first.
    #[serde(default)]
    pub(super) held: BTreeMap<SessionId, Vec<Queued>>,
    /// Live sessions not pushed to since they became live: their next push carries
    /// [`MetaKey::Security`] (Claude Code leaves the server's instructions out of the
    /// first model call a channel event starts).
    #[serde(default)]
    pub(super) unbriefed: BTreeSet<SessionId>,
    /// Each label and its room (see [`super::bindings`]).
    #[serde(default)]
    pub(super) bindings: BTreeMap<Label, Binding>,
    /// The label each session attached with last; a session without one is routed
    /// to the rooms bound to no label.
    #[serde(default)]
    pub(super) labels: BTreeMap<SessionId, Label>,
    /// The rooms the identity shows typing in (see [`super::typing`]).
    #[serde(default)]
    pub(super) typing: BTreeMap<RoomId, Typing>,
    /// Grants, oldest first, at most [`super::grants::MAX_GRANTS`] (see
    /// [`super::grants`]).
    #[serde(default)]
    pub(super) grants: Vec<Grant>,
    /// The last grant's id (ids count from 1 and are never reused).
    #[serde(default)]
    pub(super) next_grant: u64,
}

impl IdentityState {
    pub(super) fn new(config: IdentityConfig) -> Self {
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
            bindings: BTreeMap::new(),
            labels: BTreeMap::new(),
            typing: BTreeMap::new(),
            grants: Vec::new(),
            next_grant: 0,
        }
    }

    /// Rooms whose sync gap was cut while no session was live, to tell the next
    /// session that attaches (see `Input::GapCut`).
    pub fn gap_cuts(&self) -> &[RoomId] {
        &self.gap_cuts
    }

    /// The identity's membership of each room it heard of.
    pub fn rooms(&self) -> &BTreeMap<RoomId, JoinState> {
        &self.rooms
    }

    /// The undecryptable events waiting for their room key, oldest first.
    pub fn undecryptable(&self) -> &VecDeque<Parked> {
        &self.undecryptable
    }

    /// The operator's settings.
    pub fn config(&self) -> &IdentityConfig {
        &self.config
    }

    /// Known sessions and whether each is live.
    pub fn sessions(&self) -> &BTreeMap<SessionId, SessionPhase> {
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
}
