//! End-to-end encryption set-up of an identity's device: cross-signing, secret
//! storage and server-side key backup, through matrix-sdk's own APIs.
//!
//! Why: a person whose client shares room keys only with cross-signed devices
//! (MSC4153 "exclude insecure devices"; matrix-sdk's
//! `CollectStrategy::IdentityBasedStrategy`, Element's setting) withholds the keys of
//! every message from a device its owner has not signed, so the bot reads nothing.
//!
//! Sources (Client-Server API v1.16): "Cross-signing" (§ 11.12.2.2: a master key, a
//! self-signing key that signs the user's own devices, a user-signing key;
//! `POST /keys/device_signing/upload` needs user-interactive authentication),
//! "Secret storage" (§ 11.12.7: secrets in account data, encrypted with a key whose
//! id is in `m.secret_storage.default_key`) and "Server-side key backups"
//! (§ 11.12.5: `/room_keys/version`, keys encrypted to the backup's public key).
//! matrix-sdk's "recovery" is the two together: one recovery key opens secret storage,
//! which holds the cross-signing private keys and the backup's decryption key.

use anyhow::{anyhow, Context as _};
use matrix_sdk::encryption::recovery::RecoveryError;
use matrix_sdk::encryption::{BackupDownloadStrategy, EncryptionSettings};
use matrix_sdk::ruma::api::client::keys::get_keys;
use matrix_sdk::ruma::api::client::uiaa;
use matrix_sdk::Client;
use std::fmt;

/// The encryption settings of every identity's client.
///
/// - `auto_enable_cross_signing: false`: `login` bootstraps cross-signing itself, with
///   the password (the SDK's automatic bootstrap has no authentication to offer, and
///   its failure is only an ERROR line).
/// - `auto_enable_backups: false`: a backup is created only together with secret
///   storage and a recovery key (`matrix-channel recovery enable`); a backup whose key
///   lives only in this store would be lost with the store.
/// - `backup_download_strategy: AfterDecryptionFailure`: once a backup is enabled, a
///   message whose key this device lacks is looked up in the backup.
pub fn encryption_settings() -> EncryptionSettings {
    EncryptionSettings {
        auto_enable_cross_signing: false,
        backup_download_strategy: BackupDownloadStrategy::AfterDecryptionFailure,
        auto_enable_backups: false,
    }
}

/// Whether the identity's device is signed by its own self-signing key, as the
/// homeserver's `/keys/query` shows it to others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnDeviceSigning {
    /// The device is cross-signed by its owner: strict clients share keys with it.
    CrossSigned,
    /// The account has no cross-signing keys at all: `login` (with the password)
    /// creates them.
    NoCrossSigning,
    /// The account has cross-signing keys, but this device is not signed and its
    /// store does not hold the self-signing key (they were made by another device or
    /// an earlier store): `recovery restore` with the recovery key signs it.
    NotSigned,
}

impl fmt::Display for OwnDeviceSigning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OwnDeviceSigning::CrossSigned => "cross-signed by its own identity",
            OwnDeviceSigning::NoCrossSigning => {
                "not cross-signed: the account has no cross-signing keys"
            }
            OwnDeviceSigning::NotSigned => {
                "not cross-signed: the account's cross-signing keys are not in this store"
            }
        })
    }
}

/// Reads the device's trust from the homeserver (`POST /keys/query` for the own
/// user, so it is what others see). Errors: the homeserver cannot be reached, or the
/// client has no crypto store (not logged in).
pub async fn own_device_signing(client: &Client) -> anyhow::Result<OwnDeviceSigning> {
    let encryption = client.encryption();
    encryption.wait_for_e2ee_initialization_tasks().await;
    let user_id = client
        .user_id()
        .ok_or_else(|| anyhow!("the client is not logged in"))?
        .to_owned();
    // Whether the account has a master key at all, asked without the crypto store: a
    // store-updating query before this device's keys are uploaded (right after a
    // login) makes the SDK warn that the device "might have been deleted".
    let mut request = get_keys::v3::Request::new();
    request.device_keys.insert(user_id.clone(), Vec::new());
    let response = client
        .send(request)
        .await
        .context("reading the account's cross-signing keys (/keys/query)")?;
    if !response.master_keys.contains_key(&user_id) {
        return Ok(OwnDeviceSigning::NoCrossSigning);
    }
    // The SDK's own reading of the signatures (a fresh query into the store).
    encryption
        .request_user_identity(&user_id)
        .await
        .context("reading the account's cross-signing identity (/keys/query)")?;
    let device = encryption
        .get_own_device()
        .await?
        .ok_or_else(|| anyhow!("this device is not in its own crypto store"))?;
    if device.is_cross_signed_by_owner() {
        Ok(OwnDeviceSigning::CrossSigned)
    } else {
        Ok(OwnDeviceSigning::NotSigned)
    }
}

/// Creates the account's cross-signing keys and signs this device with them, if the
/// account has none yet ("Cross-signing": the first upload of
/// `POST /keys/device_signing/upload` may need user-interactive auth; this answers it
/// with `m.login.password`). The password is used for that one request and not kept.
///
/// Returns the device's trust afterwards: [`OwnDeviceSigning::CrossSigned`] when it
/// worked or was already so, [`OwnDeviceSigning::NotSigned`] when the account already has
/// keys this store does not hold (nothing is changed: replacing them would make every
/// person who trusts the bot see a changed identity; `recovery restore` is the way).
/// Errors: a wrong password (the homeserver's `M_FORBIDDEN`), a homeserver that offers
/// no password stage, or one that cannot be reached.
pub async fn bootstrap_cross_signing(
    client: &Client,
    password: &str,
) -> anyhow::Result<OwnDeviceSigning> {
    match own_device_signing(client).await? {
        OwnDeviceSigning::NoCrossSigning => {}
        other => return Ok(other),
    }
    let user_id = client
        .user_id()
        .ok_or_else(|| anyhow!("the client is not logged in"))?
        .to_owned();
    let encryption = client.encryption();
    if let Err(e) = encryption.bootstrap_cross_signing(None).await {
        let Some(info) = e.as_uiaa_response() else {
            return Err(anyhow!(e).context("uploading the cross-signing keys"));
        };
        let offers_password = info
            .flows
            .iter()
            .any(|flow| flow.stages.contains(&uiaa::AuthType::Password));
        if !offers_password {
            return Err(anyhow!(
                "the homeserver asks for interactive authentication without a password stage \
                 (flows: {:?}); cross-signing cannot be set up by password",
                info.flows
            ));
        }
        let mut auth = uiaa::Password::new(
            uiaa::UserIdentifier::Matrix(uiaa::MatrixUserIdentifier::new(user_id.to_string())),
            password.to_owned(),
        );
        auth.session = info.session.clone();
        encryption
            .bootstrap_cross_signing(Some(uiaa::AuthData::Password(auth)))
            .await
            .map_err(
                |e| match e.as_uiaa_response().and_then(|i| i.auth_error.as_ref()) {
                    Some(err) => anyhow!(
                        "the homeserver refused the password for cross-signing: {} ({:?})",
                        err.message,
                        err.kind
                    ),
                    None => anyhow!(e).context("uploading the cross-signing keys"),
                },
            )?;
    }
    let trust = own_device_signing(client).await?;
    if trust != OwnDeviceSigning::CrossSigned {
        return Err(anyhow!(
            "the cross-signing keys were uploaded but the device reads as {trust}"
        ));
    }
    Ok(trust)
}

/// Turns on server-side key backup and secret storage ("Server-side key backups",
/// "Secret storage"): a new backup version, a new secret storage key, and the
/// cross-signing private keys and the backup key stored encrypted in account data.
/// Returns the recovery key (base58, in groups of four, as Element shows it); it is
/// the only copy and is not stored. Waits until the room keys this store holds are
/// in the backup.
///
/// Errors: a backup made elsewhere already exists on the homeserver
/// (`BackupExistsOnServer`: restore with its recovery key instead), or the homeserver
/// refuses.
pub async fn enable_recovery(client: &Client) -> anyhow::Result<String> {
    client
        .encryption()
        .wait_for_e2ee_initialization_tasks()
        .await;
    client
        .encryption()
        .recovery()
        .enable()
        .wait_for_backups_to_upload()
        .await
        .map_err(|e| match e {
            RecoveryError::BackupExistsOnServer => anyhow!(
                "the account already has a key backup on the homeserver that this device is \
                 not connected to: restore with its recovery key \
                 (`matrix-channel recovery restore`)"
            ),
            e => anyhow!(e).context("enabling key backup and secret storage"),
        })
}

/// Restores from secret storage with the recovery key: imports the cross-signing
/// private keys (and signs this device with the self-signing key), connects to the
/// key backup, and downloads the backed-up room keys of every room the store knows,
/// so encrypted history reads. Returns the device's trust afterwards.
///
/// Errors: a key that does not open secret storage (the SDK's "wrong key" error), no
/// secret storage on the account (`recovery enable` was never run), or the homeserver
/// cannot be reached.
pub async fn restore_recovery(
    client: &Client,
    recovery_key: &str,
) -> anyhow::Result<OwnDeviceSigning> {
    let encryption = client.encryption();
    encryption.wait_for_e2ee_initialization_tasks().await;
    if !encryption
        .secret_storage()
        .is_enabled()
        .await
        .context("reading the account's secret storage")?
    {
        return Err(anyhow!(
            "the account has no secret storage on the homeserver: nothing to restore \
             (set it up with `matrix-channel recovery enable`)"
        ));
    }
    encryption
        .recovery()
        .recover(recovery_key.trim())
        .await
        .map_err(|e| anyhow!(e).context("opening secret storage with the recovery key"))?;
    if encryption.backups().are_enabled().await {
        for room in client.joined_rooms() {
            encryption
                .backups()
                .download_room_keys_for_room(room.room_id())
                .await
                .with_context(|| format!("downloading the room keys of {}", room.room_id()))?;
        }
    }
    own_device_signing(client).await
}

/// Drops two kinds of matrix-sdk log lines that report no fault (a `tracing` layer
/// whose `event_enabled` vetoes them for every layer):
///
/// - ERROR `matrix_sdk::http_client` "Error while sending request" with a `404` and
///   "Account data not found": matrix-sdk's recovery set-up reads account data such
///   as `m.secret_storage.default_key` at every start, and its HTTP client logs every
///   non-2xx answer at ERROR; 404 is how the homeserver says "not set" ("Secret
///   storage": no default key means no secret storage).
/// - WARN `matrix_sdk_crypto::backups` "Trying to backup room keys but no backup key
///   was found": matrix-sdk triggers a backup after every sync response, also when no
///   backup is configured. [`crate::matrix::report_device_state`] says once at start
///   whether key backup is on.
pub struct SdkNoise;

impl SdkNoise {
    /// Whether the event is one of the lines above.
    pub fn is_noise(event: &tracing::Event<'_>) -> bool {
        let meta = event.metadata();
        let kind = match (meta.target(), *meta.level()) {
            ("matrix_sdk::http_client", tracing::Level::ERROR) => 0,
            ("matrix_sdk_crypto::backups", tracing::Level::WARN) => 1,
            _ => return false,
        };
        let mut message = Message(String::new());
        event.record(&mut message);
        let message = message.0;
        if kind == 0 {
            message.starts_with("Error while sending request")
                && message.contains("status_code: 404")
                && message.contains("\"Account data not found\"")
        } else {
            message == "Trying to backup room keys but no backup key was found"
        }
    }
}

struct Message(String);

impl tracing::field::Visit for Message {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for SdkNoise {
    fn event_enabled(
        &self,
        event: &tracing::Event<'_>,
        _cx: tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        !SdkNoise::is_noise(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::SubscriberExt as _;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_sdks_unset_account_data_404s_and_backup_warnings_are_dropped_and_nothing_else() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish()
            .with(SdkNoise);
        tracing::subscriber::with_default(subscriber, || {
            let e = r#"Api(Server(MatrixError(Error { status_code: 404, body: Standard(StandardErrorBody { kind: NotFound, message: "Account data not found" }) })))"#;
            tracing::error!(target: "matrix_sdk::http_client", "Error while sending request: {e}");
            tracing::warn!(target: "matrix_sdk_crypto::backups", "Trying to backup room keys but no backup key was found");
            // Kept: another status, another message, another target or level.
            let forbidden = r#"Api(Server(MatrixError(Error { status_code: 403, body: Standard(StandardErrorBody { kind: Forbidden, message: "Invalid password" }) })))"#;
            tracing::error!(target: "matrix_sdk::http_client", "Error while sending request: {forbidden}");
            let room = r#"Api(Server(MatrixError(Error { status_code: 404, body: Standard(StandardErrorBody { kind: NotFound, message: "Room not found" }) })))"#;
            tracing::error!(target: "matrix_sdk::http_client", "Error while sending request: {room}");
            tracing::error!(target: "matrix_sdk::other", "Error while sending request: {e}");
            tracing::warn!(target: "matrix_sdk_crypto::backups", "Trying to backup room keys but the backup key wasn't uploaded");
            tracing::error!(target: "matrix_sdk_crypto::backups", "Trying to backup room keys but no backup key was found");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5, "{text}");
        assert!(lines[0].contains("Invalid password"), "{text}");
        assert!(lines[1].contains("Room not found"), "{text}");
        assert!(lines[2].contains("matrix_sdk::other"), "{text}");
        assert!(lines[3].contains("wasn't uploaded"), "{text}");
        assert!(lines[4].contains("ERROR"), "{text}");
    }
}
