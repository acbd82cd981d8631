//! Report paths: the `--report PATH` patterns (repeatable, globs allowed), validated once, and
//! resolved beneath a directory (the check's scratch layer) without following any link.
//!
//! A pattern is a `/`-separated path relative to the directory: `*`, `?`, `[...]` and `{a,b}`
//! match within one component, `**` across components. The walk starts at the pattern's literal
//! leading directories, descends only as deep as the pattern can match (any depth for `**`, up to
//! [`MAX_WALK_DEPTH`]), never enters a symlinked directory, and visits at most
//! [`MAX_WALK_ENTRIES`] entries. A symlink whose name matches is returned as a match, so that
//! reading it fails loudly (the reader refuses links) instead of the pattern matching nothing.
//! Every directory is opened through the given directory's descriptor (`openat2`, no link
//! followed), never by its path again.

use super::{read_report, Format, ParsedReport, ReportError, ReportProblem};
use crate::safefs::SafeDir;
use globset::{GlobBuilder, GlobMatcher};
use nix::fcntl::AtFlags;
use std::os::fd::AsRawFd;

/// Most directory entries one resolution visits.
pub const MAX_WALK_ENTRIES: usize = 200_000;
/// Deepest directory a `**` pattern descends to.
pub const MAX_WALK_DEPTH: usize = 64;
/// Most files one pattern may match.
pub const MAX_MATCHES: usize = 10_000;

/// A pattern that cannot name reports (bad input at start: exit class 20 in the engine).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--report {}: {problem}", super::shown(pattern))]
pub struct PatternError {
    pub pattern: String,
    pub problem: String,
}

/// Resolving a pattern failed (not that it matched nothing: that is [`Resolution::unmatched`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--report {}: {problem}", super::shown(pattern))]
pub struct ResolveError {
    pub pattern: String,
    pub problem: String,
}

/// One validated pattern.
#[derive(Debug, Clone)]
pub struct ReportPattern {
    text: String,
    matcher: GlobMatcher,
    /// Literal leading directories (`""` for the top).
    base: String,
    /// How many components below `base` a match can be; `None` for `**`.
    depth: Option<usize>,
    /// The whole pattern is literal: one path, no walk.
    literal: bool,
}

impl ReportPattern {
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// The declared report patterns, in the order given.
#[derive(Debug, Clone, Default)]
pub struct ReportPatterns(Vec<ReportPattern>);

fn has_glob(component: &str) -> bool {
    component.contains(['*', '?', '[', ']', '{', '}', '\\'])
}

impl ReportPatterns {
    /// Validate patterns: relative, no `..`, no empty component, a valid glob.
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Result<Self, PatternError> {
        let mut out = Vec::new();
        for p in patterns {
            let raw = p.as_ref();
            let bad = |problem: &str| PatternError {
                pattern: raw.to_string(),
                problem: problem.to_string(),
            };
            let text = raw.strip_prefix("./").unwrap_or(raw);
            if text.is_empty() {
                return Err(bad("an empty path"));
            }
            if text.contains('\0') {
                return Err(bad("contains a NUL byte"));
            }
            if text.starts_with('/') {
                return Err(bad(
                    "an absolute path (a report path is relative to the check's working directory)",
                ));
            }
            let components: Vec<&str> = text.split('/').collect();
            if components.contains(&"..") {
                return Err(bad("`..` leaves the check's working directory"));
            }
            if components.iter().any(|c| c.is_empty() || *c == ".") {
                return Err(bad("an empty or `.` path component"));
            }
            let matcher = GlobBuilder::new(text)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| bad(&format!("not a valid glob: {e}")))?
                .compile_matcher();
            let literal_count = components.iter().take_while(|c| !has_glob(c)).count();
            let literal = literal_count == components.len();
            let base_count = if literal {
                components.len() - 1
            } else {
                literal_count
            };
            let base = components[..base_count].join("/");
            let rest = &components[base_count..];
            let depth = (!rest.contains(&"**")).then_some(rest.len());
            out.push(ReportPattern {
                text: text.to_string(),
                matcher,
                base,
                depth,
                literal,
            });
        }
        Ok(ReportPatterns(out))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a path (relative to the check's working directory, bytes as a tree holds them)
    /// is one a pattern names: the paths the check must write afresh.
    pub fn matches(&self, path: &[u8]) -> bool {
        let Ok(path) = std::str::from_utf8(path) else {
            return false;
        };
        self.0.iter().any(|p| p.matcher.is_match(path))
    }

    pub fn iter(&self) -> impl Iterator<Item = &ReportPattern> {
        self.0.iter()
    }
}

/// One file a pattern matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundReport {
    pub pattern: String,
    /// Relative to the resolved directory.
    pub path: String,
}

/// What the patterns matched beneath a directory.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Resolution {
    /// Matches, per pattern in order, each pattern's paths sorted.
    pub found: Vec<FoundReport>,
    /// Patterns that matched nothing.
    pub unmatched: Vec<String>,
}

#[derive(PartialEq)]
enum Kind {
    Dir,
    Matchable,
    Missing,
}

fn kind_of(dir: &SafeDir, name: &str) -> Kind {
    match nix::sys::stat::fstatat(
        Some(dir.fd().as_raw_fd()),
        name,
        AtFlags::AT_SYMLINK_NOFOLLOW,
    ) {
        Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => Kind::Dir,
        Ok(_) => Kind::Matchable,
        Err(_) => Kind::Missing,
    }
}

/// Resolve every pattern beneath `dir`.
pub fn resolve(dir: &SafeDir, patterns: &ReportPatterns) -> Result<Resolution, ResolveError> {
    let mut resolution = Resolution::default();
    let mut visited = 0usize;
    for pattern in patterns.iter() {
        let err = |problem: String| ResolveError {
            pattern: pattern.text.clone(),
            problem,
        };
        let mut matches = Vec::new();
        if pattern.literal {
            let (parent, name) = match pattern.text.rsplit_once('/') {
                Some((parent, name)) => (Some(parent), name),
                None => (None, pattern.text.as_str()),
            };
            let opened = parent.map(|p| dir.subdir(p));
            let parent_dir = match &opened {
                None => Some(dir),
                Some(Ok(d)) => Some(d),
                Some(Err(_)) => None,
            };
            if parent_dir.is_some_and(|d| kind_of(d, name) == Kind::Matchable) {
                matches.push(pattern.text.clone());
            }
        } else {
            let mut stack = vec![(pattern.base.clone(), 0usize)];
            while let Some((rel, depth)) = stack.pop() {
                // Always through the directory's descriptor: never its path again.
                let opened;
                let sub = if rel.is_empty() {
                    dir
                } else {
                    match dir.subdir(&rel) {
                        Ok(d) => {
                            opened = d;
                            &opened
                        }
                        Err(_) => continue,
                    }
                };
                let names = sub
                    .list()
                    .map_err(|e| err(format!("listing {}: {e}", super::shown(&rel))))?;
                for name in names {
                    visited += 1;
                    if visited > MAX_WALK_ENTRIES {
                        return Err(err(format!("visited more than {MAX_WALK_ENTRIES} entries; name the reports more precisely")));
                    }
                    let child = if rel.is_empty() {
                        name.clone()
                    } else {
                        format!("{rel}/{name}")
                    };
                    match kind_of(sub, &name) {
                        Kind::Dir => {
                            let deeper = pattern
                                .depth
                                .map_or(depth + 1 < MAX_WALK_DEPTH, |d| depth + 1 < d);
                            if deeper {
                                stack.push((child, depth + 1));
                            }
                        }
                        Kind::Matchable if pattern.matcher.is_match(&child) => {
                            matches.push(child);
                            if matches.len() > MAX_MATCHES {
                                return Err(err(format!("matches more than {MAX_MATCHES} files")));
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        matches.sort();
        if matches.is_empty() {
            resolution.unmatched.push(pattern.text.clone());
        }
        resolution
            .found
            .extend(matches.into_iter().map(|path| FoundReport {
                pattern: pattern.text.clone(),
                path,
            }));
    }
    Ok(resolution)
}

/// One declared report after the check: the file a pattern matched and what it says, or the
/// pattern that matched nothing (`path: None`, a [`ReportProblem::Missing`] error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredReport {
    pub pattern: String,
    pub path: Option<String>,
    pub result: Result<ParsedReport, ReportError>,
}

/// Resolve the patterns beneath `dir` and read every match (in `format`, or sniffed).
pub fn collect(
    dir: &SafeDir,
    patterns: &ReportPatterns,
    format: Option<Format>,
) -> Result<Vec<DeclaredReport>, ResolveError> {
    let resolution = resolve(dir, patterns)?;
    let mut out = Vec::new();
    for pattern in patterns.iter() {
        if resolution.unmatched.contains(&pattern.text) {
            out.push(DeclaredReport {
                pattern: pattern.text.clone(),
                path: None,
                result: Err(ReportError::new(&pattern.text, ReportProblem::Missing)),
            });
        }
        for found in resolution
            .found
            .iter()
            .filter(|f| f.pattern == pattern.text)
        {
            out.push(DeclaredReport {
                pattern: pattern.text.clone(),
                path: Some(found.path.clone()),
                result: read_report(dir, &found.path, format),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(p: &str) -> String {
        ReportPatterns::new(&[p]).unwrap_err().problem
    }

    #[test]
    fn bad_patterns_are_refused_with_the_reason() {
        assert!(problem("/tmp/r.xml").starts_with("an absolute path"));
        assert!(problem("../r.xml").starts_with("`..`"));
        assert!(problem("a//r.xml").starts_with("an empty"));
        assert!(problem("").starts_with("an empty path"));
        assert!(problem("r[.xml").starts_with("not a valid glob"));
    }

    #[test]
    fn literal_prefix_and_depth_bound_the_walk() {
        let p = ReportPatterns::new(&["target/nextest/*/junit.xml", "out/**/*.xml", "report.xml"])
            .unwrap();
        let v: Vec<_> = p
            .iter()
            .map(|p| (p.base.as_str(), p.depth, p.literal))
            .collect();
        assert_eq!(
            v,
            [
                ("target/nextest", Some(2), false),
                ("out", None, false),
                ("", Some(1), true)
            ]
        );
    }
}
