//! The output contract: exactly one JSON object on stdout under `--json`, short human text
//! otherwise, and error text on stderr only for genuine failures.
//!
//! Every command returns an [`Outcome`]; `main` renders it once. Fields always present in JSON:
//! `tool`, `version`, `command`, `status`, `errors`.

use crate::error::{ErrorEntry, Failure};
use crate::halt::{ExitClass, HaltReason};
use crate::inert::{inert, inert_lines};
use serde_json::{Map, Value};
use std::io::{IsTerminal, Write};

/// What a command produced: its JSON fields, its human text, and its exit class.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub command: String,
    /// `ok`, `halted` or `error`.
    pub status: &'static str,
    pub exit: ExitClass,
    pub fields: Map<String, Value>,
    pub errors: Vec<ErrorEntry>,
    pub human: String,
    /// An exit code outside the halt classes: 128 + signal for a run interrupted by SIGINT/SIGTERM.
    pub exit_code_override: Option<i32>,
}

impl Outcome {
    /// A successful command (exit 0).
    pub fn ok(command: &str) -> Self {
        Outcome {
            command: command.to_string(),
            status: "ok",
            exit: ExitClass::Nominal,
            fields: Map::new(),
            errors: Vec::new(),
            human: String::new(),
            exit_code_override: None,
        }
    }

    /// A run stopped by an operator signal: not a halt, resumable; exits 128 + signal.
    pub fn interrupted(command: &str, exit_code: i32) -> Self {
        let mut out = Outcome::ok(command);
        out.status = "interrupted";
        out.exit_code_override = Some(exit_code);
        out
    }

    /// The process exit code of this outcome.
    pub fn exit_code(&self) -> i32 {
        self.exit_code_override.unwrap_or(self.exit.code())
    }

    /// A computed halt: exit with the reason's class, no error text.
    pub fn halted(command: &str, reason: HaltReason) -> Self {
        let mut out = Outcome::ok(command);
        out.status = "halted";
        out.exit = reason.class();
        out.fields
            .insert("halt_reason".into(), Value::String(reason.as_str().into()));
        out
    }

    /// A failure of the command.
    pub fn failed(command: &str, failure: &Failure) -> Self {
        let mut out = Outcome::ok(command);
        out.status = "error";
        out.exit = failure.class();
        out.errors.push(failure.entry());
        out
    }

    pub fn field(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.fields.insert(key.to_string(), value.into());
        self
    }

    pub fn set(&mut self, key: &str, value: impl Into<Value>) {
        self.fields.insert(key.to_string(), value.into());
    }

    pub fn human(mut self, text: impl Into<String>) -> Self {
        self.human = text.into();
        self
    }

    /// The single JSON object of this outcome.
    pub fn to_json(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("tool".into(), Value::String("loopexec".into()));
        obj.insert(
            "version".into(),
            Value::String(env!("CARGO_PKG_VERSION").into()),
        );
        obj.insert("command".into(), Value::String(self.command.clone()));
        obj.insert("status".into(), Value::String(self.status.into()));
        obj.insert("exit_code".into(), Value::from(self.exit_code()));
        obj.insert(
            "errors".into(),
            serde_json::to_value(&self.errors).unwrap_or_else(|_| Value::Array(Vec::new())),
        );
        for (k, v) in &self.fields {
            obj.insert(k.clone(), v.clone());
        }
        Value::Object(obj)
    }

    /// Print the outcome and return the process exit code.
    pub fn emit(&self, json: bool) -> i32 {
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        if json {
            // No character a terminal acts on appears raw, even in agent-controlled strings.
            let text = crate::inert::json_text(&self.to_json())
                .unwrap_or_else(|| String::from("{\"tool\":\"loopexec\",\"status\":\"error\",\"errors\":[{\"code\":\"internal_error\",\"message\":\"could not render output\"}]}"));
            let _ = writeln!(out, "{text}");
        } else {
            // The renderers escaped every agent-controlled value (so none forges a line); no
            // control but the renderers' own newlines reaches the terminal either way.
            if !self.human.is_empty() {
                let _ = write!(out, "{}", inert_lines(&self.human));
                if !self.human.ends_with('\n') {
                    let _ = writeln!(out);
                }
            }
            if !self.errors.is_empty() {
                let stderr = std::io::stderr();
                let mut err = stderr.lock();
                for e in &self.errors {
                    // An error is one line, whatever path or name it carries.
                    let _ = writeln!(err, "loopexec: error: {}", inert(&e.message));
                    if let Some(h) = &e.hint {
                        let _ = writeln!(err, "  hint: {}", inert(h));
                    }
                }
            }
        }
        let _ = out.flush();
        self.exit_code()
    }
}

/// Whether human output may use colour: never when `NO_COLOR` is set or stdout is not a terminal.
pub fn colour_allowed() -> bool {
    std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal()
}

/// Render rows of `key: value` aligned on the colon, for human output; each value is one inert
/// line (it may carry agent-controlled text).
pub fn aligned(rows: &[(&str, String)]) -> String {
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut s = String::new();
    for (k, v) in rows {
        s.push_str(&format!("{k:<width$}  {}\n", inert(v)));
    }
    s
}
