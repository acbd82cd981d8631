//! Gemini CLI's `--output-format json`: one document (pretty-printed over many lines) whose
//! `stats.models.<model>.tokens` are the session's tokens per model. docs/budget.md,
//! "Metering", "Gemini CLI", says what is read and how it maps: `prompt` includes `cached`
//! (the Gemini API's `promptTokenCount` includes `cachedContentTokenCount`), so `input` is
//! `prompt - cached + tool` (tool-use prompt tokens are billed as input; more cache than prompt
//! is malformed), `output` is `candidates + thoughts` (thinking is billed as output),
//! `cache_read` is `cached`. One call per model, tokens only: the output states no cost.
//! Every other field is ignored. A document is believed whole or not at all: one without
//! `stats.models`, or with any count refused, is one `malformed`.

use super::tally::{self, Capped, Tally};
use crate::metering::record::Call;
use serde::Deserialize;

#[derive(Deserialize)]
struct Output {
    stats: Stats,
}

#[derive(Deserialize)]
struct Stats {
    models: Capped<ModelStats>,
}

#[derive(Deserialize)]
struct ModelStats {
    tokens: Tokens,
}

#[derive(Deserialize)]
struct Tokens {
    prompt: u64,
    candidates: u64,
    #[serde(default)]
    cached: u64,
    #[serde(default)]
    thoughts: u64,
    #[serde(default)]
    tool: u64,
}

/// The calls of one document (an empty or blank one gives nothing).
pub fn document(doc: &[u8]) -> Tally {
    let mut tally = Tally::default();
    if tally::is_blank(doc) {
        return tally;
    }
    let Some(output) = tally::is_object(doc)
        .then(|| serde_json::from_slice::<Output>(doc).ok())
        .flatten()
    else {
        tally.malformed();
        return tally;
    };
    let models = output.stats.models;
    match calls(models.entries) {
        Some(calls) => {
            calls.into_iter().for_each(|c| tally.push(c));
            tally.rejected.oversized += models.dropped;
        }
        None => tally.malformed(),
    }
    tally
}

fn calls(models: Vec<(String, ModelStats)>) -> Option<Vec<Call>> {
    models
        .into_iter()
        .map(|(name, m)| {
            let t = m.tokens;
            let input = t.prompt.checked_sub(t.cached)?.checked_add(t.tool)?;
            let output = t.candidates.checked_add(t.thoughts)?;
            let tokens = tally::counts(input, output, t.cached, 0)?;
            Some(Call {
                provider: None,
                model: tally::model(Some(&name)),
                tokens,
                usd_micros: None,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::{Format, OutputMeter};
    use crate::metering::record::{Call, SourceReading};
    use crate::receipt::usage::{RejectedInput, TokenCounts};

    const DOC: &[u8] = include_bytes!("../../../tests/fixtures/agent_output/gemini.json");

    fn read(bytes: &[u8]) -> SourceReading {
        let mut m = OutputMeter::new(Format::GeminiJson);
        m.feed(bytes);
        m.finish()
    }

    fn malformed() -> RejectedInput {
        RejectedInput {
            malformed: 1,
            ..Default::default()
        }
    }

    #[test]
    fn each_models_tokens_map_to_input_output_and_cache_read_in_document_order() {
        let r = read(DOC);
        assert_eq!(r.name, "gemini_json");
        assert_eq!(
            r.calls,
            vec![
                // pro: prompt 24939 - cached 21263 + tool 12; candidates 20 + thoughts 154.
                Call {
                    provider: None,
                    model: Some("gemini-2.5-pro".into()),
                    tokens: TokenCounts {
                        input: 3688,
                        output: 174,
                        cache_read: 21_263,
                        cache_write: 0
                    },
                    usd_micros: None
                },
                // flash: prompt 4210, cached 0, tool 0; candidates 95, thoughts 0.
                Call {
                    provider: None,
                    model: Some("gemini-2.5-flash".into()),
                    tokens: TokenCounts {
                        input: 4210,
                        output: 95,
                        cache_read: 0,
                        cache_write: 0
                    },
                    usd_micros: None
                },
            ]
        );
        assert_eq!(r.rejected, RejectedInput::default());
    }

    #[test]
    fn the_document_fed_one_byte_at_a_time_gives_the_same_reading() {
        let mut m = OutputMeter::new(Format::GeminiJson);
        for b in DOC {
            m.feed(std::slice::from_ref(b));
        }
        assert_eq!(m.finish(), read(DOC));
    }

    #[test]
    fn a_truncated_document_is_malformed_and_gives_no_call() {
        let r = read(&DOC[..DOC.len() - 20]);
        assert_eq!((r.calls, r.rejected), (vec![], malformed()));
    }

    #[test]
    fn a_document_without_stats_or_with_a_refused_count_is_malformed_whole() {
        for doc in [
            r#"{"response":"hi"}"#,
            r#"{"error":{"type":"FatalAuthenticationError","message":"no key","code":41}}"#,
            r#"{"stats":{"models":{"ok":{"tokens":{"prompt":1,"candidates":1}},"bad":{"tokens":{"prompt":-1,"candidates":1}}}}}"#,
            r#"{"stats":{"models":{"m":{"tokens":{"prompt":1,"candidates":"1"}}}}}"#,
            r#"{"stats":{"models":{"m":{"tokens":{"prompt":1,"cached":2,"candidates":1}}}}}"#,
            r#"{"stats":{"models":{"m":{"tokens":{"prompt":1,"candidates":1e300}}}}}"#,
            "{\"stats\":\0{}}",
            "[1,2,3]",
            r#"[{"models":{"m":{"tokens":{"prompt":1,"candidates":1}}}}]"#,
        ] {
            let r = read(doc.as_bytes());
            assert_eq!((r.calls.len(), r.rejected), (0, malformed()), "{doc}");
        }
    }

    #[test]
    fn unknown_fields_are_ignored_and_an_empty_output_gives_nothing() {
        let r = read(br#"{"session_id":"s","response":"x","stats":{"models":{"m":{"api":{"totalRequests":1},"tokens":{"prompt":3,"candidates":4,"total":7,"input":3,"future":9}}},"tools":{"totalCalls":0},"files":{}}}"#);
        assert_eq!(r.calls.len(), 1);
        assert_eq!(r.rejected, RejectedInput::default());
        let r = read(b"  \n");
        assert_eq!((r.calls.len(), r.rejected), (0, RejectedInput::default()));
    }

    #[test]
    fn nesting_100000_deep_is_malformed_without_a_stack_overflow() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let r = read(deep.as_bytes());
        assert_eq!(r.rejected, malformed());
        let r = read(format!("{{\"stats\":{{\"models\":{{\"m\":{deep}}}}}}}").as_bytes());
        assert_eq!(r.rejected, malformed());
    }

    #[test]
    fn models_past_the_call_cap_are_counted_oversized_unread() {
        use super::super::tally::MAX_CALLS;
        let models: Vec<String> = (0..MAX_CALLS + 2)
            .map(|i| format!("\"m{i}\":{{\"tokens\":{{\"prompt\":1,\"candidates\":1}}}}"))
            .collect();
        let r = read(format!("{{\"stats\":{{\"models\":{{{}}}}}}}", models.join(",")).as_bytes());
        assert_eq!(
            (r.calls.len(), r.rejected),
            (
                MAX_CALLS,
                RejectedInput {
                    oversized: 2,
                    ..Default::default()
                }
            )
        );
        assert_eq!(r.calls[MAX_CALLS - 1].model.as_deref(), Some("m9999"));
    }

    #[test]
    fn a_hostile_model_name_is_cleaned() {
        let r = read("{\"stats\":{\"models\":{\"\\u001b[2Jx\\u0000\":{\"tokens\":{\"prompt\":1,\"candidates\":1}}}}}".as_bytes());
        assert_eq!(r.calls[0].model.as_deref(), Some("??2Jx?"));
    }
}
