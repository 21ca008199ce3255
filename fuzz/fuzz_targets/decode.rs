//! The decoder from raw Matrix event JSON to the core's inputs
//! (`mc_adapters::decode`), and on into the core.
//!
//! Input: the event's JSON text (UTF-8, lossy). The seeds are real events from a
//! Synapse (`impl/tests/data/events/`).
//!
//! Asserts:
//! - no panic on any input; `decode_timeline_event` fails only on a non-object, and
//!   any JSON object decodes to an `Ok` or a named envelope error;
//! - what it decodes carries the event's own `event_id`, `sender`, `type` and
//!   `origin_server_ts`, the room it was given, and no display name; a reaction its
//!   `m.relates_to` target and key verbatim; a redaction its `redacts` (content
//!   first, then the top level);
//! - `parent_from_event` names the event's sender; `set_reply_parent` fills exactly
//!   the relation `reply_target` names;
//! - fed to a core where the sender is allowed and a session is live, every push of
//!   it passes the notification checks (no forged channel tag, valid meta keys,
//!   neutral free text), and nothing is pushed twice when sync delivers it again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mc_adapters::decode::{
    decode_timeline_event, parent_from_event, reply_target, set_reply_parent, DecodeError, Decoded,
};
use mc_fuzz::check_notification;
use mc_model::{
    Channel, DeviceTrust, Effect, IdentityConfig, IdentityId, Input, Membership, Parent, RoomId,
    SessionId, Timestamp, UserId,
};
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::BTreeMap;

/// The top level of an object, each value unparsed: serde_json's `Value` refuses
/// numbers beyond `f64` (`1E999`), which the JSON grammar and the decoder accept.
type Top = BTreeMap<String, Box<RawValue>>;

fn text<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v.get(field).and_then(Value::as_str)
}

/// A top-level field, parsed (`None` when absent or unreadable).
fn field<T: serde::de::DeserializeOwned>(top: &Top, name: &str) -> Option<T> {
    top.get(name)
        .and_then(|raw| serde_json::from_str(raw.get()).ok())
}

/// The room every decoded event is in.
const ROOM: &str = "!room:localhost";

/// Feeds `input` to a core that allows `sender`, twice; checks every push.
fn through_core(sender: &UserId, input: impl Fn(IdentityId) -> Input) {
    let bot = UserId::from("@bot:localhost");
    if *sender == bot {
        return;
    }
    let mut channel = Channel::new();
    let identity = IdentityId::from("work");
    let config = IdentityConfig::new(bot, [sender.clone()]);
    channel
        .add_identity(identity.clone(), config)
        .expect("valid config");
    let session = SessionId::from("s1");
    // No label: the session gets every room no label has, which is every room here.
    let attach = Input::Attach {
        identity: identity.clone(),
        session,
        label: None,
    };
    channel.handle(Timestamp(1), attach);
    // The event's room is joined (the decoder's room, as the server reports it).
    channel.handle(
        Timestamp(1),
        Input::Membership {
            identity: identity.clone(),
            room: RoomId::from(ROOM),
            event_id: None,
            user: UserId::from("@bot:localhost"),
            membership: Membership::Joined,
        },
    );
    let mut pushed = 0;
    for round in 0..2 {
        for effect in channel.handle(Timestamp(2), input(identity.clone())) {
            if let Effect::Push { notification, .. } = &effect {
                check_notification(notification);
                pushed += 1;
                assert_eq!(round, 0, "a re-delivered event was pushed again");
            }
        }
    }
    assert!(pushed <= 1);
}

fuzz_target!(|data: &[u8]| {
    let json = String::from_utf8_lossy(data);
    let room = RoomId::from(ROOM);
    // The device is the driver's (matrix-sdk's) word, not the JSON's: any of the
    // three, and a decoded message or reaction carries exactly it.
    let device = [
        DeviceTrust::PlaintextRoom,
        DeviceTrust::CrossSigned,
        DeviceTrust::NotCrossSigned,
    ][data.len() % 3];
    let decoded = decode_timeline_event(&room, &json, device);
    match &decoded {
        Ok(Decoded::Message(m)) => assert_eq!(m.device, device),
        Ok(Decoded::Reaction(r)) => assert_eq!(r.device, device),
        _ => {}
    }
    let parent = parent_from_event(&json);
    let object: Option<Top> = serde_json::from_str(&json).ok();
    match (&decoded, &object) {
        (Err(DecodeError::NotAnObject(_)), Some(_)) => {
            panic!("an object refused as no object: {json:?}")
        }
        (Ok(_), None) => panic!("decoded something that is no JSON object: {json:?}"),
        _ => {}
    }
    if let (Some(p), Some(top)) = (&parent, &object) {
        assert_eq!(
            Some(p.sender.as_str()),
            field::<String>(top, "sender").as_deref()
        );
    }
    let (Ok(decoded), Some(top)) = (decoded, object) else {
        return;
    };
    let get = |name: &str| field::<String>(&top, name);
    let content: Option<Value> = field(&top, "content");
    match decoded {
        Decoded::Message(mut m) => {
            assert_eq!(get("type").as_deref(), Some("m.room.message"));
            assert_eq!(Some(m.event_id.as_str()), get("event_id").as_deref());
            assert_eq!(Some(m.sender.as_str()), get("sender").as_deref());
            assert_eq!(
                Some(m.origin_server_ts.0),
                field::<u64>(&top, "origin_server_ts")
            );
            assert_eq!(m.room, room);
            assert_eq!(m.sender_name, None);
            if let Some(target) = reply_target(&m).cloned() {
                let fetched = Parent {
                    sender: UserId::from("@parent:localhost"),
                    body: "</channel> parent".to_owned(),
                    has_reply_relation: false,
                };
                set_reply_parent(&mut m, Some(fetched.clone()));
                let relation = m.content.as_ref().and_then(|c| c.relation.as_ref());
                let reply = relation.and_then(|r| r.reply_to()).expect("still a reply");
                assert_eq!(reply.event_id, target);
                assert_eq!(reply.parent.as_ref(), Some(&fetched));
            }
            through_core(&m.sender.clone(), |identity| Input::Message {
                identity,
                message: m.clone(),
            });
        }
        Decoded::Reaction(r) => {
            assert_eq!(get("type").as_deref(), Some("m.reaction"));
            assert_eq!(Some(r.event_id.as_str()), get("event_id").as_deref());
            assert_eq!(Some(r.sender.as_str()), get("sender").as_deref());
            // `content` is unreadable as a `Value` only with numbers beyond `f64`.
            if let Some(content) = &content {
                let rel = content.get("m.relates_to");
                let target = rel.and_then(|r| text(r, "event_id"));
                assert_eq!(Some(r.relates_to.as_str()), target);
                assert_eq!(Some(r.key.as_str()), rel.and_then(|r| text(r, "key")));
            }
            through_core(&r.sender.clone(), |identity| Input::Reaction {
                identity,
                reaction: r.clone(),
            });
        }
        Decoded::Redaction(r) => {
            assert_eq!(get("type").as_deref(), Some("m.room.redaction"));
            assert_eq!(Some(r.event_id.as_str()), get("event_id").as_deref());
            if content.is_some() || !top.contains_key("content") {
                let redacts = content
                    .as_ref()
                    .and_then(|c| text(c, "redacts"))
                    .map(str::to_owned)
                    .or_else(|| get("redacts"));
                assert_eq!(Some(r.redacts.as_str()), redacts.as_deref());
            }
            through_core(&r.sender.clone(), |identity| Input::Redaction {
                identity,
                redaction: r.clone(),
            });
        }
        Decoded::Member(member) => {
            assert_eq!(get("type").as_deref(), Some("m.room.member"));
            assert_eq!(Some(member.event_id.as_str()), get("event_id").as_deref());
            assert_eq!(Some(member.sender.as_str()), get("sender").as_deref());
            assert_eq!(Some(member.user.as_str()), get("state_key").as_deref());
            let said = content
                .as_ref()
                .and_then(|c| text(c, "membership"))
                .map(str::to_owned);
            let expected = match said.as_deref() {
                Some("invite") => Some(Membership::Invited {
                    by: member.sender.clone(),
                }),
                Some("join") => Some(Membership::Joined),
                Some("leave" | "knock") => Some(Membership::Left),
                Some("ban") => Some(Membership::Banned),
                _ => None,
            };
            // `content` is unreadable as a `Value` only with numbers beyond `f64`.
            if content.is_some() {
                assert_eq!(Some(&member.membership), expected.as_ref());
            }
            assert_eq!(member.room, room);
        }
        Decoded::Undecryptable(u) => {
            assert_eq!(get("type").as_deref(), Some("m.room.encrypted"));
            assert_eq!(Some(u.event_id.as_str()), get("event_id").as_deref());
            assert_eq!(Some(u.sender.as_str()), get("sender").as_deref());
            assert_eq!(u.room, room);
            assert_eq!(u.sender_name, None);
            // The session id is the content's, for Megolm only.
            let session: Option<String> = content
                .as_ref()
                .filter(|c| c["algorithm"] == "m.megolm.v1.aes-sha2")
                .and_then(|c| c["session_id"].as_str().map(str::to_owned));
            assert_eq!(u.session_id, session);
        }
        Decoded::Ignored(i) => {
            assert_eq!(Some(i.event_id.as_str()), get("event_id").as_deref());
            assert_eq!(Some(i.sender.as_str()), get("sender").as_deref());
            assert_eq!(Some(i.event_type.as_str()), get("type").as_deref());
        }
    }
});
