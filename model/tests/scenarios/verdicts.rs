//! Text verdicts: `yes <id>` / `no <id>` from an approver.

use crate::harness::*;
use mc_model::{Behavior, DropReason, EventId, MsgType, Phase, SessionPhase};

#[test]
fn yes_from_the_approver_allows_the_asking_session_only() {
    let mut w = World::new();
    w.attach(S2);
    let prompt = w.pending_prompt("abcde");

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
    assert!(w.verdicts(S2).is_empty());
    assert!(w.state().prompts().is_empty());
    assert_eq!(w.channel.next_deadline(), None);
}

#[test]
fn capitalised_no_with_an_uppercase_id_denies() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");

    let no = w.say(ALICE, R1, "No ABCDE");
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
fn an_approvers_emote_verdict_counts() {
    let mut w = World::new();
    w.pending_prompt("abcde");

    let emote = w.message(ALICE, R1, content(MsgType::Emote, "y abcde"));
    w.send(emote);
    w.drive();

    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Allow)]);
}

#[test]
fn a_plain_verdict_typed_in_another_room_answers_nothing_and_says_where_the_prompt_waits() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");

    let yes = w.say(ALICE, R2, "yes abcde");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!(
                "notice {yes} \"Permission request abcde waits in another room: {}. Answer it there.\"",
                link(R1, &prompt)
            ),
            format!("drop {yes} UnknownRequest"),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn a_plain_verdict_typed_in_a_third_room_links_every_room_where_the_id_waits() {
    let mut w = World::new();
    w.attach(S1);
    w.attach(S2);
    w.say(ALICE, R1, "hello");
    w.ask(S1, "abcde");
    let first = w.prompt_event("abcde");
    w.say(BOB, R2, "over here");
    w.ask(S2, "abcde");
    let second = w.prompt_event("abcde");
    w.mark();

    let yes = w.say(ALICE, "!r:hs", "yes abcde");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!(
                "notice {yes} \"Permission request abcde waits in other rooms: {}, {}. Answer it in the room of the prompt you mean.\"",
                link(R1, &first),
                link(R2, &second)
            ),
            format!("drop {yes} UnknownRequest"),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde pending", "s2 abcde pending"]);
}

#[test]
fn a_plain_verdict_in_another_room_points_nowhere_once_the_prompt_is_answered() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    w.say(ALICE, R1, "yes abcde");
    w.drive();
    w.mark();

    let again = w.say(ALICE, R2, "yes abcde");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("notice {again} {:?}", unknown_request_notice("abcde")),
            format!("drop {again} UnknownRequest"),
        ]
    );
}

#[test]
fn a_reply_verdict_from_another_room_answers_the_prompt_it_replies_to() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");

    let yes = w.related(ALICE, R2, "yes abcde", reply(&prompt, None));
    w.send(yes);
    w.drive();

    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Allow)]);
}

#[test]
fn same_id_prompts_in_different_rooms_are_told_apart_by_the_room() {
    let mut w = World::new();
    w.attach(S1);
    w.attach(S2);
    w.say(ALICE, R1, "hello");
    w.ask(S1, "abcde");
    w.say(BOB, R2, "over here");
    w.ask(S2, "abcde");
    w.mark();

    w.say(ALICE, R2, "no abcde");
    w.drive();

    assert_eq!(
        w.all_verdicts(),
        [("s2".to_owned(), "abcde".to_owned(), Behavior::Deny)]
    );
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn a_non_approvers_verdict_is_neither_pushed_nor_a_verdict() {
    let mut w = World::new();
    w.pending_prompt("abcde");

    let yes = w.say(BOB, R1, "yes abcde");
    w.drive();

    assert_eq!(w.trace(), [format!("drop {yes} NotApprover")]);
    assert_eq!(w.phases(), ["s1 abcde pending"]);
    assert!(w.state().queue().is_empty());
}

#[test]
fn an_edit_into_yes_is_neither_a_verdict_nor_pushed() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    let hello = w.say(ALICE, R1, "helo");
    w.mark();

    let edit = w.related(ALICE, R1, "* yes abcde", replacement(&hello, "yes abcde"));
    let edit = w.send(edit);
    w.drive();

    assert_eq!(w.trace(), [format!("drop {edit} VerdictShaped")]);
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn an_approvers_verdict_shaped_caption_is_neither_a_verdict_nor_pushed() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    let mut c = content(MsgType::Image, "yes abcde");
    c.attachment = Some(mc_model::Attachment {
        filename: "shot.png".into(),
        size: None,
        mimetype: None,
    });

    let image = w.message(ALICE, R1, c);
    let image = w.send(image);
    w.drive();

    assert_eq!(w.trace(), [format!("drop {image} VerdictShaped")]);
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn a_second_yes_while_the_verdict_is_being_sent_is_already_answered() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    w.hold(Kind::Verdict);
    w.say(ALICE, R1, "yes abcde");
    w.mark();

    let again = w.say(ALICE, R1, "yes abcde");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("notice {again} {:?}", already_answered_notice("abcde")),
            format!("drop {again} AlreadyAnswered"),
        ]
    );
}

#[test]
fn a_second_yes_while_the_owner_is_away_is_already_answered() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    // Away after a restart: its prompts stay answerable (a closed stream
    // would withdraw them).
    w.restart();
    w.say(ALICE, R1, "yes abcde");
    w.mark();

    let again = w.say(ALICE, R1, "no abcde");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("notice {again} {:?}", already_answered_notice("abcde")),
            format!("drop {again} AlreadyAnswered"),
        ]
    );
}

#[test]
fn a_second_yes_after_the_verdict_was_delivered_finds_no_pending_request() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    w.say(ALICE, R1, "yes abcde");
    w.mark();

    let again = w.say(ALICE, R1, "yes abcde");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("notice {again} {:?}", unknown_request_notice("abcde")),
            format!("drop {again} UnknownRequest"),
        ]
    );
}

#[test]
fn yes_for_an_unknown_id_gets_a_notice_and_is_dropped() {
    let mut w = World::new();
    w.pending_prompt("abcde");

    let yes = w.say(ALICE, R2, "yes qwert");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("notice {yes} {:?}", unknown_request_notice("qwert")),
            format!("drop {yes} UnknownRequest"),
        ]
    );
    let notice_room = w.effects().iter().find_map(|e| match e {
        mc_model::Effect::Notice { room, .. } => Some(room.clone()),
        _ => None,
    });
    assert_eq!(notice_room, Some(room(R2)));
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn yes_for_a_prompt_still_being_posted_finds_no_pending_request() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.hold(Kind::Post);
    w.ask(S1, "abcde");
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
    assert_eq!(w.phases(), ["s1 abcde posting"]);
}

/// Two sessions asked under the same id; `s2` asked second.
fn two_sessions_waiting_on_abcde(w: &mut World) -> (mc_model::EventId, mc_model::EventId) {
    w.attach(S1);
    w.attach(S2);
    w.say(ALICE, R1, "hello");
    w.ask(S1, "abcde");
    let first = w.prompt_event("abcde");
    w.ask(S2, "abcde");
    let second = w.prompt_event("abcde");
    w.mark();
    (first, second)
}

#[test]
fn a_plain_yes_for_an_id_two_sessions_wait_on_is_ambiguous() {
    let mut w = World::new();
    two_sessions_waiting_on_abcde(&mut w);

    let yes = w.say(ALICE, R1, "yes abcde");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("notice {yes} {:?}", ambiguous_notice("abcde")),
            format!("drop {yes} AmbiguousRequest"),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde pending", "s2 abcde pending"]);
}

#[test]
fn a_reply_to_one_of_two_same_id_prompts_answers_that_one() {
    let mut w = World::new();
    let (_, second) = two_sessions_waiting_on_abcde(&mut w);

    let body = format!("> <{BOT}> 🔐 Permission request abcde\n\nyes abcde");
    let yes = w.related(ALICE, R1, &body, reply(&second, None));
    let yes = w.send(yes);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("decided s2 abcde allow by {ALICE} via text {yes}"),
            "verdict s2 abcde allow".to_owned(),
            format!("edit {second} {:?}", allowed_by_reply("abcde")),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn a_reply_to_the_first_of_two_same_id_prompts_answers_the_first() {
    let mut w = World::new();
    let (first, _) = two_sessions_waiting_on_abcde(&mut w);

    let no = w.related(ALICE, R1, "no abcde", reply(&first, None));
    w.send(no);
    w.drive();

    assert_eq!(
        w.all_verdicts(),
        [("s1".into(), "abcde".into(), Behavior::Deny)]
    );
    assert_eq!(w.phases(), ["s2 abcde pending"]);
}

#[test]
fn once_one_same_id_prompt_is_answered_a_plain_yes_answers_the_other() {
    let mut w = World::new();
    let (first, _) = two_sessions_waiting_on_abcde(&mut w);
    let no = w.related(ALICE, R1, "no abcde", reply(&first, None));
    w.send(no);
    w.mark();

    w.say(ALICE, R1, "yes abcde");
    w.drive();

    assert_eq!(
        w.all_verdicts(),
        [("s2".into(), "abcde".into(), Behavior::Allow)]
    );
    assert!(w.state().prompts().is_empty());
}

#[test]
fn a_reply_to_an_answered_prompt_is_already_answered_even_if_another_waits() {
    let mut w = World::new();
    let (first, _) = two_sessions_waiting_on_abcde(&mut w);
    w.hold(Kind::Verdict);
    let no = w.related(ALICE, R1, "no abcde", reply(&first, None));
    w.send(no);
    w.mark();

    let yes = w.related(ALICE, R1, "yes abcde", reply(&first, None));
    let yes = w.send(yes);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("notice {yes} {:?}", already_answered_notice("abcde")),
            format!("drop {yes} AlreadyAnswered"),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde delivering", "s2 abcde pending"]);
}

#[test]
fn a_yes_replying_to_a_chat_message_answers_nothing_and_points_to_the_prompt() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let hello = w.say(BOB, R1, "hello");
    w.mark();

    let yes = w.related(
        ALICE,
        R1,
        "> <@bob:hs> hello\n\nyes abcde",
        reply(&hello, None),
    );
    let yes = w.send(yes);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!(
                "notice {yes} \"{} The prompt for abcde is {}: reply to it, or answer without a reply.\"",
                not_the_prompt("abcde"),
                link(R1, &prompt),
            ),
            format!("drop {yes} ReplyNotToPrompt"),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn the_pointer_to_the_prompt_is_a_matrix_to_link_to_its_message() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");

    assert_eq!(prompt, ev("$p2"));
    assert_eq!(link(R1, &prompt), "https://matrix.to/#/!r1%3Ahs/%24p2");
}

#[test]
fn a_yes_replying_to_another_prompt_answers_neither_and_points_to_its_own() {
    let mut w = World::new();
    let abcde = w.pending_prompt("abcde");
    w.ask(S1, "qwert");
    let qwert = w.prompt_event("qwert");
    w.mark();

    let yes = w.related(ALICE, R1, "yes abcde", reply(&qwert, None));
    let yes = w.send(yes);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!(
                "notice {yes} \"{} The prompt for abcde is {}: reply to it, or answer without a reply.\"",
                not_the_prompt("abcde"),
                link(R1, &abcde),
            ),
            format!("drop {yes} ReplyNotToPrompt"),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde pending", "s1 qwert pending"]);
}

#[test]
fn a_yes_replying_to_an_expired_prompt_does_not_answer_its_re_issue() {
    let mut w = World::new();
    let old = w.pending_prompt("abcde");
    w.advance(TTL);
    w.ask(S1, "abcde");
    let new = w.prompt_event("abcde");
    w.mark();

    let yes = w.related(ALICE, R1, "yes abcde", reply(&old, None));
    let yes = w.send(yes);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!(
                "notice {yes} \"{} The prompt for abcde is {}: reply to it, or answer without a reply.\"",
                not_the_prompt("abcde"),
                link(R1, &new),
            ),
            format!("drop {yes} ReplyNotToPrompt"),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn a_yes_replying_to_a_message_with_no_such_prompt_anywhere_answers_nothing_and_points_nowhere() {
    let mut w = World::new();
    w.attach(S1);
    let hello = w.say(BOB, R1, "hello");
    w.mark();

    let yes = w.related(ALICE, R1, "yes abcde", reply(&hello, None));
    let yes = w.send(yes);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("notice {yes} {:?}", not_the_prompt("abcde")),
            format!("drop {yes} ReplyNotToPrompt"),
        ]
    );
}

#[test]
fn a_misdirected_reply_points_nowhere_while_the_prompt_is_already_answered() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    // Away after a restart: its prompts stay answerable (a closed stream
    // would withdraw them).
    w.restart();
    w.say(ALICE, R1, "yes abcde");
    let hello = w.say(BOB, R1, "hello");
    w.mark();

    let no = w.related(ALICE, R1, "no abcde", reply(&hello, None));
    let no = w.send(no);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("notice {no} {:?}", not_the_prompt("abcde")),
            format!("drop {no} ReplyNotToPrompt"),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde decided"]);
}

#[test]
fn a_misdirected_reply_points_nowhere_while_two_prompts_in_the_room_share_the_id() {
    let mut w = World::new();
    w.attach(S2);
    w.pending_prompt("abcde");
    w.ask(S2, "abcde");
    let hello = w.say(BOB, R1, "hello");
    w.mark();

    let yes = w.related(ALICE, R1, "yes abcde", reply(&hello, None));
    let yes = w.send(yes);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("notice {yes} {:?}", not_the_prompt("abcde")),
            format!("drop {yes} ReplyNotToPrompt"),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde pending", "s2 abcde pending"]);
}

#[test]
fn a_misdirected_reply_points_nowhere_when_the_prompt_is_in_another_room() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    let hello = w.say(BOB, R2, "over here");
    w.mark();

    let yes = w.related(ALICE, R2, "yes abcde", reply(&hello, None));
    let yes = w.send(yes);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("notice {yes} {:?}", not_the_prompt("abcde")),
            format!("drop {yes} ReplyNotToPrompt"),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn a_misdirected_reply_points_to_the_one_answerable_prompt_past_an_answered_one() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    // Away after a restart: its prompts stay answerable (a closed stream
    // would withdraw them).
    w.restart();
    w.say(ALICE, R1, "yes abcde");
    w.attach(S2);
    w.ask(S2, "abcde");
    let open = w.prompt_event("abcde");
    let hello = w.say(BOB, R1, "hello");
    w.mark();

    let no = w.related(ALICE, R1, "no abcde", reply(&hello, None));
    let no = w.send(no);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!(
                "notice {no} \"{} The prompt for abcde is {}: reply to it, or answer without a reply.\"",
                not_the_prompt("abcde"),
                link(R1, &open),
            ),
            format!("drop {no} ReplyNotToPrompt"),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde decided", "s2 abcde pending"]);
}

#[test]
fn a_verdict_for_one_id_leaves_a_prompt_with_another_id_alone() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    w.ask(S1, "qwert");
    w.mark();

    w.say(ALICE, R1, "yes qwert");
    w.drive();

    assert_eq!(w.verdicts(S1), [("qwert".to_owned(), Behavior::Allow)]);
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn a_verdict_while_the_owner_is_away_is_delivered_when_it_attaches() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    // Away after a restart: its prompts stay answerable (a closed stream
    // would withdraw them).
    w.restart();
    w.attach(S2);
    w.mark();

    let yes = w.say(ALICE, R1, "yes abcde");
    assert_eq!(
        w.take(),
        [
            format!("decided s1 abcde allow by {ALICE} via text {yes}"),
            format!(
                "notice {prompt} \"The session that asked, session s1, is not connected: the \
                 answer reaches it when it connects again.\""
            ),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde decided"]);

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
fn another_session_attaching_does_not_take_a_waiting_verdict() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    // Away after a restart: its prompts stay answerable (a closed stream
    // would withdraw them).
    w.restart();
    w.say(ALICE, R1, "yes abcde");
    w.mark();

    w.attach(S2);
    w.drive();

    assert!(w.trace().is_empty());
    assert_eq!(w.phases(), ["s1 abcde decided"]);
}

#[test]
fn a_failed_verdict_send_keeps_the_prompt_and_sends_again_on_attach() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    w.fail_next(Kind::Verdict);

    let yes = w.say(ALICE, R1, "yes abcde");
    w.drive();
    assert_eq!(
        w.take(),
        [
            format!("decided s1 abcde allow by {ALICE} via text {yes}"),
            "verdict s1 abcde allow".to_owned(),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde decided"]);
    assert_eq!(w.state().sessions()[&sid(S1)], SessionPhase::Detached);

    w.attach(S1);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            "verdict s1 abcde allow".to_owned(),
            format!("edit {prompt} {:?}", allowed_by_reply("abcde")),
        ]
    );
    assert!(w.state().prompts().is_empty());
}

#[test]
fn the_prompt_shows_its_outcome_only_after_the_verdict_was_sent() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    w.hold(Kind::Verdict);
    w.say(ALICE, R1, "yes abcde");
    assert!(w.edits().is_empty());
    assert_eq!(w.phases(), ["s1 abcde delivering"]);
    assert_eq!(w.channel.in_flight(), 1);
    w.mark();

    let send = w.held_of(Kind::Verdict)[0].id;
    w.release(send, None);
    w.drive();

    assert_eq!(
        w.trace(),
        [format!("edit {prompt} {:?}", allowed_by_reply("abcde"))]
    );
    assert_eq!(w.channel.in_flight(), 0);
}

#[test]
fn the_decided_prompt_records_who_answered_and_how() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    // Away after a restart: its prompts stay answerable (a closed stream
    // would withdraw them).
    w.restart();

    let yes = w.say(ALICE, R1, "yes abcde");

    let p = &w.state().prompts()[0];
    match &p.phase {
        Phase::Decided { message, decision } => {
            assert_eq!(message, &prompt);
            assert_eq!(decision.behavior, Behavior::Allow);
            assert_eq!(decision.by, user(ALICE));
            assert_eq!(
                decision.via,
                mc_model::VerdictSource::Text { event_id: yes }
            );
        }
        other => panic!("expected decided, got {other:?}"),
    }
    assert!(w
        .drops()
        .iter()
        .all(|(_, r)| *r != DropReason::UnknownRequest));
}

#[test]
fn a_reply_quoting_the_whole_multi_line_prompt_still_answers() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let asker = mc_model::prompt_text::Asker {
        label: None,
        session: &sid(S1),
    };
    let plain =
        mc_model::prompt_text::render_prompt(&work_config(), &request("abcde"), Some(asker)).plain;
    let mut lines = plain.lines();
    let mut fallback = format!("> <{BOT}> {}", lines.next().unwrap());
    for line in lines {
        fallback.push('\n');
        fallback.push_str(if line.is_empty() { ">" } else { "> " });
        fallback.push_str(line);
    }

    let body = format!("{fallback}\n\nyes abcde");
    let yes = w.related(ALICE, R1, &body, reply(&prompt, None));
    w.send(yes);
    w.drive();

    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Allow)]);
    assert!(w.pushes(S1).is_empty());
}

#[test]
fn a_plain_yes_stays_ambiguous_while_an_answered_same_id_prompt_is_in_the_room() {
    let mut w = World::new();
    let (first, _) = two_sessions_waiting_on_abcde(&mut w);
    w.hold(Kind::Verdict);
    let no = w.related(ALICE, R1, "no abcde", reply(&first, None));
    w.send(no);
    w.mark();

    let yes = w.say(ALICE, R1, "yes abcde");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("notice {yes} {:?}", ambiguous_notice("abcde")),
            format!("drop {yes} AmbiguousRequest"),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde delivering", "s2 abcde pending"]);
}

/// The first sentence of the notice for a reply verdict that replies to something
/// other than its prompt.
fn not_the_prompt(id: &str) -> String {
    format!(
        "This replies to a message that is not the pending prompt for {id}, so it answers nothing."
    )
}

/// The `matrix.to` link to a prompt `event` in `room`, written out by hand.
fn link(room: &str, event: &EventId) -> String {
    let room = room.replace(':', "%3A");
    let event = event.as_str().replace('$', "%24");
    format!("https://matrix.to/#/{room}/{event}")
}
