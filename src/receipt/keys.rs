//! Signing keys: the operator's long-lived Ed25519 key pair on disk, and the per-run key minted in
//! the oracle zone's memory and endorsed by the operator key.
//!
//! Files: the private key is PKCS#8 PEM, created with O_EXCL and mode 0600 in a 0700 directory; the
//! public key is SubjectPublicKeyInfo PEM (what `openssl pkeyutl -pubin` reads). There is no default
//! key anywhere in the binary: every command that signs or verifies is given, or finds in the
//! operator's own config dir, a key the operator created with `loopexec keygen`.

use crate::safefs::{SafeDir, SafeFsError};
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// File names inside the key directory.
pub const PRIVATE_KEY_FILE: &str = "operator.key";
pub const PUBLIC_KEY_FILE: &str = "operator.pub";
/// The reviewer's pair (`keygen --reviewer`): signs comprehension acks, never a run.
pub const REVIEWER_PRIVATE_KEY_FILE: &str = "reviewer.key";
pub const REVIEWER_PUBLIC_KEY_FILE: &str = "reviewer.pub";

/// Domain separation for the endorsement of a run key.
const ENDORSEMENT_CONTEXT: &[u8] = b"loopexec/run-key-endorsement/v1";

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{0}")]
    Fs(#[from] SafeFsError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not an Ed25519 {what} in PEM form ({detail})")]
    Malformed {
        path: PathBuf,
        what: &'static str,
        detail: String,
    },
    #[error("{path}: private key is readable by others (mode {mode:o}); run `chmod 600` on it")]
    Permissions { path: PathBuf, mode: u32 },
    #[error("{path} already exists; pass --force to replace the key pair")]
    Exists { path: PathBuf },
    #[error("cannot find a config directory: set LOOPEXEC_CONFIG_DIR, XDG_CONFIG_HOME or HOME")]
    NoConfigDir,
    #[error("could not encode key: {0}")]
    Encode(String),
}

/// The operator's key directory: `$LOOPEXEC_CONFIG_DIR`, else `$XDG_CONFIG_HOME/loopexec`, else
/// `$HOME/.config/loopexec`.
pub fn default_key_dir() -> Result<PathBuf, KeyError> {
    if let Some(dir) = std::env::var_os("LOOPEXEC_CONFIG_DIR").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(dir).join("loopexec"));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".config").join("loopexec")),
        None => Err(KeyError::NoConfigDir),
    }
}

/// sha256 of the raw 32-byte public key, lowercase hex: how keys are named in receipts.
pub fn fingerprint(key: &VerifyingKey) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// The operator's signing key, loaded from disk.
pub struct OperatorKey {
    signing: SigningKey,
}

impl std::fmt::Debug for OperatorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "OperatorKey({})",
            fingerprint(&self.signing.verifying_key())
        )
    }
}

/// Paths written by [`generate_operator_key`].
#[derive(Debug, Clone)]
pub struct GeneratedKey {
    pub private_key: PathBuf,
    pub public_key: PathBuf,
    pub fingerprint: String,
    /// The raw public key, hex (what `--reviewer-pubkey` and `[comprehension] reviewers` take).
    pub public_hex: String,
}

/// Create a new operator key pair in `dir` (created 0700 if missing).
pub fn generate_operator_key(dir: &Path, force: bool) -> Result<GeneratedKey, KeyError> {
    generate_key_pair(dir, force, PRIVATE_KEY_FILE, PUBLIC_KEY_FILE)
}

/// Create a new reviewer key pair (reviewer.key / reviewer.pub) in `dir`.
pub fn generate_reviewer_key(dir: &Path, force: bool) -> Result<GeneratedKey, KeyError> {
    generate_key_pair(
        dir,
        force,
        REVIEWER_PRIVATE_KEY_FILE,
        REVIEWER_PUBLIC_KEY_FILE,
    )
}

fn generate_key_pair(
    dir: &Path,
    force: bool,
    private_name: &str,
    public_name: &str,
) -> Result<GeneratedKey, KeyError> {
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).map_err(|source| KeyError::Io {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    let safe = SafeDir::open_or_create(dir)?;
    for name in [private_name, public_name] {
        if safe.exists(name) && !force {
            return Err(KeyError::Exists {
                path: dir.join(name),
            });
        }
    }
    let signing = SigningKey::generate(&mut rand_core::OsRng);
    let private_pem = signing
        .to_pkcs8_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
        .map_err(|e| KeyError::Encode(e.to_string()))?;
    let public_pem = signing
        .verifying_key()
        .to_public_key_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
        .map_err(|e| KeyError::Encode(e.to_string()))?;
    // Write both under temporary names, then rename, so a failure leaves no half key pair.
    let tmp_priv = format!(".{private_name}.new-{}", std::process::id());
    let tmp_pub = format!(".{public_name}.new-{}", std::process::id());
    for (tmp, bytes, mode) in [
        (&tmp_priv, private_pem.as_bytes(), 0o600),
        (&tmp_pub, public_pem.as_bytes(), 0o644),
    ] {
        let _ = nix::unistd::unlinkat(
            Some(std::os::fd::AsRawFd::as_raw_fd(&safe.fd())),
            tmp.as_str(),
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        );
        let mut f = safe.create_new(tmp, mode)?;
        f.write_all(bytes)
            .and_then(|_| f.sync_all())
            .map_err(|source| KeyError::Io {
                path: dir.join(tmp),
                source,
            })?;
    }
    let fd = std::os::fd::AsRawFd::as_raw_fd(&safe.fd());
    for (tmp, name) in [(&tmp_priv, private_name), (&tmp_pub, public_name)] {
        nix::fcntl::renameat(Some(fd), tmp.as_str(), Some(fd), name).map_err(|e| KeyError::Io {
            path: dir.join(name),
            source: e.into(),
        })?;
    }
    safe.sync()?;
    Ok(GeneratedKey {
        private_key: dir.join(private_name),
        public_key: dir.join(public_name),
        public_hex: hex::encode(signing.verifying_key().as_bytes()),
        fingerprint: fingerprint(&signing.verifying_key()),
    })
}

/// The longest key file read (a PEM key is a few hundred bytes).
const MAX_KEY_FILE_BYTES: u64 = 64 * 1024;

/// Read a key file through one descriptor: opened once (no link, a regular file), and, for a
/// private key (`private`), its mode checked on that descriptor (fstat) before a byte is read, so
/// the file checked is the file read.
fn read_key_file(path: &Path, private: bool) -> Result<String, KeyError> {
    use std::os::unix::fs::PermissionsExt;
    let (dir, name) = split(path)?;
    let safe = SafeDir::open(&dir)?;
    let mut file = safe.open_read(&name)?;
    if private {
        let meta = file.metadata().map_err(|source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(KeyError::Permissions {
                path: path.to_path_buf(),
                mode,
            });
        }
    }
    let bytes = crate::safefs::read_bounded(&mut file, path, MAX_KEY_FILE_BYTES)?;
    String::from_utf8(bytes).map_err(|e| KeyError::Malformed {
        path: path.to_path_buf(),
        what: "key",
        detail: e.to_string(),
    })
}

fn split(path: &Path) -> Result<(PathBuf, String), KeyError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| KeyError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file path"),
        })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((dir, name))
}

impl OperatorKey {
    /// Load a PKCS#8 PEM private key, refusing one that group or others can read (checked on the
    /// descriptor it is read from) and a link.
    pub fn load(path: &Path) -> Result<OperatorKey, KeyError> {
        let pem = read_key_file(path, true)?;
        let signing = SigningKey::from_pkcs8_pem(&pem).map_err(|e| KeyError::Malformed {
            path: path.to_path_buf(),
            what: "private key",
            detail: e.to_string(),
        })?;
        Ok(OperatorKey { signing })
    }

    pub fn verifying_key(&self) -> VerifyingKey {
        self.signing.verifying_key()
    }

    pub fn sign(&self, message: &[u8]) -> Signature {
        self.signing.sign(message)
    }
}

/// Load an SPKI PEM public key.
pub fn load_public_key(path: &Path) -> Result<VerifyingKey, KeyError> {
    let pem = read_key_file(path, false)?;
    VerifyingKey::from_public_key_pem(&pem).map_err(|e| KeyError::Malformed {
        path: path.to_path_buf(),
        what: "public key",
        detail: e.to_string(),
    })
}

/// A key minted for one run. It lives only in the supervisor's memory and is dropped at seal.
pub struct RunKey {
    signing: SigningKey,
}

impl std::fmt::Debug for RunKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RunKey({})",
            hex::encode(self.signing.verifying_key().as_bytes())
        )
    }
}

impl RunKey {
    pub fn mint() -> RunKey {
        RunKey {
            signing: SigningKey::generate(&mut rand_core::OsRng),
        }
    }

    pub fn verifying_key(&self) -> VerifyingKey {
        self.signing.verifying_key()
    }

    pub fn sign(&self, message: &[u8]) -> Signature {
        self.signing.sign(message)
    }
}

/// The exact bytes the operator key signs to endorse a run key: a context string, the run id, the
/// run public key, and the hash of the receipt line before the endorsement (the `run_start` line,
/// which pins the run's whole configuration).
pub fn endorsement_message(
    run_id: &str,
    run_public_key: &VerifyingKey,
    prev_line_hash: &str,
) -> Vec<u8> {
    let mut msg = Vec::new();
    msg.extend_from_slice(ENDORSEMENT_CONTEXT);
    for part in [
        run_id.as_bytes(),
        hex::encode(run_public_key.as_bytes()).as_bytes(),
        prev_line_hash.as_bytes(),
    ] {
        msg.push(0);
        msg.extend_from_slice(part);
    }
    msg
}

/// Verify an Ed25519 signature given as base64.
pub fn verify_b64(key: &VerifyingKey, message: &[u8], sig_b64: &str) -> bool {
    use base64::Engine;
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(sig_b64) else {
        return false;
    };
    let Ok(sig) = Signature::from_slice(&bytes) else {
        return false;
    };
    key.verify(message, &sig).is_ok()
}

/// Parse a hex-encoded raw Ed25519 public key (as recorded in receipts).
pub fn public_key_from_hex(text: &str) -> Option<VerifyingKey> {
    let bytes = hex::decode(text).ok()?;
    let arr: [u8; 32] = bytes.try_into().ok()?;
    VerifyingKey::from_bytes(&arr).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keygen_writes_a_private_key_only_its_owner_can_read() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("keys");
        let generated = generate_operator_key(&dir, false).unwrap();
        let mode = std::fs::metadata(&generated.private_key)
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        let key = OperatorKey::load(&generated.private_key).unwrap();
        let public = load_public_key(&generated.public_key).unwrap();
        assert_eq!(key.verifying_key(), public);
        assert_eq!(fingerprint(&public), generated.fingerprint);
    }

    #[test]
    fn keygen_refuses_to_overwrite_without_force() {
        let tmp = tempfile::tempdir().unwrap();
        generate_operator_key(tmp.path(), false).unwrap();
        assert!(matches!(
            generate_operator_key(tmp.path(), false),
            Err(KeyError::Exists { .. })
        ));
        generate_operator_key(tmp.path(), true).unwrap();
    }

    #[test]
    fn a_private_key_reached_through_a_link_or_as_a_fifo_is_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let generated = generate_operator_key(dir.path(), false).unwrap();
        let link = dir.path().join("link.key");
        std::os::unix::fs::symlink(&generated.private_key, &link).unwrap();
        assert!(matches!(
            OperatorKey::load(&link),
            Err(KeyError::Fs(SafeFsError::Symlink { .. }))
        ));
        let fifo = dir.path().join("fifo.key");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // Refused on what the descriptor is, without blocking on a writer.
        assert!(matches!(
            OperatorKey::load(&fifo),
            Err(KeyError::Fs(SafeFsError::NotRegular { .. }))
        ));
        assert!(OperatorKey::load(&generated.private_key).is_ok());
    }

    #[test]
    fn a_group_readable_private_key_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let generated = generate_operator_key(tmp.path(), false).unwrap();
        std::fs::set_permissions(
            &generated.private_key,
            std::fs::Permissions::from_mode(0o640),
        )
        .unwrap();
        assert!(matches!(
            OperatorKey::load(&generated.private_key),
            Err(KeyError::Permissions { mode: 0o640, .. })
        ));
    }

    #[test]
    fn an_endorsement_binds_the_run_id_and_the_previous_line() {
        use base64::Engine;
        let tmp = tempfile::tempdir().unwrap();
        let generated = generate_operator_key(tmp.path(), false).unwrap();
        let operator = OperatorKey::load(&generated.private_key).unwrap();
        let run = RunKey::mint();
        let msg = endorsement_message("run-1", &run.verifying_key(), "ab");
        let sig = base64::engine::general_purpose::STANDARD.encode(operator.sign(&msg).to_bytes());
        assert!(verify_b64(&operator.verifying_key(), &msg, &sig));
        let other = endorsement_message("run-2", &run.verifying_key(), "ab");
        assert!(!verify_b64(&operator.verifying_key(), &other, &sig));
    }
}
