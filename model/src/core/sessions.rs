//! Claude Code sessions: attach ([`crate::Input::Attach`]), the attach grace
//! ([`crate::IdentityConfig::attach_grace_ms`]), becoming live (decided verdicts,
//! gap cuts, the queue's replay, then what was held, in that order), detach, a lost
//! stream, and each attach's generation (a failure reported for an earlier attach
//! does not detach the session).

use super::delivery::Queued;
use super::identity::IdentityState;
use super::prompts::Phase;
use super::Out;
use crate::effect::DropReason;
use crate::ids::{RoomId, SessionId, Timestamp};
use crate::meta::MetaKey;
use crate::render::{render_gap_cut, render_replay_cut};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Whether a session's stream is open, and whether it is pushed to yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionPhase {
    /// Attached, inside its attach grace ([`IdentityConfig::attach_grace_ms`]):
    /// nothing is pushed to it before `until` (ms). What is delivered to it
    /// meanwhile is held, in order, and pushed when the grace ends, after its
    /// verdicts, gap cuts and replay.
    Attaching {
        until: Timestamp,
    },
    /// Pushed to.
    Live,
    Detached,
}

impl IdentityState {
    pub(super) fn is_live(&self, session: &SessionId) -> bool {
        self.sessions.get(session) == Some(&SessionPhase::Live)
    }

    pub(super) fn live_sessions(&self) -> Vec<SessionId> {
        self.sessions
            .iter()
            .filter(|(_, state)| **state == SessionPhase::Live)
            .map(|(session, _)| session.clone())
            .collect()
    }

    /// Whether `session`'s stream is open: live, or inside its attach grace.
    pub(super) fn is_attached(&self, session: &SessionId) -> bool {
        matches!(
            self.sessions.get(session),
            Some(SessionPhase::Live | SessionPhase::Attaching { .. })
        )
    }

    /// The sessions delivered to: the live ones and the attaching ones.
    pub(super) fn attached_sessions(&self) -> Vec<SessionId> {
        self.sessions
            .iter()
            .filter(|(session, _)| self.is_attached(session))
            .map(|(session, _)| session.clone())
            .collect()
    }

    /// Marks `session` detached; what was held for it is delivered again, to the
    /// sessions that lack it or to the queue.
    pub(super) fn set_detached(&mut self, session: &SessionId, out: &mut Out<'_>) {
        if let Some(state) = self.sessions.get_mut(session) {
            *state = SessionPhase::Detached;
        }
        self.unbriefed.remove(session);
        self.stop_typing_unattended(out);
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

    /// A session's stream opened. It is live at once when the grace is 0, else when
    /// the grace ends ([`IdentityState::fire_attach_graces`]); attaching again restarts
    /// the grace and keeps what is held.
    pub(super) fn attach(&mut self, session: SessionId, out: &mut Out<'_>) {
        self.attaches += 1;
        self.generations.insert(session.clone(), self.attaches);
        self.reopen_prompts(&session, out);
        if self.config.attach_grace_ms == 0 {
            return self.become_live(session, out);
        }
        let until = out.now.saturating_add(self.config.attach_grace_ms);
        self.unbriefed.remove(&session);
        self.sessions
            .insert(session, SessionPhase::Attaching { until });
    }

    /// The attach grace ended: its decided verdicts are sent, then the gap cuts, the
    /// queue's replay and what was held for it are pushed, in that order.
    pub(super) fn become_live(&mut self, session: SessionId, out: &mut Out<'_>) {
        self.sessions.insert(session.clone(), SessionPhase::Live);
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
        let (mine, others): (Vec<RoomId>, Vec<RoomId>) = std::mem::take(&mut self.gap_cuts)
            .into_iter()
            .partition(|room| self.receives(&session, Some(room)));
        self.gap_cuts = others;
        for room in mine {
            self.push(&session, None, 0, render_gap_cut(&room), out);
        }
        self.replay(&session, out);
        for held in self.held.remove(&session).unwrap_or_default() {
            // The session attached again with another label, or its label's room
            // changed, during the grace: what it no longer receives is delivered
            // again, to the sessions of its room or to the queue.
            if !self.receives(&session, held.room.as_ref()) {
                self.push_failed(
                    &session,
                    Some(held.event_id),
                    held.seq,
                    held.notification,
                    out,
                );
                continue;
            }
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
    pub(super) fn fire_attach_graces(&mut self, out: &mut Out<'_>) {
        let due: Vec<SessionId> = self
            .sessions
            .iter()
            .filter(|(_, state)| {
                matches!(state, SessionPhase::Attaching { until } if *until <= out.now)
            })
            .map(|(session, _)| session.clone())
            .collect();
        for session in due {
            self.become_live(session, out);
        }
    }

    pub(super) fn detach(&mut self, session: &SessionId, out: &mut Out<'_>) {
        if self.sessions.contains_key(session) {
            self.set_detached(session, out);
            self.end_session_grants(session, out);
            self.withdraw_prompts(session, out);
        } else {
            out.drop(None, DropReason::UnknownSession);
        }
    }

    /// Replays to `session` what the queue holds of the rooms it receives, oldest
    /// first, cut to the replay budget (the newest events are kept; a notice says
    /// how many older ones were omitted). The other rooms' events stay queued.
    pub(super) fn replay(&mut self, session: &SessionId, out: &mut Out<'_>) {
        let (mut mine, others): (VecDeque<Queued>, VecDeque<Queued>) =
            std::mem::take(&mut self.queue)
                .into_iter()
                .partition(|queued| self.receives(session, queued.room.as_ref()));
        self.queue = others;
        let omitted = mine.len().saturating_sub(self.config.replay_budget);
        if omitted > 0 {
            mine.drain(..omitted);
            out.drop(None, DropReason::ReplayCut { omitted });
            self.push(session, None, 0, render_replay_cut(omitted), out);
        }
        for queued in mine {
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

    pub(super) fn generation(&self, session: &SessionId) -> u64 {
        self.generations.get(session).copied().unwrap_or(0)
    }

    /// A send to `session`'s attach `generation` failed: that stream is gone. The
    /// session is detached only if it has not attached again since.
    pub(super) fn lost_stream(&mut self, session: &SessionId, generation: u64, out: &mut Out<'_>) {
        if self.generation(session) == generation && self.sessions.contains_key(session) {
            self.set_detached(session, out);
        }
    }
}
