//! loopexec: a deterministic, sandbox-first runtime for loop engineering.
//!
//! The binary (`src/main.rs`) is a thin shell over this library. Module map:
//! - `halt`: the halt taxonomy and exit classes (the integration contract).
//! - `error`, `output`: typed failures and the one-JSON-object output contract.
//! - `safefs`: symlink-proof file access beneath supervisor-owned directories.
//! - `receipt`: the hash-chained receipt log.
//! - `zones`: where commands run (host, native sandbox, container engine).
pub mod cli;
pub mod error;
pub mod halt;
pub mod output;
pub mod receipt;
pub mod safefs;
pub mod zones;
