//! `approve_keys` and `deny_keys`: the reaction-key sets, each defaulting to the
//! model's ([`ReactionKeys::default`]), and an invalid set reported at the list or
//! the entry it is about.

use super::walk::Walk;
use figment::value::Dict;
use mc_model::reaction::{normalize_key, ReactionKeys, ReactionKeysError};

impl Walk<'_> {
    /// The reaction keys; a [`ReactionKeysError`] is an issue at the list (or
    /// entry) it is about.
    pub(super) fn reaction_keys(
        &mut self,
        path: &str,
        dict: &Dict,
        approve: Option<Vec<String>>,
        deny: Option<Vec<String>>,
    ) -> Option<ReactionKeys> {
        let defaults = ReactionKeys::default();
        let approve_list: Vec<String> =
            approve.unwrap_or_else(|| defaults.approve().map(str::to_owned).collect());
        let deny_list: Vec<String> =
            deny.unwrap_or_else(|| defaults.deny().map(str::to_owned).collect());
        let error = match ReactionKeys::new(&approve_list, &deny_list) {
            Ok(keys) => return Some(keys),
            Err(e) => e,
        };
        let position = |list: &[String], normalised: &str| {
            list.iter().position(|k| normalize_key(k) == normalised)
        };
        let (key, index) = match &error {
            ReactionKeysError::EmptyKey { raw } => match approve_list.iter().position(|k| k == raw)
            {
                Some(i) => ("approve_keys", Some(i)),
                None => ("deny_keys", deny_list.iter().position(|k| k == raw)),
            },
            ReactionKeysError::EmptyApproveSet => ("approve_keys", None),
            ReactionKeysError::EmptyDenySet => ("deny_keys", None),
            // Blame the list the operator wrote (the deny list when both were).
            ReactionKeysError::Overlap { key } if dict.contains_key("deny_keys") => {
                ("deny_keys", position(&deny_list, key))
            }
            ReactionKeysError::Overlap { key } => ("approve_keys", position(&approve_list, key)),
        };
        let value = dict.get(key);
        let at = match index {
            Some(i) if value.is_some() => format!("{path}.{key}[{i}]"),
            _ => format!("{path}.{key}"),
        };
        self.issue(&at, value, error.to_string());
        None
    }
}

#[cfg(test)]
mod tests {
    use crate::config::test_support::*;

    #[test]
    fn reaction_key_errors_name_the_list_and_entry() {
        let cases = [
            (
                "approve_keys = [\"👍\", \"\\uFE0F\"]",
                "identities.bot.approve_keys[1]",
                "is empty once variation selectors",
            ),
            (
                "deny_keys = [\"❌\", \"👍🏽\"]",
                "identities.bot.deny_keys[1]",
                "is in both the approve and the deny set",
            ),
            (
                "approve_keys = [\"❌\"]",
                "identities.bot.approve_keys[0]",
                "is in both the approve and the deny set",
            ),
            (
                "deny_keys = [\"👎\", \"\\uFE0F\"]",
                "identities.bot.deny_keys[1]",
                "is empty once variation selectors",
            ),
            (
                "approve_keys = []",
                "identities.bot.approve_keys",
                "the approve set of reaction keys is empty",
            ),
            (
                "deny_keys = []",
                "identities.bot.deny_keys",
                "the deny set of reaction keys is empty",
            ),
        ];
        for (line, path, message) in cases {
            let issues = issues(&with_line(line), no_env());
            assert_eq!(issues.len(), 1, "{line}: {issues:#?}");
            assert!(
                issue_at(&issues, path).message.contains(message),
                "{line}: {issues:#?}"
            );
        }
    }
}
