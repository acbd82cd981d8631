/* lifetime.c - processes that try to outlive the zone: a double-forked,
 * setsid daemon ignoring SIGHUP/SIGTERM that keeps appending to a
 * heartbeat file in the rw dir; and a sleeper the harness uses while it
 * kills the supervisor.  Every process keeps the harness's token in its
 * argv so the harness can find survivors in the host's /proc. */
#include "probe.h"
#include <fcntl.h>

static void heartbeat_forever(const char *file, unsigned max_seconds)
{
    signal(SIGHUP, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    alarm(max_seconds);
    for (;;) {
        int fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            write(fd, "beat\n", 5);
            close(fd);
        }
        usleep(100 * 1000);
    }
}

int main(int argc, char **argv)
{
    PROBE_MAIN_PROLOGUE(40);
    if (argc < 3) probe_error(argv[1], "usage_attempt_heartbeat_file");
    ATTEMPT("double_fork_daemon") {
        pid_t pid = fork();
        if (pid < 0) probe_error("double_fork_daemon", "fork_%s", errname(errno));
        if (pid == 0) {
            setsid();
            pid_t gc = fork();
            if (gc != 0)
                _exit(0);
            for (int fd = 0; fd < 3; fd++)
                close(fd);
            heartbeat_forever(argv[2], 30);
        }
        waitpid(pid, NULL, 0);
        /* give the daemon time to start beating before we return */
        usleep(300 * 1000);
        ok("double_fork_daemon", "daemon_started");
    }
    ATTEMPT("sleep_with_heartbeat") {
        /* runs until killed (or 30 s), used while the harness kills loopexec */
        pid_t pid = fork();
        if (pid == 0) {
            setsid();
            heartbeat_forever(argv[2], 30);
        }
        printf("STARTED sleep_with_heartbeat %d\n", (int)pid);
        fflush(stdout);
        heartbeat_forever(argv[2], 30);
    }
    probe_error("usage", "unknown_attempt_%s", argv[1]);
}
