//! What this host offers, layer by layer, and whether a policy can run on it. Cheap checks only
//! (sysctl, /proc and cgroupfs reads, one Landlock syscall); the doctor then starts a real zone
//! the way a launch does. Every refusal names the fix for this host: for a cgroup v2 that cannot
//! host zones, the exact `systemd-run ... -p Delegate=yes` line for this user (the supervisor asks
//! systemd for that scope itself unless `layers.cgroup_delegation = "inherit"`, see
//! `src/delegation.rs`).

use crate::cgroup;
use crate::error::Layer;
use crate::policy::Policy;
use serde::Serialize;

/// A layer the host cannot provide: why, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Missing {
    pub layer: Layer,
    pub cause: String,
    pub fix: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct CgroupReport {
    /// 1 or 2; None when no usable hierarchy was found.
    pub version: Option<u8>,
    /// Whether zone cgroups can be created beneath our own cgroup (writable, controllers
    /// available, no other process in the way of enabling them).
    pub delegated: bool,
    /// Why not, as a kind: `not_writable`, `controllers_missing`, `other_processes`, `no_hierarchy`.
    pub unfit: Option<&'static str>,
    pub detail: String,
}

/// The cgroup half of the preflight: can zone cgroups be created where this process runs now?
pub fn cgroup_report() -> CgroupReport {
    match cgroup::detect() {
        Ok(h) => match h.fitness() {
            Ok(()) => CgroupReport {
                version: Some(h.version()),
                delegated: true,
                unfit: None,
                detail: format!("{h:?}"),
            },
            Err(why) => {
                let kind = match why {
                    cgroup::Unfit::NotWritable(_) => "not_writable",
                    cgroup::Unfit::ControllersMissing { .. } => "controllers_missing",
                    cgroup::Unfit::SharedWithOtherProcesses { .. } => "other_processes",
                };
                CgroupReport {
                    version: Some(h.version()),
                    delegated: false,
                    unfit: Some(kind),
                    detail: why.to_string(),
                }
            }
        },
        Err(e) => CgroupReport {
            version: None,
            delegated: false,
            unfit: Some("no_hierarchy"),
            detail: e.to_string(),
        },
    }
}

/// The command line that starts loopexec in a delegated scope of its own, for this user.
pub fn systemd_run_line(root: bool) -> String {
    let user = if root { "" } else { " --user" };
    format!("systemd-run{user} --scope -p Delegate=yes loopexec ...")
}

/// The fix for a cgroup that cannot host zones, on this host, for this user.
pub fn cgroup_fix(report: &CgroupReport, root: bool) -> String {
    match (report.version, report.unfit) {
        (Some(2), Some("controllers_missing")) if !root => format!(
            "the user manager does not delegate memory, pids and cpu: as root `mkdir -p /etc/systemd/system/user@.service.d && printf '[Service]\\nDelegate=cpu memory pids\\n' > /etc/systemd/system/user@.service.d/delegate.conf && systemctl daemon-reload`, log in again, then start loopexec with `{}` (or let it ask systemd itself: layers.cgroup_delegation = \"auto\")",
            systemd_run_line(root)
        ),
        (Some(2), _) => format!(
            "start loopexec in a delegated scope of its own: `{}` (loopexec asks systemd for one itself unless layers.cgroup_delegation = \"inherit\"; that needs systemd and D-Bus{}); from a service unit, set `Delegate=yes` in its [Service] section and start loopexec as its only process",
            systemd_run_line(root),
            if root { "" } else { ", and for a user the dbus-user-session package" }
        ),
        (Some(_), _) => "cgroup v1: as root, create a cgroup beneath the current one for each of memory, pids, cpu, chown it to this user and move the shell into it (see ci/setup-test-user.sh), or run as root".into(),
        (None, _) => "mount the cgroup hierarchy (cgroup2 at /sys/fs/cgroup)".into(),
    }
}

/// The isolation features of this host, for the current user.
#[derive(Debug, Clone, Serialize)]
pub struct HostReport {
    pub running_as_root: bool,
    pub kernel: String,
    /// None when user namespaces look available; else why not.
    pub user_namespaces: Option<Missing>,
    /// `kernel.apparmor_restrict_unprivileged_userns` (Ubuntu 23.10+), when present.
    pub apparmor_restrict_unprivileged_userns: Option<bool>,
    pub landlock_abi: u32,
    pub seccomp: bool,
    pub cgroup: CgroupReport,
    /// None when the host can cap a zone's writable layers (`resources.disk_bytes`, with
    /// [`crate::volume::mechanism()`]); else why not.
    pub disk_cap: Option<Missing>,
}

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Inspect the host (no process is started).
pub fn probe() -> HostReport {
    let root = nix::unistd::geteuid().is_root();
    let apparmor =
        read_trim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").map(|v| v == "1");
    let user_namespaces = userns_missing(root);
    let cgroup = cgroup_report();
    HostReport {
        running_as_root: root,
        kernel: read_trim("/proc/sys/kernel/osrelease").unwrap_or_default(),
        user_namespaces,
        apparmor_restrict_unprivileged_userns: apparmor,
        landlock_abi: crate::sys::landlock_abi(),
        seccomp: std::fs::read_to_string("/proc/self/status")
            .map(|s| s.contains("\nSeccomp:"))
            .unwrap_or(false),
        cgroup,
        disk_cap: crate::volume::unavailable(),
    }
}

fn userns_missing(root: bool) -> Option<Missing> {
    if read_trim("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return Some(Missing {
            layer: Layer::UserNamespace,
            cause: "user.max_user_namespaces is 0".into(),
            fix: "sysctl -w user.max_user_namespaces=15000 (and persist it in /etc/sysctl.d)"
                .into(),
        });
    }
    if !root && read_trim("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return Some(Missing {
            layer: Layer::UserNamespace,
            cause: "kernel.unprivileged_userns_clone is 0".into(),
            fix: "sysctl -w kernel.unprivileged_userns_clone=1".into(),
        });
    }
    // kernel.apparmor_restrict_unprivileged_userns=1 alone does not refuse: a profile granting
    // `userns` to this binary (policies/apparmor/loopexec) lifts it, and only creating the zone
    // shows whether one does (spawn.rs then names the profile as the fix; doctor shows the sysctl).
    None
}

/// The Ubuntu 23.10+ case ("setting up uid map: Permission denied"): the fix is the profile
/// shipped in policies/apparmor/loopexec, for the binary that is running now.
pub fn apparmor_missing() -> Missing {
    let exe = std::fs::read_link("/proc/self/exe")
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "/usr/local/bin/loopexec".into());
    Missing {
        layer: Layer::UserNamespace,
        cause: "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1) and no profile grants `userns` to this binary".into(),
        fix: format!("install the AppArmor profile shipped in policies/apparmor/loopexec for {exe}: `sed 's#@LOOPEXEC_BIN@#{exe}#' policies/apparmor/loopexec | sudo tee /etc/apparmor.d/loopexec >/dev/null && sudo apparmor_parser -r /etc/apparmor.d/loopexec` (docs/hosts.md); less safely, sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"),
    }
}

impl HostReport {
    /// Every layer this policy needs that the host lacks, including those the policy lets us skip.
    pub fn missing(&self, policy: &Policy) -> Vec<Missing> {
        let mut out = Vec::new();
        if let Some(m) = &self.user_namespaces {
            out.push(m.clone());
        }
        if self.landlock_abi == 0 {
            out.push(Missing {
                layer: Layer::Landlock,
                cause: "the kernel offers no Landlock ABI (not built, or not in the active LSM list)".into(),
                fix: "boot a kernel >= 5.13 with CONFIG_SECURITY_LANDLOCK=y and `landlock` in lsm= (e.g. lsm=landlock,lockdown,yama,integrity,apparmor)".into(),
            });
        }
        if !self.seccomp {
            out.push(Missing {
                layer: Layer::Seccomp,
                cause: "the kernel has no seccomp filter support".into(),
                fix: "use a kernel built with CONFIG_SECCOMP_FILTER=y".into(),
            });
        }
        if !self.cgroup.delegated {
            let fix = cgroup_fix(&self.cgroup, self.running_as_root);
            out.push(Missing {
                layer: Layer::Cgroup,
                cause: self.cgroup.detail.clone(),
                fix,
            });
        }
        if policy.resources.disk_bytes.is_some() {
            out.extend(self.disk_cap.clone());
        }
        out
    }

    /// Missing layers the policy does not allow to skip: if non-empty, the zone must not start.
    pub fn can_satisfy(&self, policy: &Policy) -> Vec<Missing> {
        self.missing(policy)
            .into_iter()
            .filter(|m| !policy.may_skip(m.layer))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(landlock_abi: u32, delegated: bool) -> HostReport {
        HostReport {
            running_as_root: false,
            kernel: String::new(),
            user_namespaces: None,
            apparmor_restrict_unprivileged_userns: None,
            landlock_abi,
            seccomp: true,
            cgroup: CgroupReport {
                version: Some(1),
                delegated,
                unfit: (!delegated).then_some("not_writable"),
                detail: "not writable".into(),
            },
            disk_cap: None,
        }
    }

    #[test]
    fn missing_layers_block_unless_the_policy_allows_skipping_them() {
        let strict = Policy::parse(b"", "t").unwrap();
        let lenient =
            Policy::parse(b"[layers]\nmay_skip = [\"cgroup\", \"landlock\"]\n", "t").unwrap();
        let weak = host(0, false);
        let layers: Vec<Layer> = weak.can_satisfy(&strict).iter().map(|m| m.layer).collect();
        assert_eq!(layers, vec![Layer::Landlock, Layer::Cgroup]);
        assert!(weak.can_satisfy(&lenient).is_empty());
        assert!(host(7, true).can_satisfy(&strict).is_empty());
    }

    fn v2(unfit: &'static str) -> CgroupReport {
        CgroupReport {
            version: Some(2),
            delegated: false,
            unfit: Some(unfit),
            detail: String::new(),
        }
    }

    #[test]
    fn a_v2_cgroup_shared_with_a_shell_names_the_systemd_run_line_for_a_user() {
        let fix = cgroup_fix(&v2("other_processes"), false);
        assert!(
            fix.contains("`systemd-run --user --scope -p Delegate=yes loopexec ...`"),
            "{fix}"
        );
    }

    #[test]
    fn a_v2_cgroup_of_a_root_service_names_the_system_scope_and_the_services_delegate_line() {
        let fix = cgroup_fix(&v2("controllers_missing"), true);
        assert!(
            fix.contains("`systemd-run --scope -p Delegate=yes loopexec ...`"),
            "{fix}"
        );
        assert!(
            fix.contains("`Delegate=yes` in its [Service] section"),
            "{fix}"
        );
    }

    #[test]
    fn controllers_the_user_manager_does_not_delegate_name_the_user_service_drop_in() {
        let fix = cgroup_fix(&v2("controllers_missing"), false);
        assert!(
            fix.contains("/etc/systemd/system/user@.service.d/delegate.conf"),
            "{fix}"
        );
        assert!(fix.contains("Delegate=cpu memory pids"), "{fix}");
    }

    #[test]
    fn a_disk_cap_the_host_cannot_enforce_blocks_unless_disk_may_be_skipped() {
        let mut weak = host(7, true);
        weak.disk_cap = Some(Missing {
            layer: Layer::Disk,
            cause: "no loop device".into(),
            fix: "modprobe loop".into(),
        });
        let capped = Policy::parse(b"[resources]\ndisk_bytes = 16777216\n", "t").unwrap();
        let lenient = Policy::parse(
            b"[resources]\ndisk_bytes = 16777216\n[layers]\nmay_skip = [\"disk\"]\n",
            "t",
        )
        .unwrap();
        let uncapped = Policy::parse(b"", "t").unwrap();
        let layers: Vec<Layer> = weak.can_satisfy(&capped).iter().map(|m| m.layer).collect();
        assert_eq!(layers, vec![Layer::Disk]);
        assert!(weak.can_satisfy(&lenient).is_empty());
        assert!(weak.missing(&uncapped).is_empty());
    }

    #[test]
    fn undelegated_v1_cgroup_names_the_fix() {
        let m = host(7, false).missing(&Policy::parse(b"", "t").unwrap());
        assert_eq!(m.len(), 1);
        assert!(m[0].fix.contains("chown"), "{}", m[0].fix);
    }
}
