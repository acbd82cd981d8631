/* kernel.c - kernel attack surface: bpf, perf_event_open, userfaultfd,
 * keyctl / add_key, kexec, module loading, personality, the 32-bit
 * int 0x80 and x32 syscall ABIs.  Attempts that a seccomp filter may
 * answer with a kill run in a child (in_child). */
#include "probe.h"
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <sys/personality.h>
#include <time.h>

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#define X32_BIT 0x40000000

static void do_bpf(void *a)
{
    union bpf_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.map_type = BPF_MAP_TYPE_ARRAY;
    attr.key_size = 4;
    attr.value_size = 4;
    attr.max_entries = 1;
    expect_fail("bpf", syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr));
}

static void do_perf(void *a)
{
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.size = sizeof attr;
    attr.config = PERF_COUNT_SW_CPU_CLOCK;
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    expect_fail("perf_event_open", syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0));
}

static void do_uffd(void *a)
{
    expect_fail("userfaultfd", syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY));
}

static void do_keyctl(void *a)
{
    expect_fail("keyctl", syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 1));
}

static void do_add_key(void *a)
{
    expect_fail("add_key", syscall(SYS_add_key, "user", "loopexec-escape", "x", 1, KEY_SPEC_PROCESS_KEYRING));
}

static void do_request_key(void *a)
{
    expect_fail("request_key", syscall(SYS_request_key, "user", "loopexec-escape", NULL, 0));
}

static void do_kexec_load(void *a)
{
    expect_fail("kexec_load", syscall(SYS_kexec_load, 0, 0, NULL, 0));
}

static void do_kexec_file_load(void *a)
{
    expect_fail("kexec_file_load", syscall(SYS_kexec_file_load, -1, -1, 0, "", 0));
}

static void do_init_module(void *a)
{
    static char image[64];
    expect_fail("init_module", syscall(SYS_init_module, image, sizeof image, ""));
}

static void do_finit_module(void *a)
{
    expect_fail("finit_module", syscall(SYS_finit_module, 0, "", 0));
}

static void do_delete_module(void *a)
{
    expect_fail("delete_module", syscall(SYS_delete_module, "loopexec_escape_none", O_NONBLOCK));
}

static void do_personality(void *a)
{
    long rc = syscall(SYS_personality, PER_LINUX32);
    if (rc < 0)
        blocked("personality", "%s", errname(errno));
    long now = syscall(SYS_personality, 0xffffffff);
    if (now == PER_LINUX32)
        escaped("personality", "now_PER_LINUX32");
    blocked("personality", "unchanged_%lx", now);
}

static void do_int80(void *a)
{
    /* 32-bit getpid (nr 20) through the int 0x80 gate */
    long ret;
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory", "rcx", "r11");
    if (ret < 0)
        blocked("int80", "%s", errname((int)-ret));
    escaped("int80", "getpid_returned_%ld", ret);
}

static void do_x32(void *a)
{
    long rc = syscall(X32_BIT | SYS_getpid);
    expect_fail("x32", rc);
}

static void do_open_by_handle_at(void *a)
{
    struct { unsigned int bytes; int type; unsigned char h[128]; } fh;
    memset(&fh, 0, sizeof fh);
    fh.bytes = 8;
    fh.type = 1; /* FILEID_INO32_GEN: a guessed inode of the host filesystem */
    fh.h[0] = 2;
    expect_fail("open_by_handle_at", syscall(SYS_open_by_handle_at, AT_FDCWD, &fh, O_RDONLY));
}

static void do_name_to_handle_at(void *a)
{
    struct { unsigned int bytes; int type; unsigned char h[128]; } fh;
    int mount_id;
    memset(&fh, 0, sizeof fh);
    fh.bytes = 128;
    expect_fail("name_to_handle_at", syscall(SYS_name_to_handle_at, AT_FDCWD, "/", &fh, &mount_id, 0));
}

static void do_syslog(void *a)
{
    char buf[64];
    expect_fail("syslog", syscall(SYS_syslog, 3 /* SYSLOG_ACTION_READ_ALL */, buf, sizeof buf));
}

static void do_reboot(void *a)
{
    /* wrong second magic: even an unfiltered, privileged caller only gets EINVAL */
    expect_fail("reboot", syscall(SYS_reboot, 0xfee1dead, 0x12345678, 0x4321fedc, NULL));
}

static void do_clock_settime(void *a)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    expect_fail("clock_settime", syscall(SYS_clock_settime, CLOCK_REALTIME, &now));
}

static void do_acct(void *a)
{
    expect_fail("acct", syscall(SYS_acct, NULL));
}

static void do_swapoff(void *a)
{
    expect_fail("swapoff", syscall(SYS_swapoff, "/loopexec-escape-no-such-swap"));
}

static void do_iopl(void *a)
{
    expect_fail("iopl", syscall(SYS_iopl, 3));
}

struct entry { const char *name; void (*fn)(void *); };
static const struct entry ENTRIES[] = {
    {"bpf", do_bpf}, {"perf_event_open", do_perf}, {"userfaultfd", do_uffd},
    {"keyctl", do_keyctl}, {"add_key", do_add_key}, {"request_key", do_request_key}, {"kexec_load", do_kexec_load},
    {"kexec_file_load", do_kexec_file_load}, {"init_module", do_init_module},
    {"finit_module", do_finit_module}, {"delete_module", do_delete_module},
    {"personality", do_personality}, {"open_by_handle_at", do_open_by_handle_at},
    {"name_to_handle_at", do_name_to_handle_at}, {"syslog", do_syslog}, {"reboot", do_reboot},
    {"clock_settime", do_clock_settime}, {"acct", do_acct}, {"swapoff", do_swapoff}, {"iopl", do_iopl}, {"int80", do_int80}, {"x32", do_x32},
};

int main(int argc, char **argv)
{
    PROBE_MAIN_PROLOGUE(20);
    for (size_t i = 0; i < sizeof ENTRIES / sizeof ENTRIES[0]; i++)
        ATTEMPT(ENTRIES[i].name) in_child(ENTRIES[i].name, ENTRIES[i].fn, NULL);
    probe_error("usage", "unknown_attempt_%s", argv[1]);
}
