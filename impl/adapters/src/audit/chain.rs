//! The audit trail's hash chain (docs/decisions/0028-audit-trail.md). Each stored
//! entry ([`Sealed`]) carries the hash of the entry before it (`prev_hash`; the first
//! entry [`GENESIS`]) and its own:
//!
//! `hash = SHA-256(prev_hash as 32 bytes || canonical bytes)`, and the canonical bytes
//! are [`DOMAIN`], then `seq` and `now` as 8-byte big-endian signed integers, then
//! `identity`, `kind` and `body` each as its UTF-8 length (8-byte big-endian) and
//! its bytes. Hashes are written as 64 lowercase hex digits. The body is hashed as
//! stored, so no JSON canonical form is needed.
//!
//! [`Chain`] checks stored entries in `seq` order: `seq` counts from 1 without a
//! gap, each `prev_hash` is the hash of the entry before, and each hash is its
//! entry's. It cannot tell that entries were cut from the end: an [`Anchor`] (an
//! entry's seq and hash noted elsewhere) can.

use super::{AuditEntry, AuditEvent};
use sha2::{Digest, Sha256};
use std::fmt;

/// The `prev_hash` of the first entry: 64 zeros.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The first bytes hashed of every entry: this format, version 1.
pub const DOMAIN: &[u8] = b"matrix-channel audit v1\0";

/// An entry as stored: the row of the `audit` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sealed {
    /// From 1, one more per entry.
    pub seq: i64,
    /// Milliseconds since the Unix epoch.
    pub now: i64,
    pub identity: String,
    /// The [`AuditEvent`]'s kind (`verdict`, `granted`, …).
    pub kind: String,
    /// The [`AuditEvent`]'s fields, a JSON object.
    pub body: String,
    /// The hash of the entry before, [`GENESIS`] for the first.
    pub prev_hash: String,
    pub hash: String,
}

/// `event` as the row keeps it: its kind, and its other fields as a JSON object.
pub fn kind_and_body(event: &AuditEvent) -> (String, String) {
    let mut value = serde_json::to_value(event).expect("an audit event is plain JSON");
    let object = value
        .as_object_mut()
        .expect("an audit event is a JSON object");
    let kind = match object.remove("kind") {
        Some(serde_json::Value::String(kind)) => kind,
        _ => unreachable!("an audit event is tagged with its kind"),
    };
    (kind, value.to_string())
}

impl Sealed {
    /// The event the row holds, or `None` when its kind or body is not one this
    /// version reads (a newer version wrote it, or it was changed).
    pub fn event(&self) -> Option<AuditEvent> {
        let mut body: serde_json::Value = serde_json::from_str(&self.body).ok()?;
        body.as_object_mut()?
            .insert("kind".into(), self.kind.clone().into());
        serde_json::from_value(body).ok()
    }
}

/// The hash of an entry with these fields after the entry whose hash is `prev_hash`
/// (see the module's doc); `None` when `prev_hash` is not 64 hex digits.
pub fn hash(
    prev_hash: &str,
    seq: i64,
    now: i64,
    identity: &str,
    kind: &str,
    body: &str,
) -> Option<String> {
    let mut sha = Sha256::new();
    sha.update(unhex(prev_hash)?);
    sha.update(DOMAIN);
    sha.update(seq.to_be_bytes());
    sha.update(now.to_be_bytes());
    for field in [identity, kind, body] {
        sha.update((field.len() as u64).to_be_bytes());
        sha.update(field.as_bytes());
    }
    Some(hex(&sha.finalize()))
}

/// Seals `entry` as entry `seq` after the entry whose hash is `prev_hash`.
/// Panics when `prev_hash` is not 64 hex digits (the writer only passes
/// [`GENESIS`] or a hash this module made).
pub fn seal(seq: i64, prev_hash: &str, entry: &AuditEntry) -> Sealed {
    let (kind, body) = kind_and_body(&entry.event);
    let now = i64::try_from(entry.now.0).unwrap_or(i64::MAX);
    let identity = entry.identity.0.clone();
    let hash = hash(prev_hash, seq, now, &identity, &kind, &body).expect("a hash made here");
    Sealed {
        seq,
        now,
        identity,
        kind,
        body,
        prev_hash: prev_hash.to_owned(),
        hash,
    }
}

/// Whether `text` is a hash as this module writes it (64 hex digits).
pub fn is_hash(text: &str) -> bool {
    unhex(text).is_some()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<[u8; 32]> {
    let mut bytes = [0u8; 32];
    // `from_str_radix` alone would take a sign (`+f`).
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    for (byte, pair) in bytes.iter_mut().zip(text.as_bytes().chunks(2)) {
        let pair = std::str::from_utf8(pair).ok()?;
        *byte = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(bytes)
}

/// An entry's seq and hash, noted outside the store (`audit verify` prints the last
/// one): the trail must still hold that entry with that hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Anchor {
    pub seq: i64,
    pub hash: String,
}

impl Anchor {
    /// `SEQ:HASH`, as `audit verify` prints it. Errors: the reason, for the operator.
    pub fn parse(text: &str) -> Result<Anchor, String> {
        let (seq, hash) = text
            .split_once(':')
            .ok_or_else(|| format!("{text:?} is not SEQ:HASH"))?;
        let seq = seq
            .parse::<i64>()
            .ok()
            .filter(|seq| *seq >= 1)
            .ok_or_else(|| format!("{seq:?} is not an entry's seq (1, 2, …)"))?;
        let hash = hash.to_ascii_lowercase();
        unhex(&hash).ok_or_else(|| format!("{hash:?} is not 64 hex digits"))?;
        Ok(Anchor { seq, hash })
    }
}

/// What is wrong with an entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `seq` is not the one after the entry before: entries were deleted (or the
    /// trail does not start at 1).
    Gap { expected: i64 },
    /// Its `prev_hash` is not the hash of the entry before it: that entry, or this
    /// one's link, was changed.
    ChainBroken,
    /// Its fields do not give its hash: it was changed after it was written.
    HashMismatch,
    /// A field is not of its type (the reason), so it cannot be hashed.
    Unreadable(String),
    /// The anchor's hash is not this entry's: it was rewritten.
    AnchorMismatch { anchor: String },
    /// The trail ends at `last` (`None`: it is empty), before the anchor's entry:
    /// its tail was cut.
    AnchorMissing { last: Option<i64> },
}

/// The first bad entry, by seq, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Broken {
    pub seq: i64,
    pub fault: Fault,
}

impl fmt::Display for Broken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seq = self.seq;
        match &self.fault {
            Fault::Gap { expected } => write!(
                f,
                "entry {seq}: gap in seq, entry {expected} is missing (deleted)"
            ),
            Fault::ChainBroken => write!(
                f,
                "entry {seq}: chain broken, its prev_hash is not the hash of the entry \
                 before it (that entry or this link was changed)"
            ),
            Fault::HashMismatch => write!(
                f,
                "entry {seq}: hash mismatch, its contents were changed after it was \
                 written"
            ),
            Fault::Unreadable(why) => write!(f, "entry {seq}: unreadable, {why}"),
            Fault::AnchorMismatch { anchor } => write!(
                f,
                "entry {seq}: its hash is not the anchor's {anchor} (the entry was \
                 rewritten, with every entry after it)"
            ),
            Fault::AnchorMissing { last: Some(last) } => write!(
                f,
                "entry {seq}: missing, the trail ends at entry {last} (its tail was cut)"
            ),
            Fault::AnchorMissing { last: None } => {
                write!(f, "entry {seq}: missing, the trail is empty (it was cut)")
            }
        }
    }
}

/// A trail that checked out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// How many entries.
    pub entries: u64,
    /// The last entry's seq, `now` and hash: note it as an [`Anchor`].
    pub last: Option<(i64, i64, String)>,
}

/// Checks stored entries one at a time, in seq order ([`Chain::check`]), then
/// [`Chain::end`].
#[derive(Clone, Debug)]
pub struct Chain {
    anchor: Option<Anchor>,
    entries: u64,
    last: Option<(i64, i64, String)>,
}

impl Chain {
    /// A check from the first entry on; `anchor`: an entry that must be there with
    /// that hash.
    pub fn new(anchor: Option<Anchor>) -> Chain {
        Chain {
            anchor,
            entries: 0,
            last: None,
        }
    }

    /// Checks the next entry. Errors: the first fault found, in this order: a gap,
    /// a broken link, a hash mismatch, the anchor's hash.
    pub fn check(&mut self, entry: &Sealed) -> Result<(), Broken> {
        let broken = |fault| Broken {
            seq: entry.seq,
            fault,
        };
        let (expected, prev) = match &self.last {
            Some((seq, _, hash)) => (seq + 1, hash.as_str()),
            None => (1, GENESIS),
        };
        if entry.seq != expected {
            return Err(broken(Fault::Gap { expected }));
        }
        if entry.prev_hash != prev {
            return Err(broken(Fault::ChainBroken));
        }
        let hash = hash(
            prev,
            entry.seq,
            entry.now,
            &entry.identity,
            &entry.kind,
            &entry.body,
        );
        if hash.as_deref() != Some(entry.hash.as_str()) {
            return Err(broken(Fault::HashMismatch));
        }
        if let Some(anchor) = self.anchor.as_ref().filter(|a| a.seq == entry.seq) {
            if anchor.hash != entry.hash {
                return Err(broken(Fault::AnchorMismatch {
                    anchor: anchor.hash.clone(),
                }));
            }
        }
        self.entries += 1;
        self.last = Some((entry.seq, entry.now, entry.hash.clone()));
        Ok(())
    }

    /// The check of the whole trail, once every entry passed [`Chain::check`].
    /// Errors: the anchor's entry is past the last one.
    pub fn end(self) -> Result<Verified, Broken> {
        let last = self.last.as_ref().map(|(seq, _, _)| *seq);
        if let Some(anchor) = self.anchor.filter(|a| Some(a.seq) > last) {
            return Err(Broken {
                seq: anchor.seq,
                fault: Fault::AnchorMissing { last },
            });
        }
        Ok(Verified {
            entries: self.entries,
            last: self.last,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_model::{IdentityId, Timestamp};

    fn entry(grant: u64) -> AuditEntry {
        AuditEntry {
            now: Timestamp(1_700_000_000_000 + grant),
            identity: IdentityId("work".into()),
            event: AuditEvent::GrantEnded {
                grant,
                why: "expired".into(),
                by: None,
            },
        }
    }

    /// Entries 1 to `n`, sealed one after the other.
    fn trail(n: i64) -> Vec<Sealed> {
        let mut rows: Vec<Sealed> = Vec::new();
        for seq in 1..=n {
            let prev = rows.last().map_or(GENESIS, |r| r.hash.as_str()).to_owned();
            rows.push(seal(seq, &prev, &entry(seq as u64)));
        }
        rows
    }

    fn verify(rows: &[Sealed], anchor: Option<Anchor>) -> Result<Verified, Broken> {
        let mut chain = Chain::new(anchor);
        for row in rows {
            chain.check(row)?;
        }
        chain.end()
    }

    #[test]
    fn an_entry_is_stored_as_its_kind_and_its_fields_and_read_back() {
        let sealed = seal(1, GENESIS, &entry(3));
        assert_eq!(
            (sealed.kind.as_str(), sealed.body.as_str()),
            ("grant_ended", r#"{"by":null,"grant":3,"why":"expired"}"#)
        );
        assert_eq!(
            (sealed.seq, sealed.now, sealed.identity.as_str()),
            (1, 1_700_000_000_003, "work")
        );
        assert_eq!(sealed.event(), Some(entry(3).event));
        let unknown = Sealed {
            kind: "from_a_newer_version".into(),
            ..sealed.clone()
        };
        assert_eq!(unknown.event(), None);
        for body in ["[]", "not json"] {
            let changed = Sealed {
                body: body.into(),
                ..sealed.clone()
            };
            assert_eq!(changed.event(), None, "{body}");
        }
    }

    #[test]
    fn the_hash_is_sha256_of_the_previous_hash_and_the_entrys_canonical_bytes() {
        // The canonical bytes spelled out (see the module's doc), hashed by sha2.
        let mut bytes = vec![0u8; 32];
        bytes.extend_from_slice(b"matrix-channel audit v1\0");
        bytes.extend_from_slice(&7i64.to_be_bytes());
        bytes.extend_from_slice(&1_000i64.to_be_bytes());
        for field in ["work", "revoked", "{}"] {
            bytes.extend_from_slice(&(field.len() as u64).to_be_bytes());
            bytes.extend_from_slice(field.as_bytes());
        }
        let expected = hex(&Sha256::digest(&bytes));
        assert_eq!(
            hash(GENESIS, 7, 1_000, "work", "revoked", "{}").as_deref(),
            Some(expected.as_str())
        );
        assert_eq!(expected.len(), 64);
        // Every field counts, and the lengths keep the fields apart.
        let base = hash(GENESIS, 7, 1_000, "work", "revoked", "{}");
        let other = format!("{}1", &GENESIS[..63]);
        for changed in [
            hash(&other, 7, 1_000, "work", "revoked", "{}"),
            hash(GENESIS, 8, 1_000, "work", "revoked", "{}"),
            hash(GENESIS, 7, 1_001, "work", "revoked", "{}"),
            hash(GENESIS, 7, 1_000, "wor", "krevoked", "{}"),
            hash(GENESIS, 7, 1_000, "work", "revoked{", "}"),
        ] {
            assert_ne!(changed, base);
        }
        assert_eq!(hash("00", 7, 1_000, "work", "revoked", "{}"), None);
    }

    #[test]
    fn hex_digits_are_read_in_pairs_in_either_case_and_nothing_else_is() {
        let mut expected = [0u8; 32];
        expected[0] = 0xab;
        expected[31] = 0x0f;
        let text = format!("ab{}0f", "0".repeat(60));
        assert_eq!(unhex(&text), Some(expected));
        assert!(is_hash(&text) && is_hash(GENESIS));
        assert_eq!(unhex(&text.to_uppercase()), Some(expected));
        assert_eq!(hex(&expected), text);
        for bad in [
            format!("{text}00"),
            text[..62].to_owned(),
            format!("g{}", &text[1..]),
            format!("é{}", &text[2..]),
            format!("+{}", &text[1..]),
        ] {
            assert_eq!(unhex(&bad), None, "{bad}");
            assert!(!is_hash(&bad), "{bad}");
        }
    }

    #[test]
    fn a_trail_sealed_in_order_verifies_with_its_count_and_last_hash() {
        let rows = trail(3);
        assert_eq!(rows[0].prev_hash, GENESIS);
        assert_eq!(rows[2].prev_hash, rows[1].hash);
        assert_eq!(
            verify(&rows, None),
            Ok(Verified {
                entries: 3,
                last: Some((3, 1_700_000_000_003, rows[2].hash.clone()))
            })
        );
        assert_eq!(
            verify(&[], None),
            Ok(Verified {
                entries: 0,
                last: None
            })
        );
    }

    #[test]
    fn a_changed_entry_is_a_hash_mismatch_and_a_resealed_one_breaks_the_next_link() {
        let mut rows = trail(4);
        rows[1].body = rows[1].body.replace("expired", "operator");
        assert_eq!(
            verify(&rows, None),
            Err(Broken {
                seq: 2,
                fault: Fault::HashMismatch
            })
        );
        for change in [
            |r: &mut Sealed| r.now += 1,
            |r: &mut Sealed| r.identity.push('x'),
            |r: &mut Sealed| r.kind.push('x'),
        ] {
            let mut rows = trail(4);
            change(&mut rows[1]);
            assert_eq!(verify(&rows, None).unwrap_err().fault, Fault::HashMismatch);
        }
        // Resealed with its hash recomputed: the next entry's link no longer holds.
        let mut rows = trail(4);
        rows[1] = seal(2, &rows[0].hash.clone(), &entry(9));
        assert_eq!(
            verify(&rows, None),
            Err(Broken {
                seq: 3,
                fault: Fault::ChainBroken
            })
        );
        let mut rows = trail(2);
        rows[0].prev_hash = format!("{}1", &GENESIS[..63]);
        assert_eq!(verify(&rows, None).unwrap_err().fault, Fault::ChainBroken);
    }

    #[test]
    fn a_deleted_entry_is_a_gap_named_at_the_entry_after_it() {
        let mut rows = trail(5);
        rows.remove(2);
        assert_eq!(
            verify(&rows, None),
            Err(Broken {
                seq: 4,
                fault: Fault::Gap { expected: 3 }
            })
        );
        let rows = trail(3);
        assert_eq!(
            verify(&rows[1..], None),
            Err(Broken {
                seq: 2,
                fault: Fault::Gap { expected: 1 }
            }),
            "the first entry deleted"
        );
    }

    #[test]
    fn an_anchor_proves_its_entry_is_unchanged_and_still_there() {
        let rows = trail(4);
        let anchor = |seq: i64, hash: &str| {
            Some(Anchor {
                seq,
                hash: hash.to_owned(),
            })
        };
        assert!(verify(&rows, anchor(2, &rows[1].hash)).is_ok());
        assert_eq!(
            verify(&rows, anchor(2, &rows[2].hash)),
            Err(Broken {
                seq: 2,
                fault: Fault::AnchorMismatch {
                    anchor: rows[2].hash.clone()
                }
            })
        );
        // Cut after entry 2: every link holds, the anchor at 4 does not.
        assert!(verify(&rows[..2], None).is_ok());
        assert_eq!(
            verify(&rows[..2], anchor(4, &rows[3].hash)),
            Err(Broken {
                seq: 4,
                fault: Fault::AnchorMissing { last: Some(2) }
            })
        );
        assert!(verify(&rows, anchor(4, &rows[3].hash)).is_ok());
        assert_eq!(
            verify(&[], anchor(1, &rows[0].hash)),
            Err(Broken {
                seq: 1,
                fault: Fault::AnchorMissing { last: None }
            })
        );
    }

    #[test]
    fn an_anchor_is_read_as_seq_colon_hash() {
        let hash = "AB".repeat(32);
        assert_eq!(
            Anchor::parse(&format!("12:{hash}")),
            Ok(Anchor {
                seq: 12,
                hash: "ab".repeat(32)
            })
        );
        for bad in [
            hash.clone(),
            format!("0:{hash}"),
            format!("x:{hash}"),
            "12:abc".to_owned(),
        ] {
            assert!(Anchor::parse(&bad).is_err(), "{bad}");
        }
        assert!(Anchor::parse(&format!("1:{hash}")).is_ok());
    }

    #[test]
    fn a_fault_names_its_entry_and_what_is_wrong() {
        let broken = |seq, fault| Broken { seq, fault }.to_string();
        assert_eq!(
            broken(4, Fault::Gap { expected: 3 }),
            "entry 4: gap in seq, entry 3 is missing (deleted)"
        );
        assert!(broken(5, Fault::ChainBroken).starts_with("entry 5: chain broken"));
        assert!(broken(6, Fault::HashMismatch).starts_with("entry 6: hash mismatch"));
        assert_eq!(
            broken(7, Fault::Unreadable("its body is not text".into())),
            "entry 7: unreadable, its body is not text"
        );
        assert!(broken(
            8,
            Fault::AnchorMismatch {
                anchor: "ab".into()
            }
        )
        .starts_with("entry 8: its hash is not the anchor's ab"));
        assert_eq!(
            broken(9, Fault::AnchorMissing { last: Some(2) }),
            "entry 9: missing, the trail ends at entry 2 (its tail was cut)"
        );
        assert_eq!(
            broken(1, Fault::AnchorMissing { last: None }),
            "entry 1: missing, the trail is empty (it was cut)"
        );
    }
}
