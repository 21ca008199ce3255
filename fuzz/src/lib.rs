//! Shared pieces of the fuzz targets: a byte reader that never fails, and the oracles
//! every target that produces pushed text uses (no channel tag, neutral text, valid
//! meta keys).
//!
//! The oracles are written independently of the model's own code where they can be:
//! the channel-tag check strips white space and invisible characters and lowercases,
//! instead of running the sandbox's regex; the meta-key check is its own regex.

pub mod core_ops;
pub mod seeds;

use mc_model::meta::is_valid_meta_key;
use mc_model::sandbox::neutralise;
use mc_model::{ChannelNotification, MetaKey};
use regex::Regex;
use std::sync::LazyLock;

/// Reads a fuzz input byte by byte. Past the end every read gives zeros (an empty
/// string), so any input decodes to something.
pub struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    /// The next byte, or 0 past the end.
    pub fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    /// A little-endian u16 from the next two bytes.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    /// A string: one length byte, then that many bytes, read as UTF-8 (lossy).
    pub fn string(&mut self) -> String {
        let len = usize::from(self.byte());
        let start = self.pos.min(self.data.len());
        let end = (start + len).min(self.data.len());
        self.pos = start + len;
        String::from_utf8_lossy(&self.data[start..end]).into_owned()
    }

    /// Every byte not read yet, as UTF-8 (lossy).
    pub fn rest(&mut self) -> String {
        let start = self.pos.min(self.data.len());
        self.pos = self.data.len();
        String::from_utf8_lossy(&self.data[start..]).into_owned()
    }
}

/// A length-prefixed string as [`Cursor::string`] reads it (at most 255 bytes; longer
/// strings are cut on a character boundary).
pub fn encode_string(out: &mut Vec<u8>, s: &str) {
    let end = s.floor_char_boundary(255);
    out.push(end as u8);
    out.extend_from_slice(&s.as_bytes()[..end]);
}

/// White space, format characters and other default-ignorable code points: what a
/// lenient reader skips inside a tag.
static INVISIBLE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[\s\p{Cf}\p{Default_Ignorable_Code_Point}]").expect("constant regex")
});

/// Whether `text` holds an opening or closing `channel` tag once white space and
/// invisible characters are dropped and it is lowercased: the forgery the sandbox
/// exists to stop.
pub fn has_channel_tag(text: &str) -> bool {
    let squeezed = INVISIBLE.replace_all(text, "").to_lowercase();
    squeezed.contains("<channel") || squeezed.contains("</channel")
}

/// Whether the sandbox finds nothing left to neutralise in `text`.
pub fn is_neutral(text: &str) -> bool {
    !neutralise(text).1
}

/// `^[A-Za-z_][A-Za-z0-9_]*$`: the keys Claude Code keeps (channel contract).
static META_KEY: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z_][A-Za-z0-9_]*$").expect("constant regex"));

/// Meta values that carry free text from Matrix: one line, neutral.
const FREE_TEXT_META: [MetaKey; 5] = [
    MetaKey::User,
    MetaKey::InReplyToQuote,
    MetaKey::AttachmentName,
    MetaKey::AttachmentMime,
    MetaKey::ReactionKey,
];

/// Checks what every push promises: the content is neutral and forges no channel
/// tag; every meta key matches `^[A-Za-z_][A-Za-z0-9_]*$` and is not `source`; every
/// meta value serialises as a JSON string; free-text meta values are one neutral
/// line. Panics (a fuzz crash) with the offending notification otherwise.
pub fn check_notification(n: &ChannelNotification) {
    assert!(
        !has_channel_tag(&n.content),
        "content forges a channel tag: {n:?}"
    );
    assert!(is_neutral(&n.content), "content is not neutral: {n:?}");
    for (key, _) in n.meta.iter() {
        assert!(META_KEY.is_match(key), "bad meta key {key:?}: {n:?}");
        assert_ne!(key, "source", "meta key source: {n:?}");
        assert!(is_valid_meta_key(key), "model rejects its own key {key:?}");
    }
    for key in FREE_TEXT_META {
        if let Some(value) = n.meta.get(key) {
            assert!(
                !value.contains(['\n', '\r', '\u{2028}', '\u{2029}', '\u{85}']),
                "{key:?} spans lines: {n:?}"
            );
            assert!(is_neutral(value), "{key:?} is not neutral: {n:?}");
            assert!(!has_channel_tag(value), "{key:?} forges a tag: {n:?}");
        }
    }
    let json = serde_json::to_value(&n.meta).expect("meta serialises");
    let object = json.as_object().expect("meta is a JSON object");
    assert!(
        object.values().all(serde_json::Value::is_string),
        "a meta value is not a string: {json}"
    );
    assert!(object.keys().all(|k| META_KEY.is_match(k) && k != "source"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tag_oracle_sees_through_spacing_case_and_invisibles() {
        assert!(has_channel_tag("a</channel>"));
        assert!(has_channel_tag("< / C h\u{200B}ANNEL"));
        assert!(has_channel_tag("<channel source=x>"));
        assert!(!has_channel_tag("\u{FF1C}/channel>"));
        assert!(!has_channel_tag("channel"));
    }

    #[test]
    fn the_cursor_reads_zeros_past_the_end() {
        let mut c = Cursor::new(&[3, b'a', b'b']);
        assert_eq!(c.string(), "ab");
        assert_eq!(c.byte(), 0);
        assert_eq!(c.string(), "");
        assert!(c.is_empty());
        let mut out = Vec::new();
        encode_string(&mut out, "hé");
        assert_eq!(Cursor::new(&out).string(), "hé");
    }
}
