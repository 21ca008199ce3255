//! Runs action sequences against a target and compares, after every action, what
//! the target did with what the reference predicts.

use crate::alphabet::{drive, Action, ActionKind, Adapter};
use crate::world::{
    precondition, Mode, ModeOf, Observation, Reference, Sess, World, VERDICT_METHOD,
};
use mc_model::Channel;
use proptest::strategy::Strategy;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use proptest_state_machine::ReferenceStateMachine;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A server that conformance can drive.
pub trait Target: Adapter {
    /// What the server did since the last call, once it is quiet. `expected` is what
    /// the reference predicts: a real target waits for that much, then a little more.
    fn observed(&mut self, expected: &[Observation]) -> Vec<Observation>;
    /// The server's model state, when the target can read it (in process).
    fn state(&mut self) -> Option<Channel>;
}

impl Target for crate::in_process::InProcess {
    fn observed(&mut self, _: &[Observation]) -> Vec<Observation> {
        self.take_observed()
    }

    fn state(&mut self) -> Option<Channel> {
        Some(self.channel())
    }
}

/// A saved sequence: replayed on every run (`conformance/regressions/*.json`).
#[derive(Debug, Serialize, Deserialize)]
pub struct Regression {
    pub mode: Mode,
    pub actions: Vec<Action>,
}

/// Notifications per session in order, and the identities' sends in a canonical
/// order (the server sends to Matrix from concurrent tasks).
fn canonical(observations: &[Observation]) -> (Vec<(Sess, Vec<&Observation>)>, Vec<&Observation>) {
    let per_session = Sess::ALL
        .into_iter()
        .map(|s| {
            let n = observations
                .iter()
                .filter(|o| matches!(o, Observation::Notification { session, .. } if *session == s))
                .collect();
            (s, n)
        })
        .collect();
    let mut sent: Vec<&Observation> = observations
        .iter()
        .filter(|o| !matches!(o, Observation::Notification { .. }))
        .collect();
    sent.sort_by_key(|o| serde_json::to_string(o).unwrap_or_default());
    (per_session, sent)
}

fn pretty<T: Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("<{e}>"))
}

/// Runs `actions` from a fresh world against `target`. `seen` counts the actions
/// applied (proptest-state-machine's shrinking uses it).
///
/// # Errors
/// A report naming the first action after which the target differed from the
/// reference: the sequence, the model inputs of that step, and both sides.
pub fn run_sequence<T: Target + ?Sized>(
    mode: Mode,
    actions: &[Action],
    target: &mut T,
    seen: Option<&AtomicUsize>,
) -> Result<(), String> {
    run_counted(mode, actions, target, seen, &mut Coverage::default())
}

/// How often each action kind ran and each kind of observation was seen.
#[derive(Clone, Debug, Default)]
pub struct Coverage {
    pub sequences: usize,
    pub steps: usize,
    pub actions: BTreeMap<&'static str, usize>,
    pub observations: BTreeMap<String, usize>,
    /// Finer cases: each agent write by tool, target and answer; `yes <id>`
    /// replying to a message that is not a prompt; what became of an undecryptable
    /// event, and whether its room key came before or after the grace period.
    pub cases: BTreeMap<String, usize>,
    /// The action kinds no random sequence contained, each given one more sequence
    /// that does ([`check_with`]).
    pub topped_up: Vec<&'static str>,
}

impl Coverage {
    /// Adds `other`'s counts to these (the coverage of two runs together).
    pub fn absorb(&mut self, other: Coverage) {
        self.sequences += other.sequences;
        self.steps += other.steps;
        for (k, n) in other.actions {
            *self.actions.entry(k).or_default() += n;
        }
        for (k, n) in other.observations {
            *self.observations.entry(k).or_default() += n;
        }
        for (k, n) in other.cases {
            *self.cases.entry(k).or_default() += n;
        }
        self.topped_up.extend(other.topped_up);
    }

    /// Counts one step; `told` is the case the reference tells ([`World::case`]).
    fn count(&mut self, action: &Action, observed: &[Observation], told: Option<String>) {
        self.steps += 1;
        *self.actions.entry(action.kind().name()).or_default() += 1;
        if let Some(case) = told.or_else(|| case(action, observed)) {
            *self.cases.entry(case).or_default() += 1;
        }
        for o in observed {
            let kind = match o {
                Observation::Notification { method, params, .. } => {
                    match params.pointer("/meta/kind").and_then(|k| k.as_str()) {
                        Some(kind) => format!("{method} ({kind})"),
                        None => method.clone(),
                    }
                }
                Observation::Sent {
                    event_id: Some(id),
                    event_type,
                    content,
                    ..
                } if !id.0.starts_with("$mc-prompt-") => match event_type.as_str() {
                    "m.room.message" if content.get("m.new_content").is_some() => {
                        "agent edit".to_owned()
                    }
                    "m.room.message" if content.get("m.relates_to").is_some() => {
                        "agent reply or thread message".to_owned()
                    }
                    "m.room.message" => "agent message".to_owned(),
                    "m.reaction" => "agent reaction".to_owned(),
                    other => format!("agent {other}"),
                },
                Observation::Sent {
                    event_id: Some(_), ..
                } => "prompt posted".to_owned(),
                Observation::Sent { content, .. } if content.get("m.new_content").is_some() => {
                    "prompt edited".to_owned()
                }
                Observation::Sent { .. } => "notice".to_owned(),
                Observation::Wrote { answer, .. } => match answer {
                    crate::world::ToolAnswer::Sent { .. } => "write tool: sent".to_owned(),
                    crate::world::ToolAnswer::Error { kind } => format!("write tool: {kind}"),
                },
                Observation::Acknowledged { acknowledged, .. } => {
                    format!("acknowledge tool: {acknowledged}")
                }
                Observation::Joined { .. } => "joined".to_owned(),
                Observation::Bind { answer, .. } => format!("bind: {}", answer.case()),
                Observation::Revoked { .. } => "revoke".to_owned(),
            };
            *self.observations.entry(kind).or_default() += 1;
        }
    }
}

/// The finer case of `action`, if it has one (see [`Coverage::cases`]).
fn case(action: &Action, observed: &[Observation]) -> Option<String> {
    use crate::world::{AgentOp, AgentRel, Rel, Say, Sel, Text, ToolAnswer};
    let target = |s: &Sel| match s {
        Sel::Prompt(_) => "a prompt",
        Sel::Message(_) => "a message",
        Sel::Own(_) => "its own message",
    };
    match action {
        Action::AgentWrite { op, .. } => {
            let what = match op {
                AgentOp::Send {
                    rel: AgentRel::None,
                    ..
                } => "send".to_owned(),
                AgentOp::Send {
                    rel: AgentRel::Reply { to },
                    ..
                } => format!("reply to {}", target(to)),
                AgentOp::Send {
                    rel: AgentRel::Thread { root, .. },
                    ..
                } => format!("thread on {}", target(root)),
                AgentOp::Edit { of, .. } => format!("edit {}", target(of)),
                AgentOp::React { to, .. } => format!("react to {}", target(to)),
                AgentOp::Redact { target: t, .. } => format!("redact {}", target(t)),
            };
            let say = match op {
                AgentOp::Send { say, .. } | AgentOp::Edit { say, .. } => Some(*say),
                AgentOp::Redact { reason, .. } => *reason,
                AgentOp::React { .. } => None,
            };
            let what = match say {
                Some(Say::Names(_)) => format!("{what} naming an id"),
                Some(Say::Lookalike(_)) => format!("{what} naming a lookalike id"),
                _ => what,
            };
            let answer = observed.iter().find_map(|o| match o {
                Observation::Wrote { answer, .. } => Some(match answer {
                    ToolAnswer::Sent { .. } => "sent".to_owned(),
                    ToolAnswer::Error { kind } => kind.clone(),
                }),
                _ => None,
            });
            Some(format!(
                "agent {what}: {}",
                answer.as_deref().unwrap_or("no answer")
            ))
        }
        Action::Restart { request, reached } => {
            let reposted = observed.iter().any(|o| {
                matches!(o, Observation::Sent { event_id: Some(id), .. } if id.0.starts_with("$mc-prompt-"))
            });
            Some(match (request, reached) {
                (None, _) => "restart between actions".to_owned(),
                (Some(_), true) => {
                    format!("restart with a post the homeserver got (a prompt shown: {reposted})")
                }
                (Some(_), false) => {
                    format!("restart with a post the homeserver lost (a prompt shown: {reposted})")
                }
            })
        }
        Action::Redeliver { .. } => Some(format!(
            "redelivery: {}",
            if observed.is_empty() {
                "nothing seen"
            } else {
                "something seen"
            }
        )),
        Action::Unhandled { kind, .. } => Some(format!("not input: {kind:?}")),
        Action::Membership { change, .. } => Some(format!(
            "membership {change:?}: {}",
            if observed.is_empty() {
                "nothing seen"
            } else {
                "joined"
            }
        )),
        Action::InvalidPermissionRequest { bad, .. } => {
            Some(format!("invalid permission_request: {bad:?}"))
        }
        Action::Message {
            text: Text::Yes(_),
            rel: Rel::Reply {
                to: Sel::Message(_),
                ..
            },
            ..
        } => Some("yes <id> replying to a message".to_owned()),
        Action::Message {
            text: Text::Always(_) | Text::AlwaysPrefix(_) | Text::YesFor(_),
            ..
        } => Some(format!(
            "grant: {}",
            if observed.iter().any(|o| matches!(o, Observation::Sent { content, .. }
                if content["body"].as_str().is_some_and(|b| b.starts_with("Grant ")))) {
                "made"
            } else {
                "not made"
            }
        )),
        Action::Message {
            text: Text::BindTo(_) | Text::Unbind | Text::Grants | Text::Revoke(_),
            sender,
            ..
        } => Some(format!(
            "room command by {sender:?}: {}",
            if observed
                .iter()
                .any(|o| matches!(o, Observation::Sent { event_id: None, .. }))
            {
                "answered"
            } else {
                "not answered"
            }
        )),
        // A closed stream withdraws its session's prompts; attaching opens them.
        Action::Detach { .. } | Action::Attach { .. } | Action::AttachLabelled { .. } => {
            let edited = |head: &str| {
                observed.iter().any(|o| matches!(o, Observation::Sent { content, .. }
                    if content["m.new_content"]["body"].as_str().is_some_and(|b| b.starts_with(head))))
            };
            if edited("⏸ Withdrawn") {
                Some("prompt withdrawn".to_owned())
            } else if edited("🔐") {
                Some("prompt opened again".to_owned())
            } else {
                None
            }
        }
        // An answer to a withdrawn prompt: a notice, and no verdict.
        Action::Message { .. }
            if observed.iter().any(|o| matches!(o, Observation::Sent { content, .. }
                if content["body"].as_str().is_some_and(|b| b.contains(" is withdrawn: ")))) =>
        {
            Some("answer to a withdrawn prompt".to_owned())
        }
        // A request a rule denies: its verdict, and a line replying to nothing.
        Action::PermissionRequest { .. }
            if observed.iter().any(|o| matches!(o, Observation::Sent { content, .. }
                if content["body"].as_str().is_some_and(|b| b.starts_with("❌ Denied by rule")))) =>
        {
            Some("request denied by a rule".to_owned())
        }
        // A request a grant answers: its verdict, and no prompt.
        Action::PermissionRequest { .. }
            if observed.iter().any(|o| {
                matches!(o, Observation::Notification { method, .. } if method == VERDICT_METHOD)
            }) =>
        {
            Some("request answered by a grant".to_owned())
        }
        // A labelled session's prompt names it (`from web (session s1-00000)`).
        Action::PermissionRequest { .. } => observed.iter().find_map(|o| match o {
            Observation::Sent {
                event_id: Some(id),
                content,
                ..
            } if id.0.starts_with("$mc-prompt-") => Some(
                if content["body"]
                    .as_str()
                    .is_some_and(|b| b.contains(" (session "))
                {
                    "prompt of a labelled session".to_owned()
                } else {
                    "prompt of an unlabelled session".to_owned()
                },
            ),
            _ => None,
        }),
        _ => None,
    }
}

fn run_counted<T: Target + ?Sized>(
    mode: Mode,
    actions: &[Action],
    target: &mut T,
    seen: Option<&AtomicUsize>,
    coverage: &mut Coverage,
) -> Result<(), String> {
    coverage.sequences += 1;
    let mut world = World::new(mode);
    for (step, action) in actions.iter().enumerate() {
        if let Some(seen) = seen {
            seen.fetch_add(1, Ordering::SeqCst);
        }
        if !precondition(&world, action) {
            return Err(format!("step {step}: {action:?} is not possible here"));
        }
        world.apply(action);
        let report = |what: &str, expected: String, actual: String| {
            let sequence: Vec<String> = actions
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    format!(
                        "{}{i:>3}: {}",
                        if i == step { ">" } else { " " },
                        serde_json::to_string(a).unwrap_or_default()
                    )
                })
                .collect();
            format!(
                "conformance ({mode:?}): {what} after step {step}\n\nsequence:\n{}\n\nmodel inputs of step {step}:\n{}\n\nthe model predicts:\n{expected}\n\nthe server did:\n{actual}\n",
                sequence.join("\n"),
                pretty(&world.inputs),
            )
        };
        if let Err(e) = drive(target, &world, action) {
            return Err(report("the adapter failed", String::new(), e));
        }
        let observed = target.observed(&world.expected);
        coverage.count(action, &observed, world.case.clone());
        let (expected_n, expected_s) = canonical(&world.expected);
        let (actual_n, actual_s) = canonical(&observed);
        if expected_n != actual_n || expected_s != actual_s {
            return Err(report(
                "observations differ",
                pretty(&world.expected),
                pretty(&observed),
            ));
        }
        if let Some(state) = target.state() {
            let expected = serde_json::to_value(&world.channel).expect("the model serializes");
            let actual = serde_json::to_value(&state).expect("the model serializes");
            if expected != actual {
                return Err(report(
                    "model states differ",
                    pretty(&expected),
                    pretty(&actual),
                ));
            }
        }
    }
    // Nothing more may arrive after the last action.
    let late = target.observed(&[]);
    if !late.is_empty() {
        return Err(format!(
            "conformance ({mode:?}): the server did more after the last step {}:\n{}",
            actions.len().saturating_sub(1),
            pretty(&late)
        ));
    }
    Ok(())
}

/// Where regressions are saved and replayed from.
pub fn regressions_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions")
}

/// The saved regressions of `mode`, with their file names.
pub fn regressions(mode: Mode) -> Vec<(PathBuf, Regression)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(regressions_dir()) else {
        return out;
    };
    let mut paths: Vec<PathBuf> = dir
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    for path in paths {
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let regression: Regression =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if regression.mode == mode {
            out.push((path, regression));
        }
    }
    out
}

/// Generates `cases` sequences of 1 to `max_len` actions, runs each against a fresh
/// target from `make`, and on a failure shrinks it, saves the shrunk sequence under
/// `conformance/regressions/` and panics with the report.
pub fn check<M: ModeOf, T: Target>(cases: u32, max_len: usize, make: impl Fn() -> T) -> Coverage {
    check_with::<M, T>(
        Config {
            cases,
            max_shrink_iters: 2048,
            ..Config::default()
        },
        1..=max_len,
        make,
    )
}

/// [`check`] with proptest settings (a real target limits shrinking by time).
///
/// After `config.cases` random sequences, every action kind [`required_kinds`] names
/// for the mode that none of them contained gets one more sequence, drawn from the
/// same generator until it contains that kind (at most proptest's local reject limit
/// of draws, 65,536 by default). So the coverage assertions do not depend on the
/// luck of one run, and a kind the generator cannot reach still fails them.
pub fn check_with<M: ModeOf, T: Target>(
    config: Config,
    lengths: std::ops::RangeInclusive<usize>,
    make: impl Fn() -> T,
) -> Coverage {
    let coverage = std::sync::Mutex::new(Coverage::default());
    let config = Config {
        failure_persistence: None,
        ..config
    };
    let strategy = || Reference::<M>::sequential_strategy(lengths.clone());
    run_cases::<M, T, _>(config.clone(), strategy(), &make, &coverage);
    for kind in required_kinds(M::MODE) {
        let reached = {
            let coverage = coverage.lock().unwrap_or_else(|e| e.into_inner());
            coverage.actions.contains_key(kind.name())
        };
        if reached {
            continue;
        }
        let containing = strategy().prop_filter(
            format!("a sequence with a {} action", kind.name()),
            move |(_, actions, _): &(World, Vec<Action>, Option<Arc<AtomicUsize>>)| {
                actions.iter().any(|a| a.kind() == kind)
            },
        );
        let one = Config {
            cases: 1,
            ..config.clone()
        };
        if run_cases::<M, T, _>(one, containing, &make, &coverage) {
            let mut coverage = coverage.lock().unwrap_or_else(|e| e.into_inner());
            coverage.topped_up.push(kind.name());
        }
    }
    coverage.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// Runs `config.cases` sequences from `strategy`, counting into `coverage`. On a
/// failure: shrinks, saves the shrunk sequence under `conformance/regressions/` and
/// panics with the report. Returns false when the strategy gave up (a filter that
/// rejected too many draws): nothing was run.
fn run_cases<M: ModeOf, T: Target, S>(
    config: Config,
    strategy: S,
    make: &impl Fn() -> T,
    coverage: &std::sync::Mutex<Coverage>,
) -> bool
where
    S: Strategy<Value = (World, Vec<Action>, Option<Arc<AtomicUsize>>)>,
{
    let mut runner = TestRunner::new(config);
    let result = runner.run(
        &strategy,
        |(_, actions, seen): (World, Vec<Action>, Option<Arc<AtomicUsize>>)| {
            let mut target = make();
            let mut coverage = coverage.lock().unwrap_or_else(|e| e.into_inner());
            run_counted(
                M::MODE,
                &actions,
                &mut target,
                seen.as_deref(),
                &mut coverage,
            )
            .map_err(TestCaseError::fail)
        },
    );
    match result {
        Ok(()) => true,
        Err(TestError::Fail(reason, (_, actions, _))) => {
            let regression = Regression {
                mode: M::MODE,
                actions,
            };
            let json = serde_json::to_string_pretty(&regression).expect("actions serialize");
            let name = format!(
                "{}-{:016x}.json",
                match M::MODE {
                    Mode::InProcess => "in-process",
                    Mode::Real => "real",
                },
                fnv1a(&json)
            );
            let path = regressions_dir().join(name);
            let saved = std::fs::create_dir_all(regressions_dir())
                .and_then(|()| std::fs::write(&path, &json));
            let saved = match saved {
                Ok(()) => format!(
                    "saved as {} (replayed on every run; commit it)",
                    path.display()
                ),
                Err(e) => format!("could not save {}: {e}", path.display()),
            };
            panic!("{reason}\nthe shrunk sequence is {saved}");
        }
        Err(TestError::Abort(why)) if why.message().contains("Too many local rejects") => false,
        Err(TestError::Abort(why)) => panic!("conformance aborted: {why}"),
    }
}

/// The entries of `conformance/skip.txt` for `target` (`in_process` or `real`) or for
/// both: what follows the target word, before the `:` and its reason. Panics on a
/// line with no reason or an unknown target.
pub fn skipped(target: &str) -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/skip.txt");
    let text = std::fs::read_to_string(path).expect("conformance/skip.txt");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (head, reason) = l.split_once(':')?;
            assert!(!reason.trim().is_empty(), "skip.txt: no reason in {l:?}");
            let (t, what) = head.split_once(' ')?;
            assert!(
                ["in_process", "real", "both"].contains(&t),
                "skip.txt: unknown target in {l:?}"
            );
            (t == target || t == "both").then(|| what.trim().to_owned())
        })
        .collect()
}

/// The action kinds that `conformance/skip.txt` does not skip for `mode`: the
/// generator must reach every one of them.
pub fn required_kinds(mode: Mode) -> Vec<ActionKind> {
    let skipped = skipped(match mode {
        Mode::InProcess => "in_process",
        Mode::Real => "real",
    });
    ActionKind::ALL
        .iter()
        .copied()
        .filter(|k| !skipped.iter().any(|s| s == k.name()))
        .collect()
}

/// A stable 64-bit FNV-1a hash, for file names.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
