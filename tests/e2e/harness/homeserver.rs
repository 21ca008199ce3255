//! The homeserver: `scripts/homeserver/start` once per test process (the script is
//! idempotent and serialises concurrent starts), then `$HS_DIR/env` for its URL and
//! shared secret. Users are registered fresh, with random names, through
//! `scripts/homeserver/register`, so tests can share one persistent database.

use super::{random_suffix, repo_root};
use std::collections::HashMap;
use std::path::PathBuf;
use tokio::process::Command;
use tokio::sync::OnceCell;

/// The running homeserver, as `scripts/homeserver/start` recorded it.
#[derive(Debug)]
pub struct Homeserver {
    /// `HS_URL`, for instance `http://127.0.0.1:8008`.
    pub url: String,
    /// `HS_SHARED_SECRET`, for the shared-secret registration API.
    pub shared_secret: String,
}

/// The homeserver state directory: `$HS_DIR` (relative to the repository root when
/// relative), else `.local/homeserver` in the repository, as the scripts default to.
fn hs_dir() -> PathBuf {
    match std::env::var_os("HS_DIR") {
        Some(dir) => repo_root().join(dir),
        None => repo_root().join(".local/homeserver"),
    }
}

/// Starts the homeserver once per process and returns it.
pub async fn homeserver() -> &'static Homeserver {
    static HOMESERVER: OnceCell<Homeserver> = OnceCell::const_new();
    HOMESERVER.get_or_init(start).await
}

async fn start() -> Homeserver {
    let script = repo_root().join("scripts/homeserver/start");
    let out = Command::new(&script)
        .current_dir(repo_root())
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    if !out.status.success() {
        panic!(
            "{} failed ({}):\n{}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let env_file = hs_dir().join("env");
    let text = std::fs::read_to_string(&env_file)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", env_file.display()));
    let env: HashMap<&str, &str> = text
        .lines()
        .filter_map(|line| line.split_once('='))
        .collect();
    Homeserver {
        url: env["HS_URL"].trim_end_matches('/').to_owned(),
        shared_secret: env["HS_SHARED_SECRET"].to_owned(),
    }
}

/// A Matrix account registered for a test.
#[derive(Clone, Debug)]
pub struct Account {
    pub user_id: String,
    pub password: String,
    /// The access token of the registration's own device.
    pub access_token: String,
}

/// Registers `{prefix}_{random}` with a random password.
pub async fn register(prefix: &str) -> Account {
    register_on(homeserver().await, prefix).await
}

/// Registers `{prefix}_{random}` with a random password on `hs`.
pub async fn register_on(hs: &Homeserver, prefix: &str) -> Account {
    let localpart = format!("{prefix}_{}", random_suffix());
    let password = format!("pw-{}", random_suffix());
    let script = repo_root().join("scripts/homeserver/register");
    let out = Command::new(&script)
        .arg(&localpart)
        .arg(&password)
        .env("HS_URL", &hs.url)
        .env("HS_SHARED_SECRET", &hs.shared_secret)
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    if !out.status.success() {
        panic!(
            "register {localpart} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("register printed no JSON ({e}): {:?}", out.stdout));
    Account {
        user_id: json["user_id"].as_str().expect("user_id").to_owned(),
        access_token: json["access_token"]
            .as_str()
            .expect("access_token")
            .to_owned(),
        password,
    }
}
