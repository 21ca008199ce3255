//! What a decoded timeline event ([`Decoded`]) becomes as a model input, once the room
//! has told what the model cannot know: a reply's parent event and the sender's
//! display name. Asking the room is IO, done by the server between [`lookups`] and
//! [`input`].
//!
//! Every event is one input: a message, reaction, redaction or membership as what it
//! is, an event the Matrix library could not decrypt as [`Input::Undecryptable`], and
//! what is no input of the core's (state, other types, malformed, or not even a
//! readable envelope) as [`Input::Unhandled`], which the model drops with its reason.

use crate::decode::{self, DecodeError, Decoded};
use mc_model::{EventId, IdentityId, Input, RoomId, UserId};

/// What the room must be asked before a decoded event becomes its input.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lookups {
    /// The event a message replies to ([`decode::reply_target`]): its JSON resolves
    /// the reply's parent.
    pub parent: Option<EventId>,
    /// The member whose display name the input carries: the sender of a message or
    /// of an undecryptable event.
    pub display_name: Option<UserId>,
}

/// What the room answered to [`Lookups`]; `None` for what it could not tell or was
/// not asked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Found {
    /// The parent event's JSON as the homeserver serves it.
    pub parent_json: Option<String>,
    /// The sender's display name in the room.
    pub display_name: Option<String>,
}

/// What to ask the room about `decoded`.
pub fn lookups(decoded: &Decoded) -> Lookups {
    match decoded {
        Decoded::Message(message) => Lookups {
            parent: decode::reply_target(message).cloned(),
            display_name: Some(message.sender.clone()),
        },
        Decoded::Undecryptable(event) => Lookups {
            parent: None,
            display_name: Some(event.sender.clone()),
        },
        Decoded::Reaction(_) | Decoded::Redaction(_) | Decoded::Member(_) | Decoded::Ignored(_) => {
            Lookups::default()
        }
    }
}

/// The input `decoded` becomes for `identity` in `room`, with what the room answered:
/// a reply's parent is resolved from its JSON (`None`: unresolved, pushed with an
/// explicit marker), the display name set on a message or an undecryptable event.
pub fn input(identity: &IdentityId, room: RoomId, decoded: Decoded, found: Found) -> Input {
    let identity = identity.clone();
    match decoded {
        Decoded::Message(mut message) => {
            let parent = found
                .parent_json
                .as_deref()
                .and_then(decode::parent_from_event);
            decode::set_reply_parent(&mut message, parent);
            message.sender_name = found.display_name;
            Input::Message { identity, message }
        }
        Decoded::Reaction(reaction) => Input::Reaction { identity, reaction },
        Decoded::Redaction(redaction) => Input::Redaction {
            identity,
            redaction,
        },
        Decoded::Member(member) => Input::Membership {
            identity,
            room: member.room,
            event_id: Some(member.event_id),
            user: member.user,
            membership: member.membership,
        },
        Decoded::Undecryptable(mut event) => {
            event.sender_name = found.display_name;
            Input::Undecryptable { identity, event }
        }
        Decoded::Ignored(ignored) => Input::Unhandled {
            identity,
            room,
            what: ignored.describe(),
            event_id: Some(ignored.event_id),
            sender: Some(ignored.sender),
        },
    }
}

/// The input of an event in `room` whose envelope cannot be read: no input, named by
/// nothing but its room.
pub fn unreadable(identity: &IdentityId, room: RoomId, error: &DecodeError) -> Input {
    Input::Unhandled {
        identity: identity.clone(),
        room,
        event_id: None,
        sender: None,
        what: format!("an event whose envelope is unreadable: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_model::{DeviceTrust, Membership};
    use serde_json::json;

    fn room() -> RoomId {
        RoomId("!r:hs".into())
    }

    fn bot() -> IdentityId {
        IdentityId("bot".into())
    }

    fn decoded(event: serde_json::Value) -> Decoded {
        decode::decode_timeline_event(&room(), &event.to_string(), DeviceTrust::CrossSigned)
            .unwrap()
    }

    fn message(event_id: &str, content: serde_json::Value) -> serde_json::Value {
        json!({
            "type": "m.room.message", "event_id": event_id, "sender": "@ann:hs",
            "origin_server_ts": 7, "content": content,
        })
    }

    fn reply() -> Decoded {
        decoded(message(
            "$reply",
            json!({
                "msgtype": "m.text", "body": "yes",
                "m.relates_to": {"m.in_reply_to": {"event_id": "$parent"}},
            }),
        ))
    }

    fn parent_json() -> String {
        message(
            "$parent",
            json!({"msgtype": "m.text", "body": "the question"}),
        )
        .to_string()
    }

    /// The reply target of the input's message, with its parent as resolved.
    fn reply_to(input: &Input) -> mc_model::ReplyTo {
        let Input::Message { message, .. } = input else {
            panic!("{input:?}")
        };
        let relation = message.content.as_ref().unwrap().relation.as_ref().unwrap();
        relation.reply_to().unwrap().clone()
    }

    #[test]
    fn a_reply_asks_the_room_for_its_parent_and_its_senders_display_name() {
        assert_eq!(
            lookups(&reply()),
            Lookups {
                parent: Some(EventId("$parent".into())),
                display_name: Some(UserId("@ann:hs".into())),
            }
        );
        let plain = decoded(message("$m", json!({"msgtype": "m.text", "body": "hi"})));
        assert_eq!(
            lookups(&plain),
            Lookups {
                parent: None,
                display_name: Some(UserId("@ann:hs".into())),
            }
        );
    }

    #[test]
    fn a_replys_parent_is_resolved_from_its_json_and_unresolved_without_it() {
        let found = Found {
            parent_json: Some(parent_json()),
            display_name: Some("Ann".into()),
        };
        let input = input(&bot(), room(), reply(), found);
        let parent = reply_to(&input).parent.expect("resolved");
        assert_eq!(parent.sender, UserId("@ann:hs".into()));
        assert_eq!(parent.body, "the question");
        let Input::Message { identity, message } = &input else {
            panic!("{input:?}")
        };
        assert_eq!(identity, &bot());
        assert_eq!(message.sender_name.as_deref(), Some("Ann"));
        assert_eq!(message.event_id, EventId("$reply".into()));

        let unresolved = super::input(&bot(), room(), reply(), Found::default());
        assert_eq!(reply_to(&unresolved).parent, None);
        let Input::Message { message, .. } = &unresolved else {
            panic!("{unresolved:?}")
        };
        assert_eq!(message.sender_name, None);
    }

    #[test]
    fn an_undecryptable_event_asks_for_its_senders_display_name_and_carries_it() {
        let event = decoded(json!({
            "type": "m.room.encrypted", "event_id": "$u", "sender": "@ann:hs",
            "origin_server_ts": 7,
            "content": {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "x",
                        "session_id": "s", "sender_key": "k", "device_id": "D"},
        }));
        assert_eq!(
            lookups(&event),
            Lookups {
                parent: None,
                display_name: Some(UserId("@ann:hs".into())),
            }
        );
        let found = Found {
            parent_json: None,
            display_name: Some("Ann".into()),
        };
        let Input::Undecryptable { identity, event } = input(&bot(), room(), event, found) else {
            panic!("not undecryptable")
        };
        assert_eq!(identity, bot());
        assert_eq!(event.event_id, EventId("$u".into()));
        assert_eq!(event.sender_name.as_deref(), Some("Ann"));
    }

    #[test]
    fn reactions_redactions_memberships_and_other_events_ask_the_room_nothing() {
        let reaction = decoded(json!({
            "type": "m.reaction", "event_id": "$r", "sender": "@ann:hs",
            "origin_server_ts": 7,
            "content": {"m.relates_to": {"rel_type": "m.annotation", "event_id": "$m", "key": "👍"}},
        }));
        let redaction = decoded(json!({
            "type": "m.room.redaction", "event_id": "$x", "sender": "@ann:hs",
            "origin_server_ts": 7, "content": {"redacts": "$m"},
        }));
        let member = decoded(json!({
            "type": "m.room.member", "event_id": "$j", "sender": "@bot:hs",
            "state_key": "@bot:hs", "origin_server_ts": 7, "content": {"membership": "join"},
        }));
        let other = decoded(json!({
            "type": "m.room.topic", "event_id": "$t", "sender": "@ann:hs",
            "state_key": "", "origin_server_ts": 7, "content": {"topic": "t"},
        }));
        for event in [reaction, redaction, member, other] {
            assert_eq!(lookups(&event), Lookups::default(), "{event:?}");
        }
    }

    #[test]
    fn each_decoded_event_becomes_the_input_of_its_kind() {
        let found = || Found {
            parent_json: Some(parent_json()),
            display_name: Some("Ann".into()),
        };
        let reaction = decoded(json!({
            "type": "m.reaction", "event_id": "$r", "sender": "@ann:hs",
            "origin_server_ts": 7,
            "content": {"m.relates_to": {"rel_type": "m.annotation", "event_id": "$m", "key": "👍"}},
        }));
        let Input::Reaction { identity, reaction } = input(&bot(), room(), reaction, found())
        else {
            panic!("not a reaction")
        };
        assert_eq!(identity, bot());
        assert_eq!(reaction.event_id, EventId("$r".into()));

        let redaction = decoded(json!({
            "type": "m.room.redaction", "event_id": "$x", "sender": "@ann:hs",
            "origin_server_ts": 7, "content": {"redacts": "$m"},
        }));
        let Input::Redaction {
            identity,
            redaction,
        } = input(&bot(), room(), redaction, found())
        else {
            panic!("not a redaction")
        };
        assert_eq!(identity, bot());
        assert_eq!(redaction.event_id, EventId("$x".into()));

        let member = decoded(json!({
            "type": "m.room.member", "event_id": "$j", "sender": "@bot:hs",
            "state_key": "@bot:hs", "origin_server_ts": 7, "content": {"membership": "join"},
        }));
        assert_eq!(
            input(&bot(), room(), member, found()),
            Input::Membership {
                identity: bot(),
                room: room(),
                event_id: Some(EventId("$j".into())),
                user: UserId("@bot:hs".into()),
                membership: Membership::Joined,
            }
        );

        let topic = decoded(json!({
            "type": "m.room.topic", "event_id": "$t", "sender": "@ann:hs",
            "state_key": "", "origin_server_ts": 7, "content": {"topic": "t"},
        }));
        let Decoded::Ignored(ignored) = &topic else {
            panic!("{topic:?}")
        };
        let what = ignored.describe();
        assert_eq!(
            input(&bot(), room(), topic, found()),
            Input::Unhandled {
                identity: bot(),
                room: room(),
                event_id: Some(EventId("$t".into())),
                sender: Some(UserId("@ann:hs".into())),
                what,
            }
        );
    }

    #[test]
    fn an_unreadable_envelope_is_no_input_named_by_its_room_only() {
        let error =
            decode::decode_timeline_event(&room(), "[1]", DeviceTrust::PlaintextRoom).unwrap_err();
        assert_eq!(
            unreadable(&bot(), room(), &error),
            Input::Unhandled {
                identity: bot(),
                room: room(),
                event_id: None,
                sender: None,
                what: format!("an event whose envelope is unreadable: {error}"),
            }
        );
    }
}
