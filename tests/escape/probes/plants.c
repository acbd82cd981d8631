/* plants.c - plants for the trusted side: writing protected paths inside
 * the writable grant (.git/hooks, .git/config), creating them when they
 * did not exist at start, moving the protected directory away, and
 * swapping it for a symlink.  argv[2] is the rw dir. */
#include "probe.h"
#include <fcntl.h>
#include <sys/stat.h>

static char path_buf[4][4200];

static const char *at(int slot, const char *rw, const char *rel)
{
    snprintf(path_buf[slot], sizeof path_buf[slot], "%s/%s", rw, rel);
    return path_buf[slot];
}

static int try_write(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0755);
    if (fd < 0)
        return -1;
    int rc = write(fd, "#planted\n", 9) == 9 ? 0 : -1;
    close(fd);
    return rc;
}

int main(int argc, char **argv)
{
    PROBE_MAIN_PROLOGUE(20);
    if (argc < 3) probe_error(argv[1], "usage_attempt_rwdir");
    const char *rw = argv[2];
    ATTEMPT("write_hook") {
        if (try_write(at(0, rw, ".git/hooks/pre-commit")) == 0)
            escaped("write_hook", "planted_.git/hooks/pre-commit");
        blocked("write_hook", "%s", errname(errno));
    }
    ATTEMPT("write_git_config") {
        if (try_write(at(0, rw, ".git/config")) == 0)
            escaped("write_git_config", "appended_.git/config");
        blocked("write_git_config", "%s", errname(errno));
    }
    ATTEMPT("create_protected_later") {
        /* no .git existed at start: create it and plant a hook */
        mkdir(at(0, rw, ".git"), 0755);
        mkdir(at(1, rw, ".git/hooks"), 0755);
        if (try_write(at(2, rw, ".git/hooks/pre-commit")) == 0)
            escaped("create_protected_later", "planted_.git/hooks/pre-commit");
        int e = errno;
        if (try_write(at(3, rw, ".git/config")) == 0)
            escaped("create_protected_later", "created_.git/config");
        blocked("create_protected_later", "%s", errname(e));
    }
    ATTEMPT("rename_git_away") {
        /* move the protected tree aside and build a fresh writable one */
        if (rename(at(0, rw, ".git"), at(1, rw, "git-moved")) == 0) {
            mkdir(at(2, rw, ".git"), 0755);
            mkdir(at(3, rw, ".git/hooks"), 0755);
            if (try_write(at(3, rw, ".git/hooks/pre-commit")) == 0)
                escaped("rename_git_away", "replaced_.git_and_planted_hook");
            blocked("rename_git_away", "moved_but_%s", errname(errno));
        }
        int e = errno;
        if (rename(at(0, rw, ".git/hooks"), at(1, rw, "hooks-moved")) == 0) {
            mkdir(at(2, rw, ".git/hooks"), 0755);
            if (try_write(at(3, rw, ".git/hooks/pre-commit")) == 0)
                escaped("rename_git_away", "replaced_.git/hooks_and_planted_hook");
        }
        blocked("rename_git_away", "%s", errname(e));
    }
    ATTEMPT("symlink_swap_hooks") {
        /* replace .git/hooks by a symlink to a writable dir */
        mkdir(at(0, rw, "evil-hooks"), 0755);
        if (unlink(at(1, rw, ".git/hooks/pre-push")) == 0)
            escaped("symlink_swap_hooks", "deleted_.git/hooks/pre-push");
        int e = errno;
        if (rmdir(at(1, rw, ".git/hooks")) == 0 || unlink(at(1, rw, ".git/hooks")) == 0) {
            if (symlink("../evil-hooks", at(1, rw, ".git/hooks")) == 0)
                escaped("symlink_swap_hooks", "hooks_now_a_symlink");
        }
        blocked("symlink_swap_hooks", "%s", errname(e));
    }
    ATTEMPT("write_rel") {
        /* argv[3]: a protected path relative to the rw dir */
        if (argc < 4) probe_error("write_rel", "usage_rel");
        char *slash = strrchr(argv[3], '/');
        if (slash) {
            char parent[4200];
            snprintf(parent, sizeof parent, "%s/%.*s", rw, (int)(slash - argv[3]), argv[3]);
            mkdir(parent, 0755);
        }
        if (try_write(at(0, rw, argv[3])) == 0)
            escaped("write_rel", "wrote_%s", argv[3]);
        blocked("write_rel", "%s", errname(errno));
    }
    ATTEMPT("hardlink_git_config") {
        /* a second name for .git/config in the writable part, then write through it */
        if (link(at(0, rw, ".git/config"), at(1, rw, "config-link")) == 0) {
            if (try_write(at(1, rw, "config-link")) == 0)
                escaped("hardlink_git_config", "wrote_.git/config_through_a_hardlink");
            escaped("hardlink_git_config", "linked_.git/config_into_the_writable_area");
        }
        blocked("hardlink_git_config", "%s", errname(errno));
    }
    ATTEMPT("rename_over_git_config") {
        if (try_write(at(0, rw, "evil-config")) != 0)
            probe_error("rename_over_git_config", "create_%s", errname(errno));
        if (rename(at(0, rw, "evil-config"), at(1, rw, ".git/config")) == 0)
            escaped("rename_over_git_config", "replaced_.git/config");
        blocked("rename_over_git_config", "%s", errname(errno));
    }
    ATTEMPT("chmod_hook") {
        /* an existing hook must not become executable / be changed */
        if (chmod(at(0, rw, ".git/hooks/pre-push"), 0777) == 0)
            escaped("chmod_hook", "chmod_.git/hooks/pre-push");
        blocked("chmod_hook", "%s", errname(errno));
    }
    probe_error("usage", "unknown_attempt_%s", argv[1]);
}
