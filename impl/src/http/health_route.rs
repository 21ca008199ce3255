//! The `GET /health` route: who may read what ([`health`]); what the report says is
//! `crate::health`'s.

use super::auth::{bearer_token, unauthorized};
use crate::engine::EngineHandle;
use crate::store::Store;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// State of `GET /health`.
#[derive(Clone)]
pub struct HealthState {
    pub store: Store,
    pub engine: EngineHandle,
    /// Each identity's sync health, by identity name.
    pub identities: std::collections::BTreeMap<String, crate::health::SyncHealth>,
}

/// `GET /health`, outside the bearer middleware (but behind the Host and Origin
/// guard, see [`crate::server::router`]): liveness for anyone, details of the
/// token's own identity for a token holder ([`health`]).
pub fn health_router(state: HealthState) -> axum::Router {
    axum::Router::new()
        .route("/health", axum::routing::get(health))
        .with_state(state)
}

/// `GET /health` (README "Health"). Without `Authorization`: `{"status": "ok"}`
/// (200) or `{"status": "degraded"}` (503: an identity cannot sync, or the engine
/// does not answer) with which identities cannot sync and why in one word, or that
/// the engine did not answer ([`crate::health::report`]), nothing else. With `Authorization: Bearer <token>`: the same
/// status and code, plus `"identity"`: the token's own identity's details
/// ([`crate::health::identity_report`]); never another identity's. An unknown or
/// revoked token is 401, as on the MCP mounts.
pub async fn health(State(state): State<HealthState>, headers: axum::http::HeaderMap) -> Response {
    use crate::health::{identity_report, probe_engine, report, summarize};
    let caller = match bearer_token(&headers) {
        None => None,
        Some(token) => match state.store.token_identity(&token) {
            Ok(Some(identity)) => Some(identity),
            Ok(None) => return unauthorized("unknown or revoked token"),
            Err(e) => {
                tracing::error!("token lookup failed: {e}");
                return StatusCode::INTERNAL_SERVER_ERROR.into_response();
            }
        },
    };
    let engine = probe_engine(&state.engine, caller.clone()).await;
    let now = std::time::Instant::now();
    let statuses: Vec<(&String, crate::health::SyncStatus)> = state
        .identities
        .iter()
        .map(|(name, health)| (name, health.snapshot()))
        .collect();
    let summary = summarize(
        statuses.iter().map(|(name, s)| (name.as_str(), s)),
        &engine,
        now,
    );
    let identity = caller.and_then(|caller| {
        statuses
            .iter()
            .find(|(name, _)| **name == caller)
            .map(|(name, status)| identity_report(name, status, &engine, now))
    });
    let code = if summary.ok() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut response = (code, axum::Json(report(&summary, identity))).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::super::testing::{store, NoWire};
    use super::*;
    use axum::body::Body;
    use axum::extract::Request;
    use mc_model::IdentityId;
    use std::sync::Arc;
    use tower::ServiceExt as _;

    async fn get_health(
        app: &axum::Router,
        token: Option<&str>,
    ) -> (StatusCode, serde_json::Value) {
        let mut req = Request::builder().method("GET").uri("/health");
        if let Some(token) = token {
            req = req.header("authorization", format!("Bearer {token}"));
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
        (status, serde_json::from_slice(&body).unwrap())
    }

    /// `/health` of identities `a` and `b`, both synced: the router, the two sync
    /// healths and a token of `a`.
    fn two_identities_health() -> (
        axum::Router,
        crate::health::SyncHealth,
        crate::health::SyncHealth,
        String,
    ) {
        use crate::health::SyncHealth;
        let store = store();
        let mut channel = mc_model::Channel::new();
        for name in ["a", "b"] {
            channel
                .add_identity(
                    IdentityId(name.into()),
                    mc_model::IdentityConfig::new(mc_model::UserId(format!("@{name}:hs")), []),
                )
                .unwrap();
        }
        let (engine, _task) = crate::engine::spawn(
            channel,
            Arc::new(NoWire::default()),
            crate::engine::NoPersist,
            crate::engine::now_ms,
        );
        let (a, b) = (SyncHealth::default(), SyncHealth::default());
        a.synced();
        b.synced();
        let app = health_router(HealthState {
            store: store.clone(),
            engine,
            identities: [("a".to_string(), a.clone()), ("b".to_string(), b.clone())].into(),
        });
        let token_a = store.create_token("a", "").unwrap();
        (app, a, b, token_a)
    }

    #[tokio::test(start_paused = true)]
    async fn health_tells_liveness_to_anyone_and_details_only_of_the_tokens_own_identity() {
        let (app, _a, b, token_a) = two_identities_health();

        let (status, body) = get_health(&app, None).await;
        assert_eq!(
            (status, body),
            (StatusCode::OK, serde_json::json!({"status": "ok"}))
        );
        let (status, body) = get_health(&app, Some(&token_a)).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["identity"]["name"], "a", "{body}");
        assert_eq!(body["identity"]["undecryptable_backlog"], 0, "{body}");
        assert_eq!(body["identity"]["sync"]["state"], "syncing", "{body}");
        assert!(
            !body.to_string().contains("\"b\""),
            "never another identity: {body}"
        );

        // Another identity cannot sync: degraded for everyone, named with its state,
        // its details for no one but its own tokens.
        b.failed(false, "connection refused".into());
        let (status, body) = get_health(&app, None).await;
        assert_eq!(
            (status, body),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                serde_json::json!({"status": "degraded", "degraded_identities": {"b": "retrying"}})
            )
        );
        let (status, body) = get_health(&app, Some(&token_a)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["identity"]["status"], "ok", "{body}");
        assert!(!body.to_string().contains("connection refused"), "{body}");

        let (status, _) = get_health(&app, Some("mct_wrong")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }

    #[tokio::test(start_paused = true)]
    async fn health_names_the_identity_that_is_degraded_and_recovers_once_its_sync_succeeds() {
        let (app, _a, b, token_a) = two_identities_health();

        // The outage: b's sync fails (a's has not noticed yet).
        b.failed(false, "connection refused".into());
        let (status, body) = get_health(&app, None).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            body,
            serde_json::json!({"status": "degraded", "degraded_identities": {"b": "retrying"}})
        );
        let (status, body) = get_health(&app, Some(&token_a)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            body["degraded_identities"],
            serde_json::json!({"b": "retrying"})
        );
        assert_eq!(body["identity"]["status"], "ok", "{body}");
        assert!(!body.to_string().contains("connection refused"), "{body}");

        // b's next sync succeeds: healthy at once, no wait for anything else.
        b.synced();
        let (status, body) = get_health(&app, None).await;
        assert_eq!(
            (status, body),
            (StatusCode::OK, serde_json::json!({"status": "ok"}))
        );
    }
}
