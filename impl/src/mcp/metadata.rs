//! Each tool's `outputSchema` (MCP 2025-06-18 and later, Tools: "Output Schema": a
//! server that declares one MUST return `structuredContent` that conforms to it;
//! clients validate it, the TypeScript SDK with ajv), derived from the types the
//! tools return, and what a failed call returns.
//!
//! A tool returns `Result<Json<T>, Failure>`: on success `T` serialised (a struct
//! deriving `Serialize` and `JsonSchema`, its field docs the schema's
//! descriptions), from which rmcp's `#[tool]` derives the schema (JSON Schema
//! 2020-12, of what `Serialize` writes); on failure an [`ErrorResult`]
//! (`isError: true`, the error contract of `mcp/mod.rs`). The TypeScript SDK
//! validates `structuredContent` against the schema even when `isError` is set, so
//! [`describe`] makes each schema `anyOf` the two. The end-to-end `tools` scenario
//! calls every tool through the SDK, which refuses a result its schema does not
//! accept.

use super::McpServer;
use crate::write::ToolError;
use rmcp::handler::server::tool::{schema_for_output, IntoCallToolResult, ToolRouter};
use rmcp::model::{CallToolResponse, CallToolResult, JsonObject};
use rmcp::schemars::{self, JsonSchema};
use rmcp::ErrorData as McpError;
use serde::Serialize;
use serde_json::{json, Value};
use std::sync::Arc;

/// An error result's `structuredContent`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ErrorResult {
    /// What failed.
    pub error: ErrorBody,
}

/// What failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ErrorBody {
    /// `invalid_params`, `not_joined`, `not_found`, `forbidden`, `too_large`,
    /// `upstream`, `would_send_plaintext`, `encryption_unknown` or `rate_limited`
    /// (`mcp/mod.rs`).
    pub kind: String,
    /// What happened, for a person.
    pub message: String,
    /// `rate_limited` only: how long to wait before the same call is served, in
    /// milliseconds (at least 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl From<&ToolError> for ErrorResult {
    fn from(e: &ToolError) -> Self {
        ErrorResult {
            error: ErrorBody {
                kind: e.kind().to_owned(),
                message: e.message().to_owned(),
                retry_after_ms: e.retry_after_ms(),
            },
        }
    }
}

/// Why a tool call did not succeed: the tool failed (a result with `isError: true`
/// and an [`ErrorResult`]), or the request is not a tool call of a known caller (a
/// JSON-RPC error).
#[derive(Debug)]
pub enum Failure {
    Tool(ToolError),
    Protocol(McpError),
}

impl From<ToolError> for Failure {
    fn from(e: ToolError) -> Self {
        Failure::Tool(e)
    }
}

impl From<McpError> for Failure {
    fn from(e: McpError) -> Self {
        Failure::Protocol(e)
    }
}

impl IntoCallToolResult for Failure {
    fn into_call_tool_result(self) -> Result<CallToolResponse, McpError> {
        match self {
            Failure::Tool(e) => {
                Ok(CallToolResult::structured_error(json!(ErrorResult::from(&e))).into())
            }
            Failure::Protocol(e) => Err(e),
        }
    }
}

/// The output schema of a tool whose success schema is `success` (as schemars
/// writes it): `anyOf` it and [`ErrorResult`]'s, with `"type": "object"` at the
/// root (peers before MCP 2026-07-28 are shown only schemas of that type).
/// Self-contained: every `$ref` is replaced by the definition it names (not every
/// MCP client resolves references), and schemars' number formats (`uint64`, …,
/// which are no JSON Schema format: ajv warns of each) are left out; `minimum` still
/// says what an unsigned one does.
pub fn with_error_branch(success: &JsonObject) -> JsonObject {
    let branches = [success, &schema_for_output::<ErrorResult>()].map(|schema| {
        let mut schema = schema.clone();
        schema.remove("$schema");
        let defs = match schema.remove("$defs") {
            Some(Value::Object(defs)) => defs,
            _ => JsonObject::new(),
        };
        let mut schema = Value::Object(schema);
        self_contained(&mut schema, &defs);
        schema
    });
    let mut schema = JsonObject::new();
    schema.insert(
        "$schema".into(),
        json!("https://json-schema.org/draft/2020-12/schema"),
    );
    schema.insert("type".into(), json!("object"));
    schema.insert("anyOf".into(), json!(branches));
    schema
}

/// Replaces each `{"$ref": "#/$defs/Name", …}` in `schema` by the definition of
/// `Name` in `defs`, keeping the keywords beside the reference (a field's own
/// description), and drops `format` from number schemas.
///
/// # Panics
/// On a reference that is not into `defs` (schemars writes no other).
fn self_contained(schema: &mut Value, defs: &JsonObject) {
    match schema {
        Value::Object(object) => {
            if let Some(reference) = object.remove("$ref") {
                let def = reference
                    .as_str()
                    .and_then(|r| r.strip_prefix("#/$defs/"))
                    .and_then(|name| defs.get(name))
                    .unwrap_or_else(|| panic!("a reference outside $defs: {reference}"));
                if let Value::Object(def) = def {
                    for (keyword, value) in def {
                        object.entry(keyword).or_insert_with(|| value.clone());
                    }
                }
            }
            let number = |t: &Value| matches!(t.as_str(), Some("integer" | "number"));
            let numeric = object.get("type").is_some_and(|t| match t {
                Value::Array(types) => types.iter().any(number),
                t => number(t),
            });
            if numeric {
                object.remove("format");
            }
            for value in object.values_mut() {
                self_contained(value, defs);
            }
        }
        Value::Array(items) => {
            for item in items {
                self_contained(item, defs);
            }
        }
        _ => {}
    }
}

/// Gives every tool of `router` its output schema with the error branch
/// ([`with_error_branch`]).
///
/// # Panics
/// When a tool has no title (`#[tool(title = …)]`) or no output schema (it does
/// not return `Result<Json<T>, Failure>`): every tool must be described.
pub(super) fn describe(router: &mut ToolRouter<McpServer>) {
    for route in router.map.values_mut() {
        let name = route.attr.name.to_string();
        assert!(
            route.attr.title.as_deref().is_some_and(|t| !t.is_empty()),
            "tool {name} has no title"
        );
        let success = route.attr.output_schema.as_deref().unwrap_or_else(|| {
            panic!("tool {name} has no output schema: return Result<Json<T>, Failure>")
        });
        route.attr.output_schema = Some(Arc::new(with_error_branch(success)));
    }
}

#[cfg(test)]
mod tests {
    use super::super::file_tools::*;
    use super::super::read_tools::*;
    use super::super::write_tools::*;
    use super::*;
    use crate::health::{identity_report, EngineProbe, SyncStatus};
    use crate::http::Mount;
    use crate::summary::{self, Decryption};
    use mc_adapters::catchup::{Profile, RoomSearched, SearchAnswer, Unread, UnreadRoom};
    use mc_adapters::write_rule::RoomEncryptionState;
    use std::time::{Duration, Instant};

    /// Whether `value` conforms to `schema`, read as JSON Schema 2020-12 with the
    /// keywords schemars writes, once self-contained. Any other keyword panics: this
    /// reading would not check it (or the schema is not self-contained).
    fn conforms(schema: &Value, value: &Value) -> bool {
        let Value::Object(schema) = schema else {
            return schema == &json!(true);
        };
        schema.iter().all(|(keyword, arg)| match keyword.as_str() {
            "type" => {
                let types = match arg {
                    Value::Array(types) => types.iter().map(|t| t.as_str().unwrap()).collect(),
                    t => vec![t.as_str().unwrap()],
                };
                types.iter().any(|t| match *t {
                    "object" => value.is_object(),
                    "array" => value.is_array(),
                    "string" => value.is_string(),
                    "boolean" => value.is_boolean(),
                    "null" => value.is_null(),
                    "integer" => value.is_i64() || value.is_u64(),
                    "number" => value.is_number(),
                    other => panic!("type {other}"),
                })
            }
            "required" => arg.as_array().unwrap().iter().all(|key| {
                value
                    .as_object()
                    .is_none_or(|o| o.contains_key(key.as_str().unwrap()))
            }),
            "properties" => arg.as_object().unwrap().iter().all(|(key, sub)| {
                value
                    .get(key)
                    .filter(|_| value.is_object())
                    .is_none_or(|v| conforms(sub, v))
            }),
            "additionalProperties" => value.as_object().is_none_or(|o| {
                let named = schema.get("properties").and_then(Value::as_object);
                o.iter()
                    .filter(|(key, _)| named.is_none_or(|named| !named.contains_key(*key)))
                    .all(|(_, v)| conforms(arg, v))
            }),
            "items" => value
                .as_array()
                .is_none_or(|items| items.iter().all(|v| conforms(arg, v))),
            "anyOf" => arg.as_array().unwrap().iter().any(|s| conforms(s, value)),
            "oneOf" => {
                let matching = arg.as_array().unwrap().iter();
                matching.filter(|s| conforms(s, value)).count() == 1
            }
            "enum" => arg.as_array().unwrap().contains(value),
            "const" => arg == value,
            "minimum" => value.as_f64().is_none_or(|n| n >= arg.as_f64().unwrap()),
            "minItems" => value
                .as_array()
                .is_none_or(|items| items.len() as u64 >= arg.as_u64().unwrap()),
            "$schema" | "description" | "contentEncoding" => true,
            other => panic!("keyword {other} is not read by this test"),
        })
    }

    fn valid(schema: &JsonObject, value: &Value) -> bool {
        conforms(&Value::Object(schema.clone()), value)
    }

    fn event(raw: &str) -> summary::EventSummary {
        summary::summarize(raw, Decryption::Decrypted, &|_| true).unwrap()
    }

    /// A representative result of each tool, as the tool's own type writes it.
    fn sample(tool: &str) -> Value {
        let room = || RoomSummary {
            room_id: "!r:hs".into(),
            name: Some("Room".into()),
            topic: None,
            encrypted: true,
            joined_members: 2,
        };
        let mut message = event(include_str!("../../tests/data/events/text.json"));
        message.reactions = Some(Some([("👍".to_string(), 2)].into()));
        let mut unread = event(include_str!("../../tests/data/events/reply.json"));
        unread.reactions = Some(None);
        let page = Page {
            events: [
                message,
                unread,
                event(include_str!("../../tests/data/events/reaction.json")),
                event(include_str!("../../tests/data/events/redaction.json")),
                event(include_str!("../../tests/data/events/encrypted_file.json")),
                event(include_str!("../../tests/data/events/thread_reply.json")),
                event(include_str!("../../tests/data/events/edit.json")),
            ]
            .into_iter()
            .map(|e| mc_adapters::catchup::seen("!r:hs", e))
            .collect(),
            next: Some("t1".into()),
        };
        let engine = EngineProbe {
            lag: Some(Duration::from_millis(3)),
            undecryptable: None,
            stats: Default::default(),
        };
        let value = match tool {
            "whoami" => json!(WhoAmI {
                identity: "bot".into(),
                user_id: "@bot:hs".into(),
                device_id: None,
                homeserver: "https://hs".into(),
                mount: MountName::Channel,
                channel: ChannelSettings {
                    allowed_senders: vec!["@ann:hs".into()],
                    approvers: vec![],
                    permission_room: None,
                    prompt_ttl_secs: 600,
                    settle_ms: 2000,
                    replay_budget: 50,
                },
                health: identity_report("bot", &SyncStatus::default(), &engine, Instant::now()),
            }),
            "list_rooms" => json!(Rooms {
                joined: vec![room()],
                invited: vec![room()],
            }),
            "read_messages" | "read_thread" => json!(page),
            "get_reactions" => json!(Reactions {
                event_id: "$e".into(),
                reactions: summary::reaction(include_str!("../../tests/data/events/reaction.json"))
                    .into_iter()
                    .collect(),
            }),
            "download_attachment" => json!(Download {
                filename: "a.txt".into(),
                mimetype: None,
                size: 2,
                data_base64: "aGk=".into(),
            }),
            "room_info" => json!(RoomInfo {
                room_id: "!r:hs".into(),
                name: None,
                topic: Some("t".into()),
                canonical_alias: Some("#r:hs".into()),
                encrypted: false,
                joined_members: 1,
            }),
            "room_members" => json!(Members {
                members: [
                    (MemberState::Join, Some(PowerLevel::Level(100))),
                    (MemberState::Invite, Some(PowerLevel::Infinite)),
                    (MemberState::Join, None),
                ]
                .map(|(membership, power_level)| Member {
                    user_id: "@ann:hs".into(),
                    display_name: None,
                    membership,
                    power_level,
                    allowed: true,
                })
                .into(),
            }),
            "send_message" => json!(Sent {
                event_ids: vec!["$a".into(), "$b".into()],
            }),
            "edit_message" | "send_reaction" | "redact" => json!(SentEvent {
                event_id: Some("$a".into()),
            }),
            "acknowledge" => json!(Acknowledged {
                acknowledged: true,
                receipt: false,
            }),
            "join_room" => json!(JoinedRoom { room_id: None }),
            "leave_room" => json!(Left {
                left: "!r:hs".into()
            }),
            "invite" => json!(Invited {
                invited: "@ann:hs".into()
            }),
            "create_room" | "create_dm" => json!(RoomMade {
                room_id: "!new:hs".into(),
                created: true,
                invited: vec!["@ann:hs".into()],
            }),
            "send_file" => json!(FileSent {
                event_id: "$f".into(),
                filename: "shot.png".into(),
                msgtype: "m.image".into(),
                mimetype: "image/png".into(),
                size: 67,
                sha256: "0".repeat(64),
                width: Some(1),
                height: None,
                encrypted: true,
            }),
            "set_room_name" | "set_room_topic" => json!(RoomStateSet {
                room_id: "!r:hs".into(),
                event_id: "$s".into(),
            }),
            "search_messages" => json!(SearchAnswer {
                results: page.events.clone(),
                count: Some(9),
                cut: true,
                next_batch: Some("b1".into()),
                rooms: vec![
                    RoomSearched::of("!r:hs", RoomEncryptionState::NotEncrypted),
                    RoomSearched::of("!e:hs", RoomEncryptionState::Encrypted),
                ],
            }),
            "unread" => json!(Unread {
                rooms: vec![UnreadRoom {
                    room_id: "!r:hs".into(),
                    read_up_to: Some("$m".into()),
                    count: 3,
                    count_exact: true,
                    messages: page.events.clone(),
                    cut: false,
                }],
            }),
            "get_profile" => json!(Profile {
                user_id: "@ann:hs".into(),
                display_name: Some("Ann".into()),
                suspicious: false,
                avatar_url: None,
            }),
            other => panic!("no sample result of {other}"),
        };
        value
    }

    fn described() -> Vec<(String, JsonObject)> {
        let mut router = McpServer::read_tools()
            + McpServer::write_tools()
            + McpServer::file_tools()
            + McpServer::catchup_tools();
        describe(&mut router);
        router
            .list_all()
            .into_iter()
            .map(|t| (t.name.to_string(), (*t.output_schema.unwrap()).clone()))
            .collect()
    }

    #[test]
    fn each_tools_schema_accepts_its_typed_result_and_an_error_result() {
        let error = json!(ErrorResult::from(&ToolError::NotFound(
            "no such event".into()
        )));
        assert_eq!(
            error,
            json!({"error": {"kind": "not_found", "message": "no such event"}})
        );
        let limited = json!(ErrorResult::from(&ToolError::RateLimited {
            message: "wait".into(),
            retry_after_ms: 250,
        }));
        assert_eq!(
            limited,
            json!({"error": {"kind": "rate_limited", "message": "wait", "retry_after_ms": 250}})
        );
        let mut negative_wait = limited.clone();
        negative_wait["error"]["retry_after_ms"] = json!(-1);
        for (tool, schema) in described() {
            let result = sample(&tool);
            assert!(valid(&schema, &result), "{tool}: {result}");
            assert!(valid(&schema, &error), "{tool}");
            assert!(valid(&schema, &limited), "{tool}");
            assert!(!valid(&schema, &negative_wait), "{tool}");
        }
    }

    #[test]
    fn each_tools_schema_refuses_a_result_without_a_required_field() {
        for (tool, schema) in described() {
            let required = schema["anyOf"][0]["required"].as_array().unwrap();
            assert!(!required.is_empty(), "{tool}");
            for key in required {
                let mut result = sample(&tool);
                result
                    .as_object_mut()
                    .unwrap()
                    .remove(key.as_str().unwrap());
                assert!(!valid(&schema, &result), "{tool} without {key}");
            }
        }
        let schema = |name: &str| described().into_iter().find(|(t, _)| t == name).unwrap().1;
        let (page, whoami) = (schema("read_messages"), schema("whoami"));
        for (schema, tool, pointer, key) in [
            (&page, "read_messages", "/events/0", "sender"),
            (&page, "read_messages", "/events/0", "decryption"),
            (&whoami, "whoami", "/health/sync", "state"),
            (&whoami, "whoami", "/channel", "approvers"),
            (
                &schema("room_members"),
                "room_members",
                "/members/0",
                "power_level",
            ),
            (
                &schema("get_reactions"),
                "get_reactions",
                "/reactions/0",
                "key",
            ),
            (
                &schema("search_messages"),
                "search_messages",
                "/results/0",
                "room_id",
            ),
            (
                &schema("search_messages"),
                "search_messages",
                "/results/0",
                "sender",
            ),
            (
                &schema("search_messages"),
                "search_messages",
                "/rooms/0",
                "searched",
            ),
            (&schema("unread"), "unread", "/rooms/0", "count"),
            (
                &schema("unread"),
                "unread",
                "/rooms/0/messages/0",
                "suspicious",
            ),
        ] {
            let mut result = sample(tool);
            let object = result
                .pointer_mut(pointer)
                .unwrap()
                .as_object_mut()
                .unwrap();
            assert!(object.remove(key).is_some(), "{tool}{pointer}/{key}");
            assert!(!valid(schema, &result), "{tool}{pointer} without {key}");
        }
    }

    #[test]
    fn a_result_of_the_wrong_shape_is_refused() {
        let schema = |name: &str| described().into_iter().find(|(t, _)| t == name).unwrap().1;
        let mut result = sample("read_messages");
        result["events"][0]["ts"] = json!("yesterday");
        assert!(!valid(&schema("read_messages"), &result));
        let mut result = sample("room_members");
        result["members"][0]["membership"] = json!("leave");
        assert!(!valid(&schema("room_members"), &result));
        let mut result = sample("room_members");
        result["members"][0]["power_level"] = json!("high");
        assert!(!valid(&schema("room_members"), &result));
        let result = json!(Sent { event_ids: vec![] });
        assert!(!valid(&schema("send_message"), &result));
        let mut result = sample("whoami");
        result["mount"] = json!("stdio");
        assert!(!valid(&schema("whoami"), &result));
    }

    #[test]
    fn each_schema_is_self_contained_and_has_only_standard_formats() {
        for (tool, schema) in described() {
            let text = json!(schema).to_string();
            for absent in ["$ref", "$defs", "\"format\""] {
                assert!(!text.contains(absent), "{tool}: {text}");
            }
        }
    }

    #[test]
    fn the_mount_of_whoami_is_named_as_its_path() {
        for mount in [Mount::Tools, Mount::Channel] {
            assert_eq!(json!(MountName::from(mount)), json!(mount.as_str()));
        }
    }
}
