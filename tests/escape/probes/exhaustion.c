/* exhaustion.c - resource abuse, each attempt bounded by the probe itself:
 * a fork bomb that stops at a cap, a memory bomb that stops at a cap, fd
 * exhaustion, filling /tmp up to a cap, a CPU spin, an output flood.
 * Reaching the cap means the sandbox did not bound the resource: ESCAPED. */
#include "probe.h"
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>

int main(int argc, char **argv)
{
    PROBE_MAIN_PROLOGUE(60);
    ATTEMPT("fork_bomb") {
        /* argv[2]: cap on live processes */
        long cap = argc > 2 ? atol(argv[2]) : 3000;
        static pid_t kids[100000];
        if (cap > 100000) cap = 100000;
        long n = 0;
        int e = 0;
        for (; n < cap; n++) {
            pid_t pid = fork();
            if (pid == 0) {
                alarm(30);
                for (;;)
                    pause();
            }
            if (pid < 0) {
                e = errno;
                break;
            }
            kids[n] = pid;
        }
        for (long i = 0; i < n; i++)
            kill(kids[i], SIGKILL);
        for (long i = 0; i < n; i++)
            waitpid(kids[i], NULL, 0);
        if (n >= cap)
            escaped("fork_bomb", "reached_cap_%ld_processes", n);
        blocked("fork_bomb", "%s_after_%ld", errname(e), n);
    }
    ATTEMPT("memory_bomb") {
        /* argv[2]: cap in MiB; touched in 64 MiB chunks */
        long cap_mib = argc > 2 ? atol(argv[2]) : 4096;
        struct rlimit as = {(rlim_t)(cap_mib + 256) << 20, (rlim_t)(cap_mib + 256) << 20};
        setrlimit(RLIMIT_AS, &as);
        long got = 0;
        while (got < cap_mib) {
            char *p = mmap(NULL, 64 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED)
                blocked("memory_bomb", "%s_after_%ld_MiB", errname(errno), got);
            for (long i = 0; i < (64 << 20); i += 4096)
                p[i] = 1;
            got += 64;
        }
        escaped("memory_bomb", "touched_%ld_MiB", got);
    }
    ATTEMPT("fd_exhaustion") {
        /* raise the soft limit to the hard one, then try to go above it */
        struct rlimit lim;
        getrlimit(RLIMIT_NOFILE, &lim);
        rlim_t hard = lim.rlim_max;
        struct rlimit raise = {hard == RLIM_INFINITY ? 1 << 20 : hard * 2,
                               hard == RLIM_INFINITY ? 1 << 20 : hard * 2};
        if (hard != RLIM_INFINITY && setrlimit(RLIMIT_NOFILE, &raise) == 0)
            escaped("fd_exhaustion", "raised_hard_nofile_to_%lu", (unsigned long)raise.rlim_max);
        lim.rlim_cur = lim.rlim_max;
        setrlimit(RLIMIT_NOFILE, &lim);
        long cap = argc > 2 ? atol(argv[2]) : 1 << 20;
        long n = 0;
        int fd;
        while (n < cap && (fd = open("/dev/null", O_RDONLY)) >= 0)
            n++;
        if (n >= cap)
            escaped("fd_exhaustion", "opened_%ld_fds_hard_limit_%lu", n, (unsigned long)hard);
        blocked("fd_exhaustion", "%s_after_%ld", errname(errno), n);
    }
    ATTEMPT("fill_tmp") {
        /* argv[2]: cap in MiB; argv[3]: file to fill (default /tmp/...) */
        long cap_mib = argc > 2 ? atol(argv[2]) : 2048;
        const char *path = argc > 3 ? argv[3] : "/tmp/loopexec-escape-fill";
        signal(SIGXFSZ, SIG_IGN);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
            blocked("fill_tmp", "open_%s", errname(errno));
        static char chunk[1 << 20];
        memset(chunk, 'x', sizeof chunk);
        long mib = 0;
        while (mib < cap_mib) {
            ssize_t w = write(fd, chunk, sizeof chunk);
            if (w < 0) {
                int e = errno;
                unlink(path);
                blocked("fill_tmp", "%s_after_%ld_MiB", errname(e), mib);
            }
            if (w < (ssize_t)sizeof chunk) {
                unlink(path);
                blocked("fill_tmp", "short_write_after_%ld_MiB", mib);
            }
            mib++;
        }
        unlink(path);
        escaped("fill_tmp", "wrote_%ld_MiB", mib);
    }
    ATTEMPT("realtime") {
        /* a SCHED_FIFO spinner would starve the host regardless of CPU quota */
        struct sched_param sp = {.sched_priority = 1};
        expect_fail("realtime", sched_setscheduler(0, SCHED_FIFO, &sp));
    }
    ATTEMPT("nice_raise") {
        expect_fail("nice_raise", setpriority(PRIO_PROCESS, 0, -20));
    }
    ATTEMPT("oom_immune") {
        /* -1000 makes a process immune to the OOM killer */
        int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
        if (fd < 0)
            blocked("oom_immune", "%s", errname(errno));
        if (write(fd, "-1000", 5) == 5)
            escaped("oom_immune", "oom_score_adj_-1000");
        blocked("oom_immune", "%s", errname(errno));
    }
    ATTEMPT("raise_rlimits") {
        /* no hard limit set by the zone may be raised */
        static const struct { int res; const char *name; } R[] = {
            {RLIMIT_NOFILE, "NOFILE"}, {RLIMIT_FSIZE, "FSIZE"}, {RLIMIT_CORE, "CORE"},
            {RLIMIT_NPROC, "NPROC"}, {RLIMIT_AS, "AS"}, {RLIMIT_CPU, "CPU"},
            {RLIMIT_MEMLOCK, "MEMLOCK"}, {RLIMIT_RTPRIO, "RTPRIO"}, {RLIMIT_NICE, "NICE"}};
        int tried = 0, last = 0;
        for (size_t i = 0; i < sizeof R / sizeof R[0]; i++) {
            struct rlimit lim;
            if (getrlimit(R[i].res, &lim) != 0 || lim.rlim_max == RLIM_INFINITY)
                continue;
            tried++;
            struct rlimit up = {lim.rlim_max + 1, lim.rlim_max + 1};
            if (setrlimit(R[i].res, &up) == 0)
                escaped("raise_rlimits", "raised_%s_to_%lu", R[i].name, (unsigned long)up.rlim_max);
            last = errno;
        }
        if (!tried) probe_error("raise_rlimits", "no_finite_hard_limit");
        blocked("raise_rlimits", "%s", errname(last));
    }
    ATTEMPT("core_limit") {
        /* no core dumps: the hard limit is 0 and cannot be raised */
        struct rlimit lim;
        getrlimit(RLIMIT_CORE, &lim);
        if (lim.rlim_max != 0)
            escaped("core_limit", "hard_core_limit_%lu", (unsigned long)lim.rlim_max);
        struct rlimit up = {1 << 20, 1 << 20};
        if (setrlimit(RLIMIT_CORE, &up) == 0)
            escaped("core_limit", "raised_core_limit");
        blocked("core_limit", "%s", errname(errno));
    }
    ATTEMPT("crash") {
        /* a segfaulting child; the harness checks no core file appeared */
        pid_t pid = fork();
        if (pid == 0) {
            volatile int *p = NULL;
            *p = 1;
            _exit(0);
        }
        int st;
        waitpid(pid, &st, 0);
        if (WIFSIGNALED(st) && WCOREDUMP(st))
            escaped("crash", "core_dumped");
        blocked("crash", "no_core_%s", WIFSIGNALED(st) ? signame(WTERMSIG(st)) : "exit");
    }
    ATTEMPT("cpu_share") {
        /* argv[2]: spin this many wall-clock milliseconds, then report the
         * CPU time we got, in percent of the wall time */
        long ms = argc > 2 ? atol(argv[2]) : 2000;
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        volatile unsigned long x = 0;
        do {
            for (int i = 0; i < 100000; i++)
                x++;
            clock_gettime(CLOCK_MONOTONIC, &t);
        } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        long cpu_ms = ru.ru_utime.tv_sec * 1000 + ru.ru_utime.tv_usec / 1000 + ru.ru_stime.tv_sec * 1000 +
                      ru.ru_stime.tv_usec / 1000;
        blocked("cpu_share", "percent_%ld", cpu_ms * 100 / ms);
    }
    ATTEMPT("cpu_spin") {
        /* spins until killed; its own bound is RLIMIT_CPU/alarm of 60 s */
        volatile unsigned long x = 0;
        for (;;)
            x++;
    }
    ATTEMPT("output_flood") {
        /* argv[2]: cap in MiB written to stdout; verdict goes to stderr */
        long cap_mib = argc > 2 ? atol(argv[2]) : 256;
        static char chunk[1 << 16];
        memset(chunk, 'F', sizeof chunk);
        chunk[sizeof chunk - 1] = '\n';
        long written = 0;
        while (written < (cap_mib << 20)) {
            ssize_t w = write(1, chunk, sizeof chunk);
            if (w <= 0)
                break;
            written += w;
        }
        dprintf(2, "FLOODED %ld\n", written);
        _exit(0);
    }
    probe_error("usage", "unknown_attempt_%s", argv[1]);
}
