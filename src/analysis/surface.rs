//! The test-determining surface and its digest H0: the files, and the parts of otherwise editable
//! files, that decide which tests run and how. A surface entry is (path, part, SHA-256 of the
//! part's canonical content); the digest is SHA-256 over the sorted entries, so it is stable
//! under file order, key order and edits outside the parts (adding a dependency to Cargo.toml,
//! pyproject.toml or package.json changes nothing). The defaults per ecosystem are listed in
//! [`DEFAULT_WHOLE_FILES`] and the `*_parts` functions, and documented in docs/guards.md; a loop
//! adds globs of its own (whole files).

use std::collections::BTreeMap;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::syntax::{file_name, sha256_hex, DEFAULT_MAX_PARSE_BYTES};
use super::{AnalysisError, SourceFile};

/// Files that are surface whole, by file name at any depth, in each runner's precedence order
/// where it has one (pytest reads the first of `pytest.toml`, `.pytest.toml`, `pytest.ini`,
/// `.pytest.ini`, `pyproject.toml`, `tox.ini`, `setup.cfg` that configures it).
pub const DEFAULT_WHOLE_FILES: &[(&str, &str)] = &[
    // Python: runner configuration, start-up hooks, modules shadowing the runner, toolchain.
    ("pytest.toml", "pytest configuration"),
    (".pytest.toml", "pytest configuration"),
    ("pytest.ini", "pytest configuration"),
    (".pytest.ini", "pytest configuration"),
    ("conftest.py", "pytest start-up hook"),
    ("sitecustomize.py", "interpreter start-up hook"),
    ("usercustomize.py", "interpreter start-up hook"),
    ("pytest.py", "module shadowing the runner"),
    ("py.py", "module shadowing the runner"),
    ("pluggy.py", "module shadowing the runner"),
    ("entry_points.txt", "installed plugin entry points"),
    (".python-version", "toolchain file"),
    // Rust: build scripts, toolchain, cargo and nextest configuration.
    ("build.rs", "build script"),
    ("rust-toolchain", "toolchain file"),
    ("rust-toolchain.toml", "toolchain file"),
    // Go: the workspace file selects the modules tested.
    ("go.work", "go workspace"),
    // JS/TS: node version and runner configuration without a fixed extension.
    (".nvmrc", "toolchain file"),
    (".node-version", "toolchain file"),
    ("node.config.json", "node configuration"),
    // Files a runner or the package manager running it reads by convention (issue 18, item 4):
    // npm's and yarn's settings (`node-options` reach every script), bun's, swc's transforms.
    (".npmrc", "package manager configuration"),
    (".yarnrc", "package manager configuration"),
    (".yarnrc.yml", "package manager configuration"),
    ("bunfig.toml", "bun configuration"),
    (".swcrc", "swc configuration"),
    ("noxfile.py", "nox configuration"),
    (".coveragerc", "coverage configuration"),
];

/// File-name prefixes (any extension) that are surface whole: jest, vitest (which also reads
/// vite's config), mocha, ava, babel (its transforms run over the tests).
pub const DEFAULT_WHOLE_PREFIXES: &[(&str, &str)] = &[
    ("jest.config.", "jest configuration"),
    ("vitest.config.", "vitest configuration"),
    ("vitest.workspace.", "vitest configuration"),
    ("vite.config.", "vitest configuration"),
    (".mocharc", "mocha configuration"),
    ("ava.config.", "ava configuration"),
    ("babel.config.", "babel configuration"),
    (".babelrc", "babel configuration"),
    ("karma.conf.", "karma configuration"),
    ("playwright.config.", "playwright configuration"),
    ("cypress.config.", "cypress configuration"),
];

/// `.env` files vite (and so vitest) loads into `import.meta.env` by mode (`.env`, `.env.local`,
/// `.env.test`, `.env.test.local`, ...), dotenv loaders read: surface whole. Templates that no
/// loader reads by default are not.
fn is_env_file(name: &str) -> bool {
    name == ".env"
        || name.strip_prefix(".env.").is_some_and(|mode| {
            !mode.is_empty()
                && !matches!(
                    mode,
                    "example" | "sample" | "template" | "dist" | "defaults"
                )
        })
}

/// One surface entry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct SurfaceEntry {
    pub path: String,
    /// `file` for a whole file, else the key or section (`[[test]]`, `tool.pytest`, `scripts.test`).
    pub part: String,
    /// Hex SHA-256 of the part's canonical content.
    pub sha256: String,
}

/// H0: the entries, sorted, and the digest over them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SurfaceDigest {
    pub entries: Vec<SurfaceEntry>,
    pub sha256: String,
}

/// One difference between two surface digests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum SurfaceChange {
    Added {
        entry: SurfaceEntry,
    },
    Removed {
        entry: SurfaceEntry,
    },
    Changed {
        before: SurfaceEntry,
        after: SurfaceEntry,
    },
}

/// Which files and parts make up the surface: the defaults plus a loop's extra globs.
#[derive(Debug, Clone)]
pub struct SurfaceSpec {
    extra: GlobSet,
    /// Files with parts larger than this are digested whole instead of parsed.
    max_parse_bytes: usize,
}

impl SurfaceSpec {
    /// The defaults plus `extra_globs` (globset syntax against repository-relative paths; `*`
    /// stays within one directory, `**` crosses them).
    pub fn new(extra_globs: &[String]) -> Result<SurfaceSpec, AnalysisError> {
        let mut builder = GlobSetBuilder::new();
        for glob in extra_globs {
            let parsed = GlobBuilder::new(glob)
                .literal_separator(true)
                .build()
                .map_err(|e| AnalysisError::InvalidGlob {
                    glob: glob.clone(),
                    message: e.to_string(),
                })?;
            builder.add(parsed);
        }
        let extra = builder.build().map_err(|e| AnalysisError::InvalidGlob {
            glob: extra_globs.join(", "),
            message: e.to_string(),
        })?;
        Ok(SurfaceSpec {
            extra,
            max_parse_bytes: DEFAULT_MAX_PARSE_BYTES,
        })
    }

    /// Whether a path can contribute surface entries (the engine reads only these files).
    pub fn is_candidate(&self, path: &str) -> bool {
        whole_file_role(path).is_some() || part_kind(path).is_some() || self.extra.is_match(path)
    }

    /// The entries one file contributes (none when it is not a candidate).
    pub fn entries(&self, file: SourceFile<'_>) -> Vec<SurfaceEntry> {
        let entry = |part: &str, content: &[u8]| SurfaceEntry {
            path: file.path.to_string(),
            part: part.to_string(),
            sha256: sha256_hex(content),
        };
        if whole_file_role(file.path).is_some() || self.extra.is_match(file.path) {
            return vec![entry("file", file.bytes)];
        }
        let Some(kind) = part_kind(file.path) else {
            return Vec::new();
        };
        if file.bytes.len() > self.max_parse_bytes {
            // Too large to parse within bounds: any edit anywhere in it is a change.
            return vec![entry("above the parse cap", file.bytes)];
        }
        let parts = match std::str::from_utf8(file.bytes) {
            Ok(text) => match kind {
                PartKind::CargoToml => cargo_parts(text),
                PartKind::PyprojectToml => pyproject_parts(text),
                PartKind::PackageJson => package_json_parts(text),
                PartKind::ToxIni => ini_parts(text, &[("pytest", None)]),
                PartKind::SetupCfg => ini_parts(
                    text,
                    &[
                        ("tool:pytest", None),
                        ("options.entry_points", Some("pytest11")),
                    ],
                ),
                PartKind::GoMod => Ok(go_mod_parts(text)),
            },
            Err(_) => Err(()),
        };
        match parts {
            Ok(parts) => parts
                .into_iter()
                .map(|(part, content)| entry(&part, &content))
                .collect(),
            // A file its runner cannot read either is digested whole: any edit is a change.
            Err(()) => vec![entry("unparsable", file.bytes)],
        }
    }

    /// H0 over the given files (non-candidates are ignored).
    pub fn digest<'a>(&self, files: impl IntoIterator<Item = SourceFile<'a>>) -> SurfaceDigest {
        let mut entries: Vec<SurfaceEntry> =
            files.into_iter().flat_map(|f| self.entries(f)).collect();
        entries.sort();
        let mut hasher = Sha256::new();
        for e in &entries {
            // Length-prefixed fields: no path or part can forge another entry's boundaries.
            for field in [e.path.as_bytes(), e.part.as_bytes(), e.sha256.as_bytes()] {
                hasher.update((field.len() as u64).to_be_bytes());
                hasher.update(field);
            }
        }
        SurfaceDigest {
            sha256: hex::encode(hasher.finalize()),
            entries,
        }
    }
}

impl SurfaceDigest {
    /// What differs from `t0` (self is the end state), naming each entry.
    pub fn diff_from(&self, t0: &SurfaceDigest) -> Vec<SurfaceChange> {
        let key = |e: &SurfaceEntry| (e.path.clone(), e.part.clone());
        let before: BTreeMap<_, &SurfaceEntry> = t0.entries.iter().map(|e| (key(e), e)).collect();
        let after: BTreeMap<_, &SurfaceEntry> = self.entries.iter().map(|e| (key(e), e)).collect();
        let mut changes = Vec::new();
        for (k, b) in &before {
            match after.get(k) {
                None => changes.push(SurfaceChange::Removed {
                    entry: (*b).clone(),
                }),
                Some(a) if a.sha256 != b.sha256 => changes.push(SurfaceChange::Changed {
                    before: (*b).clone(),
                    after: (*a).clone(),
                }),
                Some(_) => {}
            }
        }
        for (k, a) in &after {
            if !before.contains_key(k) {
                changes.push(SurfaceChange::Added {
                    entry: (*a).clone(),
                });
            }
        }
        changes
    }
}

/// The role of a file that is surface whole, by the defaults.
pub fn whole_file_role(path: &str) -> Option<&'static str> {
    let name = file_name(path);
    if let Some((_, role)) = DEFAULT_WHOLE_FILES.iter().find(|(n, _)| *n == name) {
        if name == "entry_points.txt" {
            let parent = path.rsplit('/').nth(1).unwrap_or_default();
            return (parent.ends_with(".dist-info") || parent.ends_with(".egg-info"))
                .then_some(*role);
        }
        return Some(role);
    }
    if let Some((_, role)) = DEFAULT_WHOLE_PREFIXES
        .iter()
        .find(|(p, _)| name.starts_with(p))
    {
        return Some(role);
    }
    if name.ends_with(".pth") {
        return Some("interpreter start-up hook");
    }
    if is_env_file(name) {
        return Some("environment file a runner loads");
    }
    let dirs: Vec<&str> = path.split('/').collect();
    let dirs = &dirs[..dirs.len().saturating_sub(1)];
    if dirs
        .iter()
        .any(|d| matches!(*d, "_pytest" | "pytest" | "pluggy"))
    {
        return Some("module shadowing the runner");
    }
    let parent = dirs.last().copied().unwrap_or_default();
    match (parent, name) {
        (".cargo", "config" | "config.toml") => Some("cargo configuration"),
        (".config", "nextest.toml") => Some("nextest configuration"),
        _ => None,
    }
}

#[derive(Debug, Clone, Copy)]
enum PartKind {
    CargoToml,
    PyprojectToml,
    PackageJson,
    ToxIni,
    SetupCfg,
    GoMod,
}

fn part_kind(path: &str) -> Option<PartKind> {
    match file_name(path) {
        "Cargo.toml" => Some(PartKind::CargoToml),
        "pyproject.toml" => Some(PartKind::PyprojectToml),
        "package.json" if !path.split('/').any(|d| d == "node_modules") => {
            Some(PartKind::PackageJson)
        }
        "tox.ini" => Some(PartKind::ToxIni),
        "setup.cfg" => Some(PartKind::SetupCfg),
        "go.mod" => Some(PartKind::GoMod),
        _ => None,
    }
}

type Parts = Vec<(String, Vec<u8>)>;

/// Canonical bytes of a serde value: JSON with object keys sorted (toml and serde_json tables
/// are ordered maps here; a test pins that key order does not matter).
fn canonical<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// The value at a dotted key path of a TOML table.
fn toml_at<'v>(table: &'v toml::Table, path: &[&str]) -> Option<&'v toml::Value> {
    let (first, rest) = path.split_first()?;
    let mut value = table.get(*first)?;
    for key in rest {
        value = value.as_table()?.get(*key)?;
    }
    Some(value)
}

/// The keys of a cargo target table that decide whether and how its tests run.
const CARGO_TARGET_KEYS: &[&str] = &[
    "name",
    "path",
    "test",
    "doctest",
    "harness",
    "required-features",
    "proc-macro",
    "crate-type",
];

fn cargo_target(value: &toml::Value) -> toml::Value {
    let mut kept = toml::Table::new();
    if let Some(table) = value.as_table() {
        for key in CARGO_TARGET_KEYS {
            if let Some(v) = table.get(*key) {
                kept.insert((*key).to_string(), v.clone());
            }
        }
    }
    toml::Value::Table(kept)
}

/// Cargo.toml: `package.{autotests,autobins,autoexamples,autolib,autobenches,build}`, `[lib]`'s
/// and every `[[bin]]`/`[[example]]`/`[[bench]]`'s test keys, `[[test]]` whole,
/// `workspace.{members,exclude,default-members}`, `[profile.test]`, and the assertion-relevant
/// keys of `[profile.dev]` (`debug-assertions`, `overflow-checks`, `panic`).
fn cargo_parts(text: &str) -> Result<Parts, ()> {
    let table: toml::Table = toml::from_str(text).map_err(|_| ())?;
    let mut parts = Vec::new();
    for key in [
        "autotests",
        "autobins",
        "autoexamples",
        "autolib",
        "autobenches",
        "build",
    ] {
        if let Some(v) = toml_at(&table, &["package", key]) {
            parts.push((format!("package.{key}"), canonical(v)));
        }
    }
    if let Some(lib) = table.get("lib") {
        parts.push(("[lib]".to_string(), canonical(&cargo_target(lib))));
    }
    for kind in ["bin", "example", "bench"] {
        if let Some(targets) = table.get(kind).and_then(|t| t.as_array()) {
            let kept: Vec<toml::Value> = targets.iter().map(cargo_target).collect();
            parts.push((format!("[[{kind}]]"), canonical(&kept)));
        }
    }
    if let Some(tests) = table.get("test") {
        parts.push(("[[test]]".to_string(), canonical(tests)));
    }
    // Dev-dependencies exist only for test builds (a dev-dependency of the crate on itself turns
    // features on for tests only).
    for key in ["dev-dependencies", "dev_dependencies"] {
        if let Some(v) = table.get(key) {
            parts.push((key.to_string(), canonical(v)));
        }
        if let Some(targets) = table.get("target").and_then(|t| t.as_table()) {
            for (cfg, target) in targets {
                if let Some(v) = target.get(key) {
                    parts.push((format!("target.{cfg}.{key}"), canonical(v)));
                }
            }
        }
    }
    for key in ["members", "exclude", "default-members"] {
        if let Some(v) = toml_at(&table, &["workspace", key]) {
            parts.push((format!("workspace.{key}"), canonical(v)));
        }
    }
    if let Some(v) = toml_at(&table, &["profile", "test"]) {
        parts.push(("profile.test".to_string(), canonical(v)));
    }
    for key in ["debug-assertions", "overflow-checks", "panic"] {
        if let Some(v) = toml_at(&table, &["profile", "dev", key]) {
            parts.push((format!("profile.dev.{key}"), canonical(v)));
        }
    }
    Ok(parts)
}

/// pyproject.toml: `[tool.pytest]` (with `ini_options`), pytest plugin entry points
/// (`project.entry-points.pytest11`, `tool.poetry.plugins.pytest11`), the dev-dependencies, and
/// the mutator's and coverage tool's settings (`[tool.mutmut]`, `[tool.coverage]`, `[tool.cosmic-ray]`).
fn pyproject_parts(text: &str) -> Result<Parts, ()> {
    let table: toml::Table = toml::from_str(text).map_err(|_| ())?;
    let mut parts = Vec::new();
    let dev_dependencies: [&[&str]; 9] = [
        &["dependency-groups"],
        &["tool", "poetry", "dev-dependencies"],
        &["tool", "poetry", "group"],
        &["tool", "pdm", "dev-dependencies"],
        &["tool", "uv", "dev-dependencies"],
        &["project", "optional-dependencies", "test"],
        &["project", "optional-dependencies", "tests"],
        &["project", "optional-dependencies", "testing"],
        &["project", "optional-dependencies", "dev"],
    ];
    // The mutator's and the coverage tool's settings: an exclusion there steers the canary.
    let test_tools: [&[&str]; 3] = [
        &["tool", "mutmut"],
        &["tool", "coverage"],
        &["tool", "cosmic-ray"],
    ];
    for path in [
        &["tool", "pytest"][..],
        &["project", "entry-points", "pytest11"],
        &["tool", "poetry", "plugins", "pytest11"],
    ]
    .into_iter()
    .chain(dev_dependencies)
    .chain(test_tools)
    {
        if let Some(v) = toml_at(&table, path) {
            parts.push((path.join("."), canonical(v)));
        }
    }
    Ok(parts)
}

/// package.json: `scripts.test` with its `pretest`/`posttest` hooks, the `jest`, `mocha` and
/// `ava` keys, and the coverage tools' and Stryker's `nyc`, `c8` and `stryker` keys.
fn package_json_parts(text: &str) -> Result<Parts, ()> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|_| ())?;
    let object = value.as_object().ok_or(())?;
    let mut parts = Vec::new();
    if let Some(scripts) = object.get("scripts").and_then(|s| s.as_object()) {
        for key in ["pretest", "test", "posttest"] {
            if let Some(v) = scripts.get(key) {
                parts.push((format!("scripts.{key}"), canonical(v)));
            }
        }
    }
    for key in [
        "jest",
        "mocha",
        "ava",
        "devDependencies",
        "nyc",
        "c8",
        "stryker",
    ] {
        if let Some(v) = object.get(key) {
            parts.push((key.to_string(), canonical(v)));
        }
    }
    Ok(parts)
}

/// INI sections (whole, or one key of them): tox.ini `[pytest]`; setup.cfg `[tool:pytest]` and
/// `[options.entry_points]`'s `pytest11`.
fn ini_parts(text: &str, wanted: &[(&str, Option<&str>)]) -> Result<Parts, ()> {
    let options = ini::ParseOption {
        enabled_quote: false,
        enabled_escape: false,
        enabled_indented_mutiline_value: true,
        enabled_preserve_key_leading_whitespace: false,
    };
    let parsed = ini::Ini::load_from_str_opt(text, options).map_err(|_| ())?;
    let mut parts = Vec::new();
    for (section, key) in wanted {
        let mut values: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        let mut present = false;
        for properties in parsed.section_all(Some(*section)) {
            present = true;
            for (k, v) in properties.iter() {
                if key.is_none_or(|wanted| wanted == k) {
                    values.entry(k).or_default().push(v);
                }
            }
        }
        if present && (key.is_none() || !values.is_empty()) {
            let part = match key {
                Some(k) => format!("[{section}].{k}"),
                None => format!("[{section}]"),
            };
            parts.push((part, canonical(&values)));
        }
    }
    Ok(parts)
}

/// go.mod: the `go` and `toolchain` directives.
fn go_mod_parts(text: &str) -> Parts {
    text.lines()
        .filter_map(|line| {
            let line = line.split("//").next().unwrap_or_default().trim();
            let (directive, value) = line.split_once(char::is_whitespace)?;
            matches!(directive, "go" | "toolchain")
                .then(|| (directive.to_string(), value.trim().as_bytes().to_vec()))
        })
        .collect()
}
