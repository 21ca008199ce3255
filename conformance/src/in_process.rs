//! The in-process target: the server's own adapters and engine, the network replaced
//! by in-memory queues.
//!
//! Matrix events reach the engine as the homeserver's JSON through
//! [`mc_server::matrix::timeline_input`] (ruma decoding, reply parents fetched from an
//! in-memory room with the homeserver's edit bundling, display names); permission
//! requests through [`mc_server::mcp::permission_request`]; the engine's effects leave
//! through its [`Wire`] as MCP notification JSON and as the Matrix event contents the
//! server builds ([`mc_server::server::prompt_content`] and friends). The clock is the
//! world's.

use crate::alphabet::Adapter;
use crate::world::{
    log_params, normalize_content, AgentOp, BadRequest, Change, Ev, Ident, Key, Observation, Odd,
    Redactor, Rel, Rid, Sel, Sess, Text, ToolAnswer, Who, World, LOG_METHOD,
};
use mc_model::{
    AgentText, AgentWrite, Channel, EventId, IdentityId, Input, Millis, PromptText, RoomId,
    SessionId,
};
use mc_server::engine::{self, EngineHandle, JournalPersist, Wire, WriteAnswer};
use mc_server::journal::{recover_channel, Journal, SnapshotPolicy};
use mc_server::matrix::{timeline_input, RoomView};
use mc_server::server::{edit_content, notice_content, prompt_content};
use mc_server::write::{markdown_text, text_content, with_relation, ToolError, Written};
use serde_json::{json, Value};
use std::cell::Cell;
use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

thread_local! {
    /// The engine's clock: the world's time. The engine runs on this thread (a
    /// current-thread runtime), so each test thread has its own clock.
    static NOW: Cell<Millis> = const { Cell::new(crate::world::START) };
}

fn clock() -> Millis {
    NOW.with(Cell::get)
}

/// The in-memory network: what the sessions received, what the identities sent, and
/// the rooms' events.
#[derive(Default)]
pub struct Net {
    /// Every event in every room, as the homeserver serves it.
    events: Vec<Value>,
    /// What was observed since the last take.
    observed: Vec<Observation>,
    /// Sessions whose stream is broken: writes to them fail.
    broken: BTreeSet<SessionId>,
    /// Wire calls so far (to see when the engine and its tasks are idle).
    calls: u64,
    /// The ids the homeserver gives the agent's next events (the world's names).
    next_ids: VecDeque<EventId>,
    /// While `Some`, a prompt post never returns (the process dies first); the flag
    /// says whether the homeserver gets the event before that.
    hold_posts: Option<bool>,
    /// The rooms the identities joined, not delivered yet.
    joined: Vec<(Ident, RoomId)>,
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
    net: Mutex<Net>,
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
            room_id: None,
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
struct MemRoom<'a> {
    id: RoomId,
    wire: &'a MemWire,
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

/// A store directory of its own for the server's journal (`journal.sqlite3`, the
/// real [`Journal`]), removed when dropped.
struct JournalDir(std::path::PathBuf);

impl JournalDir {
    fn new() -> JournalDir {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("mc-conformance-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory for the journal");
        JournalDir(dir)
    }

    fn open(&self) -> Journal {
        Journal::open(&self.0, SnapshotPolicy::default()).expect("the journal opens")
    }
}

impl Drop for JournalDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The server under test, in process.
pub struct InProcess {
    rt: tokio::runtime::Runtime,
    engine: EngineHandle,
    task: tokio::task::JoinHandle<()>,
    journal: JournalDir,
    wire: Arc<MemWire>,
}

impl InProcess {
    /// A fresh server: the cast's identities, no sessions, the world's start time.
    pub fn new() -> InProcess {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a tokio runtime");
        NOW.with(|n| n.set(crate::world::START));
        let world = World::new(crate::world::Mode::InProcess);
        let wire = Arc::new(MemWire {
            net: Mutex::new(Net::default()),
        });
        let channel: Channel = world.channel.clone();
        let journal = JournalDir::new();
        let persist = JournalPersist::new(journal.open());
        let (engine, task) =
            rt.block_on(async { engine::spawn(channel, wire.clone(), persist, clock) });
        InProcess {
            rt,
            engine,
            task,
            journal,
            wire,
        }
    }

    /// SIGKILL and start again: the engine task ends where it is (tasks it spawned
    /// that are in flight never report back), and a new engine starts on the state
    /// the old one made durable, as `serve` does: `load_channel` (the journal's
    /// snapshot with its inputs replayed, the configured identities applied again, a
    /// snapshot), `Input::Restarted`, then `report_rooms`.
    fn restart_engine(&mut self, world: &World) -> Result<(), String> {
        self.task.abort();
        // Let the runtime drop the aborted task (and its journal connection).
        self.rt.block_on(tokio::task::yield_now());
        let mut journal = self.journal.open();
        let (mut channel, _) = recover_channel(&mut journal, None)
            .map_err(|e| format!("recovering from the journal: {e:#}"))?;
        for ident in Ident::ALL {
            channel
                .add_identity(ident.id(), ident.config(crate::world::Mode::InProcess))
                .map_err(|e| e.to_string())?;
        }
        let persist = JournalPersist::new(journal);
        let (engine, task) = self
            .rt
            .block_on(async { engine::spawn(channel, self.wire.clone(), persist, clock) });
        self.engine = engine;
        self.task = task;
        for input in world.restart_inputs().into_iter().skip(1) {
            self.submit(input)?;
        }
        Ok(())
    }

    /// Runs until the engine and the tasks it spawned are idle.
    fn settle(&self) {
        self.rt.block_on(async {
            let mut last = u64::MAX;
            loop {
                let _ = self.engine.read(|_| ()).await;
                for _ in 0..16 {
                    tokio::task::yield_now().await;
                }
                let _ = self.engine.read(|_| ()).await;
                let calls = self.wire.net.lock().unwrap().calls;
                if calls == last {
                    break;
                }
                last = calls;
            }
        });
    }

    /// The homeserver stores world event `i` and the sync hands it to the adapter,
    /// which must make it exactly the input the reference did.
    fn deliver_exactly(&self, world: &World, i: usize) -> Result<(), String> {
        let json = world.events[i].json();
        self.wire.net.lock().unwrap().events.push(json);
        self.hand_exactly(world, i)
    }

    /// The sync hands world event `i` as it is now to the adapter, which must make it
    /// exactly the input the reference did.
    fn hand_exactly(&self, world: &World, i: usize) -> Result<(), String> {
        let ev: &Ev = &world.events[i];
        let json = ev.json();
        let room = MemRoom {
            id: ev.room.clone(),
            wire: &self.wire,
        };
        let input = self.rt.block_on(timeline_input(
            &ev.ident.id(),
            &room,
            &json.to_string(),
            mc_model::DeviceTrust::PlaintextRoom,
        ));
        if ev.input.as_ref() != Some(&input) {
            return Err(format!(
                "the adapter made {json} into {input:?}, the reference {:?}",
                ev.input
            ));
        }
        self.submit(input)
    }

    /// What the server did since the last call.
    pub fn take_observed(&self) -> Vec<Observation> {
        self.settle();
        std::mem::take(&mut self.wire.net.lock().unwrap().observed)
    }

    /// The engine's model state.
    pub fn channel(&self) -> Channel {
        self.rt
            .block_on(self.engine.read(|c| c.clone()))
            .expect("the engine runs")
    }

    fn submit(&self, input: Input) -> Result<(), String> {
        self.engine.submit(input).map_err(|e| e.to_string())
    }

    /// The homeserver stores the world's latest event and the identity's sync hands
    /// it to the adapter.
    fn deliver(&self, world: &World) -> Result<(), String> {
        let ev: &Ev = world.events.last().ok_or("no event to deliver")?;
        let json = ev.json();
        {
            let mut net = self.wire.net.lock().unwrap();
            net.events.push(json.clone());
        }
        let room = MemRoom {
            id: ev.room.clone(),
            wire: &self.wire,
        };
        let input = self.rt.block_on(timeline_input(
            &ev.ident.id(),
            &room,
            &json.to_string(),
            mc_model::DeviceTrust::PlaintextRoom,
        ));
        match input {
            Input::NotInput { what, .. } => {
                Err(format!("the adapter took {json} as no input: {what}"))
            }
            input => self.submit(input),
        }
    }
}

impl Default for InProcess {
    fn default() -> Self {
        Self::new()
    }
}

impl Adapter for InProcess {
    fn attach(&mut self, _: &World, session: &Sess) -> Result<(), String> {
        self.wire.net.lock().unwrap().broken.remove(&session.id());
        self.submit(Input::Attach {
            identity: session.ident().id(),
            session: session.id(),
        })
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
        let ev = &world.events[t];
        let json = ev.json();
        let room = MemRoom {
            id: ev.room.clone(),
            wire: &self.wire,
        };
        let input = self.rt.block_on(timeline_input(
            &ev.ident.id(),
            &room,
            &json.to_string(),
            mc_model::DeviceTrust::PlaintextRoom,
        ));
        self.submit(input)
    }

    /// The homeserver stores the event and the sync hands it to the adapter, which
    /// must make it exactly the `Input::NotInput` the reference did.
    fn not_input(
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
