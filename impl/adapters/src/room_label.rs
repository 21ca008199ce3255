//! The room label a channel session brings (docs/decisions/0026-session-rooms.md,
//! docs/protocol.md "Session rooms"): over HTTP the `room` query parameter of the
//! endpoint URL or the [`ROOM_HEADER`] header (the header wins), read when the MCP
//! session is created; for `matrix-channel stdio` its `--room` flag, else Claude
//! Code's [`SESSION_ID_ENV`]. A label is what [`Label::parse`] accepts.

use mc_model::{Label, LabelError};

/// The HTTP header that carries a session's room label.
pub const ROOM_HEADER: &str = "matrix-channel-room";

/// The query parameter of the endpoint URL that carries a session's room label.
pub const ROOM_PARAM: &str = "room";

/// The environment variable Claude Code sets for a stdio server: its session id (the
/// same after `claude --resume`; docs/notes/claude-code-session-ids.md).
pub const SESSION_ID_ENV: &str = "CLAUDE_CODE_SESSION_ID";

/// Why a request's room label is refused (the initialize is answered 400).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The text is no label.
    Invalid(LabelError),
    /// The header's value is not visible ASCII, so it cannot be a label.
    NotText,
    /// A label on a mount other than `/channel`: only a channel session has a room.
    NotChannel,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Invalid(e) => write!(f, "invalid room label: {e}"),
            Refusal::NotText => write!(
                f,
                "invalid room label: the {ROOM_HEADER} header is not text"
            ),
            Refusal::NotChannel => write!(
                f,
                "a room label (the `{ROOM_PARAM}` parameter or the {ROOM_HEADER} header) \
                 is taken only on /channel"
            ),
        }
    }
}

/// The value of the first `room` parameter of a URL query (`a=1&room=web`),
/// percent-decoded as a form; `None` when there is none.
pub fn query_room(query: Option<&str>) -> Option<String> {
    url::form_urlencoded::parse(query?.as_bytes())
        .find(|(key, _)| key == ROOM_PARAM)
        .map(|(_, value)| value.into_owned())
}

/// The label of a request that creates an MCP session: from `header` (the raw
/// [`ROOM_HEADER`] value) when it is present, else from the `room` parameter of
/// `query`; `Ok(None)` when neither is present. Errors: a text that is no label, a
/// header that is not text, and any label when `channel` is false (the mount is not
/// `/channel`).
pub fn http_label(
    query: Option<&str>,
    header: Option<&[u8]>,
    channel: bool,
) -> Result<Option<Label>, Refusal> {
    let text = match header {
        Some(bytes) => Some(
            std::str::from_utf8(bytes)
                .ok()
                .filter(|text| text.chars().all(|c| c.is_ascii_graphic() || c == ' '))
                .ok_or(Refusal::NotText)?
                .trim()
                .to_owned(),
        ),
        None => query_room(query),
    };
    let Some(text) = text else {
        return Ok(None);
    };
    if !channel {
        return Err(Refusal::NotChannel);
    }
    Label::parse(&text).map(Some).map_err(Refusal::Invalid)
}

/// The label `matrix-channel stdio` brings: `--room` when given (errors: it is no
/// label, a startup error), else [`SESSION_ID_ENV`] when it is a label. An
/// environment value that is no label gives no label and the warning to log.
pub fn stdio_label(
    flag: Option<&str>,
    env: Option<&str>,
) -> Result<(Option<Label>, Option<String>), LabelError> {
    if let Some(flag) = flag {
        return Label::parse(flag).map(|label| (Some(label), None));
    }
    match env.map(Label::parse) {
        None => Ok((None, None)),
        Some(Ok(label)) => Ok((Some(label), None)),
        Some(Err(e)) => Ok((
            None,
            Some(format!(
                "{SESSION_ID_ENV} is no room label ({e}): this session brings no label"
            )),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(text: &str) -> Option<Label> {
        Some(Label::parse(text).unwrap())
    }

    #[test]
    fn the_room_parameter_is_found_among_others_and_percent_decoded() {
        assert_eq!(query_room(Some("room=web")).as_deref(), Some("web"));
        assert_eq!(
            query_room(Some("a=1&room=we%62&room=x")).as_deref(),
            Some("web")
        );
        assert_eq!(query_room(Some("rooms=web&aroom=x")), None);
        assert_eq!(query_room(Some("")), None);
        assert_eq!(query_room(None), None);
    }

    #[test]
    fn a_channel_label_comes_from_the_header_else_the_query() {
        assert_eq!(
            http_label(Some("room=web-app"), None, true),
            Ok(label("web-app"))
        );
        assert_eq!(http_label(None, Some(b"api"), true), Ok(label("api")));
        assert_eq!(
            http_label(Some("room=web"), Some(b" api "), true),
            Ok(label("api")),
            "the header wins, trimmed"
        );
        assert_eq!(http_label(Some("x=1"), None, true), Ok(None));
        assert_eq!(http_label(None, None, true), Ok(None));
        assert_eq!(http_label(None, None, false), Ok(None));
    }

    #[test]
    fn a_text_that_is_no_label_is_refused_with_the_label_error() {
        let refused = http_label(Some("room=a%20b"), None, true).unwrap_err();
        assert_eq!(refused, Refusal::Invalid(LabelError::Character(' ')));
        assert_eq!(
            refused.to_string(),
            format!("invalid room label: {}", LabelError::Character(' '))
        );
        assert_eq!(
            http_label(Some("room="), None, true),
            Err(Refusal::Invalid(LabelError::Empty))
        );
        assert_eq!(
            http_label(Some("room=web"), Some(b"a/b"), true),
            Err(Refusal::Invalid(LabelError::Character('/'))),
            "a bad header is not rescued by a good query"
        );
        for raw in [&b"caf\xc3\xa9"[..], b"\xff", b"a\tb"] {
            let refused = http_label(None, Some(raw), true).unwrap_err();
            assert_eq!(refused, Refusal::NotText, "{raw:?}");
            assert!(refused.to_string().contains(ROOM_HEADER), "{refused}");
        }
    }

    #[test]
    fn a_label_on_another_mount_is_refused() {
        for (query, header) in [(Some("room=web"), None), (None, Some(&b"web"[..]))] {
            let refused = http_label(query, header, false).unwrap_err();
            assert_eq!(refused, Refusal::NotChannel);
            assert!(refused.to_string().contains("/channel"), "{refused}");
        }
    }

    #[test]
    fn stdio_takes_the_flag_else_the_session_id_and_ignores_a_bad_session_id() {
        assert_eq!(
            stdio_label(Some("web"), Some("abc")),
            Ok((label("web"), None))
        );
        assert_eq!(
            stdio_label(Some("a b"), Some("abc")),
            Err(LabelError::Character(' ')),
            "a bad flag is an error even with a good session id"
        );
        assert_eq!(stdio_label(None, Some("abc-1")), Ok((label("abc-1"), None)));
        assert_eq!(stdio_label(None, None), Ok((None, None)));
        let (none, warning) = stdio_label(None, Some("a b")).unwrap();
        assert_eq!(none, None);
        let warning = warning.unwrap();
        assert!(
            warning.contains(SESSION_ID_ENV)
                && warning.contains(&LabelError::Character(' ').to_string()),
            "{warning}"
        );
    }
}
