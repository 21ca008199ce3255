//! The agent's rooms against the real homeserver (issue 28, "Rooms";
//! docs/decisions/0033-agent-rooms.md): `create_room` makes a private room,
//! encrypted unless asked otherwise, with its name and topic, the identity's allowed
//! senders invited besides whom the agent names; `create_dm` opens a direct chat and
//! finds it again; `set_room_name` and `set_room_topic` change a room as a member reads
//! it, but never the permission room, and no name names an open request id.

use crate::harness::eventually;
use crate::harness::expect::tool_error_message;
use crate::harness::fixture::Fixture;
use crate::harness::human::{enc, Human};
use crate::harness::random_suffix;
use reqwest::Method;
use serde_json::{json, Value};

/// A state event of `room` as `reader` (a member) reads it; `Value::Null` when the
/// room has none.
async fn state(reader: &Human, room: &str, event_type: &str) -> Value {
    let path = format!("/_matrix/client/v3/rooms/{}/state/{event_type}/", enc(room));
    match reader.request(Method::GET, &path, None).await {
        Ok(body) => body,
        Err(e) if e.status == 404 => Value::Null,
        Err(e) => panic!("GET {path}: {} {}", e.status, e.body),
    }
}

/// The stripped state of `user`'s invite to `room`, as their `/sync` shows it.
async fn wait_invite(user: &Human, room: &str) -> Vec<Value> {
    eventually("the invite in the invitee's sync", async || {
        let sync = user.sync(None, 0, None).await;
        sync["rooms"]["invite"][room]["invite_state"]["events"]
            .as_array()
            .cloned()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_room_invites_the_allowed_senders_encrypts_by_default_and_names_it() {
    let f = Fixture::start(|_| {}).await;
    let mcp = f.tools("rooms").await;
    let (human, stranger) = (&f.human, &f.stranger);
    let name = format!("ops {}", random_suffix());

    let made = mcp
        .call_ok(
            "create_room",
            json!({ "name": name, "topic": "deploys", "invite": [stranger.user_id] }),
        )
        .await;
    let room = made["room_id"].as_str().expect("room_id").to_owned();
    let mut invited = vec![human.user_id.clone(), stranger.user_id.clone()];
    invited.sort();
    assert_eq!(
        made,
        json!({ "room_id": room, "created": true, "invited": invited })
    );
    // The allowed sender (the human) was invited without being asked for.
    human.join(&room).await;
    assert_eq!(state(human, &room, "m.room.name").await["name"], name);
    assert_eq!(
        state(human, &room, "m.room.topic").await["topic"],
        "deploys"
    );
    assert_eq!(
        state(human, &room, "m.room.encryption").await["algorithm"],
        "m.megolm.v1.aes-sha2"
    );
    assert_eq!(
        state(human, &room, "m.room.join_rules").await["join_rule"],
        "invite"
    );
    let members = human
        .call(
            Method::GET,
            &format!("/_matrix/client/v3/rooms/{}/members", enc(&room)),
            None,
        )
        .await;
    let invites: Vec<&str> = members["chunk"]
        .as_array()
        .expect("members")
        .iter()
        .filter(|m| m["content"]["membership"] == "invite")
        .filter_map(|m| m["state_key"].as_str())
        .collect();
    assert_eq!(invites, [stranger.user_id.as_str()], "{members}");

    // Asked for in the clear, with neither name nor topic: no m.room.encryption.
    let plain = mcp
        .call_ok("create_room", json!({ "encrypted": false }))
        .await;
    let plain = plain["room_id"].as_str().expect("room_id").to_owned();
    human.join(&plain).await;
    assert_eq!(state(human, &plain, "m.room.encryption").await, Value::Null);
    assert_eq!(state(human, &plain, "m.room.name").await, Value::Null);

    let message = tool_error_message(
        &mcp,
        "create_room",
        json!({ "invite": ["not a user"] }),
        "invalid_params",
    )
    .await;
    assert!(message.contains("not a user"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_room_name_and_topic_change_a_room_but_never_the_permission_room_nor_name_an_open_id() {
    let f = Fixture::start(|_| {}).await;
    let mcp = f.tools("rooms").await;
    let human = &f.human;
    let made = mcp
        .call_ok("create_room", json!({ "name": "before" }))
        .await;
    let room = made["room_id"].as_str().expect("room_id").to_owned();
    human.join(&room).await;

    let named = mcp
        .call_ok("set_room_name", json!({ "room_id": room, "name": "after" }))
        .await;
    let event_id = named["event_id"].as_str().expect("event_id");
    assert!(event_id.starts_with('$'), "{named}");
    assert_eq!(named["room_id"], room.as_str());
    assert_eq!(state(human, &room, "m.room.name").await["name"], "after");
    mcp.call_ok(
        "set_room_topic",
        json!({ "room_id": room, "topic": "the builds" }),
    )
    .await;
    assert_eq!(
        state(human, &room, "m.room.topic").await["topic"],
        "the builds"
    );
    // An empty topic removes it (the event stays, with an empty topic).
    mcp.call_ok("set_room_topic", json!({ "room_id": room, "topic": "" }))
        .await;
    assert_eq!(state(human, &room, "m.room.topic").await["topic"], "");

    // The permission room frames every prompt: its name and topic stay.
    let before = state(human, &f.room, "m.room.name").await;
    for (tool, args) in [
        (
            "set_room_name",
            json!({ "room_id": f.room, "name": "pre-approved" }),
        ),
        (
            "set_room_topic",
            json!({ "room_id": f.room, "topic": "react 👍 to all" }),
        ),
    ] {
        let message = tool_error_message(&mcp, tool, args, "forbidden").await;
        assert!(
            message.contains("is a permission prompt room"),
            "{tool}: {message}"
        );
    }
    assert_eq!(state(human, &f.room, "m.room.name").await, before);

    // With a prompt open, no name, topic or new room's text may name its id.
    let id = "qrstv";
    let _asker = f.open_request("asker", id).await;
    for (tool, args) in [
        (
            "set_room_name",
            json!({ "room_id": room, "name": format!("yes {id}") }),
        ),
        (
            "set_room_topic",
            json!({ "room_id": room, "topic": "answer QRSTV" }),
        ),
        ("create_room", json!({ "name": format!("<b>qr</b>stv") })),
    ] {
        let message = tool_error_message(&mcp, tool, args.clone(), "forbidden").await;
        assert!(
            message.contains(&format!("names the open permission request {id}")),
            "{tool} {args}: {message}"
        );
    }
    assert_eq!(state(human, &room, "m.room.name").await["name"], "after");

    tool_error_message(
        &mcp,
        "set_room_name",
        json!({ "room_id": "!nowhere:localhost", "name": "x" }),
        "not_joined",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_dm_opens_an_encrypted_direct_chat_and_finds_it_again() {
    let f = Fixture::start(|_| {}).await;
    let mcp = f.tools("rooms").await;
    let stranger = &f.stranger;

    let first = mcp
        .call_ok("create_dm", json!({ "user_id": stranger.user_id }))
        .await;
    let room = first["room_id"].as_str().expect("room_id").to_owned();
    assert_eq!(
        first,
        json!({ "room_id": room, "created": true, "invited": [stranger.user_id] })
    );
    // The stranger's invite says it is direct; the room is encrypted.
    let invite = wait_invite(stranger, &room).await;
    let member = invite
        .iter()
        .find(|e| e["type"] == "m.room.member" && e["state_key"] == stranger.user_id.as_str())
        .unwrap_or_else(|| panic!("the stranger's m.room.member in the invite: {invite:?}"));
    assert_eq!(member["content"]["is_direct"], true, "{member}");
    assert!(
        invite.iter().any(|e| e["type"] == "m.room.encryption"),
        "{invite:?}"
    );

    // Once the bot's sync has its m.direct, the same chat is found, not made again.
    let again = eventually("create_dm finds the direct chat", async || {
        let again = mcp
            .call_ok("create_dm", json!({ "user_id": stranger.user_id }))
            .await;
        (again["created"] == false).then_some(again)
    })
    .await;
    assert_eq!(
        again,
        json!({ "room_id": room, "created": false, "invited": [] })
    );

    let bot = f.bot.user_id.clone();
    let message = tool_error_message(
        &mcp,
        "create_dm",
        json!({ "user_id": bot }),
        "invalid_params",
    )
    .await;
    assert!(message.contains("is this identity"), "{message}");
    tool_error_message(
        &mcp,
        "create_dm",
        json!({ "user_id": "nobody" }),
        "invalid_params",
    )
    .await;
}
