//! The in-memory network the engine's [`Wire`] writes to: the MCP sessions' streams
//! (notifications and log messages, a broken stream fails its writes) and a homeserver
//! ([`Net`]: every room's events as a homeserver serves them, the agent's next event
//! ids, joins, and prompt posts that can be held as a killed process leaves them).
//! What the server does is recorded as [`Observation`]s, in the wire form the server
//! builds with its own functions.

use super::clock;
use crate::world::{log_params, normalize_content, Ident, Observation, Sess, Who, LOG_METHOD};
use mc_model::{AgentWrite, EventId, IdentityId, PromptText, RoomId, SessionId};
use mc_server::engine::Wire;
use mc_server::matrix::RoomView;
use mc_server::server::{announce_content, edit_content, notice_content, prompt_content};
use mc_server::write::{text_content, with_relation, ToolError, Written};
use serde_json::{json, Value};
use std::collections::{BTreeSet, VecDeque};
use std::sync::Mutex;

/// The in-memory network: what the sessions received, what the identities sent, and
/// the rooms' events.
#[derive(Default)]
pub struct Net {
    /// Every event in every room, as the homeserver serves it.
    pub(super) events: Vec<Value>,
    /// What was observed since the last take.
    pub(super) observed: Vec<Observation>,
    /// Sessions whose stream is broken: writes to them fail.
    pub(super) broken: BTreeSet<SessionId>,
    /// Wire calls so far (they number the ids of prompt edits and notices).
    pub(super) calls: u64,
    /// The ids the homeserver gives the agent's next events (the world's names).
    pub(super) next_ids: VecDeque<EventId>,
    /// While `Some`, a prompt post never returns (the process dies first); the flag
    /// says whether the homeserver gets the event before that.
    pub(super) hold_posts: Option<bool>,
    /// The rooms the identities joined, not delivered yet.
    pub(super) joined: Vec<(Ident, RoomId)>,
}

impl Net {
    /// The redaction of `event_id`, if one was sent.
    fn redaction_of(&self, event_id: &Value) -> Option<&Value> {
        self.events
            .iter()
            .find(|e| e["type"] == "m.room.redaction" && e["content"]["redacts"] == *event_id)
    }
}

/// The engine's [`Wire`] over [`Net`].
pub struct MemWire {
    pub(super) net: Mutex<Net>,
}

fn ident_of(identity: &IdentityId) -> Ident {
    Ident::ALL
        .into_iter()
        .find(|i| i.id() == *identity)
        .expect("a cast identity")
}

fn sess_of(session: &SessionId) -> Option<Sess> {
    Sess::ALL.into_iter().find(|s| s.id() == *session)
}

impl MemWire {
    fn send(
        &self,
        identity: &IdentityId,
        room: &RoomId,
        event_id: String,
        content: Value,
        prompt: bool,
    ) {
        self.send_event(identity, room, event_id, "m.room.message", content, prompt);
    }

    /// Stores an event the identity sent and observes it; `with_id` for prompts and
    /// the agent's writes.
    fn send_event(
        &self,
        identity: &IdentityId,
        room: &RoomId,
        event_id: String,
        event_type: &str,
        content: Value,
        with_id: bool,
    ) {
        let ident = ident_of(identity);
        let mut net = self.net.lock().unwrap();
        net.calls += 1;
        net.observed.push(Observation::Sent {
            ident,
            room: room.clone(),
            event_id: with_id.then(|| EventId(event_id.clone())),
            event_type: event_type.to_owned(),
            content: normalize_content(&content),
        });
        net.events.push(json!({
            "type": event_type,
            "event_id": event_id,
            "sender": Who::Bot.user_id(ident).0,
            "origin_server_ts": clock(),
            "room_id": room.0,
            "content": content,
            "unsigned": {},
        }));
    }
}

#[async_trait::async_trait]
impl Wire for MemWire {
    async fn notify(&self, session: &SessionId, method: &str, params: Value) -> Result<(), String> {
        let mut net = self.net.lock().unwrap();
        net.calls += 1;
        if net.broken.contains(session) {
            return Err("the stream broke".to_owned());
        }
        let session = sess_of(session).ok_or_else(|| format!("no session {session}"))?;
        net.observed.push(Observation::Notification {
            session,
            method: method.to_owned(),
            params,
        });
        Ok(())
    }

    async fn typing(&self, _: &IdentityId, _: &RoomId, _: bool) -> Result<(), String> {
        // Typing shows in no room of the world: the world attaches no labelled
        // session, so the model shows none.
        Ok(())
    }

    async fn post_prompt(
        &self,
        identity: &IdentityId,
        room: &RoomId,
        text: &PromptText,
        txn_id: &str,
    ) -> Result<EventId, String> {
        // The homeserver answers a transaction id with the same event id each time,
        // and stores the event once.
        let event_id = format!("${txn_id}");
        let hold = {
            let mut net = self.net.lock().unwrap();
            if net
                .events
                .iter()
                .any(|e| e["event_id"] == event_id.as_str())
            {
                net.calls += 1;
                return Ok(EventId(event_id));
            }
            net.hold_posts
        };
        let content = serde_json::to_value(prompt_content(text)).map_err(|e| e.to_string())?;
        match hold {
            None => {}
            Some(reached) => {
                if reached {
                    self.send(identity, room, event_id.clone(), content, true);
                } else {
                    self.net.lock().unwrap().calls += 1;
                }
                // The process is killed before this post reports back.
                return std::future::pending().await;
            }
        }
        self.send(identity, room, event_id.clone(), content, true);
        Ok(EventId(event_id))
    }

    async fn edit_prompt(
        &self,
        identity: &IdentityId,
        room: &RoomId,
        event_id: &EventId,
        text: &PromptText,
    ) -> Result<(), String> {
        let target = event_id.0.as_str().try_into().map_err(|e| format!("{e}"))?;
        let content =
            serde_json::to_value(edit_content(&target, text)).map_err(|e| e.to_string())?;
        let id = format!("$edit{}", self.net.lock().unwrap().calls);
        self.send(identity, room, id, content, false);
        Ok(())
    }

    async fn announce(
        &self,
        identity: &IdentityId,
        room: &RoomId,
        text: &mc_model::PromptText,
    ) -> Result<(), String> {
        let content = serde_json::to_value(announce_content(text)).map_err(|e| e.to_string())?;
        let id = format!("$notice{}", self.net.lock().unwrap().calls);
        self.send(identity, room, id, content, false);
        Ok(())
    }

    async fn notice(
        &self,
        identity: &IdentityId,
        room: &RoomId,
        in_reply_to: &EventId,
        text: &str,
    ) -> Result<(), String> {
        let target = in_reply_to
            .0
            .as_str()
            .try_into()
            .map_err(|e| format!("{e}"))?;
        let content =
            serde_json::to_value(notice_content(&target, text)).map_err(|e| e.to_string())?;
        let id = format!("$notice{}", self.net.lock().unwrap().calls);
        self.send(identity, room, id, content, false);
        Ok(())
    }

    /// As `mc_server::write::perform` sends the write: message parts through impl's
    /// own builders (`text_content`, `with_relation`, the reply's sender mentioned);
    /// an edit as ruma's `make_replacement` builds it; a reaction; a redaction with
    /// `redacts` in the content.
    async fn write(&self, identity: &IdentityId, write: &AgentWrite) -> Result<Written, ToolError> {
        let ident = ident_of(identity);
        let bot = Who::Bot.user_id(ident).0;
        let invalid = |e: String| ToolError::Invalid(e);
        let mut sends: Vec<(RoomId, &'static str, Value)> = Vec::new();
        match write {
            AgentWrite::Message {
                room,
                parts,
                reply_to,
                thread_root,
                ..
            } => {
                let reply = match reply_to {
                    Some(e) => Some(
                        e.0.as_str()
                            .try_into()
                            .map_err(|e| invalid(format!("{e}")))?,
                    ),
                    None => None,
                };
                let root = match thread_root {
                    Some(e) => Some(
                        e.0.as_str()
                            .try_into()
                            .map_err(|e| invalid(format!("{e}")))?,
                    ),
                    None => None,
                };
                let sender = reply_to.as_ref().and_then(|r| {
                    let net = self.net.lock().unwrap();
                    net.events
                        .iter()
                        .find(|e| e["event_id"] == r.0.as_str())
                        .and_then(|e| e["sender"].as_str().map(str::to_owned))
                });
                let mention = match sender.filter(|s| *s != bot) {
                    Some(s) => Some(s.as_str().try_into().map_err(|e| invalid(format!("{e}")))?),
                    None => None,
                };
                for (i, part) in parts.iter().enumerate() {
                    let content = with_relation(
                        text_content(part),
                        reply.as_ref(),
                        root.as_ref(),
                        i == 0,
                        mention.clone(),
                    );
                    let content =
                        serde_json::to_value(content).map_err(|e| invalid(e.to_string()))?;
                    sends.push((room.clone(), "m.room.message", content));
                }
            }
            AgentWrite::Edit {
                room,
                original,
                text,
                ..
            } => {
                let new_content =
                    serde_json::to_value(text_content(text)).map_err(|e| invalid(e.to_string()))?;
                let mut content = new_content.clone();
                content["body"] = json!(format!("* {}", text.body));
                content["format"] = json!("org.matrix.custom.html");
                content["formatted_body"] = json!(format!(
                    "* {}",
                    text.formatted_body.as_deref().unwrap_or_default()
                ));
                content["m.new_content"] = new_content;
                content["m.relates_to"] = json!({"rel_type": "m.replace", "event_id": original.0});
                sends.push((room.clone(), "m.room.message", content));
            }
            AgentWrite::Reaction {
                room,
                relates_to,
                key,
            } => sends.push((
                room.clone(),
                "m.reaction",
                json!({"m.relates_to": {
                    "rel_type": "m.annotation", "event_id": relates_to.0, "key": key,
                }}),
            )),
            AgentWrite::Redaction {
                room,
                redacts,
                reason,
            } => {
                let mut content = json!({"redacts": redacts.0});
                if let Some(reason) = reason {
                    content["reason"] = json!(reason);
                }
                sends.push((room.clone(), "m.room.redaction", content));
            }
            other => {
                return Err(ToolError::Invalid(format!(
                    "the in-memory homeserver takes no {} write",
                    other.kind()
                )));
            }
        }
        let mut event_ids = Vec::new();
        for (room, event_type, content) in sends {
            let id = {
                let mut net = self.net.lock().unwrap();
                net.next_ids
                    .pop_front()
                    .map_or_else(|| format!("$unexpected{}", net.calls), |id| id.0)
            };
            self.send_event(identity, &room, id.clone(), event_type, content, true);
            event_ids.push(id);
        }
        Ok(Written {
            event_ids,
            ..Written::default()
        })
    }

    /// Joins: observed, and the join event is delivered by the next sync.
    async fn join_room(&self, identity: &IdentityId, room: &RoomId) -> Result<(), String> {
        let ident = ident_of(identity);
        let mut net = self.net.lock().unwrap();
        net.calls += 1;
        net.observed.push(Observation::Joined {
            ident,
            room: room.clone(),
        });
        net.joined.push((ident, room.clone()));
        Ok(())
    }

    async fn log_message(&self, session: &SessionId, message: &str) -> Result<(), String> {
        let mut net = self.net.lock().unwrap();
        net.calls += 1;
        if net.broken.contains(session) {
            return Err("the stream broke".to_owned());
        }
        let session = sess_of(session).ok_or_else(|| format!("no session {session}"))?;
        net.observed.push(Observation::Notification {
            session,
            method: LOG_METHOD.to_owned(),
            params: log_params(message),
        });
        Ok(())
    }
}

/// A room of the in-memory homeserver, for [`timeline_input`].
pub(super) struct MemRoom<'a> {
    pub(super) id: RoomId,
    pub(super) wire: &'a MemWire,
}

#[async_trait::async_trait]
impl RoomView for MemRoom<'_> {
    fn id(&self) -> RoomId {
        self.id.clone()
    }

    /// As Synapse serves `GET /rooms/{room}/event/{id}`: redacted events without
    /// content, and the latest `m.replace` by the same sender bundled in
    /// `unsigned.m.relations`.
    async fn event_json(&self, event_id: &str) -> Option<String> {
        let net = self.wire.net.lock().unwrap();
        let mut event = net
            .events
            .iter()
            .find(|e| e["event_id"] == event_id && e["room_id"] == self.id.0.as_str())?
            .clone();
        if let Some(because) = net.redaction_of(&json!(event_id)) {
            // As a homeserver serves a redacted event: no content, the redaction in
            // `unsigned.redacted_because`.
            event["content"] = json!({});
            event["unsigned"] = json!({"redacted_because": because});
            return Some(event.to_string());
        }
        let edit = net.events.iter().rev().find(|e| {
            e["content"]["m.relates_to"]["rel_type"] == "m.replace"
                && e["content"]["m.relates_to"]["event_id"] == event_id
                && e["sender"] == event["sender"]
                && net.redaction_of(&e["event_id"]).is_none()
        });
        if let Some(edit) = edit {
            event["unsigned"] = json!({"m.relations": {"m.replace": edit}});
        }
        Some(event.to_string())
    }

    async fn display_name(&self, user_id: &str) -> Option<String> {
        [Who::Ann, Who::Carl, Who::Eve, Who::Bot]
            .into_iter()
            .find(|w| Ident::ALL.iter().any(|i| w.user_id(*i).0 == user_id))
            .and_then(Who::display_name)
            .map(str::to_owned)
    }
}
