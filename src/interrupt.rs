//! Operator interrupts: SIGINT and SIGTERM sent to loopexec.
//!
//! They are not halts. On the first one the zone kills the running command's process tree, the
//! engine records `run_interrupted` and leaves the run resumable. The handlers only set a flag and
//! write a byte to a wake-up socket (both async-signal-safe, via `signal-hook`), so a zone waiting
//! for its child can `poll` the socket next to the child's pidfd and react at once.

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

struct Interrupts {
    received: Arc<AtomicUsize>,
    wake_read: UnixStream,
}

static INTERRUPTS: OnceLock<Interrupts> = OnceLock::new();

/// Install the SIGINT/SIGTERM handlers (idempotent).
pub fn install() -> std::io::Result<()> {
    if INTERRUPTS.get().is_some() {
        return Ok(());
    }
    let (wake_read, wake_write) = UnixStream::pair()?;
    wake_read.set_nonblocking(true)?;
    wake_write.set_nonblocking(true)?;
    let received = Arc::new(AtomicUsize::new(0));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_usize(sig, Arc::clone(&received), sig as usize)?;
        signal_hook::low_level::pipe::register(sig, wake_write.try_clone()?)?;
    }
    let _ = INTERRUPTS.set(Interrupts {
        received,
        wake_read,
    });
    Ok(())
}

/// The signal received, if any (SIGINT = 2, SIGTERM = 15).
pub fn pending() -> Option<i32> {
    let sig = INTERRUPTS.get()?.received.load(Ordering::SeqCst);
    (sig != 0).then_some(sig as i32)
}

/// A descriptor that becomes readable when an interrupt arrives (for `poll`).
pub fn wake_fd() -> Option<BorrowedFd<'static>> {
    INTERRUPTS.get().map(|i| i.wake_read.as_fd())
}

/// Contract name of an interrupt signal.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

/// The process exit code of an interrupted run: 128 + signal (130 for SIGINT, 143 for SIGTERM).
pub fn exit_code(sig: i32) -> i32 {
    128 + sig
}
