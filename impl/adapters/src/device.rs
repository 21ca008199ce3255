//! The device a timeline event came from, in the model's terms ([`DeviceTrust`]):
//! what the Matrix library says of an encrypted event's sending device
//! ([`Verification`], named after matrix-sdk-common's `VerificationState` and
//! `VerificationLevel`), and whether the room is known not to be encrypted.
//! Source: the Matrix spec's "Cross-signing".

use mc_model::DeviceTrust;

/// What the library says of the device an encrypted event came from (matrix-sdk's
/// `EncryptionInfo::verification_state`, variant for variant).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verification {
    /// `Verified`: the device is signed by its owner's identity, which is verified.
    Verified,
    /// `Unverified(UnverifiedIdentity)`: signed by its owner's identity, which is
    /// trusted on first use.
    UnverifiedIdentity,
    /// `Unverified(VerificationViolation)`: the owner's identity changed after it was
    /// verified.
    VerificationViolation,
    /// `Unverified(UnsignedDevice)`: the owner's identity did not sign the device.
    UnsignedDevice,
    /// `Unverified(None(_))`: the device is unknown or missing.
    UnknownDevice,
    /// `Unverified(MismatchedSender)`: the device belongs to another user.
    MismatchedSender,
}

/// The model's [`DeviceTrust`] of an event: `verification` is `None` for an event
/// that came in the clear, `plaintext_room` whether the room is known not to be
/// encrypted. A device signed by its owner's cross-signing identity is
/// [`DeviceTrust::CrossSigned`]; an unsigned or unknown device, another user's
/// device, and an identity that changed after it was verified are
/// [`DeviceTrust::NotCrossSigned`]. A clear event is [`DeviceTrust::PlaintextRoom`]
/// only in a room known not to be encrypted.
pub fn device_of(verification: Option<Verification>, plaintext_room: bool) -> DeviceTrust {
    match verification {
        None if plaintext_room => DeviceTrust::PlaintextRoom,
        None => DeviceTrust::UnencryptedInEncryptedRoom,
        Some(Verification::Verified | Verification::UnverifiedIdentity) => DeviceTrust::CrossSigned,
        Some(
            Verification::VerificationViolation
            | Verification::UnsignedDevice
            | Verification::UnknownDevice
            | Verification::MismatchedSender,
        ) => DeviceTrust::NotCrossSigned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verification_state_maps_to_the_models_device_trust() {
        use Verification::*;
        let cases = [
            (None, true, DeviceTrust::PlaintextRoom),
            (None, false, DeviceTrust::UnencryptedInEncryptedRoom),
            (Some(Verified), false, DeviceTrust::CrossSigned),
            (Some(UnverifiedIdentity), false, DeviceTrust::CrossSigned),
            (
                Some(VerificationViolation),
                false,
                DeviceTrust::NotCrossSigned,
            ),
            (Some(UnsignedDevice), false, DeviceTrust::NotCrossSigned),
            (Some(UnknownDevice), false, DeviceTrust::NotCrossSigned),
            (Some(MismatchedSender), true, DeviceTrust::NotCrossSigned),
        ];
        for (verification, plaintext_room, expected) in cases {
            assert_eq!(
                device_of(verification, plaintext_room),
                expected,
                "{verification:?}"
            );
        }
    }

    #[test]
    fn an_encrypted_event_is_judged_by_its_device_whatever_the_room() {
        for plaintext_room in [false, true] {
            assert_eq!(
                device_of(Some(Verification::Verified), plaintext_room),
                DeviceTrust::CrossSigned
            );
            assert_eq!(
                device_of(Some(Verification::UnsignedDevice), plaintext_room),
                DeviceTrust::NotCrossSigned
            );
        }
    }
}
