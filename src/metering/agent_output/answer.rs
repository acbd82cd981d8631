//! The final text an agent CLI printed in its machine-readable output: what a judge that is an
//! agent CLI (`judge = "claude -p --output-format json ..."`, `[metering] judge_output`) answered,
//! so that its stdout can be metered and still carry its answer. The bytes are the judge's and
//! bounded by the caller; parsed as JSON values under serde_json's recursion limit.
//!
//! - `claude-json`: the document's `result` (an object), or the last `type: "result"` element's
//!   (a `--verbose` array).
//! - `claude-stream-json`: the last `type: "result"` line's `result`.
//! - `gemini-json`: the document's `response`.
//! - `codex-json`: the last `item.completed` line whose `item.type` is `agent_message`: its `text`.
//! - `aider-analytics`: none (its log is no output, and its stdout is prose).

use super::Format;
use serde_json::Value;

fn string_field<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

fn is_result(value: &Value) -> bool {
    string_field(value, "type") == Some("result")
}

/// The last line of `bytes` (JSON lines) that `pick` finds its text in.
fn last_line_text(bytes: &[u8], pick: impl Fn(&Value) -> Option<String>) -> Option<String> {
    bytes
        .split(|b| *b == b'\n')
        .filter_map(|line| serde_json::from_slice::<Value>(line).ok())
        .filter_map(|v| pick(&v))
        .last()
}

/// The final text of `bytes` printed in `format`, or why there is none.
pub fn final_text(format: Format, bytes: &[u8]) -> Result<String, &'static str> {
    let found = match format {
        Format::ClaudeJson => match serde_json::from_slice::<Value>(bytes)
            .map_err(|_| "its output is not one JSON document")?
        {
            Value::Array(items) => items
                .iter()
                .rev()
                .find(|v| is_result(v))
                .and_then(|v| string_field(v, "result"))
                .map(str::to_string),
            doc => string_field(&doc, "result").map(str::to_string),
        },
        Format::GeminiJson => {
            let doc = serde_json::from_slice::<Value>(bytes)
                .map_err(|_| "its output is not one JSON document")?;
            string_field(&doc, "response").map(str::to_string)
        }
        Format::ClaudeStreamJson => last_line_text(bytes, |v| {
            is_result(v)
                .then(|| string_field(v, "result").map(str::to_string))
                .flatten()
        }),
        Format::CodexJson => last_line_text(bytes, |v| {
            let item = v.get("item")?;
            (string_field(v, "type") == Some("item.completed")
                && string_field(item, "type") == Some("agent_message"))
            .then(|| string_field(item, "text").map(str::to_string))
            .flatten()
        }),
        Format::AiderAnalytics => return Err("aider's analytics log carries no answer"),
    };
    found.ok_or("its output has no final text")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claudes_result_document_and_verbose_array_give_the_result_text() {
        assert_eq!(
            final_text(
                Format::ClaudeJson,
                br#"{"type":"result","result":"{\"verdict\":\"approve\"}","total_cost_usd":0.1}"#
            ),
            Ok("{\"verdict\":\"approve\"}".into())
        );
        assert_eq!(final_text(Format::ClaudeJson, br#"[{"type":"system"},{"type":"result","result":"a"},{"type":"result","result":"b"}]"#), Ok("b".into()));
        assert_eq!(
            final_text(Format::ClaudeJson, br#"{"type":"result"}"#),
            Err("its output has no final text")
        );
        assert_eq!(
            final_text(Format::ClaudeJson, b"not json"),
            Err("its output is not one JSON document")
        );
    }

    #[test]
    fn the_stream_formats_give_their_last_final_message() {
        let stream = b"{\"type\":\"assistant\",\"message\":{}}\n{\"type\":\"result\",\"result\":\"done\"}\ngarbage\n";
        assert_eq!(
            final_text(Format::ClaudeStreamJson, stream),
            Ok("done".into())
        );
        let codex = b"{\"type\":\"item.completed\",\"item\":{\"type\":\"agent_message\",\"text\":\"one\"}}\n{\"type\":\"item.completed\",\"item\":{\"type\":\"reasoning\",\"text\":\"x\"}}\n{\"type\":\"item.completed\",\"item\":{\"type\":\"agent_message\",\"text\":\"two\"}}\n";
        assert_eq!(final_text(Format::CodexJson, codex), Ok("two".into()));
        assert_eq!(
            final_text(Format::GeminiJson, br#"{"response":"r","stats":{}}"#),
            Ok("r".into())
        );
        assert!(final_text(Format::AiderAnalytics, b"{}").is_err());
    }

    #[test]
    fn deep_nesting_is_no_answer_and_no_overflow() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(
            final_text(Format::ClaudeJson, deep.as_bytes()),
            Err("its output is not one JSON document")
        );
        assert_eq!(
            final_text(Format::CodexJson, deep.as_bytes()),
            Err("its output has no final text")
        );
    }
}
