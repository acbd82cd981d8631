//! The test-determining surface digest H0 (unchanged by an added dependency, changed by each
//! surface key, its diff naming the entry) and Python module shadowing.

use std::collections::BTreeSet;

use loopexec::analysis::shadowing::{
    import_roots, module_names_via, parse_module_names, shadowing, Shadowing, MODULE_NAMES_ARGV,
};
use loopexec::analysis::surface::{SurfaceChange, SurfaceDigest, SurfaceSpec};
use loopexec::analysis::SourceFile;

fn digest(files: &[(&str, &str)]) -> SurfaceDigest {
    let spec = SurfaceSpec::new(&[]).expect("spec");
    spec.digest(files.iter().map(|(path, text)| SourceFile {
        path,
        bytes: text.as_bytes(),
    }))
}

/// The (path, part) of each change from `t0` to `end` of one file.
fn changed_parts(path: &str, t0: &str, end: &str) -> Vec<(String, String, &'static str)> {
    let before = digest(&[(path, t0)]);
    let after = digest(&[(path, end)]);
    after
        .diff_from(&before)
        .into_iter()
        .map(|c| match c {
            SurfaceChange::Added { entry } => (entry.path, entry.part, "added"),
            SurfaceChange::Removed { entry } => (entry.path, entry.part, "removed"),
            SurfaceChange::Changed { after, .. } => (after.path, after.part, "changed"),
        })
        .collect()
}

fn part(path: &str, part: &str, change: &'static str) -> (String, String, &'static str) {
    (path.to_string(), part.to_string(), change)
}

const CARGO_T0: &str = r#"[package]
name = "calc"
version = "0.1.0"
edition = "2021"

[lib]
path = "src/lib.rs"

[[test]]
name = "it"
path = "tests/it.rs"

[dependencies]
serde = "1"
"#;

#[test]
fn adding_a_cargo_dependency_leaves_the_digest_unchanged() {
    let end = format!("{CARGO_T0}regex = \"1\"\n");
    assert_eq!(
        digest(&[("Cargo.toml", CARGO_T0)]).sha256,
        digest(&[("Cargo.toml", &end)]).sha256
    );
}

#[test]
fn a_dev_dependency_added_is_test_surface() {
    // A dev-dependency of the crate on itself turns features on for test builds only.
    let end = format!("{CARGO_T0}\n[dev-dependencies]\ncalc = {{ path = \".\", features = [\"fixed\"] }}\n\n[target.'cfg(unix)'.dev-dependencies]\ntempfile = \"3\"\n");
    assert_eq!(
        changed_parts("Cargo.toml", CARGO_T0, &end),
        vec![
            part("Cargo.toml", "dev-dependencies", "added"),
            part("Cargo.toml", "target.cfg(unix).dev-dependencies", "added")
        ]
    );
}

#[test]
fn js_and_python_dev_dependencies_are_test_surface() {
    let package = r#"{"name": "calc", "devDependencies": {"vitest": "^1"}}"#;
    let changed = package.replace("\"^1\"", "\"^1\", \"vitest-magic\": \"1\"");
    assert_eq!(
        changed_parts("package.json", package, &changed),
        vec![part("package.json", "devDependencies", "changed")]
    );
    let pyproject = "[project]\nname = \"calc\"\n";
    let end = format!("{pyproject}\n[dependency-groups]\ntest = [\"pytest-randomly\"]\n");
    assert_eq!(
        changed_parts("pyproject.toml", pyproject, &end),
        vec![part("pyproject.toml", "dependency-groups", "added")]
    );
}

#[test]
fn env_files_a_runner_loads_and_package_manager_settings_are_whole_surface_files() {
    for path in [
        ".env",
        ".env.test",
        "web/.env.test.local",
        ".env.local",
        ".npmrc",
        "app/.yarnrc.yml",
    ] {
        assert_eq!(
            changed_parts(path, "A=1\n", "A=2\n"),
            vec![part(path, "file", "changed")],
            "{path}"
        );
    }
    // A template no loader reads by default stays editable.
    for path in [".env.example", ".env.sample", ".env.template"] {
        assert_eq!(changed_parts(path, "A=1\n", "A=2\n"), vec![], "{path}");
    }
}

#[test]
fn turning_off_lib_tests_changes_the_lib_part() {
    let end = CARGO_T0.replace(
        "path = \"src/lib.rs\"\n",
        "path = \"src/lib.rs\"\ntest = false\ndoctest = false\n",
    );
    assert_eq!(
        changed_parts("Cargo.toml", CARGO_T0, &end),
        vec![part("Cargo.toml", "[lib]", "changed")]
    );
}

#[test]
fn editing_a_test_target_changes_the_test_part() {
    let end = CARGO_T0.replace(
        "path = \"tests/it.rs\"\n",
        "path = \"tests/it.rs\"\nharness = false\n",
    );
    assert_eq!(
        changed_parts("Cargo.toml", CARGO_T0, &end),
        vec![part("Cargo.toml", "[[test]]", "changed")]
    );
}

#[test]
fn autotests_false_adds_a_package_part() {
    let end = CARGO_T0.replace(
        "edition = \"2021\"\n",
        "edition = \"2021\"\nautotests = false\n",
    );
    assert_eq!(
        changed_parts("Cargo.toml", CARGO_T0, &end),
        vec![part("Cargo.toml", "package.autotests", "added")]
    );
}

#[test]
fn a_bin_with_test_false_adds_the_bin_part() {
    let end = format!("{CARGO_T0}\n[[bin]]\nname = \"calc\"\ntest = false\n");
    assert_eq!(
        changed_parts("Cargo.toml", CARGO_T0, &end),
        vec![part("Cargo.toml", "[[bin]]", "added")]
    );
}

#[test]
fn required_features_on_a_test_target_changes_the_test_part() {
    let end = CARGO_T0.replace(
        "path = \"tests/it.rs\"\n",
        "path = \"tests/it.rs\"\nrequired-features = [\"never\"]\n",
    );
    assert_eq!(
        changed_parts("Cargo.toml", CARGO_T0, &end),
        vec![part("Cargo.toml", "[[test]]", "changed")]
    );
}

#[test]
fn turning_off_debug_assertions_adds_a_profile_part() {
    let end = format!("{CARGO_T0}\n[profile.dev]\nopt-level = 1\ndebug-assertions = false\n");
    assert_eq!(
        changed_parts("Cargo.toml", CARGO_T0, &end),
        vec![part("Cargo.toml", "profile.dev.debug-assertions", "added")]
    );
}

#[test]
fn every_other_cargo_surface_key_is_a_part_of_its_own() {
    let cases = [
        ("\n[workspace]\nmembers = [\"a\"]\n", "workspace.members"),
        ("\n[workspace]\nexclude = [\"b\"]\n", "workspace.exclude"),
        ("\n[profile.test]\nopt-level = 1\n", "profile.test"),
        (
            "\n[profile.dev]\noverflow-checks = false\n",
            "profile.dev.overflow-checks",
        ),
        ("\n[profile.dev]\npanic = \"abort\"\n", "profile.dev.panic"),
        (
            "\n[[example]]\nname = \"demo\"\ntest = true\n",
            "[[example]]",
        ),
        (
            "\n[[bench]]\nname = \"speed\"\nharness = false\n",
            "[[bench]]",
        ),
    ];
    for (addition, expected) in cases {
        let end = format!("{CARGO_T0}{addition}");
        assert_eq!(
            changed_parts("Cargo.toml", CARGO_T0, &end),
            vec![part("Cargo.toml", expected, "added")],
            "{expected}"
        );
    }
    let end = CARGO_T0.replace(
        "edition = \"2021\"\n",
        "edition = \"2021\"\nbuild = \"gen.rs\"\nautobins = false\n",
    );
    assert_eq!(
        changed_parts("Cargo.toml", CARGO_T0, &end),
        vec![
            part("Cargo.toml", "package.autobins", "added"),
            part("Cargo.toml", "package.build", "added")
        ]
    );
}

#[test]
fn other_runner_keys_of_package_json_and_pyproject_are_parts() {
    let end = PACKAGE_T0.replace(
        "\"name\": \"calc\",",
        "\"name\": \"calc\", \"mocha\": {\"spec\": \"none\"}, \"ava\": {},",
    );
    assert_eq!(
        changed_parts("package.json", PACKAGE_T0, &end),
        vec![
            part("package.json", "ava", "added"),
            part("package.json", "mocha", "added")
        ]
    );
    let end = PACKAGE_T0.replace(
        "\"test\": \"jest\"",
        "\"test\": \"jest\", \"posttest\": \"true\"",
    );
    assert_eq!(
        changed_parts("package.json", PACKAGE_T0, &end),
        vec![part("package.json", "scripts.posttest", "added")]
    );
    let end = format!("{PYPROJECT_T0}\n[tool.poetry.plugins.pytest11]\nquiet = \"calc.plugin\"\n");
    assert_eq!(
        changed_parts("pyproject.toml", PYPROJECT_T0, &end),
        vec![part(
            "pyproject.toml",
            "tool.poetry.plugins.pytest11",
            "added"
        )]
    );
}

#[test]
fn a_pytest11_entry_point_in_setup_cfg_is_a_part() {
    let t0 = "[metadata]\nname = calc\n\n[options.entry_points]\nconsole_scripts =\n    calc = calc:main\n";
    let end = "[metadata]\nname = calc\n\n[options.entry_points]\nconsole_scripts =\n    calc = calc:main\npytest11 =\n    quiet = calc.plugin\n";
    assert_eq!(
        changed_parts("setup.cfg", t0, end),
        vec![part(
            "setup.cfg",
            "[options.entry_points].pytest11",
            "added"
        )]
    );
}

#[test]
fn a_cargo_toml_above_the_parse_cap_is_digested_whole() {
    let end = format!("{CARGO_T0}# {}\n", "x".repeat(1024 * 1024));
    let entries = digest(&[("Cargo.toml", &end)]).entries;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].part, "above the parse cap");
}

#[test]
fn an_unparsable_cargo_toml_is_digested_whole() {
    let end = format!("{CARGO_T0}[[[\n");
    assert_eq!(
        changed_parts("Cargo.toml", CARGO_T0, &end),
        vec![
            part("Cargo.toml", "[[test]]", "removed"),
            part("Cargo.toml", "[lib]", "removed"),
            part("Cargo.toml", "unparsable", "added")
        ]
    );
}

const PYPROJECT_T0: &str = r#"[project]
name = "calc"
version = "0.1.0"
dependencies = ["attrs"]

[tool.pytest.ini_options]
testpaths = ["tests"]
addopts = "-q"

[tool.ruff]
line-length = 100
"#;

#[test]
fn adding_a_python_dependency_or_tool_setting_leaves_the_digest_unchanged() {
    let end = PYPROJECT_T0
        .replace(
            "dependencies = [\"attrs\"]",
            "dependencies = [\"attrs\", \"requests>=2\"]",
        )
        .replace("line-length = 100", "line-length = 120");
    assert_eq!(
        digest(&[("pyproject.toml", PYPROJECT_T0)]).sha256,
        digest(&[("pyproject.toml", &end)]).sha256
    );
}

#[test]
fn narrowing_pytest_options_in_pyproject_changes_the_pytest_part() {
    let end = PYPROJECT_T0.replace("addopts = \"-q\"", "addopts = \"-q -k 'not slow'\"");
    assert_eq!(
        changed_parts("pyproject.toml", PYPROJECT_T0, &end),
        vec![part("pyproject.toml", "tool.pytest", "changed")]
    );
}

#[test]
fn a_pytest_plugin_entry_point_adds_a_part() {
    let end = format!("{PYPROJECT_T0}\n[project.entry-points.pytest11]\nquiet = \"calc.plugin\"\n");
    assert_eq!(
        changed_parts("pyproject.toml", PYPROJECT_T0, &end),
        vec![part(
            "pyproject.toml",
            "project.entry-points.pytest11",
            "added"
        )]
    );
}

#[test]
fn a_mutator_or_coverage_exclusion_in_pyproject_changes_its_part() {
    let end = format!("{PYPROJECT_T0}\n[tool.mutmut]\npaths_to_exclude = \"calc/core.py\"\n\n[tool.coverage.run]\nomit = [\"calc/core.py\"]\n");
    assert_eq!(
        changed_parts("pyproject.toml", PYPROJECT_T0, &end),
        vec![
            part("pyproject.toml", "tool.coverage", "added"),
            part("pyproject.toml", "tool.mutmut", "added")
        ]
    );
}

#[test]
fn a_coverage_or_stryker_exclusion_in_package_json_changes_its_part() {
    let end = PACKAGE_T0.replace("\"jest\": {", "\"nyc\": { \"exclude\": [\"src/clamp.js\"] },\n  \"stryker\": { \"mutate\": [] },\n  \"jest\": {");
    assert_eq!(
        changed_parts("package.json", PACKAGE_T0, &end),
        vec![
            part("package.json", "nyc", "added"),
            part("package.json", "stryker", "added")
        ]
    );
}

const PACKAGE_T0: &str = r#"{
  "name": "calc",
  "version": "1.0.0",
  "scripts": { "test": "jest", "build": "tsc" },
  "dependencies": { "lodash": "^4.17.21" },
  "jest": { "testEnvironment": "node" }
}"#;

#[test]
fn adding_a_js_dependency_or_script_leaves_the_digest_unchanged() {
    let end = PACKAGE_T0
        .replace(
            "\"lodash\": \"^4.17.21\"",
            "\"lodash\": \"^4.17.21\", \"zod\": \"^3\"",
        )
        .replace(
            "\"build\": \"tsc\"",
            "\"build\": \"tsc -p .\", \"lint\": \"eslint\"",
        );
    assert_eq!(
        digest(&[("package.json", PACKAGE_T0)]).sha256,
        digest(&[("package.json", &end)]).sha256
    );
}

#[test]
fn key_order_does_not_change_the_digest() {
    let reordered = r#"{"jest": {"testEnvironment": "node"}, "scripts": {"build": "tsc", "test": "jest"}, "name": "calc"}"#;
    assert_eq!(
        digest(&[("package.json", PACKAGE_T0)]).sha256,
        digest(&[("package.json", reordered)]).sha256
    );
}

#[test]
fn changing_the_test_script_changes_its_part() {
    let end = PACKAGE_T0.replace(
        "\"test\": \"jest\"",
        "\"test\": \"jest --passWithNoTests src/none\"",
    );
    assert_eq!(
        changed_parts("package.json", PACKAGE_T0, &end),
        vec![part("package.json", "scripts.test", "changed")]
    );
}

#[test]
fn a_pretest_hook_adds_a_part() {
    let end = PACKAGE_T0.replace(
        "\"test\": \"jest\"",
        "\"pretest\": \"node rewrite.js\", \"test\": \"jest\"",
    );
    assert_eq!(
        changed_parts("package.json", PACKAGE_T0, &end),
        vec![part("package.json", "scripts.pretest", "added")]
    );
}

#[test]
fn changing_the_jest_key_changes_its_part() {
    let end = PACKAGE_T0.replace(
        "\"testEnvironment\": \"node\"",
        "\"testEnvironment\": \"node\", \"testPathIgnorePatterns\": [\"tests\"]",
    );
    assert_eq!(
        changed_parts("package.json", PACKAGE_T0, &end),
        vec![part("package.json", "jest", "changed")]
    );
}

#[test]
fn package_json_inside_node_modules_is_not_surface() {
    assert_eq!(
        digest(&[("node_modules/x/package.json", PACKAGE_T0)]).entries,
        vec![]
    );
}

#[test]
fn a_new_pytest_ini_taking_precedence_is_an_added_entry() {
    let before = digest(&[("pyproject.toml", PYPROJECT_T0)]);
    let after = digest(&[
        ("pyproject.toml", PYPROJECT_T0),
        ("pytest.ini", "[pytest]\naddopts = -k nothing\n"),
    ]);
    let changes = after.diff_from(&before);
    let [SurfaceChange::Added { entry }] = changes.as_slice() else {
        panic!("{changes:?}")
    };
    assert_eq!(
        (entry.path.as_str(), entry.part.as_str()),
        ("pytest.ini", "file")
    );
}

#[test]
fn a_conftest_in_a_new_subdirectory_is_an_added_entry() {
    let before = digest(&[("tests/conftest.py", "import pytest\n")]);
    let after = digest(&[
        ("tests/conftest.py", "import pytest\n"),
        (
            "tests/unit/deep/conftest.py",
            "def pytest_collection_modifyitems(items):\n    items.clear()\n",
        ),
    ]);
    let changes = after.diff_from(&before);
    let [SurfaceChange::Added { entry }] = changes.as_slice() else {
        panic!("{changes:?}")
    };
    assert_eq!(entry.path, "tests/unit/deep/conftest.py");
}

#[test]
fn start_up_hooks_shadowing_modules_build_scripts_and_toolchain_files_are_surface() {
    let files = [
        "src/calc.pth",
        "sitecustomize.py",
        "lib/usercustomize.py",
        "pytest.py",
        "_pytest/__init__.py",
        "venv/lib/x-1.0.dist-info/entry_points.txt",
        "build.rs",
        "crates/a/build.rs",
        "rust-toolchain",
        "rust-toolchain.toml",
        ".cargo/config.toml",
        ".config/nextest.toml",
        ".nvmrc",
        ".python-version",
        "jest.config.ts",
        "vitest.config.mts",
        ".mocharc.yml",
        "go.work",
    ];
    let spec = SurfaceSpec::new(&[]).expect("spec");
    for path in files {
        assert!(spec.is_candidate(path), "{path}");
        assert_eq!(
            spec.entries(SourceFile { path, bytes: b"x" }).len(),
            1,
            "{path}"
        );
    }
    for path in [
        "src/calc.py",
        "README.md",
        "docs/entry_points.txt",
        "tests/test_calc.py",
        "src/lib.rs",
    ] {
        assert!(!spec.is_candidate(path), "{path}");
    }
}

#[test]
fn tox_and_setup_cfg_contribute_only_their_pytest_sections() {
    let tox_t0 = "[tox]\nenvlist = py312\n\n[pytest]\naddopts = -q\n";
    let tox_end = "[tox]\nenvlist = py312,py313\n\n[pytest]\naddopts = -q\n";
    assert_eq!(changed_parts("tox.ini", tox_t0, tox_end), vec![]);
    let cfg_t0 = "[metadata]\nname = calc\n\n[options]\ninstall_requires =\n    attrs\n\n[tool:pytest]\ntestpaths = tests\n";
    let cfg_end = "[metadata]\nname = calc\n\n[options]\ninstall_requires =\n    attrs\n    requests\n\n[tool:pytest]\ntestpaths = tests/none\n";
    assert_eq!(
        changed_parts("setup.cfg", cfg_t0, cfg_end),
        vec![part("setup.cfg", "[tool:pytest]", "changed")]
    );
}

#[test]
fn go_mod_contributes_its_go_and_toolchain_lines_only() {
    let t0 = "module example.com/calc\n\ngo 1.22\n\nrequire golang.org/x/text v0.14.0\n";
    let end = "module example.com/calc\n\ngo 1.22\ntoolchain go1.23.1\n\nrequire (\n\tgolang.org/x/text v0.14.0\n\tgithub.com/google/go-cmp v0.6.0\n)\n";
    assert_eq!(
        changed_parts("go.mod", t0, end),
        vec![part("go.mod", "toolchain", "added")]
    );
}

#[test]
fn extra_globs_make_whole_files_surface_and_bad_globs_are_errors() {
    let spec = SurfaceSpec::new(&["ci/*.sh".to_string()]).expect("spec");
    assert!(spec.is_candidate("ci/test.sh"));
    assert!(!spec.is_candidate("ci/sub/test.sh"));
    let err = SurfaceSpec::new(&["tests/[".to_string()]).expect_err("bad glob");
    assert!(
        err.to_string()
            .starts_with("surface glob `tests/[` is invalid"),
        "{err}"
    );
}

#[test]
fn the_digest_does_not_depend_on_file_order() {
    let a = digest(&[
        ("Cargo.toml", CARGO_T0),
        ("build.rs", "fn main() {}\n"),
        ("pytest.ini", "[pytest]\n"),
    ]);
    let b = digest(&[
        ("pytest.ini", "[pytest]\n"),
        ("build.rs", "fn main() {}\n"),
        ("Cargo.toml", CARGO_T0),
    ]);
    assert_eq!(a, b);
}

// ------------------------------------------------------------------ shadowing

fn known() -> BTreeSet<String> {
    ["json", "typing", "pytest", "requests", "os"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

#[test]
fn a_top_level_module_named_like_a_stdlib_module_shadows_it() {
    let paths = ["json.py", "calc.py", "README.md"];
    assert_eq!(
        shadowing(&known(), &paths),
        vec![Shadowing {
            path: "json.py".into(),
            module: "json".into()
        }]
    );
}

#[test]
fn a_package_under_src_named_like_an_installed_module_shadows_it() {
    let paths = [
        "src/requests/__init__.py",
        "src/calc/__init__.py",
        "src/calc/json.py",
    ];
    assert_eq!(
        shadowing(&known(), &paths),
        vec![Shadowing {
            path: "src/requests/__init__.py".into(),
            module: "requests".into()
        }]
    );
}

#[test]
fn a_module_beside_tests_is_importable_through_pytests_prepend_mode() {
    let paths = [
        "tests/test_calc.py",
        "tests/typing.py",
        "pkg/__init__.py",
        "pkg/os.py",
    ];
    assert_eq!(
        shadowing(&known(), &paths),
        vec![Shadowing {
            path: "tests/typing.py".into(),
            module: "typing".into()
        }]
    );
}

#[test]
fn a_tests_package_puts_its_parent_on_the_path() {
    let roots = import_roots(&[
        "tests/__init__.py",
        "tests/unit/__init__.py",
        "tests/unit/test_a.py",
    ]);
    assert_eq!(
        roots,
        ["", "src"]
            .iter()
            .map(|s| s.to_string())
            .collect::<BTreeSet<_>>()
    );
}

#[test]
fn module_names_are_read_from_the_runner_one_per_line() {
    let names = module_names_via(|argv: &[&str]| {
        assert_eq!(argv, MODULE_NAMES_ARGV);
        Ok::<_, String>(b"abc\njson\n\n_thread\n".to_vec())
    })
    .expect("names");
    assert_eq!(
        names,
        ["_thread", "abc", "json"]
            .iter()
            .map(|s| s.to_string())
            .collect::<BTreeSet<_>>()
    );
}

#[test]
fn a_failing_module_name_command_is_an_error() {
    let err = module_names_via(|_: &[&str]| Err("python3: not found")).expect_err("fails");
    assert_eq!(
        err.to_string(),
        "the module-name command failed: python3: not found"
    );
}

#[test]
fn module_name_output_that_is_not_names_is_an_error() {
    let err =
        parse_module_names(b"json\nTraceback (most recent call last):\n").expect_err("garbage");
    assert_eq!(err.to_string(), "the module-name command printed line 2 that is not a module name: \"Traceback (most recent call last):\"");
    assert_eq!(
        parse_module_names(b"\n").expect_err("empty").to_string(),
        "the module-name command printed no module names"
    );
}

#[test]
fn the_module_name_command_lists_the_system_interpreters_modules_but_not_the_workspaces() {
    let workspace = tempfile::tempdir().expect("tempdir");
    std::fs::write(workspace.path().join("calcpkg_in_workspace.py"), "x = 1\n").expect("write");
    let names = module_names_via(|argv: &[&str]| {
        let out = std::process::Command::new(argv[0])
            .args(&argv[1..])
            .current_dir(workspace.path())
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    })
    .expect("python3 (installed by ci/setup.sh) lists its modules");
    assert!(
        names.contains("json") && names.contains("os") && names.contains("sys"),
        "{names:?}"
    );
    assert!(!names.contains("calcpkg_in_workspace"));
}
