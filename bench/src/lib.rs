//! matrix-channel's benchmark report.
//!
//! Two parts of the benchmark write one JSON file each into a results directory:
//!
//! - `core.json` ([`Core`]): the core alone, written by the `core` bench of this crate
//!   (`Channel::handle` throughput against a decode baseline, and the model check).
//! - `channel.json` ([`Channel`]): the end-to-end benchmark against a real Synapse (push
//!   latency against a raw `/sync` client, a burst, the permission-prompt round trip,
//!   memory).
//!
//! [`load`] reads whichever of them exists into [`Results`], [`table`] renders the
//! Markdown table, [`histogram_svg`] draws the push-latency distributions, and
//! [`write_report`] writes `results.json`, `table.md` and `latency.svg` beside the
//! inputs. [`replace_table`] / [`update_readme`] put the table between the README's
//! `<!-- bench-table:start -->` and `<!-- bench-table:end -->` lines. The `report` binary
//! (`report DIR [--readme PATH]`) does all of that.
//!
//! Units: every field name says its unit. `_ms` is milliseconds, `_s` seconds, `_kib`
//! KiB (1024 bytes), `_per_s` per second, `ns_per_input` nanoseconds; numbers without a
//! suffix are counts. The report computes no percentile: it shows the ones the
//! benchmark wrote (the raw samples are only drawn).
//!
//! A number the benchmark could not compute (a percentile of no samples, a ratio to
//! zero) is `null` in the file, as serde_json writes NaN and infinities: it reads as NaN
//! and the table shows `—`.
//!
//! Unknown keys are ignored when reading (a newer benchmark may write more) and are not
//! carried into `results.json`. A section missing from a file (a partial run) is `None`
//! and the table says it is missing; a section that is present must be complete, and a
//! malformed one is an error naming the file and the field.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};

mod histogram;
mod readme;
pub mod stats;
mod table;

pub use histogram::{histogram_svg, shared_bins, Bins, CHANNEL_COLOR, RAW_SYNC_COLOR};
pub use readme::{replace_table, update_readme, MarkerError, END_MARKER, START_MARKER};
pub use table::{table, RESTART_NOT_MEASURED};

pub mod trace;

/// The file name of the core benchmark's results in a results directory.
pub const CORE_FILE: &str = "core.json";
/// The file name of the end-to-end benchmark's results in a results directory.
pub const CHANNEL_FILE: &str = "channel.json";
/// The merged results that [`write_report`] writes.
pub const RESULTS_FILE: &str = "results.json";
/// The Markdown table that [`write_report`] writes.
pub const TABLE_FILE: &str = "table.md";
/// The push-latency histogram that [`write_report`] writes.
pub const SVG_FILE: &str = "latency.svg";

/// Both benchmark files, merged; serialized as `results.json`:
/// `{"core": Core | null, "channel": Channel | null}` (null: the file was missing).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Results {
    /// `core.json`, if it was there.
    pub core: Option<Core>,
    /// `channel.json`, if it was there.
    pub channel: Option<Channel>,
}

impl Results {
    /// Whether either part was a quick run (fewer samples and iterations).
    pub fn quick(&self) -> bool {
        self.core.as_ref().is_some_and(|c| c.quick)
            || self.channel.as_ref().is_some_and(|c| c.quick)
    }

    /// What a full run would have that this one lacks, as phrases for the report, e.g.
    /// `"core.json (core handle throughput, model check)"` or
    /// `"memory (in channel.json)"`. Empty when nothing is missing.
    pub fn missing(&self) -> Vec<String> {
        let mut missing = Vec::new();
        match &self.core {
            None => missing.push(format!("{CORE_FILE} (core handle throughput, model check)")),
            Some(core) => {
                if core.handle.is_none() {
                    missing.push(format!("handle (in {CORE_FILE})"));
                }
                if core.model_check.is_empty() {
                    missing.push(format!("model_check (in {CORE_FILE})"));
                }
            }
        }
        match &self.channel {
            None => missing.push(format!(
                "{CHANNEL_FILE} (machine, push latency, burst, prompt round trip, memory, cost curve)"
            )),
            Some(channel) => {
                let sections = [
                    ("machine", channel.machine.is_none()),
                    ("push_latency", channel.push_latency.is_none()),
                    ("burst", channel.burst.is_none()),
                    ("prompt_round_trip", channel.prompt_round_trip.is_none()),
                    ("memory", channel.memory.is_none()),
                    ("cost_curve", channel.cost_curve.is_none()),
                ];
                for (name, absent) in sections {
                    if absent {
                        missing.push(format!("{name} (in {CHANNEL_FILE})"));
                    }
                }
            }
        }
        missing
    }
}

/// `core.json`: the core alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Core {
    /// A quick run: fewer iterations, numbers indicative only. Absent means false.
    #[serde(default)]
    pub quick: bool,
    /// `Channel::handle` throughput against the decode baseline.
    pub handle: Option<Handle>,
    /// One entry per model-check scope, in the order run.
    #[serde(default)]
    pub model_check: Vec<ModelCheck>,
}

/// `core.json` `handle`: how fast the core takes inputs, against a baseline that does
/// comparable work (decoding one event into a `serde_json::Value`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Handle {
    /// What was fed to `handle` (free text).
    pub workload: String,
    /// Inputs per measured batch.
    pub batch: u64,
    /// Nanoseconds per input.
    #[serde(deserialize_with = "nullable")]
    pub ns_per_input: f64,
    /// Inputs per second.
    #[serde(deserialize_with = "nullable")]
    pub inputs_per_s: f64,
    /// What the baseline does (free text).
    pub baseline: String,
    /// The baseline's nanoseconds per input.
    #[serde(deserialize_with = "nullable")]
    pub baseline_ns_per_input: f64,
    /// The baseline's inputs per second.
    #[serde(deserialize_with = "nullable")]
    pub baseline_per_s: f64,
    /// `inputs_per_s / baseline_per_s` (above 1: the core is faster than the baseline).
    #[serde(deserialize_with = "nullable")]
    pub ratio: f64,
}

/// `core.json` `model_check[]`: one stateright search of one scope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCheck {
    /// The scope's name (`delivery`, `prompts`).
    pub scope: String,
    /// Distinct states reached.
    pub unique_states: u64,
    /// States generated, duplicates included.
    pub states: u64,
    /// Wall-clock seconds for the search.
    #[serde(deserialize_with = "nullable")]
    pub seconds: f64,
    /// `unique_states / seconds`.
    #[serde(deserialize_with = "nullable")]
    pub states_per_s: f64,
    /// Whether the search was depth-bounded (false: the full state space).
    pub bounded: bool,
}

/// `channel.json`: the end-to-end benchmark against a real Synapse.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Channel {
    /// A quick run: fewer samples, numbers indicative only. Absent means false.
    #[serde(default)]
    pub quick: bool,
    /// Where and what was measured.
    pub machine: Option<Machine>,
    /// Per-message push latency, matrix-channel against a raw `/sync` client.
    pub push_latency: Option<PushLatency>,
    /// Many messages at once.
    pub burst: Option<Burst>,
    /// A permission request until its verdict reaches the agent.
    pub prompt_round_trip: Option<PromptRoundTrip>,
    /// Resident memory of the server.
    pub memory: Option<Memory>,
    /// What each input costs as the delivery log grows, with many identities, and
    /// with a stuck client (absent in older files).
    #[serde(default)]
    pub cost_curve: Option<CostCurve>,
    /// Seconds the whole end-to-end run took (absent in older files).
    #[serde(default)]
    pub wall_s: Option<f64>,
}

/// `channel.json` `machine`: where the benchmark ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// CPU model name.
    pub cpu: String,
    /// Logical cores available.
    pub cores: u32,
    /// Memory in GiB.
    #[serde(deserialize_with = "nullable")]
    pub memory_gib: f64,
    /// Operating system (pretty name).
    pub os: String,
    /// Kernel release.
    pub kernel: String,
    /// `rustc --version`.
    pub rustc: String,
    /// Synapse version.
    pub synapse: String,
    /// The measured commit.
    pub commit: String,
    /// Cargo profile of the measured binary (`release`).
    pub profile: String,
    /// When (RFC 3339).
    pub date: String,
}

/// Percentiles and mean of a set of durations, in the unit of the key holding it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Median.
    #[serde(deserialize_with = "nullable")]
    pub p50: f64,
    /// 90th percentile.
    #[serde(deserialize_with = "nullable")]
    pub p90: f64,
    /// 99th percentile.
    #[serde(deserialize_with = "nullable")]
    pub p99: f64,
    /// Arithmetic mean.
    #[serde(deserialize_with = "nullable")]
    pub mean: f64,
}

/// Ratios of two [`Summary`]s' percentiles (matrix-channel ÷ baseline).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Ratios {
    /// Of the medians.
    #[serde(deserialize_with = "nullable")]
    pub p50: f64,
    /// Of the 90th percentiles.
    #[serde(deserialize_with = "nullable")]
    pub p90: f64,
    /// Of the 99th percentiles.
    #[serde(deserialize_with = "nullable")]
    pub p99: f64,
}

/// `channel.json` `push_latency`: for each message, from the human's send returning to
/// the MCP notification arriving (matrix-channel), and to a raw `/sync` long-poll client
/// seeing the same message (the baseline). Milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PushLatency {
    /// Messages sent.
    pub samples: u64,
    /// One latency per message through matrix-channel (ms). May be absent (summary only).
    #[serde(default)]
    pub channel_ms: Vec<f64>,
    /// One latency per message through the raw `/sync` client (ms). May be absent.
    #[serde(default)]
    pub raw_sync_ms: Vec<f64>,
    /// Summary of `channel_ms` (ms).
    pub channel: Summary,
    /// Summary of `raw_sync_ms` (ms).
    pub raw_sync: Summary,
    /// `channel ÷ raw_sync` per percentile.
    pub ratio: Ratios,
}

/// `channel.json` `burst`: `messages` sent as fast as possible.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Burst {
    /// Messages sent.
    pub messages: u64,
    /// Seconds the sender took.
    #[serde(deserialize_with = "nullable")]
    pub send_s: f64,
    /// Seconds until matrix-channel had pushed them all.
    #[serde(deserialize_with = "nullable")]
    pub channel_s: f64,
    /// Seconds until the raw `/sync` client had seen them all.
    #[serde(deserialize_with = "nullable")]
    pub raw_sync_s: f64,
    /// `channel_s / raw_sync_s`.
    #[serde(deserialize_with = "nullable")]
    pub ratio: f64,
    /// What matrix-channel delivered.
    pub channel: Delivery,
    /// What the raw `/sync` client saw.
    pub raw_sync: Delivery,
    /// `limited` timelines the raw client filled from `/messages` during the run (0
    /// when absent).
    #[serde(default)]
    pub raw_sync_gaps_filled: u64,
}

/// How a burst arrived at one receiver. Counts of messages.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    /// Distinct messages received.
    pub received: u64,
    /// Sent but never received.
    pub missing: u64,
    /// Received more than once (extra copies).
    pub duplicates: u64,
    /// Received after a message sent later.
    pub out_of_order: u64,
}

/// `channel.json` `prompt_round_trip`: a permission request from the agent until its
/// verdict reaches the agent, with a scripted approver answering at once. Milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptRoundTrip {
    /// Requests made.
    pub rounds: u64,
    /// Request to verdict (ms).
    pub total_ms: Summary,
    /// The homeserver's two hops (prompt to the approver, answer back) (ms): the part no
    /// bridge can avoid, the baseline.
    pub homeserver_hops_ms: Summary,
    /// `total_ms` less the hops: what matrix-channel adds (ms).
    pub added_ms: Summary,
}

/// `channel.json` `memory`: the server's resident set size. KiB.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// Idle, one identity, no session (KiB).
    #[serde(deserialize_with = "nullable")]
    pub idle_one_identity_kib: f64,
    /// With `identities` identities and `sessions` MCP sessions (KiB).
    #[serde(deserialize_with = "nullable")]
    pub ten_identities_100_sessions_kib: f64,
    /// Identities in the loaded measurement.
    pub identities: u64,
    /// MCP sessions in the loaded measurement.
    pub sessions: u64,
    /// `ten_identities_100_sessions_kib / idle_one_identity_kib`.
    #[serde(deserialize_with = "nullable")]
    pub ratio: f64,
}

/// `channel.json` `cost_curve`: push latency and the cost of each input as the
/// delivery log grows, with several identities receiving each message, and with one
/// session that stops reading its stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostCurve {
    /// How the delivery log was filled before each point (free text).
    pub seeding: String,
    /// One point per delivery-log size, smallest first; the first (an empty log) is
    /// the baseline of the others.
    pub sizes: Vec<CurvePoint>,
    /// Several identities, one session each, all receiving every message.
    pub identities: Option<CurvePoint>,
    /// Another identity's push latency while one session stops reading.
    pub stuck_client: Option<StuckClient>,
    /// The start's recovery from a journal of many inputs (absent in older files).
    #[serde(default)]
    pub restart: Option<Restart>,
}

/// `cost_curve.restart`: recovering the model's state at start from a journal of
/// `inputs` inputs (no snapshot between), against the same state from a snapshot
/// alone; each time the median of `runs` (bench/channel/restart.rs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Restart {
    /// Inputs in the journal after its snapshot: half a person's messages, half the
    /// `Sent` outcomes of their pushes.
    pub inputs: u64,
    /// Bytes of the journal's files (the database and its write-ahead log).
    pub journal_bytes: u64,
    /// Bytes of the recovered state's JSON (what the snapshot holds).
    pub state_bytes: u64,
    /// Timed runs of each measurement.
    pub runs: u64,
    /// Opening the journal and recovering from it: read, check, parse and replay
    /// every input (ms).
    #[serde(deserialize_with = "nullable")]
    pub journal_ms: f64,
    /// Of which opening and reading, checking and parsing the rows (ms).
    #[serde(deserialize_with = "nullable")]
    pub read_ms: f64,
    /// The baseline: opening a journal that holds the same state as its snapshot
    /// and no rows, and recovering from it (ms).
    #[serde(deserialize_with = "nullable")]
    pub snapshot_ms: f64,
    /// `journal_ms ÷ snapshot_ms`.
    #[serde(deserialize_with = "nullable")]
    pub ratio: f64,
}

/// One point of the cost curve: push latency against the raw `/sync` client, and
/// what each input cost the server, over the same measured phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    /// Delivery-log entries of the measured identity before the phase.
    pub log_entries: u64,
    /// Identities receiving each message.
    pub identities: u64,
    /// Latency samples (one per message and receiving identity).
    pub samples: u64,
    /// Through matrix-channel (ms).
    pub channel: Summary,
    /// Through the raw `/sync` client, the same messages (ms).
    pub raw_sync: Summary,
    /// `channel ÷ raw_sync` per percentile.
    pub ratio: Ratios,
    /// What the server spent per input over the phase.
    pub cost: InputCost,
    /// Where its write calls went, from a phase of its own with strace attached
    /// (absent when strace is missing or cannot attach, and in older files).
    #[serde(default)]
    pub by_file: Option<WrittenByFile>,
}

/// `CurvePoint::by_file`: bytes passed to write calls per input, by the file they
/// wrote (`trace::Written`), over a phase of unmeasured pushes with strace attached.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WrittenByFile {
    /// Inputs the engine handled in that phase.
    pub inputs: u64,
    /// The journal (`journal.sqlite3` and its WAL), bytes per input.
    #[serde(deserialize_with = "nullable")]
    pub journal: f64,
    /// The server's store (`matrix-channel.sqlite3` and its WAL), bytes per input.
    #[serde(deserialize_with = "nullable")]
    pub store: f64,
    /// The matrix-sdk stores (state, event cache, crypto), bytes per input.
    #[serde(deserialize_with = "nullable")]
    pub sdk_stores: f64,
    /// Log files and the terminal, bytes per input.
    #[serde(deserialize_with = "nullable")]
    pub log: f64,
    /// Any other file, bytes per input.
    #[serde(deserialize_with = "nullable")]
    pub other_files: f64,
}

/// Deltas over one measured phase, per input the engine handled.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct InputCost {
    /// Inputs the engine handled in the phase (`/health` `engine.inputs`).
    pub inputs: u64,
    /// `write_bytes` of `/proc/PID/io` (bytes the server made the kernel write to
    /// disk) per input.
    #[serde(deserialize_with = "nullable")]
    pub write_bytes_per_input: f64,
    /// `wchar` of `/proc/PID/io` (bytes passed to write calls, any file or socket)
    /// per input.
    #[serde(deserialize_with = "nullable")]
    pub wchar_per_input: f64,
    /// Microseconds in the model's transitions per input (`engine.handle_us`).
    #[serde(deserialize_with = "nullable")]
    pub handle_us_per_input: f64,
    /// Microseconds making inputs or state durable per input (`engine.persist_us`).
    #[serde(deserialize_with = "nullable")]
    pub persist_us_per_input: f64,
}

/// `cost_curve.stuck_client`: one identity's push latency (ms) without and then with
/// a session of another identity that opened its stream and never reads it while
/// that identity's room receives large messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StuckClient {
    /// Latency samples in each of the two phases.
    pub samples: u64,
    /// Large messages sent to the stuck session's room during the second phase.
    pub large_messages: u64,
    /// Bytes of each large message's body.
    pub large_message_bytes: u64,
    /// Pushes the server gave up on after its timeout (its log's "writing to the
    /// session took over"), in the phase without the stuck client (0 when absent).
    #[serde(default)]
    pub notify_timeouts_without: u64,
    /// The same, in the phase with it.
    #[serde(default)]
    pub notify_timeouts_with: u64,
    /// Bytes waiting unread in the stuck socket's receive queue at the end of its
    /// phase (0 when absent): above 0, pushes reached the stuck stream.
    #[serde(default)]
    pub unread_bytes: u64,
    /// Without the stuck client (ms): the baseline.
    pub without: Summary,
    /// With the stuck client (ms).
    pub with: Summary,
    /// `with ÷ without` per percentile.
    pub ratio: Ratios,
}

/// A number, or `null` for one the benchmark could not compute (read as NaN).
fn nullable<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(deserializer)?.unwrap_or(f64::NAN))
}

/// The name the end-to-end benchmark's docs use for [`Channel`].
pub type ChannelResults = Channel;
/// [`Core`] under the same naming.
pub type CoreResults = Core;

/// What can go wrong reading the inputs or writing the report.
#[derive(Debug)]
pub enum Error {
    /// The results directory does not exist (or is not a directory).
    NoDir(PathBuf),
    /// The directory holds neither `core.json` nor `channel.json`.
    NoResults(PathBuf),
    /// A file could not be read.
    Read { path: PathBuf, source: io::Error },
    /// A file is not the expected JSON. `field` is the dotted path to the offending
    /// value (`push_latency.channel.p50`, `model_check[1].seconds`), or `None` when the
    /// text is not JSON at all.
    Malformed {
        path: PathBuf,
        field: Option<String>,
        message: String,
    },
    /// A file could not be written.
    Write { path: PathBuf, source: io::Error },
    /// The README's table markers are missing or out of order.
    Markers { path: PathBuf, problem: MarkerError },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoDir(dir) => write!(f, "no results directory at {}", dir.display()),
            Error::NoResults(dir) => write!(
                f,
                "{} holds neither {CORE_FILE} nor {CHANNEL_FILE}: run the benchmarks first",
                dir.display()
            ),
            Error::Read { path, source } => write!(f, "cannot read {}: {source}", path.display()),
            Error::Malformed {
                path,
                field: Some(field),
                message,
            } => write!(f, "{}: field `{field}`: {message}", path.display()),
            Error::Malformed {
                path,
                field: None,
                message,
            } => write!(f, "{}: not valid JSON: {message}", path.display()),
            Error::Write { path, source } => write!(f, "cannot write {}: {source}", path.display()),
            Error::Markers { path, problem } => write!(f, "{}: {problem}", path.display()),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Read { source, .. } | Error::Write { source, .. } => Some(source),
            Error::Markers { problem, .. } => Some(problem),
            _ => None,
        }
    }
}

/// Parses one benchmark file; `path` is only for the error.
pub fn parse<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T, Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| malformed(path, e))?;
    de.end().map_err(|e| Error::Malformed {
        path: path.to_owned(),
        field: None,
        message: e.to_string(),
    })?;
    Ok(value)
}

fn malformed(path: &Path, e: serde_path_to_error::Error<serde_json::Error>) -> Error {
    let field = e.path().to_string();
    let inner = e.into_inner();
    let syntax = matches!(
        inner.classify(),
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof
    );
    Error::Malformed {
        path: path.to_owned(),
        // "." is the root: a syntax error, or a file that is not an object at all.
        field: (!syntax && field != ".").then_some(field),
        message: inner.to_string(),
    }
}

fn read_optional<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, Error> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse(path, &text).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Reads `dir/core.json` and `dir/channel.json`. Either may be missing (it is `None`),
/// not both.
pub fn load(dir: &Path) -> Result<Results, Error> {
    if !dir.is_dir() {
        return Err(Error::NoDir(dir.to_owned()));
    }
    let results = Results {
        core: read_optional(&dir.join(CORE_FILE))?,
        channel: read_optional(&dir.join(CHANNEL_FILE))?,
    };
    if results.core.is_none() && results.channel.is_none() {
        return Err(Error::NoResults(dir.to_owned()));
    }
    Ok(results)
}

/// What [`write_report`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    /// The Markdown table (also in `table.md`).
    pub table: String,
    /// Whether `latency.svg` was written (false: no latency samples; a stale one was
    /// removed).
    pub svg: bool,
}

/// Writes `dir/results.json`, `dir/table.md` and `dir/latency.svg` (the last only when
/// there are latency samples; otherwise an old one is removed so that it cannot be
/// mistaken for this run's).
pub fn write_report(dir: &Path, results: &Results) -> Result<Written, Error> {
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|source| Error::Write { path, source })
    };
    let mut json = serde_json::to_string_pretty(results).expect("results serialize");
    json.push('\n');
    write(RESULTS_FILE, &json)?;
    let table = table(results);
    write(TABLE_FILE, &table)?;
    let svg = match histogram_svg(results) {
        Some(svg) => {
            write(SVG_FILE, &svg)?;
            true
        }
        None => {
            let path = dir.join(SVG_FILE);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => return Err(Error::Write { path, source }),
            }
            false
        }
    };
    Ok(Written { table, svg })
}
