//! `GET /metrics` (issue 28, "Metrics"; docs/operations.md "Metrics") against the real
//! binary: a scrape is read by the Prometheus text parser of the Python
//! `prometheus_client` package, and its counters move as the test acts: a push of
//! the human's message (and its latency), a stranger's message dropped, tool calls
//! ok and failed, a permission prompt posted and answered by `yes <id>`, its verdict
//! sent; the gauges show the attached session and the identity's sync age. Refused:
//! no token or an identity's token (401), a Host not allowed (403); `/metrics` is 404
//! on `listen` when only `metrics_listen` serves it, which takes no token then.

use crate::harness::expect::{permission_request, CHANNEL, PERMISSION, PERMISSION_REQUEST};
use crate::harness::fixture::{Fixture, IDENTITY};
use crate::harness::prometheus::Scrape;
use crate::harness::{random_suffix, WAIT};
use serde_json::json;
use std::time::{Duration, Instant};

/// The `metrics_token` of the scenarios.
const TOKEN: &str = "e2e-metrics-token-0123456789abcdef";

/// GET `url` with `Host: host` when given and `Authorization: Bearer token`.
async fn get(url: &str, host: Option<&str>, token: Option<&str>) -> (u16, String) {
    let mut req = reqwest::Client::new().get(url);
    if let Some(host) = host {
        req = req.header("host", host);
    }
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    let response = req.send().await.expect("GET /metrics");
    let status = response.status().as_u16();
    (status, response.text().await.expect("a body"))
}

/// A scrape of `url` with `token`, parsed.
async fn scrape(url: &str, token: Option<&str>) -> Scrape {
    let (status, text) = get(url, None, token).await;
    assert_eq!(status, 200, "{text}");
    Scrape::parse(&text).await
}

/// Scrapes until `ready` holds (what the server counts after it answered the test
/// may be counted a moment later), for at most `WAIT`; returns that scrape.
async fn scrape_until(url: &str, what: &str, ready: impl Fn(&Scrape) -> bool) -> Scrape {
    let start = Instant::now();
    loop {
        let now = scrape(url, Some(TOKEN)).await;
        if ready(&now) {
            return now;
        }
        assert!(
            start.elapsed() < WAIT,
            "{what}: not within {WAIT:?}: {now:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The sum of `name`'s samples whose labels include `with` and whose `label` is
/// not `not`.
fn sum_other(scrape: &Scrape, name: &str, with: (&str, &str), label: &str, not: &str) -> f64 {
    scrape
        .0
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| s.labels.get(with.0).map(String::as_str) == Some(with.1))
        .filter(|s| s.labels.get(label).map(String::as_str) != Some(not))
        .map(|s| s.value)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_with_the_metrics_token_parses_and_its_counters_move_as_the_test_acts() {
    let f = Fixture::start(|c| c.top_level = Some(format!("metrics_token = \"{TOKEN}\""))).await;
    let url = f.server.url("/metrics");

    // Refused: no token, an identity's token, a Host not allowed (before the token).
    assert_eq!(get(&url, None, None).await.0, 401);
    assert_eq!(get(&url, None, Some(f.server.token(IDENTITY))).await.0, 401);
    assert_eq!(
        get(&url, Some("evil.example"), Some(TOKEN)).await.0,
        403,
        "the Host and Origin guard"
    );

    let before = scrape(&url, Some(TOKEN)).await;
    for (family, kind) in [
        ("matrix_channel_pushes", "counter"),
        ("matrix_channel_prompts", "counter"),
        ("matrix_channel_push_latency_seconds", "histogram"),
        ("matrix_channel_engine_input_seconds", "histogram"),
        ("matrix_channel_sessions_attached", "gauge"),
        ("matrix_channel_sync_age_seconds", "gauge"),
    ] {
        assert_eq!(before.kind(family), Some(kind), "{family}: {before:#?}");
    }
    let bot = [("identity", IDENTITY)];
    assert_eq!(
        before.get("matrix_channel_sessions_attached", &bot),
        Some(0.0)
    );
    let age = before
        .get("matrix_channel_sync_age_seconds", &bot)
        .expect("the identity synced before serve listened");
    assert!((0.0..120.0).contains(&age), "sync age {age}");

    let (session, _) = f.channel("session").await;
    let attached = scrape_until(&url, "the session attached", |s| {
        s.get("matrix_channel_sessions_attached", &bot) == Some(1.0)
    })
    .await;
    assert_eq!(
        attached.get("matrix_channel_prompts_pending", &bot),
        Some(0.0)
    );

    // A stranger's message is dropped; the human's, after it, is pushed.
    let suffix = random_suffix();
    f.stranger
        .send_text(&f.room, &format!("stranger {suffix}"))
        .await;
    f.human.send_text(&f.room, &format!("hello {suffix}")).await;
    let push = session.next_notification(WAIT).await;
    assert_eq!(push.method, CHANNEL, "{push:?}");

    // Tool calls: one ok, one failed.
    session.call_ok("whoami", json!({})).await;
    let failed = session
        .call("read_messages", json!({ "room_id": "!nowhere:localhost" }))
        .await
        .expect("a tool result");
    assert_eq!(failed["isError"], true, "{failed}");

    // A permission prompt, answered by the human's `yes <id>`.
    let id = "mtrcs";
    session
        .notify(
            PERMISSION_REQUEST,
            permission_request(id, "Bash", "List files", r#"{"command": "ls"}"#),
        )
        .await;
    f.wait_prompt(id).await;
    let pending = scrape_until(&url, "the prompt is pending", |s| {
        s.get("matrix_channel_prompts_pending", &bot) == Some(1.0)
    })
    .await;
    assert_eq!(
        pending.count("matrix_channel_prompts_total", &[("outcome", "posted")])
            - before.count("matrix_channel_prompts_total", &[("outcome", "posted")]),
        1.0
    );
    f.human.send_text(&f.room, &format!("yes {id}")).await;
    let verdict = session.next_notification(WAIT).await;
    assert_eq!(verdict.method, PERMISSION, "{verdict:?}");

    let sent = [("result", "sent")];
    let after = scrape_until(&url, "the verdict's send is counted", |s| {
        s.count("matrix_channel_verdict_sends_total", &sent)
            > before.count("matrix_channel_verdict_sends_total", &sent)
    })
    .await;
    let moved = |name: &str, labels: &[(&str, &str)]| {
        after.count(name, labels) - before.count(name, labels)
    };
    assert!(
        moved(
            "matrix_channel_pushes_total",
            &[("kind", "message"), ("result", "sent")]
        ) >= 1.0,
        "{after:#?}"
    );
    assert!(moved("matrix_channel_push_latency_seconds_count", &[]) >= 1.0);
    assert!(moved("matrix_channel_drops_total", &[("reason", "stranger")]) >= 1.0);
    assert_eq!(
        moved(
            "matrix_channel_tool_calls_total",
            &[("tool", "whoami"), ("result", "ok")]
        ),
        1.0
    );
    let failed_calls = |s: &Scrape| {
        sum_other(
            s,
            "matrix_channel_tool_calls_total",
            ("tool", "read_messages"),
            "result",
            "ok",
        )
    };
    assert_eq!(failed_calls(&after) - failed_calls(&before), 1.0);
    assert_eq!(
        moved("matrix_channel_tool_seconds_count", &[("tool", "whoami")]),
        1.0
    );
    assert_eq!(
        moved(
            "matrix_channel_verdicts_total",
            &[("behavior", "allow"), ("via", "text")]
        ),
        1.0
    );
    assert_eq!(
        moved("matrix_channel_prompts_total", &[("outcome", "answered")]),
        1.0
    );
    assert_eq!(moved("matrix_channel_verdict_sends_total", &sent), 1.0);
    assert_eq!(
        moved(
            "matrix_channel_matrix_sends_total",
            &[("kind", "prompt"), ("result", "ok")]
        ),
        1.0
    );
    assert!(moved("matrix_channel_engine_input_seconds_count", &[]) >= 1.0);
    assert_eq!(after.get("matrix_channel_prompts_pending", &bot), Some(0.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_listen_alone_serves_metrics_there_without_a_token_and_404_on_listen() {
    let f = Fixture::start(|c| c.top_level = Some("metrics_listen = \"127.0.0.1:0\"".into())).await;
    let (status, body) = get(&f.server.url("/metrics"), None, Some(TOKEN)).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("served on metrics_listen"), "{body}");

    let url = f
        .server
        .stdout_line("matrix-channel: metrics on ")
        .expect("serve printed the metrics address");
    let scraped = scrape(&url, None).await;
    assert_eq!(
        scraped.kind("matrix_channel_tool_calls"),
        None,
        "no tool was called yet"
    );
    assert!(
        scraped
            .get("matrix_channel_sync_age_seconds", &[("identity", IDENTITY)])
            .is_some(),
        "{scraped:#?}"
    );
    assert_eq!(get(&url, Some("evil.example"), None).await.0, 403);
    let health = url.replace("/metrics", "/health");
    assert_eq!(
        get(&health, None, None).await.0,
        404,
        "it serves nothing else"
    );
}
