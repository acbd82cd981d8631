/* namespaces.c - nested namespaces: unshare and clone with each namespace
 * flag, clone3, setns through /proc/<pid>/ns. */
#include "probe.h"
#include <dirent.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>

struct flag { const char *name; int flag; };
static const struct flag FLAGS[] = {
    {"user", CLONE_NEWUSER}, {"mount", CLONE_NEWNS},   {"net", CLONE_NEWNET},
    {"pid", CLONE_NEWPID},   {"ipc", CLONE_NEWIPC},    {"uts", CLONE_NEWUTS},
    {"cgroup", CLONE_NEWCGROUP}, {"time", CLONE_NEWTIME},
};

static int flag_of(const char *name)
{
    for (size_t i = 0; i < sizeof FLAGS / sizeof FLAGS[0]; i++)
        if (strcmp(FLAGS[i].name, name) == 0)
            return FLAGS[i].flag;
    probe_error("usage", "unknown_namespace_%s", name);
}

static void clone_with(const char *what, unsigned long flags)
{
    long rc = syscall(SYS_clone, flags | SIGCHLD, 0, 0, 0, 0);
    if (rc == 0)
        _exit(0);
    if (rc > 0) {
        waitpid(rc, NULL, 0);
        escaped(what, "child_%ld", rc);
    }
    blocked(what, "%s", errname(errno));
}

int main(int argc, char **argv)
{
    PROBE_MAIN_PROLOGUE(20);
    ATTEMPT("unshare") {
        if (argc < 3) probe_error("unshare", "missing_namespace");
        expect_fail("unshare", unshare(flag_of(argv[2])));
    }
    ATTEMPT("clone") {
        if (argc < 3) probe_error("clone", "missing_namespace");
        clone_with("clone", flag_of(argv[2]));
    }
    ATTEMPT("clone3") {
        /* with a namespace flag; the flags live in memory seccomp cannot read */
        struct clone_args args;
        memset(&args, 0, sizeof args);
        args.flags = CLONE_NEWUSER | CLONE_NEWNS;
        args.exit_signal = SIGCHLD;
        long rc = syscall(SYS_clone3, &args, sizeof args);
        if (rc == 0)
            _exit(0);
        if (rc > 0) {
            waitpid(rc, NULL, 0);
            escaped("clone3", "child_%ld", rc);
        }
        blocked("clone3", "%s", errname(errno));
    }
    ATTEMPT("plain_fork_works") {
        /* sanity: libc's fork (clone without namespace flags) still works */
        pid_t pid = fork();
        if (pid == 0)
            _exit(7);
        if (pid < 0)
            probe_error("plain_fork_works", "%s", errname(errno));
        int st;
        waitpid(pid, &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 7)
            ok("plain_fork_works", "fork_ok");
        probe_error("plain_fork_works", "status_%d", st);
    }
    ATTEMPT("sethostname") {
        /* allowed or not, it must only touch the zone's own UTS namespace:
         * the harness compares the host's hostname before and after */
        static const char name[] = "escaped-hostname";
        if (sethostname(name, sizeof name - 1) == 0)
            ok("sethostname", "changed_in_own_uts_namespace");
        blocked("sethostname", "%s", errname(errno));
    }
    ATTEMPT("setns") {
        /* every namespace of every visible process, including our own */
        static const char *kinds[] = {"user", "mnt", "net", "pid", "ipc", "uts", "cgroup", "time"};
        DIR *d = opendir("/proc");
        if (!d) probe_error("setns", "opendir_proc_%s", errname(errno));
        struct dirent *de;
        int tried = 0, last_errno = 0;
        while ((de = readdir(d))) {
            if (de->d_name[0] < '0' || de->d_name[0] > '9')
                continue;
            for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
                char path[300];
                snprintf(path, sizeof path, "/proc/%s/ns/%s", de->d_name, kinds[k]);
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                    continue;
                tried++;
                if (setns(fd, 0) == 0)
                    escaped("setns", "%s", path);
                last_errno = errno;
                close(fd);
            }
        }
        if (tried == 0)
            probe_error("setns", "no_ns_file_openable");
        blocked("setns", "%s", errname(last_errno));
    }
    probe_error("usage", "unknown_attempt_%s", argv[1]);
}
