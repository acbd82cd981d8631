//! loopexec: a deterministic, sandbox-first runtime for loop engineering.
//!
//! The binary (`src/main.rs`) is a thin shell over this library. Module map:
//! - `cli`: argument parsing and one module per command; renders one [`output::Outcome`].
//! - `engine`: the iteration lifecycle, the loop configuration and the halt decision.
//! - `halt`: the halt taxonomy and exit classes (the integration contract).
//! - `error`, `output`: typed failures and the one-JSON-object output contract.
//! - `inert`: escaping agent-controlled text before it reaches a terminal (every human renderer).
//! - `safefs`: symlink-proof file access beneath supervisor-owned directories.
//! - `receipt`: the hash-chained receipt log, state files and the `.loopexec/` layout.
//! - `capture`: bounded capture of a command's stdout/stderr into artifacts.
//! - `procfs`: bounded reads of /proc and the cgroup files (start times, CPU time, members).
//! - `ending`: how a command a zone ran ended (shared by zones and the receipt).
//! - `secret`: an in-memory secret with redacted `Debug`, zeroed on drop.
//! - `zones`: where commands run (host today; native sandbox and container engine plug in).
//! - `testreport`: test reports (JUnit, go -json, TAP, libtest output) and the agreement of the
//!   exit code with them and with the runners' summaries.
//! - `progress`: the failing-set trend behind `explain-halt`.
//! - `interrupt`: SIGINT/SIGTERM handling.
//! - `metering`: what each stage of an iteration cost (usage file, agent CLI output, prices).
//! - `run_id`: run id validation and generation.
//! - `egress`: the agent zone's allowlist proxy and its audit log.
//! - `escalation`: the escalation packet, its channels (file, stdout, webhook, Slack, GitHub), HMAC and log.
//! - `workspace`: the detached workspace: baseline t0, overlay, snapshot, protected paths, delivery.
//! - `convergence`: the progress rules (ratchet, no-convergence halts, explain-halt's verdict).
//! - `feedback`: the structured feedback file the oracle side writes for the agent.
//! - `trust`: the statistics and perturbation plans of oracle trust (probe-check, the monitor).
//! - `small`: SMALL workspaces (`.small/`): strict validation, next task, replayId, transitions.
//! - `analysis`: syntax-tree analysis for the guards: assertions, test items, tampering, surface digest.
pub mod analysis;
pub mod audit;
pub mod capture;
pub mod cli;
pub mod convergence;
pub mod delegation;
pub mod egress;
pub mod ending;
pub mod engine;
pub mod error;
pub mod escalation;
pub mod feedback;
pub mod halt;
pub mod inert;
pub mod interrupt;
pub mod metering;
pub mod mutation;
pub mod output;
pub mod procfs;
pub mod receipt;
pub mod rules;
pub mod run_id;
pub mod safefs;
pub mod secret;
pub mod small;
#[cfg(debug_assertions)]
pub mod test_pause;
pub mod testreport;
pub mod timestamp;
pub mod trust;
pub mod workspace;
pub mod zones;
