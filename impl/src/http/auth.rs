//! Bearer-token authentication of the MCP mounts ([`authenticate`]): the token, the
//! binding of a session to its identity and mount, the re-check that ends an open
//! stream once its token is revoked, and the refusals while the server shuts down.

use super::{Caller, Mount};
use crate::shutdown::Stop;
use crate::store::Store;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use std::pin::Pin;
use std::time::Duration;

pub(super) fn unauthorized(message: &str) -> Response {
    let mut response = (
        StatusCode::UNAUTHORIZED,
        axum::Json(serde_json::json!({"error": "unauthorized", "message": message})),
    )
        .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(r#"Bearer realm="matrix-channel", error="invalid_token""#),
    );
    response
}

fn not_found(message: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(serde_json::json!({"error": "not_found", "message": message})),
    )
        .into_response()
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case,
/// RFC 9110 section 11.1), `None` when there is none.
pub(super) fn bearer_token(headers: &axum::http::HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once([' ', '\t'])?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_string())
}

/// State of the authentication middleware.
#[derive(Clone)]
pub struct AuthState {
    pub store: Store,
    /// How often a streaming response rechecks its request's token (see
    /// [`authenticate`]).
    pub recheck: Duration,
    /// The shutdown switch: once set, new requests are refused and event streams end.
    pub stop: Stop,
}

impl AuthState {
    /// Rechecks tokens every [`TOKEN_RECHECK`]; a switch of its own that nothing sets
    /// (see [`AuthState::with_stop`]).
    pub fn new(store: Store) -> Self {
        AuthState {
            store,
            recheck: TOKEN_RECHECK,
            stop: Stop::new(),
        }
    }

    /// The same, stopping with `stop` (`serve`'s, set by the first SIGTERM or SIGINT).
    pub fn with_stop(self, stop: Stop) -> Self {
        AuthState { stop, ..self }
    }
}

/// How often an open event stream checks that its token is still valid.
pub const TOKEN_RECHECK: Duration = Duration::from_secs(2);

/// Fails closed: every request needs `Authorization: Bearer <token>` naming a known
/// token (401 with `WWW-Authenticate` otherwise); a request naming an MCP session
/// must come from that session's identity and mount (404 otherwise: to anyone else
/// the session does not exist). A new session is bound to the caller when rmcp
/// answers its `initialize` with an `Mcp-Session-Id`, with the room label the
/// request brought ([`mc_adapters::room_label::http_label`]: the `room` query
/// parameter or the `Matrix-Channel-Room` header, on `/channel` only); a request
/// without a session id whose label is refused gets 400 and a JSON-RPC error.
///
/// A token is checked on every request, and a streaming response (an SSE event
/// stream, which lives as long as the client stays) ends within
/// [`AuthState::recheck`] of its token being revoked: otherwise a revoked client
/// would keep receiving every push on a stream it opened before.
///
/// Shutdown ([`AuthState::stop`]): once the switch is set, every request is answered
/// `503` (`shutting down`), and every event stream (the SSE response to a GET, which
/// lives as long as its client) ends, so that axum's graceful shutdown does not wait
/// for clients to leave. The SSE answer to a POST (a tool call in flight) is left to
/// finish. Every request is recorded in the switch's registry until its response is
/// done, so a shutdown cut by its deadline names what was open.
pub async fn authenticate(
    State(state): State<AuthState>,
    mut req: Request,
    next: Next,
) -> Response {
    if state.stop.is_stopping() {
        return shutting_down();
    }
    let Some(token) = bearer_token(req.headers()) else {
        return unauthorized("missing bearer token: send `Authorization: Bearer <token>`");
    };
    let identity = match state.store.token_identity(&token) {
        Ok(Some(identity)) => identity,
        Ok(None) => return unauthorized("unknown or revoked token"),
        Err(e) => {
            tracing::error!("token lookup failed: {e}");
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
    };
    let Some(mount) = Mount::of_path(req.uri().path()) else {
        return not_found("no such endpoint: use /mcp or /channel");
    };
    let session = req
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // The room label is read when the request creates a session (no session id).
    let label = match session {
        Some(_) => None,
        None => {
            let header = req
                .headers()
                .get(mc_adapters::room_label::ROOM_HEADER)
                .map(HeaderValue::as_bytes);
            match mc_adapters::room_label::http_label(
                req.uri().query(),
                header,
                mount == Mount::Channel,
            ) {
                Ok(label) => label,
                Err(refusal) => return label_refused(req, &refusal).await,
            }
        }
    };
    if let Some(session) = &session {
        match state.store.mcp_session_owner(session) {
            Ok(Some((owner, owner_mount))) => {
                if owner != identity || owner_mount != mount.as_str() {
                    return not_found("session not found");
                }
            }
            Ok(None) => return not_found("session not found"),
            Err(e) => {
                tracing::error!("session lookup failed: {e}");
                return StatusCode::INTERNAL_SERVER_ERROR.into_response();
            }
        }
    }
    req.extensions_mut().insert(Caller {
        identity: identity.clone(),
        token: crate::store::token_id(&token),
    });
    let event_stream = req.method() == axum::http::Method::GET;
    let guard = state.stop.open(format!(
        "{} {} (identity {identity}{})",
        req.method(),
        req.uri().path(),
        session
            .as_deref()
            .map(|s| format!(", session {s}"))
            .unwrap_or_default()
    ));
    let response = next.run(req).await;
    if session.is_none() {
        if let Some(new) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            let label = label.as_ref().map(mc_model::Label::as_str);
            if let Err(e) = state
                .store
                .bind_mcp_session(new, &identity, mount.as_str(), label)
            {
                tracing::error!("binding session {new} failed: {e}");
            }
        }
    }
    let streaming = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !streaming {
        return response;
    }
    let (parts, body) = response.into_parts();
    let revoked = token_revoked(state.store.clone(), token, identity, state.recheck);
    let stopped = state.stop.stopped();
    let end: Pin<Box<dyn std::future::Future<Output = ()> + Send>> = if event_stream {
        Box::pin(async move {
            tokio::select! {
                () = revoked => {}
                () = stopped => {}
            }
        })
    } else {
        Box::pin(revoked)
    };
    // The guard goes with the body: the request is open until its stream is done.
    let body = body.into_data_stream().take_until(end).map(move |chunk| {
        let _open = &guard;
        chunk
    });
    Response::from_parts(parts, axum::body::Body::from_stream(body))
}

/// 400 with a JSON-RPC error (-32602, the refusal as its message, the id of the
/// request when the body is one) for a session-creating request whose room label is
/// refused: no session is created.
async fn label_refused(req: Request, refusal: &mc_adapters::room_label::Refusal) -> Response {
    tracing::info!("refused a new session: {refusal}");
    let body = axum::body::to_bytes(req.into_body(), super::MAX_BODY_BYTES)
        .await
        .unwrap_or_default();
    let id = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|message| message.get("id").cloned())
        .unwrap_or(serde_json::Value::Null);
    (
        StatusCode::BAD_REQUEST,
        axum::Json(serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {
                "code": mc_adapters::jsonrpc::INVALID_PARAMS,
                "message": refusal.to_string(),
            },
        })),
    )
        .into_response()
}

fn shutting_down() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::CONNECTION, HeaderValue::from_static("close"))],
        "shutting down",
    )
        .into_response()
}

/// Resolves once `token` no longer names `identity` (revoked), checking every
/// `every`. A failed lookup counts as revoked: fail closed.
async fn token_revoked(store: Store, token: String, identity: String, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        match store.token_identity(&token) {
            Ok(Some(still)) if still == identity => continue,
            Ok(_) => {
                tracing::info!(%identity, "a token was revoked: ending its open stream");
                return;
            }
            Err(e) => {
                tracing::error!("token lookup failed, ending the stream: {e}");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{app, app_stopping, call, call_method, store};
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn no_token_or_a_wrong_one_is_401_with_www_authenticate() {
        let store = store();
        let app = app(store.clone());
        for token in [None, Some("mct_wrong"), Some("")] {
            let response = call(&app, "/mcp", token, None).await;
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{token:?}");
            let challenge = response.headers()[header::WWW_AUTHENTICATE]
                .to_str()
                .unwrap();
            assert!(challenge.starts_with("Bearer "), "{challenge}");
        }
        let token = store.create_token("a", "").unwrap();
        let id = store.list_tokens().unwrap()[0].id.clone();
        store.revoke_token(&id).unwrap();
        let response = call(&app, "/mcp", Some(&token), None).await;
        assert_eq!(
            response.status(),
            StatusCode::UNAUTHORIZED,
            "a revoked token"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_valid_token_reaches_the_mounts_as_its_identity_and_nothing_else() {
        let store = store();
        let app = app(store.clone());
        let token = store.create_token("a", "").unwrap();
        let response = call(&app, "/mcp", Some(&token), None).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["x-caller"], "a");
        let response = call(&app, "/other", Some(&token), None).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_session_is_bound_to_its_identity_and_mount_and_hidden_from_others() {
        let store = store();
        let app = app(store.clone());
        let a = store.create_token("a", "").unwrap();
        let b = store.create_token("b", "").unwrap();
        let response = call(&app, "/channel", Some(&a), None).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            store.mcp_session_owner("new-1").unwrap(),
            Some(("a".to_string(), "channel".to_string()))
        );
        assert_eq!(
            call(&app, "/channel", Some(&a), Some("new-1"))
                .await
                .status(),
            StatusCode::OK
        );
        assert_eq!(
            call(&app, "/channel", Some(&b), Some("new-1"))
                .await
                .status(),
            StatusCode::NOT_FOUND,
            "another identity's token"
        );
        assert_eq!(
            call(&app, "/mcp", Some(&a), Some("new-1")).await.status(),
            StatusCode::NOT_FOUND,
            "the other mount"
        );
        assert_eq!(
            call(&app, "/channel", Some(&a), Some("never-issued"))
                .await
                .status(),
            StatusCode::NOT_FOUND
        );
    }

    /// A POST creating a session on `path`, with `header` as its room header and an
    /// `initialize` request (id 7) as its body.
    async fn create(app: &axum::Router, token: &str, path: &str, header: Option<&str>) -> Response {
        let mut req = Request::builder()
            .method("POST")
            .uri(path)
            .header("authorization", format!("Bearer {token}"));
        if let Some(value) = header {
            req = req.header("Matrix-Channel-Room", value);
        }
        let body = serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": "initialize"});
        tower::ServiceExt::oneshot(
            app.clone(),
            req.body(axum::body::Body::from(body.to_string())).unwrap(),
        )
        .await
        .unwrap()
    }

    async fn json_of(response: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_channel_session_keeps_the_label_of_its_header_else_of_its_query() {
        for (path, header, label) in [
            ("/channel?room=web-app", None, Some("web-app")),
            ("/channel", Some("api"), Some("api")),
            ("/channel?room=web", Some("api"), Some("api")),
            ("/channel?other=1", None, None),
        ] {
            let store = store();
            let app = app(store.clone());
            let token = store.create_token("a", "").unwrap();
            let response = create(&app, &token, path, header).await;
            assert_eq!(response.status(), StatusCode::OK, "{path} {header:?}");
            assert_eq!(
                store.mcp_session_label("new-1").unwrap().as_deref(),
                label,
                "{path} {header:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_label_that_is_refused_gets_400_with_a_json_rpc_error_and_no_session() {
        for (path, header, says) in [
            (
                "/channel?room=a%20b",
                None,
                "only A-Z a-z 0-9 . _ - are allowed",
            ),
            ("/channel?room=web", Some("a/b"), "'/'"),
            ("/channel?room=", None, "empty"),
            ("/mcp?room=web", None, "only on /channel"),
            ("/mcp", Some("web"), "only on /channel"),
        ] {
            let store = store();
            let app = app(store.clone());
            let token = store.create_token("a", "").unwrap();
            let response = create(&app, &token, path, header).await;
            assert_eq!(
                response.status(),
                StatusCode::BAD_REQUEST,
                "{path} {header:?}"
            );
            let answer = json_of(response).await;
            assert_eq!(answer["id"], 7, "{answer}");
            assert_eq!(answer["error"]["code"], -32602, "{answer}");
            let message = answer["error"]["message"].as_str().unwrap();
            assert!(message.contains(says), "{path} {header:?}: {message}");
            assert_eq!(store.mcp_session_owner("new-1").unwrap(), None);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_label_is_read_only_when_a_session_is_created() {
        let store = store();
        let app = app(store.clone());
        let token = store.create_token("a", "").unwrap();
        assert_eq!(
            create(&app, &token, "/channel?room=web", None)
                .await
                .status(),
            StatusCode::OK
        );
        let mut req = Request::builder()
            .method("POST")
            .uri("/channel?room=a%20b")
            .header("authorization", format!("Bearer {token}"))
            .header("mcp-session-id", "new-1");
        req = req.header("Matrix-Channel-Room", "x/y");
        let later =
            tower::ServiceExt::oneshot(app.clone(), req.body(axum::body::Body::empty()).unwrap())
                .await
                .unwrap();
        assert_eq!(
            later.status(),
            StatusCode::OK,
            "a later request's label is not read"
        );
        assert_eq!(
            store.mcp_session_label("new-1").unwrap().as_deref(),
            Some("web")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_event_stream_ends_soon_after_its_token_is_revoked_and_others_go_on() {
        let store = store();
        let app = app(store.clone());
        let revoked = store.create_token("a", "stolen").unwrap();
        let kept = store.create_token("a", "laptop").unwrap();
        let open = |token: String| {
            let app = app.clone();
            async move {
                let response = call(&app, "/channel/events", Some(&token), Some("new-1")).await;
                assert_eq!(response.status(), StatusCode::OK);
                response.into_body().into_data_stream()
            }
        };
        // The session must exist for the calls that name it.
        call(&app, "/channel", Some(&kept), None).await;
        let mut stolen = open(revoked.clone()).await;
        let mut laptop = open(kept).await;
        assert!(stolen.next().await.unwrap().is_ok());
        assert!(laptop.next().await.unwrap().is_ok());
        let id = store
            .list_tokens()
            .unwrap()
            .into_iter()
            .find(|t| t.label == "stolen")
            .unwrap()
            .id;
        store.revoke_token(&id).unwrap();
        let drained = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(chunk) = stolen.next().await {
                chunk.unwrap();
            }
        })
        .await;
        assert!(drained.is_ok(), "the revoked token's stream is still open");
        assert!(
            laptop.next().await.unwrap().is_ok(),
            "the other token's goes on"
        );
        let again = call(&app, "/channel/events", Some(&revoked), Some("new-1")).await;
        assert_eq!(again.status(), StatusCode::UNAUTHORIZED);
    }

    #[tokio::test(start_paused = true)]
    async fn at_shutdown_event_streams_end_a_post_stream_goes_on_and_new_requests_get_503() {
        let store = store();
        let stop = Stop::new();
        let app = app_stopping(store.clone(), stop.clone());
        let token = store.create_token("a", "laptop").unwrap();
        call(&app, "/channel", Some(&token), None).await;
        let open = |method: &'static str| {
            let (app, token) = (app.clone(), token.clone());
            async move {
                let response =
                    call_method(&app, method, "/channel/events", Some(&token), Some("new-1")).await;
                assert_eq!(response.status(), StatusCode::OK);
                response.into_body().into_data_stream()
            }
        };
        let mut event_stream = open("GET").await;
        let mut tool_call = open("POST").await;
        assert!(event_stream.next().await.unwrap().is_ok());
        assert!(tool_call.next().await.unwrap().is_ok());
        assert_eq!(stop.open_requests().len(), 2, "{:?}", stop.open_requests());
        assert!(
            stop.open_requests()[0].starts_with("GET /channel/events (identity a, session new-1")
        );

        stop.stop();
        let ended = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(chunk) = event_stream.next().await {
                chunk.unwrap();
            }
        })
        .await;
        assert!(
            ended.is_ok(),
            "the event stream is still open after the stop"
        );
        drop(event_stream);
        assert!(
            tool_call.next().await.unwrap().is_ok(),
            "the POST's stream (a tool call's answer) goes on"
        );
        assert_eq!(stop.open_requests().len(), 1, "{:?}", stop.open_requests());
        drop(tool_call);
        assert!(stop.open_requests().is_empty());
        let late = call(&app, "/channel", Some(&token), None).await;
        assert_eq!(late.status(), StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn the_bearer_scheme_is_read_in_any_case_and_nothing_else_is_a_token() {
        let token = |value: &str| {
            let mut headers = axum::http::HeaderMap::new();
            headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
            bearer_token(&headers)
        };
        for ok in [
            "Bearer mct_x",
            "bearer mct_x",
            "BEARER  mct_x ",
            "Bearer\tmct_x",
        ] {
            assert_eq!(token(ok).as_deref(), Some("mct_x"), "{ok:?}");
        }
        for bad in [
            "",
            "Bearer",
            "Bearer ",
            "Basic mct_x",
            "Bearermct_x",
            "mct_x",
        ] {
            assert_eq!(token(bad), None, "{bad:?}");
        }
        assert_eq!(bearer_token(&axum::http::HeaderMap::new()), None);
    }
}
