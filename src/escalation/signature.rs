//! The signature of a delivery: with a key configured, each HTTP delivery carries
//! `X-Loopexec-Timestamp: <unix seconds>` and
//! `X-Loopexec-Signature: sha256=<hex HMAC-SHA256(key, "<timestamp>.<body>")>`, the MAC over the
//! timestamp's decimal digits, one `.` and the exact body bytes (docs/gates.md, "Escalation").
//! A receiver recomputes it, compares in constant time, and refuses a timestamp too far from its
//! clock (a replay of an old delivery). The key is the bytes of the variable's value as given.

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub const SIGNATURE_HEADER: &str = "X-Loopexec-Signature";
pub const TIMESTAMP_HEADER: &str = "X-Loopexec-Timestamp";

fn mac_of(key: &[u8], timestamp: u64, body: &[u8]) -> Option<Hmac<Sha256>> {
    // Hmac takes a key of any length (a long one is hashed): this never fails in practice.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).ok()?;
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Some(mac)
}

/// The signature header's value for `body` sent at `timestamp` (unix seconds).
pub fn sign(key: &[u8], timestamp: u64, body: &[u8]) -> Option<String> {
    Some(format!(
        "sha256={}",
        hex::encode(mac_of(key, timestamp, body)?.finalize().into_bytes())
    ))
}

/// Whether `header` is the signature of `body` at `timestamp` under `key` (constant time).
pub fn verify(key: &[u8], timestamp: u64, body: &[u8], header: &str) -> bool {
    let Some(hex_mac) = header.strip_prefix("sha256=") else {
        return false;
    };
    let Ok(tag) = hex::decode(hex_mac) else {
        return false;
    };
    mac_of(key, timestamp, body).is_some_and(|mac| mac.verify_slice(&tag).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_rfc_4231_hmac_of_timestamp_dot_body() {
        let expected = {
            let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(b"k").unwrap();
            mac.update(b"1700000000.{\"a\":1}");
            hex::encode(mac.finalize().into_bytes())
        };
        assert_eq!(
            sign(b"k", 1_700_000_000, b"{\"a\":1}"),
            Some(format!("sha256={expected}"))
        );
    }

    #[test]
    fn hmac_sha256_matches_rfc_4231_case_2() {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_signature_verifies_only_for_its_key_timestamp_and_body() {
        let sig = sign(b"key", 5, b"body").unwrap();
        assert!(verify(b"key", 5, b"body", &sig));
        assert!(!verify(b"other", 5, b"body", &sig));
        assert!(!verify(b"key", 6, b"body", &sig));
        assert!(!verify(b"key", 5, b"bodY", &sig));
        assert!(!verify(b"key", 5, b"body", "sha256=zz"));
    }
}
