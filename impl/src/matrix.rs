//! Matrix through matrix-sdk: one client per identity, its login and persistent
//! session, the sync loop that turns every timeline event of every response (gaps
//! backfilled) into model inputs, and the Matrix half of the engine's
//! [`crate::engine::Wire`].
//!
//! Facts this code relies on (measured against Synapse 1.163, see AGENTS.md):
//! `restore_session` needs the same sqlite store dir it was created with; the first
//! sync of a new device replays recent history (so it is not handed over); our own
//! events come back in the timeline (the model drops them as `OwnEvent`); an event
//! redacted before it was seen arrives redacted; a timeline longer than the filter's
//! limit comes `limited` with a `prev_batch` to page back from.

use crate::config::IdentitySettings;
use crate::decode::{self, Decoded};
use crate::engine::EngineHandle;
use crate::health::SyncHealth;
use crate::store::Store;
use anyhow::{anyhow, Context as _};
use matrix_sdk::authentication::matrix::MatrixSession;
use matrix_sdk::config::SyncSettings;
use matrix_sdk::deserialized_responses::{EncryptionInfo, VerificationLevel, VerificationState};
use matrix_sdk::ruma::api::client::filter::{FilterDefinition, RoomEventFilter, RoomFilter};
use matrix_sdk::ruma::api::client::sync::sync_events::v3::Filter;
use matrix_sdk::ruma::events::room::member::{MembershipState, StrippedRoomMemberEvent};
use matrix_sdk::{Client, Room, RoomState};
use mc_adapters::gap::GapPlan;
use mc_model::{DeviceTrust, IdentityId, Input, Membership, UserId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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
    /// The last timeline event handed to the model in each room, by room id, saved
    /// with `sync_token`: where the backfill of a gap stops ([`Syncer::backfill`]).
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
        },
        stored.synced,
    ))
}

/// The `/sync` filter: at most [`TIMELINE_LIMIT`] timeline events per room (a
/// longer stretch comes `limited`, and the loop backfills the gap), no presence.
fn sync_filter() -> Filter {
    let mut timeline = RoomEventFilter::default();
    timeline.limit = Some(TIMELINE_LIMIT.into());
    let mut room = RoomFilter::default();
    room.timeline = timeline;
    let mut definition = FilterDefinition::default();
    definition.room = room;
    // Presence updates wake the long poll for nothing (measured: a third of the
    // sends landed ~700 ms late without this).
    definition.presence.not_types = vec!["*".to_string()];
    Filter::FilterDefinition(definition)
}

/// Timeline events per room in one sync response (the filter's `limit`).
pub const TIMELINE_LIMIT: u32 = 50;

/// The most events one gap is backfilled with. A longer gap is cut: the newest
/// [`GAP_BUDGET`] are handed to the model and the cut is logged (WARN) with the
/// room and the oldest event handed over.
pub const GAP_BUDGET: usize = 1_000;

/// Events per `/messages` page while backfilling.
const GAP_PAGE: u32 = 100;

/// Starts the identity: the first sync (skipping history on a new device), what the
/// store knows of each room ([`report_rooms`]), then the sync loop in a task
/// ([`Syncer::run`]). Returns when the loop's first sync (the catch-up on what
/// happened while the server was down) succeeded or failed: a homeserver that is
/// down, or a rejected token, does not stop `serve` (`/health` says so, and the loop
/// retries or stops as [`Syncer::run`] says). Errors: the first sync of a new
/// device failed, or the event cache could not start.
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
        save_handled_position(store, &name, &first.next_batch, &BTreeMap::new())?;
        identity.health.synced();
    }
    report_rooms(identity, &engine).await;
    add_redecryption(identity, engine.clone())
        .with_context(|| format!("identity {name}: the event cache"))?;
    let syncer = Syncer {
        client,
        id: IdentityId(name.clone()),
        me: identity.settings.user_id.to_string(),
        name,
        engine,
        store: store.clone(),
        health: identity.health.clone(),
        last_events: stored_last_events(store, &identity.name),
    };
    let (ready, first_done) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(syncer.run(settings, ready));
    let _ = first_done.await;
    Ok(task)
}

/// How the sync loop waits after a failed sync.
///
/// The long poll backs off exponentially, from [`Retry::FIRST`] doubling to
/// [`Retry::MAX`], so a homeserver that answers with errors (5xx, 429) is not
/// hammered. But when it did not answer at all (connection refused, timeout: it is
/// down or restarting), the loop also probes `GET /_matrix/client/versions` (no
/// auth, no side effect, answered by every homeserver) every [`Retry::PROBE`], and
/// syncs at once when a probe answers: the first message after the homeserver is
/// back is then handed over within about `PROBE` plus one sync round trip (the 2 s
/// bound of issue 12), however long the outage was. Probing costs one tiny request
/// a second to a host that is down; a constant 1 s retry of the sync itself would
/// cost the same while down, but would also retry a homeserver that refuses (5xx)
/// every second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Retry {
    next: Duration,
}

impl Retry {
    const FIRST: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(30);
    const PROBE: Duration = Duration::from_secs(1);
    /// A probe that got no answer within this counts as unanswered.
    const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

    fn new() -> Self {
        Retry { next: Self::FIRST }
    }

    /// The wait before the next sync attempt; the one after it is doubled, up to
    /// [`Retry::MAX`].
    fn backoff(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        wait
    }
}

/// How long the next sync may long-poll (`/sync`'s `timeout`).
///
/// The first sync of the loop catches up on what happened while the server was
/// down, so it does not wait for new events (`timeout=0`); after a success the loop
/// long-polls ([`LongPoll::LONG`]). After a failure the next sync catches up again:
/// a long poll would hold the answer of a homeserver that is back until something
/// new happens (up to 30 s), and `/health` would read `retrying` all that time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LongPoll {
    timeout: Duration,
}

impl LongPoll {
    /// matrix-sdk's `SyncSettings` default.
    const LONG: Duration = Duration::from_secs(30);

    fn new() -> Self {
        LongPoll {
            timeout: Duration::ZERO,
        }
    }

    /// A sync succeeded: the next one long-polls.
    fn succeeded(&mut self) {
        self.timeout = Self::LONG;
    }

    /// A sync failed: the next one catches up.
    fn failed(&mut self) {
        self.timeout = Duration::ZERO;
    }
}

/// Why a sync failed, as the loop treats it.
#[derive(Debug, PartialEq, Eq)]
enum SyncFailure {
    /// No HTTP answer (connection refused, reset, timed out): wait for a probe.
    Unreachable,
    /// The homeserver answered with an error (or its answer could not be used):
    /// back off.
    Refused,
    /// `M_UNKNOWN_TOKEN`: the access token is no longer valid (logged out, device
    /// deleted; `soft_logout` as the homeserver said). Retrying cannot help.
    TokenRejected { soft_logout: bool },
}

fn classify(error: &matrix_sdk::Error) -> SyncFailure {
    use matrix_sdk::ruma::api::error::ErrorKind;
    if let Some(ErrorKind::UnknownToken(data)) = error.client_api_error_kind() {
        return SyncFailure::TokenRejected {
            soft_logout: data.soft_logout,
        };
    }
    match error {
        matrix_sdk::Error::Http(http) if matches!(**http, matrix_sdk::HttpError::Reqwest(_)) => {
            SyncFailure::Unreachable
        }
        _ => SyncFailure::Refused,
    }
}

/// One identity's sync loop: hands every timeline event of every response to the
/// model (gaps backfilled first), then records the position.
struct Syncer {
    client: Client,
    name: String,
    id: IdentityId,
    /// The identity's own MXID (its join ends a backfill).
    me: String,
    engine: EngineHandle,
    store: Store,
    health: SyncHealth,
    /// The last event handed to the model per room (saved by [`Syncer::handled`]).
    last_events: BTreeMap<String, String>,
}

impl Syncer {
    /// `Client::sync` with our rules: after each response every timeline event
    /// goes to the model ([`Syncer::feed`]) and the loop waits until the engine has
    /// them before it records the position ([`Syncer::handled`]); failures are
    /// retried as [`Retry`] says, except a rejected token (an ERROR naming the
    /// command that fixes it; the loop stops) and a failure to record (the loop
    /// stops). `ready` is told after the first attempt. Every state goes to
    /// [`SyncHealth`].
    async fn run(mut self, settings: SyncSettings, ready: tokio::sync::oneshot::Sender<()>) {
        let mut ready = Some(ready);
        let mut settings = settings;
        let mut poll = LongPoll::new();
        let mut retry = Retry::new();
        loop {
            let result = self
                .client
                .sync_once(settings.clone().timeout(poll.timeout))
                .await;
            match result {
                Ok(response) => {
                    // The sync works as soon as its answer is here: `/health` says so
                    // while the response (and a gap's backfill) is handed over.
                    self.health.synced();
                    self.feed(&response).await;
                    if let Err(e) = self.handled(&response.next_batch).await {
                        tracing::error!(identity = %self.name, "{e:#}");
                        self.health.stopped(format!("{e:#}"));
                        return;
                    }
                    settings = settings.token(response.next_batch);
                    poll.succeeded();
                    retry = Retry::new();
                }
                Err(e) => match classify(&e) {
                    SyncFailure::TokenRejected { soft_logout } => {
                        tracing::error!(
                            identity = %self.name,
                            soft_logout,
                            "the homeserver rejected the access token (M_UNKNOWN_TOKEN: the \
                             device was logged out or deleted): this identity stops syncing. \
                             Stop the server and run `matrix-channel login --identity {}` to \
                             log a new device in: {e}",
                            self.name
                        );
                        if let Err(e) = save_token_rejected(&self.store, &self.name) {
                            tracing::warn!(identity = %self.name, "recording the rejected token failed: {e:#}");
                        }
                        self.health
                            .token_rejected(soft_logout, format!("M_UNKNOWN_TOKEN: {e}"));
                        return;
                    }
                    SyncFailure::Unreachable => {
                        poll.failed();
                        let wait = retry.backoff();
                        tracing::warn!(
                            identity = %self.name,
                            "sync failed, the homeserver does not answer (probing every {:?}, \
                             retrying within {wait:?}): {e}",
                            Retry::PROBE
                        );
                        self.health.failed(false, e.to_string());
                        if let Some(ready) = ready.take() {
                            let _ = ready.send(());
                        }
                        self.wait_for_homeserver(wait).await;
                    }
                    SyncFailure::Refused => {
                        poll.failed();
                        let wait = retry.backoff();
                        tracing::warn!(identity = %self.name, "sync failed, retrying in {wait:?}: {e}");
                        self.health.failed(true, e.to_string());
                        if let Some(ready) = ready.take() {
                            let _ = ready.send(());
                        }
                        tokio::time::sleep(wait).await;
                    }
                },
            }
            if let Some(ready) = ready.take() {
                let _ = ready.send(());
            }
        }
    }

    /// Waits `backoff`, or less: returns as soon as a probe of the homeserver
    /// (every [`Retry::PROBE`]) gets an answer.
    async fn wait_for_homeserver(&self, backoff: Duration) {
        use matrix_sdk::config::RequestConfig;
        use matrix_sdk::ruma::api::client::discovery::get_supported_versions;
        let deadline = tokio::time::Instant::now() + backoff;
        loop {
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return;
            }
            tokio::time::sleep(Retry::PROBE.min(deadline - now)).await;
            let probe = self
                .client
                .send(get_supported_versions::Request::new())
                .with_request_config(
                    RequestConfig::new()
                        .timeout(Retry::PROBE_TIMEOUT)
                        .disable_retry(),
                )
                .await;
            let answered = match &probe {
                Ok(_) => true,
                Err(matrix_sdk::HttpError::Reqwest(_)) => false,
                Err(_) => true,
            };
            self.health.probed(answered);
            if answered {
                tracing::info!(identity = %self.name, "the homeserver answers again: syncing");
                return;
            }
        }
    }

    /// Hands every timeline event of `response` to the model, room by room in
    /// matrix-sdk's order (joined, then left), each room's gap first (when its
    /// timeline came `limited`), then its timeline in server order; then the
    /// invites (their stripped `m.room.member` state). Every timeline event is one
    /// input ([`timeline_input`]).
    async fn feed(&mut self, response: &matrix_sdk::sync::SyncResponse) {
        for (room_id, update) in &response.rooms.joined {
            self.feed_timeline(room_id, &update.timeline).await;
        }
        for (room_id, update) in &response.rooms.left {
            self.feed_timeline(room_id, &update.timeline).await;
        }
        for (room_id, update) in &response.rooms.invited {
            for raw in &update.invite_state.events {
                let json = raw.json().get();
                if is_other_state(json) {
                    // The room's name, its encryption and such: not a membership.
                    continue;
                }
                let event = match serde_json::from_str::<StrippedRoomMemberEvent>(json) {
                    Ok(event) => event,
                    Err(e) => {
                        tracing::warn!(
                            identity = %self.name, room = %room_id,
                            "an invite's m.room.member state cannot be read, the invite is \
                             skipped (never joined): {e}"
                        );
                        self.health.invite_unreadable();
                        continue;
                    }
                };
                let _ = self.engine.submit(Input::Membership {
                    identity: self.id.clone(),
                    room: mc_model::RoomId(room_id.to_string()),
                    event_id: None,
                    user: UserId(event.state_key.to_string()),
                    membership: membership_of(&event.content.membership, &event.sender),
                });
            }
        }
    }

    async fn feed_timeline(
        &mut self,
        room_id: &matrix_sdk::ruma::RoomId,
        timeline: &matrix_sdk::sync::Timeline,
    ) {
        let Some(room) = self.client.get_room(room_id) else {
            tracing::error!(identity = %self.name, room = %room_id, "a sync response's room is unknown to matrix-sdk: its events are not handed over");
            return;
        };
        let joined_here = timeline
            .events
            .iter()
            .any(|e| is_own_join(e.raw().json().get(), &self.me));
        let (gap, cut) = match mc_adapters::gap::plan(
            timeline.limited,
            joined_here,
            timeline.prev_batch.as_deref(),
        ) {
            GapPlan::None => (Vec::new(), false),
            GapPlan::Backfill(prev_batch) => self.backfill(&room, prev_batch).await,
            GapPlan::Cut => {
                tracing::warn!(
                    identity = %self.name, room = %room_id,
                    "a limited timeline without prev_batch: its gap cannot be backfilled, the \
                     events before it are cut (never pushed)"
                );
                (Vec::new(), true)
            }
        };
        if cut {
            // The sessions are told before the events that follow the cut.
            let _ = self.engine.submit(Input::GapCut {
                identity: self.id.clone(),
                room: mc_model::RoomId(room_id.to_string()),
            });
        }
        for event in gap.iter().chain(&timeline.events) {
            self.hand(&room, event).await;
        }
        if let Some(last) = gap
            .iter()
            .chain(&timeline.events)
            .filter_map(|e| e.event_id())
            .next_back()
        {
            self.last_events
                .insert(room_id.to_string(), last.to_string());
        }
    }

    /// One timeline event to the model.
    async fn hand(&self, room: &Room, event: &matrix_sdk::deserialized_responses::TimelineEvent) {
        let device = sender_device(event.encryption_info().map(|i| &**i), room).await;
        let input = timeline_input(&self.id, room, event.raw().json().get(), device).await;
        let _ = self.engine.submit(input);
    }

    /// The events of a `limited` timeline's gap, oldest first: `/messages`
    /// backwards from `prev_batch` (Client-Server API "Syncing": a limited timeline
    /// has a gap before its first event) until an event that was handed over
    /// already (the room's last event saved with the sync position, or one the
    /// model's delivery log holds), the identity's own join (what comes before is
    /// history), the start of the room, or [`GAP_BUDGET`] events (the older rest is
    /// cut, with a WARN). A page that cannot be read ends the backfill there
    /// (WARN). The flag says whether older events of the gap were left out (cut at
    /// the budget or a page failed): the model is told (`Input::GapCut`).
    async fn backfill(
        &self,
        room: &Room,
        prev_batch: &str,
    ) -> (Vec<matrix_sdk::deserialized_responses::TimelineEvent>, bool) {
        use matrix_sdk::room::MessagesOptions;
        let last = self.last_events.get(room.room_id().as_str()).cloned();
        let mut newest_first = Vec::new();
        let mut from = prev_batch.to_string();
        let end = loop {
            let mut options = MessagesOptions::backward().from(from.as_str());
            options.limit = GAP_PAGE.into();
            let page = match room.messages(options).await {
                Ok(page) => page,
                Err(e) => break GapEnd::Failed(e.to_string()),
            };
            let ids: Vec<Option<String>> = page
                .chunk
                .iter()
                .map(|e| e.event_id().map(|id| id.to_string()))
                .collect();
            let known = self.known_to_model(ids.clone()).await;
            let mut stop = None;
            for ((event, id), known) in page.chunk.into_iter().zip(ids).zip(known) {
                if known || (id.is_some() && id == last) {
                    stop = Some(GapEnd::Known);
                    break;
                }
                if newest_first.len() == GAP_BUDGET {
                    stop = Some(GapEnd::Cut);
                    break;
                }
                let join = is_own_join(event.raw().json().get(), &self.me);
                newest_first.push(event);
                if join {
                    stop = Some(GapEnd::Join);
                    break;
                }
            }
            if let Some(stop) = stop {
                break stop;
            }
            match page.end {
                Some(end) if end != from => from = end,
                _ => break GapEnd::RoomStart,
            }
        };
        newest_first.reverse();
        let cut = matches!(end, GapEnd::Cut | GapEnd::Failed(_));
        let oldest = newest_first
            .first()
            .and_then(|e| e.event_id())
            .map(|id| id.to_string());
        match end {
            GapEnd::Cut => tracing::warn!(
                identity = %self.name, room = %room.room_id(), oldest = ?oldest,
                "a gap of more than {GAP_BUDGET} events: the newest {GAP_BUDGET} are handed over, \
                 the older ones are cut (never pushed)"
            ),
            GapEnd::Failed(e) => tracing::warn!(
                identity = %self.name, room = %room.room_id(), oldest = ?oldest,
                "backfilling a gap failed after {} events; the older ones are not handed over: {e}",
                newest_first.len()
            ),
            end => tracing::info!(
                identity = %self.name, room = %room.room_id(),
                "a gap of {} events backfilled (ended at {end:?})", newest_first.len()
            ),
        }
        (newest_first, cut)
    }

    /// For each event id, whether the model's delivery log holds it. A read for IO
    /// only (where paging back may stop): the log holds only events the model was
    /// handed, so a yes is never wrong; a no for a seen event (forgotten at the
    /// log's cap) costs pages, and the model drops it again as `Duplicate` or pushes
    /// it as the log's own rule says. Every event handed over is judged by the model.
    async fn known_to_model(&self, ids: Vec<Option<String>>) -> Vec<bool> {
        let id = self.id.clone();
        let n = ids.len();
        self.engine
            .read(move |channel| {
                let state = channel.identity(&id);
                ids.iter()
                    .map(|event| match (state, event) {
                        (Some(state), Some(event)) => {
                            state.log_entry(&mc_model::EventId(event.clone())).is_some()
                        }
                        _ => false,
                    })
                    .collect()
            })
            .await
            .unwrap_or_else(|_| vec![false; n])
    }

    /// After a response's events were handed to the engine: waits until the engine
    /// has handled and persisted them, then records the response's position (and
    /// the last event per room) as ours. A process that dies before that syncs that
    /// response again on restart (see [`rewind_sync_position`]).
    async fn handled(&self, next_batch: &str) -> anyhow::Result<()> {
        let name = &self.name;
        self.engine
            .read(|_| ())
            .await
            .map_err(|e| anyhow!("identity {name}: {e}; the sync stops"))?;
        save_handled_position(&self.store, name, next_batch, &self.last_events).with_context(|| {
            format!("identity {name}: saving the sync position failed; the sync stops")
        })
    }
}

/// How a backfill ended.
#[derive(Debug)]
enum GapEnd {
    /// At an event handed over before.
    Known,
    /// At the identity's own join (included).
    Join,
    /// At the start of the room's visible history.
    RoomStart,
    /// At [`GAP_BUDGET`].
    Cut,
    /// A page could not be read.
    Failed(String),
}

/// Whether `raw` (an event's JSON) is `user`'s own join: an `m.room.member` event
/// with `state_key` `user` and membership `join` that was not `join` before (a
/// display name or avatar change is not a join).
fn is_own_join(raw: &str, user: &str) -> bool {
    let Ok(event) = serde_json::from_str::<serde_json::Value>(raw) else {
        return false;
    };
    event["type"] == "m.room.member"
        && event["state_key"] == user
        && event["content"]["membership"] == "join"
        && event["unsigned"]["prev_content"]["membership"] != "join"
}

/// Whether `raw` (one event of an invite's stripped state) is readable JSON of a type
/// other than `m.room.member`. Anything else is a membership to hand over, or state
/// that cannot be read, which is counted and logged.
fn is_other_state(raw: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(raw)
        .ok()
        .and_then(|event| event["type"].as_str().map(|t| t != "m.room.member"))
        .unwrap_or(false)
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
                        tracing::warn!(
                            identity = %identity.name, room = %room.room_id(),
                            "an invite without a readable inviter: not reported (never joined)"
                        );
                        identity.health.invite_unreadable();
                        continue;
                    }
                },
                Err(e) => {
                    tracing::warn!(
                        identity = %identity.name, room = %room.room_id(),
                        "reading an invite failed, it is not reported (never joined): {e}"
                    );
                    identity.health.invite_unreadable();
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
    let health = identity.health.clone();
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
                                let device =
                                    sender_device(event.encryption_info().map(|i| &**i), &room)
                                        .await;
                                let input =
                                    timeline_input(&id, &room, event.raw().json().get(), device)
                                        .await;
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
                Ok(RedecryptorReport::Lagging) => {
                    // matrix-sdk's report names no room: it may concern any.
                    tracing::warn!(
                        identity = %id,
                        "matrix-sdk's redecryptor lagged and may have missed room keys: an \
                         event decrypted late may stay told as undecryptable (counted in \
                         /health)"
                    );
                    health.decryption_reports_missed();
                }
                Err(lagged) => {
                    tracing::warn!(
                        identity = %id,
                        "missed some of matrix-sdk's decryption reports ({lagged}; their rooms \
                         are unknown): an event decrypted late may stay told as undecryptable \
                         (counted in /health)"
                    );
                    health.decryption_reports_missed();
                }
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
/// the SDK could not decrypt is [`Input::Undecryptable`]. `device` is what the SDK
/// says of the device a decrypted event came from ([`device_trust`]).
pub async fn timeline_input(
    identity: &IdentityId,
    room: &impl RoomView,
    raw: &str,
    device: DeviceTrust,
) -> Input {
    let decoded = match decode::decode_timeline_event(&room.id(), raw, device) {
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

/// What matrix-sdk's `EncryptionInfo` (present only for an event that came
/// encrypted) says of the sending device, in the model's terms: a device signed by
/// its owner's cross-signing identity (`Verified`, or `UnverifiedIdentity`: the
/// identity is trusted on first use) is [`DeviceTrust::CrossSigned`]; an unsigned
/// or unknown device, another user's device, and an identity that changed after it
/// was verified are [`DeviceTrust::NotCrossSigned`]. A clear event is
/// [`DeviceTrust::PlaintextRoom`] only when the SDK knows `room` is not encrypted:
/// its state is asked of the homeserver once when the sync did not settle it
/// (`latest_encryption_state`; a room joined over a filtered sync often reads as
/// unknown), and an error reads as encrypted.
/// Source: matrix-sdk-common `VerificationState`, the Matrix spec's "Cross-signing".
pub async fn sender_device(info: Option<&EncryptionInfo>, room: &Room) -> DeviceTrust {
    let plaintext_room = match room.latest_encryption_state().await {
        Ok(state) => !state.is_encrypted() && !state.is_unknown(),
        Err(e) => {
            tracing::warn!(room = %room.room_id(), "the room's encryption state: {e}");
            false
        }
    };
    device_of(info.map(|info| &info.verification_state), plaintext_room)
}

/// [`sender_device`] once the room's state is read: `plaintext_room` when the room
/// is known not to be encrypted.
fn device_of(state: Option<&VerificationState>, plaintext_room: bool) -> DeviceTrust {
    match state {
        None if plaintext_room => DeviceTrust::PlaintextRoom,
        None => DeviceTrust::UnencryptedInEncryptedRoom,
        Some(VerificationState::Verified)
        | Some(VerificationState::Unverified(VerificationLevel::UnverifiedIdentity)) => {
            DeviceTrust::CrossSigned
        }
        Some(VerificationState::Unverified(
            VerificationLevel::VerificationViolation
            | VerificationLevel::UnsignedDevice
            | VerificationLevel::None(_)
            | VerificationLevel::MismatchedSender,
        )) => DeviceTrust::NotCrossSigned,
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
    fn a_verification_state_maps_to_the_models_device_trust() {
        use matrix_sdk::deserialized_responses::DeviceLinkProblem;
        let unverified = VerificationState::Unverified;
        let cases = [
            (None, true, DeviceTrust::PlaintextRoom),
            (None, false, DeviceTrust::UnencryptedInEncryptedRoom),
            (
                Some(VerificationState::Verified),
                false,
                DeviceTrust::CrossSigned,
            ),
            (
                Some(unverified(VerificationLevel::UnverifiedIdentity)),
                false,
                DeviceTrust::CrossSigned,
            ),
            (
                Some(unverified(VerificationLevel::VerificationViolation)),
                false,
                DeviceTrust::NotCrossSigned,
            ),
            (
                Some(unverified(VerificationLevel::UnsignedDevice)),
                false,
                DeviceTrust::NotCrossSigned,
            ),
            (
                Some(unverified(VerificationLevel::None(
                    DeviceLinkProblem::MissingDevice,
                ))),
                false,
                DeviceTrust::NotCrossSigned,
            ),
            (
                Some(unverified(VerificationLevel::MismatchedSender)),
                true,
                DeviceTrust::NotCrossSigned,
            ),
        ];
        for (state, plaintext_room, expected) in cases {
            assert_eq!(
                device_of(state.as_ref(), plaintext_room),
                expected,
                "{state:?}"
            );
        }
    }

    #[test]
    fn after_a_failed_sync_the_next_one_catches_up_without_long_polling() {
        let mut poll = LongPoll::new();
        assert_eq!(poll.timeout, Duration::ZERO, "the first sync catches up");
        poll.succeeded();
        assert_eq!(poll.timeout, LongPoll::LONG);
        // The homeserver is back: the sync that follows answers at once, so `/health`
        // recovers with it rather than after a long poll with nothing new.
        poll.failed();
        assert_eq!(poll.timeout, Duration::ZERO);
        poll.succeeded();
        assert_eq!(poll.timeout, LongPoll::LONG);
    }

    #[test]
    fn the_sync_backoff_doubles_from_one_second_to_thirty_and_probes_every_second() {
        let mut retry = Retry::new();
        let waits: Vec<u64> = (0..8).map(|_| retry.backoff().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(Retry::new().backoff(), Duration::from_secs(1));
        // The first message after an outage waits at most one probe interval (plus a
        // sync), the 2 s bound of issue 12.
        assert!(Retry::PROBE <= Duration::from_secs(1));
        assert!(Retry::PROBE_TIMEOUT <= Duration::from_secs(2));
    }

    /// A `sync_once` error as matrix-sdk makes it from the homeserver's answer.
    fn answered(status: u16, body: &str) -> matrix_sdk::Error {
        use matrix_sdk::ruma::api::client::uiaa::UiaaResponse;
        use matrix_sdk::ruma::api::error::FromHttpResponseError;
        use matrix_sdk::ruma::api::EndpointError as _;
        let response = http::Response::builder()
            .status(status)
            .body(body.as_bytes().to_vec())
            .unwrap();
        let error = UiaaResponse::from_http_response(response);
        matrix_sdk::Error::Http(Box::new(matrix_sdk::HttpError::Api(Box::new(
            FromHttpResponseError::Server(error),
        ))))
    }

    #[test]
    fn an_unknown_token_stops_the_sync_and_other_answers_back_off() {
        let token = |soft: bool| {
            answered(
                401,
                &format!(r#"{{"errcode":"M_UNKNOWN_TOKEN","error":"gone","soft_logout":{soft}}}"#),
            )
        };
        assert_eq!(
            classify(&token(false)),
            SyncFailure::TokenRejected { soft_logout: false }
        );
        assert_eq!(
            classify(&token(true)),
            SyncFailure::TokenRejected { soft_logout: true }
        );
        let limited = r#"{"errcode":"M_LIMIT_EXCEEDED","error":"slow down"}"#;
        assert_eq!(classify(&answered(429, limited)), SyncFailure::Refused);
        assert_eq!(
            classify(&answered(502, "Bad Gateway")),
            SyncFailure::Refused
        );
        let forbidden = r#"{"errcode":"M_FORBIDDEN","error":"no"}"#;
        assert_eq!(classify(&answered(403, forbidden)), SyncFailure::Refused);
    }

    #[test]
    fn only_stripped_state_readable_as_another_type_is_left_out_of_the_invites() {
        assert!(is_other_state(
            r#"{"type": "m.room.name", "state_key": "", "sender": "@a:hs", "content": {"name": "x"}}"#
        ));
        for raw in [
            r#"{"type": "m.room.member", "state_key": "@bot:hs", "sender": "@a:hs", "content": {"membership": "invite"}}"#,
            r#"{"type": "m.room.member", "state_key": "@bot:hs", "content": {}}"#,
            r#"{"type": 7}"#,
            r#"{"content": {}}"#,
            "not json",
        ] {
            assert!(!is_other_state(raw), "{raw}");
        }
    }

    #[test]
    fn only_the_identitys_own_join_ends_a_backfill() {
        let me = "@bot:hs";
        let member = |state_key: &str, membership: &str, prev: Option<&str>| {
            let mut event = serde_json::json!({
                "type": "m.room.member", "state_key": state_key, "sender": state_key,
                "event_id": "$m", "origin_server_ts": 1,
                "content": {"membership": membership},
            });
            if let Some(prev) = prev {
                event["unsigned"] = serde_json::json!({"prev_content": {"membership": prev}});
            }
            event.to_string()
        };
        assert!(is_own_join(&member(me, "join", None), me));
        assert!(is_own_join(&member(me, "join", Some("invite")), me));
        assert!(is_own_join(&member(me, "join", Some("leave")), me));
        // A display name change, someone else's join, a leave, other events.
        assert!(!is_own_join(&member(me, "join", Some("join")), me));
        assert!(!is_own_join(&member("@ann:hs", "join", None), me));
        assert!(!is_own_join(&member(me, "leave", Some("join")), me));
        let message = r#"{"type":"m.room.message","sender":"@bot:hs","content":{"body":"join"}}"#;
        assert!(!is_own_join(message, me));
        assert!(!is_own_join("not json", me));
    }

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
