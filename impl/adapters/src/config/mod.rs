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
//! [rate_limits]                    # per bearer token and per identity; the defaults
//! enabled = true                   # never slow a person's use (decision 0032)
//! [rate_limits.token]
//! tool_calls_per_second = 20
//! tool_call_burst = 60
//! writes_per_second = 5
//! write_burst = 30
//! [rate_limits.identity]
//! tool_calls_per_second = 40
//! tool_call_burst = 120
//! writes_per_second = 5
//! write_burst = 30
//!
//! [files]                          # send_file's sources
//! allowed_dirs = ["/srv/outbox"]   # default [] = no file from a path
//! max_bytes = 10485760             # default 10 MiB
//! fetch_urls = true                # https URLs, public addresses only
//! fetch_allow_networks = []        # e.g. ["10.1.2.0/24"] for an internal server
//! fetch_ca_file = "internal-ca.pem" # default: the system's roots only
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
//! typing_cap_secs = 600
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
//! - `metrics_token`: the bearer token `GET /metrics` takes (at least 32
//!   characters, no whitespace; better given as `MATRIX_CHANNEL_METRICS_TOKEN` than
//!   written in the file). Set: `/metrics` is served on `listen` to a request with
//!   `Authorization: Bearer <metrics_token>`, and on `metrics_listen` likewise.
//!   Default: none.
//! - `metrics_listen`: an address of its own for `GET /metrics` (`"127.0.0.1:9700"`),
//!   which serves nothing else; without `metrics_token` it takes no token (the
//!   address is the access control: a warning when it is not loopback). Default:
//!   none. With neither key, `/metrics` answers 404
//!   (docs/decisions/0031-metrics.md).
//! - `log`: a `tracing` filter (`RUST_LOG` syntax, such as `"info,matrix_sdk=warn"`).
//!   Default: `info`, with matrix-sdk at `warn` ([`DEFAULT_LOG`]).
//! - `rate_limits`: how many tool calls and Matrix writes each bearer token
//!   (`[rate_limits.token]`) and each identity, all its tokens together
//!   (`[rate_limits.identity]`), may make: `*_per_second` sustained, `*_burst` at
//!   once from rest (GCRA, [`crate::rate_limit`]). A call over a limit does nothing
//!   and gets the tool error `rate_limited` with `retry_after_ms`. Writes are what
//!   the write tools ask for; the server's own posts (prompts, their outcome edits,
//!   notices) are never limited. Defaults: per token 20 tool calls a second with a
//!   burst of 60 and 5 writes a second with a burst of 30; per identity 40 and 120,
//!   5 and 30. Each must be greater than zero; an absent key keeps its default;
//!   `enabled = false` lifts every limit.
//! - `files`: where `send_file` takes a file from ([`crate::files`]).
//!   `allowed_dirs`: absolute paths of the directories a file may be read from
//!   (compared with the real path of what was opened: symlinks and `..` resolved);
//!   default `[]`, which turns sending from a path off. `max_bytes`: the largest
//!   file read or fetched, in bytes; default 10,485,760 (10 MiB); greater than zero.
//!   `fetch_urls`: whether `https` URLs are fetched; default `true`.
//!   `fetch_allow_networks`: CIDR networks (`"10.1.2.0/24"`, `"fd00::/8"`) a fetch
//!   may reach although they are not public (loopback, private, link-local, …: the
//!   SSRF guard refuses them otherwise); default `[]`. `fetch_ca_file`: a PEM file of
//!   root certificates trusted for fetches besides the system's (an internal
//!   server's private CA), relative to the config file's directory; default none.
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
//! - `typing_cap_secs`: how long, at most, the identity shows `m.typing` in a
//!   session's room after a push of that room's event reached the session (it
//!   stops earlier when the agent answers there or the room's sessions detach).
//!   Default 600 ([`mc_model::config::DEFAULT_TYPING_CAP_MS`]); 0 never shows it.
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

mod env;
mod files;
mod identity;
mod policy;
mod rate_limits;
mod reaction_keys;
mod rules;
#[cfg(test)]
mod test_support;
mod top_level;
mod walk;

use env::{has_prefix, is_cli_var, utf8_env, EnvVar};
use figment::providers::{Format, Toml};
use figment::{Figment, Profile, Provider};
use mc_model::reaction::ReactionKeys;
use mc_model::{IdentityConfig, RoomId, UserId, VerdictDevices};
use ruma::{OwnedRoomId, OwnedUserId};
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use walk::Walk;

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
    /// The rate limits of tool calls and writes, per token and per identity.
    pub rate_limits: crate::rate_limit::RateLimits,
    /// Where `send_file` may take a file from: the operator's directories, the cap,
    /// URL fetches and their allowed networks and CA.
    pub files: crate::files::FilesConfig,
    /// The bearer token of `GET /metrics`; `None`: `/metrics` is not served on
    /// `listen`.
    pub metrics_token: Option<MetricsToken>,
    /// A listener of its own for `GET /metrics`; `None`: none.
    pub metrics_listen: Option<SocketAddr>,
    /// By identity name (`[a-z0-9_-]{1,32}`); never empty.
    pub identities: BTreeMap<String, IdentitySettings>,
    /// Things that work but are probably not meant (for `config check` and the
    /// start-up log), in the same shape as errors.
    pub warnings: Vec<ConfigIssue>,
}

/// `metrics_token`: at least [`MetricsToken::MIN_CHARS`] characters, none of them
/// whitespace or a control. Its `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct MetricsToken(String);

impl MetricsToken {
    /// The shortest token taken: 128 bits as hex.
    pub const MIN_CHARS: usize = 32;

    /// The token, checked; the error says why not.
    pub fn new(token: &str) -> Result<MetricsToken, String> {
        if token.chars().count() < Self::MIN_CHARS {
            return Err(format!(
                "must be at least {} characters (a random one: openssl rand -hex 32)",
                Self::MIN_CHARS
            ));
        }
        if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("must not hold whitespace or control characters".to_owned());
        }
        Ok(MetricsToken(token.to_owned()))
    }

    /// Whether `given` is this token, compared by their SHA-256 digests so that the
    /// time taken says nothing of how much of it matched.
    pub fn matches(&self, given: &str) -> bool {
        use sha2::{Digest, Sha256};
        Sha256::digest(self.0.as_bytes()) == Sha256::digest(given.as_bytes())
    }
}

impl fmt::Debug for MetricsToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MetricsToken(…)")
    }
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
    /// How long the identity shows typing in a session's room after a push at most,
    /// in seconds (0: never).
    pub typing_cap_secs: u64,
    /// Which devices a verdict may come from.
    pub verdict_devices: VerdictDevices,
    /// The operator's rules, in the file's order (`mc_model::policy`).
    pub policy: Vec<mc_model::policy::Rule>,
    /// Where a line tells a request a rule decided; `None`: the prompt's room.
    pub policy_room: Option<OwnedRoomId>,
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
        config.typing_cap_ms = self.typing_cap_secs.saturating_mul(1000);
        config.policy = self.policy.clone();
        config.policy_room = self.policy_room.as_ref().map(|r| RoomId(r.to_string()));
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

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;

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
                typing_cap_secs: 600,
                policy: Vec::new(),
                policy_room: None,
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
        assert_eq!(bot.typing_cap_secs, 120);
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
        assert_eq!(model.typing_cap_ms, 120_000);
        assert_eq!(model.validate(), Ok(()));
        let defaults = IdentityConfig::new(model.user_id.clone(), []);
        assert_eq!(model.max_prompts, defaults.max_prompts);
        assert_eq!(model.queue_cap, defaults.queue_cap);
        let second = config.identities["second-bot_2"].model_config();
        assert!(!second.relays_permissions());
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
