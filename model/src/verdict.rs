//! Permission verdicts: Claude Code's `allow` / `deny` behaviours, its request ids,
//! and the text form a Matrix user types to answer a permission request
//! (`yes abcde`, `n abcde`).
//!
//! Source of the rules: the Claude Code channel contract (permission relay): a
//! request carries a five-letter lowercase id drawn from the alphabet `a`..=`z`
//! without `l`, and the verdict sent back names that id and a behaviour.

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

/// A verdict typed as a Matrix message: a behaviour and the request it answers.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TextVerdict {
    /// `y`/`yes` is [`Behavior::Allow`], `n`/`no` is [`Behavior::Deny`].
    pub behavior: Behavior,
    /// The request answered, lowercased.
    pub request_id: RequestId,
}

/// `(?i)^\s*(y|yes|n|no)\s+([a-km-z]{5})\s*$`; `\s` is Unicode white space.
static TEXT_VERDICT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^\s*(y|yes|n|no)\s+([a-km-z]{5})\s*$").expect("constant regex")
});

/// Parses a Matrix message body (`m.text` `body`) as a verdict:
/// `(?i)^\s*(y|yes|n|no)\s+([a-km-z]{5})\s*$`, the id lowercased.
///
/// Case-insensitive in ASCII only (a letter that merely case-folds into a word or
/// the id, such as U+017F LONG S, makes no verdict), Unicode white space around and
/// between the words. Anything else (extra words, an `l` in the id, a 4- or 6-letter
/// id) is `None`: the message is then ordinary chat, not a verdict.
///
/// Source: Claude Code channel contract (permission relay: a user answers with
/// `yes <id>` or `no <id>`).
pub fn parse_text_verdict(body: &str) -> Option<TextVerdict> {
    let caps = TEXT_VERDICT.captures(body)?;
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
}
