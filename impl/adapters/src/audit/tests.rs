//! [`audit_entries`] over the real model: each test drives a `Channel` through the
//! steps of a prompt, a verdict or a grant and reads the entries of each step.

use super::*;
use mc_model::{
    IdentityConfig, Label, Membership, Message, MessageContent, MsgType, PermissionRequest,
    Reaction, RequestId, RoomId, SessionId, UserId,
};

const NOW: Timestamp = Timestamp(1_700_000_000_000);
const ROOM: &str = "!r:hs";
const ANN: &str = "@ann:hs";
/// An allowed sender who is no approver.
const CARL: &str = "@carl:hs";

fn bot() -> IdentityId {
    IdentityId("bot".into())
}

/// The identity `bot`, joined to [`ROOM`] where it posts its prompts, approver
/// [`ANN`], session `s1` attached.
struct World {
    channel: Channel,
    now: Timestamp,
    next_event: u64,
}

impl World {
    fn new() -> World {
        let mut config = IdentityConfig::new(UserId("@bot:hs".into()), [ANN.into(), CARL.into()]);
        config.approvers = Some([UserId(ANN.into())].into());
        config.permission_room = Some(RoomId(ROOM.into()));
        config.attach_grace_ms = 0;
        let mut channel = Channel::new();
        channel.add_identity(bot(), config).unwrap();
        let mut world = World {
            channel,
            now: NOW,
            next_event: 0,
        };
        world.step(Input::Membership {
            identity: bot(),
            room: RoomId(ROOM.into()),
            event_id: None,
            user: UserId("@bot:hs".into()),
            membership: Membership::Joined,
        });
        world.step(attach("s1"));
        world
    }

    /// Hands `input` to the model; the step's entries.
    fn step(&mut self, input: Input) -> Vec<AuditEntry> {
        self.step_effects(input).0
    }

    fn step_effects(&mut self, input: Input) -> (Vec<AuditEntry>, Vec<Effect>) {
        let effects = self.channel.handle(self.now, input.clone());
        (
            audit_entries(self.now, &input, &effects, &self.channel),
            effects,
        )
    }

    /// The events of the step's entries, each checked to be the bot's at `now`.
    fn events(&mut self, input: Input) -> Vec<AuditEvent> {
        let now = self.now;
        let entries = self.step(input);
        for entry in &entries {
            assert_eq!((entry.now, &entry.identity), (now, &bot()), "{entry:?}");
        }
        entries.into_iter().map(|e| e.event).collect()
    }

    fn event_id(&mut self, prefix: &str) -> EventId {
        self.next_event += 1;
        EventId(format!("{prefix}{}", self.next_event))
    }

    /// `from` says `body` in [`ROOM`].
    fn say(&mut self, from: &str, body: &str) -> (EventId, Input) {
        let event_id = self.event_id("$m");
        let message = Message {
            room: RoomId(ROOM.into()),
            event_id: event_id.clone(),
            sender: UserId(from.into()),
            sender_name: None,
            origin_server_ts: self.now,
            content: Some(MessageContent {
                msgtype: MsgType::Text,
                body: body.into(),
                formatted_body: None,
                relation: None,
                attachment: None,
            }),
            device: Default::default(),
        };
        let input = Input::Message {
            identity: bot(),
            message,
        };
        (event_id, input)
    }

    /// `session` asks for `id`, Bash on `command`; the prompt is posted as `$p-<id>`.
    /// Returns the post's effect id.
    fn ask_posted(&mut self, session: &str, id: &str, command: &str) -> u64 {
        let (_, effects) = self.step_effects(ask(session, id, command));
        let post = effects
            .iter()
            .find_map(|e| match e {
                Effect::PostPrompt { id, .. } => Some(*id),
                _ => None,
            })
            .expect("a prompt is posted");
        self.step(posted(post.0, &format!("$p-{id}")));
        post.0
    }
}

fn attach(session: &str) -> Input {
    Input::Attach {
        identity: bot(),
        session: SessionId(session.into()),
        label: None,
    }
}

fn ask(session: &str, id: &str, command: &str) -> Input {
    Input::PermissionRequest {
        identity: bot(),
        session: SessionId(session.into()),
        request: PermissionRequest {
            request_id: RequestId::parse(id).unwrap(),
            tool_name: "Bash".into(),
            description: "Run it".into(),
            input_preview: format!("{{\"command\":\"{command}\"}}"),
        },
    }
}

fn posted(post: u64, event_id: &str) -> Input {
    Input::Completed {
        id: mc_model::EffectId(post),
        outcome: Outcome::Posted {
            event_id: EventId(event_id.into()),
        },
    }
}

fn kinds(events: &[AuditEvent]) -> Vec<String> {
    events.iter().map(|e| chain::kind_and_body(e).0).collect()
}

#[test]
fn a_request_its_prompt_and_the_prompts_message_are_entries_of_the_session_and_request() {
    let mut world = World::new();
    let events = world.events(ask("s1", "abcde", "ls"));
    let [request, prompt] = &events[..] else {
        panic!("{events:?}")
    };
    assert_eq!(
        *request,
        AuditEvent::PermissionRequest {
            session: "s1".into(),
            request_id: "abcde".into(),
            tool: "Bash".into(),
            description: "Run it".into(),
            input_preview: "{\"command\":\"ls\"}".into(),
        }
    );
    let AuditEvent::PromptPosted {
        request_id,
        session,
        room,
        post,
        text,
        reissued,
    } = prompt
    else {
        panic!("{prompt:?}")
    };
    assert_eq!(
        (request_id.as_str(), session.as_deref(), room.as_str()),
        ("abcde", Some("s1"), ROOM)
    );
    assert!(text.contains("abcde") && text.contains("ls"), "{text}");
    assert!(!reissued);
    let post = *post;
    assert_eq!(
        world.events(posted(post, "$p")),
        [AuditEvent::PromptMessage {
            post,
            event_id: "$p".into(),
            request_id: Some("abcde".into()),
            session: Some("s1".into()),
        }]
    );
}

#[test]
fn a_text_verdict_is_an_entry_with_what_the_request_acts_on_and_its_send_another() {
    let mut world = World::new();
    world.ask_posted("s1", "abcde", "ls");
    let (yes, input) = world.say(ANN, "yes abcde");
    let (entries, effects) = world.step_effects(input);
    let send = effects
        .iter()
        .find_map(|e| match e {
            Effect::SendVerdict { id, .. } => Some(id.0),
            _ => None,
        })
        .unwrap();
    let events: Vec<AuditEvent> = entries.into_iter().map(|e| e.event).collect();
    assert_eq!(
        events,
        [
            AuditEvent::Verdict {
                session: "s1".into(),
                request_id: "abcde".into(),
                behavior: "allow".into(),
                by: ANN.into(),
                via: Via::Text {
                    event_id: yes.0.clone()
                },
                tool: Some("Bash".into()),
                subject: Some("ls".into()),
            },
            AuditEvent::VerdictSent {
                session: "s1".into(),
                request_id: "abcde".into(),
                behavior: "allow".into(),
                send,
            }
        ]
    );
}

#[test]
fn a_verdict_names_what_its_own_request_acts_on_among_the_sessions_prompts() {
    let mut world = World::new();
    world.ask_posted("s1", "abcde", "ls");
    world.ask_posted("s1", "bcdef", "pwd");
    let (_, input) = world.say(ANN, "no bcdef");
    let events = world.events(input);
    let AuditEvent::Verdict {
        session,
        behavior,
        subject,
        ..
    } = &events[0]
    else {
        panic!("{events:?}")
    };
    assert_eq!(
        (session.as_str(), behavior.as_str(), subject.as_deref()),
        ("s1", "deny", Some("pwd"))
    );
}

#[test]
fn a_post_that_comes_back_for_an_ended_prompt_is_of_the_identity_that_edits_it() {
    let effects = [
        Effect::EditPrompt {
            identity: IdentityId("other".into()),
            room: RoomId(ROOM.into()),
            event_id: EventId("$old".into()),
            text: mc_model::PromptText {
                plain: "x".into(),
                html: "x".into(),
            },
        },
        Effect::EditPrompt {
            identity: bot(),
            room: RoomId(ROOM.into()),
            event_id: EventId("$late".into()),
            text: mc_model::PromptText {
                plain: "x".into(),
                html: "x".into(),
            },
        },
    ];
    let entries = audit_entries(NOW, &posted(3, "$late"), &effects, &Channel::new());
    assert_eq!(
        entries,
        [AuditEntry {
            now: NOW,
            identity: bot(),
            event: AuditEvent::PromptMessage {
                post: 3,
                event_id: "$late".into(),
                request_id: None,
                session: None,
            }
        }]
    );
    assert_eq!(
        audit_entries(NOW, &posted(3, "$unknown"), &effects, &Channel::new()),
        [],
        "a post the model no longer knew"
    );
}

#[test]
fn a_reaction_verdict_is_an_entry_when_its_settle_window_ends_with_the_key() {
    let mut world = World::new();
    world.ask_posted("s1", "abcde", "ls");
    let reaction = Input::Reaction {
        identity: bot(),
        reaction: Reaction {
            room: RoomId(ROOM.into()),
            event_id: EventId("$r".into()),
            sender: UserId(ANN.into()),
            origin_server_ts: world.now,
            relates_to: EventId("$p-abcde".into()),
            key: "👎".into(),
            device: Default::default(),
        },
    };
    assert_eq!(world.events(reaction), [], "settling");
    world.now += mc_model::config::DEFAULT_SETTLE_MS;
    let events = world.events(Input::Tick);
    assert_eq!(kinds(&events), ["verdict", "verdict_sent"]);
    let AuditEvent::Verdict { behavior, via, .. } = &events[0] else {
        panic!()
    };
    assert_eq!(behavior, "deny");
    assert_eq!(
        *via,
        Via::Reaction {
            event_id: "$r".into(),
            key: "👎".into()
        }
    );
}

#[test]
fn a_grant_its_auto_answers_and_its_end_by_the_operator_are_entries() {
    let mut world = World::new();
    world.ask_posted("s1", "abcde", "cargo test");
    let (always, input) = world.say(ANN, "always abcde");
    let events = world.events(input);
    assert_eq!(kinds(&events), ["granted", "verdict", "verdict_sent"]);
    let granted = events[0].clone();
    let AuditEvent::Granted { expires_at, .. } = granted else {
        panic!()
    };
    assert_eq!(
        granted,
        AuditEvent::Granted {
            grant: 1,
            session: "s1".into(),
            tool: "Bash".into(),
            scope: "exact".into(),
            subject: "cargo test".into(),
            lasts: "until the session ends".into(),
            expires_at,
            by: ANN.into(),
            room: ROOM.into(),
            message: always.0,
        }
    );
    assert_eq!(
        expires_at,
        (NOW + mc_model::grant::GRANT_MAX_MS).0,
        "24 h at most"
    );

    // The same command again: answered by the grant, nobody asked.
    let events = world.events(ask("s1", "fghij", "cargo test"));
    assert_eq!(
        kinds(&events),
        ["permission_request", "verdict", "verdict_sent"]
    );
    let AuditEvent::Verdict { by, via, tool, .. } = &events[1] else {
        panic!()
    };
    assert_eq!(
        (by.as_str(), via, tool.as_deref()),
        (ANN, &Via::Grant { grant: 1 }, Some("Bash"))
    );

    let events = world.events(Input::Revoke {
        identity: bot(),
        grant: Some(1),
    });
    assert_eq!(
        events,
        [
            AuditEvent::Revoked { grant: Some(1) },
            AuditEvent::GrantEnded {
                grant: 1,
                why: "operator".into(),
                by: None
            }
        ]
    );
    assert_eq!(
        world.events(Input::Revoke {
            identity: bot(),
            grant: None,
        }),
        [AuditEvent::Revoked { grant: None }],
        "a revoke that ends nothing is an entry too"
    );
}

#[test]
fn a_grant_with_a_prefix_and_its_end_by_an_approver_at_expiry_and_at_detach_are_entries() {
    let mut world = World::new();
    world.ask_posted("s1", "abcde", "cargo test -p a");
    let (_, input) = world.say(ANN, "yes abcde 1m cargo test");
    let events = world.events(input);
    let AuditEvent::Granted {
        scope,
        subject,
        lasts,
        expires_at,
        ..
    } = &events[0]
    else {
        panic!("{events:?}")
    };
    assert_eq!(
        (
            scope.as_str(),
            subject.as_str(),
            lasts.as_str(),
            *expires_at
        ),
        ("prefix", "cargo test", "for 1 min", (NOW + 60_000).0)
    );
    let (_, input) = world.say(ANN, "revoke 1");
    assert_eq!(
        world.events(input),
        [AuditEvent::GrantEnded {
            grant: 1,
            why: "revoked".into(),
            by: Some(ANN.into())
        }]
    );

    world.ask_posted("s1", "bcdef", "ls");
    let (_, input) = world.say(ANN, "yes bcdef 1m");
    world.step(input);
    world.ask_posted("s1", "cdefg", "pwd");
    let (_, input) = world.say(ANN, "always cdefg");
    world.step(input);
    world.now += 60_000;
    let events = world.events(ask("s1", "defgh", "ls"));
    assert_eq!(
        events[1],
        AuditEvent::GrantEnded {
            grant: 2,
            why: "expired".into(),
            by: None
        },
        "noticed at the next request: {events:?}"
    );
    let events = world.events(Input::Detach {
        identity: bot(),
        session: SessionId("s1".into()),
    });
    assert_eq!(
        events,
        [AuditEvent::GrantEnded {
            grant: 3,
            why: "session_ended".into(),
            by: None
        }]
    );
}

#[test]
fn a_verdict_the_model_refuses_is_an_entry_naming_its_sender() {
    let mut world = World::new();
    world.ask_posted("s1", "abcde", "ls");
    let (by_carl, input) = world.say(CARL, "yes abcde");
    assert_eq!(
        world.events(input),
        [AuditEvent::VerdictRefused {
            event_id: Some(by_carl.0),
            sender: Some(CARL.into()),
            reason: "not_approver".into(),
        }]
    );
    let (unknown, input) = world.say(ANN, "yes zzzzz");
    let events = world.events(input);
    assert_eq!(
        events,
        [AuditEvent::VerdictRefused {
            event_id: Some(unknown.0),
            sender: Some(ANN.into()),
            reason: "unknown_request".into(),
        }]
    );
}

#[test]
fn a_refusal_of_another_event_than_the_input_names_no_sender() {
    let input = World::new().say(ANN, "yes abcde").1;
    let effects = [Effect::Dropped {
        identity: Some(bot()),
        event_id: Some(EventId("$other".into())),
        reason: DropReason::AlreadyAnswered,
    }];
    let entries = audit_entries(NOW, &input, &effects, &Channel::new());
    assert_eq!(
        entries,
        [AuditEntry {
            now: NOW,
            identity: bot(),
            event: AuditEvent::VerdictRefused {
                event_id: Some("$other".into()),
                sender: None,
                reason: "already_answered".into(),
            }
        }]
    );
}

#[test]
fn a_prompt_that_expires_is_replaced_or_fails_to_post_is_an_entry() {
    let mut world = World::new();
    world.ask_posted("s1", "abcde", "ls");
    let events = world.events(ask("s1", "abcde", "ls -l"));
    assert_eq!(
        kinds(&events),
        ["permission_request", "prompt_ended", "prompt_posted"]
    );
    assert_eq!(
        events[1],
        AuditEvent::PromptEnded {
            reason: "superseded".into(),
            prompt: Some("$p-abcde".into()),
            post: None
        }
    );
    let AuditEvent::PromptPosted { post, .. } = events[2] else {
        panic!()
    };
    world.now += mc_model::config::DEFAULT_PROMPT_TTL_MS;
    assert_eq!(
        world.events(Input::Tick),
        [AuditEvent::PromptEnded {
            reason: "expired".into(),
            prompt: None,
            post: None
        }],
        "still being posted"
    );
    // Its post comes back: the message is the bot's, the prompt is gone.
    assert_eq!(
        world.events(posted(post, "$late")),
        [AuditEvent::PromptMessage {
            post,
            event_id: "$late".into(),
            request_id: None,
            session: None,
        }]
    );

    let events = world.events(ask("s1", "bcdef", "ls"));
    let AuditEvent::PromptPosted { post, .. } = events[1] else {
        panic!()
    };
    let failed = Input::Completed {
        id: mc_model::EffectId(post),
        outcome: Outcome::Failed {
            reason: "502".into(),
        },
    };
    assert_eq!(
        world.events(failed),
        [AuditEvent::PromptEnded {
            reason: "post_failed".into(),
            prompt: None,
            post: Some(post)
        }]
    );
    world.ask_posted("s1", "cdefg", "ls");
    world.now += mc_model::config::DEFAULT_PROMPT_TTL_MS;
    let sent = Input::Completed {
        id: mc_model::EffectId(post + 100),
        outcome: Outcome::Sent,
    };
    assert_eq!(
        world.events(sent),
        [AuditEvent::PromptEnded {
            reason: "expired".into(),
            prompt: Some("$p-cdefg".into()),
            post: None
        }],
        "a timer that fires before an outcome names no post"
    );
}

#[test]
fn a_prompt_evicted_at_the_cap_is_an_entry() {
    let mut world = World::new();
    let mut config = world.channel.identity(&bot()).unwrap().config().clone();
    config.max_prompts = 1;
    let mut channel = Channel::new();
    channel.add_identity(bot(), config).unwrap();
    world.channel = channel;
    world.step(Input::Membership {
        identity: bot(),
        room: RoomId(ROOM.into()),
        event_id: None,
        user: UserId("@bot:hs".into()),
        membership: Membership::Joined,
    });
    world.step(attach("s1"));
    world.ask_posted("s1", "abcde", "ls");
    let events = world.events(ask("s1", "bcdef", "ls"));
    assert_eq!(
        events[1],
        AuditEvent::PromptEnded {
            reason: "evicted".into(),
            prompt: Some("$p-abcde".into()),
            post: None
        }
    );
}

#[test]
fn a_request_not_relayed_or_unreadable_is_an_entry_and_the_same_drop_of_another_input_none() {
    let mut world = World::new();
    let events = world.events(ask("s9", "abcde", "ls"));
    assert_eq!(
        events[1],
        AuditEvent::RequestDropped {
            session: "s9".into(),
            request_id: "abcde".into(),
            reason: "unknown_session".into(),
        }
    );
    let events = world.events(Input::InvalidPermissionRequest {
        identity: bot(),
        session: SessionId("s1".into()),
        error: "request_id: bad".into(),
    });
    assert_eq!(
        events,
        [AuditEvent::RequestInvalid {
            session: "s1".into(),
            error: "request_id: bad".into(),
        }]
    );
    let acknowledge = Input::Acknowledge {
        identity: bot(),
        session: Some(SessionId("s9".into())),
        event_id: EventId("$m".into()),
    };
    let (entries, effects) = world.step_effects(acknowledge);
    assert!(
        effects.iter().any(|e| matches!(
            e,
            Effect::Dropped {
                reason: DropReason::UnknownSession,
                ..
            }
        )),
        "{effects:?}"
    );
    assert_eq!(entries, []);
}

#[test]
fn every_reason_a_request_is_not_relayed_has_its_name() {
    for (reason, name) in [
        (DropReason::UnknownSession, "unknown_session"),
        (DropReason::NoApprovers, "no_approvers"),
        (DropReason::NoPromptRoom, "no_prompt_room"),
        (DropReason::UnknownIdentity, "unknown_identity"),
    ] {
        let effects = [Effect::Dropped {
            identity: Some(bot()),
            event_id: None,
            reason,
        }];
        let entries = audit_entries(NOW, &ask("s1", "abcde", "ls"), &effects, &Channel::new());
        assert_eq!(
            entries.last().map(|e| &e.event),
            Some(&AuditEvent::RequestDropped {
                session: "s1".into(),
                request_id: "abcde".into(),
                reason: name.into(),
            })
        );
    }
}

#[test]
fn every_reason_a_verdict_is_refused_has_its_name() {
    for (reason, name) in [
        (DropReason::NotApprover, "not_approver"),
        (DropReason::NotCrossSigned, "not_cross_signed"),
        (DropReason::ClearVerdict, "clear_verdict"),
        (DropReason::UnknownRequest, "unknown_request"),
        (DropReason::AmbiguousRequest, "ambiguous_request"),
        (DropReason::ReplyNotToPrompt, "reply_not_to_prompt"),
        (DropReason::AlreadyAnswered, "already_answered"),
        (DropReason::PromptWithdrawn, "prompt_withdrawn"),
    ] {
        let effects = [Effect::Dropped {
            identity: Some(bot()),
            event_id: None,
            reason,
        }];
        let entries = audit_entries(NOW, &Input::Tick, &effects, &Channel::new());
        assert_eq!(
            entries.iter().map(|e| &e.event).collect::<Vec<_>>(),
            [&AuditEvent::VerdictRefused {
                event_id: None,
                sender: None,
                reason: name.into(),
            }]
        );
    }
}

#[test]
fn a_drop_outside_the_relay_or_without_an_identity_is_no_entry() {
    let effects = [
        Effect::Dropped {
            identity: Some(bot()),
            event_id: Some(EventId("$m".into())),
            reason: DropReason::Stranger,
        },
        Effect::Dropped {
            identity: Some(bot()),
            event_id: None,
            reason: DropReason::InvalidPermissionRequest,
        },
        Effect::Dropped {
            identity: None,
            event_id: None,
            reason: DropReason::PromptExpired,
        },
    ];
    assert_eq!(
        audit_entries(NOW, &Input::Tick, &effects, &Channel::new()),
        []
    );
}

#[test]
fn a_prompt_posted_again_after_a_restart_is_an_entry_that_says_so() {
    let mut world = World::new();
    world.step(ask("s1", "abcde", "ls"));
    let events = world.events(Input::Restarted);
    let [AuditEvent::PromptPosted {
        request_id,
        session,
        reissued,
        ..
    }] = &events[..]
    else {
        panic!("{events:?}")
    };
    assert_eq!(
        (request_id.as_str(), session.as_deref(), *reissued),
        ("abcde", Some("s1"), true)
    );
}

#[test]
fn a_label_bound_and_unbound_is_an_entry_and_chat_is_none() {
    let mut world = World::new();
    let label = Label::parse("api").unwrap();
    let bind = |room: Option<&str>| Input::Bind {
        identity: bot(),
        label: label.clone(),
        room: room.map(|r| RoomId(r.into())),
    };
    assert_eq!(
        world.events(bind(Some(ROOM))),
        [AuditEvent::Bound {
            label: "api".into(),
            room: Some(ROOM.into())
        }]
    );
    assert_eq!(
        world.events(bind(None)),
        [AuditEvent::Bound {
            label: "api".into(),
            room: None
        }]
    );
    let (_, hello) = world.say(ANN, "hello");
    let (entries, effects) = world.step_effects(hello);
    assert!(
        effects.iter().any(|e| matches!(e, Effect::Push { .. })),
        "{effects:?}"
    );
    assert_eq!(entries, []);
}

#[test]
fn an_entry_is_of_the_identity_of_its_effect_at_the_steps_now() {
    let effects = [Effect::GrantEnded {
        identity: IdentityId("other".into()),
        id: 4,
        why: GrantEnd::Expired,
    }];
    let input = Input::Revoke {
        identity: bot(),
        grant: Some(9),
    };
    let entries = audit_entries(NOW, &input, &effects, &Channel::new());
    assert_eq!(
        entries,
        [
            AuditEntry {
                now: NOW,
                identity: bot(),
                event: AuditEvent::Revoked { grant: Some(9) }
            },
            AuditEntry {
                now: NOW,
                identity: IdentityId("other".into()),
                event: AuditEvent::GrantEnded {
                    grant: 4,
                    why: "expired".into(),
                    by: None
                }
            }
        ]
    );
}
