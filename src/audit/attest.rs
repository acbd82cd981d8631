//! The operator's attestation of a sealed run: its signature added to the envelope, only after
//! the run verifies against the same operator key.

use crate::receipt::dsse::{self, Envelope, EnvelopeSignature};
use crate::receipt::keys::OperatorKey;
use crate::receipt::seal::{operator_keyid, ENVELOPE_FILE, ENVELOPE_MAX_BYTES};
use crate::safefs::{SafeDir, SafeFsError};

#[derive(Debug, thiserror::Error)]
pub enum AttestError {
    #[error("refusing to attest: {0}")]
    NotVerified(String),
    #[error(transparent)]
    Fs(#[from] SafeFsError),
    #[error("could not encode the envelope: {0}")]
    Encode(String),
}

/// Add the operator's signature to a sealed run's envelope, after the run verifies against the
/// same operator key (a receipt sealed elsewhere is attested only if its run key is this
/// operator's). Idempotent: an existing signature by the same key is replaced.
pub fn attest_run(
    run_dir: &SafeDir,
    operator: &OperatorKey,
) -> Result<super::verify::Verification, AttestError> {
    let public = operator.verifying_key();
    let verification = super::verify::verify_run(run_dir, &public);
    if !verification.ok() {
        let failed: Vec<String> = verification
            .checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| format!("{}: {}", c.name, c.detail))
            .collect();
        return Err(AttestError::NotVerified(failed.join("; ")));
    }
    let bytes = run_dir.read(ENVELOPE_FILE, ENVELOPE_MAX_BYTES)?;
    let mut envelope: Envelope =
        serde_json::from_slice(&bytes).map_err(|e| AttestError::NotVerified(e.to_string()))?;
    let signed = envelope
        .signed_bytes()
        .ok_or_else(|| AttestError::NotVerified("payload is not base64".into()))?;
    let keyid = operator_keyid(&public);
    envelope.signatures.retain(|s| s.keyid != keyid);
    envelope.signatures.push(EnvelopeSignature {
        keyid,
        sig: dsse::b64(&operator.sign(&signed).to_bytes()),
    });
    let out =
        serde_json::to_vec_pretty(&envelope).map_err(|e| AttestError::Encode(e.to_string()))?;
    run_dir.write_atomic(ENVELOPE_FILE, &out)?;
    Ok(super::verify::verify_run(run_dir, &public))
}
