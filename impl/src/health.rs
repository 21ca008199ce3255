//! What `GET /health` reports (README "Health"): per identity, whether its sync
//! works (the homeserver answers, the age of the last successful sync, the last
//! error, a rejected access token), the backlog of undecryptable events the model
//! holds, and whether the engine keeps up.
//!
//! The sync loop ([`crate::matrix::start`]) writes each identity's [`SyncHealth`];
//! the HTTP route ([`crate::http::health_router`]) reads it, asks the engine
//! ([`EngineProbe`]) and renders the JSON with [`report`] and [`identity_report`].
//! Nothing here decides anything the model decides: it is the driver's own IO state.

use crate::engine::EngineHandle;
use mc_model::IdentityId;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A sync is taken as working when one succeeded within this: the long poll
/// (30 s, `SyncSettings`' default) plus matrix-sdk's request timeout (30 s) and a
/// margin. A homeserver that keeps a request hanging, or matrix-sdk retrying a
/// 5xx answer inside one `sync_once`, shows here.
pub const SYNC_STALE: Duration = Duration::from_secs(90);

/// How long `/health` waits for the engine to answer a read before it says the
/// engine does not keep up (the read waits behind every queued input).
pub const ENGINE_TIMEOUT: Duration = Duration::from_secs(2);

/// A read that waited longer than this behind queued inputs: the engine lags.
pub const ENGINE_LAG_LIMIT: Duration = Duration::from_secs(1);

/// Where an identity's sync loop is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncState {
    /// Not synced yet (`serve` is starting).
    Starting,
    /// The last sync succeeded.
    Syncing,
    /// The last sync failed; the loop retries (see `mc_adapters::sync::Retry`).
    Retrying,
    /// The homeserver rejected the access token (`M_UNKNOWN_TOKEN`; `soft_logout`
    /// as the homeserver said): the loop stopped. `matrix-channel login --identity
    /// NAME` logs in again.
    TokenRejected { soft_logout: bool },
    /// The loop stopped for another reason (the engine stopped, or saving the sync
    /// position failed); `last_error` says which.
    Stopped,
}

impl SyncState {
    /// The name in the JSON: `starting`, `syncing`, `retrying`, `token_rejected`,
    /// `stopped`.
    pub fn as_str(self) -> &'static str {
        match self {
            SyncState::Starting => "starting",
            SyncState::Syncing => "syncing",
            SyncState::Retrying => "retrying",
            SyncState::TokenRejected { .. } => "token_rejected",
            SyncState::Stopped => "stopped",
        }
    }
}

/// A snapshot of an identity's sync, as the loop last recorded it.
#[derive(Clone, Debug)]
pub struct SyncStatus {
    pub state: SyncState,
    /// Whether the homeserver answered the last request (a sync or a probe of
    /// `GET /_matrix/client/versions`), with any HTTP status; `None` before any.
    pub homeserver_answers: Option<bool>,
    /// When the last sync succeeded.
    pub last_sync_ok: Option<Instant>,
    /// The last error and when it happened (kept after a later success).
    pub last_error: Option<(String, Instant)>,
    /// What the sync loop could not hand to the model, counted since the start.
    pub skipped: Skipped,
}

/// What an identity's sync loop could not hand to the model, counted since `serve`
/// started (each one is also a WARN in the log, with the room when there is one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Invites whose state could not be read (an `m.room.member` event of the
    /// stripped invite state that does not parse, or an invite whose inviter cannot
    /// be read at start): the model never saw them, so they are never joined.
    pub unreadable_invites: u64,
    /// How often matrix-sdk's decryption reports were missed (the redecryptor
    /// lagged behind room keys, or our subscription to its reports fell behind; each
    /// time counts once, the log says how many reports): an event decrypted late may
    /// then never reach the model as what it is, and stays told as undecryptable.
    pub missed_decryption_reports: u64,
}

impl Default for SyncStatus {
    fn default() -> Self {
        SyncStatus {
            state: SyncState::Starting,
            homeserver_answers: None,
            last_sync_ok: None,
            last_error: None,
            skipped: Skipped::default(),
        }
    }
}

impl SyncStatus {
    /// Whether the identity can sync at `now`: its last sync succeeded and is no
    /// older than [`SYNC_STALE`].
    pub fn can_sync(&self, now: Instant) -> bool {
        self.state == SyncState::Syncing
            && self
                .last_sync_ok
                .is_some_and(|at| now.saturating_duration_since(at) <= SYNC_STALE)
    }
}

/// One identity's sync health, shared between its sync loop (writer) and `/health`
/// and `whoami` (readers). Cheap to clone.
#[derive(Clone, Default)]
pub struct SyncHealth(Arc<Mutex<SyncStatus>>);

impl SyncHealth {
    fn update(&self, f: impl FnOnce(&mut SyncStatus)) {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// A sync response was received (its events are handed to the engine next).
    pub fn synced(&self) {
        self.update(|s| {
            s.state = SyncState::Syncing;
            s.homeserver_answers = Some(true);
            s.last_sync_ok = Some(Instant::now());
        });
    }

    /// A sync failed; `answered`: the homeserver sent an HTTP answer (an error
    /// status) rather than none at all (connection refused, timeout).
    pub fn failed(&self, answered: bool, error: String) {
        self.update(|s| {
            s.state = SyncState::Retrying;
            s.homeserver_answers = Some(answered);
            s.last_error = Some((error, Instant::now()));
        });
    }

    /// A probe of the homeserver answered (`true`) or not.
    pub fn probed(&self, answered: bool) {
        self.update(|s| s.homeserver_answers = Some(answered));
    }

    /// The homeserver rejected the access token for good: the loop stops.
    pub fn token_rejected(&self, soft_logout: bool, error: String) {
        self.update(|s| {
            s.state = SyncState::TokenRejected { soft_logout };
            s.homeserver_answers = Some(true);
            s.last_error = Some((error, Instant::now()));
        });
    }

    /// The loop stopped for `error`.
    pub fn stopped(&self, error: String) {
        self.update(|s| {
            s.state = SyncState::Stopped;
            s.last_error = Some((error, Instant::now()));
        });
    }

    /// An invite whose state could not be read was skipped.
    pub fn invite_unreadable(&self) {
        self.update(|s| s.skipped.unreadable_invites += 1);
    }

    /// matrix-sdk's decryption reports were missed (once more).
    pub fn decryption_reports_missed(&self) {
        self.update(|s| s.skipped.missed_decryption_reports += 1);
    }

    pub fn snapshot(&self) -> SyncStatus {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// What the engine answered to `/health`'s read: how long the read waited behind
/// queued inputs, and the identity's parked undecryptable events
/// (`IdentityState::undecryptable`). `lag: None`: no answer within
/// [`ENGINE_TIMEOUT`] (or the engine stopped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineProbe {
    pub lag: Option<Duration>,
    pub undecryptable: Option<usize>,
    /// The engine's counters when the probe was answered.
    pub stats: crate::engine::EngineStats,
}

impl EngineProbe {
    /// Whether the engine answered within [`ENGINE_LAG_LIMIT`].
    pub fn keeps_up(&self) -> bool {
        self.lag.is_some_and(|lag| lag <= ENGINE_LAG_LIMIT)
    }
}

/// Reads the engine once, through its queue (so the read waits behind every
/// queued input): how long it took, and the parked undecryptable events of
/// `identity` (`None`: no identity asked, or it is unknown to the model).
pub async fn probe_engine(engine: &EngineHandle, identity: Option<String>) -> EngineProbe {
    let started = Instant::now();
    // A read for display only (the health report): nothing is decided from it.
    let read = engine.read(move |channel| {
        identity.and_then(|name| {
            channel
                .identity(&IdentityId(name))
                .map(|state| state.undecryptable().len())
        })
    });
    match tokio::time::timeout(ENGINE_TIMEOUT, read).await {
        Ok(Ok(undecryptable)) => EngineProbe {
            lag: Some(started.elapsed()),
            undecryptable,
            stats: engine.stats(),
        },
        _ => EngineProbe {
            lag: None,
            undecryptable: None,
            stats: engine.stats(),
        },
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Why an identity's sync does not work at `now`, as one word: its state's name
/// ([`SyncState::as_str`]), or `stale` when it is `syncing` but its last success is
/// older than [`SYNC_STALE`]. `None`: it works. Judged from its own last sync
/// alone, so an identity is healthy again the moment a sync of its succeeds,
/// whatever another identity's backoff.
pub fn degraded_why(status: &SyncStatus, now: Instant) -> Option<&'static str> {
    match status.state {
        _ if status.can_sync(now) => None,
        SyncState::Syncing => Some("stale"),
        state => Some(state.as_str()),
    }
}

/// The whole server at one instant: which identities cannot sync (by name, with
/// [`degraded_why`]) and whether the engine answered at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub degraded: std::collections::BTreeMap<String, &'static str>,
    pub engine_answers: bool,
}

impl Summary {
    /// Healthy: every identity can sync and the engine answered at all (a slow
    /// engine is reported, not degraded).
    pub fn ok(&self) -> bool {
        self.engine_answers && self.degraded.is_empty()
    }
}

/// The [`Summary`] of each identity's status (by name) and the engine's probe.
pub fn summarize<'a>(
    statuses: impl IntoIterator<Item = (&'a str, &'a SyncStatus)>,
    engine: &EngineProbe,
    now: Instant,
) -> Summary {
    Summary {
        degraded: statuses
            .into_iter()
            .filter_map(|(name, status)| Some((name.to_owned(), degraded_why(status, now)?)))
            .collect(),
        engine_answers: engine.lag.is_some(),
    }
}

/// `"ok"` or `"degraded"`.
pub fn status_word(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "degraded"
    }
}

/// The details of one identity (the `identity` of `GET /health` with a token, and
/// `whoami`'s `health`):
///
/// ```json
/// {"name": "bot", "status": "ok" | "degraded",
///  "sync": {"state": "syncing", "homeserver_answers": true, "last_sync_age_ms": 120,
///           "last_error": null | "…", "last_error_age_ms": null | 5000,
///           "token_rejected": false, "soft_logout": false},
///  "undecryptable_backlog": 0,
///  "skipped": {"unreadable_invites": 0, "missed_decryption_reports": 0},
///  "engine": {"keeps_up": true, "lag_ms": 1,
///             "inputs": 1234, "handle_us": 5600, "persist_us": 81000}}
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct IdentityReport {
    /// The identity's name.
    pub name: String,
    /// `ok` (it can sync and the engine answered) or `degraded`.
    pub status: &'static str,
    /// Its sync loop.
    pub sync: SyncReport,
    /// Undecryptable events the model holds for it; `null` when the engine did not
    /// answer.
    pub undecryptable_backlog: Option<usize>,
    /// What its sync loop could not hand to the model, counted since the start.
    pub skipped: SkippedReport,
    /// The engine (the whole server's).
    pub engine: EngineReport,
}

/// An identity's sync loop. Ages are milliseconds before the report (`null` when it
/// never happened).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct SyncReport {
    /// `starting`, `syncing`, `retrying`, `token_rejected` or `stopped`.
    pub state: &'static str,
    /// Whether the homeserver answered the last request; `null` before any.
    pub homeserver_answers: Option<bool>,
    /// Age of the last successful sync.
    pub last_sync_age_ms: Option<u64>,
    /// The last error (kept after a later success).
    pub last_error: Option<String>,
    /// Age of the last error.
    pub last_error_age_ms: Option<u64>,
    /// The homeserver rejected the access token: the loop stopped.
    pub token_rejected: bool,
    /// The rejection was a soft logout.
    pub soft_logout: bool,
}

/// What an identity's sync loop could not hand to the model, counted since the
/// start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct SkippedReport {
    /// Invites whose state could not be read.
    pub unreadable_invites: u64,
    /// How often matrix-sdk's decryption reports were missed.
    pub missed_decryption_reports: u64,
}

/// The engine: `inputs`, `handle_us` and `persist_us` are the whole server's counters
/// since it started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct EngineReport {
    /// Whether it answered within a second.
    pub keeps_up: bool,
    /// How long its answer waited behind queued inputs; `null` when it did not
    /// answer within two seconds.
    pub lag_ms: Option<u64>,
    /// Inputs handed to the model.
    pub inputs: u64,
    /// Microseconds in the model's transitions.
    pub handle_us: u64,
    /// Microseconds making inputs or state durable.
    pub persist_us: u64,
}

/// The [`IdentityReport`] of the identity `name` at `now`.
pub fn identity_report(
    name: &str,
    status: &SyncStatus,
    engine: &EngineProbe,
    now: Instant,
) -> IdentityReport {
    let age = |at: Instant| millis(now.saturating_duration_since(at));
    let (token_rejected, soft_logout) = match status.state {
        SyncState::TokenRejected { soft_logout } => (true, soft_logout),
        _ => (false, false),
    };
    let ok = status.can_sync(now) && engine.lag.is_some();
    IdentityReport {
        name: name.to_owned(),
        status: status_word(ok),
        sync: SyncReport {
            state: status.state.as_str(),
            homeserver_answers: status.homeserver_answers,
            last_sync_age_ms: status.last_sync_ok.map(age),
            last_error: status.last_error.as_ref().map(|(e, _)| e.clone()),
            last_error_age_ms: status.last_error.as_ref().map(|(_, at)| age(*at)),
            token_rejected,
            soft_logout,
        },
        undecryptable_backlog: engine.undecryptable,
        skipped: SkippedReport {
            unreadable_invites: status.skipped.unreadable_invites,
            missed_decryption_reports: status.skipped.missed_decryption_reports,
        },
        engine: EngineReport {
            keeps_up: engine.keeps_up(),
            lag_ms: engine.lag.map(millis),
            inputs: engine.stats.inputs,
            handle_us: engine.stats.handle_us,
            persist_us: engine.stats.persist_us,
        },
    }
}

/// The body of `GET /health`: `{"status": "ok" | "degraded"}`; when degraded,
/// `"degraded_identities": {"name": "retrying", …}` (the identities that cannot sync,
/// each with [`degraded_why`]; no error text) when there are any, and
/// `"engine_answers": false` when the engine did not answer; plus `"identity": {…}`
/// ([`identity_report`]) when the request carried a token of that identity.
pub fn report(summary: &Summary, identity: Option<IdentityReport>) -> Value {
    let mut body = json!({ "status": status_word(summary.ok()) });
    if !summary.degraded.is_empty() {
        body["degraded_identities"] = json!(summary.degraded);
    }
    if !summary.engine_answers {
        body["engine_answers"] = json!(false);
    }
    if let Some(identity) = identity {
        body["identity"] = json!(identity);
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(lag_ms: Option<u64>) -> EngineProbe {
        EngineProbe {
            lag: lag_ms.map(Duration::from_millis),
            undecryptable: lag_ms.map(|_| 3),
            stats: crate::engine::EngineStats {
                inputs: 7,
                handle_us: 70,
                persist_us: 700,
            },
        }
    }

    #[test]
    fn a_sync_counts_as_working_only_while_its_last_success_is_recent() {
        let health = SyncHealth::default();
        let now = Instant::now();
        assert!(!health.snapshot().can_sync(now), "starting");
        health.synced();
        let later = Instant::now();
        assert!(health.snapshot().can_sync(later));
        assert!(!health
            .snapshot()
            .can_sync(later + SYNC_STALE + Duration::from_secs(1)));
        health.failed(false, "connection refused".into());
        assert!(!health.snapshot().can_sync(Instant::now()));
        health.synced();
        assert!(health.snapshot().can_sync(Instant::now()));
        health.token_rejected(true, "M_UNKNOWN_TOKEN".into());
        assert!(!health.snapshot().can_sync(Instant::now()));
    }

    #[test]
    fn the_report_has_its_documented_shape() {
        let health = SyncHealth::default();
        health.synced();
        health.failed(true, "502 Bad Gateway".into());
        health.synced();
        let status = health.snapshot();
        let now = Instant::now();
        let value = json!(identity_report("bot", &status, &engine(Some(4)), now));
        let sync = &value["sync"];
        assert_eq!(value["name"], "bot");
        assert_eq!(value["status"], "ok");
        assert_eq!(sync["state"], "syncing");
        assert_eq!(sync["homeserver_answers"], true);
        assert!(sync["last_sync_age_ms"].is_u64(), "{value}");
        assert_eq!(sync["last_error"], "502 Bad Gateway");
        assert!(sync["last_error_age_ms"].is_u64(), "{value}");
        assert_eq!(sync["token_rejected"], false);
        assert_eq!(sync["soft_logout"], false);
        assert_eq!(value["undecryptable_backlog"], 3);
        assert_eq!(
            value["engine"],
            json!({"keeps_up": true, "lag_ms": 4, "inputs": 7, "handle_us": 70, "persist_us": 700})
        );
        let fine = summarize([("bot", &status)], &engine(Some(4)), now);
        assert_eq!(
            report(
                &fine,
                Some(identity_report("bot", &status, &engine(Some(4)), now))
            ),
            json!({"status": "ok", "identity": value})
        );
        let stuck = summarize([("bot", &status)], &engine(None), now);
        assert_eq!(
            report(&stuck, None),
            json!({"status": "degraded", "engine_answers": false})
        );
    }

    #[test]
    fn the_summary_names_each_identity_that_cannot_sync_and_one_that_synced_is_healthy_at_once() {
        let now = Instant::now();
        let (a, b, c) = (
            SyncHealth::default(),
            SyncHealth::default(),
            SyncHealth::default(),
        );
        a.synced();
        b.synced();
        b.failed(false, "connection refused".into());
        c.token_rejected(false, "M_UNKNOWN_TOKEN".into());
        let stale = SyncStatus {
            state: SyncState::Syncing,
            last_sync_ok: now.checked_sub(SYNC_STALE + Duration::from_secs(1)),
            ..SyncStatus::default()
        };
        let starting = SyncStatus::default();
        let (sa, sb, sc) = (a.snapshot(), b.snapshot(), c.snapshot());
        let all = [
            ("a", &sa),
            ("b", &sb),
            ("c", &sc),
            ("d", &stale),
            ("e", &starting),
        ];
        let summary = summarize(all, &engine(Some(1)), now);
        assert!(!summary.ok());
        assert_eq!(
            report(&summary, None),
            json!({"status": "degraded", "degraded_identities": {
                "b": "retrying", "c": "token_rejected", "d": "stale", "e": "starting",
            }})
        );
        // b syncs again, while the others stay as they are: b is healthy at once.
        b.synced();
        let sb = b.snapshot();
        let summary = summarize([("a", &sa), ("b", &sb)], &engine(Some(1)), Instant::now());
        assert_eq!(summary.degraded, Default::default());
        assert!(summary.ok());
        assert_eq!(report(&summary, None), json!({"status": "ok"}));
        let unanswered = summarize([("a", &sa), ("b", &sb)], &engine(None), Instant::now());
        assert!(!unanswered.ok());
    }

    #[test]
    fn skipped_invites_and_missed_decryption_reports_are_counted_in_the_details() {
        let health = SyncHealth::default();
        health.synced();
        let value = json!(identity_report(
            "bot",
            &health.snapshot(),
            &engine(Some(1)),
            Instant::now()
        ));
        assert_eq!(
            value["skipped"],
            json!({"unreadable_invites": 0, "missed_decryption_reports": 0}),
            "{value}"
        );
        health.invite_unreadable();
        health.invite_unreadable();
        health.decryption_reports_missed();
        health.decryption_reports_missed();
        health.decryption_reports_missed();
        let value = json!(identity_report(
            "bot",
            &health.snapshot(),
            &engine(Some(1)),
            Instant::now()
        ));
        assert_eq!(
            value["skipped"],
            json!({"unreadable_invites": 2, "missed_decryption_reports": 3}),
            "{value}"
        );
        // Counted, not degraded: the sync works.
        assert_eq!(value["status"], "ok", "{value}");
    }

    #[test]
    fn a_rejected_token_an_unreachable_homeserver_and_a_stuck_engine_are_degraded() {
        let now = Instant::now();
        let rejected = SyncHealth::default();
        rejected.token_rejected(false, "M_UNKNOWN_TOKEN: Unknown access token".into());
        let value = json!(identity_report(
            "bot",
            &rejected.snapshot(),
            &engine(Some(1)),
            now
        ));
        assert_eq!(value["status"], "degraded");
        assert_eq!(value["sync"]["state"], "token_rejected");
        assert_eq!(value["sync"]["token_rejected"], true);
        assert_eq!(value["sync"]["last_sync_age_ms"], Value::Null);

        let down = SyncHealth::default();
        down.synced();
        down.failed(false, "connection refused".into());
        let value = json!(identity_report(
            "bot",
            &down.snapshot(),
            &engine(Some(1)),
            now
        ));
        assert_eq!(value["status"], "degraded");
        assert_eq!(value["sync"]["homeserver_answers"], false);
        assert_eq!(value["sync"]["state"], "retrying");

        let fine = SyncHealth::default();
        fine.synced();
        let snapshot = fine.snapshot();
        let now = Instant::now();
        let down_now = down.snapshot();
        assert!(summarize([("bot", &snapshot)], &engine(Some(1)), now).ok());
        assert!(!summarize(
            [("bot", &snapshot), ("down", &down_now)],
            &engine(Some(1)),
            now
        )
        .ok());
        let stuck = engine(None);
        assert!(!summarize([("bot", &snapshot)], &stuck, now).ok());
        let value = json!(identity_report("bot", &snapshot, &stuck, now));
        assert_eq!(value["status"], "degraded");
        assert_eq!(
            value["engine"],
            json!({"keeps_up": false, "lag_ms": null, "inputs": 7, "handle_us": 70, "persist_us": 700})
        );
        assert_eq!(value["undecryptable_backlog"], Value::Null);
        // Slow but answering: reported, not degraded.
        let slow = engine(Some(1_500));
        assert!(!slow.keeps_up());
        assert!(summarize([("bot", &snapshot)], &slow, now).ok());
    }
}
