//! The state machine: [`Channel::handle`] and [`Channel::next_deadline`].
//!
//! One input at a time: due timers fire first ([`timers`]), then the input goes to
//! the identity it names, whose state ([`IdentityState`]) holds every rule's data.
//! The rules live by concern, each module with its own doc:
//!
//! | module | rules |
//! |---|---|
//! | `mod.rs` | [`Channel`]: the dispatch of one input, restarts, effect outcomes ([`Input::Completed`]), the effects in flight, [`Channel::next_deadline`] |
//! | [`bindings`] | session rooms: a label's room, its creation, routing of events to sessions, bind and unbind |
//! | [`identity`] | [`IdentityState`]: its fields and the read-only views the server's tools and the properties use |
//! | [`sessions`] | attach, the attach grace, detach, a lost stream, replay of the queue, attach generations |
//! | [`delivery`] | the delivery log, the queue, pushes, held pushes, a failed push delivered again, sync gap cuts |
//! | [`messages`] | messages, edits, reactions, redactions and acknowledgements, after the sender gate |
//! | [`rooms`] | the identity's memberships: invites judged by the gate, joins, history before a join |
//! | [`undecryptable`] | undecryptable events parked until their room key comes or their grace ends |
//! | [`writes`] | the agent's writes judged by the rules of [`crate::agent`], across identities |
//! | [`prompts`] | permission requests: the prompt's room, posting, eviction, expiry, retired prompts |
//! | [`verdicts`] | text verdicts, votes and their settle window, the decision, the verdict's delivery |
//! | [`grants`] | grants made with an allow, requests they answer, their end (expiry, detach, revoke) |
//! | [`typing`] | `m.typing` in a session's room while it works on what it was sent |
//! | [`timers`] | what fires when time passes: settle windows, expiry, undecryptable grace, attach grace |

mod bindings;
mod delivery;
mod grants;
mod identity;
mod messages;
mod policy;
mod prompts;
mod rooms;
mod sessions;
mod timers;
mod typing;
mod undecryptable;
mod verdicts;
mod withdrawal;
mod writes;

pub use bindings::Binding;
pub use delivery::{LogEntry, Queued, Record};
pub use grants::{Grant, GrantEnd, MAX_GRANTS};
pub use identity::IdentityState;
pub use prompts::{Phase, Prompt};
pub use rooms::{JoinState, HISTORY_MEMORY};
pub use sessions::SessionPhase;
pub use typing::{Typing, TYPING_REFRESH_MS, TYPING_TIMEOUT_MS};
pub use undecryptable::{Parked, UNDECRYPTABLE_MEMORY};
pub use verdicts::Vote;

use crate::config::{ConfigError, IdentityConfig};
use crate::effect::{ChannelNotification, Decision, DropReason, Effect, PromptText};
use crate::event::{Input, Outcome, PermissionRequest};
use crate::ids::{
    CallId, EffectId, EventId, IdentityId, Label, RoomId, SessionId, Timestamp, UserId,
};
use crate::prompt_text::{render_outcome, render_prompt, PromptOutcome};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The whole core: every identity's state, and the effects in flight.
///
/// Serializable: the server persists it after every transition that changed it, so
/// a restart loses no pending prompt and no delivery record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Channel {
    now: Timestamp,
    next_effect_id: u64,
    identities: BTreeMap<IdentityId, IdentityState>,
    in_flight: BTreeMap<EffectId, InFlight>,
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
        /// The prompt as posted: a post issued again after a restart sends the same.
        /// (`None` in a state from before it was kept: rendered again then.)
        #[serde(default)]
        text: Option<PromptText>,
        /// Set when the prompt is retired while still being posted: what the posted
        /// message then shows.
        retired: Option<PromptText>,
        /// Set when the session's stream closed while the prompt was being posted:
        /// it is withdrawn when posted, unless the session attached again.
        #[serde(default)]
        withdrawn: bool,
    },
    CreateRoom {
        identity: IdentityId,
        label: Label,
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
    now: Timestamp,
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
    pub fn now(&self) -> Timestamp {
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
    /// expires, an undecryptable event's grace period ends, a session's attach
    /// grace, or a typing notice is due or stops at its cap), if any. The server calls [`Channel::handle`] with [`Input::Tick`]
    /// then (or earlier).
    pub fn next_deadline(&self) -> Option<Timestamp> {
        let prompts = self
            .identities
            .values()
            .flat_map(|state| state.prompts.iter())
            .filter_map(|prompt| match &prompt.phase {
                Phase::Settling { until, .. } => Some((*until).min(prompt.expires_at)),
                Phase::Posting { .. } | Phase::Pending { .. } | Phase::Withdrawn { .. } => {
                    Some(prompt.expires_at)
                }
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
                SessionPhase::Attaching { until } => Some(*until),
                SessionPhase::Live | SessionPhase::Detached => None,
            });
        let typing = self
            .identities
            .values()
            .filter_map(IdentityState::typing_deadline);
        prompts.chain(parked).chain(attaching).chain(typing).min()
    }

    /// Handles one input at `now` (milliseconds; a `now` earlier than one already seen
    /// is taken as that one, so time never runs backwards). Timers that are due fire
    /// first, then the input is applied. Returns the effects in the order to execute.
    pub fn handle(&mut self, now: Timestamp, input: Input) -> Vec<Effect> {
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
        match input {
            Input::Tick => {}
            Input::Restarted => self.restarted(now, &mut effects),
            Input::Completed { id, outcome } => match self.in_flight.remove(&id) {
                Some(flight) => self.complete(now, id, flight, outcome, &mut effects),
                None => effects.push(Effect::Dropped {
                    identity: None,
                    event_id: None,
                    reason: DropReason::StaleOutcome,
                }),
            },
            input => self.identity_input(now, input, &mut effects),
        }
        effects
    }

    /// Applies an input that names an identity ([`Input::identity`]) to that
    /// identity's state.
    fn identity_input(&mut self, now: Timestamp, input: Input, effects: &mut Vec<Effect>) {
        let Some(identity) = input.identity().cloned() else {
            return;
        };
        // Every identity's prompts are off limits to every identity's agent: one
        // identity's agent touching another's prompt, or naming its open id, is
        // refused as its own would be (identities are isolated).
        let foreign = match &input {
            Input::AgentWrite { write, .. } => self
                .identities
                .iter()
                .filter(|(other, _)| **other != identity)
                .find_map(|(_, other)| other.judge_prompt_rules(write).err()),
            _ => None,
        };
        let Some(state) = self.identities.get_mut(&identity) else {
            effects.push(match input {
                Input::AgentWrite { call, .. } => Effect::WriteRefused {
                    identity,
                    call,
                    reason: DropReason::UnknownIdentity,
                },
                _ => Effect::Dropped {
                    identity: Some(identity),
                    event_id: None,
                    reason: DropReason::UnknownIdentity,
                },
            });
            return;
        };
        let mut out = Out {
            now,
            identity,
            next_effect_id: &mut self.next_effect_id,
            in_flight: &mut self.in_flight,
            effects,
        };
        if let Some((event_id, sender)) = input.matrix_event() {
            state.decrypted(event_id, sender);
        }
        match input {
            Input::Attach { session, label, .. } => {
                state.attach_label(&session, label, &mut out);
                state.attach(session, &mut out);
                // A session attached again with another label leaves its old room.
                state.stop_typing_unattended(&mut out)
            }
            Input::Bind { label, room, .. } => state.on_bind(label, room, &mut out),
            Input::Revoke { grant, .. } => state.on_operator_revoke(grant, &mut out),
            Input::Detach { session, .. } => state.detach(&session, &mut out),
            Input::Message { message, .. } => state.on_message(message, &mut out),
            Input::Reaction { reaction, .. } => state.on_reaction(reaction, &mut out),
            Input::Redaction { redaction, .. } => state.on_redaction(redaction, &mut out),
            Input::PermissionRequest {
                session, request, ..
            } => state.on_request(session, request, &mut out),
            Input::Acknowledge {
                session, event_id, ..
            } => state.on_ack(session.as_ref(), &event_id, &mut out),
            Input::InvalidPermissionRequest { session, error, .. } => {
                state.on_invalid_request(session, error, &mut out)
            }
            Input::AgentWrite { call, write, .. } => {
                state.on_agent_write(call, write, foreign, &mut out)
            }
            Input::Membership {
                room,
                event_id,
                user,
                membership,
                ..
            } => state.on_membership(room, event_id, user, membership, &mut out),
            Input::Unhandled {
                event_id,
                sender,
                what,
                ..
            } => state.on_unhandled(event_id, sender, what, &mut out),
            Input::Undecryptable { event, .. } => state.on_undecryptable(event, &mut out),
            Input::GapCut { room, .. } => state.on_gap_cut(room, &mut out),
            // Named no identity: handled by `handle` itself.
            Input::Tick | Input::Restarted | Input::Completed { .. } => {}
        }
    }

    /// See [`Input::Restarted`]. Sessions are detached first, so what the failed
    /// pushes carried goes back to the queue rather than to a stream that is gone.
    fn restarted(&mut self, now: Timestamp, effects: &mut Vec<Effect>) {
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
                *session = SessionPhase::Detached;
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
                    text,
                    ..
                }) => {
                    let Some(state) = self.identities.get(identity) else {
                        continue;
                    };
                    let text = text
                        .clone()
                        .unwrap_or_else(|| render_prompt(&state.config, request, None));
                    effects.push(Effect::PostPrompt {
                        id,
                        identity: identity.clone(),
                        room: room.clone(),
                        request_id: request.request_id.clone(),
                        text,
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
        now: Timestamp,
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
            | InFlight::CreateRoom { identity, .. }
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
                } else if let Some(room) = event_id.as_ref().and_then(|e| state.room_of_event(e)) {
                    state.push_arrived(&session, &room, &mut out);
                }
            }
            InFlight::Post {
                room,
                request,
                retired,
                withdrawn,
                ..
            } => {
                let shown =
                    retired.unwrap_or_else(|| render_outcome(&request, PromptOutcome::Expired));
                state.post_completed(id, room, shown, withdrawn, outcome, &mut out)
            }
            InFlight::CreateRoom { label, .. } => state.room_created(id, label, outcome, &mut out),
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
                // A grant's or a rule's answer has no prompt message of its own.
                let shown = match decision.via.is_auto() {
                    true => None,
                    false => Some((
                        room,
                        message,
                        render_outcome(&request, PromptOutcome::Decided(&decision)),
                    )),
                };
                state.verdict_completed(id, serial, generation, outcome, shown, &mut out)
            }
        }
    }
}
