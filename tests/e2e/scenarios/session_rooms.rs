//! Session rooms (issue 26, docs/decisions/0026-session-rooms.md): two HTTP channel
//! sessions of one identity bring the labels `web` and `api` (`/channel?room=…`). The
//! server creates a room for each label, encrypted, named after it and inviting the
//! identity's allowed sender; the human (the encrypting nio client, as the rooms are
//! encrypted) joins both. A message in web's room reaches only the web session; the
//! api session's permission request is posted in api's room and says `from api`;
//! `yes <id>` there answers the api session only. The identity has no
//! `permission_room`, so a prompt goes to its session's room, and `verdict_devices =
//! "any"` (nio's device is not cross-signed).

use crate::harness::expect::{
    assert_push, assert_verdict, message, permission_request, Origin, CHANNEL, PERMISSION,
    PERMISSION_REQUEST,
};
use crate::harness::fixture::Fixture;
use crate::harness::fixture::{HUMAN_NAME, IDENTITY, SETTLE_MS};
use crate::harness::homeserver::register;
use crate::harness::mcp::McpClient;
use crate::harness::nio::NioHuman;
use crate::harness::scenario_permit;
use crate::harness::server::{binary, Identity, Server, ServerConfig};
use crate::harness::{QUIET, WAIT};
use serde_json::json;
use std::time::Instant;

/// The room the server created for `label`, once the identity is joined to it
/// (`list_rooms` of the identity's `/mcp` client, by the room's name).
pub(crate) async fn room_of(tools: &McpClient, label: &str) -> String {
    let name = format!("Claude Code: {label}");
    let (room, _) = created_room(tools, |found| found == name).await;
    room
}

/// The first room the server created for a label whose name `pick` accepts, once
/// the identity is joined to it: its id and its label.
pub(crate) async fn created_room(
    tools: &McpClient,
    pick: impl Fn(&str) -> bool,
) -> (String, String) {
    let deadline = Instant::now() + WAIT;
    loop {
        let rooms = tools.call_ok("list_rooms", json!({})).await;
        let found = rooms["joined"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|room| {
                room["name"]
                    .as_str()
                    .is_some_and(|name| name.starts_with("Claude Code: ") && pick(name))
            });
        if let Some(room) = found {
            assert_eq!(room["encrypted"], true, "{room}");
            let name = room["name"].as_str().unwrap_or_default();
            let label = name.trim_start_matches("Claude Code: ").to_owned();
            return (room["room_id"].as_str().unwrap().to_owned(), label);
        }
        assert!(
            Instant::now() < deadline,
            "no room created for a label within {WAIT:?}: {rooms}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_labelled_sessions_each_get_their_own_room_its_messages_and_its_prompts_verdicts() {
    let _permit = scenario_permit().await;
    let bot = register("bot").await;
    let human = NioHuman::register("human", Some(HUMAN_NAME)).await;
    let mut identity = Identity::new(IDENTITY, &bot, &[&human.user_id]);
    identity.settle_ms = Some(SETTLE_MS);
    // nio has no cross-signing: its verdicts count with `any` (encrypted.rs).
    identity.verdict_devices = Some("any");
    let server = Server::start(ServerConfig {
        identities: vec![identity],
        ..ServerConfig::default()
    })
    .await;
    let token = server.token(IDENTITY);
    let channel = |label: &str| format!("{}?room={label}", server.url("/channel"));
    let web = McpClient::spawn("web").await;
    web.connect(&channel("web"), token).await;
    let api = McpClient::spawn("api").await;
    api.connect(&channel("api"), token).await;
    let tools = McpClient::spawn("tools").await;
    tools.connect(&server.url("/mcp"), token).await;

    let web_room = room_of(&tools, "web").await;
    let api_room = room_of(&tools, "api").await;
    assert_ne!(web_room, api_room);
    for room in [&web_room, &api_room] {
        human.join(room).await;
        human.wait_joined(room, &bot.user_id).await;
    }

    // A message in web's room reaches the web session only.
    let sent = human.send_text(&web_room, "run the web tests").await;
    assert!(sent.encrypted, "{sent:?}");
    let got = web.next_notification(WAIT).await;
    let origin = Origin {
        room: web_room.clone(),
        event_id: sent.event_id.clone(),
        sender: human.user_id.clone(),
        user: HUMAN_NAME.to_owned(),
        ts: human.raw.ts(&web_room, &sent.event_id).await,
    };
    assert_push(&got, &message("run the web tests", &origin));
    api.expect_no_notification(QUIET).await;

    // send_message without room_id goes to the session's own room.
    web.call_ok("send_message", json!({ "text": "web here" }))
        .await;
    let said = human
        .wait_message(&web_room, &bot.user_id, "web here")
        .await;
    assert!(said.encrypted, "{said:?}");

    // On /mcp no session has a room: room_id is required.
    let refused = tools
        .call("send_message", json!({ "text": "where to?" }))
        .await
        .expect("a tool result");
    assert_eq!(refused["isError"], true, "{refused}");
    let error = &refused["structuredContent"]["error"];
    assert_eq!(error["kind"], "invalid_params", "{refused}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("room_id is required"),
        "{refused}"
    );

    // The api session's prompt is posted in api's room and says who asks.
    let id = "qwzxk";
    api.notify(
        PERMISSION_REQUEST,
        permission_request(id, "Bash", "List files", r#"{"command": "ls"}"#),
    )
    .await;
    let prompt = human
        .wait_message(&api_room, &bot.user_id, "from api (session ")
        .await;
    assert!(
        prompt.body.as_deref().unwrap_or_default().contains(id),
        "{prompt:?}"
    );
    human.send_text(&api_room, &format!("yes {id}")).await;
    let verdict = loop {
        let n = api.next_notification(WAIT).await;
        if n.method == PERMISSION {
            break n;
        }
        assert_eq!(n.method, CHANNEL, "{n:?}");
    };
    assert_verdict(&verdict, id, "allow");
    web.expect_no_notification(QUIET).await;
}

/// `matrix-channel stdio` takes its label from Claude Code's `CLAUDE_CODE_SESSION_ID`
/// (sent as the `Matrix-Channel-Room` header): the label's room is created; `--room`
/// wins over it, and a `--room` that is no label stops the bridge at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_session_brings_claude_codes_session_id_as_its_label_unless_room_is_given() {
    let f = Fixture::start(|_| {}).await;
    f.server.pin_listen();
    let tools = McpClient::spawn("tools").await;
    tools
        .connect(&f.server.url("/mcp"), f.server.token(IDENTITY))
        .await;
    let args = crate::scenarios::stdio::stdio_args(&f.server);
    let session_id = "0f8e6c1a-5b2d-4c3e-9a7f-1d2e3f4a5b6c";
    let env = json!({ "RUST_LOG": "info", "NO_COLOR": "1", "CLAUDE_CODE_SESSION_ID": session_id });

    let resumed = McpClient::spawn("stdio-env").await;
    resumed
        .connect_stdio(binary(), &args, env.clone())
        .await
        .unwrap_or_else(|e| panic!("connect over stdio: {e}"));
    resumed.wait_stderr("the event stream is open", WAIT).await;
    room_of(&tools, session_id).await;

    let named = McpClient::spawn("stdio-room").await;
    let mut with_room = args.clone();
    with_room.extend(["--room".to_owned(), "docs".to_owned()]);
    named
        .connect_stdio(binary(), &with_room, env.clone())
        .await
        .unwrap_or_else(|e| panic!("connect over stdio: {e}"));
    named.wait_stderr("the event stream is open", WAIT).await;
    room_of(&tools, "docs").await;

    let refused = McpClient::spawn("stdio-bad-room").await;
    let mut bad = args;
    bad.extend(["--room".to_owned(), "a/b".to_owned()]);
    assert!(
        refused.connect_stdio(binary(), &bad, env).await.is_err(),
        "a --room that is no label ends the bridge before initialize"
    );
    refused
        .wait_stderr("--room: a room label has the character '/'", WAIT)
        .await;
}

/// `matrix-channel bind --identity ID ARGS…` (or `bindings`) run against the server's
/// config: its exit code, stdout and stderr.
async fn operator(server: &Server, args: &[&str]) -> (Option<i32>, String, String) {
    let out = server.cli(args, None).await;
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The operator's `matrix-channel bind` and `bindings` (docs/sessions.md, "Moving
/// rooms from the shell"), through the running `serve`'s operator socket
/// (`<store_dir>/operator.sock`, 0600). A room the identity is not in is refused
/// (`not_joined`). Bound before its first session, a label gets no room created: its
/// session gets the bound room's messages, and an unlabelled session does not.
/// Rebound elsewhere, the label's session stops getting the old room's messages
/// (now bound to no label: the unlabelled session's); unbound, it gets the rooms
/// bound to no label, as the unlabelled session does. A SIGKILLed `serve` leaves a
/// socket file that refuses connections: "no `serve` runs"; the restarted `serve`
/// replaces it and still has the binding (the journal); after SIGTERM the file is
/// gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_binds_a_labels_room_from_the_shell_and_its_session_follows_it() {
    use std::os::unix::fs::PermissionsExt as _;
    let mut f = Fixture::start(|_| {}).await;
    let room = f.room.clone();
    let socket = f.server.store_dir().join("operator.sock");
    let mode = std::fs::metadata(&socket)
        .unwrap_or_else(|e| panic!("{}: {e}", socket.display()))
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{}", socket.display());

    let outside = f.human.create_room(&[]).await;
    let refused = operator(
        &f.server,
        &["bind", "--identity", IDENTITY, "api", &outside],
    )
    .await;
    assert_eq!(
        refused,
        (
            Some(1),
            String::new(),
            format!(
                "matrix-channel: the identity {IDENTITY} is not joined to {outside}: invite it first\n"
            )
        )
    );

    // The fixture saw the bot join as the homeserver tells it; the server's core
    // learns it from the bot's next sync, so the first bind may still be `not_joined`.
    let start = std::time::Instant::now();
    let bound = loop {
        let bound = operator(&f.server, &["bind", "--identity", IDENTITY, "api", &room]).await;
        if bound.0 == Some(0) || start.elapsed() > crate::harness::WAIT {
            break bound;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(bound, (Some(0), format!("api -> {room}\n"), String::new()));

    let (plain, _) = f.channel("plain").await;
    let api = McpClient::spawn("api").await;
    api.connect(
        &format!("{}?room=api", f.server.url("/channel")),
        f.server.token(IDENTITY),
    )
    .await;
    // The label found its room bound: nothing is being created for it.
    let listed = operator(&f.server, &["bindings", "--identity", IDENTITY]).await;
    assert_eq!(
        listed,
        (
            Some(0),
            format!("api -> {room} (1 session)\n"),
            String::new()
        )
    );

    // The bound room's message reaches the api session, and not the unlabelled one:
    // its first push is a later message in a room bound to no label.
    let sent = f.human.send_text(&room, "to api").await;
    assert_push(
        &api.next_notification(WAIT).await,
        &message("to api", &f.origin(&sent).await),
    );
    let other = f.sync_barrier().await;
    let origin_in = |room: &str, event_id: &str, ts: u64| Origin {
        room: room.to_owned(),
        event_id: event_id.to_owned(),
        sender: f.human.user_id.clone(),
        user: HUMAN_NAME.to_owned(),
        ts,
    };
    let sent = f.human.send_text(&other, "to the unlabelled").await;
    let ts = f.human.ts(&other, &sent).await;
    assert_push(
        &plain.next_notification(WAIT).await,
        &message("to the unlabelled", &origin_in(&other, &sent, ts)),
    );

    // Rebound to the other room: the first room is bound to no label now.
    let rebound = operator(&f.server, &["bind", "--identity", IDENTITY, "api", &other]).await;
    assert_eq!(
        rebound,
        (Some(0), format!("api -> {other}\n"), String::new())
    );
    let sent = f.human.send_text(&room, "to the first room").await;
    assert_push(
        &plain.next_notification(WAIT).await,
        &message("to the first room", &f.origin(&sent).await),
    );
    let sent = f.human.send_text(&other, "to api again").await;
    let ts = f.human.ts(&other, &sent).await;
    assert_push(
        &api.next_notification(WAIT).await,
        &message("to api again", &origin_in(&other, &sent, ts)),
    );
    plain.expect_no_notification(QUIET).await;

    // Unbound: the label's session gets the rooms bound to no label.
    let unbound = operator(
        &f.server,
        &["bind", "--identity", IDENTITY, "api", "--unbind"],
    )
    .await;
    assert_eq!(
        unbound,
        (Some(0), "api -> (unbound)\n".to_owned(), String::new())
    );
    let sent = f.human.send_text(&other, "to everyone").await;
    let ts = f.human.ts(&other, &sent).await;
    let expected = message("to everyone", &origin_in(&other, &sent, ts));
    assert_push(&api.next_notification(WAIT).await, &expected);
    assert_push(&plain.next_notification(WAIT).await, &expected);
    let listed = operator(&f.server, &["bindings", "--identity", IDENTITY]).await;
    assert_eq!(
        listed,
        (
            Some(0),
            "api -> (unbound) (1 session)\n".to_owned(),
            String::new()
        )
    );
    assert!(
        !f.server.log_text().contains("created a room"),
        "no room was created for a bound label"
    );

    // A SIGKILLed serve leaves its socket file behind, refusing connections.
    api.close().await;
    plain.close().await;
    f.server.kill9().await;
    assert!(socket.exists(), "SIGKILL leaves the socket file");
    let no_serve = format!(
        "matrix-channel: no `serve` runs for this store ({} does not exist or refuses \
         connections)\n",
        socket.display()
    );
    let refused = operator(&f.server, &["bindings", "--identity", IDENTITY]).await;
    assert_eq!(refused, (Some(1), String::new(), no_serve.clone()));
    // The next serve replaces it; the binding is in the journal.
    f.server.restart().await;
    let (code, listed, _) = operator(&f.server, &["bindings", "--identity", IDENTITY]).await;
    assert_eq!(code, Some(0));
    assert!(listed.starts_with("api -> (unbound) ("), "{listed}");
    // SIGTERM: the socket file goes with the server.
    f.server.signal("TERM").await;
    f.server.wait_exit(WAIT).await;
    assert!(!socket.exists(), "{} outlived serve", socket.display());
    let refused = operator(&f.server, &["bind", "--identity", IDENTITY, "api", &room]).await;
    assert_eq!(refused, (Some(1), String::new(), no_serve));
}
