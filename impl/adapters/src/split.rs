//! Splitting a long Markdown body into parts that each fit in one Matrix event.
//!
//! A Matrix event is at most 65,536 bytes as sent over federation, JSON and
//! signatures included ([Client-Server API, "Size limits"]); Synapse answers
//! `413 M_TOO_LARGE` beyond it, and in an encrypted room the limit applies to the
//! ciphertext (about 1.35 times the plaintext). `send_message` therefore cuts a
//! long body into parts with [`split_body`] and sends one event per part.
//!
//! Cuts go, in order of preference, at paragraph breaks (blank lines), then at
//! line breaks, then at whitespace, then between two characters (never inside a
//! UTF-8 character). A fenced code block that fits in a part is never cut; one
//! that does not is cut between its lines and each piece is closed and reopened,
//! so every part renders as code.
//!
//! Pure: no IO.
//!
//! [Client-Server API, "Size limits"]: https://spec.matrix.org/v1.16/client-server-api/#size-limits

use std::ops::Range;

/// The default size of one part, in bytes of Markdown: 32,000.
///
/// Half of the 65,536-byte event limit
/// (<https://spec.matrix.org/v1.16/client-server-api/#size-limits>): the Markdown
/// is sent as `body` and again rendered as the HTML `formatted_body`, which is
/// usually a little longer than its source, and the event's JSON escaping,
/// envelope and (in encrypted rooms) the encryption overhead need the rest.
pub const DEFAULT_PART_BYTES: usize = 32_000;

/// The smallest `max_bytes` honoured: one UTF-8 character is at most 4 bytes.
const MIN_PART_BYTES: usize = 4;

/// Splits `markdown` into parts of at most `max_bytes` bytes each (a `max_bytes`
/// below 4 counts as 4, so that any character fits).
///
/// Returns no part (`vec![]`) for an empty or whitespace-only `markdown`: there is
/// nothing to send, and the caller rejects it. Otherwise every part contains a
/// non-whitespace character, and a text that fits is returned as one part: itself
/// without its leading blank lines and trailing whitespace.
///
/// What is kept, exactly: each part is, in order, a slice of `markdown`, possibly
/// wrapped in fence lines (below). Before the first slice, between two slices and
/// after the last, `markdown` holds only whitespace: the blank lines of a
/// paragraph break, a line break (with the trailing spaces before it), the spaces
/// at a word cut, nothing at a cut between characters. That whitespace is all a
/// cut removes; inside a part the text is verbatim. Joining the slices with the
/// removed whitespace gives back `markdown` byte for byte, so no non-whitespace
/// character is lost or reordered.
///
/// Cuts, in order of preference:
/// 1. between blocks: paragraphs (runs of non-blank lines) and fenced code blocks,
///    packing as many whole blocks in a part as fit;
/// 2. a paragraph longer than `max_bytes` is cut at line breaks, a line longer
///    than that at whitespace, a word longer than that between characters;
/// 3. a fenced code block (CommonMark: a line of at least three `` ` `` or `~`,
///    indented at most three spaces, up to a closing line of at least as many of
///    the same character, or the end of the text) is cut only when it does not fit
///    in one part. It is then cut between its lines (a line too long for a part
///    at whitespace, then between characters), and the pieces are wrapped: every
///    piece but the last ends with an added `"\n"` and the opening fence's marker
///    (say `` "\n```" ``), and every piece but the first starts with an added copy
///    of the opening fence line, info string included (say `` "```rust" ``), and
///    `"\n"`. Blank lines inside the code at a cut are removed with it. When the
///    fence line is so long that a wrapped piece could not hold a character, the
///    block is cut like a paragraph, without wrapping.
///
/// Fences are recognised at the top level only, not inside list items or block
/// quotes. Lines end at `"\n"`; a `"\r"` before it counts as trailing whitespace.
pub fn split_body(markdown: &str, max_bytes: usize) -> Vec<String> {
    split_spans(markdown, max_bytes)
        .iter()
        .map(|span| span.render(markdown))
        .collect()
}

/// One part: `reopen` (a fence line, then `"\n"`), the slice `range`, then
/// `"\n"` and `close` (a fence marker). All three are ranges of the input.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Span {
    reopen: Option<Range<usize>>,
    range: Range<usize>,
    close: Option<Range<usize>>,
}

impl Span {
    fn plain(range: Range<usize>) -> Self {
        Span {
            reopen: None,
            range,
            close: None,
        }
    }

    fn render(&self, text: &str) -> String {
        let mut part = String::with_capacity(self.len());
        if let Some(reopen) = &self.reopen {
            part.push_str(&text[reopen.clone()]);
            part.push('\n');
        }
        part.push_str(&text[self.range.clone()]);
        if let Some(close) = &self.close {
            part.push('\n');
            part.push_str(&text[close.clone()]);
        }
        part
    }

    /// The rendered length, in bytes.
    fn len(&self) -> usize {
        self.reopen.as_ref().map_or(0, |r| r.len() + 1)
            + self.range.len()
            + self.close.as_ref().map_or(0, |c| c.len() + 1)
    }
}

/// The parts of [`split_body`] as ranges of `text`.
fn split_spans(text: &str, max_bytes: usize) -> Vec<Span> {
    let max = max_bytes.max(MIN_PART_BYTES);
    let mut spans = Vec::new();
    let mut current: Option<Range<usize>> = None;
    for block in blocks(text) {
        if block.range.len() <= max {
            current = match current.take() {
                Some(c) if block.range.end - c.start <= max => Some(c.start..block.range.end),
                Some(c) => {
                    spans.push(Span::plain(c));
                    Some(block.range)
                }
                None => Some(block.range),
            };
            continue;
        }
        if let Some(c) = current.take() {
            spans.push(Span::plain(c));
        }
        match &block.fence {
            Some(fence) => spans.extend(split_fence(text, &block, fence, max)),
            None => spans.extend(split_lines(text, block.range, max).map(Span::plain)),
        }
    }
    spans.extend(current.map(Span::plain));
    spans
}

/// A paragraph or a fenced code block. `range` runs from the start of its first
/// line to the end of its last non-blank line, trailing whitespace excluded.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Block {
    range: Range<usize>,
    fence: Option<Fence>,
}

/// The parts of a fenced code block, as ranges of the text.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Fence {
    /// The opening line, without trailing whitespace.
    open: Range<usize>,
    /// The run of `` ` `` or `~` in the opening line.
    marker: Range<usize>,
    /// The code lines that are not blank, without trailing whitespace.
    lines: Vec<Range<usize>>,
    /// The closing line, without trailing whitespace; `None` when the block runs
    /// to the end of the text.
    close: Option<Range<usize>>,
}

/// A line of the text: `start..end` without its `"\n"`.
#[derive(Clone, Copy, Debug)]
struct Line {
    start: usize,
    end: usize,
}

impl Line {
    fn text<'a>(&self, text: &'a str) -> &'a str {
        &text[self.start..self.end]
    }

    fn is_blank(&self, text: &str) -> bool {
        self.text(text).trim().is_empty()
    }

    /// `start..` the end of the line without trailing whitespace.
    fn trimmed(&self, text: &str) -> Range<usize> {
        self.start..self.start + self.text(text).trim_end().len()
    }
}

/// The lines of `text[range]`, with offsets into `text`.
fn lines(text: &str, range: Range<usize>) -> impl Iterator<Item = Line> + '_ {
    let base = range.start;
    text[range].split_inclusive('\n').scan(base, |start, line| {
        let l = Line {
            start: *start,
            end: *start + line.strip_suffix('\n').unwrap_or(line).len(),
        };
        *start += line.len();
        Some(l)
    })
}

/// `(indent, marker length, marker char)` when `line` opens a fenced code block
/// (<https://spec.commonmark.org/0.31.2/#fenced-code-blocks>): at most three
/// spaces, at least three `` ` `` or `~`, and for backticks an info string
/// without backticks.
fn fence_opening(line: &str) -> Option<(usize, usize, char)> {
    let rest = line.trim_start_matches(' ');
    let indent = line.len() - rest.len();
    let ch = rest.chars().next().filter(|c| matches!(c, '`' | '~'))?;
    let len = rest.len() - rest.trim_start_matches(ch).len();
    let info = &rest[len..];
    (indent <= 3 && len >= 3 && !(ch == '`' && info.contains('`'))).then_some((indent, len, ch))
}

/// Whether `line` closes a fence of `len` × `ch`: at most three spaces, at least
/// `len` of `ch`, then only whitespace.
fn is_fence_closing(line: &str, len: usize, ch: char) -> bool {
    let rest = line.trim_start_matches(' ');
    let run = rest.len() - rest.trim_start_matches(ch).len();
    line.len() - rest.len() <= 3 && run >= len && rest[run..].trim().is_empty()
}

/// The paragraphs and fenced code blocks of `text`, in order. Blank lines
/// separate paragraphs; an opening fence line also ends one (CommonMark lets a
/// fence interrupt a paragraph).
fn blocks(text: &str) -> Vec<Block> {
    let all: Vec<Line> = lines(text, 0..text.len()).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < all.len() {
        let line = all[i];
        if line.is_blank(text) {
            i += 1;
            continue;
        }
        if let Some((indent, len, ch)) = fence_opening(line.text(text)) {
            let open = line.trimmed(text);
            let marker = line.start + indent..line.start + indent + len;
            let mut code = Vec::new();
            let mut close = None;
            i += 1;
            while i < all.len() {
                let l = all[i];
                i += 1;
                if is_fence_closing(l.text(text), len, ch) {
                    close = Some(l.trimmed(text));
                    break;
                }
                if !l.is_blank(text) {
                    code.push(l.trimmed(text));
                }
            }
            let end = close.as_ref().or(code.last()).map_or(open.end, |r| r.end);
            out.push(Block {
                range: open.start..end,
                fence: Some(Fence {
                    open,
                    marker,
                    lines: code,
                    close,
                }),
            });
            continue;
        }
        let start = line.start;
        let mut end = line.trimmed(text).end;
        i += 1;
        while i < all.len() && !all[i].is_blank(text) && fence_opening(all[i].text(text)).is_none()
        {
            end = all[i].trimmed(text).end;
            i += 1;
        }
        out.push(Block {
            range: start..end,
            fence: None,
        });
    }
    out
}

/// Packs `atoms` (ordered, non-overlapping, non-empty ranges) greedily into
/// ranges of at most `max` bytes; an atom longer than `max` is cut by
/// `split_atom` into ranges of at most `max` bytes, and the last of them may be
/// packed with the atoms that follow.
fn pack(
    atoms: impl IntoIterator<Item = Range<usize>>,
    max: usize,
    mut split_atom: impl FnMut(Range<usize>) -> Vec<Range<usize>>,
) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut current: Option<Range<usize>> = None;
    for atom in atoms {
        if atom.len() > max {
            out.extend(current.take());
            let mut pieces = split_atom(atom);
            // The last piece may share its part with the atoms that follow.
            current = pieces.pop();
            out.extend(pieces);
            continue;
        }
        current = match current.take() {
            Some(c) if atom.end - c.start <= max => Some(c.start..atom.end),
            Some(c) => {
                out.push(c);
                Some(atom)
            }
            None => Some(atom),
        };
    }
    out.extend(current);
    out
}

/// Cuts `text[range]` at line breaks (lines too long: at whitespace).
fn split_lines(text: &str, range: Range<usize>, max: usize) -> impl Iterator<Item = Range<usize>> {
    let atoms = lines(text, range)
        .filter(|l| !l.is_blank(text))
        .map(|l| l.trimmed(text));
    pack(atoms, max, |atom| split_words(text, atom, max)).into_iter()
}

/// Cuts `text[range]` at whitespace (words too long: between characters).
fn split_words(text: &str, range: Range<usize>, max: usize) -> Vec<Range<usize>> {
    let base = range.start;
    let words = text[range]
        .split(char::is_whitespace)
        .scan(base, |start, word| {
            let w = *start..*start + word.len();
            // Skip the word and the whitespace character that ended it.
            *start += word.len()
                + text[*start + word.len()..]
                    .chars()
                    .next()
                    .map_or(0, char::len_utf8);
            Some(w)
        })
        .filter(|w| !w.is_empty());
    pack(words, max, |word| split_chars(text, word, max))
}

/// Cuts `text[range]` into runs of at most `max` (at least 4) bytes, each ending
/// on a character boundary.
fn split_chars(text: &str, range: Range<usize>, max: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = range.start;
    while start < range.end {
        let mut end = (start + max).min(range.end);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        out.push(start..end);
        start = end;
    }
    out
}

/// Cuts a fenced code block that does not fit in one part into wrapped pieces
/// (see [`split_body`]), or like a paragraph when the fence line is too long.
fn split_fence(text: &str, block: &Block, fence: &Fence, max: usize) -> Vec<Span> {
    let reopen_len = fence.open.len() + 1;
    // Room for the added close, or for the block's own closing line if longer,
    // so that a piece that could be closed can also end the block.
    let close_len = 1 + fence
        .close
        .as_ref()
        .map_or(0, Range::len)
        .max(fence.marker.len());
    if reopen_len + close_len + MIN_PART_BYTES > max {
        return split_lines(text, block.range.clone(), max)
            .map(Span::plain)
            .collect();
    }
    // What a middle piece can hold between its added fence lines.
    let budget = max - reopen_len - close_len;
    let mut atoms: Vec<Range<usize>> = Vec::new();
    for line in &fence.lines {
        if line.len() > budget {
            atoms.extend(split_words(text, line.clone(), budget));
        } else {
            atoms.push(line.clone());
        }
    }
    atoms.extend(fence.close.clone());

    let mut spans = Vec::new();
    let mut start = fence.open.start;
    let mut end = fence.open.end;
    let mut first = true;
    let last = atoms.len().saturating_sub(1);
    for (k, atom) in atoms.into_iter().enumerate() {
        let prefix = if first { 0 } else { reopen_len };
        let suffix = if k == last { 0 } else { close_len };
        if prefix + (atom.end - start) + suffix <= max {
            end = atom.end;
            continue;
        }
        spans.push(Span {
            reopen: (!first).then(|| fence.open.clone()),
            range: start..end,
            close: Some(fence.marker.clone()),
        });
        first = false;
        start = atom.start;
        end = atom.end;
    }
    spans.push(Span {
        reopen: (!first).then(|| fence.open.clone()),
        range: start..end,
        close: None,
    });
    spans
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Checks everything [`split_body`] promises for `text` and `max`.
    fn check(text: &str, max: usize) -> Result<Vec<String>, TestCaseError> {
        let spans = split_spans(text, max);
        let parts = split_body(text, max);
        let limit = max.max(MIN_PART_BYTES);
        prop_assert_eq!(parts.len(), spans.len());
        prop_assert_eq!(text.trim().is_empty(), parts.is_empty());
        let mut cursor = 0;
        for (span, part) in spans.iter().zip(&parts) {
            prop_assert!(
                part.len() <= limit,
                "{} bytes > {}: {:?}",
                part.len(),
                limit,
                part
            );
            prop_assert_eq!(part.len(), span.len());
            prop_assert!(!part.trim().is_empty(), "a blank part: {:?}", part);
            // Slices are in order, and only whitespace lies between them.
            prop_assert!(span.range.start >= cursor, "{:?} overlaps", span);
            let gap = &text[cursor..span.range.start];
            prop_assert!(gap.trim().is_empty(), "lost {:?}", gap);
            cursor = span.range.end;
            // The part is the slice, wrapped in fence lines of the input.
            let mut expected = String::new();
            if let Some(reopen) = &span.reopen {
                let line = &text[reopen.clone()];
                prop_assert!(fence_opening(line).is_some(), "reopen {:?}", line);
                expected.push_str(line);
                expected.push('\n');
            }
            expected.push_str(&text[span.range.clone()]);
            if let Some(close) = &span.close {
                let marker = &text[close.clone()];
                prop_assert!(
                    marker.len() >= 3
                        && (marker.chars().all(|c| c == '`') || marker.chars().all(|c| c == '~'))
                );
                expected.push('\n');
                expected.push_str(marker);
            }
            prop_assert_eq!(part, &expected);
        }
        prop_assert!(
            text[cursor..].trim().is_empty(),
            "lost the tail {:?}",
            &text[cursor..]
        );
        Ok(parts)
    }

    fn parts(text: &str, max: usize) -> Vec<String> {
        check(text, max).unwrap()
    }

    #[test]
    fn the_default_part_leaves_half_the_event_for_html_and_envelope() {
        assert_eq!(DEFAULT_PART_BYTES, 32_000);
        const { assert!(2 * DEFAULT_PART_BYTES < 65_536) };
    }

    #[test]
    fn empty_and_blank_text_has_no_part() {
        for text in ["", " ", "\n\n", " \t\r\n \n", "\u{2003}\n"] {
            assert_eq!(split_body(text, 100), Vec::<String>::new(), "{text:?}");
        }
    }

    #[test]
    fn text_that_fits_is_one_part_without_outer_blank_lines() {
        assert_eq!(parts("hello", 100), ["hello"]);
        assert_eq!(
            parts("\n\n  indented first line\n\nsecond paragraph \n\n", 100),
            ["  indented first line\n\nsecond paragraph"]
        );
        let exact = "a".repeat(100);
        assert_eq!(parts(&exact, 100), [exact.as_str()]);
    }

    #[test]
    fn paragraphs_are_packed_and_cut_at_blank_lines() {
        let text = "aaaa aaaa\n\nbbbb\n\n\n\ncccc cccc cccc";
        assert_eq!(parts(text, 16), ["aaaa aaaa\n\nbbbb", "cccc cccc cccc"]);
        assert_eq!(parts(text, 9), ["aaaa aaaa", "bbbb", "cccc cccc", "cccc"]);
    }

    #[test]
    fn blank_lines_inside_a_part_are_kept_verbatim() {
        assert_eq!(parts("a\n\n\n\nb", 100), ["a\n\n\n\nb"]);
        assert_eq!(parts("a\r\n\r\nb\r\n", 100), ["a\r\n\r\nb"]);
    }

    #[test]
    fn a_long_paragraph_is_cut_at_line_breaks() {
        let text = "one one\ntwo two\nthree three";
        assert_eq!(parts(text, 16), ["one one\ntwo two", "three three"]);
    }

    #[test]
    fn a_long_line_is_cut_at_whitespace() {
        let text = "alpha beta gamma delta";
        assert_eq!(parts(text, 11), ["alpha beta", "gamma delta"]);
        assert_eq!(parts("alpha \t beta", 6), ["alpha", "beta"]);
    }

    #[test]
    fn a_long_word_is_cut_between_characters_never_inside_one() {
        assert_eq!(parts("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        // "é" is 2 bytes, "😀" is 4.
        assert_eq!(parts("éééé", 5), ["éé", "éé"]);
        assert_eq!(parts("😀😀😀", 7), ["😀", "😀", "😀"]);
        assert_eq!(parts("a😀b", 4), ["a", "😀", "b"]);
    }

    #[test]
    fn a_max_below_one_character_counts_as_four_bytes() {
        assert_eq!(parts("😀😀", 0), ["😀", "😀"]);
        assert_eq!(parts("abcdef", 1), ["abcd", "ef"]);
    }

    #[test]
    fn a_fenced_block_that_fits_is_never_cut_even_at_its_blank_lines() {
        let code = "```rust\nfn a() {}\n\nfn b() {}\n```";
        let text = format!("intro\n\n{code}\n\noutro");
        assert_eq!(parts(&text, code.len()), ["intro", code, "outro"]);
        assert_eq!(
            parts(&text, code.len() + 7),
            [format!("intro\n\n{code}"), "outro".to_owned()]
        );
    }

    #[test]
    fn a_fence_interrupts_a_paragraph() {
        let text = "see:\n```\nx\n```\nafter";
        assert_eq!(parts(text, 12), ["see:", "```\nx\n```", "after"]);
    }

    #[test]
    fn a_fenced_block_too_long_is_closed_and_reopened_with_its_info_string() {
        let text = "```rust\nlet a = 1;\nlet b = 2;\nlet c = 3;\n```";
        assert_eq!(
            parts(text, 30),
            [
                "```rust\nlet a = 1;\n```",
                "```rust\nlet b = 2;\n```",
                "```rust\nlet c = 3;\n```",
            ]
        );
        assert_eq!(
            parts(text, 34),
            [
                "```rust\nlet a = 1;\nlet b = 2;\n```",
                "```rust\nlet c = 3;\n```",
            ]
        );
    }

    #[test]
    fn a_reopened_fence_uses_the_same_marker_and_indentation() {
        let text = "  ~~~~ text\naaaa\nbbbb\n  ~~~~";
        assert_eq!(
            parts(text, 23),
            ["  ~~~~ text\naaaa\n~~~~", "  ~~~~ text\nbbbb\n  ~~~~"]
        );
    }

    #[test]
    fn an_unclosed_fence_is_not_closed_at_its_end() {
        let text = "```\naaaa\nbbbb\ncccc";
        assert_eq!(
            parts(text, 12),
            ["```\naaaa\n```", "```\nbbbb\n```", "```\ncccc"]
        );
    }

    #[test]
    fn a_long_code_line_is_cut_inside_the_fence() {
        let text = "```\naaaa bbbb cccc\n```";
        assert_eq!(
            parts(text, 12),
            ["```\naaaa\n```", "```\nbbbb\n```", "```\ncccc\n```"]
        );
    }

    #[test]
    fn a_fence_line_too_long_to_wrap_is_cut_like_a_paragraph() {
        let text = "```a-very-long-info-string\nxx\nyy\n```";
        assert_eq!(
            parts(text, 12),
            ["```a-very-lo", "ng-info-stri", "ng\nxx\nyy\n```"]
        );
    }

    #[test]
    fn a_closing_fence_is_at_least_as_long_as_the_opening_one() {
        let text = "````\n```\ninside\n````\nafter";
        let blocks = blocks(text);
        assert_eq!(blocks.len(), 2);
        assert_eq!(&text[blocks[0].range.clone()], "````\n```\ninside\n````");
        assert_eq!(&text[blocks[1].range.clone()], "after");
    }

    #[test]
    fn fence_openings_follow_commonmark() {
        assert_eq!(fence_opening("```"), Some((0, 3, '`')));
        assert_eq!(fence_opening("   ~~~~ python"), Some((3, 4, '~')));
        assert_eq!(
            fence_opening("    ```"),
            None,
            "four spaces is indented code"
        );
        assert_eq!(fence_opening("``"), None);
        assert_eq!(
            fence_opening("``` a`b"),
            None,
            "a backtick in the info string"
        );
        assert_eq!(fence_opening("~~~ a`b"), Some((0, 3, '~')));
        assert_eq!(fence_opening("text ```"), None);
        assert!(is_fence_closing("```  ", 3, '`'));
        assert!(is_fence_closing("   `````", 3, '`'));
        assert!(!is_fence_closing("``", 3, '`'));
        assert!(!is_fence_closing("~~~", 3, '`'));
        assert!(!is_fence_closing("``` rust", 3, '`'));
        assert!(!is_fence_closing("    ```", 3, '`'));
    }

    #[test]
    fn a_realistic_reply_splits_into_parts_under_the_default_size() {
        let paragraph = "The build failed in `impl/` because the test harness could not reach the homeserver; retrying with a fresh store fixed it. ".repeat(20);
        let code = format!(
            "```text\n{}```",
            "error[E0277]: the trait bound is not satisfied\n".repeat(800)
        );
        let text = format!("{paragraph}\n\n{code}\n\n{paragraph}");
        let parts = parts(&text, DEFAULT_PART_BYTES);
        assert!(parts.len() >= 2, "{}", parts.len());
        assert!(parts.iter().all(|p| p.len() <= DEFAULT_PART_BYTES));
        let code_parts: Vec<_> = parts
            .iter()
            .filter(|p| p.contains("error[E0277]"))
            .collect();
        assert!(code_parts.len() >= 2);
        for p in code_parts {
            assert!(p.starts_with("```text\nerror[E0277]"), "{}", &p[..20]);
            assert!(p.ends_with("satisfied\n```"), "{}", &p[p.len() - 20..]);
        }
    }

    /// Markdown-ish text: words with multibyte characters, spaces and tabs, line
    /// breaks (LF and CRLF), blank lines, and fences.
    fn markdown() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            4 => "[a-z]{1,12}",
            1 => "[éü😀中]{1,4}",
            2 => Just(" ".to_owned()),
            1 => Just("\t".to_owned()),
            3 => Just("\n".to_owned()),
            1 => Just("\r\n".to_owned()),
            2 => Just("\n\n".to_owned()),
            1 => Just("\n```rust\n".to_owned()),
            1 => Just("\n```\n".to_owned()),
            1 => Just("\n~~~~ txt\n".to_owned()),
            1 => Just("\n  ~~~~\n".to_owned()),
            1 => Just("`".to_owned()),
        ];
        prop::collection::vec(piece, 0..80).prop_map(|p| p.concat())
    }

    proptest! {
        #[test]
        fn parts_fit_keep_order_and_lose_only_whitespace_at_cuts(
            text in markdown(),
            max in 0usize..120,
        ) {
            check(&text, max)?;
        }

        #[test]
        fn arbitrary_text_keeps_the_promises(text in "\\PC{0,200}", max in 0usize..64) {
            check(&text, max)?;
        }

        #[test]
        fn every_part_of_a_long_fenced_block_is_wrapped_in_its_fences(
            lines in prop::collection::vec("[a-z ]{0,30}", 1..40),
            max in 14usize..80,
        ) {
            let text = format!("```sh\n{}\n```", lines.join("\n"));
            let parts = check(&text, max)?;
            if !text.trim().is_empty() && text.len() > max {
                for part in &parts {
                    prop_assert!(part.starts_with("```sh\n"), "{:?}", part);
                    prop_assert!(part.ends_with("\n```"), "{:?}", part);
                }
            }
        }

        #[test]
        fn a_fenced_block_that_fits_is_in_one_part(text in markdown(), max in 4usize..120) {
            let spans = split_spans(&text, max);
            for block in blocks(&text).into_iter().filter(|b| b.fence.is_some()) {
                if block.range.len() <= max {
                    prop_assert!(
                        spans.iter().any(|s| s.range.start <= block.range.start
                            && block.range.end <= s.range.end
                            && s.reopen.is_none() && s.close.is_none()),
                        "{:?} was cut", &text[block.range.clone()]
                    );
                }
            }
        }

        #[test]
        fn any_text_that_fits_is_exactly_one_part(text in markdown()) {
            let mut start = 0;
            for line in text.split_inclusive('\n') {
                if !line.trim().is_empty() {
                    break;
                }
                start += line.len();
            }
            let expected = text[start..].trim_end();
            let parts = check(&text, expected.len())?;
            if !expected.is_empty() {
                prop_assert_eq!(parts, vec![expected.to_owned()]);
            }
        }
    }
}
