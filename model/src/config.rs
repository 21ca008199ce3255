//! An identity's channel settings: the operator's, never the agent's.
//!
//! [`IdentityConfig`] is built once by the server from its config file and handed to
//! [`crate::Channel::add_identity`]. No [`crate::Input`] can change it: the agent can
//! never widen its own allowlist (an invariant of the model check).

use crate::effect::DropReason;
use crate::event::DeviceTrust;
use crate::ids::{Millis, RoomId, UserId};
use crate::reaction::ReactionKeys;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Default time a permission prompt stays answerable: 15 minutes, in milliseconds.
pub const DEFAULT_PROMPT_TTL_MS: Millis = 15 * 60 * 1000;
/// Default settle window for verdicts by reaction: 3 seconds, in milliseconds.
pub const DEFAULT_SETTLE_MS: Millis = 3_000;
/// Default cap on prompts that are alive at once, per identity.
pub const DEFAULT_MAX_PROMPTS: usize = 32;
/// Default number of queued events replayed to a session when it attaches.
pub const DEFAULT_REPLAY_BUDGET: usize = 200;
/// Default cap on the events queued while no session is live, per identity.
pub const DEFAULT_QUEUE_CAP: usize = 5_000;
/// Default cap on a pushed body, in bytes (Matrix events are at most 65,536 bytes).
pub const DEFAULT_BODY_CAP_BYTES: usize = 16 * 1024;
/// Default cap on a reply quote, in characters.
pub const DEFAULT_QUOTE_CAP_CHARS: usize = 160;
/// Default number of delivery-log entries kept per identity (oldest forgotten first).
pub const DEFAULT_LOG_CAP: usize = 10_000;
/// Default number of retired prompt messages remembered per identity, so the agent
/// cannot rewrite one after its verdict (oldest forgotten first).
pub const DEFAULT_PROMPT_MEMORY: usize = 1_000;

/// One identity's settings. Build with [`IdentityConfig::new`], adjust the public
/// fields, then [`IdentityConfig::validate`] (the core validates again when the
/// identity is added).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct IdentityConfig {
    /// The Matrix account the server acts as. Its own events are never pushed and
    /// never verdicts.
    pub user_id: UserId,
    /// Senders, by exact MXID, whose messages are pushed to the identity's sessions.
    pub allowed_senders: BTreeSet<UserId>,
    /// Senders who may answer permission prompts. `None` means the same as
    /// `allowed_senders`; when set it must be a subset of them. An empty set means the
    /// identity relays no permission requests.
    pub approvers: Option<BTreeSet<UserId>>,
    /// Where prompts are posted. When `None`, the room an allowed sender last wrote in.
    pub permission_room: Option<RoomId>,
    /// How long a prompt stays answerable, in milliseconds.
    pub prompt_ttl_ms: Millis,
    /// How long a verdict by reaction waits for withdrawal, in milliseconds.
    pub settle_ms: Millis,
    /// The reaction keys that approve and deny.
    pub reaction_keys: ReactionKeys,
    /// At most this many prompts are alive at once; at the cap the oldest goes.
    pub max_prompts: usize,
    /// At most this many queued events are replayed to an attaching session.
    pub replay_budget: usize,
    /// At most this many events wait in the queue; beyond it the oldest are dropped
    /// (visibly; the agent can still read them from the room).
    pub queue_cap: usize,
    /// A pushed body is cut to this many bytes, on a character boundary.
    pub body_cap_bytes: usize,
    /// A reply quote is cut to this many characters.
    pub quote_cap_chars: usize,
    /// How many delivery-log entries are kept; older events are forgotten.
    pub log_cap: usize,
    /// How many retired prompts' messages are remembered (the agent may touch none
    /// of them, see [`crate::agent`]); older ones are forgotten.
    #[serde(default = "default_prompt_memory")]
    pub prompt_memory: usize,
    /// How long an undecryptable event from an allowed sender waits for its room key
    /// before the sessions are told it exists, in milliseconds (see
    /// `Input::Undecryptable`). 0 tells them at once.
    #[serde(default = "default_undecryptable_grace_ms")]
    pub undecryptable_grace_ms: Millis,
    /// Whether the sender is also told in the room (a notice in reply to the event)
    /// when the grace period ends without the key.
    #[serde(default)]
    pub undecryptable_notice: bool,
    /// Which devices a verdict (text or reaction) may come from.
    #[serde(default)]
    pub verdict_devices: VerdictDevices,
    /// How long after a session attaches (its stream opens) the core waits before it
    /// pushes to it, in milliseconds; what arrives meanwhile is held for it, in order.
    /// Claude Code registers its channel handler only after the stream is open
    /// (measured: 53 ms after the GET stream with 2.1.332) and drops a push that
    /// comes before, silently. 0 pushes at once.
    #[serde(default = "default_attach_grace_ms")]
    pub attach_grace_ms: Millis,
    /// How long the identity shows `m.typing` in a session's room after a push of
    /// that room's event reached the session, at most, in milliseconds: typing stops
    /// earlier when the agent sends a message or an edit there or its sessions
    /// detach. 0 never shows typing (docs/decisions/0026-session-rooms.md).
    #[serde(default = "default_typing_cap_ms")]
    pub typing_cap_ms: Millis,
    /// The operator's rules, in order: the first that matches a permission request
    /// allows or denies it without asking, or says how many approvers must allow it
    /// ([`crate::policy`]). Empty: every request is asked of one approver.
    #[serde(default)]
    pub policy: Vec<crate::policy::Rule>,
    /// Where the line telling a request a rule allowed or denied goes. `None`: the
    /// room its prompt would have gone to (`permission_room`, else the session's
    /// room); with neither, no line (the verdict stands).
    #[serde(default)]
    pub policy_room: Option<RoomId>,
}

/// Which devices an approver's verdict may come from: the rule is read from the
/// event's [`DeviceTrust`] when the verdict arrives, after the sender gate.
///
/// An encrypted event names the device that sent it; a clear one names none, so in
/// a plaintext room a verdict proves only that someone had the approver's access
/// token. Source: Matrix spec, "Cross-signing" and "Device verification".
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum VerdictDevices {
    /// Every verdict counts, whatever its device.
    Any,
    /// The default: in an encrypted room a verdict counts only when it is
    /// encrypted by a device the approver cross-signed (a clear one there is
    /// refused: it names no device); in a plaintext room every verdict counts.
    #[default]
    CrossSigned,
    /// Only an encrypted verdict from a device the approver cross-signed counts: a
    /// verdict in a plaintext room is refused too.
    EncryptedCrossSigned,
}

impl VerdictDevices {
    /// Whether a verdict from `device` counts. Errors: the [`DropReason`] to drop it
    /// with: [`DropReason::NotCrossSigned`] (an encrypted verdict from a device not
    /// cross-signed), [`DropReason::ClearVerdict`] (a clear one where the setting
    /// asks for encryption).
    pub fn admits(self, device: DeviceTrust) -> Result<(), DropReason> {
        match (self, device) {
            (VerdictDevices::Any, _) | (_, DeviceTrust::CrossSigned) => Ok(()),
            (_, DeviceTrust::NotCrossSigned) => Err(DropReason::NotCrossSigned),
            (VerdictDevices::CrossSigned, DeviceTrust::PlaintextRoom) => Ok(()),
            (_, DeviceTrust::PlaintextRoom | DeviceTrust::UnencryptedInEncryptedRoom) => {
                Err(DropReason::ClearVerdict)
            }
        }
    }
}

/// The default of [`IdentityConfig::undecryptable_grace_ms`]: 30 s. A room key
/// usually comes in the same sync as the event or the next one; a key that a client
/// withholds (it shares only with verified devices) never comes.
pub const DEFAULT_UNDECRYPTABLE_GRACE_MS: Millis = 30_000;

/// The default of [`IdentityConfig::attach_grace_ms`]: 1 s, about twenty times the
/// 53 ms Claude Code 2.1.332 took on an idle machine to register its channel handler
/// after its GET stream opened (`tests/e2e/scenarios/claude_code.rs`, scenario d).
pub const DEFAULT_ATTACH_GRACE_MS: Millis = 1_000;

/// The default of [`IdentityConfig::typing_cap_ms`]: 10 minutes, a long agent turn.
pub const DEFAULT_TYPING_CAP_MS: Millis = 600_000;

fn default_typing_cap_ms() -> Millis {
    DEFAULT_TYPING_CAP_MS
}

fn default_attach_grace_ms() -> Millis {
    DEFAULT_ATTACH_GRACE_MS
}

fn default_undecryptable_grace_ms() -> Millis {
    DEFAULT_UNDECRYPTABLE_GRACE_MS
}

fn default_prompt_memory() -> usize {
    DEFAULT_PROMPT_MEMORY
}

/// What is wrong with an [`IdentityConfig`]; each message names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// An approver is not among `allowed_senders`.
    #[error("approvers: {0} is not in allowed_senders (approvers must be a subset)")]
    ApproverNotAllowed(UserId),
    /// The identity itself is listed as a sender: its own events are never input.
    #[error("allowed_senders: {0} is the identity's own user id")]
    SelfAllowed(UserId),
    /// A duration or cap is zero where that would disable the feature by accident.
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
    /// The settle window is not shorter than the prompt's time to live: a verdict by
    /// reaction could never settle before the prompt expires.
    #[error(
        "settle_ms ({settle_ms} ms) must be less than prompt_ttl_ms ({prompt_ttl_ms} ms): \
         a verdict by reaction could never settle before the prompt expires"
    )]
    SettleNotShorterThanTtl {
        settle_ms: Millis,
        prompt_ttl_ms: Millis,
    },
    /// A policy rule cannot work as written ([`crate::policy::check`]).
    #[error("policy: {0}")]
    Policy(crate::policy::RuleProblem),
}

impl IdentityConfig {
    /// Settings with the documented defaults: no approvers beyond `allowed_senders`,
    /// no fixed permission room.
    pub fn new(user_id: UserId, allowed_senders: impl IntoIterator<Item = UserId>) -> Self {
        Self {
            user_id,
            allowed_senders: allowed_senders.into_iter().collect(),
            approvers: None,
            permission_room: None,
            prompt_ttl_ms: DEFAULT_PROMPT_TTL_MS,
            settle_ms: DEFAULT_SETTLE_MS,
            reaction_keys: ReactionKeys::default(),
            max_prompts: DEFAULT_MAX_PROMPTS,
            replay_budget: DEFAULT_REPLAY_BUDGET,
            queue_cap: DEFAULT_QUEUE_CAP,
            body_cap_bytes: DEFAULT_BODY_CAP_BYTES,
            quote_cap_chars: DEFAULT_QUOTE_CAP_CHARS,
            log_cap: DEFAULT_LOG_CAP,
            prompt_memory: DEFAULT_PROMPT_MEMORY,
            undecryptable_grace_ms: DEFAULT_UNDECRYPTABLE_GRACE_MS,
            undecryptable_notice: false,
            verdict_devices: VerdictDevices::default(),
            attach_grace_ms: DEFAULT_ATTACH_GRACE_MS,
            typing_cap_ms: DEFAULT_TYPING_CAP_MS,
            policy: Vec::new(),
            policy_room: None,
        }
    }

    /// Checks the settings. Errors: [`ConfigError`], the first problem found (the
    /// identity's own id among the senders, a stray approver, a zero, then the
    /// settle window against the time to live).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.allowed_senders.contains(&self.user_id) {
            return Err(ConfigError::SelfAllowed(self.user_id.clone()));
        }
        if let Some(approvers) = &self.approvers {
            if let Some(stray) = approvers
                .iter()
                .find(|a| !self.allowed_senders.contains(*a))
            {
                return Err(ConfigError::ApproverNotAllowed(stray.clone()));
            }
        }
        let nonzero = [
            ("prompt_ttl_ms", self.prompt_ttl_ms as usize),
            ("settle_ms", self.settle_ms as usize),
            ("max_prompts", self.max_prompts),
            ("replay_budget", self.replay_budget),
            ("queue_cap", self.queue_cap),
            ("body_cap_bytes", self.body_cap_bytes),
            ("quote_cap_chars", self.quote_cap_chars),
            ("log_cap", self.log_cap),
            ("prompt_memory", self.prompt_memory),
        ];
        if let Some((name, _)) = nonzero.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::Zero(name));
        }
        if self.settle_ms >= self.prompt_ttl_ms {
            return Err(ConfigError::SettleNotShorterThanTtl {
                settle_ms: self.settle_ms,
                prompt_ttl_ms: self.prompt_ttl_ms,
            });
        }
        if let Some(problem) = crate::policy::check(&self.policy, self.approver_count())
            .into_iter()
            .next()
        {
            return Err(ConfigError::Policy(problem));
        }
        Ok(())
    }

    /// Whether `user` may answer prompts (exact MXID match).
    pub fn is_approver(&self, user: &UserId) -> bool {
        match &self.approvers {
            Some(approvers) => approvers.contains(user),
            None => self.allowed_senders.contains(user),
        }
    }

    /// How many approvers the identity has.
    pub fn approver_count(&self) -> usize {
        self.approvers
            .as_ref()
            .unwrap_or(&self.allowed_senders)
            .len()
    }

    /// Whether the identity relays permission requests at all (it has approvers).
    /// The server declares `claude/channel/permission` only when this holds.
    pub fn relays_permissions(&self) -> bool {
        match &self.approvers {
            Some(approvers) => !approvers.is_empty(),
            None => !self.allowed_senders.is_empty(),
        }
    }

    /// The sender gate: what `sender` is to this identity. Runs before every other
    /// branch; its result is an argument of [`crate::classify`].
    pub fn gate(&self, sender: &UserId) -> Gate {
        if *sender == self.user_id {
            Gate::Own
        } else if !self.allowed_senders.contains(sender) {
            Gate::Stranger
        } else if self.is_approver(sender) {
            Gate::Approver
        } else {
            Gate::Allowed
        }
    }
}

/// The sender gate's answer for one event's sender. Matched by exact MXID only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Gate {
    /// The identity's own account.
    Own,
    /// Not in `allowed_senders`: nothing it sends is pushed or counted.
    Stranger,
    /// In `allowed_senders` but not an approver: may chat, may not answer prompts.
    Allowed,
    /// In `allowed_senders` and an approver.
    Approver,
}
