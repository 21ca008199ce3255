//! The end-to-end harness: a real Synapse on loopback (`scripts/homeserver/start`), the
//! real `matrix-channel` binary, the official MCP TypeScript SDK client
//! (`tests/client/mcp-client.mjs`), and humans driving the Client-Server API.
//!
//! Nothing here knows how the server works inside: it starts the binary with a config
//! file, talks HTTP to it, and watches Matrix rooms as a client would.

pub mod auth_proxy;
pub mod claude;
pub mod expect;
pub mod fake_model;
pub mod fixture;
pub mod homeserver;
pub mod https;
pub mod human;
pub mod mcp;
pub mod nio;
pub mod outage;
pub mod prometheus;
pub mod proxy;
pub mod server;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;
use tokio::sync::{Semaphore, SemaphorePermit};

/// How long a test waits for something that should happen (a push, a room event).
/// Generous: a debug build on two busy cores, and the SDK's 3 s reconnect delay.
pub const WAIT: Duration = Duration::from_secs(20);

/// How long a test waits to be sure that nothing more arrives, after an ordering proof
/// (a later marker message arrived first) already showed that nothing arrived before.
pub const QUIET: Duration = Duration::from_millis(1500);

/// The repository root (the parent of `impl/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("impl/ has a parent directory")
        .to_owned()
}

/// Polls `probe` until it returns `Some`, for at most [`WAIT`] (every 200 ms).
///
/// # Panics
/// When `probe` has not answered `Some` within [`WAIT`], naming `what`.
pub async fn eventually<T>(what: &str, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let start = std::time::Instant::now();
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(start.elapsed() < WAIT, "{what}: not within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A fresh random lowercase suffix for user names, labels and transaction ids.
pub fn random_suffix() -> String {
    format!("{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff)
}

/// At most `MC_E2E_PARALLEL` (default 2) scenarios run at once: each runs a server, a
/// node process and several Matrix clients, and the timing assertions (settle windows)
/// must not starve on a two-core machine.
pub async fn scenario_permit() -> SemaphorePermit<'static> {
    static PERMITS: OnceLock<Semaphore> = OnceLock::new();
    let permits = PERMITS.get_or_init(|| {
        let n = std::env::var("MC_E2E_PARALLEL")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2usize)
            .max(1);
        Semaphore::new(n)
    });
    permits
        .acquire()
        .await
        .expect("the semaphore is never closed")
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
