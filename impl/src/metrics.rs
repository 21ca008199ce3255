//! What `GET /metrics` exposes (docs/operations.md "Metrics"): the server's counters,
//! histograms and gauges in one `prometheus-client` [`Registry`], rendered in the
//! Prometheus text format (version 0.0.4) by [`Metrics::render`].
//!
//! Observation only: nothing reads a metric to decide anything. The engine counts
//! what the model's effects were and how they were executed (`crate::engine`), the
//! tool wrapper every tool call (`crate::mcp`), and a scrape sets the gauges from a
//! read of the model's state and the sync loops' health ([`Gauges`]). Every label
//! value comes from a closed set (tool names, outcomes, reasons, push kinds, identity
//! names): never a room, user, event or request id.

use mc_adapters::metrics::Observation;
use mc_model::{Channel, EventId};
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The `Content-Type` of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// How many Matrix events' receipt times are kept for the push latency: the oldest
/// goes first (an event never pushed, dropped or queued for a detached session, is
/// not timed).
pub const RECEIPTS_KEPT: usize = 4096;

/// The `outcome` values of `matrix_channel_prompts_total`.
pub const PROMPT_OUTCOMES: [&str; 6] = [
    "posted",
    "answered",
    "expired",
    "evicted",
    "superseded",
    "post_failed",
];

/// The `kind` values of `matrix_channel_matrix_sends_total`: the engine's requests
/// to the homeserver, by effect.
pub const MATRIX_SENDS: [&str; 8] = [
    "prompt",
    "edit",
    "announce",
    "notice",
    "join",
    "typing",
    "create_room",
    "write",
];

type Labels = Vec<(&'static str, String)>;
type Timing = Family<Labels, Histogram, fn() -> Histogram>;

fn labels<const N: usize>(pairs: [(&'static str, &str); N]) -> Labels {
    pairs.into_iter().map(|(k, v)| (k, v.to_owned())).collect()
}

/// Latency buckets, in seconds: 1 ms to about 33 s, doubling.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Engine time buckets, in seconds: 10 µs to about 0.3 s, doubling.
fn engine_seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.000_01, 2.0, 16))
}

/// Every metric of the server. Cheap to share behind an `Arc`; every method takes
/// `&self`.
pub struct Metrics {
    registry: Registry,
    pushes: Family<Labels, Counter>,
    replays: Family<Labels, Counter>,
    verdicts: Family<Labels, Counter>,
    verdict_sends: Family<Labels, Counter>,
    prompts: Family<Labels, Counter>,
    drops: Family<Labels, Counter>,
    tool_calls: Family<Labels, Counter>,
    matrix_sends: Family<Labels, Counter>,
    push_latency: Histogram,
    tool_seconds: Timing,
    engine_seconds: Histogram,
    sessions_attached: Family<Labels, Gauge>,
    prompts_pending: Family<Labels, Gauge>,
    undecryptable_backlog: Family<Labels, Gauge>,
    sync_age: Family<Labels, Gauge<f64, AtomicU64>>,
    /// When each recent Matrix event was handed to the engine, for the push latency.
    receipts: Mutex<Receipts>,
}

#[derive(Default)]
struct Receipts {
    at: HashMap<EventId, Instant>,
    order: VecDeque<EventId>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every metric registered, at zero; the names are `matrix_channel_` and the
    /// name below (docs/operations.md "Metrics" says what each one counts).
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("matrix_channel");
        let m = Metrics {
            pushes: Family::default(),
            replays: Family::default(),
            verdicts: Family::default(),
            verdict_sends: Family::default(),
            prompts: Family::default(),
            drops: Family::default(),
            tool_calls: Family::default(),
            matrix_sends: Family::default(),
            push_latency: seconds(),
            tool_seconds: Family::new_with_constructor(seconds),
            engine_seconds: engine_seconds(),
            sessions_attached: Family::default(),
            prompts_pending: Family::default(),
            undecryptable_backlog: Family::default(),
            sync_age: Family::default(),
            receipts: Mutex::default(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "pushes",
            "Channel notifications written to a session's stream, by push kind and result (sent, failed)",
            m.pushes.clone(),
        );
        r.register(
            "replays",
            "Pushes of events replayed to a session that attached after they arrived, by result",
            m.replays.clone(),
        );
        r.register(
            "verdicts",
            "Verdicts taken, by behavior (allow, deny) and via (text, reaction, grant, policy)",
            m.verdicts.clone(),
        );
        r.register(
            "verdict_sends",
            "Verdicts written to the session that asked, by result (sent, failed)",
            m.verdict_sends.clone(),
        );
        r.register(
            "prompts",
            "Permission prompts by outcome (posted, answered, expired, evicted, superseded, post_failed)",
            m.prompts.clone(),
        );
        r.register(
            "drops",
            "Inputs and outcomes not acted on, by the model's drop reason",
            m.drops.clone(),
        );
        r.register(
            "tool_calls",
            "MCP tool calls, by tool and result (ok, or the error kind)",
            m.tool_calls.clone(),
        );
        r.register(
            "matrix_sends",
            "Requests to the homeserver the engine made, by kind and result (ok, failed)",
            m.matrix_sends.clone(),
        );
        r.register(
            "push_latency_seconds",
            "From a Matrix event handed to the engine by the sync loop to its push written to a session's stream (replays not counted)",
            m.push_latency.clone(),
        );
        r.register(
            "tool_seconds",
            "Time a tool call took, by tool",
            m.tool_seconds.clone(),
        );
        r.register(
            "engine_input_seconds",
            "Engine time per input: the model's transition and making it durable",
            m.engine_seconds.clone(),
        );
        r.register(
            "sessions_attached",
            "Channel sessions attached (stream open), by identity; set at each scrape",
            m.sessions_attached.clone(),
        );
        r.register(
            "prompts_pending",
            "Permission prompts not yet answered (posting, pending, settling, withdrawn), by identity; set at each scrape",
            m.prompts_pending.clone(),
        );
        r.register(
            "undecryptable_backlog",
            "Encrypted events waiting for their room key, by identity; set at each scrape",
            m.undecryptable_backlog.clone(),
        );
        r.register(
            "sync_age_seconds",
            "Seconds since the identity's last successful sync; absent before its first",
            m.sync_age.clone(),
        );
        // The series whose label values are known up front start at zero, so that a
        // scrape shows them (and `rate()` works) before the first count.
        for result in ["sent", "failed"] {
            for kind in mc_model::render::PushKind::ALL {
                let _ = m
                    .pushes
                    .get_or_create(&labels([("kind", kind.as_str()), ("result", result)]));
            }
            let _ = m.replays.get_or_create(&labels([("result", result)]));
            let _ = m.verdict_sends.get_or_create(&labels([("result", result)]));
        }
        for behavior in ["allow", "deny"] {
            for via in ["text", "reaction", "grant", "policy"] {
                let _ = m
                    .verdicts
                    .get_or_create(&labels([("behavior", behavior), ("via", via)]));
            }
        }
        for outcome in PROMPT_OUTCOMES {
            let _ = m.prompts.get_or_create(&labels([("outcome", outcome)]));
        }
        for kind in MATRIX_SENDS {
            for result in ["ok", "failed"] {
                let _ = m
                    .matrix_sends
                    .get_or_create(&labels([("kind", kind), ("result", result)]));
            }
        }
        Metrics { registry, ..m }
    }

    /// Counts what a model step's effects were ([`mc_adapters::metrics::observations`])
    /// and the engine time it took (`took`: the transition and the journal).
    pub fn step(&self, effects: &[mc_model::Effect], took: Duration) {
        self.engine_seconds.observe(took.as_secs_f64());
        for seen in mc_adapters::metrics::observations(effects) {
            match seen {
                Observation::Verdict { behavior, via } => self
                    .verdicts
                    .get_or_create(&labels([("behavior", behavior), ("via", via)]))
                    .inc(),
                Observation::Prompt(outcome) => self
                    .prompts
                    .get_or_create(&labels([("outcome", outcome)]))
                    .inc(),
                Observation::Dropped(reason) => {
                    self.drops.get_or_create(&vec![("reason", reason)]).inc()
                }
            };
        }
    }

    /// A Matrix event was handed to the engine now (the sync loop's receipt): its
    /// first push is timed from here ([`Metrics::pushed`]). Keeps the latest
    /// [`RECEIPTS_KEPT`].
    pub fn received(&self, event: &EventId) {
        let mut r = self.receipts.lock().unwrap_or_else(|e| e.into_inner());
        if r.at.insert(event.clone(), Instant::now()).is_none() {
            r.order.push_back(event.clone());
        }
        while r.order.len() > RECEIPTS_KEPT {
            if let Some(old) = r.order.pop_front() {
                r.at.remove(&old);
            }
        }
    }

    /// Takes the receipt time of `event`, if it is still kept.
    pub fn receipt(&self, event: &EventId) -> Option<Instant> {
        let mut r = self.receipts.lock().unwrap_or_else(|e| e.into_inner());
        let at = r.at.remove(event)?;
        r.order.retain(|e| e != event);
        Some(at)
    }

    /// A push of `kind` was written (`sent`) or failed; `replayed`: a replay;
    /// `received`: the event's receipt ([`Metrics::receipt`]), timed when sent.
    pub fn pushed(&self, kind: &str, replayed: bool, sent: bool, received: Option<Instant>) {
        let result = if sent { "sent" } else { "failed" };
        self.pushes
            .get_or_create(&labels([("kind", kind), ("result", result)]))
            .inc();
        if replayed {
            self.replays
                .get_or_create(&labels([("result", result)]))
                .inc();
        }
        if let (true, Some(at)) = (sent, received) {
            self.push_latency.observe(at.elapsed().as_secs_f64());
        }
    }

    /// A verdict was written to its session (`sent`) or failed.
    pub fn verdict_sent(&self, sent: bool) {
        let result = if sent { "sent" } else { "failed" };
        self.verdict_sends
            .get_or_create(&labels([("result", result)]))
            .inc();
    }

    /// A request to the homeserver of `kind` ended, `ok` or failed.
    pub fn matrix_send(&self, kind: &'static str, ok: bool) {
        let result = if ok { "ok" } else { "failed" };
        self.matrix_sends
            .get_or_create(&labels([("kind", kind), ("result", result)]))
            .inc();
    }

    /// A call of `tool` ended with `result` (`ok` or the error kind) after `took`.
    pub fn tool_call(&self, tool: &'static str, result: &'static str, took: Duration) {
        self.tool_calls
            .get_or_create(&labels([("tool", tool), ("result", result)]))
            .inc();
        self.tool_seconds
            .get_or_create(&labels([("tool", tool)]))
            .observe(took.as_secs_f64());
    }

    /// Sets the gauges to `gauges` (an identity missing from it loses its series).
    pub fn set_gauges(&self, gauges: &Gauges) {
        self.sessions_attached.clear();
        self.prompts_pending.clear();
        self.undecryptable_backlog.clear();
        self.sync_age.clear();
        for (identity, model) in &gauges.model {
            let id = labels([("identity", identity)]);
            self.sessions_attached
                .get_or_create(&id)
                .set(gauge(model.sessions_attached));
            self.prompts_pending
                .get_or_create(&id)
                .set(gauge(model.prompts_pending));
            self.undecryptable_backlog
                .get_or_create(&id)
                .set(gauge(model.undecryptable_backlog));
        }
        for (identity, age) in &gauges.sync_age {
            if let Some(age) = age {
                self.sync_age
                    .get_or_create(&labels([("identity", identity)]))
                    .set(age.as_secs_f64());
            }
        }
    }

    /// Every metric in the Prometheus text format (version 0.0.4, [`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_text::encode(&mut text, &self.registry);
        text
    }
}

fn gauge(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// What the model's state shows of one identity, for the gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelGauges {
    pub sessions_attached: usize,
    pub prompts_pending: usize,
    pub undecryptable_backlog: usize,
}

/// The gauges at one scrape: the model's, by identity (empty when the engine did not
/// answer), and each identity's time since its last successful sync (`None`: none
/// yet).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gauges {
    pub model: Vec<(String, ModelGauges)>,
    pub sync_age: Vec<(String, Option<Duration>)>,
}

/// A read of the model's state for display only (the gauges): nothing is decided
/// from it. Attached: a session whose stream is open (attaching or live); pending: a
/// prompt no verdict was taken on yet (posting, pending, settling, withdrawn).
pub fn model_gauges(channel: &Channel) -> Vec<(String, ModelGauges)> {
    use mc_model::SessionPhase;
    channel
        .identities()
        .map(|(id, state)| {
            let gauges = ModelGauges {
                sessions_attached: state
                    .sessions()
                    .values()
                    .filter(|phase| !matches!(phase, SessionPhase::Detached))
                    .count(),
                prompts_pending: state
                    .prompts()
                    .iter()
                    .filter(|p| p.phase.is_unanswered())
                    .count(),
                undecryptable_backlog: state.undecryptable().len(),
            };
            (id.0.clone(), gauges)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample `name{labels}` in `text`, `None` when absent.
    fn sample(text: &str, name_and_labels: &str) -> Option<f64> {
        text.lines()
            .find_map(|line| line.strip_prefix(name_and_labels)?.strip_prefix(' '))
            .map(|v| v.parse().unwrap())
    }

    #[test]
    fn every_family_is_named_with_the_prefix_and_typed() {
        let m = Metrics::new();
        // The families whose labels are known only once used.
        m.tool_call("whoami", "ok", Duration::ZERO);
        let drop = mc_model::Effect::Dropped {
            identity: None,
            event_id: None,
            reason: mc_model::DropReason::Stranger,
        };
        m.step(&[drop], Duration::ZERO);
        m.set_gauges(&Gauges {
            model: vec![("bot".into(), ModelGauges::default())],
            sync_age: vec![("bot".into(), Some(Duration::ZERO))],
        });
        let text = m.render();
        for (name, kind) in [
            ("pushes_total", "counter"),
            ("replays_total", "counter"),
            ("verdicts_total", "counter"),
            ("verdict_sends_total", "counter"),
            ("prompts_total", "counter"),
            ("drops_total", "counter"),
            ("tool_calls_total", "counter"),
            ("matrix_sends_total", "counter"),
            ("push_latency_seconds", "histogram"),
            ("tool_seconds", "histogram"),
            ("engine_input_seconds", "histogram"),
            ("sessions_attached", "gauge"),
            ("prompts_pending", "gauge"),
            ("undecryptable_backlog", "gauge"),
            ("sync_age_seconds", "gauge"),
        ] {
            let line = format!("# TYPE matrix_channel_{name} {kind}");
            assert!(text.contains(&line), "{line} in:\n{text}");
        }
    }

    #[test]
    fn the_series_of_known_labels_start_at_zero() {
        let text = Metrics::new().render();
        for series in [
            r#"matrix_channel_pushes_total{kind="gap_cut",result="failed"}"#,
            r#"matrix_channel_replays_total{result="sent"}"#,
            r#"matrix_channel_verdict_sends_total{result="failed"}"#,
            r#"matrix_channel_verdicts_total{behavior="deny",via="policy"}"#,
            r#"matrix_channel_prompts_total{outcome="post_failed"}"#,
            r#"matrix_channel_matrix_sends_total{kind="write",result="ok"}"#,
            "matrix_channel_push_latency_seconds_count",
            "matrix_channel_engine_input_seconds_count",
        ] {
            assert_eq!(sample(&text, series), Some(0.0), "{series} in:\n{text}");
        }
    }

    #[test]
    fn counters_move_with_their_labels() {
        let m = Metrics::new();
        m.pushed("message", false, true, None);
        m.pushed("message", true, true, None);
        m.pushed("reaction", false, false, None);
        m.verdict_sent(true);
        m.matrix_send("prompt", false);
        m.tool_call("send_message", "ok", Duration::from_millis(3));
        m.tool_call("send_message", "forbidden", Duration::from_millis(1));
        let text = m.render();
        for (series, value) in [
            (
                r#"matrix_channel_pushes_total{kind="message",result="sent"}"#,
                2.0,
            ),
            (
                r#"matrix_channel_pushes_total{kind="reaction",result="failed"}"#,
                1.0,
            ),
            (r#"matrix_channel_replays_total{result="sent"}"#, 1.0),
            (r#"matrix_channel_verdict_sends_total{result="sent"}"#, 1.0),
            (
                r#"matrix_channel_matrix_sends_total{kind="prompt",result="failed"}"#,
                1.0,
            ),
            (
                r#"matrix_channel_tool_calls_total{tool="send_message",result="ok"}"#,
                1.0,
            ),
            (
                r#"matrix_channel_tool_calls_total{tool="send_message",result="forbidden"}"#,
                1.0,
            ),
            (
                r#"matrix_channel_tool_seconds_count{tool="send_message"}"#,
                2.0,
            ),
        ] {
            assert_eq!(sample(&text, series), Some(value), "{series} in:\n{text}");
        }
        assert_eq!(
            sample(&text, r#"matrix_channel_replays_total{result="failed"}"#),
            Some(0.0)
        );
    }

    #[test]
    fn a_step_counts_its_verdicts_prompts_drops_and_engine_time() {
        let m = Metrics::new();
        let drop = mc_model::Effect::Dropped {
            identity: None,
            event_id: None,
            reason: mc_model::DropReason::PromptExpired,
        };
        m.step(&[drop.clone(), drop], Duration::from_micros(50));
        let text = m.render();
        assert_eq!(
            sample(
                &text,
                r#"matrix_channel_drops_total{reason="prompt_expired"}"#
            ),
            Some(2.0)
        );
        assert_eq!(
            sample(&text, r#"matrix_channel_prompts_total{outcome="expired"}"#),
            Some(2.0)
        );
        assert_eq!(
            sample(&text, "matrix_channel_engine_input_seconds_count"),
            Some(1.0)
        );
    }

    #[test]
    fn the_first_push_of_a_received_event_is_timed_and_a_replay_or_failure_is_not() {
        let m = Metrics::new();
        let e = EventId("$e".into());
        m.received(&e);
        let at = m.receipt(&e);
        assert!(at.is_some());
        assert_eq!(m.receipt(&e), None, "taken once");
        m.pushed("message", false, false, at);
        m.pushed("message", false, true, None);
        assert_eq!(
            sample(&m.render(), "matrix_channel_push_latency_seconds_count"),
            Some(0.0)
        );
        m.pushed("message", false, true, at);
        assert_eq!(
            sample(&m.render(), "matrix_channel_push_latency_seconds_count"),
            Some(1.0)
        );
    }

    #[test]
    fn only_the_latest_receipts_are_kept() {
        let m = Metrics::new();
        for i in 0..=RECEIPTS_KEPT {
            m.received(&EventId(format!("$e{i}")));
        }
        assert_eq!(m.receipt(&EventId("$e0".into())), None, "the oldest went");
        assert!(m.receipt(&EventId("$e1".into())).is_some());
        assert!(m.receipt(&EventId(format!("$e{RECEIPTS_KEPT}"))).is_some());
    }

    #[test]
    fn gauges_are_set_per_identity_and_an_identity_not_synced_yet_has_no_age() {
        let m = Metrics::new();
        m.set_gauges(&Gauges {
            model: vec![(
                "bot".into(),
                ModelGauges {
                    sessions_attached: 2,
                    prompts_pending: 1,
                    undecryptable_backlog: 3,
                },
            )],
            sync_age: vec![
                ("bot".into(), Some(Duration::from_millis(1500))),
                ("new".into(), None),
            ],
        });
        let text = m.render();
        assert_eq!(
            sample(&text, r#"matrix_channel_sessions_attached{identity="bot"}"#),
            Some(2.0)
        );
        assert_eq!(
            sample(&text, r#"matrix_channel_prompts_pending{identity="bot"}"#),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                r#"matrix_channel_undecryptable_backlog{identity="bot"}"#
            ),
            Some(3.0)
        );
        assert_eq!(
            sample(&text, r#"matrix_channel_sync_age_seconds{identity="bot"}"#),
            Some(1.5)
        );
        assert!(!text.contains(r#"identity="new""#), "{text}");
        // The engine did not answer: the model's gauges go, not stale values.
        m.set_gauges(&Gauges::default());
        assert!(!m.render().contains(r#"identity="bot""#));
    }
}
