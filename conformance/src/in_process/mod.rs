//! The in-process target: the server's own adapters and engine, the network replaced
//! by in-memory queues.
//!
//! Matrix events reach the engine as the homeserver's JSON through
//! [`mc_server::matrix::timeline_input`] (ruma decoding, reply parents fetched from an
//! in-memory room with the homeserver's edit bundling, display names); permission
//! requests through [`mc_server::mcp::permission_request`]; the engine's effects leave
//! through its [`Wire`](mc_server::engine::Wire) as MCP notification JSON and as the
//! Matrix event contents the server builds ([`mc_server::server::prompt_content`] and
//! friends). The clock is the world's.
//!
//! No wait here is timed. The engine and every task it spawns run on one
//! current-thread runtime that runs only inside the harness's `block_on` calls, and
//! the harness waits on what it observes: a tool's answer and a state read are the
//! engine's own answers, the old engine's end is its task's join handle, and "the
//! server has done all it can" ([`InProcess::take_observed`]) is the runtime parking
//! with no task able to run (`Parks`). The in-memory wire answers every call at
//! once (a held prompt post never does: the process dies first) and the journal is
//! written on the engine's own task, so a parked runtime waits only on the harness.
//! The engine's own timers (its next deadline, the notification timeout) are tokio's
//! and run on the wall clock: one that fires while the harness works hands the engine
//! an `Input::Tick` at the world's time, which has not moved, so it fires nothing.

mod adapter;
mod wire;

pub use wire::{MemWire, Net};

use crate::world::{Ev, Ident, Observation, World};
use mc_model::{Channel, Input, Timestamp};
use mc_server::engine::{self, EngineHandle, JournalPersist};
use mc_server::journal::{recover_channel, Journal, SnapshotPolicy};
use mc_server::matrix::timeline_input;
use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use wire::MemRoom;

thread_local! {
    /// The engine's clock: the world's time. The engine runs on this thread (a
    /// current-thread runtime), so each test thread has its own clock.
    static NOW: Cell<Timestamp> = const { Cell::new(crate::world::START) };
}

fn clock() -> Timestamp {
    NOW.with(Cell::get)
}

/// The runtime's parks, counted by its `on_thread_park` hook. A current-thread
/// runtime parks only when no task can run, none yielded, and the `block_on` future
/// was not woken: every task (the engine, its session queues and room lanes) waits
/// for something. In process only the harness can give it that (see the module
/// docs), so a park after the harness's last step means the server is quiet.
#[derive(Default)]
struct Parks {
    count: AtomicU64,
    /// The future of [`Parks::next`] that waits for the next park.
    waiting: Mutex<Option<Waker>>,
}

impl Parks {
    /// The `on_thread_park` hook: counts the park and wakes the waiting future (the
    /// runtime then polls its driver once without blocking and polls that future).
    fn parked(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
        let waiting = self.waiting.lock().unwrap().take();
        if let Some(waker) = waiting {
            waker.wake();
        }
    }

    /// Resolves at the runtime's first park after this future's first poll.
    fn next(&self) -> impl Future<Output = ()> + '_ {
        let mut since = None;
        std::future::poll_fn(move |cx| {
            let count = self.count.load(Ordering::SeqCst);
            if since.is_some_and(|since| count > since) {
                return Poll::Ready(());
            }
            since.get_or_insert(count);
            *self.waiting.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        })
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
    parks: Arc<Parks>,
    engine: EngineHandle,
    task: tokio::task::JoinHandle<()>,
    journal: JournalDir,
    wire: Arc<MemWire>,
}

impl InProcess {
    /// A fresh server: the cast's identities, no sessions, the world's start time.
    pub fn new() -> InProcess {
        let parks = Arc::new(Parks::default());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .on_thread_park({
                let parks = parks.clone();
                move || parks.parked()
            })
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
            parks,
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
        // The aborted task's future (and with it its journal connection) is dropped
        // before its join handle answers.
        let _ = self.rt.block_on(&mut self.task);
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

    /// Runs until the engine and the tasks it spawned are quiet: the runtime's next
    /// park ([`Parks`]).
    fn settle(&self) {
        self.rt.block_on(self.parks.next());
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
        let input = self.adapt(ev);
        if ev.input.as_ref() != Some(&input) {
            return Err(format!(
                "the adapter made {json} into {input:?}, the reference {:?}",
                ev.input
            ));
        }
        self.submit(input)
    }

    /// What the server's adapter makes of world event `ev` as the sync hands it
    /// over (`timeline_input` against the in-memory room, a clear event).
    fn adapt(&self, ev: &Ev) -> Input {
        let room = MemRoom {
            id: ev.room.clone(),
            wire: &self.wire,
        };
        self.rt.block_on(timeline_input(
            &ev.ident.id(),
            &room,
            &ev.json().to_string(),
            mc_model::DeviceTrust::PlaintextRoom,
        ))
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
        let input = self.adapt(ev);
        match input {
            Input::Unhandled { what, .. } => {
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
