//! The zone's seccomp filter: a deny list over the native syscall ABI, built with seccompiler.
//!
//! Three small BPF programs are installed, last one first in precedence order of the kernel:
//! 1. `foreign_abi`: kills the process on any x32 syscall number (the arch check seccompiler emits
//!    already kills every non-native audit arch, e.g. i386 via `int 0x80`).
//! 2. `deny`: EPERM for the built-in deny list, argument-filtered calls (clone with namespace
//!    flags, TIOCSTI/TIOCLINUX compared on the low 32 bits, socket families other than
//!    unix/inet/inet6, IPPROTO_MPTCP, personality changes) and the policy's extra names.
//!    Set-id bits: chmod/fchmod/fchmodat/fchmodat2 and file creation (open, openat, creat, mknod,
//!    mknodat) with S_ISUID or S_ISGID in `mode` are refused.
//! 3. `clone3` and `openat2`: ENOSYS, so that libcs fall back to clone(2) and openat(2), whose
//!    arguments the filter can inspect.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op,
    SeccompCondition as Cond, SeccompFilter, SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

/// Syscalls denied outright (EPERM), by name, with the reason reviewers need.
pub const DENIED: &[(&str, &str)] = &[
    ("ptrace", "reach other processes"),
    ("process_vm_readv", "read another process's memory"),
    ("process_vm_writev", "write another process's memory"),
    ("pidfd_getfd", "steal another process's descriptors"),
    (
        "io_uring_setup",
        "io_uring bypasses seccomp argument checks",
    ),
    ("io_uring_enter", "io_uring"),
    ("io_uring_register", "io_uring"),
    ("bpf", "kernel attack surface"),
    ("perf_event_open", "kernel attack surface, side channels"),
    ("userfaultfd", "race amplification in kernel exploits"),
    ("keyctl", "kernel keyrings are not namespaced"),
    ("add_key", "kernel keyrings"),
    ("request_key", "kernel keyrings"),
    ("kexec_load", "replace the kernel"),
    ("kexec_file_load", "replace the kernel"),
    ("init_module", "load kernel code"),
    ("finit_module", "load kernel code"),
    ("delete_module", "unload kernel code"),
    ("mount", "mount table changes"),
    ("umount2", "unmount the zone's covers"),
    ("pivot_root", "change the zone root"),
    ("chroot", "chroot escapes"),
    ("open_tree", "new mount API"),
    ("move_mount", "new mount API"),
    ("fsopen", "new mount API"),
    ("fsmount", "new mount API"),
    ("fsconfig", "new mount API"),
    ("fspick", "new mount API"),
    ("mount_setattr", "new mount API"),
    ("unshare", "nested namespaces"),
    ("setns", "join other namespaces"),
    ("open_by_handle_at", "open files by handle, bypassing paths"),
    ("name_to_handle_at", "file handles"),
    ("acct", "process accounting"),
    ("swapon", "swap"),
    ("swapoff", "swap"),
    ("reboot", "reboot"),
    ("syslog", "kernel log"),
    ("quotactl", "quotas"),
    ("lookup_dcookie", "kernel surface"),
    ("vhangup", "terminal hangup"),
    ("fanotify_init", "filesystem-wide monitoring"),
    ("settimeofday", "clock"),
    ("clock_settime", "clock"),
    ("clock_adjtime", "clock"),
    ("adjtimex", "clock"),
    ("iopl", "I/O ports"),
    ("ioperm", "I/O ports"),
];

/// Every syscall name the policy may name in `syscalls.deny`, with its number on this arch
/// (names that do not exist on this arch are unknown; built-in ones are then skipped).
pub fn syscall_number(name: &str) -> Option<i64> {
    TABLE
        .iter()
        .chain(ARCH_TABLE)
        .find(|(n, _)| *n == name)
        .map(|(_, nr)| *nr)
}

/// Syscalls that only exist on x86_64.
#[cfg(target_arch = "x86_64")]
const ARCH_TABLE: &[(&str, i64)] = &[
    ("iopl", libc::SYS_iopl),
    ("ioperm", libc::SYS_ioperm),
    ("mknod", libc::SYS_mknod),
    ("chmod", libc::SYS_chmod),
    ("open", libc::SYS_open),
    ("creat", libc::SYS_creat),
    ("link", libc::SYS_link),
    ("symlink", libc::SYS_symlink),
];
#[cfg(not(target_arch = "x86_64"))]
const ARCH_TABLE: &[(&str, i64)] = &[];

/// Names the policy may use, with their numbers on this arch (libc's SYS_* constants).
const TABLE: &[(&str, i64)] = &[
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("open_tree", libc::SYS_open_tree),
    ("move_mount", libc::SYS_move_mount),
    ("fsopen", libc::SYS_fsopen),
    ("fsmount", libc::SYS_fsmount),
    ("fsconfig", libc::SYS_fsconfig),
    ("fspick", libc::SYS_fspick),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    ("acct", libc::SYS_acct),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("reboot", libc::SYS_reboot),
    ("syslog", libc::SYS_syslog),
    ("quotactl", libc::SYS_quotactl),
    ("lookup_dcookie", libc::SYS_lookup_dcookie),
    ("vhangup", libc::SYS_vhangup),
    ("fanotify_init", libc::SYS_fanotify_init),
    ("settimeofday", libc::SYS_settimeofday),
    ("clock_settime", libc::SYS_clock_settime),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("adjtimex", libc::SYS_adjtimex),
    ("personality", libc::SYS_personality),
    ("clone", libc::SYS_clone),
    ("clone3", libc::SYS_clone3),
    ("ioctl", libc::SYS_ioctl),
    ("socket", libc::SYS_socket),
    ("socketpair", libc::SYS_socketpair),
    ("memfd_create", libc::SYS_memfd_create),
    ("inotify_init1", libc::SYS_inotify_init1),
    ("mknodat", libc::SYS_mknodat),
    ("fchmod", libc::SYS_fchmod),
    ("fchmodat", libc::SYS_fchmodat),
    // fchmodat2 (Linux 6.6) has the same number on every architecture.
    ("fchmodat2", 452),
    ("openat", libc::SYS_openat),
    ("linkat", libc::SYS_linkat),
    ("symlinkat", libc::SYS_symlinkat),
    ("sysinfo", libc::SYS_sysinfo),
    ("uname", libc::SYS_uname),
    ("sethostname", libc::SYS_sethostname),
    ("setdomainname", libc::SYS_setdomainname),
    ("vmsplice", libc::SYS_vmsplice),
    ("mbind", libc::SYS_mbind),
    ("migrate_pages", libc::SYS_migrate_pages),
    ("move_pages", libc::SYS_move_pages),
    ("kcmp", libc::SYS_kcmp),
    ("pidfd_open", libc::SYS_pidfd_open),
    ("pidfd_send_signal", libc::SYS_pidfd_send_signal),
    ("seccomp", libc::SYS_seccomp),
    ("prctl", libc::SYS_prctl),
    ("mprotect", libc::SYS_mprotect),
    ("execveat", libc::SYS_execveat),
];

const NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
];
#[allow(clippy::unnecessary_cast)] // libc's `Ioctl` is u64 on glibc, c_int on musl
const TIOCSTI: u64 = libc::TIOCSTI as u64;
const S_ISUID: u64 = libc::S_ISUID as u64;
const S_ISGID: u64 = libc::S_ISGID as u64;
#[allow(clippy::unnecessary_cast)]
const TIOCLINUX: u64 = libc::TIOCLINUX as u64;
const IPPROTO_MPTCP: u64 = libc::IPPROTO_MPTCP as u64;
const PERSONALITY_QUERY: u64 = 0xffff_ffff;

/// Errors building the filter.
pub type FilterError = seccompiler::BackendError;

fn rule(conds: Vec<Cond>) -> Result<SeccompRule, FilterError> {
    SeccompRule::new(conds)
}
fn cond(arg: u8, len: Len, op: Op, value: u64) -> Result<Cond, FilterError> {
    Cond::new(arg, len, op, value)
}

/// The three BPF programs, in installation order.
pub fn build(extra_deny: &[String]) -> Result<Vec<BpfProgram>, FilterError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (name, _) in DENIED {
        if let Some(nr) = syscall_number(name) {
            rules.insert(nr, Vec::new());
        }
    }
    for name in extra_deny {
        if let Some(nr) = syscall_number(name) {
            rules.insert(nr, Vec::new());
        }
    }
    // clone(flags, ...): any namespace flag.
    let mut clone_rules = Vec::new();
    for flag in NAMESPACE_FLAGS {
        clone_rules.push(rule(vec![cond(
            0,
            Len::Qword,
            Op::MaskedEq(*flag),
            *flag,
        )?])?);
    }
    rules.entry(libc::SYS_clone).or_insert(clone_rules);
    // ioctl(fd, cmd): the kernel only looks at the low 32 bits of cmd, so compare only those.
    rules.entry(libc::SYS_ioctl).or_insert(vec![
        rule(vec![cond(1, Len::Dword, Op::Eq, TIOCSTI)?])?,
        rule(vec![cond(1, Len::Dword, Op::Eq, TIOCLINUX)?])?,
    ]);
    // socket(domain, type, protocol): unix, inet, inet6 only; no MPTCP.
    let families = |arg: u8| -> Result<Vec<SeccompRule>, FilterError> {
        Ok(vec![
            rule(vec![
                cond(arg, Len::Dword, Op::Ne, libc::AF_UNIX as u64)?,
                cond(arg, Len::Dword, Op::Ne, libc::AF_INET as u64)?,
                cond(arg, Len::Dword, Op::Ne, libc::AF_INET6 as u64)?,
            ])?,
            rule(vec![cond(2, Len::Dword, Op::Eq, IPPROTO_MPTCP)?])?,
        ])
    };
    rules.entry(libc::SYS_socket).or_insert(families(0)?);
    rules.entry(libc::SYS_socketpair).or_insert(families(0)?);
    // personality(persona): only the query form.
    rules.entry(libc::SYS_personality).or_insert(vec![rule(vec![
        cond(0, Len::Dword, Op::Ne, PERSONALITY_QUERY)?,
        cond(0, Len::Dword, Op::Ne, 0)?,
    ])?]);
    // Set-user-ID / set-group-ID bits on files: a file the zone marks set-id in a writable grant
    // keeps the bit on the host (where nosuid does not apply). chmod-family calls and file
    // creation with either bit in `mode` are refused; openat2 (mode in memory) answers ENOSYS below.
    let set_id = |arg: u8| -> Result<Vec<SeccompRule>, FilterError> {
        Ok(vec![
            rule(vec![cond(arg, Len::Dword, Op::MaskedEq(S_ISUID), S_ISUID)?])?,
            rule(vec![cond(arg, Len::Dword, Op::MaskedEq(S_ISGID), S_ISGID)?])?,
        ])
    };
    for (name, mode_arg) in [
        ("chmod", 1),
        ("fchmod", 1),
        ("creat", 1),
        ("fchmodat", 2),
        ("fchmodat2", 2),
        ("open", 2),
        ("mknod", 1),
        ("openat", 3),
        ("mknodat", 2),
    ] {
        if let Some(nr) = syscall_number(name) {
            rules.entry(nr).or_insert(set_id(mode_arg)?);
        }
    }
    let deny = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )?;

    let mut c3 = BTreeMap::new();
    c3.insert(libc::SYS_clone3, Vec::new());
    // openat2 carries its mode in memory the filter cannot read: ENOSYS, so callers fall back to openat.
    c3.insert(libc::SYS_openat2, Vec::new());
    let clone3 = SeccompFilter::new(
        c3,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        ARCH,
    )?;

    Ok(vec![foreign_abi(), deny.try_into()?, clone3.try_into()?])
}

/// Kill the process for any syscall number with the x32 bit set (same audit arch as x86_64).
fn foreign_abi() -> BpfProgram {
    use seccompiler::sock_filter;
    const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const BPF_JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    // __X32_SYSCALL_BIT (asm/unistd.h), which libc does not name.
    const X32_BIT: u32 = 0x4000_0000;
    const RET_KILL_PROCESS: u32 = libc::SECCOMP_RET_KILL_PROCESS;
    const RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
    vec![
        sock_filter {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        }, // seccomp_data.nr
        sock_filter {
            code: BPF_JGE_K,
            jt: 0,
            jf: 1,
            k: X32_BIT,
        },
        sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: RET_KILL_PROCESS,
        },
        sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: RET_ALLOW,
        },
    ]
}

/// Install the programs on the calling thread (no_new_privs must already be set).
pub fn install(programs: &[BpfProgram]) -> Result<(), seccompiler::Error> {
    for p in programs {
        seccompiler::apply_filter(p)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn every_denied_name_has_a_number() {
        for (name, _) in DENIED {
            assert!(syscall_number(name).is_some(), "{name}");
        }
    }

    #[test]
    fn filters_compile_with_extra_denials() {
        let progs = build(&["memfd_create".to_string()]).unwrap();
        assert_eq!(progs.len(), 3);
        assert!(progs.iter().all(|p| !p.is_empty()));
    }
}
