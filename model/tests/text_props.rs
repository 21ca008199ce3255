//! Property tests of the text helpers: verdict parsing, reaction keys, reply
//! fallbacks and clipping, and the body sandbox.

use mc_model::fallback::{clip_bytes, clip_chars, quote, strip_plain_reply_fallback};
use mc_model::reaction::{normalize_key, ReactionKeys};
use mc_model::sandbox::{neutralise, sandbox_body};
use mc_model::verdict::{parse_text_verdict, Behavior, RequestId, REQUEST_ID_ALPHABET};
use proptest::prelude::*;

const ALPHABET: &[u8] = REQUEST_ID_ALPHABET.as_bytes();

/// A valid request id.
fn request_id() -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(ALPHABET), 5)
        .prop_map(|letters| letters.into_iter().map(char::from).collect())
}

/// A run of (mostly Unicode) white space, at least `min` characters long.
fn white_space(min: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(
        proptest::sample::select(vec![
            ' ', '\t', '\n', '\r', '\u{A0}', '\u{3000}', '\u{2028}',
        ]),
        min..4,
    )
    .prop_map(|cs| cs.into_iter().collect())
}

/// `word` with each letter's case picked by `upper`.
fn with_case(word: &str, upper: &[bool]) -> String {
    word.chars()
        .zip(upper.iter().cycle())
        .map(|(c, &up)| if up { c.to_ascii_uppercase() } else { c })
        .collect()
}

proptest! {
    #[test]
    fn any_case_and_spacing_of_a_valid_verdict_parses_to_the_lowercase_id(
        id in request_id(),
        word in proptest::sample::select(vec!["y", "yes", "n", "no"]),
        upper in proptest::collection::vec(any::<bool>(), 1..8),
        before in white_space(0),
        between in white_space(1),
        after in white_space(0),
    ) {
        let body = format!(
            "{before}{}{between}{}{after}",
            with_case(word, &upper),
            with_case(&id, &upper[1..].iter().chain(&upper[..1]).copied().collect::<Vec<_>>()),
        );
        let verdict = parse_text_verdict(&body).expect("a valid verdict");
        let behavior = if word.starts_with('y') { Behavior::Allow } else { Behavior::Deny };
        prop_assert_eq!(verdict.behavior, behavior);
        prop_assert_eq!(verdict.request_id.as_str(), id.as_str());
    }

    #[test]
    fn a_parsed_verdict_always_names_a_lowercase_id_from_the_alphabet(body in "\\PC{0,20}") {
        if let Some(verdict) = parse_text_verdict(&body) {
            let id = verdict.request_id.as_str();
            prop_assert_eq!(id.chars().count(), 5);
            prop_assert!(id.chars().all(|c| REQUEST_ID_ALPHABET.contains(c)));
        }
    }

    #[test]
    fn a_verdict_shaped_body_parses_whatever_its_id_letters(
        // ASCII case only: `(?i)` would also draw U+017F LONG S for `s`, which is no
        // verdict word.
        word in "[yY]|[yY][eE][sS]|[nN]|[nN][oO]",
        id in "[a-zA-Z]{5}",
    ) {
        let parsed = parse_text_verdict(&format!("{word} {id}"));
        prop_assert_eq!(parsed.is_some(), !id.contains(['l', 'L']));
    }

    #[test]
    fn request_ids_round_trip_through_parse_display_and_serde(id in request_id()) {
        let parsed = RequestId::parse(&id).expect("valid id");
        prop_assert_eq!(parsed.to_string(), id.clone());
        let json = serde_json::to_string(&parsed).expect("serialize");
        prop_assert_eq!(&json, &format!("\"{id}\""));
        let back: RequestId = serde_json::from_str(&json).expect("deserialize");
        prop_assert_eq!(back, parsed);
    }

    #[test]
    fn a_string_is_a_request_id_exactly_when_it_is_five_alphabet_letters(s in "[a-zA-Z0-9é]{3,7}") {
        let valid = s.chars().count() == 5 && s.chars().all(|c| REQUEST_ID_ALPHABET.contains(c));
        prop_assert_eq!(RequestId::parse(&s).is_ok(), valid);
    }
}

/// Whether `normalize_key` drops `c`, by the rule's own words.
fn dropped_by_normalising(c: char) -> bool {
    c == '\u{FE0E}' || c == '\u{FE0F}' || ('\u{1F3FB}'..='\u{1F3FF}').contains(&c)
}

/// Strings rich in emoji, selectors and skin tones.
fn emoji_text() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            proptest::sample::select(vec![
                '\u{FE0E}',
                '\u{FE0F}',
                '\u{FE0D}',
                '\u{FE10}',
                '\u{1F3FA}',
                '\u{1F3FB}',
                '\u{1F3FD}',
                '\u{1F3FF}',
                '\u{1F400}',
                '\u{1F44D}',
                '\u{1F44E}',
                '\u{200D}',
                '\u{2705}',
                '\u{274C}',
            ]),
            any::<char>(),
        ],
        0..10,
    )
    .prop_map(|cs| cs.into_iter().collect())
}

proptest! {
    #[test]
    fn normalising_a_key_is_idempotent(key in emoji_text()) {
        let once = normalize_key(&key);
        prop_assert_eq!(normalize_key(&once), once);
    }

    #[test]
    fn normalising_removes_only_selectors_and_skin_tones(key in emoji_text()) {
        let filtered: String = key.chars().filter(|&c| !dropped_by_normalising(c)).collect();
        prop_assert_eq!(normalize_key(&key), filtered);
    }

    #[test]
    fn selectors_and_skin_tones_never_change_a_classification(
        key in emoji_text(),
        extra in proptest::collection::vec(
            proptest::sample::select(vec!['\u{FE0E}', '\u{FE0F}', '\u{1F3FB}', '\u{1F3FF}']),
            0..3,
        ),
    ) {
        let keys = ReactionKeys::default();
        let decorated: String = key.chars().chain(extra).collect();
        prop_assert_eq!(keys.classify(&decorated), keys.classify(&key));
    }
}

/// Strings of multi-byte characters (and a little ASCII), so that caps fall
/// inside characters.
fn multi_byte_text() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        proptest::sample::select(vec!["a", "é", "中", "😀", "👍🏽", " ", "\n"]),
        0..12,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #[test]
    fn clip_bytes_never_splits_a_character(s in multi_byte_text(), cap in 0usize..40) {
        let (clipped, was_clipped) = clip_bytes(&s, cap);
        prop_assert!(s.starts_with(clipped));
        prop_assert!(clipped.len() <= cap || (!was_clipped && clipped.len() == s.len()));
        prop_assert_eq!(was_clipped, s.len() > cap);
        if was_clipped {
            // The largest boundary: the next character would not have fitted.
            let next = s[clipped.len()..].chars().next().expect("a cut leaves a rest");
            prop_assert!(clipped.len() + next.len_utf8() > cap);
        } else {
            prop_assert_eq!(clipped, s.as_str());
        }
    }

    #[test]
    fn clip_chars_never_splits_a_character(s in multi_byte_text(), cap in 0usize..15) {
        let (clipped, was_clipped) = clip_chars(&s, cap);
        prop_assert!(s.starts_with(clipped));
        let count = s.chars().count();
        prop_assert_eq!(was_clipped, count > cap);
        prop_assert_eq!(clipped.chars().count(), count.min(cap));
        if !was_clipped {
            prop_assert_eq!(clipped, s.as_str());
        }
    }

    #[test]
    fn a_quote_is_one_neutral_line_within_its_limit(
        parent in prop_oneof![multi_byte_text(), marker_text(), "\\PC{0,40}"],
        is_reply in any::<bool>(),
        max in 0usize..30,
    ) {
        let q = quote(&parent, is_reply, max);
        prop_assert!(!q.text.contains('\n'));
        prop_assert!(q.text.chars().count() <= max);
        prop_assert!(!q.text.starts_with(' ') && !q.text.contains("  "));
        let (again, suspicious) = neutralise(&q.text);
        prop_assert_eq!(again.as_ref(), q.text.as_str());
        prop_assert!(!suspicious);
        if q.clipped && max > 0 {
            prop_assert!(q.text.ends_with('…'));
        }
    }

    #[test]
    fn stripping_a_plain_fallback_leaves_a_suffix(body in "(> <@a:x> [a-z ]{0,5}\r?\n|>\n|\n|[a-z> ]{0,6}\n?){0,5}") {
        prop_assert!(body.ends_with(strip_plain_reply_fallback(&body)));
    }
}

/// Fragments that build (and almost build) channel, role and template markers.
const FRAGMENTS: &[&str] = &[
    "<",
    "/",
    "channel",
    "CHANNEL",
    "ChAnNeL",
    " ",
    "\t",
    "\u{200B}",
    "\u{FEFF}",
    "|",
    "im_start",
    "[",
    "INST",
    "]",
    "system",
    "System",
    "Human",
    "assistant",
    ":",
    "\n",
    "\r",
    "\u{2028}",
    "x",
    "é",
    "😀",
    "<<",
    "SYS",
    ">>",
    ">",
    "user",
    "tool_use",
    "antml:",
    "<",
    "chan",
    "nel",
];

fn marker_text() -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(FRAGMENTS), 0..24)
        .prop_map(|parts| parts.concat())
}

/// What [`neutralise`] looks through inside a marker, besides white space.
fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{200B}'..='\u{200F}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}' | '\u{00AD}' | '\u{180E}'
    )
}

/// `s` without white space and invisible characters, lowercased.
fn squeezed(s: &str) -> String {
    s.chars()
        .filter(|&c| !c.is_whitespace() && !invisible(c))
        .collect::<String>()
        .to_lowercase()
}

fn is_line_break(c: char) -> bool {
    matches!(
        c,
        '\n' | '\u{0B}' | '\u{0C}' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}'
    )
}

proptest! {
    #[test]
    fn neutralised_text_holds_no_marker(text in marker_text()) {
        let (out, suspicious) = neutralise(&text);
        let flat = squeezed(&out);
        for marker in ["</channel", "<channel", "<system", "<user", "<tool", "<|",
                       "[inst]", "[/inst]", "<<sys>>", "<</sys>>"] {
            prop_assert!(!flat.contains(marker), "{marker} in {flat:?}");
        }
        for line in out.split(is_line_break) {
            let line = squeezed(line);
            for role in ["human:", "assistant:", "system:"] {
                prop_assert!(!line.starts_with(role), "{role} in {line:?}");
            }
        }
        prop_assert_eq!(suspicious, out != text);
    }

    #[test]
    fn neutralising_is_idempotent(text in prop_oneof![marker_text(), "\\PC{0,40}"]) {
        let once = neutralise(&text).0.into_owned();
        let (twice, suspicious) = neutralise(&once);
        prop_assert_eq!(twice.as_ref(), once.as_str());
        prop_assert!(!suspicious);
    }

    #[test]
    fn neutralising_only_swaps_angle_brackets_square_brackets_and_colons(
        text in prop_oneof![marker_text(), "\\PC{0,40}"],
    ) {
        let (out, _) = neutralise(&text);
        prop_assert_eq!(out.chars().count(), text.chars().count());
        for (before, after) in text.chars().zip(out.chars()) {
            prop_assert!(
                before == after
                    || (before, after) == ('<', '\u{FF1C}')
                    || (before, after) == ('[', '\u{FF3B}')
                    || (before, after) == (':', '\u{A789}'),
                "{before:?} became {after:?}"
            );
        }
    }

    #[test]
    fn every_prefix_of_neutral_text_is_neutral(text in marker_text()) {
        let out = neutralise(&text).0.into_owned();
        for (end, _) in out.char_indices() {
            prop_assert!(!neutralise(&out[..end]).1, "prefix {:?}", &out[..end]);
        }
    }

    #[test]
    fn text_without_brackets_or_colons_is_untouched(text in "[^<\\[:]{0,40}") {
        let (out, suspicious) = neutralise(&text);
        prop_assert_eq!(out.as_ref(), text.as_str());
        prop_assert!(!suspicious);
    }

    #[test]
    fn a_sandboxed_body_keeps_a_neutral_prefix_within_the_cap(
        body in prop_oneof![marker_text(), multi_byte_text()],
        cap in 0usize..60,
    ) {
        let sandboxed = sandbox_body(&body, cap);
        let (neutral, suspicious) = neutralise(&body);
        prop_assert_eq!(sandboxed.suspicious, suspicious);
        let shown = match sandboxed.truncated {
            Some(t) => {
                let suffix = format!("\n[… cut: {} of {} bytes shown]", t.shown_bytes, t.original_bytes);
                prop_assert_eq!(t.original_bytes, neutral.len());
                prop_assert!(neutral.len() > cap);
                prop_assert!(sandboxed.text.ends_with(&suffix));
                &sandboxed.text[..sandboxed.text.len() - suffix.len()]
            }
            None => {
                prop_assert!(neutral.len() <= cap);
                sandboxed.text.as_str()
            }
        };
        prop_assert!(shown.len() <= cap);
        prop_assert!(neutral.starts_with(shown));
        prop_assert!(neutral.is_char_boundary(shown.len()));
        prop_assert!(!neutralise(&sandboxed.text).1);
    }
}
