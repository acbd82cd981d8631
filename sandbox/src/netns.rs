//! The zone's network namespace: bring loopback up (the only interface), and optionally bind the
//! proxy's TCP listener on 127.0.0.1 inside it.

use std::io;
use std::net::TcpListener;

/// SIOCSIFFLAGS(lo, IFF_UP|IFF_RUNNING) through an AF_INET datagram socket.
pub fn bring_up_loopback() -> io::Result<()> {
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if sock < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in b"lo".iter().enumerate() {
        req.ifr_name[i] = *b as libc::c_char;
    }
    req.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    let rc = unsafe { libc::ioctl(sock, libc::SIOCSIFFLAGS, &req) };
    let err = io::Error::last_os_error();
    unsafe { libc::close(sock) };
    if rc < 0 {
        return Err(err);
    }
    Ok(())
}

/// A listener on 127.0.0.1:port inside the zone's namespace (port 0: the kernel picks).
pub fn listen(port: u16) -> io::Result<TcpListener> {
    TcpListener::bind(("127.0.0.1", port))
}
