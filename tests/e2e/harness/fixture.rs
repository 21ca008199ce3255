//! The common cast of a scenario: the identity `bot` (a fresh Matrix account the server
//! acts as), a human who is its allowed sender and approver, and a stranger in the same
//! room whose display name is the human's (a display name decides nothing). The room
//! is the identity's `permission_room`; the human invites the bot after `serve` is up,
//! and the server joins because an allowed sender invited it.

use super::expect::Origin;
use super::homeserver::{register, Account};
use super::human::Human;
use super::mcp::{Connected, McpClient};
use super::scenario_permit;
use super::server::{Identity, Server, ServerConfig};
use tokio::sync::SemaphorePermit;

/// The identity's name in the config.
pub const IDENTITY: &str = "bot";
/// The human's display name, and the stranger's too.
pub const HUMAN_NAME: &str = "Ada";
/// The settle window of verdicts by reaction in the scenarios.
pub const SETTLE_MS: u64 = 800;

pub struct Fixture {
    pub human: Human,
    pub stranger: Human,
    pub bot: Account,
    pub room: String,
    pub server: Server,
    _permit: SemaphorePermit<'static>,
}

/// A new MCP client connected to `server`'s `/mcp` (every tool) with the identity's
/// token.
pub async fn tools_client(server: &Server, name: &str) -> McpClient {
    let client = McpClient::spawn(name).await;
    client
        .connect(&server.url("/mcp"), server.token(IDENTITY))
        .await;
    client
}

impl Fixture {
    /// Registers the cast, creates the room, starts the server (after `tune` adjusted
    /// its config) and waits until the bot joined the room.
    pub async fn start(tune: impl FnOnce(&mut ServerConfig)) -> Fixture {
        Self::start_knowing(|config, _| tune(config)).await
    }

    /// [`Fixture::start`], with `tune` also given the stranger's user id (to make
    /// them an allowed sender, a second approver).
    pub async fn start_knowing(tune: impl FnOnce(&mut ServerConfig, &str)) -> Fixture {
        let permit = scenario_permit().await;
        let bot = register("bot").await;
        let human = Human::register("human").await;
        let stranger = Human::register("stranger").await;
        human.set_display_name(HUMAN_NAME).await;
        stranger.set_display_name(HUMAN_NAME).await;
        let room = human.create_room(&[&stranger.user_id]).await;
        stranger.join(&room).await;

        let mut identity = Identity::new(IDENTITY, &bot, &[&human.user_id]);
        identity.permission_room = Some(room.clone());
        identity.settle_ms = Some(SETTLE_MS);
        let mut config = ServerConfig {
            identities: vec![identity],
            ..ServerConfig::default()
        };
        tune(&mut config, &stranger.user_id);
        let server = Server::start(config).await;

        human.invite(&room, &bot.user_id).await;
        human.wait_joined(&room, &bot.user_id).await;
        Fixture {
            human,
            stranger,
            bot,
            room,
            server,
            _permit: permit,
        }
    }

    /// A new MCP client connected to `/channel` with the identity's token, its event
    /// stream open.
    pub async fn channel(&self, name: &str) -> (McpClient, Connected) {
        let client = McpClient::spawn(name).await;
        let connected = client
            .connect(&self.server.url("/channel"), self.server.token(IDENTITY))
            .await;
        (client, connected)
    }

    /// The origin of the human's message `event_id` (display name as `user`).
    pub async fn origin(&self, event_id: &str) -> Origin {
        Origin {
            room: self.room.clone(),
            event_id: event_id.to_owned(),
            sender: self.human.user_id.clone(),
            user: HUMAN_NAME.to_owned(),
            ts: self.human.ts(&self.room, event_id).await,
        }
    }

    /// The origin of the human's reaction or redaction `event_id` (MXID as `user`).
    pub async fn bare_origin(&self, event_id: &str) -> Origin {
        Origin {
            user: self.human.user_id.clone(),
            ..self.origin(event_id).await
        }
    }
}

impl Fixture {
    /// A new MCP client connected to `/mcp` (every tool) with the identity's token.
    pub async fn tools(&self, name: &str) -> McpClient {
        tools_client(&self.server, name).await
    }

    /// A new `/channel` session `name` that asks permission request `request_id` (a
    /// `Bash` `ls`); returns it once the prompt is in the room, which holds the id
    /// open.
    pub async fn open_request(&self, name: &str, request_id: &str) -> McpClient {
        let (session, _) = self.channel(name).await;
        session
            .notify(
                super::expect::PERMISSION_REQUEST,
                super::expect::permission_request(
                    request_id,
                    "Bash",
                    "List files",
                    r#"{"command":"ls"}"#,
                ),
            )
            .await;
        self.wait_prompt(request_id).await;
        session
    }
}

impl Fixture {
    /// Waits for the prompt of `request_id`, posted by the identity, as the human's
    /// client sees it (not its outcome edit); returns the event.
    pub async fn wait_prompt(&self, request_id: &str) -> serde_json::Value {
        let bot = self.bot.user_id.clone();
        self.human
            .wait_for_event(&self.room, &format!("the prompt of {request_id}"), |e| {
                e["sender"] == bot.as_str()
                    && e["type"] == "m.room.message"
                    && e["content"]["m.relates_to"]["rel_type"] != "m.replace"
                    && e["content"]["body"]
                        .as_str()
                        .is_some_and(|b| b.contains(request_id))
            })
            .await
    }

    /// Waits for the identity's edit (`m.replace`) of the prompt `prompt_id` and checks
    /// that its new content is exactly `plain` and `html`.
    pub async fn wait_outcome(&self, prompt_id: &str, plain: &str, html: &str) {
        let bot = self.bot.user_id.clone();
        let edit = self
            .human
            .wait_for_event(
                &self.room,
                &format!("the outcome edit of {prompt_id}"),
                |e| {
                    e["sender"] == bot.as_str()
                        && e["content"]["m.relates_to"]["rel_type"] == "m.replace"
                        && e["content"]["m.relates_to"]["event_id"] == prompt_id
                },
            )
            .await;
        let new = &edit["content"]["m.new_content"];
        assert_eq!(new["body"], plain, "the outcome edit's body: {edit}");
        assert_eq!(new["format"], "org.matrix.custom.html", "{edit}");
        assert_eq!(
            new["formatted_body"], html,
            "the outcome edit's HTML: {edit}"
        );
    }

    /// A barrier on the server's sync: the human invites the bot to a fresh room and
    /// waits until it joined; returns that room. The server hands each sync response
    /// to the engine in order (timelines, then invites) and joins only once the engine
    /// handled the invite, so every event the human sent before (in the invite's batch
    /// or an earlier one) has been handled by the engine when the join shows; a
    /// `/health` read through the engine's queue then confirms it caught up. The
    /// server's own room list (`list_rooms`) may still lag its join by the join's
    /// answer: wait for the room there when it matters.
    pub async fn sync_barrier(&self) -> String {
        let room = self.human.create_room(&[&self.bot.user_id]).await;
        self.human.wait_joined(&room, &self.bot.user_id).await;
        self.server.engine_caught_up().await;
        room
    }
}
