//! The `[rate_limits]` table: `enabled`, and `[rate_limits.token]` and
//! `[rate_limits.identity]`, each with `tool_calls_per_second`, `tool_call_burst`,
//! `writes_per_second` and `write_burst` ([`crate::rate_limit`]); an absent key
//! keeps its default, 0 is refused.

use super::walk::Walk;
use crate::rate_limit::{Rate, RateLimits, ScopeLimits};
use figment::value::Value;
use std::num::NonZeroU32;

const KEYS: [&str; 3] = ["enabled", "token", "identity"];
const SCOPE_KEYS: [&str; 4] = [
    "tool_calls_per_second",
    "tool_call_burst",
    "writes_per_second",
    "write_burst",
];

impl Walk<'_> {
    /// `[rate_limits]`, or the defaults when it is absent.
    pub(super) fn rate_limits(&mut self, value: Option<&Value>) -> Option<RateLimits> {
        let defaults = RateLimits::default();
        let Some(value) = value else {
            return Some(defaults);
        };
        let table = self.table("rate_limits", value)?;
        self.unknown_keys(table, &KEYS, "rate_limits.");
        let enabled = match table.get("enabled") {
            None => Some(true),
            Some(v) => self.typed::<bool>("rate_limits.enabled", v),
        };
        let token = self.scope_limits("rate_limits.token", table.get("token"), defaults.token);
        let identity = self.scope_limits(
            "rate_limits.identity",
            table.get("identity"),
            defaults.identity,
        );
        Some(RateLimits {
            enabled: enabled?,
            token: token?,
            identity: identity?,
        })
    }

    /// One scope's table at `path`, each absent key from `defaults`.
    fn scope_limits(
        &mut self,
        path: &str,
        value: Option<&Value>,
        defaults: ScopeLimits,
    ) -> Option<ScopeLimits> {
        let Some(value) = value else {
            return Some(defaults);
        };
        let table = self.table(path, value)?;
        self.unknown_keys(table, &SCOPE_KEYS, &format!("{path}."));
        let mut count = |key: &str, default: NonZeroU32| match table.get(key) {
            None => Some(default),
            Some(v) => {
                let key = format!("{path}.{key}");
                self.typed::<u32>(&key, v).and_then(|n| {
                    let n = NonZeroU32::new(n);
                    if n.is_none() {
                        self.issue(
                            &key,
                            Some(v),
                            "must be greater than zero (to lift the limits, set \
                             rate_limits.enabled = false)",
                        );
                    }
                    n
                })
            }
        };
        let tool_calls_per_second = count("tool_calls_per_second", defaults.tool_calls.per_second);
        let tool_call_burst = count("tool_call_burst", defaults.tool_calls.burst);
        let writes_per_second = count("writes_per_second", defaults.writes.per_second);
        let write_burst = count("write_burst", defaults.writes.burst);
        Some(ScopeLimits {
            tool_calls: Rate {
                per_second: tool_calls_per_second?,
                burst: tool_call_burst?,
            },
            writes: Rate {
                per_second: writes_per_second?,
                burst: write_burst?,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::test_support::*;
    use crate::rate_limit::{Rate, RateLimits, ScopeLimits};

    #[test]
    fn absent_rate_limits_are_the_defaults() {
        let config = load(MINIMAL, no_env()).unwrap();
        assert_eq!(config.rate_limits, RateLimits::default());
        let config = load(&format!("[rate_limits]\n{MINIMAL}"), no_env()).unwrap();
        assert_eq!(config.rate_limits, RateLimits::default());
    }

    #[test]
    fn each_rate_and_burst_is_set_by_its_key_and_the_others_keep_their_defaults() {
        let text = format!(
            "[rate_limits.token]\ntool_calls_per_second = 1\ntool_call_burst = 2\n\
             writes_per_second = 3\nwrite_burst = 4\n\
             [rate_limits.identity]\nwrite_burst = 9\n{MINIMAL}"
        );
        let config = load(&text, no_env()).unwrap();
        let defaults = RateLimits::default();
        assert_eq!(
            config.rate_limits,
            RateLimits {
                enabled: true,
                token: ScopeLimits {
                    tool_calls: Rate::new(1, 2),
                    writes: Rate::new(3, 4),
                },
                identity: ScopeLimits {
                    tool_calls: defaults.identity.tool_calls,
                    writes: Rate::new(defaults.identity.writes.per_second.get(), 9),
                },
            }
        );
        let config = load(
            MINIMAL,
            env(&[
                ("MATRIX_CHANNEL_RATE_LIMITS__ENABLED", "false"),
                (
                    "MATRIX_CHANNEL_RATE_LIMITS__IDENTITY__TOOL_CALLS_PER_SECOND",
                    "7",
                ),
                ("MATRIX_CHANNEL_RATE_LIMITS__IDENTITY__TOOL_CALL_BURST", "8"),
                (
                    "MATRIX_CHANNEL_RATE_LIMITS__IDENTITY__WRITES_PER_SECOND",
                    "6",
                ),
            ]),
        )
        .unwrap();
        assert!(!config.rate_limits.enabled);
        assert_eq!(config.rate_limits.token, defaults.token);
        assert_eq!(config.rate_limits.identity.tool_calls, Rate::new(7, 8));
        assert_eq!(
            config.rate_limits.identity.writes,
            Rate::new(6, defaults.identity.writes.burst.get())
        );
    }

    #[test]
    fn a_zero_a_wrong_type_or_an_unknown_key_of_rate_limits_is_an_issue() {
        let text = format!(
            "[rate_limits]\nenabled = \"no\"\nspeed = 1\n\
             [rate_limits.token]\ntool_calls_per_second = 0\nwrite_burst = -1\nburst = 1\n\
             [rate_limits.identity]\ntool_call_burst = 0\nwrites_per_second = 0\n{MINIMAL}"
        );
        let all = issues(&text, no_env());
        assert_eq!(all.len(), 7, "{all:#?}");
        for path in [
            "rate_limits.token.tool_calls_per_second",
            "rate_limits.identity.tool_call_burst",
            "rate_limits.identity.writes_per_second",
        ] {
            assert_eq!(
                issue_at(&all, path).message,
                "must be greater than zero (to lift the limits, set rate_limits.enabled = false)"
            );
        }
        assert!(issue_at(&all, "rate_limits.speed")
            .message
            .starts_with("unknown key `speed`"));
        assert!(issue_at(&all, "rate_limits.token.burst")
            .message
            .starts_with("unknown key `burst`"));
        assert!(!issue_at(&all, "rate_limits.enabled").message.is_empty());
        assert!(!issue_at(&all, "rate_limits.token.write_burst")
            .message
            .is_empty());
        for (text, path) in [
            (format!("rate_limits = 1\n{MINIMAL}"), "rate_limits"),
            (
                format!("[rate_limits]\ntoken = 1\n{MINIMAL}"),
                "rate_limits.token",
            ),
        ] {
            let issues = issues(&text, no_env());
            assert_eq!(issues.len(), 1, "{issues:#?}");
            assert!(issue_at(&issues, path)
                .message
                .starts_with("expected a table"));
        }
    }
}
