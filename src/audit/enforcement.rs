//! What a receipt's enforcement evidence shows (docs/zones.md, "Enforcement evidence"): every
//! zone start the receipt recorded with its read-back `enforcement` (the agent's `exec_result`,
//! the check's `check_result`, and the checks inside `check_baseline`, `check_confirmation` and
//! `holdout_check`, and the self-test's zones in `self_test`), and each one judged against what a native zone must have: its user, mount,
//! pid, net, ipc, uts and cgroup namespaces new, NoNewPrivs 1, seccomp in filter mode, every
//! capability set empty, its Landlock ruleset enforced (when the layer was not skipped), and it a
//! member of its cgroup (when it had one). `report` shows the summary; `verify` checks it
//! (`enforcement`, only for receipts that record any). The zone self-test's record
//! (`self_test`) is read here too: its verdict recomputed from its operations, and the halt it
//! must have caused.

use crate::receipt::events::{CheckResult, Event, SelfTestRecord};
use sandbox::Enforcement;
use serde::Serialize;

/// The namespaces every native zone gets anew (the time namespace only with a clock offset).
const NEW_NAMESPACES: [&str; 7] = ["user", "mnt", "pid", "net", "ipc", "uts", "cgroup"];

/// One zone start's evidence as recorded.
#[derive(Debug, Clone, Serialize)]
pub struct ZoneStart<'a> {
    /// `agent` (an `exec_result`) or `check` (any recorded check).
    pub role: &'static str,
    pub event: &'static str,
    pub iteration: u64,
    #[serde(skip)]
    pub enforcement: &'a Enforcement,
}

/// A protection a zone start's evidence does not show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub role: &'static str,
    pub event: &'static str,
    pub iteration: u64,
    pub what: String,
}

/// The receipt's evidence, summarised.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub zone_starts: usize,
    pub all_hold: bool,
    pub findings: Vec<Finding>,
    /// The digests every zone start of a role installed (distinct values, in order of first use).
    pub seccomp_sha256: Vec<String>,
    pub landlock_rules_sha256: Vec<String>,
}

/// Every recorded zone start with its evidence, in receipt order.
pub fn zone_starts<'a>(events: impl IntoIterator<Item = &'a Event>) -> Vec<ZoneStart<'a>> {
    let mut out = Vec::new();
    let check = |event: &'static str, c: &'a CheckResult, out: &mut Vec<ZoneStart<'a>>| {
        if let Some(e) = &c.enforcement {
            out.push(ZoneStart {
                role: "check",
                event,
                iteration: c.iteration,
                enforcement: e,
            });
        }
    };
    for event in events {
        match event {
            Event::ExecResult(x) => {
                if let Some(e) = &x.enforcement {
                    out.push(ZoneStart {
                        role: "agent",
                        event: "exec_result",
                        iteration: x.iteration,
                        enforcement: e,
                    });
                }
            }
            Event::CheckResult(c) => check("check_result", c, &mut out),
            Event::CheckBaseline(b) => check("check_baseline", &b.check, &mut out),
            Event::CheckConfirmation(c) => check("check_confirmation", &c.check, &mut out),
            Event::HoldoutCheck(h) => check("holdout_check", &h.check, &mut out),
            Event::SelfTest(s) => {
                for z in &s.zones {
                    if let Some(e) = &z.enforcement {
                        out.push(ZoneStart {
                            role: z.role.as_str(),
                            event: "self_test",
                            iteration: 0,
                            enforcement: e,
                        });
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// What one zone start's evidence does not show, in words.
pub fn gaps(e: &Enforcement) -> Vec<String> {
    let mut out = Vec::new();
    for ns in NEW_NAMESPACES {
        match e.namespaces.get(ns) {
            Some(n) if n.new => {}
            Some(_) => out.push(format!("{ns} namespace is the supervisor's")),
            None => out.push(format!("{ns} namespace not read back")),
        }
    }
    if e.no_new_privs != Some(1) {
        out.push(format!("NoNewPrivs is {}", shown(e.no_new_privs)));
    }
    if e.seccomp_mode != Some(2) {
        out.push(format!("Seccomp is {} (2: filter)", shown(e.seccomp_mode)));
    }
    if !e.capabilities_empty() {
        out.push("a capability set is not empty".into());
    }
    if let Some(ll) = &e.landlock {
        if !matches!(ll.status.as_str(), "fully_enforced" | "partially_enforced") {
            out.push(format!("Landlock status {:?}", ll.status));
        }
    }
    if let Some(cg) = &e.cgroup {
        if !cg.member {
            out.push("the zone is not listed in its cgroup".into());
        }
    }
    out
}

fn shown(v: Option<u32>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "unread".into())
}

/// Judge every recorded zone start.
pub fn summarise<'a>(events: impl IntoIterator<Item = &'a Event>) -> Summary {
    let starts = zone_starts(events);
    let mut findings = Vec::new();
    let mut seccomp = Vec::new();
    let mut landlock = Vec::new();
    for s in &starts {
        for what in gaps(s.enforcement) {
            findings.push(Finding {
                role: s.role,
                event: s.event,
                iteration: s.iteration,
                what,
            });
        }
        if let Some(p) = &s.enforcement.seccomp_programs {
            if !seccomp.contains(&p.sha256) {
                seccomp.push(p.sha256.clone());
            }
        }
        if let Some(l) = &s.enforcement.landlock {
            if !landlock.contains(&l.rules_sha256) {
                landlock.push(l.rules_sha256.clone());
            }
        }
    }
    Summary {
        zone_starts: starts.len(),
        all_hold: findings.is_empty(),
        findings,
        seccomp_sha256: seccomp,
        landlock_rules_sha256: landlock,
    }
}

/// [`summarise`] of a verified chain's events (events that do not decode are left out: the
/// chain's readers refuse those before this is asked).
pub fn of_chain(events: &[serde_json::Map<String, serde_json::Value>]) -> Summary {
    let records = crate::receipt::events::Recorded::decode_all(events).unwrap_or_default();
    summarise(records.iter().map(|r| &r.event))
}

impl Summary {
    /// One sentence: how many zone starts, and whether every one showed what a zone must have.
    pub fn line(&self) -> String {
        match self.findings.first() {
            None => format!(
                "{} zone starts read back, every one as expected",
                self.zone_starts
            ),
            Some(f) => format!(
                "{} zone starts read back, {} finding(s); first: {} zone ({} of iteration {}): {}",
                self.zone_starts,
                self.findings.len(),
                f.role,
                f.event,
                f.iteration,
                f.what
            ),
        }
    }
}

/// One sentence on a `self_test` record: every zone held, or the first operation that did not.
pub fn self_test_line(record: &SelfTestRecord) -> String {
    let zones: Vec<String> = record
        .zones
        .iter()
        .map(
            |z| match (&z.error, z.operations.iter().find(|o| !o.held())) {
                (Some(why), _) => format!("{} zone not probed ({why})", z.role.as_str()),
                (None, Some(op)) => format!(
                    "{} zone: {} {} succeeded",
                    z.role.as_str(),
                    op.operation,
                    op.target
                ),
                (None, None) => format!(
                    "{} zone: {} of {} operations refused",
                    z.role.as_str(),
                    z.operations.len(),
                    z.operations.len()
                ),
            },
        )
        .collect();
    format!(
        "{}: {}",
        if record.held { "held" } else { "DID NOT HOLD" },
        zones.join("; ")
    )
}

/// `verify`'s reading of a `self_test` record: its `held` is what its operations show, and one
/// that did not hold halted the run with `isolation_unsatisfiable`.
pub fn self_test_consistent(
    record: &SelfTestRecord,
    halt: Option<crate::halt::HaltReason>,
) -> Result<String, String> {
    let held = !record.zones.is_empty() && record.zones.iter().all(|z| z.held());
    if held != record.held {
        return Err(format!(
            "the self-test records held = {} but its operations show {held}",
            record.held
        ));
    }
    if !held && halt != Some(crate::halt::HaltReason::IsolationUnsatisfiable) {
        return Err(format!(
            "the self-test did not hold, yet the run halted with {}",
            halt.map(|h| h.as_str()).unwrap_or("nothing")
        ));
    }
    Ok(self_test_line(record))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox::evidence::{Capabilities, NamespaceEvidence};

    fn holding() -> Enforcement {
        Enforcement {
            namespaces: NEW_NAMESPACES
                .iter()
                .map(|k| {
                    (
                        k.to_string(),
                        NamespaceEvidence {
                            zone: 2,
                            supervisor: Some(1),
                            new: true,
                        },
                    )
                })
                .collect(),
            no_new_privs: Some(1),
            seccomp_mode: Some(2),
            capabilities: Capabilities {
                effective: Some(0),
                permitted: Some(0),
                inheritable: Some(0),
                bounding: Some(0),
                ambient: Some(0),
            },
            ..Default::default()
        }
    }

    fn record(observed_mount: Option<i32>, held: bool) -> SelfTestRecord {
        let op = sandbox::self_test::ProbeOutcome {
            operation: "mount".into(),
            target: "tmpfs on /tmp".into(),
            expected: "fail".into(),
            errno: observed_mount,
            observed: if observed_mount.is_some() {
                "EPERM"
            } else {
                "succeeded"
            }
            .into(),
            reached_host: None,
        };
        SelfTestRecord {
            zones: vec![crate::receipt::events::SelfTestZone {
                role: crate::zones::Role::Agent,
                operations: vec![op],
                enforcement: None,
                error: None,
            }],
            held,
        }
    }

    #[test]
    fn a_self_test_that_held_is_consistent_whatever_the_halt() {
        assert_eq!(
            self_test_consistent(&record(Some(1), true), None),
            Ok("held: agent zone: 1 of 1 operations refused".into())
        );
    }

    #[test]
    fn a_self_test_claiming_held_over_a_succeeded_operation_is_inconsistent() {
        assert_eq!(
            self_test_consistent(&record(None, true), None),
            Err("the self-test records held = true but its operations show false".into())
        );
    }

    #[test]
    fn a_self_test_that_did_not_hold_must_have_halted_isolation_unsatisfiable() {
        use crate::halt::HaltReason;
        assert_eq!(
            self_test_consistent(&record(None, false), Some(HaltReason::MaxIterationsReached)),
            Err(
                "the self-test did not hold, yet the run halted with max_iterations_reached".into()
            )
        );
        assert_eq!(
            self_test_consistent(
                &record(None, false),
                Some(HaltReason::IsolationUnsatisfiable)
            ),
            Ok("DID NOT HOLD: agent zone: mount tmpfs on /tmp succeeded".into())
        );
    }

    #[test]
    fn evidence_of_every_protection_has_no_gaps() {
        assert_eq!(gaps(&holding()), Vec::<String>::new());
    }

    #[test]
    fn a_shared_namespace_missing_no_new_privs_and_a_capability_are_each_named() {
        let mut e = holding();
        e.namespaces.get_mut("net").unwrap().new = false;
        e.no_new_privs = Some(0);
        e.capabilities.effective = Some(1 << 21);
        assert_eq!(
            gaps(&e),
            [
                "net namespace is the supervisor's",
                "NoNewPrivs is 0",
                "a capability set is not empty"
            ]
        );
    }
}
