//! The reference state machine for proptest-state-machine ([`Reference`], its mode
//! at the type level through [`ModeOf`]) and the generator ([`transitions`]): every
//! action the state allows, weighted towards the interesting. The alternatives'
//! order and weights decide which sequences an RNG seed draws.

use super::agent::agent_write_options;
use super::precondition::real_membership_possible;
use super::{
    precondition, BadRequest, Change, Ident, Key, Lbl, Mode, Odd, Redactor, Rel, Rid, Sel, Sess,
    Text, Who, World, ATTACH_GRACE, CHAT, GRACE, SETTLE, TTL,
};
use crate::alphabet::{kind_of, Action};
use mc_model::SessionPhase;
use proptest::prelude::*;
use proptest_state_machine::ReferenceStateMachine;

/// The reference state machine for proptest-state-machine; `M` picks the mode.
pub struct Reference<M>(std::marker::PhantomData<M>);

/// A mode at the type level.
pub trait ModeOf: 'static {
    const MODE: Mode;
}

/// [`Mode::InProcess`].
pub struct InProcessMode;
impl ModeOf for InProcessMode {
    const MODE: Mode = Mode::InProcess;
}

/// [`Mode::Real`].
pub struct RealMode;
impl ModeOf for RealMode {
    const MODE: Mode = Mode::Real;
}

impl<M: ModeOf> ReferenceStateMachine for Reference<M> {
    type State = World;
    type Transition = Action;

    fn init_state() -> BoxedStrategy<World> {
        Just(World::new(M::MODE)).boxed()
    }

    fn transitions(world: &World) -> BoxedStrategy<Action> {
        transitions(world)
    }

    fn apply(mut world: World, action: &Action) -> World {
        world.apply(action);
        debug_assert!(world.inputs.iter().all(|i| {
            use crate::alphabet::ActionKind as K;
            let k = kind_of(i);
            k == action.kind()
                || k == K::BreakStream
                || k == K::Tick
                || matches!(
                    (action.kind(), k),
                    (K::Restart, K::Membership | K::PermissionRequest)
                        // A known session attaches with its MCP session's label.
                        | (K::Attach, K::AttachLabelled)
                        | (
                            K::Redeliver,
                            K::Message | K::Reaction | K::Redaction | K::Undecryptable
                        )
                        | (K::Decrypt, K::Message)
                )
        }));
        world
    }

    fn preconditions(world: &World, action: &Action) -> bool {
        precondition(world, action)
    }
}

pub(super) fn pick<T: Clone + std::fmt::Debug + 'static>(items: Vec<T>) -> BoxedStrategy<T> {
    proptest::sample::select(items).boxed()
}

/// The generator: every action the state allows, weighted towards the interesting.
pub fn transitions(world: &World) -> BoxedStrategy<Action> {
    let real = world.mode == Mode::Real;
    let mut options: Vec<(u32, BoxedStrategy<Action>)> = Vec::new();
    let (live, idle): (Vec<Sess>, Vec<Sess>) =
        Sess::ALL.into_iter().partition(|s| world.is_attached(*s));
    // A session attaches with the label its MCP session has (none for a new one),
    // or a new one with a label the identity has bound.
    let attachable: Vec<Sess> = idle
        .iter()
        .copied()
        .filter(|s| world.attach_routed(*s, world.label_of(*s, None)))
        .collect();
    // A session whose prompts were withdrawn comes back: they open again.
    let withdrawn_owners: Vec<Sess> = attachable
        .iter()
        .copied()
        .filter(|s| {
            world.channel.identity(&s.ident().id()).is_some_and(|st| {
                st.prompts().iter().any(|p| {
                    p.session == s.id() && matches!(p.phase, mc_model::Phase::Withdrawn { .. })
                })
            })
        })
        .collect();
    if !withdrawn_owners.is_empty() {
        options.push((
            2,
            pick(withdrawn_owners)
                .prop_map(|session| Action::Attach { session })
                .boxed(),
        ));
    }
    if !attachable.is_empty() {
        options.push((
            if real { 8 } else { 4 },
            pick(attachable)
                .prop_map(|session| Action::Attach { session })
                .boxed(),
        ));
    }
    let labelled: Vec<(Sess, Lbl)> = idle
        .iter()
        .filter(|s| !world.known.contains_key(s))
        .flat_map(|s| Lbl::ALL.map(|l| (*s, l)))
        .filter(|(s, l)| world.attach_routed(*s, Some(*l)))
        .collect();
    if !labelled.is_empty() {
        options.push((
            if real { 6 } else { 3 },
            pick(labelled)
                .prop_map(|(session, label)| Action::AttachLabelled { session, label })
                .boxed(),
        ));
    }
    // The operator binds a label to one of the identity's rooms, or unbinds it.
    options.push((
        if real { 2 } else { 1 },
        (
            pick(Ident::ALL.to_vec()),
            pick(Lbl::ALL.to_vec()),
            prop_oneof![3 => (0u8..2).prop_map(Some), 1 => Just(None)],
        )
            .prop_map(|(ident, label, room)| Action::Bind { ident, label, room })
            .boxed(),
    ));
    options.push((
        1,
        (
            pick(Ident::ALL.to_vec()),
            prop_oneof![Just(Some(1u8)), Just(Some(2u8)), Just(None)],
        )
            .prop_map(|(ident, grant)| Action::Revoke { ident, grant })
            .boxed(),
    ));
    // The operator revokes a grant that stands (one in a few thousand sequences
    // reaches one by the blind pick above).
    let standing: Vec<(Ident, Option<u8>)> = Ident::ALL
        .into_iter()
        .flat_map(|ident| {
            let grants = world
                .channel
                .identity(&ident.id())
                .map(|s| s.grants().to_vec())
                .unwrap_or_default();
            let all = (!grants.is_empty()).then_some((ident, None));
            grants
                .into_iter()
                .filter_map(move |g| u8::try_from(g.id).ok().map(|id| (ident, Some(id))))
                .chain(all)
        })
        .collect();
    if !standing.is_empty() {
        options.push((
            2,
            pick(standing)
                .prop_map(|(ident, grant)| Action::Revoke { ident, grant })
                .boxed(),
        ));
    }
    if !live.is_empty() {
        options.push((
            1,
            pick(live.clone())
                .prop_map(|session| Action::Detach { session })
                .boxed(),
        ));
        if !real {
            options.push((
                1,
                pick(live)
                    .prop_map(|session| Action::BreakStream { session })
                    .boxed(),
            ));
        }
    }
    // Ann (the approver) most; in the real target, time goes to prompts and verdicts.
    let mut senders = vec![Who::Ann, Who::Ann, Who::Ann, Who::Carl, Who::Eve];
    if real {
        senders.extend([Who::Ann, Who::Ann]);
    } else {
        senders.push(Who::Bot);
    }
    let rids = vec![Rid::R1, Rid::R2];
    let text = prop_oneof![
        3 => (0..CHAT.len() as u8).prop_map(Text::Chat),
        3 => pick(rids.clone()).prop_map(Text::Yes),
        2 => pick(rids.clone()).prop_map(Text::No),
        1 => Just(Text::Notice),
        1 => Just(Text::Emote),
        1 => pick(Lbl::ALL.to_vec()).prop_map(Text::BindTo),
        1 => Just(Text::Unbind),
        2 => pick(rids.clone()).prop_map(Text::Always),
        1 => pick(rids.clone()).prop_map(Text::AlwaysPrefix),
        1 => pick(rids.clone()).prop_map(Text::YesFor),
        1 => Just(Text::Grants),
        1 => prop_oneof![Just(Some(1u8)), Just(None)].prop_map(Text::Revoke),
    ];
    let has_prompts = world.sel(Sel::Prompt(0)).is_some();
    let has_messages = world.sel(Sel::Message(0)).is_some();
    let sel = {
        let mut sels: Vec<(u32, BoxedStrategy<Sel>)> = Vec::new();
        if has_prompts {
            sels.push((
                if real { 4 } else { 2 },
                (0usize..8).prop_map(Sel::Prompt).boxed(),
            ));
        }
        if has_messages {
            sels.push((1, (0usize..8).prop_map(Sel::Message).boxed()));
        }
        sels
    };
    let mut rels: Vec<(u32, BoxedStrategy<Rel>)> = vec![(4, Just(Rel::None).boxed())];
    if !sel.is_empty() {
        let s = proptest::strategy::Union::new_weighted(sel.clone());
        rels.push((
            3,
            (s.clone(), any::<bool>())
                .prop_map(|(to, fallback)| Rel::Reply { to, fallback })
                .boxed(),
        ));
        rels.push((
            1,
            (s, any::<bool>())
                .prop_map(|(root, reply)| Rel::Thread { root, reply })
                .boxed(),
        ));
    }
    if has_messages {
        rels.push((1, (0usize..8).prop_map(|of| Rel::Edit { of }).boxed()));
    }
    let rel = proptest::strategy::Union::new_weighted(rels);
    let w = world.clone();
    options.push((
        8,
        (
            pick(vec![Ident::A, Ident::A, Ident::B]),
            pick(senders.clone()),
            0u8..2,
            text,
            rel,
        )
            .prop_map(move |(ident, sender, room, text, rel)| {
                let ident = w.rel_target(rel).map_or(ident, |t| w.events[t].ident);
                let sender = if ident.members().contains(&sender) {
                    sender
                } else {
                    Who::Ann
                };
                Action::Message {
                    ident,
                    sender,
                    room,
                    text,
                    rel,
                }
            })
            .boxed(),
    ));
    // Ann answers one of A's prompts not decided yet with a grant, replying to it (typed
    // blind, with a random request id in one of the rooms, one in two hundred
    // makes one).
    let open: Vec<(usize, Rid)> = (0..8)
        .filter_map(|n| {
            let e = &world.events[world.sel(Sel::Prompt(n))?];
            let body = e.content["body"].as_str()?;
            let rid = [Rid::R1, Rid::R2]
                .into_iter()
                .find(|r| body.contains(r.as_str()))?;
            // B's policy asks for its `abcde` every time (no grant is made there).
            (e.edited_body.is_none() && e.ident == Ident::A).then_some((n, rid))
        })
        .collect();
    if !open.is_empty() {
        options.push((
            2,
            (pick(open), 0usize..3, any::<bool>())
                .prop_map(|((to, rid), form, fallback)| Action::Message {
                    ident: Ident::A,
                    sender: Who::Ann,
                    room: 0,
                    text: [Text::Always, Text::AlwaysPrefix, Text::YesFor][form](rid),
                    rel: Rel::Reply {
                        to: Sel::Prompt(to),
                        fallback,
                    },
                })
                .boxed(),
        ));
    }
    // Ann answers a withdrawn prompt (its session's stream closed), replying to it.
    let withdrawn: Vec<(usize, Ident, Rid)> = (0..8)
        .filter_map(|n| {
            let e = &world.events[world.sel(Sel::Prompt(n))?];
            let body = e.content["body"].as_str()?;
            let rid = [Rid::R1, Rid::R2]
                .into_iter()
                .find(|r| body.contains(r.as_str()))?;
            let edited = e.edited_body.as_deref()?;
            edited
                .starts_with("⏸ Withdrawn")
                .then_some((n, e.ident, rid))
        })
        .collect();
    if !withdrawn.is_empty() {
        options.push((
            2,
            (pick(withdrawn), any::<bool>(), any::<bool>())
                .prop_map(|((to, ident, rid), yes, fallback)| Action::Message {
                    ident,
                    sender: Who::Ann,
                    room: 0,
                    text: if yes { Text::Yes(rid) } else { Text::No(rid) },
                    rel: Rel::Reply {
                        to: Sel::Prompt(to),
                        fallback,
                    },
                })
                .boxed(),
        ));
    }
    if !sel.is_empty() {
        let keys = vec![
            Key::Up,
            Key::UpVs16,
            Key::UpTone,
            Key::Down,
            Key::DownTone,
            Key::Heart,
        ];
        let w = world.clone();
        options.push((
            6,
            (
                pick(senders.clone()),
                proptest::strategy::Union::new_weighted(sel),
                pick(keys),
            )
                .prop_map(move |(sender, target, key)| {
                    let ident = w.sel(target).map_or(Ident::A, |t| w.events[t].ident);
                    let sender = if ident.members().contains(&sender) {
                        sender
                    } else {
                        Who::Ann
                    };
                    Action::Reaction {
                        sender,
                        target,
                        key,
                    }
                })
                .boxed(),
        ));
    }
    if world.redactable_sel(0).is_some() {
        let by = if real {
            vec![Redactor::Own, Redactor::Own, Redactor::Ann]
        } else {
            vec![Redactor::Own, Redactor::Own, Redactor::Ann, Redactor::Carl]
        };
        options.push((
            3,
            (pick(by), 0usize..8)
                .prop_map(|(by, target)| Action::Redaction { by, target })
                .boxed(),
        ));
    }
    // The agent's writes through the identity's tools, aimed at prompts, people's
    // messages and its own; in the real target it redacts only its own events.
    options.extend(agent_write_options(world, &rids, has_prompts, has_messages));
    let known: Vec<Sess> = world
        .known
        .keys()
        .copied()
        .filter(|s| !real || world.is_live(*s))
        .collect();
    if !known.is_empty() {
        options.push((
            if real { 9 } else { 5 },
            (pick(known.clone()), pick(rids))
                .prop_map(|(session, rid)| Action::PermissionRequest { session, rid })
                .boxed(),
        ));
    }
    if !known.is_empty() {
        options.push((
            if real { 2 } else { 1 },
            (
                pick(known.clone()),
                pick(vec![
                    BadRequest::MissingField(Rid::R1),
                    BadRequest::MissingField(Rid::R2),
                    BadRequest::BadId,
                ]),
            )
                .prop_map(|(session, bad)| Action::InvalidPermissionRequest { session, bad })
                .boxed(),
        ));
    }
    if has_messages {
        let sessions: Vec<Option<Sess>> = std::iter::once(None)
            .chain(known.into_iter().map(Some))
            .collect();
        let w = world.clone();
        options.push((
            2,
            (pick(vec![Ident::A, Ident::B]), pick(sessions), 0usize..8)
                .prop_filter_map(
                    "no message of the identity",
                    move |(ident, session, target)| {
                        w.ack_sel(ident, target)?;
                        let session = session.filter(|s| s.ident() == ident);
                        Some(Action::Acknowledge {
                            ident,
                            session,
                            target,
                        })
                    },
                )
                .boxed(),
        ));
    }
    // Restarts: rare (a real one costs a second or two), at most one a sequence in
    // the real target and two in process, where the kill may also land while a
    // permission request's prompt post is in flight.
    if precondition(
        world,
        &Action::Restart {
            request: None,
            reached: false,
        },
    ) {
        let mut restarts: Vec<(u32, BoxedStrategy<Action>)> = vec![(
            1,
            Just(Action::Restart {
                request: None,
                reached: false,
            })
            .boxed(),
        )];
        let asking: Vec<Sess> = world
            .known
            .keys()
            .copied()
            .filter(|s| {
                precondition(
                    world,
                    &Action::PermissionRequest {
                        session: *s,
                        rid: Rid::R1,
                    },
                )
            })
            .collect();
        if !real && !asking.is_empty() {
            restarts.push((
                2,
                (pick(asking), pick(vec![Rid::R1, Rid::R2]), any::<bool>())
                    .prop_map(|(s, r, reached)| Action::Restart {
                        request: Some((s, r)),
                        reached,
                    })
                    .boxed(),
            ));
        }
        options.push((
            if real { 3 } else { 1 },
            proptest::strategy::Union::new_weighted(restarts).boxed(),
        ));
    }
    // A real leave: of the rooms Synapse and the reference's wire allow.
    let leavable: Vec<(Ident, u8)> = Ident::ALL
        .into_iter()
        .flat_map(|i| (0..i.rooms().len() as u8).map(move |n| (i, n)))
        .filter(|&(i, n)| real && real_membership_possible(world, i, n, Change::Leave))
        .collect();
    if !leavable.is_empty() {
        options.push((
            2,
            pick(leavable)
                .prop_map(|(ident, room)| Action::Membership {
                    ident,
                    room,
                    change: Change::Leave,
                })
                .boxed(),
        ));
    }
    if !real {
        options.push((
            1,
            (
                pick(vec![Ident::A, Ident::A, Ident::B]),
                0u8..2,
                pick(vec![
                    Change::Leave,
                    Change::Leave,
                    Change::Invite { by: Who::Ann },
                    Change::Invite { by: Who::Carl },
                    Change::Invite { by: Who::Eve },
                ]),
            )
                .prop_map(|(ident, room, change)| {
                    let change = match change {
                        Change::Invite { by: Who::Carl } if ident == Ident::B => {
                            Change::Invite { by: Who::Ann }
                        }
                        c => c,
                    };
                    Action::Membership {
                        ident,
                        room,
                        change,
                    }
                })
                .boxed(),
        ));
    }
    // Invites to the rooms the identity left (or was never let into); on a real
    // homeserver, to the rooms it left only (Synapse refuses to invite a member).
    let left: Vec<(Ident, u8)> = Ident::ALL
        .into_iter()
        .flat_map(|i| (0..i.rooms().len() as u8).map(move |n| (i, n)))
        .filter(|(i, n)| {
            let state = world
                .channel
                .identity(&i.id())
                .and_then(|s| s.rooms().get(&i.room(*n)));
            if real {
                state == Some(&mc_model::JoinState::Left)
            } else {
                state != Some(&mc_model::JoinState::Joined)
            }
        })
        .collect();
    if !left.is_empty() {
        // For real, soon after the leave: the sequence is short.
        options.push((
            if real { 8 } else { 2 },
            (pick(left), pick(vec![Who::Ann, Who::Carl, Who::Eve]))
                .prop_map(|((ident, room), by)| Action::Membership {
                    ident,
                    room,
                    change: Change::Invite {
                        by: if ident.members().contains(&by) {
                            by
                        } else {
                            Who::Ann
                        },
                    },
                })
                .boxed(),
        ));
    }
    if !real && world.redeliverable_sel(0).is_some() {
        options.push((
            2,
            (0usize..8)
                .prop_map(|target| Action::Redeliver { target })
                .boxed(),
        ));
    }
    {
        let w = world.clone();
        options.push((
            1,
            (
                pick(vec![Ident::A, Ident::B]),
                pick(senders.clone()),
                0u8..2,
                pick(vec![Odd::Custom, Odd::Topic]),
            )
                .prop_map(move |(ident, sender, room, kind)| {
                    let sender = if ident.members().contains(&sender) {
                        sender
                    } else {
                        Who::Ann
                    };
                    // Only the rooms' creator may set a topic on a real homeserver.
                    let sender = if w.mode == Mode::Real && kind == Odd::Topic {
                        Who::Ann
                    } else {
                        sender
                    };
                    Action::Unhandled {
                        ident,
                        sender,
                        room,
                        kind,
                    }
                })
                .boxed(),
        ));
    }
    // Encrypted events the server cannot decrypt, and their room keys coming late.
    if !real {
        options.push((
            2,
            (
                pick(vec![Ident::A, Ident::A, Ident::B]),
                pick(senders.clone()),
                0u8..2,
            )
                .prop_map(move |(ident, sender, room)| Action::Undecryptable {
                    ident,
                    sender: if ident.members().contains(&sender) {
                        sender
                    } else {
                        Who::Ann
                    },
                    room,
                })
                .boxed(),
        ));
        if world.decryptable_sel(0).is_some() {
            let rids = vec![Rid::R1, Rid::R2];
            let text = prop_oneof![
                3 => (0..CHAT.len() as u8).prop_map(Text::Chat),
                3 => pick(rids.clone()).prop_map(Text::Yes),
                2 => pick(rids).prop_map(Text::No),
            ];
            options.push((
                2,
                (0usize..8, text)
                    .prop_map(|(target, text)| Action::Decrypt { target, text })
                    .boxed(),
            ));
        }
    }
    if !real {
        options.push((
            1,
            (pick(vec![Ident::A, Ident::B]), 0u8..2)
                .prop_map(|(ident, room)| Action::GapCut { ident, room })
                .boxed(),
        ));
    }
    if !real {
        let mut steps = vec![1, ATTACH_GRACE, SETTLE - 1, SETTLE + 1, GRACE + 1, TTL + 1];
        if let Some(at) = world.channel.next_deadline() {
            let d = at.saturating_since(world.now);
            steps.extend([d.max(1), d.saturating_sub(1).max(1)]);
        }
        options.push((3, pick(steps).prop_map(|ms| Action::Tick { ms }).boxed()));
        // A session inside its attach grace gets its replay only on a tick: one to
        // the end of the grace, often, so replays (and their cuts) are seen.
        let graces = world.channel.identities().flat_map(|(_, i)| {
            i.sessions().values().filter_map(|s| match s {
                SessionPhase::Attaching { until } => Some(*until),
                _ => None,
            })
        });
        if let Some(until) = graces.min() {
            let ms = until.saturating_since(world.now).max(1);
            options.push((12, Just(Action::Tick { ms }).boxed()));
        }
    }
    proptest::strategy::Union::new_weighted(options).boxed()
}
