/*
 * kind.c - the table of the kinds of hold (kind.h): each kind's acquire,
 * release and leave commands, its refusals and its flags. The attempt
 * and the wait read it; nothing else here decides or waits.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hold/kind.h"
#include "hold/held.h"
#include "hold/release.h"
#include "hold/retention.h"
#include "hold/rw_leave.h"

/* ---- commands ------------------------------------------------------------- */

/* Redlock: a token a little above the wall clock, so that nodes whose
 * counters agree with the clock return the same token and no raise round
 * is needed (a node grants max(its counter + 1, its time, this): safety
 * never rests on it). 0 with one server. */
static int64_t token_hint(const dlock_client *c)
{
    struct timespec ts;
    if (c->ns.n <= 1)
        return 0;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000 + 1000000;
}

/* acquire.lua. Each mode sends only the keys and arguments it reads (the
 * script lists them): a plain single-server try is 2 keys and 3
 * arguments, a fair try 3 and 4, which keeps the hot path short. */
static void lock_acquire_cmd(dlock__cmdbuf *b, const dlock_client *c,
                             const dlock__held *h, const dlock__want *w,
                             dlock__ask ask, uint64_t ticket)
{
    int64_t hint;
    if (dlock__string_layout(c)) {
        /* s_acquire.lua: a plain try (and a notify or spin waiter's) is
         * 1 key and 3 arguments, with fence retention 2 and 4; a fair
         * try adds its mode, a queued attempt also the waiter TTL. */
        int64_t keep = dlock__fence_retention(c);
        int fair = ask == DLOCK__ASK_TRY_FAIR || ask == DLOCK__ASK_FIFO;
        hint = token_hint(c); /* Redlock: with retention (forced) */
        dlock__cmd_begin(b, DLOCK__S_S_ACQUIRE);
        dlock__lock_keys(b, &h->k, keep != 0 ? 2 : 1);
        dlock__cmd_arg(b, h->owner, strlen(h->owner));
        dlock__cmd_arg_i64(b, w->lease_ms);
        dlock__cmd_arg_i64(b, h->depth);
        if (keep != 0 || fair)
            dlock__cmd_arg_i64(b, keep);
        if (fair)
            dlock__cmd_arg(b, ask == DLOCK__ASK_FIFO ? "2" : "1", 1);
        else if (hint != 0)
            dlock__cmd_arg(b, "0", 1);
        if (ask == DLOCK__ASK_FIFO)
            dlock__cmd_arg_i64(b, DLOCK__WAITER_TTL_MS);
        else if (hint != 0)
            dlock__cmd_arg(b, "0", 1);
        if (hint != 0)
            dlock__cmd_arg_i64(b, hint);
        dlock__cmd_durable(c, &b->cmd);
        return;
    }
    hint = token_hint(c);
    int queue = ask == DLOCK__ASK_FIFO, waiting = ask == DLOCK__ASK_WAIT;
    int fair = queue || ask == DLOCK__ASK_TRY_FAIR;
    /* Without fence retention the mode says so ("a" to "c"). */
    const char *modes = dlock__fence_retention(c) == 0 ? "abc" : "012";
    dlock__cmd_begin(b, DLOCK__S_ACQUIRE);
    dlock__lock_keys(b, &h->k, queue ? 4 : fair ? 3 : 2);
    dlock__cmd_arg(b, h->owner, strlen(h->owner));
    dlock__cmd_arg_i64(b, w->lease_ms);
    dlock__cmd_arg_i64(b, h->depth);
    if (fair || hint != 0 || waiting || modes[0] == 'a')
        dlock__cmd_arg(b, &modes[queue ? 2 : fair ? 1 : 0], 1);
    if (hint != 0 || queue || waiting)
        dlock__cmd_arg_i64(b, hint);
    if (waiting) {
        /* A waiting writer: readers holding the name let no new reader
         * in (acquire.lua, ARGV[8]). Not on the first try. */
        dlock__cmd_arg(b, "0", 1);
        dlock__cmd_arg(b, "0", 1);
        dlock__cmd_arg(b, "1", 1);
    } else if (queue) {
        dlock__cmd_arg_i64(b, DLOCK__WAITER_TTL_MS);
        dlock__cmd_arg_u64(b, ticket);
    }
    dlock__acquire_retention_args(b, c);
    dlock__cmd_durable(c, &b->cmd);
}

/* See kind.h. A fair try keeps the script (it must not jump a queue),
 * and so does a waiter's later try (busy, it marks the hold for its
 * wake-up), a reentry, Redlock (its nodes agree on the token), fence
 * retention (the fence hash orders tokens) and the event loop's holds
 * (w->token_now). */
int dlock__plain_acquire_cmd(dlock__cmdbuf *b, const dlock_client *c,
                             const dlock__held *h, const dlock__want *w,
                             dlock__ask ask, char *val)
{
    size_t n = strlen(h->owner);
    if (w->kind != DLOCK__KIND_LOCK || ask != DLOCK__ASK_TRY || w->token_now ||
        h->depth != 0 || !dlock__string_layout(c) || c->ns.n > 1 ||
        dlock__fence_retention(c) != 0 || n + 5 > DLOCK__PLAIN_VAL)
        return 0;
    memcpy(val, h->owner, n);
    memcpy(val + n, " 1 0", 5);
    dlock__cmd_begin(b, DLOCK__S_S_ACQUIRE);
    b->cmd.raw = 1;
    dlock__cmd_arg(b, "SET", 3);
    dlock__cmd_key(b, h->k.key, h->k.keylen);
    dlock__cmd_arg(b, val, n + 4);
    dlock__cmd_arg(b, "NX", 2);
    dlock__cmd_arg(b, "PX", 2);
    dlock__cmd_arg_i64(b, w->lease_ms);
    dlock__cmd_durable(c, &b->cmd);
    return 1;
}

/* sem_acquire.lua; its modes: try, FIFO try, queue, FIFO queue, and the
 * flag (ARGV[9]) of a waiting acquire's later attempts. */
static void permit_acquire_cmd(dlock__cmdbuf *b, const dlock_client *c,
                               const dlock__held *h, const dlock__want *w,
                               dlock__ask ask, uint64_t ticket)
{
    int mode = ask == DLOCK__ASK_TRY_FAIR ? 1
               : ask == DLOCK__ASK_QUEUE  ? 2
               : ask == DLOCK__ASK_FIFO   ? 3
                                          : 0;
    (void)ticket;
    dlock__cmd_begin(b, DLOCK__S_SEM_ACQUIRE);
    dlock__lock_keys(b, &h->k, 4);
    dlock__cmd_arg(b, h->owner, strlen(h->owner));
    dlock__cmd_arg_i64(b, w->lease_ms);
    dlock__cmd_arg_i64(b, w->limit);
    dlock__cmd_arg_i64(b, DLOCK__FENCE_RETENTION_MS);
    dlock__cmd_arg_i64(b, mode);
    dlock__cmd_arg_i64(b, DLOCK__WAITER_TTL_MS);
    dlock__cmd_arg(b, h->k.chan, h->k.chanlen);
    dlock__cmd_arg_i64(b, dlock__fair_handoff_lease(w->lease_ms));
    if (ask != DLOCK__ASK_TRY && ask != DLOCK__ASK_TRY_FAIR)
        /* A waiting acquire's later attempt: it waits under the limit
         * stored now, also when that changed while it waited. */
        dlock__cmd_arg(b, "1", 1);
    dlock__cmd_durable(c, &b->cmd);
}

/* rw_acquire.lua (no queue: every ask is the same). */
static void reader_acquire_cmd(dlock__cmdbuf *b, const dlock_client *c,
                               const dlock__held *h, const dlock__want *w,
                               dlock__ask ask, uint64_t ticket)
{
    (void)ask;
    (void)ticket;
    dlock__cmd_begin(b, DLOCK__S_RW_ACQUIRE);
    dlock__cmd_key(b, h->k.key, h->k.keylen);
    dlock__cmd_key(b, h->k.fkey, h->k.fkeylen);
    dlock__cmd_key(b, h->k.rkey, h->k.rkeylen);
    dlock__cmd_arg(b, h->owner, strlen(h->owner));
    dlock__cmd_arg_i64(b, w->lease_ms);
    dlock__cmd_arg_i64(b, DLOCK__FENCE_RETENTION_MS);
    dlock__cmd_arg_i64(b, token_hint(c));
    dlock__cmd_arg(b, w->ignore_mark ? "1" : "0", 1);
    dlock__cmd_durable(c, &b->cmd);
}

/* ---- leaving a queue ------------------------------------------------------ */

/* A fair lock's waiter gives up: leave the queue on every node; where the
 * lock was handed to it meanwhile, pass it on. */
static void lock_leave(dlock_client *c, dlock__held *h)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    uint64_t mask = 0, tok = 0;
    int i;
    dlock__cmd_begin(&b, DLOCK__S_FAIR_LEAVE);
    dlock__lock_keys(&b, &h->k, 4);
    dlock__cmd_arg(&b, h->owner, strlen(h->owner));
    h->attempt_end_ms = dlock__now_ms() + c->opts.command_timeout_ms;
    dlock__run(c, dlock__all_nodes(c), &b.cmd,
               dlock__deadline_by(c, 0, h->attempt_end_ms), res);
    for (i = 0; i < c->ns.n; i++)
        if (res[i].status == DLOCK_OK &&
            dlock__elem_int(res[i].reply, 0) == 1) {
            uint64_t t = (uint64_t)dlock__elem_int(res[i].reply, 1);
            mask |= 1ULL << i;
            if (t > tok)
                tok = t;
        }
    dlock__results_clear(res, c->ns.n);
    /* Only a fresh hold can have been handed the lock: a reentrant one
     * (waiting through an outage) finds its own earlier levels, which are
     * not to be given back. */
    if (mask != 0 && h->depth == 0)
        dlock__undo_acquire(c, h, mask, 1, tok, DLOCK__FAIR_HANDOFF_MS, 0, 0);
}

/* A semaphore's waiter gives up: leave the queue; a permit handed to it
 * meanwhile is released (and so passed on). */
static void permit_leave(dlock_client *c, dlock__held *h)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    dlock__permit_leave_cmd(&b, c, &h->k, h->owner);
    h->attempt_end_ms = dlock__now_ms() + c->opts.command_timeout_ms;
    dlock__run(c, 1, &b.cmd, dlock__deadline_by(c, 0, h->attempt_end_ms), res);
    dlock__results_clear(res, c->ns.n);
}

/* ---- the table ------------------------------------------------------------ */

static const dlock__kind kinds[] = {
    {.id = DLOCK__KIND_LOCK,
     .noun = "lock",
     .busy = " is held by another owner",
     .handed = "handed over by the holder's release",
     .reentrant = 1,
     .redlock_ok = 1,
     .queue = DLOCK__Q_FAIR,
     .queue_unsub = 1,
     .queue_at_once = 1,
     .turns = 1,
     .holder_info = 1,
     .events = 1,
     .extend_script = DLOCK__S_EXTEND,
     .extend_keys = 1,
     .acquire_cmd = lock_acquire_cmd,
     .release_cmd = dlock__lock_release_cmd,
     .leave = lock_leave,
     .give_up = dlock__rw_leave},
    {.id = DLOCK__KIND_PERMIT,
     .noun = "semaphore",
     .busy = ": no permit free",
     .handed = "a permit handed over by a release",
     .queue = DLOCK__Q_ALL,
     .fresh_token_on_confirm = 1,
     .extend_script = DLOCK__S_SEM_EXTEND,
     .extend_keys = 1,
     .acquire_cmd = permit_acquire_cmd,
     .release_cmd = dlock__permit_release_cmd,
     .leave = permit_leave},
    {.id = DLOCK__KIND_READ,
     .noun = "read-write lock",
     .busy = ": a writer holds it or waits for it",
     .handed = "handed over",
     .redlock_ok = 1,
     .queue = DLOCK__Q_NONE,
     .turns = 1,
     .extend_script = DLOCK__S_RW_EXTEND,
     .extend_keys = 2,
     .acquire_cmd = reader_acquire_cmd,
     .release_cmd = dlock__reader_release_cmd,
     .leave = NULL},
};

/* See kind.h. */
const dlock__kind *dlock__kind_of(int id)
{
    if (id < 0 || id >= (int)(sizeof kinds / sizeof kinds[0]))
        id = DLOCK__KIND_LOCK;
    return &kinds[id];
}

/* See kind.h. */
int dlock__extend_script(const dlock_client *c, const dlock__kind *k)
{
    if (k->id == DLOCK__KIND_LOCK && dlock__string_layout(c))
        return DLOCK__S_S_EXTEND;
    return k->extend_script;
}

/* ---- refusals, channels --------------------------------------------------- */

/* See kind.h. */
int dlock__refused(const redisReply *r, long long *limit, const char **other)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER)
        return 0;
    if (r->element[0]->integer == -2) {
        *limit = dlock__elem_int(r, 1);
        return DLOCK__REFUSED_LIMIT;
    }
    if (r->element[0]->integer == -3 &&
        r->element[1]->type == REDIS_REPLY_STRING) {
        *other = r->element[1]->str;
        return DLOCK__REFUSED_KIND;
    }
    return 0;
}

/* See kind.h. */
int dlock__refusal(dlock_client *c, const dlock__held *h, const dlock__want *w,
                   const dlock__result *res)
{
    long long limit = 0;
    const char *other = NULL;
    int i;
    for (i = 0; i < c->ns.n; i++) {
        int why = res[i].status == DLOCK_OK
                      ? dlock__refused(res[i].reply, &limit, &other)
                      : 0;
        if (why == DLOCK__REFUSED_LIMIT)
            return dlock__set_error(c, DLOCK_EINVAL,
                                    "semaphore %s has limit %lld, not "
                                    "%" PRId64 ": change the limit explicitly "
                                    "(dlock_sem_set_limit, dlock limit)",
                                    h->k.name, limit, w->limit);
        if (why == DLOCK__REFUSED_KIND && strcmp(other, "lock-hash") == 0)
            return dlock__layout_error(c, h->k.name, "hash");
        if (why == DLOCK__REFUSED_KIND &&
            (strcmp(other, "lock") == 0 || strcmp(other, "semaphore") == 0))
            return dlock__set_error(c, DLOCK_EINVAL, "%s is a %s, not a %s",
                                    h->k.name, other,
                                    dlock__kind_of(w->kind)->noun);
        if (why == DLOCK__REFUSED_KIND) /* a Redis type: not dlock's */
            return dlock__foreign_error(c, dlock__kind_of(w->kind)->noun,
                                        h->k.name, other);
    }
    return DLOCK_OK;
}

/* See kind.h. */
void dlock__wait_channel(const dlock__held *h, int queued, const char **chan,
                         size_t *len, const char **owner)
{
    *chan = queued ? h->k.hchan : h->k.chan;
    *len = queued ? h->k.hchanlen : h->k.chanlen;
    *owner = queued ? h->owner : NULL;
}

/* ---- a name of another kind, or not dlock's --------------------------- */

/* See kind.h. */
int dlock__foreign_error(dlock_client *c, const char *what, const char *name,
                         const char *type)
{
    return dlock__set_error(c, DLOCK_EINVAL,
                            "%s %s: its key holds a Redis %s that dlock did "
                            "not write: not dlock's (left as it is; use "
                            "another name or another key prefix)",
                            what, name, type);
}

/* See kind.h. */
int dlock__layout_error(dlock_client *c, const char *name, const char *other)
{
    return dlock__set_error(c, DLOCK_EINVAL,
                            "lock %s is held in the %s layout (by a client "
                            "with layout %s%s): every client of a name must "
                            "use one layout (dlock_client_set_layout, "
                            "--layout)",
                            name, other, other,
                            strcmp(other, "hash") == 0
                                ? ", the default, or an earlier version"
                                : "");
}

/* See kind.h. */
void dlock__kind_cmd(dlock__cmdbuf *b, const dlock__keys *k)
{
    dlock__cmd_begin(b, DLOCK__S_KIND);
    dlock__cmd_key(b, k->key, k->keylen);
    dlock__cmd_key(b, k->fkey, k->fkeylen);
}

/* See kind.h. */
int dlock__kind_answer(dlock_client *c, const char *name,
                       const dlock__result *res, int n)
{
    char type[32] = "";
    int sem = 0, i;
    /* The first Redis type that is not a lock's hash, and whether it is a
     * semaphore's (sem 1) or a string-layout lock's (2). */
    for (i = 0; i < n && type[0] == '\0'; i++) {
        const redisReply *r = res[i].reply;
        if (res[i].status != DLOCK_OK || r->type != REDIS_REPLY_ARRAY ||
            r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
            r->element[1]->type != REDIS_REPLY_INTEGER ||
            strcmp(r->element[0]->str, "hash") == 0 ||
            strcmp(r->element[0]->str, "none") == 0)
            continue;
        snprintf(type, sizeof type, "%s", r->element[0]->str);
        sem = (int)r->element[1]->integer;
    }
    if (type[0] != '\0' && sem == 2)
        return dlock__layout_error(c, name, "string");
    if (type[0] != '\0' && !sem)
        return dlock__foreign_error(c, "lock", name, type);
    return dlock__set_error(c, DLOCK_EINVAL,
                            "acquire %s: the name is a semaphore, not a lock "
                            "(the servers keep it for 7 days after its last "
                            "use)",
                            name);
}

/* See kind.h. */
int dlock__lock_kind_error(dlock_client *c, const char *name, int rc)
{
    const char *msg = dlock__errbuf(c);
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__keys *keys;
    dlock__cmdbuf b;
    if (msg == NULL || strstr(msg, "WRONGTYPE") == NULL)
        return rc;
    keys = dlock__keys_new(c, name);
    if (keys == NULL)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    /* Ask the nodes what NAME's key holds (kind.lua). */
    dlock__kind_cmd(&b, keys);
    dlock__run(c, dlock__all_nodes(c), &b.cmd, dlock__deadline(c, 0), res);
    free(keys);
    rc = dlock__kind_answer(c, name, res, c->ns.n);
    dlock__results_clear(res, c->ns.n);
    return rc;
}

/* See kind.h. */
int dlock__stamp_verdict(const redisReply *r, uint64_t *tok)
{
    const redisReply *t;
    *tok = 0;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_INTEGER)
        return DLOCK_EPROTO;
    if (r->element[0]->integer != 1)
        return DLOCK_NOT_OWNER;
    if (r->elements < 2)
        return DLOCK_EPROTO;
    t = r->element[1];
    *tok = t->type == REDIS_REPLY_INTEGER  ? (uint64_t)t->integer
           : t->type == REDIS_REPLY_STRING ? strtoull(t->str, NULL, 10)
                                           : 0;
    return *tok != 0 ? DLOCK_OK : DLOCK_EPROTO;
}
