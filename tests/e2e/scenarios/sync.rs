//! A sync that never loses or repeats (issue 12, items 5 to 7): more messages than
//! the sync filter's timeline limit (50) while the server is stopped, and a burst
//! while it runs, are each pushed once in the homeserver's order (the gap of a
//! `limited` timeline is backfilled); a homeserver outage makes `/health` degraded
//! and the next message after it is pushed once; a rejected access token is reported
//! by `/health` and the log.

use crate::harness::expect::CHANNEL;
use crate::harness::fixture::{Fixture, IDENTITY};
use crate::harness::homeserver::register_on;
use crate::harness::human::{enc, Human};
use crate::harness::mcp::McpClient;
use crate::harness::outage::OwnHomeserver;
use crate::harness::server::{Identity, Server, ServerConfig};
use crate::harness::{scenario_permit, QUIET, WAIT};
use futures::StreamExt as _;
use reqwest::Method;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// More than the sync filter's timeline limit (`TIMELINE_LIMIT`, 50).
const GAP: usize = 70;
/// A burst while running, sent 8 at a time.
const BURST: usize = 80;

/// Sends `n` messages `"{prefix} {i}"`, 8 in flight (Synapse orders them); returns
/// their event ids in the room's order as the homeserver serves it (`/messages`).
async fn send_many(human: &Human, room: &str, prefix: &str, n: usize) -> Vec<String> {
    let sent: Vec<String> = futures::stream::iter(0..n)
        .map(|i| async move { human.send_text(room, &format!("{prefix} {i}")).await })
        .buffer_unordered(8)
        .collect()
        .await;
    assert_eq!(sent.len(), n);
    room_order(human, room, &sent).await
}

/// `ids` in the order of the room's timeline (`GET /messages`, backwards, paged).
async fn room_order(human: &Human, room: &str, ids: &[String]) -> Vec<String> {
    let mut newest_first = Vec::new();
    let mut from: Option<String> = None;
    while newest_first.len() < ids.len() {
        let page = human.messages(room, "b", 100, from.as_deref()).await;
        let chunk = page["chunk"].as_array().cloned().unwrap_or_default();
        assert!(
            !chunk.is_empty(),
            "the room's history ended before every message"
        );
        for event in chunk {
            if let Some(id) = event["event_id"].as_str() {
                if ids.iter().any(|i| i == id) {
                    newest_first.push(id.to_owned());
                }
            }
        }
        from = page["end"].as_str().map(str::to_owned);
    }
    newest_first.reverse();
    newest_first
}

/// The next `n` pushes' event ids, in arrival order; each must be a message push
/// whose content is its body (`"{prefix} {i}"`).
async fn pushed_ids(session: &McpClient, prefix: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    while ids.len() < n {
        let push = session.next_notification(WAIT).await;
        assert_eq!(push.method, CHANNEL, "{push:?}");
        let meta = &push.params["meta"];
        assert_eq!(meta["kind"], "message", "{}", push.params);
        let content = push.params["content"].as_str().unwrap_or_default();
        assert!(
            content.starts_with(prefix),
            "push {} of {n}: {}",
            ids.len(),
            push.params
        );
        ids.push(meta["event_id"].as_str().unwrap().to_owned());
    }
    ids
}

/// Asserts that `pushed` is `expected` (the room's order), saying what differs.
#[track_caller]
fn assert_same_order(pushed: &[String], expected: &[String]) {
    let mut seen = std::collections::BTreeSet::new();
    let twice: Vec<&String> = pushed.iter().filter(|id| !seen.insert(*id)).collect();
    let missing: Vec<&String> = expected.iter().filter(|id| !pushed.contains(id)).collect();
    assert!(
        pushed == expected,
        "pushed {} events, {} expected: twice {twice:?}, missing {missing:?}; first difference at {:?}",
        pushed.len(),
        expected.len(),
        pushed.iter().zip(expected).position(|(a, b)| a != b)
    );
}

/// `GET /health`, with `token` as bearer if given: the status code and the body.
async fn health(server: &Server, token: Option<&str>) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .get(server.url("/health"))
        .timeout(Duration::from_secs(10));
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    let resp = req.send().await.expect("GET /health");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("a JSON body"))
}

/// Polls `/health` until `pred` accepts it (at most [`WAIT`]).
async fn wait_health(
    server: &Server,
    token: Option<&str>,
    what: &str,
    pred: impl Fn(u16, &Value) -> bool,
) -> (u16, Value) {
    let start = Instant::now();
    loop {
        let (status, body) = health(server, token).await;
        if pred(status, &body) {
            return (status, body);
        }
        assert!(
            start.elapsed() < WAIT,
            "/health: {what} not within {WAIT:?}; last {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_messages_than_the_timeline_limit_sent_while_the_server_is_stopped_are_each_pushed_once_in_order(
) {
    let mut f = Fixture::start(|_| {}).await;
    let (session, connected) = f.channel("session").await;
    let before = f.human.send_text(&f.room, "gap before").await;
    assert_eq!(
        pushed_ids(&session, "gap before", 1).await,
        std::slice::from_ref(&before)
    );
    // A push written to the stream but not yet recorded as written when the process
    // dies is pushed again after the restart (at least once across a crash:
    // `Input::Restarted` gives it back); one the session acknowledged never is. The
    // kill below must not land in that window, or "gap before" comes first again.
    let acked = session
        .call_ok("acknowledge", json!({ "event_id": before }))
        .await;
    assert_eq!(acked["acknowledged"], true, "{acked}");

    f.server.kill9().await;
    session.close().await;
    let expected = send_many(&f.human, &f.room, "gap", GAP).await;
    f.server.restart().await;
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

    let pushed = pushed_ids(&session, "gap", GAP).await;
    assert_same_order(&pushed, &expected);
    // Nothing twice: a later message comes next, then nothing.
    let last = f.human.send_text(&f.room, "gap after").await;
    assert_eq!(pushed_ids(&session, "gap after", 1).await, [last]);
    session.expect_no_notification(QUIET).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_while_running_is_pushed_exactly_once_in_the_homeservers_order() {
    let f = Fixture::start(|_| {}).await;
    let (session, _connected) = f.channel("session").await;
    let expected = send_many(&f.human, &f.room, "burst", BURST).await;
    let pushed = pushed_ids(&session, "burst", BURST).await;
    assert_same_order(&pushed, &expected);
    let last = f.human.send_text(&f.room, "burst after").await;
    assert_eq!(pushed_ids(&session, "burst after", 1).await, [last]);
    session.expect_no_notification(QUIET).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_homeserver_outage_makes_health_degraded_and_the_next_message_is_pushed_once_it_is_back()
{
    let _permit = scenario_permit().await;
    let own = OwnHomeserver::start().await;
    let bot = register_on(&own.hs, "bot").await;
    let human = Human::on(&own.hs.url, register_on(&own.hs, "human").await);
    let room = human.create_room(&[]).await;
    let identity = Identity::new(IDENTITY, &bot, &[&human.user_id]);
    let config = ServerConfig {
        identities: vec![identity],
        ..ServerConfig::default()
    };
    let server = Server::start_on(config, own.hs.url.clone()).await;
    let token = server.token(IDENTITY).to_owned();
    human.invite(&room, &bot.user_id).await;
    human.wait_joined(&room, &bot.user_id).await;
    let session = McpClient::spawn("session").await;
    session.connect(&server.url("/channel"), &token).await;
    let before = human.send_text(&room, "outage before").await;
    assert_eq!(pushed_ids(&session, "outage before", 1).await, [before]);

    // Up: liveness alone without a token, the identity's details with it.
    assert_eq!(health(&server, None).await, (200, json!({"status": "ok"})));
    let (status, body) = health(&server, Some(&token)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["identity"]["name"], IDENTITY, "{body}");
    assert_eq!(
        body["identity"]["sync"]["homeserver_answers"], true,
        "{body}"
    );
    assert_eq!(body["identity"]["undecryptable_backlog"], 0, "{body}");

    own.stop().await;
    let (status, body) = wait_health(&server, None, "503", |status, _| status == 503).await;
    let mut degraded = serde_json::Map::new();
    degraded.insert(IDENTITY.to_owned(), json!("retrying"));
    assert_eq!(
        (status, body),
        (
            503,
            json!({"status": "degraded", "degraded_identities": degraded})
        )
    );
    let (status, body) = health(&server, Some(&token)).await;
    assert_eq!(status, 503, "{body}");
    let identity = &body["identity"];
    assert_eq!(identity["status"], "degraded", "{body}");
    assert_eq!(identity["sync"]["homeserver_answers"], false, "{body}");
    assert_eq!(identity["sync"]["token_rejected"], false, "{body}");
    assert!(identity["sync"]["last_error"].is_string(), "{body}");

    own.restart().await;
    let answered = Instant::now();
    // Healthy again with the first sync, before anything new happens in the room
    // (a long poll would hold that sync's answer for 30 s).
    wait_health(&server, None, "200 with nothing new", |status, _| {
        status == 200
    })
    .await;
    let recovered = answered.elapsed();
    eprintln!("outage: from Synapse answering again to /health 200: {recovered:?}");
    assert!(recovered < Duration::from_secs(10), "{recovered:?}");
    let after = human.send_text(&room, "outage after").await;
    assert_eq!(pushed_ids(&session, "outage after", 1).await, [after]);
    let delay = answered.elapsed();
    eprintln!("outage: from Synapse answering again to the next message's push: {delay:?}");
    let (_, body) = wait_health(&server, Some(&token), "200", |status, _| status == 200).await;
    assert_eq!(
        body["identity"]["sync"]["homeserver_answers"], true,
        "{body}"
    );
    assert_eq!(body["identity"]["status"], "ok", "{body}");
    // None twice: the message before the outage and this one were each pushed once.
    session.expect_no_notification(QUIET).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_access_token_is_reported_by_health_and_the_log_and_the_sync_stops() {
    let f = Fixture::start(|_| {}).await;
    let token = f.server.token(IDENTITY).to_owned();
    wait_health(&f.server, Some(&token), "200", |status, _| status == 200).await;

    // The bot's account deletes the server's device (password UIA), as an operator
    // removing it from Element's session list would: its access token is gone.
    let account = Human::from_account(f.bot.clone()).await;
    let devices = account
        .call(Method::GET, "/_matrix/client/v3/devices", None)
        .await;
    let device = devices["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["display_name"] == "matrix-channel")
        .unwrap_or_else(|| panic!("no matrix-channel device in {devices}"))["device_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/_matrix/client/v3/devices/{}", enc(&device));
    let uia = account
        .request(Method::DELETE, &path, Some(&json!({})))
        .await
        .expect_err("deleting a device asks for the password");
    assert_eq!(uia.status, 401, "{}", uia.body);
    let auth = json!({"auth": {
        "type": "m.login.password",
        "identifier": {"type": "m.id.user", "user": f.bot.user_id},
        "password": f.bot.password,
        "session": uia.body["session"],
    }});
    account.call(Method::DELETE, &path, Some(&auth)).await;
    // Wake the server's long poll, so its next sync comes soon.
    f.human.send_text(&f.room, "wake up").await;

    let (status, body) = wait_health(&f.server, Some(&token), "token_rejected", |_, body| {
        body["identity"]["sync"]["token_rejected"] == true
    })
    .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["status"], "degraded", "{body}");
    assert_eq!(
        body["identity"]["sync"]["state"], "token_rejected",
        "{body}"
    );
    assert_eq!(
        body["identity"]["sync"]["homeserver_answers"], true,
        "{body}"
    );
    assert_eq!(health(&f.server, None).await.0, 503);
    let log = f.server.log_tail(100_000);
    assert!(
        log.lines().any(|l| l.contains("ERROR")
            && l.contains("rejected the access token")
            && l.contains("matrix-channel login --identity bot")),
        "no ERROR naming the fix in serve.log:\n{}",
        f.server.log_tail(30)
    );
    // A token that is no token of ours is refused, not taken for liveness.
    assert_eq!(health(&f.server, Some("mct_wrong")).await.0, 401);
}
