//! Assertion counts (exact, per language, over test code only) and test items with their
//! attributes, compared between t0 and the end state.

use loopexec::analysis::{
    analyse_change, analyse_file, total_assertions, ChangedFile, FileAnalysis, FileFacts, Limits,
    RuleSet, SourceFile, TestItemChange, TestItemKind,
};

fn facts(path: &str, source: &str) -> FileFacts {
    match analyse_file(
        SourceFile {
            path,
            bytes: source.as_bytes(),
        },
        Limits::default(),
    )
    .expect("analysis")
    {
        FileAnalysis::Analysed(f) => f,
        FileAnalysis::NotAnalysed(na) => panic!("{path} not analysed: {}", na.reason),
    }
}

fn assertions(path: &str, source: &str) -> u64 {
    facts(path, source).assertions
}

/// (name, attributes) of each test item.
fn items(path: &str, source: &str) -> Vec<(String, Vec<String>)> {
    facts(path, source)
        .test_items
        .into_iter()
        .map(|i| (i.name, i.attributes))
        .collect()
}

fn changes(path: &str, t0: &str, end: &str) -> Vec<TestItemChange> {
    let change = ChangedFile {
        path,
        t0: Some(t0.as_bytes()),
        end: Some(end.as_bytes()),
    };
    analyse_change(&[change], &RuleSet::all(), Limits::default())
        .expect("analysis")
        .test_item_changes
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

// ------------------------------------------------------------------ assertion counts

const PY_TESTS: &str = r#"import pytest
import unittest
from unittest import mock

def test_add():
    assert add(1, 2) == 3
    assert add(0, 0) == 0, "zero"
    # assert add(1, 1) == 3
    print("assert nothing")

def test_raises():
    with pytest.raises(ValueError):
        add("a", None)

class TestMock(unittest.TestCase):
    def test_calls(self):
        m = mock.Mock()
        m(1)
        m.assert_called_once_with(1)
        self.assertEqual(add(2, 2), 4)
        self.assertRaises(TypeError, add, None, None)
"#;

#[test]
fn python_counts_assert_statements_assert_calls_and_pytest_raises() {
    assert_eq!(assertions("tests/test_calc.py", PY_TESTS), 6);
}

#[test]
fn python_production_files_count_no_assertions() {
    assert_eq!(
        assertions(
            "calc.py",
            "def add(a, b):\n    assert a is not None\n    return a + b\n"
        ),
        0
    );
}

const RUST_LIB: &str = r#"/// Adds.
///
/// ```
/// assert_eq!(calc::add(1, 2), 3);
/// ```
///
/// ```no_run
/// assert_eq!(calc::add(1, 2), 3);
/// ```
pub fn add(a: i32, b: i32) -> i32 {
    debug_assert!(a < 1000);
    a + b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds() {
        assert_eq!(add(2, 2), 4);
        assert!(add(1, 1) > 0, "positive");
        // assert_ne!(add(1, 1), 3);
        let v = vec![assert_ne!(add(1, 1), 3)];
        drop(v);
    }

    #[test]
    #[should_panic(expected = "overflow")]
    fn overflows() {
        add(i32::MAX, 1);
    }
}
"#;

#[test]
fn rust_counts_assertion_macros_in_test_modules_should_panic_and_running_doctests() {
    // adds: 3 (one inside vec![]), overflows: 1 (should_panic), the running doctest: 1;
    // the production debug_assert! and the no_run doctest count nothing.
    assert_eq!(assertions("src/lib.rs", RUST_LIB), 5);
}

#[test]
fn rust_integration_test_files_count_every_assertion() {
    let source = "fn helper(x: i32) {\n    assert!(x > 0);\n}\n\n#[test]\nfn works() {\n    helper(1);\n    assert_eq!(1, 1);\n    debug_assert_ne!(1, 2);\n}\n";
    assert_eq!(assertions("tests/it.rs", source), 3);
}

#[test]
fn go_counts_t_errors_fatals_and_testify_calls() {
    let source = r#"package calc

import (
	"log"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAdd(t *testing.T) {
	if Add(1, 2) != 3 {
		t.Errorf("Add(1, 2) = %d", Add(1, 2))
	}
	if Add(0, 0) != 0 {
		t.Fatal("zero")
	}
	assert.Equal(t, 4, Add(2, 2))
	require.NoError(t, nil)
	log.Fatal("not an assertion")
	t.Log("t.Error(")
}
"#;
    assert_eq!(assertions("calc_test.go", source), 4);
}

#[test]
fn js_counts_expect_and_assert_calls() {
    let source = r#"import assert from "node:assert";
import { test } from "node:test";

test("adds", (t) => {
  expect(add(1, 2)).toBe(3);
  expect(add(0, 0)).not.toBe(1);
  assert.strictEqual(add(2, 2), 4);
  assert(add(1, 1) > 0);
  t.assert.ok(true);
  // expect(nothing)
  console.log("assert.equal(1, 2)");
});
"#;
    assert_eq!(assertions("test/add.test.js", source), 5);
}

#[test]
fn typescript_test_files_are_counted_like_javascript() {
    let source = "describe(\"math\", () => {\n  it(\"adds\", () => {\n    const n: number = add(1, 2);\n    expect(n).toBe(3);\n  });\n});\n";
    assert_eq!(assertions("src/math.spec.ts", source), 1);
}

#[test]
fn removing_one_assertion_lowers_the_end_count_by_one() {
    let end = PY_TESTS.replace("    assert add(0, 0) == 0, \"zero\"\n", "");
    let change = ChangedFile {
        path: "tests/test_calc.py",
        t0: Some(PY_TESTS.as_bytes()),
        end: Some(end.as_bytes()),
    };
    let analysis = analyse_change(&[change], &RuleSet::all(), Limits::default()).expect("analysis");
    assert_eq!((analysis.assertions_t0, analysis.assertions_end), (6, 5));
}

#[test]
fn the_total_over_a_tree_sums_its_files() {
    let files = [
        SourceFile {
            path: "tests/test_calc.py",
            bytes: PY_TESTS.as_bytes(),
        },
        SourceFile {
            path: "src/lib.rs",
            bytes: RUST_LIB.as_bytes(),
        },
        SourceFile {
            path: "README.md",
            bytes: b"assert!(true)",
        },
    ];
    let total = total_assertions(files, Limits::default()).expect("total");
    assert_eq!(total.assertions, 11);
    assert_eq!(total.not_analysed, vec![]);
}

// ------------------------------------------------------------------ test items

#[test]
fn rust_test_items_carry_their_attributes_and_module_path() {
    assert_eq!(
        items("src/lib.rs", RUST_LIB),
        vec![
            ("tests::adds".to_string(), strings(&["test"])),
            (
                "tests::overflows".to_string(),
                strings(&["should_panic(expected=\"overflow\")", "test"])
            ),
            ("add#0".to_string(), strings(&[])),
            ("add#1".to_string(), strings(&["no_run"])),
        ]
    );
}

#[test]
fn python_test_items_carry_decorators_class_decorators_and_pytestmark() {
    let source = "import pytest\n\npytestmark = pytest.mark.slow\n\n@pytest.mark.parametrize(\"x\", [1, 2])\ndef test_one(x):\n    assert x\n\n@pytest.mark.usefixtures(\"db\")\nclass TestDb:\n    def test_two(self):\n        assert True\n\n    def helper(self):\n        pass\n\ndef helper():\n    pass\n";
    assert_eq!(
        items("tests/test_db.py", source),
        vec![
            (
                "test_one".to_string(),
                strings(&[
                    "@pytest.mark.parametrize(\"x\",[1,2])",
                    "module pytestmark=pytest.mark.slow"
                ])
            ),
            (
                "TestDb::test_two".to_string(),
                strings(&[
                    "class @pytest.mark.usefixtures(\"db\")",
                    "module pytestmark=pytest.mark.slow"
                ])
            ),
        ]
    );
}

#[test]
fn go_test_items_are_test_benchmark_fuzz_and_example_functions() {
    let source = "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {}\nfunc Testing(t *testing.T) {}\nfunc BenchmarkAdd(b *testing.B) {}\nfunc FuzzAdd(f *testing.F) {}\nfunc ExampleAdd() {}\nfunc TestMain(m *testing.M) {}\n";
    let names: Vec<String> = items("calc_test.go", source)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        strings(&["TestAdd", "BenchmarkAdd", "FuzzAdd", "ExampleAdd"])
    );
}

#[test]
fn js_test_items_are_named_within_their_describe_blocks_with_modifiers() {
    let source = "describe.skip(\"math\", () => {\n  it(\"adds\", () => {});\n  test.only(`subs`, () => {});\n});\ntest(\"top\", { todo: true }, () => {});\n";
    assert_eq!(
        items("src/math.test.js", source),
        vec![
            ("math > adds".to_string(), strings(&["describe skip"])),
            (
                "math > subs".to_string(),
                strings(&["describe skip", "only"])
            ),
            ("top".to_string(), strings(&["todo:true"])),
        ]
    );
}

#[test]
fn a_deleted_rust_test_is_removed() {
    let end = RUST_LIB.replace("    #[test]\n    fn adds() {", "    fn adds() {");
    let changed = changes("src/lib.rs", RUST_LIB, &end);
    assert_eq!(changed.len(), 1);
    let TestItemChange::Removed { item } = &changed[0] else {
        panic!("{changed:?}")
    };
    assert_eq!(
        (item.kind, item.name.as_str()),
        (TestItemKind::RustTest, "tests::adds")
    );
}

#[test]
fn an_added_ignore_changes_the_rust_test_attributes() {
    let end = RUST_LIB.replace(
        "    #[test]\n    fn adds() {",
        "    #[test]\n    #[ignore]\n    fn adds() {",
    );
    let changed = changes("src/lib.rs", RUST_LIB, &end);
    let [TestItemChange::AttributesChanged {
        after,
        added,
        removed,
        ..
    }] = changed.as_slice()
    else {
        panic!("{changed:?}")
    };
    assert_eq!(after.name, "tests::adds");
    assert_eq!(
        (added.clone(), removed.clone()),
        (strings(&["ignore"]), strings(&[]))
    );
}

#[test]
fn an_added_should_panic_changes_the_rust_test_attributes() {
    let end = RUST_LIB.replace(
        "    #[test]\n    fn adds() {",
        "    #[test]\n    #[should_panic]\n    fn adds() {",
    );
    let changed = changes("src/lib.rs", RUST_LIB, &end);
    let [TestItemChange::AttributesChanged { added, .. }] = changed.as_slice() else {
        panic!("{changed:?}")
    };
    assert_eq!(added, &strings(&["should_panic"]));
}

#[test]
fn a_doctest_fence_turned_no_run_changes_its_attributes() {
    let end = RUST_LIB.replacen(
        "/// ```\n/// assert_eq!",
        "/// ```no_run\n/// assert_eq!",
        1,
    );
    let changed = changes("src/lib.rs", RUST_LIB, &end);
    let [TestItemChange::AttributesChanged { after, added, .. }] = changed.as_slice() else {
        panic!("{changed:?}")
    };
    assert_eq!(
        (after.kind, after.name.as_str()),
        (TestItemKind::RustDoctest, "add#0")
    );
    assert_eq!(added, &strings(&["no_run"]));
}

#[test]
fn a_doctest_fence_turned_into_text_is_removed() {
    let end = RUST_LIB.replace("/// ```no_run\n", "/// ```text\n");
    let changed = changes("src/lib.rs", RUST_LIB, &end);
    let [TestItemChange::Removed { item }] = changed.as_slice() else {
        panic!("{changed:?}")
    };
    assert_eq!(item.name, "add#1");
}

#[test]
fn a_python_xfail_decorator_changes_the_test_attributes() {
    let t0 = "def test_add():\n    assert add(1, 2) == 3\n";
    let end = "import pytest\n\n@pytest.mark.xfail(strict=False)\ndef test_add():\n    assert add(1, 2) == 3\n";
    let changed = changes("tests/test_calc.py", t0, end);
    let [TestItemChange::AttributesChanged { added, .. }] = changed.as_slice() else {
        panic!("{changed:?}")
    };
    assert_eq!(added, &strings(&["@pytest.mark.xfail(strict=False)"]));
}

#[test]
fn a_python_skip_on_the_class_changes_its_methods_attributes() {
    let t0 = "import unittest\n\nclass TestCalc(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n";
    let end = "import unittest\n\n@unittest.skip(\"later\")\nclass TestCalc(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n";
    let changed = changes("tests/test_calc.py", t0, end);
    let [TestItemChange::AttributesChanged { after, added, .. }] = changed.as_slice() else {
        panic!("{changed:?}")
    };
    assert_eq!(after.name, "TestCalc::test_add");
    assert_eq!(added, &strings(&["class @unittest.skip(\"later\")"]));
}

#[test]
fn a_renamed_python_test_is_removed() {
    let t0 = "def test_add():\n    assert add(1, 2) == 3\n";
    let end = "def check_add():\n    assert add(1, 2) == 3\n";
    let changed = changes("tests/test_calc.py", t0, end);
    let [TestItemChange::Removed { item }] = changed.as_slice() else {
        panic!("{changed:?}")
    };
    assert_eq!(item.name, "test_add");
}

#[test]
fn a_deleted_go_test_is_removed() {
    let t0 = "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {}\n\nfunc TestSub(t *testing.T) {}\n";
    let end = "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {}\n";
    let changed = changes("calc_test.go", t0, end);
    let [TestItemChange::Removed { item }] = changed.as_slice() else {
        panic!("{changed:?}")
    };
    assert_eq!(
        (item.kind, item.name.as_str()),
        (TestItemKind::GoTest, "TestSub")
    );
}

#[test]
fn a_js_test_turned_skip_changes_its_attributes() {
    let t0 = "test(\"adds\", () => {\n  expect(add(1, 2)).toBe(3);\n});\n";
    let end = "test.skip(\"adds\", () => {\n  expect(add(1, 2)).toBe(3);\n});\n";
    let changed = changes("src/add.test.ts", t0, end);
    let [TestItemChange::AttributesChanged { added, .. }] = changed.as_slice() else {
        panic!("{changed:?}")
    };
    assert_eq!(added, &strings(&["skip"]));
}

#[test]
fn an_added_test_and_moved_lines_are_not_changes() {
    let end = format!("\n\n{}\n#[test]\nfn extra() {{}}\n", RUST_LIB);
    assert_eq!(changes("src/lib.rs", RUST_LIB, &end), vec![]);
}
