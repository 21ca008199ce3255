//! Withdrawn prompts (docs/decisions/0030-withdrawn-prompts.md), against real
//! Synapse: the session's event stream closes with a prompt pending (as when Claude
//! Code exits: no DELETE), the prompt is edited to say so, an answer to it gets a
//! notice and no verdict; the session resumes, the prompt shows as asked again and
//! the next answer reaches it.

use crate::harness::expect::{assert_verdict, permission_request, PERMISSION_REQUEST};
use crate::harness::fixture::{Fixture, IDENTITY};
use crate::harness::{QUIET, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stream_withdraws_its_prompt_and_resuming_opens_it_again() {
    let f = Fixture::start(|_| {}).await;
    let (session, connected) = f.channel("session").await;
    let id = "wxyzb";
    session
        .notify(
            PERMISSION_REQUEST,
            permission_request(id, "Bash", "Run the tests", r#"{"command":"cargo test"}"#),
        )
        .await;
    let prompt = f.wait_prompt(id).await;
    let prompt_id = prompt["event_id"].as_str().unwrap().to_owned();
    let asked_plain = prompt["content"]["body"].as_str().unwrap().to_owned();
    let asked_html = prompt["content"]["formatted_body"]
        .as_str()
        .unwrap()
        .to_owned();
    let why = "The session that asked disconnected, so an answer here counts for nothing. \
               This prompt opens again if the session connects again.";

    session.close().await;
    f.wait_outcome(
        &prompt_id,
        &format!("⏸ Withdrawn: permission request {id} (Bash). {why}"),
        &format!(
            "<p>⏸ Withdrawn: permission request <code>{id}</code> (<b>Bash</b>).</p><p>{why}</p>"
        ),
    )
    .await;

    let yes = f.human.send_text(&f.room, &format!("yes {id}")).await;
    let bot = f.bot.user_id.clone();
    let notice = f
        .human
        .wait_for_event(&f.room, "the notice on the withdrawn answer", |e| {
            e["sender"] == bot.as_str()
                && e["content"]["msgtype"] == "m.notice"
                && e["content"]["m.relates_to"]["m.in_reply_to"]["event_id"] == yes.as_str()
        })
        .await;
    assert!(
        notice["content"]["body"]
            .as_str()
            .is_some_and(|b| b.contains(&format!("Permission request {id} is withdrawn: "))),
        "{notice}"
    );

    session
        .resume(
            &f.server.url("/channel"),
            f.server.token(IDENTITY),
            &connected.session_id,
            connected.protocol_version.as_deref(),
            None,
        )
        .await
        .expect("the session resumes");
    // The newest edit shows the prompt as asked (the human's client shows the last one).
    let reopened = f
        .human
        .wait_for_event(&f.room, "the prompt shown again", |e| {
            e["sender"] == bot.as_str()
                && e["content"]["m.relates_to"]["rel_type"] == "m.replace"
                && e["content"]["m.relates_to"]["event_id"] == prompt_id.as_str()
                && e["content"]["m.new_content"]["body"] == asked_plain.as_str()
        })
        .await;
    assert_eq!(
        reopened["content"]["m.new_content"]["formatted_body"],
        asked_html.as_str()
    );
    // The answer given while it was withdrawn did not reach the session.
    let early = session.try_next_notification(QUIET).await;
    assert!(
        early.is_none(),
        "nothing reaches the session for the withdrawn answer: {early:?}"
    );
    f.human.send_text(&f.room, &format!("no {id}")).await;
    assert_verdict(&session.next_notification(WAIT).await, id, "deny");
}
