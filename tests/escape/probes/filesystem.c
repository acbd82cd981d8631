/* filesystem.c - symlinks and hardlinks in the writable grant pointing at
 * host files, `..` out of the grant, writes outside it.  Paths are given by
 * the harness as host paths (the grant is bound at the same path). */
#include "probe.h"
#include <fcntl.h>
#include <sys/stat.h>

static void read_must_fail(const char *what, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        blocked(what, "%s", errname(errno));
    char buf[16];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0)
        blocked(what, "read_%s", errname(errno));
    escaped(what, "read_%zd_bytes_of_%s", n, path);
}

int main(int argc, char **argv)
{
    PROBE_MAIN_PROLOGUE(20);
    if (argc < 4) probe_error(argv[1], "usage_attempt_rwdir_target");
    const char *rw = argv[2], *target = argv[3];
    char link_path[4200];
    snprintf(link_path, sizeof link_path, "%s/escape-link", rw);
    ATTEMPT("read_path") read_must_fail("read_path", target);
    ATTEMPT("symlink_read") {
        if (symlink(target, link_path) != 0 && errno != EEXIST)
            probe_error("symlink_read", "symlink_%s", errname(errno));
        read_must_fail("symlink_read", link_path);
    }
    ATTEMPT("relative_symlink_read") {
        /* argv[3] here is relative to the rw dir, e.g. ../outside/secret */
        if (symlink(target, link_path) != 0 && errno != EEXIST)
            probe_error("relative_symlink_read", "symlink_%s", errname(errno));
        read_must_fail("relative_symlink_read", link_path);
    }
    ATTEMPT("hardlink") {
        if (link(target, link_path) == 0)
            escaped("hardlink", "linked_%s", target);
        blocked("hardlink", "%s", errname(errno));
    }
    ATTEMPT("dotdot_read") {
        char path[8400];
        snprintf(path, sizeof path, "%s/%s", rw, target);
        read_must_fail("dotdot_read", path);
    }
    ATTEMPT("dotdot_create") {
        char path[8400];
        snprintf(path, sizeof path, "%s/%s", rw, target);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0)
            escaped("dotdot_create", "created_%s", path);
        blocked("dotdot_create", "%s", errname(errno));
    }
    ATTEMPT("create_path") {
        /* argv[3]: a path to create (in a read-only grant or system dir) */
        int fd = open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) {
            unlink(target);
            escaped("create_path", "created_%s", target);
        }
        blocked("create_path", "%s", errname(errno));
    }
    ATTEMPT("write_path") {
        int fd = open(target, O_WRONLY | O_APPEND | O_CLOEXEC);
        if (fd >= 0) {
            /* the harness checks the file is unchanged; do not touch it */
            escaped("write_path", "opened_%s_for_writing", target);
        }
        blocked("write_path", "%s", errname(errno));
    }
    ATTEMPT("symlink_write") {
        if (symlink(target, link_path) != 0 && errno != EEXIST)
            probe_error("symlink_write", "symlink_%s", errname(errno));
        int fd = open(link_path, O_WRONLY | O_APPEND | O_CLOEXEC);
        if (fd >= 0)
            escaped("symlink_write", "opened_%s_for_writing", target);
        blocked("symlink_write", "%s", errname(errno));
    }
    ATTEMPT("rw_works") {
        /* sanity: the grant itself is writable, so denials above are not
         * just a broken zone */
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", rw, target);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || write(fd, "ok\n", 3) != 3)
            probe_error("rw_works", "%s", errname(errno));
        close(fd);
        ok("rw_works", "grant_writable");
    }
    probe_error("usage", "unknown_attempt_%s", argv[1]);
}
