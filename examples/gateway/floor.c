/*
 * floor.c - the benchmark's floor: the gateway's de-duplication written
 * directly on hiredis's async API on the same libuv loop, one connection
 * to the first server, no library in between.
 *
 * Decide: SET P:dedup:K TOKEN NX PX LEASE and GET P:result:K, pipelined
 * (in that order: a processor stores its result before it deletes its
 * lock, so a SET that wins after a finished processing sees the result).
 *   won, no result  -> PROCESS (renewed by a compare-and-PEXPIRE every
 *                      lease/3 while the backend runs)
 *   won, result     -> give the lock back (compare-and-delete), STORED
 *   lost, result    -> STORED
 *   lost, no result -> reject: BUSY; wait: ask again every --poll-ms.
 * Finish: SET P:result:K BODY [PX keep] (a plain SET: the floor has no
 * fencing) then the compare-and-delete of the lock.
 */
#include "gateway.h"

#include <hiredis/adapters/libuv.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEL_LUA                                                                \
    "if redis.call('get',KEYS[1])==ARGV[1] then "                              \
    "return redis.call('del',KEYS[1]) else return 0 end"
#define RENEW_LUA                                                              \
    "if redis.call('get',KEYS[1])==ARGV[1] then "                              \
    "return redis.call('pexpire',KEYS[1],ARGV[2]) else return 0 end"

typedef struct floor_be {
    gw_backend base;
    redisAsyncContext *ac;
    char del_sha[48], renew_sha[48];
    size_t pending;
    uint64_t seq;
    char err[256];
} floor_be;

typedef struct freq {
    floor_be *fb;
    gw_req *req;
    char token[48];
    char lockkey[300], reskey[300];
    int won;
    uv_timer_t *timer; /* renewal (processing) or retry (waiting) */
} freq;

/* Close and free a timer. */
static void timer_drop(uv_timer_t **t)
{
    if (*t) {
        uv_timer_stop(*t);
        uv_close((uv_handle_t *)*t, (uv_close_cb)free);
        *t = NULL;
    }
}

/* End FR's part in the backend. */
static void freq_free(freq *fr)
{
    timer_drop(&fr->timer);
    fr->fb->pending--;
    free(fr);
}

static void ask(freq *fr);

/* A reply's error text, or NULL when it is usable. */
static const char *reply_error(floor_be *fb, redisReply *r)
{
    if (!r)
        return fb->ac && fb->ac->errstr[0] ? fb->ac->errstr : "connection lost";
    if (r->type == REDIS_REPLY_ERROR)
        return r->str;
    return NULL;
}

static void on_retry(uv_timer_t *t)
{
    freq *fr = t->data;
    timer_drop(&fr->timer);
    ask(fr);
}

static void on_renew_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    (void)ac;
    (void)reply;
    (void)priv;
}

static void on_renew(uv_timer_t *t)
{
    freq *fr = t->data;
    char ms[24];
    snprintf(ms, sizeof ms, "%d", fr->fb->base.cfg->lease_ms);
    if (fr->fb->ac)
        redisAsyncCommand(fr->fb->ac, on_renew_reply, NULL,
                          "EVALSHA %s 1 %s %s %s", fr->fb->renew_sha,
                          fr->lockkey, fr->token, ms);
}

static void on_setnx(redisAsyncContext *ac, void *reply, void *priv)
{
    freq *fr = priv;
    redisReply *r = reply;
    (void)ac;
    fr->won = r && r->type == REDIS_REPLY_STATUS;
}

static void on_drop_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    (void)ac;
    (void)reply;
    (void)priv;
}

static void on_get(redisAsyncContext *ac, void *reply, void *priv)
{
    freq *fr = priv;
    floor_be *fb = fr->fb;
    redisReply *r = reply;
    const char *e = reply_error(fb, r);
    (void)ac;
    if (e) {
        /* A lock won in this round is given back. */
        if (fr->won && fb->ac)
            redisAsyncCommand(fb->ac, on_drop_reply, NULL, "EVALSHA %s 1 %s %s",
                              fb->del_sha, fr->lockkey, fr->token);
        gw_decided(fr->req, GW_FAIL, NULL, 0, e);
        freq_free(fr);
        return;
    }
    int have = r->type == REDIS_REPLY_STRING;
    if (have) {
        if (fr->won)
            redisAsyncCommand(fb->ac, on_drop_reply, NULL, "EVALSHA %s 1 %s %s",
                              fb->del_sha, fr->lockkey, fr->token);
        gw_decided(fr->req, GW_STORED, r->str, r->len, NULL);
        freq_free(fr);
        return;
    }
    if (fr->won) {
        int lease = fb->base.cfg->lease_ms;
        if (fb->base.cfg->backend_ms >= lease / 3) {
            fr->timer = malloc(sizeof *fr->timer);
            if (fr->timer) {
                uv_timer_init(fb->base.loop, fr->timer);
                fr->timer->data = fr;
                uv_timer_start(fr->timer, on_renew, (uint64_t)lease / 3,
                               (uint64_t)lease / 3);
            }
        }
        gw_decided(fr->req, GW_PROCESS, NULL, 0, NULL);
        return;
    }
    if (fb->base.cfg->mode == GW_REJECT) {
        gw_decided(fr->req, GW_BUSY, NULL, 0, NULL);
        freq_free(fr);
        return;
    }
    fr->timer = malloc(sizeof *fr->timer);
    if (!fr->timer) {
        gw_decided(fr->req, GW_FAIL, NULL, 0, "out of memory");
        freq_free(fr);
        return;
    }
    uv_timer_init(fb->base.loop, fr->timer);
    fr->timer->data = fr;
    uv_timer_start(fr->timer, on_retry, (uint64_t)fb->base.cfg->poll_ms, 0);
}

/* One decision round for FR: the pipelined SET NX + GET. */
static void ask(freq *fr)
{
    floor_be *fb = fr->fb;
    if (!fb->ac) {
        gw_decided(fr->req, GW_FAIL, NULL, 0, "connection lost");
        freq_free(fr);
        return;
    }
    char ms[24];
    snprintf(ms, sizeof ms, "%d", fb->base.cfg->lease_ms);
    fr->won = 0;
    redisAsyncCommand(fb->ac, on_setnx, fr, "SET %s %s NX PX %s", fr->lockkey,
                      fr->token, ms);
    redisAsyncCommand(fb->ac, on_get, fr, "GET %s", fr->reskey);
}

static void floor_begin(gw_backend *b, gw_req *req)
{
    floor_be *fb = (floor_be *)b;
    freq *fr = calloc(1, sizeof *fr);
    if (!fr) {
        gw_decided(req, GW_FAIL, NULL, 0, "out of memory");
        return;
    }
    fb->pending++;
    fr->fb = fb;
    fr->req = req;
    req->bctx = fr;
    snprintf(fr->token, sizeof fr->token, "%d-%" PRIu64, (int)getpid(),
             ++fb->seq);
    snprintf(fr->lockkey, sizeof fr->lockkey, "%s:dedup:%s", b->cfg->prefix,
             req->key);
    snprintf(fr->reskey, sizeof fr->reskey, "%s:result:%s", b->cfg->prefix,
             req->key);
    ask(fr);
}

static void on_stored(redisAsyncContext *ac, void *reply, void *priv)
{
    freq *fr = priv;
    (void)ac;
    const char *e = reply_error(fr->fb, reply);
    if (e && fr->req) {
        gw_finished(fr->req, 0, e);
        fr->req = NULL;
    }
}

static void on_released(redisAsyncContext *ac, void *reply, void *priv)
{
    freq *fr = priv;
    (void)ac;
    if (fr->req) {
        const char *e = reply_error(fr->fb, reply);
        gw_finished(fr->req, e == NULL, e);
    }
    freq_free(fr);
}

static void floor_finish(gw_backend *b, gw_req *req, const char *body,
                         size_t len)
{
    floor_be *fb = (floor_be *)b;
    freq *fr = req->bctx;
    timer_drop(&fr->timer);
    if (!fb->ac) {
        gw_finished(req, 0, "connection lost");
        freq_free(fr);
        return;
    }
    if (b->cfg->keep_ms > 0) {
        char ms[24];
        snprintf(ms, sizeof ms, "%d", b->cfg->keep_ms);
        redisAsyncCommand(fb->ac, on_stored, fr, "SET %s %b PX %s", fr->reskey,
                          body, len, ms);
    } else
        redisAsyncCommand(fb->ac, on_stored, fr, "SET %s %b", fr->reskey, body,
                          len);
    redisAsyncCommand(fb->ac, on_released, fr, "EVALSHA %s 1 %s %s",
                      fb->del_sha, fr->lockkey, fr->token);
}

static size_t floor_pending(gw_backend *b)
{
    return ((floor_be *)b)->pending;
}

static int floor_connections(gw_backend *b)
{
    return ((floor_be *)b)->ac ? 1 : 0;
}

static void floor_destroy(gw_backend *b)
{
    floor_be *fb = (floor_be *)b;
    if (fb->ac) {
        redisAsyncContext *ac = fb->ac;
        fb->ac = NULL;
        redisAsyncDisconnect(ac);
        uv_run(b->loop, UV_RUN_NOWAIT);
    }
    free(fb);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    floor_be *fb = ac->data;
    (void)status;
    if (fb)
        fb->ac = NULL;
}

static const struct gw_backend_vt floor_vt = {
    floor_begin, floor_finish, floor_pending, floor_connections, floor_destroy};

/* Split "redis://HOST:PORT[/...]" or "HOST:PORT" into host and port. */
static int parse_url(const char *url, char *host, size_t hl, int *port)
{
    const char *p = url;
    if (!strncmp(p, "redis://", 8))
        p += 8;
    else if (strstr(p, "://"))
        return -1;
    if (strchr(p, '@'))
        return -1;
    const char *c = strrchr(p, ':');
    if (!c || (size_t)(c - p) >= hl || c == p)
        return -1;
    memcpy(host, p, (size_t)(c - p));
    host[c - p] = 0;
    char *e;
    long x = strtol(c + 1, &e, 10);
    if (x <= 0 || x > 65535 || (*e && *e != '/'))
        return -1;
    *port = (int)x;
    return 0;
}

/* Load SCRIPT on a blocking connection; its SHA into SHA. */
static int load_script(redisContext *rc, const char *script, char *sha,
                       size_t n)
{
    redisReply *r = redisCommand(rc, "SCRIPT LOAD %s", script);
    int ok = r && r->type == REDIS_REPLY_STRING && r->len < n;
    if (ok)
        memcpy(sha, r->str, r->len + 1);
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

gw_backend *gw_floor_new(uv_loop_t *loop, const gw_config *cfg, char *err,
                         size_t errlen)
{
    char host[256];
    int port;
    if (cfg->nservers != 1 ||
        parse_url(cfg->servers[0], host, sizeof host, &port) != 0) {
        snprintf(err, errlen,
                 "--impl floor: one -s redis://HOST:PORT (no TLS, no "
                 "password)");
        return NULL;
    }
    floor_be *fb = calloc(1, sizeof *fb);
    if (!fb) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    fb->base.vt = &floor_vt;
    fb->base.cfg = cfg;
    fb->base.loop = loop;
    struct timeval tv = {2, 0};
    redisContext *rc = redisConnectWithTimeout(host, port, tv);
    if (!rc || rc->err ||
        load_script(rc, DEL_LUA, fb->del_sha, sizeof fb->del_sha) != 0 ||
        load_script(rc, RENEW_LUA, fb->renew_sha, sizeof fb->renew_sha)) {
        snprintf(err, errlen, "floor: cannot reach %s: %s", cfg->servers[0],
                 rc && rc->err ? rc->errstr : "SCRIPT LOAD failed");
        if (rc)
            redisFree(rc);
        free(fb);
        return NULL;
    }
    redisFree(rc);
    fb->ac = redisAsyncConnect(host, port);
    if (!fb->ac || fb->ac->err) {
        snprintf(err, errlen, "floor: cannot connect to %s", cfg->servers[0]);
        free(fb);
        return NULL;
    }
    fb->ac->data = fb;
    redisLibuvAttach(fb->ac, loop);
    redisAsyncSetDisconnectCallback(fb->ac, on_disconnect);
    return &fb->base;
}
