//! A check's verdicts fed one per run through a FIFO: the exec zone keeps no state of a check
//! between its runs, so a check that must disagree with itself (a flake, deterministically) reads
//! its verdict from a FIFO the test feeds, one line per check run; a detached check sees the
//! FIFO's directory through a check policy that binds it read-only (the shipped exec.toml plus
//! that one path).

use super::path_str;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A FIFO that hands each reader the next verdict of a sequence (the last one repeated), until
/// dropped. A check reads one line of it (`read -r v`): should the feeder offer the next verdict to
/// a reader still open (under load), that reader still takes only the first line, and the line
/// left in the pipe is discarded when it closes; the sequences here are one first verdict then one
/// repeated, so every later reader still gets the repeated one.
pub struct Verdicts {
    dir: tempfile::TempDir,
    stop: Arc<AtomicBool>,
    feeder: Option<std::thread::JoinHandle<()>>,
}

impl Verdicts {
    pub fn new(sequence: &[&str]) -> Verdicts {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let fifo = dir.path().join("verdict");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644))
            .expect("mkfifo");
        std::fs::set_permissions(&fifo, std::fs::Permissions::from_mode(0o644))
            .expect("chmod fifo");
        let stop = Arc::new(AtomicBool::new(false));
        let sequence: Vec<String> = sequence.iter().map(|s| s.to_string()).collect();
        let feeder = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut served = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    // Opened without blocking: ENXIO until a check opened the FIFO to read it.
                    match std::fs::OpenOptions::new()
                        .write(true)
                        .custom_flags(nix::libc::O_NONBLOCK)
                        .open(&fifo)
                    {
                        Ok(mut f) => {
                            let verdict = &sequence[served.min(sequence.len() - 1)];
                            f.write_all(format!("{verdict}\n").as_bytes())
                                .expect("write the verdict");
                            drop(f);
                            served += 1;
                            // The reader sees end of file before the next verdict is offered.
                            std::thread::sleep(std::time::Duration::from_millis(300));
                        }
                        Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
                    }
                }
            })
        };
        Verdicts {
            dir,
            stop,
            feeder: Some(feeder),
        }
    }

    pub fn fifo(&self) -> String {
        path_str(&self.dir.path().join("verdict"))
    }

    /// The shipped exec zone policy with the FIFO's directory bound read-only: the path of a
    /// `--check-policy` file.
    pub fn check_policy(&self) -> String {
        let shipped = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/exec.toml"),
        )
        .expect("read exec.toml");
        let dir = path_str(self.dir.path());
        let policy = shipped.replacen("read_only = [", &format!("read_only = [\"{dir}\", "), 1);
        assert_ne!(policy, shipped, "exec.toml has a read_only list");
        let path = self.dir.path().join("exec.toml");
        std::fs::write(&path, policy).expect("write the check policy");
        path_str(&path)
    }
}

impl Drop for Verdicts {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(feeder) = self.feeder.take() {
            let _ = feeder.join();
        }
    }
}
