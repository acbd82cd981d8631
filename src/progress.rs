//! The failing-set trend of a run: was the loop still making progress when it stopped?
//! Used by `explain-halt` for `max_iterations_reached`.

use serde::Serialize;

/// How many of the most recent iterations the trend looks at.
pub const WINDOW: usize = 3;

/// The trend of the failing-set size over the last iterations that recorded one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Trend {
    /// The failing set shrank from `from` to `to` over the last `over` iterations.
    Improving { from: usize, to: usize, over: usize },
    /// It did not shrink over the last `over` iterations.
    Stalled { from: usize, to: usize, over: usize },
    /// Fewer than two iterations recorded a failing set.
    Unknown,
}

/// `counts` holds the failing-set size of each iteration in order (`None`: not recorded).
pub fn trend(counts: &[Option<usize>]) -> Trend {
    let tail: Vec<usize> = counts.iter().rev().take(WINDOW).rev().copied().collect::<Option<Vec<_>>>().unwrap_or_default();
    if tail.len() < 2 {
        return Trend::Unknown;
    }
    let (from, to, over) = (tail[0], tail[tail.len() - 1], tail.len());
    if to < from {
        Trend::Improving { from, to, over }
    } else {
        Trend::Stalled { from, to, over }
    }
}

impl Trend {
    /// The operator-facing sentence.
    pub fn sentence(&self) -> String {
        match self {
            Trend::Improving { from, to, over } => format!(
                "still improving (failing set shrank from {from} to {to} over the last {over} iterations) - raise the limit"
            ),
            Trend::Stalled { from, to, over } => format!(
                "stalled (failing set went from {from} to {to} over the last {over} iterations) - raising the limit is unlikely to help"
            ),
            Trend::Unknown => "unknown (no failing set recorded; declare a --report (or run cargo test) to measure progress)".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shrinking_set_is_improving() {
        assert_eq!(trend(&[Some(9), Some(5), Some(4), Some(2)]), Trend::Improving { from: 5, to: 2, over: 3 });
    }

    #[test]
    fn a_flat_set_is_stalled() {
        assert_eq!(trend(&[Some(3), Some(3), Some(3)]), Trend::Stalled { from: 3, to: 3, over: 3 });
    }

    #[test]
    fn missing_sets_are_unknown() {
        assert_eq!(trend(&[None, None]), Trend::Unknown);
        assert_eq!(trend(&[Some(3)]), Trend::Unknown);
        assert_eq!(trend(&[Some(3), None, Some(1)]), Trend::Unknown);
    }
}
