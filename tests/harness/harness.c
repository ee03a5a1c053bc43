/*
 * harness.c - throwaway redis-server processes and fake servers for the
 * tests (see harness.h for the contract).
 *
 * A server is a redis-server child started by fork+exec with a config file
 * written into its own temp dir (so passwords stay out of /proc/PID/cmdline
 * and a restart reuses exactly the same settings). It listens on 127.0.0.1
 * only, on a port found by binding port 0; if another process takes the
 * port before redis-server binds it, the start is retried on a new one.
 *
 * Nothing outlives the test process: each child asks the kernel for
 * SIGKILL when its parent dies (PR_SET_PDEATHSIG), and an atexit handler
 * kills -9 and reaps every server still running and removes the temp dirs
 * (servers and certificates) this process made. Every wait is bounded.
 *
 * Fake servers are a listening socket served by one thread each, with a
 * self-pipe so that stopping one wakes its thread at once.
 */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#ifndef TH_FIXTURES_DIR
#error "TH_FIXTURES_DIR must name tests/fixtures (set by tests/CMakeLists.txt)"
#endif

#define TH_START_TIMEOUT_MS 10000
#define TH_STOP_TIMEOUT_MS 5000
#define TH_PORT_ATTEMPTS 8
#define TH_MAX_TRACKED 256
#define TH_MAX_FAKES 64
#define TH_FAKE_MAX_CONNS 64

/* ---- small helpers ---------------------------------------------------- */

/* See harness.h. */
int64_t th_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* See harness.h. */
void th_sleep_ms(int64_t ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};

    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

/* snprintf that reports (on stderr) rather than hides a truncation; the
 * buffers of th_server are sized so that it does not happen. */
__attribute__((format(printf, 3, 4))) static void
fmt_into(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= len)
        fprintf(stderr, "harness: truncated: %s\n", buf);
}

/* Find a free TCP port on 127.0.0.1 by binding port 0 and asking the
 * kernel which one it gave; the socket is closed again, so the port is
 * only probably free (callers retry on a bind failure). Returns the port
 * or -1. */
static int free_port(void)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int fd, port = -1;

    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

/* nftw callback of rm_rf: remove one entry, depth first. */
static int rm_entry(const char *path, const struct stat *st, int flag,
                    struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* Remove a temp dir made by th_tempdir() and everything in it. As a guard
 * against removing anything else, only paths whose last component starts
 * with "dlock-" are touched. */
static void rm_rf(const char *dir)
{
    const char *base;

    if (dir == NULL || dir[0] == '\0')
        return;
    base = strrchr(dir, '/');
    base = base ? base + 1 : dir;
    if (strncmp(base, "dlock-", 6) != 0)
        return;
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Append "%XX"-escaped s to out (RFC 3986 userinfo: unreserved pass). */
static void url_escape(char *out, size_t outlen, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(out);

    for (; *s && n + 4 < outlen; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
            c == '~') {
            out[n++] = (char)c;
        } else {
            out[n++] = '%';
            out[n++] = hex[c >> 4];
            out[n++] = hex[c & 15];
        }
    }
    out[n] = '\0';
}

/* Wait up to timeout_ms for pid to exit; reaps it. Returns 1 if it was
 * reaped (or is not our child any more), 0 if still running. */
static int wait_exit(pid_t pid, int64_t timeout_ms)
{
    int64_t deadline = th_now_ms() + timeout_ms;

    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD))
            return 1;
        if (th_now_ms() >= deadline)
            return 0;
        th_sleep_ms(10);
    }
}

/* SIGKILL pid and reap it. Bounded: a process in uninterruptible sleep is
 * given 5 s, then left (reported) rather than hanging the test. */
static void kill_reap(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGKILL);
    if (!wait_exit(pid, TH_STOP_TIMEOUT_MS))
        fprintf(stderr, "harness: pid %d did not die after SIGKILL\n",
                (int)pid);
}

/* ---- registry of what this process started (for atexit) -------------- */

typedef struct tracked {
    pid_t pid;     /* running server, 0 when not running */
    char dir[256]; /* temp dir to remove at exit */
} tracked;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static tracked reg[TH_MAX_TRACKED];
static pid_t reg_owner; /* the process that registered the atexit hook */

/* At exit of the process that started them (not of forked children, which
 * inherit the hook): kill -9 every server still running, reap it, remove
 * every temp dir left. */
static void reg_cleanup(void)
{
    if (getpid() != reg_owner)
        return;
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < TH_MAX_TRACKED; i++) {
        if (reg[i].pid > 0)
            kill_reap(reg[i].pid);
        reg[i].pid = 0;
        if (reg[i].dir[0])
            rm_rf(reg[i].dir);
        reg[i].dir[0] = '\0';
    }
    pthread_mutex_unlock(&reg_mu);
}

/* Remove the server and certificate dirs that earlier test processes
 * left behind when they were killed (atexit did not run): those whose
 * "owner" file names a process that no longer exists. Their servers died
 * with them (PR_SET_PDEATHSIG). */
static void sweep_stale_dirs(void)
{
    const char *base = getenv("TMPDIR");
    struct dirent *de;
    DIR *d;

    if (base == NULL || base[0] != '/')
        base = "/tmp";
    d = opendir(base);
    if (d == NULL)
        return;
    while ((de = readdir(d)) != NULL) {
        char path[512], owner[600];
        FILE *f;
        long pid = 0;

        if (strncmp(de->d_name, "dlock-redis-", 12) != 0 &&
            strncmp(de->d_name, "dlock-certs-", 12) != 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", base, de->d_name);
        snprintf(owner, sizeof(owner), "%s/owner", path);
        f = fopen(owner, "r");
        if (f == NULL)
            continue;
        if (fscanf(f, "%ld", &pid) != 1)
            pid = 0;
        fclose(f);
        if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH)
            rm_rf(path);
    }
    closedir(d);
}

/* Register the atexit hook once; clean up after crashed predecessors. */
static void reg_init_once(void)
{
    reg_owner = getpid();
    atexit(reg_cleanup);
    sweep_stale_dirs();
}

/* Write dir/owner with our pid, so that sweep_stale_dirs() of a later
 * process can tell whether this dir is abandoned. */
static void write_owner(const char *dir)
{
    char path[400];
    FILE *f;

    snprintf(path, sizeof(path), "%s/owner", dir);
    f = fopen(path, "w");
    if (f) {
        fprintf(f, "%ld\n", (long)getpid());
        fclose(f);
    }
}

/* Record that dir exists (and pid runs in it when pid > 0); an existing
 * entry for dir is updated. Warns when the table is full (the test then
 * only loses the at-exit cleanup). */
static void reg_set(const char *dir, pid_t pid)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    int free_slot = -1;

    pthread_once(&once, reg_init_once);
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < TH_MAX_TRACKED; i++) {
        if (reg[i].dir[0] && strcmp(reg[i].dir, dir) == 0) {
            reg[i].pid = pid;
            pthread_mutex_unlock(&reg_mu);
            return;
        }
        if (!reg[i].dir[0] && free_slot < 0)
            free_slot = i;
    }
    if (free_slot >= 0) {
        snprintf(reg[free_slot].dir, sizeof(reg[free_slot].dir), "%s", dir);
        reg[free_slot].pid = pid;
        write_owner(dir);
    } else {
        fprintf(stderr, "harness: too many servers to track\n");
    }
    pthread_mutex_unlock(&reg_mu);
}

/* Forget dir (it has been removed by its owner). */
static void reg_drop(const char *dir)
{
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < TH_MAX_TRACKED; i++) {
        if (reg[i].dir[0] && strcmp(reg[i].dir, dir) == 0) {
            reg[i].dir[0] = '\0';
            reg[i].pid = 0;
        }
    }
    pthread_mutex_unlock(&reg_mu);
}

/* ---- temp dirs --------------------------------------------------------- */

int th_tempdir(char *buf, size_t len, const char *tag)
{
    const char *base = getenv("TMPDIR");
    int n;

    if (base == NULL || base[0] != '/')
        base = "/tmp";
    n = snprintf(buf, len, "%s/dlock-%s-XXXXXX", base, tag ? tag : "t");
    if (n < 0 || (size_t)n >= len) {
        fprintf(stderr, "harness: temp dir name too long\n");
        return -1;
    }
    if (mkdtemp(buf) == NULL) {
        fprintf(stderr, "harness: mkdtemp %s: %s\n", buf, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- certificates ------------------------------------------------------ */

static th_cert_set certs;
static int certs_ok;

/* Run `bash gen-certs.sh DIR` and wait for it (at most 60 s). Returns the
 * script's exit status, or -1 when it could not be run. */
static int run_gen_certs(const char *dir)
{
    const char *script = TH_FIXTURES_DIR "/gen-certs.sh";
    pid_t pid = fork();
    int st;

    if (pid < 0)
        return -1;
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, 0);
        execlp("bash", "bash", script, dir, (char *)NULL);
        _exit(127);
    }
    for (int64_t deadline = th_now_ms() + 60000;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            break;
        if (r < 0)
            return -1;
        if (th_now_ms() > deadline) {
            kill_reap(pid);
            fprintf(stderr, "harness: gen-certs.sh timed out\n");
            return -1;
        }
        th_sleep_ms(10);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Generate the certificate set once (pthread_once). */
static void certs_once(void)
{
    th_cert_set *c = &certs;

    if (th_tempdir(c->dir, sizeof(c->dir), "certs") != 0)
        return;
    reg_set(c->dir, 0);
#define TH_PATH(field, name)                                                   \
    fmt_into(c->field, sizeof(c->field), "%s/%s", c->dir, name)
    TH_PATH(ca, "ca.pem");
    TH_PATH(ca_key, "ca.key");
    TH_PATH(server_cert, "server.pem");
    TH_PATH(server_key, "server.key");
    TH_PATH(expired_cert, "expired.pem");
    TH_PATH(expired_key, "expired.key");
    TH_PATH(other_ca, "other-ca.pem");
    TH_PATH(client_cert, "client.pem");
    TH_PATH(client_key, "client.key");
    TH_PATH(wrongname_cert, "wrongname.pem");
    TH_PATH(wrongname_key, "wrongname.key");
#undef TH_PATH
    if (run_gen_certs(c->dir) != 0) {
        fprintf(stderr, "harness: could not make certificates in %s\n", c->dir);
        return;
    }
    certs_ok = 1;
}

const th_cert_set *th_certs(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    pthread_once(&once, certs_once);
    return certs_ok ? &certs : NULL;
}

/* ---- transport selection ---------------------------------------------- */

const char *th_transport(void)
{
    const char *t = getenv("DLOCK_TEST_TRANSPORT");

    if (t && strcmp(t, "tls") == 0)
        return "tls";
    if (t && strcmp(t, "unix") == 0)
        return "unix";
    return "tcp";
}

const char *th_url(const th_server *s)
{
    const char *t = th_transport();

    if (strcmp(t, "tls") == 0)
        return s->tls_url[0] ? s->tls_url : s->url;
    if (strcmp(t, "unix") == 0)
        return s->unix_url;
    return s->url;
}

const char *th_ca_file(void)
{
    const th_cert_set *c;

    if (strcmp(th_transport(), "tls") != 0)
        return NULL;
    c = th_certs();
    return c ? c->ca : NULL;
}

/* ---- redis-server processes ------------------------------------------- */

/* Write dir/redis.conf for s (mode 600: it may hold passwords). Returns 0
 * or -1 with a message. */
static int write_config(const th_server *s)
{
    const th_server_opts *o = &s->opts;
    char path[400];
    FILE *f;
    int fd;

    /* The config file quotes the password; these would break out. */
    if ((o->password && strpbrk(o->password, "\"\\\r\n")) ||
        (o->acl_user && strpbrk(o->acl_user, " \"\\\r\n")) ||
        (o->acl_pass && strpbrk(o->acl_pass, " \"\\\r\n"))) {
        fprintf(stderr, "harness: password or user with quotes, "
                        "backslashes, newlines (or spaces in ACL)\n");
        return -1;
    }
    snprintf(path, sizeof(path), "%s/redis.conf", s->dir);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || (f = fdopen(fd, "w")) == NULL) {
        fprintf(stderr, "harness: %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    fprintf(f,
            "bind 127.0.0.1\n"
            "port %d\n"
            "dir %s\n"
            "unixsocket %s\n"
            "unixsocketperm 700\n"
            "daemonize no\n"
            "supervised no\n"
            "logfile %s/redis.log\n"
            "loglevel notice\n"
            "save \"\"\n"
            /* A replica a test links (REPLICAOF) syncs at once, not after
             * Redis's 5 s wait for more replicas to share the transfer. */
            "repl-diskless-sync-delay 0\n"
            "enable-debug-command local\n"
            "databases 16\n",
            s->port, s->dir, s->unix_path, s->dir);
    if (o->aof_always)
        fprintf(f, "appendonly yes\nappendfsync always\n");
    else
        fprintf(f, "appendonly no\n");
    if (o->password)
        fprintf(f, "requirepass \"%s\"\n", o->password);
    if (o->acl_user)
        fprintf(f, "user %s on >%s ~* &* +@all\n", o->acl_user,
                o->acl_pass ? o->acl_pass : "");
    if (s->tls_port) {
        const th_cert_set *c = th_certs();
        fprintf(f,
                "tls-port %d\n"
                "tls-cert-file %s\n"
                "tls-key-file %s\n"
                "tls-ca-cert-file %s\n"
                "tls-auth-clients %s\n"
                "tls-replication no\n",
                s->tls_port, o->tls_cert ? o->tls_cert : c->server_cert,
                o->tls_key ? o->tls_key : c->server_key, c->ca,
                o->tls_auth_clients_yes ? "yes" : "optional");
    }
    if (o->extra_conf)
        fprintf(f, "%s\n", o->extra_conf);
    if (fclose(f) != 0) {
        fprintf(stderr, "harness: %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Fill the URL fields of s from its ports, dir and password. */
static void make_urls(th_server *s)
{
    char auth[200] = "";

    if (s->opts.password) {
        strcpy(auth, ":");
        url_escape(auth, sizeof(auth), s->opts.password);
        strcat(auth, "@");
    }
    fmt_into(s->url, sizeof(s->url), "redis://%s127.0.0.1:%d", auth, s->port);
    if (s->tls_port)
        fmt_into(s->tls_url, sizeof(s->tls_url), "rediss://%s127.0.0.1:%d",
                 auth, s->tls_port);
    else
        s->tls_url[0] = '\0';
    fmt_into(s->unix_url, sizeof(s->unix_url), "unix://%s%s", auth,
             s->unix_path);
}

/* In the child, after fork: become a redis-server that dies with us. Only
 * async-signal-safe calls: the parent may have threads. */
static void exec_server(const char *conf, const char *out, pid_t parent)
{
    const char *bin = getenv("DLOCK_REDIS_SERVER");
    sigset_t all;
    int fd;

    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(126);
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    fd = open("/dev/null", O_RDONLY);
    if (fd >= 0 && fd != 0) {
        dup2(fd, 0);
        close(fd);
    }
    fd = open(out, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        if (fd > 2)
            close(fd);
    }
    /* Do not hold the test's sockets open (a fake server or a peer would
     * not see them close). */
    if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0) {
        for (int i = 3; i < 4096; i++)
            close(i);
    }
    if (bin == NULL || bin[0] == '\0')
        bin = "redis-server";
    execlp(bin, bin, conf, (char *)NULL);
    _exit(127);
}

/* Print the tail of the server's log and stdout to stderr, to explain a
 * failed start. */
static void dump_log(const th_server *s)
{
    static const char *names[] = {"redis.log", "redis.out"};

    for (size_t k = 0; k < 2; k++) {
        char path[400], buf[2048];
        FILE *f;
        long size;
        size_t n;

        snprintf(path, sizeof(path), "%s/%s", s->dir, names[k]);
        f = fopen(path, "r");
        if (f == NULL)
            continue;
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        fseek(f,
              size > (long)sizeof(buf) - 1 ? size - (long)sizeof(buf) + 1 : 0,
              SEEK_SET);
        n = fread(buf, 1, sizeof(buf) - 1, f);
        buf[n] = '\0';
        fclose(f);
        if (n)
            fprintf(stderr, "harness: --- %s ---\n%s\n", path, buf);
    }
}

/* Does the log say the listening socket could not be bound? Then the
 * port was taken by someone else between free_port() and the bind. */
static int log_says_port_busy(const th_server *s)
{
    char path[400], line[1024];
    FILE *f;
    int busy = 0;

    snprintf(path, sizeof(path), "%s/redis.log", s->dir);
    f = fopen(path, "r");
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, "Address already in use") ||
            strstr(line, "Could not create server TCP listening socket") ||
            strstr(line, "Failed listening on port"))
            busy = 1;
    fclose(f);
    return busy;
}

/* Connect to the server's plain port and authenticate. NULL on failure. */
static redisContext *connect_plain(const th_server *s, int64_t timeout_ms)
{
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
    redisReply *r;

    if (c == NULL)
        return NULL;
    if (c->err) {
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    if (s->opts.password) {
        r = redisCommand(c, "AUTH %s", s->opts.password);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            if (r)
                freeReplyObject(r);
            redisFree(c);
            return NULL;
        }
        freeReplyObject(r);
    }
    return c;
}

/* Is the server answering PING with PONG (not -LOADING or an error)? */
static int pings(const th_server *s)
{
    redisContext *c = connect_plain(s, 500);
    redisReply *r;
    int ok = 0;

    if (c == NULL)
        return 0;
    r = redisCommand(c, "PING");
    if (r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0)
        ok = 1;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return ok;
}

/* Start redis-server for s (dir, ports and config already set) and wait
 * until it answers PING. Returns 0; 1 when it exited because a port was
 * busy (the caller may retry); -1 on any other failure (logged). */
static int spawn_and_wait(th_server *s)
{
    char conf[400], out[400];
    pid_t parent = getpid(), pid;
    int64_t deadline;

    snprintf(conf, sizeof(conf), "%s/redis.conf", s->dir);
    snprintf(out, sizeof(out), "%s/redis.out", s->dir);
    /* A fresh log for this attempt, so the busy-port check only sees it. */
    {
        char log[400];
        snprintf(log, sizeof(log), "%s/redis.log", s->dir);
        unlink(log);
    }
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "harness: fork: %s\n", strerror(errno));
        return -1;
    }
    if (pid == 0)
        exec_server(conf, out, parent);
    s->pid = pid;
    reg_set(s->dir, pid);

    deadline = th_now_ms() + TH_START_TIMEOUT_MS;
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            s->pid = 0;
            reg_set(s->dir, 0);
            if (log_says_port_busy(s))
                return 1;
            fprintf(stderr, "harness: redis-server exited (status %d)\n",
                    WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
            dump_log(s);
            return -1;
        }
        if (pings(s))
            return 0;
        if (th_now_ms() > deadline) {
            fprintf(stderr,
                    "harness: redis-server on port %d did not "
                    "answer PING within %d ms\n",
                    s->port, TH_START_TIMEOUT_MS);
            dump_log(s);
            kill_reap(pid);
            s->pid = 0;
            reg_set(s->dir, 0);
            return -1;
        }
        th_sleep_ms(20);
    }
}

int th_server_start(th_server *s, const th_server_opts *opts)
{
    int want_tls;

    memset(s, 0, sizeof(*s));
    if (opts)
        s->opts = *opts;
    want_tls = s->opts.tls || strcmp(th_transport(), "tls") == 0;
    if (want_tls && th_certs() == NULL)
        return -1;
    if (th_tempdir(s->dir, sizeof(s->dir), "redis") != 0)
        return -1;
    snprintf(s->unix_path, sizeof(s->unix_path), "%s/redis.sock", s->dir);
    if (strlen(s->unix_path) >= 108) {
        /* sun_path is 108 bytes: a long TMPDIR cannot hold the socket. */
        rmdir(s->dir);
        snprintf(s->dir, sizeof(s->dir), "/tmp/dlock-redis-XXXXXX");
        if (mkdtemp(s->dir) == NULL) {
            fprintf(stderr, "harness: mkdtemp: %s\n", strerror(errno));
            return -1;
        }
        snprintf(s->unix_path, sizeof(s->unix_path), "%s/redis.sock", s->dir);
    }
    reg_set(s->dir, 0);

    for (int attempt = 0; attempt < TH_PORT_ATTEMPTS; attempt++) {
        int rc;

        s->port = free_port();
        s->tls_port = want_tls ? free_port() : 0;
        if (s->port < 0 || s->tls_port < 0 || s->port == s->tls_port)
            continue;
        make_urls(s);
        if (write_config(s) != 0)
            break;
        rc = spawn_and_wait(s);
        if (rc == 0)
            return 0;
        if (rc < 0)
            break;
    }
    fprintf(stderr, "harness: could not start redis-server\n");
    th_server_stop(s);
    return -1;
}

void th_server_stop(th_server *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        /* A paused server handles SIGTERM only once continued. */
        kill(s->pid, SIGCONT);
        if (!wait_exit(s->pid, TH_STOP_TIMEOUT_MS))
            kill_reap(s->pid);
        s->pid = 0;
    }
    if (s->dir[0]) {
        rm_rf(s->dir);
        reg_drop(s->dir);
        s->dir[0] = '\0';
    }
}

void th_server_kill9(th_server *s)
{
    if (s->pid <= 0)
        return;
    kill_reap(s->pid);
    s->pid = 0;
    reg_set(s->dir, 0);
}

int th_server_restart(th_server *s)
{
    if (s->dir[0] == '\0') {
        fprintf(stderr, "harness: restart of a server never started\n");
        return -1;
    }
    if (s->pid > 0)
        th_server_kill9(s);
    for (int attempt = 0; attempt < TH_PORT_ATTEMPTS; attempt++) {
        int rc = spawn_and_wait(s);
        if (rc == 0)
            return 0;
        if (rc < 0)
            return -1;
        /* The same port is required: wait for whoever holds it. */
        th_sleep_ms(250);
    }
    fprintf(stderr, "harness: port %d stayed busy; restart failed\n", s->port);
    return -1;
}

/* Wait (bounded) until waitpid reports pid as stopped (stop = 1) or
 * continued (stop = 0), so a test knows the signal has taken effect. */
static void wait_state(pid_t pid, int stop)
{
    int64_t deadline = th_now_ms() + 2000;

    while (th_now_ms() < deadline) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG | (stop ? WUNTRACED : WCONTINUED));
        if (r == pid && (stop ? WIFSTOPPED(st) : WIFCONTINUED(st)))
            return;
        if (r < 0)
            return;
        th_sleep_ms(2);
    }
}

void th_server_pause(th_server *s)
{
    if (s->pid <= 0)
        return;
    kill(s->pid, SIGSTOP);
    wait_state(s->pid, 1);
}

/* Is pid stopped (state T in /proc/PID/stat)? 1, 0, or -1 when unknown. */
static int is_stopped(pid_t pid)
{
    char path[64], buf[512], *p;
    ssize_t n;
    int fd;

    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    /* pid (comm) state ...: comm may hold spaces and parentheses. */
    p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ')
        return -1;
    return p[2] == 'T' || p[2] == 't';
}

void th_server_resume(th_server *s)
{
    int stopped;

    if (s->pid <= 0)
        return;
    stopped = is_stopped(s->pid);
    kill(s->pid, SIGCONT);
    /* A server that was running reports no continue: waiting for one
     * cost every fixture's teardown 2 s a server. */
    if (stopped != 0)
        wait_state(s->pid, 0);
}

/* ---- th_cmd ------------------------------------------------------------ */

/* th_cmd's body with a va_list. */
static redisReply *vcmd(const th_server *s, const char *fmt, va_list ap)
{
    redisContext *c = connect_plain(s, 5000);
    redisReply *r;

    if (c == NULL)
        return NULL;
    r = redisvCommand(c, fmt, ap);
    redisFree(c);
    return r;
}

redisReply *th_cmd(const th_server *s, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;

    va_start(ap, fmt);
    r = vcmd(s, fmt, ap);
    va_end(ap);
    return r;
}

long long th_cmd_int(const th_server *s, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;
    long long v = -1;

    va_start(ap, fmt);
    r = vcmd(s, fmt, ap);
    va_end(ap);
    if (r && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    if (r)
        freeReplyObject(r);
    return v;
}

/* See harness.h. */
long long th_calls(const th_server *s, const char *cmd)
{
    redisReply *r = th_cmd(s, "INFO commandstats");
    char pat[64];
    long long n = -1;
    const char *p;
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        snprintf(pat, sizeof pat, "cmdstat_%s:calls=", cmd);
        n = 0;
        if ((p = strstr(r->str, pat)) != NULL &&
            sscanf(p + strlen(pat), "%lld", &n) != 1)
            n = -1;
    }
    if (r != NULL)
        freeReplyObject(r);
    return n;
}

/* See harness.h. */
long long th_scripts_run(const th_server *s)
{
    return th_calls(s, "evalsha") + th_calls(s, "eval");
}

/* See harness.h. GET, a 200 us gap, SET: a lost update shows. */
int th_rmw(const th_server *s, const char *key)
{
    redisReply *r = th_cmd(s, "GET %s", key);
    long long v = 0;
    if (r == NULL)
        return -1;
    if (r->type == REDIS_REPLY_STRING)
        v = atoll(r->str);
    freeReplyObject(r);
    usleep(200);
    r = th_cmd(s, "SET %s %lld", key, v + 1);
    if (r == NULL)
        return -1;
    freeReplyObject(r);
    return 0;
}

/* ---- fake servers ------------------------------------------------------ */

typedef enum fake_mode {
    FAKE_GARBAGE,
    FAKE_SILENT,
    FAKE_TRUNCATE,
    FAKE_CLOSE,
    FAKE_WRONGTYPE,
    FAKE_HTTP
} fake_mode;

typedef struct fake_conn {
    int fd;
    int answered;        /* truncate/http: the one answer was sent */
    redisReader *reader; /* wrongtype: counts the commands received */
} fake_conn;

typedef struct fake_server {
    int used;
    int port;
    int listen_fd;
    int wake[2]; /* self-pipe: a byte on wake[1] stops the thread */
    fake_mode mode;
    pthread_t thread;
    fake_conn conns[TH_FAKE_MAX_CONNS];
} fake_server;

static pthread_mutex_t fake_mu = PTHREAD_MUTEX_INITIALIZER;
static fake_server fakes[TH_MAX_FAKES];

/* Send what we can without ever blocking the fake server's thread. */
static void fake_send(int fd, const char *buf, size_t len)
{
    (void)send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Close one fake connection and free its slot. */
static void fake_conn_close(fake_conn *fc)
{
    if (fc->fd >= 0)
        close(fc->fd);
    if (fc->reader)
        redisReaderFree(fc->reader);
    fc->fd = -1;
    fc->reader = NULL;
    fc->answered = 0;
}

/* React to bytes received on a fake connection according to the mode.
 * Returns 0 to keep the connection, -1 to close it. */
static int fake_on_data(fake_server *fs, fake_conn *fc, const char *buf,
                        size_t n)
{
    static const char garbage[] = "hello, I am not a redis server\r\n";
    static const char half[] = "$20\r\nonly-half-of-";
    static const char http[] = "HTTP/1.1 400 Bad Request\r\n"
                               "Content-Type: text/plain\r\n"
                               "Content-Length: 11\r\n"
                               "Connection: close\r\n\r\nBad Request";

    switch (fs->mode) {
    case FAKE_GARBAGE:
        fake_send(fc->fd, garbage, sizeof(garbage) - 1);
        return 0;
    case FAKE_SILENT:
        return 0;
    case FAKE_TRUNCATE:
        if (!fc->answered)
            fake_send(fc->fd, half, sizeof(half) - 1);
        fc->answered = 1;
        return 0;
    case FAKE_CLOSE:
        return -1;
    case FAKE_HTTP:
        fake_send(fc->fd, http, sizeof(http) - 1);
        return -1;
    case FAKE_WRONGTYPE:
        break;
    }
    /* wrongtype: one +OK per complete command; an inline or unparsable
     * request still gets one +OK so the client always has an answer. */
    if (fc->reader == NULL)
        fc->reader = redisReaderCreate();
    if (fc->reader == NULL || redisReaderFeed(fc->reader, buf, n) != REDIS_OK) {
        fake_send(fc->fd, "+OK\r\n", 5);
        return 0;
    }
    for (;;) {
        void *reply = NULL;
        if (redisReaderGetReply(fc->reader, &reply) != REDIS_OK) {
            redisReaderFree(fc->reader);
            fc->reader = NULL;
            fake_send(fc->fd, "+OK\r\n", 5);
            return 0;
        }
        if (reply == NULL)
            return 0;
        freeReplyObject(reply);
        fake_send(fc->fd, "+OK\r\n", 5);
    }
}

/* Keep an accepted connection; 0 when it is to be closed at once ("close"
 * mode, or no free slot). */
static int fake_place(fake_server *fs, int fd)
{
    if (fs->mode == FAKE_CLOSE)
        return 0;
    for (int i = 0; i < TH_FAKE_MAX_CONNS; i++) {
        if (fs->conns[i].fd < 0) {
            fs->conns[i].fd = fd;
            return 1;
        }
    }
    return 0;
}

/* The thread of one fake server: accept, read, answer, until woken on the
 * self-pipe. */
static void *fake_main(void *arg)
{
    fake_server *fs = arg;
    struct pollfd pfd[TH_FAKE_MAX_CONNS + 2];
    int slot[TH_FAKE_MAX_CONNS + 2];

    for (int i = 0; i < TH_FAKE_MAX_CONNS; i++)
        fs->conns[i].fd = -1;
    for (;;) {
        int n = 0;

        pfd[n].fd = fs->wake[0];
        pfd[n++].events = POLLIN;
        pfd[n].fd = fs->listen_fd;
        pfd[n++].events = POLLIN;
        for (int i = 0; i < TH_FAKE_MAX_CONNS; i++) {
            if (fs->conns[i].fd < 0)
                continue;
            slot[n] = i;
            pfd[n].fd = fs->conns[i].fd;
            pfd[n++].events = POLLIN;
        }
        if (poll(pfd, (nfds_t)n, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pfd[0].revents)
            break;
        if (pfd[1].revents & POLLIN) {
            int fd = accept4(fs->listen_fd, NULL, NULL,
                             SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd >= 0 && !fake_place(fs, fd))
                close(fd);
        }
        for (int k = 2; k < n; k++) {
            fake_conn *fc = &fs->conns[slot[k]];
            char buf[4096];
            ssize_t r;

            if (!pfd[k].revents)
                continue;
            r = recv(fc->fd, buf, sizeof(buf), 0);
            if (r < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (r <= 0 || fake_on_data(fs, fc, buf, (size_t)r) < 0)
                fake_conn_close(fc);
        }
    }
    for (int i = 0; i < TH_FAKE_MAX_CONNS; i++)
        fake_conn_close(&fs->conns[i]);
    return NULL;
}

int th_fake_server_start(const char *mode)
{
    static const char *names[] = {"garbage", "silent",    "truncate",
                                  "close",   "wrongtype", "http"};
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    fake_server *fs = NULL;
    int m = -1;

    for (int i = 0; i < 6; i++)
        if (mode && strcmp(mode, names[i]) == 0)
            m = i;
    if (m < 0) {
        fprintf(stderr, "harness: unknown fake server mode %s\n",
                mode ? mode : "(null)");
        return -1;
    }
    pthread_mutex_lock(&fake_mu);
    for (int i = 0; i < TH_MAX_FAKES; i++) {
        if (!fakes[i].used) {
            fs = &fakes[i];
            memset(fs, 0, sizeof(*fs));
            fs->used = 1;
            break;
        }
    }
    pthread_mutex_unlock(&fake_mu);
    if (fs == NULL) {
        fprintf(stderr, "harness: too many fake servers\n");
        return -1;
    }
    fs->mode = (fake_mode)m;
    fs->wake[0] = fs->wake[1] = -1;
    fs->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fs->listen_fd < 0)
        goto fail;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fs->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(fs->listen_fd, 64) != 0 ||
        getsockname(fs->listen_fd, (struct sockaddr *)&sa, &len) != 0)
        goto fail;
    fs->port = ntohs(sa.sin_port);
    if (pipe2(fs->wake, O_CLOEXEC) != 0)
        goto fail;
    if (pthread_create(&fs->thread, NULL, fake_main, fs) != 0)
        goto fail;
    return fs->port;

fail:
    fprintf(stderr, "harness: fake server: %s\n", strerror(errno));
    if (fs->listen_fd >= 0)
        close(fs->listen_fd);
    if (fs->wake[0] >= 0) {
        close(fs->wake[0]);
        close(fs->wake[1]);
    }
    pthread_mutex_lock(&fake_mu);
    fs->used = 0;
    pthread_mutex_unlock(&fake_mu);
    return -1;
}

void th_fake_server_stop(int port)
{
    fake_server *fs = NULL;

    pthread_mutex_lock(&fake_mu);
    for (int i = 0; i < TH_MAX_FAKES; i++) {
        if (fakes[i].used && fakes[i].port == port) {
            fs = &fakes[i];
            fs->port = 0; /* no second stop of the same one */
            break;
        }
    }
    pthread_mutex_unlock(&fake_mu);
    if (fs == NULL)
        return;
    /* The pipe wakes the thread's poll at once; join cannot hang. */
    while (write(fs->wake[1], "x", 1) < 0 && errno == EINTR) {}
    pthread_join(fs->thread, NULL);
    close(fs->listen_fd);
    close(fs->wake[0]);
    close(fs->wake[1]);
    pthread_mutex_lock(&fake_mu);
    fs->used = 0;
    pthread_mutex_unlock(&fake_mu);
}
