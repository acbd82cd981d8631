//! `loopexec report <run> --html OUT`: the report of a loop run as one self-contained HTML page
//! (inline CSS and SVG, no script, no external asset), written atomically. It renders what the
//! other commands compute, never a second version of it: `report`'s object (pins, iterations,
//! halt derivation, egress, cost), `ratchet`'s accepted and rejected iterations, `explain-halt`'s
//! verdict and `verify`'s checks with the key they used. Every string from the receipt (test
//! names, file names, details, commands) is agent-reachable: it reaches the page through
//! [`escaped`] (controls made visible as `inert` shows them, then ``& < > " ' = ` `` as character
//! references), cut to [`MAX_TEXT_CHARS`]; lists are capped and say how many were left out, so a
//! run of 10000 iterations still gives a page of bounded size.

use super::receipt_source::LoadedReceipt;
use crate::error::{CmdResult, Failure};
use crate::output::Outcome;
use crate::receipt::history::{History, IterationRecord};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;

/// The longest text shown of one string (characters, after escaping controls).
pub const MAX_TEXT_CHARS: usize = 600;
/// The iterations listed in the table and drawn in the chart: the last ones.
pub const MAX_ITERATIONS_SHOWN: usize = 500;
/// Items listed under one heading (an iteration's findings, egress hosts, verify's checks).
pub const MAX_ITEMS: usize = 40;

/// What the page shows: the loaded receipt, `report`'s object of it, and the key to verify with.
pub struct Page<'a> {
    pub loaded: &'a LoadedReceipt,
    /// The `report` object of `report --json`.
    pub report: &'a Value,
    /// `--pubkey`; none: the operator's own key in its default place.
    pub pubkey: Option<&'a Path>,
}

/// `text` for an HTML text node or a double- or single-quoted attribute value: controls,
/// newlines and bidi overrides shown as `inert` shows them (`\x1b`, `\n`, `\u{202e}`), then
/// `&`, `<`, `>`, `"`, `'`, `=` and `` ` `` as character references; longer than [`MAX_TEXT_CHARS`]: cut,
/// saying how much was left out.
pub fn escaped(text: &str) -> String {
    let visible = crate::inert::inert(text);
    let total = visible.chars().count();
    let mut out = String::with_capacity(visible.len().min(MAX_TEXT_CHARS * 2));
    for c in visible.chars().take(MAX_TEXT_CHARS) {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Not special in text or a quoted value; escaped so that no attribute-shaped text
            // (`onerror=`) and no backtick (an old browser's attribute quote) appears at all.
            '=' => out.push_str("&#61;"),
            '`' => out.push_str("&#96;"),
            c => out.push(c),
        }
    }
    if total > MAX_TEXT_CHARS {
        let _ = write!(out, "\u{2026} ({} more characters)", total - MAX_TEXT_CHARS);
    }
    out
}

/// A JSON value as escaped text: a string's characters, anything else its JSON text, null `-`.
fn shown(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) => escaped(s),
        other => escaped(&other.to_string()),
    }
}

/// The verification of the run as `verify` computes it, or why it could not be done.
enum Verified {
    Checked {
        key: Value,
        verification: crate::audit::verify::Verification,
    },
    NotChecked(String),
}

fn verification(page: &Page) -> CmdResult<Verified> {
    let key = match super::verify::VerifyKey::choose(page.pubkey) {
        Ok(key) => key,
        // An explicit key that cannot be used is the operator's error; no default key is not.
        Err(e) if page.pubkey.is_some() => return Err(e),
        Err(e) => {
            return Ok(Verified::NotChecked(format!(
                "{} ({})",
                e.message,
                e.hint.unwrap_or_default()
            )))
        }
    };
    let dir = page
        .loaded
        .path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let run_dir = match crate::safefs::SafeDir::open(dir) {
        Ok(d) => d,
        Err(e) => {
            return Ok(Verified::NotChecked(format!(
                "the run directory cannot be opened: {e}"
            )))
        }
    };
    let (verification, _) = super::verify::verify_loop_run(&run_dir, None, &key, false);
    Ok(Verified::Checked {
        key: key.json(),
        verification,
    })
}

/// Render the page and write it to `out` atomically (a temporary file beside it, renamed over it).
pub fn write(page: &Page, out: &Path) -> CmdResult<Outcome> {
    if out.is_dir() {
        return Err(Failure::usage(format!(
            "--html {}: is a directory",
            crate::inert::inert(&out.to_string_lossy())
        ))
        .with_hint("name the file to write, e.g. --html report.html"));
    }
    let verified = verification(page)?;
    let html = render(page, &verified);
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let io = |e: &std::io::Error| {
        Failure::io(out, e).with_hint("--html names a file in a directory you can write")
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".loopexec-report-")
        .suffix(".html.tmp")
        .tempfile_in(parent)
        .map_err(|e| io(&e))?;
    std::io::Write::write_all(&mut tmp, html.as_bytes()).map_err(|e| io(&e))?;
    tmp.as_file().sync_all().map_err(|e| io(&e))?;
    // Readable as any report (a temporary file is 0600).
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .map_err(|e| io(&e))?;
    tmp.persist(out).map_err(|e| io(&e.error))?;
    let history = &page.loaded.history;
    let shown_iterations = history.iterations.len().min(MAX_ITERATIONS_SHOWN);
    let path = out.to_string_lossy().into_owned();
    Ok(Outcome::ok("report")
        .field("run_id", history.run_id().unwrap_or(""))
        .field("receipt", page.loaded.path.to_string_lossy().into_owned())
        .field(
            "html",
            serde_json::json!({
                "path": path,
                "bytes": html.len(),
                "iterations_shown": shown_iterations,
                "iterations_left_out": history.iterations.len() - shown_iterations,
                "verified": match &verified { Verified::Checked { verification, .. } => Value::Bool(verification.ok()), Verified::NotChecked(_) => Value::Null },
            }),
        )
        .human(format!("wrote {path} ({} bytes)\n", html.len())))
}

const STYLE: &str = "\
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:#1d232b;background:#f4f5f7;margin:0}
main{max-width:1100px;margin:0 auto;padding:24px 28px 48px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #d5d9e0;padding-bottom:4px}
.sub{color:#5a6472;margin:0 0 16px}
section{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:12px 16px;margin:12px 0}
table{border-collapse:collapse;width:100%}th,td{text-align:left;vertical-align:top;padding:4px 8px;border-bottom:1px solid #eef0f3}
th{color:#5a6472;font-weight:600;white-space:nowrap;width:1%}
td code,code{font:12.5px ui-monospace,SFMono-Regular,Menlo,monospace;word-break:break-all}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12.5px;font-weight:600}
.ok{background:#dcf3e3;color:#17613a}.bad{background:#fbe0e0;color:#9b1c1c}.warn{background:#fdf1d6;color:#7a5200}.na{background:#e8eaee;color:#4a5260}
ul{margin:2px 0;padding-left:18px}li{margin:1px 0}
.note{color:#5a6472;font-size:12.5px}
svg text{font:11px system-ui,sans-serif;fill:#5a6472}
.it th{width:auto}.it td{font-size:13px}.it td:last-child{width:42%}
";

fn badge(class: &str, text: &str) -> String {
    format!("<span class=\"badge {class}\">{}</span>", escaped(text))
}

/// The whole page.
fn render(page: &Page, verified: &Verified) -> String {
    let history = &page.loaded.history;
    let run_id = escaped(history.run_id().unwrap_or(""));
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\n\
         <title>loopexec run {run_id}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n<main>\n"
    );
    let halt = match &history.halt {
        Some(h) => badge(
            if h.halt_reason.as_str() == "success_condition_met" {
                "ok"
            } else {
                "warn"
            },
            h.halt_reason.as_str(),
        ),
        None => badge("na", "not halted"),
    };
    let _ = writeln!(html, "<h1>loopexec run <code>{run_id}</code> {halt}</h1>");
    let _ = writeln!(
        html,
        "<p class=\"sub\">{} events, hash chain verified, head <code>{}</code></p>",
        history.events,
        escaped(&page.loaded.chain.head)
    );
    halt_section(&mut html, page);
    chart(&mut html, history);
    iterations(&mut html, history);
    verification_section(&mut html, verified);
    pins(&mut html, page.report);
    egress(&mut html, page.report);
    let _ = writeln!(
        html,
        "<p class=\"note\">receipt <code>{}</code>; rendered by loopexec {} from the receipt alone</p>\n</main>\n</body>\n</html>",
        escaped(&page.loaded.path.to_string_lossy()),
        env!("CARGO_PKG_VERSION")
    );
    html
}

fn row(html: &mut String, name: &str, value: &str) {
    let _ = writeln!(html, "<tr><th>{}</th><td>{value}</td></tr>", escaped(name));
}

/// The run's pins: mode, isolation, policies with their digests, model, runner, commands.
fn pins(html: &mut String, report: &Value) {
    let config = &report["config"];
    html.push_str("<h2>Pins</h2>\n<section><table>\n");
    row(html, "mode", &shown(&report["mode"]));
    row(
        html,
        "isolation",
        &format!(
            "{} (backend {}, workspace {})",
            shown(&report["isolation"]),
            shown(&config["backend"]),
            shown(&config["workspace"])
        ),
    );
    for (name, key) in [
        ("agent policy", "agent_policy"),
        ("check policy", "check_policy"),
    ] {
        let pin = &config[key];
        let value = match pin.is_null() {
            true => "the default policy".to_string(),
            false => format!(
                "{} <code>sha256 {}</code>",
                shown(&pin["source"]),
                shown(&pin["sha256"])
            ),
        };
        row(html, name, &value);
    }
    let model = &config["model"];
    let model_text = ["provider", "id", "version"]
        .iter()
        .filter(|k| !model[**k].is_null())
        .map(|k| format!("{k} {}", shown(&model[*k])))
        .collect::<Vec<_>>()
        .join(", ");
    row(
        html,
        "model",
        if model_text.is_empty() {
            "not pinned"
        } else {
            &model_text
        },
    );
    let runner = config["runner"].as_object().map(|r| {
        r.iter()
            .take(MAX_ITEMS)
            .map(|(k, v)| format!("{} {}", escaped(k), shown(v)))
            .collect::<Vec<_>>()
            .join(", ")
    });
    row(
        html,
        "runner",
        runner.as_deref().filter(|r| !r.is_empty()).unwrap_or("-"),
    );
    row(
        html,
        "exec",
        &format!("<code>{}</code>", shown(&config["exec"])),
    );
    row(
        html,
        "check",
        &format!("<code>{}</code>", shown(&config["check"])),
    );
    row(html, "max iterations", &shown(&config["max_iterations"]));
    row(html, "loopexec", &shown(&report["loopexec_version"]));
    if let Some(cost) = report.get("cost") {
        let money = match cost["usd_micros"].as_u64() {
            Some(m) => format!("{} USD", crate::rules::budget::usd(m)),
            None => format!(
                "{} USD known, {} record(s) of unknown money",
                crate::rules::budget::usd(cost["usd_micros_known"].as_u64().unwrap_or(0)),
                shown(&cost["unknown_money_records"])
            ),
        };
        row(
            html,
            "cost",
            &format!("{money}, {} tokens", shown(&cost["tokens"])),
        );
    }
    html.push_str("</table></section>\n");
}

/// `verify`'s checks of the run and the key it used.
fn verification_section(html: &mut String, verified: &Verified) {
    html.push_str("<h2>Verification</h2>\n<section>\n");
    match verified {
        Verified::NotChecked(why) => {
            let _ = writeln!(
                html,
                "<p>{} {}</p>",
                badge("na", "signature not checked"),
                escaped(why)
            );
        }
        Verified::Checked { key, verification } => {
            let status = if verification.ok() {
                badge("ok", "verified")
            } else {
                badge("bad", "NOT verified")
            };
            let source = if key["source"] == "operator_default" {
                "the operator's own key (a third party passes --pubkey)"
            } else {
                "--pubkey"
            };
            let _ = writeln!(
                html,
                "<p>{status} against key <code>{}</code> (fingerprint <code>{}</code>; {})</p>\n<table>",
                shown(&key["path"]),
                shown(&key["fingerprint"]),
                escaped(source)
            );
            for check in verification.checks.iter().take(MAX_ITEMS) {
                let mark = if check.ok {
                    badge("ok", "ok")
                } else {
                    badge("bad", "FAIL")
                };
                let _ = writeln!(
                    html,
                    "<tr><th>{mark}</th><td><code>{}</code></td><td>{}</td></tr>",
                    escaped(check.name),
                    escaped(&check.detail)
                );
            }
            left_out(html, verification.checks.len(), MAX_ITEMS, "checks");
            html.push_str("</table>\n");
        }
    }
    html.push_str("</section>\n");
}

fn left_out(html: &mut String, total: usize, shown: usize, what: &str) {
    if total > shown {
        let _ = writeln!(
            html,
            "<p class=\"note\">{} more {what} left out (loopexec report --json lists them)</p>",
            total - shown
        );
    }
}

/// The halt, its derivation, and explain-halt's verdict (or why it withholds one).
fn halt_section(html: &mut String, page: &Page) {
    let history = &page.loaded.history;
    html.push_str("<h2>Halt</h2>\n<section><table>\n");
    let Some(halt) = &history.halt else {
        row(html, "halt", "not halted (resumable)");
        html.push_str("</table></section>\n");
        return;
    };
    row(
        html,
        "reason",
        &format!(
            "<code>{}</code> (exit {}) at iteration {}",
            escaped(halt.halt_reason.as_str()),
            halt.exit_code,
            halt.iteration
        ),
    );
    row(html, "detail", &escaped(&halt.detail));
    let derivation = &page.report["halt_derivation"];
    if let Some(detail) = derivation["detail"].as_str() {
        let mark = if derivation["consistent"] == Value::Bool(false) {
            badge("bad", "does not follow")
        } else {
            badge("ok", "derived")
        };
        row(html, "derivation", &format!("{mark} {}", escaped(detail)));
    }
    match super::explain_halt::withheld(history, &page.loaded.path) {
        Some(withheld) => row(
            html,
            "verdict",
            &format!(
                "{} {}",
                badge("na", "none"),
                escaped(&withheld.summary(history))
            ),
        ),
        None => {
            if let Some(verdict) = super::explain_halt::verdict_of(history) {
                let why =
                    super::explain_halt::summary(halt.halt_reason.as_str(), &halt.detail, &verdict);
                let class = if verdict.explanation.verdict.as_str() == "done" {
                    "ok"
                } else {
                    "warn"
                };
                row(
                    html,
                    "verdict",
                    &format!(
                        "{} {}",
                        badge(class, verdict.explanation.verdict.as_str()),
                        escaped(&why)
                    ),
                );
                let decisive = verdict
                    .decisive_iterations
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ");
                row(html, "decisive", &escaped(&decisive));
                row(
                    html,
                    "next",
                    &format!("<code>{}</code>", escaped(&verdict.next_command)),
                );
            }
        }
    }
    if let Some(branch) = halt.delivery.as_ref().and_then(|d| d.branch.as_deref()) {
        row(
            html,
            "delivered",
            &format!("branch <code>{}</code>", escaped(branch)),
        );
    }
    html.push_str("</table></section>\n");
}

/// The iterations shown: the last [`MAX_ITERATIONS_SHOWN`].
fn shown_iterations(history: &History) -> &[IterationRecord] {
    let all = &history.iterations;
    &all[all.len().saturating_sub(MAX_ITERATIONS_SHOWN)..]
}

/// Whether the ratchet rejected iteration `n` (`None`: it judged nothing there).
fn rejected(judged: &[(Value, String)], n: u64) -> Option<bool> {
    judged
        .iter()
        .find(|(v, _)| v["iteration"].as_u64() == Some(n))
        .map(|(v, _)| v["accepted"] == Value::Bool(false))
}

/// The inline SVG chart: the failing set's size per iteration (one `circle` each, with its
/// `data-iteration`), and the cost per iteration beneath when the run was metered.
fn chart(html: &mut String, history: &History) {
    let records = shown_iterations(history);
    html.push_str("<h2>Failing tests per iteration</h2>\n<section>\n");
    if records.is_empty() {
        html.push_str("<p>no iteration ran</p></section>\n");
        return;
    }
    let judged = super::ratchet::judged(history);
    let (w, h, left, right, top, bottom) = (1000.0_f64, 260.0_f64, 64.0, 16.0, 14.0, 34.0);
    let max = records
        .iter()
        .filter_map(IterationRecord::failing_count)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let n = records.len();
    let x = |i: usize| {
        if n == 1 {
            left + (w - left - right) / 2.0
        } else {
            left + (w - left - right) * i as f64 / (n - 1) as f64
        }
    };
    let y = |c: f64| top + (h - top - bottom) * (1.0 - c / max);
    let _ = writeln!(
        html,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {w} {h}\" width=\"100%\" role=\"img\" aria-label=\"failing tests per iteration\">"
    );
    let mut ticks = vec![0.0, (max / 2.0).round(), max];
    ticks.dedup();
    for tick in ticks {
        let (x2, ty, lx) = (w - right, y(tick), left - 6.0);
        let _ = writeln!(
            html,
            "<line x1=\"{left}\" x2=\"{x2}\" y1=\"{ty:.1}\" y2=\"{ty:.1}\" stroke=\"#e3e6eb\"/><text x=\"{lx}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            ty + 4.0,
            tick.round()
        );
    }
    let line: Vec<String> = records
        .iter()
        .enumerate()
        .filter_map(|(i, r)| Some(format!("{:.1},{:.1}", x(i), y(r.failing_count()? as f64))))
        .collect();
    if line.len() > 1 {
        let _ = writeln!(
            html,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"#3b6fd8\" stroke-width=\"2\"/>",
            line.join(" ")
        );
    }
    let label_every = n.div_ceil(20).max(1);
    for (i, r) in records.iter().enumerate() {
        let (cy, title, style) = match (r.failing_count(), rejected(&judged, r.iteration)) {
            (None, _) => (
                y(0.0),
                format!(
                    "iteration {}: no failing set (no readable report)",
                    r.iteration
                ),
                "fill=\"#fff\" stroke=\"#8a93a0\"",
            ),
            (Some(c), Some(true)) => (
                y(c as f64),
                format!(
                    "iteration {}: {c} failing, rejected by the ratchet",
                    r.iteration
                ),
                "fill=\"#fff\" stroke=\"#c53030\" stroke-width=\"2\"",
            ),
            (Some(c), _) => (
                y(c as f64),
                format!("iteration {}: {c} failing", r.iteration),
                "fill=\"#3b6fd8\"",
            ),
        };
        let _ = writeln!(
            html,
            "<circle data-iteration=\"{}\" cx=\"{:.1}\" cy=\"{cy:.1}\" r=\"4.5\" {style}><title>{}</title></circle>",
            r.iteration,
            x(i),
            escaped(&title)
        );
        if i % label_every == 0 || i + 1 == n {
            let _ = writeln!(
                html,
                "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                x(i),
                h - bottom + 16.0,
                r.iteration
            );
        }
    }
    let _ = writeln!(
        html,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">iteration</text>\n</svg>",
        left + (w - left - right) / 2.0,
        h - 4.0
    );
    html.push_str("<p class=\"note\">filled: accepted or not judged; red ring: rejected by the ratchet; grey ring: no readable report</p>\n");
    left_out(
        html,
        history.iterations.len(),
        records.len(),
        "earlier iterations",
    );
    cost_chart(html, records);
    html.push_str("</section>\n");
}

/// Cost per iteration as bars (known money, `report`'s rule), when any iteration was metered.
fn cost_chart(html: &mut String, records: &[IterationRecord]) {
    use crate::rules::budget::{iteration_cost, usd, Point};
    if records.iter().all(|r| r.usage.is_empty()) {
        return;
    }
    let costs: Vec<(u64, u64, u64)> = records
        .iter()
        .map(|r| {
            let c = iteration_cost(r, Point::End);
            (r.iteration, c.usd_micros, c.unknown_money)
        })
        .collect();
    let max = costs.iter().map(|c| c.1).max().unwrap_or(0).max(1) as f64;
    let (w, h, left, right, top, bottom) = (1000.0_f64, 150.0_f64, 64.0, 16.0, 10.0, 24.0);
    let slot = (w - left - right) / costs.len() as f64;
    let _ = writeln!(html, "<h2>Cost per iteration (USD)</h2>\n<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {w} {h}\" width=\"100%\" role=\"img\" aria-label=\"cost per iteration\">");
    let _ = writeln!(
        html,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
        left - 6.0,
        top + 8.0,
        usd(max as u64)
    );
    for (i, (n, micros, unknown)) in costs.iter().enumerate() {
        let bar = (h - top - bottom) * (*micros as f64 / max);
        let unknown_note = if *unknown > 0 {
            format!(" + {unknown} record(s) of unknown money")
        } else {
            String::new()
        };
        let _ = writeln!(
            html,
            "<rect data-cost-iteration=\"{n}\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{bar:.1}\" fill=\"{}\"><title>iteration {n}: {} USD{unknown_note}</title></rect>",
            left + slot * i as f64 + slot * 0.15,
            h - bottom - bar,
            slot * 0.7,
            if *unknown > 0 { "#d69e2e" } else { "#6b8fd6" },
            usd(*micros)
        );
    }
    let label_every = costs.len().div_ceil(20).max(1);
    for (i, (n, _, _)) in costs
        .iter()
        .enumerate()
        .filter(|(i, _)| i % label_every == 0 || i + 1 == costs.len())
    {
        let _ = writeln!(
            html,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{n}</text>",
            left + slot * (i as f64 + 0.5),
            h - bottom + 16.0
        );
    }
    html.push_str("</svg>\n");
}

/// One cell's list of notes.
fn notes(items: &[String]) -> String {
    match items.is_empty() {
        true => String::new(),
        false => format!(
            "<ul>{}</ul>",
            items
                .iter()
                .map(|i| format!("<li>{i}</li>"))
                .collect::<String>()
        ),
    }
}

/// What one iteration's guards, judge, confirmations, held-out check, sentinel run and canary said.
fn iteration_notes(history: &History, r: &IterationRecord) -> Vec<String> {
    let mut items = Vec::new();
    for g in &r.guards {
        items.push(format!(
            "{} <code>{}</code> ({}): {}",
            badge("bad", "guard"),
            escaped(&g.guard),
            escaped(g.halt_reason.as_str()),
            escaped(&g.detail)
        ));
        for f in g.findings.iter().take(MAX_ITEMS) {
            items.push(format!(
                "<code>{}</code>: {}",
                escaped(f.path.as_deref().unwrap_or("-")),
                escaped(&f.what)
            ));
        }
        if g.findings.len() > MAX_ITEMS {
            items.push(format!(
                "{} more findings left out",
                g.findings.len() - MAX_ITEMS
            ));
        }
    }
    for u in r
        .allowed
        .iter()
        .flat_map(|a| a.uses.iter().map(move |u| (a, u)))
        .take(MAX_ITEMS)
    {
        items.push(format!(
            "{} ({}): {} under allowance {}: {}",
            badge("warn", "allowed"),
            escaped(&u.0.guard),
            escaped(&u.1.what),
            escaped(&u.1.name()),
            escaped(&u.1.reason)
        ));
    }
    for c in r.confirmations.iter().take(MAX_ITEMS) {
        let class = if c.agrees { "ok" } else { "bad" };
        let what = if c.agrees { "agrees" } else { "disagrees" };
        items.push(format!(
            "{} {what} (stability lower bound {:.4}, target {:.4})",
            badge(class, &format!("confirmation {}", c.confirmation)),
            c.stability_lower_bound,
            c.stability_target
        ));
    }
    if let Some(h) = &r.holdout {
        let class = if h.verdict == "green" { "ok" } else { "bad" };
        items.push(format!(
            "{} {}{}",
            badge(class, "held-out check"),
            escaped(&h.verdict),
            if h.dir_changed {
                ", directory changed"
            } else {
                ""
            }
        ));
    }
    if history.sentinel_of(r.iteration) {
        let refused = history.sentinel_refused_of(r.iteration);
        let (class, text) = if refused {
            ("bad", "broke an expectation")
        } else {
            ("ok", "held")
        };
        items.push(format!("{} {text}", badge(class, "sentinel run")));
    }
    if let Some(j) = &r.judge {
        let outcome = serde_json::to_value(j.outcome)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let class = if outcome == "approve" { "ok" } else { "bad" };
        let hacking = if j.reward_hacking {
            " (reward hacking)"
        } else {
            ""
        };
        items.push(format!(
            "{}{hacking}: {}",
            badge(class, &format!("judge {outcome}")),
            escaped(&j.reason)
        ));
    }
    if let Some(a) = &r.adequacy {
        let class = match a.verdict.as_str() {
            "adequate" => "ok",
            "inadequate" => "bad",
            _ => "na",
        };
        let score = a
            .score
            .map(|s| format!(", score {s:.2}"))
            .unwrap_or_default();
        items.push(format!(
            "{} {}: {} killed, {} survived of {} sampled{score}",
            badge(class, "canary"),
            escaped(&a.verdict),
            a.killed,
            a.survived,
            a.sampled
        ));
    }
    for d in r
        .check
        .iter()
        .flat_map(|c| c.evidence.iter())
        .flat_map(|e| &e.disagreements)
        .take(MAX_ITEMS)
    {
        items.push(format!(
            "{} {}: {}",
            badge("bad", "evidence"),
            escaped(&d.kind),
            escaped(&d.detail)
        ));
    }
    if let Some(cause) = &r.interrupted {
        items.push(format!(
            "{} {}",
            badge("warn", "interrupted"),
            escaped(cause)
        ));
    }
    items
}

/// The iterations table: endings, failing set (its first test ids), the ratchet's judgement, cost
/// and every guard, judge and canary result.
fn iterations(html: &mut String, history: &History) {
    let records = shown_iterations(history);
    let judged = super::ratchet::judged(history);
    html.push_str(
        "<h2>Iterations</h2>\n<section><table class=\"it\">\n<tr><th>#</th><th>agent</th><th>check</th><th>failing</th><th>ratchet</th><th>results</th></tr>\n",
    );
    for r in records {
        let ending = |e: Option<&crate::ending::Ending>| {
            e.map(crate::ending::Ending::short_text)
                .unwrap_or_else(|| "-".into())
        };
        let failing = match (
            r.failing_count(),
            r.check.as_ref().and_then(|c| c.failing_set.as_ref()),
        ) {
            (None, _) => "-".to_string(),
            (Some(c), None) => c.to_string(),
            (Some(c), Some(set)) => {
                let mut ids: Vec<String> = set
                    .iter()
                    .take(5)
                    .map(|id| format!("<li><code>{}</code></li>", escaped(id)))
                    .collect();
                if set.len() > 5 {
                    ids.push(format!("<li>{} more</li>", set.len() - 5));
                }
                format!("{c}<ul>{}</ul>", ids.concat())
            }
        };
        let ratchet = match judged
            .iter()
            .find(|(v, _)| v["iteration"].as_u64() == Some(r.iteration))
        {
            Some((v, line)) => format!(
                "{} {}",
                if v["accepted"] == Value::Bool(true) {
                    badge("ok", "accepted")
                } else {
                    badge("bad", "rejected")
                },
                escaped(line)
            ),
            None => "-".to_string(),
        };
        let cost = match r.usage.is_empty() {
            true => String::new(),
            false => {
                let c = crate::rules::budget::iteration_cost(r, crate::rules::budget::Point::End);
                format!(
                    "<br><span class=\"note\">cost {} USD{}, {} tokens</span>",
                    crate::rules::budget::usd(c.usd_micros),
                    if c.unknown_money > 0 {
                        " + unknown"
                    } else {
                        ""
                    },
                    c.tokens
                )
            }
        };
        let _ = writeln!(
            html,
            "<tr id=\"iteration-{0}\"><td>{0}</td><td>{1}</td><td>{2}</td><td>{failing}</td><td>{ratchet}{cost}</td><td>{3}</td></tr>",
            r.iteration,
            escaped(&ending(r.exec.as_ref().map(|e| &e.ending))),
            escaped(&ending(r.check.as_ref().map(|c| &c.ending))),
            notes(&iteration_notes(history, r))
        );
    }
    html.push_str("</table>\n");
    left_out(
        html,
        history.iterations.len(),
        records.len(),
        "earlier iterations",
    );
    if let Some(inactive) = crate::engine::inactive_guards::of_history(history) {
        let lines = crate::engine::inactive_guards::lines(&inactive);
        match lines.is_empty() {
            true => html.push_str("<p>every guard could see (none inactive)</p>\n"),
            false => {
                let _ = writeln!(
                    html,
                    "<p>{} guard(s) inactive or partly blind:</p>",
                    lines.len()
                );
                html.push_str(&notes(
                    &lines
                        .iter()
                        .take(MAX_ITEMS)
                        .map(|l| escaped(l))
                        .collect::<Vec<_>>(),
                ));
                left_out(html, lines.len(), MAX_ITEMS, "blind guards");
            }
        }
    }
    html.push_str("</section>\n");
}

/// `report`'s egress summary: totals, per host, and whether the audit log is the one the receipt recorded.
fn egress(html: &mut String, report: &Value) {
    let egress = &report["egress"];
    html.push_str("<h2>Egress</h2>\n<section>\n");
    let summary = &egress["summary"];
    if summary.is_null() {
        let why = egress["error"].as_str().map(escaped).unwrap_or_else(|| {
            "no egress audit recorded (the zones had no proxied network)".into()
        });
        let _ = writeln!(html, "<p>{why}</p>\n</section>");
        return;
    }
    let changed = if egress["audit_matches_receipt"] == Value::Bool(false) {
        badge("bad", "audit log changed since the receipt recorded it")
    } else {
        badge("ok", "audit log as recorded")
    };
    let _ = writeln!(
        html,
        "<p>{} allowed, {} denied, {} bytes up, {} bytes down {changed}</p>",
        shown(&summary["allowed"]),
        shown(&summary["denied"]),
        shown(&summary["bytes_up"]),
        shown(&summary["bytes_down"])
    );
    if let Some(hosts) = summary["hosts"].as_object() {
        html.push_str("<table><tr><th>host</th><th>allowed</th><th>denied</th></tr>\n");
        for (host, h) in hosts.iter().take(MAX_ITEMS) {
            let _ = writeln!(
                html,
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
                escaped(host),
                shown(&h["allowed"]),
                shown(&h["denied"])
            );
        }
        html.push_str("</table>\n");
        left_out(html, hosts.len(), MAX_ITEMS, "hosts");
    }
    html.push_str("</section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_characters_become_character_references() {
        assert_eq!(
            escaped("</td><script>alert(1)</script>"),
            "&lt;/td&gt;&lt;script&gt;alert(1)&lt;/script&gt;"
        );
        assert_eq!(escaped("a\"b'c&d=e`"), "a&quot;b&#39;c&amp;d&#61;e&#96;");
    }

    #[test]
    fn controls_are_shown_as_escapes_not_passed_through() {
        assert_eq!(
            escaped("a\x1b[2J\x07\nb\u{202e}c\0"),
            "a\\x1b[2J\\x07\\nb\\u{202e}c\\x00"
        );
    }

    #[test]
    fn a_long_text_is_cut_saying_how_much_was_left_out() {
        let long = "<".repeat(MAX_TEXT_CHARS + 10);
        assert_eq!(
            escaped(&long),
            format!(
                "{}\u{2026} (10 more characters)",
                "&lt;".repeat(MAX_TEXT_CHARS)
            )
        );
    }

    /// A history of `n` iterations, each with a guard objection; the last one's detail is 100 KB
    /// and it has 100 findings on a 100 KB path.
    fn huge_history(n: u64) -> History {
        use crate::receipt::events::{FindingRecord, GuardRecord};
        let huge = "<".repeat(100_000);
        let guard = |i: u64, detail: &str, findings: Vec<FindingRecord>| GuardRecord {
            iteration: i,
            guard: "protected_paths".into(),
            stage: "after_agent".into(),
            halt_reason: crate::halt::HaltReason::BlockedPathModified,
            detail: detail.into(),
            findings,
        };
        let mut iterations: Vec<IterationRecord> = (1..n)
            .map(|i| IterationRecord {
                iteration: i,
                guards: vec![guard(i, "tests/x changed", Vec::new())],
                ..Default::default()
            })
            .collect();
        let findings = vec![
            FindingRecord {
                path: Some(huge.clone()),
                what: "changed".into()
            };
            100
        ];
        iterations.push(IterationRecord {
            iteration: n,
            guards: vec![guard(n, &huge, findings)],
            ..Default::default()
        });
        History {
            iterations,
            ..Default::default()
        }
    }

    #[test]
    fn a_run_of_10000_iterations_with_huge_strings_gives_a_bounded_page() {
        let loaded = LoadedReceipt {
            path: "/runs/r/receipt.jsonl".into(),
            chain: crate::receipt::chain::VerifiedChain {
                events: Vec::new(),
                head: "0".repeat(64),
                file_sha256: "0".repeat(64),
            },
            history: huge_history(10_000),
        };
        let report = serde_json::json!({"config": {}, "egress": {"summary": null}});
        let page = Page {
            loaded: &loaded,
            report: &report,
            pubkey: None,
        };
        let html = render(&page, &Verified::NotChecked("no key".into()));
        assert_eq!(
            html.matches("<circle data-iteration=").count(),
            MAX_ITERATIONS_SHOWN
        );
        assert_eq!(
            html.matches("<tr id=\"iteration-").count(),
            MAX_ITERATIONS_SHOWN
        );
        assert!(
            html.contains("<tr id=\"iteration-10000\">"),
            "the last iterations are the ones shown"
        );
        assert!(html.contains(&format!(
            "{} more earlier iterations left out",
            10_000 - MAX_ITERATIONS_SHOWN
        )));
        assert!(html.contains(&format!("{} more findings left out", 100 - MAX_ITEMS)));
        assert!(html.contains(&format!(
            "\u{2026} ({} more characters)",
            100_000 - MAX_TEXT_CHARS
        )));
        // 500 short rows, and one of 41 strings cut to 600 characters of at most 6 bytes each.
        assert!(html.len() < 1024 * 1024, "{} bytes", html.len());
        assert!(!html.contains("<<"), "no raw markup character");
    }

    #[test]
    fn plain_text_is_unchanged() {
        assert_eq!(
            escaped("tests.test_calc::test_add"),
            "tests.test_calc::test_add"
        );
    }
}
