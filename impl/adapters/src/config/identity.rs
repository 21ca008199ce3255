//! The `[identities.NAME]` tables: the identity names, the keys of one identity with
//! their defaults, and one identity per `user_id`.

use super::walk::Walk;
use super::IdentitySettings;
use figment::value::Value;
use mc_model::config::{
    DEFAULT_ATTACH_GRACE_MS, DEFAULT_PROMPT_TTL_MS, DEFAULT_REPLAY_BUDGET, DEFAULT_SETTLE_MS,
    DEFAULT_TYPING_CAP_MS, DEFAULT_UNDECRYPTABLE_GRACE_MS,
};
use mc_model::VerdictDevices;
use ruma::{OwnedRoomId, OwnedUserId};
use std::collections::BTreeMap;
use url::Url;

const IDENTITY_KEYS: [&str; 17] = [
    "homeserver",
    "user_id",
    "allowed_senders",
    "approvers",
    "permission_room",
    "prompt_ttl_secs",
    "settle_ms",
    "approve_keys",
    "deny_keys",
    "replay_budget",
    "undecryptable_grace_secs",
    "undecryptable_notice",
    "verdict_devices",
    "attach_grace_ms",
    "typing_cap_secs",
    "policy",
    "policy_room",
];

impl Walk<'_> {
    pub(super) fn identities(
        &mut self,
        value: Option<&Value>,
    ) -> Option<BTreeMap<String, IdentitySettings>> {
        let Some(value) = value else {
            self.issue(
                "identities",
                None,
                "no identities: add a table [identities.NAME] for each Matrix account",
            );
            return None;
        };
        let tables = self.table("identities", value)?;
        if tables.is_empty() {
            self.issue(
                "identities",
                Some(value),
                "no identities: add a table [identities.NAME] for each Matrix account",
            );
            return None;
        }
        let mut out = BTreeMap::new();
        let mut ok = true;
        for (name, table) in tables {
            let path = format!("identities.{name}");
            let valid_name = !name.is_empty()
                && name.len() <= 32
                && name
                    .bytes()
                    .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'));
            if !valid_name {
                ok = false;
                self.issue(
                    &path,
                    Some(table),
                    format!("identity name {name:?} must be 1 to 32 of a-z, 0-9, _ and -"),
                );
                continue;
            }
            match self.identity(&path, table) {
                Some(settings) => {
                    out.insert(name.clone(), settings);
                }
                None => ok = false,
            }
        }
        // One Matrix account is one identity (one device, one crypto store).
        let mut first_by_user: BTreeMap<&OwnedUserId, &String> = BTreeMap::new();
        let mut duplicates = Vec::new();
        for (name, settings) in &out {
            match first_by_user.get(&settings.user_id) {
                Some(first) => duplicates.push((name.clone(), (*first).clone())),
                None => {
                    first_by_user.insert(&settings.user_id, name);
                }
            }
        }
        for (name, first) in duplicates {
            let path = format!("identities.{name}.user_id");
            let value = tables.get(&name).and_then(|t| t.find_ref("user_id"));
            self.issue(
                &path,
                value,
                format!(
                    "the same user_id as identities.{first}: one Matrix account is one \
                     identity (two would share a device and break end-to-end encryption)"
                ),
            );
            ok = false;
        }
        ok.then_some(out)
    }

    pub(super) fn identity(&mut self, path: &str, table: &Value) -> Option<IdentitySettings> {
        let dict = self.table(path, table)?;
        self.unknown_keys(dict, &IDENTITY_KEYS, &format!("{path}."));
        let key = |k: &str| format!("{path}.{k}");
        let required = |walk: &mut Self, k: &str| {
            let v = dict.get(k);
            if v.is_none() {
                walk.issue(&key(k), Some(table), format!("missing key `{k}`"));
            }
            v
        };

        let homeserver = required(self, "homeserver")
            .and_then(|v| self.typed::<String>(&key("homeserver"), v).map(|s| (s, v)))
            .and_then(|(s, v)| match Url::parse(&s) {
                Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => Some(s),
                Ok(url) => {
                    self.issue(
                        &key("homeserver"),
                        Some(v),
                        format!(
                            "{s:?} is a {} URL; expected http or https with a host",
                            url.scheme()
                        ),
                    );
                    None
                }
                Err(e) => {
                    self.issue(
                        &key("homeserver"),
                        Some(v),
                        format!("{s:?} is not a URL: {e}"),
                    );
                    None
                }
            });
        let user_id = required(self, "user_id").and_then(|v| self.user_id(&key("user_id"), v));
        let allowed_senders = required(self, "allowed_senders")
            .and_then(|v| self.user_ids(&key("allowed_senders"), v));
        if allowed_senders.as_ref().is_some_and(Vec::is_empty) {
            self.warn(
                &key("allowed_senders"),
                dict.get("allowed_senders"),
                "empty: no message reaches this identity's sessions",
            );
        }
        let approvers = match dict.get("approvers") {
            None => Some(None),
            Some(v) => self.user_ids(&key("approvers"), v).map(Some),
        };
        let permission_room = match dict.get("permission_room") {
            None => Some(None),
            Some(v) => self
                .typed::<String>(&key("permission_room"), v)
                .and_then(|s| match OwnedRoomId::try_from(s.as_str()) {
                    Ok(id) => Some(Some(id)),
                    Err(e) => {
                        self.issue(
                            &key("permission_room"),
                            Some(v),
                            format!("{s:?} is not a Matrix room id: {e}"),
                        );
                        None
                    }
                }),
        };
        let prompt_ttl_secs = match dict.get("prompt_ttl_secs") {
            None => Some(DEFAULT_PROMPT_TTL_MS / 1000),
            Some(v) => self
                .typed::<u64>(&key("prompt_ttl_secs"), v)
                .filter(|secs| {
                    let fits = secs.checked_mul(1000).is_some();
                    if !fits {
                        self.issue(
                            &key("prompt_ttl_secs"),
                            Some(v),
                            "too large: the lifetime in milliseconds must fit in 64 bits",
                        );
                    }
                    fits
                }),
        };
        let settle_ms = match dict.get("settle_ms") {
            None => Some(DEFAULT_SETTLE_MS),
            Some(v) => self.typed::<u64>(&key("settle_ms"), v),
        };
        let replay_budget = match dict.get("replay_budget") {
            None => Some(DEFAULT_REPLAY_BUDGET),
            Some(v) => self.typed::<usize>(&key("replay_budget"), v),
        };
        let undecryptable_grace_secs = match dict.get("undecryptable_grace_secs") {
            None => Some(DEFAULT_UNDECRYPTABLE_GRACE_MS / 1000),
            Some(v) => self
                .typed::<u64>(&key("undecryptable_grace_secs"), v)
                .filter(|secs| {
                    let fits = secs.checked_mul(1000).is_some();
                    if !fits {
                        self.issue(
                            &key("undecryptable_grace_secs"),
                            Some(v),
                            "too large: the grace period in milliseconds must fit in 64 bits",
                        );
                    }
                    fits
                }),
        };
        let attach_grace_ms = match dict.get("attach_grace_ms") {
            None => Some(DEFAULT_ATTACH_GRACE_MS),
            Some(v) => self.typed::<u64>(&key("attach_grace_ms"), v),
        };
        let typing_cap_secs = match dict.get("typing_cap_secs") {
            None => Some(DEFAULT_TYPING_CAP_MS / 1000),
            Some(v) => self
                .typed::<u64>(&key("typing_cap_secs"), v)
                .filter(|secs| {
                    let fits = secs.checked_mul(1000).is_some();
                    if !fits {
                        self.issue(
                            &key("typing_cap_secs"),
                            Some(v),
                            "too large: the cap in milliseconds must fit in 64 bits",
                        );
                    }
                    fits
                }),
        };
        let undecryptable_notice = match dict.get("undecryptable_notice") {
            None => Some(false),
            Some(v) => self.typed::<bool>(&key("undecryptable_notice"), v),
        };
        let verdict_devices = match dict.get("verdict_devices") {
            None => Some(VerdictDevices::default()),
            Some(v) => self.typed::<VerdictDevices>(&key("verdict_devices"), v),
        };
        if verdict_devices == Some(VerdictDevices::EncryptedCrossSigned)
            && !dict.contains_key("permission_room")
        {
            self.warn(
                &key("verdict_devices"),
                dict.get("verdict_devices"),
                "encrypted_cross_signed without a permission_room: a prompt posted in a \
                 plaintext room can only expire",
            );
        }
        let approve_keys = match dict.get("approve_keys") {
            None => Some(None),
            Some(v) => self.strings(&key("approve_keys"), v).map(Some),
        };
        let deny_keys = match dict.get("deny_keys") {
            None => Some(None),
            Some(v) => self.strings(&key("deny_keys"), v).map(Some),
        };
        let reaction_keys = match (approve_keys, deny_keys) {
            (Some(approve), Some(deny)) => self.reaction_keys(path, dict, approve, deny),
            _ => None,
        };

        let policy = self.policy(path, dict);
        let policy_room = self.policy_room(path, dict);

        let settings = IdentitySettings {
            homeserver: homeserver?,
            user_id: user_id?,
            allowed_senders: allowed_senders?,
            approvers: approvers?,
            permission_room: permission_room?,
            prompt_ttl_secs: prompt_ttl_secs?,
            settle_ms: settle_ms?,
            reaction_keys: reaction_keys?,
            replay_budget: replay_budget?,
            undecryptable_grace_secs: undecryptable_grace_secs?,
            undecryptable_notice: undecryptable_notice?,
            verdict_devices: verdict_devices?,
            attach_grace_ms: attach_grace_ms?,
            typing_cap_secs: typing_cap_secs?,
            policy: policy?,
            policy_room: policy_room?,
        };
        self.check_identity(path, dict, &settings)
            .then_some(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_support::*;

    #[test]
    fn no_identities_is_an_error() {
        let issues = issues("listen = \"127.0.0.1:1\"\n", no_env());
        assert_eq!(issues.len(), 1);
        assert_eq!(
            issue_at(&issues, "identities").message,
            "no identities: add a table [identities.NAME] for each Matrix account"
        );
        let issues = issues_of("[identities]\n", &[]);
        issue_at(&issues, "identities");
        let issues = issues_of("identities = 5\n", &[]);
        assert_eq!(
            issue_at(&issues, "identities").message,
            "expected a table, found signed int `5`"
        );
    }

    #[test]
    fn identity_names_are_lowercase_letters_digits_dash_and_underscore() {
        let table = |name: &str| {
            format!(
                "[identities.{name}]\nhomeserver = \"http://h\"\nuser_id = \"@u{}:h\"\nallowed_senders = []\n",
                name.len()
            )
        };
        let long = "a".repeat(33);
        let text = [
            table("Bot"),
            table("\"a.b\""),
            table(&long),
            table("\"\""),
            table(&"b".repeat(32)),
        ]
        .concat();
        let issues = issues(&text, no_env());
        assert_eq!(issues.len(), 4, "{issues:#?}");
        assert!(issue_at(&issues, "identities.Bot")
            .message
            .contains("must be 1 to 32 of a-z, 0-9, _ and -"));
        issue_at(&issues, "identities.a.b");
        issue_at(&issues, &format!("identities.{long}"));
        issue_at(&issues, "identities.");
    }

    #[test]
    fn required_identity_keys_are_named_when_missing() {
        let issues = issues("[identities.bot]\n", no_env());
        assert_eq!(issues.len(), 3, "{issues:#?}");
        for key in ["homeserver", "user_id", "allowed_senders"] {
            assert_eq!(
                issue_at(&issues, &format!("identities.bot.{key}")).message,
                format!("missing key `{key}`")
            );
        }
    }

    #[test]
    fn a_homeserver_must_be_an_http_or_https_url_with_a_host() {
        for (homeserver, expected) in [
            (
                "ftp://example.org",
                "\"ftp://example.org\" is a ftp URL; expected http or https with a host",
            ),
            (
                "example.org",
                "\"example.org\" is not a URL: relative URL without a base",
            ),
            (
                "unix:/run/socket",
                "\"unix:/run/socket\" is a unix URL; expected http or https with a host",
            ),
        ] {
            let text = MINIMAL.replace("http://127.0.0.1:8008", homeserver);
            let issues = issues(&text, no_env());
            assert_eq!(
                issue_at(&issues, "identities.bot.homeserver").message,
                expected
            );
        }
        assert!(load(
            &MINIMAL.replace("http://127.0.0.1:8008", "https://[::1]:8448/"),
            no_env()
        )
        .is_ok());
    }

    #[test]
    fn two_identities_with_one_user_id_are_an_error() {
        let text = format!(
            "{MINIMAL}\n[identities.twin]\nhomeserver = \"http://h\"\nuser_id = \"@bot:localhost\"\nallowed_senders = []\n"
        );
        let issues = issues(&text, no_env());
        assert_eq!(issues.len(), 1, "{issues:#?}");
        assert!(issue_at(&issues, "identities.twin.user_id")
            .message
            .starts_with("the same user_id as identities.bot: one Matrix account is one identity"));
    }

    #[test]
    fn a_prompt_lifetime_that_overflows_milliseconds_is_an_error() {
        let issues = issues(
            &with_line(&format!("prompt_ttl_secs = {}", i64::MAX)),
            no_env(),
        );
        assert_eq!(
            issue_at(&issues, "identities.bot.prompt_ttl_secs").message,
            "too large: the lifetime in milliseconds must fit in 64 bits"
        );
    }

    #[test]
    fn an_undecryptable_grace_period_that_overflows_milliseconds_is_an_error() {
        let issues = issues(
            &with_line(&format!("undecryptable_grace_secs = {}", i64::MAX)),
            no_env(),
        );
        assert_eq!(
            issue_at(&issues, "identities.bot.undecryptable_grace_secs").message,
            "too large: the grace period in milliseconds must fit in 64 bits"
        );
        let fits = u64::MAX / 1000;
        let config = load(
            &with_line(&format!("undecryptable_grace_secs = {fits}")),
            no_env(),
        );
        assert!(config.is_ok(), "{config:?}");
    }

    #[test]
    fn a_typing_cap_that_overflows_milliseconds_is_an_error() {
        let issues = issues(
            &with_line(&format!("typing_cap_secs = {}", i64::MAX)),
            no_env(),
        );
        assert_eq!(
            issue_at(&issues, "identities.bot.typing_cap_secs").message,
            "too large: the cap in milliseconds must fit in 64 bits"
        );
        let fits = u64::MAX / 1000;
        let config = load(&with_line(&format!("typing_cap_secs = {fits}")), no_env());
        assert!(config.is_ok(), "{config:?}");
    }

    #[test]
    fn verdict_devices_takes_the_three_names_and_refuses_others() {
        for (name, expected) in [
            ("any", VerdictDevices::Any),
            ("cross_signed", VerdictDevices::CrossSigned),
            (
                "encrypted_cross_signed",
                VerdictDevices::EncryptedCrossSigned,
            ),
        ] {
            let line = format!("permission_room = \"!r:localhost\"\nverdict_devices = \"{name}\"");
            let config = load(&with_line(&line), no_env()).unwrap();
            assert_eq!(config.identities["bot"].verdict_devices, expected, "{name}");
            assert_eq!(
                config.identities["bot"].model_config().verdict_devices,
                expected
            );
            assert_eq!(config.warnings, [], "{name}");
        }
        let issues = issues(&with_line("verdict_devices = \"verified\""), no_env());
        let message = &issue_at(&issues, "identities.bot.verdict_devices").message;
        assert!(message.contains("encrypted_cross_signed"), "{message}");
    }

    #[test]
    fn encrypted_cross_signed_without_a_permission_room_is_a_warning() {
        let config = load(
            &with_line("verdict_devices = \"encrypted_cross_signed\""),
            no_env(),
        )
        .unwrap();
        assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
        assert_eq!(config.warnings[0].path, "identities.bot.verdict_devices");
        assert!(config.warnings[0].message.contains("can only expire"));
    }

    #[test]
    fn an_undecryptable_notice_must_be_a_boolean() {
        let issues = issues(&with_line("undecryptable_notice = \"yes\""), no_env());
        assert!(issue_at(&issues, "identities.bot.undecryptable_notice")
            .message
            .contains("bool"));
    }
}
