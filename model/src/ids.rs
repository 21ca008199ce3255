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

/// Milliseconds since the Unix epoch, like Matrix `origin_server_ts`.
///
/// The core never reads a clock: every call to [`crate::Channel::handle`] passes
/// the current time in.
pub type Millis = u64;

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
