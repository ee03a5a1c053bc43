/*
 * dl_loop.c - the gateway's de-duplication on libdlock's event-loop API
 * (include/dlock_loop.h, issue 30), on the gateway's libuv loop through
 * the ready-made adapter (dlock_loop_uv.h: a uv_poll on the loop's fd, a
 * uv_timer for its timeout). Operations started while libuv runs the
 * HTTP callbacks of one iteration go out together on the next process
 * (the loop's one pipelined command connection).
 *
 * Decide K (the lock is P:dedup:K, the result the fenced value
 * P:result:K):
 *   1. a try of the lock, then: got it, a fenced read of the result with
 *      the hold's token (the result's fence becomes that token: a
 *      previous holder paused past its lease, its lock expired, can no
 *      longer store its result after this look: its fenced set is
 *      refused); busy, a fenced get (a plain GET; HMGET with the hash
 *      layout). With --read plain the
 *      try and a fenced get are started together instead (sent in that
 *      order on the loop's one command connection: the get sees what the
 *      lock's holder, if any, stored before it released): one round trip
 *      less, the window above open;
 *   2. got the lock, no result -> PROCESS (the loop renews the lease
 *      while the backend runs);
 *      got the lock, a result  -> release it, STORED;
 *      busy, a result          -> STORED;
 *      busy, no result         -> reject: BUSY; wait: a waiting acquire
 *      (woken by the release notification), then a fenced read (get): a
 *      result -> release, STORED; none (the holder failed) -> PROCESS.
 * Finish: a fenced set of the body with the hold's token (refused,
 * DLOCK_STALE, when a newer holder has written: a processor that lost its
 * lease cannot overwrite the result of one that holds it), then the
 * release; answered when the release completes. With the string layout
 * (the default) on one server both are one script
 * (dlock_loop_fenced_set_release: stored only while the hold is still
 * ours), the try a plain SET NX PX whose token is issued by that store
 * (dlock_loop_acquire.lazy_token), and the look a fenced get (a plain
 * GET: the string layout's fenced value is one string, "<fence> <body>"):
 * one script per request on the server.
 */
#include "gateway.h"

#include <dlock.h>
#include <dlock_loop.h>
#include <dlock_loop_uv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_MS 60000 /* a duplicate's wait for the lock, at most */

typedef struct dl_be {
    gw_backend base;
    dlock_client *client;
    dlock_loop *dl;
    dlock_loop_uv uv; /* the ready-made libuv adapter */
    size_t pending;
} dl_be;

typedef struct dreq {
    dl_be *b;
    gw_req *req;
    char name[300];   /* the lock */
    char reskey[300]; /* the fenced result */
    dlock_hold *hold;
    int lock_done, lock_status;
    int get_done, get_status;
    char *value; /* the result read, if any */
    size_t vlen;
    int waited; /* stage 2: the waiting acquire */
    int set_status;
    int lost;         /* the hold's lease was found lost (on_lost) */
    int finishing;    /* finish's operations (set, release) still out */
    int processing;   /* decided PROCESS: followers wait for the body */
    const char *body; /* the processed body (the leader's, until answered) */
    size_t blen;
    char msg[200];
    gw_req **fol; /* followers: same-key requests of this process */
    size_t nfol, capfol;
    struct dreq *hnext; /* the in-progress table's chain */
    uint32_t bucket;    /* its chain's index (key_hash of its key) */
} dreq;

/* This process's requests in progress, by key: one leader per key talks
 * to Redis, later same-key requests follow it (the loop refuses a second
 * acquire of a name it holds or is acquiring: DLOCK_BUSY, never a wait).
 */
#define NBUCKET 65536
static dreq *table[NBUCKET];

static uint32_t key_hash(const char *k)
{
    uint32_t h = 2166136261u;
    for (; *k; k++)
        h = (h ^ (unsigned char)*k) * 16777619u;
    return h % NBUCKET;
}

/* The request in progress for KEY, whose key_hash is H, or NULL. */
static dreq *table_find(const char *key, uint32_t h)
{
    for (dreq *d = table[h]; d; d = d->hnext)
        if (!strcmp(d->req->key, key))
            return d;
    return NULL;
}

static void table_remove(dreq *d)
{
    dreq **pp = &table[d->bucket];
    while (*pp && *pp != d)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = d->hnext;
}

/* Operations were started: nothing to do, the loop's fd says so (a
 * request queued on an open connection makes it writable, one on a
 * connection still to open signals the loop's eventfd). */
static void kick(dl_be *b)
{
    (void)b;
}

static void dreq_free(dreq *d)
{
    d->b->pending--;
    free(d->value);
    free(d->fol);
    free(d);
}

/* D's final verdict V for the leader and its followers (PROCESS: the
 * leader processes; followers in reject mode are BUSY, in wait mode they
 * stay for the body). D is freed unless V is PROCESS. */
static void settle(dreq *d, enum gw_verdict v, const char *body, size_t len,
                   const char *msg)
{
    if (v == GW_PROCESS) {
        d->processing = 1;
        if (d->b->base.cfg->mode == GW_REJECT) {
            for (size_t i = 0; i < d->nfol; i++)
                gw_decided(d->fol[i], GW_BUSY, NULL, 0, NULL);
            d->nfol = 0;
        }
        gw_decided(d->req, GW_PROCESS, NULL, 0, NULL);
        return;
    }
    table_remove(d);
    for (size_t i = 0; i < d->nfol; i++)
        gw_decided(d->fol[i], v, body, len, msg);
    gw_decided(d->req, v, body, len, msg);
    dreq_free(d);
}

static void on_noop(dlock_op *op, int status, dlock_hold *hold, void *ud)
{
    (void)op;
    (void)status;
    (void)hold;
    (void)ud;
}

/* Give D's hold back without waiting for the answer. */
static void drop_hold(dreq *d)
{
    if (d->hold &&
        dlock_loop_release(NULL, d->b->dl, d->hold, on_noop, NULL) == DLOCK_OK)
        kick(d->b);
    d->hold = NULL;
}

static void start_round(dreq *d);
static void decide(dreq *d);

/* The loop found the hold's lease lost (from process): its processing's
 * result must not be stored nor answered as done. */
static void on_hold_lost(dlock_hold *hold, int status, void *ud)
{
    dreq *d = ud;
    (void)hold;
    d->lost = status ? status : DLOCK_LOST;
}

static void on_get(dlock_op *op, int status, dlock_hold *hold, void *ud);

/* Start D's look for a stored result: a fenced read with the hold's
 * token when D holds K (and --read fenced), else a fenced get. A hold
 * whose token is not issued yet (0: the string layout's plain try, one
 * server) looks with a fenced get: its result is stored by
 * dlock_loop_fenced_set_release, which writes only while D still holds
 * K, so a holder paused past its lease is shut out there instead. */
static void start_get(dreq *d)
{
    dl_be *b = d->b;
    int rc;
    d->get_done = 0;
    if (d->hold && !b->base.cfg->plain_get && dlock_hold_token(d->hold) != 0)
        rc = dlock_loop_fenced_read(NULL, b->dl, d->reskey,
                                    dlock_hold_token(d->hold), on_get, d);
    else
        rc = dlock_loop_fenced_get(NULL, b->dl, d->reskey, on_get, d);
    if (rc != DLOCK_OK) {
        /* No callback comes: decide gives the hold back. */
        d->get_done = 1;
        d->get_status = rc;
        snprintf(d->msg, sizeof d->msg, "fenced read: %s",
                 dlock_errmsg(b->client));
        decide(d);
        return;
    }
    kick(b);
}

static void on_lock(dlock_op *op, int status, dlock_hold *hold, void *ud)
{
    dreq *d = ud;
    d->lock_done = 1;
    d->lock_status = status;
    if (status == DLOCK_OK)
        d->hold = hold;
    else if (status != DLOCK_BUSY)
        snprintf(d->msg, sizeof d->msg, "lock: %s: %s", dlock_strerror(status),
                 dlock_op_errmsg(op));
    if (!d->b->base.cfg->plain_get &&
        (status == DLOCK_OK || status == DLOCK_BUSY)) {
        start_get(d); /* the look after the try */
        return;
    }
    if (!d->b->base.cfg->plain_get) {
        d->get_done = 1; /* failed: nothing to look at */
        d->get_status = DLOCK_OK;
    }
    decide(d);
}

static void on_get(dlock_op *op, int status, dlock_hold *hold, void *ud)
{
    dreq *d = ud;
    (void)hold;
    d->get_done = 1;
    d->get_status = status;
    if (status == DLOCK_OK) {
        size_t len = 0;
        uint64_t fence = 0;
        const char *v = dlock_op_value(op, &len, &fence);
        if (v) {
            d->value = malloc(len + 1);
            if (d->value) {
                memcpy(d->value, v, len);
                d->value[len] = 0;
                d->vlen = len;
            }
        }
    } else if (status == DLOCK_STALE)
        snprintf(d->msg, sizeof d->msg,
                 "the lease was lost before the look: a newer holder has "
                 "read (%s)",
                 dlock_op_errmsg(op));
    else
        snprintf(d->msg, sizeof d->msg, "fenced get: %s: %s",
                 dlock_strerror(status), dlock_op_errmsg(op));
    decide(d);
}

/* Both answers of a round are in: the verdict, or the waiting stage. */
static void decide(dreq *d)
{
    if (!d->lock_done || !d->get_done)
        return;
    if (d->get_status != DLOCK_OK ||
        (d->lock_status != DLOCK_OK && d->lock_status != DLOCK_BUSY)) {
        drop_hold(d);
        settle(d, GW_FAIL, NULL, 0, d->msg);
        return;
    }
    if (d->value) {
        drop_hold(d);
        settle(d, GW_STORED, d->value, d->vlen, NULL);
        return;
    }
    if (d->lock_status == DLOCK_OK) {
        settle(d, GW_PROCESS, NULL, 0, NULL);
        return;
    }
    if (d->b->base.cfg->mode == GW_REJECT || d->waited) {
        /* A waited-for lock is never BUSY; kept for safety. */
        settle(d, GW_BUSY, NULL, 0, NULL);
        return;
    }
    /* Wait mode, busy, no result yet: wait for the lock, then look. */
    d->waited = 1;
    start_round(d);
}

static void on_waited(dlock_op *op, int status, dlock_hold *hold, void *ud)
{
    dreq *d = ud;
    if (status != DLOCK_OK) {
        snprintf(d->msg, sizeof d->msg, "waiting for the lock: %s: %s",
                 dlock_strerror(status), dlock_op_errmsg(op));
        settle(d, GW_FAIL, NULL, 0, d->msg);
        return;
    }
    d->hold = hold;
    d->lock_done = 1;
    d->lock_status = DLOCK_OK;
    start_get(d);
}

/* Start D's round: the try + get (first), or the waiting acquire. */
static void start_round(dreq *d)
{
    dl_be *b = d->b;
    dlock_loop_acquire a;
    dlock_loop_acquire_init(&a, b->client);
    a.lease_ms = b->base.cfg->lease_ms;
    a.renew = 1;
    a.on_lost = on_hold_lost;
    a.on_lost_userdata = d;
    /* The string layout: a plain SET NX PX try, the token issued by the
     * store (dl_finish); the hash layout issues it with the grant. */
    a.lazy_token = b->base.cfg->string_layout;
    if (b->base.cfg->strategy >= 0)
        a.strategy = (dlock_wait_strategy)b->base.cfg->strategy;
    else if (b->base.cfg->string_layout)
        a.strategy = DLOCK_WAIT_NOTIFY; /* a fair try is a script */
    d->lock_done = d->get_done = 0;
    if (!d->waited) {
        a.wait_ms = 0;
        if (dlock_loop_lock(NULL, b->dl, d->name, &a, on_lock, d) != DLOCK_OK)
            goto fail;
        if (!b->base.cfg->plain_get) {
            /* The look follows the try's answer (on_lock). */
        } else if (dlock_loop_fenced_get(NULL, b->dl, d->reskey, on_get, d) !=
                   DLOCK_OK) {
            /* The lock's callback comes; it cannot decide without the
             * get: mark the get failed so that decide gives it back. */
            d->get_done = 1;
            d->get_status = DLOCK_EINVAL;
            snprintf(d->msg, sizeof d->msg, "fenced get: %s",
                     dlock_errmsg(b->client));
        }
    } else {
        a.wait_ms = WAIT_MS;
        if (dlock_loop_lock(NULL, b->dl, d->name, &a, on_waited, d) != DLOCK_OK)
            goto fail;
    }
    kick(b);
    return;
fail:
    settle(d, GW_FAIL, NULL, 0, dlock_errmsg(b->client));
}

static void dl_begin(gw_backend *gb, gw_req *req)
{
    dl_be *b = (dl_be *)gb;
    uint32_t h = key_hash(req->key);
    dreq *lead = table_find(req->key, h);
    if (lead) {
        if (lead->processing && gb->cfg->mode == GW_REJECT) {
            gw_decided(req, GW_BUSY, NULL, 0, NULL);
            return;
        }
        if (lead->nfol == lead->capfol) {
            size_t nc = lead->capfol ? lead->capfol * 2 : 4;
            gw_req **nf = realloc(lead->fol, nc * sizeof *nf);
            if (!nf) {
                gw_decided(req, GW_FAIL, NULL, 0, "out of memory");
                return;
            }
            lead->fol = nf;
            lead->capfol = nc;
        }
        lead->fol[lead->nfol++] = req;
        return;
    }
    dreq *d = calloc(1, sizeof *d);
    if (!d) {
        gw_decided(req, GW_FAIL, NULL, 0, "out of memory");
        return;
    }
    b->pending++;
    d->b = b;
    d->req = req;
    req->bctx = d;
    snprintf(d->name, sizeof d->name, "%s:dedup:%s", gb->cfg->prefix, req->key);
    snprintf(d->reskey, sizeof d->reskey, "%s:result:%s", gb->cfg->prefix,
             req->key);
    d->bucket = h;
    d->hnext = table[h];
    table[h] = d;
    start_round(d);
}

/* Finish's last step: both the fenced set (if sent) and the release
 * have completed, in whichever order the loop ran their callbacks (a
 * release of a hold found lost completes at once, before the set's
 * answer): answer the leader and its followers, free D. */
static void finish_done(dreq *d)
{
    if (--d->finishing > 0)
        return;
    table_remove(d);
    for (size_t i = 0; i < d->nfol; i++)
        if (d->set_status == DLOCK_OK)
            gw_decided(d->fol[i], GW_STORED, d->body, d->blen, NULL);
        else
            gw_decided(d->fol[i], GW_FAIL, NULL, 0, d->msg);
    if (d->set_status == DLOCK_OK)
        gw_finished(d->req, 1, NULL);
    else
        gw_finished(d->req, 0, d->msg);
    dreq_free(d);
}

static void on_released(dlock_op *op, int status, dlock_hold *hold, void *ud)
{
    (void)op;
    (void)hold;
    (void)status; /* the result is stored (or refused) either way */
    finish_done(ud);
}

/* The store's answer: a fenced set's, or a store-and-release's
 * (dlock_loop_fenced_set_release, which also reports a lease found lost:
 * DLOCK_NOT_OWNER, DLOCK_LOST). */
static void on_set(dlock_op *op, int status, dlock_hold *hold, void *ud)
{
    dreq *d = ud;
    (void)hold;
    d->set_status = status;
    if (status == DLOCK_STALE)
        snprintf(d->msg, sizeof d->msg,
                 "the lease was lost while processing and a newer holder "
                 "has written: this result was not stored");
    else if (status == DLOCK_NOT_OWNER || status == DLOCK_LOST)
        snprintf(d->msg, sizeof d->msg,
                 "lease lost while processing (DLOCK_%s): the result was "
                 "not stored",
                 dlock_status_name(status));
    else if (status != DLOCK_OK)
        snprintf(d->msg, sizeof d->msg, "fenced set: %s: %s",
                 dlock_strerror(status), dlock_op_errmsg(op));
    finish_done(d);
}

static void dl_finish(gw_backend *gb, gw_req *req, const char *body, size_t len)
{
    dl_be *b = (dl_be *)gb;
    dreq *d = req->bctx;
    if (b->base.cfg->string_layout && !d->lost) {
        /* One script: the result stored while D holds K, then released
         * (waiting duplicates find it at once). Refused (DLOCK_EINVAL)
         * on a loop over several servers: the fenced set and the
         * release below. */
        d->set_status = DLOCK_EIO;
        d->body = body;
        d->blen = len;
        d->finishing = 1;
        if (dlock_loop_fenced_set_release(NULL, b->dl, d->hold, d->reskey, body,
                                          len, on_set, d) == DLOCK_OK) {
            d->hold = NULL;
            kick(b);
            return;
        }
    }
    d->set_status = DLOCK_EIO;
    d->body = body;
    d->blen = len;
    d->finishing = 1; /* the release */
    snprintf(d->msg, sizeof d->msg, "fenced set not answered");
    if (d->lost) {
        /* Another request may hold K now and process it: this result is
         * neither stored nor answered as the one. */
        d->set_status = d->lost;
        snprintf(d->msg, sizeof d->msg,
                 "lease lost while processing (DLOCK_%s): the result was "
                 "not stored",
                 dlock_status_name(d->lost));
    } else if (dlock_loop_fenced_set(NULL, b->dl, d->reskey,
                                     dlock_hold_token(d->hold), body, len,
                                     on_set, d) != DLOCK_OK) {
        snprintf(d->msg, sizeof d->msg, "fenced set: %s",
                 dlock_errmsg(b->client));
    } else {
        d->finishing++;
    }
    dlock_hold *h = d->hold;
    d->hold = NULL;
    if (dlock_loop_release(NULL, b->dl, h, on_released, d) != DLOCK_OK) {
        /* Not started: its callback never comes. The set's (if sent)
         * still does; the hold is left to its lease. */
        snprintf(d->msg, sizeof d->msg, "release: %s", dlock_errmsg(b->client));
        d->set_status = DLOCK_EIO;
        finish_done(d);
        return;
    }
    kick(b);
}

static size_t dl_pending(gw_backend *gb)
{
    return ((dl_be *)gb)->pending;
}

static int dl_connections(gw_backend *gb)
{
    (void)gb;
    return -1; /* not observable through the API: see the bench */
}

static void dl_destroy(gw_backend *gb)
{
    dl_be *b = (dl_be *)gb;
    dlock_loop_uv_detach(&b->uv);
    uv_run(gb->loop, UV_RUN_NOWAIT);
    dlock_loop_free(b->dl);
    dlock_client_free(b->client);
    free(b);
}

static const struct gw_backend_vt dl_vt = {dl_begin, dl_finish, dl_pending,
                                           dl_connections, dl_destroy};

gw_backend *gw_dlock_new(uv_loop_t *loop, const gw_config *cfg, char *err,
                         size_t errlen)
{
    dl_be *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    b->base.vt = &dl_vt;
    b->base.cfg = cfg;
    b->base.loop = loop;
    dlock_options o;
    dlock_options_init(&o);
    o.servers = cfg->servers;
    o.nservers = (size_t)cfg->nservers;
    if (cfg->fence_retention_ms >= 0)
        o.fence_retention_ms = cfg->fence_retention_ms;
    if (cfg->string_layout && cfg->strategy < 0)
        o.wait_strategy = DLOCK_WAIT_NOTIFY; /* as start_round's default
                                              * (the string layout over
                                              * Redlock refuses fair) */
    char e[256] = "";
    int rc = dlock_client_new(&b->client, &o, e, sizeof e);
    if (rc != DLOCK_OK) {
        snprintf(err, errlen, "dlock client: %s: %s", dlock_strerror(rc), e);
        free(b);
        return NULL;
    }
    if (cfg->string_layout &&
        dlock_client_set_layout(b->client, DLOCK_LAYOUT_STRING) != DLOCK_OK) {
        snprintf(err, errlen, "dlock layout: %s", dlock_errmsg(b->client));
        dlock_client_free(b->client);
        free(b);
        return NULL;
    }
    rc = dlock_loop_new(&b->dl, b->client);
    if (rc != DLOCK_OK) {
        snprintf(err, errlen, "dlock loop: %s: %s", dlock_strerror(rc),
                 dlock_errmsg(b->client));
        dlock_client_free(b->client);
        free(b);
        return NULL;
    }
    rc = dlock_loop_uv_attach(&b->uv, loop, b->dl);
    if (rc != 0) {
        snprintf(err, errlen, "dlock loop: libuv: %s", uv_strerror(rc));
        dlock_loop_free(b->dl);
        dlock_client_free(b->client);
        free(b);
        return NULL;
    }
    return &b->base;
}
