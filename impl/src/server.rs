//! `matrix-channel serve`: wires the store, the model engine, the Matrix clients and
//! the HTTP mounts together, and implements the engine's [`Wire`] over MCP peers and
//! Matrix rooms.

use crate::config::Config;
use crate::engine::{self, EngineHandle, JournalPersist, Wire};
use crate::http::{
    authenticate, AuthState, Mount, Peers, SqliteEventStore, SqliteSessionStore, StreamTracker,
    TrackingManager,
};
use crate::journal;
use crate::matrix::{self, Identity};
use crate::mcp::{App, McpServer};
use crate::shutdown::{Stop, Stopped};
use crate::store::{Store, StoreLock};
use crate::write::{ToolError, Written};
use anyhow::{anyhow, Context as _};
use async_trait::async_trait;
use matrix_sdk::ruma::events::relation::{InReplyTo, Reply};
use matrix_sdk::ruma::events::room::message::{
    Relation, ReplacementMetadata, RoomMessageEventContent, RoomMessageEventContentWithoutRelation,
};
use matrix_sdk::ruma::{OwnedEventId, OwnedRoomId, OwnedTransactionId};
use matrix_sdk::{Room, RoomState};
use mc_model::{AgentWrite, Channel, EventId, IdentityId, PromptText, RoomId, SessionId};
use rmcp::model::{CustomNotification, ServerNotification};
#[allow(deprecated)] // MCP logging: SEP-2577 deprecates it after 2025-11-25, our newest.
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::Value;
use std::collections::BTreeMap;
use std::future::IntoFuture as _;
use std::sync::Arc;
use std::time::Duration;

/// The engine's wire in production: MCP sessions through their peers, Matrix through
/// each identity's client.
pub struct LiveWire {
    pub peers: Peers,
    pub identities: BTreeMap<String, Identity>,
}

impl LiveWire {
    fn joined_room(&self, identity: &IdentityId, room: &RoomId) -> Result<Room, String> {
        let identity = self
            .identities
            .get(identity.as_str())
            .ok_or_else(|| format!("unknown identity {identity}"))?;
        let id = OwnedRoomId::try_from(room.as_str()).map_err(|e| format!("room {room}: {e}"))?;
        match identity.client.get_room(&id) {
            Some(room) if room.state() == RoomState::Joined => Ok(room),
            _ => Err(format!(
                "{} is not joined to {room}",
                identity.settings.user_id
            )),
        }
    }
}

/// The room's encryption checked right before one of the model's sends (a prompt, an
/// outcome edit, a notice): [`crate::write::ensure_encrypted_or_plain`], the one rule
/// of every send path. A refusal is the send's failure, with the reason (`kind:
/// message`): a prompt post completes `Outcome::Failed` (the model drops the prompt,
/// `PromptPostFailed`), a failed edit or notice is logged by the engine.
async fn ensure_not_plaintext(room: &Room, what: &str) -> Result<(), String> {
    match crate::write::ensure_encrypted_or_plain(room).await {
        Ok(_) => Ok(()),
        Err(e) => {
            tracing::warn!(room = %room.room_id(), kind = e.kind(), "{what} not sent: {}", e.message());
            Err(e.to_string())
        }
    }
}

fn event_id(id: &EventId) -> Result<OwnedEventId, String> {
    OwnedEventId::try_from(id.as_str()).map_err(|e| format!("event {id}: {e}"))
}

#[async_trait]
impl Wire for LiveWire {
    async fn notify(&self, session: &SessionId, method: &str, params: Value) -> Result<(), String> {
        let peer = self
            .peers
            .get(session.as_str())
            .ok_or_else(|| format!("session {session} has no peer"))?;
        let notification = CustomNotification::new(method, Some(params));
        peer.send_notification(ServerNotification::CustomNotification(notification))
            .await
            .map_err(|e| e.to_string())
    }

    async fn post_prompt(
        &self,
        identity: &IdentityId,
        room: &RoomId,
        text: &PromptText,
        txn_id: &str,
    ) -> Result<EventId, String> {
        let room = self.joined_room(identity, room)?;
        ensure_not_plaintext(&room, "the permission prompt").await?;
        let response = room
            .send(prompt_content(text))
            .with_transaction_id(OwnedTransactionId::from(txn_id.to_string()))
            .await
            .map_err(|e| e.to_string())?;
        Ok(EventId(response.response.event_id.to_string()))
    }

    async fn edit_prompt(
        &self,
        identity: &IdentityId,
        room: &RoomId,
        event_id_: &EventId,
        text: &PromptText,
    ) -> Result<(), String> {
        let room = self.joined_room(identity, room)?;
        let edit = edit_content(&event_id(event_id_)?, text);
        ensure_not_plaintext(&room, "the prompt's outcome edit").await?;
        room.send(edit).await.map_err(|e| e.to_string())?;
        Ok(())
    }

    async fn announce(
        &self,
        identity: &IdentityId,
        room: &RoomId,
        text: &PromptText,
    ) -> Result<(), String> {
        let room = self.joined_room(identity, room)?;
        ensure_not_plaintext(&room, "the notice").await?;
        room.send(announce_content(text))
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    async fn notice(
        &self,
        identity: &IdentityId,
        room: &RoomId,
        in_reply_to: &EventId,
        text: &str,
    ) -> Result<(), String> {
        let room = self.joined_room(identity, room)?;
        let content = notice_content(&event_id(in_reply_to)?, text);
        ensure_not_plaintext(&room, "the notice").await?;
        room.send(content).await.map_err(|e| e.to_string())?;
        Ok(())
    }

    async fn join_room(&self, identity: &IdentityId, room: &RoomId) -> Result<(), String> {
        let identity = self
            .identities
            .get(identity.as_str())
            .ok_or_else(|| format!("unknown identity {identity}"))?;
        let id = OwnedRoomId::try_from(room.as_str()).map_err(|e| format!("room {room}: {e}"))?;
        identity
            .client
            .join_room_by_id(&id)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn typing(
        &self,
        identity: &IdentityId,
        room: &RoomId,
        typing: bool,
    ) -> Result<(), String> {
        use matrix_sdk::ruma::api::client::typing::create_typing_event::v3::{
            Request, Typing, TypingInfo,
        };
        let identity = self
            .identities
            .get(identity.as_str())
            .ok_or_else(|| format!("unknown identity {identity}"))?;
        let id = OwnedRoomId::try_from(room.as_str()).map_err(|e| format!("room {room}: {e}"))?;
        let user = identity
            .client
            .user_id()
            .ok_or("the identity is not logged in")?
            .to_owned();
        // The raw request: matrix-sdk's `Room::typing_notice` fixes a 4 s timeout.
        let typing = if typing {
            Typing::Yes(TypingInfo::new(std::time::Duration::from_millis(
                mc_model::TYPING_TIMEOUT_MS,
            )))
        } else {
            Typing::No
        };
        identity
            .client
            .send(Request::new(user, id, typing))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn create_room(
        &self,
        identity: &IdentityId,
        name: &str,
        invite: &[mc_model::UserId],
    ) -> Result<RoomId, String> {
        let identity = self
            .identities
            .get(identity.as_str())
            .ok_or_else(|| format!("unknown identity {identity}"))?;
        let invite = invite
            .iter()
            .map(|user| {
                matrix_sdk::ruma::OwnedUserId::try_from(user.as_str())
                    .map_err(|e| format!("invitee {user}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        // The identity's store holds an Olm account: it encrypts (`e2e-encryption`
        // is always built in; a client without one would send in the clear).
        let encrypted = identity.client.encryption().ed25519_key().await.is_some();
        let room = identity
            .client
            .create_room(create_room_request(Some(name), None, invite, encrypted))
            .await
            .map_err(|e| e.to_string())?;
        Ok(RoomId(room.room_id().to_string()))
    }

    async fn write(&self, identity: &IdentityId, write: &AgentWrite) -> Result<Written, ToolError> {
        let identity = self
            .identities
            .get(identity.as_str())
            .ok_or_else(|| ToolError::Upstream(format!("unknown identity {identity}")))?;
        crate::write::perform(identity, write).await
    }

    #[allow(deprecated)]
    async fn log_message(&self, session: &SessionId, message: &str) -> Result<(), String> {
        if !self.peers.takes_warnings(session.as_str()) {
            return Ok(());
        }
        let peer = self
            .peers
            .get(session.as_str())
            .ok_or_else(|| format!("session {session} has no peer"))?;
        let params = LoggingMessageNotificationParam::new(
            LoggingLevel::Warning,
            Value::String(message.to_string()),
        )
        .with_logger("matrix-channel");
        peer.notify_logging_message(params)
            .await
            .map_err(|e| e.to_string())
    }
}

/// Refuses an allowed directory of `send_file` (`files.allowed_dirs`) that holds
/// the store or lies inside it: the store keeps the identities' access tokens and
/// end-to-end keys, which an agent must never be able to send. Compared as real
/// paths (symlinks resolved). Errors: a directory that cannot be resolved, or one
/// that overlaps the store, naming both.
fn store_outside_files(
    allowed_dirs: &[std::path::PathBuf],
    store_dir: &std::path::Path,
) -> anyhow::Result<()> {
    let store = std::fs::canonicalize(store_dir)
        .with_context(|| format!("store_dir: {}", store_dir.display()))?;
    for dir in allowed_dirs {
        let real = std::fs::canonicalize(dir)
            .with_context(|| format!("files.allowed_dirs: {}", dir.display()))?;
        anyhow::ensure!(
            !store.starts_with(&real) && !real.starts_with(&store),
            "files.allowed_dirs: {} overlaps the store {} (its access tokens and keys): \
             allow a directory of its own",
            dir.display(),
            store.display()
        );
    }
    Ok(())
}

/// The request that creates a room (Client-Server API "Creation"; a label's room,
/// and the agent's `create_room`): the `private_chat` preset (invite only, shared
/// history), named `name` and with `topic` when given, `invite` invited, and with
/// `encrypted` an `m.room.encryption` of matrix-sdk's recommended defaults
/// (`m.megolm.v1.aes-sha2`) in its initial state, so no event of the room is ever
/// plain.
pub fn create_room_request(
    name: Option<&str>,
    topic: Option<&str>,
    invite: Vec<matrix_sdk::ruma::OwnedUserId>,
    encrypted: bool,
) -> matrix_sdk::ruma::api::client::room::create_room::v3::Request {
    use matrix_sdk::ruma::api::client::room::create_room::v3::{Request, RoomPreset};
    use matrix_sdk::ruma::events::room::encryption::RoomEncryptionEventContent;
    use matrix_sdk::ruma::events::InitialStateEvent;
    let mut request = Request::new();
    request.name = name.map(str::to_owned);
    request.topic = topic.map(str::to_owned);
    request.invite = invite;
    request.preset = Some(RoomPreset::PrivateChat);
    if encrypted {
        request.initial_state = vec![InitialStateEvent::with_empty_state_key(
            RoomEncryptionEventContent::with_recommended_defaults(),
        )
        .to_raw_any()];
    }
    request
}

/// The content of a permission prompt: `m.text` with `body` and the HTML
/// `formatted_body` (`org.matrix.custom.html`), no relation.
pub fn prompt_content(text: &PromptText) -> RoomMessageEventContent {
    RoomMessageEventContent::text_html(&text.plain, &text.html)
}

/// The content of a prompt's outcome edit: an `m.replace` of `target` whose
/// `m.new_content` is the new text, with ruma's `* ` fallback body
/// ([Client-Server API, "Event replacements"](https://spec.matrix.org/v1.16/client-server-api/#event-replacements)).
pub fn edit_content(target: &OwnedEventId, text: &PromptText) -> RoomMessageEventContent {
    RoomMessageEventContentWithoutRelation::text_html(&text.plain, &text.html)
        .make_replacement(ReplacementMetadata::new(target.clone(), None))
}

/// The content of an announcement: an `m.notice` with `text`'s plain body and HTML,
/// replying to nothing.
pub fn announce_content(text: &PromptText) -> RoomMessageEventContent {
    RoomMessageEventContent::notice_html(text.plain.clone(), text.html.clone())
}

/// The content of a notice: `m.notice` replying to `in_reply_to` (a rich reply
/// without fallback).
pub fn notice_content(in_reply_to: &OwnedEventId, text: &str) -> RoomMessageEventContent {
    let mut content = RoomMessageEventContent::notice_plain(text);
    content.relates_to = Some(Relation::Reply(Reply::new(InReplyTo::new(
        in_reply_to.clone(),
    ))));
    content
}

/// Loads the model state at start and applies the configured identities: the
/// journal's snapshot with its inputs replayed ([`journal::recover_channel`]; before
/// the first snapshot, the whole state a server before the journal saved), then the
/// configured identities (which the engine then writes as the snapshot: `Persist::begin`).
/// Logs what it loaded.
/// Errors: the journal holds inputs of another model version (the message says what
/// to do), the stored state is unreadable, or an identity's settings are invalid.
pub fn load_channel(
    store: &Store,
    journal: &mut journal::Journal,
    config: &Config,
) -> anyhow::Result<Channel> {
    let started = std::time::Instant::now();
    let legacy_state = store.legacy_model()?;
    let legacy = legacy_state.is_some();
    let (mut channel, recovery) = journal::recover_channel(journal, legacy_state)?;
    for (name, settings) in &config.identities {
        channel
            .add_identity(IdentityId(name.clone()), settings.model_config())
            .map_err(|e| anyhow!("identities.{name}: {e}"))?;
    }
    // The engine writes this state as the journal's snapshot before its first input
    // (`Persist::begin`). A legacy state goes only once the journal holds it.
    if legacy {
        journal
            .snapshot(&channel)
            .context("writing the first snapshot of the journal")?;
        store.drop_legacy_model()?;
    }
    tracing::info!(
        snapshot = recovery.snapshot,
        replayed = recovery.replayed,
        set_aside = recovery.set_aside,
        ms = started.elapsed().as_millis() as u64,
        "model state loaded"
    );
    Ok(channel)
}

/// Runs the server until SIGINT or SIGTERM, then shuts down within 5 s of the signal
/// ([`crate::shutdown`]) and says how ([`Stopped::exit_code`] is the process's exit
/// status). A second signal exits the process at once. Besides the HTTP listener it
/// serves the operator socket ([`crate::operator`]) and removes it when it returns.
/// Errors: the store, an identity, the listener or the operator socket cannot be set
/// up, or serving fails.
pub async fn serve(config: Config) -> anyhow::Result<Stopped> {
    let _lock = StoreLock::acquire(&config.store_dir, "serve")?;
    let store = Store::open(&config.store_dir)?;
    let mut journal = journal::Journal::open(&config.store_dir, Default::default())?;
    let channel = load_channel(&store, &mut journal, &config)?;

    let mut identities = BTreeMap::new();
    let mut synced = BTreeMap::new();
    for (name, settings) in &config.identities {
        let (identity, was_synced) = matrix::restore(&store, name, settings).await?;
        synced.insert(name.clone(), was_synced);
        identities.insert(name.clone(), identity);
    }

    let peers = Peers::default();
    let wire = Arc::new(LiveWire {
        peers: peers.clone(),
        identities: identities.clone(),
    });
    let (engine, mut engine_task) =
        engine::spawn(channel, wire, JournalPersist::new(journal), engine::now_ms);

    let mut sync_tasks = Vec::new();
    for (name, identity) in &identities {
        sync_tasks.push(matrix::start(&store, identity, synced[name], engine.clone()).await?);
    }

    let stop = Stop::new();
    // `metrics_listen`: `/metrics` alone, on a listener of its own.
    let metrics_http = match config.metrics_listen {
        None => None,
        Some(at) => {
            let listener = tokio::net::TcpListener::bind(at)
                .await
                .with_context(|| format!("listening on {at} (metrics_listen)"))?;
            let addr = listener.local_addr()?;
            let app = metrics_router(&config, engine.clone(), &identities);
            println!("matrix-channel: metrics on http://{addr}/metrics");
            tracing::info!(%addr, "metrics listening");
            let served = axum::serve(listener, app).with_graceful_shutdown(stop.stopped());
            Some(tokio::spawn(async move {
                if let Err(e) = served.await {
                    tracing::error!("the metrics listener stopped: {e}");
                }
            }))
        }
    };
    // `send_file`'s sources: its directories must exist and keep clear of the
    // store, its CA file must read.
    store_outside_files(&config.files.allowed_dirs, &config.store_dir)?;
    let files = Arc::new(crate::files::FileSources::new(&config.files)?);
    let router = router(
        &config,
        store.clone(),
        engine.clone(),
        peers,
        identities,
        files,
        stop.clone(),
    );
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?;
    let addr = listener.local_addr()?;
    // `matrix-channel bind` and `bindings` (the operator's, through the filesystem);
    // the socket file goes when this does, at the end of `serve`.
    let _operator = crate::operator::listen(&config.store_dir, engine.clone(), stop.clone())?;
    let _signals = crate::shutdown::watch_signals(stop.clone()).context("signal handlers")?;
    println!("matrix-channel: listening on http://{addr}");
    tracing::info!(%addr, "listening");
    let http = axum::serve(listener, router)
        .with_graceful_shutdown(stop.stopped())
        .into_future();
    tokio::pin!(http);
    // Biased: once the switch is set this branch wins, so a drain that completes in
    // the same poll is not taken for the server stopping by itself.
    let mut drained = false;
    tokio::select! {
        biased;
        () = stop.stopped() => {}
        served = &mut http => {
            served?;
            if !stop.is_stopping() {
                return Err(anyhow!("the HTTP server stopped without a signal"));
            }
            drained = true;
        }
        // The engine ends by itself only when the journal refused its state or an input (its ERROR
        // says why): serving on would take inputs the model cannot record.
        _ = &mut engine_task => {
            return Err(anyhow!(
                "the engine stopped: the journal did not take its state or an input (see the ERROR \
                 above); nothing more is acted on"
            ));
        }
    }
    let signalled = tokio::time::Instant::now();
    let drain = tokio::time::timeout_at(signalled + crate::shutdown::HTTP_DRAIN, http);
    let http_cut = !drained
        && match drain.await {
            Ok(served) => {
                served?;
                false
            }
            Err(_) => {
                tracing::warn!(
                    open = ?stop.open_requests(),
                    "shutdown: HTTP requests still open after {} ms are cut",
                    crate::shutdown::HTTP_DRAIN.as_millis()
                );
                true
            }
        };
    if let Some(task) = metrics_http {
        // A scrape is short; one still open now is cut.
        task.abort();
    }
    Ok(crate::shutdown::drain(signalled, http_cut, sync_tasks, &engine).await)
}

/// The HTTP router: `/mcp` and `/channel` behind bearer authentication, refusing
/// requests and ending event streams once `stop` is set ([`crate::http::authenticate`]);
/// `/health` without it; all three behind the Host and Origin guard
/// ([`crate::http::guard_host_and_origin`]).
pub fn router(
    config: &Config,
    store: Store,
    engine: EngineHandle,
    peers: Peers,
    identities: BTreeMap<String, Identity>,
    files: Arc<crate::files::FileSources>,
    stop: Stop,
) -> axum::Router {
    let health = crate::http::HealthState {
        store: store.clone(),
        engine: engine.clone(),
        identities: identities
            .iter()
            .map(|(name, identity)| (name.clone(), identity.health.clone()))
            .collect(),
    };
    let sync_healths = health.identities.clone();
    let metrics_state = |token| crate::http::MetricsState {
        engine: engine.clone(),
        identities: sync_healths,
        token,
    };
    let app = Arc::new(App {
        identities,
        engine: engine.clone(),
        peers: peers.clone(),
        max_download_bytes: config.max_download_bytes,
        rate_limits: crate::rate_limit::RateLimiter::new(&config.rate_limits),
        files,
    });
    let event_store = Arc::new(SqliteEventStore::new(store.clone()));
    let idle = match config.session_idle_secs {
        0 => None,
        secs => Some(Duration::from_secs(secs)),
    };
    let manager = |tracker: Option<Arc<StreamTracker>>| {
        let mut inner = LocalSessionManager::default().with_event_store(event_store.clone());
        inner.session_config.keep_alive = idle;
        Arc::new(TrackingManager::new(inner, event_store.clone(), tracker))
    };
    let mut http_config =
        StreamableHttpServerConfig::default().with_allowed_hosts(config.allowed_hosts.clone());
    http_config.session_store = Some(Arc::new(SqliteSessionStore {
        store: store.clone(),
    }));
    let tracker = Arc::new(StreamTracker::new(store.clone(), engine.clone(), peers));
    let channel_app = app.clone();
    let channel = StreamableHttpService::new(
        move || Ok(McpServer::new(Mount::Channel, channel_app.clone())),
        manager(Some(tracker)),
        http_config.clone(),
    );
    let tools = StreamableHttpService::new(
        move || Ok(McpServer::new(Mount::Tools, app.clone())),
        manager(None),
        http_config,
    );
    let routes = axum::Router::new()
        .nest_service("/mcp", tools)
        .nest_service("/channel", channel)
        .layer(axum::middleware::from_fn_with_state(
            crate::http::BodyState {
                store: store.clone(),
                engine: engine.clone(),
                batch_deadline: Duration::from_millis(config.batch_deadline_ms),
            },
            crate::http::jsonrpc_body,
        ))
        .layer(axum::middleware::from_fn_with_state(
            AuthState::new(store).with_stop(stop),
            authenticate,
        ))
        // Before the guard, after the token: `/health` answers liveness without a
        // token, but not to a page whose Host or Origin is not allowed (DNS
        // rebinding would let it read ok or degraded).
        .merge(crate::http::health_router(health))
        // `/metrics` takes the operator's metrics token, not an identity's.
        .merge(match &config.metrics_token {
            Some(token) => crate::http::metrics_router(metrics_state(Some(token.clone()))),
            None if config.metrics_listen.is_some() => crate::http::metrics_off_router(
                "/metrics is served on metrics_listen; set metrics_token to serve it here too",
            ),
            None => crate::http::metrics_off_router(
                "metrics are off: set metrics_token or metrics_listen",
            ),
        });
    // Host and Origin before the token, on every route.
    guarded(routes, config)
}

/// `router` behind the Host and Origin guard ([`crate::http::guard_host_and_origin`]),
/// as the outer layer: it runs first, before any token is read.
fn guarded(router: axum::Router, config: &Config) -> axum::Router {
    router.layer(axum::middleware::from_fn_with_state(
        Arc::new(
            mc_adapters::origin::Guard::new(
                &config.allowed_hosts,
                config.allowed_origins.as_deref(),
            )
            .expect("the config check parsed allowed_hosts and allowed_origins"),
        ),
        crate::http::guard_host_and_origin,
    ))
}

/// The router of `metrics_listen`: `GET /metrics` alone, behind the Host and Origin
/// guard, taking `metrics_token` when it is set and no token otherwise.
pub fn metrics_router(
    config: &Config,
    engine: EngineHandle,
    identities: &BTreeMap<String, Identity>,
) -> axum::Router {
    let state = crate::http::MetricsState {
        engine,
        identities: identities
            .iter()
            .map(|(name, identity)| (name.clone(), identity.health.clone()))
            .collect(),
        token: config.metrics_token.clone(),
    };
    guarded(crate::http::metrics_router(state), config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::{header, Request, StatusCode};
    use tower::ServiceExt as _;

    #[test]
    fn a_labels_room_is_private_named_inviting_and_encrypted_from_its_first_event() {
        let alice = matrix_sdk::ruma::OwnedUserId::try_from("@alice:hs").unwrap();
        let request =
            create_room_request(Some("Claude Code: web"), None, vec![alice.clone()], true);
        assert_eq!(request.name.as_deref(), Some("Claude Code: web"));
        assert_eq!(request.invite, [alice]);
        assert_eq!(request.topic, None);
        assert_eq!(
            request.preset,
            Some(matrix_sdk::ruma::api::client::room::create_room::v3::RoomPreset::PrivateChat)
        );
        assert!(!request.is_direct);
        let state: Vec<Value> = request
            .initial_state
            .iter()
            .map(|raw| raw.deserialize_as_unchecked::<Value>().unwrap())
            .collect();
        assert_eq!(
            state,
            [serde_json::json!({
                "type": "m.room.encryption",
                "state_key": "",
                "content": {
                    "algorithm": "m.megolm.v1.aes-sha2",
                    "rotation_period_ms": 604_800_000,
                    "rotation_period_msgs": 100,
                },
            })]
        );
        let plain = create_room_request(None, Some("t"), vec![], false);
        assert!(plain.initial_state.is_empty());
        assert_eq!((plain.name, plain.topic.as_deref()), (None, Some("t")));
    }

    #[test]
    fn an_allowed_directory_may_neither_hold_the_store_nor_lie_inside_it() {
        let dir = tempfile::tempdir().unwrap();
        let (store, outbox) = (dir.path().join("store"), dir.path().join("outbox"));
        std::fs::create_dir_all(store.join("media")).unwrap();
        std::fs::create_dir_all(&outbox).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&store, &link).unwrap();
        assert!(store_outside_files(std::slice::from_ref(&outbox), &store).is_ok());
        // `store` and `storeroom` share a prefix, not a directory.
        let storeroom = dir.path().join("storeroom");
        std::fs::create_dir_all(&storeroom).unwrap();
        assert!(store_outside_files(&[outbox, storeroom], &store).is_ok());
        for bad in [
            dir.path().to_owned(),
            store.clone(),
            store.join("media"),
            link,
        ] {
            let e = store_outside_files(std::slice::from_ref(&bad), &store).unwrap_err();
            assert!(e.to_string().contains("overlaps the store"), "{bad:?}: {e}");
        }
        assert!(store_outside_files(&[dir.path().join("missing")], &store).is_err());
    }

    /// `router` of a server with no identity, its config the test config as `change`
    /// leaves it; with `metrics_listen`, that listener's router nested at `/own`.
    fn test_app(change: impl FnOnce(&mut Config)) -> axum::Router {
        let dir = std::env::temp_dir().join(format!("mc-server-{}", rand::random::<u64>()));
        let store = Store::open(&dir).unwrap();
        let mut config = Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            store_dir: dir,
            allowed_hosts: vec!["localhost".to_owned(), "127.0.0.1".to_owned()],
            allowed_origins: None,
            session_idle_secs: 0,
            max_download_bytes: 1 << 20,
            batch_deadline_ms: 1_000,
            log: "info".to_owned(),
            rate_limits: Default::default(),
            files: Default::default(),
            metrics_token: None,
            metrics_listen: None,
            identities: BTreeMap::new(),
            warnings: Vec::new(),
        };
        change(&mut config);
        let (engine, _task) = engine::spawn(
            Channel::new(),
            Arc::new(LiveWire {
                peers: Peers::default(),
                identities: BTreeMap::new(),
            }),
            engine::NoPersist,
            engine::now_ms,
        );
        let main = router(
            &config,
            store,
            engine.clone(),
            Peers::default(),
            BTreeMap::new(),
            Arc::new(crate::files::FileSources::new(&config.files).unwrap()),
            Stop::new(),
        );
        if config.metrics_listen.is_some() {
            // The tests read `metrics_listen`'s router through `/own/metrics`.
            main.nest("/own", metrics_router(&config, engine, &BTreeMap::new()))
        } else {
            main
        }
    }

    /// A GET of `path` with `Host: host` and `token`: its status and body.
    async fn get_metrics(
        app: &axum::Router,
        path: &str,
        host: &str,
        token: Option<&str>,
    ) -> (StatusCode, String) {
        let mut req = Request::builder()
            .method("GET")
            .uri(path)
            .header(header::HOST, host);
        if let Some(token) = token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let response = app
            .clone()
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    const METRICS_TOKEN: &str = "0123456789abcdef0123456789abcdef";

    #[tokio::test(start_paused = true)]
    async fn metrics_are_404_until_configured_and_then_take_the_metrics_token_behind_the_guard() {
        let off = test_app(|_| {});
        let (status, body) = get_metrics(&off, "/metrics", "127.0.0.1:8700", None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert!(
            body.contains("set metrics_token or metrics_listen"),
            "{body}"
        );

        let on = test_app(|c| {
            c.metrics_token = Some(mc_adapters::config::MetricsToken::new(METRICS_TOKEN).unwrap())
        });
        let (status, body) =
            get_metrics(&on, "/metrics", "evil.example:8700", Some(METRICS_TOKEN)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        let (status, _) = get_metrics(&on, "/metrics", "127.0.0.1:8700", None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        let (status, body) =
            get_metrics(&on, "/metrics", "127.0.0.1:8700", Some(METRICS_TOKEN)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(
            body.contains("# TYPE matrix_channel_pushes_total counter"),
            "{body}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn metrics_listen_alone_serves_metrics_there_without_a_token_and_not_on_listen() {
        let app = test_app(|c| c.metrics_listen = Some("127.0.0.1:0".parse().unwrap()));
        let (status, body) = get_metrics(&app, "/metrics", "127.0.0.1:8700", None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert!(body.contains("served on metrics_listen"), "{body}");
        let (status, body) = get_metrics(&app, "/own/metrics", "127.0.0.1:9700", None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let (status, _) = get_metrics(&app, "/own/metrics", "evil.example:9700", None).await;
        assert_eq!(
            status,
            StatusCode::FORBIDDEN,
            "its own listener keeps the guard"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn health_is_behind_the_host_and_origin_guard_like_the_mcp_mounts() {
        let app = test_app(|_| {});
        let get = |path: &'static str, host: &'static str, origin: Option<&'static str>| {
            let mut req = Request::builder()
                .method("GET")
                .uri(path)
                .header(header::HOST, host);
            if let Some(origin) = origin {
                req = req.header(header::ORIGIN, origin);
            }
            app.clone().oneshot(req.body(Body::empty()).unwrap())
        };
        for (host, origin) in [
            ("evil.example:8700", None),
            ("localhost:8700", Some("http://evil.example")),
        ] {
            for path in ["/health", "/mcp"] {
                let response = get(path, host, origin).await.unwrap();
                assert_eq!(
                    response.status(),
                    StatusCode::FORBIDDEN,
                    "{path} {host} {origin:?}"
                );
                let body = axum::body::to_bytes(response.into_body(), 4096)
                    .await
                    .unwrap();
                let body: Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(body["error"], "forbidden", "{path}: {body}");
            }
        }
        // An allowed Host (and Origin) reads liveness without a token.
        for origin in [None, Some("http://localhost:6274")] {
            let response = get("/health", "127.0.0.1:8700", origin).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{origin:?}");
        }
    }
}
