//! The server under test: the real `matrix-channel` binary with a config file in a
//! temporary directory. `login` and `token create` run first, as an operator would;
//! then `serve`, until it prints `matrix-channel: listening on http://ADDR`.
//!
//! The server's stderr (its log) goes to `serve.log` in the directory; when a test
//! fails, the tail is printed. `MC_E2E_KEEP=1` keeps the directory.

use super::homeserver::{homeserver, Account};
use super::{tail, WAIT};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

/// The line `serve` prints on stdout when it is ready.
pub const LISTENING: &str = "matrix-channel: listening on http://";

/// How long `serve` may take to log in, sync once and listen (a debug build).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// One `[identities.NAME]` table.
#[derive(Clone, Debug)]
pub struct Identity {
    pub name: String,
    pub account: Account,
    pub allowed_senders: Vec<String>,
    pub approvers: Option<Vec<String>>,
    pub permission_room: Option<String>,
    pub prompt_ttl_secs: Option<u64>,
    pub settle_ms: Option<u64>,
    pub replay_budget: Option<u64>,
    pub undecryptable_grace_secs: Option<u64>,
    /// `attach_grace_ms`: how long after a session's stream opens its first push
    /// waits (the server's default, 1000, when `None`).
    pub attach_grace_ms: Option<u64>,
    /// `verdict_devices`: `"any"`, `"cross_signed"` or `"encrypted_cross_signed"`.
    pub verdict_devices: Option<&'static str>,
    /// TOML appended at the end of the identity's table (its `[[…policy]]` tables).
    pub extra: Option<String>,
}

impl Identity {
    /// An identity acting as `account`, allowing `allowed_senders`, with defaults
    /// for everything else.
    pub fn new(name: &str, account: &Account, allowed_senders: &[&str]) -> Identity {
        Identity {
            name: name.to_owned(),
            account: account.clone(),
            allowed_senders: allowed_senders.iter().map(|s| (*s).to_owned()).collect(),
            approvers: None,
            permission_room: None,
            prompt_ttl_secs: None,
            settle_ms: None,
            replay_budget: None,
            undecryptable_grace_secs: None,
            attach_grace_ms: None,
            verdict_devices: None,
            extra: None,
        }
    }
}

/// The whole config file.
#[derive(Clone, Debug, Default)]
pub struct ServerConfig {
    pub identities: Vec<Identity>,
    /// `session_idle_secs`: `None` leaves the server's default.
    pub session_idle_secs: Option<u64>,
    /// `max_download_bytes`: `None` leaves the server's default.
    pub max_download_bytes: Option<u64>,
    /// `batch_deadline_ms`: `None` leaves the server's default.
    pub batch_deadline_ms: Option<u64>,
    /// TOML of the `[rate_limits]` tables, appended at the end of the file: `None`
    /// leaves the server's defaults.
    pub rate_limits: Option<String>,
    /// TOML lines of top-level keys, written before the identities (`metrics_token`).
    pub top_level: Option<String>,
}

/// A TOML basic string (a JSON string literal is one, escapes included).
fn toml_str(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

fn toml_list(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|s| toml_str(s)).collect();
    format!("[{}]", items.join(", "))
}

impl ServerConfig {
    /// The config file's text, listening on `listen`.
    fn render(&self, hs_url: &str, listen: &str) -> String {
        let mut out = String::from("# Written by the e2e harness (tests/e2e/harness/server.rs).\n");
        out.push_str(&format!("listen = {}\n", toml_str(listen)));
        out.push_str("store_dir = \"store\"\n");
        if let Some(secs) = self.session_idle_secs {
            out.push_str(&format!("session_idle_secs = {secs}\n"));
        }
        if let Some(bytes) = self.max_download_bytes {
            out.push_str(&format!("max_download_bytes = {bytes}\n"));
        }
        if let Some(ms) = self.batch_deadline_ms {
            out.push_str(&format!("batch_deadline_ms = {ms}\n"));
        }
        if let Some(lines) = &self.top_level {
            out.push_str(lines);
            out.push('\n');
        }
        for id in &self.identities {
            out.push_str(&format!("\n[identities.{}]\n", id.name));
            out.push_str(&format!("homeserver = {}\n", toml_str(hs_url)));
            out.push_str(&format!("user_id = {}\n", toml_str(&id.account.user_id)));
            out.push_str(&format!(
                "allowed_senders = {}\n",
                toml_list(&id.allowed_senders)
            ));
            if let Some(approvers) = &id.approvers {
                out.push_str(&format!("approvers = {}\n", toml_list(approvers)));
            }
            if let Some(room) = &id.permission_room {
                out.push_str(&format!("permission_room = {}\n", toml_str(room)));
            }
            if let Some(v) = id.prompt_ttl_secs {
                out.push_str(&format!("prompt_ttl_secs = {v}\n"));
            }
            if let Some(v) = id.settle_ms {
                out.push_str(&format!("settle_ms = {v}\n"));
            }
            if let Some(v) = id.replay_budget {
                out.push_str(&format!("replay_budget = {v}\n"));
            }
            if let Some(v) = id.undecryptable_grace_secs {
                out.push_str(&format!("undecryptable_grace_secs = {v}\n"));
            }
            if let Some(v) = id.attach_grace_ms {
                out.push_str(&format!("attach_grace_ms = {v}\n"));
            }
            if let Some(v) = id.verdict_devices {
                out.push_str(&format!("verdict_devices = {v:?}\n"));
            }
            if let Some(extra) = &id.extra {
                out.push_str(extra);
            }
        }
        if let Some(rate_limits) = &self.rate_limits {
            out.push('\n');
            out.push_str(rate_limits);
        }
        out
    }
}

/// A running (or killed) `matrix-channel serve`.
pub struct Server {
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    config: ServerConfig,
    hs_url: String,
    child: Option<Child>,
    addr: Option<SocketAddr>,
    tokens: BTreeMap<String, String>,
}

/// The binary under test: `MC_E2E_BINARY` when set (a copy of a build, for a
/// worktree that shares its target directory with another), else the one cargo built
/// for this test.
pub fn binary() -> &'static str {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        std::env::var("MC_E2E_BINARY")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_matrix-channel").to_owned())
    })
}

impl Server {
    /// Writes the config, logs every identity in, creates one token per identity, and
    /// starts `serve` on a free loopback port.
    pub async fn start(config: ServerConfig) -> Server {
        Server::start_on(config, homeserver().await.url.clone()).await
    }

    /// [`Server::start`] with every identity on the homeserver at `hs_url`.
    pub async fn start_on(config: ServerConfig, hs_url: String) -> Server {
        let dir = tempfile::Builder::new()
            .prefix("mc-e2e-")
            .tempdir()
            .expect("a temp dir");
        let path = dir.path().to_owned();
        let mut server = Server {
            dir: Some(dir),
            path,
            config,
            hs_url,
            child: None,
            addr: None,
            tokens: BTreeMap::new(),
        };
        server.write_config("127.0.0.1:0");
        let identities = server.config.identities.clone();
        for id in &identities {
            let out = server
                .cli(
                    &["login", "--identity", &id.name],
                    Some(&id.account.password),
                )
                .await;
            server.check(&out, &format!("login --identity {}", id.name));
        }
        for id in &identities {
            let token = server.create_token(&id.name, "e2e").await;
            server.tokens.insert(id.name.clone(), token);
        }
        server.spawn_serve().await;
        server
    }

    pub fn config_path(&self) -> PathBuf {
        self.path.join("matrix-channel.toml")
    }

    fn log_path(&self) -> PathBuf {
        self.path.join("serve.log")
    }

    fn write_config(&self, listen: &str) {
        let text = self.config.render(&self.hs_url, listen);
        std::fs::write(self.config_path(), text).expect("write the config");
    }

    /// Runs `matrix-channel --config FILE ARGS…`, with `stdin` as its standard input.
    pub async fn cli(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = self.command();
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn matrix-channel");
        let mut input = child.stdin.take().expect("stdin");
        if let Some(text) = stdin {
            input
                .write_all(format!("{text}\n").as_bytes())
                .await
                .expect("write stdin");
        }
        drop(input);
        tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("matrix-channel {args:?} did not finish in 120 s"))
            .expect("wait for matrix-channel")
    }

    /// `matrix-channel --config FILE` in the server's directory, with the developer's
    /// `MATRIX_CHANNEL_*` variables removed; add the arguments.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(binary());
        cmd.arg("--config").arg(self.config_path());
        cmd.current_dir(&self.path);
        // Every key can be overridden by environment: keep the developer's out.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("MATRIX_CHANNEL_") {
                cmd.env_remove(key);
            }
        }
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        // serve.log is read as text.
        cmd.env("NO_COLOR", "1");
        cmd
    }

    fn check(&self, out: &Output, what: &str) {
        if !out.status.success() {
            panic!(
                "matrix-channel {what} failed ({}):\nstdout: {}\nstderr: {}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// `token create --identity NAME --label LABEL`: the token alone on stdout.
    pub async fn create_token(&self, identity: &str, label: &str) -> String {
        let out = self
            .cli(
                &["token", "create", "--identity", identity, "--label", label],
                None,
            )
            .await;
        self.check(&out, &format!("token create --identity {identity}"));
        let token = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(
            !token.is_empty() && !token.contains(char::is_whitespace),
            "token create printed {token:?}, not one token"
        );
        token
    }

    async fn spawn_serve(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open serve.log");
        let mut cmd = self.command();
        cmd.arg("serve")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn matrix-channel serve");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = oneshot::channel();
        let stdout_log = self.path.join("serve.stdout");
        tokio::spawn(async move {
            let mut tx = Some(tx);
            let mut lines = BufReader::new(stdout).lines();
            // Small appends; std::fs keeps tokio's "fs" feature out of the build.
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(stdout_log)
                .ok();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(f) = file.as_mut() {
                    let _ = std::io::Write::write_all(f, format!("{line}\n").as_bytes());
                }
                if let Some(addr) = line.strip_prefix(LISTENING) {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(addr.trim().trim_end_matches('/').to_owned());
                    }
                }
            }
        });
        self.child = Some(child);
        let addr = match tokio::time::timeout(START_TIMEOUT, rx).await {
            Ok(Ok(addr)) => addr,
            Ok(Err(_)) => panic!(
                "matrix-channel serve exited before listening; serve.log:\n{}",
                self.log_tail(60)
            ),
            Err(_) => panic!(
                "matrix-channel serve did not print {LISTENING:?} within {START_TIMEOUT:?}; serve.log:\n{}",
                self.log_tail(60)
            ),
        };
        let addr: SocketAddr = addr
            .parse()
            .unwrap_or_else(|e| panic!("serve printed a bad address {addr:?}: {e}"));
        if let Some(first) = self.addr {
            assert_eq!(
                addr, first,
                "a restarted server listens where it did before"
            );
        }
        self.addr = Some(addr);
    }

    /// The process id of the running `serve` (its resident memory is read from
    /// `/proc/PID/status` by the benchmark; the shutdown scenarios signal it).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// The rest of the first line `serve` printed on stdout that starts with `prefix`
    /// (it prints every address it listens on before [`LISTENING`], which
    /// [`Server::start`] waited for).
    pub fn stdout_line(&self, prefix: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.path.join("serve.stdout")).ok()?;
        text.lines()
            .find_map(|line| line.strip_prefix(prefix))
            .map(str::to_owned)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr.expect("the server has listened")
    }

    /// `http://ADDR{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr())
    }

    /// The bearer token created for `identity` before `serve` started.
    pub fn token(&self, identity: &str) -> &str {
        self.tokens
            .get(identity)
            .unwrap_or_else(|| panic!("no token for identity {identity}"))
    }

    /// SIGKILL: no shutdown code runs.
    pub async fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.start_kill().expect("SIGKILL matrix-channel");
            let _ = child.wait().await;
        }
        let _ = std::fs::OpenOptions::new()
            .append(true)
            .open(self.log_path())
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"\n===== SIGKILL =====\n"));
    }

    /// Sends `serve` the signal `name` (`"TERM"`, `"INT"`) with `kill -s NAME PID`,
    /// marking the log first.
    pub async fn signal(&self, name: &str) {
        let pid = self.pid().expect("serve is running");
        let _ = std::fs::OpenOptions::new()
            .append(true)
            .open(self.log_path())
            .and_then(|mut f| {
                std::io::Write::write_all(&mut f, format!("\n===== SIG{name} =====\n").as_bytes())
            });
        let status = Command::new("kill")
            .args(["-s", name, &pid.to_string()])
            .status()
            .await
            .expect("run kill");
        assert!(status.success(), "kill -s {name} {pid}: {status}");
    }

    /// Waits at most `bound` for `serve` to exit and returns its exit status (the
    /// process is reaped: a later [`Server::restart`] may start it again). Panics,
    /// with the log's tail, when it is still running after `bound`.
    pub async fn wait_exit(&mut self, bound: Duration) -> std::process::ExitStatus {
        let child = self.child.as_mut().expect("serve was started");
        match tokio::time::timeout(bound, child.wait()).await {
            Ok(status) => {
                self.child = None;
                status.expect("wait for serve")
            }
            Err(_) => panic!(
                "matrix-channel serve still runs {bound:?} after being told to stop; serve.log:\n{}",
                self.log_tail(60)
            ),
        }
    }

    /// The server's whole log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Writes the address `serve` took into the config's `listen` (it started on port
    /// 0), as an operator's config names a fixed port: `matrix-channel stdio` reads
    /// where to attach from there.
    pub fn pin_listen(&self) {
        self.write_config(&self.addr().to_string());
    }

    /// Starts `serve` again on the same store and the same address.
    pub async fn restart(&mut self) {
        assert!(
            self.child.is_none(),
            "restart() after kill9() or wait_exit()"
        );
        let listen = self.addr().to_string();
        self.write_config(&listen);
        self.spawn_serve().await;
    }

    /// The last `n` lines of the server's log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        tail(&text, n)
    }

    /// Waits until the server's log contains `text` (at most [`WAIT`]).
    pub async fn wait_log(&self, text: &str) {
        let start = std::time::Instant::now();
        while !self.log_text().contains(text) {
            assert!(
                start.elapsed() < WAIT,
                "serve.log never said {text:?}:\n{}",
                self.log_tail(40)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the engine has handled every input queued before this call
    /// ([`engine_caught_up`] on this server).
    pub async fn engine_caught_up(&self) {
        engine_caught_up(&self.url("")).await;
    }

    /// The store directory (`store_dir` in the config).
    pub fn store_dir(&self) -> PathBuf {
        self.path.join("store")
    }

    /// Waits until the engine's journal (`journal.sqlite3` in the store: every input,
    /// written before the model acts on it) holds an input that `pred` accepts, and
    /// returns it (the input's JSON, as the model serializes `Input`). A server killed
    /// after that restarts with the input handled. The journal is compacted into its
    /// snapshot only every 10,000 inputs or 8 MiB, which no scenario reaches.
    pub async fn wait_journaled(
        &self,
        what: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let path = self.store_dir().join("journal.sqlite3");
        let start = std::time::Instant::now();
        loop {
            if let Some(input) = journal_inputs(&path).into_iter().find(|i| pred(i)) {
                return input;
            }
            assert!(
                start.elapsed() < WAIT,
                "the journal did not take {what} within {WAIT:?}; serve.log:\n{}",
                self.log_tail(40)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// How many inputs in the engine's journal `pred` accepts now (see
    /// [`Server::wait_journaled`]).
    #[allow(dead_code)] // the real conformance target's; e2e shares this harness
    pub fn journaled_count(&self, pred: impl Fn(&serde_json::Value) -> bool) -> usize {
        journal_inputs(&self.store_dir().join("journal.sqlite3"))
            .iter()
            .filter(|i| pred(i))
            .count()
    }

    /// Waits until the journal holds more than `before` inputs that `pred` accepts
    /// (at most [`WAIT`]): the input awaited was taken, and any input sent to the
    /// engine from now on is handled after it.
    #[allow(dead_code)] // the real conformance target's; e2e shares this harness
    pub async fn wait_journaled_more(
        &self,
        what: &str,
        before: usize,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) {
        let start = std::time::Instant::now();
        while self.journaled_count(&pred) <= before {
            assert!(
                start.elapsed() < WAIT,
                "the journal did not take {what} within {WAIT:?}; serve.log:\n{}",
                self.log_tail(40)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What the store's sync position of `identity` covers: the last timeline event
    /// handed to the model in each room (room id to event id), saved with the position
    /// once the engine has handled a sync response's events.
    pub fn handled_last_events(&self, identity: &str) -> BTreeMap<String, String> {
        let db = rusqlite::Connection::open_with_flags(
            self.store_dir().join("matrix-channel.sqlite3"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .expect("open the store read-only");
        let json: Option<String> = db
            .query_row(
                "SELECT json FROM matrix_sessions WHERE identity = ?1",
                [identity],
                |row| row.get(0),
            )
            .ok();
        json.and_then(|j| serde_json::from_str::<serde_json::Value>(&j).ok())
            .and_then(|v| serde_json::from_value(v["last_events"].clone()).ok())
            .unwrap_or_default()
    }
}

/// Every input in the journal at `path`, oldest first (none while it does not exist).
fn journal_inputs(path: &std::path::Path) -> Vec<serde_json::Value> {
    let Ok(db) =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return Vec::new();
    };
    let Ok(mut rows) = db.prepare("SELECT input FROM journal ORDER BY seq") else {
        return Vec::new();
    };
    rows.query_map([], |row| row.get::<_, String>(0))
        .map(|rows| {
            rows.filter_map(Result::ok)
                .filter_map(|text| serde_json::from_str(&text).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until the engine of the server at `base` (`http://ADDR`, directly or through
/// a proxy) has handled every input queued before this call: `GET /health` reads the
/// engine through its queue (the read waits behind every queued input), and its body
/// says `"engine_answers": false` when that read did not complete in time (then it is
/// asked again). The status (200 or 503) is not looked at: a homeserver outage does
/// not stop the engine.
pub async fn engine_caught_up(base: &str) {
    let client = reqwest::Client::new();
    let start = std::time::Instant::now();
    loop {
        let answer = client
            .get(format!("{base}/health"))
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        let body = match answer {
            Ok(resp) => resp.json::<serde_json::Value>().await.ok(),
            Err(_) => None,
        };
        if let Some(body) = &body {
            if body["status"].is_string() && body["engine_answers"] != false {
                return;
            }
        }
        assert!(
            start.elapsed() < WAIT,
            "{base}/health: the engine did not answer within {WAIT:?}; last body {body:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
        if std::thread::panicking() {
            eprintln!(
                "---- matrix-channel serve.log (last 80 lines; {}) ----\n{}\n----",
                self.log_path().display(),
                self.log_tail(80)
            );
        }
        if std::env::var_os("MC_E2E_KEEP").is_some() || std::thread::panicking() {
            if let Some(dir) = self.dir.take() {
                let kept = dir.keep();
                eprintln!("kept the server directory {}", kept.display());
            }
        }
    }
}
