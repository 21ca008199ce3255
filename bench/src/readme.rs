//! Putting the table into the README between two marker lines.

use std::fmt;
use std::path::Path;

use crate::Error;

/// The line before the table in the README.
pub const START_MARKER: &str = "<!-- bench-table:start -->";
/// The line after the table in the README.
pub const END_MARKER: &str = "<!-- bench-table:end -->";

/// Why the README's table could not be replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkerError {
    /// No line is exactly the start marker.
    MissingStart,
    /// No line after the start marker is exactly the end marker.
    MissingEnd,
    /// The start marker appears more than once.
    RepeatedStart,
    /// The end marker appears before the start marker or more than once.
    StrayEnd,
}

impl fmt::Display for MarkerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MarkerError::MissingStart => write!(f, "no line `{START_MARKER}` (add `{START_MARKER}` and `{END_MARKER}` lines where the table goes)"),
            MarkerError::MissingEnd => write!(f, "no line `{END_MARKER}` after `{START_MARKER}`"),
            MarkerError::RepeatedStart => write!(f, "`{START_MARKER}` appears more than once"),
            MarkerError::StrayEnd => write!(f, "`{END_MARKER}` appears before `{START_MARKER}` or more than once"),
        }
    }
}

impl std::error::Error for MarkerError {}

/// Replaces what lies between the line `<!-- bench-table:start -->` and the line
/// `<!-- bench-table:end -->` in `text` with `table`, framed by one blank line on each
/// side. Marker lines match exactly, ignoring surrounding whitespace (and a `\r`);
/// everything outside them is kept byte for byte. Idempotent.
pub fn replace_table(text: &str, table: &str) -> Result<String, MarkerError> {
    let mut start = None; // byte offset just after the start marker's line
    let mut end = None; // byte offset where the end marker's line begins
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        if trimmed == START_MARKER {
            if start.is_some() {
                return Err(MarkerError::RepeatedStart);
            }
            start = Some(offset + line.len());
        } else if trimmed == END_MARKER {
            if start.is_none() || end.is_some() {
                return Err(MarkerError::StrayEnd);
            }
            end = Some(offset);
        }
        offset += line.len();
    }
    let start = start.ok_or(MarkerError::MissingStart)?;
    let end = end.ok_or(MarkerError::MissingEnd)?;
    let mut out = String::with_capacity(text.len() + table.len());
    // The start marker's line ends with a newline: the end marker's line follows it.
    out.push_str(&text[..start]);
    out.push('\n');
    out.push_str(table.trim());
    out.push_str("\n\n");
    out.push_str(&text[end..]);
    Ok(out)
}

/// [`replace_table`] on the file at `path`, written back in place.
pub fn update_readme(path: &Path, table: &str) -> Result<(), Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })?;
    let new = replace_table(&text, table).map_err(|problem| Error::Markers {
        path: path.to_owned(),
        problem,
    })?;
    std::fs::write(path, new).map_err(|source| Error::Write {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const README: &str = "# Title\n\nBefore.\n<!-- bench-table:start -->\nold table\n\nmore old\n<!-- bench-table:end -->\nAfter.\n";

    #[test]
    fn the_text_between_the_markers_is_replaced_and_the_rest_kept() {
        let new = replace_table(README, "| a |\n| --- |\n").unwrap();
        assert_eq!(
            new,
            "# Title\n\nBefore.\n<!-- bench-table:start -->\n\n| a |\n| --- |\n\n<!-- bench-table:end -->\nAfter.\n"
        );
    }

    #[test]
    fn replacing_twice_gives_the_same_text() {
        let once = replace_table(README, "| a |").unwrap();
        assert_eq!(replace_table(&once, "| a |").unwrap(), once);
    }

    #[test]
    fn adjacent_markers_and_crlf_lines_are_accepted() {
        let text = "x\r\n<!-- bench-table:start -->\r\n  <!-- bench-table:end -->  \r\ny\r\n";
        assert_eq!(
            replace_table(text, "T").unwrap(),
            "x\r\n<!-- bench-table:start -->\r\n\nT\n\n  <!-- bench-table:end -->  \r\ny\r\n"
        );
    }

    #[test]
    fn missing_or_misplaced_markers_are_errors() {
        assert_eq!(
            replace_table("no markers\n", "T"),
            Err(MarkerError::MissingStart)
        );
        assert_eq!(
            replace_table("<!-- bench-table:start -->\nx\n", "T"),
            Err(MarkerError::MissingEnd)
        );
        assert_eq!(
            replace_table(
                "<!-- bench-table:end -->\n<!-- bench-table:start -->\n",
                "T"
            ),
            Err(MarkerError::StrayEnd)
        );
        assert_eq!(
            replace_table(
                "<!-- bench-table:start -->\n<!-- bench-table:start -->\n<!-- bench-table:end -->\n",
                "T"
            ),
            Err(MarkerError::RepeatedStart)
        );
        assert_eq!(
            replace_table(
                "<!-- bench-table:start -->\n<!-- bench-table:end -->\n<!-- bench-table:end -->\n",
                "T"
            ),
            Err(MarkerError::StrayEnd)
        );
    }

    #[test]
    fn a_marker_inside_a_line_is_not_a_marker() {
        let text = "see `<!-- bench-table:start -->` and `<!-- bench-table:end -->`\n";
        assert_eq!(replace_table(text, "T"), Err(MarkerError::MissingStart));
    }
}
