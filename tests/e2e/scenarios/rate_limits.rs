//! The rate limits against the real server (issue 28, "Rate limits"; decision 0032),
//! with small limits set in its config: a burst of tool calls over a token's limit is
//! refused `rate_limited` with a `retry_after_ms`, another token of the same identity
//! is still served, and after waiting `retry_after_ms` the next call is served;
//! writes over an identity's limit are refused across its tokens and never reach the
//! room. (The homeserver's 429 mapped to `rate_limited`: `write::tests`, on ruma's
//! reading of a real 429 answer.)

use crate::harness::fixture::{Fixture, IDENTITY};
use crate::harness::mcp::McpClient;
use crate::harness::random_suffix;
use serde_json::{json, Value};
use std::time::Duration;

/// At most this many calls beyond the burst before one must be refused: the calls
/// of a burst come milliseconds apart, and the limits here refill one a second.
const SLACK: usize = 20;

/// Calls `tool` with `args(i)` for i = 0, 1, … until a call is refused: how many
/// were served before, and the refusal's `structuredContent.error`. Panics on any
/// other error, or when `most` calls are all served.
async fn until_refused(
    clients: &[&McpClient],
    tool: &str,
    args: impl Fn(usize) -> Value,
    most: usize,
) -> (usize, Value) {
    for i in 0..most {
        let client = clients[i % clients.len()];
        let result = client
            .call(tool, args(i))
            .await
            .unwrap_or_else(|e| panic!("{tool} #{i}: a tool result, not a protocol error: {e}"));
        if result["isError"] == true {
            let error = result["structuredContent"]["error"].clone();
            assert_eq!(error["kind"], "rate_limited", "{tool} #{i}: {result}");
            return (i, error);
        }
    }
    panic!("{most} calls of {tool} were all served: no limit")
}

/// The refusal's `retry_after_ms`, checked: more than 0 and at most a second (the
/// limits here refill one a second).
fn retry_after(error: &Value) -> Duration {
    let ms = error["retry_after_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("retry_after_ms: {error}"));
    assert!((1..=1_000).contains(&ms), "{error}");
    Duration::from_millis(ms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_over_a_tokens_limit_is_refused_another_token_is_served_and_after_the_wait_the_next_call(
) {
    let f = Fixture::start(|config| {
        config.rate_limits = Some(
            "[rate_limits.token]\ntool_calls_per_second = 1\ntool_call_burst = 3\n".to_owned(),
        );
    })
    .await;
    let first = McpClient::spawn("first").await;
    first
        .connect(&f.server.url("/mcp"), f.server.token(IDENTITY))
        .await;
    // Another token of the same identity, ready before the burst (so that nothing
    // slow comes between the refusal and the wait it gives).
    let token = f.server.create_token(IDENTITY, "second").await;
    let second = McpClient::spawn("second").await;
    second.connect(&f.server.url("/mcp"), &token).await;

    let (served, error) = until_refused(&[&first], "whoami", |_| json!({}), 3 + SLACK).await;
    assert!(
        served >= 3,
        "the burst of 3 was served: {served}, then {error}"
    );
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with("too many tool calls for token ")
            && message.contains("the limit is 1 a second with a burst of 3"),
        "{error}"
    );
    let wait = retry_after(&error);

    // The other token has a limit of its own.
    let whoami = second.call_ok("whoami", json!({})).await;
    assert_eq!(whoami["user_id"], f.bot.user_id.as_str(), "{whoami}");

    // The wait under test: what the refusal said.
    tokio::time::sleep(wait).await;
    let whoami = first.call_ok("whoami", json!({})).await;
    assert_eq!(whoami["user_id"], f.bot.user_id.as_str(), "{whoami}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_over_an_identitys_limit_are_refused_across_its_tokens_and_never_reach_the_room() {
    let f = Fixture::start(|config| {
        config.rate_limits =
            Some("[rate_limits.identity]\nwrites_per_second = 1\nwrite_burst = 2\n".to_owned());
    })
    .await;
    let first = McpClient::spawn("first").await;
    first
        .connect(&f.server.url("/mcp"), f.server.token(IDENTITY))
        .await;
    let token = f.server.create_token(IDENTITY, "second").await;
    let second = McpClient::spawn("second").await;
    second.connect(&f.server.url("/mcp"), &token).await;

    let tag = random_suffix();
    let text = |i: usize| format!("write {i} of {tag}");
    let (served, error) = until_refused(
        &[&first, &second],
        "send_message",
        |i| json!({"room_id": f.room, "text": text(i)}),
        2 + SLACK,
    )
    .await;
    assert!(
        served >= 2,
        "the burst of 2 was served: {served}, then {error}"
    );
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with(&format!("too many Matrix writes for identity {IDENTITY}: ")),
        "{error}"
    );
    let wait = retry_after(&error);
    // The wait under test: what the refusal said.
    tokio::time::sleep(wait).await;
    let after = format!("after the wait, {tag}");
    first
        .call_ok("send_message", json!({"room_id": f.room, "text": after}))
        .await;

    // The room has every served write and the one after the wait, in order, and not
    // the refused one (sent before the last, so it would be there by now).
    let page = f.human.messages(&f.room, "b", 100, None).await;
    let mut bodies: Vec<String> = page["chunk"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["sender"] == f.bot.user_id.as_str())
        .filter_map(|e| e["content"]["body"].as_str().map(str::to_owned))
        .filter(|b| b.contains(&tag))
        .collect();
    bodies.reverse();
    let mut expected: Vec<String> = (0..served).map(text).collect();
    expected.push(after);
    assert_eq!(bodies, expected);
}
