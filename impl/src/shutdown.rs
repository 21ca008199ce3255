//! Stopping `serve` on SIGTERM or SIGINT, within a hard bound.
//!
//! The first signal sets [`Stop`]: the HTTP side answers every new request 503 and
//! ends every open event stream (a GET on `/channel` or `/mcp`: an SSE response that
//! lives as long as its client, which axum's graceful shutdown would wait for), so the
//! graceful shutdown completes once the requests already in flight (tool calls) have
//! their answers. [`drain`] then stops the sync loops, gives the model's Matrix sends
//! still in flight the time left, and makes the engine's state durable
//! ([`EngineHandle::shutdown`]). Every step has a deadline counted from the signal
//! ([`HTTP_DRAIN`], [`SENDS_BY`], [`FLUSH_BY`]); what a deadline cuts is logged by
//! name, and the process exits with [`Stopped::exit_code`] under 5 s after the
//! signal whatever its sessions do. A second signal exits at once ([`watch_signals`]).

use crate::engine::EngineHandle;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// After the signal, how long the HTTP side has to finish the requests in flight
/// (tool calls) once the event streams are ended; open connections are then left
/// behind (and die with the process).
pub const HTTP_DRAIN: Duration = Duration::from_secs(3);
/// After the signal, until when the model's Matrix sends in flight (prompt posts,
/// outcome edits, notices, joins) may complete; the rest are cut (their effect ids
/// are logged; the model settles them after the next start, `Input::Restarted`).
pub const SENDS_BY: Duration = Duration::from_millis(3500);
/// After the signal, until when the engine has to make its state durable.
pub const FLUSH_BY: Duration = Duration::from_millis(4500);

/// The shutdown switch and the registry of the HTTP requests in flight. Cheap to
/// clone; every clone sees the same switch.
#[derive(Clone)]
pub struct Stop {
    switch: Arc<watch::Sender<bool>>,
    open: Arc<Mutex<BTreeMap<u64, String>>>,
    next: Arc<AtomicU64>,
}

impl Default for Stop {
    fn default() -> Self {
        Stop {
            switch: Arc::new(watch::channel(false).0),
            open: Arc::default(),
            next: Arc::default(),
        }
    }
}

impl Stop {
    /// A switch not set yet.
    pub fn new() -> Stop {
        Stop::default()
    }

    /// Sets the switch (idempotent): every [`Stop::stopped`] future resolves.
    pub fn stop(&self) {
        self.switch.send_replace(true);
    }

    /// Whether the switch is set.
    pub fn is_stopping(&self) -> bool {
        *self.switch.borrow()
    }

    /// Resolves once the switch is set (at once if it already is).
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        let mut rx = self.switch.subscribe();
        async move {
            let _ = rx.wait_for(|set| *set).await;
        }
    }

    /// Records an HTTP request in flight, named by `what` (say `GET /channel (event
    /// stream, session S)`), until the returned guard is dropped.
    pub fn open(&self, what: String) -> OpenGuard {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, what);
        OpenGuard {
            open: self.open.clone(),
            id,
        }
    }

    /// The requests in flight, oldest first.
    pub fn open_requests(&self) -> Vec<String> {
        self.lock().values().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, String>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Dropped when its request's response (its body included) is done.
pub struct OpenGuard {
    open: Arc<Mutex<BTreeMap<u64, String>>>,
    id: u64,
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

/// How a shutdown ended; [`Stopped::exit_code`] is the process's exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Every request and send finished and the state is durable, inside the bound.
    Clean,
    /// The state is durable, but a deadline cut HTTP requests or Matrix sends (logged).
    Cut,
    /// The engine did not make its state durable by [`FLUSH_BY`] (logged); the next
    /// start recovers as after a crash.
    NotFlushed,
}

impl Stopped {
    /// 0 for [`Stopped::Clean`], 3 for [`Stopped::Cut`], 4 for
    /// [`Stopped::NotFlushed`]. (1 is a failure to start or serve, 2 a usage error,
    /// 130 and 143 a second SIGINT or SIGTERM: README, "Stopping the server".)
    pub fn exit_code(self) -> i32 {
        match self {
            Stopped::Clean => 0,
            Stopped::Cut => 3,
            Stopped::NotFlushed => 4,
        }
    }
}

/// The two signals `serve` stops on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    Interrupt,
    Terminate,
}

impl Signal {
    /// The signal's POSIX number: 2 (SIGINT), 15 (SIGTERM).
    pub fn number(self) -> i32 {
        match self {
            Signal::Interrupt => 2,
            Signal::Terminate => 15,
        }
    }

    /// `SIGINT` or `SIGTERM`.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
        }
    }

    /// The exit status of a process stopped at once by this signal coming second:
    /// 128 plus its number (130, 143), as a shell reports a process it killed.
    pub fn exit_code(self) -> i32 {
        128 + self.number()
    }
}

/// Installs the SIGTERM and SIGINT handlers and watches them in a task: the first
/// signal sets `stop`; a second one logs what was still open and exits the process
/// at once with [`Signal::exit_code`], without draining or flushing.
/// Errors: a handler cannot be installed.
pub fn watch_signals(stop: Stop) -> std::io::Result<tokio::task::JoinHandle<()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(tokio::spawn(async move {
        let mut first = true;
        loop {
            let got = tokio::select! {
                Some(()) = term.recv() => Signal::Terminate,
                Some(()) = int.recv() => Signal::Interrupt,
                else => return,
            };
            if first {
                first = false;
                tracing::info!(
                    signal = got.name(),
                    "shutting down: no new requests, event streams ended, at most {} ms; a second signal exits at once",
                    FLUSH_BY.as_millis()
                );
                stop.stop();
                continue;
            }
            let code = got.exit_code();
            tracing::warn!(
                signal = got.name(),
                code,
                open = ?stop.open_requests(),
                "second signal: exiting at once; what was open is cut and the state is not flushed (the next start recovers)"
            );
            std::process::exit(code);
        }
    }))
}

/// The steps after the HTTP side has stopped (or was cut at [`HTTP_DRAIN`]), with
/// `signalled` the instant of the first signal: aborts the sync loops, waits until
/// [`SENDS_BY`] for the model's effects in flight, then has the engine make its
/// state durable until [`FLUSH_BY`]. `http_cut` says whether the drain was cut.
/// Logs what each deadline cut and the outcome.
pub async fn drain(
    signalled: Instant,
    http_cut: bool,
    sync_tasks: Vec<tokio::task::JoinHandle<()>>,
    engine: &EngineHandle,
) -> Stopped {
    for task in &sync_tasks {
        task.abort();
    }
    let mut cut = http_cut;
    let sends_by = signalled + SENDS_BY;
    loop {
        // A read for the shutdown's wait only: how long to let sends finish before the
        // engine stops (an IO deadline); nothing the model decides depends on it, and
        // what is cut the model settles at the next start (`Input::Restarted`).
        let ids = match tokio::time::timeout_at(sends_by, engine.read(|c| c.in_flight_ids())).await
        {
            Ok(Ok(ids)) => ids,
            Ok(Err(_)) => break, // the engine has stopped: nothing to wait for
            Err(_) => {
                tracing::warn!(
                    "shutdown: the engine did not answer by {} ms; in-flight sends unknown",
                    SENDS_BY.as_millis()
                );
                cut = true;
                break;
            }
        };
        if ids.is_empty() {
            break;
        }
        if Instant::now() >= sends_by {
            let ids: Vec<u64> = ids.iter().map(|id| id.0).collect();
            tracing::warn!(
                effects = ?ids,
                "shutdown: {} Matrix send(s) still in flight after {} ms are cut; the model settles them at the next start",
                ids.len(),
                SENDS_BY.as_millis()
            );
            cut = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if tokio::time::timeout_at(signalled + FLUSH_BY, engine.shutdown())
        .await
        .is_err()
    {
        tracing::error!(
            "shutdown: the engine did not make its state durable within {} ms of the signal; the next start recovers as after a crash",
            FLUSH_BY.as_millis()
        );
        return Stopped::NotFlushed;
    }
    let outcome = if cut { Stopped::Cut } else { Stopped::Clean };
    tracing::info!(
        ms = signalled.elapsed().as_millis() as u64,
        code = outcome.exit_code(),
        "shutdown complete: state durable{}",
        if cut {
            ", something was cut (above)"
        } else {
            ""
        }
    );
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn stopped_resolves_once_the_switch_is_set_and_at_once_after() {
        let stop = Stop::new();
        let waiting = tokio::spawn(stop.stopped());
        crate::testing::idle().await;
        assert!(!waiting.is_finished(), "nothing set the switch yet");
        assert!(!stop.is_stopping());
        stop.clone().stop();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("a clone's stop sets the switch for all")
            .unwrap();
        assert!(stop.is_stopping());
        tokio::time::timeout(Duration::from_secs(5), stop.stopped())
            .await
            .expect("set before: resolves at once");
    }

    #[test]
    fn open_requests_are_listed_oldest_first_until_their_guard_drops() {
        let stop = Stop::new();
        let a = stop.open("GET /channel".into());
        let b = stop.open("POST /mcp".into());
        assert_eq!(stop.open_requests(), ["GET /channel", "POST /mcp"]);
        drop(a);
        assert_eq!(stop.open_requests(), ["POST /mcp"]);
        drop(b);
        assert!(stop.open_requests().is_empty());
    }

    #[test]
    fn exit_codes_tell_clean_cut_unflushed_and_second_signals_apart() {
        assert_eq!(Stopped::Clean.exit_code(), 0);
        assert_eq!(Stopped::Cut.exit_code(), 3);
        assert_eq!(Stopped::NotFlushed.exit_code(), 4);
        assert_eq!(Signal::Interrupt.exit_code(), 130);
        assert_eq!(Signal::Terminate.exit_code(), 143);
    }
}
