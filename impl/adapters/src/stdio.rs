//! The pure parts of `matrix-channel stdio` (the MCP stdio transport bridged to the
//! running server's `/channel`): what one stdin line is, what becomes one stdout line,
//! the headers an HTTP client would send with a message, the bridge's token label, and
//! where to reach the server from its `listen` address.
//!
//! What a message is (request, notification, response, its id and method, a batch's
//! members) is [`crate::jsonrpc`]'s to say; this module only frames lines.

use crate::jsonrpc::{self, INTERNAL_ERROR};
use serde_json::{json, Value};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The `_meta` key of a request's own protocol revision (MCP 2026-07-28; Claude Code's
/// `server/discover` probe carries it).
const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

/// The first MCP revision whose HTTP clients send `Mcp-Method` and `Mcp-Name` with
/// each message (SEP-2243), and whose server (rmcp) refuses a message without them
/// before anything else.
const STANDARD_HEADERS_FROM: &str = "2026-07-28";

/// The label of the token a bridge with process id `pid` mints.
pub fn token_label(pid: u32) -> String {
    format!("stdio (pid {pid})")
}

/// The process id in a label made by [`token_label`], `None` for any other label
/// (exactly `stdio (pid ` then decimal digits then `)`).
pub fn label_pid(label: &str) -> Option<u32> {
    let digits = label.strip_prefix("stdio (pid ")?.strip_suffix(')')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// What one stdin line is.
#[derive(Clone, Debug, PartialEq)]
pub enum Inbound {
    /// Empty or only whitespace: skipped.
    Blank,
    /// Not a JSON-RPC message or batch: the line to answer it with, the HTTP path's
    /// own answer to the same bytes ([`jsonrpc::inspect`]: -32700 for what is not
    /// JSON, -32600 for JSON that is not JSON-RPC).
    Malformed(String),
    /// A JSON-RPC message or batch: the text to POST as it is, and its value.
    Message { raw: String, value: Value },
}

/// Frames one line read from stdin (its `\n` already taken off; a `\r` before it
/// goes too).
pub fn frame(line: &str) -> Inbound {
    let text = line.strip_suffix('\r').unwrap_or(line);
    if text.trim().is_empty() {
        return Inbound::Blank;
    }
    match jsonrpc::inspect(text.as_bytes()) {
        Ok(body) => Inbound::Message {
            raw: text.to_owned(),
            value: body.into_value(),
        },
        Err(rejection) => Inbound::Malformed(rejection.response().to_string()),
    }
}

/// `text` as one stdout line: `None` when it is not JSON; as it is when it has no
/// line break; else re-encoded compactly.
pub fn one_line(text: &str) -> Option<String> {
    let text = text.trim();
    let value: Value = serde_json::from_str(text).ok()?;
    if text.contains(['\n', '\r']) {
        Some(value.to_string())
    } else {
        Some(text.to_owned())
    }
}

/// The stdout line of an HTTP answer's JSON body: [`one_line`] when the body is a
/// JSON-RPC message or batch ([`jsonrpc::is_jsonrpc`]); `None` for any other body
/// (such as `{"error": "not_found"}`, the HTTP layer's, not the client's).
pub fn answer_line(body: &str) -> Option<String> {
    let line = one_line(body)?;
    let value: Value = serde_json::from_str(&line).ok()?;
    jsonrpc::is_jsonrpc(&value).then_some(line)
}

/// A JSON-RPC error line for request `id` ([`INTERNAL_ERROR`]).
pub fn failure(id: &Value, message: &str) -> String {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": INTERNAL_ERROR, "message": format!("matrix-channel stdio: {message}")},
    })
    .to_string()
}

/// The `MCP-Protocol-Version` header for `message`: the revision a request names in
/// its `_meta` (an HTTP client of MCP 2026-07-28 sends that header with it), none for
/// `initialize`, else the negotiated one.
pub fn protocol_header(message: &Value, negotiated: Option<&str>) -> Option<String> {
    if let Some(own) = message
        .pointer("/params/_meta")
        .and_then(|meta| meta.get(META_PROTOCOL_VERSION))
        .and_then(Value::as_str)
    {
        return Some(own.to_owned());
    }
    if jsonrpc::method(message) == Some("initialize") {
        return None;
    }
    negotiated.map(str::to_owned)
}

/// The SEP-2243 headers an HTTP client of `revision` sends with `message`: none before
/// [`STANDARD_HEADERS_FROM`]; else `Mcp-Method`, and `Mcp-Name` for the methods that
/// name something (a tool or prompt, a resource, a task), Base64-wrapped
/// (`=?base64?…?=`) when the name cannot travel bare. (`Mcp-Param-*`, for tool
/// arguments a tool's schema promotes to headers, are never needed: no tool of this
/// server promotes any, and this server refuses these revisions anyway, with -32022;
/// these headers only make it refuse them for that reason, as it does over HTTP.)
pub fn standard_headers(message: &Value, revision: Option<&str>) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if revision.is_none_or(|r| r < STANDARD_HEADERS_FROM) {
        return out;
    }
    let Some(method) = jsonrpc::method(message) else {
        return out;
    };
    if method == "initialize" {
        return out;
    }
    out.push(("mcp-method", method.to_owned()));
    let key = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => "uri",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
        _ => return out,
    };
    if let Some(name) = message
        .pointer(&format!("/params/{key}"))
        .and_then(Value::as_str)
    {
        out.push(("mcp-name", header_value(name)));
    }
    out
}

/// A header value as SEP-2243 carries it: as it is, or `=?base64?<base64>?=` when it
/// has surrounding blanks, characters outside visible ASCII, or looks wrapped already.
fn header_value(value: &str) -> String {
    use base64::Engine as _;
    let blank_edge = value.starts_with([' ', '\t']) || value.ends_with([' ', '\t']);
    let unsafe_char = value.chars().any(|c| !(' '..='~').contains(&c));
    let looks_wrapped = value.starts_with("=?base64?") && value.ends_with("?=");
    if blank_edge || unsafe_char || looks_wrapped {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value)
        )
    } else {
        value.to_owned()
    }
}

/// Where to reach `serve` from its `listen` address: the same address, or loopback
/// for an unspecified one (`0.0.0.0`, `::`).
/// Errors: port 0 (any free port: which one `serve` took is not in the config).
pub fn endpoint(listen: SocketAddr) -> Result<SocketAddr, String> {
    if listen.port() == 0 {
        return Err(format!(
            "listen is {listen} (port 0: any free port), so where `matrix-channel serve` \
             listens cannot be known: give `listen` a fixed port"
        ));
    }
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    Ok(SocketAddr::new(ip, listen.port()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_blank_malformed_or_a_message_kept_as_written() {
        assert_eq!(frame(""), Inbound::Blank);
        assert_eq!(frame("  \t\r"), Inbound::Blank);
        let raw = r#"{"jsonrpc":"2.0", "id":1,"method":"ping"}"#;
        assert_eq!(
            frame(&format!("{raw}\r")),
            Inbound::Message {
                raw: raw.to_owned(),
                value: json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            }
        );
        let Inbound::Malformed(answer) = frame("this is not json") else {
            panic!("not JSON is malformed");
        };
        let answer: Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(answer["jsonrpc"], "2.0");
        assert_eq!(answer["id"], Value::Null);
        assert_eq!(answer["error"]["code"], -32700);
        let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"n"}]"#;
        assert_eq!(
            frame(batch),
            Inbound::Message {
                raw: batch.to_owned(),
                value: serde_json::from_str(batch).unwrap(),
            },
            "a batch is the server's to take or refuse (by the session's revision)"
        );
    }

    #[test]
    fn json_that_is_not_json_rpc_gets_the_http_paths_invalid_request_without_a_round_trip() {
        // Each gets exactly what the server answers those bytes over HTTP, and at once:
        // a request the server never sees still gets its answer (JSON-RPC 2.0 section
        // 5: an invalid request is answered with -32600).
        for line in [
            "[]",
            "[1, 2]",
            "{\"a\":1}",
            r#"{"id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":5}"#,
        ] {
            let over_http = jsonrpc::inspect(line.as_bytes()).expect_err(line);
            assert_eq!(over_http.code, jsonrpc::INVALID_REQUEST, "{line}");
            assert_eq!(
                frame(line),
                Inbound::Malformed(over_http.response().to_string()),
                "{line}"
            );
        }
    }

    #[test]
    fn an_answer_becomes_one_line_and_only_json_is_forwarded() {
        assert_eq!(one_line("{\"a\": 1}\n").as_deref(), Some("{\"a\": 1}"));
        assert_eq!(
            one_line("{\n  \"a\": \"x\\ny\"\n}").as_deref(),
            Some("{\"a\":\"x\\ny\"}")
        );
        assert_eq!(one_line("{\"a\":\r1}").as_deref(), Some("{\"a\":1}"));
        assert_eq!(one_line("not json"), None);
        assert_eq!(one_line(""), None);
    }

    #[test]
    fn only_jsonrpc_bodies_are_forwarded_as_answers() {
        let parse_error = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#;
        assert_eq!(answer_line(parse_error).as_deref(), Some(parse_error));
        // rmcp's answer to a message whose id it cannot read carries none.
        let no_id = "{\"jsonrpc\":\"2.0\",\n\"error\":{\"code\":-32022,\"message\":\"x\"}}";
        assert_eq!(
            answer_line(no_id).as_deref(),
            Some(r#"{"error":{"code":-32022,"message":"x"},"jsonrpc":"2.0"}"#)
        );
        let batch = r#"[{"jsonrpc":"2.0","id":1,"result":{}}]"#;
        assert_eq!(answer_line(batch).as_deref(), Some(batch));
        for body in [
            r#"{"error":"not_found","message":"session not found"}"#,
            "[]",
            "Not Found",
            "",
        ] {
            assert_eq!(answer_line(body), None, "{body}");
        }
    }

    #[test]
    fn a_stale_token_is_known_by_its_label_alone() {
        assert_eq!(token_label(4242), "stdio (pid 4242)");
        assert_eq!(label_pid(&token_label(4242)), Some(4242));
        assert_eq!(label_pid("stdio (pid 1)"), Some(1));
        for other in [
            "",
            "laptop",
            "stdio (pid )",
            "stdio (pid +5)",
            "stdio (pid -5)",
            "stdio (pid 5",
            "stdio (pid 5) ",
            " stdio (pid 5)",
            "stdio (pid 5x)",
            "stdio (pid 99999999999)",
            "Stdio (pid 5)",
        ] {
            assert_eq!(label_pid(other), None, "{other:?}");
        }
    }

    #[test]
    fn a_request_left_unanswered_gets_an_internal_error_line_with_its_id() {
        let line: Value = serde_json::from_str(&failure(&json!(7), "down")).unwrap();
        assert_eq!(
            line,
            json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32603, "message": "matrix-channel stdio: down"}})
        );
    }

    #[test]
    fn the_protocol_header_is_the_requests_own_then_the_negotiated_one() {
        let discover = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover",
            "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}});
        assert_eq!(
            protocol_header(&discover, None).as_deref(),
            Some("2026-07-28")
        );
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}});
        assert_eq!(protocol_header(&init, Some("2025-11-25")), None);
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
        assert_eq!(protocol_header(&call, None), None);
        assert_eq!(
            protocol_header(&call, Some("2025-11-25")).as_deref(),
            Some("2025-11-25")
        );
    }

    #[test]
    fn a_2026_07_28_message_carries_the_standard_headers_and_an_older_one_none() {
        let discover =
            json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}});
        assert_eq!(standard_headers(&discover, None), []);
        assert_eq!(standard_headers(&discover, Some("2025-11-25")), []);
        assert_eq!(
            standard_headers(&discover, Some("2026-07-28")),
            [("mcp-method", "server/discover".to_owned())]
        );
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "send_message", "arguments": {}}});
        assert_eq!(
            standard_headers(&call, Some("2026-07-28")),
            [
                ("mcp-method", "tools/call".to_owned()),
                ("mcp-name", "send_message".to_owned())
            ]
        );
        let read = json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read",
            "params": {"uri": "file:///ä"}});
        assert_eq!(
            standard_headers(&read, Some("2026-07-28"))[1],
            ("mcp-name", "=?base64?ZmlsZTovLy/DpA==?=".to_owned())
        );
        assert_eq!(header_value(" x"), "=?base64?IHg=?=");
        assert_eq!(
            header_value("=?base64?eA==?="),
            "=?base64?PT9iYXNlNjQ/ZUE9PT89?="
        );
        assert_eq!(header_value("=?base64?x"), "=?base64?x");
        assert_eq!(header_value("x?="), "x?=");
        let task = json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/get",
            "params": {"taskId": "t1"}});
        assert_eq!(
            standard_headers(&task, Some("2026-07-28")),
            [
                ("mcp-method", "tasks/get".to_owned()),
                ("mcp-name", "t1".to_owned())
            ]
        );
        let prompt = json!({"jsonrpc": "2.0", "id": 5, "method": "prompts/get",
            "params": {"uri": "not a name"}});
        assert_eq!(
            standard_headers(&prompt, Some("2026-07-28")),
            [("mcp-method", "prompts/get".to_owned())],
            "a prompt is named by its name"
        );
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}});
        assert_eq!(standard_headers(&init, Some("2026-07-28")), []);
    }

    #[test]
    fn the_endpoint_is_the_listen_address_or_loopback_and_never_port_zero() {
        let at = |s: &str| endpoint(s.parse().unwrap());
        assert_eq!(at("127.0.0.1:8700"), Ok("127.0.0.1:8700".parse().unwrap()));
        assert_eq!(at("0.0.0.0:8700"), Ok("127.0.0.1:8700".parse().unwrap()));
        assert_eq!(at("[::]:8700"), Ok("[::1]:8700".parse().unwrap()));
        assert_eq!(at("[fe80::7]:8700"), Ok("[fe80::7]:8700".parse().unwrap()));
        assert_eq!(at("192.0.2.7:80"), Ok("192.0.2.7:80".parse().unwrap()));
        assert!(at("127.0.0.1:0").unwrap_err().contains("port 0"));
    }
}
