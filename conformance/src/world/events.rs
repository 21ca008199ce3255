//! The world's Matrix events: each [`Ev`] as its sender put it on the wire (symbolic
//! ids), how an action's event is built together with the model input its delivery
//! becomes (a reply's parent as the homeserver serves it), and the selectors that
//! pick an earlier event by number (modulo their count, so that they stay valid when
//! shrinking removes earlier actions).

use super::{Ident, Odd, Rel, Sel, Text, Who, World};
use mc_model::{
    EventId, Input, Message, MessageContent, NewContent, Parent, Relation, ReplyTo, RoomId,
    Timestamp,
};
use serde_json::{json, Value};

/// What kind of event a world event is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvKind {
    /// An `m.room.message` (not an edit).
    Message { body: String, is_reply: bool },
    /// An `m.replace` edit of event `of`.
    Edit { of: usize },
    /// An `m.reaction`.
    Reaction,
    /// An `m.room.redaction`.
    Redaction,
    /// A permission prompt the identity posted.
    Prompt,
    /// An event that is no input ([`Odd`]).
    Other,
    /// An `m.room.encrypted` event the server could not decrypt; `Decrypt` turns it
    /// into a [`EvKind::Message`] (the same event, its room key arrived).
    Encrypted,
}

/// One Matrix event of the world, as its sender put it on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ev {
    pub ident: Ident,
    pub room: RoomId,
    /// Symbolic: `$ev<n>` for the cast's events, `$mc-prompt-<effect id>` for prompts.
    pub id: EventId,
    pub sender: Who,
    pub ts: Timestamp,
    /// `m.room.message`, `m.reaction` or `m.room.redaction`.
    pub event_type: &'static str,
    /// The content, with symbolic ids.
    pub content: Value,
    pub kind: EvKind,
    /// A later redaction targeted it (the homeserver serves it without content).
    pub redacted: bool,
    /// The body of the latest edit by the same sender (prompts: the outcome edit).
    pub edited_body: Option<String>,
    /// The input its delivery became (a person's event, or a generated bot message;
    /// `None` for what the identity sent itself), for a redelivery.
    pub input: Option<Input>,
}

impl Ev {
    /// The full event JSON as a homeserver serves it in a timeline, with symbolic ids.
    pub fn json(&self) -> Value {
        let mut json = json!({
            "type": self.event_type,
            "event_id": self.id.0,
            "sender": self.sender.user_id(self.ident).0,
            "origin_server_ts": self.ts,
            "room_id": self.room.0,
            "content": self.content,
            "unsigned": {},
        });
        if self.event_type == Odd::Topic.event_type() {
            json["state_key"] = json!("");
        }
        if self.event_type == "m.room.member" {
            // Always the identity's own membership.
            json["state_key"] = json!(Who::Bot.user_id(self.ident).0);
        }
        json
    }
}

impl World {
    /// An `m.room.member` event of the identity's own account in `room`, sent by
    /// `sender`, as a world event; the input it becomes.
    pub(super) fn member_event(
        &mut self,
        ident: Ident,
        room: RoomId,
        sender: Who,
        membership: mc_model::Membership,
    ) -> Input {
        let word = match membership {
            mc_model::Membership::Invited { .. } => "invite",
            mc_model::Membership::Joined => "join",
            mc_model::Membership::Left => "leave",
            mc_model::Membership::Banned => "ban",
        };
        let id = self.push_event(
            ident,
            room.clone(),
            sender,
            "m.room.member",
            json!({"membership": word}),
            EvKind::Other,
        );
        let input = Input::Membership {
            identity: ident.id(),
            room,
            event_id: Some(id),
            user: Who::Bot.user_id(ident),
            membership,
        };
        if let Some(ev) = self.events.last_mut() {
            ev.input = Some(input.clone());
        }
        input
    }

    /// The n-th event a sync could deliver again: delivered as input before, and
    /// not redacted since (a replayed response would serve it redacted).
    pub fn redeliverable_sel(&self, n: usize) -> Option<usize> {
        pick_nth(
            &self.targets(|e| e.input.is_some() && !e.redacted && e.kind != EvKind::Other),
            n,
        )
    }

    /// The input a redelivery of event `i` becomes: the first delivery's, with a
    /// reply's parent as the homeserver serves it now.
    pub(super) fn redelivery(&self, i: usize) -> Input {
        let mut input = self.events[i].input.clone().expect("a delivered event");
        if let Input::Message { message, .. } = &mut input {
            if let Some(content) = &mut message.content {
                match &mut content.relation {
                    Some(Relation::Reply { in_reply_to }) => {
                        let t = self
                            .events
                            .iter()
                            .position(|e| e.id == in_reply_to.event_id);
                        in_reply_to.parent = t.and_then(|t| self.parent(t));
                    }
                    Some(Relation::Thread {
                        in_reply_to: Some(in_reply_to),
                        is_falling_back: false,
                        ..
                    }) => {
                        let t = self
                            .events
                            .iter()
                            .position(|e| e.id == in_reply_to.event_id);
                        in_reply_to.parent = t.and_then(|t| self.parent(t));
                    }
                    _ => {}
                }
            }
        }
        input
    }

    /// The event `sel` picks, if there is one.
    pub fn sel(&self, sel: Sel) -> Option<usize> {
        let (list, n) = match sel {
            Sel::Prompt(n) => (self.targets(|e| e.kind == EvKind::Prompt), n),
            Sel::Message(n) => (
                self.targets(|e| matches!(e.kind, EvKind::Message { .. })),
                n,
            ),
            Sel::Own(n) => (
                self.targets(|e| e.sender == Who::Bot && matches!(e.kind, EvKind::Message { .. })),
                n,
            ),
        };
        pick_nth(&list, n)
    }

    /// The n-th message (not an edit), modulo their number.
    pub fn message_sel(&self, n: usize) -> Option<usize> {
        pick_nth(
            &self.targets(|e| matches!(e.kind, EvKind::Message { .. })),
            n,
        )
    }

    /// The n-th message, reaction or undecrypted event not redacted yet.
    pub fn redactable_sel(&self, n: usize) -> Option<usize> {
        pick_nth(
            &self.targets(|e| {
                !e.redacted
                    && matches!(
                        e.kind,
                        EvKind::Message { .. } | EvKind::Reaction | EvKind::Encrypted
                    )
            }),
            n,
        )
    }

    /// The n-th message (or undecrypted event, whose id a push may have named) of
    /// `ident`.
    pub fn ack_sel(&self, ident: Ident, n: usize) -> Option<usize> {
        pick_nth(
            &self.targets(|e| {
                e.ident == ident && matches!(e.kind, EvKind::Message { .. } | EvKind::Encrypted)
            }),
            n,
        )
    }

    /// The n-th encrypted event not decrypted yet (nor redacted: the homeserver then
    /// serves it without its ciphertext, which no key decrypts).
    pub fn decryptable_sel(&self, n: usize) -> Option<usize> {
        pick_nth(
            &self.targets(|e| e.kind == EvKind::Encrypted && !e.redacted),
            n,
        )
    }

    /// The event a relation targets.
    pub fn rel_target(&self, rel: Rel) -> Option<usize> {
        match rel {
            Rel::None => None,
            Rel::Reply { to, .. } | Rel::Thread { root: to, .. } => self.sel(to),
            Rel::Edit { of } => self.message_sel(of),
        }
    }

    fn next_id(&self) -> EventId {
        EventId(format!("$ev{}", self.events.len()))
    }

    pub(super) fn push_event(
        &mut self,
        ident: Ident,
        room: RoomId,
        sender: Who,
        event_type: &'static str,
        content: Value,
        kind: EvKind,
    ) -> EventId {
        let id = self.next_id();
        self.events.push(Ev {
            ident,
            room,
            id: id.clone(),
            sender,
            ts: self.now,
            event_type,
            content,
            kind,
            redacted: false,
            edited_body: None,
            input: None,
        });
        id
    }

    /// Runs the input the latest event's delivery became, and keeps it with the event.
    pub(super) fn delivered(&mut self, input: Input) {
        if let Some(ev) = self.events.last_mut() {
            ev.input = Some(input.clone());
        }
        self.run(input);
    }

    /// The parent of a reply as a homeserver serves it: `None` when redacted or not a
    /// message; the body of the latest edit by the same sender otherwise.
    fn parent(&self, target: usize) -> Option<Parent> {
        let t = &self.events[target];
        if t.redacted {
            return None;
        }
        let (body, is_reply) = match &t.kind {
            EvKind::Message { body, is_reply } => (body.clone(), *is_reply),
            EvKind::Prompt => (
                t.content["body"].as_str().unwrap_or_default().to_owned(),
                false,
            ),
            EvKind::Edit { .. } => {
                let body = t.content["m.new_content"]["body"]
                    .as_str()
                    .unwrap_or_default();
                (body.to_owned(), false)
            }
            EvKind::Reaction | EvKind::Redaction | EvKind::Other | EvKind::Encrypted => {
                return None;
            }
        };
        Some(Parent {
            sender: t.sender.user_id(t.ident),
            body: t.edited_body.clone().unwrap_or(body),
            has_reply_relation: is_reply,
        })
    }

    pub(super) fn message(
        &mut self,
        ident: Ident,
        sender: Who,
        room: RoomId,
        text: Text,
        rel: Rel,
    ) -> Input {
        let msgtype = text.msgtype();
        let mut body = text.body();
        let mut content = json!({"msgtype": msgtype.as_str(), "body": body});
        let mut formatted_body = None;
        let relation = match rel {
            Rel::None => None,
            Rel::Reply { to, fallback } => {
                let to = self.sel(to).expect("checked by the precondition");
                let t = &self.events[to];
                let parent_id = t.id.clone();
                if fallback {
                    let quoted = match &t.kind {
                        EvKind::Message { body, .. } => body.clone(),
                        _ => t.content["body"].as_str().unwrap_or_default().to_owned(),
                    };
                    let who = t.sender.user_id(t.ident).0;
                    let quote: String = quoted
                        .lines()
                        .enumerate()
                        .map(|(i, l)| {
                            if i == 0 {
                                format!("> <{who}> {l}\n")
                            } else {
                                format!("> {l}\n")
                            }
                        })
                        .collect();
                    body = format!("{quote}\n{body}");
                    let html = format!(
                        "<mx-reply><blockquote><a href=\"https://matrix.to/#/{}/{}\">In reply to</a> <a href=\"https://matrix.to/#/{who}\">{who}</a><br>quoted</blockquote></mx-reply>{}",
                        t.room.0,
                        parent_id.0,
                        text.body()
                    );
                    content["body"] = json!(body);
                    content["format"] = json!("org.matrix.custom.html");
                    content["formatted_body"] = json!(html);
                    formatted_body = Some(html);
                }
                content["m.relates_to"] = json!({"m.in_reply_to": {"event_id": parent_id.0}});
                Some(Relation::Reply {
                    in_reply_to: ReplyTo {
                        event_id: parent_id,
                        parent: self.parent(to),
                    },
                })
            }
            Rel::Thread { root, reply } => {
                let root = self.sel(root).expect("checked by the precondition");
                let root_id = self.events[root].id.clone();
                content["m.relates_to"] = json!({
                    "rel_type": "m.thread",
                    "event_id": root_id.0,
                    "is_falling_back": !reply,
                    "m.in_reply_to": {"event_id": root_id.0},
                });
                Some(Relation::Thread {
                    root: root_id.clone(),
                    in_reply_to: Some(ReplyTo {
                        event_id: root_id,
                        // Only a real reply's parent is fetched.
                        parent: if reply { self.parent(root) } else { None },
                    }),
                    is_falling_back: !reply,
                })
            }
            Rel::Edit { of } => {
                let of = self.message_sel(of).expect("checked by the precondition");
                let original = self.events[of].id.clone();
                let new_body = body.clone();
                body = format!("* {new_body}");
                content["body"] = json!(body);
                content["m.new_content"] = json!({"msgtype": msgtype.as_str(), "body": new_body});
                content["m.relates_to"] = json!({"rel_type": "m.replace", "event_id": original.0});
                Some(Relation::Replacement {
                    original,
                    new_content: Some(NewContent {
                        msgtype: msgtype.clone(),
                        body: new_body,
                    }),
                })
            }
        };
        let kind = match rel {
            Rel::Edit { of } => EvKind::Edit {
                of: self.message_sel(of).expect("checked by the precondition"),
            },
            // A message that really replies (its own fallback is stripped when quoted).
            Rel::Reply { .. } | Rel::Thread { reply: true, .. } => EvKind::Message {
                body: body.clone(),
                is_reply: true,
            },
            _ => EvKind::Message {
                body: body.clone(),
                is_reply: false,
            },
        };
        let id = self.push_event(ident, room.clone(), sender, "m.room.message", content, kind);
        if let EvKind::Edit { of } = self.events[self.events.len() - 1].kind {
            // The homeserver bundles the latest edit by the original's sender.
            if self.events[of].sender == sender
                && matches!(self.events[of].kind, EvKind::Message { .. })
            {
                self.events[of].edited_body = Some(text.body());
            }
        }
        Input::Message {
            identity: ident.id(),
            message: Message {
                room,
                event_id: id,
                sender: sender.user_id(ident),
                sender_name: sender.display_name().map(str::to_owned),
                origin_server_ts: self.now,
                content: Some(MessageContent {
                    msgtype,
                    body,
                    formatted_body,
                    relation,
                    attachment: None,
                }),
                device: mc_model::DeviceTrust::PlaintextRoom,
            },
        }
    }

    /// The events an action may target, by number, filtered by `f`.
    fn targets(&self, f: impl Fn(&Ev) -> bool) -> Vec<usize> {
        (0..self.events.len())
            .filter(|&i| f(&self.events[i]))
            .collect()
    }
}

/// The content of an `m.room.encrypted` event a client sends with Megolm
/// (Client-Server API, "`m.megolm.v1.aes-sha2`"): only `session_id` tells which room
/// key it needs.
pub(super) fn megolm_content(session: &str) -> Value {
    json!({
        "algorithm": "m.megolm.v1.aes-sha2",
        "ciphertext": "AwgAEnACgAkLmt6qF84IK++J7UDH2Za1YVchHyprqTqsg2yyOwAtHaZTwyNg37afzg8f3r9I",
        "device_id": "PHONE",
        "sender_key": "tDpXnS2Tz3iBOWHuE1FQJDL0gqDnGcZB0Ez0Vd9GPCU",
        "session_id": session,
    })
}

fn pick_nth(list: &[usize], n: usize) -> Option<usize> {
    (!list.is_empty()).then(|| list[n % list.len()])
}
