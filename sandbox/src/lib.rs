//! loopexec-sandbox: launches one command in a zone described by a policy.
//!
//! The crate knows nothing about loops. Input: a [`policy::Policy`], a command, its working
//! directory, environment and stdio ([`launch::ZoneSpec`]). Output: a running zone
//! ([`launch::RunningZone`]) to wait for, time out and kill, and the report of which protections
//! were applied. `launch.rs` runs the setup as named steps in kernel order; docs/zones.md ("The
//! native zone's setup sequence") describes each, supervisor and zone side.
//!
//! A zone's pid 1 executes `loopexec-zone-init` ([`init_exe::INIT_EXE`]), which must be installed
//! next to the binary that uses this crate and calls [`init::run_if_zone_init`] first thing in
//! `main` (the using binary calls it too, for the doctor's namespace probe).

pub mod error;
pub mod evidence;
pub mod init;
pub mod init_exe;
pub mod launch;
pub mod policy;
pub mod preflight;
pub mod seccomp_filter;
pub mod self_test;
pub mod volume;

mod cgroup;
mod grants;
mod landlock_rules;
mod mounts;
mod netns;
mod outside_reach;
mod placeholders;
mod plan;
mod privileges;
mod protected;
mod report;
mod spawn;
mod spec;
mod sys;
mod timens;
mod zone;

pub use error::{Layer, SandboxError};

/// Remove the empty zone cgroups and supervisor leaves that killed supervisors left beneath this
/// process's cgroups (a zone start does it too; a resume that only seals starts none). Best
/// effort: a host without a usable hierarchy has none to remove.
pub fn remove_stale_cgroups() {
    if let Ok(hierarchy) = cgroup::detect() {
        hierarchy.remove_stale();
    }
}
pub use evidence::Enforcement;
pub use launch::{
    hold_protected_paths, launch, AppliedReport, Launcher, LayerStatus, ProtectedHolds,
    ProtectedPlaceholders, RunningZone, ZoneExit, ZoneSpec,
};
/// For backends that prepare a zone's network namespace themselves (the container backend).
pub use netns::{bring_up_loopback, listen as listen_loopback};
pub use outside_reach::OutsideAttempts;
pub use plan::OverlayMount;
pub use policy::{Policy, PolicyError, WorkspaceLimits};
pub use preflight::{HostReport, Missing};
pub use spawn::NAMESPACES;
pub use timens::{
    offset_for_children as offset_clocks_for_children, supported as time_namespaces_supported,
    MAX_OFFSET_S as MAX_CLOCK_OFFSET_S,
};
pub use volume::Volume;
