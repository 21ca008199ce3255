//! The pure parts of the matrix-channel server, in a crate of their own so that
//! mutation testing rebuilds only them: raw events to model inputs (`decode`), the
//! config file and its validation (`config`), long messages into parts (`split`) whose
//! content fits an event (`fit`), what the read tools return for an event
//! (`summary`), the Host and Origin guard (`origin`), what a POST body is before the
//! MCP library reads it and what a JSON-RPC message is (`jsonrpc`), what the sync loop
//! does about a timeline's gap (`gap`), the params of the notifications a session gets
//! (`params`), the lines and headers of the stdio bridge (`stdio`), and what a write to
//! Matrix decides without the network: the tool-error contract, refusals, the
//! encryption rule (`write_rule`). No network, no async.
//! `mc_server` re-exports the four modules under the same names, and
//! `mc_server::write` what it uses of `write_rule`.
pub mod config;
pub mod decode;
pub mod fit;
pub mod gap;
pub mod jsonrpc;
pub mod origin;
pub mod params;
pub mod split;
pub mod stdio;
pub mod summary;
pub mod write_rule;
