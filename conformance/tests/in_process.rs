//! In-process conformance: generated sequences through the server's own adapters
//! and engine, compared with the model after every action.
//!
//! `MC_CONFORMANCE_CASES` sets the number of sequences (default 1,000).

use mc_conformance::alphabet::ActionKind;
use mc_conformance::in_process::InProcess;
use mc_conformance::runner::{check, regressions, required_kinds, run_sequence, skipped};
use mc_conformance::world::{InProcessMode, Mode};

fn cases() -> u32 {
    std::env::var("MC_CONFORMANCE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000)
}

#[test]
fn generated_sequences_conform() {
    let coverage = check::<InProcessMode, _>(cases(), 24, InProcess::new);
    eprintln!("{coverage:#?}");
    // The generator must reach every action the skip list does not exclude, and every
    // kind of thing the server can be seen doing.
    for kind in required_kinds(Mode::InProcess) {
        assert!(
            coverage.actions.get(kind.name()).copied().unwrap_or(0) > 0,
            "no {} action was generated",
            kind.name()
        );
    }
    for seen in [
        "notifications/claude/channel (message)",
        "notifications/claude/channel (edit)",
        "notifications/claude/channel (reaction)",
        "notifications/claude/channel (retraction)",
        "notifications/claude/channel (replay_cut)",
        "notifications/claude/channel/permission",
        "prompt posted",
        "prompt edited",
        "notice",
        "notifications/claude/channel (undecryptable)",
    ] {
        assert!(
            coverage.observations.get(seen).copied().unwrap_or(0) > 0,
            "no {seen} was observed"
        );
    }
    // An undecryptable event parked and a stranger's dropped; a room key that comes
    // within the grace period, and one that comes after the sessions were told.
    for case in [
        "undecryptable: parked",
        "undecryptable: Stranger",
        "decrypt: before the grace period ended",
        "decrypt: after the sessions were told it is undecryptable",
    ] {
        assert!(
            coverage.cases.get(case).copied().unwrap_or(0) > 0,
            "the case {case:?} was not reached"
        );
    }
}

#[test]
fn saved_regressions_conform() {
    for (path, regression) in regressions(Mode::InProcess) {
        let mut target = InProcess::new();
        if let Err(report) = run_sequence(Mode::InProcess, &regression.actions, &mut target, None) {
            panic!("{}:\n{report}", path.display());
        }
    }
}

#[test]
fn the_skip_list_names_real_actions_and_gives_reasons() {
    let names: Vec<&str> = ActionKind::ALL.iter().map(|k| k.name()).collect();
    for target in ["in_process", "real"] {
        for what in skipped(target) {
            // Single words are action names; cases in words have spaces.
            if !what.contains(' ') && !["attachments", "membership"].contains(&what.as_str()) {
                assert!(
                    names.contains(&what.as_str()),
                    "skip.txt: {what} is not an action"
                );
            }
        }
    }
}
