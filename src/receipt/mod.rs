//! Receipts: the durable, verifiable record of a run.
//! - `chain`: the hash-chained JSONL event log.
//! - `keys`: the operator key on disk and the per-run key minted in memory.
//! - `dsse`, `statement`: the DSSE envelope and the in-toto Statement with loopexec's predicate.
//! - `seal`: endorsing run keys, sealing a finished run, operator attestation.
//! - `verify`: offline verification of a sealed run.
pub mod chain;
pub mod dsse;
pub mod keys;
pub mod seal;
pub mod statement;
pub mod verify;
