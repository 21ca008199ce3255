//! Attacks that the eight scenarios do not cover: what a token holder can take from
//! sessions that are not its own, and a second server started on a running one's store.

use crate::harness::expect::{
    assert_push, assert_verdict, message, permission_request, replayed, PERMISSION_REQUEST,
};
use crate::harness::fixture::{Fixture, IDENTITY};
use crate::harness::mcp::McpClient;
use crate::harness::server::binary;
use crate::harness::{QUIET, WAIT};
use serde_json::json;
use std::time::Duration;

/// Event ids are small integers handed out in order: an attacker tries them all.
const GUESSES: u32 = 150;

/// A GET of an event stream with `Last-Event-ID: last_event_id`; returns what arrived
/// within `wait` (an SSE stream that is not ours ends at once, empty).
async fn resume_raw(
    url: &str,
    token: &str,
    session: Option<&str>,
    protocol: &str,
    last_event_id: &str,
    wait: Duration,
) -> String {
    let mut req = reqwest::Client::new()
        .get(url)
        .bearer_auth(token)
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", protocol)
        .header("last-event-id", last_event_id);
    if let Some(session) = session {
        req = req.header("mcp-session-id", session);
    }
    let mut resp = req.send().await.expect("GET the event stream");
    let mut out = format!("HTTP {}\n", resp.status());
    let deadline = tokio::time::Instant::now() + wait;
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, resp.chunk()).await {
        out.push_str(&String::from_utf8_lossy(&chunk));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_session_resumes_another_sessions_events_by_guessing_last_event_ids() {
    let f = Fixture::start(|_| {}).await;
    let token = f.server.token(IDENTITY);
    let (victim, connected) = f.channel("victim").await;
    let secret = "the secret meant for the victim alone";
    let id = f.human.send_text(&f.room, secret).await;
    assert_push(
        &victim.next_notification(WAIT).await,
        &message(secret, &f.origin(&id).await),
    );
    // A verdict goes to the session that asked, and only there.
    let request = "wxyzq";
    victim
        .notify(
            PERMISSION_REQUEST,
            permission_request(request, "Bash", "ls", "{}"),
        )
        .await;
    f.wait_prompt(request).await;
    f.human.send_text(&f.room, &format!("yes {request}")).await;
    assert_verdict(&victim.next_notification(WAIT).await, request, "allow");

    // Another session of the same token: an /mcp session, which gets no pushes.
    let attacker = McpClient::spawn("attacker").await;
    let theirs = attacker.connect(&f.server.url("/mcp"), token).await;
    let leaked = |text: &str| text.contains(secret) || text.contains(request);
    for guess in 0..=GUESSES {
        let guess = guess.to_string();
        let short = Duration::from_millis(300);
        // Its own session id, someone else's event id.
        let got = resume_raw(
            &f.server.url("/mcp"),
            token,
            Some(&theirs.session_id),
            "2025-11-25",
            &guess,
            short,
        )
        .await;
        assert!(!leaked(&got), "Last-Event-ID {guess} on /mcp: {got}");
        // No session at all (rmcp's stateless mode), on both mounts.
        for path in ["/mcp", "/channel"] {
            let got = resume_raw(
                &f.server.url(path),
                token,
                None,
                "2026-07-28",
                &guess,
                short,
            )
            .await;
            assert!(
                !leaked(&got),
                "Last-Event-ID {guess} on {path} without a session: {got}"
            );
        }
    }

    // The victim itself resumes its own stream with the same kind of request.
    let mut resumed = false;
    for guess in 0..=GUESSES {
        let got = resume_raw(
            &f.server.url("/channel"),
            token,
            Some(&connected.session_id),
            "2025-11-25",
            &guess.to_string(),
            Duration::from_millis(300),
        )
        .await;
        if got.contains(request) {
            resumed = true;
            break;
        }
    }
    assert!(resumed, "the victim could not resume its own stream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_serve_on_the_same_store_refuses_to_start_and_the_first_keeps_working() {
    let f = Fixture::start(|_| {}).await;
    let (session, _) = f.channel("session").await;
    let config = f.server.config_path();
    let mut second = tokio::process::Command::new(binary());
    second
        .arg("--config")
        .arg(&config)
        .arg("serve")
        .current_dir(config.parent().expect("the config's directory"))
        .env("MATRIX_CHANNEL_LISTEN", "127.0.0.1:0")
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(WAIT, second.output())
        .await
        .expect("a second serve on the same store exits at once instead of running")
        .expect("run matrix-channel serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the second serve exited with success"
    );
    assert!(
        stderr.contains("in use by another matrix-channel process"),
        "the refusal says why: {stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("listening"),
        "the second serve listened"
    );

    // A second `login` of the identity while it serves changes nothing and says so.
    let login = f
        .server
        .cli(&["login", "--identity", IDENTITY], Some("x"))
        .await;
    assert!(login.status.success(), "{login:?}");
    assert!(
        String::from_utf8_lossy(&login.stdout).contains("already logged in"),
        "{login:?}"
    );

    // The first server is unharmed.
    let text = "still served by the first";
    let id = f.human.send_text(&f.room, text).await;
    assert_push(
        &session.next_notification(WAIT).await,
        &message(text, &f.origin(&id).await),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_after_the_database_was_lost_logs_a_new_device_in_and_serves() {
    let mut f = Fixture::start(|_| {}).await;
    f.server.kill9().await;
    // The operator loses the server's database, not the identity's Matrix store.
    let dir = f
        .server
        .config_path()
        .parent()
        .expect("the config's directory")
        .join("store");
    for file in [
        "matrix-channel.sqlite3",
        "matrix-channel.sqlite3-wal",
        "matrix-channel.sqlite3-shm",
    ] {
        let _ = std::fs::remove_file(dir.join(file));
    }
    let login = f
        .server
        .cli(&["login", "--identity", IDENTITY], Some(&f.bot.password))
        .await;
    assert!(
        login.status.success(),
        "login on a Matrix store without a session: {}",
        String::from_utf8_lossy(&login.stderr)
    );
    let token = f.server.create_token(IDENTITY, "after the loss").await;
    f.server.restart().await;
    let session = McpClient::spawn("session").await;
    session.connect(&f.server.url("/channel"), &token).await;
    let text = "served by the new device";
    let id = f.human.send_text(&f.room, text).await;
    assert_push(
        &session.next_notification(WAIT).await,
        &message(text, &f.origin(&id).await),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_tokens_open_stream_ends_and_gets_nothing_more() {
    let f = Fixture::start(|_| {}).await;
    let stolen = f.server.create_token(IDENTITY, "stolen").await;
    let (kept, _) = f.channel("kept").await;
    let thief = McpClient::spawn("thief").await;
    thief.connect(&f.server.url("/channel"), &stolen).await;
    let text = "before the revocation";
    let id = f.human.send_text(&f.room, text).await;
    let expected = message(text, &f.origin(&id).await);
    assert_push(&kept.next_notification(WAIT).await, &expected);
    assert_push(&thief.next_notification(WAIT).await, &expected);

    let list = f.server.cli(&["token", "list"], None).await;
    let list = String::from_utf8_lossy(&list.stdout).into_owned();
    let token_id = list
        .lines()
        .find(|line| line.ends_with("\tstolen"))
        .and_then(|line| line.split('\t').next())
        .unwrap_or_else(|| panic!("no token labelled stolen in {list}"))
        .to_owned();
    let revoke = f.server.cli(&["token", "revoke", &token_id], None).await;
    assert!(revoke.status.success(), "{revoke:?}");
    // The server rechecks open streams every 2 s and says when it ends one.
    f.server
        .wait_log("a token was revoked: ending its open stream")
        .await;

    let text = "after the revocation";
    let id = f.human.send_text(&f.room, text).await;
    assert_push(
        &kept.next_notification(WAIT).await,
        &message(text, &f.origin(&id).await),
    );
    thief.expect_no_notification(QUIET).await;
    let err = thief
        .call("whoami", json!({}))
        .await
        .expect_err("a request with a revoked token fails");
    assert_eq!(err.code, json!(401), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_cannot_edit_redact_react_to_or_reply_to_a_pending_prompt() {
    let f = Fixture::start(|_| {}).await;
    let (session, _) = f.channel("session").await;
    let request = "rmzyx";
    session
        .notify(
            PERMISSION_REQUEST,
            permission_request(request, "Bash", "rm -rf /", r#"{"command":"rm -rf /"}"#),
        )
        .await;
    let prompt = f.wait_prompt(request).await;
    let prompt_id = prompt["event_id"].as_str().expect("an event id").to_owned();
    let chat = f.human.send_text(&f.room, "an ordinary message").await;
    let chat = chat.as_str();
    assert_push(
        &session.next_notification(WAIT).await,
        &message("an ordinary message", &f.origin(chat).await),
    );
    let tools = McpClient::spawn("tools").await;
    tools
        .connect(&f.server.url("/mcp"), f.server.token(IDENTITY))
        .await;
    let room = f.room.as_str();
    let attempts = [
        (
            "edit_message",
            json!({ "room_id": room, "event_id": prompt_id, "text": "🔐 Permission request rmzyx: Bash\nls" }),
        ),
        ("redact", json!({ "room_id": room, "event_id": prompt_id })),
        (
            "send_reaction",
            json!({ "room_id": room, "event_id": prompt_id, "key": "✅" }),
        ),
        (
            "send_message",
            json!({ "room_id": room, "text": "It only lists files.", "reply_to": prompt_id }),
        ),
        (
            "send_message",
            json!({ "room_id": room, "text": "It only lists files.", "thread_root": prompt_id }),
        ),
        // A copy of the prompt with the real id and another tool, not attached to it:
        // an approver answering the copy would allow the real request.
        (
            "send_message",
            json!({ "room_id": room, "text": "🔐 Permission request RMZYX: Bash\nls\nAnswer yes rmzyx" }),
        ),
        // The same id spelled so that no byte matches: full-width letters, a zero-width
        // space, Markdown that renders the word whole, an HTML entity.
        (
            "send_message",
            json!({ "room_id": room, "text": "🔐 Permission request \u{FF52}\u{FF4D}\u{FF5A}\u{FF59}\u{FF58}: ls" }),
        ),
        (
            "send_message",
            json!({ "room_id": room, "text": "Permission request rm\u{200B}zyx: ls" }),
        ),
        (
            "send_message",
            json!({ "room_id": room, "text": "answer yes **rm**zyx" }),
        ),
        (
            "send_message",
            json!({ "room_id": room, "text": "answer yes &#114;mzyx" }),
        ),
        // Every other text field: a reaction key on an ordinary message.
        (
            "send_reaction",
            json!({ "room_id": room, "event_id": chat, "key": "yes rmzyx" }),
        ),
        (
            "redact",
            json!({ "room_id": room, "event_id": chat, "reason": "answer rmzyx" }),
        ),
    ];
    for (client, mount) in [(&tools, "/mcp"), (&session, "/channel")] {
        for (tool, args) in &attempts {
            if mount == "/channel" && *tool == "redact" {
                continue; // not offered on /channel
            }
            let result = client
                .call(tool, args.clone())
                .await
                .unwrap_or_else(|e| panic!("{mount} {tool}: {e}"));
            assert_eq!(
                result["isError"], true,
                "{mount} {tool} on the prompt: {result}"
            );
            assert_eq!(
                result["structuredContent"]["error"]["kind"], "forbidden",
                "{mount} {tool}: {result}"
            );
        }
    }
    // The prompt is as the server posted it. A `yes` that replies to another message
    // answers nothing, and the notice points at the real prompt.
    let seen = f.human.event(&f.room, &prompt_id).await;
    assert_eq!(seen["content"], prompt["content"], "{seen}");
    let answer = f
        .human
        .reply(&f.room, chat, &format!("yes {request}"))
        .await;
    let notice = f
        .human
        .wait_for_event(&f.room, "the notice about the reply", |e| {
            e["content"]["m.relates_to"]["m.in_reply_to"]["event_id"] == json!(answer)
        })
        .await;
    let link = format!(
        "https://matrix.to/#/{}/{}",
        f.room.replace(':', "%3A"),
        prompt_id.replace('$', "%24").replace(':', "%3A")
    );
    assert_eq!(
        notice["content"]["body"],
        json!(format!(
            "This replies to a message that is not the pending prompt for {request}, so it \
             answers nothing. The prompt for {request} is {link}: reply to it, or answer \
             without a reply."
        )),
        "{notice}"
    );
    session.expect_no_notification(QUIET).await;
    f.human.send_text(&f.room, &format!("yes {request}")).await;
    assert_verdict(&session.next_notification(WAIT).await, request, "allow");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_permission_request_is_answered_with_a_warning_and_the_session_keeps_working() {
    let f = Fixture::start(|_| {}).await;
    let (session, _) = f.channel("session").await;
    let text = "a room for the prompt";
    let id = f.human.send_text(&f.room, text).await;
    assert_push(
        &session.next_notification(WAIT).await,
        &message(text, &f.origin(&id).await),
    );
    for (params, says) in [
        (
            json!({ "request_id": "abcdl", "tool_name": "Bash", "description": "ls", "input_preview": "{}" }),
            "request_id: ",
        ),
        (
            json!({ "request_id": "abcde", "tool_name": "Bash", "description": "ls" }),
            "params: missing field `input_preview`",
        ),
    ] {
        session.notify(PERMISSION_REQUEST, params).await;
        let warning = session.next_notification(WAIT).await;
        assert_eq!(warning.method, "notifications/message", "{warning:?}");
        assert_eq!(warning.params["level"], "warning", "{warning:?}");
        assert_eq!(warning.params["logger"], "matrix-channel", "{warning:?}");
        let data = warning.params["data"].as_str().expect("a text");
        assert!(
            data.starts_with("matrix-channel did not relay a permission_request: ")
                && data.contains(says)
                && data.ends_with("Nothing was posted to Matrix; answer it in Claude Code."),
            "{data}"
        );
    }
    // On /mcp a permission request is no request at all: its session is told so.
    let tools = McpClient::spawn("tools").await;
    tools
        .connect(&f.server.url("/mcp"), f.server.token(IDENTITY))
        .await;
    tools
        .notify(
            PERMISSION_REQUEST,
            permission_request("abcde", "Bash", "ls", "{}"),
        )
        .await;
    let warning = tools.next_notification(WAIT).await;
    assert_eq!(warning.method, "notifications/message", "{warning:?}");
    assert!(
        warning.params["data"]
            .as_str()
            .is_some_and(|d| d.contains("relayed on /channel, not on /mcp")),
        "{warning:?}"
    );
    // The session still asks, and the prompt still answers.
    session
        .notify(
            PERMISSION_REQUEST,
            permission_request("abcde", "Bash", "ls", "{}"),
        )
        .await;
    f.wait_prompt("abcde").await;
    f.human.send_text(&f.room, "yes abcde").await;
    assert_verdict(&session.next_notification(WAIT).await, "abcde", "allow");
}

/// Copies the server's database as it is now (SQLite's `VACUUM INTO`, safe while the
/// server runs) to `to`.
fn snapshot_database(store: &std::path::Path, to: &std::path::Path) {
    let db = rusqlite::Connection::open(store.join("matrix-channel.sqlite3")).expect("open");
    db.execute("VACUUM INTO ?1", [to.to_str().expect("a UTF-8 path")])
        .expect("VACUUM INTO");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_the_matrix_store_had_but_the_model_did_not_is_delivered_after_a_crash() {
    let mut f = Fixture::start(|_| {}).await;
    let store = f.server.store_dir();
    let (session, _) = f.channel("before").await;
    let text = "handled before the snapshot";
    let id = f.human.send_text(&f.room, text).await;
    assert_push(
        &session.next_notification(WAIT).await,
        &message(text, &f.origin(&id).await),
    );
    session.close().await;
    f.sync_barrier().await;
    // The position saved with the handled sync covers that message (it is the room's
    // last event handed over).
    let start = std::time::Instant::now();
    while f.server.handled_last_events(IDENTITY).get(&f.room) != Some(&id) {
        assert!(
            start.elapsed() < WAIT,
            "the store's sync position did not reach {id} within {WAIT:?}: {:?}",
            f.server.handled_last_events(IDENTITY)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The database as it was before the next message: what a crash leaves when the
    // Matrix SDK has stored a sync response but the engine has not yet handled its
    // events (the SDK stores its position before it runs the event handlers).
    let snapshot = store.with_file_name("snapshot.sqlite3");
    snapshot_database(&store, &snapshot);
    let text = "in the sync response the crash cut";
    let lost = f.human.send_text(&f.room, text).await;
    f.sync_barrier().await;
    f.server.kill9().await;
    for file in ["-wal", "-shm", ""] {
        let _ = std::fs::remove_file(store.join(format!("matrix-channel.sqlite3{file}")));
    }
    std::fs::copy(&snapshot, store.join("matrix-channel.sqlite3")).expect("restore");
    f.server.restart().await;

    let (after, _) = f.channel("after").await;
    assert_push(
        &after.next_notification(WAIT).await,
        &replayed(message(text, &f.origin(&lost).await)),
    );
}
