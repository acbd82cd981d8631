//! What a meter gathers while it reads the agent's output: the calls it believes (at most
//! [`MAX_CALLS`]; a call past that is counted `oversized`) and the input it does not, and the
//! checks every number must pass before it is believed: a token count is an integer from 0 to
//! [`MAX_TOKENS`] (serde refuses a negative, fractional or over-u64 one), a cost a finite
//! number from 0 to [`crate::metering::usage_file::MAX_LINE_USD`], kept as micro-USD rounded up.

use super::Format;
use crate::metering::record::{Call, SourceKind, SourceReading};
use crate::metering::usage_file::usd_to_micros;
use crate::receipt::usage::{RejectedInput, TokenCounts};

/// The most calls one reading keeps.
pub const MAX_CALLS: usize = 10_000;
/// The largest token count believed in one field of one call (a larger one is malformed).
pub const MAX_TOKENS: u64 = 1_000_000_000_000;

/// The calls and rejections gathered so far.
#[derive(Debug, Default)]
pub struct Tally {
    pub calls: Vec<Call>,
    pub rejected: RejectedInput,
}

impl Tally {
    /// Keep `call`, or count it `oversized` when [`MAX_CALLS`] are kept already.
    pub fn push(&mut self, call: Call) {
        if self.calls.len() >= MAX_CALLS {
            self.rejected.oversized += 1;
        } else {
            self.calls.push(call);
        }
    }

    pub fn malformed(&mut self) {
        self.rejected.malformed += 1;
    }

    /// The reading of `format`'s source.
    pub fn into_reading(self, format: Format) -> SourceReading {
        SourceReading {
            name: format.source_name().to_string(),
            kind: SourceKind::AgentOutput,
            calls: self.calls,
            rejected: self.rejected,
        }
    }
}

/// A JSON object's entries in document order, at most [`MAX_CALLS`] of them kept: the values of
/// the rest are skipped unread (`dropped` counts them), so an object of a million models costs no
/// more memory than the cap. Duplicate keys are kept as they come.
#[derive(Debug)]
pub struct Capped<T> {
    pub entries: Vec<(String, T)>,
    pub dropped: u64,
}

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Capped<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries<T>(std::marker::PhantomData<T>);
        impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for Entries<T> {
            type Value = Capped<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Capped<T>, A::Error> {
                let mut capped = Capped {
                    entries: Vec::new(),
                    dropped: 0,
                };
                loop {
                    if capped.entries.len() < MAX_CALLS {
                        let Some(key) = map.next_key::<String>()? else {
                            break;
                        };
                        capped.entries.push((key, map.next_value()?));
                    } else {
                        let Some(serde::de::IgnoredAny) = map.next_key()? else {
                            break;
                        };
                        map.next_value::<serde::de::IgnoredAny>()?;
                        capped.dropped += 1;
                    }
                }
                Ok(capped)
            }
        }
        deserializer.deserialize_map(Entries(std::marker::PhantomData))
    }
}

/// Token counts when every one is believable.
pub fn counts(input: u64, output: u64, cache_read: u64, cache_write: u64) -> Option<TokenCounts> {
    [input, output, cache_read, cache_write]
        .iter()
        .all(|n| *n <= MAX_TOKENS)
        .then_some(TokenCounts {
            input,
            output,
            cache_read,
            cache_write,
        })
}

/// A stated cost in micro-USD, `Some(None)` when none was stated, `None` when it is refused.
pub fn cost(usd: Option<f64>) -> Option<Option<u64>> {
    match usd {
        None => Some(None),
        Some(v) => usd_to_micros(v).map(Some),
    }
}

/// A model name as the receipt keeps it.
pub fn model(name: Option<&str>) -> Option<String> {
    name.map(crate::metering::clean_name)
}

/// Whether a line, element or document is (at least begins as) a JSON object: serde would
/// read a struct from an array too (`["result"]`), which no format writes.
pub fn is_object(bytes: &[u8]) -> bool {
    bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// Whether a line or element is nothing but whitespace (skipped, never malformed).
pub fn is_blank(bytes: &[u8]) -> bool {
    bytes.iter().all(u8::is_ascii_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_past_the_cap_are_counted_oversized_not_kept() {
        let mut t = Tally::default();
        for _ in 0..MAX_CALLS + 3 {
            t.push(Call {
                provider: None,
                model: None,
                tokens: TokenCounts::default(),
                usd_micros: None,
            });
        }
        assert_eq!(t.calls.len(), MAX_CALLS);
        assert_eq!(
            t.rejected,
            RejectedInput {
                oversized: 3,
                ..Default::default()
            }
        );
    }

    #[test]
    fn an_object_keeps_its_entries_in_order_up_to_the_cap_and_counts_the_rest_dropped() {
        let c: Capped<u64> = serde_json::from_str(r#"{"b":1,"a":2,"b":3}"#).unwrap();
        assert_eq!(
            (c.entries, c.dropped),
            (vec![("b".into(), 1), ("a".into(), 2), ("b".into(), 3)], 0)
        );
        let many = format!(
            "{{{}}}",
            (0..MAX_CALLS + 5)
                .map(|i| format!("\"k{i}\":{i}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        let c: Capped<u64> = serde_json::from_str(&many).unwrap();
        assert_eq!((c.entries.len(), c.dropped), (MAX_CALLS, 5));
        assert!(serde_json::from_str::<Capped<u64>>(r#"{"a":"x"}"#).is_err());
    }

    #[test]
    fn a_count_past_the_cap_and_a_negative_nonfinite_or_absurd_cost_are_refused() {
        assert_eq!(
            counts(1, 2, 3, 4),
            Some(TokenCounts {
                input: 1,
                output: 2,
                cache_read: 3,
                cache_write: 4
            })
        );
        assert_eq!(counts(MAX_TOKENS + 1, 0, 0, 0), None);
        assert_eq!(cost(Some(0.0123)), Some(Some(12_300)));
        assert_eq!(cost(None), Some(None));
        assert_eq!(cost(Some(-0.01)), None);
        assert_eq!(cost(Some(f64::NAN)), None);
        assert_eq!(cost(Some(f64::INFINITY)), None);
        assert_eq!(cost(Some(1e300)), None);
    }
}
