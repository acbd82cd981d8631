//! Protected paths: what the agent must not change, because the check's verdict depends on it
//! (tests, test runner configuration, CI files, the files that define how the check runs).
//!
//! A pattern is a glob over `/`-separated repository paths, with gitignore-like anchoring:
//! - no `/` except a trailing one (`conftest.py`, `*_test.go`, `tests/`): matches that name at any
//!   depth;
//! - a `/` inside (`.github/workflows/*`, `/Makefile`): anchored at the repository root (a leading
//!   `/` only anchors);
//! - a trailing `/` (`tests/`) is a directory: everything beneath it is protected;
//! - a path beneath a protected path is protected (`.github` protects `.github/x/y`).
//!
//! `*` and `?` do not cross `/`; `**` does.
//!
//! [`ProtectedPaths::DEFAULTS`] is the per-ecosystem default set; the integrator reads extra
//! patterns (and whether to keep the defaults) from loop.toml. [`protected_changes`] lists every
//! protected path the agent added, modified, deleted or hard-linked; any entry halts the run
//! `blocked_path_modified`.
//!
//! Vendored dependency trees ([`ProtectedPaths::VENDORED`]: `node_modules/`, `vendor/`,
//! `third_party/`, at any depth) are protected in another mode, *existing t0 entries only*: every
//! t0 entry beneath one is frozen (modified, replaced, deleted or hard-linked is a change), and a
//! new entry is a change too unless it belongs to a new package: it must lie in a new directory
//! whose parent is the topmost vendored root itself (`node_modules/left-pad/`) or a namespace
//! directory that held no file at t0 (`node_modules/@scope/`, `vendor/github.com/`). So a new
//! dependency can be added, while nothing can join a package that exists (a Go file compiled into
//! a vendored package, a `foo` that node resolves before the existing `foo.js`, a nested
//! `node_modules/` that shadows a hoisted package, a new file at the root of `node_modules/` that
//! shadows a package directory, a new link in `node_modules/.bin/`). The package managers'
//! listings at the top of the root ([`ProtectedPaths::VENDORED_LISTINGS`]) may change.

use super::manifest::Manifest;
use super::snapshot::{ChangeKind, Snapshot};
use super::{tree_path, WorkspaceError, WsResult};
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use std::collections::BTreeMap;

/// A compiled set of protected-path patterns.
#[derive(Debug, Clone)]
pub struct ProtectedPaths {
    patterns: Vec<String>,
    set: GlobSet,
    /// Paths exempt from the patterns (the loop's `[[allow_test_change]]` paths): neither
    /// guarded nor frozen from t0 in the check.
    exempt: Option<GlobSet>,
    /// The vendored roots (their directories themselves, not what lies beneath).
    vendored: GlobSet,
}

/// One exemption's glob: a repository-relative path pattern matched against the whole path (`*`
/// and `?` within one component, `**` across); refused when empty, absolute, with a `..`, `.`
/// or empty component, a NUL byte, or not a glob.
pub fn exempt_glob(pattern: &str) -> Result<globset::Glob, String> {
    if pattern.is_empty() {
        return Err("an empty path".into());
    }
    if pattern.contains('\0') {
        return Err("a NUL byte".into());
    }
    if pattern.starts_with('/') {
        return Err("an absolute path (name it relative to the repository root)".into());
    }
    if pattern
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err("an empty, `.` or `..` component".into());
    }
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|e| format!("not a glob: {}", e.kind()))
}

/// One protected path the agent changed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProtectedChange {
    pub path: String,
    pub change: ChangeKind,
}

impl ProtectedPaths {
    /// The default patterns, per ecosystem. Decisions (docs/workspace.md explains them):
    /// `setup.cfg` is protected as a whole file (it carries test runner configuration);
    /// `pyproject.toml`, `package.json` and `Cargo.toml` are not (an agent legitimately adds
    /// dependencies): their test sections are parts of the test-surface digest H0, which the
    /// metric-integrity guard compares (docs/guards.md). `.cargo/` is protected (a `runner`
    /// there replaces the test binary).
    pub const DEFAULTS: &'static [&'static str] = &[
        // Test trees, any ecosystem.
        "tests/",
        "test/",
        "testing/",
        "__tests__/",
        "spec/",
        "testdata/",
        "fixtures/",
        // Test data by the test tools' conventions, wherever it lives: jest/vitest snapshots,
        // insta snapshots (`src/snapshots/*.snap`), golden files, ApprovalTests' approved files,
        // VCR/Polly cassettes, fixture and manual-mock directories.
        "__snapshots__/",
        "*.snap",
        "*.golden",
        "golden/",
        "goldens/",
        "*.approved.*",
        "cassettes/",
        "__fixtures__/",
        "__mocks__/",
        // Python.
        "test_*.py",
        "*_test.py",
        "conftest.py",
        "pytest.ini",
        "tox.ini",
        "setup.cfg",
        "noxfile.py",
        ".coveragerc",
        "sitecustomize.py",
        "usercustomize.py",
        // Mutators' and coverage tools' configuration and state: an exclusion added there (or
        // a cache of "killed" results) steers the adequacy canary or the coverage tier.
        "mutants.toml",
        "mutmut_config.py",
        ".mutmut-cache",
        "stryker.conf.*",
        "stryker.config.*",
        ".stryker.conf.*",
        ".nycrc*",
        "nyc.config.*",
        ".c8rc*",
        ".istanbul.yml",
        "tarpaulin.toml",
        ".tarpaulin.toml",
        // Go.
        "*_test.go",
        // Rust.
        "/.cargo/",
        // JavaScript / TypeScript.
        "*.test.*",
        "*.spec.*",
        "jest.config.*",
        "vitest.config.*",
        "vitest.workspace.*",
        "karma.conf.*",
        ".mocharc*",
        "playwright.config.*",
        "cypress.config.*",
        // Java / JVM: src/test/ is covered by "test/".
        // Build entry points the check usually calls.
        "/Makefile",
        "/makefile",
        "/GNUmakefile",
        "/justfile",
        "/Justfile",
        // CI.
        "/.github/",
        "/.gitlab-ci.yml",
        "/.gitlab/",
        "/.circleci/",
        "/.travis.yml",
        "/Jenkinsfile",
        "/azure-pipelines.yml",
        "/.buildkite/",
        // git: a submodule URL or an attribute (a filter, a diff driver, `export-ignore`) changes
        // what the operator's git does with the delivered tree.
        ".gitmodules",
        ".gitattributes",
        // loopexec itself.
        "/loop.toml",
        "/.loopexec/",
    ];

    /// The vendored dependency trees whose existing entries are frozen (see the module's
    /// comment): directory names, at any depth.
    pub const VENDORED: &'static [&'static str] = &["node_modules", "vendor", "third_party"];

    /// The package managers' own listings at the top of a vendored root, which a new dependency
    /// rewrites and no runtime loads (the go command checks `vendor/modules.txt` against `go.mod`
    /// and loads packages from their directories; node never reads npm's, yarn's or pnpm's
    /// state files): they may change.
    pub const VENDORED_LISTINGS: &'static [&'static str] = &[
        "modules.txt",
        ".package-lock.json",
        ".yarn-integrity",
        ".yarn-state.yml",
        ".modules.yaml",
    ];

    /// The defaults plus `extra` (when `use_defaults`), or `extra` alone; the vendored roots are
    /// part of the defaults.
    pub fn new(use_defaults: bool, extra: &[String]) -> WsResult<ProtectedPaths> {
        let mut patterns: Vec<String> = if use_defaults {
            Self::DEFAULTS.iter().map(|s| s.to_string()).collect()
        } else {
            Vec::new()
        };
        patterns.extend(extra.iter().cloned());
        let mut p = Self::from_patterns(patterns)?;
        if use_defaults {
            let mut b = GlobSetBuilder::new();
            for name in Self::VENDORED {
                b.add(
                    GlobBuilder::new(&format!("**/{name}"))
                        .literal_separator(true)
                        .build()
                        .map_err(|e| WorkspaceError::Pattern {
                            pattern: name.to_string(),
                            detail: e.kind().to_string(),
                        })?,
                );
            }
            p.vendored = b.build().map_err(|e| WorkspaceError::Pattern {
                pattern: Self::VENDORED.join(" "),
                detail: e.to_string(),
            })?;
        }
        Ok(p)
    }

    pub fn defaults() -> ProtectedPaths {
        Self::new(true, &[]).expect("the default patterns compile")
    }

    fn from_patterns(patterns: Vec<String>) -> WsResult<ProtectedPaths> {
        let mut b = GlobSetBuilder::new();
        for p in &patterns {
            for glob in expand(p)? {
                let g = GlobBuilder::new(&glob)
                    .literal_separator(true)
                    .backslash_escape(true)
                    .build()
                    .map_err(|e| WorkspaceError::Pattern {
                        pattern: p.clone(),
                        detail: e.kind().to_string(),
                    })?;
                b.add(g);
            }
        }
        let set = b.build().map_err(|e| WorkspaceError::Pattern {
            pattern: patterns.join(" "),
            detail: e.to_string(),
        })?;
        Ok(ProtectedPaths {
            patterns,
            set,
            exempt: None,
            vendored: GlobSet::empty(),
        })
    }

    /// These patterns with the paths `globs` match exempt from them ([`exempt_glob`]).
    pub fn exempting(mut self, globs: &[String]) -> WsResult<ProtectedPaths> {
        if globs.is_empty() {
            return Ok(self);
        }
        let mut b = GlobSetBuilder::new();
        for g in globs {
            b.add(exempt_glob(g).map_err(|detail| WorkspaceError::Pattern {
                pattern: g.clone(),
                detail,
            })?);
        }
        self.exempt = Some(b.build().map_err(|e| WorkspaceError::Pattern {
            pattern: globs.join(" "),
            detail: e.to_string(),
        })?);
        Ok(self)
    }

    /// Whether the patterns protect `path` but an exemption lets it change.
    pub fn is_exempt(&self, path: &[u8]) -> bool {
        let text = String::from_utf8_lossy(path);
        self.set.is_match(text.as_ref())
            && self
                .exempt
                .as_ref()
                .is_some_and(|e| e.is_match(text.as_ref()))
    }

    /// The patterns as given (for the receipt).
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// Whether `path` (repository-relative, `/`-separated) or one of its ancestors is protected.
    pub fn is_protected(&self, path: &[u8]) -> bool {
        let text = String::from_utf8_lossy(path);
        self.set.is_match(text.as_ref())
            && !self
                .exempt
                .as_ref()
                .is_some_and(|e| e.is_match(text.as_ref()))
    }

    /// Whether `path` or one of its ancestors matches a protected pattern, `[[allow_test_change]]`
    /// exemptions or not: the test surface a check's writes are judged on (the exemptions let
    /// the agent change a test, never the check write into one).
    pub fn matches_patterns(&self, path: &[u8]) -> bool {
        self.set.is_match(String::from_utf8_lossy(path).as_ref())
    }

    fn is_vendored_root(&self, path: &[u8]) -> bool {
        !self.vendored.is_empty()
            && self
                .vendored
                .is_match(String::from_utf8_lossy(path).as_ref())
    }

    /// The topmost vendored root strictly above `path` (its length in bytes), if `path` lies
    /// beneath one.
    pub fn vendored_root_of(&self, path: &[u8]) -> Option<usize> {
        if self.vendored.is_empty() {
            return None;
        }
        let mut i = 0;
        while let Some(off) = path[i..].iter().position(|&b| b == b'/') {
            if self.is_vendored_root(&path[..i + off]) {
                return Some(i + off);
            }
            i += off + 1;
        }
        None
    }
}

/// The shortest prefix of `path` (or `path`) that `t0` has nothing at: where the new entries begin.
fn topmost_new(path: &[u8], t0: &Manifest) -> Vec<u8> {
    let is_new = |p: &[u8]| t0.get(p).is_none() && !t0.has_beneath(p);
    let mut i = 0;
    while let Some(off) = path[i..].iter().position(|&b| b == b'/') {
        if is_new(&path[..i + off]) {
            return path[..i + off].to_vec();
        }
        i += off + 1;
    }
    path.to_vec()
}

/// Whether the new entry at `path`, beneath the vendored root `path[..root]`, belongs to a new
/// package (see the module's comment). `namespaces` caches, per directory, whether it held no
/// file at t0.
fn in_new_package(
    path: &[u8],
    root: usize,
    t0: &Manifest,
    tree: &Manifest,
    protected: &ProtectedPaths,
    namespaces: &mut BTreeMap<Vec<u8>, bool>,
) -> bool {
    let new = topmost_new(path, t0);
    if new.len() <= root {
        // The vendored tree itself is new: all of it is the agent's.
        return true;
    }
    // A new file directly in a directory of t0 joins whatever that directory is.
    if !tree.has_beneath(&new) {
        return false;
    }
    let parent = tree_path::parent(&new);
    if parent.len() == root {
        return true;
    }
    if protected.is_vendored_root(parent) {
        return false;
    }
    *namespaces.entry(parent.to_vec()).or_insert_with(|| {
        !t0.iter_beneath(parent)
            .any(|(p, _)| !p[parent.len() + 1..].contains(&b'/'))
    })
}

/// The globs one pattern stands for (itself and everything beneath it).
fn expand(pattern: &str) -> WsResult<Vec<String>> {
    let bad = |detail: &str| {
        Err(WorkspaceError::Pattern {
            pattern: pattern.to_string(),
            detail: detail.to_string(),
        })
    };
    let trimmed = pattern.trim();
    if trimmed.is_empty() {
        return bad("empty pattern");
    }
    if trimmed.split('/').any(|c| c == "..") {
        return bad("`..` is not allowed");
    }
    let anchored_by_slash = trimmed.starts_with('/');
    let body = trimmed.trim_start_matches('/').trim_end_matches('/');
    if body.is_empty() {
        return bad("a pattern must name something below the repository root");
    }
    let base = if anchored_by_slash || body.contains('/') {
        body.to_string()
    } else {
        format!("**/{body}")
    };
    Ok(vec![base.clone(), format!("{base}/**")])
}

/// Every protected path that differs between the baseline and the snapshot (added, modified,
/// deleted, or hard-linked to another path), plus upper-layer entries at protected paths that a
/// tree cannot hold (a fifo or device planted in `tests/`).
pub fn protected_changes(
    baseline: &Manifest,
    snapshot: &Snapshot,
    protected: &ProtectedPaths,
) -> Vec<ProtectedChange> {
    let mut namespaces = BTreeMap::new();
    let mut frozen = |p: &[u8], change: ChangeKind| {
        if protected.is_protected(p) {
            return true;
        }
        match protected.vendored_root_of(p) {
            None => false,
            Some(root)
                if p[root + 1..].iter().all(|&b| b != b'/')
                    && ProtectedPaths::VENDORED_LISTINGS
                        .iter()
                        .any(|n| n.as_bytes() == &p[root + 1..]) =>
            {
                false
            }
            Some(_) if change != ChangeKind::Added => true,
            Some(root) => !in_new_package(
                p,
                root,
                baseline,
                &snapshot.manifest,
                protected,
                &mut namespaces,
            ),
        }
    };
    let mut out: Vec<ProtectedChange> = snapshot
        .changes(baseline)
        .into_iter()
        .filter(|(p, change)| frozen(p, *change))
        .map(|(p, change)| ProtectedChange {
            path: String::from_utf8_lossy(&p).into_owned(),
            change,
        })
        .collect();
    for p in &snapshot.not_in_tree {
        if protected.is_protected(p) || protected.vendored_root_of(p).is_some() {
            out.push(ProtectedChange {
                path: String::from_utf8_lossy(p).into_owned(),
                change: ChangeKind::Added,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(list: &[&str]) -> ProtectedPaths {
        ProtectedPaths::new(
            false,
            &list.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        )
        .unwrap()
    }

    #[test]
    fn an_exempt_path_is_no_longer_protected_and_its_siblings_still_are() {
        let set = ProtectedPaths::defaults()
            .exempting(&["tests/test_api.py".to_string()])
            .unwrap();
        assert!(!set.is_protected(b"tests/test_api.py"));
        assert!(set.is_exempt(b"tests/test_api.py"));
        assert!(set.is_protected(b"tests/test_other.py"));
        assert!(set.is_protected(b"tests"));
        assert!(
            !set.is_exempt(b"src/api.py"),
            "an exemption of an unprotected path exempts nothing"
        );
    }

    #[test]
    fn an_exempt_path_still_matches_the_patterns() {
        let set = ProtectedPaths::defaults()
            .exempting(&["tests/**".to_string()])
            .unwrap();
        assert!(!set.is_protected(b"tests/test_made.py"));
        assert!(set.matches_patterns(b"tests/test_made.py"));
        assert!(!set.matches_patterns(b"src/api.py"));
    }

    #[test]
    fn a_bare_name_matches_at_any_depth() {
        let set = p(&["conftest.py", "*_test.go"]);
        assert!(set.is_protected(b"conftest.py"));
        assert!(set.is_protected(b"pkg/sub/conftest.py"));
        assert!(set.is_protected(b"x/y_test.go"));
        assert!(!set.is_protected(b"x/y_test.go.orig"));
        assert!(!set.is_protected(b"main.go"));
    }

    #[test]
    fn a_directory_pattern_protects_everything_beneath_it() {
        let set = p(&["tests/"]);
        assert!(set.is_protected(b"tests"));
        assert!(set.is_protected(b"tests/a/b.py"));
        assert!(set.is_protected(b"pkg/tests/x.py"));
        assert!(!set.is_protected(b"tests.py"));
    }

    #[test]
    fn a_pattern_with_a_slash_or_a_leading_slash_is_anchored() {
        let set = p(&["/Makefile", ".github/workflows/*"]);
        assert!(set.is_protected(b"Makefile"));
        assert!(!set.is_protected(b"sub/Makefile"));
        assert!(set.is_protected(b".github/workflows/ci.yml"));
        assert!(!set.is_protected(b"x/.github/workflows/ci.yml"));
    }

    #[test]
    fn star_does_not_cross_a_directory() {
        let set = p(&["/src/*.py"]);
        assert!(set.is_protected(b"src/a.py"));
        assert!(!set.is_protected(b"src/sub/a.py"));
    }

    #[test]
    fn defaults_cover_each_ecosystem_and_leave_sources_alone() {
        let d = ProtectedPaths::defaults();
        for path in [
            "tests/test_x.py",
            "pkg/test_util.py",
            "pkg/util_test.py",
            "conftest.py",
            "pytest.ini",
            "tox.ini",
            "setup.cfg",
            "cmd/x_test.go",
            ".github/workflows/ci.yml",
            ".gitlab-ci.yml",
            "Makefile",
            "jest.config.js",
            "vitest.config.ts",
            "src/app.test.ts",
            "src/test/java/AppTest.java",
            ".cargo/config.toml",
            "loop.toml",
            ".gitmodules",
            ".gitattributes",
            "sub/.gitattributes",
            ".loopexec/x",
            "mutants.toml",
            "stryker.conf.json",
            "stryker.config.mjs",
            ".nycrc.json",
            ".c8rc",
            "tarpaulin.toml",
            ".mutmut-cache",
            "mutmut_config.py",
        ] {
            assert!(
                d.is_protected(path.as_bytes()),
                "{path} should be protected"
            );
        }
        for path in [
            "src/main.rs",
            "Cargo.toml",
            "pyproject.toml",
            "package.json",
            "lib/util.py",
            "cmd/main.go",
            "src/app.ts",
            "README.md",
        ] {
            assert!(
                !d.is_protected(path.as_bytes()),
                "{path} should not be protected"
            );
        }
    }

    #[test]
    fn test_data_conventions_are_protected_wherever_they_live() {
        let d = ProtectedPaths::defaults();
        for path in [
            "src/__snapshots__/app.test.js.snap",
            "src/snapshots/calc__renders.snap",
            "pkg/render/expected.golden",
            "internal/golden/out.txt",
            "lib/Report.approved.txt",
            "spec/cassettes/api.yml",
            "app/__fixtures__/user.json",
            "src/__mocks__/fs.js",
            "pkg/testdata/table.csv",
        ] {
            assert!(
                d.is_protected(path.as_bytes()),
                "{path} should be protected"
            );
        }
        for path in [
            "src/snapshot.rs",
            "src/render.go",
            "lib/approve.py",
            "golden.py",
            "src/snapshots/mod.rs",
        ] {
            assert!(
                !d.is_protected(path.as_bytes()),
                "{path} should not be protected"
            );
        }
    }

    fn manifest(paths: &[&str]) -> Manifest {
        let mut m = Manifest::default();
        for p in paths {
            m.insert(
                p.as_bytes().to_vec(),
                crate::workspace::Entry {
                    kind: crate::workspace::EntryKind::File,
                    oid: crate::workspace::object_id::blob_id(p.as_bytes()),
                },
            )
            .unwrap();
        }
        m
    }

    /// The protected changes of a step from `t0` to a tree holding `t0` minus `deleted`, with
    /// `changed` rewritten and `added` new.
    fn vendored_changes(
        t0: &[&str],
        changed: &[&str],
        added: &[&str],
        deleted: &[&str],
    ) -> Vec<(String, ChangeKind)> {
        let base = manifest(t0);
        let mut tree = base.clone();
        for p in deleted {
            tree.remove_tree(p.as_bytes());
        }
        for p in changed {
            tree.insert(
                p.as_bytes().to_vec(),
                crate::workspace::Entry {
                    kind: crate::workspace::EntryKind::File,
                    oid: crate::workspace::object_id::blob_id(b"patched"),
                },
            )
            .unwrap();
        }
        for p in added {
            tree.insert(
                p.as_bytes().to_vec(),
                crate::workspace::Entry {
                    kind: crate::workspace::EntryKind::File,
                    oid: crate::workspace::object_id::blob_id(p.as_bytes()),
                },
            )
            .unwrap();
        }
        let snapshot = Snapshot {
            tree_id: tree.tree_id(),
            manifest: tree,
            from_upper: Default::default(),
            hardlinked: Default::default(),
            not_in_tree: vec![],
            left_out: vec![],
            artefacts: vec![],
        };
        protected_changes(&base, &snapshot, &ProtectedPaths::defaults())
            .into_iter()
            .map(|c| (c.path, c.change))
            .collect()
    }

    const NODE_T0: &[&str] = &[
        "node_modules/.package-lock.json",
        "node_modules/tap-runner/package.json",
        "node_modules/tap-runner/lib/run.js",
        "node_modules/@scope/assert/index.js",
        "vendor/github.com/stretchr/testify/doc.go",
        "vendor/github.com/stretchr/testify/assert/assertions.go",
        "vendor/modules.txt",
        "src/app.js",
    ];

    #[test]
    fn an_existing_vendored_file_cannot_be_modified_or_deleted() {
        assert_eq!(
            vendored_changes(
                NODE_T0,
                &["node_modules/tap-runner/lib/run.js"],
                &[],
                &["vendor/github.com/stretchr/testify/assert/assertions.go"]
            ),
            vec![
                (
                    "node_modules/tap-runner/lib/run.js".to_string(),
                    ChangeKind::Modified
                ),
                (
                    "vendor/github.com/stretchr/testify/assert/assertions.go".to_string(),
                    ChangeKind::Deleted
                ),
            ]
        );
    }

    #[test]
    fn a_new_package_may_be_added_at_a_vendored_root_or_in_a_namespace_directory() {
        let added = [
            "node_modules/left-pad/package.json",
            "node_modules/left-pad/index.js",
            "node_modules/@scope/new/index.js",
            "vendor/github.com/new/mod/mod.go",
            "third_party/zlib/zlib.h",
        ];
        assert_eq!(vendored_changes(NODE_T0, &[], &added, &[]), vec![]);
        // An edit beside the vendored tree is no concern of this guard.
        assert_eq!(vendored_changes(NODE_T0, &["src/app.js"], &[], &[]), vec![]);
        // The package managers' listings at the top of a root follow the new dependency.
        assert_eq!(
            vendored_changes(
                NODE_T0,
                &["vendor/modules.txt", "node_modules/.package-lock.json"],
                &[],
                &[]
            ),
            vec![]
        );
    }

    #[test]
    fn nothing_may_join_a_package_that_exists_at_t0() {
        for joined in [
            // node resolves `./run` to a file named `run` before `run.js`.
            "node_modules/tap-runner/lib/run",
            // A nested node_modules shadows the hoisted package for the runner's requires.
            "node_modules/tap-runner/node_modules/@scope/assert/index.js",
            // Go compiles every file of a package directory.
            "vendor/github.com/stretchr/testify/assert/zz_hook.go",
            // A new package directory inside a module that holds files at t0.
            "vendor/github.com/stretchr/testify/assertx/x.go",
            // A file at the root of node_modules is resolved before a package directory.
            "node_modules/tap-runner.js",
        ] {
            assert_eq!(
                vendored_changes(NODE_T0, &[], &[joined], &[]),
                vec![(joined.to_string(), ChangeKind::Added)],
                "{joined}"
            );
        }
    }

    #[test]
    fn a_listings_name_inside_a_package_is_frozen_like_any_file() {
        let t0 = [NODE_T0, &["node_modules/tap-runner/modules.txt"]].concat();
        assert_eq!(
            vendored_changes(&t0, &["node_modules/tap-runner/modules.txt"], &[], &[]),
            vec![(
                "node_modules/tap-runner/modules.txt".to_string(),
                ChangeKind::Modified
            )]
        );
    }

    #[test]
    fn a_vendored_tree_that_t0_did_not_have_is_all_the_agents() {
        assert_eq!(
            vendored_changes(
                &["src/app.js"],
                &[],
                &["node_modules/x/index.js", "vendor/a/b.go"],
                &[]
            ),
            vec![]
        );
    }

    #[test]
    fn dot_dot_and_empty_patterns_are_refused() {
        for bad in ["../x", "a/../b", "", "/"] {
            assert!(
                matches!(
                    ProtectedPaths::new(false, &[bad.to_string()]),
                    Err(WorkspaceError::Pattern { .. })
                ),
                "{bad:?}"
            );
        }
    }
}
