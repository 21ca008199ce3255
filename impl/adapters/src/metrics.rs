//! What `/metrics` counts of one model step (docs/operations.md "Metrics"), as label
//! values: the verdicts taken, the prompts' outcomes and the drops of a step's
//! effects ([`observations`]), and what a push is ([`push_labels`]). Observation
//! only: nothing is decided from these.
//!
//! Every label value comes from a closed set (a variant's snake-case name, the
//! audit trail's names for a prompt's end, a push kind), so a metric's series stay
//! few whatever the traffic: never a room, a user, an event or a request id.

use crate::audit::{drop_is, DropIs};
use mc_model::render::PushKind;
use mc_model::{ChannelNotification, DropReason, Effect, MetaKey, VerdictSource};

/// One fact of a model step that a counter counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    /// A verdict taken (`Effect::Decided`): `behavior` `allow` or `deny`, `via`
    /// `text`, `reaction`, `grant` or `policy`.
    Verdict {
        behavior: &'static str,
        via: &'static str,
    },
    /// A prompt's outcome: `posted` (handed to Matrix to post, a re-issued post
    /// after a restart included), `answered` (an approver's verdict by text or
    /// reaction), or how it ended unanswered, by the audit trail's names: `expired`,
    /// `evicted`, `superseded`, `post_failed`.
    Prompt(&'static str),
    /// An input or outcome not acted on (`Effect::Dropped`): the reason's snake-case
    /// name ([`drop_reason`]).
    Dropped(String),
}

/// What the counters count of `effects`, in their order: see [`Observation`].
/// Pushes, verdict sends and Matrix sends are counted where they are written.
pub fn observations(effects: &[Effect]) -> Vec<Observation> {
    let mut seen = Vec::new();
    for effect in effects {
        match effect {
            Effect::Decided { decision, .. } => {
                let via = via(&decision.via);
                seen.push(Observation::Verdict {
                    behavior: decision.behavior.as_str(),
                    via,
                });
                if matches!(via, "text" | "reaction") {
                    seen.push(Observation::Prompt("answered"));
                }
            }
            Effect::PostPrompt { .. } => seen.push(Observation::Prompt("posted")),
            Effect::Dropped { reason, .. } => {
                if let DropIs::PromptEnded(why) = drop_is(reason) {
                    seen.push(Observation::Prompt(why));
                }
                seen.push(Observation::Dropped(drop_reason(reason)));
            }
            Effect::Push { .. }
            | Effect::SendVerdict { .. }
            | Effect::EditPrompt { .. }
            | Effect::Notice { .. }
            | Effect::Announce { .. }
            | Effect::JoinRoom { .. }
            | Effect::CreateRoom { .. }
            | Effect::Typing { .. }
            | Effect::Write { .. }
            | Effect::WriteRefused { .. }
            | Effect::LogMessage { .. }
            | Effect::Bound { .. }
            | Effect::Granted { .. }
            | Effect::GrantEnded { .. }
            | Effect::Acknowledged { .. } => {}
        }
    }
    seen
}

/// How a verdict was given, by [`VerdictSource`]'s serde name.
fn via(source: &VerdictSource) -> &'static str {
    match source {
        VerdictSource::Text { .. } => "text",
        VerdictSource::Reaction { .. } => "reaction",
        VerdictSource::Grant { .. } => "grant",
        VerdictSource::Policy { .. } => "policy",
    }
}

/// A drop reason's name: its serde tag (`DropReason` is
/// `#[serde(tag = "reason", rename_all = "snake_case")]`), such as `stranger` or
/// `replay_cut`; a variant's fields are not part of it, so there are as many names
/// as variants. `unknown` if serde ever gave none.
pub fn drop_reason(reason: &DropReason) -> String {
    serde_json::to_value(reason)
        .ok()
        .and_then(|v| v.get("reason").and_then(|r| r.as_str()).map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// What a push is: its `kind` meta value among [`PushKind::ALL`] (`other` for any
/// other value, none today), and whether it is a replay (meta `replayed` is `true`:
/// an event pushed to a session that attached after it arrived).
pub fn push_labels(notification: &ChannelNotification) -> (&'static str, bool) {
    let kind = notification.meta.get(MetaKey::Kind);
    let kind = PushKind::ALL
        .iter()
        .map(|k| k.as_str())
        .find(|k| Some(*k) == kind)
        .unwrap_or("other");
    let replayed = notification.meta.get(MetaKey::Replayed) == Some("true");
    (kind, replayed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_model::{
        Behavior, Decision, EffectId, EventId, IdentityId, Meta, RequestId, RoomId, SessionId,
        Timestamp, UserId,
    };

    fn decided(behavior: Behavior, via: VerdictSource) -> Effect {
        Effect::Decided {
            identity: IdentityId("bot".into()),
            session: SessionId("s".into()),
            request_id: RequestId::parse("abcde").unwrap(),
            decision: Decision {
                behavior,
                by: UserId("@a:hs".into()),
                via,
            },
            at: Timestamp(1),
        }
    }

    fn dropped(reason: DropReason) -> Effect {
        Effect::Dropped {
            identity: Some(IdentityId("bot".into())),
            event_id: None,
            reason,
        }
    }

    #[test]
    fn a_verdict_counts_with_its_behavior_and_source_and_an_approvers_answers_its_prompt() {
        let e = EventId("$e".into());
        let cases = [
            (
                Behavior::Allow,
                VerdictSource::Text {
                    event_id: e.clone(),
                },
                "allow",
                "text",
                true,
            ),
            (
                Behavior::Deny,
                VerdictSource::Reaction {
                    event_id: e,
                    key: "👎".into(),
                },
                "deny",
                "reaction",
                true,
            ),
            (
                Behavior::Allow,
                VerdictSource::Grant { grant: 1 },
                "allow",
                "grant",
                false,
            ),
            (
                Behavior::Deny,
                VerdictSource::Policy { rule: 2 },
                "deny",
                "policy",
                false,
            ),
        ];
        for (behavior, source, b, v, answered) in cases {
            let mut want = vec![Observation::Verdict {
                behavior: b,
                via: v,
            }];
            if answered {
                want.push(Observation::Prompt("answered"));
            }
            assert_eq!(observations(&[decided(behavior, source)]), want, "{b} {v}");
        }
    }

    #[test]
    fn a_prompt_posted_or_ended_counts_by_the_audit_trails_names_and_every_drop_by_its_reason() {
        let post = Effect::PostPrompt {
            id: EffectId(3),
            identity: IdentityId("bot".into()),
            room: RoomId("!r:hs".into()),
            request_id: RequestId::parse("abcde").unwrap(),
            text: mc_model::PromptText {
                plain: "p".into(),
                html: "p".into(),
            },
        };
        assert_eq!(observations(&[post]), [Observation::Prompt("posted")]);
        assert_eq!(
            observations(&[
                dropped(DropReason::PromptExpired),
                dropped(DropReason::Stranger)
            ]),
            [
                Observation::Prompt("expired"),
                Observation::Dropped("prompt_expired".into()),
                Observation::Dropped("stranger".into()),
            ]
        );
        assert_eq!(
            observations(&[dropped(DropReason::ReplayCut { omitted: 7 })]),
            [Observation::Dropped("replay_cut".into())],
            "a variant's fields are no part of its name"
        );
        let ack = Effect::Acknowledged {
            identity: IdentityId("bot".into()),
            session: None,
            event_id: EventId("$e".into()),
        };
        assert_eq!(observations(&[ack]), []);
    }

    #[test]
    fn a_drop_reasons_name_is_its_serde_tag_without_its_fields() {
        assert_eq!(drop_reason(&DropReason::NotJoined), "not_joined");
        assert_eq!(
            drop_reason(&DropReason::GapCut {
                room: RoomId("!r:hs".into())
            }),
            "gap_cut"
        );
        assert_eq!(
            drop_reason(&DropReason::RoomCreationFailed {
                label: mc_model::Label::parse("web").unwrap()
            }),
            "room_creation_failed"
        );
    }

    #[test]
    fn a_push_is_labelled_by_its_kind_and_whether_it_is_a_replay() {
        let push = |kind: Option<&str>, replayed: Option<&str>| {
            let mut meta = Meta::default();
            if let Some(kind) = kind {
                meta.set(MetaKey::Kind, kind);
            }
            if let Some(replayed) = replayed {
                meta.set(MetaKey::Replayed, replayed);
            }
            push_labels(&ChannelNotification {
                content: String::new(),
                meta,
            })
        };
        assert_eq!(push(Some("message"), None), ("message", false));
        assert_eq!(push(Some("reaction"), Some("true")), ("reaction", true));
        assert_eq!(push(Some("gap_cut"), Some("false")), ("gap_cut", false));
        assert_eq!(push(Some("a room id"), None), ("other", false));
        assert_eq!(push(None, None), ("other", false));
    }
}
