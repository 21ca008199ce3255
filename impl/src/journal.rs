//! The engine's journal: every input the model is handed, made durable before any
//! effect of its step is executed, and a snapshot of the model state behind which the journal is
//! compacted.
//!
//! The model is a deterministic function of its inputs and the clock values it was
//! given (`Channel::handle(now, input)`), so the state after any input is the last
//! snapshot with the journal's inputs replayed on it in order. The bytes written per
//! input are that input's record (plus SQLite's page overhead, see below), whatever
//! the size of the state; the whole state is written only every
//! [`SnapshotPolicy::every_inputs`] inputs or [`SnapshotPolicy::every_bytes`] bytes of
//! records, at start after recovery, and at a clean stop.
//!
//! The file is `journal.sqlite3` in the store directory, its own SQLite database (WAL,
//! `synchronous = NORMAL`: durable when the process dies, as the store is) with
//! 1,024-byte pages: an append rewrites the table's last page, so a smaller page
//! writes fewer bytes per input (measured with Python's sqlite3 on 222-byte records:
//! 2.2 KB written per insert at 1,024-byte pages, 4.9 KB at SQLite's default 4,096).
//!
//! Tables: `snapshot` (one row: the model state's JSON, the sequence number of the
//! last input it includes, the model version that wrote it), `journal` (one row per
//! input after the snapshot: sequence number, model version, `now` in milliseconds
//! since the Unix epoch, the input's JSON, and a SHA-256 check of the three),
//! `journal_set_aside` (records that failed their check on recovery, with the
//! reason: kept, never replayed), and `audit` (the audit trail,
//! docs/decisions/0028-audit-trail.md: one row per entry, sealed into a hash chain
//! by `mc_adapters::audit::chain`, written in the same transaction as the record of
//! the input whose step made it, and never compacted; read by [`crate::audit`]).
use std::path::{Path, PathBuf};

use mc_adapters::audit::chain::{is_hash, seal, GENESIS};
use mc_adapters::audit::AuditEntry;
use mc_model::{Channel, Input, Timestamp};
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension};
use sha2::{Digest, Sha256};

/// The journal's file name in the store directory.
pub const JOURNAL_FILE: &str = "journal.sqlite3";

/// The version of the model this binary runs: a hash of model/'s sources (build.rs).
/// A record is replayed only by the model version that wrote it.
pub const MODEL_VERSION: &str = env!("MC_MODEL_VERSION");

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS snapshot (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL,
    version TEXT NOT NULL,
    json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY,
    version TEXT NOT NULL,
    now INTEGER NOT NULL,
    input TEXT NOT NULL,
    check_sum BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS journal_set_aside (
    seq INTEGER NOT NULL,
    version TEXT NOT NULL,
    now INTEGER NOT NULL,
    input TEXT NOT NULL,
    check_sum BLOB NOT NULL,
    reason TEXT NOT NULL,
    set_aside_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY,
    now INTEGER NOT NULL,
    identity TEXT NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_now ON audit (now);
";

/// When the engine writes a snapshot and compacts the journal behind it: after this
/// many inputs, or this many bytes of input records, since the last snapshot,
/// whichever comes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotPolicy {
    pub every_inputs: u64,
    pub every_bytes: u64,
}

impl Default for SnapshotPolicy {
    /// 10,000 inputs or 8 MiB: a 3 MB state (a full delivery log) written every
    /// 10,000 inputs is 300 bytes per input.
    fn default() -> Self {
        SnapshotPolicy {
            every_inputs: 10_000,
            every_bytes: 8 << 20,
        }
    }
}

/// What went wrong with the journal.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("opening the journal {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error(
        "the journal {path} holds {count} input(s) recorded by another version of the \
         model ({theirs}; this binary runs {ours}), which this one cannot replay. Start \
         the matrix-channel that recorded them once and stop it with SIGTERM or Ctrl-C: \
         a clean stop writes a snapshot and empties the journal, and any version loads \
         a snapshot. Then start this one. (Moving {path} aside instead loses the state \
         since the last snapshot and the snapshot itself.)"
    )]
    OtherVersion {
        path: PathBuf,
        count: u64,
        theirs: String,
        ours: &'static str,
    },
    #[error("serialising for the journal: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the journal's database: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

/// What [`Journal::recover`] found.
#[derive(Debug)]
pub struct Recovered {
    /// The snapshot's JSON (of [`Channel`]), if one was ever written.
    pub snapshot: Option<String>,
    /// The inputs after the snapshot, in order, with the `now` each was handed at.
    pub inputs: Vec<(Timestamp, Input)>,
    /// Records that failed their check (a torn or corrupt tail) and were moved to
    /// `journal_set_aside`: the first bad record and every record after it.
    pub set_aside: u64,
}

/// The journal, open for appending. One per store; the store lock
/// (`store::StoreLock`) keeps a second process out.
pub struct Journal {
    conn: Connection,
    path: PathBuf,
    policy: SnapshotPolicy,
    /// The sequence number of the last record appended (or recovered).
    last_seq: i64,
    inputs_since_snapshot: u64,
    bytes_since_snapshot: u64,
    /// The seq and hash of the audit trail's last entry (`0` and [`GENESIS`] when it
    /// is empty): the next entry is sealed after it.
    audit_last: (i64, String),
}

fn check_sum(version: &str, now: i64, input: &str) -> Vec<u8> {
    let mut hash = Sha256::new();
    hash.update(version.as_bytes());
    hash.update([0]);
    hash.update(now.to_le_bytes());
    hash.update(input.as_bytes());
    hash.finalize()[..8].to_vec()
}

fn unix_ms() -> i64 {
    crate::engine::now_ms().0 as i64
}

impl Journal {
    /// Opens (creating it and `dir` if needed) the journal in the store directory `dir`.
    /// Errors: the file cannot be opened or is not a database.
    pub fn open(dir: &Path, policy: SnapshotPolicy) -> Result<Journal, JournalError> {
        let path = dir.join(JOURNAL_FILE);
        let open = |path: &Path| -> Result<Connection, rusqlite::Error> {
            if let Some(dir) = path.parent() {
                // A missing directory then fails in `open` with the path in the error.
                let _ = std::fs::create_dir_all(dir);
            }
            let conn = Connection::open(path)?;
            // Only takes effect on a new database (before its first table).
            conn.pragma_update(None, "page_size", 1024)?;
            conn.pragma_update(None, "journal_mode", "WAL")?;
            conn.pragma_update(None, "synchronous", "NORMAL")?;
            conn.execute_batch(SCHEMA)?;
            Ok(conn)
        };
        let conn = open(&path).map_err(|source| JournalError::Open {
            path: path.clone(),
            source,
        })?;
        let last_seq: i64 = conn.query_row(
            "SELECT MAX(COALESCE((SELECT MAX(seq) FROM journal), 0),
                        COALESCE((SELECT seq FROM snapshot WHERE id = 1), 0))",
            [],
            |row| row.get(0),
        )?;
        let last_entry: Option<(i64, Option<String>)> = conn
            .query_row(
                "SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1",
                [],
                |row| {
                    let hash = match row.get_ref(1)? {
                        ValueRef::Text(text) => std::str::from_utf8(text)
                            .ok()
                            .filter(|hash| is_hash(hash))
                            .map(str::to_owned),
                        _ => None,
                    };
                    Ok((row.get(0)?, hash))
                },
            )
            .optional()?;
        let audit_last = match last_entry {
            None => (0, GENESIS.to_owned()),
            Some((seq, Some(hash))) => (seq, hash),
            Some((seq, None)) => {
                // Changed by hand: the trail goes on, and `audit verify` names the entry.
                tracing::error!(
                    journal = %path.display(),
                    "the audit trail's last entry {seq} holds no hash: the next entry is \
                     chained from the start hash; `matrix-channel audit verify` names the \
                     entry that was changed"
                );
                (seq, GENESIS.to_owned())
            }
        };
        Ok(Journal {
            conn,
            path,
            policy,
            last_seq,
            inputs_since_snapshot: 0,
            bytes_since_snapshot: 0,
            audit_last,
        })
    }

    /// Where the journal lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the snapshot and the records after it. A record that fails its check
    /// (its check sum does not match, or its input does not parse) ends the replay:
    /// it and every record after it are moved to `journal_set_aside`, and an ERROR
    /// says how many and where. Records of another model version are not replayed.
    /// Errors: a record of another model version ([`JournalError::OtherVersion`]:
    /// nothing is changed), or the database fails.
    pub fn recover(&mut self) -> Result<Recovered, JournalError> {
        let snapshot: Option<(i64, String)> = self
            .conn
            .query_row("SELECT seq, json FROM snapshot WHERE id = 1", [], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .optional()?;
        let after = snapshot.as_ref().map_or(0, |(seq, _)| *seq);
        let other: Option<(u64, String)> = self
            .conn
            .query_row(
                "SELECT COUNT(*), MIN(version) FROM journal WHERE seq > ?1 AND version != ?2",
                params![after, MODEL_VERSION],
                |row| {
                    Ok((
                        row.get::<_, i64>(0)? as u64,
                        row.get::<_, Option<String>>(1)?,
                    ))
                },
            )
            .map(|(count, version)| version.map(|v| (count, v)))?;
        if let Some((count, theirs)) = other {
            return Err(JournalError::OtherVersion {
                path: self.path.clone(),
                count,
                theirs,
                ours: MODEL_VERSION,
            });
        }
        let mut inputs = Vec::new();
        let mut bad: Option<(i64, String)> = None;
        {
            let mut stmt = self.conn.prepare(
                "SELECT seq, version, now, input, check_sum FROM journal
                 WHERE seq > ?1 ORDER BY seq",
            )?;
            let mut rows = stmt.query(params![after])?;
            let mut expected = after + 1;
            while let Some(row) = rows.next()? {
                let seq: i64 = row.get(0)?;
                let version: String = row.get(1)?;
                let now: i64 = row.get(2)?;
                let input: String = row.get(3)?;
                let sum: Vec<u8> = row.get(4)?;
                let reason = if seq != expected {
                    Some(format!("record {expected} is missing"))
                } else if sum != check_sum(&version, now, &input) {
                    Some("its check sum does not match".to_owned())
                } else {
                    match serde_json::from_str::<Input>(&input) {
                        Ok(parsed) if now >= 0 => {
                            inputs.push((Timestamp(now as u64), parsed));
                            None
                        }
                        Ok(_) => Some(format!("its time {now} is before the epoch")),
                        Err(e) => Some(format!("its input does not parse: {e}")),
                    }
                };
                if let Some(reason) = reason {
                    bad = Some((seq, reason));
                    break;
                }
                expected += 1;
            }
        }
        let mut set_aside = 0;
        if let Some((seq, reason)) = bad {
            let tx = self.conn.transaction()?;
            set_aside = tx.execute(
                "INSERT INTO journal_set_aside
                     (seq, version, now, input, check_sum, reason, set_aside_at)
                 SELECT seq, version, now, input, check_sum, ?2, ?3 FROM journal
                 WHERE seq >= ?1",
                params![seq, reason, unix_ms()],
            )? as u64;
            tx.execute("DELETE FROM journal WHERE seq >= ?1", params![seq])?;
            tx.commit()?;
            tracing::error!(
                journal = %self.path.display(),
                "journal record {seq} is unreadable ({reason}): the state is recovered up \
                 to record {}, and {set_aside} record(s) from {seq} on are kept in the \
                 table journal_set_aside, never replayed",
                seq - 1
            );
        }
        self.last_seq = after + inputs.len() as i64;
        Ok(Recovered {
            snapshot: snapshot.map(|(_, json)| json),
            inputs,
            set_aside,
        })
    }

    /// Appends one input, handed to the model at `now`, and the audit entries its
    /// step made (`audit`, sealed after the trail's last entry), in one transaction;
    /// durable when this returns.
    /// Errors: the input cannot be serialised, or the database fails (then neither
    /// the input nor its entries are recorded, and the step must not be acted on).
    pub fn append(
        &mut self,
        now: Timestamp,
        input: &Input,
        audit: &[AuditEntry],
    ) -> Result<(), JournalError> {
        let json = serde_json::to_string(input)?;
        let now = i64::try_from(now.0).unwrap_or(i64::MAX);
        let seq = self.last_seq + 1;
        let mut last = self.audit_last.clone();
        let sealed: Vec<_> = audit
            .iter()
            .map(|entry| {
                let row = seal(last.0 + 1, &last.1, entry);
                last = (row.seq, row.hash.clone());
                row
            })
            .collect();
        let tx = self.conn.transaction()?;
        tx.prepare_cached(
            "INSERT INTO journal (seq, version, now, input, check_sum)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![
            seq,
            MODEL_VERSION,
            now,
            json,
            check_sum(MODEL_VERSION, now, &json)
        ])?;
        for row in &sealed {
            tx.prepare_cached(
                "INSERT INTO audit (seq, now, identity, kind, body, prev_hash, hash)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                row.seq,
                row.now,
                row.identity,
                row.kind,
                row.body,
                row.prev_hash,
                row.hash
            ])?;
        }
        tx.commit()?;
        self.audit_last = last;
        self.last_seq = seq;
        self.inputs_since_snapshot += 1;
        self.bytes_since_snapshot += json.len() as u64;
        Ok(())
    }

    /// Whether the policy asks for a snapshot now.
    pub fn snapshot_due(&self) -> bool {
        self.inputs_since_snapshot >= self.policy.every_inputs
            || self.bytes_since_snapshot >= self.policy.every_bytes
    }

    /// Writes `channel` (the state after every appended input) as the snapshot and
    /// drops the records it includes, in one transaction. The audit trail stays.
    /// Errors: serialising or the database fails (the journal is then unchanged).
    pub fn snapshot(&mut self, channel: &Channel) -> Result<(), JournalError> {
        let json = serde_json::to_string(channel)?;
        self.replace_snapshot(&json)
    }

    /// [`Journal::snapshot`] from the state's JSON.
    pub fn replace_snapshot(&mut self, json: &str) -> Result<(), JournalError> {
        let tx = self.conn.transaction()?;
        tx.execute(
            "INSERT INTO snapshot (id, seq, version, json) VALUES (1, ?1, ?2, ?3)
             ON CONFLICT (id) DO UPDATE SET
                 seq = excluded.seq, version = excluded.version, json = excluded.json",
            params![self.last_seq, MODEL_VERSION, json],
        )?;
        tx.execute(
            "DELETE FROM journal WHERE seq <= ?1",
            params![self.last_seq],
        )?;
        tx.commit()?;
        self.inputs_since_snapshot = 0;
        self.bytes_since_snapshot = 0;
        Ok(())
    }

    /// The number of records after the snapshot (for tests and the benchmark).
    pub fn records(&self) -> Result<u64, JournalError> {
        Ok(self
            .conn
            .query_row("SELECT COUNT(*) FROM journal", [], |row| {
                row.get::<_, i64>(0)
            })? as u64)
    }
}

/// What [`recover_channel`] did, for its log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// Whether a snapshot was loaded (else the legacy state, or an empty one).
    pub snapshot: bool,
    /// Inputs replayed on it.
    pub replayed: usize,
    /// Records set aside by [`Journal::recover`].
    pub set_aside: u64,
}

/// Loads the model state at start: the snapshot (or `legacy`, the state a server
/// before the journal saved whole, when there is no snapshot yet; or an empty state),
/// with the journal's inputs replayed on it in order, their effects discarded (the
/// model settles what they left in flight on [`Input::Restarted`]).
/// Errors: those of [`Journal::recover`], or a snapshot that does not parse.
pub fn recover_channel(
    journal: &mut Journal,
    legacy: Option<String>,
) -> anyhow::Result<(Channel, Recovery)> {
    use anyhow::Context;
    let recovered = journal.recover()?;
    let mut channel: Channel = match recovered.snapshot.as_deref().or(legacy.as_deref()) {
        Some(json) => serde_json::from_str(json).context("the journal's snapshot")?,
        None => Channel::new(),
    };
    let replayed = recovered.inputs.len();
    for (now, input) in recovered.inputs {
        channel.handle(now, input);
    }
    Ok((
        channel,
        Recovery {
            snapshot: recovered.snapshot.is_some(),
            replayed,
            set_aside: recovered.set_aside,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_model::{IdentityConfig, IdentityId, SessionId, UserId};

    struct TempDir(PathBuf);
    impl TempDir {
        fn new() -> TempDir {
            TempDir(std::env::temp_dir().join(format!("mc-journal-{}", rand::random::<u64>())))
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const NOW: Timestamp = Timestamp(1_700_000_000_000);

    fn start() -> Channel {
        let mut channel = Channel::new();
        let config = IdentityConfig::new(UserId("@bot:hs".into()), [UserId("@ann:hs".into())]);
        channel
            .add_identity(IdentityId("bot".into()), config)
            .unwrap();
        channel
    }

    /// Sessions attaching and detaching: every input changes the state.
    fn input(i: u64) -> Input {
        let identity = IdentityId("bot".into());
        let session = SessionId(format!("s{}", i / 2));
        if i.is_multiple_of(2) {
            Input::Attach {
                identity,
                session,
                label: None,
            }
        } else {
            Input::Detach { identity, session }
        }
    }

    fn open(dir: &TempDir) -> Journal {
        Journal::open(&dir.0, SnapshotPolicy::default()).unwrap()
    }

    /// Appends `n` inputs after a snapshot of `start()`, handing each to `channel`
    /// too: the state the journal must give back.
    fn record(dir: &TempDir, n: u64) -> Channel {
        let mut journal = open(dir);
        let mut channel = start();
        journal.snapshot(&channel).unwrap();
        for i in 0..n {
            journal.append(NOW + i, &input(i), &[]).unwrap();
            channel.handle(NOW + i, input(i));
        }
        channel
    }

    fn set_aside(dir: &TempDir) -> Vec<(i64, String)> {
        let conn = Connection::open(dir.0.join(JOURNAL_FILE)).unwrap();
        let mut stmt = conn
            .prepare("SELECT seq, reason FROM journal_set_aside ORDER BY seq")
            .unwrap();
        let rows = stmt
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap();
        rows.map(Result::unwrap).collect()
    }

    #[test]
    fn the_snapshot_with_its_inputs_replayed_is_the_state_the_model_reached() {
        let dir = TempDir::new();
        let expected = record(&dir, 7);
        let mut journal = open(&dir);
        let (channel, recovery) = recover_channel(&mut journal, None).unwrap();
        assert_eq!(channel, expected);
        assert_ne!(channel, start(), "the inputs changed the state");
        assert_eq!(
            recovery,
            Recovery {
                snapshot: true,
                replayed: 7,
                set_aside: 0
            }
        );
    }

    #[test]
    fn a_snapshot_compacts_the_journal_and_later_inputs_follow_it() {
        let dir = TempDir::new();
        let mut expected = record(&dir, 4);
        let mut journal = open(&dir);
        assert_eq!(journal.records().unwrap(), 4);
        journal.recover().unwrap();
        journal.snapshot(&expected).unwrap();
        assert_eq!(journal.records().unwrap(), 0);
        journal.append(NOW + 10, &input(10), &[]).unwrap();
        expected.handle(NOW + 10, input(10));
        drop(journal);
        let (channel, recovery) = recover_channel(&mut open(&dir), None).unwrap();
        assert_eq!(channel, expected);
        assert_eq!(recovery.replayed, 1);
    }

    #[test]
    fn the_policy_asks_for_a_snapshot_after_its_count_of_inputs_or_bytes() {
        let dir = TempDir::new();
        let policy = SnapshotPolicy {
            every_inputs: 3,
            every_bytes: 1 << 30,
        };
        let mut journal = Journal::open(&dir.0, policy).unwrap();
        for i in 0..2 {
            journal.append(NOW, &input(i), &[]).unwrap();
        }
        assert!(!journal.snapshot_due());
        journal.append(NOW, &input(2), &[]).unwrap();
        assert!(journal.snapshot_due());
        journal.snapshot(&start()).unwrap();
        assert!(!journal.snapshot_due(), "the count starts again");
        let bytes = serde_json::to_string(&input(0)).unwrap().len() as u64;
        let policy = SnapshotPolicy {
            every_inputs: 1_000,
            every_bytes: bytes * 2,
        };
        let mut journal = Journal::open(&dir.0, policy).unwrap();
        journal.append(NOW, &input(0), &[]).unwrap();
        assert!(!journal.snapshot_due());
        journal.append(NOW, &input(2), &[]).unwrap();
        assert!(journal.snapshot_due(), "two records of {bytes} bytes");
    }

    #[test]
    fn a_corrupt_record_ends_the_replay_and_it_and_every_later_one_are_set_aside() {
        let dir = TempDir::new();
        record(&dir, 6);
        // Record 4's input is altered on disk, its check sum is not.
        let conn = Connection::open(dir.0.join(JOURNAL_FILE)).unwrap();
        conn.execute(
            "UPDATE journal SET input = replace(input, 's1', 's9') WHERE seq = 4",
            [],
        )
        .unwrap();
        drop(conn);
        let mut expected = start();
        for i in 0..3 {
            expected.handle(NOW + i, input(i));
        }
        let mut journal = open(&dir);
        let (channel, recovery) = recover_channel(&mut journal, None).unwrap();
        assert_eq!(channel, expected, "recovered up to record 3");
        assert_eq!((recovery.replayed, recovery.set_aside), (3, 3));
        let kept = set_aside(&dir);
        assert_eq!(
            kept.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
            [4, 5, 6]
        );
        assert!(kept[0].1.contains("check sum"), "{}", kept[0].1);
        assert_eq!(journal.records().unwrap(), 3, "the good records stay");
        // The next input follows the last good record, and a second recovery agrees.
        journal.append(NOW + 3, &input(3), &[]).unwrap();
        expected.handle(NOW + 3, input(3));
        drop(journal);
        let (channel, recovery) = recover_channel(&mut open(&dir), None).unwrap();
        assert_eq!(channel, expected);
        assert_eq!((recovery.replayed, recovery.set_aside), (4, 0));
    }

    #[test]
    fn a_record_that_does_not_parse_or_a_gap_in_the_sequence_ends_the_replay() {
        let dir = TempDir::new();
        record(&dir, 5);
        let conn = Connection::open(dir.0.join(JOURNAL_FILE)).unwrap();
        let bad = "{\"type\":\"no_such_input\"}";
        conn.execute(
            "UPDATE journal SET input = ?1, check_sum = ?2 WHERE seq = 5",
            params![bad, check_sum(MODEL_VERSION, (NOW + 4).0 as i64, bad)],
        )
        .unwrap();
        conn.execute("DELETE FROM journal WHERE seq = 3", [])
            .unwrap();
        drop(conn);
        let (_, recovery) = recover_channel(&mut open(&dir), None).unwrap();
        assert_eq!((recovery.replayed, recovery.set_aside), (2, 2));
        let kept = set_aside(&dir);
        assert_eq!(kept[0].0, 4);
        assert!(kept[0].1.contains("record 3 is missing"), "{}", kept[0].1);
    }

    #[test]
    fn a_torn_tail_of_the_write_ahead_log_loses_only_the_torn_record() {
        let dir = TempDir::new();
        let mut journal = open(&dir);
        for i in 0..20 {
            journal.append(NOW + i, &input(i), &[]).unwrap();
        }
        // A copy of the files as a crash in the middle of the last write leaves them
        // (the journal still open: its write-ahead log is not checkpointed), the log
        // cut short inside its last frame.
        let copy = TempDir::new();
        std::fs::create_dir_all(&copy.0).unwrap();
        for suffix in ["", "-wal"] {
            let from = dir.0.join(format!("{JOURNAL_FILE}{suffix}"));
            std::fs::copy(&from, copy.0.join(format!("{JOURNAL_FILE}{suffix}"))).unwrap();
        }
        let wal = copy.0.join(format!("{JOURNAL_FILE}-wal"));
        let len = std::fs::metadata(&wal).unwrap().len();
        assert!(
            len > 2_000,
            "the records are still in the log ({len} bytes)"
        );
        let file = std::fs::OpenOptions::new().write(true).open(&wal).unwrap();
        file.set_len(len - 100).unwrap();
        drop(file);
        drop(journal);
        let (_, recovery) = recover_channel(&mut open(&copy), None).unwrap();
        assert_eq!(recovery.set_aside, 0);
        assert_eq!(recovery.replayed, 19, "every record but the torn one");
    }

    #[test]
    fn records_of_another_model_version_are_refused_with_what_to_do() {
        let dir = TempDir::new();
        record(&dir, 2);
        let conn = Connection::open(dir.0.join(JOURNAL_FILE)).unwrap();
        conn.execute("UPDATE journal SET version = 'an-older-one'", [])
            .unwrap();
        drop(conn);
        let mut journal = open(&dir);
        let e = recover_channel(&mut journal, None).unwrap_err();
        let message = format!("{e:#}");
        assert!(message.contains("2 input(s)"), "{message}");
        assert!(message.contains("an-older-one"), "{message}");
        assert!(message.contains(MODEL_VERSION), "{message}");
        assert!(message.contains("stop it with SIGTERM"), "{message}");
        assert_eq!(journal.records().unwrap(), 2, "nothing is changed");
        assert!(set_aside(&dir).is_empty());
    }

    #[test]
    fn the_model_version_is_a_hash_of_the_models_sources() {
        assert_eq!(MODEL_VERSION.len(), 16);
        assert!(MODEL_VERSION.bytes().all(|b| b.is_ascii_hexdigit()));
    }
}
