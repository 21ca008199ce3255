//! The server's own SQLite database (`<store_dir>/matrix-channel.sqlite3`, through
//! rusqlite): bearer tokens (hashed), the model state, each identity's Matrix session,
//! MCP sessions and the SSE events kept for resumption.
//!
//! Each identity's matrix-sdk stores (state, crypto, event cache, media) live apart, in
//! `<store_dir>/identities/<name>/matrix/`, paired with the session kept here.
//!
//! Every call is one short statement or transaction under a mutex; callers on the
//! async runtime accept that brief block (SQLite in WAL mode, `synchronous = NORMAL`).

use rusqlite::{params, Connection, OptionalExtension};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A failure of the server's database.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("database: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("stored JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("creating {path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("locking {path}: {source}")]
    Lock {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the store {dir} is in use by another matrix-channel process ({holder}): \
         two processes on one store would run one Matrix device twice and fork its \
         keys; stop the other one first"
    )]
    InUse { dir: PathBuf, holder: String },
}

/// An exclusive lock on a store directory (`<store_dir>/lock`), held until dropped.
///
/// `serve` holds it for its whole life and `login` while it logs in: two processes on
/// one store would both sync one Matrix device (each with its own copy of the crypto
/// state, racing on one-time keys) and overwrite each other's model state. The lock
/// is an advisory `flock`, released by the kernel when the process dies, even by
/// SIGKILL. The file holds the holder's pid and command, for the error message.
pub struct StoreLock {
    _file: std::fs::File,
}

impl StoreLock {
    /// Takes the lock for `what` (say `serve`), creating the directory if needed.
    /// Errors: another process holds it ([`StoreError::InUse`], saying which), or the
    /// directory or file cannot be created.
    pub fn acquire(dir: &Path, what: &str) -> Result<StoreLock, StoreError> {
        use std::io::{Read as _, Seek as _, Write as _};
        create_private_dir(dir)?;
        let path = dir.join("lock");
        let lock_err = |source| StoreError::Lock {
            path: path.clone(),
            source,
        };
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(lock_err)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = match holder.trim() {
                    "" => "unknown pid".to_string(),
                    h => h.to_string(),
                };
                return Err(StoreError::InUse {
                    dir: dir.to_path_buf(),
                    holder,
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(lock_err(e)),
        }
        file.set_len(0).map_err(lock_err)?;
        file.rewind().map_err(lock_err)?;
        write!(file, "pid {}, {what}", std::process::id()).map_err(lock_err)?;
        file.flush().map_err(lock_err)?;
        Ok(StoreLock { _file: file })
    }
}

impl StoreLock {
    /// Who holds the lock of `dir` now (the pid and command it wrote), or `None` when
    /// no process does, without taking it or writing anything: no lock file, or one
    /// whose `flock` is free. For `stdio`, which attaches to a running `serve` and
    /// never owns the store. (It takes a shared lock for an instant: a `serve`
    /// starting in that instant would be refused, as by any other holder.)
    /// Errors: the lock file exists but cannot be opened or locked.
    pub fn holder(dir: &Path) -> Result<Option<String>, StoreError> {
        use std::io::Read as _;
        let path = dir.join("lock");
        let mut file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(StoreError::Lock { path, source }),
        };
        match file.try_lock_shared() {
            Ok(()) => {
                let _ = file.unlock();
                Ok(None)
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                Ok(Some(match holder.trim() {
                    "" => "unknown pid".to_string(),
                    h => h.to_string(),
                }))
            }
            Err(std::fs::TryLockError::Error(source)) => Err(StoreError::Lock { path, source }),
        }
    }
}

/// A token as listed: never the secret itself.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TokenInfo {
    /// Short public id (the first 12 hex digits of the hash), for `token revoke`.
    pub id: String,
    pub identity: String,
    pub label: String,
    /// Seconds since the Unix epoch.
    pub created_at: i64,
}

/// One stored SSE event (see [`crate::http::SqliteEventStore`]).
#[derive(Clone, Debug)]
pub struct StoredEvent {
    pub id: i64,
    pub stream: String,
    /// The JSON-RPC message, `None` for a priming event.
    pub message: Option<String>,
    pub retry_ms: Option<i64>,
}

/// The database handle; cheap to clone.
#[derive(Clone)]
pub struct Store {
    conn: Arc<Mutex<Connection>>,
    dir: PathBuf,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY,
    hash BLOB NOT NULL UNIQUE,
    identity TEXT NOT NULL,
    label TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS model_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS matrix_sessions (
    identity TEXT PRIMARY KEY,
    json TEXT NOT NULL
);
-- `label`: the room label the session brought (docs/protocol.md), or NULL; added to
-- older stores by `migrate`.
CREATE TABLE IF NOT EXISTS mcp_sessions (
    id TEXT PRIMARY KEY,
    identity TEXT NOT NULL,
    mount TEXT NOT NULL,
    label TEXT
);
CREATE TABLE IF NOT EXISTS mcp_session_states (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sse_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    stream TEXT NOT NULL,
    message TEXT,
    retry_ms INTEGER
);
CREATE INDEX IF NOT EXISTS sse_events_stream ON sse_events (stream, id);
-- The engine's own record of prompt posts, before the model re-issued them on a
-- restart (Input::Restarted): no longer read.
DROP TABLE IF EXISTS pending_posts;
CREATE TABLE IF NOT EXISTS sse_streams (
    stream TEXT PRIMARY KEY,
    session TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS sse_streams_session ON sse_streams (session);
";

/// The page size of a new store's database (bytes). A store created before keeps its
/// own (SQLite changes it only by a `VACUUM` outside WAL mode).
pub const STORE_PAGE_SIZE: i64 = 1024;

/// SSE events kept in all, across streams (see [`Store::append_event`]).
pub const EVENTS_KEPT_IN_ALL: i64 = 20_000;

/// Token secrets start with this, so a leaked one is recognisable.
pub const TOKEN_PREFIX: &str = "mct_";

fn token_hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The public id of a token secret (what `token list` shows and `token revoke` takes):
/// the first 12 hex digits of its SHA-256.
pub fn token_id(token: &str) -> String {
    hex(&token_hash(token)[..6])
}

/// Brings a store made by an older version to [`SCHEMA`]: `mcp_sessions.label`
/// (its sessions keep no label).
fn migrate(conn: &Connection) -> Result<(), StoreError> {
    let has_label = conn
        .prepare("SELECT 1 FROM pragma_table_info('mcp_sessions') WHERE name = 'label'")?
        .exists([])?;
    if !has_label {
        conn.execute_batch("ALTER TABLE mcp_sessions ADD COLUMN label TEXT")?;
    }
    Ok(())
}

/// Creates `dir` and its missing parents readable by their owner only (mode 0700):
/// the store holds the identities' Matrix sessions and access tokens. A directory that
/// exists keeps its mode; one that other users can enter gets a warning naming it.
/// Errors: the directory cannot be created.
fn create_private_dir(dir: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    let existed = dir.is_dir();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| StoreError::Dir {
            path: dir.to_path_buf(),
            source,
        })?;
    if existed {
        if let Ok(meta) = std::fs::metadata(dir) {
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                tracing::warn!(
                    "the store directory {} is open to other users (mode {mode:o}); it holds \
                     the identities' Matrix sessions: `chmod 700` it",
                    dir.display()
                );
            }
        }
    }
    Ok(())
}

impl Store {
    /// Opens (creating if needed, mode 0700: [`create_private_dir`]) the database in
    /// `dir`.
    /// Errors: the directory cannot be created or the database cannot be opened.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        create_private_dir(dir)?;
        let path = dir.join("matrix-channel.sqlite3");
        let conn = Connection::open(&path).map_err(|source| StoreError::Open {
            path: path.clone(),
            source,
        })?;
        // 1 KiB pages (only takes effect on a new database, before its first table):
        // a push appends one SSE event of a few hundred bytes, and each page it
        // touches is written whole to the write-ahead log (4 KiB pages wrote about
        // 4 KiB per input; the benchmark's `write calls per input by file`).
        // The busy timeout first: `token create` and `stdio` open this database while
        // `serve` has it open and may be writing.
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.pragma_update(None, "page_size", STORE_PAGE_SIZE)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.execute_batch(SCHEMA)?;
        migrate(&conn)?;
        Ok(Store {
            conn: Arc::new(Mutex::new(conn)),
            dir: dir.to_path_buf(),
        })
    }

    /// Where an identity's matrix-sdk stores live.
    pub fn matrix_dir(&self, identity: &str) -> PathBuf {
        self.dir.join("identities").join(identity).join("matrix")
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves the connection usable.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates a bearer token for `identity` and returns the secret, which is stored
    /// only as its SHA-256 hash (the secret has 256 random bits, so no slow hash is
    /// needed). Shape: `mct_` followed by 43 base64url characters.
    pub fn create_token(&self, identity: &str, label: &str) -> Result<String, StoreError> {
        use base64::Engine;
        let secret: [u8; 32] = rand::random();
        let token = format!(
            "{TOKEN_PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret)
        );
        let hash = token_hash(&token);
        let id = token_id(&token);
        self.conn().execute(
            "INSERT INTO tokens (id, hash, identity, label, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![id, hash, identity, label, unix_secs()],
        )?;
        Ok(token)
    }

    /// The identity a token belongs to, or `None` for an unknown or revoked token.
    pub fn token_identity(&self, token: &str) -> Result<Option<String>, StoreError> {
        let hash = token_hash(token);
        Ok(self
            .conn()
            .query_row(
                "SELECT identity FROM tokens WHERE hash = ?1",
                params![hash],
                |row| row.get(0),
            )
            .optional()?)
    }

    /// Every token, oldest first.
    pub fn list_tokens(&self) -> Result<Vec<TokenInfo>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT id, identity, label, created_at FROM tokens ORDER BY created_at, id",
        )?;
        let rows = stmt.query_map([], |row| {
            Ok(TokenInfo {
                id: row.get(0)?,
                identity: row.get(1)?,
                label: row.get(2)?,
                created_at: row.get(3)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Revokes the token with public id `id`. Returns whether one was revoked.
    pub fn revoke_token(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self
            .conn()
            .execute("DELETE FROM tokens WHERE id = ?1", params![id])?
            > 0)
    }

    /// The whole model state (JSON of [`mc_model::Channel`]) as a server before the
    /// journal saved it; read once, when the journal has no snapshot yet.
    pub fn legacy_model(&self) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn()
            .query_row("SELECT json FROM model_state WHERE id = 1", [], |row| {
                row.get(0)
            })
            .optional()?)
    }

    /// Forgets the legacy state once the journal holds a snapshot.
    pub fn drop_legacy_model(&self) -> Result<(), StoreError> {
        self.conn().execute("DELETE FROM model_state", [])?;
        Ok(())
    }

    /// Replaces the model state with `json` (of [`mc_model::Channel`]): the journal's
    /// snapshot is replaced and its records after it are dropped. For seeding a state
    /// (benchmarks, tests) while no server runs on this store.
    /// Errors: the journal cannot be opened or written.
    pub fn save_model(&self, json: &str) -> Result<(), crate::journal::JournalError> {
        let mut journal = crate::journal::Journal::open(&self.dir, Default::default())?;
        journal.replace_snapshot(json)
    }

    /// The journal's snapshot (JSON of [`mc_model::Channel`]), without the records
    /// after it (tests).
    /// Errors: the journal cannot be opened or read.
    pub fn load_model(&self) -> Result<Option<String>, crate::journal::JournalError> {
        let mut journal = crate::journal::Journal::open(&self.dir, Default::default())?;
        Ok(journal.recover()?.snapshot)
    }

    /// An identity's Matrix session (matrix-sdk `MatrixSession` JSON).
    pub fn matrix_session(&self, identity: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT json FROM matrix_sessions WHERE identity = ?1",
                params![identity],
                |row| row.get(0),
            )
            .optional()?)
    }

    pub fn save_matrix_session(&self, identity: &str, json: &str) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT INTO matrix_sessions (identity, json) VALUES (?1, ?2)
             ON CONFLICT (identity) DO UPDATE SET json = excluded.json",
            params![identity, json],
        )?;
        Ok(())
    }

    /// Binds an MCP session id to the identity and mount that created it, and the
    /// room label it brought (`None`: none). A session already bound keeps what it has.
    pub fn bind_mcp_session(
        &self,
        id: &str,
        identity: &str,
        mount: &str,
        label: Option<&str>,
    ) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT INTO mcp_sessions (id, identity, mount, label) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (id) DO NOTHING",
            params![id, identity, mount, label],
        )?;
        Ok(())
    }

    /// The room label an MCP session brought when it was created; `None` for none or
    /// an unknown session.
    pub fn mcp_session_label(&self, id: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT label FROM mcp_sessions WHERE id = ?1",
                params![id],
                |row| row.get(0),
            )
            .optional()?
            .flatten())
    }

    /// `(identity, mount)` an MCP session is bound to.
    pub fn mcp_session_owner(&self, id: &str) -> Result<Option<(String, String)>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT identity, mount FROM mcp_sessions WHERE id = ?1",
                params![id],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()?)
    }

    pub fn set_mcp_session_state(&self, id: &str, state: &str) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT INTO mcp_session_states (id, state) VALUES (?1, ?2)
             ON CONFLICT (id) DO UPDATE SET state = excluded.state",
            params![id, state],
        )?;
        Ok(())
    }

    pub fn mcp_session_state(&self, id: &str) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT state FROM mcp_session_states WHERE id = ?1",
                params![id],
                |row| row.get(0),
            )
            .optional()?)
    }

    pub fn delete_mcp_session(&self, id: &str) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute("DELETE FROM mcp_sessions WHERE id = ?1", params![id])?;
        tx.execute("DELETE FROM mcp_session_states WHERE id = ?1", params![id])?;
        tx.execute(
            "DELETE FROM sse_events WHERE stream IN
                 (SELECT stream FROM sse_streams WHERE session = ?1)
             OR substr(stream, 1, length(?1) + 1) = ?1 || ':'",
            params![id],
        )?;
        tx.execute("DELETE FROM sse_streams WHERE session = ?1", params![id])?;
        tx.commit()?;
        Ok(())
    }

    /// Appends an SSE event and returns its id (unique across restarts). Keeps the last
    /// `keep` events of the stream, and the last [`EVENTS_KEPT_IN_ALL`] events of all
    /// streams together: a request's stream (one per POST) is never appended to again,
    /// and a session's stream outlives its client, so a per-stream bound alone lets the
    /// table grow with every request and every session.
    pub fn append_event(
        &self,
        stream: &str,
        message: Option<&str>,
        retry_ms: Option<i64>,
        keep: i64,
    ) -> Result<i64, StoreError> {
        let conn = self.conn();
        conn.execute(
            "INSERT INTO sse_events (stream, message, retry_ms) VALUES (?1, ?2, ?3)",
            params![stream, message, retry_ms],
        )?;
        let id = conn.last_insert_rowid();
        if id % 64 == 0 {
            conn.execute(
                "DELETE FROM sse_events WHERE stream = ?1 AND id <= ?2 - ?3",
                params![stream, id, keep],
            )?;
            conn.execute(
                "DELETE FROM sse_events WHERE id <= ?1 - ?2",
                params![id, EVENTS_KEPT_IN_ALL],
            )?;
            conn.execute(
                "DELETE FROM sse_streams WHERE stream NOT IN (SELECT stream FROM sse_events)",
                [],
            )?;
        }
        Ok(id)
    }

    /// Records that the stream of event `event_id` is `session`'s: the session was
    /// handed that event. A stream already bound stays with its first session.
    pub fn bind_event_stream(&self, event_id: i64, session: &str) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT OR IGNORE INTO sse_streams (stream, session)
             SELECT stream, ?2 FROM sse_events WHERE id = ?1",
            params![event_id, session],
        )?;
        Ok(())
    }

    /// The stream of event `id`, if that stream is bound to `session`.
    pub fn session_event_stream(
        &self,
        id: i64,
        session: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT e.stream FROM sse_events e JOIN sse_streams s ON s.stream = e.stream
                 WHERE e.id = ?1 AND s.session = ?2",
                params![id, session],
                |row| row.get(0),
            )
            .optional()?)
    }

    /// The events of `stream` after `after`, oldest first.
    pub fn events_after(&self, stream: &str, after: i64) -> Result<Vec<StoredEvent>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT id, stream, message, retry_ms FROM sse_events
             WHERE stream = ?1 AND id > ?2 ORDER BY id",
        )?;
        let rows = stmt.query_map(params![stream, after], |row| {
            Ok(StoredEvent {
                id: row.get(0)?,
                stream: row.get(1)?,
                message: row.get(2)?,
                retry_ms: row.get(3)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

fn unix_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempdir::Dir, Store) {
        let dir = tempdir::Dir::new();
        let store = Store::open(dir.path()).unwrap();
        (dir, store)
    }

    /// A throw-away directory, removed on drop.
    mod tempdir {
        pub struct Dir(std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                let path = std::env::temp_dir().join(format!(
                    "mc-store-test-{}-{}",
                    std::process::id(),
                    rand::random::<u64>()
                ));
                std::fs::create_dir_all(&path).unwrap();
                Dir(path)
            }
            pub fn path(&self) -> &std::path::Path {
                &self.0
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn a_new_store_directory_and_its_new_parents_are_its_owners_only_and_an_old_one_keeps_its_mode()
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let dir = tempdir::Dir::new();
        let store_dir = dir.path().join("state").join("store");
        drop(Store::open(&store_dir).unwrap());
        assert_eq!(mode(&store_dir), 0o700);
        assert_eq!(mode(&dir.path().join("state")), 0o700);
        drop(StoreLock::acquire(&dir.path().join("locked"), "serve").unwrap());
        assert_eq!(mode(&dir.path().join("locked")), 0o700);

        let old = dir.path().join("old");
        std::fs::create_dir(&old).unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o755)).unwrap();
        drop(Store::open(&old).unwrap());
        assert_eq!(mode(&old), 0o755);
    }

    #[test]
    fn a_new_store_has_small_pages_and_an_older_one_keeps_its_own() {
        let page_size = |store: &Store| -> i64 {
            store
                .conn()
                .query_row("PRAGMA page_size", [], |row| row.get(0))
                .unwrap()
        };
        let (dir, store) = store();
        assert_eq!(page_size(&store), STORE_PAGE_SIZE);
        store.append_event("s", Some("a push"), None, 10).unwrap();
        drop(store);
        assert_eq!(
            page_size(&Store::open(dir.path()).unwrap()),
            STORE_PAGE_SIZE
        );
        // A store made with SQLite's default pages opens, keeps them and its events.
        let old = tempdir::Dir::new();
        {
            let conn = Connection::open(old.path().join("matrix-channel.sqlite3")).unwrap();
            conn.pragma_update(None, "page_size", 4096).unwrap();
            conn.pragma_update(None, "journal_mode", "WAL").unwrap();
            conn.execute_batch(SCHEMA).unwrap();
        }
        let store = Store::open(old.path()).unwrap();
        assert_eq!(page_size(&store), 4096);
        let id = store.append_event("s", Some("a push"), None, 10).unwrap();
        assert_eq!(id, 1);
    }

    #[test]
    fn a_store_is_locked_by_one_process_at_a_time_and_the_refusal_names_the_holder() {
        let dir = tempdir::Dir::new();
        let first = StoreLock::acquire(dir.path(), "serve").unwrap();
        let err = match StoreLock::acquire(dir.path(), "login") {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a second lock on a locked store was granted"),
        };
        assert!(err.contains("in use"), "{err}");
        assert!(
            err.contains(&format!("pid {}, serve", std::process::id())),
            "{err}"
        );
        drop(first);
        let again = StoreLock::acquire(dir.path(), "serve");
        assert!(again.is_ok(), "the lock is free once its holder is gone");
    }

    #[test]
    fn the_holder_of_a_lock_is_read_without_taking_it_or_writing() {
        let dir = tempdir::Dir::new();
        let missing = dir.path().join("never-made");
        assert_eq!(StoreLock::holder(&missing).unwrap(), None);
        assert!(!missing.exists(), "asking made no directory");
        let lock = StoreLock::acquire(dir.path(), "serve").unwrap();
        let held = format!("pid {}, serve", std::process::id());
        assert_eq!(StoreLock::holder(dir.path()).unwrap(), Some(held.clone()));
        assert!(
            StoreLock::acquire(dir.path(), "login").is_err(),
            "asking left the holder its lock"
        );
        drop(lock);
        assert_eq!(StoreLock::holder(dir.path()).unwrap(), None);
        let text = std::fs::read_to_string(dir.path().join("lock")).unwrap();
        assert_eq!(text, held, "asking wrote nothing into the lock file");
        assert!(
            StoreLock::acquire(dir.path(), "serve").is_ok(),
            "asking left no lock behind"
        );
    }

    #[test]
    fn a_tokens_id_is_the_one_listed_and_revokes_it() {
        let (_dir, store) = store();
        let token = store.create_token("bot", "stdio (pid 1)").unwrap();
        let listed = store.list_tokens().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].id, token_id(&token));
        assert_eq!(token_id(&token).len(), 12);
        assert!(store.revoke_token(&token_id(&token)).unwrap());
        assert_eq!(store.token_identity(&token).unwrap(), None);
    }

    #[test]
    fn a_token_maps_to_its_identity_and_is_stored_only_hashed() {
        let (dir, store) = store();
        let token = store.create_token("bot", "cli").unwrap();
        assert!(token.starts_with(TOKEN_PREFIX));
        assert_eq!(token.len(), TOKEN_PREFIX.len() + 43);
        assert_eq!(
            store.token_identity(&token).unwrap().as_deref(),
            Some("bot")
        );
        assert_eq!(store.token_identity("mct_wrong").unwrap(), None);
        let raw = std::fs::read(dir.path().join("matrix-channel.sqlite3")).unwrap();
        let secret = token.as_bytes();
        assert!(!raw.windows(secret.len()).any(|w| w == secret));
    }

    #[test]
    fn two_tokens_differ_and_revoking_one_keeps_the_other() {
        let (_dir, store) = store();
        let a = store.create_token("bot", "a").unwrap();
        let b = store.create_token("other", "b").unwrap();
        assert_ne!(a, b);
        let list = store.list_tokens().unwrap();
        assert_eq!(list.len(), 2);
        let a_id = list.iter().find(|t| t.label == "a").unwrap().id.clone();
        assert_eq!(a_id.len(), 12);
        assert!(store.revoke_token(&a_id).unwrap());
        assert!(!store.revoke_token(&a_id).unwrap());
        assert_eq!(store.token_identity(&a).unwrap(), None);
        assert_eq!(store.token_identity(&b).unwrap().as_deref(), Some("other"));
    }

    #[test]
    fn model_state_and_sessions_survive_reopening() {
        let dir = tempdir::Dir::new();
        {
            let store = Store::open(dir.path()).unwrap();
            store.save_model("{\"a\":1}").unwrap();
            store.save_model("{\"a\":2}").unwrap();
            store.save_matrix_session("bot", "{}").unwrap();
            store
                .bind_mcp_session("s1", "bot", "channel", Some("web"))
                .unwrap();
            store
                .bind_mcp_session("s2", "bot", "channel", None)
                .unwrap();
            store.set_mcp_session_state("s1", "{\"x\":1}").unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.load_model().unwrap().as_deref(), Some("{\"a\":2}"));
        assert_eq!(store.matrix_session("bot").unwrap().as_deref(), Some("{}"));
        assert_eq!(store.matrix_session("nobody").unwrap(), None);
        assert_eq!(
            store.mcp_session_owner("s1").unwrap(),
            Some(("bot".to_string(), "channel".to_string()))
        );
        assert_eq!(
            store.mcp_session_state("s1").unwrap().as_deref(),
            Some("{\"x\":1}")
        );
        assert_eq!(
            store.mcp_session_label("s1").unwrap().as_deref(),
            Some("web")
        );
        assert_eq!(store.mcp_session_label("s2").unwrap(), None);
        store.delete_mcp_session("s1").unwrap();
        assert_eq!(store.mcp_session_owner("s1").unwrap(), None);
        assert_eq!(store.mcp_session_label("s1").unwrap(), None);
    }

    #[test]
    fn a_store_made_before_session_labels_opens_and_its_sessions_have_no_label() {
        let dir = tempdir::Dir::new();
        {
            let conn = Connection::open(dir.path().join("matrix-channel.sqlite3")).unwrap();
            conn.execute_batch(
                "CREATE TABLE mcp_sessions (id TEXT PRIMARY KEY, identity TEXT NOT NULL, \
                 mount TEXT NOT NULL);
                 INSERT INTO mcp_sessions VALUES ('old', 'bot', 'channel');",
            )
            .unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(
            store.mcp_session_owner("old").unwrap(),
            Some(("bot".to_string(), "channel".to_string()))
        );
        assert_eq!(store.mcp_session_label("old").unwrap(), None);
        store
            .bind_mcp_session("new", "bot", "channel", Some("web"))
            .unwrap();
        assert_eq!(
            store.mcp_session_label("new").unwrap().as_deref(),
            Some("web")
        );
        drop(store);
        Store::open(dir.path()).expect("a migrated store opens again");
    }

    #[test]
    fn a_session_binding_is_never_overwritten() {
        let (_dir, store) = store();
        store
            .bind_mcp_session("s1", "bot", "channel", Some("web"))
            .unwrap();
        store
            .bind_mcp_session("s1", "evil", "mcp", Some("api"))
            .unwrap();
        assert_eq!(
            store.mcp_session_label("s1").unwrap().as_deref(),
            Some("web")
        );
        assert_eq!(
            store.mcp_session_owner("s1").unwrap(),
            Some(("bot".to_string(), "channel".to_string()))
        );
    }

    #[test]
    fn events_are_replayed_after_an_id_within_their_stream_only() {
        let (_dir, store) = store();
        let a1 = store
            .append_event("s:common", Some("1"), None, 100)
            .unwrap();
        let b1 = store
            .append_event("t:common", Some("x"), None, 100)
            .unwrap();
        let a2 = store
            .append_event("s:common", None, Some(3000), 100)
            .unwrap();
        assert!(a1 < b1 && b1 < a2);
        store.bind_event_stream(b1, "t").unwrap();
        assert_eq!(
            store.session_event_stream(b1, "t").unwrap().as_deref(),
            Some("t:common")
        );
        assert_eq!(store.session_event_stream(b1, "s").unwrap(), None);
        assert_eq!(
            store.session_event_stream(a1, "s").unwrap(),
            None,
            "unbound"
        );
        assert_eq!(store.session_event_stream(999, "t").unwrap(), None);
        let after = store.events_after("s:common", a1).unwrap();
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].id, a2);
        assert_eq!(after[0].message, None);
        assert_eq!(after[0].retry_ms, Some(3000));
        store.delete_mcp_session("s").unwrap();
        assert!(store.events_after("s:common", 0).unwrap().is_empty());
        assert_eq!(store.events_after("t:common", 0).unwrap().len(), 1);
    }

    #[test]
    fn events_of_all_streams_together_are_pruned_to_a_bound() {
        let (_dir, store) = store();
        let total = EVENTS_KEPT_IN_ALL + 200;
        let conn_count = |store: &Store| -> i64 {
            store
                .conn()
                .query_row("SELECT count(*) FROM sse_events", [], |r| r.get(0))
                .unwrap()
        };
        for i in 0..total {
            // One stream per request, as rmcp makes for every POST.
            let id = store
                .append_event(&format!("req-{i}"), Some("{}"), None, 2_000)
                .unwrap();
            store.bind_event_stream(id, "s").unwrap();
        }
        assert!(conn_count(&store) <= EVENTS_KEPT_IN_ALL + 64);
        let bindings: i64 = store
            .conn()
            .query_row("SELECT count(*) FROM sse_streams", [], |r| r.get(0))
            .unwrap();
        assert!(bindings <= EVENTS_KEPT_IN_ALL + 64, "{bindings}");
    }

    #[test]
    fn old_events_of_a_stream_are_pruned_to_the_kept_count() {
        let (_dir, store) = store();
        for i in 0..200 {
            store
                .append_event("s:common", Some(&i.to_string()), None, 10)
                .unwrap();
        }
        let left = store.events_after("s:common", 0).unwrap();
        assert!(left.len() < 200 && left.len() >= 10, "{}", left.len());
        assert_eq!(left.last().unwrap().message.as_deref(), Some("199"));
    }
}
