//! What each action does to the world: the model inputs it becomes, run through the
//! model with the ideal wire's outcomes (`observation`), and the events the
//! homeserver now has (`events`). [`World::apply`] dispatches exhaustively on the
//! action; each family has its own `impl` block: the MCP side and the process
//! (sessions, requests, acknowledgements, time, restarts), and what the homeserver
//! delivers (people's events, membership, undecryptable events and their keys). The
//! agent's writes are in `agent`.

use super::events::megolm_content;
use super::{BindAnswer, Key, Lbl, Observation, Rel, REAL_SETTLE};
use super::{Change, EvKind, Ident, Mode, Odd, Redactor, Rid, Sel, Sess, Text, Who, World};
use crate::alphabet::Action;
use mc_model::Input;
use mc_model::{Message, MessageContent, Reaction, Redaction, Undecryptable};
use serde_json::json;

impl World {
    /// Applies one action: builds its model inputs, runs them through the model with
    /// the ideal wire's outcomes, and records what must be observed.
    pub fn apply(&mut self, action: &Action) {
        self.expected.clear();
        self.inputs.clear();
        self.wrote.clear();
        self.last_write = None;
        self.joins.clear();
        self.case = None;
        self.decrypted = None;
        self.drops.clear();
        self.bound.clear();
        self.revoked.clear();
        self.apply_one(action);
        if self.mode == Mode::Real {
            // Wall-clock time passes between actions: a vote's 1 ms settle window ends
            // before the next action.
            self.now += REAL_SETTLE + 1;
            self.run(Input::Tick);
        }
    }

    fn apply_one(&mut self, action: &Action) {
        match *action {
            Action::Attach { session } => self.attach(session, None),
            Action::AttachLabelled { session, label } => self.attach(session, Some(label)),
            Action::Bind { ident, label, room } => self.bind(ident, label, room),
            Action::Revoke { ident, grant } => self.revoke(ident, grant),
            Action::Detach { session } => self.run(Input::Detach {
                identity: session.ident().id(),
                session: session.id(),
            }),
            Action::Message {
                ident,
                sender,
                room,
                text,
                rel,
            } => self.apply_message(ident, sender, room, text, rel),
            Action::Reaction {
                sender,
                target,
                key,
            } => self.reaction(sender, target, key),
            Action::Redaction { by, target } => self.redaction(by, target),
            Action::PermissionRequest { session, rid } => self.run(Input::PermissionRequest {
                identity: session.ident().id(),
                session: session.id(),
                request: rid.request(),
            }),
            Action::Acknowledge {
                ident,
                session,
                target,
            } => self.acknowledge(ident, session, target),
            Action::AgentWrite { ident, op } => self.agent_write_action(ident, op),
            Action::InvalidPermissionRequest { session, bad } => {
                self.run(Input::InvalidPermissionRequest {
                    identity: session.ident().id(),
                    session: session.id(),
                    error: bad.error(),
                })
            }
            Action::BreakStream { session } => {
                self.broken.insert(session);
            }
            Action::Tick { ms } => {
                self.now += ms;
                self.run(Input::Tick);
            }
            Action::Restart { request, reached } => self.restart(request, reached),
            Action::Redeliver { target } => {
                let t = self
                    .redeliverable_sel(target)
                    .expect("checked by the precondition");
                let input = self.redelivery(t);
                self.run(input);
            }
            Action::Unhandled {
                ident,
                sender,
                room,
                kind,
            } => self.unhandled(ident, sender, room, kind),
            Action::Undecryptable {
                ident,
                sender,
                room,
            } => self.undecryptable(ident, sender, room),
            Action::GapCut { ident, room } => {
                self.run(Input::GapCut {
                    identity: ident.id(),
                    room: ident.room(room),
                });
                self.case = Some("gap_cut".to_owned());
            }
            Action::Decrypt { target, text } => self.decrypt(target, text),
            Action::Membership {
                ident,
                room,
                change,
            } => self.membership(ident, room, change),
        }
    }
}

/// The MCP side and the process: sessions attach, the agent acknowledges, the process
/// restarts.
impl World {
    /// The session's stream opens (a broken one is open again); a new MCP session
    /// is created with `label`, a known one keeps the label it was created with.
    fn attach(&mut self, session: Sess, label: Option<Lbl>) {
        self.broken.remove(&session);
        let label = self.label_of(session, label);
        self.known.insert(session, label);
        self.run(Input::Attach {
            identity: session.ident().id(),
            session: session.id(),
            label: label.map(Lbl::label),
        });
    }

    /// The operator's `matrix-channel bind`: what it answers is seen.
    fn bind(&mut self, ident: Ident, label: Lbl, room: Option<u8>) {
        self.run(Input::Bind {
            identity: ident.id(),
            label: label.label(),
            room: room.map(|n| ident.room(n)),
        });
        let answer = if self
            .drops
            .iter()
            .any(|(_, reason)| *reason == mc_model::DropReason::NotJoined)
        {
            BindAnswer::NotJoined
        } else {
            BindAnswer::Bound(std::mem::take(&mut self.bound))
        };
        self.case = Some(format!("bind: {}", answer.case()));
        self.expected.push(Observation::Bind { ident, answer });
    }

    /// The operator's `matrix-channel revoke`: the grants it ended are seen (none,
    /// for one that is no grant: the CLI's refusal).
    fn revoke(&mut self, ident: Ident, grant: Option<u8>) {
        self.run(Input::Revoke {
            identity: ident.id(),
            grant: grant.map(u64::from),
        });
        let revoked = std::mem::take(&mut self.revoked);
        self.case = Some(format!(
            "revoke: {}",
            if revoked.is_empty() {
                "nothing"
            } else {
                "revoked"
            }
        ));
        self.expected.push(Observation::Revoked { ident, revoked });
    }

    /// The agent acknowledges the identity's n-th message; on a real server the
    /// `acknowledge` tool's answer is seen.
    fn acknowledge(&mut self, ident: Ident, session: Option<Sess>, target: usize) {
        let target = self
            .ack_sel(ident, target)
            .expect("checked by the precondition");
        let event_id = self.events[target].id.clone();
        self.run(Input::Acknowledge {
            identity: ident.id(),
            session: session.map(Sess::id),
            event_id: event_id.clone(),
        });
        if self.mode == Mode::Real {
            let acknowledged = self.channel.identity(&ident.id()).is_some_and(|s| {
                matches!(
                    s.log_entry(&event_id).map(|e| &e.record),
                    Some(mc_model::Record::Pushed { acked: true, .. })
                )
            });
            self.expected.push(Observation::Acknowledged {
                ident,
                event_id,
                acknowledged,
            });
        }
    }

    /// The process is killed (with `request`, while that permission request's prompt
    /// post is in flight) and a new one starts on the same state.
    fn restart(&mut self, request: Option<(Sess, Rid)>, reached: bool) {
        if let Some((session, rid)) = request {
            self.hold_posts = Some(reached);
            self.apply_one(&Action::PermissionRequest { session, rid });
            self.hold_posts = None;
        }
        self.restarts += 1;
        // The new process numbers its tool calls from 0 again.
        self.next_call = 0;
        for ident in Ident::ALL {
            self.channel
                .add_identity(ident.id(), ident.config(self.mode))
                .expect("the cast's settings are valid");
        }
        for input in self.restart_inputs() {
            self.run(input);
        }
    }
}

/// What the homeserver delivers: people's events, the identity's own membership,
/// undecryptable events and their room keys.
impl World {
    /// A message in the identity's room, or in the room of the event its relation
    /// targets.
    fn apply_message(&mut self, ident: Ident, sender: Who, room: u8, text: Text, rel: Rel) {
        let (ident, room) = match self.rel_target(rel) {
            Some(t) => (self.events[t].ident, self.events[t].room.clone()),
            None => (ident, ident.room(room)),
        };
        let input = self.message(ident, sender, room, text, rel);
        self.delivered(input);
    }

    /// An `m.annotation` of the event `target` picks.
    fn reaction(&mut self, sender: Who, target: Sel, key: Key) {
        let target = self.sel(target).expect("checked by the precondition");
        let t = &self.events[target];
        let (ident, room, relates_to) = (t.ident, t.room.clone(), t.id.clone());
        let content = json!({"m.relates_to": {
            "rel_type": "m.annotation", "event_id": relates_to.0, "key": key.as_str(),
        }});
        let ev = self.push_event(
            ident,
            room.clone(),
            sender,
            "m.reaction",
            content,
            EvKind::Reaction,
        );
        self.delivered(Input::Reaction {
            identity: ident.id(),
            reaction: Reaction {
                room,
                event_id: ev,
                sender: sender.user_id(ident),
                origin_server_ts: self.now,
                relates_to,
                key: key.as_str().to_owned(),
                device: mc_model::DeviceTrust::PlaintextRoom,
            },
        });
    }

    /// The redaction of the n-th event not redacted yet.
    fn redaction(&mut self, by: Redactor, target: usize) {
        let target = self
            .redactable_sel(target)
            .expect("checked by the precondition");
        let t = &self.events[target];
        let sender = match by {
            Redactor::Own => t.sender,
            Redactor::Ann => Who::Ann,
            Redactor::Carl => Who::Carl,
        };
        let (ident, room, redacts) = (t.ident, t.room.clone(), t.id.clone());
        // Room v11: `redacts` in the content.
        let content = json!({"redacts": redacts.0});
        let ev = self.push_event(
            ident,
            room.clone(),
            sender,
            "m.room.redaction",
            content,
            EvKind::Redaction,
        );
        self.events[target].redacted = true;
        self.delivered(Input::Redaction {
            identity: ident.id(),
            redaction: Redaction {
                room,
                event_id: ev,
                sender: sender.user_id(ident),
                origin_server_ts: self.now,
                redacts,
            },
        });
    }

    /// A timeline event that is no input.
    fn unhandled(&mut self, ident: Ident, sender: Who, room: u8, kind: Odd) {
        let room = ident.room(room);
        let id = self.push_event(
            ident,
            room.clone(),
            sender,
            kind.event_type(),
            kind.content(),
            EvKind::Other,
        );
        self.delivered(Input::Unhandled {
            identity: ident.id(),
            room,
            event_id: Some(id),
            sender: Some(sender.user_id(ident)),
            what: kind.what(),
        });
    }

    /// An `m.room.encrypted` event the server cannot decrypt; the case tells its fate.
    fn undecryptable(&mut self, ident: Ident, sender: Who, room: u8) {
        let room = ident.room(room);
        let session = format!("megolm-session-{}", self.events.len());
        let id = self.push_event(
            ident,
            room.clone(),
            sender,
            "m.room.encrypted",
            megolm_content(&session),
            EvKind::Encrypted,
        );
        self.delivered(Input::Undecryptable {
            identity: ident.id(),
            event: Undecryptable {
                room,
                event_id: id.clone(),
                sender: sender.user_id(ident),
                sender_name: sender.display_name().map(str::to_owned),
                origin_server_ts: self.now,
                session_id: Some(session),
            },
        });
        let parked = self
            .channel
            .identity(&ident.id())
            .is_some_and(|s| s.undecryptable().iter().any(|p| p.event.event_id == id));
        let fate = if parked {
            "parked".to_owned()
        } else {
            self.drops
                .iter()
                .find(|(e, _)| e.as_ref() == Some(&id))
                .map_or("not dropped".to_owned(), |(_, r)| format!("{r:?}"))
        };
        self.case = Some(format!("undecryptable: {fate}"));
    }

    /// The room key of an undecrypted event arrives: the same event again, decrypted;
    /// the case tells whether before or after its grace period ended.
    fn decrypt(&mut self, target: usize, text: Text) {
        let t = self
            .decryptable_sel(target)
            .expect("checked by the precondition");
        let (ident, id) = (self.events[t].ident, self.events[t].id.clone());
        let state = self.channel.identity(&ident.id());
        let when =
            if state.is_some_and(|s| s.undecryptable().iter().any(|p| p.event.event_id == id)) {
                "before the grace period ended"
            } else if state.is_some_and(|s| {
                matches!(
                    s.log_entry(&id).map(|e| &e.record),
                    Some(mc_model::Record::Pushed {
                        kind: mc_model::render::PushKind::Undecryptable,
                        ..
                    })
                )
            }) {
                "after the sessions were told it is undecryptable"
            } else {
                "never parked"
            };
        self.case = Some(format!("decrypt: {when}"));
        let body = text.body();
        let ev = &mut self.events[t];
        ev.event_type = "m.room.message";
        ev.content = json!({"msgtype": text.msgtype().as_str(), "body": body});
        ev.kind = EvKind::Message {
            body: body.clone(),
            is_reply: false,
        };
        // The same event: its envelope (sender, time, room) is the one that
        // came encrypted.
        let input = Input::Message {
            identity: ev.ident.id(),
            message: Message {
                room: ev.room.clone(),
                event_id: ev.id.clone(),
                sender: ev.sender.user_id(ev.ident),
                sender_name: ev.sender.display_name().map(str::to_owned),
                origin_server_ts: ev.ts,
                content: Some(MessageContent {
                    msgtype: text.msgtype(),
                    body,
                    formatted_body: None,
                    relation: None,
                    attachment: None,
                }),
                device: mc_model::DeviceTrust::PlaintextRoom,
            },
        };
        ev.input = Some(input.clone());
        self.decrypted = Some(t);
        self.run(input);
    }

    /// The identity's own `m.room.member` event: it left, or it is invited.
    fn membership(&mut self, ident: Ident, room: u8, change: Change) {
        let room = ident.room(room);
        let input = match change {
            Change::Leave => self.member_event(ident, room, Who::Bot, mc_model::Membership::Left),
            Change::Invite { by } => self.member_event(
                ident,
                room,
                by,
                mc_model::Membership::Invited {
                    by: by.user_id(ident),
                },
            ),
        };
        self.run(input);
    }
}
