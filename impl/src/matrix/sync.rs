//! One identity's sync loop ([`Syncer`]): `/sync` with our filter, every timeline
//! event of every response handed to the model in timeline order (a `limited`
//! timeline's gap backfilled first, or told as cut), invites as memberships, then the
//! position recorded once the engine has everything. How it waits and treats a
//! failure is [`mc_adapters::sync`]; what a gap is and where a backfill stops,
//! [`mc_adapters::gap`].

use super::encryption::{add_redecryption, sender_device};
use super::rooms::{membership_of, report_rooms};
use super::timeline::timeline_input;
use super::{save_handled_position, save_token_rejected, stored_last_events, Identity};
use crate::engine::EngineHandle;
use crate::health::SyncHealth;
use crate::store::Store;
use anyhow::{anyhow, Context as _};
use matrix_sdk::config::SyncSettings;
use matrix_sdk::ruma::api::client::filter::{FilterDefinition, RoomEventFilter, RoomFilter};
use matrix_sdk::ruma::api::client::sync::sync_events::v3::Filter;
use matrix_sdk::ruma::events::room::member::StrippedRoomMemberEvent;
use matrix_sdk::{Client, Room};
use mc_adapters::gap::{self, GapEnd, GapPlan, PageEvent};
use mc_adapters::sync::{is_other_state, LongPoll, Retry, SyncError, SyncFailure};
use mc_model::{IdentityId, Input, UserId};
use std::collections::BTreeMap;
use std::time::Duration;

pub use mc_adapters::gap::GAP_BUDGET;

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

/// Events per `/messages` page while backfilling.
const GAP_PAGE: u32 = 100;

/// Starts the identity: the first sync (skipping history on a new device), what the
/// store knows of each room ([`super::rooms::report_rooms`]), then the sync loop in a task
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

/// How the loop treats `error` ([`mc_adapters::sync::classify`]), from what
/// matrix-sdk's error says: the homeserver's `M_UNKNOWN_TOKEN`, or no HTTP answer
/// (a transport error of reqwest).
fn classify(error: &matrix_sdk::Error) -> SyncFailure {
    use matrix_sdk::ruma::api::error::ErrorKind;
    let unknown_token = match error.client_api_error_kind() {
        Some(ErrorKind::UnknownToken(data)) => Some(data.soft_logout),
        _ => None,
    };
    let unanswered = matches!(
        error,
        matrix_sdk::Error::Http(http) if matches!(**http, matrix_sdk::HttpError::Reqwest(_))
    );
    mc_adapters::sync::classify(SyncError {
        unknown_token,
        unanswered,
    })
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
                .sync_once(settings.clone().timeout(poll.timeout()))
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
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some(sleep) = Retry::next_probe(left) else {
                return;
            };
            tokio::time::sleep(sleep).await;
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
            .any(|e| gap::is_own_join(e.raw().json().get(), &self.me));
        let (backfilled, cut) = match gap::plan(
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
        for event in backfilled.iter().chain(&timeline.events) {
            self.hand(&room, event).await;
        }
        if let Some(last) = backfilled
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
            let judged: Vec<PageEvent<'_>> = page
                .chunk
                .iter()
                .zip(&ids)
                .zip(known)
                .map(|((event, id), in_model)| PageEvent {
                    event_id: id.as_deref(),
                    in_model,
                    own_join: gap::is_own_join(event.raw().json().get(), &self.me),
                })
                .collect();
            let (take, stop) = gap::take_from_page(newest_first.len(), last.as_deref(), &judged);
            newest_first.extend(page.chunk.into_iter().take(take));
            if let Some(stop) = stop {
                break stop;
            }
            match gap::next_page(&from, page.end.as_deref()) {
                Some(end) => from = end.to_string(),
                None => break GapEnd::RoomStart,
            }
        };
        newest_first.reverse();
        let cut = end.left_out();
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
    /// response again on restart (see [`super::rewind_sync_position`]).
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn matrix_sdks_unknown_token_stops_the_sync_and_its_other_answers_back_off() {
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
}
