//! The sentinel guard (issue 18 item 2; docs/guards.md, "The sentinel run"): the check must be
//! able to fail, and must run what it reports. Before a green counts, the check runs once more on
//! the green tree with loopexec-written sentinel tests added to each test surface its runner
//! discovers (a pytest module beside a module the green check collected; an integration test in
//! `tests/` of each Rust crate it tested; a `_test.go` in each Go package it tested; a node:test
//! file where node --test's discovery takes it, when the check's TAP was read): per surface
//! one test that must fail with a fresh nonce in its failure message and one that must pass and
//! write a fresh nonce to a proof file at the workspace root, which the supervisor reads back from
//! the run's scratch layer. The green stands only if that run is red with exactly the failing
//! sentinels failing, every test of the green check still passing, and both nonces where they
//! must be; otherwise the run halts `reward_hacking_detected`, the detail naming the expectation
//! that broke.
//!
//! This module owns the plan (which surfaces, which files, which ids), the judgement of the run
//! (pure functions over what it observed) and the stage itself ([`ActiveRun::sentinel_run`]).
//! The sentinels live only in one more top layer of that one check's overlay
//! (`RunWorkspace::sentinel_overlay`): never in the agent's tree, its feedback, the progress
//! stage, the set guards' sets or the delivery.

use super::check::TestSets;
use super::lifecycle::ActiveRun;
use crate::ending::Ending;
use crate::error::{CmdResult, Failure};
use crate::halt::HaltReason;
use crate::receipt::events::{
    Event, FindingRecord, GuardRecord, SentinelCheck, SentinelRecord, SentinelSurfaceRecord,
    UnrecognisedSurface,
};
use crate::rules::decide::Step;
use crate::testreport::shown;
use crate::workspace::manifest::{EntryKind, Manifest};
use crate::zones::Zone;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Whether the loop runs the sentinel (`[sentinel]` in loop.toml). Receipts pinned before it
/// existed read as off.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentinelPins {
    pub enabled: bool,
    /// Why it is off (the operator's reason, or why the run cannot have one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `[sentinel]` of loop.toml, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SentinelInput {
    pub enabled: Option<bool>,
    pub reason: Option<String>,
}

impl SentinelPins {
    /// The pins of a run: on by default with a detached workspace; off needs a reason.
    pub fn resolve(input: SentinelInput, detached: bool) -> Result<SentinelPins, Failure> {
        let reason = input.reason.map(|r| r.trim().to_string());
        match (input.enabled, reason) {
            (Some(false), Some(r)) if !r.is_empty() => Ok(SentinelPins { enabled: false, reason: Some(r) }),
            (Some(false), _) => Err(Failure::usage("[sentinel] enabled = false needs a non-empty reason (the receipt records it)")),
            (_, Some(_)) => Err(Failure::usage("[sentinel] reason applies only with enabled = false")),
            (_, None) if !detached => Ok(SentinelPins {
                enabled: false,
                reason: Some("no detached workspace: the sentinels need the check's own overlay (a green in place is human_required)".into()),
            }),
            (_, None) => Ok(SentinelPins { enabled: true, reason: None }),
        }
    }
}

/// The runner whose discovery a sentinel is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    Pytest,
    Cargo,
    Go,
    Node,
}

impl Runner {
    pub fn as_str(self) -> &'static str {
        match self {
            Runner::Pytest => "pytest",
            Runner::Cargo => "cargo",
            Runner::Go => "go",
            Runner::Node => "node",
        }
    }
}

/// One surface's pair of sentinels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Surface {
    pub runner: Runner,
    /// The tree path the surface was found at (the module, the crate's `Cargo.toml`, the package).
    pub found_at: String,
    /// The sentinel file's tree path (in the sentinel layer only).
    pub file: String,
    /// The random token in every name of this surface (file, ids, proof file).
    pub token: String,
    pub fail_nonce: String,
    pub pass_nonce: String,
    /// The proof file's name at the workspace root (written by the passing sentinel).
    pub proof: String,
    /// The sentinel file's bytes.
    pub content: Vec<u8>,
    /// cargo: the libtest labels of the sentinel's crate, its own binary's included (cargo may
    /// stop before it starts any of them; empty for the other runners).
    pub crate_labels: BTreeSet<String>,
}

impl Surface {
    /// Whether `id` is one of this surface's sentinel tests.
    pub fn owns(&self, id: &str) -> bool {
        id.contains(&self.token)
    }

    fn is_failing_sentinel(&self, id: &str) -> bool {
        self.owns(id) && id.ends_with("must_fail")
    }

    fn is_passing_sentinel(&self, id: &str) -> bool {
        self.owns(id) && id.ends_with("must_pass")
    }
}

/// Which surfaces the sentinels go to, and what was not recognised (with why).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub surfaces: Vec<Surface>,
    pub unrecognised: Vec<(String, String)>,
    /// The libtest binary labels of the crates that got a sentinel (`LIB`, `doc/LIB`,
    /// `bin/NAME`, `test/NAME`): the only tests the sentinel run may leave unstarted.
    pub libtest_labels: BTreeSet<String>,
}

/// Where the check's overlay is mounted: the passing sentinels write their proof beneath it.
const ROOT: &str = super::detached::WORKSPACE_TARGET;
/// Largest manifest file (`Cargo.toml`, `go.mod`, a `_test.go` header) read to plan.
const MAX_PLAN_READ: usize = 1024 * 1024;
/// Most bytes of a proof file read back.
pub const MAX_PROOF_BYTES: u64 = 4096;
/// Said when the sentinels left no trace: how an operator whose check is narrow on purpose goes on.
const UNDISCOVERED_HINT: &str = "no sentinel was run or reported: a check that names its test files or filters tests does not discover new ones; if it is narrow on purpose, turn the sentinel off with a reason: [sentinel] enabled = false in loop.toml";
/// Most broken expectations named in the record and the guard's findings.
const MAX_BROKEN: usize = 20;

/// Fresh random hex (16 bytes) from the operating system.
pub fn fresh_hex() -> String {
    use rand_core::RngCore;
    let mut bytes = [0u8; 16];
    rand_core::OsRng.fill_bytes(&mut bytes);
    hex::encode(bytes)
}

fn is_file(manifest: &Manifest, path: &str) -> bool {
    manifest
        .get(path.as_bytes())
        .is_some_and(|e| matches!(e.kind, EntryKind::File | EntryKind::Executable))
}

fn parent(path: &str) -> &str {
    path.rfind('/').map_or("", |i| &path[..i])
}

fn joined(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// The sentinels of a green tree: `manifest` is the tree the check ran on, `read` reads one of its
/// files (bounded, no link followed), `collected` the ids the green check collected, `fresh` a
/// source of fresh random hex (one call per token and nonce).
/// `formats`: the formats of the green check's reports as read (`tap` from node --test).
pub fn plan(
    manifest: &Manifest,
    read: &dyn Fn(&str) -> Option<Vec<u8>>,
    collected: &[String],
    formats: &[String],
    fresh: &mut dyn FnMut() -> String,
) -> Plan {
    let mut plan = Plan::default();
    pytest_surface(manifest, collected, fresh, &mut plan);
    if formats.iter().any(|f| f == "tap") {
        node_surface(manifest, fresh, &mut plan);
    }
    cargo_surfaces(manifest, read, collected, fresh, &mut plan);
    go_surfaces(manifest, read, collected, fresh, &mut plan);
    // Every name is new to the tree (the tokens are random; a collision is not recognised).
    let (ok, clash): (Vec<Surface>, Vec<Surface>) = plan.surfaces.into_iter().partition(|s| {
        manifest.get(s.file.as_bytes()).is_none() && manifest.get(s.proof.as_bytes()).is_none()
    });
    plan.surfaces = ok;
    plan.unrecognised.extend(clash.into_iter().map(|s| {
        (
            s.found_at,
            "the sentinel's name is taken in the tree".into(),
        )
    }));
    plan
}

// ---- pytest ----

/// pytest's JUnit classname (`tests.test_calc` or `tests.test_calc.TestCalc`) as a module file of
/// the tree: (its directory, its stem).
fn pytest_module(manifest: &Manifest, id: &str) -> Option<(String, String)> {
    let (class, name) = id.split_once("::")?;
    if class.contains('/') || class.is_empty() || !name.starts_with("test") {
        return None;
    }
    let parts: Vec<&str> = class.split('.').collect();
    (1..=parts.len()).rev().find_map(|k| {
        let path = format!("{}.py", parts[..k].join("/"));
        is_file(manifest, &path).then(|| (parts[..k - 1].join("/"), parts[k - 1].to_string()))
    })
}

/// One pytest module beside the last module (in path order) the green check collected, named
/// the way that module is (`test_*.py` or `*_test.py`).
fn pytest_surface(
    manifest: &Manifest,
    collected: &[String],
    fresh: &mut dyn FnMut() -> String,
    plan: &mut Plan,
) {
    let modules: BTreeSet<(String, String)> = collected
        .iter()
        .filter_map(|id| pytest_module(manifest, id))
        .collect();
    let Some((dir, stem)) = modules.iter().next_back().cloned() else {
        return;
    };
    let token = format!("loopexec_sentinel_{}", &fresh()[..16]);
    let module = if stem.starts_with("test") {
        format!("test_zz_{token}")
    } else if stem.ends_with("_test") {
        format!("zz_{token}_test")
    } else {
        plan.unrecognised.push((
            joined(&dir, &format!("{stem}.py")),
            "pytest collected a module named neither test_*.py nor *_test.py".into(),
        ));
        return;
    };
    let (fail_nonce, pass_nonce) = (fresh(), fresh());
    let proof = format!(".{token}.proof");
    let content = format!(
        "# Written by loopexec's sentinel guard for one check run (docs/guards.md); never part of the tree.\n\
         def test_must_fail():\n    raise AssertionError(\"loopexec-sentinel-fail-{fail_nonce}\")\n\n\n\
         def test_must_pass():\n    with open(\"{ROOT}/{proof}\", \"w\") as proof:\n        proof.write(\"{pass_nonce}\")\n"
    );
    plan.surfaces.push(Surface {
        runner: Runner::Pytest,
        found_at: joined(&dir, &format!("{stem}.py")),
        file: joined(&dir, &format!("{module}.py")),
        token,
        fail_nonce,
        pass_nonce,
        proof,
        content: content.into_bytes(),
        crate_labels: BTreeSet::new(),
    });
}

// ---- cargo ----

/// What a crate's `Cargo.toml` says of its test targets.
struct Crate {
    dir: String,
    manifest_path: String,
    /// The libtest labels of its targets: `lib`, `doc/lib`, `bin/NAME`, `test/NAME`.
    labels: BTreeSet<String>,
    /// Why cargo would not discover a new `tests/*.rs` (autotests off).
    autotests_off: Option<String>,
    /// The library's crate name, when the crate has one: the sentinel links it (`extern crate`),
    /// so whatever the library brings into a test binary at load time is in the sentinel's too.
    lib: Option<String>,
}

fn read_crate(manifest: &Manifest, path: &str, bytes: &[u8]) -> Option<Crate> {
    let doc: toml::Table = std::str::from_utf8(bytes).ok()?.parse().ok()?;
    let package = doc.get("package")?.as_table()?;
    let name = package.get("name")?.as_str()?;
    let dir = parent(path).to_string();
    let lib = doc
        .get("lib")
        .and_then(|l| l.get("name"))
        .and_then(|n| n.as_str())
        .map_or_else(|| name.replace('-', "_"), str::to_string);
    let mut labels: BTreeSet<String> = [lib.clone(), format!("doc/{lib}"), format!("bin/{name}")]
        .into_iter()
        .collect();
    for kind in ["bin", "test"] {
        for target in doc
            .get(kind)
            .and_then(|t| t.as_array())
            .into_iter()
            .flatten()
        {
            if let Some(n) = target.get("name").and_then(|n| n.as_str()) {
                labels.insert(format!("{kind}/{n}"));
            }
        }
    }
    let tests_dir = joined(&dir, "tests/");
    for (p, _) in manifest.iter() {
        let Ok(p) = std::str::from_utf8(p) else {
            continue;
        };
        if let Some(rest) = p.strip_prefix(tests_dir.as_str()) {
            if let Some(stem) = rest.strip_suffix(".rs").filter(|s| !s.contains('/')) {
                labels.insert(format!("test/{stem}"));
            } else if let Some(stem) = rest.strip_suffix("/main.rs").filter(|s| !s.contains('/')) {
                labels.insert(format!("test/{stem}"));
            }
        }
    }
    let autotests = package.get("autotests").and_then(|v| v.as_bool());
    let edition = package
        .get("edition")
        .and_then(|v| v.as_str())
        .unwrap_or("2015");
    let declares_tests = doc
        .get("test")
        .and_then(|t| t.as_array())
        .is_some_and(|a| !a.is_empty());
    let autotests_off = match autotests {
        Some(false) => Some(format!(
            "{path} turns autotests off: cargo discovers no new tests/*.rs"
        )),
        None if edition == "2015" && declares_tests => Some(format!(
            "{path}: edition 2015 with [[test]] targets turns test discovery off"
        )),
        _ => None,
    };
    let has_lib = (doc.get("lib").is_some() || is_file(manifest, &joined(&dir, "src/lib.rs")))
        && is_identifier(&lib);
    Some(Crate {
        dir,
        manifest_path: path.to_string(),
        labels,
        autotests_off,
        lib: has_lib.then_some(lib),
    })
}

/// A Rust identifier (what `extern crate` may name): the only text of the agent's tree that
/// reaches a sentinel's source.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// An integration test in `tests/` of each crate whose targets the green check ran.
fn cargo_surfaces(
    manifest: &Manifest,
    read: &dyn Fn(&str) -> Option<Vec<u8>>,
    collected: &[String],
    fresh: &mut dyn FnMut() -> String,
    plan: &mut Plan,
) {
    let ran: BTreeSet<&str> = collected
        .iter()
        .filter_map(|id| id.split_once("::").map(|(label, _)| label))
        .collect();
    if ran.is_empty() {
        return;
    }
    for (path, _) in manifest.iter() {
        let Ok(path) = std::str::from_utf8(path) else {
            continue;
        };
        if !(path == "Cargo.toml" || path.ends_with("/Cargo.toml"))
            || path.split('/').any(|c| c == "target")
        {
            continue;
        }
        let Some(krate) = read(path).and_then(|bytes| read_crate(manifest, path, &bytes)) else {
            continue;
        };
        if !krate.labels.iter().any(|l| ran.contains(l.as_str())) {
            continue;
        }
        if let Some(why) = krate.autotests_off {
            plan.unrecognised.push((krate.manifest_path, why));
            continue;
        }
        plan.libtest_labels.extend(krate.labels.iter().cloned());
        let token = format!("loopexec_sentinel_{}", &fresh()[..16]);
        let mut crate_labels = krate.labels.clone();
        crate_labels.insert(format!("test/zz_{token}"));
        let (fail_nonce, pass_nonce) = (fresh(), fresh());
        let proof = format!(".{token}.proof");
        // Linked like the crate's own integration tests link it: a library that acts at load time
        // (a static initializer) acts in the sentinel's binary too.
        let link = krate
            .lib
            .as_ref()
            .map(|lib| format!("extern crate {lib};\n\n"))
            .unwrap_or_default();
        let content = format!(
            "//! Written by loopexec's sentinel guard for one check run (docs/guards.md); never part of the tree.\n\n{link}\
             #[test]\nfn must_fail() {{\n    panic!(\"loopexec-sentinel-fail-{fail_nonce}\");\n}}\n\n\
             #[test]\nfn must_pass() {{\n    std::fs::write(\"{ROOT}/{proof}\", \"{pass_nonce}\").expect(\"the sentinel's proof file\");\n}}\n"
        );
        plan.surfaces.push(Surface {
            runner: Runner::Cargo,
            found_at: krate.manifest_path,
            file: joined(&krate.dir, &format!("tests/zz_{token}.rs")),
            token,
            fail_nonce,
            pass_nonce,
            proof,
            content: content.into_bytes(),
            crate_labels,
        });
    }
}

// ---- go ----

/// `module PATH` of a go.mod.
fn go_module(bytes: &[u8]) -> Option<String> {
    std::str::from_utf8(bytes).ok()?.lines().find_map(|l| {
        l.trim()
            .strip_prefix("module ")
            .map(|m| m.trim().trim_matches('"').to_string())
    })
}

/// The `package NAME` clause of a Go file (its first non-comment line starting with `package`).
fn go_package_clause(bytes: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?;
    let name = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("package "))?
        .trim();
    let name = name.split("//").next()?.trim();
    (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then(|| name.to_string())
}

/// A `_test.go` in each Go package the green check ran (`go test -json` ids `pkg/TestName`), in
/// the package of one of its existing test files.
fn go_surfaces(
    manifest: &Manifest,
    read: &dyn Fn(&str) -> Option<Vec<u8>>,
    collected: &[String],
    fresh: &mut dyn FnMut() -> String,
    plan: &mut Plan,
) {
    let mods: Vec<(String, String)> = manifest
        .iter()
        .filter_map(|(p, _)| std::str::from_utf8(p).ok())
        .filter(|p| *p == "go.mod" || p.ends_with("/go.mod"))
        .filter_map(|p| {
            read(p)
                .and_then(|b| go_module(&b))
                .map(|m| (parent(p).to_string(), m))
        })
        .collect();
    if mods.is_empty() {
        return;
    }
    // Each package is the longest collected id prefix before `/Test`.
    let packages: BTreeSet<&str> = collected
        .iter()
        .filter_map(|id| id.find("/Test").map(|i| &id[..i]))
        .collect();
    for pkg in packages {
        let Some((dir, module)) = mods
            .iter()
            .filter(|(_, m)| pkg == m || pkg.starts_with(&format!("{m}/")))
            .max_by_key(|(_, m)| m.len())
        else {
            continue;
        };
        let dir = joined(dir, pkg[module.len()..].trim_start_matches('/'));
        let prefix = joined(&dir, "");
        let test_file = manifest
            .iter()
            .filter_map(|(p, _)| std::str::from_utf8(p).ok())
            .find(|p| {
                p.strip_prefix(prefix.as_str())
                    .is_some_and(|rest| !rest.contains('/') && rest.ends_with("_test.go"))
            });
        let Some(name) = test_file
            .and_then(|f| read(f))
            .and_then(|b| go_package_clause(&b))
        else {
            plan.unrecognised.push((
                pkg.to_string(),
                "no _test.go of the package names its package".into(),
            ));
            continue;
        };
        let token = format!("loopexec_sentinel_{}", &fresh()[..16]);
        let camel = format!("Loopexec{}", &token["loopexec_sentinel_".len()..]);
        let (fail_nonce, pass_nonce) = (fresh(), fresh());
        let proof = format!(".{token}.proof");
        let content = format!(
            "// Written by loopexec's sentinel guard for one check run (docs/guards.md); never part of the tree.\n\n\
             package {name}\n\nimport (\n\t\"os\"\n\t\"testing\"\n)\n\n\
             func Test{camel}_must_fail(t *testing.T) {{\n\tt.Fatal(\"loopexec-sentinel-fail-{fail_nonce}\")\n}}\n\n\
             func Test{camel}_must_pass(t *testing.T) {{\n\tif err := os.WriteFile(\"{ROOT}/{proof}\", []byte(\"{pass_nonce}\"), 0o644); err != nil {{\n\t\tt.Fatal(err)\n\t}}\n}}\n"
        );
        plan.surfaces.push(Surface {
            runner: Runner::Go,
            found_at: pkg.to_string(),
            file: joined(&dir, &format!("zz_{token}_test.go")),
            token: camel,
            fail_nonce,
            pass_nonce,
            proof,
            content: content.into_bytes(),
            crate_labels: BTreeSet::new(),
        });
    }
}

// ---- node --test ----

/// Whether node 20's `--test` discovery takes `path` (its default patterns: `*.test.*`,
/// `*-test.*`, `*_test.*`, `test-*.*`, `test.*` with a `js`, `cjs` or `mjs` extension, and any
/// such file under a `test/` directory; never under `node_modules/`).
fn node_discovers(path: &str) -> bool {
    if path.split('/').any(|c| c == "node_modules") {
        return false;
    }
    let name = path.rsplit('/').next().unwrap_or(path);
    let Some(stem) = [".js", ".cjs", ".mjs"]
        .iter()
        .find_map(|ext| name.strip_suffix(ext))
    else {
        return false;
    };
    stem.ends_with(".test")
        || stem.ends_with("-test")
        || stem.ends_with("_test")
        || stem.starts_with("test-")
        || stem == "test"
        || path.split('/').rev().skip(1).any(|c| c == "test")
}

/// A node:test module beside the last test file (in path order) node's discovery takes, named
/// so that every pattern takes it (`*.test.mjs`): the green check read node's TAP.
fn node_surface(manifest: &Manifest, fresh: &mut dyn FnMut() -> String, plan: &mut Plan) {
    let found = manifest
        .iter()
        .filter_map(|(p, e)| {
            std::str::from_utf8(p)
                .ok()
                .filter(|_| matches!(e.kind, EntryKind::File | EntryKind::Executable))
        })
        .filter(|p| node_discovers(p))
        .last();
    let Some(found) = found else { return };
    let token = format!("loopexec_sentinel_{}", &fresh()[..16]);
    let (fail_nonce, pass_nonce) = (fresh(), fresh());
    let proof = format!(".{token}.proof");
    let content = format!(
        "// Written by loopexec's sentinel guard for one check run (docs/guards.md); never part of the tree.\n\
         import test from \"node:test\";\nimport {{ writeFileSync }} from \"node:fs\";\n\n\
         test(\"{token} must_fail\", () => {{\n  throw new Error(\"loopexec-sentinel-fail-{fail_nonce}\");\n}});\n\n\
         test(\"{token} must_pass\", () => {{\n  writeFileSync(\"{ROOT}/{proof}\", \"{pass_nonce}\");\n}});\n"
    );
    plan.surfaces.push(Surface {
        runner: Runner::Node,
        found_at: found.to_string(),
        file: joined(parent(found), &format!("zz_{token}.test.mjs")),
        token,
        fail_nonce,
        pass_nonce,
        proof,
        content: content.into_bytes(),
        crate_labels: BTreeSet::new(),
    });
}

// ---- the judgement ----

/// What the green check showed (the expectations are relative to it).
pub struct Green<'a> {
    pub collected: &'a [String],
    pub failing: &'a [String],
    pub skipped: &'a [String],
}

/// What the sentinel run showed.
pub struct Observed<'a> {
    /// Its exit code (none: it did not exit).
    pub exit: Option<i32>,
    /// How it ended, said when it did not exit.
    pub ending: String,
    pub sets: Option<&'a TestSets>,
    /// The proof file of each surface as read back (in the plan's order).
    pub proofs: &'a [Option<Vec<u8>>],
}

/// Which expectation broke, and its class: the check cannot fail, or reports what it did not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Broken {
    CannotFail(String),
    DidNotRun(String),
}

impl Broken {
    pub fn text(&self) -> String {
        match self {
            Broken::CannotFail(s) => format!("the check cannot fail: {s}"),
            Broken::DidNotRun(s) => format!("the check reports what it did not run: {s}"),
        }
    }
}

/// Whether some surface's sentinels left no trace at all: neither reported nor run (no proof).
/// A check that names its test files or filters tests by name does not discover them; so does a
/// check that reports a run it did not make. The halt's detail then says how to turn it off.
pub fn undiscovered(plan: &Plan, seen: &Observed<'_>) -> bool {
    let reported = |s: &Surface| {
        seen.sets
            .is_some_and(|sets| sets.collected.iter().any(|id| s.owns(id)))
    };
    plan.surfaces
        .iter()
        .zip(seen.proofs)
        .any(|(s, proof)| proof.is_none() && !reported(s))
}

/// A sentinel run that gave no verdict on the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unfinished {
    /// The operator stopped it (SIGINT/SIGTERM): nothing is recorded; the resumed run runs it again.
    Interrupted(i32),
    /// It could not start, or did not finish within `--check-timeout`: the machinery's failure
    /// (`execution_failure`), never "cannot fail". A slow suite with three extra test files is
    /// not a forged green; the detail names the limit to raise.
    NotRun(String),
}

/// Whether the sentinel run's ending leaves it unjudged: only an exit or a kill by a signal of
/// its own is judged ([`judge`]).
pub fn unfinished(ending: &Ending) -> Option<Unfinished> {
    match ending {
        Ending::Exited { .. } | Ending::Signaled { .. } => None,
        Ending::Interrupted { signal } => Some(Unfinished::Interrupted(*signal)),
        Ending::FailedToStart { reason } => Some(Unfinished::NotRun(format!("could not start: {}", crate::inert::inert(reason)))),
        Ending::TimedOut { after_ms } => Some(Unfinished::NotRun(format!(
            "timed out after {after_ms} ms: no verdict on the check; if the suite is this slow, raise --check-timeout"
        ))),
        stalled @ Ending::Stalled { .. } => Some(Unfinished::NotRun(format!("stalled ({}): no verdict on the check", stalled.stall_words().unwrap_or_default()))),
    }
}

/// Every expectation the sentinel run broke (empty: the green stands), and how many tests of
/// the green check it did not run because cargo stopped after the failing sentinel's binary.
pub fn judge(plan: &Plan, green: &Green<'_>, seen: &Observed<'_>) -> (Vec<Broken>, u64) {
    let mut broken = Vec::new();
    let n = plan.surfaces.len();
    match seen.exit {
        None => broken.push(Broken::CannotFail(format!(
            "the sentinel run did not exit ({})",
            seen.ending
        ))),
        Some(0) => broken.push(Broken::CannotFail(format!(
            "the sentinel run exited 0 although {n} sentinel test(s) must fail"
        ))),
        Some(_) => {}
    }
    let empty = TestSets::default();
    let sets = seen.sets.unwrap_or(&empty);
    if seen.exit.is_some() && seen.sets.is_none() {
        broken.push(Broken::DidNotRun("the sentinel run named no test".into()));
    }
    // cargo stops after the first failing test binary (without `--no-fail-fast`): in a workspace
    // the crates after the first sentinel's never start. A cargo sentinel none of whose crate's
    // binaries started (and that left no proof) is not judged, as long as another one was.
    let ran_labels: BTreeSet<&str> = sets
        .collected
        .iter()
        .filter_map(|id| id.split_once("::").map(|(l, _)| l))
        .collect();
    let unstarted_crate = |s: &Surface, proof: &Option<Vec<u8>>| {
        s.runner == Runner::Cargo
            && proof.is_none()
            && !s
                .crate_labels
                .iter()
                .any(|l| ran_labels.contains(l.as_str()))
    };
    let cargo_started = plan
        .surfaces
        .iter()
        .zip(seen.proofs)
        .any(|(s, p)| s.runner == Runner::Cargo && !unstarted_crate(s, p));
    for (surface, proof) in plan.surfaces.iter().zip(seen.proofs) {
        if cargo_started && unstarted_crate(surface, proof) {
            continue;
        }
        let failing = sets
            .failing
            .iter()
            .find(|id| surface.is_failing_sentinel(id));
        match failing {
            None if sets
                .collected
                .iter()
                .any(|id| surface.is_failing_sentinel(id)) =>
            {
                broken.push(Broken::CannotFail(format!(
                    "the failing sentinel {} is reported as not failing",
                    shown(&surface.file)
                )))
            }
            None => broken.push(Broken::CannotFail(format!(
                "the failing sentinel {} is not reported failing (not collected)",
                shown(&surface.file)
            ))),
            Some(id) => {
                let message = sets.excerpts.get(id).map(|e| e.text.as_str()).unwrap_or("");
                if !message.contains(&format!("loopexec-sentinel-fail-{}", surface.fail_nonce)) {
                    broken.push(Broken::DidNotRun(format!(
                        "the failure of {} does not carry its nonce",
                        shown(&surface.file)
                    )));
                }
            }
        }
        let passing = sets
            .collected
            .iter()
            .find(|id| surface.is_passing_sentinel(id));
        match passing {
            None => broken.push(Broken::DidNotRun(format!(
                "the passing sentinel of {} is not reported",
                shown(&surface.file)
            ))),
            Some(id) if sets.failing.contains(id) || sets.skipped.contains(id) => {
                broken.push(Broken::DidNotRun(format!(
                    "the passing sentinel of {} is reported failing or skipped",
                    shown(&surface.file)
                )))
            }
            Some(_) => {}
        }
        match proof {
            Some(bytes) if bytes == surface.pass_nonce.as_bytes() => {}
            Some(_) => broken.push(Broken::DidNotRun(format!(
                "the passing sentinel's proof {} holds another value",
                surface.proof
            ))),
            None => broken.push(Broken::DidNotRun(format!(
                "the passing sentinel of {} left no proof it ran ({})",
                shown(&surface.file),
                surface.proof
            ))),
        }
    }
    let sentinel = |id: &str| plan.surfaces.iter().any(|s| s.owns(id));
    let green_failing: BTreeSet<&str> = green.failing.iter().map(String::as_str).collect();
    let other_failures: Vec<&String> = sets
        .failing
        .iter()
        .filter(|id| !sentinel(id) && !green_failing.contains(id.as_str()))
        .collect();
    if !other_failures.is_empty() {
        broken.push(Broken::DidNotRun(format!(
            "{} test(s) fail in the sentinel run that passed in the green check: {}",
            other_failures.len(),
            shown(
                &other_failures
                    .iter()
                    .take(5)
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        )));
    }
    let newly_skipped = sets
        .skipped
        .iter()
        .filter(|id| !sentinel(id) && !green.skipped.contains(id))
        .count();
    if newly_skipped > 0 {
        broken.push(Broken::DidNotRun(format!(
            "{newly_skipped} test(s) skipped in the sentinel run that the green check did not skip"
        )));
    }
    // Tests of the green check the sentinel run did not collect: tolerated only as whole libtest
    // binaries of a tested crate that cargo never started (it stops after the first failing one).
    let (mut unstarted, mut missing) = (0u64, Vec::new());
    for id in green
        .collected
        .iter()
        .filter(|id| !sets.collected.contains(*id))
    {
        let label = id.split_once("::").map(|(l, _)| l);
        let whole_binary_unstarted =
            label.is_some_and(|l| plan.libtest_labels.contains(l) && !ran_labels.contains(l));
        if whole_binary_unstarted {
            unstarted += 1;
        } else {
            missing.push(id.as_str());
        }
    }
    if !missing.is_empty() {
        broken.push(Broken::DidNotRun(format!(
            "{} test(s) of the green check are missing from the sentinel run: {}",
            missing.len(),
            shown(
                &missing
                    .iter()
                    .take(5)
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        )));
    }
    broken.truncate(MAX_BROKEN);
    (broken, unstarted)
}

impl Plan {
    fn surface_records(&self) -> Vec<SentinelSurfaceRecord> {
        self.surfaces
            .iter()
            .map(|s| SentinelSurfaceRecord {
                runner: s.runner.as_str().into(),
                found_at: shown(&s.found_at),
                file: shown(&s.file),
                fail_nonce: s.fail_nonce.clone(),
                pass_nonce: s.pass_nonce.clone(),
                proof: s.proof.clone(),
            })
            .collect()
    }

    fn unrecognised_records(&self) -> Vec<UnrecognisedSurface> {
        self.unrecognised
            .iter()
            .map(|(at, why)| UnrecognisedSurface {
                surface: shown(at),
                reason: shown(why),
            })
            .collect()
    }
}

impl ActiveRun<'_> {
    /// The sentinel run on iteration `n`'s green (the accepted tree), recorded as a
    /// `guard_sentinel` event; a broken expectation is also a `guard` event halting
    /// `reward_hacking_detected`, appended first so the receipt decides the halt by itself even if
    /// the supervisor dies between the two. `green`: the iteration's check. A run with the
    /// sentinel off, no detached workspace, or no recognised surface records why it was inactive
    /// and goes on. `Some(Step::Interrupted)`: the operator stopped it; nothing is recorded, so the
    /// resumed run makes the sentinel run again. A run that could not start or did not finish in
    /// time is recorded as not run with a `guard` halting `execution_failure` ([`unfinished`]).
    pub(super) fn sentinel_run(
        &mut self,
        zone: &mut dyn Zone,
        n: u64,
        green: &crate::receipt::events::CheckResult,
    ) -> CmdResult<Option<Step>> {
        let started = std::time::Instant::now();
        let inactive = |this: &mut Self, reason: String, plan: &Plan| {
            this.append(Event::GuardSentinel(SentinelRecord {
                iteration: n,
                active: false,
                inactive_reason: Some(reason),
                surfaces: plan.surface_records(),
                unrecognised: plan.unrecognised_records(),
                check: None,
                holds: None,
                broken: Vec::new(),
                not_started: 0,
                duration_ms: started.elapsed().as_millis() as u64,
            }))
        };
        if !self.cfg.sentinel.enabled {
            let why = self
                .cfg
                .sentinel
                .reason
                .clone()
                .unwrap_or_else(|| "off".into());
            return inactive(self, format!("turned off: {why}"), &Plan::default()).map(|()| None);
        }
        let (Some(ws), Some(collected)) = (self.workspace.as_ref(), green.collected_set.as_ref())
        else {
            let why = if self.workspace.is_none() {
                "no detached workspace"
            } else {
                "the green check named no test (declare its report: --report), so no runner's discovery is known"
            };
            return inactive(self, why.into(), &Plan::default()).map(|()| None);
        };
        let Some(snapshot) = ws.last_accepted().cloned() else {
            return inactive(self, "no accepted tree".into(), &Plan::default()).map(|()| None);
        };
        let files = ws.tree_files();
        let read = |path: &str| {
            let root = if snapshot.from_upper.contains(path.as_bytes()) {
                &files.upper
            } else {
                &files.t0_dir
            };
            super::analysis_guards::read_bounded(root, path.as_bytes(), MAX_PLAN_READ)
                .filter(|b| b.len() <= MAX_PLAN_READ)
        };
        let formats: Vec<String> = green
            .evidence
            .iter()
            .flat_map(|e| e.reports.iter().filter_map(|r| r.format.clone()))
            .collect();
        let plan = plan(
            &snapshot.manifest,
            &read,
            collected,
            &formats,
            &mut fresh_hex,
        );
        if plan.surfaces.is_empty() {
            let why = "no recognised test surface: no test the green check ran is in a pytest module, a Rust crate or a Go package of the tree, nor was it read from node --test's TAP".into();
            return inactive(self, why, &plan).map(|()| None);
        }
        let layer = super::iteration::SentinelLayer {
            files: plan
                .surfaces
                .iter()
                .map(|s| (s.file.clone(), s.content.clone()))
                .collect(),
            proofs: plan.surfaces.iter().map(|s| s.proof.clone()).collect(),
        };
        let outcome = match self.run_check(
            zone,
            n,
            Some(&snapshot),
            super::iteration::CheckRun::Sentinel(&layer),
        )? {
            Ok(outcome) => outcome,
            Err(Step::Interrupted(signal)) => return Ok(Some(Step::Interrupted(signal))),
            // Its layers or its zone could not be made: no success without the sentinel run, but
            // nothing is said against the check (the halt is the check runner's).
            Err(step) => {
                let (reason, detail) = match step {
                    Step::Halt(reason, detail) => (reason, detail),
                    _ => (HaltReason::ExecutionFailure, "no outcome".to_string()),
                };
                let detail = format!(
                    "the sentinel run on iteration {n}'s green tree could not run: {detail}"
                );
                self.sentinel_not_run(n, &plan, reason, detail, started)?;
                return Ok(None);
            }
        };
        match unfinished(outcome.ending()) {
            Some(Unfinished::Interrupted(signal)) => return Ok(Some(Step::Interrupted(signal))),
            Some(Unfinished::NotRun(why)) => {
                let detail = format!("the sentinel run on iteration {n}'s green tree {why}");
                self.sentinel_not_run(n, &plan, HaltReason::ExecutionFailure, detail, started)?;
                return Ok(None);
            }
            None => {}
        }
        let empty_failing = Vec::new();
        let empty_skipped = Vec::new();
        let green_sets = Green {
            collected,
            failing: green.failing_set.as_ref().unwrap_or(&empty_failing),
            skipped: green.skipped_set.as_ref().unwrap_or(&empty_skipped),
        };
        let seen = Observed {
            exit: outcome.ending().exit_code(),
            ending: format!("{:?}", outcome.ending()),
            sets: outcome.report.sets(),
            proofs: &outcome.sentinel_proofs,
        };
        let (broken, not_started) = judge(&plan, &green_sets, &seen);
        let hint = undiscovered(&plan, &seen).then_some(UNDISCOVERED_HINT);
        let sets = outcome.report.sets();
        let check = SentinelCheck {
            ending: outcome.run.ending.clone(),
            check_exit: outcome.ending().exit_code(),
            duration_ms: outcome.run.duration.as_millis() as u64,
            stdout: outcome.run.output.stdout.clone(),
            stderr: outcome.run.output.stderr.clone(),
            failing_count: sets.map(|s| s.failing.len() as u64),
            collected_count: sets.map(|s| s.collected.len() as u64),
        };
        // A sentinel run that wrote to the tree it tested halts like any check would (its guard
        // before the record, as every halt of this stage).
        if let Some(finding) = outcome.tree_writes {
            if let Some(ws) = self.workspace.as_mut() {
                ws.withdraw_acceptance();
            }
            self.append(Event::Guard(finding))?;
        }
        self.record_sentinel(n, &plan, Some(check), broken, not_started, hint, started)?;
        Ok(None)
    }

    /// A sentinel run that gave no verdict (its zone or engine failed, it timed out): its `guard`
    /// halting with `reason` (a machinery failure, never a verdict on the check), then its
    /// `guard_sentinel` record as not run.
    fn sentinel_not_run(
        &mut self,
        n: u64,
        plan: &Plan,
        reason: HaltReason,
        detail: String,
        started: std::time::Instant,
    ) -> CmdResult<()> {
        self.append(Event::Guard(GuardRecord {
            iteration: n,
            guard: "sentinel".into(),
            stage: "after_check".into(),
            halt_reason: reason,
            detail: detail.clone(),
            findings: Vec::new(),
        }))?;
        self.append(Event::GuardSentinel(SentinelRecord {
            iteration: n,
            active: true,
            inactive_reason: Some(detail),
            surfaces: plan.surface_records(),
            unrecognised: plan.unrecognised_records(),
            check: None,
            holds: None,
            broken: Vec::new(),
            not_started: 0,
            duration_ms: started.elapsed().as_millis() as u64,
        }))
    }

    #[allow(clippy::too_many_arguments)]
    fn record_sentinel(
        &mut self,
        n: u64,
        plan: &Plan,
        check: Option<SentinelCheck>,
        broken: Vec<Broken>,
        not_started: u64,
        hint: Option<&str>,
        started: std::time::Instant,
    ) -> CmdResult<()> {
        let texts: Vec<String> = broken.iter().map(Broken::text).collect();
        // A forged green is delivered as nothing at all; its halt is appended before the record
        // that implies it, so no receipt holds a refusing record without its halt.
        if let Some(first) = texts.first() {
            if let Some(ws) = self.workspace.as_mut() {
                ws.withdraw_acceptance();
            }
            self.append(Event::Guard(GuardRecord {
                iteration: n,
                guard: "sentinel".into(),
                stage: "after_check".into(),
                halt_reason: HaltReason::RewardHackingDetected,
                detail: format!(
                    "the sentinel run on iteration {n}'s green tree: {first}{}",
                    hint.map(|h| format!(" ({h})")).unwrap_or_default()
                ),
                findings: texts
                    .iter()
                    .map(|t| FindingRecord {
                        path: None,
                        what: t.clone(),
                    })
                    .collect(),
            }))?;
        }
        self.append(Event::GuardSentinel(SentinelRecord {
            iteration: n,
            active: true,
            inactive_reason: None,
            surfaces: plan.surface_records(),
            unrecognised: plan.unrecognised_records(),
            check,
            holds: Some(broken.is_empty()),
            broken: texts,
            not_started,
            duration_ms: started.elapsed().as_millis() as u64,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testreport::Excerpt;
    use crate::workspace::manifest::Entry;

    fn tree(paths: &[&str]) -> Manifest {
        let mut m = Manifest::default();
        for p in paths {
            m.insert(
                p.as_bytes().to_vec(),
                Entry {
                    kind: EntryKind::File,
                    oid: crate::workspace::ObjectId::from_hex(
                        b"0000000000000000000000000000000000000000",
                    )
                    .unwrap(),
                },
            )
            .unwrap();
        }
        m
    }

    fn counter() -> impl FnMut() -> String {
        let mut i = 0u32;
        move || {
            i += 1;
            format!("{i:016x}{i:016x}")
        }
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_operator_interrupt_of_the_sentinel_run_is_no_verdict_and_records_nothing() {
        assert_eq!(
            unfinished(&Ending::Interrupted { signal: 2 }),
            Some(Unfinished::Interrupted(2))
        );
    }

    #[test]
    fn a_sentinel_run_that_could_not_start_is_not_run_never_cannot_fail() {
        let Some(Unfinished::NotRun(why)) = unfinished(&Ending::FailedToStart {
            reason: "docker: daemon not answering\x1b[2J".into(),
        }) else {
            panic!("judged")
        };
        assert!(
            why.starts_with("could not start: docker: daemon not answering"),
            "{why}"
        );
        assert!(!why.contains('\x1b'), "escaped: {why}");
    }

    #[test]
    fn a_sentinel_run_that_timed_out_is_not_run_and_names_the_check_timeout() {
        let Some(Unfinished::NotRun(why)) = unfinished(&Ending::TimedOut { after_ms: 3000 }) else {
            panic!("judged")
        };
        assert_eq!(why, "timed out after 3000 ms: no verdict on the check; if the suite is this slow, raise --check-timeout");
    }

    #[test]
    fn a_sentinel_run_that_exited_or_was_killed_by_a_signal_is_judged() {
        assert_eq!(unfinished(&Ending::Exited { code: 0 }), None);
        assert_eq!(unfinished(&Ending::Exited { code: 1 }), None);
        assert_eq!(unfinished(&Ending::Signaled { signal: 9 }), None);
    }

    #[test]
    fn a_pytest_sentinel_goes_beside_the_last_collected_module_named_like_it() {
        let m = tree(&["tests/test_a.py", "tests/unit/test_b.py", "calc.py"]);
        let p = plan(
            &m,
            &|_| None,
            &ids(&["tests.test_a::test_x", "tests.unit.test_b.TestB::test_y"]),
            &[],
            &mut counter(),
        );
        assert_eq!(p.surfaces.len(), 1);
        let s = &p.surfaces[0];
        assert_eq!(s.runner, Runner::Pytest);
        assert_eq!(s.found_at, "tests/unit/test_b.py");
        assert_eq!(
            s.file,
            "tests/unit/test_zz_loopexec_sentinel_0000000000000001.py"
        );
        assert!(String::from_utf8_lossy(&s.content)
            .contains(&format!("loopexec-sentinel-fail-{}", s.fail_nonce)));
    }

    #[test]
    fn a_crate_that_turns_autotests_off_is_not_a_recognised_surface() {
        let m = tree(&["Cargo.toml", "src/lib.rs"]);
        let read = |p: &str| {
            (p == "Cargo.toml").then(|| {
                b"[package]\nname = \"my-crate\"\nedition = \"2021\"\nautotests = false\n".to_vec()
            })
        };
        let p = plan(
            &m,
            &read,
            &ids(&["my_crate::tests::adds"]),
            &[],
            &mut counter(),
        );
        assert!(p.surfaces.is_empty());
        assert_eq!(
            p.unrecognised,
            vec![(
                "Cargo.toml".to_string(),
                "Cargo.toml turns autotests off: cargo discovers no new tests/*.rs".to_string()
            )]
        );
    }

    #[test]
    fn a_tested_crate_gets_an_integration_test_and_an_untested_one_none() {
        let m = tree(&[
            "Cargo.toml",
            "src/lib.rs",
            "other/Cargo.toml",
            "other/src/lib.rs",
        ]);
        let read = |p: &str| match p {
            "Cargo.toml" => Some(b"[package]\nname = \"a\"\nedition = \"2021\"\n".to_vec()),
            "other/Cargo.toml" => Some(b"[package]\nname = \"b\"\nedition = \"2021\"\n".to_vec()),
            _ => None,
        };
        let p = plan(
            &m,
            &read,
            &ids(&["a::tests::adds", "doc/a::src/lib.rs - f (line 3)"]),
            &[],
            &mut counter(),
        );
        assert_eq!(
            p.surfaces
                .iter()
                .map(|s| s.file.as_str())
                .collect::<Vec<_>>(),
            vec!["tests/zz_loopexec_sentinel_0000000000000001.rs"]
        );
    }

    #[test]
    fn a_go_sentinel_takes_the_package_clause_of_the_packages_test_file() {
        let m = tree(&["go.mod", "calc/calc.go", "calc/calc_test.go"]);
        let read = |p: &str| match p {
            "go.mod" => Some(b"module example.com/m\n\ngo 1.21\n".to_vec()),
            "calc/calc_test.go" => Some(b"// tests\npackage calc_test\n".to_vec()),
            _ => None,
        };
        let p = plan(
            &m,
            &read,
            &ids(&["example.com/m/calc/TestAdd"]),
            &[],
            &mut counter(),
        );
        assert_eq!(p.surfaces.len(), 1);
        assert_eq!(
            p.surfaces[0].file,
            "calc/zz_loopexec_sentinel_0000000000000001_test.go"
        );
        assert!(String::from_utf8_lossy(&p.surfaces[0].content).contains("package calc_test\n"));
    }

    #[test]
    fn a_node_sentinel_goes_beside_the_last_file_node_test_discovers_when_its_tap_was_read() {
        let m = tree(&[
            "calc.js",
            "calc_test.js",
            "node_modules/x/x.test.js",
            "test/helpers.js",
            "zeta.js",
        ]);
        let p = plan(
            &m,
            &|_| None,
            &ids(&["adds"]),
            &["tap".to_string()],
            &mut counter(),
        );
        assert_eq!(
            p.surfaces
                .iter()
                .map(|s| (s.found_at.as_str(), s.file.as_str()))
                .collect::<Vec<_>>(),
            vec![(
                "test/helpers.js",
                "test/zz_loopexec_sentinel_0000000000000001.test.mjs"
            )]
        );
        assert!(plan(&m, &|_| None, &ids(&["adds"]), &[], &mut counter())
            .surfaces
            .is_empty());
    }

    fn one_surface() -> Plan {
        let m = tree(&["tests/test_a.py"]);
        plan(
            &m,
            &|_| None,
            &ids(&["tests.test_a::test_x"]),
            &[],
            &mut counter(),
        )
    }

    fn sets_of(plan: &Plan, fail_message: &str, extra_failing: &[&str]) -> TestSets {
        let s = &plan.surfaces[0];
        let fail = format!("tests.test_zz_{}::test_must_fail", s.token);
        let pass = format!("tests.test_zz_{}::test_must_pass", s.token);
        let mut sets = TestSets::default();
        sets.collected
            .extend([fail.clone(), pass, "tests.test_a::test_x".to_string()]);
        sets.failing.insert(fail.clone());
        sets.failing
            .extend(extra_failing.iter().map(|s| s.to_string()));
        sets.excerpts.insert(
            fail,
            Excerpt {
                text: fail_message.into(),
                cut: false,
            },
        );
        sets
    }

    #[test]
    fn a_red_run_with_exactly_the_failing_sentinel_failing_and_both_nonces_holds() {
        let p = one_surface();
        let s = &p.surfaces[0];
        let sets = sets_of(
            &p,
            &format!("AssertionError: loopexec-sentinel-fail-{}", s.fail_nonce),
            &[],
        );
        let proofs = vec![Some(s.pass_nonce.as_bytes().to_vec())];
        let collected = ids(&["tests.test_a::test_x"]);
        let green = Green {
            collected: &collected,
            failing: &[],
            skipped: &[],
        };
        let (broken, _) = judge(
            &p,
            &green,
            &Observed {
                exit: Some(1),
                ending: String::new(),
                sets: Some(&sets),
                proofs: &proofs,
            },
        );
        assert_eq!(broken, vec![]);
    }

    #[test]
    fn a_zero_exit_means_the_check_cannot_fail() {
        let p = one_surface();
        let s = &p.surfaces[0];
        let sets = sets_of(&p, &format!("loopexec-sentinel-fail-{}", s.fail_nonce), &[]);
        let proofs = vec![Some(s.pass_nonce.as_bytes().to_vec())];
        let collected = ids(&["tests.test_a::test_x"]);
        let green = Green {
            collected: &collected,
            failing: &[],
            skipped: &[],
        };
        let (broken, _) = judge(
            &p,
            &green,
            &Observed {
                exit: Some(0),
                ending: String::new(),
                sets: Some(&sets),
                proofs: &proofs,
            },
        );
        assert_eq!(
            broken,
            vec![Broken::CannotFail(
                "the sentinel run exited 0 although 1 sentinel test(s) must fail".into()
            )]
        );
    }

    #[test]
    fn a_missing_proof_and_a_failure_without_its_nonce_mean_it_reports_what_it_did_not_run() {
        let p = one_surface();
        let s = &p.surfaces[0];
        let sets = sets_of(&p, "AssertionError", &[]);
        let collected = ids(&["tests.test_a::test_x"]);
        let green = Green {
            collected: &collected,
            failing: &[],
            skipped: &[],
        };
        let (broken, _) = judge(
            &p,
            &green,
            &Observed {
                exit: Some(1),
                ending: String::new(),
                sets: Some(&sets),
                proofs: &[None],
            },
        );
        assert_eq!(
            broken,
            vec![
                Broken::DidNotRun(format!(
                    "the failure of {} does not carry its nonce",
                    s.file
                )),
                Broken::DidNotRun(format!(
                    "the passing sentinel of {} left no proof it ran ({})",
                    s.file, s.proof
                )),
            ]
        );
    }

    #[test]
    fn another_failing_test_breaks_the_expectation() {
        let p = one_surface();
        let s = &p.surfaces[0];
        let sets = sets_of(
            &p,
            &format!("loopexec-sentinel-fail-{}", s.fail_nonce),
            &["tests.test_a::test_x"],
        );
        let proofs = vec![Some(s.pass_nonce.as_bytes().to_vec())];
        let collected = ids(&["tests.test_a::test_x"]);
        let green = Green {
            collected: &collected,
            failing: &[],
            skipped: &[],
        };
        let (broken, _) = judge(
            &p,
            &green,
            &Observed {
                exit: Some(1),
                ending: String::new(),
                sets: Some(&sets),
                proofs: &proofs,
            },
        );
        assert_eq!(broken, vec![Broken::DidNotRun("1 test(s) fail in the sentinel run that passed in the green check: tests.test_a::test_x".into())]);
    }

    #[test]
    fn only_whole_libtest_binaries_of_a_tested_crate_may_go_unstarted() {
        let m = tree(&["Cargo.toml", "src/lib.rs"]);
        let read = |p: &str| {
            (p == "Cargo.toml").then(|| b"[package]\nname = \"a\"\nedition = \"2021\"\n".to_vec())
        };
        let collected = ids(&[
            "a::tests::adds",
            "doc/a::src/lib.rs - f (line 3)",
            "other::x",
        ]);
        let p = plan(&m, &read, &collected, &[], &mut counter());
        let s = &p.surfaces[0];
        let fail = format!("test/zz_{}::must_fail", s.token);
        let mut sets = TestSets::default();
        sets.collected.extend([
            fail.clone(),
            format!("test/zz_{}::must_pass", s.token),
            "a::tests::adds".to_string(),
        ]);
        sets.failing.insert(fail.clone());
        sets.excerpts.insert(
            fail,
            Excerpt {
                text: format!("loopexec-sentinel-fail-{}", s.fail_nonce),
                cut: false,
            },
        );
        let proofs = vec![Some(s.pass_nonce.as_bytes().to_vec())];
        let green = Green {
            collected: &collected,
            failing: &[],
            skipped: &[],
        };
        let (broken, unstarted) = judge(
            &p,
            &green,
            &Observed {
                exit: Some(101),
                ending: String::new(),
                sets: Some(&sets),
                proofs: &proofs,
            },
        );
        assert_eq!(unstarted, 1);
        assert_eq!(
            broken,
            vec![Broken::DidNotRun(
                "1 test(s) of the green check are missing from the sentinel run: other::x".into()
            )]
        );
    }

    #[test]
    fn a_crate_cargo_never_started_after_another_crates_failing_sentinel_is_not_judged() {
        let m = tree(&[
            "a/Cargo.toml",
            "a/src/lib.rs",
            "b/Cargo.toml",
            "b/src/lib.rs",
        ]);
        let read = |p: &str| match p {
            "a/Cargo.toml" => Some(b"[package]\nname = \"a\"\nedition = \"2021\"\n".to_vec()),
            "b/Cargo.toml" => Some(b"[package]\nname = \"b\"\nedition = \"2021\"\n".to_vec()),
            _ => None,
        };
        let collected = ids(&["a::tests::x", "b::tests::y"]);
        let p = plan(&m, &read, &collected, &[], &mut counter());
        assert_eq!(p.surfaces.len(), 2);
        let a = &p.surfaces[0];
        let fail = format!("test/zz_{}::must_fail", a.token);
        let mut sets = TestSets::default();
        sets.collected.extend([
            fail.clone(),
            format!("test/zz_{}::must_pass", a.token),
            "a::tests::x".to_string(),
        ]);
        sets.failing.insert(fail.clone());
        sets.excerpts.insert(
            fail,
            Excerpt {
                text: format!("loopexec-sentinel-fail-{}", a.fail_nonce),
                cut: false,
            },
        );
        let proofs = vec![Some(a.pass_nonce.as_bytes().to_vec()), None];
        let green = Green {
            collected: &collected,
            failing: &[],
            skipped: &[],
        };
        let (broken, unstarted) = judge(
            &p,
            &green,
            &Observed {
                exit: Some(101),
                ending: String::new(),
                sets: Some(&sets),
                proofs: &proofs,
            },
        );
        assert_eq!((broken, unstarted), (vec![], 1));
        // Neither crate started: nothing ran, and both are judged.
        let none = TestSets::default();
        let (broken, _) = judge(
            &p,
            &green,
            &Observed {
                exit: Some(101),
                ending: String::new(),
                sets: Some(&none),
                proofs: &[None, None],
            },
        );
        assert!(broken.len() >= 4, "{broken:?}");
    }

    #[test]
    fn sentinels_neither_reported_nor_run_are_undiscovered() {
        let p = one_surface();
        let nothing = TestSets::default();
        assert!(undiscovered(
            &p,
            &Observed {
                exit: Some(0),
                ending: String::new(),
                sets: Some(&nothing),
                proofs: &[None]
            }
        ));
        let proof = vec![Some(b"x".to_vec())];
        assert!(!undiscovered(
            &p,
            &Observed {
                exit: Some(0),
                ending: String::new(),
                sets: Some(&nothing),
                proofs: &proof
            }
        ));
    }

    #[test]
    fn off_needs_a_reason_and_a_reason_needs_off() {
        assert!(SentinelPins::resolve(
            SentinelInput {
                enabled: Some(false),
                reason: None
            },
            true
        )
        .unwrap_err()
        .message
        .contains("needs a non-empty reason"));
        assert!(SentinelPins::resolve(
            SentinelInput {
                enabled: None,
                reason: Some("x".into())
            },
            true
        )
        .unwrap_err()
        .message
        .contains("only with enabled = false"));
        assert_eq!(
            SentinelPins::resolve(SentinelInput::default(), true).unwrap(),
            SentinelPins {
                enabled: true,
                reason: None
            }
        );
        assert_eq!(
            SentinelPins::resolve(
                SentinelInput {
                    enabled: Some(false),
                    reason: Some(" slow ".into())
                },
                true
            )
            .unwrap(),
            SentinelPins {
                enabled: false,
                reason: Some("slow".into())
            }
        );
    }
}
