//! The eight scenarios of issue 3, one module each, and `tools`: the contract of
//! every MCP tool on both mounts (README "HTTP and MCP", `impl/src/mcp.rs`), and
//! `catchup`: search, unread and profiles (issue 28).

mod attacks;
mod auth;
mod catchup;
mod chat;
mod claude_code;
mod claude_fleet;
mod config_check;
mod cross_signing;
mod encrypted;
mod mcp_conformance;
mod metrics;
mod permission_reaction;
mod permission_text;
mod plaintext;
mod relations;
mod replay;
mod restart;
mod session_rooms;
mod shutdown;
mod stdio;
mod stream;
mod sync;
mod tools;
mod transport;
mod withdrawn;
