//! Session rooms (docs/decisions/0026-session-rooms.md): a label's room is created
//! at its first attach, a bound room's events reach only its sessions, prompts are
//! posted in the asking session's room with its label, and the operator and the
//! approvers bind and unbind.

use crate::harness::*;
use mc_model::{Binding, DropReason, Effect, Label, Outcome, RoomId, SessionPhase};

fn label(text: &str) -> Label {
    Label::parse(text).unwrap()
}

/// The prompts posted since the mark: room and plain text.
fn posted(w: &World) -> Vec<(RoomId, String)> {
    w.effects()
        .into_iter()
        .filter_map(|e| match e {
            Effect::PostPrompt { room, text, .. } => Some((room, text.plain)),
            _ => None,
        })
        .collect()
}

/// The event ids pushed to `session`, in order.
fn pushed_ids(w: &World, session: &str) -> Vec<mc_model::EventId> {
    w.pushes(session)
        .into_iter()
        .filter_map(|p| p.event_id)
        .collect()
}

#[test]
fn a_labels_first_attach_creates_its_room_named_after_it_with_the_allowed_senders_invited() {
    let mut w = World::new();
    w.mark();

    w.attach_labelled(S1, "web");

    let web = label_room("web");
    assert_eq!(
        w.trace(),
        [
            format!("create web \"Claude Code: web\" invite {ALICE},{BOB}"),
            format!("bound web {web}"),
        ]
    );
    assert_eq!(
        w.state().bindings().get(&label("web")),
        Some(&Binding::Room { room: web.clone() })
    );
    assert_eq!(w.state().room_of(&sid(S1)), Some(&web));
    assert_eq!(w.state().label_of(&sid(S1)), Some(&label("web")));
    assert_eq!(w.state().label_of_room(&web), Some(&label("web")));
}

#[test]
fn a_second_session_with_the_same_label_shares_its_room() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    w.mark();

    w.attach_labelled(S2, "web");
    let web = label_room("web");
    let said = w.say(ALICE, web.as_str(), "both of you");

    assert!(w.trace().iter().all(|line| !line.starts_with("create")));
    assert_eq!(pushed_ids(&w, S1), std::slice::from_ref(&said));
    assert_eq!(pushed_ids(&w, S2), [said]);
}

#[test]
fn a_message_in_a_sessions_room_reaches_that_session_only() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    w.attach_labelled(S2, "api");
    w.attach("s3");
    w.mark();

    let to_web = w.say(ALICE, label_room("web").as_str(), "run the tests");
    let to_api = w.say(ALICE, label_room("api").as_str(), "deploy");
    let to_unbound = w.say(ALICE, R1, "anyone");

    assert_eq!(pushed_ids(&w, S1), [to_web]);
    assert_eq!(pushed_ids(&w, S2), [to_api]);
    assert_eq!(pushed_ids(&w, "s3"), [to_unbound]);
}

#[test]
fn reactions_and_redactions_follow_their_rooms_session() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    w.attach_labelled(S2, "api");
    let web = label_room("web");
    let said = w.say(ALICE, web.as_str(), "hello");
    w.mark();

    let mut reaction = w.reaction(ALICE, &said, "🎉");
    reaction.room = web.clone();
    let reaction = w.send_reaction(reaction);
    let mut redaction = w.redaction(ALICE, &said);
    redaction.room = web.clone();
    let redaction = w.send_redaction(redaction);

    assert_eq!(pushed_ids(&w, S1), [reaction, redaction]);
    assert!(w.pushes(S2).is_empty());
}

#[test]
fn a_bound_rooms_events_wait_for_its_session_and_are_replayed_to_no_other() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    w.detach(S1);
    let waiting = w.say(ALICE, label_room("web").as_str(), "while you were away");
    w.mark();

    w.attach("s3");
    w.attach_labelled(S2, "api");
    assert!(w.pushes("s3").is_empty());
    assert!(w.pushes(S2).is_empty());
    assert_eq!(w.queued_ids(), std::slice::from_ref(&waiting));

    w.attach_labelled(S1, "web");
    assert_eq!(pushed_ids(&w, S1), [waiting]);
    assert_eq!(w.pushes(S1)[0].meta("replayed"), Some("true"));
    assert!(w.queued_ids().is_empty());
}

#[test]
fn an_unlabelled_sessions_replay_leaves_the_bound_rooms_events_queued() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    w.detach(S1);
    let bound = w.say(ALICE, label_room("web").as_str(), "for web");
    let unbound = w.say(ALICE, R1, "for anyone");
    w.mark();

    w.attach(S2);

    assert_eq!(pushed_ids(&w, S2), [unbound]);
    assert_eq!(w.queued_ids(), [bound]);
}

#[test]
fn a_prompt_is_posted_in_the_asking_sessions_room_and_says_who_asks() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    w.attach_labelled(S2, "api");
    w.say(ALICE, R1, "hello");
    w.mark();

    w.ask(S2, "abcde");

    let posts = posted(&w);
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].0, label_room("api"));
    assert!(
        posts[0]
            .1
            .starts_with("🔐 Permission request abcde from api (session s2): "),
        "{}",
        posts[0].1
    );
}

#[test]
fn a_verdict_typed_in_one_sessions_room_never_answers_another_rooms_prompt() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    w.attach_labelled(S2, "api");
    w.ask(S1, "abcde");
    w.ask(S2, "abcde");
    w.mark();

    w.say(ALICE, label_room("api").as_str(), "yes abcde");
    w.drive();

    assert_eq!(
        w.verdicts(S2),
        [("abcde".to_owned(), mc_model::Behavior::Allow)]
    );
    assert!(w.verdicts(S1).is_empty());
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn the_permission_room_overrides_the_sessions_room() {
    let mut w = World::configured(|c| c.permission_room = Some(room(R2)));
    w.attach_labelled(S1, "web");
    w.mark();

    w.ask(S1, "abcde");

    let posts = posted(&w);
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].0, room(R2));
    assert!(
        posts[0].1.contains("from web (session s1)"),
        "{}",
        posts[0].1
    );
}

#[test]
fn a_labelled_session_whose_room_is_still_being_created_has_no_prompt_room() {
    let mut w = World::new();
    w.say(ALICE, R1, "hello");
    w.hold(Kind::Create);
    w.attach_labelled(S1, "web");
    w.mark();

    w.ask(S1, "abcde");
    let message = w.say(ALICE, R1, "not for a labelled session");

    assert!(w.posts().is_empty());
    assert!(w.drops().contains(&(None, DropReason::NoPromptRoom)));
    assert!(w.pushes(S1).is_empty());
    assert_eq!(w.queued_ids().last(), Some(&message));
}

#[test]
fn a_failed_creation_is_told_to_the_labels_sessions_and_the_next_attach_tries_again() {
    let mut w = World::new();
    w.fail_next(Kind::Create);
    w.mark();

    w.attach_labelled(S1, "web");

    assert!(w.drops().contains(&(
        None,
        DropReason::RoomCreationFailed {
            label: label("web")
        }
    )));
    assert!(w.trace().iter().any(|line| line.starts_with("log s1 ")
        && line.contains("could not create the room for web: the world made it fail.")));
    assert_eq!(w.state().bindings().get(&label("web")), None);
    assert_eq!(w.state().room_of(&sid(S1)), None);

    w.mark();
    w.attach_labelled(S1, "web");
    assert_eq!(
        w.state().bindings().get(&label("web")),
        Some(&Binding::Room {
            room: label_room("web")
        })
    );
}

#[test]
fn a_room_created_after_its_label_was_bound_elsewhere_stays_unused() {
    let mut w = World::new();
    w.hold(Kind::Create);
    w.attach_labelled(S1, "web");
    w.bind("web", Some(&room(R2)));
    w.mark();

    let created = w.held_of(Kind::Create)[0].id;
    w.release(
        created,
        Some(Outcome::Created {
            room: label_room("web"),
        }),
    );

    assert_eq!(w.drops(), [(None, DropReason::StaleOutcome)]);
    assert_eq!(w.state().room_of(&sid(S1)), Some(&room(R2)));
}

#[test]
fn an_approver_binds_a_room_by_typing_bind_and_its_events_then_reach_that_label_only() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    w.attach(S2);
    w.mark();

    let command = w.say(ALICE, R1, "Bind web");

    assert_eq!(
        w.notices(),
        [(
            command.clone(),
            "This room is now the room of web: its sessions get this room's messages and \
             post their permission requests here."
                .to_owned()
        )]
    );
    assert!(w.pushes(S1).is_empty() && w.pushes(S2).is_empty());
    let after = w.say(BOB, R1, "now for web");
    assert_eq!(pushed_ids(&w, S1), [after]);
    assert!(w.pushes(S2).is_empty());
    // The room created for web is bound to nothing now: its events go to S2.
    let old = w.say(ALICE, label_room("web").as_str(), "old room");
    assert_eq!(pushed_ids(&w, S2), [old]);
}

#[test]
fn unbind_in_a_sessions_room_sends_its_sessions_to_the_unbound_rooms() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    let web = label_room("web");
    w.mark();

    let command = w.say(ALICE, web.as_str(), "unbind");

    assert_eq!(
        w.state().bindings().get(&label("web")),
        Some(&Binding::Unbound)
    );
    assert_eq!(w.notices()[0].0, command);
    let unbound = w.say(ALICE, R1, "anyone");
    assert_eq!(pushed_ids(&w, S1), [unbound]);
    // An unbound label gets no new room when its sessions attach again.
    w.mark();
    w.attach_labelled(S2, "web");
    assert!(w.trace().iter().all(|line| !line.starts_with("create")));
}

#[test]
fn bind_from_an_allowed_sender_who_is_no_approver_is_chat() {
    let mut w = World::new();
    w.attach(S1);
    w.mark();

    let said = w.say(BOB, R1, "bind web");

    assert_eq!(pushed_ids(&w, S1), [said]);
    assert!(w.state().bindings().is_empty());
}

#[test]
fn text_that_only_starts_like_a_command_is_chat() {
    let mut w = World::new();
    w.attach(S1);
    w.mark();

    let a = w.say(ALICE, R1, "bind web now");
    let b = w.say(ALICE, R1, "bind we/b");
    let c = w.say(ALICE, R1, "unbind web");

    assert_eq!(pushed_ids(&w, S1), [a, b, c]);
    assert!(w.state().bindings().is_empty());
}

#[test]
fn the_operator_binds_only_a_joined_room_and_unbinds() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    w.mark();

    w.bind("web", Some(&RoomId::from("!stranger:hs")));
    assert_eq!(w.drops(), [(None, DropReason::NotJoined)]);
    assert_eq!(w.state().room_of(&sid(S1)), Some(&label_room("web")));

    w.mark();
    w.bind("web", Some(&room(R2)));
    assert_eq!(w.trace(), [format!("bound web {R2}")]);
    let said = w.say(ALICE, R2, "web lives here now");
    assert_eq!(pushed_ids(&w, S1), [said]);

    w.mark();
    w.bind("web", None);
    assert_eq!(
        w.trace(),
        ["bound web -".to_owned(), format!("typing {R2} off")]
    );
    let anyone = w.say(ALICE, R1, "anyone");
    assert_eq!(pushed_ids(&w, S1), [anyone]);
}

#[test]
fn binding_a_room_takes_it_from_the_label_it_had() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    w.attach_labelled(S2, "api");
    w.mark();

    w.bind("api", Some(&label_room("web")));

    assert_eq!(
        w.trace(),
        [
            "bound web -".to_owned(),
            format!("bound api {}", label_room("web"))
        ]
    );
    let said = w.say(ALICE, label_room("web").as_str(), "for api now");
    assert_eq!(pushed_ids(&w, S2), [said]);
    assert!(w.pushes(S1).is_empty());
}

#[test]
fn leaving_a_sessions_room_unbinds_its_label_and_the_next_attach_creates_another() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    w.detach(S1);
    w.mark();

    w.input(mc_model::Input::Membership {
        identity: WORK.into(),
        room: label_room("web"),
        event_id: None,
        user: BOT.into(),
        membership: mc_model::Membership::Left,
    });
    w.drive();
    assert_eq!(w.trace(), ["bound web -"]);

    w.mark();
    w.attach_labelled(S1, "web");
    assert!(w.trace()[0].starts_with("create web"));
}

#[test]
fn an_unlabelled_sessions_prompt_goes_to_the_last_unbound_room_an_allowed_sender_wrote_in() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    w.attach(S2);
    w.say(ALICE, R2, "hello");
    w.say(ALICE, label_room("web").as_str(), "to web");
    w.mark();

    w.ask(S2, "abcde");

    assert_eq!(w.posts()[0].0, room(R2));
}

#[test]
fn a_binding_survives_a_restart_and_the_label_gets_no_second_room() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    w.restart();
    assert_eq!(
        w.state().sessions().get(&sid(S1)),
        Some(&SessionPhase::Detached)
    );
    w.mark();

    w.attach_labelled(S1, "web");
    let said = w.say(ALICE, label_room("web").as_str(), "still here");

    assert!(w.trace().iter().all(|line| !line.starts_with("create")));
    assert_eq!(pushed_ids(&w, S1), [said]);
}

#[test]
fn a_creation_in_flight_at_a_restart_failed_and_the_next_attach_creates_again() {
    let mut w = World::new();
    w.hold(Kind::Create);
    w.attach_labelled(S1, "web");
    w.unhold(Kind::Create);
    w.restart();
    assert_eq!(w.state().bindings().get(&label("web")), None);
    w.mark();

    w.attach_labelled(S1, "web");

    assert!(w.trace()[0].starts_with("create web"));
    assert!(w
        .effects()
        .iter()
        .any(|e| matches!(e, Effect::Bound { room: Some(r), .. } if *r == label_room("web"))));
}

// ----- typing ---------------------------------------------------------------------

fn agent_says(room: &RoomId) -> mc_model::AgentWrite {
    mc_model::AgentWrite::Message {
        room: room.clone(),
        parts: vec![mc_model::AgentText::plain("done")],
        reply_to: None,
        thread_root: None,
        txn_id: "t1".into(),
    }
}

fn typing_trace(w: &World) -> Vec<String> {
    w.trace()
        .into_iter()
        .filter(|line| line.starts_with("typing "))
        .collect()
}

#[test]
fn a_push_that_reaches_a_sessions_room_shows_typing_there_until_the_agent_answers() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    let web = label_room("web");
    w.mark();

    w.say(ALICE, web.as_str(), "run the tests");
    assert_eq!(typing_trace(&w), [format!("typing {web} on")]);
    assert!(w.state().typing().contains_key(&web));

    w.mark();
    w.agent_write(1, agent_says(&web));
    assert_eq!(typing_trace(&w), [format!("typing {web} off")]);
    assert!(w.state().typing().is_empty());
}

#[test]
fn a_file_the_agent_sends_ends_typing_as_a_message_does() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    let web = label_room("web");
    w.say(ALICE, web.as_str(), "a screenshot please");
    w.mark();

    w.agent_write(
        1,
        mc_model::AgentWrite::File {
            room: web.clone(),
            name: "shot.png".into(),
            caption: None,
            mimetype: "image/png".into(),
            size: 67,
            sha256: "0".repeat(64),
            reply_to: None,
            thread_root: None,
            txn_id: "f1".into(),
        },
    );
    assert_eq!(typing_trace(&w), [format!("typing {web} off")]);
    assert!(w.state().typing().is_empty());
}

#[test]
fn a_push_that_fails_shows_no_typing() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    let web = label_room("web");
    w.fail_next(Kind::Push);
    w.mark();

    w.say(ALICE, web.as_str(), "run the tests");

    assert!(typing_trace(&w).is_empty());
}

#[test]
fn a_room_bound_to_no_label_shows_no_typing() {
    let mut w = World::new();
    w.attach(S1);
    w.mark();

    w.say(ALICE, R1, "hello");

    assert_eq!(w.pushes(S1).len(), 1);
    assert!(typing_trace(&w).is_empty());
}

#[test]
fn typing_is_sent_again_before_its_timeout_and_stops_at_the_cap() {
    let mut w = World::configured(|c| c.typing_cap_ms = 60_000);
    w.attach_labelled(S1, "web");
    let web = label_room("web");
    w.say(ALICE, web.as_str(), "a long job");
    w.mark();

    w.advance(mc_model::TYPING_REFRESH_MS - 1);
    assert!(typing_trace(&w).is_empty());
    w.advance(1);
    assert_eq!(typing_trace(&w), [format!("typing {web} on")]);

    w.mark();
    w.advance(60_000 - mc_model::TYPING_REFRESH_MS - 1);
    assert_eq!(typing_trace(&w), [format!("typing {web} on")]);
    w.mark();
    w.advance(1);
    assert_eq!(typing_trace(&w), [format!("typing {web} off")]);
    assert_eq!(w.channel.next_deadline(), None);
}

#[test]
fn a_new_push_restarts_the_cap() {
    let mut w = World::configured(|c| c.typing_cap_ms = 20_000);
    w.attach_labelled(S1, "web");
    let web = label_room("web");
    w.say(ALICE, web.as_str(), "one");
    w.advance(15_000);
    w.say(ALICE, web.as_str(), "two");
    w.mark();

    // 25 s after the first push: the refresh, not the end (the cap runs from the
    // second push, 15 s in).
    w.advance(10_000);
    assert_eq!(typing_trace(&w), [format!("typing {web} on")]);
    w.mark();
    w.advance(10_000 - 1);
    assert!(typing_trace(&w).is_empty());
    w.advance(1);
    assert_eq!(typing_trace(&w), [format!("typing {web} off")]);
}

#[test]
fn typing_stops_when_the_rooms_last_session_detaches() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    w.attach_labelled(S2, "web");
    let web = label_room("web");
    w.say(ALICE, web.as_str(), "both");
    w.mark();

    w.detach(S1);
    assert!(typing_trace(&w).is_empty());
    w.detach(S2);
    assert_eq!(typing_trace(&w), [format!("typing {web} off")]);
}

#[test]
fn a_typing_cap_of_zero_never_shows_typing() {
    let mut w = World::configured(|c| c.typing_cap_ms = 0);
    w.attach_labelled(S1, "web");
    w.mark();

    w.say(ALICE, label_room("web").as_str(), "hello");

    assert_eq!(w.pushes(S1).len(), 1);
    assert!(typing_trace(&w).is_empty());
}

#[test]
fn what_was_held_for_a_session_that_changed_its_label_during_the_grace_goes_to_its_rooms_sessions()
{
    let mut w = World::configured(|c| c.attach_grace_ms = 1_000);
    w.attach_labelled(S1, "web");
    w.advance(1_000);
    let web = label_room("web");
    w.attach_labelled(S1, "web");
    let held = w.say(ALICE, web.as_str(), "held for web");
    w.attach(S1);
    w.mark();

    w.advance(1_000);
    assert!(pushed_ids(&w, S1).is_empty());
    assert_eq!(w.queued_ids(), std::slice::from_ref(&held));

    w.attach_labelled(S2, "web");
    w.advance(1_000);
    assert_eq!(pushed_ids(&w, S2), [held]);
}

#[test]
fn typing_stops_in_a_room_that_stops_being_its_sessions_room() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    let web = label_room("web");
    w.say(ALICE, web.as_str(), "working?");
    w.mark();

    w.bind("web", Some(&room(R2)));

    assert_eq!(typing_trace(&w), [format!("typing {web} off")]);
}

#[test]
fn typing_stops_when_the_rooms_session_attaches_again_with_another_label() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    w.attach_labelled(S2, "api");
    let web = label_room("web");
    w.say(ALICE, web.as_str(), "working?");
    w.mark();

    w.attach_labelled(S1, "api");

    assert_eq!(typing_trace(&w), [format!("typing {web} off")]);
    assert!(w.state().typing().is_empty());
}

#[test]
fn the_default_typing_cap_is_ten_minutes_and_an_older_config_gets_it() {
    let mut config = mc_model::IdentityConfig::new(BOT.into(), [ALICE.into()]);
    assert_eq!(config.typing_cap_ms, 600_000);
    assert_eq!(mc_model::config::DEFAULT_TYPING_CAP_MS, 600_000);
    config.typing_cap_ms = 0;
    let mut json = serde_json::to_value(&config).unwrap();
    json.as_object_mut().unwrap().remove("typing_cap_ms");
    let read: mc_model::IdentityConfig = serde_json::from_value(json).unwrap();
    assert_eq!(read.typing_cap_ms, 600_000);
}

#[test]
fn the_agents_own_bind_is_its_own_event_and_binds_nothing() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    w.mark();

    let own = w.say(BOT, R1, "bind web");

    assert_eq!(w.drops(), [(Some(own), DropReason::OwnEvent)]);
    assert_eq!(w.state().room_of(&sid(S1)), Some(&label_room("web")));
}

#[test]
fn leaving_a_sessions_room_stops_the_typing_shown_there() {
    let mut w = World::new();
    w.attach_labelled(S1, "web");
    let web = label_room("web");
    w.say(ALICE, web.as_str(), "working?");
    w.mark();

    w.input(mc_model::Input::Membership {
        identity: WORK.into(),
        room: web.clone(),
        event_id: None,
        user: BOT.into(),
        membership: mc_model::Membership::Left,
    });
    w.drive();

    assert_eq!(typing_trace(&w), [format!("typing {web} off")]);
}
