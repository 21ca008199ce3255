//! What the sync loop decides on its own: how long a sync may long-poll
//! ([`LongPoll`]), how long it waits after a failure and how often it probes the
//! homeserver meanwhile ([`Retry`]), how a failure is treated ([`classify`]), and which
//! stripped state of an invite is no membership ([`is_other_state`]). Time is an
//! argument: nothing here reads a clock or sleeps.

use std::time::Duration;

/// How the sync loop waits after a failed sync.
///
/// The long poll backs off exponentially, from [`Retry::FIRST`] doubling to
/// [`Retry::MAX`], so a homeserver that answers with errors (5xx, 429) is not
/// hammered. But when it did not answer at all (connection refused, timeout: it is
/// down or restarting), the loop also probes `GET /_matrix/client/versions` (no
/// auth, no side effect, answered by every homeserver) every [`Retry::PROBE`], and
/// syncs at once when a probe answers: the first message after the homeserver is
/// back is then handed over within about `PROBE` plus one sync round trip (the 2 s
/// bound of issue 12), however long the outage was. Probing costs one tiny request
/// a second to a host that is down; a constant 1 s retry of the sync itself would
/// cost the same while down, but would also retry a homeserver that refuses (5xx)
/// every second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    next: Duration,
}

impl Retry {
    /// The wait after the first failure.
    pub const FIRST: Duration = Duration::from_secs(1);
    /// The longest wait.
    pub const MAX: Duration = Duration::from_secs(30);
    /// How often an unanswering homeserver is probed during a wait.
    pub const PROBE: Duration = Duration::from_secs(1);
    /// A probe that got no answer within this counts as unanswered.
    pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

    /// The waits of a loop that has not failed since its last success.
    pub fn new() -> Self {
        Retry { next: Self::FIRST }
    }

    /// The wait before the next sync attempt; the one after it is doubled, up to
    /// [`Retry::MAX`].
    pub fn backoff(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        wait
    }

    /// How long to sleep before the next probe when `left` remains of the wait:
    /// [`Retry::PROBE`], or what is left when that is less; `None` when nothing is
    /// left (the wait is over and the loop syncs).
    pub fn next_probe(left: Duration) -> Option<Duration> {
        if left.is_zero() {
            return None;
        }
        Some(Self::PROBE.min(left))
    }
}

impl Default for Retry {
    fn default() -> Self {
        Self::new()
    }
}

/// How long the next sync may long-poll (`/sync`'s `timeout`).
///
/// The first sync of the loop catches up on what happened while the server was
/// down, so it does not wait for new events (`timeout=0`); after a success the loop
/// long-polls ([`LongPoll::LONG`]). After a failure the next sync catches up again:
/// a long poll would hold the answer of a homeserver that is back until something
/// new happens (up to 30 s), and `/health` would read `retrying` all that time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LongPoll {
    timeout: Duration,
}

impl LongPoll {
    /// matrix-sdk's `SyncSettings` default.
    pub const LONG: Duration = Duration::from_secs(30);

    /// The first sync's: it catches up.
    pub fn new() -> Self {
        LongPoll {
            timeout: Duration::ZERO,
        }
    }

    /// The next sync's `timeout`.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// A sync succeeded: the next one long-polls.
    pub fn succeeded(&mut self) {
        self.timeout = Self::LONG;
    }

    /// A sync failed: the next one catches up.
    pub fn failed(&mut self) {
        self.timeout = Duration::ZERO;
    }
}

impl Default for LongPoll {
    fn default() -> Self {
        Self::new()
    }
}

/// What the Matrix library's error says of a failed sync, read off it by the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncError {
    /// The homeserver answered `M_UNKNOWN_TOKEN`, with this `soft_logout`; `None` for
    /// any other error.
    pub unknown_token: Option<bool>,
    /// The request got no HTTP answer (connection refused, reset, timed out).
    pub unanswered: bool,
}

/// Why a sync failed, as the loop treats it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncFailure {
    /// No HTTP answer (connection refused, reset, timed out): wait for a probe.
    Unreachable,
    /// The homeserver answered with an error (or its answer could not be used):
    /// back off.
    Refused,
    /// `M_UNKNOWN_TOKEN`: the access token is no longer valid (logged out, device
    /// deleted; `soft_logout` as the homeserver said). Retrying cannot help.
    TokenRejected { soft_logout: bool },
}

/// How the loop treats `error`: a rejected token stops it, whatever else the error
/// says; no answer waits for a probe; any other error backs off.
pub fn classify(error: SyncError) -> SyncFailure {
    match error.unknown_token {
        Some(soft_logout) => SyncFailure::TokenRejected { soft_logout },
        None if error.unanswered => SyncFailure::Unreachable,
        None => SyncFailure::Refused,
    }
}

/// Whether `raw` (one event of an invite's stripped state) is readable JSON of a type
/// other than `m.room.member`. Anything else is a membership to hand over, or state
/// that cannot be read, which is counted and logged.
pub fn is_other_state(raw: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(raw)
        .ok()
        .and_then(|event| event["type"].as_str().map(|t| t != "m.room.member"))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_a_failed_sync_the_next_one_catches_up_without_long_polling() {
        let mut poll = LongPoll::new();
        assert_eq!(poll.timeout(), Duration::ZERO, "the first sync catches up");
        assert_eq!(LongPoll::default(), poll);
        poll.succeeded();
        assert_eq!(poll.timeout(), LongPoll::LONG);
        // The homeserver is back: the sync that follows answers at once, so `/health`
        // recovers with it rather than after a long poll with nothing new.
        poll.failed();
        assert_eq!(poll.timeout(), Duration::ZERO);
        poll.succeeded();
        assert_eq!(poll.timeout(), LongPoll::LONG);
        assert_eq!(LongPoll::LONG, Duration::from_secs(30));
    }

    #[test]
    fn the_sync_backoff_doubles_from_one_second_to_thirty_and_probes_every_second() {
        let mut retry = Retry::new();
        let waits: Vec<u64> = (0..8).map(|_| retry.backoff().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(Retry::new().backoff(), Duration::from_secs(1));
        assert_eq!(Retry::default(), Retry::new());
        // The first message after an outage waits at most one probe interval (plus a
        // sync), the 2 s bound of issue 12.
        assert!(Retry::PROBE <= Duration::from_secs(1));
        assert!(Retry::PROBE_TIMEOUT <= Duration::from_secs(2));
    }

    #[test]
    fn a_wait_probes_every_probe_interval_and_ends_when_nothing_is_left() {
        assert_eq!(Retry::next_probe(Duration::ZERO), None);
        assert_eq!(
            Retry::next_probe(Duration::from_secs(30)),
            Some(Retry::PROBE)
        );
        let short = Duration::from_millis(300);
        assert_eq!(Retry::next_probe(short), Some(short));
    }

    #[test]
    fn an_unknown_token_stops_the_sync_no_answer_probes_and_other_errors_back_off() {
        for unanswered in [false, true] {
            for soft_logout in [false, true] {
                let error = SyncError {
                    unknown_token: Some(soft_logout),
                    unanswered,
                };
                assert_eq!(classify(error), SyncFailure::TokenRejected { soft_logout });
            }
        }
        let other = |unanswered| SyncError {
            unknown_token: None,
            unanswered,
        };
        assert_eq!(classify(other(true)), SyncFailure::Unreachable);
        assert_eq!(classify(other(false)), SyncFailure::Refused);
    }

    #[test]
    fn only_stripped_state_readable_as_another_type_is_left_out_of_the_invites() {
        assert!(is_other_state(
            r#"{"type": "m.room.name", "state_key": "", "sender": "@a:hs", "content": {"name": "x"}}"#
        ));
        for raw in [
            r#"{"type": "m.room.member", "state_key": "@bot:hs", "sender": "@a:hs", "content": {"membership": "invite"}}"#,
            r#"{"type": "m.room.member", "state_key": "@bot:hs", "content": {}}"#,
            r#"{"type": 7}"#,
            r#"{"content": {}}"#,
            "not json",
        ] {
            assert!(!is_other_state(raw), "{raw}");
        }
    }
}
