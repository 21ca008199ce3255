//! `matrix-channel stdio --identity NAME`: one identity's channel over stdin and
//! stdout (the MCP stdio transport: newline-delimited JSON-RPC), for a command entry
//! in Claude Code's `.mcp.json`.
//!
//! Only one process may own an identity's Matrix store and sync (`serve`, which holds
//! the [`StoreLock`]). This process never opens the Matrix store: it attaches to the
//! running `serve` as a bridge from stdio to that server's own streamable-HTTP
//! endpoint `/channel`, so every rule (the sender gate, replay, the permission relay,
//! session identity) stays in the one server.
//!
//! - **Not running.** When no process holds the store's lock, `serve` is not running:
//!   exit 1 with a message saying so ([`StoreLock::holder`] takes no lock and writes
//!   nothing). A server that holds the lock but does not answer at `listen` within
//!   [`CONNECT_FOR`] is the same error.
//! - **Auth.** Each run mints its own bearer token (`Store::create_token`, label
//!   `stdio (pid N)`, in the server's SQLite database: WAL mode with a busy timeout,
//!   the same path `token create` takes while `serve` runs), uses it for every request
//!   and revokes it when it exits; at start it revokes the `stdio (pid N)` tokens of
//!   processes that are gone (a SIGKILLed bridge).
//! - **Bridge.** Each stdin line is one JSON-RPC message (or batch), POSTed to
//!   `/channel` as it is, never re-encoded, with `Mcp-Session-Id` once `initialize`
//!   gave one and `MCP-Protocol-Version` once negotiated (or the version a request
//!   names in its `_meta`, as an HTTP client of that revision sends it). Every
//!   JSON-RPC message of the answer (an `application/json` body or the `data:` of
//!   each SSE event) becomes one stdout line. A line that is not a JSON-RPC message
//!   or batch gets the HTTP path's own answer to it (-32700 for what is not JSON,
//!   -32600 for what is not JSON-RPC) from [`mc_adapters::jsonrpc::inspect`] without
//!   a round trip. An HTTP answer that is no JSON-RPC message (a 503, a
//!   refused connection) becomes a JSON-RPC error (-32603) for each request it
//!   carried, so the client never waits for an answer that cannot come.
//! - **Events.** Once `notifications/initialized` is accepted, the GET event stream
//!   (channel pushes, permission verdicts, the server's requests) is opened and its
//!   messages go to stdout. When it ends or breaks it is reopened with
//!   `Last-Event-ID` (the server keeps sessions and events across restarts, so a
//!   restart loses nothing); a server gone for [`RECONNECT_FOR`], a session the
//!   server no longer knows (404) or a revoked token (401) ends the process with exit
//!   code 1 and a message on stderr, rather than a session silently lost.
//! - **Exit.** stdin closed, SIGTERM or SIGINT: the session is deleted (HTTP DELETE),
//!   the token revoked, exit 0.
//!
//! stdout carries only JSON-RPC lines; logs go to stderr.

use crate::config::Config;
use crate::store::{Store, StoreLock};
use anyhow::{anyhow, Context as _};
use futures::StreamExt as _;
use mc_adapters::jsonrpc::{answered_ids, method, request_ids};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;

/// JSON-RPC 2.0 internal error (the one table of codes, `mc_adapters::jsonrpc`): what
/// a request gets when the server's HTTP answer carried no JSON-RPC answer for it.
pub use mc_adapters::jsonrpc::INTERNAL_ERROR;
pub use mc_adapters::stdio::{
    answer_line, endpoint, failure, frame, label_pid, one_line, protocol_header, standard_headers,
    token_label, Inbound,
};

/// How long a server holding the store may take to answer at `listen` when this
/// process starts (it may still be starting: logging in, the first sync).
pub const CONNECT_FOR: Duration = Duration::from_secs(5);

/// How long the event stream is retried while the server does not answer (a restart)
/// before the process gives up.
pub const RECONNECT_FOR: Duration = Duration::from_secs(60);

/// Between two attempts to reopen the event stream while the server does not answer.
const RECONNECT_POLL: Duration = Duration::from_millis(500);

/// When the server sent no `retry:` hint: how long to wait before reopening an event
/// stream that ended.
const DEFAULT_RETRY: Duration = Duration::from_secs(1);

/// How long answers still in flight are waited for after stdin closed.
const DRAIN_FOR: Duration = Duration::from_secs(1);

/// How long the closing DELETE may take.
const DELETE_FOR: Duration = Duration::from_secs(2);

/// Whether a process with id `pid` exists (on Linux, `/proc/PID`; elsewhere every
/// process is taken as alive, so no token is revoked as stale).
fn pid_alive(pid: u32) -> bool {
    if cfg!(target_os = "linux") {
        std::path::Path::new("/proc").join(pid.to_string()).exists()
    } else {
        true
    }
}

/// The stdout line of one SSE event: its `data` when that is JSON; `None` for a
/// priming event (an id or a retry hint, no data) or data that is not JSON.
pub fn sse_line(event: &sse_stream::Sse) -> Option<String> {
    one_line(event.data.as_deref()?)
}

/// How the bridge ended.
#[derive(Debug)]
enum End {
    /// stdin reached its end.
    StdinClosed,
    /// SIGTERM or SIGINT (its name).
    Signal(&'static str),
    /// Something that ends the session (its message for stderr).
    Fatal(String),
}

/// The session as the server gave it.
#[derive(Default)]
struct Session {
    id: Option<String>,
    protocol: Option<String>,
    /// The event stream's task.
    events: Option<tokio::task::JoinHandle<()>>,
}

struct Bridge {
    http: reqwest::Client,
    url: String,
    token: String,
    /// The session's room label, sent as the `Matrix-Channel-Room` header (the server
    /// reads it from the request that creates the session).
    label: Option<mc_model::Label>,
    session: Mutex<Session>,
    out: mpsc::UnboundedSender<String>,
    fatal: mpsc::UnboundedSender<String>,
}

/// Runs the bridge for `identity` (already checked to be in `config`). Returns the
/// exit code: 0 after stdin closed or a signal, 1 when the session was lost.
/// Errors (exit 1, the message on stderr): `serve` is not running, does not answer,
/// or the token store cannot be used.
pub async fn run(
    config: &Config,
    identity: &str,
    label: Option<mc_model::Label>,
) -> anyhow::Result<i32> {
    let dir = &config.store_dir;
    match StoreLock::holder(dir)? {
        Some(holder) => tracing::debug!(%holder, "the store is held"),
        None => {
            return Err(anyhow!(
                "matrix-channel stdio attaches to a running `matrix-channel serve` (none \
                 holds the store at {}): start it first",
                dir.display()
            ))
        }
    }
    let addr = endpoint(config.listen).map_err(|e| anyhow!("{e}"))?;
    let base = format!("http://{addr}");
    let http = reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(5))
        .build()
        .context("building the HTTP client")?;
    wait_listening(&http, &base, dir).await?;

    // The token store is the server's SQLite database, which `serve` keeps open: WAL
    // mode and a busy timeout make this process's short writes wait for the server's,
    // as `token create` does while it runs. The Matrix stores are never opened.
    let store = Store::open(dir)?;
    revoke_stale_tokens(&store)?;
    let pid = std::process::id();
    let token = store.create_token(identity, &token_label(pid))?;
    let token_id = crate::store::token_id(&token);
    tracing::info!(%identity, token = %token_id, %base, "attached to serve as a stdio bridge");

    let (out_tx, out_rx) = mpsc::unbounded_channel::<String>();
    let (fatal_tx, mut fatal_rx) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(write_stdout(out_rx, fatal_tx.clone()));
    let bridge = Arc::new(Bridge {
        http,
        url: format!("{base}/channel"),
        token,
        label,
        session: Mutex::new(Session::default()),
        out: out_tx,
        fatal: fatal_tx,
    });

    let end = bridge.serve(&mut fatal_rx).await;
    let code = match &end {
        End::StdinClosed => {
            tracing::info!("stdin closed: ending the session");
            0
        }
        End::Signal(name) => {
            tracing::info!("{name}: ending the session");
            0
        }
        End::Fatal(message) => {
            eprintln!("matrix-channel stdio: {message}");
            1
        }
    };
    bridge.close().await;
    match store.revoke_token(&token_id) {
        Ok(_) => tracing::info!(token = %token_id, "token revoked"),
        Err(e) => tracing::error!(token = %token_id, "revoking the token failed: {e}"),
    }
    drop(bridge);
    // Every line queued is written before the exit (the writer ends when the last
    // task holding the bridge is gone; they were all aborted).
    let _ = tokio::time::timeout(Duration::from_secs(1), writer).await;
    Ok(code)
}

/// Waits until something answers HTTP at `base` (`GET /health`, no token), at most
/// [`CONNECT_FOR`].
async fn wait_listening(
    http: &reqwest::Client,
    base: &str,
    dir: &std::path::Path,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + CONNECT_FOR;
    loop {
        let error = match http.get(format!("{base}/health")).send().await {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            return Err(anyhow!(
                "a `matrix-channel serve` holds the store at {} but nothing answers at {base} \
                 (`listen` in the config) within {} s: {}",
                dir.display(),
                CONNECT_FOR.as_secs(),
                error_chain(&error)
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Revokes the tokens of bridges whose process is gone.
fn revoke_stale_tokens(store: &Store) -> anyhow::Result<()> {
    for token in store.list_tokens()? {
        let Some(pid) = label_pid(&token.label) else {
            continue;
        };
        if !pid_alive(pid) && store.revoke_token(&token.id)? {
            tracing::info!(token = %token.id, pid, "revoked the token of a stdio bridge that is gone");
        }
    }
    Ok(())
}

/// An error with its causes (reqwest's own message hides "connection refused").
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The one writer of stdout: each line, then a flush. A stdout that cannot be
/// written (the client went away) ends the bridge.
async fn write_stdout(
    mut lines: mpsc::UnboundedReceiver<String>,
    fatal: mpsc::UnboundedSender<String>,
) {
    let mut stdout = tokio::io::stdout();
    while let Some(line) = lines.recv().await {
        let written = async {
            stdout.write_all(line.as_bytes()).await?;
            stdout.write_all(b"\n").await?;
            stdout.flush().await
        }
        .await;
        if let Err(e) = written {
            let _ = fatal.send(format!("writing to stdout failed: {e}"));
            return;
        }
    }
}

impl Bridge {
    fn emit(&self, line: String) {
        let _ = self.out.send(line);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Session> {
        self.session.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn headers(&self, protocol: Option<&str>) -> reqwest::header::HeaderMap {
        let mut headers = reqwest::header::HeaderMap::new();
        let session = self.lock().id.clone();
        if let Some(id) = session.and_then(|s| s.parse().ok()) {
            headers.insert("mcp-session-id", id);
        }
        if let Some(v) = protocol.and_then(|p| p.parse().ok()) {
            headers.insert("mcp-protocol-version", v);
        }
        // A label is visible ASCII: always a valid header value.
        if let Some(v) = self.label.as_ref().and_then(|l| l.as_str().parse().ok()) {
            headers.insert(mc_adapters::room_label::ROOM_HEADER, v);
        }
        headers
    }

    /// Reads stdin until it ends, a signal comes, or something fatal happens.
    async fn serve(self: &Arc<Self>, fatal: &mut mpsc::UnboundedReceiver<String>) -> End {
        let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => return End::Fatal(format!("cannot watch SIGTERM: {e}")),
            };
        let mut int = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        {
            Ok(s) => s,
            Err(e) => return End::Fatal(format!("cannot watch SIGINT: {e}")),
        };
        let mut answers = tokio::task::JoinSet::new();
        let end = loop {
            tokio::select! {
                line = lines.next_line() => match line {
                    Ok(Some(line)) => self.inbound(&line, &mut answers).await,
                    Ok(None) => break End::StdinClosed,
                    Err(e) => break End::Fatal(format!("reading stdin failed: {e}")),
                },
                _ = term.recv() => break End::Signal("SIGTERM"),
                _ = int.recv() => break End::Signal("SIGINT"),
                Some(message) = fatal.recv() => break End::Fatal(message),
                Some(_) = answers.join_next(), if !answers.is_empty() => {}
            }
        };
        if matches!(end, End::StdinClosed) {
            // A client that wrote its requests and closed stdin still gets the answers
            // already on their way.
            let drained = tokio::time::timeout(DRAIN_FOR, async {
                while answers.join_next().await.is_some() {}
            })
            .await;
            if drained.is_err() {
                tracing::info!("answers still in flight after stdin closed were dropped");
            }
        }
        answers.abort_all();
        end
    }

    async fn inbound(self: &Arc<Self>, line: &str, answers: &mut tokio::task::JoinSet<()>) {
        match frame(line) {
            Inbound::Blank => {}
            Inbound::Malformed(answer) => {
                tracing::warn!("a stdin line that is not JSON: answered with a parse error");
                self.emit(answer);
            }
            Inbound::Message { raw, value } => {
                self.post(raw, value, answers).await;
            }
        }
    }

    /// POSTs one message and waits for the answer's head (so messages reach the
    /// server in stdin's order); the body is read by a task in `answers`, except for
    /// `initialize`, whose answer (the session and revision) every later message needs.
    async fn post(
        self: &Arc<Self>,
        raw: String,
        value: Value,
        answers: &mut tokio::task::JoinSet<()>,
    ) {
        let is_initialize = method(&value) == Some("initialize");
        let is_initialized = method(&value) == Some("notifications/initialized");
        let pending = request_ids(&value);
        let protocol = protocol_header(&value, self.lock().protocol.as_deref());
        let mut headers = self.headers(protocol.as_deref());
        if is_initialize {
            headers.remove("mcp-session-id");
        }
        for (name, value) in standard_headers(&value, protocol.as_deref()) {
            if let Ok(value) = value.parse() {
                headers.insert(name, value);
            }
        }
        let sent_session = headers.contains_key("mcp-session-id");
        let response = self
            .http
            .post(&self.url)
            .bearer_auth(&self.token)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(
                reqwest::header::ACCEPT,
                "application/json, text/event-stream",
            )
            .headers(headers)
            .body(raw)
            .send()
            .await;
        let response = match response {
            Ok(r) => r,
            Err(e) => {
                let why = format!("POST {} failed: {}", self.url, error_chain(&e));
                tracing::warn!("{why}");
                for id in &pending {
                    self.emit(failure(id, &why));
                }
                return;
            }
        };
        let status = response.status();
        if is_initialize && status.is_success() {
            let session = response
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let answered = self.read_answer(response, pending, sent_session).await;
            let protocol = answered
                .iter()
                .find_map(|m| m.pointer("/result/protocolVersion"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            self.adopt(session, protocol);
            return;
        }
        if is_initialized && status.is_success() {
            self.open_events();
        }
        let me = self.clone();
        answers.spawn(async move {
            me.read_answer(response, pending, sent_session).await;
        });
    }

    /// A new session from `initialize`: its event stream starts once
    /// `notifications/initialized` is accepted; an older one is deleted.
    fn adopt(self: &Arc<Self>, id: Option<String>, protocol: Option<String>) {
        let old = {
            let mut session = self.lock();
            let old_id = session.id.take();
            if let Some(task) = session.events.take() {
                task.abort();
            }
            let old_protocol = session.protocol.take();
            session.id = id.clone();
            session.protocol = protocol.clone();
            old_id
                .filter(|old| Some(old) != id.as_ref())
                .map(|old| (old, old_protocol))
        };
        tracing::info!(
            session = id.as_deref().unwrap_or("(none)"),
            protocol = protocol.as_deref().unwrap_or("(none)"),
            "initialized"
        );
        if let Some((old, old_protocol)) = old {
            let me = self.clone();
            tokio::spawn(async move { me.delete(&old, old_protocol.as_deref()).await });
        }
    }

    /// Writes every JSON-RPC message of one POST's answer to stdout and returns them;
    /// a request left unanswered gets a JSON-RPC error.
    async fn read_answer(
        &self,
        response: reqwest::Response,
        mut pending: Vec<Value>,
        sent_session: bool,
    ) -> Vec<Value> {
        let status = response.status();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase();
        let mut forwarded = Vec::new();
        let mut forward = |line: String, pending: &mut Vec<Value>| {
            if let Ok(value) = serde_json::from_str::<Value>(&line) {
                for id in answered_ids(&value) {
                    pending.retain(|p| p != &id);
                }
                forwarded.push(value);
            }
            self.emit(line);
        };
        let mut why = None;
        if status.is_success() && content_type.starts_with("text/event-stream") {
            let mut events = sse_stream::SseStream::from_bytes_stream(response.bytes_stream());
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) => {
                        if let Some(line) = sse_line(&event) {
                            forward(line, &mut pending);
                        }
                    }
                    Err(e) => {
                        why = Some(format!("the answer's event stream broke: {e}"));
                        break;
                    }
                }
            }
            if why.is_none() && !pending.is_empty() {
                why = Some("the answer's event stream ended without the response".into());
            }
        } else {
            let body = response.text().await.unwrap_or_default();
            match answer_line(&body) {
                Some(line) => forward(line, &mut pending),
                None if status == reqwest::StatusCode::ACCEPTED => {}
                None => {
                    let text: String = body.trim().chars().take(300).collect();
                    let message = format!("the server answered HTTP {status}: {text}");
                    if status == reqwest::StatusCode::NOT_FOUND && sent_session {
                        let _ = self.fatal.send(format!(
                            "the server no longer knows this session (HTTP 404 to a POST: it \
                             was deleted or has expired); exiting so that the client starts \
                             a new one ({message})"
                        ));
                    } else if status == reqwest::StatusCode::UNAUTHORIZED {
                        let _ = self.fatal.send(format!(
                            "the server refused this process's token (it was revoked): {message}"
                        ));
                    } else if pending.is_empty() {
                        tracing::warn!("{message}");
                    }
                    why = Some(message);
                }
            }
        }
        if let Some(why) = why {
            for id in &pending {
                self.emit(failure(id, &why));
            }
        }
        forwarded
    }

    /// Starts the event stream's task (once per session).
    fn open_events(self: &Arc<Self>) {
        let mut session = self.lock();
        if session.events.is_some() || session.id.is_none() {
            return;
        }
        let me = self.clone();
        session.events = Some(tokio::spawn(async move { me.events().await }));
    }

    /// The GET event stream, reopened (with `Last-Event-ID`) whenever it ends.
    async fn events(self: Arc<Self>) {
        let mut last_event_id: Option<String> = None;
        let mut retry = DEFAULT_RETRY;
        let mut down_since: Option<Instant> = None;
        let mut opened = false;
        loop {
            let protocol = self.lock().protocol.clone();
            let mut request = self
                .http
                .get(&self.url)
                .bearer_auth(&self.token)
                .header(reqwest::header::ACCEPT, "text/event-stream")
                .headers(self.headers(protocol.as_deref()));
            if let Some(id) = &last_event_id {
                request = request.header("last-event-id", id);
            }
            let outcome = match request.send().await {
                Err(e) => Err(error_chain(&e)),
                Ok(response) => {
                    let status = response.status();
                    match status {
                        reqwest::StatusCode::NOT_FOUND => {
                            let _ = self.fatal.send(
                                "the server no longer knows this session (HTTP 404 to the event \
                                 stream: it was deleted or has expired); exiting so that the client \
                                 starts a new one"
                                    .to_owned(),
                            );
                            return;
                        }
                        reqwest::StatusCode::UNAUTHORIZED => {
                            let _ = self.fatal.send(
                                "the server refused this process's token on the event stream (it \
                                 was revoked)"
                                    .to_owned(),
                            );
                            return;
                        }
                        reqwest::StatusCode::METHOD_NOT_ALLOWED => {
                            tracing::warn!("the server offers no event stream (405)");
                            return;
                        }
                        s if s.is_success() => {
                            let down_ms = down_since.take().map(|t| t.elapsed().as_millis() as u64);
                            if opened {
                                tracing::info!(
                                    last_event_id = last_event_id.as_deref().unwrap_or("(none)"),
                                    down_ms,
                                    "the event stream is open again"
                                );
                            } else {
                                tracing::info!("the event stream is open");
                                opened = true;
                            }
                            let mut events =
                                sse_stream::SseStream::from_bytes_stream(response.bytes_stream());
                            let mut broke = None;
                            while let Some(event) = events.next().await {
                                match event {
                                    Ok(event) => {
                                        if let Some(id) = &event.id {
                                            last_event_id = Some(id.clone());
                                        }
                                        if let Some(ms) = event.retry {
                                            retry = Duration::from_millis(ms);
                                        }
                                        if let Some(line) = sse_line(&event) {
                                            self.emit(line);
                                        }
                                    }
                                    Err(e) => {
                                        broke = Some(e.to_string());
                                        break;
                                    }
                                }
                            }
                            match broke {
                                Some(e) => {
                                    tracing::info!("the event stream broke ({e}): reopening it")
                                }
                                None => tracing::info!("the event stream ended: reopening it"),
                            }
                            Ok(())
                        }
                        s => {
                            let body = response.text().await.unwrap_or_default();
                            Err(format!(
                                "HTTP {s}: {}",
                                body.trim().chars().take(200).collect::<String>()
                            ))
                        }
                    }
                }
            };
            match outcome {
                Ok(()) => tokio::time::sleep(retry).await,
                Err(why) => {
                    let since = *down_since.get_or_insert_with(|| {
                        tracing::warn!(
                            "the event stream cannot be opened ({why}): retrying for up to {} s",
                            RECONNECT_FOR.as_secs()
                        );
                        Instant::now()
                    });
                    if since.elapsed() >= RECONNECT_FOR {
                        let _ = self.fatal.send(format!(
                            "the server has not served the event stream for {} s (last: {why}); \
                             exiting rather than losing its pushes unseen",
                            RECONNECT_FOR.as_secs()
                        ));
                        return;
                    }
                    tokio::time::sleep(RECONNECT_POLL).await;
                }
            }
        }
    }

    /// Ends the session: its event stream, then an HTTP DELETE.
    async fn close(&self) {
        let (id, protocol) = {
            let mut session = self.lock();
            if let Some(task) = session.events.take() {
                task.abort();
            }
            (session.id.take(), session.protocol.take())
        };
        if let Some(id) = id {
            self.delete(&id, protocol.as_deref()).await;
        }
    }

    async fn delete(&self, id: &str, protocol: Option<&str>) {
        let mut request = self
            .http
            .delete(&self.url)
            .bearer_auth(&self.token)
            .header("mcp-session-id", id);
        if let Some(p) = protocol {
            request = request.header("mcp-protocol-version", p);
        }
        match tokio::time::timeout(DELETE_FOR, request.send()).await {
            Ok(Ok(r)) if r.status().is_success() => {
                tracing::info!(session = %id, "session deleted")
            }
            Ok(Ok(r)) => {
                tracing::warn!(session = %id, status = %r.status(), "deleting the session was refused")
            }
            Ok(Err(e)) => {
                tracing::warn!(session = %id, "deleting the session failed: {}", error_chain(&e))
            }
            Err(_) => tracing::warn!(session = %id, "deleting the session timed out"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_labelled_bridge_sends_its_label_in_the_room_header_and_an_unlabelled_one_none() {
        let (out, _lines) = mpsc::unbounded_channel();
        let (fatal, _fatal) = mpsc::unbounded_channel();
        let bridge = |label: Option<&str>| Bridge {
            http: reqwest::Client::new(),
            url: String::new(),
            token: String::new(),
            label: label.map(|l| mc_model::Label::parse(l).unwrap()),
            session: Mutex::default(),
            out: out.clone(),
            fatal: fatal.clone(),
        };
        let headers = bridge(Some("web-1")).headers(Some("2025-11-25"));
        assert_eq!(headers["matrix-channel-room"], "web-1");
        assert_eq!(headers["mcp-protocol-version"], "2025-11-25");
        assert!(bridge(None)
            .headers(None)
            .get("matrix-channel-room")
            .is_none());
    }

    #[test]
    fn an_sse_event_is_a_line_when_its_data_is_json_and_nothing_when_it_primes() {
        let mut event = sse_stream::Sse::default().id("7").retry(3000);
        assert_eq!(sse_line(&event), None, "a priming event has no data");
        event = event.data("");
        assert_eq!(sse_line(&event), None);
        let message = r#"{"jsonrpc":"2.0","method":"notifications/claude/channel","params":{"content":"hi"}}"#;
        event = event.data(message);
        assert_eq!(sse_line(&event).as_deref(), Some(message));
        // Data spread over several `data:` lines is joined with a newline by the
        // parser; the line written has none.
        let multi =
            sse_stream::Sse::default().data("{\"jsonrpc\":\"2.0\",\n\"id\":1,\"result\":{}}");
        assert_eq!(
            sse_line(&multi).as_deref(),
            Some(r#"{"id":1,"jsonrpc":"2.0","result":{}}"#)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn sse_bytes_from_the_server_become_the_lines_of_their_messages() {
        let body = "id: 0\nretry: 3000\ndata: \n\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}\n\n: keep-alive\n\nid: 2\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"ping\",\"id\":0}\n\n";
        // Cut anywhere: the parser joins the pieces.
        let pieces: Vec<Result<axum::body::Bytes, std::io::Error>> = body
            .as_bytes()
            .chunks(7)
            .map(|c| Ok(axum::body::Bytes::copy_from_slice(c)))
            .collect();
        let events: Vec<_> =
            sse_stream::SseStream::from_bytes_stream(futures::stream::iter(pieces))
                .collect()
                .await;
        let lines: Vec<String> = events
            .iter()
            .map(|e| e.as_ref().expect("parses"))
            .filter_map(sse_line)
            .collect();
        assert_eq!(
            lines,
            [
                r#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
                r#"{"jsonrpc":"2.0","method":"ping","id":0}"#,
            ]
        );
    }

    #[test]
    fn this_process_is_alive_and_a_pid_never_used_is_not() {
        assert!(pid_alive(std::process::id()));
        if cfg!(target_os = "linux") {
            // Above the kernel's pid_max (4,194,304 at most).
            assert!(!pid_alive(4_194_305));
        }
    }
}
