//! A [`Wire`] that records every call, and the inputs the engine's tests hand it:
//! one identity `bot` joined to `!r:hs`, whose allowed sender is [`ALICE`].

use super::{EngineHandle, Wire};
use crate::write::{ToolError, Written};
use async_trait::async_trait;
use mc_model::{
    AgentWrite, Channel, EventId, IdentityConfig, IdentityId, Input, Message, MessageContent,
    MsgType, PermissionRequest, PromptText, RequestId, RoomId, SessionId, Timestamp, UserId,
};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

pub(super) const ALICE: &str = "@alice:hs";

/// Records every wire call; fails notifications to sessions in `failing`, and
/// agent writes while `write_fails` is set.
#[derive(Default)]
pub(super) struct FakeWire {
    pub(super) calls: Mutex<Vec<String>>,
    pub(super) notified: Mutex<Vec<(String, String, Value)>>,
    pub(super) failing: Mutex<Vec<String>>,
    /// Notifications to these sessions never complete (a client that stopped
    /// reading), after recording `hung <session>` in `calls`.
    pub(super) hanging: Mutex<Vec<String>>,
    /// The next notification to each of these sessions fails, once.
    pub(super) fail_once: Mutex<Vec<String>>,
    pub(super) write_fails: Mutex<bool>,
    /// Room creations fail while set.
    pub(super) create_fails: Mutex<bool>,
    /// The next notification to this session waits for a permit of the semaphore.
    pub(super) gate: Mutex<Option<(String, Arc<tokio::sync::Semaphore>)>>,
}

#[async_trait]
impl Wire for FakeWire {
    async fn notify(&self, session: &SessionId, method: &str, params: Value) -> Result<(), String> {
        if self.hanging.lock().unwrap().contains(&session.0) {
            self.calls.lock().unwrap().push(format!("hung {session}"));
            std::future::pending::<()>().await;
        }
        let gate = {
            let mut gate = self.gate.lock().unwrap();
            match &*gate {
                Some((gated, _)) if *gated == session.0 => gate.take(),
                _ => None,
            }
        };
        if let Some((_, gate)) = gate {
            gate.acquire().await.unwrap().forget();
        }
        let mut once = self.fail_once.lock().unwrap();
        if let Some(i) = once.iter().position(|s| *s == session.0) {
            once.remove(i);
            return Err("stream closed".into());
        }
        drop(once);
        if self.failing.lock().unwrap().contains(&session.0) {
            return Err("stream closed".into());
        }
        self.notified
            .lock()
            .unwrap()
            .push((session.0.clone(), method.to_string(), params));
        Ok(())
    }
    async fn post_prompt(
        &self,
        identity: &IdentityId,
        room: &RoomId,
        text: &PromptText,
        txn_id: &str,
    ) -> Result<EventId, String> {
        assert!(text.plain.contains("abcde"), "{}", text.plain);
        self.calls
            .lock()
            .unwrap()
            .push(format!("post {identity} {room} {txn_id}"));
        Ok(EventId("$prompt".into()))
    }
    async fn edit_prompt(
        &self,
        identity: &IdentityId,
        room: &RoomId,
        event_id: &EventId,
        _text: &PromptText,
    ) -> Result<(), String> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("edit {identity} {room} {event_id}"));
        Ok(())
    }
    async fn announce(
        &self,
        identity: &IdentityId,
        room: &RoomId,
        _text: &mc_model::PromptText,
    ) -> Result<(), String> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("announce {identity} {room}"));
        Ok(())
    }
    async fn notice(
        &self,
        identity: &IdentityId,
        room: &RoomId,
        in_reply_to: &EventId,
        _text: &str,
    ) -> Result<(), String> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("notice {identity} {room} {in_reply_to}"));
        Ok(())
    }
    async fn write(&self, identity: &IdentityId, write: &AgentWrite) -> Result<Written, ToolError> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("write {identity} {}", write.kind()));
        if *self.write_fails.lock().unwrap() {
            return Err(ToolError::Upstream("the homeserver is down".into()));
        }
        Ok(Written {
            event_ids: vec!["$written".into()],
            ..Written::default()
        })
    }
    async fn log_message(&self, session: &SessionId, message: &str) -> Result<(), String> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("log {session} {message}"));
        Ok(())
    }
    async fn typing(
        &self,
        identity: &IdentityId,
        room: &RoomId,
        typing: bool,
    ) -> Result<(), String> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("typing {identity} {room} {typing}"));
        Ok(())
    }
    /// Records `create <identity> <name> <invitees>` and answers `!created-<n>:hs`,
    /// `n` counting the creations so far.
    async fn create_room(
        &self,
        identity: &IdentityId,
        name: &str,
        invite: &[UserId],
    ) -> Result<RoomId, String> {
        let invite: Vec<&str> = invite.iter().map(|u| u.0.as_str()).collect();
        let mut calls = self.calls.lock().unwrap();
        calls.push(format!("create {identity} {name} {}", invite.join(",")));
        if *self.create_fails.lock().unwrap() {
            return Err("the homeserver is down".into());
        }
        let n = calls.iter().filter(|c| c.starts_with("create ")).count();
        Ok(RoomId(format!("!created-{n}:hs")))
    }
    async fn join_room(&self, identity: &IdentityId, room: &RoomId) -> Result<(), String> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("join {identity} {room}"));
        Ok(())
    }
}

pub(super) fn clock() -> Timestamp {
    Timestamp(1_700_000_000_000)
}

pub(super) fn channel() -> Channel {
    let mut channel = Channel::new();
    let mut config = IdentityConfig::new(UserId("@bot:hs".into()), [UserId(ALICE.into())]);
    // The clock stands still here: a session is pushed to the instant it attaches.
    config.attach_grace_ms = 0;
    channel
        .add_identity(IdentityId("bot".into()), config)
        .unwrap();
    channel.handle(clock(), joined("!r:hs"));
    channel
}

/// The identity is joined to `room` (as `matrix::start` reports it).
pub(super) fn joined(room: &str) -> Input {
    Input::Membership {
        identity: id(),
        room: RoomId(room.into()),
        event_id: None,
        user: UserId("@bot:hs".into()),
        membership: mc_model::Membership::Joined,
    }
}

pub(super) fn id() -> IdentityId {
    IdentityId("bot".into())
}

pub(super) fn attach(session: &str) -> Input {
    Input::Attach {
        identity: id(),
        session: SessionId(session.into()),
        label: None,
    }
}

/// `session` attaches with the room label `label`.
pub(super) fn attach_labelled(session: &str, label: &str) -> Input {
    Input::Attach {
        identity: id(),
        session: SessionId(session.into()),
        label: Some(mc_model::Label::parse(label).unwrap()),
    }
}

/// [`say`] in `room`.
pub(super) fn say_in(room: &str, event: &str, body: &str) -> Input {
    let mut input = say(event, body);
    if let Input::Message { message, .. } = &mut input {
        message.room = RoomId(room.into());
    }
    input
}

/// A `permission_request` for Bash from `session`.
pub(super) fn ask(session: &str, request_id: &str) -> Input {
    Input::PermissionRequest {
        identity: id(),
        session: SessionId(session.into()),
        request: PermissionRequest {
            request_id: RequestId::parse(request_id).unwrap(),
            tool_name: "Bash".into(),
            description: "ls".into(),
            input_preview: "{}".into(),
        },
    }
}

pub(super) fn say(event: &str, body: &str) -> Input {
    Input::Message {
        identity: id(),
        message: Message {
            room: RoomId("!r:hs".into()),
            event_id: EventId(event.into()),
            sender: UserId(ALICE.into()),
            sender_name: Some("Alice".into()),
            origin_server_ts: Timestamp(5),
            content: Some(MessageContent {
                msgtype: MsgType::Text,
                body: body.into(),
                formatted_body: None,
                relation: None,
                attachment: None,
            }),
            device: mc_model::DeviceTrust::PlaintextRoom,
        },
    }
}

/// Waits until the engine has handled everything submitted so far and every task it
/// spawned (session queues, room lanes) waits again, the outcomes they report
/// handled too ([`idle`](crate::testing::idle): the paused clock moves 1 ms).
/// Panics if the engine has stopped.
pub(super) async fn settle(engine: &EngineHandle) {
    engine.read(|_| ()).await.unwrap();
    crate::testing::idle().await;
}

/// The (session, event id) of every push the wire wrote, in order.
pub(super) fn pushed(wire: &FakeWire) -> Vec<(String, Value)> {
    wire.notified
        .lock()
        .unwrap()
        .iter()
        .map(|(session, _, params)| (session.clone(), params["meta"]["event_id"].clone()))
        .collect()
}

/// `input` retargeted at the identity `bot2` and its room `!r2:hs`.
pub(super) fn for_bot2(input: Input) -> Input {
    let mut value = serde_json::to_value(input).unwrap();
    value["identity"] = json!("bot2");
    if value.get("message").is_some() {
        value["message"]["room"] = json!("!r2:hs");
    }
    if value.get("room").is_some() {
        value["room"] = json!("!r2:hs");
        value["user"] = json!("@bot2:hs");
    }
    serde_json::from_value(value).unwrap()
}

pub(super) fn react(event_id: &str) -> AgentWrite {
    AgentWrite::Reaction {
        room: RoomId("!r:hs".into()),
        relates_to: EventId(event_id.into()),
        key: "👍".into(),
    }
}
