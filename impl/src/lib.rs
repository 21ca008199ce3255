#![recursion_limit = "256"]
//! matrix-channel server.
// The pure modules live in `impl/adapters/` (crate `mc_adapters`, see AGENTS.md).
pub use mc_adapters::{config, decode, fit, split, summary};
pub mod audit;
pub mod crypto;
pub mod engine;
pub mod files;
pub mod health;
pub mod http;
pub mod journal;
pub mod matrix;
pub mod mcp;
pub mod metrics;
pub mod operator;
pub mod outbox;
pub mod rate_limit;
pub mod server;
pub mod shutdown;
pub mod stdio;
pub mod store;
#[cfg(test)]
mod testing;
pub mod write;
