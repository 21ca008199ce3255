//! Matrix through matrix-sdk: one client per identity, its login and persistent
//! session, the sync loop that turns every timeline event of every response (gaps
//! backfilled) into model inputs, and the Matrix half of the engine's
//! [`crate::engine::Wire`].
//!
//! This module holds the client, login, the stored session and its restore; the
//! sync loop and its gaps are in `sync`, what the store knows of each room at start
//! in `rooms`, a timeline event as its model input in `timeline`, and late
//! decryption, the sender's device and the device's cross-signing report in
//! `encryption`, the homeserver's search (a read the tools make) in `search`. The decisions among them that need no library (retry waits, gap
//! arithmetic, which input an event becomes, device trust) are in `mc_adapters`.
//!
//! Facts this code relies on (measured against Synapse 1.163, see AGENTS.md):
//! `restore_session` needs the same sqlite store dir it was created with; the first
//! sync of a new device replays recent history (so it is not handed over); our own
//! events come back in the timeline (the model drops them as `OwnEvent`); an event
//! redacted before it was seen arrives redacted; a timeline longer than the filter's
//! limit comes `limited` with a `prev_batch` to page back from.

mod encryption;
mod rooms;
mod search;
mod sync;
mod timeline;

pub use encryption::{report_device_state, sender_device};
pub use search::search_messages;
pub use sync::{start, TIMELINE_LIMIT};
pub use timeline::{fetch_raw, timeline_input, RoomView};

use crate::config::IdentitySettings;
use crate::health::SyncHealth;
use crate::store::Store;
use anyhow::{anyhow, Context as _};
use matrix_sdk::authentication::matrix::MatrixSession;
use matrix_sdk::Client;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What the server keeps of an identity's Matrix login, next to its sqlite stores.
#[derive(Serialize, Deserialize)]
struct StoredSession {
    session: MatrixSession,
    /// Whether the first sync (which replays history) has been done.
    synced: bool,
    /// The sync position up to which the engine has handled and persisted every
    /// event (see [`start`]); `None` before the first sync.
    #[serde(default)]
    sync_token: Option<String>,
    /// The last timeline event handed to the model in each room, by room id, saved
    /// with `sync_token`: where the backfill of a gap stops ([`sync`]'s backfill).
    #[serde(default)]
    last_events: BTreeMap<String, String>,
    /// The homeserver rejected this session's access token for good
    /// (`M_UNKNOWN_TOKEN`): the session counts as logged out, so `login` logs in a
    /// new device ([`is_logged_in`]).
    #[serde(default)]
    token_rejected: bool,
}

/// Records `token` as the position up to which every event is in the model, and
/// `last_events` (room id to event id) as the last event handed over per room.
fn save_handled_position(
    store: &Store,
    name: &str,
    token: &str,
    last_events: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    if let Some(json) = store.matrix_session(name)? {
        let mut stored: StoredSession = serde_json::from_str(&json)?;
        stored.synced = true;
        stored.sync_token = Some(token.to_string());
        stored.last_events.extend(last_events.clone());
        store.save_matrix_session(name, &serde_json::to_string(&stored)?)?;
    }
    Ok(())
}

/// The last event handed to the model per room, as saved with the sync position.
fn stored_last_events(store: &Store, name: &str) -> BTreeMap<String, String> {
    store
        .matrix_session(name)
        .ok()
        .flatten()
        .and_then(|json| serde_json::from_str::<StoredSession>(&json).ok())
        .map(|stored| stored.last_events)
        .unwrap_or_default()
}

/// Marks the stored session's token as rejected by the homeserver (see
/// [`StoredSession::token_rejected`]).
fn save_token_rejected(store: &Store, name: &str) -> anyhow::Result<()> {
    if let Some(json) = store.matrix_session(name)? {
        let mut stored: StoredSession = serde_json::from_str(&json)?;
        stored.token_rejected = true;
        store.save_matrix_session(name, &serde_json::to_string(&stored)?)?;
    }
    Ok(())
}

/// Sets matrix-sdk's stored sync position back to `token` (before
/// `restore_session`, which loads it). matrix-sdk persists a sync response's
/// position before it runs the event handlers, so the events of the last response
/// may never have reached the model when the process died; syncing again from our
/// own position delivers them again (the model drops what it already has). It must
/// be the SDK's position too: the SDK skips a response whose `next_batch` is its
/// stored one, which is what the homeserver answers when nothing newer happened.
async fn rewind_sync_position(client: &Client, token: &str) -> anyhow::Result<()> {
    use matrix_sdk::store::{StateStoreDataKey, StateStoreDataValue};
    client
        .state_store()
        .set_kv_data(
            StateStoreDataKey::SyncToken,
            StateStoreDataValue::SyncToken(token.to_string()),
        )
        .await
        .context("rewinding the stored sync position")?;
    Ok(())
}

/// Builds the identity's client on its persistent store (without logging in).
pub async fn build_client(
    store: &Store,
    name: &str,
    settings: &IdentitySettings,
) -> anyhow::Result<Client> {
    let dir = store.matrix_dir(name);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Client::builder()
        .homeserver_url(&settings.homeserver)
        .sqlite_store(&dir, None)
        .respect_login_well_known(false)
        .with_encryption_settings(crate::crypto::encryption_settings())
        .build()
        .await
        .with_context(|| format!("identity {name}: building the Matrix client"))
}

/// Whether the identity has a stored Matrix session whose access token the
/// homeserver has not rejected (a rejected one is replaced by the next `login`).
pub fn is_logged_in(store: &Store, name: &str) -> anyhow::Result<bool> {
    Ok(match store.matrix_session(name)? {
        Some(json) => !serde_json::from_str::<StoredSession>(&json)
            .map(|stored| stored.token_rejected)
            .unwrap_or(false),
        None => false,
    })
}

/// Moves the identity's matrix-sdk store aside when it holds anything: `login` runs
/// only when no session is stored, so such a store belongs to no session we know (a
/// login cut short after the SDK wrote its crypto account, or a lost database).
/// matrix-sdk refuses to log a new device in on it ("the account in the store doesn't
/// match"), after the homeserver created that device, so every retry would fail and
/// leave a device behind. Returns where it went.
fn set_aside_orphaned_store(store: &Store, name: &str) -> anyhow::Result<Option<PathBuf>> {
    let dir = store.matrix_dir(name);
    let used = std::fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some());
    if !used {
        return Ok(None);
    }
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let aside = dir.with_file_name(format!("matrix.orphaned-{secs}"));
    std::fs::rename(&dir, &aside)
        .with_context(|| format!("moving {} to {}", dir.display(), aside.display()))?;
    Ok(Some(aside))
}

/// What [`login`] did: the new device's id and its cross-signing state.
pub struct LoggedIn {
    pub device: String,
    pub trust: crate::crypto::OwnDeviceSigning,
}

/// Logs the identity in with a password, once: a new device whose session and keys
/// persist in the identity's store; then bootstraps cross-signing with the same
/// password if the account has none ([`crate::crypto::bootstrap_cross_signing`]), so
/// the device is signed by its own self-signing key. The password is not stored.
/// Errors: wrong password or user (the homeserver's message), unreachable homeserver,
/// an existing session (log in again only with a fresh store: reusing a device id
/// with a new crypto store forks its keys), or cross-signing refused (the session is
/// kept: `login` again completes it).
pub async fn login(
    store: &Store,
    name: &str,
    settings: &IdentitySettings,
    password: &str,
) -> anyhow::Result<LoggedIn> {
    if is_logged_in(store, name)? {
        return Err(anyhow!("identity {name} is already logged in"));
    }
    if let Some(aside) = set_aside_orphaned_store(store, name)? {
        tracing::warn!(
            "identity {name}: its Matrix store had no stored session (a login cut short, \
             or a lost database); it was moved to {} and a new device logs in",
            aside.display()
        );
    }
    let client = build_client(store, name, settings).await?;
    client
        .matrix_auth()
        .login_username(settings.user_id.as_str(), password)
        .initial_device_display_name("matrix-channel")
        .send()
        .await
        .with_context(|| format!("identity {name}: logging in as {}", settings.user_id))?;
    let session = client
        .matrix_auth()
        .session()
        .ok_or_else(|| anyhow!("identity {name}: no session after login"))?;
    if session.meta.user_id != settings.user_id {
        return Err(anyhow!(
            "identity {name}: logged in as {} but the config says {}",
            session.meta.user_id,
            settings.user_id
        ));
    }
    let device = session.meta.device_id.to_string();
    let stored = StoredSession {
        session,
        synced: false,
        sync_token: None,
        last_events: BTreeMap::new(),
        token_rejected: false,
    };
    store.save_matrix_session(name, &serde_json::to_string(&stored)?)?;
    let trust = crate::crypto::bootstrap_cross_signing(&client, password)
        .await
        .with_context(|| {
            format!(
                "identity {name}: logged in as device {device}, but setting up cross-signing \
                 failed (run `matrix-channel login --identity {name}` again to retry)"
            )
        })?;
    Ok(LoggedIn { device, trust })
}

/// A logged-in identity, syncing.
#[derive(Clone)]
pub struct Identity {
    pub name: String,
    pub client: Client,
    pub settings: IdentitySettings,
    /// What its sync loop last recorded (`/health`, `whoami`).
    pub health: SyncHealth,
    /// The files its `send_file` calls staged while the model judges them.
    pub outbox: crate::outbox::Outbox,
}

/// Restores the identity's session on its store for `serve`, and checks in the
/// background that its device is cross-signed: when it is not, the log says what to
/// run ([`report_device_state`]). Errors: those of [`restore_client`].
pub async fn restore(
    store: &Store,
    name: &str,
    settings: &IdentitySettings,
) -> anyhow::Result<(Identity, bool)> {
    let restored = restore_client(store, name, settings).await?;
    tokio::spawn(report_device_state(restored.0.clone()));
    Ok(restored)
}

/// Restores the identity's session on its store. Errors: not logged in (run
/// `matrix-channel login`), or the store cannot be opened.
pub async fn restore_client(
    store: &Store,
    name: &str,
    settings: &IdentitySettings,
) -> anyhow::Result<(Identity, bool)> {
    let json = store.matrix_session(name)?.ok_or_else(|| {
        anyhow!("identity {name} is not logged in: run `matrix-channel login --identity {name}`")
    })?;
    let stored: StoredSession = serde_json::from_str(&json)?;
    if stored.session.meta.user_id != settings.user_id {
        return Err(anyhow!(
            "identity {name}: the stored session is for {} but the config says {}",
            stored.session.meta.user_id,
            settings.user_id
        ));
    }
    let client = build_client(store, name, settings).await?;
    if let Some(token) = &stored.sync_token {
        rewind_sync_position(&client, token)
            .await
            .with_context(|| format!("identity {name}"))?;
    }
    client
        .restore_session(stored.session)
        .await
        .with_context(|| format!("identity {name}: restoring the Matrix session"))?;
    Ok((
        Identity {
            name: name.to_string(),
            client,
            settings: settings.clone(),
            health: SyncHealth::default(),
            outbox: crate::outbox::Outbox::default(),
        },
        stored.synced,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rejected_token_counts_as_logged_out_and_older_sessions_still_read() {
        let dir = std::env::temp_dir().join(format!("mc-matrix-{}", rand::random::<u64>()));
        let store = Store::open(&dir).unwrap();
        assert!(!is_logged_in(&store, "bot").unwrap());
        // A session saved before `last_events` and `token_rejected` existed.
        let session = MatrixSession {
            meta: matrix_sdk::SessionMeta {
                user_id: "@bot:hs".try_into().unwrap(),
                device_id: "DEV".into(),
            },
            tokens: matrix_sdk::SessionTokens {
                access_token: "syt_x".into(),
                refresh_token: None,
            },
        };
        let old = serde_json::json!({
            "session": session,
            "synced": true,
            "sync_token": "s1",
        });
        store.save_matrix_session("bot", &old.to_string()).unwrap();
        assert!(is_logged_in(&store, "bot").unwrap());
        assert!(stored_last_events(&store, "bot").is_empty());
        let last = BTreeMap::from([("!r:hs".to_string(), "$e".to_string())]);
        save_handled_position(&store, "bot", "s2", &last).unwrap();
        assert_eq!(stored_last_events(&store, "bot"), last);
        save_token_rejected(&store, "bot").unwrap();
        assert!(!is_logged_in(&store, "bot").unwrap());
        let stored: StoredSession =
            serde_json::from_str(&store.matrix_session("bot").unwrap().unwrap()).unwrap();
        assert_eq!(stored.sync_token.as_deref(), Some("s2"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_matrix_store_without_a_stored_session_is_moved_aside_before_a_login() {
        let dir = std::env::temp_dir().join(format!("mc-matrix-{}", rand::random::<u64>()));
        let store = Store::open(&dir).unwrap();
        // Nothing there, or an empty directory: nothing to move.
        assert!(set_aside_orphaned_store(&store, "bot").unwrap().is_none());
        std::fs::create_dir_all(store.matrix_dir("bot")).unwrap();
        assert!(set_aside_orphaned_store(&store, "bot").unwrap().is_none());
        // A crypto store left by a login that did not finish.
        let crypto = store.matrix_dir("bot").join("matrix-sdk-crypto.sqlite3");
        std::fs::write(&crypto, b"an Olm account for another device").unwrap();
        let aside = set_aside_orphaned_store(&store, "bot").unwrap().unwrap();
        assert!(!store.matrix_dir("bot").exists());
        assert_eq!(
            std::fs::read(aside.join("matrix-sdk-crypto.sqlite3")).unwrap(),
            b"an Olm account for another device"
        );
        assert_eq!(aside.parent(), store.matrix_dir("bot").parent());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
