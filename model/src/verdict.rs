//! Permission verdicts: Claude Code's `allow` / `deny` behaviours, its request ids,
//! and the text form a Matrix user types to answer a permission request
//! (`yes abcde`, `n abcde`).
//!
//! Source of the rules: the Claude Code channel contract (permission relay): a
//! request carries a five-letter lowercase id drawn from the alphabet `a`..=`z`
//! without `l`, and the verdict sent back names that id and a behaviour.

use crate::grant::{parse_duration, GrantAsk, Lasts, PREFIX_MAX_CHARS};
use regex::Regex;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::LazyLock;

/// Claude Code's verdict on a permission request; serde as `"allow"` / `"deny"`.
///
/// Source: Claude Code channel contract (permission verdict `behavior` field).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Behavior {
    /// The tool use may go ahead.
    Allow,
    /// The tool use is refused.
    Deny,
}

impl Behavior {
    /// The wire name: `"allow"` or `"deny"` (the same strings serde uses).
    pub fn as_str(self) -> &'static str {
        match self {
            Behavior::Allow => "allow",
            Behavior::Deny => "deny",
        }
    }
}

impl fmt::Display for Behavior {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The letters a request id is made of: `a`..=`z` without `l` (25 letters), so an
/// id cannot be misread as containing `1` or `I`.
///
/// Source: Claude Code channel contract (permission request ids).
pub const REQUEST_ID_ALPHABET: &str = "abcdefghijkmnopqrstuvwxyz";

/// The number of letters in a request id.
pub const REQUEST_ID_LEN: usize = 5;

/// A permission request id: exactly [`REQUEST_ID_LEN`] (5) letters from
/// [`REQUEST_ID_ALPHABET`] (`abcdefghijkmnopqrstuvwxyz`, no `l`), lowercase.
///
/// Serde goes through a string and validates with [`RequestId::parse`].
///
/// Source: Claude Code channel contract (permission request ids).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RequestId(String);

/// Why a string is not a [`RequestId`].
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum RequestIdError {
    /// The string is not exactly 5 characters long (`chars` counts Unicode scalar
    /// values).
    #[error("a request id is exactly 5 letters, this one has {chars} characters")]
    WrongLength {
        /// How many characters the string has.
        chars: usize,
    },
    /// A character is not one of `abcdefghijkmnopqrstuvwxyz` (lowercase, no `l`).
    #[error(
        "a request id is made of the lowercase letters a-z without l, \
         this one has {ch:?} at character {at}"
    )]
    BadChar {
        /// The first offending character.
        ch: char,
        /// Its 0-based position, in characters.
        at: usize,
    },
}

impl RequestId {
    /// Parses a request id strictly: exactly 5 characters, each in
    /// [`REQUEST_ID_ALPHABET`]. Does not lowercase: uppercase is an error (Claude
    /// Code sends lowercase).
    ///
    /// # Errors
    /// [`RequestIdError::WrongLength`] when the string is not 5 characters long
    /// (checked first), else [`RequestIdError::BadChar`] naming the first bad
    /// character and its position.
    pub fn parse(s: &str) -> Result<RequestId, RequestIdError> {
        let chars = s.chars().count();
        if chars != REQUEST_ID_LEN {
            return Err(RequestIdError::WrongLength { chars });
        }
        if let Some((at, ch)) = s
            .chars()
            .enumerate()
            .find(|&(_, c)| !REQUEST_ID_ALPHABET.contains(c))
        {
            return Err(RequestIdError::BadChar { ch, at });
        }
        Ok(RequestId(s.to_owned()))
    }

    /// The id as a string slice (5 lowercase ASCII letters).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for RequestId {
    type Error = RequestIdError;

    /// Same rules as [`RequestId::parse`].
    fn try_from(s: String) -> Result<Self, Self::Error> {
        RequestId::parse(&s)
    }
}

impl From<RequestId> for String {
    fn from(id: RequestId) -> String {
        id.0
    }
}

/// A verdict typed as a Matrix message: a behaviour and the request it answers,
/// and for an allow, optionally a grant (`always abcde`, `yes abcde 30m`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TextVerdict {
    /// `y`/`yes`/`always` is [`Behavior::Allow`], `n`/`no` is [`Behavior::Deny`].
    pub behavior: Behavior,
    /// The request answered, lowercased.
    pub request_id: RequestId,
    /// The grant asked for with the allow (never with a deny).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<GrantAsk>,
}

/// `(?i)^\s*(y|yes|n|no)\s+([a-km-z]{5})\s*$`; `\s` is Unicode white space.
static TEXT_VERDICT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^\s*(y|yes|n|no)\s+([a-km-z]{5})\s*$").expect("constant regex")
});

/// `(?i)^\s*(always|yes|y)\s+([a-km-z]{5})(?:\s+(.+?))?\s*$`: an allow that
/// may carry a grant (see [`parse_text_verdict`]); one line.
static GRANT_VERDICT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^\s*(always|yes|y)\s+([a-km-z]{5})(?:\s+(.+?))?\s*$").expect("constant regex")
});

/// Parses a Matrix message body (`m.text` `body`) as a verdict:
/// `(?i)^\s*(y|yes|n|no)\s+([a-km-z]{5})\s*$`, the id lowercased; or an allow
/// with a grant ([`crate::grant`], docs/decisions/0027-grants.md), on one line:
///
/// - `always abcde`: until the session ends;
/// - `always abcde 2h`, `yes abcde 30m` (`y` too): for that long (`s`, `m` or
///   `min`, `h`; at most 24 h, longer is cut to it);
/// - either followed by a prefix of what the request acts on (`always abcde cargo
///   test`, `yes abcde 30m cargo test`): every subject starting with it; at most
///   [`PREFIX_MAX_CHARS`] characters, else the message is no verdict.
///
/// `yes abcde` followed by anything but a duration is no verdict.
///
/// Case-insensitive in ASCII only (a letter that merely case-folds into a word or
/// the id, such as U+017F LONG S, makes no verdict), Unicode white space around and
/// between the words. Anything else (extra words, an `l` in the id, a 4- or 6-letter
/// id) is `None`: the message is then ordinary chat, not a verdict.
///
/// Source: Claude Code channel contract (permission relay: a user answers with
/// `yes <id>` or `no <id>`).
pub fn parse_text_verdict(body: &str) -> Option<TextVerdict> {
    let Some(caps) = TEXT_VERDICT.captures(body) else {
        return parse_grant_verdict(body);
    };
    // `(?i)` also folds U+017F LONG S into `s`, so `ye\u{17F}` matched `yes`: the
    // answer word must be ASCII, like the id below (found by the `verdict` fuzz target).
    if !caps[1].is_ascii() {
        return None;
    }
    let behavior = if caps[1].to_ascii_lowercase().starts_with('y') {
        Behavior::Allow
    } else {
        Behavior::Deny
    };
    // `(?i)` folds with Unicode simple case folding, so `[a-km-z]` also matches
    // U+212A KELVIN SIGN (folds to `k`) and U+017F LONG S (folds to `s`); the
    // strict parse below rejects those, so such a body is not a verdict.
    let request_id = RequestId::parse(&caps[2].to_ascii_lowercase()).ok()?;
    Some(TextVerdict {
        behavior,
        request_id,
        grant: None,
    })
}

/// The grant forms of [`parse_text_verdict`].
fn parse_grant_verdict(body: &str) -> Option<TextVerdict> {
    // One line: a line break inside is no grant (a prefix never spans lines).
    let line_break = |c| {
        matches!(
            c,
            '\n' | '\r' | '\u{0B}' | '\u{0C}' | '\u{85}' | '\u{2028}' | '\u{2029}'
        )
    };
    if body.trim().contains(line_break) {
        return None;
    }
    let caps = GRANT_VERDICT.captures(body)?;
    let word = &caps[1];
    if !word.is_ascii() {
        return None;
    }
    let always = word.eq_ignore_ascii_case("always");
    let request_id = RequestId::parse(&caps[2].to_ascii_lowercase()).ok()?;
    // What follows the id, without the white space around it (the lazy group can
    // take white space that is no line break, such as U+000B, for a tail).
    let tail = caps
        .get(3)
        .map(|m| m.as_str().trim())
        .filter(|t| !t.is_empty());
    // The first word of the tail may be a duration; the rest is the prefix as
    // typed, inner spacing kept.
    let (first, after) = match tail {
        Some(tail) => match tail.split_once(char::is_whitespace) {
            Some((first, after)) => (Some(first), Some(after.trim_start())),
            None => (Some(tail), None),
        },
        None => (None, None),
    };
    let (lasts, prefix) = match (first.and_then(parse_duration), always) {
        (Some(ms), _) => (Lasts::For { ms }, after.map(str::to_owned)),
        (None, true) => (Lasts::Session, tail.map(str::to_owned)),
        (None, false) => return None,
    };
    if prefix
        .as_ref()
        .is_some_and(|p| p.chars().count() > PREFIX_MAX_CHARS)
    {
        return None;
    }
    Some(TextVerdict {
        behavior: Behavior::Allow,
        request_id,
        grant: Some(GrantAsk { lasts, prefix }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> RequestId {
        RequestId::parse(s).expect("valid id in test")
    }

    fn verdict(behavior: Behavior, request_id: &str) -> Option<TextVerdict> {
        Some(TextVerdict {
            behavior,
            request_id: id(request_id),
            grant: None,
        })
    }

    #[test]
    fn behaviors_have_their_wire_names() {
        assert_eq!(Behavior::Allow.as_str(), "allow");
        assert_eq!(Behavior::Deny.as_str(), "deny");
        assert_eq!(Behavior::Allow.to_string(), "allow");
        assert_eq!(Behavior::Deny.to_string(), "deny");
    }

    #[test]
    fn behaviors_serialize_as_lowercase_strings() {
        assert_eq!(
            serde_json::to_string(&Behavior::Allow).unwrap(),
            r#""allow""#
        );
        assert_eq!(serde_json::to_string(&Behavior::Deny).unwrap(), r#""deny""#);
        let deny: Behavior = serde_json::from_str(r#""deny""#).unwrap();
        assert_eq!(deny, Behavior::Deny);
        assert!(serde_json::from_str::<Behavior>(r#""Allow""#).is_err());
    }

    #[test]
    fn every_letter_of_the_alphabet_but_l_makes_an_id() {
        for s in ["abcde", "fghij", "kmnop", "qrstu", "vwxyz"] {
            assert_eq!(
                RequestId::parse(s).map(|r| r.as_str().to_owned()),
                Ok(s.to_owned())
            );
        }
        assert_eq!(REQUEST_ID_ALPHABET.len(), 25);
        assert!(!REQUEST_ID_ALPHABET.contains('l'));
    }

    #[test]
    fn an_l_is_a_bad_char_at_its_position() {
        assert_eq!(
            RequestId::parse("abcle"),
            Err(RequestIdError::BadChar { ch: 'l', at: 3 })
        );
    }

    #[test]
    fn uppercase_is_not_lowercased_but_rejected() {
        assert_eq!(
            RequestId::parse("Abcde"),
            Err(RequestIdError::BadChar { ch: 'A', at: 0 })
        );
        assert_eq!(
            RequestId::parse("abcdE"),
            Err(RequestIdError::BadChar { ch: 'E', at: 4 })
        );
    }

    #[test]
    fn characters_next_to_the_alphabet_are_rejected() {
        assert_eq!(
            RequestId::parse("`bcde"),
            Err(RequestIdError::BadChar { ch: '`', at: 0 })
        );
        assert_eq!(
            RequestId::parse("abcd{"),
            Err(RequestIdError::BadChar { ch: '{', at: 4 })
        );
        assert_eq!(
            RequestId::parse("ab1de"),
            Err(RequestIdError::BadChar { ch: '1', at: 2 })
        );
    }

    #[test]
    fn length_counts_characters_not_bytes() {
        assert_eq!(
            RequestId::parse("abcd"),
            Err(RequestIdError::WrongLength { chars: 4 })
        );
        assert_eq!(
            RequestId::parse("abcdef"),
            Err(RequestIdError::WrongLength { chars: 6 })
        );
        assert_eq!(
            RequestId::parse(""),
            Err(RequestIdError::WrongLength { chars: 0 })
        );
        assert_eq!(
            RequestId::parse("ééééé"),
            Err(RequestIdError::BadChar { ch: 'é', at: 0 })
        );
        assert_eq!(
            RequestId::parse("abcdl1"),
            Err(RequestIdError::WrongLength { chars: 6 })
        );
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert_eq!(
            RequestIdError::WrongLength { chars: 4 }.to_string(),
            "a request id is exactly 5 letters, this one has 4 characters"
        );
        assert_eq!(
            RequestIdError::BadChar { ch: 'l', at: 3 }.to_string(),
            "a request id is made of the lowercase letters a-z without l, \
             this one has 'l' at character 3"
        );
    }

    #[test]
    fn a_request_id_displays_and_converts_as_its_letters() {
        let r = id("qwert");
        assert_eq!(r.to_string(), "qwert");
        assert_eq!(String::from(r.clone()), "qwert");
        assert_eq!(RequestId::try_from("qwert".to_owned()), Ok(r));
        assert_eq!(
            RequestId::try_from("qwerl".to_owned()),
            Err(RequestIdError::BadChar { ch: 'l', at: 4 })
        );
    }

    #[test]
    fn a_request_id_serializes_as_a_string_and_validates_on_the_way_in() {
        assert_eq!(serde_json::to_string(&id("abcde")).unwrap(), r#""abcde""#);
        let back: RequestId = serde_json::from_str(r#""abcde""#).unwrap();
        assert_eq!(back, id("abcde"));
        let err = serde_json::from_str::<RequestId>(r#""abcdl""#).unwrap_err();
        assert!(err.to_string().contains("'l' at character 4"), "{err}");
        assert!(serde_json::from_str::<RequestId>(r#""ABCDE""#).is_err());
    }

    #[test]
    fn yes_with_an_uppercase_id_allows_the_lowercased_id() {
        assert_eq!(
            parse_text_verdict("Yes ABCDE"),
            verdict(Behavior::Allow, "abcde")
        );
    }

    #[test]
    fn each_answer_word_in_any_case_gives_its_behavior() {
        assert_eq!(
            parse_text_verdict("y abcde"),
            verdict(Behavior::Allow, "abcde")
        );
        assert_eq!(
            parse_text_verdict("Y abcde"),
            verdict(Behavior::Allow, "abcde")
        );
        assert_eq!(
            parse_text_verdict("YES abcde"),
            verdict(Behavior::Allow, "abcde")
        );
        assert_eq!(
            parse_text_verdict("n abcde"),
            verdict(Behavior::Deny, "abcde")
        );
        assert_eq!(
            parse_text_verdict("N abcde"),
            verdict(Behavior::Deny, "abcde")
        );
        assert_eq!(
            parse_text_verdict("no abcde"),
            verdict(Behavior::Deny, "abcde")
        );
        assert_eq!(
            parse_text_verdict("nO vwxyz"),
            verdict(Behavior::Deny, "vwxyz")
        );
    }

    #[test]
    fn white_space_around_and_between_is_tolerated() {
        assert_eq!(
            parse_text_verdict("  yes   abcde  \n"),
            verdict(Behavior::Allow, "abcde")
        );
        assert_eq!(
            parse_text_verdict("\tno\tkmnop\r\n"),
            verdict(Behavior::Deny, "kmnop")
        );
    }

    #[test]
    fn unicode_white_space_counts_as_white_space() {
        assert_eq!(
            parse_text_verdict("\u{3000}yes\u{00A0}abcde\u{2003}"),
            verdict(Behavior::Allow, "abcde")
        );
        assert_eq!(
            parse_text_verdict("no\u{2028}abcde"),
            verdict(Behavior::Deny, "abcde")
        );
    }

    #[test]
    fn anything_but_exactly_a_word_and_an_id_is_not_a_verdict() {
        for body in [
            "yes abcdel",
            "yes abcd",
            "yes abcle",
            "yes abcLe",
            "yesabcde",
            "yes abcde please",
            "maybe abcde",
            "",
            "yes",
            "abcde",
            "ye abcde",
            "nope abcde",
            "yes, abcde",
            "yes ab cde",
            "yes abc1e",
            "yes\u{200B}abcde",
        ] {
            assert_eq!(parse_text_verdict(body), None, "{body:?}");
        }
    }

    #[test]
    fn an_answer_word_that_only_case_folds_into_yes_is_not_a_verdict() {
        // LONG S folds to `s` under `(?i)`.
        assert_eq!(parse_text_verdict("ye\u{17F} abcde"), None);
        assert_eq!(parse_text_verdict("YE\u{17F} abcde"), None);
        assert_eq!(
            parse_text_verdict("YES abcde"),
            verdict(Behavior::Allow, "abcde")
        );
    }

    #[test]
    fn letters_that_only_case_fold_into_the_alphabet_are_not_an_id() {
        // KELVIN SIGN folds to `k` and LONG S to `s` under `(?i)`.
        assert_eq!(parse_text_verdict("yes \u{212A}abcd"), None);
        assert_eq!(parse_text_verdict("yes abc\u{17F}d"), None);
    }

    fn grant(request_id: &str, lasts: Lasts, prefix: Option<&str>) -> Option<TextVerdict> {
        Some(TextVerdict {
            behavior: Behavior::Allow,
            request_id: id(request_id),
            grant: Some(GrantAsk {
                lasts,
                prefix: prefix.map(str::to_owned),
            }),
        })
    }

    #[test]
    fn always_grants_until_the_session_ends() {
        assert_eq!(
            parse_text_verdict("always abcde"),
            grant("abcde", Lasts::Session, None)
        );
        assert_eq!(
            parse_text_verdict("  Always ABCDE \n"),
            grant("abcde", Lasts::Session, None)
        );
        // White space that is no line break is no prefix.
        assert_eq!(
            parse_text_verdict("always abcde\u{0B}\u{0B}\u{0B}"),
            grant("abcde", Lasts::Session, None)
        );
    }

    #[test]
    fn a_duration_after_the_id_boxes_the_grant_in_time() {
        let half_hour = Lasts::For { ms: 30 * 60_000 };
        assert_eq!(
            parse_text_verdict("yes abcde 30m"),
            grant("abcde", half_hour, None)
        );
        assert_eq!(
            parse_text_verdict("Y abcde 30min"),
            grant("abcde", half_hour, None)
        );
        assert_eq!(
            parse_text_verdict("always abcde 2h"),
            grant("abcde", Lasts::For { ms: 7_200_000 }, None)
        );
        assert_eq!(
            parse_text_verdict("yes abcde 72h"),
            grant(
                "abcde",
                Lasts::For {
                    ms: crate::grant::GRANT_MAX_MS
                },
                None
            )
        );
    }

    #[test]
    fn words_after_the_id_or_the_duration_are_a_prefix_as_typed() {
        assert_eq!(
            parse_text_verdict("always abcde cargo  test -p x"),
            grant("abcde", Lasts::Session, Some("cargo  test -p x"))
        );
        assert_eq!(
            parse_text_verdict("always abcde cargo"),
            grant("abcde", Lasts::Session, Some("cargo"))
        );
        assert_eq!(
            parse_text_verdict("yes abcde 30m /work/proj/ "),
            grant("abcde", Lasts::For { ms: 1_800_000 }, Some("/work/proj/"))
        );
        let longest = "x".repeat(PREFIX_MAX_CHARS);
        assert_eq!(
            parse_text_verdict(&format!("always abcde {longest}")),
            grant("abcde", Lasts::Session, Some(&longest))
        );
        assert_eq!(
            parse_text_verdict(&format!("always abcde {longest}x")),
            None
        );
    }

    #[test]
    fn what_is_not_a_grant_stays_chat() {
        for body in [
            "yes abcde please",
            "yes abcde 30",
            "no abcde 30m",
            "n abcde always",
            "always",
            "always abcdl",
            "always abcdef",
            "alway abcde",
            "always\u{200B}abcde",
            "always abcde\nrm -rf ~",
            "yes abcde 30m\ncargo",
            "always abcde\u{2028}cargo",
            "always\r\nabcde",
            "ALWAY\u{17F} abcde",
            "always \u{212A}abcd",
        ] {
            assert_eq!(parse_text_verdict(body), None, "{body:?}");
        }
    }
}
