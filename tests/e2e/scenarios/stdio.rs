//! `matrix-channel stdio` (issue 14, item 2): the `.mcp.json` command entry of the
//! README (`matrix-channel --config FILE stdio --identity bot`) attaches to the
//! running `serve` and carries one identity's channel over stdin and stdout.
//!
//! - Through the official SDK's `StdioClientTransport`, running the README's entry as
//!   written (the binary under test and this config put in): initialize declares the
//!   channel, a person's message arrives as its exact push, `send_message` reaches
//!   the room, a relayed prompt's `yes <id>` comes back as the verdict; closing stdin
//!   ends the process (exit 0, session deleted, its token revoked).
//! - A SIGKILLed and restarted `serve`: a request meanwhile gets -32603, the push
//!   sent meanwhile arrives once; a session deleted under the bridge ends it (exit 1).
//! - Raw lines: a line that is not JSON gets -32700, and `server/discover` before
//!   `initialize` gets exactly what the HTTP path answers (-32022, 2026-07-28 not
//!   offered); a stale `stdio (pid N)` token is revoked at start; SIGTERM ends it.
//! - Without a running `serve` (no Synapse needed): exit 1 with the message, nothing
//!   created in the store; an unknown identity, a held store with nothing listening,
//!   and a `listen` on port 0 are clear errors too.

use crate::harness::expect::{
    assert_push, assert_verdict, briefed, message, permission_request, replayed, PERMISSION_REQUEST,
};
use crate::harness::fixture::{Fixture, IDENTITY};
use crate::harness::mcp::McpClient;
use crate::harness::server::{binary, Server};
use crate::harness::{repo_root, tail, QUIET, WAIT};
use serde_json::{json, Value};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

/// The config path in the README's `.mcp.json` entry.
const README_CONFIG: &str = "/path/matrix-channel.toml";

/// The arguments of the README's `.mcp.json` entry (the one line starting
/// `{"mcpServers"`), with this server's config put in.
pub(crate) fn stdio_args(server: &Server) -> Vec<String> {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("read README.md");
    let entries: Vec<&str> = readme
        .lines()
        .filter(|l| l.starts_with(r#"{"mcpServers""#))
        .collect();
    assert_eq!(entries.len(), 1, "one .mcp.json entry in the README");
    let entry: Value = serde_json::from_str(entries[0]).expect("the README's entry is JSON");
    let matrix = &entry["mcpServers"]["matrix"];
    assert_eq!(matrix["command"], "matrix-channel", "{entry}");
    let args: Vec<String> = matrix["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string args").to_owned())
        .collect();
    assert!(args.iter().any(|a| a == README_CONFIG), "{entry}");
    assert_eq!(
        args[args.len() - 2..],
        ["--identity".to_owned(), IDENTITY.to_owned()],
        "{entry}"
    );
    let config = server.config_path().display().to_string();
    args.into_iter()
        .map(|a| {
            if a == README_CONFIG {
                config.clone()
            } else {
                a
            }
        })
        .collect()
}

/// `token list`'s lines after its header.
pub(crate) async fn token_list(server: &Server) -> String {
    let out = server.cli(&["token", "list"], None).await;
    assert!(out.status.success(), "token list: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The value of `key=` in a log line (`session=abc protocol=…`).
fn log_field(line: &str, key: &str) -> Option<String> {
    let start = line.find(&format!("{key}="))? + key.len() + 1;
    Some(
        line[start..]
            .split_whitespace()
            .next()?
            .trim_matches('"')
            .to_owned(),
    )
}

/// A raw GET of the event stream of `session`: its HTTP status.
async fn get_status(server: &Server, session: &str) -> u16 {
    reqwest::Client::new()
        .get(server.url("/channel"))
        .bearer_auth(server.token(IDENTITY))
        .header("accept", "text/event-stream")
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .expect("GET the event stream")
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_stdio_a_session_gets_pushes_tools_and_verdicts_and_closing_stdin_ends_it() {
    let f = Fixture::start(|_| {}).await;
    f.server.pin_listen();
    let client = McpClient::spawn("stdio").await;
    let (pid, connected) = client
        .connect_stdio(
            binary(),
            &stdio_args(&f.server),
            json!({ "RUST_LOG": "info", "NO_COLOR": "1" }),
        )
        .await
        .unwrap_or_else(|e| panic!("connect over stdio: {e}"));

    // What Claude Code needs to register the channel, as over HTTP.
    assert_eq!(connected.protocol_version.as_deref(), Some("2025-11-25"));
    assert_eq!(
        connected.server_capabilities["experimental"],
        json!({ "claude/channel": {}, "claude/channel/permission": {} })
    );
    assert!(
        connected.instructions.is_some(),
        "the server's instructions"
    );
    let initialized = client.wait_stderr("initialized session=", WAIT).await;
    let session = log_field(&initialized, "session").expect("the session in the log");
    client.wait_stderr("the event stream is open", WAIT).await;
    // The server queued the attach before it answered the bridge's GET.
    f.server.engine_caught_up().await;
    let label = format!("stdio (pid {pid})");
    assert!(
        token_list(&f.server).await.contains(&label),
        "the bridge's own token is listed while it runs"
    );

    // A stranger's message never arrives; the person's arrives first, exactly.
    f.stranger.send_text(&f.room, "hello from a stranger").await;
    let hello = f.human.send_text(&f.room, "hello over stdio").await;
    assert_push(
        &client.next_notification(WAIT).await,
        &message("hello over stdio", &f.origin(&hello).await),
    );

    // The channel's tool reaches Matrix.
    let sent = client
        .call_ok(
            "send_message",
            json!({ "room_id": f.room, "text": "hello from stdio" }),
        )
        .await;
    let ids = sent["event_ids"].as_array().expect("event_ids");
    assert_eq!(ids.len(), 1, "{sent}");
    let event = f.human.event(&f.room, ids[0].as_str().unwrap()).await;
    assert_eq!(event["sender"], f.bot.user_id.as_str());
    assert_eq!(event["content"]["body"], "hello from stdio");

    // A permission request is relayed, and the verdict comes back to this session.
    let id = "sdtqa";
    client
        .notify(
            PERMISSION_REQUEST,
            permission_request(id, "Bash", "List files", r#"{"command": "ls"}"#),
        )
        .await;
    f.wait_prompt(id).await;
    f.human.send_text(&f.room, &format!("yes {id}")).await;
    assert_verdict(&client.next_notification(WAIT).await, id, "allow");
    client.expect_no_notification(QUIET).await;

    // Closing stdin ends it: exit 0 before the SDK's SIGTERM (2 s later), the session
    // deleted, the token revoked.
    client.close().await;
    let exit = client
        .wait_event("the child's exit", WAIT, |e| e["event"] == "exit")
        .await;
    assert_eq!(exit["code"], 0, "{exit}");
    assert_eq!(exit["signal"], Value::Null, "{exit}");
    let stderr = client.stderr_lines().join("\n");
    assert!(stderr.contains("stdin closed"), "{stderr}");
    assert!(!stderr.contains("SIGTERM"), "{stderr}");
    assert!(stderr.contains("session deleted"), "{stderr}");
    assert!(
        !token_list(&f.server).await.contains(&label),
        "the token is revoked at exit"
    );
    assert_eq!(
        get_status(&f.server, &session).await,
        404,
        "the session {session} is gone from the server"
    );
}

/// `matrix-channel stdio` spawned directly: raw lines in and out.
struct Raw {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::UnboundedReceiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl Raw {
    fn spawn(server: &Server) -> Raw {
        let mut cmd = server.command();
        cmd.args(["stdio", "--identity", IDENTITY])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn matrix-channel stdio");
        let stdout = child.stdout.take().expect("stdout");
        let stderr_pipe = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = tx.send(line);
            }
        });
        let stderr: Arc<Mutex<String>> = Arc::default();
        {
            let stderr = stderr.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr_pipe).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let mut text = stderr.lock().unwrap();
                    text.push_str(&line);
                    text.push('\n');
                }
            });
        }
        Raw {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    async fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("write to stdio");
        stdin.flush().await.expect("flush");
    }

    /// The next stdout line, which must be one JSON-RPC message.
    async fn next(&mut self) -> Value {
        let line = match tokio::time::timeout(WAIT, self.lines.recv()).await {
            Ok(Some(line)) => line,
            Ok(None) => panic!("stdout closed; stderr:\n{}", tail(&self.stderr(), 30)),
            Err(_) => panic!(
                "no stdout line within {WAIT:?}; stderr:\n{}",
                tail(&self.stderr(), 30)
            ),
        };
        let value: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout carried a line that is not JSON ({e}): {line}"));
        assert_eq!(
            value["jsonrpc"], "2.0",
            "stdout carries only JSON-RPC: {line}"
        );
        value
    }

    async fn wait_stderr(&self, needle: &str) {
        let found = tokio::time::timeout(WAIT, async {
            while !self.stderr().contains(needle) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        assert!(
            found.is_ok(),
            "no {needle:?} on stderr; stderr:\n{}",
            self.stderr()
        );
    }

    async fn wait_exit(&mut self, bound: Duration) -> std::process::ExitStatus {
        tokio::time::timeout(bound, self.child.wait())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "still running after {bound:?}; stderr:\n{}",
                    tail(&self.stderr(), 30)
                )
            })
            .expect("wait")
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- matrix-channel stdio stderr ----\n{}\n----",
                tail(&self.stderr(), 60)
            );
        }
    }
}

/// A raw POST to `/channel` without a session, with `headers`; the status and the
/// body as JSON.
async fn http_post(server: &Server, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(server.url("/channel"))
        .bearer_auth(server.token(IDENTITY))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_owned());
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let resp = req.send().await.expect("POST /channel");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status, value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_stdio_bad_lines_and_server_discover_get_the_http_answers_and_sigterm_ends_it() {
    let f = Fixture::start(|_| {}).await;
    f.server.pin_listen();
    // The token of a bridge that is gone (a pid above the kernel's pid_max).
    let stale = "stdio (pid 4194305)";
    f.server.create_token(IDENTITY, stale).await;
    assert!(token_list(&f.server).await.contains(stale));
    let mut raw = Raw::spawn(&f.server);

    // Not JSON: a parse error with id null, the HTTP path's own answer to those bytes.
    raw.send("this is not json").await;
    let answer = raw.next().await;
    assert_eq!(answer["id"], Value::Null, "{answer}");
    assert_eq!(answer["error"]["code"], -32700, "{answer}");
    let (status, over_http) = http_post(&f.server, &[], "this is not json").await;
    assert_eq!(status, 400);
    assert_eq!(answer, over_http, "the same answer as over HTTP");

    // server/discover before initialize (Claude Code 2.1.332's probe at 2026-07-28):
    // what the HTTP path answers Claude Code, which sends that revision's headers
    // with it (`MCP-Protocol-Version`, and SEP-2243's `Mcp-Method`).
    let discover = json!({"jsonrpc": "2.0", "id": "server-discover-probe-1",
        "method": "server/discover", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}}})
    .to_string();
    raw.send(&discover).await;
    let answer = raw.next().await;
    let (status, over_http) = http_post(
        &f.server,
        &[
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "server/discover"),
        ],
        &discover,
    )
    .await;
    assert_eq!(status, 400, "{over_http}");
    assert_eq!(answer, over_http, "the same answer as over HTTP");
    assert_eq!(answer["id"], "server-discover-probe-1");
    assert_eq!(answer["error"]["code"], -32022, "{answer}");
    let supported = answer["error"]["data"]["supported"]
        .as_array()
        .unwrap_or_else(|| panic!("the supported revisions: {answer}"));
    assert!(supported.contains(&json!("2025-11-25")), "{answer}");
    assert!(!supported.contains(&json!("2026-07-28")), "{answer}");

    // Then initialize, as Claude Code falls back.
    raw.send(
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw-stdio", "version": "0"}}})
        .to_string(),
    )
    .await;
    let init = raw.next().await;
    assert_eq!(init["id"], 0, "{init}");
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    assert_eq!(
        init["result"]["capabilities"]["experimental"]["claude/channel"],
        json!({}),
        "{init}"
    );
    raw.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    raw.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .await;
    let tools = raw.next().await;
    assert_eq!(tools["id"], 1, "{tools}");
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"send_message"), "{names:?}");

    // The stale token is gone, this process's own is there.
    let listed = token_list(&f.server).await;
    assert!(
        !listed.contains(stale),
        "the stale token was revoked:\n{listed}"
    );
    let label = format!("stdio (pid {})", raw.pid());
    assert!(listed.contains(&label), "{listed}");

    // The event stream: a person's message is one line.
    raw.wait_stderr("the event stream is open").await;
    // The server queued the attach before it answered the bridge's GET.
    f.server.engine_caught_up().await;
    let hello = f.human.send_text(&f.room, "hello, raw").await;
    let push = raw.next().await;
    assert_eq!(push["method"], "notifications/claude/channel", "{push}");
    assert_eq!(
        push["params"],
        briefed(message("hello, raw", &f.origin(&hello).await)),
        "{push}"
    );

    // SIGTERM: the same ending as a closed stdin, exit 0.
    let status = Command::new("kill")
        .args(["-s", "TERM", &raw.pid().to_string()])
        .status()
        .await
        .expect("kill");
    assert!(status.success());
    let exit = raw.wait_exit(Duration::from_secs(5)).await;
    assert_eq!(exit.code(), Some(0), "stderr:\n{}", raw.stderr());
    let stderr = raw.stderr();
    assert!(stderr.contains("SIGTERM: ending the session"), "{stderr}");
    assert!(stderr.contains("session deleted"), "{stderr}");
    assert!(
        !token_list(&f.server).await.contains(&label),
        "the token is revoked at exit"
    );
}

/// A config for `stdio` alone: no homeserver is ever asked.
fn lone_config(dir: &std::path::Path, listen: &str) -> std::path::PathBuf {
    let path = dir.join("matrix-channel.toml");
    std::fs::write(
        &path,
        format!(
            "listen = \"{listen}\"\nstore_dir = \"store\"\n\n[identities.bot]\n\
             homeserver = \"http://127.0.0.1:9\"\nuser_id = \"@bot:localhost\"\n\
             allowed_senders = [\"@ada:localhost\"]\n"
        ),
    )
    .expect("write the config");
    path
}

/// `matrix-channel --config CONFIG stdio --identity IDENTITY` with stdin open (it must
/// end by itself): its exit code and stderr.
async fn run_stdio(config: &std::path::Path, identity: &str) -> (Option<i32>, String) {
    let mut child = Command::new(binary())
        .arg("--config")
        .arg(config)
        .args(["stdio", "--identity", identity])
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn matrix-channel stdio");
    let stdin = child.stdin.take();
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("stdio ended by itself")
        .expect("wait");
    drop(stdin);
    assert!(
        out.stdout.is_empty(),
        "nothing on stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A loopback port nothing listens on (bound, then freed).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_running_serve_stdio_exits_1_saying_to_start_it_and_touches_no_store() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let port = free_port();
    let config = lone_config(dir.path(), &format!("127.0.0.1:{port}"));
    let store = dir.path().join("store");

    let (code, stderr) = run_stdio(&config, IDENTITY).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "matrix-channel stdio attaches to a running `matrix-channel serve` (none holds \
             the store at {}): start it first",
            store.display()
        )),
        "{stderr}"
    );
    assert!(!store.exists(), "nothing was created");

    let (code, stderr) = run_stdio(&config, "nobody").await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("no identity \"nobody\""), "{stderr}");

    // A store held (as by a `serve` still starting, or one listening elsewhere) with
    // nothing answering at `listen`: said after a few seconds, no token minted.
    let lock = mc_server::store::StoreLock::acquire(&store, "serve").expect("lock the store");
    let (code, stderr) = run_stdio(&config, IDENTITY).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "holds the store at {} but nothing answers at http://127.0.0.1:{port}",
            store.display()
        )),
        "{stderr}"
    );
    assert!(
        !store.join("matrix-channel.sqlite3").exists(),
        "the token store was not opened"
    );

    let config = lone_config(dir.path(), "127.0.0.1:0");
    let (code, stderr) = run_stdio(&config, IDENTITY).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("port 0"), "{stderr}");
    drop(lock);
}

/// `initialize` and `notifications/initialized` over raw lines; waits for the
/// bridge's event stream and for `server`'s engine to have taken the attach in.
/// Returns the session id the bridge logged.
async fn raw_session(raw: &mut Raw, server: &Server) -> String {
    raw.send(
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw-stdio", "version": "0"}}})
        .to_string(),
    )
    .await;
    let init = raw.next().await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    raw.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    raw.wait_stderr("the event stream is open").await;
    // The server queued the attach before it answered the bridge's GET.
    server.engine_caught_up().await;
    let stderr = raw.stderr();
    let line = stderr
        .lines()
        .find(|l| l.contains("initialized session="))
        .expect("the session in the log");
    log_field(line, "session").expect("a session id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_stdio_a_server_restart_loses_no_push_and_a_deleted_session_ends_the_bridge() {
    let mut f = Fixture::start(|_| {}).await;
    f.server.pin_listen();
    let mut raw = Raw::spawn(&f.server);
    let label = format!("stdio (pid {})", raw.pid());
    let session = raw_session(&mut raw, &f.server).await;
    let first = f.human.send_text(&f.room, "before the restart").await;
    let push = raw.next().await;
    assert_eq!(
        push["params"],
        briefed(message("before the restart", &f.origin(&first).await))
    );

    // SIGKILL: the bridge's stream breaks; a message sent while the server is down is
    // pushed once after it is back (the bridge resumes the durable session).
    f.server.kill9().await;
    // A request while nothing listens gets an error, not silence.
    raw.send(r#"{"jsonrpc":"2.0","id":4,"method":"tools/list"}"#)
        .await;
    let refused = raw.next().await;
    assert_eq!(refused["id"], 4, "{refused}");
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("POST") && m.contains("/channel")),
        "{refused}"
    );
    let during = f.human.send_text(&f.room, "while it was down").await;
    f.server.restart().await;
    raw.wait_stderr("the event stream is open again").await;
    let push = raw.next().await;
    assert_eq!(push["method"], "notifications/claude/channel", "{push}");
    assert_eq!(
        push["params"],
        briefed(replayed(message(
            "while it was down",
            &f.origin(&during).await
        ))),
        "queued while no stream was open, so replayed, and the first push of the new \
         attach: {push}"
    );
    let after = f.human.send_text(&f.room, "after the restart").await;
    let push = raw.next().await;
    assert_eq!(
        push["params"],
        message("after the restart", &f.origin(&after).await),
        "the next push, and no repeat of an earlier one: {push}"
    );
    raw.send(r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"whoami","arguments":{}}}"#)
        .await;
    let whoami = raw.next().await;
    assert_eq!(whoami["id"], 5, "{whoami}");
    assert_eq!(
        whoami["result"]["structuredContent"]["identity"], IDENTITY,
        "a tool call on the same session after the restart: {whoami}"
    );

    // The session deleted under it (here by another client of the identity): the
    // bridge says so and exits 1 rather than go on without a session.
    let status = reqwest::Client::new()
        .delete(f.server.url("/channel"))
        .bearer_auth(f.server.token(IDENTITY))
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .expect("DELETE the session")
        .status();
    assert!(status.is_success(), "DELETE: {status}");
    let exit = raw.wait_exit(WAIT).await;
    assert_eq!(exit.code(), Some(1), "stderr:\n{}", raw.stderr());
    assert!(
        raw.stderr()
            .contains("the server no longer knows this session"),
        "{}",
        raw.stderr()
    );
    assert!(
        !token_list(&f.server).await.contains(&label),
        "the token is revoked on this exit too"
    );
}
