//! The agent stage's metering (docs/budget.md, "Metering"): the run's usage directory, outside
//! the workdir and private to the operator (mode 0700; 0770 with the agent zone's gid as its group
//! when the zone runs as another uid), bound writable into the agent zone; before each agent call
//! a fresh empty `usage.jsonl` in it (its path in `LOOPEXEC_USAGE`), after the call the file read
//! back bounded, without following a link and refusing anything but a regular file
//! (`crate::metering::usage_file`), and the `usage` record (stage agent) made from it with the
//! command's egress bytes and CPU time, together with the agent CLI's own output when `[metering]
//! agent_output` names its format (`crate::metering::agent_output`): its stdout shown to the meter
//! as it is captured, or, for aider, the analytics log it writes to `LOOPEXEC_AGENT_LOG` (a fresh
//! file in the same directory, read back the same way). A record is made when the usage file had a
//! line in it or an output format is configured: a run whose agent reports nothing and names no
//! format keeps the receipt it had before metering.

use super::lifecycle::ActiveRun;
use crate::error::Failure;
use crate::metering::agent_output::{Format, OutputMeter};
use crate::metering::prices::Prices;
use crate::metering::record::{self, SourceKind, SourceReading};
use crate::metering::usage_file;
use crate::receipt::usage::{RejectedInput, UsageRecord, UsageStage};
use crate::safefs::SafeDir;
use crate::zones::{ZoneCommand, ZoneUsage};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;

/// The usage file's name in the usage directory.
pub const FILE_NAME: &str = "usage.jsonl";
/// The variable that names it in the agent's environment.
pub const ENV_VAR: &str = "LOOPEXEC_USAGE";
/// The agent CLI's log (aider's `--analytics-log`) in the usage directory, and its variable.
pub const AGENT_LOG_FILE: &str = "agent-log.jsonl";
pub const AGENT_LOG_ENV_VAR: &str = "LOOPEXEC_AGENT_LOG";
/// Bytes of the agent log read per chunk.
const LOG_CHUNK: usize = 64 * 1024;

/// The zone's CPU time of a command, in ms.
pub(super) fn cpu_ms(used: &ZoneUsage) -> Option<u64> {
    used.cpu
        .map(|d| d.as_millis().min(u128::from(u64::MAX)) as u64)
}

/// A stage's record completed with what its zone measured: egress bytes (both directions) and CPU.
pub(super) fn stamp(usage: &mut UsageRecord, used: &ZoneUsage) {
    usage.egress_bytes = used
        .egress
        .as_ref()
        .map(|e| e.command.bytes_up.saturating_add(e.command.bytes_down));
    usage.cpu_ms = cpu_ms(used);
}

impl crate::capture::StreamObserver for OutputMeter {
    fn observe(&mut self, bytes: &[u8]) {
        self.feed(bytes);
    }
}

/// The run's usage directory; removed when the run's process ends with it.
pub struct UsageDir {
    _dir: super::shared_dir::SharedDir,
    safe: SafeDir,
    file_mode: u32,
}

impl UsageDir {
    /// A fresh directory, writable by the operator and, with `writer_gid`, by that group.
    pub fn create(writer_gid: Option<u32>) -> Result<UsageDir, Failure> {
        let dir = super::shared_dir::SharedDir::create("usage", writer_gid, 0o770)?;
        let safe = SafeDir::open(dir.path())
            .map_err(|e| Failure::internal(format!("the usage directory: {e}")))?;
        Ok(UsageDir {
            _dir: dir,
            safe,
            file_mode: if writer_gid.is_some() { 0o660 } else { 0o600 },
        })
    }

    /// Remove whatever the last call left at `name` (a link, a directory's contents are not
    /// followed: only the name is unlinked) and create it empty.
    fn reset(&self, name: &str) -> Result<(), String> {
        let fd = self.safe.fd().as_raw_fd();
        let _ = nix::unistd::unlinkat(Some(fd), name, nix::unistd::UnlinkatFlags::NoRemoveDir);
        let _ = nix::unistd::unlinkat(Some(fd), name, nix::unistd::UnlinkatFlags::RemoveDir);
        let file = self
            .safe
            .create_new(name, 0o600)
            .map_err(|e| format!("the usage file: {e}"))?;
        let dir_gid = nix::sys::stat::fstat(fd)
            .map_err(|e| format!("the usage file: {e}"))?
            .st_gid;
        nix::unistd::fchown(
            file.as_raw_fd(),
            None,
            Some(nix::unistd::Gid::from_raw(dir_gid)),
        )
        .map_err(|e| format!("the usage file: {e}"))?;
        file.set_permissions(std::fs::Permissions::from_mode(self.file_mode))
            .map_err(|e| format!("the usage file: {e}"))
    }

    /// What the file holds after the call: nothing when it is gone, not a regular file, or unreadable
    /// (counted malformed then: the agent replaced it with something that is no usage file).
    fn read(&self) -> usage_file::Reading {
        match self.safe.open_read(FILE_NAME) {
            Ok(file) => usage_file::read(file),
            Err(e) if e.is_not_found() => usage_file::Reading::default(),
            Err(_) => usage_file::Reading {
                calls: Vec::new(),
                rejected: RejectedInput {
                    malformed: 1,
                    ..Default::default()
                },
            },
        }
    }

    /// The agent log fed to `meter` in bounded chunks (the meter bounds what it keeps and stops
    /// at its own total cap); gone or not a regular file: nothing fed, one `malformed` when it is
    /// something else than a missing name.
    fn feed_log(&self, mut meter: OutputMeter) -> crate::metering::record::SourceReading {
        use std::io::Read;
        match self.safe.open_read(AGENT_LOG_FILE) {
            Ok(file) => {
                let mut limited = file.take(crate::metering::agent_output::MAX_STREAM_BYTES + 1);
                let mut buf = vec![0u8; LOG_CHUNK];
                loop {
                    match limited.read(&mut buf) {
                        Ok(0) => break,
                        Ok(k) => meter.feed(&buf[..k]),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(_) => break,
                    }
                }
                meter.finish()
            }
            Err(e) if e.is_not_found() => meter.finish(),
            Err(_) => {
                let mut reading = meter.finish();
                reading.rejected.malformed = reading.rejected.malformed.saturating_add(1);
                reading
            }
        }
    }
}

impl ActiveRun<'_> {
    /// Before the agent's call: a fresh empty usage file, its directory bound writable into `cmd`,
    /// its path in `LOOPEXEC_USAGE`. `Err(detail)`: it could not be made (the run halts with it).
    pub(super) fn give_usage_file(&mut self, cmd: &mut ZoneCommand) -> Result<(), String> {
        if self.usage.is_none() {
            let writer = super::feedback_file::zone_reader_gid(&self.cfg).map_err(|f| f.message)?;
            self.usage = Some(UsageDir::create(writer).map_err(|f| f.message)?);
        }
        let Some(dir) = self.usage.as_ref() else {
            return Ok(());
        };
        dir.reset(FILE_NAME)?;
        cmd.env.push((
            ENV_VAR.to_string(),
            dir.safe
                .path()
                .join(FILE_NAME)
                .to_string_lossy()
                .into_owned(),
        ));
        if self.cfg.metering.agent_output == Some(Format::AiderAnalytics) {
            dir.reset(AGENT_LOG_FILE)?;
            cmd.env.push((
                AGENT_LOG_ENV_VAR.to_string(),
                dir.safe
                    .path()
                    .join(AGENT_LOG_FILE)
                    .to_string_lossy()
                    .into_owned(),
            ));
        }
        cmd.read_write.push(dir.safe.path().to_path_buf());
        Ok(())
    }

    /// The run's price table and CPU rate (`[metering]`), a call naming no model priced as the
    /// pinned one.
    pub(super) fn prices(&self) -> Prices {
        self.cfg.metering.prices(self.cfg.model.id.as_deref())
    }

    /// After the check of iteration `n`: its `usage` record (stage check, its CPU time at
    /// `check_cpu_usd_per_hour`), or `None` without that rate.
    pub(super) fn check_usage(&self, n: u64, used: &ZoneUsage) -> Option<UsageRecord> {
        record::check_cpu(n, cpu_ms(used), &self.prices())
    }

    /// The meter the agent's stdout is shown to while it runs: the configured format's, unless it
    /// is read from a log instead (aider).
    pub(super) fn stdout_meter(&self) -> Option<std::cell::RefCell<OutputMeter>> {
        match self.cfg.metering.agent_output {
            None | Some(Format::AiderAnalytics) => None,
            Some(format) => Some(std::cell::RefCell::new(OutputMeter::new(format))),
        }
    }

    /// After the agent's call of iteration `n`: its `usage` record from the usage file and the
    /// agent CLI's output (`stdout`: what its stdout meter read), or `None` when nothing was
    /// metered (the usage file had no line and no output format is configured).
    pub(super) fn agent_usage(
        &self,
        n: u64,
        used: &ZoneUsage,
        stdout: Option<OutputMeter>,
    ) -> Option<UsageRecord> {
        let dir = self.usage.as_ref()?;
        let reading = dir.read();
        let output = match (self.cfg.metering.agent_output, stdout) {
            (_, Some(meter)) => Some(meter.finish()),
            (Some(Format::AiderAnalytics), None) => {
                Some(dir.feed_log(OutputMeter::new(Format::AiderAnalytics)))
            }
            _ => None,
        };
        if reading.is_empty() && output.is_none() {
            return None;
        }
        let mut sources = Vec::new();
        if !reading.is_empty() {
            sources.push(SourceReading {
                name: "usage_file".into(),
                kind: SourceKind::UsageFile,
                calls: reading.calls,
                rejected: reading.rejected,
            });
        }
        sources.extend(output);
        let mut usage = record::combine(n, UsageStage::Agent, sources, &self.prices());
        stamp(&mut usage, used);
        Some(usage)
    }
}
