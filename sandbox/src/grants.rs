//! Grants and overlay layers resolved for a zone (step 6 of docs/zones.md, "The native zone's
//! setup sequence"): paths canonicalised, writable ones checked for the zone uid, and, for root
//! callers, the idmapped mount trees that let the zone uid write a grant it does not own.

use crate::error::{Layer, SandboxError};
use crate::plan::{self, OverlayMount};
use crate::spawn::idmap_userns;
use crate::spec::ZoneSpec;
use crate::sys;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A writable grant, and (root callers) the on-disk owner to map onto the zone uid when the
/// zone uid could not write it otherwise.
#[derive(Debug, Clone)]
pub(crate) struct RwGrant {
    pub path: PathBuf,
    idmap_owner: Option<(u32, u32)>,
}

/// Read-only grants (absent ones kept: the zone skips them) and canonical writable grants.
pub(crate) fn resolve_grants(
    spec: &ZoneSpec,
    zone_ids: Option<(u32, u32)>,
) -> Result<(Vec<PathBuf>, Vec<RwGrant>), SandboxError> {
    let mut ro: Vec<PathBuf> = spec.policy.filesystem.read_only.clone();
    for p in &spec.extra_ro {
        let c = std::fs::canonicalize(p)
            .map_err(|e| SandboxError::Spec(format!("read-only grant {}: {e}", p.display())))?;
        ro.push(c);
    }
    let mut rw = Vec::new();
    for p in spec
        .policy
        .filesystem
        .read_write
        .iter()
        .chain(&spec.extra_rw)
    {
        let c = std::fs::canonicalize(p)
            .map_err(|e| SandboxError::Spec(format!("writable grant {}: {e}", p.display())))?;
        if c == Path::new("/") {
            return Err(SandboxError::Spec(
                "the host root cannot be granted writable".into(),
            ));
        }
        let mut idmap_owner = None;
        if let Some((uid, gid)) = zone_ids {
            let m =
                std::fs::metadata(&c).map_err(|e| SandboxError::io(c.display().to_string(), e))?;
            let mode = m.mode();
            let writable = (m.uid() == uid && mode & 0o200 != 0)
                || (m.gid() == gid && mode & 0o020 != 0)
                || mode & 0o002 != 0;
            if !writable {
                idmap_owner = Some((m.uid(), m.gid()));
            }
        }
        rw.push(RwGrant {
            path: c,
            idmap_owner,
        });
    }
    Ok((ro, rw))
}

/// Root callers: for each writable grant the zone uid cannot write, a detached copy of its mounts
/// whose on-disk owner is seen as the zone uid (an idmapped mount): the zone writes the
/// operator's files, and what it creates is stored as owned by the grant's owner. Other on-disk
/// owners stay unmapped (read-only to the zone, shown as the overflow uid).
pub(crate) fn idmapped_trees(
    grants: &[RwGrant],
    zone_uid: u32,
    zone_gid: u32,
) -> Result<Vec<(PathBuf, OwnedFd)>, SandboxError> {
    let mut out = Vec::new();
    for g in grants {
        let Some((owner_uid, owner_gid)) = g.idmap_owner else {
            continue;
        };
        let refuse = |cause: String| {
            SandboxError::Spec(format!(
                "writable grant {} is not writable by the zone uid {zone_uid} and cannot be idmapped ({cause}): `chown -R {zone_uid}:{zone_gid} {}`, or run loopexec unprivileged",
                g.path.display(),
                g.path.display()
            ))
        };
        if owner_uid == 0 || owner_gid == 0 {
            // The zone's files would be root's on the host: a setuid-root binary made in the zone
            // would be one on the host too. Never map the zone onto root.
            return Err(refuse(
                "it belongs to root, and the zone is never mapped onto root".into(),
            ));
        }
        let userns = idmap_userns(owner_uid, zone_uid, owner_gid, zone_gid)
            .map_err(|e| refuse(format!("user namespace: {e}")))?;
        let tree = sys::clone_tree_at(&g.path).map_err(|e| refuse(format!("open_tree: {e}")))?;
        sys::idmap_tree(
            &tree,
            &userns,
            sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
        )
        .map_err(|e| refuse(format!("mount_setattr: {e}")))?;
        out.push((g.path.clone(), tree));
    }
    // The plan carries the command's three stdio descriptors, then the trees.
    if out.len() > plan::MAX_FDS - 3 {
        return Err(SandboxError::Spec(format!(
            "at most {} writable grants need idmapping",
            plan::MAX_FDS - 3
        )));
    }
    Ok(out)
}

/// Layer paths canonicalised (so the supervisor can open them without following any symlink);
/// every layer must be an existing directory. For root callers the upper and work directories
/// must be the zone uid's own (it mounts as that uid): refused here with the fix, rather than
/// failing inside the zone. The zone never walks a layer's path: it gets each layer as a
/// descriptor ([`overlay_layer_fds`]), so no directory above a layer needs to let it pass.
pub(crate) fn resolve_overlays(
    overlays: &[OverlayMount],
    zone_ids: Option<(u32, u32)>,
) -> Result<Vec<OverlayMount>, SandboxError> {
    if !overlays.is_empty() {
        require_unprivileged_overlayfs()?;
    }
    if let Some((uid, gid)) = zone_ids {
        for o in overlays {
            for own in o.upper.iter().chain(o.work.iter()) {
                let m = std::fs::metadata(own)
                    .map_err(|e| SandboxError::io(own.display().to_string(), e))?;
                if m.uid() != uid {
                    return Err(SandboxError::Spec(format!(
                        "overlay directory {} must belong to the zone uid {uid} (`chown {uid}:{gid} {}`)",
                        own.display(),
                        own.display()
                    )));
                }
            }
        }
    }
    let canon = |p: &PathBuf| -> Result<PathBuf, SandboxError> {
        if let Some(found) = crate::volume::beneath(p) {
            // A capped volume's layer: checked beneath the volume's mount, kept as named.
            volume_layer(p, found)?;
            return Ok(p.clone());
        }
        let c = std::fs::canonicalize(p)
            .map_err(|e| SandboxError::Spec(format!("overlay layer {}: {e}", p.display())))?;
        if !c.is_dir() {
            return Err(SandboxError::Spec(format!(
                "overlay layer {} is not a directory",
                p.display()
            )));
        }
        if c.as_os_str()
            .as_encoded_bytes()
            .iter()
            .any(|b| matches!(b, b',' | b':' | b'\\'))
        {
            return Err(SandboxError::Spec(format!(
                "overlay layer {} resolves to a path with `,`, `:` or `\\`",
                p.display()
            )));
        }
        Ok(c)
    };
    overlays
        .iter()
        .map(|o| {
            if let (Some(upper), Some(work)) = (&o.upper, &o.work) {
                upper_work_parent(&canon(upper)?, &canon(work)?)?;
            }
            Ok(OverlayMount {
                target: o.target.clone(),
                lowers: o.lowers.iter().map(canon).collect::<Result<_, _>>()?,
                upper: o.upper.as_ref().map(canon).transpose()?,
                work: o.work.as_ref().map(canon).transpose()?,
                volatile: o.volatile,
            })
        })
        .collect()
}

/// Root callers: every overlay layer as a detached mount tree, in plan order (each overlay's
/// lowers, then the directory holding its upper and work directories: overlayfs wants those two
/// on one mount). The zone attaches them in its staging root and
/// mounts the overlay from there, so it never walks a layer's host path: the directories above
/// the layers (the state dir, the run directory) stay closed to every other uid, the zone's
/// included, and its mountinfo names staging paths, never the operator's. Unprivileged callers
/// send none (a detached tree needs CAP_SYS_ADMIN): the zone runs as the caller, who owns the
/// state dir, and clones each layer itself from its path.
pub(crate) fn overlay_layer_trees(
    overlays: &[OverlayMount],
    zone_ids: Option<(u32, u32)>,
) -> Result<Option<Vec<OwnedFd>>, SandboxError> {
    if zone_ids.is_none() {
        return Ok(None);
    }
    let mut out = Vec::new();
    for o in overlays {
        let scratch = match (&o.upper, &o.work) {
            (Some(upper), Some(work)) => Some(upper_work_parent(upper, work)?.to_path_buf()),
            _ => None,
        };
        for layer in o.lowers.iter().chain(scratch.iter()) {
            let refuse = |e: std::io::Error| {
                SandboxError::Spec(format!("overlay layer {}: {e}", layer.display()))
            };
            if let Some(found) = crate::volume::beneath(layer) {
                out.push(sys::clone_tree(&volume_layer(layer, found)?, false).map_err(refuse)?);
                continue;
            }
            let fd = sys::openat2(
                libc::AT_FDCWD,
                &layer.to_string_lossy(),
                libc::O_PATH | libc::O_DIRECTORY,
                sys::RESOLVE_NO_SYMLINKS,
            )
            .map_err(refuse)?;
            out.push(sys::clone_tree(&fd, false).map_err(refuse)?);
        }
    }
    Ok(Some(out))
}

/// Unprivileged callers: for each overlay layer in plan order (as [`overlay_layer_trees`]), the
/// capped volume's layer a zone must clone itself (an unprivileged supervisor cannot clone a
/// mount; the zone can, Linux >= 6.15), or None for a layer the zone clones from its path.
pub(crate) fn volume_layer_fds(
    overlays: &[OverlayMount],
) -> Result<Vec<Option<OwnedFd>>, SandboxError> {
    let mut out = Vec::new();
    for o in overlays {
        let scratch = match (&o.upper, &o.work) {
            (Some(upper), Some(work)) => Some(upper_work_parent(upper, work)?.to_path_buf()),
            _ => None,
        };
        for layer in o.lowers.iter().chain(scratch.iter()) {
            out.push(
                crate::volume::beneath(layer)
                    .map(|found| volume_layer(layer, found))
                    .transpose()?,
            );
        }
    }
    Ok(out)
}

/// A layer directory inside a capped volume (`volume::beneath` found it): opened beneath the
/// volume's mount without following any symlink.
fn volume_layer(
    layer: &Path,
    found: std::io::Result<(OwnedFd, std::path::PathBuf)>,
) -> Result<OwnedFd, SandboxError> {
    let refuse =
        |e: std::io::Error| SandboxError::Spec(format!("overlay layer {}: {e}", layer.display()));
    let (volume, rest) = found.map_err(refuse)?;
    if rest.as_os_str().is_empty() {
        return Ok(volume);
    }
    sys::openat2(
        volume.as_raw_fd(),
        &rest.to_string_lossy(),
        libc::O_PATH | libc::O_DIRECTORY,
        sys::RESOLVE_BENEATH | sys::RESOLVE_NO_SYMLINKS,
    )
    .map_err(refuse)
}

/// Unless the policy lets the cap be skipped, every writable overlay of a policy with
/// `resources.disk_bytes` must write into a capped volume (`volume.rs`): its upper layer lies in
/// one, or the zone does not start.
pub(crate) fn require_capped_uppers(
    overlays: &[OverlayMount],
    policy: &crate::policy::Policy,
    skipped: bool,
) -> Result<(), SandboxError> {
    if policy.resources.disk_bytes.is_none() || skipped {
        return Ok(());
    }
    for upper in overlays.iter().filter_map(|o| o.upper.as_ref()) {
        if crate::volume::beneath(upper).is_none() {
            return Err(SandboxError::Unsatisfiable {
                layer: Layer::Disk,
                cause: format!(
                    "resources.disk_bytes is set but the overlay upper layer {} is not on a capped volume",
                    upper.display()
                ),
                fix: "let loopexec create the zone's writable layers (a run's workspace and check scratch), or allow running uncapped with layers.may_skip = [\"disk\"]".into(),
            });
        }
    }
    Ok(())
}

/// The directory holding an overlay's upper and work directories (they must be siblings).
pub(crate) fn upper_work_parent<'a>(
    upper: &'a Path,
    work: &Path,
) -> Result<&'a Path, SandboxError> {
    match (upper.parent(), work.parent()) {
        (Some(a), Some(b))
            if a == b && upper.file_name().is_some() && work.file_name().is_some() =>
        {
            Ok(a)
        }
        _ => Err(SandboxError::Spec(format!(
            "overlay upper {} and work {} must be sibling directories",
            upper.display(),
            work.display()
        ))),
    }
}

/// Overlayfs inside a user namespace (with `userxattr`) needs Linux >= 5.11: refuse up front
/// instead of failing inside the zone. (A kernel without overlayfs fails the mount itself.)
fn require_unprivileged_overlayfs() -> Result<(), SandboxError> {
    let unsat = |cause: String| SandboxError::Unsatisfiable {
        layer: Layer::MountNamespace,
        cause,
        fix: "run on Linux >= 5.11 with overlayfs available".into(),
    };
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut nums = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse::<u32>().ok());
    let (major, minor) = (nums.next().unwrap_or(0), nums.next().unwrap_or(0));
    if (major, minor) < (5, 11) {
        return Err(unsat(format!(
            "kernel {} cannot mount overlayfs in a user namespace",
            release.trim()
        )));
    }
    Ok(())
}
