//! What the read tools return for one Matrix event: a flat summary of the raw event
//! ([`EventSummary`]), with its relations, read from the event's JSON as the
//! homeserver serves it ([Client-Server API, "Forming relationships between
//! events"]); an event's reactions counted by key, and one reaction as
//! `get_reactions` lists it ([`ReactionSummary`]). The types derive their JSON
//! Schema: it is what the tools' `outputSchema` says of them.
//!
//! [Client-Server API, "Forming relationships between events"]: https://spec.matrix.org/v1.16/client-server-api/#forming-relationships-between-events

use crate::decode::RelatesTo;
use ruma::events::room::message::MessageType;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// How the event reached the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Decryption {
    /// Sent in clear.
    Plaintext,
    /// Encrypted, and decrypted with a key we hold.
    Decrypted,
    /// Encrypted with a key we do not (yet) hold: no content.
    UnableToDecrypt,
}

/// One event: its envelope, how it was read, its relations, and what a person sees
/// of its content. A field that is absent does not apply to the event; one that is
/// `null` applies, but the event did not carry it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct EventSummary {
    /// The event's id (`$…`).
    pub event_id: Option<String>,
    /// The event type (`m.room.message`, `m.reaction`, `m.room.redaction`, …).
    #[serde(rename = "type")]
    pub event_type: Option<String>,
    /// The sender's MXID.
    pub sender: String,
    /// Whether the sender passes the identity's sender gate.
    pub sender_allowed: bool,
    /// `origin_server_ts`: milliseconds since the Unix epoch.
    pub ts: Option<u64>,
    /// How the event reached the server.
    pub decryption: Decryption,
    /// Whether the event was redacted (its content is gone).
    pub redacted: bool,
    /// A state event's `state_key`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_key: Option<String>,
    /// An `m.room.message`'s `msgtype` (of the new content, for an edit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub msgtype: Option<String>,
    /// The text (an edit's `m.new_content` body).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The HTML (`format` `org.matrix.custom.html`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub formatted_body: Option<String>,
    /// The file of an `m.image`, `m.file`, `m.audio` or `m.video`
    /// (`download_attachment` fetches it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attachment: Option<AttachmentSummary>,
    /// The event this one replies to (a rich reply, or a reply within a thread).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    /// An edit (`m.replace`): the event it edits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edit_of: Option<Option<String>>,
    /// A thread message (`m.thread`): the thread's root.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_root: Option<Option<String>>,
    /// An annotation (`m.annotation`, a reaction): its key, as sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reaction_key: Option<Option<String>>,
    /// An annotation: the event it is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reacted_to: Option<Option<String>>,
    /// An `m.room.redaction`: the event it redacts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redacts: Option<Option<String>>,
    /// A message's reactions, `{key: count}`, read with it; `null` when they could
    /// not be read.
    // `summarize` leaves it out: the read tools fill it in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reactions: Option<Option<BTreeMap<String, u64>>>,
}

/// The file an event carries: its name and the facts of its `info`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct AttachmentSummary {
    /// `filename`, or the `body` when there is none.
    pub filename: String,
    /// `info.size`, in bytes.
    pub size: Option<u64>,
    /// `info.mimetype`.
    pub mimetype: Option<String>,
    /// Whether the media is encrypted (a `file` rather than a `url`: Client-Server
    /// API, "Sending encrypted attachments"); `download_attachment` decrypts it.
    pub encrypted: bool,
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut v = v;
    for key in path {
        v = v.get(key)?;
    }
    v.as_str()
}

fn owned(s: Option<&str>) -> Option<String> {
    s.map(str::to_owned)
}

/// Summarises one event (`raw`: the event JSON; `decryption`: how it was read;
/// `allowed`: whether the sender passes the identity's sender gate).
///
/// Relations are read with [`RelatesTo`] (Client-Server API, "Forming relationships
/// between events"): `edit_of`, `thread_root`, `reaction_key` with `reacted_to` are
/// set for an `m.replace`, `m.thread` and `m.annotation` relation (`null` when it
/// names no event or key); `reply_to` for an `m.in_reply_to`, except a thread's
/// fallback. `body` of an edit is its `m.new_content` body. `redacts` is set for an
/// `m.room.redaction` (`content.redacts`, or the top-level `redacts` before room
/// version 11). Returns `None` when `raw` is not a JSON object.
pub fn summarize(
    raw: &str,
    decryption: Decryption,
    allowed: &dyn Fn(&str) -> bool,
) -> Option<EventSummary> {
    let v: Value = serde_json::from_str(raw).ok()?;
    let obj = v.as_object()?;
    let sender = str_at(&v, &["sender"]).unwrap_or_default();
    let event_type = str_at(&v, &["type"]);
    let relation = RelatesTo::of(&v).unwrap_or_default();
    let related =
        |rel_type: &str, field: &Option<String>| relation.is(rel_type).then(|| field.clone());
    let content = v.get("content").cloned().unwrap_or(Value::Null);
    let shown = if relation.is("m.replace") {
        content.get("m.new_content").cloned().unwrap_or(content)
    } else {
        content
    };
    let file = serde_json::from_value::<MessageType>(shown.clone()).ok();
    Some(EventSummary {
        event_id: owned(str_at(&v, &["event_id"])),
        event_type: owned(event_type),
        sender: sender.to_owned(),
        sender_allowed: allowed(sender),
        ts: obj.get("origin_server_ts").and_then(Value::as_u64),
        decryption,
        redacted: v
            .get("unsigned")
            .and_then(|u| u.get("redacted_because"))
            .is_some(),
        state_key: owned(str_at(&v, &["state_key"])),
        msgtype: owned(str_at(&shown, &["msgtype"])),
        body: owned(str_at(&shown, &["body"])),
        formatted_body: owned(str_at(&shown, &["formatted_body"]))
            .filter(|_| str_at(&shown, &["format"]) == Some("org.matrix.custom.html")),
        attachment: file
            .as_ref()
            .and_then(crate::decode::attachment)
            .map(|file| AttachmentSummary {
                filename: file.filename,
                size: file.size,
                mimetype: file.mimetype,
                encrypted: shown.get("file").is_some(),
            }),
        reply_to: relation
            .in_reply_to
            .clone()
            .filter(|_| !(relation.is("m.thread") && relation.is_falling_back)),
        edit_of: related("m.replace", &relation.event_id),
        thread_root: related("m.thread", &relation.event_id),
        reaction_key: related("m.annotation", &relation.key),
        reacted_to: related("m.annotation", &relation.event_id),
        redacts: (event_type == Some("m.room.redaction")).then(|| {
            owned(str_at(&v, &["content", "redacts"]).or_else(|| str_at(&v, &["redacts"])))
        }),
        reactions: None,
    })
}

/// Reactions summary of one event: `{key: count}` from annotation events' JSON
/// (an event that is not an `m.annotation` with a key is not counted).
pub fn reaction_counts<'a>(
    annotations: impl IntoIterator<Item = &'a str>,
) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::<String, u64>::new();
    for raw in annotations {
        if let Some(key) = crate::decode::relates_to(raw)
            .as_ref()
            .and_then(RelatesTo::annotation_key)
        {
            *counts.entry(key.to_string()).or_default() += 1;
        }
    }
    counts
}

/// One reaction as `get_reactions` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ReactionSummary {
    /// The reaction's own event id.
    pub event_id: String,
    /// Who reacted (an MXID).
    pub sender: String,
    /// The annotation's key, as sent (raw: with any variation selector).
    pub key: String,
    /// `origin_server_ts`: milliseconds since the Unix epoch.
    pub ts: u64,
}

/// The [`ReactionSummary`] of an annotation event's JSON; `None` when it is not an
/// `m.annotation` with a key, or lacks its event id, sender or timestamp.
pub fn reaction(raw: &str) -> Option<ReactionSummary> {
    let v: Value = serde_json::from_str(raw).ok()?;
    Some(ReactionSummary {
        event_id: str_at(&v, &["event_id"])?.to_owned(),
        sender: str_at(&v, &["sender"])?.to_owned(),
        key: RelatesTo::of(&v)?.annotation_key()?.to_owned(),
        ts: v.get("origin_server_ts")?.as_u64()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// [`summarize`], as the JSON a tool returns.
    fn summary(raw: &str, decryption: Decryption, allowed: &dyn Fn(&str) -> bool) -> Option<Value> {
        summarize(raw, decryption, allowed).map(|s| serde_json::to_value(s).unwrap())
    }

    fn all(_: &str) -> bool {
        true
    }

    #[test]
    fn a_plain_message_is_summarised_with_its_body_and_sender_gate() {
        let raw = r#"{"type":"m.room.message","event_id":"$a","sender":"@h:x","origin_server_ts":5,
            "content":{"msgtype":"m.text","body":"hi","format":"org.matrix.custom.html","formatted_body":"<b>hi</b>"}}"#;
        let s = summary(raw, Decryption::Plaintext, &|u| u == "@h:x").unwrap();
        assert_eq!(
            s,
            json!({"event_id":"$a","type":"m.room.message","sender":"@h:x","sender_allowed":true,
                   "ts":5,"decryption":"plaintext","redacted":false,"msgtype":"m.text","body":"hi",
                   "formatted_body":"<b>hi</b>"})
        );
        let s = summary(raw, Decryption::Decrypted, &|_| false).unwrap();
        assert_eq!(s["sender_allowed"], json!(false));
        assert_eq!(s["decryption"], json!("decrypted"));
    }

    #[test]
    fn an_edit_shows_its_new_content_and_target() {
        let raw = r#"{"type":"m.room.message","event_id":"$e","sender":"@h:x","origin_server_ts":1,
            "content":{"msgtype":"m.text","body":"* new","m.new_content":{"msgtype":"m.text","body":"new"},
            "m.relates_to":{"rel_type":"m.replace","event_id":"$o"}}}"#;
        let s = summary(raw, Decryption::Plaintext, &all).unwrap();
        assert_eq!(s["edit_of"], json!("$o"));
        assert_eq!(s["body"], json!("new"));
        assert!(s.get("reply_to").is_none());
    }

    #[test]
    fn a_thread_fallback_is_not_a_reply_but_a_thread_reply_is() {
        let fallback = r#"{"type":"m.room.message","event_id":"$t","sender":"@h:x","origin_server_ts":1,
            "content":{"msgtype":"m.text","body":"t","m.relates_to":{"rel_type":"m.thread","event_id":"$r",
            "is_falling_back":true,"m.in_reply_to":{"event_id":"$r"}}}}"#;
        let s = summary(fallback, Decryption::Plaintext, &all).unwrap();
        assert_eq!(s["thread_root"], json!("$r"));
        assert!(s.get("reply_to").is_none());
        let reply = fallback.replace("true", "false").replace(
            r#""m.in_reply_to":{"event_id":"$r"}"#,
            r#""m.in_reply_to":{"event_id":"$p"}"#,
        );
        let s = summary(&reply, Decryption::Plaintext, &all).unwrap();
        assert_eq!(s["reply_to"], json!("$p"));
        let rich = r#"{"type":"m.room.message","event_id":"$q","sender":"@h:x","origin_server_ts":1,
            "content":{"msgtype":"m.text","body":"q","m.relates_to":{"m.in_reply_to":{"event_id":"$p"}}}}"#;
        assert_eq!(
            summary(rich, Decryption::Plaintext, &all).unwrap()["reply_to"],
            json!("$p")
        );
    }

    #[test]
    fn reactions_redactions_and_redacted_events_are_marked() {
        let reaction = r#"{"type":"m.reaction","event_id":"$x","sender":"@h:x","origin_server_ts":1,
            "content":{"m.relates_to":{"rel_type":"m.annotation","event_id":"$p","key":"👍"}}}"#;
        let s = summary(reaction, Decryption::Plaintext, &all).unwrap();
        assert_eq!(
            (s["reaction_key"].clone(), s["reacted_to"].clone()),
            (json!("👍"), json!("$p"))
        );
        let redaction = r#"{"type":"m.room.redaction","event_id":"$y","sender":"@h:x","origin_server_ts":1,
            "redacts":"$x","content":{}}"#;
        assert_eq!(
            summary(redaction, Decryption::Plaintext, &all).unwrap()["redacts"],
            json!("$x")
        );
        let redacted = r#"{"type":"m.room.message","event_id":"$z","sender":"@h:x","origin_server_ts":1,
            "content":{},"unsigned":{"redacted_because":{"event_id":"$y"}}}"#;
        let s = summary(redacted, Decryption::Plaintext, &all).unwrap();
        assert_eq!(s["redacted"], json!(true));
        assert!(s.get("body").is_none());
        assert!(summary("[1]", Decryption::Plaintext, &all).is_none());
        assert!(summary("not json", Decryption::Plaintext, &all).is_none());
    }

    #[test]
    fn an_attachment_in_the_clear_or_encrypted_is_summarised_with_its_facts() {
        let plain = include_str!("../../tests/data/events/file.json");
        let encrypted = include_str!("../../tests/data/events/encrypted_file.json");
        let s = summary(plain, Decryption::Plaintext, &all).unwrap();
        assert_eq!(
            s["attachment"],
            json!({"filename": "build.log", "size": 1024, "mimetype": "text/plain",
                   "encrypted": false})
        );
        let s = summary(encrypted, Decryption::Decrypted, &all).unwrap();
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
        assert!(summary(text, Decryption::Plaintext, &all)
            .unwrap()
            .get("attachment")
            .is_none());
    }

    #[test]
    fn a_reaction_is_listed_with_its_sender_raw_key_and_ts_or_not_at_all() {
        let raw = include_str!("../../tests/data/events/reaction.json");
        assert_eq!(
            reaction(raw),
            Some(ReactionSummary {
                event_id: "$VnuFczD_dzR-SVIn_6u8s94qgDIyeGIedDQJd55T35M".into(),
                sender: "@bob:localhost".into(),
                key: "👍️".into(),
                ts: 1795991839857,
            })
        );
        let mut event: Value = serde_json::from_str(raw).unwrap();
        event["content"]["m.relates_to"]["rel_type"] = json!("m.reference");
        assert_eq!(reaction(&event.to_string()), None);
        for field in ["event_id", "sender", "origin_server_ts", "content"] {
            let mut event: Value = serde_json::from_str(raw).unwrap();
            event.as_object_mut().unwrap().remove(field);
            assert_eq!(reaction(&event.to_string()), None, "without {field}");
        }
        assert_eq!(reaction("not json"), None);
    }

    #[test]
    fn reaction_counts_group_by_raw_key() {
        let a = r#"{"content":{"m.relates_to":{"rel_type":"m.annotation","event_id":"$p","key":"👍"}}}"#;
        let b = r#"{"content":{"m.relates_to":{"rel_type":"m.annotation","event_id":"$p","key":"👎"}}}"#;
        let reference =
            r#"{"content":{"m.relates_to":{"rel_type":"m.reference","event_id":"$p","key":"👍"}}}"#;
        assert_eq!(
            json!(reaction_counts([a, a, b, "{}", reference])),
            json!({"👍": 2, "👎": 1})
        );
    }
}
