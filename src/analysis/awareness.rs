//! The code under test must not know it is tested (issue 18, item 4): a class rule over the
//! syntax of production code. Any observation that can tell a test run from a real one is an
//! [`Observation`], whatever the spelling: the call stack and its frames, the current thread's
//! identity, the process's arguments and flags, its parent, the build profile, features only test
//! builds enable, runner objects reached through hooks or the test framework's own modules, and
//! the environment variables a runner, a build tool or a CI sets.
//!
//! Names are resolved syntactically before they are matched, per file and flow-insensitively:
//! imports with their aliases (`import traceback as tb`, `from inspect import stack as s`,
//! `use std::panic::Location as L`, `import rt "runtime"`, `import {argv} from 'node:process'`),
//! plain local bindings (`e = os.environ`, `const p = process`, `const {argv} = process`,
//! `const e = new Error()`), `getattr(x, "name")`, `__import__("m")`, `require("m")`, string
//! constants and concatenations used as keys. Each finding carries the canonical API it resolved
//! to (`traceback.extract_stack`, `std::thread::current`, `runtime.Caller`, `process.argv`,
//! `env:CI`, `feature:fixed`), which is also the name loop.toml allows it by.
//!
//! What is not an observation: an ordinary setting read from the environment (`APP_PORT`,
//! `DATABASE_URL`); output-only uses whose value no code can read back (Python's
//! `traceback.print_stack`, `traceback.format_exc` of the exception being handled, whose frames
//! are only those below the handler; `console.error(err.stack)`); argv and flags read inside a
//! program's entry point (`if __name__ == "__main__":`, `def main`, Go's `func main`, Rust's
//! `fn main`, which may also install a panic hook). Test code is
//! never looked at (it is the test surface). Pure: bytes in, observations out.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use serde::Serialize;
use tree_sitter::Node;

use super::syntax::{
    ancestor, compact_text, file_name, named_children, string_value, walk, Language, ParsedFile,
};
use super::test_code::{is_cfg_test, is_rust_test_fn, is_test_file, rust_attributes};
use super::{AnalysisError, ChangedFile, Limits, NotAnalysed, NotAnalysedReason, Version};

/// The sub-classes of "an observation that can tell a test run from a real one".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Channel {
    /// The call stack, its frames and callers.
    #[serde(rename = "call-stack")]
    CallStack,
    /// The current thread's name or identity (libtest names each test's thread after the test).
    #[serde(rename = "thread-identity")]
    ThreadIdentity,
    /// The process's arguments, its executable and the flag set (`go test` runs `PKG.test -test.*`).
    #[serde(rename = "argv-and-flags")]
    ArgvAndFlags,
    /// The parent process and `/proc` entries of a process.
    #[serde(rename = "parent-process")]
    ParentProcess,
    /// The build profile: debug assertions, `cfg(test)`, `__debug__`, `NODE_ENV`, vite's mode.
    #[serde(rename = "build-profile")]
    BuildProfile,
    /// A cargo feature that only test builds enable (a dev-dependency of the crate on itself).
    #[serde(rename = "test-only-feature")]
    TestOnlyFeature,
    /// Runner objects reached through hooks (tracing, gc, import and panic hooks, async_hooks)
    /// and the test framework's own modules imported or looked up from production code.
    #[serde(rename = "runner-objects")]
    RunnerObjects,
    /// Environment variables a runner, a build tool or a CI sets, and enumerating the environment.
    #[serde(rename = "runner-environment")]
    RunnerEnvironment,
}

impl Channel {
    pub fn id(self) -> &'static str {
        match self {
            Channel::CallStack => "call-stack",
            Channel::ThreadIdentity => "thread-identity",
            Channel::ArgvAndFlags => "argv-and-flags",
            Channel::ParentProcess => "parent-process",
            Channel::BuildProfile => "build-profile",
            Channel::TestOnlyFeature => "test-only-feature",
            Channel::RunnerObjects => "runner-objects",
            Channel::RunnerEnvironment => "runner-environment",
        }
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// One observation in one version of a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Observation {
    pub channel: Channel,
    /// The canonical API it resolved to (the name loop.toml allows it by).
    pub api: String,
    pub line: u32,
    pub evidence: String,
}

/// A new observation in the end state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AwarenessFinding {
    pub file: String,
    pub line: u32,
    pub channel: Channel,
    pub api: String,
    pub evidence: String,
}

/// What the observations of a file depend on beyond its own bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Context {
    /// Cargo features of the file's crate that only test builds enable ([`test_only_features`]).
    pub test_only_features: BTreeSet<String>,
}

/// APIs a loop allows, each with the reason the receipt records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowances {
    allowed: BTreeMap<String, String>,
}

impl Allowances {
    /// Allows `api` (a name [`is_known_api`] accepts) for the reason given (trimmed, non-empty).
    pub fn allow(&mut self, api: &str, reason: &str) -> Result<(), AnalysisError> {
        let (api, reason) = (api.trim(), reason.trim());
        if !is_known_api(api) {
            return Err(AnalysisError::UnknownObservationApi(api.to_string()));
        }
        if reason.is_empty() {
            return Err(AnalysisError::AllowedWithoutReason(api.to_string()));
        }
        self.allowed.insert(api.to_string(), reason.to_string());
        Ok(())
    }

    pub fn reason(&self, api: &str) -> Option<&str> {
        self.allowed.get(api).map(String::as_str)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.allowed.iter().map(|(a, r)| (a.as_str(), r.as_str()))
    }
}

/// The awareness analysis of the agent's change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AwarenessChange {
    /// New observations of APIs the loop does not allow.
    pub findings: Vec<AwarenessFinding>,
    /// New observations of allowed APIs, with the reason (recorded, not findings).
    pub allowed: Vec<(AwarenessFinding, String)>,
    /// Changed file versions above the parse cap.
    pub not_analysed: Vec<(Version, NotAnalysed)>,
}

/// Observations in the changed files that t0 does not have. `context_of` gives each path's
/// [`Context`] in the end state (t0's versions are read with the same context, so a feature that
/// became test-only is judged where it is used).
pub fn analyse_change(
    changed: &[ChangedFile<'_>],
    context_of: &dyn Fn(&str) -> Context,
    allowances: &Allowances,
    limits: Limits,
) -> Result<AwarenessChange, AnalysisError> {
    let mut t0 = Vec::new();
    let mut end = Vec::new();
    let mut not_analysed = Vec::new();
    for change in changed {
        let context = context_of(change.path);
        for (version, bytes, into) in [
            (Version::T0, change.t0, &mut t0),
            (Version::End, change.end, &mut end),
        ] {
            let Some(bytes) = bytes else { continue };
            match super::syntax::parse(change.path, bytes, limits)? {
                super::syntax::Parse::Parsed(parsed) => {
                    let test_file = is_test_file(change.path, parsed.language);
                    into.push((change.path, observations(&parsed, test_file, &context)));
                }
                super::syntax::Parse::NotAnalysed(na) => {
                    if matches!(na.reason, NotAnalysedReason::TooLarge { .. }) {
                        not_analysed.push((version, na));
                    }
                }
            }
        }
    }
    let mut out = AwarenessChange {
        not_analysed,
        ..Default::default()
    };
    for finding in new_observations(&t0, &end) {
        match allowances.reason(&finding.api) {
            Some(reason) => out.allowed.push((finding, reason.to_string())),
            None => out.findings.push(finding),
        }
    }
    Ok(out)
}

/// The end observations t0 does not have, matched by (api, evidence): same file and line
/// first, then same file, then any file (code moved between files is not new).
pub fn new_observations(
    t0: &[(&str, Vec<Observation>)],
    end: &[(&str, Vec<Observation>)],
) -> Vec<AwarenessFinding> {
    let mut pool: BTreeMap<(&str, &str), Vec<(&str, u32, bool)>> = BTreeMap::new();
    for (file, observations) in t0 {
        for o in observations {
            pool.entry((o.api.as_str(), o.evidence.as_str()))
                .or_default()
                .push((file, o.line, true));
        }
    }
    let all: Vec<(&str, &Observation)> = end
        .iter()
        .flat_map(|(f, os)| os.iter().map(move |o| (*f, o)))
        .collect();
    let mut matched = vec![false; all.len()];
    for pass in 0..3 {
        for (i, (file, o)) in all.iter().enumerate() {
            if matched[i] {
                continue;
            }
            let Some(candidates) = pool.get_mut(&(o.api.as_str(), o.evidence.as_str())) else {
                continue;
            };
            let hit = candidates.iter_mut().find(|(f, l, free)| {
                *free
                    && match pass {
                        0 => f == file && *l == o.line,
                        1 => f == file,
                        _ => true,
                    }
            });
            if let Some(c) = hit {
                c.2 = false;
                matched[i] = true;
            }
        }
    }
    all.into_iter()
        .zip(matched)
        .filter(|(_, m)| !m)
        .map(|((file, o), _)| AwarenessFinding {
            file: file.to_string(),
            line: o.line,
            channel: o.channel,
            api: o.api.clone(),
            evidence: o.evidence.clone(),
        })
        .collect()
}

/// Every observation in one parsed file's production code (none in a test file, nor in a Rust
/// bench or example target: `benches/` use libtest's `test` crate, `examples/` are programs of
/// their own, neither is the code under test).
pub fn observations(
    file: &ParsedFile<'_>,
    whole_file_is_test: bool,
    context: &Context,
) -> Vec<Observation> {
    let rust_target_dir = file.language == Language::Rust
        && file
            .path
            .split('/')
            .rev()
            .skip(1)
            .any(|d| d == "benches" || d == "examples");
    if whole_file_is_test || rust_target_dir {
        return Vec::new();
    }
    let mut out = Vec::new();
    match file.language {
        Language::Python => python(file, &mut out),
        Language::Rust => rust(file, context, &mut out),
        Language::Go => go(file, &mut out),
        Language::JavaScript | Language::TypeScript | Language::Tsx => js(file, &mut out),
    }
    out
}

/// Expressions are resolved at most this many levels deep (an attribute chain, nested
/// parentheses): a hostile file nested deeper resolves to nothing, never to a deep stack.
const MAX_RESOLVE_DEPTH: usize = 64;

fn push(
    out: &mut Vec<Observation>,
    file: &ParsedFile<'_>,
    node: Node<'_>,
    channel: Channel,
    api: impl Into<String>,
) {
    out.push(Observation {
        channel,
        api: api.into(),
        line: file.line(node),
        evidence: file.evidence(node),
    });
}

// ---------------------------------------------------------------- shared vocabulary

/// The channel of an environment variable a runner, a build tool or a CI sets; `None` for an
/// ordinary setting.
pub fn runner_variable(name: &str) -> Option<Channel> {
    const BUILD_PROFILE: &[&str] = &["NODE_ENV", "BABEL_ENV"];
    const EXACT: &[&str] = &[
        "CI",
        "CONTINUOUS_INTEGRATION",
        "BUILD_NUMBER",
        "BUILD_ID",
        "GITHUB_ACTIONS",
        "GITHUB_RUN_ID",
        "GITHUB_WORKFLOW",
        "GITHUB_JOB",
        "GITLAB_CI",
        "BUILDKITE",
        "TRAVIS",
        "CIRCLECI",
        "JENKINS_URL",
        "JENKINS_HOME",
        "TF_BUILD",
        "TEAMCITY_VERSION",
        "APPVEYOR",
        "DRONE",
        "CODEBUILD_BUILD_ID",
        "BITBUCKET_BUILD_NUMBER",
        "NODE_TEST_CONTEXT",
        "NEXTEST",
        "INIT_CWD",
        "COVERAGE_PROCESS_START",
        "GOCOVERDIR",
        "RUST_TEST_THREADS",
        "RUST_TEST_NOCAPTURE",
        "RUST_TEST_TIME_UNIT",
    ];
    const PREFIXES: &[&str] = &[
        "PYTEST_",
        "_PYTEST",
        "RUST_TEST_",
        "NEXTEST_",
        "CARGO_",
        "VITEST",
        "JEST_",
        "GOTEST",
        "TOX_",
        "NOX_",
        "npm_lifecycle_",
        "npm_package_",
        "npm_config_",
        "COV_CORE_",
        "LOOPEXEC_",
        "CI_",
        "BUILDKITE_",
        "CIRCLE_",
        "TRAVIS_",
    ];
    if BUILD_PROFILE.contains(&name) {
        return Some(Channel::BuildProfile);
    }
    (EXACT.contains(&name) || PREFIXES.iter().any(|p| name.starts_with(p)))
        .then_some(Channel::RunnerEnvironment)
}

/// Compile-time variables cargo sets only for test builds (`env!`, `option_env!`); other
/// `CARGO_*` values at compile time (`CARGO_PKG_VERSION`) are the same in every build.
fn compile_time_test_variable(name: &str) -> bool {
    name == "CARGO_TARGET_TMPDIR"
        || name.starts_with("CARGO_BIN_EXE_")
        || (!name.starts_with("CARGO_") && runner_variable(name).is_some())
}

/// Modules of test frameworks (Python).
fn python_runner_module(module: &str) -> bool {
    let root = module.split('.').next().unwrap_or_default();
    matches!(
        root,
        "pytest" | "_pytest" | "pluggy" | "nose" | "nose2" | "doctest" | "py"
    ) || (root == "unittest" && module != "unittest.mock" && !module.starts_with("unittest.mock."))
}

/// Modules of test frameworks and runner hooks (JS/TS), by the name after `node:` is dropped.
fn js_runner_module(module: &str) -> bool {
    let scope = |s: &str| module == s || module.starts_with(&format!("{s}/"));
    matches!(
        module,
        "async_hooks"
            | "inspector"
            | "inspector/promises"
            | "node:test"
            | "vitest"
            | "jest"
            | "mocha"
            | "ava"
            | "tap"
            | "uvu"
            | "chai"
    ) || scope("@jest")
        || scope("@vitest")
        || module.starts_with("vitest/")
}

/// A `/proc` path of a process (its own or another's by pid): `/proc/self/...`,
/// `/proc/thread-self/...`, `/proc/<pid>/...`, or `/proc/` completed at run time.
fn proc_path(content: &str) -> bool {
    let Some(rest) = content.strip_prefix("/proc/") else {
        return false;
    };
    rest.is_empty()
        || rest.starts_with("self")
        || rest.starts_with("thread-self")
        || rest.starts_with(|c: char| c.is_ascii_digit() || matches!(c, '{' | '%' | '$'))
}

/// The text of a string literal without its quotes and prefixes (interpolations kept as written).
fn string_content(file: &ParsedFile<'_>, node: Node<'_>) -> String {
    let text = file.text(node);
    let t = text.trim_start_matches(|c: char| c.is_ascii_alphabetic());
    let t = t.trim_start_matches(['#', '"', '\'', '`']);
    t.trim_end_matches(['#', '"', '\'', '`']).to_string()
}

/// Every API name the rules can report (besides `env:NAME`, `feature:NAME`, `import:MODULE`).
pub fn known_apis() -> BTreeSet<&'static str> {
    let mut all: BTreeSet<&'static str> = BTreeSet::new();
    for table in [PYTHON_APIS, RUST_APIS, GO_APIS, JS_APIS] {
        all.extend(table.iter().map(|(a, _)| *a));
    }
    all.extend(PYTHON_FRAME_ATTRIBUTES.iter().map(|(a, _)| *a));
    all.extend(FIXED_APIS);
    all
}

/// Names reported by rules that are not table lookups.
const FIXED_APIS: &[&str] = &[
    "/proc/<pid>",
    "cfg:debug_assertions",
    "cfg:test",
    "debug_assert:side-effect",
    "__debug__",
    "os.environ:enumerated",
    "sys.modules:enumerated",
    "process.env:enumerated",
    "Error().stack",
    "import.meta.env.MODE",
    "import.meta.env.DEV",
    "import.meta.env.PROD",
    "import.meta.env.SSR",
    "import.meta.vitest",
    "extern crate test",
];

/// Whether loop.toml may name `api` in `[guards] allow`.
pub fn is_known_api(api: &str) -> bool {
    if let Some(name) = api.strip_prefix("env:") {
        return runner_variable(name).is_some() || compile_time_test_variable(name);
    }
    if let Some(feature) = api.strip_prefix("feature:") {
        return !feature.is_empty() && !feature.contains(char::is_whitespace);
    }
    if let Some(module) = api.strip_prefix("import:") {
        return python_runner_module(module) || js_runner_module(module) || module == "testing";
    }
    known_apis().contains(api)
}

/// Whether a canonical path is `api` or lies beneath it (`sys.argv` covers `sys.argv`, a Rust
/// crate prefix covers its paths).
fn covers(path: &str, api: &str, separator: &str) -> bool {
    path == api || (path.starts_with(api) && path[api.len()..].starts_with(separator))
}

fn lookup(
    table: &'static [(&'static str, Channel)],
    path: &str,
    separator: &str,
) -> Option<(&'static str, Channel)> {
    table
        .iter()
        .find(|(api, _)| covers(path, api, separator))
        .copied()
}

// ---------------------------------------------------------------- Python

const PYTHON_APIS: &[(&str, Channel)] = &[
    ("traceback.extract_stack", Channel::CallStack),
    ("traceback.format_stack", Channel::CallStack),
    ("traceback.walk_stack", Channel::CallStack),
    ("traceback.StackSummary.extract", Channel::CallStack),
    ("inspect.stack", Channel::CallStack),
    ("inspect.currentframe", Channel::CallStack),
    ("inspect.getouterframes", Channel::CallStack),
    ("inspect.trace", Channel::CallStack),
    ("sys._getframe", Channel::CallStack),
    ("sys._getframemodulename", Channel::CallStack),
    ("sys._current_frames", Channel::CallStack),
    ("sys._current_exceptions", Channel::CallStack),
    ("logging.currentframe", Channel::CallStack),
    ("threading.current_thread", Channel::ThreadIdentity),
    ("threading.currentThread", Channel::ThreadIdentity),
    ("threading.main_thread", Channel::ThreadIdentity),
    ("threading.enumerate", Channel::ThreadIdentity),
    ("threading.active_count", Channel::ThreadIdentity),
    ("threading.get_ident", Channel::ThreadIdentity),
    ("threading.get_native_id", Channel::ThreadIdentity),
    ("_thread.get_ident", Channel::ThreadIdentity),
    ("sys.argv", Channel::ArgvAndFlags),
    ("sys.orig_argv", Channel::ArgvAndFlags),
    ("os.getppid", Channel::ParentProcess),
    ("psutil", Channel::ParentProcess),
    ("sys.flags", Channel::BuildProfile),
    ("sys.gettrace", Channel::RunnerObjects),
    ("sys.getprofile", Channel::RunnerObjects),
    ("sys.settrace", Channel::RunnerObjects),
    ("sys.setprofile", Channel::RunnerObjects),
    ("sys.monitoring", Channel::RunnerObjects),
    ("sys.addaudithook", Channel::RunnerObjects),
    ("sys.meta_path", Channel::RunnerObjects),
    ("sys.path_hooks", Channel::RunnerObjects),
    ("sys._called_from_test", Channel::RunnerObjects),
    ("threading.settrace", Channel::RunnerObjects),
    ("threading.setprofile", Channel::RunnerObjects),
    ("gc.get_objects", Channel::RunnerObjects),
    ("gc.get_referrers", Channel::RunnerObjects),
    ("gc.get_referents", Channel::RunnerObjects),
    ("sys.modules.keys", Channel::RunnerObjects),
    ("sys.modules.values", Channel::RunnerObjects),
    ("sys.modules.items", Channel::RunnerObjects),
    ("sys.modules.copy", Channel::RunnerObjects),
    ("os.environ.keys", Channel::RunnerEnvironment),
    ("os.environ.values", Channel::RunnerEnvironment),
    ("os.environ.items", Channel::RunnerEnvironment),
    ("os.environ.copy", Channel::RunnerEnvironment),
];

/// Frame and traceback attributes that walk to callers, whatever object they are read from.
const PYTHON_FRAME_ATTRIBUTES: &[(&str, &str)] = &[
    ("frame.f_back", "f_back"),
    ("frame.tb_frame", "tb_frame"),
    ("frame.f_globals", "f_globals"),
    ("frame.f_locals", "f_locals"),
    ("frame.f_code", "f_code"),
    ("frame.f_builtins", "f_builtins"),
    ("frame.gi_frame", "gi_frame"),
    ("frame.cr_frame", "cr_frame"),
    ("frame.ag_frame", "ag_frame"),
];

const PYTHON_ENV_GETTERS: &[&str] = &[
    "os.environ.get",
    "os.getenv",
    "os.environ.setdefault",
    "os.environ.pop",
    "os.environ.__getitem__",
    "os.environ.__contains__",
    "os.getenvb",
    "os.environb.get",
];
const PYTHON_MODULE_LOOKUPS: &[&str] = &[
    "sys.modules.get",
    "sys.modules.__getitem__",
    "sys.modules.__contains__",
    "importlib.import_module",
    "importlib.util.find_spec",
    "__import__",
    "pkgutil.find_loader",
    "importlib.find_loader",
];

struct PyNames {
    aliases: HashMap<String, String>,
    strings: HashMap<String, String>,
}

impl PyNames {
    fn collect(file: &ParsedFile<'_>) -> PyNames {
        let mut names = PyNames {
            aliases: HashMap::new(),
            strings: HashMap::new(),
        };
        walk(file.root(), |n| {
            match n.kind() {
                "import_statement" => {
                    for child in named_children(n) {
                        if child.kind() == "aliased_import" {
                            if let (Some(name), Some(alias)) = (
                                child.child_by_field_name("name"),
                                child.child_by_field_name("alias"),
                            ) {
                                names.aliases.insert(
                                    file.text(alias).into_owned(),
                                    compact_text(file, name),
                                );
                            }
                        }
                    }
                    return false;
                }
                "import_from_statement" => {
                    let Some(module) = n
                        .child_by_field_name("module_name")
                        .filter(|m| m.kind() == "dotted_name")
                    else {
                        return false;
                    };
                    let module = compact_text(file, module);
                    let mut cursor = n.walk();
                    for child in n.children_by_field_name("name", &mut cursor) {
                        let (name, alias) = match child.kind() {
                            "aliased_import" => (
                                child.child_by_field_name("name"),
                                child.child_by_field_name("alias"),
                            ),
                            _ => (Some(child), Some(child)),
                        };
                        if let (Some(name), Some(alias)) = (name, alias) {
                            names.aliases.insert(
                                file.text(alias).into_owned(),
                                format!("{module}.{}", compact_text(file, name)),
                            );
                        }
                    }
                    return false;
                }
                "assignment" => {
                    if let (Some(left), Some(right)) = (
                        n.child_by_field_name("left"),
                        n.child_by_field_name("right"),
                    ) {
                        if left.kind() == "identifier" {
                            let target = file.text(left).into_owned();
                            if let Some(value) = names.string(file, right) {
                                names.strings.insert(target, value);
                            } else if let Some(path) =
                                names.canonical(file, right).filter(|p| *p != target)
                            {
                                // A name bound to an observed value is reported where it is bound, once.
                                if lookup(PYTHON_APIS, &path, ".").is_none()
                                    || right.kind() != "attribute"
                                {
                                    names.aliases.insert(target, path);
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
            true
        });
        names
    }

    /// A string the node evaluates to without running anything: a literal, a constant, `+` of them.
    fn string(&self, file: &ParsedFile<'_>, node: Node<'_>) -> Option<String> {
        self.string_at(file, node, 0)
    }

    fn string_at(&self, file: &ParsedFile<'_>, node: Node<'_>, depth: usize) -> Option<String> {
        if depth > MAX_RESOLVE_DEPTH {
            return None;
        }
        let d = depth + 1;
        match node.kind() {
            "string" => string_value(file, node),
            "concatenated_string" => named_children(node)
                .into_iter()
                .map(|c| self.string_at(file, c, d))
                .collect(),
            "identifier" => self.strings.get(file.text(node).as_ref()).cloned(),
            "parenthesized_expression" => self.string_at(file, node.named_child(0)?, d),
            "binary_operator"
                if node
                    .child_by_field_name("operator")
                    .is_some_and(|o| file.text(o) == "+") =>
            {
                Some(
                    self.string_at(file, node.child_by_field_name("left")?, d)?
                        + &self.string_at(file, node.child_by_field_name("right")?, d)?,
                )
            }
            _ => None,
        }
    }

    /// The dotted path an expression names, through imports and bindings.
    fn canonical(&self, file: &ParsedFile<'_>, node: Node<'_>) -> Option<String> {
        self.canonical_at(file, node, 0)
    }

    fn canonical_at(&self, file: &ParsedFile<'_>, node: Node<'_>, depth: usize) -> Option<String> {
        if depth > MAX_RESOLVE_DEPTH {
            return None;
        }
        let d = depth + 1;
        match node.kind() {
            "identifier" => {
                let name = file.text(node);
                Some(
                    self.aliases
                        .get(name.as_ref())
                        .cloned()
                        .unwrap_or_else(|| name.into_owned()),
                )
            }
            "attribute" => {
                let object = self.canonical_at(file, node.child_by_field_name("object")?, d)?;
                Some(format!(
                    "{object}.{}",
                    file.text(node.child_by_field_name("attribute")?)
                ))
            }
            "parenthesized_expression" => self.canonical_at(file, node.named_child(0)?, d),
            "call" => {
                let callee = self.canonical_at(file, node.child_by_field_name("function")?, d)?;
                let arguments = named_children(node.child_by_field_name("arguments")?);
                match callee.as_str() {
                    "getattr" if arguments.len() >= 2 => Some(format!(
                        "{}.{}",
                        self.canonical_at(file, arguments[0], d)?,
                        self.string_at(file, arguments[1], d)?
                    )),
                    "__import__" | "importlib.import_module" => {
                        self.string_at(file, *arguments.first()?, d)
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

/// Inside a program's entry point: `if __name__ == "__main__":`, a function named `main`, or
/// a `__main__.py`.
fn python_entry_point(file: &ParsedFile<'_>, n: Node<'_>) -> bool {
    file_name(file.path) == "__main__.py"
        || ancestor(n, |a| {
            (a.kind() == "if_statement"
                && a.child_by_field_name("condition").is_some_and(|c| {
                    let t = compact_text(file, c);
                    t == "__name__=='__main__'" || t == "__name__==\"__main__\""
                }))
                || (a.kind() == "function_definition"
                    && a.child_by_field_name("name")
                        .is_some_and(|x| file.text(x) == "main"))
        })
        .is_some()
}

/// Whether an identifier stands for a value here (not a name being bound or an attribute name).
fn python_value_position(n: Node<'_>) -> bool {
    let Some(parent) = n.parent() else {
        return true;
    };
    let is_field = |field: &str| {
        parent
            .child_by_field_name(field)
            .is_some_and(|c| c.id() == n.id())
    };
    !match parent.kind() {
        "attribute" => is_field("attribute"),
        "keyword_argument" => is_field("name"),
        "function_definition" | "class_definition" => is_field("name"),
        "assignment" | "augmented_assignment" => is_field("left"),
        "parameters"
        | "lambda_parameters"
        | "default_parameter"
        | "typed_parameter"
        | "typed_default_parameter"
        | "dotted_name"
        | "aliased_import"
        | "global_statement"
        | "nonlocal_statement" => true,
        _ => false,
    }
}

fn python(file: &ParsedFile<'_>, out: &mut Vec<Observation>) {
    let names = PyNames::collect(file);
    walk(file.root(), |n| match n.kind() {
        "import_statement" | "import_from_statement" => {
            let modules: Vec<String> = if n.kind() == "import_from_statement" {
                n.child_by_field_name("module_name")
                    .filter(|m| m.kind() == "dotted_name")
                    .map(|m| compact_text(file, m))
                    .into_iter()
                    .collect()
            } else {
                named_children(n)
                    .into_iter()
                    .map(|m| compact_text(file, m.child_by_field_name("name").unwrap_or(m)))
                    .collect()
            };
            if !python_entry_point(file, n) {
                if let Some(m) = modules.iter().find(|m| python_runner_module(m)) {
                    push(out, file, n, Channel::RunnerObjects, format!("import:{m}"));
                }
            }
            false
        }
        "call" => {
            // `getattr(sys, "_getframe")`, `__import__("psutil")`: the call itself names the API.
            if let Some((api, channel)) = names
                .canonical(file, n)
                .and_then(|c| lookup(PYTHON_APIS, &c, "."))
            {
                push(out, file, n, channel, api);
                return false;
            }
            let Some(callee) = n
                .child_by_field_name("function")
                .and_then(|f| names.canonical(file, f))
            else {
                return true;
            };
            let first = n
                .child_by_field_name("arguments")
                .and_then(|a| a.named_child(0));
            let key = first.and_then(|a| names.string(file, a));
            if PYTHON_ENV_GETTERS.contains(&callee.as_str()) {
                if let Some((key, channel)) = key
                    .as_ref()
                    .and_then(|k| runner_variable(k).map(|c| (k, c)))
                {
                    push(out, file, n, channel, format!("env:{key}"));
                }
            } else if PYTHON_MODULE_LOOKUPS.contains(&callee.as_str())
                && !python_entry_point(file, n)
            {
                if let Some(key) = key.filter(|k| python_runner_module(k)) {
                    push(
                        out,
                        file,
                        n,
                        Channel::RunnerObjects,
                        format!("import:{key}"),
                    );
                }
            }
            true
        }
        "subscript" => {
            let (Some(value), Some(key)) = (
                n.child_by_field_name("value"),
                n.child_by_field_name("subscript"),
            ) else {
                return true;
            };
            let (Some(container), Some(key)) =
                (names.canonical(file, value), names.string(file, key))
            else {
                return true;
            };
            match container.as_str() {
                "os.environ" | "os.environb" => {
                    if let Some(channel) = runner_variable(&key) {
                        push(out, file, n, channel, format!("env:{key}"));
                    }
                }
                "sys.modules" if python_runner_module(&key) => push(
                    out,
                    file,
                    n,
                    Channel::RunnerObjects,
                    format!("import:{key}"),
                ),
                _ => {}
            }
            true
        }
        "comparison_operator" => {
            let parts = named_children(n);
            if let (Some(left), Some(right)) = (parts.first(), parts.get(1)) {
                if let (Some(key), Some(container)) =
                    (names.string(file, *left), names.canonical(file, *right))
                {
                    match container.as_str() {
                        "os.environ" | "os.environb" => {
                            if let Some(channel) = runner_variable(&key) {
                                push(out, file, n, channel, format!("env:{key}"));
                            }
                        }
                        "sys.modules" if python_runner_module(&key) => push(
                            out,
                            file,
                            n,
                            Channel::RunnerObjects,
                            format!("import:{key}"),
                        ),
                        _ => {}
                    }
                }
            }
            true
        }
        "for_statement" | "for_in_clause" => {
            if let Some(container) = n
                .child_by_field_name("right")
                .and_then(|r| names.canonical(file, r))
            {
                match container.as_str() {
                    "os.environ" | "os.environb" => push(
                        out,
                        file,
                        n,
                        Channel::RunnerEnvironment,
                        "os.environ:enumerated",
                    ),
                    "sys.modules" => push(
                        out,
                        file,
                        n,
                        Channel::RunnerObjects,
                        "sys.modules:enumerated",
                    ),
                    _ => {}
                }
            }
            true
        }
        "attribute" => {
            let attribute = n
                .child_by_field_name("attribute")
                .map(|a| file.text(a).into_owned())
                .unwrap_or_default();
            if let Some((api, _)) = PYTHON_FRAME_ATTRIBUTES
                .iter()
                .find(|(_, a)| *a == attribute)
            {
                push(out, file, n, Channel::CallStack, *api);
                return true;
            }
            match names
                .canonical(file, n)
                .and_then(|c| lookup(PYTHON_APIS, &c, "."))
            {
                Some((_, Channel::ArgvAndFlags)) if python_entry_point(file, n) => false,
                Some((api, channel)) => {
                    push(out, file, n, channel, api);
                    false
                }
                None => true,
            }
        }
        "identifier" if python_value_position(n) => {
            let name = file.text(n);
            if name == "__debug__" {
                push(out, file, n, Channel::BuildProfile, "__debug__");
            } else if let Some((api, channel)) = names
                .aliases
                .get(name.as_ref())
                .and_then(|c| lookup(PYTHON_APIS, c, "."))
            {
                if !(channel == Channel::ArgvAndFlags && python_entry_point(file, n)) {
                    push(out, file, n, channel, api);
                }
            }
            false
        }
        "string" => {
            if proc_path(&string_content(file, n)) {
                push(out, file, n, Channel::ParentProcess, "/proc/<pid>");
            }
            false
        }
        _ => true,
    });
}

// ---------------------------------------------------------------- Rust

const RUST_APIS: &[(&str, Channel)] = &[
    ("std::panic::Location::caller", Channel::CallStack),
    ("std::backtrace::Backtrace", Channel::CallStack),
    ("std::intrinsics::caller_location", Channel::CallStack),
    ("backtrace", Channel::CallStack),
    ("std::thread::current", Channel::ThreadIdentity),
    ("std::thread::Thread::name", Channel::ThreadIdentity),
    ("std::thread::Thread::id", Channel::ThreadIdentity),
    ("std::env::args", Channel::ArgvAndFlags),
    ("std::env::args_os", Channel::ArgvAndFlags),
    ("std::env::current_exe", Channel::ArgvAndFlags),
    ("std::os::unix::process::parent_id", Channel::ParentProcess),
    ("libc::getppid", Channel::ParentProcess),
    ("nix::unistd::getppid", Channel::ParentProcess),
    ("nix::unistd::Pid::parent", Channel::ParentProcess),
    ("sysinfo", Channel::ParentProcess),
    ("procfs", Channel::ParentProcess),
    ("std::env::vars", Channel::RunnerEnvironment),
    ("std::env::vars_os", Channel::RunnerEnvironment),
    ("std::panic::set_hook", Channel::RunnerObjects),
    ("std::panic::take_hook", Channel::RunnerObjects),
];

struct RustNames {
    /// Local name -> full path (`L` -> `std::panic::Location`).
    aliases: HashMap<String, String>,
    /// `use x::*;` prefixes.
    globs: Vec<String>,
    /// `const`, `static` and `let` names bound to a string literal.
    strings: HashMap<String, String>,
}

impl RustNames {
    fn collect(file: &ParsedFile<'_>) -> RustNames {
        let mut names = RustNames {
            aliases: HashMap::new(),
            globs: Vec::new(),
            strings: HashMap::new(),
        };
        walk(file.root(), |n| {
            if matches!(n.kind(), "const_item" | "static_item" | "let_declaration") {
                let name = n
                    .child_by_field_name("name")
                    .or_else(|| n.child_by_field_name("pattern"));
                if let (Some(name), Some(value)) = (
                    name,
                    n.child_by_field_name("value")
                        .and_then(|v| string_value(file, v)),
                ) {
                    names.strings.insert(file.text(name).into_owned(), value);
                }
                return true;
            }
            if n.kind() != "use_declaration" {
                return true;
            }
            let Some(argument) = n.child_by_field_name("argument") else {
                return false;
            };
            let mut stack: Vec<(Node<'_>, String)> = vec![(argument, String::new())];
            while let Some((node, prefix)) = stack.pop() {
                let join = |p: &str| {
                    if prefix.is_empty() {
                        p.to_string()
                    } else {
                        format!("{prefix}::{p}")
                    }
                };
                match node.kind() {
                    "scoped_identifier" | "identifier" => {
                        let path = join(&compact_text(file, node));
                        let last = path.rsplit("::").next().unwrap_or_default().to_string();
                        names.aliases.insert(last, path);
                    }
                    "self" => {
                        let last = prefix.rsplit("::").next().unwrap_or_default().to_string();
                        names.aliases.insert(last, prefix.clone());
                    }
                    "use_as_clause" => {
                        if let (Some(path), Some(alias)) = (
                            node.child_by_field_name("path"),
                            node.child_by_field_name("alias"),
                        ) {
                            let path = join(&compact_text(file, path));
                            let path = if path.ends_with("::self") {
                                path.trim_end_matches("::self").to_string()
                            } else {
                                path
                            };
                            names.aliases.insert(file.text(alias).into_owned(), path);
                        }
                    }
                    "scoped_use_list" => {
                        let path = node
                            .child_by_field_name("path")
                            .map(|p| join(&compact_text(file, p)))
                            .unwrap_or_else(|| prefix.clone());
                        if let Some(list) = node.child_by_field_name("list") {
                            stack.push((list, path));
                        }
                    }
                    "use_list" => stack.extend(
                        named_children(node)
                            .into_iter()
                            .map(|c| (c, prefix.clone())),
                    ),
                    "use_wildcard" => {
                        let path = compact_text(file, node);
                        names
                            .globs
                            .push(join(path.trim_end_matches("::*").trim_end_matches('*')));
                    }
                    _ => {}
                }
            }
            false
        });
        // Aliases whose path starts with another alias (`use std::thread; use thread::current;`).
        let snapshot = names.aliases.clone();
        for path in names.aliases.values_mut() {
            *path = resolve_rust_path(&snapshot, path, 0);
        }
        names
    }

    /// The full path a written path names.
    fn canonical(&self, written: &str) -> String {
        let written = strip_generics(written.trim_start_matches("::"));
        normalise_std(&resolve_rust_path(&self.aliases, &written, 0))
    }

    /// The catalogued API a bare or written path names (globs tried for a bare name).
    fn api(&self, written: &str) -> Option<(&'static str, Channel)> {
        let canonical = self.canonical(written);
        if let Some(hit) = lookup(RUST_APIS, &canonical, "::") {
            return Some(hit);
        }
        if !written.contains("::") {
            for glob in &self.globs {
                if let Some(hit) = lookup(
                    RUST_APIS,
                    &normalise_std(&format!("{glob}::{written}")),
                    "::",
                ) {
                    return Some(hit);
                }
            }
        }
        None
    }
}

fn resolve_rust_path(aliases: &HashMap<String, String>, path: &str, depth: u8) -> String {
    let (first, rest) = path
        .split_once("::")
        .map_or((path, None), |(f, r)| (f, Some(r)));
    match aliases
        .get(first)
        .filter(|full| depth < 8 && full.as_str() != first)
    {
        Some(full) => {
            let joined = match rest {
                Some(rest) => format!("{full}::{rest}"),
                None => full.clone(),
            };
            resolve_rust_path(aliases, &joined, depth + 1)
        }
        None => path.to_string(),
    }
}

fn strip_generics(path: &str) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    for c in path.chars() {
        match c {
            '<' => depth += 1,
            '>' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out.replace("::::", "::").trim_end_matches("::").to_string()
}

fn normalise_std(path: &str) -> String {
    for root in ["core::", "alloc::"] {
        if let Some(rest) = path.strip_prefix(root) {
            return format!("std::{rest}");
        }
    }
    path.to_string()
}

/// The path-like runs in a macro's tokens (`std::thread::current`, `L::caller`), each with
/// the string literal right after it in parentheses when there is one (`var("CI")`).
fn token_paths(text: &str) -> Vec<(String, Option<String>)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        if chars[i] == '"' {
            // Skip string literals.
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            continue;
        }
        if !(chars[i].is_alphabetic() || chars[i] == '_')
            || (i > 0 && (ident(chars[i - 1]) || chars[i - 1] == '.'))
        {
            i += 1;
            continue;
        }
        let start = i;
        loop {
            while i < chars.len() && ident(chars[i]) {
                i += 1;
            }
            if i + 2 < chars.len()
                && chars[i] == ':'
                && chars[i + 1] == ':'
                && (chars[i + 2].is_alphabetic() || chars[i + 2] == '_')
            {
                i += 2;
                continue;
            }
            break;
        }
        let path: String = chars[start..i].iter().collect();
        let mut literal = None;
        if i + 1 < chars.len() && chars[i] == '(' && chars[i + 1] == '"' {
            let from = i + 2;
            if let Some(len) = chars[from..].iter().position(|c| *c == '"') {
                literal = Some(chars[from..from + len].iter().collect());
            }
        }
        out.push((path, literal));
    }
    out
}

/// The observation a `cfg` predicate makes: debug assertions, `test`, a test-only feature.
fn cfg_observation(predicate: &str, features: &BTreeSet<String>) -> Option<(Channel, String)> {
    let tokens: Vec<&str> = predicate
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|t| !t.is_empty())
        .collect();
    if tokens.contains(&"debug_assertions") {
        return Some((Channel::BuildProfile, "cfg:debug_assertions".into()));
    }
    if tokens.contains(&"test") {
        return Some((Channel::BuildProfile, "cfg:test".into()));
    }
    let compact: String = predicate.chars().filter(|c| !c.is_whitespace()).collect();
    let mut rest = compact.as_str();
    while let Some(at) = rest.find("feature=\"") {
        rest = &rest[at + "feature=\"".len()..];
        let name = rest.split('"').next().unwrap_or_default();
        if features.contains(name) {
            return Some((Channel::TestOnlyFeature, format!("feature:{name}")));
        }
    }
    None
}

/// Whether a `debug_assert*!` argument does something (an assignment, a block, a mutating call):
/// then what the code does depends on the build profile.
fn has_side_effect(tokens: &str) -> bool {
    let chars: Vec<char> = tokens.chars().collect();
    let assignment = chars.iter().enumerate().any(|(i, c)| {
        *c == '='
            && !matches!(chars.get(i.wrapping_sub(1)), Some('=' | '!' | '<' | '>'))
            && !matches!(chars.get(i + 1), Some('=' | '>'))
    });
    assignment
        || tokens.contains('{')
        || [
            ".store(",
            ".fetch_",
            ".set(",
            ".insert(",
            ".push(",
            ".swap(",
            ".replace(",
        ]
        .iter()
        .any(|m| tokens.contains(m))
}

/// Whether a Rust observation is a program's own business in its `fn main`: its arguments and
/// its panic hook (a CLI reads `std::env::args()` and installs a hook there).
fn rust_entry_point(file: &ParsedFile<'_>, n: Node<'_>, channel: Channel, api: &str) -> bool {
    let entry_business = channel == Channel::ArgvAndFlags
        || matches!(api, "std::panic::set_hook" | "std::panic::take_hook");
    entry_business
        && ancestor(n, |a| {
            a.kind() == "function_item"
                && a.child_by_field_name("name")
                    .is_some_and(|x| file.text(x) == "main")
        })
        .is_some()
}

fn rust(file: &ParsedFile<'_>, context: &Context, out: &mut Vec<Observation>) {
    let names = RustNames::collect(file);
    walk(file.root(), |n| {
        match n.kind() {
            // Test code (a `#[cfg(test)]` module, a test function) is not descended into.
            "mod_item" if rust_attributes(file, n).iter().any(|a| is_cfg_test(a)) => false,
            "function_item" if is_rust_test_fn(file, n) => false,
            "use_declaration" => false,
            "extern_crate_declaration" => {
                if n.child_by_field_name("name")
                    .is_some_and(|c| file.text(c) == "test")
                {
                    push(out, file, n, Channel::RunnerObjects, "extern crate test");
                }
                false
            }
            "attribute_item" | "inner_attribute_item" => {
                let Some(attr) = n.named_child(0) else {
                    return false;
                };
                let text = compact_text(file, attr);
                let name = text.split(['(', '=']).next().unwrap_or_default();
                if name == "cfg" || name == "cfg_attr" {
                    // A plain `#[cfg(test)]` on a module or an import is the test module itself.
                    let mut item = n.next_named_sibling();
                    while let Some(i) = item.filter(|i| {
                        matches!(
                            i.kind(),
                            "attribute_item" | "line_comment" | "block_comment"
                        )
                    }) {
                        item = i.next_named_sibling();
                    }
                    let test_module = text == "cfg(test)"
                        && item.is_some_and(|s| matches!(s.kind(), "mod_item" | "use_declaration"));
                    if !test_module {
                        let predicate = if name == "cfg_attr" {
                            text.split(',').next().unwrap_or_default().to_string()
                        } else {
                            text.clone()
                        };
                        if let Some((channel, api)) =
                            cfg_observation(&predicate, &context.test_only_features)
                        {
                            push(out, file, n, channel, api);
                        }
                    }
                }
                false
            }
            "macro_invocation" => {
                let macro_name = n
                    .child_by_field_name("macro")
                    .map(|m| compact_text(file, m))
                    .unwrap_or_default();
                let last = macro_name.rsplit("::").next().unwrap_or_default();
                let tokens = named_children(n)
                    .into_iter()
                    .find(|c| c.kind() == "token_tree")
                    .map(|t| compact_text(file, t))
                    .unwrap_or_default();
                match last {
                    "cfg" => {
                        if let Some((channel, api)) =
                            cfg_observation(&tokens, &context.test_only_features)
                        {
                            push(out, file, n, channel, api);
                        }
                        return false;
                    }
                    "env" | "option_env" => {
                        let key = named_children(n)
                            .into_iter()
                            .find(|c| c.kind() == "token_tree")
                            .and_then(|t| t.named_child(0))
                            .and_then(|k| string_value(file, k));
                        if let Some(key) = key.filter(|k| compile_time_test_variable(k)) {
                            let channel =
                                runner_variable(&key).unwrap_or(Channel::RunnerEnvironment);
                            push(out, file, n, channel, format!("env:{key}"));
                        }
                        return false;
                    }
                    m if m.starts_with("debug_assert") && has_side_effect(&tokens) => {
                        push(
                            out,
                            file,
                            n,
                            Channel::BuildProfile,
                            "debug_assert:side-effect",
                        );
                    }
                    _ => {}
                }
                // Macro arguments are token trees, not expressions: their paths are read as tokens.
                for (path, literal) in token_paths(&tokens) {
                    let canonical = names.canonical(&path);
                    if matches!(canonical.as_str(), "std::env::var" | "std::env::var_os") {
                        if let Some((key, channel)) = literal
                            .as_ref()
                            .and_then(|k| runner_variable(k).map(|c| (k, c)))
                        {
                            push(out, file, n, channel, format!("env:{key}"));
                        }
                    } else if let Some((api, channel)) = names
                        .api(&path)
                        .filter(|(a, c)| !rust_entry_point(file, n, *c, a))
                    {
                        push(out, file, n, channel, api);
                    }
                }
                false
            }
            "call_expression" => {
                let Some(function) = n.child_by_field_name("function") else {
                    return true;
                };
                if matches!(function.kind(), "scoped_identifier" | "identifier") {
                    let canonical = names.canonical(&compact_text(file, function));
                    if matches!(canonical.as_str(), "std::env::var" | "std::env::var_os") {
                        let key = n
                            .child_by_field_name("arguments")
                            .and_then(|a| a.named_child(0))
                            .and_then(|k| rust_string(file, &names, k));
                        if let Some((key, channel)) = key
                            .as_ref()
                            .and_then(|k| runner_variable(k).map(|c| (k, c)))
                        {
                            push(out, file, n, channel, format!("env:{key}"));
                        }
                    }
                }
                true
            }
            "scoped_identifier" => {
                if let Some((api, channel)) = names
                    .api(&compact_text(file, n))
                    .filter(|(a, c)| !rust_entry_point(file, n, *c, a))
                {
                    push(out, file, n, channel, api);
                }
                false
            }
            "identifier" if rust_value_position(n) => {
                let name = file.text(n);
                if names.aliases.contains_key(name.as_ref()) || !names.globs.is_empty() {
                    if let Some((api, channel)) = names
                        .api(&name)
                        .filter(|(a, c)| !rust_entry_point(file, n, *c, a))
                    {
                        push(out, file, n, channel, api);
                    }
                }
                false
            }
            "string_literal" | "raw_string_literal" => {
                if proc_path(&string_content(file, n)) {
                    push(out, file, n, Channel::ParentProcess, "/proc/<pid>");
                }
                false
            }
            _ => true,
        }
    });
}

/// A Rust string argument: a literal, or a `const`/`static`/`let` of one in the same file.
fn rust_string(file: &ParsedFile<'_>, names: &RustNames, node: Node<'_>) -> Option<String> {
    if let Some(v) = string_value(file, node) {
        return Some(v);
    }
    (node.kind() == "identifier")
        .then(|| names.strings.get(file.text(node).as_ref()).cloned())
        .flatten()
}

fn rust_value_position(n: Node<'_>) -> bool {
    let Some(parent) = n.parent() else {
        return true;
    };
    !matches!(
        parent.kind(),
        "function_item"
            | "let_declaration"
            | "parameter"
            | "closure_parameters"
            | "struct_item"
            | "enum_item"
            | "field_declaration"
            | "mod_item"
            | "const_item"
            | "static_item"
            | "type_item"
            | "macro_definition"
            | "tuple_pattern"
            | "field_pattern"
            | "struct_pattern"
            | "function_signature_item"
            | "trait_item"
            | "enum_variant"
    )
}

/// The cargo features of a crate (its Cargo.toml) that only test builds enable: those a
/// dev-dependency of the crate on itself turns on, with what they enable in turn, minus what
/// the `default` feature enables.
pub fn test_only_features(cargo_toml: &str) -> BTreeSet<String> {
    let Ok(table) = toml::from_str::<toml::Table>(cargo_toml) else {
        return BTreeSet::new();
    };
    let package = table
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(|n| n.as_str())
        .unwrap_or_default()
        .to_string();
    let mut dev_tables: Vec<&toml::Table> = ["dev-dependencies", "dev_dependencies"]
        .iter()
        .filter_map(|k| table.get(*k)?.as_table())
        .collect();
    if let Some(targets) = table.get("target").and_then(|t| t.as_table()) {
        for target in targets.values() {
            dev_tables.extend(
                ["dev-dependencies", "dev_dependencies"]
                    .iter()
                    .filter_map(|k| target.get(*k)?.as_table()),
            );
        }
    }
    let mut enabled: Vec<String> = Vec::new();
    for deps in dev_tables {
        for (key, value) in deps {
            let Some(spec) = value.as_table() else {
                continue;
            };
            let name = spec.get("package").and_then(|p| p.as_str()).unwrap_or(key);
            let path_is_self = spec
                .get("path")
                .and_then(|p| p.as_str())
                .is_some_and(|p| matches!(p.trim_end_matches('/'), "." | ""));
            if name == package || path_is_self {
                enabled.extend(
                    spec.get("features")
                        .and_then(|f| f.as_array())
                        .into_iter()
                        .flatten()
                        .filter_map(|f| f.as_str().map(str::to_string)),
                );
            }
        }
    }
    let features = table.get("features").and_then(|f| f.as_table());
    let closure = |start: Vec<String>| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = start;
        while let Some(f) = todo.pop() {
            if f.contains('/') || f.starts_with("dep:") || !seen.insert(f.clone()) {
                continue;
            }
            if let Some(next) = features.and_then(|t| t.get(&f)).and_then(|v| v.as_array()) {
                todo.extend(next.iter().filter_map(|v| v.as_str().map(str::to_string)));
            }
        }
        seen
    };
    let defaults = closure(vec!["default".to_string()]);
    closure(enabled)
        .into_iter()
        .filter(|f| !defaults.contains(f) && f != "default")
        .collect()
}

// ---------------------------------------------------------------- Go

const GO_APIS: &[(&str, Channel)] = &[
    ("runtime.Caller", Channel::CallStack),
    ("runtime.Callers", Channel::CallStack),
    ("runtime.CallersFrames", Channel::CallStack),
    ("runtime.FuncForPC", Channel::CallStack),
    ("runtime.Stack", Channel::CallStack),
    ("runtime/debug.Stack", Channel::CallStack),
    ("runtime/pprof.Lookup", Channel::CallStack),
    ("os.Args", Channel::ArgvAndFlags),
    ("os.Executable", Channel::ArgvAndFlags),
    ("flag", Channel::ArgvAndFlags),
    ("testing.Testing", Channel::ArgvAndFlags),
    ("os.Getppid", Channel::ParentProcess),
    ("syscall.Getppid", Channel::ParentProcess),
    ("golang.org/x/sys/unix.Getppid", Channel::ParentProcess),
    ("os.Environ", Channel::RunnerEnvironment),
    ("syscall.Environ", Channel::RunnerEnvironment),
];

fn go(file: &ParsedFile<'_>, out: &mut Vec<Observation>) {
    // Local package name -> import path; dot-imported paths.
    let mut packages: HashMap<String, String> = HashMap::new();
    let mut dotted: Vec<String> = Vec::new();
    let mut main_package = false;
    walk(file.root(), |n| match n.kind() {
        "package_clause" => {
            main_package = named_children(n)
                .first()
                .is_some_and(|p| file.text(*p) == "main");
            false
        }
        "import_spec" => {
            let Some(path) = n
                .child_by_field_name("path")
                .and_then(|p| string_value(file, p))
            else {
                return false;
            };
            if path == "testing" {
                push(out, file, n, Channel::RunnerObjects, "import:testing");
            }
            match n
                .child_by_field_name("name")
                .map(|x| file.text(x).into_owned())
            {
                Some(name) if name == "." => dotted.push(path),
                Some(name) if name == "_" => {}
                Some(name) => {
                    packages.insert(name, path);
                }
                None => {
                    let last = path.rsplit('/').next().unwrap_or_default().to_string();
                    packages.insert(last, path);
                }
            }
            false
        }
        "source_file" | "import_declaration" | "import_spec_list" => true,
        _ => false,
    });
    let in_main = |n: Node<'_>| {
        main_package
            && ancestor(n, |a| {
                a.kind() == "function_declaration"
                    && a.child_by_field_name("name")
                        .is_some_and(|x| file.text(x) == "main")
            })
            .is_some()
    };
    let api_of = |path: &str| lookup(GO_APIS, path, ".");
    walk(file.root(), |n| match n.kind() {
        "import_declaration" | "package_clause" => false,
        "call_expression" => {
            let Some(callee) = n.child_by_field_name("function") else {
                return true;
            };
            let canonical = match callee.kind() {
                "selector_expression" => go_selector(file, &packages, callee),
                "identifier" => {
                    let name = file.text(callee);
                    dotted
                        .iter()
                        .map(|p| format!("{p}.{name}"))
                        .find(|c| api_of(c).is_some() || c == "os.Getenv" || c == "os.LookupEnv")
                }
                _ => None,
            };
            if let Some(c) = canonical {
                if matches!(c.as_str(), "os.Getenv" | "os.LookupEnv" | "syscall.Getenv") {
                    let key = n
                        .child_by_field_name("arguments")
                        .and_then(|a| a.named_child(0))
                        .and_then(|k| string_value(file, k));
                    if let Some((key, channel)) = key
                        .as_ref()
                        .and_then(|k| runner_variable(k).map(|ch| (k, ch)))
                    {
                        push(out, file, n, channel, format!("env:{key}"));
                    }
                } else if callee.kind() == "identifier" {
                    if let Some((api, channel)) =
                        api_of(&c).filter(|(_, ch)| !(*ch == Channel::ArgvAndFlags && in_main(n)))
                    {
                        push(out, file, n, channel, api);
                    }
                }
            }
            true
        }
        "selector_expression" => {
            let Some(c) = go_selector(file, &packages, n) else {
                return true;
            };
            match api_of(&c) {
                Some((_, Channel::ArgvAndFlags)) if in_main(n) => false,
                Some((api, channel)) => {
                    push(out, file, n, channel, api);
                    false
                }
                None => true,
            }
        }
        "interpreted_string_literal" | "raw_string_literal" => {
            if proc_path(&string_content(file, n)) {
                push(out, file, n, Channel::ParentProcess, "/proc/<pid>");
            }
            false
        }
        _ => true,
    });
}

fn go_selector(
    file: &ParsedFile<'_>,
    packages: &HashMap<String, String>,
    n: Node<'_>,
) -> Option<String> {
    let operand = n
        .child_by_field_name("operand")
        .filter(|o| o.kind() == "identifier")?;
    let path = packages.get(file.text(operand).as_ref())?;
    Some(format!(
        "{path}.{}",
        file.text(n.child_by_field_name("field")?)
    ))
}

// ---------------------------------------------------------------- JavaScript / TypeScript

const JS_APIS: &[(&str, Channel)] = &[
    ("Error.captureStackTrace", Channel::CallStack),
    ("Error.prepareStackTrace", Channel::CallStack),
    ("util.getCallSite", Channel::CallStack),
    ("util.getCallSites", Channel::CallStack),
    ("worker_threads.isMainThread", Channel::ThreadIdentity),
    ("worker_threads.threadId", Channel::ThreadIdentity),
    ("worker_threads.workerData", Channel::ThreadIdentity),
    ("process.argv", Channel::ArgvAndFlags),
    ("process.argv0", Channel::ArgvAndFlags),
    ("process.execArgv", Channel::ArgvAndFlags),
    ("process.ppid", Channel::ParentProcess),
    ("process.channel", Channel::ParentProcess),
    ("process.connected", Channel::ParentProcess),
    ("process._getActiveHandles", Channel::RunnerObjects),
    ("process._getActiveRequests", Channel::RunnerObjects),
    ("process.getActiveResourcesInfo", Channel::RunnerObjects),
];

/// The module a JS/TS import source names: `node:` dropped, except `node:test` (a bare `test` is
/// an npm package).
fn js_module(source: &str) -> String {
    if source == "node:test" {
        return source.to_string();
    }
    source.strip_prefix("node:").unwrap_or(source).to_string()
}

struct JsNames {
    aliases: HashMap<String, String>,
}

impl JsNames {
    fn collect(file: &ParsedFile<'_>) -> JsNames {
        let mut names = JsNames {
            aliases: HashMap::new(),
        };
        walk(file.root(), |n| {
            match n.kind() {
                "import_statement" => {
                    let Some(source) = n
                        .child_by_field_name("source")
                        .and_then(|s| string_value(file, s))
                    else {
                        return false;
                    };
                    let module = js_module(&source);
                    walk(n, |c| {
                        match c.kind() {
                            "import_clause" => {
                                for part in named_children(c) {
                                    if part.kind() == "identifier" {
                                        names
                                            .aliases
                                            .insert(file.text(part).into_owned(), module.clone());
                                    }
                                }
                            }
                            "namespace_import" => {
                                if let Some(id) = named_children(c)
                                    .into_iter()
                                    .find(|x| x.kind() == "identifier")
                                {
                                    names
                                        .aliases
                                        .insert(file.text(id).into_owned(), module.clone());
                                }
                            }
                            "import_specifier" => {
                                if let Some(name) = c.child_by_field_name("name") {
                                    let local = c.child_by_field_name("alias").unwrap_or(name);
                                    let imported = string_value(file, name)
                                        .unwrap_or_else(|| file.text(name).into_owned());
                                    let path = if imported == "default" {
                                        module.clone()
                                    } else {
                                        format!("{module}.{imported}")
                                    };
                                    names.aliases.insert(file.text(local).into_owned(), path);
                                }
                                return false;
                            }
                            _ => {}
                        }
                        true
                    });
                    return false;
                }
                "variable_declarator" | "assignment_expression" => {
                    let (name, value) = match n.kind() {
                        "variable_declarator" => (
                            n.child_by_field_name("name"),
                            n.child_by_field_name("value"),
                        ),
                        _ => (
                            n.child_by_field_name("left"),
                            n.child_by_field_name("right"),
                        ),
                    };
                    if let (Some(name), Some(value)) = (name, value) {
                        // A name bound to an observed value is reported where it is bound, once.
                        let observed =
                            |p: &String| name.kind() == "identifier" && js_observation(p).is_some();
                        if let Some(path) = names.canonical(file, value).filter(|p| !observed(p)) {
                            names.bind(file, name, path);
                        }
                    }
                }
                "catch_clause" => {
                    if let Some(p) = n
                        .child_by_field_name("parameter")
                        .filter(|p| p.kind() == "identifier")
                    {
                        names
                            .aliases
                            .insert(file.text(p).into_owned(), "Error()".into());
                    }
                }
                _ => {}
            }
            true
        });
        names
    }

    /// Binds a declarator's name (an identifier or a destructuring pattern) to `path`.
    fn bind(&mut self, file: &ParsedFile<'_>, pattern: Node<'_>, path: String) {
        let mut stack = vec![(pattern, path)];
        while let Some((p, path)) = stack.pop() {
            match p.kind() {
                "identifier" => {
                    let name = file.text(p).into_owned();
                    if name != path {
                        self.aliases.insert(name, path);
                    }
                }
                "object_pattern" => {
                    for child in named_children(p) {
                        match child.kind() {
                            "shorthand_property_identifier_pattern" => {
                                let name = file.text(child).into_owned();
                                self.aliases.insert(name.clone(), format!("{path}.{name}"));
                            }
                            "object_assignment_pattern" => {
                                if let Some(left) = child.child_by_field_name("left") {
                                    if left.kind() == "shorthand_property_identifier_pattern" {
                                        let name = file.text(left).into_owned();
                                        self.aliases.insert(name.clone(), format!("{path}.{name}"));
                                    }
                                }
                            }
                            "pair_pattern" => {
                                if let (Some(key), Some(value)) = (
                                    child.child_by_field_name("key"),
                                    child.child_by_field_name("value"),
                                ) {
                                    let key = string_value(file, key)
                                        .unwrap_or_else(|| file.text(key).into_owned());
                                    let value = if value.kind() == "assignment_pattern" {
                                        value.child_by_field_name("left").unwrap_or(value)
                                    } else {
                                        value
                                    };
                                    stack.push((value, format!("{path}.{key}")));
                                }
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// The dotted path an expression names (`process.env.CI`, `Error().stack`, `async_hooks`).
    fn canonical(&self, file: &ParsedFile<'_>, node: Node<'_>) -> Option<String> {
        self.canonical_at(file, node, 0)
    }

    fn canonical_at(&self, file: &ParsedFile<'_>, node: Node<'_>, depth: usize) -> Option<String> {
        if depth > MAX_RESOLVE_DEPTH {
            return None;
        }
        let d = depth + 1;
        match node.kind() {
            "identifier" => {
                let name = file.text(node);
                Some(
                    self.aliases
                        .get(name.as_ref())
                        .cloned()
                        .unwrap_or_else(|| name.into_owned()),
                )
            }
            "import" => Some("import".into()),
            "meta_property" => Some(compact_text(file, node)),
            "member_expression" => {
                let object = self.canonical_at(file, node.child_by_field_name("object")?, d)?;
                let property = file
                    .text(node.child_by_field_name("property")?)
                    .into_owned();
                Some(js_join(&object, &property))
            }
            "subscript_expression" => {
                let object = self.canonical_at(file, node.child_by_field_name("object")?, d)?;
                let index = string_value(file, node.child_by_field_name("index")?)?;
                Some(js_join(&object, &index))
            }
            "parenthesized_expression"
            | "await_expression"
            | "non_null_expression"
            | "as_expression" => self.canonical_at(file, node.named_child(0)?, d),
            "call_expression" => {
                let callee = node.child_by_field_name("function")?;
                let first = node
                    .child_by_field_name("arguments")
                    .and_then(|a| a.named_child(0));
                if matches!(callee.kind(), "identifier" | "import")
                    && matches!(&*file.text(callee), "require" | "import")
                {
                    return Some(js_module(&string_value(file, first?)?));
                }
                let name = self.canonical_at(file, callee, d)?;
                is_error_constructor(&name).then(|| "Error()".to_string())
            }
            "new_expression" => {
                let name = self.canonical_at(file, node.child_by_field_name("constructor")?, d)?;
                is_error_constructor(&name).then(|| "Error()".to_string())
            }
            _ => None,
        }
    }
}

fn js_join(object: &str, property: &str) -> String {
    match object {
        "globalThis" | "global" | "window" | "self" => property.to_string(),
        _ => format!("{object}.{property}"),
    }
}

fn is_error_constructor(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    last == "Error"
        || (last.ends_with("Error") && last.starts_with(|c: char| c.is_ascii_uppercase()))
}

/// Whether a value only reaches output: it is (inside a template or `+`) an argument of a
/// `console.*` call or of a logging method (`log`, `error`, `warn`, `info`, `debug`, `trace`).
fn js_output_only(file: &ParsedFile<'_>, n: Node<'_>) -> bool {
    let mut current = n.parent();
    while let Some(p) = current {
        match p.kind() {
            "template_substitution"
            | "template_string"
            | "binary_expression"
            | "parenthesized_expression" => current = p.parent(),
            "arguments" => {
                let callee = p
                    .parent()
                    .and_then(|c| c.child_by_field_name("function"))
                    .map(|f| compact_text(file, f))
                    .unwrap_or_default();
                let last = callee.rsplit('.').next().unwrap_or_default();
                return callee.starts_with("console.")
                    || matches!(
                        last,
                        "log" | "error" | "warn" | "info" | "debug" | "trace" | "fatal"
                    );
            }
            _ => return false,
        }
    }
    false
}

fn js_env_observation(path: &str) -> Option<(Channel, String)> {
    if let Some(key) = path.strip_prefix("process.env.") {
        let key = key.split('.').next().unwrap_or_default();
        return runner_variable(key).map(|c| (c, format!("env:{key}")));
    }
    if path == "import.meta.vitest" || path.starts_with("import.meta.vitest.") {
        return Some((Channel::RunnerObjects, "import.meta.vitest".into()));
    }
    if let Some(key) = path.strip_prefix("import.meta.env.") {
        let key = key.split('.').next().unwrap_or_default();
        if matches!(key, "MODE" | "DEV" | "PROD" | "SSR") {
            return Some((Channel::BuildProfile, format!("import.meta.env.{key}")));
        }
        return runner_variable(key).map(|c| (c, format!("env:{key}")));
    }
    None
}

/// The observation a resolved JS/TS path makes, if any.
fn js_observation(path: &str) -> Option<(Channel, String)> {
    if let Some(hit) = js_env_observation(path) {
        return Some(hit);
    }
    if path == "Error().stack" || path.starts_with("Error().stack.") {
        return Some((Channel::CallStack, "Error().stack".into()));
    }
    lookup(JS_APIS, path, ".").map(|(api, channel)| (channel, api.to_string()))
}

fn js(file: &ParsedFile<'_>, out: &mut Vec<Observation>) {
    let names = JsNames::collect(file);
    let observe_path = |out: &mut Vec<Observation>, n: Node<'_>, path: &str| -> bool {
        let Some((channel, api)) = js_observation(path) else {
            return false;
        };
        // A stack that only reaches the console or a logger is output, not an observation.
        if !(api == "Error().stack" && js_output_only(file, n)) {
            push(out, file, n, channel, api);
        }
        true
    };
    walk(file.root(), |n| match n.kind() {
        "import_statement" => {
            if let Some(module) = n
                .child_by_field_name("source")
                .and_then(|s| string_value(file, s))
                .map(|s| js_module(&s))
            {
                if js_runner_module(&module) {
                    push(
                        out,
                        file,
                        n,
                        Channel::RunnerObjects,
                        format!("import:{module}"),
                    );
                }
            }
            false
        }
        "call_expression" => {
            let callee = n.child_by_field_name("function");
            let first = n
                .child_by_field_name("arguments")
                .and_then(|a| a.named_child(0));
            if let Some(callee) = callee {
                if matches!(callee.kind(), "identifier" | "import")
                    && matches!(&*file.text(callee), "require" | "import")
                {
                    if let Some(module) = first
                        .and_then(|f| string_value(file, f))
                        .map(|s| js_module(&s))
                    {
                        if js_runner_module(&module) {
                            push(
                                out,
                                file,
                                n,
                                Channel::RunnerObjects,
                                format!("import:{module}"),
                            );
                        }
                    }
                    return false;
                }
                let name = names.canonical(file, callee).unwrap_or_default();
                if matches!(
                    name.as_str(),
                    "Object.keys"
                        | "Object.entries"
                        | "Object.values"
                        | "Object.getOwnPropertyNames"
                        | "Reflect.ownKeys"
                ) && first.and_then(|f| names.canonical(file, f)).as_deref()
                    == Some("process.env")
                {
                    push(
                        out,
                        file,
                        n,
                        Channel::RunnerEnvironment,
                        "process.env:enumerated",
                    );
                }
            }
            true
        }
        "for_in_statement" => {
            if n.child_by_field_name("right")
                .and_then(|r| names.canonical(file, r))
                .as_deref()
                == Some("process.env")
            {
                push(
                    out,
                    file,
                    n,
                    Channel::RunnerEnvironment,
                    "process.env:enumerated",
                );
            }
            true
        }
        "member_expression" | "subscript_expression" => match names.canonical(file, n) {
            Some(path) if observe_path(out, n, &path) => false,
            _ => true,
        },
        "identifier" | "shorthand_property_identifier" if js_value_position(n) => {
            if let Some(path) = names.aliases.get(file.text(n).as_ref()) {
                observe_path(out, n, path);
            }
            false
        }
        "string" | "template_string" => {
            if proc_path(&string_content(file, n)) {
                push(out, file, n, Channel::ParentProcess, "/proc/<pid>");
            }
            n.kind() == "template_string"
        }
        _ => true,
    });
}

fn js_value_position(n: Node<'_>) -> bool {
    let Some(parent) = n.parent() else {
        return true;
    };
    let is_field = |field: &str| {
        parent
            .child_by_field_name(field)
            .is_some_and(|c| c.id() == n.id())
    };
    !match parent.kind() {
        "variable_declarator" => is_field("name"),
        "assignment_expression" => is_field("left"),
        "function_declaration"
        | "function_expression"
        | "class_declaration"
        | "method_definition" => is_field("name"),
        "assignment_pattern" => is_field("left"),
        "formal_parameters" | "catch_clause" | "import_specifier" | "namespace_import"
        | "import_clause" | "export_specifier" | "required_parameter" | "optional_parameter"
        | "pair_pattern" | "object_pattern" | "array_pattern" | "rest_pattern" => true,
        _ => false,
    }
}
