//! The baseline: a minimal raw `/sync` long-poll client (Client-Server API v1.16,
//! `GET /_matrix/client/v3/sync`), the homeserver's own delivery with nothing in
//! between. It uses the same filter as matrix-channel (timeline limit 50, no presence)
//! and, like any correct client, fills a `limited` timeline's gap from
//! `GET /rooms/{room}/messages` so that it loses nothing.

use crate::harness::human::Human;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// A timeline event as the raw client saw it.
#[derive(Debug)]
pub struct Seen {
    /// When the `/sync` response holding it had been read and parsed.
    pub at: Instant,
    pub sender: String,
    /// `content.body`, or "" when there is none.
    pub body: String,
}

/// A running raw client.
pub struct RawSync {
    pub rx: mpsc::UnboundedReceiver<Seen>,
    /// How many `limited` timelines were filled from `/messages`.
    pub gaps: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawSync {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts long-polling `/sync` as `human`, reporting `room`'s new timeline events.
/// Returns once the first (history-skipping) sync is done, so every event sent after
/// it is reported.
pub async fn spawn(human: Arc<Human>, room: String) -> RawSync {
    let filter = json!({
        "room": {"timeline": {"limit": 50}},
        "presence": {"not_types": ["*"]},
    });
    let first = human.sync(None, 0, Some(&filter)).await;
    let mut since = first["next_batch"].as_str().expect("next_batch").to_owned();
    let mut last_seen: Option<String> = first["rooms"]["join"][&room]["timeline"]["events"]
        .as_array()
        .and_then(|events| events.last())
        .and_then(|e| e["event_id"].as_str())
        .map(str::to_owned);
    let (tx, rx) = mpsc::unbounded_channel();
    let gaps = Arc::new(AtomicU64::new(0));
    let gap_count = gaps.clone();
    let task = tokio::spawn(async move {
        loop {
            let resp = human.sync(Some(&since), 30_000, Some(&filter)).await;
            let at = Instant::now();
            since = resp["next_batch"].as_str().expect("next_batch").to_owned();
            let timeline = &resp["rooms"]["join"][&room]["timeline"];
            let Some(events) = timeline["events"].as_array() else {
                continue;
            };
            let mut batch: VecDeque<Value> = events.iter().cloned().collect();
            if timeline["limited"].as_bool() == Some(true) {
                if let (Some(last), Some(prev)) = (&last_seen, timeline["prev_batch"].as_str()) {
                    gap_count.fetch_add(1, Ordering::Relaxed);
                    // Newest first: each older one goes in front.
                    for e in fill_gap(&human, &room, prev, last).await {
                        batch.push_front(e);
                    }
                }
            }
            // Events fetched from `/messages` arrived only now.
            let at = if batch.len() > events.len() {
                Instant::now()
            } else {
                at
            };
            for e in batch {
                let Some(id) = e["event_id"].as_str() else {
                    continue;
                };
                last_seen = Some(id.to_owned());
                let seen = Seen {
                    at,
                    sender: e["sender"].as_str().unwrap_or_default().to_owned(),
                    body: e["content"]["body"].as_str().unwrap_or_default().to_owned(),
                };
                if tx.send(seen).is_err() {
                    return;
                }
            }
        }
    });
    RawSync { rx, gaps, task }
}

/// The events between `last` (exclusive) and the `prev_batch` token `from`, newest
/// first, read backwards from `/messages`.
async fn fill_gap(human: &Human, room: &str, from: &str, last: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut from = from.to_owned();
    loop {
        let page = human.messages(room, "b", 100, Some(&from)).await;
        let chunk = page["chunk"].as_array().cloned().unwrap_or_default();
        if chunk.is_empty() {
            return out;
        }
        for e in chunk {
            if e["event_id"].as_str() == Some(last) {
                return out;
            }
            out.push(e);
        }
        match page["end"].as_str() {
            Some(end) => from = end.to_owned(),
            None => return out,
        }
    }
}
