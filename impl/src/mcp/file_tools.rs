//! `send_file`: a file from an allowed directory or a guarded `https` URL
//! (`crate::files`), staged by digest (`crate::outbox`) and handed to the model as
//! one [`AgentWrite::File`] through [`McpServer::write_within_limits`], after the
//! write limit was asked ([`McpServer::write_permitted`]) and before anything is read;
//! `write.rs` performs what the model let through (decision 0034).

use super::metadata::Failure;
use super::write_tools::{model_room, relations, target_room};
use super::McpServer;
use crate::fit::MAX_ENCRYPTED_CONTENT_BYTES;
use crate::write::{markdown_text, ToolError};
use matrix_sdk::ruma::TransactionId;
use mc_model::AgentWrite;
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::schemars::{self, JsonSchema};
use rmcp::{tool, tool_router};
use serde::{Deserialize, Serialize};

#[derive(Deserialize, JsonSchema)]
pub struct SendFileArgs {
    /// The room. Without it, on /channel: this session's own room.
    pub room_id: Option<String>,
    /// An absolute path to a file under a directory the operator allows
    /// (`files.allowed_dirs`; symlinks and `..` are resolved first). Exactly one of
    /// `path` and `url`.
    pub path: Option<String>,
    /// An `https` URL to fetch the file from (public addresses only, unless the
    /// operator allows a network). Exactly one of `path` and `url`.
    pub url: Option<String>,
    /// The file name shown; default: the path's or the URL's last segment.
    pub filename: Option<String>,
    /// A caption, markdown (rendered to HTML), shown with the file.
    pub caption: Option<String>,
    /// Reply to this event (a rich reply; in a thread, a reply within the thread).
    pub reply_to: Option<String>,
    /// Post in the thread rooted at this event.
    pub thread_root: Option<String>,
    /// An idempotency key: the same key with the same bytes sends the file at most
    /// once, across retries.
    pub txn_id: Option<String>,
}

/// `send_file`'s result.
#[derive(Serialize, JsonSchema)]
pub struct FileSent {
    /// The event sent (`$…`).
    pub event_id: String,
    /// The file name shown.
    pub filename: String,
    /// `m.image`, `m.video`, `m.audio` or `m.file`, from the sniffed content type.
    pub msgtype: String,
    /// The content type sniffed from the bytes (never taken from the name or a
    /// `Content-Type` header).
    pub mimetype: String,
    /// Bytes.
    pub size: u64,
    /// Lowercase hex SHA-256 of the bytes sent.
    pub sha256: String,
    /// An image's width and height in pixels, when its header says.
    pub width: Option<u32>,
    pub height: Option<u32>,
    /// Whether the bytes went up encrypted (the room is end-to-end encrypted).
    pub encrypted: bool,
}

/// The longest caption `send_file` takes, in bytes of markdown.
const MAX_CAPTION_BYTES: usize = 16 * 1024;

/// The most a caption's rendered content may take, in bytes of JSON (its `body` and
/// HTML `formatted_body`, [`crate::fit::content_bytes`]): the budget of an encrypted
/// message less 2,000 bytes for the file's own fields (its name, at most 510 bytes
/// escaped, `info`, and the encrypted `file` with its key, iv and hash), so the
/// event stays under Matrix's 65,536 bytes in any room.
const MAX_CAPTION_CONTENT_BYTES: usize = MAX_ENCRYPTED_CONTENT_BYTES - 2_000;

/// `send_file`'s caption, trimmed and rendered (`None` for none or whitespace only).
///
/// # Errors
/// `invalid_params`: over [`MAX_CAPTION_BYTES`] of markdown, or rendered to over
/// [`MAX_CAPTION_CONTENT_BYTES`] (checked before any file is read or uploaded).
fn caption_text(raw: Option<&str>) -> Result<Option<mc_model::AgentText>, ToolError> {
    match raw.map(str::trim) {
        Some(c) if c.len() > MAX_CAPTION_BYTES => Err(ToolError::Invalid(format!(
            "the caption is {} bytes; the most is {MAX_CAPTION_BYTES}",
            c.len()
        ))),
        Some("") | None => Ok(None),
        Some(c) => match crate::fit::content_bytes(c) {
            n if n > MAX_CAPTION_CONTENT_BYTES => Err(ToolError::Invalid(format!(
                "the caption renders to {n} bytes of event content (its HTML and JSON \
                 escapes included); the most is {MAX_CAPTION_CONTENT_BYTES}"
            ))),
            _ => Ok(Some(markdown_text(c))),
        },
    }
}

/// The longest `url` `send_file` takes, in bytes (errors repeat it).
const MAX_URL_BYTES: usize = 8 * 1024;

#[tool_router(router = file_tools, vis = "pub(super)")]
impl McpServer {
    #[tool(
        title = "Send a file",
        description = "Send a file or an image (its width and height included) from a path under a directory the operator allows, or from a public https URL; encrypted in an encrypted room. Without room_id, on /channel: this session's own room. The content type is sniffed from the bytes. Optional filename, caption (markdown), reply_to, thread_root, txn_id. Returns event_id, filename, msgtype, mimetype, size, sha256, width, height, encrypted.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = true
        )
    )]
    async fn send_file(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(args): Parameters<SendFileArgs>,
    ) -> Result<Json<FileSent>, Failure> {
        let session = self.channel_session(&parts);
        self.run(&parts, "send_file", move |identity| async move {
            let room = target_room(&self.app.engine, identity, args.room_id, session).await?;
            let caption = caption_text(args.caption.as_deref())?;
            let (reply_to, thread_root) =
                relations(&room, args.reply_to.as_deref(), args.thread_root.as_deref()).await?;
            if let Some(url) = args.url.as_deref().filter(|u| u.len() > MAX_URL_BYTES) {
                return Err(ToolError::Invalid(format!(
                    "the url is {} bytes; the most is {MAX_URL_BYTES}",
                    url.len()
                )));
            }
            // Over its write limit, the call is refused before a byte is read.
            self.write_permitted(identity)?;
            // The operator's cap, and the homeserver's own (`m.upload.size`) when it
            // says one: a file over either is refused before it is read in full.
            let cap = match identity.client.load_or_fetch_max_upload_size().await {
                Ok(most) => self.app.files.max_bytes().min(u64::from(most)),
                Err(_) => self.app.files.max_bytes(),
            };
            let loaded = match (args.path.as_deref(), args.url.as_deref()) {
                (Some(path), None) => self.app.files.read_path(path, cap).await?,
                (None, Some(url)) => self.app.files.fetch_url(url, cap).await?,
                _ => {
                    return Err(ToolError::Invalid(
                        "give exactly one of path and url".to_string(),
                    ))
                }
            };
            let name = match args.filename.as_deref() {
                Some(raw) => mc_adapters::files::file_name(raw).map_err(ToolError::Invalid)?,
                None => loaded.file_name.clone(),
            };
            let sniffed = loaded.sniffed.clone();
            let size = loaded.bytes.len() as u64;
            let staged = identity.outbox.stage(loaded.bytes);
            let write = AgentWrite::File {
                room: model_room(&room),
                name: name.clone(),
                caption,
                mimetype: sniffed.mimetype.clone(),
                size,
                sha256: staged.sha256().to_owned(),
                reply_to,
                thread_root,
                // The key and the bytes: a key reused for other bytes sends them,
                // rather than answering with the event of the first.
                txn_id: match &args.txn_id {
                    Some(key) => format!("{key}-{}", &staged.sha256()[..16]),
                    None => TransactionId::new().to_string(),
                },
            };
            let written = self.write_within_limits(identity, write).await?;
            let event_id = written.event_ids.into_iter().next().ok_or_else(|| {
                ToolError::Upstream("the homeserver named no event for the file".to_string())
            })?;
            Ok(FileSent {
                event_id,
                filename: name,
                msgtype: sniffed.kind.msgtype().to_string(),
                mimetype: sniffed.mimetype,
                size,
                sha256: staged.sha256().to_owned(),
                width: sniffed.width,
                height: sniffed.height,
                encrypted: written.media_encrypted,
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caption_whose_rendered_event_would_pass_the_event_size_limit_is_refused() {
        use crate::fit::content_bytes;
        assert_eq!(caption_text(Some("  ")), Ok(None));
        let fine = caption_text(Some(" the **build** screen "))
            .unwrap()
            .unwrap();
        assert_eq!(fine.body, "the **build** screen");
        // Under MAX_CAPTION_BYTES of markdown, but its HTML and JSON escapes are not:
        // a bullet list, control characters, nested quotes.
        for (label, caption) in [
            ("list", "- a\n".repeat(MAX_CAPTION_BYTES / 4)),
            ("controls", "\u{1}".repeat(MAX_CAPTION_BYTES)),
            ("quotes", format!("{}x", ">".repeat(MAX_CAPTION_BYTES - 1))),
        ] {
            assert!(caption.len() <= MAX_CAPTION_BYTES, "{label}");
            let refused = caption_text(Some(&caption)).unwrap_err();
            assert_eq!(
                refused,
                ToolError::Invalid(format!(
                    "the caption renders to {} bytes of event content (its HTML and \
                     JSON escapes included); the most is {MAX_CAPTION_CONTENT_BYTES}",
                    content_bytes(caption.trim())
                )),
                "{label}"
            );
        }
        // Plain text up to the markdown limit still goes.
        let plain = "a".repeat(MAX_CAPTION_BYTES);
        assert!(content_bytes(&plain) <= MAX_CAPTION_CONTENT_BYTES);
        assert_eq!(caption_text(Some(&plain)).unwrap().unwrap().body, plain);
        assert_eq!(
            caption_text(Some(&format!("{plain}a"))).unwrap_err().kind(),
            "invalid_params"
        );
    }
}
