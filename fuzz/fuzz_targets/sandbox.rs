//! The body sandbox (`neutralise`, `sandbox_body`).
//!
//! Input: bytes 0-1 are the cap in bytes (little endian, at most 4095), byte 2 a cut
//! point, the rest the body (UTF-8, lossy).
//!
//! Asserts:
//! - the output never holds an opening or closing `channel` tag, read leniently
//!   (white space and invisible characters dropped, any case);
//! - the output is neutral (neutralising again changes nothing), and so is every
//!   prefix tried (neutral text is closed under prefixes);
//! - neutralising only swaps `<` `[` `:` for their look-alikes, character for
//!   character, and `suspicious` says whether it swapped any;
//! - `sandbox_body` keeps at most `cap` bytes of the neutral text, marks a cut with
//!   the exact sizes and the `[… cut: …]` line, and keeps the text whole otherwise.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mc_fuzz::{has_channel_tag, is_neutral};
use mc_model::sandbox::{neutralise, sandbox_body};

fuzz_target!(|data: &[u8]| {
    let [c0, c1, cut, rest @ ..] = data else {
        return;
    };
    let cap = usize::from(u16::from_le_bytes([*c0, *c1]) % 4096);
    let body = String::from_utf8_lossy(rest);
    let body = body.as_ref();

    let (neutral, suspicious) = neutralise(body);
    assert!(!has_channel_tag(&neutral), "{body:?} -> {neutral:?}");
    assert!(
        is_neutral(&neutral),
        "not idempotent: {body:?} -> {neutral:?}"
    );
    assert_eq!(suspicious, neutral != body, "{body:?}");
    assert_eq!(neutral.chars().count(), body.chars().count());
    for (a, b) in body.chars().zip(neutral.chars()) {
        assert!(
            a == b
                || matches!(
                    (a, b),
                    ('<', '\u{FF1C}') | ('[', '\u{FF3B}') | (':', '\u{A789}')
                ),
            "{a:?} became {b:?} in {body:?}"
        );
    }
    let at = neutral.floor_char_boundary(usize::from(*cut) * neutral.len() / 255);
    assert!(
        is_neutral(&neutral[..at]),
        "prefix {:?} of {neutral:?}",
        &neutral[..at]
    );

    let s = sandbox_body(body, cap);
    assert_eq!(s.suspicious, suspicious);
    assert!(!has_channel_tag(&s.text), "{body:?} -> {s:?}");
    assert!(is_neutral(&s.text), "{body:?} -> {s:?}");
    match s.truncated {
        None => {
            assert!(neutral.len() <= cap);
            assert_eq!(s.text, neutral);
        }
        Some(t) => {
            assert!(neutral.len() > cap);
            assert_eq!(t.original_bytes, neutral.len());
            assert!(
                t.shown_bytes <= cap && t.shown_bytes + 4 > cap,
                "{t:?} cap {cap}"
            );
            let shown = &neutral[..t.shown_bytes];
            let suffix = format!(
                "\n[\u{2026} cut: {} of {} bytes shown]",
                t.shown_bytes, t.original_bytes
            );
            assert_eq!(s.text, format!("{shown}{suffix}"));
        }
    }
});
