//! A fake Anthropic Messages API on loopback, for the real Claude Code binary
//! (`harness/claude.rs`): `POST /v1/messages` answers with the API's SSE stream
//! (`message_start`, `content_block_start`, `content_block_delta`, `content_block_stop`,
//! `message_delta`, `message_stop`), `/v1/messages/count_tokens` with a count, anything
//! else with a harmless 404.
//!
//! Every `/v1/messages` body is recorded: it is what Claude Code put in the model's
//! context, and the scenarios assert on it. The answers come from scripted rules,
//! chosen from the request's last `role:"user"` message (2.1.332 also puts
//! `role:"system"` messages into `messages`). Rules apply only to the main agent's
//! requests (those offering the `Bash` tool); side requests (titles, quota checks) and
//! main requests no rule takes get a short `end_turn` text.
//!
//! The model's tool calls really run on the host: scenarios keep them harmless.

use super::WAIT;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::watch;

/// What the fake model answers.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A text block, `stop_reason: end_turn`.
    Text(String),
    /// One `tool_use` block, `stop_reason: tool_use`.
    Tool { name: String, input: Value },
}

type When = Box<dyn Fn(&Value) -> bool + Send + Sync>;

struct Rule {
    what: String,
    when: When,
    reply: Reply,
    /// Taken once at most.
    once: bool,
    taken: usize,
}

/// One recorded request.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub path: String,
    pub body: Value,
    /// The reply given (`None` for count_tokens and other paths).
    pub reply: Option<Reply>,
    /// The `tool_use` id of a tool reply.
    pub tool_use_id: Option<String>,
}

#[derive(Default)]
struct Inner {
    rules: Vec<Rule>,
    recorded: Vec<Recorded>,
    others: Vec<String>,
    /// Tool calls so far: the n-th is `toolu_e2e000n` (2.1.197 derives the
    /// `request_id` from it, so the ids are predictable per call).
    tool_calls: u64,
}

#[derive(Clone)]
struct Shared {
    inner: Arc<Mutex<Inner>>,
    seen: Arc<watch::Sender<usize>>,
}

/// The running fake API.
pub struct FakeModel {
    addr: SocketAddr,
    shared: Shared,
    task: tokio::task::JoinHandle<()>,
}

/// The last `role:"user"` message of a request body (`Value::Null` if none).
pub fn last_user(body: &Value) -> &Value {
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .unwrap_or(&Value::Null)
}

/// The text of a message: its string content, or its text blocks joined by newlines.
pub fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The `tool_result` blocks of a message.
pub fn tool_results(message: &Value) -> Vec<Value> {
    message["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| b["type"] == "tool_result")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// The text of a `tool_result` block (string content or its text blocks).
pub fn tool_result_text(block: &Value) -> String {
    text_of(block)
}

/// Whether a request is the main agent's (it offers the `Bash` tool).
pub fn is_main(body: &Value) -> bool {
    body["tools"]
        .as_array()
        .is_some_and(|tools| tools.iter().any(|t| t["name"] == "Bash"))
}

impl FakeModel {
    /// Serves on a free loopback port.
    pub async fn start() -> FakeModel {
        let (seen, _) = watch::channel(0usize);
        let shared = Shared {
            inner: Arc::default(),
            seen: Arc::new(seen),
        };
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .route("/v1/messages/count_tokens", post(count_tokens))
            .fallback(other)
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake Messages API");
        let addr = listener.local_addr().expect("local addr");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeModel { addr, shared, task }
    }

    /// `http://127.0.0.1:PORT`, for `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Adds a rule: when the last user message of a main request satisfies `when`,
    /// answer `reply`, once. Rules are tried in the order added; the first that
    /// matches and was not taken yet wins.
    pub fn once(
        &self,
        what: &str,
        when: impl Fn(&Value) -> bool + Send + Sync + 'static,
        reply: Reply,
    ) {
        self.add(what, Box::new(when), reply, true);
    }

    /// [`FakeModel::once`] for the first request whose last user message contains
    /// `marker` (the rule is named by it).
    pub fn once_on(&self, marker: &str, reply: Reply) {
        let needle = marker.to_owned();
        self.once(marker, move |last| text_of(last).contains(&needle), reply);
    }

    fn add(&self, what: &str, when: When, reply: Reply, once: bool) {
        self.shared.inner.lock().unwrap().rules.push(Rule {
            what: what.to_owned(),
            when,
            reply,
            once,
            taken: 0,
        });
    }

    /// Every `/v1/messages` request so far, in arrival order.
    pub fn recorded(&self) -> Vec<Recorded> {
        self.shared.inner.lock().unwrap().recorded.clone()
    }

    /// Waits (at most [`WAIT`]) for a recorded request that `pred` accepts; returns it.
    pub async fn wait_request(&self, what: &str, pred: impl Fn(&Recorded) -> bool) -> Recorded {
        let mut seen = self.shared.seen.subscribe();
        let start = Instant::now();
        loop {
            if let Some(found) = self.recorded().into_iter().find(|r| pred(r)) {
                return found;
            }
            let left = WAIT.saturating_sub(start.elapsed());
            if left.is_zero() || tokio::time::timeout(left, seen.changed()).await.is_err() {
                panic!(
                    "the fake model got no request {what} within {WAIT:?}; {}",
                    self.summary()
                );
            }
        }
    }

    /// A short account of what was asked and answered (for failure messages).
    pub fn summary(&self) -> String {
        let inner = self.shared.inner.lock().unwrap();
        let mut out = format!(
            "{} requests to /v1/messages; other paths: {:?}\n",
            inner.recorded.len(),
            inner.others
        );
        for rule in &inner.rules {
            out.push_str(&format!(
                "rule {:?} (once: {}) taken {} times\n",
                rule.what, rule.once, rule.taken
            ));
        }
        for (i, r) in inner.recorded.iter().enumerate() {
            let last = last_user(&r.body);
            let mut text = text_of(last);
            for result in tool_results(last) {
                text.push_str(&format!(" [tool_result {result}]"));
            }
            let text: String = text.chars().take(600).collect();
            out.push_str(&format!(
                "#{i} {} main={} reply={:?}\n  last user: {text}\n",
                r.path,
                is_main(&r.body),
                r.reply
            ));
        }
        out
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.task.abort();
        if std::thread::panicking() {
            eprintln!("---- the fake Messages API ----\n{}----", self.summary());
        }
    }
}

fn choose(inner: &mut Inner, body: &Value) -> Reply {
    if is_main(body) {
        let last = last_user(body);
        if let Some(rule) = inner
            .rules
            .iter_mut()
            .find(|r| !(r.once && r.taken > 0) && (r.when)(last))
        {
            rule.taken += 1;
            return rule.reply.clone();
        }
    }
    Reply::Text("ok".to_owned())
}

async fn messages(State(shared): State<Shared>, uri: Uri, bytes: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let (reply, tool_use_id) = {
        let mut inner = shared.inner.lock().unwrap();
        let reply = choose(&mut inner, &body);
        let tool_use_id = match reply {
            Reply::Tool { .. } => {
                inner.tool_calls += 1;
                Some(format!("toolu_e2e{:04}", inner.tool_calls))
            }
            Reply::Text(_) => None,
        };
        inner.recorded.push(Recorded {
            path: uri.to_string(),
            body: body.clone(),
            reply: Some(reply.clone()),
            tool_use_id: tool_use_id.clone(),
        });
        (reply, tool_use_id)
    };
    shared.seen.send_modify(|n| *n += 1);
    let model = body["model"]
        .as_str()
        .unwrap_or("claude-sonnet-4-5")
        .to_owned();
    let (block, delta, stop_reason) = match &reply {
        Reply::Text(text) => (
            json!({ "type": "text", "text": "" }),
            json!({ "type": "text_delta", "text": text }),
            "end_turn",
        ),
        Reply::Tool { name, input } => (
            json!({ "type": "tool_use", "id": tool_use_id, "name": name, "input": {} }),
            json!({ "type": "input_json_delta", "partial_json": input.to_string() }),
            "tool_use",
        ),
    };
    if body["stream"] != true {
        let content = match &reply {
            Reply::Text(text) => json!([{ "type": "text", "text": text }]),
            Reply::Tool { name, input } => {
                json!([{ "type": "tool_use", "id": tool_use_id, "name": name, "input": input }])
            }
        };
        let message = json!({
            "id": "msg_e2e", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop_reason, "stop_sequence": null,
            "usage": { "input_tokens": 10, "output_tokens": 5 },
        });
        return (
            [(header::CONTENT_TYPE, "application/json")],
            message.to_string(),
        )
            .into_response();
    }
    let events = [
        (
            "message_start",
            json!({ "type": "message_start", "message": {
                "id": "msg_e2e", "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": { "input_tokens": 10, "output_tokens": 1 },
            }}),
        ),
        (
            "content_block_start",
            json!({ "type": "content_block_start", "index": 0, "content_block": block }),
        ),
        (
            "content_block_delta",
            json!({ "type": "content_block_delta", "index": 0, "delta": delta }),
        ),
        (
            "content_block_stop",
            json!({ "type": "content_block_stop", "index": 0 }),
        ),
        (
            "message_delta",
            json!({ "type": "message_delta",
                "delta": { "stop_reason": stop_reason, "stop_sequence": null },
                "usage": { "output_tokens": 5 } }),
        ),
        ("message_stop", json!({ "type": "message_stop" })),
    ];
    let mut sse = String::new();
    for (event, data) in events {
        sse.push_str(&format!("event: {event}\ndata: {data}\n\n"));
    }
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        sse,
    )
        .into_response()
}

async fn count_tokens() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        json!({ "input_tokens": 10 }).to_string(),
    )
        .into_response()
}

async fn other(State(shared): State<Shared>, uri: Uri) -> Response {
    shared.inner.lock().unwrap().others.push(uri.to_string());
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "application/json")],
        json!({ "type": "error", "error": { "type": "not_found_error", "message": "not here" } })
            .to_string(),
    )
        .into_response()
}
