//! Identities are isolated, the config is the operator's, and time only moves on.

use crate::harness::*;
use mc_model::{Behavior, Channel, Effect, EffectId, Input, SessionPhase};

#[test]
fn each_identitys_events_reach_only_its_own_sessions() {
    let mut w = World::two_identities();
    w.attach(S1);
    w.as_identity(HOME, |w| w.attach(H1));
    w.mark();

    let work = w.say(ALICE, R1, "for work");
    let home = w.as_identity(HOME, |w| w.say(ALICE, HOME_ROOM, "for home"));
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("push s1 {work} message \"for work\""),
            format!("home: push h1 {home} message \"for home\""),
        ]
    );
}

#[test]
fn an_identitys_queue_is_replayed_only_to_its_own_sessions() {
    let mut w = World::two_identities();
    let home = w.as_identity(HOME, |w| w.say(ALICE, HOME_ROOM, "for home"));
    w.mark();

    w.attach(S1);
    w.as_identity(HOME, |w| w.attach(H1));
    w.drive();

    assert_eq!(
        w.trace(),
        [format!(
            "home: push h1 {home} message replayed \"for home\""
        )]
    );
}

#[test]
fn a_verdict_in_one_identity_never_answers_anothers_prompt() {
    let mut w = World::two_identities();
    w.as_identity(HOME, |w| {
        w.attach(H1);
        w.ask(H1, "abcde");
    });
    w.pending_prompt("qwert");

    let yes = w.say(ALICE, R1, "yes abcde");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("notice {yes} {:?}", unknown_request_notice("abcde")),
            format!("drop {yes} UnknownRequest"),
        ]
    );
    let home = w.channel.identity(&identity(HOME)).unwrap();
    assert!(home.prompts()[0].phase.is_answerable());
}

#[test]
fn the_same_person_approves_in_each_identity_separately() {
    let mut w = World::two_identities();
    w.as_identity(HOME, |w| {
        w.attach(H1);
        w.ask(H1, "abcde");
    });
    w.pending_prompt("abcde");

    w.as_identity(HOME, |w| w.say(ALICE, HOME_ROOM, "no abcde"));
    w.drive();

    assert_eq!(w.verdicts(H1), [("abcde".to_owned(), Behavior::Deny)]);
    assert!(w.verdicts(S1).is_empty());
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn a_session_of_one_identity_cannot_acknowledge_or_ask_in_another() {
    let mut w = World::two_identities();
    w.attach(S1);
    let home = w.as_identity(HOME, |w| w.say(ALICE, HOME_ROOM, "for home"));
    w.mark();

    w.as_identity(HOME, |w| {
        w.ack(S1, &home);
        w.ask(S1, "abcde");
    });
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("home: drop {home} UnknownSession"),
            "home: drop - UnknownSession".to_owned(),
        ]
    );
    let home_state = w.channel.identity(&identity(HOME)).unwrap();
    assert!(home_state.prompts().is_empty());
    assert_eq!(home_state.queue().len(), 1);
}

#[test]
fn an_input_for_an_identity_never_added_is_dropped() {
    let mut w = World::new();
    w.mark();

    w.as_identity("nobody", |w| {
        w.attach(S1);
        w.say(ALICE, R1, "hello");
    });
    w.drive();

    let drops: Vec<_> = w
        .effects()
        .into_iter()
        .map(|e| match e {
            Effect::Dropped {
                identity,
                event_id,
                reason,
            } => (identity.map(|i| i.to_string()), event_id, reason),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        drops,
        [
            (
                Some("nobody".to_owned()),
                None,
                mc_model::DropReason::UnknownIdentity
            ),
            (
                Some("nobody".to_owned()),
                None,
                mc_model::DropReason::UnknownIdentity
            ),
        ]
    );
    assert!(w.state().sessions().is_empty());
}

#[test]
fn the_channel_lists_its_identities_and_nothing_else() {
    let w = World::two_identities();
    let names: Vec<_> = w.channel.identities().map(|(i, _)| i.to_string()).collect();
    assert_eq!(names, ["home", "work"]);
    assert_eq!(
        w.channel.identity(&identity(HOME)).unwrap().config(),
        &home_config()
    );
    assert!(w.channel.identity(&identity("nobody")).is_none());
}

#[test]
fn no_input_changes_an_identitys_config() {
    let mut w = World::two_identities();
    let before: Vec<_> = w
        .channel
        .identities()
        .map(|(i, s)| (i.clone(), s.config().clone()))
        .collect();

    // Every kind of input, from everyone; the harness also compares the configs
    // around each single input.
    w.attach(S1);
    w.attach(S2);
    w.say(ALICE, R1, "hello");
    w.say(MALLORY, R1, "add me to allowed_senders");
    w.say(BOB, R2, "yes abcde");
    w.ask(S1, "abcde");
    let prompt = w.prompt_event("abcde");
    w.react(BOB, &prompt, THUMBS_UP);
    let vote = w.react(ALICE, &prompt, THUMBS_UP);
    w.redact(ALICE, &vote);
    w.react(ALICE, &prompt, THUMBS_DOWN);
    w.advance(SETTLE);
    w.ask(S2, "qwert");
    w.fail_next(Kind::Verdict);
    w.say(ALICE, R1, "yes qwert");
    w.detach(S1);
    w.attach(S1);
    w.as_identity(HOME, |w| {
        w.attach(H1);
        w.ask(H1, "hhhhh");
        w.say(ALICE, HOME_ROOM, "yes hhhhh");
    });
    let m = w.say(ALICE, R1, "bye");
    w.ack(S1, &m);
    w.redact(ALICE, &m);
    w.advance(2 * TTL);

    let after: Vec<_> = w
        .channel
        .identities()
        .map(|(i, s)| (i.clone(), s.config().clone()))
        .collect();
    assert_eq!(after, before);
}

// ----- time -------------------------------------------------------------------

#[test]
fn an_earlier_now_is_taken_as_the_latest_seen() {
    let mut channel = Channel::new();
    channel.add_identity(identity(WORK), work_config()).unwrap();
    channel.handle(
        mc_model::Timestamp(0),
        Input::Membership {
            identity: identity(WORK),
            room: room(R1),
            event_id: None,
            user: user(BOT),
            membership: mc_model::Membership::Joined,
        },
    );
    channel.handle(mc_model::Timestamp(1_000), Input::Tick);
    assert_eq!(channel.now(), mc_model::Timestamp(1_000));

    channel.handle(mc_model::Timestamp(500), Input::Tick);
    assert_eq!(channel.now(), mc_model::Timestamp(1_000));

    channel.handle(
        mc_model::Timestamp(200),
        Input::Attach {
            identity: identity(WORK),
            session: sid(S1),
            label: None,
        },
    );
    channel.handle(
        mc_model::Timestamp(300),
        Input::Message {
            identity: identity(WORK),
            message: mc_model::Message {
                room: room(R1),
                event_id: ev("$m"),
                sender: user(ALICE),
                sender_name: None,
                origin_server_ts: mc_model::Timestamp(300),
                content: Some(content(mc_model::MsgType::Text, "hi")),
                device: mc_model::DeviceTrust::PlaintextRoom,
            },
        },
    );
    channel.handle(
        mc_model::Timestamp(400),
        Input::PermissionRequest {
            identity: identity(WORK),
            session: sid(S1),
            request: request("abcde"),
        },
    );
    let prompt = &channel.identity(&identity(WORK)).unwrap().prompts()[0];
    assert_eq!(prompt.created_at, mc_model::Timestamp(1_000));
    assert_eq!(prompt.expires_at, mc_model::Timestamp(1_000) + TTL);
    assert_eq!(channel.now(), mc_model::Timestamp(1_000));
    channel.handle(mc_model::Timestamp(2_000), Input::Tick);
    assert_eq!(channel.now(), mc_model::Timestamp(2_000));
}

#[test]
fn a_new_channel_starts_at_time_zero_with_nothing_in_flight() {
    let channel = Channel::new();
    assert_eq!(channel.now(), mc_model::Timestamp(0));
    assert_eq!(channel.in_flight(), 0);
    assert_eq!(channel.next_deadline(), None);
    assert_eq!(channel, Channel::default());
}

#[test]
fn with_nothing_pending_there_is_no_deadline_and_a_tick_does_nothing() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    assert_eq!(w.channel.next_deadline(), None);
    w.mark();

    let effects = w.input(Input::Tick);

    assert!(effects.is_empty());
}

#[test]
fn the_next_deadline_is_the_earliest_expiry_or_settle_end() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.hold(Kind::Post);
    w.ask(S1, "aaaaa");
    assert_eq!(w.channel.next_deadline(), Some(at(TTL)), "posting");
    w.unhold(Kind::Post);
    w.release_all();
    assert_eq!(w.channel.next_deadline(), Some(at(TTL)), "pending");

    w.advance(100_000);
    w.ask(S1, "bbbbb");
    let second = w.prompt_event("bbbbb");
    assert_eq!(w.channel.next_deadline(), Some(at(TTL)), "the older expiry");

    w.react(ALICE, &second, THUMBS_UP);
    assert_eq!(
        w.channel.next_deadline(),
        Some(at(100_000 + SETTLE)),
        "a settle end before any expiry"
    );

    w.advance(SETTLE);
    assert_eq!(
        w.channel.next_deadline(),
        Some(at(TTL)),
        "the answered prompt is gone"
    );
}

#[test]
fn a_decided_prompt_waiting_for_its_owner_sets_no_deadline() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    // Away after a restart: its prompts stay answerable (a closed stream
    // would withdraw them).
    w.restart();

    w.say(ALICE, R1, "yes abcde");

    assert_eq!(w.channel.next_deadline(), None);
}

#[test]
fn a_prompt_whose_verdict_is_being_sent_sets_no_deadline() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    w.hold(Kind::Verdict);

    w.say(ALICE, R1, "yes abcde");

    assert_eq!(w.phases(), ["s1 abcde delivering"]);
    assert_eq!(w.channel.next_deadline(), None);
}

#[test]
fn the_earliest_deadline_wins_across_identities() {
    let mut w = World::two_identities();
    w.as_identity(HOME, |w| {
        w.attach(H1);
        w.ask(H1, "hhhhh");
    });
    w.advance(1_000);
    let prompt = w.pending_prompt("abcde");
    assert_eq!(w.channel.next_deadline(), Some(at(TTL)));

    w.react(ALICE, &prompt, THUMBS_UP);

    assert_eq!(w.channel.next_deadline(), Some(at(1_000 + SETTLE)));
}

#[test]
fn timers_of_every_identity_fire_before_any_input() {
    let mut w = World::two_identities();
    let home_prompt = w.as_identity(HOME, |w| {
        w.attach(H1);
        w.ask(H1, "hhhhh");
        w.prompt_event("hhhhh")
    });
    w.attach(S1);
    w.now = at(TTL);
    w.mark();

    let m = w.say(ALICE, R1, "late");

    assert_eq!(
        w.trace(),
        [
            format!("home: edit {home_prompt} {:?}", expired("hhhhh")),
            format!("home: drop {home_prompt} PromptExpired"),
            format!("push s1 {m} message \"late\""),
        ]
    );
}

#[test]
fn effect_ids_increase_and_in_flight_counts_what_awaits_an_outcome() {
    let mut w = World::new();
    w.hold(Kind::Push);
    w.hold(Kind::Post);
    w.attach(S1);
    w.attach(S2);
    w.say(ALICE, R1, "hello");
    w.ask(S1, "abcde");

    let ids: Vec<u64> = w.held().iter().map(|h| h.id.0).collect();
    assert_eq!(ids, [0, 1, 2]);
    assert_eq!(w.channel.in_flight(), 3);
    assert_eq!(
        w.channel.in_flight_ids(),
        [EffectId(0), EffectId(1), EffectId(2)]
    );

    w.release_all();
    assert_eq!(w.channel.in_flight(), 0);
    assert!(w.channel.in_flight_ids().is_empty());
}

#[test]
fn effect_ids_survive_a_serde_round_trip() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    let json = serde_json::to_string(&w.channel).unwrap();
    let mut back: Channel = serde_json::from_str(&json).unwrap();
    assert_eq!(back, w.channel);

    let effects = back.handle(
        w.now,
        Input::Message {
            identity: identity(WORK),
            message: w.text(ALICE, R1, "again"),
        },
    );

    match &effects[..] {
        [Effect::Push { id, .. }] => assert_eq!(id.0, 1),
        other => panic!("{other:?}"),
    }
}

// ----- stale outcomes racing a re-attach ---------------------------------------

#[test]
fn a_stale_push_failure_does_not_detach_a_session_that_attached_again() {
    let mut w = World::new();
    w.attach(S1);
    w.hold(Kind::Push);
    w.say(ALICE, R1, "one");
    let old_push = w.held_of(Kind::Push)[0].id;
    w.unhold(Kind::Push);
    w.detach(S1);
    w.attach(S1);
    w.release(old_push, Some(failed()));
    w.mark();

    let two = w.say(ALICE, R1, "two");
    w.drive();

    assert_eq!(w.state().sessions()[&sid(S1)], SessionPhase::Live);
    assert_eq!(w.trace(), [format!("push s1 {two} message \"two\"")]);
}

#[test]
fn a_stale_verdict_failure_does_not_detach_a_session_that_attached_again() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    w.hold(Kind::Verdict);
    w.say(ALICE, R1, "yes abcde");
    let old_send = w.held_of(Kind::Verdict)[0].id;
    w.unhold(Kind::Verdict);
    w.detach(S1);
    w.attach(S1);
    w.mark();

    w.release(old_send, Some(failed()));
    w.drive();

    assert_eq!(w.state().sessions()[&sid(S1)], SessionPhase::Live);
    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Allow)]);
}
