//! The MCP client: `node tests/client/mcp-client.mjs` (the official TypeScript SDK,
//! Streamable HTTP transport), driven by JSON lines. See that file for the commands.
//!
//! Every notification the client receives is kept in arrival order: a test takes them
//! one by one (`next_notification`), or proves that none came (`expect_no_notification`).

use super::server::engine_caught_up;
use super::{repo_root, tail, WAIT};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fmt;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{mpsc, oneshot, watch, OnceCell};

/// A server-to-client notification.
#[derive(Clone, Debug, PartialEq)]
pub struct Notification {
    pub method: String,
    /// For a channel push, without its `security` meta (taken out into `security`, so
    /// the expected params of `expect.rs` need not say which push is a session's
    /// first).
    pub params: Value,
    /// A channel push's `security` meta: the server sets it on the first push of each
    /// attach ([`mc_model::SECURITY_POINTER`]).
    pub security: Option<String>,
}

impl Notification {
    /// The params as the server sent them: `security` put back into the meta.
    pub fn wire_params(&self) -> Value {
        let mut params = self.params.clone();
        if let Some(security) = &self.security {
            // (Indexing a JSON object mutably inserts the key: only with a pointer.)
            if let Some(meta) = params.pointer_mut("/meta").and_then(Value::as_object_mut) {
                meta.insert("security".into(), Value::String(security.clone()));
            }
        }
        params
    }
}

/// A failed command: the SDK's error message and code (an HTTP status, a JSON-RPC
/// error code, or a connection error code such as `"ECONNREFUSED"`).
#[derive(Clone, Debug)]
pub struct ClientError {
    pub message: String,
    pub code: Value,
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (code {})", self.message, self.code)
    }
}

/// What `connect` answered.
#[derive(Clone, Debug)]
pub struct Connected {
    pub session_id: String,
    pub protocol_version: Option<String>,
    pub server_capabilities: Value,
    pub instructions: Option<String>,
}

/// `npm ci` in tests/client once per process, when node_modules is missing.
async fn ensure_node_modules() {
    static DONE: OnceCell<()> = OnceCell::const_new();
    DONE.get_or_init(|| async {
        let dir = repo_root().join("tests/client");
        if dir
            .join("node_modules/@modelcontextprotocol/sdk/package.json")
            .exists()
        {
            return;
        }
        let out = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .output()
            .await
            .expect("run npm ci in tests/client (is Node.js installed?)");
        assert!(
            out.status.success(),
            "npm ci in tests/client failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    })
    .await;
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

/// One node process holding (at most) one MCP client connection.
pub struct McpClient {
    name: String,
    _child: Child,
    stdin: tokio::sync::Mutex<ChildStdin>,
    next_id: AtomicU64,
    pending: Pending,
    notifications: tokio::sync::Mutex<mpsc::UnboundedReceiver<Notification>>,
    history: Arc<Mutex<Vec<Notification>>>,
    events: Arc<Mutex<Vec<Value>>>,
    events_seen: watch::Receiver<usize>,
    stderr: Arc<Mutex<String>>,
    /// The `instructions` of the last session opened: every channel push taken is
    /// checked against them ([`super::expect::assert_meta_in_instructions`]).
    instructions: Mutex<Option<String>>,
}

impl McpClient {
    /// Starts a client process; `name` labels its output when a test fails.
    pub async fn spawn(name: &str) -> McpClient {
        ensure_node_modules().await;
        let script = repo_root().join("tests/client/mcp-client.mjs");
        let node = std::env::var("MC_E2E_NODE").unwrap_or_else(|_| "node".to_owned());
        let mut child = Command::new(node)
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn node tests/client/mcp-client.mjs");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");

        let pending: Pending = Arc::default();
        let history: Arc<Mutex<Vec<Notification>>> = Arc::default();
        let events: Arc<Mutex<Vec<Value>>> = Arc::default();
        let (events_tx, events_seen) = watch::channel(0usize);
        let (note_tx, note_rx) = mpsc::unbounded_channel();
        {
            let (pending, history, events) = (pending.clone(), history.clone(), events.clone());
            tokio::spawn(async move {
                let mut lines = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                        events
                            .lock()
                            .unwrap()
                            .push(json!({ "event": "garbage", "line": line }));
                        continue;
                    };
                    if msg.get("ok").is_some() {
                        let id = msg["id"].as_u64();
                        let waiter = id.and_then(|id| pending.lock().unwrap().remove(&id));
                        if let Some(waiter) = waiter {
                            let _ = waiter.send(msg);
                        }
                        continue;
                    }
                    if msg["event"] == "notification" {
                        let method = msg["method"].as_str().unwrap_or_default().to_owned();
                        let mut params = msg["params"].clone();
                        let security = if method == super::expect::CHANNEL {
                            params
                                .pointer_mut("/meta")
                                .and_then(Value::as_object_mut)
                                .and_then(|meta| meta.remove("security"))
                                .map(|v| v.as_str().map(str::to_owned).unwrap_or(v.to_string()))
                        } else {
                            None
                        };
                        let n = Notification {
                            method,
                            params,
                            security,
                        };
                        history.lock().unwrap().push(n.clone());
                        let _ = note_tx.send(n);
                    }
                    let count = {
                        let mut events = events.lock().unwrap();
                        events.push(msg);
                        events.len()
                    };
                    let _ = events_tx.send(count);
                }
            });
        }
        let stderr_text: Arc<Mutex<String>> = Arc::default();
        {
            let stderr_text = stderr_text.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let mut text = stderr_text.lock().unwrap();
                    text.push_str(&line);
                    text.push('\n');
                }
            });
        }
        McpClient {
            name: name.to_owned(),
            _child: child,
            stdin: tokio::sync::Mutex::new(stdin),
            next_id: AtomicU64::new(1),
            pending,
            notifications: tokio::sync::Mutex::new(note_rx),
            history,
            events,
            events_seen,
            stderr: stderr_text,
            instructions: Mutex::new(None),
        }
    }

    /// Sends one command and waits for its reply.
    pub async fn command(&self, mut cmd: Value) -> Result<Value, ClientError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        cmd["id"] = json!(id);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(id, tx);
        {
            let mut stdin = self.stdin.lock().await;
            stdin
                .write_all(format!("{cmd}\n").as_bytes())
                .await
                .expect("write to the MCP client");
            stdin.flush().await.expect("flush the MCP client's stdin");
        }
        let reply = match tokio::time::timeout(Duration::from_secs(60), rx).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => panic!("[{}] the MCP client exited during {cmd}", self.name),
            Err(_) => panic!("[{}] no reply to {cmd} within 60 s", self.name),
        };
        if reply["ok"] == true {
            Ok(reply)
        } else {
            Err(ClientError {
                message: reply["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                code: reply["error"]["code"].clone(),
            })
        }
    }

    /// Opens a new session (initialize) without waiting for its event stream.
    pub async fn connect_raw(
        &self,
        url: &str,
        token: Option<&str>,
    ) -> Result<Connected, ClientError> {
        let reply = self
            .command(json!({ "cmd": "connect", "url": url, "token": token }))
            .await?;
        let connected = connected(&reply);
        if let Some(text) = &connected.instructions {
            *self.instructions.lock().unwrap() = Some(text.clone());
        }
        Ok(connected)
    }

    /// Opens a new session and waits until its event stream (the GET) is open and the
    /// server's engine has taken the attach in, so that the session is attached before
    /// the test acts.
    pub async fn connect(&self, url: &str, token: &str) -> Connected {
        let before = self.events_len();
        let connected = self
            .connect_raw(url, Some(token))
            .await
            .unwrap_or_else(|e| panic!("[{}] connect {url}: {e}", self.name));
        self.wait_stream_open(url, before).await;
        connected
    }

    /// Resumes the session `session_id` without initialize (as Claude Code does after
    /// a drop): the SDK transport's `sessionId` option, then a GET event stream,
    /// with `Last-Event-ID` when `last_event_id` is given. Waits until the stream is open
    /// and the server's engine has taken the attach in.
    pub async fn resume(
        &self,
        url: &str,
        token: &str,
        session_id: &str,
        protocol_version: Option<&str>,
        last_event_id: Option<&str>,
    ) -> Result<(), ClientError> {
        let before = self.events_len();
        self.command(json!({
            "cmd": "connect",
            "url": url,
            "token": token,
            "sessionId": session_id,
            "protocolVersion": protocol_version,
            "lastEventId": last_event_id,
        }))
        .await?;
        self.wait_stream_open(url, before).await;
        Ok(())
    }

    /// Opens a session over stdio: the SDK's `StdioClientTransport` spawns `command`
    /// with `args` (and only the SDK's default environment plus `env`), then
    /// initializes. Returns the child's pid with the session. Does not wait for the
    /// bridge's event stream (see [`McpClient::wait_stderr`]).
    pub async fn connect_stdio(
        &self,
        command: &str,
        args: &[String],
        env: Value,
    ) -> Result<(u32, Connected), ClientError> {
        let reply = self
            .command(json!({
                "cmd": "connect",
                "stdio": { "command": command, "args": args, "env": env },
            }))
            .await?;
        let connected = connected(&reply);
        if let Some(text) = &connected.instructions {
            *self.instructions.lock().unwrap() = Some(text.clone());
        }
        let pid = reply["pid"].as_u64().expect("the stdio child's pid") as u32;
        Ok((pid, connected))
    }

    /// Waits at most `timeout` for an event `matches` accepts (among all so far, then
    /// new ones) and returns it.
    pub async fn wait_event(
        &self,
        what: &str,
        timeout: Duration,
        matches: impl Fn(&Value) -> bool,
    ) -> Value {
        let mut seen = self.events_seen.clone();
        let found = tokio::time::timeout(timeout, async {
            loop {
                if let Some(e) = self.events.lock().unwrap().iter().find(|e| matches(e)) {
                    return e.clone();
                }
                if seen.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        })
        .await;
        found.unwrap_or_else(|_| {
            panic!(
                "[{}] no event {what} within {timeout:?}; recent client events:\n{}",
                self.name,
                self.recent_events(30)
            )
        })
    }

    /// Waits for a line of the stdio child's stderr that contains `needle`.
    pub async fn wait_stderr(&self, needle: &str, timeout: Duration) -> String {
        let event = self
            .wait_event(&format!("stderr {needle:?}"), timeout, |e| {
                e["event"] == "stderr" && e["line"].as_str().is_some_and(|l| l.contains(needle))
            })
            .await;
        event["line"].as_str().unwrap_or_default().to_owned()
    }

    /// Every line of the stdio child's stderr so far.
    pub fn stderr_lines(&self) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e["event"] == "stderr")
            .filter_map(|e| e["line"].as_str().map(str::to_owned))
            .collect()
    }

    fn events_len(&self) -> usize {
        self.events.lock().unwrap().len()
    }

    /// Waits for a `GET` answered 200 among the events after index `from`, then until
    /// the engine of the server at `url` handled the attach: the server queues it to
    /// its engine before it answers the GET, and [`engine_caught_up`] returns once the
    /// engine has handled every input queued before it.
    async fn wait_stream_open(&self, url: &str, from: usize) {
        let mut seen = self.events_seen.clone();
        let found = tokio::time::timeout(WAIT, async {
            loop {
                let open = self.events.lock().unwrap()[from..]
                    .iter()
                    .any(|e| e["event"] == "http" && e["method"] == "GET" && e["status"] == 200);
                if open {
                    return;
                }
                if seen.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        assert!(
            found.is_ok(),
            "[{}] the event stream did not open within {WAIT:?}; events: {:?}",
            self.name,
            self.events.lock().unwrap()
        );
        engine_caught_up(base_of(url)).await;
    }

    /// `tools/call`: the raw `CallToolResult`, or the error (for instance JSON-RPC
    /// -32602 for invalid arguments).
    pub async fn call(&self, tool: &str, args: Value) -> Result<Value, ClientError> {
        let reply = self
            .command(json!({ "cmd": "call", "tool": tool, "args": args }))
            .await?;
        Ok(reply["result"].clone())
    }

    /// `tools/call` that must succeed: its `structuredContent`.
    pub async fn call_ok(&self, tool: &str, args: Value) -> Value {
        let result = self
            .call(tool, args.clone())
            .await
            .unwrap_or_else(|e| panic!("[{}] {tool} {args}: {e}", self.name));
        assert_ne!(
            result["isError"], true,
            "[{}] {tool} {args} returned an error result: {result}",
            self.name
        );
        result["structuredContent"].clone()
    }

    /// `tools/list`.
    pub async fn list_tools(&self) -> Vec<Value> {
        let reply = self
            .command(json!({ "cmd": "list_tools" }))
            .await
            .unwrap_or_else(|e| panic!("[{}] tools/list: {e}", self.name));
        reply["tools"].as_array().cloned().unwrap_or_default()
    }

    /// Sends a client notification.
    pub async fn notify(&self, method: &str, params: Value) {
        self.command(json!({ "cmd": "notify", "method": method, "params": params }))
            .await
            .unwrap_or_else(|e| panic!("[{}] notify {method}: {e}", self.name));
    }

    /// `transport.close()`: the event stream closes; the session stays on the server.
    pub async fn close(&self) {
        self.command(json!({ "cmd": "close" }))
            .await
            .unwrap_or_else(|e| panic!("[{}] close: {e}", self.name));
    }

    /// DELETE the session.
    pub async fn terminate(&self) -> Result<(), ClientError> {
        self.command(json!({ "cmd": "terminate" }))
            .await
            .map(|_| ())
    }

    /// The next notification, in arrival order; panics after `timeout`.
    pub async fn next_notification(&self, timeout: Duration) -> Notification {
        let mut rx = self.notifications.lock().await;
        match tokio::time::timeout(timeout, rx.recv()).await {
            Ok(Some(n)) => self.checked(n),
            Ok(None) => panic!("[{}] the MCP client exited", self.name),
            Err(_) => panic!(
                "[{}] no notification within {timeout:?}; recent client events:\n{}",
                self.name,
                self.recent_events(15)
            ),
        }
    }

    /// The next notification if one arrives within `timeout`.
    pub async fn try_next_notification(&self, timeout: Duration) -> Option<Notification> {
        let mut rx = self.notifications.lock().await;
        tokio::time::timeout(timeout, rx.recv())
            .await
            .ok()
            .flatten()
            .map(|n| self.checked(n))
    }

    /// `n`, after checking a channel push against the session's instructions.
    #[track_caller]
    fn checked(&self, n: Notification) -> Notification {
        if let Some(security) = &n.security {
            assert_eq!(
                security,
                mc_model::SECURITY_POINTER,
                "[{}] a push's security meta is not the pointer: {}",
                self.name,
                n.params
            );
        }
        if n.method == super::expect::CHANNEL {
            if let Some(text) = self.instructions.lock().unwrap().as_deref() {
                super::expect::assert_meta_in_instructions(text, &n.wire_params());
            }
        }
        n
    }

    /// Panics if a notification arrives within `duration`.
    pub async fn expect_no_notification(&self, duration: Duration) {
        if let Some(n) = self.try_next_notification(duration).await {
            panic!(
                "[{}] expected no notification for {duration:?}, got {} {}",
                self.name, n.method, n.params
            );
        }
    }

    /// Every notification with `method` received so far (taken or not).
    pub fn notifications_matching(&self, method: &str) -> Vec<Notification> {
        self.history
            .lock()
            .unwrap()
            .iter()
            .filter(|n| n.method == method)
            .cloned()
            .collect()
    }

    /// Every event the client reported so far (`http`, `error`, `closed`, …).
    pub fn events(&self) -> Vec<Value> {
        self.events.lock().unwrap().clone()
    }

    fn recent_events(&self, n: usize) -> String {
        let events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        let lines: Vec<String> = events.iter().map(Value::to_string).collect();
        tail(&lines.join("\n"), n)
    }
}

fn connected(reply: &Value) -> Connected {
    Connected {
        session_id: reply["sessionId"].as_str().unwrap_or_default().to_owned(),
        protocol_version: reply["protocolVersion"].as_str().map(str::to_owned),
        server_capabilities: reply["serverCapabilities"].clone(),
        instructions: reply["instructions"].as_str().map(str::to_owned),
    }
}

impl Drop for McpClient {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- MCP client [{}]: events (last 40) ----\n{}\n---- stderr (last 40 lines) ----\n{}\n----",
                self.name,
                self.recent_events(40),
                tail(&self.stderr.lock().unwrap_or_else(|e| e.into_inner()), 40)
            );
        }
    }
}

/// `scheme://authority` of `url` (`http://127.0.0.1:8080/channel` → `http://127.0.0.1:8080`).
fn base_of(url: &str) -> &str {
    let authority = url.find("://").map_or(0, |i| i + 3);
    match url[authority..].find('/') {
        Some(i) => &url[..authority + i],
        None => url,
    }
}
