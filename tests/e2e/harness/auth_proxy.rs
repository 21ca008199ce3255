//! A loopback HTTP reverse proxy that adds `Authorization: Bearer TOKEN` to every
//! request and passes everything else through unchanged, for clients that cannot send
//! a header of their own (the official MCP conformance suite's client is a plain
//! `StreamableHTTPClientTransport(new URL(url))`).
//!
//! What passes unchanged: the method, the path and query, every request header
//! (`Host` and `Origin` included, so the server's DNS rebinding checks see what the
//! client sent) but the hop-by-hop ones, the body, the status, every response header
//! but the hop-by-hop ones, and the response body chunk by chunk as the server writes
//! it (an SSE stream stays a stream; when the client goes away, the proxy's upstream
//! connection closes at once too).

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The largest request body forwarded (MCP requests are small JSON).
const MAX_BODY: usize = 8 << 20;

/// Headers of one hop (RFC 9110 section 7.6.1), never forwarded; `content-length` is
/// recomputed by the client side from the body it forwards.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

struct Upstream {
    base: String,
    authorization: HeaderValue,
    client: reqwest::Client,
}

pub struct AuthProxy {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl AuthProxy {
    /// Listens on a free loopback port and forwards every request to `upstream` with
    /// `Authorization: Bearer {token}` (replacing any the client sent).
    pub async fn start(upstream: SocketAddr, token: &str) -> AuthProxy {
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .http1_only()
            .build()
            .expect("the proxy's HTTP client");
        let state = Arc::new(Upstream {
            base: format!("http://{upstream}"),
            authorization: HeaderValue::from_str(&format!("Bearer {token}"))
                .expect("a token is a valid header value"),
            client,
        });
        let app = axum::Router::new().fallback(forward).with_state(state);
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the auth proxy");
        let addr = listener.local_addr().expect("auth proxy address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        AuthProxy { addr, task }
    }

    /// `http://PROXY{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for AuthProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn forwarded(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

async fn forward(State(upstream): State<Arc<Upstream>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".to_owned());
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(body) => body,
        Err(e) => {
            return (
                StatusCode::BAD_GATEWAY,
                format!("auth proxy: request body: {e}"),
            )
                .into_response()
        }
    };
    let mut headers = forwarded(&parts.headers);
    // Host too, as the client sent it: the client side keeps a Host header it is given.
    headers.insert(header::AUTHORIZATION, upstream.authorization.clone());
    let mut request = upstream
        .client
        .request(parts.method, format!("{}{path}", upstream.base))
        .headers(headers);
    if !body.is_empty() {
        request = request.body(body);
    }
    let mut answer = match request.send().await {
        Ok(answer) => answer,
        Err(e) => {
            return (
                StatusCode::BAD_GATEWAY,
                format!("auth proxy: upstream: {e}"),
            )
                .into_response()
        }
    };
    let status = answer.status();
    let headers = forwarded(answer.headers());
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<axum::body::Bytes, std::io::Error>>(16);
    // The body chunk by chunk; the task ends (and drops the upstream connection) when
    // the client stops reading.
    tokio::spawn(async move {
        loop {
            let chunk = tokio::select! {
                chunk = answer.chunk() => chunk,
                () = tx.closed() => break,
            };
            let chunk = match chunk {
                Ok(Some(chunk)) => Ok(chunk),
                Ok(None) => break,
                Err(e) => Err(std::io::Error::other(e)),
            };
            let failed = chunk.is_err();
            if tx.send(chunk).await.is_err() || failed {
                break;
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let mut response = Response::new(Body::from_stream(stream));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}
