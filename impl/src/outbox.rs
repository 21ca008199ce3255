//! The bytes of the files `send_file` loaded, while the model judges the write that
//! names them. [`mc_model::AgentWrite::File`] carries the file's SHA-256, not its
//! bytes (a model input stays small and is journaled); the tool stages the bytes
//! here under that digest before it asks, and `write::perform` sends the staged
//! bytes with the very digest the model judged, or nothing.
//!
//! An entry lives while a call holds its [`Staged`] guard: two calls staging the
//! same bytes share one entry, which goes when the last guard drops.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One identity's staged files, keyed by the lowercase hex SHA-256 of their bytes.
/// Cloning shares the same outbox.
#[derive(Clone, Default)]
pub struct Outbox {
    files: Arc<Mutex<HashMap<String, Entry>>>,
}

struct Entry {
    bytes: Arc<Vec<u8>>,
    /// How many [`Staged`] guards hold it.
    holders: usize,
}

/// A call's hold on its staged bytes; dropping it releases them.
pub struct Staged {
    outbox: Outbox,
    sha256: String,
}

impl Staged {
    /// The lowercase hex SHA-256 of the staged bytes (64 characters).
    pub fn sha256(&self) -> &str {
        &self.sha256
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        let mut files = self.outbox.lock();
        if let Some(entry) = files.get_mut(&self.sha256) {
            entry.holders -= 1;
            if entry.holders == 0 {
                files.remove(&self.sha256);
            }
        }
    }
}

/// The lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    Sha256::digest(bytes)
        .iter()
        .fold(String::with_capacity(64), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        })
}

impl Outbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.files
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Stages `bytes` under their SHA-256, which this computes (a digest is never
    /// taken from the caller). Held until the guard drops.
    pub fn stage(&self, bytes: Vec<u8>) -> Staged {
        let sha256 = sha256_hex(&bytes);
        let mut files = self.lock();
        files
            .entry(sha256.clone())
            .or_insert_with(|| Entry {
                bytes: Arc::new(bytes),
                holders: 0,
            })
            .holders += 1;
        Staged {
            outbox: self.clone(),
            sha256,
        }
    }

    /// The staged bytes whose SHA-256 is `sha256`, if a call still holds them.
    pub fn get(&self, sha256: &str) -> Option<Arc<Vec<u8>>> {
        self.lock().get(sha256).map(|entry| entry.bytes.clone())
    }

    /// How many distinct files are staged.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staged_bytes_are_found_by_their_own_digest_until_the_last_holder_lets_go() {
        let outbox = Outbox::default();
        // SHA-256("abc"), FIPS 180-2 appendix B.1.
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        let first = outbox.stage(b"abc".to_vec());
        assert_eq!(first.sha256(), abc);
        let second = outbox.stage(b"abc".to_vec());
        let other = outbox.stage(b"abd".to_vec());
        assert_eq!(outbox.len(), 2);
        assert_eq!(
            outbox.get(abc).as_deref().map(Vec::as_slice),
            Some(&b"abc"[..])
        );
        assert_ne!(other.sha256(), abc);

        drop(first);
        assert!(outbox.get(abc).is_some(), "the second call still holds it");
        drop(second);
        assert!(outbox.get(abc).is_none(), "released with its last holder");
        assert_eq!(outbox.len(), 1);
        drop(other);
        assert_eq!(outbox.len(), 0);
    }

    #[test]
    fn a_clone_shares_the_staged_files() {
        let outbox = Outbox::default();
        let staged = outbox.stage(vec![0; 10]);
        assert!(outbox.clone().get(staged.sha256()).is_some());
        assert_eq!(sha256_hex(&[0; 10]), staged.sha256());
        assert!(outbox.get(&sha256_hex(&[0; 11])).is_none());
    }
}
