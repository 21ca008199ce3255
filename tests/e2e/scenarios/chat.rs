//! Scenario 1: the human writes in the room and the session gets one push with the
//! right meta; a stranger's message gets nothing.

use crate::harness::expect::{assert_push, message};
use crate::harness::fixture::{Fixture, IDENTITY};
use crate::harness::{QUIET, WAIT};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_humans_message_arrives_once_with_its_meta_and_a_strangers_message_never_does() {
    let f = Fixture::start(|_| {}).await;
    let (session, connected) = f.channel("session").await;

    // What Claude Code needs to register the channel.
    assert_eq!(connected.protocol_version.as_deref(), Some("2025-11-25"));
    assert_eq!(
        connected.server_capabilities["experimental"],
        json!({ "claude/channel": {}, "claude/channel/permission": {} }),
        "the identity has approvers (its allowed senders), so both capabilities are declared"
    );
    let instructions = connected
        .instructions
        .expect("the server sends instructions");
    assert!(
        instructions.len() <= 2048,
        "instructions are {} bytes; Claude Code cuts at 2,048",
        instructions.len()
    );

    // The stranger writes first (with the human's display name); then the human.
    f.stranger.send_text(&f.room, "hello from a stranger").await;
    let hello = f.human.send_text(&f.room, "hello from Ada").await;
    let push = session.next_notification(WAIT).await;
    assert_push(&push, &message("hello from Ada", &f.origin(&hello).await));
    assert_eq!(
        push.security.as_deref(),
        Some(mc_model::SECURITY_POINTER),
        "the session's first push carries the security pointer (issue 14, item 4)"
    );
    session.expect_no_notification(QUIET).await;

    // The session can answer in the room; its own message is not pushed back to it.
    let whoami = session.call_ok("whoami", json!({})).await;
    assert_eq!(whoami["identity"], IDENTITY);
    assert_eq!(whoami["user_id"], f.bot.user_id.as_str());
    let sent = session
        .call_ok(
            "send_message",
            json!({ "room_id": f.room, "text": "hello, Ada" }),
        )
        .await;
    let ids = sent["event_ids"].as_array().expect("event_ids");
    assert_eq!(ids.len(), 1, "one short message is one event: {sent}");
    let event = f.human.event(&f.room, ids[0].as_str().unwrap()).await;
    assert_eq!(event["sender"], f.bot.user_id.as_str());
    assert_eq!(event["content"]["msgtype"], "m.text");
    assert_eq!(event["content"]["body"], "hello, Ada");
    let marker = f.human.send_text(&f.room, "thanks").await;
    let push = session.next_notification(WAIT).await;
    assert_push(&push, &message("thanks", &f.origin(&marker).await));
    assert_eq!(
        push.security, None,
        "only the first push carries the pointer"
    );
    session.expect_no_notification(QUIET).await;
}
