//! A fleet from one phone (issue 26) with Claude Code itself: two sessions of one
//! identity, each set up in its own project with its `claude mcp add` line of
//! docs/sessions.md (`?room=web-app`, `?room=api`). The person binds a room to each
//! (`bind <label>`, typed there), then: a message in web-app's room reaches only
//! web-app's model; api's Bash prompt is posted in api's room and names `api`, and
//! `yes <id>` there lets it run while web-app's model sees nothing of it; while api's
//! session works, the person's client sees the bot typing in api's room.

use crate::harness::claude::{sessions_add_lines, Claude, NEWEST};
use crate::harness::expect::asker;
use crate::harness::fake_model::{is_main, last_user, text_of, tool_results, FakeModel, Reply};
use crate::harness::fixture::{Fixture, IDENTITY};
use crate::harness::{random_suffix, WAIT};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Types `bind <label>` in `room` and waits for the bot's notice that says so.
async fn bind(f: &Fixture, room: &str, label: &str) {
    let command = f.human.send_text(room, &format!("bind {label}")).await;
    f.human
        .wait_for_event(room, &format!("the notice of bind {label}"), |e| {
            e["content"]["m.relates_to"]["m.in_reply_to"]["event_id"] == command.as_str()
                && e["content"]["body"]
                    .as_str()
                    .is_some_and(|b| b.contains(&format!("now the room of {label}")))
        })
        .await;
}

/// Whether any request the model got so far mentions `needle` in its last user turn.
fn model_saw(model: &FakeModel, needle: &str) -> bool {
    model
        .recorded()
        .iter()
        .any(|r| text_of(last_user(&r.body)).contains(needle))
}

/// Waits until the person's `/sync` shows the bot typing in `room` (`m.typing`, an
/// ephemeral event).
async fn wait_typing(f: &Fixture, room: &str) {
    let filter = json!({
        "room": {
            "rooms": [room],
            "timeline": { "limit": 0 },
            "state": { "not_types": ["*"] },
            "account_data": { "not_types": ["*"] },
        },
        "presence": { "not_types": ["*"] },
        "account_data": { "not_types": ["*"] },
    });
    let bot = f.bot.user_id.clone();
    let start = Instant::now();
    let mut since: Option<String> = None;
    loop {
        let left = WAIT.saturating_sub(start.elapsed());
        assert!(
            !left.is_zero(),
            "the bot shows no typing in {room} within {WAIT:?}"
        );
        let timeout = if since.is_none() {
            0
        } else {
            left.as_millis().min(5_000) as u64
        };
        let resp: Value = f.human.sync(since.as_deref(), timeout, Some(&filter)).await;
        let typing = resp["rooms"]["join"][room]["ephemeral"]["events"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| {
                e["type"] == "m.typing"
                    && e["content"]["user_ids"]
                        .as_array()
                        .is_some_and(|ids| ids.iter().any(|id| id == bot.as_str()))
            });
        if typing {
            return;
        }
        since = resp["next_batch"].as_str().map(str::to_owned);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newest_two_sessions_each_in_their_room_get_their_messages_and_prompts_only() {
    // No permission_room: each prompt goes to its session's room.
    let f = Fixture::start(|c| c.identities[0].permission_room = None).await;
    let lines = sessions_add_lines();
    let label_of = |line: &str| {
        line.split_once("?room=")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(label, _)| label.to_owned())
            .expect("a labelled line")
    };
    let (web_label, api_label) = (label_of(&lines[0]), label_of(&lines[1]));
    let web_model = FakeModel::start().await;
    let api_model = FakeModel::start().await;
    let _web = Claude::start_with(NEWEST, &f.server, IDENTITY, &web_model, &lines[0]).await;
    let api = Claude::start_with(NEWEST, &f.server, IDENTITY, &api_model, &lines[1]).await;

    // The person's two rooms: the fixture's, and a second one the bot joins on her
    // invite; each becomes one session's room.
    let web_room = f.room.clone();
    let api_room = f.human.create_room(&[f.bot.user_id.as_str()]).await;
    f.human.wait_joined(&api_room, &f.bot.user_id).await;
    bind(&f, &web_room, &web_label).await;
    bind(&f, &api_room, &api_label).await;

    // A message in web-app's room reaches web-app's model only.
    let marker = format!("for-web-{}", random_suffix());
    f.human
        .send_text(&web_room, &format!("hello web ({marker})"))
        .await;
    web_model
        .wait_request("with the message of web-app's room", |r| {
            is_main(&r.body) && text_of(last_user(&r.body)).contains(&marker)
        })
        .await;

    // api's Bash call: its prompt in api's room names api; yes there lets it run.
    let run = format!("run-api-{}", random_suffix());
    let file = api.workdir().join(format!("{run}.txt"));
    let command = format!("touch {}", file.display());
    api_model.once_on(
        &run,
        Reply::Tool {
            name: "Bash".into(),
            input: json!({ "command": command, "description": format!("Create {run}.txt") }),
        },
    );
    f.human
        .send_text(&api_room, &format!("please run {run}"))
        .await;
    wait_typing(&f, &api_room).await;
    let (prompt, id) = crate::scenarios::claude_code::prompt_in(&f, &api_room, &run).await;
    let body = prompt["content"]["body"].as_str().unwrap();
    let who = asker(body, &id).expect("a labelled session is named");
    assert!(
        who.starts_with(&format!("{api_label} (session ")),
        "the prompt names api: {who}"
    );
    assert!(!file.exists(), "Bash ran before the answer");
    f.human.send_text(&api_room, &format!("yes {id}")).await;
    let tool_use = api_model
        .recorded()
        .into_iter()
        .find(|r| r.tool_use_id.is_some() && text_of(last_user(&r.body)).contains(&run))
        .and_then(|r| r.tool_use_id)
        .expect("the fake model called Bash");
    api_model
        .wait_request("with the Bash result", |r| {
            tool_results(last_user(&r.body))
                .iter()
                .any(|b| b["tool_use_id"] == tool_use.as_str())
        })
        .await;
    assert!(file.exists(), "Bash ran after yes in api's room");

    // Nothing of one room reached the other session's model.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !model_saw(&api_model, &marker),
        "web-app's message reached api"
    );
    assert!(
        !model_saw(&web_model, &run),
        "api's message reached web-app"
    );
}
