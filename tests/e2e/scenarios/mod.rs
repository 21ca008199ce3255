//! The eight scenarios of issue 3, one module each, and `tools`: the contract of
//! every MCP tool on both mounts (README "HTTP and MCP", `impl/src/mcp.rs`), and
//! `catchup`: search, unread and profiles, `rooms`: the agent's rooms, and
//! `rate_limits`: tool calls and writes over their limits (issue 28).

mod attacks;
mod auth;
mod catchup;
mod chat;
mod claude_code;
mod claude_fleet;
mod config_check;
mod cross_signing;
mod encrypted;
mod files;
mod mcp_conformance;
mod metrics;
mod permission_reaction;
mod permission_text;
mod plaintext;
mod rate_limits;
mod relations;
mod replay;
mod restart;
mod rooms;
mod session_rooms;
mod shutdown;
mod stdio;
mod stream;
mod sync;
mod tools;
mod transport;
mod withdrawn;
