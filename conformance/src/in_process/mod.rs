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

mod adapter;
mod wire;

pub use wire::{MemWire, Net};

use crate::world::{Ev, Ident, Observation, World};
use mc_model::{Channel, Input, Millis};
use mc_server::engine::{self, EngineHandle, JournalPersist};
use mc_server::journal::{recover_channel, Journal, SnapshotPolicy};
use mc_server::matrix::timeline_input;
use std::cell::Cell;
use std::sync::{Arc, Mutex};
use wire::MemRoom;

thread_local! {
    /// The engine's clock: the world's time. The engine runs on this thread (a
    /// current-thread runtime), so each test thread has its own clock.
    static NOW: Cell<Millis> = const { Cell::new(crate::world::START) };
}

fn clock() -> Millis {
    NOW.with(Cell::get)
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
