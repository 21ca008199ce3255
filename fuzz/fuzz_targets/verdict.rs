//! The verdict parser (`parse_text_verdict`, `RequestId::parse`).
//!
//! Input: the message body, as UTF-8 (lossy).
//!
//! Asserts:
//! - the parser agrees with an independent reading of the rule: exactly two words
//!   separated by Unicode white space, the first `y`/`yes`/`n`/`no` in any ASCII case,
//!   the second five ASCII letters whose lowercase is in `a-km-z`;
//! - a parsed verdict's id is a valid `RequestId` and survives a serde round trip;
//! - a verdict rendered back in every accepted spelling parses to itself;
//! - a reply fallback in front of the body changes nothing once stripped
//!   (`verdict_body` of a reply).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mc_model::classify::verdict_body;
use mc_model::verdict::{parse_text_verdict, RequestId, TextVerdict, REQUEST_ID_ALPHABET};
use mc_model::{Behavior, EventId, MessageContent, MsgType, Relation, ReplyTo};

/// The rule, read without a regex.
fn expected(body: &str) -> Option<(Behavior, String)> {
    let words: Vec<&str> = body
        .split(char::is_whitespace)
        .filter(|w| !w.is_empty())
        .collect();
    let [word, id] = words[..] else { return None };
    let behavior = match word.to_ascii_lowercase().as_str() {
        "y" | "yes" => Behavior::Allow,
        "n" | "no" => Behavior::Deny,
        _ => return None,
    };
    let id = id.to_ascii_lowercase();
    let ok = id.len() == 5 && id.chars().all(|c| REQUEST_ID_ALPHABET.contains(c));
    ok.then_some((behavior, id))
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
        parsed
            .as_ref()
            .map(|v| (v.behavior, v.request_id.as_str().to_owned())),
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
                    request_id: request_id.clone()
                }),
                "{text:?}"
            );
        }
    }
});
