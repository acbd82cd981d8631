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

use sandbox::policy::CgroupDelegation;
use sandbox::preflight::{self, CgroupReport};
use sandbox::Policy;
use serde::Serialize;
use std::sync::Mutex;
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
}

/// The outcome of the first placement, reused by every later call of this process.
static PLACED: Mutex<Option<Option<Scope>>> = Mutex::new(None);

/// The strongest delegation any of the supervisor's policies asks for (`systemd` over `auto` over
/// `inherit`), and whether all of them allow running without a cgroup.
fn combined(policies: &[&Policy]) -> (CgroupDelegation, bool) {
    let modes: Vec<CgroupDelegation> = policies.iter().map(|p| p.layers.cgroup_delegation).collect();
    let mode = if modes.contains(&CgroupDelegation::Systemd) {
        CgroupDelegation::Systemd
    } else if modes.contains(&CgroupDelegation::Auto) {
        CgroupDelegation::Auto
    } else {
        CgroupDelegation::Inherit
    };
    (mode, !policies.is_empty() && policies.iter().all(|p| p.may_skip(sandbox::Layer::Cgroup)))
}

/// Place this supervisor where its zones' cgroups can be created, for the policies its zones will
/// run under. `Ok(None)`: stay where we are (the launch then checks, and refuses if it must).
pub fn place_supervisor(policies: &[&Policy]) -> Result<Option<Scope>, Refusal> {
    let mut placed = PLACED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(done) = placed.as_ref() {
        return Ok(done.clone());
    }
    let (mode, may_skip) = combined(policies);
    let report = preflight::cgroup_report();
    let outcome = decide(mode, &report).map_err(|r| (r, mode));
    match outcome {
        Ok(scope) => {
            *placed = Some(scope.clone());
            Ok(scope)
        }
        // `auto` and a policy that may run without a cgroup: the launch skips the layer.
        Err((_, CgroupDelegation::Auto)) if may_skip => Ok(None),
        Err((refusal, _)) => Err(refusal),
    }
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
        }),
        _ => {
            let why = if report.delegated { String::new() } else { format!("{}; ", report.detail) };
            let scope = ask_systemd(root).map_err(|e| Refusal {
                cause: format!("{why}asking systemd for a delegated scope failed: {e}"),
                fix: preflight::cgroup_fix(report, root),
            })?;
            let after = preflight::cgroup_report();
            if !after.delegated {
                return Err(Refusal {
                    cause: format!("the delegated scope {} cannot host zones: {}", scope.unit, after.detail),
                    fix: preflight::cgroup_fix(&after, root),
                });
            }
            Ok(Some(scope))
        }
    }
}

/// The D-Bus address of the manager to ask: the system bus as root, the user's session bus
/// (dbus-user-session, or the user manager's own bus socket) otherwise.
fn connect(root: bool) -> Result<zbus::blocking::Connection, String> {
    if !std::path::Path::new("/run/systemd/system").exists() {
        return Err("systemd is not the init of this host".into());
    }
    if root {
        return zbus::blocking::Connection::system().map_err(|e| format!("connecting to the system bus: {e}"));
    }
    let address = match std::env::var("DBUS_SESSION_BUS_ADDRESS") {
        Ok(a) if !a.is_empty() => a,
        _ => {
            let runtime = std::env::var("XDG_RUNTIME_DIR")
                .unwrap_or_else(|_| format!("/run/user/{}", nix::unistd::geteuid().as_raw()));
            format!("unix:path={runtime}/bus")
        }
    };
    zbus::blocking::connection::Builder::address(address.as_str())
        .and_then(|b| b.build())
        .map_err(|e| format!("connecting to the user's session bus at {address} (is dbus-user-session installed and the user manager running?): {e}"))
}

/// StartTransientUnit for `loopexec-<pid>-<random>.scope` holding this process, `Delegate=yes`;
/// then wait (bounded) until the kernel shows us in it.
fn ask_systemd(root: bool) -> Result<Scope, String> {
    let conn = connect(root)?;
    let pid = std::process::id();
    let mut nonce = [0u8; 4];
    rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut nonce);
    let unit = format!("loopexec-{pid}-{}.scope", hex::encode(nonce));
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
            &(unit.as_str(), "fail", properties, aux),
        )
        .map_err(|e| format!("StartTransientUnit {unit}: {e}"))?;
    let _job: OwnedObjectPath = reply.body().deserialize().map_err(|e| format!("StartTransientUnit {unit}: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        if let Some(path) = own.lines().find_map(|l| l.strip_prefix("0::")) {
            if path.trim_end().ends_with(&format!("/{unit}")) {
                let manager = if root { "system" } else { "user" };
                return Ok(Scope { unit, manager, cgroup: path.trim().to_string() });
            }
        }
        if Instant::now() > deadline {
            return Err(format!("systemd accepted {unit} but did not move this process into it"));
        }
        std::thread::sleep(Duration::from_millis(10));
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
            detail: "/sys/fs/cgroup/user.slice/user-0.slice/session-1.scope holds 1 other process(es)".into(),
        }
    }

    #[test]
    fn the_strongest_mode_of_the_supervisors_policies_wins() {
        let (auto, inherit, systemd) =
            (policy(""), policy("cgroup_delegation = \"inherit\""), policy("cgroup_delegation = \"systemd\""));
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
        let v1 = CgroupReport { version: Some(1), delegated: false, unfit: Some("not_writable"), detail: String::new() };
        assert_eq!(decide(CgroupDelegation::Auto, &v1), Ok(None));
    }

    #[test]
    fn inherit_never_asks_systemd() {
        assert_eq!(decide(CgroupDelegation::Inherit, &v2(false)), Ok(None));
    }

    #[test]
    fn systemd_mode_refuses_on_cgroup_v1_naming_auto_as_the_fix() {
        let v1 = CgroupReport { version: Some(1), delegated: true, unfit: None, detail: String::new() };
        let refusal = decide(CgroupDelegation::Systemd, &v1).unwrap_err();
        assert!(refusal.cause.contains("needs the unified cgroup v2 hierarchy; this host has cgroup v1"), "{}", refusal.cause);
        assert!(refusal.fix.contains("cgroup_delegation = \"auto\""), "{}", refusal.fix);
    }
}
