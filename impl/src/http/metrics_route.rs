//! The `GET /metrics` route (docs/operations.md "Metrics"): who may read it
//! ([`metrics`]) and the answer when it is off ([`metrics_off_router`]); what it
//! counts is `crate::metrics`'.

use super::auth::{bearer_token, unauthorized};
use crate::engine::EngineHandle;
use crate::metrics::{model_gauges, Gauges, CONTENT_TYPE};
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use mc_adapters::config::MetricsToken;
use std::collections::BTreeMap;

/// State of `GET /metrics`.
#[derive(Clone)]
pub struct MetricsState {
    pub engine: EngineHandle,
    /// Each identity's sync health, by identity name (the sync age gauge).
    pub identities: BTreeMap<String, crate::health::SyncHealth>,
    /// The token a request must bear (`metrics_token`); `None`: none (the
    /// `metrics_listen` listener without `metrics_token`).
    pub token: Option<MetricsToken>,
}

/// `GET /metrics` outside the bearer middleware of the MCP mounts (their tokens
/// are an identity's; this one is the operator's), behind the Host and Origin
/// guard (see [`crate::server::router`] and [`crate::server::metrics_router`]).
pub fn metrics_router(state: MetricsState) -> axum::Router {
    axum::Router::new()
        .route("/metrics", axum::routing::get(metrics))
        .with_state(state)
}

/// `/metrics` on a listener that does not serve it: 404 with
/// `{"error": "not_found", "message"}` saying how to turn it on.
pub fn metrics_off_router(message: &'static str) -> axum::Router {
    axum::Router::new().route(
        "/metrics",
        axum::routing::any(move || async move {
            (
                StatusCode::NOT_FOUND,
                axum::Json(serde_json::json!({"error": "not_found", "message": message})),
            )
        }),
    )
}

/// `GET /metrics`: every metric in the Prometheus text format (version 0.0.4), the
/// gauges set from a read of the model's state and the sync loops' health at this
/// scrape. With a token configured, a request without `Authorization: Bearer
/// <metrics_token>` or with another token is 401 with `WWW-Authenticate`. When the
/// engine does not answer within [`crate::health::ENGINE_TIMEOUT`], the model's
/// gauges are left out of this scrape (never stale values).
pub async fn metrics(
    State(state): State<MetricsState>,
    headers: axum::http::HeaderMap,
) -> Response {
    if let Some(token) = &state.token {
        match bearer_token(&headers) {
            None => {
                return unauthorized(
                    "missing bearer token: send `Authorization: Bearer <metrics_token>`",
                )
            }
            Some(given) if !token.matches(&given) => return unauthorized("not the metrics token"),
            Some(_) => {}
        }
    }
    // A read of the model's state for display only (the gauges): nothing decides
    // from it.
    let read = state.engine.read(model_gauges);
    let model = match tokio::time::timeout(crate::health::ENGINE_TIMEOUT, read).await {
        Ok(Ok(model)) => model,
        _ => Vec::new(),
    };
    let now = std::time::Instant::now();
    let sync_age = state
        .identities
        .iter()
        .map(|(name, health)| {
            let last = health.snapshot().last_sync_ok;
            (
                name.clone(),
                last.map(|at| now.saturating_duration_since(at)),
            )
        })
        .collect();
    let metrics = state.engine.metrics();
    metrics.set_gauges(&Gauges { model, sync_age });
    let mut response = (StatusCode::OK, metrics.render()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::super::testing::NoWire;
    use super::*;
    use axum::body::Body;
    use axum::extract::Request;
    use mc_model::IdentityId;
    use std::sync::Arc;
    use tower::ServiceExt as _;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    fn app(token: Option<&str>) -> (axum::Router, crate::health::SyncHealth) {
        let mut channel = mc_model::Channel::new();
        channel
            .add_identity(
                IdentityId("bot".into()),
                mc_model::IdentityConfig::new(mc_model::UserId("@bot:hs".into()), []),
            )
            .unwrap();
        let (engine, _task) = crate::engine::spawn(
            channel,
            Arc::new(NoWire::default()),
            crate::engine::NoPersist,
            crate::engine::now_ms,
        );
        let health = crate::health::SyncHealth::default();
        let app = metrics_router(MetricsState {
            engine,
            identities: [("bot".to_string(), health.clone())].into(),
            token: token.map(|t| MetricsToken::new(t).unwrap()),
        });
        (app, health)
    }

    async fn scrape(app: &axum::Router, token: Option<&str>) -> (StatusCode, String) {
        let mut req = Request::builder().method("GET").uri("/metrics");
        if let Some(token) = token {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        let response = app
            .clone()
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        if status == StatusCode::OK {
            assert_eq!(response.headers()[header::CONTENT_TYPE], CONTENT_TYPE);
        }
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn with_a_token_configured_only_that_token_reads_the_metrics() {
        let (app, _health) = app(Some(TOKEN));
        for wrong in [None, Some("mct_an_identitys_token"), Some(&TOKEN[1..])] {
            let (status, _) = scrape(&app, wrong).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{wrong:?}");
        }
        let (status, text) = scrape(&app, Some(TOKEN)).await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            text.contains("# TYPE matrix_channel_pushes_total counter"),
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_scrape_sets_the_gauges_from_the_model_and_the_sync_loops() {
        let (app, health) = app(None);
        let (status, text) = scrape(&app, None).await;
        assert_eq!(status, StatusCode::OK, "no token configured: none asked");
        assert!(
            text.contains("matrix_channel_sessions_attached{identity=\"bot\"} 0"),
            "{text}"
        );
        assert!(
            !text.contains("matrix_channel_sync_age_seconds{"),
            "no sync yet: no age\n{text}"
        );
        health.synced();
        let (_, text) = scrape(&app, None).await;
        assert!(
            text.contains("matrix_channel_sync_age_seconds{identity=\"bot\"} "),
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn metrics_that_are_off_answer_404_saying_how_to_turn_them_on() {
        let app = metrics_off_router("set metrics_token");
        let response = app
            .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let body = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"], "not_found");
        assert_eq!(body["message"], "set metrics_token");
    }
}
