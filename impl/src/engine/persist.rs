//! Where the engine keeps its state ([`Persist`]): the journal and its audit trail
//! ([`JournalPersist`]), or nothing ([`NoPersist`], for tests). Every input is made
//! durable before any effect of it is executed.

use crate::journal::Journal;
use mc_model::{Channel, Effect, Input, Timestamp};

/// Where the engine keeps its state: every input is made durable before any effect
/// the model returned for it is executed ([`Persist::append`]), so a crash loses no
/// input the engine acted on.
pub trait Persist: Send + Sync + 'static {
    /// Makes `input`, handed to the model at `now`, durable, with what its step
    /// tells the audit trail: the model returned `effects` and its state is now
    /// `after`. The engine executes no effect of a step this did not take: on an
    /// error it logs it and stops.
    /// Errors: a reason for the log.
    fn append(
        &mut self,
        now: Timestamp,
        input: &Input,
        effects: &[Effect],
        after: &Channel,
    ) -> Result<(), String>;
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

/// Persists into the journal ([`crate::journal`]): an append per input with the
/// step's audit entries ([`mc_adapters::audit::audit_entries`]), a snapshot when its
/// policy asks and at a clean stop. (The mutex makes it `Sync`: only the engine task
/// ever locks it.)
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

    fn append(
        &mut self,
        now: Timestamp,
        input: &Input,
        effects: &[Effect],
        after: &Channel,
    ) -> Result<(), String> {
        let audit = mc_adapters::audit::audit_entries(now, input, effects, after);
        self.journal()
            .append(now, input, &audit)
            .map_err(|e| e.to_string())
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
    fn append(&mut self, _: Timestamp, _: &Input, _: &[Effect], _: &Channel) -> Result<(), String> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::fake::*;
    use crate::engine::{spawn, EngineHandle};
    use serde_json::json;
    use std::sync::{Arc, Mutex};

    /// Logs every append as `append <input type> after <n> pushes`, and refuses
    /// appends once `refuse_from` were taken.
    struct LogPersist {
        wire: Arc<FakeWire>,
        log: Arc<Mutex<Vec<String>>>,
        refuse_from: Option<usize>,
    }

    impl Persist for LogPersist {
        fn append(
            &mut self,
            _: Timestamp,
            input: &Input,
            _: &[Effect],
            _: &Channel,
        ) -> Result<(), String> {
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

    #[tokio::test(start_paused = true)]
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

    #[tokio::test(start_paused = true)]
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

    #[tokio::test(start_paused = true)]
    async fn a_bind_the_journal_refuses_is_answered_as_a_stopped_engine() {
        let wire = Arc::new(FakeWire::default());
        let persist = LogPersist {
            wire: wire.clone(),
            log: Arc::new(Mutex::new(Vec::new())),
            refuse_from: Some(1),
        };
        let (engine, _task) = spawn(channel(), wire, persist, clock);
        let label = mc_model::Label::parse("api").unwrap();
        assert!(engine.bind(id(), label, None).await.is_err());
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

    /// The audit trail of the store at `dir`, as `matrix-channel audit` prints it,
    /// without the time and identity columns.
    fn trail(dir: &TempDir) -> Vec<String> {
        let mut out = Vec::new();
        let filter = crate::audit::Filter::default();
        crate::audit::print(&dir.0, &filter, crate::audit::Format::Lines, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        text.lines()
            .map(|line| line.split("  ").nth(2).unwrap().to_owned())
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_prompt_and_its_verdict_reach_the_audit_trail_whose_chain_goes_on_after_a_crash() {
        let dir =
            TempDir(std::env::temp_dir().join(format!("mc-journal-{}", rand::random::<u64>())));
        let wire = Arc::new(FakeWire::default());
        let (engine, task) = spawn(channel(), wire.clone(), journal_in(&dir), clock);
        engine.submit(attach("s1")).unwrap();
        engine.submit(say("$m1", "hi")).unwrap();
        engine.submit(ask("s1", "abcde")).unwrap();
        settle(&engine).await;
        let (engine, _task) = crash_and_restart(&dir, task, wire).await;
        engine.submit(attach("s1")).unwrap();
        engine.submit(say("$yes", "yes abcde")).unwrap();
        settle(&engine).await;
        let trail = trail(&dir);
        assert_eq!(
            trail,
            [
                "permission request abcde from session s1: Bash `{}`",
                "prompt for abcde of session s1 posted to !r:hs (post 1)",
                "prompt for abcde of session s1 is message $prompt (post 1)",
                // The second process's entries follow the first's.
                "verdict allow for abcde (Bash `{}`) by @alice:hs via message $yes",
                "verdict allow for abcde sent to session s1",
            ]
        );
        let verified = crate::audit::verify(&dir.0, None).unwrap().unwrap();
        assert_eq!(verified.entries, 5);
    }

    #[tokio::test(start_paused = true)]
    async fn an_operators_bind_survives_a_crash() {
        let dir =
            TempDir(std::env::temp_dir().join(format!("mc-journal-{}", rand::random::<u64>())));
        let wire = Arc::new(FakeWire::default());
        let (engine, task) = spawn(channel(), wire.clone(), journal_in(&dir), clock);
        let label = mc_model::Label::parse("api").unwrap();
        let room = mc_model::RoomId("!r:hs".into());
        engine
            .bind(id(), label.clone(), Some(room.clone()))
            .await
            .unwrap();
        let (engine, _task) = crash_and_restart(&dir, task, wire).await;
        let binding = engine
            .read(move |c| c.identity(&id()).unwrap().bindings().get(&label).cloned())
            .await
            .unwrap();
        assert_eq!(binding, Some(mc_model::Binding::Room { room }));
    }

    #[tokio::test(start_paused = true)]
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
        settle(&engine).await;
        assert!(hung.calls.lock().unwrap().contains(&"hung s1".to_owned()));
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
}
