//! Withdrawn prompts (docs/decisions/0030-withdrawn-prompts.md): a session's
//! stream closing withdraws its unanswered prompts (edited to say so; an answer or
//! a vote gets a notice and counts for nothing); attaching again opens them.

use crate::harness::*;
use mc_model::{Behavior, DropReason, Effect, PromptText};

const WITHDRAWN_WHY: &str = "The session that asked disconnected, so an answer here counts \
                             for nothing. This prompt opens again if the session connects again.";

fn withdrawn_notice(id: &str) -> String {
    format!(
        "Permission request {id} is withdrawn: the session that asked disconnected, so this \
         answer counts for nothing. The prompt opens again if the session connects again; \
         answer it then."
    )
}

fn edit_texts(w: &World) -> Vec<(mc_model::EventId, PromptText)> {
    w.effects()
        .into_iter()
        .filter_map(|e| match e {
            Effect::EditPrompt { event_id, text, .. } => Some((event_id, text)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_closed_stream_withdraws_the_prompt_in_plain_text_and_html() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.ask(S1, "abcde");
    let prompt = w.prompt_event("abcde");
    w.mark();
    w.detach(S1);
    let edits = edit_texts(&w);
    assert_eq!(edits.len(), 1);
    assert_eq!(edits[0].0, prompt);
    assert_eq!(
        edits[0].1.plain,
        format!("⏸ Withdrawn: permission request abcde (Bash). {WITHDRAWN_WHY}")
    );
    assert_eq!(
        edits[0].1.html,
        format!(
            "<p>⏸ Withdrawn: permission request <code>abcde</code> (<b>Bash</b>).</p><p>{WITHDRAWN_WHY}</p>"
        )
    );
    assert_eq!(w.phases(), ["s1 abcde withdrawn"]);
}

#[test]
fn a_labelled_sessions_withdrawn_prompt_names_it() {
    let mut w = World::new();
    w.attach_labelled(S1, "api");
    let room = label_room("api");
    w.say(ALICE, room.as_str(), "hello");
    w.ask(S1, "abcde");
    w.mark();
    w.detach(S1);
    let edits = edit_texts(&w);
    assert_eq!(edits.len(), 1);
    assert!(
        edits[0]
            .1
            .plain
            .starts_with("⏸ Withdrawn: permission request abcde (Bash) from api (session s1). "),
        "{}",
        edits[0].1.plain
    );
    assert!(edits[0]
        .1
        .html
        .contains(" from <b>api (session s1)</b>.</p>"));
}

#[test]
fn an_answer_to_a_withdrawn_prompt_gets_a_notice_and_counts_for_nothing() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.ask(S1, "abcde");
    let prompt = w.prompt_event("abcde");
    w.detach(S1);
    w.mark();
    let answer = w.say(ALICE, R1, "yes abcde");
    assert_eq!(w.notices(), [(answer.clone(), withdrawn_notice("abcde"))]);
    assert_eq!(w.drops(), [(Some(answer), DropReason::PromptWithdrawn)]);
    w.mark();
    let vote = w.react(ALICE, &prompt, "👍");
    assert_eq!(w.notices(), [(prompt.clone(), withdrawn_notice("abcde"))]);
    assert_eq!(w.drops(), [(Some(vote), DropReason::PromptWithdrawn)]);
    w.advance(60_000);
    assert_eq!(w.all_verdicts(), []);
    assert_eq!(w.phases(), ["s1 abcde withdrawn"]);
}

#[test]
fn attaching_again_opens_the_prompt_as_it_was_asked_and_it_is_answered_then() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.mark();
    w.ask(S1, "abcde");
    let prompt = w.prompt_event("abcde");
    let asked = w
        .effects()
        .into_iter()
        .find_map(|e| match e {
            Effect::PostPrompt { text, .. } => Some(text.plain),
            _ => None,
        })
        .expect("the prompt");
    w.detach(S1);
    w.mark();
    w.attach(S1);
    assert_eq!(w.edits(), [(prompt, asked)]);
    assert_eq!(w.phases(), ["s1 abcde pending"]);
    w.mark();
    w.say(ALICE, R1, "yes abcde");
    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Allow)]);
}

#[test]
fn votes_settling_when_the_stream_closes_are_dropped_with_the_withdrawal() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.ask(S1, "abcde");
    let prompt = w.prompt_event("abcde");
    w.react(ALICE, &prompt, "👍");
    assert_eq!(w.phases(), ["s1 abcde settling"]);
    w.detach(S1);
    w.attach(S1);
    w.mark();
    w.advance(60_000);
    assert_eq!(
        w.all_verdicts(),
        [],
        "the vote before the withdrawal counts for nothing"
    );
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn a_prompt_posted_after_its_session_left_is_withdrawn_when_the_post_completes() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.hold(Kind::Post);
    w.ask(S1, "abcde");
    w.detach(S1);
    w.mark();
    w.release_all();
    let edits = w.edits();
    assert_eq!(edits.len(), 1);
    assert!(edits[0]
        .1
        .starts_with("⏸ Withdrawn: permission request abcde"));
    assert_eq!(w.phases(), ["s1 abcde withdrawn"]);
}

#[test]
fn only_the_closed_sessions_prompts_are_withdrawn_and_answered_ones_wait_for_it() {
    let mut w = World::new();
    w.attach(S1);
    w.attach(S2);
    w.say(ALICE, R1, "hello");
    w.ask(S1, "abcde");
    w.ask(S2, "fghij");
    w.ask(S1, "qrstu");
    w.hold(Kind::Verdict);
    w.say(ALICE, R1, "yes qrstu");
    w.mark();
    w.detach(S1);
    let withdrawn: Vec<String> = w.edits().into_iter().map(|(_, text)| text).collect();
    assert_eq!(withdrawn.len(), 1, "{withdrawn:?}");
    assert!(withdrawn[0].starts_with("⏸ Withdrawn: permission request abcde"));
    assert_eq!(
        w.phases(),
        [
            "s1 abcde withdrawn",
            "s2 fghij pending",
            "s1 qrstu delivering"
        ]
    );
}

#[test]
fn a_withdrawn_prompt_still_expires_at_its_time() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.ask(S1, "abcde");
    w.detach(S1);
    w.mark();
    w.advance(work_config().prompt_ttl_ms);
    assert_eq!(
        w.edits().last().map(|(_, t)| t.clone()),
        Some(expired("abcde"))
    );
    assert_eq!(w.phases(), Vec::<String>::new());
}
