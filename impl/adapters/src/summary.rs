//! What the read tools return for one Matrix event: a flat JSON summary of the raw
//! event, with its relations, read from the event's JSON as the homeserver serves it
//! ([Client-Server API, "Forming relationships between events"]).
//!
//! [Client-Server API, "Forming relationships between events"]: https://spec.matrix.org/v1.16/client-server-api/#forming-relationships-between-events

use ruma::events::room::message::MessageType;
use serde_json::{json, Map, Value};

/// How the event reached us, as matrix-sdk reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decryption {
    /// Sent in clear.
    Plaintext,
    /// Encrypted, and decrypted with a key we hold.
    Decrypted,
    /// Encrypted with a key we do not (yet) hold: no content.
    UnableToDecrypt,
}

impl Decryption {
    pub fn as_str(self) -> &'static str {
        match self {
            Decryption::Plaintext => "plaintext",
            Decryption::Decrypted => "decrypted",
            Decryption::UnableToDecrypt => "unable_to_decrypt",
        }
    }
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut v = v;
    for key in path {
        v = v.get(key)?;
    }
    v.as_str()
}

/// Summarises one event (`raw`: the event JSON; `decryption`: how it was read;
/// `allowed`: whether the sender passes the identity's sender gate).
///
/// Shape: `{event_id, type, sender, sender_allowed, ts (ms), decryption, redacted,
/// msgtype?, body?, formatted_body?, attachment?, reply_to?, edit_of?, thread_root?,
/// reaction_key?, reacted_to?, redacts?, state_key?}`. `body` of an edit is its
/// `m.new_content` body. `attachment` (an `m.image`, `m.file`, `m.audio` or
/// `m.video`) is `{filename, size (bytes) or null, mimetype or null, encrypted}`:
/// the facts of `info` as [`crate::decode`] reads them, and `encrypted` true when the
/// media is an encrypted `file` rather than a `url` (Client-Server API, "Sending
/// encrypted attachments"; `download_attachment` decrypts it). Returns `None` when
/// `raw` is not a JSON object.
pub fn summarize(
    raw: &str,
    decryption: Decryption,
    allowed: &dyn Fn(&str) -> bool,
) -> Option<Value> {
    let v: Value = serde_json::from_str(raw).ok()?;
    let obj = v.as_object()?;
    let mut out = Map::new();
    let sender = str_at(&v, &["sender"]).unwrap_or_default();
    out.insert("event_id".into(), json!(str_at(&v, &["event_id"])));
    out.insert("type".into(), json!(str_at(&v, &["type"])));
    out.insert("sender".into(), json!(sender));
    out.insert("sender_allowed".into(), json!(allowed(sender)));
    out.insert(
        "ts".into(),
        obj.get("origin_server_ts").cloned().unwrap_or(Value::Null),
    );
    out.insert("decryption".into(), json!(decryption.as_str()));
    let redacted = v
        .get("unsigned")
        .and_then(|u| u.get("redacted_because"))
        .is_some();
    out.insert("redacted".into(), json!(redacted));
    if let Some(key) = str_at(&v, &["state_key"]) {
        out.insert("state_key".into(), json!(key));
    }
    let content = v.get("content").cloned().unwrap_or(Value::Null);
    let relates = content.get("m.relates_to");
    let rel_type = relates.and_then(|r| str_at(r, &["rel_type"]));
    let in_reply_to = relates.and_then(|r| str_at(r, &["m.in_reply_to", "event_id"]));
    let falling_back = relates
        .and_then(|r| r.get("is_falling_back"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    match rel_type {
        Some("m.replace") => {
            out.insert(
                "edit_of".into(),
                json!(relates.and_then(|r| str_at(r, &["event_id"]))),
            );
        }
        Some("m.thread") => {
            out.insert(
                "thread_root".into(),
                json!(relates.and_then(|r| str_at(r, &["event_id"]))),
            );
        }
        Some("m.annotation") => {
            out.insert(
                "reaction_key".into(),
                json!(relates.and_then(|r| str_at(r, &["key"]))),
            );
            out.insert(
                "reacted_to".into(),
                json!(relates.and_then(|r| str_at(r, &["event_id"]))),
            );
        }
        _ => {}
    }
    if let Some(target) = in_reply_to {
        if !(rel_type == Some("m.thread") && falling_back) {
            out.insert("reply_to".into(), json!(target));
        }
    }
    let shown = match rel_type {
        Some("m.replace") => content
            .get("m.new_content")
            .cloned()
            .unwrap_or(content.clone()),
        _ => content.clone(),
    };
    if let Some(msgtype) = str_at(&shown, &["msgtype"]) {
        out.insert("msgtype".into(), json!(msgtype));
    }
    if let Some(body) = str_at(&shown, &["body"]) {
        out.insert("body".into(), json!(body));
    }
    if str_at(&shown, &["format"]) == Some("org.matrix.custom.html") {
        if let Some(html) = str_at(&shown, &["formatted_body"]) {
            out.insert("formatted_body".into(), json!(html));
        }
    }
    let file = serde_json::from_value::<MessageType>(shown.clone()).ok();
    if let Some(file) = file.as_ref().and_then(crate::decode::attachment) {
        out.insert(
            "attachment".into(),
            json!({
                "filename": file.filename,
                "size": file.size,
                "mimetype": file.mimetype,
                "encrypted": shown.get("file").is_some(),
            }),
        );
    }
    let redacts = str_at(&v, &["content", "redacts"]).or_else(|| str_at(&v, &["redacts"]));
    if str_at(&v, &["type"]) == Some("m.room.redaction") {
        out.insert("redacts".into(), json!(redacts));
    }
    Some(Value::Object(out))
}

/// Reactions summary of one event: `{key: count}` from annotation events' JSON.
pub fn reaction_counts<'a>(annotations: impl IntoIterator<Item = &'a str>) -> Value {
    let mut counts = std::collections::BTreeMap::<String, u64>::new();
    for raw in annotations {
        if let Ok(v) = serde_json::from_str::<Value>(raw) {
            if let Some(key) = str_at(&v, &["content", "m.relates_to", "key"]) {
                *counts.entry(key.to_string()).or_default() += 1;
            }
        }
    }
    json!(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(_: &str) -> bool {
        true
    }

    #[test]
    fn a_plain_message_is_summarised_with_its_body_and_sender_gate() {
        let raw = r#"{"type":"m.room.message","event_id":"$a","sender":"@h:x","origin_server_ts":5,
            "content":{"msgtype":"m.text","body":"hi","format":"org.matrix.custom.html","formatted_body":"<b>hi</b>"}}"#;
        let s = summarize(raw, Decryption::Plaintext, &|u| u == "@h:x").unwrap();
        assert_eq!(
            s,
            json!({"event_id":"$a","type":"m.room.message","sender":"@h:x","sender_allowed":true,
                   "ts":5,"decryption":"plaintext","redacted":false,"msgtype":"m.text","body":"hi",
                   "formatted_body":"<b>hi</b>"})
        );
        let s = summarize(raw, Decryption::Decrypted, &|_| false).unwrap();
        assert_eq!(s["sender_allowed"], json!(false));
        assert_eq!(s["decryption"], json!("decrypted"));
    }

    #[test]
    fn an_edit_shows_its_new_content_and_target() {
        let raw = r#"{"type":"m.room.message","event_id":"$e","sender":"@h:x","origin_server_ts":1,
            "content":{"msgtype":"m.text","body":"* new","m.new_content":{"msgtype":"m.text","body":"new"},
            "m.relates_to":{"rel_type":"m.replace","event_id":"$o"}}}"#;
        let s = summarize(raw, Decryption::Plaintext, &all).unwrap();
        assert_eq!(s["edit_of"], json!("$o"));
        assert_eq!(s["body"], json!("new"));
        assert!(s.get("reply_to").is_none());
    }

    #[test]
    fn a_thread_fallback_is_not_a_reply_but_a_thread_reply_is() {
        let fallback = r#"{"type":"m.room.message","event_id":"$t","sender":"@h:x","origin_server_ts":1,
            "content":{"msgtype":"m.text","body":"t","m.relates_to":{"rel_type":"m.thread","event_id":"$r",
            "is_falling_back":true,"m.in_reply_to":{"event_id":"$r"}}}}"#;
        let s = summarize(fallback, Decryption::Plaintext, &all).unwrap();
        assert_eq!(s["thread_root"], json!("$r"));
        assert!(s.get("reply_to").is_none());
        let reply = fallback.replace("true", "false").replace(
            r#""m.in_reply_to":{"event_id":"$r"}"#,
            r#""m.in_reply_to":{"event_id":"$p"}"#,
        );
        let s = summarize(&reply, Decryption::Plaintext, &all).unwrap();
        assert_eq!(s["reply_to"], json!("$p"));
        let rich = r#"{"type":"m.room.message","event_id":"$q","sender":"@h:x","origin_server_ts":1,
            "content":{"msgtype":"m.text","body":"q","m.relates_to":{"m.in_reply_to":{"event_id":"$p"}}}}"#;
        assert_eq!(
            summarize(rich, Decryption::Plaintext, &all).unwrap()["reply_to"],
            json!("$p")
        );
    }

    #[test]
    fn reactions_redactions_and_redacted_events_are_marked() {
        let reaction = r#"{"type":"m.reaction","event_id":"$x","sender":"@h:x","origin_server_ts":1,
            "content":{"m.relates_to":{"rel_type":"m.annotation","event_id":"$p","key":"👍"}}}"#;
        let s = summarize(reaction, Decryption::Plaintext, &all).unwrap();
        assert_eq!(
            (s["reaction_key"].clone(), s["reacted_to"].clone()),
            (json!("👍"), json!("$p"))
        );
        let redaction = r#"{"type":"m.room.redaction","event_id":"$y","sender":"@h:x","origin_server_ts":1,
            "redacts":"$x","content":{}}"#;
        assert_eq!(
            summarize(redaction, Decryption::Plaintext, &all).unwrap()["redacts"],
            json!("$x")
        );
        let redacted = r#"{"type":"m.room.message","event_id":"$z","sender":"@h:x","origin_server_ts":1,
            "content":{},"unsigned":{"redacted_because":{"event_id":"$y"}}}"#;
        let s = summarize(redacted, Decryption::Plaintext, &all).unwrap();
        assert_eq!(s["redacted"], json!(true));
        assert!(s.get("body").is_none());
        assert!(summarize("[1]", Decryption::Plaintext, &all).is_none());
        assert!(summarize("not json", Decryption::Plaintext, &all).is_none());
    }

    #[test]
    fn an_attachment_in_the_clear_or_encrypted_is_summarised_with_its_facts() {
        let plain = include_str!("../../tests/data/events/file.json");
        let encrypted = include_str!("../../tests/data/events/encrypted_file.json");
        let s = summarize(plain, Decryption::Plaintext, &all).unwrap();
        assert_eq!(
            s["attachment"],
            json!({"filename": "build.log", "size": 1024, "mimetype": "text/plain",
                   "encrypted": false})
        );
        let s = summarize(encrypted, Decryption::Decrypted, &all).unwrap();
        assert_eq!(
            s["attachment"],
            json!({"filename": "secrets.txt", "size": 2048, "mimetype": "text/plain",
                   "encrypted": true})
        );
        assert_eq!(
            (s["msgtype"].clone(), s["body"].clone()),
            (json!("m.file"), json!("secrets.txt"))
        );
        let text = r#"{"type":"m.room.message","event_id":"$a","sender":"@h:x","origin_server_ts":5,
            "content":{"msgtype":"m.text","body":"hi"}}"#;
        assert!(summarize(text, Decryption::Plaintext, &all)
            .unwrap()
            .get("attachment")
            .is_none());
    }

    #[test]
    fn reaction_counts_group_by_raw_key() {
        let a = r#"{"content":{"m.relates_to":{"rel_type":"m.annotation","event_id":"$p","key":"👍"}}}"#;
        let b = r#"{"content":{"m.relates_to":{"rel_type":"m.annotation","event_id":"$p","key":"👎"}}}"#;
        assert_eq!(reaction_counts([a, a, b, "{}"]), json!({"👍": 2, "👎": 1}));
    }
}
