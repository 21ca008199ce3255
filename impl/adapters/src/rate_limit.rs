//! The server's rate limits without the clock: the settings ([`RateLimits`]: a rate
//! and a burst per bearer token and per identity, for tool calls and for Matrix
//! writes, with defaults a person's use never reaches; decision 0032), and what a
//! refused call answers ([`refused`]: `rate_limited`, saying when to retry).
//!
//! `mc_server::rate_limit` keeps the limiters (governor's GCRA, keyed by the token's
//! public id and by the identity's name) and asks [`refused`] for the answer.

use crate::write_rule::ToolError;
use std::num::NonZeroU32;
use std::time::Duration;

/// A rate and a burst: up to `burst` at once, then one every `1 / per_second`
/// seconds (the generic cell rate algorithm: the burst refills at `per_second`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// How many a second, sustained.
    pub per_second: NonZeroU32,
    /// How many at once, from rest.
    pub burst: NonZeroU32,
}

impl Rate {
    /// `per_second` a second with a burst of `burst`.
    ///
    /// # Panics
    /// When either is 0 (only for constants: the config refuses 0).
    pub const fn new(per_second: u32, burst: u32) -> Rate {
        match (NonZeroU32::new(per_second), NonZeroU32::new(burst)) {
            (Some(per_second), Some(burst)) => Rate { per_second, burst },
            _ => panic!("a rate and a burst are greater than zero"),
        }
    }
}

/// The limits of one scope (each bearer token, or each identity).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScopeLimits {
    /// Tool calls (`tools/call` of any tool).
    pub tool_calls: Rate,
    /// Matrix writes the tools ask for (every `send_message`, `edit_message`,
    /// `send_reaction`, `redact`, `acknowledge`, `join_room`, `leave_room`, `invite`).
    pub writes: Rate,
}

/// The `[rate_limits]` settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimits {
    /// `false`: nothing is limited.
    pub enabled: bool,
    /// Each bearer token's own.
    pub token: ScopeLimits,
    /// Each identity's, all its tokens together.
    pub identity: ScopeLimits,
}

/// Default tool calls per token: 20 a second, 60 at once.
pub const DEFAULT_TOKEN_TOOL_CALLS: Rate = Rate::new(20, 60);
/// Default writes per token: 5 a second, 30 at once (the identity's: one session
/// may use all of it).
pub const DEFAULT_TOKEN_WRITES: Rate = Rate::new(5, 30);
/// Default tool calls per identity: 40 a second, 120 at once (two sessions at their
/// token's limit).
pub const DEFAULT_IDENTITY_TOOL_CALLS: Rate = Rate::new(40, 120);
/// Default writes per identity (one Matrix account): 5 a second, 30 at once.
pub const DEFAULT_IDENTITY_WRITES: Rate = Rate::new(5, 30);

impl Default for RateLimits {
    /// Enabled, with the `DEFAULT_*` rates.
    fn default() -> Self {
        RateLimits {
            enabled: true,
            token: ScopeLimits {
                tool_calls: DEFAULT_TOKEN_TOOL_CALLS,
                writes: DEFAULT_TOKEN_WRITES,
            },
            identity: ScopeLimits {
                tool_calls: DEFAULT_IDENTITY_TOOL_CALLS,
                writes: DEFAULT_IDENTITY_WRITES,
            },
        }
    }
}

/// What a limit counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    /// Tool calls.
    ToolCalls,
    /// Matrix writes.
    Writes,
}

/// Whose limit it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The bearer token's (its public id, as `token list` shows it).
    Token,
    /// The identity's (its name).
    Identity,
}

/// A wait in whole milliseconds, rounded up and at least 1: a caller that waits
/// this long is served (a wait of 0.2 ms is not "now").
pub fn retry_after_ms(wait: Duration) -> u64 {
    let ms = wait.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).unwrap_or(u64::MAX).max(1)
}

/// The answer to a call over the limit `rate` of `counted` in `scope` (`who`: the
/// token's public id or the identity's name), `wait` being how long until the next
/// one is allowed: `rate_limited` with `retry_after_ms` ([`retry_after_ms`]) and a
/// message that says the limit and when to retry.
pub fn refused(counted: Counted, scope: Scope, who: &str, rate: Rate, wait: Duration) -> ToolError {
    let retry_after_ms = retry_after_ms(wait);
    let what = match counted {
        Counted::ToolCalls => "tool calls",
        Counted::Writes => "Matrix writes",
    };
    let whose = match scope {
        Scope::Token => format!("token {who}"),
        Scope::Identity => format!("identity {who}"),
    };
    ToolError::RateLimited {
        message: format!(
            "too many {what} for {whose}: the limit is {} a second with a burst of {}; \
             nothing was done, retry in {retry_after_ms} ms (retry_after_ms)",
            rate.per_second, rate.burst
        ),
        retry_after_ms,
    }
}

/// How long to wait when the homeserver answered 429 (`M_LIMIT_EXCEEDED`) without
/// saying (no `retry_after_ms`, no `Retry-After`): 1 s.
pub const HOMESERVER_DEFAULT_RETRY_AFTER_MS: u64 = 1_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_whole_milliseconds_rounded_up_and_never_zero() {
        assert_eq!(retry_after_ms(Duration::ZERO), 1);
        assert_eq!(retry_after_ms(Duration::from_nanos(1)), 1);
        assert_eq!(retry_after_ms(Duration::from_micros(1_000)), 1);
        assert_eq!(retry_after_ms(Duration::from_micros(1_001)), 2);
        assert_eq!(retry_after_ms(Duration::from_millis(1_500)), 1_500);
        assert_eq!(retry_after_ms(Duration::MAX), u64::MAX);
    }

    #[test]
    fn a_refusal_is_rate_limited_and_says_the_limit_and_when_to_retry() {
        let rate = Rate::new(2, 3);
        let error = refused(
            Counted::ToolCalls,
            Scope::Token,
            "0123abcd4567",
            rate,
            Duration::from_micros(499_200),
        );
        assert_eq!(error.kind(), "rate_limited");
        assert_eq!(error.retry_after_ms(), Some(500));
        assert_eq!(
            error.message(),
            "too many tool calls for token 0123abcd4567: the limit is 2 a second with a burst \
             of 3; nothing was done, retry in 500 ms (retry_after_ms)"
        );
        let error = refused(
            Counted::Writes,
            Scope::Identity,
            "bot",
            rate,
            Duration::from_secs(2),
        );
        assert_eq!(error.retry_after_ms(), Some(2_000));
        assert!(
            error
                .message()
                .starts_with("too many Matrix writes for identity bot: "),
            "{error}"
        );
    }

    #[test]
    fn the_defaults_are_enabled_and_never_below_a_persons_pace() {
        let limits = RateLimits::default();
        assert!(limits.enabled);
        assert_eq!(limits.token.tool_calls, Rate::new(20, 60));
        assert_eq!(limits.token.writes, Rate::new(5, 30));
        assert_eq!(limits.identity.tool_calls, Rate::new(40, 120));
        assert_eq!(limits.identity.writes, Rate::new(5, 30));
    }

    #[test]
    #[should_panic(expected = "greater than zero")]
    fn a_rate_of_zero_is_no_rate() {
        let _ = Rate::new(0, 1);
    }

    #[test]
    #[should_panic(expected = "greater than zero")]
    fn a_burst_of_zero_is_no_rate() {
        let _ = Rate::new(1, 0);
    }
}
