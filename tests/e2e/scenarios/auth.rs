//! Scenario 7: a request without a token, with a wrong token, or with identity A's
//! token asking for identity B's room or session fails with a clear error.

use crate::harness::homeserver::register;
use crate::harness::human::Human;
use crate::harness::mcp::McpClient;
use crate::harness::scenario_permit;
use crate::harness::server::{Identity, Server, ServerConfig};
use serde_json::{json, Value};
use std::collections::BTreeSet;

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"0"}}}"#;

/// A raw POST of `body` to `url`; returns the status and the headers.
async fn post(
    url: &str,
    token: Option<&str>,
    session: Option<&str>,
    body: &str,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut req = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .body(body.to_owned());
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    if let Some(session) = session {
        req = req.header("mcp-session-id", session);
    }
    let resp = req.send().await.expect("POST to the server");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, headers, resp.text().await.unwrap_or_default())
}

#[track_caller]
fn assert_unauthorized(
    what: &str,
    (status, headers, _): &(u16, reqwest::header::HeaderMap, String),
) {
    assert_eq!(*status, 401, "{what}: expected 401");
    let challenge = headers
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("{what}: 401 without WWW-Authenticate"));
    assert!(
        challenge.starts_with("Bearer"),
        "{what}: WWW-Authenticate is {challenge:?}"
    );
}

#[track_caller]
fn assert_tool_error(what: &str, result: &Value, kind: &str) {
    assert_eq!(
        result["isError"], true,
        "{what}: expected an error result, got {result}"
    );
    let error = &result["structuredContent"]["error"];
    assert_eq!(error["kind"], kind, "{what}: {result}");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: the error says what is wrong: {result}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_a_wrong_token_or_another_identitys_room_or_session_fails_clearly() {
    let _permit = scenario_permit().await;
    let alpha = register("alpha").await;
    let beta = register("beta").await;
    let human = Human::register("human").await;
    let mut a = Identity::new("alpha", &alpha, &[&human.user_id]);
    a.settle_ms = Some(800);
    let mut b = Identity::new("beta", &beta, &[&human.user_id]);
    b.approvers = Some(vec![]); // relays no permission requests
    let server = Server::start(ServerConfig {
        identities: vec![a, b],
        session_idle_secs: None,
        max_download_bytes: None,
        batch_deadline_ms: None,
        rate_limits: None,
        top_level: None,
    })
    .await;
    let room_a = human.create_room(&[&alpha.user_id]).await;
    let room_b = human.create_room(&[&beta.user_id]).await;
    human.wait_joined(&room_a, &alpha.user_id).await;
    human.wait_joined(&room_b, &beta.user_id).await;
    let (token_a, token_b) = (server.token("alpha"), server.token("beta"));

    // No token, a wrong token: 401 with a Bearer challenge, on both mounts.
    for path in ["/channel", "/mcp"] {
        let url = server.url(path);
        assert_unauthorized(
            &format!("{path} without a token"),
            &post(&url, None, None, INITIALIZE).await,
        );
        assert_unauthorized(
            &format!("{path} with a wrong token"),
            &post(&url, Some("mct_not-a-token"), None, INITIALIZE).await,
        );
        assert_unauthorized(
            &format!("{path} with a token of the wrong form"),
            &post(&url, Some(&format!("{token_a}x")), None, INITIALIZE).await,
        );
    }
    let client = McpClient::spawn("no-token").await;
    let err = client
        .connect_raw(&server.url("/channel"), None)
        .await
        .expect_err("connecting without a token fails");
    assert_eq!(err.code, json!(401), "{err}");
    let err = client
        .connect_raw(&server.url("/channel"), Some("mct_not-a-token"))
        .await
        .expect_err("connecting with a wrong token fails");
    assert_eq!(err.code, json!(401), "{err}");

    // Each token sees its own identity; B relays no permission requests.
    let session_a = McpClient::spawn("alpha").await;
    let connected_a = session_a.connect(&server.url("/channel"), token_a).await;
    assert_eq!(
        connected_a.server_capabilities["experimental"],
        json!({ "claude/channel": {}, "claude/channel/permission": {} })
    );
    let session_b = McpClient::spawn("beta").await;
    let connected_b = session_b.connect(&server.url("/channel"), token_b).await;
    assert_eq!(
        connected_b.server_capabilities["experimental"],
        json!({ "claude/channel": {} }),
        "an identity without approvers must not declare the permission capability (not even false)"
    );
    let whoami = session_a.call_ok("whoami", json!({})).await;
    assert_eq!(
        (&whoami["identity"], &whoami["user_id"]),
        (&json!("alpha"), &json!(alpha.user_id))
    );

    // A's token asking for B's room: not joined, and nothing is sent there.
    let result = session_a
        .call("read_messages", json!({ "room_id": room_b }))
        .await
        .expect("a tool result, not a protocol error");
    assert_tool_error(
        "read_messages in B's room with A's token",
        &result,
        "not_joined",
    );
    let result = session_a
        .call(
            "send_message",
            json!({ "room_id": room_b, "text": "hello from A" }),
        )
        .await
        .expect("a tool result, not a protocol error");
    assert_tool_error(
        "send_message to B's room with A's token",
        &result,
        "not_joined",
    );
    let page = human.messages(&room_b, "b", 50, None).await;
    assert!(
        !page["chunk"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["sender"] == alpha.user_id.as_str()),
        "A wrote nothing into B's room"
    );
    // Its own room works.
    session_a
        .call_ok("read_messages", json!({ "room_id": room_a }))
        .await;
    // B's token with A's session id: that session does not exist for B.
    let tools_list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#;
    for path in ["/channel", "/mcp"] {
        let (status, _, body) = post(
            &server.url(path),
            Some(token_b),
            Some(&connected_a.session_id),
            tools_list,
        )
        .await;
        assert_eq!(status, 404, "{path}: B's token with A's session id: {body}");
    }
    let intruder = McpClient::spawn("intruder").await;
    let err = intruder
        .resume(
            &server.url("/channel"),
            token_b,
            &connected_a.session_id,
            connected_a.protocol_version.as_deref(),
            None,
        )
        .await
        .expect_err("B cannot attach to A's session");
    assert_eq!(err.code, json!(404), "{err}");
    // A's session is unharmed.
    session_a.call_ok("whoami", json!({})).await;

    // /mcp offers every tool.
    let tools = McpClient::spawn("alpha-tools").await;
    tools.connect(&server.url("/mcp"), token_a).await;
    let names: BTreeSet<String> = tools
        .list_tools()
        .await
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    for tool in ALL_TOOLS {
        assert!(names.contains(tool), "/mcp lacks {tool}: {names:?}");
    }

    // Invalid arguments: MCP 2025-11-25 has them returned as a tool execution error
    // (isError) so the model can correct the call, and rmcp 3.11 does so for arguments
    // that do not deserialize; a JSON-RPC -32602 is the older form. Either way the
    // answer names the argument and is not one of the other error kinds.
    match session_a.call("read_messages", json!({})).await {
        Err(err) => assert_eq!(err.code, json!(-32602), "{err}"),
        Ok(result) => {
            assert_eq!(
                result["isError"], true,
                "read_messages without room_id: {result}"
            );
            assert!(
                result["content"].to_string().contains("room_id"),
                "the error names the missing argument: {result}"
            );
            let kind = &result["structuredContent"]["error"]["kind"];
            assert!(
                kind.is_null() || kind == "invalid_params",
                "invalid arguments are not {kind}: {result}"
            );
        }
    }

    // A session ended by DELETE is gone, for its own token too.
    session_a
        .terminate()
        .await
        .expect("DELETE ends A's session");
    let (status, _, body) = post(
        &server.url("/channel"),
        Some(token_a),
        Some(&connected_a.session_id),
        tools_list,
    )
    .await;
    assert_eq!(status, 404, "a terminated session: {body}");
    session_b.call_ok("whoami", json!({})).await;
}

/// The full tool set of issue 3.
const ALL_TOOLS: [&str; 16] = [
    "whoami",
    "list_rooms",
    "read_messages",
    "read_thread",
    "get_reactions",
    "send_message",
    "edit_message",
    "send_reaction",
    "redact",
    "acknowledge",
    "download_attachment",
    "join_room",
    "leave_room",
    "invite",
    "room_info",
    "room_members",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_or_origin_not_allowed_is_403_with_or_without_a_token() {
    let _permit = scenario_permit().await;
    let bot = register("origin").await;
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
    let send = |host: Option<String>, origin: Option<&'static str>, token: Option<String>| {
        let url = server.url("/channel");
        async move {
            let mut req = reqwest::Client::new()
                .post(url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(INITIALIZE);
            if let Some(host) = host {
                req = req.header("host", host);
            }
            if let Some(origin) = origin {
                req = req.header("origin", origin);
            }
            if let Some(token) = token {
                req = req.bearer_auth(token);
            }
            let resp = req.send().await.expect("POST to the server");
            let status = resp.status().as_u16();
            (status, resp.text().await.unwrap_or_default())
        }
    };
    let evil_host = format!("evil.example:{}", server.addr().port());
    for with_token in [true, false] {
        let t = || with_token.then(|| token.to_owned());
        for (host, origin, key) in [
            (Some(evil_host.clone()), None, "allowed_hosts"),
            (None, Some("http://evil.example"), "allowed_origins"),
            (None, Some("null"), "allowed_origins"),
        ] {
            let (status, body) = send(host.clone(), origin, t()).await;
            assert_eq!(
                status, 403,
                "{host:?} {origin:?} token {with_token}: {body}"
            );
            assert!(body.contains(key), "{body}");
        }
    }
    // No Origin, or one on a loopback host (an inspector on another port): served.
    for origin in [None, Some("http://localhost:6274")] {
        let (status, body) = send(None, origin, Some(token.to_owned())).await;
        assert_eq!(status, 200, "{origin:?}: {body}");
        let (status, _) = send(None, origin, None).await;
        assert_eq!(status, 401, "{origin:?} without a token");
    }
}
