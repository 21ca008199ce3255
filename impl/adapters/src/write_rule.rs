//! What the server's writes to Matrix decide without the network: the tool-error
//! contract every tool answers with ([`ToolError`]), a homeserver error in its kinds
//! ([`homeserver_error`]), the model's refusal of a write in words ([`refusal`]), the
//! ids a write names ([`event_id`], [`room_id`], [`room_or_alias_id`], [`user_id`]),
//! the relation each part of a message carries ([`part_relation`]), and the rule
//! "never plaintext into an encrypted room" ([`encryption_rule`]) with what it means
//! for a reaction ([`reaction_allowed`]) and a redaction's reason
//! ([`redaction_reason_allowed`]).
//!
//! `mc_server::write` re-exports these and maps matrix-sdk's types to the small enums
//! here ([`RoomEncryptionState`], [`Errcode`]) before it asks them.

use mc_model::{AgentWrite, DropReason, EventId, UserId};
use ruma::{OwnedEventId, OwnedRoomId, OwnedRoomOrAliasId, OwnedUserId};

/// A tool failure that is not a schema error (the contract is `mc_server::mcp`'s):
/// the `kind` a result's `structuredContent.error.kind` carries, and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolError {
    /// `invalid_params`: a malformed id, an empty text, a limit out of range.
    Invalid(String),
    /// `not_joined`: the identity is not joined to the room.
    NotJoined(String),
    /// `not_found`: the homeserver does not know the event or room.
    NotFound(String),
    /// `forbidden`: the homeserver refused, or the model did (see [`refusal`]).
    Forbidden(String),
    /// `too_large`.
    TooLarge(String),
    /// `upstream`: the homeserver failed or could not be reached.
    Upstream(String),
    /// `encryption_unknown`: whether the room is encrypted could not be learnt (the
    /// homeserver did not answer for its `m.room.encryption` state), so nothing was
    /// sent (see [`encryption_rule`]).
    EncryptionUnknown(String),
    /// `would_send_plaintext`: the room is or was encrypted and this send would go
    /// out in the clear, so nothing was sent (see [`encryption_rule`]).
    WouldSendPlaintext(String),
    /// `rate_limited`: over a rate limit of this server (`crate::rate_limit`) or of
    /// the homeserver (`429 M_LIMIT_EXCEEDED`, [`homeserver_error`]); nothing was
    /// done, and the same call is served after `retry_after_ms` milliseconds.
    RateLimited {
        message: String,
        /// How long to wait before calling again, in milliseconds (at least 1).
        retry_after_ms: u64,
    },
}

impl ToolError {
    /// The contract's `kind` string.
    pub fn kind(&self) -> &'static str {
        match self {
            ToolError::Invalid(_) => "invalid_params",
            ToolError::NotJoined(_) => "not_joined",
            ToolError::NotFound(_) => "not_found",
            ToolError::Forbidden(_) => "forbidden",
            ToolError::TooLarge(_) => "too_large",
            ToolError::Upstream(_) => "upstream",
            ToolError::EncryptionUnknown(_) => "encryption_unknown",
            ToolError::WouldSendPlaintext(_) => "would_send_plaintext",
            ToolError::RateLimited { .. } => "rate_limited",
        }
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        match self {
            ToolError::Invalid(m)
            | ToolError::NotJoined(m)
            | ToolError::NotFound(m)
            | ToolError::Forbidden(m)
            | ToolError::TooLarge(m)
            | ToolError::Upstream(m)
            | ToolError::EncryptionUnknown(m)
            | ToolError::WouldSendPlaintext(m)
            | ToolError::RateLimited { message: m, .. } => m,
        }
    }

    /// `rate_limited`'s wait before a retry, in milliseconds; `None` for every other
    /// kind.
    pub fn retry_after_ms(&self) -> Option<u64> {
        match self {
            ToolError::RateLimited { retry_after_ms, .. } => Some(*retry_after_ms),
            _ => None,
        }
    }
}

impl std::fmt::Display for ToolError {
    /// `kind: message`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind(), self.message())
    }
}

/// `upstream` with `e` as the message.
pub fn upstream(e: impl std::fmt::Display) -> ToolError {
    ToolError::Upstream(e.to_string())
}

/// A homeserver error's `errcode`, as far as the contract's kinds tell them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Errcode {
    /// `M_NOT_FOUND`.
    NotFound,
    /// `M_FORBIDDEN`.
    Forbidden,
    /// `M_TOO_LARGE`.
    TooLarge,
    /// `M_LIMIT_EXCEEDED`, with the wait the homeserver asked for (its
    /// `Retry-After` header or else `retry_after_ms`), in milliseconds.
    LimitExceeded { retry_after_ms: Option<u64> },
    /// Any other `errcode`, or none.
    Other,
}

/// A homeserver error in the contract's kinds, by `errcode` or else by HTTP `status`
/// (Synapse answers a join of an unknown room `404 M_UNKNOWN`): what is not found,
/// forbidden or too large is not a failure of the homeserver (when the two name
/// different kinds, the first of these three wins); a rate limit
/// (`M_LIMIT_EXCEEDED` or 429; Client-Server API, "Rate limiting") is
/// `rate_limited` with the homeserver's wait, or
/// [`crate::rate_limit::HOMESERVER_DEFAULT_RETRY_AFTER_MS`] when it gave none;
/// anything else is `upstream`.
///
/// matrix-sdk retries a 429 itself (waiting what the homeserver asked, up to 15
/// minutes in all, unless the request's `RequestConfig` limits retries), so one
/// that reaches a tool is a limit that did not lift.
pub fn homeserver_error(errcode: Errcode, status: u16, message: String) -> ToolError {
    match (errcode, status) {
        (Errcode::NotFound, _) | (_, 404) => ToolError::NotFound(message),
        (Errcode::Forbidden, _) | (_, 403) => ToolError::Forbidden(message),
        (Errcode::TooLarge, _) | (_, 413) => ToolError::TooLarge(message),
        (Errcode::LimitExceeded { retry_after_ms }, _) => {
            homeserver_limited(retry_after_ms, message)
        }
        (_, 429) => homeserver_limited(None, message),
        _ => ToolError::Upstream(message),
    }
}

/// `rate_limited` for the homeserver's limit: its wait (at least 1 ms) in
/// `retry_after_ms` and in the message.
fn homeserver_limited(retry_after_ms: Option<u64>, message: String) -> ToolError {
    let retry_after_ms = retry_after_ms
        .unwrap_or(crate::rate_limit::HOMESERVER_DEFAULT_RETRY_AFTER_MS)
        .max(1);
    ToolError::RateLimited {
        message: format!(
            "the homeserver's rate limit: {message}; nothing was done, retry in \
             {retry_after_ms} ms (retry_after_ms)"
        ),
        retry_after_ms,
    }
}

/// What the tool answers when the model refused the write (`reason` is the
/// `WriteRefused` effect's): always `forbidden`, with the rule in words.
pub fn refusal(reason: &DropReason, write: &AgentWrite, user_id: &str) -> ToolError {
    let target = write
        .targets()
        .first()
        .map_or_else(String::new, |t| t.to_string());
    ToolError::Forbidden(match reason {
        DropReason::PromptTarget => format!(
            "{target} is a permission prompt: it is the server's, and only approvers answer it"
        ),
        DropReason::NotOwnMessage => format!(
            "{target} is not a message of {user_id}: only the identity's own messages can be \
             edited"
        ),
        DropReason::NamesOpenRequest { request_id } => format!(
            "the text names the open permission request {request_id}: the agent may not write a \
             pending request's id (only the server's prompt shows it)"
        ),
        DropReason::LeavesPromptRoom => {
            "a permission prompt waits in this room: leaving it would leave the prompt \
             unanswerable"
                .to_string()
        }
        DropReason::PromptRoomState => {
            "this is a permission prompt room (the operator's permission room, or a prompt \
             waits in it): its name and topic frame what approvers read there, and only the \
             operator changes them"
                .to_string()
        }
        other => format!("the server refused the write: {other:?}"),
    })
}

/// The event id a write names; malformed: `invalid_params`.
pub fn event_id(id: &EventId) -> Result<OwnedEventId, ToolError> {
    OwnedEventId::try_from(id.as_str())
        .map_err(|e| ToolError::Invalid(format!("event_id {id:?}: {e}")))
}

/// The room id a tool names; malformed: `invalid_params`.
pub fn room_id(room: &str) -> Result<OwnedRoomId, ToolError> {
    OwnedRoomId::try_from(room).map_err(|e| ToolError::Invalid(format!("room_id {room:?}: {e}")))
}

/// The room id or alias a join names; malformed: `invalid_params`.
pub fn room_or_alias_id(room: &str) -> Result<OwnedRoomOrAliasId, ToolError> {
    OwnedRoomOrAliasId::try_from(room)
        .map_err(|e| ToolError::Invalid(format!("room {room:?}: {e}")))
}

/// The user id a write names; malformed: `invalid_params`.
pub fn user_id(user: &UserId) -> Result<OwnedUserId, ToolError> {
    OwnedUserId::try_from(user.as_str())
        .map_err(|e| ToolError::Invalid(format!("user_id {user:?}: {e}")))
}

/// The relation one part of a message carries (`m.relates_to`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartRelation<T> {
    /// None: a message outside any thread that replies to nothing, or a later part
    /// of a reply.
    None,
    /// A rich reply to `to` (`m.in_reply_to`), outside any thread.
    Reply { to: T },
    /// In the thread of `root` (`m.thread`): a reply to `reply_to` within it, or
    /// with `None` a plain thread message (its `m.in_reply_to` the root, as the
    /// thread's fallback).
    Thread { root: T, reply_to: Option<T> },
}

impl<T> PartRelation<T> {
    /// The event this part replies to: the one whose sender `m.mentions` names.
    pub fn replies_to(&self) -> Option<&T> {
        match self {
            PartRelation::Reply { to } => Some(to),
            PartRelation::Thread { reply_to, .. } => reply_to.as_ref(),
            PartRelation::None => None,
        }
    }
}

/// The relation of one part of a message: only the `first` part replies to
/// `reply_to` (within the thread when there is one); every part is in the thread of
/// `thread_root`.
pub fn part_relation<T>(
    reply_to: Option<T>,
    thread_root: Option<T>,
    first: bool,
) -> PartRelation<T> {
    let reply_to = reply_to.filter(|_| first);
    match (reply_to, thread_root) {
        (reply_to, Some(root)) => PartRelation::Thread { root, reply_to },
        (Some(to), None) => PartRelation::Reply { to },
        (None, None) => PartRelation::None,
    }
}

/// What matrix-sdk knows of a room's encryption (`Room::latest_encryption_state()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoomEncryptionState {
    /// Encrypted: `Room::send` Megolm-encrypts an `m.room.message`.
    Encrypted,
    /// Not encrypted: `Room::send` sends in the clear.
    NotEncrypted,
    /// Unknown, even after asking the homeserver.
    Unknown,
}

/// What a room's encryption allows a send to be, as [`encryption_rule`] found it
/// right before the send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoomEncryption {
    /// The room is encrypted: matrix-sdk's `Room::send` Megolm-encrypts what it
    /// sends (`m.room.encrypted`), except `m.reaction`, which it always sends in the
    /// clear (matrix-sdk 0.18 `SendRawMessageLikeEvent`: "Reactions are currently
    /// famously not encrypted").
    Encrypted,
    /// The room is not encrypted and never was (no `m.room.encryption` in the store):
    /// sends go out in the clear, as everyone else's in the room do.
    Plain,
}

/// The rule "never plaintext into an encrypted room", from what matrix-sdk knows:
/// `state` is from `Room::latest_encryption_state()` (which asks the homeserver for
/// the room's `m.room.encryption` state when the store does not know it), and
/// `ever_encrypted` whether the state store holds an `m.room.encryption` event of
/// the room (redacted or not: matrix-sdk ignores a redacted or unreadable one for
/// `state`, and a refetch after a state reset that lost it on the homeserver sets
/// `state` to not encrypted while the stored event stays).
///
/// Errors: `would_send_plaintext` when the room was encrypted but matrix-sdk now
/// takes it as not encrypted (its `Room::send` would send in the clear);
/// `encryption_unknown` when the state is still unknown.
pub fn encryption_rule(
    state: RoomEncryptionState,
    ever_encrypted: bool,
) -> Result<RoomEncryption, ToolError> {
    match state {
        RoomEncryptionState::Encrypted => Ok(RoomEncryption::Encrypted),
        RoomEncryptionState::Unknown => Err(ToolError::EncryptionUnknown(
            "the room's encryption state (m.room.encryption) is unknown, even after asking \
             the homeserver: nothing was sent"
                .into(),
        )),
        RoomEncryptionState::NotEncrypted if ever_encrypted => Err(ToolError::WouldSendPlaintext(
            "the room was encrypted (its m.room.encryption event is in the store) but \
                 matrix-sdk now takes it as not encrypted (a state reset?): it would send in \
                 the clear, so nothing was sent"
                .into(),
        )),
        RoomEncryptionState::NotEncrypted => Ok(RoomEncryption::Plain),
    }
}

/// The refusal of a send that would carry `what` in the clear into an encrypted
/// room: `would_send_plaintext`, naming why it cannot be encrypted.
pub fn plaintext_refused(what: &str, why: &str) -> ToolError {
    ToolError::WouldSendPlaintext(format!(
        "the room is encrypted and {what} would be sent in the clear ({why}): nothing was sent"
    ))
}

/// Whether a reaction may be sent into a room of `encryption`: only a plain one,
/// since matrix-sdk 0.18 sends every `m.reaction` in the clear and its key is any
/// text the agent chose.
pub fn reaction_allowed(encryption: RoomEncryption) -> Result<(), ToolError> {
    match encryption {
        RoomEncryption::Encrypted => Err(plaintext_refused(
            "the reaction's key",
            "matrix-sdk 0.18 never encrypts m.reaction; reply with send_message instead",
        )),
        RoomEncryption::Plain => Ok(()),
    }
}

/// Whether a redaction with a `reason` may be sent into a room of `encryption`: only
/// a plain one, since an `m.room.redaction` is never encrypted (the homeserver must
/// read it) and the reason is free text. A redaction without a reason carries only
/// its target's id, which is in the clear anyway, and is not asked about.
pub fn redaction_reason_allowed(encryption: RoomEncryption) -> Result<(), ToolError> {
    match encryption {
        RoomEncryption::Encrypted => Err(plaintext_refused(
            "the redaction's reason",
            "a redaction is never encrypted: the homeserver must read it; redact without a \
             reason",
        )),
        RoomEncryption::Plain => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_model::RoomId;

    #[test]
    fn every_tool_error_has_its_contract_kind_and_displays_as_kind_and_message() {
        let m = || "why".to_owned();
        for (error, kind) in [
            (ToolError::Invalid(m()), "invalid_params"),
            (ToolError::NotJoined(m()), "not_joined"),
            (ToolError::NotFound(m()), "not_found"),
            (ToolError::Forbidden(m()), "forbidden"),
            (ToolError::TooLarge(m()), "too_large"),
            (ToolError::Upstream(m()), "upstream"),
            (ToolError::EncryptionUnknown(m()), "encryption_unknown"),
            (ToolError::WouldSendPlaintext(m()), "would_send_plaintext"),
            (
                ToolError::RateLimited {
                    message: m(),
                    retry_after_ms: 7,
                },
                "rate_limited",
            ),
        ] {
            assert_eq!(error.kind(), kind);
            assert_eq!(error.message(), "why");
            assert_eq!(error.to_string(), format!("{kind}: why"));
            let wait = (kind == "rate_limited").then_some(7);
            assert_eq!(error.retry_after_ms(), wait, "{kind}");
        }
        assert_eq!(upstream(7), ToolError::Upstream("7".to_owned()));
    }

    #[test]
    fn a_homeserver_error_is_kind_by_errcode_and_else_by_status() {
        use Errcode::{Forbidden, NotFound, Other, TooLarge};
        for (errcode, status, kind) in [
            (NotFound, 500, "not_found"),
            (Other, 404, "not_found"),
            (Forbidden, 500, "forbidden"),
            (Other, 403, "forbidden"),
            (TooLarge, 500, "too_large"),
            (Other, 413, "too_large"),
            (Other, 500, "upstream"),
            (Other, 400, "upstream"),
            // Errcode and status of two kinds: the first in the order not found,
            // forbidden, too large.
            (NotFound, 403, "not_found"),
            (TooLarge, 404, "not_found"),
            (Forbidden, 413, "forbidden"),
            (TooLarge, 403, "forbidden"),
        ] {
            let error = homeserver_error(errcode, status, "said".to_owned());
            assert_eq!(error.kind(), kind, "{errcode:?} {status}");
            assert_eq!(error.message(), "said");
        }
    }

    #[test]
    fn a_homeserver_rate_limit_is_rate_limited_with_its_wait_or_else_one_second() {
        let limited = |retry_after_ms| Errcode::LimitExceeded { retry_after_ms };
        for (errcode, status, wait) in [
            (limited(Some(2_500)), 429, 2_500),
            // The errcode decides, whatever the status.
            (limited(Some(2_500)), 400, 2_500),
            (limited(None), 429, 1_000),
            (limited(Some(0)), 429, 1),
            // A bare 429 (a proxy's, say).
            (Errcode::Other, 429, 1_000),
        ] {
            let error = homeserver_error(errcode, status, "slow down".to_owned());
            assert_eq!(error.kind(), "rate_limited", "{errcode:?} {status}");
            assert_eq!(error.retry_after_ms(), Some(wait), "{errcode:?} {status}");
            assert_eq!(
                error.message(),
                format!(
                    "the homeserver's rate limit: slow down; nothing was done, retry in {wait} \
                     ms (retry_after_ms)"
                )
            );
        }
        // What is not found, forbidden or too large says so first.
        assert_eq!(
            homeserver_error(limited(Some(5)), 404, String::new()).kind(),
            "not_found"
        );
        assert_eq!(
            homeserver_error(Errcode::NotFound, 429, String::new()).kind(),
            "not_found"
        );
    }

    #[test]
    fn every_refusal_is_forbidden_and_names_its_rule() {
        let write = AgentWrite::Reaction {
            room: RoomId("!r:hs".into()),
            relates_to: EventId("$p".into()),
            key: "x".into(),
        };
        let id = mc_model::RequestId::parse("abcde").unwrap();
        for (reason, says) in [
            (DropReason::PromptTarget, "$p is a permission prompt"),
            (DropReason::NotOwnMessage, "$p is not a message of @bot:hs"),
            (
                DropReason::NamesOpenRequest { request_id: id },
                "names the open permission request abcde",
            ),
            (DropReason::LeavesPromptRoom, "a permission prompt waits"),
            (DropReason::PromptRoomState, "is a permission prompt room"),
            (
                DropReason::Duplicate,
                "the server refused the write: Duplicate",
            ),
        ] {
            let error = refusal(&reason, &write, "@bot:hs");
            assert_eq!(error.kind(), "forbidden");
            assert!(error.message().contains(says), "{error}");
        }
        let join = AgentWrite::Join {
            room: "!r:hs".into(),
        };
        assert_eq!(
            refusal(&DropReason::PromptTarget, &join, "@bot:hs").message(),
            " is a permission prompt: it is the server's, and only approvers answer it"
        );
    }

    #[test]
    fn the_ids_a_write_names_are_parsed_and_a_malformed_one_is_invalid_params() {
        assert_eq!(
            event_id(&EventId("$e:hs".into())).unwrap().as_str(),
            "$e:hs"
        );
        assert_eq!(room_id("!r:hs").unwrap().as_str(), "!r:hs");
        assert_eq!(room_or_alias_id("#a:hs").unwrap().as_str(), "#a:hs");
        assert_eq!(room_or_alias_id("!r:hs").unwrap().as_str(), "!r:hs");
        assert_eq!(user_id(&UserId("@u:hs".into())).unwrap().as_str(), "@u:hs");
        for (error, starts) in [
            (
                event_id(&EventId("e".into())).err(),
                "event_id EventId(\"e\"): ",
            ),
            (room_id("#a:hs").err(), "room_id \"#a:hs\": "),
            (room_or_alias_id("r").err(), "room \"r\": "),
            (
                user_id(&UserId("u".into())).err(),
                "user_id UserId(\"u\"): ",
            ),
        ] {
            let error = error.expect("malformed");
            assert_eq!(error.kind(), "invalid_params");
            assert!(error.message().starts_with(starts), "{error}");
        }
    }

    #[test]
    fn only_the_first_part_replies_and_every_part_is_in_the_thread() {
        use PartRelation::{Reply, Thread};
        assert_eq!(
            part_relation(Some("t"), Some("r"), true),
            Thread {
                root: "r",
                reply_to: Some("t")
            }
        );
        assert_eq!(
            part_relation(Some("t"), Some("r"), false),
            Thread {
                root: "r",
                reply_to: None
            }
        );
        assert_eq!(
            part_relation(None, Some("r"), true),
            Thread {
                root: "r",
                reply_to: None
            }
        );
        assert_eq!(part_relation(Some("t"), None, true), Reply { to: "t" });
        assert_eq!(part_relation(Some("t"), None, false), PartRelation::None);
        assert_eq!(part_relation::<&str>(None, None, true), PartRelation::None);
    }

    #[test]
    fn a_part_replies_to_its_reply_target_and_a_plain_thread_part_to_nothing() {
        assert_eq!(PartRelation::Reply { to: "t" }.replies_to(), Some(&"t"));
        let thread = |reply_to| PartRelation::Thread {
            root: "r",
            reply_to,
        };
        assert_eq!(thread(Some("t")).replies_to(), Some(&"t"));
        assert_eq!(thread(None).replies_to(), None);
        assert_eq!(PartRelation::<&str>::None.replies_to(), None);
    }

    #[test]
    fn a_room_that_is_or_was_encrypted_or_is_unknown_never_takes_plaintext() {
        use RoomEncryption::{Encrypted, Plain};
        use RoomEncryptionState as State;
        let rule = |state, ever| encryption_rule(state, ever).map_err(|e| e.kind());
        assert_eq!(rule(State::Encrypted, true), Ok(Encrypted));
        // matrix-sdk's state wins when it says encrypted (the event may not be stored
        // yet when the state came from the homeserver's answer).
        assert_eq!(rule(State::Encrypted, false), Ok(Encrypted));
        assert_eq!(rule(State::NotEncrypted, false), Ok(Plain));
        // A state reset: the homeserver lost m.room.encryption, the store has it.
        assert_eq!(rule(State::NotEncrypted, true), Err("would_send_plaintext"));
        for ever in [false, true] {
            assert_eq!(rule(State::Unknown, ever), Err("encryption_unknown"));
        }
        let refused = plaintext_refused("the reaction's key", "why");
        assert_eq!(refused.kind(), "would_send_plaintext");
        assert!(refused
            .message()
            .contains("the reaction's key would be sent in the clear (why)"));
    }

    #[test]
    fn a_reaction_or_a_redaction_reason_goes_only_into_a_plain_room() {
        assert_eq!(reaction_allowed(RoomEncryption::Plain), Ok(()));
        assert_eq!(redaction_reason_allowed(RoomEncryption::Plain), Ok(()));
        let reaction = reaction_allowed(RoomEncryption::Encrypted).unwrap_err();
        assert_eq!(reaction.kind(), "would_send_plaintext");
        assert!(
            reaction
                .message()
                .contains("the reaction's key would be sent in the clear (matrix-sdk 0.18"),
            "{reaction}"
        );
        let redaction = redaction_reason_allowed(RoomEncryption::Encrypted).unwrap_err();
        assert_eq!(redaction.kind(), "would_send_plaintext");
        assert!(
            redaction
                .message()
                .contains("the redaction's reason would be sent in the clear (a redaction"),
            "{redaction}"
        );
    }
}
