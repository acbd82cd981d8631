//! What a check's own output says about how much its evidence could see, besides the tests it
//! named: the runners whose closing summary lines it printed (so that a check that named no test
//! can be told which switch makes that runner name them), and whether cargo stopped at its first
//! failing test target (its default fail-fast), so that every target after that one never ran.
//!
//! Cargo's stderr is read as cargo prints it: `Running ...` and `Doc-tests ...` name each target
//! as it starts; a failing target is followed by `error: test failed, to rerun pass `--lib``
//! (`error: doctest failed, to rerun pass `--doc`` for the doc tests); with `--no-fail-fast` the
//! later targets still run (more `Running` lines follow) and cargo closes with
//! `error: N targets failed:`. Cargo stopped when the last rerun hint has no target started after
//! it, no closing `targets failed` line, and is not the doc tests' (always the last target).
//! Lines are read bounded (`output_lines`), colours removed, nothing interpreted.

use super::summary::{self, Runner};
use super::{output_lines, without_colours};
use serde::{Deserialize, Serialize};

/// What one check run showed of its evidence's reach, as the assessment of the guards' sight
/// reads it (the engine's `inactive_guards`, which also makes it of a recorded check): a probe
/// run carries it from its own process to doctor.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CheckSight {
    /// How the check ended when it did not exit (none: it exited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_exited: Option<String>,
    /// Tests its sources named (none: no source named any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collected: Option<u64>,
    /// Why a declared report could not be used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_error: Option<String>,
    /// Why a declared coverage report gave no usable coverage (none: it did, or none declared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage_unusable: Option<String>,
    #[serde(default, skip_serializing_if = "OutputSight::is_empty")]
    pub output: OutputSight,
}

/// What the output showed about the evidence's reach.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct OutputSight {
    /// The runners whose summary lines the output holds (`pytest`, `go test`, `node --test`,
    /// `cargo-nextest`, `prove`), each once, in the order first seen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runners: Vec<String>,
    /// Cargo stopped at its first failing test target: the target as its rerun hint names it
    /// (`--lib`, `--bin NAME`, `--test NAME`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cargo_stopped_at: Option<String>,
    /// The test targets cargo started before it stopped, as its labels name them (`unittests
    /// src/lib.rs`, `tests/it.rs`), at most [`MAX_LABELS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cargo_ran: Vec<String>,
}

/// At most this many of cargo's target labels are kept.
pub const MAX_LABELS: usize = 20;

impl OutputSight {
    pub fn is_empty(&self) -> bool {
        self.runners.is_empty() && self.cargo_stopped_at.is_none()
    }

    /// Whether the output holds `runner`'s summary.
    pub fn saw(&self, runner: Runner) -> bool {
        self.runners.iter().any(|r| r == runner.name())
    }
}

/// The target a cargo rerun hint names (`error: test failed, to rerun pass `--lib``).
fn rerun_target(line: &str) -> Option<String> {
    let rest = line
        .strip_prefix("error: test failed, to rerun pass ")
        .or_else(|| line.strip_prefix("error: doctest failed, to rerun pass "))?;
    let target = rest.trim().trim_matches('`');
    (!target.is_empty()).then(|| crate::testreport::shown(target))
}

/// Cargo's closing line under `--no-fail-fast`: `error: 2 targets failed:` / `error: 1 target failed:`.
fn closes_no_fail_fast(line: &str) -> bool {
    let Some(rest) = line.strip_prefix("error: ") else {
        return false;
    };
    let Some((n, tail)) = rest.split_once(' ') else {
        return false;
    };
    n.parse::<u64>().is_ok() && (tail == "targets failed:" || tail == "target failed:")
}

/// The target a cargo label line starts (`Running unittests src/lib.rs (target/...)` gives
/// `unittests src/lib.rs`; `Doc-tests NAME` gives `Doc-tests NAME`).
fn started_target(line: &str) -> Option<String> {
    if line.starts_with("Doc-tests ") {
        return Some(crate::testreport::shown(line));
    }
    let rest = line.strip_prefix("Running ")?;
    let label = rest.split(" (").next().unwrap_or(rest).trim();
    (!label.is_empty()).then(|| crate::testreport::shown(label))
}

/// Cargo's account of its test targets in `stderr`: whether it stopped at a failing one.
fn cargo_stop(stderr: &[u8]) -> (Option<String>, Vec<String>) {
    let mut ran = Vec::new();
    let mut last_hint: Option<String> = None;
    let mut started_after_hint = false;
    let mut closed = false;
    for line in output_lines(stderr, "stderr") {
        let Ok((_, raw)) = line else { continue };
        let text = without_colours(&String::from_utf8_lossy(raw)).into_owned();
        let text = text.trim();
        if let Some(target) = started_target(text) {
            if ran.len() < MAX_LABELS {
                ran.push(target);
            }
            started_after_hint = true;
        } else if let Some(target) = rerun_target(text) {
            last_hint = Some(target);
            started_after_hint = false;
        } else if closes_no_fail_fast(text) {
            closed = true;
        }
    }
    let stopped = last_hint.filter(|t| !started_after_hint && !closed && t != "--doc");
    (stopped, ran)
}

/// What `stdout` and `stderr` of one check show about the reach of its evidence.
pub fn of_output(stdout: &[u8], stderr: &[u8]) -> OutputSight {
    let mut runners: Vec<String> = Vec::new();
    for (bytes, stream) in [(stdout, "stdout"), (stderr, "stderr")] {
        for line in summary::find(bytes, stream).unwrap_or_default() {
            let name = line.runner.name().to_string();
            if !runners.contains(&name) {
                runners.push(name);
            }
        }
    }
    let (cargo_stopped_at, ran) = cargo_stop(stderr);
    let cargo_ran = if cargo_stopped_at.is_some() {
        ran
    } else {
        Vec::new()
    };
    OutputSight {
        runners,
        cargo_stopped_at,
        cargo_ran,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAIL_FAST: &str = "   Compiling demo v0.1.0\n    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.66s\n     Running unittests src/lib.rs (target/debug/deps/demo-59992a12ff107b6e)\nerror: test failed, to rerun pass `--lib`\n";

    #[test]
    fn cargo_stopping_at_a_failing_unit_test_binary_is_seen_with_the_targets_it_ran() {
        let sight = of_output(b"", FAIL_FAST.as_bytes());
        assert_eq!(sight.cargo_stopped_at.as_deref(), Some("--lib"));
        assert_eq!(sight.cargo_ran, vec!["unittests src/lib.rs".to_string()]);
    }

    #[test]
    fn no_fail_fast_output_is_no_stop() {
        let stderr = "     Running unittests src/lib.rs (target/debug/deps/demo-5)\nerror: test failed, to rerun pass `--lib`\n     Running tests/it.rs (target/debug/deps/it-3)\n   Doc-tests demo\nerror: doctest failed, to rerun pass `--doc`\nerror: 2 targets failed:\n    `--lib`\n    `--doc`\n";
        assert_eq!(of_output(b"", stderr.as_bytes()), OutputSight::default());
    }

    #[test]
    fn a_failing_last_target_under_no_fail_fast_is_no_stop() {
        let stderr = "     Running unittests src/main.rs (target/debug/deps/app-5)\n     Running tests/cli.rs (target/debug/deps/cli-3)\nerror: test failed, to rerun pass `--test cli`\nerror: 1 target failed:\n    `--test cli`\n";
        assert_eq!(of_output(b"", stderr.as_bytes()).cargo_stopped_at, None);
    }

    #[test]
    fn failing_doc_tests_stop_nothing_after_them() {
        let stderr = "     Running unittests src/lib.rs (target/debug/deps/demo-5)\n   Doc-tests demo\nerror: doctest failed, to rerun pass `--doc`\n";
        assert_eq!(of_output(b"", stderr.as_bytes()).cargo_stopped_at, None);
    }

    #[test]
    fn coloured_cargo_output_is_read_the_same() {
        let stderr = "\u{1b}[1m\u{1b}[32m     Running\u{1b}[0m unittests src/lib.rs (target/debug/deps/demo-5)\n\u{1b}[1m\u{1b}[31merror\u{1b}[0m: test failed, to rerun pass `--lib`\n";
        assert_eq!(
            of_output(b"", stderr.as_bytes())
                .cargo_stopped_at
                .as_deref(),
            Some("--lib")
        );
    }

    #[test]
    fn the_runners_whose_summaries_were_printed_are_named_once() {
        let stdout = b"ok  \texample.com/calc\t0.002s\nFAIL\texample.com/calc/more\t0.003s\n";
        let sight = of_output(stdout, b"");
        assert_eq!(sight.runners, vec!["go test".to_string()]);
        assert!(sight.saw(Runner::GoTest));
        assert!(!sight.saw(Runner::Pytest));
    }
}
