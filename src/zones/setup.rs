//! What the zone backends are built from: one [`ZoneSetup`] per run, made once by the engine from
//! the run's pinned configuration (policies read and checked against their digests once, per role;
//! the egress proxy's configuration derived once from the agent policy and the command line).
//!
//! Zones never read the engine's configuration: everything a backend needs is here, so the engine
//! decides what a zone is and the zones decide only how to enforce it.

use super::{Backend, Isolation, Role, ZoneError};
use crate::egress::EgressConfig;
use sandbox::Policy;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// A role's zone policy, with where it came from (`builtin:<name>` or an absolute path).
#[derive(Debug, Clone)]
pub struct RolePolicy {
    pub source: String,
    pub policy: Policy,
}

/// Everything a zone backend is built from.
#[derive(Debug, Clone)]
pub struct ZoneSetup {
    pub isolation: Isolation,
    /// What provides the zones under native isolation: the native sandbox or a container engine.
    pub backend: Backend,
    /// The container image of a container backend (never pulled).
    pub image: Option<String>,
    /// The cgroup a container engine puts the zones' containers beneath.
    pub cgroup_parent: Option<String>,
    /// The operator's workdir (the in-place zones' one writable grant).
    pub workdir: PathBuf,
    /// The state dir (`.loopexec/`), hidden from every zone.
    pub state_dir: PathBuf,
    /// Whether the commands see a detached workspace (an overlay) instead of the workdir.
    pub detached: bool,
    /// The egress proxy's configuration, when a role's policy routes through it.
    pub egress: Option<EgressConfig>,
    /// A role's own egress configuration, served instead of `egress` to that role's zone (the
    /// judge's allowlist is its own, never the agent's).
    pub role_egress: BTreeMap<Role, EgressConfig>,
    /// What the egress proxy served the run before this process (a resumed run's receipt).
    pub egress_totals: crate::egress::ProxyStats,
    /// Some(s): every command runs in its own time namespace, its monotonic and boot clocks `s`
    /// seconds from the host's (probe-check's `clock` dimension; native backend only).
    pub clock_offset_s: Option<i64>,
    policies: BTreeMap<Role, RolePolicy>,
}

impl ZoneSetup {
    /// A setup without policies (`--isolation none`, or before they are added).
    pub fn new(isolation: Isolation, workdir: PathBuf, state_dir: PathBuf) -> ZoneSetup {
        ZoneSetup {
            isolation,
            backend: Backend::default(),
            image: None,
            cgroup_parent: None,
            workdir,
            state_dir,
            detached: false,
            egress: None,
            role_egress: BTreeMap::new(),
            egress_totals: Default::default(),
            clock_offset_s: None,
            policies: BTreeMap::new(),
        }
    }

    /// Give `role` its zone policy.
    pub fn with_policy(mut self, role: Role, source: String, policy: Policy) -> ZoneSetup {
        self.policies.insert(role, RolePolicy { source, policy });
        self
    }

    /// The policy of `role`, if it has one.
    pub fn policy(&self, role: Role) -> Option<&RolePolicy> {
        self.policies.get(&role)
    }

    /// Every role's policy, in [`Role::ALL`] order.
    pub fn policies(&self) -> impl Iterator<Item = (Role, &RolePolicy)> {
        self.policies.iter().map(|(role, p)| (*role, p))
    }

    /// The egress proxy's setup of the run's zones: every proxied role's configuration (`None`
    /// when no role routes through the proxy).
    pub(crate) fn egress_setup(&self) -> Option<crate::zones::pinned::EgressSetup> {
        let default = self
            .egress
            .clone()
            .or_else(|| self.role_egress.values().next().cloned())?;
        Some(
            crate::zones::pinned::EgressSetup::new(default, self.egress_totals.clone())
                .with_role_configs(self.role_egress.clone()),
        )
    }

    /// What a sandboxing backend requires of the setup: a policy for every role the run has (the
    /// judge's only with `--judge`), the offline roles without network, and an egress
    /// configuration when a policy routes through the proxy.
    pub(crate) fn sandboxed_policies(&self) -> Result<BTreeMap<Role, Policy>, ZoneError> {
        let mut out = BTreeMap::new();
        for role in Role::ALL {
            let Some(p) = self.policy(role) else {
                if role.always_present() {
                    return Err(ZoneError::Spec(format!(
                        "no {} policy pinned",
                        role.as_str()
                    )));
                }
                continue;
            };
            if role.must_be_offline() && p.policy.network.mode != sandbox::policy::NetworkMode::None
            {
                return Err(ZoneError::Spec(format!(
                    "the {}'s policy must have network mode \"none\"",
                    role.as_str()
                )));
            }
            let configured = self.egress.is_some() || self.role_egress.contains_key(&role);
            if p.policy.network.mode == sandbox::policy::NetworkMode::Proxy && !configured {
                return Err(ZoneError::Spec(format!(
                    "the {} policy routes through the egress proxy, but no egress configuration was set up",
                    role.as_str()
                )));
            }
            out.insert(role, p.policy.clone());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> ZoneSetup {
        ZoneSetup::new(Isolation::Native, "/w".into(), "/w/.loopexec".into())
    }

    #[test]
    fn a_role_without_a_policy_is_refused_naming_it() {
        let s = setup().with_policy(
            Role::Agent,
            "builtin:offline".into(),
            Policy::builtin("offline").unwrap(),
        );
        let err = s.sandboxed_policies().unwrap_err();
        assert_eq!(err.to_string(), "no check policy pinned");
        assert!(err.is_setup());
    }

    #[test]
    fn an_offline_role_with_network_is_refused() {
        let s = setup()
            .with_policy(
                Role::Agent,
                "builtin:offline".into(),
                Policy::builtin("offline").unwrap(),
            )
            .with_policy(
                Role::Check,
                "builtin:agent".into(),
                Policy::builtin("agent").unwrap(),
            );
        let err = s.sandboxed_policies().unwrap_err();
        assert_eq!(
            err.to_string(),
            "the check's policy must have network mode \"none\""
        );
    }

    #[test]
    fn a_proxied_policy_without_an_egress_configuration_is_refused() {
        let s = setup()
            .with_policy(
                Role::Agent,
                "builtin:agent".into(),
                Policy::builtin("agent").unwrap(),
            )
            .with_policy(
                Role::Check,
                "builtin:exec".into(),
                Policy::builtin("exec").unwrap(),
            );
        let err = s.sandboxed_policies().unwrap_err();
        assert!(err.to_string().contains("no egress configuration"), "{err}");
    }

    #[test]
    fn every_role_gets_its_own_policy() {
        let s = setup()
            .with_policy(
                Role::Agent,
                "builtin:offline".into(),
                Policy::builtin("offline").unwrap(),
            )
            .with_policy(
                Role::Check,
                "builtin:exec".into(),
                Policy::builtin("exec").unwrap(),
            )
            .with_policy(
                Role::Judge,
                "builtin:offline".into(),
                Policy::builtin("offline").unwrap(),
            );
        let policies = s.sandboxed_policies().unwrap();
        assert_eq!(
            policies.keys().copied().collect::<Vec<_>>(),
            Role::ALL.to_vec()
        );
        assert_eq!(
            policies[&Role::Check].sha256,
            Policy::builtin("exec").unwrap().sha256
        );
    }

    #[test]
    fn a_run_without_a_judge_has_no_judge_zone() {
        let s = setup()
            .with_policy(
                Role::Agent,
                "builtin:offline".into(),
                Policy::builtin("offline").unwrap(),
            )
            .with_policy(
                Role::Check,
                "builtin:exec".into(),
                Policy::builtin("exec").unwrap(),
            );
        let policies = s.sandboxed_policies().unwrap();
        assert_eq!(
            policies.keys().copied().collect::<Vec<_>>(),
            vec![Role::Agent, Role::Check]
        );
    }

    #[test]
    fn a_proxied_judge_with_its_own_egress_configuration_is_accepted() {
        let config = crate::zones::pinned::egress_config(
            &Policy::builtin("agent").unwrap(),
            &["judge.example:443".into()],
            &[],
            None,
        )
        .unwrap();
        let mut s = setup()
            .with_policy(
                Role::Agent,
                "builtin:offline".into(),
                Policy::builtin("offline").unwrap(),
            )
            .with_policy(
                Role::Check,
                "builtin:exec".into(),
                Policy::builtin("exec").unwrap(),
            )
            .with_policy(
                Role::Judge,
                "builtin:agent".into(),
                Policy::builtin("agent").unwrap(),
            );
        assert!(s
            .sandboxed_policies()
            .unwrap_err()
            .to_string()
            .contains("the judge policy routes through the egress proxy"));
        s.role_egress.insert(Role::Judge, config);
        assert_eq!(s.sandboxed_policies().unwrap().len(), 3);
        assert!(s.egress_setup().is_some());
    }
}
