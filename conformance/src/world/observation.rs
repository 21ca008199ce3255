//! What a client can see the server do ([`Observation`]: notifications per MCP
//! session, events the identity sends, tool answers, joins), and how the reference
//! predicts it: `World::run` takes an input and everything it causes through the
//! model, as the engine does, with the ideal wire's outcomes (see the `world` module
//! docs), recording each visible effect.

use super::{Ev, EvKind, Ident, Sess, Who, World, CHANNEL_METHOD, VERDICT_METHOD};
use mc_model::{Effect, EventId, IdentityId, Input, Outcome, RoomId, SessionId};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::VecDeque;

/// Something the server did that a client can see.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Observation {
    /// A notification on a session's stream.
    Notification {
        session: Sess,
        method: String,
        params: Value,
    },
    /// The `acknowledge` tool's answer: whether the event is now acknowledged (a
    /// pushed event the agent acknowledged). Real target only: in process the
    /// acknowledgement is submitted without the tool.
    Acknowledged {
        ident: Ident,
        event_id: EventId,
        acknowledged: bool,
    },
    /// An event the identity sent to a room ([`normalize_content`]); `event_id` for
    /// prompts and the agent's writes only.
    Sent {
        ident: Ident,
        room: RoomId,
        event_id: Option<EventId>,
        event_type: String,
        content: Value,
    },
    /// A write tool's answer to the agent.
    Wrote { ident: Ident, answer: ToolAnswer },
    /// The identity joined a room (on an invite).
    Joined { ident: Ident, room: RoomId },
    /// What the operator's `matrix-channel bind` answered.
    Bind { ident: Ident, answer: BindAnswer },
    /// The grants the operator's `matrix-channel revoke` ended (none: it refused).
    Revoked { ident: Ident, revoked: Vec<u64> },
}

/// What `matrix-channel bind` answers: every binding of the identity the command
/// changed, in the model's order (a label and its room, `None` when unbound; a room
/// bound to another label first unbinds that one), or that the identity is not
/// joined to the room.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BindAnswer {
    Bound(Vec<(String, Option<RoomId>)>),
    NotJoined,
}

impl BindAnswer {
    /// The coverage case: how many labels changed, or the refusal.
    pub fn case(&self) -> &'static str {
        match self {
            BindAnswer::Bound(changes) if changes.len() > 1 => "the room moved from another label",
            BindAnswer::Bound(changes) if changes.iter().any(|(_, r)| r.is_none()) => "unbound",
            BindAnswer::Bound(_) => "bound",
            BindAnswer::NotJoined => "not joined",
        }
    }
}

/// What a write tool answers: the events it sent, or an error's `kind`
/// (`structuredContent.error.kind`; `forbidden` when the model refused the write).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToolAnswer {
    Sent { event_ids: Vec<EventId> },
    Error { kind: String },
}

/// The MCP logging method (`notifications/message`) and its params for `message`, as
/// the server sends a model `LogMessage`.
pub const LOG_METHOD: &str = "notifications/message";

pub fn log_params(message: &str) -> Value {
    json!({"level": "warning", "logger": "matrix-channel", "data": message})
}

/// An event's content as compared: the whole of it (every key the server sends must
/// be predicted, `m.mentions` included). One function, so that both sides go through
/// the same place if a key ever has to be ignored.
pub fn normalize_content(content: &Value) -> Value {
    content.clone()
}

impl World {
    /// Runs `input` and everything it causes through the model, as the engine does.
    pub(super) fn run(&mut self, input: Input) {
        let mut pending = VecDeque::from([input]);
        loop {
            let mut posts = Vec::new();
            while let Some(input) = pending.pop_front() {
                let effects = self.channel.handle(self.now, input.clone());
                self.inputs.push(input);
                for effect in effects {
                    if let Some(outcome) = self.observe(effect, &mut posts) {
                        pending.push_back(outcome);
                    }
                }
            }
            if posts.is_empty() {
                break;
            }
            pending.extend(posts);
        }
    }

    /// Records what `effect` makes visible and returns its inline outcome; prompt
    /// posts' outcomes go to `posts` (the engine handles them after the step).
    fn observe(&mut self, effect: Effect, posts: &mut Vec<Input>) -> Option<Input> {
        let session_of = |id: &SessionId| Sess::ALL.into_iter().find(|s| s.id() == *id);
        match effect {
            Effect::Push {
                id,
                session,
                notification,
                ..
            } => {
                let s = session_of(&session).expect("the model pushes to the cast's sessions");
                let ok = !self.broken.contains(&s);
                if ok {
                    let meta: serde_json::Map<String, Value> = notification
                        .meta
                        .iter()
                        .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
                        .collect();
                    self.expected.push(Observation::Notification {
                        session: s,
                        method: CHANNEL_METHOD.to_owned(),
                        params: json!({"content": notification.content, "meta": meta}),
                    });
                }
                Some(outcome(id, ok))
            }
            Effect::SendVerdict {
                id,
                session,
                verdict,
                ..
            } => {
                let s =
                    session_of(&session).expect("the model sends verdicts to the cast's sessions");
                let ok = !self.broken.contains(&s);
                if ok {
                    self.expected.push(Observation::Notification {
                        session: s,
                        method: VERDICT_METHOD.to_owned(),
                        params: json!({
                            "request_id": verdict.request_id.as_str(),
                            "behavior": verdict.behavior.as_str(),
                        }),
                    });
                }
                Some(outcome(id, ok))
            }
            Effect::PostPrompt {
                id,
                identity,
                room,
                text,
                ..
            } => {
                let ident = ident_of(&identity);
                let event_id = EventId(format!("$mc-prompt-{}", id.0));
                if self.events.iter().any(|e| e.id == event_id) {
                    // Issued again after a restart: the homeserver knows the
                    // transaction and answers with the event it has.
                    posts.push(Input::Completed {
                        id,
                        outcome: Outcome::Posted { event_id },
                    });
                    return None;
                }
                if self.hold_posts == Some(false) {
                    // The process dies before the homeserver gets the post.
                    return None;
                }
                let content = json!({
                    "msgtype": "m.text",
                    "body": text.plain,
                    "format": "org.matrix.custom.html",
                    "formatted_body": text.html,
                });
                self.expected.push(Observation::Sent {
                    ident,
                    room: room.clone(),
                    event_id: Some(event_id.clone()),
                    event_type: "m.room.message".to_owned(),
                    content: normalize_content(&content),
                });
                self.events.push(Ev {
                    ident,
                    room,
                    id: event_id.clone(),
                    sender: Who::Bot,
                    ts: self.now,
                    event_type: "m.room.message",
                    content,
                    kind: EvKind::Prompt,
                    redacted: false,
                    edited_body: None,
                    input: None,
                });
                if self.hold_posts.is_none() {
                    posts.push(Input::Completed {
                        id,
                        outcome: Outcome::Posted { event_id },
                    });
                }
                None
            }
            Effect::EditPrompt {
                identity,
                room,
                event_id,
                text,
            } => {
                if let Some(p) = self.events.iter_mut().find(|e| e.id == event_id) {
                    p.edited_body = Some(text.plain.clone());
                }
                self.expected.push(Observation::Sent {
                    ident: ident_of(&identity),
                    room,
                    event_id: None,
                    event_type: "m.room.message".to_owned(),
                    // An `m.replace` with the `* ` fallback for clients without edits
                    // (Client-Server API, "Event replacements").
                    content: json!({
                        "msgtype": "m.text",
                        "body": format!("* {}", text.plain),
                        "format": "org.matrix.custom.html",
                        "formatted_body": format!("* {}", text.html),
                        "m.new_content": {
                            "msgtype": "m.text",
                            "body": text.plain,
                            "format": "org.matrix.custom.html",
                            "formatted_body": text.html,
                        },
                        "m.relates_to": {"rel_type": "m.replace", "event_id": event_id.0},
                    }),
                });
                None
            }
            Effect::Announce {
                identity,
                room,
                text,
            } => {
                self.expected.push(Observation::Sent {
                    ident: ident_of(&identity),
                    room,
                    event_id: None,
                    event_type: "m.room.message".to_owned(),
                    content: json!({
                        "msgtype": "m.notice",
                        "body": text.plain,
                        "format": "org.matrix.custom.html",
                        "formatted_body": text.html,
                    }),
                });
                None
            }
            Effect::Notice {
                identity,
                room,
                in_reply_to,
                text,
            } => {
                self.expected.push(Observation::Sent {
                    ident: ident_of(&identity),
                    room,
                    event_id: None,
                    event_type: "m.room.message".to_owned(),
                    content: json!({
                        "msgtype": "m.notice",
                        "body": text,
                        "m.relates_to": {"m.in_reply_to": {"event_id": in_reply_to.0}},
                    }),
                });
                None
            }
            Effect::Write {
                id,
                identity,
                write,
                ..
            } => {
                let ident = ident_of(&identity);
                let answer = self.perform(ident, write);
                self.expected.push(Observation::Wrote { ident, answer });
                // The engine hands the outcome back when the write task ends.
                posts.push(Input::Completed {
                    id,
                    outcome: Outcome::Sent,
                });
                None
            }
            Effect::WriteRefused { identity, .. } => {
                self.expected.push(Observation::Wrote {
                    ident: ident_of(&identity),
                    answer: ToolAnswer::Error {
                        kind: "forbidden".to_owned(),
                    },
                });
                None
            }
            // A labelled session attaches only with a label the identity has bound
            // (`World::attach_routed`), so the model asks for no room; were it to, the
            // in-process wire creates none (`Wire::create_room`'s default).
            Effect::CreateRoom { id, .. } => Some(Input::Completed {
                id,
                outcome: mc_model::Outcome::Failed {
                    reason: "this wire creates no rooms".to_owned(),
                },
            }),
            Effect::Bound { label, room, .. } => {
                self.bound.push((label.as_str().to_owned(), room));
                None
            }
            // Typing is ephemeral (no timeline event a client keeps); the e2e
            // scenarios see it in a person's sync.
            Effect::Typing { .. } => None,
            Effect::JoinRoom { id, identity, room } => {
                let ident = ident_of(&identity);
                self.expected.push(Observation::Joined {
                    ident,
                    room: room.clone(),
                });
                posts.push(outcome(id, true));
                let join = self.member_event(ident, room, Who::Bot, mc_model::Membership::Joined);
                self.joins.push(self.events.len() - 1);
                posts.push(join);
                None
            }
            Effect::LogMessage {
                session, message, ..
            } => {
                let s = session_of(&session).expect("the model logs to the cast's sessions");
                if !self.broken.contains(&s) {
                    self.expected.push(Observation::Notification {
                        session: s,
                        method: LOG_METHOD.to_owned(),
                        params: log_params(&message),
                    });
                }
                None
            }
            Effect::Dropped {
                event_id, reason, ..
            } => {
                self.drops.push((event_id, reason));
                None
            }
            Effect::Decided { .. } | Effect::Acknowledged { .. } | Effect::Granted { .. } => None,
            Effect::GrantEnded { id, why, .. } => {
                if why == mc_model::GrantEnd::Operator {
                    self.revoked.push(id);
                }
                None
            }
        }
    }
}

fn outcome(id: mc_model::EffectId, ok: bool) -> Input {
    Input::Completed {
        id,
        outcome: if ok {
            Outcome::Sent
        } else {
            Outcome::Failed {
                reason: "the stream broke".to_owned(),
            }
        },
    }
}

fn ident_of(identity: &IdentityId) -> Ident {
    Ident::ALL
        .into_iter()
        .find(|i| i.id() == *identity)
        .expect("the model acts for the cast's identities")
}
