//! Feedback to the agent: the small structured file the oracle side writes for the agent before
//! each agent call (the failing targets with bounded excerpts of their failure output, why the last
//! iteration was rejected or reverted, what is left of the iteration cap and budget). It is
//! regenerated each time and never read back by the oracle: nothing in it can influence a verdict.
//! This module owns its schema (`loopexec.feedback/v1`, docs/progress.md), its bounds and its two
//! renderings (JSON, and Markdown for agents that read prose).
//!
//! Everything that came from the check (a test id, a failure excerpt, a field of a recorded
//! rejection) is held as [`Untrusted`], whose text is private: it reaches either rendering only
//! through its one control-free form (`crate::inert`: every control, C1 and bidi character shown
//! as an escape, bounded in length), and in Markdown only inside a code span or a fence longer
//! than any backtick run in it. The prose around it is [`Sentence`]s of the oracle's own static
//! fragments, so no raw test id can reach the file by construction.

use crate::testreport::Excerpt;
use serde::{Serialize, Serializer};
use std::borrow::Cow;

/// The schema identifier written into every feedback file.
pub const SCHEMA: &str = "loopexec.feedback/v1";
/// At most this many failing targets are listed (the count is always exact).
pub const MAX_LISTED: usize = 50;
/// Each failure excerpt is cut to this many bytes (at a character boundary); the parsers keep
/// excerpts within the same bound.
pub const MAX_EXCERPT_BYTES: usize = crate::testreport::excerpt::MAX_EXCERPT_BYTES;

/// What of the visible check crosses to the agent (`[feedback] include` in loop.toml; default
/// `excerpts`). Whatever it says, nothing of a held-out check ever does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Include {
    /// The failing targets' ids and what their failures printed (bounded excerpts).
    #[default]
    Excerpts,
    /// The failing targets' ids only, no excerpt.
    Ids,
    /// No id, no excerpt and no count: only that an iteration was not kept, the iterations left
    /// and the budgets.
    Nothing,
}

impl Include {
    pub fn as_str(self) -> &'static str {
        match self {
            Include::Excerpts => "excerpts",
            Include::Ids => "ids",
            Include::Nothing => "nothing",
        }
    }
}

/// `[feedback]` of loop.toml, pinned in `run_start`'s config (absent in receipts pinned before
/// it: the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeedbackPins {
    #[serde(default)]
    pub include: Include,
}

impl FeedbackPins {
    pub fn is_default(&self) -> bool {
        *self == FeedbackPins::default()
    }
}

/// A test id is cut to this many bytes (at a character boundary) before it is rendered.
pub const MAX_ID_BYTES: usize = 512;

/// Text from the check's reports or its recorded judgement (a test id, a failure excerpt, a
/// field of a ratchet rejection). Its text is private: it is written into either rendering only
/// through [`Untrusted::rendered`] (JSON) and the Markdown code span / fence built from it, so
/// the raw text never reaches the feedback file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untrusted {
    text: String,
    /// Cut to its bound here.
    cut: bool,
    /// An excerpt keeps its line structure; everything else is one line.
    lines: bool,
}

impl Untrusted {
    /// One line of report text (a test id, a recorded value), bounded to [`MAX_ID_BYTES`].
    pub fn line(text: &str) -> Self {
        let (text, cut) = bounded(text, MAX_ID_BYTES);
        Untrusted {
            text,
            cut,
            lines: false,
        }
    }

    /// A failure excerpt (newlines kept), bounded to [`MAX_EXCERPT_BYTES`].
    pub fn excerpt(text: &str) -> Self {
        let (text, cut) = bounded(text, MAX_EXCERPT_BYTES);
        Untrusted {
            text,
            cut,
            lines: true,
        }
    }

    /// Whether it was cut to its bound.
    pub fn was_cut(&self) -> bool {
        self.cut
    }

    /// The one control-free form, as both renderings carry it: every control character (newlines
    /// too, except in an excerpt), C1 control and bidi override shown as a visible escape
    /// (`crate::inert`); a cut line ends in `...`.
    pub fn rendered(&self) -> Cow<'_, str> {
        let escaped = if self.lines {
            crate::inert::inert_lines(&self.text)
        } else {
            crate::inert::inert(&self.text)
        };
        match self.cut && !self.lines {
            true => Cow::Owned(format!("{escaped}...")),
            false => escaped,
        }
    }

    /// The Markdown inline code span: delimited by a backtick run longer than any inside, padded
    /// so a leading or trailing backtick cannot join the delimiter.
    fn code_span(&self) -> String {
        let text = self.rendered();
        let ticks = "`".repeat(longest_backtick_run(&text) + 1);
        format!("{ticks} {text} {ticks}")
    }

    /// The Markdown fenced block: a fence longer than any backtick run inside (at least three).
    fn code_block(&self) -> String {
        let text = self.rendered();
        let fence = "`".repeat(longest_backtick_run(&text).max(2) + 1);
        format!("{fence}\n{text}\n{fence}\n")
    }
}

impl Serialize for Untrusted {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.rendered())
    }
}

/// One piece of a [`Sentence`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// The oracle's own words.
    Fixed(&'static str),
    /// A number the oracle counted.
    Count(usize),
    /// Report-derived text, rendered through [`Untrusted`].
    Data(Untrusted),
}

/// A sentence made only of the oracle's static fragments and [`Untrusted`] data, so nothing from
/// a report is written into it raw.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sentence(Vec<Part>);

impl Sentence {
    pub fn new(words: &'static str) -> Self {
        Sentence(vec![Part::Fixed(words)])
    }

    /// The sentence followed by more of the oracle's words.
    pub fn words(mut self, words: &'static str) -> Self {
        self.0.push(Part::Fixed(words));
        self
    }

    /// The sentence followed by a number the oracle counted.
    pub fn count(mut self, n: usize) -> Self {
        self.0.push(Part::Count(n));
        self
    }

    /// The sentence followed by report-derived text.
    pub fn data(mut self, data: Untrusted) -> Self {
        self.0.push(Part::Data(data));
        self
    }

    /// As JSON carries it: the data in its control-free form.
    pub fn plain(&self) -> String {
        self.0
            .iter()
            .map(|p| match p {
                Part::Fixed(w) => Cow::Borrowed(*w),
                Part::Count(n) => Cow::Owned(n.to_string()),
                Part::Data(d) => d.rendered(),
            })
            .collect()
    }

    /// As Markdown shows it: the data in code spans.
    fn markdown(&self) -> String {
        self.0
            .iter()
            .map(|p| match p {
                Part::Fixed(w) => Cow::Borrowed(*w),
                Part::Count(n) => Cow::Owned(n.to_string()),
                Part::Data(d) => Cow::Owned(d.code_span()),
            })
            .collect()
    }
}

impl Serialize for Sentence {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.plain())
    }
}

/// One failing target and what its failure printed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailingTarget {
    pub test: Untrusted,
    /// What its failure printed, bounded, control characters escaped (`\x1b`), when the
    /// report showed it (omitted otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excerpt: Option<Untrusted>,
    /// Whether `excerpt` was cut (by the parser or here).
    pub truncated: bool,
}

/// Why the previous iteration was not kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rejected {
    pub iteration: u64,
    /// One sentence, e.g. "it broke tests that passed before: a, b".
    pub why: Sentence,
    /// The workspace was returned to this accepted iteration's tree (0: the starting commit);
    /// `None`: it was left as the rejected iteration made it (in place nothing is reverted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reverted_to: Option<u64>,
}

/// Connections the egress proxy refused during the previous agent step, for one destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EgressDenied {
    /// `host:port` as the agent asked for it (escaped, bounded); null for refusals before a
    /// request head, or for destinations past the proxy's bound, counted together.
    pub host: Option<Untrusted>,
    /// The proxy's reason code (docs/egress.md), e.g. `no_matching_rule`.
    pub reason: Untrusted,
    pub count: u64,
}

/// The feedback for the coming agent call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Feedback {
    pub schema: &'static str,
    /// The iteration about to start.
    pub iteration: u64,
    pub iterations_left: u64,
    /// Failing targets after the last accepted iteration (exact count; the list is bounded);
    /// null when no report named them (the check's exit code is all the run knows).
    pub failing_count: Option<usize>,
    pub failing: Vec<FailingTarget>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejected: Option<Rejected>,
    /// What is left of the run's budgets, by the oracle's name (e.g. `egress_bytes`), when the run
    /// has any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub budget_left: Vec<(&'static str, u64)>,
    /// What the egress proxy refused during the previous agent step, by destination (absent when
    /// it refused nothing): retrying those destinations, by any route, is refused the same way.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub egress_denied: Vec<EgressDenied>,
    /// What the operator let cross (`[feedback] include`), written only when it is not the
    /// default `excerpts`, so the agent knows what was withheld.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub include: Option<&'static str>,
    /// The task of the plan this run works on (task_list mode), absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<FeedbackTask>,
}

/// The task section (task_list mode): the plan's words for the task, each bounded and rendered
/// as untrusted text (the plan is a file of the repository, not the oracle's own words).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FeedbackTask {
    pub id: Untrusted,
    pub title: Untrusted,
    pub steps: Vec<Untrusted>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acceptance: Option<Untrusted>,
}

impl FeedbackTask {
    /// The task's id, title, steps and acceptance prose, as the plan words them.
    pub fn of(id: &str, title: &str, steps: &[String], acceptance: Option<&str>) -> FeedbackTask {
        FeedbackTask {
            id: Untrusted::line(id),
            title: Untrusted::line(title),
            steps: steps
                .iter()
                .take(MAX_LISTED)
                .map(|s| Untrusted::line(s))
                .collect(),
            acceptance: acceptance.map(Untrusted::excerpt),
        }
    }
}

/// The rejection's reason under `include = "nothing"`.
pub const WITHHELD_WHY: &str =
    "the loop did not keep it (the reason is withheld: [feedback] include = \"nothing\")";

/// Cut `text` to at most `max` bytes at a character boundary.
fn bounded(text: &str, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text.to_string(), false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].to_string(), true)
}

impl Feedback {
    /// Build the feedback; `failures` are (test id, its failure excerpt when known) of every
    /// failing target.
    pub fn new<'a>(
        iteration: u64,
        iterations_left: u64,
        failures: impl IntoIterator<Item = (&'a str, Option<&'a Excerpt>)>,
        rejected: Option<Rejected>,
        budget_left: Vec<(&'static str, u64)>,
    ) -> Self {
        let mut failing_count = 0;
        let mut failing = Vec::new();
        for (test, output) in failures {
            failing_count += 1;
            if failing.len() < MAX_LISTED {
                let excerpt = output.map(|o| (Untrusted::excerpt(&o.text), o.cut));
                let truncated = excerpt
                    .as_ref()
                    .is_some_and(|(e, cut_before)| e.was_cut() || *cut_before);
                failing.push(FailingTarget {
                    test: Untrusted::line(test),
                    excerpt: excerpt.map(|(e, _)| e),
                    truncated,
                });
            }
        }
        Feedback {
            schema: SCHEMA,
            iteration,
            iterations_left,
            failing_count: Some(failing_count),
            failing,
            rejected,
            budget_left,
            egress_denied: Vec::new(),
            include: None,
            task: None,
        }
    }

    /// The same feedback with only what `include` lets cross: `ids` drops every excerpt;
    /// `nothing` drops the ids, the excerpts, the count and the rejection's reason (which can
    /// name tests or scores).
    pub fn limited_to(mut self, include: Include) -> Self {
        match include {
            Include::Excerpts => return self,
            Include::Ids => {
                for target in &mut self.failing {
                    target.excerpt = None;
                    target.truncated = false;
                }
            }
            Include::Nothing => {
                self.failing_count = None;
                self.failing.clear();
                if let Some(r) = &mut self.rejected {
                    r.why = Sentence::new(WITHHELD_WHY);
                }
            }
        }
        self.include = Some(include.as_str());
        self
    }

    /// The same feedback telling the agent what the egress proxy refused in its previous step:
    /// (`host:port` or none, reason code, count).
    pub fn with_egress_denied<'a>(
        mut self,
        denied: impl IntoIterator<Item = (Option<&'a str>, &'a str, u64)>,
    ) -> Self {
        self.egress_denied = denied
            .into_iter()
            .map(|(host, reason, count)| EgressDenied {
                host: host.map(Untrusted::line),
                reason: Untrusted::line(reason),
                count,
            })
            .collect();
        self
    }

    /// The same feedback for a state whose failing targets are unknown (no readable report).
    pub fn failing_unknown(mut self) -> Self {
        self.failing_count = None;
        self.failing.clear();
        self
    }

    pub fn to_json(&self) -> String {
        // Serialising plain strings and integers cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The Markdown rendering. Report-derived text is only ever in a code span (ids, the data of
    /// a rejection) or a fenced block (excerpts), in its control-free form, delimited by more
    /// backticks than any run in it: it cannot break its line, close its block or forge headings.
    pub fn to_markdown(&self) -> String {
        let mut md = format!(
            "# loopexec feedback, before iteration {}\n\n",
            self.iteration
        );
        md.push_str(&format!(
            "Iterations left after this one: {}\n\n",
            self.iterations_left
        ));
        if let Some(task) = &self.task {
            md.push_str(&format!(
                "## Task {}\n\n{}\n\n",
                task.id.code_span(),
                task.title.code_span()
            ));
            for step in &task.steps {
                md.push_str(&format!("- {}\n", step.code_span()));
            }
            if !task.steps.is_empty() {
                md.push('\n');
            }
            if let Some(acceptance) = &task.acceptance {
                md.push_str("Acceptance (prose; the task's check decides):\n\n");
                md.push_str(&acceptance.code_block());
                md.push('\n');
            }
        }
        if let Some(r) = &self.rejected {
            md.push_str(&format!(
                "## Iteration {} was not kept\n\n{}\n",
                r.iteration,
                r.why.markdown()
            ));
            match r.reverted_to {
                Some(to) => md.push_str(&format!("The workspace was returned to the state after iteration {to}.\n\n")),
                None => md.push_str("The workspace was left as that iteration made it (in place, nothing is reverted).\n\n"),
            }
        }
        match (self.failing_count, self.include) {
            (Some(count), _) => md.push_str(&format!("## Failing targets: {count}\n\n")),
            (None, Some("nothing")) => md.push_str("## Failing targets: withheld by the operator ([feedback] include = \"nothing\")\n\n"),
            (None, _) => md.push_str("## Failing targets: unknown (the check left no readable report)\n\n"),
        }
        for target in &self.failing {
            md.push_str(&format!("### {}\n\n", target.test.code_span()));
            let Some(excerpt) = &target.excerpt else {
                continue;
            };
            md.push_str(&excerpt.code_block());
            if target.truncated {
                md.push_str("(excerpt cut)\n");
            }
            md.push('\n');
        }
        if let Some(more) = self
            .failing_count
            .and_then(|count| count.checked_sub(self.failing.len()))
            .filter(|more| *more > 0)
        {
            md.push_str(&format!("... and {more} more.\n\n"));
        }
        if !self.egress_denied.is_empty() {
            md.push_str("## Egress refused in the previous step\n\nRetrying these destinations through another route is refused the same way.\n\n");
            for d in &self.egress_denied {
                let host = d
                    .host
                    .as_ref()
                    .map_or_else(|| "(no destination named)".to_string(), |h| h.code_span());
                md.push_str(&format!(
                    "- {host}: {} x{}\n",
                    d.reason.code_span(),
                    d.count
                ));
            }
            md.push('\n');
        }
        for (name, left) in &self.budget_left {
            md.push_str(&format!("Budget left, {name}: {left}\n"));
        }
        md
    }
}

fn longest_backtick_run(text: &str) -> usize {
    let (mut longest, mut run) = (0, 0);
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    longest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn excerpt(text: &str) -> Excerpt {
        Excerpt {
            text: text.into(),
            cut: false,
        }
    }

    #[test]
    fn feedback_lists_failing_targets_with_their_excerpts() {
        let e = excerpt("assert 1 == 2");
        let f = Feedback::new(3, 2, [("tests/test_a.py::test_x", Some(&e))], None, vec![]);
        let json: serde_json::Value = serde_json::from_str(&f.to_json()).unwrap();
        assert_eq!(json["schema"], "loopexec.feedback/v1");
        assert_eq!(json["failing_count"], 1);
        assert_eq!(json["failing"][0]["test"], "tests/test_a.py::test_x");
        assert_eq!(json["failing"][0]["excerpt"], "assert 1 == 2");
        assert_eq!(json["failing"][0]["truncated"], false);
    }

    #[test]
    fn excerpts_are_cut_at_a_character_boundary() {
        let long = excerpt(&"é".repeat(MAX_EXCERPT_BYTES));
        let f = Feedback::new(1, 0, [("t", Some(&long))], None, vec![]);
        assert!(f.failing[0].truncated);
        let excerpt = f.failing[0].excerpt.as_ref().unwrap().rendered();
        assert!(excerpt.len() <= MAX_EXCERPT_BYTES);
        assert_eq!(excerpt.len() % 2, 0);
    }

    #[test]
    fn the_list_is_bounded_and_the_count_exact() {
        let ids: Vec<String> = (0..MAX_LISTED + 7).map(|i| format!("t{i}")).collect();
        let boom = excerpt("boom");
        let f = Feedback::new(
            1,
            0,
            ids.iter().map(|s| (s.as_str(), Some(&boom))),
            None,
            vec![],
        );
        assert_eq!(f.failing_count, Some(MAX_LISTED + 7));
        assert_eq!(f.failing.len(), MAX_LISTED);
        assert!(f.to_markdown().contains("... and 7 more."));
    }

    #[test]
    fn a_rejection_says_why_and_where_the_workspace_went() {
        let why = Sentence::new("it broke tests that passed before: ").data(Untrusted::line("b"));
        let rejected = Rejected {
            iteration: 4,
            why,
            reverted_to: Some(2),
        };
        let x = excerpt("x");
        let md = Feedback::new(5, 1, [("a", Some(&x))], Some(rejected), vec![]).to_markdown();
        assert!(
            md.contains(
                "## Iteration 4 was not kept\n\nit broke tests that passed before: ` b `\n"
            ),
            "{md}"
        );
        assert!(md.contains("returned to the state after iteration 2."));
    }

    #[test]
    fn an_excerpt_cannot_close_its_markdown_block() {
        let forged = excerpt("```\n# forged heading\n```");
        let md = Feedback::new(1, 0, [("t\n# forged", Some(&forged))], None, vec![]).to_markdown();
        assert!(
            md.contains("### ` t\\n# forged `\n\n````\n```\n# forged heading\n```\n````\n"),
            "{md}"
        );
    }

    #[test]
    fn an_excerpt_the_parser_cut_stays_marked_cut() {
        let cut = Excerpt {
            text: "boom".into(),
            cut: true,
        };
        let f = Feedback::new(1, 0, [("t", Some(&cut))], None, vec![]);
        assert!(f.failing[0].truncated);
        assert!(f.to_markdown().contains("```\nboom\n```\n(excerpt cut)\n"));
    }

    #[test]
    fn unknown_failing_targets_are_null_not_zero() {
        let f = Feedback::new(2, 1, [], None, vec![]).failing_unknown();
        let json: serde_json::Value = serde_json::from_str(&f.to_json()).unwrap();
        assert_eq!(json["failing_count"], serde_json::Value::Null);
        assert!(f
            .to_markdown()
            .contains("## Failing targets: unknown (the check left no readable report)\n"));
    }

    #[test]
    fn include_ids_keeps_the_ids_and_drops_every_excerpt() {
        let e = excerpt("assert 1 == 2");
        let f = Feedback::new(3, 2, [("a", Some(&e)), ("b", Some(&e))], None, vec![])
            .limited_to(Include::Ids);
        let json: serde_json::Value = serde_json::from_str(&f.to_json()).unwrap();
        assert_eq!(
            json["failing"],
            serde_json::json!([{"test": "a", "truncated": false}, {"test": "b", "truncated": false}])
        );
        assert_eq!(
            (json["failing_count"].clone(), json["include"].clone()),
            (serde_json::json!(2), serde_json::json!("ids"))
        );
        assert!(!f.to_markdown().contains("assert 1 == 2"));
    }

    #[test]
    fn include_nothing_gives_no_id_no_excerpt_no_count_and_no_reason() {
        let e = excerpt("assert 1 == 2");
        let why = Sentence::new("it broke tests that passed before: ").data(Untrusted::line("a"));
        let rejected = Rejected {
            iteration: 1,
            why,
            reverted_to: Some(0),
        };
        let f = Feedback::new(
            2,
            1,
            [("tests/t.py::test_secret", Some(&e))],
            Some(rejected),
            vec![],
        )
        .limited_to(Include::Nothing);
        let json: serde_json::Value = serde_json::from_str(&f.to_json()).unwrap();
        assert_eq!(json["failing"], serde_json::json!([]));
        assert_eq!(json["failing_count"], serde_json::Value::Null);
        assert_eq!(json["include"], "nothing");
        assert_eq!(json["rejected"]["why"], WITHHELD_WHY);
        let (text, md) = (f.to_json(), f.to_markdown());
        for leaked in ["test_secret", "assert 1 == 2", "broke tests"] {
            assert!(
                !text.contains(leaked) && !md.contains(leaked),
                "{leaked} crossed: {text}\n{md}"
            );
        }
        assert!(
            md.contains(
                "## Failing targets: withheld by the operator ([feedback] include = \"nothing\")\n"
            ),
            "{md}"
        );
    }

    #[test]
    fn include_excerpts_is_the_feedback_unchanged() {
        let e = excerpt("x");
        let f = Feedback::new(1, 0, [("t", Some(&e))], None, vec![]);
        assert_eq!(f.clone().limited_to(Include::Excerpts), f);
        assert!(!f.to_json().contains("\"include\""));
    }

    #[test]
    fn a_target_without_known_output_is_listed_without_an_excerpt() {
        let f = Feedback::new(2, 1, [("t", None)], None, vec![]);
        let json: serde_json::Value = serde_json::from_str(&f.to_json()).unwrap();
        assert_eq!(
            json["failing"][0],
            serde_json::json!({"test": "t", "truncated": false})
        );
        assert!(f
            .to_markdown()
            .contains("## Failing targets: 1\n\n### ` t `\n\n"));
    }
}
