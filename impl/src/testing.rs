//! Time in the crate's async tests: they run on tokio's paused clock
//! (`#[tokio::test(start_paused = true)]`), which moves only when the runtime has no
//! task to run (it then jumps to the next timer) or when a test calls
//! `tokio::time::advance`. A test waits on what it observes ([`idle`], an answer, a
//! channel), never on the wall clock.

use mc_model::{Millis, Timestamp};
use std::cell::Cell;
use std::time::Duration;

/// Returns once no task of the runtime can run: every task woken before the call,
/// and every task those woke, has run and waits again. The paused clock moves only
/// when the runtime is idle, so the 1 ms this sleeps passes only then. Time moves by
/// 1 ms; a timer due within that millisecond may fire alongside.
///
/// Panics on a clock that is not paused (the sleep took other than exactly 1 ms):
/// on the wall clock this would be a timed wait, not an observation.
pub(crate) async fn idle() {
    let before = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(
        before.elapsed(),
        Duration::from_millis(1),
        "idle() needs the paused clock: #[tokio::test(start_paused = true)]"
    );
}

thread_local! {
    /// Where [`paused_clock`] counts from: set by [`start_paused_clock`].
    static START: Cell<Option<tokio::time::Instant>> = const { Cell::new(None) };
}

/// The model's time at [`start_paused_clock`], in milliseconds since the Unix epoch.
pub(crate) const PAUSED_CLOCK_START: Timestamp = Timestamp(1_700_000_000_000);

/// Starts [`paused_clock`] at [`PAUSED_CLOCK_START`] now. A current-thread runtime
/// runs its tasks on the test's thread, so each test has its own start.
pub(crate) fn start_paused_clock() {
    START.with(|s| s.set(Some(tokio::time::Instant::now())));
}

/// A model clock (`engine::spawn`'s `clock`) driven by tokio's clock:
/// [`PAUSED_CLOCK_START`] plus the whole milliseconds since [`start_paused_clock`].
/// On the paused clock the model's time and the engine's timers move together.
/// Panics before [`start_paused_clock`].
pub(crate) fn paused_clock() -> Timestamp {
    let start = START
        .with(Cell::get)
        .expect("start_paused_clock() before paused_clock()");
    PAUSED_CLOCK_START + start.elapsed().as_millis() as Millis
}
