//! The cost curve (issue 13, item 4): what a push costs as the delivery log grows.
//!
//! - **Seeding**: the state of a delivery log of N entries is built with the model's
//!   own inputs ([`seeded_state`]: the identity joins the bench's room, a session
//!   attaches, the human's N messages arrive, each push is reported `Sent`, the session
//!   detaches), serialized, and written into the stopped server's store with
//!   `Store::save_model` (replace the saved state); the server then starts on it. The
//!   identity name, the bot's user id, the room and the sender are the bench's real
//!   ones, so the log is really that identity's.
//! - **Cost per input** ([`Meter`]): `/health` with the identity's token gives the
//!   engine's counters (`identity.engine.{inputs, handle_us, persist_us}`), and
//!   `/proc/PID/io` the server's `write_bytes` and `wchar`; both are read before and
//!   after a measured phase and the deltas divided by the inputs handled.
//! - **A stuck client** ([`StuckSession`]): an MCP session initialized over plain HTTP
//!   whose GET stream is opened on a socket with a small receive buffer and never read.

use crate::harness::server::Server;
use anyhow::{bail, Context};
use mc_bench::stats::{ratios, summary};
use mc_model::{
    Channel, Effect, EventId, IdentityConfig, IdentityId, Input, Membership, Message,
    MessageContent, MsgType, Outcome, RoomId, SessionId, UserId,
};
use serde_json::{json, Value};
use std::path::PathBuf;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How the log is seeded, for the results file and the README.
pub const SEEDING: &str = "built with the model's own inputs (a session attaches, the human's \
     messages arrive and each push is reported Sent, the session detaches), written into the \
     stopped server's store with Store::save_model, then the server is started on it";

/// The session id the seeding's pushes went to (never a real MCP session).
const SEED_SESSION: &str = "bench-seed-session";

/// The model state of `identity` (the bot `bot`) having joined `room` and pushed
/// `entries` text messages from `sender` to a session that has since detached: a
/// delivery log of `entries` entries, the newest `entries` milliseconds before
/// `now_ms`. JSON, as the server saves it.
pub fn seeded_state(
    identity: &str,
    bot: &str,
    room: &str,
    sender: &str,
    entries: usize,
    now_ms: u64,
) -> anyhow::Result<String> {
    let id = IdentityId(identity.to_owned());
    let mut channel = Channel::new();
    let mut config = IdentityConfig::new(UserId(bot.to_owned()), [UserId(sender.to_owned())]);
    // The seed session is live at once: with the default attach grace its pushes would
    // be held until a tick after the grace, and the seeding reports each push `Sent`
    // as it is made. The server replaces these settings with its own when it starts
    // (`Channel::add_identity` keeps the state).
    config.attach_grace_ms = 0;
    channel
        .add_identity(id.clone(), config)
        .map_err(|e| anyhow::anyhow!("the seeding identity's config: {e}"))?;
    let start = now_ms.saturating_sub(entries as u64 + 1_000);
    let handle = |channel: &mut Channel, now: u64, input: Input| -> anyhow::Result<()> {
        let mut pending = vec![input];
        while let Some(input) = pending.pop() {
            for effect in channel.handle(mc_model::Timestamp(now), input) {
                match effect {
                    Effect::Push { id, .. } => pending.push(Input::Completed {
                        id,
                        outcome: Outcome::Sent,
                    }),
                    Effect::Dropped { reason, .. } => {
                        bail!("seeding: the model dropped an input ({reason:?})")
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    };
    handle(
        &mut channel,
        start,
        Input::Membership {
            identity: id.clone(),
            room: RoomId(room.to_owned()),
            event_id: None,
            user: UserId(bot.to_owned()),
            membership: Membership::Joined,
        },
    )?;
    handle(
        &mut channel,
        start,
        Input::Attach {
            identity: id.clone(),
            session: SessionId(SEED_SESSION.to_owned()),
            label: None,
        },
    )?;
    for i in 0..entries {
        let now = start + i as u64;
        let message = Message {
            room: RoomId(room.to_owned()),
            event_id: EventId(format!("$bench-seed-{entries}-{i}")),
            sender: UserId(sender.to_owned()),
            sender_name: Some("Ann".to_owned()),
            origin_server_ts: mc_model::Timestamp(now),
            content: Some(MessageContent {
                msgtype: MsgType::Text,
                body: format!(
                    "seeded message {i}: can you run the tests for the parser module and tell me what fails?"
                ),
                formatted_body: None,
                relation: None,
                attachment: None,
            }),
            device: mc_model::DeviceTrust::PlaintextRoom,
        };
        handle(
            &mut channel,
            now,
            Input::Message {
                identity: id.clone(),
                message,
            },
        )?;
    }
    handle(
        &mut channel,
        start + entries as u64,
        Input::Detach {
            identity: id.clone(),
            session: SessionId(SEED_SESSION.to_owned()),
        },
    )?;
    let state = channel.identity(&id).context("the seeded identity")?;
    for i in [0, entries.saturating_sub(1)]
        .into_iter()
        .filter(|_| entries > 0)
    {
        let event = EventId(format!("$bench-seed-{entries}-{i}"));
        if state.log_entry(&event).is_none() {
            bail!("seeding: message {i} of {entries} is not in the delivery log");
        }
    }
    if !state.queue().is_empty() {
        bail!("seeding: {} pushes are still queued", state.queue().len());
    }
    Ok(serde_json::to_string(&channel)?)
}

/// The store directory of `server` (the harness writes `store_dir = "store"` next to
/// the config file).
pub fn store_dir(server: &Server) -> PathBuf {
    server
        .config_path()
        .parent()
        .expect("the config file is in a directory")
        .join("store")
}

/// Replaces the saved model state of the stopped `server` with `json`.
pub fn seed(server: &Server, json: &str) -> anyhow::Result<()> {
    let dir = store_dir(server);
    // serve is stopped: the lock is free (it also keeps a second serve out meanwhile).
    let _lock = mc_server::store::StoreLock::acquire(&dir, "bench seeding")?;
    let store = mc_server::store::Store::open(&dir)?;
    store.save_model(json)?;
    Ok(())
}

/// The server's counters at one moment.
#[derive(Clone, Copy, Debug)]
pub struct Meter {
    inputs: u64,
    handle_us: u64,
    persist_us: u64,
    write_bytes: u64,
    wchar: u64,
}

impl Meter {
    /// Reads `/health` (with `token`, so the identity's engine counters are shown) and
    /// `/proc/PID/io` of the serving process.
    pub async fn read(server: &Server, token: &str) -> anyhow::Result<Meter> {
        let health: Value = reqwest::Client::new()
            .get(server.url("/health"))
            .bearer_auth(token)
            .send()
            .await
            .context("GET /health")?
            .json()
            .await
            .context("/health's JSON")?;
        let engine = &health["identity"]["engine"];
        let field = |name: &str| {
            engine[name]
                .as_u64()
                .with_context(|| format!("/health has no identity.engine.{name}: {health}"))
        };
        let pid = server.pid().context("serve is running")?;
        let path = format!("/proc/{pid}/io");
        let io = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let io_field = |name: &str| {
            io.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .with_context(|| format!("no {name} in {path}"))
        };
        Ok(Meter {
            inputs: field("inputs")?,
            handle_us: field("handle_us")?,
            persist_us: field("persist_us")?,
            write_bytes: io_field("write_bytes")?,
            wchar: io_field("wchar")?,
        })
    }

    /// Inputs the engine had handled when read.
    pub fn inputs(&self) -> u64 {
        self.inputs
    }

    /// What happened from `before` to `self`, per input.
    pub fn since(&self, before: &Meter) -> mc_bench::InputCost {
        let inputs = self.inputs.saturating_sub(before.inputs);
        let per = |after: u64, before: u64| after.saturating_sub(before) as f64 / inputs as f64;
        mc_bench::InputCost {
            inputs,
            write_bytes_per_input: per(self.write_bytes, before.write_bytes),
            wchar_per_input: per(self.wchar, before.wchar),
            handle_us_per_input: per(self.handle_us, before.handle_us),
            persist_us_per_input: per(self.persist_us, before.persist_us),
        }
    }
}

/// The engine's warning when a push to a session did not finish in time
/// (`NOTIFY_TIMEOUT` in `impl/src/engine/queues.rs`).
const NOTIFY_TIMEOUT_LOG: &str = "writing to the session took over";

/// How many times the server's log says a push to a session timed out so far.
pub fn notify_timeouts(server: &Server) -> u64 {
    server
        .log_tail(usize::MAX)
        .matches(NOTIFY_TIMEOUT_LOG)
        .count() as u64
}

/// One point of the curve from its samples and cost.
pub fn point(
    log_entries: usize,
    identities: usize,
    channel_ms: &[f64],
    raw_ms: &[f64],
    cost: mc_bench::InputCost,
) -> mc_bench::CurvePoint {
    let channel = summary(channel_ms);
    let raw_sync = summary(raw_ms);
    mc_bench::CurvePoint {
        log_entries: log_entries as u64,
        identities: identities as u64,
        samples: channel_ms.len() as u64,
        ratio: ratios(&channel, &raw_sync),
        channel,
        raw_sync,
        cost,
        by_file: None,
    }
}

/// An MCP session whose GET stream is open and never read.
pub struct StuckSession {
    _stream: tokio::net::TcpStream,
}

/// The receive buffer of the stuck stream's socket (the kernel may round it up).
const STUCK_RCVBUF: u32 = 4096;

impl StuckSession {
    /// Initializes a session on `server`'s `/channel` with `token` (plain HTTP, as the
    /// Streamable HTTP transport defines it), then opens its GET event stream on a
    /// socket with a small receive buffer, sends the request and never reads.
    pub async fn open(server: &Server, token: &str) -> anyhow::Result<StuckSession> {
        let http = reqwest::Client::new();
        let url = server.url("/channel");
        let init = json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "bench-stuck-client", "version": "0"},
            },
        });
        let resp = http
            .post(&url)
            .bearer_auth(token)
            .header("Accept", "application/json, text/event-stream")
            .json(&init)
            .send()
            .await
            .context("the stuck client's initialize")?;
        if !resp.status().is_success() {
            bail!("the stuck client's initialize: {}", resp.status());
        }
        let session = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .context("no Mcp-Session-Id in the initialize answer")?
            .to_owned();
        let body = resp.text().await?;
        let version = body
            .split("\"protocolVersion\":\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or("2025-06-18")
            .to_owned();
        let resp = http
            .post(&url)
            .bearer_auth(token)
            .header("Accept", "application/json, text/event-stream")
            .header("Mcp-Session-Id", &session)
            .header("MCP-Protocol-Version", &version)
            .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .send()
            .await
            .context("the stuck client's initialized")?;
        if !resp.status().is_success() {
            bail!("the stuck client's initialized: {}", resp.status());
        }
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.set_recv_buffer_size(STUCK_RCVBUF)?;
        let addr = server.addr();
        let mut stream = socket.connect(addr).await?;
        let request = format!(
            "GET /channel HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
             Accept: text/event-stream\r\nMcp-Session-Id: {session}\r\n\
             MCP-Protocol-Version: {version}\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        stream.flush().await?;
        // The answer's head only (it says whether the stream was opened); then never
        // another byte.
        let mut head = Vec::new();
        let mut chunk = [0u8; 512];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
            let n =
                tokio::time::timeout(std::time::Duration::from_secs(10), stream.read(&mut chunk))
                    .await
                    .context("the stuck client's GET: no answer within 10 s")??;
            if n == 0 {
                bail!("the stuck client's GET: the server closed the connection");
            }
            head.extend_from_slice(&chunk[..n]);
        }
        let head = String::from_utf8_lossy(&head);
        let status = head.lines().next().unwrap_or_default();
        if !status.contains(" 200") || !head.to_ascii_lowercase().contains("text/event-stream") {
            bail!("the stuck client's GET was not an event stream: {head}");
        }
        Ok(StuckSession { _stream: stream })
    }

    /// Bytes the server sent that wait unread in the stuck socket's receive queue
    /// (`rx_queue` of `/proc/net/tcp`): more than 0 shows that pushes reached the
    /// stream and stayed there.
    pub fn unread_bytes(&self) -> anyhow::Result<u64> {
        let local = self._stream.local_addr()?;
        let port = format!(":{:04X}", local.port());
        let table = std::fs::read_to_string("/proc/net/tcp")?;
        for line in table.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() > 4 && fields[1].ends_with(&port) {
                let rx = fields[4].split(':').nth(1).unwrap_or("0");
                return Ok(u64::from_str_radix(rx, 16)?);
            }
        }
        bail!("the stuck socket ({local}) is not in /proc/net/tcp")
    }
}

/// strace attached to the serving process, recording its write calls by file. The
/// tracer slows every system call: no latency is measured while it is attached.
pub struct Traced {
    child: tokio::process::Child,
    out: tempfile::NamedTempFile,
}

impl Traced {
    /// Attaches to `pid`; `None` when strace is not installed or cannot attach
    /// (ptrace not permitted).
    pub async fn attach(pid: u32) -> Option<Traced> {
        let out = tempfile::NamedTempFile::new().ok()?;
        let child = tokio::process::Command::new("strace")
            .args(["-f", "-qq", "-y", "-s", "0"])
            .args(["-e", "trace=write,pwrite64,writev,pwritev,pwritev2"])
            .arg("-o")
            .arg(out.path())
            .arg("-p")
            .arg(pid.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .ok()?;
        let mut traced = Traced { child, out };
        // Attaching to every thread takes a moment; strace writes nothing until then.
        for _ in 0..50 {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            if let Ok(Some(_)) = traced.child.try_wait() {
                return None;
            }
            if std::fs::metadata(traced.out.path()).is_ok_and(|m| m.len() > 0) {
                return Some(traced);
            }
        }
        // Attached, but the process wrote nothing in 5 s: still usable.
        traced
            .child
            .try_wait()
            .ok()
            .flatten()
            .is_none()
            .then_some(traced)
    }

    /// Detaches (SIGINT: strace lets the process go on) and sums what was written.
    pub async fn detach(mut self) -> anyhow::Result<mc_bench::trace::Written> {
        if let Some(pid) = self.child.id() {
            let _ = tokio::process::Command::new("kill")
                .args(["-INT", &pid.to_string()])
                .status()
                .await;
        }
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), self.child.wait()).await;
        let text = std::fs::read_to_string(self.out.path()).context("reading strace's output")?;
        Ok(mc_bench::trace::parse(&text))
    }
}
