//! Scenario 3: the session sends a `permission_request`; the prompt appears in the
//! room as the human's client sees it, with the request id. `yes <id>` gives `allow`,
//! `no <id>` gives `deny`, a stranger's `yes <id>` gives nothing, a second `yes <id>`
//! gives nothing more, and each prompt message is edited to its outcome.

use crate::harness::expect::{
    asker, assert_push, assert_verdict, message, outcome_html, outcome_plain, permission_request,
    prompt_html, prompt_plain, Answer, PERMISSION_REQUEST,
};
use crate::harness::fixture::Fixture;
use crate::harness::{QUIET, WAIT};

const TOOL: &str = "Bash";
const DESCRIPTION: &str = "List the files & folders";
const PREVIEW: &str = r#"{"command": "ls -la <dir>"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_is_answered_by_the_humans_yes_or_no_once_and_never_by_a_stranger() {
    let f = Fixture::start(|_| {}).await;
    let (session, _) = f.channel("session").await;
    let (room, human) = (&f.room, &f.human);
    let me = human.user_id.as_str();

    // yes <id> allows.
    let id = "kqzpw";
    session
        .notify(
            PERMISSION_REQUEST,
            permission_request(id, TOOL, DESCRIPTION, PREVIEW),
        )
        .await;
    let prompt = f.wait_prompt(id).await;
    let content = &prompt["content"];
    assert_eq!(content["msgtype"], "m.text", "{prompt}");
    let who = asker(content["body"].as_str().unwrap_or_default(), id);
    assert_eq!(who, None, "an unlabelled session is not named");
    assert_eq!(
        content["body"],
        prompt_plain(id, who.as_deref(), TOOL, DESCRIPTION, PREVIEW)
    );
    assert_eq!(content["format"], "org.matrix.custom.html");
    assert_eq!(
        content["formatted_body"],
        prompt_html(id, who.as_deref(), TOOL, DESCRIPTION, PREVIEW)
    );
    let prompt_id = prompt["event_id"].as_str().unwrap().to_owned();
    human.send_text(room, &format!("yes {id}")).await;
    assert_verdict(&session.next_notification(WAIT).await, id, "allow");
    let answer = Answer::AllowedByReply { by: me };
    f.wait_outcome(
        &prompt_id,
        &outcome_plain(id, TOOL, &answer),
        &outcome_html(id, TOOL, &answer),
    )
    .await;

    // no <id> denies (phones capitalise the first letter).
    let id = "mnbvc";
    session
        .notify(
            PERMISSION_REQUEST,
            permission_request(id, TOOL, DESCRIPTION, PREVIEW),
        )
        .await;
    let prompt_id = f.wait_prompt(id).await["event_id"]
        .as_str()
        .unwrap()
        .to_owned();
    human.send_text(room, &format!("No {id}")).await;
    assert_verdict(&session.next_notification(WAIT).await, id, "deny");
    let answer = Answer::DeniedByReply { by: me };
    f.wait_outcome(
        &prompt_id,
        &outcome_plain(id, TOOL, &answer),
        &outcome_html(id, TOOL, &answer),
    )
    .await;

    // A stranger's yes gives nothing: the human's later message arrives first.
    let id = "hjkfd";
    session
        .notify(
            PERMISSION_REQUEST,
            permission_request(id, TOOL, DESCRIPTION, PREVIEW),
        )
        .await;
    let prompt_id = f.wait_prompt(id).await["event_id"]
        .as_str()
        .unwrap()
        .to_owned();
    f.stranger.send_text(room, &format!("yes {id}")).await;
    let marker = human.send_text(room, "still thinking").await;
    assert_push(
        &session.next_notification(WAIT).await,
        &message("still thinking", &f.origin(&marker).await),
    );

    // The human's yes then allows, once.
    human.send_text(room, &format!("yes {id}")).await;
    assert_verdict(&session.next_notification(WAIT).await, id, "allow");
    let answer = Answer::AllowedByReply { by: me };
    f.wait_outcome(
        &prompt_id,
        &outcome_plain(id, TOOL, &answer),
        &outcome_html(id, TOOL, &answer),
    )
    .await;
    let again = human.send_text(room, &format!("yes {id}")).await;
    let marker = human.send_text(room, "done").await;
    assert_push(
        &session.next_notification(WAIT).await,
        &message("done", &f.origin(&marker).await),
    );
    // The human is told why the second yes did nothing: a notice replying to it.
    let bot = f.bot.user_id.as_str();
    human
        .wait_for_event(room, "the notice answering the second yes", |e| {
            e["sender"] == bot
                && e["content"]["msgtype"] == "m.notice"
                && e["content"]["m.relates_to"]["m.in_reply_to"]["event_id"] == again.as_str()
                && e["content"]["body"]
                    .as_str()
                    .is_some_and(|b| b.contains(id))
        })
        .await;
    session.expect_no_notification(QUIET).await;
}
