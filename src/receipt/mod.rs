//! Receipts: the durable, verifiable record of a run.
//! - `chain`: the hash-chained JSONL event log.
//! - `events`: the event types the engine appends (names are a contract).
//! - `state`: the atomically written `state.json` summaries.
//! - `store`: the `.loopexec/` layout, reached only through symlink-proof handles.
//! - `keys`: the operator key on disk and the per-run key minted in memory.
//! - `dsse`, `statement`: the DSSE envelope and the in-toto Statement with loopexec's predicate.
//! - `seal`: endorsing run keys, sealing a finished run, operator attestation.
//! - `verify`: offline verification of a sealed run.
pub mod chain;
pub mod dsse;
pub mod events;
pub mod keys;
pub mod seal;
pub mod state;
pub mod statement;
pub mod store;
pub mod verify;
