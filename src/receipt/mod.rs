//! Receipts: the durable, verifiable record of a run.
//! - `bounded`: large per-iteration lists moved to digest-named run artifacts.
//! - `chain`: the hash-chained JSONL event log.
//! - `events`: the typed events a receipt holds (names and fields are a contract).
//! - `acceptance`: the operator's signed hand acceptances of rejected iterations.
//! - `history`: the events folded into the one state every reader (and the live loop) uses.
//! - `state`: the atomically written `state.json` summaries.
//! - `store`: the `.loopexec/` layout, reached only through symlink-proof handles.
//! - `keys`: the operator key on disk and the per-run key minted in memory.
//! - `dsse`, `statement`: the DSSE envelope and the in-toto Statement with loopexec's predicate.
//! - `seal`: endorsing run keys, sealing a finished run, operator attestation.
//! (Offline verification of a sealed run is the verifier's, a layer above the decision rules.)
//! - `probe`: the signed receipt of a `probe-check` or `doctor --check` (verified by the verifier, above this layer).
pub mod acceptance;
pub mod bounded;
pub mod chain;
pub mod comprehension;
pub mod dsse;
pub mod events;
pub mod heartbeat;
pub mod history;
pub mod keys;
pub mod probe;
pub mod seal;
pub mod state;
pub mod statement;
pub mod store;
pub mod usage;
