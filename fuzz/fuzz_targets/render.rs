//! The meta builder and renderers (`render.rs`): a message, an edit, a reaction or a
//! retraction with fuzzed ids, names, bodies, reply parents, attachments and caps.
//!
//! Input: a few control bytes and length-prefixed strings (see `decode`), the body
//! last (the rest of the input).
//!
//! Asserts, for every notification (`mc_fuzz::check_notification`): no forged
//! channel tag and neutral content; meta keys match `^[A-Za-z_][A-Za-z0-9_]*$` and are
//! never `source`; values are JSON strings; free-text meta is one neutral line. And:
//! `kind`, `sender`, `room_id`, `event_id`, `ts` are the event's own, verbatim; a
//! reply names its parent and says `quoted` or `unresolved`; the quote respects the
//! cap; `truncated`/`original_bytes` appear exactly when the body was cut.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mc_fuzz::{check_notification, Cursor};
use mc_model::render::{render_edit, render_message, render_reaction, render_retraction};
use mc_model::sandbox::neutralise;
use mc_model::{
    Attachment, EventId, IdentityConfig, Message, MessageContent, MetaKey, MsgType, NewContent,
    Parent, Reaction, Redaction, Relation, ReplyTo, RoomId, UserId,
};

const MSGTYPES: [&str; 8] = [
    "m.text",
    "m.emote",
    "m.notice",
    "m.image",
    "m.file",
    "m.audio",
    "m.video",
    "m.location",
];

fn msgtype(b: u8, c: &mut Cursor) -> MsgType {
    match b % 9 {
        0 => MsgType::Text,
        1 => MsgType::Emote,
        2 => MsgType::Notice,
        3 => MsgType::Image,
        4 => MsgType::File,
        5 => MsgType::Audio,
        6 => MsgType::Video,
        7 => MsgType::Location,
        _ => MsgType::Other(c.string()),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut c = Cursor::new(data);
    let kind = c.byte();
    let flags = c.byte();
    let mut config = IdentityConfig::new(
        UserId::from("@bot:example.org"),
        [UserId::from("@ann:example.org")],
    );
    config.body_cap_bytes = 1 + usize::from(c.u16() % 2048);
    config.quote_cap_chars = 1 + usize::from(c.byte());
    let room = RoomId(c.string());
    let event_id = EventId(c.string());
    let sender = UserId(c.string());
    let sender_name = (flags & 1 != 0).then(|| c.string());
    let ts = u64::from(c.u16()) * 1_000_003;
    let mtype = msgtype(c.byte(), &mut c);
    let other = c.string();
    let other_sender = UserId(c.string());
    let aux = c.string();
    let body = c.rest();

    let reply = ReplyTo {
        event_id: EventId(aux.clone()),
        parent: (flags & 2 != 0).then(|| Parent {
            sender: other_sender.clone(),
            body: other.clone(),
            has_reply_relation: flags & 4 != 0,
        }),
    };
    let relation = match (flags >> 3) % 4 {
        0 => None,
        1 => Some(Relation::Reply {
            in_reply_to: reply.clone(),
        }),
        2 => Some(Relation::Thread {
            root: EventId(aux.clone()),
            in_reply_to: Some(reply.clone()),
            is_falling_back: flags & 0x20 != 0,
        }),
        _ => Some(Relation::Thread {
            root: EventId(aux.clone()),
            in_reply_to: None,
            is_falling_back: true,
        }),
    };
    let message = Message {
        room: room.clone(),
        event_id: event_id.clone(),
        sender: sender.clone(),
        sender_name: sender_name.clone(),
        origin_server_ts: mc_model::Timestamp(ts),
        device: mc_model::DeviceTrust::PlaintextRoom,
        content: Some(MessageContent {
            msgtype: mtype.clone(),
            body: body.clone(),
            formatted_body: None,
            relation: relation.clone(),
            attachment: (flags & 0x40 != 0).then(|| Attachment {
                filename: other.clone(),
                size: (flags & 0x80 != 0).then_some(ts),
                mimetype: Some(aux.clone()),
            }),
        }),
    };
    let content = message.content.as_ref().unwrap();

    let (n, expected_kind) = match kind % 4 {
        0 => (render_message(&config, &message, content), "message"),
        1 => {
            let new = NewContent {
                msgtype: mtype.clone(),
                body: body.clone(),
            };
            (
                render_edit(&config, &message, &EventId(aux.clone()), &new),
                "edit",
            )
        }
        2 => {
            let r = Reaction {
                room: room.clone(),
                event_id: event_id.clone(),
                sender: sender.clone(),
                origin_server_ts: mc_model::Timestamp(ts),
                relates_to: EventId(aux.clone()),
                key: body.clone(),
                device: mc_model::DeviceTrust::PlaintextRoom,
            };
            (render_reaction(&r), "reaction")
        }
        _ => {
            let r = Redaction {
                room: room.clone(),
                event_id: event_id.clone(),
                sender: sender.clone(),
                origin_server_ts: mc_model::Timestamp(ts),
                redacts: EventId(aux.clone()),
            };
            (render_retraction(&r), "retraction")
        }
    };
    check_notification(&n);
    let meta = &n.meta;
    assert_eq!(meta.get(MetaKey::Kind), Some(expected_kind));
    assert_eq!(meta.get(MetaKey::RoomId), Some(room.as_str()));
    assert_eq!(meta.get(MetaKey::EventId), Some(event_id.as_str()));
    assert_eq!(meta.get(MetaKey::Sender), Some(sender.as_str()));
    assert_eq!(meta.get(MetaKey::Ts), Some(ts.to_string().as_str()));
    assert!(meta.get(MetaKey::User).is_some());
    if expected_kind == "message" {
        assert_eq!(meta.get(MetaKey::Msgtype), Some(mtype.as_str()));
        assert!(MSGTYPES.contains(&mtype.as_str()) || matches!(mtype, MsgType::Other(_)));
        match relation.as_ref().and_then(Relation::reply_to) {
            Some(r) => {
                assert_eq!(meta.get(MetaKey::InReplyTo), Some(r.event_id.as_str()));
                let status = if r.parent.is_some() {
                    "quoted"
                } else {
                    "unresolved"
                };
                assert_eq!(meta.get(MetaKey::InReplyToStatus), Some(status));
                if let Some(quote) = meta.get(MetaKey::InReplyToQuote) {
                    assert!(quote.chars().count() <= config.quote_cap_chars);
                }
            }
            None => assert_eq!(meta.get(MetaKey::InReplyTo), None),
        }
    }
    if matches!(expected_kind, "message" | "edit") {
        let (neutral, suspicious) = neutralise(&body);
        let cut = meta.get(MetaKey::Truncated) == Some("true");
        if n.content != "(attachment)" && expected_kind == "edit" {
            assert_eq!(cut, neutral.len() > config.body_cap_bytes);
            assert_eq!(suspicious, meta.get(MetaKey::Suspicious) == Some("true"));
        }
        if cut {
            let original = meta
                .get(MetaKey::OriginalBytes)
                .expect("original_bytes with truncated");
            assert!(original.parse::<usize>().unwrap() > config.body_cap_bytes);
        } else {
            assert_eq!(meta.get(MetaKey::OriginalBytes), None);
            assert!(n.content.len() <= config.body_cap_bytes.max("(attachment)".len()));
        }
    }
});
