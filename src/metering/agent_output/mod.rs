//! Meters of the agent CLIs' own machine-readable output (loop.toml `[metering] agent_output`):
//! an [`OutputMeter`] per run of the agent is fed its stdout (for aider, its analytics log) in
//! chunks of any size and split, and gives the calls it read as a
//! [`SourceReading`](crate::metering::record::SourceReading) of kind `AgentOutput`. Pure: no I/O
//! but the bytes it is fed, no engine import; it never fails and holds bounded memory.
//!
//! - [`lines`]: the bounded line splitter of the line formats; [`document`]: the bounded buffer
//!   of the single-document formats; [`tally`]: the calls gathered and the checks on numbers.
//! - [`claude`] (json and stream-json), [`codex`], [`gemini`], [`aider`]: one per CLI.
//!
//! docs/budget.md, "Metering", "The agent CLI's own output", states what each reads.

pub mod aider;
pub mod answer;
pub mod claude;
pub mod codex;
pub mod document;
pub mod gemini;
pub mod lines;
pub mod tally;

use crate::metering::record::SourceReading;
use document::{Document, DocumentBuffer};
use lines::{Line, LineSplitter};
use tally::Tally;

/// The longest line a line format reads (a longer one is skipped, counted `oversized`).
pub const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;
/// The most bytes a line format reads; the rest is one `oversized`.
pub const MAX_STREAM_BYTES: u64 = 256 * 1024 * 1024;
/// The largest document a single-document format reads (a larger one is one `oversized`).
pub const MAX_DOCUMENT_BYTES: usize = 32 * 1024 * 1024;

/// An agent CLI's output format, as loop.toml names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// Claude Code `-p --output-format json` (with or without `--verbose`).
    ClaudeJson,
    /// Claude Code `-p --output-format stream-json --verbose`.
    ClaudeStreamJson,
    /// Codex `codex exec --json`.
    CodexJson,
    /// Gemini CLI `--output-format json`.
    GeminiJson,
    /// aider `--analytics-log FILE` (the file, not stdout).
    AiderAnalytics,
}

impl Format {
    pub const ALL: [Format; 5] = [
        Format::ClaudeJson,
        Format::ClaudeStreamJson,
        Format::CodexJson,
        Format::GeminiJson,
        Format::AiderAnalytics,
    ];

    /// The source's name in the receipt's `usage` records.
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

/// The reader of a line format, fed whole lines.
#[derive(Debug)]
enum LineReader {
    Claude(claude::Messages),
    Codex(codex::Turns),
    Aider(aider::Events),
}

impl LineReader {
    fn take(&mut self, line: Line<'_>) {
        match (self, line) {
            (LineReader::Claude(r), Line::Whole(b)) => r.line(b),
            (LineReader::Claude(r), Line::Oversized) => r.oversized(),
            (LineReader::Codex(r), Line::Whole(b)) => r.line(b),
            (LineReader::Codex(r), Line::Oversized) => r.oversized(),
            (LineReader::Aider(r), Line::Whole(b)) => r.line(b),
            (LineReader::Aider(r), Line::Oversized) => r.oversized(),
        }
    }

    fn finish(self) -> Tally {
        match self {
            LineReader::Claude(r) => r.finish(),
            LineReader::Codex(r) => r.finish(),
            LineReader::Aider(r) => r.finish(),
        }
    }
}

#[derive(Debug)]
enum Input {
    Lines(LineSplitter, Box<LineReader>),
    Document(DocumentBuffer),
}

/// A push-based, bounded meter of one format.
#[derive(Debug)]
pub struct OutputMeter {
    format: Format,
    input: Input,
}

impl OutputMeter {
    pub fn new(format: Format) -> OutputMeter {
        let lines = |reader| {
            Input::Lines(
                LineSplitter::new(MAX_LINE_BYTES, MAX_STREAM_BYTES),
                Box::new(reader),
            )
        };
        let input = match format {
            Format::ClaudeJson | Format::GeminiJson => {
                Input::Document(DocumentBuffer::new(MAX_DOCUMENT_BYTES))
            }
            Format::ClaudeStreamJson => lines(LineReader::Claude(claude::Messages::default())),
            Format::CodexJson => lines(LineReader::Codex(codex::Turns::default())),
            Format::AiderAnalytics => lines(LineReader::Aider(aider::Events::default())),
        };
        OutputMeter { format, input }
    }

    /// Push the next bytes of the output. Never fails; memory stays bounded.
    pub fn feed(&mut self, bytes: &[u8]) {
        match &mut self.input {
            Input::Lines(splitter, reader) => splitter.feed(bytes, &mut |line| reader.take(line)),
            Input::Document(buffer) => buffer.feed(bytes),
        }
    }

    /// The end of the output: what was read, as the source `format.source_name()`.
    pub fn finish(self) -> SourceReading {
        let tally = match self.input {
            Input::Lines(splitter, mut reader) => {
                splitter.finish(&mut |line| reader.take(line));
                reader.finish()
            }
            Input::Document(buffer) => match (buffer.finish(), self.format) {
                (Document::Oversized, _) => {
                    let mut t = Tally::default();
                    t.rejected.oversized = 1;
                    t
                }
                (Document::Whole(doc), Format::GeminiJson) => gemini::document(&doc),
                (Document::Whole(doc), _) => claude::document(&doc),
            },
        };
        tally.into_reading(self.format)
    }

    /// The bytes the meter holds for an unfinished line or document (a buffer's capacity):
    /// never over [`MAX_LINE_BYTES`] or [`MAX_DOCUMENT_BYTES`].
    pub fn buffered_bytes(&self) -> usize {
        match &self.input {
            Input::Lines(splitter, _) => splitter.buffered_bytes(),
            Input::Document(buffer) => buffer.buffered_bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metering::record::SourceKind;
    use crate::receipt::usage::RejectedInput;

    fn cap(format: Format) -> usize {
        match format {
            Format::ClaudeJson | Format::GeminiJson => MAX_DOCUMENT_BYTES,
            _ => MAX_LINE_BYTES,
        }
    }

    /// A good record of each format, on one line.
    fn good(format: Format) -> &'static str {
        match format {
            Format::ClaudeJson | Format::ClaudeStreamJson => {
                r#"{"type":"result","total_cost_usd":0.5,"usage":{"input_tokens":1,"output_tokens":2}}"#
            }
            Format::CodexJson => {
                r#"{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":2}}"#
            }
            Format::GeminiJson => {
                r#"{"stats":{"models":{"m":{"tokens":{"prompt":1,"candidates":2}}}}}"#
            }
            Format::AiderAnalytics => {
                r#"{"event":"message_send","properties":{"prompt_tokens":1,"completion_tokens":2}}"#
            }
        }
    }

    #[test]
    fn the_formats_are_named_in_kebab_case_and_their_sources_in_snake_case() {
        let names: Vec<String> = Format::ALL
            .iter()
            .map(|f| serde_json::to_string(f).unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "\"claude-json\"",
                "\"claude-stream-json\"",
                "\"codex-json\"",
                "\"gemini-json\"",
                "\"aider-analytics\""
            ]
        );
        let sources: Vec<&str> = Format::ALL.iter().map(|f| f.source_name()).collect();
        assert_eq!(
            sources,
            [
                "claude_json",
                "claude_stream_json",
                "codex_json",
                "gemini_json",
                "aider_analytics"
            ]
        );
        assert_eq!(
            serde_json::from_str::<Format>("\"gemini-json\"").unwrap(),
            Format::GeminiJson
        );
    }

    #[test]
    fn nothing_fed_gives_no_call_and_nothing_rejected_in_every_format() {
        for format in Format::ALL {
            let r = OutputMeter::new(format).finish();
            assert_eq!(
                (r.name.as_str(), r.kind, r.calls.len(), r.rejected),
                (
                    format.source_name(),
                    SourceKind::AgentOutput,
                    0,
                    RejectedInput::default()
                )
            );
        }
    }

    #[test]
    fn a_good_record_is_read_in_every_format() {
        for format in Format::ALL {
            let mut m = OutputMeter::new(format);
            m.feed(good(format).as_bytes());
            let r = m.finish();
            assert_eq!(
                (r.calls.len(), r.rejected),
                (1, RejectedInput::default()),
                "{format:?}"
            );
            assert_eq!((r.calls[0].tokens.input, r.calls[0].tokens.output), (1, 2));
        }
    }

    #[test]
    fn a_one_gib_line_or_document_fed_in_one_mib_chunks_is_oversized_with_the_buffer_within_its_cap(
    ) {
        let chunk = vec![b'a'; 1 << 20];
        for format in Format::ALL {
            let mut m = OutputMeter::new(format);
            for _ in 0..1024 {
                m.feed(&chunk);
                assert!(
                    m.buffered_bytes() <= cap(format),
                    "{format:?}: {}",
                    m.buffered_bytes()
                );
            }
            m.feed(format!("\n{}\n", good(format)).as_bytes());
            let r = m.finish();
            // Past the stream cap (256 MiB) nothing more is read: the line after is cut too.
            assert_eq!(
                (r.calls.len(), r.rejected),
                (
                    0,
                    RejectedInput {
                        oversized: 1,
                        ..Default::default()
                    }
                ),
                "{format:?}"
            );
        }
    }

    #[test]
    fn a_claude_reading_combines_with_the_usage_file_and_its_cli_reported_cost_wins() {
        use crate::metering::{prices::Prices, record::combine, usage_file};
        use crate::receipt::usage::{MoneyBasis, UsageStage};
        let mut m = OutputMeter::new(Format::ClaudeJson);
        m.feed(include_bytes!(
            "../../../tests/fixtures/agent_output/claude.json"
        ));
        let file = usage_file::read(&br#"{"model":"claude-sonnet-4-5-20250929","input_tokens":9,"output_tokens":1003,"usd":0.07}"#[..]);
        let file = SourceReading {
            name: "usage_file".into(),
            kind: SourceKind::UsageFile,
            calls: file.calls,
            rejected: file.rejected,
        };
        let r = combine(
            4,
            UsageStage::Agent,
            vec![file, m.finish()],
            &Prices::default(),
        );
        assert_eq!(
            (r.usd_micros, r.basis),
            (Some(1320 + 75_498), MoneyBasis::Reported)
        );
        assert_eq!(r.models.len(), 2);
        assert_eq!(
            (r.sources[0].records, r.sources[0].rejected.overridden),
            (0, 1)
        );
        assert_eq!(
            (r.sources[1].name.as_str(), r.sources[1].records),
            ("claude_json", 2)
        );
    }

    #[test]
    fn after_a_line_over_the_line_cap_the_next_line_is_read() {
        let chunk = vec![b'a'; 1 << 20];
        for format in [
            Format::ClaudeStreamJson,
            Format::CodexJson,
            Format::AiderAnalytics,
        ] {
            let mut m = OutputMeter::new(format);
            for _ in 0..12 {
                m.feed(&chunk);
            }
            assert!(m.buffered_bytes() <= MAX_LINE_BYTES);
            m.feed(format!("\n{}\n", good(format)).as_bytes());
            let r = m.finish();
            assert_eq!(
                (r.calls.len(), r.rejected),
                (
                    1,
                    RejectedInput {
                        oversized: 1,
                        ..Default::default()
                    }
                ),
                "{format:?}"
            );
        }
    }
}
