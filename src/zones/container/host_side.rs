//! What the oracle side prepares on the host before a container zone starts, and takes down
//! after it: the detached workspace's overlay mounted where the engine can bind it, the network
//! namespace of a proxied agent zone (loopback plus the egress proxy's listener, nothing else),
//! and the supervisor's identity that labels every container so that a later start can remove
//! the containers of a supervisor that was killed.

use crate::safefs::SafeDir;
use sandbox::OverlayMount;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// An overlay mounted on the host at `target`, unmounted (and its mount point removed) on drop.
/// The mount point's name starts with the supervisor's identity, so that a later start can take
/// down the mounts of a supervisor that was killed ([`unmount_stale`]).
#[derive(Debug)]
pub struct HostOverlay {
    target: PathBuf,
}

impl HostOverlay {
    pub fn path(&self) -> &Path {
        &self.target
    }
}

impl Drop for HostOverlay {
    fn drop(&mut self) {
        unmount_stale(&self.target);
    }
}

/// Take down a mount point a killed supervisor left: detach whatever is mounted there, then
/// remove the (empty) directory. Nothing is deleted beneath it.
pub fn unmount_stale(target: &Path) {
    let _ = nix::mount::umount2(
        target,
        nix::mount::MntFlags::MNT_DETACH | nix::mount::MntFlags::UMOUNT_NOFOLLOW,
    );
    let _ = std::fs::remove_dir(target);
}

fn overlay_path(p: &Path) -> std::io::Result<String> {
    let text = p.to_string_lossy().into_owned();
    if text.contains([',', ':', '\\', '\n']) {
        return Err(std::io::Error::other(format!("overlay layer {text:?} contains a character overlayfs options cannot carry (, : \\ or newline)")));
    }
    Ok(text)
}

/// Mount `overlay` on a new directory `name` in `parent` (created beneath it without following a
/// symlink, and mounted on through its descriptor), in loopexec's own mount namespace, which a
/// rootful engine's bind mounts see. Needs CAP_SYS_ADMIN. The `userxattr` option keeps
/// whiteouts and opaque directories in the `user.overlay.*` xattrs, as the native sandbox's
/// unprivileged overlays write them, so snapshots read both alike.
pub fn mount_overlay(
    overlay: &OverlayMount,
    parent: &SafeDir,
    name: &str,
) -> std::io::Result<HostOverlay> {
    let lowers = overlay
        .lowers
        .iter()
        .map(|l| overlay_path(l))
        .collect::<std::io::Result<Vec<_>>>()?;
    if lowers.is_empty() {
        return Err(std::io::Error::other(
            "an overlay needs at least one lower layer",
        ));
    }
    let mut options = format!("lowerdir={}", lowers.join(":"));
    match (&overlay.upper, &overlay.work) {
        (Some(upper), Some(work)) => {
            options.push_str(&format!(
                ",upperdir={},workdir={}",
                overlay_path(upper)?,
                overlay_path(work)?
            ));
        }
        (None, None) if lowers.len() >= 2 => {}
        (None, None) => {
            return Err(std::io::Error::other(
                "a read-only overlay needs at least two lower layers",
            ));
        }
        _ => {
            return Err(std::io::Error::other(
                "an overlay's upper and work layers come together",
            ))
        }
    }
    options.push_str(",userxattr");
    if overlay.volatile {
        // A throwaway layer (the check's): no sync of the host's filesystems when it goes.
        options.push_str(",volatile");
    }
    if parent.exists(name) {
        return Err(std::io::Error::other(format!(
            "mount point {} already exists",
            parent.path().join(name).display()
        )));
    }
    let target = parent.path().join(name);
    let dir = parent
        .subdir_or_create(name)
        .map_err(std::io::Error::other)?;
    let mounted = nix::mount::mount(
        Some("loopexec"),
        Path::new(&format!("/proc/self/fd/{}", dir.fd().as_raw_fd())),
        Some("overlay"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some(options.as_str()),
    );
    drop(dir);
    if let Err(e) = mounted {
        let _ = std::fs::remove_dir(&target);
        return Err(std::io::Error::other(format!(
            "mounting the workspace overlay at {}: {e}",
            target.display()
        )));
    }
    Ok(HostOverlay { target })
}

/// A fresh network namespace holding only loopback and a TCP listener on 127.0.0.1:`port`,
/// kept alive by a descriptor of ours; an engine joins it by the path [`ProxyNamespace::path`].
#[derive(Debug)]
pub struct ProxyNamespace {
    ns: OwnedFd,
    listener: Option<TcpListener>,
}

impl ProxyNamespace {
    /// Create it on a short-lived thread (a thread may unshare its network namespace alone; the
    /// rest of loopexec stays in the host's). Needs CAP_SYS_ADMIN.
    pub fn create(port: u16) -> std::io::Result<ProxyNamespace> {
        let made = std::thread::spawn(move || -> std::io::Result<(OwnedFd, TcpListener)> {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(std::io::Error::from)?;
            sandbox::bring_up_loopback()?;
            let listener = sandbox::listen_loopback(port)?;
            // SAFETY: open returns a new descriptor or -1.
            let fd = unsafe {
                libc::open(
                    c"/proc/thread-self/ns/net".as_ptr(),
                    libc::O_RDONLY | libc::O_CLOEXEC,
                )
            };
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok((unsafe { OwnedFd::from_raw_fd(fd) }, listener))
        })
        .join()
        .map_err(|_| {
            std::io::Error::other("the thread preparing the network namespace panicked")
        })??;
        Ok(ProxyNamespace {
            ns: made.0,
            listener: Some(made.1),
        })
    }

    /// Put the listener into the network namespace of process `pid` (a docker holder
    /// container's), on a short-lived thread that joins it. Needs CAP_SYS_ADMIN.
    pub fn join(pid: i32, port: u16) -> std::io::Result<ProxyNamespace> {
        let path = format!("/proc/{pid}/ns/net");
        let target = std::fs::File::open(&path)?;
        let made = std::thread::spawn(move || -> std::io::Result<(OwnedFd, TcpListener)> {
            nix::sched::setns(&target, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(std::io::Error::from)?;
            sandbox::bring_up_loopback()?;
            let listener = sandbox::listen_loopback(port)?;
            Ok((OwnedFd::from(target), listener))
        })
        .join()
        .map_err(|_| {
            std::io::Error::other("the thread joining the network namespace panicked")
        })??;
        Ok(ProxyNamespace {
            ns: made.0,
            listener: Some(made.1),
        })
    }

    /// The namespace as a path the engine (running as root) can open.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            self.ns.as_raw_fd()
        ))
    }

    /// The listener, for the egress proxy to serve.
    pub fn take_listener(&mut self) -> Option<TcpListener> {
        self.listener.take()
    }
}

/// This process as `<pid>:<start time in clock ticks>`: unique across pid reuse.
pub fn supervisor_identity() -> String {
    let pid = std::process::id();
    format!("{pid}:{}", start_time(pid).unwrap_or(0))
}

/// Field 22 of /proc/<pid>/stat, or None when the process does not exist.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether a supervisor label names a process that is gone (a killed loopexec).
pub fn supervisor_is_dead(label: &str) -> bool {
    let Some((pid, start)) = label.split_once(':') else {
        return false;
    };
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return false;
    };
    start_time(pid) != Some(start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_a_live_supervisor() {
        assert!(!supervisor_is_dead(&supervisor_identity()));
    }

    #[test]
    fn a_reused_pid_with_another_start_time_is_a_dead_supervisor() {
        let pid = std::process::id();
        assert!(supervisor_is_dead(&format!("{pid}:1")));
    }

    #[test]
    fn a_malformed_label_is_never_taken_for_a_dead_supervisor() {
        assert!(!supervisor_is_dead("garbage"));
        assert!(!supervisor_is_dead("12:x"));
    }

    #[test]
    fn an_overlay_layer_with_a_colon_is_refused() {
        let o = OverlayMount {
            target: "/w".into(),
            lowers: vec!["/a:b".into()],
            upper: None,
            work: None,
            volatile: false,
        };
        let parent = SafeDir::open(Path::new("/tmp")).unwrap();
        let err = mount_overlay(&o, &parent, "never-created").unwrap_err();
        assert!(err.to_string().contains("contains a character"), "{err}");
    }
}
