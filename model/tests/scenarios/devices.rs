//! Verdicts and the device they came from (`verdict_devices`, issue 12 item 4): an
//! encrypted verdict counts only from a device its approver cross-signed; with
//! `encrypted_cross_signed` a clear one does not count either. The gate comes first.

use crate::harness::*;
use mc_model::{Behavior, DeviceTrust, DropReason, VerdictDevices};

fn not_cross_signed_notice(what: &str) -> String {
    format!(
        "{what} came from a device you have not cross-signed, so it counts for nothing. \
         Verify the device from one you trust (in Element: Settings, Sessions), then \
         answer again."
    )
}

fn clear_notice(what: &str) -> String {
    format!(
        "{what} was sent unencrypted, so it says nothing of the device it came from and \
         counts for nothing: answer in an encrypted room from a device you have \
         cross-signed (a reaction is often sent unencrypted: type the answer)."
    )
}

/// `from` says `body` in `!r1:hs` from a device Matrix describes as `device`.
fn say_from(w: &mut World, from: &str, body: &str, device: DeviceTrust) -> mc_model::EventId {
    let mut message = w.text(from, R1, body);
    message.device = device;
    w.send(message)
}

fn react_from(
    w: &mut World,
    on: &mc_model::EventId,
    key: &str,
    device: DeviceTrust,
) -> mc_model::EventId {
    let mut reaction = w.reaction(ALICE, on, key);
    reaction.device = device;
    w.send_reaction(reaction)
}

#[test]
fn a_yes_from_a_device_the_approver_has_not_cross_signed_is_refused_with_a_notice() {
    let mut w = World::new();
    w.pending_prompt("abcde");

    let yes = say_from(&mut w, ALICE, "yes abcde", DeviceTrust::NotCrossSigned);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!(
                "notice {yes} {:?}",
                not_cross_signed_notice("This answer to abcde")
            ),
            format!("drop {yes} NotCrossSigned"),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn after_a_refused_answer_the_same_approvers_cross_signed_device_decides() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");
    say_from(&mut w, ALICE, "no abcde", DeviceTrust::NotCrossSigned);
    w.mark();

    let yes = say_from(&mut w, ALICE, "yes abcde", DeviceTrust::CrossSigned);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("decided s1 abcde allow by {ALICE} via text {yes}"),
            "verdict s1 abcde allow".to_owned(),
            format!("edit {prompt} {:?}", allowed_by_reply("abcde")),
        ]
    );
}

#[test]
fn a_thumbs_up_from_a_device_not_cross_signed_is_no_vote_and_the_notice_replies_to_the_prompt() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");

    let vote = react_from(&mut w, &prompt, THUMBS_UP, DeviceTrust::NotCrossSigned);
    w.advance(SETTLE * 2);

    assert_eq!(
        w.trace(),
        [
            format!(
                "notice {prompt} {:?}",
                not_cross_signed_notice("This reaction")
            ),
            format!("drop {vote} NotCrossSigned"),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde pending"]);
    assert!(w.verdicts(S1).is_empty());
}

#[test]
fn a_deny_reaction_from_a_device_not_cross_signed_is_refused_as_well() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");

    let vote = react_from(&mut w, &prompt, THUMBS_DOWN, DeviceTrust::NotCrossSigned);
    w.advance(SETTLE * 2);

    assert_eq!(w.phases(), ["s1 abcde pending"]);
    assert!(w.trace().contains(&format!("drop {vote} NotCrossSigned")));
}

#[test]
fn a_thumbs_up_from_a_cross_signed_device_settles_and_allows() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");

    react_from(&mut w, &prompt, THUMBS_UP, DeviceTrust::CrossSigned);
    assert_eq!(w.phases(), ["s1 abcde settling"]);
    w.advance(SETTLE);

    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Allow)]);
}

#[test]
fn by_default_a_verdict_sent_in_the_clear_counts() {
    let mut w = World::new();
    w.pending_prompt("abcde");

    say_from(&mut w, ALICE, "yes abcde", DeviceTrust::PlaintextRoom);

    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Allow)]);
}

#[test]
fn with_encrypted_cross_signed_a_clear_yes_and_a_clear_thumbs_up_are_refused() {
    let mut w = World::configured(|c| c.verdict_devices = VerdictDevices::EncryptedCrossSigned);
    let prompt = w.pending_prompt("abcde");

    let yes = say_from(&mut w, ALICE, "yes abcde", DeviceTrust::PlaintextRoom);
    let vote = react_from(&mut w, &prompt, THUMBS_UP, DeviceTrust::PlaintextRoom);
    w.advance(SETTLE * 2);

    assert_eq!(
        w.trace(),
        [
            format!("notice {yes} {:?}", clear_notice("This answer to abcde")),
            format!("drop {yes} ClearVerdict"),
            format!("notice {prompt} {:?}", clear_notice("This reaction")),
            format!("drop {vote} ClearVerdict"),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn with_encrypted_cross_signed_a_cross_signed_yes_still_decides() {
    let mut w = World::configured(|c| c.verdict_devices = VerdictDevices::EncryptedCrossSigned);
    w.pending_prompt("abcde");

    say_from(&mut w, ALICE, "yes abcde", DeviceTrust::CrossSigned);

    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Allow)]);
}

#[test]
fn with_any_a_verdict_from_a_device_not_cross_signed_counts() {
    let mut w = World::configured(|c| c.verdict_devices = VerdictDevices::Any);
    let prompt = w.pending_prompt("abcde");

    react_from(&mut w, &prompt, THUMBS_DOWN, DeviceTrust::NotCrossSigned);
    w.advance(SETTLE);

    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Deny)]);
}

#[test]
fn chat_from_a_device_not_cross_signed_is_pushed_as_any_message() {
    let mut w = World::new();
    w.attach(S1);

    let hello = say_from(&mut w, ALICE, "hello", DeviceTrust::NotCrossSigned);

    let pushes = w.pushes(S1);
    assert_eq!(pushes.len(), 1);
    assert_eq!(pushes[0].meta("event_id"), Some(hello.as_str()));
    assert_eq!(pushes[0].meta("kind"), Some("message"));
}

#[test]
fn the_gate_comes_first_a_strangers_or_a_non_approvers_yes_gets_no_device_notice() {
    let mut w = World::new();
    w.pending_prompt("abcde");

    let stranger = say_from(&mut w, MALLORY, "yes abcde", DeviceTrust::NotCrossSigned);
    let bob = say_from(&mut w, BOB, "yes abcde", DeviceTrust::NotCrossSigned);
    w.drive();

    assert_eq!(
        w.trace(),
        [
            format!("drop {stranger} Stranger"),
            format!("drop {bob} NotApprover"),
        ]
    );
}

#[test]
fn a_yes_decrypted_late_is_judged_by_the_device_it_came_from() {
    let mut w = World::new();
    w.pending_prompt("abcde");
    let event = w.undecryptable(ALICE, R1);
    w.send_undecryptable(event.clone());
    w.mark();

    let mut yes = w.decrypted_text(&event, "yes abcde");
    yes.device = DeviceTrust::NotCrossSigned;
    w.send(yes);

    assert!(w
        .trace()
        .contains(&format!("drop {} NotCrossSigned", event.event_id)));
    assert_eq!(w.phases(), ["s1 abcde pending"]);
}

#[test]
fn the_device_rule_is_a_table_over_the_setting_and_the_device() {
    use DeviceTrust::{NotCrossSigned, PlaintextRoom, UnencryptedInEncryptedRoom};
    use VerdictDevices::{Any, EncryptedCrossSigned};
    let signed = DeviceTrust::CrossSigned;
    let default = VerdictDevices::CrossSigned;
    let clear = Err(DropReason::ClearVerdict);
    let unsigned = Err(DropReason::NotCrossSigned);
    let table = [
        (Any, PlaintextRoom, Ok(())),
        (Any, UnencryptedInEncryptedRoom, Ok(())),
        (Any, signed, Ok(())),
        (Any, NotCrossSigned, Ok(())),
        (default, PlaintextRoom, Ok(())),
        (default, UnencryptedInEncryptedRoom, clear.clone()),
        (default, signed, Ok(())),
        (default, NotCrossSigned, unsigned.clone()),
        (EncryptedCrossSigned, PlaintextRoom, clear.clone()),
        (EncryptedCrossSigned, UnencryptedInEncryptedRoom, clear),
        (EncryptedCrossSigned, signed, Ok(())),
        (EncryptedCrossSigned, NotCrossSigned, unsigned),
    ];
    for (setting, device, expected) in table {
        assert_eq!(setting.admits(device), expected, "{setting:?} {device:?}");
    }
}

#[test]
fn by_default_a_clear_thumbs_up_in_an_encrypted_room_is_refused_and_a_typed_answer_counts() {
    let mut w = World::new();
    let prompt = w.pending_prompt("abcde");

    let vote = react_from(
        &mut w,
        &prompt,
        THUMBS_UP,
        DeviceTrust::UnencryptedInEncryptedRoom,
    );
    w.advance(SETTLE * 2);
    assert_eq!(
        w.trace(),
        [
            format!("notice {prompt} {:?}", clear_notice("This reaction")),
            format!("drop {vote} ClearVerdict"),
        ]
    );
    assert_eq!(w.phases(), ["s1 abcde pending"]);

    say_from(&mut w, ALICE, "yes abcde", DeviceTrust::CrossSigned);
    assert_eq!(w.verdicts(S1), [("abcde".to_owned(), Behavior::Allow)]);
}

#[test]
fn a_saved_config_or_input_without_the_new_fields_reads_the_defaults() {
    let mut config = serde_json::to_value(work_config()).unwrap();
    config.as_object_mut().unwrap().remove("verdict_devices");
    let config: mc_model::IdentityConfig = serde_json::from_value(config).unwrap();
    assert_eq!(config.verdict_devices, VerdictDevices::CrossSigned);

    let mut w = World::new();
    let mut message = serde_json::to_value(w.text(ALICE, R1, "hi")).unwrap();
    message.as_object_mut().unwrap().remove("device");
    let message: mc_model::Message = serde_json::from_value(message).unwrap();
    assert_eq!(message.device, DeviceTrust::PlaintextRoom);
}
