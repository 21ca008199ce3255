//! Delivery: live sessions, the queue, replay once, the budget, the cap, push
//! failures, acknowledgements and duplicates.

use crate::harness::*;
use mc_model::{LogEntry, Outcome, Record, SessionPhase};

fn contents(pushes: &[Pushed]) -> Vec<String> {
    pushes.iter().map(|p| p.content.clone()).collect()
}

#[test]
fn two_live_sessions_each_receive_each_chat_event_once() {
    let mut w = World::new();
    w.attach(S1);
    w.attach(S2);
    w.mark();

    let one = w.say(ALICE, R1, "one");
    let two = w.say(BOB, R2, "two");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("push s1 {one} message \"one\""),
            format!("push s2 {one} message \"one\""),
            format!("push s1 {two} message \"two\""),
            format!("push s2 {two} message \"two\""),
        ]
    );
}

#[test]
fn messages_while_no_session_is_live_are_replayed_oldest_first_to_the_next_session() {
    let mut w = World::new();
    let one = w.say(ALICE, R1, "one");
    let two = w.say(BOB, R1, "two");
    let three = w.say(ALICE, R2, "three");
    assert_eq!(w.state().queue().len(), 3);
    w.mark();

    w.attach(S1);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("push s1 {one} message replayed \"one\""),
            format!("push s1 {two} message replayed \"two\""),
            format!("push s1 {three} message replayed \"three\""),
        ]
    );
    assert!(w
        .pushes(S1)
        .iter()
        .all(|p| p.meta("replayed") == Some("true")));
    assert!(w.state().queue().is_empty());
}

#[test]
fn a_replayed_push_keeps_its_original_meta() {
    let mut w = World::new();
    let one = w.say(ALICE, R1, "one");
    w.mark();

    w.attach(S1);
    w.drive();

    let push = &w.pushes(S1)[0];
    let mut expected: std::collections::BTreeMap<String, String> = [
        ("kind", "message"),
        ("room_id", R1),
        ("event_id", one.as_str()),
        ("sender", ALICE),
        ("user", "Alice"),
        ("ts", "1700000000000"),
        ("msgtype", "m.text"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    expected.insert("replayed".into(), "true".into());
    // The session's first push: it carries the security pointer too.
    expected.insert("security".into(), mc_model::SECURITY_POINTER.into());
    assert_eq!(push.meta, expected);
}

#[test]
fn a_second_session_attaching_gets_nothing_already_replayed() {
    let mut w = World::new();
    w.say(ALICE, R1, "one");
    w.attach(S1);
    w.mark();

    w.attach(S2);
    w.drive();

    assert!(w.trace().is_empty());
}

#[test]
fn re_attaching_gets_no_duplicates() {
    let mut w = World::new();
    w.say(ALICE, R1, "queued");
    w.attach(S1);
    w.say(ALICE, R1, "live");
    w.detach(S1);
    w.mark();

    w.attach(S1);
    w.drive();

    assert!(w.trace().is_empty());
}

#[test]
fn a_message_while_every_session_is_detached_is_replayed_on_re_attach() {
    let mut w = World::new();
    w.attach(S1);
    w.detach(S1);
    let m = w.say(ALICE, R1, "while away");
    w.mark();

    w.attach(S1);
    w.drive();

    assert_eq!(
        w.trace(),
        [format!("push s1 {m} message replayed \"while away\"")]
    );
}

#[test]
fn acknowledged_messages_are_not_replayed() {
    let mut w = World::new();
    w.attach(S1);
    w.detach(S1);
    let one = w.say(ALICE, R1, "one");
    let two = w.say(ALICE, R1, "two");
    let three = w.say(ALICE, R1, "three");
    w.ack(S1, &two);
    w.mark();

    w.attach(S2);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("push s2 {one} message replayed \"one\""),
            format!("push s2 {three} message replayed \"three\""),
        ]
    );
    assert!(matches!(
        w.state().log_entry(&two),
        Some(LogEntry {
            record: Record::Pushed { acked: true, .. },
            ..
        })
    ));
}

#[test]
fn an_acknowledgement_from_the_identitys_tools_outside_any_session_counts() {
    // No channel session ever attached: the agent read the room with a tool and
    // acknowledged what it handled; only the rest is replayed.
    let mut w = World::new();
    let one = w.say(ALICE, R1, "one");
    let two = w.say(ALICE, R1, "two");
    w.ack_by_tool(&one);
    w.ack_by_tool(&ev("$never"));
    w.mark();

    w.attach(S1);
    w.drive();

    assert_eq!(
        w.trace(),
        [format!("push s1 {two} message replayed \"two\"")]
    );
    assert!(matches!(
        w.state().log_entry(&one),
        Some(LogEntry {
            record: Record::Pushed { acked: true, .. },
            ..
        })
    ));
}

#[test]
fn an_acknowledgement_is_taken_with_its_own_effect_and_nothing_else() {
    let mut w = World::new();
    w.attach(S1);
    let m = w.say(ALICE, R1, "one");
    w.mark();

    w.ack(S1, &m);
    w.drive();

    assert_eq!(w.trace(), [format!("acked {m}")]);
}

#[test]
fn an_acknowledgement_from_an_unknown_session_or_of_an_unknown_event_is_dropped() {
    let mut w = World::new();
    w.attach(S1);
    let m = w.say(ALICE, R1, "one");
    let verdict = w.say(ALICE, R1, "yes qwert");
    w.mark();

    w.ack(S2, &m);
    w.ack(S1, &ev("$never"));
    w.ack(S1, &verdict);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("drop {m} UnknownSession"),
            "drop $never UnknownEvent".to_owned(),
            format!("drop {verdict} UnknownEvent"),
        ]
    );
}

#[test]
fn with_a_replay_budget_of_two_the_newest_two_follow_a_cut_notice() {
    let mut w = World::configured(|c| c.replay_budget = 2);
    let ids: Vec<_> = (1..=5)
        .map(|n| w.say(ALICE, R1, &format!("m{n}")))
        .collect();
    w.mark();

    w.attach(S1);
    w.drive();

    let cut = "3 older events arrived while no session was attached and are not replayed; \
               read them from the room if they matter.";
    assert_eq!(
        w.trace(),
        [
            "drop - ReplayCut { omitted: 3 }".to_owned(),
            format!("push s1 - replay_cut {cut:?}"),
            format!("push s1 {} message replayed \"m4\"", ids[3]),
            format!("push s1 {} message replayed \"m5\"", ids[4]),
        ]
    );
    let notice = &w.pushes(S1)[0];
    assert_eq!(notice.event_id, None);
    assert_eq!(
        notice.meta,
        [
            ("kind", "replay_cut"),
            ("replay_omitted", "3"),
            ("security", mc_model::SECURITY_POINTER)
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
    );
}

#[test]
fn a_queue_exactly_at_the_replay_budget_is_replayed_whole() {
    let mut w = World::configured(|c| c.replay_budget = 2);
    w.say(ALICE, R1, "m1");
    w.say(ALICE, R1, "m2");
    w.mark();

    w.attach(S1);
    w.drive();

    assert_eq!(contents(&w.pushes(S1)), ["m1", "m2"]);
    assert!(w.drops().is_empty());
}

#[test]
fn a_failed_replay_cut_notice_is_not_requeued() {
    let mut w = World::configured(|c| c.replay_budget = 1);
    w.say(ALICE, R1, "m1");
    let m2 = w.say(ALICE, R1, "m2");
    w.hold(Kind::Push);
    w.attach(S1);
    let held = w.held_of(Kind::Push);
    assert_eq!(held.len(), 2);
    w.mark();

    w.release(held[0].id, Some(failed()));
    w.drive();

    assert!(w.trace().is_empty());
    assert!(w.state().queue().is_empty());
    assert_eq!(w.state().sessions()[&sid(S1)], SessionPhase::Detached);

    w.release(held[1].id, Some(failed()));
    assert_eq!(
        w.state()
            .queue()
            .iter()
            .map(|q| q.event_id.clone())
            .collect::<Vec<_>>(),
        [m2]
    );
}

#[test]
fn at_the_queue_cap_the_oldest_is_dropped() {
    let mut w = World::configured(|c| c.queue_cap = 2);
    let one = w.say(ALICE, R1, "one");
    w.say(ALICE, R1, "two");
    w.mark();

    w.say(ALICE, R1, "three");
    w.drive();
    assert_eq!(w.take(), [format!("drop {one} QueueFull")]);
    w.attach(S1);
    w.drive();

    assert_eq!(contents(&w.pushes(S1)), ["two", "three"]);
}

#[test]
fn a_queue_exactly_at_its_cap_drops_nothing() {
    let mut w = World::configured(|c| c.queue_cap = 2);
    w.say(ALICE, R1, "one");
    w.mark();

    w.say(ALICE, R1, "two");
    w.drive();

    assert!(w.trace().is_empty());
    assert_eq!(w.state().queue().len(), 2);
}

#[test]
fn a_failed_push_goes_to_another_live_session() {
    let mut w = World::new();
    w.attach(S1);
    w.hold(Kind::Push);
    let m = w.say(ALICE, R1, "hello");
    let push = w.held_of(Kind::Push)[0].id;
    w.unhold(Kind::Push);
    w.attach(S2);
    w.mark();

    w.release(push, Some(failed()));
    w.drive();

    assert_eq!(w.trace(), [format!("push s2 {m} message \"hello\"")]);
    assert_eq!(w.state().sessions()[&sid(S1)], SessionPhase::Detached);
    assert_eq!(w.state().sessions()[&sid(S2)], SessionPhase::Live);
}

#[test]
fn a_failed_push_with_no_other_live_session_is_queued_for_the_next() {
    let mut w = World::new();
    w.attach(S1);
    w.fail_next(Kind::Push);
    let m = w.say(ALICE, R1, "hello");
    assert_eq!(w.state().queue().len(), 1);
    assert_eq!(w.state().sessions()[&sid(S1)], SessionPhase::Detached);
    w.mark();

    w.attach(S2);
    w.drive();

    assert_eq!(
        w.trace(),
        [format!("push s2 {m} message replayed \"hello\"")]
    );
}

#[test]
fn a_failed_push_is_replayed_to_the_same_session_when_it_comes_back() {
    let mut w = World::new();
    w.attach(S1);
    w.fail_next(Kind::Push);
    let m = w.say(ALICE, R1, "hello");
    w.mark();

    w.attach(S1);
    w.drive();

    assert_eq!(
        w.trace(),
        [format!("push s1 {m} message replayed \"hello\"")]
    );
}

#[test]
fn a_failed_push_that_another_session_received_is_not_sent_again() {
    let mut w = World::new();
    w.attach(S1);
    w.attach(S2);
    w.fail_next(Kind::Push);
    w.mark();

    let m = w.say(ALICE, R1, "hello");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("push s1 {m} message \"hello\""),
            format!("push s2 {m} message \"hello\""),
        ]
    );
    assert!(w.state().queue().is_empty());
}

#[test]
fn a_failed_push_of_an_acknowledged_event_is_not_requeued() {
    let mut w = World::new();
    w.attach(S1);
    w.hold(Kind::Push);
    let m = w.say(ALICE, R1, "hello");
    let push = w.held_of(Kind::Push)[0].id;
    w.ack(S1, &m);
    w.mark();

    w.release(push, Some(failed()));
    w.attach(S2);
    w.drive();

    assert!(w.trace().is_empty());
    assert!(w.state().queue().is_empty());
}

#[test]
fn a_failed_replay_goes_back_to_the_queue_and_is_replayed_once_more() {
    let mut w = World::new();
    let m = w.say(ALICE, R1, "hello");
    w.fail_next(Kind::Push);
    w.attach(S1);
    w.mark();

    w.attach(S2);
    w.drive();

    let pushes = w.pushes(S2);
    assert_eq!(
        w.trace(),
        [format!("push s2 {m} message replayed \"hello\"")]
    );
    assert_eq!(pushes[0].meta("replayed"), Some("true"));
}

#[test]
fn failed_pushes_go_back_to_the_queue_in_arrival_order() {
    let mut w = World::new();
    let one = w.say(ALICE, R1, "one");
    w.hold(Kind::Push);
    w.attach(S1);
    let two = w.say(ALICE, R1, "two");
    w.detach(S1);
    let three = w.say(ALICE, R1, "three");
    let held = w.held_of(Kind::Push);
    assert_eq!(held.len(), 2);
    w.unhold(Kind::Push);
    w.release(held[0].id, Some(failed()));
    w.release(held[1].id, Some(failed()));
    let queued = w.queued_ids();
    assert_eq!(queued, [one.clone(), two.clone(), three.clone()]);
    w.mark();

    w.attach(S2);
    w.drive();

    assert_eq!(contents(&w.pushes(S2)), ["one", "two", "three"]);
}

#[test]
fn a_failed_push_goes_back_ahead_of_newer_queued_events() {
    let mut w = World::new();
    w.attach(S1);
    w.hold(Kind::Push);
    w.say(ALICE, R1, "one");
    w.detach(S1);
    w.say(ALICE, R1, "two");
    let push = w.held_of(Kind::Push)[0].id;
    w.release(push, Some(failed()));
    w.mark();

    w.unhold(Kind::Push);
    w.attach(S2);
    w.drive();

    assert_eq!(contents(&w.pushes(S2)), ["one", "two"]);
}

#[test]
fn a_successful_push_is_not_requeued() {
    let mut w = World::new();
    w.attach(S1);
    w.hold(Kind::Push);
    w.say(ALICE, R1, "one");
    let push = w.held_of(Kind::Push)[0].id;
    w.detach(S1);
    w.mark();

    w.release(push, Some(Outcome::Sent));
    w.attach(S2);
    w.drive();

    assert!(w.trace().is_empty());
}

#[test]
fn a_duplicate_event_id_is_dropped() {
    let mut w = World::new();
    w.attach(S1);
    let m = w.text(ALICE, R1, "hello");
    w.send(m.clone());
    w.mark();

    w.send(m.clone());
    let mut other = w.reaction(ALICE, &ev("$x"), "🎉");
    other.event_id = m.event_id.clone();
    w.send_reaction(other);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("drop {} Duplicate", m.event_id),
            format!("drop {} Duplicate", m.event_id),
        ]
    );
}

#[test]
fn verdict_shaped_messages_are_never_queued_or_replayed() {
    let mut w = World::new();
    w.say(ALICE, R1, "yes qwert");
    w.say(BOB, R1, "no qwert");
    let chat = w.say(BOB, R1, "chat");
    w.mark();

    w.attach(S1);
    w.drive();

    assert_eq!(
        w.trace(),
        [format!("push s1 {chat} message replayed \"chat\"")]
    );
}

#[test]
fn a_redaction_of_a_queued_message_removes_it_and_nothing_is_replayed() {
    let mut w = World::new();
    let m = w.say(ALICE, R1, "oops");
    let kept = w.say(ALICE, R1, "kept");
    w.mark();

    w.redact(ALICE, &m);
    assert_eq!(w.take(), [format!("drop {m} RedactedBeforeDelivery")]);
    w.attach(S1);
    w.drive();

    assert_eq!(
        w.trace(),
        [format!("push s1 {kept} message replayed \"kept\"")]
    );
}

#[test]
fn a_redaction_of_a_pushed_message_reaches_every_live_session() {
    let mut w = World::new();
    w.attach(S1);
    let m = w.say(ALICE, R1, "oops");
    w.attach(S2);
    w.mark();

    let x = w.redact(ALICE, &m);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("push s1 {x} retraction \"retracted an earlier event (see redacts)\""),
            format!("push s2 {x} retraction \"retracted an earlier event (see redacts)\""),
        ]
    );
}

#[test]
fn a_redaction_of_a_pushed_message_is_queued_when_no_one_is_live() {
    let mut w = World::new();
    w.attach(S1);
    let m = w.say(ALICE, R1, "oops");
    w.detach(S1);
    let x = w.redact(ALICE, &m);
    w.mark();

    w.attach(S1);
    w.drive();

    assert_eq!(
        w.trace(),
        [format!(
            "push s1 {x} retraction replayed \"retracted an earlier event (see redacts)\""
        )]
    );
}

#[test]
fn the_delivery_log_forgets_the_oldest_events_beyond_its_cap() {
    let mut w = World::configured(|c| c.log_cap = 2);
    w.attach(S1);
    let one = w.text(ALICE, R1, "one");
    w.send(one.clone());
    let two = w.text(ALICE, R1, "two");
    w.send(two.clone());
    let three = w.text(ALICE, R1, "three");
    w.send(three.clone());
    assert!(w.state().log_entry(&one.event_id).is_none());
    assert!(w.state().log_entry(&two.event_id).is_some());
    w.mark();

    w.send(three.clone());
    w.send(one.clone());
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("drop {} Duplicate", three.event_id),
            format!("push s1 {} message \"one\"", one.event_id),
        ]
    );
}

#[test]
fn the_delivery_log_records_arrival_order_sender_and_sessions() {
    let mut w = World::new();
    w.attach(S1);
    w.attach(S2);
    let one = w.say(ALICE, R1, "one");
    let two = w.say(BOB, R1, "two");
    let verdict = w.say(ALICE, R1, "yes qwert");
    let not_approver = w.say(BOB, R1, "yes qwert");

    let entry = w.state().log_entry(&one).unwrap().clone();
    assert_eq!(entry.sender, user(ALICE));
    assert_eq!(
        entry.record,
        Record::Pushed {
            kind: mc_model::render::PushKind::Message,
            room: Some(room(R1)),
            delivered: [sid(S1), sid(S2)].into(),
            acked: false,
            redacted: false,
        }
    );
    let seqs: Vec<u64> = [&one, &two, &verdict, &not_approver]
        .iter()
        .map(|e| w.state().log_entry(e).unwrap().seq)
        .collect();
    assert_eq!(seqs, [0, 1, 2, 3]);
    assert_eq!(
        w.state().log_entry(&verdict).unwrap().record,
        Record::Verdict
    );
    assert_eq!(
        w.state().log_entry(&not_approver).unwrap().record,
        Record::NotPushed
    );
}

#[test]
fn a_vote_is_logged_as_a_vote() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let vote = w.react(ALICE, &prompt, THUMBS_UP);
    assert_eq!(w.state().log_entry(&vote).unwrap().record, Record::Vote);
    assert_eq!(w.state().log_entry(&vote).unwrap().sender, user(ALICE));
}

#[test]
fn detaching_an_unknown_session_is_dropped() {
    let mut w = World::new();
    w.mark();

    w.detach(S1);
    w.drive();

    assert_eq!(w.trace(), ["drop - UnknownSession"]);
    assert!(w.state().sessions().is_empty());
}

#[test]
fn attach_and_detach_track_each_session() {
    let mut w = World::new();
    w.attach(S1);
    w.attach(S2);
    w.detach(S1);

    let sessions: Vec<_> = w
        .state()
        .sessions()
        .iter()
        .map(|(s, st)| (s.to_string(), *st))
        .collect();
    assert_eq!(
        sessions,
        [
            ("s1".to_owned(), SessionPhase::Detached),
            ("s2".to_owned(), SessionPhase::Live)
        ]
    );
}

#[test]
fn a_queued_event_carries_its_notification() {
    let mut w = World::new();
    let m = w.say(ALICE, R1, "one");
    let q = &w.state().queue()[0];
    assert_eq!(q.event_id, m);
    assert_eq!(q.seq, 0);
    assert_eq!(q.notification.content, "one");
    assert_eq!(q.notification.meta.get(mc_model::MetaKey::Replayed), None);
}

#[test]
fn a_queued_event_the_log_forgets_leaves_the_queue_visibly() {
    let mut w = World::configured(|c| c.log_cap = 2);
    let first = w.say(ALICE, R1, "one");
    let second = w.say(ALICE, R1, "two");
    w.mark();

    let verdict = w.say(BOB, R1, "yes qwert");
    w.drive();

    assert_eq!(
        w.take(),
        [
            format!("drop {first} QueueFull"),
            format!("drop {verdict} NotApprover"),
        ]
    );
    let queued = w.queued_ids();
    assert_eq!(queued, [second]);
}

#[test]
fn a_redaction_of_a_queued_event_the_log_forgot_removes_nothing_twice() {
    let mut w = World::configured(|c| c.log_cap = 2);
    let first = w.say(ALICE, R1, "one");
    w.say(BOB, R1, "yes qwert");
    w.say(BOB, R1, "no qwert");
    assert!(w.state().queue().is_empty());
    w.mark();

    let redaction = w.redact(ALICE, &first);
    w.attach(S1);
    w.drive();

    assert_eq!(w.trace(), [format!("drop {redaction} RedactionOfUnpushed")]);
}

#[test]
fn a_push_failing_after_its_session_attached_again_is_sent_again_to_it() {
    let mut w = World::new();
    w.attach(S1);
    w.hold(Kind::Push);
    let m = w.say(ALICE, R1, "one");
    let old = w.held_of(Kind::Push)[0].id;
    w.unhold(Kind::Push);
    w.detach(S1);
    w.attach(S1);
    w.mark();

    w.release(old, Some(failed()));
    w.drive();

    assert_eq!(w.trace(), [format!("push s1 {m} message \"one\"")]);
    assert_eq!(w.state().sessions()[&sid(S1)], SessionPhase::Live);
}

#[test]
fn a_failed_push_of_a_redacted_event_is_not_requeued() {
    let mut w = World::new();
    w.attach(S1);
    w.hold(Kind::Push);
    let m = w.say(ALICE, R1, "oops");
    w.redact(ALICE, &m);
    let held = w.held_of(Kind::Push);
    assert_eq!(held.len(), 2, "the message and its retraction");
    w.unhold(Kind::Push);
    w.release(held[0].id, Some(failed()));
    w.release(held[1].id, None);
    w.mark();

    w.attach(S2);
    w.drive();

    assert!(w.trace().is_empty());
    assert!(w.state().queue().is_empty());
}
