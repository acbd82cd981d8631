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

use super::manifest::Manifest;
use super::snapshot::{ChangeKind, Snapshot};
use super::{WorkspaceError, WsResult};
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

/// A compiled set of protected-path patterns.
#[derive(Debug, Clone)]
pub struct ProtectedPaths {
    patterns: Vec<String>,
    set: GlobSet,
    /// Paths exempt from the patterns (the loop's `[[allow_test_change]]` paths): neither
    /// guarded nor frozen from t0 in the check.
    exempt: Option<GlobSet>,
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
    if pattern.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err("an empty, `.` or `..` component".into());
    }
    GlobBuilder::new(pattern).literal_separator(true).backslash_escape(true).build().map_err(|e| format!("not a glob: {}", e.kind()))
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

    /// The defaults plus `extra` (when `use_defaults`), or `extra` alone.
    pub fn new(use_defaults: bool, extra: &[String]) -> WsResult<ProtectedPaths> {
        let mut patterns: Vec<String> = if use_defaults { Self::DEFAULTS.iter().map(|s| s.to_string()).collect() } else { Vec::new() };
        patterns.extend(extra.iter().cloned());
        Self::from_patterns(patterns)
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
                    .map_err(|e| WorkspaceError::Pattern { pattern: p.clone(), detail: e.kind().to_string() })?;
                b.add(g);
            }
        }
        let set = b.build().map_err(|e| WorkspaceError::Pattern { pattern: patterns.join(" "), detail: e.to_string() })?;
        Ok(ProtectedPaths { patterns, set, exempt: None })
    }

    /// These patterns with the paths `globs` match exempt from them ([`exempt_glob`]).
    pub fn exempting(mut self, globs: &[String]) -> WsResult<ProtectedPaths> {
        if globs.is_empty() {
            return Ok(self);
        }
        let mut b = GlobSetBuilder::new();
        for g in globs {
            b.add(exempt_glob(g).map_err(|detail| WorkspaceError::Pattern { pattern: g.clone(), detail })?);
        }
        self.exempt = Some(b.build().map_err(|e| WorkspaceError::Pattern { pattern: globs.join(" "), detail: e.to_string() })?);
        Ok(self)
    }

    /// Whether the patterns protect `path` but an exemption lets it change.
    pub fn is_exempt(&self, path: &[u8]) -> bool {
        let text = String::from_utf8_lossy(path);
        self.set.is_match(text.as_ref()) && self.exempt.as_ref().is_some_and(|e| e.is_match(text.as_ref()))
    }

    /// The patterns as given (for the receipt).
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// Whether `path` (repository-relative, `/`-separated) or one of its ancestors is protected.
    pub fn is_protected(&self, path: &[u8]) -> bool {
        let text = String::from_utf8_lossy(path);
        self.set.is_match(text.as_ref()) && !self.exempt.as_ref().is_some_and(|e| e.is_match(text.as_ref()))
    }
}

/// The globs one pattern stands for (itself and everything beneath it).
fn expand(pattern: &str) -> WsResult<Vec<String>> {
    let bad = |detail: &str| Err(WorkspaceError::Pattern { pattern: pattern.to_string(), detail: detail.to_string() });
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
    let base = if anchored_by_slash || body.contains('/') { body.to_string() } else { format!("**/{body}") };
    Ok(vec![base.clone(), format!("{base}/**")])
}

/// Every protected path that differs between the baseline and the snapshot (added, modified,
/// deleted, or hard-linked to another path), plus upper-layer entries at protected paths that a
/// tree cannot hold (a fifo or device planted in `tests/`).
pub fn protected_changes(baseline: &Manifest, snapshot: &Snapshot, protected: &ProtectedPaths) -> Vec<ProtectedChange> {
    let mut out: Vec<ProtectedChange> = snapshot
        .changes(baseline)
        .into_iter()
        .filter(|(p, _)| protected.is_protected(p))
        .map(|(p, change)| ProtectedChange { path: String::from_utf8_lossy(&p).into_owned(), change })
        .collect();
    for p in &snapshot.not_in_tree {
        if protected.is_protected(p) {
            out.push(ProtectedChange { path: String::from_utf8_lossy(p).into_owned(), change: ChangeKind::Added });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(list: &[&str]) -> ProtectedPaths {
        ProtectedPaths::new(false, &list.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn an_exempt_path_is_no_longer_protected_and_its_siblings_still_are() {
        let set = ProtectedPaths::defaults().exempting(&["tests/test_api.py".to_string()]).unwrap();
        assert!(!set.is_protected(b"tests/test_api.py"));
        assert!(set.is_exempt(b"tests/test_api.py"));
        assert!(set.is_protected(b"tests/test_other.py"));
        assert!(set.is_protected(b"tests"));
        assert!(!set.is_exempt(b"src/api.py"), "an exemption of an unprotected path exempts nothing");
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
        for path in ["tests/test_x.py", "pkg/test_util.py", "pkg/util_test.py", "conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "cmd/x_test.go", ".github/workflows/ci.yml", ".gitlab-ci.yml", "Makefile", "jest.config.js", "vitest.config.ts", "src/app.test.ts", "src/test/java/AppTest.java", ".cargo/config.toml", "loop.toml", ".gitmodules", ".gitattributes", "sub/.gitattributes", ".loopexec/x"] {
            assert!(d.is_protected(path.as_bytes()), "{path} should be protected");
        }
        for path in ["src/main.rs", "Cargo.toml", "pyproject.toml", "package.json", "lib/util.py", "cmd/main.go", "src/app.ts", "README.md"] {
            assert!(!d.is_protected(path.as_bytes()), "{path} should not be protected");
        }
    }

    #[test]
    fn dot_dot_and_empty_patterns_are_refused() {
        for bad in ["../x", "a/../b", "", "/"] {
            assert!(matches!(ProtectedPaths::new(false, &[bad.to_string()]), Err(WorkspaceError::Pattern { .. })), "{bad:?}");
        }
    }
}
