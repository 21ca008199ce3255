//! The params of the notifications the server sends a Claude Code session, built from
//! the model's effects (Claude Code's channel contract: a push is
//! `notifications/claude/channel`, a verdict `notifications/claude/channel/permission`).

use mc_model::{ChannelNotification, PermissionVerdict};
use serde_json::{json, Value};

/// `notifications/claude/channel` params: `{"content": string, "meta": {string:
/// string}}`, the meta keys in the model's order.
pub fn channel_params(notification: &ChannelNotification) -> Value {
    let meta: serde_json::Map<String, Value> = notification
        .meta
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
        .collect();
    json!({ "content": notification.content, "meta": meta })
}

/// `notifications/claude/channel/permission` params:
/// `{"request_id": "abcde", "behavior": "allow" | "deny"}`.
pub fn verdict_params(verdict: &PermissionVerdict) -> Value {
    json!({
        "request_id": verdict.request_id.as_str(),
        "behavior": verdict.behavior.as_str(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_model::{Behavior, Meta, MetaKey, RequestId};

    #[test]
    fn a_push_is_its_content_and_every_meta_value_as_a_string() {
        let mut meta = Meta::default();
        meta.set(MetaKey::EventId, "$e");
        meta.set(MetaKey::Kind, "message");
        let n = ChannelNotification {
            content: "hi".into(),
            meta,
        };
        assert_eq!(
            channel_params(&n),
            json!({"content": "hi", "meta": {"event_id": "$e", "kind": "message"}})
        );
    }

    #[test]
    fn a_verdict_is_its_request_id_and_behavior() {
        for (behavior, word) in [(Behavior::Allow, "allow"), (Behavior::Deny, "deny")] {
            let v = PermissionVerdict {
                request_id: RequestId::parse("abcde").unwrap(),
                behavior,
            };
            assert_eq!(
                verdict_params(&v),
                json!({"request_id": "abcde", "behavior": word})
            );
        }
    }
}
