//! Undecryptable events (`Input::Undecryptable`): the gate first, then parked until
//! the event comes decrypted (handled then as what it is) or its grace period ends
//! (the sessions are told it exists, metadata only).

use crate::harness::*;
use mc_model::config::DEFAULT_UNDECRYPTABLE_GRACE_MS;
use mc_model::{Behavior, Input, UNDECRYPTABLE_MEMORY};

const GRACE: u64 = DEFAULT_UNDECRYPTABLE_GRACE_MS;

/// The content of the push that says an event could not be decrypted.
const TOLD: &str = "An encrypted event from this sender could not be decrypted: its room \
                    key has not reached this device. Its content is unknown. If the key \
                    arrives later, the event is pushed then.";

#[test]
fn an_allowed_senders_undecryptable_event_is_parked_and_pushed_once_when_it_comes_decrypted() {
    let mut w = World::new();
    w.attach(S1);
    w.mark();

    let u = w.undecryptable(ALICE, R1);
    let id = w.send_undecryptable(u.clone());
    assert_eq!(w.take(), [format!("drop {id} Undecryptable")]);
    assert_eq!(w.state().undecryptable().len(), 1);
    assert_eq!(w.channel.next_deadline(), Some(w.now + GRACE));

    w.advance(GRACE / 2);
    let message = w.decrypted_text(&u, "hello");
    w.send(message);
    assert_eq!(w.take(), [format!("push s1 {id} message \"hello\"")]);
    assert!(w.state().undecryptable().is_empty());
    assert_eq!(w.channel.next_deadline(), None);

    w.advance(GRACE);
    assert!(w.trace().is_empty());
}

#[test]
fn when_the_grace_period_ends_the_sessions_are_told_it_exists_without_content() {
    let mut w = World::new();
    w.attach(S1);
    let u = w.undecryptable(BOB, R2);
    let id = w.send_undecryptable(u);
    w.mark();

    w.advance(GRACE - 1);
    assert!(w.trace().is_empty());
    w.advance(1);

    assert_eq!(w.trace(), [format!("push s1 {id} undecryptable {TOLD:?}")]);
    let push = &w.pushes(S1)[0];
    let meta: Vec<(&str, &str)> = push
        .meta
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        meta,
        [
            ("event_id", id.as_str()),
            ("kind", "undecryptable"),
            ("room_id", R2),
            ("security", mc_model::SECURITY_POINTER),
            ("sender", BOB),
            ("ts", START.0.to_string().as_str()),
            ("user", "Bob"),
        ]
    );
    assert!(w.state().undecryptable().is_empty());
}

#[test]
fn a_key_after_the_grace_period_pushes_the_event_itself() {
    let mut w = World::new();
    w.attach(S1);
    let u = w.undecryptable(ALICE, R1);
    let id = w.send_undecryptable(u.clone());
    w.advance(GRACE);
    w.mark();

    let message = w.decrypted_text(&u, "late");
    w.send(message);

    assert_eq!(w.trace(), [format!("push s1 {id} message \"late\"")]);
}

#[test]
fn a_queued_undecryptable_push_gives_its_place_to_the_decrypted_event() {
    let mut w = World::new();
    let first = w.say(ALICE, R1, "first");
    let u = w.undecryptable(ALICE, R1);
    let id = w.send_undecryptable(u.clone());
    w.advance(GRACE);
    let last = w.say(ALICE, R1, "last");
    assert_eq!(w.state().queue().len(), 3);

    let message = w.decrypted_text(&u, "middle");
    w.send(message);
    assert_eq!(w.state().queue().len(), 3);
    w.mark();
    w.attach(S1);

    assert_eq!(
        w.trace(),
        [
            format!("push s1 {first} message replayed \"first\""),
            format!("push s1 {last} message replayed \"last\""),
            format!("push s1 {id} message replayed \"middle\""),
        ]
    );
}

#[test]
fn a_strangers_or_the_identitys_own_undecryptable_event_is_dropped_and_never_told() {
    let mut w = World::new();
    w.attach(S1);
    w.mark();

    let stranger = w.undecryptable(MALLORY, R1);
    let stranger = w.send_undecryptable(stranger);
    let own = w.undecryptable(BOT, R1);
    let own = w.send_undecryptable(own);
    w.advance(GRACE);

    assert_eq!(
        w.trace(),
        [
            format!("drop {stranger} Stranger"),
            format!("drop {own} OwnEvent"),
        ]
    );
    assert!(w.state().undecryptable().is_empty());
}

#[test]
fn an_undecryptable_event_of_a_room_not_joined_is_history() {
    let mut w = World::new();
    w.attach(S1);
    w.mark();

    let u = w.undecryptable(ALICE, "!elsewhere:hs");
    let id = w.send_undecryptable(u);
    w.advance(GRACE);

    assert_eq!(w.trace(), [format!("drop {id} NotJoined")]);
}

#[test]
fn the_same_undecryptable_event_twice_is_a_duplicate_parked_or_told() {
    let mut w = World::new();
    w.attach(S1);
    let u = w.undecryptable(ALICE, R1);
    let id = w.send_undecryptable(u.clone());
    w.mark();

    w.send_undecryptable(u.clone());
    assert_eq!(w.take(), [format!("drop {id} Duplicate")]);
    assert_eq!(w.state().undecryptable().len(), 1);

    w.advance(GRACE);
    w.mark();
    w.send_undecryptable(u);
    assert_eq!(w.trace(), [format!("drop {id} Duplicate")]);
}

#[test]
fn an_undecryptable_event_after_its_decryption_is_a_duplicate() {
    let mut w = World::new();
    w.attach(S1);
    let u = w.undecryptable(ALICE, R1);
    let message = w.decrypted_text(&u, "hello");
    let id = w.send(message);
    w.mark();

    w.send_undecryptable(u);
    w.advance(GRACE);

    assert_eq!(w.trace(), [format!("drop {id} Duplicate")]);
}

#[test]
fn a_text_verdict_decrypted_late_is_judged_against_the_prompt_at_that_moment() {
    let mut w = World::new();
    w.attach(S1);
    w.pending_prompt("abcde");
    let u = w.undecryptable(ALICE, R1);
    w.send_undecryptable(u.clone());
    assert!(w.verdicts(S1).is_empty());
    w.mark();

    let verdict = w.decrypted_text(&u, "yes abcde");
    w.send(verdict);

    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Allow)]);
}

#[test]
fn a_text_verdict_decrypted_after_its_prompt_expired_answers_nothing() {
    let mut w = World::new();
    w.attach(S1);
    w.pending_prompt("abcde");
    let u = w.undecryptable(ALICE, R1);
    w.send_undecryptable(u.clone());
    w.advance(TTL);
    w.mark();

    let verdict = w.decrypted_text(&u, "yes abcde");
    let id = w.send(verdict);

    assert!(w.verdicts(S1).is_empty());
    assert!(w.trace().contains(&format!("drop {id} UnknownRequest")));
}

#[test]
fn a_parked_event_redacted_by_its_sender_is_never_told() {
    let mut w = World::new();
    w.attach(S1);
    let u = w.undecryptable(ALICE, R1);
    let id = w.send_undecryptable(u);
    w.mark();

    w.redact(ALICE, &id);
    w.advance(GRACE);

    assert_eq!(w.trace(), [format!("drop {id} RedactedBeforeDelivery")]);
    assert!(w.state().undecryptable().is_empty());
}

#[test]
fn a_parked_event_redacted_by_someone_else_is_still_told() {
    let mut w = World::new();
    w.attach(S1);
    let u = w.undecryptable(ALICE, R1);
    let id = w.send_undecryptable(u);
    let redaction = w.redact(BOB, &id);
    w.mark();

    w.advance(GRACE);

    assert_eq!(w.trace(), [format!("push s1 {id} undecryptable {TOLD:?}")]);
    assert!(w.state().log_entry(&redaction).is_some());
}

#[test]
fn an_event_under_the_same_id_from_another_sender_leaves_the_parked_one_parked() {
    let mut w = World::new();
    w.attach(S1);
    let u = w.undecryptable(ALICE, R1);
    let id = w.send_undecryptable(u.clone());
    let mut forged = w.decrypted_text(&u, "forged");
    forged.sender = BOB.into();
    w.send(forged);
    assert_eq!(w.state().undecryptable().len(), 1);
    w.mark();

    w.advance(GRACE);
    let message = w.decrypted_text(&u, "hello");
    w.send(message);

    // The forged message took the id into the log first: the real one is a duplicate.
    assert_eq!(
        w.trace(),
        [
            format!("drop {id} Duplicate"),
            format!("drop {id} Duplicate"),
        ]
    );
}

#[test]
fn the_sender_gets_a_notice_when_the_operator_enabled_it() {
    let mut w = World::configured(|c| c.undecryptable_notice = true);
    w.attach(S1);
    let u = w.undecryptable(ALICE, R1);
    let id = w.send_undecryptable(u);
    w.mark();

    w.advance(GRACE);

    assert_eq!(
        w.notices(),
        [(
            id.clone(),
            "I could not decrypt this message: no room key for it reached my device. If \
             your client sends only to verified devices, verify this device (or its \
             account's cross-signing identity), then send the message again."
                .to_owned()
        )]
    );
    assert_eq!(w.pushes(S1).len(), 1);
}

#[test]
fn no_notice_into_a_room_the_identity_left_meanwhile() {
    let mut w = World::configured(|c| c.undecryptable_notice = true);
    w.attach(S1);
    let u = w.undecryptable(ALICE, R1);
    w.send_undecryptable(u);
    let identity = w.identity.clone();
    w.input(Input::Membership {
        identity,
        room: R1.into(),
        event_id: None,
        user: BOT.into(),
        membership: mc_model::Membership::Left,
    });
    w.mark();

    w.advance(GRACE);

    assert!(w.notices().is_empty());
    assert_eq!(w.pushes(S1).len(), 1);
}

#[test]
fn a_zero_grace_period_tells_at_once() {
    let mut w = World::configured(|c| c.undecryptable_grace_ms = 0);
    w.attach(S1);
    w.mark();

    let u = w.undecryptable(ALICE, R1);
    let id = w.send_undecryptable(u);

    assert_eq!(
        w.trace(),
        [
            format!("drop {id} Undecryptable"),
            format!("push s1 {id} undecryptable {TOLD:?}"),
        ]
    );
}

#[test]
fn beyond_the_memory_the_oldest_parked_event_is_told_at_once() {
    let mut w = World::new();
    w.attach(S1);
    let first = w.undecryptable(ALICE, R1);
    let first = w.send_undecryptable(first);
    for _ in 1..UNDECRYPTABLE_MEMORY {
        let u = w.undecryptable(ALICE, R1);
        w.send_undecryptable(u);
    }
    assert_eq!(w.state().undecryptable().len(), UNDECRYPTABLE_MEMORY);
    assert!(w.pushes(S1).is_empty());
    w.mark();

    let one_more = w.undecryptable(ALICE, R1);
    let one_more = w.send_undecryptable(one_more);

    assert_eq!(
        w.trace(),
        [
            format!("drop {one_more} Undecryptable"),
            format!("push s1 {first} undecryptable {TOLD:?}"),
        ]
    );
    assert_eq!(w.state().undecryptable().len(), UNDECRYPTABLE_MEMORY);
}

#[test]
fn a_failed_undecryptable_push_is_not_sent_again_once_the_event_came_decrypted() {
    let mut w = World::new();
    w.attach(S1);
    w.hold(Kind::Push);
    let u = w.undecryptable(ALICE, R1);
    let id = w.send_undecryptable(u.clone());
    w.advance(GRACE);
    let told = w.held_of(Kind::Push)[0].id;
    let message = w.decrypted_text(&u, "hello");
    w.send(message);
    w.unhold(Kind::Push);
    w.attach(S2);
    w.mark();

    w.release(told, Some(failed()));

    assert!(w.trace().is_empty(), "{:?}", w.trace());
    assert_eq!(
        w.state().log_entry(&id).map(|e| e.sender.as_str()),
        Some(ALICE)
    );
}

#[test]
fn a_parked_event_survives_a_restart_and_is_told_after_it() {
    let mut w = World::new();
    w.attach(S1);
    let u = w.undecryptable(ALICE, R1);
    let id = w.send_undecryptable(u);
    let saved = serde_json::to_string(&w.channel).expect("the state serialises");
    w.channel = serde_json::from_str(&saved).expect("the state deserialises");
    w.restart();
    w.attach(S1);
    w.mark();

    w.advance(GRACE);

    assert_eq!(w.trace(), [format!("push s1 {id} undecryptable {TOLD:?}")]);
}

#[test]
fn a_parked_event_that_decrypts_to_a_reaction_is_handled_as_one() {
    let mut w = World::new();
    w.attach(S1);
    let hello = w.say(ALICE, R1, "hello");
    let u = w.undecryptable(ALICE, R1);
    let id = w.send_undecryptable(u.clone());
    w.mark();

    let mut reaction = w.reaction(ALICE, &hello, THUMBS_UP);
    reaction.event_id = id.clone();
    w.send_reaction(reaction);
    assert!(w.state().undecryptable().is_empty());
    w.advance(GRACE);

    let pushes = w.pushes(S1);
    assert_eq!(pushes.len(), 1, "{:?}", w.trace());
    assert_eq!(pushes[0].event_id.as_ref(), Some(&id));
    assert_eq!(pushes[0].meta("kind"), Some("reaction"));
}

#[test]
fn a_parked_event_that_decrypts_to_a_redaction_is_handled_as_one() {
    let mut w = World::new();
    w.attach(S1);
    let hello = w.say(ALICE, R1, "hello");
    let u = w.undecryptable(ALICE, R1);
    let id = w.send_undecryptable(u.clone());
    w.mark();

    let mut redaction = w.redaction(ALICE, &hello);
    redaction.event_id = id.clone();
    w.send_redaction(redaction);
    assert!(w.state().undecryptable().is_empty());
    w.advance(GRACE);

    let pushes = w.pushes(S1);
    assert_eq!(pushes.len(), 1, "{:?}", w.trace());
    assert_eq!(pushes[0].meta("kind"), Some("retraction"));
}

#[test]
fn a_parked_event_that_decrypts_to_no_input_is_dropped_as_such_and_never_told() {
    let mut w = World::new();
    w.attach(S1);
    let u = w.undecryptable(ALICE, R1);
    let id = w.send_undecryptable(u.clone());
    w.mark();

    let identity = w.identity.clone();
    w.input(Input::Unhandled {
        identity,
        room: R1.into(),
        event_id: Some(id.clone()),
        sender: Some(ALICE.into()),
        what: "m.sticker".into(),
    });
    w.advance(GRACE);

    assert_eq!(
        w.trace(),
        [format!("drop {id} Unhandled {{ what: \"m.sticker\" }}")]
    );
}

#[test]
fn a_decrypted_event_takes_one_place_in_the_delivery_log() {
    let mut w = World::configured(|c| c.log_cap = 3);
    w.attach(S1);
    let first = w.say(ALICE, R1, "first");
    let u = w.undecryptable(ALICE, R1);
    let id = w.send_undecryptable(u.clone());
    w.advance(GRACE);
    let message = w.decrypted_text(&u, "decrypted");
    w.send(message);

    w.say(ALICE, R1, "second");
    w.say(ALICE, R1, "third");

    // Four events in a log of three: the oldest goes, the decrypted one stays.
    assert!(w.state().log_entry(&first).is_none());
    assert!(w.state().log_entry(&id).is_some());
}

#[test]
fn a_state_saved_before_the_grace_settings_existed_gets_their_defaults() {
    let mut saved = serde_json::to_value(work_config()).expect("a config serialises");
    let fields = saved.as_object_mut().expect("an object");
    assert!(fields.remove("undecryptable_grace_ms").is_some());
    assert!(fields.remove("undecryptable_notice").is_some());

    let loaded: mc_model::IdentityConfig =
        serde_json::from_value(saved).expect("an older config loads");

    assert_eq!(loaded.undecryptable_grace_ms, GRACE);
    assert!(!loaded.undecryptable_notice);
    assert_eq!(loaded, work_config());
}
