//! A sync gap too large to backfill (`Input::GapCut`, issue 12 item 5): the sessions
//! are told which room lost its oldest events, never silently.

use crate::harness::*;
use mc_model::{Channel, Input};

const CUT: &str = "More events arrived in this room while the server could not sync than it \
                   fetches again: the oldest of them are not pushed; read the room's history \
                   if they matter.";

fn gap_cut(w: &mut World, room: &str) {
    let identity = w.identity.clone();
    w.input(Input::GapCut {
        identity,
        room: room.into(),
    });
    w.drive();
}

#[test]
fn a_gap_cut_is_told_to_every_live_session_at_once_with_its_room() {
    let mut w = World::new();
    w.attach(S1);
    w.attach(S2);
    w.mark();

    gap_cut(&mut w, R1);

    assert_eq!(
        w.trace(),
        [
            format!("drop - GapCut {{ room: RoomId({R1:?}) }}"),
            format!("push s1 - gap_cut {CUT:?}"),
            format!("push s2 - gap_cut {CUT:?}"),
        ]
    );
    let push = &w.pushes(S1)[0];
    assert_eq!(push.event_id, None);
    assert_eq!(
        push.meta,
        [
            ("kind", "gap_cut"),
            ("room_id", R1),
            ("security", mc_model::SECURITY_POINTER)
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    );
    assert!(w.state().gap_cuts().is_empty());
}

#[test]
fn the_events_after_a_cut_follow_its_notice_in_order() {
    let mut w = World::new();
    w.attach(S1);
    w.mark();

    gap_cut(&mut w, R1);
    let kept = w.say(ALICE, R1, "the oldest event kept");

    let kinds: Vec<(Option<mc_model::EventId>, String)> = w
        .pushes(S1)
        .into_iter()
        .map(|p| (p.event_id.clone(), p.meta("kind").unwrap().to_owned()))
        .collect();
    assert_eq!(
        kinds,
        [
            (None, "gap_cut".to_owned()),
            (Some(kept), "message".to_owned())
        ]
    );
}

#[test]
fn with_no_session_live_the_cut_waits_and_comes_first_at_the_next_attach_once() {
    let mut w = World::new();
    gap_cut(&mut w, R1);
    gap_cut(&mut w, R1);
    let queued = w.say(ALICE, R1, "while nobody listened");
    assert_eq!(w.state().gap_cuts(), [room(R1)]);
    w.mark();

    w.attach(S1);

    let pushes = w.pushes(S1);
    assert_eq!(pushes.len(), 2, "{pushes:?}");
    assert_eq!(pushes[0].meta("kind"), Some("gap_cut"));
    assert_eq!(pushes[0].meta("room_id"), Some(R1));
    assert_eq!(pushes[1].event_id, Some(queued));
    assert!(w.state().gap_cuts().is_empty());

    w.mark();
    w.attach(S2);
    assert!(w.pushes(S2).is_empty(), "told once");
}

#[test]
fn cuts_of_two_rooms_while_nobody_listens_are_both_told() {
    let mut w = World::new();
    gap_cut(&mut w, R1);
    gap_cut(&mut w, R2);
    w.mark();

    w.attach(S1);

    let rooms: Vec<String> = w
        .pushes(S1)
        .iter()
        .map(|p| p.meta("room_id").unwrap().to_owned())
        .collect();
    assert_eq!(rooms, [R1, R2]);
}

#[test]
fn a_gap_cut_of_a_room_not_joined_is_dropped_and_never_told() {
    let mut w = World::new();
    gap_cut(&mut w, "!elsewhere:hs");
    assert_eq!(w.trace(), ["drop - NotJoined"]);
    assert!(w.state().gap_cuts().is_empty());

    w.mark();
    w.attach(S1);
    assert!(w.pushes(S1).is_empty());
}

#[test]
fn a_waiting_cut_survives_a_restart_of_the_saved_state() {
    let mut w = World::new();
    gap_cut(&mut w, R1);

    let json = serde_json::to_string(&w.channel).unwrap();
    let reloaded: Channel = serde_json::from_str(&json).unwrap();
    let state = reloaded.identity(&w.identity).unwrap();
    assert_eq!(state.gap_cuts(), [room(R1)]);

    // An older saved state, without the field, reads as no cut waiting.
    let mut value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let identities = value["identities"].as_object_mut().unwrap();
    for state in identities.values_mut() {
        state.as_object_mut().unwrap().remove("gap_cuts");
    }
    let older: Channel = serde_json::from_value(value).unwrap();
    assert!(older.identity(&w.identity).unwrap().gap_cuts().is_empty());
}
