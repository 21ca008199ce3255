//! The engine: one task owns the model ([`mc_model::Channel`]), feeds it every input in
//! arrival order, persists its state after each transition that changed it, and turns
//! its effects into wire calls through a [`Wire`].
//!
//! No decision is taken here: every effect is executed as the model says, and every
//! outcome goes back to the model as [`Input::Completed`]. The match over
//! [`Effect`] is exhaustive, without a `_` arm, so a new effect fails to compile here
//! until it is executed.

use crate::journal::Journal;
use crate::write::{ToolError, Written};
use async_trait::async_trait;
use mc_model::{
    AgentWrite, CallId, Channel, DropReason, Effect, EffectId, EventId, IdentityId, Input, Millis,
    Outcome, PromptText, RoomId, SessionId,
};
use serde_json::Value;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// `notifications/claude/channel`: a push (Claude Code channel contract).
pub const CHANNEL_METHOD: &str = "notifications/claude/channel";
/// `notifications/claude/channel/permission`: a verdict.
pub const VERDICT_METHOD: &str = "notifications/claude/channel/permission";
/// `notifications/claude/channel/permission_request`: a request from a session.
pub const PERMISSION_REQUEST_METHOD: &str = "notifications/claude/channel/permission_request";

/// How long one notification write may take before it counts as failed.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(10);

/// The network, as the engine sees it. The server's implementation talks to MCP
/// sessions and Matrix; the conformance tests put in-memory queues here.
///
/// Errors are strings for the log: the model only needs to know that it failed.
#[async_trait]
pub trait Wire: Send + Sync + 'static {
    /// Sends a notification to one MCP session. `Ok` when it was handed to the
    /// session's stream.
    async fn notify(&self, session: &SessionId, method: &str, params: Value) -> Result<(), String>;
    /// Posts a prompt (`m.text` with HTML) as the identity; returns its event id.
    /// `txn_id` is stable for the effect, so a retry cannot post twice.
    async fn post_prompt(
        &self,
        identity: &IdentityId,
        room: &RoomId,
        text: &PromptText,
        txn_id: &str,
    ) -> Result<EventId, String>;
    /// Replaces a prompt's text (`m.replace`).
    async fn edit_prompt(
        &self,
        identity: &IdentityId,
        room: &RoomId,
        event_id: &EventId,
        text: &PromptText,
    ) -> Result<(), String>;
    /// Posts an `m.notice` replying to `in_reply_to`.
    async fn notice(
        &self,
        identity: &IdentityId,
        room: &RoomId,
        in_reply_to: &EventId,
        text: &str,
    ) -> Result<(), String>;
    /// Joins `room` as the identity (the model judged the invite).
    async fn join_room(&self, identity: &IdentityId, room: &RoomId) -> Result<(), String>;
    /// Performs an agent's write that the model let through, exactly as given.
    async fn write(&self, identity: &IdentityId, write: &AgentWrite) -> Result<Written, ToolError>;
    /// Sends an MCP logging message (`notifications/message`, level `warning`) to
    /// one session.
    async fn log_message(&self, session: &SessionId, message: &str) -> Result<(), String>;
}

/// How the model answered an agent's write ([`EngineHandle::write`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteAnswer {
    /// The model let it through and the homeserver took it.
    Done(Written),
    /// The model refused it (`Effect::WriteRefused`), for this reason.
    Refused(DropReason),
    /// The model let it through and performing it failed.
    Failed(ToolError),
}

pub use mc_adapters::params::{channel_params, verdict_params};

/// Milliseconds since the Unix epoch: the model's clock.
pub fn now_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}

enum Command {
    Input(Box<Input>),
    Read(Box<dyn FnOnce(&Channel) + Send>),
    Write {
        identity: IdentityId,
        write: Box<AgentWrite>,
        answer: oneshot::Sender<WriteAnswer>,
    },
    Acknowledge {
        input: Box<Input>,
        answer: oneshot::Sender<bool>,
    },
    /// Stop taking inputs, make the state durable, answer, and end the task.
    Shutdown(oneshot::Sender<()>),
}

/// A handle to the engine task; cheap to clone.
#[derive(Clone)]
pub struct EngineHandle {
    tx: mpsc::UnboundedSender<Command>,
    counters: std::sync::Arc<Counters>,
}

/// What the engine has done since it started, for `/health` and the benchmarks.
/// Times are microseconds of wall clock spent inside the engine task.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Inputs handed to the model (outcomes of effects included).
    pub inputs: u64,
    /// Time in the model's transitions (`Channel::handle`).
    pub handle_us: u64,
    /// Time making inputs or state durable ([`Persist`]).
    pub persist_us: u64,
}

#[derive(Default)]
struct Counters {
    inputs: std::sync::atomic::AtomicU64,
    handle_us: std::sync::atomic::AtomicU64,
    persist_us: std::sync::atomic::AtomicU64,
}

impl Counters {
    fn add(&self, handle: Duration, persist: Duration) {
        use std::sync::atomic::Ordering::Relaxed;
        self.inputs.fetch_add(1, Relaxed);
        self.handle_us.fetch_add(micros(handle), Relaxed);
        self.persist_us.fetch_add(micros(persist), Relaxed);
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl EngineHandle {
    /// The engine's counters so far (they only grow).
    pub fn stats(&self) -> EngineStats {
        use std::sync::atomic::Ordering::Relaxed;
        EngineStats {
            inputs: self.counters.inputs.load(Relaxed),
            handle_us: self.counters.handle_us.load(Relaxed),
            persist_us: self.counters.persist_us.load(Relaxed),
        }
    }

    /// Queues an input. Inputs are handled in the order they were submitted.
    /// Errors: the engine has stopped.
    pub fn submit(&self, input: Input) -> Result<(), EngineStopped> {
        self.tx
            .send(Command::Input(Box::new(input)))
            .map_err(|_| EngineStopped)
    }

    /// Hands an agent's write to the model as [`Input::AgentWrite`] and waits for its
    /// answer: refused by the model, or performed by the wire (its outcome also goes
    /// back to the model). The tool answers from this, never from the model's state.
    /// Errors: the engine has stopped.
    pub async fn write(
        &self,
        identity: IdentityId,
        write: AgentWrite,
    ) -> Result<WriteAnswer, EngineStopped> {
        let (answer, rx) = oneshot::channel();
        self.tx
            .send(Command::Write {
                identity,
                write: Box::new(write),
                answer,
            })
            .map_err(|_| EngineStopped)?;
        rx.await.map_err(|_| EngineStopped)
    }

    /// Hands an [`Input::Acknowledge`] to the model and answers from its transition:
    /// `true` when the model took it ([`Effect::Acknowledged`]), `false` when it
    /// dropped it (an event never pushed or queued for the identity, a session that
    /// is not the identity's). Other drops in the same transition (a timer of any
    /// identity that fired first) do not count.
    /// The tool answers from this, never from the model's state.
    /// Errors: the engine has stopped.
    pub async fn acknowledge(
        &self,
        identity: IdentityId,
        session: Option<SessionId>,
        event_id: EventId,
    ) -> Result<bool, EngineStopped> {
        let (answer, rx) = oneshot::channel();
        let input = Input::Acknowledge {
            identity,
            session,
            event_id,
        };
        self.tx
            .send(Command::Acknowledge {
                input: Box::new(input),
                answer,
            })
            .map_err(|_| EngineStopped)?;
        rx.await.map_err(|_| EngineStopped)
    }

    /// Stops the engine after every input submitted before this call: its state is
    /// made durable (the persisted state then needs no replay), the task ends, and
    /// later calls on any handle answer [`EngineStopped`]. Effects already handed to
    /// the wire finish in their own tasks; their outcomes are not recorded, so after
    /// the next start the model settles them as it does after a crash
    /// ([`Input::Restarted`]). Returns once the state is durable, or at once when the
    /// engine has already stopped.
    pub async fn shutdown(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Command::Shutdown(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    /// Reads the model's state after every input submitted before this call.
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Channel) -> T + Send + 'static,
    ) -> Result<T, EngineStopped> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Command::Read(Box::new(move |c| {
                let _ = tx.send(f(c));
            })))
            .map_err(|_| EngineStopped)?;
        rx.await.map_err(|_| EngineStopped)
    }
}

/// The engine task is gone (the server is shutting down).
#[derive(Debug, thiserror::Error)]
#[error("the engine has stopped")]
pub struct EngineStopped;

/// Where the engine keeps its state: every input is made durable before the model
/// acts on it ([`Persist::append`]), so a crash loses no input the engine took.
pub trait Persist: Send + Sync + 'static {
    /// Makes `input`, about to be handed to the model at `now`, durable. The engine
    /// acts on no input this did not take: on an error it logs it and stops.
    /// Errors: a reason for the log.
    fn append(&mut self, now: Millis, input: &Input) -> Result<(), String>;
    /// Makes `channel`, the state the engine starts from, durable: the inputs that
    /// follow are appended to it. Called once, before the first input.
    /// Errors: a reason for the log; the engine then takes no input.
    fn begin(&mut self, _channel: &Channel) -> Result<(), String> {
        Ok(())
    }
    /// Called after the model handled an input; `channel` is the state after it.
    fn handled(&mut self, _channel: &Channel) {}
    /// Makes `channel` durable before the engine stops.
    fn flush(&mut self, _channel: &Channel) {}
}

/// Persists into the journal ([`crate::journal`]): an append per input, a snapshot
/// when its policy asks and at a clean stop. (The mutex makes it `Sync`: only the
/// engine task ever locks it.)
pub struct JournalPersist(std::sync::Mutex<Journal>);

impl JournalPersist {
    pub fn new(journal: Journal) -> Self {
        JournalPersist(std::sync::Mutex::new(journal))
    }

    fn journal(&mut self) -> &mut Journal {
        self.0.get_mut().unwrap_or_else(|e| e.into_inner())
    }
}

impl Persist for JournalPersist {
    fn begin(&mut self, channel: &Channel) -> Result<(), String> {
        self.journal().snapshot(channel).map_err(|e| e.to_string())
    }

    fn append(&mut self, now: Millis, input: &Input) -> Result<(), String> {
        self.journal().append(now, input).map_err(|e| e.to_string())
    }

    fn handled(&mut self, channel: &Channel) {
        let journal = self.journal();
        if journal.snapshot_due() {
            if let Err(e) = journal.snapshot(channel) {
                tracing::error!(
                    "writing a snapshot of the model state failed (the journal keeps every \
                     input, and grows until a snapshot succeeds): {e}"
                );
            }
        }
    }

    fn flush(&mut self, channel: &Channel) {
        match self.journal().snapshot(channel) {
            Ok(()) => tracing::info!("the model state is snapshotted and the journal is empty"),
            Err(e) => tracing::error!(
                "the snapshot at shutdown failed: the next start replays the journal: {e}"
            ),
        }
    }
}

/// Keeps nothing (tests).
pub struct NoPersist;

impl Persist for NoPersist {
    fn append(&mut self, _: Millis, _: &Input) -> Result<(), String> {
        Ok(())
    }
}

/// At most this many Matrix sends (prompt posts, outcome edits, notices, the agent's
/// writes, joins) run at once, across every identity and room. matrix-sdk's own
/// adapters cap their concurrency at 20 (`buffer_unordered(20)`).
pub const MATRIX_SENDS_AT_ONCE: usize = 16;

type Job = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Ordered lanes of Matrix sends, one per (identity, room): a lane's sends run one
/// after another in the model's order (a notice after the prompt it answers), lanes
/// run side by side, and at most [`MATRIX_SENDS_AT_ONCE`] sends run at once.
struct RoomLanes {
    lanes: std::collections::BTreeMap<(IdentityId, RoomId), mpsc::UnboundedSender<Job>>,
    permits: std::sync::Arc<tokio::sync::Semaphore>,
}

impl RoomLanes {
    fn new() -> Self {
        RoomLanes {
            lanes: Default::default(),
            permits: std::sync::Arc::new(tokio::sync::Semaphore::new(MATRIX_SENDS_AT_ONCE)),
        }
    }

    fn run(&mut self, identity: &IdentityId, room: &RoomId, job: Job) {
        let key = (identity.clone(), room.clone());
        let job = match self.lanes.get(&key) {
            Some(lane) => match lane.send(job) {
                Ok(()) => return,
                Err(mpsc::error::SendError(job)) => job,
            },
            None => job,
        };
        let (lane, mut jobs) = mpsc::unbounded_channel::<Job>();
        let _ = lane.send(job);
        self.lanes.insert(key, lane);
        let permits = self.permits.clone();
        tokio::spawn(async move {
            while let Some(job) = jobs.recv().await {
                // The semaphore is never closed.
                let _permit = permits.acquire().await;
                job.await;
            }
        });
    }
}

/// What a session's queue writes: a notification whose outcome goes back to the
/// model, or a log message (no outcome).
enum Outbound {
    Notify {
        id: EffectId,
        method: &'static str,
        params: Value,
    },
    Log(String),
}

/// One ordered outbound queue per MCP session, each drained by its own task: the
/// engine never awaits a client, a slow or stuck client delays only its own
/// session, and what a session receives keeps the model's order.
///
/// Once a notification to a session fails, every notification queued behind it in
/// the same attachment fails at once without being written (the model then puts
/// them back in its queue in order, behind the failed one); notifications made
/// after the session attached again are written. The attachment is counted from
/// the model's own inputs ([`Input::Attach`]).
///
/// A detached session's queue is released ([`Input::Detach`]): its task writes what
/// was queued before the detach, then ends. A queue made for the same session later
/// starts writing only once that task has ended, so the order holds across a
/// re-attach, and a server that has seen many sessions keeps no task for each.
#[derive(Default)]
struct SessionQueues {
    queues: std::collections::BTreeMap<SessionId, SessionQueue>,
    /// The tasks of released queues, still writing what was queued before the detach.
    retiring: std::collections::BTreeMap<SessionId, tokio::task::JoinHandle<()>>,
}

struct SessionQueue {
    /// The session's attachments counted so far, the current one last.
    attachment: u64,
    items: mpsc::UnboundedSender<(u64, Outbound)>,
    task: tokio::task::JoinHandle<()>,
}

impl SessionQueues {
    fn attached(&mut self, session: &SessionId) {
        if let Some(queue) = self.queues.get_mut(session) {
            queue.attachment += 1;
        }
    }

    /// Releases `session`'s queue: its task ends once it has written what is queued.
    fn detached(&mut self, session: &SessionId) {
        self.retiring.retain(|_, task| !task.is_finished());
        if let Some(SessionQueue { items, task, .. }) = self.queues.remove(session) {
            drop(items);
            // A queue made after an earlier release waited for that one's task, so
            // this task is the last to end of the two: it is the one to wait for.
            self.retiring.insert(session.clone(), task);
        }
    }

    fn send<W: Wire>(
        &mut self,
        wire: &std::sync::Arc<W>,
        engine: &mpsc::UnboundedSender<Command>,
        session: SessionId,
        item: Outbound,
    ) {
        let retiring = &mut self.retiring;
        let queue = self.queues.entry(session.clone()).or_insert_with(|| {
            let (items, receiver) = mpsc::unbounded_channel();
            let before = retiring.remove(&session);
            let (wire, engine) = (wire.clone(), engine.clone());
            let task = tokio::spawn(async move {
                if let Some(before) = before {
                    let _ = before.await;
                }
                drain(wire, engine, session, receiver).await;
            });
            SessionQueue {
                attachment: 0,
                items,
                task,
            }
        });
        // The task ends only once the queue is released (`detached`).
        let _ = queue.items.send((queue.attachment, item));
    }
}

/// Writes one session's queue in order (see [`SessionQueues`]).
async fn drain<W: Wire>(
    wire: std::sync::Arc<W>,
    engine: mpsc::UnboundedSender<Command>,
    session: SessionId,
    mut items: mpsc::UnboundedReceiver<(u64, Outbound)>,
) {
    let mut failed_in: Option<u64> = None;
    while let Some((attachment, item)) = items.recv().await {
        match item {
            Outbound::Notify { id, method, params } => {
                let result = if failed_in == Some(attachment) {
                    Err("an earlier notification to the session failed".to_owned())
                } else {
                    notify(&*wire, &session, method, params).await
                };
                if result.is_err() {
                    failed_in = Some(attachment);
                }
                let _ = engine.send(Command::Input(Box::new(completed(id, result))));
            }
            Outbound::Log(message) => {
                if let Err(e) = wire.log_message(&session, &message).await {
                    tracing::warn!(%session, "sending a log message failed: {e}");
                }
            }
        }
    }
}

async fn notify<W: Wire>(
    wire: &W,
    session: &SessionId,
    method: &str,
    params: Value,
) -> Result<(), String> {
    match tokio::time::timeout(NOTIFY_TIMEOUT, wire.notify(session, method, params)).await {
        Ok(result) => result,
        Err(_) => Err(format!(
            "writing to the session took over {NOTIFY_TIMEOUT:?}"
        )),
    }
}

/// Starts the engine task. `clock` gives the model's time (milliseconds). The
/// engine first makes `channel` durable ([`Persist::begin`]: for the journal, a
/// snapshot), then its first input is [`Input::Restarted`]: the model itself settles what a
/// previous process left (it re-issues prompt posts, fails the rest, detaches
/// sessions).
pub fn spawn<W: Wire, P: Persist>(
    channel: Channel,
    wire: std::sync::Arc<W>,
    persist: P,
    clock: fn() -> Millis,
) -> (EngineHandle, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let counters = std::sync::Arc::<Counters>::default();
    let engine = Engine {
        tx: tx.clone(),
        counters: counters.clone(),
        calls: Default::default(),
        next_call: 0,
        channel,
        wire,
        persist,
        clock,
        stopped: false,
        sessions: SessionQueues::default(),
        rooms: RoomLanes::new(),
    };
    let task = tokio::spawn(async move {
        let mut engine = engine;
        if let Err(e) = engine.persist.begin(&engine.channel) {
            tracing::error!(
                "the journal cannot record the state the engine starts from ({e}): the \
                 engine takes no input"
            );
            return;
        }
        engine.step(Input::Restarted).await;
        engine.run(rx).await
    });
    (EngineHandle { tx, counters }, task)
}

struct Engine<W, P> {
    tx: mpsc::UnboundedSender<Command>,
    counters: std::sync::Arc<Counters>,
    /// Tool calls waiting for the model's answer to their write.
    calls: std::collections::BTreeMap<CallId, oneshot::Sender<WriteAnswer>>,
    next_call: u64,
    channel: Channel,
    wire: std::sync::Arc<W>,
    persist: P,
    clock: fn() -> Millis,
    /// The journal refused an input: the engine takes no more.
    stopped: bool,
    sessions: SessionQueues,
    rooms: RoomLanes,
}

impl<W: Wire, P: Persist> Engine<W, P> {
    /// Posts a prompt in its room's lane. The transaction id is the effect's id, so
    /// the post the model re-issues after a restart is the same transaction.
    fn spawn_post(&mut self, id: EffectId, identity: IdentityId, room: RoomId, text: PromptText) {
        let wire = self.wire.clone();
        let tx = self.tx.clone();
        let (who, at) = (identity.clone(), room.clone());
        self.rooms.run(
            &who,
            &at,
            Box::pin(async move {
                let txn_id = format!("mc-prompt-{}", id.0);
                let outcome = match wire.post_prompt(&identity, &room, &text, &txn_id).await {
                    Ok(event_id) => Outcome::Posted { event_id },
                    Err(reason) => Outcome::Failed { reason },
                };
                let _ = tx.send(Command::Input(Box::new(Input::Completed { id, outcome })));
            }),
        );
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) {
        loop {
            let sleep = match self.channel.next_deadline() {
                Some(at) => Duration::from_millis(at.saturating_sub((self.clock)())),
                None => Duration::from_secs(3600),
            };
            let command = tokio::select! {
                command = rx.recv() => match command {
                    Some(command) => command,
                    None => return,
                },
                _ = tokio::time::sleep(sleep) => Command::Input(Box::new(Input::Tick)),
            };
            if self.stopped {
                return;
            }
            match command {
                Command::Input(input) => {
                    self.step(*input).await;
                }
                Command::Acknowledge { input, answer } => {
                    let acknowledged = self.step(*input).await;
                    let _ = answer.send(acknowledged);
                }
                Command::Read(f) => f(&self.channel),
                Command::Shutdown(done) => {
                    self.persist.flush(&self.channel);
                    let _ = done.send(());
                    return;
                }
                Command::Write {
                    identity,
                    write,
                    answer,
                } => {
                    let call = CallId(self.next_call);
                    self.next_call += 1;
                    self.calls.insert(call, answer);
                    let input = Input::AgentWrite {
                        identity,
                        call,
                        write: *write,
                    };
                    self.step(input).await;
                }
            }
        }
    }

    /// Handles one input: makes it durable, hands it to the model, and hands its
    /// effects on; none is awaited here (their outcomes come back as inputs through
    /// the engine's queue). Returns whether the transition took an acknowledgement
    /// (an `Effect::Acknowledged` among its effects: the model's own answer).
    async fn step(&mut self, input: Input) -> bool {
        tracing::debug!(?input, "input");
        match &input {
            Input::Attach { session, .. } => self.sessions.attached(session),
            Input::Detach { session, .. } => self.sessions.detached(session),
            _ => {}
        }
        let now = (self.clock)();
        let started = std::time::Instant::now();
        if let Err(e) = self.persist.append(now, &input) {
            tracing::error!(
                "the journal did not take an input ({e}): the engine stops, so that \
                 nothing is acted on that a restart would not know"
            );
            self.stopped = true;
            return false;
        }
        let appended = std::time::Instant::now();
        let effects = self.channel.handle(now, input);
        let handled = std::time::Instant::now();
        self.persist.handled(&self.channel);
        self.counters
            .add(handled - appended, (appended - started) + handled.elapsed());
        let acknowledged = effects
            .iter()
            .any(|e| matches!(e, Effect::Acknowledged { .. }));
        for effect in effects {
            self.execute(effect);
        }
        acknowledged
    }

    /// Hands one effect on. Pushes, verdicts and log messages go to their session's
    /// queue ([`SessionQueues`]: in the model's order, written by the session's own
    /// task); Matrix sends go to their room's lane ([`RoomLanes`]). Outcomes come
    /// back through the engine's queue.
    fn execute(&mut self, effect: Effect) {
        match effect {
            Effect::Push {
                id,
                identity: _,
                session,
                event_id: _,
                notification,
            } => {
                let params = channel_params(&notification);
                let item = Outbound::Notify {
                    id,
                    method: CHANNEL_METHOD,
                    params,
                };
                self.sessions.send(&self.wire, &self.tx, session, item);
            }
            Effect::SendVerdict {
                id,
                identity: _,
                session,
                verdict,
            } => {
                let params = verdict_params(&verdict);
                let item = Outbound::Notify {
                    id,
                    method: VERDICT_METHOD,
                    params,
                };
                self.sessions.send(&self.wire, &self.tx, session, item);
            }
            Effect::PostPrompt {
                id,
                identity,
                room,
                request_id: _,
                text,
            } => self.spawn_post(id, identity, room, text),
            Effect::EditPrompt {
                identity,
                room,
                event_id,
                text,
            } => {
                let wire = self.wire.clone();
                let (who, at) = (identity.clone(), room.clone());
                self.rooms.run(
                    &who,
                    &at,
                    Box::pin(async move {
                        if let Err(e) = wire.edit_prompt(&identity, &room, &event_id, &text).await {
                            tracing::warn!(%identity, %event_id, "editing a prompt failed: {e}");
                        }
                    }),
                );
            }
            Effect::Notice {
                identity,
                room,
                in_reply_to,
                text,
            } => {
                let wire = self.wire.clone();
                let (who, at) = (identity.clone(), room.clone());
                self.rooms.run(
                    &who,
                    &at,
                    Box::pin(async move {
                        if let Err(e) = wire.notice(&identity, &room, &in_reply_to, &text).await {
                            tracing::warn!(%identity, "posting a notice failed: {e}");
                        }
                    }),
                );
            }
            Effect::Write {
                id,
                identity,
                call,
                write,
            } => {
                let answer = self.calls.remove(&call);
                let wire = self.wire.clone();
                let tx = self.tx.clone();
                let who = identity.clone();
                let at = write_lane(&write);
                self.rooms.run(
                    &who,
                    &at,
                    Box::pin(async move {
                        let result = wire.write(&identity, &write).await;
                        let outcome = match &result {
                            Ok(_) => Outcome::Sent,
                            Err(e) => Outcome::Failed {
                                reason: e.to_string(),
                            },
                        };
                        tracing::info!(%identity, %call, write = write.kind(), ?outcome, "agent write");
                        let _ = tx.send(Command::Input(Box::new(Input::Completed { id, outcome })));
                        if let Some(answer) = answer {
                            let _ = answer.send(match result {
                                Ok(written) => WriteAnswer::Done(written),
                                Err(e) => WriteAnswer::Failed(e),
                            });
                        }
                    }),
                );
            }
            Effect::JoinRoom { id, identity, room } => {
                let wire = self.wire.clone();
                let tx = self.tx.clone();
                let (who, at) = (identity.clone(), room.clone());
                self.rooms.run(
                    &who,
                    &at,
                    Box::pin(async move {
                        let result = wire.join_room(&identity, &room).await;
                        if let Err(e) = &result {
                            tracing::warn!(%identity, %room, "joining on an invite failed: {e}");
                        }
                        let _ = tx.send(Command::Input(Box::new(completed(id, result))));
                    }),
                );
            }
            Effect::WriteRefused {
                identity,
                call,
                reason,
            } => {
                tracing::info!(%identity, %call, ?reason, "agent write refused");
                if let Some(answer) = self.calls.remove(&call) {
                    let _ = answer.send(WriteAnswer::Refused(reason));
                }
            }
            Effect::LogMessage {
                identity,
                session,
                message,
            } => {
                tracing::warn!(%identity, %session, "{message}");
                self.sessions
                    .send(&self.wire, &self.tx, session, Outbound::Log(message));
            }
            Effect::Decided {
                identity,
                session,
                request_id,
                decision,
                at,
            } => {
                tracing::info!(
                    %identity, %session, request_id = request_id.as_str(),
                    behavior = decision.behavior.as_str(), by = %decision.by, at,
                    via = ?decision.via, "verdict"
                );
            }
            Effect::Acknowledged {
                identity,
                session,
                event_id,
            } => {
                tracing::debug!(%identity, session = ?session, %event_id, "acknowledged");
            }
            Effect::Dropped {
                identity,
                event_id,
                reason,
            } => {
                tracing::info!(identity = ?identity, event_id = ?event_id, reason = ?reason, "not acted on");
            }
        }
    }
}

/// The room lane an agent's write runs in: its room (for a join, the id or alias it
/// names).
fn write_lane(write: &AgentWrite) -> RoomId {
    match write {
        AgentWrite::Message { room, .. }
        | AgentWrite::Edit { room, .. }
        | AgentWrite::Reaction { room, .. }
        | AgentWrite::Redaction { room, .. }
        | AgentWrite::Receipt { room, .. }
        | AgentWrite::Leave { room }
        | AgentWrite::Invite { room, .. } => room.clone(),
        AgentWrite::Join { room } => RoomId(room.clone()),
    }
}

fn completed(id: EffectId, result: Result<(), String>) -> Input {
    Input::Completed {
        id,
        outcome: match result {
            Ok(()) => Outcome::Sent,
            Err(reason) => Outcome::Failed { reason },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_model::{
        IdentityConfig, Message, MessageContent, MsgType, PermissionRequest, RequestId,
        SessionState, UserId,
    };
    use serde_json::json;
    // `DropReason` and the write types come from `super::*`.
    use std::sync::{Arc, Mutex};

    const ALICE: &str = "@alice:hs";

    /// Records every wire call; fails notifications to sessions in `failing`, and
    /// agent writes while `write_fails` is set.
    #[derive(Default)]
    struct FakeWire {
        calls: Mutex<Vec<String>>,
        notified: Mutex<Vec<(String, String, Value)>>,
        failing: Mutex<Vec<String>>,
        /// Notifications to these sessions never complete (a client that stopped
        /// reading), after recording `hung <session>` in `calls`.
        hanging: Mutex<Vec<String>>,
        /// The next notification to each of these sessions fails, once.
        fail_once: Mutex<Vec<String>>,
        write_fails: Mutex<bool>,
        /// The next notification to this session waits for a permit of the semaphore.
        gate: Mutex<Option<(String, Arc<tokio::sync::Semaphore>)>>,
    }

    #[async_trait]
    impl Wire for FakeWire {
        async fn notify(
            &self,
            session: &SessionId,
            method: &str,
            params: Value,
        ) -> Result<(), String> {
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
        async fn write(
            &self,
            identity: &IdentityId,
            write: &AgentWrite,
        ) -> Result<Written, ToolError> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("write {identity} {}", write.kind()));
            if *self.write_fails.lock().unwrap() {
                return Err(ToolError::Upstream("the homeserver is down".into()));
            }
            Ok(Written {
                event_ids: vec!["$written".into()],
                room_id: None,
            })
        }
        async fn log_message(&self, session: &SessionId, message: &str) -> Result<(), String> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("log {session} {message}"));
            Ok(())
        }
        async fn join_room(&self, identity: &IdentityId, room: &RoomId) -> Result<(), String> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("join {identity} {room}"));
            Ok(())
        }
    }

    fn clock() -> Millis {
        1_700_000_000_000
    }

    fn channel() -> Channel {
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
    fn joined(room: &str) -> Input {
        Input::Membership {
            identity: id(),
            room: RoomId(room.into()),
            event_id: None,
            user: UserId("@bot:hs".into()),
            membership: mc_model::Membership::Joined,
        }
    }

    fn id() -> IdentityId {
        IdentityId("bot".into())
    }

    fn attach(session: &str) -> Input {
        Input::Attach {
            identity: id(),
            session: SessionId(session.into()),
        }
    }

    /// A `permission_request` for Bash from `session`.
    fn ask(session: &str, request_id: &str) -> Input {
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

    fn say(event: &str, body: &str) -> Input {
        Input::Message {
            identity: id(),
            message: Message {
                room: RoomId("!r:hs".into()),
                event_id: EventId(event.into()),
                sender: UserId(ALICE.into()),
                sender_name: Some("Alice".into()),
                origin_server_ts: 5,
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

    /// Waits until the engine has handled everything submitted so far, including
    /// outcomes its spawned tasks report.
    async fn settle(engine: &EngineHandle) {
        for _ in 0..5 {
            engine.read(|_| ()).await.unwrap();
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_message_is_pushed_with_the_models_params_and_its_outcome_goes_back() {
        let wire = Arc::new(FakeWire::default());
        let (engine, _task) = spawn(channel(), wire.clone(), NoPersist, clock);
        engine.submit(attach("s1")).unwrap();
        engine.submit(say("$m1", "hello")).unwrap();
        settle(&engine).await;
        let notified = wire.notified.lock().unwrap().clone();
        assert_eq!(notified.len(), 1);
        let (session, method, params) = &notified[0];
        assert_eq!((session.as_str(), method.as_str()), ("s1", CHANNEL_METHOD));
        assert_eq!(params["content"], json!("hello"));
        assert_eq!(params["meta"]["event_id"], json!("$m1"));
        assert_eq!(params["meta"]["sender"], json!(ALICE));
        let in_flight = engine.read(|c| c.in_flight()).await.unwrap();
        assert_eq!(in_flight, 0, "the Sent outcome was fed back");
        // Restarted, Attach, the message and the push's outcome.
        assert_eq!(engine.stats().inputs, 4);
    }

    #[tokio::test]
    async fn a_failed_push_detaches_the_session_and_queues_the_event() {
        let wire = Arc::new(FakeWire::default());
        wire.failing.lock().unwrap().push("s1".into());
        let (engine, _task) = spawn(channel(), wire.clone(), NoPersist, clock);
        engine.submit(attach("s1")).unwrap();
        engine.submit(say("$m1", "hello")).unwrap();
        settle(&engine).await;
        let (queued, state) = engine
            .read(|c| {
                let s = c.identity(&id()).unwrap();
                (s.queue().len(), s.sessions()[&SessionId("s1".into())])
            })
            .await
            .unwrap();
        assert_eq!(queued, 1);
        assert_eq!(state, SessionState::Detached);
        wire.failing.lock().unwrap().clear();
        engine.submit(attach("s1")).unwrap();
        settle(&engine).await;
        let notified = wire.notified.lock().unwrap().clone();
        assert_eq!(notified.len(), 1, "replayed once on re-attach");
        assert_eq!(notified[0].2["meta"]["replayed"], json!("true"));
    }

    #[tokio::test]
    async fn pushes_to_a_session_keep_the_models_order() {
        let wire = Arc::new(FakeWire::default());
        let (engine, _task) = spawn(channel(), wire.clone(), NoPersist, clock);
        for i in 0..20 {
            engine
                .submit(say(&format!("$m{i}"), &format!("n{i}")))
                .unwrap();
        }
        engine.submit(attach("s1")).unwrap();
        for i in 20..40 {
            engine
                .submit(say(&format!("$m{i}"), &format!("n{i}")))
                .unwrap();
        }
        settle(&engine).await;
        let bodies: Vec<String> = wire
            .notified
            .lock()
            .unwrap()
            .iter()
            .map(|(_, _, p)| p["content"].as_str().unwrap().to_string())
            .collect();
        let expected: Vec<String> = (0..40).map(|i| format!("n{i}")).collect();
        assert_eq!(bodies, expected);
    }

    #[tokio::test]
    async fn a_prompt_is_posted_with_a_stable_txn_id_and_a_text_verdict_goes_to_the_asker() {
        let wire = Arc::new(FakeWire::default());
        let (engine, _task) = spawn(channel(), wire.clone(), NoPersist, clock);
        engine.submit(attach("s1")).unwrap();
        engine.submit(attach("s2")).unwrap();
        engine.submit(say("$m1", "hi")).unwrap();
        engine.submit(ask("s1", "abcde")).unwrap();
        settle(&engine).await;
        let calls = wire.calls.lock().unwrap().clone();
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert!(
            calls[0].starts_with("post bot !r:hs mc-prompt-"),
            "{calls:?}"
        );
        wire.notified.lock().unwrap().clear();
        engine.submit(say("$yes", "yes abcde")).unwrap();
        settle(&engine).await;
        let notified = wire.notified.lock().unwrap().clone();
        assert_eq!(
            notified,
            [(
                "s1".to_string(),
                VERDICT_METHOD.to_string(),
                json!({"request_id": "abcde", "behavior": "allow"})
            )]
        );
        settle(&engine).await;
        let calls = wire.calls.lock().unwrap().clone();
        assert_eq!(calls.last().unwrap(), "edit bot !r:hs $prompt");
    }

    #[tokio::test]
    async fn a_due_timer_fires_without_any_input() {
        // A prompt with a 1 ms time to live, on a real clock: the engine's own timer
        // expires it and edits the prompt.
        let wire = Arc::new(FakeWire::default());
        let mut channel = Channel::new();
        let mut config = IdentityConfig::new(UserId("@bot:hs".into()), [UserId(ALICE.into())]);
        config.prompt_ttl_ms = 50;
        config.settle_ms = 10;
        config.permission_room = Some(RoomId("!r:hs".into()));
        channel.add_identity(id(), config).unwrap();
        channel.handle(now_ms(), joined("!r:hs"));
        let (engine, _task) = spawn(channel, wire.clone(), NoPersist, now_ms);
        engine.submit(attach("s1")).unwrap();
        engine.submit(ask("s1", "abcde")).unwrap();
        let mut edited = false;
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if wire
                .calls
                .lock()
                .unwrap()
                .iter()
                .any(|c| c.starts_with("edit"))
            {
                edited = true;
                break;
            }
        }
        assert!(edited, "{:?}", wire.calls.lock().unwrap());
        let prompts = engine
            .read(|c| c.identity(&id()).unwrap().prompts().len())
            .await
            .unwrap();
        assert_eq!(prompts, 0);
    }

    #[tokio::test]
    async fn a_prompt_post_cut_by_a_restart_is_finished_with_the_same_txn_id() {
        // The old process handled the request (the post is in flight in the saved
        // state), then died before its outcome; a session was live and a push was
        // in flight too.
        let mut channel = channel();
        channel.handle(clock(), attach("s1"));
        channel.handle(clock(), say("$m1", "hi"));
        let effects = channel.handle(clock(), ask("s1", "abcde"));
        let post = effects
            .iter()
            .find_map(|e| match e {
                Effect::PostPrompt { id, .. } => Some(*id),
                _ => None,
            })
            .unwrap();
        channel.handle(clock(), say("$m2", "in flight"));
        assert_eq!(
            channel.in_flight(),
            3,
            "the first push, the post, the second push"
        );
        let wire = Arc::new(FakeWire::default());
        let (engine, _task) = spawn(channel, wire.clone(), NoPersist, clock);
        settle(&engine).await;
        assert_eq!(
            wire.calls.lock().unwrap().clone(),
            [format!("post bot !r:hs mc-prompt-{}", post.0)]
        );
        let (answerable, live, queued) = engine
            .read(|c| {
                let s = c.identity(&id()).unwrap();
                (
                    s.prompts()[0].phase.is_answerable(),
                    s.sessions()[&SessionId("s1".into())],
                    s.queue().len(),
                )
            })
            .await
            .unwrap();
        assert!(answerable, "the post's outcome reached the model");
        assert_eq!(
            live,
            SessionState::Detached,
            "the old process's stream is gone"
        );
        assert_eq!(queued, 2, "both pushes in flight went back to the queue");
        assert!(
            wire.notified.lock().unwrap().is_empty(),
            "nothing was pushed"
        );
    }

    fn react(event_id: &str) -> AgentWrite {
        AgentWrite::Reaction {
            room: RoomId("!r:hs".into()),
            relates_to: EventId(event_id.into()),
            key: "👍".into(),
        }
    }

    #[tokio::test]
    async fn an_acknowledgement_is_answered_from_its_transition() {
        let wire = Arc::new(FakeWire::default());
        let (engine, _task) = spawn(channel(), wire.clone(), NoPersist, clock);
        engine.submit(attach("s1")).unwrap();
        engine.submit(say("$m1", "hi")).unwrap();
        settle(&engine).await;
        let ack = |session: Option<&str>, event: &str| {
            engine.acknowledge(
                id(),
                session.map(|s| SessionId(s.into())),
                EventId(event.into()),
            )
        };
        assert!(ack(Some("s1"), "$m1").await.unwrap(), "a pushed event");
        assert!(ack(None, "$m1").await.unwrap(), "again, through the tools");
        assert!(!ack(None, "$never").await.unwrap(), "never pushed: dropped");
        assert!(
            !ack(Some("s9"), "$m1").await.unwrap(),
            "not the identity's session: dropped"
        );
    }

    /// The clock of `an_acknowledgement_is_answered_from_its_own_effect`, moved by it alone.
    static ACK_CLOCK: std::sync::atomic::AtomicU64 =
        std::sync::atomic::AtomicU64::new(1_700_000_000_000);

    fn ack_clock() -> Millis {
        ACK_CLOCK.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[tokio::test]
    async fn an_acknowledgement_is_answered_from_its_own_effect_not_from_a_timer_in_its_transition()
    {
        let wire = Arc::new(FakeWire::default());
        let (engine, _task) = spawn(channel(), wire.clone(), NoPersist, ack_clock);
        engine.submit(attach("s1")).unwrap();
        engine.submit(say("$m1", "hi")).unwrap();
        engine.submit(ask("s1", "abcde")).unwrap();
        settle(&engine).await;
        // The prompt's time to live passes: its expiry (a drop) fires first in the
        // acknowledgement's own transition.
        let ttl = engine
            .read(|c| c.identity(&id()).unwrap().config().prompt_ttl_ms)
            .await
            .unwrap();
        ACK_CLOCK.fetch_add(ttl, std::sync::atomic::Ordering::SeqCst);
        let acked = engine
            .acknowledge(id(), Some(SessionId("s1".into())), EventId("$m1".into()))
            .await
            .unwrap();
        let prompts = engine
            .read(|c| c.identity(&id()).unwrap().prompts().len())
            .await
            .unwrap();
        assert_eq!(prompts, 0, "the prompt expired in the same transition");
        assert!(acked, "the model took the acknowledgement");
    }

    #[tokio::test]
    async fn an_agent_write_is_answered_from_its_outcome_and_a_prompt_is_never_touched() {
        let wire = Arc::new(FakeWire::default());
        let (engine, _task) = spawn(channel(), wire.clone(), NoPersist, clock);
        engine.submit(attach("s1")).unwrap();
        engine.submit(say("$m1", "hi")).unwrap();
        engine.submit(ask("s1", "abcde")).unwrap();
        settle(&engine).await;
        let answer = engine.write(id(), react("$prompt")).await.unwrap();
        assert_eq!(answer, WriteAnswer::Refused(DropReason::PromptTarget));
        let answer = engine.write(id(), react("$m1")).await.unwrap();
        assert_eq!(
            answer,
            WriteAnswer::Done(Written {
                event_ids: vec!["$written".into()],
                room_id: None
            })
        );
        *wire.write_fails.lock().unwrap() = true;
        let answer = engine.write(id(), react("$m1")).await.unwrap();
        assert_eq!(
            answer,
            WriteAnswer::Failed(ToolError::Upstream("the homeserver is down".into()))
        );
        settle(&engine).await;
        let writes: Vec<String> = wire
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.starts_with("write"))
            .cloned()
            .collect();
        assert_eq!(writes, ["write bot reaction", "write bot reaction"]);
        assert_eq!(
            engine.read(|c| c.in_flight()).await.unwrap(),
            0,
            "both outcomes went back to the model"
        );
        let refused = engine
            .write(IdentityId("nobody".into()), react("$m1"))
            .await
            .unwrap();
        assert_eq!(refused, WriteAnswer::Refused(DropReason::UnknownIdentity));
    }

    #[tokio::test]
    async fn an_allowed_senders_invite_is_joined_by_the_wire_and_a_strangers_is_not() {
        let wire = Arc::new(FakeWire::default());
        let (engine, _task) = spawn(channel(), wire.clone(), NoPersist, clock);
        for (room, by) in [("!a:hs", ALICE), ("!b:hs", "@eve:hs")] {
            engine
                .submit(Input::Membership {
                    identity: id(),
                    room: RoomId(room.into()),
                    event_id: None,
                    user: UserId("@bot:hs".into()),
                    membership: mc_model::Membership::Invited {
                        by: UserId(by.into()),
                    },
                })
                .unwrap();
        }
        let mut calls = Vec::new();
        for _ in 0..50 {
            settle(&engine).await;
            calls = wire.calls.lock().unwrap().clone();
            if !calls.is_empty() {
                break;
            }
        }
        assert_eq!(calls, ["join bot !a:hs"]);
        assert_eq!(
            engine.read(|c| c.in_flight()).await.unwrap(),
            0,
            "the join's outcome went back"
        );
    }

    #[tokio::test]
    async fn an_unreadable_permission_request_is_told_to_its_session_and_posts_nothing() {
        let wire = Arc::new(FakeWire::default());
        let (engine, _task) = spawn(channel(), wire.clone(), NoPersist, clock);
        engine.submit(attach("s1")).unwrap();
        engine
            .submit(Input::InvalidPermissionRequest {
                identity: id(),
                session: SessionId("s1".into()),
                error: "request_id: bad".into(),
            })
            .unwrap();
        let mut calls = Vec::new();
        for _ in 0..50 {
            settle(&engine).await;
            calls = wire.calls.lock().unwrap().clone();
            if !calls.is_empty() {
                break;
            }
        }
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert!(
            calls[0].starts_with(
                "log s1 matrix-channel did not relay a permission_request: request_id: bad."
            ),
            "{calls:?}"
        );
    }

    #[test]
    fn the_models_clock_is_the_unix_time_in_milliseconds() {
        assert!(now_ms() > 1_700_000_000_000);
    }

    /// Logs every append as `append <input type> after <n> pushes`, and refuses
    /// appends once `refuse_from` were taken.
    struct LogPersist {
        wire: Arc<FakeWire>,
        log: Arc<Mutex<Vec<String>>>,
        refuse_from: Option<usize>,
    }

    impl Persist for LogPersist {
        fn append(&mut self, _: Millis, input: &Input) -> Result<(), String> {
            let mut log = self.log.lock().unwrap();
            if self.refuse_from.is_some_and(|n| log.len() >= n) {
                return Err("disk full".into());
            }
            let value = serde_json::to_value(input).unwrap();
            let pushes = self.wire.notified.lock().unwrap().len();
            log.push(format!(
                "append {} after {pushes} pushes",
                value["type"].as_str().unwrap()
            ));
            Ok(())
        }
    }

    #[tokio::test]
    async fn every_input_reaches_the_journal_before_the_model_acts_on_it() {
        let wire = Arc::new(FakeWire::default());
        let log = Arc::new(Mutex::new(Vec::new()));
        let persist = LogPersist {
            wire: wire.clone(),
            log: log.clone(),
            refuse_from: None,
        };
        let (engine, _task) = spawn(channel(), wire.clone(), persist, clock);
        engine.submit(attach("s1")).unwrap();
        engine.submit(say("$m1", "hello")).unwrap();
        settle(&engine).await;
        assert_eq!(
            *log.lock().unwrap(),
            [
                "append restarted after 0 pushes",
                "append attach after 0 pushes",
                "append message after 0 pushes",
                "append completed after 1 pushes",
            ]
        );
    }

    #[tokio::test]
    async fn an_input_the_journal_refuses_is_not_acted_on_and_the_engine_stops() {
        let wire = Arc::new(FakeWire::default());
        let log = Arc::new(Mutex::new(Vec::new()));
        let persist = LogPersist {
            wire: wire.clone(),
            log: log.clone(),
            refuse_from: Some(2),
        };
        let (engine, task) = spawn(channel(), wire.clone(), persist, clock);
        engine.submit(attach("s1")).unwrap();
        engine.submit(say("$m1", "hello")).unwrap();
        let _ = engine.read(|_| ()).await;
        task.await.unwrap();
        assert!(wire.notified.lock().unwrap().is_empty(), "nothing pushed");
        assert_eq!(log.lock().unwrap().len(), 2, "Restarted and Attach only");
        assert!(engine.read(|_| ()).await.is_err(), "the engine stopped");
    }

    /// The (session, event id) of every push the wire wrote, in order.
    fn pushed(wire: &FakeWire) -> Vec<(String, Value)> {
        wire.notified
            .lock()
            .unwrap()
            .iter()
            .map(|(session, _, params)| (session.clone(), params["meta"]["event_id"].clone()))
            .collect()
    }

    struct TempDir(std::path::PathBuf);
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn journal_in(dir: &TempDir) -> JournalPersist {
        JournalPersist::new(Journal::open(&dir.0, Default::default()).unwrap())
    }

    /// SIGKILL: the engine task ends where it is; the next one starts from what the
    /// journal holds, as `serve` does.
    async fn crash_and_restart(
        dir: &TempDir,
        task: tokio::task::JoinHandle<()>,
        wire: Arc<FakeWire>,
    ) -> (EngineHandle, tokio::task::JoinHandle<()>) {
        task.abort();
        let _ = task.await;
        let mut journal = Journal::open(&dir.0, Default::default()).unwrap();
        let (channel, recovery) = crate::journal::recover_channel(&mut journal, None).unwrap();
        assert_eq!(recovery.set_aside, 0);
        spawn(channel, wire, JournalPersist::new(journal), clock)
    }

    #[tokio::test]
    async fn a_crash_after_an_input_is_journaled_delivers_its_push_exactly_once_after_restart() {
        let dir =
            TempDir(std::env::temp_dir().join(format!("mc-journal-{}", rand::random::<u64>())));
        // The first process pushes $m1 to s1, whose client never reads: the push is
        // cut by the crash, after the message reached the journal.
        let hung = Arc::new(FakeWire::default());
        hung.hanging.lock().unwrap().push("s1".into());
        let (engine, task) = spawn(channel(), hung.clone(), journal_in(&dir), clock);
        engine.submit(attach("s1")).unwrap();
        engine.submit(say("$m1", "hello")).unwrap();
        while !hung.calls.lock().unwrap().contains(&"hung s1".to_owned()) {
            tokio::task::yield_now().await;
        }
        // The second process: the message is owed, and pushed once to the next session.
        let wire = Arc::new(FakeWire::default());
        let (engine, task) = crash_and_restart(&dir, task, wire.clone()).await;
        engine.submit(attach("s2")).unwrap();
        settle(&engine).await;
        let pushed = pushed(&wire);
        assert_eq!(pushed, [("s2".to_owned(), json!("$m1"))]);
        // The third process: that push's outcome was journaled, so nothing is owed.
        let wire = Arc::new(FakeWire::default());
        let (engine, _task) = crash_and_restart(&dir, task, wire.clone()).await;
        engine.submit(attach("s3")).unwrap();
        settle(&engine).await;
        assert!(wire.notified.lock().unwrap().is_empty(), "pushed twice");
    }

    /// `input` retargeted at the identity `bot2` and its room `!r2:hs`.
    fn for_bot2(input: Input) -> Input {
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

    #[tokio::test]
    async fn a_session_that_stops_reading_delays_no_other_session() {
        let mut channel = channel();
        let mut config = IdentityConfig::new(UserId("@bot2:hs".into()), [UserId(ALICE.into())]);
        config.attach_grace_ms = 0;
        channel
            .add_identity(IdentityId("bot2".into()), config)
            .unwrap();
        channel.handle(clock(), for_bot2(joined("!r2:hs")));
        let wire = Arc::new(FakeWire::default());
        wire.hanging.lock().unwrap().push("s1".into());
        let (engine, _task) = spawn(channel, wire.clone(), NoPersist, clock);
        engine.submit(attach("s1")).unwrap();
        engine.submit(for_bot2(attach("s2"))).unwrap();
        // s1's client never reads: its push hangs (the timeout is 10 s)...
        engine.submit(say("$m1", "to the stuck one")).unwrap();
        // ...while bot2's session gets its push, and the engine answers reads.
        engine.submit(for_bot2(say("$m2", "to the other"))).unwrap();
        settle(&engine).await;
        let pushed = pushed(&wire);
        assert_eq!(pushed, [("s2".to_owned(), json!("$m2"))]);
        assert!(wire.calls.lock().unwrap().contains(&"hung s1".to_owned()));
        assert_eq!(
            engine.read(|c| c.in_flight()).await.unwrap(),
            1,
            "s1's push is still being written, s2's outcome came back"
        );
    }

    #[tokio::test]
    async fn behind_a_failed_push_the_sessions_queued_pushes_fail_unwritten_and_come_back_in_order()
    {
        let wire = Arc::new(FakeWire::default());
        let (engine, _task) = spawn(channel(), wire.clone(), NoPersist, clock);
        // Only the first write to s1 fails: the two queued behind it must not be
        // written after it, or s1 would see $m2 and $m3 without $m1.
        wire.fail_once.lock().unwrap().push("s1".into());
        engine.submit(attach("s1")).unwrap();
        for i in 1..=3 {
            engine.submit(say(&format!("$m{i}"), "hello")).unwrap();
        }
        settle(&engine).await;
        engine.submit(attach("s2")).unwrap();
        settle(&engine).await;
        let pushed = pushed(&wire);
        assert_eq!(
            pushed,
            [
                ("s2".to_owned(), json!("$m1")),
                ("s2".to_owned(), json!("$m2")),
                ("s2".to_owned(), json!("$m3")),
            ]
        );
    }

    #[tokio::test]
    async fn a_detached_sessions_queue_ends_once_written_and_a_new_one_waits_for_it() {
        let wire = Arc::new(FakeWire::default());
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        *wire.gate.lock().unwrap() = Some(("s1".into(), gate.clone()));
        let (engine, mut completions) = mpsc::unbounded_channel();
        let mut queues = SessionQueues::default();
        let s1 = SessionId("s1".into());
        let item = |n: u64| Outbound::Notify {
            id: EffectId(n),
            method: "notifications/claude/channel",
            params: json!({ "n": n }),
        };
        queues.send(&wire, &engine, s1.clone(), item(1));
        queues.detached(&s1);
        assert!(
            queues.queues.is_empty(),
            "a detached session keeps no queue"
        );
        // The session comes back while its first push is still being written.
        queues.send(&wire, &engine, s1.clone(), item(2));
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(wire.notified.lock().unwrap().is_empty());
        gate.add_permits(1);
        for _ in 0..2 {
            completions.recv().await.expect("an outcome");
        }
        let order: Vec<Value> = wire
            .notified
            .lock()
            .unwrap()
            .iter()
            .map(|(_, _, params)| params["n"].clone())
            .collect();
        assert_eq!(
            order,
            [json!(1), json!(2)],
            "the order holds across a re-attach"
        );
        // Released and written: no task is left for the session.
        queues.detached(&s1);
        let task = queues
            .retiring
            .remove(&s1)
            .expect("the released queue's task");
        tokio::time::timeout(std::time::Duration::from_secs(5), task)
            .await
            .expect("a released queue's task ends once its queue is written")
            .unwrap();
        assert!(queues.queues.is_empty());
    }
}
