//! The classifier: what one event is, given what the sender gate said.
//!
//! The gate's result is an argument, so "a stranger's `yes abcde` is ignored" is a
//! question a test can ask of [`classify_message`] directly.

use crate::config::Gate;
use crate::effect::DropReason;
use crate::event::{Message, MessageContent, MsgType, NewContent, Relation};
use crate::fallback::strip_plain_reply_fallback;
use crate::ids::{EventId, Label};
use crate::reaction::ReactionKeys;
use crate::verdict::{parse_text_verdict, Behavior, TextVerdict};

/// What a message is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MessageClass<'a> {
    /// Not acted on, for this reason.
    Drop(DropReason),
    /// A `yes abcde` / `no abcde` from an approver. Never pushed as chat.
    Verdict(TextVerdict),
    /// An approver's `bind <label>` or `unbind` (see [`parse_room_command`]). Never
    /// pushed as chat.
    Command(RoomCommand),
    /// Chat to push.
    Chat(&'a MessageContent),
    /// An edit (`m.replace`) of `original`, never a verdict.
    Edit {
        original: &'a EventId,
        new_content: &'a NewContent,
    },
}

/// What an approver can type in a room to bind it (docs/decisions/0026-session-rooms.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RoomCommand {
    /// `bind <label>`: this room becomes the label's room.
    Bind(Label),
    /// `unbind`: the label bound to this room, if any, is unbound.
    Unbind,
    /// `grants`, `revoke <n>`, `revoke all` (docs/decisions/0027-grants.md).
    Grant(GrantCommand),
}

/// What an approver can type about grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrantCommand {
    /// `grants`: list them.
    List,
    /// `revoke <n>` (`Some(n)`) or `revoke all` (`None`).
    Revoke(Option<u64>),
}

/// Reads `bind <label>`, `unbind`, `grants`, `revoke <n>` (`n` in decimal ASCII
/// digits) or `revoke all` (each word in any case, surrounding whitespace ignored,
/// nothing else in the body); `None` for anything else, a `bind` whose label is no
/// [`Label`] included.
pub fn parse_room_command(body: &str) -> Option<RoomCommand> {
    let mut words = body.split_whitespace();
    let command = match (words.next(), words.next()) {
        (Some(word), Some(label)) if word.eq_ignore_ascii_case("bind") => {
            RoomCommand::Bind(Label::parse(label).ok()?)
        }
        (Some(word), None) if word.eq_ignore_ascii_case("unbind") => RoomCommand::Unbind,
        (Some(word), None) if word.eq_ignore_ascii_case("grants") => {
            RoomCommand::Grant(GrantCommand::List)
        }
        (Some(word), Some(which)) if word.eq_ignore_ascii_case("revoke") => {
            RoomCommand::Grant(GrantCommand::Revoke(match which {
                all if all.eq_ignore_ascii_case("all") => None,
                n if n.bytes().all(|b| b.is_ascii_digit()) => Some(n.parse().ok()?),
                _ => return None,
            }))
        }
        _ => return None,
    };
    words.next().is_none().then_some(command)
}

/// The body a verdict is read from: the reply fallback is stripped only when a reply
/// relation is present.
pub fn verdict_body(content: &MessageContent) -> &str {
    match content.relation.as_ref().and_then(Relation::reply_to) {
        Some(_) => strip_plain_reply_fallback(&content.body),
        None => &content.body,
    }
}

/// Classifies a message from a sender the gate judged `gate`.
///
/// Order: the gate (own events and strangers stop here), then missing content,
/// notices, edits, an approver's room command (`m.text` only), verdict shape, chat. Only an approver's `m.text` or `m.emote` is
/// a verdict; verdict-shaped text anywhere else (an edit's new content, a caption,
/// another msgtype, a non-approver) is dropped, never pushed as chat.
pub fn classify_message(gate: Gate, message: &Message) -> MessageClass<'_> {
    match gate {
        Gate::Own => return MessageClass::Drop(DropReason::OwnEvent),
        Gate::Stranger => return MessageClass::Drop(DropReason::Stranger),
        Gate::Allowed | Gate::Approver => {}
    }
    let Some(content) = &message.content else {
        return MessageClass::Drop(DropReason::NoContent);
    };
    if content.msgtype == MsgType::Notice {
        return MessageClass::Drop(DropReason::Notice);
    }
    if let Some(Relation::Replacement {
        original,
        new_content,
    }) = &content.relation
    {
        return match new_content {
            // An edit is never a verdict, and verdict-shaped text never reaches the
            // agent as chat.
            Some(new) if parse_text_verdict(&new.body).is_some() => {
                MessageClass::Drop(DropReason::VerdictShaped)
            }
            Some(new_content) => MessageClass::Edit {
                original,
                new_content,
            },
            None => MessageClass::Drop(DropReason::EditRejected),
        };
    }
    let textual = matches!(content.msgtype, MsgType::Text | MsgType::Emote);
    if gate == Gate::Approver && content.msgtype == MsgType::Text {
        if let Some(command) = parse_room_command(verdict_body(content)) {
            return MessageClass::Command(command);
        }
    }
    match parse_text_verdict(verdict_body(content)) {
        Some(verdict) if gate == Gate::Approver && textual => MessageClass::Verdict(verdict),
        Some(_) if gate == Gate::Approver => MessageClass::Drop(DropReason::VerdictShaped),
        Some(_) => MessageClass::Drop(DropReason::NotApprover),
        None => MessageClass::Chat(content),
    }
}

/// What a reaction is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReactionClass {
    /// Not acted on, for this reason.
    Drop(DropReason),
    /// An approver's vote on a prompt.
    Vote(Behavior),
    /// A reaction to push.
    Chat,
}

/// Classifies a reaction from a sender the gate judged `gate`. Only a reaction on a
/// prompt event (`on_prompt`) with a key in the approve or deny set is a vote.
pub fn classify_reaction(
    gate: Gate,
    keys: &ReactionKeys,
    on_prompt: bool,
    key: &str,
) -> ReactionClass {
    match gate {
        Gate::Own => ReactionClass::Drop(DropReason::OwnEvent),
        Gate::Stranger => ReactionClass::Drop(DropReason::Stranger),
        Gate::Allowed | Gate::Approver => match keys.classify(key).filter(|_| on_prompt) {
            Some(behavior) if gate == Gate::Approver => ReactionClass::Vote(behavior),
            Some(_) => ReactionClass::Drop(DropReason::NotApprover),
            None => ReactionClass::Chat,
        },
    }
}
