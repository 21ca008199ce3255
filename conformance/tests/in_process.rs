//! In-process conformance: generated sequences through the server's own adapters
//! and engine, compared with the model after every action.
//!
//! `MC_CONFORMANCE_CASES` sets the number of sequences (default 1,000).

use mc_conformance::in_process::InProcess;
use mc_conformance::runner::{check, regressions, run_sequence};
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
