/* processes.c - reaching other processes: ptrace, process_vm_readv/writev,
 * pidfd_getfd, signals to host processes, and what /proc shows. */
#include "probe.h"
#include <dirent.h>
#include <fcntl.h>
#include <sys/ptrace.h>
#include <sys/shm.h>
#include <sys/uio.h>

static pid_t sleeper(void)
{
    pid_t pid = fork();
    if (pid < 0)
        probe_error("fork", "%s", errname(errno));
    if (pid == 0) {
        alarm(10);
        for (;;)
            pause();
    }
    return pid;
}

static void reap(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static long secret_word = 0x5ec2e7;

int main(int argc, char **argv)
{
    PROBE_MAIN_PROLOGUE(20);
    ATTEMPT("ptrace_attach") {
        pid_t child = sleeper();
        long rc = ptrace(PTRACE_ATTACH, child, 0, 0);
        int e = errno;
        reap(child);
        errno = e;
        expect_fail("ptrace_attach", rc);
    }
    ATTEMPT("ptrace_traceme") {
        expect_fail("ptrace_traceme", ptrace(PTRACE_TRACEME, 0, 0, 0));
    }
    ATTEMPT("process_vm_readv") {
        pid_t child = sleeper();
        long out = 0;
        struct iovec local = {&out, sizeof out}, remote = {&secret_word, sizeof secret_word};
        long rc = syscall(SYS_process_vm_readv, child, &local, 1, &remote, 1, 0);
        int e = errno;
        reap(child);
        errno = e;
        expect_fail("process_vm_readv", rc);
    }
    ATTEMPT("process_vm_writev") {
        pid_t child = sleeper();
        long val = 1;
        struct iovec local = {&val, sizeof val}, remote = {&secret_word, sizeof secret_word};
        long rc = syscall(SYS_process_vm_writev, child, &local, 1, &remote, 1, 0);
        int e = errno;
        reap(child);
        errno = e;
        expect_fail("process_vm_writev", rc);
    }
    ATTEMPT("pidfd_getfd") {
        /* steal stdout from our parent (the zone's init or launcher) */
        int pidfd = syscall(SYS_pidfd_open, getppid() > 0 ? getppid() : 1, 0);
        if (pidfd < 0)
            blocked("pidfd_getfd", "pidfd_open_%s", errname(errno));
        expect_fail("pidfd_getfd", syscall(SYS_pidfd_getfd, pidfd, 1, 0));
    }
    ATTEMPT("kill_host_pids") {
        /* argv[2]: a victim process the harness started (gets SIGKILL);
         * argv[3..]: other host pids (the test, the supervisor), signal 0 */
        if (argc < 3) probe_error("kill_host_pids", "no_pids");
        int last = 0;
        for (int i = 2; i < argc; i++) {
            pid_t pid = (pid_t)atol(argv[i]);
            if (pid <= 1) continue;
            int sig = i == 2 ? SIGKILL : 0;
            /* host pids are far above anything the zone's own pid
             * namespace hands out, so success means a host process */
            if (kill(pid, sig) == 0)
                escaped("kill_host_pids", "pid_%d_signalled", pid);
            last = errno;
        }
        blocked("kill_host_pids", "%s", errname(last));
    }
    ATTEMPT("kill_pid_from_file") {
        /* argv[2]: a file the harness writes the supervisor's host pid into
         * once loopexec runs; SIGKILL it */
        if (argc < 3) probe_error("kill_pid_from_file", "usage_file");
        char buf[32] = {0};
        for (int i = 0; i < 100; i++) {
            int fd = open(argv[2], O_RDONLY | O_CLOEXEC);
            if (fd >= 0) {
                ssize_t n = read(fd, buf, sizeof buf - 1);
                close(fd);
                if (n > 0 && buf[n - 1] == '\n')
                    break;
            }
            usleep(50 * 1000);
        }
        pid_t pid = (pid_t)atol(buf);
        if (pid <= 1) probe_error("kill_pid_from_file", "no_pid");
        if (kill(pid, SIGKILL) == 0)
            escaped("kill_pid_from_file", "killed_%d", pid);
        blocked("kill_pid_from_file", "%s", errname(errno));
    }
    ATTEMPT("kill_all") {
        /* kill(-1): every process we may signal; the harness checks that
         * its victim and the supervisor survived */
        long rc = kill(-1, SIGKILL);
        blocked("kill_all", "kill_minus_one_returned_%ld_%s", rc, rc ? errname(errno) : "ok");
    }
    ATTEMPT("other_mem") {
        /* open /proc/<pid>/mem of every other visible process (the zone init
         * holds capabilities in the zone's user namespace) */
        DIR *d = opendir("/proc");
        if (!d) probe_error("other_mem", "opendir_%s", errname(errno));
        struct dirent *de;
        int last = ENOENT;
        char self[32];
        snprintf(self, sizeof self, "%d", getpid());
        while ((de = readdir(d))) {
            if (de->d_name[0] < '0' || de->d_name[0] > '9' || strcmp(de->d_name, self) == 0)
                continue;
            char path[300];
            snprintf(path, sizeof path, "/proc/%s/mem", de->d_name);
            int fd = open(path, O_RDWR | O_CLOEXEC);
            if (fd < 0)
                fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd >= 0)
                escaped("other_mem", "opened_%s", path);
            last = errno;
        }
        blocked("other_mem", "%s", errname(last));
    }
    ATTEMPT("sysv_shm") {
        /* argv[2]: the key of a System V shared memory segment on the host */
        if (argc < 3) probe_error("sysv_shm", "usage_key");
        int id = shmget((key_t)atol(argv[2]), 0, 0);
        if (id >= 0)
            escaped("sysv_shm", "found_host_segment_%d", id);
        blocked("sysv_shm", "%s", errname(errno));
    }
    ATTEMPT("visible_processes") {
        /* argv[2..]: host pids that must not be visible.  Also counts
         * every visible process: the zone sees only itself (init + us). */
        DIR *d = opendir("/proc");
        if (!d) probe_error("visible_processes", "opendir_%s", errname(errno));
        struct dirent *de;
        int count = 0;
        while ((de = readdir(d))) {
            if (de->d_name[0] < '0' || de->d_name[0] > '9')
                continue;
            count++;
            for (int i = 2; i < argc; i++)
                if (strcmp(de->d_name, argv[i]) == 0)
                    escaped("visible_processes", "host_pid_%s_visible", argv[i]);
        }
        if (count > 3)
            escaped("visible_processes", "%d_processes_visible", count);
        blocked("visible_processes", "%d_visible", count);
    }
    probe_error("usage", "unknown_attempt_%s", argv[1]);
}
