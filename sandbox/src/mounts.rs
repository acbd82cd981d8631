//! The zone's filesystem view, built by the zone init in its own mount namespace
//! ([`build_root`] lists its steps in order; docs/zones.md, "The native zone's setup sequence",
//! places them in the whole setup).
//!
//! Every bind goes through descriptors (`open_tree` + `mount_setattr` + `move_mount`), and every
//! path below a grant is opened with `openat2(RESOLVE_NO_SYMLINKS)`, so a symlink planted in a
//! writable grant can never redirect a mount.

use crate::plan::{Bind, OverlayMount, Plan};
use crate::sys;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::stat::Mode;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{symlink, DirBuilderExt};
use std::path::{Path, PathBuf};

const STAGING: &str = "/tmp";
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom"];
const PROC_MASKED_FILES: &[&str] = &["kcore", "sysrq-trigger", "kmsg", "timer_list", "keys"];

fn ctx<T>(what: impl Into<String>, r: io::Result<T>) -> io::Result<T> {
    r.map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", what.into())))
}
fn nixctx<T>(what: &str, r: nix::Result<T>) -> io::Result<T> {
    ctx(what, r.map_err(io::Error::from))
}

/// Relative form of an absolute path, for openat2 beneath a directory.
fn rel(p: &Path) -> String {
    p.to_string_lossy().trim_start_matches('/').to_string()
}

/// Build the whole view; on return the process's root is the zone root.
pub fn build_root(plan: &Plan, trees: Vec<OwnedFd>) -> io::Result<()> {
    let mut trees: Vec<Option<OwnedFd>> = trees.into_iter().map(Some).collect();
    make_propagation_private()?;
    pivot_into_staging()?;
    mount_new_root()?;
    // Grants below /tmp go on top of the private /tmp; every other grant (even `/`) below it.
    let (in_tmp, elsewhere): (Vec<Bind>, Vec<Bind>) = plan
        .binds
        .iter()
        .cloned()
        .partition(|b| b.path.starts_with("/tmp"));
    bind_grants(&elsewhere, &mut trees)?;
    mount_tmp(plan.tmp_size)?;
    bind_grants(&in_tmp, &mut trees)?;
    mount_overlays(
        &plan.overlays,
        plan.overlay_layers_from,
        &plan.overlay_layer_fds,
        &mut trees,
    )?;
    protect_sub_paths(&plan.protected)?;
    hide_paths(&plan.hidden)?;
    mount_dev()?;
    mount_proc()?;
    pivot_into_new_root()?;
    seal_root()
}

fn make_propagation_private() -> io::Result<()> {
    nixctx(
        "make / private",
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        ),
    )
}

fn pivot_into_staging() -> io::Result<()> {
    nixctx(
        "staging tmpfs",
        mount(
            Some("tmpfs"),
            STAGING,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=0700,size=1m"),
        ),
    )?;
    for d in ["newroot", "oldroot"] {
        ctx(
            d,
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(Path::new(STAGING).join(d)),
        )?;
    }
    nixctx(
        "pivot_root into staging",
        nix::unistd::pivot_root(STAGING, "/tmp/oldroot"),
    )?;
    nixctx("chdir /", nix::unistd::chdir("/"))
}

fn mount_new_root() -> io::Result<()> {
    nixctx(
        "root tmpfs",
        mount(
            Some("tmpfs"),
            "/newroot",
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=0755,size=1m"),
        ),
    )
}

fn open_path(p: &Path) -> io::Result<OwnedFd> {
    ctx(
        p.display().to_string(),
        nix::fcntl::open(
            p,
            nix::fcntl::OFlag::O_PATH
                | nix::fcntl::OFlag::O_NOFOLLOW
                | nix::fcntl::OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map(|fd| unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
        .map_err(io::Error::from),
    )
}

/// Create `dst` (and its parents) as an empty directory or file to mount onto.
fn make_mountpoint(dst: &Path, dir: bool) -> io::Result<()> {
    if let Some(parent) = dst.parent() {
        ctx(
            parent.display().to_string(),
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent),
        )?;
    }
    let r = if dir {
        std::fs::DirBuilder::new().mode(0o755).create(dst)
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(dst)
            .map(|_| ())
    };
    match r {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        other => ctx(dst.display().to_string(), other),
    }
}

/// Bind `src_fd`'s tree onto `target_fd` with the given mount attributes.
fn bind_fd(src_fd: &OwnedFd, target_fd: &OwnedFd, attrs: u64, recursive: bool) -> io::Result<()> {
    let tree = sys::clone_tree(src_fd, recursive)?;
    if attrs != 0 {
        sys::mount_setattr(tree.as_raw_fd(), attrs, recursive)?;
    }
    sys::move_mount_onto(&tree, target_fd.as_raw_fd())
}

fn bind_grants(binds: &[Bind], trees: &mut [Option<OwnedFd>]) -> io::Result<()> {
    let mut ordered: Vec<&Bind> = binds.iter().collect();
    ordered.sort_by_key(|b| b.path.components().count());
    for b in ordered {
        let src = Path::new("/oldroot").join(rel(&b.path));
        let dst = Path::new("/newroot").join(rel(&b.path));
        if let Some(i) = b.tree {
            // An idmapped tree prepared by the supervisor: attach it as it is.
            let tree = trees.get_mut(i).and_then(Option::take).ok_or_else(|| {
                io::Error::other(format!("missing mount tree for {}", b.path.display()))
            })?;
            let st = nixctx("fstat tree", nix::sys::stat::fstat(tree.as_raw_fd()))?;
            make_mountpoint(&dst, st.st_mode & libc::S_IFMT == libc::S_IFDIR)?;
            ctx(
                format!("attach {}", b.path.display()),
                sys::move_mount_onto(&tree, open_path(&dst)?.as_raw_fd()),
            )?;
            continue;
        }
        let meta = match std::fs::symlink_metadata(&src) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !b.writable => continue,
            Err(e) => return ctx(src.display().to_string(), Err(e)),
        };
        if meta.file_type().is_symlink() && !b.writable {
            let target = ctx("readlink", std::fs::read_link(&src))?;
            if let Some(parent) = dst.parent() {
                ctx(
                    parent.display().to_string(),
                    std::fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o755)
                        .create(parent),
                )?;
            }
            match symlink(&target, &dst) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                    return ctx(dst.display().to_string(), Err(e))
                }
                _ => continue,
            }
        }
        let src_fd = open_path(&src)?;
        make_mountpoint(&dst, meta.is_dir())?;
        let dst_fd = open_path(&dst)?;
        let attrs = sys::MOUNT_ATTR_NOSUID
            | sys::MOUNT_ATTR_NODEV
            | if b.writable {
                0
            } else {
                sys::MOUNT_ATTR_RDONLY
            };
        ctx(
            format!("bind {}", b.path.display()),
            bind_fd(&src_fd, &dst_fd, attrs, true),
        )?;
    }
    Ok(())
}

/// Mount each overlay at its target: overlayfs with `userxattr` (required for an unprivileged
/// mount in a user namespace, kernel >= 5.11), `redirect_dir=nofollow`, `metacopy` and `index` off (so the
/// upper layer holds only whole files, whiteouts and opaque directories: what the supervisor's
/// snapshot reads), nosuid and nodev; read-only without an upper layer. Each lower layer, and
/// the directory holding the upper and work directories (one mount, as overlayfs wants), is first
/// attached at `/layers/N` of the staging root, from the detached tree the supervisor sent
/// (root callers: `trees` from `layers_from`, in plan order) or cloned from its path beneath
/// /oldroot without following any symlink (the supervisor canonicalised the paths), or, for a
/// layer in a capped volume of an unprivileged supervisor (`volume_fds`), cloned here from the
/// descriptor it sent; the overlay is mounted from there. So the zone needs no right to the
/// directories above a layer, and its mountinfo names `/layers/N`, never a host path (the staging root is detached at the final pivot). The target
/// is created in the fresh root (it overlaps no grant, so nothing is created on the host).
fn mount_overlays(
    overlays: &[OverlayMount],
    layers_from: Option<usize>,
    volume_fds: &[Option<usize>],
    trees: &mut [Option<OwnedFd>],
) -> io::Result<()> {
    if overlays.is_empty() {
        return Ok(());
    }
    let oldroot = open_path(Path::new("/oldroot"))?;
    ctx(
        "/layers",
        std::fs::DirBuilder::new().mode(0o700).create("/layers"),
    )?;
    let mut attached = 0usize;
    let mut layer = |p: &Path| -> io::Result<String> {
        let what = format!("overlay layer {}", p.display());
        let sent = |i: usize, trees: &mut [Option<OwnedFd>]| {
            trees
                .get_mut(i)
                .and_then(Option::take)
                .ok_or_else(|| io::Error::other(format!("{what}: no tree sent")))
        };
        let tree = match (layers_from, volume_fds.get(attached).copied().flatten()) {
            (Some(from), _) => sent(from + attached, trees)?,
            (None, Some(i)) => ctx(&what, sys::clone_tree(&sent(i, trees)?, false))?,
            (None, None) => {
                let fd = ctx(
                    &what,
                    sys::openat2(
                        oldroot.as_raw_fd(),
                        &rel(p),
                        libc::O_PATH | libc::O_DIRECTORY,
                        sys::RESOLVE_BENEATH | sys::RESOLVE_NO_SYMLINKS,
                    ),
                )?;
                ctx(&what, sys::clone_tree(&fd, false))?
            }
        };
        let at = PathBuf::from(format!("/layers/{attached}"));
        attached += 1;
        make_mountpoint(&at, true)?;
        ctx(
            &what,
            sys::move_mount_onto(&tree, open_path(&at)?.as_raw_fd()),
        )?;
        Ok(at.to_string_lossy().into_owned())
    };
    for o in overlays {
        let dst = Path::new("/newroot").join(rel(&o.target));
        let lowers: Vec<String> = o
            .lowers
            .iter()
            .map(|p| layer(p))
            .collect::<io::Result<_>>()?;
        let upper_work = match (&o.upper, &o.work) {
            (Some(upper), Some(work)) => {
                let (Some(parent), Some(u), Some(w)) =
                    (upper.parent(), upper.file_name(), work.file_name())
                else {
                    return Err(io::Error::other(format!(
                        "overlay upper {} and work {} are not siblings",
                        upper.display(),
                        work.display()
                    )));
                };
                let at = layer(parent)?;
                Some((
                    format!("{at}/{}", u.to_string_lossy()),
                    format!("{at}/{}", w.to_string_lossy()),
                ))
            }
            _ => None,
        };
        if lowers.len() == 1 && upper_work.is_none() {
            // overlayfs needs two lower layers without an upper one: a single read-only layer is
            // the same view as a read-only bind of it.
            make_mountpoint(&dst, true)?;
            let attrs = sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV;
            ctx(
                format!("read-only layer at {}", o.target.display()),
                bind_fd(
                    &open_path(Path::new(&lowers[0]))?,
                    &open_path(&dst)?,
                    attrs,
                    true,
                ),
            )?;
            continue;
        }
        let mut options = format!(
            "lowerdir={},userxattr,redirect_dir=nofollow,metacopy=off,index=off,xino=off",
            lowers.join(":")
        );
        let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
        match &upper_work {
            Some((upper, work)) => {
                options.push_str(&format!(",upperdir={upper},workdir={work}"));
                if o.volatile {
                    options.push_str(",volatile");
                }
            }
            None => flags |= MsFlags::MS_RDONLY,
        }
        make_mountpoint(&dst, true)?;
        nixctx(
            &format!("overlay at {}", o.target.display()),
            mount(
                Some("overlay"),
                &dst,
                Some("overlay"),
                flags,
                Some(options.as_str()),
            ),
        )?;
    }
    Ok(())
}

/// Re-bind protected sub-paths of writable roots read-only. `(root, sub)` are checked again here,
/// beneath the root and without following any symlink. Every directory between the root and a
/// protected path is first bound onto itself (still writable): a mount point cannot be renamed or
/// removed, so `mv .git elsewhere && mkdir .git` cannot swap a protected path out from under us.
fn protect_sub_paths(protected: &[(PathBuf, PathBuf)]) -> io::Result<()> {
    let open_beneath = |root: &Path, sub: &Path| -> io::Result<OwnedFd> {
        let root_fd = open_path(&Path::new("/newroot").join(rel(root)))?;
        ctx(
            format!("protected path {}", root.join(sub).display()),
            sys::openat2(
                root_fd.as_raw_fd(),
                &sub.to_string_lossy(),
                libc::O_PATH,
                sys::RESOLVE_BENEATH | sys::RESOLVE_NO_SYMLINKS,
            ),
        )
    };
    // Sets, not lists: a check's zone holds thousands of paths (t0's protected files).
    let held: std::collections::HashSet<(&Path, &Path)> = protected
        .iter()
        .map(|(r, s)| (r.as_path(), s.as_path()))
        .collect();
    let mut pinned: std::collections::HashSet<(&Path, &Path)> = std::collections::HashSet::new();
    for (root, sub) in protected {
        // Outermost first: a directory is pinned before anything beneath it.
        let mut above: Vec<&Path> = sub
            .ancestors()
            .skip(1)
            .filter(|a| !a.as_os_str().is_empty())
            .collect();
        above.reverse();
        for ancestor in above {
            let key = (root.as_path(), ancestor);
            if pinned.contains(&key) || held.contains(&key) {
                continue;
            }
            let fd = open_beneath(root, ancestor)?;
            ctx(
                format!("pin {}", root.join(ancestor).display()),
                bind_fd(
                    &fd,
                    &fd,
                    sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
                    true,
                ),
            )?;
            pinned.insert(key);
        }
    }
    let mut ordered: Vec<&(PathBuf, PathBuf)> = protected.iter().collect();
    ordered.sort_by_key(|(_, sub)| sub.components().count());
    for (root, sub) in ordered {
        let fd = open_beneath(root, sub)?;
        ctx(
            format!("protect {}", root.join(sub).display()),
            bind_fd(
                &fd,
                &fd,
                sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
                true,
            ),
        )?;
    }
    Ok(())
}

fn hide_paths(hidden: &[PathBuf]) -> io::Result<()> {
    let root = open_path(Path::new("/newroot"))?;
    let null = open_path(Path::new("/oldroot/dev/null"))?;
    for h in hidden {
        let fd = match sys::openat2(
            root.as_raw_fd(),
            &rel(h),
            libc::O_PATH,
            sys::RESOLVE_BENEATH | sys::RESOLVE_NO_SYMLINKS,
        ) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => return ctx(format!("hidden path {}", h.display()), Err(e)),
        };
        let st = nixctx("fstat", nix::sys::stat::fstat(fd.as_raw_fd()))?;
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            let target = format!("/proc/self/fd/{}", fd.as_raw_fd());
            let target = Path::new("/oldroot").join(target.trim_start_matches('/'));
            nixctx(
                &format!("hide {}", h.display()),
                mount(
                    Some("tmpfs"),
                    &target,
                    Some("tmpfs"),
                    MsFlags::MS_RDONLY
                        | MsFlags::MS_NOSUID
                        | MsFlags::MS_NODEV
                        | MsFlags::MS_NOEXEC,
                    Some("mode=0500,size=4k"),
                ),
            )?;
        } else {
            ctx(
                format!("hide {}", h.display()),
                bind_fd(&null, &fd, sys::MOUNT_ATTR_RDONLY, false),
            )?;
        }
    }
    Ok(())
}

fn mount_tmp(size: u64) -> io::Result<()> {
    make_mountpoint(Path::new("/newroot/tmp"), true)?;
    nixctx(
        "/tmp tmpfs",
        mount(
            Some("tmpfs"),
            "/newroot/tmp",
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(format!("mode=1777,size={size}").as_str()),
        ),
    )
}

fn mount_dev() -> io::Result<()> {
    make_mountpoint(Path::new("/newroot/dev"), true)?;
    nixctx(
        "/dev tmpfs",
        mount(
            Some("tmpfs"),
            "/newroot/dev",
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
            Some("mode=0755,size=64k"),
        ),
    )?;
    for d in DEVICES {
        let dst = Path::new("/newroot/dev").join(d);
        make_mountpoint(&dst, false)?;
        let src = open_path(&Path::new("/oldroot/dev").join(d))?;
        ctx(
            format!("/dev/{d}"),
            bind_fd(&src, &open_path(&dst)?, sys::MOUNT_ATTR_NOSUID, false),
        )?;
    }
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        ctx(
            format!("/dev/{name}"),
            symlink(target, Path::new("/newroot/dev").join(name)),
        )?;
    }
    make_mountpoint(Path::new("/newroot/dev/shm"), true)?;
    nixctx(
        "/dev/shm",
        mount(
            Some("tmpfs"),
            "/newroot/dev/shm",
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=1777,size=64m"),
        ),
    )?;
    let dev = open_path(Path::new("/newroot/dev"))?;
    ctx(
        "seal /dev",
        sys::mount_setattr(dev.as_raw_fd(), sys::MOUNT_ATTR_RDONLY, false),
    )
}

fn mount_proc() -> io::Result<()> {
    make_mountpoint(Path::new("/newroot/proc"), true)?;
    nixctx(
        "/proc",
        mount(
            Some("proc"),
            "/newroot/proc",
            Some("proc"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            None::<&str>,
        ),
    )?;
    let null = open_path(Path::new("/newroot/dev/null"))?;
    for f in PROC_MASKED_FILES {
        let p = Path::new("/newroot/proc").join(f);
        if let Ok(fd) = open_path(&p) {
            ctx(
                format!("mask /proc/{f}"),
                bind_fd(&null, &fd, sys::MOUNT_ATTR_RDONLY, false),
            )?;
        }
    }
    for d in ["sys", "sysrq-trigger", "bus", "irq", "fs"] {
        let p = Path::new("/newroot/proc").join(d);
        if let Ok(fd) = open_path(&p) {
            if std::fs::symlink_metadata(&p)
                .map(|m| m.is_dir())
                .unwrap_or(false)
            {
                ctx(
                    format!("read-only /proc/{d}"),
                    bind_fd(&fd, &fd, sys::MOUNT_ATTR_RDONLY, true),
                )?;
            }
        }
    }
    Ok(())
}

fn pivot_into_new_root() -> io::Result<()> {
    nixctx("chdir /newroot", nix::unistd::chdir("/newroot"))?;
    nixctx("pivot_root", nix::unistd::pivot_root(".", "."))?;
    nixctx("detach old root", umount2(".", MntFlags::MNT_DETACH))?;
    nixctx("chdir /", nix::unistd::chdir("/"))
}

fn seal_root() -> io::Result<()> {
    let root = open_path(Path::new("/"))?;
    ctx(
        "seal /",
        sys::mount_setattr(root.as_raw_fd(), sys::MOUNT_ATTR_RDONLY, false),
    )
}
