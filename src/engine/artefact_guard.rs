//! The artefact guard: the check runs what would be committed (issue 18, item 6). What the agent
//! wrote that git would not commit (t0's ignore rules, new caches) is already out of the
//! snapshot's tree, hidden from the check's copy and never delivered (`workspace::snapshot`,
//! `left_out`). What remains in the tree and carries no source to review — a build artefact by
//! its name or its first bytes (`workspace::artefact`: Python bytecode outside `__pycache__`,
//! shared objects, `.node` addons, WebAssembly, Java classes, object files, archives, native
//! executables) — would be committed and could be what the check loads instead of the source
//! beside it (an extension module wins over the `.py` of the same name; a sourceless `.pyc`
//! imports when its `.py` is gone; a `.node` is `require`d as is). Any such file the agent added
//! or changed halts the step `metric_integrity_violation` before the check, naming each file
//! (escaped, at most [`MAX_NAMED`], then a count and a digest).

use super::guards::{AgentStep, Guard, Objection};
use super::seats::Seat;
use crate::halt::HaltReason;
use crate::receipt::events::{FindingRecord, GuardRecord};
use crate::testreport::shown;
use crate::workspace::Artefact;
use sha2::{Digest, Sha256};

/// At most this many artefacts are named; the rest are counted and digested.
pub const MAX_NAMED: usize = 50;

/// Halts a step whose tree gains a build artefact.
pub struct ArtefactGuard;

/// The guard's record for the artefacts of `iteration`'s step, if it has any.
pub fn finding(iteration: u64, artefacts: &[Artefact]) -> Option<GuardRecord> {
    if artefacts.is_empty() {
        return None;
    }
    let path = |a: &Artefact| shown(&String::from_utf8_lossy(&a.path));
    let mut findings: Vec<FindingRecord> = artefacts
        .iter()
        .take(MAX_NAMED)
        .map(|a| FindingRecord {
            path: Some(path(a)),
            what: format!("build artefact in the tree: {} (by its {})", a.kind, a.by),
        })
        .collect();
    if artefacts.len() > MAX_NAMED {
        let mut h = Sha256::new();
        for a in artefacts {
            h.update(&a.path);
            h.update(b"\n");
        }
        findings.push(FindingRecord {
            path: None,
            what: format!(
                "build artefacts in the tree: {} more (sha256 of all {} paths, one a line: {})",
                artefacts.len() - MAX_NAMED,
                artefacts.len(),
                hex::encode(h.finalize())
            ),
        });
    }
    let named: Vec<String> = artefacts
        .iter()
        .take(3)
        .map(|a| format!("{} ({})", path(a), a.kind))
        .collect();
    let more = if artefacts.len() > 3 {
        format!(" and {} more", artefacts.len() - 3)
    } else {
        String::new()
    };
    Some(GuardRecord {
        iteration,
        guard: Seat::MetricIntegrity.as_str().to_string(),
        stage: "after_agent".to_string(),
        halt_reason: HaltReason::MetricIntegrityViolation,
        detail: format!(
            "the step adds {} build artefact(s) the tree would commit and the check could run instead of their source: {}{more}; \
             build them in the check from source, or have t0's .gitignore ignore them",
            artefacts.len(),
            named.join(", ")
        ),
        findings,
    })
}

impl Guard for ArtefactGuard {
    fn seat(&self) -> Seat {
        Seat::MetricIntegrity
    }

    fn after_agent(&mut self, step: &AgentStep<'_>) -> Option<Objection> {
        let (snapshot, _) = step.workspace?;
        finding(step.iteration, &snapshot.artefacts).map(Objection::Finding)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artefact(path: &[u8], kind: &'static str, by: &'static str) -> Artefact {
        Artefact {
            path: path.to_vec(),
            kind,
            by,
        }
    }

    #[test]
    fn no_artefact_no_finding() {
        assert_eq!(finding(1, &[]), None);
    }

    #[test]
    fn each_artefact_is_named_with_its_kind_and_how_it_was_recognised() {
        let found = finding(
            2,
            &[
                artefact(
                    b"calc/core.cpython-311-x86_64-linux-gnu.so",
                    "shared object",
                    "name",
                ),
                artefact(b"calc/helper.txt", "ELF binary", "content"),
            ],
        )
        .unwrap();
        assert_eq!(found.halt_reason, HaltReason::MetricIntegrityViolation);
        assert_eq!(
            (found.guard.as_str(), found.stage.as_str()),
            ("metric_integrity", "after_agent")
        );
        assert_eq!(
            found.findings,
            vec![
                FindingRecord {
                    path: Some("calc/core.cpython-311-x86_64-linux-gnu.so".into()),
                    what: "build artefact in the tree: shared object (by its name)".into()
                },
                FindingRecord {
                    path: Some("calc/helper.txt".into()),
                    what: "build artefact in the tree: ELF binary (by its content)".into()
                },
            ]
        );
        assert!(
            found
                .detail
                .starts_with("the step adds 2 build artefact(s)"),
            "{}",
            found.detail
        );
    }

    #[test]
    fn many_artefacts_are_named_up_to_the_bound_then_counted_and_digested_and_names_are_escaped() {
        let mut all: Vec<Artefact> = (0..55)
            .map(|i| artefact(format!("lib/{i:02}.so").as_bytes(), "shared object", "name"))
            .collect();
        all[0] = artefact(b"lib/\x1b[2J.so", "shared object", "name");
        let found = finding(3, &all).unwrap();
        assert_eq!(found.findings.len(), MAX_NAMED + 1);
        assert_eq!(found.findings[0].path.as_deref(), Some("lib/\\u{1b}[2J.so"));
        assert!(!found.detail.contains('\x1b'));
        let digest = hex::encode(Sha256::digest(
            all.iter()
                .map(|a| [a.path.as_slice(), b"\n"].concat())
                .collect::<Vec<_>>()
                .concat(),
        ));
        assert_eq!(found.findings[MAX_NAMED].what, format!("build artefacts in the tree: 5 more (sha256 of all 55 paths, one a line: {digest})"));
    }
}
