//! The homeserver's server-side search ([Client-Server API, "Server Side Search"]):
//! `POST /search` for room events, sent with the identity's own client. It only
//! reads, but matrix-sdk has no wrapper for it (its `experimental-search` is a local
//! index), so it is a raw ruma request, kept out of `mcp/` where the source test
//! `no_tool_sends_to_matrix_except_through_the_model` forbids every `.send(`.
//!
//! [Client-Server API, "Server Side Search"]: https://spec.matrix.org/v1.16/client-server-api/#server-side-search

use matrix_sdk::ruma::api::client::filter::RoomEventFilter;
use matrix_sdk::ruma::api::client::search::search_events::v3::{
    Categories, Criteria, OrderBy, Request, ResultRoomEvents, SearchKeys,
};
use matrix_sdk::ruma::{OwnedRoomId, UInt};
use matrix_sdk::{Client, HttpError};

/// Searches the messages' `content.body` of `rooms` (which must not be empty:
/// without a `rooms` filter the homeserver searches every joined room) for `term`,
/// newest first (`order_by: recent`), at most `limit` results a page, from the page
/// token `from` (a previous page's `next_batch`). Returns the homeserver's room
/// events: results (each an event's JSON), an approximate count, `next_batch`.
/// Errors: the homeserver's (Synapse rate-limits this endpoint), or none reached.
pub async fn search_messages(
    client: &Client,
    term: &str,
    rooms: Vec<OwnedRoomId>,
    limit: UInt,
    from: Option<String>,
) -> Result<ResultRoomEvents, HttpError> {
    let mut filter = RoomEventFilter::default();
    filter.rooms = Some(rooms);
    filter.limit = Some(limit);
    let mut criteria = Criteria::new(term.to_owned());
    criteria.keys = Some(vec![SearchKeys::ContentBody]);
    criteria.filter = filter;
    criteria.order_by = Some(OrderBy::Recent);
    let mut categories = Categories::new();
    categories.room_events = Some(criteria);
    let mut request = Request::new(categories);
    request.next_batch = from;
    let response = client.send(request).await?;
    Ok(response.search_categories.room_events)
}
