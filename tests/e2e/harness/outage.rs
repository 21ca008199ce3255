//! A second Synapse, for the outage scenario alone (`scenarios/sync.rs`): stopped and
//! started again under a running server, so the shared homeserver the other scenarios
//! use is never stopped. Its state is `.local/homeserver-outage` (kept between runs, so
//! later starts skip the schema setup); the first start picks a free port
//! (`HS_PORT=0`), and a restart takes the same one, since the server's config names it.

use super::homeserver::Homeserver;
use super::repo_root;
use std::collections::HashMap;
use std::path::PathBuf;
use tokio::process::Command;

/// The second homeserver; stopped when dropped.
pub struct OwnHomeserver {
    pub hs: Homeserver,
    dir: PathBuf,
    port: String,
}

fn dir() -> PathBuf {
    repo_root().join(".local/homeserver-outage")
}

async fn run(script: &str, dir: &PathBuf, port: Option<&str>) {
    let path = repo_root().join("scripts/homeserver").join(script);
    let mut cmd = Command::new(&path);
    cmd.current_dir(repo_root()).env("HS_DIR", dir);
    if let Some(port) = port {
        cmd.env("HS_PORT", port);
    }
    let out = cmd
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", path.display()));
    assert!(
        out.status.success(),
        "{} (HS_DIR={}) failed ({}):\n{}",
        path.display(),
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

impl OwnHomeserver {
    /// Starts it (`scripts/homeserver/start` with `HS_DIR` and `HS_PORT=0`).
    pub async fn start() -> OwnHomeserver {
        let dir = dir();
        run("start", &dir, Some("0")).await;
        let text = std::fs::read_to_string(dir.join("env")).expect("the second homeserver's env");
        let env: HashMap<&str, &str> = text
            .lines()
            .filter_map(|line| line.split_once('='))
            .collect();
        OwnHomeserver {
            hs: Homeserver {
                url: env["HS_URL"].trim_end_matches('/').to_owned(),
                shared_secret: env["HS_SHARED_SECRET"].to_owned(),
            },
            port: env["HS_PORT"].to_owned(),
            dir,
        }
    }

    /// `scripts/homeserver/stop` (SIGTERM, waits until it is gone).
    pub async fn stop(&self) {
        run("stop", &self.dir, None).await;
    }

    /// Starts it again on the same port; returns once it answers
    /// `/_matrix/client/versions` (the start script waits for that).
    pub async fn restart(&self) {
        run("start", &self.dir, Some(&self.port)).await;
    }
}

impl Drop for OwnHomeserver {
    fn drop(&mut self) {
        let _ = std::process::Command::new(repo_root().join("scripts/homeserver/stop"))
            .env("HS_DIR", &self.dir)
            .output();
    }
}
