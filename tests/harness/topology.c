/*
 * topology.c - Sentinel and Cluster deployments made of harness servers
 * (see topology.h for the contract).
 *
 * Every process is started through harness.h, so it gets what every test
 * server gets (temp dir, loopback, PR_SET_PDEATHSIG, kill -9 and dir
 * removal at exit) without a second copy of that code:
 *
 * - Sentinels: th_server_start() execs DLOCK_REDIS_SERVER when set, and
 *   redis-server runs as a sentinel when its argv[0] ends in
 *   "redis-sentinel" (the same as `redis-server CONF --sentinel`). So a
 *   symlink named redis-sentinel to the real binary is made in the first
 *   data node's dir, and DLOCK_REDIS_SERVER points at it while the
 *   sentinels start (setenv: start topologies from the main thread before
 *   other threads run, as harness.h asks for any server).
 * - Cluster nodes need their port + 10000 free for the bus, and at most
 *   55535. harness picks its ports itself, so a node is started plainly,
 *   its port checked (else it is stopped and another is tried), then it is
 *   killed, "cluster-enabled yes" and friends are appended to its
 *   redis.conf, and th_server_restart() brings it back on the same port.
 */
#include "topology.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#define TOPO_POLL_MS 50
#define TOPO_CREATE_TIMEOUT_MS 60000
#define TOPO_NODE_ATTEMPTS 20

/* Settings of every data node of both topologies: replicas sync at once. */
#define TOPO_DATA_CONF                                                         \
    "repl-diskless-sync yes\n"                                                 \
    "repl-diskless-sync-delay 0\n"                                             \
    "repl-ping-replica-period 1\n"

/* ---- small helpers ---------------------------------------------------- */

/* Milliseconds on CLOCK_MONOTONIC, for bounded waits. */
static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleep for ms milliseconds (restarted on EINTR). */
static void sleep_ms(int64_t ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};

    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

/* Is a reply element a string (bulk or status)? */
static int is_str(const redisReply *r)
{
    return r != NULL &&
           (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

/* In a flat key/value array (SENTINEL MASTER, one entry of SENTINEL
 * REPLICAS), the value of key, or NULL. */
static const char *kv_get(const redisReply *r, const char *key)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (is_str(r->element[i]) && strcmp(r->element[i]->str, key) == 0)
            return is_str(r->element[i + 1]) ? r->element[i + 1]->str : NULL;
    return NULL;
}

/* Can port on 127.0.0.1 be bound now (as redis-server binds it, with
 * SO_REUSEADDR)? */
static int port_free(int port)
{
    struct sockaddr_in sa;
    int fd, one = 1, ok;

    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return ok;
}

/* Append text to s's redis.conf. 0 or -1. */
static int append_conf(const th_server *s, const char *text)
{
    char path[400];
    FILE *f;

    snprintf(path, sizeof(path), "%s/redis.conf", s->dir);
    f = fopen(path, "a");
    if (f == NULL) {
        fprintf(stderr, "topology: %s: %s\n", path, strerror(errno));
        return -1;
    }
    fputs(text, f);
    return fclose(f) == 0 ? 0 : -1;
}

/* Print the tail of path to stderr (explains a failed redis-cli or a
 * failover that did not happen). */
static void dump_file(const char *path)
{
    char buf[4096];
    FILE *f = fopen(path, "r");
    size_t n;

    if (f == NULL)
        return;
    if (fseek(f, 0, SEEK_END) == 0 && ftell(f) > (long)sizeof(buf) - 1)
        fseek(f, -((long)sizeof(buf) - 1), SEEK_END);
    else
        rewind(f);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    fprintf(stderr, "topology: --- %s ---\n%s\n", path, buf);
}

/* Print the tail of s's redis.log to stderr. */
static void dump_log(const th_server *s)
{
    char path[400];

    snprintf(path, sizeof(path), "%s/redis.log", s->dir);
    dump_file(path);
}

/* ---- raw queries ------------------------------------------------------- */

int th_role(const th_server *s, int *master_port)
{
    redisReply *r;
    int role = -1;

    if (master_port)
        *master_port = -1;
    if (s == NULL || s->pid <= 0)
        return -1;
    r = th_cmd(s, "ROLE");
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
        is_str(r->element[0])) {
        if (strcmp(r->element[0]->str, "master") == 0) {
            role = 1;
        } else if (strcmp(r->element[0]->str, "slave") == 0) {
            role = 0;
            if (master_port && r->elements >= 3 &&
                r->element[2]->type == REDIS_REPLY_INTEGER &&
                r->element[2]->integer > 0)
                *master_port = (int)r->element[2]->integer;
        }
    }
    if (r)
        freeReplyObject(r);
    return role;
}

int th_info_field(const th_server *s, const char *cmd, const char *field,
                  char *buf, size_t len)
{
    redisReply *r;
    size_t flen = strlen(field);
    int rc = -1;

    if (s == NULL || s->pid <= 0 || len == 0)
        return -1;
    r = th_cmd(s, cmd);
    if (r && is_str(r)) {
        for (const char *p = r->str; p && *p;) {
            const char *eol = strchr(p, '\n');
            size_t n = eol ? (size_t)(eol - p) : strlen(p);
            if (n > flen && strncmp(p, field, flen) == 0 && p[flen] == ':') {
                size_t v = n - flen - 1;
                if (v > 0 && p[flen + 1 + v - 1] == '\r')
                    v--;
                if (v >= len)
                    v = len - 1;
                memcpy(buf, p + flen + 1, v);
                buf[v] = '\0';
                rc = 0;
                break;
            }
            p = eol ? eol + 1 : NULL;
        }
    }
    if (r)
        freeReplyObject(r);
    return rc;
}

/* Is s a replica of master_port with its replication link up? */
static int replica_linked(const th_server *s, int master_port)
{
    char link[32];
    int mp;

    return th_role(s, &mp) == 0 && mp == master_port &&
           th_info_field(s, "INFO replication", "master_link_status", link,
                         sizeof(link)) == 0 &&
           strcmp(link, "up") == 0;
}

/* ---- Sentinel ----------------------------------------------------------- */

/* The path of the real redis-server binary: DLOCK_REDIS_SERVER, or the
 * first redis-server on PATH. 0 or -1. */
static int server_binary(char *buf, size_t len)
{
    const char *bin = getenv("DLOCK_REDIS_SERVER");
    const char *path = getenv("PATH");

    if (bin && bin[0]) {
        if (strchr(bin, '/')) {
            snprintf(buf, len, "%s", bin);
            return 0;
        }
    } else {
        bin = "redis-server";
    }
    if (path == NULL || path[0] == '\0')
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *colon = strchr(path, ':');
        size_t n = colon ? (size_t)(colon - path) : strlen(path);
        if (n > 0) {
            snprintf(buf, len, "%.*s/%s", (int)n, path, bin);
            if (access(buf, X_OK) == 0)
                return 0;
        }
        path += n + (colon ? 1 : 0);
    }
    fprintf(stderr, "topology: %s not found on PATH\n", bin);
    return -1;
}

/* Start one sentinel monitoring the master on master_port, running the
 * redis-sentinel symlink at link. 0 or -1. */
static int start_sentinel(th_server *s, const char *link, int master_port)
{
    char conf[512], *saved = NULL;
    const char *old = getenv("DLOCK_REDIS_SERVER");
    th_server_opts o;
    int rc;

    snprintf(conf, sizeof(conf),
             "sentinel monitor %s 127.0.0.1 %d %d\n"
             "sentinel down-after-milliseconds %s 1500\n"
             "sentinel failover-timeout %s 3000\n"
             "sentinel parallel-syncs %s 2\n",
             TH_SENTINEL_NAME, master_port, TH_SENTINEL_QUORUM,
             TH_SENTINEL_NAME, TH_SENTINEL_NAME, TH_SENTINEL_NAME);
    memset(&o, 0, sizeof(o));
    o.extra_conf = conf;
    if (old)
        saved = strdup(old);
    setenv("DLOCK_REDIS_SERVER", link, 1);
    rc = th_server_start(s, &o);
    if (saved) {
        setenv("DLOCK_REDIS_SERVER", saved, 1);
        free(saved);
    } else {
        unsetenv("DLOCK_REDIS_SERVER");
    }
    return rc;
}

/* Does sentinel s see both replicas, the two other sentinels, and a
 * quorum? */
static int sentinel_ready(const th_server *s)
{
    redisReply *r;
    int ok = 1;

    r = th_cmd(s, "SENTINEL REPLICAS %s", TH_SENTINEL_NAME);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY ||
        r->elements != TH_SENTINEL_DATA - 1)
        ok = 0;
    for (size_t i = 0; ok && i < r->elements; i++) {
        const char *flags = kv_get(r->element[i], "flags");
        const char *link = kv_get(r->element[i], "master-link-status");
        if (flags == NULL || strcmp(flags, "slave") != 0 || link == NULL ||
            strcmp(link, "ok") != 0)
            ok = 0;
    }
    if (r)
        freeReplyObject(r);
    if (!ok)
        return 0;
    r = th_cmd(s, "SENTINEL SENTINELS %s", TH_SENTINEL_NAME);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY ||
        r->elements != TH_SENTINEL_COUNT - 1)
        ok = 0;
    for (size_t i = 0; ok && i < r->elements; i++) {
        const char *flags = kv_get(r->element[i], "flags");
        if (flags == NULL || strcmp(flags, "sentinel") != 0)
            ok = 0;
    }
    if (r)
        freeReplyObject(r);
    if (!ok)
        return 0;
    r = th_cmd(s, "SENTINEL CKQUORUM %s", TH_SENTINEL_NAME);
    ok = r && is_str(r) && strncmp(r->str, "OK", 2) == 0;
    if (r)
        freeReplyObject(r);
    return ok;
}

int th_sentinel_start(th_sentinel *t)
{
    th_server_opts o;
    char conf[256], bin[512], link[400];
    int64_t deadline;
    int mport;

    memset(t, 0, sizeof(*t));
    memset(&o, 0, sizeof(o));
    o.extra_conf = TOPO_DATA_CONF;
    if (th_server_start(&t->data[0], &o) != 0)
        goto fail;
    mport = t->data[0].port;
    snprintf(conf, sizeof(conf), TOPO_DATA_CONF "replicaof 127.0.0.1 %d\n",
             mport);
    o.extra_conf = conf;
    for (int i = 1; i < TH_SENTINEL_DATA; i++)
        if (th_server_start(&t->data[i], &o) != 0)
            goto fail;
    deadline = now_ms() + TH_TOPO_WAIT_MS;
    for (int i = 1; i < TH_SENTINEL_DATA; i++) {
        while (!replica_linked(&t->data[i], mport)) {
            if (now_ms() > deadline) {
                fprintf(stderr, "topology: replica %d never synced\n",
                        t->data[i].port);
                goto fail;
            }
            sleep_ms(TOPO_POLL_MS);
        }
    }

    if (server_binary(bin, sizeof(bin)) != 0)
        goto fail;
    snprintf(link, sizeof(link), "%s/redis-sentinel", t->data[0].dir);
    if (symlink(bin, link) != 0) {
        fprintf(stderr, "topology: symlink %s: %s\n", link, strerror(errno));
        goto fail;
    }
    for (int i = 0; i < TH_SENTINEL_COUNT; i++)
        if (start_sentinel(&t->sentinels[i], link, mport) != 0)
            goto fail;
    deadline = now_ms() + TH_TOPO_WAIT_MS;
    for (int i = 0; i < TH_SENTINEL_COUNT; i++) {
        while (!sentinel_ready(&t->sentinels[i])) {
            if (now_ms() > deadline) {
                fprintf(stderr,
                        "topology: sentinel %d does not see the "
                        "replicas, the other sentinels or a quorum\n",
                        t->sentinels[i].port);
                goto fail;
            }
            sleep_ms(TOPO_POLL_MS);
        }
    }
    return 0;
fail:
    th_sentinel_stop(t);
    return -1;
}

void th_sentinel_stop(th_sentinel *t)
{
    for (int i = 0; i < TH_SENTINEL_COUNT; i++)
        th_server_stop(&t->sentinels[i]);
    for (int i = 0; i < TH_SENTINEL_DATA; i++)
        th_server_stop(&t->data[i]);
}

/* The master port that sentinel s reports, or -1. */
static int reported_master(const th_server *s)
{
    redisReply *r;
    int port = -1;

    if (s->pid <= 0)
        return -1;
    r = th_cmd(s, "SENTINEL GET-MASTER-ADDR-BY-NAME %s", TH_SENTINEL_NAME);
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        is_str(r->element[1]))
        port = atoi(r->element[1]->str);
    if (r)
        freeReplyObject(r);
    return port > 0 ? port : -1;
}

void th_sentinel_url(const th_sentinel *t, char *buf, size_t len)
{
    size_t off = (size_t)snprintf(buf, len, "redis+sentinel://");
    int k;
    for (k = 0; k < TH_SENTINEL_COUNT && off < len; k++)
        off += (size_t)snprintf(buf + off, len - off, "%s127.0.0.1:%d",
                                k ? "," : "", t->sentinels[k].port);
    if (off < len)
        snprintf(buf + off, len - off, "/%s", TH_SENTINEL_NAME);
}

int th_sentinel_master_port(const th_sentinel *t)
{
    for (int i = 0; i < TH_SENTINEL_COUNT; i++) {
        int port = reported_master(&t->sentinels[i]);
        if (port > 0)
            return port;
    }
    return -1;
}

th_server *th_sentinel_node(th_sentinel *t, int port)
{
    for (int i = 0; i < TH_SENTINEL_DATA; i++)
        if (t->data[i].dir[0] && t->data[i].port == port)
            return &t->data[i];
    return NULL;
}

/* Does sentinel s report a failover in progress (or no master)? */
static int failover_running(const th_server *s)
{
    redisReply *r = th_cmd(s, "SENTINEL MASTER %s", TH_SENTINEL_NAME);
    const char *flags = kv_get(r, "flags");
    int busy = flags == NULL || strstr(flags, "failover") != NULL;

    if (r)
        freeReplyObject(r);
    return busy;
}

int th_sentinel_wait_master(const th_sentinel *t, int old_port,
                            int64_t timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    int last = -1;

    for (;;) {
        int port = -1, agreed = 1, running = 0;

        for (int i = 0; agreed && i < TH_SENTINEL_COUNT; i++) {
            const th_server *s = &t->sentinels[i];
            int p;
            if (s->pid <= 0)
                continue;
            running++;
            p = reported_master(s);
            if (p < 0 || (port > 0 && p != port) || failover_running(s))
                agreed = 0;
            port = p;
        }
        if (running > 0 && agreed && port > 0 && port != old_port) {
            const th_server *m = NULL;
            for (int i = 0; i < TH_SENTINEL_DATA; i++)
                if (t->data[i].pid > 0 && t->data[i].port == port)
                    m = &t->data[i];
            if (m && th_role(m, NULL) == 1)
                return port;
        }
        last = port;
        if (now_ms() > deadline) {
            fprintf(stderr,
                    "topology: sentinels did not agree on a new master "
                    "(other than %d) in %lld ms; last seen %d\n",
                    old_port, (long long)timeout_ms, last);
            return -1;
        }
        sleep_ms(TOPO_POLL_MS);
    }
}

int th_sentinel_failover(th_sentinel *t)
{
    int old = th_sentinel_master_port(t);
    int64_t deadline = now_ms() + TH_TOPO_WAIT_MS;

    if (old < 0)
        return -1;
    /* A sentinel refuses (-INPROG, -NOGOODSLAVE) while an earlier
     * failover is still finishing or a replica has not reconnected:
     * ask the sentinels in turn until one takes it. */
    for (int i = 0;; i = (i + 1) % TH_SENTINEL_COUNT) {
        redisReply *r;
        int ok;

        if (t->sentinels[i].pid <= 0) {
            if (now_ms() > deadline)
                return -1;
            continue;
        }
        r = th_cmd(&t->sentinels[i], "SENTINEL FAILOVER %s", TH_SENTINEL_NAME);
        ok = r && r->type == REDIS_REPLY_STATUS;
        if (!ok && now_ms() > deadline) {
            fprintf(stderr, "topology: SENTINEL FAILOVER: %s\n",
                    r && r->type == REDIS_REPLY_ERROR ? r->str : "no answer");
            if (r)
                freeReplyObject(r);
            return -1;
        }
        if (r)
            freeReplyObject(r);
        if (ok)
            break;
        sleep_ms(200);
    }
    return th_sentinel_wait_master(t, old, TH_TOPO_WAIT_MS);
}

int th_sentinel_kill_master(th_sentinel *t)
{
    int old = th_sentinel_master_port(t);
    th_server *m = old > 0 ? th_sentinel_node(t, old) : NULL;

    if (m == NULL || m->pid <= 0) {
        fprintf(stderr, "topology: no running master to kill\n");
        return -1;
    }
    th_server_kill9(m);
    return th_sentinel_wait_master(t, old, TH_TOPO_WAIT_MS);
}

/* A data node that answers ROLE master while every running sentinel
 * names another one, with no failover in progress (an old master after a
 * SENTINEL FAILOVER, or one restarted empty after kill -9), is told
 * REPLICAOF that master: what the sentinels do themselves, but only some
 * 8-10 s later (they let a replica that says master be for four publish
 * periods before they convert it). Nothing when the sentinels disagree,
 * have no master, are in a failover, or their master is not running as
 * one. */
static void demote_stale_masters(const th_sentinel *t)
{
    int m = -1;

    for (int i = 0; i < TH_SENTINEL_COUNT; i++) {
        const th_server *s = &t->sentinels[i];
        int p;
        if (s->pid <= 0)
            continue;
        p = reported_master(s);
        if (p < 0 || (m > 0 && p != m) || failover_running(s))
            return;
        m = p;
    }
    if (m < 0)
        return;
    for (int i = 0; i < TH_SENTINEL_DATA; i++)
        if (t->data[i].port == m && th_role(&t->data[i], NULL) != 1)
            return;
    for (int i = 0; i < TH_SENTINEL_DATA; i++) {
        const th_server *s = &t->data[i];
        redisReply *r;
        if (s->pid <= 0 || s->port == m || th_role(s, NULL) != 1)
            continue;
        r = th_cmd(s, "REPLICAOF 127.0.0.1 %d", m);
        if (r)
            freeReplyObject(r);
    }
}

int th_sentinel_settle(const th_sentinel *t, int64_t timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;

    for (;;) {
        int m, ok;

        demote_stale_masters(t);
        m = th_sentinel_master_port(t);
        ok = m > 0;

        for (int i = 0; ok && i < TH_SENTINEL_DATA; i++) {
            const th_server *s = &t->data[i];
            if (s->pid <= 0)
                continue;
            if (s->port == m)
                ok = th_role(s, NULL) == 1;
            else
                ok = replica_linked(s, m);
        }
        if (ok)
            return 0;
        if (now_ms() > deadline) {
            fprintf(stderr, "topology: sentinel deployment did not settle "
                            "(one master, replicas linked)\n");
            return -1;
        }
        sleep_ms(TOPO_POLL_MS * 4);
    }
}

/* ---- Cluster ------------------------------------------------------------ */

/* Start s as a cluster node: a harness server on a port whose bus port
 * (+10000) exists and is free, restarted with cluster mode on. 0 or -1. */
static int start_cluster_node(th_server *s)
{
    static const char conf[] =
        TOPO_DATA_CONF "cluster-enabled yes\n"
                       "cluster-config-file nodes.conf\n"
                       "cluster-node-timeout 2000\n"
                       "cluster-replica-validity-factor 0\n"
                       "cluster-allow-replica-migration no\n"
                       "cluster-require-full-coverage yes\n";

    for (int attempt = 0; attempt < TOPO_NODE_ATTEMPTS; attempt++) {
        if (th_server_start(s, NULL) != 0)
            return -1;
        if (s->port > 65535 - 10000 || !port_free(s->port + 10000)) {
            th_server_stop(s);
            continue;
        }
        th_server_kill9(s);
        if (append_conf(s, conf) != 0) {
            th_server_stop(s);
            return -1;
        }
        if (th_server_restart(s) == 0)
            return 0;
        /* The bus port was taken meanwhile: another port. */
        th_server_stop(s);
    }
    fprintf(stderr, "topology: no port with a free bus port found\n");
    return -1;
}

/* Run redis-cli --cluster create over all nodes, output to a log in the
 * first node's dir. 0 or -1. */
static int cluster_create(th_cluster *c)
{
    char addrs[TH_CLUSTER_NODES][32], log[400];
    char *argv[TH_CLUSTER_NODES + 8];
    int n = 0, st, fd;
    pid_t pid, parent = getpid();
    int64_t deadline;

    argv[n++] = "redis-cli";
    argv[n++] = "--cluster";
    argv[n++] = "create";
    for (int i = 0; i < TH_CLUSTER_NODES; i++) {
        snprintf(addrs[i], sizeof(addrs[i]), "127.0.0.1:%d", c->nodes[i].port);
        argv[n++] = addrs[i];
    }
    argv[n++] = "--cluster-replicas";
    argv[n++] = "1";
    argv[n++] = "--cluster-yes";
    argv[n] = NULL;
    snprintf(log, sizeof(log), "%s/cluster-create.log", c->nodes[0].dir);

    pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(126);
        fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        fd = open("/dev/null", O_RDONLY);
        if (fd >= 0)
            dup2(fd, 0);
        execvp(argv[0], argv);
        _exit(127);
    }
    deadline = now_ms() + TOPO_CREATE_TIMEOUT_MS;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 || now_ms() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            fprintf(stderr, "topology: redis-cli --cluster create timed "
                            "out\n");
            dump_file(log);
            return -1;
        }
        sleep_ms(TOPO_POLL_MS);
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "topology: redis-cli --cluster create failed\n");
        dump_file(log);
        return -1;
    }
    return 0;
}

/* Fill owner[0..16383] with the master port of every slot as node s sees
 * it (CLUSTER SLOTS; -1 for an unassigned slot). 0 or -1. */
static int slot_map(const th_server *s, int *owner)
{
    redisReply *r;

    for (int i = 0; i < TH_CLUSTER_SLOTS; i++)
        owner[i] = -1;
    if (s->pid <= 0)
        return -1;
    r = th_cmd(s, "CLUSTER SLOTS");
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        if (r)
            freeReplyObject(r);
        return -1;
    }
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        long long lo, hi, port;
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY ||
            e->element[2]->elements < 2 ||
            e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        lo = e->element[0]->integer;
        hi = e->element[1]->integer;
        port = e->element[2]->element[1]->integer;
        for (long long k = lo; k <= hi && k < TH_CLUSTER_SLOTS; k++)
            if (k >= 0)
                owner[k] = (int)port;
    }
    freeReplyObject(r);
    return 0;
}

/* Who is whose replica, as node s sees it (CLUSTER NODES): "P=M;" for a
 * master on port P, "P>Q;" for a replica of the master on port Q, in
 * ascending port order, into buf. 0 or -1. */
static int role_map(const th_server *s, char *buf, size_t len)
{
    struct gossip_node {
        int port, master;
        char id[48], of[48];
    } n[TH_CLUSTER_NODES * 2];
    size_t count = 0, used = 0;
    redisReply *r;

    buf[0] = '\0';
    if (s->pid <= 0)
        return -1;
    r = th_cmd(s, "CLUSTER NODES");
    if (r == NULL || !is_str(r)) {
        if (r)
            freeReplyObject(r);
        return -1;
    }
    for (char *line = r->str; line && *line && count < 2 * TH_CLUSTER_NODES;) {
        char *eol = strchr(line, '\n');
        char addr[128], flags[128];
        const char *colon;
        if (eol)
            *eol = '\0';
        if (sscanf(line, "%47s %127s %127s %47s", n[count].id, addr, flags,
                   n[count].of) == 4 &&
            (colon = strrchr(addr, ':')) != NULL) {
            /* "ip:port@cport" (and ",hostname" after it in 7.x). */
            n[count].port = atoi(colon + 1);
            n[count].master = strstr(flags, "master") != NULL;
            count++;
        }
        line = eol ? eol + 1 : NULL;
    }
    freeReplyObject(r);
    /* Selection sort by port: at most a dozen entries. */
    for (size_t i = 0; i < count; i++) {
        size_t min = i;
        for (size_t j = i + 1; j < count; j++)
            if (n[j].port < n[min].port)
                min = j;
        if (min != i) {
            struct gossip_node tmp = n[i];
            n[i] = n[min];
            n[min] = tmp;
        }
    }
    for (size_t i = 0; i < count; i++) {
        int of = -1, w;
        for (size_t j = 0; !n[i].master && j < count; j++)
            if (strcmp(n[j].id, n[i].of) == 0)
                of = n[j].port;
        if (n[i].master)
            w = snprintf(buf + used, len - used, "%d=M;", n[i].port);
        else
            w = snprintf(buf + used, len - used, "%d>%d;", n[i].port, of);
        if (w < 0 || (size_t)w >= len - used)
            return -1;
        used += (size_t)w;
    }
    return 0;
}

/* Does role map map (from role_map) agree with what s says of itself
 * (ROLE)? */
static int role_map_matches(const char *map, const th_server *s)
{
    char want[32];
    int mp, role = th_role(s, &mp);

    if (role < 0)
        return 0;
    if (role == 1)
        snprintf(want, sizeof(want), "%d=M;", s->port);
    else
        snprintf(want, sizeof(want), "%d>%d;", s->port, mp);
    /* Entries start at the map's start or after a ';'. */
    for (const char *p = strstr(map, want); p; p = strstr(p + 1, want))
        if (p == map || p[-1] == ';')
            return 1;
    return 0;
}

/* One look at the whole cluster: every running node says
 * cluster_state:ok, every replica's link is up, all nodes agree on who
 * replicates whom (as each node's ROLE says) and have the same slot map
 * with every slot assigned, and in it slot `slot` (when >= 0) belongs to
 * want_port, and no slot to gone_port (when > 0). */
static int cluster_healthy(const th_cluster *c, int slot, int want_port,
                           int gone_port)
{
    int *first = malloc(sizeof(int) * TH_CLUSTER_SLOTS);
    int *other = malloc(sizeof(int) * TH_CLUSTER_SLOTS);
    int have_first = 0, ok = first != NULL && other != NULL;
    char roles0[512] = "", roles[512];

    for (int i = 0; ok && i < TH_CLUSTER_NODES; i++) {
        const th_server *s = &c->nodes[i];
        char state[32];
        int role, mp;

        if (s->pid <= 0)
            continue;
        if (th_info_field(s, "CLUSTER INFO", "cluster_state", state,
                          sizeof(state)) != 0 ||
            strcmp(state, "ok") != 0) {
            ok = 0;
            break;
        }
        role = th_role(s, &mp);
        if (role < 0 || (role == 0 && !replica_linked(s, mp))) {
            ok = 0;
            break;
        }
        if (role_map(s, roles, sizeof(roles)) != 0 ||
            (roles0[0] && strcmp(roles0, roles) != 0)) {
            ok = 0;
            break;
        }
        memcpy(roles0, roles, sizeof(roles0));
        if (slot_map(s, have_first ? other : first) != 0) {
            ok = 0;
            break;
        }
        if (have_first) {
            ok = memcmp(first, other, sizeof(int) * TH_CLUSTER_SLOTS) == 0;
            continue;
        }
        have_first = 1;
        for (int k = 0; ok && k < TH_CLUSTER_SLOTS; k++)
            if (first[k] < 0 || (gone_port > 0 && first[k] == gone_port))
                ok = 0;
        if (ok && slot >= 0 && first[slot] != want_port)
            ok = 0;
    }
    ok = ok && have_first;
    for (int i = 0; ok && i < TH_CLUSTER_NODES; i++)
        if (c->nodes[i].pid > 0)
            ok = role_map_matches(roles0, &c->nodes[i]);
    free(first);
    free(other);
    return ok;
}

/* Wait (bounded) for cluster_healthy(). 0 or -1. */
static int cluster_wait(const th_cluster *c, int slot, int want_port,
                        int gone_port, int64_t timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;

    while (!cluster_healthy(c, slot, want_port, gone_port)) {
        if (now_ms() > deadline) {
            fprintf(stderr, "topology: cluster not ok / nodes disagree on "
                            "the slot map\n");
            return -1;
        }
        sleep_ms(TOPO_POLL_MS * 2);
    }
    return 0;
}

int th_cluster_wait_ok(const th_cluster *c, int64_t timeout_ms)
{
    return cluster_wait(c, -1, -1, -1, timeout_ms);
}

int th_cluster_start(th_cluster *c)
{
    memset(c, 0, sizeof(*c));
    for (int i = 0; i < TH_CLUSTER_NODES; i++)
        if (start_cluster_node(&c->nodes[i]) != 0)
            goto fail;
    if (cluster_create(c) != 0)
        goto fail;
    if (th_cluster_wait_ok(c, TH_TOPO_WAIT_MS) != 0)
        goto fail;
    return 0;
fail:
    th_cluster_stop(c);
    return -1;
}

void th_cluster_stop(th_cluster *c)
{
    for (int i = 0; i < TH_CLUSTER_NODES; i++)
        th_server_stop(&c->nodes[i]);
}

th_server *th_cluster_node(th_cluster *c, int port)
{
    for (int i = 0; i < TH_CLUSTER_NODES; i++)
        if (c->nodes[i].dir[0] && c->nodes[i].port == port)
            return &c->nodes[i];
    return NULL;
}

/* The first running node (NULL if none). */
static const th_server *any_node(const th_cluster *c)
{
    for (int i = 0; i < TH_CLUSTER_NODES; i++)
        if (c->nodes[i].pid > 0)
            return &c->nodes[i];
    return NULL;
}

int th_cluster_slot_port(const th_cluster *c, int slot)
{
    const th_server *s = any_node(c);
    int *owner, port = -1;

    if (s == NULL || slot < 0 || slot >= TH_CLUSTER_SLOTS)
        return -1;
    owner = malloc(sizeof(int) * TH_CLUSTER_SLOTS);
    if (owner && slot_map(s, owner) == 0)
        port = owner[slot];
    free(owner);
    return port;
}

int th_cluster_keyslot(const th_cluster *c, const char *key, size_t len)
{
    const th_server *s = any_node(c);
    redisReply *r;
    int slot = -1;

    if (s == NULL)
        return -1;
    r = th_cmd(s, "CLUSTER KEYSLOT %b", key, len);
    if (r && r->type == REDIS_REPLY_INTEGER)
        slot = (int)r->integer;
    if (r)
        freeReplyObject(r);
    return slot;
}

int th_cluster_key_port(const th_cluster *c, const char *key, size_t len)
{
    int slot = th_cluster_keyslot(c, key, len);

    return slot < 0 ? -1 : th_cluster_slot_port(c, slot);
}

int th_cluster_replica_port(const th_cluster *c, int master_port)
{
    for (int i = 0; i < TH_CLUSTER_NODES; i++) {
        int mp;
        if (th_role(&c->nodes[i], &mp) == 0 && mp == master_port)
            return c->nodes[i].port;
    }
    return -1;
}

int th_cluster_failover(th_cluster *c, int replica_port)
{
    th_server *rep = th_cluster_node(c, replica_port);
    th_server *old;
    redisReply *r;
    int64_t deadline = now_ms() + TH_TOPO_WAIT_MS;
    int old_port, ok;

    if (rep == NULL || th_role(rep, &old_port) != 0 || old_port < 0) {
        fprintf(stderr, "topology: %d is not a replica\n", replica_port);
        return -1;
    }
    old = th_cluster_node(c, old_port);
    r = th_cmd(rep, "CLUSTER FAILOVER");
    ok = r && r->type == REDIS_REPLY_STATUS;
    if (!ok)
        fprintf(stderr, "topology: CLUSTER FAILOVER: %s\n",
                r && r->type == REDIS_REPLY_ERROR ? r->str : "no answer");
    if (r)
        freeReplyObject(r);
    if (!ok)
        return -1;
    while (th_role(rep, NULL) != 1 ||
           (old && old->pid > 0 && !replica_linked(old, replica_port))) {
        if (now_ms() > deadline) {
            char link[32] = "?";
            int mp = -1, role = old ? th_role(old, &mp) : -1;
            if (old)
                th_info_field(old, "INFO replication", "master_link_status",
                              link, sizeof(link));
            fprintf(stderr,
                    "topology: roles of %d and %d did not swap (%d: role "
                    "%d; %d: role %d, master %d, link %s)\n",
                    replica_port, old_port, replica_port, th_role(rep, NULL),
                    old_port, role, mp, link);
            dump_log(rep);
            if (old)
                dump_log(old);
            return -1;
        }
        sleep_ms(TOPO_POLL_MS);
    }
    return cluster_wait(c, -1, -1, old_port,
                        deadline - now_ms() > 1000 ? deadline - now_ms()
                                                   : 1000);
}

/* The node id of s (CLUSTER MYID) into buf. 0 or -1. */
static int node_id(const th_server *s, char *buf, size_t len)
{
    redisReply *r = th_cmd(s, "CLUSTER MYID");
    int rc = -1;

    if (r && is_str(r) && strlen(r->str) < len) {
        strcpy(buf, r->str);
        rc = 0;
    }
    if (r)
        freeReplyObject(r);
    return rc;
}

/* Run a command expected to answer +OK; report anything else. */
static int cmd_ok(const th_server *s, const char *what, redisReply *r)
{
    int ok = r && r->type == REDIS_REPLY_STATUS;

    if (!ok)
        fprintf(stderr, "topology: %s on %d: %s\n", what, s->port,
                r && r->type == REDIS_REPLY_ERROR ? r->str : "no answer");
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

int th_cluster_migrate_begin(th_cluster *c, int slot, int to_port,
                             th_migration *m)
{
    th_server *from, *to = th_cluster_node(c, to_port);

    memset(m, 0, sizeof(*m));
    m->slot = slot;
    m->to_port = to_port;
    m->from_port = th_cluster_slot_port(c, slot);
    from = th_cluster_node(c, m->from_port);
    if (from == NULL || to == NULL || from == to || th_role(to, NULL) != 1) {
        fprintf(stderr, "topology: cannot move slot %d from %d to %d\n", slot,
                m->from_port, to_port);
        return -1;
    }
    if (node_id(from, m->from_id, sizeof(m->from_id)) != 0 ||
        node_id(to, m->to_id, sizeof(m->to_id)) != 0)
        return -1;
    if (cmd_ok(to, "SETSLOT IMPORTING",
               th_cmd(to, "CLUSTER SETSLOT %d IMPORTING %s", slot,
                      m->from_id)) != 0 ||
        cmd_ok(from, "SETSLOT MIGRATING",
               th_cmd(from, "CLUSTER SETSLOT %d MIGRATING %s", slot,
                      m->to_id)) != 0)
        return -1;
    return 0;
}

int th_cluster_migrate_keys(th_cluster *c, const th_migration *m, int max)
{
    th_server *from = th_cluster_node(c, m->from_port);
    int moved = 0;

    if (from == NULL)
        return -1;
    while (max <= 0 || moved < max) {
        int batch = max <= 0 || max - moved > 100 ? 100 : max - moved;
        redisReply *keys =
            th_cmd(from, "CLUSTER GETKEYSINSLOT %d %d", m->slot, batch);
        size_t n;

        if (keys == NULL || keys->type != REDIS_REPLY_ARRAY) {
            if (keys)
                freeReplyObject(keys);
            return -1;
        }
        n = keys->elements;
        for (size_t i = 0; i < n; i++) {
            const redisReply *k = keys->element[i];
            redisReply *r = th_cmd(from, "MIGRATE 127.0.0.1 %d %b 0 5000",
                                   m->to_port, k->str, k->len);
            if (cmd_ok(from, "MIGRATE", r) != 0) {
                freeReplyObject(keys);
                return -1;
            }
            moved++;
        }
        freeReplyObject(keys);
        if (n == 0)
            break;
    }
    return moved;
}

int th_cluster_migrate_finish(th_cluster *c, const th_migration *m)
{
    th_server *from = th_cluster_node(c, m->from_port);
    th_server *to = th_cluster_node(c, m->to_port);

    if (from == NULL || to == NULL || th_cluster_migrate_keys(c, m, 0) < 0)
        return -1;
    /* The specification's order: the target first (it then owns the slot
     * and stops needing ASKING), then the source, then everyone else. */
    if (cmd_ok(to, "SETSLOT NODE",
               th_cmd(to, "CLUSTER SETSLOT %d NODE %s", m->slot, m->to_id)) !=
            0 ||
        cmd_ok(from, "SETSLOT NODE",
               th_cmd(from, "CLUSTER SETSLOT %d NODE %s", m->slot, m->to_id)) !=
            0)
        return -1;
    for (int i = 0; i < TH_CLUSTER_NODES; i++) {
        th_server *s = &c->nodes[i];
        if (s == from || s == to || th_role(s, NULL) != 1)
            continue;
        if (cmd_ok(s, "SETSLOT NODE",
                   th_cmd(s, "CLUSTER SETSLOT %d NODE %s", m->slot,
                          m->to_id)) != 0)
            return -1;
    }
    return cluster_wait(c, m->slot, m->to_port, -1, TH_TOPO_WAIT_MS);
}

int th_cluster_migrate_slot(th_cluster *c, int slot, int to_port)
{
    th_migration m;

    if (th_cluster_migrate_begin(c, slot, to_port, &m) != 0)
        return -1;
    return th_cluster_migrate_finish(c, &m);
}
