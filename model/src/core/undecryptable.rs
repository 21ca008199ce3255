//! Undecryptable events ([`crate::Input::Undecryptable`]) from allowed senders,
//! parked until they come decrypted or their grace
//! ([`crate::IdentityConfig::undecryptable_grace_ms`]) ends, then told to the
//! sessions by their metadata only.

use super::delivery::{LogEntry, Record};
use super::identity::IdentityState;
use super::Out;
use crate::config::Gate;
use crate::effect::DropReason;
use crate::event::Undecryptable;
use crate::ids::{EventId, Timestamp, UserId};
use crate::render::{render_undecryptable, undecryptable_notice_text, PushKind};
use serde::{Deserialize, Serialize};

/// How many undecryptable events each identity parks at once; beyond it the oldest
/// is told as undecryptable at once.
pub const UNDECRYPTABLE_MEMORY: usize = 1_000;

/// An undecryptable event waiting for its room key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Parked {
    pub event: Undecryptable,
    /// When the sessions are told it exists, unless it came decrypted before.
    pub until: Timestamp,
}

impl IdentityState {
    /// See [`Input::Undecryptable`]: the gate first, then the event is parked.
    pub(super) fn on_undecryptable(&mut self, event: Undecryptable, out: &mut Out<'_>) {
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
    pub(super) fn decrypted(&mut self, event_id: &EventId, sender: Option<&UserId>) {
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
    pub(super) fn fire_undecryptable(&mut self, out: &mut Out<'_>) {
        while let Some(at) = self.undecryptable.iter().position(|p| p.until <= out.now) {
            if let Some(parked) = self.undecryptable.remove(at) {
                self.tell_undecryptable(parked.event, out);
            }
        }
    }

    /// The metadata-only push that says `event` exists, and the notice to its sender
    /// when the identity's `undecryptable_notice` is on and the room is still joined.
    pub(super) fn tell_undecryptable(&mut self, event: Undecryptable, out: &mut Out<'_>) {
        // Another event took this id into the log meanwhile: the id is not told twice.
        if self.log.contains_key(&event.event_id) {
            return out.drop(Some(&event.event_id), DropReason::Duplicate);
        }
        let notification = render_undecryptable(&event);
        self.log_and_deliver(
            &event.event_id,
            (&event.sender, &event.room),
            PushKind::Undecryptable,
            notification,
            out,
        );
        if self.config.undecryptable_notice && self.is_joined(&event.room) {
            out.notice(&event.room, &event.event_id, undecryptable_notice_text());
        }
    }
}
