//! The operator's policy: ordered rules in an identity's settings that allow or
//! deny a permission request without asking, or say how many approvers must allow
//! it (docs/decisions/0029-policy.md).
//!
//! A rule names a tool (a pattern over `tool_name`) and optionally a pattern over
//! the request's *subject* ([`crate::grant::subject`]: Bash's command, a file tool's
//! path, WebFetch's URL, else the whole input as compact JSON). The first rule that
//! matches decides; a request no rule matches is asked of one approver, as without
//! a policy.
//!
//! Patterns are literal text in which `*` stands for any run of characters. In an
//! `allow` rule a `*` is narrower, because what it lets through runs unseen: it
//! never spans a shell control character ([`crate::grant::UNSAFE_AFTER_PREFIX`]),
//! a control or format character, or a `.` next to another `.` (a path climbing
//! out), and an `allow` rule with an input pattern matches only a subject an
//! approver could have read whole (not [`crate::grant::is_hidden`], from a preview
//! the prompt would not clip). A `deny` or `ask` rule's `*` spans anything, and its
//! input pattern is matched against the raw `input_preview` when no subject can be
//! read from it: what it catches is asked or refused, never let through.

use crate::event::PermissionRequest;
use crate::grant::{is_hidden, subject, UNSAFE_AFTER_PREFIX};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The longest pattern, in characters.
pub const PATTERN_MAX_CHARS: usize = 500;

/// The most approvers an `ask` rule may require.
pub const MAX_QUORUM: usize = 9;

/// Literal text in which `*` stands for any run of characters (no other character
/// is special; there is no escape, so a rule cannot name a literal `*`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Pattern(pub String);

impl Pattern {
    /// Whether the pattern matches all of `text`. With `narrow`, a `*` never spans
    /// one of [`UNSAFE_AFTER_PREFIX`], a control or format character, or a `.`
    /// beside another `.` in `text` (see the module docs).
    pub fn matches(&self, text: &str, narrow: bool) -> bool {
        let pattern: Vec<char> = self.0.chars().collect();
        let text: Vec<char> = text.chars().collect();
        let spannable: Vec<bool> = (0..text.len())
            .map(|i| {
                let c = text[i];
                if !narrow {
                    return true;
                }
                let dotted =
                    c == '.' && ((i > 0 && text[i - 1] == '.') || text.get(i + 1) == Some(&'.'));
                !UNSAFE_AFTER_PREFIX.contains(&c)
                    && !is_hidden(c.encode_utf8(&mut [0; 4]))
                    && !dotted
            })
            .collect();
        // reach[j]: the pattern read so far matches text[..j].
        let mut reach = vec![false; text.len() + 1];
        reach[0] = true;
        for p in &pattern {
            let mut next = vec![false; text.len() + 1];
            if *p == '*' {
                for j in 0..=text.len() {
                    next[j] = reach[j] || (j > 0 && next[j - 1] && spannable[j - 1]);
                }
            } else {
                for j in 1..=text.len() {
                    next[j] = reach[j - 1] && text[j - 1] == *p;
                }
            }
            reach = next;
        }
        reach[text.len()]
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a rule does with a request it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum RuleDecision {
    /// Allowed without asking; the room is told.
    Allow,
    /// Denied without asking, whatever a grant covers; the room is told.
    Deny,
    /// Asked every time (no grant answers it): allowed once `approvers` distinct
    /// approvers said yes; a single no denies.
    Ask { approvers: usize },
}

/// One rule: requests whose `tool_name` matches `tool` and whose subject matches
/// `input` (any subject when `None`) get `decision`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Rule {
    pub tool: Pattern,
    pub input: Option<Pattern>,
    #[serde(flatten)]
    pub decision: RuleDecision,
}

impl Rule {
    /// Whether the rule matches `request`.
    pub fn matches(&self, request: &PermissionRequest) -> bool {
        if !self.tool.matches(&request.tool_name, false) {
            return false;
        }
        let Some(input) = &self.input else {
            return true;
        };
        let seen = subject(&request.tool_name, &request.input_preview);
        match self.decision {
            RuleDecision::Allow => seen.is_some_and(|s| {
                request.input_preview.chars().count() <= crate::prompt_text::PREVIEW_CHARS
                    && !is_hidden(&s)
                    && input.matches(&s, true)
            }),
            RuleDecision::Deny | RuleDecision::Ask { .. } => {
                let text = seen.as_deref().unwrap_or(&request.input_preview);
                input.matches(text, false)
            }
        }
    }

    /// `Bash on "cargo test *"`, for a prompt or a line in the room.
    pub fn what(&self) -> String {
        match &self.input {
            Some(input) => format!("{} on \"{}\"", self.tool, input),
            None => format!("{}", self.tool),
        }
    }
}

/// A rule that decided a request: its place in the policy (from 1, as the operator
/// counts them in the config file) and what it said.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RuleMatch {
    pub number: usize,
    pub what: String,
    pub decision: RuleDecision,
}

/// The first rule of `rules` that matches `request`, or `None`: asked of one
/// approver.
pub fn first_match(rules: &[Rule], request: &PermissionRequest) -> Option<RuleMatch> {
    rules
        .iter()
        .enumerate()
        .find(|(_, r)| r.matches(request))
        .map(|(i, r)| RuleMatch {
            number: i + 1,
            what: r.what(),
            decision: r.decision,
        })
}

/// Why a rule is refused ([`check`]): each names what cannot work.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "problem", rename_all = "snake_case")]
pub enum RuleProblem {
    #[error("rule {rule}: the tool pattern is empty, so it matches no tool")]
    EmptyTool { rule: usize },
    #[error("rule {rule}: the input pattern is empty, so it matches no request (leave `input` out to match any)")]
    EmptyInput { rule: usize },
    #[error("rule {rule}: a pattern is longer than {PATTERN_MAX_CHARS} characters")]
    TooLong { rule: usize },
    #[error("rule {rule}: an ask rule needs 1 to {MAX_QUORUM} approvers, not {approvers}")]
    Quorum { rule: usize, approvers: usize },
    #[error("rule {rule}: it asks {approvers} approvers, but the identity has {have}, so its requests can only be denied")]
    TooFewApprovers {
        rule: usize,
        approvers: usize,
        have: usize,
    },
    #[error(
        "rule {rule}: rule {by} before it matches every request it would, so it never decides"
    )]
    Shadowed { rule: usize, by: usize },
    #[error("rule {rule}: an allow rule's input pattern holds a character a `*` of it can never span ({what}), so it cannot match what it seems to")]
    NarrowNeverMatches { rule: usize, what: String },
}

impl RuleProblem {
    /// The number of the rule it is about (from 1).
    pub fn rule(&self) -> usize {
        match self {
            RuleProblem::EmptyTool { rule }
            | RuleProblem::EmptyInput { rule }
            | RuleProblem::TooLong { rule }
            | RuleProblem::Quorum { rule, .. }
            | RuleProblem::TooFewApprovers { rule, .. }
            | RuleProblem::Shadowed { rule, .. }
            | RuleProblem::NarrowNeverMatches { rule, .. } => *rule,
        }
    }
}

/// The policy's rules as the config check reads them, every problem once:
/// `approvers` is the number of approvers the identity has.
pub fn check(rules: &[Rule], approvers: usize) -> Vec<RuleProblem> {
    let mut problems = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        let n = i + 1;
        if rule.tool.0.is_empty() {
            problems.push(RuleProblem::EmptyTool { rule: n });
        }
        if rule.input.as_ref().is_some_and(|p| p.0.is_empty()) {
            problems.push(RuleProblem::EmptyInput { rule: n });
        }
        let long = |p: &Pattern| p.0.chars().count() > PATTERN_MAX_CHARS;
        if long(&rule.tool) || rule.input.as_ref().is_some_and(long) {
            problems.push(RuleProblem::TooLong { rule: n });
        }
        if let RuleDecision::Ask { approvers: quorum } = rule.decision {
            if quorum == 0 || quorum > MAX_QUORUM {
                problems.push(RuleProblem::Quorum {
                    rule: n,
                    approvers: quorum,
                });
            } else if quorum > approvers {
                problems.push(RuleProblem::TooFewApprovers {
                    rule: n,
                    approvers: quorum,
                    have: approvers,
                });
            }
        }
        if let (RuleDecision::Allow, Some(input)) = (rule.decision, &rule.input) {
            // A hidden subject (a control character, [REDACTED]) never matches an
            // allow rule with an input pattern.
            if is_hidden(&input.0.replace('*', "")) {
                problems.push(RuleProblem::NarrowNeverMatches {
                    rule: n,
                    what: "a control or format character, or [REDACTED]".to_owned(),
                });
            }
        }
        if let Some(by) = rules[..i].iter().position(|earlier| covers(earlier, rule)) {
            problems.push(RuleProblem::Shadowed {
                rule: n,
                by: by + 1,
            });
        }
    }
    problems
}

/// Whether every request `later` matches is matched by `earlier` first: its tool
/// pattern is `*` or the same as `later`'s, and it has no input pattern or the same
/// one with the same narrowness.
fn covers(earlier: &Rule, later: &Rule) -> bool {
    let tool = earlier.tool.0 == "*" || earlier.tool == later.tool;
    let narrow = |r: &Rule| r.decision == RuleDecision::Allow;
    let input = match (&earlier.input, &later.input) {
        (None, _) => true,
        (Some(e), Some(l)) => e == l && (narrow(earlier) == narrow(later) || !narrow(earlier)),
        (Some(_), None) => false,
    };
    tool && input
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Pattern {
        Pattern(s.to_owned())
    }

    #[test]
    fn a_star_spans_any_run_and_literals_match_exactly() {
        assert!(p("cargo test*").matches("cargo test", false));
        assert!(p("cargo test*").matches("cargo test --all", false));
        assert!(!p("cargo test*").matches("cargo tes", false));
        assert!(!p("cargo test").matches("cargo test --all", false));
        assert!(p("*git push*").matches("cd x && git push -f", false));
        assert!(p("mcp__github__*").matches("mcp__github__create_issue", false));
        assert!(!p("mcp__github__*").matches("mcp__gitlab__x", false));
        assert!(p("*").matches("", false));
        assert!(p("*").matches(".x", true), "a dot that starts the text");
        assert!(!p("*").matches("..x", true));
        assert!(p("a*b*c").matches("aXbYc", false));
        assert!(!p("a*b*c").matches("aXbY", false));
    }

    #[test]
    fn a_narrow_star_spans_no_shell_control_no_climb_and_no_invisible_character() {
        for text in [
            "cargo test; rm -rf /",
            "cargo test && curl x",
            "cargo test | sh",
            "cargo test `id`",
            "cargo test $(id)",
            "cargo test > /etc/passwd",
            "cargo test\nrm",
            "cargo test \\",
            "cargo test\u{202e}x",
            "cargo test\u{200b}",
        ] {
            assert!(p("cargo test*").matches(text, false), "{text:?}");
            assert!(!p("cargo test*").matches(text, true), "{text:?}");
        }
        assert!(p("cat /work/*").matches("cat /work/a/b.rs", true));
        assert!(!p("cat /work/*").matches("cat /work/../etc/passwd", true));
        // A climb that straddles a literal dot and the star.
        assert!(!p("cat /work/.*").matches("cat /work/../x", true));
        assert!(!p("cat /work/*./x").matches("cat /work/../x", true));
        // Literal text is the operator's own: it may hold what a star may not span.
        assert!(p("cargo test && cargo clippy").matches("cargo test && cargo clippy", true));
    }

    fn rule(tool: &str, input: Option<&str>, decision: RuleDecision) -> Rule {
        Rule {
            tool: p(tool),
            input: input.map(p),
            decision,
        }
    }

    fn bash(command: &str) -> PermissionRequest {
        PermissionRequest {
            request_id: crate::verdict::RequestId::parse("abcde").expect("valid"),
            tool_name: "Bash".to_owned(),
            description: String::new(),
            input_preview: serde_json::json!({ "command": command }).to_string(),
        }
    }

    #[test]
    fn the_first_matching_rule_decides_and_an_allow_needs_a_readable_subject() {
        let rules = vec![
            rule("Bash", Some("git push*"), RuleDecision::Deny),
            rule("Bash", Some("cargo test*"), RuleDecision::Allow),
            rule("Bash", None, RuleDecision::Ask { approvers: 2 }),
        ];
        let number = |r: &PermissionRequest| first_match(&rules, r).map(|m| m.number);
        assert_eq!(number(&bash("git push origin main")), Some(1));
        assert_eq!(number(&bash("cargo test -p x")), Some(2));
        assert_eq!(number(&bash("cargo test; git push")), Some(3));
        assert_eq!(number(&bash("ls")), Some(3));
        let mut cut = bash("cargo test");
        cut.input_preview = "{\"command\": \"cargo test".to_owned();
        assert_eq!(
            number(&cut),
            Some(3),
            "an unreadable preview is never allowed"
        );
        let mut long = bash("cargo test");
        long.input_preview =
            serde_json::json!({"command": "cargo test", "description": "x".repeat(1_300)})
                .to_string();
        assert_eq!(
            number(&long),
            Some(3),
            "a preview the prompt clips is never allowed"
        );
        let mut deny_raw = bash("x");
        deny_raw.input_preview = "{\"command\": \"git push --force".to_owned();
        let deny = vec![rule("Bash", Some("*git push*"), RuleDecision::Deny)];
        assert_eq!(first_match(&deny, &deny_raw).map(|m| m.number), Some(1));
        let mut web = bash("x");
        web.tool_name = "WebFetch".to_owned();
        assert_eq!(number(&web), None);
    }

    #[test]
    fn the_check_names_each_rule_that_cannot_work() {
        let rules = vec![
            rule("", None, RuleDecision::Allow),
            rule("Bash", Some(""), RuleDecision::Deny),
            rule("Bash", None, RuleDecision::Ask { approvers: 0 }),
            rule("Bash", None, RuleDecision::Ask { approvers: 3 }),
            rule("Read", Some("a\u{200b}*"), RuleDecision::Allow),
            rule("*", None, RuleDecision::Deny),
            rule("Write", None, RuleDecision::Allow),
        ];
        let problems = check(&rules, 2);
        assert_eq!(
            problems,
            vec![
                RuleProblem::EmptyTool { rule: 1 },
                RuleProblem::EmptyInput { rule: 2 },
                RuleProblem::Quorum {
                    rule: 3,
                    approvers: 0
                },
                RuleProblem::TooFewApprovers {
                    rule: 4,
                    approvers: 3,
                    have: 2
                },
                RuleProblem::Shadowed { rule: 4, by: 3 },
                RuleProblem::NarrowNeverMatches {
                    rule: 5,
                    what: "a control or format character, or [REDACTED]".to_owned()
                },
                RuleProblem::Shadowed { rule: 7, by: 6 },
            ]
        );
        assert_eq!(
            problems.iter().map(RuleProblem::rule).collect::<Vec<_>>(),
            [1, 2, 3, 4, 4, 5, 7]
        );
        assert_eq!(
            check(
                &[
                    rule("Bash", Some("cargo *"), RuleDecision::Allow),
                    rule("Bash", Some("cargo *"), RuleDecision::Deny),
                ],
                1
            ),
            vec![],
            "a narrow allow does not catch all a deny of the same pattern would"
        );
        assert_eq!(
            check(
                &[
                    rule("Bash", Some("cargo *"), RuleDecision::Deny),
                    rule("Bash", Some("cargo *"), RuleDecision::Allow),
                ],
                1
            ),
            vec![RuleProblem::Shadowed { rule: 2, by: 1 }],
            "a wide deny catches all a narrow allow of the same pattern would"
        );
    }

    #[test]
    fn the_check_bounds_pattern_lengths_and_the_quorum() {
        let at = |n: usize| "a".repeat(n);
        let fine = check(
            &[
                rule(&at(PATTERN_MAX_CHARS), None, RuleDecision::Deny),
                rule("Bash", Some(&at(PATTERN_MAX_CHARS)), RuleDecision::Deny),
                rule(
                    "Read",
                    None,
                    RuleDecision::Ask {
                        approvers: MAX_QUORUM,
                    },
                ),
            ],
            MAX_QUORUM,
        );
        assert_eq!(fine, vec![]);
        let long = check(
            &[
                rule(&at(PATTERN_MAX_CHARS + 1), None, RuleDecision::Deny),
                rule("Bash", Some(&at(PATTERN_MAX_CHARS + 1)), RuleDecision::Deny),
                rule(
                    "Read",
                    None,
                    RuleDecision::Ask {
                        approvers: MAX_QUORUM + 1,
                    },
                ),
            ],
            MAX_QUORUM + 1,
        );
        assert_eq!(
            long,
            vec![
                RuleProblem::TooLong { rule: 1 },
                RuleProblem::TooLong { rule: 2 },
                RuleProblem::Quorum {
                    rule: 3,
                    approvers: MAX_QUORUM + 1
                },
            ]
        );
    }
}
