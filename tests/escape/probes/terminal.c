/* terminal.c - terminal injection: TIOCSTI / TIOCLINUX (plain and with the
 * upper 32 bits of the request set) on a given fd, and opening /dev/tty.
 * argv[2] is the fd to use: the harness gives the zone a pty it owns as
 * stderr (fd 2); fd 0 is /dev/null, where the kernel itself would answer
 * ENOTTY, so EPERM there can only come from the seccomp filter. */
#include "probe.h"
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>

#define HIGH_BITS 0xdeadbeef00000000UL

static void sti(const char *what, int fd, unsigned long req)
{
    char c = '#';
    expect_fail(what, syscall(SYS_ioctl, fd, req, &c));
}

static void linux_ioctl(const char *what, int fd, unsigned long req)
{
    /* subcode 6 = TIOCL_GETFGCONSOLE, a harmless read if it ever succeeds */
    char sub = 6;
    expect_fail(what, syscall(SYS_ioctl, fd, req, &sub));
}

int main(int argc, char **argv)
{
    PROBE_MAIN_PROLOGUE(20);
    int fd = argc > 2 ? atoi(argv[2]) : 0;
    ATTEMPT("tiocsti") sti("tiocsti", fd, TIOCSTI);
    ATTEMPT("tiocsti_high_bits") sti("tiocsti_high_bits", fd, TIOCSTI | HIGH_BITS);
    ATTEMPT("tioclinux") linux_ioctl("tioclinux", fd, TIOCLINUX);
    ATTEMPT("tioclinux_high_bits") linux_ioctl("tioclinux_high_bits", fd, TIOCLINUX | HIGH_BITS);
    ATTEMPT("is_tty") {
        /* harness check: the pty it handed in really arrived on this fd */
        if (isatty(fd))
            ok("is_tty", "fd_%d", fd);
        probe_error("is_tty", "fd_%d_%s", fd, errname(errno));
    }
    ATTEMPT("chmod_tty") {
        /* make the terminal device world-writable (other users could then
         * write to / inject into the operator's terminal) */
        expect_fail("chmod_tty", fchmod(fd, 0666));
    }
    ATTEMPT("read_tty") {
        /* what the operator types while the zone runs must not reach it:
         * wait up to 3 s for input on the terminal fd */
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, 3000);
        if (r < 0)
            blocked("read_tty", "poll_%s", errname(errno));
        if (r == 0)
            blocked("read_tty", "nothing_arrived");
        char buf[128];
        ssize_t n = read(fd, buf, sizeof buf);
        if (n > 0)
            escaped("read_tty", "read_%zd_bytes_typed_by_the_operator", n);
        blocked("read_tty", "read_%s", n < 0 ? errname(errno) : "eof");
    }
    ATTEMPT("tty_settings") {
        /* switch off echo on the operator's terminal: it stays that way after
         * the zone is gone */
        struct termios t;
        if (tcgetattr(fd, &t) != 0)
            blocked("tty_settings", "tcgetattr_%s", errname(errno));
        t.c_lflag &= ~(tcflag_t)ECHO;
        if (tcsetattr(fd, TCSANOW, &t) != 0)
            blocked("tty_settings", "%s", errname(errno));
        struct termios now;
        tcgetattr(fd, &now);
        if (!(now.c_lflag & ECHO))
            escaped("tty_settings", "echo_switched_off");
        blocked("tty_settings", "unchanged");
    }
    ATTEMPT("dev_tty") {
        int t = open("/dev/tty", O_RDWR | O_NOCTTY);
        expect_fail("dev_tty", t);
    }
    probe_error("usage", "unknown_attempt_%s", argv[1]);
}
