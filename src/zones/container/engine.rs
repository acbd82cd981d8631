//! The container engine a container backend drives: which client binary, how to ask it what the
//! host can enforce (`info`), whether the image is already present (images are never pulled), and
//! how to end and remove a container by name. Every call runs the engine's own client with a
//! bounded wait; nothing here runs untrusted code.

use serde::Deserialize;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A container engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Podman,
    Docker,
}

/// How long a management call (`info`, `inspect`, `kill`, `rm`) may take before it counts as a
/// failure of the engine.
const MANAGEMENT_TIMEOUT: Duration = Duration::from_secs(60);

/// What the engine says it can enforce on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineCapabilities {
    /// The engine runs containers without root (rootless podman, rootless docker).
    pub rootless: bool,
    pub memory_limit: bool,
    pub pids_limit: bool,
    pub cpu_limit: bool,
    pub seccomp: bool,
    /// e.g. "v1", "v2", "1", "2", as the engine spells it.
    pub cgroup_version: String,
}

/// Why the engine cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(
        "{engine}: the client could not be started ({cause}); is {engine} installed and on PATH?"
    )]
    Missing { engine: &'static str, cause: String },
    #[error("{engine} {what}: {detail}")]
    Failed {
        engine: &'static str,
        what: String,
        detail: String,
    },
    #[error("{engine} {what}: no answer within {secs} s")]
    Hung {
        engine: &'static str,
        what: String,
        secs: u64,
    },
}

#[derive(Debug, Deserialize)]
struct PodmanInfo {
    host: PodmanHost,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodmanHost {
    #[serde(default)]
    cgroup_controllers: Vec<String>,
    #[serde(default)]
    cgroup_version: String,
    security: PodmanSecurity,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodmanSecurity {
    #[serde(default)]
    rootless: bool,
    #[serde(default)]
    seccomp_enabled: bool,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerInfo {
    #[serde(default)]
    memory_limit: bool,
    #[serde(default)]
    pids_limit: bool,
    #[serde(default)]
    cpu_cfs_quota: bool,
    #[serde(default)]
    cgroup_version: String,
    #[serde(default)]
    security_options: Vec<String>,
}

/// The state of a container after its command ended (`container inspect`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ContainerState {
    pub exit_code: i32,
    #[serde(rename = "OOMKilled", default)]
    pub oom_killed: bool,
    #[serde(default)]
    pub started_at: String,
}

impl EngineCapabilities {
    /// An engine that can enforce everything: what is left to refuse is what the policy itself
    /// makes impossible for a backend (used where the engine is not asked, as by `isolate`).
    pub fn everything() -> EngineCapabilities {
        EngineCapabilities {
            rootless: false,
            memory_limit: true,
            pids_limit: true,
            cpu_limit: true,
            seccomp: true,
            cgroup_version: String::new(),
        }
    }
}

impl ContainerState {
    /// Whether the container's command was started at all (engines leave the zero time
    /// `0001-01-01T00:00:00Z` when it never ran).
    pub fn ever_started(&self) -> bool {
        !self.started_at.is_empty() && !self.started_at.starts_with("0001-01-01")
    }
}

impl Engine {
    /// The client binary's name (looked up on PATH).
    pub fn program(self) -> &'static str {
        match self {
            Engine::Podman => "podman",
            Engine::Docker => "docker",
        }
    }

    fn management(self, args: &[&str]) -> Result<Output, EngineError> {
        let what = args.first().copied().unwrap_or("").to_string();
        let mut child = Command::new(self.program())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| EngineError::Missing {
                engine: self.program(),
                cause: e.to_string(),
            })?;
        // Drain both pipes on threads so a chatty client cannot fill them while we wait.
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let read_all = |pipe: Option<Box<dyn std::io::Read + Send>>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(mut p) = pipe {
                    let _ = std::io::Read::read_to_end(&mut p, &mut buf);
                }
                buf
            })
        };
        let out_thread = read_all(stdout.map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
        let err_thread = read_all(stderr.map(|p| Box::new(p) as Box<dyn std::io::Read + Send>));
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if started.elapsed() >= MANAGEMENT_TIMEOUT => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(EngineError::Hung {
                        engine: self.program(),
                        what,
                        secs: MANAGEMENT_TIMEOUT.as_secs(),
                    });
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => {
                    return Err(EngineError::Failed {
                        engine: self.program(),
                        what,
                        detail: e.to_string(),
                    })
                }
            }
        };
        let stdout = out_thread.join().unwrap_or_default();
        let stderr = err_thread.join().unwrap_or_default();
        Ok(Output {
            status,
            stdout,
            stderr,
        })
    }

    fn checked(self, args: &[&str]) -> Result<Vec<u8>, EngineError> {
        let out = self.management(args)?;
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(EngineError::Failed {
                engine: self.program(),
                what: args.first().copied().unwrap_or("").to_string(),
                detail: first_line(&out.stderr),
            })
        }
    }

    /// Ask the engine what it can enforce here.
    pub fn capabilities(self) -> Result<EngineCapabilities, EngineError> {
        let raw = match self {
            Engine::Podman => self.checked(&["info", "--format", "json"])?,
            Engine::Docker => self.checked(&["info", "--format", "{{json .}}"])?,
        };
        self.parse_capabilities(&raw)
    }

    /// Parse the JSON `info` prints.
    pub fn parse_capabilities(self, raw: &[u8]) -> Result<EngineCapabilities, EngineError> {
        let bad = |e: serde_json::Error| EngineError::Failed {
            engine: self.program(),
            what: "info".into(),
            detail: format!("unreadable answer: {e}"),
        };
        match self {
            Engine::Podman => {
                let info: PodmanInfo = serde_json::from_slice(raw).map_err(bad)?;
                let has = |c: &str| info.host.cgroup_controllers.iter().any(|x| x == c);
                Ok(EngineCapabilities {
                    rootless: info.host.security.rootless,
                    memory_limit: has("memory"),
                    pids_limit: has("pids"),
                    cpu_limit: has("cpu"),
                    seccomp: info.host.security.seccomp_enabled,
                    cgroup_version: info.host.cgroup_version,
                })
            }
            Engine::Docker => {
                let info: DockerInfo = serde_json::from_slice(raw).map_err(bad)?;
                let has_option = |name: &str| {
                    info.security_options
                        .iter()
                        .any(|o| o.split(',').any(|kv| kv == format!("name={name}")))
                };
                Ok(EngineCapabilities {
                    rootless: has_option("rootless"),
                    memory_limit: info.memory_limit,
                    pids_limit: info.pids_limit,
                    cpu_limit: info.cpu_cfs_quota,
                    seccomp: has_option("seccomp"),
                    cgroup_version: info.cgroup_version,
                })
            }
        }
    }

    /// Whether `image` is present locally (loopexec never pulls).
    pub fn has_image(self, image: &str) -> Result<bool, EngineError> {
        let out = self.management(&["image", "inspect", "--format", "{{.Id}}", image])?;
        Ok(out.status.success())
    }

    /// The state of a (stopped) container.
    pub fn inspect_state(self, name: &str) -> Result<Option<ContainerState>, EngineError> {
        let out =
            self.management(&["container", "inspect", "--format", "{{json .State}}", name])?;
        if !out.status.success() {
            return Ok(None);
        }
        let state = serde_json::from_slice(&out.stdout).map_err(|e| EngineError::Failed {
            engine: self.program(),
            what: "container inspect".into(),
            detail: format!("unreadable state: {e}"),
        })?;
        Ok(Some(state))
    }

    /// The host pid of a running container's first process.
    pub fn pid_of(self, name: &str) -> Result<i32, EngineError> {
        let raw = self.checked(&["container", "inspect", "--format", "{{.State.Pid}}", name])?;
        let text = String::from_utf8_lossy(&raw);
        match text.trim().parse::<i32>() {
            Ok(pid) if pid > 0 => Ok(pid),
            _ => Err(EngineError::Failed {
                engine: self.program(),
                what: "container inspect".into(),
                detail: format!("{name} has no running process ({})", text.trim()),
            }),
        }
    }

    /// Start a detached container with `args` (a full `run --detach ...` argument list).
    pub fn start_detached(self, args: &[String]) -> Result<(), EngineError> {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.checked(&args).map(|_| ())
    }

    /// SIGKILL the container's processes (its pid namespace dies with its init). A container
    /// that is already gone is not an error.
    pub fn kill(self, name: &str) -> Result<(), EngineError> {
        let _ = self.management(&["kill", "--signal", "KILL", name])?;
        Ok(())
    }

    /// Remove the container (killing it first if it still runs); then make sure it is gone.
    pub fn remove(self, name: &str) -> Result<(), EngineError> {
        let _ = self.management(&["rm", "--force", name])?;
        let still = self.management(&["container", "inspect", "--format", "{{.Id}}", name])?;
        if still.status.success() {
            return Err(EngineError::Failed {
                engine: self.program(),
                what: "rm".into(),
                detail: format!("container {name} still exists after `rm --force`"),
            });
        }
        Ok(())
    }

    /// Names of containers carrying `label` (any value), with that label's value.
    pub fn labelled(self, label: &str) -> Result<Vec<(String, String)>, EngineError> {
        let filter = format!("label={label}");
        let format = match self {
            Engine::Podman => format!("{{{{.Names}}}}\t{{{{index .Labels \"{label}\"}}}}"),
            Engine::Docker => format!("{{{{.Names}}}}\t{{{{.Label \"{label}\"}}}}"),
        };
        let raw = self.checked(&["ps", "--all", "--filter", &filter, "--format", &format])?;
        Ok(String::from_utf8_lossy(&raw)
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
            .filter(|(n, _)| !n.is_empty())
            .collect())
    }
}

fn first_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("failed without a message");
    line.chars().take(400).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn podman_info_gives_limits_from_its_cgroup_controllers() {
        let raw = br#"{"host":{"cgroupControllers":["cpu","memory","pids"],"cgroupVersion":"v2",
            "security":{"rootless":true,"seccompEnabled":true}}}"#;
        let caps = Engine::Podman.parse_capabilities(raw).unwrap();
        assert_eq!(
            caps,
            EngineCapabilities {
                rootless: true,
                memory_limit: true,
                pids_limit: true,
                cpu_limit: true,
                seccomp: true,
                cgroup_version: "v2".into()
            }
        );
    }

    #[test]
    fn rootless_podman_on_cgroup_v1_has_no_limits() {
        let raw = br#"{"host":{"cgroupControllers":[],"cgroupVersion":"v1","security":{"rootless":true,"seccompEnabled":true}}}"#;
        let caps = Engine::Podman.parse_capabilities(raw).unwrap();
        assert!(!caps.memory_limit && !caps.pids_limit && caps.rootless);
    }

    #[test]
    fn docker_info_gives_seccomp_and_rootless_from_its_security_options() {
        let raw = br#"{"MemoryLimit":true,"PidsLimit":false,"CpuCfsQuota":true,"CgroupVersion":"2",
            "SecurityOptions":["name=seccomp,profile=default","name=rootless"]}"#;
        let caps = Engine::Docker.parse_capabilities(raw).unwrap();
        assert_eq!(
            (
                caps.memory_limit,
                caps.pids_limit,
                caps.seccomp,
                caps.rootless
            ),
            (true, false, true, true)
        );
    }

    #[test]
    fn an_unreadable_info_answer_is_an_engine_failure() {
        let err = Engine::Docker.parse_capabilities(b"not json").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("docker info: unreadable answer"),
            "{err}"
        );
    }

    #[test]
    fn a_container_that_never_ran_has_the_zero_start_time() {
        let state: ContainerState =
            serde_json::from_str(r#"{"ExitCode":127,"OOMKilled":false,"StartedAt":"0001-01-01T00:00:00Z","Status":"created"}"#).unwrap();
        assert!(!state.ever_started());
    }
}
