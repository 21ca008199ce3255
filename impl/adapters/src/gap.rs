//! What the sync loop does about a room's timeline gap before handing the timeline's
//! events to the model.
//!
//! A sync response's timeline that comes `limited` has a gap before its first event
//! (Client-Server API, "Syncing"). The loop backfills it from `prev_batch` with
//! `/messages`; without a `prev_batch` it cannot, and the events of the gap are lost:
//! the model is told (`Input::GapCut`) before the timeline's events, as when a
//! backfill cannot fetch the whole gap. A timeline that holds the identity's own join
//! has no gap worth reading: what comes before the join is history.

/// What to do about one room's timeline before its events go to the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GapPlan<'a> {
    /// No gap: hand the timeline's events over as they are.
    None,
    /// Backfill the gap backwards from this `prev_batch` token first.
    Backfill(&'a str),
    /// The gap cannot be read: tell the model it was cut (`Input::GapCut`), then hand
    /// the timeline's events over.
    Cut,
}

/// The plan for a timeline: `limited` as the sync response says, `joined_here`
/// whether the timeline holds the identity's own join, `prev_batch` the timeline's
/// token, if any.
pub fn plan(limited: bool, joined_here: bool, prev_batch: Option<&str>) -> GapPlan<'_> {
    if !limited || joined_here {
        return GapPlan::None;
    }
    match prev_batch {
        Some(token) => GapPlan::Backfill(token),
        None => GapPlan::Cut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limited_timeline_is_backfilled_from_its_prev_batch() {
        assert_eq!(plan(true, false, Some("t1")), GapPlan::Backfill("t1"));
    }

    #[test]
    fn a_limited_timeline_without_prev_batch_is_a_visible_cut() {
        assert_eq!(plan(true, false, None), GapPlan::Cut);
    }

    #[test]
    fn a_timeline_that_is_not_limited_or_holds_the_own_join_has_no_gap() {
        for prev_batch in [Some("t1"), None] {
            assert_eq!(plan(false, false, prev_batch), GapPlan::None);
            assert_eq!(plan(false, true, prev_batch), GapPlan::None);
            assert_eq!(plan(true, true, prev_batch), GapPlan::None);
        }
    }
}
