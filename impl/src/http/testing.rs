//! What the tests of the `http` modules share: a fresh store, the authentication
//! middleware in front of a stand-in for rmcp, and a wire that sends nothing.

use super::{authenticate, AuthState, Caller};
use crate::shutdown::Stop;
use crate::store::Store;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use mc_model::{IdentityId, SessionId};
use std::sync::Mutex;
use std::time::Duration;
use tower::ServiceExt as _;

pub(super) fn store() -> Store {
    let dir = std::env::temp_dir().join(format!("mc-http-{}", rand::random::<u64>()));
    Store::open(&dir).unwrap()
}

/// The middleware in front of a stand-in for rmcp that hands out session `new-1`
/// when a request carries no session id.
pub(super) fn app(store: Store) -> axum::Router {
    app_stopping(store, Stop::new())
}

/// [`app`] whose middleware stops with `stop`.
pub(super) fn app_stopping(store: Store, stop: Stop) -> axum::Router {
    async fn inner(req: Request) -> Response {
        let mut response = StatusCode::OK.into_response();
        if req.headers().get("mcp-session-id").is_none() {
            response
                .headers_mut()
                .insert("mcp-session-id", HeaderValue::from_static("new-1"));
        }
        let caller = req.extensions().get::<Caller>().unwrap().identity.clone();
        response
            .headers_mut()
            .insert("x-caller", HeaderValue::from_str(&caller).unwrap());
        response
    }
    /// An endless event stream, as rmcp's GET answers: an event every 10 ms (of the
    /// paused clock in the tests that read it).
    async fn events() -> Response {
        let ticks = futures::stream::unfold(0u64, |n| async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            Some((
                Ok::<_, std::convert::Infallible>(format!("data: {n}\n\n")),
                n + 1,
            ))
        });
        let mut response = Response::new(Body::from_stream(ticks));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        response
    }
    axum::Router::new()
        .route("/mcp", post(inner))
        .route("/channel", post(inner))
        .route("/channel/events", post(events).get(events))
        .route("/other", post(inner))
        .layer(axum::middleware::from_fn_with_state(
            AuthState {
                store,
                recheck: Duration::from_millis(50),
                stop,
            },
            authenticate,
        ))
}

pub(super) async fn call(
    app: &axum::Router,
    path: &str,
    token: Option<&str>,
    session: Option<&str>,
) -> Response {
    call_method(app, "POST", path, token, session).await
}

pub(super) async fn call_method(
    app: &axum::Router,
    method: &str,
    path: &str,
    token: Option<&str>,
    session: Option<&str>,
) -> Response {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    if let Some(session) = session {
        req = req.header("mcp-session-id", session);
    }
    app.clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap()
}

/// A wire on which every Matrix send and push fails; it records the log messages
/// the model sends to sessions (the `/health` tests only read the engine). Room
/// creations fail too, or never end while `creations_hang` is set.
#[derive(Default)]
pub(crate) struct NoWire {
    pub(crate) logs: Mutex<Vec<(String, String)>>,
    pub(crate) creations_hang: bool,
}

#[async_trait::async_trait]
impl crate::engine::Wire for NoWire {
    async fn notify(&self, _: &SessionId, _: &str, _: serde_json::Value) -> Result<(), String> {
        Err("no wire".into())
    }
    async fn post_prompt(
        &self,
        _: &IdentityId,
        _: &mc_model::RoomId,
        _: &mc_model::PromptText,
        _: &str,
    ) -> Result<mc_model::EventId, String> {
        Err("no wire".into())
    }
    async fn typing(&self, _: &IdentityId, _: &mc_model::RoomId, _: bool) -> Result<(), String> {
        Err("no wire".into())
    }
    async fn edit_prompt(
        &self,
        _: &IdentityId,
        _: &mc_model::RoomId,
        _: &mc_model::EventId,
        _: &mc_model::PromptText,
    ) -> Result<(), String> {
        Err("no wire".into())
    }
    async fn announce(
        &self,
        _: &IdentityId,
        _: &mc_model::RoomId,
        _: &mc_model::PromptText,
    ) -> Result<(), String> {
        Err("no wire".into())
    }
    async fn notice(
        &self,
        _: &IdentityId,
        _: &mc_model::RoomId,
        _: &mc_model::EventId,
        _: &str,
    ) -> Result<(), String> {
        Err("no wire".into())
    }
    async fn join_room(&self, _: &IdentityId, _: &mc_model::RoomId) -> Result<(), String> {
        Err("no wire".into())
    }
    async fn create_room(
        &self,
        _: &IdentityId,
        _: &str,
        _: &[mc_model::UserId],
    ) -> Result<mc_model::RoomId, String> {
        if self.creations_hang {
            std::future::pending::<()>().await;
        }
        Err("no wire".into())
    }
    async fn write(
        &self,
        _: &IdentityId,
        _: &mc_model::AgentWrite,
    ) -> Result<crate::write::Written, crate::write::ToolError> {
        Err(crate::write::ToolError::Upstream("no wire".into()))
    }
    async fn log_message(&self, session: &SessionId, message: &str) -> Result<(), String> {
        self.logs
            .lock()
            .unwrap()
            .push((session.to_string(), message.to_string()));
        Ok(())
    }
}
