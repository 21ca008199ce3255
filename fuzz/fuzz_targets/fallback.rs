//! The reply-fallback strippers and the quote builder (`fallback.rs`).
//!
//! Input: byte 0 is the quote's `max_chars`, byte 1 holds flags, the rest is the text
//! (UTF-8, lossy).
//!
//! Asserts:
//! - stripping gives a suffix of the body, and the body whole unless it starts with
//!   `> <` or `> * <`;
//! - strip-then-quote round trips: a fallback built in front of the text (with a
//!   blank line, or without one when the text's first line is not a quote line) is
//!   removed exactly, in plain text and in HTML (`<mx-reply>…</mx-reply>`);
//! - a quote is one line without surrounding white space, at most `max_chars`
//!   characters, neutral, with no channel tag; it is the whole folded, neutralised
//!   text unless clipped, and then ends with `…`; quoting a reply equals quoting its
//!   stripped body;
//! - `clip_chars` / `clip_bytes` give prefixes within the limit, whole when not cut.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mc_fuzz::{has_channel_tag, is_neutral};
use mc_model::fallback::{
    clip_bytes, clip_chars, quote, strip_html_reply_fallback, strip_plain_reply_fallback,
};
use mc_model::sandbox::neutralise;

fn is_fallback_line(line: &str) -> bool {
    let line = line.strip_suffix('\r').unwrap_or(line);
    line.starts_with("> ") || line == ">"
}

fuzz_target!(|data: &[u8]| {
    let (max_chars, flags, text) = match data {
        [m, f, rest @ ..] => (usize::from(*m), *f, String::from_utf8_lossy(rest)),
        _ => return,
    };
    let text = text.as_ref();

    // Stripping the plain fallback.
    let stripped = strip_plain_reply_fallback(text);
    assert!(text.ends_with(stripped), "{text:?}");
    if !(text.starts_with("> <") || text.starts_with("> * <")) {
        assert_eq!(stripped, text);
    }

    // A fallback built in front of the text is removed exactly. Its lines are the
    // text's own lines, quoted (a real client quotes the parent's body).
    let sender = if flags & 1 == 0 {
        "> <@ann:example.org>"
    } else {
        "> * <@ann:example.org>"
    };
    let mut fallback = format!("{sender} ");
    for (i, line) in text.split('\n').take(4).enumerate() {
        if i > 0 {
            fallback.push_str("\n> ");
        }
        fallback.push_str(line);
    }
    let blank = if flags & 2 != 0 { "\r\n\r\n" } else { "\n\n" };
    let with_blank = format!("{fallback}{blank}{text}");
    assert_eq!(
        strip_plain_reply_fallback(&with_blank),
        text,
        "{with_blank:?}"
    );
    let first_line = text.split('\n').next().unwrap_or("");
    if !text.is_empty()
        && !text.starts_with('\n')
        && !text.starts_with("\r\n")
        && !is_fallback_line(first_line)
        && first_line != "\r"
    {
        let without_blank = format!("{fallback}\n{text}");
        assert_eq!(
            strip_plain_reply_fallback(&without_blank),
            text,
            "{without_blank:?}"
        );
    }

    // The HTML fallback.
    let html = strip_html_reply_fallback(text);
    assert!(text.ends_with(html.as_ref()), "{text:?}");
    if !text
        .trim_start()
        .to_ascii_lowercase()
        .starts_with("<mx-reply")
    {
        assert_eq!(html, text);
    }
    let inner = text.replace('<', "&lt;");
    let tag = if flags & 4 == 0 {
        "mx-reply"
    } else {
        "MX-Reply"
    };
    let block = format!(" <{tag}><blockquote>{inner}</blockquote></{tag}>{text}");
    assert_eq!(strip_html_reply_fallback(&block), text, "{block:?}");

    // The quote.
    let has_reply = flags & 8 != 0;
    let q = quote(text, has_reply, max_chars);
    assert!(
        !q.text.contains(|c: char| c.is_whitespace() && c != ' '),
        "{q:?}"
    );
    assert!(!q.text.contains("  "), "{q:?}");
    assert_eq!(q.text, q.text.trim(), "{q:?}");
    assert!(q.text.chars().count() <= max_chars, "{q:?}");
    assert!(is_neutral(&q.text), "{q:?}");
    assert!(!has_channel_tag(&q.text), "{q:?}");
    let body = if has_reply {
        strip_plain_reply_fallback(text)
    } else {
        text
    };
    let folded = body.split_whitespace().collect::<Vec<_>>().join(" ");
    let (neutral, suspicious) = neutralise(&folded);
    assert_eq!(q.suspicious, suspicious);
    if q.clipped {
        assert!(neutral.chars().count() > max_chars, "{q:?}");
        if max_chars > 0 {
            assert!(q.text.ends_with('\u{2026}'), "{q:?}");
            let kept = q.text.trim_end_matches('\u{2026}');
            assert!(neutral.starts_with(kept), "{q:?}");
        } else {
            assert_eq!(q.text, "");
        }
    } else {
        assert_eq!(q.text, neutral, "{text:?}");
    }
    assert_eq!(
        quote(stripped, false, max_chars),
        quote(text, true, max_chars)
    );
    assert_eq!(
        quote(&with_blank, true, max_chars).text,
        quote(text, false, max_chars).text
    );

    // Clipping.
    let (c, cut) = clip_chars(text, max_chars);
    assert!(text.starts_with(c) && c.chars().count() <= max_chars);
    assert_eq!(cut, c.len() < text.len());
    let (b, cut) = clip_bytes(text, max_chars);
    assert!(text.starts_with(b) && b.len() <= max_chars);
    assert_eq!(cut, b.len() < text.len());
    assert!(
        !cut || b.len() + 4 > max_chars,
        "clip_bytes gave up more than one character"
    );
});
