//! The runners' own closing lines found in a check's captured output: pytest's final line,
//! cargo-nextest's `Summary` line, go's per-package `ok`/`FAIL` lines (read from the `Output` of
//! a `go test -json` stream too), node --test's closing counts (`# tests N` in TAP, `ℹ tests N`
//! from the spec reporter) and prove's `Result:` line. libtest's `test result:` lines are read by
//! [`super::libtest`], per binary.
//!
//! Only lines that start a line exactly as the runner prints them count (an indented copy in a
//! replayed test log does not). Test code can still print a line that looks like a summary:
//! these lines can make a run disagree, never make a failing run agree, because a failure in any
//! source is enough.

use super::{output_lines, Format, ReportError};
use serde::Serialize;

/// The runner a summary line comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runner {
    Pytest,
    Nextest,
    GoTest,
    NodeTest,
    Prove,
}

impl Runner {
    pub fn name(self) -> &'static str {
        match self {
            Runner::Pytest => "pytest",
            Runner::Nextest => "cargo-nextest",
            Runner::GoTest => "go test",
            Runner::NodeTest => "node --test",
            Runner::Prove => "prove",
        }
    }
}

/// What a summary line counts; `None` where the runner does not say (go's lines carry no counts,
/// nextest's skipped tests are not in its JUnit report).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct SummaryCounts {
    pub total: Option<u64>,
    pub failed: u64,
    pub skipped: Option<u64>,
}

/// One runner summary found in the output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SummaryLine {
    pub runner: Runner,
    /// `stdout` or `stderr`.
    pub stream: &'static str,
    pub line: usize,
    /// The line, escaped and bounded for showing.
    pub text: String,
    pub counts: SummaryCounts,
    /// Whether the line itself reports a failure.
    pub failed: bool,
}

/// Every runner summary in one captured stream. For pytest and nextest only the last summary
/// line counts (each prints one per run); node's counts are the last value of each key.
pub fn find(bytes: &[u8], stream: &'static str) -> Result<Vec<SummaryLine>, ReportError> {
    let mut out = Vec::new();
    let mut last_pytest = None;
    let mut last_nextest = None;
    let mut node = NodeCounts::default();
    let go_json = super::format::sniff(bytes) == Some(Format::GoJson);
    for line in output_lines(bytes, stream) {
        let (number, raw) = line?;
        let owned;
        let text: &str = if go_json {
            owned = go_output(raw).unwrap_or_default();
            owned.trim_end_matches('\n')
        } else {
            owned = super::without_colours(&String::from_utf8_lossy(raw)).into_owned();
            &owned
        };
        let make = |runner, counts, failed| SummaryLine {
            runner,
            stream,
            line: number,
            text: super::shown(text),
            counts,
            failed,
        };
        if let Some(counts) = pytest_line(text) {
            last_pytest = Some(make(Runner::Pytest, counts, counts.failed > 0));
        } else if let Some((counts, cut_short)) = nextest_line(text) {
            last_nextest = Some(make(
                Runner::Nextest,
                counts,
                counts.failed > 0 || cut_short,
            ));
        } else if let Some(failed) = go_line(text) {
            out.push(make(Runner::GoTest, SummaryCounts::default(), failed));
        } else if let Some((counts, failed)) = prove_line(text) {
            out.push(make(Runner::Prove, counts, failed));
        } else {
            node.read(text, number);
        }
    }
    out.extend(last_pytest);
    out.extend(last_nextest);
    out.extend(node.summary(stream));
    out.sort_by_key(|s| s.line);
    Ok(out)
}

/// The `Output` of one go -json event.
fn go_output(line: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(line).ok()?;
    v.get("Output")?.as_str().map(str::to_string)
}

/// `== 1 failed, 5 passed, 1 skipped in 0.11s ==` (the bars optional, as with `-q`).
fn pytest_line(text: &str) -> Option<SummaryCounts> {
    let inner = text.trim().trim_matches('=').trim();
    let (items, time) = inner.rsplit_once(" in ")?;
    let time = time.split(' ').next()?;
    let seconds = time.strip_suffix('s')?;
    seconds.parse::<f64>().ok()?;
    if items == "no tests ran" {
        return Some(SummaryCounts {
            total: Some(0),
            failed: 0,
            skipped: Some(0),
        });
    }
    let (mut total, mut failed, mut skipped) = (0, 0, 0);
    for item in items.split(", ") {
        let (n, word) = item.split_once(' ')?;
        let n: u64 = n.parse().ok()?;
        match word {
            // Numbers the check printed: summed saturating, never overflowing.
            "passed" | "xpassed" => total = u64::saturating_add(total, n),
            "failed" | "error" | "errors" => {
                total = u64::saturating_add(total, n);
                failed = u64::saturating_add(failed, n)
            }
            "skipped" | "xfailed" => {
                total = u64::saturating_add(total, n);
                skipped = u64::saturating_add(skipped, n)
            }
            "deselected" | "warning" | "warnings" | "rerun" | "reruns" => {}
            _ => return None,
        }
    }
    Some(SummaryCounts {
        total: Some(total),
        failed,
        skipped: Some(skipped),
    })
}

/// `     Summary [   0.705s] 5 tests run: 4 passed, 1 failed, 1 skipped` (and `3/5 tests run`,
/// with the second value true, when nextest stopped early).
fn nextest_line(text: &str) -> Option<(SummaryCounts, bool)> {
    let rest = text.trim_start().strip_prefix("Summary [")?;
    let (_, rest) = rest.split_once("] ")?;
    let (run, results) = rest.split_once(" run: ")?;
    let run = run
        .strip_suffix(" tests")
        .or_else(|| run.strip_suffix(" test"))?;
    let (ran, cut_short) = match run.split_once('/') {
        Some((ran, of)) => (ran.parse::<u64>().ok()?, ran != of),
        None => (run.parse::<u64>().ok()?, false),
    };
    let mut failed = 0;
    for item in results.split(", ") {
        let item = item.split(" (").next().unwrap_or(item);
        let Some((n, word)) = item.split_once(' ') else {
            continue;
        };
        let Ok(n) = n.parse::<u64>() else { continue };
        if matches!(
            word,
            "failed" | "timed out" | "exec failed" | "leaky failed"
        ) {
            failed = u64::saturating_add(failed, n);
        }
    }
    Some((
        SummaryCounts {
            total: Some(ran),
            failed,
            skipped: None,
        },
        cut_short,
    ))
}

/// go's `ok  \tpkg\t0.01s`, `FAIL\tpkg\t0.01s` / `FAIL\tpkg [build failed]` and `--- FAIL: TestX`:
/// whether the line reports a failure.
fn go_line(text: &str) -> Option<bool> {
    if text.starts_with("ok  \t") {
        return Some(false);
    }
    if text.starts_with("FAIL\t") || text.starts_with("--- FAIL: ") {
        return Some(true);
    }
    None
}

/// prove's `Result: PASS|FAIL|NOTESTS` and `Files=1, Tests=4, ...`.
fn prove_line(text: &str) -> Option<(SummaryCounts, bool)> {
    if let Some(result) = text.strip_prefix("Result: ") {
        return match result.trim() {
            "PASS" => Some((SummaryCounts::default(), false)),
            "FAIL" | "NOTESTS" => Some((SummaryCounts::default(), true)),
            _ => None,
        };
    }
    let rest = text.strip_prefix("Files=")?;
    let (_, rest) = rest.split_once(", Tests=")?;
    let n = rest.split(',').next()?.trim().parse::<u64>().ok()?;
    Some((
        SummaryCounts {
            total: Some(n),
            failed: 0,
            skipped: None,
        },
        false,
    ))
}

/// node --test's closing counts, as TAP comments (`# tests 9`) or from the spec reporter
/// (`ℹ tests 9`); the last value of each key wins (node prints them last).
#[derive(Default)]
struct NodeCounts {
    values: std::collections::BTreeMap<&'static str, (u64, usize)>,
}

impl NodeCounts {
    const KEYS: [&'static str; 6] = ["tests", "pass", "fail", "cancelled", "skipped", "todo"];

    fn read(&mut self, text: &str, number: usize) {
        let Some(rest) = text.strip_prefix("# ").or_else(|| text.strip_prefix("ℹ ")) else {
            return;
        };
        let Some((key, value)) = rest.split_once(' ') else {
            return;
        };
        let Some(key) = Self::KEYS.iter().find(|k| **k == key) else {
            return;
        };
        if let Ok(n) = value.trim().parse::<u64>() {
            self.values.insert(key, (n, number));
        }
    }

    fn summary(&self, stream: &'static str) -> Option<SummaryLine> {
        let get = |k: &str| self.values.get(k).map(|v| v.0);
        let (tests, fail) = (get("tests")?, get("fail")?);
        get("pass")?;
        let line = self.values.values().map(|v| v.1).max().unwrap_or(0);
        let failed = fail.saturating_add(get("cancelled").unwrap_or(0));
        let skipped = get("skipped")
            .unwrap_or(0)
            .saturating_add(get("todo").unwrap_or(0));
        let text = self
            .values
            .iter()
            .map(|(k, v)| format!("{k} {}", v.0))
            .collect::<Vec<_>>()
            .join(", ");
        Some(SummaryLine {
            runner: Runner::NodeTest,
            stream,
            line,
            text,
            counts: SummaryCounts {
                total: Some(tests),
                failed,
                skipped: Some(skipped),
            },
            failed: failed > 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> SummaryLine {
        let found = find(text.as_bytes(), "stdout").unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        found.into_iter().next().unwrap()
    }

    #[test]
    fn pytest_final_line_with_and_without_bars() {
        let s = one(
            "============== 1 failed, 5 passed, 1 skipped, 1 xfailed in 0.11s ===============\n",
        );
        assert_eq!((s.runner, s.failed), (Runner::Pytest, true));
        assert_eq!(
            s.counts,
            SummaryCounts {
                total: Some(8),
                failed: 1,
                skipped: Some(2)
            }
        );
        let q = one("3 passed, 2 deselected in 0.01s\n");
        assert_eq!(
            q.counts,
            SummaryCounts {
                total: Some(3),
                failed: 0,
                skipped: Some(0)
            }
        );
    }

    #[test]
    fn a_coloured_pytest_line_reads_as_its_plain_text() {
        let s = one("\u{1b}[31m===== \u{1b}[31m\u{1b}[1m1 failed\u{1b}[0m, \u{1b}[32m2 passed\u{1b}[0m\u{1b}[31m in 0.05s\u{1b}[0m\u{1b}[31m =====\u{1b}[0m\n");
        assert_eq!(
            s.counts,
            SummaryCounts {
                total: Some(3),
                failed: 1,
                skipped: Some(0)
            }
        );
    }

    #[test]
    fn a_line_with_an_unknown_word_is_no_pytest_summary() {
        assert!(find(b"3 apples in 2s\n", "stdout").unwrap().is_empty());
    }

    #[test]
    fn nextest_summary_counts_the_tests_run_and_a_cut_short_run_fails() {
        let s = one("     Summary [   0.705s] 5 tests run: 4 passed, 1 failed, 1 skipped\n");
        assert_eq!(
            (s.runner, s.counts.total, s.counts.failed),
            (Runner::Nextest, Some(5), 1)
        );
        let cut = one("     Summary [   0.100s] 3/5 tests run: 3 passed (1 slow), 2 skipped\n");
        assert!(cut.failed);
    }

    #[test]
    fn go_fail_lines_fail_and_ok_lines_do_not() {
        let found = find(
            b"ok  \texample.com/a\t0.01s\nFAIL\texample.com/b [build failed]\n",
            "stdout",
        )
        .unwrap();
        assert_eq!(
            found.iter().map(|s| s.failed).collect::<Vec<_>>(),
            [false, true]
        );
    }

    #[test]
    fn go_lines_are_read_from_a_json_stream_output() {
        let stream =
            b"{\"Action\":\"output\",\"Package\":\"p\",\"Output\":\"FAIL\\tp\\t0.01s\\n\"}\n";
        let s = one(std::str::from_utf8(stream).unwrap());
        assert_eq!((s.runner, s.failed), (Runner::GoTest, true));
    }

    #[test]
    fn node_closing_counts_take_the_last_value_of_each_key() {
        let s = one(
            "# pass 99\nok 1 - a\n1..1\n# tests 1\n# pass 1\n# fail 0\n# skipped 0\n# todo 0\n",
        );
        assert_eq!(
            s.counts,
            SummaryCounts {
                total: Some(1),
                failed: 0,
                skipped: Some(0)
            }
        );
        assert!(!s.failed);
    }

    #[test]
    fn summary_numbers_whose_sum_passes_u64_saturate_rather_than_overflow() {
        let max = u64::MAX;
        let s = one(&format!(
            "== {max} failed, {max} passed, {max} skipped in 0.11s ==\n"
        ));
        assert_eq!(
            s.counts,
            SummaryCounts {
                total: Some(max),
                failed: max,
                skipped: Some(max)
            }
        );
        let s = one(&format!(
            "     Summary [   0.705s] 5 tests run: {max} failed, {max} timed out\n"
        ));
        assert_eq!(s.counts.failed, max);
        let s = one(&format!(
            "# tests 1\n# pass 1\n# fail {max}\n# cancelled {max}\n# skipped {max}\n# todo {max}\n"
        ));
        assert_eq!(
            s.counts,
            SummaryCounts {
                total: Some(1),
                failed: max,
                skipped: Some(max)
            }
        );
    }

    #[test]
    fn prove_result_fail_fails() {
        let found = find(
            b"Files=1, Tests=4,  0 wallclock secs\nResult: FAIL\n",
            "stdout",
        )
        .unwrap();
        assert_eq!(
            found
                .iter()
                .map(|s| (s.counts.total, s.failed))
                .collect::<Vec<_>>(),
            [(Some(4), false), (None, true)]
        );
    }
}
