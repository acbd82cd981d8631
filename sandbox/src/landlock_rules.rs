//! Landlock, the second wall over the same grants as the mount namespace: read (and execute) on
//! the read-only grants, full access on the writable ones, device read/write on /dev, read on
//! /proc; TCP connect restricted to the proxy listener's port (ABI >= 4, network mode "proxy");
//! abstract unix sockets and signals scoped to the zone (ABI >= 6). What was enforced (the
//! kernel's status, the rules added and their digest) is returned for the zone's evidence.

use crate::evidence::{lines_sha256, LandlockApplied};
use crate::plan::LandlockPlan;
use landlock::{
    Access, AccessFs, AccessNet, BitFlags, NetPort, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

fn abi_of(v: u32) -> ABI {
    match v {
        0 => ABI::Unsupported,
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        6 => ABI::V6,
        _ => ABI::V7,
    }
}

/// Restrict the calling thread (and its future children); fails unless the ruleset is enforced.
/// Returns what was enforced: every handled access set, scope and added rule, one line each, is
/// in its digest.
pub fn restrict(
    plan: &LandlockPlan,
    listener_port: Option<u16>,
) -> Result<LandlockApplied, String> {
    let abi = abi_of(plan.abi);
    let all = AccessFs::from_all(abi);
    let read = AccessFs::from_read(abi);
    let mut dev = AccessFs::ReadFile | AccessFs::WriteFile;
    if plan.abi >= 5 {
        dev |= AccessFs::IoctlDev;
    }
    let e = |e: landlock::RulesetError| e.to_string();
    let mut lines = vec![
        format!("abi {}", plan.abi),
        format!("handle fs {:#x}", all.bits()),
    ];
    let mut ruleset = Ruleset::default().handle_access(all).map_err(e)?;
    if plan.restrict_connect && plan.abi >= 4 {
        lines.push(format!("handle net {:#x}", AccessNet::ConnectTcp as u64));
        ruleset = ruleset.handle_access(AccessNet::ConnectTcp).map_err(e)?;
    }
    if plan.abi >= 6 {
        let scope = Scope::AbstractUnixSocket | Scope::Signal;
        lines.push(format!("scope {:#x}", scope.bits()));
        ruleset = ruleset.scope(scope).map_err(e)?;
    }
    let header = lines.len();
    let mut created = ruleset.create().map_err(e)?;
    let mut add = |path: &std::path::Path, access: BitFlags<AccessFs>| -> Result<(), String> {
        match PathFd::new(path) {
            Ok(fd) => {
                created
                    .as_mut()
                    .add_rule(PathBeneath::new(fd, access))
                    .map_err(e)?;
                lines.push(format!("path {:#x} {}", access.bits(), path.display()));
                Ok(())
            }
            Err(_) => Ok(()), // absent in the zone: nothing to grant
        }
    };
    add(std::path::Path::new("/"), AccessFs::ReadDir.into())?;
    for p in &plan.read {
        add(p, read)?;
    }
    for p in &plan.write {
        add(p, all)?;
    }
    add(std::path::Path::new("/tmp"), all)?;
    add(std::path::Path::new("/dev/shm"), all)?;
    add(std::path::Path::new("/dev"), dev)?;
    add(std::path::Path::new("/proc"), read)?;
    if let (true, Some(port)) = (plan.restrict_connect && plan.abi >= 4, listener_port) {
        created = created
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(e)?;
        lines.push(format!("port {:#x} {port}", AccessNet::ConnectTcp as u64));
    }
    let status = created.restrict_self().map_err(e)?;
    let status = match status.ruleset {
        RulesetStatus::NotEnforced => {
            return Err("Landlock ruleset not enforced by the kernel".into())
        }
        RulesetStatus::FullyEnforced => "fully_enforced",
        RulesetStatus::PartiallyEnforced => "partially_enforced",
    };
    Ok(LandlockApplied {
        abi: plan.abi,
        status: status.into(),
        rules: (lines.len() - header) as u32,
        rules_sha256: lines_sha256(&lines),
    })
}
