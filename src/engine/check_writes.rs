//! The check-writes guard: a check must not change the tree it tests (issue 12, item 4). After
//! every check on a detached workspace, once its process tree is dead and before any green
//! verdict, the check's scratch upper layer is read with the walker that reads the agent's layer
//! (`workspace::snapshot`, in its tree-paths scope: iterative, descriptor-relative, bounded, no
//! link followed, new paths never opened) and every entry that modified, replaced (a change of
//! type) or deleted (a whiteout, an opaque directory) a path of the tree under test is a
//! `metric_integrity_violation`, named (escaped, at most [`MAX_NAMED`], then a count and a
//! digest) with what happened to it. A copy-up whose content and mode equal the lower file is no
//! write; new files and directories (`__pycache__/`, `target/`, `.pytest_cache/`, coverage data,
//! a declared report) are none either, except where a created file stands for test data
//! (issue 18, item 5): a file created at a path t0 held (the agent deleted it; the check wrote
//! it afresh, as jest does with a missing snapshot) or at a protected path (the test surface: a
//! new golden in `testdata/`, a snapshot in `__snapshots__/`) is `created`, unless it is
//! [`harmless`]. A layer that cannot be read within the bounds is a violation too: a check whose
//! writes cannot be listed has not shown it left the tree alone.

use crate::receipt::events::{FindingRecord, GuardRecord};
use crate::testreport::shown;
use crate::workspace::{snapshot, Bounds, ChangeKind, EntryKind, Manifest};
use sha2::{Digest, Sha256};
use std::path::Path;

/// At most this many written paths are named in the finding; the rest are counted and digested.
pub const MAX_NAMED: usize = 50;

/// What a check did to one path of the tree it tested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// Other content, or another mode (executable bit), at the same kind of entry.
    Modified,
    /// Another kind of entry at the path (a file made a symlink or a directory, a directory made a file).
    Replaced,
    /// The path is gone.
    Deleted,
    /// A file the tree did not hold, at a path of the test surface or one t0 held.
    Created,
}

impl WriteKind {
    pub fn as_str(self) -> &'static str {
        match self {
            WriteKind::Modified => "modified",
            WriteKind::Replaced => "replaced",
            WriteKind::Deleted => "deleted",
            WriteKind::Created => "created",
        }
    }
}

/// One path of the tree under test the check wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeWrite {
    pub path: Vec<u8>,
    pub kind: WriteKind,
}

/// Why the check's writes could not be listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unlisted(pub String);

/// Whether a file or directory the check created at `path` is harmless whatever the path: a
/// cache or bytecode (`__pycache__/`, `*.pyc`, `.pytest_cache/`, `.mypy_cache/`, `.ruff_cache/`,
/// `.hypothesis/`, `.cache/`), coverage data (`.coverage`, `.coverage.*`), or a runner's record
/// of a mismatch that is never read back as the expectation (insta's `*.snap.new` and
/// `*.pending-snap`, ApprovalTests' `*.received.*`).
pub fn harmless(path: &[u8]) -> bool {
    let caches: [&[u8]; 7] = [
        b"__pycache__",
        b".pytest_cache",
        b".mypy_cache",
        b".ruff_cache",
        b".hypothesis",
        b".cache",
        b".tox",
    ];
    if path.split(|&b| b == b'/').any(|c| caches.contains(&c)) {
        return true;
    }
    let name = crate::workspace::tree_path::file_name(path);
    name.ends_with(b".pyc")
        || name == b".coverage"
        || name.starts_with(b".coverage.")
        || name.ends_with(b".snap.new")
        || name.ends_with(b".pending-snap")
        || name.windows(10).any(|w| w == b".received.")
}

/// Every path of `tested` (the tree as the check saw it) that the check's scratch upper layer
/// `upper` modified, replaced or deleted, and every file it created where `counts(path, is_dir)`
/// holds (a new directory it refuses is not descended into), in path order, read within `limits`.
pub fn writes(
    tested: &Manifest,
    upper: &Path,
    limits: &sandbox::WorkspaceLimits,
    counts: &dyn Fn(&[u8], bool) -> bool,
) -> Result<Vec<TreeWrite>, Unlisted> {
    let mut bounds = Bounds::snapshot(limits);
    let after = snapshot::over_tree_paths(tested, upper, &mut bounds, counts)
        .map_err(|e| Unlisted(e.to_string()))?;
    let mut out = Vec::new();
    for (path, change) in after.changes(tested) {
        let kind = match change {
            ChangeKind::Hardlinked => continue,
            // The other side of a replacement (reported at the deleted path), or a new file.
            ChangeKind::Added if tested.get(&path).is_some() || something_at(tested, &path) => {
                continue
            }
            ChangeKind::Added => WriteKind::Created,
            ChangeKind::Modified => {
                let same_kind = match (tested.get(&path), after.manifest.get(&path)) {
                    (Some(a), Some(b)) => a.kind == b.kind || (is_file(a.kind) && is_file(b.kind)),
                    _ => false,
                };
                if same_kind {
                    WriteKind::Modified
                } else {
                    WriteKind::Replaced
                }
            }
            ChangeKind::Deleted if something_at(&after.manifest, &path) => WriteKind::Replaced,
            ChangeKind::Deleted => WriteKind::Deleted,
        };
        out.push(TreeWrite { path, kind });
    }
    Ok(out)
}

fn is_file(kind: EntryKind) -> bool {
    matches!(kind, EntryKind::File | EntryKind::Executable)
}

/// Whether `tree` holds an entry beneath `path` or at one of its ancestors: the deleted `path`
/// was replaced by a directory, or a file took the place of a directory holding it.
fn something_at(tree: &Manifest, path: &[u8]) -> bool {
    if tree.has_beneath(path) {
        return true;
    }
    path.iter()
        .enumerate()
        .filter(|(_, b)| **b == b'/')
        .any(|(i, _)| tree.get(&path[..i]).is_some())
}

/// The guard's finding for a check of `iteration` (`what`: which run of the check, e.g. "the
/// check of iteration 3", "the check on t0"), if it wrote to its tree or its writes could not be
/// listed.
pub fn finding(
    iteration: u64,
    what: &str,
    listed: &Result<Vec<TreeWrite>, Unlisted>,
) -> Option<GuardRecord> {
    let record = |detail: String, findings: Vec<FindingRecord>| {
        super::coverage_guard::violation(iteration, detail, findings)
    };
    match listed {
        Err(Unlisted(why)) => Some(record(
            format!("{what} left writes that cannot be listed ({}), so it has not shown that it left the tree it tested unchanged", shown(why)),
            vec![],
        )),
        Ok(writes) if writes.is_empty() => None,
        Ok(writes) => {
            let named: Vec<String> = writes.iter().take(3).map(|w| format!("{} ({})", shown(&String::from_utf8_lossy(&w.path)), w.kind.as_str())).collect();
            let more = if writes.len() > 3 { format!(" and {} more", writes.len() - 3) } else { String::new() };
            Some(record(
                format!(
                    "{what} wrote to {} path(s) of the tree it tested: {}{more}; a check must leave the tree under test as it found it",
                    writes.len(),
                    named.join(", ")
                ),
                findings_of(writes),
            ))
        }
    }
}

/// Each write named (escaped), at most [`MAX_NAMED`], then a count and a digest of every path.
fn findings_of(writes: &[TreeWrite]) -> Vec<FindingRecord> {
    let mut out: Vec<FindingRecord> = writes
        .iter()
        .take(MAX_NAMED)
        .map(|w| FindingRecord {
            path: Some(shown(&String::from_utf8_lossy(&w.path))),
            what: format!("{} by the check", w.kind.as_str()),
        })
        .collect();
    if writes.len() > MAX_NAMED {
        let mut h = Sha256::new();
        for w in writes {
            h.update(&w.path);
            h.update(b"\n");
        }
        out.push(FindingRecord {
            path: None,
            what: format!(
                "written by the check: {} more (sha256 of all {} paths, one a line: {})",
                writes.len() - MAX_NAMED,
                writes.len(),
                hex::encode(h.finalize())
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::halt::HaltReason;
    use crate::workspace::object_id::blob_id;
    use crate::workspace::Entry;
    use std::os::unix::fs::PermissionsExt;

    fn tested() -> Manifest {
        let mut m = Manifest::default();
        for p in [
            "src/calc.py",
            "tests/test_calc.py",
            "tests/helpers.py",
            "run.sh",
            "docs/a",
            "docs/b",
        ] {
            let kind = if p == "run.sh" {
                EntryKind::Executable
            } else {
                EntryKind::File
            };
            m.insert(
                p.as_bytes().to_vec(),
                Entry {
                    kind,
                    oid: blob_id(p.as_bytes()),
                },
            )
            .unwrap();
        }
        m
    }

    fn listed(upper: &Path) -> Vec<(String, WriteKind)> {
        writes(
            &tested(),
            upper,
            &sandbox::WorkspaceLimits::default(),
            &|_, _| false,
        )
        .unwrap()
        .into_iter()
        .map(|w| (String::from_utf8_lossy(&w.path).into_owned(), w.kind))
        .collect()
    }

    fn whiteout(path: &Path) {
        nix::sys::stat::mknod(
            path,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::empty(),
            0,
        )
        .unwrap();
    }

    #[test]
    fn new_files_and_directories_are_no_writes_to_the_tree() {
        let upper = tempfile::tempdir().unwrap();
        let u = upper.path();
        std::fs::create_dir_all(u.join("tests/__pycache__")).unwrap();
        std::fs::write(
            u.join("tests/__pycache__/test_calc.cpython-311.pyc"),
            b"pyc",
        )
        .unwrap();
        std::fs::create_dir_all(u.join("target/debug/deps")).unwrap();
        std::fs::write(u.join("target/debug/deps/calc-1234"), b"elf").unwrap();
        std::fs::create_dir(u.join(".pytest_cache")).unwrap();
        std::fs::write(u.join(".coverage"), b"data").unwrap();
        assert_eq!(listed(u), vec![]);
    }

    #[test]
    fn a_file_created_where_it_counts_is_named_and_other_creations_are_not() {
        let upper = tempfile::tempdir().unwrap();
        let u = upper.path();
        std::fs::create_dir_all(u.join("tests/__snapshots__")).unwrap();
        std::fs::write(
            u.join("tests/__snapshots__/calc.test.js.snap"),
            b"exports[`adds 1`] = `4`;",
        )
        .unwrap();
        std::fs::write(u.join("tests/golden.txt"), b"buggy output").unwrap();
        std::fs::create_dir_all(u.join("target/debug")).unwrap();
        std::fs::write(u.join("target/debug/calc"), b"elf").unwrap();
        // Counts beneath tests/ only; target/ is refused, so never descended into.
        let counts = |p: &[u8], _: bool| p.starts_with(b"tests/") && !harmless(p);
        let got: Vec<(String, WriteKind)> =
            writes(&tested(), u, &sandbox::WorkspaceLimits::default(), &counts)
                .unwrap()
                .into_iter()
                .map(|w| (String::from_utf8_lossy(&w.path).into_owned(), w.kind))
                .collect();
        assert_eq!(
            got,
            vec![
                (
                    "tests/__snapshots__/calc.test.js.snap".into(),
                    WriteKind::Created
                ),
                ("tests/golden.txt".into(), WriteKind::Created)
            ]
        );
    }

    #[test]
    fn caches_bytecode_coverage_and_mismatch_records_are_harmless_creations() {
        for p in [
            "tests/__pycache__/t.cpython-311.pyc",
            "tests/.pytest_cache/v/x",
            "tests/x.pyc",
            ".coverage",
            "tests/.coverage.host.1",
            "src/snapshots/a.snap.new",
            "tests/r.received.txt",
            "tests/.hypothesis/db",
        ] {
            assert!(harmless(p.as_bytes()), "{p}");
        }
        for p in [
            "tests/golden.txt",
            "src/__snapshots__/a.snap",
            "testdata/out.golden",
            "tests/Report.approved.txt",
        ] {
            assert!(!harmless(p.as_bytes()), "{p}");
        }
    }

    #[test]
    fn a_copy_up_with_the_same_content_and_mode_is_no_write() {
        let upper = tempfile::tempdir().unwrap();
        std::fs::create_dir(upper.path().join("tests")).unwrap();
        std::fs::write(
            upper.path().join("tests/test_calc.py"),
            b"tests/test_calc.py",
        )
        .unwrap();
        assert_eq!(listed(upper.path()), vec![]);
    }

    #[test]
    fn modified_deleted_and_replaced_paths_are_each_named_with_what_happened() {
        let upper = tempfile::tempdir().unwrap();
        let u = upper.path();
        std::fs::create_dir(u.join("tests")).unwrap();
        std::fs::write(u.join("tests/test_calc.py"), b"def test_nothing(): pass\n").unwrap();
        whiteout(&u.join("tests/helpers.py"));
        std::fs::create_dir(u.join("src")).unwrap();
        std::os::unix::fs::symlink("/dev/null", u.join("src/calc.py")).unwrap();
        // The same bytes, no longer executable: a mode change is a modification.
        std::fs::write(u.join("run.sh"), b"run.sh").unwrap();
        std::fs::set_permissions(u.join("run.sh"), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            listed(u),
            vec![
                ("run.sh".into(), WriteKind::Modified),
                ("src/calc.py".into(), WriteKind::Replaced),
                ("tests/helpers.py".into(), WriteKind::Deleted),
                ("tests/test_calc.py".into(), WriteKind::Modified),
            ]
        );
    }

    #[test]
    fn a_deleted_directory_names_every_file_it_held_and_a_file_over_it_replaces_them() {
        let upper = tempfile::tempdir().unwrap();
        whiteout(&upper.path().join("tests"));
        std::fs::write(upper.path().join("docs"), b"now a file").unwrap();
        assert_eq!(
            listed(upper.path()),
            vec![
                ("docs/a".into(), WriteKind::Replaced),
                ("docs/b".into(), WriteKind::Replaced),
                ("tests/helpers.py".into(), WriteKind::Deleted),
                ("tests/test_calc.py".into(), WriteKind::Deleted),
            ]
        );
    }

    #[test]
    fn an_opaque_directory_deletes_what_it_does_not_recreate() {
        let upper = tempfile::tempdir().unwrap();
        let tests = upper.path().join("tests");
        std::fs::create_dir(&tests).unwrap();
        let c = std::ffi::CString::new(tests.as_os_str().as_encoded_bytes()).unwrap();
        let n = std::ffi::CString::new(snapshot::OPAQUE_XATTR).unwrap();
        assert_eq!(
            unsafe { libc::lsetxattr(c.as_ptr(), n.as_ptr(), b"y".as_ptr().cast(), 1, 0) },
            0
        );
        std::fs::write(tests.join("test_calc.py"), b"tests/test_calc.py").unwrap();
        assert_eq!(
            listed(upper.path()),
            vec![("tests/helpers.py".into(), WriteKind::Deleted)]
        );
    }

    #[test]
    fn many_writes_are_named_up_to_the_bound_then_counted_and_digested() {
        let writes: Vec<TreeWrite> = (0..60)
            .map(|i| TreeWrite {
                path: format!("t/{i:02}").into_bytes(),
                kind: WriteKind::Deleted,
            })
            .collect();
        let found = finding(4, "the check of iteration 4", &Ok(writes)).unwrap();
        assert_eq!(found.halt_reason, HaltReason::MetricIntegrityViolation);
        assert_eq!(found.findings.len(), MAX_NAMED + 1);
        assert_eq!(
            found.findings[0],
            FindingRecord {
                path: Some("t/00".into()),
                what: "deleted by the check".into()
            }
        );
        let all: String = (0..60).map(|i| format!("t/{i:02}\n")).collect();
        let digest = hex::encode(Sha256::digest(all.as_bytes()));
        assert_eq!(
            found.findings[MAX_NAMED].what,
            format!("written by the check: 10 more (sha256 of all 60 paths, one a line: {digest})")
        );
        assert!(found.detail.starts_with("the check of iteration 4 wrote to 60 path(s) of the tree it tested: t/00 (deleted), t/01 (deleted), t/02 (deleted) and 57 more"), "{}", found.detail);
    }

    #[test]
    fn a_path_with_control_characters_is_named_escaped() {
        let w = vec![TreeWrite {
            path: b"tests/\x1b[2Jx.py".to_vec(),
            kind: WriteKind::Modified,
        }];
        let found = finding(1, "the check", &Ok(w)).unwrap();
        assert_eq!(
            found.findings[0].path.as_deref(),
            Some("tests/\\u{1b}[2Jx.py")
        );
        assert!(!found.detail.contains('\x1b'));
    }

    #[test]
    fn writes_that_cannot_be_listed_are_a_violation_naming_why() {
        let found = finding(
            2,
            "confirmation rerun 1 of iteration 2",
            &Err(Unlisted(
                "the workspace exceeds workspace.max_entries = 4 at \"x\"".into(),
            )),
        )
        .unwrap();
        assert_eq!(found.halt_reason, HaltReason::MetricIntegrityViolation);
        assert!(found.detail.starts_with("confirmation rerun 1 of iteration 2 left writes that cannot be listed (the workspace exceeds workspace.max_entries = 4"), "{}", found.detail);
    }

    #[test]
    fn a_check_that_wrote_nothing_of_the_tree_has_no_finding() {
        assert_eq!(finding(1, "the check", &Ok(vec![])), None);
    }
}
