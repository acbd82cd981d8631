/* privilege.c - privilege: capabilities and no_new_privs in
 * /proc/self/status, executing a setuid-root file, chmod u+s, mknod,
 * /dev/mem and /dev/kmsg, changing uid, raising capabilities. */
#include "probe.h"
#include <fcntl.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

static char status_buf[8192];

static const char *status_field(const char *name)
{
    static char value[64];
    char *p = strstr(status_buf, name);
    if (!p) return NULL;
    p += strlen(name);
    while (*p == ' ' || *p == '\t') p++;
    size_t n = strcspn(p, "\n");
    if (n >= sizeof value) n = sizeof value - 1;
    memcpy(value, p, n);
    value[n] = 0;
    return value;
}

static void load_status(void)
{
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0) probe_error("status", "open_%s", errname(errno));
    ssize_t n = read(fd, status_buf, sizeof status_buf - 1);
    if (n <= 0) probe_error("status", "read_%s", errname(errno));
    status_buf[n] = 0;
    close(fd);
}

int main(int argc, char **argv)
{
    PROBE_MAIN_PROLOGUE(20);
    ATTEMPT("status") {
        load_status();
        static const char *fields[] = {"CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"};
        const char *nnp = status_field("NoNewPrivs:");
        if (!nnp || strcmp(nnp, "1") != 0)
            escaped("status", "NoNewPrivs_%s", nnp ? nnp : "missing");
        for (size_t i = 0; i < 5; i++) {
            const char *v = status_field(fields[i]);
            if (!v || strcmp(v, "0000000000000000") != 0)
                escaped("status", "%s%s", fields[i], v ? v : "missing");
        }
        blocked("status", "no_new_privs_and_no_capabilities");
    }
    ATTEMPT("report_ids") {
        /* run as the target of a setuid exec */
        load_status();
        const char *eff = status_field("CapEff:");
        if (geteuid() != getuid() || getegid() != getgid())
            escaped("setuid_exec", "euid_%d_uid_%d", geteuid(), getuid());
        if (eff && strcmp(eff, "0000000000000000") != 0)
            escaped("setuid_exec", "CapEff_%s", eff);
        blocked("setuid_exec", "ids_unchanged_euid_%d", geteuid());
    }
    ATTEMPT("setuid_exec") {
        /* argv[2]: a setuid-root copy of this probe */
        if (argc < 3) probe_error("setuid_exec", "usage_path");
        struct stat st;
        if (stat(argv[2], &st) != 0)
            blocked("setuid_exec", "stat_%s", errname(errno));
        if (!(st.st_mode & S_ISUID))
            probe_error("setuid_exec", "target_not_setuid");
        execl(argv[2], argv[2], "report_ids", (char *)NULL);
        blocked("setuid_exec", "exec_%s", errname(errno));
    }
    ATTEMPT("chmod_setuid") {
        /* argv[2]: rw dir; make our own file setuid / setgid */
        if (argc < 3) probe_error("chmod_setuid", "usage_rwdir");
        char path[4200];
        snprintf(path, sizeof path, "%s/suid-file", argv[2]);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
        if (fd < 0) probe_error("chmod_setuid", "create_%s", errname(errno));
        /* a real binary (this probe), so that a set-id bit would be usable */
        int self = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
        char chunk[65536];
        ssize_t n;
        while (self >= 0 && (n = read(self, chunk, sizeof chunk)) > 0)
            if (write(fd, chunk, n) != n)
                break;
        if (self >= 0) close(self);
        struct stat st;
        int rc_u = fchmod(fd, 04755), e_u = errno;
        fstat(fd, &st);
        if (st.st_mode & S_ISUID)
            escaped("chmod_setuid", "u+s_mode_%o", st.st_mode & 07777);
        int rc_g = fchmod(fd, 02755), e_g = errno;
        fstat(fd, &st);
        if (st.st_mode & S_ISGID)
            escaped("chmod_setuid", "g+s_mode_%o", st.st_mode & 07777);
        close(fd);
        if (rc_u == 0 && rc_g == 0)
            blocked("chmod_setuid", "bits_silently_dropped");
        blocked("chmod_setuid", "%s", errname(rc_u ? e_u : e_g));
    }
    ATTEMPT("setfcap") {
        /* give a file in the grant file capabilities (cap_setuid+ep), as
         * setcap would: a v2 security.capability xattr */
        if (argc < 3) probe_error("setfcap", "usage_rwdir");
        char path[4200];
        snprintf(path, sizeof path, "%s/fcap-file", argv[2]);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
        if (fd < 0) probe_error("setfcap", "create_%s", errname(errno));
        close(fd);
        struct { unsigned int magic_etc; struct { unsigned int permitted, inheritable; } data[2]; } cap;
        memset(&cap, 0, sizeof cap);
        cap.magic_etc = 0x02000000 | 0x000001; /* VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE */
        cap.data[0].permitted = 1u << 7;      /* CAP_SETUID */
        expect_fail("setfcap", setxattr(path, "security.capability", &cap, sizeof cap, 0));
    }
    ATTEMPT("chown_root") {
        /* give our own file in the grant to root (then u+s would make a
         * root setuid binary on the host) */
        if (argc < 3) probe_error("chown_root", "usage_rwdir");
        char path[4200];
        snprintf(path, sizeof path, "%s/root-owned", argv[2]);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
        if (fd < 0) probe_error("chown_root", "create_%s", errname(errno));
        close(fd);
        expect_fail("chown_root", chown(path, 0, 0));
    }
    ATTEMPT("chmod_device") {
        /* the zone's /dev nodes are the host's inodes: their mode is host state */
        expect_fail("chmod_device", chmod("/dev/null", 0600));
    }
    ATTEMPT("mknod_char") {
        if (argc < 3) probe_error("mknod_char", "usage_rwdir");
        char path[4200];
        snprintf(path, sizeof path, "%s/mem-node", argv[2]);
        expect_fail("mknod_char", mknod(path, S_IFCHR | 0666, makedev(1, 1)));
    }
    ATTEMPT("mknod_block") {
        if (argc < 3) probe_error("mknod_block", "usage_rwdir");
        char path[4200];
        snprintf(path, sizeof path, "%s/disk-node", argv[2]);
        expect_fail("mknod_block", mknod(path, S_IFBLK | 0666, makedev(8, 0)));
    }
    ATTEMPT("dev_nodes") {
        /* device nodes that widen the kernel surface or reach host storage:
         * /dev/userfaultfd bypasses a userfaultfd(2) filter, /dev/kvm, tun,
         * fuse, loop-control, raw disks.  Opened read-only, nothing else. */
        static const char *nodes[] = {"/dev/userfaultfd", "/dev/kvm", "/dev/net/tun", "/dev/fuse",
                                      "/dev/vhost-net", "/dev/vhost-vsock", "/dev/loop-control",
                                      "/dev/mapper/control", "/dev/vda", "/dev/sda", "/dev/nvme0n1",
                                      "/dev/xvda", "/dev/dri/card0"};
        int last = ENOENT;
        for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) {
            int fd = open(nodes[i], O_RDONLY | O_NONBLOCK | O_CLOEXEC);
            if (fd >= 0)
                escaped("dev_nodes", "opened_%s", nodes[i]);
            if (errno != ENOENT) last = errno;
        }
        blocked("dev_nodes", "%s", errname(last));
    }
    ATTEMPT("dev_mem") expect_fail("dev_mem", open("/dev/mem", O_RDONLY | O_CLOEXEC));
    ATTEMPT("dev_port") expect_fail("dev_port", open("/dev/port", O_RDONLY | O_CLOEXEC));
    ATTEMPT("dev_kmsg_read") expect_fail("dev_kmsg_read", open("/dev/kmsg", O_RDONLY | O_CLOEXEC));
    ATTEMPT("dev_kmsg_write") expect_fail("dev_kmsg_write", open("/dev/kmsg", O_WRONLY | O_CLOEXEC));
    ATTEMPT("setresuid_other") {
        uid_t target = getuid() == 4242 ? 4343 : 4242;
        expect_fail("setresuid_other", setresuid(target, target, target));
    }
    ATTEMPT("capset_raise") {
        struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
        struct __user_cap_data_struct d[2];
        memset(d, 0xff, sizeof d);
        expect_fail("capset_raise", syscall(SYS_capset, &h, d));
    }
    probe_error("usage", "unknown_attempt_%s", argv[1]);
}
