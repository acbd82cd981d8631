/* network.c - direct egress: IP-literal TCP to host listeners (IPv4 and
 * IPv6), raw/ICMP, packet, netlink, vsock, MPTCP sockets, io_uring, the
 * host's abstract and path unix sockets, DNS over UDP. */
#include "probe.h"
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/netlink.h>
#include <linux/vm_sockets.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <stddef.h>
#include <sys/un.h>

#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif

static void tcp_connect(const char *what, const char *ip, int port)
{
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof ss);
    int family = strchr(ip, ':') ? AF_INET6 : AF_INET;
    if (family == AF_INET) {
        struct sockaddr_in *a = (void *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons(port);
        if (inet_pton(AF_INET, ip, &a->sin_addr) != 1) probe_error(what, "bad_ip");
        len = sizeof *a;
    } else {
        struct sockaddr_in6 *a = (void *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(port);
        if (inet_pton(AF_INET6, ip, &a->sin6_addr) != 1) probe_error(what, "bad_ip");
        len = sizeof *a;
    }
    int s = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        blocked(what, "socket_%s", errname(errno));
    struct timeval tv = {3, 0};
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(s, (struct sockaddr *)&ss, len) == 0)
        escaped(what, "connected_%s_%d", ip, port);
    blocked(what, "%s", errname(errno));
}

static void unix_connect(const char *what, const char *name, int abstract)
{
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    size_t n = strlen(name);
    if (n + 2 > sizeof a.sun_path) probe_error(what, "name_too_long");
    memcpy(a.sun_path + (abstract ? 1 : 0), name, n);
    socklen_t len = offsetof(struct sockaddr_un, sun_path) + n + (abstract ? 1 : 0);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        blocked(what, "socket_%s", errname(errno));
    if (connect(s, (struct sockaddr *)&a, len) == 0)
        escaped(what, "connected_%s", name);
    blocked(what, "%s", errname(errno));
}

static void socket_must_fail(const char *what, int domain, int type, int proto)
{
    int s = socket(domain, type | SOCK_CLOEXEC, proto);
    expect_fail(what, s);
}

int main(int argc, char **argv)
{
    PROBE_MAIN_PROLOGUE(20);
    ATTEMPT("tcp") {
        if (argc < 4) probe_error("tcp", "usage_ip_port");
        tcp_connect("tcp", argv[2], atoi(argv[3]));
    }
    ATTEMPT("raw_icmp") socket_must_fail("raw_icmp", AF_INET, SOCK_RAW, IPPROTO_ICMP);
    ATTEMPT("raw_icmpv6") socket_must_fail("raw_icmpv6", AF_INET6, SOCK_RAW, IPPROTO_ICMPV6);
    ATTEMPT("packet") socket_must_fail("packet", AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    ATTEMPT("netlink") socket_must_fail("netlink", AF_NETLINK, SOCK_RAW, NETLINK_ROUTE);
    ATTEMPT("vsock") socket_must_fail("vsock", AF_VSOCK, SOCK_STREAM, 0);
    ATTEMPT("mptcp") socket_must_fail("mptcp", AF_INET, SOCK_STREAM, IPPROTO_MPTCP);
    ATTEMPT("mptcp6") socket_must_fail("mptcp6", AF_INET6, SOCK_STREAM, IPPROTO_MPTCP);
    ATTEMPT("ping_to") {
        /* unprivileged ICMP echo ("ping socket") to argv[2] */
        if (argc < 3) probe_error("ping_to", "usage_ip");
        int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_ICMP);
        if (s < 0)
            blocked("ping_to", "socket_%s", errname(errno));
        struct sockaddr_in a = {.sin_family = AF_INET};
        inet_pton(AF_INET, argv[2], &a.sin_addr);
        unsigned char echo[8] = {8, 0, 0, 0, 0, 1, 0, 1};
        if (sendto(s, echo, sizeof echo, 0, (struct sockaddr *)&a, sizeof a) < 0)
            blocked("ping_to", "sendto_%s", errname(errno));
        struct pollfd p = {s, POLLIN, 0};
        if (poll(&p, 1, 2000) == 1)
            escaped("ping_to", "echo_reply_from_%s", argv[2]);
        blocked("ping_to", "no_reply");
    }
    ATTEMPT("abstract_unix") {
        if (argc < 3) probe_error("abstract_unix", "usage_name");
        unix_connect("abstract_unix", argv[2], 1);
    }
    ATTEMPT("path_unix") {
        if (argc < 3) probe_error("path_unix", "usage_path");
        unix_connect("path_unix", argv[2], 0);
    }
    ATTEMPT("abstract_listen") {
        /* argv[2] name, argv[3] marker file to create once listening,
         * argv[4] milliseconds to wait for a connection */
        if (argc < 5) probe_error("abstract_listen", "usage_name_marker_ms");
        struct sockaddr_un a;
        memset(&a, 0, sizeof a);
        a.sun_family = AF_UNIX;
        size_t n = strlen(argv[2]);
        if (n + 2 > sizeof a.sun_path) probe_error("abstract_listen", "name_too_long");
        memcpy(a.sun_path + 1, argv[2], n);
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0 || bind(s, (struct sockaddr *)&a, offsetof(struct sockaddr_un, sun_path) + n + 1) || listen(s, 4))
            probe_error("abstract_listen", "listen_%s", errname(errno));
        int m = open(argv[3], O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (m < 0) probe_error("abstract_listen", "marker_%s", errname(errno));
        close(m);
        struct pollfd p = {s, POLLIN, 0};
        if (poll(&p, 1, atoi(argv[4])) == 1)
            escaped("abstract_listen", "another_zone_connected");
        blocked("abstract_listen", "no_connection");
    }
    ATTEMPT("udp_dns") {
        /* argv[2] ip, argv[3] port: send a DNS query, wait for any answer */
        if (argc < 4) probe_error("udp_dns", "usage_ip_port");
        int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (s < 0)
            blocked("udp_dns", "socket_%s", errname(errno));
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[3]))};
        inet_pton(AF_INET, argv[2], &a.sin_addr);
        static const unsigned char query[] = {
            0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0,
            7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 3, 'c', 'o', 'm', 0, 0, 1, 0, 1};
        if (sendto(s, query, sizeof query, 0, (struct sockaddr *)&a, sizeof a) < 0)
            blocked("udp_dns", "sendto_%s", errname(errno));
        struct pollfd p = {s, POLLIN, 0};
        if (poll(&p, 1, 2000) == 1) {
            char buf[512];
            ssize_t n = recv(s, buf, sizeof buf, 0);
            if (n > 0)
                escaped("udp_dns", "answer_from_%s_%s", argv[2], argv[3]);
            blocked("udp_dns", "recv_%s", errname(errno));
        }
        blocked("udp_dns", "no_answer");
    }
    ATTEMPT("io_uring") {
        /* io_uring can open sockets (incl. vsock) without socket(2) */
        unsigned char params[120];
        memset(params, 0, sizeof params);
        expect_fail("io_uring", syscall(SYS_io_uring_setup, 4, params));
    }
    ATTEMPT("loopback_works") {
        /* a listener on the zone's own loopback, and a connect to it: works
         * with network mode "none", refused by Landlock in "proxy" mode
         * (only the proxy port may be connected to) */
        int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof a;
        if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) ||
            getsockname(l, (struct sockaddr *)&a, &len))
            probe_error("loopback_works", "listen_%s", errname(errno));
        int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(c, (struct sockaddr *)&a, len) != 0)
            blocked("loopback_works", "%s", errname(errno));
        ok("loopback_works", "port_%d", ntohs(a.sin_port));
    }
    probe_error("usage", "unknown_attempt_%s", argv[1]);
}
