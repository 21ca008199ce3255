//! The walk over the merged values ([`Walk`]): where a value came from, typed reads
//! of tables, lists and Matrix ids, and every problem collected as an issue (or a
//! warning) at its key path, so that one load reports them all.

use super::ConfigIssue;
use figment::value::{Dict, Value};
use figment::{Figment, Metadata, Source};
use ruma::OwnedUserId;
use serde::de::DeserializeOwned;

/// The walk over the merged values: typed reads, collecting every issue.
pub(super) struct Walk<'a> {
    pub(super) figment: &'a Figment,
    pub(super) file_source: String,
    pub(super) issues: Vec<ConfigIssue>,
    pub(super) warnings: Vec<ConfigIssue>,
}

impl Walk<'_> {
    /// Where `value` came from.
    pub(super) fn source(&self, value: &Value) -> String {
        match self.figment.get_metadata(value.tag()) {
            Some(Metadata {
                source: Some(Source::File(_)),
                ..
            })
            | None => self.file_source.clone(),
            Some(metadata) => metadata.name.to_string(),
        }
    }

    pub(super) fn issue(&mut self, path: &str, value: Option<&Value>, message: impl Into<String>) {
        let source = value.map_or_else(|| self.file_source.clone(), |v| self.source(v));
        self.issues.push(ConfigIssue {
            path: path.to_owned(),
            source,
            message: message.into(),
        });
    }

    pub(super) fn warn(&mut self, path: &str, value: Option<&Value>, message: impl Into<String>) {
        let source = value.map_or_else(|| self.file_source.clone(), |v| self.source(v));
        self.warnings.push(ConfigIssue {
            path: path.to_owned(),
            source,
            message: message.into(),
        });
    }

    /// `value` as a `T`; a type error is an issue at `path`.
    pub(super) fn typed<T: DeserializeOwned>(&mut self, path: &str, value: &Value) -> Option<T> {
        match value.deserialize::<T>() {
            Ok(v) => Some(v),
            Err(e) => {
                self.issue(path, Some(value), e.kind.to_string());
                None
            }
        }
    }

    /// Unknown keys of `dict` are issues under `prefix`.
    pub(super) fn unknown_keys(&mut self, dict: &Dict, known: &[&str], prefix: &str) {
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
    pub(super) fn table<'v>(&mut self, path: &str, value: &'v Value) -> Option<&'v Dict> {
        let table = value.as_dict();
        if table.is_none() {
            let message = format!("expected a table, found {}", value.to_actual());
            self.issue(path, Some(value), message);
        }
        table
    }

    /// A list of strings, each read by `parse`; a non-string entry, or one that
    /// `parse` refuses, is an issue at `path[i]`. Every entry is checked.
    pub(super) fn list<T>(
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
    pub(super) fn strings(&mut self, path: &str, value: &Value) -> Option<Vec<String>> {
        self.list(path, value, |s| Ok(s.to_owned()))
    }

    /// A list of Matrix user ids, each checked by ruma.
    pub(super) fn user_ids(&mut self, path: &str, value: &Value) -> Option<Vec<OwnedUserId>> {
        self.list(path, value, |s| {
            OwnedUserId::try_from(s).map_err(|e| format!("{s:?} is not a Matrix user id: {e}"))
        })
    }

    pub(super) fn user_id(&mut self, path: &str, value: &Value) -> Option<OwnedUserId> {
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
}

#[cfg(test)]
mod tests {
    use crate::config::test_support::*;
    use crate::config::Config;

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
}
