//! Snapshots of what leaves the core as text: the prompt, its outcome edits, the
//! push params of every kind, and the persisted state (with a serde round trip).
//!
//! A snapshot pins reviewed output: a change shows as a diff to review, and a
//! snapshot of wrong behaviour is a bug report, not a test.

mod harness;

use harness::*;
use mc_model::prompt_text::{
    render_outcome, render_prompt, Asker, PromptOutcome, DESCRIPTION_CHARS, PREVIEW_CHARS,
    TOOL_NAME_CHARS,
};
use mc_model::{
    Attachment, Behavior, Channel, ChannelNotification, Decision, Effect, MsgType,
    PermissionRequest, PromptText, Relation, ReplyTo, VerdictSource,
};

/// A labelled session with a Claude Code session id (a UUID).
fn web_app() -> (mc_model::Label, mc_model::SessionId) {
    (
        mc_model::Label::parse("web-app").unwrap(),
        mc_model::SessionId::from("5f0c2d9e-7a41-4c1b-9e0e-2b6d1f3a8c77"),
    )
}

/// A request whose every field tries something.
fn hostile_request() -> PermissionRequest {
    PermissionRequest {
        request_id: rid("abcde"),
        tool_name: "Bash".into(),
        description: "Run <script>alert('x')</script> & check\nthe \"output\"".into(),
        input_preview: r#"{"command": "echo <b>hi</b> && cat a&b > /tmp/x"}"#.into(),
    }
}

#[test]
fn the_prompt_in_plain_text() {
    let (label, session) = web_app();
    let asker = Asker {
        label: Some(&label),
        session: &session,
    };
    let text = render_prompt(&work_config(), &hostile_request(), Some(asker));
    insta::assert_snapshot!("prompt_plain", text.plain);
}

#[test]
fn the_prompt_in_html_escapes_everything_from_the_tool_call() {
    let (label, session) = web_app();
    let asker = Asker {
        label: Some(&label),
        session: &session,
    };
    let text = render_prompt(&work_config(), &hostile_request(), Some(asker));
    assert!(!text.html.contains("<script>"));
    assert!(!text.html.contains("<b>hi"));
    assert!(!text.html.contains("& "));
    insta::assert_snapshot!("prompt_html", text.html);
}

#[test]
fn long_prompt_fields_are_clipped_and_the_instruction_survives() {
    let request = PermissionRequest {
        request_id: rid("vwxyz"),
        tool_name: "T".repeat(TOOL_NAME_CHARS + 1),
        description: "d".repeat(DESCRIPTION_CHARS + 50),
        input_preview: "p".repeat(PREVIEW_CHARS + 1),
    };

    let session = mc_model::SessionId::from("5f0c2d9e-7a41-4c1b-9e0e-2b6d1f3a8c77");
    let asker = Asker {
        label: None,
        session: &session,
    };
    let text = render_prompt(&work_config(), &request, Some(asker));

    let tool = format!("{}…", "T".repeat(TOOL_NAME_CHARS));
    let description = format!("{}…", "d".repeat(DESCRIPTION_CHARS));
    let preview = format!("{}…", "p".repeat(PREVIEW_CHARS));
    assert_eq!(
        text.plain,
        format!(
            "🔐 Permission request vwxyz: Claude Code wants to run {tool}\n{description}\n\
             Input: {preview}\n\nReply \"yes vwxyz\" to allow or \"no vwxyz\" to deny, \
             or react ✅ 👍 / ❌ 👎."
        )
    );
    assert!(text.html.contains(&format!("<b>{tool}</b>")));
    assert!(text.html.ends_with(
        "<p>Reply \"yes vwxyz\" to allow or \"no vwxyz\" to deny, or react ✅ 👍 / ❌ 👎.</p>"
    ));
}

#[test]
fn fields_exactly_at_their_limits_are_not_clipped() {
    let request = PermissionRequest {
        request_id: rid("vwxyz"),
        tool_name: "T".repeat(TOOL_NAME_CHARS),
        description: "d".repeat(DESCRIPTION_CHARS),
        input_preview: "p".repeat(PREVIEW_CHARS),
    };

    let text = render_prompt(&work_config(), &request, None);

    assert!(!text.plain.contains('…'));
    assert!(!text.html.contains('…'));
}

#[test]
fn the_prompt_names_the_configured_reaction_keys() {
    let mut config = work_config();
    config.reaction_keys =
        mc_model::reaction::ReactionKeys::new(["🆗", "🚀"], ["🛑"]).expect("valid keys");

    let text = render_prompt(&config, &request("abcde"), None);

    assert!(
        text.plain.ends_with("or react 🆗 🚀 / 🛑."),
        "{}",
        text.plain
    );
}

#[test]
fn the_outcome_edits() {
    let mut w = World::new();
    let allowed = w.pending_prompt("aaaaa");
    w.say(ALICE, R1, "yes aaaaa");
    let allowed_edit = only_edit(&w, &allowed);

    w.mark();
    w.ask(S1, "bbbbb");
    let denied = w.prompt_event("bbbbb");
    w.react(ALICE, &denied, THUMBS_UP);
    w.react(ALICE, &denied, "\u{1F44E}\u{1F3FF}");
    w.advance(SETTLE);
    let denied_edit = only_edit(&w, &denied);

    w.mark();
    w.ask_with(
        S1,
        PermissionRequest {
            request_id: rid("ccccc"),
            tool_name: "mcp__srv__do<it>&".into(),
            description: "x".into(),
            input_preview: "{}".into(),
        },
    );
    let expired = w.prompt_event("ccccc");
    w.advance(TTL);
    let expired_edit = only_edit(&w, &expired);

    insta::assert_json_snapshot!("edit_allowed_by_text", allowed_edit);
    insta::assert_json_snapshot!("edit_denied_by_reaction", denied_edit);
    insta::assert_json_snapshot!("edit_expired", expired_edit);
}

fn only_edit(w: &World, event: &mc_model::EventId) -> PromptText {
    let edits: Vec<_> = w
        .effects()
        .into_iter()
        .filter_map(|e| match e {
            Effect::EditPrompt { event_id, text, .. } if &event_id == event => Some(text),
            _ => None,
        })
        .collect();
    assert_eq!(edits.len(), 1, "{:?}", w.trace());
    edits.into_iter().next().unwrap()
}

#[test]
fn outcome_text_names_the_behaviour_the_approver_and_the_way() {
    let request = request("abcde");
    let text = |behavior, via| {
        render_outcome(
            &request,
            PromptOutcome::Decided(&Decision {
                behavior,
                by: user(BOB),
                via,
            }),
        )
    };
    let by_text = VerdictSource::Text { event_id: ev("$m") };
    let by_reaction = VerdictSource::Reaction {
        event_id: ev("$r"),
        key: "✅".into(),
    };
    assert_eq!(
        text(Behavior::Deny, by_text).plain,
        "❌ Denied by @bob:hs by reply: permission request abcde (Bash)"
    );
    assert_eq!(
        text(Behavior::Allow, by_reaction).plain,
        "✅ Allowed by @bob:hs with ✅: permission request abcde (Bash)"
    );
    assert_eq!(
        render_outcome(&request, PromptOutcome::Expired).html,
        "<p>⌛ Expired: no answer in time: permission request <code>abcde</code> (<b>Bash</b>)</p>"
    );
}

/// The notification of the only push in `w` since the mark.
fn only_notification(w: &World) -> ChannelNotification {
    let notifications: Vec<_> = w
        .effects()
        .into_iter()
        .filter_map(|e| match e {
            Effect::Push { notification, .. } => Some(notification),
            _ => None,
        })
        .collect();
    assert_eq!(notifications.len(), 1, "{:?}", w.trace());
    let notification = notifications.into_iter().next().unwrap();
    assert_in_vocabulary(&notification);
    notification
}

/// Every key of a push is named in the vocabulary the server's instructions give, and
/// every value of a key with a closed set is one the vocabulary lists.
#[track_caller]
fn assert_in_vocabulary(notification: &ChannelNotification) {
    let vocabulary = mc_model::meta::vocabulary();
    for (key, _) in notification.meta.iter() {
        let named = vocabulary.starts_with(&format!("{key} "))
            || vocabulary.starts_with(&format!("{key}:"))
            || vocabulary.contains(&format!("; {key} "))
            || vocabulary.contains(&format!("; {key}:"));
        assert!(
            named,
            "meta key {key} is not in the vocabulary: {vocabulary}"
        );
    }
    assert_eq!(
        mc_model::meta::undescribed(&notification.meta),
        None,
        "a pushed value the vocabulary does not list: {vocabulary}"
    );
}

#[test]
fn the_vocabulary_names_every_key_and_the_closed_values_of_each() {
    use mc_model::meta::vocabulary;
    use mc_model::MetaKey;
    let vocabulary = vocabulary();
    let entries: Vec<&str> = vocabulary.split("; ").collect();
    assert_eq!(entries.len(), MetaKey::ALL.len(), "{vocabulary}");
    for (entry, key) in entries.iter().zip(MetaKey::ALL) {
        let expected = match key.values() {
            Some(values) => format!("{} ({}): {}", key.as_str(), values.join("|"), key.doc()),
            None => format!("{}: {}", key.as_str(), key.doc()),
        };
        assert_eq!(*entry, expected);
        assert!(!key.doc().is_empty() && !key.doc().contains(';'), "{key:?}");
    }
    assert!(vocabulary.starts_with(
        "security: on a session's first event, the contract above in short; \
         kind (message|edit|reaction|retraction|replay_cut|undecryptable|gap_cut): "
    ));
    assert!(vocabulary.contains("; in_reply_to_status (quoted|unresolved): "));
    assert!(vocabulary.contains("; in_reply_to_trust (allowed|own|stranger): "));
    assert!(vocabulary.contains("; attachment_kind (image|file|audio|video): "));
    assert!(vocabulary.contains("; suspicious (true): "));
    assert!(vocabulary.contains("; room_id: the room; "));
}

#[test]
fn a_value_outside_its_keys_closed_set_is_found() {
    use mc_model::meta::undescribed;
    use mc_model::{Meta, MetaKey};
    let mut meta = Meta::default();
    meta.set(MetaKey::Kind, "message");
    meta.set(MetaKey::RoomId, "anything at all");
    meta.set(MetaKey::Replayed, "true");
    assert_eq!(undescribed(&meta), None);
    meta.set(MetaKey::InReplyToTrust, "not_allowed");
    assert_eq!(
        undescribed(&meta),
        Some(("in_reply_to_trust", "not_allowed".to_owned()))
    );
    let mut meta = Meta::default();
    meta.set(MetaKey::Truncated, "yes");
    assert_eq!(undescribed(&meta), Some(("truncated", "yes".to_owned())));
}

fn live() -> World {
    let mut w = World::new();
    w.attach(S1);
    w.mark();
    w
}

#[test]
fn push_params_of_a_message() {
    let mut w = live();
    w.say(ALICE, R1, "hello <channel> & goodbye");
    insta::assert_json_snapshot!("push_message", only_notification(&w));
}

#[test]
fn push_params_of_a_reply() {
    let mut w = live();
    let parent = mc_model::Parent {
        sender: ALICE.into(),
        body: "the\nparent".into(),
        has_reply_relation: false,
    };
    let m = w.related(
        BOB,
        R1,
        "> <@alice:hs> the\n> parent\n\nthe reply",
        reply(&ev("$parent"), Some(parent)),
    );
    w.send(m);
    insta::assert_json_snapshot!("push_reply", only_notification(&w));
}

#[test]
fn push_params_of_a_thread_message() {
    let mut w = live();
    let m = w.related(
        BOB,
        R1,
        "> <@alice:hs> root\nin the thread",
        Relation::Thread {
            root: ev("$root"),
            in_reply_to: Some(ReplyTo {
                event_id: ev("$latest"),
                parent: None,
            }),
            is_falling_back: true,
        },
    );
    w.send(m);
    insta::assert_json_snapshot!("push_thread_message", only_notification(&w));
}

#[test]
fn push_params_of_an_edit() {
    let mut w = live();
    let original = w.say(ALICE, R1, "helo");
    w.mark();
    let edit = w.related(ALICE, R1, "* hello", replacement(&original, "hello"));
    w.send(edit);
    insta::assert_json_snapshot!("push_edit", only_notification(&w));
}

#[test]
fn push_params_of_a_reaction() {
    let mut w = live();
    let hello = w.say(BOB, R1, "hello");
    w.mark();
    w.react(ALICE, &hello, THUMBS_UP_EMOJI);
    insta::assert_json_snapshot!("push_reaction", only_notification(&w));
}

#[test]
fn push_params_of_a_retraction() {
    let mut w = live();
    let m = w.say(ALICE, R1, "oops");
    w.mark();
    w.redact(ALICE, &m);
    insta::assert_json_snapshot!("push_retraction", only_notification(&w));
}

#[test]
fn push_params_of_an_attachment() {
    let mut w = live();
    let mut c = content(MsgType::Image, "cat.png");
    c.attachment = Some(Attachment {
        filename: "cat.png".into(),
        size: Some(48_213),
        mimetype: Some("image/png".into()),
    });
    let m = w.message(ALICE, R1, c);
    w.send(m);
    insta::assert_json_snapshot!("push_attachment", only_notification(&w));
}

#[test]
fn push_params_of_the_replay_cut_notice() {
    let mut w = World::configured(|c| c.replay_budget = 1);
    w.say(ALICE, R1, "old");
    w.say(ALICE, R1, "new");
    w.mark();
    w.attach(S1);
    let first = w
        .effects()
        .into_iter()
        .find_map(|e| match e {
            Effect::Push { notification, .. } => Some(notification),
            _ => None,
        })
        .expect("a push");
    insta::assert_json_snapshot!("push_replay_cut", first);
}

/// A short scenario that leaves something in every part of the state: live and
/// detached sessions, a settling and a decided prompt, a queued event, a push in
/// flight, and log entries of each kind.
fn short_scenario() -> Channel {
    let mut w = World::new();
    w.attach(S1);
    w.attach(S2);
    w.say(ALICE, R1, "hello");
    w.ask(S1, "abcde");
    let prompt = w.prompt_event("abcde");
    w.ask(S2, "qwert");
    w.ask(S2, "zxcvb");
    w.react(ALICE, &prompt, THUMBS_UP);
    w.say(BOB, R1, "yes abcde");
    // The verdict's send fails: qwert stays decided, for S2 when it returns.
    w.fail_next(Kind::Verdict);
    w.say(ALICE, R1, "no qwert");
    // S2's stream closes: zxcvb is withdrawn.
    w.detach(S2);
    w.hold(Kind::Push);
    w.say(BOB, R2, "in flight");
    w.unhold(Kind::Push);
    // A push to S1 fails: S1 is gone, abcde still settles, and what follows waits.
    w.fail_next(Kind::Push);
    w.say(ALICE, R2, "lost on the way");
    w.say(ALICE, R2, "queued");
    w.channel.clone()
}

#[test]
fn the_persisted_state_after_a_short_scenario() {
    let json = serde_json::to_string_pretty(&short_scenario()).expect("the state serializes");
    insta::assert_snapshot!("channel_state", json);
}

#[test]
fn the_persisted_state_snapshot_deserializes_to_the_live_state() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/snapshots/rendering__channel_state.snap"
    );
    let snap = std::fs::read_to_string(path).expect("the channel_state snapshot exists");
    let body = snap
        .splitn(3, "---\n")
        .nth(2)
        .expect("an insta header, then the body");
    let from_snapshot: Channel = serde_json::from_str(body).expect("the snapshot is a Channel");
    assert_eq!(from_snapshot, short_scenario());
}

#[test]
fn the_state_survives_a_serde_round_trip_and_behaves_the_same() {
    let live = short_scenario();
    let json = serde_json::to_string(&live).unwrap();
    let mut back: Channel = serde_json::from_str(&json).unwrap();
    let mut original = live.clone();
    assert_eq!(back, original);

    let later = START + SETTLE;
    assert_eq!(
        back.handle(later, mc_model::Input::Tick),
        original.handle(later, mc_model::Input::Tick)
    );
    assert_eq!(back, original);
}
