//! Scenario 5: messages sent while no session is attached are replayed once to the
//! next session; re-attaching gives no duplicates; acknowledged messages are not
//! replayed.

use crate::harness::expect::{assert_push, message, replayed, CHANNEL};
use crate::harness::fixture::{Fixture, IDENTITY};
use crate::harness::mcp::McpClient;
use crate::harness::{QUIET, WAIT};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_arrives_while_no_session_is_attached_is_replayed_once_and_never_once_acknowledged() {
    let f = Fixture::start(|_| {}).await;
    let (room, human) = (&f.room, &f.human);

    // Nobody is attached: both queue, then replay oldest first to the first session.
    let one = human.send_text(room, "while nobody listens, one").await;
    let two = human.send_text(room, "while nobody listens, two").await;
    f.sync_barrier().await;
    let (first, connected) = f.channel("first").await;
    assert_push(
        &first.next_notification(WAIT).await,
        &replayed(message("while nobody listens, one", &f.origin(&one).await)),
    );
    assert_push(
        &first.next_notification(WAIT).await,
        &replayed(message("while nobody listens, two", &f.origin(&two).await)),
    );
    first.expect_no_notification(QUIET).await;

    // Another session attaching gets no replay: the next push is live.
    first.close().await;
    let (second, _) = f.channel("second").await;
    let three = human.send_text(room, "live again").await;
    assert_push(
        &second.next_notification(WAIT).await,
        &message("live again", &f.origin(&three).await),
    );
    second.expect_no_notification(QUIET).await;

    // The first session re-attaching (same session id, as Claude Code resumes) gets
    // no duplicates either.
    first
        .resume(
            &f.server.url("/channel"),
            f.server.token(IDENTITY),
            &connected.session_id,
            connected.protocol_version.as_deref(),
            None,
        )
        .await
        .expect("the first session is still known");
    first.expect_no_notification(QUIET).await;

    // Nobody attached again; the agent acknowledges one queued message with a tool
    // (on /mcp, no channel stream) before a channel session attaches.
    first.close().await;
    second.close().await;
    let acked = human.send_text(room, "read with a tool already").await;
    let kept = human.send_text(room, "not acknowledged").await;
    f.sync_barrier().await;
    let tools = McpClient::spawn("tools").await;
    tools
        .connect(&f.server.url("/mcp"), f.server.token(IDENTITY))
        .await;
    let ack = tools
        .call_ok("acknowledge", json!({ "event_id": acked }))
        .await;
    assert_eq!(ack["acknowledged"], true, "{ack}");
    let (third, _) = f.channel("third").await;
    assert_push(
        &third.next_notification(WAIT).await,
        &replayed(message("not acknowledged", &f.origin(&kept).await)),
    );
    third.expect_no_notification(QUIET).await;
    assert!(
        tools.notifications_matching(CHANNEL).is_empty(),
        "the /mcp session is no channel: it gets no pushes"
    );
}
