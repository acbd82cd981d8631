//! SMALL's replayId: sha256 (lowercase hex) of intent + "\n" + plan + "\n" + constraints, the raw
//! bytes of the three files with CRLF turned to LF. Once set it is sticky: stored at
//! workspace.small.yml `run.replay_id`, stamped on each new progress entry, copied into the
//! handoff.

use super::yaml::Node;
use super::{Workspace, CONSTRAINTS, INTENT, PLAN, WORKSPACE};
use sha2::{Digest, Sha256};

fn lf(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n') {
            i += 1;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

/// The replayId of three files' raw bytes.
pub fn of(intent: &[u8], plan: &[u8], constraints: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(lf(intent));
    h.update(b"\n");
    h.update(lf(plan));
    h.update(b"\n");
    h.update(lf(constraints));
    hex::encode(h.finalize())
}

/// The replayId computed from the workspace's files as they are now.
pub(crate) fn compute(ws: &Workspace) -> String {
    let raw = |name| ws.file(name).map(|f| f.raw.as_slice()).unwrap_or_default();
    of(raw(INTENT), raw(PLAN), raw(CONSTRAINTS))
}

/// The sticky replayId, when workspace.small.yml holds a well-formed one.
pub(crate) fn sticky(ws: &Workspace) -> Option<String> {
    let id = ws
        .root(WORKSPACE)?
        .get("run")?
        .get("replay_id")
        .and_then(Node::as_str)?;
    is_replay_id(id).then(|| id.to_ascii_lowercase())
}

/// 64 hex digits.
pub fn is_replay_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replay_id_is_the_sha256_of_the_three_files_joined_by_newlines() {
        // printf 'I\nP\nC' | sha256sum
        assert_eq!(
            of(b"I", b"P", b"C"),
            "227456b3e8ae5102c344e44b8ed238f8165332090934d71d169541568d2a719f"
        );
    }

    #[test]
    fn crlf_is_hashed_as_lf() {
        assert_eq!(of(b"a\r\nb", b"p", b"c"), of(b"a\nb", b"p", b"c"));
    }
}
