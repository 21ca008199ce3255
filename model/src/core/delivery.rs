//! The delivery log and the queue: every event that passed the gate is logged once
//! ([`LogEntry`]), pushed to each attached session that lacks it (held while the
//! session is inside its attach grace) or queued when none is attached; a failed
//! push is delivered again; a sync gap cut is told to the sessions.

use super::identity::IdentityState;
use super::sessions::SessionPhase;
use super::{InFlight, Out};
use crate::effect::{ChannelNotification, DropReason, Effect};
use crate::ids::{EventId, RoomId, SessionId, UserId};
use crate::meta::MetaKey;
use crate::render::{render_gap_cut, PushKind};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

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
        /// The room of the event: it is delivered to the sessions that receive that
        /// room ([`IdentityState::receives`]). `None` in a state from before rooms
        /// were recorded: taken as a room bound to no label.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        room: Option<RoomId>,
        delivered: BTreeSet<SessionId>,
        acked: bool,
        /// Redacted in Matrix: never delivered again.
        redacted: bool,
    },
    /// A text verdict; never pushed.
    Verdict,
    /// A vote on a prompt; never pushed.
    Vote,
    /// An approver's `bind` or `unbind`; never pushed.
    Command,
    /// Passed the gate but was not pushed (see the `Dropped` effect emitted then).
    NotPushed,
}

/// An event waiting for a session.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Queued {
    pub seq: u64,
    /// The event's room, as [`Record::Pushed`] has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room: Option<RoomId>,
    pub event_id: EventId,
    pub notification: ChannelNotification,
}

impl IdentityState {
    /// See [`Input::GapCut`]: every live session that receives the room is told
    /// now; with none, or with one inside its attach grace, the next such session to
    /// become live is (a room's cut is kept once).
    pub(super) fn on_gap_cut(&mut self, room: RoomId, out: &mut Out<'_>) {
        if !self.is_joined(&room) {
            return out.drop(None, DropReason::NotJoined);
        }
        out.drop(None, DropReason::GapCut { room: room.clone() });
        let live: Vec<SessionId> = self
            .live_sessions()
            .into_iter()
            .filter(|session| self.receives(session, Some(&room)))
            .collect();
        let attaching = self.sessions.iter().any(|(session, state)| {
            matches!(state, SessionPhase::Attaching { .. }) && self.receives(session, Some(&room))
        });
        if (live.is_empty() || attaching) && !self.gap_cuts.contains(&room) {
            self.gap_cuts.push(room.clone());
        }
        for session in live {
            self.push(&session, None, 0, render_gap_cut(&room), out);
        }
    }

    pub(super) fn log(
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
    pub(super) fn forget_queued(&mut self, event_id: &EventId, out: &mut Out<'_>) {
        let before = self.queue.len();
        self.queue.retain(|q| q.event_id != *event_id);
        if self.queue.len() < before {
            out.drop(Some(event_id), DropReason::QueueFull);
        }
    }

    /// The room of a logged pushed event.
    pub(super) fn room_of_event(&self, event_id: &EventId) -> Option<RoomId> {
        match self.log.get(event_id) {
            Some(LogEntry {
                record: Record::Pushed { room, .. },
                ..
            }) => room.clone(),
            _ => None,
        }
    }

    pub(super) fn record_delivery(&mut self, event_id: &EventId, session: &SessionId) {
        if let Some(LogEntry {
            record: Record::Pushed { delivered, .. },
            ..
        }) = self.log.get_mut(event_id)
        {
            delivered.insert(session.clone());
        }
    }

    /// Delivers a logged event to every attached session that receives its room
    /// and does not have it, or queues it when there is none.
    pub(super) fn deliver(
        &mut self,
        event_id: &EventId,
        seq: u64,
        notification: ChannelNotification,
        out: &mut Out<'_>,
    ) {
        let (have, room) = match self.log.get(event_id) {
            Some(LogEntry {
                record: Record::Pushed {
                    delivered, room, ..
                },
                ..
            }) => (delivered.clone(), room.clone()),
            _ => (BTreeSet::new(), None),
        };
        let targets: Vec<SessionId> = self
            .attached_sessions()
            .into_iter()
            .filter(|s| !have.contains(s) && self.receives(s, room.as_ref()))
            .collect();
        if targets.is_empty() {
            if have.is_empty() {
                self.enqueue(event_id, room, seq, notification, out);
            }
            return;
        }
        for session in targets {
            self.record_delivery(event_id, &session);
            if !self.is_live(&session) {
                self.held.entry(session).or_default().push(Queued {
                    seq,
                    room: room.clone(),
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

    pub(super) fn enqueue(
        &mut self,
        event_id: &EventId,
        room: Option<RoomId>,
        seq: u64,
        notification: ChannelNotification,
        out: &mut Out<'_>,
    ) {
        let at = self.queue.partition_point(|q| q.seq < seq);
        self.queue.insert(
            at,
            Queued {
                seq,
                room,
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

    pub(super) fn push(
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
    pub(super) fn push_raw(
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
    pub(super) fn push_failed(
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
                    ..
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

    pub(super) fn log_and_deliver(
        &mut self,
        event_id: &EventId,
        (sender, room): (&UserId, &RoomId),
        kind: PushKind,
        notification: ChannelNotification,
        out: &mut Out<'_>,
    ) {
        let record = Record::Pushed {
            kind,
            room: Some(room.clone()),
            delivered: BTreeSet::new(),
            acked: false,
            redacted: false,
        };
        let seq = self.log(event_id, sender, record, out);
        self.deliver(event_id, seq, notification, out);
    }
}
