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
//! 5. **The cost curve** (`curve.rs`, `channel.json` `cost_curve`): the push latency of
//!    part 1 (against the raw client) again on a server restarted on a delivery log of
//!    0, 1,000 and 10,000 entries (quick: 0 and 200), seeded with the model's own inputs
//!    and written with `Store::save_model` while the server is stopped; and with 10
//!    identities (quick: 3), one session each, all receiving every message. For each,
//!    the bytes written per input (`write_bytes` and `wchar` of `/proc/PID/io`) and the
//!    engine's microseconds per input (`/health`'s `engine` counters), as deltas over
//!    the measured pushes.
//! 6. **A stuck client**: identity 1's push latency in a room of its own while
//!    identity 0's room receives large messages (16 KiB bodies, a few before and more
//!    during the rounds), first with identity 0's ordinary session only (the
//!    baseline), then with a second session of identity 0 whose GET stream is opened
//!    on a socket with a 4 KiB receive buffer and never read.
//! 7. **Restart from a journal** (`restart.rs`, `cost_curve.restart`): a journal of
//!    100,000 inputs (quick: 2,000) generated with the server's own `Journal`, and
//!    the time `recover_channel` takes on it, against the same state from a snapshot
//!    alone; in process, median of 5.
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
mod curve;
mod raw;
mod restart;

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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
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
    /// Delivery-log sizes of the cost curve, smallest (an empty log) first.
    curve_sizes: &'static [usize],
    /// Measured pushes per point of the cost curve (after `warmup` unmeasured ones).
    curve_rounds: usize,
    /// Measured pushes to the other identity in each stuck-client phase.
    stuck_rounds: usize,
    /// Large messages sent to the stuck identity's room before each phase's rounds.
    stuck_prefill: usize,
    /// Inputs in the journal the restart is timed from.
    restart_inputs: u64,
    /// Unmeasured pushes per point of the cost curve with strace attached.
    traced_rounds: usize,
    /// At most this many large messages per phase, prefill included.
    stuck_flood: usize,
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
                identities: 3,
                sessions: 6,
                curve_sizes: &[0, 200],
                curve_rounds: 5,
                stuck_rounds: 5,
                stuck_prefill: 3,
                stuck_flood: 10,
                restart_inputs: 2_000,
                traced_rounds: 5,
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
                curve_sizes: &[0, 1_000, 10_000],
                curve_rounds: 200,
                stuck_rounds: 100,
                stuck_prefill: 150,
                stuck_flood: 600,
                restart_inputs: 100_000,
                traced_rounds: 50,
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
    let mut server = Server::start(ServerConfig {
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
    // Pushes that were not the one awaited: copies or strays, none expected here.
    let mut strays = Vec::new();
    let (channel_ms, raw_ms) = push_samples(
        &format!("push-{nonce}"),
        &ann,
        &room,
        (plan.warmup, plan.push_rounds),
        &mut [&mut arrivals],
        Some(&mut raw.rx),
        Some(&mut strays),
    )
    .await?;
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

    // 5. The cost curve: the same pushes on a server started on a seeded delivery log.
    let mut sizes = Vec::new();
    for &entries in plan.curve_sizes {
        server.kill9().await;
        let json =
            curve::seeded_state("bot", &bot.user_id, &room, &ann.user_id, entries, now_ms())?;
        curve::seed(&server, &json)?;
        server.restart().await;
        let token = server.token("bot").to_owned();
        let (session, mut arrivals) = clients.connect(&server.url("/channel"), &token).await?;
        // Unmeasured: the attach and the first sync after the start.
        push_samples(
            &format!("curve{entries}w-{nonce}"),
            &ann,
            &room,
            (plan.warmup, 0),
            &mut [&mut arrivals],
            Some(&mut raw.rx),
            None,
        )
        .await?;
        let before = curve::Meter::read(&server, &token).await?;
        let (c, r) = push_samples(
            &format!("curve{entries}-{nonce}"),
            &ann,
            &room,
            (0, plan.curve_rounds),
            &mut [&mut arrivals],
            Some(&mut raw.rx),
            None,
        )
        .await?;
        let after = curve::Meter::read(&server, &token).await?;
        let mut point = curve::point(entries, 1, &c, &r, after.since(&before));
        point.by_file = written_by_file(
            &server,
            &token,
            (&format!("curve{entries}t-{nonce}"), &ann, &room),
            plan.traced_rounds,
            &mut arrivals,
        )
        .await?;
        eprintln!(
            "bench: cost curve at {entries} log entries: p50 {:.1} ms (raw {:.1}), {:.0} bytes written and {:.0} µs in the engine per input",
            point.channel.p50,
            point.raw_sync.p50,
            point.cost.write_bytes_per_input,
            point.cost.handle_us_per_input + point.cost.persist_us_per_input
        );
        sizes.push(point);
        drop(session);
    }
    drop(server);

    // 4b. Many identities and sessions (and the stuck client).
    let many = many(&plan, &clients, &raw_user, &nonce).await?;
    let (many_kib, identities, sessions) = (many.kib, many.identities, many.sessions);
    eprintln!("bench: {identities} identities and {sessions} sessions: {many_kib} KiB");

    // 4c. Restart from a journal (in process: no homeserver, no server).
    let restart = tokio::task::spawn_blocking(move || restart::measure(plan.restart_inputs))
        .await
        .context("the restart measurement")??;
    eprintln!(
        "bench: restart from a journal of {} inputs: {:.0} ms (reading {:.0} ms; from a snapshot alone {:.1} ms)",
        restart.inputs, restart.journal_ms, restart.read_ms, restart.snapshot_ms
    );

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
        cost_curve: Some(mc_bench::CostCurve {
            seeding: curve::SEEDING.to_owned(),
            sizes,
            identities: Some(many.point),
            stuck_client: Some(many.stuck),
            restart: Some(restart),
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

/// What the phase with many identities measured.
struct Many {
    /// Resident memory with every session attached (KiB).
    kib: u64,
    identities: usize,
    sessions: usize,
    /// Push latency with every identity receiving each message.
    point: mc_bench::CurvePoint,
    stuck: mc_bench::StuckClient,
}

/// With `plan.identities` identities in one room: push latency with one session per
/// identity, each receiving every message (against `raw_user`'s raw client); then
/// the stuck client (identity 0's session stops reading while its own room gets large
/// messages; identity 1's pushes in a room of its own are timed, against the same
/// flood without the stuck session); then resident memory with `plan.sessions`
/// attached sessions spread over the identities.
async fn many(
    plan: &Plan,
    clients: &client::Clients,
    raw_user: &Arc<Human>,
    nonce: &str,
) -> anyhow::Result<Many> {
    let owner = Arc::new(Human::register("bench_owner").await);
    let mut identities = Vec::new();
    for k in 0..plan.identities.max(2) {
        let bot = register("bench_many").await;
        identities.push(Identity::new(&format!("bot{k}"), &bot, &[&owner.user_id]));
    }
    let bots: Vec<&str> = identities
        .iter()
        .map(|i| i.account.user_id.as_str())
        .collect();
    let mut invited = bots.clone();
    invited.push(&raw_user.user_id);
    let room = owner.create_room(&invited).await;
    raw_user.join(&room).await;
    // The stuck identity's room, and the measured one's.
    let stuck_room = owner.create_room(&[bots[0]]).await;
    let free_room = owner.create_room(&[bots[1]]).await;
    let server = Server::start(ServerConfig {
        identities: identities.clone(),
        ..ServerConfig::default()
    })
    .await;
    for bot in &bots {
        owner.wait_joined(&room, bot).await;
    }
    owner.wait_joined(&stuck_room, bots[0]).await;
    owner.wait_joined(&free_room, bots[1]).await;
    let mut many_results = None;
    let mut sessions = Vec::new();
    for s in 0..plan.sessions.max(identities.len()) {
        let identity = &identities[s % identities.len()].name;
        let (session, rx) = clients
            .connect(&server.url("/channel"), server.token(identity))
            .await
            .with_context(|| format!("session {s} of {identity}"))?;
        sessions.push((session, rx, false));
        if s + 1 == identities.len() {
            // One session per identity: shown attached, then the latency and the
            // stuck client, before the other sessions connect.
            attach_all(&owner, &room, "attached-first", &mut sessions).await?;
            let token = server.token(&identities[0].name).to_owned();
            let mut raw = raw::spawn(raw_user.clone(), room.clone()).await;
            let before = curve::Meter::read(&server, &token).await?;
            let mut rxs: Vec<_> = sessions.iter_mut().map(|(_, rx, _)| rx).collect();
            let (c, r) = push_samples(
                &format!("many-{nonce}"),
                &owner,
                &room,
                (plan.warmup, plan.curve_rounds),
                &mut rxs,
                Some(&mut raw.rx),
                None,
            )
            .await?;
            let after = curve::Meter::read(&server, &token).await?;
            drop(raw);
            let point = curve::point(0, identities.len(), &c, &r, after.since(&before));
            eprintln!(
                "bench: {} identities receiving: p50 {:.1} ms (raw {:.1})",
                identities.len(),
                point.channel.p50,
                point.raw_sync.p50
            );
            let free_rx = &mut sessions[1].1;
            let phase = |stuck: bool| Flooded {
                plan,
                owner: &owner,
                stuck_room: &stuck_room,
                free_room: &free_room,
                label: format!("{}-{nonce}", if stuck { "stuck" } else { "free" }),
            };
            let timeouts_before = curve::notify_timeouts(&server);
            let (without, sent_without, _) = phase(false).run(free_rx, None).await?;
            let timeouts_between = curve::notify_timeouts(&server);
            let stuck = curve::StuckSession::open(&server, server.token(&identities[0].name))
                .await
                .context("the stuck client")?;
            let (with, sent_with, unread) = phase(true).run(free_rx, Some(stuck)).await?;
            let timeouts_after = curve::notify_timeouts(&server);
            eprintln!(
                "bench: stuck client: the other identity's p99 {:.1} ms without it, {:.1} ms with it ({sent_without} and {sent_with} large messages; {unread} bytes unread in the stuck socket)",
                summary(&without).p99,
                summary(&with).p99
            );
            let (without, with) = (summary(&without), summary(&with));
            many_results = Some((
                point,
                mc_bench::StuckClient {
                    samples: plan.stuck_rounds as u64,
                    large_messages: sent_with,
                    large_message_bytes: LARGE_BYTES as u64,
                    notify_timeouts_without: timeouts_between - timeouts_before,
                    notify_timeouts_with: timeouts_after - timeouts_between,
                    unread_bytes: unread,
                    ratio: ratios(&with, &without),
                    without,
                    with,
                },
            ));
        }
    }
    attach_all(&owner, &room, "attached", &mut sessions).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let kib = rss_kib(server.pid().context("serve is running")?)?;
    let sessions_n = sessions.len();
    drop(sessions);
    let (point, stuck) = many_results.context("the per-identity phase ran")?;
    Ok(Many {
        kib,
        identities: identities.len(),
        sessions: sessions_n,
        point,
        stuck,
    })
}

/// The body size of the stuck identity's large messages (the default body cap is
/// 16 KiB, so each push carries all of it).
const LARGE_BYTES: usize = 16 * 1024 - 64;

/// One phase of the stuck-client run: large messages to the stuck identity's room
/// (a few first, then more during the rounds, at most `plan.stuck_flood`) while the
/// other identity's pushes are timed.
struct Flooded<'a> {
    plan: &'a Plan,
    owner: &'a Arc<Human>,
    stuck_room: &'a str,
    free_room: &'a str,
    label: String,
}

impl Flooded<'_> {
    /// The free identity's latencies (ms), how many large messages were sent, and the
    /// bytes left unread in the stuck session's socket at the end; the stuck session
    /// (if any) is held open until the end, then dropped.
    async fn run(
        &self,
        free_rx: &mut UnboundedReceiver<Arrival>,
        stuck: Option<curve::StuckSession>,
    ) -> anyhow::Result<(Vec<f64>, u64, u64)> {
        let big = |k: u64| {
            let head = format!("{}-large-{k} ", self.label);
            let fill = "x".repeat(LARGE_BYTES - head.len());
            format!("{head}{fill}")
        };
        let sent = Arc::new(AtomicU64::new(0));
        for _ in 0..self.plan.stuck_prefill {
            let k = sent.fetch_add(1, Ordering::Relaxed);
            self.owner.send_text(self.stuck_room, &big(k)).await;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flood = {
            let (owner, room, sent, stop) = (
                self.owner.clone(),
                self.stuck_room.to_owned(),
                sent.clone(),
                stop.clone(),
            );
            let max = self.plan.stuck_flood as u64;
            let bodies: Vec<String> = (0..max).map(big).collect();
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let k = sent.load(Ordering::Relaxed);
                    if k >= max {
                        break;
                    }
                    owner.send_text(&room, &bodies[k as usize]).await;
                    sent.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        let result = push_samples(
            &self.label,
            self.owner,
            self.free_room,
            (self.plan.warmup, self.plan.stuck_rounds),
            &mut [free_rx],
            None,
            None,
        )
        .await;
        stop.store(true, Ordering::Relaxed);
        flood.await.context("the flood's sender")?;
        let unread = match &stuck {
            Some(stuck) => stuck.unread_bytes()?,
            None => 0,
        };
        drop(stuck);
        let (ms, _) = result?;
        Ok((ms, sent.load(Ordering::Relaxed), unread))
    }
}

/// Sends messages to `room` until every session not yet marked attached has had one
/// (a session attaches once its GET stream is open, which rmcp does after
/// `initialize`; a push reaches every attached session, and one that attaches later
/// gets no earlier push).
async fn attach_all(
    owner: &Human,
    room: &str,
    label: &str,
    sessions: &mut [(client::Session, UnboundedReceiver<Arrival>, bool)],
) -> anyhow::Result<()> {
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
        let marker = format!("{label}-{round}.");
        owner.send_text(room, &marker).await;
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
    Ok(())
}

/// `warmup + rounds` messages from `sender` in `room`, one at a time, each awaited
/// at every session of `sessions` and at the raw client (when given). Returns the
/// latencies of the `rounds` measured ones (ms): through the sessions (one per
/// message and session) and through the raw client. With `strays`, other pushes
/// meanwhile are kept (copies or strays).
async fn push_samples(
    label: &str,
    sender: &Human,
    room: &str,
    (warmup, rounds): (usize, usize),
    sessions: &mut [&mut UnboundedReceiver<Arrival>],
    mut raw: Option<&mut UnboundedReceiver<raw::Seen>>,
    mut strays: Option<&mut Vec<String>>,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let mut channel_ms = Vec::new();
    let mut raw_ms = Vec::new();
    for i in 0..warmup + rounds {
        // The trailing dot: `push-N-1.` is not part of `push-N-10.`.
        let marker = format!("{label}-{i}.");
        sender.send_text(room, &marker).await;
        let sent = Instant::now();
        for rx in sessions.iter_mut() {
            let ours = wait_channel(rx, strays.as_deref_mut(), |a| {
                a.method == "notifications/claude/channel" && content_has(a, &marker)
            })
            .await
            .with_context(|| format!("the push of {marker}"))?;
            if i >= warmup {
                channel_ms.push(ms_between(sent, ours.at));
            }
        }
        if let Some(raw) = raw.as_deref_mut() {
            let theirs = wait_raw(raw, |s| s.body == marker)
                .await
                .with_context(|| format!("the raw client's {marker}"))?;
            if i >= warmup {
                raw_ms.push(ms_between(sent, theirs.at));
            }
        }
        // The long polls are re-armed before the next send.
        tokio::time::sleep(Duration::from_millis(20 + (i as u64 * 7) % 30)).await;
    }
    Ok((channel_ms, raw_ms))
}

/// Where the server's write calls went per input, by file, over `rounds` unmeasured
/// pushes with strace attached (a tracer slows every system call, so no latency is
/// taken meanwhile). `None` when strace is missing or cannot attach.
async fn written_by_file(
    server: &Server,
    token: &str,
    (label, sender, room): (&str, &Human, &str),
    rounds: usize,
    arrivals: &mut UnboundedReceiver<Arrival>,
) -> anyhow::Result<Option<mc_bench::WrittenByFile>> {
    if mc_bench::trace::JOURNAL_FILE != mc_server::journal::JOURNAL_FILE {
        bail!("mc_bench::trace::JOURNAL_FILE is not the journal's file name");
    }
    let pid = server.pid().context("serve is running")?;
    let Some(traced) = curve::Traced::attach(pid).await else {
        eprintln!(
            "bench: strace is missing or cannot attach: the bytes written are not split by file"
        );
        return Ok(None);
    };
    let before = curve::Meter::read(server, token).await?;
    push_samples(
        label,
        sender,
        room,
        (rounds, 0),
        &mut [arrivals],
        None,
        None,
    )
    .await?;
    let after = curve::Meter::read(server, token).await?;
    let written = traced.detach().await?;
    let by_file = written.per_input(after.inputs().saturating_sub(before.inputs()));
    eprintln!(
        "bench: written per input by file: journal {:.0}, store {:.0}, matrix-sdk stores {:.0}, log {:.0}, other {:.0} bytes",
        by_file.journal, by_file.store, by_file.sdk_stores, by_file.log, by_file.other_files
    );
    Ok(Some(by_file))
}

/// The wall clock in Unix milliseconds (the server's clock for the model).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
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
