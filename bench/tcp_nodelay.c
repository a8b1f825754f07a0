/* A diagnostic for bench/cold_read.py, not part of zarrgate: an LD_PRELOAD shim that sets
 * TCP_NODELAY (disables Nagle's algorithm) on the TCP sockets of the process:
 *   TCP_NODELAY_ON=connect   sockets it connects (the server's PostgreSQL connections; sqlx 0.9
 *                            does not set TCP_NODELAY), the default
 *   TCP_NODELAY_ON=accept    sockets it accepts (its HTTP clients; axum::serve leaves Nagle on)
 *   TCP_NODELAY_ON=both
 *
 *   gcc -O2 -shared -fPIC -o tcp_nodelay.so bench/tcp_nodelay.c -ldl
 *   LD_PRELOAD=$PWD/tcp_nodelay.so target/release/zarrgate serve ...
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static int wanted(const char *side) {
    const char *on = getenv("TCP_NODELAY_ON");
    if (!on || !*on) on = "connect";
    return strcmp(on, "both") == 0 || strcmp(on, side) == 0;
}

static void nodelay(int fd) {
    int saved = errno, one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* fails harmlessly on non-TCP */
    errno = saved;
}

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    static int (*real)(int, const struct sockaddr *, socklen_t);
    if (!real) real = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "connect");
    int rc = real(fd, addr, len);
    if (addr && (addr->sa_family == AF_INET || addr->sa_family == AF_INET6) && wanted("connect")) nodelay(fd);
    return rc;
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags) {
    static int (*real)(int, struct sockaddr *, socklen_t *, int);
    if (!real) real = (int (*)(int, struct sockaddr *, socklen_t *, int))dlsym(RTLD_NEXT, "accept4");
    int rc = real(fd, addr, len, flags);
    if (rc >= 0 && wanted("accept")) nodelay(rc);
    return rc;
}

int accept(int fd, struct sockaddr *addr, socklen_t *len) {
    return accept4(fd, addr, len, 0);
}
