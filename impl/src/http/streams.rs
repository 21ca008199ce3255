//! The session manager of both mounts ([`TrackingManager`]): rmcp's local manager with
//! resumption bound to the session, the streams of a closed session ended, and on
//! `/channel` the engine told when a session's first stream opens and its last one
//! closes ([`StreamTracker`]).

use super::{Mount, Peers, SqliteEventStore};
use crate::engine::EngineHandle;
use crate::store::Store;
use futures::{Stream, StreamExt};
use mc_model::{IdentityId, Input, Label, SessionId};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, SessionError,
};
use rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, ServerSseMessage, SessionId as McpSessionId, SessionManager,
};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

/// The session manager of both mounts: rmcp's local manager, plus
/// - resumption bound to the session: a `Last-Event-ID` resumes only a stream of
///   the session that asks (rmcp's own resume replays any stream by the id alone);
/// - on `/channel`, the engine's view of which sessions have their stream open
///   (`Attach` when a session's first stream opens, `Detach` when its last one
///   closes).
///
/// It also ends a session's streams when rmcp closes the session (idle expiry,
/// DELETE): a resumed stream is ours (the event store's replay and live tail) and
/// would otherwise stay open on a dead session, so the client would never reconnect
/// and restore it.
pub struct TrackingManager {
    pub inner: LocalSessionManager,
    /// The same store as `inner`'s event store.
    pub events: Arc<SqliteEventStore>,
    pub tracker: Option<Arc<StreamTracker>>,
    closers: Mutex<HashMap<String, tokio::sync::watch::Sender<bool>>>,
}

/// Counts open streams per session and tells the engine.
pub struct StreamTracker {
    pub store: Store,
    pub engine: EngineHandle,
    pub peers: Peers,
    open: Mutex<HashMap<String, usize>>,
}

impl StreamTracker {
    pub fn new(store: Store, engine: EngineHandle, peers: Peers) -> Self {
        StreamTracker {
            store,
            engine,
            peers,
            open: Mutex::new(HashMap::new()),
        }
    }

    fn identity_of(&self, session: &str) -> Option<String> {
        match self.store.mcp_session_owner(session) {
            Ok(Some((identity, mount))) if mount == Mount::Channel.as_str() => Some(identity),
            _ => None,
        }
    }

    /// The room label `session` brought when it was created (checked then; a stored
    /// text that is no label, which only a hand-edited store holds, counts as none).
    fn label_of(&self, session: &str) -> Option<Label> {
        let text = match self.store.mcp_session_label(session) {
            Ok(text) => text?,
            Err(e) => {
                tracing::error!(%session, "reading the session's room label failed: {e}");
                return None;
            }
        };
        Label::parse(&text)
            .inspect_err(|e| tracing::warn!(%session, "the stored room label is ignored: {e}"))
            .ok()
    }

    fn opened(self: &Arc<Self>, session: &str) -> Option<StreamGuard> {
        let identity = self.identity_of(session)?;
        let first = {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            let n = open.entry(session.to_string()).or_default();
            *n += 1;
            *n == 1
        };
        if first {
            let _ = self.engine.submit(Input::Attach {
                identity: IdentityId(identity.clone()),
                session: SessionId(session.to_string()),
                label: self.label_of(session),
            });
        }
        Some(StreamGuard {
            tracker: self.clone(),
            identity,
            session: session.to_string(),
        })
    }

    fn closed(&self, identity: &str, session: &str) {
        let last = {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            match open.get_mut(session) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    false
                }
                Some(_) => {
                    open.remove(session);
                    true
                }
                None => false,
            }
        };
        if last {
            let _ = self.engine.submit(Input::Detach {
                identity: IdentityId(identity.to_string()),
                session: SessionId(session.to_string()),
            });
        }
    }
}

/// Dropped with its stream: the stream closed.
pub struct StreamGuard {
    tracker: Arc<StreamTracker>,
    identity: String,
    session: String,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.tracker.closed(&self.identity, &self.session);
    }
}

/// A stream handed to a session: it binds the streams of the events it yields to
/// that session (only a stream bound to a session can be resumed by it), and carries
/// the [`StreamGuard`] of a `/channel` event stream.
pub struct Tracked<S> {
    inner: Pin<Box<S>>,
    bind: Option<(Store, String)>,
    _guard: Option<StreamGuard>,
}

impl<S: Stream<Item = ServerSseMessage>> Stream for Tracked<S> {
    type Item = ServerSseMessage;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = self.inner.as_mut().poll_next(cx);
        if let (Poll::Ready(Some(event)), Some((store, session))) = (&next, &self.bind) {
            // Every time, not once: pruning forgets the binding of a stream whose
            // events are all gone, and a session's stream may go on after that.
            if let Some(id) = event.event_id.as_deref().and_then(|id| id.parse().ok()) {
                if let Err(e) = store.bind_event_stream(id, session) {
                    tracing::error!(%session, "binding an event stream failed: {e}");
                }
            }
        }
        next
    }
}

impl TrackingManager {
    pub fn new(
        inner: LocalSessionManager,
        events: Arc<SqliteEventStore>,
        tracker: Option<Arc<StreamTracker>>,
    ) -> Self {
        TrackingManager {
            inner,
            events,
            tracker,
            closers: Mutex::new(HashMap::new()),
        }
    }

    /// Wraps a stream handed to session `id`; `event_stream` says whether it is the
    /// session's event stream (a GET), whose opening and closing the engine hears of.
    fn track<S>(
        &self,
        id: &McpSessionId,
        stream: S,
        event_stream: bool,
    ) -> Tracked<futures::stream::TakeUntil<S, ClosedFuture>>
    where
        S: Stream<Item = ServerSseMessage>,
    {
        let mut closed = {
            let mut closers = self.closers.lock().unwrap_or_else(|e| e.into_inner());
            closers
                .entry(id.to_string())
                .or_insert_with(|| tokio::sync::watch::channel(false).0)
                .subscribe()
        };
        let until: ClosedFuture = Box::pin(async move {
            let _ = closed.wait_for(|c| *c).await;
        });
        let guard = match (&self.tracker, event_stream) {
            (Some(t), true) => t.opened(id.as_ref()),
            _ => None,
        };
        Tracked {
            inner: Box::pin(stream.take_until(until)),
            bind: Some((self.events.store.clone(), id.to_string())),
            _guard: guard,
        }
    }

    /// On `/channel`, waits (at most 10 s) for the session's peer before the stream
    /// is handed out and the engine hears of it (see [`Peers::wait_for`]).
    async fn await_peer(&self, id: &McpSessionId) {
        if let Some(t) = &self.tracker {
            if !t.peers.wait_for(id.as_ref(), Duration::from_secs(10)).await {
                tracing::warn!(session = %id, "a stream opened for a session without a peer");
            }
        }
    }

    fn end_streams(&self, id: &McpSessionId) {
        let closer = self
            .closers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id.as_ref());
        if let Some(closer) = closer {
            let _ = closer.send(true);
        }
    }
}

/// Resolves when the session's streams must end.
pub type ClosedFuture = Pin<Box<dyn std::future::Future<Output = ()> + Send + Sync>>;

impl SessionManager for TrackingManager {
    type Error = <LocalSessionManager as SessionManager>::Error;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(McpSessionId, Self::Transport), Self::Error> {
        self.inner.create_session().await
    }

    async fn initialize_session(
        &self,
        id: &McpSessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &McpSessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &McpSessionId) -> Result<(), Self::Error> {
        if let Some(t) = &self.tracker {
            t.peers.remove(id.as_ref());
        }
        self.end_streams(id);
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &McpSessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.inner.create_stream(id, message).await?;
        Ok(self.track(id, stream, false))
    }

    async fn accept_message(
        &self,
        id: &McpSessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &McpSessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.inner.create_standalone_stream(id).await?;
        self.await_peer(id).await;
        Ok(self.track(id, stream, true))
    }

    async fn resume(
        &self,
        id: &McpSessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        // Not `inner.resume`: with an event store it replays by the id alone.
        let stream = self
            .events
            .replay_for_session(id.as_ref(), &last_event_id)
            .await
            .map_err(|e| LocalSessionManagerError::SessionError(SessionError::EventStore(e)))?;
        self.await_peer(id).await;
        Ok(self.track(id, stream, true))
    }

    async fn restore_session(
        &self,
        id: McpSessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        self.inner.restore_session(id).await
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.inner.event_store()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::store;
    use super::*;

    fn note(n: u32) -> ServerSseMessage {
        let message: ServerJsonRpcMessage = serde_json::from_value(serde_json::json!({
            "jsonrpc": "2.0", "method": "notifications/claude/channel",
            "params": {"content": format!("n{n}"), "meta": {}}
        }))
        .unwrap();
        ServerSseMessage::from_message(message)
    }

    fn content(event: &ServerSseMessage) -> String {
        let json = serde_json::to_value(event.message.as_deref().unwrap()).unwrap();
        json["params"]["content"].as_str().unwrap().to_string()
    }

    #[tokio::test(start_paused = true)]
    async fn a_channel_sessions_first_stream_attaches_it_with_the_label_it_was_created_with() {
        let store = store();
        store
            .bind_mcp_session("web", "bot", "channel", Some("web"))
            .unwrap();
        store
            .bind_mcp_session("plain", "bot", "channel", None)
            .unwrap();
        store.bind_mcp_session("tools", "bot", "mcp", None).unwrap();
        let mut channel = mc_model::Channel::new();
        channel
            .add_identity(
                IdentityId("bot".into()),
                mc_model::IdentityConfig::new(mc_model::UserId("@bot:hs".into()), []),
            )
            .unwrap();
        let (engine, _task) = crate::engine::spawn(
            channel,
            Arc::new(super::super::testing::NoWire::default()),
            crate::engine::NoPersist,
            crate::engine::now_ms,
        );
        let tracker = Arc::new(StreamTracker::new(store, engine.clone(), Peers::default()));
        let _web = tracker.opened("web").expect("a channel session");
        let _plain = tracker.opened("plain").expect("a channel session");
        assert!(tracker.opened("tools").is_none(), "not a channel session");
        let seen = engine
            .read(|c| {
                let bot = c.identity(&IdentityId("bot".into())).unwrap();
                let label = |s: &str| bot.label_of(&SessionId(s.into())).cloned();
                (label("web"), label("plain"), bot.sessions().len())
            })
            .await
            .unwrap();
        assert_eq!(seen, (Some(Label::parse("web").unwrap()), None, 2));
    }

    /// A manager over `events`, as `serve` builds it (no engine).
    fn manager(events: &Arc<SqliteEventStore>) -> TrackingManager {
        let inner = LocalSessionManager::default().with_event_store(events.clone());
        TrackingManager::new(inner, events.clone(), None)
    }

    /// Hands session `session` the events `ids` through the manager's wrapper, as
    /// rmcp does when it streams them to the session's client.
    async fn hand(manager: &TrackingManager, session: &str, ids: &[&str]) {
        let events: Vec<ServerSseMessage> = ids
            .iter()
            .map(|id| {
                let mut e = note(0);
                e.event_id = Some(id.to_string());
                e
            })
            .collect();
        let stream = manager.track(&session.into(), futures::stream::iter(events), false);
        assert_eq!(stream.count().await, ids.len());
    }

    #[tokio::test(start_paused = true)]
    async fn a_resume_replays_exactly_what_followed_in_its_stream_then_stays_live() {
        let events = Arc::new(SqliteEventStore::new(store()));
        let manager = manager(&events);
        let first = events.store_event("s:common", &note(1)).await.unwrap();
        let other = events.store_event("t:common", &note(99)).await.unwrap();
        events.store_event("s:common", &note(2)).await.unwrap();
        events.store_event("s:common", &note(3)).await.unwrap();
        hand(&manager, "s", &[&first]).await;
        hand(&manager, "t", &[&other]).await;
        let mut replay = manager.resume(&"s".into(), first).await.unwrap();
        assert_eq!(content(&replay.next().await.unwrap()), "n2");
        let third = replay.next().await.unwrap();
        assert_eq!(content(&third), "n3");
        events.store_event("t:common", &note(98)).await.unwrap();
        let live = events.store_event("s:common", &note(4)).await.unwrap();
        let next = tokio::time::timeout(Duration::from_secs(5), replay.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(content(&next), "n4");
        assert_eq!(next.event_id.as_deref(), Some(live.as_str()));
        assert!(third.event_id.unwrap().parse::<i64>().unwrap() < live.parse::<i64>().unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_never_resumes_another_sessions_stream_by_its_event_ids() {
        let events = Arc::new(SqliteEventStore::new(store()));
        let manager = manager(&events);
        // Session a's event stream, and the stream of one of its requests.
        let a1 = events.store_event("a:common", &note(1)).await.unwrap();
        events.store_event("a:common", &note(2)).await.unwrap();
        let r1 = events.store_event("req-uuid", &note(3)).await.unwrap();
        events.store_event("req-uuid", &note(4)).await.unwrap();
        hand(&manager, "a", &[&a1, &r1]).await;
        let b1 = events.store_event("b:common", &note(5)).await.unwrap();
        hand(&manager, "b", &[&b1]).await;
        for stolen in [&a1, &r1] {
            assert!(
                manager.resume(&"b".into(), stolen.clone()).await.is_err(),
                "b resumed a's stream from {stolen}"
            );
        }
        // An event of a's stream not handed to anyone yet is not b's either.
        let a3 = events.store_event("a:common", &note(6)).await.unwrap();
        assert!(manager.resume(&"b".into(), a3).await.is_err());
        // a itself resumes both of its streams.
        let mut own = manager.resume(&"a".into(), a1).await.unwrap();
        assert_eq!(content(&own.next().await.unwrap()), "n2");
        let mut own = manager.resume(&"a".into(), r1).await.unwrap();
        assert_eq!(content(&own.next().await.unwrap()), "n4");
    }

    #[tokio::test(start_paused = true)]
    async fn a_replay_by_the_event_id_alone_is_refused() {
        // rmcp's stateless GET (no session) calls this with whatever id it is sent.
        let events = Arc::new(SqliteEventStore::new(store()));
        let manager = manager(&events);
        let a1 = events.store_event("a:common", &note(1)).await.unwrap();
        events.store_event("a:common", &note(2)).await.unwrap();
        hand(&manager, "a", &[&a1]).await;
        assert!(events.replay_events_after(&a1).await.is_err());
        assert!(events.replay_events_after("0").await.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_resume_from_an_unknown_or_malformed_id_is_an_error() {
        let events = Arc::new(SqliteEventStore::new(store()));
        let manager = manager(&events);
        for id in ["42", "0/0", "", "-1", "1e3"] {
            assert!(
                manager.resume(&"s".into(), id.to_string()).await.is_err(),
                "{id:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn ending_a_session_forgets_its_streams_and_bindings() {
        let events = Arc::new(SqliteEventStore::new(store()));
        let manager = manager(&events);
        let a1 = events.store_event("a:common", &note(1)).await.unwrap();
        let r1 = events.store_event("req-uuid", &note(2)).await.unwrap();
        events.store_event("req-uuid", &note(3)).await.unwrap();
        hand(&manager, "a", &[&a1, &r1]).await;
        events.store.delete_mcp_session("a").unwrap();
        assert!(events.store.events_after("req-uuid", 0).unwrap().is_empty());
        assert!(events.store.events_after("a:common", 0).unwrap().is_empty());
        assert!(manager.resume(&"a".into(), r1).await.is_err());
    }
}
