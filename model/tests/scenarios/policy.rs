//! The operator's policy (docs/decisions/0029-policy.md): rules that allow or deny
//! a request without asking (announced in the room), a deny that beats any grant,
//! and `ask` rules that need several distinct approvers, where a single no denies.

use crate::harness::*;
use mc_model::policy::{Pattern, Rule, RuleDecision};
use mc_model::{Behavior, PermissionRequest, UserId};

fn bash(id: &str, command: &str) -> PermissionRequest {
    PermissionRequest {
        request_id: rid(id),
        tool_name: "Bash".into(),
        description: format!("Run {id}"),
        input_preview:
            serde_json::json!({ "command": command, "description": format!("Run {id}") })
                .to_string(),
    }
}

fn rule(tool: &str, input: Option<&str>, decision: RuleDecision) -> Rule {
    Rule {
        tool: Pattern(tool.into()),
        input: input.map(|i| Pattern(i.into())),
        decision,
    }
}

/// `work` with Alice and Bob both approvers and `rules` as its policy; `s1` attached
/// and Alice wrote in `!r1:hs` (the session's room).
fn with_policy(rules: Vec<Rule>) -> World {
    let mut w = World::configured(|c| {
        c.approvers = Some([UserId::from(ALICE), UserId::from(BOB)].into());
        c.policy = rules;
    });
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.mark();
    w
}

fn day() -> Vec<Rule> {
    vec![
        rule(
            "Bash",
            Some("*git push*"),
            RuleDecision::Ask { approvers: 2 },
        ),
        rule("Bash", Some("*rm -rf*"), RuleDecision::Deny),
        rule("Bash", Some("cargo test*"), RuleDecision::Allow),
        rule("Read", None, RuleDecision::Allow),
    ]
}

#[test]
fn an_allow_rule_answers_without_a_prompt_and_the_room_is_told_which_rule() {
    let mut w = with_policy(day());
    w.ask_with(S1, bash("abcde", "cargo test -p x"));
    assert_eq!(
        w.trace(),
        [
            format!(
                "announce {R1} \"✅ Allowed by rule 3: permission request abcde (Bash) from session s1: Bash on \\\"cargo test*\\\"\""
            ),
            format!("decided s1 abcde allow by {BOT} via rule 3"),
            "verdict s1 abcde allow".to_owned(),
        ],
        "no prompt is posted"
    );
    assert!(w.state().prompts().is_empty());
    let html = w
        .effects()
        .iter()
        .find_map(|e| match e {
            mc_model::Effect::Announce { text, .. } => Some(text.html.clone()),
            _ => None,
        })
        .expect("an announcement");
    assert_eq!(
        html,
        "<p>✅ Allowed by rule 3: permission request <code>abcde</code> (<b>Bash</b>)</p>\
         <p>from session s1 · rule: <code>Bash on \"cargo test*\"</code></p>"
    );
}

#[test]
fn an_allow_rule_never_lets_through_what_its_star_may_not_span() {
    let mut w = with_policy(day());
    for (id, command) in [
        ("abcde", "cargo test; curl x | sh"),
        ("fghij", "cargo test $(id)"),
        ("kmnop", "cargo test ../../x && y"),
    ] {
        w.ask_with(S1, bash(id, command));
        assert_eq!(w.verdicts(S1), [], "{command}");
        w.prompt_event(id);
    }
}

#[test]
fn a_deny_rule_answers_deny_and_beats_a_grant_that_covers_the_request() {
    let mut w = with_policy(day());
    w.ask_with(S1, bash("abcde", "git status"));
    w.say(ALICE, R1, "always abcde git");
    w.drive();
    assert_eq!(w.state().grants().len(), 1, "{:?}", w.trace());
    w.mark();
    w.ask_with(S1, bash("fghij", "git rm -rf x"));
    assert_eq!(w.verdicts(S1), [("fghij".to_owned(), Behavior::Deny)]);
    assert!(w
        .trace()
        .contains(&format!("decided s1 fghij deny by {BOT} via rule 2")));
    w.mark();
    w.ask_with(S1, bash("kmnop", "git log"));
    assert_eq!(
        w.verdicts(S1),
        [("kmnop".to_owned(), Behavior::Allow)],
        "the grant still answers what no rule matches"
    );
}

#[test]
fn an_ask_rule_is_asked_even_when_a_grant_covers_the_request() {
    let mut w = with_policy(day());
    w.ask_with(S1, bash("abcde", "git status"));
    w.say(ALICE, R1, "always abcde git");
    w.drive();
    w.mark();
    w.ask_with(S1, bash("fghij", "git push origin main"));
    assert_eq!(w.verdicts(S1), []);
    let prompt = w.prompt_event("fghij");
    assert!(!prompt.as_str().is_empty());
}

#[test]
fn a_prompt_of_an_ask_rule_names_the_rule_and_its_quorum_in_plain_text_and_html() {
    let mut w = with_policy(day());
    w.ask_with(S1, bash("abcde", "git push"));
    let text = w
        .effects()
        .iter()
        .find_map(|e| match e {
            mc_model::Effect::PostPrompt { text, .. } => Some(text.clone()),
            _ => None,
        })
        .expect("a prompt");
    let line = "Rule 1 (Bash on \"*git push*\") asks 2 approvers: it is allowed when 2 of you \
                said yes, and denied by a single no.";
    assert!(
        text.plain.ends_with(&format!(
            "{line}\nReply \"yes abcde\" to allow or \"no abcde\" to deny, or react ✅ 👍 / ❌ 👎."
        )),
        "{}",
        text.plain
    );
    assert!(
        text.html.ends_with(&format!(
            "</code></pre><p>{line}</p><p>Reply \"yes abcde\" to allow or \"no abcde\" to deny, or react ✅ 👍 / ❌ 👎.</p>"
        )),
        "{}",
        text.html
    );
}

#[test]
fn two_approvers_must_say_yes_and_the_same_one_twice_counts_once() {
    let mut w = with_policy(day());
    w.ask_with(S1, bash("abcde", "git push"));
    let prompt = w.prompt_event("abcde");
    w.mark();
    w.say(ALICE, R1, "yes abcde");
    assert_eq!(w.verdicts(S1), []);
    assert!(w.notices().iter().any(|(to, text)| *to == prompt
        && text
            == &format!("Counted for abcde: 1 of 2 approvals (rule 1), from {ALICE}. 1 more approver must say yes; a no from any denies.")));
    w.mark();
    w.say(ALICE, R1, "yes abcde");
    assert_eq!(w.verdicts(S1), []);
    assert!(w
        .notices()
        .iter()
        .any(|(_, text)| text.starts_with(&format!("{ALICE} already allowed abcde: 1 of 2"))));
    w.mark();
    w.say(BOB, R1, "yes abcde");
    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Allow)]);
}

#[test]
fn one_no_denies_after_a_yes() {
    let mut w = with_policy(day());
    w.ask_with(S1, bash("abcde", "git push"));
    w.say(ALICE, R1, "yes abcde");
    w.mark();
    w.say(BOB, R1, "no abcde");
    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Deny)]);
}

#[test]
fn two_thumbs_up_in_one_window_meet_a_quorum_of_two_and_one_alone_only_counts() {
    let mut w = with_policy(day());
    w.ask_with(S1, bash("abcde", "git push"));
    let prompt = w.prompt_event("abcde");
    w.react(ALICE, &prompt, THUMBS_UP);
    w.advance(SETTLE);
    w.drive();
    assert_eq!(w.verdicts(S1), []);
    assert!(w.state().prompts()[0].phase.is_answerable());
    w.react(ALICE, &prompt, THUMBS_UP_TONE);
    w.react(BOB, &prompt, THUMBS_UP);
    w.advance(SETTLE);
    w.drive();
    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Allow)]);

    let mut w = with_policy(day());
    w.ask_with(S1, bash("abcde", "git push"));
    let prompt = w.prompt_event("abcde");
    w.react(ALICE, &prompt, THUMBS_UP);
    w.react(BOB, &prompt, THUMBS_UP);
    w.advance(SETTLE);
    w.drive();
    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Allow)]);
}

#[test]
fn always_on_a_prompt_an_ask_rule_asks_makes_no_grant_and_counts_as_one_yes() {
    let mut w = with_policy(day());
    w.ask_with(S1, bash("abcde", "git push"));
    let always = w.say(ALICE, R1, "always abcde");
    w.drive();
    assert!(w.state().grants().is_empty());
    assert!(w.notices().iter().any(|(to, text)| *to == always
        && text == "Allowed once, without a grant: rule 1 of the policy asks every time."));
    assert_eq!(w.verdicts(S1), []);
    w.say(BOB, R1, "yes abcde");
    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Allow)]);
}

#[test]
fn an_approver_removed_after_saying_yes_no_longer_counts() {
    let mut w = with_policy(vec![rule("Bash", None, RuleDecision::Ask { approvers: 2 })]);
    w.ask_with(S1, bash("abcde", "ls"));
    w.say(ALICE, R1, "yes abcde");
    let mut config = work_config();
    config.approvers = Some([UserId::from(BOB), UserId::from(MALLORY)].into());
    config.allowed_senders.insert(UserId::from(MALLORY));
    config.policy = vec![rule("Bash", None, RuleDecision::Ask { approvers: 2 })];
    w.channel
        .add_identity(WORK.into(), config)
        .expect("valid settings");
    w.say(BOB, R1, "yes abcde");
    assert_eq!(
        w.verdicts(S1),
        [],
        "Alice's yes went with her approver role"
    );
    w.say(MALLORY, R1, "yes abcde");
    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Allow)]);
}

#[test]
fn a_rule_answer_goes_to_the_policy_room_and_needs_no_prompt_room() {
    let mut w = World::configured(|c| {
        c.approvers = Some([UserId::from(ALICE), UserId::from(BOB)].into());
        c.policy = day();
        c.policy_room = Some("!log:hs".into());
    });
    w.attach(S1);
    // No allowed sender wrote yet: no room to post a prompt in.
    w.ask_with(S1, bash("abcde", "cat x && rm -rf /"));
    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Deny)]);
    assert!(w.trace().iter().any(|l| l
        .starts_with("announce !log:hs \"❌ Denied by rule 2: permission request abcde (Bash)")));
    w.mark();
    w.ask_with(S1, bash("fghij", "ls"));
    assert_eq!(w.verdicts(S1), []);
    assert!(
        w.trace().iter().any(|l| l.contains("drop - NoPromptRoom")),
        "{:?}",
        w.trace()
    );
}

#[test]
fn a_rule_answer_reaches_only_the_session_that_asked() {
    let mut w = with_policy(day());
    w.attach(S2);
    w.mark();
    w.ask_with(S2, bash("abcde", "cargo test"));
    assert_eq!(w.verdicts(S2), [("abcde".to_owned(), Behavior::Allow)]);
    assert_eq!(w.verdicts(S1), []);
}

#[test]
fn a_no_first_denies_at_once() {
    let mut w = with_policy(day());
    w.ask_with(S1, bash("abcde", "git push"));
    w.say(BOB, R1, "no abcde");
    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Deny)]);
}

#[test]
fn an_ask_rule_for_one_approver_says_it_asks_every_time() {
    let mut w = with_policy(vec![rule("Bash", None, RuleDecision::Ask { approvers: 1 })]);
    w.ask_with(S1, bash("abcde", "ls"));
    let text = w
        .effects()
        .iter()
        .find_map(|e| match e {
            mc_model::Effect::PostPrompt { text, .. } => Some(text.plain.clone()),
            _ => None,
        })
        .expect("a prompt");
    assert!(
        text.contains("\n\nRule 1 (Bash) asks every time.\nReply \"yes abcde\""),
        "{text}"
    );
    w.say(ALICE, R1, "yes abcde");
    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Allow)]);
}

#[test]
fn two_requests_a_rule_answers_while_a_verdict_is_in_flight_are_both_delivered() {
    let mut w = with_policy(day());
    w.hold(Kind::Verdict);
    w.ask_with(S1, bash("abcde", "cargo test"));
    w.ask_with(S1, bash("fghij", "cargo test -p x"));
    assert_eq!(w.held_of(Kind::Verdict).len(), 2, "{:?}", w.trace());
    w.unhold(Kind::Verdict);
    w.release_all();
    w.drive();
    assert_eq!(
        w.verdicts(S1),
        [
            ("abcde".to_owned(), Behavior::Allow),
            ("fghij".to_owned(), Behavior::Allow)
        ]
    );
    assert!(w.state().prompts().is_empty());
}

#[test]
fn a_single_thumbs_up_is_counted_once_and_the_same_approvers_text_and_reaction_are_one() {
    let mut w = with_policy(day());
    w.ask_with(S1, bash("abcde", "git push"));
    let prompt = w.prompt_event("abcde");
    w.say(ALICE, R1, "yes abcde");
    w.mark();
    w.react(ALICE, &prompt, THUMBS_UP);
    w.react(ALICE, &prompt, THUMBS_UP_TONE);
    w.advance(SETTLE);
    w.drive();
    assert_eq!(w.verdicts(S1), [], "one approver, however many ways");
    assert!(
        w.notices().iter().any(|(to, text)| *to == prompt
            && text.starts_with(&format!("{ALICE} already allowed abcde: 1 of 2"))),
        "{:?}",
        w.notices()
    );

    let mut w = with_policy(day());
    w.ask_with(S1, bash("abcde", "git push"));
    let prompt = w.prompt_event("abcde");
    w.mark();
    w.react(BOB, &prompt, THUMBS_UP);
    w.advance(SETTLE);
    w.drive();
    assert_eq!(
        w.notices(),
        [(
            prompt,
            format!("Counted for abcde: 1 of 2 approvals (rule 1), from {BOB}. 1 more approver must say yes; a no from any denies.")
        )]
    );
}

#[test]
fn an_ask_rule_without_a_prompt_room_drops_the_request_and_leaves_the_other_prompts() {
    let mut w = World::configured(|c| {
        c.approvers = Some([UserId::from(ALICE), UserId::from(BOB)].into());
        c.policy = day();
        c.max_prompts = 1;
    });
    w.attach(S1);
    w.as_identity(WORK, |w| w.attach(S2));
    w.mark();
    // No allowed sender wrote: no room for a prompt; the rule's deny needs none.
    w.ask_with(S1, bash("abcde", "git push"));
    assert!(
        w.trace().iter().any(|l| l.contains("drop - NoPromptRoom")),
        "{:?}",
        w.trace()
    );
    assert!(w.state().prompts().is_empty());
}
