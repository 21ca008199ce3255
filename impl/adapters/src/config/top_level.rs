//! The top-level keys (`listen`, `store_dir`, `allowed_hosts`, `allowed_origins`,
//! `session_idle_secs`, `max_download_bytes`, `batch_deadline_ms`, `log`,
//! `rate_limits`, `files`) with their
//! defaults, and the warning for a listener that is not loopback behind the default
//! `allowed_hosts`.

use super::walk::Walk;
use super::{
    Config, MetricsToken, DEFAULT_ALLOWED_HOSTS, DEFAULT_BATCH_DEADLINE_MS, DEFAULT_LISTEN,
    DEFAULT_LOG, DEFAULT_MAX_DOWNLOAD_BYTES, DEFAULT_STORE_DIR,
};
use figment::value::Dict;
use std::net::SocketAddr;
use std::path::Path;

const TOP_KEYS: [&str; 13] = [
    "listen",
    "store_dir",
    "allowed_hosts",
    "allowed_origins",
    "session_idle_secs",
    "max_download_bytes",
    "batch_deadline_ms",
    "log",
    "rate_limits",
    "files",
    "metrics_token",
    "metrics_listen",
    "identities",
];

impl Walk<'_> {
    pub(super) fn config(&mut self, data: &Dict, config_dir: &Path) -> Option<Config> {
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
        let rate_limits = self.rate_limits(data.get("rate_limits"));
        let files = self.files(data.get("files"), config_dir);
        let metrics_token = match data.get("metrics_token") {
            None => Some(None),
            Some(v) => self.typed::<String>("metrics_token", v).and_then(|token| {
                match MetricsToken::new(&token) {
                    Ok(token) => Some(Some(token)),
                    Err(e) => {
                        // The value is a secret: the message never echoes it.
                        self.issue("metrics_token", Some(v), e);
                        None
                    }
                }
            }),
        };
        let metrics_listen = match data.get("metrics_listen") {
            None => Some(None),
            Some(v) => self.typed::<String>("metrics_listen", v).and_then(|s| {
                match s.parse::<SocketAddr>() {
                    Ok(addr) => Some(Some(addr)),
                    Err(e) => {
                        self.issue(
                            "metrics_listen",
                            Some(v),
                            format!("{s:?} is not an IP address and port like 127.0.0.1:9700: {e}"),
                        );
                        None
                    }
                }
            }),
        };
        if let (Some(Some(addr)), None) = (metrics_listen, data.get("metrics_token")) {
            if !addr.ip().is_loopback() {
                self.warn(
                    "metrics_listen",
                    data.get("metrics_listen"),
                    format!(
                        "{addr} is not a loopback address and metrics_token is not set: anyone \
                         who reaches it reads the metrics; set metrics_token"
                    ),
                );
            }
        }
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
            rate_limits: rate_limits?,
            files: files?,
            metrics_token: metrics_token?,
            metrics_listen: metrics_listen?,
            identities: identities?,
            warnings: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_support::*;

    #[test]
    fn a_relative_store_dir_is_relative_to_the_config_file_not_the_working_directory() {
        let path = write(&format!("store_dir = \"data/store\"\n{MINIMAL}"));
        let config = Config::load_from(&path, no_env()).unwrap();
        assert_eq!(config.store_dir, path.parent().unwrap().join("data/store"));
        assert!(config.store_dir.is_absolute());
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
    fn metrics_are_off_by_default_and_a_token_or_a_listener_turns_them_on() {
        let config = load(MINIMAL, no_env()).unwrap();
        assert_eq!((config.metrics_token, config.metrics_listen), (None, None));
        let token = "0123456789abcdef0123456789abcdef";
        let config = load(
            &format!("metrics_listen = \"127.0.0.1:9700\"\n{MINIMAL}"),
            env(&[("MATRIX_CHANNEL_METRICS_TOKEN", token)]),
        )
        .unwrap();
        assert!(config.metrics_token.as_ref().unwrap().matches(token));
        assert!(!config.metrics_token.as_ref().unwrap().matches("0123"));
        assert_eq!(
            config.metrics_listen,
            Some("127.0.0.1:9700".parse().unwrap())
        );
        assert_eq!(config.warnings, []);
        let shown = format!("{config:?}");
        assert!(!shown.contains(token), "Debug hides the token");
        assert!(shown.contains("MetricsToken(…)"), "{shown}");
    }

    #[test]
    fn a_short_or_spaced_metrics_token_and_a_bad_address_are_errors_that_never_echo_the_token() {
        for (line, path, message) in [
            (
                "metrics_token = \"short-secret\"",
                "metrics_token",
                "at least 32 characters",
            ),
            (
                "metrics_token = \"0123456789abcdef 0123456789abcdef\"",
                "metrics_token",
                "whitespace",
            ),
            (
                "metrics_listen = \"localhost:9700\"",
                "metrics_listen",
                "not an IP address",
            ),
        ] {
            let issues = issues(&format!("{line}\n{MINIMAL}"), no_env());
            assert_eq!(issues.len(), 1, "{line}: {issues:#?}");
            let issue = issue_at(&issues, path);
            assert!(issue.message.contains(message), "{line}: {issue:?}");
            assert!(!issue.message.contains("secret"), "{issue:?}");
            assert!(!issue.message.contains("0123456789abcdef"), "{issue:?}");
        }
    }

    #[test]
    fn a_metrics_listener_off_loopback_without_a_token_is_a_warning() {
        let line = "metrics_listen = \"0.0.0.0:9700\"";
        let config = load(&format!("{line}\n{MINIMAL}"), no_env()).unwrap();
        assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
        assert_eq!(config.warnings[0].path, "metrics_listen");
        assert!(config.warnings[0].message.contains("set metrics_token"));
        let config = load(
            &format!("{line}\nmetrics_token = \"{}\"\n{MINIMAL}", "a".repeat(32)),
            no_env(),
        )
        .unwrap();
        assert_eq!(config.warnings, []);
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
}
