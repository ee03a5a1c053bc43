/*
 * sentinel.c - the Sentinel topology: one master, found by asking the
 * sentinels, followed across failovers.
 *
 * Discovery (locate): ask every sentinel, starting with the one that
 * answered last, SENTINEL get-master-addr-by-name NAME; the address a
 * majority of them names is connected to and checked (node.c: INFO says
 * role:master — a sentinel can be stale, and then its answer is a
 * replica or nothing) and becomes the node's address (dlock__node_adopt).
 * A minority's address is taken only when the majority's is its replica
 * (a failover not all sentinels have seen yet); sentinels that name two
 * masters are an error, not a guess. A node is located on first use, and again when
 * the node layer or the engine suspects it moved (READONLY, LOADING,
 * a refused or dropped connection).
 *
 * The watch: a thread, started with the first locate, keeps a pub/sub
 * connection to one sentinel (the next one when it fails) subscribed to
 * +switch-master. A switch of our master locates it again at once, so
 * that callers, waiters and the watchdog find the new master without
 * paying the discovery, and the lock-delay starts before anyone is
 * granted anything there. After every (re)subscription it locates once
 * too: a switch announced while it was not listening is not missed.
 *
 * Locking: mu serialises locating (I/O under it, bounded by the caller's
 * deadline); the watch thread's own state is its own. Nothing here takes
 * a node's mutex except through node.c.
 */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "io/net.h"
#include "topo/sentinel.h"

typedef struct sentinel {
    dlock__nodeset *ns;
    dlock__sentinel_url url; /* sentinels carry the sentinel credentials */
    pthread_mutex_t mu;      /* locating; first */
    int first;               /* the sentinel that answered last */

    /* The watch thread. */
    pthread_mutex_t wmu; /* started */
    pthread_t thread;
    int started;
    _Atomic int stop;
    int wake_fd;
    _Atomic uint64_t switches; /* +switch-master of our master seen */
    _Atomic int watching;      /* subscribed right now */
} sentinel;

/* The one node of a Sentinel set. */
#define NODE 0

/* ---- asking a sentinel -------------------------------------------------- */

/* Outcomes of asking one sentinel. */
enum { ASK_ADDR, ASK_UNKNOWN, ASK_FAILED };

/* Ask sentinel k for the master's address: ASK_ADDR with host/port
 * filled, ASK_UNKNOWN (it does not know the name), ASK_FAILED (msg
 * says why). */
static int ask(sentinel *s, int k, int64_t deadline_ms, char *host,
               size_t hostlen, int *port, char *msg, size_t msglen)
{
    const dlock__endpoint *ep = &s->url.sentinel[k];
    const char *argv[3] = {"SENTINEL", "get-master-addr-by-name",
                           s->url.master};
    dlock__conn *c = NULL;
    redisReply *r = NULL;
    int64_t dl = dlock__now_ms() + s->ns->connect_timeout_ms;
    int rc, out = ASK_FAILED;

    if (deadline_ms < dl)
        dl = deadline_ms;
    rc = dlock__conn_open(&c, ep, s->ns->tls, dl, msg, msglen);
    if (rc == DLOCK_OK)
        rc = dlock__conn_append_argv(c, 3, argv, NULL);
    if (rc == DLOCK_OK)
        rc = dlock__conn_roundtrip(c, 1, &r, dl, -1, msg, msglen);
    dlock__conn_close(c);
    if (rc != DLOCK_OK)
        return ASK_FAILED;
    if (r->type == REDIS_REPLY_NIL) {
        out = ASK_UNKNOWN;
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
               r->element[0]->type == REDIS_REPLY_STRING &&
               r->element[1]->type == REDIS_REPLY_STRING &&
               r->element[0]->len < hostlen) {
        long p = strtol(r->element[1]->str, NULL, 10);
        if (p > 0 && p < 65536) {
            memcpy(host, r->element[0]->str, r->element[0]->len + 1);
            *port = (int)p;
            out = ASK_ADDR;
        } else {
            snprintf(msg, msglen, "%s: bad port in its answer", ep->display);
        }
    } else if (r->type == REDIS_REPLY_ERROR) {
        snprintf(msg, msglen, "%s: %.120s", ep->display, r->str);
    } else {
        snprintf(msg, msglen,
                 "%s: unexpected answer to SENTINEL "
                 "get-master-addr-by-name (not a sentinel?)",
                 ep->display);
    }
    freeReplyObject(r);
    return out;
}

/* A data-node endpoint for host:port with the URL's kind, credentials
 * and db; NULL when out of memory. */
static dlock__endpoint *data_endpoint(const sentinel *s, const char *host,
                                      int port)
{
    dlock__endpoint *ep = calloc(1, sizeof *ep);
    size_t dl = strlen(host) + 16;
    if (ep == NULL)
        return NULL;
    ep->kind = s->url.tls ? DLOCK__EP_TLS : DLOCK__EP_TCP;
    ep->host = strdup(host);
    ep->port = port;
    ep->db = s->url.db;
    ep->user = s->url.user != NULL ? strdup(s->url.user) : NULL;
    ep->password = s->url.password != NULL ? strdup(s->url.password) : NULL;
    ep->display = malloc(dl);
    if (ep->host == NULL || ep->display == NULL ||
        (s->url.user != NULL && ep->user == NULL) ||
        (s->url.password != NULL && ep->password == NULL)) {
        dlock__endpoint_clear(ep);
        free(ep);
        return NULL;
    }
    snprintf(ep->display, dl, strchr(host, ':') != NULL ? "[%s]:%d" : "%s:%d",
             host, port);
    return ep;
}

static void watch_start(sentinel *s);

/* Append "; text" to the summary sum (len bytes), as far as it fits. */
static void note(char *sum, size_t len, const char *text)
{
    size_t used = strlen(sum), room, tl;
    if (used + 3 >= len)
        return;
    if (used > 0) {
        memcpy(sum + used, "; ", 2);
        used += 2;
    }
    room = len - used - 1;
    tl = strlen(text);
    if (tl > room)
        tl = room; /* cut where it does not fit */
    memcpy(sum + used, text, tl);
    sum[used + tl] = '\0';
}

/* An address the sentinels named, and how many named it. */
typedef struct candidate {
    char host[256];
    int port;
    int votes;
    char display[280];
} candidate;

/* Ask every sentinel (the last one that answered first); fill cand[]
 * (distinct addresses, most votes first) and the counts. Returns the
 * number of candidates. */
static int poll_sentinels(sentinel *s, int64_t deadline_ms, candidate *cand,
                          int *answered, int *unknown, char *sum, size_t sumlen)
{
    char msg[DLOCK__ERRLEN], host[256];
    int k, j, port = 0, n = 0;
    for (k = 0; k < s->url.n; k++) {
        int idx = (s->first + k) % s->url.n, rc;
        if (dlock__now_ms() >= deadline_ms) {
            note(sum, sumlen, "out of time");
            break;
        }
        msg[0] = '\0';
        rc =
            ask(s, idx, deadline_ms, host, sizeof host, &port, msg, sizeof msg);
        if (rc == ASK_FAILED) {
            note(sum, sumlen, msg);
            continue;
        }
        (*answered)++;
        if (rc == ASK_UNKNOWN) {
            (*unknown)++;
            snprintf(msg, sizeof msg, "%s: no master named \"%s\"",
                     s->url.sentinel[idx].display, s->url.master);
            note(sum, sumlen, msg);
            continue;
        }
        for (j = 0; j < n; j++)
            if (cand[j].port == port && strcmp(cand[j].host, host) == 0)
                break;
        if (j == n) {
            memset(&cand[n], 0, sizeof cand[n]);
            snprintf(cand[n].host, sizeof cand[n].host, "%s", host);
            cand[n].port = port;
            snprintf(cand[n].display, sizeof cand[n].display,
                     strchr(host, ':') != NULL ? "[%s]:%d" : "%s:%d", host,
                     port);
            n++;
        }
        if (cand[j].votes++ == 0 && j == 0)
            s->first = idx; /* ask the one that named it first next time */
    }
    /* Most votes first (a handful of entries: insertion sort). */
    for (k = 1; k < n; k++)
        for (j = k; j > 0 && cand[j].votes > cand[j - 1].votes; j--) {
            candidate t = cand[j];
            cand[j] = cand[j - 1];
            cand[j - 1] = t;
        }
    return n;
}

/* Try candidate c as node NODE's master. DLOCK_OK when adopted; else the
 * error, with the master of a replica in master_of. */
static int try_candidate(sentinel *s, const candidate *c, int64_t deadline_ms,
                         char *master_of, size_t mlen, char *sum, size_t sumlen)
{
    char msg[DLOCK__ERRLEN], said[3 * DLOCK__ERRLEN];
    dlock__endpoint *ep = data_endpoint(s, c->host, c->port);
    int rc;
    if (ep == NULL)
        return DLOCK_ENOMEM;
    rc = dlock__node_adopt(s->ns, NODE, ep, deadline_ms, master_of, mlen, msg,
                           sizeof msg);
    if (rc != DLOCK_OK) {
        snprintf(said, sizeof said, "%d sentinel(s) name %s: %s", c->votes,
                 c->display, msg);
        note(sum, sumlen, said);
    }
    return rc;
}

/*
 * Locate node NODE (see node.h, dlock__locate_fn). Every sentinel is
 * asked; the address named by a majority of those that named one is
 * tried first and wins when it checks as a master. Another address wins
 * only when it checks as a master and the majority's address is its
 * replica (a failover the other sentinels have not seen yet): sentinels
 * that name two masters (a rogue sentinel, a split) give DLOCK_ESERVER,
 * never a guess. Failing that: DLOCK_EINVAL when every sentinel that
 * answered does not know the name, DLOCK_EIO when none answered,
 * DLOCK_ESERVER when they named no master that checked.
 */
static int locate(dlock__nodeset *ns, int i, int64_t deadline_ms, char *err,
                  size_t errlen)
{
    sentinel *s = ns->topo;
    candidate cand[DLOCK__SENTINELS_MAX];
    char sum[DLOCK__ERRLEN] = "", master_of[80];
    int n, k, answered = 0, unknown = 0, voters = 0, rc = DLOCK_ESERVER;

    (void)i;
    watch_start(s);
    pthread_mutex_lock(&s->mu);
    if (!atomic_load(&ns->node[NODE].stale) &&
        dlock__node_addr(&ns->node[NODE])->host != NULL) {
        /* Another thread located it while this one waited. */
        pthread_mutex_unlock(&s->mu);
        return DLOCK_OK;
    }
    n = poll_sentinels(s, deadline_ms, cand, &answered, &unknown, sum,
                       sizeof sum);
    for (k = 0; k < n; k++)
        voters += cand[k].votes;
    if (n > 0) {
        master_of[0] = '\0';
        if (2 * cand[0].votes > voters)
            rc = try_candidate(s, &cand[0], deadline_ms, master_of,
                               sizeof master_of, sum, sizeof sum);
        else
            rc = DLOCK_ESERVER; /* no majority: only a proven switch */
        for (k = 1; rc != DLOCK_OK && rc != DLOCK_ENOMEM && k < n; k++) {
            /* The majority's address is a replica of this one: the
             * failover happened, some sentinels have not seen it. */
            if (strcmp(master_of, cand[k].display) != 0)
                continue;
            rc = try_candidate(s, &cand[k], deadline_ms, NULL, 0, sum,
                               sizeof sum);
        }
        if (rc != DLOCK_OK && rc != DLOCK_ENOMEM && n > 1 &&
            2 * cand[0].votes <= voters) {
            char dis[3 * DLOCK__ERRLEN];
            snprintf(dis, sizeof dis,
                     "the sentinels disagree: %d name %s, %d name %s%s",
                     cand[0].votes, cand[0].display, cand[1].votes,
                     cand[1].display, n > 2 ? ", and more" : "");
            note(sum, sizeof sum, dis);
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (rc == DLOCK_OK)
        return DLOCK_OK;
    if (rc == DLOCK_ENOMEM)
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    if (answered > 0 && unknown == answered)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "no sentinel knows a master named \"%s\" (%s)",
                           s->url.master, sum);
    if (answered == 0)
        return dlock__fail(err, errlen, DLOCK_EIO,
                           "no sentinel answered for master \"%s\" (%s)",
                           s->url.master, sum);
    return dlock__fail(err, errlen, DLOCK_ESERVER,
                       "the sentinels named no usable master \"%s\" (%s)",
                       s->url.master, sum);
}

/* ---- the +switch-master watch ------------------------------------------ */

/* A push on the watch connection: a switch of our master locates it
 * again. */
static void on_switch(sentinel *s, const redisReply *r)
{
    const redisReply *m;
    size_t nl = strlen(s->url.master);
    char err[DLOCK__ERRLEN];
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        strcmp(r->element[0]->str, "message") != 0)
        return;
    m = r->element[2];
    /* "NAME old-ip old-port new-ip new-port" */
    if (m->type != REDIS_REPLY_STRING || m->len <= nl ||
        memcmp(m->str, s->url.master, nl) != 0 || m->str[nl] != ' ')
        return;
    atomic_fetch_add(&s->switches, 1);
    dlock__node_suspect(s->ns, NODE);
    locate(s->ns, NODE, dlock__now_ms() + 2 * s->ns->connect_timeout_ms, err,
           sizeof err);
}

/* Subscribe to +switch-master on sentinel k. The connection, or NULL. */
static dlock__conn *watch_connect(sentinel *s, int k)
{
    const char *argv[2] = {"SUBSCRIBE", "+switch-master"};
    dlock__conn *c = NULL;
    redisReply *r = NULL;
    char err[DLOCK__ERRLEN];
    int64_t dl = dlock__now_ms() + s->ns->connect_timeout_ms;
    int rc = dlock__conn_open(&c, &s->url.sentinel[k], s->ns->tls, dl, err,
                              sizeof err);
    if (rc == DLOCK_OK)
        rc = dlock__conn_append_argv(c, 2, argv, NULL);
    if (rc == DLOCK_OK)
        rc = dlock__conn_roundtrip(c, 1, &r, dl, s->wake_fd, err, sizeof err);
    if (rc == DLOCK_OK && (r->type != REDIS_REPLY_ARRAY || r->elements != 3))
        rc = DLOCK_EPROTO;
    if (r != NULL)
        freeReplyObject(r);
    if (rc != DLOCK_OK) {
        dlock__conn_close(c);
        return NULL;
    }
    return c;
}

/* Follow one watch connection until it fails or the thread stops. */
static void watch_follow(sentinel *s, dlock__conn *c)
{
    char err[DLOCK__ERRLEN];
    struct pollfd pfd[2];
    for (;;) {
        redisReply *r = NULL;
        int got;
        while ((got = dlock__conn_pop_reply(c, &r, err, sizeof err)) == 1) {
            on_switch(s, r);
            freeReplyObject(r);
        }
        if (got < 0 || atomic_load(&s->stop))
            return;
        pfd[0].fd = dlock__conn_fd(c);
        pfd[0].events = dlock__conn_events(c);
        pfd[0].revents = 0;
        pfd[1].fd = s->wake_fd;
        pfd[1].events = POLLIN;
        pfd[1].revents = 0;
        if (poll(pfd, 2, 1000) < 0)
            continue;
        if (pfd[1].revents != 0 || atomic_load(&s->stop))
            return;
        if (pfd[0].revents != 0 && dlock__conn_progress(c, pfd[0].revents, err,
                                                        sizeof err) != DLOCK_OK)
            return;
    }
}

/* The watch thread: subscribe on a sentinel, follow it, and on failure
 * the next one after a backoff (50 ms doubling to 2 s). */
static void *watch_main(void *arg)
{
    sentinel *s = arg;
    int64_t backoff = 0;
    int k = 0;
    char err[DLOCK__ERRLEN];
    while (!atomic_load(&s->stop)) {
        dlock__conn *c = watch_connect(s, k);
        if (c != NULL) {
            backoff = 0;
            atomic_store(&s->watching, 1);
            /* A switch while nobody listened: look once. */
            dlock__node_suspect(s->ns, NODE);
            locate(s->ns, NODE, dlock__now_ms() + 2 * s->ns->connect_timeout_ms,
                   err, sizeof err);
            watch_follow(s, c);
            atomic_store(&s->watching, 0);
            dlock__conn_close(c);
        }
        if (atomic_load(&s->stop))
            break;
        k = (k + 1) % s->url.n;
        backoff = backoff == 0 ? 50 : backoff * 2;
        if (backoff > 2000)
            backoff = 2000;
        {
            struct pollfd p = {s->wake_fd, POLLIN, 0};
            poll(&p, 1, (int)backoff);
        }
    }
    return NULL;
}

/* Start the watch thread once (first locate). Without it (no thread
 * could be made) failovers are still found, from errors. */
static void watch_start(sentinel *s)
{
    pthread_mutex_lock(&s->wmu);
    if (!s->started && !atomic_load(&s->stop) && s->wake_fd >= 0 &&
        pthread_create(&s->thread, NULL, watch_main, s) == 0)
        s->started = 1;
    pthread_mutex_unlock(&s->wmu);
}

/* ---- the topology ------------------------------------------------------- */

/* Stop the watch and free the state (ns->topo_free). */
static void sentinel_free(dlock__nodeset *ns)
{
    sentinel *s = ns->topo;
    uint64_t one = 1;
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->wmu);
    atomic_store(&s->stop, 1);
    if (s->wake_fd >= 0 && write(s->wake_fd, &one, sizeof one) < 0) {
        /* the counter is already set: the thread wakes anyway */
    }
    pthread_mutex_unlock(&s->wmu);
    if (s->started)
        pthread_join(s->thread, NULL);
    if (s->wake_fd >= 0)
        close(s->wake_fd);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->wmu);
    dlock__sentinel_url_clear(&s->url);
    free(s);
    ns->topo = NULL;
}

/* Give every sentinel endpoint the sentinels' own credentials. */
static int sentinel_creds(sentinel *s, const dlock_options *o, char *err,
                          size_t errlen)
{
    int k;
    for (k = 0; k < s->url.n; k++) {
        dlock__endpoint *ep = &s->url.sentinel[k];
        if (o->sentinel_username != NULL &&
            (ep->user = strdup(o->sentinel_username)) == NULL)
            return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
        if (o->sentinel_password != NULL &&
            (ep->password = strdup(o->sentinel_password)) == NULL)
            return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    }
    return DLOCK_OK;
}

/* See sentinel.h. The node's configured endpoint names the master by
 * its sentinel name until it is located. */
int dlock__sentinel_fill(dlock__nodeset *ns, const dlock_options *o, char *err,
                         size_t errlen)
{
    sentinel *s = calloc(1, sizeof *s);
    dlock__node *nd;
    int rc;
    size_t dl;

    if (s == NULL)
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    s->wake_fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->wmu, NULL);
    s->ns = ns;
    ns->topo = s;
    ns->topo_free = sentinel_free;
    ns->locate = locate;
    ns->kind = DLOCK__TOPO_SENTINEL;
    ns->n = 1;
    ns->quorum = 1;
    rc = dlock__sentinel_url_parse(&s->url, o->servers[0], err, errlen);
    if (rc != DLOCK_OK)
        return rc;
    rc = sentinel_creds(s, o, err, errlen);
    if (rc != DLOCK_OK)
        return rc;
    s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    ns->node = calloc(1, sizeof *ns->node);
    if (ns->node == NULL)
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    nd = &ns->node[NODE];
    pthread_mutex_init(&nd->mu, NULL);
    nd->ep.kind = s->url.tls ? DLOCK__EP_TLS : DLOCK__EP_TCP;
    dl = strlen(s->url.master) + 32;
    nd->ep.display = malloc(dl);
    nd->idle = calloc((size_t)ns->pool_size, sizeof *nd->idle);
    if (nd->ep.display == NULL || nd->idle == NULL)
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    snprintf(nd->ep.display, dl, "sentinel master %s", s->url.master);
    atomic_store(&nd->addr, &nd->ep);
    atomic_store(&nd->stale, 1);
    /* The user and password options win over the URL's, as for redis://. */
    if (o->username != NULL) {
        free(s->url.user);
        if ((s->url.user = strdup(o->username)) == NULL)
            return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    }
    if (o->password != NULL) {
        free(s->url.password);
        if ((s->url.password = strdup(o->password)) == NULL)
            return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    }
    return DLOCK_OK;
}

/* ---- the report --------------------------------------------------------- */

/* See sentinel.h. */
int dlock__sentinel_report(dlock__nodeset *ns, int64_t deadline_ms,
                           void (*add)(void *ctx, int warn, const char *line),
                           void *ctx)
{
    sentinel *s = ns->topo;
    char line[512], host[256], msg[DLOCK__ERRLEN];
    char first[300] = "";
    int k, port, up = 0, warns = 0, disagree = 0;
    if (s == NULL)
        return 0;
    for (k = 0; k < s->url.n; k++) {
        const char *sd = s->url.sentinel[k].display;
        int rc =
            ask(s, k, deadline_ms, host, sizeof host, &port, msg, sizeof msg);
        if (rc == ASK_ADDR) {
            char said[300];
            up++;
            snprintf(said, sizeof said, "%s:%d", host, port);
            if (first[0] == '\0')
                snprintf(first, sizeof first, "%s", said);
            else if (strcmp(first, said) != 0)
                disagree = 1;
            snprintf(line, sizeof line, "sentinel %s: master %s is %s", sd,
                     s->url.master, said);
            add(ctx, 0, line);
        } else if (rc == ASK_UNKNOWN) {
            snprintf(line, sizeof line, "sentinel %s: knows no master named %s",
                     sd, s->url.master);
            add(ctx, 2, line);
            warns++;
        } else {
            snprintf(line, sizeof line, "sentinel %s: no answer: %s", sd, msg);
            add(ctx, 2, line);
            warns++;
        }
    }
    if (disagree) {
        add(ctx, 2,
            "the sentinels disagree on the master (a failover in progress, "
            "or a split)");
        warns++;
    }
    snprintf(line, sizeof line,
             "sentinels: %d of %d answered; +switch-master watch %s, %llu "
             "switch(es) seen",
             up, s->url.n,
             atomic_load(&s->watching) ? "subscribed" : "not subscribed (yet)",
             (unsigned long long)atomic_load(&s->switches));
    add(ctx, 0, line);
    return warns;
}
