//! The sender gate and the classifier: exact MXIDs, own events, notices, strangers.

use crate::harness::*;
use mc_model::classify::ReactionClass;
use mc_model::classify::{classify_message, classify_reaction, verdict_body, MessageClass};
use mc_model::reaction::ReactionKeys;
use mc_model::verdict::TextVerdict;
use mc_model::{Behavior, DropReason, Gate, MsgType, Relation};

#[test]
fn an_allowed_senders_message_is_pushed_to_the_live_session() {
    let mut w = World::new();
    w.attach(S1);
    w.mark();

    let m = w.say(BOB, R1, "hello");
    w.drive();

    assert_eq!(w.trace(), [format!("push s1 {m} message \"hello\"")]);
}

#[test]
fn the_identitys_own_message_is_never_pushed_nor_a_verdict() {
    let mut w = World::new();
    w.pending_prompt("abcde");

    let hello = w.say(BOT, R1, "hello");
    let yes = w.say(BOT, R1, "yes abcde");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("drop {hello} OwnEvent"),
            format!("drop {yes} OwnEvent")
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn an_approvers_notice_is_never_pushed_nor_a_verdict() {
    let mut w = World::new();
    w.pending_prompt("abcde");

    let notice = w.message(ALICE, R1, content(MsgType::Notice, "yes abcde"));
    let notice = w.send(notice);
    let chat = w.message(ALICE, R1, content(MsgType::Notice, "hello"));
    let chat = w.send(chat);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("drop {notice} Notice"),
            format!("drop {chat} Notice")
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn a_stranger_named_like_an_approver_is_still_a_stranger() {
    let mut w = World::new();
    w.pending_prompt("abcde");

    let mut hello = w.text(MALLORY, R1, "hello");
    hello.sender_name = Some("Alice".into());
    let hello = w.send(hello);
    let mut yes = w.text(MALLORY, R1, "yes abcde");
    yes.sender_name = Some("Alice".into());
    let yes = w.send(yes);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("drop {hello} Stranger"),
            format!("drop {yes} Stranger")
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn an_allowed_sender_named_like_the_approver_cannot_answer() {
    let mut w = World::new();
    w.pending_prompt("abcde");

    let mut yes = w.text(BOB, R1, "yes abcde");
    yes.sender_name = Some("Alice".into());
    let yes = w.send(yes);
    w.drive();

    assert_eq!(w.trace(), [format!("drop {yes} NotApprover")]);
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn a_strangers_yes_is_ignored_and_gets_no_notice() {
    let mut w = World::new();
    w.pending_prompt("abcde");

    let yes = w.say(MALLORY, R1, "yes abcde");
    let unknown = w.say(MALLORY, R1, "yes qwert");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("drop {yes} Stranger"),
            format!("drop {unknown} Stranger")
        ]
    );
    assert!(w.notices().is_empty());
    let message = w.text(MALLORY, R1, "yes abcde");
    assert_eq!(
        classify_message(Gate::Stranger, &message),
        MessageClass::Drop(DropReason::Stranger)
    );
}

#[test]
fn mxids_match_exactly_not_by_case_or_white_space() {
    let mut w = World::new();
    w.pending_prompt("abcde");

    let upper = w.say("@Alice:hs", R1, "yes abcde");
    let spaced = w.say("@alice:hs ", R1, "yes abcde");
    let other_server = w.say("@alice:hs.evil", R1, "hello");
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("drop {upper} Stranger"),
            format!("drop {spaced} Stranger"),
            format!("drop {other_server} Stranger"),
        ]
    );
}

#[test]
fn own_and_stranger_reactions_and_redactions_stop_at_the_gate() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");

    let own = w.react(BOT, &prompt, THUMBS_UP);
    let stranger = w.react(MALLORY, &prompt, THUMBS_UP);
    let own_redaction = w.redact(BOT, &prompt);
    let stranger_redaction = w.redact(MALLORY, &prompt);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("drop {own} OwnEvent"),
            format!("drop {stranger} Stranger"),
            format!("drop {own_redaction} OwnEvent"),
            format!("drop {stranger_redaction} Stranger"),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde pending"]);
    assert_eq!(w.channel.next_deadline(), Some(START + TTL));
}

#[test]
fn a_strangers_message_is_not_logged_so_it_is_never_a_duplicate() {
    let mut w = World::new();
    w.attach(S1);
    w.mark();

    let m = w.text(MALLORY, R1, "hello");
    w.send(m.clone());
    w.send(m.clone());
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("drop {} Stranger", m.event_id),
            format!("drop {} Stranger", m.event_id)
        ]
    );
    assert!(w.state().log_entry(&m.event_id).is_none());
}

// ----- the classifier, asked directly ------------------------------------------

#[test]
fn the_classifier_stops_own_events_and_strangers_first() {
    let mut w = World::new();
    let yes = w.text(ALICE, R1, "yes abcde");
    assert_eq!(
        classify_message(Gate::Own, &yes),
        MessageClass::Drop(DropReason::OwnEvent)
    );
    assert_eq!(
        classify_message(Gate::Stranger, &yes),
        MessageClass::Drop(DropReason::Stranger)
    );
}

#[test]
fn the_classifier_reads_a_verdict_only_from_an_approver() {
    let mut w = World::new();
    let yes = w.text(ALICE, R1, "Yes ABCDE");
    assert_eq!(
        classify_message(Gate::Approver, &yes),
        MessageClass::Verdict(TextVerdict {
            behavior: Behavior::Allow,
            request_id: rid("abcde"),
            grant: None,
        })
    );
    assert_eq!(
        classify_message(Gate::Allowed, &yes),
        MessageClass::Drop(DropReason::NotApprover)
    );
}

#[test]
fn the_classifier_passes_chat_through_with_its_content() {
    let mut w = World::new();
    let hello = w.text(ALICE, R1, "hello");
    let content = hello.content.as_ref().unwrap();
    assert_eq!(
        classify_message(Gate::Approver, &hello),
        MessageClass::Chat(content)
    );
    assert_eq!(
        classify_message(Gate::Allowed, &hello),
        MessageClass::Chat(content)
    );
}

#[test]
fn the_classifier_drops_missing_content_and_notices() {
    let mut w = World::new();
    let mut gone = w.text(ALICE, R1, "yes abcde");
    gone.content = None;
    assert_eq!(
        classify_message(Gate::Approver, &gone),
        MessageClass::Drop(DropReason::NoContent)
    );
    let notice = w.message(ALICE, R1, content(MsgType::Notice, "yes abcde"));
    assert_eq!(
        classify_message(Gate::Approver, &notice),
        MessageClass::Drop(DropReason::Notice)
    );
}

#[test]
fn the_classifier_takes_an_edit_as_an_edit_and_an_edit_into_yes_as_nothing() {
    let mut w = World::new();
    let original = ev("$orig");
    let into_yes = w.related(
        ALICE,
        R1,
        "* yes abcde",
        replacement(&original, "yes abcde"),
    );
    assert_eq!(
        classify_message(Gate::Approver, &into_yes),
        MessageClass::Drop(DropReason::VerdictShaped)
    );
    assert_eq!(
        classify_message(Gate::Allowed, &into_yes),
        MessageClass::Drop(DropReason::VerdictShaped)
    );
    let edit = w.related(ALICE, R1, "* hello", replacement(&original, "hello"));
    let Some(Relation::Replacement {
        new_content: Some(new_content),
        ..
    }) = &edit.content.as_ref().unwrap().relation
    else {
        unreachable!()
    };
    assert_eq!(
        classify_message(Gate::Approver, &edit),
        MessageClass::Edit {
            original: &original,
            new_content,
        }
    );
    let bare = w.related(
        ALICE,
        R1,
        "* yes abcde",
        Relation::Replacement {
            original: original.clone(),
            new_content: None,
        },
    );
    assert_eq!(
        classify_message(Gate::Approver, &bare),
        MessageClass::Drop(DropReason::EditRejected)
    );
}

#[test]
fn the_classifier_reads_verdicts_from_text_and_emotes_only() {
    let mut w = World::new();
    let emote = w.message(ALICE, R1, content(MsgType::Emote, "no abcde"));
    assert_eq!(
        classify_message(Gate::Approver, &emote),
        MessageClass::Verdict(TextVerdict {
            behavior: Behavior::Deny,
            request_id: rid("abcde"),
            grant: None,
        })
    );
    let image = w.message(ALICE, R1, content(MsgType::Image, "yes abcde"));
    assert_eq!(
        classify_message(Gate::Approver, &image),
        MessageClass::Drop(DropReason::VerdictShaped)
    );
    let other = w.message(
        ALICE,
        R1,
        content(MsgType::Other("m.custom".into()), "yes abcde"),
    );
    assert_eq!(
        classify_message(Gate::Approver, &other),
        MessageClass::Drop(DropReason::VerdictShaped)
    );
    assert_eq!(
        classify_message(Gate::Allowed, &other),
        MessageClass::Drop(DropReason::NotApprover)
    );
    let chat_image = w.message(ALICE, R1, content(MsgType::Image, "cat.png"));
    assert!(matches!(
        classify_message(Gate::Approver, &chat_image),
        MessageClass::Chat(_)
    ));
}

#[test]
fn the_verdict_body_drops_the_reply_fallback_only_for_a_reply() {
    let fallback = "> <@bot:hs> 🔐 Permission request abcde\n\nyes abcde";
    let mut with_reply = content(MsgType::Text, fallback);
    with_reply.relation = Some(reply(&ev("$p"), None));
    assert_eq!(verdict_body(&with_reply), "yes abcde");

    let plain = content(MsgType::Text, fallback);
    assert_eq!(verdict_body(&plain), fallback);

    let mut falling_back = content(MsgType::Text, fallback);
    falling_back.relation = Some(Relation::Thread {
        root: ev("$root"),
        in_reply_to: Some(mc_model::ReplyTo {
            event_id: ev("$p"),
            parent: None,
        }),
        is_falling_back: true,
    });
    assert_eq!(verdict_body(&falling_back), fallback);

    let mut w = World::new();
    let mut reply_yes = w.text(ALICE, R1, fallback);
    reply_yes.content.as_mut().unwrap().relation = Some(reply(&ev("$p"), None));
    assert_eq!(
        classify_message(Gate::Approver, &reply_yes),
        MessageClass::Verdict(TextVerdict {
            behavior: Behavior::Allow,
            request_id: rid("abcde"),
            grant: None,
        })
    );
    let not_reply = w.text(ALICE, R1, fallback);
    assert!(matches!(
        classify_message(Gate::Approver, &not_reply),
        MessageClass::Chat(_)
    ));
}

#[test]
fn the_reaction_classifier_counts_only_approvers_keys_on_prompts() {
    let keys = ReactionKeys::default();
    assert_eq!(
        classify_reaction(Gate::Own, &keys, true, THUMBS_UP),
        ReactionClass::Drop(DropReason::OwnEvent)
    );
    assert_eq!(
        classify_reaction(Gate::Stranger, &keys, true, THUMBS_UP),
        ReactionClass::Drop(DropReason::Stranger)
    );
    assert_eq!(
        classify_reaction(Gate::Allowed, &keys, true, THUMBS_UP),
        ReactionClass::Drop(DropReason::NotApprover)
    );
    assert_eq!(
        classify_reaction(Gate::Allowed, &keys, true, "🎉"),
        ReactionClass::Chat
    );
    assert_eq!(
        classify_reaction(Gate::Allowed, &keys, false, THUMBS_UP),
        ReactionClass::Chat
    );
    assert_eq!(
        classify_reaction(Gate::Approver, &keys, true, THUMBS_UP_EMOJI),
        ReactionClass::Vote(Behavior::Allow)
    );
    assert_eq!(
        classify_reaction(Gate::Approver, &keys, true, THUMBS_DOWN),
        ReactionClass::Vote(Behavior::Deny)
    );
    assert_eq!(
        classify_reaction(Gate::Approver, &keys, false, THUMBS_UP),
        ReactionClass::Chat
    );
    assert_eq!(
        classify_reaction(Gate::Approver, &keys, true, "🎉"),
        ReactionClass::Chat
    );
}
