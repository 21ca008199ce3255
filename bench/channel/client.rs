//! The MCP client: rmcp's Streamable HTTP client (`transport-streamable-http-client-
//! reqwest`), the same transport Claude Code speaks to `/channel`. Every server
//! notification is timestamped (`Instant::now()`) when rmcp hands it to the handler,
//! that is after the SSE event is read and parsed, as any client would have to.

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

/// Initializes an MCP session at `url` (for instance `http://127.0.0.1:8700/channel`)
/// with `token` as the bearer token; rmcp opens the session's GET stream on its own.
pub async fn connect(
    url: &str,
    token: &str,
) -> anyhow::Result<(Session, mpsc::UnboundedReceiver<Arrival>)> {
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token);
    let transport = StreamableHttpClientTransport::from_config(config);
    let (tx, rx) = mpsc::unbounded_channel();
    let session = Arrivals { tx }.serve(transport).await?;
    Ok((session, rx))
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
