//! Long Markdown into the texts of several `m.room.message` events, each of whose
//! content (the Markdown `body` and its HTML `formatted_body`, as JSON) fits a
//! budget below Matrix's event size limit: [`fit_parts`], with the budgets of a room
//! in the clear and of an encrypted one.

use crate::split;
use ruma::events::room::message::RoomMessageEventContentWithoutRelation;

/// The largest `content` of one sent message, in bytes of JSON. Matrix caps a whole
/// event at 65,536 bytes, envelope, hashes and signatures included (Synapse answers
/// `413 M_TOO_LARGE`); a few KB are left for those and for a relation.
pub const MAX_CONTENT_BYTES: usize = 60_000;

/// The same in an encrypted room (or one whose encryption is not known yet): the
/// ciphertext is base64 (4/3) of the encrypted JSON, plus the megolm fields.
pub const MAX_ENCRYPTED_CONTENT_BYTES: usize = 42_000;

/// A part is never cut below this size: its content cannot then exceed the budgets.
pub const MIN_FIT_BYTES: usize = 1_000;

/// The bytes of the JSON content of a Markdown message of `text` (its `body` and
/// the HTML `formatted_body` rendered from it).
pub fn content_bytes(text: &str) -> usize {
    let content = RoomMessageEventContentWithoutRelation::text_markdown(text);
    serde_json::to_vec(&content).map_or(usize::MAX, |v| v.len())
}

/// Splits `text` into parts whose content ([`content_bytes`]) fits in `budget`
/// bytes. [`split::split_body`] bounds the Markdown only, and the HTML of short
/// paragraphs or of escaped characters is longer than its source: a part whose
/// content is too large is split again at half the size, until it fits or its size
/// is [`MIN_FIT_BYTES`]. Deterministic: the same text gives the same parts (the
/// transaction ids of a retry depend on it). No part for a text of whitespace only.
pub fn fit_parts(text: &str, budget: usize) -> Vec<String> {
    let mut todo: Vec<(String, usize)> = split::split_body(text, split::DEFAULT_PART_BYTES)
        .into_iter()
        .rev()
        .map(|part| (part, split::DEFAULT_PART_BYTES))
        .collect();
    let mut parts = Vec::new();
    while let Some((part, size)) = todo.pop() {
        if content_bytes(&part) <= budget || size <= MIN_FIT_BYTES {
            parts.push(part);
            continue;
        }
        let half = (size.min(part.len()) / 2).max(MIN_FIT_BYTES);
        todo.extend(
            split::split_body(&part, half)
                .into_iter()
                .rev()
                .map(|p| (p, half)),
        );
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_of_short_paragraphs_is_cut_into_parts_whose_content_fits_the_budget() {
        let text: Vec<String> = (0..1400)
            .map(|i| format!("Paragraph {i:05}: the quick brown fox & the <lazy> dog."))
            .collect();
        let text = text.join("\n\n");
        for budget in [MAX_CONTENT_BYTES, MAX_ENCRYPTED_CONTENT_BYTES] {
            let parts = fit_parts(&text, budget);
            assert!(parts.len() > 1);
            for part in &parts {
                let content = RoomMessageEventContentWithoutRelation::text_markdown(part);
                let bytes = serde_json::to_vec(&content).unwrap().len();
                assert!(bytes <= budget, "{bytes} > {budget}");
            }
            assert_eq!(parts.join("\n\n"), text);
        }
        assert_eq!(fit_parts("short", MAX_CONTENT_BYTES), vec!["short"]);
        assert!(fit_parts(" \n ", MAX_CONTENT_BYTES).is_empty());
    }

    fn paragraphs(count: usize) -> String {
        let text: Vec<String> = (0..count)
            .map(|i| format!("Paragraph {i:05}: the quick brown fox & the <lazy> dog."))
            .collect();
        text.join("\n\n")
    }

    #[test]
    fn the_content_of_a_markdown_message_counts_its_body_and_its_html() {
        let json = r#"{"msgtype":"m.text","body":"*a*","format":"org.matrix.custom.html","formatted_body":"<em>a</em>"}"#;
        assert_eq!(content_bytes("*a*"), json.len());
    }

    #[test]
    fn a_text_whose_content_fits_the_budget_exactly_is_one_part_and_one_byte_less_cuts_it() {
        let text = paragraphs(60);
        assert!(text.len() > 2 * MIN_FIT_BYTES);
        let exact = content_bytes(&text);
        assert_eq!(fit_parts(&text, exact), vec![text.clone()]);
        let parts = fit_parts(&text, exact - 1);
        assert!(parts.len() > 1);
        assert_eq!(parts.join("\n\n"), text);
    }

    #[test]
    fn a_part_too_large_is_halved_not_cut_to_the_smallest_size() {
        // The halves of a part of `DEFAULT_PART_BYTES` fit the budget: no part is cut
        // down to `MIN_FIT_BYTES`.
        let text = paragraphs(1000);
        let first = split::split_body(&text, split::DEFAULT_PART_BYTES);
        let parts = fit_parts(&text, MAX_ENCRYPTED_CONTENT_BYTES);
        assert!(parts.len() > first.len());
        assert!(parts.len() < 4 * first.len(), "{} parts", parts.len());
    }

    #[test]
    fn parts_stop_at_the_smallest_size_even_when_their_content_does_not_fit() {
        let text = paragraphs(100);
        let parts = fit_parts(&text, 10);
        assert!(parts.len() > 3);
        assert!(parts.iter().all(|p| p.len() <= MIN_FIT_BYTES), "{parts:?}");
        assert_eq!(parts.join("\n\n"), text);
    }
}
