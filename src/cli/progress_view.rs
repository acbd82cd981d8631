//! `run`'s progress on stderr, rendered from the engine's [`LoopEvent`]s (data flows engine ->
//! sink -> this view; the engine knows no terminal). Three styles: **live** on a terminal (an
//! indicatif line under the log showing the phase, its elapsed time, a bar with counts where the
//! engine knows a total, the failing-set size and its trend, the spend, the egress counts);
//! **plain** lines otherwise, under `NO_COLOR` or `TERM=dumb` (the same lines, one per phase
//! change or result, no escape codes); **none** under `--json` or `--quiet`. The lines share
//! their wording with `status --follow` (`super::follow`). Every line goes through
//! `crate::inert`: a halt's detail may name what the agent made.

use super::follow::{check_found, duration, label, stage};
use crate::engine::sink::{EventSink, LoopEvent, Phase};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

/// How `run` shows its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Live,
    Plain,
    None,
}

impl Style {
    /// The style for these flags and this terminal: none under `--json` or `--quiet`; live only
    /// when stderr is a terminal, `NO_COLOR` is unset and `TERM` is not `dumb`.
    pub fn choose(
        json: bool,
        quiet: bool,
        stderr_terminal: bool,
        no_color: bool,
        term: Option<&str>,
    ) -> Style {
        match () {
            _ if json || quiet => Style::None,
            _ if stderr_terminal && !no_color && term != Some("dumb") => Style::Live,
            _ => Style::Plain,
        }
    }

    /// [`Style::choose`] for this process's stderr and environment.
    pub fn detect(json: bool, quiet: bool) -> Style {
        let term = std::env::var("TERM").ok();
        Style::choose(
            json,
            quiet,
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").is_some(),
            term.as_deref(),
        )
    }
}

/// What the view knows of the run so far, from the events it was given.
#[derive(Debug, Default)]
struct Seen {
    phase: Option<(Phase, u64)>,
    /// The failing-set sizes of the last two checks (the baseline's included).
    previous_failing: Option<u64>,
    failing: Option<u64>,
    egress: Option<(u64, u64)>,
    spent: Option<String>,
}

fn label_of(iteration: u64) -> String {
    match iteration {
        0 => "t0".into(),
        n => label(&n.to_string()),
    }
}

/// `5 → 3 ↓` (fewer failing), `3 → 5 ↑` (more), `3 → 3 =`.
pub fn trend(before: u64, now: u64) -> String {
    let arrow = match now.cmp(&before) {
        std::cmp::Ordering::Less => "↓",
        std::cmp::Ordering::Greater => "↑",
        std::cmp::Ordering::Equal => "=",
    };
    format!("{before} → {now} {arrow}")
}

impl Seen {
    /// Take in `event`; the plain line it makes, if any (not yet escaped).
    fn line(&mut self, event: &LoopEvent<'_>) -> Option<String> {
        match *event {
            LoopEvent::PhaseStarted { phase, iteration } => {
                let changed = self.phase != Some((phase, iteration));
                self.phase = Some((phase, iteration));
                changed.then(|| stage(&label_of(iteration), phase.as_str(), "started"))
            }
            LoopEvent::Progress {
                phase,
                iteration,
                done,
                total,
            } => (done == total && total > 0).then(|| {
                stage(
                    &label_of(iteration),
                    phase.as_str(),
                    &format!("{done}/{total} done"),
                )
            }),
            LoopEvent::BaselineChecked {
                check_exit,
                failing,
            } => {
                self.record_failing(failing);
                Some(stage(
                    "t0",
                    "baseline",
                    &check_found(&dash(check_exit), &dash(failing)),
                ))
            }
            LoopEvent::Checked {
                iteration,
                check_exit,
                check_ms,
                failing,
                ..
            } => {
                self.record_failing(failing);
                let trend = match (self.previous_failing, failing) {
                    (Some(before), Some(now)) => format!("  ({})", trend(before, now)),
                    _ => String::new(),
                };
                Some(stage(
                    &label_of(iteration),
                    "check",
                    &format!(
                        "{}{trend}{}",
                        check_found(&check_exit.to_string(), &dash(failing)),
                        duration(check_ms)
                    ),
                ))
            }
            LoopEvent::Spent {
                usd_micros,
                unknown_money,
                tokens,
            } => {
                let unknown = match unknown_money {
                    0 => String::new(),
                    n => format!(", {n} of unknown money"),
                };
                let spent = format!(
                    "${}, {tokens} tokens{unknown}",
                    crate::rules::budget::usd(usd_micros)
                );
                self.spent = Some(spent.clone());
                let at = self.phase.map_or(0, |(_, n)| n);
                Some(stage(&label_of(at), "budget", &format!("spent {spent}")))
            }
            LoopEvent::Egress { allowed, denied } => {
                // Nothing through the proxy yet is no news; a change of the counts is.
                let changed = self.egress.unwrap_or_default() != (allowed, denied);
                self.egress = Some((allowed, denied));
                let at = self.phase.map_or(0, |(_, n)| n);
                changed.then(|| {
                    stage(
                        &label_of(at),
                        "egress",
                        &format!("{allowed} allowed, {denied} denied"),
                    )
                })
            }
            LoopEvent::HaltingBeforeIterations { detail } => Some(detail.to_string()),
            LoopEvent::HaltingAfterAgent { iteration, detail } => {
                Some(format!("iteration {iteration}: {detail}"))
            }
        }
    }

    fn record_failing(&mut self, failing: Option<u64>) {
        if failing.is_some() {
            self.previous_failing = self.failing;
            self.failing = failing;
        }
    }

    /// The live line's summary: the failing set and its trend, the spend, the egress.
    fn summary(&self) -> String {
        let mut parts = Vec::new();
        match (self.previous_failing, self.failing) {
            (Some(before), Some(now)) => parts.push(format!("failing {}", trend(before, now))),
            (None, Some(now)) => parts.push(format!("failing {now}")),
            _ => {}
        }
        if let Some(spent) = &self.spent {
            parts.push(format!("spent {spent}"));
        }
        if let Some((allowed, denied)) = self.egress.filter(|counts| *counts != (0, 0)) {
            parts.push(format!("egress {allowed} allowed, {denied} denied"));
        }
        parts.join("  ·  ")
    }
}

fn dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".into(), |v| v.to_string())
}

/// The sink `run` (and `reexecute`) hands the engine: it renders in its [`Style`].
pub struct ProgressView {
    style: Style,
    seen: Seen,
    bar: Option<ProgressBar>,
}

const SPINNER: &str = "{spinner} {prefix:.bold} {elapsed:>4}  {wide_msg}";
const COUNTED: &str = "{spinner} {prefix:.bold} {elapsed:>4} [{bar:24}] {pos}/{len}  {wide_msg}";

impl ProgressView {
    pub fn new(style: Style) -> ProgressView {
        let bar = (style == Style::Live).then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template(SPINNER) {
                bar.set_style(style);
            }
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        ProgressView {
            style,
            seen: Seen::default(),
            bar,
        }
    }

    /// The live line after `event`: the phase as its prefix, a bar when the phase has a total.
    fn redraw(&mut self, event: &LoopEvent<'_>) {
        let Some(bar) = &self.bar else { return };
        match *event {
            LoopEvent::PhaseStarted { phase, iteration } => {
                if let Ok(style) = ProgressStyle::with_template(SPINNER) {
                    bar.set_style(style);
                }
                bar.set_prefix(format!("{} {}", label_of(iteration), phase.as_str()));
                bar.reset_elapsed();
            }
            LoopEvent::Progress { done, total, .. } => {
                if let Ok(style) = ProgressStyle::with_template(COUNTED) {
                    bar.set_style(style.progress_chars("=> "));
                }
                bar.set_position(done);
                bar.set_length(total);
            }
            _ => {}
        }
        bar.set_message(self.seen.summary());
    }
}

impl EventSink for ProgressView {
    fn event(&mut self, event: &LoopEvent<'_>) {
        if self.style == Style::None {
            return;
        }
        let line = self
            .seen
            .line(event)
            .map(|l| format!("loopexec: {}", crate::inert::inert(&l)));
        match (&self.bar, line) {
            (Some(bar), Some(line)) => bar.println(line),
            (None, Some(line)) => eprintln!("{line}"),
            (_, None) => {}
        }
        self.redraw(event);
    }
}

impl Drop for ProgressView {
    fn drop(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(events: &[LoopEvent<'_>]) -> Vec<String> {
        let mut seen = Seen::default();
        events.iter().filter_map(|e| seen.line(e)).collect()
    }

    #[test]
    fn each_phase_change_and_result_is_one_plain_line_in_order() {
        let started = |phase, iteration| LoopEvent::PhaseStarted { phase, iteration };
        let events = [
            started(Phase::Baseline, 0),
            LoopEvent::BaselineChecked {
                check_exit: Some(1),
                failing: Some(5),
            },
            started(Phase::Agent, 1),
            LoopEvent::Egress {
                allowed: 2,
                denied: 1,
            },
            LoopEvent::Spent {
                usd_micros: 120_000,
                unknown_money: 0,
                tokens: 900,
            },
            started(Phase::Snapshot, 1),
            started(Phase::Check, 1),
            started(Phase::Guards, 1),
            LoopEvent::Checked {
                iteration: 1,
                exec_ms: 300,
                check_exit: 1,
                check_ms: 1500,
                failing: Some(3),
            },
        ];
        assert_eq!(
            lines(&events),
            [
                "t0   baseline started",
                "t0   baseline exit 1  failing 5",
                "#1   agent    started",
                "#1   egress   2 allowed, 1 denied",
                "#1   budget   spent $0.120000, 900 tokens",
                "#1   snapshot started",
                "#1   check    started",
                "#1   guards   started",
                "#1   check    exit 1  failing 3  (5 → 3 ↓)  1.5 s",
            ]
        );
    }

    #[test]
    fn a_phase_entered_again_in_the_same_iteration_is_not_a_new_line() {
        let again = LoopEvent::PhaseStarted {
            phase: Phase::Confirmation,
            iteration: 2,
        };
        assert_eq!(
            lines(&[again.clone(), again]),
            ["#2   confirmation started"]
        );
    }

    #[test]
    fn a_counted_phase_has_a_plain_line_only_when_it_is_done() {
        let progress = |done| LoopEvent::Progress {
            phase: Phase::Canary,
            iteration: 3,
            done,
            total: 4,
        };
        assert_eq!(
            lines(&[progress(0), progress(2), progress(4)]),
            ["#3   canary   4/4 done"]
        );
    }

    #[test]
    fn egress_counts_are_a_line_only_when_they_change() {
        let egress = LoopEvent::Egress {
            allowed: 1,
            denied: 0,
        };
        assert_eq!(
            lines(&[
                LoopEvent::Egress {
                    allowed: 0,
                    denied: 0
                },
                egress.clone(),
                egress
            ]),
            ["t0   egress   1 allowed, 0 denied"]
        );
    }

    #[test]
    fn a_growing_failing_set_trends_up_and_an_unreported_one_shows_a_dash() {
        let checked = |iteration, failing| LoopEvent::Checked {
            iteration,
            exec_ms: 1,
            check_exit: 1,
            check_ms: 0,
            failing,
        };
        assert_eq!(
            lines(&[
                checked(1, Some(2)),
                checked(2, Some(4)),
                checked(3, None),
                checked(4, Some(4))
            ]),
            [
                "#1   check    exit 1  failing 2  0.0 s",
                "#2   check    exit 1  failing 4  (2 → 4 ↑)  0.0 s",
                "#3   check    exit 1  failing -  0.0 s",
                "#4   check    exit 1  failing 4  (4 → 4 =)  0.0 s",
            ]
        );
    }

    #[test]
    fn the_live_summary_carries_the_trend_the_spend_and_the_egress() {
        let mut seen = Seen::default();
        for event in [
            LoopEvent::BaselineChecked {
                check_exit: Some(1),
                failing: Some(5),
            },
            LoopEvent::Checked {
                iteration: 1,
                exec_ms: 1,
                check_exit: 1,
                check_ms: 1,
                failing: Some(3),
            },
            LoopEvent::Spent {
                usd_micros: 0,
                unknown_money: 1,
                tokens: 10,
            },
            LoopEvent::Egress {
                allowed: 4,
                denied: 2,
            },
        ] {
            seen.line(&event);
        }
        assert_eq!(seen.summary(), "failing 5 → 3 ↓  ·  spent $0.000000, 10 tokens, 1 of unknown money  ·  egress 4 allowed, 2 denied");
    }

    #[test]
    fn live_only_on_a_terminal_without_no_color_or_a_dumb_term() {
        // (json, quiet, stderr a terminal, NO_COLOR set, TERM) -> style
        let cases = [
            ((false, false, true, false, Some("xterm")), Style::Live),
            ((false, false, false, false, Some("xterm")), Style::Plain),
            ((false, false, true, true, Some("xterm")), Style::Plain),
            ((false, false, true, false, Some("dumb")), Style::Plain),
            ((true, false, true, false, None), Style::None),
            ((false, true, true, false, None), Style::None),
        ];
        for ((json, quiet, terminal, no_color, term), style) in cases {
            assert_eq!(
                Style::choose(json, quiet, terminal, no_color, term),
                style,
                "{json} {quiet} {terminal} {no_color} {term:?}"
            );
        }
    }
}
