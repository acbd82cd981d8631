//! Relaying an established connection in both directions, counting bytes against the zone's
//! byte budget.
//!
//! Each direction is a blocking read/write loop with a large buffer on its own thread. (splice(2)
//! through a pipe was measured too: on loopback it cost as much CPU per GiB as the copy, so the
//! simpler loop stays; see docs/egress.md.) End-of-stream in
//! one direction is passed on as a half-close (`shutdown(Write)`), so request/response protocols
//! finish normally. When the zone's byte budget runs out, the bytes still within it are written,
//! then both sockets are shut down: the total relayed never exceeds the budget.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Size of each direction's copy buffer (two per connection).
pub const RELAY_BUFFER: usize = 256 * 1024;

/// The zone-wide allowance of relayed bytes (both directions, all connections).
#[derive(Debug)]
pub struct ByteBudget {
    max: u64,
    used: AtomicU64,
}

impl ByteBudget {
    pub fn new(max: u64) -> Self {
        ByteBudget { max, used: AtomicU64::new(0) }
    }

    /// Reserve up to `n` bytes; returns how many were granted (fewer than `n` once the budget
    /// runs out).
    pub fn take_up_to(&self, n: u64) -> u64 {
        let mut current = self.used.load(Ordering::Relaxed);
        loop {
            let grant = n.min(self.max.saturating_sub(current));
            if grant == 0 {
                return 0;
            }
            match self.used.compare_exchange_weak(current, current + grant, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return grant,
                Err(actual) => current = actual,
            }
        }
    }

    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    pub fn spent(&self) -> bool {
        self.used() >= self.max
    }
}

/// How a relayed connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayEnd {
    /// Both sides closed.
    Closed,
    /// The zone's byte budget ran out; the connection was cut.
    ByteCap,
    /// The proxy was stopped (the zone ended).
    Stopped,
    /// A socket error, e.g. a reset.
    Error(String),
}

impl RelayEnd {
    pub fn label(&self) -> String {
        match self {
            RelayEnd::Closed => "closed".into(),
            RelayEnd::ByteCap => "byte_cap".into(),
            RelayEnd::Stopped => "stopped".into(),
            RelayEnd::Error(e) => format!("error: {e}"),
        }
    }
}

/// Bytes moved and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayOutcome {
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub end: RelayEnd,
}

enum PumpEnd {
    Eof,
    Cap,
    Error(String),
}

/// Relay until both directions are done. `first_up` is sent to the server and `first_down` to the
/// client before anything else (bytes that arrived with the request head / the upstream's answer).
pub fn relay(
    client: &TcpStream,
    server: &TcpStream,
    first_up: &[u8],
    first_down: &[u8],
    budget: &ByteBudget,
    stopping: &AtomicBool,
) -> RelayOutcome {
    let up = AtomicU64::new(0);
    let down = AtomicU64::new(0);
    let (up_end, down_end) = std::thread::scope(|scope| {
        let down_thread = scope.spawn(|| pump(server, client, first_down, budget, &down));
        let up_end = pump(client, server, first_up, budget, &up);
        let down_end = down_thread.join().unwrap_or_else(|_| PumpEnd::Error("relay thread panicked".into()));
        (up_end, down_end)
    });
    let end = match (up_end, down_end) {
        (PumpEnd::Cap, _) | (_, PumpEnd::Cap) => RelayEnd::ByteCap,
        _ if stopping.load(Ordering::Relaxed) => RelayEnd::Stopped,
        (PumpEnd::Error(e), _) | (_, PumpEnd::Error(e)) => RelayEnd::Error(e),
        (PumpEnd::Eof, PumpEnd::Eof) => RelayEnd::Closed,
    };
    RelayOutcome { bytes_up: up.into_inner(), bytes_down: down.into_inner(), end }
}

fn pump(from: &TcpStream, to: &TcpStream, first: &[u8], budget: &ByteBudget, counter: &AtomicU64) -> PumpEnd {
    let cut = |end: PumpEnd| {
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
        end
    };
    if let Some(end) = forward(first, to, budget, counter) {
        return cut(end);
    }
    let result = copy_pump(from, to, budget, counter);
    match result {
        PumpEnd::Eof => {
            let _ = to.shutdown(Shutdown::Write);
            PumpEnd::Eof
        }
        other => cut(other),
    }
}

/// Read into a buffer, write it out, until end-of-stream, an error or the budget ends it.
fn copy_pump(from: &TcpStream, to: &TcpStream, budget: &ByteBudget, counter: &AtomicU64) -> PumpEnd {
    let mut buf = vec![0u8; RELAY_BUFFER];
    loop {
        let n = match (&*from).read(&mut buf) {
            Ok(0) => return PumpEnd::Eof,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return PumpEnd::Error(e.to_string()),
        };
        if let Some(end) = forward(&buf[..n], to, budget, counter) {
            return end;
        }
    }
}

/// Write as much of `data` as the budget grants; `Some` when the connection must end.
fn forward(data: &[u8], to: &TcpStream, budget: &ByteBudget, counter: &AtomicU64) -> Option<PumpEnd> {
    if data.is_empty() {
        return None;
    }
    let granted = budget.take_up_to(data.len() as u64) as usize;
    if let Err(e) = (&*to).write_all(&data[..granted]) {
        return Some(PumpEnd::Error(e.to_string()));
    }
    counter.fetch_add(granted as u64, Ordering::Relaxed);
    (granted < data.len()).then_some(PumpEnd::Cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_grants_at_most_what_is_left() {
        let budget = ByteBudget::new(10);
        assert_eq!(budget.take_up_to(6), 6);
        assert_eq!(budget.take_up_to(5), 4);
        assert!(budget.spent());
        assert_eq!(budget.take_up_to(1), 0);
        assert_eq!(budget.used(), 10);
    }
}
