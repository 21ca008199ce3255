//! The end-to-end benchmark: how close matrix-channel comes to the homeserver's own
//! delivery. A real Synapse on loopback (`scripts/homeserver/start`, through the e2e
//! harness), the real `matrix-channel` binary (built by `cargo bench` in the bench
//! profile), rmcp's Streamable HTTP client as the Claude Code session, and a raw
//! `/sync` long-poll client as the baseline, measured in the same run:
//!
//! 1. **Push latency** (ms): the human's `PUT /send` returned → the session received the
//!    `notifications/claude/channel`; the same messages as the raw client saw them
//!    (200 after 5 unmeasured). Any other push meanwhile (a copy) fails the run.
//!    A receive can come before the send's answer (Synapse wakes `/sync` before it
//!    answers the `PUT`), so a sample can be slightly negative.
//! 2. **Burst** (s): `MC_BENCH_BURST` (default 2,000) messages sent as fast as Synapse
//!    accepts them (8 sends in flight); time from the first send to the session (and
//!    the raw client) holding all of them; loss, duplicates and order are counted (the
//!    session's against the raw client's `/sync` order, the raw client's against the
//!    room's timeline read back from `/messages`); a closing message is then
//!    awaited on both sides, so a copy that comes late is counted too. A message not
//!    there 30 s after the last send counts as lost.
//! 3. **Prompt round trip** (ms): `permission_request` sent → the prompt visible in the
//!    human's `/sync` → `yes <id>` sent → the verdict received; against the raw client's
//!    two hops (ping → the human sees it → pong → the raw client sees it), which are the
//!    homeserver's share. Added = round trip − the adjacent two hops. 50 rounds after
//!    3 unmeasured ones.
//! 4. **Memory** (KiB, `VmRSS` of `/proc/PID/status`): idle with one identity, and with
//!    10 identities and 100 sessions, each shown attached by a push it received.
//!
//! Writes `$MC_BENCH_OUT/channel.json` (default `target/bench/` in the repository; the
//! schema is `mc_bench::Channel`). `MC_BENCH_QUICK=1` runs a few rounds of each,
//! to prove the benchmark still works (CI); its numbers mean nothing. No timing is
//! asserted; loss, duplicates or reordering in the burst make the run fail after the
//! results are written.
//!
//! Run it with `scripts/bench` (README, "Benchmarks").

#[allow(dead_code)]
#[path = "../../tests/e2e/harness/mod.rs"]
mod harness;

mod client;
mod raw;

use anyhow::{bail, Context};
use client::Arrival;
use futures::StreamExt;
use harness::homeserver::{homeserver, register};
use harness::human::Human;
use harness::server::{Identity, Server, ServerConfig};
use mc_bench::stats::{ratios, summary, Tally};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedReceiver;

/// How many rounds and messages each part runs.
#[derive(Clone, Copy, Debug)]
struct Plan {
    quick: bool,
    /// Push-latency rounds (after `warmup` unmeasured ones).
    push_rounds: usize,
    warmup: usize,
    burst: usize,
    /// Prompt round trips made before the measured ones.
    prompt_warmup: usize,
    prompt_rounds: usize,
    identities: usize,
    sessions: usize,
}

impl Plan {
    fn from_env() -> anyhow::Result<Plan> {
        let quick = std::env::var("MC_BENCH_QUICK").is_ok_and(|v| v == "1");
        let burst = match std::env::var("MC_BENCH_BURST") {
            Ok(v) => Some(
                v.parse::<usize>()
                    .ok()
                    .filter(|&n| n > 0)
                    .with_context(|| format!("MC_BENCH_BURST={v:?} is not a positive number"))?,
            ),
            Err(_) => None,
        };
        Ok(if quick {
            Plan {
                quick,
                push_rounds: 5,
                warmup: 1,
                burst: burst.unwrap_or(20),
                prompt_warmup: 1,
                prompt_rounds: 2,
                identities: 2,
                sessions: 4,
            }
        } else {
            Plan {
                quick,
                push_rounds: 200,
                warmup: 5,
                burst: burst.unwrap_or(2000),
                prompt_warmup: 3,
                prompt_rounds: 50,
                identities: 10,
                sessions: 100,
            }
        })
    }
}

/// Sends in flight during the burst: "as fast as the homeserver accepts them" (one
/// at a time, Synapse with SQLite takes about 15 messages a second here).
const BURST_CONCURRENCY: usize = 8;

/// How long any single expected arrival may take before the run fails.
const ARRIVAL_TIMEOUT: Duration = Duration::from_secs(30);

fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; there are no other arguments.
    let plan = Plan::from_env()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(plan))
}

async fn run(plan: Plan) -> anyhow::Result<()> {
    let started = Instant::now();
    let out_dir = match std::env::var_os("MC_BENCH_OUT") {
        Some(dir) => PathBuf::from(dir),
        None => harness::repo_root().join("target/bench"),
    };
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let hs = homeserver().await;
    eprintln!("bench: homeserver {} ({plan:?})", hs.url);

    // The cast: Ann (the human, allowed and approver), a raw observer, the bot.
    let ann = Arc::new(Human::register("bench_ann").await);
    let raw_user = Arc::new(Human::register("bench_raw").await);
    let bot = register("bench_bot").await;
    let room = ann.create_room(&[&raw_user.user_id, &bot.user_id]).await;
    raw_user.join(&room).await;

    let mut identity = Identity::new("bot", &bot, &[&ann.user_id]);
    identity.permission_room = Some(room.clone());
    let server = Server::start(ServerConfig {
        identities: vec![identity],
        ..ServerConfig::default()
    })
    .await;
    ann.wait_joined(&room, &bot.user_id).await;

    // 4a. Idle, one identity, no session yet.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_kib = rss_kib(server.pid().context("serve is running")?)?;
    eprintln!("bench: idle with one identity: {idle_kib} KiB");

    let clients = client::Clients::start()?;
    let (session, mut arrivals) = clients
        .connect(&server.url("/channel"), server.token("bot"))
        .await?;
    let mut raw = raw::spawn(raw_user.clone(), room.clone()).await;
    let nonce = harness::random_suffix();

    // 1. Push latency, every message seen by both clients.
    let mut channel_ms = Vec::new();
    let mut raw_ms = Vec::new();
    // Pushes that were not the one awaited: copies or strays, none expected here.
    let mut strays = Vec::new();
    for i in 0..plan.warmup + plan.push_rounds {
        // The trailing dot: `push-N-1.` is not part of `push-N-10.`.
        let marker = format!("push-{nonce}-{i}.");
        ann.send_text(&room, &marker).await;
        let sent = Instant::now();
        let ours = wait_channel(&mut arrivals, Some(&mut strays), |a| {
            a.method == "notifications/claude/channel" && content_has(a, &marker)
        })
        .await
        .with_context(|| format!("the push of {marker}"))?;
        let theirs = wait_raw(&mut raw.rx, |s| s.body == marker)
            .await
            .with_context(|| format!("the raw client's {marker}"))?;
        if i >= plan.warmup {
            channel_ms.push(ms_between(sent, ours.at));
            raw_ms.push(ms_between(sent, theirs.at));
        }
        // Both long polls are re-armed before the next send.
        tokio::time::sleep(Duration::from_millis(20 + (i as u64 * 7) % 30)).await;
    }
    eprintln!("bench: push latency done ({} samples)", channel_ms.len());

    // 2. The burst.
    let burst = run_burst(&plan, &nonce, &ann, &room, &mut arrivals, &mut raw).await?;
    eprintln!("bench: burst done: {burst}");

    // The approver's own client, from here on only (a third long poll during the push
    // latency rounds would make Synapse answer three requests per message).
    let mut ann_sync = raw::spawn(ann.clone(), room.clone()).await;

    // 3. Prompt round trips, each next to the homeserver's own two hops.
    let mut total_ms = Vec::new();
    let mut hops_ms = Vec::new();
    for i in 0..plan.prompt_warmup + plan.prompt_rounds {
        let measured = i >= plan.prompt_warmup;
        let request_id = request_id(i);
        let start = Instant::now();
        client::permission_request(&session, &request_id).await?;
        let bot_id = bot.user_id.clone();
        wait_raw(&mut ann_sync.rx, |s| {
            s.sender == bot_id && s.body.contains(&request_id)
        })
        .await
        .with_context(|| format!("the prompt of {request_id}"))?;
        ann.send_text(&room, &format!("yes {request_id}")).await;
        let verdict = wait_channel(&mut arrivals, None, |a| {
            a.method == "notifications/claude/channel/permission"
                && a.params["request_id"] == request_id.as_str()
        })
        .await
        .with_context(|| format!("the verdict of {request_id}"))?;
        if verdict.params["behavior"] != "allow" {
            bail!("the verdict of {request_id} is {}", verdict.params);
        }
        if measured {
            total_ms.push(ms_between(start, verdict.at));
        }
        // The prompt's outcome edit follows the verdict; Synapse persists a room's
        // events one at a time, so the baseline waits until it is through.
        let bot_id = bot.user_id.clone();
        wait_raw(&mut ann_sync.rx, |s| {
            s.sender == bot_id && s.body.contains(&request_id)
        })
        .await
        .with_context(|| format!("the outcome edit of {request_id}"))?;
        tokio::time::sleep(Duration::from_millis(100)).await;

        let ping = format!("ping-{nonce}-{i}.");
        let pong = format!("pong-{nonce}-{i}.");
        let start = Instant::now();
        raw_user.send_text(&room, &ping).await;
        wait_raw(&mut ann_sync.rx, |s| s.body == ping).await?;
        ann.send_text(&room, &pong).await;
        let back = wait_raw(&mut raw.rx, |s| s.body == pong).await?;
        if measured {
            hops_ms.push(ms_between(start, back.at));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let added_ms: Vec<f64> = total_ms.iter().zip(&hops_ms).map(|(t, h)| t - h).collect();
    eprintln!("bench: prompt round trips done");

    drop(session);
    drop(server);

    // 4b. Many identities and sessions.
    let (many_kib, identities, sessions) = many(&plan, &clients).await?;
    eprintln!("bench: {identities} identities and {sessions} sessions: {many_kib} KiB");

    let channel = summary(&channel_ms);
    let raw_sync = summary(&raw_ms);
    let results = mc_bench::Channel {
        quick: plan.quick,
        machine: Some(machine(&hs.url).await),
        push_latency: Some(mc_bench::PushLatency {
            samples: channel_ms.len() as u64,
            ratio: ratios(&channel, &raw_sync),
            channel,
            raw_sync,
            channel_ms,
            raw_sync_ms: raw_ms,
        }),
        burst: Some(burst.to_results(raw.gaps.load(std::sync::atomic::Ordering::Relaxed))),
        prompt_round_trip: Some(mc_bench::PromptRoundTrip {
            rounds: total_ms.len() as u64,
            total_ms: summary(&total_ms),
            homeserver_hops_ms: summary(&hops_ms),
            added_ms: summary(&added_ms),
        }),
        memory: Some(mc_bench::Memory {
            idle_one_identity_kib: idle_kib as f64,
            ten_identities_100_sessions_kib: many_kib as f64,
            identities: identities as u64,
            sessions: sessions as u64,
            ratio: many_kib as f64 / idle_kib as f64,
        }),
        wall_s: Some(started.elapsed().as_secs_f64()),
    };
    let path = out_dir.join("channel.json");
    std::fs::write(&path, serde_json::to_string_pretty(&results)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!(
        "bench: wrote {} in {:.0} s",
        path.display(),
        started.elapsed().as_secs_f64()
    );
    if !strays.is_empty() {
        bail!(
            "{} pushes during the push-latency rounds were not the awaited one (copies or strays): {strays:?}",
            strays.len()
        );
    }
    burst.verdict()
}

/// What one side of the burst received, and when the last new message came.
#[derive(Debug, Default)]
struct Received {
    /// Message numbers (in sending order) in arrival order.
    order: Vec<usize>,
    seen: HashSet<usize>,
    last: Option<Instant>,
}

impl Received {
    fn push(&mut self, index: usize, at: Instant) {
        if self.seen.insert(index) {
            self.last = Some(at);
        }
        self.order.push(index);
    }

    fn distinct(&self) -> usize {
        self.seen.len()
    }

    /// Message number → the position of its first arrival here.
    fn positions(&self) -> HashMap<usize, u64> {
        let mut positions = HashMap::new();
        for &i in &self.order {
            let next = positions.len() as u64;
            positions.entry(i).or_insert(next);
        }
        positions
    }

    /// The arrivals as positions in a reference order (concurrent sends do not fix the
    /// order in advance); a message the reference lacks counts as missing.
    fn tally(&self, reference: &HashMap<usize, u64>) -> Tally {
        let mut tally = Tally::default();
        for i in &self.order {
            let unknown = u64::MAX - *i as u64;
            tally.arrived(reference.get(i).copied().unwrap_or(unknown));
        }
        tally
    }
}

struct Burst {
    messages: usize,
    /// Message number → its position in the room's timeline.
    timeline: HashMap<usize, u64>,
    send_s: f64,
    channel_s: f64,
    raw_s: f64,
    channel: Received,
    raw: Received,
}

impl std::fmt::Display for Burst {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} messages sent in {:.2} s; the session had them all after {:.2} s, the raw client after {:.2} s",
            self.messages, self.send_s, self.channel_s, self.raw_s
        )
    }
}

impl Burst {
    fn to_results(&self, raw_sync_gaps_filled: u64) -> mc_bench::Burst {
        mc_bench::Burst {
            messages: self.messages as u64,
            send_s: self.send_s,
            channel_s: self.channel_s,
            raw_sync_s: self.raw_s,
            ratio: self.channel_s / self.raw_s,
            channel: self
                .channel
                .tally(&self.raw.positions())
                .delivery(self.messages as u64),
            raw_sync: self
                .raw
                .tally(&self.timeline)
                .delivery(self.messages as u64),
            raw_sync_gaps_filled,
        }
    }

    /// Fails the run unless the session got every message exactly once in the order
    /// the raw client got them (`/sync` order, the homeserver's stream order), and the
    /// raw client every message exactly once. Whether the raw client's order is also the
    /// `/messages` order is reported, not required (they can differ when concurrent
    /// sends fork the room's event graph).
    fn verdict(&self) -> anyhow::Result<()> {
        if self.timeline.len() != self.messages {
            bail!(
                "burst: the room's timeline holds {} of the {} messages",
                self.timeline.len(),
                self.messages
            );
        }
        let raw = self
            .raw
            .tally(&self.timeline)
            .delivery(self.messages as u64);
        if raw.missing != 0 || raw.duplicates != 0 {
            bail!("burst: the raw client (the baseline) did not get every message once: {raw:?}");
        }
        let ours = self
            .channel
            .tally(&self.raw.positions())
            .delivery(self.messages as u64);
        if ours.missing != 0 || ours.duplicates != 0 || ours.out_of_order != 0 {
            bail!("burst: the session did not get every message exactly once in order: {ours:?}");
        }
        Ok(())
    }
}

/// Sends the burst, 8 at a time, while both clients collect it.
async fn run_burst(
    plan: &Plan,
    nonce: &str,
    ann: &Arc<Human>,
    room: &str,
    arrivals: &mut UnboundedReceiver<Arrival>,
    raw: &mut raw::RawSync,
) -> anyhow::Result<Burst> {
    let n = plan.burst;
    let prefix = format!("burst-{nonce}-");
    let start = Instant::now();
    let mut sender = {
        let ann = ann.clone();
        let room = room.to_owned();
        let prefix = prefix.clone();
        tokio::spawn(async move {
            futures::stream::iter(0..n)
                .map(|i| {
                    let (ann, room, body) = (ann.clone(), room.clone(), format!("{prefix}{i}"));
                    async move { ann.send_text(&room, &body).await }
                })
                .buffer_unordered(BURST_CONCURRENCY)
                .collect::<Vec<_>>()
                .await;
            start.elapsed()
        })
    };
    let mut channel = Received::default();
    let mut raw_seen = Received::default();
    let mut send = None;
    // No deadline while Synapse still takes sends (its pace is not ours to assert);
    // then ARRIVAL_TIMEOUT after the last one: a message not there by then is lost.
    let mut deadline = tokio::time::Instant::now() + Duration::from_secs(24 * 3600);
    // Both sides are read as they come, so neither waits on the other's queue. After
    // both have every message, a closing message is sent, and both are read up to it:
    // a copy of a burst message would arrive before it.
    let end = format!("{prefix}end.");
    let mut end_sent = false;
    let mut end_seen = (false, false);
    loop {
        if !end_sent && send.is_some() && channel.distinct() == n && raw_seen.distinct() == n {
            ann.send_text(room, &end).await;
            end_sent = true;
            deadline = tokio::time::Instant::now() + ARRIVAL_TIMEOUT;
        }
        if end_seen == (true, true) {
            break;
        }
        tokio::select! {
            done = &mut sender, if send.is_none() => {
                send = Some(done.context("the burst's sender failed")?);
                deadline = tokio::time::Instant::now() + ARRIVAL_TIMEOUT;
            }
            a = arrivals.recv() => {
                let a = a.context("the MCP session ended")?;
                if a.method != "notifications/claude/channel" {
                    continue;
                }
                let Some(content) = a.params["content"].as_str() else { continue };
                if content.contains(&end) {
                    end_seen.0 = true;
                } else if let Some(i) = index_after(content, &prefix) {
                    channel.push(i, a.at);
                }
            }
            s = raw.rx.recv() => {
                let s = s.context("the raw client stopped")?;
                if s.body == end {
                    end_seen.1 = true;
                } else if let Some(i) = index_after(&s.body, &prefix) {
                    raw_seen.push(i, s.at);
                }
            }
            _ = tokio::time::sleep_until(deadline) => {
                eprintln!(
                    "bench: burst: {ARRIVAL_TIMEOUT:?} after the last send, the session had {} and the raw client {} of {n}",
                    channel.distinct(),
                    raw_seen.distinct()
                );
                break;
            }
        }
    }
    let send = match send {
        Some(send) => send,
        None => sender.await.context("the burst's sender failed")?,
    };
    let secs = |r: &Received| r.last.map_or(f64::NAN, |t| (t - start).as_secs_f64());
    Ok(Burst {
        messages: n,
        timeline: timeline_positions(ann, room, &prefix, n).await,
        send_s: send.as_secs_f64(),
        channel_s: secs(&channel),
        raw_s: secs(&raw_seen),
        channel,
        raw: raw_seen,
    })
}

/// Each burst message's position in the room's timeline (oldest first), read back
/// with `GET /rooms/{room}/messages` from the newest event.
async fn timeline_positions(
    ann: &Human,
    room: &str,
    prefix: &str,
    n: usize,
) -> HashMap<usize, u64> {
    let mut newest_first = Vec::new();
    let mut from: Option<String> = None;
    while newest_first.len() < n {
        let page = ann.messages(room, "b", 100, from.as_deref()).await;
        let chunk = page["chunk"].as_array().cloned().unwrap_or_default();
        for e in &chunk {
            if let Some(i) = e["content"]["body"]
                .as_str()
                .and_then(|b| index_after(b, prefix))
            {
                newest_first.push(i);
            }
        }
        match page["end"].as_str() {
            Some(end) if !chunk.is_empty() => from = Some(end.to_owned()),
            _ => break,
        }
    }
    newest_first
        .into_iter()
        .rev()
        .enumerate()
        .map(|(pos, i)| (i, pos as u64))
        .collect()
}

/// The number right after `prefix` in `text`.
fn index_after(text: &str, prefix: &str) -> Option<usize> {
    let rest = &text[text.find(prefix)? + prefix.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Resident memory with `plan.identities` identities and `plan.sessions` attached
/// sessions spread over them: (KiB, identities, sessions).
async fn many(plan: &Plan, clients: &client::Clients) -> anyhow::Result<(u64, usize, usize)> {
    let owner = Human::register("bench_owner").await;
    let mut identities = Vec::new();
    for k in 0..plan.identities {
        let bot = register("bench_many").await;
        identities.push(Identity::new(&format!("bot{k}"), &bot, &[&owner.user_id]));
    }
    let bots: Vec<&str> = identities
        .iter()
        .map(|i| i.account.user_id.as_str())
        .collect();
    let room = owner.create_room(&bots).await;
    let server = Server::start(ServerConfig {
        identities: identities.clone(),
        ..ServerConfig::default()
    })
    .await;
    for bot in &bots {
        owner.wait_joined(&room, bot).await;
    }
    let mut sessions = Vec::new();
    for s in 0..plan.sessions {
        let identity = &identities[s % identities.len()].name;
        let (session, rx) = clients
            .connect(&server.url("/channel"), server.token(identity))
            .await
            .with_context(|| format!("session {s} of {identity}"))?;
        sessions.push((session, rx, false));
    }
    // A session is attached once its GET stream is open, which rmcp does after
    // `initialize`: a push reaches every attached session, so a message is sent until
    // every session has had one (a session that attaches later gets no earlier push).
    for round in 0.. {
        if sessions.iter().all(|(_, _, attached)| *attached) {
            break;
        }
        if round == 10 {
            let missing = sessions.iter().filter(|(_, _, a)| !*a).count();
            bail!(
                "{missing} of {} sessions never received a push",
                sessions.len()
            );
        }
        let marker = format!("attached-{round}.");
        owner.send_text(&room, &marker).await;
        for (_, rx, attached) in sessions.iter_mut().filter(|(_, _, a)| !*a) {
            let got = tokio::time::timeout(Duration::from_secs(2), async {
                while let Some(a) = rx.recv().await {
                    if content_has(&a, &marker) {
                        return true;
                    }
                }
                false
            })
            .await;
            *attached = got.unwrap_or(false);
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let kib = rss_kib(server.pid().context("serve is running")?)?;
    drop(sessions);
    Ok((kib, identities.len(), plan.sessions))
}

/// `VmRSS` of `/proc/PID/status`, in KiB.
fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no VmRSS in {path}"))
}

/// Waits for the first notification that `pred` accepts, skipping the others.
/// With `strays`, the skipped `notifications/claude/channel` pushes' contents are kept.
async fn wait_channel(
    rx: &mut UnboundedReceiver<Arrival>,
    mut strays: Option<&mut Vec<String>>,
    pred: impl Fn(&Arrival) -> bool,
) -> anyhow::Result<Arrival> {
    let deadline = tokio::time::Instant::now() + ARRIVAL_TIMEOUT;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(a)) if pred(&a) => return Ok(a),
            Ok(Some(a)) => {
                if let Some(strays) = strays.as_deref_mut() {
                    if a.method == "notifications/claude/channel" {
                        strays.push(a.params["content"].to_string());
                    }
                }
            }
            Ok(None) => bail!("the MCP session ended"),
            Err(_) => bail!("nothing within {ARRIVAL_TIMEOUT:?}"),
        }
    }
}

/// Waits for the first raw event that `pred` accepts, skipping the others.
async fn wait_raw(
    rx: &mut UnboundedReceiver<raw::Seen>,
    pred: impl Fn(&raw::Seen) -> bool,
) -> anyhow::Result<raw::Seen> {
    let deadline = tokio::time::Instant::now() + ARRIVAL_TIMEOUT;
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(s)) if pred(&s) => return Ok(s),
            Ok(Some(_)) => {}
            Ok(None) => bail!("the raw client stopped"),
            Err(_) => bail!("nothing within {ARRIVAL_TIMEOUT:?}"),
        }
    }
}

fn content_has(a: &Arrival, text: &str) -> bool {
    a.params["content"]
        .as_str()
        .is_some_and(|c| c.contains(text))
}

/// Milliseconds from `a` to `b`, negative when `b` came first.
fn ms_between(a: Instant, b: Instant) -> f64 {
    if b >= a {
        (b - a).as_secs_f64() * 1e3
    } else {
        -((a - b).as_secs_f64() * 1e3)
    }
}

/// A permission request id as Claude Code makes them: five letters from a–z without
/// `l` (the channels reference), distinct per round.
fn request_id(round: usize) -> String {
    const LETTERS: &[u8] = b"abcdefghijkmnopqrstuvwxyz";
    let mut n = round + rand::random::<u32>() as usize % 1_000_000 * 1000;
    (0..5)
        .map(|_| {
            let c = LETTERS[n % LETTERS.len()] as char;
            n /= LETTERS.len();
            c
        })
        .collect()
}

/// The machine and versions the numbers were taken on.
async fn machine(hs_url: &str) -> mc_bench::Machine {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown".to_owned(), |(_, v)| v.trim().to_owned());
    let meminfo = read("/proc/meminfo");
    let mem_kib: f64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(f64::NAN);
    let os = read("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map_or("unknown".to_owned(), |v| v.trim_matches('"').to_owned());
    let command = |program: &str, args: &[&str]| {
        std::process::Command::new(program)
            .args(args)
            .current_dir(harness::repo_root())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map_or("unknown".to_owned(), |o| {
                String::from_utf8_lossy(&o.stdout).trim().to_owned()
            })
    };
    let synapse = reqwest::get(format!("{hs_url}/_synapse/admin/v1/server_version"))
        .await
        .ok();
    let synapse = match synapse {
        Some(resp) => resp
            .json::<Value>()
            .await
            .ok()
            .and_then(|v| v["server_version"].as_str().map(str::to_owned)),
        None => None,
    };
    mc_bench::Machine {
        cpu,
        cores: std::thread::available_parallelism().map_or(0, |n| n.get() as u32),
        memory_gib: mem_kib / (1024.0 * 1024.0),
        os,
        kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
        rustc: command("rustc", &["--version"]),
        synapse: synapse.unwrap_or_else(|| "unknown".to_owned()),
        commit: command("git", &["describe", "--always", "--dirty"]),
        profile: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
        .to_owned(),
        date: command("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]),
    }
}
