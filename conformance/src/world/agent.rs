//! The agent's writes: the [`AgentWrite`] a tool builds for an [`AgentOp`] (targets
//! resolved from the world before the action), the events a performed write sends
//! as the identity puts them on the wire, and the generator's writes.

use super::reference::pick;
use super::{
    normalize_content, AgentOp, AgentRel, EvKind, Ident, Key, Mode, Observation, Rid, Say, Sel,
    ToolAnswer, Who, World, AGENT_CHAT,
};
use crate::alphabet::Action;
use mc_model::{AgentText, AgentWrite, CallId, EventId, Input, RoomId};
use proptest::prelude::*;
use serde_json::{json, Value};

impl World {
    /// The agent asks a tool for a write: the model judges the write the tool builds.
    pub(super) fn agent_write_action(&mut self, ident: Ident, op: AgentOp) {
        let (ident, write) = self
            .agent_write(ident, op)
            .expect("checked by the precondition");
        let call = CallId(self.next_call);
        self.next_call += 1;
        self.last_write = Some((ident, write.clone()));
        self.run(Input::AgentWrite {
            identity: ident.id(),
            call,
            write,
        });
    }

    /// The event an agent's write targets, and the write the tool builds for it
    /// (`None` when the selector picks nothing).
    pub fn agent_target(&self, op: AgentOp) -> Option<usize> {
        match op {
            AgentOp::Send { rel, .. } => match rel {
                AgentRel::None => None,
                AgentRel::Reply { to } => self.sel(to),
                AgentRel::Thread { root, .. } => self.sel(root),
            },
            AgentOp::Edit { of, .. } => self.sel(of),
            AgentOp::React { to, .. } => self.sel(to),
            AgentOp::Redact { target, .. } => self.sel(target),
        }
    }

    /// The identity that writes and the [`AgentWrite`] the tool hands the model, as
    /// the tools build it (`impl/src/mcp/write_tools.rs`): a reply to a thread message
    /// stays in its thread; an edit names the original's sender. `None` when a
    /// selector picks nothing.
    pub fn agent_write(&self, ident: Ident, op: AgentOp) -> Option<(Ident, AgentWrite)> {
        let target = self.agent_target(op);
        let t = target.map(|t| &self.events[t]);
        if t.is_none()
            && !matches!(
                op,
                AgentOp::Send {
                    rel: AgentRel::None,
                    ..
                }
            )
        {
            return None;
        }
        let ident = t.map_or(ident, |t| t.ident);
        let write = match op {
            AgentOp::Send { room, say, rel } => {
                let room = t.map_or_else(|| ident.room(room), |t| t.room.clone());
                let (reply_to, thread_root) = match rel {
                    AgentRel::None => (None, None),
                    AgentRel::Reply { .. } => {
                        let t = t?;
                        let thread = &t.content["m.relates_to"];
                        let root = (thread["rel_type"] == "m.thread")
                            .then(|| thread["event_id"].as_str().map(|r| EventId(r.to_owned())))
                            .flatten();
                        (Some(t.id.clone()), root)
                    }
                    AgentRel::Thread { reply, .. } => {
                        let t = t?;
                        (reply.then(|| t.id.clone()), Some(t.id.clone()))
                    }
                };
                AgentWrite::Message {
                    room,
                    parts: vec![say.text()],
                    reply_to,
                    thread_root,
                    txn_id: format!("mc-call-{}", self.next_call),
                }
            }
            AgentOp::Edit { say, .. } => {
                let t = t?;
                AgentWrite::Edit {
                    room: t.room.clone(),
                    original: t.id.clone(),
                    original_sender: t.sender.user_id(t.ident),
                    text: say.text(),
                }
            }
            AgentOp::React { key, .. } => {
                let t = t?;
                AgentWrite::Reaction {
                    room: t.room.clone(),
                    relates_to: t.id.clone(),
                    key: key.as_str().to_owned(),
                }
            }
            AgentOp::Redact { reason, .. } => {
                let t = t?;
                AgentWrite::Redaction {
                    room: t.room.clone(),
                    redacts: t.id.clone(),
                    reason: reason.map(Say::markdown),
                }
            }
        };
        Some((ident, write))
    }

    /// The events a performed write sends, as the identity puts them on the wire:
    /// each is a world event and an observation, and the tool answers with their ids.
    pub(super) fn perform(&mut self, ident: Ident, write: AgentWrite) -> ToolAnswer {
        let mut sent = Vec::new();
        let bot = Who::Bot.user_id(ident);
        let room = match &write {
            AgentWrite::Message { room, .. }
            | AgentWrite::Edit { room, .. }
            | AgentWrite::Reaction { room, .. }
            | AgentWrite::Redaction { room, .. } => room.clone(),
            other => panic!("the alphabet has no {} write", other.kind()),
        };
        let index_of = |w: &World, id: &EventId| w.events.iter().position(|e| e.id == *id);
        match write {
            AgentWrite::Message {
                parts,
                reply_to,
                thread_root,
                ..
            } => {
                for (i, part) in parts.iter().enumerate() {
                    let mut content = text_json(part);
                    let reply_to = reply_to.as_ref().filter(|_| i == 0);
                    let relates = match (reply_to, &thread_root) {
                        (Some(t), Some(root)) => Some(json!({
                            "rel_type": "m.thread", "event_id": root.0,
                            "m.in_reply_to": {"event_id": t.0},
                        })),
                        (None, Some(root)) => Some(json!({
                            "rel_type": "m.thread", "event_id": root.0, "is_falling_back": true,
                            "m.in_reply_to": {"event_id": root.0},
                        })),
                        (Some(t), None) => Some(json!({"m.in_reply_to": {"event_id": t.0}})),
                        (None, None) => None,
                    };
                    if let Some(relates) = relates {
                        content["m.relates_to"] = relates;
                    }
                    if let Some(t) = reply_to.and_then(|t| index_of(self, t)) {
                        let sender = self.events[t].sender.user_id(self.events[t].ident);
                        if sender != bot {
                            content["m.mentions"] = json!({"user_ids": [sender.0]});
                        }
                    }
                    let kind = EvKind::Message {
                        body: part.body.clone(),
                        is_reply: reply_to.is_some(),
                    };
                    let id = self.agent_event(ident, &room, "m.room.message", content, kind);
                    sent.push(id);
                }
            }
            AgentWrite::Edit { original, text, .. } => {
                // ruma's `make_replacement`: the `* ` fallback, with an (empty) HTML
                // one when the text has none.
                let mut new_content = text_json(&text);
                let mut content = new_content.clone();
                content["body"] = json!(format!("* {}", text.body));
                content["format"] = json!("org.matrix.custom.html");
                content["formatted_body"] = json!(format!(
                    "* {}",
                    text.formatted_body.clone().unwrap_or_default()
                ));
                new_content
                    .as_object_mut()
                    .expect("an object")
                    .remove("m.relates_to");
                content["m.new_content"] = new_content;
                content["m.relates_to"] = json!({"rel_type": "m.replace", "event_id": original.0});
                let of = index_of(self, &original).expect("the target is a world event");
                if self.events[of].sender == Who::Bot {
                    // The homeserver bundles the latest edit by the original's sender.
                    self.events[of].edited_body = Some(text.body.clone());
                }
                let id =
                    self.agent_event(ident, &room, "m.room.message", content, EvKind::Edit { of });
                sent.push(id);
            }
            AgentWrite::Reaction {
                relates_to, key, ..
            } => {
                let content = json!({"m.relates_to": {
                    "rel_type": "m.annotation", "event_id": relates_to.0, "key": key,
                }});
                sent.push(self.agent_event(ident, &room, "m.reaction", content, EvKind::Reaction));
            }
            AgentWrite::Redaction {
                redacts, reason, ..
            } => {
                let mut content = json!({"redacts": redacts.0});
                if let Some(reason) = reason {
                    content["reason"] = json!(reason);
                }
                if let Some(t) = index_of(self, &redacts) {
                    self.events[t].redacted = true;
                }
                sent.push(self.agent_event(
                    ident,
                    &room,
                    "m.room.redaction",
                    content,
                    EvKind::Redaction,
                ));
            }
            _ => unreachable!(),
        }
        self.wrote.extend(sent.iter().cloned());
        ToolAnswer::Sent { event_ids: sent }
    }

    fn agent_event(
        &mut self,
        ident: Ident,
        room: &RoomId,
        event_type: &'static str,
        content: Value,
        kind: EvKind,
    ) -> EventId {
        let id = self.push_event(
            ident,
            room.clone(),
            Who::Bot,
            event_type,
            content.clone(),
            kind,
        );
        self.expected.push(Observation::Sent {
            ident,
            room: room.clone(),
            event_id: Some(id.clone()),
            event_type: event_type.to_owned(),
            content: normalize_content(&content),
        });
        id
    }
}

/// `m.text` content of an agent's text: `body`, and the HTML when it has one.
fn text_json(text: &AgentText) -> Value {
    let mut content = json!({"msgtype": "m.text", "body": text.body});
    if let Some(html) = &text.formatted_body {
        content["format"] = json!("org.matrix.custom.html");
        content["formatted_body"] = json!(html);
    }
    content
}

/// The generator's agent writes, in the order [`transitions`](super::transitions) adds
/// them: through the identity's tools, aimed at prompts, people's messages and its
/// own; in the real target it redacts only its own events.
pub(super) fn agent_write_options(
    world: &World,
    rids: &[Rid],
    has_prompts: bool,
    has_messages: bool,
) -> Vec<(u32, BoxedStrategy<Action>)> {
    let real = world.mode == Mode::Real;
    let mut options: Vec<(u32, BoxedStrategy<Action>)> = Vec::new();
    // A text naming an id is refused only while that id is open: name the open
    // ones (of either identity) when there are any.
    let open: Vec<(Ident, Rid)> = Ident::ALL
        .into_iter()
        .flat_map(|i| [(i, Rid::R1), (i, Rid::R2)])
        .filter(|(i, r)| {
            world.channel.identity(&i.id()).is_some_and(|s| {
                s.open_request_ids()
                    .iter()
                    .any(|id| id.as_str() == r.as_str())
            })
        })
        .collect();
    let mut named: Vec<Rid> = open.iter().map(|(_, r)| *r).collect();
    if named.is_empty() {
        named = rids.to_vec();
    }
    if !open.is_empty() {
        // A message of the identity whose prompt is open, naming its id.
        options.push((
            2,
            (pick(open), any::<bool>(), 0u8..2)
                .prop_map(|((ident, rid), plain, room)| Action::AgentWrite {
                    ident,
                    op: AgentOp::Send {
                        room,
                        say: if plain {
                            Say::Names(rid)
                        } else {
                            Say::Lookalike(rid)
                        },
                        rel: AgentRel::None,
                    },
                })
                .boxed(),
        ));
    }
    let say = prop_oneof![
        2 => (0..AGENT_CHAT.len() as u8).prop_map(Say::Innocent),
        2 => pick(named.clone()).prop_map(Say::Names),
        2 => pick(named).prop_map(Say::Lookalike),
    ];
    let has_own = world.sel(Sel::Own(0)).is_some();
    let mut targets: Vec<(u32, BoxedStrategy<Sel>)> = Vec::new();
    let mut own_targets: Vec<(u32, BoxedStrategy<Sel>)> = Vec::new();
    if has_prompts {
        targets.push((3, (0usize..8).prop_map(Sel::Prompt).boxed()));
        own_targets.push((2, (0usize..8).prop_map(Sel::Prompt).boxed()));
    }
    if has_messages {
        targets.push((2, (0usize..8).prop_map(Sel::Message).boxed()));
        if !real {
            own_targets.push((1, (0usize..8).prop_map(Sel::Message).boxed()));
        }
    }
    if has_own {
        targets.push((3, (0usize..8).prop_map(Sel::Own).boxed()));
        own_targets.push((3, (0usize..8).prop_map(Sel::Own).boxed()));
    }
    let mut ops: Vec<(u32, BoxedStrategy<AgentOp>)> = vec![(
        if targets.is_empty() { 3 } else { 1 },
        (0u8..2, say.clone())
            .prop_map(|(room, say)| AgentOp::Send {
                room,
                say,
                rel: AgentRel::None,
            })
            .boxed(),
    )];
    if !targets.is_empty() {
        let t = proptest::strategy::Union::new_weighted(targets);
        ops.push((
            3,
            (t.clone(), say.clone(), 0u8..3)
                .prop_map(|(to, say, how)| AgentOp::Send {
                    room: 0,
                    say,
                    rel: match how {
                        0 => AgentRel::Reply { to },
                        n => AgentRel::Thread {
                            root: to,
                            reply: n == 2,
                        },
                    },
                })
                .boxed(),
        ));
        ops.push((
            3,
            (t.clone(), say.clone())
                .prop_map(|(of, say)| AgentOp::Edit { of, say })
                .boxed(),
        ));
        ops.push((
            2,
            (t, pick(vec![Key::Up, Key::Down, Key::Heart]))
                .prop_map(|(to, key)| AgentOp::React { to, key })
                .boxed(),
        ));
    }
    if !own_targets.is_empty() {
        ops.push((
            2,
            (
                proptest::strategy::Union::new_weighted(own_targets),
                proptest::option::of(say),
            )
                .prop_map(|(target, reason)| AgentOp::Redact { target, reason })
                .boxed(),
        ));
    }
    options.push((
        6,
        (
            pick(vec![Ident::A, Ident::A, Ident::B]),
            proptest::strategy::Union::new_weighted(ops),
        )
            .prop_map(|(ident, op)| Action::AgentWrite { ident, op })
            .boxed(),
    ));
    options
}
