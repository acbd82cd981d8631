//! Codex's `codex exec --json` event stream (one JSON object per line). docs/budget.md,
//! "Metering", "Codex", says what is read: the `usage` of `turn.completed` events
//! (`input_tokens`, `cached_input_tokens`, `cache_write_input_tokens`, `output_tokens`). Codex
//! builds it from the thread's running total, not the turn's, so the last `turn.completed` is
//! the run's usage and each earlier one (covered by it) counts `duplicate`. As in the Responses
//! API, cached and cache-write tokens are part of `input_tokens` and reasoning tokens part of
//! `output_tokens`: the call's `input` is `input_tokens` less both cache classes (more cache
//! than input is malformed). Tokens only: the stream names no model and states no cost. Other
//! event types are ignored; a line that is no JSON object with a string `type` is malformed.

use super::tally::{self, is_blank, Tally};
use crate::metering::record::Call;
use serde::Deserialize;

#[derive(Deserialize)]
struct Tagged {
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct TurnCompleted {
    usage: Usage,
}

#[derive(Deserialize)]
struct Usage {
    input_tokens: u64,
    #[serde(default)]
    cached_input_tokens: u64,
    #[serde(default)]
    cache_write_input_tokens: u64,
    output_tokens: u64,
}

#[derive(Debug, Default)]
pub struct Turns {
    tally: Tally,
    last: Option<Call>,
}

impl Turns {
    pub fn line(&mut self, bytes: &[u8]) {
        if is_blank(bytes) {
            return;
        }
        let Some(tagged) = tally::is_object(bytes)
            .then(|| serde_json::from_slice::<Tagged>(bytes).ok())
            .flatten()
        else {
            self.tally.malformed();
            return;
        };
        if tagged.kind != "turn.completed" {
            return;
        }
        match serde_json::from_slice::<TurnCompleted>(bytes)
            .ok()
            .and_then(|t| call(&t.usage))
        {
            Some(call) => {
                if self.last.replace(call).is_some() {
                    self.tally.rejected.duplicate += 1;
                }
            }
            None => self.tally.malformed(),
        }
    }

    pub fn oversized(&mut self) {
        self.tally.rejected.oversized += 1;
    }

    pub fn finish(mut self) -> Tally {
        if let Some(call) = self.last {
            self.tally.push(call);
        }
        self.tally
    }
}

fn call(u: &Usage) -> Option<Call> {
    let cached = u
        .cached_input_tokens
        .checked_add(u.cache_write_input_tokens)?;
    let input = u.input_tokens.checked_sub(cached)?;
    let tokens = tally::counts(
        input,
        u.output_tokens,
        u.cached_input_tokens,
        u.cache_write_input_tokens,
    )?;
    Some(Call {
        provider: None,
        model: None,
        tokens,
        usd_micros: None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{Format, OutputMeter};
    use crate::metering::record::{Call, SourceReading};
    use crate::receipt::usage::{RejectedInput, TokenCounts};

    const STREAM: &[u8] = include_bytes!("../../../tests/fixtures/agent_output/codex.jsonl");

    fn read(bytes: &[u8]) -> SourceReading {
        let mut m = OutputMeter::new(Format::CodexJson);
        m.feed(bytes);
        m.finish()
    }

    fn rejected(malformed: u64, duplicate: u64, oversized: u64) -> RejectedInput {
        RejectedInput {
            malformed,
            duplicate,
            oversized,
            overridden: 0,
        }
    }

    fn tokens(input: u64, output: u64, cache_read: u64, cache_write: u64) -> TokenCounts {
        TokenCounts {
            input,
            output,
            cache_read,
            cache_write,
        }
    }

    #[test]
    fn the_last_turn_completed_gives_the_runs_tokens_with_cached_input_split_out() {
        let r = read(STREAM);
        assert_eq!(r.name, "codex_json");
        // 31522 input of which 28416 cached: 3106 uncached.
        assert_eq!(
            r.calls,
            vec![Call {
                provider: None,
                model: None,
                tokens: tokens(3106, 1873, 28_416, 0),
                usd_micros: None
            }]
        );
        // The first turn.completed is the running total the second one covers.
        assert_eq!(r.rejected, rejected(0, 1, 0));
    }

    #[test]
    fn the_stream_fed_one_byte_at_a_time_gives_the_same_reading() {
        let mut m = OutputMeter::new(Format::CodexJson);
        for b in STREAM {
            m.feed(std::slice::from_ref(b));
        }
        assert_eq!(m.finish(), read(STREAM));
    }

    #[test]
    fn a_stream_cut_mid_line_keeps_the_earlier_total_and_counts_the_cut_line_malformed() {
        let r = read(&STREAM[..STREAM.len() - 30]);
        assert_eq!(r.calls[0].tokens, tokens(296, 512, 24_448, 0));
        assert_eq!(r.rejected, rejected(1, 0, 0));
    }

    #[test]
    fn malformed_lines_are_counted_and_the_good_ones_kept() {
        let bad = [
            "{not json",
            "\0\0",
            "[\"turn.started\"]",
            "{\"msg\":\"no type\"}",
            "{\"type\":\"turn.completed\"}",
            "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":-5,\"output_tokens\":1}}",
            "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":\"5\",\"output_tokens\":1}}",
            "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":5,\"cached_input_tokens\":6,\"output_tokens\":1}}",
            "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1e300}}",
            "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":5,\"output_tokens\":2000000000000}}",
        ];
        let good = "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":10,\"cached_input_tokens\":4,\"cache_write_input_tokens\":2,\"output_tokens\":3}}";
        let r = read(format!("{good}\n{}\n", bad.join("\n")).as_bytes());
        assert_eq!(r.calls[0].tokens, tokens(4, 3, 4, 2));
        assert_eq!(r.rejected, rejected(bad.len() as u64, 0, 0));
    }

    #[test]
    fn unknown_event_types_are_ignored() {
        let r = read(b"{\"type\":\"thread.started\",\"thread_id\":\"t\"}\n{\"type\":\"turn.failed\",\"error\":{\"message\":\"boom\"}}\n{\"type\":\"item.completed\",\"item\":{\"type\":\"agent_message\",\"text\":\"hi\"}}\n");
        assert_eq!(r.calls, vec![]);
        assert_eq!(r.rejected, RejectedInput::default());
    }

    #[test]
    fn nesting_100000_deep_is_malformed_without_a_stack_overflow() {
        let deep = "[".repeat(100_000);
        let in_usage = format!("{{\"type\":\"turn.completed\",\"usage\":{deep}}}");
        let r = read(format!("{deep}\n{in_usage}\n").as_bytes());
        assert_eq!(r.rejected, rejected(2, 0, 0));
    }
}
