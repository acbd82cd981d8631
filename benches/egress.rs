//! Egress proxy benchmark (run by ci/bench-egress.sh): the same transfers on loopback, direct,
//! through a bare splice(2) relay (the floor any relay in user space can reach: two TCP
//! connections instead of one, nothing decided or counted) and through the proxy's CONNECT
//! tunnel, in one run; prints throughput, the ratios to direct, and the latency a proxied
//! connection adds (connect + first byte, median over many connections).
//!
//! Environment: LOOPEXEC_BENCH_BYTES (default 1 GiB), LOOPEXEC_BENCH_ROUNDS (default 3),
//! LOOPEXEC_BENCH_CONNECTIONS (default 200).

use loopexec::egress::{AuditLog, EgressConfig, Limits, Proxy, ProxyStats};
use loopexec::safefs::SafeDir;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

const HOST: &str = "bench.example.test";
const CHUNK: usize = 1 << 20;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The test server: 'D' + u64 -> send that many bytes; 'U' -> read to EOF, answer the count;
/// 'E' -> echo one byte.
fn server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind server");
    let addr = listener.local_addr().expect("server addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let _ = stream.set_nodelay(true);
                let mut mode = [0u8; 1];
                if stream.read_exact(&mut mode).is_err() {
                    return;
                }
                match mode[0] {
                    b'D' => {
                        let mut len = [0u8; 8];
                        if stream.read_exact(&mut len).is_err() {
                            return;
                        }
                        let mut left = u64::from_le_bytes(len);
                        let buf = vec![0x5au8; CHUNK];
                        while left > 0 {
                            let n = left.min(CHUNK as u64) as usize;
                            if stream.write_all(&buf[..n]).is_err() {
                                return;
                            }
                            left -= n as u64;
                        }
                    }
                    b'U' => {
                        let mut buf = vec![0u8; CHUNK];
                        let mut total: u64 = 0;
                        loop {
                            match stream.read(&mut buf) {
                                Ok(0) | Err(_) => break,
                                Ok(n) => total += n as u64,
                            }
                        }
                        let _ = stream.write_all(&total.to_le_bytes());
                    }
                    b'E' => {
                        let mut b = [0u8; 1];
                        if stream.read_exact(&mut b).is_ok() {
                            let _ = stream.write_all(&b);
                        }
                    }
                    _ => {}
                }
            });
        }
    });
    addr
}

/// One direction of the bare relay: splice(2) from `from` through a pipe into `to` until
/// end-of-stream, then pass the half-close on.
fn bare_pump(from: &TcpStream, to: &TcpStream) {
    use std::os::fd::AsRawFd;
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills the two descriptors it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return;
    }
    // SAFETY: fds[1] is the pipe's write end, just created.
    unsafe { libc::fcntl(fds[1], libc::F_SETPIPE_SZ, CHUNK as i32) };
    'relay: loop {
        // SAFETY: every descriptor is open for the call; null offsets for pipes and sockets.
        let n = unsafe {
            libc::splice(
                from.as_raw_fd(),
                std::ptr::null_mut(),
                fds[1],
                std::ptr::null_mut(),
                CHUNK,
                libc::SPLICE_F_MOVE,
            )
        };
        if n <= 0 {
            break;
        }
        let mut left = n as usize;
        while left > 0 {
            // SAFETY: as above.
            let m = unsafe {
                libc::splice(
                    fds[0],
                    std::ptr::null_mut(),
                    to.as_raw_fd(),
                    std::ptr::null_mut(),
                    left,
                    libc::SPLICE_F_MOVE,
                )
            };
            if m <= 0 {
                break 'relay;
            }
            left -= m as usize;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
    // SAFETY: both pipe ends are ours and closed once.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
}

/// The floor for any relay in user space: a bare splice(2) relay between the same client and
/// server (two loopback TCP connections, as through the proxy) that decides, counts, audits and
/// times out nothing. What it loses against direct is the cost of the second TCP connection
/// itself; what the proxy loses beyond it is the proxy's own.
fn bare_relay(server: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind bare relay");
    let addr = listener.local_addr().expect("bare relay addr");
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(upstream) = TcpStream::connect(server) else {
                continue;
            };
            let _ = client.set_nodelay(true);
            let _ = upstream.set_nodelay(true);
            let (Ok(client2), Ok(upstream2)) = (client.try_clone(), upstream.try_clone()) else {
                continue;
            };
            std::thread::spawn(move || bare_pump(&upstream2, &client2));
            std::thread::spawn(move || bare_pump(&client, &upstream));
        }
    });
    addr
}

/// How a transfer reaches the server.
#[derive(Clone, Copy)]
enum Path {
    Direct,
    /// Through the bare splice relay at this address.
    Bare(SocketAddr),
    /// Through the proxy's CONNECT tunnel at this address.
    Proxy(SocketAddr),
}

/// Open a connection to the server, directly or through a CONNECT tunnel.
fn open(server: SocketAddr, path: Path) -> TcpStream {
    match path {
        Path::Direct | Path::Bare(_) => {
            let to = match path {
                Path::Bare(relay) => relay,
                _ => server,
            };
            let s = TcpStream::connect(to).expect("connect server");
            s.set_nodelay(true).expect("nodelay");
            s
        }
        Path::Proxy(p) => {
            let mut s = TcpStream::connect(p).expect("connect proxy");
            s.set_nodelay(true).expect("nodelay");
            let req = format!(
                "CONNECT {HOST}:{} HTTP/1.1\r\nHost: {HOST}:{}\r\n\r\n",
                server.port(),
                server.port()
            );
            s.write_all(req.as_bytes()).expect("send CONNECT");
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                s.read_exact(&mut b).expect("read CONNECT answer");
                head.push(b[0]);
            }
            assert!(
                head.starts_with(b"HTTP/1.1 200"),
                "proxy refused: {}",
                String::from_utf8_lossy(&head)
            );
            s
        }
    }
}

/// CPU time (user + system) used so far by this whole process: client, server and proxy threads.
fn cpu_time() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given; RUSAGE_SELF is always valid.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// One measured transfer: bytes per second of wall time, and CPU seconds (all threads) per GiB.
struct Sample {
    rate: f64,
    cpu_per_gib: f64,
}

fn measure(bytes: u64, transfer: impl FnOnce() -> f64) -> Sample {
    let cpu = cpu_time();
    let rate = transfer();
    let used = cpu_time().saturating_sub(cpu).as_secs_f64();
    Sample {
        rate,
        cpu_per_gib: used / (bytes as f64 / (1u64 << 30) as f64),
    }
}

fn download(server: SocketAddr, path: Path, bytes: u64) -> f64 {
    let started = Instant::now();
    let mut s = open(server, path);
    let mut req = vec![b'D'];
    req.extend_from_slice(&bytes.to_le_bytes());
    s.write_all(&req).expect("request");
    let mut buf = vec![0u8; CHUNK];
    let mut got: u64 = 0;
    while got < bytes {
        let n = s.read(&mut buf).expect("download read");
        assert!(n > 0, "stream ended early at {got}");
        got += n as u64;
    }
    bytes as f64 / started.elapsed().as_secs_f64()
}

fn upload(server: SocketAddr, path: Path, bytes: u64) -> f64 {
    let started = Instant::now();
    let mut s = open(server, path);
    s.write_all(b"U").expect("mode");
    let buf = vec![0xa5u8; CHUNK];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        s.write_all(&buf[..n]).expect("upload write");
        left -= n as u64;
    }
    s.shutdown(std::net::Shutdown::Write).expect("half-close");
    let mut count = [0u8; 8];
    s.read_exact(&mut count).expect("count");
    assert_eq!(u64::from_le_bytes(count), bytes);
    bytes as f64 / started.elapsed().as_secs_f64()
}

/// Connect (+ CONNECT through the proxy) and get the first byte back.
fn first_byte_latency(server: SocketAddr, path: Path) -> Duration {
    let started = Instant::now();
    let mut s = open(server, path);
    s.write_all(b"E!").expect("echo request");
    let mut b = [0u8; 1];
    s.read_exact(&mut b).expect("echo byte");
    started.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn mb(rate: f64) -> f64 {
    rate / 1e6
}

fn main() {
    // `cargo bench` passes --bench; nothing else is expected.
    let bytes = env_number("LOOPEXEC_BENCH_BYTES", 1 << 30);
    let connections = env_number("LOOPEXEC_BENCH_CONNECTIONS", 200).max(1) as usize;
    let server = server();

    let dir = tempfile::tempdir().expect("tempdir");
    let audit = AuditLog::open(
        &SafeDir::open(dir.path()).expect("audit dir"),
        "egress.jsonl",
    )
    .expect("audit log");
    let allow = [format!("{HOST}:{}", server.port())];
    let pins = [format!("{HOST}:{}:127.0.0.1", server.port())];
    let config = EgressConfig::from_parts(
        &allow,
        &[],
        &pins,
        None,
        Limits {
            max_open_connections: 1024,
            max_bytes: u64::MAX,
            max_connections: u64::MAX,
            ..Limits::default()
        },
    )
    .expect("config");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
    let proxy = Proxy::start(config, listener, audit, "bench", &ProxyStats::default())
        .expect("start proxy");
    let via = Path::Proxy(proxy.local_addr());
    let bare = Path::Bare(bare_relay(server));
    let direct = Path::Direct;

    // Warm up every path.
    for path in [direct, bare, via] {
        download(server, path, 64 << 20);
    }

    // Alternate direct and proxied transfers over several rounds and keep each path's best, so a
    // burst of load from elsewhere on the host does not decide the ratio.
    let rounds = env_number("LOOPEXEC_BENCH_ROUNDS", 3).max(1);
    let best = |a: Option<Sample>, b: Sample| match a {
        Some(a) if a.rate >= b.rate => Some(a),
        _ => Some(b),
    };
    let (mut dd, mut db, mut dp, mut ud, mut ub, mut up) = (None, None, None, None, None, None);
    for _ in 0..rounds {
        dd = best(dd, measure(bytes, || download(server, direct, bytes)));
        db = best(db, measure(bytes, || download(server, bare, bytes)));
        dp = best(dp, measure(bytes, || download(server, via, bytes)));
        ud = best(ud, measure(bytes, || upload(server, direct, bytes)));
        ub = best(ub, measure(bytes, || upload(server, bare, bytes)));
        up = best(up, measure(bytes, || upload(server, via, bytes)));
    }
    let (Some(dd), Some(db), Some(dp), Some(ud), Some(ub), Some(up)) = (dd, db, dp, ud, ub, up)
    else {
        unreachable!("rounds >= 1")
    };
    let (down_direct, down_proxy, up_direct, up_proxy) = (dd.rate, dp.rate, ud.rate, up.rate);

    let mut direct_latency = Vec::with_capacity(connections);
    let mut proxied = Vec::with_capacity(connections);
    for _ in 0..connections {
        direct_latency.push(first_byte_latency(server, direct));
        proxied.push(first_byte_latency(server, via));
    }
    let (d, p) = (median(direct_latency), median(proxied));
    let added = p.saturating_sub(d);
    let stats = proxy.stop();

    let down_ratio = down_proxy / down_direct;
    let up_ratio = up_proxy / up_direct;
    let verdict = |ok: bool| if ok { "meets target" } else { "BELOW TARGET" };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    println!("egress bench: {bytes} bytes per transfer, best of {rounds} alternating rounds; {connections} connections for latency");
    println!(
        "host: {cpus} cpus, load average {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "download direct        {:>9.1} MB/s   cpu {:.2} s/GiB",
        mb(down_direct),
        dd.cpu_per_gib
    );
    println!(
        "download bare splice   {:>9.1} MB/s   cpu {:.2} s/GiB   ratio {:.3} (the floor of a relay in user space)",
        mb(db.rate),
        db.cpu_per_gib,
        db.rate / down_direct
    );
    println!(
        "download via CONNECT   {:>9.1} MB/s   cpu {:.2} s/GiB   ratio {:.3} (target >= 0.80: {})",
        mb(down_proxy),
        dp.cpu_per_gib,
        down_ratio,
        verdict(down_ratio >= 0.8)
    );
    println!(
        "upload   direct        {:>9.1} MB/s   cpu {:.2} s/GiB",
        mb(up_direct),
        ud.cpu_per_gib
    );
    println!(
        "upload   bare splice   {:>9.1} MB/s   cpu {:.2} s/GiB   ratio {:.3} (the floor of a relay in user space)",
        mb(ub.rate),
        ub.cpu_per_gib,
        ub.rate / up_direct
    );
    println!(
        "upload   via CONNECT   {:>9.1} MB/s   cpu {:.2} s/GiB   ratio {:.3} (target >= 0.80: {})",
        mb(up_proxy),
        up.cpu_per_gib,
        up_ratio,
        verdict(up_ratio >= 0.8)
    );
    println!(
        "latency connect+first byte, median: direct {} us, via proxy {} us, added {} us (target < 1000 us: {})",
        d.as_micros(),
        p.as_micros(),
        added.as_micros(),
        verdict(added < Duration::from_millis(1))
    );
    println!(
        "proxy totals: allowed {} denied {} bytes up {} down {}",
        stats.allowed, stats.denied, stats.bytes_up, stats.bytes_down
    );
}
