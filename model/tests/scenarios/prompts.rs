//! Permission prompts: where they go, how long they live, the cap, re-issue, and
//! what happens when posting fails or finishes late.

use crate::harness::*;
use mc_model::{Behavior, Input, MsgType, Outcome, Phase};
use std::collections::BTreeSet;

#[test]
fn a_prompt_goes_to_the_permission_room_when_one_is_set() {
    let mut w = World::configured(|c| c.permission_room = Some(room(R2)));
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.mark();

    w.ask(S1, "abcde");
    w.drive();

    assert_eq!(w.trace(), ["post !r2:hs abcde"]);
    assert_eq!(w.state().prompts()[0].room, room(R2));
}

#[test]
fn a_permission_room_needs_no_message_first() {
    let mut w = World::configured(|c| c.permission_room = Some(room(R2)));
    w.attach(S1);

    w.ask(S1, "abcde");
    w.drive();

    assert_eq!(w.trace(), ["post !r2:hs abcde"]);
}

#[test]
fn without_a_permission_room_a_prompt_goes_where_an_allowed_sender_last_wrote() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.say(BOB, R2, "hi");
    w.mark();

    w.ask(S1, "abcde");
    w.drive();

    assert_eq!(w.trace(), ["post !r2:hs abcde"]);
    assert_eq!(w.state().last_room(), Some(&room(R2)));
}

#[test]
fn a_stranger_writing_elsewhere_does_not_move_the_prompt_room() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.say(MALLORY, R2, "over here");
    w.mark();

    w.ask(S1, "abcde");
    w.drive();

    assert_eq!(w.posts(), [(room(R1), "abcde".to_owned())]);
}

#[test]
fn the_identitys_own_message_elsewhere_does_not_move_the_prompt_room() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.say(BOT, R2, "I am the bot");
    w.mark();

    w.ask(S1, "abcde");
    w.drive();

    assert_eq!(w.posts(), [(room(R1), "abcde".to_owned())]);
}

#[test]
fn a_notice_or_a_redacted_message_elsewhere_does_not_move_the_prompt_room() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    let notice = w.message(ALICE, R2, content(MsgType::Notice, "bot-ish"));
    w.send(notice);
    let mut gone = w.text(BOB, R2, "");
    gone.content = None;
    w.send(gone);
    w.mark();

    w.ask(S1, "abcde");
    w.drive();

    assert_eq!(w.posts(), [(room(R1), "abcde".to_owned())]);
}

#[test]
fn a_non_approvers_verdict_shaped_message_still_moves_the_prompt_room() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.say(BOB, R2, "yes qwert");
    w.mark();

    w.ask(S1, "abcde");
    w.drive();

    assert_eq!(w.posts(), [(room(R2), "abcde".to_owned())]);
}

#[test]
fn with_no_room_yet_a_request_is_dropped_with_no_prompt_room() {
    let mut w = World::new();
    w.attach(S1);
    w.mark();

    w.ask(S1, "abcde");
    w.drive();

    assert_eq!(w.trace(), ["drop - NoPromptRoom"]);
    assert!(w.state().prompts().is_empty());
}

#[test]
fn an_identity_with_an_empty_approver_list_relays_no_requests() {
    let mut w = World::configured(|c| {
        c.approvers = Some(BTreeSet::new());
        c.permission_room = Some(room(R1));
    });
    w.attach(S1);
    w.mark();

    w.ask(S1, "abcde");
    w.drive();

    assert_eq!(w.trace(), ["drop - NoApprovers"]);
}

#[test]
fn a_request_from_a_session_that_never_attached_is_dropped() {
    let mut w = World::configured(|c| c.permission_room = Some(room(R1)));
    w.attach(S1);
    w.mark();

    w.ask(S2, "abcde");
    w.drive();

    assert_eq!(w.trace(), ["drop - UnknownSession"]);
}

#[test]
fn a_request_from_a_detached_session_is_dropped() {
    let mut w = World::configured(|c| c.permission_room = Some(room(R1)));
    w.attach(S1);
    w.detach(S1);
    w.mark();

    w.ask(S1, "abcde");
    w.drive();

    assert_eq!(w.trace(), ["drop - UnknownSession"]);
}

#[test]
fn a_prompt_records_its_request_owner_room_and_times() {
    let mut w = World::new();
    w.advance(500);
    let prompt = w.pending_prompt("abcde");

    let p = &w.state().prompts()[0];
    assert_eq!(p.session, sid(S1));
    assert_eq!(p.request, request("abcde"));
    assert_eq!(p.room, room(R1));
    assert_eq!(p.created_at, at(500));
    assert_eq!(p.expires_at, at(500) + TTL);
    assert_eq!(p.phase, Phase::Pending { message: prompt });
}

#[test]
fn an_unanswered_prompt_expires_after_its_time_to_live() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");

    w.advance(TTL - 1);
    assert!(w.take().is_empty());
    w.advance(1);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("edit {prompt} {:?}", expired("abcde")),
            format!("drop {prompt} PromptExpired"),
        ]
    );
    assert_eq!(w.times(), [at(TTL), at(TTL)]);
    assert!(w.state().prompts().is_empty());
    assert_eq!(w.channel.next_deadline(), None);
}

#[test]
fn a_yes_after_expiry_gets_the_unknown_request_notice() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    w.advance(TTL);
    w.mark();

    let yes = w.say(ALICE, R1, "yes abcde");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("notice {yes} {:?}", unknown_request_notice("abcde")),
            format!("drop {yes} UnknownRequest"),
        ]
    );
}

#[test]
fn a_yes_one_millisecond_before_expiry_still_answers() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    w.advance(TTL - 1);

    w.say(ALICE, R1, "yes abcde");
    w.drive();

    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Allow)]);
    assert!(w.drops().is_empty());
}

#[test]
fn a_yes_at_the_expiry_instant_comes_too_late() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    w.now = at(TTL);

    let yes = w.say(ALICE, R1, "yes abcde");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("edit {prompt} {:?}", expired("abcde")),
            format!("drop {prompt} PromptExpired"),
            format!("notice {yes} {:?}", unknown_request_notice("abcde")),
            format!("drop {yes} UnknownRequest"),
        ]
    );
}

#[test]
fn the_prompt_time_to_live_is_configurable() {
    let mut w = World::configured(|c| c.prompt_ttl_ms = 10_000);
    let prompt = w.pending_prompt("abcde");

    w.advance(10_000);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("edit {prompt} {:?}", expired("abcde")),
            format!("drop {prompt} PromptExpired"),
        ]
    );
}

#[test]
fn a_decided_prompt_waiting_for_its_owner_never_expires() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    // Away after a restart: its prompts stay answerable (a closed stream
    // would withdraw them).
    w.restart();
    w.say(ALICE, R1, "yes abcde");
    w.mark();

    w.advance(2 * TTL);
    assert!(w.take().is_empty());
    w.attach(S1);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            "verdict s1 abcde allow".to_owned(),
            format!("edit {prompt} {:?}", allowed_by_reply("abcde")),
        ]
    );
}

#[test]
fn at_the_cap_the_oldest_prompt_is_evicted_and_the_newest_survives() {
    let mut w = World::configured(|c| c.max_prompts = 2);
    let first = w.pending_prompt("aaaaa");
    w.ask(S1, "bbbbb");
    w.mark();

    w.ask(S1, "ccccc");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("edit {first} {:?}", evicted("aaaaa")),
            format!("drop {first} PromptEvicted"),
            "post !r1:hs ccccc".to_owned(),
        ]
    );
    assert_eq!(w.phases(), ["s1 bbbbb pending", "s1 ccccc pending"]);
}

#[test]
fn below_the_cap_nothing_is_evicted() {
    let mut w = World::configured(|c| c.max_prompts = 3);
    w.pending_prompt("aaaaa");
    w.ask(S1, "bbbbb");
    w.mark();

    w.ask(S1, "ccccc");
    w.drive();

    assert_eq!(w.trace(), ["post !r1:hs ccccc"]);
    assert_eq!(w.state().prompts().len(), 3);
}

#[test]
fn a_cap_of_one_keeps_only_the_newest_prompt() {
    let mut w = World::configured(|c| c.max_prompts = 1);
    let first = w.pending_prompt("aaaaa");

    w.ask(S1, "bbbbb");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("edit {first} {:?}", evicted("aaaaa")),
            format!("drop {first} PromptEvicted"),
            "post !r1:hs bbbbb".to_owned(),
        ]
    );
    assert_eq!(w.phases(), ["s1 bbbbb pending"]);
}

#[test]
fn a_busy_identity_cannot_evict_another_identitys_prompts() {
    let mut home = home_config();
    home.max_prompts = 2;
    let mut work = work_config();
    work.max_prompts = 2;
    let mut w = World::with(vec![(WORK, work), (HOME, home)]);
    w.as_identity(HOME, |w| {
        w.attach(H1);
        w.ask(H1, "hhhhh");
    });
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.mark();

    for id in ["aaaaa", "bbbbb", "ccccc", "ddddd"] {
        w.ask(S1, id);
    }
    w.drive();

    let home_state = w.channel.identity(&identity(HOME)).unwrap();
    assert_eq!(home_state.prompts().len(), 1);
    assert_eq!(home_state.prompts()[0].request.request_id, rid("hhhhh"));
    assert!(w.trace().iter().all(|l| !l.starts_with("home:")));
    assert_eq!(w.phases(), ["s1 ccccc pending", "s1 ddddd pending"]);
}

#[test]
fn a_re_issued_request_supersedes_the_prompt_under_the_same_session_and_id() {
    let mut w = World::new();
    let old = w.pending_prompt("abcde");

    w.ask(S1, "abcde");
    w.drive();
    let new = w.prompt_event("abcde");

    assert_eq!(
        w.take(),
        [
            format!("edit {old} {:?}", superseded("abcde")),
            format!("drop {old} PromptSuperseded"),
            "post !r1:hs abcde".to_owned(),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde pending"]);
    assert_ne!(old, new);

    let yes = w.say(ALICE, R1, "yes abcde");
    assert_eq!(
        w.trace(),
        [
            format!("decided s1 abcde allow by {ALICE} via text {yes}"),
            "verdict s1 abcde allow".to_owned(),
            format!("edit {new} {:?}", allowed_by_reply("abcde")),
        ]
    );
}

#[test]
fn the_same_id_from_another_session_does_not_supersede() {
    let mut w = World::new();
    w.attach(S2);
    w.pending_prompt("abcde");

    w.ask(S2, "abcde");
    w.drive();

    assert_eq!(w.trace(), ["post !r1:hs abcde"]);
    assert_eq!(w.phases(), ["s1 abcde pending", "s2 abcde pending"]);
}

#[test]
fn another_id_from_the_same_session_does_not_supersede() {
    let mut w = World::new();
    w.pending_prompt("abcde");

    w.ask(S1, "qwert");
    w.drive();

    assert_eq!(w.trace(), ["post !r1:hs qwert"]);
    assert_eq!(w.phases(), ["s1 abcde pending", "s1 qwert pending"]);
}

#[test]
fn an_old_verdict_send_cannot_retire_a_prompt_re_issued_under_the_same_id() {
    let mut w = World::new();
    let old = w.pending_prompt("abcde");
    w.hold(Kind::Verdict);
    w.say(ALICE, R1, "yes abcde");
    let old_send = w.held_of(Kind::Verdict)[0].id;
    w.ask(S1, "abcde");
    let new = w.prompt_event("abcde");
    w.mark();

    w.release(old_send, None);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("edit {old} {:?}", allowed_by_reply("abcde")),
            "drop - StaleOutcome".to_owned(),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde pending"]);
    assert_eq!(
        w.state().prompts()[0].phase,
        Phase::Pending {
            message: new.clone()
        }
    );
    assert_ne!(old, new);
}

#[test]
fn an_old_failed_verdict_send_cannot_touch_a_re_issued_prompt() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    w.hold(Kind::Verdict);
    w.say(ALICE, R1, "yes abcde");
    let old_send = w.held_of(Kind::Verdict)[0].id;
    w.ask(S1, "abcde");
    w.mark();

    w.release(old_send, Some(failed()));
    w.drive();

    assert_eq!(w.trace(), ["drop - StaleOutcome"]);
    assert_eq!(w.phases(), ["s1 abcde pending"]);
    assert_eq!(w.state().sessions()[&sid(S1)], mc_model::SessionPhase::Live);
}

#[test]
fn a_failed_post_drops_the_prompt() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.fail_next(Kind::Post);
    w.mark();

    w.ask(S1, "abcde");
    w.drive();

    assert_eq!(w.take(), ["post !r1:hs abcde", "drop - PromptPostFailed"]);
    assert!(w.state().prompts().is_empty());
    assert_eq!(w.channel.next_deadline(), None);

    let yes = w.say(ALICE, R1, "yes abcde");
    assert_eq!(
        w.trace(),
        [
            format!("notice {yes} {:?}", unknown_request_notice("abcde")),
            format!("drop {yes} UnknownRequest"),
        ]
    );
}

#[test]
fn a_post_reported_as_sent_without_an_event_drops_the_prompt() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.hold(Kind::Post);
    w.ask(S1, "abcde");
    let post = w.held_of(Kind::Post)[0].id;
    w.mark();

    w.release(post, Some(Outcome::Sent));
    w.drive();

    assert_eq!(w.trace(), ["drop - PromptPostFailed"]);
    assert!(w.state().prompts().is_empty());
}

#[test]
fn a_post_completing_after_expiry_gets_its_message_edited_to_expired() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.hold(Kind::Post);
    w.ask(S1, "abcde");
    let post = w.held_of(Kind::Post)[0].clone();
    w.mark();

    w.advance(TTL);
    assert_eq!(w.take(), ["drop - PromptExpired"]);
    w.release(post.id, None);
    w.drive();

    let Outcome::Posted { event_id } = post.outcome else {
        unreachable!()
    };
    assert_eq!(
        w.trace(),
        [format!("edit {event_id} {:?}", expired("abcde"))]
    );
    assert!(w.state().prompts().is_empty());
}

#[test]
fn a_post_failing_after_expiry_is_a_stale_outcome() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.hold(Kind::Post);
    w.ask(S1, "abcde");
    let post = w.held_of(Kind::Post)[0].id;
    w.advance(TTL);
    w.mark();

    w.release(post, Some(failed()));
    w.drive();

    assert_eq!(w.trace(), ["drop - StaleOutcome"]);
}

#[test]
fn a_superseded_post_completing_late_is_edited_to_expired_and_the_new_one_lives() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.hold(Kind::Post);
    w.ask(S1, "abcde");
    w.ask(S1, "abcde");
    let posts = w.held_of(Kind::Post);
    w.mark();

    w.release_all();
    w.drive();

    let events: Vec<_> = posts
        .iter()
        .map(|h| match &h.outcome {
            Outcome::Posted { event_id } => event_id.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    let edited: Vec<_> = w.edits().into_iter().map(|(e, _)| e).collect();
    assert_eq!(edited, [events[0].clone()]);
    assert_eq!(w.trace().len(), 1);
    assert_eq!(
        w.state().prompts()[0].phase,
        Phase::Pending {
            message: events[1].clone()
        }
    );
}

#[test]
fn posts_completing_out_of_order_each_reach_their_own_prompt() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.hold(Kind::Post);
    w.ask(S1, "aaaaa");
    w.ask(S1, "bbbbb");
    let posts = w.held_of(Kind::Post);
    w.mark();

    w.release(posts[1].id, None);
    w.release(posts[0].id, None);
    w.drive();

    assert!(w.trace().is_empty());
    let messages: Vec<_> = w
        .state()
        .prompts()
        .iter()
        .map(|p| (p.request.request_id.to_string(), p.phase.clone()))
        .collect();
    let event = |h: &Held| match &h.outcome {
        Outcome::Posted { event_id } => event_id.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        messages,
        [
            (
                "aaaaa".to_owned(),
                Phase::Pending {
                    message: event(&posts[0])
                }
            ),
            (
                "bbbbb".to_owned(),
                Phase::Pending {
                    message: event(&posts[1])
                }
            ),
        ]
    );
}

#[test]
fn evicting_a_prompt_still_being_posted_edits_it_once_posted() {
    let mut w = World::configured(|c| c.max_prompts = 1);
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.hold(Kind::Post);
    w.ask(S1, "aaaaa");
    let first = w.held_of(Kind::Post)[0].clone();
    w.unhold(Kind::Post);
    w.mark();

    w.ask(S1, "bbbbb");
    w.release(first.id, None);
    w.drive();

    let Outcome::Posted { event_id } = first.outcome else {
        unreachable!()
    };
    let trace = w.trace();
    assert_eq!(trace[..2], ["drop - PromptEvicted", "post !r1:hs bbbbb"]);
    assert!(
        trace[2].starts_with(&format!("edit {event_id} ")),
        "{trace:?}"
    );
    assert_eq!(trace.len(), 3);
    assert_eq!(w.phases(), ["s1 bbbbb pending"]);
}

#[test]

fn a_late_post_of_a_replaced_or_evicted_prompt_says_why_it_went() {
    let mut w = World::configured(|c| c.max_prompts = 1);
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.hold(Kind::Post);
    w.ask(S1, "aaaaa");
    w.ask(S1, "aaaaa");
    w.ask(S1, "bbbbb");
    let posts = w.held_of(Kind::Post);
    w.mark();

    w.release_all();
    w.drive();

    let event = |h: &Held| match &h.outcome {
        Outcome::Posted { event_id } => event_id.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        w.edits(),
        [
            (event(&posts[0]), superseded("aaaaa")),
            (event(&posts[1]), evicted("aaaaa")),
        ]
    );
}

#[test]
fn an_outcome_for_an_unknown_effect_is_stale() {
    let mut w = World::new();
    w.mark();

    w.input(Input::Completed {
        id: mc_model::EffectId(99),
        outcome: Outcome::Sent,
    });
    w.drive();

    assert_eq!(w.trace(), ["?: drop - StaleOutcome"]);
}

#[test]
fn the_posted_prompt_carries_its_rendered_text() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.mark();

    w.ask(S1, "abcde");
    w.drive();

    let text = w.effects().into_iter().find_map(|e| match e {
        mc_model::Effect::PostPrompt { text, identity, .. } => {
            assert_eq!(identity, mc_model::IdentityId::from(WORK));
            Some(text)
        }
        _ => None,
    });
    assert_eq!(
        text,
        Some(mc_model::prompt_text::render_prompt(
            &work_config(),
            &request("abcde"),
            Some(mc_model::prompt_text::Asker {
                label: None,
                session: &sid(S1)
            })
        ))
    );
}

#[test]
fn at_the_cap_a_re_issue_replaces_its_own_prompt_and_evicts_nothing() {
    let mut w = World::configured(|c| c.max_prompts = 2);
    let first = w.pending_prompt("aaaaa");
    w.ask(S1, "bbbbb");
    let second = w.prompt_event("bbbbb");
    w.mark();

    w.ask(S1, "bbbbb");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("edit {second} {:?}", superseded("bbbbb")),
            format!("drop {second} PromptSuperseded"),
            "post !r1:hs bbbbb".to_owned(),
        ]
    );
    assert_eq!(w.phases(), ["s1 aaaaa pending", "s1 bbbbb pending"]);
    assert_eq!(
        w.state().prompts()[0].phase,
        Phase::Pending { message: first }
    );
}

#[test]
fn evicting_a_prompt_whose_verdict_is_being_sent_still_shows_its_verdict() {
    let mut w = World::configured(|c| c.max_prompts = 1);
    let first = w.pending_prompt("aaaaa");
    w.hold(Kind::Verdict);
    w.say(ALICE, R1, "yes aaaaa");
    let send = w.held_of(Kind::Verdict)[0].id;

    w.ask(S1, "bbbbb");
    w.release(send, None);
    w.drive();

    let last_edit_of_first = w
        .edits()
        .into_iter()
        .filter(|(e, _)| *e == first)
        .map(|(_, text)| text)
        .next_back();
    assert_eq!(w.verdicts(S1), [("aaaaa".to_owned(), Behavior::Allow)]);
    assert_eq!(last_edit_of_first, Some(allowed_by_reply("aaaaa")));
}

#[test]
fn at_the_cap_an_unanswered_prompt_goes_before_an_answered_one() {
    let mut w = World::configured(|c| c.max_prompts = 2);
    let answered = w.pending_prompt("aaaaa");
    w.ask(S1, "bbbbb");
    let open = w.prompt_event("bbbbb");
    // Away after a restart: its prompts stay answerable (a closed stream
    // would withdraw them).
    w.restart();
    w.say(ALICE, R1, "yes aaaaa");
    w.attach(S2);
    w.mark();

    w.ask(S2, "ccccc");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("edit {open} {:?}", evicted("bbbbb")),
            format!("drop {open} PromptEvicted"),
            "post !r1:hs ccccc".to_owned(),
        ]
    );
    assert_eq!(w.phases(), ["s1 aaaaa decided", "s2 ccccc pending"]);
    assert_eq!(w.state().prompts()[0].phase.message(), Some(&answered));
}

#[test]
fn at_the_cap_with_every_prompt_answered_the_oldest_goes() {
    let mut w = World::configured(|c| c.max_prompts = 2);
    let first = w.pending_prompt("aaaaa");
    w.ask(S1, "bbbbb");
    // Away after a restart: its prompts stay answerable (a closed stream
    // would withdraw them).
    w.restart();
    w.say(ALICE, R1, "yes aaaaa");
    w.say(ALICE, R1, "no bbbbb");
    w.attach(S2);
    w.mark();

    w.ask(S2, "ccccc");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("edit {first} {:?}", evicted("aaaaa")),
            format!("drop {first} PromptEvicted"),
            "post !r1:hs ccccc".to_owned(),
        ]
    );
    assert_eq!(w.phases(), ["s1 bbbbb decided", "s2 ccccc pending"]);
}
