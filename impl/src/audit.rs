//! `matrix-channel audit` and `audit verify` (docs/decisions/0028-audit-trail.md):
//! the audit trail, the `audit` table of the journal ([`crate::journal`]), read
//! through a read-only connection (`serve` may be running: the journal is in WAL
//! mode, and a reader sees every committed step).
//!
//! - [`print`]: the entries of one identity or all, from `since` (inclusive) to
//!   `until` (exclusive), in seq order, one line each ([`mc_adapters::audit::text`]).
//! - [`verify`]: every entry, through [`Chain`]: the first bad entry and why, or the
//!   count and the last entry's seq and hash (an anchor to note).

use crate::journal::JOURNAL_FILE;
use anyhow::{anyhow, Context as _};
use mc_adapters::audit::chain::{Anchor, Broken, Chain, Fault, Sealed, Verified};
use mc_adapters::audit::text::{json_line, line};
use mc_adapters::audit::time::rfc3339;
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OpenFlags};
use std::io::Write;
use std::path::Path;

/// Which entries [`print`] prints.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only this identity's; `None`: every identity's.
    pub identity: Option<String>,
    /// From this instant on (milliseconds since the epoch, inclusive).
    pub since: Option<u64>,
    /// Before this instant (exclusive).
    pub until: Option<u64>,
}

/// How [`print`] writes an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// One line in words ([`line`]).
    Lines,
    /// One JSON object a line ([`json_line`]).
    Json,
}

/// The journal of the store at `store_dir`, read-only; `None` when it holds no
/// audit trail (a journal from before the trail, never served since).
/// Errors: there is no journal (the server never ran on this store), or it does not
/// open.
fn open(store_dir: &Path) -> anyhow::Result<Option<Connection>> {
    let path = store_dir.join(JOURNAL_FILE);
    if !path.exists() {
        return Err(anyhow!(
            "no journal at {}: no server has run with this store_dir",
            path.display()
        ));
    }
    let conn = Connection::open_with_flags(
        &path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("opening {} read-only", path.display()))?;
    let has_trail: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'audit')",
        [],
        |row| row.get(0),
    )?;
    Ok(has_trail.then_some(conn))
}

const COLUMNS: &str = "seq, now, identity, kind, body, prev_hash, hash";

/// Why a row was not read.
enum Unread {
    /// The database failed.
    Db(rusqlite::Error),
    /// A field is not of its type (changed by hand: SQLite keeps what it is given).
    Field(String),
}

impl From<rusqlite::Error> for Unread {
    fn from(e: rusqlite::Error) -> Unread {
        Unread::Db(e)
    }
}

fn integer(row: &rusqlite::Row<'_>, i: usize, name: &str) -> Result<i64, Unread> {
    match row.get_ref(i)? {
        ValueRef::Integer(n) => Ok(n),
        _ => Err(Unread::Field(format!("its {name} is not an integer"))),
    }
}

fn text(row: &rusqlite::Row<'_>, i: usize, name: &str) -> Result<String, Unread> {
    match row.get_ref(i)? {
        ValueRef::Text(bytes) => String::from_utf8(bytes.to_vec())
            .map_err(|_| Unread::Field(format!("its {name} is not UTF-8 text"))),
        _ => Err(Unread::Field(format!("its {name} is not text"))),
    }
}

/// A row of `audit` (its [`COLUMNS`]) as stored; a field of the wrong type is
/// [`Fault::Unreadable`].
fn sealed(row: &rusqlite::Row<'_>) -> rusqlite::Result<Result<Sealed, Broken>> {
    let seq: i64 = row.get(0)?;
    let fields = || -> Result<Sealed, Unread> {
        Ok(Sealed {
            seq,
            now: integer(row, 1, "now")?,
            identity: text(row, 2, "identity")?,
            kind: text(row, 3, "kind")?,
            body: text(row, 4, "body")?,
            prev_hash: text(row, 5, "prev_hash")?,
            hash: text(row, 6, "hash")?,
        })
    };
    match fields() {
        Ok(entry) => Ok(Ok(entry)),
        Err(Unread::Field(why)) => Ok(Err(Broken {
            seq,
            fault: Fault::Unreadable(why),
        })),
        Err(Unread::Db(e)) => Err(e),
    }
}

/// Writes the entries `filter` selects to `out`, in seq order, one a line in
/// `format`; returns how many. A closed pipe (`| head`) ends the output quietly.
/// Errors: no journal, the database fails, or writing fails.
pub fn print(
    store_dir: &Path,
    filter: &Filter,
    format: Format,
    out: &mut impl Write,
) -> anyhow::Result<u64> {
    let Some(conn) = open(store_dir)? else {
        return Ok(0);
    };
    let clamp = |ms: u64| i64::try_from(ms).unwrap_or(i64::MAX);
    let mut stmt = conn.prepare(&format!(
        "SELECT {COLUMNS} FROM audit
         WHERE (?1 IS NULL OR identity = ?1)
           AND (?2 IS NULL OR now >= ?2) AND (?3 IS NULL OR now < ?3)
         ORDER BY seq"
    ))?;
    let mut rows = stmt.query(params![
        filter.identity,
        filter.since.map(clamp),
        filter.until.map(clamp),
    ])?;
    let mut printed = 0;
    while let Some(row) = rows.next()? {
        let text = match sealed(row)? {
            Ok(entry) => match format {
                Format::Lines => line(&entry),
                Format::Json => json_line(&entry),
            },
            Err(broken) => format!("{broken} (`matrix-channel audit verify` checks the trail)"),
        };
        match writeln!(out, "{text}") {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(printed),
            written => written.context("writing to stdout")?,
        }
        printed += 1;
    }
    match out.flush() {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(printed),
        flushed => flushed.context("writing to stdout").map(|()| printed),
    }
}

/// What [`verify`] found.
pub type Verdict = Result<Verified, Broken>;

/// Checks the whole trail of the store at `store_dir` ([`Chain`]), and `anchor` when
/// given. Errors: no journal, or the database fails (a bad entry is the
/// [`Verdict`]'s `Err`).
pub fn verify(store_dir: &Path, anchor: Option<Anchor>) -> anyhow::Result<Verdict> {
    let mut chain = Chain::new(anchor);
    let Some(conn) = open(store_dir)? else {
        return Ok(chain.end());
    };
    let mut stmt = conn.prepare(&format!("SELECT {COLUMNS} FROM audit ORDER BY seq"))?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        if let Err(broken) = sealed(row)?.and_then(|entry| chain.check(&entry)) {
            return Ok(Err(broken));
        }
    }
    Ok(chain.end())
}

/// The lines `audit verify` prints for a trail that checked out.
pub fn verified_lines(verified: &Verified) -> Vec<String> {
    let mut lines = vec![format!(
        "audit trail verified: {} entries",
        verified.entries
    )];
    if let Some((seq, now, hash)) = &verified.last {
        lines.push(format!(
            "last entry: {seq} at {}, hash {hash}",
            rfc3339(u64::try_from(*now).unwrap_or(0))
        ));
        lines.push(format!(
            "keep it outside this machine as an anchor: `matrix-channel audit verify \
             --anchor {seq}:{hash}` later also proves that no entry up to it was changed \
             or cut"
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Journal, SnapshotPolicy};
    use mc_adapters::audit::{AuditEntry, AuditEvent};
    use mc_model::{IdentityId, Input, Timestamp};

    struct TempDir(std::path::PathBuf);
    impl TempDir {
        fn new() -> TempDir {
            let dir = std::env::temp_dir().join(format!("mc-audit-{}", rand::random::<u64>()));
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
        fn conn(&self) -> Connection {
            Connection::open(self.0.join(JOURNAL_FILE)).unwrap()
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const NOW: Timestamp = Timestamp(1_796_580_602_000);

    fn revoked(identity: &str, grant: u64) -> AuditEntry {
        AuditEntry {
            now: NOW + grant,
            identity: IdentityId(identity.into()),
            event: AuditEvent::Revoked { grant: Some(grant) },
        }
    }

    /// Appends one input per step, with `entries[i]` as step i's audit entries.
    fn append(journal: &mut Journal, entries: &[Vec<AuditEntry>]) {
        for (i, step) in entries.iter().enumerate() {
            journal.append(NOW + i as u64, &Input::Tick, step).unwrap();
        }
    }

    fn open_journal(dir: &TempDir) -> Journal {
        Journal::open(&dir.0, SnapshotPolicy::default()).unwrap()
    }

    /// Entries 1 to 5, two of them in one step.
    fn five(dir: &TempDir) -> Journal {
        let mut journal = open_journal(dir);
        append(
            &mut journal,
            &[
                vec![revoked("work", 1)],
                vec![],
                vec![revoked("home", 2), revoked("work", 3)],
                vec![revoked("work", 4)],
                vec![revoked("home", 5)],
            ],
        );
        journal
    }

    fn printed(dir: &TempDir, filter: &Filter, format: Format) -> Vec<String> {
        let mut out = Vec::new();
        let n = print(&dir.0, filter, format, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        assert_eq!(lines.len() as u64, n);
        lines
    }

    fn verified(dir: &TempDir) -> Verdict {
        verify(&dir.0, None).unwrap()
    }

    #[test]
    fn appended_entries_verify_and_print_by_identity_and_time_while_the_journal_is_open() {
        let dir = TempDir::new();
        let _journal = five(&dir);
        let verdict = verified(&dir).unwrap();
        assert_eq!(verdict.entries, 5);
        let (seq, now, _) = verdict.last.clone().unwrap();
        assert_eq!((seq, now), (5, (NOW + 5).0 as i64));
        let all = printed(&dir, &Filter::default(), Format::Lines);
        assert_eq!(
            all,
            [
                "2026-12-06T18:10:02Z  work  the operator revokes grant 1",
                "2026-12-06T18:10:02Z  home  the operator revokes grant 2",
                "2026-12-06T18:10:02Z  work  the operator revokes grant 3",
                "2026-12-06T18:10:02Z  work  the operator revokes grant 4",
                "2026-12-06T18:10:02Z  home  the operator revokes grant 5",
            ]
        );
        let work = Filter {
            identity: Some("work".into()),
            since: Some((NOW + 3).0),
            until: Some((NOW + 5).0),
        };
        assert_eq!(
            printed(&dir, &work, Format::Lines),
            [
                "2026-12-06T18:10:02Z  work  the operator revokes grant 3",
                "2026-12-06T18:10:02Z  work  the operator revokes grant 4",
            ],
            "since is inclusive, until exclusive"
        );
        let json = printed(&dir, &work, Format::Json);
        let first: serde_json::Value = serde_json::from_str(&json[0]).unwrap();
        assert_eq!(
            (&first["seq"], &first["kind"], &first["body"]["grant"]),
            (&3.into(), &"revoked".into(), &3.into())
        );
    }

    #[test]
    fn a_body_changed_by_hand_is_named_by_verify() {
        let dir = TempDir::new();
        drop(five(&dir));
        dir.conn()
            .execute("UPDATE audit SET body = '{\"grant\":7}' WHERE seq = 3", [])
            .unwrap();
        let broken = verified(&dir).unwrap_err();
        assert_eq!(
            broken,
            Broken {
                seq: 3,
                fault: Fault::HashMismatch
            }
        );
        assert!(broken.to_string().starts_with("entry 3: hash mismatch"));
    }

    #[test]
    fn a_deleted_middle_entry_is_a_gap_named_by_verify() {
        let dir = TempDir::new();
        drop(five(&dir));
        dir.conn()
            .execute("DELETE FROM audit WHERE seq = 2", [])
            .unwrap();
        assert_eq!(
            verified(&dir),
            Err(Broken {
                seq: 3,
                fault: Fault::Gap { expected: 2 }
            })
        );
    }

    #[test]
    fn a_field_of_the_wrong_type_is_named_unreadable_by_verify_and_print() {
        let dir = TempDir::new();
        drop(five(&dir));
        let conn = dir.conn();
        conn.execute("UPDATE audit SET now = 'soon' WHERE seq = 4", [])
            .unwrap();
        conn.execute("UPDATE audit SET body = x'00ff' WHERE seq = 5", [])
            .unwrap();
        assert_eq!(
            verified(&dir),
            Err(Broken {
                seq: 4,
                fault: Fault::Unreadable("its now is not an integer".into())
            })
        );
        let lines = printed(&dir, &Filter::default(), Format::Lines);
        assert_eq!(
            lines[3..],
            [
                "entry 4: unreadable, its now is not an integer (`matrix-channel audit verify` \
                 checks the trail)",
                "entry 5: unreadable, its body is not text (`matrix-channel audit verify` \
                 checks the trail)"
            ]
        );
        conn.execute(
            "UPDATE audit SET body = CAST(x'ff' AS TEXT) WHERE seq = 1",
            [],
        )
        .unwrap();
        assert_eq!(
            verified(&dir),
            Err(Broken {
                seq: 1,
                fault: Fault::Unreadable("its body is not UTF-8 text".into())
            })
        );
    }

    #[test]
    fn a_reopened_journal_continues_the_chain_and_a_snapshot_keeps_the_trail() {
        let dir = TempDir::new();
        drop(five(&dir));
        let mut journal = open_journal(&dir);
        journal.recover().unwrap();
        append(&mut journal, &[vec![revoked("work", 6)]]);
        journal.snapshot(&mc_model::Channel::new()).unwrap();
        assert_eq!(journal.records().unwrap(), 0, "the journal is compacted");
        append(&mut journal, &[vec![revoked("work", 7)]]);
        let verdict = verified(&dir).unwrap();
        assert_eq!(verdict.entries, 7);
        assert_eq!(verdict.last.unwrap().0, 7);
    }

    #[test]
    fn a_last_hash_changed_by_hand_is_named_and_the_trail_goes_on_after_a_restart() {
        let dir = TempDir::new();
        drop(five(&dir));
        dir.conn()
            .execute("UPDATE audit SET hash = 'x' WHERE seq = 5", [])
            .unwrap();
        let mut journal = open_journal(&dir);
        append(&mut journal, &[vec![revoked("work", 6)]]);
        assert_eq!(
            verified(&dir),
            Err(Broken {
                seq: 5,
                fault: Fault::HashMismatch
            })
        );
        let lines = printed(&dir, &Filter::default(), Format::Lines);
        assert_eq!(lines.len(), 6);
    }

    #[test]
    fn an_anchor_past_a_cut_tail_is_named_and_one_that_holds_passes() {
        let dir = TempDir::new();
        drop(five(&dir));
        let last = verified(&dir).unwrap().last.unwrap();
        let anchor = Anchor::parse(&format!("5:{}", last.2)).unwrap();
        assert!(verify(&dir.0, Some(anchor.clone())).unwrap().is_ok());
        dir.conn()
            .execute("DELETE FROM audit WHERE seq >= 4", [])
            .unwrap();
        assert!(verified(&dir).is_ok(), "a cut tail leaves a valid chain");
        assert_eq!(
            verify(&dir.0, Some(anchor)).unwrap(),
            Err(Broken {
                seq: 5,
                fault: Fault::AnchorMissing { last: Some(3) }
            })
        );
    }

    #[test]
    fn a_store_without_a_journal_is_an_error_and_a_journal_without_a_trail_is_empty() {
        let dir = TempDir::new();
        let e = verify(&dir.0, None).unwrap_err().to_string();
        assert!(e.starts_with("no journal at "), "{e}");
        assert!(print(&dir.0, &Filter::default(), Format::Lines, &mut Vec::new()).is_err());
        // A journal written before the trail existed.
        dir.conn()
            .execute_batch("CREATE TABLE journal (seq INTEGER PRIMARY KEY)")
            .unwrap();
        assert_eq!(
            verified(&dir),
            Ok(Verified {
                entries: 0,
                last: None
            })
        );
        assert_eq!(
            printed(&dir, &Filter::default(), Format::Lines),
            [] as [&str; 0]
        );
    }

    #[test]
    fn a_verified_trail_prints_its_count_and_its_last_entry_as_an_anchor() {
        let lines = verified_lines(&Verified {
            entries: 5,
            last: Some((5, NOW.0 as i64, "ab".repeat(32))),
        });
        assert_eq!(lines[0], "audit trail verified: 5 entries");
        assert_eq!(
            lines[1],
            format!(
                "last entry: 5 at 2026-12-06T18:10:02Z, hash {}",
                "ab".repeat(32)
            )
        );
        assert!(lines[2].contains(&format!("--anchor 5:{}", "ab".repeat(32))));
        let empty = verified_lines(&Verified {
            entries: 0,
            last: None,
        });
        assert_eq!(empty, ["audit trail verified: 0 entries"]);
    }

    /// A writer that takes `room` bytes, then answers a broken pipe.
    struct Pipe {
        room: usize,
        taken: Vec<u8>,
    }
    impl Write for Pipe {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.taken.len() + buf.len() > self.room {
                return Err(std::io::ErrorKind::BrokenPipe.into());
            }
            self.taken.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_pipe_ends_the_output_quietly() {
        let dir = TempDir::new();
        drop(five(&dir));
        let mut pipe = Pipe {
            room: 120,
            taken: Vec::new(),
        };
        let n = print(&dir.0, &Filter::default(), Format::Lines, &mut pipe).unwrap();
        assert_eq!(n, 2, "{}", String::from_utf8_lossy(&pipe.taken));
    }
}
