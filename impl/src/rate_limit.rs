//! The rate limits of tool calls and Matrix writes ([`RateLimiter`]): governor's
//! keyed GCRA limiters, one per bearer token and one per identity for each. What the
//! settings are and what a refusal says is `mc_adapters::rate_limit`'s; this keeps
//! the counts and the clock. An operational guard like the body-size cap, outside
//! the model: a refused call never reaches it.
//!
//! The server's own posts (permission prompts, their outcome edits, notices) are
//! effects of the model, not tool calls: nothing here limits them, so a prompt
//! always reaches the approvers.

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter as Gcra};

use mc_adapters::rate_limit::refused;
pub use mc_adapters::rate_limit::{Counted, Rate, RateLimits, Scope};
use mc_adapters::write_rule::ToolError;

type Keyed<C> =
    Gcra<String, DefaultKeyedStateStore<String>, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// One limit: a GCRA limiter per key, all with one [`Rate`].
struct Limit<C: Clock + Clone> {
    rate: Rate,
    limiter: Keyed<C>,
}

impl<C: Clock + Clone> Limit<C> {
    fn new(rate: Rate, clock: C) -> Self {
        let quota = Quota::per_second(rate.per_second).allow_burst(rate.burst);
        Limit {
            rate,
            limiter: Gcra::new(quota, DefaultKeyedStateStore::default(), clock),
        }
    }

    /// Counts one for `key`, or says how long until the next is allowed.
    fn check(&self, counted: Counted, scope: Scope, key: &str) -> Result<(), ToolError> {
        self.limiter
            .check_key(&key.to_owned())
            .map_err(|not_until| {
                let wait = not_until.wait_time_from(self.limiter.clock().now());
                refused(counted, scope, key, self.rate, wait)
            })
    }
}

/// The four limits (tool calls and writes, per token and per identity) of
/// [`RateLimits`], or none when `enabled` is false.
pub struct RateLimiter<C: Clock + Clone = DefaultClock> {
    limits: Option<[Limit<C>; 4]>,
}

impl RateLimiter {
    /// The limits of `settings` on the monotonic clock.
    pub fn new(settings: &RateLimits) -> Self {
        Self::with_clock(settings, DefaultClock::default())
    }
}

impl<C: Clock + Clone> RateLimiter<C> {
    /// The limits of `settings` on `clock` (a test's `FakeRelativeClock`).
    pub fn with_clock(settings: &RateLimits, clock: C) -> Self {
        RateLimiter {
            limits: settings.enabled.then(|| {
                [
                    Limit::new(settings.token.tool_calls, clock.clone()),
                    Limit::new(settings.identity.tool_calls, clock.clone()),
                    Limit::new(settings.token.writes, clock.clone()),
                    Limit::new(settings.identity.writes, clock),
                ]
            }),
        }
    }

    /// Counts one `counted` of `token` (its public id) and of `identity` (its name):
    /// the token's limit first, then the identity's. Errors: `rate_limited`, naming
    /// the limit that refused, with its wait (a call the identity's limit refuses
    /// still counted for the token).
    pub fn check(&self, counted: Counted, token: &str, identity: &str) -> Result<(), ToolError> {
        let Some(limits) = &self.limits else {
            return Ok(());
        };
        let (by_token, by_identity) = match counted {
            Counted::ToolCalls => (&limits[0], &limits[1]),
            Counted::Writes => (&limits[2], &limits[3]),
        };
        by_token.check(counted, Scope::Token, token)?;
        by_identity.check(counted, Scope::Identity, identity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;
    use mc_adapters::rate_limit::ScopeLimits;
    use std::time::Duration;

    fn limits(token: Rate, identity: Rate) -> RateLimits {
        RateLimits {
            enabled: true,
            token: ScopeLimits {
                tool_calls: token,
                writes: token,
            },
            identity: ScopeLimits {
                tool_calls: identity,
                writes: identity,
            },
        }
    }

    #[test]
    fn a_burst_over_the_limit_is_refused_and_the_next_call_after_the_wait_is_served() {
        let clock = FakeRelativeClock::default();
        let limiter =
            RateLimiter::with_clock(&limits(Rate::new(2, 3), Rate::new(100, 100)), clock.clone());
        for _ in 0..3 {
            limiter.check(Counted::ToolCalls, "t1", "bot").unwrap();
        }
        let refused = limiter.check(Counted::ToolCalls, "t1", "bot").unwrap_err();
        assert_eq!(refused.kind(), "rate_limited");
        // One every 500 ms once the burst is spent.
        assert_eq!(refused.retry_after_ms(), Some(500));
        assert!(refused.message().contains("for token t1"), "{refused}");
        clock.advance(Duration::from_millis(499));
        let again = limiter.check(Counted::ToolCalls, "t1", "bot").unwrap_err();
        assert_eq!(again.retry_after_ms(), Some(1));
        clock.advance(Duration::from_millis(1));
        limiter.check(Counted::ToolCalls, "t1", "bot").unwrap();
        assert!(limiter.check(Counted::ToolCalls, "t1", "bot").is_err());
    }

    #[test]
    fn one_tokens_limit_does_not_limit_another_token_nor_writes_tool_calls() {
        let limiter = RateLimiter::with_clock(
            &limits(Rate::new(1, 1), Rate::new(100, 100)),
            FakeRelativeClock::default(),
        );
        limiter.check(Counted::ToolCalls, "t1", "bot").unwrap();
        assert!(limiter.check(Counted::ToolCalls, "t1", "bot").is_err());
        limiter.check(Counted::ToolCalls, "t2", "bot").unwrap();
        limiter.check(Counted::Writes, "t1", "bot").unwrap();
        assert!(limiter.check(Counted::Writes, "t1", "bot").is_err());
    }

    #[test]
    fn an_identitys_limit_holds_across_its_tokens_and_not_for_another_identity() {
        let limiter = RateLimiter::with_clock(
            &limits(Rate::new(100, 100), Rate::new(1, 2)),
            FakeRelativeClock::default(),
        );
        limiter.check(Counted::Writes, "t1", "bot").unwrap();
        limiter.check(Counted::Writes, "t2", "bot").unwrap();
        let refused = limiter.check(Counted::Writes, "t3", "bot").unwrap_err();
        assert_eq!(refused.kind(), "rate_limited");
        assert!(
            refused
                .message()
                .starts_with("too many Matrix writes for identity bot: "),
            "{refused}"
        );
        assert_eq!(refused.retry_after_ms(), Some(1_000));
        limiter.check(Counted::Writes, "t3", "other").unwrap();
        limiter.check(Counted::ToolCalls, "t3", "bot").unwrap();
    }

    #[test]
    fn disabled_limits_refuse_nothing() {
        let mut settings = limits(Rate::new(1, 1), Rate::new(1, 1));
        settings.enabled = false;
        let limiter = RateLimiter::with_clock(&settings, FakeRelativeClock::default());
        for _ in 0..10 {
            limiter.check(Counted::ToolCalls, "t1", "bot").unwrap();
            limiter.check(Counted::Writes, "t1", "bot").unwrap();
        }
    }
}
