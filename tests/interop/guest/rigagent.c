/*
 * rigagent - guest side of the interop rig's control channel.
 *
 * Runs inside each QEMU guest (compiled statically on the host at build time,
 * installed as /usr/bin/rigagent). Modes:
 *
 *   rigagent serve /dev/vportNpM   serve one virtio-serial port (one request
 *                                  at a time; the rig gives each guest several
 *                                  ports so requests can run concurrently)
 *   rigagent reap                  PID 1's last act: reap orphans forever
 *
 * Request = one line from the host (fields separated by one space):
 *
 *   X <tag> <timeout_s> <b64cmd>          run `sh -c CMD`, stream its output
 *   B <tag> <name> <timeout_s> <b64cmd>   start background job NAME (output to
 *                                         /run/rig/bg/NAME.out, killed after
 *                                         timeout_s), print "started NAME pid P"
 *   W <tag> <name> <timeout_s>            wait for job NAME, print its output,
 *                                         rc = the job's rc (124 and the job is
 *                                         killed if it is still running at the
 *                                         timeout)
 *   K <tag> <name>                        kill job NAME (process group), print
 *                                         its output so far
 *   O <tag> <name>                        print job NAME's output so far
 *   S <tag> <name>                        print "running" or "exited RC"
 *
 * Reply = "\x02RIGBEGIN <tag>\n" OUTPUT "\n\x02RIGEND <tag> <rc>\n".
 * The host discards everything before its BEGIN (stale output of an earlier,
 * abandoned request) and strips the one "\n" in front of END, so OUTPUT is
 * passed through byte for byte. rc: exit status, 128+N for signal N, 124 for
 * a timeout (the command's process group is SIGKILLed), 2 for a bad request.
 * timeout_s 0 means no timeout.
 *
 * The port reads EOF / polls POLLHUP while no host is connected, and writes
 * would block until a host connects: so writes are non-blocking and output is
 * dropped when the host has gone away.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BGDIR "/run/rig/bg"
#define LINEMAX (1 << 20)

static int port = -1;
static int host_gone;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* How long the port may say "host not connected" before the host counts as gone. The guest
 * learns of the host's connection on the control virtqueue and gets its data on another: a
 * request from a host that has just connected can be read before the guest has processed the
 * "connected" message (or while an older "disconnected" one is still pending), and for that
 * moment the port polls POLLHUP and refuses writes. Giving up at once dropped the answer, and
 * the host waited out its timeout ("no answer within 45 s"). */
#define HUP_GRACE 5.0

/* write everything to the port; give up (and drop output) once the host is gone */
static void port_write(const void *buf, size_t n)
{
    const char *p = buf;
    double hup_since = 0;
    while (n > 0 && !host_gone) {
        ssize_t w = write(port, p, n);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EINTR) {
            host_gone = 1;
            break;
        }
        struct pollfd pf = { .fd = port, .events = POLLOUT };
        int r = poll(&pf, 1, 2000);
        if (r > 0 && (pf.revents & (POLLHUP | POLLERR)) && !(pf.revents & POLLOUT)) {
            if (!hup_since)
                hup_since = now();
            else if (now() - hup_since > HUP_GRACE)
                host_gone = 1;
            usleep(20000); /* POLLHUP does not block: nap */
        } else {
            hup_since = 0;
        }
    }
}

static void port_printf(const char *fmt, ...)
{
    char b[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof b - 1)
        n = sizeof b - 1;
    if (n > 0)
        port_write(b, (size_t)n);
}

static void begin(const char *tag) { port_printf("\x02RIGBEGIN %s\n", tag); }
static void end(const char *tag, int rc) { port_printf("\n\x02RIGEND %s %d\n", tag, rc); }

static int b64val(int c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* decode base64 in place-independent buffer; returns malloc'ed NUL-terminated string or NULL */
static char *b64dec(const char *s)
{
    size_t n = strlen(s), o = 0;
    char *out = malloc(n * 3 / 4 + 4);
    unsigned acc = 0;
    int bits = 0;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '=')
            break;
        int v = b64val((unsigned char)s[i]);
        if (v < 0) {
            free(out);
            return NULL;
        }
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (char)((acc >> bits) & 0xff);
        }
    }
    out[o] = 0;
    return out;
}

static int status_rc(int st)
{
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return 1;
}

static void child_exec(const char *cmd, int outfd)
{
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    setpgid(0, 0);
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) dup2(nul, 0);
    dup2(outfd, 1);
    dup2(outfd, 2);
    for (int fd = 3; fd < 1024; fd++) close(fd);
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
}

/* X: run a command, relay its output, rc */
static void do_exec(const char *tag, double timeout, const char *cmd)
{
    int pfd[2];
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    int sfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
    if (pipe2(pfd, O_CLOEXEC) < 0 || sfd < 0) {
        begin(tag);
        port_printf("rigagent: pipe/signalfd: %s", strerror(errno));
        end(tag, 2);
        return;
    }
    begin(tag);
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        child_exec(cmd, pfd[1]);
    }
    close(pfd[1]);
    fcntl(pfd[0], F_SETFL, O_NONBLOCK);
    double deadline = timeout > 0 ? now() + timeout : 0;
    int rc = -1, timed_out = 0, pipe_open = 1;
    double drain_until = 0;
    char buf[65536];
    for (;;) {
        int wait_ms = 1000;
        if (rc < 0 && deadline) {
            double left = deadline - now();
            if (left <= 0) {
                kill(-pid, SIGKILL);
                kill(pid, SIGKILL);
                timed_out = 1;
                deadline = 0;
                left = 0;
            }
            if (left * 1000 < wait_ms) wait_ms = (int)(left * 1000) + 1;
        }
        if (rc >= 0) {
            /* child done: drain what is left, but do not wait for background
             * descendants that still hold the pipe */
            double left = drain_until - now();
            if (!pipe_open || left <= 0) break;
            wait_ms = (int)(left * 1000) + 1;
        }
        struct pollfd pf[2] = { { .fd = pipe_open ? pfd[0] : -1, .events = POLLIN }, { .fd = sfd, .events = POLLIN } };
        poll(pf, 2, wait_ms);
        if (pipe_open && (pf[0].revents & (POLLIN | POLLHUP))) {
            ssize_t r = read(pfd[0], buf, sizeof buf);
            if (r > 0) port_write(buf, (size_t)r);
            else if (r == 0 || (errno != EAGAIN && errno != EINTR)) pipe_open = 0;
        }
        if (pf[1].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == sizeof si) ;
        }
        if (rc < 0) {
            int st;
            if (waitpid(pid, &st, WNOHANG) == pid) {
                rc = timed_out ? 124 : status_rc(st);
                drain_until = now() + 0.2;
            }
        }
    }
    close(pfd[0]);
    close(sfd);
    if (timed_out) port_printf("rigagent: command timed out after %.0f s (process group killed)\n", timeout);
    end(tag, rc);
}

static int valid_name(const char *n)
{
    if (!*n || strlen(n) > 64) return 0;
    for (const char *p = n; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '-' || *p == '.'))
            return 0;
    return *n != '.';
}

static void jpath(char *b, size_t n, const char *name, const char *ext)
{
    snprintf(b, n, "%s/%s.%s", BGDIR, name, ext);
}

static int read_int_file(const char *path, int *v)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int ok = fscanf(f, "%d", v) == 1;
    fclose(f);
    return ok ? 0 : -1;
}

static void cat_file(const char *path)
{
    int fd = open(path, O_RDONLY);
    char buf[65536];
    ssize_t r;
    if (fd < 0) return;
    while ((r = read(fd, buf, sizeof buf)) > 0) port_write(buf, (size_t)r);
    close(fd);
}

static volatile pid_t job_pid;
static volatile sig_atomic_t job_expired;
static void job_alarm(int sig)
{
    (void)sig;
    job_expired = 1;
    if (job_pid > 0) kill(-job_pid, SIGKILL);
}

/* the background job runner: detached (double fork), writes NAME.pid, NAME.rc */
static void job_runner(const char *name, double timeout, const char *cmd)
{
    char out[256], pidf[256], rcf[256], tmp[300];
    jpath(out, sizeof out, name, "out");
    jpath(pidf, sizeof pidf, name, "pid");
    jpath(rcf, sizeof rcf, name, "rc");
    setsid();
    int ofd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (ofd < 0) _exit(1);
    pid_t pid = fork();
    if (pid == 0) child_exec(cmd, ofd);
    close(ofd);
    job_pid = pid;
    snprintf(tmp, sizeof tmp, "%s.tmp", pidf);
    FILE *f = fopen(tmp, "w");
    if (f) { fprintf(f, "%d\n", pid); fclose(f); rename(tmp, pidf); }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    struct sigaction sa = { .sa_handler = job_alarm };
    sigaction(SIGALRM, &sa, NULL);
    if (timeout > 0) alarm((unsigned)timeout);
    int st = 0, rc;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) ;
    alarm(0);
    rc = job_expired ? 124 : status_rc(st); /* 124: the job's own timeout fired */
    kill(-pid, SIGKILL); /* leftovers of the job's process group */
    snprintf(tmp, sizeof tmp, "%s.tmp", rcf);
    f = fopen(tmp, "w");
    if (f) { fprintf(f, "%d\n", rc); fclose(f); rename(tmp, rcf); }
    _exit(0);
}

static int job_running(const char *name, int *rc)
{
    char rcf[256], pidf[256];
    jpath(rcf, sizeof rcf, name, "rc");
    jpath(pidf, sizeof pidf, name, "pid");
    if (read_int_file(rcf, rc) == 0) return 0;
    return access(pidf, F_OK) == 0 ? 1 : -1; /* -1: no such job */
}

static void do_bg(const char *tag, const char *name, double timeout, const char *cmd)
{
    char p[256];
    int rc;
    begin(tag);
    if (!valid_name(name)) { port_printf("rigagent: bad job name '%s'", name); end(tag, 2); return; }
    if (job_running(name, &rc) == 1) { port_printf("rigagent: job %s is still running", name); end(tag, 2); return; }
    const char *exts[] = { "out", "pid", "rc", "rc.tmp", "pid.tmp" };
    for (unsigned i = 0; i < sizeof exts / sizeof *exts; i++) { jpath(p, sizeof p, name, exts[i]); unlink(p); }
    pid_t c0 = fork();
    if (c0 == 0) {
        if (fork() == 0) {
            close(port);
            job_runner(name, timeout, cmd);
        }
        _exit(0);
    }
    waitpid(c0, NULL, 0);
    jpath(p, sizeof p, name, "pid");
    int pid = -1;
    for (int i = 0; i < 200 && read_int_file(p, &pid) < 0; i++) usleep(10000);
    if (pid < 0) { port_printf("rigagent: job %s did not start", name); end(tag, 1); return; }
    port_printf("started %s pid %d\n", name, pid);
    end(tag, 0);
}

static void kill_job(const char *name)
{
    char p[256];
    int pid, rc;
    jpath(p, sizeof p, name, "pid");
    if (read_int_file(p, &pid) == 0 && pid > 1) kill(-pid, SIGKILL);
    for (int i = 0; i < 300 && job_running(name, &rc) == 1; i++) usleep(10000);
}

static void do_wait(const char *tag, const char *name, double timeout)
{
    char out[256];
    int rc = 0, st;
    begin(tag);
    if (!valid_name(name)) { port_printf("rigagent: bad job name"); end(tag, 2); return; }
    double deadline = timeout > 0 ? now() + timeout : 0, hup_since = 0;
    while ((st = job_running(name, &rc)) == 1) {
        if (deadline && now() >= deadline) break;
        struct pollfd pf = { .fd = port, .events = 0 };
        if (poll(&pf, 1, 0) > 0 && (pf.revents & POLLHUP)) {
            /* (a host that stopped waiting; see HUP_GRACE for one that has just come) */
            if (!hup_since)
                hup_since = now();
            else if (now() - hup_since > HUP_GRACE) { host_gone = 1; return; }
        } else {
            hup_since = 0;
        }
        usleep(50000);
    }
    if (st < 0) { port_printf("rigagent: no job %s", name); end(tag, 2); return; }
    int timed_out = st == 1;
    if (timed_out) kill_job(name);
    jpath(out, sizeof out, name, "out");
    cat_file(out);
    if (timed_out) port_printf("\nrigagent: job %s still running after %.0f s: killed\n", name, timeout);
    end(tag, timed_out ? 124 : rc);
}

static void do_simple(char op, const char *tag, const char *name)
{
    char out[256];
    int rc = 0, st;
    begin(tag);
    if (!valid_name(name)) { port_printf("rigagent: bad job name"); end(tag, 2); return; }
    st = job_running(name, &rc);
    if (st < 0) { port_printf("rigagent: no job %s", name); end(tag, 2); return; }
    jpath(out, sizeof out, name, "out");
    if (op == 'K') {
        if (st == 1) kill_job(name);
        cat_file(out);
        end(tag, 0);
    } else if (op == 'O') {
        cat_file(out);
        end(tag, 0);
    } else {
        if (st == 1) port_printf("running\n");
        else port_printf("exited %d\n", rc);
        end(tag, 0);
    }
}

static void handle(char *line)
{
    char *f[6] = { 0 };
    int n = 0;
    for (char *s = strtok(line, " "); s && n < 6; s = strtok(NULL, " ")) f[n++] = s;
    if (n < 2 || strlen(f[0]) != 1) return;
    const char *tag = f[1];
    char *cmd;
    switch (f[0][0]) {
    case 'X':
        if (n != 4 || !(cmd = b64dec(f[3]))) { begin(tag); end(tag, 2); return; }
        do_exec(tag, atof(f[2]), cmd);
        free(cmd);
        break;
    case 'B':
        if (n != 5 || !(cmd = b64dec(f[4]))) { begin(tag); end(tag, 2); return; }
        do_bg(tag, f[2], atof(f[3]), cmd);
        free(cmd);
        break;
    case 'W':
        if (n != 4) { begin(tag); end(tag, 2); return; }
        do_wait(tag, f[2], atof(f[3]));
        break;
    case 'K': case 'O': case 'S':
        if (n != 3) { begin(tag); end(tag, 2); return; }
        do_simple(f[0][0], tag, f[2]);
        break;
    default:
        begin(tag);
        port_printf("rigagent: unknown request '%s'", f[0]);
        end(tag, 2);
    }
}

static int serve(const char *dev)
{
    port = open(dev, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (port < 0) { perror(dev); return 1; }
    signal(SIGPIPE, SIG_IGN);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    mkdir("/run/rig", 0755);
    mkdir(BGDIR, 0755);
    char *line = malloc(LINEMAX);
    size_t len = 0;
    for (;;) {
        struct pollfd pf = { .fd = port, .events = POLLIN };
        int r = poll(&pf, 1, 1000);
        if (r > 0 && (pf.revents & POLLIN)) {
            ssize_t got = read(port, line + len, LINEMAX - 1 - len);
            if (got > 0) {
                len += (size_t)got;
                char *nl;
                while ((nl = memchr(line, '\n', len))) {
                    *nl = 0;
                    host_gone = 0;
                    handle(line);
                    size_t used = (size_t)(nl + 1 - line);
                    memmove(line, nl + 1, len - used);
                    len -= used;
                }
                if (len >= LINEMAX - 1) len = 0; /* overlong garbage */
                continue;
            }
        }
        if (r > 0 && (pf.revents & POLLHUP)) {
            len = 0;              /* host not connected: a partial line is void */
            usleep(20000);        /* POLLHUP does not block: nap */
        }
    }
}

static void reap(void)
{
    for (;;)
        if (wait(NULL) < 0) sleep(1);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "serve")) return serve(argv[2]);
    if (argc == 2 && !strcmp(argv[1], "reap")) reap();
    fprintf(stderr, "usage: rigagent serve /dev/vportNpM | rigagent reap\n");
    return 2;
}
