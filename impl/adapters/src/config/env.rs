//! The environment overrides: which `MATRIX_CHANNEL_*` variables are config keys
//! (not the command-line inputs of [`CLI_ENV_VARS`]), each one a figment provider
//! whose source is the variable's name, and the variables whose name or value is not
//! UTF-8.

use super::{ConfigIssue, CLI_ENV_VARS, ENV_PREFIX};
use figment::value::{Dict, Map, Value};
use figment::{Metadata, Profile, Provider};
use std::ffi::OsString;

/// The UTF-8 variables of an environment, and an issue for each variable with the
/// prefix whose name or value is not UTF-8 (other such variables are none of ours).
pub(super) fn utf8_env(
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

pub(super) fn has_prefix(name: &str) -> bool {
    name.get(..ENV_PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(ENV_PREFIX))
}

pub(super) fn is_cli_var(name: &str) -> bool {
    CLI_ENV_VARS.iter().any(|v| v.eq_ignore_ascii_case(name))
}

/// One `MATRIX_CHANNEL_*` variable as a figment provider: the key path from the
/// name, the value parsed like figment's `Env` does (TOML-like literals, else a
/// string), and the variable's name as the source.
pub(super) struct EnvVar {
    name: String,
    key: String,
    value: Value,
}

impl EnvVar {
    pub(super) fn new(name: String, value: &str) -> Result<Self, ConfigIssue> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_support::*;

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
}
