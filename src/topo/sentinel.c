/*
 * sentinel.c - the Sentinel topology: one master, found by asking the
 * sentinels, followed across failovers.
 *
 * Discovery (locate, sentinel_locate.c): ask the sentinels, starting
 * with the one that answered last, SENTINEL get-master-addr-by-name
 * NAME; the address a majority of them names is connected to and
 * checked (node.c: INFO says role:master — a sentinel can be stale, and
 * then its answer is a replica or nothing) and becomes the node's
 * address (dlock__node_adopt_conn). A minority's address is taken only
 * when the majority's is its replica (a failover not all sentinels have
 * seen yet); sentinels that name two masters are an error, not a guess.
 * A node is located on first use, and again when the node layer or the
 * engine suspects it moved (READONLY, LOADING, a refused or dropped
 * connection). The locate is steps (the engine drives them on a loop's
 * thread); the blocking locate waits for them.
 *
 * The watch: a thread, started with the first locate, keeps a pub/sub
 * connection to one sentinel (the next one when it fails) subscribed to
 * +switch-master. A switch of our master locates it again at once, so
 * that callers, waiters and the watchdog find the new master without
 * paying the discovery, and the lock-delay starts before anyone is
 * granted anything there. After every (re)subscription it locates once
 * too: a switch announced while it was not listening is not missed.
 *
 * Locking: one locate at a time (busy, a flag: a second one waits for
 * it without holding a lock, then looks whether it is still needed);
 * the watch thread's own state is its own. Nothing here takes a node's
 * mutex except through node.c.
 */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "io/ask.h"
#include "topo/sentinel_impl.h"

/* ---- asking a sentinel -------------------------------------------------- */

/* Ask sentinel k for the master's address and wait for the answer
 * (the report): ASK_ADDR with host/port filled, ASK_UNKNOWN (it does
 * not know the name), ASK_FAILED (msg says why). */
static int ask(sentinel *s, int k, int64_t deadline_ms, char *host,
               size_t hostlen, int *port, char *msg, size_t msglen)
{
    dlock__asking *a = NULL;
    redisReply *r;
    int rc = dlock__sentinel_ask(s, k, deadline_ms, &a, msg, msglen), out;
    rc = dlock__asking_wait(a, rc, msg, msglen);
    if (rc != DLOCK_OK) {
        dlock__asking_free(a);
        return ASK_FAILED;
    }
    r = dlock__asking_reply(a);
    dlock__asking_free(a);
    out = dlock__sentinel_read(s, k, r, host, hostlen, port, msg, msglen);
    freeReplyObject(r);
    return out;
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
    dlock__sentinel_locate(s->ns, NODE,
                           dlock__now_ms() + 2 * s->ns->connect_timeout_ms, err,
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
            dlock__sentinel_locate(
                s->ns, NODE, dlock__now_ms() + 2 * s->ns->connect_timeout_ms,
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

/* Start the watch thread once (s->watch_start: the first locate).
 * Without it (no thread could be made) failovers are still found, from
 * errors. */
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
    pthread_mutex_init(&s->wmu, NULL);
    s->ns = ns;
    ns->topo = s;
    ns->topo_free = sentinel_free;
    ns->locate = dlock__sentinel_locate;
    ns->locator = &dlock__sentinel_locator;
    s->watch_start = watch_start;
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
