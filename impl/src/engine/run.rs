//! The engine task ([`spawn`]): its loop takes commands in order, hands the model a
//! tick at its next deadline, makes each input durable (with its audit entries)
//! before any of its effects is executed, and executes every effect the model
//! returns in one exhaustive `match` (`Engine::execute`): notifications to their
//! session's queue, Matrix sends to their room's lane, answers to the tool calls
//! waiting for them.

use super::persist::Persist;
use super::queues::{Counted, Outbound, RoomLanes, SessionQueues};
use super::{
    channel_params, verdict_params, Command, Counters, EngineHandle, Wire, WriteAnswer,
    CHANNEL_METHOD, VERDICT_METHOD,
};
use mc_adapters::effects::{
    bind_answer, completed, posted, prompt_txn_id, revoke_answer, tick_wait, write_lane,
};
use mc_model::{
    CallId, Channel, Effect, EffectId, IdentityId, Input, Outcome, PromptText, RoomId, Timestamp,
};
use tokio::sync::{mpsc, oneshot};

/// Starts the engine task. `clock` gives the model's time (milliseconds). The
/// engine first makes `channel` durable ([`Persist::begin`]: for the journal, a
/// snapshot), then its first input is [`Input::Restarted`]: the model itself settles what a
/// previous process left (it re-issues prompt posts, fails the rest, detaches
/// sessions).
pub fn spawn<W: Wire, P: Persist>(
    channel: Channel,
    wire: std::sync::Arc<W>,
    persist: P,
    clock: fn() -> Timestamp,
) -> (EngineHandle, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let counters = std::sync::Arc::<Counters>::default();
    // What `/metrics` renders ([`EngineHandle::metrics`]); the engine counts into it,
    // and nothing reads it to decide.
    let metrics = std::sync::Arc::new(crate::metrics::Metrics::new());
    let engine = Engine {
        tx: tx.clone(),
        counters: counters.clone(),
        metrics: metrics.clone(),
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
    (
        EngineHandle {
            tx,
            counters,
            metrics,
        },
        task,
    )
}

struct Engine<W, P> {
    tx: mpsc::UnboundedSender<Command>,
    counters: std::sync::Arc<Counters>,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
    /// Tool calls waiting for the model's answer to their write.
    calls: std::collections::BTreeMap<CallId, oneshot::Sender<WriteAnswer>>,
    next_call: u64,
    channel: Channel,
    wire: std::sync::Arc<W>,
    persist: P,
    clock: fn() -> Timestamp,
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
        let metrics = self.metrics.clone();
        let (who, at) = (identity.clone(), room.clone());
        self.rooms.run(
            &who,
            &at,
            Box::pin(async move {
                let txn_id = prompt_txn_id(id);
                let result = wire.post_prompt(&identity, &room, &text, &txn_id).await;
                metrics.matrix_send("prompt", result.is_ok());
                let _ = tx.send(Command::Input(Box::new(posted(id, result))));
            }),
        );
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) {
        loop {
            let sleep = tick_wait(self.channel.next_deadline(), (self.clock)());
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
                    let acknowledged = self
                        .step_answering(*input, |effects| {
                            effects
                                .iter()
                                .any(|e| matches!(e, Effect::Acknowledged { .. }))
                        })
                        .await;
                    let _ = answer.send(acknowledged.unwrap_or(false));
                }
                Command::Bind {
                    identity,
                    label,
                    room,
                    answer,
                } => {
                    let input = Input::Bind {
                        identity: identity.clone(),
                        label,
                        room,
                    };
                    let bound = self
                        .step_answering(input, |effects| bind_answer(&identity, effects))
                        .await;
                    if let Some(bound) = bound {
                        let _ = answer.send(bound);
                    }
                }
                Command::Revoke {
                    identity,
                    grant,
                    answer,
                } => {
                    let input = Input::Revoke {
                        identity: identity.clone(),
                        grant,
                    };
                    let revoked = self
                        .step_answering(input, |effects| revoke_answer(&identity, effects))
                        .await;
                    if let Some(revoked) = revoked {
                        let _ = answer.send(revoked);
                    }
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

    /// Handles one input: hands it to the model, makes it durable with the step's
    /// audit entries, and hands its effects on; none is awaited here (their outcomes
    /// come back as inputs through the engine's queue).
    async fn step(&mut self, input: Input) {
        self.step_answering(input, |_| ()).await;
    }

    /// [`Engine::step`], returning what `answer` reads from the transition's effects
    /// before they are handed on (the model's own answer to a caller), or `None` when
    /// the journal did not take the input (the engine stops; none of its effects is
    /// executed).
    async fn step_answering<T>(
        &mut self,
        input: Input,
        answer: impl FnOnce(&[Effect]) -> T,
    ) -> Option<T> {
        tracing::debug!(?input, "input");
        match &input {
            Input::Attach { session, .. } => self.sessions.attached(session),
            Input::Detach { session, .. } => self.sessions.detached(session),
            _ => {}
        }
        let now = (self.clock)();
        let started = std::time::Instant::now();
        // The model takes the input by value; the journal records it after the step,
        // with the step's audit entries, before any effect is executed.
        let recorded = input.clone();
        let handling = std::time::Instant::now();
        let effects = self.channel.handle(now, input);
        let handled = std::time::Instant::now();
        if let Err(e) = self.persist.append(now, &recorded, &effects, &self.channel) {
            tracing::error!(
                "the journal did not take an input ({e}): the engine stops, so that \
                 nothing is acted on that a restart would not know"
            );
            self.stopped = true;
            return None;
        }
        self.persist.handled(&self.channel);
        let persisted = (handling - started) + handled.elapsed();
        self.counters.add(handled - handling, persisted);
        self.metrics
            .step(&effects, (handled - handling) + persisted);
        let answer = answer(&effects);
        for effect in effects {
            self.execute(effect);
        }
        Some(answer)
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
                event_id,
                notification,
            } => {
                let params = channel_params(&notification);
                let (kind, replayed) = mc_adapters::metrics::push_labels(&notification);
                // A replay is not timed: it waited for the session, not for us.
                let received = event_id
                    .filter(|_| !replayed)
                    .and_then(|event| self.metrics.receipt(&event));
                let item = Outbound::Notify {
                    id,
                    method: CHANNEL_METHOD,
                    params,
                    counted: Counted::Push {
                        kind,
                        replayed,
                        received,
                    },
                };
                self.sessions
                    .send(&self.wire, &self.tx, &self.metrics, session, item);
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
                    counted: Counted::Verdict,
                };
                self.sessions
                    .send(&self.wire, &self.tx, &self.metrics, session, item);
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
                let metrics = self.metrics.clone();
                let (who, at) = (identity.clone(), room.clone());
                self.rooms.run(
                    &who,
                    &at,
                    Box::pin(async move {
                        let result = wire.edit_prompt(&identity, &room, &event_id, &text).await;
                        metrics.matrix_send("edit", result.is_ok());
                        if let Err(e) = result {
                            tracing::warn!(%identity, %event_id, "editing a prompt failed: {e}");
                        }
                    }),
                );
            }
            Effect::Announce {
                identity,
                room,
                text,
            } => {
                let wire = self.wire.clone();
                let metrics = self.metrics.clone();
                let (who, at) = (identity.clone(), room.clone());
                self.rooms.run(
                    &who,
                    &at,
                    Box::pin(async move {
                        let result = wire.announce(&identity, &room, &text).await;
                        metrics.matrix_send("announce", result.is_ok());
                        if let Err(e) = result {
                            tracing::warn!(%identity, "posting a notice failed: {e}");
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
                let metrics = self.metrics.clone();
                let (who, at) = (identity.clone(), room.clone());
                self.rooms.run(
                    &who,
                    &at,
                    Box::pin(async move {
                        let result = wire.notice(&identity, &room, &in_reply_to, &text).await;
                        metrics.matrix_send("notice", result.is_ok());
                        if let Err(e) = result {
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
                let metrics = self.metrics.clone();
                let tx = self.tx.clone();
                let who = identity.clone();
                let at = write_lane(&write);
                self.rooms.run(
                    &who,
                    &at,
                    Box::pin(async move {
                        let result = wire.write(&identity, &write).await;
                        metrics.matrix_send("write", result.is_ok());
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
                let metrics = self.metrics.clone();
                let tx = self.tx.clone();
                let (who, at) = (identity.clone(), room.clone());
                self.rooms.run(
                    &who,
                    &at,
                    Box::pin(async move {
                        let result = wire.join_room(&identity, &room).await;
                        metrics.matrix_send("join", result.is_ok());
                        if let Err(e) = &result {
                            tracing::warn!(%identity, %room, "joining on an invite failed: {e}");
                        }
                        let _ = tx.send(Command::Input(Box::new(completed(id, result))));
                    }),
                );
            }
            Effect::CreateRoom {
                id,
                identity,
                label,
                name,
                invite,
            } => {
                let wire = self.wire.clone();
                let metrics = self.metrics.clone();
                let tx = self.tx.clone();
                // The label's own lane: no room exists yet, and one label's creation
                // is never in flight twice.
                let (who, at) = (identity.clone(), RoomId(format!("create {label}")));
                self.rooms.run(
                    &who,
                    &at,
                    Box::pin(async move {
                        let created = wire.create_room(&identity, &name, &invite).await;
                        metrics.matrix_send("create_room", created.is_ok());
                        let outcome = match created {
                            Ok(room) => {
                                tracing::info!(%identity, %label, %room, "created a room");
                                Outcome::Created { room }
                            }
                            Err(reason) => {
                                tracing::warn!(%identity, %label, "creating a room failed: {reason}");
                                Outcome::Failed { reason }
                            }
                        };
                        let _ = tx.send(Command::Input(Box::new(Input::Completed { id, outcome })));
                    }),
                );
            }
            Effect::Bound {
                identity,
                label,
                room,
            } => {
                tracing::info!(%identity, %label, room = ?room, "label bound");
            }
            Effect::Typing {
                identity,
                room,
                typing,
            } => {
                let wire = self.wire.clone();
                let metrics = self.metrics.clone();
                let (who, at) = (identity.clone(), room.clone());
                self.rooms.run(
                    &who,
                    &at,
                    Box::pin(async move {
                        let result = wire.typing(&identity, &room, typing).await;
                        metrics.matrix_send("typing", result.is_ok());
                        if let Err(e) = result {
                            tracing::warn!(%identity, %room, typing, "a typing notice failed: {e}");
                        }
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
                self.sessions.send(
                    &self.wire,
                    &self.tx,
                    &self.metrics,
                    session,
                    Outbound::Log(message),
                );
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
                    behavior = decision.behavior.as_str(), by = %decision.by, at = at.0,
                    via = ?decision.via, "verdict"
                );
            }
            Effect::Granted { identity, grant } => {
                tracing::info!(
                    %identity, grant = grant.id, session = %grant.session, tool = %grant.tool,
                    scope = ?grant.scope, expires_at = grant.expires_at.0, by = %grant.by,
                    "grant made"
                );
            }
            Effect::GrantEnded { identity, id, why } => {
                tracing::info!(%identity, grant = id, why = ?why, "grant ended");
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::fake::*;
    use crate::engine::{BindAnswer, NoPersist, WriteAnswer};
    use crate::testing::paused_clock;
    use crate::write::{ToolError, Written};
    use mc_model::{DropReason, EventId, IdentityConfig, SessionId, SessionPhase, UserId};
    use serde_json::json;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
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
        // The metrics counted the push written, timed from the message's arrival.
        let metrics = engine.metrics().render();
        for line in [
            "matrix_channel_pushes_total{kind=\"message\",result=\"sent\"} 1",
            "matrix_channel_push_latency_seconds_count 1",
            "matrix_channel_engine_input_seconds_count 4",
        ] {
            assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_labels_room_is_created_through_the_wire_and_then_receives_that_labels_events() {
        let wire = Arc::new(FakeWire::default());
        let (engine, _task) = spawn(channel(), wire.clone(), NoPersist, clock);
        engine.submit(attach_labelled("s-web", "web")).unwrap();
        engine.submit(attach("s-plain")).unwrap();
        settle(&engine).await;
        let calls = wire.calls.lock().unwrap().clone();
        assert_eq!(calls, [format!("create bot Claude Code: web {ALICE}")]);
        let bound = engine
            .read(|c| {
                c.identity(&id())
                    .unwrap()
                    .room_of(&SessionId("s-web".into()))
                    .cloned()
            })
            .await
            .unwrap();
        assert_eq!(bound, Some(RoomId("!created-1:hs".into())));

        engine
            .submit(say_in("!created-1:hs", "$web", "to web"))
            .unwrap();
        engine.submit(say("$plain", "to the rest")).unwrap();
        settle(&engine).await;
        assert_eq!(
            pushed(&wire),
            [
                ("s-web".to_owned(), json!("$web")),
                ("s-plain".to_owned(), json!("$plain")),
            ]
        );

        // The push reached the web session: the identity shows typing in its room
        // (and in no other).
        let calls = wire.calls.lock().unwrap().clone();
        let typing: Vec<&String> = calls.iter().filter(|c| c.starts_with("typing ")).collect();
        assert_eq!(typing, ["typing bot !created-1:hs true"]);

        // A second session of the label shares the room: no second creation.
        engine.submit(attach_labelled("s-web-2", "web")).unwrap();
        settle(&engine).await;
        let creations = wire
            .calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.starts_with("create "))
            .count();
        assert_eq!(creations, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_room_creation_that_fails_is_told_to_the_labels_session() {
        let wire = Arc::new(FakeWire::default());
        *wire.create_fails.lock().unwrap() = true;
        let (engine, _task) = spawn(channel(), wire.clone(), NoPersist, clock);
        engine.submit(attach_labelled("s-web", "web")).unwrap();
        settle(&engine).await;
        let calls = wire.calls.lock().unwrap().clone();
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert!(
            calls[1].starts_with("log s-web ") && calls[1].contains("the homeserver is down"),
            "{calls:?}"
        );
        let bindings = engine
            .read(|c| c.identity(&id()).unwrap().bindings().len())
            .await
            .unwrap();
        assert_eq!(bindings, 0, "the label waits for its next attach");
    }

    #[tokio::test(start_paused = true)]
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

    #[tokio::test(start_paused = true)]
    async fn a_due_timer_fires_without_any_input() {
        // A prompt with a 50 ms time to live. The paused clock drives both the model's
        // time (`paused_clock`) and the engine's timers: once it has moved past the
        // time to live, the engine's own timer expires the prompt and edits it.
        crate::testing::start_paused_clock();
        let ttl = 50;
        let wire = Arc::new(FakeWire::default());
        let mut channel = Channel::new();
        let mut config = IdentityConfig::new(UserId("@bot:hs".into()), [UserId(ALICE.into())]);
        config.prompt_ttl_ms = ttl;
        config.settle_ms = 10;
        config.permission_room = Some(RoomId("!r:hs".into()));
        channel.add_identity(id(), config).unwrap();
        channel.handle(paused_clock(), joined("!r:hs"));
        let (engine, _task) = spawn(channel, wire.clone(), NoPersist, paused_clock);
        engine.submit(attach("s1")).unwrap();
        engine.submit(ask("s1", "abcde")).unwrap();
        settle(&engine).await;
        let prompts = || engine.read(|c| c.identity(&id()).unwrap().prompts().len());
        assert_eq!(prompts().await.unwrap(), 1, "not expired before its time");
        let calls = wire.calls.lock().unwrap().clone();
        assert_eq!(calls.len(), 1, "posted, not edited yet: {calls:?}");
        tokio::time::advance(Duration::from_millis(ttl)).await;
        settle(&engine).await;
        let calls = wire.calls.lock().unwrap().clone();
        assert_eq!(calls.last().unwrap(), "edit bot !r:hs $prompt", "{calls:?}");
        assert_eq!(prompts().await.unwrap(), 0);
    }

    #[tokio::test(start_paused = true)]
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
            SessionPhase::Detached,
            "the old process's stream is gone"
        );
        assert_eq!(queued, 2, "both pushes in flight went back to the queue");
        assert!(
            wire.notified.lock().unwrap().is_empty(),
            "nothing was pushed"
        );
    }

    #[tokio::test(start_paused = true)]
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

    fn ack_clock() -> Timestamp {
        Timestamp(ACK_CLOCK.load(std::sync::atomic::Ordering::SeqCst))
    }

    #[tokio::test(start_paused = true)]
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

    fn label(text: &str) -> mc_model::Label {
        mc_model::Label::parse(text).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn an_operators_bind_is_answered_from_its_transition_and_routes_the_rooms_events() {
        let wire = Arc::new(FakeWire::default());
        let (engine, _task) = spawn(channel(), wire.clone(), NoPersist, clock);
        let room = RoomId("!r:hs".into());
        let answer = engine
            .bind(id(), label("api"), Some(room.clone()))
            .await
            .unwrap();
        assert_eq!(
            answer,
            BindAnswer::Bound(vec![(label("api"), Some(room.clone()))])
        );
        // The label's session finds its room bound: no room is created, and the
        // room's messages reach it.
        engine.submit(attach_labelled("s-api", "api")).unwrap();
        engine.submit(say("$m1", "to api")).unwrap();
        settle(&engine).await;
        assert_eq!(pushed(&wire), [("s-api".to_owned(), json!("$m1"))]);
        assert!(
            !wire
                .calls
                .lock()
                .unwrap()
                .iter()
                .any(|c| c.starts_with("create ")),
            "no room created for a bound label"
        );

        // Binding the room to another label unbinds api first, and says so.
        let answer = engine
            .bind(id(), label("web"), Some(room.clone()))
            .await
            .unwrap();
        assert_eq!(
            answer,
            BindAnswer::Bound(vec![(label("api"), None), (label("web"), Some(room))])
        );
        let answer = engine.bind(id(), label("web"), None).await.unwrap();
        assert_eq!(answer, BindAnswer::Bound(vec![(label("web"), None)]));

        let answer = engine
            .bind(id(), label("api"), Some(RoomId("!elsewhere:hs".into())))
            .await
            .unwrap();
        assert_eq!(answer, BindAnswer::Dropped(DropReason::NotJoined));
        let answer = engine
            .bind(IdentityId("nobody".into()), label("api"), None)
            .await
            .unwrap();
        assert_eq!(answer, BindAnswer::Dropped(DropReason::UnknownIdentity));
    }

    #[tokio::test(start_paused = true)]
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
                ..Written::default()
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

    #[tokio::test(start_paused = true)]
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
        settle(&engine).await;
        let calls = wire.calls.lock().unwrap().clone();
        assert_eq!(calls, ["join bot !a:hs"]);
        assert_eq!(
            engine.read(|c| c.in_flight()).await.unwrap(),
            0,
            "the join's outcome went back"
        );
    }

    #[tokio::test(start_paused = true)]
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
        settle(&engine).await;
        let calls = wire.calls.lock().unwrap().clone();
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert!(
            calls[0].starts_with(
                "log s1 matrix-channel did not relay a permission_request: request_id: bad."
            ),
            "{calls:?}"
        );
    }
}
