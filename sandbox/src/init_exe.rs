//! The zone init executable: `loopexec-zone-init`, a small program of this crate's zone side
//! alone (`init::run_if_zone_init`, nothing of the CLI), installed next to the binary that uses
//! the crate (`cargo build` and `cargo install` build and install both). A zone's pid 1 executes
//! it instead of re-executing the supervisor's own, much larger, binary: fewer pages to map,
//! relocate and fault in at every zone start.
//!
//! It is found once per launcher, in the directory of the running executable (symlinks
//! resolved), and opened there: the clone executes that very file through its descriptor
//! (`execveat(AT_EMPTY_PATH)`), so a rename or replacement of the path afterwards changes nothing.
//! Missing, or not a regular executable file, the zone does not start (`SandboxError::Spawn`,
//! naming the path and the fix); nothing falls back to another program.

use crate::error::SandboxError;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

/// The executable's file name, beside the supervisor's binary.
pub const INIT_EXE: &str = "loopexec-zone-init";

/// The zone init executable, opened (or why it cannot be).
pub(crate) struct InitExe(Result<OwnedFd, String>);

impl InitExe {
    /// Find and open the executable next to the running one.
    pub(crate) fn locate() -> InitExe {
        InitExe(
            std::env::current_exe()
                .map_err(|e| format!("locating the running executable: {e}"))
                .and_then(|exe| match exe.parent() {
                    Some(dir) => open(&dir.join(INIT_EXE)),
                    None => Err(format!("{} has no directory", exe.display())),
                }),
        )
    }

    /// The opened executable, for the clone to execute.
    pub(crate) fn fd(&self) -> Result<&OwnedFd, SandboxError> {
        self.0
            .as_ref()
            .map_err(|why| SandboxError::Spawn(why.clone()))
    }
}

fn open(path: &Path) -> Result<OwnedFd, String> {
    let fix = |what: String| {
        format!(
            "the zone init executable {}: {what}; it is built and installed with loopexec (`cargo build`, `cargo install --path .`): install both binaries in the same directory",
            path.display()
        )
    };
    let fd = nix::fcntl::open(
        path,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map(|fd| unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
    .map_err(|e| fix(e.desc().to_string()))?;
    let st = nix::sys::stat::fstat(fd.as_raw_fd()).map_err(|e| fix(e.desc().to_string()))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_mode & 0o111 == 0 {
        return Err(fix("not an executable file".into()));
    }
    Ok(fd)
}
