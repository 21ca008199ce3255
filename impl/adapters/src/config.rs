//! The server's configuration: one TOML file, every key overridable by an
//! environment variable, checked as a whole before anything starts.
//!
//! # The file
//! ```toml
//! listen = "127.0.0.1:8700"        # the MCP HTTP listener; default 127.0.0.1:8700
//! store_dir = "state"              # default "state"
//! allowed_hosts = ["localhost", "127.0.0.1", "::1"]
//! session_idle_secs = 0            # default 0 = never
//! max_download_bytes = 26214400    # default 25 MiB
//! batch_deadline_ms = 30000        # default 30 s
//! log = "info"                     # default: info, matrix-sdk at warn
//!
//! [identities.bot]                 # one Matrix account; the name is [a-z0-9_-]{1,32}
//! homeserver = "http://127.0.0.1:8008"
//! user_id = "@bot:localhost"
//! allowed_senders = ["@alice:localhost"]
//! approvers = ["@alice:localhost"]
//! permission_room = "!abc:localhost"
//! prompt_ttl_secs = 900
//! settle_ms = 3000
//! approve_keys = ["👍", "✅"]
//! deny_keys = ["👎", "❌"]
//! replay_budget = 200
//! undecryptable_grace_secs = 30
//! undecryptable_notice = false
//! verdict_devices = "cross_signed"
//! attach_grace_ms = 1000
//! ```
//!
//! Top-level keys:
//! - `listen`: the address the MCP server listens on, an IP address and a port
//!   (`"127.0.0.1:8700"`, `"[::1]:8700"`); port 0 takes any free port. Default
//!   `127.0.0.1:8700`.
//! - `store_dir`: where the Matrix stores (one SQLite directory per identity) and
//!   the channel state live. A relative path is relative to the directory of the
//!   config file, not to the working directory. Default `"state"`.
//! - `allowed_hosts`: the `Host` header values the HTTP server accepts (a guard
//!   against DNS rebinding). Default `["localhost", "127.0.0.1", "::1"]`; must not be
//!   empty. Each is a name or address with an optional `:port` ([`crate::origin`]).
//! - `allowed_origins`: the browser `Origin` header values the HTTP server accepts,
//!   each `scheme://host[:port]`, `scheme://host:*` or `null` (behind a proxy that
//!   serves a web client, its origin). Default: an `Origin` whose host is one of
//!   `allowed_hosts`. A request without `Origin` (every client that is not a
//!   browser) is always served; one with an origin not allowed gets 403.
//! - `session_idle_secs`: an MCP session with no request for this many seconds is
//!   closed; `0` (the default) never closes one.
//! - `max_download_bytes`: the largest attachment `download_attachment` fetches, in
//!   bytes. Default 26,214,400 (25 MiB); must be greater than zero.
//! - `batch_deadline_ms`: how long the server works on one JSON-RPC batch (MCP
//!   2025-03-26 sessions only), in milliseconds from when its first message is handed
//!   over (so the first one always starts). A request still
//!   unanswered then gets an internal error (-32603) saying it may still take effect;
//!   the messages after it are not started (each request among them gets an error
//!   saying so). Default 30,000 (30 s, half the MCP TypeScript SDK's request
//!   timeout); must be greater than zero.
//! - `log`: a `tracing` filter (`RUST_LOG` syntax, such as `"info,matrix_sdk=warn"`).
//!   Default: `info`, with matrix-sdk at `warn` ([`DEFAULT_LOG`]).
//! - `identities`: at least one table `[identities.NAME]`, NAME matching
//!   `[a-z0-9_-]{1,32}`.
//!
//! Keys of an identity:
//! - `homeserver` (required): the homeserver's client-server API base URL, `http` or
//!   `https`.
//! - `user_id` (required): the identity's Matrix user id. One Matrix account is one
//!   identity: two identities may not share a `user_id`.
//! - `allowed_senders` (required): the user ids whose messages reach the identity's
//!   sessions, by exact match ([`mc_model::IdentityConfig::gate`]). May not hold the
//!   identity's own `user_id`.
//! - `approvers`: the user ids who may answer permission prompts; each must be in
//!   `allowed_senders`. Absent: the same as `allowed_senders`. `[]`: the identity
//!   relays no permission requests.
//! - `permission_room`: the room id prompts are posted to. Absent: the room an
//!   allowed sender last wrote in.
//! - `prompt_ttl_secs`: how long a prompt stays answerable, in seconds. Default 900
//!   ([`mc_model::config::DEFAULT_PROMPT_TTL_MS`]); must be greater than zero.
//! - `settle_ms`: how long a verdict by reaction waits to be withdrawn, in
//!   milliseconds. Default 3000 ([`mc_model::config::DEFAULT_SETTLE_MS`]); must be
//!   greater than zero and less than the prompt's lifetime.
//! - `approve_keys`, `deny_keys`: the reaction keys that approve and deny. Default
//!   👍 ✅ and 👎 ❌ ([`ReactionKeys::default`]); compared without variation
//!   selectors and skin tones, non-empty, and disjoint.
//! - `replay_budget`: how many queued events are replayed to a session that
//!   attaches. Default 200 ([`mc_model::config::DEFAULT_REPLAY_BUDGET`]); must be
//!   greater than zero.
//! - `undecryptable_grace_secs`: how long an encrypted event from an allowed sender
//!   that could not be decrypted waits for its room key before the sessions are
//!   told it exists (metadata only), in seconds. Default 30
//!   ([`mc_model::config::DEFAULT_UNDECRYPTABLE_GRACE_MS`]); 0 tells them at once.
//! - `undecryptable_notice`: whether the sender is also told in the room then (a
//!   notice in reply). Default `false`.
//! - `verdict_devices`: which devices an approver's verdict (text or reaction) may
//!   come from ([`VerdictDevices`]): `"any"`; `"cross_signed"` (the default: an
//!   encrypted verdict counts only from a device the approver cross-signed, one in
//!   a plaintext room counts); `"encrypted_cross_signed"` (only encrypted verdicts
//!   from cross-signed devices: a plaintext room's verdicts are refused too, so set
//!   `permission_room` to an encrypted room). A refused verdict gets a notice.
//! - `attach_grace_ms`: how long after a session's stream opens nothing is pushed
//!   to it, in milliseconds; what arrives meanwhile (its replay included) is pushed
//!   when it ends, in order. Claude Code registers its channel handler only after
//!   its stream is open and drops a push that comes before it, silently. Default
//!   1000 ([`mc_model::config::DEFAULT_ATTACH_GRACE_MS`]); 0 pushes at once.
//!
//! Unknown keys are errors.
//!
//! # Environment overrides
//! Every key can be set by an environment variable named `MATRIX_CHANNEL_` and the
//! key path in capitals, with `__` between the parts; the environment wins over the
//! file. Values are read like TOML values: `MATRIX_CHANNEL_LISTEN=127.0.0.1:9000`,
//! `MATRIX_CHANNEL_IDENTITIES__BOT__SETTLE_MS=500`,
//! `MATRIX_CHANNEL_IDENTITIES__BOT__ALLOWED_SENDERS='["@a:x","@b:x"]'`. This is
//! figment's `Env::prefixed("MATRIX_CHANNEL_").split("__")` (the prefix matched
//! without regard to case, the rest lowercased), reading an explicit list of
//! variables so that tests need not touch the process environment.
//! `MATRIX_CHANNEL_CONFIG` and `MATRIX_CHANNEL_PASSWORD` ([`CLI_ENV_VARS`]) are
//! command-line inputs, not keys, and are skipped.
//!
//! # Errors
//! [`Config::load`] reports every problem at once ([`ConfigErrors`]): unreadable
//! file, TOML syntax (with line and column), unknown keys, wrong types, invalid
//! Matrix ids and URLs, and the identity rules of [`mc_model::IdentityConfig`].
//! Each [`ConfigIssue`] names the key path (`identities.bot.approvers[1]`) and where
//! the value came from (the file, or `env MATRIX_CHANNEL_…`). The rules between the
//! keys of an identity (approvers among allowed senders, settle window inside the
//! prompt's lifetime, one identity per `user_id`) are checked for every identity
//! whose keys all parsed.

use figment::providers::{Format, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider, Source};
use mc_model::config::{
    DEFAULT_ATTACH_GRACE_MS, DEFAULT_PROMPT_TTL_MS, DEFAULT_REPLAY_BUDGET, DEFAULT_SETTLE_MS,
    DEFAULT_UNDECRYPTABLE_GRACE_MS,
};
use mc_model::reaction::{normalize_key, ReactionKeys, ReactionKeysError};
use mc_model::{ConfigError, IdentityConfig, RoomId, UserId, VerdictDevices};
use ruma::{OwnedRoomId, OwnedUserId};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use url::Url;

/// The prefix of the environment variables that override keys.
pub const ENV_PREFIX: &str = "MATRIX_CHANNEL_";

/// Environment variables with [`ENV_PREFIX`] that are command-line inputs (the
/// config file's path, an identity's password for `login`), not config keys.
pub const CLI_ENV_VARS: [&str; 2] = ["MATRIX_CHANNEL_CONFIG", "MATRIX_CHANNEL_PASSWORD"];

/// Default `listen`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8700";
/// Default `store_dir`, relative to the config file's directory.
pub const DEFAULT_STORE_DIR: &str = "state";
/// Default `allowed_hosts`: the loopback names.
pub const DEFAULT_ALLOWED_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];
/// Default `max_download_bytes`: 25 MiB.
pub const DEFAULT_MAX_DOWNLOAD_BYTES: u64 = 25 * 1024 * 1024;
/// Default `batch_deadline_ms`: 30 s.
pub const DEFAULT_BATCH_DEADLINE_MS: u64 = 30_000;
/// Default `log` filter.
/// matrix-sdk logs every sync (with its whole filter) at info and some expected
/// 404s at error; the default keeps its warnings only.
pub const DEFAULT_LOG: &str = "info,matrix_sdk=warn,matrix_sdk_base=warn,matrix_sdk_crypto=warn";

const TOP_KEYS: [&str; 9] = [
    "listen",
    "store_dir",
    "allowed_hosts",
    "allowed_origins",
    "session_idle_secs",
    "max_download_bytes",
    "batch_deadline_ms",
    "log",
    "identities",
];

const IDENTITY_KEYS: [&str; 14] = [
    "homeserver",
    "user_id",
    "allowed_senders",
    "approvers",
    "permission_room",
    "prompt_ttl_secs",
    "settle_ms",
    "approve_keys",
    "deny_keys",
    "replay_budget",
    "undecryptable_grace_secs",
    "undecryptable_notice",
    "verdict_devices",
    "attach_grace_ms",
];

/// The whole configuration, checked. See the module docs for each key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The MCP HTTP listener; port 0 means any free port.
    pub listen: SocketAddr,
    /// Absolute: a relative `store_dir` is resolved against the config file's
    /// directory.
    pub store_dir: PathBuf,
    /// Accepted `Host` header values.
    pub allowed_hosts: Vec<String>,
    /// Accepted `Origin` header values; `None`: an origin whose host is an allowed
    /// host.
    pub allowed_origins: Option<Vec<String>>,
    /// Idle MCP sessions are closed after this many seconds; 0 = never.
    pub session_idle_secs: u64,
    /// The `download_attachment` cap, in bytes.
    pub max_download_bytes: u64,
    /// How long one batch is worked on, in milliseconds; greater than zero.
    pub batch_deadline_ms: u64,
    /// The `tracing` filter.
    pub log: String,
    /// By identity name (`[a-z0-9_-]{1,32}`); never empty.
    pub identities: BTreeMap<String, IdentitySettings>,
    /// Things that work but are probably not meant (for `config check` and the
    /// start-up log), in the same shape as errors.
    pub warnings: Vec<ConfigIssue>,
}

/// One identity's settings, checked (including [`IdentityConfig::validate`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentitySettings {
    /// The client-server API base URL, `http` or `https`, as written.
    pub homeserver: String,
    /// The Matrix account the identity acts as; unique among identities.
    pub user_id: OwnedUserId,
    /// Whose messages reach the sessions, in the file's order (may be empty).
    pub allowed_senders: Vec<OwnedUserId>,
    /// `None`: the same as `allowed_senders`; empty: no permission relay.
    pub approvers: Option<Vec<OwnedUserId>>,
    /// Where prompts go; `None`: the room an allowed sender last wrote in.
    pub permission_room: Option<OwnedRoomId>,
    /// How long a prompt stays answerable, in seconds (greater than zero).
    pub prompt_ttl_secs: u64,
    /// The reaction settle window, in milliseconds (greater than zero, less than
    /// the prompt's lifetime).
    pub settle_ms: u64,
    /// From `approve_keys` and `deny_keys`, each defaulting to
    /// [`ReactionKeys::default`]'s set.
    pub reaction_keys: ReactionKeys,
    /// How many queued events a session gets when it attaches (greater than zero).
    pub replay_budget: usize,
    /// How long an undecryptable event waits for its room key, in seconds (0: none).
    pub undecryptable_grace_secs: u64,
    /// Whether the sender of an event still undecryptable then gets a notice.
    pub undecryptable_notice: bool,
    /// How long a session that attaches waits for its first push, in milliseconds
    /// (0: none).
    pub attach_grace_ms: u64,
    /// Which devices a verdict may come from.
    pub verdict_devices: VerdictDevices,
}

impl IdentitySettings {
    /// The core's settings for this identity: `prompt_ttl_secs` × 1000 as
    /// milliseconds (saturating; [`Config::load`] refuses a value that overflows),
    /// the id lists as sets, and the model's defaults for what the file does not set
    /// (`max_prompts`, `queue_cap`, `body_cap_bytes`, `quote_cap_chars`, `log_cap`).
    /// `undecryptable_grace_secs` × 1000 as milliseconds, saturating likewise.
    pub fn model_config(&self) -> IdentityConfig {
        let user = |u: &OwnedUserId| UserId(u.to_string());
        let mut config =
            IdentityConfig::new(user(&self.user_id), self.allowed_senders.iter().map(user));
        config.approvers = self
            .approvers
            .as_ref()
            .map(|approvers| approvers.iter().map(user).collect());
        config.permission_room = self.permission_room.as_ref().map(|r| RoomId(r.to_string()));
        config.prompt_ttl_ms = self.prompt_ttl_secs.saturating_mul(1000);
        config.settle_ms = self.settle_ms;
        config.reaction_keys = self.reaction_keys.clone();
        config.replay_budget = self.replay_budget;
        config.undecryptable_grace_ms = self.undecryptable_grace_secs.saturating_mul(1000);
        config.undecryptable_notice = self.undecryptable_notice;
        config.verdict_devices = self.verdict_devices;
        config.attach_grace_ms = self.attach_grace_ms;
        config
    }
}

/// One problem in the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigIssue {
    /// The key path, such as `identities.bot.approvers[1]`; empty for the file as a
    /// whole.
    pub path: String,
    /// Where the value came from: the config file's path as given, or
    /// `env MATRIX_CHANNEL_…` for an environment variable.
    pub source: String,
    /// What is wrong, in one line.
    pub message: String,
}

impl fmt::Display for ConfigIssue {
    /// `path: message (source)`, or `source: message` for the file as a whole.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}: {}", self.source, self.message)
        } else {
            write!(f, "{}: {} ({})", self.path, self.message, self.source)
        }
    }
}

/// Every problem found while loading, in the order found (file, then keys in
/// order, then the rules between keys). Never empty when returned by
/// [`Config::load`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigIssue>);

impl fmt::Display for ConfigErrors {
    /// One issue per line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, issue) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{issue}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl Config {
    /// Loads the file at `path`, applies the process environment's
    /// `MATRIX_CHANNEL_*` overrides, and checks everything (see the module docs).
    ///
    /// # Errors
    /// [`ConfigErrors`] with every problem found; an environment variable with the
    /// prefix whose name or value is not UTF-8 is one of them.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        let (env, mut issues) = utf8_env(std::env::vars_os());
        let loaded = Self::load_from(path, env);
        if issues.is_empty() {
            return loaded;
        }
        if let Err(ConfigErrors(more)) = loaded {
            issues.extend(more);
        }
        Err(ConfigErrors(issues))
    }

    /// [`Config::load`] with `env` in place of the process environment (only its
    /// `MATRIX_CHANNEL_*` variables are read).
    ///
    /// # Errors
    /// [`ConfigErrors`] with every problem found.
    pub fn load_from(
        path: &Path,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigErrors> {
        let file_source = path.display().to_string();
        let file_issue = |message: String| {
            ConfigErrors(vec![ConfigIssue {
                path: String::new(),
                source: file_source.clone(),
                message,
            }])
        };
        let absolute = std::path::absolute(path)
            .map_err(|e| file_issue(format!("cannot resolve the path: {e}")))?;
        if let Err(e) = std::fs::read(&absolute) {
            return Err(file_issue(format!("cannot read the config file: {e}")));
        }
        let mut figment = Figment::new().merge(Toml::file_exact(&absolute));
        let mut issues = Vec::new();
        for (name, value) in env {
            if !has_prefix(&name) || is_cli_var(&name) {
                continue;
            }
            match EnvVar::new(name, &value) {
                Ok(var) => figment = figment.merge(var),
                Err(issue) => issues.push(issue),
            }
        }
        let data = match Provider::data(&figment) {
            Ok(mut profiles) => profiles.remove(&Profile::Default).unwrap_or_default(),
            Err(e) => {
                issues.extend(e.into_iter().map(|e| {
                    ConfigIssue {
                        path: e.path.join("."),
                        source: e
                            .metadata
                            .as_ref()
                            .map_or_else(|| file_source.clone(), |m| m.name.to_string()),
                        message: one_line(&e.kind.to_string()),
                    }
                }));
                return Err(ConfigErrors(issues));
            }
        };
        let config_dir = absolute.parent().unwrap_or(Path::new("/")).to_path_buf();
        let mut walk = Walk {
            figment: &figment,
            file_source,
            issues,
            warnings: Vec::new(),
        };
        let config = walk.config(&data, &config_dir);
        match config {
            Some(mut config) if walk.issues.is_empty() => {
                config.warnings = walk.warnings;
                Ok(config)
            }
            _ => Err(ConfigErrors(walk.issues)),
        }
    }
}

/// The UTF-8 variables of an environment, and an issue for each variable with the
/// prefix whose name or value is not UTF-8 (other such variables are none of ours).
fn utf8_env(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> (Vec<(String, String)>, Vec<ConfigIssue>) {
    let mut issues = Vec::new();
    let mut env = Vec::new();
    for (name, value) in vars {
        match (name.into_string(), value.into_string()) {
            (Ok(name), Ok(value)) => env.push((name, value)),
            (Ok(name), Err(_)) if has_prefix(&name) => issues.push(ConfigIssue {
                path: String::new(),
                source: format!("env {name}"),
                message: "the value is not UTF-8".to_owned(),
            }),
            (Err(name), _) if has_prefix(&name.to_string_lossy()) => issues.push(ConfigIssue {
                path: String::new(),
                source: format!("env {}", name.to_string_lossy()),
                message: "the variable's name is not UTF-8".to_owned(),
            }),
            _ => {}
        }
    }
    (env, issues)
}

fn has_prefix(name: &str) -> bool {
    name.get(..ENV_PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(ENV_PREFIX))
}

fn is_cli_var(name: &str) -> bool {
    CLI_ENV_VARS.iter().any(|v| v.eq_ignore_ascii_case(name))
}

/// A TOML error on one line: `TOML parse error at line 2, column 5: invalid
/// string, expected ...` (the source excerpt and caret lines dropped).
fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter(|l| {
            !l.trim_start_matches(|c: char| c.is_ascii_digit())
                .trim_start()
                .starts_with('|')
        })
        .collect();
    match lines.split_first() {
        Some((first, [])) => (*first).to_owned(),
        Some((first, rest)) => format!("{first}: {}", rest.join(", ")),
        None => message.to_owned(),
    }
}

/// One `MATRIX_CHANNEL_*` variable as a figment provider: the key path from the
/// name, the value parsed like figment's `Env` does (TOML-like literals, else a
/// string), and the variable's name as the source.
struct EnvVar {
    name: String,
    key: String,
    value: Value,
}

impl EnvVar {
    fn new(name: String, value: &str) -> Result<Self, ConfigIssue> {
        let key = name[ENV_PREFIX.len()..]
            .replace("__", ".")
            .to_ascii_lowercase();
        if key.split('.').any(|part| part.trim().is_empty()) {
            return Err(ConfigIssue {
                path: String::new(),
                source: format!("env {name}"),
                message: format!(
                    "not a config key: expected {ENV_PREFIX}KEY or {ENV_PREFIX}IDENTITIES__NAME__KEY"
                ),
            });
        }
        let value = match value.parse::<Value>() {
            Ok(value) => value,
            Err(never) => match never {},
        };
        Ok(EnvVar { name, key, value })
    }
}

impl Provider for EnvVar {
    fn metadata(&self) -> Metadata {
        Metadata::named(format!("env {}", self.name))
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let dict = figment::util::nest(&self.key, self.value.clone())
            .into_dict()
            .unwrap_or_default();
        Ok(Profile::Default.collect(dict))
    }
}

/// The walk over the merged values: typed reads, collecting every issue.
struct Walk<'a> {
    figment: &'a Figment,
    file_source: String,
    issues: Vec<ConfigIssue>,
    warnings: Vec<ConfigIssue>,
}

impl Walk<'_> {
    /// Where `value` came from.
    fn source(&self, value: &Value) -> String {
        match self.figment.get_metadata(value.tag()) {
            Some(Metadata {
                source: Some(Source::File(_)),
                ..
            })
            | None => self.file_source.clone(),
            Some(metadata) => metadata.name.to_string(),
        }
    }

    fn issue(&mut self, path: &str, value: Option<&Value>, message: impl Into<String>) {
        let source = value.map_or_else(|| self.file_source.clone(), |v| self.source(v));
        self.issues.push(ConfigIssue {
            path: path.to_owned(),
            source,
            message: message.into(),
        });
    }

    fn warn(&mut self, path: &str, value: Option<&Value>, message: impl Into<String>) {
        let source = value.map_or_else(|| self.file_source.clone(), |v| self.source(v));
        self.warnings.push(ConfigIssue {
            path: path.to_owned(),
            source,
            message: message.into(),
        });
    }

    /// `value` as a `T`; a type error is an issue at `path`.
    fn typed<T: DeserializeOwned>(&mut self, path: &str, value: &Value) -> Option<T> {
        match value.deserialize::<T>() {
            Ok(v) => Some(v),
            Err(e) => {
                self.issue(path, Some(value), e.kind.to_string());
                None
            }
        }
    }

    /// Unknown keys of `dict` are issues under `prefix`.
    fn unknown_keys(&mut self, dict: &Dict, known: &[&str], prefix: &str) {
        for (key, value) in dict {
            if !known.contains(&key.as_str()) {
                self.issue(
                    &format!("{prefix}{key}"),
                    Some(value),
                    format!("unknown key `{key}`; known keys: {}", known.join(", ")),
                );
            }
        }
    }

    /// `value` as a table; anything else is an issue at `path`. (Deserializing
    /// would lose the values' tags, hence their sources.)
    fn table<'v>(&mut self, path: &str, value: &'v Value) -> Option<&'v Dict> {
        let table = value.as_dict();
        if table.is_none() {
            let message = format!("expected a table, found {}", value.to_actual());
            self.issue(path, Some(value), message);
        }
        table
    }

    /// A list of strings, each read by `parse`; a non-string entry, or one that
    /// `parse` refuses, is an issue at `path[i]`. Every entry is checked.
    fn list<T>(
        &mut self,
        path: &str,
        value: &Value,
        mut parse: impl FnMut(&str) -> Result<T, String>,
    ) -> Option<Vec<T>> {
        let Some(items) = value.as_array() else {
            let message = format!("expected a list of strings, found {}", value.to_actual());
            self.issue(path, Some(value), message);
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let parsed = match item.as_str() {
                Some(s) => parse(s),
                None => Err(format!("expected a string, found {}", item.to_actual())),
            };
            match parsed {
                Ok(v) => out.push(v),
                Err(message) => {
                    ok = false;
                    self.issue(&format!("{path}[{i}]"), Some(item), message);
                }
            }
        }
        ok.then_some(out)
    }

    /// A list of strings.
    fn strings(&mut self, path: &str, value: &Value) -> Option<Vec<String>> {
        self.list(path, value, |s| Ok(s.to_owned()))
    }

    /// A list of Matrix user ids, each checked by ruma.
    fn user_ids(&mut self, path: &str, value: &Value) -> Option<Vec<OwnedUserId>> {
        self.list(path, value, |s| {
            OwnedUserId::try_from(s).map_err(|e| format!("{s:?} is not a Matrix user id: {e}"))
        })
    }

    fn user_id(&mut self, path: &str, value: &Value) -> Option<OwnedUserId> {
        let s: String = self.typed(path, value)?;
        match OwnedUserId::try_from(s.as_str()) {
            Ok(id) => Some(id),
            Err(e) => {
                self.issue(
                    path,
                    Some(value),
                    format!("{s:?} is not a Matrix user id: {e}"),
                );
                None
            }
        }
    }

    fn config(&mut self, data: &Dict, config_dir: &Path) -> Option<Config> {
        self.unknown_keys(data, &TOP_KEYS, "");
        let listen = match data.get("listen") {
            None => Some(SocketAddr::from(([127, 0, 0, 1], 8700))),
            Some(v) => {
                self.typed::<String>("listen", v)
                    .and_then(|s| match s.parse() {
                        Ok(addr) => Some(addr),
                        Err(e) => {
                            self.issue(
                        "listen",
                        Some(v),
                        format!("{s:?} is not an IP address and port like {DEFAULT_LISTEN}: {e}"),
                    );
                            None
                        }
                    })
            }
        };
        let store_dir = match data.get("store_dir") {
            None => Some(config_dir.join(DEFAULT_STORE_DIR)),
            Some(v) => self.typed::<String>("store_dir", v).and_then(|s| {
                if s.is_empty() {
                    self.issue("store_dir", Some(v), "must not be empty");
                    None
                } else {
                    // `join` keeps an absolute path as it is.
                    Some(config_dir.join(s))
                }
            }),
        };
        let allowed_hosts = match data.get("allowed_hosts") {
            None => Some(DEFAULT_ALLOWED_HOSTS.map(str::to_owned).to_vec()),
            Some(v) => self.strings("allowed_hosts", v).and_then(|hosts| {
                if hosts.is_empty() {
                    self.issue(
                        "allowed_hosts",
                        Some(v),
                        "must not be empty: no request would be accepted",
                    );
                    None
                } else {
                    Some(hosts)
                }
            }),
        };
        let allowed_origins = match data.get("allowed_origins") {
            None => Some(None),
            Some(v) => self.strings("allowed_origins", v).map(Some),
        };
        // Each entry is checked as the server will read it.
        if let (Some(hosts), Some(origins)) = (&allowed_hosts, &allowed_origins) {
            if let Err(e) = crate::origin::Guard::new(hosts, origins.as_deref()) {
                let key = if e.contains("is not a host") {
                    "allowed_hosts"
                } else {
                    "allowed_origins"
                };
                self.issue(key, data.get(key), e);
            }
        }
        let session_idle_secs = match data.get("session_idle_secs") {
            None => Some(0),
            Some(v) => self.typed::<u64>("session_idle_secs", v),
        };
        let max_download_bytes = match data.get("max_download_bytes") {
            None => Some(DEFAULT_MAX_DOWNLOAD_BYTES),
            Some(v) => self.typed::<u64>("max_download_bytes", v).filter(|&n| {
                if n == 0 {
                    self.issue("max_download_bytes", Some(v), "must be greater than zero");
                }
                n > 0
            }),
        };
        let batch_deadline_ms = match data.get("batch_deadline_ms") {
            None => Some(DEFAULT_BATCH_DEADLINE_MS),
            Some(v) => self.typed::<u64>("batch_deadline_ms", v).filter(|&n| {
                if n == 0 {
                    self.issue("batch_deadline_ms", Some(v), "must be greater than zero");
                }
                n > 0
            }),
        };
        let log = match data.get("log") {
            None => Some(DEFAULT_LOG.to_owned()),
            Some(v) => self.typed::<String>("log", v).filter(|filter| {
                let parsed = tracing_subscriber::EnvFilter::builder().parse(filter);
                if let Err(e) = &parsed {
                    self.issue("log", Some(v), format!("not a tracing filter: {e}"));
                }
                parsed.is_ok()
            }),
        };
        let identities = self.identities(data.get("identities"));

        if let (Some(addr), None) = (listen, data.get("allowed_hosts")) {
            if !addr.ip().is_loopback() {
                self.warn(
                    "listen",
                    data.get("listen"),
                    format!(
                        "{addr} is not a loopback address, but allowed_hosts is the loopback \
                         default: requests naming this host are refused; set allowed_hosts"
                    ),
                );
            }
        }
        Some(Config {
            listen: listen?,
            store_dir: store_dir?,
            allowed_hosts: allowed_hosts?,
            allowed_origins: allowed_origins?,
            session_idle_secs: session_idle_secs?,
            max_download_bytes: max_download_bytes?,
            batch_deadline_ms: batch_deadline_ms?,
            log: log?,
            identities: identities?,
            warnings: Vec::new(),
        })
    }

    fn identities(&mut self, value: Option<&Value>) -> Option<BTreeMap<String, IdentitySettings>> {
        let Some(value) = value else {
            self.issue(
                "identities",
                None,
                "no identities: add a table [identities.NAME] for each Matrix account",
            );
            return None;
        };
        let tables = self.table("identities", value)?;
        if tables.is_empty() {
            self.issue(
                "identities",
                Some(value),
                "no identities: add a table [identities.NAME] for each Matrix account",
            );
            return None;
        }
        let mut out = BTreeMap::new();
        let mut ok = true;
        for (name, table) in tables {
            let path = format!("identities.{name}");
            let valid_name = !name.is_empty()
                && name.len() <= 32
                && name
                    .bytes()
                    .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'));
            if !valid_name {
                ok = false;
                self.issue(
                    &path,
                    Some(table),
                    format!("identity name {name:?} must be 1 to 32 of a-z, 0-9, _ and -"),
                );
                continue;
            }
            match self.identity(&path, table) {
                Some(settings) => {
                    out.insert(name.clone(), settings);
                }
                None => ok = false,
            }
        }
        // One Matrix account is one identity (one device, one crypto store).
        let mut first_by_user: BTreeMap<&OwnedUserId, &String> = BTreeMap::new();
        let mut duplicates = Vec::new();
        for (name, settings) in &out {
            match first_by_user.get(&settings.user_id) {
                Some(first) => duplicates.push((name.clone(), (*first).clone())),
                None => {
                    first_by_user.insert(&settings.user_id, name);
                }
            }
        }
        for (name, first) in duplicates {
            let path = format!("identities.{name}.user_id");
            let value = tables.get(&name).and_then(|t| t.find_ref("user_id"));
            self.issue(
                &path,
                value,
                format!(
                    "the same user_id as identities.{first}: one Matrix account is one \
                     identity (two would share a device and break end-to-end encryption)"
                ),
            );
            ok = false;
        }
        ok.then_some(out)
    }

    fn identity(&mut self, path: &str, table: &Value) -> Option<IdentitySettings> {
        let dict = self.table(path, table)?;
        self.unknown_keys(dict, &IDENTITY_KEYS, &format!("{path}."));
        let key = |k: &str| format!("{path}.{k}");
        let required = |walk: &mut Self, k: &str| {
            let v = dict.get(k);
            if v.is_none() {
                walk.issue(&key(k), Some(table), format!("missing key `{k}`"));
            }
            v
        };

        let homeserver = required(self, "homeserver")
            .and_then(|v| self.typed::<String>(&key("homeserver"), v).map(|s| (s, v)))
            .and_then(|(s, v)| match Url::parse(&s) {
                Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => Some(s),
                Ok(url) => {
                    self.issue(
                        &key("homeserver"),
                        Some(v),
                        format!(
                            "{s:?} is a {} URL; expected http or https with a host",
                            url.scheme()
                        ),
                    );
                    None
                }
                Err(e) => {
                    self.issue(
                        &key("homeserver"),
                        Some(v),
                        format!("{s:?} is not a URL: {e}"),
                    );
                    None
                }
            });
        let user_id = required(self, "user_id").and_then(|v| self.user_id(&key("user_id"), v));
        let allowed_senders = required(self, "allowed_senders")
            .and_then(|v| self.user_ids(&key("allowed_senders"), v));
        if allowed_senders.as_ref().is_some_and(Vec::is_empty) {
            self.warn(
                &key("allowed_senders"),
                dict.get("allowed_senders"),
                "empty: no message reaches this identity's sessions",
            );
        }
        let approvers = match dict.get("approvers") {
            None => Some(None),
            Some(v) => self.user_ids(&key("approvers"), v).map(Some),
        };
        let permission_room = match dict.get("permission_room") {
            None => Some(None),
            Some(v) => self
                .typed::<String>(&key("permission_room"), v)
                .and_then(|s| match OwnedRoomId::try_from(s.as_str()) {
                    Ok(id) => Some(Some(id)),
                    Err(e) => {
                        self.issue(
                            &key("permission_room"),
                            Some(v),
                            format!("{s:?} is not a Matrix room id: {e}"),
                        );
                        None
                    }
                }),
        };
        let prompt_ttl_secs = match dict.get("prompt_ttl_secs") {
            None => Some(DEFAULT_PROMPT_TTL_MS / 1000),
            Some(v) => self
                .typed::<u64>(&key("prompt_ttl_secs"), v)
                .filter(|secs| {
                    let fits = secs.checked_mul(1000).is_some();
                    if !fits {
                        self.issue(
                            &key("prompt_ttl_secs"),
                            Some(v),
                            "too large: the lifetime in milliseconds must fit in 64 bits",
                        );
                    }
                    fits
                }),
        };
        let settle_ms = match dict.get("settle_ms") {
            None => Some(DEFAULT_SETTLE_MS),
            Some(v) => self.typed::<u64>(&key("settle_ms"), v),
        };
        let replay_budget = match dict.get("replay_budget") {
            None => Some(DEFAULT_REPLAY_BUDGET),
            Some(v) => self.typed::<usize>(&key("replay_budget"), v),
        };
        let undecryptable_grace_secs = match dict.get("undecryptable_grace_secs") {
            None => Some(DEFAULT_UNDECRYPTABLE_GRACE_MS / 1000),
            Some(v) => self
                .typed::<u64>(&key("undecryptable_grace_secs"), v)
                .filter(|secs| {
                    let fits = secs.checked_mul(1000).is_some();
                    if !fits {
                        self.issue(
                            &key("undecryptable_grace_secs"),
                            Some(v),
                            "too large: the grace period in milliseconds must fit in 64 bits",
                        );
                    }
                    fits
                }),
        };
        let attach_grace_ms = match dict.get("attach_grace_ms") {
            None => Some(DEFAULT_ATTACH_GRACE_MS),
            Some(v) => self.typed::<u64>(&key("attach_grace_ms"), v),
        };
        let undecryptable_notice = match dict.get("undecryptable_notice") {
            None => Some(false),
            Some(v) => self.typed::<bool>(&key("undecryptable_notice"), v),
        };
        let verdict_devices = match dict.get("verdict_devices") {
            None => Some(VerdictDevices::default()),
            Some(v) => self.typed::<VerdictDevices>(&key("verdict_devices"), v),
        };
        if verdict_devices == Some(VerdictDevices::EncryptedCrossSigned)
            && !dict.contains_key("permission_room")
        {
            self.warn(
                &key("verdict_devices"),
                dict.get("verdict_devices"),
                "encrypted_cross_signed without a permission_room: a prompt posted in a \
                 plaintext room can only expire",
            );
        }
        let approve_keys = match dict.get("approve_keys") {
            None => Some(None),
            Some(v) => self.strings(&key("approve_keys"), v).map(Some),
        };
        let deny_keys = match dict.get("deny_keys") {
            None => Some(None),
            Some(v) => self.strings(&key("deny_keys"), v).map(Some),
        };
        let reaction_keys = match (approve_keys, deny_keys) {
            (Some(approve), Some(deny)) => self.reaction_keys(path, dict, approve, deny),
            _ => None,
        };

        let settings = IdentitySettings {
            homeserver: homeserver?,
            user_id: user_id?,
            allowed_senders: allowed_senders?,
            approvers: approvers?,
            permission_room: permission_room?,
            prompt_ttl_secs: prompt_ttl_secs?,
            settle_ms: settle_ms?,
            reaction_keys: reaction_keys?,
            replay_budget: replay_budget?,
            undecryptable_grace_secs: undecryptable_grace_secs?,
            undecryptable_notice: undecryptable_notice?,
            verdict_devices: verdict_devices?,
            attach_grace_ms: attach_grace_ms?,
        };
        self.check_identity(path, dict, &settings)
            .then_some(settings)
    }

    /// The reaction keys; a [`ReactionKeysError`] is an issue at the list (or
    /// entry) it is about.
    fn reaction_keys(
        &mut self,
        path: &str,
        dict: &Dict,
        approve: Option<Vec<String>>,
        deny: Option<Vec<String>>,
    ) -> Option<ReactionKeys> {
        let defaults = ReactionKeys::default();
        let approve_list: Vec<String> =
            approve.unwrap_or_else(|| defaults.approve().map(str::to_owned).collect());
        let deny_list: Vec<String> =
            deny.unwrap_or_else(|| defaults.deny().map(str::to_owned).collect());
        let error = match ReactionKeys::new(&approve_list, &deny_list) {
            Ok(keys) => return Some(keys),
            Err(e) => e,
        };
        let position = |list: &[String], normalised: &str| {
            list.iter().position(|k| normalize_key(k) == normalised)
        };
        let (key, index) = match &error {
            ReactionKeysError::EmptyKey { raw } => match approve_list.iter().position(|k| k == raw)
            {
                Some(i) => ("approve_keys", Some(i)),
                None => ("deny_keys", deny_list.iter().position(|k| k == raw)),
            },
            ReactionKeysError::EmptyApproveSet => ("approve_keys", None),
            ReactionKeysError::EmptyDenySet => ("deny_keys", None),
            // Blame the list the operator wrote (the deny list when both were).
            ReactionKeysError::Overlap { key } if dict.contains_key("deny_keys") => {
                ("deny_keys", position(&deny_list, key))
            }
            ReactionKeysError::Overlap { key } => ("approve_keys", position(&approve_list, key)),
        };
        let value = dict.get(key);
        let at = match index {
            Some(i) if value.is_some() => format!("{path}.{key}[{i}]"),
            _ => format!("{path}.{key}"),
        };
        self.issue(&at, value, error.to_string());
        None
    }

    /// The rules between keys of one identity: [`IdentityConfig::validate`], every
    /// violation and not only the first (the model's rules are the only ones: the
    /// settle window inside the prompt's lifetime is among them).
    fn check_identity(&mut self, path: &str, dict: &Dict, settings: &IdentitySettings) -> bool {
        let before = self.issues.len();
        let mut config = settings.model_config();
        let mut rounds =
            settings.allowed_senders.len() + settings.approvers.as_ref().map_or(0, Vec::len) + 8;
        while let Err(e) = config.validate() {
            rounds -= 1;
            let (at, value, message) = match &e {
                ConfigError::ApproverNotAllowed(user) => {
                    if let Some(approvers) = config.approvers.as_mut() {
                        approvers.remove(user);
                    }
                    let i = settings
                        .approvers
                        .iter()
                        .flatten()
                        .position(|a| a.as_str() == user.as_str());
                    (
                        list_entry(path, "approvers", i),
                        dict.get("approvers"),
                        e.to_string(),
                    )
                }
                ConfigError::SelfAllowed(user) => {
                    // Once: the same mistake would also be reported for approvers.
                    config.allowed_senders.remove(user);
                    if let Some(approvers) = config.approvers.as_mut() {
                        approvers.remove(user);
                    }
                    let i = settings
                        .allowed_senders
                        .iter()
                        .position(|a| a.as_str() == user.as_str());
                    (
                        list_entry(path, "allowed_senders", i),
                        dict.get("allowed_senders"),
                        e.to_string(),
                    )
                }
                ConfigError::Zero(field) => {
                    let key = match *field {
                        "prompt_ttl_ms" => {
                            // Reported once: a zero lifetime is not also a settle
                            // window too long for it.
                            config.prompt_ttl_ms = mc_model::Millis::MAX;
                            "prompt_ttl_secs"
                        }
                        "settle_ms" => {
                            config.settle_ms = 1;
                            "settle_ms"
                        }
                        "replay_budget" => {
                            config.replay_budget = 1;
                            "replay_budget"
                        }
                        // A model default that the file cannot set: cannot happen
                        // unless the model's defaults change; report and stop.
                        _ => {
                            rounds = 0;
                            ""
                        }
                    };
                    let at = if key.is_empty() {
                        path.to_owned()
                    } else {
                        format!("{path}.{key}")
                    };
                    (at, dict.get(key), "must be greater than zero".to_owned())
                }
                ConfigError::SettleNotShorterThanTtl { .. } => {
                    // The last rule `validate` checks: nothing follows it.
                    rounds = 0;
                    (
                        format!("{path}.settle_ms"),
                        dict.get("settle_ms").or(dict.get("prompt_ttl_secs")),
                        format!(
                            "{} ms is not less than prompt_ttl_secs ({} s): a verdict by \
                             reaction could never settle before the prompt expires",
                            settings.settle_ms, settings.prompt_ttl_secs
                        ),
                    )
                }
            };
            self.issues.push(ConfigIssue {
                path: at,
                source: value.map_or_else(|| self.file_source.clone(), |v| self.source(v)),
                message,
            });
            if rounds == 0 {
                break;
            }
        }
        self.issues.len() == before
    }
}

/// `path.key[i]`, or `path.key` when the entry is not found.
fn list_entry(path: &str, key: &str, index: Option<usize>) -> String {
    match index {
        Some(i) => format!("{path}.{key}[{i}]"),
        None => format!("{path}.{key}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const MINIMAL: &str = r#"
[identities.bot]
homeserver = "http://127.0.0.1:8008"
user_id = "@bot:localhost"
allowed_senders = ["@alice:localhost"]
"#;

    const FULL: &str = r#"
listen = "127.0.0.1:0"
store_dir = "/var/lib/matrix-channel"
allowed_hosts = ["localhost"]
session_idle_secs = 3600
max_download_bytes = 1048576
batch_deadline_ms = 2500
log = "info,matrix_sdk=warn"

[identities.bot]
homeserver = "https://matrix.example.org"
user_id = "@bot:example.org"
allowed_senders = ["@alice:example.org", "@bob:example.org"]
approvers = ["@alice:example.org"]
permission_room = "!ZCB3SX-vTJ0vaZqG9V0gVB1stvnbeGnFk0XPn6pPYbc"
prompt_ttl_secs = 600
settle_ms = 1500
approve_keys = ["🚀"]
deny_keys = ["🛑", "❌"]
replay_budget = 50
undecryptable_grace_secs = 5
undecryptable_notice = true
verdict_devices = "any"
attach_grace_ms = 250

[identities.second-bot_2]
homeserver = "http://localhost:8008"
user_id = "@other:example.org"
allowed_senders = []
approvers = []
"#;

    /// Writes `contents` as `matrix-channel.toml` in a fresh directory.
    fn write(contents: &str) -> PathBuf {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "mc-config-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("matrix-channel.toml");
        std::fs::write(&path, contents).unwrap();
        path
    }

    fn no_env() -> Vec<(String, String)> {
        Vec::new()
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn load(contents: &str, env: Vec<(String, String)>) -> Result<Config, ConfigErrors> {
        Config::load_from(&write(contents), env)
    }

    fn issues(contents: &str, env: Vec<(String, String)>) -> Vec<ConfigIssue> {
        match load(contents, env) {
            Ok(config) => panic!("expected errors, got {config:?}"),
            Err(ConfigErrors(issues)) => {
                assert!(!issues.is_empty());
                issues
            }
        }
    }

    /// The one issue at `path`, failing if there is none or several.
    fn issue_at<'a>(issues: &'a [ConfigIssue], path: &str) -> &'a ConfigIssue {
        let found: Vec<_> = issues.iter().filter(|i| i.path == path).collect();
        assert_eq!(found.len(), 1, "issues at {path}: {issues:#?}");
        found[0]
    }

    fn user(s: &str) -> OwnedUserId {
        OwnedUserId::try_from(s).unwrap()
    }

    /// A minimal identity with `line` added to its table.
    fn with_line(line: &str) -> String {
        format!("{MINIMAL}{line}\n")
    }

    #[test]
    fn a_minimal_file_gets_every_default() {
        let path = write(MINIMAL);
        let config = Config::load_from(&path, no_env()).unwrap();
        assert_eq!(config.listen, "127.0.0.1:8700".parse().unwrap());
        assert_eq!(config.store_dir, path.parent().unwrap().join("state"));
        assert!(config.store_dir.is_absolute());
        assert_eq!(config.allowed_hosts, ["localhost", "127.0.0.1", "::1"]);
        assert_eq!(config.session_idle_secs, 0);
        assert_eq!(config.max_download_bytes, 26_214_400);
        assert_eq!(config.batch_deadline_ms, 30_000);
        assert_eq!(config.log, DEFAULT_LOG);
        assert_eq!(config.warnings, []);
        let bot = &config.identities["bot"];
        assert_eq!(
            bot,
            &IdentitySettings {
                homeserver: "http://127.0.0.1:8008".to_owned(),
                user_id: user("@bot:localhost"),
                allowed_senders: vec![user("@alice:localhost")],
                approvers: None,
                permission_room: None,
                prompt_ttl_secs: 900,
                settle_ms: 3000,
                reaction_keys: ReactionKeys::default(),
                replay_budget: 200,
                undecryptable_grace_secs: 30,
                undecryptable_notice: false,
                verdict_devices: VerdictDevices::CrossSigned,
                attach_grace_ms: 1000,
            }
        );
    }

    #[test]
    fn every_key_of_a_full_file_is_read() {
        let config = load(FULL, no_env()).unwrap();
        assert_eq!(config.listen, "127.0.0.1:0".parse().unwrap());
        assert_eq!(config.store_dir, PathBuf::from("/var/lib/matrix-channel"));
        assert_eq!(config.allowed_hosts, ["localhost"]);
        assert_eq!(config.session_idle_secs, 3600);
        assert_eq!(config.max_download_bytes, 1_048_576);
        assert_eq!(config.batch_deadline_ms, 2_500);
        assert_eq!(config.log, "info,matrix_sdk=warn");
        let bot = &config.identities["bot"];
        assert_eq!(bot.homeserver, "https://matrix.example.org");
        assert_eq!(
            bot.allowed_senders,
            [user("@alice:example.org"), user("@bob:example.org")]
        );
        assert_eq!(bot.approvers, Some(vec![user("@alice:example.org")]));
        assert_eq!(
            bot.permission_room.as_ref().map(|r| r.as_str()),
            Some("!ZCB3SX-vTJ0vaZqG9V0gVB1stvnbeGnFk0XPn6pPYbc")
        );
        assert_eq!(bot.prompt_ttl_secs, 600);
        assert_eq!(bot.settle_ms, 1500);
        assert_eq!(
            bot.reaction_keys,
            ReactionKeys::new(["🚀"], ["🛑", "❌"]).unwrap()
        );
        assert_eq!(bot.replay_budget, 50);
        assert_eq!(bot.undecryptable_grace_secs, 5);
        assert!(bot.undecryptable_notice);
        assert_eq!(bot.attach_grace_ms, 250);
        let second = &config.identities["second-bot_2"];
        assert_eq!(second.allowed_senders, Vec::<OwnedUserId>::new());
        assert_eq!(second.approvers, Some(vec![]));
        assert_eq!(
            config.warnings,
            [ConfigIssue {
                path: "identities.second-bot_2.allowed_senders".to_owned(),
                source: write_source(&config),
                message: "empty: no message reaches this identity's sessions".to_owned(),
            }]
        );
    }

    /// The source a file issue names: the path as given to `load_from`.
    fn write_source(config: &Config) -> String {
        config.warnings[0].source.clone()
    }

    #[test]
    fn the_model_config_takes_milliseconds_sets_and_keys_from_the_settings() {
        let config = load(FULL, no_env()).unwrap();
        let model = config.identities["bot"].model_config();
        assert_eq!(model.user_id, UserId::from("@bot:example.org"));
        assert_eq!(
            model.allowed_senders,
            [
                UserId::from("@alice:example.org"),
                UserId::from("@bob:example.org")
            ]
            .into()
        );
        assert_eq!(
            model.approvers,
            Some([UserId::from("@alice:example.org")].into())
        );
        assert_eq!(
            model.permission_room,
            Some(RoomId::from("!ZCB3SX-vTJ0vaZqG9V0gVB1stvnbeGnFk0XPn6pPYbc"))
        );
        assert_eq!(model.prompt_ttl_ms, 600_000);
        assert_eq!(model.settle_ms, 1500);
        assert_eq!(
            model.reaction_keys,
            ReactionKeys::new(["🚀"], ["🛑", "❌"]).unwrap()
        );
        assert_eq!(model.replay_budget, 50);
        assert_eq!(model.undecryptable_grace_ms, 5_000);
        assert!(model.undecryptable_notice);
        assert_eq!(model.verdict_devices, VerdictDevices::Any);
        assert_eq!(model.attach_grace_ms, 250);
        assert_eq!(model.validate(), Ok(()));
        let defaults = IdentityConfig::new(model.user_id.clone(), []);
        assert_eq!(model.max_prompts, defaults.max_prompts);
        assert_eq!(model.queue_cap, defaults.queue_cap);
        let second = config.identities["second-bot_2"].model_config();
        assert!(!second.relays_permissions());
    }

    #[test]
    fn a_relative_store_dir_is_relative_to_the_config_file_not_the_working_directory() {
        let path = write(&format!("store_dir = \"data/store\"\n{MINIMAL}"));
        let config = Config::load_from(&path, no_env()).unwrap();
        assert_eq!(config.store_dir, path.parent().unwrap().join("data/store"));
        assert!(config.store_dir.is_absolute());
    }

    #[test]
    fn a_relative_config_path_gives_an_absolute_store_dir() {
        let path = write(MINIMAL);
        let cwd = std::env::current_dir().unwrap();
        // A path relative to the working directory, however deep it is.
        let up = cwd.components().count();
        let relative: PathBuf = std::iter::repeat_n("..", up)
            .collect::<PathBuf>()
            .join(path.strip_prefix("/").unwrap());
        let config = Config::load_from(&relative, no_env()).unwrap();
        assert!(config.store_dir.is_absolute(), "{:?}", config.store_dir);
        assert!(config.store_dir.ends_with("state"));
    }

    #[test]
    fn a_missing_file_is_an_error_naming_the_path() {
        let path = std::env::temp_dir().join("mc-config-test-no-such-dir/none.toml");
        let errors = Config::load_from(&path, no_env()).unwrap_err();
        assert_eq!(errors.0.len(), 1);
        let issue = &errors.0[0];
        assert_eq!(issue.path, "");
        assert_eq!(issue.source, path.display().to_string());
        assert!(
            issue.message.starts_with("cannot read the config file: "),
            "{issue}"
        );
        assert_eq!(
            errors.to_string(),
            format!("{}: {}", path.display(), issue.message)
        );
    }

    #[test]
    fn invalid_toml_is_an_error_with_line_and_column_on_one_line() {
        let errors = load("listen = \"127.0.0.1:1\"\nlog = = \"x\"\n", no_env()).unwrap_err();
        assert_eq!(errors.0.len(), 1, "{errors}");
        let message = &errors.0[0].message;
        assert!(
            message.starts_with("TOML parse error at line 2, column 7: "),
            "{message}"
        );
        assert!(!errors.to_string().contains('\n'), "{errors}");
    }

    #[test]
    fn flattening_a_toml_error_drops_the_excerpt() {
        assert_eq!(
            one_line("TOML parse error at line 2, column 5\n  |\n2 | b = = 2\n  |     ^\ninvalid string\nexpected `\"`, `'`\n"),
            "TOML parse error at line 2, column 5: invalid string, expected `\"`, `'`"
        );
        assert_eq!(one_line("one line"), "one line");
    }

    #[test]
    fn unknown_keys_are_errors_naming_the_key() {
        let issues = issues(&format!("lisen = \"x\"\n{MINIMAL}settle = 5\n"), no_env());
        assert_eq!(issues.len(), 2, "{issues:#?}");
        assert!(issue_at(&issues, "lisen")
            .message
            .starts_with("unknown key `lisen`; known keys: listen, "));
        assert!(issue_at(&issues, "identities.bot.settle")
            .message
            .starts_with("unknown key `settle`; known keys: homeserver, "));
    }

    #[test]
    fn a_type_error_names_the_key_path_and_the_file() {
        let path = write(&with_line("settle_ms = \"soon\""));
        let errors = Config::load_from(&path, no_env()).unwrap_err();
        let issue = issue_at(&errors.0, "identities.bot.settle_ms");
        assert_eq!(issue.source, path.display().to_string());
        assert_eq!(
            issue.message,
            "invalid type: found string \"soon\", expected u64"
        );
        assert_eq!(
            errors.to_string(),
            format!(
                "identities.bot.settle_ms: invalid type: found string \"soon\", expected u64 ({})",
                path.display()
            )
        );
    }

    #[test]
    fn negative_and_wrongly_typed_numbers_are_errors() {
        let issues = issues(
            &format!(
                "session_idle_secs = -1\nmax_download_bytes = 1.5\n{MINIMAL}replay_budget = true\n"
            ),
            no_env(),
        );
        assert_eq!(issues.len(), 3, "{issues:#?}");
        issue_at(&issues, "session_idle_secs");
        issue_at(&issues, "max_download_bytes");
        issue_at(&issues, "identities.bot.replay_budget");
    }

    #[test]
    fn an_env_var_overrides_a_nested_key() {
        let config = load(
            &with_line("settle_ms = 2000"),
            env(&[("MATRIX_CHANNEL_IDENTITIES__BOT__SETTLE_MS", "500")]),
        )
        .unwrap();
        assert_eq!(config.identities["bot"].settle_ms, 500);
    }

    #[test]
    fn an_env_var_overrides_a_list_and_a_top_level_key() {
        let config = load(
            MINIMAL,
            env(&[
                (
                    "MATRIX_CHANNEL_IDENTITIES__BOT__ALLOWED_SENDERS",
                    r#"["@a:x","@b:x"]"#,
                ),
                ("MATRIX_CHANNEL_LISTEN", "127.0.0.1:9000"),
                ("MATRIX_CHANNEL_ALLOWED_HOSTS", r#"["example.org"]"#),
            ]),
        )
        .unwrap();
        assert_eq!(
            config.identities["bot"].allowed_senders,
            [user("@a:x"), user("@b:x")]
        );
        assert_eq!(config.listen, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(config.allowed_hosts, ["example.org"]);
    }

    #[test]
    fn env_vars_can_make_a_whole_identity() {
        let config = load(
            MINIMAL,
            env(&[
                (
                    "MATRIX_CHANNEL_IDENTITIES__WORK__HOMESERVER",
                    "https://m.example.org",
                ),
                (
                    "MATRIX_CHANNEL_IDENTITIES__WORK__USER_ID",
                    "@work:example.org",
                ),
                (
                    "matrix_channel_identities__work__allowed_senders",
                    r#"["@me:example.org"]"#,
                ),
            ]),
        )
        .unwrap();
        assert_eq!(config.identities["work"].user_id, user("@work:example.org"));
        assert_eq!(config.identities.len(), 2);
    }

    #[test]
    fn an_issue_from_an_env_var_names_the_variable() {
        let issues = issues(
            MINIMAL,
            env(&[
                (
                    "MATRIX_CHANNEL_IDENTITIES__BOT__APPROVERS",
                    r#"["@alice:localhost","bob"]"#,
                ),
                ("MATRIX_CHANNEL_IDENTITIES__BOT__SETTLE_MS", "later"),
            ]),
        );
        assert_eq!(issues.len(), 2, "{issues:#?}");
        assert_eq!(
            issue_at(&issues, "identities.bot.approvers[1]").source,
            "env MATRIX_CHANNEL_IDENTITIES__BOT__APPROVERS"
        );
        assert_eq!(
            issue_at(&issues, "identities.bot.settle_ms").to_string(),
            "identities.bot.settle_ms: invalid type: found string \"later\", expected u64 \
             (env MATRIX_CHANNEL_IDENTITIES__BOT__SETTLE_MS)"
        );
    }

    #[test]
    fn cli_inputs_and_other_variables_are_not_keys() {
        let config = load(
            MINIMAL,
            env(&[
                ("MATRIX_CHANNEL_CONFIG", "/etc/matrix-channel.toml"),
                ("MATRIX_CHANNEL_PASSWORD", "hunter2"),
                ("matrix_channel_password", "hunter2"),
                ("PATH", "/usr/bin"),
                ("MATRIX_CHANNELS", "x"),
            ]),
        );
        assert!(config.is_ok(), "{config:?}");
    }

    #[test]
    fn an_unknown_env_key_is_an_error_naming_the_variable() {
        let issues = issues(MINIMAL, env(&[("MATRIX_CHANNEL_LISTEN_ADDR", "x")]));
        let issue = issue_at(&issues, "listen_addr");
        assert_eq!(issue.source, "env MATRIX_CHANNEL_LISTEN_ADDR");
        assert!(issue.message.starts_with("unknown key `listen_addr`"));
        let issues = issues_of(MINIMAL, &[("MATRIX_CHANNEL_", "x")]);
        assert_eq!(issues[0].path, "");
        assert_eq!(issues[0].source, "env MATRIX_CHANNEL_");
        assert!(
            issues[0].message.starts_with("not a config key"),
            "{issues:?}"
        );
        let issues = issues_of(MINIMAL, &[("MATRIX_CHANNEL_IDENTITIES____X", "1")]);
        assert!(
            issues[0].message.starts_with("not a config key"),
            "{issues:?}"
        );
    }

    fn issues_of(contents: &str, pairs: &[(&str, &str)]) -> Vec<ConfigIssue> {
        issues(contents, env(pairs))
    }

    #[test]
    fn no_identities_is_an_error() {
        let issues = issues("listen = \"127.0.0.1:1\"\n", no_env());
        assert_eq!(issues.len(), 1);
        assert_eq!(
            issue_at(&issues, "identities").message,
            "no identities: add a table [identities.NAME] for each Matrix account"
        );
        let issues = issues_of("[identities]\n", &[]);
        issue_at(&issues, "identities");
        let issues = issues_of("identities = 5\n", &[]);
        assert_eq!(
            issue_at(&issues, "identities").message,
            "expected a table, found signed int `5`"
        );
    }

    #[test]
    fn identity_names_are_lowercase_letters_digits_dash_and_underscore() {
        let table = |name: &str| {
            format!(
                "[identities.{name}]\nhomeserver = \"http://h\"\nuser_id = \"@u{}:h\"\nallowed_senders = []\n",
                name.len()
            )
        };
        let long = "a".repeat(33);
        let text = [
            table("Bot"),
            table("\"a.b\""),
            table(&long),
            table("\"\""),
            table(&"b".repeat(32)),
        ]
        .concat();
        let issues = issues(&text, no_env());
        assert_eq!(issues.len(), 4, "{issues:#?}");
        assert!(issue_at(&issues, "identities.Bot")
            .message
            .contains("must be 1 to 32 of a-z, 0-9, _ and -"));
        issue_at(&issues, "identities.a.b");
        issue_at(&issues, &format!("identities.{long}"));
        issue_at(&issues, "identities.");
    }

    #[test]
    fn required_identity_keys_are_named_when_missing() {
        let issues = issues("[identities.bot]\n", no_env());
        assert_eq!(issues.len(), 3, "{issues:#?}");
        for key in ["homeserver", "user_id", "allowed_senders"] {
            assert_eq!(
                issue_at(&issues, &format!("identities.bot.{key}")).message,
                format!("missing key `{key}`")
            );
        }
    }

    #[test]
    fn a_homeserver_must_be_an_http_or_https_url_with_a_host() {
        for (homeserver, expected) in [
            (
                "ftp://example.org",
                "\"ftp://example.org\" is a ftp URL; expected http or https with a host",
            ),
            (
                "example.org",
                "\"example.org\" is not a URL: relative URL without a base",
            ),
            (
                "unix:/run/socket",
                "\"unix:/run/socket\" is a unix URL; expected http or https with a host",
            ),
        ] {
            let text = MINIMAL.replace("http://127.0.0.1:8008", homeserver);
            let issues = issues(&text, no_env());
            assert_eq!(
                issue_at(&issues, "identities.bot.homeserver").message,
                expected
            );
        }
        assert!(load(
            &MINIMAL.replace("http://127.0.0.1:8008", "https://[::1]:8448/"),
            no_env()
        )
        .is_ok());
    }

    #[test]
    fn matrix_ids_that_ruma_refuses_are_named_by_index() {
        let text = r##"
[identities.bot]
homeserver = "http://h"
user_id = "bot"
allowed_senders = ["@alice:localhost", "alice", 7]
approvers = ["@alice:localhost", "@alice"]
permission_room = "#room:localhost"
"##;
        let issues = issues(text, no_env());
        assert_eq!(issues.len(), 5, "{issues:#?}");
        assert!(issue_at(&issues, "identities.bot.user_id")
            .message
            .starts_with("\"bot\" is not a Matrix user id: "));
        assert_eq!(
            issue_at(&issues, "identities.bot.allowed_senders[2]").message,
            "expected a string, found signed int `7`"
        );
        assert!(issue_at(&issues, "identities.bot.allowed_senders[1]")
            .message
            .starts_with("\"alice\" is not a Matrix user id: "));
        assert!(issue_at(&issues, "identities.bot.approvers[1]")
            .message
            .starts_with("\"@alice\" is not a Matrix user id: "));
        assert!(issue_at(&issues, "identities.bot.permission_room")
            .message
            .starts_with("\"#room:localhost\" is not a Matrix room id: "));
        assert!(issues.iter().all(|i| i.path.starts_with("identities.bot.")));
    }

    #[test]
    fn an_approver_who_is_not_an_allowed_sender_is_named_by_index() {
        let issues = issues(
            &with_line(
                r#"approvers = ["@alice:localhost", "@mallory:localhost", "@eve:localhost"]"#,
            ),
            no_env(),
        );
        assert_eq!(issues.len(), 2, "{issues:#?}");
        assert_eq!(
            issue_at(&issues, "identities.bot.approvers[1]").message,
            "approvers: @mallory:localhost is not in allowed_senders (approvers must be a subset)"
        );
        issue_at(&issues, "identities.bot.approvers[2]");
    }

    #[test]
    fn the_identity_itself_among_allowed_senders_is_an_error_once() {
        let text = MINIMAL.replace(
            r#"["@alice:localhost"]"#,
            r#"["@alice:localhost", "@bot:localhost"]"#,
        ) + "approvers = [\"@bot:localhost\"]\n";
        let issues = issues(&text, no_env());
        assert_eq!(issues.len(), 1, "{issues:#?}");
        assert_eq!(
            issue_at(&issues, "identities.bot.allowed_senders[1]").message,
            "allowed_senders: @bot:localhost is the identity's own user id"
        );
    }

    #[test]
    fn zero_durations_and_budgets_are_errors() {
        let issues = issues(
            &with_line("prompt_ttl_secs = 0\nsettle_ms = 0\nreplay_budget = 0"),
            no_env(),
        );
        assert_eq!(issues.len(), 3, "{issues:#?}");
        for key in ["prompt_ttl_secs", "settle_ms", "replay_budget"] {
            assert_eq!(
                issue_at(&issues, &format!("identities.bot.{key}")).message,
                "must be greater than zero"
            );
        }
    }

    #[test]
    fn a_zero_prompt_lifetime_is_one_error_not_also_a_settle_window_too_long() {
        let issues = issues(&with_line("prompt_ttl_secs = 0"), no_env());
        assert_eq!(issues.len(), 1, "{issues:#?}");
        assert_eq!(
            issue_at(&issues, "identities.bot.prompt_ttl_secs").message,
            "must be greater than zero"
        );
    }

    #[test]
    fn a_settle_window_as_long_as_the_prompt_lifetime_is_an_error() {
        let issues = issues(
            &with_line("prompt_ttl_secs = 2\nsettle_ms = 2000"),
            no_env(),
        );
        assert_eq!(
            issue_at(&issues, "identities.bot.settle_ms").message,
            "2000 ms is not less than prompt_ttl_secs (2 s): a verdict by reaction could never settle before the prompt expires"
        );
        assert!(load(
            &with_line("prompt_ttl_secs = 2\nsettle_ms = 1999"),
            no_env()
        )
        .is_ok());
    }

    #[test]
    fn a_prompt_lifetime_that_overflows_milliseconds_is_an_error() {
        let issues = issues(
            &with_line(&format!("prompt_ttl_secs = {}", i64::MAX)),
            no_env(),
        );
        assert_eq!(
            issue_at(&issues, "identities.bot.prompt_ttl_secs").message,
            "too large: the lifetime in milliseconds must fit in 64 bits"
        );
    }

    #[test]
    fn an_undecryptable_grace_period_that_overflows_milliseconds_is_an_error() {
        let issues = issues(
            &with_line(&format!("undecryptable_grace_secs = {}", i64::MAX)),
            no_env(),
        );
        assert_eq!(
            issue_at(&issues, "identities.bot.undecryptable_grace_secs").message,
            "too large: the grace period in milliseconds must fit in 64 bits"
        );
        let fits = u64::MAX / 1000;
        let config = load(
            &with_line(&format!("undecryptable_grace_secs = {fits}")),
            no_env(),
        );
        assert!(config.is_ok(), "{config:?}");
    }

    #[test]
    fn verdict_devices_takes_the_three_names_and_refuses_others() {
        for (name, expected) in [
            ("any", VerdictDevices::Any),
            ("cross_signed", VerdictDevices::CrossSigned),
            (
                "encrypted_cross_signed",
                VerdictDevices::EncryptedCrossSigned,
            ),
        ] {
            let line = format!("permission_room = \"!r:localhost\"\nverdict_devices = \"{name}\"");
            let config = load(&with_line(&line), no_env()).unwrap();
            assert_eq!(config.identities["bot"].verdict_devices, expected, "{name}");
            assert_eq!(
                config.identities["bot"].model_config().verdict_devices,
                expected
            );
            assert_eq!(config.warnings, [], "{name}");
        }
        let issues = issues(&with_line("verdict_devices = \"verified\""), no_env());
        let message = &issue_at(&issues, "identities.bot.verdict_devices").message;
        assert!(message.contains("encrypted_cross_signed"), "{message}");
    }

    #[test]
    fn encrypted_cross_signed_without_a_permission_room_is_a_warning() {
        let config = load(
            &with_line("verdict_devices = \"encrypted_cross_signed\""),
            no_env(),
        )
        .unwrap();
        assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
        assert_eq!(config.warnings[0].path, "identities.bot.verdict_devices");
        assert!(config.warnings[0].message.contains("can only expire"));
    }

    #[test]
    fn an_undecryptable_notice_must_be_a_boolean() {
        let issues = issues(&with_line("undecryptable_notice = \"yes\""), no_env());
        assert!(issue_at(&issues, "identities.bot.undecryptable_notice")
            .message
            .contains("bool"));
    }

    #[test]
    fn reaction_key_errors_name_the_list_and_entry() {
        let cases = [
            (
                "approve_keys = [\"👍\", \"\\uFE0F\"]",
                "identities.bot.approve_keys[1]",
                "is empty once variation selectors",
            ),
            (
                "deny_keys = [\"❌\", \"👍🏽\"]",
                "identities.bot.deny_keys[1]",
                "is in both the approve and the deny set",
            ),
            (
                "approve_keys = [\"❌\"]",
                "identities.bot.approve_keys[0]",
                "is in both the approve and the deny set",
            ),
            (
                "deny_keys = [\"👎\", \"\\uFE0F\"]",
                "identities.bot.deny_keys[1]",
                "is empty once variation selectors",
            ),
            (
                "approve_keys = []",
                "identities.bot.approve_keys",
                "the approve set of reaction keys is empty",
            ),
            (
                "deny_keys = []",
                "identities.bot.deny_keys",
                "the deny set of reaction keys is empty",
            ),
        ];
        for (line, path, message) in cases {
            let issues = issues(&with_line(line), no_env());
            assert_eq!(issues.len(), 1, "{line}: {issues:#?}");
            assert!(
                issue_at(&issues, path).message.contains(message),
                "{line}: {issues:#?}"
            );
        }
    }

    #[test]
    fn two_identities_with_one_user_id_are_an_error() {
        let text = format!(
            "{MINIMAL}\n[identities.twin]\nhomeserver = \"http://h\"\nuser_id = \"@bot:localhost\"\nallowed_senders = []\n"
        );
        let issues = issues(&text, no_env());
        assert_eq!(issues.len(), 1, "{issues:#?}");
        assert!(issue_at(&issues, "identities.twin.user_id")
            .message
            .starts_with("the same user_id as identities.bot: one Matrix account is one identity"));
    }

    #[test]
    fn top_level_values_are_checked() {
        let text = format!(
            "listen = \"localhost:8700\"\nstore_dir = \"\"\nallowed_hosts = []\nmax_download_bytes = 0\nbatch_deadline_ms = 0\nlog = \"info,=[\"\n{MINIMAL}"
        );
        let issues = issues(&text, no_env());
        assert_eq!(issues.len(), 6, "{issues:#?}");
        assert!(issue_at(&issues, "listen")
            .message
            .starts_with("\"localhost:8700\" is not an IP address and port like 127.0.0.1:8700"));
        assert_eq!(issue_at(&issues, "store_dir").message, "must not be empty");
        assert_eq!(
            issue_at(&issues, "allowed_hosts").message,
            "must not be empty: no request would be accepted"
        );
        assert_eq!(
            issue_at(&issues, "max_download_bytes").message,
            "must be greater than zero"
        );
        assert_eq!(
            issue_at(&issues, "batch_deadline_ms").message,
            "must be greater than zero"
        );
        assert!(issue_at(&issues, "log")
            .message
            .starts_with("not a tracing filter: "));
    }

    #[test]
    fn allowed_origins_default_to_none_and_each_entry_is_checked() {
        let config = load(MINIMAL, no_env()).unwrap();
        assert_eq!(config.allowed_origins, None);
        let config = load(
            &format!("allowed_origins = [\"https://app.example.com\", \"null\"]\n{MINIMAL}"),
            no_env(),
        )
        .unwrap();
        assert_eq!(
            config.allowed_origins.as_deref(),
            Some(&["https://app.example.com".to_owned(), "null".to_owned()][..])
        );
        for (line, path, message) in [
            (
                "allowed_origins = [\"app.example.com\"]",
                "allowed_origins",
                "\"app.example.com\" is not an origin",
            ),
            (
                "allowed_origins = \"https://app.example.com\"",
                "allowed_origins",
                "",
            ),
            (
                "allowed_hosts = [\"a b\"]",
                "allowed_hosts",
                "\"a b\" is not a host",
            ),
        ] {
            let issues = issues(&format!("{line}\n{MINIMAL}"), no_env());
            assert_eq!(issues.len(), 1, "{line}: {issues:#?}");
            assert!(
                issue_at(&issues, path).message.contains(message),
                "{line}: {issues:#?}"
            );
        }
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let text = r#"
listen = 5
colour = "blue"
[identities.a]
homeserver = "gopher://x"
user_id = "@a:x"
allowed_senders = ["@a:x"]
settle_ms = 0
[identities.b]
user_id = "@a:x"
allowed_senders = []
"#;
        let issues = issues(text, no_env());
        let paths: Vec<&str> = issues.iter().map(|i| i.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "colour",
                "listen",
                "identities.a.homeserver",
                "identities.b.homeserver",
            ],
            "{issues:#?}"
        );
    }

    #[test]
    fn rules_between_keys_are_checked_for_every_identity_that_parsed() {
        let text = r#"
[identities.a]
homeserver = "http://x"
user_id = "@a:x"
allowed_senders = ["@a:x"]
settle_ms = 0
[identities.b]
homeserver = "http://x"
user_id = "@b:x"
allowed_senders = []
approvers = ["@c:x"]
"#;
        let errors = load(text, no_env()).unwrap_err();
        let paths: Vec<&str> = errors.0.iter().map(|i| i.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "identities.a.allowed_senders[0]",
                "identities.a.settle_ms",
                "identities.b.approvers[0]",
            ],
            "{errors}"
        );
        assert_eq!(errors.to_string().lines().count(), 3);
    }

    #[test]
    fn a_non_loopback_listener_with_default_hosts_is_a_warning() {
        let config = load(&format!("listen = \"0.0.0.0:8700\"\n{MINIMAL}"), no_env()).unwrap();
        assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
        assert_eq!(config.warnings[0].path, "listen");
        assert!(config.warnings[0].message.contains("set allowed_hosts"));
        let config = load(
            &format!("listen = \"0.0.0.0:8700\"\nallowed_hosts = [\"bot.example.org\"]\n{MINIMAL}"),
            no_env(),
        )
        .unwrap();
        assert_eq!(config.warnings, []);
        let config = load(&format!("listen = \"[::1]:8700\"\n{MINIMAL}"), no_env()).unwrap();
        assert_eq!(config.warnings, []);
    }

    #[test]
    fn issues_display_as_path_message_and_source() {
        let issue = ConfigIssue {
            path: "identities.bot.approvers[1]".to_owned(),
            source: "matrix-channel.toml".to_owned(),
            message: "bad".to_owned(),
        };
        assert_eq!(
            issue.to_string(),
            "identities.bot.approvers[1]: bad (matrix-channel.toml)"
        );
        let errors = ConfigErrors(vec![issue.clone(), issue]);
        assert_eq!(errors.to_string().lines().count(), 2);
    }

    #[cfg(unix)]
    #[test]
    fn only_our_variables_that_are_not_utf8_are_issues_and_the_rest_is_kept() {
        use std::os::unix::ffi::OsStringExt;
        let bad = || OsString::from_vec(vec![b'x', 0xff]);
        let os = |s: &str| OsString::from(s);
        let mut bad_name = b"MATRIX_CHANNEL_".to_vec();
        bad_name.push(0xff);
        let (env, issues) = utf8_env([
            (os("HOME"), os("/root")),
            (os("MATRIX_CHANNEL_LISTEN"), os("127.0.0.1:1")),
            (os("MATRIX_CHANNEL_LOG"), bad()),
            (OsString::from_vec(bad_name), os("v")),
            (os("OTHER"), bad()),
            (bad(), os("v")),
        ]);
        assert_eq!(
            env,
            [
                ("HOME".to_owned(), "/root".to_owned()),
                ("MATRIX_CHANNEL_LISTEN".to_owned(), "127.0.0.1:1".to_owned()),
            ]
        );
        let found: Vec<(String, String)> =
            issues.into_iter().map(|i| (i.source, i.message)).collect();
        assert_eq!(
            found,
            [
                (
                    "env MATRIX_CHANNEL_LOG".to_owned(),
                    "the value is not UTF-8".to_owned()
                ),
                (
                    "env MATRIX_CHANNEL_\u{fffd}".to_owned(),
                    "the variable's name is not UTF-8".to_owned()
                ),
            ]
        );
    }

    #[test]
    fn the_process_environment_is_read_by_load() {
        // No test sets MATRIX_CHANNEL_* in the process environment, so `load`
        // and `load_from` with no variables agree.
        let path = write(MINIMAL);
        if std::env::vars_os().any(|(k, _)| has_prefix(&k.to_string_lossy())) {
            return;
        }
        assert_eq!(Config::load(&path), Config::load_from(&path, no_env()));
    }
}
