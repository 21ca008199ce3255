//! Claude Code's real binary as the client (issue 14, item 1). See
//! `../shared/notes/real-claude-code-client.md` for how it is driven offline.
//!
//! - A pinned `@anthropic-ai/claude-code` is installed once with npm into
//!   `~/.cache/matrix-channel/claude-code-<version>/` (under `flock`: tests run in
//!   parallel, and so may other checkouts), and its Bun-compiled ELF is run directly.
//! - Each session gets its own temporary `HOME` and `CLAUDE_CONFIG_DIR`, a working
//!   directory, and the environment alone that the notes list (`env -i`): nothing of
//!   the developer's own Claude Code is read or written.
//! - It connects exactly as the README says: the README's two `claude` lines
//!   ([`readme_connect_lines`]) are run with the server's URL and token put in, the
//!   first (`claude mcp add …`) as a plain command, the second in a tmux pty with
//!   `--debug-file` added (the harness's only extra flag: it is how a test knows the
//!   channel registered). A test checks that `scripts/up` prints the same lines.
//! - The development-channels dialog is accepted with Enter; the session is ready
//!   when the debug file says `Channel notifications registered`.
//!
//! On a failing test, Drop prints the debug file's tail and the screen.

use super::fake_model::FakeModel;
use super::server::Server;
use super::{repo_root, tail, WAIT};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;

/// The newest Claude Code that installs here (node 20: an EBADENGINE warning).
pub const NEWEST: &str = "2.1.332";
/// An older build (2,048-character instructions, no `server/discover`, `request_id`
/// derived from the tool-use id).
pub const OLDER: &str = "2.1.197";

/// The dummy Console-style API key the fake Messages API accepts.
const API_KEY: &str = "sk-ant-api03-e2e-matrix-channel-0000000000000000000000000000";

/// The URL and token placeholders of the README's connect lines.
pub const README_URL: &str = "http://127.0.0.1:8700/channel";
pub const README_TOKEN: &str = "<token>";

/// How long Claude Code may take from launch to a registered channel (a cold start
/// of the 400 MB binary on a busy machine; about 8 s when warm).
const START: Duration = Duration::from_secs(60);

/// The cache directory of one version.
fn cache_dir(version: &str) -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME is set");
    PathBuf::from(home).join(format!(".cache/matrix-channel/claude-code-{version}"))
}

/// The ELF of `version`, installing it first when missing (idempotent, under `flock`).
pub async fn install(version: &'static str) -> PathBuf {
    static NEWEST_CELL: OnceCell<PathBuf> = OnceCell::const_new();
    static OLDER_CELL: OnceCell<PathBuf> = OnceCell::const_new();
    let cell = match version {
        NEWEST => &NEWEST_CELL,
        OLDER => &OLDER_CELL,
        other => panic!("Claude Code {other} is not pinned (disk is limited)"),
    };
    cell.get_or_init(|| async move {
        tokio::task::spawn_blocking(move || install_blocking(version))
            .await
            .expect("the install task")
    })
    .await
    .clone()
}

fn install_blocking(version: &str) -> PathBuf {
    let dir = cache_dir(version);
    let elf = dir.join("node_modules/@anthropic-ai/claude-code-linux-x64/claude");
    if elf.exists() {
        return elf;
    }
    std::fs::create_dir_all(&dir).expect("create the Claude Code cache dir");
    let lock = dir.with_extension("lock");
    let script = format!(
        "test -x {elf} || npm install --prefix {dir} @anthropic-ai/claude-code@{version} --no-audit --no-fund",
        elf = shell_quote(&elf.to_string_lossy()),
        dir = shell_quote(&dir.to_string_lossy()),
    );
    let out = Command::new("flock")
        .arg(&lock)
        .args(["sh", "-c", &script])
        .output()
        .expect("run flock and npm (are they installed?)");
    assert!(
        out.status.success() && elf.exists(),
        "npm install of @anthropic-ai/claude-code@{version} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    elf
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Splits a command line as a POSIX shell would for the README's lines: words
/// separated by spaces, double-quoted strings taken whole (no escapes, no `$`).
pub fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                in_word = true;
            }
            ' ' if !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    assert!(!quoted, "unbalanced quotes in {line:?}");
    if in_word {
        words.push(word);
    }
    words
}

/// The README's connect lines: every line starting `claude ` in README.md, which must
/// be the same two lines wherever they appear (`claude mcp add …`, then the launch).
pub fn readme_connect_lines() -> [String; 2] {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("read README.md");
    let lines: Vec<&str> = readme
        .lines()
        .filter(|l| l.starts_with("claude "))
        .collect();
    assert!(
        lines.len() >= 2 && lines.len().is_multiple_of(2),
        "README.md has {} `claude` lines, not pairs: {lines:#?}",
        lines.len()
    );
    for pair in lines.chunks(2) {
        assert_eq!(
            pair,
            &lines[..2],
            "every pair of the README's connect lines is the same"
        );
    }
    assert!(lines[0].starts_with("claude mcp add "), "{}", lines[0]);
    [lines[0].to_owned(), lines[1].to_owned()]
}

/// The `claude mcp add` lines of docs/sessions.md, one per project (the `cd DIR &&`
/// before each dropped): what the fleet scenario runs, each in its own session.
pub fn sessions_add_lines() -> Vec<String> {
    let doc = std::fs::read_to_string(repo_root().join("docs/sessions.md"))
        .expect("read docs/sessions.md");
    let lines: Vec<String> = doc
        .lines()
        .filter_map(|l| l.trim().split_once("&& claude mcp add "))
        .map(|(_, rest)| format!("claude mcp add {rest}"))
        .collect();
    assert!(
        lines.len() >= 2,
        "docs/sessions.md shows two projects: {lines:#?}"
    );
    let [readme_add, _] = readme_connect_lines();
    for line in &lines {
        // The README's line with a label on the URL, nothing else changed.
        let label = line
            .split_once("?room=")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(label, _)| label)
            .unwrap_or_else(|| panic!("a quoted URL with `?room=<label>`: {line}"));
        assert!(!label.is_empty(), "{line}");
        let unlabelled = line
            .replace(&format!("?room={label}"), "")
            .replace(&format!("\"{README_URL}\""), README_URL);
        assert_eq!(unlabelled, readme_add, "{line}");
    }
    lines
}

/// The README's lines with the URL and the token put in, as argument vectors
/// (`claude` first).
fn connect_commands(url: &str, token: &str) -> [Vec<String>; 2] {
    let [add, launch] = readme_connect_lines();
    assert!(
        add.contains(README_URL) && add.contains(README_TOKEN),
        "the README's `claude mcp add` line names {README_URL} and {README_TOKEN}: {add}"
    );
    let add = add.replace(README_URL, url).replace(README_TOKEN, token);
    [shell_words(&add), shell_words(&launch)]
}

/// A Claude Code session in a tmux pty, connected to a `matrix-channel` server.
pub struct Claude {
    pub version: &'static str,
    elf: PathBuf,
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    socket: String,
    env: Vec<(String, String)>,
    launch: Vec<String>,
    launches: usize,
    running: bool,
}

impl Claude {
    /// Installs `version`, sets up the isolated config, runs the README's `claude mcp
    /// add` line for `server`'s `/channel` with `identity`'s token, and launches.
    pub async fn start(
        version: &'static str,
        server: &Server,
        identity: &str,
        model: &FakeModel,
    ) -> Claude {
        let mut claude = Claude::prepare(version, server, model).await;
        let [add, _] = connect_commands(&server.url("/channel"), server.token(identity));
        claude.run_add(&add);
        claude.configure();
        claude.launch().await;
        claude
    }

    /// Like [`Claude::start`], with `add` (a `claude mcp add` line of the docs, the
    /// README's URL and token in it) instead of the README's.
    pub async fn start_with(
        version: &'static str,
        server: &Server,
        identity: &str,
        model: &FakeModel,
        add: &str,
    ) -> Claude {
        let mut claude = Claude::prepare(version, server, model).await;
        let add = add
            .replace(README_URL, &server.url("/channel"))
            .replace(README_TOKEN, server.token(identity));
        claude.run_add(&shell_words(&add));
        claude.configure();
        claude.launch().await;
        claude
    }

    /// Like [`Claude::start`], but over stdio: the README's `.mcp.json` entry for the
    /// server `matrix` (`command` and `args`, the config path put in) goes into the
    /// project's MCP servers, as `claude mcp add` would write it, with the binary
    /// under test found on `PATH` as `matrix-channel`; then the README's launch line.
    pub async fn start_stdio(
        version: &'static str,
        server: &Server,
        entry: Value,
        model: &FakeModel,
    ) -> Claude {
        let mut claude = Claude::prepare(version, server, model).await;
        let bin = claude.path.join("bin");
        std::fs::create_dir_all(&bin).expect("create bin/");
        std::os::unix::fs::symlink(super::server::binary(), bin.join("matrix-channel"))
            .expect("link matrix-channel into bin/");
        for (k, v) in claude.env.iter_mut() {
            if k == "PATH" {
                *v = format!("{}:{v}", bin.display());
            }
        }
        let file = claude.config_file();
        let work = claude.workdir().display().to_string();
        let config = json!({ "projects": { work: { "mcpServers": { "matrix": entry } } } });
        std::fs::write(&file, serde_json::to_string_pretty(&config).unwrap())
            .expect("write .claude.json");
        claude.configure();
        claude.launch().await;
        claude
    }

    /// The isolated directories and environment of a session, not launched.
    async fn prepare(version: &'static str, server: &Server, model: &FakeModel) -> Claude {
        let elf = install(version).await;
        let dir = tempfile::Builder::new()
            .prefix("mc-claude-")
            .tempdir()
            .expect("a temp dir");
        let path = std::fs::canonicalize(dir.path()).expect("canonical temp dir");
        for sub in ["home/.claude", "work"] {
            std::fs::create_dir_all(path.join(sub)).expect("create dirs");
        }
        let home = path.join("home");
        let mut env: Vec<(String, String)> = vec![
            ("HOME".into(), home.display().to_string()),
            (
                "CLAUDE_CONFIG_DIR".into(),
                home.join(".claude").display().to_string(),
            ),
            ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
            ("TERM".into(), "xterm-256color".into()),
            ("LANG".into(), "C.UTF-8".into()),
            ("ANTHROPIC_BASE_URL".into(), model.base_url()),
            ("ANTHROPIC_API_KEY".into(), API_KEY.into()),
            ("DISABLE_AUTOUPDATER".into(), "1".into()),
            ("DISABLE_ERROR_REPORTING".into(), "1".into()),
            ("ENABLE_TOOL_SEARCH".into(), "false".into()),
        ];
        if version == NEWEST {
            // 2.1.197 has no GB_DISK_CACHE variable: its telemetry stays on (and fails
            // offline), or it would not read the cached feature flags either.
            for key in [
                "DISABLE_TELEMETRY",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
                "CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF",
            ] {
                env.push((key.into(), "1".into()));
            }
        }
        let [_, launch] = connect_commands(&server.url("/channel"), README_TOKEN);
        Claude {
            version,
            elf,
            dir: Some(dir),
            path,
            socket: "tmux.sock".to_owned(),
            env,
            launch,
            launches: 0,
            running: false,
        }
    }

    /// The session's working directory (the project Claude Code runs in).
    pub fn workdir(&self) -> PathBuf {
        self.path.join("work")
    }

    fn config_file(&self) -> PathBuf {
        self.path.join("home/.claude/.claude.json")
    }

    fn debug_file(&self) -> PathBuf {
        self.path.join(format!("debug-{}.txt", self.launches))
    }

    fn run_add(&self, add: &[String]) {
        assert_eq!(add[0], "claude");
        let out = Command::new(&self.elf)
            .args(&add[1..])
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(self.workdir())
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run claude mcp add");
        assert!(
            out.status.success(),
            "claude {} failed ({}):\n{}\n{}",
            add[1..].join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Merges what an onboarded user's `.claude.json` holds (onboarding done, the
    /// working directory trusted, the API key approved) and the cached feature flags
    /// that enable channels and the permission relay (offline they come only from
    /// this cache) into the file `claude mcp add` wrote.
    fn configure(&self) {
        let file = self.config_file();
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("claude mcp add wrote no {}: {e}", file.display()));
        let mut config: Value = serde_json::from_str(&text).expect(".claude.json is JSON");
        let work = self.workdir().display().to_string();
        assert!(
            config["projects"][&work]["mcpServers"]["matrix"].is_object(),
            "claude mcp add put the server into the project's config: {config}"
        );
        config["hasCompletedOnboarding"] = json!(true);
        config["lastOnboardingVersion"] = json!(self.version);
        config["theme"] = json!("dark");
        config["customApiKeyResponses"] =
            json!({ "approved": [&API_KEY[API_KEY.len() - 20..]], "rejected": [] });
        config["cachedGrowthBookFeatures"] =
            json!({ "tengu_harbor": true, "tengu_harbor_permissions": true });
        let project = &mut config["projects"][&work];
        project["hasTrustDialogAccepted"] = json!(true);
        project["hasCompletedProjectOnboarding"] = json!(true);
        std::fs::write(&file, serde_json::to_string_pretty(&config).unwrap())
            .expect("write .claude.json");
    }

    /// tmux on a socket of its own in the session's directory (removed with it).
    fn tmux(&self) -> Command {
        let mut cmd = Command::new("tmux");
        cmd.arg("-S").arg(self.path.join(&self.socket));
        cmd
    }

    /// Launches the README's second line followed by `extra` (for example
    /// `--resume <session id>`), as [`Claude::launch`] does.
    pub async fn launch_with(&mut self, extra: &[&str]) {
        let plain = self.launch.clone();
        self.launch.extend(extra.iter().map(|a| (*a).to_owned()));
        self.launch().await;
        self.launch = plain;
    }

    /// Launches the README's second line in a new tmux session, accepts the
    /// development-channels dialog and waits until the channel registered.
    pub async fn launch(&mut self) {
        assert!(!self.running, "launch() while Claude Code runs");
        self.launches += 1;
        let debug = self.debug_file();
        let mut argv: Vec<String> = vec![self.elf.display().to_string()];
        argv.extend(self.launch[1..].iter().cloned());
        argv.push("--debug-file".into());
        argv.push(debug.display().to_string());
        let mut script = String::from("cd \"$(dirname \"$0\")/work\" || exit 1\n");
        script.push_str("echo $$ > ../claude.pid\nexec env -i");
        for (k, v) in &self.env {
            script.push_str(&format!(" {k}={}", shell_quote(v)));
        }
        for a in &argv {
            script.push_str(&format!(" {}", shell_quote(a)));
        }
        script.push('\n');
        let run = self.path.join("run.sh");
        std::fs::write(&run, script).expect("write run.sh");
        let status = self
            .tmux()
            .args(["new-session", "-d", "-s", "claude", "-x", "200", "-y", "50"])
            .arg(format!("sh {}", shell_quote(&run.display().to_string())))
            .args([";", "set-option", "-g", "remain-on-exit", "on"])
            .output()
            .expect("run tmux");
        assert!(
            status.status.success(),
            "tmux new-session: {}: {}",
            status.status,
            String::from_utf8_lossy(&status.stderr)
        );
        self.running = true;

        // The dialog cannot be pre-accepted: its first option is "I am using this
        // for local development".
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if screen.contains("local development") {
                break;
            }
            if start.elapsed() > START {
                panic!(
                    "Claude Code {} showed no development-channels dialog within {START:?}",
                    self.version
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        // Drawn is not yet listening: a key sent before the dialog reads its input is
        // lost. Enter (its first option) is sent until the dialog is gone from the
        // screen, again after each second it stays.
        let mut sent: Option<Instant> = None;
        while self.screen().contains("local development") {
            if sent.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
                self.keys(&["Enter"]);
                sent = Some(Instant::now());
            }
            if start.elapsed() > START {
                panic!(
                    "Claude Code {}: the development-channels dialog did not take Enter within {START:?}",
                    self.version
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.wait_debug(
            "the channel registered",
            "MCP server \"matrix\": Channel notifications registered",
            START,
        )
        .await;
    }

    /// Waits until the current debug file contains `needle`.
    pub async fn wait_debug(&self, what: &str, needle: &str, bound: Duration) {
        let start = Instant::now();
        loop {
            if self.debug_log().contains(needle) {
                return;
            }
            if start.elapsed() > bound {
                panic!(
                    "Claude Code {}: {what}: no {needle:?} in the debug file within {bound:?}",
                    self.version
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Sends tmux keys to the pane.
    pub fn keys(&self, keys: &[&str]) {
        let _ = self
            .tmux()
            .args(["send-keys", "-t", "claude"])
            .args(keys)
            .status();
    }

    /// The pane's text now.
    pub fn screen(&self) -> String {
        self.tmux()
            .args(["capture-pane", "-p", "-t", "claude"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// The current launch's debug file.
    pub fn debug_log(&self) -> String {
        std::fs::read_to_string(self.debug_file()).unwrap_or_default()
    }

    fn pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.path.join("claude.pid"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// Ends Claude Code (SIGTERM, then the tmux server) and waits for it to exit.
    pub async fn stop(&mut self) {
        if !self.running {
            return;
        }
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
            let start = Instant::now();
            while Path::new(&format!("/proc/{pid}")).exists() && start.elapsed() < WAIT {
                // A zombie under tmux still has /proc: ask its state.
                let state =
                    std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                if state.split_whitespace().nth(2) == Some("Z") {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        let _ = self.tmux().arg("kill-server").status();
        // kill-server returns before the server is gone: a new-session meanwhile
        // reaches the dying server and fails. Wait until no server answers.
        let start = Instant::now();
        while self
            .tmux()
            .arg("has-session")
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            assert!(
                start.elapsed() < WAIT,
                "the tmux server of Claude Code {} still answers {WAIT:?} after kill-server",
                self.version
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = std::fs::remove_file(self.path.join("claude.pid"));
        self.running = false;
    }
}

impl Drop for Claude {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- Claude Code {} debug file (last 60 lines; {}) ----\n{}\n---- screen ----\n{}\n----",
                self.version,
                self.debug_file().display(),
                tail(&self.debug_log(), 60),
                self.screen()
            );
        }
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        let _ = self.tmux().arg("kill-server").status();
        if std::env::var_os("MC_E2E_KEEP").is_some() || std::thread::panicking() {
            if let Some(dir) = self.dir.take() {
                eprintln!("kept the Claude Code directory {}", dir.keep().display());
            }
        }
    }
}

/// An attribute value as Claude Code escapes it.
fn xml_attr(value: &str) -> String {
    value
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// The `<channel>` tag Claude Code renders for the push `params` (`{content, meta}`)
/// of the server named `matrix` in its config: meta keys in the order the server
/// sent them (serde_json's map is sorted, as is the server's), values escaped, the
/// content raw between newlines.
pub fn channel_tag(params: &Value) -> String {
    let mut tag = String::from("<channel source=\"matrix\"");
    for (k, v) in params["meta"].as_object().expect("meta is an object") {
        let v = v.as_str().expect("meta values are strings");
        tag.push_str(&format!(" {k}=\"{}\"", xml_attr(v)));
    }
    tag.push_str(&format!(
        ">\n{}\n</channel>",
        params["content"].as_str().expect("content is a string")
    ));
    tag
}

/// Every `<channel source="matrix" …>…</channel>` in the text blocks (and tool
/// results) of a request's messages, in order.
pub fn channel_tags(body: &Value) -> Vec<String> {
    let mut texts = Vec::new();
    for message in body["messages"].as_array().into_iter().flatten() {
        match &message["content"] {
            Value::String(s) => texts.push(s.clone()),
            Value::Array(blocks) => {
                for b in blocks {
                    if let Some(t) = b["text"].as_str() {
                        texts.push(t.to_owned());
                    }
                    if b["type"] == "tool_result" {
                        texts.push(super::fake_model::tool_result_text(b));
                    }
                }
            }
            _ => {}
        }
    }
    let mut tags = Vec::new();
    for text in texts {
        let mut rest = text.as_str();
        while let Some(start) = rest.find("<channel source=\"matrix\"") {
            let from = &rest[start..];
            let end = from
                .find("</channel>")
                .map(|e| e + "</channel>".len())
                .unwrap_or(from.len());
            tags.push(from[..end].to_owned());
            rest = &from[end..];
        }
    }
    tags
}
