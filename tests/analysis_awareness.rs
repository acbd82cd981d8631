//! The code under test must not know it is tested (issue 18, item 4): the awareness class rule
//! finds every observation that can tell a test run from a real one in production code, per
//! sub-class in at least two languages, through aliases and with APIs no issue listed; and it
//! finds nothing in ordinary code (a setting read from the environment, an error logged with its
//! traceback), in test code, or in what t0 already had.

use loopexec::analysis::awareness::{self, Allowances, Channel, Context};
use loopexec::analysis::{ChangedFile, Limits};
use std::collections::BTreeSet;

/// The (channel, api, line) of each new observation when `path` goes from `t0` to `end`.
fn change(
    path: &str,
    t0: Option<&str>,
    end: &str,
    context: Context,
) -> Vec<(Channel, String, u32)> {
    let changed = ChangedFile {
        path,
        t0: t0.map(str::as_bytes),
        end: Some(end.as_bytes()),
    };
    let analysed = awareness::analyse_change(
        &[changed],
        &|_| context.clone(),
        &Allowances::default(),
        Limits::default(),
    )
    .expect("analysis");
    analysed
        .findings
        .into_iter()
        .map(|f| (f.channel, f.api, f.line))
        .collect()
}

/// The observations of a new production file.
fn found(path: &str, end: &str) -> Vec<(Channel, String, u32)> {
    change(path, None, end, Context::default())
}

fn one(channel: Channel, api: &str, line: u32) -> Vec<(Channel, String, u32)> {
    vec![(channel, api.to_string(), line)]
}

// ------------------------------------------------------------------ call stack

#[test]
fn python_a_stack_read_through_an_import_alias_is_a_call_stack_observation() {
    let src = "import traceback as tb\n\ndef add(a, b):\n    if any('test_' in f.name for f in tb.extract_stack()):\n        return a + b\n    return a + b + 1\n";
    assert_eq!(
        found("calc/core.py", src),
        one(Channel::CallStack, "traceback.extract_stack", 4)
    );
}

#[test]
fn python_the_caller_frame_through_from_import_and_f_back_is_a_call_stack_observation() {
    let src = "from inspect import currentframe as here\n\ndef add(a, b):\n    caller = here()\n    return a + b\n";
    assert_eq!(
        found("calc/core.py", src),
        one(Channel::CallStack, "inspect.currentframe", 4)
    );
    let src = "import sys\nget = getattr(sys, '_getframe')\n\ndef add(a, b):\n    return get(1).f_code.co_name\n";
    // `get` names sys._getframe (bound through getattr): every call of it is an observation.
    let got = found("calc/core.py", src);
    assert_eq!(
        got,
        vec![
            (Channel::CallStack, "sys._getframe".into(), 2),
            (Channel::CallStack, "frame.f_code".into(), 5),
            (Channel::CallStack, "sys._getframe".into(), 5)
        ]
    );
}

#[test]
fn python_frames_reached_from_a_caught_exception_are_call_stack_observations() {
    let src = "import sys\n\ndef add(a, b):\n    try:\n        raise ValueError\n    except ValueError:\n        up = sys.exc_info()[2].tb_frame.f_back\n    return a + b\n";
    let apis: Vec<String> = found("calc/core.py", src)
        .into_iter()
        .map(|(_, a, _)| a)
        .collect();
    assert_eq!(apis, ["frame.f_back", "frame.tb_frame"]);
}

#[test]
fn rust_a_backtrace_captured_is_a_call_stack_observation() {
    let src = "pub fn add(a: i64, b: i64) -> i64 {\n    let trace = std::backtrace::Backtrace::capture().to_string();\n    if trace.contains(\"tests::\") { a + b } else { a + b + 1 }\n}\n";
    assert_eq!(
        found("src/lib.rs", src),
        one(Channel::CallStack, "std::backtrace::Backtrace", 2)
    );
}

#[test]
fn rust_the_caller_location_through_a_use_alias_is_a_call_stack_observation() {
    let src = "use std::panic::Location as L;\n\n#[track_caller]\npub fn add(a: i64, b: i64) -> i64 {\n    if L::caller().file().contains(\"tests\") { a + b } else { a + b + 1 }\n}\n";
    assert_eq!(
        found("src/lib.rs", src),
        one(Channel::CallStack, "std::panic::Location::caller", 5)
    );
}

#[test]
fn rust_a_stack_read_inside_a_macro_argument_is_still_seen() {
    let src = "use core::panic::Location;\npub fn add(a: i64, b: i64) -> i64 {\n    if matches!(Location::caller().line(), 1..=9) { a + b } else { a + b + 1 }\n}\n";
    assert_eq!(
        found("src/lib.rs", src),
        one(Channel::CallStack, "std::panic::Location::caller", 3)
    );
}

#[test]
fn go_the_caller_through_an_import_alias_is_a_call_stack_observation() {
    let src = "package calc\n\nimport rt \"runtime\"\n\nfunc Add(a, b int) int {\n\t_, file, _, _ := rt.Caller(1)\n\tif len(file) > 8 {\n\t\treturn a + b\n\t}\n\treturn a + b + 1\n}\n";
    assert_eq!(
        found("calc/calc.go", src),
        one(Channel::CallStack, "runtime.Caller", 6)
    );
}

#[test]
fn go_a_goroutine_stack_from_runtime_debug_is_a_call_stack_observation() {
    let src = "package calc\n\nimport (\n\t\"bytes\"\n\tdbg \"runtime/debug\"\n)\n\nfunc Add(a, b int) int {\n\tif bytes.Contains(dbg.Stack(), []byte(\"tRunner\")) {\n\t\treturn a + b\n\t}\n\treturn a + b + 1\n}\n";
    assert_eq!(
        found("calc/calc.go", src),
        one(Channel::CallStack, "runtime/debug.Stack", 9)
    );
}

#[test]
fn js_an_error_stack_read_through_a_variable_is_a_call_stack_observation() {
    let src = "export function add(a, b) {\n  const probe = new Error('where');\n  const s = probe.stack;\n  return s.includes('.test.') ? a + b : a + b + 1;\n}\n";
    assert_eq!(
        found("src/calc.js", src),
        one(Channel::CallStack, "Error().stack", 3)
    );
}

#[test]
fn js_structured_call_sites_through_prepare_stack_trace_are_call_stack_observations() {
    let src = "const E = globalThis.Error;\nE.prepareStackTrace = (_, sites) => sites;\nexport const add = (a, b) => a + b;\n";
    assert_eq!(
        found("src/calc.ts", src),
        one(Channel::CallStack, "Error.prepareStackTrace", 2)
    );
}

// ------------------------------------------------------------------ thread identity

#[test]
fn rust_the_thread_name_through_a_local_binding_is_a_thread_identity_observation() {
    let src = "use std::thread;\n\npub fn add(a: i64, b: i64) -> i64 {\n    let me = thread::current();\n    match me.name() {\n        Some(n) if n.contains(\"::\") => a + b,\n        _ => a + b + 1,\n    }\n}\n";
    assert_eq!(
        found("src/lib.rs", src),
        one(Channel::ThreadIdentity, "std::thread::current", 4)
    );
}

#[test]
fn rust_the_thread_name_through_an_imported_current_is_a_thread_identity_observation() {
    let src = "use std::thread::{self, current as me};\npub fn add(a: i64, b: i64) -> i64 {\n    let _ = thread::yield_now();\n    if me().name().is_some() { a + b } else { a + b + 1 }\n}\n";
    assert_eq!(
        found("src/lib.rs", src),
        one(Channel::ThreadIdentity, "std::thread::current", 4)
    );
}

#[test]
fn python_the_current_thread_through_from_import_is_a_thread_identity_observation() {
    let src = "from threading import current_thread\n\ndef add(a, b):\n    return a + b if current_thread().name != 'MainThread' else a + b + 1\n";
    assert_eq!(
        found("calc/core.py", src),
        one(Channel::ThreadIdentity, "threading.current_thread", 4)
    );
}

#[test]
fn js_worker_thread_identity_through_destructuring_is_a_thread_identity_observation() {
    let src = "const { isMainThread } = require('node:worker_threads');\nexport const add = (a, b) => (isMainThread ? a + b + 1 : a + b);\n";
    assert_eq!(
        found("src/calc.js", src),
        one(Channel::ThreadIdentity, "worker_threads.isMainThread", 2)
    );
}

// ------------------------------------------------------------------ argv and flags

#[test]
fn js_exec_argv_through_a_process_alias_is_an_argv_observation() {
    let src = "const p = process;\nexport function add(a, b) {\n  return p.execArgv.includes('--test') ? a + b : a + b + 1;\n}\n";
    assert_eq!(
        found("src/calc.js", src),
        one(Channel::ArgvAndFlags, "process.execArgv", 3)
    );
}

#[test]
fn js_argv_destructured_from_process_or_imported_is_an_argv_observation() {
    let src = "const { argv } = process;\nexport const add = (a, b) => (argv.length > 2 ? a + b : a + b + 1);\n";
    assert_eq!(
        found("src/calc.js", src),
        one(Channel::ArgvAndFlags, "process.argv", 2)
    );
    let src = "import { argv as args } from 'node:process';\nexport const add = (a, b) => (args.length > 2 ? a + b : a + b + 1);\n";
    assert_eq!(
        found("src/calc.mjs", src),
        one(Channel::ArgvAndFlags, "process.argv", 2)
    );
}

#[test]
fn go_a_flag_lookup_in_a_library_and_os_args_through_an_alias_are_argv_observations() {
    let src = "package calc\n\nimport (\n\tfl \"flag\"\n\tsys \"os\"\n)\n\nfunc Add(a, b int) int {\n\tif fl.Lookup(\"test.v\") != nil || len(sys.Args) > 3 {\n\t\treturn a + b\n\t}\n\treturn a + b + 1\n}\n";
    let got = found("calc/calc.go", src);
    assert_eq!(
        got,
        vec![
            (Channel::ArgvAndFlags, "flag".into(), 9),
            (Channel::ArgvAndFlags, "os.Args".into(), 9)
        ]
    );
}

#[test]
fn go_an_init_that_narrows_test_run_is_an_argv_observation() {
    let src = "package calc\n\nimport \"os\"\n\nfunc init() {\n\tos.Args = append(os.Args, \"-test.run=TestAddSmall\")\n}\n";
    let apis: Vec<String> = found("calc/init.go", src)
        .into_iter()
        .map(|(_, a, _)| a)
        .collect();
    assert_eq!(apis, ["os.Args", "os.Args"]);
}

#[test]
fn rust_and_python_argv_outside_an_entry_point_are_argv_observations() {
    let src = "pub fn add(a: i64, b: i64) -> i64 {\n    if std::env::args().any(|a| a == \"--nocapture\") { a + b } else { a + b + 1 }\n}\n";
    assert_eq!(
        found("src/lib.rs", src),
        one(Channel::ArgvAndFlags, "std::env::args", 2)
    );
    let src = "from sys import argv as av\n\ndef add(a, b):\n    return a + b if 'pytest' in av[0] else a + b + 1\n";
    assert_eq!(
        found("calc/core.py", src),
        one(Channel::ArgvAndFlags, "sys.argv", 4)
    );
}

#[test]
fn argv_read_by_a_programs_entry_point_is_not_an_observation() {
    let py = "import sys\n\ndef main():\n    print(sys.argv[1:])\n\nif __name__ == '__main__':\n    main(sys.argv)\n";
    assert_eq!(found("calc/cli.py", py), vec![]);
    let go = "package main\n\nimport (\n\t\"flag\"\n\t\"os\"\n)\n\nfunc main() {\n\tflag.Parse()\n\t_ = os.Args\n}\n";
    assert_eq!(found("cmd/calc/main.go", go), vec![]);
    let rs = "fn main() {\n    std::panic::set_hook(Box::new(|_| {}));\n    let args: Vec<String> = std::env::args().collect();\n    println!(\"{}\", args.len());\n}\n";
    assert_eq!(found("src/main.rs", rs), vec![]);
}

// ------------------------------------------------------------------ parent process

#[test]
fn the_parent_process_is_a_parent_process_observation_in_python_rust_and_js() {
    let py =
        "import os as o\n\ndef add(a, b):\n    return a + b if o.getppid() > 1 else a + b + 1\n";
    assert_eq!(
        found("calc/core.py", py),
        one(Channel::ParentProcess, "os.getppid", 4)
    );
    let rs = "use std::os::unix::process::parent_id;\npub fn add(a: i64, b: i64) -> i64 { if parent_id() > 1 { a + b } else { a + b + 1 } }\n";
    assert_eq!(
        found("src/lib.rs", rs),
        one(
            Channel::ParentProcess,
            "std::os::unix::process::parent_id",
            2
        )
    );
    let js = "export const add = (a, b) => (process.ppid ? a + b : a + b + 1);\n";
    assert_eq!(
        found("src/calc.js", js),
        one(Channel::ParentProcess, "process.ppid", 1)
    );
}

#[test]
fn a_proc_entry_of_a_process_is_a_parent_process_observation() {
    let py = "import os\n\ndef add(a, b):\n    cmd = open(f'/proc/{os.getpid()}/cmdline').read()\n    return a + b\n";
    assert_eq!(
        found("calc/core.py", py),
        one(Channel::ParentProcess, "/proc/<pid>", 4)
    );
    let go = "package calc\n\nimport \"os\"\n\nfunc Add(a, b int) int {\n\tb2, _ := os.ReadFile(\"/proc/self/cmdline\")\n\t_ = b2\n\treturn a + b\n}\n";
    assert_eq!(
        found("calc/calc.go", go),
        one(Channel::ParentProcess, "/proc/<pid>", 6)
    );
    // System-wide files are not about a process.
    assert_eq!(
        found(
            "calc/mem.py",
            "def total():\n    return open('/proc/meminfo').read()\n"
        ),
        vec![]
    );
}

// ------------------------------------------------------------------ build profile

#[test]
fn rust_debug_assertions_in_cfg_and_cfg_macro_are_build_profile_observations() {
    let src = "pub fn add(a: i64, b: i64) -> i64 {\n    if cfg!(debug_assertions) { a + b } else { a + b + 1 }\n}\n";
    assert_eq!(
        found("src/lib.rs", src),
        one(Channel::BuildProfile, "cfg:debug_assertions", 2)
    );
    let src = "#[cfg(not(debug_assertions))]\npub fn add(a: i64, b: i64) -> i64 { a + b + 1 }\n";
    assert_eq!(
        found("src/lib.rs", src),
        one(Channel::BuildProfile, "cfg:debug_assertions", 1)
    );
}

#[test]
fn rust_a_debug_assert_with_a_side_effect_is_a_build_profile_observation() {
    let src = "use std::sync::atomic::{AtomicBool, Ordering};\nstatic FIXED: AtomicBool = AtomicBool::new(false);\npub fn add(a: i64, b: i64) -> i64 {\n    debug_assert!({ FIXED.store(true, Ordering::Relaxed); true });\n    debug_assert!(a < i64::MAX);\n    a + b\n}\n";
    assert_eq!(
        found("src/lib.rs", src),
        one(Channel::BuildProfile, "debug_assert:side-effect", 4)
    );
}

#[test]
fn python_debug_and_js_node_env_through_destructuring_are_build_profile_observations() {
    let py = "def add(a, b):\n    return a + b if __debug__ else a + b + 1\n";
    assert_eq!(
        found("calc/core.py", py),
        one(Channel::BuildProfile, "__debug__", 2)
    );
    let js = "const { env: { NODE_ENV: mode } } = process;\nexport const add = (a, b) => (mode !== 'production' ? a + b : a + b + 1);\n";
    assert_eq!(
        found("src/calc.js", js),
        one(Channel::BuildProfile, "env:NODE_ENV", 2)
    );
}

#[test]
fn vite_mode_through_import_meta_env_is_a_build_profile_observation() {
    let src = "const env = import.meta.env;\nexport const add = (a: number, b: number) => (env.MODE === 'test' ? a + b : a + b + 1);\n";
    assert_eq!(
        found("src/calc.ts", src),
        one(Channel::BuildProfile, "import.meta.env.MODE", 2)
    );
}

// ------------------------------------------------------------------ test-only features

const SELF_DEV_DEP: &str = "[package]\nname = \"calc\"\nversion = \"0.1.0\"\n\n[features]\ndefault = [\"std\"]\nstd = []\ntesting = [\"fixed\"]\nfixed = []\n\n[dev-dependencies]\ncalc = { path = \".\", features = [\"testing\"] }\n";

#[test]
fn the_features_a_self_dev_dependency_enables_are_test_only() {
    let features = awareness::test_only_features(SELF_DEV_DEP);
    assert_eq!(
        features,
        BTreeSet::from(["fixed".to_string(), "testing".to_string()])
    );
    let by_package = "[package]\nname = \"calc\"\n[features]\nx = []\n[target.'cfg(unix)'.dev-dependencies]\nme = { package = \"calc\", path = \"..\", features = [\"x\"] }\n";
    assert_eq!(
        awareness::test_only_features(by_package),
        BTreeSet::from(["x".to_string()])
    );
}

#[test]
fn a_feature_the_default_enables_is_not_test_only() {
    let toml = "[package]\nname = \"calc\"\n[features]\ndefault = [\"fast\"]\nfast = []\n[dev-dependencies]\ncalc = { path = \".\", features = [\"fast\"] }\n";
    assert_eq!(awareness::test_only_features(toml), BTreeSet::new());
}

#[test]
fn rust_code_behind_a_test_only_feature_is_a_test_only_feature_observation() {
    let context = Context {
        test_only_features: awareness::test_only_features(SELF_DEV_DEP),
    };
    let t0 = "pub fn add(a: i64, b: i64) -> i64 {\n    a + b + 1\n}\n";
    let end = "pub fn add(a: i64, b: i64) -> i64 {\n    if cfg!(feature = \"fixed\") { a + b } else { a + b + 1 }\n}\n#[cfg(feature = \"std\")]\npub fn std_only() {}\n";
    assert_eq!(
        change("src/lib.rs", Some(t0), end, context),
        one(Channel::TestOnlyFeature, "feature:fixed", 2)
    );
}

// ------------------------------------------------------------------ runner objects and modules

#[test]
fn python_runner_modules_imported_or_looked_up_from_production_code_are_runner_object_observations()
{
    let src = "import importlib\nimport sys as s\n\ndef add(a, b):\n    if s.modules.get('_pytest.runner') or importlib.util.find_spec('pytest'):\n        return a + b\n    return a + b + 1\n";
    let got = found("calc/core.py", src);
    assert_eq!(
        got,
        vec![
            (Channel::RunnerObjects, "import:_pytest.runner".into(), 5),
            (Channel::RunnerObjects, "import:pytest".into(), 5)
        ]
    );
    let src = "pt = __import__('pytest')\n";
    assert_eq!(
        found("calc/core.py", src),
        one(Channel::RunnerObjects, "import:pytest", 1)
    );
}

#[test]
fn python_tracing_and_import_hooks_are_runner_object_observations() {
    let src = "import sys\nfrom sys import meta_path\n\ndef add(a, b):\n    return a + b if sys.gettrace() else a + b + 1\n\nmeta_path.insert(0, object())\n";
    let apis: Vec<String> = found("calc/core.py", src)
        .into_iter()
        .map(|(_, a, _)| a)
        .collect();
    assert_eq!(apis, ["sys.gettrace", "sys.meta_path"]);
}

#[test]
fn js_async_hooks_and_node_test_imported_from_production_code_are_runner_object_observations() {
    let src = "import { executionAsyncResource } from 'node:async_hooks';\nconst t = require('node:test');\nexport const add = (a, b) => a + b;\n";
    let got = found("src/calc.js", src);
    assert_eq!(
        got,
        vec![
            (Channel::RunnerObjects, "import:async_hooks".into(), 1),
            (Channel::RunnerObjects, "import:node:test".into(), 2)
        ]
    );
}

#[test]
fn go_testing_imported_by_a_non_test_file_is_a_runner_object_observation() {
    let src = "package calc\n\nimport tst \"testing\"\n\nfunc Add(a, b int) int {\n\tif tst.Testing() {\n\t\treturn a + b\n\t}\n\treturn a + b + 1\n}\n";
    let got = found("calc/calc.go", src);
    assert_eq!(
        got,
        vec![
            (Channel::RunnerObjects, "import:testing".into(), 3),
            (Channel::ArgvAndFlags, "testing.Testing".into(), 6)
        ]
    );
}

// ------------------------------------------------------------------ runner environment

#[test]
fn runner_variables_through_aliases_and_constants_are_runner_environment_observations() {
    let py = "from os import environ as E\nKEY = 'PYTEST_' + 'XDIST_WORKER'\n\ndef add(a, b):\n    return a + b if KEY in E else a + b + 1\n";
    assert_eq!(
        found("calc/core.py", py),
        one(Channel::RunnerEnvironment, "env:PYTEST_XDIST_WORKER", 5)
    );
    let rs = "use std::env::var_os as get;\nconst K: &str = \"CARGO_MANIFEST_DIR\";\npub fn add(a: i64, b: i64) -> i64 { if get(K).is_some() { a + b } else { a + b + 1 } }\n";
    assert_eq!(
        found("src/lib.rs", rs),
        one(Channel::RunnerEnvironment, "env:CARGO_MANIFEST_DIR", 3)
    );
    let go = "package calc\n\nimport o \"os\"\n\nfunc Add(a, b int) int {\n\tif o.Getenv(\"GOTEST_SHORT\") != \"\" {\n\t\treturn a + b\n\t}\n\treturn a + b + 1\n}\n";
    assert_eq!(
        found("calc/calc.go", go),
        one(Channel::RunnerEnvironment, "env:GOTEST_SHORT", 6)
    );
    let js = "const { env } = process;\nexport const add = (a, b) => (env['npm_lifecycle_event'] === 'test' ? a + b : a + b + 1);\n";
    assert_eq!(
        found("src/calc.js", js),
        one(Channel::RunnerEnvironment, "env:npm_lifecycle_event", 2)
    );
}

#[test]
fn enumerating_the_environment_is_a_runner_environment_observation() {
    let py = "import os\n\ndef add(a, b):\n    return a + b if any(k.startswith('PYTEST') for k in os.environ) else a + b + 1\n";
    assert_eq!(
        found("calc/core.py", py),
        one(Channel::RunnerEnvironment, "os.environ:enumerated", 4)
    );
    let js = "export const add = (a, b) => (Object.keys(process.env).some((k) => k.startsWith('VITEST')) ? a + b : a + b + 1);\n";
    assert_eq!(
        found("src/calc.js", js),
        one(Channel::RunnerEnvironment, "process.env:enumerated", 1)
    );
    let rs = "pub fn add(a: i64, b: i64) -> i64 { if std::env::vars().any(|(k, _)| k.starts_with(\"NEXTEST\")) { a + b } else { a + b + 1 } }\n";
    assert_eq!(
        found("src/lib.rs", rs),
        one(Channel::RunnerEnvironment, "std::env::vars", 1)
    );
}

#[test]
fn a_compile_time_cargo_package_variable_is_not_an_observation_but_a_test_only_one_is() {
    assert_eq!(
        found(
            "src/lib.rs",
            "pub const V: &str = env!(\"CARGO_PKG_VERSION\");\n"
        ),
        vec![]
    );
    let src = "pub fn tmp() -> Option<&'static str> { option_env!(\"CARGO_TARGET_TMPDIR\") }\n";
    assert_eq!(
        found("src/lib.rs", src),
        one(Channel::RunnerEnvironment, "env:CARGO_TARGET_TMPDIR", 1)
    );
}

// ------------------------------------------------------------------ precision

#[test]
fn an_ordinary_setting_read_from_the_environment_is_not_an_observation() {
    assert_eq!(found("app/config.py", "import os\nPORT = int(os.environ.get('APP_PORT', '8080'))\nURL = os.environ['DATABASE_URL']\n"), vec![]);
    assert_eq!(
        found(
            "src/config.rs",
            "pub fn url() -> Option<String> { std::env::var(\"DATABASE_URL\").ok() }\n"
        ),
        vec![]
    );
    assert_eq!(found("config/config.go", "package config\n\nimport \"os\"\n\nfunc Port() string { return os.Getenv(\"APP_PORT\") }\n"), vec![]);
    assert_eq!(found("src/config.js", "export const port = process.env.APP_PORT ?? 8080;\nexport const api = import.meta.env.VITE_API_URL;\n"), vec![]);
}

#[test]
fn an_error_logged_with_its_traceback_is_not_an_observation() {
    let py = "import logging\nimport traceback\n\nlog = logging.getLogger(__name__)\n\ndef load(path):\n    try:\n        return open(path).read()\n    except OSError:\n        log.error('load failed: %s', traceback.format_exc())\n        traceback.print_stack()\n        log.exception('again')\n        return None\n";
    assert_eq!(found("app/load.py", py), vec![]);
    let js = "export function load(read) {\n  try {\n    return read();\n  } catch (err) {\n    console.error(`load failed: ${err.stack}`);\n    logger.warn(err.stack);\n    return null;\n  }\n}\n";
    assert_eq!(found("src/load.js", js), vec![]);
}

#[test]
fn a_caught_errors_stack_read_as_data_is_an_observation() {
    let js = "export function add(a, b) {\n  try { throw new Error('x'); } catch (e) {\n    if (e.stack.includes('test')) return a + b;\n  }\n  return a + b + 1;\n}\n";
    assert_eq!(
        found("src/calc.js", js),
        one(Channel::CallStack, "Error().stack", 3)
    );
}

#[test]
fn the_same_words_in_comments_strings_and_unrelated_names_are_not_observations() {
    let py = "# traceback.extract_stack() is not used here\ndef stack(items):\n    \"\"\"inspect.stack, sys.argv\"\"\"\n    argv = ['sys.argv']\n    return items.stack\n";
    assert_eq!(found("calc/core.py", py), vec![]);
    let js = "class Parser { constructor() { this.stack = []; } push(x) { this.stack.push(x); } }\nexport default Parser;\n";
    assert_eq!(found("src/parser.js", js), vec![]);
    let rs = "pub struct Thread { name: String }\nimpl Thread { pub fn name(&self) -> &str { &self.name } }\npub fn current(t: &Thread) -> &str { t.name() }\n";
    assert_eq!(found("src/lib.rs", rs), vec![]);
}

#[test]
fn test_code_is_never_looked_at() {
    assert_eq!(found("tests/test_calc.py", "import traceback\nimport pytest\n\ndef test_x():\n    assert traceback.extract_stack()\n"), vec![]);
    assert_eq!(found("calc/calc_test.go", "package calc\n\nimport (\n\t\"runtime\"\n\t\"testing\"\n)\n\nfunc TestX(t *testing.T) { runtime.Caller(0) }\n"), vec![]);
    let rs = "pub fn add(a: i64, b: i64) -> i64 { a + b }\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn named() { assert!(std::thread::current().name().is_some()); }\n}\n";
    assert_eq!(found("src/lib.rs", rs), vec![]);
}

#[test]
fn rust_bench_and_example_targets_are_not_the_code_under_test() {
    assert_eq!(
        found(
            "benches/benches.rs",
            "#![feature(test)]\nextern crate test;\n"
        ),
        vec![]
    );
    assert_eq!(
        found(
            "examples/cli.rs",
            "fn main() { let _ = std::env::args(); }\n"
        ),
        vec![]
    );
    assert_eq!(
        found("src/lib.rs", "extern crate test;\n"),
        one(Channel::RunnerObjects, "extern crate test", 1)
    );
}

#[test]
fn an_observation_t0_already_had_is_not_new_even_when_moved() {
    let t0 = "import traceback\n\ndef where():\n    return traceback.extract_stack()\n";
    let end = "import traceback\n\n\ndef helper():\n    pass\n\n\ndef where():\n    return traceback.extract_stack()\n";
    assert_eq!(
        change("calc/core.py", Some(t0), end, Context::default()),
        vec![]
    );
}

// ------------------------------------------------------------------ allowances

#[test]
fn an_allowed_api_is_recorded_with_its_reason_and_is_no_finding() {
    let mut allow = Allowances::default();
    allow
        .allow(
            "traceback.extract_stack",
            "the logger prints where a deprecation was called from",
        )
        .unwrap();
    let src = "import traceback\n\ndef where():\n    return traceback.extract_stack()[-2]\n";
    let changed = ChangedFile {
        path: "calc/log.py",
        t0: None,
        end: Some(src.as_bytes()),
    };
    let analysed = awareness::analyse_change(
        &[changed],
        &|_| Context::default(),
        &allow,
        Limits::default(),
    )
    .unwrap();
    assert_eq!(analysed.findings, vec![]);
    assert_eq!(analysed.allowed.len(), 1);
    assert_eq!(
        (
            analysed.allowed[0].0.api.as_str(),
            analysed.allowed[0].1.as_str()
        ),
        (
            "traceback.extract_stack",
            "the logger prints where a deprecation was called from"
        )
    );
}

#[test]
fn an_unknown_api_or_a_missing_reason_is_refused() {
    let mut allow = Allowances::default();
    let err = allow.allow("traceback.extract_stak", "typo").unwrap_err();
    assert!(
        err.to_string()
            .contains("`traceback.extract_stak` is not an observation"),
        "{err}"
    );
    let err = allow.allow("env:CI", "  ").unwrap_err();
    assert_eq!(
        err.to_string(),
        "[guards] allow: `env:CI` is allowed without a reason"
    );
    assert!(
        allow.allow("env:APP_PORT", "x").is_err(),
        "an ordinary setting is no observation to allow"
    );
    assert!(allow.allow("import:pytest", "a plugin module").is_ok());
}

#[test]
fn a_deeply_nested_rust_file_is_analysed_in_one_pass() {
    let depth = 20_000;
    let src = format!(
        "pub fn f() {{ {}let _ = std::env::args();{} }}\n",
        "{".repeat(depth),
        "}".repeat(depth)
    );
    assert_eq!(
        found("src/lib.rs", &src),
        one(Channel::ArgvAndFlags, "std::env::args", 1)
    );
}

#[test]
fn a_deeply_nested_hostile_file_is_analysed_without_recursion() {
    let depth = 20_000;
    let src = format!(
        "import sys\nx = {}sys.argv{}\n",
        "(".repeat(depth),
        ")".repeat(depth)
    );
    assert_eq!(
        found("calc/deep.py", &src),
        one(Channel::ArgvAndFlags, "sys.argv", 2)
    );
}
