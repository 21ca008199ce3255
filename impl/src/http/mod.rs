//! HTTP: the axum router's parts for the two MCP mounts (`/mcp`, `/channel`),
//! `GET /health` and `GET /metrics`: which mount a path is ([`Mount`]), the authenticated [`Caller`], the
//! live [`Peers`] of sessions, the Host and Origin guard, and the revisions this server
//! negotiates. The rest, by concern:
//!
//! - `auth`: bearer tokens, [`authenticate`] (session binding, token re-checks on open
//!   streams, shutdown);
//! - `body`: [`jsonrpc_body`], the POST body before rmcp reads it (JSON-RPC errors,
//!   batches, the payload bound);
//! - `health_route`: the `GET /health` handler (what it reports is `crate::health`'s);
//! - `metrics_route`: the `GET /metrics` handler, its token, and its 404 when off
//!   (what it counts is `crate::metrics`');
//! - `stores`: rmcp's durable-session hooks in SQLite ([`SqliteSessionStore`],
//!   [`SqliteEventStore`]);
//! - `streams`: the session manager that binds resumption to the session and tells the
//!   engine when a channel session's stream opens and closes ([`TrackingManager`]).
//!
//! Sessions are not bound to tokens by rmcp: [`authenticate`] does it.

mod auth;
mod body;
mod health_route;
mod metrics_route;
mod stores;
mod streams;
#[cfg(test)]
pub(crate) mod testing;

pub use auth::{authenticate, AuthState, TOKEN_RECHECK};
pub use body::{jsonrpc_body, BodyState, MAX_BODY_BYTES};
pub use health_route::{health, health_router, HealthState};
pub use metrics_route::{metrics, metrics_off_router, metrics_router, MetricsState};
pub use stores::{SqliteEventStore, SqliteSessionStore};
pub use streams::{ClosedFuture, StreamGuard, StreamTracker, Tracked, TrackingManager};

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::service::{Peer, RoleServer};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Which MCP mount a session belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mount {
    /// `/mcp`: every tool, no channel.
    Tools,
    /// `/channel`: the channel capabilities and the tools a channel session needs.
    Channel,
}

impl Mount {
    pub fn as_str(self) -> &'static str {
        match self {
            Mount::Tools => "mcp",
            Mount::Channel => "channel",
        }
    }

    fn of_path(path: &str) -> Option<Mount> {
        let first = path.trim_start_matches('/').split('/').next()?;
        match first {
            "mcp" => Some(Mount::Tools),
            "channel" => Some(Mount::Channel),
            _ => None,
        }
    }
}

/// The authenticated caller of a request: the token's identity, and the token's
/// public id (`crate::store::token_id`: what `token list` shows; the key of its rate
/// limits).
#[derive(Clone, Debug)]
pub struct Caller {
    pub identity: String,
    pub token: String,
}

/// The live peers of MCP sessions, by session id: the engine's way to notify them.
#[derive(Clone, Default)]
pub struct Peers {
    inner: Arc<Mutex<HashMap<String, Peer<RoleServer>>>>,
    registered: Arc<tokio::sync::Notify>,
    /// `logging/setLevel` of each session that sent one (MCP "Logging"; deprecated
    /// by SEP-2577 after 2025-11-25, the newest revision this server negotiates).
    #[allow(deprecated)]
    levels: Arc<Mutex<HashMap<String, rmcp::model::LoggingLevel>>>,
}

impl Peers {
    /// Records the peer of the latest `initialize` of a session (a restored session
    /// gets a new peer; the old one is dead).
    pub fn insert(&self, session: &str, peer: Peer<RoleServer>) {
        self.lock().insert(session.to_string(), peer);
        self.registered.notify_waiters();
    }

    /// Waits until `session` has a peer, at most `timeout`; returns whether it has.
    ///
    /// rmcp runs `on_initialized` (which registers the peer) in the session's worker
    /// after answering the client's `notifications/initialized` with 202, so a client
    /// can open its event stream before the peer exists: a push then would fail and
    /// the session would be taken as detached while its stream stays open.
    pub async fn wait_for(&self, session: &str, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let registered = self.registered.notified();
            if self.get(session).is_some() {
                return true;
            }
            if tokio::time::timeout_at(deadline, registered).await.is_err() {
                return self.get(session).is_some();
            }
        }
    }

    pub fn get(&self, session: &str) -> Option<Peer<RoleServer>> {
        self.lock().get(session).cloned()
    }

    pub fn remove(&self, session: &str) {
        self.lock().remove(session);
        self.levels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(session);
    }

    /// Records the lowest level of log messages `session` asked for.
    #[allow(deprecated)]
    pub fn set_log_level(&self, session: &str, level: rmcp::model::LoggingLevel) {
        self.levels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(session.to_string(), level);
    }

    /// Whether `session` takes `warning` messages: yes unless it set a level above
    /// `warning` (MCP's levels are syslog's, `debug` lowest).
    #[allow(deprecated)]
    pub fn takes_warnings(&self, session: &str) -> bool {
        use rmcp::model::LoggingLevel::*;
        let levels = self.levels.lock().unwrap_or_else(|e| e.into_inner());
        !matches!(
            levels.get(session),
            Some(Error | Critical | Alert | Emergency)
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Peer<RoleServer>>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Refuses, before the token is read, a request whose `Host` (or, without one, the
/// request line's authority, as HTTP/2 sends it) or `Origin` the config does not
/// allow: 403 with `{"error": "forbidden", "message"}` naming the config key
/// ([`mc_adapters::origin::Guard`]; the MCP transport's DNS rebinding rule). rmcp
/// checks the Host again inside; this layer puts both checks before the bearer
/// token, so an unauthenticated page learns nothing from a 401 either.
pub async fn guard_host_and_origin(
    State(guard): State<Arc<mc_adapters::origin::Guard>>,
    req: Request,
    next: Next,
) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()));
    let origin = req.headers().get(header::ORIGIN).map(HeaderValue::as_bytes);
    if let Err(refusal) = guard.check(host.as_deref(), origin) {
        tracing::warn!(
            host = host.as_deref().unwrap_or(""),
            origin = %String::from_utf8_lossy(origin.unwrap_or_default()),
            "refused a request: {}",
            refusal.message()
        );
        return (
            StatusCode::FORBIDDEN,
            axum::Json(serde_json::json!({"error": "forbidden", "message": refusal.message()})),
        )
            .into_response();
    }
    next.run(req).await
}

/// The MCP revisions this server negotiates: every one up to 2025-11-25 (a channel
/// negotiated at 2026-07-28, which has no `initialize`, is not registered by Claude
/// Code). An `initialize` asking for another one gets the newest (rmcp's
/// `negotiate_protocol_version`).
pub fn supported_protocol_versions() -> &'static [rmcp::model::ProtocolVersion] {
    rmcp::model::ProtocolVersion::known_up_to(&rmcp::model::ProtocolVersion::V_2025_11_25)
}

#[cfg(test)]
mod tests {
    use super::testing::{app, store};
    use super::*;
    use axum::body::Body;
    use tower::ServiceExt as _;

    #[tokio::test(start_paused = true)]
    async fn a_host_or_origin_not_allowed_is_403_before_the_token_is_read() {
        let store = store();
        let token = store.create_token("a", "").unwrap();
        let guard = mc_adapters::origin::Guard::new(
            &["localhost".to_owned(), "127.0.0.1".to_owned()],
            None,
        )
        .unwrap();
        let app = app(store).layer(axum::middleware::from_fn_with_state(
            Arc::new(guard),
            guard_host_and_origin,
        ));
        let send = |host: Option<&str>, origin: Option<&str>, token: Option<&str>| {
            let mut req = Request::builder().method("POST").uri("/mcp");
            if let Some(host) = host {
                req = req.header(header::HOST, host);
            }
            if let Some(origin) = origin {
                req = req.header(header::ORIGIN, origin);
            }
            if let Some(token) = token {
                req = req.header("authorization", format!("Bearer {token}"));
            }
            app.clone().oneshot(req.body(Body::empty()).unwrap())
        };
        for token in [Some(token.as_str()), None] {
            for (host, origin, why) in [
                (Some("evil.example:8700"), None, "allowed_hosts"),
                (None, None, "missing or malformed"),
                (
                    Some("localhost:8700"),
                    Some("http://evil.example"),
                    "allowed_origins",
                ),
                (Some("localhost:8700"), Some("null"), "allowed_origins"),
                (Some("localhost:8700"), Some("not an origin"), "malformed"),
            ] {
                let response = send(host, origin, token).await.unwrap();
                assert_eq!(
                    response.status(),
                    StatusCode::FORBIDDEN,
                    "{host:?} {origin:?} token {}",
                    token.is_some()
                );
                let body = axum::body::to_bytes(response.into_body(), 4096)
                    .await
                    .unwrap();
                let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(body["error"], "forbidden");
                assert!(body["message"].as_str().unwrap().contains(why), "{body}");
            }
        }
        // An allowed Host with no Origin, or an Origin of an allowed host, goes on to
        // the token check.
        for origin in [None, Some("http://localhost:6274")] {
            let response = send(Some("127.0.0.1:8700"), origin, Some(&token))
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{origin:?}");
            let response = send(Some("127.0.0.1:8700"), origin, None).await.unwrap();
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{origin:?}");
        }
    }

    #[test]
    fn mounts_are_found_by_their_first_path_segment() {
        assert_eq!(Mount::of_path("/mcp"), Some(Mount::Tools));
        assert_eq!(Mount::of_path("/mcp/"), Some(Mount::Tools));
        assert_eq!(Mount::of_path("/channel"), Some(Mount::Channel));
        assert_eq!(Mount::of_path("/mcpx"), None);
        assert_eq!(Mount::of_path("/"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_for_a_peer_that_never_comes_ends_at_the_timeout() {
        // (rmcp's `Peer` cannot be built outside rmcp; the e2e scenarios hold the
        // registered case: every channel session waits for its peer.)
        let peers = Peers::default();
        let started = tokio::time::Instant::now();
        assert!(!peers.wait_for("s1", Duration::from_millis(50)).await);
        assert!(started.elapsed() >= Duration::from_millis(50));
    }
}
