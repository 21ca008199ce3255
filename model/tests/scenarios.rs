//! Scenario tests of the core, driven through [`harness::World`]: one shape each
//! (set up, act, `drive()`, assert the effects), named as the behaviour they pin.
//!
//! One test binary, so a mutation run links it once per mutant.

mod harness;

#[path = "scenarios/agent_writes.rs"]
mod agent_writes;
#[path = "scenarios/attach_grace.rs"]
mod attach_grace;
#[path = "scenarios/bindings.rs"]
mod bindings;
#[path = "scenarios/config.rs"]
mod config;
#[path = "scenarios/delivery.rs"]
mod delivery;
#[path = "scenarios/devices.rs"]
mod devices;
#[path = "scenarios/gap_cut.rs"]
mod gap_cut;
#[path = "scenarios/gate.rs"]
mod gate;
#[path = "scenarios/grants.rs"]
mod grants;
#[path = "scenarios/grants_attacks.rs"]
mod grants_attacks;
#[path = "scenarios/ids.rs"]
mod ids;
#[path = "scenarios/isolation.rs"]
mod isolation;
#[path = "scenarios/policy.rs"]
mod policy;
#[path = "scenarios/prompts.rs"]
mod prompts;
#[path = "scenarios/push_meta.rs"]
mod push_meta;
#[path = "scenarios/reactions.rs"]
mod reactions;
#[path = "scenarios/restart.rs"]
mod restart;
#[path = "scenarios/rooms.rs"]
mod rooms;
#[path = "scenarios/undecryptable.rs"]
mod undecryptable;
#[path = "scenarios/verdicts.rs"]
mod verdicts;
#[path = "scenarios/withdrawal.rs"]
mod withdrawal;
