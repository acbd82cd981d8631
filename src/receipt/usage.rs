//! The metered usage of a run as its receipt records it: one `usage` event per stage of an
//! iteration that consumed something (the agent's model calls, the judge's, the check's CPU
//! time), with money in integer micro-USD or `unknown` (never 0 for unknown). The metering layer
//! produces these records, the history folds them per iteration, the budget rules judge them;
//! this module only holds their shape (docs/budget.md).

use serde::{Deserialize, Serialize};

/// The stage of an iteration a usage record meters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UsageStage {
    /// The agent's command: its model calls (usage file, the agent CLI's output) and egress.
    Agent,
    /// The judge's command: its model calls.
    Judge,
    /// The check (and its confirmations): CPU time at the configured rate.
    Check,
}

/// How the money of a record was obtained, strongest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MoneyBasis {
    /// A source that states USD itself (the agent CLI's own cost, or `usd` in a usage line).
    Reported,
    /// Tokens turned into USD by loop.toml's price table.
    Priced,
    /// A measured quantity (CPU seconds, bytes) at a configured rate.
    Rated,
    /// No source gave money and no table or rate applies: the money is unknown.
    Unknown,
}

/// Token counts (absent counts are 0: tokens a source does not report are not consumed by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TokenCounts {
    #[serde(default)]
    pub input: u64,
    #[serde(default)]
    pub output: u64,
    #[serde(default)]
    pub cache_read: u64,
    #[serde(default)]
    pub cache_write: u64,
}

impl TokenCounts {
    /// Every token counted, saturating.
    pub fn total(&self) -> u64 {
        self.input
            .saturating_add(self.output)
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write)
    }
}

/// The usage of one model within a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelUsage {
    /// The provider, when the source names it (Codex names none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The model id as the source spelled it (escaped and bounded by the metering reader);
    /// `None` when the source names no model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub tokens: TokenCounts,
    /// Micro-USD of this model's calls; `None`: unknown.
    #[serde(default)]
    pub usd_micros: Option<u64>,
}

/// Lines or events of a source that were not believed, counted (never fatal to accounting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RejectedInput {
    #[serde(default)]
    pub malformed: u64,
    #[serde(default)]
    pub duplicate: u64,
    #[serde(default)]
    pub oversized: u64,
    /// Records set aside because a stronger source covered the same calls.
    #[serde(default)]
    pub overridden: u64,
}

/// One source consulted for a record, and what it gave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageSource {
    /// `usage_file`, `claude_json`, `claude_stream_json`, `codex_json`, `gemini_json`,
    /// `aider_analytics`, `egress`, `check_cpu`, ...
    pub name: String,
    /// Records it gave that were counted.
    pub records: u64,
    #[serde(default)]
    pub rejected: RejectedInput,
}

/// The `usage` event: what one stage of one iteration consumed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRecord {
    pub iteration: u64,
    pub stage: UsageStage,
    /// Money in micro-USD; `None` when unknown (then `basis` is `unknown`).
    pub usd_micros: Option<u64>,
    pub basis: MoneyBasis,
    pub tokens: TokenCounts,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ModelUsage>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<UsageSource>,
    /// Bytes through the egress proxy in this stage (both directions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_bytes: Option<u64>,
    /// CPU time of the stage's zone from its cgroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ms: Option<u64>,
}
