//! Encrypted rooms (issue 12), with a human whose client encrypts for itself: matrix-nio
//! with vodozemac (`harness/nio.rs`, `tests/e2e/nio/human.py`), which no one on this
//! project wrote. The room is created by the human with `m.room.encryption`
//! (`m.megolm.v1.aes-sha2`) in its initial state and the bot invited; the bot joins
//! because an allowed sender invited it.
//!
//! What the homeserver stores is read back over raw HTTP as the human
//! (`GET /rooms/{room}/event/{id}`): the human's messages and everything the server
//! posts (the agent's `send_message`, prompts, outcome edits) must be
//! `m.room.encrypted`; nio decrypts them to the exact text.

use crate::harness::expect::{
    asker, assert_push, assert_verdict, message, outcome_html, outcome_plain, permission_request,
    prompt_html, prompt_plain, push, Answer, PERMISSION_REQUEST,
};
use crate::harness::nio::{assert_decrypted, NioFixture, NioHuman};
use crate::harness::{QUIET, WAIT};
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_an_encrypted_room_a_message_a_reply_an_edit_reactions_and_a_redaction_are_pushed_decrypted_as_what_they_are(
) {
    let f = NioFixture::start(|_| {}).await;
    let (session, _) = f.channel("session").await;
    let (room, human) = (&f.room, &f.human);
    let me = human.user_id.as_str();

    // A message: encrypted by nio, stored as ciphertext, pushed as its plain text.
    let first = human.send_text(room, "first words, encrypted").await;
    assert!(
        first.encrypted,
        "nio encrypts in an encrypted room: {first:?}"
    );
    f.assert_stored_encrypted(&first.event_id, me).await;
    let got = session.next_notification(WAIT).await;
    assert_push(
        &got,
        &message("first words, encrypted", &f.origin(&first.event_id).await),
    );

    // A reply: the parent quoted from its decrypted text.
    let reply = human
        .reply(room, &first.event_id, "an encrypted reply")
        .await;
    assert!(reply.encrypted, "{reply:?}");
    let got = session.next_notification(WAIT).await;
    assert_push(
        &got,
        &push(
            "message",
            "an encrypted reply",
            &f.origin(&reply.event_id).await,
            json!({
                "msgtype": "m.text",
                "in_reply_to": first.event_id,
                "in_reply_to_status": "quoted",
                "in_reply_to_trust": "allowed",
                "in_reply_to_sender": me,
                "in_reply_to_quote": "first words, encrypted",
            }),
        ),
    );

    // An edit: the new content from inside the ciphertext.
    let edit = human
        .edit(room, &first.event_id, "first words, edited")
        .await;
    assert!(edit.encrypted, "{edit:?}");
    f.assert_stored_encrypted(&edit.event_id, me).await;
    let got = session.next_notification(WAIT).await;
    assert_push(
        &got,
        &push(
            "edit",
            "first words, edited",
            &f.origin(&edit.event_id).await,
            json!({ "edit_of": first.event_id, "msgtype": "m.text" }),
        ),
    );

    // A reaction as nio sends it (in the clear), then one encrypted as Element sends it.
    let plain = human.react(room, &first.event_id, "\u{1F389}").await;
    assert!(
        !plain.encrypted,
        "nio sends m.reaction in the clear: {plain:?}"
    );
    let got = session.next_notification(WAIT).await;
    assert_push(
        &got,
        &push(
            "reaction",
            "reacted \u{1F389}",
            &f.bare_origin(&plain.event_id).await,
            json!({ "reaction_key": "\u{1F389}", "reacted_to": first.event_id }),
        ),
    );
    let sealed = human
        .react_encrypted(room, &reply.event_id, "\u{1F440}")
        .await;
    f.assert_stored_encrypted(&sealed.event_id, me).await;
    let got = session.next_notification(WAIT).await;
    assert_push(
        &got,
        &push(
            "reaction",
            "reacted \u{1F440}",
            &f.bare_origin(&sealed.event_id).await,
            json!({ "reaction_key": "\u{1F440}", "reacted_to": reply.event_id }),
        ),
    );

    // A redaction (never encrypted) of the encrypted reply: a retraction.
    let redaction = human
        .redact(room, &reply.event_id, Some("wrong words"))
        .await;
    let got = session.next_notification(WAIT).await;
    assert_push(
        &got,
        &push(
            "retraction",
            "retracted an earlier event (see redacts)",
            &f.bare_origin(&redaction.event_id).await,
            json!({ "redacts": reply.event_id }),
        ),
    );

    session.expect_no_notification(QUIET).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_send_message_reaches_an_encrypted_room_as_ciphertext_that_the_human_decrypts_to_its_text(
) {
    let f = NioFixture::start(|_| {}).await;
    let (session, _) = f.channel("session").await;
    let (room, human) = (&f.room, &f.human);
    let bot = f.bot.user_id.as_str();

    let text = "hello, Ada: this goes out encrypted";
    let sent = session
        .call_ok("send_message", json!({ "room_id": room, "text": text }))
        .await;
    let ids = sent["event_ids"].as_array().expect("event_ids");
    assert_eq!(ids.len(), 1, "one short message is one event: {sent}");
    let id = ids[0].as_str().expect("an event id");

    // What the homeserver stores is ciphertext; nio decrypts it to the text.
    f.assert_stored_encrypted(id, bot).await;
    let got = human.wait_event(room, json!({ "event_id": id })).await;
    assert_decrypted(&got);
    assert_eq!(
        (
            got.sender.as_str(),
            got.event_type.as_str(),
            got.body.as_deref()
        ),
        (bot, "m.room.message", Some(text)),
        "{:?}",
        got.raw
    );
    assert_eq!(got.content["msgtype"], "m.text", "{:?}", got.raw);

    // The session's own message is not pushed back to it: the human's next one is
    // the next push.
    let marker = human.send_text(room, "got it").await;
    assert_push(
        &session.next_notification(WAIT).await,
        &message("got it", &f.origin(&marker.event_id).await),
    );
    session.expect_no_notification(QUIET).await;
    assert_eq!(
        f.bot_devices.len(),
        1,
        "nio knows the one device the server logged in"
    );
}

const TOOL: &str = "Bash";
const DESCRIPTION: &str = "List the files & folders";
const PREVIEW: &str = r#"{"command": "ls -la <dir>"}"#;

/// As in `permission_reaction.rs`: the reaction must be taken after the window, not
/// before, and the window must be long enough to tell.
const SETTLE_MS: u64 = 1_500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_an_encrypted_room_prompts_and_outcomes_are_ciphertext_and_a_yes_or_a_thumbs_up_allows_once(
) {
    // nio has no cross-signing, so its device is never cross-signed: verdicts from
    // it count only with `verdict_devices = "any"` (the default refuses them, see
    // `a_verdict_from_the_approvers_device_that_is_not_cross_signed_...` below).
    let f = NioFixture::start(|config| {
        config.identities[0].settle_ms = Some(SETTLE_MS);
        config.identities[0].verdict_devices = Some("any");
    })
    .await;
    let (session, _) = f.channel("session").await;
    let (room, human) = (&f.room, &f.human);
    let (me, bot) = (human.user_id.as_str(), f.bot.user_id.as_str());

    // The prompt is ciphertext on the homeserver; nio reads its exact text.
    let id = "kqzpw";
    session
        .notify(
            PERMISSION_REQUEST,
            permission_request(id, TOOL, DESCRIPTION, PREVIEW),
        )
        .await;
    let prompt = human.wait_message(room, bot, id).await;
    assert_decrypted(&prompt);
    f.assert_stored_encrypted(&prompt.event_id, bot).await;
    assert_eq!(prompt.content["msgtype"], "m.text", "{:?}", prompt.raw);
    let who = asker(prompt.body.as_deref().unwrap_or_default(), id);
    assert_eq!(
        prompt.body.as_deref(),
        Some(prompt_plain(id, who.as_deref(), TOOL, DESCRIPTION, PREVIEW).as_str())
    );
    assert_eq!(prompt.content["format"], "org.matrix.custom.html");
    assert_eq!(
        prompt.content["formatted_body"],
        prompt_html(id, who.as_deref(), TOOL, DESCRIPTION, PREVIEW)
    );

    // The human's encrypted "yes <id>" allows, once.
    let yes = human.send_text(room, &format!("yes {id}")).await;
    assert!(yes.encrypted, "{yes:?}");
    assert_verdict(&session.next_notification(WAIT).await, id, "allow");
    let answer = Answer::AllowedByReply { by: me };
    let outcome = human
        .wait_event(
            room,
            json!({ "sender": bot, "rel_type": "m.replace", "relates_to": prompt.event_id }),
        )
        .await;
    assert_decrypted(&outcome);
    f.assert_stored_encrypted(&outcome.event_id, bot).await;
    let new = &outcome.content["m.new_content"];
    assert_eq!(
        new["body"],
        outcome_plain(id, TOOL, &answer),
        "{:?}",
        outcome.raw
    );
    assert_eq!(new["format"], "org.matrix.custom.html");
    assert_eq!(new["formatted_body"], outcome_html(id, TOOL, &answer));
    let marker = human.send_text(room, "and now?").await;
    assert_push(
        &session.next_notification(WAIT).await,
        &message("and now?", &f.origin(&marker.event_id).await),
    );

    // Another request, answered by an encrypted 👍 on its prompt: allow, after the
    // settle window.
    let id = "rstuv";
    session
        .notify(
            PERMISSION_REQUEST,
            permission_request(id, "Write", "Write a file", "{}"),
        )
        .await;
    let prompt = human.wait_message(room, bot, id).await;
    assert_decrypted(&prompt);
    f.assert_stored_encrypted(&prompt.event_id, bot).await;
    let key = "\u{1F44D}";
    let reacted = Instant::now();
    let vote = human.react_encrypted(room, &prompt.event_id, key).await;
    f.assert_stored_encrypted(&vote.event_id, me).await;
    let verdict = session.next_notification(WAIT).await;
    assert!(
        reacted.elapsed() >= Duration::from_millis(SETTLE_MS),
        "the verdict came {:?} after the reaction, inside the {SETTLE_MS} ms settle window",
        reacted.elapsed()
    );
    assert_verdict(&verdict, id, "allow");
    let answer = Answer::AllowedWith { by: me, key };
    let outcome = human
        .wait_event(
            room,
            json!({ "sender": bot, "rel_type": "m.replace", "relates_to": prompt.event_id }),
        )
        .await;
    assert_decrypted(&outcome);
    f.assert_stored_encrypted(&outcome.event_id, bot).await;
    let new = &outcome.content["m.new_content"];
    assert_eq!(
        new["body"],
        outcome_plain(id, "Write", &answer),
        "{:?}",
        outcome.raw
    );
    assert_eq!(new["formatted_body"], outcome_html(id, "Write", &answer));

    session.expect_no_notification(QUIET).await;
}

/// The harness's own contract, without the server: what a later scenario needs to hold
/// a room key back from the bot. Two nio humans; the first blacklists the second's
/// device, so the second cannot decrypt; taken off the blacklist and the key re-shared,
/// the same message decrypts late. A strict send to the unverified device is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nio_human_withholds_keys_from_a_blacklisted_device_and_a_reshared_key_decrypts_late() {
    let (ada, bob) = tokio::join!(
        NioHuman::register("ada", None),
        NioHuman::register("bob", None)
    );
    let room = ada.create_encrypted_room(&[&bob.user_id]).await;
    bob.join(&room).await;
    let devices = ada.wait_joined(&room, &bob.user_id).await;
    assert_eq!(
        devices,
        vec![bob.device_id.clone()],
        "nio knows bob's one device"
    );

    let seen = ada.send_text(&room, "for bob").await;
    let got = bob
        .wait_event(&room, json!({ "event_id": seen.event_id }))
        .await;
    assert_decrypted(&got);
    assert_eq!(got.body.as_deref(), Some("for bob"));

    ada.blacklist(&bob.user_id, Some(&bob.device_id)).await;
    let listed = ada.devices(&bob.user_id).await;
    assert_eq!(listed[0]["blacklisted"], true, "{listed:?}");
    let withheld = ada.send_text(&room, "not for bob yet").await;
    assert!(withheld.encrypted, "{withheld:?}");
    assert_ne!(
        withheld.session_id, seen.session_id,
        "blacklisting replaces the room's session"
    );
    let got = bob
        .wait_event(&room, json!({ "event_id": withheld.event_id }))
        .await;
    assert!(
        got.encrypted && !got.decrypted && got.body.is_none(),
        "bob has no key for it: {:?}",
        got.raw
    );
    bob.sync().await;
    let got = bob
        .wait_event(&room, json!({ "event_id": withheld.event_id }))
        .await;
    assert!(!got.decrypted, "still no key after a sync: {:?}", got.raw);

    ada.unblacklist(&bob.user_id, Some(&bob.device_id)).await;
    let shared = ada.reshare_keys(&room, &bob.user_id, None).await;
    assert!(
        shared.contains(withheld.session_id.as_ref().unwrap()),
        "{shared:?}"
    );
    let got = bob
        .wait_event(
            &room,
            json!({ "event_id": withheld.event_id, "decrypted": true }),
        )
        .await;
    assert!(got.late, "decrypted after its key came: {:?}", got.raw);
    assert_eq!(got.body.as_deref(), Some("not for bob yet"));

    let refused = ada
        .send_text_strict(&room, "only to verified devices")
        .await
        .expect_err("bob's device is not verified");
    assert_eq!(refused.kind, "unverified_device", "{refused}");
}

/// The content of the push that says an event could not be decrypted
/// (`mc_model::render::render_undecryptable`).
const UNDECRYPTABLE: &str = "An encrypted event from this sender could not be decrypted: \
                             its room key has not reached this device. Its content is \
                             unknown. If the key arrives later, the event is pushed then.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_whose_room_key_is_withheld_is_told_after_the_grace_period_and_pushed_once_its_key_arrives(
) {
    let f =
        NioFixture::start(|config| config.identities[0].undecryptable_grace_secs = Some(2)).await;
    let (session, _) = f.channel("session").await;
    let (room, human) = (&f.room, &f.human);
    let me = human.user_id.as_str();

    // The bot's devices blacklisted: nio shares the room key with none of them.
    human.blacklist(&f.bot.user_id, None).await;
    let secret = human
        .send_text(room, "a secret the bot cannot read yet")
        .await;
    assert!(secret.encrypted, "{secret:?}");
    f.assert_stored_encrypted(&secret.event_id, me).await;

    // After the grace period: that it exists, never what it says.
    let got = session.next_notification(WAIT).await;
    assert_push(
        &got,
        &push(
            "undecryptable",
            UNDECRYPTABLE,
            &f.origin(&secret.event_id).await,
            json!({}),
        ),
    );

    // The key arrives late: the message itself is pushed, once.
    human.unblacklist(&f.bot.user_id, None).await;
    let shared = human.reshare_keys(room, &f.bot.user_id, None).await;
    assert!(!shared.is_empty(), "nio re-shared the room key");
    let got = session.next_notification(WAIT).await;
    assert_push(
        &got,
        &message(
            "a secret the bot cannot read yet",
            &f.origin(&secret.event_id).await,
        ),
    );
    assert!(
        session.try_next_notification(QUIET).await.is_none(),
        "nothing else is pushed"
    );
}

/// Issue 12 item 4, with the default `verdict_devices` (`cross_signed`): nio's device
/// is not cross-signed (nio has no cross-signing), so its encrypted `yes` is refused
/// with a notice; its 👍, which nio sends unencrypted, names no device and is refused
/// too. The prompt stays pending: no verdict reaches the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verdict_from_the_approvers_device_that_is_not_cross_signed_is_refused_with_a_notice() {
    let f = NioFixture::start(|config| {
        config.identities[0].settle_ms = Some(SETTLE_MS);
    })
    .await;
    let (session, _) = f.channel("session").await;
    let (room, human) = (&f.room, &f.human);
    let bot = f.bot.user_id.as_str();

    let id = "mnpqr";
    session
        .notify(
            PERMISSION_REQUEST,
            permission_request(id, TOOL, DESCRIPTION, PREVIEW),
        )
        .await;
    let prompt = human.wait_message(room, bot, id).await;

    let yes = human.send_text(room, &format!("yes {id}")).await;
    assert!(yes.encrypted, "{yes:?}");
    // The notice replies to the refused answer.
    let notice = human
        .wait_event(
            room,
            json!({
                "sender": bot, "type": "m.room.message", "rel_type": "m.in_reply_to",
                "relates_to": yes.event_id,
                "body_contains": "came from a device you have not cross-signed",
            }),
        )
        .await;
    assert_decrypted(&notice);
    assert_eq!(notice.content["msgtype"], "m.notice", "{:?}", notice.raw);
    assert!(
        notice
            .body
            .as_deref()
            .unwrap_or_default()
            .contains(&format!("This answer to {id}")),
        "{:?}",
        notice.raw
    );

    let vote = human.react(room, &prompt.event_id, "\u{1F44D}").await;
    assert!(
        !vote.encrypted,
        "nio sends m.reaction in the clear: {vote:?}"
    );
    // This one replies to the prompt (a reply to a reaction is no use to a reader).
    let notice = human
        .wait_event(
            room,
            json!({
                "sender": bot, "type": "m.room.message", "rel_type": "m.in_reply_to",
                "relates_to": prompt.event_id, "body_contains": "was sent unencrypted",
            }),
        )
        .await;
    assert!(
        notice
            .body
            .as_deref()
            .unwrap_or_default()
            .starts_with("This reaction"),
        "{:?}",
        notice.raw
    );

    // Past the settle window: neither counted.
    session
        .expect_no_notification(Duration::from_millis(SETTLE_MS) + QUIET)
        .await;
}
