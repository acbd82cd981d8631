/* fds.c - inherited file descriptors: nothing beyond stdin/stdout/stderr
 * may reach the zone (the harness leaks some into loopexec on purpose). */
#include "probe.h"
#include <sys/stat.h>
#include <dirent.h>
#include <fcntl.h>

int main(int argc, char **argv)
{
    PROBE_MAIN_PROLOGUE(20);
    ATTEMPT("open_fds") {
        DIR *d = opendir("/proc/self/fd");
        if (!d) probe_error("open_fds", "opendir_%s", errname(errno));
        int self = dirfd(d);
        struct dirent *de;
        while ((de = readdir(d))) {
            if (de->d_name[0] < '0' || de->d_name[0] > '9')
                continue;
            int fd = atoi(de->d_name);
            if (fd > 2 && fd != self) {
                char path[64], target[512] = {0};
                snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
                readlink(path, target, sizeof target - 1);
                escaped("open_fds", "fd_%d_is_%s", fd, target);
            }
        }
        blocked("open_fds", "only_stdio");
    }
    ATTEMPT("stdio_reopen_read") {
        {
            /* A pipe relayed into the host file by the supervisor: the file never reached the zone. */
            struct stat pst;
            if (argc > 2 && fstat(atoi(argv[2]), &pst) == 0 && S_ISFIFO(pst.st_mode))
                blocked("stdio_reopen_read", "relayed_through_a_pipe");
        }
        /* argv[2]: fd number (a host file the operator opened write-only);
         * re-open it through its /proc magic link for reading */
        if (argc < 3) probe_error("stdio_reopen_read", "usage_fd");
        char path[64], buf[256];
        snprintf(path, sizeof path, "/proc/self/fd/%s", argv[2]);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            blocked("stdio_reopen_read", "%s", errname(errno));
        ssize_t n = read(fd, buf, sizeof buf);
        if (n > 0)
            escaped("stdio_reopen_read", "read_%zd_bytes_of_the_host_file", n);
        blocked("stdio_reopen_read", "read_%s", n < 0 ? errname(errno) : "nothing");
    }
    ATTEMPT("stdio_fchmod") {
        /* argv[2]: fd number of a host file; change its mode on the host */
        if (argc < 3) probe_error("stdio_fchmod", "usage_fd");
        /* The supervisor may hand the zone a pipe it relays into the host file: then the file
         * itself never reached the zone (the harness still checks its mode is unchanged). */
        struct stat st;
        if (fstat(atoi(argv[2]), &st) == 0 && S_ISFIFO(st.st_mode))
            blocked("stdio_fchmod", "relayed_through_a_pipe");
        expect_fail("stdio_fchmod", fchmod(atoi(argv[2]), 0666));
    }
    ATTEMPT("stdio_truncate") {
        /* argv[2]: fd number of a host file opened for appending; wipe what
         * was in it before the zone started */
        if (argc < 3) probe_error("stdio_truncate", "usage_fd");
        expect_fail("stdio_truncate", ftruncate(atoi(argv[2]), 0));
    }
    ATTEMPT("read_leaked_fd") {
        /* argv[2]: the fd number the harness leaked into loopexec */
        if (argc < 3) probe_error("read_leaked_fd", "missing_fd");
        char buf[64];
        expect_fail("read_leaked_fd", read(atoi(argv[2]), buf, sizeof buf));
    }
    probe_error("usage", "unknown_attempt_%s", argv[1]);
}
