//! End-to-end tests of matrix-channel (issue 3): a real Synapse on loopback, the real
//! `matrix-channel` binary, and the official MCP TypeScript SDK client
//! (`tests/client/mcp-client.mjs`) as the Claude Code side. The human side is a second
//! Matrix account driven over the Client-Server API.
//!
//! Run: `cargo test -p matrix-channel --test e2e` (the harness starts Synapse itself
//! with `scripts/homeserver/start` and runs `npm ci` in tests/client when needed).
//! `MC_E2E_PARALLEL=N` caps the scenarios running at once (default 2);
//! `MC_E2E_KEEP=1` keeps each server's directory (config, store, serve.log).
//!
//! Every scenario asserts exact notification params, written out from what the test
//! knows (see `harness/expect.rs`). "Nothing arrives" is proved by order where it can
//! be: a later message from the human arrives first, then a bounded quiet period
//! (`harness::QUIET`) shows nothing follows.

mod harness;
mod scenarios;
