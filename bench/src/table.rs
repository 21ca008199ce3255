//! The Markdown report: a line naming the machine, one table, notes.

use std::fmt::Write as _;

use crate::{
    Channel, Core, CostCurve, InputCost, Ratios, Results, Summary, WrittenByFile, CHANNEL_FILE,
    CORE_FILE,
};

/// Renders the report as Markdown, for `table.md` and the README:
///
/// - a line naming the machine (from `channel.json`), and a warning on a quick run;
/// - a table `| measure | matrix-channel | baseline | ratio |`, one row per number: push
///   latency p50/p90/p99 against a raw `/sync` client (ms), the burst (s, and the
///   missing / duplicate / out-of-order counts), the prompt round trip against the
///   homeserver's two hops (ms) and what matrix-channel adds, memory loaded against idle
///   (MiB), the core's `handle` throughput against its baseline (inputs/s), and each
///   model-check scope (unique states, seconds, states/s);
/// - notes: what the ratio means, what the baselines are, and what is missing.
///
/// Rounding: ms to 0.1, s to 0.01, MiB to 0.1, ratios to 0.01, rates to three
/// significant digits with k/M, counts with thousands separators. The ratio column is
/// always matrix-channel ÷ baseline, taken from the input where the benchmark wrote it.
pub fn table(results: &Results) -> String {
    let mut out = String::new();
    out.push_str(&machine_line(results.channel.as_ref()));
    out.push('\n');
    if results.quick() {
        out.push_str(
            "\n**Quick run**: fewer samples and iterations; the numbers are indicative only.\n",
        );
    }
    out.push_str(
        "\n| measure | matrix-channel | baseline | ratio |\n| --- | ---: | ---: | ---: |\n",
    );
    let mut rows = Vec::new();
    if let Some(channel) = &results.channel {
        channel_rows(channel, &mut rows);
    }
    if let Some(core) = &results.core {
        core_rows(core, &mut rows);
    }
    if rows.is_empty() {
        rows.push(Row::new("nothing measured", DASH, DASH, DASH));
    }
    for row in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            cell(&row.measure),
            cell(&row.ours),
            cell(&row.baseline),
            cell(&row.ratio)
        );
    }
    if let Some(curve) = results.channel.as_ref().and_then(|c| c.cost_curve.as_ref()) {
        out.push_str(
            "\n| target (issue 13) | limit | measured | verdict |\n| --- | --- | --- | --- |\n",
        );
        for t in targets(
            curve,
            results.channel.as_ref().and_then(|c| c.burst.as_ref()),
        ) {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                cell(&t.target),
                cell(&t.limit),
                cell(&t.measured),
                cell(&t.verdict)
            );
        }
    }
    out.push('\n');
    for note in notes(results) {
        let _ = writeln!(out, "- {note}");
    }
    out
}

const DASH: &str = "—";

struct Row {
    measure: String,
    ours: String,
    baseline: String,
    ratio: String,
}

impl Row {
    fn new(
        measure: impl Into<String>,
        ours: impl Into<String>,
        baseline: impl Into<String>,
        ratio: impl Into<String>,
    ) -> Row {
        Row {
            measure: measure.into(),
            ours: ours.into(),
            baseline: baseline.into(),
            ratio: ratio.into(),
        }
    }
}

fn machine_line(channel: Option<&Channel>) -> String {
    let Some(m) = channel.and_then(|c| c.machine.as_ref()) else {
        return format!("**Machine:** not recorded ({CHANNEL_FILE} has no machine).");
    };
    format!(
        "**Machine:** {} ({} cores, {} GiB), {}, Linux {}, {}, Synapse {}, commit `{}`, {} profile, {}.",
        m.cpu,
        m.cores,
        or_dash(m.memory_gib, |g| format!("{g:.1}")), m.os, m.kernel, m.rustc, m.synapse, m.commit, m.profile, m.date
    )
}

fn channel_rows(channel: &Channel, rows: &mut Vec<Row>) {
    if let Some(p) = &channel.push_latency {
        let pairs = [
            ("p50", p.channel.p50, p.raw_sync.p50, p.ratio.p50),
            ("p90", p.channel.p90, p.raw_sync.p90, p.ratio.p90),
            ("p99", p.channel.p99, p.raw_sync.p99, p.ratio.p99),
        ];
        for (i, (name, ours, raw, ratio)) in pairs.into_iter().enumerate() {
            let what = if i == 0 {
                " (ms; baseline: a raw /sync client)"
            } else {
                " (ms)"
            };
            rows.push(Row::new(
                format!("push latency {name}{what}"),
                ms(ours),
                ms(raw),
                times(ratio),
            ));
        }
    }
    if let Some(b) = &channel.burst {
        rows.push(Row::new(
            format!(
                "burst of {} messages, until all arrived (s; sent in {})",
                count(b.messages),
                secs(b.send_s)
            ),
            secs(b.channel_s),
            secs(b.raw_sync_s),
            times(b.ratio),
        ));
        // Both sides finish close to the last send (the homeserver sets the pace), so
        // the lag after it is the part that tells the two apart.
        let lag = |arrived_s: f64| (arrived_s - b.send_s) * 1e3;
        rows.push(Row::new(
            "burst: from the last send returning until all arrived (ms)",
            ms(lag(b.channel_s)),
            ms(lag(b.raw_sync_s)),
            times(lag(b.channel_s) / lag(b.raw_sync_s)),
        ));
        let d = |d: &crate::Delivery| {
            format!(
                "{} / {} / {}",
                count(d.missing),
                count(d.duplicates),
                count(d.out_of_order)
            )
        };
        rows.push(Row::new(
            "burst: missing / duplicates / out of order",
            d(&b.channel),
            d(&b.raw_sync),
            DASH,
        ));
    }
    if let Some(r) = &channel.prompt_round_trip {
        let t = &r.total_ms;
        let h = &r.homeserver_hops_ms;
        let pairs = [
            ("p50", t.p50, h.p50),
            ("p90", t.p90, h.p90),
            ("p99", t.p99, h.p99),
        ];
        for (i, (name, total, hops)) in pairs.into_iter().enumerate() {
            let what = if i == 0 {
                " (ms; baseline: the homeserver's two hops)"
            } else {
                " (ms)"
            };
            rows.push(Row::new(
                format!("prompt round trip {name}{what}"),
                ms(total),
                ms(hops),
                times(total / hops),
            ));
        }
        rows.push(Row::new(
            format!(
                "added by matrix-channel to a prompt round trip, p50 / p90 / p99 (ms; {} rounds)",
                count(r.rounds)
            ),
            triple(&r.added_ms),
            DASH,
            DASH,
        ));
    }
    if let Some(m) = &channel.memory {
        rows.push(Row::new(
            format!(
                "memory with {} identities and {} sessions (MiB; baseline: idle, 1 identity)",
                count(m.identities),
                count(m.sessions)
            ),
            mib(m.ten_identities_100_sessions_kib),
            mib(m.idle_one_identity_kib),
            times(m.ratio),
        ));
    }
    if let Some(curve) = &channel.cost_curve {
        curve_rows(curve, rows);
    }
    match channel.cost_curve.as_ref().and_then(|c| c.restart.as_ref()) {
        Some(r) => rows.push(Row::new(
            format!(
                "restart from a journal of {} inputs (ms, median of {}; {} of journal, a {} state; reading and checking the rows {} ms; baseline: the same state from a snapshot alone)",
                count(r.inputs),
                count(r.runs),
                bytes(r.journal_bytes as f64),
                bytes(r.state_bytes as f64),
                ms(r.read_ms)
            ),
            ms(r.journal_ms),
            ms(r.snapshot_ms),
            times(r.ratio),
        )),
        None => rows.push(Row::new(RESTART_NOT_MEASURED, DASH, DASH, DASH)),
    }
}

/// The restart row of a results file without `cost_curve.restart` (older files).
pub const RESTART_NOT_MEASURED: &str =
    "restart from a journal: not measured (the results file has no cost_curve.restart)";

fn ratio_triple(r: &Ratios) -> String {
    format!("{} / {} / {}", times(r.p50), times(r.p90), times(r.p99))
}

fn curve_rows(curve: &CostCurve, rows: &mut Vec<Row>) {
    for (i, p) in curve.sizes.iter().enumerate() {
        let what = if i == 0 {
            " (ms; baseline: a raw /sync client)"
        } else {
            " (ms)"
        };
        rows.push(Row::new(
            format!(
                "push p50 / p90 / p99 with {} delivery-log entries{what}",
                count(p.log_entries)
            ),
            triple(&p.channel),
            triple(&p.raw_sync),
            ratio_triple(&p.ratio),
        ));
    }
    if let Some(p) = &curve.identities {
        rows.push(Row::new(
            format!(
                "push p50 / p90 / p99 with {} identities receiving each message (ms; {} samples)",
                count(p.identities),
                count(p.samples)
            ),
            triple(&p.channel),
            triple(&p.raw_sync),
            ratio_triple(&p.ratio),
        ));
    }
    let empty = curve.sizes.first().map(|p| p.cost);
    let points = curve
        .sizes
        .iter()
        .map(|p| (format!("with {} log entries", count(p.log_entries)), p.cost));
    let many = curve
        .identities
        .iter()
        .map(|p| (format!("with {} identities", count(p.identities)), p.cost));
    let points: Vec<(String, InputCost)> = points.chain(many).collect();
    for (what, cost) in &points {
        let base = empty.map_or(f64::NAN, |e| e.write_bytes_per_input);
        rows.push(Row::new(
            format!(
                "disk written per input {what} (write_bytes / wchar; {} inputs; baseline: the empty log)",
                count(cost.inputs)
            ),
            format!(
                "{} / {}",
                bytes(cost.write_bytes_per_input),
                bytes(cost.wchar_per_input)
            ),
            empty.map_or(DASH.to_owned(), |e| {
                format!(
                    "{} / {}",
                    bytes(e.write_bytes_per_input),
                    bytes(e.wchar_per_input)
                )
            }),
            times(cost.write_bytes_per_input / base),
        ));
    }
    let empty_split = curve.sizes.first().and_then(|p| p.by_file);
    for p in &curve.sizes {
        let Some(w) = p.by_file else { continue };
        let split = |w: &WrittenByFile| {
            format!(
                "{} / {} / {} / {}",
                bytes(w.journal),
                bytes(w.store),
                bytes(w.sdk_stores),
                bytes(w.log + w.other_files)
            )
        };
        rows.push(Row::new(
            format!(
                "write calls per input by file with {} log entries (journal / server store / matrix-sdk stores / logs and other; strace, {} inputs; baseline: the empty log)",
                count(p.log_entries),
                count(w.inputs)
            ),
            split(&w),
            empty_split.as_ref().map_or(DASH.to_owned(), split),
            times(ours(&w) / empty_split.as_ref().map_or(f64::NAN, ours)),
        ));
    }
    for (what, cost) in &points {
        let total = |c: &InputCost| c.handle_us_per_input + c.persist_us_per_input;
        rows.push(Row::new(
            format!(
                "engine time per input {what} (µs: model / persistence; baseline: the empty log)"
            ),
            format!(
                "{} / {}",
                us(cost.handle_us_per_input),
                us(cost.persist_us_per_input)
            ),
            empty.map_or(DASH.to_owned(), |e| {
                format!(
                    "{} / {}",
                    us(e.handle_us_per_input),
                    us(e.persist_us_per_input)
                )
            }),
            times(total(cost) / empty.as_ref().map_or(f64::NAN, total)),
        ));
    }
    if let Some(s) = &curve.stuck_client {
        rows.push(Row::new(
            format!(
                "stuck client: another identity's push p50 / p90 / p99 (ms; {} samples, {} messages of {} to the stuck one, {} left unread in its socket; pushes timed out: {} with it, {} without; baseline: without it)",
                count(s.samples),
                count(s.large_messages),
                bytes(s.large_message_bytes as f64),
                bytes(s.unread_bytes as f64),
                count(s.notify_timeouts_with),
                count(s.notify_timeouts_without)
            ),
            triple(&s.with),
            triple(&s.without),
            ratio_triple(&s.ratio),
        ));
    }
}

/// What matrix-channel's own persistence wrote per input: the journal and the
/// server's store (the matrix-sdk stores and the logs are not ours).
fn ours(w: &WrittenByFile) -> f64 {
    w.journal + w.store
}

/// One line of the targets table.
struct Target {
    target: String,
    limit: String,
    measured: String,
    verdict: String,
}

/// `met`, or the gap: how far `measured` is over `limit` in `unit`.
fn verdict(measured: f64, limit: f64, show: impl Fn(f64) -> String) -> String {
    if !measured.is_finite() {
        "not measured".to_owned()
    } else if measured <= limit {
        "met".to_owned()
    } else {
        format!("gap: {} over", show(measured - limit))
    }
}

/// The targets of issue 13 item 4, each judged on this run's numbers (never
/// asserted: a table, not a test).
fn targets(curve: &CostCurve, burst: Option<&crate::Burst>) -> Vec<Target> {
    let mut out = Vec::new();
    let ratio = |x: f64| format!("{}×", times(x));
    if let (Some(empty), Some(largest)) = (curve.sizes.first(), curve.sizes.last()) {
        for (name, ours, base) in [
            ("p50", largest.channel.p50, empty.channel.p50),
            ("p99", largest.channel.p99, empty.channel.p99),
        ] {
            let r = ours / base;
            out.push(Target {
                target: format!(
                    "push {name} with {} log entries ÷ with an empty log",
                    count(largest.log_entries)
                ),
                limit: "≤ 1.10×".to_owned(),
                measured: ratio(r),
                verdict: verdict(r, 1.10, ratio),
            });
        }
        for (name, r, limit) in [("p50", empty.ratio.p50, 1.3), ("p99", empty.ratio.p99, 1.5)] {
            out.push(Target {
                target: format!("push {name} ÷ raw /sync {name} (empty log)"),
                limit: format!("≤ {}", ratio(limit)),
                measured: ratio(r),
                verdict: verdict(r, limit, ratio),
            });
        }
        if let Some(b) = burst {
            // The lag after the last send returned (the send itself is Synapse's pace).
            let r = (b.channel_s - b.send_s) / (b.raw_sync_s - b.send_s);
            out.push(Target {
                target: format!(
                    "burst of {}: lag after the last send ÷ the raw client's",
                    count(b.messages)
                ),
                limit: "≤ 1.50×".to_owned(),
                measured: ratio(r),
                verdict: verdict(r, 1.5, ratio),
            });
        }
        // The worst point of the curve decides.
        let worst = curve
            .sizes
            .iter()
            .chain(curve.identities.iter())
            .max_by(|a, b| {
                a.cost
                    .write_bytes_per_input
                    .total_cmp(&b.cost.write_bytes_per_input)
            })
            .expect("sizes is not empty");
        let where_ = if worst.identities > 1 {
            format!("{} identities", count(worst.identities))
        } else {
            format!("{} log entries", count(worst.log_entries))
        };
        let b = worst.cost.write_bytes_per_input;
        out.push(Target {
            target: "disk written per input by the whole process (write_bytes, the worst point)"
                .to_owned(),
            limit: "< 4 KiB".to_owned(),
            measured: format!("{} (with {where_})", bytes(b)),
            verdict: if b < 4096.0 {
                "met".to_owned()
            } else {
                verdict(b, 4096.0, bytes)
            },
        });
    }
    let split = curve
        .sizes
        .iter()
        .filter_map(|p| p.by_file.map(|w| (p.log_entries, w)))
        .max_by(|a, b| ours(&a.1).total_cmp(&ours(&b.1)));
    out.push(match split {
        Some((entries, w)) => {
            let b = ours(&w);
            Target {
                target: "written per input by the journal and the server's store (write calls, strace; the worst point)".to_owned(),
                limit: "< 4 KiB".to_owned(),
                measured: format!(
                    "{} (with {} log entries; matrix-sdk's stores {} more)",
                    bytes(b),
                    count(entries),
                    bytes(w.sdk_stores)
                ),
                verdict: if b < 4096.0 {
                    "met".to_owned()
                } else {
                    verdict(b, 4096.0, bytes)
                },
            }
        }
        None => Target {
            target: "written per input by the journal and the server's store (write calls, strace; the worst point)".to_owned(),
            limit: "< 4 KiB".to_owned(),
            measured: "not measured (no strace)".to_owned(),
            verdict: "not measured".to_owned(),
        },
    });
    if let Some(s) = &curve.stuck_client {
        let added = s.with.p99 - s.without.p99;
        let show = |x: f64| format!("{} ms", ms(x));
        out.push(Target {
            target: "added by a stuck client to another identity's push p99".to_owned(),
            limit: "< 5 ms".to_owned(),
            measured: show(added),
            verdict: if added < 5.0 {
                "met".to_owned()
            } else {
                verdict(added, 5.0, show)
            },
        });
    }
    let show = |x: f64| format!("{} s", secs(x / 1e3));
    out.push(match &curve.restart {
        Some(r) => Target {
            target: format!("restart from a journal of {} inputs", count(r.inputs)),
            limit: "< 2 s".to_owned(),
            measured: show(r.journal_ms),
            verdict: if r.journal_ms < 2_000.0 {
                "met".to_owned()
            } else {
                verdict(r.journal_ms, 2_000.0, show)
            },
        },
        None => Target {
            target: "restart from a journal of 100,000 inputs".to_owned(),
            limit: "< 2 s".to_owned(),
            measured: "not measured".to_owned(),
            verdict: "not measured".to_owned(),
        },
    });
    out
}

fn core_rows(core: &Core, rows: &mut Vec<Row>) {
    if let Some(h) = &core.handle {
        rows.push(Row::new(
            format!(
                "core `handle` throughput (inputs/s, batches of {}; baseline: event decode)",
                count(h.batch)
            ),
            format!("{} ({} ns each)", rate(h.inputs_per_s), ns(h.ns_per_input)),
            format!(
                "{} ({} ns each)",
                rate(h.baseline_per_s),
                ns(h.baseline_ns_per_input)
            ),
            times(h.ratio),
        ));
    }
    for m in &core.model_check {
        let search = if m.bounded {
            "bounded depth"
        } else {
            "full search"
        };
        rows.push(Row::new(
            format!("model check, scope `{}` ({search})", m.scope),
            format!(
                "{} unique states in {} s ({} states/s)",
                count(m.unique_states),
                secs1(m.seconds),
                rate(m.states_per_s)
            ),
            DASH,
            DASH,
        ));
    }
}

fn notes(results: &Results) -> Vec<String> {
    let mut notes = vec![
        "ratio = matrix-channel ÷ baseline: below 1 is better for times and memory, above 1 for throughput.".to_owned(),
    ];
    if let Some(p) = results
        .channel
        .as_ref()
        .and_then(|c| c.push_latency.as_ref())
    {
        notes.push(format!(
            "Push latency: {} messages, from the human's send returning to the MCP notification arriving; the baseline is a raw /sync long-poll client receiving the same messages.",
            count(p.samples)
        ));
    }
    if let Some(h) = results.core.as_ref().and_then(|c| c.handle.as_ref()) {
        notes.push(format!(
            "Core `handle` workload: {}; baseline: {}.",
            h.workload, h.baseline
        ));
    }
    let missing = results.missing();
    if !missing.is_empty() {
        notes.push(format!(
            "**Missing** (a partial run): {}.",
            missing.join("; ")
        ));
    }
    if results.core.is_none() {
        notes.push(format!(
            "Without {CORE_FILE}: run `cargo bench -p matrix-channel-bench --bench core`."
        ));
    }
    notes
}

/// Escapes what would break a table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// `x` formatted by `f`, or `—` when the benchmark could not compute it (NaN, infinite).
fn or_dash(x: f64, f: impl FnOnce(f64) -> String) -> String {
    if x.is_finite() {
        f(x)
    } else {
        DASH.to_owned()
    }
}

fn ms(x: f64) -> String {
    or_dash(x, |x| format!("{x:.1}"))
}

fn secs(x: f64) -> String {
    or_dash(x, |x| format!("{x:.2}"))
}

fn secs1(x: f64) -> String {
    or_dash(x, |x| format!("{x:.1}"))
}

fn times(x: f64) -> String {
    or_dash(x, |x| format!("{x:.2}"))
}

/// Bytes: whole below 1 KiB, else KiB or MiB to one decimal.
fn bytes(x: f64) -> String {
    or_dash(x, |x| {
        if x < 1024.0 {
            format!("{x:.0} B")
        } else if x < 1024.0 * 1024.0 {
            format!("{:.1} KiB", x / 1024.0)
        } else {
            format!("{:.1} MiB", x / (1024.0 * 1024.0))
        }
    })
}

/// Microseconds to one decimal.
fn us(x: f64) -> String {
    or_dash(x, |x| format!("{x:.1}"))
}

fn mib(kib: f64) -> String {
    or_dash(kib, |kib| format!("{:.1}", kib / 1024.0))
}

fn triple(s: &Summary) -> String {
    format!("{} / {} / {}", ms(s.p50), ms(s.p90), ms(s.p99))
}

/// Nanoseconds: whole above 100, else one decimal.
fn ns(x: f64) -> String {
    if !x.is_finite() {
        DASH.to_owned()
    } else if x >= 100.0 {
        count(x.round() as u64)
    } else {
        format!("{x:.1}")
    }
}

/// A count with thousands separators: `1234567` → `1,234,567`.
pub(crate) fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A rate to three significant digits with k or M: `1230769` → `1.23 M`,
/// `476190` → `476 k`, `28453` → `28.5 k`, `812` → `812`.
pub(crate) fn rate(x: f64) -> String {
    if !x.is_finite() {
        return DASH.to_owned();
    }
    let (value, unit) = if x >= 999_500.0 {
        (x / 1e6, " M")
    } else if x >= 999.5 {
        (x / 1e3, " k")
    } else {
        (x, "")
    };
    let decimals = if value >= 99.95 {
        0
    } else if value >= 9.995 {
        1
    } else {
        2
    };
    let decimals = if unit.is_empty() {
        decimals.min(1)
    } else {
        decimals
    };
    format!("{value:.decimals$}{unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_get_thousands_separators() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(278_842), "278,842");
        assert_eq!(count(1_234_567), "1,234,567");
    }

    #[test]
    fn rates_keep_three_significant_digits_with_k_or_m() {
        assert_eq!(rate(1_230_769.0), "1.23 M");
        assert_eq!(rate(12_345_678.0), "12.3 M");
        assert_eq!(rate(476_190.0), "476 k");
        assert_eq!(rate(28_453.0), "28.5 k");
        assert_eq!(rate(1_500.0), "1.50 k");
        assert_eq!(rate(999_700.0), "1.00 M");
        assert_eq!(rate(812.0), "812");
        assert_eq!(rate(8.3), "8.3");
    }

    #[test]
    fn nanoseconds_are_whole_from_a_hundred() {
        assert_eq!(ns(2100.0), "2,100");
        assert_eq!(ns(812.5), "813");
        assert_eq!(ns(42.25), "42.2");
    }

    #[test]
    fn numbers_the_benchmark_could_not_compute_show_as_a_dash() {
        for f in [ms, secs, secs1, times, mib, ns, rate, bytes, us] {
            assert_eq!(f(f64::NAN), "—");
            assert_eq!(f(f64::INFINITY), "—");
        }
        assert_eq!(ms(-0.3), "-0.3");
    }

    #[test]
    fn a_pipe_in_a_cell_is_escaped() {
        assert_eq!(cell("a|b\nc"), "a\\|b c");
    }

    #[test]
    fn bytes_are_whole_below_a_kib_then_kib_or_mib() {
        assert_eq!(bytes(812.4), "812 B");
        assert_eq!(bytes(4096.0), "4.0 KiB");
        assert_eq!(bytes(1.5 * 1024.0 * 1024.0), "1.5 MiB");
    }

    #[test]
    fn a_verdict_is_met_at_the_limit_and_a_gap_above_it() {
        let show = |x: f64| format!("{x:.1}");
        assert_eq!(verdict(1.1, 1.1, show), "met");
        assert_eq!(verdict(1.4, 1.1, show), "gap: 0.3 over");
        assert_eq!(verdict(f64::NAN, 1.1, show), "not measured");
    }

    #[test]
    fn kib_render_as_mib_to_one_decimal() {
        assert_eq!(mib(30_000.0), "29.3");
        assert_eq!(mib(1024.0), "1.0");
    }
}
