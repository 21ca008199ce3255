//! An audit entry as `matrix-channel audit` prints it: one line in words
//! ([`line`]: `TIME  IDENTITY  WHAT`), or one JSON object a line ([`json_line`]).
//! A line never breaks: control, bidi and zero-width characters are written as
//! `\u{…}` escapes, and a subject or an error is clipped to [`SHOWN_CHARS`]
//! characters with `…` (the prompt's text is in the JSON only).

use super::chain::Sealed;
use super::time::rfc3339;
use super::{AuditEvent, Via};
use mc_model::fallback::clip_chars;
use mc_model::grant::subject;

/// At most this many characters of a subject or an error are shown in a line (the
/// entry keeps all of it).
pub const SHOWN_CHARS: usize = 120;

/// `2026-12-06T18:10:02Z  work  verdict allow for abcde (Bash `ls`) by @ann:hs via
/// reaction 👍`. An entry this version cannot read shows its kind and body as stored.
pub fn line(entry: &Sealed) -> String {
    let what = match entry.event() {
        Some(event) => describe(&event),
        None => format!("{} {}", entry.kind, entry.body),
    };
    let time = rfc3339(u64::try_from(entry.now).unwrap_or(0));
    escaped(&format!("{time}  {}  {what}", entry.identity))
}

/// `{"seq": n, "time": "…Z", "now": ms, "identity", "kind", "body": {…}, "hash"}`:
/// the body as the JSON object it is (as a string when it is no JSON).
pub fn json_line(entry: &Sealed) -> String {
    let body = serde_json::from_str::<serde_json::Value>(&entry.body)
        .unwrap_or_else(|_| entry.body.clone().into());
    serde_json::json!({
        "seq": entry.seq,
        "time": rfc3339(u64::try_from(entry.now).unwrap_or(0)),
        "now": entry.now,
        "identity": entry.identity,
        "kind": entry.kind,
        "body": body,
        "hash": entry.hash,
    })
    .to_string()
}

/// What happened, in words.
pub fn describe(event: &AuditEvent) -> String {
    match event {
        AuditEvent::PermissionRequest {
            session,
            request_id,
            tool,
            description: _,
            input_preview,
        } => format!(
            "permission request {request_id} from session {session}: {}",
            tool_on(tool, subject(tool, input_preview).as_deref())
        ),
        AuditEvent::RequestInvalid { session, error } => format!(
            "unreadable permission request from session {session}: {}",
            clipped(error)
        ),
        AuditEvent::RequestDropped {
            session,
            request_id,
            reason,
        } => {
            let why = match reason.as_str() {
                "unknown_session" => "the session is not attached",
                "no_approvers" => "the identity has no approvers",
                "no_prompt_room" => "no room to post its prompt in",
                "unknown_identity" => "no such identity",
                other => other,
            };
            format!("permission request {request_id} from session {session} not relayed: {why}")
        }
        AuditEvent::PromptPosted {
            request_id,
            session,
            room,
            post,
            text: _,
            reissued,
        } => format!(
            "prompt for {request_id}{} posted to {room} (post {post}{})",
            of_session(session.as_deref()),
            if *reissued {
                ", again after a restart"
            } else {
                ""
            },
        ),
        AuditEvent::PromptMessage {
            post,
            event_id,
            request_id: Some(request_id),
            session,
        } => format!(
            "prompt for {request_id}{} is message {event_id} (post {post})",
            of_session(session.as_deref())
        ),
        AuditEvent::PromptMessage {
            post,
            event_id,
            request_id: None,
            session: _,
        } => format!("prompt of post {post}, ended before it was posted, is message {event_id}"),
        AuditEvent::PromptEnded {
            reason,
            prompt,
            post,
        } => {
            let which = match (prompt, post) {
                (Some(message), _) => format!("prompt {message}"),
                (None, Some(post)) => format!("prompt of post {post}"),
                (None, None) => "a prompt being posted".to_owned(),
            };
            let why = match reason.as_str() {
                "expired" => "expired unanswered",
                "evicted" => "evicted unanswered at max_prompts",
                "superseded" => "replaced by a new request of its session with the same id",
                "post_failed" => "could not be posted",
                other => other,
            };
            format!("{which} {why}")
        }
        AuditEvent::Verdict {
            session: _,
            request_id,
            behavior,
            by,
            via,
            tool,
            subject,
        } => {
            let what = match tool {
                Some(tool) => format!(" ({})", tool_on(tool, subject.as_deref())),
                None => String::new(),
            };
            let via = match via {
                Via::Text { event_id } => format!("message {event_id}"),
                Via::Reaction { event_id: _, key } => format!("reaction {key}"),
                Via::Grant { grant } => format!("grant {grant}"),
                Via::Policy { rule } => format!("rule {rule} of the policy"),
            };
            format!("verdict {behavior} for {request_id}{what} by {by} via {via}")
        }
        AuditEvent::VerdictRefused {
            event_id,
            sender,
            reason,
        } => {
            let why = match reason.as_str() {
                "not_approver" => "not an approver",
                "not_cross_signed" => "sent from a device its sender did not cross-sign",
                "clear_verdict" => "sent unencrypted where verdicts must be encrypted",
                "unknown_request" => "no open prompt with that id in that room",
                "ambiguous_request" => "its id is open in several sessions and it replies to none",
                "reply_not_to_prompt" => "a reply to something other than its prompt",
                "already_answered" => "the prompt was already answered",
                other => other,
            };
            format!(
                "verdict {} from {} refused: {why}",
                event_id.as_deref().unwrap_or("(no event)"),
                sender.as_deref().unwrap_or("(unknown sender)")
            )
        }
        AuditEvent::VerdictSent {
            session,
            request_id,
            behavior,
            send: _,
        } => format!("verdict {behavior} for {request_id} sent to session {session}"),
        AuditEvent::Granted {
            grant,
            session,
            tool,
            scope,
            subject,
            lasts,
            expires_at,
            by,
            room: _,
            message: _,
        } => {
            let on = match scope.as_str() {
                "prefix" => "starting with",
                _ => "exactly",
            };
            format!(
                "grant {grant} made by {by}: {tool} calls on {on} `{}` of session {session}, \
                 {lasts} (at most until {})",
                clipped(subject),
                rfc3339(*expires_at)
            )
        }
        AuditEvent::GrantEnded { grant, why, by } => {
            let why = match (why.as_str(), by) {
                ("expired", _) => "its time ran out".to_owned(),
                ("session_ended", _) => "its session disconnected".to_owned(),
                ("revoked", Some(by)) => format!("revoked by {by}"),
                ("operator", _) => "revoked by the operator".to_owned(),
                (other, _) => other.to_owned(),
            };
            format!("grant {grant} ended: {why}")
        }
        AuditEvent::Revoked { grant: Some(grant) } => {
            format!("the operator revokes grant {grant}")
        }
        AuditEvent::Revoked { grant: None } => "the operator revokes every grant".to_owned(),
        AuditEvent::Bound {
            label,
            room: Some(room),
        } => format!("label {label} bound to {room}"),
        AuditEvent::Bound { label, room: None } => format!("label {label} unbound"),
    }
}

/// `Bash `ls``, or the tool alone when no subject was read.
fn tool_on(tool: &str, subject: Option<&str>) -> String {
    match subject {
        Some(subject) => format!("{tool} `{}`", clipped(subject)),
        None => tool.to_owned(),
    }
}

fn of_session(session: Option<&str>) -> String {
    session
        .map(|s| format!(" of session {s}"))
        .unwrap_or_default()
}

/// `text` cut to [`SHOWN_CHARS`] characters, `…` when it was cut.
fn clipped(text: &str) -> String {
    match clip_chars(text, SHOWN_CHARS) {
        (shown, true) => format!("{shown}…"),
        (whole, false) => whole.to_owned(),
    }
}

/// `text` with every control, bidi and zero-width character as a `\u{…}` escape.
fn escaped(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            c if c.is_control() => c.escape_unicode().to_string(),
            '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' => {
                c.escape_unicode().to_string()
            }
            '\u{FEFF}' => c.escape_unicode().to_string(),
            c => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::chain::{seal, GENESIS};
    use crate::audit::AuditEntry;
    use mc_model::{IdentityId, Timestamp};

    /// 2026-12-06T18:10:02Z.
    const NOW: u64 = 1_796_580_602_000;

    fn sealed(event: AuditEvent) -> Sealed {
        let entry = AuditEntry {
            now: Timestamp(NOW),
            identity: IdentityId("work".into()),
            event,
        };
        seal(1, GENESIS, &entry)
    }

    fn verdict(via: Via, tool: Option<&str>, subject: Option<&str>) -> AuditEvent {
        AuditEvent::Verdict {
            session: "s1".into(),
            request_id: "abcde".into(),
            behavior: "allow".into(),
            by: "@ann:hs".into(),
            via,
            tool: tool.map(Into::into),
            subject: subject.map(Into::into),
        }
    }

    #[test]
    fn a_line_is_the_time_the_identity_and_what_happened() {
        let reaction = Via::Reaction {
            event_id: "$r".into(),
            key: "👍".into(),
        };
        assert_eq!(
            line(&sealed(verdict(reaction, Some("Bash"), Some("ls")))),
            "2026-12-06T18:10:02Z  work  verdict allow for abcde (Bash `ls`) by @ann:hs via \
             reaction 👍"
        );
        let unknown = Sealed {
            kind: "policy_applied".into(),
            body: "{\"rule\":3}".into(),
            now: -5,
            ..sealed(AuditEvent::Revoked { grant: None })
        };
        assert_eq!(
            line(&unknown),
            "1970-01-01T00:00:00Z  work  policy_applied {\"rule\":3}",
            "an entry of a newer version shows as stored"
        );
    }

    #[test]
    fn a_json_line_holds_the_entry_with_its_body_as_an_object() {
        let entry = sealed(AuditEvent::Revoked { grant: Some(3) });
        let value: serde_json::Value = serde_json::from_str(&json_line(&entry)).unwrap();
        assert_eq!(
            value,
            serde_json::json!({
                "seq": 1,
                "time": "2026-12-06T18:10:02Z",
                "now": NOW,
                "identity": "work",
                "kind": "revoked",
                "body": {"grant": 3},
                "hash": entry.hash,
            })
        );
        let changed = Sealed {
            body: "not json".into(),
            now: -1,
            ..entry
        };
        let value: serde_json::Value = serde_json::from_str(&json_line(&changed)).unwrap();
        assert_eq!(value["body"], "not json");
        assert_eq!(value["time"], "1970-01-01T00:00:00Z");
    }

    #[test]
    fn every_kind_of_entry_reads_as_what_happened() {
        let cases = [
            (
                AuditEvent::PermissionRequest {
                    session: "s1".into(),
                    request_id: "abcde".into(),
                    tool: "Bash".into(),
                    description: "List".into(),
                    input_preview: "{\"command\":\"ls -l\"}".into(),
                },
                "permission request abcde from session s1: Bash `ls -l`",
            ),
            (
                AuditEvent::PermissionRequest {
                    session: "s1".into(),
                    request_id: "abcde".into(),
                    tool: "Bash".into(),
                    description: "List".into(),
                    input_preview: "{\"command\":\"ls".into(),
                },
                "permission request abcde from session s1: Bash",
            ),
            (
                AuditEvent::RequestInvalid {
                    session: "s1".into(),
                    error: "request_id: bad".into(),
                },
                "unreadable permission request from session s1: request_id: bad",
            ),
            (
                AuditEvent::PromptPosted {
                    request_id: "abcde".into(),
                    session: Some("s1".into()),
                    room: "!r:hs".into(),
                    post: 7,
                    text: "🔐 Permission request abcde".into(),
                    reissued: false,
                },
                "prompt for abcde of session s1 posted to !r:hs (post 7)",
            ),
            (
                AuditEvent::PromptPosted {
                    request_id: "abcde".into(),
                    session: None,
                    room: "!r:hs".into(),
                    post: 7,
                    text: "x".into(),
                    reissued: true,
                },
                "prompt for abcde posted to !r:hs (post 7, again after a restart)",
            ),
            (
                AuditEvent::PromptMessage {
                    post: 7,
                    event_id: "$p".into(),
                    request_id: Some("abcde".into()),
                    session: Some("s1".into()),
                },
                "prompt for abcde of session s1 is message $p (post 7)",
            ),
            (
                AuditEvent::PromptMessage {
                    post: 7,
                    event_id: "$p".into(),
                    request_id: None,
                    session: None,
                },
                "prompt of post 7, ended before it was posted, is message $p",
            ),
            (
                verdict(
                    Via::Text {
                        event_id: "$y".into(),
                    },
                    Some("Read"),
                    None,
                ),
                "verdict allow for abcde (Read) by @ann:hs via message $y",
            ),
            (
                verdict(Via::Grant { grant: 2 }, None, None),
                "verdict allow for abcde by @ann:hs via grant 2",
            ),
            (
                verdict(Via::Policy { rule: 3 }, Some("Bash"), None),
                "verdict allow for abcde (Bash) by @ann:hs via rule 3 of the policy",
            ),
            (
                AuditEvent::VerdictRefused {
                    event_id: Some("$m".into()),
                    sender: Some("@carl:hs".into()),
                    reason: "not_approver".into(),
                },
                "verdict $m from @carl:hs refused: not an approver",
            ),
            (
                AuditEvent::VerdictRefused {
                    event_id: None,
                    sender: None,
                    reason: "a_new_reason".into(),
                },
                "verdict (no event) from (unknown sender) refused: a_new_reason",
            ),
            (
                AuditEvent::VerdictSent {
                    session: "s1".into(),
                    request_id: "abcde".into(),
                    behavior: "deny".into(),
                    send: 9,
                },
                "verdict deny for abcde sent to session s1",
            ),
            (
                AuditEvent::Granted {
                    grant: 1,
                    session: "s1".into(),
                    tool: "Bash".into(),
                    scope: "exact".into(),
                    subject: "cargo test".into(),
                    lasts: "until the session ends".into(),
                    expires_at: NOW,
                    by: "@ann:hs".into(),
                    room: "!r:hs".into(),
                    message: "$a".into(),
                },
                "grant 1 made by @ann:hs: Bash calls on exactly `cargo test` of session s1, \
                 until the session ends (at most until 2026-12-06T18:10:02Z)",
            ),
            (
                AuditEvent::Granted {
                    grant: 2,
                    session: "s1".into(),
                    tool: "Read".into(),
                    scope: "prefix".into(),
                    subject: "/src/".into(),
                    lasts: "for 30 min".into(),
                    expires_at: 0,
                    by: "@ann:hs".into(),
                    room: "!r:hs".into(),
                    message: "$a".into(),
                },
                "grant 2 made by @ann:hs: Read calls on starting with `/src/` of session s1, \
                 for 30 min (at most until 1970-01-01T00:00:00Z)",
            ),
            (
                AuditEvent::Revoked { grant: Some(3) },
                "the operator revokes grant 3",
            ),
            (
                AuditEvent::Revoked { grant: None },
                "the operator revokes every grant",
            ),
            (
                AuditEvent::Bound {
                    label: "api".into(),
                    room: Some("!r:hs".into()),
                },
                "label api bound to !r:hs",
            ),
            (
                AuditEvent::Bound {
                    label: "api".into(),
                    room: None,
                },
                "label api unbound",
            ),
        ];
        for (event, expected) in cases {
            assert_eq!(describe(&event), expected, "{event:?}");
        }
    }

    #[test]
    fn every_reason_reads_in_words() {
        let dropped = |reason: &str| {
            describe(&AuditEvent::RequestDropped {
                session: "s1".into(),
                request_id: "abcde".into(),
                reason: reason.into(),
            })
        };
        assert_eq!(
            dropped("no_approvers"),
            "permission request abcde from session s1 not relayed: the identity has no \
             approvers"
        );
        for (reason, words) in [
            ("unknown_session", "the session is not attached"),
            ("no_prompt_room", "no room to post its prompt in"),
            ("unknown_identity", "no such identity"),
            ("a_new_reason", "a_new_reason"),
        ] {
            assert!(dropped(reason).ends_with(&format!(": {words}")), "{reason}");
        }
        let ended = |reason: &str, prompt: Option<&str>, post: Option<u64>| {
            describe(&AuditEvent::PromptEnded {
                reason: reason.into(),
                prompt: prompt.map(Into::into),
                post,
            })
        };
        assert_eq!(
            ended("expired", Some("$p"), Some(3)),
            "prompt $p expired unanswered"
        );
        assert_eq!(
            ended("evicted", None, None),
            "a prompt being posted evicted unanswered at max_prompts"
        );
        assert_eq!(
            ended("superseded", Some("$p"), None),
            "prompt $p replaced by a new request of its session with the same id"
        );
        assert_eq!(
            ended("post_failed", None, Some(3)),
            "prompt of post 3 could not be posted"
        );
        assert_eq!(ended("new", None, Some(3)), "prompt of post 3 new");
        let refused = |reason: &str| {
            describe(&AuditEvent::VerdictRefused {
                event_id: Some("$m".into()),
                sender: Some("@ann:hs".into()),
                reason: reason.into(),
            })
        };
        for (reason, words) in [
            (
                "not_cross_signed",
                "sent from a device its sender did not cross-sign",
            ),
            (
                "clear_verdict",
                "sent unencrypted where verdicts must be encrypted",
            ),
            (
                "unknown_request",
                "no open prompt with that id in that room",
            ),
            (
                "ambiguous_request",
                "its id is open in several sessions and it replies to none",
            ),
            (
                "reply_not_to_prompt",
                "a reply to something other than its prompt",
            ),
            ("already_answered", "the prompt was already answered"),
        ] {
            assert_eq!(
                refused(reason),
                format!("verdict $m from @ann:hs refused: {words}")
            );
        }
        let ended = |why: &str, by: Option<&str>| {
            describe(&AuditEvent::GrantEnded {
                grant: 4,
                why: why.into(),
                by: by.map(Into::into),
            })
        };
        assert_eq!(ended("expired", None), "grant 4 ended: its time ran out");
        assert_eq!(
            ended("session_ended", None),
            "grant 4 ended: its session disconnected"
        );
        assert_eq!(
            ended("revoked", Some("@ann:hs")),
            "grant 4 ended: revoked by @ann:hs"
        );
        assert_eq!(
            ended("operator", None),
            "grant 4 ended: revoked by the operator"
        );
        assert_eq!(ended("revoked", None), "grant 4 ended: revoked");
    }

    #[test]
    fn a_line_never_breaks_and_a_long_subject_is_clipped() {
        let long = "x".repeat(SHOWN_CHARS + 1);
        let text = describe(&AuditEvent::RequestInvalid {
            session: "s1".into(),
            error: long.clone(),
        });
        assert!(
            text.ends_with(&format!(": {}…", &long[..SHOWN_CHARS])),
            "{text}"
        );
        let whole = "y".repeat(SHOWN_CHARS);
        let text = describe(&AuditEvent::RequestInvalid {
            session: "s1".into(),
            error: whole.clone(),
        });
        assert!(text.ends_with(&format!(": {whole}")), "{text}");
        let hostile = sealed(AuditEvent::RequestInvalid {
            session: "s1".into(),
            error: "a\nb\u{202E}c\u{200B}d\u{2066}e\u{FEFF}f\tg".into(),
        });
        assert!(
            line(&hostile).ends_with("a\\u{a}b\\u{202e}c\\u{200b}d\\u{2066}e\\u{feff}f\\u{9}g"),
            "{}",
            line(&hostile)
        );
        let edges = sealed(AuditEvent::RequestInvalid {
            session: "s1".into(),
            error: "\u{200A}\u{200F}\u{2029}\u{202A}\u{202F}\u{205F}\u{2060}\u{2069}\u{206A}"
                .into(),
        });
        assert!(
            line(&edges).ends_with(
                "\u{200A}\\u{200f}\u{2029}\\u{202a}\u{202F}\u{205F}\\u{2060}\\u{2069}\u{206A}"
            ),
            "{}",
            line(&edges)
        );
    }
}
