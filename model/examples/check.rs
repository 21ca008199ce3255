//! Runs the full model check and prints what it found: `cargo run --release -p matrix-channel-model --example check`.
//! `SCOPE=prompts` checks the Prompts scope; `BOUNDS` replaces its bounds, in the order
//! of `Bounds`' fields (events, messages, reactions, redactions, edits, requests,
//! failures, acks, toggles, early_ticks, noise, agent, reconfigs, steps); `THREADS`;
//! the arguments are a state count to stop at (0: none) and a property whose path to
//! print.
#[path = "../tests/check/mod.rs"]
mod check;

use check::World;
use stateright::{Checker, Model};
use std::time::Instant;

fn main() {
    let started = Instant::now();
    let limit: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("a state count"))
        .unwrap_or(0);
    let scope = match std::env::var("SCOPE").as_deref() {
        Ok("prompts") => check::Scope::Prompts,
        _ => check::Scope::Delivery,
    };
    let mut world = World::new(scope);
    if let Ok(spec) = std::env::var("BOUNDS") {
        let v: Vec<u8> = spec
            .split(',')
            .map(|x| x.parse().expect("a number"))
            .collect();
        world.bounds = check::Bounds {
            events: v[0],
            messages: v[1],
            reactions: v[2],
            redactions: v[3],
            edits: v[4],
            requests: v[5],
            failures: v[6],
            acks: v[7],
            toggles: v[8],
            early_ticks: v[9],
            noise: v[10],
            agent: v[11],
            reconfigs: v[12],
            steps: v[13],
        };
    }
    let threads: usize = std::env::var("THREADS")
        .map(|t| t.parse().expect("a number"))
        .unwrap_or(1);
    let mut builder = world.checker().threads(threads);
    if limit > 0 {
        builder = builder.target_state_count(limit);
    }
    let checker = builder.spawn_bfs().join();
    let elapsed = started.elapsed();
    let unique = checker.unique_state_count();
    println!("unique states: {unique}");
    println!("states visited: {}", checker.state_count());
    println!("max depth: {}", checker.max_depth());
    println!(
        "time: {:.2} s ({:.0} states/s)",
        elapsed.as_secs_f64(),
        unique as f64 / elapsed.as_secs_f64()
    );
    let mut names: Vec<_> = checker.discoveries().into_keys().collect();
    names.sort();
    for name in names {
        println!("discovered: {name}");
    }
    if let Some(name) = std::env::args().nth(2) {
        let found = checker.discoveries();
        if let Some((_, path)) = found.iter().find(|(n, _)| **n == name) {
            for action in path.clone().into_actions() {
                println!("  {action:?}");
            }
            println!("{:#?}", path.last_state());
        }
        return;
    }
    checker.assert_properties();
    println!("all properties hold");
}
