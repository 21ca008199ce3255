//! The pure parts of the matrix-channel server, in a crate of their own so that
//! mutation testing rebuilds only them: raw events to model inputs (`decode`), a
//! decoded timeline event as its model input (`timeline`), the sender's device in the
//! model's terms (`device`), the config file and its validation (`config`), long
//! messages into parts (`split`) whose content fits an event (`fit`), what the read
//! tools return for an event (`summary`), the Host and Origin guard (`origin`), what a
//! POST body is before the MCP library reads it and what a JSON-RPC message is
//! (`jsonrpc`), what the sync loop does about a timeline's gap and how a backfill ends
//! (`gap`), how the sync loop waits and treats a failure (`sync`), the params of the
//! notifications a session gets (`params`), the engine's own rules for executing
//! effects (`effects`), the lines and headers of the stdio bridge (`stdio`), and what
//! a write to Matrix decides without the network: the tool-error contract, refusals,
//! the encryption rule (`write_rule`), what the catch-up tools show of events,
//! searches, unread messages and profiles (`catchup`), the rate limits' settings and
//! their refusal (`rate_limit`), `send_file`'s sources without IO: the SSRF guard's
//! address blocks, file names, what bytes are, the allowed directories (`files`), and
//! the audit trail: its entries from a model
//! step, its hash chain, its lines and times (`audit`). No network, no async, no clock. `mc_server`
//! re-exports `config`, `decode`, `fit`, `split` and `summary` under the same names, and
//! `mc_server::write` what it uses of `write_rule`.
pub mod audit;
pub mod catchup;
pub mod config;
pub mod decode;
pub mod device;
pub mod effects;
pub mod files;
pub mod fit;
pub mod gap;
pub mod jsonrpc;
pub mod metrics;
pub mod origin;
pub mod params;
pub mod rate_limit;
pub mod room_label;
pub mod split;
pub mod stdio;
pub mod summary;
pub mod sync;
pub mod timeline;
pub mod write_rule;
