//! probe-check's `load` dimension: in the exec zone (native isolation, the default) a load run's
//! zone is held to a tenth of one CPU by its cgroup's quota, so it runs in bursts of 10 ms every
//! 100 ms CFS period however idle or busy the host is. The check here is a watchdog with its own
//! short deadline: a loop that must tick every 60 ms, failing when it misses five deadlines in
//! 1.5 s. Alone it misses none (even on a busy host the scheduler's slices are a few ms); under
//! the quota each period's throttle is a ~90 ms gap, about fifteen in the window. The assertion is
//! the dimension named in the verdict, never a time.

mod common;

use common::{loopexec, workdir};

const WATCHDOG: &str = r#"import time
deadline, window = 0.060, 1.5
start = last = time.monotonic()
missed = 0
while last - start < window:
    now = time.monotonic()
    if now - last > deadline:
        missed += 1
    last = now
print("missed", missed, "deadlines")
raise SystemExit(1 if missed >= 5 else 0)
"#;

#[test]
fn a_check_with_a_short_deadline_times_out_under_load_and_is_flaky_by_load() {
    let dir = workdir();
    std::fs::write(dir.path().join("watchdog.py"), WATCHDOG).unwrap();
    let ran = loopexec(
        dir.path(),
        &[
            "--json",
            "probe-check",
            "--check",
            "python3 watchdog.py",
            "--runs",
            "5",
            "--perturb",
            "load,seed",
        ],
    );
    let v = ran.json();
    assert_eq!(ran.code, 14, "{v}");
    assert_eq!(v["halt_reason"], "check_flaky", "{v}");
    let broken = v["probe"]["summary"]["broken_by"].as_array().unwrap();
    assert_eq!(broken.len(), 1, "{v}");
    assert_eq!(broken[0]["dimension"], "load", "{v}");
    // Runs 1 and 3 vary load (run i varies dimension (i - 1) mod 2): both broke, nothing else did.
    assert_eq!(broken[0]["runs"], serde_json::json!([1, 3]), "{v}");
    for r in v["probe"]["runs"].as_array().unwrap() {
        let loaded = r["dimension"] == "load";
        assert_eq!(r["cpu_quota_percent"].as_u64(), loaded.then_some(10), "{r}");
    }
}
