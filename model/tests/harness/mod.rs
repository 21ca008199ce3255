//! A deterministic world for scenario tests, in the style of quinn's test `Pair`.
//!
//! [`World`] wraps one [`Channel`] with a virtual clock (`now`, milliseconds), makes
//! Matrix events with fresh ids, answers every effect that carries an [`EffectId`]
//! (a `PostPrompt` is `Posted` as a fresh `$pN`, a `Push` or `SendVerdict` is `Sent`),
//! and records every effect in order. Switches make the next outcome of a kind fail,
//! or hold the outcomes of a kind until the test releases them. No sleeps, no
//! threads, no IO.
//!
//! Every input goes through [`World::input`], which checks on every transition what
//! must always hold: every meta key is a valid attribute name and never `source`,
//! the content cannot close the `<channel>` wrapper, effect ids strictly increase,
//! time never runs backwards, and no input changes an identity's config.

#![allow(dead_code)]

use mc_model::meta::is_valid_meta_key;
use mc_model::{
    AgentWrite, Behavior, CallId, Channel, ChannelNotification, DropReason, Effect, EffectId,
    EventId, IdentityConfig, IdentityId, Input, Label, Message, MessageContent, Millis, MsgType,
    NewContent, Outcome, Parent, PermissionRequest, Reaction, Redaction, Relation, ReplyTo,
    RequestId, RoomId, SessionId, Timestamp, Undecryptable, UserId, VerdictSource,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

pub const WORK: &str = "work";
pub const HOME: &str = "home";
pub const BOT: &str = "@bot:hs";
pub const HOME_BOT: &str = "@homebot:hs";
/// An approver of `work`.
pub const ALICE: &str = "@alice:hs";
/// Allowed in `work`, not an approver.
pub const BOB: &str = "@bob:hs";
/// Allowed nowhere.
pub const MALLORY: &str = "@mallory:hs";
pub const R1: &str = "!r1:hs";
pub const R2: &str = "!r2:hs";
/// `home`'s fixed permission room.
pub const HOME_ROOM: &str = "!home:hs";
/// The rooms every identity of a world is joined to from the start.
pub const JOINED_ROOMS: &[&str] = &[R1, R2, HOME_ROOM, "!r:hs"];
pub const S1: &str = "s1";
pub const S2: &str = "s2";
pub const H1: &str = "h1";
/// The virtual clock starts here (2023-11-14, like a real `origin_server_ts`).
pub const START: Timestamp = Timestamp(1_700_000_000_000);
/// The default settle window and prompt time to live.
pub const SETTLE: Millis = 3_000;
pub const TTL: Millis = 15 * 60 * 1000;

pub const THUMBS_UP: &str = "\u{1F44D}";
pub const THUMBS_UP_EMOJI: &str = "\u{1F44D}\u{FE0F}";
pub const THUMBS_UP_TONE: &str = "\u{1F44D}\u{1F3FD}";
pub const THUMBS_DOWN: &str = "\u{1F44E}";

/// `work`: bot `@bot:hs`, allowed `@alice:hs` and `@bob:hs`, approver `@alice:hs`;
/// no attach grace (the grace's own scenarios set one).
pub fn work_config() -> IdentityConfig {
    let mut config = IdentityConfig::new(BOT.into(), [ALICE.into(), BOB.into()]);
    config.attach_grace_ms = 0;
    config.approvers = Some([UserId::from(ALICE)].into());
    config
}

/// `home`: bot `@homebot:hs`, allowed (and approver) `@alice:hs`, prompts in
/// `!home:hs`; no attach grace.
pub fn home_config() -> IdentityConfig {
    let mut config = IdentityConfig::new(HOME_BOT.into(), [ALICE.into()]);
    config.attach_grace_ms = 0;
    config.permission_room = Some(HOME_ROOM.into());
    config
}

pub fn rid(id: &str) -> RequestId {
    RequestId::parse(id).expect("a valid request id in a test")
}

pub fn ev(id: &str) -> EventId {
    EventId::from(id)
}

/// A permission request for `Bash` with a plain description.
pub fn request(id: &str) -> PermissionRequest {
    PermissionRequest {
        request_id: rid(id),
        tool_name: "Bash".into(),
        description: "List files".into(),
        input_preview: r#"{"command":"ls"}"#.into(),
    }
}

/// The display name each test user has in every room (`@mallory:hs` has none).
pub fn display_name(user: &str) -> Option<String> {
    match user {
        ALICE => Some("Alice".into()),
        BOB => Some("Bob".into()),
        _ => None,
    }
}

pub fn content(msgtype: MsgType, body: &str) -> MessageContent {
    MessageContent {
        msgtype,
        body: body.into(),
        formatted_body: None,
        relation: None,
        attachment: None,
    }
}

/// A rich reply relation to `to`, with the parent resolved or not.
pub fn reply(to: &EventId, parent: Option<Parent>) -> Relation {
    Relation::Reply {
        in_reply_to: ReplyTo {
            event_id: to.clone(),
            parent,
        },
    }
}

pub fn parent(sender: &str, body: &str) -> Parent {
    Parent {
        sender: sender.into(),
        body: body.into(),
        has_reply_relation: false,
    }
}

/// An `m.replace` relation to `original` with `m.new_content` of type `m.text`.
pub fn replacement(original: &EventId, new_body: &str) -> Relation {
    Relation::Replacement {
        original: original.clone(),
        new_content: Some(NewContent {
            msgtype: MsgType::Text,
            body: new_body.into(),
        }),
    }
}

/// An effect kind that expects an outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Push,
    Post,
    Verdict,
    /// An agent's write ([`Effect::Write`]).
    Write,
    /// A join on an invite ([`Effect::JoinRoom`]).
    Join,
    /// A label's room being created ([`Effect::CreateRoom`]): the room is
    /// `!room-<label>:example.org`.
    Create,
}

/// The room the world creates for `label` ([`Kind::Create`]).
pub fn label_room(label: &str) -> RoomId {
    RoomId(format!("!room-{label}:example.org"))
}

/// One `notifications/claude/channel` push, as a session would see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pushed {
    pub id: EffectId,
    pub event_id: Option<EventId>,
    pub content: String,
    pub meta: BTreeMap<String, String>,
}

impl Pushed {
    pub fn meta(&self, key: &str) -> Option<&str> {
        self.meta.get(key).map(String::as_str)
    }
}

/// An outcome the world is holding back, to be released by the test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub id: EffectId,
    pub kind: Kind,
    pub outcome: Outcome,
}

pub struct World {
    pub channel: Channel,
    /// The virtual clock, milliseconds.
    pub now: Timestamp,
    /// The identity the builders send to.
    pub identity: IdentityId,
    /// Every effect, with the time it was produced, in order.
    log: Vec<(Timestamp, Effect)>,
    /// Observations start here (see [`World::mark`]).
    seen: usize,
    /// Outcomes to report on the next [`World::drive`].
    ready: VecDeque<(EffectId, Outcome)>,
    /// Outcomes held back by [`World::hold`].
    held: Vec<Held>,
    holding: BTreeSet<Kind>,
    /// Kinds whose next outcome is `Failed`, one entry per failure.
    failing: Vec<Kind>,
    /// Prompts the auto-responder posted: request id and event id, in order.
    posted: Vec<(RequestId, EventId)>,
    /// Which post effect asked for which request id.
    post_requests: BTreeMap<EffectId, RequestId>,
    next_event: u64,
    last_effect_id: Option<EffectId>,
}

impl Default for World {
    fn default() -> Self {
        Self::new()
    }
}

impl World {
    /// A world with the `work` identity.
    pub fn new() -> Self {
        Self::with(vec![(WORK, work_config())])
    }

    /// A world with `work` and `home`.
    pub fn two_identities() -> Self {
        Self::with(vec![(WORK, work_config()), (HOME, home_config())])
    }

    /// A world with only `work`, configured by `adjust`.
    pub fn configured(adjust: impl FnOnce(&mut IdentityConfig)) -> Self {
        let mut config = work_config();
        adjust(&mut config);
        Self::with(vec![(WORK, config)])
    }

    pub fn with(identities: Vec<(&str, IdentityConfig)>) -> Self {
        let mut channel = Channel::new();
        for (name, config) in identities {
            let user = config.user_id.clone();
            channel
                .add_identity(name.into(), config)
                .expect("a valid config in a test");
            // Every identity is joined to the tests' rooms, as the server reports
            // when it starts (no effects).
            for room in JOINED_ROOMS {
                let effects = channel.handle(
                    START,
                    Input::Membership {
                        identity: name.into(),
                        room: (*room).into(),
                        event_id: None,
                        user: user.clone(),
                        membership: mc_model::Membership::Joined,
                    },
                );
                assert!(effects.is_empty(), "{effects:?}");
            }
        }
        World {
            channel,
            now: START,
            identity: WORK.into(),
            log: Vec::new(),
            seen: 0,
            ready: VecDeque::new(),
            held: Vec::new(),
            holding: BTreeSet::new(),
            failing: Vec::new(),
            posted: Vec::new(),
            post_requests: BTreeMap::new(),
            next_event: 0,
            last_effect_id: None,
        }
    }

    // ----- the clock and the loop ----------------------------------------------

    /// Handles one input at `now`, checks the invariants, records the effects and
    /// schedules their outcomes. Does not drive.
    pub fn input(&mut self, input: Input) -> Vec<Effect> {
        let configs_before = self.configs();
        let effects = self.channel.handle(self.now, input);
        assert_eq!(
            self.channel.now(),
            self.now.max(self.channel.now()),
            "the core's clock ran backwards"
        );
        assert_eq!(
            self.configs(),
            configs_before,
            "an input changed an identity's config"
        );
        for effect in &effects {
            self.check(effect);
            self.respond(effect);
            self.log.push((self.now, effect.clone()));
        }
        effects
    }

    /// Reports ready outcomes and fires due timers until nothing is left to do. Does
    /// not move the clock.
    pub fn drive(&mut self) {
        for _ in 0..10_000 {
            if let Some((id, outcome)) = self.ready.pop_front() {
                self.input(Input::Completed { id, outcome });
                continue;
            }
            match self.channel.next_deadline() {
                Some(deadline) if deadline <= self.now => {
                    self.input(Input::Tick);
                }
                _ => return,
            }
        }
        panic!("drive() did not become quiet");
    }

    /// Moves the clock `ms` forward, firing each timer at its own deadline on the way.
    pub fn advance(&mut self, ms: Millis) {
        let target = self.now.saturating_add(ms);
        self.advance_to(target);
    }

    /// Moves the clock to `target`, firing each timer at its own deadline on the way.
    pub fn advance_to(&mut self, target: Timestamp) {
        assert!(target >= self.now, "the world's clock never runs backwards");
        loop {
            self.drive();
            match self.channel.next_deadline() {
                Some(deadline) if deadline <= target => {
                    self.now = self.now.max(deadline);
                    self.input(Input::Tick);
                }
                _ => break,
            }
        }
        self.now = target;
        self.drive();
    }

    // ----- outcome switches ----------------------------------------------------

    /// The next effect of `kind` fails.
    pub fn fail_next(&mut self, kind: Kind) {
        self.failing.push(kind);
    }

    /// Outcomes of `kind` are held until released.
    pub fn hold(&mut self, kind: Kind) {
        self.holding.insert(kind);
    }

    /// Outcomes of `kind` are reported at once again (already held ones stay held).
    pub fn unhold(&mut self, kind: Kind) {
        self.holding.remove(&kind);
    }

    /// The held outcomes, oldest first.
    pub fn held(&self) -> &[Held] {
        &self.held
    }

    /// The held outcomes of `kind`, oldest first.
    pub fn held_of(&self, kind: Kind) -> Vec<Held> {
        self.held
            .iter()
            .filter(|h| h.kind == kind)
            .cloned()
            .collect()
    }

    /// Reports the held outcome of `id` (its own, or `outcome` when given) and drives.
    pub fn release(&mut self, id: EffectId, outcome: Option<Outcome>) {
        let at = self
            .held
            .iter()
            .position(|h| h.id == id)
            .unwrap_or_else(|| panic!("{id} is not held"));
        let held = self.held.remove(at);
        self.input(Input::Completed {
            id,
            outcome: outcome.unwrap_or(held.outcome),
        });
        self.drive();
    }

    /// Reports every held outcome, oldest first, each as planned, and drives.
    pub fn release_all(&mut self) {
        let held = std::mem::take(&mut self.held);
        for h in held {
            self.input(Input::Completed {
                id: h.id,
                outcome: h.outcome,
            });
        }
        self.drive();
    }

    // ----- builders ------------------------------------------------------------

    /// A fresh event id with `prefix` (`$m`, `$r`, `$x`, `$p`).
    pub fn fresh(&mut self, prefix: &str) -> EventId {
        self.next_event += 1;
        EventId(format!("{prefix}{}", self.next_event))
    }

    /// An `m.text` message from `from` in `room`, sent now, with the sender's display
    /// name.
    pub fn text(&mut self, from: &str, room: &str, body: &str) -> Message {
        self.message(from, room, content(MsgType::Text, body))
    }

    /// A message with `content` from `from` in `room`, sent now.
    pub fn message(&mut self, from: &str, room: &str, content: MessageContent) -> Message {
        Message {
            room: room.into(),
            event_id: self.fresh("$m"),
            sender: from.into(),
            sender_name: display_name(from),
            origin_server_ts: self.now,
            content: Some(content),
            device: mc_model::DeviceTrust::PlaintextRoom,
        }
    }

    /// An `m.text` message with a relation.
    pub fn related(&mut self, from: &str, room: &str, body: &str, relation: Relation) -> Message {
        let mut c = content(MsgType::Text, body);
        c.relation = Some(relation);
        self.message(from, room, c)
    }

    pub fn reaction(&mut self, from: &str, on: &EventId, key: &str) -> Reaction {
        Reaction {
            room: R1.into(),
            event_id: self.fresh("$r"),
            sender: from.into(),
            origin_server_ts: self.now,
            relates_to: on.clone(),
            key: key.into(),
            device: mc_model::DeviceTrust::PlaintextRoom,
        }
    }

    pub fn redaction(&mut self, from: &str, of: &EventId) -> Redaction {
        Redaction {
            room: R1.into(),
            event_id: self.fresh("$x"),
            sender: from.into(),
            origin_server_ts: self.now,
            redacts: of.clone(),
        }
    }

    /// An `m.room.encrypted` event from `from` in `room`, sent now, that could not be
    /// decrypted.
    pub fn undecryptable(&mut self, from: &str, room: &str) -> Undecryptable {
        Undecryptable {
            room: room.into(),
            event_id: self.fresh("$u"),
            sender: from.into(),
            sender_name: display_name(from),
            origin_server_ts: self.now,
            session_id: Some("megolm-session".into()),
        }
    }

    /// The `m.text` message `event` turns out to be once its room key came.
    pub fn decrypted_text(&self, event: &Undecryptable, body: &str) -> Message {
        Message {
            room: event.room.clone(),
            event_id: event.event_id.clone(),
            sender: event.sender.clone(),
            sender_name: event.sender_name.clone(),
            origin_server_ts: event.origin_server_ts,
            content: Some(content(MsgType::Text, body)),
            device: mc_model::DeviceTrust::PlaintextRoom,
        }
    }

    // ----- acting (each drives) ------------------------------------------------

    /// Hands `event` to the default identity as undecryptable and drives.
    pub fn send_undecryptable(&mut self, event: Undecryptable) -> EventId {
        let id = event.event_id.clone();
        let identity = self.identity.clone();
        self.input(Input::Undecryptable { identity, event });
        self.drive();
        id
    }

    /// Sends `message` to the default identity and drives. Returns its event id.
    pub fn send(&mut self, message: Message) -> EventId {
        let id = message.event_id.clone();
        let identity = self.identity.clone();
        self.input(Input::Message { identity, message });
        self.drive();
        id
    }

    /// `from` writes `body` in `room`.
    pub fn say(&mut self, from: &str, room: &str, body: &str) -> EventId {
        let message = self.text(from, room, body);
        self.send(message)
    }

    /// `from` reacts with `key` to `on` (in `!r1:hs`).
    pub fn react(&mut self, from: &str, on: &EventId, key: &str) -> EventId {
        let reaction = self.reaction(from, on, key);
        self.send_reaction(reaction)
    }

    pub fn send_reaction(&mut self, reaction: Reaction) -> EventId {
        let id = reaction.event_id.clone();
        let identity = self.identity.clone();
        self.input(Input::Reaction { identity, reaction });
        self.drive();
        id
    }

    /// `from` redacts `of` (in `!r1:hs`).
    pub fn redact(&mut self, from: &str, of: &EventId) -> EventId {
        let redaction = self.redaction(from, of);
        self.send_redaction(redaction)
    }

    pub fn send_redaction(&mut self, redaction: Redaction) -> EventId {
        let id = redaction.event_id.clone();
        let identity = self.identity.clone();
        self.input(Input::Redaction {
            identity,
            redaction,
        });
        self.drive();
        id
    }

    pub fn attach(&mut self, session: &str) {
        let identity = self.identity.clone();
        self.input(Input::Attach {
            identity,
            session: session.into(),
            label: None,
        });
        self.drive();
    }

    /// Attaches `session` with `label` (its room is [`label_room`] once created).
    pub fn attach_labelled(&mut self, session: &str, label: &str) {
        let identity = self.identity.clone();
        self.input(Input::Attach {
            identity,
            session: session.into(),
            label: Some(Label::parse(label).expect("a test label is a label")),
        });
        self.drive();
    }

    /// The operator binds `label` to `room`, or unbinds it with `None`.
    pub fn bind(&mut self, label: &str, room: Option<&RoomId>) {
        let identity = self.identity.clone();
        self.input(Input::Bind {
            identity,
            label: Label::parse(label).expect("a test label is a label"),
            room: room.cloned(),
        });
        self.drive();
    }

    pub fn detach(&mut self, session: &str) {
        let identity = self.identity.clone();
        self.input(Input::Detach {
            identity,
            session: session.into(),
        });
        self.drive();
    }

    /// `session` asks for permission with [`request`] `id`.
    pub fn ask(&mut self, session: &str, id: &str) {
        self.ask_with(session, request(id));
    }

    pub fn ask_with(&mut self, session: &str, request: PermissionRequest) {
        let identity = self.identity.clone();
        self.input(Input::PermissionRequest {
            identity,
            session: session.into(),
            request,
        });
        self.drive();
    }

    pub fn ack(&mut self, session: &str, event_id: &EventId) {
        let identity = self.identity.clone();
        self.input(Input::Acknowledge {
            identity,
            session: Some(session.into()),
            event_id: event_id.clone(),
        });
        self.drive();
    }

    /// An acknowledgement from the identity's tools, outside any channel session.
    pub fn ack_by_tool(&mut self, event_id: &EventId) {
        let identity = self.identity.clone();
        self.input(Input::Acknowledge {
            identity,
            session: None,
            event_id: event_id.clone(),
        });
        self.drive();
    }

    /// The agent asks for `write` as tool call `call#{call}` of the default identity;
    /// drives. Returns the effects of the input itself (not of its outcome).
    pub fn agent_write(&mut self, call: u64, write: AgentWrite) -> Vec<Effect> {
        let identity = self.identity.clone();
        let effects = self.input(Input::AgentWrite {
            identity,
            call: CallId(call),
            write,
        });
        self.drive();
        effects
    }

    /// The server restarted: [`Input::Restarted`]; held outcomes are forgotten (the
    /// process that would have reported them is gone). Does not drive.
    pub fn restart(&mut self) {
        self.held.clear();
        self.ready.clear();
        self.input(Input::Restarted);
    }

    /// The server could not read a `permission_request` from `session`.
    pub fn invalid_request(&mut self, session: &str, error: &str) {
        let identity = self.identity.clone();
        self.input(Input::InvalidPermissionRequest {
            identity,
            session: session.into(),
            error: error.into(),
        });
        self.drive();
    }

    /// Runs `act` with the builders sending to `identity`.
    pub fn as_identity<T>(&mut self, identity: &str, act: impl FnOnce(&mut World) -> T) -> T {
        let before = std::mem::replace(&mut self.identity, identity.into());
        let out = act(self);
        self.identity = before;
        out
    }

    // ----- common set-ups ------------------------------------------------------

    /// `s1` attached, Alice wrote in `!r1:hs`, and `s1` asked `id`; the prompt is
    /// posted. Observations start after it. Returns the prompt's event id.
    pub fn pending_prompt(&mut self, id: &str) -> EventId {
        self.attach(S1);
        self.say(ALICE, R1, "hello");
        self.ask(S1, id);
        let prompt = self.prompt_event(id);
        self.mark();
        prompt
    }

    // ----- observations (since the last mark) ----------------------------------

    /// The event ids in the default identity's queue, oldest first.
    pub fn queued_ids(&self) -> Vec<EventId> {
        self.state()
            .queue()
            .iter()
            .map(|q| q.event_id.clone())
            .collect()
    }

    /// Observations start after everything recorded so far.
    pub fn mark(&mut self) {
        self.seen = self.log.len();
    }

    /// Every effect since the mark, in order.
    pub fn effects(&self) -> Vec<Effect> {
        self.log[self.seen..]
            .iter()
            .map(|(_, e)| e.clone())
            .collect()
    }

    /// Every effect since the mark, one line each (see [`line`]).
    pub fn trace(&self) -> Vec<String> {
        self.log[self.seen..]
            .iter()
            .map(|(_, e)| line(&self.identity, e))
            .collect()
    }

    /// [`World::trace`], then [`World::mark`].
    pub fn take(&mut self) -> Vec<String> {
        let trace = self.trace();
        self.mark();
        trace
    }

    /// The instant each effect since the mark was produced.
    pub fn times(&self) -> Vec<Timestamp> {
        self.log[self.seen..].iter().map(|(t, _)| *t).collect()
    }

    /// Pushes to `session` (of any identity) since the mark.
    pub fn pushes(&self, session: &str) -> Vec<Pushed> {
        self.effects()
            .into_iter()
            .filter_map(|e| match e {
                Effect::Push {
                    id,
                    session: s,
                    event_id,
                    notification,
                    ..
                } if s.as_str() == session => Some(pushed(id, event_id, &notification)),
                _ => None,
            })
            .collect()
    }

    /// Every push since the mark, to any session.
    pub fn all_pushes(&self) -> Vec<(SessionId, Pushed)> {
        self.effects()
            .into_iter()
            .filter_map(|e| match e {
                Effect::Push {
                    id,
                    session,
                    event_id,
                    notification,
                    ..
                } => Some((session, pushed(id, event_id, &notification))),
                _ => None,
            })
            .collect()
    }

    /// Verdicts sent to `session` since the mark: request id and behaviour.
    pub fn verdicts(&self, session: &str) -> Vec<(String, Behavior)> {
        self.effects()
            .into_iter()
            .filter_map(|e| match e {
                Effect::SendVerdict {
                    session: s,
                    verdict,
                    ..
                } if s.as_str() == session => {
                    Some((verdict.request_id.to_string(), verdict.behavior))
                }
                _ => None,
            })
            .collect()
    }

    /// Every verdict sent since the mark, to any session.
    pub fn all_verdicts(&self) -> Vec<(String, String, Behavior)> {
        self.effects()
            .into_iter()
            .filter_map(|e| match e {
                Effect::SendVerdict {
                    session, verdict, ..
                } => Some((
                    session.to_string(),
                    verdict.request_id.to_string(),
                    verdict.behavior,
                )),
                _ => None,
            })
            .collect()
    }

    /// Prompt edits since the mark: the edited event and the plain text.
    pub fn edits(&self) -> Vec<(EventId, String)> {
        self.effects()
            .into_iter()
            .filter_map(|e| match e {
                Effect::EditPrompt { event_id, text, .. } => Some((event_id, text.plain)),
                _ => None,
            })
            .collect()
    }

    /// Notices since the mark: the event replied to and the text.
    pub fn notices(&self) -> Vec<(EventId, String)> {
        self.effects()
            .into_iter()
            .filter_map(|e| match e {
                Effect::Notice {
                    in_reply_to, text, ..
                } => Some((in_reply_to, text)),
                _ => None,
            })
            .collect()
    }

    /// Drops since the mark: the event and the reason.
    pub fn drops(&self) -> Vec<(Option<EventId>, DropReason)> {
        self.effects()
            .into_iter()
            .filter_map(|e| match e {
                Effect::Dropped {
                    event_id, reason, ..
                } => Some((event_id, reason)),
                _ => None,
            })
            .collect()
    }

    /// Prompts posted since the mark: room and request id.
    pub fn posts(&self) -> Vec<(RoomId, String)> {
        self.effects()
            .into_iter()
            .filter_map(|e| match e {
                Effect::PostPrompt {
                    room, request_id, ..
                } => Some((room, request_id.to_string())),
                _ => None,
            })
            .collect()
    }

    /// The event id the latest prompt for `id` was posted as (ever, not only since
    /// the mark).
    pub fn prompt_event(&self, id: &str) -> EventId {
        self.posted
            .iter()
            .rev()
            .find(|(r, _)| r.as_str() == id)
            .map(|(_, e)| e.clone())
            .unwrap_or_else(|| panic!("no prompt for {id} was posted"))
    }

    /// The default identity's state.
    pub fn state(&self) -> &mc_model::IdentityState {
        self.channel
            .identity(&self.identity)
            .expect("the default identity exists")
    }

    /// The default identity's prompts' phases, as short names, oldest first.
    pub fn phases(&self) -> Vec<String> {
        self.state()
            .prompts()
            .iter()
            .map(|p| {
                let phase = match &p.phase {
                    mc_model::Phase::Posting { .. } => "posting",
                    mc_model::Phase::Pending { .. } => "pending",
                    mc_model::Phase::Settling { .. } => "settling",
                    mc_model::Phase::Withdrawn { .. } => "withdrawn",
                    mc_model::Phase::Decided { .. } => "decided",
                    mc_model::Phase::Delivering { .. } => "delivering",
                };
                format!("{} {} {phase}", p.session, p.request.request_id)
            })
            .collect()
    }

    // ----- internals -----------------------------------------------------------

    fn configs(&self) -> Vec<(IdentityId, IdentityConfig)> {
        self.channel
            .identities()
            .map(|(id, state)| (id.clone(), state.config().clone()))
            .collect()
    }

    fn check(&mut self, effect: &Effect) {
        let id = match effect {
            Effect::Push {
                id, notification, ..
            } => {
                check_notification(notification);
                Some(*id)
            }
            Effect::PostPrompt { id, .. }
            | Effect::SendVerdict { id, .. }
            | Effect::Write { id, .. }
            | Effect::JoinRoom { id, .. }
            | Effect::CreateRoom { id, .. } => Some(*id),
            Effect::EditPrompt { .. }
            | Effect::Bound { .. }
            | Effect::Typing { .. }
            | Effect::Notice { .. }
            | Effect::Announce { .. }
            | Effect::Decided { .. }
            | Effect::WriteRefused { .. }
            | Effect::LogMessage { .. }
            | Effect::Acknowledged { .. }
            | Effect::Granted { .. }
            | Effect::GrantEnded { .. }
            | Effect::Dropped { .. } => None,
        };
        // A prompt post re-issued after a restart keeps its id (`Input::Restarted`).
        let reissued =
            matches!(effect, Effect::PostPrompt { id, .. } if self.post_requests.contains_key(id));
        if let Some(id) = id.filter(|_| !reissued) {
            if let Some(last) = self.last_effect_id {
                assert!(
                    id > last,
                    "effect ids must strictly increase: {id} after {last}"
                );
            }
            self.last_effect_id = Some(id);
        }
    }

    fn respond(&mut self, effect: &Effect) {
        let (id, kind) = match effect {
            Effect::Push { id, .. } => (*id, Kind::Push),
            Effect::PostPrompt { id, request_id, .. } => {
                self.post_requests.insert(*id, request_id.clone());
                (*id, Kind::Post)
            }
            Effect::SendVerdict { id, .. } => (*id, Kind::Verdict),
            Effect::Write { id, .. } => (*id, Kind::Write),
            Effect::JoinRoom { id, .. } => (*id, Kind::Join),
            Effect::CreateRoom { id, .. } => (*id, Kind::Create),
            _ => return,
        };
        let created = match effect {
            Effect::CreateRoom { label, .. } => Some(label_room(label.as_str())),
            _ => None,
        };
        let outcome = if let Some(at) = self.failing.iter().position(|k| *k == kind) {
            self.failing.remove(at);
            Outcome::Failed {
                reason: "the world made it fail".into(),
            }
        } else if let Some(room) = created {
            Outcome::Created { room }
        } else if kind == Kind::Post {
            let event_id = self.fresh("$p");
            let request_id = self.post_requests[&id].clone();
            self.posted.push((request_id, event_id.clone()));
            Outcome::Posted { event_id }
        } else {
            Outcome::Sent
        };
        if self.holding.contains(&kind) {
            self.held.push(Held { id, kind, outcome });
        } else {
            self.ready.push_back((id, outcome));
        }
    }
}

fn pushed(id: EffectId, event_id: Option<EventId>, n: &ChannelNotification) -> Pushed {
    Pushed {
        id,
        event_id,
        content: n.content.clone(),
        meta: n
            .meta
            .iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    }
}

/// `^[A-Za-z_][A-Za-z0-9_]*$`, written out so that it does not share code with the
/// crate's own check.
pub fn is_attribute_name(key: &str) -> bool {
    let bytes = key.as_bytes();
    match bytes.split_first() {
        Some((head, rest)) => {
            (head.is_ascii_alphabetic() || *head == b'_')
                && rest.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
        }
        None => false,
    }
}

/// What every push must satisfy (Claude Code channel contract): meta keys are
/// attribute names and never `source`, every value is a string, and the content
/// cannot close the wrapper.
pub fn check_notification(n: &ChannelNotification) {
    for (key, _) in n.meta.iter() {
        assert!(is_attribute_name(key), "meta key {key:?} is not a name");
        assert_ne!(
            key, "source",
            "meta key `source` collides with Claude Code's"
        );
        assert!(
            is_valid_meta_key(key),
            "the crate rejects its own key {key:?}"
        );
    }
    let wire = serde_json::to_value(n).expect("a notification serializes");
    let meta = wire["meta"].as_object().expect("meta is a JSON object");
    assert_eq!(meta.len(), n.meta.iter().count());
    for (key, value) in meta {
        assert!(
            is_attribute_name(key),
            "wire meta key {key:?} is not a name"
        );
        assert_ne!(key, "source");
        assert!(value.is_string(), "meta value of {key} is not a string");
        assert_eq!(
            n.meta.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            value.as_str()
        );
    }
    assert!(wire["content"].is_string());
    assert!(
        !n.content.to_lowercase().contains("</channel"),
        "content can close the wrapper: {:?}",
        n.content
    );
}

/// One effect as a short line, for exact assertions on a whole trace. The default
/// identity is implied; another is written as a prefix.
///
/// - `push s1 $m1 message "hi"` (`replayed` after the kind when so marked)
/// - `post !r1:hs abcde`
/// - `verdict s1 abcde allow`
/// - `edit $p3 "✅ Allowed by …"`
/// - `notice $m4 "…"`
/// - `decided s1 abcde allow by @alice:hs via text $m5`
/// - `drop $m6 NotApprover`
/// - `write call#1 edit` (the write's kind; its fields are in the effect)
/// - `refused call#2 PromptTarget`
/// - `log s1 "…"`
pub fn line(default: &IdentityId, effect: &Effect) -> String {
    let prefix = |identity: &IdentityId| {
        if identity == default {
            String::new()
        } else {
            format!("{identity}: ")
        }
    };
    match effect {
        Effect::Push {
            identity,
            session,
            event_id,
            notification,
            ..
        } => {
            let kind = notification
                .meta
                .get(mc_model::MetaKey::Kind)
                .unwrap_or("?");
            let replayed = match notification.meta.get(mc_model::MetaKey::Replayed) {
                Some(_) => " replayed",
                None => "",
            };
            format!(
                "{}push {session} {} {kind}{replayed} {:?}",
                prefix(identity),
                event_id.as_ref().map_or("-", |e| e.as_str()),
                notification.content
            )
        }
        Effect::PostPrompt {
            identity,
            room,
            request_id,
            ..
        } => format!("{}post {room} {request_id}", prefix(identity)),
        Effect::SendVerdict {
            identity,
            session,
            verdict,
            ..
        } => format!(
            "{}verdict {session} {} {}",
            prefix(identity),
            verdict.request_id,
            verdict.behavior
        ),
        Effect::EditPrompt {
            identity,
            event_id,
            text,
            ..
        } => format!("{}edit {event_id} {:?}", prefix(identity), text.plain),
        Effect::Notice {
            identity,
            in_reply_to,
            text,
            ..
        } => format!("{}notice {in_reply_to} {text:?}", prefix(identity)),
        Effect::Announce {
            identity,
            room,
            text,
        } => format!("{}announce {room} {:?}", prefix(identity), text.plain),
        Effect::Acknowledged {
            identity, event_id, ..
        } => format!("{}acked {event_id}", prefix(identity)),
        Effect::Decided {
            identity,
            session,
            request_id,
            decision,
            ..
        } => {
            let via = match &decision.via {
                VerdictSource::Text { event_id } => format!("text {event_id}"),
                VerdictSource::Reaction { event_id, key } => {
                    format!("reaction {event_id} {key}")
                }
                VerdictSource::Grant { grant } => format!("grant {grant}"),
                VerdictSource::Policy { rule } => format!("rule {rule}"),
            };
            format!(
                "{}decided {session} {request_id} {} by {} via {via}",
                prefix(identity),
                decision.behavior,
                decision.by
            )
        }
        Effect::Write {
            identity,
            call,
            write,
            ..
        } => format!("{}write {call} {}", prefix(identity), write.kind()),
        Effect::WriteRefused {
            identity,
            call,
            reason,
        } => format!("{}refused {call} {reason:?}", prefix(identity)),
        Effect::LogMessage {
            identity,
            session,
            message,
        } => format!("{}log {session} {message:?}", prefix(identity)),
        Effect::JoinRoom { identity, room, .. } => format!("{}join {room}", prefix(identity)),
        Effect::CreateRoom {
            identity,
            label,
            name,
            invite,
            ..
        } => format!(
            "{}create {label} {name:?} invite {}",
            prefix(identity),
            invite
                .iter()
                .map(|u| u.as_str())
                .collect::<Vec<_>>()
                .join(",")
        ),
        Effect::Typing {
            identity,
            room,
            typing,
        } => format!(
            "{}typing {room} {}",
            prefix(identity),
            if *typing { "on" } else { "off" }
        ),
        Effect::Bound {
            identity,
            label,
            room,
        } => format!(
            "{}bound {label} {}",
            prefix(identity),
            room.as_ref().map_or("-", |r| r.as_str())
        ),
        Effect::Granted { identity, grant } => format!(
            "{}granted {} {} {} {:?} {:?} until {}",
            prefix(identity),
            grant.id,
            grant.session,
            grant.tool,
            grant.scope,
            grant.lasts,
            grant.expires_at.0
        ),
        Effect::GrantEnded { identity, id, why } => {
            format!("{}grant-ended {id} {why:?}", prefix(identity))
        }
        Effect::Dropped {
            identity,
            event_id,
            reason,
        } => {
            let who = match identity {
                Some(identity) => prefix(identity),
                None => "?: ".to_owned(),
            };
            format!(
                "{who}drop {} {reason:?}",
                event_id.as_ref().map_or("-", |e| e.as_str())
            )
        }
    }
}

/// The plain text of the outcome edit for [`request`] `id`.
pub fn allowed_by_reply(id: &str) -> String {
    format!("✅ Allowed by {ALICE} by reply: permission request {id} (Bash)")
}

pub fn denied_by_reply(id: &str) -> String {
    format!("❌ Denied by {ALICE} by reply: permission request {id} (Bash)")
}

pub fn expired(id: &str) -> String {
    format!("⌛ Expired: no answer in time: permission request {id} (Bash)")
}

pub fn superseded(id: &str) -> String {
    format!("⌛ Replaced: the session asked again: permission request {id} (Bash)")
}

pub fn evicted(id: &str) -> String {
    format!("⌛ Dropped: too many open permission requests: permission request {id} (Bash)")
}

pub fn unknown_request_notice(id: &str) -> String {
    format!("No pending permission request {id}: it expired, was answered, or was never issued.")
}

pub fn already_answered_notice(id: &str) -> String {
    format!("Permission request {id} was already answered.")
}

pub fn ambiguous_notice(id: &str) -> String {
    format!("Several sessions are waiting on {id}: reply to the prompt you mean.")
}

/// A session id.
pub fn sid(s: &str) -> SessionId {
    SessionId::from(s)
}

pub fn room(r: &str) -> RoomId {
    RoomId::from(r)
}

pub fn user(u: &str) -> UserId {
    UserId::from(u)
}

pub fn identity(i: &str) -> IdentityId {
    IdentityId::from(i)
}

/// A time in the world's frame: `START + ms`.
pub fn at(ms: Millis) -> Timestamp {
    START.saturating_add(ms)
}

/// A `Failed` outcome, to release a held effect as failed.
pub fn failed() -> Outcome {
    Outcome::Failed {
        reason: "by hand".into(),
    }
}
