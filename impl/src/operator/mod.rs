//! The operator's commands `matrix-channel bind` and `bindings`
//! (docs/decisions/0026-session-rooms.md, "Operator commands"), and `grants` and
//! `revoke` ([`grants`], docs/decisions/0027-grants.md): HTTP over a Unix
//! domain socket, `<store_dir>/operator.sock`, which `serve` listens on and the CLI
//! connects to.
//!
//! - **Authority is the filesystem**, as for `token create`: the socket is its
//!   owner's only (mode 0600), never on the network, and no bearer token reaches it,
//!   so an agent (which holds an MCP token) can never rebind rooms.
//! - **Race-free mode.** The socket is bound inside a fresh directory of mode 0700
//!   (`<store_dir>/.operator`), made 0600 there, then renamed to its place and the
//!   directory removed: no other user can reach it before it is 0600. (Not the
//!   umask: it is the process's, and other threads create files meanwhile.)
//! - **Lifecycle.** `serve` holds the store lock, so at start it replaces a stale
//!   socket file (a SIGKILLed `serve` leaves one) by the rename; [`OperatorSocket`]
//!   removes the file when dropped. A path longer than the platform's `sun_path`
//!   allows: `serve` logs a warning naming it and runs without the socket; the CLI
//!   says so.
//! - **Routes** (JSON; errors `{"error": code, "message"}` as on the HTTP mounts):
//!   `POST /bind` `{"identity", "label", "room": id | null}` answers 200
//!   `{"bound": [{"label", "room": id | null}, …]}`, every change the model made
//!   (a label that lost the room included); 400 `bad_request` (an unknown identity,
//!   a label [`Label::parse`] refuses, a malformed room id, a malformed body), 409
//!   `not_joined`, 503 `stopping`. `GET /bindings?identity=NAME` answers 200
//!   `{"bindings": [{"label", "room": id | null, "state": "room" | "creating" |
//!   "unbound" | "no_room", "sessions": n}, …]}` from the model's state, by label:
//!   every bound label and every attached session's label (`no_room`: one the model
//!   has no binding for, its room left or not created; `sessions`: the attached
//!   sessions with that label); 400 for an unknown identity.
//!
//! The model decides every binding ([`crate::engine::EngineHandle::bind`]); this
//! module parses, asks and answers.

pub mod grants;

use crate::engine::{BindAnswer, EngineHandle, EngineStopped};
use crate::shutdown::Stop;
use anyhow::{anyhow, Context as _};
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use mc_model::{Binding, DropReason, IdentityId, Label, RoomId, SessionPhase};
use serde::{Deserialize, Serialize};
use std::future::IntoFuture as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The socket's file name in the store directory.
pub const SOCKET_FILE: &str = "operator.sock";

/// The private directory the socket is bound in (as `s`) before it is renamed to
/// [`SOCKET_FILE`]: `.operator/s` is shorter than `operator.sock`, so it fits a
/// socket address wherever the socket's own path does.
const BIND_DIR: &str = ".operator";

/// How long the CLI waits for `serve`'s answer.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// The operator socket of the store at `store_dir`.
pub fn socket_path(store_dir: &Path) -> PathBuf {
    store_dir.join(SOCKET_FILE)
}

/// Whether `path` fits a Unix socket address (`sun_path`) on this platform.
fn fits_sun_path(path: &Path) -> bool {
    std::os::unix::net::SocketAddr::from_pathname(path).is_ok()
}

/// `POST /bind`'s body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BindRequest {
    pub identity: String,
    pub label: String,
    /// The room id; `None` (JSON `null`) unbinds the label. Required: a body
    /// without it is refused rather than taken as an unbind.
    #[serde(deserialize_with = "Option::deserialize")]
    pub room: Option<String>,
}

/// One change of a binding, or one label's binding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub label: String,
    /// `None`: bound to no room (unbound, or a room being created).
    pub room: Option<String>,
}

/// `POST /bind`'s answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bound {
    pub bound: Vec<Change>,
}

/// What a label is bound to, as `GET /bindings` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BindingState {
    Room,
    Creating,
    Unbound,
    /// An attached session's label with no binding: the identity left its room, or
    /// creating it failed. Its sessions get no events; the label's next attach
    /// creates a room, and `bind` gives it one at once.
    NoRoom,
}

/// One label of `GET /bindings`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelBinding {
    pub label: String,
    pub room: Option<String>,
    pub state: BindingState,
    /// The attached sessions that brought the label.
    pub sessions: usize,
}

/// `GET /bindings`'s answer, by label.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bindings {
    pub bindings: Vec<LabelBinding>,
}

/// `GET /bindings`'s query.
#[derive(Clone, Debug, Deserialize)]
struct BindingsQuery {
    identity: String,
}

/// An error answer: `{"error": code, "message"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    #[serde(skip)]
    status: u16,
    pub error: String,
    pub message: String,
}

impl Refusal {
    fn new(status: StatusCode, error: &str, message: impl Into<String>) -> Refusal {
        Refusal {
            status: status.as_u16(),
            error: error.to_owned(),
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> Refusal {
        Refusal::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    fn stopping(_: EngineStopped) -> Refusal {
        Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "stopping",
            "the server is stopping",
        )
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self)).into_response()
    }
}

/// The operator's routes (`POST /bind`, `GET /bindings`, `GET /grants`, `POST
/// /revoke`) over `engine`.
pub fn router(engine: EngineHandle) -> axum::Router {
    axum::Router::new()
        .route("/bind", axum::routing::post(bind))
        .route("/bindings", axum::routing::get(bindings))
        .route("/grants", axum::routing::get(grants::grants))
        .route("/revoke", axum::routing::post(grants::revoke))
        .with_state(engine)
}

/// `name` as an identity of the model. Errors: 400 when the model has no such
/// identity, 503 when the engine has stopped. A read for validation, not a decision:
/// the model drops a bind of an unknown identity itself (`UnknownIdentity`, answered
/// alike); this read keeps such a request out of the journal.
async fn known(engine: &EngineHandle, name: &str) -> Result<IdentityId, Refusal> {
    let identity = IdentityId(name.to_owned());
    let probe = identity.clone();
    let known = engine
        .read(move |c| c.identity(&probe).is_some())
        .await
        .map_err(Refusal::stopping)?;
    if known {
        Ok(identity)
    } else {
        Err(unknown_identity(name))
    }
}

fn unknown_identity(name: &str) -> Refusal {
    Refusal::bad_request(format!("no identity {name:?} in the config"))
}

/// A room id as the server parses one elsewhere (ruma's rules, as matrix-sdk takes
/// it). Errors: 400 naming the id.
fn room_id(text: &str) -> Result<RoomId, Refusal> {
    matrix_sdk::ruma::OwnedRoomId::try_from(text)
        .map(|id| RoomId(id.to_string()))
        .map_err(|e| Refusal::bad_request(format!("room {text:?} is no room id: {e}")))
}

async fn bind(
    State(engine): State<EngineHandle>,
    body: Result<Json<BindRequest>, JsonRejection>,
) -> Result<Json<Bound>, Refusal> {
    let Json(request) = body.map_err(|e| Refusal::bad_request(e.body_text()))?;
    let identity = known(&engine, &request.identity).await?;
    let label = Label::parse(&request.label)
        .map_err(|e| Refusal::bad_request(format!("label {:?}: {e}", request.label)))?;
    let room = request.room.as_deref().map(room_id).transpose()?;
    let answer = engine
        .bind(identity, label, room.clone())
        .await
        .map_err(Refusal::stopping)?;
    match answer {
        BindAnswer::Bound(changes) => Ok(Json(Bound {
            bound: changes
                .into_iter()
                .map(|(label, room)| Change {
                    label: label.to_string(),
                    room: room.map(|r| r.0),
                })
                .collect(),
        })),
        BindAnswer::Dropped(DropReason::NotJoined) => Err(Refusal::new(
            StatusCode::CONFLICT,
            "not_joined",
            format!(
                "the identity {} is not joined to {}: invite it first",
                request.identity,
                room.map(|r| r.0).unwrap_or_default()
            ),
        )),
        BindAnswer::Dropped(DropReason::UnknownIdentity) => {
            Err(unknown_identity(&request.identity))
        }
        BindAnswer::Dropped(reason) => Err(Refusal::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("the model did not bind: {reason:?}"),
        )),
    }
}

async fn bindings(
    State(engine): State<EngineHandle>,
    query: Result<Query<BindingsQuery>, QueryRejection>,
) -> Result<Json<Bindings>, Refusal> {
    let Query(query) = query.map_err(|e| Refusal::bad_request(e.body_text()))?;
    let identity = IdentityId(query.identity.clone());
    // A read for display: it reports the model's bindings and decides nothing.
    let bindings = engine
        .read(move |c| {
            let state = c.identity(&identity)?;
            let sessions_of = |label: &Label| {
                state
                    .sessions()
                    .iter()
                    .filter(|(session, phase)| {
                        **phase != SessionPhase::Detached && state.label_of(session) == Some(label)
                    })
                    .count()
            };
            let mut labels: std::collections::BTreeMap<&Label, LabelBinding> = state
                .bindings()
                .iter()
                .map(|(label, binding)| {
                    let (room, kind) = match binding {
                        Binding::Room { room } => (Some(room.0.clone()), BindingState::Room),
                        Binding::Creating { .. } => (None, BindingState::Creating),
                        Binding::Unbound => (None, BindingState::Unbound),
                    };
                    let binding = LabelBinding {
                        label: label.to_string(),
                        room,
                        state: kind,
                        sessions: sessions_of(label),
                    };
                    (label, binding)
                })
                .collect();
            // An attached session's label the model has no binding for: its room was
            // left or could not be created.
            for (session, phase) in state.sessions() {
                match state.label_of(session) {
                    Some(label) if *phase != SessionPhase::Detached => {
                        labels.entry(label).or_insert_with(|| LabelBinding {
                            label: label.to_string(),
                            room: None,
                            state: BindingState::NoRoom,
                            sessions: sessions_of(label),
                        });
                    }
                    _ => {}
                }
            }
            Some(labels.into_values().collect::<Vec<_>>())
        })
        .await
        .map_err(Refusal::stopping)?;
    match bindings {
        Some(bindings) => Ok(Json(Bindings { bindings })),
        None => Err(unknown_identity(&query.identity)),
    }
}

/// `serve`'s operator socket, listening until the stop switch is set. Dropping it
/// stops the listener and removes the socket file.
pub struct OperatorSocket {
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl OperatorSocket {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for OperatorSocket {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Listens on `<store_dir>/operator.sock` (mode 0600, bound race-free as the module
/// says) with [`router`] over `engine`, until `stop` is set. The caller holds the
/// store lock: a socket file already there is stale, and the rename replaces it
/// (a symlink there is replaced, not followed); whatever a crash left at the private
/// directory's path (a directory, a file, a symlink, not followed) is removed first. A path too long
/// for a socket address: logs a warning naming it and returns `None`.
/// Errors: the socket cannot be created, bound or moved into place.
pub fn listen(
    store_dir: &Path,
    engine: EngineHandle,
    stop: Stop,
) -> anyhow::Result<Option<OperatorSocket>> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    let path = socket_path(store_dir);
    if !fits_sun_path(&path) {
        tracing::warn!(
            path = %path.display(),
            "the operator socket's path is longer than a Unix socket address allows: \
             serving without it, so `matrix-channel bind` and `bindings` cannot reach \
             this server (a shorter store_dir gives it one)"
        );
        return Ok(None);
    }
    let private = store_dir.join(BIND_DIR);
    let bound_at = private.join("s");
    // Whatever is there is a crash's leftover or a stray: a directory goes with its
    // contents, anything else (a symlink too, never followed) as a file.
    let removed = match std::fs::symlink_metadata(&private) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&private),
        Ok(_) => std::fs::remove_file(&private),
        Err(e) => Err(e),
    };
    match removed {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing {}", private.display())),
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private)
        .with_context(|| format!("creating {}", private.display()))?;
    let listener = tokio::net::UnixListener::bind(&bound_at)
        .with_context(|| format!("binding the operator socket at {}", bound_at.display()))?;
    std::fs::set_permissions(&bound_at, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("making {} its owner's only", bound_at.display()))?;
    std::fs::rename(&bound_at, &path)
        .with_context(|| format!("moving the operator socket to {}", path.display()))?;
    std::fs::remove_dir(&private).with_context(|| format!("removing {}", private.display()))?;
    let server = axum::serve(listener, router(engine)).with_graceful_shutdown(stop.stopped());
    let task = tokio::spawn(async move {
        if let Err(e) = server.into_future().await {
            tracing::warn!("the operator socket stopped serving: {e}");
        }
    });
    tracing::info!(path = %path.display(), "operator socket listening");
    Ok(Some(OperatorSocket { path, task }))
}

// The CLI's side.

/// Asks the `serve` of the store at `store_dir`: `method` on `path_and_query`, with
/// `body` as JSON. Returns the 200 answer's JSON.
/// Errors (one line each): the socket's path is too long (so `serve` has none), no
/// `serve` listens there, no answer within [`ANSWER_WITHIN`], or an error answer
/// (its message).
async fn ask(
    store_dir: &Path,
    method: reqwest::Method,
    url: reqwest::Url,
    body: Option<Vec<u8>>,
) -> anyhow::Result<serde_json::Value> {
    let socket = socket_path(store_dir);
    if !fits_sun_path(&socket) {
        return Err(anyhow!(
            "the operator socket's path {} is longer than a Unix socket address allows, \
             so `serve` runs without it (a shorter store_dir gives it one)",
            socket.display()
        ));
    }
    let http = reqwest::Client::builder()
        .unix_socket(socket.as_path())
        .timeout(ANSWER_WITHIN)
        .build()
        .context("an HTTP client")?;
    let mut request = http.request(method, url);
    if let Some(body) = body {
        request = request
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
    }
    let response = request.send().await.map_err(|e| {
        if e.is_connect() {
            no_serve(&socket, &e)
        } else if e.is_timeout() {
            anyhow!(
                "`serve` did not answer on {} within {} s",
                socket.display(),
                ANSWER_WITHIN.as_secs()
            )
        } else {
            anyhow!("asking `serve` on {}: {e}", socket.display())
        }
    })?;
    let status = response.status();
    let bytes = response
        .bytes()
        .await
        .with_context(|| format!("reading `serve`'s answer on {}", socket.display()))?;
    if status.is_success() {
        return serde_json::from_slice(&bytes)
            .with_context(|| format!("`serve`'s answer on {} is not JSON", socket.display()));
    }
    match serde_json::from_slice::<Refusal>(&bytes) {
        Ok(refusal) => Err(anyhow!("{}", refusal.message)),
        Err(_) => Err(anyhow!(
            "`serve` answered {status}: {}",
            String::from_utf8_lossy(&bytes)
        )),
    }
}

/// The error of a connection that failed: nothing listens on `socket` (a socket file
/// a SIGKILLed `serve` left refuses connections), or it is someone else's.
fn no_serve(socket: &Path, error: &reqwest::Error) -> anyhow::Error {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::PermissionDenied {
                return anyhow!(
                    "{}: permission denied (the operator socket is its owner's only)",
                    socket.display()
                );
            }
        }
        source = e.source();
    }
    anyhow!(
        "no `serve` runs for this store ({} does not exist or refuses connections)",
        socket.display()
    )
}

/// The URL of `path` on the socket (its host is not looked up).
fn url(path: &str) -> reqwest::Url {
    reqwest::Url::parse("http://operator.sock")
        .and_then(|base| base.join(path))
        .expect("a fixed URL")
}

/// `matrix-channel bind`: binds `label` of `identity` to `room` (`None`: unbinds it)
/// through the running `serve`. Returns the changes, one line each ([`change_line`]).
/// Errors: as [`ask`]'s, the server's refusal's message among them.
pub async fn bind_command(
    store_dir: &Path,
    identity: &str,
    label: &str,
    room: Option<&str>,
) -> anyhow::Result<Vec<String>> {
    let body = serde_json::to_vec(&BindRequest {
        identity: identity.to_owned(),
        label: label.to_owned(),
        room: room.map(str::to_owned),
    })?;
    let answer = ask(store_dir, reqwest::Method::POST, url("/bind"), Some(body)).await?;
    let bound: Bound = serde_json::from_value(answer).context("`serve`'s answer to bind")?;
    Ok(bound.bound.iter().map(change_line).collect())
}

/// `matrix-channel bindings`: the bindings of `identity`, one line each
/// ([`binding_line`]).
/// Errors: as [`ask`]'s.
pub async fn bindings_command(store_dir: &Path, identity: &str) -> anyhow::Result<Vec<String>> {
    let mut at = url("/bindings");
    at.query_pairs_mut().append_pair("identity", identity);
    let answer = ask(store_dir, reqwest::Method::GET, at, None).await?;
    let bindings: Bindings =
        serde_json::from_value(answer).context("`serve`'s answer to bindings")?;
    Ok(bindings.bindings.iter().map(binding_line).collect())
}

/// Writes `lines` to `out`, one a line, for `bind` and `bindings`. A reader that
/// went away (`matrix-channel bindings | head -1`) ends the output quietly: what
/// `serve` did is done. Errors: any other write error.
pub fn write_lines(out: &mut impl std::io::Write, lines: &[String]) -> std::io::Result<()> {
    let written = lines
        .iter()
        .try_for_each(|line| writeln!(out, "{line}"))
        .and_then(|()| out.flush());
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// `api -> !abc:server`, or `web -> (unbound)`.
pub fn change_line(change: &Change) -> String {
    format!(
        "{} -> {}",
        change.label,
        change.room.as_deref().unwrap_or("(unbound)")
    )
}

/// `api -> !abc:server (1 session)`, `ops -> (creating) (2 sessions)`,
/// `web -> (unbound) (0 sessions)`, `docs -> (no room) (1 session)`.
pub fn binding_line(binding: &LabelBinding) -> String {
    let to = match (binding.state, binding.room.as_deref()) {
        (BindingState::Room, Some(room)) => room,
        (BindingState::Creating, _) => "(creating)",
        (BindingState::NoRoom, _) => "(no room)",
        (BindingState::Room | BindingState::Unbound, _) => "(unbound)",
    };
    let noun = if binding.sessions == 1 {
        "session"
    } else {
        "sessions"
    };
    format!("{} -> {to} ({} {noun})", binding.label, binding.sessions)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::engine::{self, NoPersist};
    use crate::http::testing::NoWire;
    use axum::body::Body;
    use mc_model::{Channel, IdentityConfig, Input, SessionId, UserId};
    use serde_json::{json, Value};
    use std::sync::Arc;
    use tower::ServiceExt as _;

    /// The identity `bot`, joined to `!r:hs`, allowing `@alice:hs`.
    fn channel() -> Channel {
        let mut channel = Channel::new();
        let config = IdentityConfig::new(UserId("@bot:hs".into()), [UserId("@alice:hs".into())]);
        channel
            .add_identity(IdentityId("bot".into()), config)
            .unwrap();
        channel.handle(
            engine::now_ms(),
            Input::Membership {
                identity: IdentityId("bot".into()),
                room: RoomId("!r:hs".into()),
                event_id: None,
                user: UserId("@bot:hs".into()),
                membership: mc_model::Membership::Joined,
            },
        );
        channel
    }

    fn spawn(wire: NoWire) -> EngineHandle {
        engine::spawn(channel(), Arc::new(wire), NoPersist, engine::now_ms).0
    }

    /// `method uri` with `body` on the operator router: the status and the JSON body
    /// (`null` when none).
    pub(super) async fn send(
        app: &axum::Router,
        method: &str,
        uri: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let request = axum::http::Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .body(match body {
                Some(body) => Body::from(body.to_string()),
                None => Body::empty(),
            })
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn post_bind(app: &axum::Router, body: Value) -> (u16, Value) {
        send(app, "POST", "/bind", Some(body)).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_bind_answers_every_change_the_model_made_a_label_that_lost_the_room_included() {
        let app = router(spawn(NoWire::default()));
        let answer = post_bind(
            &app,
            json!({"identity": "bot", "label": "api", "room": "!r:hs"}),
        )
        .await;
        assert_eq!(
            answer,
            (200, json!({"bound": [{"label": "api", "room": "!r:hs"}]}))
        );
        let answer = post_bind(
            &app,
            json!({"identity": "bot", "label": "web", "room": "!r:hs"}),
        )
        .await;
        assert_eq!(
            answer,
            (
                200,
                json!({"bound": [
                    {"label": "api", "room": null},
                    {"label": "web", "room": "!r:hs"},
                ]})
            )
        );
        let answer = post_bind(
            &app,
            json!({"identity": "bot", "label": "web", "room": null}),
        )
        .await;
        assert_eq!(
            answer,
            (200, json!({"bound": [{"label": "web", "room": null}]}))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_bind_to_a_room_the_identity_is_not_in_is_409_not_joined() {
        let app = router(spawn(NoWire::default()));
        let answer = post_bind(
            &app,
            json!({"identity": "bot", "label": "api", "room": "!elsewhere:hs"}),
        )
        .await;
        assert_eq!(
            answer,
            (
                409,
                json!({
                    "error": "not_joined",
                    "message": "the identity bot is not joined to !elsewhere:hs: invite it first",
                })
            )
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_bind_with_an_unknown_identity_a_bad_label_room_or_body_is_400_saying_which() {
        let app = router(spawn(NoWire::default()));
        for (body, says) in [
            (
                json!({"identity": "nobody", "label": "api", "room": "!r:hs"}),
                "no identity \"nobody\" in the config",
            ),
            (
                json!({"identity": "bot", "label": "a/b", "room": "!r:hs"}),
                "label \"a/b\": a room label has the character '/'",
            ),
            (
                json!({"identity": "bot", "label": "", "room": null}),
                "label \"\": ",
            ),
            (
                json!({"identity": "bot", "label": "api", "room": "#alias:hs"}),
                "room \"#alias:hs\" is no room id: ",
            ),
            (
                json!({"identity": "bot", "label": "api", "room": "r:hs"}),
                "room \"r:hs\" is no room id: ",
            ),
            (json!({"identity": "bot", "label": "api"}), "room"),
            (
                json!({"identity": "bot", "label": "api", "room": null, "rooom": "!r:hs"}),
                "rooom",
            ),
            (json!(["bot"]), ""),
        ] {
            let (status, answer) = post_bind(&app, body.clone()).await;
            assert_eq!(status, 400, "{body}: {answer}");
            assert_eq!(answer["error"], "bad_request", "{body}: {answer}");
            let message = answer["message"].as_str().unwrap();
            assert!(message.contains(says), "{body}: {message}");
        }
        // Nothing reached the model: the label is bound to nothing.
        let (_, answer) = send(&app, "GET", "/bindings?identity=bot", None).await;
        assert_eq!(answer, json!({"bindings": []}));
    }

    #[tokio::test(start_paused = true)]
    async fn bindings_lists_each_label_its_state_and_its_attached_sessions() {
        let engine = spawn(NoWire {
            creations_hang: true,
            ..NoWire::default()
        });
        let app = router(engine.clone());
        let attach = |session: &str, label: &str| Input::Attach {
            identity: IdentityId("bot".into()),
            session: SessionId(session.into()),
            label: Some(Label::parse(label).unwrap()),
        };
        post_bind(
            &app,
            json!({"identity": "bot", "label": "api", "room": "!r:hs"}),
        )
        .await;
        post_bind(
            &app,
            json!({"identity": "bot", "label": "web", "room": null}),
        )
        .await;
        engine.submit(attach("s-api-1", "api")).unwrap();
        engine.submit(attach("s-api-2", "api")).unwrap();
        engine.submit(attach("s-ops", "ops")).unwrap();
        engine.submit(attach("s-gone", "ops")).unwrap();
        engine
            .submit(Input::Detach {
                identity: IdentityId("bot".into()),
                session: SessionId("s-gone".into()),
            })
            .unwrap();
        let answer = send(&app, "GET", "/bindings?identity=bot", None).await;
        assert_eq!(
            answer,
            (
                200,
                json!({"bindings": [
                    {"label": "api", "room": "!r:hs", "state": "room", "sessions": 2},
                    {"label": "ops", "room": null, "state": "creating", "sessions": 1},
                    {"label": "web", "room": null, "state": "unbound", "sessions": 0},
                ]})
            )
        );
        let (status, answer) = send(&app, "GET", "/bindings?identity=nobody", None).await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(
            answer,
            json!({"error": "bad_request", "message": "no identity \"nobody\" in the config"})
        );
        let (status, answer) = send(&app, "GET", "/bindings", None).await;
        assert_eq!((status, &answer["error"]), (400, &json!("bad_request")));
    }

    #[tokio::test(start_paused = true)]
    async fn bindings_lists_the_label_of_an_attached_session_whose_room_the_bot_left() {
        let engine = spawn(NoWire::default());
        let app = router(engine.clone());
        post_bind(
            &app,
            json!({"identity": "bot", "label": "ops", "room": "!r:hs"}),
        )
        .await;
        engine
            .submit(Input::Attach {
                identity: IdentityId("bot".into()),
                session: SessionId("s-ops".into()),
                label: Some(Label::parse("ops").unwrap()),
            })
            .unwrap();
        engine
            .submit(Input::Membership {
                identity: IdentityId("bot".into()),
                room: RoomId("!r:hs".into()),
                event_id: None,
                user: UserId("@bot:hs".into()),
                membership: mc_model::Membership::Left,
            })
            .unwrap();
        let answer = send(&app, "GET", "/bindings?identity=bot", None).await;
        assert_eq!(
            answer,
            (
                200,
                json!({"bindings": [
                    {"label": "ops", "room": null, "state": "no_room", "sessions": 1},
                ]})
            )
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_engine_is_503_stopping() {
        let engine = spawn(NoWire::default());
        engine.shutdown().await;
        let app = router(engine);
        let stopping = json!({"error": "stopping", "message": "the server is stopping"});
        let answer = post_bind(
            &app,
            json!({"identity": "bot", "label": "api", "room": null}),
        )
        .await;
        assert_eq!(answer, (503, stopping.clone()));
        let answer = send(&app, "GET", "/bindings?identity=bot", None).await;
        assert_eq!(answer, (503, stopping));
    }

    #[test]
    fn each_change_and_binding_is_one_line() {
        let change = |room: Option<&str>| Change {
            label: "api".into(),
            room: room.map(str::to_owned),
        };
        assert_eq!(
            change_line(&change(Some("!abc:server"))),
            "api -> !abc:server"
        );
        assert_eq!(change_line(&change(None)), "api -> (unbound)");
        let binding = |room: Option<&str>, state, sessions| LabelBinding {
            label: "ops".into(),
            room: room.map(str::to_owned),
            state,
            sessions,
        };
        assert_eq!(
            binding_line(&binding(Some("!abc:server"), BindingState::Room, 1)),
            "ops -> !abc:server (1 session)"
        );
        assert_eq!(
            binding_line(&binding(None, BindingState::Creating, 2)),
            "ops -> (creating) (2 sessions)"
        );
        assert_eq!(
            binding_line(&binding(None, BindingState::Unbound, 0)),
            "ops -> (unbound) (0 sessions)"
        );
        assert_eq!(
            binding_line(&binding(None, BindingState::NoRoom, 1)),
            "ops -> (no room) (1 session)"
        );
    }

    #[test]
    fn lines_end_quietly_when_the_reader_went_away() {
        struct Gone(usize);
        impl std::io::Write for Gone {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                if self.0 == 0 {
                    return Err(std::io::ErrorKind::BrokenPipe.into());
                }
                self.0 -= 1;
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = ["a -> (unbound)".to_owned(), "b -> (unbound)".to_owned()];
        write_lines(&mut Gone(1), &lines).unwrap();
        let mut out = Vec::new();
        write_lines(&mut out, &lines).unwrap();
        assert_eq!(out, b"a -> (unbound)\nb -> (unbound)\n");
        struct Full;
        impl std::io::Write for Full {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::StorageFull.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        assert!(write_lines(&mut Full, &lines).is_err());
    }

    /// A fresh store directory under the system's temp dir, removed when dropped.
    struct TempDir(PathBuf);
    impl TempDir {
        fn new() -> TempDir {
            let dir = std::env::temp_dir().join(format!("mc-op-{:x}", rand::random::<u32>()));
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    // These talk over a real socket: the wall clock (a paused clock would jump past
    // the CLI's answer timeout while the runtime waits on the socket).
    #[tokio::test]
    async fn the_socket_is_its_owners_only_replaces_a_stale_file_and_answers_the_cli() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = TempDir::new();
        std::fs::write(socket_path(&dir.0), "stale").unwrap();
        std::fs::create_dir_all(dir.0.join(BIND_DIR).join("s")).unwrap();
        let stop = Stop::new();
        let socket = listen(&dir.0, spawn(NoWire::default()), stop.clone())
            .unwrap()
            .expect("a socket");
        assert_eq!(socket.path(), socket_path(&dir.0));
        let meta = std::fs::symlink_metadata(socket.path()).unwrap();
        assert!(
            std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()),
            "the stale file was replaced by the socket"
        );
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert!(
            !dir.0.join(BIND_DIR).exists(),
            "the private directory is gone"
        );

        let lines = bind_command(&dir.0, "bot", "api", Some("!r:hs"))
            .await
            .unwrap();
        assert_eq!(lines, ["api -> !r:hs"]);
        let lines = bindings_command(&dir.0, "bot").await.unwrap();
        assert_eq!(lines, ["api -> !r:hs (0 sessions)"]);
        let lines = bind_command(&dir.0, "bot", "api", None).await.unwrap();
        assert_eq!(lines, ["api -> (unbound)"]);
        let refused = bind_command(&dir.0, "bot", "api", Some("!x:hs"))
            .await
            .unwrap_err();
        assert_eq!(
            refused.to_string(),
            "the identity bot is not joined to !x:hs: invite it first"
        );
        let refused = bindings_command(&dir.0, "nobody").await.unwrap_err();
        assert_eq!(refused.to_string(), "no identity \"nobody\" in the config");

        drop(socket);
        assert!(!socket_path(&dir.0).exists(), "removed when dropped");
        let none = bind_command(&dir.0, "bot", "api", None).await.unwrap_err();
        assert_eq!(
            none.to_string(),
            format!(
                "no `serve` runs for this store ({} does not exist or refuses connections)",
                socket_path(&dir.0).display()
            )
        );
    }

    #[tokio::test]
    async fn what_lies_at_the_sockets_paths_is_replaced_and_no_symlink_is_followed() {
        use std::os::unix::fs::symlink;
        let dir = TempDir::new();
        let store = dir.0.join("store");
        std::fs::create_dir(&store).unwrap();
        let elsewhere = dir.0.join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("kept"), "kept").unwrap();
        std::fs::write(dir.0.join("file"), "kept").unwrap();
        symlink(&elsewhere, store.join(BIND_DIR)).unwrap();
        symlink(dir.0.join("file"), socket_path(&store)).unwrap();
        let socket = listen(&store, spawn(NoWire::default()), Stop::new())
            .unwrap()
            .expect("a socket");
        assert_eq!(
            std::fs::read_to_string(elsewhere.join("kept")).unwrap(),
            "kept"
        );
        assert_eq!(std::fs::read_to_string(dir.0.join("file")).unwrap(), "kept");
        let meta = std::fs::symlink_metadata(socket.path()).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()));
        assert!(std::fs::symlink_metadata(store.join(BIND_DIR)).is_err());
        drop(socket);
        assert_eq!(std::fs::read_to_string(dir.0.join("file")).unwrap(), "kept");

        // A plain file where the private directory goes.
        std::fs::write(store.join(BIND_DIR), "stray").unwrap();
        let stop = Stop::new();
        let socket = listen(&store, spawn(NoWire::default()), stop.clone())
            .unwrap()
            .expect("a socket");
        assert!(std::fs::symlink_metadata(store.join(BIND_DIR)).is_err());
        bindings_command(&store, "bot").await.unwrap();
        drop(socket);
    }

    #[tokio::test]
    async fn a_socket_file_nobody_listens_on_is_no_serve() {
        let dir = TempDir::new();
        drop(std::os::unix::net::UnixListener::bind(socket_path(&dir.0)).unwrap());
        assert!(socket_path(&dir.0).exists());
        let none = bindings_command(&dir.0, "bot").await.unwrap_err();
        assert!(
            none.to_string()
                .starts_with("no `serve` runs for this store ("),
            "{none}"
        );
    }

    #[tokio::test]
    async fn a_stopped_socket_takes_no_more_connections() {
        let dir = TempDir::new();
        let stop = Stop::new();
        let _socket = listen(&dir.0, spawn(NoWire::default()), stop.clone())
            .unwrap()
            .expect("a socket");
        bindings_command(&dir.0, "bot").await.unwrap();
        stop.stop();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            match bindings_command(&dir.0, "bot").await {
                Err(e) if e.to_string().starts_with("no `serve` runs") => break,
                other => assert!(
                    std::time::Instant::now() < deadline,
                    "still served after stop: {other:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn a_store_dir_too_long_for_a_socket_address_runs_without_it_and_the_cli_says_so() {
        let dir = TempDir::new();
        let long = dir.0.join("d".repeat(120));
        std::fs::create_dir_all(&long).unwrap();
        let socket = listen(&long, spawn(NoWire::default()), Stop::new()).unwrap();
        assert!(socket.is_none());
        assert!(!socket_path(&long).exists());
        let refused = bind_command(&long, "bot", "api", None).await.unwrap_err();
        assert_eq!(
            refused.to_string(),
            format!(
                "the operator socket's path {} is longer than a Unix socket address \
                 allows, so `serve` runs without it (a shorter store_dir gives it one)",
                socket_path(&long).display()
            )
        );
    }
}
