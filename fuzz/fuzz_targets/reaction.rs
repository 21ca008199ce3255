//! The reaction key normaliser and the approve/deny key sets (`reaction.rs`).
//!
//! Input: byte 0 picks a configured key and how to decorate it, the rest is a raw key
//! (UTF-8, lossy); a `|` in it splits a second configuration's approve and deny keys.
//!
//! Asserts:
//! - `normalize_key` is idempotent, removes exactly U+FE0E, U+FE0F and the skin
//!   tones U+1F3FB..=U+1F3FF and keeps every other character in order;
//! - classifying a raw key equals classifying its normal form;
//! - any default key decorated with selectors and skin tones anywhere keeps its
//!   behaviour (👍 ✅ allow, 👎 ❌ deny), and an undecorated other key stays `None`;
//! - `ReactionKeys::new` accepts exactly non-empty, disjoint sets of non-empty keys,
//!   classifies every configured key to its set, and survives a serde round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mc_model::reaction::{normalize_key, ReactionKeys};
use mc_model::Behavior;

const DROPPED: [char; 7] = [
    '\u{FE0E}',
    '\u{FE0F}',
    '\u{1F3FB}',
    '\u{1F3FC}',
    '\u{1F3FD}',
    '\u{1F3FE}',
    '\u{1F3FF}',
];
const DEFAULTS: [(&str, Behavior); 4] = [
    ("\u{1F44D}", Behavior::Allow),
    ("\u{2705}", Behavior::Allow),
    ("\u{1F44E}", Behavior::Deny),
    ("\u{274C}", Behavior::Deny),
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let raw = String::from_utf8_lossy(rest);
    let raw = raw.as_ref();

    let normal = normalize_key(raw);
    assert_eq!(normalize_key(&normal), normal, "not idempotent: {raw:?}");
    let kept: String = raw.chars().filter(|c| !DROPPED.contains(c)).collect();
    assert_eq!(normal, kept, "{raw:?}");

    let keys = ReactionKeys::default();
    assert_eq!(keys.classify(raw), keys.classify(&normal), "{raw:?}");
    let expected = DEFAULTS.iter().find(|(k, _)| *k == normal).map(|(_, b)| *b);
    assert_eq!(keys.classify(raw), expected, "{raw:?}");

    // A default key with the raw input's dropped characters spread around it.
    let (base, behavior) = DEFAULTS[usize::from(pick) % 4];
    let noise: String = raw.chars().filter(|c| DROPPED.contains(c)).collect();
    let extra = DROPPED[usize::from(pick >> 2) % DROPPED.len()];
    let split = noise
        .char_indices()
        .nth(usize::from(pick >> 5))
        .map_or(noise.len(), |(i, _)| i);
    let decorated = format!("{}{base}{extra}{}", &noise[..split], &noise[split..]);
    assert_eq!(keys.classify(&decorated), Some(behavior), "{decorated:?}");

    // A configuration of the operator's own keys.
    let Some((approve, deny)) = raw.split_once('|') else {
        return;
    };
    let approve: Vec<&str> = approve.split(',').filter(|k| !k.is_empty()).collect();
    let deny: Vec<&str> = deny.split(',').filter(|k| !k.is_empty()).collect();
    let norm = |v: &[&str]| v.iter().map(|k| normalize_key(k)).collect::<Vec<_>>();
    let (a, d) = (norm(&approve), norm(&deny));
    let valid = !a.is_empty()
        && !d.is_empty()
        && a.iter().chain(&d).all(|k| !k.is_empty())
        && a.iter().all(|k| !d.contains(k));
    match ReactionKeys::new(approve.iter().copied(), deny.iter().copied()) {
        Ok(set) => {
            assert!(valid, "accepted {approve:?} {deny:?}");
            for k in &approve {
                assert_eq!(set.classify(k), Some(Behavior::Allow), "{k:?}");
            }
            for k in &deny {
                assert_eq!(set.classify(k), Some(Behavior::Deny), "{k:?}");
            }
            assert!(set
                .approve()
                .chain(set.deny())
                .all(|k| normalize_key(k) == k));
            let json = serde_json::to_string(&set).unwrap();
            assert_eq!(serde_json::from_str::<ReactionKeys>(&json).unwrap(), set);
        }
        Err(_) => assert!(!valid, "refused {approve:?} {deny:?}"),
    }
});
