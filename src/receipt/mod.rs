//! Receipts: the durable record of a run.
//! - `chain`: the hash-chained event log.
//! - `events`: the event types the engine appends (names are a contract).
//! - `state`: the atomically written `state.json` summaries.
//! - `store`: the `.loopexec/` layout, reached only through symlink-proof handles.
pub mod chain;
pub mod events;
pub mod state;
pub mod store;
