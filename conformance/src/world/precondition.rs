//! Whether an action can be taken in a world: proptest-state-machine keeps only the
//! generated actions it allows, shrinking checks it again (earlier actions may be
//! gone), and the runner before every step. On a real homeserver an action must also
//! be one Synapse takes and the reference's ideal wire stands for.

use super::{AgentOp, Change, EvKind, Ident, Mode, Odd, Redactor, Rel, Who, World};
use crate::alphabet::Action;
use mc_model::{AgentWrite, MsgType, RoomId};

/// Whether `action` can be taken in `world` (also checked while shrinking, when
/// earlier actions may be gone).
pub fn precondition(world: &World, action: &Action) -> bool {
    let real = world.mode == Mode::Real;
    match *action {
        Action::Attach { session } => {
            !world.is_attached(session)
                && world.attach_routed(session, world.label_of(session, None))
        }
        // A label is given when the MCP session is created: a new session only.
        Action::AttachLabelled { session, label } => {
            !world.known.contains_key(&session) && world.attach_routed(session, Some(label))
        }
        // A room the identity is not joined to is refused (`not_joined`), and on a
        // real server too; any label may be bound or unbound.
        Action::Bind { .. } => true,
        Action::Revoke { .. } => true,
        Action::Detach { session } => world.is_attached(session),
        Action::Message {
            ident, sender, rel, ..
        } => {
            let ident = match world.rel_target(rel) {
                Some(t) => world.events[t].ident,
                None if rel == Rel::None => ident,
                None => return false,
            };
            // Synapse refuses a thread rooted at an event with a relation (400).
            let thread_on_relation = match rel {
                Rel::Thread { root, .. } => world
                    .sel(root)
                    .is_some_and(|t| !world.events[t].content["m.relates_to"].is_null()),
                _ => false,
            };
            ident.members().contains(&sender)
                && !(real && (sender == Who::Bot || thread_on_relation))
        }
        Action::Reaction {
            sender,
            target,
            key,
        } => world.sel(target).is_some_and(|t| {
            let target = &world.events[t];
            // A homeserver refuses a second identical annotation (Synapse:
            // M_DUPLICATE_ANNOTATION) until the first is redacted.
            let duplicate = world.events.iter().any(|e| {
                e.kind == EvKind::Reaction
                    && !e.redacted
                    && e.sender == sender
                    && e.content["m.relates_to"]["event_id"] == target.id.0.as_str()
                    && e.content["m.relates_to"]["key"] == key.as_str()
            });
            target.ident.members().contains(&sender) && !(real && sender == Who::Bot) && !duplicate
        }),
        Action::Redaction { by, target } => world.redactable_sel(target).is_some_and(|t| {
            let e = &world.events[t];
            let sender = match by {
                Redactor::Own => e.sender,
                Redactor::Ann => Who::Ann,
                Redactor::Carl => Who::Carl,
            };
            // On a real homeserver only the sender or a moderator may redact.
            e.ident.members().contains(&sender)
                && !(real && (by == Redactor::Carl && sender != e.sender || sender == Who::Bot))
        }),
        // A real client sends from an open transport.
        Action::PermissionRequest { session, .. } => {
            world.known.contains_key(&session) && (!real || world.is_live(session))
        }
        Action::Acknowledge {
            ident,
            session,
            target,
        } => {
            session.is_none_or(|s| {
                s.ident() == ident && world.known.contains_key(&s) && (!real || world.is_live(s))
            }) && world.ack_sel(ident, target).is_some()
        }
        Action::AgentWrite { ident, op } => agent_write_possible(world, ident, op),
        // A real client sends from an open transport.
        Action::InvalidPermissionRequest { session, .. } => {
            world.known.contains_key(&session) && (!real || world.is_live(session))
        }
        Action::BreakStream { session } => {
            !real && world.is_attached(session) && !world.broken.contains(&session)
        }
        Action::Tick { .. } => !real,
        // A real kill lands between actions (a kill inside one is timed, so it is
        // in-process only): at most one a sequence there, two in process.
        Action::Restart { request, .. } => match request {
            None => world.restarts < if real { 1 } else { 2 },
            Some((session, rid)) => {
                !real
                    && world.restarts < 2
                    && precondition(world, &Action::PermissionRequest { session, rid })
            }
        },
        // A real homeserver delivers each event once.
        Action::Redeliver { target } => !real && world.redeliverable_sel(target).is_some(),
        // A real homeserver cannot be made to deliver an event the server cannot
        // decrypt on demand (conformance/skip.txt).
        Action::Undecryptable { ident, sender, .. } => !real && ident.members().contains(&sender),
        Action::Decrypt { target, text } => {
            !real && text.msgtype() == MsgType::Text && world.decryptable_sel(target).is_some()
        }
        // A real gap larger than the backfill budget needs over 1,000 events
        // (conformance/skip.txt).
        Action::GapCut { .. } => !real,
        // Only Ann (the rooms' creator) may set a room's topic on a real homeserver.
        Action::Unhandled {
            ident,
            sender,
            kind,
            ..
        } => {
            ident.members().contains(&sender)
                && !(real && (sender == Who::Bot || kind == Odd::Topic && sender != Who::Ann))
        }
        // In process anything; on a real homeserver only what Synapse takes and the
        // ideal wire stands for (`real_membership_possible`).
        Action::Membership {
            ident,
            room,
            change,
        } => {
            let person = match change {
                Change::Leave => true,
                Change::Invite { by } => ident.members().contains(&by) && by != Who::Bot,
            };
            person && (!real || real_membership_possible(world, ident, room, change))
        }
    }
}

/// On a real homeserver: a leave of a joined room (or the refusal of a pending
/// invite), and an invite to a room the identity left; Synapse refuses an invite of a
/// member and a leave of a room one is not in. Never a leave of the permission room
/// or of a room the identity posted a prompt in: a prompt post or an edit there
/// would then fail (403), and the reference's wire takes every post.
pub(super) fn real_membership_possible(
    world: &World,
    ident: Ident,
    room: u8,
    change: Change,
) -> bool {
    let id = ident.room(room);
    let state = world
        .channel
        .identity(&ident.id())
        .and_then(|s| s.rooms().get(&id));
    match change {
        Change::Leave => match state {
            Some(mc_model::JoinState::Invited { .. }) => true,
            Some(mc_model::JoinState::Joined) => {
                ident.config(Mode::Real).permission_room.as_ref() != Some(&id)
                    && !world
                        .events
                        .iter()
                        .any(|e| e.kind == EvKind::Prompt && e.ident == ident && e.room == id)
            }
            _ => false,
        },
        Change::Invite { .. } => state == Some(&mc_model::JoinState::Left),
    }
}

/// Whether the agent's write can be asked for here: its selector picks an event that
/// is not redacted (an edit of a redacted message cannot be built, and what the
/// homeserver does with relations to redacted events is not the model's), and on a
/// real homeserver the write must be one Synapse takes when the model lets it
/// through: no second identical annotation, no redaction of another's event (the bot
/// is no moderator), no thread on an event that has a relation.
fn agent_write_possible(world: &World, ident: Ident, op: AgentOp) -> bool {
    let real = world.mode == Mode::Real;
    let Some((writer, write)) = world.agent_write(ident, op) else {
        return false;
    };
    // The tools answer `not_joined` for a room the identity is not in before they ask
    // the model (the in-process adapter hands the model the write directly).
    let room = match &write {
        AgentWrite::Message { room, .. }
        | AgentWrite::Edit { room, .. }
        | AgentWrite::Reaction { room, .. }
        | AgentWrite::Redaction { room, .. } => Some(room),
        _ => None,
    };
    let joined = |room: &RoomId| {
        world
            .channel
            .identity(&writer.id())
            .and_then(|s| s.rooms().get(room))
            == Some(&mc_model::JoinState::Joined)
    };
    if real && !room.is_none_or(joined) {
        return false;
    }
    let Some(t) = world.agent_target(op) else {
        return true;
    };
    let t = &world.events[t];
    if t.redacted {
        return false;
    }
    match (&write, op) {
        (AgentWrite::Reaction { key, .. }, _) => !world.events.iter().any(|e| {
            e.kind == EvKind::Reaction
                && !e.redacted
                && e.sender == Who::Bot
                && e.ident == t.ident
                && e.content["m.relates_to"]["event_id"] == t.id.0.as_str()
                && e.content["m.relates_to"]["key"] == key.as_str()
        }),
        (AgentWrite::Redaction { .. }, _) => !real || t.sender == Who::Bot,
        (AgentWrite::Message { thread_root, .. }, _) => {
            !real
                || thread_root.as_ref().is_none_or(|root| {
                    world
                        .events
                        .iter()
                        .find(|e| e.id == *root)
                        .is_some_and(|e| e.content["m.relates_to"]["rel_type"].is_null())
                })
        }
        _ => true,
    }
}
