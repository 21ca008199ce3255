//! rmcp's durable-session hooks in SQLite: the sessions' `initialize` params
//! ([`SqliteSessionStore`]) and their SSE events ([`SqliteEventStore`]).
//!
//! Facts used (rmcp 3.11, measured, see AGENTS.md): without an event store rmcp
//! replays its last 16 messages from the start on every new stream (duplicates) and
//! loses older ones; with one, a resume by `Last-Event-ID` replays exactly what was
//! missed, but does not re-attach the live channel, so our replay stream continues
//! with a live tail.

use crate::store::Store;
use futures::StreamExt;
use rmcp::model::ServerJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::{
    EventStore, EventStoreError, EventStream, ServerSseMessage, SessionState, SessionStore,
    SessionStoreError,
};
use std::time::Duration;

/// rmcp's durable-session hook: the client's `initialize` params, in SQLite.
pub struct SqliteSessionStore {
    pub store: Store,
}

#[async_trait::async_trait]
impl SessionStore for SqliteSessionStore {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        match self.store.mcp_session_state(session_id)? {
            Some(json) => Ok(Some(serde_json::from_str(&json)?)),
            None => Ok(None),
        }
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        self.store
            .set_mcp_session_state(session_id, &serde_json::to_string(state)?)?;
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        self.store.delete_mcp_session(session_id)?;
        Ok(())
    }
}

/// SSE events kept per stream for resumption.
const EVENTS_KEPT: i64 = 2_000;

/// rmcp's resumption hook: every message of a session's streams gets an id that is
/// unique across restarts (SQLite), and a resume replays exactly the events after
/// `Last-Event-ID`, then stays open with the stream's live events.
pub struct SqliteEventStore {
    pub store: Store,
    live: tokio::sync::broadcast::Sender<(i64, String, ServerSseMessage)>,
}

impl SqliteEventStore {
    pub fn new(store: Store) -> Self {
        SqliteEventStore {
            store,
            live: tokio::sync::broadcast::channel(1024).0,
        }
    }
}

fn sse_from_stored(
    id: i64,
    message: Option<&str>,
    retry_ms: Option<i64>,
) -> Result<ServerSseMessage, serde_json::Error> {
    let mut event = match message {
        Some(json) => {
            let message: ServerJsonRpcMessage = serde_json::from_str(json)?;
            ServerSseMessage::new(id.to_string(), message)
        }
        None => ServerSseMessage::priming(id.to_string(), Duration::from_millis(3000)),
    };
    event.retry = retry_ms.map(|ms| Duration::from_millis(ms.max(0) as u64));
    Ok(event)
}

#[async_trait::async_trait]
impl EventStore for SqliteEventStore {
    async fn store_event(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<String, EventStoreError> {
        let message = match &event.message {
            Some(m) => Some(serde_json::to_string(m.as_ref())?),
            None => None,
        };
        let retry = event.retry.map(|d| d.as_millis() as i64);
        let id = self
            .store
            .append_event(stream_id, message.as_deref(), retry, EVENTS_KEPT)?;
        let mut live = event.clone();
        live.event_id = Some(id.to_string());
        let _ = self.live.send((id, stream_id.to_string(), live));
        Ok(id.to_string())
    }

    /// Always an error: an event id alone does not say who asks, and ids are
    /// sequential, so a replay by id alone would hand one session's events (chat,
    /// verdicts) to anyone who guesses a number. rmcp calls this for a GET without a
    /// session (its stateless mode); resumption of a session's streams goes through
    /// [`SqliteEventStore::replay_for_session`] instead.
    async fn replay_events_after(
        &self,
        last_event_id: &str,
    ) -> Result<EventStream, EventStoreError> {
        Err(format!(
            "Last-Event-ID {last_event_id:?} without a session: resumption needs the session's own id"
        )
        .into())
    }
}

impl SqliteEventStore {
    /// Replays the events after `last_event_id` in its stream, then stays open with the
    /// stream's live events, if that stream is `session`'s own (a stream becomes a
    /// session's when the session is handed one of its events, see [`Tracked`](super::Tracked)).
    /// Errors: an id that is not a number, unknown, expired, or of another session's
    /// stream (the same error: to `session` the others' streams do not exist).
    pub async fn replay_for_session(
        &self,
        session: &str,
        last_event_id: &str,
    ) -> Result<EventStream, EventStoreError> {
        let after: i64 = last_event_id
            .parse()
            .map_err(|_| format!("Last-Event-ID {last_event_id:?} is not one of ours"))?;
        let Some(stream) = self.store.session_event_stream(after, session)? else {
            return Err(format!(
                "Last-Event-ID {after} is unknown, expired, or not of this session"
            )
            .into());
        };
        // Subscribe before reading, so nothing falls between the two.
        let mut rx = self.live.subscribe();
        let stored = self.store.events_after(&stream, after)?;
        let mut last = after;
        let mut replay = Vec::with_capacity(stored.len());
        for e in stored {
            last = e.id;
            replay.push(sse_from_stored(e.id, e.message.as_deref(), e.retry_ms)?);
        }
        let (tx, live) = tokio::sync::mpsc::channel::<ServerSseMessage>(64);
        tokio::spawn(async move {
            let mut last_seen = last;
            loop {
                match rx.recv().await {
                    Ok((id, s, event)) if s == stream && id > last_seen => {
                        last_seen = id;
                        if tx.send(event).await.is_err() {
                            return; // the client's stream is gone
                        }
                    }
                    Ok(_) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        // Closing makes the client resume from its last id.
                        tracing::warn!("a resumed stream lagged {n} events behind; closing it");
                        return;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        let mut live = live;
        let live = futures::stream::poll_fn(move |cx| live.poll_recv(cx));
        Ok(Box::pin(futures::stream::iter(replay).chain(live)))
    }
}
