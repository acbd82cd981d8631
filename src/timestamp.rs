//! The one wall-clock timestamp of every record loopexec writes (the receipt's `ts`, state files,
//! acks, escalation packets, the egress audit): RFC 3339 in UTC with milliseconds, fixed width,
//! e.g. `2026-12-03T18:52:07.031Z`, so that records from the supervisor and from the proxy sort
//! and compare as text.

/// The current UTC time, as every record writes it.
pub fn now_rfc3339() -> String {
    format_rfc3339(time::OffsetDateTime::now_utc())
}

/// `at` (converted to UTC) in the records' format.
pub fn format_rfc3339(at: time::OffsetDateTime) -> String {
    let at = at.to_offset(time::UtcOffset::UTC);
    let format = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    at.format(format)
        .unwrap_or_else(|_| at.unix_timestamp().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timestamp_is_utc_with_exactly_three_subsecond_digits() {
        let at = time::macros::datetime!(2026-12-03 19:52:07.031_999 +01:00);
        assert_eq!(format_rfc3339(at), "2026-12-03T18:52:07.031Z");
        let whole = time::macros::datetime!(2026-01-02 03:04:05 UTC);
        assert_eq!(format_rfc3339(whole), "2026-01-02T03:04:05.000Z");
    }

    #[test]
    fn now_has_the_records_fixed_shape() {
        let text = now_rfc3339();
        let shape = regex::Regex::new(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$").unwrap();
        assert!(shape.is_match(&text), "{text}");
    }
}
