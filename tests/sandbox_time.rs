//! The zone's time namespace (`loopexec sandbox --clock-offset S`, probe-check's `clock`
//! dimension): the command's monotonic and boot clocks run `S` seconds from the host's, the wall
//! clock does not move. Every assertion is a bound from the offset, between host readings taken
//! before and after the zone, never a timing. Runs as root and as loopexec-test
//! (ci/test-unprivileged.sh): the time namespace is created inside the zone's user namespace.

mod common;
use common::bin;
use std::process::Command;

const OFFSET_S: i64 = 3 * 86_400;

fn host_clock(clock: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    assert_eq!(unsafe { libc::clock_gettime(clock, &mut ts) }, 0);
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// The command's stdout, run in a zone with `--clock-offset offset`.
fn in_zone(offset: &str, script: &str) -> String {
    let out = Command::new(bin())
        .args([
            "sandbox",
            "--clock-offset",
            offset,
            "--",
            "/bin/sh",
            "-c",
            script,
        ])
        .current_dir("/")
        .output()
        .expect("run loopexec");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Run `script` in a zone with the offset between two host readings of `clock`.
fn bracketed(clock: libc::clockid_t, offset: i64, script: &str) -> (f64, f64, f64) {
    let before = host_clock(clock);
    let seen: f64 = in_zone(&offset.to_string(), script)
        .parse()
        .expect("a number");
    let after = host_clock(clock);
    (before, seen, after)
}

#[test]
fn the_monotonic_clock_in_the_zone_is_the_hosts_plus_the_offset() {
    let (before, seen, after) = bracketed(
        libc::CLOCK_MONOTONIC,
        OFFSET_S,
        "python3 -c 'import time; print(time.clock_gettime(time.CLOCK_MONOTONIC))'",
    );
    let offset = OFFSET_S as f64;
    assert!(
        before + offset <= seen && seen <= after + offset,
        "host {before}..{after}, zone {seen}, offset {offset}"
    );
}

#[test]
fn uptime_in_the_zone_is_the_hosts_plus_the_offset() {
    // /proc/uptime is the boot clock, printed to 1/100 s (truncated): allow that much below.
    let (before, seen, after) =
        bracketed(libc::CLOCK_BOOTTIME, OFFSET_S, "cut -d' ' -f1 /proc/uptime");
    let offset = OFFSET_S as f64;
    assert!(
        before + offset - 0.01 <= seen && seen <= after + offset,
        "host {before}..{after}, zone {seen}, offset {offset}"
    );
}

#[test]
fn a_negative_offset_moves_the_clock_back() {
    let (before, seen, after) = bracketed(libc::CLOCK_BOOTTIME, -5, "cut -d' ' -f1 /proc/uptime");
    assert!(
        before - 5.0 - 0.01 <= seen && seen <= after - 5.0,
        "host {before}..{after}, zone {seen}"
    );
}

#[test]
fn the_wall_clock_is_not_moved() {
    let (before, seen, after) = bracketed(libc::CLOCK_REALTIME, OFFSET_S, "date +%s");
    // `date +%s` truncates to the second.
    assert!(
        before.floor() <= seen && seen <= after,
        "host {before}..{after}, zone {seen}"
    );
}

#[test]
fn an_offset_beyond_ten_years_is_refused_as_bad_input() {
    let out = Command::new(bin())
        .args([
            "--json",
            "sandbox",
            "--clock-offset",
            "400000000",
            "--",
            "/bin/true",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(20),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["errors"][0]["code"], "usage", "{v}");
    assert!(
        v["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("400000000 s is out of range"),
        "{v}"
    );
}
