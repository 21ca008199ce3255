//! What the sync loop does about a room's timeline gap before handing the timeline's
//! events to the model.
//!
//! A sync response's timeline that comes `limited` has a gap before its first event
//! (Client-Server API, "Syncing"). The loop backfills it from `prev_batch` with
//! `/messages`; without a `prev_batch` it cannot, and the events of the gap are lost:
//! the model is told (`Input::GapCut`) before the timeline's events, as when a
//! backfill cannot fetch the whole gap. A timeline that holds the identity's own join
//! has no gap worth reading: what comes before the join is history.
//!
//! A backfill pages back with `/messages` ([`take_from_page`], [`next_page`]) until an
//! event handed over already, the identity's own join ([`is_own_join`]), the start of
//! the room, or [`GAP_BUDGET`] events; how it ended is a [`GapEnd`].

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

/// The most events one gap is backfilled with. A longer gap is cut: the newest
/// [`GAP_BUDGET`] are handed to the model and the cut is logged (WARN) with the
/// room and the oldest event handed over.
pub const GAP_BUDGET: usize = 1_000;

/// How a backfill ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GapEnd {
    /// At an event handed over before.
    Known,
    /// At the identity's own join (included).
    Join,
    /// At the start of the room's visible history.
    RoomStart,
    /// At [`GAP_BUDGET`].
    Cut,
    /// A page could not be read.
    Failed(String),
}

impl GapEnd {
    /// Whether older events of the gap were left out (cut at the budget, or a page
    /// could not be read): the model is told (`Input::GapCut`).
    pub fn left_out(&self) -> bool {
        matches!(self, GapEnd::Cut | GapEnd::Failed(_))
    }
}

/// One event of a `/messages` page, as the backfill judges it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageEvent<'a> {
    /// Its `event_id`, if it has one.
    pub event_id: Option<&'a str>,
    /// The model's delivery log holds it.
    pub in_model: bool,
    /// It is the identity's own join ([`is_own_join`]).
    pub own_join: bool,
}

/// How many of `page`'s events (newest first, as `/messages` pages backwards) the
/// backfill takes, `taken` being taken already from newer pages, and how it ends if it
/// ends in this page. It stops before an event handed over already (`last`, the room's
/// last event saved with the sync position, or one the model holds): [`GapEnd::Known`];
/// before an event past [`GAP_BUDGET`]: [`GapEnd::Cut`]; after the identity's own
/// join: [`GapEnd::Join`]. `None`: every event was taken and the next page follows.
pub fn take_from_page(
    taken: usize,
    last: Option<&str>,
    page: &[PageEvent<'_>],
) -> (usize, Option<GapEnd>) {
    let mut n = 0;
    for event in page {
        if event.in_model || (event.event_id.is_some() && event.event_id == last) {
            return (n, Some(GapEnd::Known));
        }
        if taken + n == GAP_BUDGET {
            return (n, Some(GapEnd::Cut));
        }
        n += 1;
        if event.own_join {
            return (n, Some(GapEnd::Join));
        }
    }
    (n, None)
}

/// Where the page after one read `from` starts: its `end` token, or `None` at the
/// start of the room (no `end`, or `from` again).
pub fn next_page<'a>(from: &str, end: Option<&'a str>) -> Option<&'a str> {
    end.filter(|end| *end != from)
}

/// Whether `raw` (an event's JSON) is `user`'s own join: an `m.room.member` event
/// with `state_key` `user` and membership `join` that was not `join` before (a
/// display name or avatar change is not a join).
pub fn is_own_join(raw: &str, user: &str) -> bool {
    let Ok(event) = serde_json::from_str::<serde_json::Value>(raw) else {
        return false;
    };
    event["type"] == "m.room.member"
        && event["state_key"] == user
        && event["content"]["membership"] == "join"
        && event["unsigned"]["prev_content"]["membership"] != "join"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(event_id: Option<&str>) -> PageEvent<'_> {
        PageEvent {
            event_id,
            in_model: false,
            own_join: false,
        }
    }

    #[test]
    fn a_page_of_new_events_is_taken_whole_and_the_next_page_follows() {
        let page = [event(Some("$3")), event(None), event(Some("$1"))];
        assert_eq!(take_from_page(0, Some("$0"), &page), (3, None));
        assert_eq!(take_from_page(5, None, &page), (3, None));
        assert_eq!(take_from_page(0, None, &[]), (0, None));
    }

    #[test]
    fn a_backfill_stops_before_the_rooms_last_event_handed_over() {
        let page = [event(Some("$3")), event(Some("$2")), event(Some("$1"))];
        assert_eq!(
            take_from_page(0, Some("$2"), &page),
            (1, Some(GapEnd::Known))
        );
        assert_eq!(
            take_from_page(0, Some("$3"), &page),
            (0, Some(GapEnd::Known))
        );
    }

    #[test]
    fn a_backfill_stops_before_an_event_the_model_holds() {
        let mut known = event(Some("$2"));
        known.in_model = true;
        let page = [event(Some("$3")), known, event(Some("$1"))];
        assert_eq!(take_from_page(0, None, &page), (1, Some(GapEnd::Known)));
    }

    #[test]
    fn an_event_without_id_is_never_the_last_one_handed_over() {
        let page = [event(None), event(None)];
        assert_eq!(take_from_page(0, None, &page), (2, None));
    }

    #[test]
    fn a_backfill_takes_the_identitys_own_join_and_ends_there() {
        let mut join = event(Some("$2"));
        join.own_join = true;
        let page = [event(Some("$3")), join, event(Some("$1"))];
        assert_eq!(take_from_page(0, None, &page), (2, Some(GapEnd::Join)));
    }

    #[test]
    fn a_backfill_takes_at_most_the_gap_budget_and_cuts_the_rest() {
        let page = [event(Some("$3")), event(Some("$2")), event(Some("$1"))];
        assert_eq!(
            take_from_page(GAP_BUDGET - 1, None, &page),
            (1, Some(GapEnd::Cut))
        );
        assert_eq!(
            take_from_page(GAP_BUDGET, None, &page),
            (0, Some(GapEnd::Cut))
        );
        assert_eq!(take_from_page(GAP_BUDGET - 3, None, &page), (3, None));
        assert_eq!(GAP_BUDGET, 1_000);
    }

    #[test]
    fn only_a_cut_or_a_failed_page_leaves_older_events_of_the_gap_out() {
        assert!(GapEnd::Cut.left_out());
        assert!(GapEnd::Failed("502".into()).left_out());
        for end in [GapEnd::Known, GapEnd::Join, GapEnd::RoomStart] {
            assert!(!end.left_out(), "{end:?}");
        }
    }

    #[test]
    fn paging_back_ends_at_a_page_without_end_or_with_the_same_token() {
        assert_eq!(next_page("t1", Some("t2")), Some("t2"));
        assert_eq!(next_page("t1", Some("t1")), None);
        assert_eq!(next_page("t1", None), None);
    }

    #[test]
    fn only_the_identitys_own_join_ends_a_backfill() {
        let me = "@bot:hs";
        let member = |state_key: &str, membership: &str, prev: Option<&str>| {
            let mut event = serde_json::json!({
                "type": "m.room.member", "state_key": state_key, "sender": state_key,
                "event_id": "$m", "origin_server_ts": 1,
                "content": {"membership": membership},
            });
            if let Some(prev) = prev {
                event["unsigned"] = serde_json::json!({"prev_content": {"membership": prev}});
            }
            event.to_string()
        };
        assert!(is_own_join(&member(me, "join", None), me));
        assert!(is_own_join(&member(me, "join", Some("invite")), me));
        assert!(is_own_join(&member(me, "join", Some("leave")), me));
        // A display name change, someone else's join, a leave, other events.
        assert!(!is_own_join(&member(me, "join", Some("join")), me));
        assert!(!is_own_join(&member("@ann:hs", "join", None), me));
        assert!(!is_own_join(&member(me, "leave", Some("join")), me));
        let message = r#"{"type":"m.room.message","sender":"@bot:hs","content":{"body":"join"}}"#;
        assert!(!is_own_join(message, me));
        assert!(!is_own_join("not json", me));
    }

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
