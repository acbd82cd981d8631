//! The supervisor's systemd placement (src/delegation.rs) against a D-Bus peer that misbehaves:
//! whatever the bus does (never answers, answers what zbus cannot parse, hangs up, accepts and
//! never moves the process), `loopexec sandbox` ends: a failed placement is exit 30 naming the
//! cause in one JSON object, and SIGTERM during the wait is the interrupt exit class.
//!
//! The bus is a tiny D-Bus wire-protocol responder on a unix socket in a temporary directory,
//! named by DBUS_SYSTEM_BUS_ADDRESS (root) and DBUS_SESSION_BUS_ADDRESS (a user). The placement
//! only asks systemd on a cgroup v2 host whose init is systemd: on such a host the tests run as
//! they are; elsewhere, as root, each launch gets a mount namespace of its own with cgroup2 at
//! /sys/fs/cgroup and /run/systemd/system present (nothing on the host changes); otherwise
//! (unprivileged, not such a host) they have nothing to test and print a `NOT RUN` line on
//! stderr (under CI as root that would be a failure). Text from the bus reaches the JSON error
//! escaped.

mod common;

use common::bin;
use serde_json::Value;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::{Duration, Instant};

/// How long a launch may take before the test calls it hung (the placement's own deadline is
/// well below this).
const HUNG: Duration = Duration::from_secs(120);

/// What the fake bus does.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Shape {
    /// Accepts the socket and never answers the authentication handshake.
    MuteAtAuth,
    /// Authenticates, answers Hello, never answers StartTransientUnit.
    SilentOnStart,
    /// Answers StartTransientUnit with an error whose name is not a valid D-Bus error name.
    ErrorNamed(&'static str),
    /// Answers StartTransientUnit with an error message that has no error name at all.
    ErrorWithoutName,
    /// Answers StartTransientUnit with a well-named error whose message is this text.
    ErrorSaying(&'static str),
    /// Closes the connection when StartTransientUnit arrives.
    HangupOnStart,
    /// Answers StartTransientUnit with bytes that are no D-Bus message.
    GarbageOnStart,
    /// Answers StartTransientUnit with a job path and never moves the process into the unit.
    AcceptsNeverMoves,
}

struct FakeBus {
    _dir: tempfile::TempDir,
    address: String,
    /// A message each time the supervisor has connected, and when StartTransientUnit arrived.
    events: Receiver<&'static str>,
}

impl FakeBus {
    fn start(shape: Shape) -> FakeBus {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bus");
        let listener = UnixListener::bind(&path).unwrap();
        let (tx, events) = channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let tx = tx.clone();
                std::thread::spawn(move || serve(stream, shape, tx));
            }
        });
        FakeBus {
            _dir: dir,
            address: format!("unix:path={}", path.display()),
            events,
        }
    }

    /// Wait until the supervisor has reached `what` (`connected` or `start_transient_unit`).
    fn wait_for(&self, what: &str) {
        let until = Instant::now() + HUNG;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(e) if e == what => return,
                Ok(_) => continue,
                Err(e) => panic!("the supervisor never reached {what} on the fake bus: {e}"),
            }
        }
    }
}

/// A byte stream with what has been read but not consumed.
struct Wire {
    stream: UnixStream,
    buf: Vec<u8>,
}

impl Wire {
    /// Make sure `n` bytes are buffered; false on end of stream.
    fn fill(&mut self, n: usize) -> bool {
        while self.buf.len() < n {
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) | Err(_) => return false,
                Ok(k) => self.buf.extend_from_slice(&chunk[..k]),
            }
        }
        true
    }

    /// One SASL line (without CRLF), skipping the initial NUL byte.
    fn line(&mut self) -> Option<String> {
        loop {
            if let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = self.buf.drain(..end + 2).collect();
                let text = String::from_utf8_lossy(&line[..end])
                    .trim_start_matches('\0')
                    .to_string();
                return Some(text);
            }
            let have = self.buf.len();
            if !self.fill(have + 1) {
                return None;
            }
        }
    }

    /// One D-Bus message: (serial, member).
    fn message(&mut self) -> Option<(u32, String)> {
        if !self.fill(16) {
            return None;
        }
        let little = self.buf[0] == b'l';
        let u32_at = |b: &[u8], at: usize| {
            let bytes = [b[at], b[at + 1], b[at + 2], b[at + 3]];
            if little {
                u32::from_le_bytes(bytes)
            } else {
                u32::from_be_bytes(bytes)
            }
        };
        let body_len = u32_at(&self.buf, 4) as usize;
        let serial = u32_at(&self.buf, 8);
        let fields_len = u32_at(&self.buf, 12) as usize;
        let body_at = (16 + fields_len).next_multiple_of(8);
        if !self.fill(body_at + body_len) {
            return None;
        }
        let b: Vec<u8> = self.buf.drain(..body_at + body_len).collect();
        let mut member = String::new();
        let mut at = 16;
        while at < 16 + fields_len {
            at = at.next_multiple_of(8);
            let code = b[at];
            let sig_len = b[at + 1] as usize;
            let sig = b[at + 2..at + 2 + sig_len].to_vec();
            at += 2 + sig_len + 1;
            match sig.as_slice() {
                b"s" | b"o" => {
                    at = at.next_multiple_of(4);
                    let len = u32_at(&b, at) as usize;
                    if code == 3 {
                        member = String::from_utf8_lossy(&b[at + 4..at + 4 + len]).into_owned();
                    }
                    at += 4 + len + 1;
                }
                b"u" => at = at.next_multiple_of(4) + 4,
                b"g" => at += 1 + b[at] as usize + 1,
                other => panic!("fake bus: unexpected header field signature {other:?}"),
            }
        }
        Some((serial, member))
    }

    fn send(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes);
    }
}

/// A header field's value.
enum Field<'a> {
    U(u32),
    S(&'a str),
    G(&'a str),
}

fn pad(out: &mut Vec<u8>, to: usize) {
    while out.len() % to != 0 {
        out.push(0);
    }
}

fn string(out: &mut Vec<u8>, s: &str) {
    pad(out, 4);
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    out.push(0);
}

/// A little-endian D-Bus message of `kind` (2 method return, 3 error) with these header fields.
fn message(kind: u8, serial: u32, fields: &[(u8, Field)], body: &[u8]) -> Vec<u8> {
    let mut out = vec![b'l', kind, 0, 1];
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&serial.to_le_bytes());
    let mut array = Vec::new();
    for (code, value) in fields {
        // The array starts at offset 16 of the message, a multiple of 8: offsets agree.
        pad(&mut array, 8);
        array.push(*code);
        let (sig, write): (&str, Box<dyn Fn(&mut Vec<u8>)>) = match value {
            Field::U(v) => (
                "u",
                Box::new(move |o: &mut Vec<u8>| {
                    pad(o, 4);
                    o.extend_from_slice(&v.to_le_bytes());
                }),
            ),
            Field::S(s) => ("s", Box::new(move |o: &mut Vec<u8>| string(o, s))),
            Field::G(g) => (
                "g",
                Box::new(move |o: &mut Vec<u8>| {
                    o.push(g.len() as u8);
                    o.extend_from_slice(g.as_bytes());
                    o.push(0);
                }),
            ),
        };
        array.push(1);
        array.extend_from_slice(sig.as_bytes());
        array.push(0);
        write(&mut array);
    }
    out.extend_from_slice(&(array.len() as u32).to_le_bytes());
    out.extend_from_slice(&array);
    pad(&mut out, 8);
    out.extend_from_slice(body);
    out
}

fn string_body(s: &str) -> Vec<u8> {
    let mut body = Vec::new();
    string(&mut body, s);
    body
}

fn reply(serial: &mut u32, to: u32, signature: Option<&str>, body: &[u8]) -> Vec<u8> {
    *serial += 1;
    let mut fields = vec![
        (5, Field::U(to)),
        (6, Field::S(":1.42")),
        (7, Field::S("org.freedesktop.DBus")),
    ];
    if let Some(sig) = signature {
        fields.push((8, Field::G(sig)));
    }
    message(2, *serial, &fields, body)
}

fn error(serial: &mut u32, to: u32, name: Option<&str>) -> Vec<u8> {
    error_saying(serial, to, name, "refused")
}

fn error_saying(serial: &mut u32, to: u32, name: Option<&str>, text: &str) -> Vec<u8> {
    *serial += 1;
    let mut fields = vec![
        (5, Field::U(to)),
        (6, Field::S(":1.42")),
        (8, Field::G("s")),
    ];
    if let Some(name) = name {
        fields.push((4, Field::S(name)));
    }
    message(3, *serial, &fields, &string_body(text))
}

fn serve(stream: UnixStream, shape: Shape, tx: Sender<&'static str>) {
    let mut wire = Wire {
        stream,
        buf: Vec::new(),
    };
    let _ = tx.send("connected");
    if shape == Shape::MuteAtAuth {
        // Hold the connection open, reading and answering nothing, until the client goes.
        while wire.fill(wire.buf.len() + 1) {}
        return;
    }
    // SASL: EXTERNAL (or ANONYMOUS) accepted, unix fd passing agreed, until BEGIN.
    loop {
        let Some(line) = wire.line() else { return };
        let answer = match line.split(' ').collect::<Vec<_>>().as_slice() {
            ["AUTH", _, _, ..] | ["DATA", ..] => "OK 0123456789abcdef0123456789abcdef\r\n",
            ["AUTH", "EXTERNAL"] | ["AUTH", "ANONYMOUS"] => "DATA\r\n",
            ["NEGOTIATE_UNIX_FD"] => "AGREE_UNIX_FD\r\n",
            ["BEGIN"] => break,
            _ => "REJECTED EXTERNAL ANONYMOUS\r\n",
        };
        wire.send(answer.as_bytes());
    }
    let mut serial = 0;
    while let Some((call, member)) = wire.message() {
        match member.as_str() {
            "Hello" => {
                let r = reply(&mut serial, call, Some("s"), &string_body(":1.42"));
                wire.send(&r);
            }
            "StartTransientUnit" => {
                let _ = tx.send("start_transient_unit");
                match shape {
                    Shape::MuteAtAuth | Shape::SilentOnStart => {}
                    Shape::ErrorNamed(name) => {
                        let r = error(&mut serial, call, Some(name));
                        wire.send(&r);
                    }
                    Shape::ErrorWithoutName => {
                        let r = error(&mut serial, call, None);
                        wire.send(&r);
                    }
                    Shape::ErrorSaying(text) => {
                        let r = error_saying(
                            &mut serial,
                            call,
                            Some("org.freedesktop.DBus.Error.AccessDenied"),
                            text,
                        );
                        wire.send(&r);
                    }
                    Shape::HangupOnStart => return,
                    Shape::GarbageOnStart => wire.send(
                        b"l\x02\x00\x01\xff\xff\xff\xff\x07\x00\x00\x00this is not a D-Bus message",
                    ),
                    Shape::AcceptsNeverMoves => {
                        let r = reply(
                            &mut serial,
                            call,
                            Some("o"),
                            &string_body("/org/freedesktop/systemd1/job/4242"),
                        );
                        wire.send(&r);
                    }
                }
            }
            // Anything else (AddMatch, ...): an empty return.
            _ => {
                let r = reply(&mut serial, call, None, &[]);
                wire.send(&r);
            }
        }
    }
}

/// How a launch reaches the D-Bus placement on this host, if it can.
#[derive(Clone, Copy)]
enum Reach {
    /// cgroup v2 and systemd as init: the launch asks as it is.
    AsIs,
    /// As root elsewhere: the launch runs in a mount namespace of its own that looks like one.
    Namespace,
}

/// [`reach`], or (when this host has nothing to test) a `NOT RUN` line on stderr naming `test`.
/// As root the test can always reach the placement (its own mount namespace), so under CI as
/// root an unreachable placement is a failure, not a skip.
fn reach_or_not_run(test: &str) -> Option<Reach> {
    let reach = reach();
    if reach.is_none() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        assert!(
            !(ci && common::is_root()),
            "{test}: the placement is unreachable as root under CI"
        );
        eprintln!("NOT RUN: {test}: no cgroup v2 host with systemd as init, and not root (no mount namespace of its own)");
    }
    reach
}

fn reach() -> Option<Reach> {
    let pure_v2 = std::fs::read_to_string("/proc/self/cgroup")
        .map(|c| c.lines().all(|l| l.starts_with("0::")))
        .unwrap_or(false);
    if pure_v2 && Path::new("/run/systemd/system").is_dir() {
        Some(Reach::AsIs)
    } else if common::is_root() {
        Some(Reach::Namespace)
    } else {
        None
    }
}

/// The shipped exec policy with `cgroup_delegation = "systemd"` (always asks systemd).
fn systemd_policy(dir: &Path) -> PathBuf {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/exec.toml"))
            .unwrap();
    assert!(
        text.contains("\n[layers]\n"),
        "policies/exec.toml has a [layers] section"
    );
    let path = dir.join("exec-systemd.toml");
    std::fs::write(
        &path,
        text.replace(
            "\n[layers]\n",
            "\n[layers]\ncgroup_delegation = \"systemd\"\n",
        ),
    )
    .unwrap();
    path
}

/// `loopexec --json sandbox` under the systemd policy, with `bus` as both buses.
fn launch(reach: Reach, bus: &FakeBus, policy: &Path) -> Child {
    let mut cmd = Command::new(bin());
    cmd.args(["--json", "sandbox", "--policy"])
        .arg(policy)
        .args(["--", "/bin/true"])
        .current_dir("/")
        .env("DBUS_SYSTEM_BUS_ADDRESS", &bus.address)
        .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Reach::Namespace = reach {
        // SAFETY: only syscalls between fork and exec (unshare, mount, mkdir), no allocation:
        // nix passes these short paths through a stack buffer.
        unsafe {
            cmd.pre_exec(|| {
                use nix::mount::{mount, MsFlags};
                let none: Option<&str> = None;
                nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)?;
                mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)?;
                mount(Some("tmpfs"), "/run", Some("tmpfs"), MsFlags::empty(), none)?;
                nix::unistd::mkdir(
                    "/run/systemd",
                    nix::sys::stat::Mode::from_bits_truncate(0o755),
                )?;
                nix::unistd::mkdir(
                    "/run/systemd/system",
                    nix::sys::stat::Mode::from_bits_truncate(0o755),
                )?;
                mount(
                    Some("cgroup2"),
                    "/sys/fs/cgroup",
                    Some("cgroup2"),
                    MsFlags::empty(),
                    none,
                )?;
                Ok(())
            });
        }
    }
    cmd.spawn().expect("spawn loopexec")
}

/// Wait for the launch (killing it and failing the test after HUNG): (exit code, the JSON object).
fn finish(mut child: Child) -> (Option<i32>, Value, String) {
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let until = Instant::now() + HUNG;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = err.join().unwrap_or_default();
            panic!(
                "loopexec sandbox still waiting for the bus after {} s; its stderr:\n{stderr}",
                HUNG.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "stdout must be one JSON object, got:\n{stdout}\nstderr:\n{stderr}"
    );
    let v: Value =
        serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    (status.code(), v, stderr)
}

/// The launch under `shape` is a failed placement: exit 30, the JSON's one error naming every
/// part of `cause` (`{bus}` stands for the fake bus's address), right after
/// "asking systemd for a delegated scope failed: ".
fn assert_placement_fails(shape: Shape, cause: &[&str]) {
    let Some(reach) = reach_or_not_run(&format!("placement under {shape:?}")) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let policy = systemd_policy(dir.path());
    let bus = FakeBus::start(shape);
    let (code, v, stderr) = finish(launch(reach, &bus, &policy));
    assert_eq!(code, Some(30), "{shape:?}: {v}\nstderr:\n{stderr}");
    assert_eq!(v["status"], "error", "{v}");
    assert_eq!(v["errors"][0]["code"], "isolation_unsatisfiable", "{v}");
    assert_eq!(v["errors"].as_array().map(Vec::len), Some(1), "{v}");
    let message = v["errors"][0]["message"].as_str().unwrap_or_default();
    let (_, why) = message
        .split_once("asking systemd for a delegated scope failed: ")
        .unwrap_or_else(|| panic!("{shape:?}: {message}"));
    for part in cause {
        let part = part.replace("{bus}", &bus.address);
        assert!(
            why.contains(&part),
            "{shape:?}: expected {part:?} in: {why}"
        );
    }
}

/// The launch under `shape` is a failed placement (exit 30): its JSON error's message (None when
/// this host cannot reach the placement, with a NOT RUN line).
fn placement_failure(shape: Shape) -> Option<String> {
    let reach = reach_or_not_run(&format!("placement under {shape:?}"))?;
    let dir = tempfile::tempdir().unwrap();
    let policy = systemd_policy(dir.path());
    let bus = FakeBus::start(shape);
    let (code, v, stderr) = finish(launch(reach, &bus, &policy));
    assert_eq!(
        (code, v["errors"][0]["code"].as_str()),
        (Some(30), Some("isolation_unsatisfiable")),
        "{shape:?}: {v}\nstderr:\n{stderr}"
    );
    Some(
        v["errors"][0]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// SIGTERM once the supervisor is waiting at `stage` ends the launch as interrupted (143).
fn assert_sigterm_interrupts(shape: Shape, stage: &str) {
    let Some(reach) = reach_or_not_run(&format!("SIGTERM under {shape:?}")) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let policy = systemd_policy(dir.path());
    let bus = FakeBus::start(shape);
    let child = launch(reach, &bus, &policy);
    bus.wait_for(stage);
    // SAFETY: kill(2) of the loopexec this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let (code, v, stderr) = finish(child);
    assert_eq!(code, Some(143), "{shape:?}: {v}\nstderr:\n{stderr}");
    assert_eq!(v["status"], "interrupted", "{v}");
}

#[test]
fn a_bus_that_never_answers_start_transient_unit_is_a_failed_placement_at_the_deadline() {
    assert_placement_fails(
        Shape::SilentOnStart,
        &[
            "systemd did not answer StartTransientUnit loopexec-",
            ".scope within 15 s",
        ],
    );
}

#[test]
fn a_bus_that_never_answers_the_handshake_is_a_failed_placement_at_the_deadline() {
    assert_placement_fails(
        Shape::MuteAtAuth,
        &["no answer from the bus at {bus} (the ", " bus) within 15 s"],
    );
}

#[test]
fn an_error_reply_with_an_invalid_error_name_is_a_failed_placement() {
    assert_placement_fails(
        Shape::ErrorNamed("not a valid error name"),
        &[
            "the D-Bus client failed during StartTransientUnit loopexec-",
            "(thread \"zbus::Connection executor\" panicked: ",
        ],
    );
}

#[test]
fn an_error_message_with_terminal_controls_reaches_the_json_error_escaped() {
    let Some(message) = placement_failure(Shape::ErrorSaying(
        "denied\u{1b}]0;pwned\u{7}\nloopexec: sandbox ok",
    )) else {
        return;
    };
    assert!(message.contains("AccessDenied"), "{message}");
    assert!(
        message.contains("denied\\x1b]0;pwned\\x07\\nloopexec: sandbox ok"),
        "{message}"
    );
    assert!(!message.contains(['\u{1b}', '\u{7}', '\n']), "{message:?}");
}

#[test]
fn an_invalid_error_name_with_terminal_controls_reaches_the_json_error_escaped() {
    let Some(message) = placement_failure(Shape::ErrorNamed("bad\u{1b}[2J\nname")) else {
        return;
    };
    assert!(
        message.contains("the D-Bus client failed during StartTransientUnit loopexec-"),
        "{message}"
    );
    assert!(!message.contains(['\u{1b}', '\n']), "{message:?}");
}

#[test]
fn an_error_reply_with_an_empty_error_name_is_a_failed_placement() {
    assert_placement_fails(
        Shape::ErrorNamed(""),
        &[
            "the D-Bus client failed during StartTransientUnit loopexec-",
            "(thread \"zbus::Connection executor\" panicked: ",
        ],
    );
}

#[test]
fn an_error_reply_without_an_error_name_is_a_failed_placement() {
    assert_placement_fails(
        Shape::ErrorWithoutName,
        &[
            "StartTransientUnit loopexec-",
            ".scope: Invalid D-Bus method reply",
        ],
    );
}

#[test]
fn a_bus_that_hangs_up_during_the_call_is_a_failed_placement() {
    assert_placement_fails(
        Shape::HangupOnStart,
        &["StartTransientUnit loopexec-", ".scope: I/O error"],
    );
}

#[test]
fn a_reply_that_is_no_dbus_message_is_a_failed_placement() {
    assert_placement_fails(
        Shape::GarbageOnStart,
        &["StartTransientUnit loopexec-", ".scope: "],
    );
}

#[test]
fn a_unit_that_never_receives_the_process_is_a_failed_placement_at_the_deadline() {
    assert_placement_fails(
        Shape::AcceptsNeverMoves,
        &[
            "systemd accepted loopexec-",
            ".scope but did not move this process into it within 15 s",
        ],
    );
}

#[test]
fn sigterm_while_waiting_for_start_transient_unit_interrupts_the_launch() {
    assert_sigterm_interrupts(Shape::SilentOnStart, "start_transient_unit");
}

#[test]
fn sigterm_while_waiting_for_the_handshake_interrupts_the_launch() {
    assert_sigterm_interrupts(Shape::MuteAtAuth, "connected");
}

#[test]
fn sigterm_while_waiting_to_be_moved_into_the_unit_interrupts_the_launch() {
    assert_sigterm_interrupts(Shape::AcceptsNeverMoves, "start_transient_unit");
}
