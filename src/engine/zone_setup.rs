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
        Role::Judge => cfg.judge.as_ref()?.policy.as_ref(),
    }
}

/// The zones' setup of a run with configuration `cfg` (`state_dir` is its `.loopexec/`).
pub fn zone_setup(cfg: &LoopConfig, state_dir: &Path) -> CmdResult<ZoneSetup> {
    let mut setup = ZoneSetup::new(
        cfg.isolation,
        PathBuf::from(&cfg.workdir),
        state_dir.to_path_buf(),
    );
    if cfg.isolation == Isolation::None {
        return Ok(setup);
    }
    setup.backend = cfg.backend;
    setup.image = cfg.image.clone();
    setup.cgroup_parent = cfg.cgroup_parent.clone();
    setup.detached = cfg.workspace == WorkspaceMode::Detached;
    for role in Role::ALL {
        let Some(pin) = pinned_policy(cfg, role) else {
            if !role.always_present() {
                continue;
            }
            return Err(Failure::workspace(format!(
                "the run pinned no {} policy (native isolation pins one per zone)",
                role.as_str()
            )));
        };
        setup = setup.with_policy(role, pin.source.clone(), pin.load()?);
    }
    let e = &cfg.egress;
    // The judge's egress is its own: its policy's allowlist plus --judge-allow-host and its own
    // --judge-resolve pins, never the agent's (the upstream --egress-proxy is shared).
    if let (Some(judge), Some(p)) = (&cfg.judge, setup.policy(Role::Judge)) {
        if p.policy.network.mode == NetworkMode::Proxy {
            let config = egress_config(
                &p.policy,
                &judge.allow_hosts,
                &judge.resolve,
                e.egress_proxy.as_deref(),
            )
            .map_err(|err| Failure::usage(format!("the judge's egress configuration: {err}")))?;
            setup.role_egress.insert(Role::Judge, config);
        }
    }
    let proxied = setup.policies().find(|(role, p)| {
        p.policy.network.mode == NetworkMode::Proxy && !setup.role_egress.contains_key(role)
    });
    if let Some((_, p)) = proxied {
        let config = egress_config(
            &p.policy,
            &e.allow_hosts,
            &e.resolve,
            e.egress_proxy.as_deref(),
        )
        .map_err(|err| Failure::usage(format!("egress configuration: {err}")))?;
        setup.egress = Some(config);
    }
    Ok(setup)
}
