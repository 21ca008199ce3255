//! Matrix through matrix-sdk: one client per identity, its login and persistent
//! session, the sync loop whose handlers turn events into model inputs, and the
//! Matrix half of the engine's [`crate::engine::Wire`].
//!
//! Facts this code relies on (measured against Synapse 1.163, see AGENTS.md):
//! `restore_session` needs the same sqlite store dir it was created with; the first
//! sync of a new device replays recent history to handlers (so it runs before the
//! handlers are added); our own events come back to our handlers (the model drops
//! them as `OwnEvent`); an event redacted before it was seen arrives redacted.

use crate::config::IdentitySettings;
use crate::decode::{self, Decoded};
use crate::engine::EngineHandle;
use crate::store::Store;
use anyhow::{anyhow, Context as _};
use matrix_sdk::authentication::matrix::MatrixSession;
use matrix_sdk::config::SyncSettings;
use matrix_sdk::event_handler::RawEvent;
use matrix_sdk::ruma::api::client::filter::{FilterDefinition, RoomEventFilter, RoomFilter};
use matrix_sdk::ruma::api::client::sync::sync_events::v3::Filter;
use matrix_sdk::ruma::events::room::member::{MembershipState, StrippedRoomMemberEvent};
use matrix_sdk::ruma::events::AnySyncTimelineEvent;
use matrix_sdk::{Client, Room, RoomState};
use mc_model::{IdentityId, Input, Membership, UserId};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

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
}

/// Records `token` as the position up to which every event is in the model.
fn save_handled_position(store: &Store, name: &str, token: &str) -> anyhow::Result<()> {
    if let Some(json) = store.matrix_session(name)? {
        let mut stored: StoredSession = serde_json::from_str(&json)?;
        stored.synced = true;
        stored.sync_token = Some(token.to_string());
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

/// Whether the identity has a stored Matrix session.
pub fn is_logged_in(store: &Store, name: &str) -> anyhow::Result<bool> {
    Ok(store.matrix_session(name)?.is_some())
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
    pub trust: crate::crypto::DeviceTrust,
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
        },
        stored.synced,
    ))
}

fn sync_filter() -> Filter {
    let mut timeline = RoomEventFilter::default();
    timeline.limit = Some(50u32.into());
    let mut room = RoomFilter::default();
    room.timeline = timeline;
    let mut definition = FilterDefinition::default();
    definition.room = room;
    // Presence updates wake the long poll for nothing (measured: a third of the
    // sends landed ~700 ms late without this).
    definition.presence.not_types = vec!["*".to_string()];
    Filter::FilterDefinition(definition)
}

/// Starts the identity: the first sync (skipping history on a new device), the
/// handlers, then the sync loop in a task. Returns when the first sync is done.
pub async fn start(
    store: &Store,
    identity: &Identity,
    synced: bool,
    engine: EngineHandle,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let client = identity.client.clone();
    let name = identity.name.clone();
    let settings = SyncSettings::default().filter(sync_filter());
    if !synced {
        // A new device's first sync replays recent history: not input.
        let first = client
            .sync_once(settings.clone().timeout(Duration::ZERO))
            .await
            .with_context(|| format!("identity {name}: first sync"))?;
        save_handled_position(store, &name, &first.next_batch)?;
    }
    report_rooms(identity, &engine).await;
    add_handlers(identity, engine.clone());
    add_redecryption(identity, engine.clone())
        .with_context(|| format!("identity {name}: the event cache"))?;
    // Catch up on what happened while the server was down, before saying ready.
    let response = client
        .sync_once(settings.clone().timeout(Duration::ZERO))
        .await
        .with_context(|| format!("identity {name}: catch-up sync"))?;
    handled(&engine, store, &name, &response.next_batch).await?;
    let mut settings = settings.token(response.next_batch);
    let store = store.clone();
    Ok(tokio::spawn(async move {
        // `Client::sync` is this loop without the wait for the engine.
        let mut backoff = Duration::from_secs(1);
        loop {
            match client.sync_once(settings.clone()).await {
                Ok(response) => {
                    if let Err(e) = handled(&engine, &store, &name, &response.next_batch).await {
                        tracing::warn!(identity = %name, "{e:#}");
                        return;
                    }
                    settings = settings.token(response.next_batch);
                    backoff = Duration::from_secs(1);
                }
                Err(e) => {
                    tracing::warn!(identity = %name, "sync failed, retrying in {backoff:?}: {e}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
            }
        }
    }))
}

/// After a sync response's handlers ran (they hand their inputs to the engine):
/// waits until the engine has handled and persisted those inputs, then records the
/// response's position as ours. A process that dies before that syncs that
/// response again on restart (see [`rewind_sync_position`]).
async fn handled(
    engine: &EngineHandle,
    store: &Store,
    name: &str,
    next_batch: &str,
) -> anyhow::Result<()> {
    engine
        .read(|_| ())
        .await
        .map_err(|e| anyhow!("identity {name}: {e}; the sync stops"))?;
    save_handled_position(store, name, next_batch)
        .with_context(|| format!("identity {name}: saving the sync position"))
}

/// Tells the model what the Matrix store knows of each room when the server starts
/// (before the catch-up sync, whose events follow): joined, invited (by whom),
/// left. The model joins pending invites of allowed senders (a join cut by the last
/// stop is tried again).
async fn report_rooms(identity: &Identity, engine: &EngineHandle) {
    let id = IdentityId(identity.name.clone());
    let me = UserId(identity.settings.user_id.to_string());
    for room in identity.client.rooms() {
        let membership = match room.state() {
            RoomState::Joined => Membership::Joined,
            RoomState::Invited => match room.invite_details().await {
                Ok(invite) => match invite.inviter {
                    Some(inviter) => Membership::Invited {
                        by: UserId(inviter.user_id().to_string()),
                    },
                    None => {
                        tracing::info!(room = %room.room_id(), "an invite without an inviter: not reported");
                        continue;
                    }
                },
                Err(e) => {
                    tracing::warn!(room = %room.room_id(), "reading an invite failed: {e}");
                    continue;
                }
            },
            RoomState::Banned => Membership::Banned,
            RoomState::Left | RoomState::Knocked => Membership::Left,
        };
        let _ = engine.submit(Input::Membership {
            identity: id.clone(),
            room: mc_model::RoomId(room.room_id().to_string()),
            event_id: None,
            user: me.clone(),
            membership,
        });
    }
}

/// A membership as the model names it (`knock` is not joined: [`Membership::Left`]).
fn membership_of(state: &MembershipState, sender: &matrix_sdk::ruma::UserId) -> Membership {
    match state {
        MembershipState::Invite => Membership::Invited {
            by: UserId(sender.to_string()),
        },
        MembershipState::Join => Membership::Joined,
        MembershipState::Ban => Membership::Banned,
        _ => Membership::Left,
    }
}

/// Every event the sync hands over becomes one model input, in the room's timeline
/// order: nothing is filtered here (the model drops what is not input, with a
/// reason). Invites come as stripped state, outside the timeline.
fn add_handlers(identity: &Identity, engine: EngineHandle) {
    let id = IdentityId(identity.name.clone());
    let invites = engine.clone();
    let invite_id = id.clone();
    identity
        .client
        .add_event_handler(move |ev: StrippedRoomMemberEvent, room: Room| {
            let engine = invites.clone();
            let id = invite_id.clone();
            async move {
                let _ = engine.submit(Input::Membership {
                    identity: id,
                    room: mc_model::RoomId(room.room_id().to_string()),
                    event_id: None,
                    user: UserId(ev.state_key.to_string()),
                    membership: membership_of(&ev.content.membership, &ev.sender),
                });
            }
        });
    identity.client.add_event_handler(
        move |_ev: AnySyncTimelineEvent, room: Room, raw: RawEvent| {
            let engine = engine.clone();
            let id = id.clone();
            async move {
                let input = timeline_input(&id, &room, raw.0.get()).await;
                let _ = engine.submit(input);
            }
        },
    );
}

/// Hands every event the SDK decrypts late (its room key came after the event: by
/// to-device message, forwarded, or from key backup) to the model as what it is,
/// through [`timeline_input`] like any timeline event. The model parked it when it
/// came undecryptable (`Input::Undecryptable`); event handlers do not fire again for
/// it, only matrix-sdk's redecryptor reports it (`RedecryptorReport::ResolvedUtds`),
/// which needs the event cache subscribed before the first sync.
fn add_redecryption(identity: &Identity, engine: EngineHandle) -> anyhow::Result<()> {
    use futures::StreamExt as _;
    use matrix_sdk::event_cache::RedecryptorReport;
    let client = identity.client.clone();
    client.event_cache().subscribe()?;
    let id = IdentityId(identity.name.clone());
    tokio::spawn(async move {
        let mut reports = client.event_cache().subscribe_to_decryption_reports();
        while let Some(report) = reports.next().await {
            match report {
                Ok(RedecryptorReport::ResolvedUtds { room_id, events }) => {
                    let Some(room) = client.get_room(&room_id) else {
                        tracing::warn!(identity = %id, room = %room_id, "decrypted events of an unknown room");
                        continue;
                    };
                    for event_id in events {
                        match room.event(&event_id, None).await {
                            Ok(event) => {
                                tracing::info!(identity = %id, room = %room_id, event = %event_id, "decrypted late");
                                let input =
                                    timeline_input(&id, &room, event.raw().json().get()).await;
                                let _ = engine.submit(input);
                            }
                            Err(e) => tracing::warn!(
                                identity = %id, room = %room_id, event = %event_id,
                                "an event decrypted late could not be read again: {e}"
                            ),
                        }
                    }
                }
                Ok(RedecryptorReport::BackupAvailable) => {
                    tracing::info!(identity = %id, "a room key backup became available");
                }
                Ok(RedecryptorReport::Lagging) | Err(_) => tracing::warn!(
                    identity = %id,
                    "missed some of matrix-sdk's decryption reports: an event decrypted late may be told as undecryptable"
                ),
            }
        }
    });
    Ok(())
}

/// What [`timeline_input`] needs from a room beyond the event itself: the room's
/// id, another event's JSON (a reply's parent) and a member's display name. A
/// joined [`Room`] in production; an in-memory room in the conformance tests.
#[async_trait::async_trait]
pub trait RoomView: Sync {
    /// The room id, `!opaque:server`.
    fn id(&self) -> mc_model::RoomId;
    /// The event's JSON as the homeserver serves it (`GET /rooms/{id}/event/{eventId}`,
    /// with bundled relations), `None` when it cannot be read.
    async fn event_json(&self, event_id: &str) -> Option<String>;
    /// The member's display name in this room, if they have one.
    async fn display_name(&self, user_id: &str) -> Option<String>;
}

#[async_trait::async_trait]
impl RoomView for Room {
    fn id(&self) -> mc_model::RoomId {
        mc_model::RoomId(self.room_id().to_string())
    }

    async fn event_json(&self, event_id: &str) -> Option<String> {
        fetch_raw(self, event_id).await
    }

    async fn display_name(&self, user_id: &str) -> Option<String> {
        let user = matrix_sdk::ruma::UserId::parse(user_id).ok()?;
        let member = self.get_member_no_sync(&user).await.ok()??;
        member.display_name().map(str::to_string)
    }
}

/// Decodes one timeline event into its model input, resolving what the model
/// cannot: a reply's parent (fetched from the homeserver) and the sender's display
/// name. Every event is one input: a membership ([`Input::Membership`]), and what is
/// no input of the core's (state, other types, malformed, or not even a readable
/// envelope) as [`Input::NotInput`], which the model drops with its reason. An event
/// the SDK could not decrypt is [`Input::Undecryptable`].
pub async fn timeline_input(identity: &IdentityId, room: &impl RoomView, raw: &str) -> Input {
    let decoded = match decode::decode_timeline_event(&room.id(), raw) {
        Ok(decoded) => decoded,
        Err(e) => {
            return Input::NotInput {
                identity: identity.clone(),
                room: room.id(),
                event_id: None,
                sender: None,
                what: format!("an event whose envelope is unreadable: {e}"),
            }
        }
    };
    match decoded {
        Decoded::Message(mut message) => {
            if let Some(target) = decode::reply_target(&message).cloned() {
                let parent = match room.event_json(&target.0).await {
                    Some(json) => decode::parent_from_event(&json),
                    None => None,
                };
                decode::set_reply_parent(&mut message, parent);
            }
            message.sender_name = room.display_name(&message.sender.0).await;
            Input::Message {
                identity: identity.clone(),
                message,
            }
        }
        Decoded::Reaction(reaction) => Input::Reaction {
            identity: identity.clone(),
            reaction,
        },
        Decoded::Redaction(redaction) => Input::Redaction {
            identity: identity.clone(),
            redaction,
        },
        Decoded::Member(member) => Input::Membership {
            identity: identity.clone(),
            room: member.room,
            event_id: Some(member.event_id),
            user: member.user,
            membership: member.membership,
        },
        Decoded::Undecryptable(mut event) => {
            event.sender_name = room.display_name(&event.sender.0).await;
            Input::Undecryptable {
                identity: identity.clone(),
                event,
            }
        }
        Decoded::Ignored(ignored) => Input::NotInput {
            identity: identity.clone(),
            room: room.id(),
            what: ignored.describe(),
            event_id: Some(ignored.event_id),
            sender: Some(ignored.sender),
        },
    }
}

/// Fetches an event's JSON from the homeserver, `None` when it cannot be read.
pub async fn fetch_raw(room: &Room, event_id: &str) -> Option<String> {
    let id = matrix_sdk::ruma::EventId::parse(event_id).ok()?;
    match room.event(&id, None).await {
        Ok(event) => Some(event.raw().json().get().to_string()),
        Err(e) => {
            tracing::debug!(%event_id, "fetching an event failed: {e}");
            None
        }
    }
}

/// Logs, once at start, whether the identity's device is cross-signed (when it is
/// not, strict clients share no room keys with it (MSC4153), and the line names the
/// command that fixes it) and whether server-side key backup is on.
pub async fn report_device_state(identity: Identity) {
    use crate::crypto::DeviceTrust;
    let name = &identity.name;
    identity
        .client
        .encryption()
        .wait_for_e2ee_initialization_tasks()
        .await;
    if identity.client.encryption().backups().are_enabled().await {
        tracing::info!(identity = %name, "key backup is on: new room keys go to the homeserver's backup");
    } else {
        tracing::info!(
            identity = %name,
            "key backup is off: room keys live only in this store (`matrix-channel recovery \
             enable --identity {name}` turns it on)"
        );
    }
    match crate::crypto::device_trust(&identity.client).await {
        Ok(DeviceTrust::CrossSigned) => {
            tracing::info!(identity = %name, "the device is cross-signed by its own identity")
        }
        Ok(DeviceTrust::NoCrossSigning) => tracing::warn!(
            identity = %name,
            "the account has no cross-signing keys, so clients that share room keys only with \
             cross-signed devices (Element's \"exclude insecure devices\") send this device \
             none: stop the server and run `matrix-channel login --identity {name}` (it asks \
             for the password once and sets up cross-signing)"
        ),
        Ok(DeviceTrust::NotSigned) => tracing::warn!(
            identity = %name,
            "the account has cross-signing keys that this store does not hold, so this device \
             is not cross-signed and strict clients send it no room keys: stop the server and \
             run `matrix-channel recovery restore --identity {name}` with the recovery key on \
             stdin"
        ),
        Err(e) => {
            tracing::warn!(identity = %name, "could not read the device's cross-signing state: {e:#}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
