//! TAP 13/14 streams (node --test's tap reporter, Test::More scripts, anything prove runs), read
//! with a line parser (no maintained TAP crate for Rust covers TAP 13 and 14 subtests).
//!
//! A test point (`ok N - desc # SKIP|TODO reason` / `not ok ...`) is one entry. TAP 14 subtests
//! are indented by four spaces and closed by their parent's test point; an entry's id is the chain
//! of descriptions from the outermost level, joined with ` > ` (`suite > test`; a point without
//! a description is `#N`). `\#` and `\\` in a description are unescaped. SKIP and TODO points
//! are skipped (a TODO is an expected failure), other `not ok` points failed. A parent whose
//! YAML block says `type: 'suite'` (node's `describe`) is no entry itself; a failed suite with no
//! failed test inside (a hook failure) lands in the failing set by its id.
//!
//! Checked: the version line (13 or 14), one plan per level matching its number of points, test
//! numbers in sequence, every YAML block closed, every subtest closed by its parent's point.
//! `Bail out!` ends the stream and fails it as a unit. YAML diagnostics are skipped line by line;
//! only a top-level `type:` key is read, and the block of a `not ok` point is kept as that
//! test's excerpt ([`super::excerpt`]), dedented, never interpreted, as are the `#` diagnostic
//! lines right after it (Test::More's `#   Failed test ...`). node's closing comments (`# tests N`, `# pass N`, ...)
//! after the last plan are the declared counts.

use super::excerpt::Gathering;
use super::{
    bounded_id, lines, Counts, Format, Outcome, ParsedReport, Producer, ReportBuilder, ReportError,
};
use std::collections::BTreeMap;

/// Deepest subtest nesting accepted.
pub const MAX_DEPTH: usize = 64;

struct Entry {
    /// Descriptions from this entry up to (not including) the level being built, innermost first.
    path: Vec<String>,
    outcome: Outcome,
    suite: bool,
    /// Whether an entry below this one failed (a failed suite without one failed on its own).
    failed_inside: bool,
    /// The YAML diagnostic block of a `not ok` point.
    excerpt: Gathering,
}

#[derive(Default)]
struct Level {
    plan: Option<(u64, usize)>,
    points: u64,
    entries: Vec<Entry>,
    /// Index in `entries` of this level's last test point (its YAML block may follow).
    last_point: Option<usize>,
}

struct Yaml {
    indent: usize,
    opened_at: usize,
    /// Index of the level whose last point the block belongs to.
    level: usize,
}

struct Point<'a> {
    ok: bool,
    number: Option<u64>,
    description: String,
    directive: Option<&'a str>,
}

/// Parse a TAP stream.
pub fn parse(bytes: &[u8], report: &str) -> Result<ParsedReport, ReportError> {
    let err = |number: usize, detail: String| {
        ReportError::malformed(report, Format::Tap, format!("line {number}"), detail)
    };
    let mut levels: Vec<Level> = vec![Level::default()];
    let mut yaml: Option<Yaml> = None;
    let mut seen_tap = false;
    let mut bailed: Option<String> = None;
    let mut closing_comments: BTreeMap<String, u64> = BTreeMap::new();
    let mut last_line = 0;
    let mut after_point: Option<usize> = None;
    // The level whose last point the `#` diagnostic lines that follow it belong to (Test::More).
    let mut diagnosing: Option<usize> = None;
    for line in lines(bytes, report, Format::Tap) {
        let (number, raw) = line?;
        last_line = number;
        let text = String::from_utf8_lossy(raw);
        let indent = text.len() - text.trim_start_matches(' ').len();
        let body = text[indent..].trim_end();
        if let Some(block) = &yaml {
            if body.is_empty() {
                continue;
            }
            if indent == block.indent && body == "..." {
                yaml = None;
                continue;
            }
            if indent < block.indent {
                return Err(err(
                    block.opened_at,
                    "a YAML block that is never closed with `...`".into(),
                ));
            }
            let level = &mut levels[block.level];
            if let Some(entry) = level
                .last_point
                .and_then(|i| level.entries.get_mut(i))
                .filter(|e| e.outcome == Outcome::Failed)
            {
                entry.excerpt.push_line(text[block.indent..].trim_end());
            }
            if indent == block.indent {
                if let Some(value) = body.strip_prefix("type:") {
                    let value = value.trim().trim_matches(|c| c == '\'' || c == '"');
                    if value == "suite" {
                        let level = &mut levels[block.level];
                        if let Some(i) = level.last_point {
                            level.entries[i].suite = true;
                        }
                    }
                }
            }
            continue;
        }
        if body.is_empty() {
            continue;
        }
        if let Some(version) = body.strip_prefix("TAP version ") {
            // Lines before it that are no TAP (`npm test`'s banner) are ignored, as TAP says.
            if seen_tap || indent != 0 {
                return Err(err(
                    number,
                    "`TAP version` after the first test point or plan".into(),
                ));
            }
            if version != "13" && version != "14" {
                return Err(err(
                    number,
                    format!(
                        "TAP version {} is not supported (13 or 14)",
                        super::shown(version)
                    ),
                ));
            }
            seen_tap = true;
            continue;
        }
        if body.starts_with("Bail out!") {
            bailed = Some(body.to_string());
            break;
        }
        let point_before = after_point.take();
        if body == "---" {
            // A YAML block is indented two spaces more than the test point right before it.
            match point_before {
                Some(d) if indent == d * 4 + 2 => {
                    yaml = Some(Yaml {
                        indent,
                        opened_at: number,
                        level: d,
                    })
                }
                _ => {
                    return Err(err(
                        number,
                        "a YAML block that follows no test point".into(),
                    ))
                }
            }
            continue;
        }
        if indent % 4 != 0 {
            continue;
        }
        let depth = indent / 4;
        let diagnosed = diagnosing.take();
        if let (Some(d), Some(diagnostic)) = (diagnosed, body.strip_prefix('#')) {
            if d == depth && !diagnostic.trim_start().starts_with("Subtest:") {
                let level = &mut levels[d];
                if let Some(entry) = level
                    .last_point
                    .and_then(|i| level.entries.get_mut(i))
                    .filter(|e| e.outcome == Outcome::Failed)
                {
                    entry
                        .excerpt
                        .push_line(diagnostic.strip_prefix(' ').unwrap_or(diagnostic));
                }
                diagnosing = Some(d);
            }
        }
        if depth >= MAX_DEPTH {
            return Err(err(
                number,
                format!("subtests nested deeper than {MAX_DEPTH}"),
            ));
        }
        if let Some(plan) = parse_plan(body) {
            open_levels(&mut levels, depth, number, &err)?;
            if levels.len() > depth + 1 {
                return Err(err(number, "a plan while a subtest is still open".into()));
            }
            let level = &mut levels[depth];
            if level.plan.is_some() {
                return Err(err(number, "a second plan at the same level".into()));
            }
            level.plan = Some((plan, number));
            seen_tap = true;
            if depth == 0 {
                closing_comments.clear();
            }
            continue;
        }
        if let Some(point) = parse_point(body) {
            let point = point.map_err(|detail| err(number, detail))?;
            open_levels(&mut levels, depth, number, &err)?;
            let children = if levels.len() == depth + 2 {
                let child = levels.pop().unwrap_or_default();
                check_plan(&child, number, &err)?;
                child.entries
            } else if levels.len() > depth + 2 {
                return Err(err(
                    number,
                    "a subtest closed by a test point two levels up".into(),
                ));
            } else {
                Vec::new()
            };
            let level = &mut levels[depth];
            level.points += 1;
            if let Some(n) = point.number {
                if n != level.points {
                    return Err(err(
                        number,
                        format!("test point {n} out of sequence (expected {})", level.points),
                    ));
                }
            }
            let description = if point.description.is_empty() {
                format!("#{}", level.points)
            } else {
                point.description
            };
            let outcome = match point.directive {
                Some(_) => Outcome::Skipped,
                None if point.ok => Outcome::Passed,
                None => Outcome::Failed,
            };
            let failed_inside = children
                .iter()
                .any(|c| c.failed_inside || c.outcome == Outcome::Failed);
            for mut child in children {
                child.path.push(description.clone());
                level.entries.push(child);
            }
            level.entries.push(Entry {
                path: vec![description],
                outcome,
                suite: false,
                failed_inside,
                excerpt: Gathering::default(),
            });
            level.last_point = Some(level.entries.len() - 1);
            after_point = Some(depth);
            diagnosing = Some(depth);
            seen_tap = true;
            if depth == 0 {
                closing_comments.clear();
            }
            continue;
        }
        if depth == 0 {
            if let Some((key, value)) = body
                .strip_prefix('#')
                .and_then(|c| c.trim().split_once(' '))
            {
                if let Ok(n) = value.trim().parse::<f64>() {
                    closing_comments.insert(key.to_string(), n as u64);
                }
            }
        }
    }
    if let Some(block) = yaml {
        return Err(err(
            block.opened_at,
            "a YAML block that is never closed with `...`".into(),
        ));
    }
    let mut incomplete = Vec::new();
    if let Some(reason) = bailed {
        incomplete.push(format!("the stream bailed out: {}", super::shown(&reason)));
    } else {
        if levels.len() > 1 {
            return Err(err(
                last_line,
                "truncated: a subtest is never closed by its parent's test point".into(),
            ));
        }
        check_plan(&levels[0], last_line, &err)?;
    }
    let mut builder = ReportBuilder::default();
    let top = levels.swap_remove(0);
    let ids: Vec<(String, Entry)> = top
        .entries
        .into_iter()
        .map(|e| {
            let id = e
                .path
                .iter()
                .rev()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(" > ");
            bounded_id(id, report, Format::Tap, || "a test point".to_string()).map(|id| (id, e))
        })
        .collect::<Result<_, _>>()?;
    for (id, entry) in ids {
        let failed_unit = entry.suite && entry.outcome == Outcome::Failed && !entry.failed_inside;
        if (!entry.suite || failed_unit) && entry.outcome == Outcome::Failed {
            builder.add_excerpt(&id, entry.excerpt);
        }
        if !entry.suite {
            builder.add(id, entry.outcome);
        } else if failed_unit {
            builder.add_unit_failure(id);
        }
    }
    if !incomplete.is_empty() {
        builder.add_unit_failure("Bail out!".to_string());
    }
    let node = ["tests", "pass", "fail"]
        .iter()
        .all(|k| closing_comments.contains_key(*k));
    let declared = node.then(|| {
        let get = |k: &str| closing_comments.get(k).copied().unwrap_or(0);
        Counts {
            total: get("tests"),
            passed: get("pass"),
            failed: get("fail") + get("cancelled"),
            skipped: get("skipped") + get("todo"),
        }
    });
    Ok(builder.finish(
        Format::Tap,
        node.then_some(Producer::NodeTest),
        declared,
        incomplete,
    ))
}

fn open_levels(
    levels: &mut Vec<Level>,
    depth: usize,
    number: usize,
    err: &impl Fn(usize, String) -> ReportError,
) -> Result<(), ReportError> {
    if depth > levels.len() {
        return Err(err(
            number,
            "indented deeper than a subtest of the level above".into(),
        ));
    }
    if depth == levels.len() {
        levels.push(Level::default());
    }
    Ok(())
}

fn check_plan(
    level: &Level,
    number: usize,
    err: &impl Fn(usize, String) -> ReportError,
) -> Result<(), ReportError> {
    match level.plan {
        None => Err(err(
            number,
            format!(
                "no plan for the {} test points above (truncated?)",
                level.points
            ),
        )),
        Some((planned, at)) if planned != level.points => Err(err(
            at,
            format!(
                "the plan 1..{planned} does not match the {} test points",
                level.points
            ),
        )),
        Some(_) => Ok(()),
    }
}

/// `1..N` (with an optional `# reason`), as the planned number of points.
fn parse_plan(body: &str) -> Option<u64> {
    let rest = body.strip_prefix("1..")?;
    let digits = rest.split(|c: char| !c.is_ascii_digit()).next()?;
    let after = rest[digits.len()..].trim_start();
    if digits.is_empty() || !(after.is_empty() || after.starts_with('#')) {
        return None;
    }
    digits.parse().ok()
}

/// A test point line, or `None` when the line is not one.
fn parse_point(body: &str) -> Option<Result<Point<'_>, String>> {
    let (ok, rest) = if let Some(r) = body.strip_prefix("not ok") {
        (false, r)
    } else if let Some(r) = body.strip_prefix("ok") {
        (true, r)
    } else {
        return None;
    };
    if !(rest.is_empty() || rest.starts_with(' ')) {
        return None;
    }
    let rest = rest.trim_start();
    let digits = rest
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap_or("");
    let number = if digits.is_empty() {
        None
    } else {
        match digits.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => return Some(Err(format!("test number {digits} is too large"))),
        }
    };
    let rest = rest[digits.len()..].trim_start();
    let rest = rest
        .strip_prefix("- ")
        .or_else(|| rest.strip_prefix('-'))
        .unwrap_or(rest);
    let (description, directive) = split_directive(rest);
    Some(Ok(Point {
        ok,
        number,
        description,
        directive,
    }))
}

/// The unescaped description and the SKIP/TODO directive (its reason included), if any.
fn split_directive(rest: &str) -> (String, Option<&str>) {
    let mut description = String::new();
    let mut chars = rest.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, next @ ('#' | '\\'))) => description.push(next),
                Some((_, next)) => {
                    description.push('\\');
                    description.push(next);
                }
                None => description.push('\\'),
            },
            '#' => {
                let directive = rest[i + 1..].trim();
                let word = directive.get(..4).map(str::to_ascii_uppercase);
                if matches!(word.as_deref(), Some("SKIP" | "TODO")) {
                    return (description.trim().to_string(), Some(directive));
                }
                description.push('#');
            }
            other => description.push(other),
        }
    }
    (description.trim().to_string(), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testreport::ReportProblem;

    fn parsed(text: &str) -> ParsedReport {
        parse(text.as_bytes(), "r.tap").unwrap()
    }

    fn detail(text: &str) -> (String, String) {
        match parse(text.as_bytes(), "r.tap").unwrap_err().problem {
            ReportProblem::Malformed {
                location, detail, ..
            } => (location, detail),
            other => panic!("not malformed: {other:?}"),
        }
    }

    #[test]
    fn a_failing_point_keeps_its_diagnostics_and_a_passing_one_keeps_none() {
        let r = parsed("1..3\nok 1 - fine\n# chatter\nnot ok 2 - bad\n#   Failed test 'bad'\n#   at t/x.t line 7.\nnot ok 3 - yaml\n  ---\n  message: \"boom\"\n  ...\n# Looks like you failed 2 tests of 3.\n");
        assert_eq!(r.excerpts.keys().collect::<Vec<_>>(), ["bad", "yaml"]);
        assert_eq!(
            r.excerpts["bad"].text,
            "Failed test 'bad'\n  at t/x.t line 7."
        );
        assert!(
            r.excerpts["yaml"].text.starts_with("message: \"boom\"\n"),
            "{}",
            r.excerpts["yaml"].text
        );
    }

    #[test]
    fn points_become_sets_with_directives_as_skips() {
        let r = parsed("TAP version 13\n1..4\nok 1 - a\nnot ok 2 - b\nok 3 - c # SKIP later\nnot ok 4 - d # TODO bug\n");
        assert_eq!(r.failing.iter().collect::<Vec<_>>(), ["b"]);
        assert_eq!(r.skipped.iter().collect::<Vec<_>>(), ["c", "d"]);
        assert_eq!(
            r.counts,
            Counts {
                total: 4,
                passed: 1,
                failed: 1,
                skipped: 2
            }
        );
    }

    #[test]
    fn subtests_are_named_by_their_parents_chain() {
        let r = parsed("    ok 1 - inner\n    1..1\nok 1 - outer\n1..1\n");
        assert_eq!(
            r.collected.iter().collect::<Vec<_>>(),
            ["outer", "outer > inner"]
        );
    }

    #[test]
    fn a_node_suite_is_no_entry_and_a_hook_failure_in_it_fails_the_suite() {
        let text = "    ok 1 - inner\n    1..1\nnot ok 1 - suite\n  ---\n  type: 'suite'\n  error: |-\n    type: 'test'\n  ...\n1..1\n";
        let r = parsed(text);
        assert_eq!(r.collected.iter().collect::<Vec<_>>(), ["suite > inner"]);
        assert_eq!(r.failing.iter().collect::<Vec<_>>(), ["suite"]);
    }

    #[test]
    fn an_escaped_hash_is_part_of_the_description() {
        let r = parsed("1..1\nok 1 - a \\# b\n");
        assert_eq!(r.collected.iter().collect::<Vec<_>>(), ["a # b"]);
    }

    #[test]
    fn a_plan_that_does_not_match_the_points_is_an_error() {
        assert_eq!(
            detail("1..3\nok 1\nok 2\n"),
            (
                "line 1".into(),
                "the plan 1..3 does not match the 2 test points".into()
            )
        );
    }

    #[test]
    fn a_stream_without_a_plan_is_truncated() {
        assert_eq!(
            detail("TAP version 14\nok 1\nok 2\n").1,
            "no plan for the 2 test points above (truncated?)"
        );
    }

    #[test]
    fn numbers_out_of_sequence_are_an_error() {
        assert_eq!(
            detail("1..2\nok 1\nok 3\n").1,
            "test point 3 out of sequence (expected 2)"
        );
    }

    #[test]
    fn an_unclosed_yaml_block_is_an_error() {
        assert_eq!(
            detail("1..1\nok 1\n  ---\n  duration_ms: 1\n").1,
            "a YAML block that is never closed with `...`"
        );
    }

    #[test]
    fn a_subtest_never_closed_is_truncated() {
        assert_eq!(
            detail("    ok 1 - inner\n    1..1\n").1,
            "truncated: a subtest is never closed by its parent's test point"
        );
    }

    #[test]
    fn a_banner_before_the_version_line_is_ignored_but_a_late_version_line_is_an_error() {
        let r = parsed("\n> sample@0.1.0 test\n> node --test\n\nTAP version 13\nok 1 - a\n1..1\n");
        assert_eq!(r.collected.iter().collect::<Vec<_>>(), ["a"]);
        assert_eq!(
            detail("ok 1 - a\nTAP version 13\n1..1\n").1,
            "`TAP version` after the first test point or plan"
        );
    }

    #[test]
    fn an_unsupported_version_is_an_error() {
        assert_eq!(
            detail("TAP version 12\n1..0\n").1,
            "TAP version 12 is not supported (13 or 14)"
        );
    }

    #[test]
    fn bail_out_fails_the_stream_as_a_unit() {
        let r = parsed("1..3\nok 1\nBail out! database gone\n");
        assert_eq!(r.failing.iter().collect::<Vec<_>>(), ["Bail out!"]);
        assert_eq!(
            r.incomplete,
            vec!["the stream bailed out: Bail out! database gone".to_string()]
        );
    }

    #[test]
    fn node_closing_comments_are_the_declared_counts() {
        let r = parsed("ok 1 - a\n1..1\n# tests 1\n# suites 0\n# pass 1\n# fail 0\n# cancelled 0\n# skipped 0\n# todo 0\n# duration_ms 2.5\n");
        assert_eq!(r.producer, Some(Producer::NodeTest));
        assert_eq!(
            r.declared,
            Some(Counts {
                total: 1,
                passed: 1,
                failed: 0,
                skipped: 0
            })
        );
    }
}
