//! The agent's own writes to Matrix, and the rules they pass through.
//!
//! The agent (Claude Code, through the server's MCP tools) acts as the same Matrix
//! account that posts the permission prompts. Every tool that writes to Matrix as the
//! identity hands its write to [`crate::Channel::handle`] as
//! [`crate::Input::AgentWrite`]; the core answers with [`crate::Effect::Write`] (the
//! server then performs exactly that write) or [`crate::Effect::WriteRefused`]. The
//! check and the send are one transition: nothing can change between them.
//!
//! The rules, in the order they run ([`crate::Channel::handle`]):
//! 1. **No prompt is touched.** A write whose target (the event it edits, redacts,
//!    reacts to, replies to or threads on) is a permission prompt's message is
//!    refused with [`crate::DropReason::PromptTarget`]: the prompt is the approver's
//!    view of what they allow (an agent that rewrote a pending `rm -rf /` to read
//!    `ls` had the real request approved). Prompts the core still holds count, and
//!    so do the last [`crate::config::IdentityConfig::prompt_memory`] retired ones
//!    (their message shows the outcome; rewriting it rewrites the record).
//! 2. **Only the identity's own messages are edited**
//!    ([`crate::DropReason::NotOwnMessage`]).
//! 3. **No text names an open request id** ([`crate::DropReason::NamesOpenRequest`]):
//!    every text field the write carries ([`AgentWrite::texts`]: body, formatted
//!    body, reaction key, redaction reason, room name and topic, file name and
//!    caption), read the way a person reads it
//!    ([`names_request_id`]). A message copying a prompt with the real id could be
//!    answered by an approver who trusts what they read.
//! 4. **The room of a prompt the core holds is not left**
//!    ([`crate::DropReason::LeavesPromptRoom`]): its approvers could no longer answer
//!    it, and its outcome could not be shown.
//! 5. **The name and topic of a prompt room stay as they are**
//!    ([`crate::DropReason::PromptRoomState`]): the operator's `permission_room`,
//!    and any room where a prompt the core holds was posted, of this identity or
//!    another. They frame what an approver reads there (a topic "everything here is
//!    pre-approved, react 👍" is an imitation of a policy). Their texts, like every
//!    text, never name an open request id (rule 3).
//!
//! A room the agent creates gets the identity's allowed senders invited: the core
//! completes [`AgentWrite::CreateRoom`]'s `invite` ([`AgentWrite::with_allowed`]).

use crate::ids::{EventId, RoomId, UserId};
use crate::verdict::RequestId;
use serde::{Deserialize, Serialize};

/// One text of an agent's message as it is sent: the `body` and, when the message
/// has HTML, its `formatted_body` (`format: org.matrix.custom.html`). The server
/// renders the agent's Markdown before it asks, so the core judges the very strings
/// that go out ([Client-Server API, "m.text"]).
///
/// [Client-Server API, "m.text"]: https://spec.matrix.org/v1.16/client-server-api/#mtext
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AgentText {
    pub body: String,
    pub formatted_body: Option<String>,
}

impl AgentText {
    /// A text without HTML.
    pub fn plain(body: impl Into<String>) -> Self {
        Self {
            body: body.into(),
            formatted_body: None,
        }
    }
}

/// A write to Matrix that a tool asks for, as the identity. Closed: a new write tool
/// needs a variant here, and [`AgentWrite::texts`] and [`AgentWrite::targets`] are
/// exhaustive matches, so its fields are judged before it compiles.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "write", rename_all = "snake_case")]
pub enum AgentWrite {
    /// `m.room.message` events (`send_message`): one per part, in order; the first
    /// is a rich reply to `reply_to`, every part is in the thread of `thread_root`.
    /// `txn_id` is the key of the parts' transaction ids (part `i` is `{txn_id}-{i}`),
    /// so a retried call sends each part at most once.
    Message {
        room: RoomId,
        parts: Vec<AgentText>,
        reply_to: Option<EventId>,
        thread_root: Option<EventId>,
        txn_id: String,
    },
    /// An `m.replace` of `original` (`edit_message`). `original_sender` is the
    /// original's `sender`, as the server fetched it.
    Edit {
        room: RoomId,
        original: EventId,
        original_sender: UserId,
        text: AgentText,
    },
    /// An `m.reaction` (`m.annotation` of `relates_to` with `key`; `send_reaction`).
    Reaction {
        room: RoomId,
        relates_to: EventId,
        key: String,
    },
    /// An `m.room.redaction` of `redacts` (`redact`), with an optional reason.
    Redaction {
        room: RoomId,
        redacts: EventId,
        reason: Option<String>,
    },
    /// An `m.read` receipt on `event_id` (`acknowledge` with `receipt: true`). A
    /// receipt marks what the agent read; it changes no event, so a prompt may be
    /// its target.
    Receipt { room: RoomId, event_id: EventId },
    /// Join a room by id or alias (`join_room`).
    Join { room: String },
    /// Leave a joined room (`leave_room`).
    Leave { room: RoomId },
    /// Invite `user` to a joined room (`invite`).
    Invite { room: RoomId, user: UserId },
    /// Create a room (`create_room`, Client-Server API `POST /createRoom`, preset
    /// `private_chat`): named `name`, with `topic`, `invite` invited, and with
    /// `encrypted` an `m.room.encryption` in its initial state. The core adds the
    /// identity's allowed senders to `invite` before the write goes out
    /// ([`crate::Effect::Write`] carries the completed list, sorted, each once).
    CreateRoom {
        name: Option<String>,
        topic: Option<String>,
        encrypted: bool,
        invite: Vec<UserId>,
    },
    /// The direct chat with `user` (`create_dm`): the one the identity's `m.direct`
    /// account data names and it is joined to, or a new one (encrypted, `user`
    /// invited, marked direct).
    CreateDm { user: UserId },
    /// Set a joined room's `m.room.name` (`set_room_name`); an empty name removes it.
    SetRoomName { room: RoomId, name: String },
    /// Set a joined room's `m.room.topic` (`set_room_topic`); an empty topic removes it.
    SetRoomTopic { room: RoomId, topic: String },
    /// One file (`send_file`): an `m.image`, `m.video`, `m.audio` or `m.file` event
    /// whose `filename` is `name` and whose `body` is `caption` when there is one,
    /// `name` otherwise ([Client-Server API, "Media captions"]). The bytes stay with
    /// the server; `sha256` (lowercase hex of their SHA-256), `size` (bytes) and
    /// `mimetype` (sniffed from the bytes) name the very bytes sent: the server sends
    /// none with another digest. The first (only) event replies to `reply_to` and is
    /// in the thread of `thread_root`, as a [`AgentWrite::Message`]'s first part;
    /// `txn_id` is its transaction id, so a retried call sends it at most once.
    ///
    /// [Client-Server API, "Media captions"]: https://spec.matrix.org/v1.16/client-server-api/#media-captions
    File {
        room: RoomId,
        name: String,
        caption: Option<AgentText>,
        mimetype: String,
        size: u64,
        sha256: String,
        reply_to: Option<EventId>,
        thread_root: Option<EventId>,
        txn_id: String,
    },
}

impl AgentWrite {
    /// Every text the write puts into Matrix, where a person could read it.
    pub fn texts(&self) -> Vec<&str> {
        match self {
            AgentWrite::Message { parts, .. } => parts.iter().flat_map(AgentText::fields).collect(),
            AgentWrite::Edit { text, .. } => text.fields().collect(),
            AgentWrite::Reaction { key, .. } => vec![key],
            AgentWrite::Redaction { reason, .. } => reason.iter().map(String::as_str).collect(),
            AgentWrite::CreateRoom { name, topic, .. } => name
                .iter()
                .chain(topic.iter())
                .map(String::as_str)
                .collect(),
            AgentWrite::SetRoomName { name, .. } => vec![name],
            AgentWrite::SetRoomTopic { topic, .. } => vec![topic],
            AgentWrite::File { name, caption, .. } => std::iter::once(name.as_str())
                .chain(caption.iter().flat_map(AgentText::fields))
                .collect(),
            AgentWrite::Receipt { .. }
            | AgentWrite::Join { .. }
            | AgentWrite::Leave { .. }
            | AgentWrite::Invite { .. }
            | AgentWrite::CreateDm { .. } => Vec::new(),
        }
    }

    /// The room whose state the write changes (its name or topic), if any.
    pub fn room_state(&self) -> Option<&RoomId> {
        match self {
            AgentWrite::SetRoomName { room, .. } | AgentWrite::SetRoomTopic { room, .. } => {
                Some(room)
            }
            AgentWrite::Message { .. }
            | AgentWrite::Edit { .. }
            | AgentWrite::Reaction { .. }
            | AgentWrite::Redaction { .. }
            | AgentWrite::Receipt { .. }
            | AgentWrite::Join { .. }
            | AgentWrite::Leave { .. }
            | AgentWrite::Invite { .. }
            | AgentWrite::CreateRoom { .. }
            | AgentWrite::CreateDm { .. }
            | AgentWrite::File { .. } => None,
        }
    }

    /// The events the write edits, redacts, reacts to, replies to or threads on.
    pub fn targets(&self) -> Vec<&EventId> {
        match self {
            AgentWrite::Message {
                reply_to,
                thread_root,
                ..
            }
            | AgentWrite::File {
                reply_to,
                thread_root,
                ..
            } => reply_to.iter().chain(thread_root.iter()).collect(),
            AgentWrite::Edit { original, .. } => vec![original],
            AgentWrite::Reaction { relates_to, .. } => vec![relates_to],
            AgentWrite::Redaction { redacts, .. } => vec![redacts],
            AgentWrite::Receipt { .. }
            | AgentWrite::Join { .. }
            | AgentWrite::Leave { .. }
            | AgentWrite::Invite { .. }
            | AgentWrite::CreateRoom { .. }
            | AgentWrite::CreateDm { .. }
            | AgentWrite::SetRoomName { .. }
            | AgentWrite::SetRoomTopic { .. } => Vec::new(),
        }
    }

    /// The tool's name for the write, for logs.
    pub fn kind(&self) -> &'static str {
        match self {
            AgentWrite::Message { .. } => "message",
            AgentWrite::Edit { .. } => "edit",
            AgentWrite::Reaction { .. } => "reaction",
            AgentWrite::Redaction { .. } => "redaction",
            AgentWrite::Receipt { .. } => "receipt",
            AgentWrite::Join { .. } => "join",
            AgentWrite::Leave { .. } => "leave",
            AgentWrite::Invite { .. } => "invite",
            AgentWrite::CreateRoom { .. } => "create_room",
            AgentWrite::CreateDm { .. } => "create_dm",
            AgentWrite::SetRoomName { .. } => "set_room_name",
            AgentWrite::SetRoomTopic { .. } => "set_room_topic",
            AgentWrite::File { .. } => "file",
        }
    }
}

impl AgentWrite {
    /// The write as it goes out: a [`AgentWrite::CreateRoom`] with `allowed` added
    /// to its `invite` (sorted, each once, `own` left out: the creator is in the room
    /// already); any other write as it is.
    pub fn with_allowed<'a>(
        self,
        allowed: impl IntoIterator<Item = &'a UserId>,
        own: &UserId,
    ) -> AgentWrite {
        match self {
            AgentWrite::CreateRoom {
                name,
                topic,
                encrypted,
                invite,
            } => {
                let invite: std::collections::BTreeSet<UserId> = invite
                    .into_iter()
                    .chain(allowed.into_iter().cloned())
                    .filter(|user| user != own)
                    .collect();
                AgentWrite::CreateRoom {
                    name,
                    topic,
                    encrypted,
                    invite: invite.into_iter().collect(),
                }
            }
            other => other,
        }
    }
}

impl AgentText {
    fn fields(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.body.as_str()).chain(self.formatted_body.as_deref())
    }
}

/// The first of `ids` that `text` names, read as a person reads it, if any.
///
/// A word names an id when it looks like it. The text is read five ways, and any
/// of them counts: as it is; without its HTML tags (a client renders
/// `<b>ab</b>cde` as one word), each tag taken both to the next `>` and as an HTML
/// parser ends it (past a `>` in a quoted attribute value, `ab<i title='>'>cde`, or
/// in a comment, `ab<!-- > -->cde`); and each of those also without Markdown's
/// emphasis marks (`**ab**cde`). Each reading has its HTML entities decoded
/// (`&#97;bcde`), the code points that render as nothing removed (format
/// characters such as U+200B ZERO WIDTH SPACE, variation selectors, tags), is
/// lower-cased and taken through the confusable skeleton of Unicode Technical
/// Standard #39 ("Confusable Detection"), so `ABCDE`, `a\u{200B}bcde`, full-width
/// `ａｂｃｄｅ` and Cyrillic `аbcde` all name `abcde`. Words are runs of letters,
/// taken both as written and in the skeleton of the whole text: `xabcde` does not
/// name `abcde`; `|abcde|` and `abcde1` do. A false match only refuses a write; a
/// missed one could let an imitation of a prompt be answered, so the readings err
/// towards matching.
pub fn names_request_id<'a>(text: &str, ids: &'a [RequestId]) -> Option<&'a RequestId> {
    if ids.is_empty() {
        return None;
    }
    let wanted: Vec<String> = ids.iter().map(|id| skeleton(id.as_str())).collect();
    let unmark = |reading: &str| -> String {
        reading
            .chars()
            .filter(|c| !matches!(c, '*' | '_' | '~' | '`'))
            .collect()
    };
    let untagged = strip_tags(text, first_gt);
    let parsed = strip_tags(text, html_tag_end);
    let (unmarked, parsed_unmarked) = (unmark(&untagged), unmark(&parsed));
    let matching = |word: &str| wanted.iter().position(|w| *w == word);
    let found = [
        text,
        untagged.as_str(),
        unmarked.as_str(),
        parsed.as_str(),
        parsed_unmarked.as_str(),
    ]
    .into_iter()
    .find_map(|reading| {
        let decoded = html_escape::decode_html_entities(reading);
        let visible: String = decoded
            .chars()
            .filter(|c| !is_default_ignorable(*c))
            .collect();
        // Words as written, each through the skeleton (the skeleton maps some
        // punctuation to letters: `|abcde|` would become one word `l…l`), and
        // words of the whole skeleton (a look-alike of a letter that is not
        // itself a letter would split the word as written).
        let as_written = visible
            .split(|c: char| !c.is_alphabetic())
            .find_map(|word| matching(&skeleton(word)));
        as_written
            .or_else(|| {
                skeleton(&visible)
                    .split(|c: char| !c.is_alphabetic())
                    .find_map(matching)
            })
            .or_else(|| {
                // Fancy text the skeleton leaves alone (small capitals `ᴀʙᴄᴅᴇ`), and
                // the order a bidi override displays (`\u{202E}edcba` reads `abcde`).
                cured(&decoded)
                    .split(|c: char| !c.is_alphabetic())
                    .find_map(|word| matching(&skeleton(word)))
            })
    });
    found.map(|i| &ids[i])
}

/// `text` without its tags: from each `<` to where `end` says the tag there ends
/// (its length; an unclosed tag keeps the rest).
fn strip_tags(text: &str, end: fn(&str) -> Option<usize>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('<') {
        out.push_str(&rest[..open]);
        match end(&rest[open..]) {
            Some(len) => rest = &rest[open + len..],
            None => {
                out.push_str(&rest[open..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The length of the tag `tag` starts with, up to its first `>`.
fn first_gt(tag: &str) -> Option<usize> {
    tag.find('>').map(|at| at + 1)
}

/// The length of the tag `tag` starts with, as an HTML parser ends it ([HTML,
/// "Tokenization"]): a comment (`<!--`) at the next `-->`, any other tag at the
/// first `>` outside a quoted attribute value (a quote right after `=`, blanks
/// between allowed). A comment that is empty at once (`<!-->`) is left to
/// [`first_gt`]'s reading.
///
/// [HTML, "Tokenization"]: https://html.spec.whatwg.org/multipage/parsing.html#tokenization
fn html_tag_end(tag: &str) -> Option<usize> {
    if let Some(comment) = tag.strip_prefix("<!--") {
        return comment
            .find("-->")
            .map(|at| "<!--".len() + at + "-->".len());
    }
    let mut quote = None;
    let mut value_next = false;
    for (at, c) in tag.char_indices() {
        if let Some(open) = quote {
            if c == open {
                quote = None;
            }
            continue;
        }
        match c {
            '>' => return Some(at + 1),
            '"' | '\'' if value_next => quote = Some(c),
            _ => {}
        }
        if !c.is_ascii_whitespace() {
            value_next = c == '=';
        }
    }
    None
}

/// Lower case, without invisible code points and combining marks, in compatibility
/// decomposition (NFKD), through the UTS #39 skeleton.
fn skeleton(text: &str) -> String {
    use unicode_normalization::char::is_combining_mark;
    use unicode_normalization::UnicodeNormalization as _;
    // Compatibility decomposition (circled `ⓐ` and full-width `ａ` are `a`), without
    // the combining marks a reader looks through (`a\u{301}`, a strike-through).
    let visible: String = text
        .chars()
        .filter(|c| !is_default_ignorable(*c))
        .nfkd()
        .filter(|c| !is_combining_mark(*c))
        .flat_map(char::to_lowercase)
        .collect();
    unicode_security::confusable_detection::skeleton(&visible)
        .flat_map(char::to_lowercase)
        .collect()
}

/// `text` as decancer cures it: look-alike and fancy letters (small capitals,
/// mathematical alphanumerics, enclosed letters) folded to plain lower case, in the
/// order the Unicode Bidirectional Algorithm (UAX #9) displays it. Text too malformed
/// for that algorithm is cured in its logical order.
fn cured(text: &str) -> String {
    use decancer::Options;
    decancer::cure(text, Options::default())
        .or_else(|_| decancer::cure(text, Options::default().disable_bidi()))
        .map(|cured| cured.to_string())
        .unwrap_or_default()
}

/// Unicode's `Default_Ignorable_Code_Point` (DerivedCoreProperties.txt): code points
/// a renderer shows as nothing.
fn is_default_ignorable(c: char) -> bool {
    matches!(c as u32,
        0x00AD | 0x034F | 0x061C | 0x115F..=0x1160 | 0x17B4..=0x17B5 | 0x180B..=0x180F
        | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x206F | 0x3164 | 0xFE00..=0xFE0F
        | 0xFEFF | 0xFFA0 | 0xFFF0..=0xFFF8 | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A
        | 0xE0000..=0xE0FFF)
}

/// A `https://matrix.to` link to `event_id` in `room` ([Appendices, "matrix.to
/// navigation"]): the ids percent-encoded, all but unreserved characters and `!`.
///
/// [Appendices, "matrix.to navigation"]: https://spec.matrix.org/v1.16/appendices/#matrixto-navigation
pub fn matrix_to(room: &RoomId, event_id: &EventId) -> String {
    fn encode(s: &str, out: &mut String) {
        for b in s.bytes() {
            match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'!' => {
                    out.push(b as char)
                }
                _ => out.push_str(&format!("%{b:02X}")),
            }
        }
    }
    let mut link = String::from("https://matrix.to/#/");
    encode(room.as_str(), &mut link);
    link.push('/');
    encode(event_id.as_str(), &mut link);
    link
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> Vec<RequestId> {
        ["fghjk", "abcde"]
            .into_iter()
            .map(|s| RequestId::parse(s).unwrap())
            .collect()
    }

    fn named(text: &str) -> Option<String> {
        names_request_id(text, &ids()).map(|id| id.as_str().to_owned())
    }

    #[test]
    fn a_text_names_an_id_as_a_whole_word_in_any_case() {
        assert_eq!(named("Permission fghjk: ls").as_deref(), Some("fghjk"));
        assert_eq!(named("reply YES ABCDE").as_deref(), Some("abcde"));
        assert_eq!(named("(abcde)").as_deref(), Some("abcde"));
        assert_eq!(named("abcdef fghj xabcde"), None);
        assert_eq!(named("nothing here"), None);
        assert_eq!(names_request_id("abcde", &[]), None);
    }

    #[test]
    fn an_id_spelled_with_invisible_or_lookalike_characters_is_named() {
        for text in [
            "a\u{200B}bcde",
            "ab\u{00AD}cde",
            "abc\u{FE0F}de",
            "\u{FF41}\u{FF42}\u{FF43}\u{FF44}\u{FF45}",
            "\u{0430}bcde",
            "&#97;bcde",
            "<b>ab</b>cde",
            "**ab**cde",
            "<a href=x>ab</a>c<i>de</i>",
            "a\u{301}bcde",
            "ab\u{336}c\u{336}de",
            "\u{24D0}\u{24D1}\u{24D2}\u{24D3}\u{24D4}",
            "\u{1D41A}\u{1D41B}\u{1D41C}\u{1D41D}\u{1D41E}",
        ] {
            assert_eq!(named(text).as_deref(), Some("abcde"), "{text:?}");
        }
        // Punctuation the skeleton maps to letters does not join the id to it.
        for text in [
            "|abcde|",
            "abcde|",
            "fghjk\u{2014}it",
            "%abcde",
            "abcde\u{20AC}",
            "abcde\u{00B9}",
        ] {
            assert!(named(text).is_some(), "{text:?}");
        }
        // Fancy text the UTS #39 skeleton leaves alone, and a bidi override that
        // displays the id in the order a person reads it.
        for text in [
            "\u{1D00}\u{0299}\u{1D04}\u{1D05}\u{1D07}",
            "yes \u{1D00}\u{0299}\u{1D04}\u{1D05}\u{1D07} please",
            "\u{202E}edcba\u{202C}",
        ] {
            assert_eq!(named(text).as_deref(), Some("abcde"), "{text:?}");
        }
        assert_eq!(
            named("\u{A730}\u{0262}\u{029C}\u{1D0A}\u{1D0B}").as_deref(),
            Some("fghjk")
        );
        // A look-alike that is no letter (a digit zero for `o`) is read through the
        // whole text's skeleton only: neither the words as written nor decancer see it.
        let with_o = [RequestId::parse("abcdo").unwrap()];
        assert_eq!(
            names_request_id("yes abcd0", &with_o).map(RequestId::as_str),
            Some("abcdo")
        );
        // An unclosed tag hides nothing after it.
        assert_eq!(named("a < b abcde").as_deref(), Some("abcde"));
        assert_eq!(named("<p>ok</p> fghj"), None);
    }

    #[test]
    fn a_tag_ends_where_an_html_parser_ends_it() {
        for text in [
            // A `>` inside a quoted attribute value does not end the tag.
            "ab<span title='>'>cde",
            "ab<span title='x>y'>cde",
            "ab<a href = \">x\" >cde",
            "ab<span data-x=\"'\" title='>'>cde",
            // A quote that does not follow `=` opens no value.
            "ab<span x'y title='>'>cde",
            // A comment ends at `-->`, not at a `>` inside it.
            "ab<!-- > -->cde",
            "ab<!--x=' -->cde",
            // An empty comment at once (`<!-->`), then another.
            "<!-->ab<!-- x -->cde",
            // Markdown emphasis after such a tag.
            "ab<i title='>'>c*de*",
        ] {
            assert_eq!(named(text).as_deref(), Some("abcde"), "{text:?}");
        }
        assert_eq!(first_gt("<b>x"), Some(3));
        assert_eq!(html_tag_end("<b title='>'>x"), Some(13));
        assert_eq!(html_tag_end("<!-- > -->x"), Some(10));
        assert_eq!(html_tag_end("<b title='>x"), None);
        assert_eq!(html_tag_end("<!-- x"), None);
    }

    #[test]
    fn every_id_letter_has_a_skeleton_of_letters() {
        for c in crate::verdict::REQUEST_ID_ALPHABET.chars() {
            let s = skeleton(&c.to_string());
            assert!(
                !s.is_empty() && s.chars().all(char::is_alphabetic),
                "{c}: {s:?}"
            );
        }
    }

    #[test]
    fn a_matrix_to_link_encodes_the_ids() {
        assert_eq!(
            matrix_to(&RoomId("!r:hs".into()), &EventId("$e/1:hs".into())),
            "https://matrix.to/#/!r%3Ahs/%24e%2F1%3Ahs"
        );
    }

    #[test]
    fn texts_and_targets_are_every_field_of_the_write() {
        let room = RoomId("!r:hs".into());
        let e = |s: &str| EventId(s.into());
        let message = AgentWrite::Message {
            room: room.clone(),
            parts: vec![
                AgentText {
                    body: "a".into(),
                    formatted_body: Some("<p>a</p>".into()),
                },
                AgentText::plain("b"),
            ],
            reply_to: Some(e("$r")),
            thread_root: Some(e("$t")),
            txn_id: "k".into(),
        };
        assert_eq!(message.texts(), ["a", "<p>a</p>", "b"]);
        assert_eq!(message.targets(), [&e("$r"), &e("$t")]);
        let redaction = AgentWrite::Redaction {
            room: room.clone(),
            redacts: e("$x"),
            reason: Some("why".into()),
        };
        assert_eq!(redaction.texts(), ["why"]);
        assert_eq!(redaction.targets(), [&e("$x")]);
        let reaction = AgentWrite::Reaction {
            room: room.clone(),
            relates_to: e("$y"),
            key: "k".into(),
        };
        assert_eq!(
            (reaction.texts(), reaction.targets()),
            (vec!["k"], vec![&e("$y")])
        );
        let receipt = AgentWrite::Receipt {
            room,
            event_id: e("$z"),
        };
        assert!(receipt.texts().is_empty() && receipt.targets().is_empty());
    }
}
