//! End-to-end encryption at the ingress: events the SDK decrypts late handed to
//! the model again ([`add_redecryption`]), the device an event came from in the
//! model's terms ([`sender_device`]; the trust rule is [`mc_adapters::device`]), and
//! the once-at-start report of the device's cross-signing and key backup
//! ([`report_device_state`]).

use super::timeline::timeline_input;
use super::Identity;
use crate::engine::EngineHandle;
use matrix_sdk::deserialized_responses::{EncryptionInfo, VerificationLevel, VerificationState};
use matrix_sdk::Room;
use mc_adapters::device::{device_of, Verification};
use mc_model::{DeviceTrust, IdentityId};

/// Hands every event the SDK decrypts late (its room key came after the event: by
/// to-device message, forwarded, or from key backup) to the model as what it is,
/// through [`timeline_input`] like any timeline event. The model parked it when it
/// came undecryptable (`Input::Undecryptable`); event handlers do not fire again for
/// it, only matrix-sdk's redecryptor reports it (`RedecryptorReport::ResolvedUtds`),
/// which needs the event cache subscribed before the first sync.
pub(super) fn add_redecryption(identity: &Identity, engine: EngineHandle) -> anyhow::Result<()> {
    use futures::StreamExt as _;
    use matrix_sdk::event_cache::RedecryptorReport;
    let client = identity.client.clone();
    client.event_cache().subscribe()?;
    let id = IdentityId(identity.name.clone());
    let health = identity.health.clone();
    tokio::spawn(async move {
        let mut reports = client.event_cache().subscribe_to_decryption_reports();
        while let Some(report) = reports.next().await {
            match report {
                Ok(RedecryptorReport::ResolvedUtds { room_id, events }) => {
                    let Some(room) = client.get_room(&room_id) else {
                        tracing::warn!(identity = %id, room = %room_id, "decrypted events of an unknown room");
                        continue;
                    };
                    for event_id in events {
                        match room.event(&event_id, None).await {
                            Ok(event) => {
                                tracing::info!(identity = %id, room = %room_id, event = %event_id, "decrypted late");
                                let device =
                                    sender_device(event.encryption_info().map(|i| &**i), &room)
                                        .await;
                                let input =
                                    timeline_input(&id, &room, event.raw().json().get(), device)
                                        .await;
                                let _ = engine.submit(input);
                            }
                            Err(e) => tracing::warn!(
                                identity = %id, room = %room_id, event = %event_id,
                                "an event decrypted late could not be read again: {e}"
                            ),
                        }
                    }
                }
                Ok(RedecryptorReport::BackupAvailable) => {
                    tracing::info!(identity = %id, "a room key backup became available");
                }
                Ok(RedecryptorReport::Lagging) => {
                    // matrix-sdk's report names no room: it may concern any.
                    tracing::warn!(
                        identity = %id,
                        "matrix-sdk's redecryptor lagged and may have missed room keys: an \
                         event decrypted late may stay told as undecryptable (counted in \
                         /health)"
                    );
                    health.decryption_reports_missed();
                }
                Err(lagged) => {
                    tracing::warn!(
                        identity = %id,
                        "missed some of matrix-sdk's decryption reports ({lagged}; their rooms \
                         are unknown): an event decrypted late may stay told as undecryptable \
                         (counted in /health)"
                    );
                    health.decryption_reports_missed();
                }
            }
        }
    });
    Ok(())
}

/// What matrix-sdk's `EncryptionInfo` (present only for an event that came
/// encrypted) says of the sending device, in the model's terms: a device signed by
/// its owner's cross-signing identity (`Verified`, or `UnverifiedIdentity`: the
/// identity is trusted on first use) is [`DeviceTrust::CrossSigned`]; an unsigned
/// or unknown device, another user's device, and an identity that changed after it
/// was verified are [`DeviceTrust::NotCrossSigned`]. A clear event is
/// [`DeviceTrust::PlaintextRoom`] only when the SDK knows `room` is not encrypted:
/// its state is asked of the homeserver once when the sync did not settle it
/// (`latest_encryption_state`; a room joined over a filtered sync often reads as
/// unknown), and an error reads as encrypted.
/// Source: matrix-sdk-common `VerificationState`, the Matrix spec's "Cross-signing".
pub async fn sender_device(info: Option<&EncryptionInfo>, room: &Room) -> DeviceTrust {
    let plaintext_room = match room.latest_encryption_state().await {
        Ok(state) => !state.is_encrypted() && !state.is_unknown(),
        Err(e) => {
            tracing::warn!(room = %room.room_id(), "the room's encryption state: {e}");
            false
        }
    };
    device_of(
        info.map(|info| verification(&info.verification_state)),
        plaintext_room,
    )
}

/// matrix-sdk's `VerificationState` in our terms, variant for variant (the trust it
/// gives is [`device_of`]'s).
fn verification(state: &VerificationState) -> Verification {
    match state {
        VerificationState::Verified => Verification::Verified,
        VerificationState::Unverified(level) => match level {
            VerificationLevel::UnverifiedIdentity => Verification::UnverifiedIdentity,
            VerificationLevel::VerificationViolation => Verification::VerificationViolation,
            VerificationLevel::UnsignedDevice => Verification::UnsignedDevice,
            VerificationLevel::None(_) => Verification::UnknownDevice,
            VerificationLevel::MismatchedSender => Verification::MismatchedSender,
        },
    }
}

/// Logs, once at start, whether the identity's device is cross-signed (when it is
/// not, strict clients share no room keys with it (MSC4153), and the line names the
/// command that fixes it) and whether server-side key backup is on.
pub async fn report_device_state(identity: Identity) {
    use crate::crypto::OwnDeviceSigning;
    let name = &identity.name;
    identity
        .client
        .encryption()
        .wait_for_e2ee_initialization_tasks()
        .await;
    if identity.client.encryption().backups().are_enabled().await {
        tracing::info!(identity = %name, "key backup is on: new room keys go to the homeserver's backup");
    } else {
        tracing::info!(
            identity = %name,
            "key backup is off: room keys live only in this store (`matrix-channel recovery \
             enable --identity {name}` turns it on)"
        );
    }
    match crate::crypto::own_device_signing(&identity.client).await {
        Ok(OwnDeviceSigning::CrossSigned) => {
            tracing::info!(identity = %name, "the device is cross-signed by its own identity")
        }
        Ok(OwnDeviceSigning::NoCrossSigning) => tracing::warn!(
            identity = %name,
            "the account has no cross-signing keys, so clients that share room keys only with \
             cross-signed devices (Element's \"exclude insecure devices\") send this device \
             none: stop the server and run `matrix-channel login --identity {name}` (it asks \
             for the password once and sets up cross-signing)"
        ),
        Ok(OwnDeviceSigning::NotSigned) => tracing::warn!(
            identity = %name,
            "the account has cross-signing keys that this store does not hold, so this device \
             is not cross-signed and strict clients send it no room keys: stop the server and \
             run `matrix-channel recovery restore --identity {name}` with the recovery key on \
             stdin"
        ),
        Err(e) => {
            tracing::warn!(identity = %name, "could not read the device's cross-signing state: {e:#}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matrix_sdks_verification_states_map_to_ours_variant_for_variant() {
        use matrix_sdk::deserialized_responses::DeviceLinkProblem;
        let unverified = VerificationState::Unverified;
        let cases = [
            (VerificationState::Verified, Verification::Verified),
            (
                unverified(VerificationLevel::UnverifiedIdentity),
                Verification::UnverifiedIdentity,
            ),
            (
                unverified(VerificationLevel::VerificationViolation),
                Verification::VerificationViolation,
            ),
            (
                unverified(VerificationLevel::UnsignedDevice),
                Verification::UnsignedDevice,
            ),
            (
                unverified(VerificationLevel::None(DeviceLinkProblem::MissingDevice)),
                Verification::UnknownDevice,
            ),
            (
                unverified(VerificationLevel::None(DeviceLinkProblem::InsecureSource)),
                Verification::UnknownDevice,
            ),
            (
                unverified(VerificationLevel::MismatchedSender),
                Verification::MismatchedSender,
            ),
        ];
        for (state, expected) in cases {
            assert_eq!(verification(&state), expected, "{state:?}");
        }
    }
}
