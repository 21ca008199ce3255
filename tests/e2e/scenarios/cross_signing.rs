//! Cross-signing and recovery (issue 12, item 1): a person whose client shares room
//! keys only with devices their owner cross-signed (MSC4153 "exclude insecure
//! devices"; matrix-sdk's `CollectStrategy::IdentityBasedStrategy`, what Element does
//! in that mode) reaches the bot once `login` set up its cross-signing; and a new store
//! restored with the recovery key that `recovery enable` printed reads a message sent
//! before it existed.
//!
//! The human here is a matrix-sdk 0.18 client of its own (its own store, its own
//! Olm account and cross-signing), not the server's code: it decides by itself whether
//! the bot's device gets the room key.

use crate::harness::expect::{
    assert_push, assert_verdict, message, permission_request, Origin, PERMISSION_REQUEST,
};
use crate::harness::homeserver::{homeserver, register, Account};
use crate::harness::human::Human;
use crate::harness::mcp::McpClient;
use crate::harness::server::{Identity, Server, ServerConfig};
use crate::harness::{scenario_permit, WAIT};
use matrix_sdk::config::SyncSettings;
use matrix_sdk::encryption::EncryptionSettings;
use matrix_sdk::ruma::api::client::room::create_room::v3::{Request as CreateRoom, RoomPreset};
use matrix_sdk::ruma::api::client::uiaa;
use matrix_sdk::ruma::events::room::encryption::RoomEncryptionEventContent;
use matrix_sdk::ruma::events::room::message::RoomMessageEventContent;
use matrix_sdk::ruma::events::InitialStateEvent;
use matrix_sdk::ruma::{OwnedRoomId, OwnedUserId};
use matrix_sdk::Client;
use serde_json::json;
use std::time::Duration;

const IDENTITY: &str = "bot";
const HUMAN_NAME: &str = "Ada";

/// A person on a strict client: matrix-sdk with the identity-based room key sharing
/// strategy (keys only to devices signed by their owner's cross-signing identity).
struct StrictHuman {
    client: Client,
    /// The same account over the plain Client-Server API (joins, timestamps).
    api: Human,
    _store: tempfile::TempDir,
}

impl StrictHuman {
    async fn register(prefix: &str) -> StrictHuman {
        let account = register(prefix).await;
        let store = tempfile::tempdir().expect("a temp dir");
        let client = Client::builder()
            .homeserver_url(&homeserver().await.url)
            .sqlite_store(store.path(), None)
            .respect_login_well_known(false)
            .with_room_key_recipient_strategy(identity_based_strategy())
            .with_encryption_settings(EncryptionSettings::default())
            .build()
            .await
            .expect("the human's client");
        client
            .matrix_auth()
            .login_username(&account.user_id, &account.password)
            .initial_device_display_name("strict human")
            .send()
            .await
            .expect("the human logs in");
        cross_sign(&client, &account).await;
        client
            .account()
            .set_display_name(Some(HUMAN_NAME))
            .await
            .expect("the human's display name");
        StrictHuman {
            client,
            api: Human::from_account(account).await,
            _store: store,
        }
    }

    fn user_id(&self) -> &str {
        &self.api.user_id
    }

    /// One sync, returning within a second when nothing happens.
    async fn sync(&self) {
        self.client
            .sync_once(SyncSettings::default().timeout(Duration::from_secs(1)))
            .await
            .expect("the human's sync");
    }

    /// Creates an encrypted private room (`m.room.encryption` in its initial state)
    /// inviting `bot`.
    async fn create_encrypted_room(&self, bot: &str) -> OwnedRoomId {
        let mut request = CreateRoom::new();
        request.preset = Some(RoomPreset::PrivateChat);
        request.invite = vec![OwnedUserId::try_from(bot).expect("the bot's MXID")];
        request.initial_state = vec![InitialStateEvent::with_empty_state_key(
            RoomEncryptionEventContent::with_recommended_defaults(),
        )
        .to_raw_any()];
        let room = self
            .client
            .create_room(request)
            .await
            .expect("the human creates the room");
        room.room_id().to_owned()
    }

    /// Waits until `bot` joined `room`, then syncs so the client's member list (whose
    /// devices get the room key) has it.
    async fn wait_bot_joined(&self, room: &OwnedRoomId, bot: &str) {
        self.api.wait_joined(room.as_str(), bot).await;
        self.sync().await;
    }

    /// Sends an encrypted `m.text` through matrix-sdk (which shares the room key first,
    /// by the strict strategy); returns the event id.
    async fn send_text(&self, room: &OwnedRoomId, body: &str) -> String {
        let room = self
            .client
            .get_room(room)
            .expect("the human is in the room");
        assert!(
            room.latest_encryption_state()
                .await
                .expect("the room's encryption state")
                .is_encrypted(),
            "the room is encrypted"
        );
        let sent = room
            .send(RoomMessageEventContent::text_plain(body))
            .await
            .expect("the human sends");
        sent.response.event_id.to_string()
    }

    async fn origin(&self, room: &OwnedRoomId, event_id: &str) -> Origin {
        Origin {
            room: room.to_string(),
            event_id: event_id.to_owned(),
            sender: self.user_id().to_owned(),
            user: HUMAN_NAME.to_owned(),
            ts: self.api.ts(room.as_str(), event_id).await,
        }
    }
}

/// matrix-sdk 0.18's `CollectStrategy::IdentityBasedStrategy` (MSC4153: room keys
/// only to devices signed by their owner's cross-signing identity). matrix-sdk does
/// not re-export the type (it is `matrix_sdk_crypto`'s), so it is read from its serde
/// name, with the type inferred from `with_room_key_recipient_strategy`.
fn identity_based_strategy<T: serde::de::DeserializeOwned + std::fmt::Debug>() -> T {
    let strategy: T = serde_json::from_value(json!("IdentityBasedStrategy"))
        .expect("matrix-sdk's CollectStrategy has this variant");
    assert_eq!(format!("{strategy:?}"), "IdentityBasedStrategy");
    strategy
}

/// Bootstraps the human's own cross-signing with their password, as Element does at
/// its first login.
async fn cross_sign(client: &Client, account: &Account) {
    let encryption = client.encryption();
    if let Err(e) = encryption.bootstrap_cross_signing(None).await {
        let info = e
            .as_uiaa_response()
            .unwrap_or_else(|| panic!("the human's cross-signing: {e:?}"));
        let mut auth = uiaa::Password::new(
            uiaa::UserIdentifier::Matrix(uiaa::MatrixUserIdentifier::new(account.user_id.clone())),
            account.password.clone(),
        );
        auth.session = info.session.clone();
        encryption
            .bootstrap_cross_signing(Some(uiaa::AuthData::Password(auth)))
            .await
            .expect("the human's cross-signing with the password");
    }
}

fn config(bot: &Account, human: &str) -> ServerConfig {
    ServerConfig {
        identities: vec![Identity::new(IDENTITY, bot, &[human])],
        ..ServerConfig::default()
    }
}

async fn channel(server: &Server, name: &str) -> McpClient {
    let client = McpClient::spawn(name).await;
    client
        .connect(&server.url("/channel"), server.token(IDENTITY))
        .await;
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strict_clients_message_reaches_the_bot_once_login_cross_signed_it() {
    let _permit = scenario_permit().await;
    let bot = register("bot").await;
    let human = StrictHuman::register("strict").await;
    let server = Server::start(config(&bot, human.user_id())).await;
    let session = channel(&server, "session").await;

    let room = human.create_encrypted_room(&bot.user_id).await;
    human.wait_bot_joined(&room, &bot.user_id).await;
    let sent = human.send_text(&room, "hello from a strict client").await;

    let push = session.next_notification(WAIT).await;
    assert_push(
        &push,
        &message(
            "hello from a strict client",
            &human.origin(&room, &sent).await,
        ),
    );

    // Issue 12 item 4: the human's device is cross-signed, so under the default
    // `verdict_devices` (`cross_signed`) its encrypted `yes` decides the prompt.
    let id = "wxyzk";
    session
        .notify(
            PERMISSION_REQUEST,
            permission_request(id, "Bash", "List files", "{}"),
        )
        .await;
    // The prompt is ciphertext: the plain API sees the bot's m.room.encrypted.
    let bot_id = bot.user_id.to_string();
    human
        .api
        .wait_for_event(room.as_str(), "the prompt", |e| {
            e["sender"] == bot_id.as_str() && e["type"] == "m.room.encrypted"
        })
        .await;
    human.send_text(&room, &format!("yes {id}")).await;
    assert_verdict(&session.next_notification(WAIT).await, id, "allow");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_store_restored_with_the_recovery_key_reads_a_message_sent_before_it() {
    let _permit = scenario_permit().await;
    let bot = register("bot").await;
    let human = StrictHuman::register("strict").await;

    // The first store: cross-signed at login, in the room, the message decrypted.
    let mut first = Server::start(config(&bot, human.user_id())).await;
    let session = channel(&first, "first").await;
    let room = human.create_encrypted_room(&bot.user_id).await;
    human.wait_bot_joined(&room, &bot.user_id).await;
    let text = "sent before the new store existed";
    let sent = human.send_text(&room, text).await;
    let push = session.next_notification(WAIT).await;
    assert_push(&push, &message(text, &human.origin(&room, &sent).await));
    session.close().await;

    // Recovery is turned on with `serve` stopped; the key is printed once, alone.
    first.kill9().await;
    let out = first
        .cli(&["recovery", "enable", "--identity", IDENTITY], None)
        .await;
    assert!(
        out.status.success(),
        "recovery enable: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        1,
        "only the recovery key on stdout: {stdout:?}"
    );
    let key = lines[0].trim().to_owned();
    assert!(
        key.split(' ').count() >= 12 && key.split(' ').all(|group| group.len() == 4),
        "a recovery key in groups of four: {key:?}"
    );

    // A new store: a new device of the same account, whose first sync sees the room's
    // history undecryptable.
    let mut second = Server::start(config(&bot, human.user_id())).await;
    second.kill9().await;

    // A wrong key is refused, clearly, and changes nothing.
    let wrong = "EsTj 3yST y93F SLpB jJsz eAXc 2XzA ygD3 w69H fGaN TKBj jXEd";
    let out = second
        .cli(
            &["recovery", "restore", "--identity", IDENTITY],
            Some(wrong),
        )
        .await;
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "a wrong recovery key is refused");
    assert!(
        stderr.contains("opening secret storage with the recovery key"),
        "the error says what failed: {stderr}"
    );

    let out = second
        .cli(&["recovery", "restore", "--identity", IDENTITY], Some(&key))
        .await;
    assert!(
        out.status.success(),
        "recovery restore: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("cross-signed by its own identity"),
        "the restored device is signed by the account's self-signing key: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    second.restart().await;
    let reader = channel(&second, "reader").await;
    let page = reader
        .call_ok(
            "read_messages",
            json!({ "room_id": room.as_str(), "limit": 50 }),
        )
        .await;
    let events = page["events"].as_array().expect("events");
    let event = events
        .iter()
        .find(|e| e["event_id"] == sent.as_str())
        .unwrap_or_else(|| panic!("the message {sent} is in the room's history: {page}"));
    assert_eq!(event["decryption"], "decrypted", "{event}");
    assert_eq!(event["type"], "m.room.message", "{event}");
    assert_eq!(event["body"], text, "{event}");
}
