//! The agent CLI's own machine-readable output, metered (placeholder of the format names until the
//! meters land; replaced by the parsers' module).

/// An agent CLI output format loop.toml may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    ClaudeJson,
    ClaudeStreamJson,
    CodexJson,
    GeminiJson,
    AiderAnalytics,
}

impl Format {
    /// The source's name in the receipt.
    pub fn source_name(self) -> &'static str {
        match self {
            Format::ClaudeJson => "claude_json",
            Format::ClaudeStreamJson => "claude_stream_json",
            Format::CodexJson => "codex_json",
            Format::GeminiJson => "gemini_json",
            Format::AiderAnalytics => "aider_analytics",
        }
    }
}
