//! The oracle side of an iteration: what loopexec reads out of a check besides its exit code.
//! - `junit`: the failing set from a JUnit XML report.
pub mod junit;
