//! The core alone: how fast [`Channel::handle`] takes inputs, measured against a cost
//! every input already pays on the real server, and how fast the model check explores
//! the pinned world.
//!
//! # What is measured
//! 1. **`handle`** (criterion, group `handle`, bench `mixed`): a fixed trace of
//!    [`BATCH`] inputs of the kinds a live server sees, handed one by one to a fresh
//!    clone of a [`Channel`] with one configured identity and one attached session
//!    (`iter_batched`: the clone is made outside the timing, so the state never grows
//!    past one batch). The trace is recorded once by driving the core the way the
//!    server does (every effect with an id is answered at once, `Sent` or `Posted`),
//!    so replaying it reports the same outcomes for the same effect ids. The mix, per
//!    cycle: an allowed sender's plain message, a reply to it (fallback and resolved
//!    parent), a thread message, an edit, a reaction and its redaction, a stranger's
//!    message and reaction, an acknowledge, a permission request answered by `yes
//!    <id>` or by a 👍 reaction whose settle window a tick closes, a tick, and the
//!    outcomes of every push, post and verdict send.
//! 2. **The baseline** (same group, bench `baseline`): `serde_json::from_str` into a
//!    `serde_json::Value` of a real `m.room.message` event
//!    (`impl/tests/data/events/text.json`), [`BATCH`] times per iteration, one per
//!    input: the server decodes at least that much JSON for every Matrix event before
//!    the core sees it, and none of it is ours. A yardstick, not a cost model (the
//!    outcomes and ticks in the trace come from no JSON). `ratio` is `handle`'s
//!    inputs/s over the baseline's decodes/s: above 1, the core costs less than the
//!    decode in front of it.
//! 3. **The model check** (not under criterion: one run each, timed with
//!    [`Instant`]): the full BFS of each scope of `model/tests/check/` (the world
//!    `model/tests/state_space.rs` pins), with two threads. Unique states must equal
//!    the pinned counts ([`Scope::pinned_states`], which the model check's tests
//!    assert too); otherwise the bench
//!    is not checking the pinned world, and it exits with status 1.
//!
//! Units: nanoseconds per input, inputs (or decodes) per second, seconds, states
//! per second (unique states over wall time). No timing is asserted.
//!
//! # Environment
//! - `MC_BENCH_QUICK=1`: a smoke run for CI (`cargo bench --profile dev`): criterion
//!   takes 10 samples in about half a second per bench, and each model check stops
//!   at depth [`QUICK_DEPTH`] (`bounded: true`; the pinned counts are not asserted).
//! - `MC_BENCH_OUT`: the directory `core.json` is written to (created if missing);
//!   `target/bench` under the workspace root when unset.
//! - criterion writes its own results under `$CRITERION_HOME`, else
//!   `$CARGO_TARGET_DIR/criterion`, else `target/criterion` under the workspace root;
//!   the numbers in `core.json` are read back from its `new/estimates.json` (the mean
//!   time of one iteration, a batch).
//!
//! # Output
//! `$MC_BENCH_OUT/core.json`: `quick`, `handle` (`workload`, `batch`,
//! `ns_per_input`, `inputs_per_s`, `baseline`, `baseline_ns_per_input`,
//! `baseline_per_s`, `ratio`) and `model_check` (per scope: `scope`,
//! `unique_states`, `states` (generated, duplicates included), `seconds`,
//! `states_per_s`, `bounded`), and a one-line summary on stdout. Under `cargo test`
//! (criterion's test mode) each bench runs once, the model checks run bounded, and
//! nothing is written.

#[path = "../../model/tests/check/mod.rs"]
mod check;

use check::{Scope, World};
use criterion::{BatchSize, Criterion, SamplingMode, Throughput};
use mc_model::{
    Channel, Effect, EffectId, EventId, IdentityConfig, Input, Message, MessageContent, Millis,
    MsgType, NewContent, Outcome, Parent, PermissionRequest, Reaction, Redaction, Relation,
    ReplyTo, RequestId, Timestamp, UserId,
};
use serde::Serialize;
use serde_json::Value;
use stateright::{Checker, Model};
use std::collections::{BTreeMap, VecDeque};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

/// Inputs per criterion iteration (and JSON decodes per baseline iteration).
const BATCH: usize = 1_000;
/// In quick mode each model check explores this many steps deep: 835 and 2,576
/// unique states, a fraction of a second in a debug build. (`target_state_count`
/// overshoots by tens of thousands: stateright checks it once per 1,500-state block.)
const QUICK_DEPTH: usize = 4;

/// criterion's group; its benches are [`HANDLE_BENCH`] and [`BASELINE_BENCH`].
const GROUP: &str = "handle";
const HANDLE_BENCH: &str = "mixed";
const BASELINE_BENCH: &str = "baseline";
const BASELINE: &str = "serde_json::Value decode of an m.room.message event";
/// A real `m.room.message` event, as a homeserver sends it in `/sync`.
const EVENT_JSON: &str = include_str!("../../impl/tests/data/events/text.json");

const IDENTITY: &str = "work";
const BOT: &str = "@claude-bot:example.org";
/// Allowed and an approver.
const ALICE: &str = "@alice:example.org";
/// Allowed, not an approver.
const BOB: &str = "@bob:example.org";
/// Allowed nowhere.
const MALLORY: &str = "@mallory:evil.example";
/// An MCP session id (`Mcp-Session-Id`), as the server mints them.
const SESSION: &str = "3f6c2a9e-5b1d-4c8e-9a47-0d2e6b8f1c35";
const ROOM: &str = "!ZCB3SX-vTJ0vaZqG9V0gVB1stvnbeGnFk0XPn6pPYbc";
/// The clock at the start of the trace (2026-11-29, like a real `origin_server_ts`).
const START: Timestamp = Timestamp(1_795_991_839_700);
/// Time between two Matrix events of the trace, ms.
const STEP: Millis = 400;

fn main() -> ExitCode {
    let quick = std::env::var_os("MC_BENCH_QUICK").is_some_and(|v| v == "1");
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    // criterion's own rule: it measures only under `--bench` without `--test`.
    let measuring = has("--bench") && !has("--test") && !has("--list");

    let trace = Trace::record(BATCH);
    trace.check_replay();
    let criterion_dir = criterion_dir();
    let started = SystemTime::now();
    let mut criterion = Criterion::default().output_directory(&criterion_dir);
    if quick {
        criterion = criterion
            .sample_size(10)
            .warm_up_time(Duration::from_millis(200))
            .measurement_time(Duration::from_millis(500));
    }
    let mut criterion = criterion.configure_from_args();
    bench_handle(&mut criterion, &trace, quick);
    criterion.final_summary();
    if has("--list") {
        return ExitCode::SUCCESS;
    }

    let bounded = quick || !measuring;
    let mut checks = Vec::new();
    for scope in Scope::ALL {
        let pinned = scope.pinned_states();
        let run = model_check(scope, bounded);
        if !bounded && run.unique_states != pinned {
            eprintln!(
                "error: the {} model check found {} unique states, but {pinned} are pinned \
                 (model/tests/state_space.rs): the bench is not checking the pinned world",
                run.scope, run.unique_states
            );
            return ExitCode::FAILURE;
        }
        checks.push(run);
    }
    if !measuring {
        println!("core bench: test mode, nothing measured, nothing written");
        return ExitCode::SUCCESS;
    }

    let handle_ns = match batch_mean_ns(&criterion_dir, HANDLE_BENCH, started) {
        Ok(ns) => ns / BATCH as f64,
        Err(error) => return fail(&error),
    };
    let baseline_ns = match batch_mean_ns(&criterion_dir, BASELINE_BENCH, started) {
        Ok(ns) => ns / BATCH as f64,
        Err(error) => return fail(&error),
    };
    let inputs_per_s = 1e9 / handle_ns;
    let baseline_per_s = 1e9 / baseline_ns;
    let ratio = inputs_per_s / baseline_per_s;
    let report = Report {
        quick,
        handle: HandleReport {
            workload: trace.workload(),
            batch: BATCH,
            ns_per_input: handle_ns,
            inputs_per_s,
            baseline: BASELINE,
            baseline_ns_per_input: baseline_ns,
            baseline_per_s,
            ratio,
        },
        model_check: checks,
    };
    let out = out_dir();
    let path = out.join("core.json");
    let text = serde_json::to_string_pretty(&report).expect("the report serializes");
    if let Err(error) = std::fs::create_dir_all(&out).and_then(|()| std::fs::write(&path, text)) {
        return fail(&format!("cannot write {}: {error}", path.display()));
    }
    let checks_line: Vec<String> = report.model_check.iter().map(CheckRun::summary).collect();
    println!(
        "core bench{}: handle {inputs_per_s:.0} inputs/s ({handle_ns:.0} ns/input), \
         baseline {baseline_per_s:.0}/s ({baseline_ns:.0} ns), ratio {ratio:.2}; \
         model check {}; written to {}",
        if quick { " (quick)" } else { "" },
        checks_line.join(", "),
        path.display()
    );
    ExitCode::SUCCESS
}

fn fail(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::FAILURE
}

/// Both benches of the group: the trace through `handle`, and the baseline decodes.
/// `flat` (quick mode): every sample runs as many iterations, so ten samples fit in
/// the short measurement time of a debug build.
fn bench_handle(criterion: &mut Criterion, trace: &Trace, flat: bool) {
    let mut group = criterion.benchmark_group(GROUP);
    group.throughput(Throughput::Elements(BATCH as u64));
    if flat {
        group.sampling_mode(SamplingMode::Flat);
    }
    group.bench_function(HANDLE_BENCH, |b| {
        b.iter_batched(
            || (trace.start.clone(), trace.inputs.clone()),
            |(mut channel, inputs)| {
                for (now, input) in inputs {
                    // The server executes and then drops every effect.
                    drop(black_box(channel.handle(now, input)));
                }
                // The state is dropped outside the timing, like the clone is made.
                channel
            },
            BatchSize::LargeInput,
        )
    });
    group.bench_function(BASELINE_BENCH, |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                let event: Value =
                    serde_json::from_str(black_box(EVENT_JSON)).expect("a valid event");
                drop(black_box(event));
            }
        })
    });
    group.finish();
}

/// Where criterion writes: its own order of preference, with the workspace's
/// `target/` in place of asking `cargo metadata`.
fn criterion_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        PathBuf::from(home)
    } else if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        PathBuf::from(target).join("criterion")
    } else {
        workspace_root().join("target").join("criterion")
    }
}

fn workspace_root() -> PathBuf {
    let bench = Path::new(env!("CARGO_MANIFEST_DIR"));
    bench.parent().unwrap_or(bench).to_path_buf()
}

fn out_dir() -> PathBuf {
    match std::env::var_os("MC_BENCH_OUT") {
        Some(dir) => PathBuf::from(dir),
        None => workspace_root().join("target").join("bench"),
    }
}

/// The mean time of one iteration of `bench`, ns, from criterion's
/// `<dir>/handle/<bench>/new/estimates.json`, which must have been written after
/// `since` (an older one is a previous run's: a filter or `--discard-baseline`
/// skipped this one).
fn batch_mean_ns(dir: &Path, bench: &str, since: SystemTime) -> Result<f64, String> {
    let path = dir
        .join(GROUP)
        .join(bench)
        .join("new")
        .join("estimates.json");
    let fresh = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .is_ok_and(|modified| modified >= since);
    if !fresh {
        return Err(format!(
            "criterion wrote no estimates for {GROUP}/{bench} in this run ({} is missing or \
             older); run every bench, and keep criterion's baseline saving on",
            path.display()
        ));
    }
    let text = std::fs::read_to_string(&path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let estimates: Value = serde_json::from_str(&text)
        .map_err(|error| format!("{} is not JSON: {error}", path.display()))?;
    estimates["mean"]["point_estimate"]
        .as_f64()
        .ok_or_else(|| format!("{} has no mean.point_estimate", path.display()))
}

/// `core.json`; fields in the order they are written.
#[derive(Serialize)]
struct Report {
    quick: bool,
    handle: HandleReport,
    model_check: Vec<CheckRun>,
}

/// `core.json`'s `handle`: times per input (ns) and rates (per second).
#[derive(Serialize)]
struct HandleReport {
    workload: String,
    batch: usize,
    ns_per_input: f64,
    inputs_per_s: f64,
    baseline: &'static str,
    baseline_ns_per_input: f64,
    baseline_per_s: f64,
    /// `inputs_per_s / baseline_per_s`.
    ratio: f64,
}

/// One model check run, an entry of `core.json`'s `model_check`.
#[derive(Serialize)]
struct CheckRun {
    scope: &'static str,
    unique_states: usize,
    /// Generated states, duplicates included (stateright's `state_count`).
    states: usize,
    seconds: f64,
    /// Unique states per second of wall time.
    states_per_s: f64,
    bounded: bool,
}

impl CheckRun {
    fn summary(&self) -> String {
        format!(
            "{} {} states in {:.2} s ({:.0}/s{})",
            self.scope,
            self.unique_states,
            self.seconds,
            self.states_per_s,
            if self.bounded { ", bounded" } else { "" }
        )
    }
}

/// The BFS of `scope` as `state_space.rs` runs it (two threads), or stopped at depth
/// [`QUICK_DEPTH`] when `bounded`.
fn model_check(scope: Scope, bounded: bool) -> CheckRun {
    let name = match scope {
        Scope::Delivery => "delivery",
        Scope::Prompts => "prompts",
        Scope::Rooms => "rooms",
        Scope::Sessions => "sessions",
        Scope::Grants => "grants",
        Scope::Policy => "policy",
    };
    let mut builder = World::new(scope).checker().threads(2);
    if bounded {
        builder = builder.target_max_depth(QUICK_DEPTH);
    }
    let started = Instant::now();
    let checker = builder.spawn_bfs().join();
    let seconds = started.elapsed().as_secs_f64();
    let unique_states = checker.unique_state_count();
    CheckRun {
        scope: name,
        unique_states,
        states: checker.state_count(),
        seconds,
        states_per_s: unique_states as f64 / seconds,
        bounded,
    }
}

/// The recorded workload: the state it starts from and the inputs, each with the
/// time it is handled at.
struct Trace {
    start: Channel,
    inputs: Vec<(Timestamp, Input)>,
    /// What the recording got back for each input, to check a replay against.
    effects: Vec<Vec<Effect>>,
}

impl Trace {
    /// Drives a fresh core through cycles of [`Recorder::cycle`] until `len` inputs
    /// were handled.
    fn record(len: usize) -> Self {
        let mut channel = Channel::new();
        channel
            .add_identity(IDENTITY.into(), config())
            .expect("a valid config");
        let mut recorder = Recorder {
            channel,
            now: START,
            inputs: Vec::new(),
            effects: Vec::new(),
            pending: VecDeque::new(),
            posted: BTreeMap::new(),
            ids: Ids(0x5eed),
        };
        recorder.handle(Input::Membership {
            identity: IDENTITY.into(),
            room: ROOM.into(),
            event_id: None,
            user: BOT.into(),
            membership: mc_model::Membership::Joined,
        });
        recorder.handle(Input::Attach {
            identity: IDENTITY.into(),
            session: SESSION.into(),
            label: None,
        });
        let start = recorder.channel.clone();
        recorder.inputs.clear();
        recorder.effects.clear();
        let mut cycle = 0;
        while recorder.inputs.len() < len {
            recorder.cycle(cycle);
            cycle += 1;
        }
        recorder.inputs.truncate(len);
        recorder.effects.truncate(len);
        Trace {
            start,
            inputs: recorder.inputs,
            effects: recorder.effects,
        }
    }

    /// Replays the trace on a clone of the start state and panics unless every input
    /// gives back what it gave when recorded (so the outcomes in the trace answer the
    /// effects the replay issues).
    fn check_replay(&self) {
        let mut channel = self.start.clone();
        for (index, ((now, input), recorded)) in self.inputs.iter().zip(&self.effects).enumerate() {
            let effects = channel.handle(*now, input.clone());
            assert_eq!(&effects, recorded, "input {index} replays differently");
        }
    }

    /// The input mix, counted by kind.
    fn workload(&self) -> String {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, input) in &self.inputs {
            *counts.entry(kind(input)).or_default() += 1;
        }
        let mix: Vec<String> = counts
            .iter()
            .map(|(kind, count)| format!("{count} {kind}"))
            .collect();
        format!(
            "one identity, one attached session, {} inputs: {}",
            self.inputs.len(),
            mix.join(", ")
        )
    }
}

/// A short name for what `input` is, for the workload description.
fn kind(input: &Input) -> &'static str {
    match input {
        Input::Attach { .. } => "attach",
        Input::Bind { .. } => "bind",
        Input::Revoke { .. } => "revoke",
        Input::Detach { .. } => "detach",
        Input::Message { message, .. } if message.sender.as_str() == MALLORY => "stranger messages",
        Input::Message { message, .. } => match message.content.as_ref().and_then(|c| {
            c.relation.as_ref().map(|r| match r {
                Relation::Reply { .. } => "replies",
                Relation::Replacement { .. } => "edits",
                Relation::Thread { .. } => "thread messages",
            })
        }) {
            Some(kind) => kind,
            None if message
                .content
                .as_ref()
                .is_some_and(|c| mc_model::verdict::parse_text_verdict(&c.body).is_some()) =>
            {
                "verdict messages"
            }
            None => "plain messages",
        },
        Input::Reaction { reaction, .. } if reaction.sender.as_str() == MALLORY => {
            "stranger reactions"
        }
        Input::Reaction { .. } => "reactions",
        Input::Redaction { .. } => "redactions",
        Input::PermissionRequest { .. } => "permission requests",
        Input::Acknowledge { .. } => "acknowledges",
        Input::Completed { .. } => "effect outcomes",
        Input::Tick => "ticks",
        Input::InvalidPermissionRequest { .. } => "unreadable permission requests",
        Input::AgentWrite { .. } => "agent writes",
        Input::Restarted => "restarts",
        Input::Membership { .. } => "memberships",
        Input::Unhandled { .. } => "events that are no input",
        Input::Undecryptable { .. } => "undecryptable events",
        Input::GapCut { .. } => "sync gaps cut",
    }
}

/// The identity: Alice may chat and answer prompts, Bob may chat, prompts go to the
/// room Alice or Bob last wrote in, a session is pushed to the instant it attaches
/// (no attach grace: the clock of a run stands still); every other setting is the
/// default.
fn config() -> IdentityConfig {
    let mut config = IdentityConfig::new(BOT.into(), [ALICE.into(), BOB.into()]);
    config.approvers = Some([UserId::from(ALICE)].into());
    config.attach_grace_ms = 0;
    config
}

/// Deterministic Matrix-looking identifiers (splitmix64 over a counter).
struct Ids(u64);

impl Ids {
    /// A room-version-4+ event id: `$` and 43 URL-safe base64 characters.
    fn event(&mut self) -> EventId {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut id = String::with_capacity(44);
        id.push('$');
        while id.len() < 44 {
            let mut bits = self.next();
            for _ in 0..10 {
                if id.len() == 44 {
                    break;
                }
                id.push(ALPHABET[(bits & 63) as usize] as char);
                bits >>= 6;
            }
        }
        EventId(id)
    }

    /// A permission request id: five letters of `a-km-z`.
    fn request(&mut self) -> RequestId {
        let letters = mc_model::verdict::REQUEST_ID_ALPHABET.as_bytes();
        let mut bits = self.next();
        let id: String = (0..5)
            .map(|_| {
                let letter = letters[(bits % 25) as usize] as char;
                bits /= 25;
                letter
            })
            .collect();
        RequestId::parse(&id).expect("letters from the alphabet")
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Chat bodies, cycled: what people type to an agent.
const BODIES: [&str; 6] = [
    "can you run the tests for the parser module and tell me what fails?",
    "looks good, but please also update the changelog",
    "why is the build slower since yesterday? check the last three commits",
    "ok",
    "Please **rename** `handle_input` to `handle` everywhere and keep the docs in sync; \
     then open a PR against main with a short description of what changed and why.",
    "stop for now, I'll look at it tomorrow 👍",
];

/// The HTML of the Markdown body in [`BODIES`].
const FORMATTED: &str = "Please <strong>rename</strong> <code>handle_input</code> to \
     <code>handle</code> everywhere and keep the docs in sync; then open a PR against main \
     with a short description of what changed and why.";

/// Drives the core like the server: records each input and answers each effect that
/// carries an id right after the input that produced it.
struct Recorder {
    channel: Channel,
    now: Timestamp,
    inputs: Vec<(Timestamp, Input)>,
    effects: Vec<Vec<Effect>>,
    /// Outcomes to report before the next Matrix event.
    pending: VecDeque<(EffectId, Outcome)>,
    /// The event id each prompt post was given.
    posted: BTreeMap<RequestId, EventId>,
    ids: Ids,
}

impl Recorder {
    /// Handles `input` now, then every outcome it (and those outcomes) led to.
    fn handle(&mut self, input: Input) {
        self.record(input);
        while let Some((id, outcome)) = self.pending.pop_front() {
            self.record(Input::Completed { id, outcome });
        }
    }

    fn record(&mut self, input: Input) {
        let effects = self.channel.handle(self.now, input.clone());
        for effect in &effects {
            match effect {
                Effect::Push { id, .. }
                | Effect::SendVerdict { id, .. }
                | Effect::Write { id, .. }
                | Effect::JoinRoom { id, .. } => self.pending.push_back((*id, Outcome::Sent)),
                Effect::PostPrompt { id, request_id, .. } => {
                    let event_id = self.ids.event();
                    self.posted.insert(request_id.clone(), event_id.clone());
                    self.pending.push_back((*id, Outcome::Posted { event_id }));
                }
                Effect::CreateRoom { id, label, .. } => self.pending.push_back((
                    *id,
                    Outcome::Created {
                        room: format!("!{label}:bench").as_str().into(),
                    },
                )),
                Effect::EditPrompt { .. }
                | Effect::Bound { .. }
                | Effect::Typing { .. }
                | Effect::Notice { .. }
                | Effect::Announce { .. }
                | Effect::Decided { .. }
                | Effect::WriteRefused { .. }
                | Effect::LogMessage { .. }
                | Effect::Acknowledged { .. }
                | Effect::Granted { .. }
                | Effect::GrantEnded { .. }
                | Effect::Dropped { .. } => {}
            }
        }
        self.inputs.push((self.now, input));
        self.effects.push(effects);
    }

    /// The next Matrix event happens [`STEP`] later.
    fn step(&mut self) -> Timestamp {
        self.now += STEP;
        self.now
    }

    fn message(&mut self, sender: &str, content: MessageContent) -> EventId {
        let event_id = self.ids.event();
        let message = Message {
            room: ROOM.into(),
            event_id: event_id.clone(),
            sender: sender.into(),
            sender_name: match sender {
                ALICE => Some("Alice".into()),
                BOB => Some("Bob".into()),
                _ => Some("Alice (real)".into()),
            },
            origin_server_ts: self.step(),
            content: Some(content),
            device: mc_model::DeviceTrust::PlaintextRoom,
        };
        self.handle(Input::Message {
            identity: IDENTITY.into(),
            message,
        });
        event_id
    }

    fn reaction(&mut self, sender: &str, relates_to: &EventId, key: &str) -> EventId {
        let event_id = self.ids.event();
        let reaction = Reaction {
            room: ROOM.into(),
            event_id: event_id.clone(),
            sender: sender.into(),
            origin_server_ts: self.step(),
            relates_to: relates_to.clone(),
            key: key.into(),
            device: mc_model::DeviceTrust::PlaintextRoom,
        };
        self.handle(Input::Reaction {
            identity: IDENTITY.into(),
            reaction,
        });
        event_id
    }

    fn redaction(&mut self, sender: &str, redacts: &EventId) {
        let redaction = Redaction {
            room: ROOM.into(),
            event_id: self.ids.event(),
            sender: sender.into(),
            origin_server_ts: self.step(),
            redacts: redacts.clone(),
        };
        self.handle(Input::Redaction {
            identity: IDENTITY.into(),
            redaction,
        });
    }

    fn tick(&mut self, at: Timestamp) {
        self.now = self.now.max(at);
        self.handle(Input::Tick);
    }

    /// One round of a conversation with the agent (see the module doc for the mix).
    fn cycle(&mut self, n: usize) {
        let body = BODIES[n % BODIES.len()];
        let plain = self.message(ALICE, text(body, None));

        let reply_body = format!("> <{ALICE}> {body}\n\n{}", BODIES[(n + 1) % BODIES.len()]);
        let reply = Relation::Reply {
            in_reply_to: ReplyTo {
                event_id: plain.clone(),
                parent: Some(Parent {
                    sender: ALICE.into(),
                    body: body.into(),
                    has_reply_relation: false,
                }),
            },
        };
        self.message(BOB, text(&reply_body, Some(reply)));

        let thread = Relation::Thread {
            root: plain.clone(),
            in_reply_to: Some(ReplyTo {
                event_id: plain.clone(),
                parent: None,
            }),
            is_falling_back: true,
        };
        self.message(ALICE, text(BODIES[(n + 2) % BODIES.len()], Some(thread)));

        let edited = format!("{body} (and the integration tests too)");
        let edit = Relation::Replacement {
            original: plain.clone(),
            new_content: Some(NewContent {
                msgtype: MsgType::Text,
                body: edited.clone(),
            }),
        };
        self.message(ALICE, text(&format!("* {edited}"), Some(edit)));

        let eyes = self.reaction(BOB, &plain, "👀");
        self.message(MALLORY, text("yes abcde", None));
        self.handle(Input::Acknowledge {
            identity: IDENTITY.into(),
            session: Some(SESSION.into()),
            event_id: plain.clone(),
        });

        let request_id = self.ids.request();
        self.step();
        self.handle(Input::PermissionRequest {
            identity: IDENTITY.into(),
            session: SESSION.into(),
            request: PermissionRequest {
                request_id: request_id.clone(),
                tool_name: "Bash".into(),
                description: "Run the parser's test suite".into(),
                input_preview: r#"{"command":"cargo test -p parser --all-features"}"#.into(),
            },
        });
        if n.is_multiple_of(2) {
            self.message(ALICE, text(&format!("yes {request_id}"), None));
        } else {
            let prompt = self.posted[&request_id].clone();
            self.reaction(ALICE, &prompt, "👍");
            let settled = self.now + mc_model::config::DEFAULT_SETTLE_MS + 1;
            self.tick(settled);
        }

        self.redaction(BOB, &eyes);
        self.reaction(MALLORY, &plain, "👎");
        let now = self.step();
        self.tick(now);
    }
}

/// `m.text` content; the Markdown body carries the HTML a client renders from it.
fn text(body: &str, relation: Option<Relation>) -> MessageContent {
    MessageContent {
        msgtype: MsgType::Text,
        body: body.into(),
        formatted_body: (body == BODIES[4]).then(|| FORMATTED.into()),
        relation,
        attachment: None,
    }
}
