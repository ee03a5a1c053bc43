/*
 * sentinel_locate.c - finding the Sentinel master (see sentinel.c's
 * preamble for the rule) as steps that never block: the sentinels are
 * asked one after the other (the one that answered last first), each
 * question an io/ask.h asking; once an address has a majority of all
 * the sentinels the rest are not waited for (a stopped sentinel costs
 * nothing then); the chosen address is checked (its INFO, node.c's
 * dlock__node_checked) and adopted. The engine drives these steps
 * (node.h's dlock__locator); dlock__sentinel_locate waits for them.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo/sentinel_impl.h"

/* An address the sentinels named, and how many named it. */
typedef struct candidate {
    char host[256];
    int port;
    int votes;
    char display[280];
} candidate;

enum { L_WAIT, L_ASK, L_CHECK };

typedef struct locating {
    sentinel *s;
    int64_t deadline;
    int phase;
    int owner;        /* holds s->busy */
    int k;            /* sentinels asked so far */
    int late;         /* out of time before every sentinel was asked */
    int idx;          /* L_ASK: the sentinel asked now */
    dlock__asking *a; /* L_ASK, L_CHECK: the question out */
    candidate cand[DLOCK__SENTINELS_MAX]; /* in the order named */
    int n, answered, unknown;
    uint32_t tried;      /* candidates tried (bit per index) */
    int cur;             /* L_CHECK: the candidate checked */
    dlock__endpoint *ep; /* its endpoint, until adopted or dropped */
    int first_try;       /* cur is the first tried: it says master_of */
    int rc;              /* the last try's outcome */
    char master_of[80];  /* the first tried is a replica of this */
    char sum[DLOCK__ERRLEN];
    char msg[DLOCK__ERRLEN]; /* the question's failure */
    int64_t wake;            /* L_WAIT: look again then */
} locating;

/* See sentinel_impl.h. */
int dlock__sentinel_read(const sentinel *s, int k, const redisReply *r,
                         char *host, size_t hostlen, int *port, char *msg,
                         size_t msglen)
{
    const dlock__endpoint *ep = &s->url.sentinel[k];
    if (r->type == REDIS_REPLY_NIL)
        return ASK_UNKNOWN;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING &&
        r->element[1]->type == REDIS_REPLY_STRING &&
        r->element[0]->len < hostlen) {
        long p = strtol(r->element[1]->str, NULL, 10);
        if (p > 0 && p < 65536) {
            memcpy(host, r->element[0]->str, r->element[0]->len + 1);
            *port = (int)p;
            return ASK_ADDR;
        }
        snprintf(msg, msglen, "%s: bad port in its answer", ep->display);
    } else if (r->type == REDIS_REPLY_ERROR) {
        snprintf(msg, msglen, "%s: %.120s", ep->display, r->str);
    } else {
        snprintf(msg, msglen,
                 "%s: unexpected answer to SENTINEL "
                 "get-master-addr-by-name (not a sentinel?)",
                 ep->display);
    }
    return ASK_FAILED;
}

/* See sentinel_impl.h. */
int dlock__sentinel_ask(sentinel *s, int k, int64_t deadline_ms,
                        dlock__asking **out, char *msg, size_t msglen)
{
    const char *argv[3] = {"SENTINEL", "get-master-addr-by-name",
                           s->url.master};
    int64_t dl = dlock__now_ms() + s->ns->connect_timeout_ms;
    if (deadline_ms < dl)
        dl = deadline_ms;
    return dlock__asking_start(out, &s->url.sentinel[k], s->ns->tls, NULL, 3,
                               argv, dl, msg, msglen);
}

/* See sentinel_impl.h. */
dlock__endpoint *dlock__sentinel_data_ep(const sentinel *s, const char *host,
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

/* The candidates' indices, most votes first (ties: the first named
 * first) into o; how many votes in all into *voters. */
static void order(const locating *L, int *o, int *voters)
{
    int k, j;
    *voters = 0;
    for (k = 0; k < L->n; k++) {
        o[k] = k;
        *voters += L->cand[k].votes;
    }
    for (k = 1; k < L->n; k++)
        for (j = k; j > 0 && L->cand[o[j]].votes > L->cand[o[j - 1]].votes;
             j--) {
            int t = o[j];
            o[j] = o[j - 1];
            o[j - 1] = t;
        }
}

/* The candidate to check now, or -1 (ask on, or finish). The most named
 * is tried once every sentinel was asked and it has a majority of those
 * that named one, or at once with a majority of all the sentinels.
 * After it failed, another only when the first is its replica. */
static int choose(locating *L)
{
    int o[DLOCK__SENTINELS_MAX], voters, all, k;
    if (L->n == 0)
        return -1;
    order(L, o, &voters);
    all = L->k >= L->s->url.n || L->late;
    if (!(L->tried & (1u << o[0]))) {
        if (!all)
            return 2 * L->cand[o[0]].votes > L->s->url.n ? o[0] : -1;
        if (2 * L->cand[o[0]].votes > voters)
            return o[0];
        L->tried |= 1u << o[0]; /* no majority: only a proven switch */
    }
    if (!all || L->rc == DLOCK_ENOMEM)
        return -1;
    for (k = 1; k < L->n; k++)
        if (!(L->tried & (1u << o[k])) &&
            strcmp(L->master_of, L->cand[o[k]].display) == 0)
            return o[k];
    return -1;
}

/* Sentinel L->idx answered (rc: the asking's status, msg why not): the
 * counts and the candidates. */
static void ask_end(locating *L, int rc)
{
    char *msg = L->msg;
    size_t msglen = sizeof L->msg;
    char host[256];
    int port = 0, j, out = ASK_FAILED;
    if (rc == DLOCK_OK) {
        redisReply *r = dlock__asking_reply(L->a);
        out = dlock__sentinel_read(L->s, L->idx, r, host, sizeof host, &port,
                                   msg, msglen);
        freeReplyObject(r);
    }
    dlock__asking_free(L->a);
    L->a = NULL;
    if (out == ASK_FAILED) {
        note(L->sum, sizeof L->sum, msg);
        return;
    }
    L->answered++;
    if (out == ASK_UNKNOWN) {
        L->unknown++;
        snprintf(msg, msglen, "%s: no master named \"%s\"",
                 L->s->url.sentinel[L->idx].display, L->s->url.master);
        note(L->sum, sizeof L->sum, msg);
        return;
    }
    for (j = 0; j < L->n; j++)
        if (L->cand[j].port == port && strcmp(L->cand[j].host, host) == 0)
            break;
    if (j == L->n) {
        candidate *c = &L->cand[L->n++];
        memset(c, 0, sizeof *c);
        snprintf(c->host, sizeof c->host, "%s", host);
        c->port = port;
        snprintf(c->display, sizeof c->display,
                 strchr(host, ':') != NULL ? "[%s]:%d" : "%s:%d", host, port);
    }
    if (L->cand[j].votes++ == 0 && j == 0)
        atomic_store(&L->s->first, L->idx); /* ask it first next time */
}

/* Candidate L->cur's check ended (rc: the asking's status, L->msg why
 * not; opened: its connection was made, so the server's answer, or its
 * silence, is judged by dlock__node_checked). Adopted when a master. */
static void check_end(locating *L, int rc, int opened)
{
    char said[3 * DLOCK__ERRLEN];
    dlock__nodeset *ns = L->s->ns;
    dlock__conn *conn = NULL;
    dlock__srvinfo id;
    dlock__endpoint *ep = L->ep;
    memset(&id, 0, sizeof id);
    L->ep = NULL;
    if (L->a != NULL) {
        redisReply *r = rc == DLOCK_OK ? dlock__asking_reply(L->a) : NULL;
        if (r != NULL) {
            dlock__node_identify_read(r, &id);
            freeReplyObject(r);
        }
        conn = dlock__asking_conn(L->a);
        dlock__asking_free(L->a);
        L->a = NULL;
    }
    if (opened)
        rc = dlock__node_checked(ns, NODE, ep, rc, &id, &conn,
                                 L->first_try ? L->master_of : NULL,
                                 sizeof L->master_of, L->msg, sizeof L->msg);
    if (rc == DLOCK_OK)
        rc = dlock__node_adopt_conn(ns, NODE, ep, conn, L->msg, sizeof L->msg);
    else {
        dlock__conn_close(conn);
        dlock__endpoint_clear(ep);
        free(ep);
    }
    L->rc = rc;
    if (rc != DLOCK_OK) {
        candidate *c = &L->cand[L->cur];
        snprintf(said, sizeof said, "%d sentinel(s) name %s: %s", c->votes,
                 c->display, L->msg);
        note(L->sum, sizeof L->sum, said);
    }
}

/* Start checking candidate c: DLOCK__OPEN_AGAIN (L_CHECK), or how it
 * ended (already this node's address: nothing to check). */
static int check_start(locating *L, int c)
{
    static const char *const info[3] = {"INFO", "server", "replication"};
    sentinel *s = L->s;
    int rc;
    L->first_try = L->tried == 0;
    L->tried |= 1u << c;
    L->cur = c;
    if (L->first_try)
        L->master_of[0] = '\0';
    L->ep = dlock__sentinel_data_ep(s, L->cand[c].host, L->cand[c].port);
    if (L->ep == NULL)
        return L->rc = DLOCK_ENOMEM;
    if (dlock__node_adopt_same(s->ns, NODE, L->ep)) {
        L->ep = NULL;
        return L->rc = DLOCK_OK;
    }
    rc = dlock__asking_start(&L->a, L->ep, s->ns->tls, NULL, 3,
                             (const char **)info, L->deadline, L->msg,
                             sizeof L->msg);
    if (rc == DLOCK__OPEN_AGAIN) {
        L->phase = L_CHECK;
        return rc;
    }
    check_end(L, rc, rc == DLOCK_OK);
    return L->rc;
}

/* Start asking the next sentinel: DLOCK__OPEN_AGAIN (L_ASK), or its
 * answer is taken in already. */
static int ask_next(locating *L)
{
    sentinel *s = L->s;
    int rc;
    L->idx = (atomic_load(&s->first) + L->k) % s->url.n;
    L->k++;
    L->msg[0] = '\0';
    rc = dlock__sentinel_ask(s, L->idx, L->deadline, &L->a, L->msg,
                             sizeof L->msg);
    if (rc == DLOCK__OPEN_AGAIN) {
        L->phase = L_ASK;
        return rc;
    }
    ask_end(L, rc);
    return DLOCK_OK;
}

/* The outcome (the locate is over: the flag let go). */
static int finish(locating *L, char *err, size_t errlen)
{
    sentinel *s = L->s;
    int o[DLOCK__SENTINELS_MAX], voters, rc = L->rc;
    if (L->owner)
        atomic_store(&s->busy, 0);
    L->owner = 0;
    order(L, o, &voters);
    if (rc == DLOCK_OK)
        return DLOCK_OK;
    if (rc != DLOCK_ENOMEM && L->n > 1 && 2 * L->cand[o[0]].votes <= voters) {
        char dis[3 * DLOCK__ERRLEN];
        snprintf(
            dis, sizeof dis, "the sentinels disagree: %d name %s, %d name %s%s",
            L->cand[o[0]].votes, L->cand[o[0]].display, L->cand[o[1]].votes,
            L->cand[o[1]].display, L->n > 2 ? ", and more" : "");
        note(L->sum, sizeof L->sum, dis);
    }
    if (rc == DLOCK_ENOMEM)
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    if (L->answered > 0 && L->unknown == L->answered)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "no sentinel knows a master named \"%s\" (%s)",
                           s->url.master, L->sum);
    if (L->answered == 0)
        return dlock__fail(err, errlen, DLOCK_EIO,
                           "no sentinel answered for master \"%s\" (%s)",
                           s->url.master, L->sum);
    return dlock__fail(err, errlen, DLOCK_ESERVER,
                       "the sentinels named no usable master \"%s\" (%s)",
                       s->url.master, L->sum);
}

/* Go on until a question is out (DLOCK__OPEN_AGAIN) or the locate is
 * over (its status). */
static int advance(locating *L, char *err, size_t errlen)
{
    for (;;) {
        int c = choose(L);
        if (c >= 0) {
            if (check_start(L, c) == DLOCK__OPEN_AGAIN)
                return DLOCK__OPEN_AGAIN;
            if (L->rc == DLOCK_OK || L->rc == DLOCK_ENOMEM)
                return finish(L, err, errlen);
        } else if (L->k < L->s->url.n && !L->late) {
            if (dlock__now_ms() >= L->deadline) {
                note(L->sum, sizeof L->sum, "out of time");
                L->late = 1;
            } else if (ask_next(L) == DLOCK__OPEN_AGAIN) {
                return DLOCK__OPEN_AGAIN;
            }
        } else {
            return finish(L, err, errlen);
        }
    }
}

/* The flag is ours (or not: wait, until the deadline at most: a locate
 * whose driver stalls must not hold up the others; then go on without
 * it): when another locate found the master meanwhile, nothing is left
 * to do; else ask. */
static int begin(locating *L, char *err, size_t errlen)
{
    sentinel *s = L->s;
    int zero = 0;
    L->owner = atomic_compare_exchange_strong(&s->busy, &zero, 1);
    if (!L->owner && dlock__now_ms() < L->deadline) {
        L->phase = L_WAIT;
        L->wake = dlock__now_ms() + 5;
        return DLOCK__OPEN_AGAIN;
    }
    if (!atomic_load(&s->ns->node[NODE].stale) &&
        dlock__node_addr(&s->ns->node[NODE])->host != NULL) {
        L->rc = DLOCK_OK; /* another one located it while this one waited */
        return finish(L, err, errlen);
    }
    return advance(L, err, errlen);
}

/* The locator's start (node.h). */
static int loc_start(dlock__nodeset *ns, int i, int64_t deadline_ms, void **st,
                     char *err, size_t errlen)
{
    locating *L = calloc(1, sizeof *L);
    int rc;
    (void)i;
    *st = NULL;
    if (L == NULL)
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    L->s = ns->topo;
    L->deadline = deadline_ms;
    L->rc = DLOCK_ESERVER;
    L->s->watch_start(L->s);
    rc = begin(L, err, errlen);
    if (rc == DLOCK__OPEN_AGAIN)
        *st = L;
    else
        free(L);
    return rc;
}

/* The locator's free (node.h). */
static void loc_free(void *st)
{
    locating *L = st;
    if (L == NULL)
        return;
    dlock__asking_free(L->a);
    if (L->ep != NULL) {
        dlock__endpoint_clear(L->ep);
        free(L->ep);
    }
    if (L->owner)
        atomic_store(&L->s->busy, 0);
    free(L);
}

/* The locator's pollfd (node.h). */
static void loc_pollfd(void *st, int *fd, short *events, int64_t *wake_ms)
{
    locating *L = st;
    *fd = -1;
    *events = 0;
    if (L->phase == L_WAIT) {
        *wake_ms = L->wake;
        return;
    }
    dlock__asking_poll(L->a, fd, events);
    *wake_ms = dlock__asking_deadline(L->a);
}

/* The locator's step (node.h). */
static int loc_step(void *st, short revents, char *err, size_t errlen)
{
    locating *L = st;
    int rc, opened;
    if (L->phase == L_WAIT)
        return dlock__now_ms() < L->wake ? DLOCK__OPEN_AGAIN
                                         : begin(L, err, errlen);
    rc = dlock__asking_step(L->a, revents, L->msg, sizeof L->msg);
    if (rc == DLOCK__OPEN_AGAIN &&
        dlock__now_ms() >= dlock__asking_deadline(L->a))
        rc = dlock__asking_timeout(L->a, L->msg, sizeof L->msg);
    if (rc == DLOCK__OPEN_AGAIN)
        return rc;
    if (L->phase == L_ASK) {
        ask_end(L, rc);
    } else {
        opened = dlock__asking_opened(L->a);
        check_end(L, rc, opened);
        if (L->rc == DLOCK_OK || L->rc == DLOCK_ENOMEM)
            return finish(L, err, errlen);
    }
    return advance(L, err, errlen);
}

/* See sentinel_impl.h. */
const dlock__locator dlock__sentinel_locator = {loc_start, loc_pollfd, loc_step,
                                                loc_free};

/* See sentinel_impl.h: the steps, waited for with poll(). */
int dlock__sentinel_locate(dlock__nodeset *ns, int i, int64_t deadline_ms,
                           char *err, size_t errlen)
{
    void *st;
    int rc = loc_start(ns, i, deadline_ms, &st, err, errlen);
    while (rc == DLOCK__OPEN_AGAIN) {
        int64_t wake;
        int fd;
        short ev;
        loc_pollfd(st, &fd, &ev, &wake);
        rc = loc_step(st, dlock__poll_until(fd, ev, wake), err, errlen);
    }
    loc_free(st);
    return rc;
}
