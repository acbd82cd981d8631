/* procfs.c - /proc and /sys: other processes' environ and root, writing
 * /proc/<pid>/exe, sysrq-trigger, kcore, host paths in mountinfo, writes
 * under /sys/fs/cgroup, host sysctls.  Nothing is ever written to a
 * dangerous file: opening it for writing already counts as an escape. */
#include "probe.h"
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

static int read_all(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t n = 0;
    ssize_t r;
    while (n < cap - 1 && (r = read(fd, buf + n, cap - 1 - n)) > 0)
        n += r;
    close(fd);
    buf[n] = 0;
    return (int)n;
}

static int memmem_str(const char *buf, int n, const char *needle)
{
    return memmem(buf, n, needle, strlen(needle)) != NULL;
}

static void open_for_write_must_fail(const char *what, const char *path)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd >= 0)
        escaped(what, "opened_%s_for_writing", path);
    blocked(what, "%s", errname(errno));
}

int main(int argc, char **argv)
{
    PROBE_MAIN_PROLOGUE(20);
    static char buf[1 << 20];
    ATTEMPT("other_environ") {
        /* argv[2]: a variable name the harness put in loopexec's environment */
        if (argc < 3) probe_error("other_environ", "missing_name");
        DIR *d = opendir("/proc");
        if (!d) probe_error("other_environ", "opendir_%s", errname(errno));
        struct dirent *de;
        int readable = 0;
        while ((de = readdir(d))) {
            if (de->d_name[0] < '0' || de->d_name[0] > '9')
                continue;
            char path[300];
            snprintf(path, sizeof path, "/proc/%s/environ", de->d_name);
            int n = read_all(path, buf, sizeof buf);
            if (n < 0)
                continue;
            readable++;
            if (memmem_str(buf, n, argv[2]))
                escaped("other_environ", "%s_in_%s", argv[2], path);
        }
        blocked("other_environ", "absent_in_%d_readable_environs", readable);
    }
    ATTEMPT("other_root") {
        /* argv[2]: an absolute host path outside every grant */
        if (argc < 3) probe_error("other_root", "missing_path");
        DIR *d = opendir("/proc");
        if (!d) probe_error("other_root", "opendir_%s", errname(errno));
        struct dirent *de;
        int last = ENOENT;
        while ((de = readdir(d))) {
            if (de->d_name[0] < '0' || de->d_name[0] > '9')
                continue;
            char path[4200];
            snprintf(path, sizeof path, "/proc/%s/root%s", de->d_name, argv[2]);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd >= 0)
                escaped("other_root", "opened_%s", path);
            last = errno;
        }
        blocked("other_root", "%s", errname(last));
    }
    ATTEMPT("overwrite_exe") {
        /* every visible process's executable (the zone init is the loopexec
         * binary itself: runc's CVE-2019-5736); O_WRONLY without O_TRUNC,
         * and nothing is written if it opens */
        DIR *d = opendir("/proc");
        if (!d) probe_error("overwrite_exe", "opendir_%s", errname(errno));
        struct dirent *de;
        int last = ENOENT, tried = 0;
        while ((de = readdir(d))) {
            if (de->d_name[0] < '0' || de->d_name[0] > '9')
                continue;
            char path[300];
            snprintf(path, sizeof path, "/proc/%s/exe", de->d_name);
            tried++;
            int fd = open(path, O_WRONLY | O_CLOEXEC);
            if (fd >= 0)
                escaped("overwrite_exe", "opened_%s_for_writing", path);
            last = errno;
        }
        if (!tried) probe_error("overwrite_exe", "no_process_visible");
        blocked("overwrite_exe", "%s", errname(last));
    }
    ATTEMPT("other_fds") {
        /* open every descriptor of every other visible process through
         * /proc/<pid>/fd/<n>: the zone init holds its control socket to the
         * supervisor, which must stay out of reach */
        DIR *d = opendir("/proc");
        if (!d) probe_error("other_fds", "opendir_%s", errname(errno));
        struct dirent *de;
        int last = ENOENT, others = 0;
        char self[32];
        snprintf(self, sizeof self, "%d", getpid());
        while ((de = readdir(d))) {
            if (de->d_name[0] < '0' || de->d_name[0] > '9' || strcmp(de->d_name, self) == 0)
                continue;
            others++;
            char dir[300];
            snprintf(dir, sizeof dir, "/proc/%s/fd", de->d_name);
            DIR *fds = opendir(dir);
            if (!fds) {
                last = errno;
                continue;
            }
            struct dirent *fe;
            while ((fe = readdir(fds))) {
                if (fe->d_name[0] < '0' || fe->d_name[0] > '9')
                    continue;
                char path[600];
                snprintf(path, sizeof path, "%s/%s", dir, fe->d_name);
                int fd = open(path, O_RDWR | O_CLOEXEC);
                if (fd < 0)
                    fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd >= 0)
                    escaped("other_fds", "opened_%s", path);
                last = errno;
            }
            closedir(fds);
        }
        if (!others) probe_error("other_fds", "no_other_process_visible");
        blocked("other_fds", "%s", errname(last));
    }
    ATTEMPT("sysrq_trigger") open_for_write_must_fail("sysrq_trigger", "/proc/sysrq-trigger");
    ATTEMPT("core_pattern") open_for_write_must_fail("core_pattern", "/proc/sys/kernel/core_pattern");
    ATTEMPT("kcore") {
        int fd = open("/proc/kcore", O_RDONLY | O_CLOEXEC);
        expect_fail("kcore", fd);
    }
    ATTEMPT("mountinfo_host_paths") {
        /* argv[2..]: host paths that are not granted and must not show */
        int n = read_all("/proc/self/mountinfo", buf, sizeof buf);
        if (n < 0) blocked("mountinfo_host_paths", "unreadable_%s", errname(errno));
        for (int i = 2; i < argc; i++)
            if (memmem_str(buf, n, argv[i]))
                escaped("mountinfo_host_paths", "mentions_%s", argv[i]);
        blocked("mountinfo_host_paths", "none_of_%d_paths_shown", argc - 2);
    }
    ATTEMPT("cgroup_write") {
        /* try to create a cgroup and to join/append to cgroup.procs files
         * anywhere under /sys/fs/cgroup (depth <= 2) */
        const char *roots[] = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/pids",
                               "/sys/fs/cgroup/memory", "/sys/fs/cgroup/cpu"};
        int last = ENOENT;
        for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++) {
            char path[256];
            snprintf(path, sizeof path, "%s/loopexec-escape-probe", roots[i]);
            if (mkdir(path, 0755) == 0) {
                rmdir(path);
                escaped("cgroup_write", "mkdir_%s", path);
            }
            if (errno != ENOENT) last = errno;
            snprintf(path, sizeof path, "%s/cgroup.procs", roots[i]);
            int fd = open(path, O_WRONLY | O_CLOEXEC);
            if (fd >= 0)
                escaped("cgroup_write", "opened_%s_for_writing", path);
            if (errno != ENOENT) last = errno;
        }
        blocked("cgroup_write", "%s", errname(last));
    }
    ATTEMPT("proc_knobs") {
        /* knobs that run host code as root or change the whole host */
        const char *paths[] = {"/proc/sys/kernel/modprobe", "/proc/sys/fs/binfmt_misc/register",
                               "/proc/sys/kernel/core_pattern", "/proc/sys/kernel/panic",
                               "/proc/sys/kernel/sysrq", "/proc/sys/vm/drop_caches",
                               "/proc/sys/kernel/hostname", "/proc/sys/net/ipv4/ip_forward",
                               "/proc/self/setgroups", "/proc/self/uid_map"};
        int last = ENOENT;
        for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
            int fd = open(paths[i], O_WRONLY | O_CLOEXEC);
            if (fd >= 0)
                escaped("proc_knobs", "opened_%s_for_writing", paths[i]);
            if (errno != ENOENT) last = errno;
        }
        blocked("proc_knobs", "%s", errname(last));
    }
    ATTEMPT("sys_write") {
        /* a few well-known writable-as-root knobs under /sys */
        const char *paths[] = {"/sys/kernel/uevent_helper", "/sys/power/state",
                               "/sys/kernel/mm/transparent_hugepage/enabled"};
        int last = ENOENT;
        for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
            int fd = open(paths[i], O_WRONLY | O_CLOEXEC);
            if (fd >= 0)
                escaped("sys_write", "opened_%s_for_writing", paths[i]);
            if (errno != ENOENT) last = errno;
        }
        blocked("sys_write", "%s", errname(last));
    }
    probe_error("usage", "unknown_attempt_%s", argv[1]);
}
