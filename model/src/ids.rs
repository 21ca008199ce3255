//! Identifiers, as opaque strings in Matrix and Claude Code terms.
//!
//! The core does not parse Matrix identifiers: the server's adapters get them from
//! ruma, already validated, and hand them over as strings. Comparison is exact
//! (byte for byte), which is what the sender gate needs: a Matrix user is its MXID,
//! never its display name ([Client-Server API, "Users"]).
//!
//! [Client-Server API, "Users"]: https://spec.matrix.org/v1.16/appendices/#user-identifiers

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl $name {
            /// The identifier as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_owned())
            }
        }
    };
}

string_id!(
    /// One Matrix account the server acts as, named by the operator in the config
    /// (for example `"work"`). Every input and effect carries one.
    IdentityId
);
string_id!(
    /// A Claude Code session attached to an identity: the MCP session id
    /// (`Mcp-Session-Id`) in the server.
    SessionId
);
string_id!(
    /// A Matrix user id (MXID), such as `@alice:example.org`.
    UserId
);
string_id!(
    /// A Matrix room id, such as `!abc:example.org`.
    RoomId
);
string_id!(
    /// A Matrix event id, such as `$abc`.
    EventId
);

/// The name a Claude Code session gives the room it wants to live in (a project
/// directory, Claude Code's own session id): one room per label per identity
/// (docs/decisions/0026-session-rooms.md). 1 to [`Label::MAX_CHARS`] characters of
/// `A-Z a-z 0-9 . _ -`, so an approver can type it (`bind <label>`) and a header or
/// a query parameter carries it unescaped.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Label(String);

impl Label {
    /// The most characters a label has.
    pub const MAX_CHARS: usize = 64;

    /// `text` as a label. Errors: empty, longer than [`Label::MAX_CHARS`], or a
    /// character outside `A-Z a-z 0-9 . _ -` (the error says which).
    pub fn parse(text: &str) -> Result<Label, LabelError> {
        if text.is_empty() {
            return Err(LabelError::Empty);
        }
        if let Some(c) = text
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(LabelError::Character(c));
        }
        // Every character is ASCII now: bytes are characters.
        if text.len() > Self::MAX_CHARS {
            return Err(LabelError::TooLong { chars: text.len() });
        }
        Ok(Label(text.to_owned()))
    }

    /// The label as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Label {
    type Error = LabelError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        Label::parse(&text)
    }
}

impl From<Label> for String {
    fn from(label: Label) -> String {
        label.0
    }
}

/// Why a text is no [`Label`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelError {
    Empty,
    /// Longer than [`Label::MAX_CHARS`]: `chars` characters.
    TooLong {
        chars: usize,
    },
    /// A character outside `A-Z a-z 0-9 . _ -`.
    Character(char),
}

impl fmt::Display for LabelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LabelError::Empty => f.write_str("a room label is empty"),
            LabelError::TooLong { chars } => write!(
                f,
                "a room label has {chars} characters, more than {}",
                Label::MAX_CHARS
            ),
            LabelError::Character(c) => write!(
                f,
                "a room label has the character {c:?}; only A-Z a-z 0-9 . _ - are allowed"
            ),
        }
    }
}

impl std::error::Error for LabelError {}

/// A duration in milliseconds: a time to live, a grace, a settle window
/// ([`crate::IdentityConfig`]'s `*_ms` fields). An instant is a [`Timestamp`].
pub type Millis = u64;

/// An instant: milliseconds since the Unix epoch, the unit of Matrix
/// `origin_server_ts` ([Client-Server API, "Room Event Format"]). Serialized as the
/// bare number.
///
/// The core never reads a clock: every call to [`crate::Channel::handle`] passes
/// the current time in. An instant plus a [`Millis`] duration is an instant
/// ([`Timestamp::saturating_add`]); two instants are only compared.
///
/// [Client-Server API, "Room Event Format"]: https://spec.matrix.org/v1.16/client-server-api/#room-event-format
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

/// `instant + duration`, like `std::time::Instant + Duration`.
///
/// # Panics
/// If the sum overflows `u64` (about 584 million years after the epoch). The core's
/// own rules use [`Timestamp::saturating_add`], which does not panic.
impl std::ops::Add<Millis> for Timestamp {
    type Output = Timestamp;

    fn add(self, duration: Millis) -> Timestamp {
        Timestamp(
            self.0
                .checked_add(duration)
                .expect("a Timestamp plus a duration overflows u64"),
        )
    }
}

/// `instant += duration`: [`Timestamp`]'s `+`, in place.
///
/// # Panics
/// As `+`, if the sum overflows `u64`.
impl std::ops::AddAssign<Millis> for Timestamp {
    fn add_assign(&mut self, duration: Millis) {
        *self = *self + duration;
    }
}

impl Timestamp {
    /// The instant `duration` ms after this one, or the last representable instant
    /// if that overflows.
    #[must_use]
    pub const fn saturating_add(self, duration: Millis) -> Timestamp {
        Timestamp(self.0.saturating_add(duration))
    }

    /// The milliseconds from `earlier` to this instant, or 0 if `earlier` is later.
    #[must_use]
    pub const fn saturating_since(self, earlier: Timestamp) -> Millis {
        self.0.saturating_sub(earlier.0)
    }
}

/// The id of an [`crate::Effect`] that expects an outcome. The server reports the
/// outcome back with [`crate::Input::Completed`] carrying the same id.
///
/// Ids are allocated by the core, per [`crate::Channel`], strictly increasing, and
/// are never reused (they survive serialization).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EffectId(pub u64);

impl fmt::Display for EffectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "effect#{}", self.0)
    }
}

/// Names one tool call of the agent's (an MCP `tools/call` request) that asked for
/// an [`crate::AgentWrite`]: the server picks it, and the core's answer
/// ([`crate::Effect::Write`] or [`crate::Effect::WriteRefused`]) carries it back, so
/// the server knows which call to answer. Opaque to the core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CallId(pub u64);

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "call#{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_is_one_to_sixty_four_characters_of_letters_digits_dot_underscore_and_dash() {
        let longest = "a".repeat(Label::MAX_CHARS);
        for ok in [
            "w",
            "web-app",
            "Web_App.2",
            "5f0c2d9e-7a41-4c1b-9e0e-2b6d1f3a8c77",
            &longest,
        ] {
            assert_eq!(
                Label::parse(ok).map(|l| l.as_str().to_owned()),
                Ok(ok.to_owned())
            );
        }
        assert_eq!(Label::parse(""), Err(LabelError::Empty));
        let long = "a".repeat(Label::MAX_CHARS + 1);
        assert_eq!(
            Label::parse(&long),
            Err(LabelError::TooLong {
                chars: Label::MAX_CHARS + 1
            })
        );
        for (bad, c) in [("my app", ' '), ("a/b", '/'), ("é", 'é'), ("x${HOME}", '$')] {
            assert_eq!(Label::parse(bad), Err(LabelError::Character(c)), "{bad:?}");
        }
    }

    #[test]
    fn a_label_error_says_what_is_wrong() {
        assert_eq!(LabelError::Empty.to_string(), "a room label is empty");
        assert_eq!(
            LabelError::TooLong { chars: 65 }.to_string(),
            "a room label has 65 characters, more than 64"
        );
        assert_eq!(
            LabelError::Character('/').to_string(),
            "a room label has the character '/'; only A-Z a-z 0-9 . _ - are allowed"
        );
    }

    #[test]
    fn a_label_reads_back_from_json_only_when_valid() {
        let label: Label = serde_json::from_str("\"web\"").expect("a valid label");
        assert_eq!(label.to_string(), "web");
        assert_eq!(serde_json::to_string(&label).unwrap(), "\"web\"");
        assert!(serde_json::from_str::<Label>("\"a b\"").is_err());
    }

    #[test]
    fn an_instant_plus_a_duration_is_the_later_instant_and_saturates_at_the_end() {
        let t = Timestamp(1_000);
        assert_eq!(t.saturating_add(250), Timestamp(1_250));
        assert_eq!(t + 250, Timestamp(1_250));
        let mut u = t;
        u += 250;
        assert_eq!(u, Timestamp(1_250));
        assert_eq!(
            Timestamp(u64::MAX - 1).saturating_add(5),
            Timestamp(u64::MAX)
        );
    }

    #[test]
    #[should_panic(expected = "overflows")]
    fn plus_panics_where_saturating_add_saturates() {
        let _ = Timestamp(u64::MAX) + 1;
    }

    #[test]
    fn the_duration_between_two_instants_is_never_negative() {
        assert_eq!(Timestamp(1_250).saturating_since(Timestamp(1_000)), 250);
        assert_eq!(Timestamp(1_000).saturating_since(Timestamp(1_250)), 0);
    }

    #[test]
    fn an_instant_is_serialized_as_the_bare_number_of_milliseconds() {
        let t = Timestamp(1_795_991_839_700);
        assert_eq!(serde_json::to_string(&t).unwrap(), "1795991839700");
        assert_eq!(
            serde_json::from_str::<Timestamp>("42").unwrap(),
            Timestamp(42)
        );
    }
}
