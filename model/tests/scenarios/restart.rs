//! A restart (`Input::Restarted`): what was in flight with the old process, and
//! the sessions that were live.

use crate::harness::*;
use mc_model::{AgentText, AgentWrite, Effect, Outcome, SessionPhase};

#[test]
fn a_prompt_post_in_flight_at_a_restart_is_issued_again_with_the_same_id() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.hold(Kind::Post);
    w.ask(S1, "abcde");
    w.drive();
    let post = w.held_of(Kind::Post)[0].id;
    w.unhold(Kind::Post);
    w.mark();

    w.restart();
    let reissued: Vec<_> = w
        .effects()
        .into_iter()
        .filter_map(|e| match e {
            Effect::PostPrompt { id, room, .. } => Some((id, room)),
            _ => None,
        })
        .collect();
    assert_eq!(reissued, [(post, room(R1))]);
    w.drive();

    assert_eq!(
        w.phases(),
        ["s1 abcde pending"],
        "the re-issued post's outcome counts"
    );
    assert_eq!(w.channel.in_flight(), 0);
}

#[test]
fn a_restart_detaches_every_live_session_and_sends_nothing_to_them() {
    let mut w = World::two_identities();
    w.attach(S1);
    w.attach(S2);
    w.as_identity(HOME, |w| w.attach(H1));
    w.detach(S2);
    w.mark();

    w.restart();
    w.drive();

    assert!(w.trace().is_empty(), "{:?}", w.trace());
    for (identity, session) in [(WORK, S1), (WORK, S2), (HOME, H1)] {
        let state = w.channel.identity(&identity.into()).unwrap();
        assert_eq!(
            state.sessions()[&sid(session)],
            SessionPhase::Detached,
            "{session}"
        );
    }
}

#[test]
fn a_push_in_flight_at_a_restart_is_queued_and_replayed_once_on_attach() {
    let mut w = World::new();
    w.attach(S1);
    w.hold(Kind::Push);
    let m1 = w.say(ALICE, R1, "hello");
    w.drive();
    w.unhold(Kind::Push);
    w.mark();

    w.restart();
    w.drive();
    assert!(w.trace().is_empty(), "{:?}", w.trace());
    assert_eq!(w.state().queue().len(), 1);

    w.attach(S1);
    w.drive();
    let pushes = w.pushes(S1);
    assert_eq!(pushes.len(), 1);
    assert_eq!(pushes[0].event_id.as_ref(), Some(&m1));
    assert_eq!(pushes[0].meta("replayed"), Some("true"));
}

#[test]
fn a_verdict_send_in_flight_at_a_restart_is_sent_again_when_the_session_attaches() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.ask(S1, "abcde");
    w.drive();
    w.hold(Kind::Verdict);
    w.say(ALICE, R1, "yes abcde");
    w.drive();
    assert_eq!(w.phases(), ["s1 abcde delivering"]);
    w.unhold(Kind::Verdict);

    w.restart();
    w.drive();
    assert_eq!(
        w.phases(),
        ["s1 abcde decided"],
        "the verdict waits for its session"
    );
    assert_eq!(
        w.verdicts(S1).len(),
        1,
        "the old process's send, never completed"
    );

    w.attach(S1);
    w.drive();
    assert_eq!(w.verdicts(S1).len(), 2, "sent again, once");
    assert!(
        w.state().prompts().is_empty(),
        "delivered: the prompt is retired"
    );
}

#[test]
fn an_agent_write_in_flight_at_a_restart_is_failed_and_its_late_outcome_is_stale() {
    let mut w = World::new();
    w.attach(S1);
    let m1 = w.say(ALICE, R1, "hello");
    w.drive();
    w.hold(Kind::Write);
    let write = AgentWrite::Message {
        room: room(R1),
        parts: vec![AgentText::plain("hi")],
        reply_to: Some(m1),
        thread_root: None,
        txn_id: "t".into(),
    };
    w.agent_write(1, write);
    let held = w.held_of(Kind::Write)[0].id;
    assert_eq!(w.channel.in_flight(), 1);

    w.restart();
    w.drive();
    assert_eq!(
        w.channel.in_flight(),
        0,
        "the tool call is gone with the old process"
    );
    w.mark();

    w.input(mc_model::Input::Completed {
        id: held,
        outcome: Outcome::Sent,
    });
    assert_eq!(w.trace(), ["?: drop - StaleOutcome"]);
}

#[test]
fn a_prompt_retired_while_its_post_was_in_flight_is_posted_again_and_shows_its_outcome() {
    let mut w = World::configured(|c| c.max_prompts = 1);
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.hold(Kind::Post);
    w.ask(S1, "abcde");
    w.ask(S1, "fghjk");
    w.drive();
    assert_eq!(w.held_of(Kind::Post).len(), 2);
    w.unhold(Kind::Post);
    w.mark();

    w.restart();
    w.drive();

    let posts: Vec<String> = w
        .trace()
        .into_iter()
        .filter(|l| l.starts_with("post"))
        .collect();
    assert_eq!(posts, ["post !r1:hs abcde", "post !r1:hs fghjk"]);
    let edits = w.edits();
    assert_eq!(edits.len(), 1, "{edits:?}");
    assert_eq!(edits[0].1, evicted("abcde"));
    assert_eq!(w.phases(), ["s1 fghjk pending"]);
}
