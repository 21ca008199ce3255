//! What a POST body to `/mcp` or `/channel` is, before the MCP library reads it: one
//! JSON-RPC message, a batch, or something to refuse with a JSON-RPC error; and the one
//! classifier of JSON-RPC messages both transports use ([`kind`], [`method`],
//! [`members`], [`request_ids`], [`answered_ids`], [`answers`], [`is_jsonrpc`]).
//!
//! Sources:
//! - JSON-RPC 2.0, sections 4 (request object), 5 (response object), 5.1 (error
//!   codes: -32700 parse error, -32600 invalid request, -32602 invalid params) and 6
//!   (batch: an array of messages; an empty array is one invalid request).
//! - MCP 2025-03-26, Transports, "Sending Messages to the Server": a POST body is one
//!   message or a batch; batches were added in 2025-03-26 and removed in 2025-06-18
//!   (its changelog), so a server accepts them on sessions that negotiated
//!   2025-03-26 and refuses them on later ones. The `initialize` request MUST NOT be
//!   part of a batch (2025-03-26, Lifecycle).
//! - MCP Streamable HTTP: a body the server cannot accept gets an HTTP error status
//!   (400), whose body may be a JSON-RPC error response without an id.
//! - MCP 2025-11-25, Basic: a request's id is a string or an integer, never null; an
//!   error response's id is optional (schema, `JSONRPCErrorResponse`), where JSON-RPC
//!   2.0 section 5 writes `null` for an id that could not be read.

use serde_json::{json, Value};

/// JSON-RPC 2.0 section 5.1: the body is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC 2.0 section 5.1: the JSON is not a valid request or message.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC 2.0 section 5.1: the method is known but its params do not fit it.
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC 2.0 section 5.1: internal error; here, a request of a batch that got no
/// answer of its own ([`Handling`]).
pub const INTERNAL_ERROR: i64 = -32603;

/// The most bytes the answers of one batch may hold together, as serialized JSON. A
/// batch's answer is one JSON array, built whole in memory before it is sent (a single
/// message's answer streams instead); an answer that would take the total over this
/// bound is replaced by an error naming the sizes. Twice the server's bound on a request
/// body (4 MiB); ours, like [`MAX_BATCH`].
pub const MAX_BATCH_ANSWER_BYTES: usize = 8 * 1024 * 1024;

/// The most messages one batch may hold: the server hands them to the MCP library one
/// by one, so a body of 4 MiB of tiny notifications would otherwise be tens of
/// thousands of requests. JSON-RPC sets no bound; this one is ours.
pub const MAX_BATCH: usize = 100;

/// The only MCP revision whose streamable HTTP transport takes batches.
pub const BATCH_REVISION: &str = "2025-03-26";

/// A body refused before it reaches the MCP library: answered with HTTP 400 and
/// [`Rejection::response`].
#[derive(Clone, Debug, PartialEq)]
pub struct Rejection {
    /// One of [`PARSE_ERROR`], [`INVALID_REQUEST`], [`INVALID_PARAMS`].
    pub code: i64,
    /// What was wrong, for the client's developer.
    pub message: String,
    /// The request's `id` when it could be read (a string or number), else `null`.
    pub id: Value,
}

impl Rejection {
    fn new(code: i64, message: impl Into<String>, id: Value) -> Rejection {
        Rejection {
            code,
            message: message.into(),
            id,
        }
    }

    /// The JSON-RPC error response: `{"jsonrpc": "2.0", "id", "error": {"code",
    /// "message"}}`.
    pub fn response(&self) -> Value {
        json!({
            "jsonrpc": "2.0",
            "id": self.id,
            "error": {"code": self.code, "message": self.message},
        })
    }

    /// Params that do not fit their method (the MCP library could not read a message
    /// that [`inspect`] let through): -32602 for a request, with its id; -32600 with
    /// `id: null` for anything else (notifications and responses get no answer of
    /// their own, so the HTTP error carries it).
    pub fn unreadable(message: &Value, detail: &str) -> Rejection {
        match kind(message) {
            Some(Kind::Request) => Rejection::new(
                INVALID_PARAMS,
                format!("invalid params: {detail}"),
                message["id"].clone(),
            ),
            _ => Rejection::new(
                INVALID_REQUEST,
                format!("invalid message: {detail}"),
                Value::Null,
            ),
        }
    }
}

/// The JSON-RPC shape of one message that passed [`inspect`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Has a `method` and an `id`: it expects a response.
    Request,
    /// Has a `method` and no `id`.
    Notification,
    /// Has an `id` and exactly one of `result` and `error`: the client answering a
    /// request of the server's.
    Response,
}

/// The kind of one message, or `None` when it is not a JSON-RPC 2.0 message.
pub fn kind(message: &Value) -> Option<Kind> {
    check(message).ok()
}

/// The messages of a body: the items of a batch, in order, or the one message.
pub fn members(body: &Value) -> &[Value] {
    match body {
        Value::Array(items) => items,
        one => std::slice::from_ref(one),
    }
}

/// A message's `method`, when it has one that is a string.
pub fn method(message: &Value) -> Option<&str> {
    message.get("method").and_then(Value::as_str)
}

/// The ids of the requests in a body (one message or a batch), in order: each
/// expects a response.
pub fn request_ids(body: &Value) -> Vec<Value> {
    members(body)
        .iter()
        .filter(|m| kind(m) == Some(Kind::Request))
        .map(|m| m["id"].clone())
        .collect()
}

/// The request ids that a body (one message or a batch) answers: the ids of its
/// responses, not of its requests or notifications; an error response without an
/// id (or with `id: null`) answers none.
pub fn answered_ids(body: &Value) -> Vec<Value> {
    members(body)
        .iter()
        .filter(|m| kind(m) == Some(Kind::Response))
        .filter_map(|m| m.get("id"))
        .filter(|id| !id.is_null())
        .cloned()
        .collect()
}

/// Whether `message` is the response to the request whose id is `id`.
pub fn answers(message: &Value, id: &Value) -> bool {
    kind(message) == Some(Kind::Response) && message.get("id") == Some(id)
}

/// Whether a body is JSON-RPC: one message, or a batch of at least one, each a
/// JSON-RPC 2.0 message ([`kind`]).
pub fn is_jsonrpc(body: &Value) -> bool {
    let all = members(body);
    !all.is_empty() && all.iter().all(|m| kind(m).is_some())
}

/// What a POST body is.
#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    /// One message, for the MCP library as it is.
    Message(Value),
    /// A batch of at least one message, each valid on its own, in order.
    Batch(Vec<Value>),
}

impl Body {
    /// The body as JSON: the message, or the batch as an array.
    pub fn into_value(self) -> Value {
        match self {
            Body::Message(message) => message,
            Body::Batch(items) => Value::Array(items),
        }
    }
}

/// Reads a POST body: one JSON-RPC message, or a batch of them.
///
/// # Errors
/// - [`PARSE_ERROR`] when the bytes are not JSON (an empty body included);
/// - [`INVALID_REQUEST`] when the JSON is not a JSON-RPC 2.0 message (wrong or missing
///   `jsonrpc`, a `method` that is not a string, an `id` that is neither a string nor
///   a number, params that are neither an object nor an array, a response with both
///   or neither of `result` and `error`), when a batch is empty, or when any message
///   in a batch is invalid (the whole batch is refused, naming the first bad one's
///   position, so that nothing in it is half done), or when it holds more than
///   [`MAX_BATCH`] messages. The rejection keeps the message's
///   `id` when it is a string or a number.
pub fn inspect(body: &[u8]) -> Result<Body, Rejection> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| Rejection::new(PARSE_ERROR, format!("parse error: {e}"), Value::Null))?;
    match value {
        Value::Array(items) if items.is_empty() => Err(Rejection::new(
            INVALID_REQUEST,
            "invalid request: an empty batch",
            Value::Null,
        )),
        Value::Array(items) if items.len() > MAX_BATCH => Err(Rejection::new(
            INVALID_REQUEST,
            format!(
                "invalid request: a batch of {} messages; at most {MAX_BATCH}",
                items.len()
            ),
            Value::Null,
        )),
        Value::Array(items) => {
            for (position, item) in items.iter().enumerate() {
                if let Err(reason) = check(item) {
                    return Err(Rejection::new(
                        INVALID_REQUEST,
                        format!("invalid request: batch item {position}: {reason}"),
                        Value::Null,
                    ));
                }
                if method(item) == Some("initialize") {
                    return Err(Rejection::new(
                        INVALID_REQUEST,
                        "invalid request: initialize must not be part of a batch",
                        Value::Null,
                    ));
                }
            }
            Ok(Body::Batch(items))
        }
        value => match check(&value) {
            Ok(_) => Ok(Body::Message(value)),
            Err(reason) => Err(Rejection::new(
                INVALID_REQUEST,
                format!("invalid request: {reason}"),
                readable_id(&value),
            )),
        },
    }
}

/// Whether a session that negotiated `revision` (an MCP protocol version,
/// `YYYY-MM-DD`) may send batches: only 2025-03-26 (see the module's sources).
pub fn batches_allowed(revision: &str) -> bool {
    revision == BATCH_REVISION
}

/// The refusal of a batch on a session that negotiated `revision`, or on no session
/// (`None`: a batch cannot carry `initialize`, so it cannot open one).
pub fn batch_refused(revision: Option<&str>) -> Rejection {
    let why = match revision {
        Some(revision) => format!("this session negotiated MCP {revision}"),
        None => "a batch needs a session that negotiated it".to_string(),
    };
    Rejection::new(
        INVALID_REQUEST,
        format!(
            "invalid request: JSON-RPC batches are part of MCP {BATCH_REVISION} only, and \
             {why}: send one message per POST"
        ),
        Value::Null,
    )
}

/// What the MCP library made of one message of a batch, as the server saw it.
#[derive(Clone, Debug, PartialEq)]
pub enum Handling {
    /// Taken with nothing to answer (HTTP 202).
    Accepted,
    /// Answered with this JSON-RPC message (from a JSON body or an event stream).
    Answered(Value),
    /// Answered with more than `limit` bytes: what was left of
    /// [`MAX_BATCH_ANSWER_BYTES`] when it was read.
    TooLarge {
        /// The bytes the answer could still have taken, which it exceeds.
        limit: usize,
    },
    /// Refused or broken: the HTTP status and a part of the body, or what broke.
    Failed(String),
    /// Handed over, and not answered before the batch's deadline (`deadline_ms`
    /// after its first message was handed over): it may still take effect.
    Late {
        /// The batch's deadline, in milliseconds.
        deadline_ms: u64,
    },
    /// Never handed over: the batch's deadline had passed before its turn.
    NotStarted {
        /// The batch's deadline, in milliseconds.
        deadline_ms: u64,
    },
}

/// The answer to one batch, built message by message in order (MCP 2025-03-26,
/// Transports; JSON-RPC 2.0 section 6): one response for each request, in the
/// requests' order; nothing for a notification or a response, whatever became of it
/// (JSON-RPC 2.0 section 4.1: a notification is never answered, in a batch or not).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchAnswer {
    responses: Vec<Value>,
    bytes: usize,
}

impl BatchAnswer {
    /// An answer with no response yet.
    pub fn new() -> BatchAnswer {
        BatchAnswer::default()
    }

    /// How many more bytes of serialized answers the batch can take, out of
    /// [`MAX_BATCH_ANSWER_BYTES`]: the most the server should read of the next
    /// message's answer (one more byte tells it that the answer is too large).
    pub fn remaining_bytes(&self) -> usize {
        MAX_BATCH_ANSWER_BYTES.saturating_sub(self.bytes)
    }

    /// Adds what became of `item`, a message that passed [`inspect`]. A request gets
    /// its response when the library answered it with one (a message with the
    /// request's `id` and a `result` or an `error`) that fits in
    /// [`BatchAnswer::remaining_bytes`]; otherwise an [`INTERNAL_ERROR`] with its
    /// `id` whose message says what happened. A notification or a response adds
    /// nothing; the caller logs what was refused.
    pub fn add(&mut self, item: &Value, outcome: Handling) {
        if kind(item) != Some(Kind::Request) {
            return;
        }
        let id = item["id"].clone();
        let method = method(item).unwrap_or_default();
        let error = |message: String| {
            json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": {"code": INTERNAL_ERROR, "message": message},
            })
        };
        let limit = self.remaining_bytes();
        let too_large = |limit: usize| {
            error(format!(
                "{method}: its answer is over {limit} bytes, what was left of the \
                 {MAX_BATCH_ANSWER_BYTES} bytes a batch's answers may hold together: \
                 send it alone, one message per POST"
            ))
        };
        let response = match outcome {
            Handling::Answered(message) if answers(&message, &id) => {
                let size = serde_json::to_vec(&message).map_or(usize::MAX, |b| b.len());
                if size > limit {
                    too_large(limit)
                } else {
                    message
                }
            }
            Handling::Answered(message) => error(format!(
                "{method}: answered with a message that is not its response: {}",
                excerpt(&message.to_string())
            )),
            Handling::Accepted => error(format!(
                "{method}: the server took the request without answering it"
            )),
            Handling::TooLarge { limit } => too_large(limit),
            Handling::Failed(detail) => error(format!("{method}: {}", excerpt(&detail))),
            Handling::Late { deadline_ms } => error(format!(
                "{method}: not answered within the batch's deadline of {deadline_ms} ms \
                 (batch_deadline_ms); it may still take effect: send long requests alone, \
                 one message per POST"
            )),
            Handling::NotStarted { deadline_ms } => error(format!(
                "{method}: not started, nothing was done: the batch's deadline of \
                 {deadline_ms} ms (batch_deadline_ms) passed before its turn"
            )),
        };
        self.bytes += serde_json::to_vec(&response).map_or(0, |b| b.len());
        self.responses.push(response);
    }

    /// The body to answer the batch with: the responses as one JSON array, or `None`
    /// when the batch held no request (answered with HTTP 202 and no body).
    pub fn finish(self) -> Option<Value> {
        (!self.responses.is_empty()).then_some(Value::Array(self.responses))
    }
}

/// Why a notification of a batch was not taken, for the session that sent it (a
/// `permission_request`, which the session waits on: it is told this instead of a
/// verdict, as for one whose params cannot be read); `None` when it was taken, or may
/// still be ([`Handling::Late`]: handed over, and the library may act on it after the
/// deadline, so "not relayed" could be untrue).
pub fn notification_not_taken(outcome: &Handling) -> Option<String> {
    let why = match outcome {
        Handling::Accepted | Handling::Late { .. } => return None,
        Handling::NotStarted { deadline_ms } => format!(
            "the batch's deadline of {deadline_ms} ms (batch_deadline_ms) passed before its turn"
        ),
        Handling::Answered(message) => format!(
            "the server answered it with {}",
            excerpt(&message.to_string())
        ),
        Handling::TooLarge { limit } => format!("the server answered it with over {limit} bytes"),
        Handling::Failed(detail) => format!("the server refused it: {}", excerpt(detail)),
    };
    Some(format!(
        "it came inside a JSON-RPC batch and was not taken ({why}); a permission_request \
         inside a batch that is not taken is not relayed: send it on its own, one message \
         per POST"
    ))
}

/// At most 200 characters of `text`, for an error message.
fn excerpt(text: &str) -> String {
    text.chars().take(200).collect()
}

fn readable_id(value: &Value) -> Value {
    match value.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
        _ => Value::Null,
    }
}

fn check(value: &Value) -> Result<Kind, &'static str> {
    let Value::Object(object) = value else {
        return Err("a message is a JSON object");
    };
    if object.get("jsonrpc") != Some(&Value::String("2.0".into())) {
        return Err("\"jsonrpc\" must be \"2.0\"");
    }
    let id = object.get("id");
    let readable = matches!(id, Some(Value::String(_) | Value::Number(_)));
    // `null` is an id only for an error response (see the module's sources).
    if !readable && !matches!(id, None | Some(Value::Null)) {
        return Err(ID_TYPE);
    }
    if let Some(method) = object.get("method") {
        if id.is_some() && !readable {
            return Err(ID_TYPE);
        }
        if !method.is_string() {
            return Err("\"method\" must be a string");
        }
        if !matches!(
            object.get("params"),
            None | Some(Value::Object(_) | Value::Array(_))
        ) {
            return Err("\"params\" must be an object or an array");
        }
        return Ok(if readable {
            Kind::Request
        } else {
            Kind::Notification
        });
    }
    match (object.contains_key("result"), object.get("error")) {
        (true, None) if readable => Ok(Kind::Response),
        (false, Some(Value::Object(error)))
            if error.get("code").is_some_and(Value::is_i64)
                && error.get("message").is_some_and(Value::is_string) =>
        {
            Ok(Kind::Response)
        }
        (false, Some(_)) => Err("\"error\" must be an object with a code and a message"),
        _ if id.is_none() => Err("a message has a \"method\", or is a response with an \"id\""),
        _ if !readable => Err(ID_TYPE),
        _ => Err("a response has exactly one of \"result\" and \"error\""),
    }
}

/// Why a message's id is refused.
const ID_TYPE: &str = "\"id\" must be a string or a number";

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(body: &str) -> Rejection {
        inspect(body.as_bytes()).expect_err(body)
    }

    #[test]
    fn a_batched_notification_not_taken_is_told_why_and_one_taken_or_late_is_not() {
        assert_eq!(notification_not_taken(&Handling::Accepted), None);
        assert_eq!(
            notification_not_taken(&Handling::Late { deadline_ms: 50 }),
            None
        );
        let told = |outcome: Handling, why: &str| {
            let message = notification_not_taken(&outcome).expect("told");
            assert!(
                message.starts_with("it came inside a JSON-RPC batch and was not taken (")
                    && message.contains(why)
                    && message.ends_with("send it on its own, one message per POST"),
                "{message}"
            );
        };
        told(
            Handling::NotStarted { deadline_ms: 50 },
            "(the batch's deadline of 50 ms (batch_deadline_ms) passed before its turn)",
        );
        told(
            Handling::Answered(json!({"jsonrpc": "2.0", "id": null, "error": {"code": -1}})),
            "(the server answered it with {\"",
        );
        assert!(
            notification_not_taken(&Handling::Answered(json!({"error": {"code": -1}})))
                .unwrap()
                .contains("{\"code\":-1}")
        );
        told(
            Handling::TooLarge { limit: 9 },
            "(the server answered it with over 9 bytes)",
        );
        told(
            Handling::Failed("HTTP 500 Internal Server Error: boom".into()),
            "(the server refused it: HTTP 500 Internal Server Error: boom)",
        );
        let long = "x".repeat(500);
        let message = notification_not_taken(&Handling::Failed(long.clone())).unwrap();
        assert!(!message.contains(&long), "the detail is cut to an excerpt");
    }

    #[test]
    fn the_error_codes_are_json_rpcs() {
        assert_eq!(
            (PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS),
            (-32700, -32600, -32602)
        );
    }

    #[test]
    fn what_is_not_json_is_a_parse_error_with_a_null_id() {
        for body in ["", "{", "{\"jsonrpc\":\"2.0\",", "not json", "\u{feff}{}"] {
            let rejection = refused(body);
            assert_eq!(rejection.code, PARSE_ERROR, "{body:?}");
            assert_eq!(rejection.id, Value::Null, "{body:?}");
            assert!(rejection.message.starts_with("parse error: "), "{body:?}");
        }
    }

    #[test]
    fn json_that_is_not_json_rpc_is_an_invalid_request_keeping_a_readable_id() {
        let cases = [
            (r#"5"#, Value::Null, "a message is a JSON object"),
            (r#""x""#, Value::Null, "a message is a JSON object"),
            (
                r#"{"id":1,"method":"ping"}"#,
                json!(1),
                "\"jsonrpc\" must be",
            ),
            (
                r#"{"jsonrpc":"1.0","id":"a","method":"ping"}"#,
                json!("a"),
                "\"jsonrpc\" must be",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":5}"#,
                json!(1),
                "\"method\" must be a string",
            ),
            (
                r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#,
                Value::Null,
                "\"id\" must be",
            ),
            (
                r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                Value::Null,
                "\"id\" must be",
            ),
            (
                r#"{"jsonrpc":"2.0","id":2,"method":"ping","params":"x"}"#,
                json!(2),
                "\"params\" must be",
            ),
            (r#"{"jsonrpc":"2.0"}"#, Value::Null, "a message has"),
            (
                r#"{"jsonrpc":"2.0","id":3}"#,
                json!(3),
                "a response has exactly one",
            ),
            (
                r#"{"jsonrpc":"2.0","id":3,"result":{},"error":{"code":1,"message":"m"}}"#,
                json!(3),
                "a response has exactly one",
            ),
            (
                r#"{"jsonrpc":"2.0","id":3,"error":{"code":"x","message":"m"}}"#,
                json!(3),
                "\"error\" must be",
            ),
            (
                r#"{"jsonrpc":"2.0","id":3,"error":{"code":1}}"#,
                json!(3),
                "\"error\" must be",
            ),
        ];
        for (body, id, reason) in cases {
            let rejection = refused(body);
            assert_eq!(rejection.code, INVALID_REQUEST, "{body}");
            assert_eq!(rejection.id, id, "{body}");
            assert!(
                rejection.message.starts_with("invalid request: ")
                    && rejection.message.contains(reason),
                "{body}: {}",
                rejection.message
            );
        }
    }

    #[test]
    fn each_kind_of_message_passes_as_it_is() {
        let cases = [
            (r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#, Kind::Request),
            (
                r#"{"jsonrpc":"2.0","id":"x","method":"tools/list","params":{}}"#,
                Kind::Request,
            ),
            (
                r#"{"jsonrpc":"2.0","id":-1,"method":"m","params":[1]}"#,
                Kind::Request,
            ),
            (
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                Kind::Notification,
            ),
            (r#"{"jsonrpc":"2.0","id":4,"result":{}}"#, Kind::Response),
            (r#"{"jsonrpc":"2.0","id":4,"result":null}"#, Kind::Response),
            (
                r#"{"jsonrpc":"2.0","id":4,"error":{"code":-1,"message":"no"}}"#,
                Kind::Response,
            ),
        ];
        for (body, expected) in cases {
            let value: Value = serde_json::from_str(body).unwrap();
            assert_eq!(inspect(body.as_bytes()), Ok(Body::Message(value.clone())));
            assert_eq!(kind(&value), Some(expected), "{body}");
        }
        assert_eq!(kind(&json!([])), None);
    }

    #[test]
    fn a_batch_is_refused_whole_when_it_is_empty_or_any_item_is_bad_or_initialize() {
        let good = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        let empty = refused("[]");
        assert_eq!(
            (empty.code, empty.id.clone()),
            (INVALID_REQUEST, Value::Null)
        );
        assert!(empty.message.contains("empty batch"), "{}", empty.message);
        let bad = refused(&format!("[{good}, {{\"jsonrpc\":\"2.0\",\"id\":7}}]"));
        assert_eq!((bad.code, bad.id.clone()), (INVALID_REQUEST, Value::Null));
        assert!(bad.message.contains("batch item 1: "), "{}", bad.message);
        let init = refused(&format!(
            "[{good}, {{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\",\"params\":{{}}}}]"
        ));
        assert!(init.message.contains("initialize"), "{}", init.message);
        let at_most = format!("[{}]", vec![good; MAX_BATCH].join(","));
        assert!(matches!(inspect(at_most.as_bytes()), Ok(Body::Batch(b)) if b.len() == MAX_BATCH));
        let over = format!("[{}]", vec![good; MAX_BATCH + 1].join(","));
        let over = refused(&over);
        assert_eq!((over.code, over.id.clone()), (INVALID_REQUEST, Value::Null));
        assert!(
            over.message
                .contains("a batch of 101 messages; at most 100"),
            "{}",
            over.message
        );
        let batch = format!("[{good}, {{\"jsonrpc\":\"2.0\",\"method\":\"n\"}}]");
        assert_eq!(
            inspect(batch.as_bytes()),
            Ok(Body::Batch(vec![
                serde_json::from_str(good).unwrap(),
                json!({"jsonrpc": "2.0", "method": "n"}),
            ]))
        );
    }

    #[test]
    fn only_a_2025_03_26_session_takes_batches() {
        assert!(batches_allowed("2025-03-26"));
        for revision in ["2024-11-05", "2025-06-18", "2025-11-25", "2026-07-28", ""] {
            assert!(!batches_allowed(revision), "{revision}");
        }
        let later = batch_refused(Some("2025-11-25"));
        assert_eq!((later.code, later.id), (INVALID_REQUEST, Value::Null));
        assert!(later.message.contains("negotiated MCP 2025-11-25"));
        assert!(batch_refused(None).message.contains("needs a session"));
    }

    #[test]
    fn a_message_the_library_cannot_read_is_invalid_params_for_a_request_only() {
        let request = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": []});
        let rejection = Rejection::unreadable(&request, "expected a map");
        assert_eq!(
            rejection.response(),
            json!({"jsonrpc": "2.0", "id": 9,
                   "error": {"code": INVALID_PARAMS, "message": "invalid params: expected a map"}})
        );
        let notification = json!({"jsonrpc": "2.0", "method": "notifications/x", "params": []});
        let rejection = Rejection::unreadable(&notification, "d");
        assert_eq!(
            (rejection.code, rejection.id),
            (INVALID_REQUEST, Value::Null)
        );
    }

    fn request(id: Value, method: &str) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": method})
    }

    fn error_of(response: &Value) -> (i64, &str) {
        (
            response["error"]["code"].as_i64().expect("a code"),
            response["error"]["message"].as_str().expect("a message"),
        )
    }

    #[test]
    fn a_batch_answers_each_request_in_order_and_no_notification_or_response() {
        let mut answer = BatchAnswer::new();
        let ping = json!({"jsonrpc": "2.0", "id": "p", "result": {}});
        answer.add(
            &request(json!("p"), "ping"),
            Handling::Answered(ping.clone()),
        );
        let notification = json!({"jsonrpc": "2.0", "method": "notifications/x"});
        let response = json!({"jsonrpc": "2.0", "id": 3, "result": {}});
        // Whatever became of them, a notification and a response are never answered.
        for outcome in [
            Handling::Accepted,
            Handling::Failed("HTTP 400: no".into()),
            Handling::Answered(ping.clone()),
            Handling::TooLarge { limit: 1 },
            Handling::Late { deadline_ms: 1 },
            Handling::NotStarted { deadline_ms: 1 },
        ] {
            answer.add(&notification, outcome.clone());
            answer.add(&response, outcome);
        }
        let listed = json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -1, "message": "m"}});
        answer.add(
            &request(json!(2), "tools/list"),
            Handling::Answered(listed.clone()),
        );
        assert_eq!(answer.finish(), Some(json!([ping, listed])));

        let mut quiet = BatchAnswer::new();
        quiet.add(&notification, Handling::Failed("HTTP 404: gone".into()));
        assert_eq!(
            quiet.finish(),
            None,
            "only notifications: nothing to answer"
        );
    }

    #[test]
    fn a_request_without_its_own_response_gets_an_internal_error_saying_why() {
        let cases = [
            (
                Handling::Accepted,
                "tools/call: the server took the request without answering",
            ),
            (
                Handling::Failed("HTTP 500: boom".into()),
                "tools/call: HTTP 500: boom",
            ),
            (
                Handling::Answered(json!({"jsonrpc": "2.0", "id": 8, "result": {}})),
                "tools/call: answered with a message that is not its response: ",
            ),
            (
                Handling::Answered(json!({"jsonrpc": "2.0", "id": 7, "method": "x"})),
                "answered with a message that is not its response",
            ),
            (
                Handling::Late { deadline_ms: 250 },
                "not answered within the batch's deadline of 250 ms (batch_deadline_ms); it \
                 may still take effect",
            ),
            (
                Handling::NotStarted { deadline_ms: 250 },
                "tools/call: not started, nothing was done: the batch's deadline of 250 ms",
            ),
            (
                Handling::TooLarge { limit: 12 },
                "tools/call: its answer is over 12 bytes, what was left of the 8388608 bytes",
            ),
        ];
        for (outcome, says) in cases {
            let mut answer = BatchAnswer::new();
            answer.add(&request(json!(7), "tools/call"), outcome.clone());
            let responses = answer.finish().expect("a request is answered");
            assert_eq!(responses.as_array().map(Vec::len), Some(1), "{outcome:?}");
            let response = &responses[0];
            assert_eq!(
                (&response["jsonrpc"], &response["id"]),
                (&json!("2.0"), &json!(7))
            );
            let (code, message) = error_of(response);
            assert_eq!(code, INTERNAL_ERROR, "{outcome:?}");
            assert!(message.contains(says), "{outcome:?}: {message}");
        }
        assert_eq!(INTERNAL_ERROR, -32603);
        let mut long = BatchAnswer::new();
        long.add(&request(json!(1), "m"), Handling::Failed("x".repeat(500)));
        let long = long.finish().unwrap();
        assert_eq!(error_of(&long[0]).1, format!("m: {}", "x".repeat(200)));
    }

    #[test]
    fn answers_over_the_batchs_byte_bound_together_are_replaced_by_an_error_naming_it() {
        let mut answer = BatchAnswer::new();
        assert_eq!(answer.remaining_bytes(), MAX_BATCH_ANSWER_BYTES);
        assert_eq!(MAX_BATCH_ANSWER_BYTES, 8 * 1024 * 1024);
        let big = |id: i64, text_len: usize| json!({"jsonrpc": "2.0", "id": id, "result": {"text": "a".repeat(text_len)}});
        let first = big(1, MAX_BATCH_ANSWER_BYTES / 2);
        let first_len = serde_json::to_vec(&first).unwrap().len();
        answer.add(
            &request(json!(1), "tools/call"),
            Handling::Answered(first.clone()),
        );
        assert_eq!(answer.remaining_bytes(), MAX_BATCH_ANSWER_BYTES - first_len);
        // Exactly what is left fits; one byte more does not.
        let left = answer.remaining_bytes();
        let overhead = serde_json::to_vec(&big(2, 0)).unwrap().len();
        let exact = big(2, left - overhead);
        let over = big(3, left - overhead + 1);
        let mut fits = answer.clone();
        fits.add(
            &request(json!(2), "tools/call"),
            Handling::Answered(exact.clone()),
        );
        assert_eq!(fits.remaining_bytes(), 0);
        assert_eq!(fits.finish(), Some(json!([first.clone(), exact])));
        answer.add(&request(json!(3), "tools/call"), Handling::Answered(over));
        let after_error = answer.remaining_bytes();
        let responses = answer.finish().unwrap();
        assert_eq!(responses[0], first);
        let (code, message) = error_of(&responses[1]);
        assert_eq!((code, &responses[1]["id"]), (INTERNAL_ERROR, &json!(3)));
        assert!(
            message.contains(&format!("its answer is over {left} bytes")),
            "{message}"
        );
        let error_len = serde_json::to_vec(&responses[1]).unwrap().len();
        assert_eq!(
            after_error,
            left - error_len,
            "the error counts, the refused answer not"
        );
    }

    #[test]
    fn an_error_response_whose_id_could_not_be_read_is_a_response_and_answers_no_request() {
        // JSON-RPC 2.0 section 5 writes `id: null`; MCP 2025-11-25 leaves it out (rmcp
        // does). Both are what this server itself answers a body it refuses.
        let null = refused("{").response();
        assert_eq!(null["id"], Value::Null);
        let absent = json!({"jsonrpc": "2.0", "error": {"code": -32022, "message": "m"}});
        for message in [&null, &absent] {
            assert_eq!(kind(message), Some(Kind::Response), "{message}");
            assert_eq!(
                inspect(message.to_string().as_bytes()),
                Ok(Body::Message(message.clone()))
            );
            assert!(is_jsonrpc(message), "{message}");
            assert_eq!(answered_ids(message), Vec::<Value>::new(), "{message}");
        }
        // A result always names its request, and a request's id is never null.
        for body in [
            r#"{"jsonrpc":"2.0","id":null,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"ping","error":{"code":1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":null}"#,
        ] {
            let rejection = refused(body);
            assert!(
                rejection
                    .message
                    .contains("\"id\" must be a string or a number"),
                "{body}: {}",
                rejection.message
            );
        }
        let rejection = refused(r#"{"jsonrpc":"2.0","result":{}}"#);
        assert!(
            rejection.message.contains("a message has"),
            "{}",
            rejection.message
        );
        let rejection = refused(r#"{"jsonrpc":"2.0","id":null,"error":{"code":1}}"#);
        assert!(
            rejection.message.contains("\"error\" must be"),
            "{}",
            rejection.message
        );
    }

    #[test]
    fn a_body_has_its_one_message_or_its_batchs_items_as_members() {
        let one = json!({"jsonrpc": "2.0", "method": "n"});
        assert_eq!((members(&one).len(), &members(&one)[0]), (1, &one));
        let batch = json!([1, {"a": 2}]);
        assert_eq!(members(&batch), [json!(1), json!({"a": 2})]);
        assert!(members(&json!([])).is_empty());
        assert_eq!(members(&json!(null)), [Value::Null]);
        assert_eq!(
            Body::Batch(vec![one.clone()]).into_value(),
            json!([one.clone()])
        );
        assert_eq!(Body::Message(one.clone()).into_value(), one);
    }

    #[test]
    fn the_method_is_a_messages_string_method_only() {
        assert_eq!(method(&request(json!(1), "tools/list")), Some("tools/list"));
        assert_eq!(method(&json!({"method": "x"})), Some("x"));
        assert_eq!(method(&json!({"method": 5})), None);
        assert_eq!(method(&json!({"id": 1})), None);
        assert_eq!(method(&json!([{"method": "x"}])), None);
    }

    #[test]
    fn requests_expect_answers_and_responses_answer_them() {
        let batch = json!([
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": "a", "result": {}},
            {"jsonrpc": "2.0", "id": "b", "method": "ping"},
            {"id": 5, "method": "ping"},
            {"jsonrpc": "2.0", "id": true, "method": "ping"},
        ]);
        assert_eq!(request_ids(&batch), [json!(1), json!("b")]);
        assert_eq!(request_ids(&request(json!(3), "ping")), [json!(3)]);
        assert_eq!(
            request_ids(&json!({"jsonrpc": "2.0", "method": "x"})),
            Vec::<Value>::new()
        );
        let answer = json!([
            {"jsonrpc": "2.0", "id": 1, "result": {}},
            {"jsonrpc": "2.0", "id": "b", "error": {"code": -1, "message": "no"}},
            {"jsonrpc": "2.0", "id": 9, "method": "roots/list"},
            {"id": 4, "result": {}},
        ]);
        assert_eq!(answered_ids(&answer), [json!(1), json!("b")]);
        assert_eq!(
            answered_ids(&json!({"jsonrpc": "2.0", "id": 2, "result": {}})),
            [json!(2)]
        );
        let response = json!({"jsonrpc": "2.0", "id": 2, "result": {}});
        assert!(answers(&response, &json!(2)));
        assert!(!answers(&response, &json!(3)));
        assert!(!answers(&json!({"id": 2, "result": {}}), &json!(2)));
        assert!(!answers(&request(json!(2), "ping"), &json!(2)));
    }

    #[test]
    fn a_body_is_json_rpc_when_it_has_members_and_each_is_a_message() {
        assert!(is_jsonrpc(&request(json!(1), "ping")));
        assert!(is_jsonrpc(
            &json!([{"jsonrpc": "2.0", "id": 1, "result": {}}])
        ));
        assert!(is_jsonrpc(&json!([
            {"jsonrpc": "2.0", "id": 1, "result": {}},
            {"jsonrpc": "2.0", "method": "n"},
        ])));
        for body in [
            json!([]),
            json!({"error": "not_found", "message": "session not found"}),
            json!([{"jsonrpc": "2.0", "id": 1, "result": {}}, {"jsonrpc": "1.0", "method": "n"}]),
            json!("Not Found"),
        ] {
            assert!(!is_jsonrpc(&body), "{body}");
        }
    }
}
