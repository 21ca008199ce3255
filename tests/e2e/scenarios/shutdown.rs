//! Shutdown (issue 13): SIGTERM with sessions attached (their event streams open on
//! `/channel` and `/mcp`) ends the streams and the process exits cleanly; a request
//! that never completes does not hold the process past its deadline; a second signal
//! exits at once. Exit codes as in README "Stopping the server". No latency is
//! asserted: the process must be gone within a generous bound, with the right status.

use crate::harness::expect::{assert_push, message};
use crate::harness::fixture::{Fixture, IDENTITY};
use crate::harness::mcp::McpClient;
use crate::harness::WAIT;
use std::os::unix::process::ExitStatusExt as _;
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// How long `serve` may take to exit after a signal before the test fails. The server
/// promises 5 s; this bound only tells "exits" from "hangs" on a busy machine.
const EXIT_BOUND: Duration = Duration::from_secs(20);

/// Waits until `client`'s SDK has opened its GET event stream (answered 200).
async fn wait_event_stream(client: &McpClient) {
    let open = || {
        client
            .events()
            .iter()
            .any(|e| e["event"] == "http" && e["method"] == "GET" && e["status"] == 200)
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while !open() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the client's event stream did not open within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A session on `/channel` that is attached (a push arrived on its event stream) and
/// one on `/mcp` whose event stream is open.
async fn attach_sessions(f: &Fixture) -> (McpClient, McpClient) {
    let (channel, _) = f.channel("channel").await;
    let id = f.human.send_text(&f.room, "before the shutdown").await;
    let origin = f.origin(&id).await;
    assert_push(
        &channel.next_notification(WAIT).await,
        &message("before the shutdown", &origin),
    );
    let tools = McpClient::spawn("tools").await;
    tools
        .connect(&f.server.url("/mcp"), f.server.token(IDENTITY))
        .await;
    wait_event_stream(&tools).await;
    (channel, tools)
}

/// The interim answer HTTP/1.1 gives a request that asked `Expect: 100-continue`,
/// once the server starts reading its body.
const CONTINUE: &str = "HTTP/1.1 100 Continue\r\n\r\n";

/// A tool call whose body never finishes arriving: the request is in flight (past
/// authentication, the server waiting for the body) for as long as the connection
/// stays. It asks `Expect: 100-continue`, so the server's HTTP layer answers `100
/// Continue` when the request's handler first reads the body, which is after
/// authentication recorded the request as in flight; the body's start is sent after
/// that answer.
async fn stuck_request(f: &Fixture) -> tokio::net::TcpStream {
    let mut conn = tokio::net::TcpStream::connect(f.server.addr())
        .await
        .expect("connect to serve");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Expect: 100-continue\r\nContent-Length: 1000\r\n\r\n",
        f.server.addr(),
        f.server.token(IDENTITY)
    );
    conn.write_all(head.as_bytes())
        .await
        .expect("send the head");
    conn.flush().await.expect("flush");
    let mut answer = vec![0u8; CONTINUE.len()];
    tokio::time::timeout(WAIT, conn.read_exact(&mut answer))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "no 100 Continue within {WAIT:?}: the server never read the body; serve.log:\n{}",
                f.server.log_tail(30)
            )
        })
        .expect("read the interim answer");
    assert_eq!(
        String::from_utf8_lossy(&answer),
        CONTINUE,
        "the server's first answer to the stuck request"
    );
    conn.write_all(br#"{"jsonrpc": "2.0", "#)
        .await
        .expect("send the body's start");
    conn.flush().await.expect("flush");
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_sessions_attached_ends_their_event_streams_and_exits_with_0() {
    let mut f = Fixture::start(|_| {}).await;
    let (_channel, _tools) = attach_sessions(&f).await;

    f.server.signal("TERM").await;
    let status = f.server.wait_exit(EXIT_BOUND).await;
    assert_eq!(
        status.code(),
        Some(0),
        "a clean shutdown exits 0 ({status}); serve.log:\n{}",
        f.server.log_tail(30)
    );
    let log = f.server.log_text();
    assert!(
        log.contains("shutdown complete"),
        "{}",
        f.server.log_tail(30)
    );
    assert!(
        !log.contains("still open"),
        "nothing was left open: {}",
        f.server.log_tail(30)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_never_completes_is_cut_at_the_deadline_and_serve_exits_with_3() {
    let mut f = Fixture::start(|_| {}).await;
    let (_channel, _tools) = attach_sessions(&f).await;
    let _conn = stuck_request(&f).await;

    f.server.signal("TERM").await;
    let status = f.server.wait_exit(EXIT_BOUND).await;
    assert_eq!(
        status.code(),
        Some(3),
        "a shutdown that cut something exits 3 ({status}); serve.log:\n{}",
        f.server.log_tail(30)
    );
    let log = f.server.log_text();
    let cut = log
        .lines()
        .find(|l| l.contains("HTTP requests still open"))
        .unwrap_or_else(|| panic!("no line names what was cut:\n{}", f.server.log_tail(30)));
    assert!(
        cut.contains("POST /mcp (identity bot"),
        "the line names the request: {cut}"
    );
    assert!(!cut.contains("GET /"), "the event streams had ended: {cut}");
    assert!(
        log.contains("shutdown complete"),
        "{}",
        f.server.log_tail(30)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_during_the_shutdown_exits_at_once_with_143() {
    let mut f = Fixture::start(|_| {}).await;
    let (_channel, _tools) = attach_sessions(&f).await;
    // Holds the first shutdown in its HTTP drain (3 s) while the second signal comes.
    let _conn = stuck_request(&f).await;

    f.server.signal("TERM").await;
    f.server.wait_log("shutting down").await;
    f.server.signal("TERM").await;
    let status = f.server.wait_exit(EXIT_BOUND).await;
    assert_eq!(
        (status.code(), status.signal()),
        (Some(143), None),
        "the second signal's exit, not the drain's ({status}); serve.log:\n{}",
        f.server.log_tail(30)
    );
    let log = f.server.log_text();
    assert!(log.contains("second signal"), "{}", f.server.log_tail(30));
    assert!(
        !log.contains("shutdown complete"),
        "it did not wait for the drain: {}",
        f.server.log_tail(30)
    );
}
