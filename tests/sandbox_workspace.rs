//! (Named sandbox_* so ci/test-unprivileged.sh also runs it as an unprivileged user.)
//! The detached workspace, end to end: baseline t0 from a real git repository (made here with
//! `git init`), the overlay mounted inside a zone by `loopexec sandbox --overlay`, snapshots and
//! their tree ids, protected paths, the exec zone's check layers, and delivery. Runs as root (the
//! zone then runs as uid 60200, which must own what it writes) and unprivileged.

mod common;
use common::{bin, git_value as git, is_root, zone_owner};
use loopexec::safefs::SafeDir;
use loopexec::workspace::{
    check_layers, deliver, protected_changes, Baseline, BaselineOptions, ChangeKind, FrozenLayer,
    ProtectedPaths, Workspace, WorkspaceError,
};
use sandbox::WorkspaceLimits;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A file in the upper layer as the agent writes it: owned by the zone (the snapshot refuses
/// entries of another uid).
fn write_as_agent(upper: &Path, rel: &str, text: &str) {
    write(upper, rel, text);
    if let Some((uid, gid)) = zone_owner() {
        std::os::unix::fs::lchown(upper.join(rel), Some(uid), Some(gid)).unwrap();
    }
}

/// A scratch area the zone uid can traverse: `repo/` (a git repository with one commit) and
/// `state/` (the `.loopexec` directory), `run/` (a run directory).
struct Fixture {
    tmp: tempfile::TempDir,
}

impl Fixture {
    fn new(files: &[(&str, &str)]) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        for (rel, text) in files {
            write(&repo, rel, text);
        }
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "t0"]);
        for d in ["state", "run"] {
            std::fs::create_dir(tmp.path().join(d)).unwrap();
            std::fs::set_permissions(tmp.path().join(d), std::fs::Permissions::from_mode(0o711))
                .unwrap();
        }
        Fixture { tmp }
    }
    fn repo(&self) -> PathBuf {
        self.tmp.path().join("repo")
    }
    fn state(&self) -> SafeDir {
        SafeDir::open(&self.tmp.path().join("state")).unwrap()
    }
    fn run_dir(&self) -> SafeDir {
        SafeDir::open(&self.tmp.path().join("run")).unwrap()
    }
    fn baseline(&self, include_uncommitted: bool) -> Baseline {
        Baseline::prepare(
            &self.repo(),
            &self.state(),
            &BaselineOptions {
                include_uncommitted,
                owner: zone_owner(),
                base_commit: None,
            },
        )
        .unwrap()
    }
    fn workspace(&self) -> Workspace {
        Workspace::create(self.baseline(false), &self.run_dir(), zone_owner(), None).unwrap()
    }
}

/// Run `script` in a zone (`loopexec sandbox`, exec policy) with `overlay` mounted at /ws.
fn in_zone(overlay: &sandbox::OverlayMount, script: &str) -> (i32, String) {
    let mut spec = format!("target={}", overlay.target.display());
    for l in &overlay.lowers {
        spec.push_str(&format!(",lower={}", l.display()));
    }
    if let (Some(u), Some(w)) = (&overlay.upper, &overlay.work) {
        spec.push_str(&format!(",upper={},work={}", u.display(), w.display()));
    }
    let out = Command::new(bin())
        .args([
            "sandbox",
            "--overlay",
            &spec,
            "--cwd",
            "/ws",
            "--",
            "/bin/sh",
            "-c",
            script,
        ])
        .current_dir("/")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

const FILES: &[(&str, &str)] = &[
    ("src/lib.py", "def f():\n    return 1\n"),
    (
        "tests/test_lib.py",
        "from src.lib import f\n\ndef test_f():\n    assert f() == 2\n",
    ),
    (
        "tests/test_other.py",
        "def test_other():\n    assert True\n",
    ),
    ("README.md", "hello\n"),
];

// ---------------------------------------------------------------- baseline

#[test]
fn baseline_holds_heads_files_and_no_git_directory() {
    let f = Fixture::new(FILES);
    write(&f.repo(), "run.sh", "#!/bin/sh\n");
    std::fs::set_permissions(
        f.repo().join("run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::os::unix::fs::symlink("src/lib.py", f.repo().join("link")).unwrap();
    git(&f.repo(), &["add", "-A"]);
    git(&f.repo(), &["commit", "-q", "-m", "more"]);
    let b = f.baseline(false);
    assert_eq!(
        std::fs::read_to_string(b.files_dir.join("tests/test_lib.py")).unwrap(),
        FILES[1].1
    );
    assert_eq!(
        std::fs::metadata(b.files_dir.join("run.sh"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o755
    );
    assert_eq!(
        std::fs::read_link(b.files_dir.join("link")).unwrap(),
        Path::new("src/lib.py")
    );
    assert!(!b.files_dir.join(".git").exists());
    assert_eq!(
        b.tree_id.to_hex(),
        git(&f.repo(), &["rev-parse", "HEAD^{tree}"])
    );
    assert_eq!(b.manifest().unwrap().tree_id(), b.tree_id);
    assert_eq!(
        b.head_commit.to_hex(),
        git(&f.repo(), &["rev-parse", "HEAD"])
    );
}

#[test]
fn the_same_tree_reuses_the_cached_baseline() {
    let f = Fixture::new(FILES);
    let cold = f.baseline(false);
    let warm = f.baseline(false);
    assert!(!cold.reused);
    assert!(warm.reused);
    assert_eq!(cold.files_dir, warm.files_dir);
    assert_eq!(warm.manifest().unwrap(), cold.manifest().unwrap());
    let entries: Vec<String> = std::fs::read_dir(f.tmp.path().join("state/baselines"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        entries,
        vec![cold.key.clone()],
        "no leftover build directories"
    );
}

#[test]
fn a_recorded_baseline_reopens_by_key_whatever_the_working_tree_says_now() {
    let f = Fixture::new(FILES);
    write(&f.repo(), "README.md", "uncommitted\n");
    let first = f.baseline(true);
    write(
        &f.repo(),
        "README.md",
        "edited again after the run started\n",
    );
    let again =
        Baseline::reopen(&f.repo(), &f.state(), &first.key, first.head_commit, true).unwrap();
    assert_eq!(again.tree_id, first.tree_id);
    assert_eq!(again.files_dir, first.files_dir);
    assert_eq!(
        std::fs::read_to_string(again.files_dir.join("README.md")).unwrap(),
        "uncommitted\n"
    );
    for bad in ["../x", ".building-1", ""] {
        assert!(
            Baseline::reopen(&f.repo(), &f.state(), bad, first.head_commit, true).is_err(),
            "{bad:?}"
        );
    }
}

#[test]
fn include_uncommitted_takes_working_tree_changes_and_untracked_files_but_not_ignored_ones() {
    let f = Fixture::new(&[
        ("a.txt", "committed\n"),
        (".gitignore", "*.log\n"),
        ("gone.txt", "x\n"),
    ]);
    write(&f.repo(), "a.txt", "edited\n");
    write(&f.repo(), "new.txt", "untracked\n");
    write(&f.repo(), "debug.log", "ignored\n");
    std::fs::remove_file(f.repo().join("gone.txt")).unwrap();
    let b = f.baseline(true);
    assert_eq!(
        std::fs::read_to_string(b.files_dir.join("a.txt")).unwrap(),
        "edited\n"
    );
    assert_eq!(
        std::fs::read_to_string(b.files_dir.join("new.txt")).unwrap(),
        "untracked\n"
    );
    assert!(!b.files_dir.join("debug.log").exists());
    assert!(!b.files_dir.join("gone.txt").exists());
    // The tree id is git's id of that state.
    git(&f.repo(), &["add", "-A"]);
    assert_eq!(b.tree_id.to_hex(), git(&f.repo(), &["write-tree"]));
}

#[test]
fn include_uncommitted_leaves_out_a_state_dir_inside_the_repository() {
    let f = Fixture::new(&[("a.txt", "x\n")]);
    let state_path = f.repo().join(".loopexec");
    std::fs::create_dir(&state_path).unwrap();
    std::fs::set_permissions(&state_path, std::fs::Permissions::from_mode(0o711)).unwrap();
    write(&state_path, "runs/r/receipt.jsonl", "{}\n");
    write(&f.repo(), "new.txt", "n\n");
    let state = SafeDir::open(&state_path).unwrap();
    let b = Baseline::prepare(
        &f.repo(),
        &state,
        &BaselineOptions {
            include_uncommitted: true,
            owner: zone_owner(),
            base_commit: None,
        },
    )
    .unwrap();
    assert!(b.files_dir.join("new.txt").exists());
    assert!(!b.files_dir.join(".loopexec").exists());
    assert!(b
        .manifest()
        .unwrap()
        .iter()
        .all(|(p, _)| !p.starts_with(b".loopexec")));
}

#[test]
fn overlay_paths_with_option_separators_and_an_upper_without_work_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().display();
    for spec in [
        format!("target=/ws,lower={d}/a:b"),
        format!("target=/ws,lower={d},upper={d}"),
    ] {
        let out = Command::new(bin())
            .args(["--json", "sandbox", "--overlay", &spec, "--", "/bin/true"])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(20),
            "{spec}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

#[test]
fn a_repository_without_a_commit_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    git(tmp.path(), &["init", "-q"]);
    std::fs::create_dir(tmp.path().join(".state")).unwrap();
    let state = SafeDir::open(&tmp.path().join(".state")).unwrap();
    let err = Baseline::prepare(tmp.path(), &state, &BaselineOptions::default()).unwrap_err();
    assert!(matches!(err, WorkspaceError::NoCommit { .. }), "{err}");
}

/// Commit a tree object whose body we write ourselves (git's porcelain would refuse it).
fn commit_crafted_tree(repo: &Path, entry_name: &[u8]) {
    let blob = git(repo, &["hash-object", "-w", "--stdin"]);
    let mut body = b"100644 ".to_vec();
    body.extend_from_slice(entry_name);
    body.push(0);
    body.extend_from_slice(&hex::decode(blob).unwrap());
    let mut child = Command::new("git")
        .current_dir(repo)
        .args(["hash-object", "-w", "--literally", "-t", "tree", "--stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(&body).unwrap();
    let tree = String::from_utf8(child.wait_with_output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_string();
    let commit = git(repo, &["commit-tree", &tree, "-m", "crafted"]);
    git(repo, &["update-ref", "HEAD", &commit]);
}

#[test]
fn dot_dot_absolute_and_dot_git_tree_entries_are_refused_and_nothing_is_written() {
    for name in [&b".."[..], b"/etc", b".git", b"a/../../escape"] {
        let f = Fixture::new(&[("a", "x\n")]);
        commit_crafted_tree(&f.repo(), name);
        let err =
            Baseline::prepare(&f.repo(), &f.state(), &BaselineOptions::default()).unwrap_err();
        assert!(
            matches!(err, WorkspaceError::UnsafePath { .. }),
            "{:?}: {err}",
            String::from_utf8_lossy(name)
        );
        let left: Vec<_> = std::fs::read_dir(f.tmp.path().join("state/baselines"))
            .unwrap()
            .collect();
        assert!(left.is_empty(), "nothing materialised");
        assert!(
            !f.tmp.path().join("escape").exists() && !f.tmp.path().join("state/escape").exists()
        );
    }
}

#[test]
fn a_symlink_pointing_outside_is_materialised_as_a_symlink_never_followed() {
    let f = Fixture::new(&[("a", "x\n")]);
    std::os::unix::fs::symlink("/etc/passwd", f.repo().join("passwd")).unwrap();
    std::os::unix::fs::symlink("../../../../outside", f.repo().join("up")).unwrap();
    git(&f.repo(), &["add", "-A"]);
    git(&f.repo(), &["commit", "-q", "-m", "links"]);
    let b = f.baseline(false);
    let meta = std::fs::symlink_metadata(b.files_dir.join("passwd")).unwrap();
    assert!(meta.file_type().is_symlink());
    assert_eq!(
        std::fs::read_link(b.files_dir.join("passwd")).unwrap(),
        Path::new("/etc/passwd")
    );
    assert!(std::fs::symlink_metadata(b.files_dir.join("up"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(
        b.tree_id.to_hex(),
        git(&f.repo(), &["rev-parse", "HEAD^{tree}"])
    );
}

// ------------------------------------------------- hostile repository config

const MARKER_SCRIPT: &str = "touch {m}; cat";

/// A repository whose .git/config, hooks and attributes would each leave a marker file if git
/// ever ran them.
fn hostile_fixture() -> (Fixture, PathBuf) {
    let f = Fixture::new(&[
        ("a.txt", "one\n"),
        (".gitattributes", "* filter=evil diff=evil\n"),
        ("tests/test_a.py", "x\n"),
    ]);
    let markers = f.tmp.path().join("markers");
    std::fs::create_dir(&markers).unwrap();
    let m = |name: &str| markers.join(name).display().to_string();
    let hooks = f.tmp.path().join("evil-hooks");
    std::fs::create_dir(&hooks).unwrap();
    for hook in [
        "pre-commit",
        "post-commit",
        "reference-transaction",
        "post-checkout",
        "post-index-change",
        "pre-auto-gc",
    ] {
        for dir in [hooks.clone(), f.repo().join(".git/hooks")] {
            let p = dir.join(hook);
            std::fs::write(
                &p,
                format!("#!/bin/sh\ntouch {}\n", m(&format!("hook-{hook}"))),
            )
            .unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    let config = format!(
        "[core]\n\tfsmonitor = \"touch {fsm}; echo\"\n\thooksPath = {hooks}\n\tpager = touch {pager}\n\
         [filter \"evil\"]\n\tclean = \"{clean}\"\n\tsmudge = \"{smudge}\"\n\tprocess = touch {process}\n\trequired = true\n\
         [diff \"evil\"]\n\ttextconv = touch {textconv}\n\tcommand = touch {diffcmd}\n\
         [diff]\n\texternal = touch {external}\n\
         [commit]\n\tgpgSign = true\n[gpg]\n\tprogram = touch {gpg}\n",
        fsm = m("fsmonitor"),
        hooks = hooks.display(),
        pager = m("pager"),
        clean = MARKER_SCRIPT.replace("{m}", &m("clean")),
        smudge = MARKER_SCRIPT.replace("{m}", &m("smudge")),
        process = m("process"),
        textconv = m("textconv"),
        diffcmd = m("diff-command"),
        external = m("diff-external"),
        gpg = m("gpg"),
    );
    let mut text = std::fs::read_to_string(f.repo().join(".git/config")).unwrap();
    text.push_str(&config);
    std::fs::write(f.repo().join(".git/config"), text).unwrap();
    (f, markers)
}

fn markers_left(markers: &Path) -> Vec<String> {
    std::fs::read_dir(markers)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn hostile_git_config_hooks_and_filters_never_run_from_baseline_to_delivery() {
    let (f, markers) = hostile_fixture();
    write(&f.repo(), "a.txt", "two\n"); // a stat-dirty tracked file: the moment a clean filter would run
    write(&f.repo(), "untracked.txt", "u\n");
    let b = Baseline::prepare(
        &f.repo(),
        &f.state(),
        &BaselineOptions {
            include_uncommitted: true,
            owner: zone_owner(),
            base_commit: None,
        },
    )
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(b.files_dir.join("a.txt")).unwrap(),
        "two\n"
    );
    let ws = Workspace::create(b, &f.run_dir(), zone_owner(), None).unwrap();
    write_as_agent(ws.upper_dir(), "agent.txt", "by the agent\n");
    let snap = ws.snapshot(&WorkspaceLimits::default()).unwrap();
    let d = deliver(
        &ws,
        &snap,
        "r-hostile",
        &f.run_dir(),
        "loopexec run r-hostile",
        &WorkspaceLimits::default(),
    )
    .unwrap();
    assert!(d.patch.exists());
    assert_eq!(
        markers_left(&markers),
        Vec::<String>::new(),
        "something of the repository's config ran"
    );
}

// ---------------------------------------------------------------- snapshot

#[test]
fn an_untouched_workspace_snapshots_to_the_baseline_tree() {
    let f = Fixture::new(FILES);
    let ws = f.workspace();
    let snap = ws.snapshot(&WorkspaceLimits::default()).unwrap();
    assert_eq!(snap.tree_id, ws.baseline().tree_id);
    assert!(snap.changes(ws.baseline().manifest().unwrap()).is_empty());
}

/// The tree id git computes for the repository after running `script` in a checkout of it.
fn git_tree_after(f: &Fixture, script: &str) -> String {
    let copy = f.tmp.path().join("reference");
    git(
        f.tmp.path(),
        &[
            "clone",
            "-q",
            "--no-local",
            f.repo().to_str().unwrap(),
            copy.to_str().unwrap(),
        ],
    );
    let st = Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .current_dir(&copy)
        .status()
        .unwrap();
    assert!(st.success());
    git(&copy, &["add", "-A"]);
    git(&copy, &["write-tree"])
}

const AGENT_EDITS: &str = "set -e; echo 'def f():\n    return 2' > src/lib.py; echo new > src/new.py; rm README.md; \
    rm -r tests; mkdir tests; echo replaced > tests/only.py; ln -s /etc/shadow evil; chmod +x src/new.py; mkdir -p deep/er; echo d > deep/er/f";

#[test]
fn the_agent_edits_through_the_overlay_and_the_snapshot_tree_id_is_gits() {
    let f = Fixture::new(FILES);
    let ws = f.workspace();
    let (code, out) = in_zone(&ws.agent_overlay(Path::new("/ws")), AGENT_EDITS);
    assert_eq!(code, 0, "{out}");
    // The baseline was not modified.
    assert_eq!(
        std::fs::read_to_string(ws.baseline().files_dir.join("README.md")).unwrap(),
        "hello\n"
    );
    let snap = ws.snapshot(&WorkspaceLimits::default()).unwrap();
    assert_eq!(snap.tree_id.to_hex(), git_tree_after(&f, AGENT_EDITS));
    // A symlink in the upper layer is recorded as a symlink (its target, never its target's content).
    let evil = snap.manifest.get(b"evil").unwrap();
    assert_eq!(evil.kind, loopexec::workspace::EntryKind::Symlink);
    assert_eq!(
        evil.oid,
        loopexec::workspace::object_id::blob_id(b"/etc/shadow")
    );
    // The opaque tests/ directory hid the baseline's tests.
    assert!(snap.manifest.get(b"tests/test_lib.py").is_none());
}

#[test]
fn a_planted_dot_git_and_a_fifo_are_left_out_of_the_tree() {
    let f = Fixture::new(FILES);
    let ws = f.workspace();
    let (code, out) = in_zone(
        &ws.agent_overlay(Path::new("/ws")),
        "set -e; mkdir -p .git/hooks; echo x > .git/config; mkfifo pipe",
    );
    assert_eq!(code, 0, "{out}");
    let snap = ws.snapshot(&WorkspaceLimits::default()).unwrap();
    assert_eq!(snap.tree_id, ws.baseline().tree_id);
    let left: Vec<String> = snap
        .not_in_tree
        .iter()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    assert_eq!(left, vec![".git".to_string(), "pipe".to_string()]);
}

// ---------------------------------------------------------- protected paths

fn changes_after(script: &str) -> Vec<(String, ChangeKind)> {
    let f = Fixture::new(FILES);
    let ws = f.workspace();
    let (code, out) = in_zone(&ws.agent_overlay(Path::new("/ws")), script);
    assert_eq!(code, 0, "{out}");
    let snap = ws.snapshot(&WorkspaceLimits::default()).unwrap();
    protected_changes(
        ws.baseline().manifest().unwrap(),
        &snap,
        &ProtectedPaths::defaults(),
    )
    .into_iter()
    .map(|c| (c.path, c.change))
    .collect()
}

#[test]
fn editing_a_test_is_a_protected_modification() {
    assert_eq!(
        changes_after("echo 'def test_f(): pass' > tests/test_lib.py"),
        vec![("tests/test_lib.py".into(), ChangeKind::Modified)]
    );
}

#[test]
fn deleting_a_test_is_a_protected_deletion() {
    assert_eq!(
        changes_after("rm tests/test_other.py"),
        vec![("tests/test_other.py".into(), ChangeKind::Deleted)]
    );
}

#[test]
fn creating_a_protected_path_that_did_not_exist_is_an_addition() {
    assert_eq!(
        changes_after("echo 'import pytest' > conftest.py; echo x > src/test_sneaky.py"),
        vec![
            ("conftest.py".into(), ChangeKind::Added),
            ("src/test_sneaky.py".into(), ChangeKind::Added)
        ]
    );
}

#[test]
fn a_symlink_planted_at_a_protected_path_is_a_change() {
    assert_eq!(
        changes_after("ln -s /dev/null pytest.ini; rm tests/test_other.py; ln -s ../src/lib.py tests/test_other.py"),
        vec![("pytest.ini".into(), ChangeKind::Added), ("tests/test_other.py".into(), ChangeKind::Modified)]
    );
}

#[test]
fn a_hardlink_planted_on_a_protected_file_is_a_change() {
    assert_eq!(
        changes_after("ln tests/test_other.py src/alias.py"),
        vec![("tests/test_other.py".into(), ChangeKind::Hardlinked)]
    );
}

#[test]
fn editing_sources_only_changes_no_protected_path() {
    assert_eq!(
        changes_after("echo 'def f(): return 2' > src/lib.py; echo x > src/util.py"),
        vec![]
    );
}

// ------------------------------------------------------------- check layers

#[test]
fn the_check_sees_protected_paths_from_t0_and_the_agents_other_changes() {
    let f = Fixture::new(FILES);
    let ws = f.workspace();
    let script = "set -e; echo 'def f():\n    return 2' > src/lib.py; echo 'def test_f(): pass' > tests/test_lib.py; \
                  rm tests/test_other.py; echo 'x' > tests/test_new.py; echo 'import os' > conftest.py; mkdir -p .git; echo p > .git/config";
    let (code, out) = in_zone(&ws.agent_overlay(Path::new("/ws")), script);
    assert_eq!(code, 0, "{out}");
    let snap = ws.snapshot(&WorkspaceLimits::default()).unwrap();
    let check_dir = f.tmp.path().join("run/check-1");
    std::fs::create_dir(&check_dir).unwrap();
    let frozen = FrozenLayer::build(
        ws.baseline(),
        &ProtectedPaths::defaults(),
        &f.run_dir(),
        zone_owner(),
    )
    .unwrap();
    let layers = check_layers(
        &ws,
        &snap,
        &frozen,
        &ProtectedPaths::defaults(),
        &|_| false,
        &SafeDir::open(&check_dir).unwrap(),
        Path::new("/ws"),
        zone_owner(),
        None,
    )
    .unwrap();
    assert_eq!(
        layers.overlay.lowers[..2],
        [frozen.path().to_path_buf(), check_dir.join("hide")]
    );
    assert!(layers.overlay.volatile);
    assert_eq!(
        layers.hidden,
        vec![
            ".git".to_string(),
            "conftest.py".to_string(),
            "tests/test_new.py".to_string()
        ]
    );
    let (code, out) = in_zone(
        &layers.overlay,
        "cat tests/test_lib.py tests/test_other.py src/lib.py; ls -A .; ls -A tests; echo scribble > tests/test_lib.py && echo wrote",
    );
    assert_eq!(code, 0, "{out}");
    let expected = format!(
        "{}{}def f():\n    return 2\nREADME.md\nsrc\ntests\ntest_lib.py\ntest_other.py\nwrote\n",
        FILES[1].1, FILES[2].1
    );
    assert_eq!(out, expected);
    // The check's own writes went to its scratch layer: the agent's layer and t0 are unchanged.
    assert_eq!(
        std::fs::read_to_string(ws.upper_dir().join("tests/test_lib.py")).unwrap(),
        "def test_f(): pass\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.baseline().files_dir.join("tests/test_lib.py")).unwrap(),
        FILES[1].1
    );
    assert_eq!(
        ws.snapshot(&WorkspaceLimits::default()).unwrap().tree_id,
        snap.tree_id
    );
}

#[test]
fn a_protected_file_the_agent_replaced_by_a_fifo_is_seen_from_t0_by_the_check() {
    // A fifo is not part of a tree: it is hidden from the check, below the frozen layer, so the
    // t0 file at the same protected path is what the check reads.
    let f = Fixture::new(FILES);
    let ws = f.workspace();
    let (code, out) = in_zone(
        &ws.agent_overlay(Path::new("/ws")),
        "rm tests/test_other.py && mkfifo tests/test_other.py",
    );
    assert_eq!(code, 0, "{out}");
    let snap = ws.snapshot(&WorkspaceLimits::default()).unwrap();
    assert_eq!(snap.not_in_tree, vec![b"tests/test_other.py".to_vec()]);
    let frozen = FrozenLayer::build(
        ws.baseline(),
        &ProtectedPaths::defaults(),
        &f.run_dir(),
        zone_owner(),
    )
    .unwrap();
    let check_dir = f.tmp.path().join("run/check-1");
    std::fs::create_dir(&check_dir).unwrap();
    let layers = check_layers(
        &ws,
        &snap,
        &frozen,
        &ProtectedPaths::defaults(),
        &|_| false,
        &SafeDir::open(&check_dir).unwrap(),
        Path::new("/ws"),
        zone_owner(),
        None,
    )
    .unwrap();
    assert_eq!(layers.hidden, vec!["tests/test_other.py".to_string()]);
    let (code, out) = in_zone(&layers.overlay, "cat tests/test_other.py");
    assert_eq!((code, out.as_str()), (0, FILES[2].1));
}

// ---------------------------------------------------------------- delivery

/// Bytes of HEAD, the index, the current branch ref and every working-tree file.
fn operator_state(repo: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for rel in [".git/HEAD", ".git/index", ".git/refs/heads/main"] {
        out.push((rel.to_string(), std::fs::read(repo.join(rel)).unwrap()));
    }
    let mut stack = vec![repo.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if p.file_name().unwrap() == ".git" {
                continue;
            }
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                stack.push(p);
            } else {
                out.push((
                    p.strip_prefix(repo).unwrap().display().to_string()
                        + &format!(" {:o} {}", meta.mode(), meta.mtime_nsec()),
                    std::fs::read(&p).unwrap_or_default(),
                ));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn delivery_creates_the_branch_and_patch_and_leaves_head_index_and_working_tree_byte_identical() {
    let f = Fixture::new(FILES);
    write(&f.repo(), "src/lib.py", "operator's uncommitted edit\n");
    let before = operator_state(&f.repo());
    let ws = f.workspace();
    let (code, out) = in_zone(
        &ws.agent_overlay(Path::new("/ws")),
        "echo 'def f():\n    return 2' > src/lib.py; echo n > src/new.py; rm README.md",
    );
    assert_eq!(code, 0, "{out}");
    let snap = ws.snapshot(&WorkspaceLimits::default()).unwrap();
    let d = deliver(
        &ws,
        &snap,
        "r-1",
        &f.run_dir(),
        "loopexec run r-1",
        &WorkspaceLimits::default(),
    )
    .unwrap();
    assert_eq!(operator_state(&f.repo()), before);
    assert_eq!(d.branch, "loopexec/r-1");
    assert_eq!(
        git(&f.repo(), &["rev-parse", "loopexec/r-1^{tree}"]),
        snap.tree_id.to_hex()
    );
    assert_eq!(
        git(&f.repo(), &["rev-parse", "loopexec/r-1^"]),
        git(&f.repo(), &["rev-parse", "HEAD"])
    );
    assert_eq!(
        git(
            &f.repo(),
            &["log", "-1", "--format=%an <%ae>", "loopexec/r-1"]
        ),
        "loopexec <loopexec@localhost>"
    );
    assert_eq!(git(&f.repo(), &["show", "loopexec/r-1:src/new.py"]), "n");
    assert_eq!(git(&f.repo(), &["symbolic-ref", "HEAD"]), "refs/heads/main");
    // The patch turns t0 into the delivered tree.
    let check = f.tmp.path().join("apply");
    git(
        f.tmp.path(),
        &[
            "clone",
            "-q",
            "--no-local",
            f.repo().to_str().unwrap(),
            check.to_str().unwrap(),
        ],
    );
    git(&check, &["apply", "--index", d.patch.to_str().unwrap()]);
    assert_eq!(git(&check, &["write-tree"]), snap.tree_id.to_hex());
    assert!(!f.tmp.path().join("run/delivery.index").exists());
}

#[test]
fn delivery_never_overwrites_an_existing_branch() {
    let f = Fixture::new(FILES);
    git(&f.repo(), &["branch", "loopexec/r-2"]);
    let tip = git(&f.repo(), &["rev-parse", "loopexec/r-2"]);
    let ws = f.workspace();
    write_as_agent(ws.upper_dir(), "x.txt", "x\n");
    let snap = ws.snapshot(&WorkspaceLimits::default()).unwrap();
    let err = deliver(
        &ws,
        &snap,
        "r-2",
        &f.run_dir(),
        "m",
        &WorkspaceLimits::default(),
    )
    .unwrap_err();
    assert!(
        matches!(err, WorkspaceError::BranchExists(ref b) if b == "loopexec/r-2"),
        "{err}"
    );
    assert_eq!(git(&f.repo(), &["rev-parse", "loopexec/r-2"]), tip);
}

// --------------------------------------------------------- sandbox overlays

#[test]
fn an_overlay_target_overlapping_a_grant_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(bin())
        .args([
            "--json",
            "sandbox",
            "--overlay",
            &format!("target=/usr/lib,lower={}", tmp.path().display()),
            "--",
            "/bin/true",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(20),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("overlaps the granted path /usr"));
}

#[test]
fn as_root_layers_beneath_a_directory_only_the_operator_traverses_are_mounted() {
    if !is_root() {
        return; // unprivileged, the zone runs as the caller, who owns every directory on the way
    }
    let f = Fixture::new(FILES);
    let b = f.baseline(false);
    std::fs::set_permissions(f.tmp.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let second = f.tmp.path().join("second-lower");
    std::fs::create_dir(&second).unwrap();
    std::fs::set_permissions(&second, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = sandbox::OverlayMount {
        target: "/ws".into(),
        lowers: vec![second, b.files_dir.clone()],
        upper: None,
        work: None,
        volatile: false,
    };
    let (code, out) = in_zone(&o, "cat README.md");
    assert_eq!((code, out.as_str()), (0, "hello\n"));
}

#[test]
fn a_zone_mountinfo_names_no_host_path_of_its_overlay_layers() {
    let f = Fixture::new(FILES);
    let ws = f.workspace();
    let o = ws.agent_overlay(Path::new("/ws"));
    let (code, out) = in_zone(&o, "cat /proc/self/mountinfo");
    assert_eq!(code, 0, "{out}");
    let overlay_line = out
        .lines()
        .find(|l| l.contains(" /ws "))
        .unwrap_or_else(|| panic!("no /ws mount in {out}"));
    assert!(
        overlay_line.contains("lowerdir=/layers/0,"),
        "{overlay_line}"
    );
    assert!(
        overlay_line.contains("upperdir=/layers/1/upper,workdir=/layers/1/work"),
        "{overlay_line}"
    );
    let tmp = f.tmp.path().to_string_lossy().into_owned();
    assert!(!out.contains(&tmp), "mountinfo names {tmp}: {out}");
}

#[test]
fn a_read_only_overlay_cannot_be_written() {
    let f = Fixture::new(FILES);
    let b = f.baseline(false);
    let o = sandbox::OverlayMount {
        target: "/ws".into(),
        lowers: vec![b.files_dir.clone()],
        upper: None,
        work: None,
        volatile: false,
    };
    let (code, out) = in_zone(&o, "cat README.md; echo x > README.md");
    assert_ne!(code, 0);
    assert!(
        out.starts_with("hello\n") && out.contains("Read-only file system"),
        "{out}"
    );
}
