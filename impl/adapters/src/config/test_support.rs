//! What the config tests share: a minimal and a full file, and loading a file's text
//! with a given environment.

use super::{Config, ConfigErrors, ConfigIssue};
use ruma::OwnedUserId;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

pub(super) const MINIMAL: &str = r#"
[identities.bot]
homeserver = "http://127.0.0.1:8008"
user_id = "@bot:localhost"
allowed_senders = ["@alice:localhost"]
"#;

pub(super) const FULL: &str = r#"
listen = "127.0.0.1:0"
store_dir = "/var/lib/matrix-channel"
allowed_hosts = ["localhost"]
session_idle_secs = 3600
max_download_bytes = 1048576
batch_deadline_ms = 2500
log = "info,matrix_sdk=warn"

[identities.bot]
homeserver = "https://matrix.example.org"
user_id = "@bot:example.org"
allowed_senders = ["@alice:example.org", "@bob:example.org"]
approvers = ["@alice:example.org"]
permission_room = "!ZCB3SX-vTJ0vaZqG9V0gVB1stvnbeGnFk0XPn6pPYbc"
prompt_ttl_secs = 600
settle_ms = 1500
approve_keys = ["🚀"]
deny_keys = ["🛑", "❌"]
replay_budget = 50
undecryptable_grace_secs = 5
undecryptable_notice = true
verdict_devices = "any"
attach_grace_ms = 250
typing_cap_secs = 120

[identities.second-bot_2]
homeserver = "http://localhost:8008"
user_id = "@other:example.org"
allowed_senders = []
approvers = []
"#;

/// Writes `contents` as `matrix-channel.toml` in a fresh directory.
pub(super) fn write(contents: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "mc-config-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("matrix-channel.toml");
    std::fs::write(&path, contents).unwrap();
    path
}

pub(super) fn no_env() -> Vec<(String, String)> {
    Vec::new()
}

pub(super) fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

pub(super) fn load(contents: &str, env: Vec<(String, String)>) -> Result<Config, ConfigErrors> {
    Config::load_from(&write(contents), env)
}

pub(super) fn issues(contents: &str, env: Vec<(String, String)>) -> Vec<ConfigIssue> {
    match load(contents, env) {
        Ok(config) => panic!("expected errors, got {config:?}"),
        Err(ConfigErrors(issues)) => {
            assert!(!issues.is_empty());
            issues
        }
    }
}

/// The one issue at `path`, failing if there is none or several.
pub(super) fn issue_at<'a>(issues: &'a [ConfigIssue], path: &str) -> &'a ConfigIssue {
    let found: Vec<_> = issues.iter().filter(|i| i.path == path).collect();
    assert_eq!(found.len(), 1, "issues at {path}: {issues:#?}");
    found[0]
}

pub(super) fn user(s: &str) -> OwnedUserId {
    OwnedUserId::try_from(s).unwrap()
}

/// A minimal identity with `line` added to its table.
pub(super) fn with_line(line: &str) -> String {
    format!("{MINIMAL}{line}\n")
}

pub(super) fn issues_of(contents: &str, pairs: &[(&str, &str)]) -> Vec<ConfigIssue> {
    issues(contents, env(pairs))
}
