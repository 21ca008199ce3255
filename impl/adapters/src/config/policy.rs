//! An identity's `policy` (an array of tables `[[identities.NAME.policy]]`, in
//! order) and `policy_room`: the operator's rules that allow or deny a permission
//! request without asking, or name how many approvers must allow it
//! (`mc_model::policy`, docs/decisions/0029-policy.md).

use super::walk::Walk;
use figment::value::{Dict, Value};
use mc_model::policy::{Pattern, Rule, RuleDecision};
use ruma::OwnedRoomId;

const RULE_KEYS: [&str; 4] = ["tool", "input", "decision", "approvers"];

impl Walk<'_> {
    /// The rules of `policy`, every entry checked: a missing or mistyped key, an
    /// unknown one, an unknown decision, `approvers` on a rule that is no `ask`,
    /// are issues at `path.policy[i]`. Whether the rules can work together
    /// (`mc_model::policy::check`) is checked with the other rules between keys.
    pub(super) fn policy(&mut self, path: &str, dict: &Dict) -> Option<Vec<Rule>> {
        let Some(value) = dict.get("policy") else {
            return Some(Vec::new());
        };
        let at = format!("{path}.policy");
        let Some(items) = value.as_array() else {
            let message = format!(
                "expected a list of rules ([[{at}]] tables), found {}",
                value.to_actual()
            );
            self.issue(&at, Some(value), message);
            return None;
        };
        let mut rules = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            match self.rule(&format!("{at}[{i}]"), item) {
                Some(rule) => rules.push(rule),
                None => ok = false,
            }
        }
        ok.then_some(rules)
    }

    fn rule(&mut self, path: &str, value: &Value) -> Option<Rule> {
        let dict = self.table(path, value)?;
        self.unknown_keys(dict, &RULE_KEYS, &format!("{path}."));
        let key = |k: &str| format!("{path}.{k}");
        let tool = match dict.get("tool") {
            Some(v) => self.typed::<String>(&key("tool"), v),
            None => {
                self.issue(
                    &key("tool"),
                    Some(value),
                    "missing key `tool` (a tool name such as \"Bash\", or a pattern \
                     such as \"mcp__github__*\" or \"*\")",
                );
                None
            }
        };
        let input = match dict.get("input") {
            None => Some(None),
            Some(v) => self.typed::<String>(&key("input"), v).map(Some),
        };
        let decision = match dict.get("decision") {
            Some(v) => {
                self.typed::<String>(&key("decision"), v)
                    .and_then(|word| match word.as_str() {
                        "allow" | "deny" | "ask" => Some(word),
                        _ => {
                            self.issue(
                                &key("decision"),
                                Some(v),
                                format!("{word:?} is no decision: allow, deny or ask"),
                            );
                            None
                        }
                    })
            }
            None => {
                self.issue(
                    &key("decision"),
                    Some(value),
                    "missing key `decision` (allow, deny or ask)",
                );
                None
            }
        };
        let approvers = match dict.get("approvers") {
            None => Some(None),
            Some(v) => self.typed::<usize>(&key("approvers"), v).map(Some),
        };
        let decision = match (decision?.as_str(), approvers?) {
            ("allow", None) => RuleDecision::Allow,
            ("deny", None) => RuleDecision::Deny,
            ("ask", n) => RuleDecision::Ask {
                approvers: n.unwrap_or(1),
            },
            (word, Some(_)) => {
                self.issue(
                    &key("approvers"),
                    dict.get("approvers"),
                    format!("only an ask rule counts approvers; this rule's decision is {word}"),
                );
                return None;
            }
            _ => return None,
        };
        Some(Rule {
            tool: Pattern(tool?),
            input: input?.map(Pattern),
            decision,
        })
    }

    /// `policy_room`: a Matrix room id, or none.
    pub(super) fn policy_room(&mut self, path: &str, dict: &Dict) -> Option<Option<OwnedRoomId>> {
        let Some(v) = dict.get("policy_room") else {
            return Some(None);
        };
        let at = format!("{path}.policy_room");
        let s = self.typed::<String>(&at, v)?;
        match OwnedRoomId::try_from(s.as_str()) {
            Ok(id) => Some(Some(id)),
            Err(e) => {
                self.issue(&at, Some(v), format!("{s:?} is not a Matrix room id: {e}"));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::test_support::*;
    use mc_model::policy::{Pattern, RuleDecision};

    const DAY: &str = r#"
policy_room = "!log:localhost"
[[identities.bot.policy]]
tool = "Bash"
input = "git push*"
decision = "ask"
approvers = 2
[[identities.bot.policy]]
tool = "Bash"
input = "cargo test*"
decision = "allow"
[[identities.bot.policy]]
tool = "Read"
decision = "allow"
[[identities.bot.policy]]
tool = "Bash"
input = "*rm -rf*"
decision = "deny"
"#;

    fn two_approvers(extra: &str) -> String {
        MINIMAL.replace(
            r#"["@alice:localhost"]"#,
            r#"["@alice:localhost", "@bob:localhost"]"#,
        ) + extra
    }

    #[test]
    fn a_policy_reads_in_order_with_its_room() {
        let config = load(&two_approvers(DAY), no_env()).expect("valid");
        let model = config.identities["bot"].model_config();
        let decisions: Vec<(String, Option<String>, RuleDecision)> = model
            .policy
            .iter()
            .map(|r| {
                (
                    r.tool.0.clone(),
                    r.input.as_ref().map(|p| p.0.clone()),
                    r.decision,
                )
            })
            .collect();
        assert_eq!(
            decisions,
            [
                (
                    "Bash".into(),
                    Some("git push*".into()),
                    RuleDecision::Ask { approvers: 2 }
                ),
                (
                    "Bash".into(),
                    Some("cargo test*".into()),
                    RuleDecision::Allow
                ),
                ("Read".into(), None, RuleDecision::Allow),
                ("Bash".into(), Some("*rm -rf*".into()), RuleDecision::Deny),
            ]
        );
        assert_eq!(model.policy[0].tool, Pattern("Bash".into()));
        assert_eq!(
            model.policy_room,
            Some(mc_model::RoomId("!log:localhost".into()))
        );
    }

    #[test]
    fn each_mistake_in_a_rule_is_named_at_its_entry() {
        let text = two_approvers(
            r#"
[[identities.bot.policy]]
decision = "maybe"
[[identities.bot.policy]]
tool = "Bash"
decision = "deny"
approvers = 2
colour = "red"
[[identities.bot.policy]]
tool = 3
"#,
        );
        let issues = issues(&text, no_env());
        let paths: Vec<&str> = issues.iter().map(|i| i.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "identities.bot.policy[0].tool",
                "identities.bot.policy[0].decision",
                "identities.bot.policy[1].colour",
                "identities.bot.policy[1].approvers",
                "identities.bot.policy[2].tool",
                "identities.bot.policy[2].decision",
            ],
            "{issues:#?}"
        );
        assert_eq!(
            issue_at(&issues, "identities.bot.policy[0].decision").message,
            "\"maybe\" is no decision: allow, deny or ask"
        );
        assert_eq!(
            issue_at(&issues, "identities.bot.policy[1].approvers").message,
            "only an ask rule counts approvers; this rule's decision is deny"
        );
    }

    #[test]
    fn a_rule_that_cannot_match_or_be_met_is_named_with_its_number() {
        let text = two_approvers(
            r#"
[[identities.bot.policy]]
tool = "*"
decision = "deny"
[[identities.bot.policy]]
tool = "Bash"
input = "ls*"
decision = "ask"
approvers = 3
"#,
        );
        let issues = issues(&text, no_env());
        let at: Vec<(&str, &str)> = issues
            .iter()
            .map(|i| (i.path.as_str(), i.message.as_str()))
            .collect();
        assert_eq!(
            at,
            [
                ("identities.bot.policy[1]", "policy: rule 2: it asks 3 approvers, but the identity has 2, so its requests can only be denied"),
                ("identities.bot.policy[1]", "policy: rule 2: rule 1 before it matches every request it would, so it never decides"),
            ]
        );
        let issues = issues_of_room("policy_room = \"log\"\n");
        assert_eq!(
            issue_at(&issues, "identities.bot.policy_room")
                .message
                .split(':')
                .next(),
            Some("\"log\" is not a Matrix room id")
        );
    }

    fn issues_of_room(line: &str) -> Vec<crate::config::ConfigIssue> {
        issues(&with_line(line), no_env())
    }
}
