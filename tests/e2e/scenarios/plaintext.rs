//! Never plaintext into an encrypted room (issue 12, item 3), with the encrypting
//! nio human of `encrypted.rs` (`harness/nio.rs`).
//!
//! What the homeserver stores is read back as the human (`GET
//! /rooms/{room}/event/{id}`, `/messages`): everything the bot sends into an
//! encrypted room is `m.room.encrypted`, but for a redaction without a reason
//! (`m.room.redaction` is never encrypted: the homeserver applies it). What
//! matrix-sdk would send in the clear (every `m.reaction`, a redaction's `reason`)
//! is refused with `would_send_plaintext` (`write::ensure_encrypted_or_plain`).
//! Encrypted attachments: nio uploads encrypted media and sends `file` {url, key,
//! iv, hashes, v}; the push has the attachment's facts and `download_attachment`
//! returns the original bytes. Strict mode: nio sends nothing to the bot's device
//! until it verified it, then the message arrives.

use crate::harness::expect::tool_error_message;
use crate::harness::expect::{assert_push, message, push};
use crate::harness::homeserver::homeserver;
use crate::harness::human::enc;
use crate::harness::mcp::McpClient;
use crate::harness::nio::{assert_decrypted, NioFixture};
use crate::harness::{QUIET, WAIT};
use base64::Engine as _;
use serde_json::{json, Value};
use std::time::Instant;

/// The bot's events in the room as the homeserver stores them (`/messages`, newest
/// first, the last 100), but its membership.
async fn bots_stored_events(f: &NioFixture) -> Vec<Value> {
    let page = f.human.raw.messages(&f.room, "b", 100, None).await;
    page["chunk"]
        .as_array()
        .expect("chunk")
        .iter()
        .filter(|e| e["sender"] == f.bot.user_id.as_str() && e["type"] != "m.room.member")
        .cloned()
        .collect()
}

/// Polls `room_info` until the bot takes the room as encrypted.
async fn wait_encrypted(session: &McpClient, room: &str) {
    let start = Instant::now();
    loop {
        let info = session
            .call_ok("room_info", json!({ "room_id": room }))
            .await;
        if info["encrypted"] == true {
            return;
        }
        assert!(
            start.elapsed() < WAIT,
            "the bot did not see {room} encrypted within {WAIT:?}: {info}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_an_encrypted_room_the_agents_edit_and_the_servers_notice_are_ciphertext_and_a_reaction_or_a_redaction_reason_is_refused_as_plaintext(
) {
    let f = NioFixture::start(|_| {}).await;
    let (session, _) = f.channel("session").await;
    let tools = f.tools("tools").await;
    let (room, human) = (&f.room, &f.human);
    let bot = f.bot.user_id.as_str();

    // The agent's message and its edit: ciphertext on the homeserver.
    let sent = session
        .call_ok(
            "send_message",
            json!({ "room_id": room, "text": "a first draft" }),
        )
        .await;
    let original = sent["event_ids"][0]
        .as_str()
        .expect("an event id")
        .to_owned();
    let edited = session
        .call_ok(
            "edit_message",
            json!({ "room_id": room, "event_id": original, "text": "the final words" }),
        )
        .await;
    let edit = edited["event_id"]
        .as_str()
        .expect("the edit's id")
        .to_owned();
    f.assert_stored_encrypted(&edit, bot).await;
    let got = human.wait_event(room, json!({ "event_id": edit })).await;
    assert_decrypted(&got);
    assert_eq!(
        (
            got.content["m.new_content"]["body"].as_str(),
            got.content["m.relates_to"]["rel_type"].as_str()
        ),
        (Some("the final words"), Some("m.replace")),
        "{:?}",
        got.raw
    );

    // A notice (the answer to a verdict for a request nobody made): ciphertext too.
    let verdict = human.send_text(room, "yes qwxyz").await;
    let notice = human
        .wait_event(
            room,
            json!({ "sender": bot, "rel_type": "m.in_reply_to", "relates_to": verdict.event_id }),
        )
        .await;
    assert_decrypted(&notice);
    assert_eq!(notice.content["msgtype"], "m.notice", "{:?}", notice.raw);
    f.assert_stored_encrypted(&notice.event_id, bot).await;

    // matrix-sdk sends every m.reaction in the clear: refused, nothing sent.
    let said = tool_error_message(
        &session,
        "send_reaction",
        json!({ "room_id": room, "event_id": verdict.event_id, "key": "\u{1F440}" }),
        "would_send_plaintext",
    )
    .await;
    assert!(said.contains("reaction"), "{said}");
    // A redaction's reason would be in the clear: refused; without one, it is sent,
    // as the spec sends every redaction (the homeserver must read it).
    let said = tool_error_message(
        &tools,
        "redact",
        json!({ "room_id": room, "event_id": original, "reason": "a private reason" }),
        "would_send_plaintext",
    )
    .await;
    assert!(said.contains("reason"), "{said}");
    let redacted = tools
        .call_ok("redact", json!({ "room_id": room, "event_id": original }))
        .await;
    let redaction = redacted["event_id"].as_str().expect("the redaction's id");
    let stored = human.raw.event(room, redaction).await;
    assert_eq!(stored["type"], "m.room.redaction", "{stored}");
    assert!(
        stored["content"].get("reason").is_none(),
        "no reason in the clear: {stored}"
    );

    // Everything the bot stored in the room: ciphertext, and the one bare redaction.
    let events = bots_stored_events(&f).await;
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(
        types,
        [
            "m.room.redaction",
            "m.room.encrypted",
            "m.room.encrypted",
            "m.room.encrypted"
        ],
        "the bot's events, newest first: the redaction, the notice, the edit, the \
         message (redacted), and no m.reaction: {events:#?}"
    );
    session.expect_no_notification(QUIET).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_encrypted_after_the_bot_joined_gets_ciphertext_from_then_on_and_no_reaction_in_the_clear(
) {
    let f = NioFixture::start_in(false, |_| {}).await;
    let (session, _) = f.channel("session").await;
    let tools = f.tools("tools").await;
    let (room, human) = (&f.room, &f.human);
    let bot = f.bot.user_id.as_str();

    // A room that never was encrypted: the bot's message and reaction go in the
    // clear, as everyone's there.
    let hello = human.send_text(room, "plain hello").await;
    assert!(!hello.encrypted, "{hello:?}");
    assert_push(
        &session.next_notification(WAIT).await,
        &message("plain hello", &f.origin(&hello.event_id).await),
    );
    let sent = session
        .call_ok(
            "send_message",
            json!({ "room_id": room, "text": "plain reply" }),
        )
        .await;
    let plain = sent["event_ids"][0]
        .as_str()
        .expect("an event id")
        .to_owned();
    assert_eq!(
        human.raw.event(room, &plain).await["type"],
        "m.room.message"
    );
    session
        .call_ok(
            "send_reaction",
            json!({ "room_id": room, "event_id": hello.event_id, "key": "\u{1F44B}" }),
        )
        .await;

    // The human turns encryption on (a fresh m.room.encryption state event); once
    // the bot's sync saw it, its sends are ciphertext, and a reaction is refused.
    human.enable_encryption(room).await;
    wait_encrypted(&tools, room).await;
    let sent = session
        .call_ok(
            "send_message",
            json!({ "room_id": room, "text": "now encrypted" }),
        )
        .await;
    let secret = sent["event_ids"][0]
        .as_str()
        .expect("an event id")
        .to_owned();
    f.assert_stored_encrypted(&secret, bot).await;
    let got = human.wait_event(room, json!({ "event_id": secret })).await;
    assert_decrypted(&got);
    assert_eq!(got.body.as_deref(), Some("now encrypted"), "{:?}", got.raw);
    tool_error_message(
        &session,
        "send_reaction",
        json!({ "room_id": room, "event_id": hello.event_id, "key": "\u{1F440}" }),
        "would_send_plaintext",
    )
    .await;
    let types: Vec<String> = bots_stored_events(&f)
        .await
        .iter()
        .filter_map(|e| e["type"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        types,
        ["m.room.encrypted", "m.reaction", "m.room.message"],
        "newest first: one ciphertext after encryption was on, the plain sends before"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_attachment_is_pushed_with_its_facts_and_download_attachment_returns_the_original_bytes(
) {
    let f = NioFixture::start(|_| {}).await;
    let (session, _) = f.channel("session").await;
    let (room, human) = (&f.room, &f.human);
    let me = human.user_id.as_str();

    // Every byte value, so nothing passes as text.
    let bytes: Vec<u8> = (0..=255u8).chain(b"the end\n".iter().copied()).collect();
    let (sent, file) = human
        .send_file(
            room,
            "m.file",
            "notes.bin",
            "application/octet-stream",
            &bytes,
            true,
        )
        .await;
    assert!(sent.encrypted, "{sent:?}");
    for field in ["url", "key", "iv", "hashes", "v"] {
        assert!(file.get(field).is_some(), "`file` has {field}: {file}");
    }
    let stored = f.assert_stored_encrypted(&sent.event_id, me).await;
    assert!(
        stored["content"].get("file").is_none() && stored["content"].get("url").is_none(),
        "the media's keys are inside the ciphertext: {stored}"
    );

    // The media repository holds ciphertext, not the bytes.
    let mxc = file["url"].as_str().expect("mxc url");
    let (server, media) = mxc
        .strip_prefix("mxc://")
        .and_then(|s| s.split_once('/'))
        .expect("mxc://server/id");
    let url = format!(
        "{}/_matrix/client/v1/media/download/{}/{}",
        homeserver().await.url,
        enc(server),
        enc(media)
    );
    let on_server = reqwest::Client::new()
        .get(&url)
        .bearer_auth(&human.account.access_token)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .bytes()
        .await
        .expect("the media's bytes");
    assert_eq!(on_server.len(), bytes.len(), "AES-CTR keeps the length");
    assert_ne!(
        on_server.as_ref(),
        bytes.as_slice(),
        "the homeserver holds ciphertext"
    );

    // The push: the attachment's facts from `info`, no content but the marker.
    assert_push(
        &session.next_notification(WAIT).await,
        &push(
            "message",
            "(attachment)",
            &f.origin(&sent.event_id).await,
            json!({
                "msgtype": "m.file",
                "attachment_kind": "file",
                "attachment_name": "notes.bin",
                "attachment_size": bytes.len().to_string(),
                "attachment_mime": "application/octet-stream",
            }),
        ),
    );

    // download_attachment decrypts: the original bytes.
    let got = session
        .call_ok(
            "download_attachment",
            json!({ "room_id": room, "event_id": sent.event_id }),
        )
        .await;
    assert_eq!(
        got,
        json!({
            "filename": "notes.bin",
            "mimetype": "application/octet-stream",
            "size": bytes.len(),
            "data_base64": base64::engine::general_purpose::STANDARD.encode(&bytes),
        })
    );

    // read_messages says it is an encrypted attachment.
    let page = session
        .call_ok("read_messages", json!({ "room_id": room, "limit": 5 }))
        .await;
    let summary = page["events"]
        .as_array()
        .and_then(|events| {
            events
                .iter()
                .find(|e| e["event_id"] == sent.event_id.as_str())
        })
        .unwrap_or_else(|| panic!("{} in {page}", sent.event_id))
        .clone();
    assert_eq!(
        summary["attachment"],
        json!({ "filename": "notes.bin", "size": bytes.len(),
                "mimetype": "application/octet-stream", "encrypted": true }),
        "{summary}"
    );

    // The same media under a wrong sha256: matrix-sdk refuses it, no bytes come back.
    let mut forged = file.clone();
    forged["hashes"]["sha256"] = json!("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA");
    let forged_id = human
        .ok(json!({
            "cmd": "send_event", "room": room, "type": "m.room.message",
            "content": { "msgtype": "m.file", "body": "notes.bin", "file": forged,
                         "info": { "mimetype": "application/octet-stream", "size": bytes.len() } },
        }))
        .await["event_id"]
        .as_str()
        .expect("event_id")
        .to_owned();
    session.next_notification(WAIT).await;
    let result = session
        .call(
            "download_attachment",
            json!({ "room_id": room, "event_id": forged_id }),
        )
        .await
        .expect("a tool result");
    assert_eq!(
        result["isError"], true,
        "a hash mismatch is an error: {result}"
    );
    session.expect_no_notification(QUIET).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strict_human_reaches_the_bot_only_after_verifying_its_device_against_the_published_key()
{
    let f = NioFixture::start(|_| {}).await;
    let (session, _) = f.channel("session").await;
    let (room, human, bot) = (&f.room, &f.human, f.bot.user_id.as_str());
    let [device] = f.bot_devices.as_slice() else {
        panic!("the bot has one device: {:?}", f.bot_devices);
    };

    // Strict ("only send to verified devices"): the bot's device is not verified.
    let refused = human
        .send_text_strict(room, "strict, before verifying")
        .await
        .expect_err("nio refuses to send to an unverified device");
    assert_eq!(refused.kind, "unverified_device", "{refused}");

    // The human verifies the device whose ed25519 key is the one the homeserver
    // publishes for the bot (matrix-channel prints none of its own).
    let published = f.published_ed25519(device).await;
    let known = human.verify(bot, device).await;
    assert_eq!(known, published, "nio holds the published key of {device}");
    let listed = human.devices(bot).await;
    assert_eq!(listed[0]["verified"], true, "{listed:?}");

    let sent = human
        .send_text_strict(room, "strict, after verifying")
        .await
        .expect("a strict send to the verified device");
    assert!(sent.encrypted, "{sent:?}");
    f.assert_stored_encrypted(&sent.event_id, &human.user_id)
        .await;
    // The refused message never left nio: the first push is the strict one.
    assert_push(
        &session.next_notification(WAIT).await,
        &message("strict, after verifying", &f.origin(&sent.event_id).await),
    );
    session.expect_no_notification(QUIET).await;
}
