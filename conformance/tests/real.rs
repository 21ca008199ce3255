//! Real conformance: generated sequences against the `matrix-channel` binary, a real
//! Synapse (`scripts/homeserver/start`) and the official MCP TypeScript SDK client over
//! HTTP, compared with the model after every action.
//!
//! Wired as the `conformance_real` test of `impl/` (so the binary is built and
//! `CARGO_BIN_EXE_matrix-channel` is set). Every sequence gets a fresh server (a new
//! store) and fresh rooms; the people and the bots' accounts are shared.
//!
//! What a client sees is translated back to the world's symbolic ids (users, rooms,
//! events, and each event's `origin_server_ts`) before the comparison; a prompt's event
//! id is learnt from the prompt the reference predicts with the same content.
//!
//! `MC_CONFORMANCE_REAL_CASES` sets the number of sequences (default 20).

#[path = "../../tests/e2e/harness/mod.rs"]
#[allow(dead_code)]
mod harness;

use harness::homeserver::{register, Account};
use harness::human::Human;
use harness::mcp::McpClient;
use harness::server::{Identity, Server, ServerConfig};
use harness::WAIT;
use mc_conformance::alphabet::Adapter;
use mc_conformance::runner::{check_with, regressions, required_kinds, run_sequence, Target};
use mc_conformance::world::{
    AgentOp, AgentRel, BadRequest, BindAnswer, Change, Ident, Key, Lbl, Mode, Observation, Odd,
    RealMode, Redactor, Rel, Rid, Sel, Sess, Text, ToolAnswer, Who, World, REAL_ATTACH_GRACE,
    REAL_SETTLE, REAL_TTL,
};
use mc_model::{AgentWrite, Channel, EventId, RoomId};
use proptest::test_runner::Config;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long to wait for more after what the model predicts has arrived.
const QUIET: Duration = Duration::from_millis(400);

/// How long an invite the server must refuse is watched for a join (a join on an
/// allowed sender's invite takes about 200 ms here).
const REFUSED: Duration = Duration::from_millis(1500);

fn cases() -> u32 {
    std::env::var("MC_CONFORMANCE_REAL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// The people, registered once per test process. The bots are registered per
/// sequence: a bot account stays joined to its rooms, and a bot shared with another
/// sequence (running at the same time, or before) would receive that sequence's events.
struct People {
    ann: Human,
    carl: Human,
    eve: Human,
}

async fn people() -> &'static People {
    static PEOPLE: tokio::sync::OnceCell<People> = tokio::sync::OnceCell::const_new();
    PEOPLE
        .get_or_init(|| async {
            let ann = Human::register("ann").await;
            let carl = Human::register("carl").await;
            let eve = Human::register("eve").await;
            ann.set_display_name("Ann").await;
            carl.set_display_name("Carl").await;
            eve.set_display_name("Ann").await;
            People { ann, carl, eve }
        })
        .await
}

/// One MCP client per session, and one on `/mcp` per identity for acknowledgements
/// outside a channel session.
struct Client {
    mcp: McpClient,
    session_id: String,
    protocol_version: Option<String>,
}

/// The server under test, for one sequence.
struct Real {
    people: &'static People,
    bot_a: Account,
    bot_b: Account,
    server: Server,
    sessions: BTreeMap<Sess, Client>,
    tools: BTreeMap<Ident, McpClient>,
    /// Symbolic → real, and back, for every id the world names.
    to_real: BTreeMap<String, String>,
    to_sym: BTreeMap<String, String>,
    /// Real event id → (real ts, symbolic ts).
    ts: BTreeMap<String, (u64, u64)>,
    /// Ann's sync position: the identities' sends are read from it.
    since: String,
    /// Tool answers seen since the last step.
    answers: Vec<Observation>,
    /// Sessions whose client is connected (attached, not closed since).
    open: std::collections::BTreeSet<Sess>,
}

impl Real {
    async fn start() -> Real {
        let people = people().await;
        let (bot_a, bot_b) = (register("bot-a").await, register("bot-b").await);
        let (ann, carl, eve) = (&people.ann, &people.carl, &people.eve);
        let a0 = ann.create_room(&[&carl.user_id, &eve.user_id]).await;
        let a1 = ann.create_room(&[&carl.user_id, &eve.user_id]).await;
        let b0 = ann.create_room(&[&eve.user_id]).await;
        for room in [&a0, &a1] {
            carl.join(room).await;
            eve.join(room).await;
        }
        eve.join(&b0).await;

        let settings = |mut id: Identity| {
            id.approvers = Some(vec![ann.user_id.clone()]);
            id.prompt_ttl_secs = Some(REAL_TTL / 1000);
            id.settle_ms = Some(REAL_SETTLE);
            id.attach_grace_ms = Some(REAL_ATTACH_GRACE);
            id.replay_budget = Some(3);
            id
        };
        let a = settings(Identity::new("a", &bot_a, &[&ann.user_id, &carl.user_id]));
        let mut b = settings(Identity::new("b", &bot_b, &[&ann.user_id]));
        b.permission_room = Some(b0.clone());
        b.extra = Some(mc_conformance::world::B_POLICY_TOML.to_owned());
        let server = Server::start(ServerConfig {
            identities: vec![a, b],
            ..ServerConfig::default()
        })
        .await;
        for room in [&a0, &a1] {
            ann.invite(room, &bot_a.user_id).await;
        }
        ann.invite(&b0, &bot_b.user_id).await;
        for room in [&a0, &a1] {
            ann.wait_joined(room, &bot_a.user_id).await;
        }
        ann.wait_joined(&b0, &bot_b.user_id).await;
        // The homeserver has the joins; the engine may not have them yet, and an
        // operator's `bind` (which does not wait behind the sync) would find the
        // identity in no room. Its journal takes each join before the model acts on
        // it, and a later input queues behind it.
        for (identity, bot, room) in [("a", &bot_a, &a0), ("a", &bot_a, &a1), ("b", &bot_b, &b0)] {
            server
                .wait_journaled(&format!("{identity}'s join of {room}"), |input| {
                    input["type"] == "membership"
                        && input["identity"] == identity
                        && input["room"] == room.as_str()
                        && input["user"] == bot.user_id.as_str()
                        && input["membership"]["membership"] == "joined"
                })
                .await;
        }
        let since = ann.sync(None, 0, None).await["next_batch"]
            .as_str()
            .expect("next_batch")
            .to_owned();

        let mut real = Real {
            people,
            bot_a: bot_a.clone(),
            bot_b: bot_b.clone(),
            server,
            sessions: BTreeMap::new(),
            tools: BTreeMap::new(),
            to_real: BTreeMap::new(),
            to_sym: BTreeMap::new(),
            ts: BTreeMap::new(),
            since,
            answers: Vec::new(),
            open: Default::default(),
        };
        for (sym, id) in [
            (Who::Ann.user_id(Ident::A).0, ann.user_id.clone()),
            (Who::Carl.user_id(Ident::A).0, carl.user_id.clone()),
            (Who::Eve.user_id(Ident::A).0, eve.user_id.clone()),
            (Who::Bot.user_id(Ident::A).0, bot_a.user_id.clone()),
            (Who::Bot.user_id(Ident::B).0, bot_b.user_id.clone()),
            (Ident::A.room(0).0, a0),
            (Ident::A.room(1).0, a1),
            (Ident::B.room(0).0, b0),
        ] {
            real.map(&sym, &id);
        }
        real
    }

    fn map(&mut self, sym: &str, real: &str) {
        self.to_real.insert(sym.to_owned(), real.to_owned());
        self.to_sym.insert(real.to_owned(), sym.to_owned());
    }

    /// Opens the session's stream: a new MCP session on `/channel` (with
    /// `?room=<label>` when labelled), or the known one resumed (its label is the
    /// server's, kept with the session).
    fn connect(&mut self, session: &Sess, label: Option<Lbl>) -> Result<(), String> {
        self.open.insert(*session);
        let url = match label {
            Some(label) => self
                .server
                .url(&format!("/channel?room={}", label.as_str())),
            None => self.server.url("/channel"),
        };
        let token = self.server.token(&session.ident().id().0).to_owned();
        runtime().block_on(async {
            match self.sessions.get(session) {
                Some(c) => c
                    .mcp
                    .resume(
                        &url,
                        &token,
                        &c.session_id,
                        c.protocol_version.as_deref(),
                        None,
                    )
                    .await
                    .map_err(|e| format!("resume {session:?}: {e}")),
                None => {
                    let mcp = McpClient::spawn(&format!("{session:?}")).await;
                    let connected = mcp.connect(&url, &token).await;
                    // A prompt names who asks by the first characters of its MCP
                    // session id (`prompt_text::Asker`): the server's id is not the
                    // world's.
                    let shown = |id: &str| {
                        let short: String = id
                            .chars()
                            .take(mc_model::prompt_text::SESSION_CHARS)
                            .collect();
                        format!("session {short}")
                    };
                    self.to_sym
                        .insert(shown(&connected.session_id), shown(session.id().as_str()));
                    self.sessions.insert(
                        *session,
                        Client {
                            mcp,
                            session_id: connected.session_id,
                            protocol_version: connected.protocol_version,
                        },
                    );
                    Ok(())
                }
            }
        })
    }

    fn human(&self, who: Who) -> Result<&Human, String> {
        match who {
            Who::Ann => Ok(&self.people.ann),
            Who::Carl => Ok(&self.people.carl),
            Who::Eve => Ok(&self.people.eve),
            Who::Bot => Err("the real target does not send as the bot".to_owned()),
        }
    }

    fn real_id(&self, sym: &str) -> Result<String, String> {
        self.to_real
            .get(sym)
            .cloned()
            .ok_or_else(|| format!("no real id for {sym}"))
    }

    /// Sends the world's latest event as its sender and learns its real id and ts.
    fn send_latest(&mut self, world: &World) -> Result<(), String> {
        let ev = world.events.last().ok_or("no event")?.clone();
        let room = self.real_id(&ev.room.0)?;
        let human = self.human(ev.sender)?;
        let content = translate(&ev.content, &self.to_real);
        let id = runtime().block_on(async {
            let id = if ev.event_type == Odd::Topic.event_type() {
                let path = format!(
                    "/_matrix/client/v3/rooms/{}/state/{}/",
                    link_encoded(&room),
                    ev.event_type
                );
                human
                    .call(reqwest::Method::PUT, &path, Some(&content))
                    .await["event_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            } else if ev.event_type == "m.room.redaction" {
                let target = content["redacts"].as_str().unwrap_or_default().to_owned();
                human.redact(&room, &target, None).await
            } else {
                human.send(&room, ev.event_type, &content).await
            };
            let ts = human.ts(&room, &id).await;
            (id, ts)
        });
        let (id, ts) = id;
        self.map(&ev.id.0, &id);
        self.ts.insert(id, (ts, ev.ts.0));
        Ok(())
    }

    /// The identity's MCP client on `/mcp` (connected on first use).
    async fn tools_client(&mut self, ident: Ident) -> Result<&McpClient, String> {
        if !self.tools.contains_key(&ident) {
            let url = self.server.url("/mcp");
            let token = self.server.token(&ident.id().0).to_owned();
            let mcp = McpClient::spawn(&format!("tools-{ident:?}")).await;
            mcp.connect_raw(&url, Some(&token))
                .await
                .map_err(|e| e.to_string())?;
            self.tools.insert(ident, mcp);
        }
        Ok(&self.tools[&ident])
    }

    fn client(&self, session: Sess) -> Result<&Client, String> {
        self.sessions
            .get(&session)
            .ok_or_else(|| format!("{session:?} never attached"))
    }

    /// Translates a notification to the world's ids; `meta.ts` of a known event
    /// becomes its symbolic ts when it matches the real one.
    fn symbolic_params(&self, params: &Value) -> Value {
        let mut out = translate(params, &self.to_sym);
        if let (Some(event), Some(ts)) = (
            params.pointer("/meta/event_id").and_then(Value::as_str),
            params.pointer("/meta/ts").and_then(Value::as_str),
        ) {
            if let Some((real, sym)) = self.ts.get(event) {
                if ts == real.to_string() {
                    out["meta"]["ts"] = json!(sym.to_string());
                }
            }
        }
        out
    }
}

/// An id as a `matrix.to` link carries it (`mc_model`'s `matrix_to`): every byte
/// but unreserved characters and `!` percent-encoded.
fn link_encoded(id: &str) -> String {
    let mut out = String::new();
    for b in id.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'!' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn link_decoded(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], segment.get(i + 1..i + 3)) {
            (b'%', Some(hex)) if u8::from_str_radix(hex, 16).is_ok() => {
                out.push(u8::from_str_radix(hex, 16).unwrap_or_default());
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `s` with the room and event of every `https://matrix.to/#/<room>/<event>` link
/// (as notices link to a prompt) mapped through `map`, encoded again; a `.` right
/// after a link ends the sentence, not the id.
fn translate_links(s: &str, map: &BTreeMap<String, String>) -> String {
    const LINK: &str = "https://matrix.to/#/";
    let link_char = |c: char| c.is_ascii_alphanumeric() || "-._~!%".contains(c);
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find(LINK) {
        out.push_str(&rest[..at + LINK.len()]);
        rest = &rest[at + LINK.len()..];
        for first in [true, false] {
            let mut end = rest.find(|c: char| !link_char(c)).unwrap_or(rest.len());
            // A link that ends a sentence is followed by its full stop (as linkifiers
            // read it: ids end in no `.`).
            while rest[..end].ends_with('.') {
                end -= 1;
            }
            let id = link_decoded(&rest[..end]);
            out.push_str(
                &map.get(&id)
                    .map_or_else(|| rest[..end].to_owned(), |m| link_encoded(m)),
            );
            rest = &rest[end..];
            if !(first && rest.starts_with('/')) {
                break;
            }
            out.push('/');
            rest = &rest[1..];
        }
    }
    out.push_str(rest);
    out
}

/// Replaces every occurrence of a key of `map` in every string of `value`, longest
/// keys first.
fn translate(value: &Value, map: &BTreeMap<String, String>) -> Value {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort_by_key(|k| std::cmp::Reverse(k.len()));
    fn walk(v: &Value, keys: &[&String], map: &BTreeMap<String, String>) -> Value {
        match v {
            Value::String(s) => {
                let mut s = translate_links(s, map);
                for k in keys {
                    if s.contains(k.as_str()) {
                        s = s.replace(k.as_str(), &map[*k]);
                    }
                }
                Value::String(s)
            }
            Value::Array(a) => Value::Array(a.iter().map(|x| walk(x, keys, map)).collect()),
            Value::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, x)| (k.clone(), walk(x, keys, map)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    walk(value, &keys, map)
}

impl Adapter for Real {
    fn attach(&mut self, _: &World, session: &Sess) -> Result<(), String> {
        self.connect(session, None)
    }

    fn attach_labelled(&mut self, _: &World, session: &Sess, label: &Lbl) -> Result<(), String> {
        self.connect(session, Some(*label))
    }

    /// The operator runs `matrix-channel bind` against the running server; its
    /// output (one `label -> room` line per change) is the answer seen.
    fn bind(
        &mut self,
        _: &World,
        ident: &Ident,
        label: &Lbl,
        room: &Option<u8>,
    ) -> Result<(), String> {
        let mut cmd = self.server.command();
        cmd.args(["bind", "--identity", &ident.id().0, label.as_str()]);
        match room {
            Some(n) => cmd.arg(self.real_id(&ident.room(*n).0)?),
            None => cmd.arg("--unbind"),
        };
        let out = runtime()
            .block_on(async { cmd.output().await })
            .map_err(|e| format!("running bind: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let answer = if out.status.success() {
            let changes = stdout
                .lines()
                .map(|line| {
                    let (label, room) = line
                        .split_once(" -> ")
                        .ok_or_else(|| format!("bind printed {line:?}"))?;
                    let room = match room.trim() {
                        "(unbound)" => None,
                        real => {
                            Some(RoomId(self.to_sym.get(real).cloned().ok_or_else(|| {
                                format!("bind named an unknown room {real}")
                            })?))
                        }
                    };
                    Ok((label.trim().to_owned(), room))
                })
                .collect::<Result<Vec<_>, String>>()?;
            BindAnswer::Bound(changes)
        } else if stderr.contains("not joined") {
            BindAnswer::NotJoined
        } else {
            return Err(format!("bind failed ({}): {stderr}", out.status));
        };
        self.answers.push(Observation::Bind {
            ident: *ident,
            answer,
        });
        Ok(())
    }

    /// The operator runs `matrix-channel revoke`: the grants its output names
    /// (`revoked grant N` lines) are seen; its refusal of a grant that is none
    /// (`no grant`), as none.
    fn revoke(&mut self, _: &World, ident: &Ident, grant: &Option<u8>) -> Result<(), String> {
        let mut cmd = self.server.command();
        cmd.args(["revoke", "--identity", &ident.id().0]);
        match grant {
            Some(n) => cmd.arg(n.to_string()),
            None => cmd.arg("--all"),
        };
        let out = runtime()
            .block_on(async { cmd.output().await })
            .map_err(|e| format!("running revoke: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let revoked = if out.status.success() {
            stdout
                .lines()
                .map(|line| {
                    line.strip_prefix("revoked grant ")
                        .and_then(|n| n.trim().parse().ok())
                        .ok_or_else(|| format!("revoke printed {line:?}"))
                })
                .collect::<Result<Vec<u64>, String>>()?
        } else if stderr.contains("has no grant") {
            Vec::new()
        } else {
            return Err(format!("revoke failed ({}): {stderr}", out.status));
        };
        self.answers.push(Observation::Revoked {
            ident: *ident,
            revoked,
        });
        Ok(())
    }

    fn detach(&mut self, _: &World, session: &Sess) -> Result<(), String> {
        self.open.remove(session);
        let client = self.client(*session)?;
        runtime().block_on(async {
            client.mcp.close().await;
            // The server sees the stream end asynchronously; a push in between would go
            // to a closed stream. There is no signal to wait for.
            tokio::time::sleep(QUIET).await;
        });
        Ok(())
    }

    fn message(
        &mut self,
        world: &World,
        _: &Ident,
        _: &Who,
        _: &u8,
        _: &Text,
        _: &Rel,
    ) -> Result<(), String> {
        self.send_latest(world)
    }

    fn reaction(&mut self, world: &World, _: &Who, _: &Sel, _: &Key) -> Result<(), String> {
        self.send_latest(world)
    }

    fn redaction(&mut self, world: &World, _: &Redactor, _: &usize) -> Result<(), String> {
        self.send_latest(world)
    }

    fn permission_request(&mut self, _: &World, session: &Sess, rid: &Rid) -> Result<(), String> {
        let client = self.client(*session)?;
        runtime().block_on(client.mcp.notify(
            "notifications/claude/channel/permission_request",
            rid.params(),
        ));
        Ok(())
    }

    fn acknowledge(
        &mut self,
        world: &World,
        ident: &Ident,
        session: &Option<Sess>,
        target: &usize,
    ) -> Result<(), String> {
        let t = world
            .ack_sel(*ident, *target)
            .ok_or("no message to acknowledge")?;
        let ev = &world.events[t];
        let args =
            json!({"event_id": self.real_id(&ev.id.0)?, "room_id": self.real_id(&ev.room.0)?});
        runtime()
            .block_on(async {
                let client = match session {
                    Some(s) => &self.client(*s)?.mcp,
                    None => self.tools_client(*ident).await?,
                };
                client
                    .call("acknowledge", args)
                    .await
                    .map_err(|e| e.to_string())
            })
            .and_then(|result| {
                if result["isError"] == true {
                    return Err(format!("acknowledge failed: {result}"));
                }
                let acknowledged = result["structuredContent"]["acknowledged"]
                    .as_bool()
                    .ok_or_else(|| {
                        format!("acknowledge answered without `acknowledged`: {result}")
                    })?;
                self.answers.push(Observation::Acknowledged {
                    ident: *ident,
                    event_id: ev.id.clone(),
                    acknowledged,
                });
                Ok(())
            })
    }

    fn invalid_permission_request(
        &mut self,
        _: &World,
        session: &Sess,
        bad: &BadRequest,
    ) -> Result<(), String> {
        let client = self.client(*session)?;
        runtime().block_on(client.mcp.notify(
            "notifications/claude/channel/permission_request",
            bad.params(),
        ));
        Ok(())
    }

    /// Calls the write tool on the identity's `/mcp` mount with the arguments an
    /// agent gives it (the targets the reference resolved before the action), and
    /// learns the real ids of the events it answers with.
    fn agent_write(&mut self, world: &World, _: &Ident, op: &AgentOp) -> Result<(), String> {
        let (ident, write) = world.last_write.clone().ok_or("no agent write")?;
        let sym = |id: &EventId| self.real_id(&id.0);
        let (tool, args) = match (&write, *op) {
            (
                AgentWrite::Message {
                    room,
                    reply_to,
                    thread_root,
                    ..
                },
                AgentOp::Send { say, rel, .. },
            ) => {
                let mut args = json!({"room_id": self.real_id(&room.0)?, "text": say.markdown()});
                // A reply names only its target: the tool finds the thread itself.
                match rel {
                    AgentRel::None => {}
                    AgentRel::Reply { .. } => {
                        args["reply_to"] = json!(sym(reply_to.as_ref().ok_or("no reply_to")?)?)
                    }
                    AgentRel::Thread { .. } => {
                        args["thread_root"] =
                            json!(sym(thread_root.as_ref().ok_or("no thread_root")?)?);
                        if let Some(to) = reply_to {
                            args["reply_to"] = json!(sym(to)?);
                        }
                    }
                }
                ("send_message", args)
            }
            (AgentWrite::Edit { room, original, .. }, AgentOp::Edit { say, .. }) => (
                "edit_message",
                json!({"room_id": self.real_id(&room.0)?, "event_id": sym(original)?,
                    "text": say.markdown()}),
            ),
            (
                AgentWrite::Reaction {
                    room,
                    relates_to,
                    key,
                },
                _,
            ) => (
                "send_reaction",
                json!({"room_id": self.real_id(&room.0)?, "event_id": sym(relates_to)?,
                    "key": key}),
            ),
            (
                AgentWrite::Redaction {
                    room,
                    redacts,
                    reason,
                },
                _,
            ) => {
                let mut args =
                    json!({"room_id": self.real_id(&room.0)?, "event_id": sym(redacts)?});
                if let Some(reason) = reason {
                    args["reason"] = json!(reason);
                }
                ("redact", args)
            }
            (other, _) => return Err(format!("no tool for {other:?} from {op:?}")),
        };
        let result = runtime()
            .block_on(async {
                let client = self.tools_client(ident).await?;
                client
                    .call(tool, args.clone())
                    .await
                    .map_err(|e| e.to_string())
            })
            .map_err(|e| format!("{tool} {args}: {e}"))?;
        let structured = &result["structuredContent"];
        let answer = if result["isError"] == true {
            ToolAnswer::Error {
                kind: structured
                    .pointer("/error/kind")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("{tool} failed without an error kind: {result}"))?
                    .to_owned(),
            }
        } else {
            let ids: Vec<String> = match structured.get("event_ids") {
                Some(ids) => ids
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|i| i.as_str().map(str::to_owned))
                    .collect(),
                None => structured["event_id"]
                    .as_str()
                    .map(str::to_owned)
                    .into_iter()
                    .collect(),
            };
            // The n-th event the tool sent is the n-th the reference predicts.
            let mut event_ids = Vec::new();
            for (i, id) in ids.into_iter().enumerate() {
                match world.wrote.get(i) {
                    Some(sym) => {
                        self.map(&sym.0, &id);
                        event_ids.push(sym.clone());
                    }
                    None => event_ids.push(EventId(id)),
                }
            }
            ToolAnswer::Sent { event_ids }
        };
        self.answers.push(Observation::Wrote { ident, answer });
        Ok(())
    }

    /// SIGKILL, and `serve` again on the same store and address. The clients of
    /// live sessions see their streams end and are closed (Claude Code would
    /// reconnect; here a later attach resumes the session); the `/mcp` clients
    /// connect again on their next call.
    fn restart(
        &mut self,
        _: &World,
        request: &Option<(Sess, Rid)>,
        _: &bool,
    ) -> Result<(), String> {
        if request.is_some() {
            return Err("a kill inside a request is in-process only (conformance/skip.txt)".into());
        }
        let open = std::mem::take(&mut self.open);
        let tools = std::mem::take(&mut self.tools);
        runtime().block_on(async {
            self.server.kill9().await;
            for s in &open {
                if let Some(c) = self.sessions.get(s) {
                    c.mcp.close().await;
                }
            }
            for (_, t) in tools {
                t.close().await;
            }
            self.server.restart().await;
        });
        Ok(())
    }

    fn redeliver(&mut self, _: &World, _: &usize) -> Result<(), String> {
        Err("redeliver is in-process only (conformance/skip.txt)".to_owned())
    }

    /// A leave is the bot's own (its account's token, not the server's device: a
    /// leave the server did not ask for). An invite is the inviter's; the server joins
    /// on it or not, which Synapse's membership of the bot shows: polled until it
    /// joins (`WAIT` when the reference predicts the join, `REFUSED` when not).
    fn membership(
        &mut self,
        world: &World,
        ident: &Ident,
        room: &u8,
        change: &Change,
    ) -> Result<(), String> {
        let sym = ident.room(*room);
        let real_room = self.real_id(&sym.0)?;
        let bot = match ident {
            Ident::A => self.bot_a.clone(),
            Ident::B => self.bot_b.clone(),
        };
        let path = |what: &str| {
            format!(
                "/_matrix/client/v3/rooms/{}/{what}",
                harness::human::enc(&real_room)
            )
        };
        // The bot's membership in the room as the engine journals it: an operator's
        // `bind` next does not wait behind the sync, so a change the homeserver
        // already has is waited for until the engine has it too.
        let ident_name = ident.id().0;
        let bot_membership = |membership: &'static str| {
            let (ident_name, room, user) =
                (ident_name.clone(), real_room.clone(), bot.user_id.clone());
            move |input: &serde_json::Value| {
                input["type"] == "membership"
                    && input["identity"] == ident_name.as_str()
                    && input["room"] == room.as_str()
                    && input["user"] == user.as_str()
                    && input["event_id"].is_string()
                    && input["membership"]["membership"] == membership
            }
        };
        match change {
            Change::Leave => {
                let left = bot_membership("left");
                let before = self.server.journaled_count(&left);
                runtime().block_on(async {
                    Human::from_account(bot.clone())
                        .await
                        .call(reqwest::Method::POST, &path("leave"), Some(&json!({})))
                        .await;
                    self.server
                        .wait_journaled_more("the bot's leave", before, left)
                        .await;
                })
            }
            Change::Invite { by } => {
                let inviter = self.human(*by)?;
                let predicted = world.expected.iter().any(
                    |o| matches!(o, Observation::Joined { ident: i, room: r } if i == ident && *r == sym),
                );
                let member = path(&format!(
                    "state/m.room.member/{}",
                    harness::human::enc(&bot.user_id)
                ));
                let join = bot_membership("joined");
                let before = self.server.journaled_count(&join);
                let joined = runtime().block_on(async {
                    inviter.invite(&real_room, &bot.user_id).await;
                    let deadline = Instant::now() + if predicted { WAIT } else { REFUSED };
                    loop {
                        let state = inviter.request(reqwest::Method::GET, &member, None).await;
                        if state.is_ok_and(|s| s["membership"] == "join") {
                            return true;
                        }
                        if Instant::now() > deadline {
                            return false;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                });
                if joined {
                    runtime().block_on(self.server.wait_journaled_more(
                        "the bot's join",
                        before,
                        join,
                    ));
                    self.answers.push(Observation::Joined {
                        ident: *ident,
                        room: sym,
                    });
                }
            }
        }
        Ok(())
    }

    /// A custom event type is sent as any message-like event; a topic with a state
    /// PUT.
    fn unhandled(
        &mut self,
        world: &World,
        _: &Ident,
        _: &Who,
        _: &u8,
        _: &Odd,
    ) -> Result<(), String> {
        self.send_latest(world)
    }

    fn undecryptable(&mut self, _: &World, _: &Ident, _: &Who, _: &u8) -> Result<(), String> {
        Err("undecryptable is in-process only (conformance/skip.txt)".to_owned())
    }

    fn decrypt(&mut self, _: &World, _: &usize, _: &Text) -> Result<(), String> {
        Err("decrypt is in-process only (conformance/skip.txt)".to_owned())
    }

    fn gap_cut(&mut self, _: &World, _: &Ident, _: &u8) -> Result<(), String> {
        Err("gap_cut is in-process only (conformance/skip.txt)".to_owned())
    }

    fn break_stream(&mut self, _: &World, _: &Sess) -> Result<(), String> {
        Err("break_stream is in-process only (conformance/skip.txt)".to_owned())
    }

    fn tick(&mut self, _: &World, _: &u64) -> Result<(), String> {
        Err("tick is in-process only (conformance/skip.txt)".to_owned())
    }
}

impl Target for Real {
    fn observed(&mut self, expected: &[Observation]) -> Vec<Observation> {
        let mut want: BTreeMap<Sess, usize> = BTreeMap::new();
        let mut sends = 0;
        for o in expected {
            match o {
                Observation::Notification { session, .. } => {
                    *want.entry(*session).or_default() += 1
                }
                Observation::Sent { .. } => sends += 1,
                Observation::Acknowledged { .. }
                | Observation::Wrote { .. }
                | Observation::Joined { .. }
                | Observation::Bind { .. }
                | Observation::Revoked { .. } => {}
            }
        }
        let deadline = Instant::now() + WAIT;
        let mut observed = std::mem::take(&mut self.answers);
        let bots = [self.bot_a.user_id.clone(), self.bot_b.user_id.clone()];
        runtime().block_on(async {
            // What the model predicts, then anything more within QUIET.
            let mut notes: Vec<(Sess, harness::mcp::Notification)> = Vec::new();
            for (session, client) in &self.sessions {
                let n = want.get(session).copied().unwrap_or(0);
                for _ in 0..n {
                    let wait = deadline.saturating_duration_since(Instant::now());
                    match client.mcp.try_next_notification(wait).await {
                        Some(note) => notes.push((*session, note)),
                        None => break,
                    }
                }
            }
            let mut got = Vec::new();
            let mut quiet = false;
            loop {
                let wait = if got.len() < sends {
                    deadline.saturating_duration_since(Instant::now())
                } else if !quiet {
                    quiet = true;
                    tokio::time::sleep(QUIET).await;
                    Duration::ZERO
                } else {
                    break;
                };
                if wait.is_zero() && got.len() < sends {
                    break;
                }
                let response = self
                    .people
                    .ann
                    .sync(Some(&self.since), wait.as_millis() as u64, None)
                    .await;
                self.since = response["next_batch"]
                    .as_str()
                    .unwrap_or(&self.since)
                    .to_owned();
                if let Some(rooms) = response.pointer("/rooms/join").and_then(Value::as_object) {
                    // Only this sequence's rooms: earlier servers' late sends are not ours.
                    for (room, r) in rooms
                        .iter()
                        .filter(|(room, _)| self.to_sym.contains_key(*room))
                    {
                        for ev in r
                            .pointer("/timeline/events")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                        {
                            let sender = ev["sender"].as_str().unwrap_or_default();
                            let sent_type = ["m.room.message", "m.reaction", "m.room.redaction"]
                                .iter()
                                .any(|t| ev["type"] == *t);
                            if sent_type && bots.iter().any(|b| b == sender) {
                                got.push((room.clone(), sender.to_owned(), ev.clone()));
                            }
                        }
                    }
                }
            }
            // After the quiet period: anything more that arrived.
            for (session, client) in &self.sessions {
                while let Some(note) = client.mcp.try_next_notification(Duration::ZERO).await {
                    notes.push((*session, note));
                }
            }
            for (session, note) in notes {
                observed.push(Observation::Notification {
                    session,
                    method: note.method.clone(),
                    params: self.symbolic_params(&note.wire_params()),
                });
            }
            // Prompts first, so that edits of a prompt posted in the same step translate.
            got.sort_by_key(|(_, _, ev)| ev.pointer("/content/m.relates_to").is_some());
            for (room, sender, ev) in got {
                let ident = if sender == self.bot_a.user_id {
                    Ident::A
                } else {
                    Ident::B
                };
                let mut raw = ev["content"].clone();
                if ev["type"] == "m.room.redaction" && raw.get("redacts").is_none() {
                    // Before room version 11, `redacts` is a top-level key only.
                    raw["redacts"] = ev["redacts"].clone();
                }
                let content = translate(
                    &mc_conformance::world::normalize_content(&raw),
                    &self.to_sym,
                );
                let room = RoomId(self.to_sym.get(&room).cloned().unwrap_or(room));
                let real_id = ev["event_id"].as_str().unwrap_or_default().to_owned();
                // A prompt's id is the one of the predicted prompt with this content.
                let prompt = expected.iter().find_map(|o| match o {
                    Observation::Sent {
                        event_id: Some(id),
                        content: c,
                        room: r,
                        ..
                    } if *c == content && *r == room => Some(id.clone()),
                    _ => None,
                });
                if let Some(id) = &prompt {
                    self.map(&id.0, &real_id);
                }
                observed.push(Observation::Sent {
                    ident,
                    room,
                    event_type: ev["type"].as_str().unwrap_or_default().to_owned(),
                    // A prompt's or an agent's write (the tool answered with its id);
                    // an unknown event without a relation shows its real id, but for
                    // the identity's own notices (a rule's line replies to nothing).
                    event_id: prompt
                        .or_else(|| self.to_sym.get(&real_id).map(|s| EventId(s.clone())))
                        .or_else(|| {
                            (ev.pointer("/content/m.relates_to").is_none()
                                && ev["content"]["msgtype"] != "m.notice")
                                .then_some(EventId(real_id))
                        }),
                    content,
                });
            }
        });
        observed
    }

    fn state(&mut self) -> Option<Channel> {
        None
    }
}

fn config() -> Config {
    Config {
        cases: cases(),
        // A real sequence takes seconds: shrink for at most five minutes.
        max_shrink_iters: 256,
        max_shrink_time: 300_000,
        ..Config::default()
    }
}

/// The two tests take turns: each runs a server and several clients, and the settle
/// windows and quiet periods should not starve on two cores.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn generated_sequences_conform_on_the_real_server() {
    let _turn = one_at_a_time();
    let coverage =
        check_with::<RealMode, _>(config(), 8..=16, || runtime().block_on(Real::start()));
    eprintln!("{coverage:#?}");
    // Every action the skip list does not exclude for the real target is generated.
    for kind in required_kinds(Mode::Real) {
        assert!(
            coverage.actions.get(kind.name()).copied().unwrap_or(0) > 0,
            "no {} action was generated",
            kind.name()
        );
    }
    assert!(
        coverage.observations.values().sum::<usize>() > 0,
        "nothing was observed"
    );
}

#[test]
fn saved_regressions_conform_on_the_real_server() {
    let _turn = one_at_a_time();
    for (path, regression) in regressions(Mode::Real) {
        let mut target = runtime().block_on(Real::start());
        if let Err(report) = run_sequence(Mode::Real, &regression.actions, &mut target, None) {
            panic!("{}:\n{report}", path.display());
        }
    }
}

#[test]
fn a_link_ending_a_sentence_translates_without_its_full_stop() {
    let map: BTreeMap<String, String> = [
        ("!r:x.org".to_owned(), "!a1:hs".to_owned()),
        ("$e-1_x".to_owned(), "$mc-prompt-2".to_owned()),
    ]
    .into();
    assert_eq!(
        translate_links(
            "waits in another room: https://matrix.to/#/!r%3Ax.org/%24e-1_x. Answer it there.",
            &map
        ),
        "waits in another room: https://matrix.to/#/!a1%3Ahs/%24mc-prompt-2. Answer it there."
    );
    assert_eq!(
        translate_links("is https://matrix.to/#/!r%3Ax.org/%24e-1_x: reply", &map),
        "is https://matrix.to/#/!a1%3Ahs/%24mc-prompt-2: reply"
    );
}
