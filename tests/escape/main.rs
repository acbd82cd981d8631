//! The escape suite: one C probe per attack category of THREAT-MODEL.md ("What every escape suite
//! should try"), run inside `loopexec sandbox` by the real binary. Every test asserts that the
//! attempt was refused (with the exact reason where the policy makes it deterministic) and that
//! the host is unchanged afterwards. docs/escape-suite.md maps categories to tests.

#[macro_use]
pub mod common;

mod exhaustion;
mod fds;
mod filesystem;
mod kernel;
mod lifetime;
mod mounts;
mod namespaces;
mod network;
mod plants;
mod privilege;
mod processes;
mod procfs;
mod secrets;
mod terminal;
