//! An encrypting human: `tests/e2e/nio/human.py`, a matrix-nio 0.26 client with its own
//! end-to-end encryption (vodozemac), which no one on this project wrote. It runs on
//! the venv of `scripts/nio/setup` (called once per test process, so a fresh machine
//! installs it by itself) and speaks JSON lines: one request, one answer (see the
//! script's header). It exits when its stdin closes (when the `NioHuman` is dropped).
//!
//! Sends are lenient (`ignore_unverified_devices`: the bot's device is not verified)
//! unless a method says it is strict. nio sends `m.reaction` and redactions in the
//! clear; [`NioHuman::react_encrypted`] encrypts a reaction as Element does.
//!
//! [`NioFixture`] is the cast of `fixture.rs` in an encrypted room: the identity `bot`,
//! the nio human (its allowed sender and approver), the room created encrypted by the
//! human and the bot invited after `serve` is up.

use super::expect::Origin;
use super::fixture::{HUMAN_NAME, IDENTITY, SETTLE_MS};
use super::homeserver::{homeserver, register, Account};
use super::human::Human;
use super::mcp::{Connected, McpClient};
use super::server::{Identity, Server, ServerConfig};
use super::{random_suffix, repo_root, scenario_permit, tail, WAIT};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fmt;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{oneshot, OnceCell, SemaphorePermit};

/// The python of the venv `scripts/nio/setup` made (it prints it), once per process.
pub(crate) async fn nio_python() -> &'static str {
    static PYTHON: OnceCell<String> = OnceCell::const_new();
    PYTHON
        .get_or_init(|| async {
            let script = repo_root().join("scripts/nio/setup");
            let out = Command::new(&script)
                .current_dir(repo_root())
                .output()
                .await
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
            assert!(
                out.status.success(),
                "{} failed ({}):\n{}",
                script.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            let python = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            assert!(
                !python.is_empty(),
                "{} printed no python path",
                script.display()
            );
            python
        })
        .await
}

/// An error answer of the driver: `{kind, message}` (`kind` is `matrix`, `timeout`,
/// `unverified_device`, `unknown_device`, `bad_request`, … or a Python exception name).
#[derive(Clone, Debug)]
pub struct NioError {
    pub kind: String,
    pub message: String,
}

impl fmt::Display for NioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

/// What a send answered.
#[derive(Clone, Debug)]
pub struct Sent {
    pub event_id: String,
    /// Whether nio sent it as `m.room.encrypted`.
    pub encrypted: bool,
    /// The Megolm session it was encrypted with.
    pub session_id: Option<String>,
}

/// Asserts that nio received `event` as Megolm ciphertext and decrypted it.
#[track_caller]
pub fn assert_decrypted(event: &Received) {
    assert!(
        event.encrypted && event.decrypted,
        "nio got {} as ciphertext and decrypted it: {:?}",
        event.event_id,
        event.raw
    );
}

/// A timeline event as the nio human sees it.
#[derive(Clone, Debug)]
pub struct Received {
    pub event_id: String,
    pub sender: String,
    /// The type after decryption (`m.room.encrypted` if nio has no key for it).
    pub event_type: String,
    /// Whether it came as `m.room.encrypted`.
    pub encrypted: bool,
    /// Whether nio decrypted it.
    pub decrypted: bool,
    /// Whether it was decrypted only after a later sync brought its key.
    pub late: bool,
    /// `content.body`, decrypted.
    pub body: Option<String>,
    /// The (decrypted) content.
    pub content: Value,
    /// The whole record the driver kept.
    pub raw: Value,
}

impl Received {
    fn from_json(v: &Value) -> Received {
        Received {
            event_id: v["event_id"].as_str().unwrap_or_default().to_owned(),
            sender: v["sender"].as_str().unwrap_or_default().to_owned(),
            event_type: v["type"].as_str().unwrap_or_default().to_owned(),
            encrypted: v["encrypted"] == true,
            decrypted: v["decrypted"] == true,
            late: v["late"] == true,
            body: v["body"].as_str().map(str::to_owned),
            content: v["content"].clone(),
            raw: v.clone(),
        }
    }
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

/// A person with an end-to-end-encrypting client (matrix-nio), logged in on a device
/// of its own.
pub struct NioHuman {
    pub account: Account,
    pub user_id: String,
    pub device_id: String,
    /// The same account over raw HTTP, with the nio device's token: for what the
    /// homeserver stores (`raw.event(room, id)` shows the ciphertext).
    pub raw: Human,
    name: String,
    _child: Child,
    stdin: tokio::sync::Mutex<ChildStdin>,
    next_id: AtomicU64,
    pending: Pending,
    stderr: Arc<Mutex<String>>,
    store: tempfile::TempDir,
}

impl NioHuman {
    /// Registers `{prefix}_{random}` (as `homeserver::register` does for every account
    /// of the harness) and logs it in with nio, setting `display_name` first if given.
    pub async fn register(prefix: &str, display_name: Option<&str>) -> NioHuman {
        let account = register(prefix).await;
        NioHuman::login(account, display_name).await
    }

    /// Starts the driver and logs `account` in with its password (a new device with
    /// fresh Olm keys, uploaded before this returns).
    pub async fn login(account: Account, display_name: Option<&str>) -> NioHuman {
        let python = nio_python().await;
        let script = repo_root().join("tests/e2e/nio/human.py");
        let mut child = Command::new(python)
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {python} {}: {e}", script.display()));
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let pending: Pending = Arc::default();
        {
            let pending = pending.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                        eprintln!("[nio] not JSON on stdout: {line}");
                        continue;
                    };
                    let waiter = msg["id"]
                        .as_u64()
                        .and_then(|id| pending.lock().unwrap().remove(&id));
                    if let Some(waiter) = waiter {
                        let _ = waiter.send(msg);
                    }
                }
            });
        }
        let stderr_text: Arc<Mutex<String>> = Arc::default();
        {
            let stderr_text = stderr_text.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let mut text = stderr_text.lock().unwrap();
                    text.push_str(&line);
                    text.push('\n');
                }
            });
        }
        let store = tempfile::Builder::new()
            .prefix("mc-e2e-nio-")
            .tempdir()
            .expect("a temp dir");
        let name = account.user_id.clone();
        let mut human = NioHuman {
            raw: Human::from_account(account.clone()).await,
            user_id: account.user_id.clone(),
            account,
            device_id: String::new(),
            name,
            _child: child,
            stdin: tokio::sync::Mutex::new(stdin),
            next_id: AtomicU64::new(1),
            pending,
            stderr: stderr_text,
            store,
        };
        let hs = homeserver().await.url.clone();
        let answer = human
            .ok(json!({
                "cmd": "login",
                "homeserver": hs,
                "user_id": human.user_id,
                "password": human.account.password,
                "device_name": format!("nio e2e {}", random_suffix()),
                "display_name": display_name,
                "store_dir": human.store.path(),
            }))
            .await;
        human.device_id = answer["device_id"].as_str().expect("device_id").to_owned();
        let token = answer["access_token"].as_str().expect("access_token");
        human.raw = Human::from_account(Account {
            access_token: token.to_owned(),
            ..human.account.clone()
        })
        .await;
        human
    }

    /// One request; its answer, or the driver's error.
    pub async fn request(&self, mut cmd: Value) -> Result<Value, NioError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        cmd["id"] = json!(id);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(id, tx);
        {
            let mut stdin = self.stdin.lock().await;
            stdin
                .write_all(format!("{cmd}\n").as_bytes())
                .await
                .unwrap_or_else(|e| panic!("[nio {}] write {cmd}: {e}", self.name));
            stdin.flush().await.expect("flush the nio driver's stdin");
        }
        // The driver's own waits are bounded by WAIT; this only catches a hang.
        let limit = WAIT + Duration::from_secs(40);
        let answer = match tokio::time::timeout(limit, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => panic!("[nio {}] the driver exited during {cmd}", self.name),
            Err(_) => panic!("[nio {}] no answer to {cmd} within {limit:?}", self.name),
        };
        if answer["ok"] == true {
            Ok(answer)
        } else {
            Err(NioError {
                kind: answer["error"]["kind"].as_str().unwrap_or("?").to_owned(),
                message: answer["error"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            })
        }
    }

    /// A request that must succeed: panics with the driver's error.
    pub async fn ok(&self, cmd: Value) -> Value {
        match self.request(cmd.clone()).await {
            Ok(answer) => answer,
            Err(e) => panic!("[nio {}] {cmd} failed: {e}", self.name),
        }
    }

    /// Creates a private room whose initial state has `m.room.encryption`
    /// (`m.megolm.v1.aes-sha2`), inviting `invite`; returns its id once nio sees it
    /// encrypted.
    pub async fn create_encrypted_room(&self, invite: &[&str]) -> String {
        self.create_room(invite, true).await
    }

    /// Creates a private room, encrypted or not.
    pub async fn create_room(&self, invite: &[&str], encrypted: bool) -> String {
        let answer = self
            .ok(json!({
                "cmd": "create_room",
                "name": format!("e2e encrypted {}", random_suffix()),
                "invite": invite,
                "encrypted": encrypted,
            }))
            .await;
        answer["room_id"].as_str().expect("room_id").to_owned()
    }

    pub async fn invite(&self, room: &str, user: &str) {
        self.ok(json!({ "cmd": "invite", "room": room, "user": user }))
            .await;
    }

    pub async fn join(&self, room: &str) {
        self.ok(json!({ "cmd": "join", "room": room })).await;
    }

    /// Waits until `user` is joined in nio's view of `room` and, in an encrypted room,
    /// nio knows the user's devices (so the next send shares the room key with them);
    /// returns their device ids.
    pub async fn wait_joined(&self, room: &str, user: &str) -> Vec<String> {
        let answer = self
            .ok(json!({
                "cmd": "wait_joined",
                "room": room,
                "user": user,
                "timeout_ms": WAIT.as_millis() as u64,
            }))
            .await;
        strings(&answer["devices"])
    }

    async fn sent(&self, cmd: Value) -> Sent {
        sent(&self.ok(cmd).await)
    }

    /// An `m.text` message (encrypted in an encrypted room).
    pub async fn send_text(&self, room: &str, body: &str) -> Sent {
        self.sent(json!({ "cmd": "send_text", "room": room, "body": body }))
            .await
    }

    /// An `m.text` message sent only if every device in the room is verified or
    /// blacklisted (nio's default; unverified devices are no longer ignored).
    pub async fn send_text_strict(&self, room: &str, body: &str) -> Result<Sent, NioError> {
        self.request(json!({ "cmd": "send_text", "room": room, "body": body, "strict": true }))
            .await
            .map(|a| sent(&a))
    }

    /// A rich reply to `parent` (`m.in_reply_to`), without fallback (spec v1.13).
    pub async fn reply(&self, room: &str, parent: &str, body: &str) -> Sent {
        self.sent(json!({ "cmd": "reply", "room": room, "parent": parent, "body": body }))
            .await
    }

    /// An edit of `original` (`m.replace`, `"* "` fallback plus `m.new_content`).
    pub async fn edit(&self, room: &str, original: &str, body: &str) -> Sent {
        self.sent(json!({ "cmd": "edit", "room": room, "original": original, "body": body }))
            .await
    }

    /// A reaction, as nio sends it: `m.reaction` in the clear.
    pub async fn react(&self, room: &str, target: &str, key: &str) -> Sent {
        self.sent(json!({ "cmd": "react", "room": room, "target": target, "key": key }))
            .await
    }

    /// A reaction Megolm-encrypted, as Element sends it.
    pub async fn react_encrypted(&self, room: &str, target: &str, key: &str) -> Sent {
        self.sent(json!({
            "cmd": "react", "room": room, "target": target, "key": key, "encrypted": true,
        }))
        .await
    }

    /// An attachment of `bytes` as `msgtype` (`m.file`, `m.image`, …) named
    /// `filename`, with `info` {mimetype, size}; `encrypted`: uploaded as encrypted
    /// media (nio's `upload(encrypt=True)`) and sent with `file` {url, key, iv,
    /// hashes, v} instead of `url` ("Sending encrypted attachments"). Returns the send
    /// and the `file` object (`Null` for media in the clear).
    pub async fn send_file(
        &self,
        room: &str,
        msgtype: &str,
        filename: &str,
        mimetype: &str,
        bytes: &[u8],
        encrypted: bool,
    ) -> (Sent, Value) {
        use base64::Engine as _;
        let answer = self
            .ok(json!({
                "cmd": "send_file", "room": room, "msgtype": msgtype, "filename": filename,
                "mimetype": mimetype, "encrypted": encrypted,
                "data_base64": base64::engine::general_purpose::STANDARD.encode(bytes),
            }))
            .await;
        (sent(&answer), answer["file"].clone())
    }

    /// The bytes of the media `mxc` (authenticated media download); with `file` (an
    /// encrypted attachment's `file` object) decrypted by nio after it checked the
    /// ciphertext's sha256.
    pub async fn download(&self, mxc: &str, file: Option<&Value>) -> Vec<u8> {
        use base64::Engine as _;
        let answer = self
            .ok(json!({ "cmd": "download", "mxc": mxc, "file": file }))
            .await;
        base64::engine::general_purpose::STANDARD
            .decode(answer["data_base64"].as_str().unwrap_or_default())
            .expect("the driver answers base64")
    }

    /// Sends `m.room.encryption` (`m.megolm.v1.aes-sha2`) into `room`, which had
    /// none; returns once nio takes the room as encrypted.
    pub async fn enable_encryption(&self, room: &str) {
        self.ok(json!({ "cmd": "enable_encryption", "room": room }))
            .await;
    }

    /// Marks `device` of `user` verified in nio (nio has no cross-signing: a verified
    /// device is its only trust); returns the ed25519 key nio holds for it.
    pub async fn verify(&self, user: &str, device: &str) -> String {
        let answer = self.ok(device_cmd("verify", user, Some(device))).await;
        answer["ed25519"][device]
            .as_str()
            .expect("the device's ed25519 key")
            .to_owned()
    }

    /// Redacts `target` (a redaction is never encrypted).
    pub async fn redact(&self, room: &str, target: &str, reason: Option<&str>) -> Sent {
        self.sent(json!({ "cmd": "redact", "room": room, "event_id": target, "reason": reason }))
            .await
    }

    /// The first event of `room` (in timeline order, events seen before included) that
    /// matches every field of `filter`: `sender`, `event_id`, `type` (after
    /// decryption), `rel_type` (`m.replace`, `m.annotation`, `m.in_reply_to` for a
    /// reply, `null` for none), `relates_to`, `body_contains`, `decrypted`. Waits up
    /// to [`WAIT`].
    pub async fn wait_event(&self, room: &str, filter: Value) -> Received {
        let mut cmd =
            json!({ "cmd": "wait_event", "room": room, "timeout_ms": WAIT.as_millis() as u64 });
        if let Value::Object(fields) = filter {
            for (k, v) in fields {
                cmd[k] = v;
            }
        }
        Received::from_json(&self.ok(cmd).await["event"])
    }

    /// The first `m.room.message` from `sender` whose (decrypted) body contains `text`
    /// and that is no edit.
    pub async fn wait_message(&self, room: &str, sender: &str, text: &str) -> Received {
        self.wait_event(
            room,
            json!({
                "sender": sender,
                "type": "m.room.message",
                "rel_type": null,
                "body_contains": text,
            }),
        )
        .await
    }

    /// Waits until a sync that started after this call was handled (and the crypto
    /// upkeep after it: keys received, queried, claimed, to-device messages sent).
    pub async fn sync(&self) {
        self.ok(json!({ "cmd": "sync", "timeout_ms": WAIT.as_millis() as u64 }))
            .await;
    }

    /// The devices nio knows of `user`: `{device_id, ed25519, verified, blacklisted,
    /// ignored}` each.
    pub async fn devices(&self, user: &str) -> Vec<Value> {
        let answer = self.ok(json!({ "cmd": "devices", "user": user })).await;
        answer["devices"].as_array().cloned().unwrap_or_default()
    }

    /// Blacklists `device` of `user` (every known device if `None`): nio shares no
    /// room key with it from now on.
    pub async fn blacklist(&self, user: &str, device: Option<&str>) {
        self.ok(device_cmd("blacklist", user, device)).await;
    }

    /// Takes the device(s) off the blacklist: the next send shares a new room key with
    /// them; keys of what was sent meanwhile only by [`NioHuman::reshare_keys`].
    pub async fn unblacklist(&self, user: &str, device: Option<&str>) {
        self.ok(device_cmd("unblacklist", user, device)).await;
    }

    /// Sends every room key this client made in `room` (each from its first message
    /// on) to the device(s) of `user` as Olm-encrypted `m.room_key` to-device events;
    /// returns the Megolm session ids shared.
    pub async fn reshare_keys(&self, room: &str, user: &str, device: Option<&str>) -> Vec<String> {
        let mut cmd = device_cmd("reshare_keys", user, device);
        cmd["room"] = json!(room);
        strings(&self.ok(cmd).await["sessions"])
    }
}

fn device_cmd(cmd: &str, user: &str, device: Option<&str>) -> Value {
    let mut cmd = json!({ "cmd": cmd, "user": user });
    if let Some(device) = device {
        cmd["device"] = json!(device);
    }
    cmd
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn sent(answer: &Value) -> Sent {
    Sent {
        event_id: answer["event_id"].as_str().expect("event_id").to_owned(),
        encrypted: answer["encrypted"] == true,
        session_id: answer["session_id"].as_str().map(str::to_owned),
    }
}

impl Drop for NioHuman {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- nio human [{} {}]: stderr (last 40 lines) ----\n{}\n----",
                self.name,
                self.device_id,
                tail(&self.stderr.lock().unwrap_or_else(|e| e.into_inner()), 40)
            );
        }
    }
}

/// The cast of `fixture.rs` in an encrypted room: the identity `bot`, the nio human
/// (display name [`HUMAN_NAME`], the identity's allowed sender and so its approver),
/// and the room, created encrypted by the human and the identity's
/// `permission_room`; the human invites the bot after `serve` is up and waits until
/// the bot joined and nio knows its device.
pub struct NioFixture {
    pub human: NioHuman,
    pub bot: Account,
    /// The bot's device ids, as nio knows them.
    pub bot_devices: Vec<String>,
    pub room: String,
    pub server: Server,
    _permit: SemaphorePermit<'static>,
}

impl NioFixture {
    pub async fn start(tune: impl FnOnce(&mut ServerConfig)) -> NioFixture {
        NioFixture::start_in(true, tune).await
    }

    /// The same cast in a room created encrypted or not (`encrypted`).
    pub async fn start_in(encrypted: bool, tune: impl FnOnce(&mut ServerConfig)) -> NioFixture {
        let permit = scenario_permit().await;
        let bot = register("bot").await;
        let human = NioHuman::register("human", Some(HUMAN_NAME)).await;
        let room = human.create_room(&[], encrypted).await;

        let mut identity = Identity::new(IDENTITY, &bot, &[&human.user_id]);
        identity.permission_room = Some(room.clone());
        identity.settle_ms = Some(SETTLE_MS);
        let mut config = ServerConfig {
            identities: vec![identity],
            ..ServerConfig::default()
        };
        tune(&mut config);
        let server = Server::start(config).await;

        human.invite(&room, &bot.user_id).await;
        let bot_devices = human.wait_joined(&room, &bot.user_id).await;
        NioFixture {
            human,
            bot,
            bot_devices,
            room,
            server,
            _permit: permit,
        }
    }

    /// A new MCP client connected to `/channel` with the identity's token.
    pub async fn channel(&self, name: &str) -> (McpClient, Connected) {
        let client = McpClient::spawn(name).await;
        let connected = client
            .connect(&self.server.url("/channel"), self.server.token(IDENTITY))
            .await;
        (client, connected)
    }

    /// A new MCP client connected to `/mcp` (every tool) with the identity's token.
    pub async fn tools(&self, name: &str) -> McpClient {
        super::fixture::tools_client(&self.server, name).await
    }

    /// The origin of the human's message `event_id` (display name as `user`).
    pub async fn origin(&self, event_id: &str) -> Origin {
        Origin {
            room: self.room.clone(),
            event_id: event_id.to_owned(),
            sender: self.human.user_id.clone(),
            user: HUMAN_NAME.to_owned(),
            ts: self.human.raw.ts(&self.room, event_id).await,
        }
    }

    /// The origin of the human's reaction or redaction `event_id` (MXID as `user`).
    pub async fn bare_origin(&self, event_id: &str) -> Origin {
        Origin {
            user: self.human.user_id.clone(),
            ..self.origin(event_id).await
        }
    }

    /// The bot's device `device` as the homeserver publishes it (`POST
    /// /keys/query` as the human): its `ed25519:<device>` key. matrix-channel prints
    /// no device key of its own, so this is the only source a test has.
    pub async fn published_ed25519(&self, device: &str) -> String {
        let bot = self.bot.user_id.as_str();
        let keys = self
            .human
            .raw
            .call(
                reqwest::Method::POST,
                "/_matrix/client/v3/keys/query",
                Some(&json!({ "device_keys": { bot: [device] } })),
            )
            .await;
        keys["device_keys"][bot][device]["keys"][format!("ed25519:{device}")]
            .as_str()
            .unwrap_or_else(|| panic!("no ed25519 key of {bot} {device} in {keys}"))
            .to_owned()
    }

    /// The event as the homeserver stores it (`GET /rooms/{room}/event/{id}` as the
    /// human), asserted to be Megolm ciphertext from `sender`: type
    /// `m.room.encrypted`, algorithm `m.megolm.v1.aes-sha2`, no `body` in the clear.
    pub async fn assert_stored_encrypted(&self, event_id: &str, sender: &str) -> Value {
        let stored = self.human.raw.event(&self.room, event_id).await;
        assert_eq!(
            (
                stored["type"].as_str(),
                stored["sender"].as_str(),
                stored["content"]["algorithm"].as_str(),
            ),
            (
                Some("m.room.encrypted"),
                Some(sender),
                Some("m.megolm.v1.aes-sha2")
            ),
            "the homeserver stores {event_id} as Megolm ciphertext: {stored}"
        );
        assert!(
            stored["content"]["ciphertext"]
                .as_str()
                .is_some_and(|c| !c.is_empty())
                && stored["content"].get("body").is_none()
                && stored["content"].get("m.new_content").is_none(),
            "{event_id} has ciphertext and nothing of its text in the clear: {stored}"
        );
        stored
    }
}
