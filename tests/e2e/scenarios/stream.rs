//! Scenario 8: the client's event stream is cut and reopened between pushes and every
//! push arrives exactly once; with the idle limit set short, a session idle past it
//! still receives the next push.

use crate::harness::expect::{assert_push, message, replayed, Origin, CHANNEL};
use crate::harness::fixture::{Fixture, IDENTITY};
use crate::harness::mcp::{McpClient, Notification};
use crate::harness::proxy::Proxy;
use crate::harness::{QUIET, WAIT};
use serde_json::Value;
use std::time::Duration;

const IDLE_SECS: u64 = 3;

/// A push sent while the stream was down may be replayed from the server's queue
/// (then `replayed: "true"`, the model's replay) or resumed from its event store
/// (then exactly as sent live). Either is one delivery; the rest must match exactly.
#[track_caller]
fn assert_push_maybe_replayed(actual: &Notification, expected: Value) {
    if actual.params["meta"]["replayed"] == "true" {
        assert_push(actual, &replayed(expected));
    } else {
        assert_push(actual, &expected);
    }
}

async fn said(f: &Fixture, text: &str) -> (String, Origin) {
    let id = f.human.send_text(&f.room, text).await;
    let origin = f.origin(&id).await;
    (id, origin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_push_arrives_once_across_a_cut_stream_and_after_idling_past_the_limit() {
    let f = Fixture::start(|config| config.session_idle_secs = Some(IDLE_SECS)).await;
    let proxy = Proxy::start(f.server.addr()).await;
    let session = McpClient::spawn("session").await;
    session
        .connect(&proxy.url("/channel"), f.server.token(IDENTITY))
        .await;

    let (one, origin) = said(&f, "before the cut").await;
    assert_push(
        &session.next_notification(WAIT).await,
        &message("before the cut", &origin),
    );

    // Cut between pushes; two messages arrive while the stream is down (the SDK waits
    // for the server's retry hint, 3 s, before it reconnects).
    let gets_before = count_gets(&session);
    proxy.cut();
    let (two, origin_two) = said(&f, "during the cut, one").await;
    let (three, origin_three) = said(&f, "during the cut, two").await;
    assert_push_maybe_replayed(
        &session.next_notification(WAIT).await,
        message("during the cut, one", &origin_two),
    );
    assert_push_maybe_replayed(
        &session.next_notification(WAIT).await,
        message("during the cut, two", &origin_three),
    );
    assert!(
        count_gets(&session) > gets_before,
        "the client reopened its event stream after the cut"
    );
    let (four, origin) = said(&f, "after the reconnect").await;
    assert_push(
        &session.next_notification(WAIT).await,
        &message("after the reconnect", &origin),
    );
    session.expect_no_notification(QUIET).await;

    // Idle well past the limit (and past the SDK's reconnect delay); the next push
    // still arrives, once. Not a barrier: the behaviour under test is the passing of
    // time (the session's idle limit, `session_idle_secs`), so real time passes.
    tokio::time::sleep(Duration::from_secs(3 * IDLE_SECS)).await;
    let (five, origin) = said(&f, "after idling").await;
    assert_push_maybe_replayed(
        &session.next_notification(WAIT).await,
        message("after idling", &origin),
    );
    session.expect_no_notification(QUIET).await;

    let pushed: Vec<String> = session
        .notifications_matching(CHANNEL)
        .iter()
        .map(|n| {
            n.params["meta"]["event_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(
        pushed,
        [one, two, three, four, five],
        "each push exactly once, in order"
    );
}

/// GET requests the client made that the server answered 200.
fn count_gets(client: &McpClient) -> usize {
    client
        .events()
        .iter()
        .filter(|e| e["event"] == "http" && e["method"] == "GET" && e["status"] == 200)
        .count()
}
