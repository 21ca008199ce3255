//! Attacks on the HTTP surface that the eight scenarios do not cover: what a token
//! holder can take from sessions that are not its own.

use crate::harness::expect::{
    assert_push, assert_verdict, message, permission_request, PERMISSION_REQUEST,
};
use crate::harness::fixture::{Fixture, IDENTITY};
use crate::harness::mcp::McpClient;
use crate::harness::WAIT;
use std::time::Duration;

/// Event ids are small integers handed out in order: an attacker tries them all.
const GUESSES: u32 = 150;

/// A GET of an event stream with `Last-Event-ID: last_event_id`; returns what arrived
/// within `wait` (an SSE stream that is not ours ends at once, empty).
async fn resume_raw(
    url: &str,
    token: &str,
    session: Option<&str>,
    protocol: &str,
    last_event_id: &str,
    wait: Duration,
) -> String {
    let mut req = reqwest::Client::new()
        .get(url)
        .bearer_auth(token)
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", protocol)
        .header("last-event-id", last_event_id);
    if let Some(session) = session {
        req = req.header("mcp-session-id", session);
    }
    let mut resp = req.send().await.expect("GET the event stream");
    let mut out = format!("HTTP {}\n", resp.status());
    let deadline = tokio::time::Instant::now() + wait;
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, resp.chunk()).await {
        out.push_str(&String::from_utf8_lossy(&chunk));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_session_resumes_another_sessions_events_by_guessing_last_event_ids() {
    let f = Fixture::start(|_| {}).await;
    let token = f.server.token(IDENTITY);
    let (victim, connected) = f.channel("victim").await;
    let secret = "the secret meant for the victim alone";
    let id = f.human.send_text(&f.room, secret).await;
    assert_push(
        &victim.next_notification(WAIT).await,
        &message(secret, &f.origin(&id).await),
    );
    // A verdict goes to the session that asked, and only there.
    let request = "wxyzq";
    victim
        .notify(
            PERMISSION_REQUEST,
            permission_request(request, "Bash", "ls", "{}"),
        )
        .await;
    f.wait_prompt(request).await;
    f.human.send_text(&f.room, &format!("yes {request}")).await;
    assert_verdict(&victim.next_notification(WAIT).await, request, "allow");

    // Another session of the same token: an /mcp session, which gets no pushes.
    let attacker = McpClient::spawn("attacker").await;
    let theirs = attacker.connect(&f.server.url("/mcp"), token).await;
    let leaked = |text: &str| text.contains(secret) || text.contains(request);
    for guess in 0..=GUESSES {
        let guess = guess.to_string();
        let short = Duration::from_millis(300);
        // Its own session id, someone else's event id.
        let got = resume_raw(
            &f.server.url("/mcp"),
            token,
            Some(&theirs.session_id),
            "2025-11-25",
            &guess,
            short,
        )
        .await;
        assert!(!leaked(&got), "Last-Event-ID {guess} on /mcp: {got}");
        // No session at all (rmcp's stateless mode), on both mounts.
        for path in ["/mcp", "/channel"] {
            let got = resume_raw(
                &f.server.url(path),
                token,
                None,
                "2026-07-28",
                &guess,
                short,
            )
            .await;
            assert!(
                !leaked(&got),
                "Last-Event-ID {guess} on {path} without a session: {got}"
            );
        }
    }

    // The victim itself resumes its own stream with the same kind of request.
    let mut resumed = false;
    for guess in 0..=GUESSES {
        let got = resume_raw(
            &f.server.url("/channel"),
            token,
            Some(&connected.session_id),
            "2025-11-25",
            &guess.to_string(),
            Duration::from_millis(300),
        )
        .await;
        if got.contains(request) {
            resumed = true;
            break;
        }
    }
    assert!(resumed, "the victim could not resume its own stream");
}
