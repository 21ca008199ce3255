//! The verdict parser (`parse_text_verdict`, `RequestId::parse`).
//!
//! Input: the message body, as UTF-8 (lossy).
//!
//! Asserts:
//! - the parser agrees with an independent reading of the rule: exactly two words
//!   separated by Unicode white space, the first `y`/`yes`/`n`/`no` in any ASCII case,
//!   the second five ASCII letters whose lowercase is in `a-km-z`; or, on one line, a
//!   grant (docs/decisions/0027-grants.md): `always <id>`, or `always`/`y`/`yes`
//!   `<id>` then a duration (digits and `s`, `m`, `min` or `h`, cut to 24 h), then
//!   optionally a prefix as typed (at most 200 characters; `always` takes one
//!   without a duration);
//! - a parsed verdict's id is a valid `RequestId` and survives a serde round trip;
//! - a verdict rendered back in every accepted spelling parses to itself;
//! - a reply fallback in front of the body changes nothing once stripped
//!   (`verdict_body` of a reply).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mc_model::classify::verdict_body;
use mc_model::grant::{GrantAsk, Lasts};
use mc_model::verdict::{parse_text_verdict, RequestId, TextVerdict, REQUEST_ID_ALPHABET};
use mc_model::{Behavior, EventId, MessageContent, MsgType, Relation, ReplyTo};

/// The rule, read without a regex: the behaviour, the id, and the grant asked for.
fn expected(body: &str) -> Option<(Behavior, String, Option<GrantAsk>)> {
    let words: Vec<&str> = body
        .split(char::is_whitespace)
        .filter(|w| !w.is_empty())
        .collect();
    let id_of = |id: &str| {
        let id = id.to_ascii_lowercase();
        (id.len() == 5 && id.chars().all(|c| REQUEST_ID_ALPHABET.contains(c))).then_some(id)
    };
    if let [word, id] = words[..] {
        let behavior = match word.to_ascii_lowercase().as_str() {
            "y" | "yes" => Some(Behavior::Allow),
            "n" | "no" => Some(Behavior::Deny),
            _ => None,
        };
        if let (Some(behavior), Some(id)) = (behavior, id_of(id)) {
            return Some((behavior, id, None));
        }
    }
    // A grant: one line.
    let breaks = [
        '\n', '\r', '\u{0B}', '\u{0C}', '\u{85}', '\u{2028}', '\u{2029}',
    ];
    if body.trim().contains(breaks) || words.len() < 2 {
        return None;
    }
    let always = words[0].eq_ignore_ascii_case("always");
    let yes = ["y", "yes"]
        .iter()
        .any(|w| words[0].eq_ignore_ascii_case(w));
    let id = id_of(words[1]).filter(|_| always || yes)?;
    // What follows the id's word, as typed.
    let tail = rest_after(body.trim(), 2);
    let duration = words.get(2).and_then(|w| duration_ms(w));
    let (lasts, prefix) = match (duration, always) {
        (Some(ms), _) => (Lasts::For { ms }, rest_after(body.trim(), 3)),
        (None, true) => (Lasts::Session, tail),
        (None, false) => return None,
    };
    if prefix.as_ref().is_some_and(|p| p.chars().count() > 200) {
        return None;
    }
    Some((Behavior::Allow, id, Some(GrantAsk { lasts, prefix })))
}

/// What follows the first `n` white-space-separated words of `line` (which has no
/// white space at either end), without the white space before it; `None` if
/// nothing does.
fn rest_after(line: &str, n: usize) -> Option<String> {
    let mut rest = line;
    for _ in 0..n {
        rest = rest.trim_start_matches(char::is_whitespace);
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        rest = &rest[end..];
    }
    let rest = rest.trim_start_matches(char::is_whitespace);
    (!rest.is_empty()).then(|| rest.to_owned())
}

/// `30m`, `2h`, `90s`, `5min`: milliseconds, at least one second, cut to a day.
fn duration_ms(word: &str) -> Option<u64> {
    let digits: String = word.chars().take_while(|c| c.is_ascii_digit()).collect();
    let unit = &word[digits.len()..];
    let per = match unit.to_ascii_lowercase().as_str() {
        "s" => 1_000u64,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        _ => return None,
    };
    if digits.is_empty() || digits.len() > 6 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    (n > 0).then(|| (n * per).min(24 * 3_600_000))
}

fn reply(body: String) -> MessageContent {
    MessageContent {
        msgtype: MsgType::Text,
        body,
        formatted_body: None,
        relation: Some(Relation::Reply {
            in_reply_to: ReplyTo {
                event_id: EventId::from("$prompt"),
                parent: None,
            },
        }),
        attachment: None,
    }
}

fuzz_target!(|data: &[u8]| {
    let body = String::from_utf8_lossy(data);
    let parsed = parse_text_verdict(&body);
    assert_eq!(
        parsed.as_ref().map(|v| (
            v.behavior,
            v.request_id.as_str().to_owned(),
            v.grant.clone()
        )),
        expected(&body),
        "{body:?}"
    );
    let fallback = format!("> <@bot:example.org> \u{1F510} Permission request\n\n{body}");
    assert_eq!(
        parse_text_verdict(verdict_body(&reply(fallback))),
        parsed,
        "{body:?}"
    );
    let Some(TextVerdict {
        behavior,
        request_id,
        grant: None,
    }) = parsed
    else {
        return;
    };
    assert_eq!(
        RequestId::parse(request_id.as_str()),
        Ok(request_id.clone())
    );
    let json = serde_json::to_string(&request_id).unwrap();
    assert_eq!(
        serde_json::from_str::<RequestId>(&json).unwrap(),
        request_id
    );
    let words: &[&str] = match behavior {
        Behavior::Allow => &["y", "yes", "Y", "YES", "Yes"],
        Behavior::Deny => &["n", "no", "N", "NO", "No"],
    };
    let id = request_id.as_str();
    for word in words {
        for text in [
            format!("{word} {id}"),
            format!(" {word}\t{}\n", id.to_ascii_uppercase()),
            format!("\u{3000}{word}\u{A0}{id}\u{2029}"),
        ] {
            let again = parse_text_verdict(&text);
            assert_eq!(
                again,
                Some(TextVerdict {
                    behavior,
                    request_id: request_id.clone(),
                    grant: None,
                }),
                "{text:?}"
            );
        }
    }
});
