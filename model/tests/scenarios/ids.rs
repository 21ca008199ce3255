//! Identifiers and Matrix names, as the server logs and sends them.

use mc_model::{EffectId, EventId, IdentityId, MsgType, RoomId, SessionId, UserId};

#[test]
fn an_effect_id_displays_with_its_number() {
    assert_eq!(EffectId(7).to_string(), "effect#7");
    assert_eq!(format!("{}", EffectId(0)), "effect#0");
}

#[test]
fn string_ids_display_and_convert_as_their_text() {
    assert_eq!(UserId::from("@a:hs").to_string(), "@a:hs");
    assert_eq!(UserId::from("@a:hs").as_str(), "@a:hs");
    assert_eq!(RoomId::from("!r:hs").to_string(), "!r:hs");
    assert_eq!(EventId::from("$e").as_str(), "$e");
    assert_eq!(SessionId::from("s").to_string(), "s");
    assert_eq!(IdentityId::from("work").as_str(), "work");
}

#[test]
fn every_msgtype_has_its_matrix_name() {
    let names: Vec<_> = [
        MsgType::Text,
        MsgType::Emote,
        MsgType::Notice,
        MsgType::Image,
        MsgType::File,
        MsgType::Audio,
        MsgType::Video,
        MsgType::Location,
        MsgType::Other("org.example.poll".into()),
    ]
    .iter()
    .map(|m| m.as_str().to_owned())
    .collect();
    assert_eq!(
        names,
        [
            "m.text",
            "m.emote",
            "m.notice",
            "m.image",
            "m.file",
            "m.audio",
            "m.video",
            "m.location",
            "org.example.poll"
        ]
    );
}
