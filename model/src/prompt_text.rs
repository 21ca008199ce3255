//! The text of a permission prompt in Matrix, and of its outcome edit.
//!
//! The prompt carries the request id verbatim (Claude Code's terminal never shows
//! it, so the approver can only learn it here) and the reply instruction. Everything
//! from the tool call is untrusted: it is clipped on character boundaries before the
//! instruction is appended, so the instruction is never cut, and it is HTML-escaped
//! in `formatted_body`.

use crate::config::IdentityConfig;
use crate::effect::{Decision, PromptText, VerdictSource};
use crate::event::PermissionRequest;
use crate::fallback::clip_chars;
use crate::ids::{Label, SessionId};
use crate::policy::{RuleDecision, RuleMatch};
use crate::verdict::Behavior;
use html_escape::encode_text;
use regex::Regex;
use std::sync::LazyLock;

/// At most this many characters of `tool_name` are shown.
pub const TOOL_NAME_CHARS: usize = 100;
/// At most this many characters of `description` are shown.
pub const DESCRIPTION_CHARS: usize = 600;
/// At most this many characters of `input_preview` are shown.
pub const PREVIEW_CHARS: usize = 1_200;

/// Format characters (`Cf`: bidi overrides and isolates, zero-width characters):
/// in a prompt they could make a command display as something else.
static FORMAT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\p{Cf}").expect("constant regex"));

/// A field from the tool call without format characters, clipped to `max`
/// characters, with `…` when something was cut.
fn clipped(text: &str, max: usize) -> String {
    let visible = FORMAT.replace_all(text, "");
    match clip_chars(&visible, max) {
        (head, true) => format!("{head}…"),
        (whole, false) => whole.to_owned(),
    }
}

fn html(text: &str) -> String {
    encode_text(text).replace('\n', "<br>")
}

fn keys(keys: impl Iterator<Item = impl AsRef<str>>) -> String {
    keys.map(|k| k.as_ref().to_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// At most this many characters of a session id are shown (Claude Code's and the
/// MCP session ids are UUIDs: the first 8 tell a handful of sessions apart).
pub const SESSION_CHARS: usize = 8;

/// Who asks: the session, and the label it attached with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Asker<'a> {
    pub label: Option<&'a Label>,
    pub session: &'a SessionId,
}

impl Asker<'_> {
    /// `label (session 1a2b3c4d)`, or `session 1a2b3c4d` without a label.
    pub fn name(&self) -> String {
        let visible = FORMAT.replace_all(self.session.as_str(), "");
        let (short, _) = clip_chars(&visible, SESSION_CHARS);
        match self.label {
            Some(label) => format!("{label} (session {short})"),
            None => format!("session {short}"),
        }
    }
}

/// The prompt posted for `request`: who asks (a labelled session: its label and
/// short session id; an unlabelled one is not named, as before session rooms), the
/// tool, the description, the input preview, then the instruction line with the
/// request id, in plain text and HTML.
pub fn render_prompt(
    config: &IdentityConfig,
    request: &PermissionRequest,
    asker: Option<Asker<'_>>,
) -> PromptText {
    render_asked(config, request, asker, None)
}

/// [`render_prompt`], with the line of the policy rule that asks (how many
/// approvers it needs) before the instruction line when `rule` is given.
pub fn render_asked(
    config: &IdentityConfig,
    request: &PermissionRequest,
    asker: Option<Asker<'_>>,
    rule: Option<&RuleMatch>,
) -> PromptText {
    let id = request.request_id.as_str();
    let who = asker
        .filter(|asker| asker.label.is_some())
        .map(|asker| asker.name());
    let from_plain = who
        .as_ref()
        .map(|who| format!(" from {who}"))
        .unwrap_or_default();
    let from_html = who
        .as_ref()
        .map(|who| format!(" from <b>{}</b>", html(who)))
        .unwrap_or_default();
    let tool = clipped(&request.tool_name, TOOL_NAME_CHARS);
    let description = clipped(&request.description, DESCRIPTION_CHARS);
    let preview = clipped(&request.input_preview, PREVIEW_CHARS);
    let approve = keys(config.reaction_keys.approve());
    let deny = keys(config.reaction_keys.deny());
    let instruction =
        format!("Reply \"yes {id}\" to allow or \"no {id}\" to deny, or react {approve} / {deny}.");
    let rule_line = rule.map(|rule| {
        let (what, _) = clip_chars(&rule.what, RULE_CHARS);
        match rule.decision {
            RuleDecision::Ask { approvers } if approvers > 1 => format!(
                "Rule {} ({what}) asks {approvers} approvers: it is allowed when {approvers} \
                 of you said yes, and denied by a single no.",
                rule.number
            ),
            _ => format!("Rule {} ({what}) asks every time.", rule.number),
        }
    });
    let plain_rule = rule_line
        .as_ref()
        .map(|line| format!("{line}\n"))
        .unwrap_or_default();
    let html_rule = rule_line
        .as_ref()
        .map(|line| format!("<p>{}</p>", html(line)))
        .unwrap_or_default();
    let plain = format!(
        "🔐 Permission request {id}{from_plain}: Claude Code wants to run {tool}\n\
         {description}\nInput: {preview}\n\n{plain_rule}{instruction}"
    );
    let html = format!(
        "<p>🔐 Permission request <code>{id}</code>{from_html}: Claude Code wants to run <b>{}</b></p>\
         <p>{}</p><pre><code>{}</code></pre>{html_rule}<p>{}</p>",
        html(&tool),
        html(&description),
        encode_text(&preview),
        html(&instruction),
    );
    PromptText { plain, html }
}

/// At most this many characters of a rule's tool and input patterns are shown.
pub const RULE_CHARS: usize = 200;

/// The line telling the room a policy rule decided `request` (no prompt was
/// posted): `✅ Allowed by rule 2: permission request abcde (Bash)`.
pub fn render_ruled(request: &PermissionRequest, behavior: Behavior, rule: usize) -> PromptText {
    let id = request.request_id.as_str();
    let tool = clipped(&request.tool_name, TOOL_NAME_CHARS);
    let head = match behavior {
        Behavior::Allow => format!("✅ Allowed by rule {rule}"),
        Behavior::Deny => format!("❌ Denied by rule {rule}"),
    };
    PromptText {
        plain: format!("{head}: permission request {id} ({tool})"),
        html: format!(
            "<p>{}: permission request <code>{id}</code> (<b>{}</b>)</p>",
            html(&head),
            html(&tool)
        ),
    }
}

/// The edit of a prompt withdrawn because the session that asked disconnected
/// (docs/decisions/0030-withdrawn-prompts.md): `⏸ Withdrawn: permission request
/// abcde (Bash) from api (session 5f0c2d9e). …` (a session without a label is not
/// named, as in [`render_asked`]), then why an answer counts for nothing and when
/// it opens again, in plain text and HTML.
pub fn render_withdrawn(request: &PermissionRequest, asker: Asker<'_>) -> PromptText {
    let id = request.request_id.as_str();
    let tool = clipped(&request.tool_name, TOOL_NAME_CHARS);
    let who = Some(asker)
        .filter(|asker| asker.label.is_some())
        .map(|asker| asker.name());
    let from_plain = who
        .as_ref()
        .map(|who| format!(" from {who}"))
        .unwrap_or_default();
    let from_html = who
        .as_ref()
        .map(|who| format!(" from <b>{}</b>", html(who)))
        .unwrap_or_default();
    let why = "The session that asked disconnected, so an answer here counts for nothing. \
               This prompt opens again if the session connects again.";
    PromptText {
        plain: format!("⏸ Withdrawn: permission request {id} ({tool}){from_plain}. {why}"),
        html: format!(
            "<p>⏸ Withdrawn: permission request <code>{id}</code> (<b>{}</b>){from_html}.</p><p>{why}</p>",
            html(&tool)
        ),
    }
}

/// What a prompt ended as, for its edit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromptOutcome<'a> {
    /// A verdict reached the session that asked.
    Decided(&'a Decision),
    /// The prompt ran out of time unanswered.
    Expired,
    /// The session asked again under the same id; the new prompt replaces this one.
    Superseded,
    /// The identity reached its cap of open prompts; this was the oldest.
    Evicted,
}

/// The edit of a prompt message once its outcome is known.
pub fn render_outcome(request: &PermissionRequest, outcome: PromptOutcome<'_>) -> PromptText {
    let id = request.request_id.as_str();
    let tool = clipped(&request.tool_name, TOOL_NAME_CHARS);
    let head = match outcome {
        PromptOutcome::Decided(decision) => {
            let (mark, word) = match decision.behavior {
                Behavior::Allow => ("✅", "Allowed"),
                Behavior::Deny => ("❌", "Denied"),
            };
            let how = match &decision.via {
                VerdictSource::Text { .. } => "by reply".to_owned(),
                VerdictSource::Reaction { key, .. } => format!("with {key}"),
                VerdictSource::Grant { grant } => format!("with grant {grant}"),
                VerdictSource::Policy { rule } => {
                    return render_ruled(request, decision.behavior, *rule)
                }
            };
            format!("{mark} {word} by {} {how}", decision.by)
        }
        PromptOutcome::Expired => "⌛ Expired: no answer in time".to_owned(),
        PromptOutcome::Superseded => "⌛ Replaced: the session asked again".to_owned(),
        PromptOutcome::Evicted => "⌛ Dropped: too many open permission requests".to_owned(),
    };
    let plain = format!("{head}: permission request {id} ({tool})");
    let html = format!(
        "<p>{}: permission request <code>{id}</code> (<b>{}</b>)</p>",
        html(&head),
        html(&tool)
    );
    PromptText { plain, html }
}
