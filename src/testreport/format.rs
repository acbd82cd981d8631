//! The report formats, their names (as `--report-format` and loop.toml spell them), and
//! detecting a report's format from its first bytes.

use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// A report format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// JUnit XML (pytest `--junitxml`, cargo-nextest, jest-junit, go-junit-report, Surefire).
    Junit,
    /// The event stream of `go test -json` (one JSON object a line).
    GoJson,
    /// TAP 13/14 (node --test's tap reporter, Test::More scripts run by prove).
    Tap,
    /// libtest's own human output (`cargo test`), saved to a file or captured.
    Libtest,
}

impl Format {
    pub const ALL: [Format; 4] = [Format::Junit, Format::GoJson, Format::Tap, Format::Libtest];

    pub fn name(self) -> &'static str {
        match self {
            Format::Junit => "junit",
            Format::GoJson => "go-json",
            Format::Tap => "tap",
            Format::Libtest => "libtest",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown format name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown report format {}: expected one of junit, go-json, tap, libtest", super::shown(.0))]
pub struct UnknownFormat(pub String);

impl FromStr for Format {
    type Err = UnknownFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Format::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| UnknownFormat(s.to_string()))
    }
}

/// The format a report's content shows, from its first meaningful line: `<` (after an optional
/// byte-order mark) is XML, a JSON object with an `Action` key is go -json, `TAP version`, a
/// plan or a test point is TAP; past a banner, a `TAP version 13|14` line or libtest's
/// `running N tests` on any of the first 1000 lines is TAP or libtest output. `None` when nothing
/// matches.
pub fn sniff(bytes: &[u8]) -> Option<Format> {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let first = bytes
        .split(|b| *b == b'\n')
        .take(1000)
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l).trim_ascii())
        .find(|l| !l.is_empty())?;
    if first.starts_with(b"<") {
        return Some(Format::Junit);
    }
    if first.starts_with(b"{") {
        let object: serde_json::Value = serde_json::from_slice(first).ok()?;
        return object.get("Action").map(|_| Format::GoJson);
    }
    if first.starts_with(b"TAP version ")
        || is_tap_plan(first)
        || first.starts_with(b"ok")
        || first.starts_with(b"not ok")
    {
        return Some(Format::Tap);
    }
    // A banner first (`npm test`'s, cargo's `Compiling ...`): a TAP version line or libtest's
    // `running N tests` further down.
    let head = || {
        bytes
            .split(|b| *b == b'\n')
            .take(1000)
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
    };
    if head().any(|l| l == b"TAP version 13" || l == b"TAP version 14") {
        return Some(Format::Tap);
    }
    head()
        .any(super::libtest::is_running_line)
        .then_some(Format::Libtest)
}

fn is_tap_plan(line: &[u8]) -> bool {
    let Some(rest) = line.strip_prefix(b"1..") else {
        return false;
    };
    rest.first().is_some_and(u8::is_ascii_digit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_an_unknown_name_is_refused() {
        for f in Format::ALL {
            assert_eq!(f.name().parse::<Format>(), Ok(f));
        }
        assert_eq!(
            "xunit".parse::<Format>(),
            Err(UnknownFormat("xunit".into()))
        );
    }

    #[test]
    fn each_format_is_recognised_by_its_first_line() {
        assert_eq!(
            sniff(b"\xef\xbb\xbf<?xml version=\"1.0\"?><testsuites/>"),
            Some(Format::Junit)
        );
        assert_eq!(
            sniff(b"\n{\"Action\":\"run\",\"Package\":\"p\"}\n"),
            Some(Format::GoJson)
        );
        assert_eq!(sniff(b"TAP version 13\n1..1\nok 1\n"), Some(Format::Tap));
        assert_eq!(sniff(b"1..4\nok 1 - adds\n"), Some(Format::Tap));
        assert_eq!(
            sniff(b"\nrunning 3 tests\ntest a ... ok\n"),
            Some(Format::Libtest)
        );
        assert_eq!(
            sniff(b"   Compiling demo v0.1.0\n\nrunning 1 test\n"),
            Some(Format::Libtest)
        );
        assert_eq!(
            sniff(b"\n> sample@0.1.0 test\n> node --test\n\nTAP version 13\n"),
            Some(Format::Tap)
        );
    }

    #[test]
    fn text_that_is_no_report_is_not_guessed() {
        assert_eq!(sniff(b"hello world\n"), None);
        assert_eq!(sniff(b"{\"not\":\"go\"}\n"), None);
        assert_eq!(sniff(b"   \n"), None);
    }
}
