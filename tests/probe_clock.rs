//! probe-check's `clock` dimension moves the check's monotonic and boot clocks with a time
//! namespace (at least a day ahead), in the exec zone (native isolation, the default) and under
//! `--isolation none` (the probe run's own time namespace). A check that fails once the machine's
//! uptime passes a threshold is reported flaky by `clock`, and each clock run records the offset
//! it ran at. The threshold is the host's uptime now plus twelve hours: unperturbed runs stay
//! below it (unless the test takes twelve hours), offset runs are at least a day past it.

mod common;

use common::{loopexec, workdir};
use serde_json::Value;

/// A check that passes while /proc/uptime (the boot clock) is below the host's uptime + 12 h.
fn uptime_check() -> String {
    let uptime = std::fs::read_to_string("/proc/uptime").unwrap();
    let seconds: f64 = uptime.split_whitespace().next().unwrap().parse().unwrap();
    let threshold = seconds as u64 + 12 * 3600;
    format!("read up rest < /proc/uptime; test \"${{up%.*}}\" -lt {threshold}")
}

fn assert_flaky_by_clock_with_offsets(code: i32, v: &Value) {
    assert_eq!(code, 14, "{v}");
    assert_eq!(v["halt_reason"], "check_flaky", "{v}");
    let broken = v["probe"]["summary"]["broken_by"].as_array().unwrap();
    assert_eq!(broken.len(), 1, "{v}");
    assert_eq!(broken[0]["dimension"], "clock", "{v}");
    let runs = v["probe"]["runs"].as_array().unwrap();
    let clock_runs: Vec<u64> = runs
        .iter()
        .filter(|r| r["dimension"] == "clock")
        .map(|r| r["run"].as_u64().unwrap())
        .collect();
    assert_eq!(
        broken[0]["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_u64().unwrap())
            .collect::<Vec<_>>(),
        clock_runs,
        "{v}"
    );
    for r in runs {
        if r["dimension"] == "clock" {
            assert!(r["clock_offset_s"].as_i64().unwrap() >= 86_400, "{r}");
            assert_eq!(r["clock_offset_applied_s"], r["clock_offset_s"], "{r}");
        } else {
            assert!(r.get("clock_offset_applied_s").is_none(), "{r}");
        }
    }
}

#[test]
fn a_check_that_fails_past_an_uptime_is_flaky_by_clock_in_the_exec_zone() {
    let dir = workdir();
    let ran = loopexec(
        dir.path(),
        &[
            "--json",
            "probe-check",
            "--check",
            &uptime_check(),
            "--runs",
            "5",
            "--perturb",
            "clock,seed",
        ],
    );
    assert_flaky_by_clock_with_offsets(ran.code, &ran.json());
}

#[test]
fn a_check_that_fails_past_an_uptime_is_flaky_by_clock_without_isolation() {
    let dir = workdir();
    let ran = loopexec(
        dir.path(),
        &[
            "--json",
            "probe-check",
            "--isolation",
            "none",
            "--check",
            &uptime_check(),
            "--runs",
            "5",
            "--perturb",
            "clock,seed",
        ],
    );
    assert_flaky_by_clock_with_offsets(ran.code, &ran.json());
}
