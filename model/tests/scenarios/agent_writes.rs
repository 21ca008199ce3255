//! The agent's own writes to Matrix (`Input::AgentWrite`): no prompt is touched,
//! only the identity's own messages are edited, no text names an open request id,
//! the room of a held prompt is not left, a prompt room's name and topic stay; the
//! rooms the agent creates; the write's outcome; and a
//! `permission_request` the server could not read.

use crate::harness::*;
use mc_model::{AgentText, AgentWrite, CallId, Effect, EventId, IdentityId, Input, Outcome};

// ----- writes ---------------------------------------------------------------------

/// A plain message from the agent in `room`.
fn say(room: &str, body: &str) -> AgentWrite {
    message(room, vec![AgentText::plain(body)], None, None)
}

fn message(
    room: &str,
    parts: Vec<AgentText>,
    reply_to: Option<&EventId>,
    thread_root: Option<&EventId>,
) -> AgentWrite {
    AgentWrite::Message {
        room: room.into(),
        parts,
        reply_to: reply_to.cloned(),
        thread_root: thread_root.cloned(),
        txn_id: "t1".into(),
    }
}

fn html(body: &str, formatted_body: &str) -> AgentText {
    AgentText {
        body: body.into(),
        formatted_body: Some(formatted_body.into()),
    }
}

/// An edit of `original`, which `sender` sent.
fn edit(original: &EventId, sender: &str, text: AgentText) -> AgentWrite {
    AgentWrite::Edit {
        room: R1.into(),
        original: original.clone(),
        original_sender: sender.into(),
        text,
    }
}

fn react_to(event: &EventId, key: &str) -> AgentWrite {
    AgentWrite::Reaction {
        room: R1.into(),
        relates_to: event.clone(),
        key: key.into(),
    }
}

fn redact(event: &EventId, reason: Option<&str>) -> AgentWrite {
    AgentWrite::Redaction {
        room: R1.into(),
        redacts: event.clone(),
        reason: reason.map(str::to_owned),
    }
}

/// A file `name` (a 3-byte text file) with `caption`, replying to `reply_to`, in
/// the thread of `thread_root`.
fn file(
    room: &str,
    name: &str,
    caption: Option<AgentText>,
    reply_to: Option<&EventId>,
    thread_root: Option<&EventId>,
) -> AgentWrite {
    AgentWrite::File {
        room: room.into(),
        name: name.into(),
        caption,
        mimetype: "text/plain".into(),
        size: 3,
        sha256: "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad".into(),
        reply_to: reply_to.cloned(),
        thread_root: thread_root.cloned(),
        txn_id: "t".into(),
    }
}

fn leave(room: &str) -> AgentWrite {
    AgentWrite::Leave { room: room.into() }
}

/// One write of each kind that edits, redacts, reacts to, replies to or threads on
/// `target`, with harmless text.
fn touching(target: &EventId) -> Vec<AgentWrite> {
    vec![
        message(R1, vec![AgentText::plain("ok")], Some(target), None),
        message(R1, vec![AgentText::plain("ok")], None, Some(target)),
        edit(target, BOT, AgentText::plain("ok")),
        react_to(target, THUMBS_UP),
        redact(target, None),
        file(R1, "log.txt", None, Some(target), None),
        file(R1, "log.txt", None, None, Some(target)),
    ]
}

/// Each write of [`touching`] `target`, as calls 1 to 7; the trace of each.
fn touch_every_way(w: &mut World, target: &EventId) -> Vec<String> {
    w.mark();
    for (call, write) in (1..).zip(touching(target)) {
        w.agent_write(call, write);
    }
    w.trace()
}

fn refused_every_way() -> Vec<String> {
    (1..=7)
        .map(|call| format!("refused call#{call} PromptTarget"))
        .collect()
}

fn written_every_way() -> Vec<String> {
    [
        "message",
        "message",
        "edit",
        "reaction",
        "redaction",
        "file",
        "file",
    ]
    .iter()
    .zip(1..)
    .map(|(kind, call)| format!("write call#{call} {kind}"))
    .collect()
}

fn names_open(call: u64, id: &str) -> String {
    format!("refused call#{call} NamesOpenRequest {{ request_id: RequestId({id:?}) }}")
}

/// The outcome of a held post, as the world planned it.
fn posted_as(held: &Held) -> EventId {
    match &held.outcome {
        Outcome::Posted { event_id } => event_id.clone(),
        other => panic!("not a post: {other:?}"),
    }
}

// ----- what a write may touch -----------------------------------------------------

#[test]
fn the_agent_may_edit_redact_react_to_reply_to_and_thread_on_an_ordinary_message() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    let hello = w.say(BOB, R1, "hello");

    assert_eq!(touch_every_way(&mut w, &hello), written_every_way());
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn a_write_goes_out_exactly_as_asked_and_waits_for_its_outcome() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    let hello = w.say(ALICE, R1, "hello");
    w.hold(Kind::Write);
    let write = message(
        R1,
        vec![html("**hi**", "<b>hi</b>"), AgentText::plain("more")],
        Some(&hello),
        Some(&hello),
    );
    let before = w.channel.in_flight();

    let effects = w.agent_write(7, write.clone());

    let [Effect::Write {
        id,
        identity,
        call,
        write: sent,
    }] = effects.as_slice()
    else {
        panic!("{effects:?}")
    };
    assert_eq!(
        (identity, *call, sent),
        (&IdentityId::from(WORK), CallId(7), &write)
    );
    assert_eq!(w.channel.in_flight(), before + 1);
    assert_eq!(w.channel.in_flight_ids().last(), Some(id));
    assert_eq!(w.held_of(Kind::Write)[0].id, *id);
}

#[test]
fn a_receipt_joins_and_invites_are_written() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");

    w.agent_write(
        1,
        AgentWrite::Receipt {
            room: room(R1),
            event_id: prompt,
        },
    );
    w.agent_write(
        2,
        AgentWrite::Join {
            room: "#abcde:hs".into(),
        },
    );
    w.agent_write(
        3,
        AgentWrite::Invite {
            room: room(R1),
            user: user(MALLORY),
        },
    );

    assert_eq!(
        w.trace(),
        [
            "write call#1 receipt",
            "write call#2 join",
            "write call#3 invite"
        ]
    );
}

#[test]
fn no_write_may_touch_a_pending_prompt() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");

    assert_eq!(touch_every_way(&mut w, &prompt), refused_every_way());
    assert_eq!(w.channel.in_flight(), 0);
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn no_write_may_touch_a_prompt_whose_votes_are_settling() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    w.react(ALICE, &prompt, THUMBS_UP);
    assert_eq!(w.phases(), ["s1 abcde settling"]);

    assert_eq!(touch_every_way(&mut w, &prompt), refused_every_way());
}

#[test]
fn no_write_may_touch_a_prompt_answered_while_its_session_is_away() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    // Away after a restart: its prompts stay answerable (a closed stream
    // would withdraw them).
    w.restart();
    w.say(ALICE, R1, "yes abcde");
    assert_eq!(w.phases(), ["s1 abcde decided"]);

    assert_eq!(touch_every_way(&mut w, &prompt), refused_every_way());
}

#[test]
fn no_write_may_touch_a_prompt_whose_verdict_is_being_delivered() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    w.hold(Kind::Verdict);
    w.say(ALICE, R1, "yes abcde");
    assert_eq!(w.phases(), ["s1 abcde delivering"]);

    assert_eq!(touch_every_way(&mut w, &prompt), refused_every_way());
}

#[test]
fn no_write_may_touch_a_prompt_after_its_verdict_was_delivered() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    w.say(ALICE, R1, "yes abcde");
    assert!(w.state().prompts().is_empty());

    assert_eq!(touch_every_way(&mut w, &prompt), refused_every_way());
}

#[test]
fn no_write_may_touch_an_expired_prompt() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    w.advance(TTL);
    assert!(w.state().prompts().is_empty());

    assert_eq!(touch_every_way(&mut w, &prompt), refused_every_way());
}

#[test]
fn no_write_may_touch_a_superseded_prompt() {
    let mut w = World::new();
    let old = w.pending_prompt("abcde");
    w.ask(S1, "abcde");
    assert_ne!(w.prompt_event("abcde"), old);

    assert_eq!(touch_every_way(&mut w, &old), refused_every_way());
}

#[test]
fn no_write_may_touch_an_evicted_prompt() {
    let mut w = World::configured(|c| c.max_prompts = 1);
    let evicted = w.pending_prompt("aaaaa");
    w.ask(S1, "bbbbb");
    assert_eq!(w.phases(), ["s1 bbbbb pending"]);

    assert_eq!(touch_every_way(&mut w, &evicted), refused_every_way());
}

#[test]
fn no_write_may_touch_a_prompt_posted_after_it_expired_while_being_posted() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.hold(Kind::Post);
    w.ask(S1, "abcde");
    let post = w.held_of(Kind::Post)[0].clone();
    w.advance(TTL);
    w.release(post.id, None);
    assert!(w.state().prompts().is_empty());

    assert_eq!(
        touch_every_way(&mut w, &posted_as(&post)),
        refused_every_way()
    );
}

#[test]
fn beyond_prompt_memory_the_oldest_retired_prompt_may_be_touched_again() {
    let mut w = World::configured(|c| c.prompt_memory = 2);
    let first = w.pending_prompt("aaaaa");
    w.say(ALICE, R1, "yes aaaaa");
    w.ask(S1, "bbbbb");
    let second = w.prompt_event("bbbbb");
    w.say(ALICE, R1, "yes bbbbb");
    w.ask(S1, "ccccc");
    let third = w.prompt_event("ccccc");
    w.advance(TTL);
    assert!(w.state().prompts().is_empty());

    assert_eq!(touch_every_way(&mut w, &first), written_every_way());
    assert_eq!(touch_every_way(&mut w, &second), refused_every_way());
    assert_eq!(touch_every_way(&mut w, &third), refused_every_way());
}

#[test]
fn a_held_prompt_is_untouchable_however_small_the_prompt_memory() {
    let mut w = World::configured(|c| c.prompt_memory = 1);
    let held = w.pending_prompt("aaaaa");
    w.ask(S1, "bbbbb");
    w.say(ALICE, R1, "yes bbbbb");
    w.ask(S1, "ccccc");
    w.say(ALICE, R1, "no ccccc");
    assert_eq!(w.phases(), ["s1 aaaaa pending"]);

    assert_eq!(touch_every_way(&mut w, &held), refused_every_way());
}

#[test]
fn a_verdict_shown_on_an_evicted_prompt_already_forgotten_remembers_it_again() {
    // One remembered prompt: evicting `first` remembers it, evicting `second`
    // forgets it; the late verdict edit shows `first` again and remembers it anew.
    let mut w = World::configured(|c| {
        c.max_prompts = 1;
        c.prompt_memory = 1;
    });
    let first = w.pending_prompt("aaaaa");
    w.hold(Kind::Verdict);
    w.say(ALICE, R1, "yes aaaaa");
    let send = w.held_of(Kind::Verdict)[0].id;
    w.ask(S1, "bbbbb");
    let second = w.prompt_event("bbbbb");
    w.ask(S1, "ccccc");
    w.mark();

    w.release(send, None);
    assert_eq!(
        w.take(),
        [
            format!("edit {first} {:?}", allowed_by_reply("aaaaa")),
            "drop - StaleOutcome".to_owned(),
        ]
    );

    assert_eq!(touch_every_way(&mut w, &first), refused_every_way());
    assert_eq!(touch_every_way(&mut w, &second), written_every_way());
}

#[test]
fn a_prompt_evicted_while_its_verdict_is_sent_takes_one_memory_slot() {
    // Two remembered prompts: `older`, then `first` (evicted while its verdict is in
    // flight); the verdict edit shows `first` again without a second slot.
    let mut w = World::configured(|c| {
        c.max_prompts = 1;
        c.prompt_memory = 2;
    });
    let older = w.pending_prompt("aaaaa");
    w.say(ALICE, R1, "yes aaaaa");
    w.ask(S1, "bbbbb");
    let first = w.prompt_event("bbbbb");
    w.hold(Kind::Verdict);
    w.say(ALICE, R1, "yes bbbbb");
    let send = w.held_of(Kind::Verdict)[0].id;
    w.ask(S1, "ccccc");
    w.release(send, None);
    assert_eq!(w.phases(), ["s1 ccccc pending"]);

    assert_eq!(touch_every_way(&mut w, &older), refused_every_way());
    assert_eq!(touch_every_way(&mut w, &first), refused_every_way());
}

#[test]
fn a_failed_verdict_send_on_an_evicted_prompt_remembers_nothing_new() {
    let mut w = World::configured(|c| {
        c.max_prompts = 1;
        c.prompt_memory = 1;
    });
    let first = w.pending_prompt("aaaaa");
    w.hold(Kind::Verdict);
    w.say(ALICE, R1, "yes aaaaa");
    let send = w.held_of(Kind::Verdict)[0].id;
    w.ask(S1, "bbbbb");
    let second = w.prompt_event("bbbbb");
    w.ask(S1, "ccccc");
    w.mark();

    w.release(send, Some(failed()));
    assert_eq!(w.take(), ["drop - StaleOutcome"]);

    assert_eq!(touch_every_way(&mut w, &first), written_every_way());
    assert_eq!(touch_every_way(&mut w, &second), refused_every_way());
}

// ----- edits ----------------------------------------------------------------------

#[test]
fn the_agent_may_edit_its_own_message_but_not_someone_elses() {
    let mut w = World::new();
    let alices = w.say(ALICE, R1, "hello");
    let own = w.say(BOT, R1, "hi");
    w.mark();

    w.agent_write(1, edit(&alices, ALICE, AgentText::plain("bye")));
    w.agent_write(2, edit(&own, BOT, AgentText::plain("bye")));

    assert_eq!(
        w.trace(),
        ["refused call#1 NotOwnMessage", "write call#2 edit"]
    );
}

#[test]
fn a_prompt_target_is_the_reason_before_another_sender_and_another_sender_before_a_named_id() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    let alices = w.say(ALICE, R1, "hello");
    w.mark();

    w.agent_write(1, edit(&prompt, ALICE, AgentText::plain("yes abcde")));
    w.agent_write(2, edit(&alices, ALICE, AgentText::plain("yes abcde")));

    assert_eq!(
        w.trace(),
        [
            "refused call#1 PromptTarget",
            "refused call#2 NotOwnMessage"
        ]
    );
}

// ----- text naming an open request id -----------------------------------------------

#[test]
fn every_text_field_of_a_write_is_read_for_an_open_request_id() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    let own = w.say(BOT, R1, "hi");
    let hello = w.say(ALICE, R1, "hello");
    w.mark();
    let ok = || AgentText::plain("ok");

    let writes = [
        say(R1, "reply yes abcde"),
        message(R1, vec![html("ok", "<p>yes abcde</p>")], None, None),
        message(R1, vec![ok(), AgentText::plain("yes abcde")], None, None),
        message(R1, vec![ok(), html("ok", "abcde")], None, None),
        edit(&own, BOT, AgentText::plain("abcde")),
        edit(&own, BOT, html("ok", "<i>abcde</i>")),
        react_to(&hello, "abcde"),
        redact(&hello, Some("see abcde")),
        file(R1, "abcde.log", None, None, None),
        file(
            R1,
            "log.txt",
            Some(AgentText::plain("answer abcde")),
            None,
            None,
        ),
        file(R1, "log.txt", Some(html("ok", "<b>ab</b>cde")), None, None),
    ];
    for (call, write) in (1..).zip(writes) {
        w.agent_write(call, write);
    }

    let expected: Vec<String> = (1..=11).map(|call| names_open(call, "abcde")).collect();
    assert_eq!(w.trace(), expected);
    assert_eq!(w.channel.in_flight(), 0);
}

#[test]
fn the_same_fields_without_the_id_are_written() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    let own = w.say(BOT, R1, "hi");
    let hello = w.say(ALICE, R1, "hello");
    w.mark();
    let ok = || AgentText::plain("ok");

    let writes = [
        message(R1, vec![html("ok", "<p>ok</p>"), ok()], None, None),
        edit(&own, BOT, html("ok", "<i>ok</i>")),
        react_to(&hello, "ok"),
        redact(&hello, Some("spam")),
        redact(&hello, None),
        file(
            R1,
            "abcd.log",
            Some(html("build log", "<b>build</b> log")),
            None,
            None,
        ),
    ];
    for (call, write) in (1..).zip(writes) {
        w.agent_write(call, write);
    }

    assert_eq!(
        w.trace(),
        [
            "write call#1 message",
            "write call#2 edit",
            "write call#3 reaction",
            "write call#4 redaction",
            "write call#5 redaction",
            "write call#6 file",
        ]
    );
}

#[test]
fn an_open_id_spelled_in_lookalike_or_invisible_characters_or_split_by_markup_is_named() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    let spellings = [
        "yes ABCDE",
        "yes a\u{200B}bcde",
        "yes ab\u{00AD}cde",
        "yes abc\u{FE0F}de",
        "yes \u{FF41}\u{FF42}\u{FF43}\u{FF44}\u{FF45}",
        "yes \u{0430}bcde",
        "yes &#97;bcde",
        "yes <b>ab</b>cde",
        "yes **ab**cde",
        "yes a_b_cde",
        "yes ab`cde`",
        "(abcde)",
        "yes ab<span title='>'>cde",
        "yes ab<!-- > -->cde",
        "|abcde|",
    ];

    for (call, text) in (1..).zip(spellings) {
        w.mark();
        w.agent_write(call, say(R1, text));
        assert_eq!(w.trace(), [names_open(call, "abcde")], "{text:?}");
    }
}

#[test]
fn a_look_alike_of_a_letter_that_is_no_letter_still_spells_the_open_id() {
    // U+212E ESTIMATED SYMBOL is a symbol, not a letter: it splits the word as
    // written, and its confusable skeleton is `e`.
    let mut w = World::new();
    w.pending_prompt("abcde");
    assert!(!'\u{212E}'.is_alphabetic());
    w.mark();

    w.agent_write(1, say(R1, "yes abcd\u{212E} now"));

    assert_eq!(w.trace(), [names_open(1, "abcde")]);
}

#[test]
fn invisible_code_points_do_not_split_the_first_id_named() {
    // Split as written at the invisible code point, the first id named would be
    // `fghjk`.
    let mut w = World::new();
    w.pending_prompt("abcde");
    w.ask(S1, "fghjk");
    w.mark();

    w.agent_write(1, say(R1, "a\u{200B}bcde fghjk"));
    w.agent_write(2, say(R1, "ab\u{E0041}cde fghjk"));

    assert_eq!(w.trace(), [names_open(1, "abcde"), names_open(2, "abcde")]);
}

#[test]
fn a_word_that_only_contains_or_nearly_spells_an_open_id_is_not_a_name_for_it() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    let texts = ["xabcde", "abcdef", "abcd e", "abcd", "a-bcde", "fghjk"];

    for (call, text) in (1..).zip(texts) {
        w.mark();
        w.agent_write(call, say(R1, text));
        assert_eq!(
            w.trace(),
            [format!("write call#{call} message")],
            "{text:?}"
        );
    }
}

#[test]
fn the_id_named_is_the_one_reported_among_several_open_ones() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    w.ask(S1, "fghjk");
    w.mark();

    w.agent_write(1, say(R1, "about fghjk"));
    w.agent_write(2, say(R1, "about abcde"));

    assert_eq!(w.trace(), [names_open(1, "fghjk"), names_open(2, "abcde")]);
}

#[test]
fn the_id_of_a_prompt_still_being_posted_or_already_answered_is_open() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    // Away after a restart: its prompts stay answerable (a closed stream
    // would withdraw them).
    w.restart();
    w.say(ALICE, R1, "yes abcde");
    w.attach(S2);
    w.hold(Kind::Post);
    w.ask(S2, "fghjk");
    assert_eq!(w.phases(), ["s1 abcde decided", "s2 fghjk posting"]);
    w.mark();

    w.agent_write(1, say(R1, "abcde"));
    w.agent_write(2, say(R1, "fghjk"));

    assert_eq!(w.trace(), [names_open(1, "abcde"), names_open(2, "fghjk")]);
}

#[test]
fn the_id_of_a_prompt_whose_verdict_is_being_delivered_is_open() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    w.hold(Kind::Verdict);
    w.say(ALICE, R1, "yes abcde");
    w.mark();

    w.agent_write(1, say(R1, "abcde"));

    assert_eq!(w.trace(), [names_open(1, "abcde")]);
}

#[test]
fn the_ids_of_answered_expired_and_replaced_prompts_may_be_named_again() {
    let mut w = World::configured(|c| c.max_prompts = 1);
    w.pending_prompt("aaaaa");
    w.say(ALICE, R1, "yes aaaaa");
    w.ask(S1, "bbbbb");
    w.advance(TTL);
    w.ask(S1, "ccccc");
    w.ask(S1, "ddddd");
    assert_eq!(w.phases(), ["s1 ddddd pending"]);
    w.mark();

    w.agent_write(1, say(R1, "aaaaa bbbbb ccccc"));
    w.agent_write(2, say(R1, "ddddd"));

    assert_eq!(
        w.trace(),
        ["write call#1 message".to_owned(), names_open(2, "ddddd")]
    );
}

#[test]
fn another_identitys_open_id_restricts_this_identitys_text_too() {
    // An imitation of home's prompt written by work's agent would mislead home's
    // approver just as well: every identity's open ids are off limits to every agent.
    let mut w = World::two_identities();
    w.as_identity(HOME, |w| {
        w.attach(H1);
        w.ask(H1, "abcde");
    });
    w.mark();

    w.agent_write(1, say(R1, "abcde"));
    w.as_identity(HOME, |w| w.agent_write(2, say(HOME_ROOM, "abcde")));
    w.agent_write(3, say(R1, "fghjk"));

    assert_eq!(
        w.trace(),
        [
            names_open(1, "abcde"),
            format!("home: {}", names_open(2, "abcde")),
            "write call#3 message".to_owned(),
        ]
    );
}

// ----- leaving a room ---------------------------------------------------------------

#[test]
fn the_agent_may_not_leave_the_room_of_a_held_prompt_but_may_leave_others() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    w.mark();

    w.agent_write(1, leave(R1));
    w.agent_write(2, leave(R2));

    assert_eq!(
        w.trace(),
        ["refused call#1 LeavesPromptRoom", "write call#2 leave"]
    );
}

#[test]
fn the_room_of_a_prompt_still_being_posted_may_not_be_left() {
    let mut w = World::configured(|c| c.permission_room = Some(room(R2)));
    w.attach(S1);
    w.hold(Kind::Post);
    w.ask(S1, "abcde");
    w.mark();

    w.agent_write(1, leave(R2));
    w.agent_write(2, leave(R1));

    assert_eq!(
        w.trace(),
        ["refused call#1 LeavesPromptRoom", "write call#2 leave"]
    );
}

#[test]
fn the_room_of_an_answered_prompt_waiting_for_its_session_may_not_be_left() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    w.detach(S1);
    w.say(ALICE, R1, "no abcde");
    w.mark();

    w.agent_write(1, leave(R1));

    assert_eq!(w.trace(), ["refused call#1 LeavesPromptRoom"]);
}

#[test]
fn once_its_prompts_are_retired_the_room_may_be_left() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    w.say(ALICE, R1, "yes abcde");
    w.ask(S1, "fghjk");
    w.advance(TTL);
    w.mark();

    w.agent_write(1, leave(R1));

    assert_eq!(w.trace(), ["write call#1 leave"]);
}

// ----- rooms: creating one, naming one ----------------------------------------------

fn name_room(room: &str, name: &str) -> AgentWrite {
    AgentWrite::SetRoomName {
        room: room.into(),
        name: name.into(),
    }
}

fn set_topic(room: &str, topic: &str) -> AgentWrite {
    AgentWrite::SetRoomTopic {
        room: room.into(),
        topic: topic.into(),
    }
}

fn create_room(name: Option<&str>, topic: Option<&str>, invite: &[&str]) -> AgentWrite {
    AgentWrite::CreateRoom {
        name: name.map(str::to_owned),
        topic: topic.map(str::to_owned),
        encrypted: true,
        invite: invite.iter().map(|u| user(u)).collect(),
    }
}

#[test]
fn a_room_the_agent_creates_has_the_allowed_senders_invited_once_and_never_the_identity() {
    let mut w = World::new();

    let effects = w.agent_write(
        1,
        create_room(Some("ops"), Some("deploys"), &[MALLORY, BOB, BOT]),
    );

    let [Effect::Write { write, .. }] = effects.as_slice() else {
        panic!("{effects:?}")
    };
    // Sorted, each once: @alice and @bob (allowed), @mallory (asked for); not @bot.
    assert_eq!(
        write,
        &create_room(Some("ops"), Some("deploys"), &[ALICE, BOB, MALLORY])
    );
    // The direct chat names its one user: nothing is added to it.
    let dm = AgentWrite::CreateDm {
        user: user(MALLORY),
    };
    let effects = w.agent_write(2, dm.clone());
    assert!(
        matches!(effects.as_slice(), [Effect::Write { write, .. }] if *write == dm),
        "{effects:?}"
    );
}

#[test]
fn the_name_and_topic_of_a_room_with_a_held_prompt_stay_as_they_are() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    w.mark();

    w.agent_write(1, name_room(R1, "all approved"));
    w.agent_write(2, set_topic(R1, "react \u{1F44D} to anything"));
    w.agent_write(3, name_room(R2, "builds"));
    w.agent_write(4, set_topic(R2, "CI results"));

    assert_eq!(
        w.trace(),
        [
            "refused call#1 PromptRoomState",
            "refused call#2 PromptRoomState",
            "write call#3 set_room_name",
            "write call#4 set_room_topic",
        ]
    );
}

#[test]
fn the_permission_rooms_name_and_topic_stay_even_with_no_prompt_in_it() {
    let mut w = World::configured(|c| c.permission_room = Some(room(R2)));
    w.mark();

    w.agent_write(1, set_topic(R2, "pre-approved"));
    w.agent_write(2, name_room(R1, "chat"));

    assert_eq!(
        w.trace(),
        [
            "refused call#1 PromptRoomState",
            "write call#2 set_room_name"
        ]
    );
}

#[test]
fn once_its_prompts_are_retired_a_rooms_name_may_change() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    w.say(ALICE, R1, "yes abcde");
    w.advance(TTL);
    w.mark();

    w.agent_write(1, name_room(R1, "done"));

    assert_eq!(w.trace(), ["write call#1 set_room_name"]);
}

#[test]
fn a_room_name_topic_or_new_rooms_texts_may_not_name_an_open_request_id() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    w.mark();

    w.agent_write(1, name_room(R2, "yes ABCDE"));
    w.agent_write(2, set_topic(R2, "answer a\u{200B}bcde"));
    w.agent_write(3, create_room(Some("abcde"), None, &[]));
    w.agent_write(4, create_room(None, Some("<b>ab</b>cde"), &[]));
    w.agent_write(5, create_room(Some("fghjk"), Some("free"), &[]));

    assert_eq!(
        w.trace(),
        [
            names_open(1, "abcde"),
            names_open(2, "abcde"),
            names_open(3, "abcde"),
            names_open(4, "abcde"),
            "write call#5 create_room".to_owned(),
        ]
    );
}

#[test]
fn another_identitys_prompt_room_is_off_limits_too() {
    // home's permission room frames home's prompts; work's agent may not retitle it,
    // nor a room where home's prompt waits.
    let mut w = World::two_identities();
    w.as_identity(HOME, |w| {
        w.attach(H1);
        w.ask(H1, "abcde");
    });
    w.mark();

    w.agent_write(1, set_topic(HOME_ROOM, "all fine"));
    w.agent_write(2, name_room(R1, "mine"));

    assert_eq!(
        w.trace(),
        [
            "refused call#1 PromptRoomState",
            "write call#2 set_room_name"
        ]
    );
}

// ----- who asks, and how a write ends -------------------------------------------------

#[test]
fn a_write_for_an_identity_never_added_is_refused_as_unknown() {
    let mut w = World::new();
    w.mark();

    w.input(Input::AgentWrite {
        identity: identity("ghost"),
        call: CallId(3),
        write: say(R1, "hi"),
    });
    w.drive();

    assert_eq!(w.trace(), ["ghost: refused call#3 UnknownIdentity"]);
    assert_eq!(w.channel.in_flight(), 0);
}

#[test]
fn a_written_write_stops_waiting_at_its_outcome_and_a_second_outcome_is_stale() {
    for outcome in [Outcome::Sent, failed()] {
        let mut w = World::new();
        w.hold(Kind::Write);
        w.agent_write(1, say(R1, "hi"));
        let id = w.held_of(Kind::Write)[0].id;
        assert_eq!(w.channel.in_flight_ids(), [id]);
        w.mark();

        w.release(id, Some(outcome.clone()));
        assert!(w.take().is_empty(), "{outcome:?}");
        assert_eq!(w.channel.in_flight(), 0);

        w.input(Input::Completed { id, outcome });
        assert_eq!(w.trace(), ["?: drop - StaleOutcome"]);
    }
}

#[test]
fn writes_in_flight_leave_prompts_and_deliveries_alone() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    w.hold(Kind::Write);
    w.agent_write(1, say(R1, "working on it"));
    let write = w.held_of(Kind::Write)[0].id;
    w.mark();

    w.say(ALICE, R1, "yes abcde");
    w.release(write, Some(failed()));

    assert_eq!(w.verdicts(S1).len(), 1);
    assert_eq!(w.edits(), [(prompt, allowed_by_reply("abcde"))]);
    assert_eq!(w.channel.in_flight(), 0);
}

// ----- an unreadable permission request ----------------------------------------------

#[test]
fn an_unreadable_permission_request_is_told_to_its_session_and_posts_nothing() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.mark();

    w.invalid_request(S1, "request_id: missing field");

    assert_eq!(
        w.trace(),
        [
            "log s1 \"matrix-channel did not relay a permission_request: request_id: missing \
             field. Nothing was posted to Matrix; answer it in Claude Code.\"",
            "drop - InvalidPermissionRequest",
        ]
    );
    assert!(w.state().prompts().is_empty());
    assert_eq!(w.channel.in_flight(), 0);
}

#[test]
fn after_an_unreadable_permission_request_the_session_still_asks_and_is_answered() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    w.invalid_request(S1, "bad request_id");
    w.mark();

    w.ask(S1, "abcde");
    w.say(ALICE, R1, "yes abcde");

    assert_eq!(
        w.verdicts(S1),
        [("abcde".to_owned(), mc_model::Behavior::Allow)]
    );
}

#[test]
fn an_unreadable_permission_request_for_an_identity_never_added_is_dropped_as_unknown() {
    let mut w = World::new();
    w.mark();

    w.input(Input::InvalidPermissionRequest {
        identity: identity("ghost"),
        session: sid(S1),
        error: "bad".into(),
    });

    assert_eq!(w.trace(), ["ghost: drop - UnknownIdentity"]);
}

// ----- identities are isolated ------------------------------------------------------

#[test]
fn no_identitys_agent_may_touch_another_identitys_prompt_or_name_its_open_id() {
    let mut w = World::two_identities();
    let prompt = w.pending_prompt("abcde");

    let trace = w.as_identity(HOME, |w| {
        let mut trace = touch_every_way(w, &prompt);
        w.mark();
        w.agent_write(6, say(HOME_ROOM, "yes abcde"));
        w.agent_write(7, react_to(&ev("$elsewhere"), "abcde"));
        w.agent_write(8, say(HOME_ROOM, "nothing to see"));
        trace.extend(w.trace());
        trace
    });
    let mut expected = refused_every_way();
    // The edit is refused by home's own rule first: the prompt is not home's message.
    expected[2] = "refused call#3 NotOwnMessage".to_owned();
    expected.extend([
        names_open(6, "abcde"),
        names_open(7, "abcde"),
        "write call#8 message".to_owned(),
    ]);
    assert_eq!(trace, expected);
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}
