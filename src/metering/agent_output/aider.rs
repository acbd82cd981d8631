//! aider's `--analytics-log FILE` (one JSON object per line, `{"event":...,"properties":{...},
//! "user_id":...,"time":...}`). docs/budget.md, "Metering", "aider", says what is read: each
//! `message_send` event is one call from its `properties`: `main_model` (the model),
//! `prompt_tokens` (input), `completion_tokens` (output) and `cost` (this message's cost, the
//! money aider reported; `total_cost` is its running sum and not read). aider does not split
//! cache tokens out of `prompt_tokens`. Other events are ignored; a line that is no JSON
//! object with a string `event` is malformed.

use super::tally::{self, is_blank, Tally};
use crate::metering::record::Call;
use serde::Deserialize;

#[derive(Deserialize)]
struct Tagged {
    event: String,
}

#[derive(Deserialize)]
struct MessageSend {
    properties: Properties,
}

#[derive(Deserialize)]
struct Properties {
    #[serde(default)]
    main_model: Option<String>,
    prompt_tokens: u64,
    completion_tokens: u64,
    #[serde(default)]
    cost: Option<f64>,
}

#[derive(Debug, Default)]
pub struct Events {
    tally: Tally,
}

impl Events {
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
        if tagged.event != "message_send" {
            return;
        }
        match serde_json::from_slice::<MessageSend>(bytes)
            .ok()
            .and_then(|m| call(m.properties))
        {
            Some(call) => self.tally.push(call),
            None => self.tally.malformed(),
        }
    }

    pub fn oversized(&mut self) {
        self.tally.rejected.oversized += 1;
    }

    pub fn finish(self) -> Tally {
        self.tally
    }
}

fn call(p: Properties) -> Option<Call> {
    let tokens = tally::counts(p.prompt_tokens, p.completion_tokens, 0, 0)?;
    let usd_micros = tally::cost(p.cost)?;
    Some(Call {
        provider: None,
        model: tally::model(p.main_model.as_deref()),
        tokens,
        usd_micros,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{Format, OutputMeter};
    use crate::metering::record::{Call, SourceReading};
    use crate::receipt::usage::{RejectedInput, TokenCounts};

    const LOG: &[u8] = include_bytes!("../../../tests/fixtures/agent_output/aider_analytics.jsonl");

    fn read(bytes: &[u8]) -> SourceReading {
        let mut m = OutputMeter::new(Format::AiderAnalytics);
        m.feed(bytes);
        m.finish()
    }

    fn call(model: &str, input: u64, output: u64, usd_micros: Option<u64>) -> Call {
        Call {
            provider: None,
            model: Some(model.into()),
            tokens: TokenCounts {
                input,
                output,
                ..Default::default()
            },
            usd_micros,
        }
    }

    #[test]
    fn each_message_send_is_one_call_with_the_cost_aider_reported() {
        let r = read(LOG);
        assert_eq!(r.name, "aider_analytics");
        assert_eq!(
            r.calls,
            vec![
                call(
                    "anthropic/claude-sonnet-4-5-20250929",
                    5210,
                    166,
                    Some(18_120)
                ),
                call(
                    "anthropic/claude-sonnet-4-5-20250929",
                    6044,
                    281,
                    Some(22_347)
                )
            ]
        );
        assert_eq!(r.rejected, RejectedInput::default());
    }

    #[test]
    fn the_log_fed_one_byte_at_a_time_gives_the_same_reading() {
        let mut m = OutputMeter::new(Format::AiderAnalytics);
        for b in LOG {
            m.feed(std::slice::from_ref(b));
        }
        assert_eq!(m.finish(), read(LOG));
    }

    #[test]
    fn a_log_cut_mid_line_keeps_the_whole_lines_and_counts_the_cut_one_malformed() {
        let at = LOG
            .windows(14)
            .rposition(|w| w == b"\"message_send\"")
            .unwrap()
            + 30;
        let r = read(&LOG[..at]);
        assert_eq!(r.calls.len(), 1);
        assert_eq!(
            r.rejected,
            RejectedInput {
                malformed: 1,
                ..Default::default()
            }
        );
    }

    #[test]
    fn malformed_lines_are_counted_and_the_good_ones_kept() {
        let bad = [
            "garbage",
            "\0",
            "[\"launched\"]",
            "{\"type\":\"message_send\"}",
            "{\"event\":\"message_send\"}",
            "{\"event\":\"message_send\",\"properties\":{\"prompt_tokens\":1}}",
            "{\"event\":\"message_send\",\"properties\":{\"prompt_tokens\":1,\"completion_tokens\":1,\"cost\":-0.01}}",
            "{\"event\":\"message_send\",\"properties\":{\"prompt_tokens\":1,\"completion_tokens\":1,\"cost\":\"NaN\"}}",
            "{\"event\":\"message_send\",\"properties\":{\"prompt_tokens\":1,\"completion_tokens\":1,\"cost\":1e300}}",
            "{\"event\":\"message_send\",\"properties\":{\"prompt_tokens\":1.5,\"completion_tokens\":1}}",
        ];
        let good = "{\"event\":\"message_send\",\"properties\":{\"main_model\":\"gpt-4o\",\"prompt_tokens\":7,\"completion_tokens\":8,\"cost\":0.0001}}";
        let r = read(format!("{}\n{good}", bad.join("\n")).as_bytes());
        assert_eq!(r.calls, vec![call("gpt-4o", 7, 8, Some(100))]);
        assert_eq!(
            r.rejected,
            RejectedInput {
                malformed: bad.len() as u64,
                ..Default::default()
            }
        );
    }

    #[test]
    fn unknown_events_are_ignored_and_a_missing_cost_is_not_stated() {
        let r = read(b"{\"event\":\"launched\",\"properties\":{}}\n{\"event\":\"message_send_starting\",\"properties\":{}}\n{\"event\":\"message_send\",\"properties\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n");
        assert_eq!(
            r.calls,
            vec![Call {
                provider: None,
                model: None,
                tokens: TokenCounts {
                    input: 1,
                    output: 2,
                    ..Default::default()
                },
                usd_micros: None
            }]
        );
        assert_eq!(r.rejected, RejectedInput::default());
    }

    #[test]
    fn a_hostile_model_name_is_cleaned() {
        let r = read(b"{\"event\":\"message_send\",\"properties\":{\"main_model\":\"m\\u001b[31m\\r\",\"prompt_tokens\":1,\"completion_tokens\":2}}\n");
        assert_eq!(r.calls[0].model.as_deref(), Some("m??31m?"));
    }

    #[test]
    fn nesting_100000_deep_is_malformed_without_a_stack_overflow() {
        let deep = "{\"a\":".repeat(100_000);
        let r = read(
            format!("{deep}\n{{\"event\":\"message_send\",\"properties\":{deep}}}\n").as_bytes(),
        );
        assert_eq!(
            r.rejected,
            RejectedInput {
                malformed: 2,
                ..Default::default()
            }
        );
    }
}
