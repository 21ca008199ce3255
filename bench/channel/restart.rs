//! Restart from the journal (issue 13, item 4): how long a start takes to recover the
//! model's state from a journal of many inputs, against the same state from a
//! snapshot alone (what a clean stop leaves), measured in the same run.
//!
//! - **The journal** is generated with the server's own [`Journal`]: the starting
//!   state (one identity that joined one room, a session attached) is its snapshot,
//!   then each input is appended before the model handles it, as the engine does:
//!   a person's message, then the `Sent` outcome of the push it caused, so half the
//!   inputs are messages and half outcomes. No snapshot is taken meanwhile (the
//!   engine would take one every 10,000 inputs): this is the journal a snapshot
//!   policy of 100,000 inputs, or a crash just before one, would leave.
//! - **Timed**: [`Journal::open`] and [`recover_channel`] (read, check and parse every
//!   row, then replay each through `Channel::handle`), and separately `open` and
//!   [`Journal::recover`] alone (the read, check and parse). Each is the median of
//!   [`RUNS`] runs on the same files, so the page cache is warm after the first.
//! - **Checked**: the recovered state equals the state the generator reached, or the
//!   run fails.

use anyhow::{bail, Context};
use mc_model::{
    Channel, Effect, EventId, IdentityConfig, IdentityId, Input, Membership, Message,
    MessageContent, MsgType, Outcome, RoomId, SessionId, UserId,
};
use mc_server::journal::{recover_channel, Journal, SnapshotPolicy};
use std::path::Path;
use std::time::Instant;

/// Timed runs of each measurement (the median is reported).
pub const RUNS: usize = 5;

/// Generates a journal of `inputs` inputs in a temporary directory and times the
/// recovery from it, and from a snapshot of the same final state.
/// Errors: the journal fails, or the recovered state differs from the generated one.
pub fn measure(inputs: u64) -> anyhow::Result<mc_bench::Restart> {
    let dir = tempfile::Builder::new()
        .prefix("mc-bench-restart-")
        .tempdir()?;
    let journal_dir = dir.path().join("journal");
    let snapshot_dir = dir.path().join("snapshot");
    let generated = Instant::now();
    let expected = write_journal(&journal_dir, inputs)?;
    eprintln!(
        "bench: restart: {inputs} inputs journaled in {:.1} s",
        generated.elapsed().as_secs_f64()
    );
    let expected_json = serde_json::to_value(&expected)?;
    // The baseline: the same state as a snapshot with no rows after it.
    {
        let mut journal = Journal::open(&snapshot_dir, policy())?;
        journal.snapshot(&expected)?;
    }
    let journal_bytes = dir_bytes(&journal_dir)?;

    let mut journal_ms = Vec::new();
    let mut read_ms = Vec::new();
    let mut snapshot_ms = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let mut journal = Journal::open(&journal_dir, policy())?;
        let (channel, recovery) = recover_channel(&mut journal, None)?;
        journal_ms.push(t.elapsed().as_secs_f64() * 1e3);
        if recovery.replayed as u64 != inputs || recovery.set_aside != 0 {
            bail!(
                "restart: {} inputs replayed and {} set aside, of {inputs}",
                recovery.replayed,
                recovery.set_aside
            );
        }
        if serde_json::to_value(&channel)? != expected_json {
            bail!("restart: the state recovered from the journal is not the state reached");
        }
        drop(journal);

        let t = Instant::now();
        let mut journal = Journal::open(&journal_dir, policy())?;
        let recovered = journal.recover()?;
        read_ms.push(t.elapsed().as_secs_f64() * 1e3);
        if recovered.inputs.len() as u64 != inputs {
            bail!("restart: {} rows read of {inputs}", recovered.inputs.len());
        }
        drop(journal);

        let t = Instant::now();
        let mut journal = Journal::open(&snapshot_dir, policy())?;
        let (channel, recovery) = recover_channel(&mut journal, None)?;
        snapshot_ms.push(t.elapsed().as_secs_f64() * 1e3);
        if recovery.replayed != 0 || serde_json::to_value(&channel)? != expected_json {
            bail!("restart: the snapshot alone did not give the state reached");
        }
    }
    let journal_ms = median(&mut journal_ms);
    let snapshot_ms = median(&mut snapshot_ms);
    Ok(mc_bench::Restart {
        inputs,
        journal_bytes,
        state_bytes: serde_json::to_string(&expected)?.len() as u64,
        runs: RUNS as u64,
        journal_ms,
        read_ms: median(&mut read_ms),
        snapshot_ms,
        ratio: journal_ms / snapshot_ms,
    })
}

/// Never due: the generator appends every input with no snapshot between.
fn policy() -> SnapshotPolicy {
    SnapshotPolicy {
        every_inputs: u64::MAX,
        every_bytes: u64::MAX,
    }
}

/// Writes the starting state as the snapshot of a journal in `dir`, then appends
/// `inputs` inputs, each before the model handles it. Returns the state reached.
fn write_journal(dir: &Path, inputs: u64) -> anyhow::Result<Channel> {
    let identity = IdentityId("bot".to_owned());
    let bot = UserId("@bot:bench.test".to_owned());
    let ann = UserId("@ann:bench.test".to_owned());
    let room = RoomId("!room:bench.test".to_owned());
    let mut channel = Channel::new();
    channel
        .add_identity(
            identity.clone(),
            IdentityConfig::new(bot.clone(), [ann.clone()]),
        )
        .map_err(|e| anyhow::anyhow!("the identity's config: {e}"))?;
    let start: u64 = 1_700_000_000_000;
    for input in [
        Input::Membership {
            identity: identity.clone(),
            room: room.clone(),
            event_id: None,
            user: bot,
            membership: Membership::Joined,
        },
        Input::Attach {
            identity: identity.clone(),
            session: SessionId("bench-restart-session".to_owned()),
            label: None,
        },
    ] {
        channel.handle(mc_model::Timestamp(start), input);
    }
    let mut journal = Journal::open(dir, policy())?;
    journal.snapshot(&channel)?;
    let mut outcomes = Vec::new();
    let mut appended = 0;
    let mut message = 0u64;
    while appended < inputs {
        let now = start + 1 + appended;
        let input = match outcomes.pop() {
            Some(id) => Input::Completed {
                id,
                outcome: Outcome::Sent,
            },
            None => {
                message += 1;
                Input::Message {
                    identity: identity.clone(),
                    message: Message {
                        room: room.clone(),
                        event_id: EventId(format!("$bench-restart-{message}")),
                        sender: ann.clone(),
                        sender_name: Some("Ann".to_owned()),
                        origin_server_ts: mc_model::Timestamp(now),
                        content: Some(MessageContent {
                            msgtype: MsgType::Text,
                            body: format!(
                                "message {message}: can you run the tests for the parser module and tell me what fails?"
                            ),
                            formatted_body: None,
                            relation: None,
                            attachment: None,
                        }),
                        device: mc_model::DeviceTrust::PlaintextRoom,
                    },
                }
            }
        };
        journal.append(mc_model::Timestamp(now), &input, &[])?;
        appended += 1;
        for effect in channel.handle(mc_model::Timestamp(now), input) {
            match effect {
                Effect::Push { id, .. } => outcomes.push(id),
                Effect::Dropped { reason, .. } => {
                    bail!("restart: the model dropped a generated input ({reason:?})")
                }
                _ => {}
            }
        }
    }
    if journal.records()? != inputs {
        bail!(
            "restart: the journal holds {} rows, not {inputs}",
            journal.records()?
        );
    }
    Ok(channel)
}

/// Bytes of the files in `dir` (the database and its write-ahead log).
fn dir_bytes(dir: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        total += entry?.metadata()?.len();
    }
    Ok(total)
}

fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}
