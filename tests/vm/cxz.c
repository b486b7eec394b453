/* The client of tests/vm/cxz.py: `$CXLCTL ARGS` runs `cxlctl ARGS` in a process forked from a warm
 * cxlctl server in the guest (its socket: $CXLVM_CXZ), with this process's argv, working directory,
 * environment and standard streams; it forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to that process
 * and exits as it did.  No server listening: it execs `$PY -m cxlctl ARGS` instead. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

extern char **environ;
static volatile pid_t child;

static void forward(int sig) {
    if (child > 0) kill(child, sig);
}

static void fallback(char **argv) {
    const char *py = getenv("PY");
    if (!py || !*py) py = "python3";
    int n = 0;
    while (argv[n]) n++;
    char **a = calloc((size_t)n + 3, sizeof *a);
    if (!a) exit(125);
    a[0] = (char *)py;
    a[1] = "-m";
    a[2] = "cxlctl";
    for (int i = 1; i < n; i++) a[i + 2] = argv[i];
    execvp(py, a);
    fprintf(stderr, "cxz: cannot run %s: %s\n", py, strerror(errno));
    exit(127);
}

static int put(char **buf, size_t *len, size_t *cap, const char *s) {
    size_t n = strlen(s) + 1;
    if (*len + n > *cap) {
        size_t c = (*cap + n) * 2;
        char *b = realloc(*buf, c);
        if (!b) return -1;
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    return 0;
}

static int read_int(int fd, int *v) {
    char *p = (char *)v;
    size_t got = 0;
    while (got < sizeof *v) {
        ssize_t r = read(fd, p + got, sizeof *v - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *path = getenv("CXLVM_CXZ");
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (!path || !*path || strlen(path) >= sizeof sa.sun_path) fallback(argv);
    strcpy(sa.sun_path, path);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof sa) < 0) fallback(argv);

    char *buf = NULL, num[32], cwd[8192];
    size_t len = 0, cap = 0;
    struct sigaction old;
    snprintf(num, sizeof num, "%d", argc - 1);
    int bad = put(&buf, &len, &cap, num);
    for (int i = 1; i < argc; i++) bad |= put(&buf, &len, &cap, argv[i]);
    bad |= put(&buf, &len, &cap, getcwd(cwd, sizeof cwd) ? cwd : "/");
    sigaction(SIGINT, NULL, &old);
    bad |= put(&buf, &len, &cap, old.sa_handler == SIG_IGN ? "1" : "0");
    for (char **e = environ; *e; e++) bad |= put(&buf, &len, &cap, *e);
    if (bad) { fprintf(stderr, "cxz: out of memory\n"); return 125; }

    /* the first part of the request carries the three streams */
    int fds[3] = {0, 1, 2};
    char ctl[CMSG_SPACE(sizeof fds)];
    memset(ctl, 0, sizeof ctl);
    struct iovec iov = {buf, len};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(c), fds, sizeof fds);
    ssize_t sent = sendmsg(s, &m, 0);
    if (sent < 0) { fprintf(stderr, "cxz: sendmsg: %s\n", strerror(errno)); return 125; }
    while ((size_t)sent < len) {
        ssize_t r = write(s, buf + sent, len - (size_t)sent);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) { fprintf(stderr, "cxz: write: %s\n", strerror(errno)); return 125; }
        sent += r;
    }
    shutdown(s, SHUT_WR);

    int pid, code;
    if (read_int(s, &pid)) { fprintf(stderr, "cxz: the server did not start the command\n"); return 125; }
    child = pid;
    int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        struct sigaction was, sa2 = {.sa_handler = forward};
        sigaction(sigs[i], NULL, &was);
        if (was.sa_handler != SIG_IGN) sigaction(sigs[i], &sa2, NULL);
    }
    if (read_int(s, &code)) { fprintf(stderr, "cxz: lost the command (pid %d)\n", pid); return 125; }
    if (code >= 256) { /* killed by a signal: so is this process */
        signal(code - 256, SIG_DFL);
        raise(code - 256);
        return 128 + (code - 256);
    }
    return code;
}
