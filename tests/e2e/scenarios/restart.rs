//! Scenario 6: the server is killed (SIGKILL) with a prompt pending and restarted;
//! `yes <id>` still reaches the session once it re-attaches.

use crate::harness::expect::{
    assert_push, assert_verdict, message, outcome_html, outcome_plain, permission_request, Answer,
    PERMISSION_REQUEST,
};
use crate::harness::fixture::{Fixture, IDENTITY};
use crate::harness::{QUIET, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_prompt_survives_sigkill_and_its_verdict_reaches_the_session_when_it_reattaches()
{
    let mut f = Fixture::start(|_| {}).await;
    let (session, connected) = f.channel("session").await;

    let id = "pqrst";
    session
        .notify(
            PERMISSION_REQUEST,
            permission_request(id, "Bash", "Run the tests", "{}"),
        )
        .await;
    let prompt_id = f.wait_prompt(id).await["event_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The prompt is in the room; wait until the server recorded that it was posted
    // (nothing a human sees says so): the post's outcome, with the prompt's event id,
    // is in the engine's journal. A kill before that is another test.
    f.server
        .wait_journaled("the prompt's post outcome", |input| {
            input["type"] == "completed"
                && input["outcome"]["outcome"] == "posted"
                && input["outcome"]["event_id"] == prompt_id.as_str()
        })
        .await;

    f.server.kill9().await;
    // Claude Code keeps its session id and reconnects; the client here stops its own
    // retries and resumes explicitly below, after the answer.
    session.close().await;
    f.server.restart().await;
    let yes = f.human.send_text(&f.room, &format!("yes {id}")).await;
    // The restarted server takes the answer in while the session is away (its input,
    // with the answer's event id, is in the engine's journal), so the verdict waits
    // for the session.
    f.server
        .wait_journaled("the answer", |input| {
            input["type"] == "message" && input["message"]["event_id"] == yes.as_str()
        })
        .await;

    session
        .resume(
            &f.server.url("/channel"),
            f.server.token(IDENTITY),
            &connected.session_id,
            connected.protocol_version.as_deref(),
            None,
        )
        .await
        .expect("the session survives the restart");
    assert_verdict(&session.next_notification(WAIT).await, id, "allow");
    let answer = Answer::AllowedByReply {
        by: &f.human.user_id,
    };
    f.wait_outcome(
        &prompt_id,
        &outcome_plain(id, "Bash", &answer),
        &outcome_html(id, "Bash", &answer),
    )
    .await;

    // The restored session is a channel as before.
    let after = f.human.send_text(&f.room, "welcome back").await;
    assert_push(
        &session.next_notification(WAIT).await,
        &message("welcome back", &f.origin(&after).await),
    );
    session.expect_no_notification(QUIET).await;
}
