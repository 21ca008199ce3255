//! The eight scenarios of issue 3, one module each.

mod auth;
mod chat;
mod permission_reaction;
mod permission_text;
mod relations;
mod replay;
mod restart;
mod stream;
