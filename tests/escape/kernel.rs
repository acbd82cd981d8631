//! Category 14, kernel surface: bpf, perf_event_open, userfaultfd, keyctl/add_key, kexec, module
//! loading, personality(PER_LINUX32), and the non-native syscall ABIs (int 0x80, x32), which the
//! filter may answer with an errno or by killing the caller (SIGSYS). Host controls show that
//! perf_event_open, userfaultfd, keyctl, personality and int 0x80 work outside a zone.

use crate::common::{host_control, Scene};

refused!(bpf_is_refused: "kernel" "bpf" [] => ["EPERM"]);
refused!(perf_event_open_is_refused: "kernel" "perf_event_open" [] => ["EPERM"]);
refused!(userfaultfd_is_refused: "kernel" "userfaultfd" [] => ["EPERM"]);
refused!(keyctl_is_refused: "kernel" "keyctl" [] => ["EPERM"]);
refused!(add_key_is_refused: "kernel" "add_key" [] => ["EPERM"]);
refused!(request_key_is_refused: "kernel" "request_key" [] => ["EPERM"]);
refused!(kexec_load_is_refused: "kernel" "kexec_load" [] => ["EPERM"]);
refused!(kexec_file_load_is_refused: "kernel" "kexec_file_load" [] => ["EPERM"]);
refused!(init_module_is_refused: "kernel" "init_module" [] => ["EPERM"]);
refused!(finit_module_is_refused: "kernel" "finit_module" [] => ["EPERM"]);
refused!(delete_module_is_refused: "kernel" "delete_module" [] => ["EPERM"]);
refused!(open_by_handle_at_is_refused: "kernel" "open_by_handle_at" [] => ["EPERM"]);
refused!(name_to_handle_at_is_refused: "kernel" "name_to_handle_at" [] => ["EPERM"]);
refused!(syslog_read_is_refused: "kernel" "syslog" [] => ["EPERM"]);
refused!(reboot_is_refused: "kernel" "reboot" [] => ["EPERM"]);
refused!(clock_settime_is_refused: "kernel" "clock_settime" [] => ["EPERM"]);
refused!(acct_is_refused: "kernel" "acct" [] => ["EPERM"]);
refused!(swapoff_is_refused: "kernel" "swapoff" [] => ["EPERM"]);
refused!(iopl_is_refused: "kernel" "iopl" [] => ["EPERM"]);
refused!(personality_linux32_is_refused: "kernel" "personality" [] => ["EPERM"]);
refused!(int80_32bit_syscall_abi_is_refused: "kernel" "int80" [] => ["SIGSYS", "ENOSYS", "EPERM"]);
refused!(x32_syscall_abi_is_refused: "kernel" "x32" [] => ["SIGSYS", "ENOSYS", "EPERM"]);

#[test]
fn host_control_kernel_surface_is_reachable_outside_a_zone() {
    let scene = Scene::new();
    for attempt in [
        "perf_event_open",
        "userfaultfd",
        "keyctl",
        "personality",
        "int80",
    ] {
        host_control(&scene, "kernel", &[attempt]).assert_escaped(attempt);
    }
}
