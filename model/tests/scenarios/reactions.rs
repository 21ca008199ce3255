//! Verdicts by reaction: the settle window, deny winning, withdrawal, and reactions
//! that are only chat.

use crate::harness::*;
use mc_model::{Behavior, Phase};

fn allowed_with(key: &str) -> String {
    format!("✅ Allowed by {ALICE} with {key}: permission request abcde (Bash)")
}

fn denied_with(key: &str) -> String {
    format!("❌ Denied by {ALICE} with {key}: permission request abcde (Bash)")
}

#[test]
fn a_thumbs_up_with_emoji_selector_approves_exactly_when_the_settle_window_ends() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let vote = w.react(ALICE, &prompt, THUMBS_UP_EMOJI);
    assert_eq!(w.channel.next_deadline(), Some(at(SETTLE)));

    w.advance(SETTLE - 1);
    assert!(w.take().is_empty());
    assert_eq!(w.phases(), ["s1 abcde settling"]);
    w.advance(1);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("decided s1 abcde allow by {ALICE} via reaction {vote} {THUMBS_UP_EMOJI}"),
            "verdict s1 abcde allow".to_owned(),
            format!("edit {prompt} {:?}", allowed_with(THUMBS_UP_EMOJI)),
        ]
    );
    assert_eq!(w.times(), [at(SETTLE); 3]);
}

#[test]
fn a_thumbs_up_with_a_skin_tone_approves() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let vote = w.react(ALICE, &prompt, THUMBS_UP_TONE);

    w.advance(SETTLE);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("decided s1 abcde allow by {ALICE} via reaction {vote} {THUMBS_UP_TONE}"),
            "verdict s1 abcde allow".to_owned(),
            format!("edit {prompt} {:?}", allowed_with(THUMBS_UP_TONE)),
        ]
    );
}

#[test]
fn the_settle_window_is_configurable() {
    let mut w = World::configured(|c| c.settle_ms = 500);
    let prompt = w.pending_prompt("abcde");
    w.react(ALICE, &prompt, THUMBS_UP);

    w.advance(499);
    assert!(w.take().is_empty());
    w.advance(1);
    w.drive();

    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Allow)]);
}

#[test]
fn a_thumbs_down_after_a_thumbs_up_in_the_window_denies() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    w.react(ALICE, &prompt, THUMBS_UP);
    w.advance(1_000);
    let down = w.react(ALICE, &prompt, THUMBS_DOWN);
    w.mark();

    w.advance(SETTLE - 1_000);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("decided s1 abcde deny by {ALICE} via reaction {down} {THUMBS_DOWN}"),
            "verdict s1 abcde deny".to_owned(),
            format!("edit {prompt} {:?}", denied_with(THUMBS_DOWN)),
        ]
    );
    assert_eq!(
        w.times(),
        [at(SETTLE); 3],
        "a later vote does not extend the window"
    );
}

#[test]
fn a_thumbs_down_before_a_thumbs_up_in_the_window_denies() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let down = w.react(ALICE, &prompt, "❌");
    w.react(ALICE, &prompt, THUMBS_UP);

    w.advance(SETTLE);
    w.drive();

    assert_eq!(
        w.trace()[0],
        format!("decided s1 abcde deny by {ALICE} via reaction {down} ❌")
    );
    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Deny)]);
}

#[test]
fn of_several_approvals_the_first_decides() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let first = w.react(ALICE, &prompt, "✅");
    w.react(ALICE, &prompt, THUMBS_UP);

    w.advance(SETTLE);
    w.drive();

    assert_eq!(
        w.trace()[0],
        format!("decided s1 abcde allow by {ALICE} via reaction {first} ✅")
    );
}

#[test]
fn a_vote_withdrawn_by_its_voter_inside_the_window_cancels_the_verdict() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let vote = w.react(ALICE, &prompt, THUMBS_UP);
    w.advance(SETTLE - 1);

    w.redact(ALICE, &vote);
    w.advance(1);
    w.drive();

    assert!(w.trace().is_empty());
    assert_eq!(w.phases(), ["s1 abcde pending"]);
    assert_eq!(w.channel.next_deadline(), Some(at(TTL)));
}

#[test]
fn after_a_withdrawal_the_prompt_can_be_answered_by_text() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let vote = w.react(ALICE, &prompt, THUMBS_UP);
    w.redact(ALICE, &vote);
    w.advance(SETTLE);
    w.mark();

    let no = w.say(ALICE, R1, "no abcde");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("decided s1 abcde deny by {ALICE} via text {no}"),
            "verdict s1 abcde deny".to_owned(),
            format!("edit {prompt} {:?}", denied_by_reply("abcde")),
        ]
    );
}

#[test]
fn after_a_withdrawal_a_new_vote_opens_a_new_window() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let vote = w.react(ALICE, &prompt, THUMBS_UP);
    w.redact(ALICE, &vote);
    w.advance(SETTLE);
    w.advance(10_000);
    w.react(ALICE, &prompt, THUMBS_DOWN);
    w.mark();

    w.advance(SETTLE);
    w.drive();

    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Deny)]);
    assert_eq!(w.times()[0], at(SETTLE + 10_000 + SETTLE));
}

#[test]
fn withdrawing_one_of_two_votes_leaves_the_other_to_decide() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let down = w.react(ALICE, &prompt, THUMBS_DOWN);
    let up = w.react(ALICE, &prompt, THUMBS_UP);
    w.redact(ALICE, &down);
    w.mark();

    w.advance(SETTLE);
    w.drive();

    assert_eq!(
        w.trace()[0],
        format!("decided s1 abcde allow by {ALICE} via reaction {up} {THUMBS_UP}")
    );
}

#[test]
fn a_text_verdict_inside_the_window_decides_at_once() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    w.react(ALICE, &prompt, THUMBS_UP);
    w.mark();

    let no = w.say(ALICE, R1, "no abcde");
    w.advance(SETTLE);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("decided s1 abcde deny by {ALICE} via text {no}"),
            "verdict s1 abcde deny".to_owned(),
            format!("edit {prompt} {:?}", denied_by_reply("abcde")),
        ]
    );
    assert_eq!(w.times(), [START; 3]);
}

#[test]
fn a_withdrawal_at_the_end_of_the_window_comes_too_late() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let vote = w.react(ALICE, &prompt, THUMBS_UP);
    w.hold(Kind::Verdict);
    w.now = at(SETTLE);
    w.mark();

    let redaction = w.redact(ALICE, &vote);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("decided s1 abcde allow by {ALICE} via reaction {vote} {THUMBS_UP}"),
            "verdict s1 abcde allow".to_owned(),
            format!("drop {redaction} RedactionOfUnpushed"),
        ]
    );
}

#[test]
fn a_redaction_after_the_verdict_changes_nothing() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let vote = w.react(ALICE, &prompt, THUMBS_UP);
    w.advance(SETTLE);
    w.mark();

    let redaction = w.redact(ALICE, &vote);
    w.drive();

    assert_eq!(w.trace(), [format!("drop {redaction} RedactionOfUnpushed")]);
}

#[test]
fn a_redaction_of_a_vote_by_another_user_does_not_withdraw_it() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let vote = w.react(ALICE, &prompt, THUMBS_UP);
    w.mark();

    let redaction = w.redact(BOB, &vote);
    w.advance(SETTLE);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("drop {redaction} WithdrawalByOther"),
            format!("decided s1 abcde allow by {ALICE} via reaction {vote} {THUMBS_UP}"),
            "verdict s1 abcde allow".to_owned(),
            format!("edit {prompt} {:?}", allowed_with(THUMBS_UP)),
        ]
    );
}

#[test]
fn a_redaction_event_seen_twice_is_a_duplicate() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let vote = w.react(ALICE, &prompt, THUMBS_UP);
    let redaction = w.redaction(BOB, &vote);
    w.send_redaction(redaction.clone());
    w.mark();

    w.send_redaction(redaction.clone());
    w.drive();

    assert_eq!(
        w.trace(),
        [format!("drop {} Duplicate", redaction.event_id)]
    );
}

#[test]
fn a_reaction_on_a_message_that_is_not_a_prompt_is_pushed_as_a_reaction() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    let hello = w.say(BOB, R1, "hello");
    w.mark();

    let reaction = w.react(ALICE, &hello, THUMBS_UP_EMOJI);
    w.drive();

    assert_eq!(
        w.trace(),
        [format!(
            "push s1 {reaction} reaction {:?}",
            format!("reacted {THUMBS_UP_EMOJI}")
        )]
    );
    let push = &w.pushes(S1)[0];
    assert_eq!(push.meta("kind"), Some("reaction"));
    assert_eq!(push.meta("reaction_key"), Some(THUMBS_UP_EMOJI));
    assert_eq!(push.meta("reacted_to"), Some(hello.as_str()));
    assert_eq!(push.meta("sender"), Some(ALICE));
    assert_eq!(
        push.meta("user"),
        Some(ALICE),
        "reactions carry no display name"
    );
    assert_eq!(push.meta("event_id"), Some(reaction.as_str()));
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn a_non_approvers_thumbs_up_on_the_prompt_is_not_a_vote_and_not_pushed() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");

    let vote = w.react(BOB, &prompt, THUMBS_UP);
    w.advance(SETTLE);
    w.drive();

    assert_eq!(w.trace(), [format!("drop {vote} NotApprover")]);
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn another_reaction_on_the_prompt_is_pushed_as_chat() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");

    let party = w.react(ALICE, &prompt, "🎉");
    w.drive();

    assert_eq!(
        w.trace(),
        [format!("push s1 {party} reaction \"reacted 🎉\"")]
    );
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn a_vote_on_an_answered_prompt_is_already_answered() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    // Away after a restart: its prompts stay answerable (a closed stream
    // would withdraw them).
    w.restart();
    w.say(ALICE, R1, "yes abcde");
    w.mark();

    let vote = w.react(ALICE, &prompt, THUMBS_DOWN);
    w.drive();

    assert_eq!(w.trace(), [format!("drop {vote} AlreadyAnswered")]);
    assert_eq!(w.phases(), ["s1 abcde decided"]);
}

#[test]
fn a_vote_whose_window_would_end_after_expiry_leads_to_expiry() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    w.advance(TTL - 1_000);
    w.react(ALICE, &prompt, THUMBS_UP);
    assert_eq!(w.channel.next_deadline(), Some(at(TTL)));
    w.mark();

    w.advance(SETTLE);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("edit {prompt} {:?}", expired("abcde")),
            format!("drop {prompt} PromptExpired"),
        ]
    );
    assert_eq!(w.times(), [at(TTL); 2]);
}

#[test]
fn a_vote_whose_window_ends_exactly_at_expiry_still_decides() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    w.advance(TTL - SETTLE);
    w.react(ALICE, &prompt, THUMBS_UP);
    w.mark();

    w.advance(SETTLE);
    w.drive();

    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Allow)]);
    assert!(w.drops().is_empty());
}

#[test]
fn a_late_tick_still_decides_a_window_that_ended_before_expiry() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    w.react(ALICE, &prompt, THUMBS_UP);
    w.now = at(2 * TTL);
    w.mark();

    w.drive();

    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Allow)]);
    assert!(w.drops().is_empty());
}

#[test]
fn a_reaction_seen_twice_is_a_duplicate_and_counts_once() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let vote = w.reaction(ALICE, &prompt, THUMBS_UP);
    w.send_reaction(vote.clone());
    w.mark();

    w.send_reaction(vote.clone());
    w.drive();

    assert_eq!(w.trace(), [format!("drop {} Duplicate", vote.event_id)]);
    match &w.state().prompts()[0].phase {
        Phase::Settling { votes, until, .. } => {
            assert_eq!(votes.len(), 1);
            assert_eq!(*until, at(SETTLE));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_settling_prompt_records_its_votes_in_arrival_order() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let up = w.react(ALICE, &prompt, THUMBS_UP_TONE);
    let down = w.react(ALICE, &prompt, THUMBS_DOWN);

    match &w.state().prompts()[0].phase {
        Phase::Settling {
            message,
            until,
            votes,
        } => {
            assert_eq!(message, &prompt);
            assert_eq!(*until, at(SETTLE));
            let summary: Vec<_> = votes
                .iter()
                .map(|(id, v)| (id.clone(), v.voter.clone(), v.key.clone(), v.behavior))
                .collect();
            assert_eq!(
                summary,
                [
                    (up, user(ALICE), THUMBS_UP_TONE.to_owned(), Behavior::Allow),
                    (down, user(ALICE), THUMBS_DOWN.to_owned(), Behavior::Deny),
                ]
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn votes_on_two_prompts_each_decide_their_own() {
    let mut w = World::new();
    let first = w.pending_prompt("aaaaa");
    w.ask(S1, "bbbbb");
    let second = w.prompt_event("bbbbb");
    w.mark();

    w.react(ALICE, &second, THUMBS_DOWN);
    w.react(ALICE, &first, THUMBS_UP);
    w.advance(SETTLE);
    w.drive();

    assert_eq!(
        w.all_verdicts(),
        [
            ("s1".to_owned(), "aaaaa".to_owned(), Behavior::Allow),
            ("s1".to_owned(), "bbbbb".to_owned(), Behavior::Deny),
        ]
    );
}

#[test]
fn a_vote_by_someone_no_longer_an_approver_when_the_window_ends_does_not_count() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    w.react(ALICE, &prompt, THUMBS_UP);
    let mut reloaded = work_config();
    reloaded.approvers = Some([user(BOB)].into());
    w.channel.add_identity(identity(WORK), reloaded).unwrap();
    w.mark();

    w.advance(SETTLE);
    w.drive();

    assert!(w.trace().is_empty());
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn after_a_reload_the_remaining_approvers_vote_still_decides() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let mut both = work_config();
    both.approvers = Some([user(ALICE), user(BOB)].into());
    w.channel.add_identity(identity(WORK), both).unwrap();
    w.react(ALICE, &prompt, THUMBS_DOWN);
    let up = w.react(BOB, &prompt, THUMBS_UP);
    let mut only_bob = work_config();
    only_bob.approvers = Some([user(BOB)].into());
    w.channel.add_identity(identity(WORK), only_bob).unwrap();
    w.mark();

    w.advance(SETTLE);
    w.drive();

    assert_eq!(
        w.trace()[0],
        format!("decided s1 abcde allow by {BOB} via reaction {up} {THUMBS_UP}")
    );
}

#[test]
fn an_allow_typed_while_a_deny_reaction_settles_yields_to_the_deny() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let down = w.react(ALICE, &prompt, THUMBS_DOWN);
    w.mark();

    let yes = w.say(ALICE, R1, "yes abcde");
    w.drive();
    assert_eq!(
        w.trace(),
        [format!(
            "notice {yes} \"A deny reaction on abcde is settling: deny wins unless it is withdrawn.\""
        )]
    );

    w.mark();
    w.advance(SETTLE);
    w.drive();
    assert_eq!(
        w.trace(),
        [
            format!("decided s1 abcde deny by {ALICE} via reaction {down} {THUMBS_DOWN}"),
            "verdict s1 abcde deny".to_owned(),
            format!("edit {prompt} {:?}", denied_with(THUMBS_DOWN)),
        ]
    );
}

#[test]
fn an_allow_typed_while_only_an_approval_settles_allows_by_text() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    w.react(ALICE, &prompt, THUMBS_UP);
    w.mark();

    let yes = w.say(ALICE, R1, "yes abcde");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("decided s1 abcde allow by {ALICE} via text {yes}"),
            "verdict s1 abcde allow".to_owned(),
            format!("edit {prompt} {:?}", allowed_by_reply("abcde")),
        ]
    );
}

#[test]
fn a_withdrawn_deny_reaction_no_longer_overrules_a_typed_allow() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let down = w.react(ALICE, &prompt, THUMBS_DOWN);
    w.redact(ALICE, &down);
    w.mark();

    w.say(ALICE, R1, "yes abcde");
    w.drive();

    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Allow)]);
    assert!(w.notices().is_empty());
}

#[test]
fn a_typed_allow_held_back_by_a_deny_decides_when_the_deny_is_withdrawn() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let down = w.react(ALICE, &prompt, THUMBS_DOWN);
    let yes = w.say(ALICE, R1, "yes abcde");
    w.redact(ALICE, &down);
    w.mark();

    w.advance(SETTLE);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("decided s1 abcde allow by {ALICE} via text {yes}"),
            "verdict s1 abcde allow".to_owned(),
            format!("edit {prompt} {:?}", allowed_by_reply("abcde")),
        ]
    );
    assert_eq!(w.times(), [at(SETTLE); 3]);
}

#[test]
fn a_typed_deny_while_a_deny_reaction_settles_decides_at_once() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    w.react(ALICE, &prompt, THUMBS_DOWN);
    w.mark();

    let no = w.say(ALICE, R1, "no abcde");
    w.drive();

    assert_eq!(
        w.trace()[0],
        format!("decided s1 abcde deny by {ALICE} via text {no}")
    );
}
