/* mounts.c - mount, umount, pivot_root, chroot and the new mount API. */
#include "probe.h"
#include <fcntl.h>
#include <linux/mount.h>
#include <sys/mount.h>

int main(int argc, char **argv)
{
    PROBE_MAIN_PROLOGUE(20);
    ATTEMPT("mount_tmpfs") expect_fail("mount_tmpfs", mount("none", "/tmp", "tmpfs", 0, NULL));
    ATTEMPT("mount_bind_root") expect_fail("mount_bind_root", mount("/", "/tmp", NULL, MS_BIND | MS_REC, NULL));
    ATTEMPT("remount_rw") expect_fail("remount_rw", mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND, NULL));
    ATTEMPT("umount_proc") expect_fail("umount_proc", umount2("/proc", MNT_DETACH));
    ATTEMPT("pivot_root") expect_fail("pivot_root", syscall(SYS_pivot_root, "/tmp", "/tmp"));
    ATTEMPT("chroot") expect_fail("chroot", chroot("/tmp"));
    ATTEMPT("open_tree") expect_fail("open_tree", syscall(SYS_open_tree, AT_FDCWD, "/", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
    ATTEMPT("move_mount") expect_fail("move_mount", syscall(SYS_move_mount, AT_FDCWD, "/proc", AT_FDCWD, "/tmp", 0));
    ATTEMPT("fsopen") expect_fail("fsopen", syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC));
    ATTEMPT("fsmount") {
        /* fd 0 is not an fs context: a filter that allows fsmount answers EINVAL */
        expect_fail("fsmount", syscall(SYS_fsmount, 0, FSMOUNT_CLOEXEC, 0));
    }
    ATTEMPT("fsconfig") expect_fail("fsconfig", syscall(SYS_fsconfig, 0, FSCONFIG_CMD_CREATE, NULL, NULL, 0));
    ATTEMPT("fspick") expect_fail("fspick", syscall(SYS_fspick, AT_FDCWD, "/", FSPICK_CLOEXEC));
    ATTEMPT("mount_setattr") {
        struct mount_attr attr;
        memset(&attr, 0, sizeof attr);
        attr.attr_clr = MOUNT_ATTR_RDONLY;
        expect_fail("mount_setattr", syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &attr, sizeof attr));
    }
    probe_error("usage", "unknown_attempt_%s", argv[1]);
}
