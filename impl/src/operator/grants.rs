//! The operator's `matrix-channel grants` and `revoke` (docs/decisions/0027-grants.md)
//! on the operator socket ([`super`]):
//!
//! - `GET /grants?identity=NAME` answers 200 `{"grants": [{"id", "session", "label":
//!   label | null, "tool", "scope": "exact" | "prefix", "subject", "lasts_ms": n |
//!   null, "expires_in_ms", "by", "room"}, …]}` from the model's state, oldest first
//!   (`lasts_ms` `null`: until the session ends; a grant past its expiry that the
//!   model has not pruned yet is left out); 400 for an unknown identity.
//! - `POST /revoke` `{"identity", "grant": n | null}` (`null`: every grant) answers
//!   200 `{"revoked": [n, …]}`, the grants the model ended; 404 `no_grant` when
//!   `grant` names none; 400 `bad_request` (an unknown identity, a malformed body);
//!   503 `stopping`.
//!
//! The model decides ([`crate::engine::EngineHandle::revoke`]); this module parses,
//! asks and answers.

use super::{known, unknown_identity, Refusal};
use crate::engine::EngineHandle;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use mc_model::grant::{InputScope, Lasts};
use mc_model::IdentityId;
use serde::{Deserialize, Serialize};

/// `POST /revoke`'s body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevokeRequest {
    pub identity: String,
    /// The grant's id; `None` (JSON `null`) revokes every grant. Required: a body
    /// without it is refused rather than taken as "all".
    #[serde(deserialize_with = "Option::deserialize")]
    pub grant: Option<u64>,
}

/// `POST /revoke`'s answer: the ids of the grants ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revoked {
    pub revoked: Vec<u64>,
}

/// One grant of `GET /grants`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantView {
    pub id: u64,
    /// The MCP session id it answers for.
    pub session: String,
    /// The label that session attached with.
    pub label: Option<String>,
    pub tool: String,
    /// `exact` or `prefix`.
    pub scope: String,
    /// The subject (command, path, URL) or prefix it covers.
    pub subject: String,
    /// The time box asked for, ms; `None`: until the session ends (at most 24 h).
    pub lasts_ms: Option<u64>,
    pub expires_in_ms: u64,
    /// The approver who made it, and the room it was made in.
    pub by: String,
    pub room: String,
}

/// `GET /grants`'s answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grants {
    pub grants: Vec<GrantView>,
}

#[derive(Clone, Debug, Deserialize)]
pub(super) struct GrantsQuery {
    identity: String,
}

pub(super) async fn grants(
    State(engine): State<EngineHandle>,
    query: Result<Query<GrantsQuery>, QueryRejection>,
) -> Result<Json<Grants>, Refusal> {
    let Query(query) = query.map_err(|e| Refusal::bad_request(e.body_text()))?;
    let identity = IdentityId(query.identity.clone());
    // A read for display: it reports the model's grants and decides nothing.
    let grants = engine
        .read(move |c| {
            let state = c.identity(&identity)?;
            let now = c.now();
            Some(
                state
                    .grants()
                    .iter()
                    .filter(|g| now < g.expires_at)
                    .map(|g| GrantView {
                        id: g.id,
                        session: g.session.0.clone(),
                        label: state.label_of(&g.session).map(|l| l.to_string()),
                        tool: g.tool.clone(),
                        scope: match g.scope {
                            InputScope::Exact(_) => "exact",
                            InputScope::Prefix(_) => "prefix",
                        }
                        .to_owned(),
                        subject: g.scope.text().to_owned(),
                        lasts_ms: match g.lasts {
                            Lasts::Session => None,
                            Lasts::For { ms } => Some(ms),
                        },
                        expires_in_ms: g.expires_at.0.saturating_sub(now.0),
                        by: g.by.0.clone(),
                        room: g.room.0.clone(),
                    })
                    .collect::<Vec<_>>(),
            )
        })
        .await
        .map_err(Refusal::stopping)?;
    match grants {
        Some(grants) => Ok(Json(Grants { grants })),
        None => Err(unknown_identity(&query.identity)),
    }
}

pub(super) async fn revoke(
    State(engine): State<EngineHandle>,
    body: Result<Json<RevokeRequest>, JsonRejection>,
) -> Result<Json<Revoked>, Refusal> {
    let Json(request) = body.map_err(|e| Refusal::bad_request(e.body_text()))?;
    let identity = known(&engine, &request.identity).await?;
    let revoked = engine
        .revoke(identity, request.grant)
        .await
        .map_err(Refusal::stopping)?;
    match (request.grant, revoked.is_empty()) {
        (Some(n), true) => Err(Refusal::new(
            StatusCode::NOT_FOUND,
            "no_grant",
            format!(
                "the identity {} has no grant {n} (`matrix-channel grants` lists them)",
                request.identity
            ),
        )),
        _ => Ok(Json(Revoked { revoked })),
    }
}

/// `3 Bash exact "cargo test" for web (session 1a2b3c4d) by @ann:hs, until the session
/// ends, 1439 min left`.
pub fn grant_line(g: &GrantView) -> String {
    let short: String = g
        .session
        .chars()
        .take(mc_model::prompt_text::SESSION_CHARS)
        .collect();
    let who = match &g.label {
        Some(label) => format!("{label} (session {short})"),
        None => format!("session {short}"),
    };
    let lasts = match g.lasts_ms {
        None => Lasts::Session,
        Some(ms) => Lasts::For { ms },
    };
    format!(
        "{} {} {} {:?} for {who} by {}, {lasts}, {} min left",
        g.id,
        g.tool,
        g.scope,
        g.subject,
        g.by,
        g.expires_in_ms.div_ceil(60_000)
    )
}

/// `matrix-channel grants`: the live grants of `identity`, one line each
/// ([`grant_line`]). Errors: as [`super::ask`]'s.
pub async fn grants_command(
    store_dir: &std::path::Path,
    identity: &str,
) -> anyhow::Result<Vec<String>> {
    use anyhow::Context as _;
    let mut at = super::url("/grants");
    at.query_pairs_mut().append_pair("identity", identity);
    let answer = super::ask(store_dir, reqwest::Method::GET, at, None).await?;
    let grants: Grants = serde_json::from_value(answer).context("`serve`'s answer to grants")?;
    Ok(grants.grants.iter().map(grant_line).collect())
}

/// `matrix-channel revoke`: revokes grant `grant` of `identity` (`None`: every one).
/// Returns `revoked grant N` for each. Errors: as [`super::ask`]'s, the server's
/// `no_grant` among them.
pub async fn revoke_command(
    store_dir: &std::path::Path,
    identity: &str,
    grant: Option<u64>,
) -> anyhow::Result<Vec<String>> {
    use anyhow::Context as _;
    let body = serde_json::to_vec(&RevokeRequest {
        identity: identity.to_owned(),
        grant,
    })?;
    let answer = super::ask(
        store_dir,
        reqwest::Method::POST,
        super::url("/revoke"),
        Some(body),
    )
    .await?;
    let revoked: Revoked = serde_json::from_value(answer).context("`serve`'s answer to revoke")?;
    Ok(revoked
        .revoked
        .iter()
        .map(|n| format!("revoked grant {n}"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::super::router;
    use super::super::tests::send;
    use crate::engine::{self, NoPersist};
    use crate::http::testing::NoWire;
    use mc_model::{
        Channel, IdentityConfig, Input, Message, MessageContent, MsgType, PermissionRequest,
        RoomId, SessionId, UserId,
    };
    use serde_json::{json, Value};
    use std::sync::Arc;

    /// The identity `bot` in `!r:hs` with approver `@alice:hs`, session `s1`
    /// attached, and grant 1 made by Alice's `always abcde` on `cargo test`.
    fn channel_with_a_grant() -> Channel {
        let bot = mc_model::IdentityId("bot".into());
        let mut config =
            IdentityConfig::new(UserId("@bot:hs".into()), [UserId("@alice:hs".into())]);
        config.approvers = Some([UserId("@alice:hs".into())].into());
        config.attach_grace_ms = 0;
        let mut channel = Channel::new();
        channel.add_identity(bot.clone(), config).unwrap();
        let now = engine::now_ms();
        let room = RoomId("!r:hs".into());
        let message = |id: &str, body: &str| Input::Message {
            identity: bot.clone(),
            message: Message {
                room: room.clone(),
                event_id: mc_model::EventId(id.into()),
                sender: UserId("@alice:hs".into()),
                sender_name: None,
                origin_server_ts: now,
                content: Some(MessageContent {
                    msgtype: MsgType::Text,
                    body: body.into(),
                    formatted_body: None,
                    relation: None,
                    attachment: None,
                }),
                device: mc_model::DeviceTrust::PlaintextRoom,
            },
        };
        let inputs = [
            Input::Membership {
                identity: bot.clone(),
                room: room.clone(),
                event_id: None,
                user: UserId("@bot:hs".into()),
                membership: mc_model::Membership::Joined,
            },
            Input::Attach {
                identity: bot.clone(),
                session: SessionId("s1-0123456789".into()),
                label: None,
            },
            message("$hello", "hello"),
            Input::PermissionRequest {
                identity: bot.clone(),
                session: SessionId("s1-0123456789".into()),
                request: PermissionRequest {
                    request_id: mc_model::RequestId::parse("abcde").unwrap(),
                    tool_name: "Bash".into(),
                    description: "d".into(),
                    input_preview: r#"{"command":"cargo test"}"#.into(),
                },
            },
        ];
        for input in inputs {
            for effect in channel.handle(now, input) {
                if let mc_model::Effect::PostPrompt { id, .. } = effect {
                    channel.handle(
                        now,
                        Input::Completed {
                            id,
                            outcome: mc_model::Outcome::Posted {
                                event_id: mc_model::EventId("$prompt".into()),
                            },
                        },
                    );
                }
            }
        }
        channel.handle(now, message("$always", "always abcde"));
        assert_eq!(channel.identity(&bot).unwrap().grants().len(), 1);
        channel
    }

    fn app() -> axum::Router {
        let engine = engine::spawn(
            channel_with_a_grant(),
            Arc::new(NoWire::default()),
            NoPersist,
            engine::now_ms,
        )
        .0;
        router(engine)
    }

    #[tokio::test(start_paused = true)]
    async fn grants_lists_each_live_grant_with_its_scope_and_time_left() {
        let app = app();
        let (status, body) = send(&app, "GET", "/grants?identity=bot", None).await;
        assert_eq!(status, 200, "{body}");
        let grant = &body["grants"][0];
        assert_eq!(
            (
                &grant["id"],
                &grant["session"],
                &grant["tool"],
                &grant["scope"],
                &grant["subject"],
                &grant["lasts_ms"],
                &grant["by"],
                &grant["room"]
            ),
            (
                &json!(1),
                &json!("s1-0123456789"),
                &json!("Bash"),
                &json!("exact"),
                &json!("cargo test"),
                &Value::Null,
                &json!("@alice:hs"),
                &json!("!r:hs")
            )
        );
        let left = grant["expires_in_ms"].as_u64().unwrap();
        assert!(left > 0 && left <= mc_model::grant::GRANT_MAX_MS, "{left}");
        let view: super::GrantView = serde_json::from_value(grant.clone()).unwrap();
        assert!(
            super::grant_line(&view).starts_with(
                "1 Bash exact \"cargo test\" for session s1-01234 by @alice:hs, until the session ends, "
            ),
            "{}",
            super::grant_line(&view)
        );
        let (status, body) = send(&app, "GET", "/grants?identity=nobody", None).await;
        assert_eq!((status, &body["error"]), (400, &json!("bad_request")));
    }

    #[tokio::test(start_paused = true)]
    async fn revoke_ends_the_grant_named_and_a_grant_that_is_none_is_404() {
        let app = app();
        let (status, body) = send(
            &app,
            "POST",
            "/revoke",
            Some(json!({"identity": "bot", "grant": 2})),
        )
        .await;
        assert_eq!(
            (status, &body["error"]),
            (404, &json!("no_grant")),
            "{body}"
        );
        let (status, body) = send(
            &app,
            "POST",
            "/revoke",
            Some(json!({"identity": "bot", "grant": 1})),
        )
        .await;
        assert_eq!((status, body), (200, json!({"revoked": [1]})));
        let (_, body) = send(&app, "GET", "/grants?identity=bot", None).await;
        assert_eq!(body, json!({"grants": []}));
        let (status, body) = send(
            &app,
            "POST",
            "/revoke",
            Some(json!({"identity": "bot", "grant": null})),
        )
        .await;
        assert_eq!((status, body), (200, json!({"revoked": []})), "all of none");
    }

    #[tokio::test(start_paused = true)]
    async fn a_revoke_without_its_grant_field_an_unknown_identity_or_a_bad_body_is_400() {
        let app = app();
        for body in [
            json!({"identity": "bot"}),
            json!({"identity": "bot", "grant": "1"}),
            json!({"identity": "bot", "grant": 1, "extra": true}),
            json!({"identity": "nobody", "grant": 1}),
        ] {
            let (status, answer) = send(&app, "POST", "/revoke", Some(body.clone())).await;
            assert_eq!(
                (status, &answer["error"]),
                (400, &json!("bad_request")),
                "{body}"
            );
        }
        let (_, listed) = send(&app, "GET", "/grants?identity=bot", None).await;
        assert_eq!(
            listed["grants"].as_array().map(Vec::len),
            Some(1),
            "nothing revoked"
        );
    }
}
