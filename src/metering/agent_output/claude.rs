//! Claude Code's machine-readable output: `-p --output-format json` (one `result` object, or
//! with `--verbose` an array of every message ending in the `result`) and `--output-format
//! stream-json` (the same messages, one JSON object per line). docs/budget.md, "Metering",
//! "Claude Code", says what is read:
//!
//! - The `result` message is authoritative: one call per model of its `modelUsage`
//!   (`inputTokens`, `outputTokens`, `cacheReadInputTokens`, `cacheCreationInputTokens`, and
//!   `costUSD` as the money the CLI reported), or without `modelUsage` one call from its
//!   `usage` (`input_tokens`, `output_tokens`, `cache_read_input_tokens`,
//!   `cache_creation_input_tokens`) with `total_cost_usd`. A later `result` replaces an earlier
//!   one, which counts `duplicate`. A result with any number refused is malformed as a whole.
//! - Without a result (a truncated run), each `assistant` message's `message.model` and
//!   `message.usage`, tokens only, counted once per `message.id` (the stream repeats a message
//!   per content block; a repeat counts `duplicate`).
//! - Every other message type is ignored; a line or element that is no JSON object with a
//!   string `type` is malformed.

use super::tally::{self, is_blank, Capped, Tally};
use crate::metering::record::Call;
use crate::receipt::usage::TokenCounts;
use serde::Deserialize;
use std::collections::HashSet;

/// The longest `message.id` believed (Claude's are about 30 characters).
pub const MAX_ID_BYTES: usize = 256;

#[derive(Deserialize)]
struct Tagged {
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct ResultMessage {
    #[serde(default)]
    total_cost_usd: Option<f64>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default, rename = "modelUsage")]
    model_usage: Option<Capped<ModelUsage>>,
}

/// The Messages API's usage object (result `usage`, assistant `message.usage`).
#[derive(Deserialize)]
struct Usage {
    input_tokens: u64,
    output_tokens: u64,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

impl Usage {
    fn counts(&self) -> Option<TokenCounts> {
        tally::counts(
            self.input_tokens,
            self.output_tokens,
            self.cache_read_input_tokens.unwrap_or(0),
            self.cache_creation_input_tokens.unwrap_or(0),
        )
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ModelUsage {
    input_tokens: u64,
    output_tokens: u64,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default, rename = "costUSD")]
    cost_usd: Option<f64>,
}

#[derive(Deserialize)]
struct AssistantLine {
    message: AssistantMessage,
}

#[derive(Deserialize)]
struct AssistantMessage {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    usage: Option<Usage>,
}

/// The messages read so far, in either form.
#[derive(Debug, Default)]
pub struct Messages {
    /// Lines or elements not believed (malformed, oversized), whichever calls are chosen.
    input: Tally,
    /// The last result's calls.
    result: Option<Tally>,
    /// Results replaced by a later one.
    replaced_results: u64,
    /// The assistant messages' calls (used when no result came).
    assistant: Tally,
    ids: HashSet<String>,
}

impl Messages {
    /// One message (a stream line, an array element, or the whole object).
    pub fn message(&mut self, bytes: &[u8]) {
        let Some(tagged) = tally::is_object(bytes)
            .then(|| serde_json::from_slice::<Tagged>(bytes).ok())
            .flatten()
        else {
            self.input.malformed();
            return;
        };
        match tagged.kind.as_str() {
            "result" => match result_calls(bytes) {
                Some(calls) => {
                    if self.result.replace(calls).is_some() {
                        self.replaced_results += 1;
                    }
                }
                None => self.input.malformed(),
            },
            "assistant" => self.assistant(bytes),
            _ => {}
        }
    }

    /// A line of the stream (blank lines skipped).
    pub fn line(&mut self, bytes: &[u8]) {
        if !is_blank(bytes) {
            self.message(bytes);
        }
    }

    pub fn oversized(&mut self) {
        self.input.rejected.oversized += 1;
    }

    fn assistant(&mut self, bytes: &[u8]) {
        let Ok(line) = serde_json::from_slice::<AssistantLine>(bytes) else {
            self.input.malformed();
            return;
        };
        let message = line.message;
        let Some(usage) = message.usage else { return };
        let Some(tokens) = usage.counts() else {
            self.input.malformed();
            return;
        };
        if let Some(id) = message.id {
            if id.len() > MAX_ID_BYTES {
                self.input.malformed();
                return;
            }
            if self.ids.contains(&id) {
                self.assistant.rejected.duplicate += 1;
                return;
            }
            if self.assistant.calls.len() < tally::MAX_CALLS {
                self.ids.insert(id);
            }
        }
        self.assistant.push(Call {
            provider: None,
            model: tally::model(message.model.as_deref()),
            tokens,
            usd_micros: None,
        });
    }

    /// The calls believed: the result's if one came, else the assistant messages'.
    pub fn finish(self) -> Tally {
        let mut out = self.input;
        let chosen = match self.result {
            Some(result) => {
                out.rejected.duplicate += self.replaced_results;
                result
            }
            None => self.assistant,
        };
        out.rejected.malformed += chosen.rejected.malformed;
        out.rejected.duplicate += chosen.rejected.duplicate;
        out.rejected.oversized += chosen.rejected.oversized;
        out.calls = chosen.calls;
        out
    }
}

/// A result message's calls, or `None` when it is malformed.
fn result_calls(bytes: &[u8]) -> Option<Tally> {
    let result = serde_json::from_slice::<ResultMessage>(bytes).ok()?;
    let total = tally::cost(result.total_cost_usd)?;
    let mut calls = Tally::default();
    match result.model_usage.filter(|m| !m.entries.is_empty()) {
        Some(models) => {
            calls.rejected.oversized += models.dropped;
            for (name, m) in models.entries {
                let tokens = tally::counts(
                    m.input_tokens,
                    m.output_tokens,
                    m.cache_read_input_tokens.unwrap_or(0),
                    m.cache_creation_input_tokens.unwrap_or(0),
                )?;
                let usd_micros = tally::cost(m.cost_usd)?;
                calls.push(Call {
                    provider: None,
                    model: tally::model(Some(&name)),
                    tokens,
                    usd_micros,
                });
            }
        }
        None => {
            if result.usage.is_none() && total.is_none() {
                return None;
            }
            let tokens = match result.usage {
                Some(u) => u.counts()?,
                None => TokenCounts::default(),
            };
            calls.push(Call {
                provider: None,
                model: None,
                tokens,
                usd_micros: total,
            });
        }
    }
    Some(calls)
}

/// `-p --output-format json`: one object, or (`--verbose`) an array of messages, each read as
/// a stream line would be. An empty or blank document gives nothing.
pub fn document(doc: &[u8]) -> Tally {
    let mut messages = Messages::default();
    match doc.iter().position(|b| !b.is_ascii_whitespace()) {
        None => {}
        Some(i) if doc[i] == b'[' => {
            let whole = elements(&doc[i + 1..], &mut |element| {
                if is_blank(element) {
                    messages.input.malformed();
                } else {
                    messages.message(element);
                }
            });
            if !whole {
                messages.input.malformed();
            }
        }
        Some(_) => messages.message(doc),
    }
    messages.finish()
}

/// Call `each` on the bytes of every element of a JSON array whose opening `[` is already
/// consumed, found by a scan for the commas and the closing `]` outside strings at depth 0 (a
/// counter: no recursion, whatever the nesting; each element is then parsed on its own).
/// Returns `false` when the array is not closed (a truncated document: its last, unterminated
/// piece is not given to `each`, whole or cut) or is followed by anything but whitespace, so
/// that the caller counts the fault once.
fn elements(body: &[u8], each: &mut dyn FnMut(&[u8])) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let mut from = 0;
    for (i, &b) in body.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => depth += 1,
            b']' | b'}' if depth > 0 => depth -= 1,
            b',' if depth == 0 => {
                each(&body[from..i]);
                from = i + 1;
            }
            b']' if depth == 0 => {
                let last = &body[from..i];
                // `[]` has no element; `[a,]` has a blank one.
                if from > 0 || !is_blank(last) {
                    each(last);
                }
                return is_blank(&body[i + 1..]);
            }
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::super::{Format, OutputMeter};
    use super::*;
    use crate::receipt::usage::RejectedInput;

    const JSON: &[u8] = include_bytes!("../../../tests/fixtures/agent_output/claude.json");
    const VERBOSE: &[u8] =
        include_bytes!("../../../tests/fixtures/agent_output/claude_verbose.json");
    const STREAM: &[u8] =
        include_bytes!("../../../tests/fixtures/agent_output/claude_stream.jsonl");

    fn read(format: Format, bytes: &[u8]) -> crate::metering::record::SourceReading {
        let mut m = OutputMeter::new(format);
        m.feed(bytes);
        m.finish()
    }

    fn byte_by_byte(format: Format, bytes: &[u8]) -> crate::metering::record::SourceReading {
        let mut m = OutputMeter::new(format);
        for b in bytes {
            m.feed(std::slice::from_ref(b));
        }
        m.finish()
    }

    fn call(
        model: Option<&str>,
        input: u64,
        output: u64,
        cache_read: u64,
        cache_write: u64,
        usd_micros: Option<u64>,
    ) -> Call {
        Call {
            provider: None,
            model: model.map(String::from),
            tokens: TokenCounts {
                input,
                output,
                cache_read,
                cache_write,
            },
            usd_micros,
        }
    }

    /// The fixture's result: two models with the cost the CLI reported for each.
    fn fixture_calls() -> Vec<Call> {
        vec![
            call(
                Some("claude-3-5-haiku-20241022"),
                1210,
                88,
                0,
                0,
                Some(1320),
            ),
            call(
                Some("claude-sonnet-4-5-20250929"),
                9,
                1003,
                41_232,
                12_815,
                Some(75_498),
            ),
        ]
    }

    fn rejected(malformed: u64, duplicate: u64, oversized: u64) -> RejectedInput {
        RejectedInput {
            malformed,
            duplicate,
            oversized,
            overridden: 0,
        }
    }

    #[test]
    fn the_json_result_gives_one_call_per_model_with_the_cost_the_cli_reported() {
        let r = read(Format::ClaudeJson, JSON);
        assert_eq!(r.name, "claude_json");
        assert_eq!(r.kind, crate::metering::record::SourceKind::AgentOutput);
        assert_eq!(r.calls, fixture_calls());
        assert_eq!(r.rejected, RejectedInput::default());
    }

    #[test]
    fn the_verbose_array_gives_its_results_calls_and_ignores_the_other_messages() {
        let r = read(Format::ClaudeJson, VERBOSE);
        assert_eq!(r.calls, fixture_calls());
        assert_eq!(r.rejected, RejectedInput::default());
    }

    #[test]
    fn the_stream_result_line_is_authoritative_over_the_assistant_lines() {
        let r = read(Format::ClaudeStreamJson, STREAM);
        assert_eq!(r.name, "claude_stream_json");
        assert_eq!(r.calls, fixture_calls());
        assert_eq!(r.rejected, RejectedInput::default());
    }

    #[test]
    fn each_format_read_one_byte_at_a_time_gives_the_same_reading() {
        assert_eq!(
            byte_by_byte(Format::ClaudeJson, JSON),
            read(Format::ClaudeJson, JSON)
        );
        assert_eq!(
            byte_by_byte(Format::ClaudeJson, VERBOSE),
            read(Format::ClaudeJson, VERBOSE)
        );
        assert_eq!(
            byte_by_byte(Format::ClaudeStreamJson, STREAM),
            read(Format::ClaudeStreamJson, STREAM)
        );
    }

    #[test]
    fn a_stream_without_its_result_counts_each_assistant_message_once_tokens_only() {
        let cut = STREAM.len()
            - STREAM
                .rsplit(|b| *b == b'\n')
                .nth(1)
                .map_or(0, |l| l.len() + 1);
        let r = read(Format::ClaudeStreamJson, &STREAM[..cut]);
        assert_eq!(
            r.calls,
            vec![
                call(Some("claude-sonnet-4-5-20250929"), 3, 2, 0, 12_815, None),
                call(Some("claude-3-5-haiku-20241022"), 1210, 88, 0, 0, None),
                call(Some("claude-sonnet-4-5-20250929"), 6, 1001, 41_232, 0, None),
            ]
        );
        // msg_01 repeats once per content block: the repeat is a duplicate.
        assert_eq!(r.rejected, rejected(0, 1, 0));
    }

    #[test]
    fn a_stream_cut_mid_line_keeps_the_lines_before_and_counts_the_cut_line_malformed() {
        let at = STREAM.len() - 40;
        let r = read(Format::ClaudeStreamJson, &STREAM[..at]);
        assert_eq!(r.calls.len(), 3);
        assert_eq!(r.calls[0].usd_micros, None);
        assert_eq!(r.rejected, rejected(1, 1, 0));
    }

    #[test]
    fn a_document_cut_mid_way_is_malformed_and_gives_no_call() {
        let r = read(Format::ClaudeJson, &JSON[..JSON.len() / 2]);
        assert_eq!(r.calls, vec![]);
        assert_eq!(r.rejected, rejected(1, 0, 0));
    }

    #[test]
    fn a_verbose_array_cut_before_its_result_falls_back_to_the_assistant_messages() {
        let at = VERBOSE
            .windows(16)
            .position(|w| w == b"{\"type\":\"result\"")
            .unwrap();
        let r = read(Format::ClaudeJson, &VERBOSE[..at + 30]);
        assert_eq!(r.calls.len(), 3);
        assert!(r.calls.iter().all(|c| c.usd_micros.is_none()));
        assert_eq!(r.rejected, rejected(1, 1, 0));
    }

    #[test]
    fn malformed_lines_are_counted_and_the_good_ones_kept() {
        let bad = [
            "not json",
            "{\"no\":\"type\"}",
            "{\"type\":7}",
            "[1,2]",
            "[\"system\"]",
            "\0\0\0",
            "{\"type\":\"assistant\",\"message\":{\"id\":\"m1\",\"usage\":{\"input_tokens\":-1,\"output_tokens\":1}}}",
            "{\"type\":\"assistant\",\"message\":{\"id\":\"m2\",\"usage\":{\"input_tokens\":1.5,\"output_tokens\":1}}}",
            "{\"type\":\"assistant\",\"message\":{\"id\":\"m3\",\"usage\":{\"input_tokens\":1000000000001,\"output_tokens\":1}}}",
            "{\"type\":\"assistant\",\"message\":\"text\"}",
        ];
        let good = "{\"type\":\"assistant\",\"message\":{\"id\":\"m4\",\"model\":\"m\",\"usage\":{\"input_tokens\":5,\"output_tokens\":6}}}";
        let r = read(
            Format::ClaudeStreamJson,
            format!("{}\n{good}\n", bad.join("\n")).as_bytes(),
        );
        assert_eq!(r.calls, vec![call(Some("m"), 5, 6, 0, 0, None)]);
        assert_eq!(r.rejected, rejected(bad.len() as u64, 0, 0));
    }

    #[test]
    fn unknown_message_types_and_an_assistant_message_without_usage_are_ignored() {
        let lines = "{\"type\":\"system\",\"subtype\":\"init\",\"model\":\"x\"}\n{\"type\":\"future_event\",\"usage\":\"whatever\"}\n{\"type\":\"user\",\"message\":{\"content\":[]}}\n{\"type\":\"assistant\",\"message\":{\"id\":\"a\"}}\n";
        let r = read(Format::ClaudeStreamJson, lines.as_bytes());
        assert_eq!(r.calls, vec![]);
        assert_eq!(r.rejected, RejectedInput::default());
    }

    #[test]
    fn a_result_with_a_negative_nonnumeric_or_absurd_cost_is_refused_whole() {
        for cost in ["-0.5", "\"NaN\"", "1e300", "\"0.1\""] {
            let line = format!("{{\"type\":\"result\",\"total_cost_usd\":{cost},\"usage\":{{\"input_tokens\":1,\"output_tokens\":1}}}}\n");
            let r = read(Format::ClaudeStreamJson, line.as_bytes());
            assert_eq!(
                (r.calls.len(), r.rejected),
                (0, rejected(1, 0, 0)),
                "{cost}"
            );
            let per_model = format!("{{\"type\":\"result\",\"total_cost_usd\":0.1,\"modelUsage\":{{\"ok\":{{\"inputTokens\":1,\"outputTokens\":1,\"costUSD\":0.05}},\"bad\":{{\"inputTokens\":1,\"outputTokens\":1,\"costUSD\":{cost}}}}}}}");
            let r = read(Format::ClaudeJson, per_model.as_bytes());
            assert_eq!(
                (r.calls.len(), r.rejected),
                (0, rejected(1, 0, 0)),
                "{cost}"
            );
        }
    }

    #[test]
    fn a_result_without_model_usage_is_one_call_from_its_usage_and_total_cost() {
        let doc = br#"{"type":"result","subtype":"success","total_cost_usd":0.0034567,"usage":{"input_tokens":10,"cache_creation_input_tokens":20,"cache_read_input_tokens":30,"output_tokens":40,"service_tier":"standard"}}"#;
        let r = read(Format::ClaudeJson, doc);
        assert_eq!(r.calls, vec![call(None, 10, 40, 30, 20, Some(3457))]);
        let bare = read(
            Format::ClaudeJson,
            br#"{"type":"result","subtype":"success"}"#,
        );
        assert_eq!((bare.calls.len(), bare.rejected), (0, rejected(1, 0, 0)));
    }

    #[test]
    fn a_later_result_replaces_an_earlier_one_counted_duplicate() {
        let a = r#"{"type":"result","total_cost_usd":1.0,"usage":{"input_tokens":1,"output_tokens":1}}"#;
        let b = r#"{"type":"result","total_cost_usd":2.0,"usage":{"input_tokens":2,"output_tokens":2}}"#;
        let r = read(Format::ClaudeStreamJson, format!("{a}\n{b}\n").as_bytes());
        assert_eq!(r.calls, vec![call(None, 2, 2, 0, 0, Some(2_000_000))]);
        assert_eq!(r.rejected, rejected(0, 1, 0));
    }

    #[test]
    fn nul_bytes_in_a_document_make_it_malformed() {
        let mut doc = JSON.to_vec();
        doc.insert(10, 0);
        let r = read(Format::ClaudeJson, &doc);
        assert_eq!((r.calls.len(), r.rejected), (0, rejected(1, 0, 0)));
    }

    #[test]
    fn nesting_100000_deep_is_malformed_without_a_stack_overflow() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let in_model = format!("{{\"type\":\"result\",\"modelUsage\":{{\"m\":{deep}}}}}");
        let good = r#"{"type":"assistant","message":{"id":"a","model":"m","usage":{"input_tokens":1,"output_tokens":1}}}"#;
        let r = read(
            Format::ClaudeStreamJson,
            format!("{deep}\n{in_model}\n{good}\n").as_bytes(),
        );
        assert_eq!((r.calls.len(), r.rejected), (1, rejected(2, 0, 0)));
        // As a document: the array scan counts depth, each element fails in serde.
        let r = read(Format::ClaudeJson, deep.as_bytes());
        assert_eq!((r.calls.len(), r.rejected), (0, rejected(1, 0, 0)));
        let r = read(Format::ClaudeJson, in_model.as_bytes());
        assert_eq!((r.calls.len(), r.rejected), (0, rejected(1, 0, 0)));
    }

    #[test]
    fn a_hostile_model_name_is_cleaned() {
        let doc = "{\"type\":\"result\",\"modelUsage\":{\"evil\\u001b]0;title\\u0007\\n\":{\"inputTokens\":1,\"outputTokens\":1,\"costUSD\":0.000001}}}";
        let r = read(Format::ClaudeJson, doc.as_bytes());
        assert_eq!(r.calls[0].model.as_deref(), Some("evil??0?title??"));
    }

    #[test]
    fn an_overlong_message_id_is_malformed() {
        let line = format!("{{\"type\":\"assistant\",\"message\":{{\"id\":\"{}\",\"usage\":{{\"input_tokens\":1,\"output_tokens\":1}}}}}}\n", "i".repeat(MAX_ID_BYTES + 1));
        let r = read(Format::ClaudeStreamJson, line.as_bytes());
        assert_eq!((r.calls.len(), r.rejected), (0, rejected(1, 0, 0)));
    }

    #[test]
    fn array_elements_are_found_outside_strings_whatever_they_hold() {
        let mut got = Vec::new();
        assert!(elements(br#" {"a":"],[\"{"} , [1,[2]] ,3 ] "#, &mut |e| {
            got.push(String::from_utf8_lossy(e).trim().to_string())
        }));
        assert_eq!(got, vec![r#"{"a":"],[\"{"}"#, "[1,[2]]", "3"]);
        got.clear();
        assert!(elements(b" ]", &mut |e| got
            .push(String::from_utf8_lossy(e).to_string())));
        assert!(got.is_empty());
        assert!(!elements(b"1] trailing", &mut |_| {}));
        assert!(!elements(b"1, ", &mut |_| {}));
        got.clear();
        assert!(!elements(b"1, 2", &mut |e| got
            .push(String::from_utf8_lossy(e).to_string())));
        assert_eq!(got, vec!["1"]);
    }
}
