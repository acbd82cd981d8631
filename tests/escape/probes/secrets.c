/* secrets.c - secrets: environment variables the operator had, files
 * outside the grants (~/.ssh, ~/.aws, /etc/shadow, a signing key, the
 * state dir).  Never prints a secret's value. */
#include "probe.h"
#include <fcntl.h>
#include <sys/stat.h>

extern char **environ;

int main(int argc, char **argv)
{
    PROBE_MAIN_PROLOGUE(20);
    ATTEMPT("env") {
        /* argv[2..]: variable names that must not reach the zone */
        for (int i = 2; i < argc; i++)
            if (getenv(argv[i]))
                escaped("env", "%s_present", argv[i]);
        blocked("env", "%d_names_absent", argc - 2);
    }
    ATTEMPT("read_file") {
        if (argc < 3) probe_error("read_file", "usage_path");
        int fd = open(argv[2], O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            blocked("read_file", "%s", errname(errno));
        char c;
        if (read(fd, &c, 1) < 0)
            blocked("read_file", "read_%s", errname(errno));
        escaped("read_file", "readable_%s", argv[2]);
    }
    ATTEMPT("visible") {
        /* argv[2..]: paths that must not even be visible */
        struct stat st;
        int last = ENOENT;
        for (int i = 2; i < argc; i++) {
            if (stat(argv[i], &st) == 0)
                escaped("visible", "%s_exists", argv[i]);
            last = errno;
        }
        blocked("visible", "%s", errname(last));
    }
    probe_error("usage", "unknown_attempt_%s", argv[1]);
}
