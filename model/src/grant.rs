//! Grants: an approver's "yes, and don't ask again" for one session's tool calls.
//!
//! Claude Code's wire has no "allow for this session": a verdict answers one
//! `request_id` (Claude Code channel contract, permission relay). A grant is ours:
//! the approver answers a prompt with `always abcde` or `yes abcde 30m`, the prompt
//! is allowed, and later requests **of the same session, for the same tool, whose
//! input matches what the approver saw** are answered `allow` by the core without
//! asking (docs/decisions/0027-grants.md).
//!
//! What a request is matched on is its *subject* ([`subject`]): the command, path,
//! URL or pattern the tool acts on, read from `input_preview`; for a tool without
//! one, the whole input. A grant covers that subject exactly, or, when the approver
//! typed a prefix, every subject that starts with it and adds no shell control
//! character and no `..` after it ([`InputScope::covers`]).

use serde::{Deserialize, Serialize};
use std::fmt;

/// The longest a time-boxed grant lasts: 24 hours, in milliseconds. A longer
/// duration typed is cut to this, and the grant's notice says so.
pub const GRANT_MAX_MS: u64 = 24 * 60 * 60 * 1000;

/// The longest prefix an approver may type, in characters.
pub const PREFIX_MAX_CHARS: usize = 200;

/// The longest subject a grant is made on or covers, in characters. Claude Code
/// elides `input_preview` values over 3,500 code points in the middle (Claude Code
/// channel contract, from 2.1.211): two long commands that differ only where they
/// were elided would read the same, so nothing that long is granted unseen.
pub const SUBJECT_MAX_CHARS: usize = 2_000;

/// What Claude Code writes in place of a credential-looking token (from 2.1.234):
/// a subject holding it is never granted, as the approver did not see the token a
/// later call would carry.
pub const REDACTED: &str = "[REDACTED]";

/// The `input_preview` fields that name what a tool acts on, in the order they are
/// looked for: Bash's `command`; Read, Write and Edit's `file_path`;
/// NotebookEdit's `notebook_path`; `path` (Glob, Grep, LS); WebFetch's `url`; Grep
/// and Glob's `pattern`. Source: Claude Code's built-in tools' input schemas as
/// `input_preview` shows them (JSON-shaped text).
pub const SUBJECT_FIELDS: [&str; 6] = [
    "command",
    "file_path",
    "notebook_path",
    "path",
    "url",
    "pattern",
];

/// Characters that, after a grant's prefix, would let a subject do more than the
/// approver saw: a shell's command separators, pipes, substitutions and
/// redirections, and line breaks.
pub const UNSAFE_AFTER_PREFIX: [char; 8] = [';', '&', '|', '`', '$', '<', '>', '\n'];

/// What an approver asked for besides the allow (`always abcde`, `yes abcde 30m`,
/// optionally followed by a prefix).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GrantAsk {
    /// How long the grant lasts.
    pub lasts: Lasts,
    /// The prefix of the subject it covers; `None`: exactly the subject seen.
    pub prefix: Option<String>,
}

/// How long a grant lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "lasts", rename_all = "snake_case")]
pub enum Lasts {
    /// Until the session detaches or the grant is revoked (`always abcde`).
    Session,
    /// This many milliseconds from the answer, at most [`GRANT_MAX_MS`]
    /// (`yes abcde 30m`, `always abcde 2h`), or until the session detaches or the
    /// grant is revoked, whichever comes first.
    For { ms: u64 },
}

impl fmt::Display for Lasts {
    /// `until the session ends`, `for 30 min`, `for 2 h`, `for 90 s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Lasts::Session => f.write_str("until the session ends"),
            Lasts::For { ms } if ms % 3_600_000 == 0 => write!(f, "for {} h", ms / 3_600_000),
            Lasts::For { ms } if ms % 60_000 == 0 => write!(f, "for {} min", ms / 60_000),
            Lasts::For { ms } => write!(f, "for {} s", ms.div_ceil(1000)),
        }
    }
}

/// Which inputs of its tool a grant covers.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "scope", content = "subject", rename_all = "snake_case")]
pub enum InputScope {
    /// Exactly this subject.
    Exact(String),
    /// Subjects that start with this prefix, the rest holding none of
    /// [`UNSAFE_AFTER_PREFIX`] and no `..`.
    Prefix(String),
}

impl InputScope {
    /// Whether a request whose [`subject`] is `subject` is covered. A subject that
    /// [`is_hidden`] is never covered.
    pub fn covers(&self, subject: &str) -> bool {
        if is_hidden(subject) {
            return false;
        }
        match self {
            InputScope::Exact(exact) => subject == exact,
            InputScope::Prefix(prefix) => subject
                .strip_prefix(prefix.as_str())
                .is_some_and(|rest| !rest.contains(UNSAFE_AFTER_PREFIX) && !rest.contains("..")),
        }
    }

    /// The subject or prefix, as shown.
    pub fn text(&self) -> &str {
        match self {
            InputScope::Exact(s) | InputScope::Prefix(s) => s,
        }
    }
}

/// Why a grant was not made (the allow itself stands).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "refused", rename_all = "snake_case")]
pub enum GrantRefused {
    /// The request's `input_preview` is not a JSON object (older Claude Code builds
    /// cut it at 200 UTF-16 units): what the approver saw may not be all the tool
    /// does, so nothing like it is allowed unseen.
    #[error("its input was cut short, so a grant could cover what you did not see")]
    UnreadableInput,
    /// The prefix typed does not begin the subject the approver saw.
    #[error("the prefix does not begin what this request acts on")]
    PrefixNotSeen,
    /// Part of what the request acts on was not shown: a redacted credential, or a
    /// value so long Claude Code elides its middle ([`is_hidden`]).
    #[error("part of what it acts on was hidden from you (redacted or elided)")]
    Hidden,
    /// The identity holds as many grants as it may.
    #[error("there are already {max} grants: revoke one first")]
    TooMany { max: usize },
    /// An allow typed while an approver's deny reaction settles only joins the
    /// votes: a grant needs an undisputed allow.
    #[error("a deny reaction is settling on it")]
    Disputed,
}

/// What a request acts on, read from its `input_preview`: the first string field of
/// [`SUBJECT_FIELDS`] in the JSON object; for a tool without one, the object in
/// compact JSON (so the spaced and the compact forms of different Claude Code
/// builds read the same). `None` when `input_preview` is not a JSON object (cut
/// short or not JSON): such a request is never covered by a grant.
///
/// `input_preview` is display text (the contract says never to parse it for what
/// the tool does); it is read here only to compare it with what an approver saw.
pub fn subject(input_preview: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(input_preview).ok()?;
    let object = value.as_object()?;
    SUBJECT_FIELDS
        .iter()
        .find_map(|field| object.get(*field)?.as_str().map(str::to_owned))
        .or_else(|| Some(value.to_string()))
}

/// Whether part of `subject` was hidden from the approver: it holds [`REDACTED`], or
/// it has more than [`SUBJECT_MAX_CHARS`] characters.
pub fn is_hidden(subject: &str) -> bool {
    subject.contains(REDACTED) || subject.chars().count() > SUBJECT_MAX_CHARS
}

/// The scope of a grant asked for on a request whose `input_preview` the approver
/// saw.
///
/// # Errors
/// [`GrantRefused::UnreadableInput`] when the preview has no [`subject`];
/// [`GrantRefused::Hidden`] when it [`is_hidden`];
/// [`GrantRefused::PrefixNotSeen`] when `prefix` does not begin it.
pub fn scope_for(input_preview: &str, prefix: Option<&str>) -> Result<InputScope, GrantRefused> {
    let seen = subject(input_preview).ok_or(GrantRefused::UnreadableInput)?;
    if is_hidden(&seen) {
        return Err(GrantRefused::Hidden);
    }
    match prefix {
        None => Ok(InputScope::Exact(seen)),
        Some(prefix) if seen.starts_with(prefix) => Ok(InputScope::Prefix(prefix.to_owned())),
        Some(_) => Err(GrantRefused::PrefixNotSeen),
    }
}

/// Reads a duration as typed after the request id: a number and a unit, `s`, `m`
/// (or `min`), `h`; at least one second. `None` for anything else. Longer than
/// [`GRANT_MAX_MS`] is cut to it.
pub fn parse_duration(word: &str) -> Option<u64> {
    let split = word.find(|c: char| !c.is_ascii_digit())?;
    let (digits, unit) = word.split_at(split);
    if digits.is_empty() || digits.len() > 6 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    let unit_ms = match unit.to_ascii_lowercase().as_str() {
        "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        _ => return None,
    };
    (n > 0).then(|| (n * unit_ms).min(GRANT_MAX_MS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subject_is_the_first_named_field_in_either_builds_form() {
        assert_eq!(
            subject(r#"{ "command": "cargo test", "description": "Run the tests" }"#).as_deref(),
            Some("cargo test")
        );
        assert_eq!(
            subject(r#"{"command":"cargo test","description":"other words"}"#).as_deref(),
            Some("cargo test")
        );
        assert_eq!(
            subject(r#"{"file_path":"/src/a.rs","old_string":"x"}"#).as_deref(),
            Some("/src/a.rs")
        );
        assert_eq!(
            subject(r#"{"url":"https://x.example/","prompt":"read"}"#).as_deref(),
            Some("https://x.example/")
        );
        // No named field: the whole object, compact, whatever the spacing.
        assert_eq!(
            subject(r#"{ "todos": [1, 2] }"#),
            subject(r#"{"todos":[1,2]}"#)
        );
        assert_eq!(
            subject(r#"{"todos":[1,2]}"#).as_deref(),
            Some(r#"{"todos":[1,2]}"#)
        );
        // A field that is no string is not a subject.
        assert_eq!(
            subject(r#"{"command":1}"#).as_deref(),
            Some(r#"{"command":1}"#)
        );
    }

    #[test]
    fn a_preview_cut_short_or_not_an_object_has_no_subject() {
        assert_eq!(subject(r#"{"command":"rm -rf /tmp/x && echo"#), None);
        assert_eq!(subject("ls"), None);
        assert_eq!(subject(r#"["ls"]"#), None);
        assert_eq!(subject(""), None);
    }

    #[test]
    fn an_exact_scope_covers_its_subject_only() {
        let scope = InputScope::Exact("cargo test".into());
        assert!(scope.covers("cargo test"));
        assert!(!scope.covers("cargo test "));
        assert!(!scope.covers("cargo tes"));
        assert!(!scope.covers("cargo test -p x"));
    }

    #[test]
    fn a_prefix_scope_covers_what_starts_with_it_and_adds_no_control_character() {
        let scope = InputScope::Prefix("cargo test".into());
        assert!(scope.covers("cargo test"));
        assert!(scope.covers("cargo test -p mc --lib"));
        assert!(!scope.covers("cargo build"));
        assert!(!scope.covers("echo; cargo test"));
        for tail in [
            "; rm -rf ~",
            " && curl x",
            " | sh",
            " `id`",
            " $(id)",
            " > /etc/x",
            " < /etc/shadow",
            "\nrm -rf ~",
        ] {
            assert!(!scope.covers(&format!("cargo test{tail}")), "{tail:?}");
        }
        let path = InputScope::Prefix("/work/proj/".into());
        assert!(path.covers("/work/proj/src/a.rs"));
        assert!(!path.covers("/work/proj/../../etc/passwd"));
        assert!(!path.covers("/work/project-evil/a.rs"));
        // What the prefix itself holds was seen: it does not count against it.
        assert!(InputScope::Prefix("make && ".into()).covers("make && make test"));
    }

    #[test]
    fn a_scope_is_asked_for_on_what_the_approver_saw() {
        let preview = r#"{ "command": "cargo test -p x", "description": "d" }"#;
        assert_eq!(
            scope_for(preview, None),
            Ok(InputScope::Exact("cargo test -p x".into()))
        );
        assert_eq!(
            scope_for(preview, Some("cargo test")),
            Ok(InputScope::Prefix("cargo test".into()))
        );
        assert_eq!(
            scope_for(preview, Some("cargo build")),
            Err(GrantRefused::PrefixNotSeen)
        );
        assert_eq!(
            scope_for(r#"{"command":"cargo te"#, None),
            Err(GrantRefused::UnreadableInput)
        );
    }

    #[test]
    fn what_was_hidden_from_the_approver_is_never_granted_nor_covered() {
        let redacted = r#"{"command":"curl -H 'Authorization: Bearer [REDACTED]' https://x"}"#;
        assert_eq!(scope_for(redacted, None), Err(GrantRefused::Hidden));
        let long = "x".repeat(SUBJECT_MAX_CHARS + 1);
        let preview = serde_json::json!({ "command": long }).to_string();
        assert_eq!(scope_for(&preview, None), Err(GrantRefused::Hidden));
        let longest = "x".repeat(SUBJECT_MAX_CHARS);
        let preview = serde_json::json!({ "command": longest }).to_string();
        assert_eq!(
            scope_for(&preview, None),
            Ok(InputScope::Exact(longest.clone()))
        );
        // A prefix grant never covers a longer or redacted subject either.
        let scope = InputScope::Prefix("x".into());
        assert!(scope.covers(&longest));
        assert!(!scope.covers(&long));
        assert!(!InputScope::Prefix("curl ".into()).covers("curl -u [REDACTED] https://x"));
        assert!(!InputScope::Exact(long.clone()).covers(&long));
    }

    #[test]
    fn durations_read_seconds_minutes_and_hours_up_to_a_day() {
        assert_eq!(parse_duration("30m"), Some(30 * 60_000));
        assert_eq!(parse_duration("30min"), Some(30 * 60_000));
        assert_eq!(parse_duration("2H"), Some(2 * 3_600_000));
        assert_eq!(parse_duration("90s"), Some(90_000));
        assert_eq!(parse_duration("48h"), Some(GRANT_MAX_MS));
        assert_eq!(parse_duration("999999h"), Some(GRANT_MAX_MS));
        for bad in [
            "0m", "m", "30", "30d", "-5m", "1.5h", "30 m", "", "1234567m", "٣m",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_duration_displays_in_its_largest_whole_unit() {
        assert_eq!(Lasts::Session.to_string(), "until the session ends");
        assert_eq!(Lasts::For { ms: 7_200_000 }.to_string(), "for 2 h");
        assert_eq!(Lasts::For { ms: 1_800_000 }.to_string(), "for 30 min");
        assert_eq!(Lasts::For { ms: 90_000 }.to_string(), "for 90 s");
    }
}
