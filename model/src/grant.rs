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

/// The `input_preview` field that names what a built-in Claude Code tool acts on:
/// Bash's `command`; Read, Write, Edit and MultiEdit's `file_path`; NotebookEdit's
/// `notebook_path`; WebFetch's `url`. `None` for every other tool (Glob and Grep,
/// whose `pattern` and `path` both matter, and every MCP tool): its subject is its
/// whole input. Source: Claude Code's built-in tools' input schemas as
/// `input_preview` shows them (JSON-shaped text).
pub fn subject_field(tool: &str) -> Option<&'static str> {
    match tool {
        "Bash" => Some("command"),
        "Read" | "Write" | "Edit" | "MultiEdit" => Some("file_path"),
        "NotebookEdit" => Some("notebook_path"),
        "WebFetch" => Some("url"),
        _ => None,
    }
}

/// Characters that, after a grant's prefix, would let a subject do more than the
/// approver saw: a shell's command separators, pipes, substitutions, redirections
/// and escapes, and line breaks. A prefix may not end with one of them, nor with
/// `.` (a `..` would start at its end).
pub const UNSAFE_AFTER_PREFIX: [char; 9] = [';', '&', '|', '`', '$', '<', '>', '\\', '\n'];

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
    /// [`UNSAFE_AFTER_PREFIX`] and no `..`; a prefix ending with one of them or `.`
    /// covers nothing.
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
            // A prefix never ends with `.`, so no `..` straddles its end.
            InputScope::Prefix(prefix) => {
                prefix_safe(prefix)
                    && subject.strip_prefix(prefix.as_str()).is_some_and(|rest| {
                        !rest.contains(UNSAFE_AFTER_PREFIX) && !rest.contains("..")
                    })
            }
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
    /// Part of what the request acts on was not shown: the prompt clipped its input
    /// ([`crate::prompt_text::PREVIEW_CHARS`]), or the subject [`is_hidden`].
    #[error(
        "part of its input was hidden from you (cut from the prompt, redacted, elided, \
         or characters that do not show)"
    )]
    Hidden,
    /// The prefix ends with a character that lets what follows it do more than it
    /// says ([`UNSAFE_AFTER_PREFIX`], or `.`).
    #[error("a prefix may not end with . \\ ; & | ` $ < or >")]
    UnsafePrefix,
    /// The session that asked is not connected: a grant "until the session ends"
    /// would begin after its end.
    #[error("the session that asked is not connected")]
    SessionGone,
    /// The identity holds as many grants as it may.
    #[error("there are already {max} grants: revoke one first")]
    TooMany { max: usize },
    /// An allow typed while an approver's deny reaction settles only joins the
    /// votes: a grant needs an undisputed allow.
    #[error("a deny reaction is settling on it")]
    Disputed,
    /// The operator's policy rule `rule` asks for requests like it every time.
    #[error("rule {rule} of the policy asks every time")]
    RuleAsks { rule: usize },
}

/// What a request of `tool` acts on, read from its `input_preview`: the string field
/// [`subject_field`] names, in the JSON object; otherwise (another tool, or that
/// field missing or no string) the whole object in compact JSON (so the spaced and
/// the compact forms of different Claude Code builds read the same). `None` when
/// `input_preview` is not a JSON object (cut short, trailing text, or not JSON):
/// such a request is never covered by a grant. Of duplicate keys the last counts, as
/// in JavaScript's `JSON.parse` (Claude Code's `JSON.stringify` writes none).
///
/// `input_preview` is display text (the contract says never to parse it for what
/// the tool does); it is read here only to compare it with what an approver saw.
pub fn subject(tool: &str, input_preview: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(input_preview).ok()?;
    let object = value.as_object()?;
    subject_field(tool)
        .and_then(|field| object.get(field)?.as_str().map(str::to_owned))
        .or_else(|| Some(value.to_string()))
}

/// Control and format characters (`Cc`, `Cf`: line breaks, bidi overrides,
/// zero-width characters): a subject holding one does not show as it is.
static INVISIBLE: std::sync::LazyLock<regex::Regex> =
    std::sync::LazyLock::new(|| regex::Regex::new(r"[\p{Cc}\p{Cf}]").expect("constant regex"));

/// `text` without its control and format characters (as a notice shows a tool's
/// name).
pub fn visible(text: &str) -> String {
    INVISIBLE.replace_all(text, "").into_owned()
}

/// Whether a prefix may begin a grant: it does not end with one of
/// [`UNSAFE_AFTER_PREFIX`] or `.`.
fn prefix_safe(prefix: &str) -> bool {
    !prefix.ends_with(UNSAFE_AFTER_PREFIX) && !prefix.ends_with('.')
}

/// Whether part of `subject` was hidden from the approver: it holds [`REDACTED`], a
/// control or format character, or more than [`SUBJECT_MAX_CHARS`] characters.
pub fn is_hidden(subject: &str) -> bool {
    subject.contains(REDACTED)
        || INVISIBLE.is_match(subject)
        || subject.chars().count() > SUBJECT_MAX_CHARS
}

/// The scope of a grant asked for on a request of `tool` whose `input_preview` the
/// approver saw in its prompt.
///
/// # Errors
/// [`GrantRefused::Hidden`] when the prompt clipped the preview (more than
/// [`crate::prompt_text::PREVIEW_CHARS`] characters) or the subject [`is_hidden`];
/// [`GrantRefused::UnreadableInput`] when the preview has no [`subject`];
/// [`GrantRefused::UnsafePrefix`] when `prefix` ends badly ([`UNSAFE_AFTER_PREFIX`]);
/// [`GrantRefused::PrefixNotSeen`] when `prefix` does not begin the subject.
pub fn scope_for(
    tool: &str,
    input_preview: &str,
    prefix: Option<&str>,
) -> Result<InputScope, GrantRefused> {
    if input_preview.chars().count() > crate::prompt_text::PREVIEW_CHARS {
        return Err(GrantRefused::Hidden);
    }
    let seen = subject(tool, input_preview).ok_or(GrantRefused::UnreadableInput)?;
    if is_hidden(&seen) {
        return Err(GrantRefused::Hidden);
    }
    match prefix {
        None => Ok(InputScope::Exact(seen)),
        Some(prefix) if !prefix_safe(prefix) => Err(GrantRefused::UnsafePrefix),
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
            subject(
                "Bash",
                r#"{ "command": "cargo test", "description": "Run the tests" }"#
            )
            .as_deref(),
            Some("cargo test")
        );
        assert_eq!(
            subject(
                "Bash",
                r#"{"command":"cargo test","description":"other words"}"#
            )
            .as_deref(),
            Some("cargo test")
        );
        assert_eq!(
            subject("Edit", r#"{"file_path":"/src/a.rs","old_string":"x"}"#).as_deref(),
            Some("/src/a.rs")
        );
        assert_eq!(
            subject(
                "WebFetch",
                r#"{"url":"https://x.example/","prompt":"read"}"#
            )
            .as_deref(),
            Some("https://x.example/")
        );
        // No named field: the whole object, compact, whatever the spacing.
        assert_eq!(
            subject("TodoWrite", r#"{ "todos": [1, 2] }"#),
            subject("TodoWrite", r#"{"todos":[1,2]}"#)
        );
        assert_eq!(
            subject("TodoWrite", r#"{"todos":[1,2]}"#).as_deref(),
            Some(r#"{"todos":[1,2]}"#)
        );
        // A field that is no string is not a subject.
        assert_eq!(
            subject("Bash", r#"{"command":1}"#).as_deref(),
            Some(r#"{"command":1}"#)
        );
    }

    #[test]
    fn a_preview_cut_short_or_not_an_object_has_no_subject() {
        assert_eq!(
            subject("Bash", r#"{"command":"rm -rf /tmp/x && echo"#),
            None
        );
        assert_eq!(subject("Bash", "ls"), None);
        assert_eq!(subject("Bash", r#"["ls"]"#), None);
        assert_eq!(subject("Bash", ""), None);
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
            scope_for("Bash", preview, None),
            Ok(InputScope::Exact("cargo test -p x".into()))
        );
        assert_eq!(
            scope_for("Bash", preview, Some("cargo test")),
            Ok(InputScope::Prefix("cargo test".into()))
        );
        assert_eq!(
            scope_for("Bash", preview, Some("cargo build")),
            Err(GrantRefused::PrefixNotSeen)
        );
        assert_eq!(
            scope_for("Bash", r#"{"command":"cargo te"#, None),
            Err(GrantRefused::UnreadableInput)
        );
    }

    #[test]
    fn what_was_hidden_from_the_approver_is_never_granted_nor_covered() {
        let redacted = r#"{"command":"curl -H 'Authorization: Bearer [REDACTED]' https://x"}"#;
        assert_eq!(scope_for("Bash", redacted, None), Err(GrantRefused::Hidden));
        // The prompt shows PREVIEW_CHARS characters of the input: all of it, or no grant.
        let shown = |n: usize| serde_json::json!({ "command": "x".repeat(n) }).to_string();
        let fits = crate::prompt_text::PREVIEW_CHARS - shown(0).len();
        assert_eq!(
            scope_for("Bash", &shown(fits), None),
            Ok(InputScope::Exact("x".repeat(fits)))
        );
        assert_eq!(
            scope_for("Bash", &shown(fits + 1), None),
            Err(GrantRefused::Hidden)
        );
        // A command after a long description never showed either.
        let unseen = serde_json::json!({ "description": "d".repeat(1_300), "command": "rm -rf ~" });
        assert_eq!(
            scope_for("Bash", &unseen.to_string(), None),
            Err(GrantRefused::Hidden)
        );
        // Characters that do not show: line breaks, bidi overrides, zero-width.
        for command in [
            "true\n2: Bash",
            "echo \u{202E}fr- mr",
            "ec\u{200B}ho",
            "a\tb",
        ] {
            let preview = serde_json::json!({ "command": command }).to_string();
            assert_eq!(
                scope_for("Bash", &preview, None),
                Err(GrantRefused::Hidden),
                "{command:?}"
            );
            assert!(
                !InputScope::Exact(command.into()).covers(command),
                "{command:?}"
            );
        }
        // A prefix grant never covers a longer or redacted subject either.
        let long = "x".repeat(SUBJECT_MAX_CHARS + 1);
        let longest = "x".repeat(SUBJECT_MAX_CHARS);
        let scope = InputScope::Prefix("x".into());
        assert!(scope.covers(&longest));
        assert!(!scope.covers(&long));
        assert!(!InputScope::Prefix("curl ".into()).covers("curl -u [REDACTED] https://x"));
        assert!(!InputScope::Exact(long.clone()).covers(&long));
    }

    #[test]
    fn a_tools_subject_is_its_named_field_and_any_other_tools_its_whole_input() {
        assert_eq!(subject_field("Bash"), Some("command"));
        assert_eq!(subject_field("Read"), Some("file_path"));
        assert_eq!(subject_field("MultiEdit"), Some("file_path"));
        assert_eq!(subject_field("NotebookEdit"), Some("notebook_path"));
        assert_eq!(subject_field("WebFetch"), Some("url"));
        for tool in ["Grep", "Glob", "mcp__ssh__run", "bash", "Task"] {
            assert_eq!(subject_field(tool), None, "{tool}");
        }
        // An MCP tool's `command` is not its subject: the host matters too.
        let staging = subject("mcp__ssh__run", r#"{"host":"staging","command":"ls"}"#);
        let prod = subject("mcp__ssh__run", r#"{"host":"prod","command":"ls"}"#);
        assert_ne!(staging, prod);
        // Bash with no string `command` is its whole input, never another field.
        assert_eq!(
            subject("Bash", r#"{"command":["ls"],"file_path":"/x"}"#).as_deref(),
            Some(r#"{"command":["ls"],"file_path":"/x"}"#)
        );
        // Duplicate keys: the last counts.
        assert_eq!(
            subject("Bash", r#"{"command":"ls","command":"rm -rf /tmp/x"}"#).as_deref(),
            Some("rm -rf /tmp/x")
        );
    }

    #[test]
    fn a_prefix_ending_in_a_dot_or_a_shell_character_is_refused_and_covers_nothing() {
        for prefix in [
            "/work/proj/.",
            "echo $",
            "echo \\",
            "make &",
            "a;",
            "x |",
            "echo `",
        ] {
            let subject = format!("{prefix}x");
            let preview = serde_json::json!({ "command": subject }).to_string();
            assert_eq!(
                scope_for("Bash", &preview, Some(prefix)),
                Err(GrantRefused::UnsafePrefix),
                "{prefix:?}"
            );
            assert!(
                !InputScope::Prefix(prefix.into()).covers(&subject),
                "{prefix:?}"
            );
        }
        let climbs = InputScope::Prefix("/work/proj/.".into());
        assert!(!climbs.covers("/work/proj/../secrets/key"));
        assert!(!InputScope::Prefix("echo $".into()).covers("echo $(curl x -o ~/.bashrc)"));
        // `..` starting at the prefix's last character is caught too.
        assert!(!InputScope::Prefix("/work/proj/a".into()).covers("/work/proj/a/../../etc"));
        assert!(InputScope::Prefix("cat /work/proj/".into()).covers("cat /work/proj/.env"));
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
