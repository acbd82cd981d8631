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
        Victim(Command::new("sleep").arg("60").stdin(Stdio::null()).spawn().expect("start victim"))
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
fn kill_of_every_signallable_process_reaches_nothing_outside() {
    let mut victim = Victim::start();
    let scene = Scene::new();
    let run = Zone::new(&scene).run("processes", &["kill_all"]);
    // kill(-1) may succeed inside the zone's own pid namespace; what matters is who survived.
    run.assert_blocked("kill_all", &["kill_minus_one_returned_"]);
    assert!(run.status.success(), "the supervisor did not report the probe's own exit: {:?}", run.status);
    assert!(victim.alive(), "the host victim process died");
}

#[test]
fn host_processes_are_not_visible() {
    let victim = Victim::start();
    let scene = Scene::new();
    let me = std::process::id().to_string();
    let run = Zone::new(&scene).run("processes", &["visible_processes", &victim.pid(), &me]);
    run.assert_blocked("visible_processes", &["1_visible", "2_visible", "3_visible"]);
}

#[test]
fn host_control_kill_of_a_victim_is_detected() {
    let mut victim = Victim::start();
    let scene = Scene::new();
    host_control(&scene, "processes", &["kill_host_pids", &victim.pid()]).assert_escaped("kill_host_pids");
    let _ = victim.0.wait();
    assert!(!victim.alive());
}

#[test]
fn host_control_ptrace_attach_is_detected() {
    let scene = Scene::new();
    host_control(&scene, "processes", &["ptrace_attach"]).assert_escaped("ptrace_attach");
}
