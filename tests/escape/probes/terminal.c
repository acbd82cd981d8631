/* terminal.c - terminal injection: TIOCSTI / TIOCLINUX (plain and with the
 * upper 32 bits of the request set) on stdin, and opening /dev/tty. */
#include "probe.h"
#include <fcntl.h>
#include <sys/ioctl.h>
#include <termios.h>

#define HIGH_BITS 0xdeadbeef00000000UL

static void sti(const char *what, unsigned long req)
{
    char c = '#';
    long rc = syscall(SYS_ioctl, 0, req, &c);
    expect_fail(what, rc);
}

static void linux_ioctl(const char *what, unsigned long req)
{
    /* subcode 6 = TIOCL_GETFGCONSOLE, a harmless read if it ever succeeds */
    char sub = 6;
    long rc = syscall(SYS_ioctl, 0, req, &sub);
    expect_fail(what, rc);
}

int main(int argc, char **argv)
{
    PROBE_MAIN_PROLOGUE(20);
    ATTEMPT("tiocsti") sti("tiocsti", TIOCSTI);
    ATTEMPT("tiocsti_high_bits") sti("tiocsti_high_bits", TIOCSTI | HIGH_BITS);
    ATTEMPT("tioclinux") linux_ioctl("tioclinux", TIOCLINUX);
    ATTEMPT("tioclinux_high_bits") linux_ioctl("tioclinux_high_bits", TIOCLINUX | HIGH_BITS);
    ATTEMPT("stdin_is_tty") {
        /* harness check: the pty it handed in really arrived as stdin */
        if (isatty(0))
            ok("stdin_is_tty", "yes");
        probe_error("stdin_is_tty", "no");
    }
    ATTEMPT("dev_tty") {
        int fd = open("/dev/tty", O_RDWR | O_NOCTTY);
        expect_fail("dev_tty", fd);
    }
    probe_error("usage", "unknown_attempt_%s", argv[1]);
}
