//! How the engine's effects reach the network in order: one outbound queue per MCP
//! session, written by the session's own task ([`SessionQueues`]: a stuck client
//! delays only itself, and a failed notification fails the ones queued behind it),
//! and one lane of Matrix sends per identity and room ([`RoomLanes`]), at most
//! [`MATRIX_SENDS_AT_ONCE`] at once.

use super::{Command, Wire};
use mc_adapters::effects::{completed, QueueFailure};
use mc_model::{EffectId, IdentityId, RoomId, SessionId};
use serde_json::Value;
use std::time::Duration;
use tokio::sync::mpsc;

/// How long one notification write may take before it counts as failed.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(10);

/// At most this many Matrix sends (prompt posts, outcome edits, notices, the agent's
/// writes, joins) run at once, across every identity and room. matrix-sdk's own
/// adapters cap their concurrency at 20 (`buffer_unordered(20)`).
pub const MATRIX_SENDS_AT_ONCE: usize = 16;

pub(super) type Job = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Ordered lanes of Matrix sends, one per (identity, room): a lane's sends run one
/// after another in the model's order (a notice after the prompt it answers), lanes
/// run side by side, and at most [`MATRIX_SENDS_AT_ONCE`] sends run at once.
pub(super) struct RoomLanes {
    lanes: std::collections::BTreeMap<(IdentityId, RoomId), mpsc::UnboundedSender<Job>>,
    permits: std::sync::Arc<tokio::sync::Semaphore>,
}

impl RoomLanes {
    pub(super) fn new() -> Self {
        RoomLanes {
            lanes: Default::default(),
            permits: std::sync::Arc::new(tokio::sync::Semaphore::new(MATRIX_SENDS_AT_ONCE)),
        }
    }

    pub(super) fn run(&mut self, identity: &IdentityId, room: &RoomId, job: Job) {
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
pub(super) enum Outbound {
    Notify {
        id: EffectId,
        method: &'static str,
        params: Value,
        counted: Counted,
    },
    Log(String),
}

/// What a notification counts as in the metrics once written or failed.
pub(super) enum Counted {
    /// A push: its kind, whether a replay, and its event's receipt (timed when sent).
    Push {
        kind: &'static str,
        replayed: bool,
        received: Option<std::time::Instant>,
    },
    /// A verdict.
    Verdict,
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
pub(super) struct SessionQueues {
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
    pub(super) fn attached(&mut self, session: &SessionId) {
        if let Some(queue) = self.queues.get_mut(session) {
            queue.attachment += 1;
        }
    }

    /// Releases `session`'s queue: its task ends once it has written what is queued.
    pub(super) fn detached(&mut self, session: &SessionId) {
        self.retiring.retain(|_, task| !task.is_finished());
        if let Some(SessionQueue { items, task, .. }) = self.queues.remove(session) {
            drop(items);
            // A queue made after an earlier release waited for that one's task, so
            // this task is the last to end of the two: it is the one to wait for.
            self.retiring.insert(session.clone(), task);
        }
    }

    pub(super) fn send<W: Wire>(
        &mut self,
        wire: &std::sync::Arc<W>,
        engine: &mpsc::UnboundedSender<Command>,
        metrics: &std::sync::Arc<crate::metrics::Metrics>,
        session: SessionId,
        item: Outbound,
    ) {
        let retiring = &mut self.retiring;
        let queue = self.queues.entry(session.clone()).or_insert_with(|| {
            let (items, receiver) = mpsc::unbounded_channel();
            let before = retiring.remove(&session);
            let (wire, engine, metrics) = (wire.clone(), engine.clone(), metrics.clone());
            let task = tokio::spawn(async move {
                if let Some(before) = before {
                    let _ = before.await;
                }
                drain(wire, engine, metrics, session, receiver).await;
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
    metrics: std::sync::Arc<crate::metrics::Metrics>,
    session: SessionId,
    mut items: mpsc::UnboundedReceiver<(u64, Outbound)>,
) {
    let mut failure = QueueFailure::default();
    while let Some((attachment, item)) = items.recv().await {
        match item {
            Outbound::Notify {
                id,
                method,
                params,
                counted,
            } => {
                let result = if failure.writes(attachment) {
                    notify(&*wire, &session, method, params).await
                } else {
                    Err("an earlier notification to the session failed".to_owned())
                };
                if result.is_err() {
                    failure.failed(attachment);
                }
                match counted {
                    Counted::Push {
                        kind,
                        replayed,
                        received,
                    } => metrics.pushed(kind, replayed, result.is_ok(), received),
                    Counted::Verdict => metrics.verdict_sent(result.is_ok()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::fake::*;
    use crate::engine::{spawn, NoPersist};
    use mc_model::{IdentityConfig, SessionPhase, UserId};
    use serde_json::json;
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
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
        assert_eq!(state, SessionPhase::Detached);
        wire.failing.lock().unwrap().clear();
        engine.submit(attach("s1")).unwrap();
        settle(&engine).await;
        let notified = wire.notified.lock().unwrap().clone();
        assert_eq!(notified.len(), 1, "replayed once on re-attach");
        assert_eq!(notified[0].2["meta"]["replayed"], json!("true"));
    }

    #[tokio::test(start_paused = true)]
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

    #[tokio::test(start_paused = true)]
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

    #[tokio::test(start_paused = true)]
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

    #[tokio::test(start_paused = true)]
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
            counted: Counted::Verdict,
        };
        let metrics = Arc::default();
        queues.send(&wire, &engine, &metrics, s1.clone(), item(1));
        queues.detached(&s1);
        assert!(
            queues.queues.is_empty(),
            "a detached session keeps no queue"
        );
        // The session comes back while its first push is still being written.
        queues.send(&wire, &engine, &metrics, s1.clone(), item(2));
        crate::testing::idle().await;
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
