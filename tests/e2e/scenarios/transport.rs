//! The streamable HTTP transport's own rules, against the real binary (issue 14, item
//! 3): a body that is not JSON, or not JSON-RPC, gets 400 with a JSON-RPC error; a
//! batch is served on a session that negotiated MCP 2025-03-26 and refused on a later
//! revision or without a session.

use crate::harness::homeserver::register;
use crate::harness::human::Human;
use crate::harness::scenario_permit;
use crate::harness::server::{Identity, Server, ServerConfig};
use serde_json::{json, Value};

/// A raw POST of `body`; the status, the `Mcp-Session-Id` it answered and the body.
async fn post(
    url: &str,
    token: &str,
    revision: Option<&str>,
    session: Option<&str>,
    body: &str,
) -> (u16, Option<String>, String) {
    let mut req = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_owned());
    if let Some(revision) = revision {
        req = req.header("mcp-protocol-version", revision);
    }
    if let Some(session) = session {
        req = req.header("mcp-session-id", session);
    }
    let resp = req.send().await.expect("POST to the server");
    let status = resp.status().as_u16();
    let session = resp
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, session, resp.text().await.unwrap_or_default())
}

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// Opens a session at `revision` (initialize, then initialized); its id.
async fn open(url: &str, token: &str, revision: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": revision, "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}});
    let (status, session, body) = post(url, token, None, None, &init.to_string()).await;
    assert_eq!(status, 200, "initialize at {revision}: {body}");
    assert!(
        body.contains(&format!("\"protocolVersion\":\"{revision}\"")),
        "{revision} negotiated: {body}"
    );
    let session = session.expect("initialize answers an Mcp-Session-Id");
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let header = (revision != "2025-03-26").then_some(revision);
    let (status, _, body) = post(url, token, header, Some(&session), initialized).await;
    assert_eq!(status, 202, "initialized: {body}");
    session
}

#[tokio::test]
async fn malformed_bodies_get_400_with_a_json_rpc_error_and_batches_follow_the_revision() {
    let _permit = scenario_permit().await;
    let bot = register("transport").await;
    let human = Human::register("human").await;
    let server = Server::start(ServerConfig {
        identities: vec![Identity::new("bot", &bot, &[&human.user_id])],
        session_idle_secs: None,
        max_download_bytes: None,
        batch_deadline_ms: None,
        rate_limits: None,
        top_level: None,
    })
    .await;
    let token = server.token("bot");
    for mount in ["/mcp", "/channel"] {
        let url = server.url(mount);
        // Malformed, with no session: the body is judged before anything else.
        for (body, code, id) in [
            ("", -32700, Value::Null),
            ("{\"jsonrpc\":", -32700, Value::Null),
            ("[1,", -32700, Value::Null),
            ("{\"hello\":1}", -32600, Value::Null),
            ("{\"jsonrpc\":\"2.0\",\"id\":4}", -32600, json!(4)),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":\"s\",\"method\":7}",
                -32600,
                json!("s"),
            ),
            ("[]", -32600, Value::Null),
            // A batch without a session: it cannot carry initialize, so it has none.
            (
                "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]",
                -32600,
                Value::Null,
            ),
        ] {
            let (status, _, answer) = post(&url, token, None, None, body).await;
            assert_eq!(status, 400, "{mount} {body:?}: {answer}");
            let answer = json_of(&answer);
            assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
            assert_eq!(answer["id"], id, "{mount} {body:?}: {answer}");
            assert_eq!(answer["error"]["code"], code, "{mount} {body:?}: {answer}");
            assert!(answer["error"]["message"].is_string(), "{answer}");
        }

        // 2025-03-26: a batch of two requests and a notification, answered in order.
        let old = open(&url, token, "2025-03-26").await;
        let batch = json!([
            {"jsonrpc": "2.0", "id": "p", "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        ]);
        let (status, _, answer) = post(&url, token, None, Some(&old), &batch.to_string()).await;
        assert_eq!(status, 200, "{mount} batch on 2025-03-26: {answer}");
        let answer = json_of(&answer);
        let answers = answer
            .as_array()
            .expect("a batch is answered with an array");
        assert_eq!(answers.len(), 2, "one response per request: {answer}");
        assert_eq!(
            answers[0],
            json!({"jsonrpc": "2.0", "id": "p", "result": {}})
        );
        assert_eq!(answers[1]["id"], 2, "{answer}");
        let tools = answers[1]["result"]["tools"].as_array().expect("tools");
        assert!(
            tools.iter().any(|t| t["name"] == "send_message"),
            "{mount}: {answer}"
        );
        // Only notifications: accepted, nothing to answer.
        let quiet = json!([{"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}]);
        let (status, _, answer) = post(&url, token, None, Some(&old), &quiet.to_string()).await;
        assert_eq!((status, answer.as_str()), (202, ""), "{mount}");

        // 2025-11-25: batches were removed in 2025-06-18.
        let new = open(&url, token, "2025-11-25").await;
        let (status, _, answer) = post(
            &url,
            token,
            Some("2025-11-25"),
            Some(&new),
            &batch.to_string(),
        )
        .await;
        assert_eq!(status, 400, "{mount} batch on 2025-11-25: {answer}");
        let answer = json_of(&answer);
        assert_eq!(answer["error"]["code"], -32600, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("negotiated MCP 2025-11-25"), "{message}");
        // The session still serves one message per POST.
        let ping = r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#;
        let (status, _, answer) = post(&url, token, Some("2025-11-25"), Some(&new), ping).await;
        assert_eq!(status, 200, "{answer}");
        assert!(answer.contains(r#""id":9"#), "{answer}");
        // MCP's own method with params that do not fit it: invalid params, not
        // "method not found"; an unknown method is.
        for (method, params, code) in [
            ("tools/call", json!({"name": 7}), -32602),
            ("tools/call", json!({"arguments": {}}), -32602),
            ("no/such", json!({}), -32601),
        ] {
            let call = json!({"jsonrpc": "2.0", "id": 5, "method": method, "params": params});
            let (status, _, answer) = post(
                &url,
                token,
                Some("2025-11-25"),
                Some(&new),
                &call.to_string(),
            )
            .await;
            assert_eq!(status, 200, "{answer}");
            let data = answer
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .find(|d| d.contains("\"id\":5"))
                .unwrap_or_else(|| panic!("{method}: no response in {answer}"));
            let data = json_of(data.trim());
            assert_eq!(data["error"]["code"], code, "{method}: {data}");
        }
    }

    // Answers over the batch's byte bound together: the one that would cross it is
    // replaced by an error naming the bound, and the batch goes on.
    let room = human.create_room(&[&bot.user_id]).await;
    human.wait_joined(&room, &bot.user_id).await;
    let file = vec![b'x'; 2 * 1024 * 1024];
    let mxc = human.upload(&file, "text/plain", "two.txt").await;
    let event = human
        .send(
            &room,
            "m.room.message",
            &json!({"msgtype": "m.file", "body": "two.txt", "url": mxc,
                    "info": {"mimetype": "text/plain", "size": file.len()}}),
        )
        .await;
    let url = server.url("/mcp");
    let old = open(&url, token, "2025-03-26").await;
    let download = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "download_attachment", "arguments": {"room_id": room, "event_id": event}}})
    };
    let batch = json!([download(1), download(2), {"jsonrpc": "2.0", "id": 3, "method": "ping"}]);
    let (status, _, answer) = post(&url, token, None, Some(&old), &batch.to_string()).await;
    assert_eq!(status, 200, "{}", &answer[..answer.len().min(500)]);
    assert!(answer.len() <= 8 * 1024 * 1024, "{} bytes", answer.len());
    let answer = json_of(&answer);
    let answers = answer.as_array().expect("an array");
    assert_eq!(answers.len(), 3);
    let first = &answers[0]["result"]["structuredContent"];
    assert_eq!(first["size"], file.len(), "the first download fits");
    assert_eq!(
        (&answers[1]["id"], &answers[1]["error"]["code"]),
        (&json!(2), &json!(-32603))
    );
    let message = answers[1]["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("tools/call: its answer is over ")
            && message.contains("of the 8388608 bytes a batch's answers may hold together"),
        "{message}"
    );
    assert_eq!(answers[2], json!({"jsonrpc": "2.0", "id": 3, "result": {}}));
}

/// Writes `head` and `body` to the server on a raw connection, then closes the writing
/// half; the whole answer the server wrote.
async fn raw_http(addr: std::net::SocketAddr, head: &str, body: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(head.as_bytes())
        .await
        .expect("write the head");
    stream.write_all(body).await.expect("write the body");
    stream.shutdown().await.expect("close the writing half");
    let mut answer = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        stream.read_to_end(&mut answer),
    )
    .await
    .expect("the server answers and closes")
    .expect("read the answer");
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn a_batch_stops_at_its_deadline_and_a_body_cut_short_gets_400() {
    let _permit = scenario_permit().await;
    let bot = register("deadline").await;
    let human = Human::register("human").await;
    // A deadline no tool call to the homeserver can meet.
    let server = Server::start(ServerConfig {
        identities: vec![Identity::new("bot", &bot, &[&human.user_id])],
        batch_deadline_ms: Some(1),
        rate_limits: None,
        ..ServerConfig::default()
    })
    .await;
    let token = server.token("bot");
    let room = human.create_room(&[&bot.user_id]).await;
    human.wait_joined(&room, &bot.user_id).await;
    let url = server.url("/mcp");
    let session = open(&url, token, "2025-03-26").await;
    let marker = "sent by a batch past its deadline";
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
         "params": {"name": "send_message", "arguments": {"room_id": room, "text": marker}}},
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        {"jsonrpc": "2.0", "id": "after", "method": "ping"},
    ]);
    let (status, _, answer) = post(&url, token, None, Some(&session), &batch.to_string()).await;
    assert_eq!(status, 200, "{answer}");
    let answer = json_of(&answer);
    let answers = answer.as_array().expect("an array");
    assert_eq!(answers.len(), 2, "one response per request: {answer}");
    assert_eq!(
        (&answers[0]["id"], &answers[0]["error"]["code"]),
        (&json!(1), &json!(-32603))
    );
    let late = answers[0]["error"]["message"].as_str().unwrap();
    assert!(
        late.starts_with("tools/call: not answered within the batch's deadline of 1 ms")
            && late.contains("it may still take effect"),
        "{late}"
    );
    assert_eq!(
        (&answers[1]["id"], &answers[1]["error"]["code"]),
        (&json!("after"), &json!(-32603))
    );
    let not_started = answers[1]["error"]["message"].as_str().unwrap();
    assert!(
        not_started.starts_with("ping: not started, nothing was done"),
        "{not_started}"
    );
    // The late call went on: its message reaches the room.
    human
        .wait_for_event(&room, "the late call's message", |e| {
            e["content"]["body"] == marker
        })
        .await;
    // The session still serves a message per POST (no deadline there).
    let ping = r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#;
    let (status, _, answer) = post(&url, token, None, Some(&session), ping).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains(r#""id":9"#), "{answer}");

    // A body that stops before its Content-Length: 400, not "too large".
    let addr = server.addr();
    let head = |length: usize| {
        format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             Content-Length: {length}\r\nConnection: close\r\n\r\n",
            addr.port()
        )
    };
    let cut = raw_http(addr, &head(100), br#"{"jsonrpc":"2.0","id":1,"#).await;
    assert!(cut.starts_with("HTTP/1.1 400"), "{cut}");
    assert!(
        cut.contains(r#""error":"unreadable_body""#)
            && cut.contains("could not be read to its end"),
        "{cut}"
    );
    // One over the bound, by its Content-Length: 413, before the body is read.
    let over = raw_http(addr, &head(4 * 1024 * 1024 + 1), b"").await;
    assert!(over.starts_with("HTTP/1.1 413"), "{over}");
    assert!(
        over.contains(r#""error":"payload_too_large""#) && over.contains("over 4194304 bytes"),
        "{over}"
    );
}
