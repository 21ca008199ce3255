//! The engine: one task owns the model ([`mc_model::Channel`]), feeds it every input
//! in arrival order, makes each input durable (with its audit entries) before any of
//! its effects is executed, and turns the model's effects into wire calls through a
//! [`Wire`].
//!
//! Every channel and relay decision is the model's: which effect is made, for which
//! session or room, and what an outcome changes. The engine executes every effect
//! as the model says (the match over [`Effect`](mc_model::Effect) is exhaustive, without a `_` arm, so
//! a new effect fails to compile until it is executed) and hands every outcome back
//! as [`Input::Completed`]. What it decides on its own is how effects are executed:
//!
//! - order: a session's notifications are written in the model's order by the
//!   session's own task; Matrix sends run in the model's order per identity and room,
//!   lanes side by side, at most [`MATRIX_SENDS_AT_ONCE`] at once;
//! - queue failure: once a notification to a session fails, the ones queued behind it
//!   in the same attachment fail without being written (their outcomes tell the
//!   model, which puts them back in order);
//! - a notification write that takes over 10 s fails;
//! - an input the journal does not take stops the engine, so nothing is acted on
//!   that a restart would not know;
//! - the model is handed [`Input::Tick`] at its next deadline.
//!
//! The pure parts of these rules are [`mc_adapters::effects`]. Modules: `queues`
//! (session queues, room lanes), `persist` ([`Persist`] and its two kinds), `run` (the
//! engine task: [`spawn`], its loop, the execution of each effect).

mod persist;
mod queues;
mod run;

pub use persist::{JournalPersist, NoPersist, Persist};
pub use queues::MATRIX_SENDS_AT_ONCE;
pub use run::spawn;

use crate::write::{ToolError, Written};
use async_trait::async_trait;
use mc_model::{
    AgentWrite, Channel, DropReason, EventId, IdentityId, Input, Label, PromptText, RoomId,
    SessionId, Timestamp, UserId,
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
    /// Posts an `m.notice` that replies to nothing, with `text`'s HTML as its
    /// `formatted_body` (`Effect::Announce`).
    async fn announce(
        &self,
        identity: &IdentityId,
        room: &RoomId,
        text: &PromptText,
    ) -> Result<(), String>;
    /// Joins `room` as the identity (the model judged the invite).
    async fn join_room(&self, identity: &IdentityId, room: &RoomId) -> Result<(), String>;
    /// Shows the identity typing in `room` for [`mc_model::TYPING_TIMEOUT_MS`], or
    /// stops showing it (`PUT /rooms/{roomId}/typing/{userId}`).
    async fn typing(
        &self,
        identity: &IdentityId,
        room: &RoomId,
        typing: bool,
    ) -> Result<(), String>;
    /// Creates a room as the identity for a label (`Effect::CreateRoom`): private,
    /// named `name`, `invite` invited, end-to-end encrypted from its first event when
    /// the identity can encrypt. Returns the new room's id. A wire that creates no
    /// rooms (the default) fails every creation.
    async fn create_room(
        &self,
        identity: &IdentityId,
        name: &str,
        invite: &[UserId],
    ) -> Result<RoomId, String> {
        let _ = (identity, name, invite);
        Err("this wire creates no rooms".to_owned())
    }
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

pub use mc_adapters::effects::BindAnswer;
pub use mc_adapters::params::{channel_params, verdict_params};

/// The wall clock as the model's instant: milliseconds since the Unix epoch (0 if
/// the system clock is before it).
pub fn now_ms() -> Timestamp {
    Timestamp(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
    )
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
    /// An operator's [`Input::Bind`]; dropping `answer` unanswered (the journal did
    /// not take the input) is [`EngineStopped`].
    Bind {
        identity: IdentityId,
        label: Label,
        room: Option<RoomId>,
        answer: oneshot::Sender<BindAnswer>,
    },
    /// An operator's [`Input::Revoke`]; answered with the grants it ended.
    Revoke {
        identity: IdentityId,
        grant: Option<u64>,
        answer: oneshot::Sender<Vec<u64>>,
    },
    /// Stop taking inputs, make the state durable, answer, and end the task.
    Shutdown(oneshot::Sender<()>),
}

/// A handle to the engine task; cheap to clone.
#[derive(Clone)]
pub struct EngineHandle {
    tx: mpsc::UnboundedSender<Command>,
    counters: std::sync::Arc<Counters>,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
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

    /// The server's metrics (`/metrics`), which the engine counts into.
    pub fn metrics(&self) -> &std::sync::Arc<crate::metrics::Metrics> {
        &self.metrics
    }

    /// Queues an input. Inputs are handled in the order they were submitted. A
    /// Matrix event's arrival is noted for the push latency
    /// ([`crate::metrics::Metrics::received`]).
    /// Errors: the engine has stopped.
    pub fn submit(&self, input: Input) -> Result<(), EngineStopped> {
        if let Some((event, _)) = input.matrix_event() {
            self.metrics.received(event);
        }
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
    /// `true` when the model took it ([`Effect::Acknowledged`](mc_model::Effect::Acknowledged)), `false` when it
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

    /// Hands the operator's [`Input::Bind`] to the model (made durable first, like
    /// every input: a binding survives restarts) and answers from its transition:
    /// the identity's bindings it changed, or the reason the model dropped it
    /// ([`mc_adapters::effects::bind_answer`]: nothing of another identity, nor a
    /// timer that fired first, counts). `room` `None` unbinds `label`.
    /// Errors: the engine has stopped, or the journal did not take the input.
    pub async fn bind(
        &self,
        identity: IdentityId,
        label: Label,
        room: Option<RoomId>,
    ) -> Result<BindAnswer, EngineStopped> {
        let (answer, rx) = oneshot::channel();
        self.tx
            .send(Command::Bind {
                identity,
                label,
                room,
                answer,
            })
            .map_err(|_| EngineStopped)?;
        rx.await.map_err(|_| EngineStopped)
    }

    /// Hands the operator's [`Input::Revoke`] to the model (made durable first) and
    /// answers with the ids of the grants it ended
    /// ([`mc_adapters::effects::revoke_answer`]); empty when none matched.
    /// Errors: the engine has stopped, or the journal did not take the input.
    pub async fn revoke(
        &self,
        identity: IdentityId,
        grant: Option<u64>,
    ) -> Result<Vec<u64>, EngineStopped> {
        let (answer, rx) = oneshot::channel();
        self.tx
            .send(Command::Revoke {
                identity,
                grant,
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

#[cfg(test)]
mod fake;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_models_clock_is_the_unix_time_in_milliseconds() {
        assert!(now_ms() > Timestamp(1_700_000_000_000));
    }
}
