//! Where this supervisor's zone cgroups live. On cgroup v2 the cgroup loopexec is started in often
//! cannot hold zones: a login session's scope is not delegated to its user and holds the shell
//! (no controllers for children of a cgroup with processes), a service's cgroup may lack the cpu
//! controller. Then, as rootless podman and crun do, the supervisor asks systemd over D-Bus (the
//! system manager as root, the user manager otherwise) for a transient scope of its own with
//! `Delegate=yes`, moves itself into it, and the sandbox crate creates its supervisor leaf and zone
//! cgroups beneath it as usual. One scope per supervisor process, asked once; systemd removes it
//! when the supervisor has exited.
//!
//! This lives in the supervisor (not the sandbox crate, which stays free of D-Bus): callers place
//! the supervisor before the first zone's launcher probes the host. `layers.cgroup_delegation`
//! decides: `auto` asks only when the current cgroup cannot host zones, `systemd` always asks (and
//! refuses without systemd), `inherit` never asks. Without systemd or D-Bus the launch refuses as
//! before, naming the exact `systemd-run` line that would make it work.
//!
//! The bus is not trusted to behave: the whole placement has [`PLACEMENT_DEADLINE`], the D-Bus
//! client runs on a thread of its own whose panics (and zbus's executor's) are caught and named,
//! and the wait honours SIGINT/SIGTERM. Any failure of the bus is a failed placement, recorded
//! for the process (a later placement returns it at once, never waits again); once the wait has
//! given up, the D-Bus thread does nothing consequential (a cancel flag: no StartTransientUnit,
//! and a late success undone by moving the supervisor back and stopping the scope); a panic is
//! tagged with its attempt; text from the bus is escaped ([`crate::inert::inert`]) before it
//! reaches a refusal's cause.

use sandbox::policy::CgroupDelegation;
use sandbox::preflight::{self, CgroupReport};
use sandbox::Policy;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zbus::zvariant::{OwnedObjectPath, Value};

/// The transient scope systemd delegated to this supervisor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Scope {
    /// The unit's name, e.g. `loopexec-4242-1a2b3c4d.scope`.
    pub unit: String,
    /// `system` or `user`: which systemd manager owns it.
    pub manager: &'static str,
    /// Its cgroup path (as in /proc/self/cgroup).
    pub cgroup: String,
}

/// Why zones cannot get a cgroup on this host, and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub cause: String,
    pub fix: String,
    /// The SIGINT or SIGTERM that ended the placement while it waited for systemd: no refusal
    /// of the host, an operator's interrupt (the caller ends with the interrupt exit class).
    pub interrupted: Option<i32>,
}

/// How long the whole placement may take: connecting to the bus, StartTransientUnit, and the
/// kernel showing this process in the new scope (systemd does all of it in milliseconds). Past
/// it the placement has failed; every D-Bus call also times out at it.
pub const PLACEMENT_DEADLINE: Duration = Duration::from_secs(15);

/// The outcome of the first placement, reused by every later call of this process: its scope, or
/// its refusal (a failed placement is not asked again, so a silent bus costs one deadline, not one
/// per call). An interrupt is not recorded.
static PLACED: Mutex<Option<Result<Option<Scope>, Refusal>>> = Mutex::new(None);

/// The strongest delegation any of the supervisor's policies asks for (`systemd` over `auto` over
/// `inherit`), and whether all of them allow running without a cgroup.
fn combined(policies: &[&Policy]) -> (CgroupDelegation, bool) {
    let modes: Vec<CgroupDelegation> = policies
        .iter()
        .map(|p| p.layers.cgroup_delegation)
        .collect();
    let mode = if modes.contains(&CgroupDelegation::Systemd) {
        CgroupDelegation::Systemd
    } else if modes.contains(&CgroupDelegation::Auto) {
        CgroupDelegation::Auto
    } else {
        CgroupDelegation::Inherit
    };
    (
        mode,
        !policies.is_empty() && policies.iter().all(|p| p.may_skip(sandbox::Layer::Cgroup)),
    )
}

/// Place this supervisor where its zones' cgroups can be created, for the policies its zones will
/// run under. `Ok(None)`: stay where we are (the launch then checks, and refuses if it must).
pub fn place_supervisor(policies: &[&Policy]) -> Result<Option<Scope>, Refusal> {
    let mut placed = PLACED.lock().unwrap_or_else(|p| p.into_inner());
    let (mode, may_skip) = combined(policies);
    let outcome = once(&mut placed, || decide(mode, &preflight::cgroup_report()));
    match outcome.map_err(|r| (r, mode)) {
        Ok(scope) => Ok(scope),
        // An interrupt is no refusal: it ends the launch, whatever the policy allows.
        Err((refusal, _)) if refusal.interrupted.is_some() => Err(refusal),
        // `auto` and a policy that may run without a cgroup: the launch skips the layer.
        Err((_, CgroupDelegation::Auto)) if may_skip => Ok(None),
        Err((refusal, _)) => Err(refusal),
    }
}

/// The recorded outcome in `placed`, else `place()`'s, recorded unless an interrupt ended it.
fn once(
    placed: &mut Option<Result<Option<Scope>, Refusal>>,
    place: impl FnOnce() -> Result<Option<Scope>, Refusal>,
) -> Result<Option<Scope>, Refusal> {
    if let Some(done) = placed.as_ref() {
        return done.clone();
    }
    let outcome = place();
    if !matches!(&outcome, Err(r) if r.interrupted.is_some()) {
        *placed = Some(outcome.clone());
    }
    outcome
}

fn decide(mode: CgroupDelegation, report: &CgroupReport) -> Result<Option<Scope>, Refusal> {
    let root = nix::unistd::geteuid().is_root();
    match (mode, report.version) {
        (CgroupDelegation::Inherit, _) => Ok(None),
        (CgroupDelegation::Auto, Some(2)) if report.delegated => Ok(None),
        (CgroupDelegation::Auto, v) if v != Some(2) => Ok(None),
        (CgroupDelegation::Systemd, v) if v != Some(2) => Err(Refusal {
            cause: format!(
                "layers.cgroup_delegation = \"systemd\" needs the unified cgroup v2 hierarchy; this host has {}",
                v.map(|v| format!("cgroup v{v}")).unwrap_or_else(|| "no cgroup hierarchy".into())
            ),
            fix: "use layers.cgroup_delegation = \"auto\" (zones then go beneath loopexec's own cgroups)".into(),
            interrupted: None,
        }),
        _ => {
            let why = if report.delegated { String::new() } else { format!("{}; ", report.detail) };
            let scope = ask_systemd(root).map_err(|e| match e {
                AskError::Failed(e) => Refusal {
                    cause: format!("{why}asking systemd for a delegated scope failed: {e}"),
                    fix: preflight::cgroup_fix(report, root),
                    interrupted: None,
                },
                AskError::Interrupted(sig) => Refusal {
                    cause: format!("interrupted by {} while asking systemd for a delegated scope", crate::interrupt::signal_name(sig)),
                    fix: "start it again".into(),
                    interrupted: Some(sig),
                },
            })?;
            let after = preflight::cgroup_report();
            if !after.delegated {
                return Err(Refusal {
                    cause: format!("the delegated scope {} cannot host zones: {}", scope.unit, after.detail),
                    fix: preflight::cgroup_fix(&after, root),
                    interrupted: None,
                });
            }
            Ok(Some(scope))
        }
    }
}

/// The D-Bus address of the manager to ask: the system bus as root, the user's session bus
/// (dbus-user-session, or the user manager's own bus socket) otherwise; and what to call it.
fn bus_address(root: bool) -> Result<(String, &'static str), String> {
    if !std::path::Path::new("/run/systemd/system").exists() {
        return Err("systemd is not the init of this host".into());
    }
    let set = |var: &str| std::env::var(var).ok().filter(|a| !a.is_empty());
    if root {
        let address = set("DBUS_SYSTEM_BUS_ADDRESS")
            .unwrap_or_else(|| "unix:path=/var/run/dbus/system_bus_socket".into());
        return Ok((address, "the system bus"));
    }
    let address = set("DBUS_SESSION_BUS_ADDRESS").unwrap_or_else(|| {
        let runtime = std::env::var("XDG_RUNTIME_DIR")
            .unwrap_or_else(|_| format!("/run/user/{}", nix::unistd::geteuid().as_raw()));
        format!("unix:path={runtime}/bus")
    });
    Ok((address, "the user's session bus"))
}

/// Why asking systemd ended without a scope.
#[derive(Debug, PartialEq, Eq)]
enum AskError {
    Failed(String),
    /// SIGINT or SIGTERM arrived while waiting.
    Interrupted(i32),
}

/// What the D-Bus thread reports to the waiting supervisor.
enum Progress {
    /// Authenticated and greeted by the bus; StartTransientUnit is on its way.
    Connected,
    /// systemd's answer to StartTransientUnit: accepted (a job), or why not.
    Answered(Result<(), String>),
}

/// The D-Bus exchange's thread, and the prefix of the threads zbus starts for a connection.
const DBUS_THREAD: &str = "loopexec systemd placement";
const ZBUS_THREADS: &str = "zbus";
/// How often the wait looks at interrupts and the D-Bus thread's fate.
const TICK: Duration = Duration::from_millis(20);

/// The first panic of a D-Bus thread (ours or zbus's) since [`watch_dbus_panics`] was last
/// called, tagged with the attempt it belongs to: our thread's by its name, zbus's by the attempt
/// current when it panicked (at most one attempt per process reaches the bus: [`PLACED`]).
static DBUS_PANIC: Mutex<Option<(u64, String)>> = Mutex::new(None);
/// The current placement attempt (one per [`watch_dbus_panics`]).
static ATTEMPT: AtomicU64 = AtomicU64::new(0);

/// Record panics of the D-Bus threads instead of printing them (the placement's failure names
/// them); every other thread's panic goes to the hook that was installed before. zbus's executor
/// thread panics on some replies (an error whose name is invalid), and nothing else tells the
/// waiting caller that no answer will come.
/// Returns the new attempt's id: our D-Bus thread is named `DBUS_THREAD #<id>`.
fn watch_dbus_panics() -> u64 {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    let attempt = ATTEMPT.fetch_add(1, Ordering::SeqCst) + 1;
    *DBUS_PANIC.lock().unwrap_or_else(|p| p.into_inner()) = None;
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current();
            let name = thread.name().unwrap_or_default();
            if !name.starts_with(DBUS_THREAD) && !name.starts_with(ZBUS_THREADS) {
                return previous(info);
            }
            let what = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned());
            let text = format!(
                "thread {:?} panicked: {}",
                crate::inert::inert(name),
                crate::inert::inert(what.as_deref().unwrap_or("(no message)"))
            );
            let tag = name
                .rsplit_once(" #")
                .and_then(|(_, n)| n.parse().ok())
                .unwrap_or_else(|| ATTEMPT.load(Ordering::SeqCst));
            let mut slot = DBUS_PANIC.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert_with(|| (tag, bounded(&text, 300)));
        }));
    });
    attempt
}

/// The recorded panic of attempt `attempt`'s D-Bus threads (another attempt's is not its).
fn dbus_panic(attempt: u64) -> Option<String> {
    DBUS_PANIC
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .filter(|(tag, _)| *tag == attempt)
        .map(|(_, text)| text.clone())
}

/// Text from the bus (an error's name and message), escaped and bounded for a refusal's cause.
fn bus_text(text: &str) -> String {
    bounded(&crate::inert::inert(text), 300)
}

/// At most `max` bytes of `text`, cut on a character boundary.
fn bounded(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = if end < text.len() { "..." } else { "" };
    format!("{}{cut}", &text[..end])
}

/// StartTransientUnit for `loopexec-<pid>-<random>.scope` holding this process, `Delegate=yes`;
/// then wait until the kernel shows us in it. The whole exchange has [`PLACEMENT_DEADLINE`]: the
/// D-Bus client runs on a thread of its own (its calls also time out at the deadline) and this
/// thread waits for its answer, SIGINT/SIGTERM and the deadline, so no bus (silent, hanging up,
/// answering what the client cannot parse, panicking the client) holds the supervisor.
fn ask_systemd(root: bool) -> Result<Scope, AskError> {
    let deadline = Instant::now() + PLACEMENT_DEADLINE;
    let (address, bus) = bus_address(root).map_err(AskError::Failed)?;
    let pid = std::process::id();
    let mut nonce = [0u8; 4];
    rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut nonce);
    let unit = format!("loopexec-{pid}-{}.scope", hex::encode(nonce));
    let attempt = watch_dbus_panics();
    let (tx, rx) = std::sync::mpsc::channel();
    let (thread_address, thread_unit) = (address.clone(), unit.clone());
    // Set when this wait gives up: the thread then does nothing consequential.
    let cancel = Arc::new(AtomicBool::new(false));
    let thread_cancel = Arc::clone(&cancel);
    let original = own_cgroup();
    std::thread::Builder::new()
        .name(format!("{DBUS_THREAD} #{attempt}"))
        .spawn(move || {
            let ask = || {
                start_unit(
                    &thread_address,
                    &thread_unit,
                    deadline,
                    &tx,
                    &thread_cancel,
                    original.as_deref(),
                )
            };
            let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(ask))
                .unwrap_or_else(|_| {
                    Err(dbus_panic(attempt).unwrap_or_else(|| "the D-Bus client panicked".into()))
                });
            let _ = tx.send(Progress::Answered(answer));
        })
        .map_err(|e| AskError::Failed(format!("starting the D-Bus client thread: {e}")))?;
    let waited = wait_for_unit(&rx, attempt, &unit, &address, bus, deadline, root);
    if waited.is_err() {
        cancel.store(true, Ordering::SeqCst);
    }
    waited
}

/// This process's cgroup v2 path (as in /proc/self/cgroup).
fn own_cgroup() -> Option<String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    own.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim().to_string())
}

/// [`ask_systemd`]'s wait for the D-Bus thread's answer and the move into `unit`.
fn wait_for_unit(
    rx: &std::sync::mpsc::Receiver<Progress>,
    attempt: u64,
    unit: &str,
    address: &str,
    bus: &str,
    deadline: Instant,
    root: bool,
) -> Result<Scope, AskError> {
    let unit = unit.to_string();
    let secs = PLACEMENT_DEADLINE.as_secs();
    let mut connected = false;
    loop {
        if let Some(sig) = crate::interrupt::pending() {
            return Err(AskError::Interrupted(sig));
        }
        if let Some(panic) = dbus_panic(attempt) {
            return Err(AskError::Failed(format!(
                "the D-Bus client failed during StartTransientUnit {unit} ({panic})"
            )));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(AskError::Failed(if connected {
                format!("systemd did not answer StartTransientUnit {unit} within {secs} s")
            } else {
                format!("no answer from the bus at {address} ({bus}) within {secs} s")
            }));
        }
        match rx.recv_timeout(left.min(TICK)) {
            Ok(Progress::Connected) => connected = true,
            Ok(Progress::Answered(Ok(()))) => break,
            Ok(Progress::Answered(Err(e))) => return Err(AskError::Failed(e)),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(AskError::Failed(format!(
                    "the D-Bus client ended without systemd's answer to StartTransientUnit {unit}"
                )))
            }
        }
    }
    loop {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        if let Some(path) = own.lines().find_map(|l| l.strip_prefix("0::")) {
            if path.trim_end().ends_with(&format!("/{unit}")) {
                let manager = if root { "system" } else { "user" };
                return Ok(Scope {
                    unit,
                    manager,
                    cgroup: path.trim().to_string(),
                });
            }
        }
        if let Some(sig) = crate::interrupt::pending() {
            return Err(AskError::Interrupted(sig));
        }
        if Instant::now() >= deadline {
            return Err(AskError::Failed(format!(
                "systemd accepted {unit} but did not move this process into it within {secs} s"
            )));
        }
        std::thread::sleep(TICK);
    }
}

/// The D-Bus half of [`ask_systemd`], on its own thread: connect (reporting it), then
/// StartTransientUnit; every call times out at `deadline`. Once `cancel` is set (the wait gave
/// up) nothing consequential is done: no StartTransientUnit, and a success that arrives after it
/// is undone, best-effort on this thread (never the supervisor's): this process moved back to
/// `original`, then StopUnit of the (then empty) scope.
fn start_unit(
    address: &str,
    unit: &str,
    deadline: Instant,
    progress: &std::sync::mpsc::Sender<Progress>,
    cancel: &AtomicBool,
    original: Option<&str>,
) -> Result<(), String> {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    let conn = zbus::blocking::connection::Builder::address(address)
        .map(|b| b.method_timeout(left))
        .and_then(|b| b.build())
        .map_err(|e| format!("connecting to the bus at {address} (for a user: is dbus-user-session installed and the user manager running?): {}", bus_text(&e.to_string())))?;
    let _ = progress.send(Progress::Connected);
    if cancel.load(Ordering::SeqCst) {
        return Err("cancelled before StartTransientUnit".into());
    }
    let pid = std::process::id();
    let description = format!("loopexec supervisor {pid}");
    let properties: Vec<(&str, Value<'_>)> = vec![
        ("Description", Value::from(description.as_str())),
        ("PIDs", Value::from(vec![pid])),
        ("Delegate", Value::from(true)),
        ("CollectMode", Value::from("inactive-or-failed")),
    ];
    let aux: Vec<(&str, Vec<(&str, Value<'_>)>)> = Vec::new();
    let reply = conn
        .call_method(
            Some("org.freedesktop.systemd1"),
            "/org/freedesktop/systemd1",
            Some("org.freedesktop.systemd1.Manager"),
            "StartTransientUnit",
            &(unit, "fail", properties, aux),
        )
        .map_err(|e| format!("StartTransientUnit {unit}: {}", bus_text(&e.to_string())))?;
    let _job: OwnedObjectPath = reply
        .body()
        .deserialize()
        .map_err(|e| format!("StartTransientUnit {unit}: {}", bus_text(&e.to_string())))?;
    if cancel.load(Ordering::SeqCst) {
        undo_late_placement(&conn, unit, original);
        return Err("cancelled: a late StartTransientUnit undone".into());
    }
    Ok(())
}

/// A scope systemd started after the wait gave up: move this process back to `original` (its
/// cgroup before the placement), then stop the scope, now empty. Only when the move back worked:
/// stopping a scope that still holds the supervisor would signal it.
fn undo_late_placement(conn: &zbus::blocking::Connection, unit: &str, original: Option<&str>) {
    let Some(original) = original else {
        tracing::warn!("a late StartTransientUnit {unit} moved this process; its cgroup before is unknown, so it stays");
        return;
    };
    let procs = format!(
        "/sys/fs/cgroup{}/cgroup.procs",
        original.trim_end_matches('/')
    );
    // Every thread of the process moves with the process's pid on cgroup v2.
    if let Err(e) = std::fs::write(&procs, std::process::id().to_string()) {
        tracing::warn!("a late StartTransientUnit {unit} moved this process; moving it back to {original} failed: {e}");
        return;
    }
    let stop = conn.call_method(
        Some("org.freedesktop.systemd1"),
        "/org/freedesktop/systemd1",
        Some("org.freedesktop.systemd1.Manager"),
        "StopUnit",
        &(unit, "fail"),
    );
    if let Err(e) = stop {
        tracing::warn!(
            "StopUnit {unit} after a late placement: {}",
            bus_text(&e.to_string())
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(layers: &str) -> Policy {
        Policy::parse(format!("[layers]\n{layers}\n").as_bytes(), "t").unwrap()
    }

    fn v2(delegated: bool) -> CgroupReport {
        CgroupReport {
            version: Some(2),
            delegated,
            unfit: (!delegated).then_some("other_processes"),
            detail:
                "/sys/fs/cgroup/user.slice/user-0.slice/session-1.scope holds 1 other process(es)"
                    .into(),
        }
    }

    #[test]
    fn the_strongest_mode_of_the_supervisors_policies_wins() {
        let (auto, inherit, systemd) = (
            policy(""),
            policy("cgroup_delegation = \"inherit\""),
            policy("cgroup_delegation = \"systemd\""),
        );
        assert_eq!(combined(&[&inherit, &auto]).0, CgroupDelegation::Auto);
        assert_eq!(combined(&[&inherit, &systemd]).0, CgroupDelegation::Systemd);
        assert_eq!(combined(&[&inherit, &inherit]).0, CgroupDelegation::Inherit);
    }

    #[test]
    fn skipping_the_cgroup_needs_every_policy_to_allow_it() {
        let skip = policy("may_skip = [\"cgroup\"]");
        assert!(combined(&[&skip, &skip]).1);
        assert!(!combined(&[&skip, &policy("")]).1);
    }

    #[test]
    fn auto_stays_in_a_cgroup_that_can_host_zones() {
        assert_eq!(decide(CgroupDelegation::Auto, &v2(true)), Ok(None));
    }

    #[test]
    fn auto_stays_on_cgroup_v1_where_systemd_cannot_delegate_controllers() {
        let v1 = CgroupReport {
            version: Some(1),
            delegated: false,
            unfit: Some("not_writable"),
            detail: String::new(),
        };
        assert_eq!(decide(CgroupDelegation::Auto, &v1), Ok(None));
    }

    #[test]
    fn inherit_never_asks_systemd() {
        assert_eq!(decide(CgroupDelegation::Inherit, &v2(false)), Ok(None));
    }

    #[test]
    fn systemd_mode_refuses_on_cgroup_v1_naming_auto_as_the_fix() {
        let v1 = CgroupReport {
            version: Some(1),
            delegated: true,
            unfit: None,
            detail: String::new(),
        };
        let refusal = decide(CgroupDelegation::Systemd, &v1).unwrap_err();
        assert!(
            refusal
                .cause
                .contains("needs the unified cgroup v2 hierarchy; this host has cgroup v1"),
            "{}",
            refusal.cause
        );
        assert!(
            refusal.fix.contains("cgroup_delegation = \"auto\""),
            "{}",
            refusal.fix
        );
    }

    #[test]
    fn a_panic_of_zbus_s_executor_thread_is_recorded_with_its_message() {
        let _one = PANICS.lock().unwrap_or_else(|p| p.into_inner());
        let attempt = watch_dbus_panics();
        let died = std::thread::Builder::new()
            .name("zbus::Connection executor".into())
            .spawn(|| panic!("Invalid field reconstruction: {}", "InvalidName"))
            .unwrap()
            .join();
        assert!(died.is_err());
        assert_eq!(
            dbus_panic(attempt).as_deref(),
            Some("thread \"zbus::Connection executor\" panicked: Invalid field reconstruction: InvalidName")
        );
    }

    /// The panic record is the process's: one test at a time uses it.
    static PANICS: Mutex<()> = Mutex::new(());

    fn refusal(cause: &str, interrupted: Option<i32>) -> Refusal {
        Refusal {
            cause: cause.into(),
            fix: "f".into(),
            interrupted,
        }
    }

    #[test]
    fn a_failed_placement_is_returned_at_once_by_every_later_call() {
        let mut placed = None;
        let failed = Err(refusal("no answer from the bus within 15 s", None));
        assert_eq!(once(&mut placed, || failed.clone()), failed);
        // A later call does not ask (nor wait) again: the recorded failure, at once.
        assert_eq!(once(&mut placed, || unreachable!("asked twice")), failed);
        let mut skipped = None;
        assert_eq!(once(&mut skipped, || Ok(None)), Ok(None));
        assert_eq!(once(&mut skipped, || unreachable!("asked twice")), Ok(None));
    }

    #[test]
    fn an_interrupted_placement_is_not_recorded() {
        let mut placed = None;
        assert_eq!(
            once(&mut placed, || Err(refusal("interrupted", Some(15)))),
            Err(refusal("interrupted", Some(15)))
        );
        assert_eq!(once(&mut placed, || Ok(None)), Ok(None));
    }

    #[test]
    fn a_panic_of_an_earlier_attempts_thread_is_not_blamed_on_the_next() {
        let _one = PANICS.lock().unwrap_or_else(|p| p.into_inner());
        let first = watch_dbus_panics();
        let second = watch_dbus_panics();
        let died = std::thread::Builder::new()
            .name(format!("{DBUS_THREAD} #{first}"))
            .spawn(|| panic!("late"))
            .unwrap()
            .join();
        assert!(died.is_err());
        assert_eq!(dbus_panic(second), None);
        assert_eq!(
            dbus_panic(first).as_deref(),
            Some(format!("thread \"{DBUS_THREAD} #{first}\" panicked: late").as_str())
        );
    }

    #[test]
    fn text_from_the_bus_reaches_a_cause_escaped() {
        assert_eq!(
            bus_text("org.x.Err: \u{1b}]0;pwned\u{7}\nloopexec: success"),
            "org.x.Err: \\x1b]0;pwned\\x07\\nloopexec: success"
        );
        let _one = PANICS.lock().unwrap_or_else(|p| p.into_inner());
        let attempt = watch_dbus_panics();
        let died = std::thread::Builder::new()
            .name(format!("{DBUS_THREAD} #{attempt}"))
            .spawn(|| panic!("bad \u{1b}[2J\rreply"))
            .unwrap()
            .join();
        assert!(died.is_err());
        assert_eq!(
            dbus_panic(attempt).as_deref(),
            Some(
                format!("thread \"{DBUS_THREAD} #{attempt}\" panicked: bad \\x1b[2J\\rreply")
                    .as_str()
            )
        );
    }

    #[test]
    fn a_panic_message_is_bounded_on_a_character_boundary() {
        assert_eq!(bounded("short", 300), "short");
        assert_eq!(bounded("\u{e9}\u{e9}\u{e9}", 3), "\u{e9}...");
    }
}
