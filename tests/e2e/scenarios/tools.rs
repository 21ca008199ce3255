//! The contract of every tool (`impl/src/mcp.rs`, README "HTTP and MCP") against the
//! real homeserver: what each mount lists, each tool's annotations, each tool's
//! `structuredContent` written out from what the test created (event ids, bodies,
//! senders, keys, bytes), and each documented failure as `isError` with its
//! `structuredContent.error.kind`.
//!
//! One fixture per group of tools; where a tool is on both mounts, both are called.

use crate::harness::eventually;
use crate::harness::expect::tool_error;
use crate::harness::fixture::{Fixture, HUMAN_NAME, IDENTITY, SETTLE_MS};
use crate::harness::homeserver::homeserver;
use crate::harness::human::{enc, Human};
use crate::harness::{random_suffix, WAIT};
use base64::Engine as _;
use reqwest::Method;
use serde_json::{json, Value};

/// 👍 with VARIATION SELECTOR-16, as many clients send it: the key must come back raw.
const THUMBS_UP: &str = "\u{1F44D}\u{FE0F}";
const PARTY: &str = "\u{1F389}";

/// The tools of `/channel` (`CHANNEL_TOOLS`), sorted.
const CHANNEL_TOOLS: [&str; 10] = [
    "acknowledge",
    "download_attachment",
    "edit_message",
    "get_reactions",
    "read_messages",
    "read_thread",
    "send_file",
    "send_message",
    "send_reaction",
    "whoami",
];

/// Every tool with its annotations as `impl/src/mcp.rs` sets them (rmcp leaves out
/// the hints it was not given: read-only tools carry no `destructiveHint`).
fn annotations() -> Vec<(&'static str, Value)> {
    let read =
        |open: bool| json!({ "readOnlyHint": true, "idempotentHint": true, "openWorldHint": open });
    let write = |destructive: bool, idempotent: bool, open: bool| {
        json!({
            "readOnlyHint": false,
            "destructiveHint": destructive,
            "idempotentHint": idempotent,
            "openWorldHint": open,
        })
    };
    vec![
        ("whoami", read(false)),
        ("list_rooms", read(true)),
        ("read_messages", read(true)),
        ("read_thread", read(true)),
        ("get_reactions", read(true)),
        ("send_message", write(false, false, true)),
        ("send_file", write(false, false, true)),
        ("edit_message", write(true, false, true)),
        ("send_reaction", write(false, true, true)),
        ("redact", write(true, true, true)),
        ("acknowledge", write(false, true, false)),
        ("download_attachment", read(true)),
        ("join_room", write(false, true, true)),
        ("leave_room", write(true, true, true)),
        ("invite", write(false, true, true)),
        ("create_room", write(false, false, true)),
        ("create_dm", write(false, true, true)),
        ("set_room_name", write(false, true, true)),
        ("set_room_topic", write(false, true, true)),
        ("room_info", read(true)),
        ("room_members", read(true)),
        ("search_messages", read(true)),
        ("unread", read(true)),
        ("get_profile", read(true)),
    ]
}

/// The server part of a user id (`@a:server` → `server`).
fn server_name(user_id: &str) -> &str {
    user_id
        .split_once(':')
        .expect("an MXID has a server name")
        .1
}

/// The room's name, as a member reads it.
async fn room_name(reader: &Human, room: &str) -> Value {
    let path = format!("/_matrix/client/v3/rooms/{}/state/m.room.name/", enc(room));
    reader.call(Method::GET, &path, None).await["name"].clone()
}

/// The summary `read_messages` and `read_thread` give of one unencrypted event:
/// the common fields (its room, and `suspicious` and `truncated` false: the test's
/// texts hold no marker and are short), `ts` read back from the homeserver, plus
/// `fields`.
async fn summary(
    reader: &Human,
    room: &str,
    event_id: &str,
    (event_type, sender, allowed): (&str, &str, bool),
    fields: Value,
) -> Value {
    let mut s = json!({
        "event_id": event_id,
        "type": event_type,
        "sender": sender,
        "sender_allowed": allowed,
        "ts": reader.ts(room, event_id).await,
        "decryption": "plaintext",
        "redacted": false,
        "room_id": room,
        "suspicious": false,
        "truncated": false,
    });
    for (k, v) in fields.as_object().expect("fields are an object") {
        s[k] = v.clone();
    }
    s
}

fn ids(events: &Value) -> Vec<String> {
    events
        .as_array()
        .unwrap_or_else(|| panic!("a list of events: {events}"))
        .iter()
        .map(|e| e["event_id"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A list of reactions sorted by event id (the tool promises no order).
fn sorted(reactions: &Value) -> Vec<Value> {
    let mut list = reactions
        .as_array()
        .unwrap_or_else(|| panic!("a list of reactions: {reactions}"))
        .clone();
    list.sort_by(|a, b| a["event_id"].as_str().cmp(&b["event_id"].as_str()));
    list
}

// ---------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_mount_lists_exactly_its_tools_annotated_and_whoami_and_list_rooms_describe_the_identity(
) {
    let mut f = Fixture::start(|_| {}).await;
    let mcp = f.tools("mcp").await;
    let (channel, _) = f.channel("channel").await;
    let expected = annotations();

    // The exact tool lists, each tool with its annotations, on both mounts.
    for (mount, client, names) in [
        (
            "/mcp",
            &mcp,
            expected.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        ),
        ("/channel", &channel, CHANNEL_TOOLS.to_vec()),
    ] {
        let tools = client.list_tools().await;
        let mut listed: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
        listed.sort_unstable();
        let mut want = names.clone();
        want.sort_unstable();
        assert_eq!(listed, want, "{mount}: the tool list");
        for tool in &tools {
            let name = tool["name"].as_str().unwrap_or_default();
            let (_, want) = expected
                .iter()
                .find(|(n, _)| *n == name)
                .expect("a known tool");
            assert_eq!(
                &tool["annotations"], want,
                "{mount}: the annotations of {name}: {tool}"
            );
            assert!(
                tool["description"].as_str().is_some_and(|d| !d.is_empty()),
                "{mount}: {name} has a description"
            );
            assert_eq!(tool["inputSchema"]["type"], "object", "{mount}: {tool}");
        }
    }
    // A tool of /mcp only does not exist on /channel.
    for (tool, _) in &expected {
        if CHANNEL_TOOLS.contains(tool) {
            continue;
        }
        let refused = channel.call(tool, json!({})).await;
        let err = refused.expect_err(&format!("{tool} on /channel"));
        assert_eq!(err.code, json!(-32602), "{tool} on /channel: {err}");
    }

    // whoami: the identity, its user and device, the channel settings as configured.
    let bot_devices = Human::from_account(f.bot.clone())
        .await
        .call(Method::GET, "/_matrix/client/v3/devices", None)
        .await;
    let hs = homeserver().await.url.clone();
    let mut device = None;
    for (mount, client) in [("mcp", &mcp), ("channel", &channel)] {
        let mut who = client.call_ok("whoami", json!({})).await;
        // `health` is GET /health's report of the identity (ages vary): its shape here,
        // the rest exactly below.
        let health = who
            .as_object_mut()
            .and_then(|o| o.remove("health"))
            .unwrap_or_else(|| panic!("whoami on /{mount}: a health key"));
        assert_eq!(health["name"], IDENTITY, "{health}");
        assert_eq!(health["status"], "ok", "{health}");
        assert_eq!(health["sync"]["state"], "syncing", "{health}");
        assert_eq!(health["sync"]["token_rejected"], false, "{health}");
        assert_eq!(health["undecryptable_backlog"], 0, "{health}");
        assert_eq!(health["engine"]["keeps_up"], true, "{health}");
        let device_id = who["device_id"]
            .as_str()
            .unwrap_or_else(|| panic!("whoami on /{mount}: a device_id: {who}"))
            .to_owned();
        assert!(
            bot_devices["devices"]
                .as_array()
                .is_some_and(|d| d.iter().any(|d| d["device_id"] == device_id.as_str())),
            "whoami's device {device_id} is one of the bot's devices: {bot_devices}"
        );
        assert_eq!(
            who,
            json!({
                "identity": IDENTITY,
                "user_id": f.bot.user_id,
                "device_id": device_id,
                "homeserver": hs,
                "mount": mount,
                "channel": {
                    "allowed_senders": [f.human.user_id],
                    "approvers": [f.human.user_id],
                    "permission_room": f.room,
                    "prompt_ttl_secs": 900,
                    "settle_ms": SETTLE_MS,
                    "replay_budget": 200,
                },
            }),
            "whoami on /{mount}"
        );
        assert!(
            device.get_or_insert(device_id.clone()) == &device_id,
            "one device on both mounts"
        );
    }

    // list_rooms: a stranger's invite is not taken (only allowed senders' are), and
    // shows as invited; the fixture room is joined, with its name.
    let invited_room = f.stranger.create_room(&[&f.bot.user_id]).await;
    // Waited for with its name: the stripped state can reach the store in more than
    // one step, so a first sight may lack it under load.
    let invited = eventually("the stranger's named invite in list_rooms", async || {
        let rooms = mcp.call_ok("list_rooms", json!({})).await;
        rooms["invited"]
            .as_array()?
            .iter()
            .find(|r| r["room_id"] == invited_room.as_str() && !r["name"].is_null())
            .cloned()
    })
    .await;
    // The human's invite to a fresh room is taken after the stranger's was seen; the
    // bot's room list shows it joined once the join's answer is in.
    let barrier = f.sync_barrier().await;
    let rooms = eventually("the barrier's room joined in list_rooms", async || {
        let rooms = mcp.call_ok("list_rooms", json!({})).await;
        rooms["joined"]
            .as_array()?
            .iter()
            .any(|r| r["room_id"] == barrier.as_str())
            .then_some(rooms)
    })
    .await;
    let fixture_room = json!({
        "room_id": f.room,
        "name": room_name(&f.human, &f.room).await,
        "topic": null,
        "encrypted": false,
        "joined_members": 3,
    });
    let joined = rooms["joined"].as_array().expect("joined");
    assert!(
        joined.len() == 2 && joined.contains(&fixture_room),
        "list_rooms joined holds {fixture_room} and the barrier's room: {rooms}"
    );
    assert!(
        !joined.iter().any(|r| r["room_id"] == invited_room.as_str()),
        "the stranger's invite was not taken: {rooms}"
    );
    // Still invited (its details may have grown as more of its stripped state
    // arrived; they are checked exactly below, from the first sight).
    assert!(
        rooms["invited"]
            .as_array()
            .is_some_and(|i| i.iter().any(|r| r["room_id"] == invited_room.as_str())),
        "{rooms}"
    );
    // What the invite's stripped state tells: the name, and the inviter joined.
    assert_eq!(
        invited,
        json!({
            "room_id": invited_room,
            "name": room_name(&f.stranger, &invited_room).await,
            "topic": null,
            "encrypted": false,
            "joined_members": 1,
        }),
        "the invited room"
    );
    assert!(
        !f.stranger
            .joined_members(&invited_room)
            .await
            .contains(&f.bot.user_id),
        "the bot did not join the stranger's room"
    );

    // The device survives a restart, and so does the /mcp session.
    f.server.kill9().await;
    f.server.restart().await;
    let who = mcp.call_ok("whoami", json!({})).await;
    assert_eq!(
        who["device_id"].as_str(),
        device.as_deref(),
        "the same device after a restart: {who}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_messages_read_thread_and_get_reactions_give_the_timeline_as_the_homeserver_holds_it()
{
    let f = Fixture::start(|_| {}).await;
    let mcp = f.tools("mcp").await;
    let (channel, _) = f.channel("channel").await;
    let clients = [("/mcp", &mcp), ("/channel", &channel)];
    let (room, human, stranger) = (&f.room, &f.human, &f.stranger);
    let (me, them) = (human.user_id.as_str(), stranger.user_id.as_str());

    let a1 = human.send_text(room, "one").await;
    // No reactions yet: an empty list, not an error.
    for (mount, client) in clients {
        let got = client
            .call_ok("get_reactions", json!({ "room_id": room, "event_id": a1 }))
            .await;
        assert_eq!(
            got,
            json!({ "event_id": a1, "reactions": [] }),
            "{mount}: get_reactions before any"
        );
    }
    let a2 = human.send_text(room, "two").await;
    let a3 = human.send_text(room, "three").await;
    let s1 = stranger.send_text(room, "stranger says").await;
    let r = human.reply(room, &a1, "a reply").await;
    let e = human.edit(room, &a2, "two, edited").await;
    let x = human.react(room, &a1, THUMBS_UP).await;
    let y = stranger.react(room, &a1, PARTY).await;
    let t1 = human.send_thread(room, &a3, "thread one").await;
    let t2 = human.send_thread(room, &a3, "thread two").await;
    let d = human.send_text(room, "to be redacted").await;
    let rd = human.redact(room, &d, None).await;
    let last = human.send_text(room, "last").await;

    let message = ("m.room.message", me, true);
    let text = |body: &str| json!({ "msgtype": "m.text", "body": body, "reactions": {} });
    let reply_event = human.event(room, &r).await;
    let a3_summary = summary(human, room, &a3, message, text("three")).await;
    let t1_summary = summary(
        human,
        room,
        &t1,
        message,
        json!({ "msgtype": "m.text", "body": "thread one", "thread_root": a3, "reactions": {} }),
    )
    .await;
    let t2_summary = summary(
        human,
        room,
        &t2,
        message,
        json!({ "msgtype": "m.text", "body": "thread two", "thread_root": a3, "reactions": {} }),
    )
    .await;
    // Newest first.
    let timeline = vec![
        summary(human, room, &last, message, text("last")).await,
        summary(
            human,
            room,
            &rd,
            ("m.room.redaction", me, true),
            json!({ "redacts": d }),
        )
        .await,
        summary(human, room, &d, message, json!({ "redacted": true })).await,
        t2_summary.clone(),
        t1_summary.clone(),
        summary(
            human,
            room,
            &y,
            ("m.reaction", them, false),
            json!({ "reaction_key": PARTY, "reacted_to": a1 }),
        )
        .await,
        summary(
            human,
            room,
            &x,
            ("m.reaction", me, true),
            json!({ "reaction_key": THUMBS_UP, "reacted_to": a1 }),
        )
        .await,
        summary(
            human,
            room,
            &e,
            message,
            json!({ "msgtype": "m.text", "body": "two, edited", "edit_of": a2, "reactions": {} }),
        )
        .await,
        summary(
            human,
            room,
            &r,
            message,
            json!({
                "msgtype": "m.text",
                "body": format!("> <{me}> one\n\na reply"),
                "formatted_body": reply_event["content"]["formatted_body"],
                "reply_to": a1,
                "reactions": {},
            }),
        )
        .await,
        summary(
            human,
            room,
            &s1,
            ("m.room.message", them, false),
            text("stranger says"),
        )
        .await,
        a3_summary.clone(),
        summary(human, room, &a2, message, text("two")).await,
        summary(
            human,
            room,
            &a1,
            message,
            json!({
                "msgtype": "m.text",
                "body": "one",
                "reactions": { THUMBS_UP: 1, PARTY: 1 },
            }),
        )
        .await,
    ];
    let mine: Vec<String> = ids(&json!(timeline));

    for (mount, client) in clients {
        // Pages of 5, 5 and 3, newest first, each continuing where the last ended.
        let mut from = Value::Null;
        let mut seen = Vec::new();
        for (n, size) in [5usize, 5, 3].into_iter().enumerate() {
            let page = client
                .call_ok(
                    "read_messages",
                    json!({ "room_id": room, "limit": size, "from": from }),
                )
                .await;
            let start = seen.len();
            assert_eq!(
                page["events"],
                json!(timeline[start..start + size]),
                "{mount}: page {n} of read_messages"
            );
            seen.extend(ids(&page["events"]));
            from = page["next"].clone();
            assert!(from.is_string(), "{mount}: page {n} has a next: {page}");
        }
        assert_eq!(seen, mine, "{mount}: the pages neither overlap nor skip");
        // Older than everything the test sent: the room's creation, ending the room.
        let rest = client
            .call_ok(
                "read_messages",
                json!({ "room_id": room, "limit": 100, "from": from }),
            )
            .await;
        let rest = rest["events"].as_array().expect("events").clone();
        assert!(
            rest.iter().all(|e| e["state_key"].is_string()),
            "{mount}: only the room's state events are older: {rest:?}"
        );
        assert_eq!(
            rest.last().map(|e| &e["type"]),
            Some(&json!("m.room.create")),
            "{mount}: the oldest event"
        );
        // The default page is 20 events.
        let page = client
            .call_ok("read_messages", json!({ "room_id": room }))
            .await;
        assert_eq!(
            page["events"].as_array().map(Vec::len),
            Some(20),
            "{mount}: {page}"
        );
        assert_eq!(
            page["events"].as_array().unwrap()[..timeline.len()],
            timeline[..],
            "{mount}: the default page"
        );
        // Forward from the start: the creation first, the test's events oldest first.
        let page = client
            .call_ok(
                "read_messages",
                json!({ "room_id": room, "limit": 100, "direction": "forward" }),
            )
            .await;
        let events = page["events"].as_array().expect("events");
        assert_eq!(events[0]["type"], "m.room.create", "{mount}: {page}");
        let forward: Vec<&Value> = events
            .iter()
            .filter(|e| mine.iter().any(|id| e["event_id"] == id.as_str()))
            .collect();
        let oldest_first: Vec<&Value> = timeline.iter().rev().collect();
        assert_eq!(forward, oldest_first, "{mount}: read_messages forward");

        for bad in [
            json!({ "room_id": room, "limit": 0 }),
            json!({ "room_id": room, "limit": 101 }),
            json!({ "room_id": room, "direction": "sideways" }),
        ] {
            tool_error(client, "read_messages", bad, "invalid_params").await;
        }

        // read_thread: the root, then the thread's events in order.
        let thread = client
            .call_ok("read_thread", json!({ "room_id": room, "thread_root": a3 }))
            .await;
        assert_eq!(
            thread["events"],
            json!([a3_summary, t1_summary, t2_summary]),
            "{mount}: read_thread"
        );
        for bad in [
            json!({ "room_id": room, "thread_root": a3, "limit": 0 }),
            json!({ "room_id": room, "thread_root": "not an event id" }),
        ] {
            tool_error(client, "read_thread", bad, "invalid_params").await;
        }

        // get_reactions: both, with sender, raw key and ts.
        let got = client
            .call_ok("get_reactions", json!({ "room_id": room, "event_id": a1 }))
            .await;
        assert_eq!(got["event_id"], a1.as_str(), "{mount}: {got}");
        assert_eq!(
            sorted(&got["reactions"]),
            sorted(&json!([
                { "event_id": x, "sender": me, "key": THUMBS_UP, "ts": human.ts(room, &x).await },
                { "event_id": y, "sender": them, "key": PARTY, "ts": human.ts(room, &y).await },
            ])),
            "{mount}: get_reactions"
        );
        tool_error(
            client,
            "get_reactions",
            json!({ "room_id": room, "event_id": "not an event id" }),
            "invalid_params",
        )
        .await;
    }

    // A redacted reaction is gone.
    human.redact(room, &x, None).await;
    for (mount, client) in clients {
        let got = client
            .call_ok("get_reactions", json!({ "room_id": room, "event_id": a1 }))
            .await;
        assert_eq!(
            got,
            json!({
                "event_id": a1,
                "reactions": [
                    { "event_id": y, "sender": them, "key": PARTY, "ts": human.ts(room, &y).await },
                ],
            }),
            "{mount}: get_reactions after the redaction of {x}"
        );
    }
}

/// A 100,000-byte Markdown text of short paragraphs (`"\n\n"` between them).
fn long_text() -> String {
    const SIZE: usize = 100_000;
    let mut paragraphs = Vec::new();
    let mut len = 0;
    for i in 0.. {
        let p = format!("Paragraph {i:05}: the quick brown fox jumps over the lazy dog, twice.");
        if len + 2 + p.len() > SIZE {
            // The last paragraph fills the text up to the exact size.
            let pad = SIZE - len - 2;
            paragraphs.push(format!("End{}", ".".repeat(pad - 3)));
            break;
        }
        len += p.len() + if paragraphs.is_empty() { 0 } else { 2 };
        paragraphs.push(p);
    }
    let text = paragraphs.join("\n\n");
    assert_eq!(text.len(), SIZE);
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_message_edit_message_send_reaction_redact_and_acknowledge_act_as_documented() {
    let f = Fixture::start(|_| {}).await;
    let mcp = f.tools("mcp").await;
    let (channel, _) = f.channel("channel").await;
    let (room, human, bot) = (&f.room, &f.human, f.bot.user_id.as_str());

    let h1 = human.send_text(room, "hello bot").await;
    let pushed = channel.next_notification(WAIT).await;
    assert_eq!(pushed.params["meta"]["event_id"], h1.as_str(), "{pushed:?}");

    // Markdown: the raw text as body, its HTML as formatted_body.
    let sent = channel
        .call_ok(
            "send_message",
            json!({ "room_id": room, "text": "**bold** and `code`" }),
        )
        .await;
    let m1 = sent["event_ids"][0]
        .as_str()
        .expect("an event id")
        .to_owned();
    assert_eq!(sent, json!({ "event_ids": [m1] }));
    let event = human.event(room, &m1).await;
    assert_eq!(
        (&event["sender"], &event["type"], &event["content"]),
        (
            &json!(bot),
            &json!("m.room.message"),
            &json!({
                "msgtype": "m.text",
                "body": "**bold** and `code`",
                "format": "org.matrix.custom.html",
                "formatted_body": "<strong>bold</strong> and <code>code</code>",
            })
        ),
        "the message as the human reads it: {event}"
    );

    // A reply, a thread message, and a reply within the thread.
    let reply = mcp
        .call_ok(
            "send_message",
            json!({ "room_id": room, "text": "a reply", "reply_to": h1 }),
        )
        .await;
    let reply = human
        .event(room, reply["event_ids"][0].as_str().expect("an event id"))
        .await;
    assert_eq!(
        reply["content"]["m.relates_to"],
        json!({ "m.in_reply_to": { "event_id": h1 } }),
        "{reply}"
    );
    assert_eq!(reply["content"]["body"], "a reply", "{reply}");
    let threaded = channel
        .call_ok(
            "send_message",
            json!({ "room_id": room, "text": "in the thread", "thread_root": h1 }),
        )
        .await;
    let m3 = threaded["event_ids"][0].as_str().expect("an event id");
    let event = human.event(room, m3).await;
    assert_eq!(
        event["content"]["m.relates_to"],
        json!({
            "rel_type": "m.thread",
            "event_id": h1,
            "is_falling_back": true,
            "m.in_reply_to": { "event_id": h1 },
        }),
        "{event}"
    );
    let within = channel
        .call_ok(
            "send_message",
            json!({ "room_id": room, "text": "answer", "thread_root": h1, "reply_to": m3 }),
        )
        .await;
    let event = human
        .event(room, within["event_ids"][0].as_str().expect("an event id"))
        .await;
    assert_eq!(
        event["content"]["m.relates_to"],
        json!({
            "rel_type": "m.thread",
            "event_id": h1,
            "m.in_reply_to": { "event_id": m3 },
        }),
        "{event}"
    );

    // 100,000 bytes: several events, each under Matrix's 65,536-byte limit, in order,
    // that together hold the whole text.
    let text = long_text();
    // (Not call_ok: its failure message would print the 100,000 bytes.)
    let result = mcp
        .call("send_message", json!({ "room_id": room, "text": text }))
        .await
        .expect("a tool result");
    assert_ne!(
        result["isError"], true,
        "send_message of 100,000 bytes: {}",
        result["structuredContent"]
    );
    let sent = &result["structuredContent"];
    let parts: Vec<String> = sent["event_ids"]
        .as_array()
        .expect("event_ids")
        .iter()
        .map(|id| id.as_str().expect("an event id").to_owned())
        .collect();
    assert!(parts.len() >= 2, "{sent}");
    let mut bodies = Vec::new();
    for id in &parts {
        let event = human.event(room, id).await;
        let size = serde_json::to_vec(&event).expect("JSON").len();
        assert!(size < 65_536, "part {id} is {size} bytes");
        assert_eq!(event["sender"], bot, "{id}");
        bodies.push(event["content"]["body"].as_str().expect("body").to_owned());
    }
    assert_eq!(
        bodies.join("\n\n"),
        text,
        "the parts hold the text, in order"
    );
    let page = human.messages(room, "b", parts.len() as u32, None).await;
    let newest: Vec<String> = ids(&page["chunk"]);
    let mut in_order = parts.clone();
    in_order.reverse();
    assert_eq!(
        newest, in_order,
        "the parts are the latest events, in order"
    );

    // The same txn_id twice (over both mounts): one event, the same ids.
    let txn = format!("tools-{}", random_suffix());
    let args = json!({ "room_id": room, "text": "exactly once", "txn_id": txn });
    let first = mcp.call_ok("send_message", args.clone()).await;
    let again = channel.call_ok("send_message", args).await;
    assert_eq!(first, again, "the same txn_id, the same event ids");
    let page = human.messages(room, "b", 10, None).await;
    let copies = page["chunk"]
        .as_array()
        .expect("chunk")
        .iter()
        .filter(|e| e["content"]["body"] == "exactly once")
        .count();
    assert_eq!(copies, 1, "sent once: {page}");

    for bad in [
        json!({ "room_id": room, "text": "" }),
        json!({ "room_id": room, "text": " \n\n " }),
        json!({ "room_id": room, "text": "x", "reply_to": "not an event id" }),
        json!({ "room_id": room, "text": "x", "thread_root": "not an event id" }),
    ] {
        tool_error(&channel, "send_message", bad, "invalid_params").await;
    }
    tool_error(
        &mcp,
        "send_message",
        json!({ "room_id": room, "text": "x", "reply_to": format!("$missing{}", random_suffix()) }),
        "not_found",
    )
    .await;

    // edit_message: the identity's own message; the human sees m.replace.
    let edited = channel
        .call_ok(
            "edit_message",
            json!({ "room_id": room, "event_id": m1, "text": "**bolder**" }),
        )
        .await;
    let edit_id = edited["event_id"].as_str().expect("event_id").to_owned();
    assert_eq!(edited, json!({ "event_id": edit_id }));
    let edit = human.event(room, &edit_id).await;
    assert_eq!(edit["sender"], bot);
    assert_eq!(
        edit["content"]["m.relates_to"],
        json!({ "rel_type": "m.replace", "event_id": m1 }),
        "{edit}"
    );
    assert_eq!(
        edit["content"]["m.new_content"],
        json!({
            "msgtype": "m.text",
            "body": "**bolder**",
            "format": "org.matrix.custom.html",
            "formatted_body": "<strong>bolder</strong>",
        }),
        "{edit}"
    );
    // Not the human's; not empty; not a missing event.
    tool_error(
        &mcp,
        "edit_message",
        json!({ "room_id": room, "event_id": h1, "text": "mine now" }),
        "forbidden",
    )
    .await;
    assert_eq!(human.event(room, &h1).await["content"]["body"], "hello bot");
    tool_error(
        &channel,
        "edit_message",
        json!({ "room_id": room, "event_id": m1, "text": "" }),
        "invalid_params",
    )
    .await;
    tool_error(
        &channel,
        "edit_message",
        json!({ "room_id": room, "event_id": format!("$missing{}", random_suffix()), "text": "x" }),
        "not_found",
    )
    .await;

    // send_reaction: the raw key, visible to the human and to get_reactions.
    let reacted = channel
        .call_ok(
            "send_reaction",
            json!({ "room_id": room, "event_id": h1, "key": THUMBS_UP }),
        )
        .await;
    let rx = reacted["event_id"].as_str().expect("event_id").to_owned();
    assert_eq!(reacted, json!({ "event_id": rx }));
    let reaction = human.event(room, &rx).await;
    assert_eq!(
        (&reaction["type"], &reaction["sender"], &reaction["content"]),
        (
            &json!("m.reaction"),
            &json!(bot),
            &json!({ "m.relates_to": { "rel_type": "m.annotation", "event_id": h1, "key": THUMBS_UP } })
        ),
        "{reaction}"
    );
    let got = mcp
        .call_ok("get_reactions", json!({ "room_id": room, "event_id": h1 }))
        .await;
    assert_eq!(
        got,
        json!({
            "event_id": h1,
            "reactions": [{ "event_id": rx, "sender": bot, "key": THUMBS_UP, "ts": reaction["origin_server_ts"] }],
        })
    );
    tool_error(
        &channel,
        "send_reaction",
        json!({ "room_id": room, "event_id": h1, "key": "" }),
        "invalid_params",
    )
    .await;

    // redact: the reaction is gone; another's message is beyond the bot's power.
    let redacted = mcp
        .call_ok(
            "redact",
            json!({ "room_id": room, "event_id": rx, "reason": "oops" }),
        )
        .await;
    let rr = redacted["event_id"].as_str().expect("event_id").to_owned();
    assert_eq!(redacted, json!({ "event_id": rr }));
    let redaction = human.event(room, &rr).await;
    assert_eq!(
        (&redaction["type"], &redaction["sender"]),
        (&json!("m.room.redaction"), &json!(bot)),
        "{redaction}"
    );
    assert_eq!(redaction["content"]["reason"], "oops", "{redaction}");
    let target = redaction["content"]["redacts"]
        .as_str()
        .or(redaction["redacts"].as_str());
    assert_eq!(target, Some(rx.as_str()), "{redaction}");
    let got = channel
        .call_ok("get_reactions", json!({ "room_id": room, "event_id": h1 }))
        .await;
    assert_eq!(got, json!({ "event_id": h1, "reactions": [] }));
    tool_error(
        &mcp,
        "redact",
        json!({ "room_id": room, "event_id": h1 }),
        "forbidden",
    )
    .await;
    assert_eq!(human.event(room, &h1).await["content"]["body"], "hello bot");

    // acknowledge: a pushed event is known (to every session of the identity), an
    // event never pushed is not; with receipt, the human sees the bot's m.read.
    for client in [&channel, &mcp, &channel] {
        let ack = client
            .call_ok("acknowledge", json!({ "event_id": h1 }))
            .await;
        assert_eq!(ack, json!({ "acknowledged": true, "receipt": false }));
    }
    for never in [m1.clone(), format!("$never{}", random_suffix())] {
        let ack = channel
            .call_ok("acknowledge", json!({ "event_id": never }))
            .await;
        assert_eq!(
            ack,
            json!({ "acknowledged": false, "receipt": false }),
            "{never}"
        );
    }
    tool_error(
        &channel,
        "acknowledge",
        json!({ "event_id": "not an event id" }),
        "invalid_params",
    )
    .await;
    tool_error(
        &channel,
        "acknowledge",
        json!({ "event_id": h1, "receipt": true }),
        "invalid_params",
    )
    .await;
    let ack = channel
        .call_ok(
            "acknowledge",
            json!({ "event_id": h1, "room_id": room, "receipt": true }),
        )
        .await;
    assert_eq!(ack, json!({ "acknowledged": true, "receipt": true }));
    let filter = json!({
        "room": {
            "rooms": [room],
            "timeline": { "limit": 1 },
            "state": { "types": [] },
            "ephemeral": { "types": ["m.receipt"] },
            "account_data": { "not_types": ["*"] },
        },
        "presence": { "not_types": ["*"] },
        "account_data": { "not_types": ["*"] },
    });
    eventually(
        "the bot's m.read receipt on the human's message",
        async || {
            let sync = human.sync(None, 0, Some(&filter)).await;
            let receipts = sync["rooms"]["join"][room.as_str()]["ephemeral"]["events"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            receipts
                .iter()
                .any(|r| r["content"][h1.as_str()]["m.read"][bot].is_object())
                .then_some(())
        },
    )
    .await;
}

/// The cap of `download_attachment` in its test.
const CAP: u64 = 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_attachment_returns_the_exact_bytes_up_to_the_cap_and_fails_by_kind() {
    let f = Fixture::start(|config| config.max_download_bytes = Some(CAP)).await;
    let mcp = f.tools("mcp").await;
    let (channel, _) = f.channel("channel").await;
    let (room, human) = (&f.room, &f.human);

    // Every byte value, so nothing is taken as text.
    let small: Vec<u8> = (0..=255u8).chain(b"the end\n".iter().copied()).collect();
    let mxc = human
        .upload(&small, "application/octet-stream", "blob.bin")
        .await;
    let file = human
        .send(
            room,
            "m.room.message",
            &json!({
                "msgtype": "m.file",
                "body": "blob.bin",
                "filename": "blob.bin",
                "url": mxc,
                "info": { "mimetype": "application/octet-stream", "size": small.len() },
            }),
        )
        .await;
    // An image whose caption is not its file name.
    let png = b"\x89PNG\r\n\x1a\n not really an image".to_vec();
    let mxc = human.upload(&png, "image/png", "pic.png").await;
    let image = human
        .send(
            room,
            "m.room.message",
            &json!({
                "msgtype": "m.image",
                "body": "a caption",
                "filename": "pic.png",
                "url": mxc,
                "info": { "mimetype": "image/png", "size": png.len() },
            }),
        )
        .await;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    for (mount, client) in [("/mcp", &mcp), ("/channel", &channel)] {
        let got = client
            .call_ok(
                "download_attachment",
                json!({ "room_id": room, "event_id": file }),
            )
            .await;
        assert_eq!(
            got,
            json!({
                "filename": "blob.bin",
                "mimetype": "application/octet-stream",
                "size": small.len(),
                "data_base64": b64(&small),
            }),
            "{mount}: the file"
        );
        let got = client
            .call_ok(
                "download_attachment",
                json!({ "room_id": room, "event_id": image }),
            )
            .await;
        assert_eq!(
            got,
            json!({
                "filename": "pic.png",
                "mimetype": "image/png",
                "size": png.len(),
                "data_base64": b64(&png),
            }),
            "{mount}: the image"
        );
    }

    // Over the cap: declared (refused before downloading) or found on download.
    let big = vec![b'x'; CAP as usize + 1];
    let mxc = human.upload(&big, "text/plain", "big.txt").await;
    let declared = human
        .send(
            room,
            "m.room.message",
            &json!({
                "msgtype": "m.file",
                "body": "big.txt",
                "url": mxc,
                "info": { "mimetype": "text/plain", "size": big.len() },
            }),
        )
        .await;
    let undeclared = human
        .send(
            room,
            "m.room.message",
            &json!({ "msgtype": "m.file", "body": "big.txt", "url": mxc }),
        )
        .await;
    let text = human.send_text(room, "no attachment here").await;
    let missing = format!("$missing{}", random_suffix());
    for client in [&mcp, &channel] {
        for event_id in [&declared, &undeclared] {
            tool_error(
                client,
                "download_attachment",
                json!({ "room_id": room, "event_id": event_id }),
                "too_large",
            )
            .await;
        }
        for event_id in [&text, &missing] {
            tool_error(
                client,
                "download_attachment",
                json!({ "room_id": room, "event_id": event_id }),
                "not_found",
            )
            .await;
        }
        tool_error(
            client,
            "download_attachment",
            json!({ "room_id": room, "event_id": "not an event id" }),
            "invalid_params",
        )
        .await;
    }
}

/// Every tool that takes a room, with arguments valid but for `room`.
fn room_calls(room: &str, event_id: &str, user_id: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("read_messages", json!({ "room_id": room })),
        (
            "read_thread",
            json!({ "room_id": room, "thread_root": event_id }),
        ),
        (
            "get_reactions",
            json!({ "room_id": room, "event_id": event_id }),
        ),
        ("send_message", json!({ "room_id": room, "text": "hi" })),
        (
            "edit_message",
            json!({ "room_id": room, "event_id": event_id, "text": "hi" }),
        ),
        (
            "send_reaction",
            json!({ "room_id": room, "event_id": event_id, "key": THUMBS_UP }),
        ),
        (
            "acknowledge",
            json!({ "event_id": event_id, "room_id": room, "receipt": true }),
        ),
        (
            "download_attachment",
            json!({ "room_id": room, "event_id": event_id }),
        ),
        ("redact", json!({ "room_id": room, "event_id": event_id })),
        ("leave_room", json!({ "room_id": room })),
        ("invite", json!({ "room_id": room, "user_id": user_id })),
        ("room_info", json!({ "room_id": room })),
        ("room_members", json!({ "room_id": room })),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_room_invite_room_info_room_members_and_leave_room_manage_rooms_and_a_bad_room_fails_by_kind(
) {
    let f = Fixture::start(|_| {}).await;
    let mcp = f.tools("mcp").await;
    let (channel, _) = f.channel("channel").await;
    let (human, stranger, bot) = (&f.human, &f.stranger, f.bot.user_id.as_str());
    let server = server_name(bot).to_owned();

    // A stranger's invite is not taken by itself: join_room takes it.
    let sfx = random_suffix();
    let created = stranger
        .call(
            Method::POST,
            "/_matrix/client/v3/createRoom",
            Some(&json!({
                "preset": "private_chat",
                "room_version": "12",
                "name": format!("tools {sfx}"),
                "topic": "a topic",
                "room_alias_name": format!("tools-{sfx}"),
                "invite": [bot],
            })),
        )
        .await;
    let room = created["room_id"].as_str().expect("room_id").to_owned();
    eventually("the stranger's invite in list_rooms", async || {
        let rooms = mcp.call_ok("list_rooms", json!({})).await;
        rooms["invited"]
            .as_array()?
            .iter()
            .any(|r| r["room_id"] == room.as_str())
            .then_some(())
    })
    .await;
    tool_error(&mcp, "room_info", json!({ "room_id": room }), "not_joined").await;
    let joined = mcp.call_ok("join_room", json!({ "room": room })).await;
    assert_eq!(joined, json!({ "room_id": room }));
    stranger.wait_joined(&room, bot).await;

    // room_info, once the bot's sync has the room's state.
    let expected = json!({
        "room_id": room,
        "name": format!("tools {sfx}"),
        "topic": "a topic",
        "canonical_alias": format!("#tools-{sfx}:{server}"),
        "encrypted": false,
        "joined_members": 2,
    });
    let info = eventually("room_info of the joined room", async || {
        let info = mcp.call_ok("room_info", json!({ "room_id": room })).await;
        (info == expected).then_some(info)
    })
    .await;
    assert_eq!(info, expected);

    // invite: the human is invited (as the stranger sees it), then joins.
    let invited = mcp
        .call_ok(
            "invite",
            json!({ "room_id": room, "user_id": human.user_id }),
        )
        .await;
    assert_eq!(invited, json!({ "invited": human.user_id }));
    let path = format!(
        "/_matrix/client/v3/rooms/{}/state/m.room.member/{}",
        enc(&room),
        enc(&human.user_id)
    );
    assert_eq!(
        stranger.call(Method::GET, &path, None).await["membership"],
        "invite"
    );
    tool_error(
        &mcp,
        "invite",
        json!({ "room_id": room, "user_id": "not a user" }),
        "invalid_params",
    )
    .await;
    human.join(&room).await;

    // room_members: the human allowed, the stranger and the bot not.
    let bot_name = human
        .call(
            Method::GET,
            &format!("/_matrix/client/v3/profile/{}", enc(bot)),
            None,
        )
        .await["displayname"]
        .clone();
    let member = |user: &str, name: Value, power: Value, allowed: bool| {
        json!({
            "user_id": user,
            "display_name": name,
            "membership": "join",
            "power_level": power,
            "allowed": allowed,
        })
    };
    let mut want = vec![
        member(&human.user_id, json!(HUMAN_NAME), json!(0), true),
        // Room version 12: a creator's power is above every number.
        member(
            &stranger.user_id,
            json!(HUMAN_NAME),
            json!("infinite"),
            false,
        ),
        member(bot, bot_name, json!(0), false),
    ];
    want.sort_by(|a, b| a["user_id"].as_str().cmp(&b["user_id"].as_str()));
    let members = eventually("the human joined in room_members", async || {
        let got = mcp
            .call_ok("room_members", json!({ "room_id": room }))
            .await;
        let mut list = got["members"].as_array()?.clone();
        list.sort_by(|a, b| a["user_id"].as_str().cmp(&b["user_id"].as_str()));
        (list.len() == 3 && list[..].iter().all(|m| m["membership"] == "join")).then_some(list)
    })
    .await;
    assert_eq!(members, want, "room_members");

    // join_room by alias: a public room the bot was never invited to.
    let public = human
        .call(
            Method::POST,
            "/_matrix/client/v3/createRoom",
            Some(&json!({ "preset": "public_chat", "room_alias_name": format!("pub-{sfx}") })),
        )
        .await["room_id"]
        .as_str()
        .expect("room_id")
        .to_owned();
    let joined = mcp
        .call_ok(
            "join_room",
            json!({ "room": format!("#pub-{sfx}:{server}") }),
        )
        .await;
    assert_eq!(joined, json!({ "room_id": public }));
    human.wait_joined(&public, bot).await;

    // leave_room: gone for the stranger, and no longer joined for every tool.
    let left = mcp.call_ok("leave_room", json!({ "room_id": room })).await;
    assert_eq!(left, json!({ "left": room }));
    eventually("the bot left", async || {
        (!stranger
            .joined_members(&room)
            .await
            .iter()
            .any(|m| m == bot))
        .then_some(())
    })
    .await;
    tool_error(
        &mcp,
        "read_messages",
        json!({ "room_id": room }),
        "not_joined",
    )
    .await;
    tool_error(
        &channel,
        "read_messages",
        json!({ "room_id": room }),
        "not_joined",
    )
    .await;
    tool_error(&mcp, "leave_room", json!({ "room_id": room }), "not_joined").await;

    // A malformed room id, a room that does not exist: by kind, on every tool.
    let event_id = human.send_text(&f.room, "an event").await;
    let unknown_room = format!("!unknown{sfx}:{server}");
    for (mount, client) in [("/mcp", &mcp), ("/channel", &channel)] {
        for (room, kind) in [
            ("not a room", "invalid_params"),
            (&*unknown_room, "not_joined"),
        ] {
            for (tool, args) in room_calls(room, &event_id, &human.user_id) {
                if mount == "/channel" && !CHANNEL_TOOLS.contains(&tool) {
                    continue;
                }
                tool_error(client, tool, args, kind).await;
            }
        }
    }
    tool_error(
        &mcp,
        "join_room",
        json!({ "room": "not a room" }),
        "invalid_params",
    )
    .await;
    tool_error(
        &mcp,
        "join_room",
        json!({ "room": unknown_room }),
        "not_found",
    )
    .await;
    tool_error(
        &mcp,
        "join_room",
        json!({ "room": format!("#unknown-{sfx}:{server}") }),
        "not_found",
    )
    .await;
}
