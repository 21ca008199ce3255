//! The MCP client: rmcp's Streamable HTTP client (`transport-streamable-http-client-
//! reqwest`), the same transport Claude Code speaks to `/channel`. Every server
//! notification is timestamped (`Instant::now()`) when rmcp hands it to the handler,
//! that is after the SSE event is read and parsed, as any client would have to.
//!
//! rmcp's service loop runs each notification handler in a task of its own
//! (`spawn_service_task`), so on a multi-thread runtime two notifications that arrive
//! together can reach the handler swapped (the burst saw 5 of 2,000 swapped). The
//! clients therefore live on a current-thread runtime of their own ([`Clients`]),
//! whose run queue is first in, first out: the handler sees the stream's order, and
//! nothing else runs on that thread to delay a timestamp.

use rmcp::model::{ClientNotification, CustomNotification};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::Value;
use std::time::Instant;
use tokio::sync::mpsc;

/// A notification as it arrived.
#[derive(Debug)]
pub struct Arrival {
    pub at: Instant,
    /// For instance `notifications/claude/channel`.
    pub method: String,
    pub params: Value,
}

/// The client handler: forwards every custom notification (the channel's pushes and
/// verdicts are custom notifications to rmcp) with its arrival time.
#[derive(Clone)]
pub struct Arrivals {
    tx: mpsc::UnboundedSender<Arrival>,
}

impl ClientHandler for Arrivals {
    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        _context: NotificationContext<RoleClient>,
    ) {
        let at = Instant::now();
        let _ = self.tx.send(Arrival {
            at,
            method: notification.method,
            params: notification.params.unwrap_or(Value::Null),
        });
    }
}

/// A connected MCP session.
pub type Session = RunningService<RoleClient, Arrivals>;

/// A thread running a current-thread tokio runtime that holds every MCP client.
pub struct Clients {
    handle: tokio::runtime::Handle,
}

impl Clients {
    /// Starts the thread and its runtime (it lives until the process ends).
    pub fn start() -> std::io::Result<Clients> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("mcp-clients".to_owned())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))?;
        Ok(Clients { handle })
    }

    /// Initializes an MCP session at `url` (for instance
    /// `http://127.0.0.1:8700/channel`) with `token` as the bearer token; rmcp opens
    /// the session's GET stream on its own. The session runs on the clients' thread;
    /// it can be used (and dropped) from any runtime.
    pub async fn connect(
        &self,
        url: &str,
        token: &str,
    ) -> anyhow::Result<(Session, mpsc::UnboundedReceiver<Arrival>)> {
        let config =
            StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token);
        let (tx, rx) = mpsc::unbounded_channel();
        let session = self
            .handle
            .spawn(async move {
                let transport = StreamableHttpClientTransport::from_config(config);
                Arrivals { tx }.serve(transport).await
            })
            .await??;
        Ok((session, rx))
    }
}

/// Sends `notifications/claude/channel/permission_request` as Claude Code does
/// (docs: Claude Code channels reference, "Relay permission prompts").
pub async fn permission_request(session: &Session, request_id: &str) -> anyhow::Result<()> {
    let params = serde_json::json!({
        "request_id": request_id,
        "tool_name": "Bash",
        "description": "List the files (benchmark)",
        "input_preview": "{\"command\": \"ls\"}",
    });
    session
        .send_notification(ClientNotification::CustomNotification(
            CustomNotification::new(
                "notifications/claude/channel/permission_request",
                Some(params),
            ),
        ))
        .await?;
    Ok(())
}
