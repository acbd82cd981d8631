//! loopexec-sandbox: launches one command in a zone described by a policy.
//!
//! The crate knows nothing about loops. Input: a [`policy::Policy`], a command, its working
//! directory, environment and stdio ([`launch::ZoneSpec`]). Output: a running zone
//! ([`launch::RunningZone`]) to wait for, time out and kill, and the report of which protections
//! were applied. `launch.rs` runs the setup as named steps in kernel order; docs/zones.md ("The
//! native zone's setup sequence") describes each, supervisor and zone side.
//!
//! The binary that uses this crate must call [`init::run_if_zone_init`] first thing in `main`.

pub mod error;
pub mod evidence;
pub mod init;
pub mod launch;
pub mod policy;
pub mod preflight;
pub mod seccomp_filter;
pub mod self_test;

mod cgroup;
mod grants;
mod landlock_rules;
mod mounts;
mod netns;
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
pub use evidence::Enforcement;
pub use launch::{
    hold_protected_paths, launch, AppliedReport, Launcher, LayerStatus, ProtectedHolds,
    ProtectedPlaceholders, RunningZone, ZoneExit, ZoneSpec,
};
/// For backends that prepare a zone's network namespace themselves (the container backend).
pub use netns::{bring_up_loopback, listen as listen_loopback};
pub use plan::OverlayMount;
pub use policy::{Policy, PolicyError, WorkspaceLimits};
pub use preflight::{HostReport, Missing};
pub use spawn::NAMESPACES;
pub use timens::{
    offset_for_children as offset_clocks_for_children, supported as time_namespaces_supported,
    MAX_OFFSET_S as MAX_CLOCK_OFFSET_S,
};
