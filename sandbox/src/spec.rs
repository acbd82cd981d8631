//! What the caller asks a zone for ([`ZoneSpec`]), the checks it must pass before anything is
//! started (step 1 of docs/zones.md, "The native zone's setup sequence"), and what of it passes
//! into the zone as it is: the environment the policy allows and the command's stdio.

use crate::error::SandboxError;
use crate::plan::OverlayMount;
use crate::policy::{check_absolute, NetworkMode, Policy};
use std::ffi::OsString;
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What to run and how (see the crate's API brief).
#[derive(Debug)]
pub struct ZoneSpec {
    pub policy: Policy,
    /// `argv[0]` absolute, or looked up in the zone environment's PATH.
    pub argv: Vec<OsString>,
    /// Must be `/`, `/tmp`, or lie inside a granted path.
    pub cwd: PathBuf,
    /// Candidate environment; only names the policy allows pass.
    pub env: Vec<(OsString, OsString)>,
    /// None: /dev/null.
    pub stdin: Option<OwnedFd>,
    /// None: inherited from the supervisor.
    pub stdout: Option<OwnedFd>,
    /// None: inherited from the supervisor.
    pub stderr: Option<OwnedFd>,
    pub extra_rw: Vec<PathBuf>,
    pub extra_ro: Vec<PathBuf>,
    /// Some(port): a TCP listener on 127.0.0.1:port inside the zone, handed back (0: any port).
    pub loopback_listener: Option<u16>,
    /// Overlay filesystems mounted inside the zone (e.g. a workspace over a read-only baseline).
    /// A target must not overlap any granted path; it is readable, and writable when the overlay
    /// has an upper layer.
    pub overlays: Vec<OverlayMount>,
    /// (overlay target, relative sub-path) pairs bound read-only once the overlays are mounted
    /// (a write there fails with EROFS; the path cannot be removed or renamed: EBUSY), with the
    /// same pinning as the policy's protected paths. The sub-path must exist in the overlay and
    /// contain no symlink.
    pub read_only_beneath: Vec<(PathBuf, PathBuf)>,
    /// Some(s): the command runs in its own time namespace, its monotonic and boot clocks `s`
    /// seconds from the host's (the wall clock cannot move). Refused where the kernel has none.
    pub clock_offset_s: Option<i64>,
    /// Some: run the zone self-test's probe in place of `argv` (`self_test.rs`); its outcomes
    /// are in the report.
    pub self_test: Option<crate::self_test::SelfTestPlan>,
}

impl ZoneSpec {
    /// A spec with closed defaults: cwd `/`, empty environment, stdin /dev/null.
    pub fn new(policy: Policy, argv: Vec<OsString>) -> Self {
        ZoneSpec {
            policy,
            argv,
            cwd: PathBuf::from("/"),
            env: Vec::new(),
            stdin: None,
            stdout: None,
            stderr: None,
            extra_rw: Vec::new(),
            extra_ro: Vec::new(),
            loopback_listener: None,
            overlays: Vec::new(),
            read_only_beneath: Vec::new(),
            clock_offset_s: None,
            self_test: None,
        }
    }
}

pub(crate) fn check_spec(spec: &ZoneSpec) -> Result<(), SandboxError> {
    if spec.argv.is_empty() {
        return Err(SandboxError::Spec("no command given".into()));
    }
    for p in spec.extra_rw.iter().chain(&spec.extra_ro) {
        check_absolute(p).map_err(SandboxError::Spec)?;
    }
    check_absolute(&spec.cwd)
        .or_else(|e| {
            if spec.cwd == Path::new("/") {
                Ok(())
            } else {
                Err(e)
            }
        })
        .map_err(SandboxError::Spec)?;
    let grants = spec
        .policy
        .filesystem
        .read_only
        .iter()
        .chain(&spec.policy.filesystem.read_write)
        .chain(&spec.extra_rw)
        .chain(&spec.extra_ro);
    check_overlays(spec, grants.clone())?;
    for (target, sub) in &spec.read_only_beneath {
        if !spec.overlays.iter().any(|o| o.target == *target) {
            return Err(SandboxError::Spec(format!(
                "read-only path {} lies in no overlay of the zone",
                target.join(sub).display()
            )));
        }
        crate::policy::check_relative(sub).map_err(|e| {
            SandboxError::Spec(format!("read-only path beneath {}: {e}", target.display()))
        })?;
    }
    let inside = spec.cwd == Path::new("/")
        || spec.cwd.starts_with("/tmp")
        || grants.clone().any(|g| spec.cwd.starts_with(g))
        || spec
            .overlays
            .iter()
            .any(|o| spec.cwd.starts_with(&o.target));
    if !inside {
        return Err(SandboxError::Spec(format!(
            "working directory {} is not inside a granted path",
            spec.cwd.display()
        )));
    }
    // No NUL can cross execve: a variable holding one would arrive cut or not at all.
    if let Some((k, _)) = build_env(spec)
        .into_iter()
        .find(|(k, v)| k.contains(&0) || v.contains(&0))
    {
        return Err(SandboxError::Spec(format!(
            "environment variable {:?} holds a NUL byte, which no environment variable can carry",
            String::from_utf8_lossy(&k)
        )));
    }
    if spec.loopback_listener.is_some() && spec.policy.network.mode != NetworkMode::Proxy {
        return Err(SandboxError::Spec(
            "a proxy listener needs network.mode = \"proxy\"".into(),
        ));
    }
    Ok(())
}

/// Overlay paths are absolute and `..`-free, free of the characters overlayfs options reserve
/// (`,` `:` `\\`), at least one lower, upper and work given together, and no target overlapping
/// a grant, a zone system directory or another target (it would hide it, or be created on the host).
fn check_overlays<'a>(
    spec: &ZoneSpec,
    grants: impl Iterator<Item = &'a PathBuf>,
) -> Result<(), SandboxError> {
    let grants: Vec<&PathBuf> = grants.collect();
    let bad = |m: String| Err(SandboxError::Spec(m));
    for (i, o) in spec.overlays.iter().enumerate() {
        if o.lowers.is_empty() {
            return bad(format!(
                "overlay {}: at least one lower layer is needed",
                o.target.display()
            ));
        }
        if o.upper.is_some() != o.work.is_some() {
            return bad(format!(
                "overlay {}: upper and work directories go together",
                o.target.display()
            ));
        }
        for p in std::iter::once(&o.target)
            .chain(&o.lowers)
            .chain(o.upper.iter())
            .chain(o.work.iter())
        {
            check_absolute(p).map_err(SandboxError::Spec)?;
            if p.as_os_str()
                .as_encoded_bytes()
                .iter()
                .any(|b| matches!(b, b',' | b':' | b'\\'))
            {
                return bad(format!("overlay path {} contains `,`, `:` or `\\`, which overlayfs options cannot carry", p.display()));
            }
        }
        let overlaps = |a: &Path, b: &Path| a.starts_with(b) || b.starts_with(a);
        let reserved = ["/", "/tmp", "/dev", "/proc"].iter().map(Path::new);
        if let Some(r) = reserved
            .clone()
            .find(|r| o.target == *r || (*r != Path::new("/") && o.target.starts_with(r)))
        {
            return bad(format!(
                "overlay target {} lies in the zone's {}",
                o.target.display(),
                r.display()
            ));
        }
        if let Some(g) = grants.iter().find(|g| overlaps(&o.target, g)) {
            return bad(format!(
                "overlay target {} overlaps the granted path {}",
                o.target.display(),
                g.display()
            ));
        }
        if let Some(other) = spec.overlays[..i]
            .iter()
            .find(|x| overlaps(&o.target, &x.target))
        {
            return bad(format!(
                "overlay targets {} and {} overlap",
                o.target.display(),
                other.target.display()
            ));
        }
    }
    Ok(())
}

pub(crate) fn build_env(spec: &ZoneSpec) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut env: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for (k, v) in &spec.env {
        let allowed = spec
            .policy
            .env
            .allow
            .iter()
            .any(|a| a.as_bytes() == k.as_bytes());
        if allowed
            && !spec.policy.env.set.contains_key(&*k.to_string_lossy())
            && !env.iter().any(|(e, _)| e == k.as_bytes())
        {
            env.push((k.as_bytes().to_vec(), v.as_bytes().to_vec()));
        }
    }
    for (k, v) in &spec.policy.env.set {
        env.push((k.as_bytes().to_vec(), v.as_bytes().to_vec()));
    }
    env
}

/// The command's stdin, stdout and stderr, sent with the plan: the caller's, or /dev/null for
/// stdin and our own stdout/stderr when not given.
pub(crate) fn command_stdio(given: [Option<OwnedFd>; 3]) -> Result<[OwnedFd; 3], SandboxError> {
    let [stdin, stdout, stderr] = given;
    let own = |fd: RawFd| {
        // SAFETY: fds 1 and 2 stay open for the life of the process; the borrow ends here.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }
            .try_clone_to_owned()
            .map_err(|e| SandboxError::io("stdio", e))
    };
    let stdin = match stdin {
        Some(f) => f,
        None => std::fs::File::open("/dev/null")
            .map_err(|e| SandboxError::io("/dev/null", e))?
            .into(),
    };
    let stdout = match stdout {
        Some(f) => f,
        None => own(1)?,
    };
    let stderr = match stderr {
        Some(f) => f,
        None => own(2)?,
    };
    Ok([stdin, stdout, stderr])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(policy_text: &str) -> ZoneSpec {
        let policy = Policy::parse(policy_text.as_bytes(), "t.toml").unwrap();
        ZoneSpec::new(policy, vec!["/bin/true".into()])
    }

    #[test]
    fn environment_keeps_only_allowed_names_and_fixed_values_win() {
        let mut s = spec("[env]\nallow = [\"LANG\", \"HOME\"]\nset = { HOME = \"/tmp\" }\n");
        s.env = vec![
            ("LANG".into(), "C".into()),
            ("TOKEN".into(), "secret".into()),
            ("HOME".into(), "/root".into()),
        ];
        let env = build_env(&s);
        assert_eq!(
            env,
            vec![
                (b"LANG".to_vec(), b"C".to_vec()),
                (b"HOME".to_vec(), b"/tmp".to_vec())
            ]
        );
    }

    #[test]
    fn a_nul_byte_in_a_set_or_passed_variable_refuses_the_zone_naming_it() {
        // A policy built in code (not parsed: parsing refuses it at its line) can still hold one.
        let mut s = spec("[filesystem]\nread_only = [\"/usr\"]\n");
        s.cwd = PathBuf::from("/usr");
        s.policy.env.set.insert("TOKEN".into(), "ab\0cd".into());
        assert!(
            matches!(check_spec(&s), Err(SandboxError::Spec(m)) if m == "environment variable \"TOKEN\" holds a NUL byte, which no environment variable can carry")
        );
        let mut s = spec("[filesystem]\nread_only = [\"/usr\"]\n[env]\nallow = [\"LANG\"]\n");
        s.cwd = PathBuf::from("/usr");
        s.env = vec![(
            "LANG".into(),
            std::ffi::OsString::from(std::ffi::OsStr::from_bytes(b"C\0x")),
        )];
        assert!(
            matches!(check_spec(&s), Err(SandboxError::Spec(m)) if m.contains("\"LANG\" holds a NUL byte"))
        );
    }

    #[test]
    fn cwd_outside_every_grant_is_refused() {
        let mut s = spec("[filesystem]\nread_only = [\"/usr\"]\n");
        s.cwd = PathBuf::from("/etc");
        assert!(matches!(check_spec(&s), Err(SandboxError::Spec(m)) if m.contains("/etc")));
        s.cwd = PathBuf::from("/usr/share");
        assert!(check_spec(&s).is_ok());
    }

    #[test]
    fn relative_extra_grant_is_refused() {
        let mut s = spec("");
        s.extra_rw = vec![PathBuf::from("work")];
        assert!(matches!(check_spec(&s), Err(SandboxError::Spec(_))));
    }

    #[test]
    fn listener_needs_proxy_mode() {
        let mut s = spec("[network]\nmode = \"none\"\n");
        s.loopback_listener = Some(0);
        assert!(matches!(check_spec(&s), Err(SandboxError::Spec(m)) if m.contains("proxy")));
        let mut s = spec("[network]\nmode = \"proxy\"\n");
        s.loopback_listener = Some(0);
        assert!(check_spec(&s).is_ok());
    }

    #[test]
    fn a_read_only_path_must_lie_in_an_overlay_and_be_relative_without_dot_dot() {
        let mut s = spec("");
        s.cwd = PathBuf::from("/workspace");
        s.overlays = vec![OverlayMount {
            target: "/workspace".into(),
            lowers: vec!["/srv/lower".into()],
            upper: None,
            work: None,
            volatile: false,
        }];
        s.read_only_beneath = vec![("/elsewhere".into(), "tests".into())];
        assert!(
            matches!(check_spec(&s), Err(SandboxError::Spec(m)) if m == "read-only path /elsewhere/tests lies in no overlay of the zone")
        );
        s.read_only_beneath = vec![("/workspace".into(), "../etc".into())];
        assert!(
            matches!(check_spec(&s), Err(SandboxError::Spec(m)) if m.starts_with("read-only path beneath /workspace: "))
        );
        s.read_only_beneath = vec![("/workspace".into(), "tests/test_calc.py".into())];
        assert!(check_spec(&s).is_ok());
    }

    #[test]
    fn empty_command_is_refused() {
        let mut s = spec("");
        s.argv.clear();
        assert!(matches!(check_spec(&s), Err(SandboxError::Spec(_))));
    }
}
