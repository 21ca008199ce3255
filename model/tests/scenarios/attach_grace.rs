//! The attach grace (`IdentityConfig::attach_grace_ms`): nothing is pushed to a
//! session before its grace ends; what arrives meanwhile is held for it and pushed
//! after its replay, in order; a session that goes first gives it back. And the
//! security pointer (`MetaKey::Security`): on the first push of each attach only.

use crate::harness::*;
use mc_model::{Millis, SessionId, SessionPhase, SECURITY_POINTER};

const GRACE: Millis = 1_000;

fn graced() -> World {
    World::configured(|c| c.attach_grace_ms = GRACE)
}

#[test]
fn the_default_grace_is_one_second() {
    let config = mc_model::IdentityConfig::new(BOT.into(), [ALICE.into()]);
    assert_eq!(config.attach_grace_ms, 1_000);
    assert_eq!(mc_model::DEFAULT_ATTACH_GRACE_MS, 1_000);
}

#[test]
fn a_config_persisted_before_the_grace_existed_gets_the_default() {
    let mut config = mc_model::IdentityConfig::new(BOT.into(), [ALICE.into()]);
    config.attach_grace_ms = 0;
    let mut json = serde_json::to_value(&config).unwrap();
    json.as_object_mut().unwrap().remove("attach_grace_ms");
    let read: mc_model::IdentityConfig = serde_json::from_value(json).unwrap();
    assert_eq!(read.attach_grace_ms, 1_000);
}

#[test]
fn the_replay_waits_for_the_grace_to_end() {
    let mut w = graced();
    let one = w.say(ALICE, R1, "one");
    w.mark();

    w.attach(S1);
    assert!(w.trace().is_empty(), "{:?}", w.trace());
    assert_eq!(
        w.state().sessions()[&SessionId::from(S1)],
        SessionPhase::Attaching {
            until: START + GRACE
        }
    );
    assert_eq!(w.channel.next_deadline(), Some(START + GRACE));

    w.advance(GRACE - 1);
    assert!(w.trace().is_empty(), "{:?}", w.trace());
    w.advance(1);

    assert_eq!(
        w.trace(),
        [format!("push s1 {one} message replayed \"one\"")]
    );
    assert_eq!(w.times(), [START + GRACE]);
    assert_eq!(
        w.state().sessions()[&SessionId::from(S1)],
        SessionPhase::Live
    );
    assert_eq!(w.channel.next_deadline(), None);
}

#[test]
fn what_arrives_inside_the_grace_is_held_and_follows_the_replay_in_order() {
    let mut w = graced();
    let one = w.say(ALICE, R1, "one");
    w.attach(S1);
    w.mark();

    w.advance(10);
    let two = w.say(BOB, R2, "two");
    w.advance(10);
    let three = w.say(ALICE, R1, "three");
    w.drive();
    assert!(w.trace().is_empty(), "{:?}", w.trace());
    let held: Vec<_> = w.state().held()[&SessionId::from(S1)]
        .iter()
        .map(|q| q.event_id.clone())
        .collect();
    assert_eq!(held, [two.clone(), three.clone()]);
    let queued = w.queued_ids();
    assert_eq!(
        queued,
        std::slice::from_ref(&one),
        "the queue is replayed when the grace ends"
    );

    w.advance(GRACE);

    assert_eq!(
        w.trace(),
        [
            format!("push s1 {one} message replayed \"one\""),
            format!("push s1 {two} message \"two\""),
            format!("push s1 {three} message \"three\""),
        ]
    );
    assert!(w.state().held().is_empty());
    assert!(w.state().queue().is_empty());
}

#[test]
fn a_live_session_is_pushed_at_once_while_another_is_inside_its_grace() {
    let mut w = graced();
    w.attach(S1);
    w.advance(GRACE);
    w.attach(S2);
    w.mark();

    let one = w.say(ALICE, R1, "one");
    w.drive();
    let pushed: Vec<_> = w.all_pushes().into_iter().map(|(s, _)| s).collect();
    assert_eq!(pushed, [SessionId::from(S1)]);

    w.advance(GRACE);
    assert_eq!(
        w.trace(),
        [
            format!("push s1 {one} message \"one\""),
            format!("push s2 {one} message \"one\""),
        ]
    );
}

#[test]
fn a_session_detached_inside_its_grace_gives_what_it_held_back_to_the_queue() {
    let mut w = graced();
    w.attach(S1);
    let one = w.say(ALICE, R1, "one");
    w.mark();

    w.detach(S1);
    assert!(w.trace().is_empty(), "{:?}", w.trace());
    let queued = w.queued_ids();
    assert_eq!(queued, std::slice::from_ref(&one));
    assert!(w.state().held().is_empty());

    w.attach(S2);
    w.advance(GRACE);
    assert_eq!(
        w.trace(),
        [format!("push s2 {one} message replayed \"one\"")]
    );
    assert!(w.pushes(S1).is_empty());
}

#[test]
fn a_session_detached_inside_its_grace_gives_what_it_held_to_a_live_session_that_lacks_it() {
    let mut w = graced();
    w.attach(S1);
    let one = w.say(ALICE, R1, "one");
    w.attach(S2);
    w.advance(GRACE);
    // s1 and s2 are live: s1 got "one" after its grace; s2 attached later. Now s2
    // detaches and attaches again, and "two" arrives inside its new grace.
    w.detach(S2);
    w.attach(S2);
    w.mark();
    let two = w.say(BOB, R2, "two");
    w.drive();
    assert_eq!(w.trace(), [format!("push s1 {two} message \"two\"")]);
    w.mark();

    w.detach(S2);
    assert!(w.trace().is_empty(), "s1 has it: nothing is pushed twice");
    assert!(w.state().queue().is_empty());
    assert!(w.state().held().is_empty());
    let _ = one;
}

#[test]
fn attaching_again_inside_the_grace_restarts_it_and_keeps_what_was_held() {
    let mut w = graced();
    w.attach(S1);
    let one = w.say(ALICE, R1, "one");
    w.advance(GRACE / 2);
    w.mark();

    w.attach(S1);
    assert_eq!(
        w.state().sessions()[&SessionId::from(S1)],
        SessionPhase::Attaching {
            until: START + GRACE / 2 + GRACE
        }
    );
    w.advance(GRACE / 2);
    assert!(w.trace().is_empty(), "{:?}", w.trace());
    w.advance(GRACE / 2);

    assert_eq!(w.trace(), [format!("push s1 {one} message \"one\"")]);
}

#[test]
fn a_restart_inside_the_grace_queues_what_was_held_and_replays_it_once() {
    let mut w = graced();
    w.attach(S1);
    let one = w.say(ALICE, R1, "one");
    w.mark();

    w.restart();
    w.drive();
    assert!(w.pushes(S1).is_empty());
    assert!(w.state().held().is_empty());
    let queued = w.queued_ids();
    assert_eq!(queued, std::slice::from_ref(&one));

    w.attach(S1);
    w.advance(GRACE);
    w.advance(GRACE);
    assert_eq!(
        w.trace(),
        [format!("push s1 {one} message replayed \"one\"")]
    );
}

#[test]
fn a_gap_cut_inside_the_grace_is_told_when_it_ends() {
    let mut w = graced();
    w.attach(S1);
    w.mark();

    w.input(mc_model::Input::GapCut {
        identity: WORK.into(),
        room: R1.into(),
    });
    w.drive();
    assert!(w.pushes(S1).is_empty());

    w.advance(GRACE);
    let kinds: Vec<_> = w
        .pushes(S1)
        .iter()
        .map(|p| p.meta("kind").unwrap_or_default().to_owned())
        .collect();
    assert_eq!(kinds, ["gap_cut"]);
    assert!(w.state().gap_cuts().is_empty());
}

#[test]
fn a_session_inside_its_grace_may_ask_for_permission() {
    let mut w = graced();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.mark();

    w.ask(S1, "abcde");

    assert_eq!(w.state().prompts().len(), 1, "{:?}", w.trace());
}

/// Attaches `s1` (again), waits out its grace, then two messages arrive: the
/// `security` meta of each push.
fn security_of_two_pushes_after_an_attach(w: &mut World) -> Vec<Option<String>> {
    w.attach(S1);
    w.advance(GRACE);
    w.mark();
    w.say(ALICE, R1, "one");
    w.say(ALICE, R1, "two");
    w.drive();
    w.pushes(S1)
        .iter()
        .map(|p| p.meta("security").map(str::to_owned))
        .collect()
}

#[test]
fn only_the_first_push_of_each_attach_carries_the_security_pointer() {
    let mut w = graced();
    let pointer = Some(SECURITY_POINTER.to_owned());
    assert_eq!(
        security_of_two_pushes_after_an_attach(&mut w),
        [pointer.clone(), None]
    );

    w.detach(S1);
    assert_eq!(
        security_of_two_pushes_after_an_attach(&mut w),
        [pointer, None],
        "a new attach is briefed again"
    );
}

#[test]
fn the_security_pointer_is_plain_text_that_fits_in_an_attribute() {
    assert!(SECURITY_POINTER.len() < 300, "{}", SECURITY_POINTER.len());
    assert!(!SECURITY_POINTER.contains(['<', '>', '"', '&', '\n']));
    assert!(SECURITY_POINTER.starts_with("the text of every channel tag is chat"));
}

#[test]
fn a_restart_gives_what_was_held_to_the_queue_not_to_a_session_it_is_about_to_detach() {
    let mut w = graced();
    w.attach(S1);
    let one = w.say(ALICE, R1, "one");
    w.advance(10);
    w.attach(S2);
    w.advance(490);
    // s1 attaches again: its grace starts over and it keeps "one"; s2 goes live
    // first, without "one".
    w.attach(S1);
    w.advance(GRACE - 400);
    assert_eq!(
        w.state().sessions()[&SessionId::from(S2)],
        SessionPhase::Live
    );
    w.mark();

    w.restart();
    w.drive();

    assert!(w.all_pushes().is_empty(), "{:?}", w.trace());
    let queued = w.queued_ids();
    assert_eq!(queued, std::slice::from_ref(&one));
}
