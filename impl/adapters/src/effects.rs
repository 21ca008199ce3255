//! The engine's own rules for executing the model's effects: the order of the
//! wire calls and what their results are as model inputs. Which effect is made, to
//! whom, and what a result changes is the model's; here is only the room lane a
//! write runs in ([`write_lane`]), how a failed notification fails its session's queue
//! behind it ([`QueueFailure`]), the transaction id of a prompt post
//! ([`prompt_txn_id`]), an effect's result as its [`Input::Completed`] ([`completed`],
//! [`posted`]), how long the engine sleeps until the model's next deadline
//! ([`tick_wait`]), and how an operator's bind is answered from its transition
//! ([`bind_answer`]).

use mc_model::{
    AgentWrite, DropReason, Effect, EffectId, EventId, GrantEnd, IdentityId, Input, Label, Outcome,
    RoomId, Timestamp,
};
use std::time::Duration;

/// The room lane an agent's write runs in: its room (for a join, the id or alias it
/// names; for a direct chat, the user it is with, so a second `create_dm` with the
/// same user finds the room the first made; every new room in one lane, `""`).
/// Sends of one lane run one after another in the model's order.
pub fn write_lane(write: &AgentWrite) -> RoomId {
    match write {
        AgentWrite::Message { room, .. }
        | AgentWrite::Edit { room, .. }
        | AgentWrite::Reaction { room, .. }
        | AgentWrite::Redaction { room, .. }
        | AgentWrite::Receipt { room, .. }
        | AgentWrite::Leave { room }
        | AgentWrite::Invite { room, .. }
        | AgentWrite::SetRoomName { room, .. }
        | AgentWrite::SetRoomTopic { room, .. }
        | AgentWrite::File { room, .. } => room.clone(),
        AgentWrite::Join { room } => RoomId(room.clone()),
        AgentWrite::CreateDm { user } => RoomId(user.as_str().to_owned()),
        AgentWrite::CreateRoom { .. } => RoomId(String::new()),
    }
}

/// Which notifications of one session's queue are written. Once a notification
/// fails, every one queued behind it in the same attachment fails without being
/// written (the model then puts them back in its queue in order, behind the failed
/// one), so the session never sees a later event without the earlier one; a
/// notification queued after the session attached again is written. Attachments are
/// counted by the queue from the model's inputs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueFailure {
    failed_in: Option<u64>,
}

impl QueueFailure {
    /// Whether a notification queued in `attachment` is written; `false`: it fails
    /// unwritten.
    pub fn writes(&self, attachment: u64) -> bool {
        self.failed_in != Some(attachment)
    }

    /// A notification queued in `attachment` failed (written or not).
    pub fn failed(&mut self, attachment: u64) {
        self.failed_in = Some(attachment);
    }
}

/// The transaction id of a prompt post: the effect's id, so the post the model
/// issues again after a restart is the same transaction (the homeserver sends it
/// once).
pub fn prompt_txn_id(id: EffectId) -> String {
    format!("mc-prompt-{}", id.0)
}

/// The outcome of a send that yields nothing (a push, a verdict, a join) as an input.
pub fn completed(id: EffectId, result: Result<(), String>) -> Input {
    Input::Completed {
        id,
        outcome: match result {
            Ok(()) => Outcome::Sent,
            Err(reason) => Outcome::Failed { reason },
        },
    }
}

/// The outcome of a prompt post (the prompt's event id) as an input.
pub fn posted(id: EffectId, result: Result<EventId, String>) -> Input {
    Input::Completed {
        id,
        outcome: match result {
            Ok(event_id) => Outcome::Posted { event_id },
            Err(reason) => Outcome::Failed { reason },
        },
    }
}

/// How long the engine waits for its next input before it hands the model a tick:
/// until the model's next deadline (at once when it is past), or an hour when the
/// model has none.
pub fn tick_wait(next_deadline: Option<Timestamp>, now: Timestamp) -> Duration {
    match next_deadline {
        Some(at) => Duration::from_millis(at.saturating_since(now)),
        None => Duration::from_secs(3600),
    }
}

/// How the model answered an operator's [`Input::Bind`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindAnswer {
    /// Bound (or unbound): every change of the identity's bindings in the
    /// transition, in the model's order, as `(label, room)` (`None`: unbound). Binding
    /// a room that was another label's lists that label unbound first.
    Bound(Vec<(Label, Option<RoomId>)>),
    /// Not acted on, for this reason: [`DropReason::NotJoined`] (the identity is not
    /// joined to the room) or [`DropReason::UnknownIdentity`].
    Dropped(DropReason),
}

/// The answer to an [`Input::Bind`] of `identity`, from the effects of its
/// transition: its [`Effect::Bound`]s of `identity`, or else its drop of `identity`
/// that names no event with [`DropReason::NotJoined`] or
/// [`DropReason::UnknownIdentity`]. The timers that fire first in the same
/// transition (any identity's) never bind, and their drops name an event or give
/// another reason, so they do not count; nor does anything of another identity.
/// A transition with neither answers `Bound` with no change.
pub fn bind_answer(identity: &IdentityId, effects: &[Effect]) -> BindAnswer {
    let bound: Vec<(Label, Option<RoomId>)> = effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Bound {
                identity: of,
                label,
                room,
            } if of == identity => Some((label.clone(), room.clone())),
            _ => None,
        })
        .collect();
    if !bound.is_empty() {
        return BindAnswer::Bound(bound);
    }
    effects
        .iter()
        .find_map(|effect| match effect {
            Effect::Dropped {
                identity: Some(of),
                event_id: None,
                reason: reason @ (DropReason::NotJoined | DropReason::UnknownIdentity),
            } if of == identity => Some(BindAnswer::Dropped(reason.clone())),
            _ => None,
        })
        .unwrap_or(BindAnswer::Bound(bound))
}

/// The answer to an operator's [`Input::Revoke`] of `identity`, from the effects of
/// its transition: the ids of the grants of `identity` it ended as revoked by the
/// operator ([`GrantEnd::Operator`]), in the model's order; empty when none matched.
/// Grants that expired in the same transition (`GrantEnd::Expired`) or another
/// identity's do not count.
pub fn revoke_answer(identity: &IdentityId, effects: &[Effect]) -> Vec<u64> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::GrantEnded {
                identity: of,
                id,
                why: GrantEnd::Operator,
            } if of == identity => Some(*id),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_model::{AgentText, UserId};

    fn bound(identity: &str, label: &str, room: Option<&str>) -> Effect {
        Effect::Bound {
            identity: IdentityId(identity.into()),
            label: Label::parse(label).unwrap(),
            room: room.map(|r| RoomId(r.into())),
        }
    }

    fn dropped(identity: &str, event_id: Option<&str>, reason: DropReason) -> Effect {
        Effect::Dropped {
            identity: Some(IdentityId(identity.into())),
            event_id: event_id.map(|e| EventId(e.into())),
            reason,
        }
    }

    fn change(label: &str, room: Option<&str>) -> (Label, Option<RoomId>) {
        (Label::parse(label).unwrap(), room.map(|r| RoomId(r.into())))
    }

    #[test]
    fn a_bind_is_answered_with_every_change_of_its_identity_in_order() {
        let bot = IdentityId("bot".into());
        let effects = [
            // Another identity's change in the same transition is not this bind's.
            bound("other", "web", Some("!o:hs")),
            bound("bot", "api", None),
            dropped("bot", Some("$e"), DropReason::PromptExpired),
            bound("bot", "web", Some("!r:hs")),
        ];
        assert_eq!(
            bind_answer(&bot, &effects),
            BindAnswer::Bound(vec![change("api", None), change("web", Some("!r:hs"))])
        );
    }

    #[test]
    fn a_bind_dropped_not_joined_or_for_an_unknown_identity_is_answered_with_the_reason() {
        let bot = IdentityId("bot".into());
        for reason in [DropReason::NotJoined, DropReason::UnknownIdentity] {
            let effects = [
                dropped("other", None, DropReason::StaleOutcome),
                dropped("bot", None, DropReason::ReplayCut { omitted: 2 }),
                dropped("bot", None, reason.clone()),
            ];
            assert_eq!(
                bind_answer(&bot, &effects),
                BindAnswer::Dropped(reason),
                "{effects:?}"
            );
        }
    }

    #[test]
    fn a_drop_of_another_identity_or_naming_an_event_is_no_answer_to_a_bind() {
        let bot = IdentityId("bot".into());
        let effects = [
            // A timer's drop of an event (an undecryptable event given up on, say).
            dropped("bot", Some("$e"), DropReason::NotJoined),
            dropped("other", None, DropReason::NotJoined),
            Effect::Dropped {
                identity: None,
                event_id: None,
                reason: DropReason::NotJoined,
            },
        ];
        assert_eq!(bind_answer(&bot, &effects), BindAnswer::Bound(vec![]));
        assert_eq!(
            bind_answer(&bot, &[dropped("bot", None, DropReason::NotJoined)]),
            BindAnswer::Dropped(DropReason::NotJoined)
        );
    }

    #[test]
    fn a_bind_that_also_drops_is_answered_with_its_changes() {
        let bot = IdentityId("bot".into());
        let effects = [
            dropped("bot", None, DropReason::NotJoined),
            bound("bot", "api", Some("!r:hs")),
        ];
        assert_eq!(
            bind_answer(&bot, &effects),
            BindAnswer::Bound(vec![change("api", Some("!r:hs"))])
        );
    }

    #[test]
    fn an_agent_write_runs_in_the_lane_of_its_room_and_a_join_in_the_room_it_names() {
        let room = RoomId("!r:hs".into());
        let writes = [
            AgentWrite::Message {
                room: room.clone(),
                parts: vec![AgentText::plain("hi")],
                reply_to: None,
                thread_root: None,
                txn_id: "t".into(),
            },
            AgentWrite::Edit {
                room: room.clone(),
                original: EventId("$e".into()),
                original_sender: UserId("@bot:hs".into()),
                text: AgentText::plain("hi"),
            },
            AgentWrite::Reaction {
                room: room.clone(),
                relates_to: EventId("$e".into()),
                key: "👍".into(),
            },
            AgentWrite::Redaction {
                room: room.clone(),
                redacts: EventId("$e".into()),
                reason: None,
            },
            AgentWrite::Receipt {
                room: room.clone(),
                event_id: EventId("$e".into()),
            },
            AgentWrite::Leave { room: room.clone() },
            AgentWrite::Invite {
                room: room.clone(),
                user: UserId("@ann:hs".into()),
            },
            AgentWrite::SetRoomName {
                room: room.clone(),
                name: "n".into(),
            },
            AgentWrite::SetRoomTopic {
                room: room.clone(),
                topic: "t".into(),
            },
        ];
        for write in &writes {
            assert_eq!(write_lane(write), room, "{write:?}");
        }
        let join = AgentWrite::Join {
            room: "#lobby:hs".into(),
        };
        assert_eq!(write_lane(&join), RoomId("#lobby:hs".into()));
        let dm = AgentWrite::CreateDm {
            user: UserId("@ann:hs".into()),
        };
        assert_eq!(write_lane(&dm), RoomId("@ann:hs".into()));
        let create = AgentWrite::CreateRoom {
            name: Some("!r:hs".into()),
            topic: None,
            encrypted: true,
            invite: vec![UserId("@ann:hs".into())],
        };
        assert_eq!(write_lane(&create), RoomId(String::new()));
    }

    #[test]
    fn behind_a_failed_notification_its_attachment_fails_unwritten_and_the_next_is_written() {
        let mut queue = QueueFailure::default();
        assert!(queue.writes(0) && queue.writes(1), "nothing failed yet");
        queue.failed(1);
        assert!(!queue.writes(1), "queued behind the failure");
        assert!(queue.writes(2), "after the session attached again");
        queue.failed(2);
        assert!(!queue.writes(2));
    }

    #[test]
    fn a_prompt_post_is_the_transaction_of_its_effect_id() {
        assert_eq!(prompt_txn_id(EffectId(42)), "mc-prompt-42");
    }

    #[test]
    fn a_result_is_the_completed_input_of_its_effect() {
        assert_eq!(
            completed(EffectId(3), Ok(())),
            Input::Completed {
                id: EffectId(3),
                outcome: Outcome::Sent
            }
        );
        assert_eq!(
            completed(EffectId(3), Err("closed".into())),
            Input::Completed {
                id: EffectId(3),
                outcome: Outcome::Failed {
                    reason: "closed".into()
                }
            }
        );
        assert_eq!(
            posted(EffectId(4), Ok(EventId("$p".into()))),
            Input::Completed {
                id: EffectId(4),
                outcome: Outcome::Posted {
                    event_id: EventId("$p".into())
                }
            }
        );
        assert_eq!(
            posted(EffectId(4), Err("502".into())),
            Input::Completed {
                id: EffectId(4),
                outcome: Outcome::Failed {
                    reason: "502".into()
                }
            }
        );
    }

    #[test]
    fn the_engine_sleeps_until_the_next_deadline_or_an_hour_without_one() {
        assert_eq!(
            tick_wait(Some(Timestamp(1_500)), Timestamp(1_000)),
            Duration::from_millis(500)
        );
        assert_eq!(
            tick_wait(Some(Timestamp(1_000)), Timestamp(1_500)),
            Duration::ZERO
        );
        assert_eq!(tick_wait(None, Timestamp(1_000)), Duration::from_secs(3600));
    }

    #[test]
    fn a_revoke_is_answered_with_the_operators_revocations_of_its_identity_only() {
        let ended = |identity: &str, id: u64, why: GrantEnd| Effect::GrantEnded {
            identity: IdentityId(identity.into()),
            id,
            why,
        };
        let a = IdentityId("a".into());
        let effects = [
            ended("a", 1, GrantEnd::Expired),
            ended("a", 2, GrantEnd::Operator),
            ended("b", 3, GrantEnd::Operator),
            ended("a", 4, GrantEnd::SessionEnded),
            ended("a", 5, GrantEnd::Operator),
        ];
        assert_eq!(revoke_answer(&a, &effects), [2, 5]);
        assert_eq!(revoke_answer(&a, &effects[..1]), Vec::<u64>::new());
    }
}
