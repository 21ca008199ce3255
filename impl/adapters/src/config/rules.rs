//! The rules between the keys of one identity: the model's
//! [`mc_model::IdentityConfig::validate`], every violation reported at the key (or
//! the list entry) it is about, each mistake once.

use super::walk::Walk;
use super::{ConfigIssue, IdentitySettings};
use figment::value::Dict;
use mc_model::ConfigError;

impl Walk<'_> {
    /// The rules between keys of one identity:
    /// [`mc_model::IdentityConfig::validate`], every violation and not only the
    /// first (the model's rules are the only ones: the settle window inside the
    /// prompt's lifetime is among them).
    pub(super) fn check_identity(
        &mut self,
        path: &str,
        dict: &Dict,
        settings: &IdentitySettings,
    ) -> bool {
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
                ConfigError::Policy(_) => {
                    // Every problem of the rules, each at its entry; then the
                    // rules are out of the way of what `validate` checks after.
                    let problems = mc_model::policy::check(&config.policy, config.approver_count());
                    config.policy.clear();
                    for problem in problems {
                        let entry = Some(problem.rule().saturating_sub(1));
                        let value = dict
                            .get("policy")
                            .and_then(|v| v.as_array())
                            .and_then(|list| list.get(problem.rule().saturating_sub(1)));
                        self.issues.push(ConfigIssue {
                            path: list_entry(path, "policy", entry),
                            source: value
                                .map_or_else(|| self.file_source.clone(), |v| self.source(v)),
                            message: ConfigError::Policy(problem).to_string(),
                        });
                    }
                    continue;
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
    use crate::config::test_support::*;

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
}
