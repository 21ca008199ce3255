//! The report from the sample results in `tests/data/`: the table, the files written,
//! partial and malformed inputs, the histogram, and the `report` binary.
//!
//! `tests/data/table.md` is the expected table; after an intended change of the table,
//! rewrite it with `MC_BENCH_BLESS=1 cargo test -p matrix-channel-bench --test report`
//! and read the diff.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use mc_bench::{
    histogram_svg, load, shared_bins, table, write_report, Error, Results, CHANNEL_FILE, CORE_FILE,
    RESTART_NOT_MEASURED, RESULTS_FILE, SVG_FILE, TABLE_FILE,
};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// A fresh directory for one test, holding copies of the named sample files.
fn scratch(test: &str, files: &[&str]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("mc-bench-report")
        .join(test);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    for file in files {
        fs::copy(data().join(file), dir.join(file)).unwrap();
    }
    dir
}

fn sample() -> Results {
    load(&data()).unwrap()
}

/// `channel.json` with `edit` applied to its JSON value, in a fresh directory.
fn edited_channel(test: &str, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    let dir = scratch(test, &[CORE_FILE]);
    let text = fs::read_to_string(data().join(CHANNEL_FILE)).unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    edit(&mut value);
    fs::write(dir.join(CHANNEL_FILE), value.to_string()).unwrap();
    dir
}

#[test]
fn the_table_of_the_sample_results_is_the_checked_in_one() {
    let rendered = table(&sample());
    let expected_path = data().join("table.md");
    if std::env::var_os("MC_BENCH_BLESS").is_some() {
        fs::write(&expected_path, &rendered).unwrap();
    }
    let expected = fs::read_to_string(&expected_path)
        .expect("tests/data/table.md (write it with MC_BENCH_BLESS=1)");
    assert_eq!(
        rendered, expected,
        "the table changed: bless it if intended"
    );
}

#[test]
fn the_sample_results_load_with_their_extra_keys_ignored() {
    let results = sample();
    let channel = results.channel.as_ref().unwrap();
    assert_eq!(channel.machine.as_ref().unwrap().cpu, "AMD EPYC 7B13");
    let push = channel.push_latency.as_ref().unwrap();
    assert_eq!((push.channel_ms.len(), push.raw_sync_ms.len()), (200, 200));
    assert_eq!(results.core.as_ref().unwrap().model_check.len(), 2);
    assert!(results.missing().is_empty(), "{:?}", results.missing());
    assert!(!results.quick());
}

#[test]
fn the_report_writes_results_json_that_reads_back_as_the_same_results() {
    let dir = scratch("round_trip", &[CORE_FILE, CHANNEL_FILE]);
    let results = load(&dir).unwrap();
    let written = write_report(&dir, &results).unwrap();
    assert!(written.svg);
    let json = fs::read_to_string(dir.join(RESULTS_FILE)).unwrap();
    let back: Results = serde_json::from_str(&json).unwrap();
    assert_eq!(back, results);
    assert!(
        !json.contains("future_section"),
        "unknown keys are not carried over"
    );
    assert_eq!(
        fs::read_to_string(dir.join(TABLE_FILE)).unwrap(),
        written.table
    );
    assert!(fs::read_to_string(dir.join(SVG_FILE))
        .unwrap()
        .starts_with("<svg"));
}

#[test]
fn without_core_json_the_channel_rows_remain_and_core_json_is_named_missing() {
    let dir = scratch("no_core", &[CHANNEL_FILE]);
    let results = load(&dir).unwrap();
    assert!(results.core.is_none());
    let t = table(&results);
    assert!(t.contains("| push latency p50"), "{t}");
    assert!(t.contains("| memory with 10 identities"), "{t}");
    assert!(!t.contains("| model check"), "{t}");
    assert!(!t.contains("| core `handle`"), "{t}");
    assert!(t.contains("**Missing** (a partial run): core.json"), "{t}");
}

#[test]
fn without_channel_json_the_core_rows_remain_and_no_svg_is_left_behind() {
    let dir = scratch("no_channel", &[CORE_FILE]);
    fs::write(dir.join(SVG_FILE), "<svg>an older run</svg>").unwrap();
    let results = load(&dir).unwrap();
    let t = table(&results);
    assert!(t.contains("model check, scope `delivery`"), "{t}");
    assert!(t.contains("**Machine:** not recorded"), "{t}");
    assert!(!t.contains("| push latency"), "{t}");
    assert!(t.contains("channel.json (machine, push latency"), "{t}");
    assert_eq!(histogram_svg(&results), None);
    let written = write_report(&dir, &results).unwrap();
    assert!(!written.svg);
    assert!(!dir.join(SVG_FILE).exists(), "a stale latency.svg was kept");
}

#[test]
fn a_section_missing_from_channel_json_is_named() {
    let dir = edited_channel("no_memory", |v| {
        v.as_object_mut().unwrap().remove("memory");
    });
    let results = load(&dir).unwrap();
    assert_eq!(
        results.missing(),
        vec!["memory (in channel.json)".to_owned()]
    );
    let t = table(&results);
    assert!(!t.contains("| memory"), "{t}");
    assert!(
        t.contains("**Missing** (a partial run): memory (in channel.json)."),
        "{t}"
    );
}

#[test]
fn the_cost_curve_shows_each_size_against_the_raw_client_and_the_cost_per_input() {
    let t = table(&sample());
    for row in [
        "| push p50 / p90 / p99 with 0 delivery-log entries (ms; baseline: a raw /sync client) | 12.0 / 14.0 / 16.0 | 10.0 / 11.0 / 12.8 | 1.20 / 1.27 / 1.25 |",
        "| push p50 / p90 / p99 with 10,000 delivery-log entries (ms) | 14.4 / 17.0 / 20.0 | 10.0 / 11.0 / 12.9 | 1.44 / 1.55 / 1.55 |",
        "| push p50 / p90 / p99 with 10 identities receiving each message (ms; 2,000 samples) | 20.0 / 25.0 / 30.0 | 10.0 / 11.0 / 12.0 | 2.00 / 2.27 / 2.50 |",
        "| disk written per input with 10,000 log entries (write_bytes / wchar; 600 inputs; baseline: the empty log) | 1.4 MiB / 1.5 MiB | 2.0 KiB / 2.9 KiB | 732.42 |",
        "| engine time per input with 1,000 log entries (µs: model / persistence; baseline: the empty log) | 9.0 / 900.0 | 8.0 / 120.0 | 7.10 |",
        "| write calls per input by file with 10,000 log entries (journal / server store / matrix-sdk stores / logs and other; strace, 100 inputs; baseline: the empty log) | 1.2 KiB / 1.6 KiB / 21.0 KiB / 312 B | 1.1 KiB / 1.5 KiB / 20.0 KiB / 300 B | 1.08 |",
        "| stuck client: another identity's push p50 / p90 / p99 (ms; 100 samples, 300 messages of 15.9 KiB to the stuck one, 8.0 KiB left unread in its socket; pushes timed out: 2 with it, 0 without; baseline: without it) | 12.5 / 15.0 / 19.5 | 12.0 / 14.0 / 16.0 | 1.04 / 1.07 / 1.22 |",
    ] {
        assert!(t.contains(row), "no row {row:?} in\n{t}");
    }
}

#[test]
fn each_target_is_judged_met_or_a_gap_from_the_numbers_of_the_run() {
    let t = table(&sample());
    for row in [
        "| push p50 with 10,000 log entries ÷ with an empty log | ≤ 1.10× | 1.20× | gap: 0.10× over |",
        "| push p99 with 10,000 log entries ÷ with an empty log | ≤ 1.10× | 1.25× | gap: 0.15× over |",
        "| push p50 ÷ raw /sync p50 (empty log) | ≤ 1.30× | 1.20× | met |",
        "| push p99 ÷ raw /sync p99 (empty log) | ≤ 1.50× | 1.25× | met |",
        "| burst of 2,000: lag after the last send ÷ the raw client's | ≤ 1.50× | 2.50× | gap: 1.00× over |",
        "| disk written per input by the whole process (write_bytes, the worst point) | < 4 KiB | 1.4 MiB (with 10,000 log entries) | gap: 1.4 MiB over |",
        "| added by a stuck client to another identity's push p99 | < 5 ms | 3.5 ms | met |",
        "| written per input by the journal and the server's store (write calls, strace; the worst point) | < 4 KiB | 2.7 KiB (with 10,000 log entries; matrix-sdk's stores 21.0 KiB more) | met |",
    ] {
        assert!(t.contains(row), "no target {row:?} in\n{t}");
    }
    // The same targets flip with the numbers.
    let dir = edited_channel("targets_flip", |v| {
        let curve = &mut v["cost_curve"];
        curve["sizes"][2]["channel"]["p50"] = 12.6.into();
        curve["sizes"][0]["ratio"]["p99"] = 1.6.into();
        curve["stuck_client"]["with"]["p99"] = 30.0.into();
        for size in curve["sizes"].as_array_mut().unwrap() {
            size["cost"]["write_bytes_per_input"] = 900.0.into();
        }
        curve["identities"]["cost"]["write_bytes_per_input"] = 4095.0.into();
        curve["sizes"][0]["by_file"]["store"] = 3500.0.into();
        v["burst"]["channel_s"] = 8.35.into();
    });
    let t = table(&load(&dir).unwrap());
    for row in [
        "| push p50 with 10,000 log entries ÷ with an empty log | ≤ 1.10× | 1.05× | met |",
        "| push p99 ÷ raw /sync p99 (empty log) | ≤ 1.50× | 1.60× | gap: 0.10× over |",
        "| burst of 2,000: lag after the last send ÷ the raw client's | ≤ 1.50× | 1.25× | met |",
        "| disk written per input by the whole process (write_bytes, the worst point) | < 4 KiB | 4.0 KiB (with 10 identities) | met |",
        "| added by a stuck client to another identity's push p99 | < 5 ms | 14.0 ms | gap: 9.0 ms over |",
        "| written per input by the journal and the server's store (write calls, strace; the worst point) | < 4 KiB | 4.5 KiB (with 0 log entries; matrix-sdk's stores 20.0 KiB more) | gap: 504 B over |",
    ] {
        assert!(t.contains(row), "no target {row:?} in\n{t}");
    }
}

#[test]
fn the_restart_from_a_journal_has_a_row_and_a_target_that_flips_at_2_s() {
    let t = table(&sample());
    for row in [
        "| restart from a journal of 100,000 inputs (ms, median of 5; 21.3 MiB of journal, a 3.0 MiB state; reading and checking the rows 410.0 ms; baseline: the same state from a snapshot alone) | 1480.0 | 52.5 | 28.19 |",
        "| restart from a journal of 100,000 inputs | < 2 s | 1.48 s | met |",
    ] {
        assert!(t.contains(row), "no row {row:?} in\n{t}");
    }
    let dir = edited_channel("restart_slow", |v| {
        v["cost_curve"]["restart"]["journal_ms"] = 2_600.0.into();
    });
    let t = table(&load(&dir).unwrap());
    assert!(
        t.contains(
            "| restart from a journal of 100,000 inputs | < 2 s | 2.60 s | gap: 0.60 s over |"
        ),
        "{t}"
    );
    // An older results file without the measurement says so, with no number.
    let dir = edited_channel("restart_absent", |v| {
        v["cost_curve"].as_object_mut().unwrap().remove("restart");
    });
    let t = table(&load(&dir).unwrap());
    assert!(
        t.contains(&format!("| {RESTART_NOT_MEASURED} | — | — | — |")),
        "{t}"
    );
    assert!(
        t.contains(
            "| restart from a journal of 100,000 inputs | < 2 s | not measured | not measured |"
        ),
        "{t}"
    );
}

#[test]
fn without_a_cost_curve_it_is_named_missing_and_no_target_is_judged() {
    let dir = edited_channel("no_curve", |v| {
        v.as_object_mut().unwrap().remove("cost_curve");
    });
    let results = load(&dir).unwrap();
    assert_eq!(
        results.missing(),
        vec!["cost_curve (in channel.json)".to_owned()]
    );
    let t = table(&results);
    assert!(!t.contains("| push p50 / p90 / p99 with"), "{t}");
    assert!(!t.contains("| target (issue 13)"), "{t}");
    assert!(t.contains(RESTART_NOT_MEASURED), "{t}");
    // Without strace the split is not measured, and its target says so.
    let dir = edited_channel("no_split", |v| {
        for size in v["cost_curve"]["sizes"].as_array_mut().unwrap() {
            size.as_object_mut().unwrap().remove("by_file");
        }
    });
    let t = table(&load(&dir).unwrap());
    assert!(!t.contains("| write calls per input by file"), "{t}");
    assert!(
        t.contains("| written per input by the journal and the server's store (write calls, strace; the worst point) | < 4 KiB | not measured (no strace) | not measured |"),
        "{t}"
    );
}

#[test]
fn a_quick_run_says_so() {
    let dir = edited_channel("quick", |v| v["quick"] = true.into());
    let t = table(&load(&dir).unwrap());
    assert!(t.contains("**Quick run**"), "{t}");
    assert!(!table(&sample()).contains("Quick run"));
}

#[test]
fn a_number_written_as_null_shows_as_a_dash() {
    // serde_json writes NaN and infinities as null: a percentile of no samples, a ratio
    // to zero, an unknown memory size.
    let dir = edited_channel("nulls", |v| {
        v["push_latency"]["raw_sync"]["p99"] = serde_json::Value::Null;
        v["push_latency"]["ratio"]["p99"] = serde_json::Value::Null;
        v["machine"]["memory_gib"] = serde_json::Value::Null;
    });
    let results = load(&dir).unwrap();
    let push = results
        .channel
        .as_ref()
        .unwrap()
        .push_latency
        .as_ref()
        .unwrap();
    assert!(push.raw_sync.p99.is_nan());
    let t = table(&results);
    assert!(
        t.contains("| push latency p99 (ms) | 15.6 | — | — |"),
        "{t}"
    );
    assert!(t.contains("(2 cores, — GiB)"), "{t}");
    assert!(histogram_svg(&results).is_some());
}

#[test]
fn a_missing_directory_is_an_error_naming_it() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mc-bench-report/does-not-exist");
    let err = load(&dir).unwrap_err();
    assert!(matches!(err, Error::NoDir(_)), "{err:?}");
    assert!(err.to_string().contains("does-not-exist"), "{err}");
}

#[test]
fn a_directory_without_either_file_is_an_error() {
    let dir = scratch("empty", &[]);
    let err = load(&dir).unwrap_err();
    assert!(matches!(err, Error::NoResults(_)), "{err:?}");
    assert!(
        err.to_string()
            .contains("neither core.json nor channel.json"),
        "{err}"
    );
}

#[test]
fn a_value_of_the_wrong_type_names_the_file_and_the_field() {
    let dir = edited_channel("wrong_type", |v| {
        v["push_latency"]["channel"]["p50"] = "fast".into();
    });
    let err = load(&dir).unwrap_err();
    let Error::Malformed { path, field, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(path, &dir.join(CHANNEL_FILE));
    assert_eq!(field.as_deref(), Some("push_latency.channel.p50"));
    let message = err.to_string();
    assert!(
        message.contains("channel.json: field `push_latency.channel.p50`: invalid type"),
        "{message}"
    );
}

#[test]
fn a_missing_field_names_the_file_the_section_and_the_field() {
    let dir = scratch("missing_field", &[CHANNEL_FILE]);
    let text = fs::read_to_string(data().join(CORE_FILE)).unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    value["model_check"][1]
        .as_object_mut()
        .unwrap()
        .remove("seconds");
    fs::write(dir.join(CORE_FILE), value.to_string()).unwrap();
    let message = load(&dir).unwrap_err().to_string();
    assert!(
        message.contains("core.json: field `model_check[1]`: missing field `seconds`"),
        "{message}"
    );
}

#[test]
fn text_that_is_not_json_names_the_file_and_the_line() {
    let dir = scratch("not_json", &[CHANNEL_FILE]);
    fs::write(dir.join(CORE_FILE), "{\"quick\": false,\n  \"handle\": }\n").unwrap();
    let err = load(&dir).unwrap_err();
    assert!(
        matches!(err, Error::Malformed { field: None, .. }),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("core.json: not valid JSON"), "{message}");
    assert!(message.contains("line 2"), "{message}");
}

#[test]
fn trailing_text_after_the_json_is_an_error() {
    let dir = scratch("trailing", &[CHANNEL_FILE]);
    fs::write(dir.join(CORE_FILE), "{\"quick\": false} {}").unwrap();
    let message = load(&dir).unwrap_err().to_string();
    assert!(message.contains("core.json: not valid JSON"), "{message}");
}

fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[test]
fn the_histogram_draws_one_bar_per_non_empty_bin_for_each_series_with_a_legend() {
    let results = sample();
    let svg = histogram_svg(&results).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
    assert!(svg.trim_end().ends_with("</svg>"));
    assert_eq!(count(&svg, "<text"), count(&svg, "</text>"));

    let push = results
        .channel
        .as_ref()
        .unwrap()
        .push_latency
        .as_ref()
        .unwrap();
    let bins = shared_bins(
        &push.channel_ms,
        &push.raw_sync_ms,
        Some(1.5 * push.channel.p99.max(push.raw_sync.p99)),
    )
    .unwrap();
    let non_empty = |counts: &[u64]| counts.iter().filter(|&&c| c > 0).count();
    // One more rectangle of each colour: its legend entry.
    assert_eq!(count(&svg, r##"fill="#1F77B4""##), non_empty(&bins.a) + 1);
    assert_eq!(count(&svg, r##"fill="#FF7F0E""##), non_empty(&bins.b) + 1);

    for label in [
        "matrix-channel (200 messages)",
        "raw /sync (200 messages)",
        "matrix-channel p50 11.8 ms",
        "matrix-channel p99 15.6 ms",
        "raw /sync p50 9.7 ms",
        "raw /sync p99 12.8 ms",
        "messages per bin",
        "latency (ms)",
        "the last bin holds all ≥ 23.0 (slowest 61.3)",
    ] {
        assert!(svg.contains(label), "no {label:?} in the SVG");
    }
}

#[test]
fn without_latency_samples_there_is_no_histogram() {
    let mut results = sample();
    let push = results
        .channel
        .as_mut()
        .unwrap()
        .push_latency
        .as_mut()
        .unwrap();
    push.channel_ms.clear();
    push.raw_sync_ms.clear();
    assert_eq!(histogram_svg(&results), None);
    results.channel.as_mut().unwrap().push_latency = None;
    assert_eq!(histogram_svg(&results), None);
}

#[test]
fn one_series_alone_is_still_drawn() {
    let mut results = sample();
    let push = results
        .channel
        .as_mut()
        .unwrap()
        .push_latency
        .as_mut()
        .unwrap();
    push.raw_sync_ms.clear();
    let svg = histogram_svg(&results).unwrap();
    assert!(svg.contains("raw /sync (0 messages)"));
    assert_eq!(
        count(&svg, r##"fill="#FF7F0E""##),
        1,
        "only the legend entry"
    );
}

fn report(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_report"))
        .args(args)
        .output()
        .unwrap()
}

const README: &str =
    "# Bench\n\nIntro.\n\n<!-- bench-table:start -->\nold\n<!-- bench-table:end -->\n\nOutro.\n";

#[test]
fn the_binary_writes_the_files_prints_the_table_and_updates_the_readme() {
    let dir = scratch("binary", &[CORE_FILE, CHANNEL_FILE]);
    let readme = dir.join("README.md");
    fs::write(&readme, README).unwrap();
    let out = report(&[dir.as_os_str(), "--readme".as_ref(), readme.as_os_str()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let table = fs::read_to_string(dir.join(TABLE_FILE)).unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), table);
    assert!(dir.join(RESULTS_FILE).exists() && dir.join(SVG_FILE).exists());
    let new = fs::read_to_string(&readme).unwrap();
    assert_eq!(
        new,
        format!(
            "# Bench\n\nIntro.\n\n<!-- bench-table:start -->\n\n{}\n\n<!-- bench-table:end -->\n\nOutro.\n",
            table.trim()
        )
    );
}

#[test]
fn the_binary_refuses_a_readme_without_markers_before_writing_anything() {
    let dir = scratch("binary_no_markers", &[CORE_FILE, CHANNEL_FILE]);
    let readme = dir.join("README.md");
    fs::write(&readme, "# Bench\n\nNo markers here.\n").unwrap();
    let out = report(&[dir.as_os_str(), "--readme".as_ref(), readme.as_os_str()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("README.md: no line `<!-- bench-table:start -->`"),
        "{stderr}"
    );
    assert_eq!(
        fs::read_to_string(&readme).unwrap(),
        "# Bench\n\nNo markers here.\n"
    );
    assert!(!dir.join(RESULTS_FILE).exists());
}

#[test]
fn the_binary_names_a_malformed_file_and_fails() {
    let dir = edited_channel("binary_malformed", |v| v["burst"]["messages"] = (-3).into());
    let out = report(&[dir.as_os_str()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("channel.json: field `burst.messages`"),
        "{stderr}"
    );
}

#[test]
fn the_binary_names_a_missing_directory() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mc-bench-report/nowhere");
    let out = report(&[dir.as_os_str()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no results directory at") && stderr.contains("nowhere"),
        "{stderr}"
    );
}
