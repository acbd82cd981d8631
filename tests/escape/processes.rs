//! Category 4, other processes: ptrace, process_vm_readv/writev, pidfd_getfd inside the zone, and
//! signals to host processes (the test itself, a victim it started): the zone's pid namespace must
//! show only its own processes.

use crate::common::{host_control, Scene, Zone};
use std::process::{Command, Stdio};

refused!(ptrace_attach_is_refused: "processes" "ptrace_attach" [] => ["EPERM"]);
refused!(ptrace_traceme_is_refused: "processes" "ptrace_traceme" [] => ["EPERM"]);
refused!(process_vm_readv_is_refused: "processes" "process_vm_readv" [] => ["EPERM"]);
refused!(process_vm_writev_is_refused: "processes" "process_vm_writev" [] => ["EPERM"]);
refused!(pidfd_getfd_is_refused: "processes" "pidfd_getfd" [] => ["EPERM", "pidfd_open_EPERM"]);

struct Victim(std::process::Child);

impl Victim {
    fn start() -> Victim {
        Victim(
            Command::new("sleep")
                .arg("60")
                .stdin(Stdio::null())
                .spawn()
                .expect("start victim"),
        )
    }
    fn pid(&self) -> String {
        self.0.id().to_string()
    }
    fn alive(&mut self) -> bool {
        self.0.try_wait().expect("try_wait victim").is_none()
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn host_processes_cannot_be_signalled() {
    let mut victim = Victim::start();
    let scene = Scene::new();
    let me = std::process::id().to_string();
    let run = Zone::new(&scene).run("processes", &["kill_host_pids", &victim.pid(), &me]);
    run.assert_blocked("kill_host_pids", &["ESRCH"]);
    assert!(victim.alive(), "the host victim process died");
}

refused!(other_processes_memory_cannot_be_opened: "processes" "other_mem" [] => ["EACCES", "EPERM", "ENOENT"]);

#[test]
fn the_supervisor_cannot_be_killed_from_the_zone() {
    // The harness tells the probe loopexec's own host pid once it runs.
    let scene = Scene::new();
    let pid_file = scene.rw.join("supervisor.pid");
    let pid_file_in = pid_file.clone();
    let run = Zone::new(&scene)
        .during(move |pid, _| {
            std::fs::write(&pid_file_in, format!("{pid}\n")).expect("write supervisor pid")
        })
        .run("processes", &["kill_pid_from_file", &Scene::s(&pid_file)]);
    run.assert_blocked("kill_pid_from_file", &["ESRCH"]);
    assert!(
        run.status.success(),
        "the supervisor did not survive: {:?}",
        run.status
    );
}

#[test]
fn kill_of_every_signallable_process_reaches_nothing_outside() {
    let mut victim = Victim::start();
    let scene = Scene::new();
    let run = Zone::new(&scene).run("processes", &["kill_all"]);
    // kill(-1) may succeed inside the zone's own pid namespace; what matters is who survived.
    run.assert_blocked("kill_all", &["kill_minus_one_returned_"]);
    assert!(
        run.status.success(),
        "the supervisor did not report the probe's own exit: {:?}",
        run.status
    );
    assert!(victim.alive(), "the host victim process died");
}

/// A System V shared memory segment the test creates on the host (removed on drop).
struct HostShm {
    id: i32,
    key: i32,
}

impl HostShm {
    fn create() -> HostShm {
        let key = 0x4c58_0000 | (std::process::id() as i32 & 0xffff);
        // SAFETY: plain System V IPC calls on a segment this test owns.
        let id = unsafe { libc::shmget(key, 4096, libc::IPC_CREAT | 0o666) };
        assert!(id >= 0, "shmget: {}", std::io::Error::last_os_error());
        HostShm { id, key }
    }
}

impl Drop for HostShm {
    fn drop(&mut self) {
        unsafe { libc::shmctl(self.id, libc::IPC_RMID, std::ptr::null_mut()) };
    }
}

#[test]
fn host_sysv_shared_memory_is_not_reachable() {
    let shm = HostShm::create();
    let scene = Scene::new();
    Zone::new(&scene)
        .run("processes", &["sysv_shm", &shm.key.to_string()])
        .assert_blocked("sysv_shm", &["ENOENT"]);
}

#[test]
fn host_control_sysv_shared_memory_is_detected() {
    let shm = HostShm::create();
    let scene = Scene::new();
    host_control(&scene, "processes", &["sysv_shm", &shm.key.to_string()])
        .assert_escaped("sysv_shm");
}

#[test]
fn host_processes_are_not_visible() {
    let victim = Victim::start();
    let scene = Scene::new();
    let me = std::process::id().to_string();
    let run = Zone::new(&scene).run("processes", &["visible_processes", &victim.pid(), &me]);
    run.assert_blocked(
        "visible_processes",
        &["1_visible", "2_visible", "3_visible"],
    );
}

#[test]
fn host_control_kill_of_a_victim_is_detected() {
    let mut victim = Victim::start();
    let scene = Scene::new();
    host_control(&scene, "processes", &["kill_host_pids", &victim.pid()])
        .assert_escaped("kill_host_pids");
    let _ = victim.0.wait();
    assert!(!victim.alive());
}

#[test]
fn host_control_ptrace_attach_is_detected() {
    let scene = Scene::new();
    host_control(&scene, "processes", &["ptrace_attach"]).assert_escaped("ptrace_attach");
}
