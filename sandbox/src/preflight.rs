//! What this host offers, layer by layer, and whether a policy can run on it. Cheap checks only
//! (sysctl and /proc reads, one Landlock syscall); the doctor adds a live namespace probe.

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
    /// Whether zone cgroups can be created beneath our own cgroup.
    pub delegated: bool,
    pub detail: String,
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
    pub overlayfs: bool,
}

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// Inspect the host (no process is started).
pub fn probe() -> HostReport {
    let root = nix::unistd::geteuid().is_root();
    let apparmor = read_trim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").map(|v| v == "1");
    let user_namespaces = userns_missing(root, apparmor);
    let cgroup = match cgroup::detect() {
        Ok(h) => match h.delegation() {
            Ok(()) => CgroupReport { version: Some(h.version()), delegated: true, detail: format!("{h:?}") },
            Err(why) => CgroupReport { version: Some(h.version()), delegated: false, detail: why },
        },
        Err(e) => CgroupReport { version: None, delegated: false, detail: e.to_string() },
    };
    HostReport {
        running_as_root: root,
        kernel: read_trim("/proc/sys/kernel/osrelease").unwrap_or_default(),
        user_namespaces,
        apparmor_restrict_unprivileged_userns: apparmor,
        landlock_abi: crate::sys::landlock_abi(),
        seccomp: std::fs::read_to_string("/proc/self/status").map(|s| s.contains("\nSeccomp:")).unwrap_or(false),
        cgroup,
        overlayfs: std::fs::read_to_string("/proc/filesystems").map(|s| s.contains("\toverlay\n")).unwrap_or(false),
    }
}

fn userns_missing(root: bool, apparmor: Option<bool>) -> Option<Missing> {
    if read_trim("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return Some(Missing {
            layer: Layer::UserNamespace,
            cause: "user.max_user_namespaces is 0".into(),
            fix: "sysctl -w user.max_user_namespaces=15000 (and persist it in /etc/sysctl.d)".into(),
        });
    }
    if !root && read_trim("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return Some(Missing {
            layer: Layer::UserNamespace,
            cause: "kernel.unprivileged_userns_clone is 0".into(),
            fix: "sysctl -w kernel.unprivileged_userns_clone=1".into(),
        });
    }
    if !root && apparmor == Some(true) {
        return Some(apparmor_missing());
    }
    None
}

/// The Ubuntu 23.10+ case ("setting up uid map: Permission denied").
pub fn apparmor_missing() -> Missing {
    Missing {
        layer: Layer::UserNamespace,
        cause: "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1)".into(),
        fix: "install an AppArmor profile for the loopexec binary granting `userns,` (e.g. /etc/apparmor.d/loopexec: `abi <abi/4.0>, include <tunables/global> profile loopexec /usr/local/bin/loopexec flags=(unconfined) { userns, }` then `apparmor_parser -r /etc/apparmor.d/loopexec`), or, less safely, sysctl -w kernel.apparmor_restrict_unprivileged_userns=0".into(),
    }
}

impl HostReport {
    /// Every layer this policy needs that the host lacks, including those the policy lets us skip.
    pub fn missing(&self, _policy: &Policy) -> Vec<Missing> {
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
            let fix = match self.cgroup.version {
                Some(2) => "run loopexec in a delegated cgroup v2 subtree: `systemd-run --user --scope -p Delegate=yes loopexec ...`, or as root",
                Some(_) => "cgroup v1: as root, create a cgroup beneath the current one for each of memory, pids, cpu, chown it to this user and move the shell into it (see ci/setup-test-user.sh), or run as root",
                None => "mount the cgroup hierarchy (cgroup2 at /sys/fs/cgroup)",
            };
            out.push(Missing { layer: Layer::Cgroup, cause: self.cgroup.detail.clone(), fix: fix.into() });
        }
        out
    }

    /// Missing layers the policy does not allow to skip: if non-empty, the zone must not start.
    pub fn can_satisfy(&self, policy: &Policy) -> Vec<Missing> {
        self.missing(policy).into_iter().filter(|m| !policy.may_skip(m.layer)).collect()
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
            cgroup: CgroupReport { version: Some(1), delegated, detail: "not writable".into() },
            overlayfs: true,
        }
    }

    #[test]
    fn missing_layers_block_unless_the_policy_allows_skipping_them() {
        let strict = Policy::parse(b"", "t").unwrap();
        let lenient = Policy::parse(b"[layers]\nmay_skip = [\"cgroup\", \"landlock\"]\n", "t").unwrap();
        let weak = host(0, false);
        let layers: Vec<Layer> = weak.can_satisfy(&strict).iter().map(|m| m.layer).collect();
        assert_eq!(layers, vec![Layer::Landlock, Layer::Cgroup]);
        assert!(weak.can_satisfy(&lenient).is_empty());
        assert!(host(7, true).can_satisfy(&strict).is_empty());
    }

    #[test]
    fn undelegated_v1_cgroup_names_the_fix() {
        let m = host(7, false).missing(&Policy::parse(b"", "t").unwrap());
        assert_eq!(m.len(), 1);
        assert!(m[0].fix.contains("chown"), "{}", m[0].fix);
    }
}
