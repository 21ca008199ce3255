//! Conformance: the model drives the server.
//!
//! Sequences of [`alphabet::Action`]s are generated from the reference
//! ([`world::World`]: the model's [`mc_model::Channel`] in a small world) with
//! proptest-state-machine. Each action is applied to the reference, which predicts
//! the [`world::Observation`]s (notifications per MCP session, events the identity
//! sends to Matrix), and handed to a target through its [`alphabet::Adapter`]:
//! - [`in_process::InProcess`]: the server's adapters and engine with the network in
//!   memory (`tests/in_process.rs`, at least 1,000 sequences per run);
//! - the real binary against Synapse with an MCP client over HTTP
//!   (`tests/real.rs`, at least 20 sequences per run).
//!
//! [`runner::run_sequence`] compares both sides after every action and reports the
//! first difference with the whole sequence. A failing sequence is shrunk and saved
//! under `conformance/regressions/`, and replayed on every run. What is not covered
//! yet is listed, with a reason, in `conformance/skip.txt`.

pub mod alphabet;
pub mod in_process;
pub mod runner;
pub mod world;
