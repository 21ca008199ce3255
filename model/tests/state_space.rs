//! The model check: every invariant over every interleaving of the bounded world,
//! and, for each invariant, a deliberate fault under which the checker finds the
//! counterexample (so no property holds because nothing happens).
//!
//! The full searches take seconds in release and minutes in debug; they run when
//! `MC_FULL_CHECK=1` is set (`.ci/run` runs them in release, see the README). Under
//! cargo-mutants (`INSIDE_MUTANTS` is set) the fault searches still run: they stop
//! at the first counterexample.

mod check;

use check::{names, witnesses, Fault, Scope, World};
use stateright::{Checker, Expectation, HasDiscoveries, Model};
use std::collections::BTreeSet;

fn full_check_enabled() -> bool {
    std::env::var_os("MC_FULL_CHECK").is_some_and(|v| v == "1")
}

fn full_check(scope: Scope) {
    let pinned = scope.pinned_states();
    let world = World::new(scope);
    let properties = world.properties();
    let checker = world.checker().threads(2).spawn_bfs().join();
    let discovered: BTreeSet<&str> = checker.discoveries().into_keys().collect();
    let broken: Vec<&str> = properties
        .iter()
        .filter(|p| p.expectation == Expectation::Always && discovered.contains(p.name))
        .map(|p| p.name)
        .collect();
    assert!(
        broken.is_empty(),
        "{scope:?}: invariants broken: {broken:?}"
    );
    let witnessed: BTreeSet<&str> = properties
        .iter()
        .filter(|p| p.expectation == Expectation::Sometimes && discovered.contains(p.name))
        .map(|p| p.name)
        .collect();
    assert_eq!(witnessed, witnesses(scope), "{scope:?}: witnesses");
    assert_eq!(
        checker.unique_state_count(),
        pinned,
        "{scope:?}: state count"
    );
}

#[test]
fn the_delivery_scope_holds_every_invariant_over_its_full_search() {
    if full_check_enabled() {
        full_check(Scope::Delivery);
    }
}

#[test]
fn the_prompts_scope_holds_every_invariant_over_its_full_search() {
    if full_check_enabled() {
        full_check(Scope::Prompts);
    }
}

#[test]
fn the_rooms_scope_holds_every_invariant_over_its_full_search() {
    if full_check_enabled() {
        full_check(Scope::Rooms);
    }
}

#[test]
fn the_sessions_scope_holds_every_invariant_over_its_full_search() {
    if full_check_enabled() {
        full_check(Scope::Sessions);
    }
}

#[test]
fn the_grants_scope_holds_every_invariant_over_its_full_search() {
    if full_check_enabled() {
        full_check(Scope::Grants);
    }
}

#[test]
fn the_policy_scope_holds_every_invariant_over_its_full_search() {
    if full_check_enabled() {
        full_check(Scope::Policy);
    }
}

#[test]
fn the_scopes_together_witness_every_sometimes_property() {
    let all: BTreeSet<&str> = World::new(Scope::Delivery)
        .properties()
        .iter()
        .filter(|p| p.expectation == Expectation::Sometimes)
        .map(|p| p.name)
        .collect();
    let covered: BTreeSet<&str> = Scope::ALL.into_iter().flat_map(witnesses).collect();
    assert_eq!(covered, all);
}

#[test]
fn there_are_at_least_fifteen_invariants_and_each_has_a_witness() {
    let properties = World::new(Scope::Prompts).properties();
    let always = properties
        .iter()
        .filter(|p| p.expectation == Expectation::Always)
        .count();
    let sometimes = properties
        .iter()
        .filter(|p| p.expectation == Expectation::Sometimes)
        .count();
    assert!(always >= 15, "{always} always properties");
    assert_eq!(
        always, sometimes,
        "each always property has a sometimes partner"
    );
    assert_eq!(
        always,
        FAULTS.len(),
        "each always property has a fault test"
    );
}

/// Each invariant, the fault that breaks it, and the scope where that shows.
/// The last column is the counterexample's last action as the world prints it
/// (`Debug`): the step at which the fault shows, so a search that finds some other
/// path to the property fails.
const FAULTS: [(&str, Fault, Scope, &str); 46] = [
    (
        names::STRANGER_VERDICT,
        Fault::StrangerAllowed,
        Scope::Prompts,
        "Noise(EveYes)",
    ),
    (
        names::NON_APPROVER_VERDICT,
        Fault::CarlApprover,
        Scope::Prompts,
        "Noise(CarlYes)",
    ),
    (
        names::VERDICT_MISROUTED,
        Fault::VerdictToEverySession,
        Scope::Prompts,
        "ReplyYes { prompt: 0 }",
    ),
    (
        names::VERDICT_TWICE,
        Fault::MisreportVerdicts,
        Scope::Prompts,
        "CompleteVerdict { send: EffectId(4), ok: true }",
    ),
    (
        names::PUSH_TWICE,
        Fault::MisreportPushes,
        Scope::Delivery,
        "Attach(S2)",
    ),
    (
        names::VERDICT_PUSHED,
        Fault::DisguiseVerdicts,
        Scope::Delivery,
        "Attach(S2)",
    ),
    (
        names::STRANGER_PUSHED,
        Fault::StrangerAllowed,
        Scope::Delivery,
        "Attach(S2)",
    ),
    (
        names::OWN_OR_NOTICE_PUSHED,
        Fault::NoticeAsText,
        Scope::Delivery,
        "Attach(S2)",
    ),
    (
        names::CROSS_IDENTITY,
        Fault::MisrouteToA,
        Scope::Delivery,
        "Say { ident: B, who: Ann, room: 0, text: Chat }",
    ),
    (
        names::SETTINGS_UNCHANGED,
        Fault::WidenOnAck,
        Scope::Delivery,
        "Ack(S1, 1)",
    ),
    (
        names::CAP,
        Fault::CapThree,
        Scope::Prompts,
        "Request(S2, R1)",
    ),
    (
        names::WITHDRAWN_COUNTED,
        Fault::LoseRedactions,
        Scope::Prompts,
        "Tick",
    ),
    (
        names::DENY_LOST,
        Fault::LoseDenyReactions,
        Scope::Prompts,
        "Tick",
    ),
    (
        names::EARLY_VERDICT,
        Fault::ShortSettle,
        Scope::Prompts,
        "Tick",
    ),
    (
        names::EXPIRED_ANSWERED,
        Fault::LongTtl,
        Scope::Prompts,
        "ReplyYes { prompt: 0 }",
    ),
    (
        names::WRONG_ROOM,
        Fault::StrangerAllowed,
        Scope::Prompts,
        "Request(S1, R2)",
    ),
    (
        names::ACKED_REPLAYED,
        Fault::DropAcks,
        Scope::Delivery,
        "Attach(S2)",
    ),
    (
        names::LOST,
        Fault::LosePushes,
        Scope::Delivery,
        "Attach(S2)",
    ),
    (
        names::FOREIGN_EDIT,
        Fault::ForgeEditSender,
        Scope::Delivery,
        "Attach(S2)",
    ),
    (
        names::REPLAY_ORDER,
        Fault::ReverseReplay,
        Scope::Delivery,
        "Attach(S2)",
    ),
    (
        names::WRONG_RETIREMENT,
        Fault::MisreportFailedVerdicts,
        Scope::Prompts,
        "CompleteVerdict { send: EffectId(5), ok: false }",
    ),
    (
        names::PROMPT_TOUCHED,
        Fault::AskWithoutThreadRoot,
        Scope::Prompts,
        "AgentTouch { touch: Thread, target: Prompt(0) }",
    ),
    (
        names::NAMES_OPEN,
        Fault::EmptyReactionKey,
        Scope::Prompts,
        "AgentSays(KeyNames(R1))",
    ),
    (
        names::WRONGLY_REFUSED,
        Fault::WrongOriginalSender,
        Scope::Prompts,
        "AgentTouch { touch: Edit, target: Message(1) }",
    ),
    (
        names::REPLY_ANSWERED,
        Fault::LoseReplyRelations,
        Scope::Prompts,
        "Noise(AnnYesToAgent)",
    ),
    (
        names::HELD_BY_FORMER,
        Fault::StaleApprovers,
        Scope::Prompts,
        "ReplyYes { prompt: 0 }",
    ),
    (
        names::STRANGER_JOINED,
        Fault::InviterByDisplayName,
        Scope::Rooms,
        "Invite { who: Eve }",
    ),
    (
        names::INVITE_NOT_JOINED,
        Fault::InviterIsInvitee,
        Scope::Rooms,
        "Invite { who: Ann }",
    ),
    (
        names::JOINED_TWICE,
        Fault::MisreportJoins,
        Scope::Rooms,
        "Invite { who: Ann }",
    ),
    (
        names::NOT_JOINED_INPUT,
        Fault::StaleJoinedRoom,
        Scope::Rooms,
        "Say { ident: A, who: Ann, room: 2, text: Chat }",
    ),
    (
        names::HISTORY_INPUT,
        Fault::ForgetHistoryAtRestart,
        Scope::Rooms,
        "Redeliver { message: 2 }",
    ),
    (
        names::POST_NOT_REISSUED,
        Fault::FailPostsAtRestart,
        Scope::Rooms,
        "Restart",
    ),
    (
        names::VERDICT_NOT_RESENT,
        Fault::VerdictsSentAtRestart,
        Scope::Rooms,
        "Attach(S1)",
    ),
    (
        names::PUSH_TO_AWAY,
        Fault::SilentRestart,
        Scope::Rooms,
        "Say { ident: A, who: Ann, room: 2, text: Chat }",
    ),
    (
        names::UNSIGNED_VERDICT,
        Fault::LoseDeviceTrust,
        Scope::Prompts,
        "Noise(AnnUnsignedYes)",
    ),
    (
        names::OUT_OF_ROOM,
        Fault::SwapCreatedRooms,
        Scope::Sessions,
        "Say { ident: A, who: Ann, room: 3, text: Chat }",
    ),
    (
        names::VERDICT_CROSS_ROOM,
        Fault::ForgeVerdictRoom,
        Scope::Sessions,
        "Say { ident: A, who: Ann, room: 4, text: Yes(R1) }",
    ),
    (
        names::BINDING_LOST,
        Fault::LoseBindingsAtRestart,
        Scope::Sessions,
        "Attach(S2)",
    ),
    (
        names::TYPING_PAST_CAP,
        Fault::LongTypingCap,
        Scope::Sessions,
        "Tick",
    ),
    (
        names::GRANT_UNFOUNDED,
        Fault::CarlAsAnn,
        Scope::Grants,
        "Say { ident: A, who: Carl, room: 0, text: Always(R1) }",
    ),
    (
        names::GRANT_OVERREACH,
        Fault::CutChainedPreview,
        Scope::Grants,
        "Request(S1, R2)",
    ),
    (
        names::GRANT_IGNORED,
        Fault::DetachBeforeRequest,
        Scope::Grants,
        "Request(S2, R1)",
    ),
    (
        names::POLICY_QUORUM,
        Fault::QuorumOfOne,
        Scope::Policy,
        "Say { ident: A, who: Ann, room: 0, text: Always(R1) }",
    ),
    (
        names::POLICY_DENY,
        Fault::NoDenyRule,
        Scope::Policy,
        "Request(S1, R2)",
    ),
    (
        names::WITHDRAWN_ANSWERED,
        Fault::SilentDetach,
        Scope::Prompts,
        "ReplyYes { prompt: 0 }",
    ),
    (
        names::WITHDRAWAL_HIDDEN,
        Fault::SilentDetach,
        Scope::Prompts,
        "Detach(S1)",
    ),
];

fn assert_fault_found(name: &'static str, fault: Fault, scope: Scope, last_action: &str) {
    let mut world = World::with_fault(scope, fault);
    assert!(
        world.properties().iter().any(|p| p.name == name),
        "no property named {name:?}"
    );
    world.focus = Some(name);
    let checker = world
        .checker()
        .finish_when(HasDiscoveries::AnyOf([name].into()))
        .spawn_dfs()
        .join();
    let path = checker.discovery(name);
    assert!(
        path.is_some(),
        "{fault:?} in {scope:?}: no counterexample for {name:?}"
    );
    let last = path.and_then(|p| p.into_actions().pop());
    assert_eq!(
        last.map(|a| format!("{a:?}")).as_deref(),
        Some(last_action),
        "{fault:?} in {scope:?}: the counterexample for {name:?} ends elsewhere"
    );
}

macro_rules! fault_tests {
    ($($test:ident => $index:expr;)*) => {$(
        #[test]
        fn $test() {
            let (name, fault, scope, last_action) = FAULTS[$index];
            assert_fault_found(name, fault, scope, last_action);
        }
    )*};
}

fault_tests! {
    a_stranger_made_approver_causes_a_verdict => 0;
    a_non_approver_made_approver_causes_a_verdict => 1;
    a_verdict_sent_to_every_session_is_caught => 2;
    a_delivered_verdict_reported_failed_is_delivered_twice => 3;
    pushes_reported_failed_reach_a_session_twice => 4;
    a_disguised_verdict_is_pushed_as_chat => 5;
    a_stranger_made_allowed_gets_pushed => 6;
    a_notice_decoded_as_text_is_pushed => 7;
    events_routed_to_the_wrong_identity_are_caught => 8;
    a_tool_that_widens_the_allowlist_is_caught => 9;
    a_cap_of_three_exceeds_the_cap_of_two => 10;
    a_lost_redaction_lets_a_withdrawn_vote_decide => 11;
    a_lost_deny_lets_approve_win => 12;
    a_one_millisecond_window_decides_early => 13;
    a_doubled_ttl_answers_an_expired_prompt => 14;
    a_stranger_made_allowed_redirects_prompts => 15;
    a_lost_acknowledgement_lets_an_acked_event_replay => 16;
    a_lost_push_loses_a_message => 17;
    a_forged_edit_sender_gets_an_edit_pushed => 18;
    a_reversed_replay_is_caught => 19;
    a_failed_send_reported_sent_shows_a_verdict_never_delivered => 20;
    a_thread_root_the_core_never_saw_lets_the_agent_thread_on_a_prompt => 21;
    a_reaction_key_the_core_never_saw_names_an_open_request_id => 22;
    a_wrongly_fetched_original_sender_refuses_the_agents_own_edit => 23;
    a_lost_reply_relation_lets_a_reply_to_chat_answer_a_prompt => 24;
    settings_that_never_reach_the_core_hold_a_yes_back_for_a_former_approver => 25;
    an_inviter_read_from_the_display_name_gets_a_strangers_invite_joined => 26;
    an_inviter_read_from_the_state_key_leaves_an_allowed_senders_invite_unjoined => 27;
    a_join_reported_failed_is_joined_again => 28;
    a_store_that_says_a_room_is_joined_gets_its_events_pushed => 29;
    a_state_saved_without_its_history_lets_history_delivered_again_be_pushed => 30;
    posts_reported_failed_at_a_restart_are_not_issued_again => 31;
    verdict_sends_reported_sent_at_a_restart_never_reach_the_session => 32;
    a_restart_the_core_is_not_told_of_lets_pushes_go_to_dead_streams => 33;
    a_device_the_adapter_forgets_lets_a_verdict_from_an_unsigned_device_decide => 34;
    rooms_reported_for_the_wrong_label_send_one_sessions_events_to_another => 35;
    a_verdict_handed_over_in_the_wrong_room_answers_another_sessions_prompt => 36;
    a_state_saved_without_its_bindings_creates_a_labels_room_again => 37;
    a_doubled_typing_cap_shows_typing_past_the_cap => 38;
    a_non_approvers_grant_handed_over_as_an_approvers_makes_a_grant => 39;
    a_preview_cut_before_its_chained_command_lets_a_grant_answer_it => 40;
    a_stream_reported_closed_before_each_request_ends_the_grants_that_cover_it => 41;
    a_rule_that_asks_one_approver_where_two_were_meant_lets_one_yes_allow => 42;
    a_deny_rule_that_never_reaches_the_core_lets_its_request_be_prompted => 43;
    a_stream_close_the_core_is_not_told_of_lets_an_answer_reach_a_withdrawn_prompt => 44;
    a_stream_close_the_core_is_not_told_of_leaves_its_prompts_shown_as_open => 45;
}
