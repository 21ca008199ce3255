//! Each tool's `title` and `outputSchema` (MCP 2025-06-18 and later, Tools: "Output
//! Schema": a server that declares one MUST return `structuredContent` that conforms
//! to it; clients validate it, the TypeScript SDK with ajv). The schemas are JSON
//! Schema 2020-12 objects describing what the tool bodies in `read_tools.rs` and
//! `write_tools.rs` return on success; an error result (`isError: true`) carries
//! `{"error": {"kind", "message"}}` instead (the module docs of `mcp/mod.rs`); each
//! schema is `anyOf` the two, since the TypeScript SDK validates both. The end-to-end `tools` scenario calls every
//! tool through the SDK, which refuses a result its schema does not accept.

use super::McpServer;
use rmcp::handler::server::tool::ToolRouter;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// `(name, title, outputSchema)` of every tool.
fn table() -> Vec<(&'static str, &'static str, Value)> {
    let id = json!({"type": "string"});
    let maybe_string = json!({"type": ["string", "null"]});
    let events = json!({
        "type": "array",
        "items": {
            "type": "object",
            "required": ["event_id", "type", "sender"],
            "properties": {
                "event_id": id, "type": id, "sender": id,
                "sender_allowed": {"type": "boolean"},
                "ts": {"type": ["integer", "null"]},
            },
        },
    });
    let page = json!({
        "type": "object",
        "required": ["events", "next"],
        "properties": {"events": events, "next": maybe_string},
    });
    let one_event = |key: &str| {
        json!({
            "type": "object",
            "required": [key],
            "properties": {key: {"type": ["string", "null"]}},
        })
    };
    let room = json!({
        "type": "object",
        "required": ["room_id", "name", "topic", "encrypted", "joined_members"],
        "properties": {
            "room_id": id, "name": maybe_string, "topic": maybe_string,
            "encrypted": {"type": "boolean"},
            "joined_members": {"type": "integer", "minimum": 0},
        },
    });
    let mut room_info = room.clone();
    room_info["required"]
        .as_array_mut()
        .expect("an array")
        .push(json!("canonical_alias"));
    room_info["properties"]["canonical_alias"] = maybe_string.clone();
    vec![
        (
            "whoami",
            "Who this server acts as",
            json!({
                "type": "object",
                "required": ["identity", "user_id", "device_id", "homeserver", "mount", "channel", "health"],
                "properties": {
                    "identity": id, "user_id": id, "device_id": maybe_string,
                    "homeserver": id, "mount": {"enum": ["mcp", "channel"]},
                    "channel": {
                        "type": "object",
                        "required": ["allowed_senders", "approvers", "permission_room",
                                     "prompt_ttl_secs", "settle_ms", "replay_budget"],
                        "properties": {
                            "allowed_senders": {"type": "array", "items": id},
                            "approvers": {"type": "array", "items": id},
                            "permission_room": maybe_string,
                            "prompt_ttl_secs": {"type": "integer", "minimum": 0},
                            "settle_ms": {"type": "integer", "minimum": 0},
                            "replay_budget": {"type": "integer", "minimum": 0},
                        },
                    },
                    "health": {"type": "object", "required": ["name", "status", "sync", "engine"]},
                },
            }),
        ),
        (
            "list_rooms",
            "List rooms",
            json!({
                "type": "object",
                "required": ["joined", "invited"],
                "properties": {
                    "joined": {"type": "array", "items": room},
                    "invited": {"type": "array", "items": room},
                },
            }),
        ),
        ("read_messages", "Read a room's messages", page.clone()),
        ("read_thread", "Read a thread", page),
        (
            "get_reactions",
            "Get an event's reactions",
            json!({
                "type": "object",
                "required": ["event_id", "reactions"],
                "properties": {
                    "event_id": id,
                    "reactions": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["event_id", "sender", "key", "ts"],
                            "properties": {
                                "event_id": id, "sender": id, "key": id,
                                "ts": {"type": "integer"},
                            },
                        },
                    },
                },
            }),
        ),
        (
            "download_attachment",
            "Download an attachment",
            json!({
                "type": "object",
                "required": ["filename", "mimetype", "size", "data_base64"],
                "properties": {
                    "filename": maybe_string, "mimetype": maybe_string,
                    "size": {"type": "integer", "minimum": 0},
                    "data_base64": {"type": "string", "contentEncoding": "base64"},
                },
            }),
        ),
        ("room_info", "Room info", room_info),
        (
            "room_members",
            "List a room's members",
            json!({
                "type": "object",
                "required": ["members"],
                "properties": {
                    "members": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["user_id", "display_name", "membership", "power_level", "allowed"],
                            "properties": {
                                "user_id": id, "display_name": maybe_string,
                                "membership": {"enum": ["join", "invite"]},
                                "power_level": {"oneOf": [{"type": "integer"}, {"const": "infinite"}, {"type": "null"}]},
                                "allowed": {"type": "boolean"},
                            },
                        },
                    },
                },
            }),
        ),
        (
            "send_message",
            "Send a message",
            json!({
                "type": "object",
                "required": ["event_ids"],
                "properties": {"event_ids": {"type": "array", "items": id, "minItems": 1}},
            }),
        ),
        ("edit_message", "Edit a message", one_event("event_id")),
        ("send_reaction", "React to an event", one_event("event_id")),
        ("redact", "Redact an event", one_event("event_id")),
        (
            "acknowledge",
            "Acknowledge a pushed event",
            json!({
                "type": "object",
                "required": ["acknowledged", "receipt"],
                "properties": {
                    "acknowledged": {"type": "boolean"},
                    "receipt": {"type": "boolean"},
                },
            }),
        ),
        ("join_room", "Join a room", one_event("room_id")),
        ("leave_room", "Leave a room", one_event("left")),
        ("invite", "Invite a user", one_event("invited")),
    ]
}

/// An error result's `structuredContent` (`write::ToolError`): the TypeScript SDK
/// validates `structuredContent` against the output schema even when `isError` is
/// set, so each schema is `anyOf` the tool's result and this.
fn error_schema() -> Value {
    json!({
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["kind", "message"],
                "properties": {"kind": {"type": "string"}, "message": {"type": "string"}},
            },
        },
    })
}

/// Gives every tool of `router` its title and output schema.
///
/// # Panics
/// When a tool has no entry in the table: a new tool must be described (a unit test
/// builds the full router and checks that the table names exactly its tools).
pub(super) fn describe(router: &mut ToolRouter<McpServer>) {
    let table = table();
    for route in router.map.values_mut() {
        let name = route.attr.name.to_string();
        let (_, title, schema) = table
            .iter()
            .find(|(n, ..)| *n == name)
            .unwrap_or_else(|| panic!("tool {name} has no title and output schema"));
        let Value::Object(schema) = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "anyOf": [schema, error_schema()],
        }) else {
            unreachable!("a JSON object")
        };
        route.attr.title = Some((*title).to_owned());
        route.attr.output_schema = Some(Arc::new(schema as Map<String, Value>));
    }
}

/// The names the table describes, for the test that it describes every tool.
#[cfg(test)]
pub(super) fn described() -> Vec<&'static str> {
    table().into_iter().map(|(name, ..)| name).collect()
}
