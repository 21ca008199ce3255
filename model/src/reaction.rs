//! Reactions as verdicts: a Matrix `m.reaction` on a permission request, whose
//! `m.annotation` key is one of the configured approve or deny emoji.
//!
//! Source: Matrix Client-Server API, [`m.annotation` relationship type]; clients
//! send the same emoji with or without a variation selector or a skin tone, so keys
//! are compared after [`normalize_key`].
//!
//! [`m.annotation` relationship type]: https://spec.matrix.org/v1.16/client-server-api/#mannotation-relationship-type

use crate::verdict::Behavior;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Whether `c` is dropped by [`normalize_key`]: U+FE0E (text presentation), U+FE0F
/// (emoji presentation), or a Fitzpatrick skin-tone modifier U+1F3FB..=U+1F3FF.
fn is_dropped(c: char) -> bool {
    matches!(c, '\u{FE0E}' | '\u{FE0F}' | '\u{1F3FB}'..='\u{1F3FF}')
}

/// Strips U+FE0E, U+FE0F and the skin-tone modifiers U+1F3FB..=U+1F3FF from a
/// reaction key (the `key` of an `m.annotation` relation,
/// <https://spec.matrix.org/v1.16/client-server-api/#mannotation-relationship-type>).
/// Nothing else changes: no case folding, no Unicode normalisation, no trimming.
///
/// `"👍\u{FE0F}"`, `"👍\u{1F3FD}"` and `"👍"` all give `"👍"`. Idempotent.
pub fn normalize_key(key: &str) -> String {
    key.chars().filter(|&c| !is_dropped(c)).collect()
}

/// The approve and deny sets of reaction keys, stored normalised (see
/// [`normalize_key`]). Both sets are non-empty and disjoint, and no key is empty.
///
/// Default: approve {👍 U+1F44D, ✅ U+2705}, deny {👎 U+1F44E, ❌ U+274C}.
///
/// Source: Matrix `m.annotation` keys
/// (<https://spec.matrix.org/v1.16/client-server-api/#mannotation-relationship-type>);
/// the sets themselves are operator configuration.
///
/// Serde shape: `{"approve": [..], "deny": [..]}`; deserialising validates like
/// [`ReactionKeys::new`], so stored sets are always normalised and disjoint.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "RawReactionKeys")]
pub struct ReactionKeys {
    approve: BTreeSet<String>,
    deny: BTreeSet<String>,
}

/// The unchecked serde form of [`ReactionKeys`].
#[derive(Deserialize)]
struct RawReactionKeys {
    approve: Vec<String>,
    deny: Vec<String>,
}

impl TryFrom<RawReactionKeys> for ReactionKeys {
    type Error = ReactionKeysError;

    fn try_from(raw: RawReactionKeys) -> Result<Self, Self::Error> {
        ReactionKeys::new(raw.approve, raw.deny)
    }
}

/// Why a pair of key sets is not a valid [`ReactionKeys`].
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ReactionKeysError {
    /// A key is empty once variation selectors and skin tones are stripped.
    #[error("reaction key {raw:?} is empty once variation selectors and skin tones are removed")]
    EmptyKey {
        /// The key as configured.
        raw: String,
    },
    /// A key (normalised) is in both the approve and the deny set.
    #[error("reaction key {key:?} is in both the approve and the deny set")]
    Overlap {
        /// The normalised key.
        key: String,
    },
    /// The approve set has no key.
    #[error("the approve set of reaction keys is empty")]
    EmptyApproveSet,
    /// The deny set has no key.
    #[error("the deny set of reaction keys is empty")]
    EmptyDenySet,
}

/// Normalises every key of one set.
///
/// # Errors
/// [`ReactionKeysError::EmptyKey`] for the first key that normalises to `""`.
fn normalize_set<I, S>(keys: I) -> Result<BTreeSet<String>, ReactionKeysError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    keys.into_iter()
        .map(|raw| {
            let raw = raw.as_ref();
            let key = normalize_key(raw);
            if key.is_empty() {
                Err(ReactionKeysError::EmptyKey {
                    raw: raw.to_owned(),
                })
            } else {
                Ok(key)
            }
        })
        .collect()
}

impl ReactionKeys {
    /// Builds the sets from raw keys, normalising each (duplicates after
    /// normalisation collapse).
    ///
    /// # Errors
    /// Checked in this order: [`ReactionKeysError::EmptyKey`] (the first key, approve
    /// set first, that is empty after normalisation, with its raw form),
    /// [`ReactionKeysError::EmptyApproveSet`], [`ReactionKeysError::EmptyDenySet`],
    /// then [`ReactionKeysError::Overlap`] naming the smallest normalised key in both
    /// sets.
    pub fn new<I, J, S>(approve: I, deny: J) -> Result<Self, ReactionKeysError>
    where
        I: IntoIterator<Item = S>,
        J: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let approve = normalize_set(approve)?;
        let deny = normalize_set(deny)?;
        if approve.is_empty() {
            return Err(ReactionKeysError::EmptyApproveSet);
        }
        if deny.is_empty() {
            return Err(ReactionKeysError::EmptyDenySet);
        }
        if let Some(key) = approve.intersection(&deny).next() {
            return Err(ReactionKeysError::Overlap { key: key.clone() });
        }
        Ok(ReactionKeys { approve, deny })
    }

    /// Classifies a raw `m.annotation` key: normalises it, then looks it up.
    /// `Some(Allow)` for an approve key, `Some(Deny)` for a deny key, `None` for any
    /// other reaction (`"👍👍"` is not `"👍"`).
    pub fn classify(&self, raw_key: &str) -> Option<Behavior> {
        let key = normalize_key(raw_key);
        if self.approve.contains(&key) {
            Some(Behavior::Allow)
        } else if self.deny.contains(&key) {
            Some(Behavior::Deny)
        } else {
            None
        }
    }

    /// The approve keys, normalised, in ascending (byte) order.
    pub fn approve(&self) -> impl Iterator<Item = &str> {
        self.approve.iter().map(String::as_str)
    }

    /// The deny keys, normalised, in ascending (byte) order.
    pub fn deny(&self) -> impl Iterator<Item = &str> {
        self.deny.iter().map(String::as_str)
    }
}

impl Default for ReactionKeys {
    /// Approve {👍, ✅}, deny {👎, ❌}.
    fn default() -> Self {
        let set = |keys: [&str; 2]| keys.into_iter().map(str::to_owned).collect();
        ReactionKeys {
            approve: set(["\u{1F44D}", "\u{2705}"]),
            deny: set(["\u{1F44E}", "\u{274C}"]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const THUMBS_UP: &str = "\u{1F44D}";
    const THUMBS_DOWN: &str = "\u{1F44E}";

    fn keys() -> ReactionKeys {
        ReactionKeys::default()
    }

    #[test]
    fn a_thumbs_up_with_an_emoji_selector_approves() {
        assert_eq!(keys().classify("\u{1F44D}\u{FE0F}"), Some(Behavior::Allow));
    }

    #[test]
    fn a_thumbs_up_with_a_skin_tone_approves() {
        assert_eq!(keys().classify("\u{1F44D}\u{1F3FD}"), Some(Behavior::Allow));
    }

    #[test]
    fn a_thumbs_up_with_a_text_selector_approves() {
        assert_eq!(keys().classify("\u{1F44D}\u{FE0E}"), Some(Behavior::Allow));
    }

    #[test]
    fn a_bare_thumbs_up_and_a_check_mark_approve() {
        assert_eq!(keys().classify(THUMBS_UP), Some(Behavior::Allow));
        assert_eq!(keys().classify("\u{2705}"), Some(Behavior::Allow));
    }

    #[test]
    fn a_dark_thumbs_down_denies() {
        assert_eq!(keys().classify("\u{1F44E}\u{1F3FF}"), Some(Behavior::Deny));
        assert_eq!(keys().classify(THUMBS_DOWN), Some(Behavior::Deny));
    }

    #[test]
    fn a_cross_mark_with_an_emoji_selector_denies() {
        assert_eq!(keys().classify("\u{274C}\u{FE0F}"), Some(Behavior::Deny));
    }

    #[test]
    fn other_reactions_are_not_verdicts() {
        assert_eq!(keys().classify("\u{1F600}"), None);
        assert_eq!(keys().classify("\u{1F44D}\u{1F44D}"), None);
        assert_eq!(keys().classify(""), None);
        assert_eq!(keys().classify("+1"), None);
        assert_eq!(keys().classify("\u{1F44D} "), None);
    }

    #[test]
    fn normalising_drops_exactly_the_selectors_and_skin_tones() {
        for dropped in [
            '\u{FE0E}',
            '\u{FE0F}',
            '\u{1F3FB}',
            '\u{1F3FD}',
            '\u{1F3FF}',
        ] {
            assert_eq!(normalize_key(&format!("a{dropped}b")), "ab", "{dropped:?}");
        }
        for kept in ['\u{FE0D}', '\u{FE10}', '\u{1F3FA}', '\u{1F400}', '\u{200D}'] {
            let key = format!("a{kept}b");
            assert_eq!(normalize_key(&key), key, "{kept:?}");
        }
    }

    #[test]
    fn normalising_keeps_zwj_sequences_but_drops_their_tones() {
        // 👩🏽‍💻: woman, skin tone, ZWJ, laptop.
        assert_eq!(
            normalize_key("\u{1F469}\u{1F3FD}\u{200D}\u{1F4BB}"),
            "\u{1F469}\u{200D}\u{1F4BB}"
        );
    }

    #[test]
    fn the_default_sets_are_thumbs_and_marks() {
        let k = keys();
        assert_eq!(k.approve().collect::<Vec<_>>(), ["\u{2705}", THUMBS_UP]);
        assert_eq!(k.deny().collect::<Vec<_>>(), ["\u{274C}", THUMBS_DOWN]);
        assert_eq!(
            ReactionKeys::new([THUMBS_UP, "\u{2705}"], [THUMBS_DOWN, "\u{274C}"]),
            Ok(k)
        );
    }

    #[test]
    fn configured_keys_are_stored_normalised_and_deduplicated() {
        let k = ReactionKeys::new(["\u{1F44D}\u{FE0F}", THUMBS_UP, "ok"], ["\u{1F6D1}"]).unwrap();
        assert_eq!(k.approve().collect::<Vec<_>>(), ["ok", THUMBS_UP]);
        assert_eq!(k.deny().collect::<Vec<_>>(), ["\u{1F6D1}"]);
        assert_eq!(k.classify("ok"), Some(Behavior::Allow));
        assert_eq!(k.classify("\u{1F6D1}\u{FE0F}"), Some(Behavior::Deny));
        assert_eq!(k.classify("\u{2705}"), None);
        assert_eq!(k.classify("OK"), None);
    }

    #[test]
    fn a_key_that_is_only_a_selector_is_an_empty_key() {
        assert_eq!(
            ReactionKeys::new(["\u{FE0F}"], [THUMBS_DOWN]),
            Err(ReactionKeysError::EmptyKey {
                raw: "\u{FE0F}".to_owned()
            })
        );
        assert_eq!(
            ReactionKeys::new([THUMBS_UP], [""]),
            Err(ReactionKeysError::EmptyKey { raw: String::new() })
        );
    }

    #[test]
    fn a_key_in_both_sets_after_normalising_is_an_overlap() {
        assert_eq!(
            ReactionKeys::new([THUMBS_UP, "\u{2705}"], ["\u{274C}", "\u{1F44D}\u{1F3FB}"]),
            Err(ReactionKeysError::Overlap {
                key: THUMBS_UP.to_owned()
            })
        );
    }

    #[test]
    fn empty_sets_are_refused_approve_first() {
        let none: [&str; 0] = [];
        assert_eq!(
            ReactionKeys::new(none, none),
            Err(ReactionKeysError::EmptyApproveSet)
        );
        assert_eq!(
            ReactionKeys::new(none, [THUMBS_DOWN]),
            Err(ReactionKeysError::EmptyApproveSet)
        );
        assert_eq!(
            ReactionKeys::new([THUMBS_UP], none),
            Err(ReactionKeysError::EmptyDenySet)
        );
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert_eq!(
            ReactionKeysError::EmptyKey {
                raw: "\u{FE0F}".to_owned()
            }
            .to_string(),
            "reaction key \"\\u{fe0f}\" is empty once variation selectors and skin tones are removed"
        );
        assert_eq!(
            ReactionKeysError::Overlap {
                key: "x".to_owned()
            }
            .to_string(),
            "reaction key \"x\" is in both the approve and the deny set"
        );
        assert_eq!(
            ReactionKeysError::EmptyApproveSet.to_string(),
            "the approve set of reaction keys is empty"
        );
        assert_eq!(
            ReactionKeysError::EmptyDenySet.to_string(),
            "the deny set of reaction keys is empty"
        );
    }

    #[test]
    fn reaction_keys_round_trip_through_serde_and_are_validated_on_the_way_in() {
        let json = serde_json::to_string(&keys()).unwrap();
        assert_eq!(json, r#"{"approve":["✅","👍"],"deny":["❌","👎"]}"#);
        assert_eq!(serde_json::from_str::<ReactionKeys>(&json).unwrap(), keys());
        let raw: ReactionKeys =
            serde_json::from_str(r#"{"approve":["👍️"],"deny":["👎🏿"]}"#).unwrap();
        assert_eq!(raw.approve().collect::<Vec<_>>(), [THUMBS_UP]);
        assert_eq!(raw.deny().collect::<Vec<_>>(), [THUMBS_DOWN]);
        let err = serde_json::from_str::<ReactionKeys>(r#"{"approve":["👍"],"deny":["👍"]}"#)
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("in both the approve and the deny set"),
            "{err}"
        );
    }
}
