//! How a command that a zone ran ended: the one type both the zones (which observe it) and the
//! receipt (which records it) speak, so neither has to import the other for it.

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ending {
    /// Exited with this code.
    Exited { code: i32 },
    /// Killed by this signal (not by us).
    Signaled { signal: i32 },
    /// Killed by us when its timeout expired.
    TimedOut { after_ms: u64 },
    /// Could not be started at all.
    FailedToStart { reason: String },
    /// Interrupted because loopexec itself was asked to stop (SIGINT/SIGTERM).
    Interrupted { signal: i32 },
    /// Killed by us under the stall rule (`--stall-timeout`; docs/gates.md, "Liveness"): no
    /// output for `quiet_ms`, in which it used `cpu_ms` of CPU (`None`: not readable); `busy`
    /// when it was judged by the busy limit (CPU progress, no output).
    Stalled {
        quiet_ms: u64,
        cpu_ms: Option<u64>,
        busy: bool,
    },
}

impl Ending {
    /// The stall's observations in words, for a halt detail: "no output for 5.0 s, 0.00 CPU s
    /// in that window (idle)". `None` for any other ending.
    pub fn stall_words(&self) -> Option<String> {
        let Ending::Stalled {
            quiet_ms,
            cpu_ms,
            busy,
        } = self
        else {
            return None;
        };
        let cpu = match cpu_ms {
            Some(ms) => format!("{:.2} CPU s in that window", *ms as f64 / 1000.0),
            None => "CPU time not readable".to_string(),
        };
        Some(format!(
            "no output for {:.1} s, {cpu} ({})",
            *quiet_ms as f64 / 1000.0,
            if *busy { "busy" } else { "idle" }
        ))
    }

    /// The ending in a word or two, as `report` lists it: `exit 3`, `timed out`, `signal 9`.
    pub fn short_text(&self) -> String {
        match self {
            Ending::Exited { code } => format!("exit {code}"),
            Ending::TimedOut { .. } => "timed out".into(),
            Ending::Signaled { signal } => format!("signal {signal}"),
            Ending::FailedToStart { .. } => "could not start".into(),
            Ending::Interrupted { .. } => "interrupted".into(),
            Ending::Stalled { .. } => "stalled".into(),
        }
    }

    /// The exit code when the command exited normally.
    pub fn exit_code(&self) -> Option<i32> {
        match self {
            Ending::Exited { code } => Some(*code),
            _ => None,
        }
    }
}
