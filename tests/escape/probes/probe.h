/*
 * probe.h - shared scaffolding for the escape-suite probes.
 *
 * Every probe is one attack category; argv[1] names the attempt, further
 * arguments are attempt parameters supplied by the Rust harness.  A probe run
 * prints exactly ONE verdict line on stdout and exits with its code:
 *
 *   BLOCKED <what> <why>    exit 0   the attack failed (why = errno name,
 *                                    signal name, or a short fact)
 *   ESCAPED <what> <detail> exit 66  the attack worked
 *   ERROR   <what> <detail> exit 67  the probe could not even try
 *   OK      <what> <detail> exit 0   a sanity attempt (something the zone
 *                                    must allow) worked
 *
 * Probes bound themselves (alarm, RLIMIT_CPU, explicit caps) so that a
 * sandbox regression makes a test fail instead of hurting the machine.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXIT_BLOCKED 0
#define EXIT_ESCAPED 66
#define EXIT_ERROR 67

static const char *errname(int e)
{
    const char *n = strerrorname_np(e);
    return n ? n : "E?";
}

static const char *signame(int s)
{
    static char buf[32];
    const char *n = sigabbrev_np(s);
    snprintf(buf, sizeof buf, "SIG%s", n ? n : "?");
    return buf;
}

static void verdict(const char *kind, int code, const char *what, const char *fmt, va_list ap)
{
    char detail[512];
    vsnprintf(detail, sizeof detail, fmt, ap);
    for (char *p = detail; *p; p++)
        if (*p == '\n' || *p == ' ')
            *p = '_';
    printf("%s %s %s\n", kind, what, detail);
    fflush(stdout);
    _exit(code);
}

__attribute__((noreturn, format(printf, 2, 3))) static void blocked(const char *what, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verdict("BLOCKED", EXIT_BLOCKED, what, fmt, ap);
    va_end(ap);
    _exit(EXIT_BLOCKED);
}

__attribute__((noreturn, format(printf, 2, 3))) static void escaped(const char *what, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verdict("ESCAPED", EXIT_ESCAPED, what, fmt, ap);
    va_end(ap);
    _exit(EXIT_ESCAPED);
}

__attribute__((noreturn, format(printf, 2, 3))) static void probe_error(const char *what, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verdict("ERROR", EXIT_ERROR, what, fmt, ap);
    va_end(ap);
    _exit(EXIT_ERROR);
}

__attribute__((noreturn, unused, format(printf, 2, 3))) static void ok(const char *what, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verdict("OK", 0, what, fmt, ap);
    va_end(ap);
    _exit(0);
}

/* A syscall result: <0 means blocked with that errno; success means escaped. */
__attribute__((unused)) static void expect_fail(const char *what, long rc)
{
    int e = errno;
    if (rc < 0)
        blocked(what, "%s", errname(e));
    escaped(what, "returned_%ld", rc);
}

/*
 * Run `attempt` in a child so that a seccomp kill (SIGSYS) or any other
 * fatal signal becomes a verdict too.  The child's own verdict line, if it
 * prints one, is passed through unchanged (it shares stdout).
 */
__attribute__((unused)) static void in_child(const char *what, void (*attempt)(void *), void *arg)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        probe_error(what, "fork_%s", errname(errno));
    if (pid == 0) {
        attempt(arg);
        _exit(EXIT_ERROR);
    }
    int st;
    if (waitpid(pid, &st, 0) < 0)
        probe_error(what, "waitpid_%s", errname(errno));
    if (WIFSIGNALED(st))
        blocked(what, "%s", signame(WTERMSIG(st)));
    _exit(WEXITSTATUS(st));
}

/* Self-imposed bounds: no probe may outlive this, whatever the sandbox does. */
__attribute__((unused)) static void bound_self(unsigned seconds)
{
    struct rlimit cpu = {seconds, seconds + 1};
    setrlimit(RLIMIT_CPU, &cpu);
    alarm(seconds);
}

#define ATTEMPT(name) if (strcmp(argv[1], name) == 0)

#define PROBE_MAIN_PROLOGUE(seconds)                                              \
    if (argc < 2)                                                                 \
        probe_error("usage", "missing_attempt");                                  \
    bound_self(seconds);                                                          \
    setvbuf(stdout, NULL, _IOLBF, 0);
