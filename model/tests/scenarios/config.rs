//! The operator's settings: validation, the gate, and whether permissions are relayed.

use crate::harness::*;
use mc_model::config::{
    DEFAULT_BODY_CAP_BYTES, DEFAULT_LOG_CAP, DEFAULT_MAX_PROMPTS, DEFAULT_PROMPT_MEMORY,
    DEFAULT_PROMPT_TTL_MS, DEFAULT_QUEUE_CAP, DEFAULT_QUOTE_CAP_CHARS, DEFAULT_REPLAY_BUDGET,
    DEFAULT_SETTLE_MS,
};
use mc_model::reaction::ReactionKeys;
use mc_model::{Channel, ConfigError, Gate, IdentityConfig, UserId};
use std::collections::BTreeSet;

fn users(list: &[&str]) -> BTreeSet<UserId> {
    list.iter().map(|u| user(u)).collect()
}

#[test]
fn new_settings_have_the_documented_defaults() {
    let config = IdentityConfig::new(user(BOT), [user(ALICE)]);
    assert_eq!(config.user_id, user(BOT));
    assert_eq!(config.allowed_senders, users(&[ALICE]));
    assert_eq!(config.approvers, None);
    assert_eq!(config.permission_room, None);
    assert_eq!(config.prompt_ttl_ms, 900_000);
    assert_eq!(config.settle_ms, 3_000);
    assert_eq!(config.reaction_keys, ReactionKeys::default());
    assert_eq!(config.max_prompts, 32);
    assert_eq!(config.replay_budget, 200);
    assert_eq!(config.queue_cap, 5_000);
    assert_eq!(config.body_cap_bytes, 16_384);
    assert_eq!(config.quote_cap_chars, 160);
    assert_eq!(config.log_cap, 10_000);
    assert_eq!(config.prompt_memory, 1_000);
    assert_eq!(
        (
            DEFAULT_PROMPT_TTL_MS,
            DEFAULT_SETTLE_MS,
            DEFAULT_MAX_PROMPTS,
            DEFAULT_REPLAY_BUDGET,
            DEFAULT_QUEUE_CAP,
            DEFAULT_BODY_CAP_BYTES,
            DEFAULT_QUOTE_CAP_CHARS,
            DEFAULT_LOG_CAP,
            DEFAULT_PROMPT_MEMORY
        ),
        (900_000, 3_000, 32, 200, 5_000, 16_384, 160, 10_000, 1_000)
    );
    assert_eq!(config.validate(), Ok(()));
}

#[test]
fn the_test_identities_are_valid() {
    assert_eq!(work_config().validate(), Ok(()));
    assert_eq!(home_config().validate(), Ok(()));
}

#[test]
fn an_approver_outside_allowed_senders_is_rejected() {
    let mut config = work_config();
    config.approvers = Some(users(&[ALICE, MALLORY]));
    let err = config.validate().unwrap_err();
    assert_eq!(err, ConfigError::ApproverNotAllowed(user(MALLORY)));
    assert_eq!(
        err.to_string(),
        "approvers: @mallory:hs is not in allowed_senders (approvers must be a subset)"
    );
}

#[test]
fn the_identity_itself_among_allowed_senders_is_rejected_first() {
    let mut config = work_config();
    config.allowed_senders.insert(user(BOT));
    config.approvers = Some(users(&[MALLORY]));
    config.max_prompts = 0;
    let err = config.validate().unwrap_err();
    assert_eq!(err, ConfigError::SelfAllowed(user(BOT)));
    assert_eq!(
        err.to_string(),
        "allowed_senders: @bot:hs is the identity's own user id"
    );
}

/// Sets one setting of a config to zero.
type Zero = fn(&mut IdentityConfig);

#[test]
fn each_zero_setting_is_rejected_by_name() {
    let cases: [(&str, Zero); 9] = [
        ("prompt_ttl_ms", |c| c.prompt_ttl_ms = 0),
        ("settle_ms", |c| c.settle_ms = 0),
        ("max_prompts", |c| c.max_prompts = 0),
        ("replay_budget", |c| c.replay_budget = 0),
        ("queue_cap", |c| c.queue_cap = 0),
        ("body_cap_bytes", |c| c.body_cap_bytes = 0),
        ("quote_cap_chars", |c| c.quote_cap_chars = 0),
        ("log_cap", |c| c.log_cap = 0),
        ("prompt_memory", |c| c.prompt_memory = 0),
    ];
    for (name, zero) in cases {
        let mut config = work_config();
        zero(&mut config);
        let err = config.validate().unwrap_err();
        assert_eq!(err, ConfigError::Zero(name));
        assert_eq!(err.to_string(), format!("{name} must be greater than zero"));
    }
}

#[test]
fn the_first_zero_setting_is_the_one_reported() {
    let mut config = work_config();
    config.queue_cap = 0;
    config.log_cap = 0;
    assert_eq!(config.validate(), Err(ConfigError::Zero("queue_cap")));
}

#[test]
fn one_item_a_one_millisecond_settle_window_and_a_ttl_one_millisecond_longer_are_enough() {
    let mut config = work_config();
    config.prompt_ttl_ms = 2;
    config.settle_ms = 1;
    config.prompt_memory = 1;
    config.max_prompts = 1;
    config.replay_budget = 1;
    config.queue_cap = 1;
    config.body_cap_bytes = 1;
    config.quote_cap_chars = 1;
    config.log_cap = 1;
    assert_eq!(config.validate(), Ok(()));
}

#[test]
fn settings_saved_before_prompt_memory_existed_remember_the_default_number() {
    let mut json = serde_json::to_value(work_config()).unwrap();
    json.as_object_mut().unwrap().remove("prompt_memory");

    let config: IdentityConfig = serde_json::from_value(json).unwrap();

    assert_eq!(config.prompt_memory, DEFAULT_PROMPT_MEMORY);
    assert_eq!(config, work_config());
}

#[test]
fn a_settle_window_as_long_as_the_prompt_lifetime_is_rejected() {
    let mut config = work_config();
    config.prompt_ttl_ms = 3_000;
    config.settle_ms = 3_000;

    let err = config.validate().unwrap_err();

    assert_eq!(
        err,
        ConfigError::SettleNotShorterThanTtl {
            settle_ms: 3_000,
            prompt_ttl_ms: 3_000
        }
    );
    assert_eq!(
        err.to_string(),
        "settle_ms (3000 ms) must be less than prompt_ttl_ms (3000 ms): a verdict by \
         reaction could never settle before the prompt expires"
    );
}

#[test]
fn a_settle_window_longer_than_the_prompt_lifetime_is_rejected() {
    let mut config = work_config();
    config.prompt_ttl_ms = 2_999;

    assert_eq!(
        config.validate(),
        Err(ConfigError::SettleNotShorterThanTtl {
            settle_ms: 3_000,
            prompt_ttl_ms: 2_999
        })
    );
}

#[test]
fn a_settle_window_one_millisecond_shorter_than_the_prompt_lifetime_is_accepted() {
    let mut config = work_config();
    config.prompt_ttl_ms = 3_001;

    assert_eq!(config.validate(), Ok(()));
}

#[test]
fn a_zero_is_reported_before_the_settle_window_is_weighed_against_the_lifetime() {
    let mut config = work_config();
    config.prompt_ttl_ms = 0;

    assert_eq!(config.validate(), Err(ConfigError::Zero("prompt_ttl_ms")));
}

#[test]
fn an_identity_whose_settle_window_outlasts_its_prompts_or_that_remembers_no_prompt_is_not_added() {
    let mut long_settle = work_config();
    long_settle.settle_ms = long_settle.prompt_ttl_ms;
    let mut no_memory = work_config();
    no_memory.prompt_memory = 0;
    let mut channel = Channel::new();

    assert_eq!(
        channel.add_identity(identity(WORK), long_settle.clone()),
        Err(ConfigError::SettleNotShorterThanTtl {
            settle_ms: TTL,
            prompt_ttl_ms: TTL
        })
    );
    assert_eq!(
        channel.add_identity(identity(WORK), no_memory.clone()),
        Err(ConfigError::Zero("prompt_memory"))
    );
    assert_eq!(channel.identities().count(), 0);

    channel.add_identity(identity(WORK), work_config()).unwrap();
    assert!(channel.add_identity(identity(WORK), long_settle).is_err());
    assert!(channel.add_identity(identity(WORK), no_memory).is_err());
    assert_eq!(
        channel.identity(&identity(WORK)).unwrap().config(),
        &work_config()
    );
}

#[test]
fn the_gate_names_own_stranger_allowed_and_approver_by_exact_mxid() {
    let config = work_config();
    assert_eq!(config.gate(&user(BOT)), Gate::Own);
    assert_eq!(config.gate(&user(ALICE)), Gate::Approver);
    assert_eq!(config.gate(&user(BOB)), Gate::Allowed);
    assert_eq!(config.gate(&user(MALLORY)), Gate::Stranger);
    assert_eq!(config.gate(&user("@ALICE:hs")), Gate::Stranger);
    assert_eq!(config.gate(&user("@bot:hs ")), Gate::Stranger);
}

#[test]
fn without_an_approver_list_every_allowed_sender_approves() {
    let config = IdentityConfig::new(user(BOT), [user(ALICE), user(BOB)]);
    assert!(config.is_approver(&user(ALICE)));
    assert!(config.is_approver(&user(BOB)));
    assert!(!config.is_approver(&user(MALLORY)));
    assert_eq!(config.gate(&user(BOB)), Gate::Approver);
    assert!(config.relays_permissions());
}

#[test]
fn with_an_approver_list_only_its_members_approve() {
    let config = work_config();
    assert!(config.is_approver(&user(ALICE)));
    assert!(!config.is_approver(&user(BOB)));
    assert!(!config.is_approver(&user(MALLORY)));
    assert!(config.relays_permissions());
}

#[test]
fn an_empty_approver_list_relays_no_permissions() {
    let mut config = work_config();
    config.approvers = Some(BTreeSet::new());
    assert_eq!(config.validate(), Ok(()));
    assert!(!config.relays_permissions());
    assert!(!config.is_approver(&user(ALICE)));
    assert_eq!(config.gate(&user(ALICE)), Gate::Allowed);
}

#[test]
fn no_allowed_senders_and_no_approver_list_relays_no_permissions() {
    let config = IdentityConfig::new(user(BOT), []);
    assert_eq!(config.validate(), Ok(()));
    assert!(!config.relays_permissions());
    assert_eq!(config.gate(&user(ALICE)), Gate::Stranger);
}

#[test]
fn an_invalid_identity_is_not_added() {
    let mut channel = Channel::new();
    let mut config = work_config();
    config.settle_ms = 0;
    assert_eq!(
        channel.add_identity(identity(WORK), config),
        Err(ConfigError::Zero("settle_ms"))
    );
    assert!(channel.identity(&identity(WORK)).is_none());
    assert_eq!(channel.identities().count(), 0);
}

#[test]
fn re_adding_an_identity_replaces_its_settings_and_keeps_its_state() {
    let mut w = World::new();
    w.attach(S1);
    w.say(ALICE, R1, "hello");
    let mut config = work_config();
    config.permission_room = Some(room(R2));

    w.channel
        .add_identity(identity(WORK), config.clone())
        .unwrap();
    let mut bad = config.clone();
    bad.log_cap = 0;
    assert!(w.channel.add_identity(identity(WORK), bad).is_err());

    assert_eq!(w.state().config(), &config);
    assert_eq!(w.state().last_room(), Some(&room(R1)));
    assert_eq!(w.state().sessions().len(), 1);
}
