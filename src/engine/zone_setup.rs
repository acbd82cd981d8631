//! The one place a run's pinned configuration becomes its zones' setup: each role's pinned policy
//! read again and checked against its digest (once per run), the egress proxy's configuration
//! (the agent policy's `[network]` table plus the command line's additions), and where the zones
//! run. Every failure here is the policy's or the egress configuration's own (one mapping).

use super::config::{LoopConfig, PolicyPin};
use super::detached::WorkspaceMode;
use crate::error::{CmdResult, Failure};
use crate::zones::pinned::egress_config;
use crate::zones::setup::ZoneSetup;
use crate::zones::{Isolation, Role};
use sandbox::policy::NetworkMode;
use std::path::{Path, PathBuf};

/// The pinned policy of every role: adding a role is one entry here.
fn pinned_policy(cfg: &LoopConfig, role: Role) -> Option<&PolicyPin> {
    match role {
        Role::Agent => cfg.agent_policy.as_ref(),
        Role::Check => cfg.check_policy.as_ref(),
    }
}

/// The zones' setup of a run with configuration `cfg` (`state_dir` is its `.loopexec/`).
pub fn zone_setup(cfg: &LoopConfig, state_dir: &Path) -> CmdResult<ZoneSetup> {
    let mut setup = ZoneSetup::new(cfg.isolation, PathBuf::from(&cfg.workdir), state_dir.to_path_buf());
    if cfg.isolation == Isolation::None {
        return Ok(setup);
    }
    setup.backend = cfg.backend;
    setup.image = cfg.image.clone();
    setup.cgroup_parent = cfg.cgroup_parent.clone();
    setup.detached = cfg.workspace == WorkspaceMode::Detached;
    for role in Role::ALL {
        let pin = pinned_policy(cfg, role).ok_or_else(|| {
            Failure::workspace(format!("the run pinned no {} policy (native isolation pins one per zone)", role.as_str()))
        })?;
        setup = setup.with_policy(role, pin.source.clone(), pin.load()?);
    }
    let proxied = setup.policies().find(|(_, p)| p.policy.network.mode == NetworkMode::Proxy);
    if let Some((_, p)) = proxied {
        let e = &cfg.egress;
        let config = egress_config(&p.policy, &e.allow_hosts, &e.resolve, e.egress_proxy.as_deref())
            .map_err(|err| Failure::usage(format!("egress configuration: {err}")))?;
        setup.egress = Some(config);
    }
    Ok(setup)
}
