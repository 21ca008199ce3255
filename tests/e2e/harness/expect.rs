//! Expected notification params, written out from what the test knows (event ids from
//! the human's sends, `origin_server_ts` read back from the homeserver) and the model's
//! rendering rules (`model/src/render.rs`, `model/src/meta.rs`,
//! `model/src/prompt_text.rs`), and assertions that print both sides on a mismatch.

use super::mcp::Notification;
use serde_json::{json, Map, Value};

pub const CHANNEL: &str = "notifications/claude/channel";
pub const PERMISSION: &str = "notifications/claude/channel/permission";
pub const PERMISSION_REQUEST: &str = "notifications/claude/channel/permission_request";

/// Checks one channel push against the server's `instructions` (issue 14, item 4):
/// every meta key is one the instructions name (`key: ` or `key (a|b): `), every
/// value of a key with a closed set is one of those listed, and every value is a
/// string (Claude Code drops the whole event when a meta value is not). Run on every
/// push the harness's MCP client takes.
#[track_caller]
pub fn assert_meta_in_instructions(instructions: &str, params: &Value) {
    let Some(meta) = params["meta"].as_object() else {
        panic!("a channel push without a meta object: {params}");
    };
    for (key, value) in meta {
        let Some(value) = value.as_str() else {
            panic!("meta {key} is not a string (Claude Code drops the event): {params}");
        };
        let plain = format!(" {key}: ");
        let closed = format!(" {key} (");
        if instructions.contains(&plain) {
            continue;
        }
        let Some(at) = instructions.find(&closed) else {
            panic!("meta key {key} is not in the instructions:\n{instructions}\n{params}");
        };
        let rest = &instructions[at + closed.len()..];
        let values = &rest[..rest.find("): ").expect("a closed set ends with \"): \"")];
        assert!(
            values.split('|').any(|v| v == value),
            "meta {key}={value:?} is not among the values the instructions list ({values}): {params}"
        );
    }
}

/// The event a push is about, and who sent it: the base meta of every push.
#[derive(Clone, Debug)]
pub struct Origin {
    pub room: String,
    pub event_id: String,
    pub sender: String,
    /// The `user` meta: the sender's display name for messages and edits, the MXID for
    /// reactions and retractions (they carry no display name).
    pub user: String,
    pub ts: u64,
}

/// `{content, meta}` of a `notifications/claude/channel` push: the base meta
/// (`kind`, `room_id`, `event_id`, `sender`, `user`, `ts`) plus `extra`.
pub fn push(kind: &str, content: &str, origin: &Origin, extra: Value) -> Value {
    let mut meta = Map::new();
    meta.insert("kind".into(), json!(kind));
    meta.insert("room_id".into(), json!(origin.room));
    meta.insert("event_id".into(), json!(origin.event_id));
    meta.insert("sender".into(), json!(origin.sender));
    meta.insert("user".into(), json!(origin.user));
    meta.insert("ts".into(), json!(origin.ts.to_string()));
    if let Value::Object(extra) = extra {
        meta.extend(extra);
    }
    json!({ "content": content, "meta": meta })
}

/// An `m.text` chat message.
pub fn message(content: &str, origin: &Origin) -> Value {
    push("message", content, origin, json!({ "msgtype": "m.text" }))
}

/// `params` as the first push of an attach carries them: with the `security` meta
/// ([`mc_model::SECURITY_POINTER`]). The MCP client of the harness takes it out
/// into [`Notification::security`]; Claude Code renders it as an attribute.
pub fn briefed(mut params: Value) -> Value {
    params["meta"]["security"] = json!(mc_model::SECURITY_POINTER);
    params
}

/// `params` as replayed to a session that attached after the event arrived.
pub fn replayed(mut params: Value) -> Value {
    params["meta"]["replayed"] = json!("true");
    params
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

/// Asserts a `notifications/claude/channel` push with exactly `expected` as params.
#[track_caller]
pub fn assert_push(actual: &Notification, expected: &Value) {
    assert_eq!(
        actual.method, CHANNEL,
        "expected a push, got {} {}",
        actual.method, actual.params
    );
    assert!(
        actual.params == *expected,
        "push params differ\n--- expected\n{}\n--- actual\n{}",
        pretty(expected),
        pretty(&actual.params)
    );
}

/// Asserts a verdict `{request_id, behavior}` and nothing else.
#[track_caller]
pub fn assert_verdict(actual: &Notification, request_id: &str, behavior: &str) {
    assert_eq!(
        (actual.method.as_str(), &actual.params),
        (
            PERMISSION,
            &json!({ "request_id": request_id, "behavior": behavior })
        ),
        "expected the verdict {behavior} for {request_id}"
    );
}

/// `permission_request` params as Claude Code sends them (four strings).
pub fn permission_request(id: &str, tool: &str, description: &str, preview: &str) -> Value {
    json!({
        "request_id": id,
        "tool_name": tool,
        "description": description,
        "input_preview": preview,
    })
}

/// The default reaction keys in the order the prompt lists them (sorted sets:
/// U+2705 before U+1F44D, U+274C before U+1F44E).
const APPROVE_KEYS: &str = "\u{2705} \u{1F44D}";
const DENY_KEYS: &str = "\u{274C} \u{1F44E}";

fn instruction(id: &str) -> String {
    format!("Reply \"yes {id}\" to allow or \"no {id}\" to deny, or react {APPROVE_KEYS} / {DENY_KEYS}.")
}

/// `&`, `<`, `>` escaped, as `html_escape::encode_text` does.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Escaped, and `\n` as `<br>`.
fn html(text: &str) -> String {
    escape(text).replace('\n', "<br>")
}

/// The prompt's `body` (`model/src/prompt_text.rs`, `render_prompt`), for fields short
/// enough not to be clipped and free of format characters.
pub fn prompt_plain(
    id: &str,
    who: Option<&str>,
    tool: &str,
    description: &str,
    preview: &str,
) -> String {
    let from = who.map(|w| format!(" from {w}")).unwrap_or_default();
    format!(
        "\u{1F510} Permission request {id}{from}: Claude Code wants to run {tool}\n{description}\nInput: {preview}\n\n{}",
        instruction(id)
    )
}

/// Who asks, as the prompt's `body` names it (`render_prompt`): a labelled session
/// as `LABEL (session XXXXXXXX)`, the first 8 characters of its MCP session id (the
/// test does not know the id the server gave the session); `None` for a session
/// without a label, which the prompt does not name. Panics on another shape.
pub fn asker(body: &str, id: &str) -> Option<String> {
    let head = format!("\u{1F510} Permission request {id}");
    let rest = body
        .strip_prefix(&head)
        .unwrap_or_else(|| panic!("a prompt for {id} starts {head:?}: {body:?}"));
    let rest = rest.strip_prefix(" from ")?;
    let who = &rest[..rest
        .find(": Claude Code wants to run ")
        .unwrap_or_else(|| panic!("the prompt names who asks: {body:?}"))];
    let short = match who
        .strip_suffix(')')
        .and_then(|w| w.split_once(" (session "))
    {
        Some((label, short)) => {
            assert!(
                !label.is_empty()
                    && label
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)),
                "a label: {who:?}"
            );
            short
        }
        None => panic!("`<label> (session <id>)`: {who:?}"),
    };
    assert_eq!(
        short.chars().count(),
        8,
        "8 characters of the session id: {who:?}"
    );
    Some(who.to_owned())
}

/// The prompt's `formatted_body`.
pub fn prompt_html(
    id: &str,
    who: Option<&str>,
    tool: &str,
    description: &str,
    preview: &str,
) -> String {
    let from = who
        .map(|w| format!(" from <b>{}</b>", html(w)))
        .unwrap_or_default();
    format!(
        "<p>\u{1F510} Permission request <code>{id}</code>{from}: Claude Code wants to run <b>{}</b></p>\
         <p>{}</p><pre><code>{}</code></pre><p>{}</p>",
        html(tool),
        html(description),
        escape(preview),
        html(&instruction(id))
    )
}

/// How a prompt was answered, as its outcome edit says it.
pub enum Answer<'a> {
    AllowedByReply { by: &'a str },
    DeniedByReply { by: &'a str },
    AllowedWith { by: &'a str, key: &'a str },
}

fn outcome_head(answer: &Answer<'_>) -> String {
    match answer {
        Answer::AllowedByReply { by } => format!("\u{2705} Allowed by {by} by reply"),
        Answer::DeniedByReply { by } => format!("\u{274C} Denied by {by} by reply"),
        Answer::AllowedWith { by, key } => format!("\u{2705} Allowed by {by} with {key}"),
    }
}

/// The outcome edit's new `body` (`render_outcome`).
pub fn outcome_plain(id: &str, tool: &str, answer: &Answer<'_>) -> String {
    format!("{}: permission request {id} ({tool})", outcome_head(answer))
}

/// The outcome edit's new `formatted_body`.
pub fn outcome_html(id: &str, tool: &str, answer: &Answer<'_>) -> String {
    format!(
        "<p>{}: permission request <code>{id}</code> (<b>{}</b>)</p>",
        html(&outcome_head(answer)),
        html(tool)
    )
}

/// Calls `tool` and asserts a tool error result (`isError`, not a protocol error) of
/// `kind` whose message says something; returns the error object `{kind, message, …}`.
pub async fn tool_error(
    client: &super::mcp::McpClient,
    tool: &str,
    args: Value,
    kind: &str,
) -> Value {
    let result = client
        .call(tool, args.clone())
        .await
        .unwrap_or_else(|e| panic!("{tool} {args}: a tool result, not a protocol error: {e}"));
    assert_eq!(
        result["isError"], true,
        "{tool} {args}: expected an error result of kind {kind}, got {result}"
    );
    let error = &result["structuredContent"]["error"];
    assert_eq!(error["kind"], kind, "{tool} {args}: {result}");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{tool} {args}: the error says what is wrong: {result}"
    );
    error.clone()
}

/// [`tool_error`]'s message.
pub async fn tool_error_message(
    client: &super::mcp::McpClient,
    tool: &str,
    args: Value,
    kind: &str,
) -> String {
    let error = tool_error(client, tool, args, kind).await;
    error["message"].as_str().unwrap_or_default().to_owned()
}
