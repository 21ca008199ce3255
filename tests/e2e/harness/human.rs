//! A person in Matrix: an account driven over the Client-Server API with reqwest, the
//! way a Matrix client would (Client-Server API v1.16: rooms, `m.room.message`,
//! rich replies with their fallback, `m.replace` edits, `m.annotation` reactions,
//! redactions, `m.thread`).

use super::homeserver::{homeserver, register, Account};
use super::{random_suffix, WAIT};
use reqwest::Method;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Percent-encodes one path segment or query value (everything but the unreserved
/// characters of RFC 3986).
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A non-2xx answer of the homeserver.
#[derive(Debug)]
pub struct MatrixError {
    pub status: u16,
    pub body: Value,
}

/// A Matrix user driven by the test.
pub struct Human {
    pub account: Account,
    pub user_id: String,
    hs: String,
    http: reqwest::Client,
    txn_prefix: String,
    txn: AtomicU64,
}

impl Human {
    /// Registers a fresh user `{prefix}_{random}`.
    pub async fn register(prefix: &str) -> Human {
        let account = register(prefix).await;
        Human::from_account(account).await
    }

    /// Drives an already registered account with its registration token.
    pub async fn from_account(account: Account) -> Human {
        let hs = homeserver().await.url.clone();
        Human::on(&hs, account)
    }

    /// Drives an account of the homeserver at `hs_url` (not the shared one).
    pub fn on(hs_url: &str, account: Account) -> Human {
        let hs = hs_url.to_owned();
        Human {
            user_id: account.user_id.clone(),
            account,
            hs,
            http: reqwest::Client::new(),
            txn_prefix: format!("e2e-{}", random_suffix()),
            txn: AtomicU64::new(0),
        }
    }

    fn next_txn(&self) -> String {
        let n = self.txn.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", self.txn_prefix)
    }

    /// One Client-Server API call; `path` starts with `/_matrix/`.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, MatrixError> {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.hs))
            .bearer_auth(&self.account.access_token)
            .timeout(Duration::from_secs(60));
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if (200..300).contains(&status) {
            Ok(body)
        } else {
            Err(MatrixError { status, body })
        }
    }

    /// Like [`Human::request`], panicking on an error answer.
    pub async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Value {
        match self.request(method.clone(), path, body).await {
            Ok(v) => v,
            Err(e) => panic!(
                "{} {method} {path} failed: {} {}",
                self.user_id, e.status, e.body
            ),
        }
    }

    /// Sets the display name (before joining rooms, so member events carry it).
    pub async fn set_display_name(&self, name: &str) {
        let path = format!(
            "/_matrix/client/v3/profile/{}/displayname",
            enc(&self.user_id)
        );
        self.call(Method::PUT, &path, Some(&json!({ "displayname": name })))
            .await;
    }

    /// Creates a private room inviting `invite`; returns its id.
    pub async fn create_room(&self, invite: &[&str]) -> String {
        let body = json!({
            "preset": "private_chat",
            "name": format!("e2e {}", random_suffix()),
            "invite": invite,
        });
        let resp = self
            .call(Method::POST, "/_matrix/client/v3/createRoom", Some(&body))
            .await;
        resp["room_id"].as_str().expect("room_id").to_owned()
    }

    pub async fn invite(&self, room: &str, user: &str) {
        let path = format!("/_matrix/client/v3/rooms/{}/invite", enc(room));
        self.call(Method::POST, &path, Some(&json!({ "user_id": user })))
            .await;
    }

    pub async fn join(&self, room: &str) {
        let path = format!("/_matrix/client/v3/join/{}", enc(room));
        self.call(Method::POST, &path, Some(&json!({}))).await;
    }

    /// Sends a message-like event with a fresh transaction id; returns its event id.
    pub async fn send(&self, room: &str, event_type: &str, content: &Value) -> String {
        let path = format!(
            "/_matrix/client/v3/rooms/{}/send/{}/{}",
            enc(room),
            enc(event_type),
            enc(&self.next_txn())
        );
        let resp = self.call(Method::PUT, &path, Some(content)).await;
        resp["event_id"].as_str().expect("event_id").to_owned()
    }

    /// An `m.text` message.
    pub async fn send_text(&self, room: &str, body: &str) -> String {
        self.send(
            room,
            "m.room.message",
            &json!({ "msgtype": "m.text", "body": body }),
        )
        .await
    }

    /// A rich reply to `parent` (`m.in_reply_to`), with the plain and HTML fallbacks a
    /// client of the spec before v1.13 adds (the parent is fetched to quote it).
    pub async fn reply(&self, room: &str, parent: &str, text: &str) -> String {
        let parent_event = self.event(room, parent).await;
        let parent_sender = parent_event["sender"].as_str().expect("sender");
        let parent_body = parent_event["content"]["body"].as_str().unwrap_or("");
        let mut quoted = parent_body.lines();
        let first = quoted.next().unwrap_or("");
        let mut fallback = format!("> <{parent_sender}> {first}\n");
        for line in quoted {
            fallback.push_str(&format!("> {line}\n"));
        }
        let body = format!("{fallback}\n{text}");
        let formatted = format!(
            "<mx-reply><blockquote><a href=\"https://matrix.to/#/{room}/{parent}\">In reply to</a> \
             <a href=\"https://matrix.to/#/{parent_sender}\">{parent_sender}</a><br>{}</blockquote></mx-reply>{}",
            html_escape(parent_body),
            html_escape(text)
        );
        self.send(
            room,
            "m.room.message",
            &json!({
                "msgtype": "m.text",
                "body": body,
                "format": "org.matrix.custom.html",
                "formatted_body": formatted,
                "m.relates_to": { "m.in_reply_to": { "event_id": parent } },
            }),
        )
        .await
    }

    /// An edit of `original` (`m.replace`): `"* "` fallback body plus `m.new_content`.
    pub async fn edit(&self, room: &str, original: &str, text: &str) -> String {
        self.send(
            room,
            "m.room.message",
            &json!({
                "msgtype": "m.text",
                "body": format!("* {text}"),
                "m.new_content": { "msgtype": "m.text", "body": text },
                "m.relates_to": { "rel_type": "m.replace", "event_id": original },
            }),
        )
        .await
    }

    /// A reaction (`m.annotation`) with `key` on `target`.
    pub async fn react(&self, room: &str, target: &str, key: &str) -> String {
        self.send(
            room,
            "m.reaction",
            &json!({
                "m.relates_to": { "rel_type": "m.annotation", "event_id": target, "key": key },
            }),
        )
        .await
    }

    /// Redacts `target`; returns the redaction's event id.
    pub async fn redact(&self, room: &str, target: &str, reason: Option<&str>) -> String {
        let path = format!(
            "/_matrix/client/v3/rooms/{}/redact/{}/{}",
            enc(room),
            enc(target),
            enc(&self.next_txn())
        );
        let body = match reason {
            Some(reason) => json!({ "reason": reason }),
            None => json!({}),
        };
        let resp = self.call(Method::PUT, &path, Some(&body)).await;
        resp["event_id"].as_str().expect("event_id").to_owned()
    }

    /// A message in the thread of `root` (`m.thread`, `is_falling_back: true`, the
    /// fallback `m.in_reply_to` naming the root), as a thread-aware client sends it.
    pub async fn send_thread(&self, room: &str, root: &str, text: &str) -> String {
        self.send(
            room,
            "m.room.message",
            &json!({
                "msgtype": "m.text",
                "body": text,
                "m.relates_to": {
                    "rel_type": "m.thread",
                    "event_id": root,
                    "is_falling_back": true,
                    "m.in_reply_to": { "event_id": root },
                },
            }),
        )
        .await
    }

    /// Uploads `bytes` to the media repository (`POST /_matrix/media/v3/upload`) as
    /// `content_type` named `filename`; returns the `mxc://` URI.
    pub async fn upload(&self, bytes: &[u8], content_type: &str, filename: &str) -> String {
        let url = format!(
            "{}/_matrix/media/v3/upload?filename={}",
            self.hs,
            enc(filename)
        );
        let resp = self
            .http
            .post(&url)
            .bearer_auth(&self.account.access_token)
            .header("content-type", content_type)
            .body(bytes.to_vec())
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {url}: {e}"));
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        assert!(status.is_success(), "upload {filename}: {status} {body}");
        body["content_uri"]
            .as_str()
            .unwrap_or_else(|| panic!("upload {filename}: no content_uri in {body}"))
            .to_owned()
    }

    /// The bytes of the media `mxc`, through the authenticated media API (`GET
    /// /_matrix/client/v1/media/download/{serverName}/{mediaId}`).
    pub async fn download(&self, mxc: &str) -> Vec<u8> {
        let path = mxc
            .strip_prefix("mxc://")
            .unwrap_or_else(|| panic!("not an mxc URI: {mxc}"));
        let url = format!("{}/_matrix/client/v1/media/download/{path}", self.hs);
        let resp = self
            .http
            .get(&url)
            .bearer_auth(&self.account.access_token)
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let status = resp.status();
        let bytes = resp.bytes().await.unwrap_or_default();
        assert!(status.is_success(), "download {mxc}: {status} {bytes:?}");
        bytes.to_vec()
    }

    /// `GET /rooms/{room}/event/{id}`.
    pub async fn event(&self, room: &str, id: &str) -> Value {
        let path = format!("/_matrix/client/v3/rooms/{}/event/{}", enc(room), enc(id));
        self.call(Method::GET, &path, None).await
    }

    /// The `origin_server_ts` of an event, as the server sees it.
    pub async fn ts(&self, room: &str, id: &str) -> u64 {
        self.event(room, id).await["origin_server_ts"]
            .as_u64()
            .expect("origin_server_ts")
    }

    /// `GET /rooms/{room}/messages`; `dir` is `b` or `f`.
    pub async fn messages(&self, room: &str, dir: &str, limit: u32, from: Option<&str>) -> Value {
        let mut path = format!(
            "/_matrix/client/v3/rooms/{}/messages?dir={dir}&limit={limit}",
            enc(room)
        );
        if let Some(from) = from {
            path.push_str(&format!("&from={}", enc(from)));
        }
        self.call(Method::GET, &path, None).await
    }

    /// A raw `/sync` (long-poll with `timeout_ms`), optionally since a token and with an
    /// inline filter.
    pub async fn sync(
        &self,
        since: Option<&str>,
        timeout_ms: u64,
        filter: Option<&Value>,
    ) -> Value {
        let mut path = format!("/_matrix/client/v3/sync?timeout={timeout_ms}");
        if let Some(since) = since {
            path.push_str(&format!("&since={}", enc(since)));
        }
        if let Some(filter) = filter {
            path.push_str(&format!("&filter={}", enc(&filter.to_string())));
        }
        self.call(Method::GET, &path, None).await
    }

    /// The joined members of `room`.
    pub async fn joined_members(&self, room: &str) -> Vec<String> {
        let path = format!("/_matrix/client/v3/rooms/{}/joined_members", enc(room));
        let resp = self.call(Method::GET, &path, None).await;
        resp["joined"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Waits until `user` has joined `room`.
    pub async fn wait_joined(&self, room: &str, user: &str) {
        let start = Instant::now();
        loop {
            if self.joined_members(room).await.iter().any(|m| m == user) {
                return;
            }
            if start.elapsed() > WAIT {
                panic!("{user} did not join {room} within {WAIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    /// Waits until the room's timeline, as this user's `/sync` shows it (the latest 100
    /// events, then each new batch by long-poll), holds an event that `pred` accepts;
    /// returns it.
    pub async fn wait_for_event(
        &self,
        room: &str,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let filter = json!({
            "room": {
                "rooms": [room],
                "timeline": { "limit": 100 },
                "state": { "lazy_load_members": true },
                "ephemeral": { "not_types": ["*"] },
                "account_data": { "not_types": ["*"] },
            },
            "presence": { "not_types": ["*"] },
            "account_data": { "not_types": ["*"] },
        });
        let start = Instant::now();
        let mut since: Option<String> = None;
        let mut seen: Vec<String> = Vec::new();
        loop {
            let left = WAIT.saturating_sub(start.elapsed());
            if left.is_zero() {
                let latest = &seen[seen.len().saturating_sub(20)..];
                panic!(
                    "{what}: not in {room} within {WAIT:?}; latest events:\n{}",
                    latest.join("\n")
                );
            }
            let timeout_ms = if since.is_none() {
                0
            } else {
                left.as_millis().min(5_000) as u64
            };
            let resp = self.sync(since.as_deref(), timeout_ms, Some(&filter)).await;
            let events = resp["rooms"]["join"][room]["timeline"]["events"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if let Some(found) = events.iter().find(|e| pred(e)) {
                return found.clone();
            }
            seen.extend(
                events
                    .iter()
                    .map(|e| format!("{} {} {}", e["sender"], e["type"], e["content"])),
            );
            since = resp["next_batch"].as_str().map(str::to_owned);
        }
    }
}

/// The few HTML escapes a reply fallback needs.
fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\n', "<br>")
}
