//! The zone self-test at run start (`self_test = true`, `run --self-test`; docs/zones.md, "The
//! zone self-test"): one zone per always-present role (the agent's and the check's), each
//! running the sandbox's built-in probe of forbidden operations in place of its command, recorded
//! as one `self_test` event; any operation that succeeded, or a zone that could not be probed,
//! halts the run (`isolation_unsatisfiable`) before the agent runs.

use super::commands::{operator_env, RoleCommand};
use super::config::LoopConfig;
use crate::error::Failure;
use crate::halt::HaltReason;
use crate::receipt::events::{SelfTestRecord, SelfTestZone};
use crate::zones::{Role, Zone};
use sandbox::self_test::SelfTestPlan;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};

/// An address no zone may reach: TEST-NET-1 (RFC 5737), port 80.
const FORBIDDEN_PEER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 80);

/// What each zone tries: a file beside the workdir (outside the workspace) and one at the zone's
/// root, a connection to TEST-NET-1, and the probe's fixed operations.
pub fn plan(workdir: &Path, run_id: &str) -> SelfTestPlan {
    let name = format!(".loopexec-self-test-{run_id}");
    let mut write_outside = vec![PathBuf::from("/").join(&name)];
    if let Some(parent) = workdir.parent().filter(|p| *p != Path::new("/")) {
        write_outside.insert(0, parent.join(&name));
    }
    SelfTestPlan {
        write_outside,
        connect_to: FORBIDDEN_PEER,
    }
}

/// Probe the agent's and the check's zones; the record, and the halt when one did not hold.
pub fn run(
    cfg: &LoopConfig,
    run_id: &str,
    zone: &mut dyn Zone,
) -> Result<(SelfTestRecord, Option<(HaltReason, String)>), Failure> {
    let plan = plan(Path::new(&cfg.workdir), run_id);
    let env = operator_env();
    let mut zones = Vec::new();
    for role in Role::ALL.into_iter().filter(|r| r.always_present()) {
        let cmd = RoleCommand {
            role,
            run_id,
            iteration: 0,
            overlay: None,
            credential: None,
        }
        .zone_command(cfg, &env);
        let entry = match zone.self_test(&cmd, &plan)? {
            Ok(ran) => SelfTestZone {
                role,
                operations: ran.operations,
                enforcement: ran.enforcement,
                error: None,
            },
            Err(why) => SelfTestZone {
                role,
                operations: Vec::new(),
                enforcement: None,
                error: Some(why),
            },
        };
        zones.push(entry);
    }
    let halt = zones.iter().find(|z| !z.held()).map(|z| {
        let what = match (&z.error, z.operations.iter().find(|o| !o.held())) {
            (Some(why), _) => format!("it could not be probed: {why}"),
            (None, Some(op)) if op.target.is_empty() => {
                format!("{} succeeded", op.operation)
            }
            (None, Some(op)) => format!("{} ({}) succeeded", op.operation, op.target),
            (None, None) => "its probe reported nothing".into(),
        };
        (
            HaltReason::IsolationUnsatisfiable,
            format!(
                "self-test: the {} zone does not hold: {what}",
                z.role.as_str()
            ),
        )
    });
    let held = halt.is_none();
    Ok((SelfTestRecord { zones, held }, halt))
}
