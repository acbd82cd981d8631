//! DSSE envelopes (Dead Simple Signing Envelope, v1): the pre-authentication encoding that binds
//! the payload type to the payload, and the JSON envelope that carries the signatures.

use base64::Engine;
use serde::{Deserialize, Serialize};

/// The payload type of an in-toto Statement: the only type loopexec signs or accepts.
pub const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// One signature of an envelope. `keyid` is `run:<hex public key>` for the run key or
/// `operator:<sha256 fingerprint>` for an operator's attestation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvelopeSignature {
    pub keyid: String,
    pub sig: String,
}

/// The JSON envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Envelope {
    pub payload_type: String,
    pub payload: String,
    pub signatures: Vec<EnvelopeSignature>,
}

/// PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body, lengths in ASCII decimal.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + payload_type.len() + 32);
    out.extend_from_slice(
        format!(
            "DSSEv1 {} {} {} ",
            payload_type.len(),
            payload_type,
            payload.len()
        )
        .as_bytes(),
    );
    out.extend_from_slice(payload);
    out
}

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub fn unb64(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

impl Envelope {
    /// The decoded payload bytes.
    pub fn payload_bytes(&self) -> Option<Vec<u8>> {
        unb64(&self.payload)
    }

    /// The bytes every signature of this envelope signs.
    pub fn signed_bytes(&self) -> Option<Vec<u8>> {
        Some(pae(&self.payload_type, &self.payload_bytes()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_matches_the_dsse_specification_example_shape() {
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
    }

    #[test]
    fn an_envelope_with_unknown_fields_is_refused() {
        let text = r#"{"payloadType":"x","payload":"","signatures":[],"extra":1}"#;
        assert!(serde_json::from_str::<Envelope>(text).is_err());
    }
}
