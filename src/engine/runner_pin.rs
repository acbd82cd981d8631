//! Runner pinning (`[runner]` of loop.toml; issue 12, item 4): the check runs the toolchain and
//! the runner plugins the operator's environment resolves, never ones a file in the workspace
//! selects. Resolved once at run start, pinned in `run_start`'s config (a resumed run reads it
//! back), and set in the check's environment whatever the exec policy's `env.allow` says:
//!
//! - Rust: when `cargo` on the check's PATH sits beside a `rustup` (rustup manages the check's
//!   toolchain), `RUSTUP_TOOLCHAIN` is set to the toolchain `rustup show active-toolchain`
//!   resolves with a working directory outside the workspace (`/`), so a `rust-toolchain.toml`
//!   the agent writes cannot select another; `rust_toolchain = "name"` names one instead,
//!   `rust_toolchain = false` turns it off. Debian's `/usr/bin/cargo` (the default exec policy's)
//!   reads no toolchain file at all: nothing is set.
//! - Python: `pytest_plugins = [...]` sets `PYTEST_DISABLE_PLUGIN_AUTOLOAD=1` and
//!   `PYTEST_PLUGINS` to exactly those modules; `python_safe_path = true` sets
//!   `PYTHONSAFEPATH=1`. Both off by default (docs/guards.md says why).
//! - Always: `PYTHONPYCACHEPREFIX` points into the check zone's private `/tmp`
//!   ([`PYCACHE_PREFIX`]), so the check's Python never reads a bytecode cache of the tree (an
//!   agent's `__pycache__/*.pyc` compiled from other source than the `.py` beside it) and writes
//!   none into it (issue 18, item 6).

use crate::error::Failure;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// `rust_toolchain` as loop.toml gives it: a toolchain name, or `true` (resolve it, the
/// default) / `false` (set nothing).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum ToolchainSetting {
    Name(String),
    Resolve(bool),
}

/// `[runner]` of loop.toml, as given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunnerInput {
    pub rust_toolchain: Option<ToolchainSetting>,
    pub pytest_plugins: Option<Vec<String>>,
    pub python_safe_path: Option<bool>,
}

/// The pinned runner settings (in `run_start`'s config; absent in receipts pinned before them:
/// nothing pinned).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunnerPins {
    /// The Rust toolchain the check runs (`RUSTUP_TOOLCHAIN`); none: rustup does not manage the
    /// check's cargo, or pinning was turned off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rust_toolchain: Option<String>,
    /// Where `rust_toolchain` came from: `loop.toml`, `rustup show active-toolchain`, `off`, or
    /// `no rustup` (the check's cargo is not a rustup proxy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rust_toolchain_source: Option<String>,
    /// The only pytest plugins the check loads (autoload off); none: pytest's own default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pytest_plugins: Option<Vec<String>>,
    #[serde(default)]
    pub python_safe_path: bool,
}

/// Where the check's Python keeps its bytecode cache: the exec zone's private `/tmp`, thrown
/// away with the zone, never the tree under test.
pub const PYCACHE_PREFIX: &str = "/tmp/loopexec-pycache";

impl RunnerPins {
    /// The variables the check runs with.
    pub fn check_env(&self) -> Vec<(String, String)> {
        let mut env = vec![(
            "PYTHONPYCACHEPREFIX".to_string(),
            PYCACHE_PREFIX.to_string(),
        )];
        if let Some(toolchain) = &self.rust_toolchain {
            env.push(("RUSTUP_TOOLCHAIN".to_string(), toolchain.clone()));
        }
        if let Some(plugins) = &self.pytest_plugins {
            env.push((
                "PYTEST_DISABLE_PLUGIN_AUTOLOAD".to_string(),
                "1".to_string(),
            ));
            env.push(("PYTEST_PLUGINS".to_string(), plugins.join(",")));
        }
        if self.python_safe_path {
            env.push(("PYTHONSAFEPATH".to_string(), "1".to_string()));
        }
        env
    }
}

fn bad(message: String) -> Failure {
    Failure::usage(message)
        .with_hint("see docs/guards.md, \"Runner pinning\", for the [runner] keys")
}

/// A rustup toolchain name: `stable`, `1.82.0`, `nightly-2026-01-01-x86_64-unknown-linux-gnu`.
fn check_toolchain_name(name: &str) -> Result<(), Failure> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-+".contains(&b))
        && !name.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(bad(format!("[runner] rust_toolchain: {name:?} is not a toolchain name (letters, digits, `.`, `_`, `-`, `+`)")))
    }
}

/// A dotted Python module name (`pytest_cov`, `xdist.plugin`).
fn check_module_name(name: &str) -> Result<(), Failure> {
    let ident = |s: &str| {
        s.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    if !name.is_empty() && name.len() <= 200 && name.split('.').all(ident) {
        Ok(())
    } else {
        Err(bad(format!(
            "[runner] pytest_plugins: {name:?} is not a Python module name"
        )))
    }
}

/// The `rustup` beside the first `cargo` on `path` (a `PATH` value), when there is one. Relative
/// entries (`.`, `bin`) are skipped: they would resolve against loopexec's own working directory,
/// often the workdir, whose files are the agent's.
pub fn rustup_beside_cargo(path: &str) -> Option<PathBuf> {
    let cargo_dir = path
        .split(':')
        .map(Path::new)
        .filter(|d| d.is_absolute())
        .find(|d| d.join("cargo").is_file())?;
    let rustup = cargo_dir.join("rustup");
    rustup.is_file().then_some(rustup)
}

/// The toolchain `rustup` resolves with `/` as its working directory (no toolchain file of any
/// workspace on the way up), in the operator's environment `env`.
fn active_toolchain(rustup: &Path, env: &[(String, String)]) -> Result<String, Failure> {
    let out = std::process::Command::new(rustup)
        .args(["show", "active-toolchain"])
        .current_dir("/")
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            bad(format!(
                "[runner] rust_toolchain: `{} show active-toolchain` could not run: {e}",
                rustup.display()
            ))
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    let name = text
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    if !out.status.success() || check_toolchain_name(&name).is_err() {
        return Err(bad(format!(
            "[runner] rust_toolchain: `{} show active-toolchain` (outside the workspace) resolved no toolchain: {}",
            rustup.display(),
            crate::testreport::shown(String::from_utf8_lossy(&out.stderr).trim())
        ))
        .with_hint("name one with `[runner] rust_toolchain = \"stable\"`, or turn pinning off with `rust_toolchain = false`"));
    }
    Ok(name)
}

/// Validate `input` and pin it: `check_path` is the `PATH` the check runs with (its policy's,
/// or the operator's), `env` the operator's environment rustup is asked in.
pub fn resolve(
    input: RunnerInput,
    check_path: &str,
    env: &[(String, String)],
) -> Result<RunnerPins, Failure> {
    let plugins = match input.pytest_plugins {
        Some(plugins) => {
            for p in &plugins {
                check_module_name(p)?;
            }
            Some(plugins)
        }
        None => None,
    };
    let (rust_toolchain, source) = match input.rust_toolchain {
        Some(ToolchainSetting::Name(name)) => {
            check_toolchain_name(&name)?;
            (Some(name), "loop.toml")
        }
        Some(ToolchainSetting::Resolve(false)) => (None, "off"),
        Some(ToolchainSetting::Resolve(true)) | None => match rustup_beside_cargo(check_path) {
            Some(rustup) => (
                Some(active_toolchain(&rustup, env)?),
                "rustup show active-toolchain",
            ),
            None => (None, "no rustup"),
        },
    };
    Ok(RunnerPins {
        rust_toolchain,
        rust_toolchain_source: Some(source.to_string()),
        pytest_plugins: plugins,
        python_safe_path: input.python_safe_path.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pycache() -> (String, String) {
        (
            "PYTHONPYCACHEPREFIX".to_string(),
            PYCACHE_PREFIX.to_string(),
        )
    }

    #[test]
    fn a_relative_path_entry_never_names_the_rustup_to_ask() {
        let tools = tempfile::tempdir().unwrap();
        for name in ["cargo", "rustup"] {
            std::fs::write(tools.path().join(name), "").unwrap();
        }
        assert_eq!(
            rustup_beside_cargo(tools.path().to_str().unwrap()),
            Some(tools.path().join("rustup"))
        );
        // The same directory named relative to this process's working directory.
        let up = std::env::current_dir().unwrap().components().count() - 1;
        let relative = Path::new(&"../".repeat(up)).join(tools.path().strip_prefix("/").unwrap());
        assert!(relative.join("cargo").is_file());
        assert_eq!(rustup_beside_cargo(relative.to_str().unwrap()), None);
    }

    #[test]
    fn nothing_is_set_by_default_without_rustup_on_the_checks_path() {
        let pins = resolve(RunnerInput::default(), "/nonexistent/bin", &[]).unwrap();
        assert_eq!(pins.check_env(), vec![pycache()]);
        assert_eq!(pins.rust_toolchain_source.as_deref(), Some("no rustup"));
    }

    #[test]
    fn named_plugins_turn_autoload_off_and_load_exactly_those() {
        let input = RunnerInput {
            pytest_plugins: Some(vec!["pytest_cov".into(), "xdist.plugin".into()]),
            python_safe_path: Some(true),
            ..Default::default()
        };
        let pins = resolve(input, "", &[]).unwrap();
        assert_eq!(
            pins.check_env(),
            vec![
                pycache(),
                (
                    "PYTEST_DISABLE_PLUGIN_AUTOLOAD".to_string(),
                    "1".to_string()
                ),
                (
                    "PYTEST_PLUGINS".to_string(),
                    "pytest_cov,xdist.plugin".to_string()
                ),
                ("PYTHONSAFEPATH".to_string(), "1".to_string()),
            ]
        );
    }

    #[test]
    fn a_named_toolchain_is_pinned_as_given_and_false_pins_none() {
        let named = resolve(
            RunnerInput {
                rust_toolchain: Some(ToolchainSetting::Name("1.95.0".into())),
                ..Default::default()
            },
            "",
            &[],
        )
        .unwrap();
        assert_eq!(
            named.check_env(),
            vec![
                pycache(),
                ("RUSTUP_TOOLCHAIN".to_string(), "1.95.0".to_string())
            ]
        );
        let off = resolve(
            RunnerInput {
                rust_toolchain: Some(ToolchainSetting::Resolve(false)),
                ..Default::default()
            },
            "",
            &[],
        )
        .unwrap();
        assert_eq!(
            (off.rust_toolchain, off.rust_toolchain_source.as_deref()),
            (None, Some("off"))
        );
    }

    #[test]
    fn a_bad_toolchain_or_module_name_is_refused_naming_it() {
        let e = resolve(
            RunnerInput {
                rust_toolchain: Some(ToolchainSetting::Name("stable; rm -rf /".into())),
                ..Default::default()
            },
            "",
            &[],
        )
        .unwrap_err();
        assert!(
            e.message
                .contains("\"stable; rm -rf /\" is not a toolchain name"),
            "{}",
            e.message
        );
        let e = resolve(
            RunnerInput {
                pytest_plugins: Some(vec!["pytest-cov".into()]),
                ..Default::default()
            },
            "",
            &[],
        )
        .unwrap_err();
        assert!(
            e.message
                .contains("\"pytest-cov\" is not a Python module name"),
            "{}",
            e.message
        );
    }
}
