//! Scenario 2: a reply, an edit, a reaction, a redaction and a thread message each
//! arrive as what they are (`model/src/render.rs`).

use crate::harness::expect::{assert_push, message, push};
use crate::harness::fixture::Fixture;
use crate::harness::{QUIET, WAIT};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_an_edit_a_reaction_a_redaction_and_a_thread_message_each_arrive_as_what_they_are()
{
    let f = Fixture::start(|_| {}).await;
    let (session, _) = f.channel("session").await;
    let (room, human) = (&f.room, &f.human);

    let first = human.send_text(room, "first words").await;
    let got = session.next_notification(WAIT).await;
    assert_push(&got, &message("first words", &f.origin(&first).await));

    // A rich reply: its own text (the fallback stripped), and the parent quoted in meta.
    let reply = human.reply(room, &first, "a reply").await;
    let got = session.next_notification(WAIT).await;
    assert_push(
        &got,
        &push(
            "message",
            "a reply",
            &f.origin(&reply).await,
            json!({
                "msgtype": "m.text",
                "in_reply_to": first,
                "in_reply_to_status": "quoted",
                "in_reply_to_trust": "allowed",
                "in_reply_to_sender": human.user_id,
                "in_reply_to_quote": "first words",
            }),
        ),
    );

    // An edit: the new content, never the "* " fallback.
    let edit = human.edit(room, &first, "first words, edited").await;
    let got = session.next_notification(WAIT).await;
    assert_push(
        &got,
        &push(
            "edit",
            "first words, edited",
            &f.origin(&edit).await,
            json!({ "edit_of": first, "msgtype": "m.text" }),
        ),
    );

    // A reaction that is not a verdict: its raw key and target.
    let reaction = human.react(room, &first, "\u{1F389}").await;
    let got = session.next_notification(WAIT).await;
    assert_push(
        &got,
        &push(
            "reaction",
            "reacted \u{1F389}",
            &f.bare_origin(&reaction).await,
            json!({ "reaction_key": "\u{1F389}", "reacted_to": first }),
        ),
    );

    // A redaction of something pushed: a retraction.
    let redaction = human.redact(room, &reply, Some("wrong thread")).await;
    let got = session.next_notification(WAIT).await;
    assert_push(
        &got,
        &push(
            "retraction",
            "retracted an earlier event (see redacts)",
            &f.bare_origin(&redaction).await,
            json!({ "redacts": reply }),
        ),
    );

    // A thread message (is_falling_back: its m.in_reply_to is no reply).
    let threaded = human.send_thread(room, &first, "in a thread").await;
    let got = session.next_notification(WAIT).await;
    assert_push(
        &got,
        &push(
            "message",
            "in a thread",
            &f.origin(&threaded).await,
            json!({ "msgtype": "m.text", "thread_root": first }),
        ),
    );

    session.expect_no_notification(QUIET).await;
}
