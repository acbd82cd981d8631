//! Receipts: the durable record of a run. `chain` is the hash-chained event log.
pub mod chain;
