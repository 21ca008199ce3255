//! [`Adapter`] for [`InProcess`]: each action as the server receives it, from the
//! world as the reference left it after the action (the world event it created, the
//! write it resolved): a Matrix event through the homeserver and the sync's decoding,
//! a session's request through the MCP handler's reading, a tool's write through the
//! engine's `write`.

use super::{InProcess, NOW};
use crate::alphabet::Adapter;
use crate::world::{
    AgentOp, BadRequest, Change, Ident, Key, Lbl, Observation, Odd, Redactor, Rel, Rid, Sel, Sess,
    Text, ToolAnswer, Who, World,
};
use mc_model::{AgentText, AgentWrite, EventId, Input};
use mc_server::engine::{BindAnswer, WriteAnswer};
use mc_server::write::markdown_text;

impl Adapter for InProcess {
    /// A known session attaches with the label its MCP session was created with
    /// (the server keeps it with the session).
    fn attach(&mut self, world: &World, session: &Sess) -> Result<(), String> {
        self.wire.net.lock().unwrap().broken.remove(&session.id());
        self.submit(Input::Attach {
            identity: session.ident().id(),
            session: session.id(),
            label: world.label_of(*session, None).map(Lbl::label),
        })
    }

    fn attach_labelled(&mut self, _: &World, session: &Sess, label: &Lbl) -> Result<(), String> {
        self.wire.net.lock().unwrap().broken.remove(&session.id());
        self.submit(Input::Attach {
            identity: session.ident().id(),
            session: session.id(),
            label: Some(label.label()),
        })
    }

    /// The engine's `bind`, which the operator socket answers from.
    fn bind(
        &mut self,
        _: &World,
        ident: &Ident,
        label: &Lbl,
        room: &Option<u8>,
    ) -> Result<(), String> {
        let answer = self
            .rt
            .block_on(
                self.engine
                    .bind(ident.id(), label.label(), room.map(|n| ident.room(n))),
            )
            .map_err(|e| e.to_string())?;
        let answer = match answer {
            BindAnswer::Bound(changes) => crate::world::BindAnswer::Bound(
                changes
                    .into_iter()
                    .map(|(label, room)| (label.as_str().to_owned(), room))
                    .collect(),
            ),
            BindAnswer::Dropped(mc_model::DropReason::NotJoined) => {
                crate::world::BindAnswer::NotJoined
            }
            BindAnswer::Dropped(reason) => return Err(format!("bind dropped: {reason:?}")),
        };
        self.wire
            .net
            .lock()
            .unwrap()
            .observed
            .push(Observation::Bind {
                ident: *ident,
                answer,
            });
        Ok(())
    }

    /// The engine's `revoke`, which the operator socket answers from.
    fn revoke(&mut self, _: &World, ident: &Ident, grant: &Option<u8>) -> Result<(), String> {
        let revoked = self
            .rt
            .block_on(self.engine.revoke(ident.id(), grant.map(u64::from)))
            .map_err(|e| e.to_string())?;
        self.wire
            .net
            .lock()
            .unwrap()
            .observed
            .push(Observation::Revoked {
                ident: *ident,
                revoked,
            });
        Ok(())
    }

    fn detach(&mut self, _: &World, session: &Sess) -> Result<(), String> {
        self.submit(Input::Detach {
            identity: session.ident().id(),
            session: session.id(),
        })
    }

    fn message(
        &mut self,
        world: &World,
        _: &Ident,
        _: &Who,
        _: &u8,
        _: &Text,
        _: &Rel,
    ) -> Result<(), String> {
        self.deliver(world)
    }

    fn reaction(&mut self, world: &World, _: &Who, _: &Sel, _: &Key) -> Result<(), String> {
        self.deliver(world)
    }

    fn redaction(&mut self, world: &World, _: &Redactor, _: &usize) -> Result<(), String> {
        self.deliver(world)
    }

    fn permission_request(&mut self, _: &World, session: &Sess, rid: &Rid) -> Result<(), String> {
        let request = mc_server::mcp::permission_request(Some(rid.params()))?;
        self.submit(Input::PermissionRequest {
            identity: session.ident().id(),
            session: session.id(),
            request,
        })
    }

    fn acknowledge(
        &mut self,
        world: &World,
        ident: &Ident,
        session: &Option<Sess>,
        target: &usize,
    ) -> Result<(), String> {
        self.submit(Input::Acknowledge {
            identity: ident.id(),
            session: session.map(Sess::id),
            event_id: world.events[world
                .ack_sel(*ident, *target)
                .ok_or("no message to acknowledge")?]
            .id
            .clone(),
        })
    }

    fn invalid_permission_request(
        &mut self,
        _: &World,
        session: &Sess,
        bad: &BadRequest,
    ) -> Result<(), String> {
        // As the MCP handler does: what `permission_request` cannot read becomes
        // `InvalidPermissionRequest` with its error.
        match mc_server::mcp::permission_request(Some(bad.params())) {
            Ok(request) => Err(format!("the server read a malformed request: {request:?}")),
            Err(error) => self.submit(Input::InvalidPermissionRequest {
                identity: session.ident().id(),
                session: session.id(),
                error,
            }),
        }
    }

    /// The engine's `write`, with the write the tool builds: the reference's
    /// targets (resolved before the action) and the text through impl's own Markdown
    /// rendering (`markdown_text`).
    fn agent_write(&mut self, world: &World, _: &Ident, op: &AgentOp) -> Result<(), String> {
        let (ident, mut write) = world.last_write.clone().ok_or("no agent write")?;
        let rendered = |say: crate::world::Say| -> AgentText { markdown_text(&say.markdown()) };
        match (&mut write, *op) {
            (AgentWrite::Message { parts, .. }, AgentOp::Send { say, .. }) => {
                *parts = vec![rendered(say)]
            }
            (AgentWrite::Edit { text, .. }, AgentOp::Edit { say, .. }) => *text = rendered(say),
            _ => {}
        }
        self.wire.net.lock().unwrap().next_ids = world.wrote.iter().cloned().collect();
        let answer = self
            .rt
            .block_on(self.engine.write(ident.id(), write.clone()))
            .map_err(|e| e.to_string())?;
        let answer = match answer {
            WriteAnswer::Done(written) => ToolAnswer::Sent {
                event_ids: written.event_ids.into_iter().map(EventId).collect(),
            },
            WriteAnswer::Refused(reason) => ToolAnswer::Error {
                kind: mc_server::write::refusal(&reason, &write, "")
                    .kind()
                    .to_owned(),
            },
            WriteAnswer::Failed(e) => ToolAnswer::Error {
                kind: e.kind().to_owned(),
            },
        };
        self.wire
            .net
            .lock()
            .unwrap()
            .observed
            .push(Observation::Wrote { ident, answer });
        Ok(())
    }

    fn break_stream(&mut self, _: &World, session: &Sess) -> Result<(), String> {
        self.wire.net.lock().unwrap().broken.insert(session.id());
        Ok(())
    }

    fn restart(
        &mut self,
        world: &World,
        request: &Option<(Sess, Rid)>,
        reached: &bool,
    ) -> Result<(), String> {
        if let Some((session, rid)) = request {
            self.wire.net.lock().unwrap().hold_posts = Some(*reached);
            let asked = self.permission_request(world, session, rid);
            self.settle();
            self.wire.net.lock().unwrap().hold_posts = None;
            asked?;
        }
        self.restart_engine(world)
    }

    /// The homeserver delivers the identity's member event, then the join events of
    /// the rooms the server joined (the reference's, in its order).
    fn membership(&mut self, world: &World, _: &Ident, _: &u8, _: &Change) -> Result<(), String> {
        let i = world
            .events
            .len()
            .checked_sub(1 + world.joins.len())
            .ok_or("no member event")?;
        self.deliver_exactly(world, i)?;
        self.settle();
        let joined = std::mem::take(&mut self.wire.net.lock().unwrap().joined);
        for (ident, room) in joined {
            let j = world
                .joins
                .iter()
                .copied()
                .find(|&j| world.events[j].ident == ident && world.events[j].room == room)
                .ok_or_else(|| format!("the server joined {room}, the reference did not"))?;
            self.deliver_exactly(world, j)?;
        }
        Ok(())
    }

    /// The homeserver serves the event again as it is now, and the identity's sync
    /// hands it to the adapter.
    fn redeliver(&mut self, world: &World, target: &usize) -> Result<(), String> {
        let t = world
            .redeliverable_sel(*target)
            .ok_or("no event to deliver again")?;
        let input = self.adapt(&world.events[t]);
        self.submit(input)
    }

    /// The homeserver stores the event and the sync hands it to the adapter, which
    /// must make it exactly the `Input::Unhandled` the reference did.
    fn unhandled(
        &mut self,
        world: &World,
        _: &Ident,
        _: &Who,
        _: &u8,
        _: &Odd,
    ) -> Result<(), String> {
        self.deliver_exactly(world, world.events.len().checked_sub(1).ok_or("no event")?)
    }

    /// The homeserver stores the `m.room.encrypted` event and the sync hands it to the
    /// adapter as the SDK does when it has no room key for it; the adapter must make it
    /// exactly the `Input::Undecryptable` the reference did.
    fn undecryptable(&mut self, world: &World, _: &Ident, _: &Who, _: &u8) -> Result<(), String> {
        self.deliver_exactly(world, world.events.len().checked_sub(1).ok_or("no event")?)
    }

    /// The room key arrived: the SDK hands the same event again, decrypted (its
    /// cleartext JSON under the encrypted event's id, sender, time and room), and
    /// serves it decrypted from then on (a reply's parent is fetched so).
    fn decrypt(&mut self, world: &World, _: &usize, _: &Text) -> Result<(), String> {
        let t = world.decrypted.ok_or("no event was decrypted")?;
        let json = world.events[t].json();
        {
            let mut net = self.wire.net.lock().unwrap();
            let stored = net
                .events
                .iter_mut()
                .find(|e| e["event_id"] == json["event_id"])
                .ok_or("the homeserver has no such encrypted event")?;
            *stored = json;
        }
        self.hand_exactly(world, t)
    }

    fn tick(&mut self, world: &World, _: &u64) -> Result<(), String> {
        NOW.with(|n| n.set(world.now));
        self.submit(Input::Tick)
    }

    /// The sync loop found a gap larger than its budget: it hands the engine
    /// `Input::GapCut` before the gap's events (the backfill itself is IO).
    fn gap_cut(&mut self, _: &World, ident: &Ident, room: &u8) -> Result<(), String> {
        self.submit(Input::GapCut {
            identity: ident.id(),
            room: ident.room(*room),
        })
    }
}
