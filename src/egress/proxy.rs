//! The egress proxy: accepts connections on the listener the sandbox created inside the agent
//! zone's network namespace, decides each request, relays what is allowed, answers what is not,
//! and writes one audit line per decision.
//!
//! Threads: one accept thread; one thread per connection (plus one per relayed direction). Caps
//! are checked at accept time (concurrent connections, the bytes and connections left of the run's
//! and the step's budgets, a writable audit log) so an over-cap client costs no thread. A proxy
//! serves one step: it starts from what the run has already used (`Proxy::start`'s `spent`).
//! Inside a CONNECT tunnel to port 443 (the policy's `sni_check_ports`) the TLS ClientHello must
//! name the CONNECT host (`sni`).
//! Refusals beyond the first few of a step are counted on aggregate lines (`RefusalTally`).
//! `ProxyHandle::stop` stops accepting, cuts every open connection, joins all threads, writes the
//! step's last aggregate line and returns the totals.

use super::audit::{AuditLog, AuditRecord, Decision, RefusalTally, TallyStep};
use super::config::EgressConfig;
use super::decision::{decide, Denial};
use super::relay::{relay, ByteBudget, RelayEnd, Upstream};
use super::request::{parse_head, printable, read_head, HeadError, RequestKind};
use super::sni::{check as check_sni, read_client_hello};
use super::upstream::open_tunnel;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::collections::HashMap;
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the accept loop looks at the stop flag while idle.
const ACCEPT_POLL: u16 = 100;
/// How long writing a refusal to a client may block.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// Totals over the proxy's life (one step), or, added up, over a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ProxyStats {
    pub allowed: u64,
    pub denied: u64,
    /// Connections made to destinations (what `max_connections` counts).
    pub connections: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// Connections cut because the zone's byte budget ran out.
    pub byte_cap_hits: u64,
    /// Audit lines that could not be written (the proxy refuses new connections after the first).
    pub audit_errors: u64,
}

impl ProxyStats {
    /// Add another step's totals to these (a run's totals are the sum of its steps').
    pub fn add(&mut self, step: &ProxyStats) {
        self.allowed += step.allowed;
        self.denied += step.denied;
        self.connections += step.connections;
        self.bytes_up += step.bytes_up;
        self.bytes_down += step.bytes_down;
        self.byte_cap_hits += step.byte_cap_hits;
        self.audit_errors += step.audit_errors;
    }
}

#[derive(Default)]
struct Counters {
    allowed: AtomicU64,
    denied: AtomicU64,
    connections: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    byte_cap_hits: AtomicU64,
    audit_errors: AtomicU64,
}

struct Shared {
    /// Written once by `stop` so the accept loop wakes at once instead of at its next poll tick.
    wake_read: std::os::fd::OwnedFd,
    wake_write: std::os::fd::OwnedFd,
    config: EgressConfig,
    audit: AuditLog,
    zone: String,
    budget: ByteBudget,
    /// What `budget` is, for refusals: the run's or this step's byte budget.
    budget_name: String,
    /// Connections this step may still make (the run's or the step's allowance, the smaller).
    connections_left: AtomicU64,
    connections_name: String,
    tally: Mutex<RefusalTally>,
    active: AtomicUsize,
    stopping: AtomicBool,
    audit_broken: AtomicBool,
    counters: Counters,
    /// Clones of every open socket, so `stop` can cut them.
    open: Mutex<HashMap<u64, Vec<TcpStream>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

/// The proxy entry point.
pub struct Proxy;

/// A running proxy.
pub struct ProxyHandle {
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
    local_addr: SocketAddr,
}

/// A budget for one step: what is left of the run's total, or the step's own limit if smaller;
/// and its name for refusals.
fn step_allowance(
    run_max: u64,
    run_spent: u64,
    per_step: Option<u64>,
    unit: &str,
) -> (u64, String) {
    let run_left = run_max.saturating_sub(run_spent);
    match per_step {
        Some(step) if step < run_left => (step, format!("this step's {step} {unit} budget")),
        _ => (
            run_left,
            format!("the run's {run_max} {unit} budget ({run_spent} used before this step)"),
        ),
    }
}

impl Proxy {
    /// Start serving `listener` (normally the one `RunningZone::take_listener` returned) in
    /// background threads, for one step of a run that has already used `spent` (its recorded
    /// totals; zero for a new run). Audit lines name `zone`.
    pub fn start(
        config: EgressConfig,
        listener: TcpListener,
        audit: AuditLog,
        zone: &str,
        spent: &ProxyStats,
    ) -> std::io::Result<ProxyHandle> {
        listener.set_nonblocking(true)?;
        let local_addr = listener.local_addr()?;
        let (wake_read, wake_write) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
                .map_err(std::io::Error::from)?;
        let limits = &config.limits;
        let (bytes, budget_name) = step_allowance(
            limits.max_bytes,
            spent.bytes_up + spent.bytes_down,
            limits.max_bytes_per_step,
            "byte",
        );
        let (connections, connections_name) = step_allowance(
            limits.max_connections,
            spent.connections,
            limits.max_connections_per_step,
            "connection",
        );
        let shared = Arc::new(Shared {
            wake_read,
            wake_write,
            budget: ByteBudget::new(bytes),
            budget_name,
            connections_left: AtomicU64::new(connections),
            connections_name,
            tally: Mutex::new(RefusalTally::new(config.denied_lines)),
            config,
            audit,
            zone: zone.to_string(),
            active: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            audit_broken: AtomicBool::new(false),
            counters: Counters::default(),
            open: Mutex::new(HashMap::new()),
            workers: Mutex::new(Vec::new()),
        });
        let accept_shared = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("egress-accept".into())
            .spawn(move || accept_loop(&accept_shared, &listener))?;
        Ok(ProxyHandle {
            shared,
            accept: Some(accept),
            local_addr,
        })
    }
}

impl ProxyHandle {
    /// The listener's address (inside the zone's namespace).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Totals so far.
    pub fn stats(&self) -> ProxyStats {
        snapshot(&self.shared.counters)
    }

    /// Stop accepting, cut open connections, join every thread, return the totals.
    pub fn stop(mut self) -> ProxyStats {
        self.shutdown();
        self.stats()
    }

    fn shutdown(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        let _ = nix::unistd::write(&self.shared.wake_write, &[1u8]);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        for sockets in lock(&self.shared.open).values() {
            for s in sockets {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        let workers = std::mem::take(&mut *lock(&self.shared.workers));
        for w in workers {
            let _ = w.join();
        }
        let rest = lock(&self.shared.tally).flush();
        if let Some(counts) = rest {
            write_aggregate(&self.shared, counts);
        }
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        if self.accept.is_some() {
            self.shutdown();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn snapshot(c: &Counters) -> ProxyStats {
    ProxyStats {
        allowed: c.allowed.load(Ordering::Relaxed),
        denied: c.denied.load(Ordering::Relaxed),
        connections: c.connections.load(Ordering::Relaxed),
        bytes_up: c.bytes_up.load(Ordering::Relaxed),
        bytes_down: c.bytes_down.load(Ordering::Relaxed),
        byte_cap_hits: c.byte_cap_hits.load(Ordering::Relaxed),
        audit_errors: c.audit_errors.load(Ordering::Relaxed),
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener) {
    let mut next_id: u64 = 0;
    while !shared.stopping.load(Ordering::SeqCst) {
        let mut fds = [
            PollFd::new(listener.as_fd(), PollFlags::POLLIN),
            PollFd::new(shared.wake_read.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::from(ACCEPT_POLL)) {
            Ok(0) => continue,
            Ok(_) if fds[1].any().unwrap_or(false) => return,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                tracing::error!("egress proxy: poll on the listener failed: {e}");
                return;
            }
        }
        let (stream, _) = match listener.accept() {
            Ok(pair) => pair,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!("egress proxy: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if stream.set_nonblocking(false).is_err() {
            continue;
        }
        if let Some(denial) = refusal_at_accept(shared) {
            let started = Accepted::now();
            answer(&stream, &denial, "X-Loopexec-Denied");
            audit_denied(shared, None, &denial, &started);
            continue;
        }
        shared.active.fetch_add(1, Ordering::SeqCst);
        next_id += 1;
        let id = next_id;
        let worker_shared = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name("egress-conn".into())
            .spawn(move || {
                let _slot = Slot {
                    shared: &worker_shared,
                    id,
                };
                handle_connection(&worker_shared, id, stream);
            });
        let mut workers = lock(&shared.workers);
        workers.retain(|w| !w.is_finished());
        match spawned {
            Ok(handle) => workers.push(handle),
            Err(e) => {
                shared.active.fetch_sub(1, Ordering::SeqCst);
                let denial = Denial::new(
                    0,
                    "no_thread",
                    format!("could not start a connection thread: {e}"),
                );
                audit_denied(shared, None, &denial, &Accepted::now());
            }
        }
    }
}

/// A connection's place in the caps and in the list of open sockets, given back when its thread
/// ends (also by unwinding).
struct Slot<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        lock(&self.shared.open).remove(&self.id);
        self.shared.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Refusals decided before reading anything: caps and a broken audit log.
fn refusal_at_accept(shared: &Shared) -> Option<Denial> {
    if shared.audit_broken.load(Ordering::SeqCst) {
        return Some(Denial::new(
            503,
            "audit_unavailable",
            "the egress audit log cannot be written",
        ));
    }
    let active = shared.active.load(Ordering::SeqCst);
    if active >= shared.config.limits.max_open_connections {
        return Some(Denial::new(
            503,
            "connection_cap",
            format!(
                "{active} connections open, the zone's cap is {}",
                shared.config.limits.max_open_connections
            ),
        ));
    }
    if shared.budget.spent() {
        return Some(Denial::new(
            503,
            "byte_cap",
            format!("{} is spent", shared.budget_name),
        ));
    }
    if shared.connections_left.load(Ordering::SeqCst) == 0 {
        return Some(connection_budget_denial(shared));
    }
    None
}

fn connection_budget_denial(shared: &Shared) -> Denial {
    Denial::new(
        503,
        "connection_budget",
        format!("{} is spent", shared.connections_name),
    )
}

/// Take one connection from the step's allowance; false when none is left.
fn take_connection(shared: &Shared) -> bool {
    let taken = shared
        .connections_left
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
            left.checked_sub(1)
        })
        .is_ok();
    if taken {
        shared.counters.connections.fetch_add(1, Ordering::Relaxed);
    }
    taken
}

/// When a connection was accepted: for the audit line's `ts` and `duration_ms`.
struct Accepted {
    at: Instant,
    ts: String,
}

impl Accepted {
    fn now() -> Accepted {
        Accepted {
            at: Instant::now(),
            ts: crate::timestamp::now_rfc3339(),
        }
    }
}

/// What the audit line says about the request, as far as it was understood.
#[derive(Default)]
struct Seen {
    method: Option<String>,
    host: Option<String>,
    port: Option<u16>,
}

fn handle_connection(shared: &Shared, id: u64, client: TcpStream) {
    let started = Accepted::now();
    if let Ok(clone) = client.try_clone() {
        lock(&shared.open).insert(id, vec![clone]);
    }
    if shared.stopping.load(Ordering::SeqCst) {
        let denial = Denial::new(503, "stopping", "the zone is ending");
        answer(&client, &denial, "X-Loopexec-Denied");
        audit_denied(shared, None, &denial, &started);
        return;
    }
    let (head, early) = match read_head(&client, shared.config.head_timeout) {
        Ok(pair) => pair,
        Err(e) => {
            let denial = head_denial(e);
            if denial.status != 0 {
                answer(&client, &denial, "X-Loopexec-Denied");
            }
            audit_denied(shared, None, &denial, &started);
            return;
        }
    };
    let request = match parse_head(&head) {
        Ok(r) => r,
        Err(e) => {
            let denial = head_denial(e);
            answer(&client, &denial, "X-Loopexec-Denied");
            audit_denied(shared, None, &denial, &started);
            return;
        }
    };
    let seen = Seen {
        method: Some(request.method.clone()),
        host: Some(request.host.to_string()),
        port: Some(request.port),
    };
    let permit = match decide(&shared.config, &request.host, request.port) {
        Ok(p) => p,
        Err(denial) => {
            answer(&client, &denial, "X-Loopexec-Denied");
            audit_denied(shared, Some(seen), &denial, &started);
            return;
        }
    };
    if !take_connection(shared) {
        let denial = connection_budget_denial(shared);
        answer(&client, &denial, "X-Loopexec-Denied");
        audit_denied(shared, Some(seen), &denial, &started);
        return;
    }
    let mut record = base_record(shared, Some(seen), Decision::Allowed, &started);
    record.rule = Some(permit.rule.clone());
    record.via = permit.via.clone();

    // Connect to exactly the checked addresses, in order.
    let mut last_error = String::from("no address");
    let mut server = None;
    for addr in &permit.addrs {
        match TcpStream::connect_timeout(addr, shared.config.connect_timeout) {
            Ok(s) => {
                record.address = Some(addr.to_string());
                server = Some(s);
                break;
            }
            Err(e) => last_error = format!("{addr}: {e}"),
        }
    }
    let Some(server) = server else {
        let failure = Denial::new(502, "connect_failed", last_error);
        answer(&client, &failure, "X-Loopexec-Error");
        finish_failed(shared, record, &failure, &started);
        return;
    };
    if let Ok(clone) = server.try_clone() {
        lock(&shared.open).entry(id).or_default().push(clone);
    }
    let _ = server.set_nodelay(true);
    let _ = client.set_nodelay(true);

    let mut first_down = Vec::new();
    if permit.via.is_some() {
        match open_tunnel(
            &server,
            &request.host.authority(request.port),
            shared.config.connect_timeout,
        ) {
            Ok(extra) => first_down = extra,
            Err(problem) => {
                let failure = Denial::new(502, "upstream_refused", problem);
                answer(&client, &failure, "X-Loopexec-Error");
                finish_failed(shared, record, &failure, &started);
                return;
            }
        }
    }
    let tunnel_start;
    let upstream = match &request.kind {
        RequestKind::Connect => {
            if let Err(e) = (&client).write_all(b"HTTP/1.1 200 Connection established\r\n\r\n") {
                record.end = Some(format!("error: {e}"));
                finish(shared, record, &started);
                return;
            }
            record.status = Some(200);
            tunnel_start = if shared.config.checks_sni(&request.host, request.port) {
                let checked = read_client_hello(&client, shared.config.head_timeout, early)
                    .and_then(|(bytes, name)| check_sni(&request.host, &name).map(|()| bytes));
                match checked {
                    Ok(bytes) => bytes,
                    Err(refusal) => {
                        // The tunnel was promised (200), so it is closed instead of answered.
                        let _ = client.shutdown(Shutdown::Both);
                        let _ = server.shutdown(Shutdown::Both);
                        let authority = request.host.authority(request.port);
                        let denial = Denial::new(0, refusal.reason(), refusal.detail(&authority));
                        record.end = Some("refused".into());
                        deny(shared, record, &denial, &started);
                        return;
                    }
                }
            } else {
                early
            };
            Upstream::Tunnel {
                first: &tunnel_start,
            }
        }
        RequestKind::Forward { head, framing } => Upstream::Request {
            head,
            early: &early,
            framing: *framing,
        },
    };
    let outcome = relay(
        &client,
        &server,
        upstream,
        &first_down,
        &shared.budget,
        shared.config.limits.idle_timeout,
        &shared.stopping,
    );
    if outcome.end == RelayEnd::ByteCap {
        shared
            .counters
            .byte_cap_hits
            .fetch_add(1, Ordering::Relaxed);
    }
    shared
        .counters
        .bytes_up
        .fetch_add(outcome.bytes_up, Ordering::Relaxed);
    shared
        .counters
        .bytes_down
        .fetch_add(outcome.bytes_down, Ordering::Relaxed);
    record.bytes_up = outcome.bytes_up;
    record.bytes_down = outcome.bytes_down;
    record.end = Some(outcome.end.label());
    if outcome.dropped_up > 0 {
        record.detail = Some(format!(
            "{} bytes the client sent after the request were not forwarded (one request per connection)",
            outcome.dropped_up
        ));
    }
    finish(shared, record, &started);
}

fn head_denial(e: HeadError) -> Denial {
    match e {
        HeadError::Closed => Denial::new(
            0,
            "closed_before_request",
            "the client closed before sending a request",
        ),
        HeadError::Timeout => Denial::new(
            408,
            "head_timeout",
            "the request head did not arrive in time",
        ),
        HeadError::TooLarge(why) => Denial::new(431, "head_too_large", why),
        HeadError::Malformed(why) => Denial::new(400, "malformed", why),
        HeadError::Unsupported(why) => Denial::new(400, "unsupported", why),
        HeadError::Io(e) => Denial::new(0, "client_error", e.to_string()),
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// Write the proxy's own refusal: status, a header naming the reason, a one-line body.
fn answer(client: &TcpStream, denial: &Denial, header: &str) {
    let value = printable(&format!("{}: {}", denial.reason, denial.detail));
    let body = format!("loopexec egress: {value}\n");
    let response = format!(
        "HTTP/1.1 {} {}\r\n{header}: {value}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        denial.status,
        reason_phrase(denial.status),
        body.len()
    );
    let _ = client.set_write_timeout(Some(ANSWER_TIMEOUT));
    let _ = (&*client).write_all(response.as_bytes());
    let _ = client.shutdown(Shutdown::Write);
}

fn base_record(
    shared: &Shared,
    seen: Option<Seen>,
    decision: Decision,
    accepted: &Accepted,
) -> AuditRecord {
    let seen = seen.unwrap_or_default();
    AuditRecord::new(
        accepted.ts.clone(),
        shared.zone.clone(),
        decision,
        seen.method,
        seen.host,
        seen.port,
    )
}

fn audit_denied(shared: &Shared, seen: Option<Seen>, denial: &Denial, started: &Accepted) {
    let mut record = base_record(shared, seen, Decision::Denied, started);
    record.status = (denial.status != 0).then_some(denial.status);
    record.address = denial.address.clone();
    deny(shared, record, denial, started);
}

/// Record a refusal: a line of its own for the first few of the step, counted on an aggregate
/// line after that.
fn deny(shared: &Shared, mut record: AuditRecord, denial: &Denial, started: &Accepted) {
    shared.counters.denied.fetch_add(1, Ordering::Relaxed);
    let step = lock(&shared.tally).refusal(denial.reason);
    match step {
        TallyStep::Line => {
            record.decision = Decision::Denied;
            record.reason = Some(denial.reason.to_string());
            record.detail = Some(printable(&denial.detail));
            write_record(shared, record, started);
        }
        TallyStep::Counted(None) => {}
        TallyStep::Counted(Some(counts)) => write_aggregate(shared, counts),
    }
}

fn write_aggregate(shared: &Shared, counts: std::collections::BTreeMap<String, u64>) {
    let record =
        AuditRecord::aggregate(crate::timestamp::now_rfc3339(), shared.zone.clone(), counts);
    write_record(shared, record, &Accepted::now());
}

/// An allowed connection that could not be established.
fn finish_failed(shared: &Shared, mut record: AuditRecord, failure: &Denial, started: &Accepted) {
    record.reason = Some(failure.reason.to_string());
    record.detail = Some(printable(&failure.detail));
    record.status = Some(failure.status);
    record.end = Some(failure.reason.to_string());
    finish(shared, record, started);
}

fn finish(shared: &Shared, record: AuditRecord, started: &Accepted) {
    shared.counters.allowed.fetch_add(1, Ordering::Relaxed);
    write_record(shared, record, started);
}

fn write_record(shared: &Shared, mut record: AuditRecord, started: &Accepted) {
    record.duration_ms = started.at.elapsed().as_millis().min(u64::MAX as u128) as u64;
    if let Err(e) = shared.audit.record(&record) {
        shared.counters.audit_errors.fetch_add(1, Ordering::Relaxed);
        shared.audit_broken.store(true, Ordering::SeqCst);
        tracing::error!("egress proxy: {e}; refusing new connections");
    }
}
