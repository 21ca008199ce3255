//! The POST body of `/mcp` and `/channel` before rmcp reads it ([`jsonrpc_body`]): a
//! body over [`MAX_BODY_BYTES`] or unreadable, JSON-RPC errors for what is not a
//! JSON-RPC message (`mc_adapters::jsonrpc` judges), and JSON-RPC batches on the
//! sessions that negotiated them, handed to rmcp one message at a time.

use super::{supported_protocol_versions, Caller};
use crate::engine::EngineHandle;
use crate::store::Store;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use mc_model::{IdentityId, Input, SessionId};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::SessionState;
use std::time::Duration;
use tracing::Instrument as _;

/// The largest POST body read, in bytes: rmcp's own limit (4 MiB), so a body refused
/// here for its size would be refused by rmcp too. Larger ones get 413.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// The revision a session negotiated, from the `initialize` params its
/// [`SessionStore`] entry keeps; `None` for an unknown session or a torn entry.
fn negotiated_revision(store: &Store, session: &str) -> Option<String> {
    let state: SessionState =
        serde_json::from_str(&store.mcp_session_state(session).ok()??).ok()?;
    let asked = state.initialize_params.protocol_version;
    let supported = supported_protocol_versions();
    Some(if supported.contains(&asked) {
        asked.as_str().to_owned()
    } else {
        rmcp::model::ProtocolVersion::V_2025_11_25
            .as_str()
            .to_owned()
    })
}

fn bad_request(rejection: &mc_adapters::jsonrpc::Rejection) -> Response {
    tracing::debug!(
        code = rejection.code,
        "refused a POST body: {}",
        rejection.message
    );
    (StatusCode::BAD_REQUEST, axum::Json(rejection.response())).into_response()
}

/// What [`jsonrpc_body`] needs: the store (a session's negotiated revision), the
/// engine (a batched `permission_request` that was not taken is told to it) and the
/// config's `batch_deadline_ms`.
#[derive(Clone)]
pub struct BodyState {
    /// Where sessions and their `initialize` params are kept.
    pub store: Store,
    /// The model's engine.
    pub engine: EngineHandle,
    /// How long one batch is worked on, from when its first message is handed over
    /// (`batch_deadline_ms`).
    pub batch_deadline: Duration,
}

/// Whether reading a body failed because it is over the limit (413), rather than
/// because it could not be read at all (an aborted upload, a broken chunk: 400).
fn over_the_limit(error: &axum::Error) -> bool {
    std::error::Error::source(error)
        .is_some_and(|inner| inner.is::<http_body_util::LengthLimitError>())
}

/// 413 `{"error": "payload_too_large"}`: a request body over [`MAX_BODY_BYTES`].
fn payload_too_large() -> Response {
    tracing::debug!("refused a POST body over {MAX_BODY_BYTES} bytes");
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        axum::Json(serde_json::json!({
            "error": "payload_too_large",
            "message": format!("the request body is over {MAX_BODY_BYTES} bytes"),
        })),
    )
        .into_response()
}

/// The POST body of `/mcp` and `/channel`, read before rmcp sees it (rmcp answers
/// anything it cannot deserialize with 415 and no JSON-RPC error). Runs after
/// [`authenticate`](super::authenticate), on a POST that says `Content-Type:
/// application/json`; anything else passes unread (rmcp answers a wrong `Accept` with
/// 406 and a wrong `Content-Type` with 415).
///
/// - Not JSON: 400 with a JSON-RPC parse error (-32700); JSON that is not a JSON-RPC
///   2.0 message: 400 with invalid request (-32600); a request whose params do not fit
///   its method: 400 with invalid params (-32602), keeping its id
///   ([`mc_adapters::jsonrpc::inspect`]). Over [`MAX_BODY_BYTES`] (by its
///   `Content-Length` or as it arrives): 413 `{"error": "payload_too_large"}`. A body
///   that cannot be read to its end (the client stopped sending it): 400
///   `{"error": "unreadable_body"}`.
/// - A batch (a JSON array): on a session that negotiated 2025-03-26, each message is
///   handed to rmcp in order, as its own POST on that session, and the answer is one
///   `application/json` array of the requests' responses (202 when it held only
///   notifications and responses), built by [`mc_adapters::jsonrpc::BatchAnswer`]:
///   a request rmcp did not answer, answered too largely
///   ([`mc_adapters::jsonrpc::MAX_BATCH_ANSWER_BYTES`] for the whole batch), or not
///   answered within [`BodyState::batch_deadline`] gets a -32603 error with its id,
///   and no message after the deadline is started. A message started before the
///   deadline is handed to rmcp in full even when the deadline passes meanwhile (a
///   late request may still take effect). Messages the server sends during
///   a batched request (progress, logs) are not relayed. On any other session, or
///   with none: 400 with invalid request (-32600). Source: MCP 2025-03-26 and
///   2025-06-18, Transports; JSON-RPC 2.0, section 6.
pub async fn jsonrpc_body(State(state): State<BodyState>, req: Request, next: Next) -> Response {
    let is_json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .eq_ignore_ascii_case("application/json")
        });
    if req.method() != axum::http::Method::POST || !is_json {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    // A Content-Length over the bound is refused before a byte of the body is read.
    let announced_over = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .is_some_and(|length| length > MAX_BODY_BYTES as u64);
    let read = if announced_over {
        None
    } else {
        Some(axum::body::to_bytes(body, MAX_BODY_BYTES).await)
    };
    let bytes = match read {
        Some(Ok(bytes)) => bytes,
        None => return payload_too_large(),
        Some(Err(e)) if over_the_limit(&e) => return payload_too_large(),
        Some(Err(e)) => {
            let message = format!("the request body could not be read to its end: {e}");
            tracing::debug!("refused a POST body: {message}");
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(serde_json::json!({"error": "unreadable_body", "message": message})),
            )
                .into_response();
        }
    };
    let items = match mc_adapters::jsonrpc::inspect(&bytes) {
        Err(rejection) => return bad_request(&rejection),
        Ok(mc_adapters::jsonrpc::Body::Message(message)) => {
            if let Err(e) = serde_json::from_value::<ClientJsonRpcMessage>(message.clone()) {
                return bad_request(&mc_adapters::jsonrpc::Rejection::unreadable(
                    &message,
                    &e.to_string(),
                ));
            }
            return next
                .run(Request::from_parts(parts, axum::body::Body::from(bytes)))
                .await;
        }
        Ok(mc_adapters::jsonrpc::Body::Batch(items)) => items,
    };
    let session = parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok());
    let revision = session.and_then(|s| negotiated_revision(&state.store, s));
    if session.is_none()
        || !revision
            .as_deref()
            .is_some_and(mc_adapters::jsonrpc::batches_allowed)
    {
        return bad_request(&mc_adapters::jsonrpc::batch_refused(revision.as_deref()));
    }
    for item in &items {
        if let Err(e) = serde_json::from_value::<ClientJsonRpcMessage>(item.clone()) {
            return bad_request(&mc_adapters::jsonrpc::Rejection::unreadable(
                item,
                &e.to_string(),
            ));
        }
    }
    // Counted from the first message's hand-over, so that a batch always starts.
    let deadline = tokio::time::Instant::now() + state.batch_deadline;
    let deadline_ms = u64::try_from(state.batch_deadline.as_millis()).unwrap_or(u64::MAX);
    let mut answer = mc_adapters::jsonrpc::BatchAnswer::new();
    for item in items {
        let outcome = if tokio::time::Instant::now() >= deadline {
            mc_adapters::jsonrpc::Handling::NotStarted { deadline_ms }
        } else {
            let body =
                axum::body::Body::from(serde_json::to_vec(&item).expect("a JSON value serializes"));
            let mut one = Request::from_parts(parts.clone(), body);
            one.headers_mut().remove(header::CONTENT_LENGTH);
            let limit = answer.remaining_bytes();
            // The hand-over runs on its own task: a deadline that passes while rmcp
            // is still taking the message (its session worker answers
            // `create_stream` and `accept_message` on another task) does not cut it
            // halfway, so a late message is taken in full and may still take effect.
            let handover = tokio::spawn(next.clone().run(one).in_current_span());
            let handled = async {
                let response = match handover.await {
                    Ok(response) => response,
                    Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                    Err(e) => {
                        return mc_adapters::jsonrpc::Handling::Failed(format!(
                            "handing the message to rmcp was cut: {e}"
                        ))
                    }
                };
                batch_outcome(response, &item, limit).await
            };
            tokio::time::timeout_at(deadline, handled)
                .await
                .unwrap_or(mc_adapters::jsonrpc::Handling::Late { deadline_ms })
        };
        if mc_adapters::jsonrpc::kind(&item) != Some(mc_adapters::jsonrpc::Kind::Request)
            && outcome != mc_adapters::jsonrpc::Handling::Accepted
        {
            // JSON-RPC answers no notification and no response, not even in a batch.
            tracing::warn!(
                method = mc_adapters::jsonrpc::method(&item),
                "a batched notification or response was not taken: {outcome:?}"
            );
            permission_request_not_taken(&state.engine, &parts, &item, &outcome);
        }
        answer.add(&item, outcome);
    }
    match answer.finish() {
        None => StatusCode::ACCEPTED.into_response(),
        Some(responses) => axum::Json(responses).into_response(),
    }
}

/// A batched `permission_request` that rmcp did not take never reaches
/// `on_custom_notification`, so the session that waits on it would never be told:
/// it goes to the model as one it could not read (`Input::InvalidPermissionRequest`,
/// which tells the session why), as an unreadable one does. Any other message, or one
/// that may still be taken (late), is left to the warning.
fn permission_request_not_taken(
    engine: &EngineHandle,
    parts: &axum::http::request::Parts,
    item: &serde_json::Value,
    outcome: &mc_adapters::jsonrpc::Handling,
) {
    use mc_adapters::jsonrpc::{kind, method, Kind};
    if kind(item) != Some(Kind::Notification)
        || method(item) != Some(crate::engine::PERMISSION_REQUEST_METHOD)
    {
        return;
    }
    let Some(error) = mc_adapters::jsonrpc::notification_not_taken(outcome) else {
        return;
    };
    // A batch reaches here only on a session, after `authenticate` named its caller.
    let identity = parts.extensions.get::<Caller>().map(|c| c.identity.clone());
    let session = parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok());
    let (Some(identity), Some(session)) = (identity, session) else {
        tracing::warn!("a batched permission_request without identity or session");
        return;
    };
    let _ = engine.submit(Input::InvalidPermissionRequest {
        identity: IdentityId(identity),
        session: SessionId(session.to_owned()),
        error,
    });
}

/// What became of one message of a batch, from rmcp's answer to it: the response to
/// a request from the SSE stream that carries it, or from its JSON body (of which at
/// most `limit` bytes are read); accepted (202) for a notification or a response; the HTTP
/// status and a part of the body for anything rmcp refused.
async fn batch_outcome(
    response: Response,
    item: &serde_json::Value,
    limit: usize,
) -> mc_adapters::jsonrpc::Handling {
    use mc_adapters::jsonrpc::{answers, kind, Handling, Kind};
    let id = item.get("id");
    let status = response.status();
    if status == StatusCode::ACCEPTED {
        return Handling::Accepted;
    }
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if status.is_success() && content_type.starts_with("text/event-stream") {
        let mut events = sse_stream::SseStream::new(response.into_body());
        while let Some(event) = events.next().await {
            let Ok(event) = event else {
                return Handling::Failed("the answer's event stream broke".into());
            };
            let Some(data) = event.data else { continue };
            let Ok(message) = serde_json::from_str::<serde_json::Value>(&data) else {
                continue;
            };
            if id.is_some_and(|id| answers(&message, id)) {
                // Its size is judged by `BatchAnswer::add`.
                return Handling::Answered(message);
            }
        }
        return Handling::Failed("the answer's event stream ended without a response".into());
    }
    let body = match axum::body::to_bytes(response.into_body(), limit).await {
        Ok(body) => body,
        Err(e) if over_the_limit(&e) => return Handling::TooLarge { limit },
        Err(e) => return Handling::Failed(format!("HTTP {status}, its body unreadable: {e}")),
    };
    if let Ok(message) = serde_json::from_slice::<serde_json::Value>(&body) {
        if status.is_success()
            || (kind(&message) == Some(Kind::Response) && message.get("error").is_some())
        {
            return Handling::Answered(message);
        }
    }
    Handling::Failed(format!("HTTP {status}: {}", String::from_utf8_lossy(&body)))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{store, NoWire};
    use super::super::{authenticate, AuthState};
    use super::*;
    use axum::body::Body;
    use axum::routing::post;
    use std::sync::Arc;
    use tower::ServiceExt as _;

    #[tokio::test(start_paused = true)]
    async fn a_body_over_the_bound_is_too_large_and_a_broken_one_is_not() {
        let over = axum::body::to_bytes(axum::body::Body::from(vec![0u8; 11]), 10)
            .await
            .expect_err("11 bytes over a bound of 10");
        assert!(over_the_limit(&over), "{over}");
        let exact = axum::body::to_bytes(axum::body::Body::from(vec![0u8; 10]), 10).await;
        assert_eq!(exact.expect("10 bytes within 10").len(), 10);
        let broken = futures::stream::iter([
            Ok(axum::body::Bytes::from_static(b"{")),
            Err(std::io::Error::other("the client went away")),
        ]);
        let broken = axum::body::to_bytes(axum::body::Body::from_stream(broken), 10)
            .await
            .expect_err("a stream that breaks");
        assert!(!over_the_limit(&broken), "{broken}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_batched_permission_request_that_is_not_taken_is_told_to_its_session() {
        let store = session_of_revision("2025-03-26");
        let mut channel = mc_model::Channel::new();
        channel
            .add_identity(
                IdentityId("a".into()),
                mc_model::IdentityConfig::new(mc_model::UserId("@a:hs".into()), []),
            )
            .unwrap();
        let wire = Arc::new(NoWire::default());
        let (engine, _task) = crate::engine::spawn(
            channel,
            wire.clone(),
            crate::engine::NoPersist,
            crate::engine::now_ms,
        );
        // A stand-in for rmcp that answers every message after the batch's deadline:
        // the request is late, the permission_request after it is never started.
        async fn slow() -> StatusCode {
            tokio::time::sleep(BATCH_DEADLINE * 6).await;
            StatusCode::ACCEPTED
        }
        let app = batch_app(store.clone(), engine.clone(), post(slow));
        let batch = serde_json::json!([
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "method": crate::engine::PERMISSION_REQUEST_METHOD, "params": {
                "request_id": "abcde", "tool_name": "Bash", "description": "run ls",
                "input_preview": "{\"command\":\"ls\"}",
            }},
        ]);
        let (status, _) = post_batch(app, &store, &batch).await;
        assert_eq!(status, StatusCode::OK);
        // The engine has taken what the batch submitted; its session queue's task
        // writes the log message.
        engine.read(|_| ()).await.unwrap();
        crate::testing::idle().await;
        let logs = wire.logs.lock().unwrap().clone();
        assert_eq!(logs.len(), 1, "the session is told once: {logs:?}");
        let (session, message) = &logs[0];
        assert_eq!(session, "s1");
        assert!(
            message.starts_with("matrix-channel did not relay a permission_request: ")
                && message.contains("JSON-RPC batch")
                && message.contains("send it on its own"),
            "{message}"
        );
    }

    /// The deadline of the batches these tests send.
    const BATCH_DEADLINE: Duration = Duration::from_millis(50);

    /// A store holding session `s1` of identity `a` on `/channel`, which negotiated
    /// `revision` (2025-03-26 takes batches).
    fn session_of_revision(revision: &str) -> Store {
        let store = store();
        store.bind_mcp_session("s1", "a", "channel", None).unwrap();
        let params: rmcp::model::InitializeRequestParams =
            serde_json::from_value(serde_json::json!({
                "protocolVersion": revision,
                "capabilities": {},
                "clientInfo": {"name": "claude-code", "version": "1"},
            }))
            .unwrap();
        store
            .set_mcp_session_state(
                "s1",
                &serde_json::to_string(&SessionState::new(params)).unwrap(),
            )
            .unwrap();
        store
    }

    /// `/channel` served by `rmcp` (a stand-in) behind the authentication and
    /// [`jsonrpc_body`] with a deadline of [`BATCH_DEADLINE`].
    fn batch_app(
        store: Store,
        engine: EngineHandle,
        rmcp: axum::routing::MethodRouter,
    ) -> axum::Router {
        axum::Router::new()
            .route("/channel", rmcp)
            .layer(axum::middleware::from_fn_with_state(
                BodyState {
                    store: store.clone(),
                    engine,
                    batch_deadline: BATCH_DEADLINE,
                },
                jsonrpc_body,
            ))
            .layer(axum::middleware::from_fn_with_state(
                AuthState::new(store),
                authenticate,
            ))
    }

    /// POSTs `batch` to `/channel` on session `s1` with a new token of identity `a`:
    /// the status and the body as JSON (`null` when empty).
    async fn post_batch(
        app: axum::Router,
        store: &Store,
        batch: &serde_json::Value,
    ) -> (StatusCode, serde_json::Value) {
        let token = store.create_token("a", "").unwrap();
        let req = Request::builder()
            .method("POST")
            .uri("/channel")
            .header("authorization", format!("Bearer {token}"))
            .header("mcp-session-id", "s1")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .body(Body::from(serde_json::to_vec(batch).unwrap()))
            .unwrap();
        let response = app.oneshot(req).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        let json = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
        (status, json)
    }

    #[tokio::test(start_paused = true)]
    async fn a_batched_message_still_being_handed_over_at_the_deadline_is_handed_over_in_full() {
        let store = session_of_revision("2025-03-26");
        let (engine, _task) = crate::engine::spawn(
            mc_model::Channel::new(),
            Arc::new(NoWire::default()),
            crate::engine::NoPersist,
            crate::engine::now_ms,
        );
        // A stand-in for rmcp whose hand-over of a message to the session (rmcp's
        // `create_stream`, which awaits the session's worker) ends after the deadline,
        // then tells which message it took.
        let (taken_tx, mut taken) = tokio::sync::mpsc::unbounded_channel::<serde_json::Value>();
        let take = move |body: axum::body::Bytes| async move {
            tokio::time::sleep(BATCH_DEADLINE * 2).await;
            let _ = taken_tx.send(serde_json::from_slice(&body).unwrap());
            StatusCode::ACCEPTED
        };
        let app = batch_app(store.clone(), engine, post(take));
        let batch = serde_json::json!([
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
             "params": {"name": "send_message", "arguments": {}}},
            {"jsonrpc": "2.0", "id": 2, "method": "ping"},
        ]);
        let (status, answer) = post_batch(app, &store, &batch).await;
        assert_eq!(status, StatusCode::OK);
        let codes: Vec<_> = answer
            .as_array()
            .unwrap()
            .iter()
            .map(|a| (a["id"].clone(), a["error"]["code"].clone()))
            .collect();
        assert_eq!(
            codes,
            [
                (serde_json::json!(1), serde_json::json!(-32603)),
                (serde_json::json!(2), serde_json::json!(-32603)),
            ],
            "late, then not started: {answer}"
        );
        let late = answer[0]["error"]["message"].as_str().unwrap();
        assert!(late.contains("it may still take effect"), "{late}");
        // The batch has answered; the first message's hand-over goes on and ends.
        let first = tokio::time::timeout(BATCH_DEADLINE * 10, taken.recv())
            .await
            .expect("the hand-over is still going on")
            .expect("the hand-over was cut at the deadline");
        assert_eq!(first["id"], 1);
        // Every hand-over has ended (the stand-in is dropped with them): none other.
        let rest = tokio::time::timeout(BATCH_DEADLINE * 10, taken.recv())
            .await
            .expect("a hand-over never ends");
        assert_eq!(rest, None, "a message after the deadline was started");
    }
}
