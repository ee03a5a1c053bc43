/*
 * lsub.c - a loop's subscriber connection (SUBSCRIBE per channel some
 * operation waits on; messages and confirmations handed to waits.c through
 * the loop's hooks; reopened after a failure, closed when nothing waits)
 * and the clock of the loop's two connections. Opened without blocking
 * from process, as the command connection (lconn.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/conn.h"
#include "loop/loop_impl.h"
#include "topo/node.h"

/* See loop_impl.h. */
void dloop__conns_update(dlock_loop *l)
{
    dloop__lc_reg(l, &l->cmd);
    dloop__lc_reg(l, &l->sub);
}

/* Queue a SUBSCRIBE of channel s on the open subscriber connection (its
 * state becomes 1, asked; left 0 when out of memory). */
static void sub_one(dlock_loop *l, lsub *s)
{
    const char *argv[2] = {"SUBSCRIBE", s->chan};
    size_t lens[2] = {9, s->len};
    if (dlock__conn_append_argv(l->sub.p.conn, 2, argv, lens) == DLOCK_OK)
        s->state = 1;
}

/* Subscriber: (re)subscribe every channel not subscribed yet. */
static void sub_flush(dlock_loop *l)
{
    size_t i;
    lsub *s;
    for (i = 0; i < l->nsubs; i++)
        for (s = l->subs[i]; s != NULL; s = s->next)
            if (s->state == 0 && s->refs > 0)
                sub_one(l, s);
}

/* The subscriber failed: every channel is unsubscribed; waiters retry. */
static void sub_fail(dlock_loop *l)
{
    size_t i;
    lsub *s;
    dloop__lc_unreg(l, &l->sub);
    dlock__node_opening_free(l->sub.open);
    l->sub.open = NULL;
    dlock__conn_close(l->sub.p.conn);
    l->sub.p.conn = NULL;
    l->sub.retry_at = dlock__now_ms() + 100; /* next try not before */
    for (i = 0; i < l->nsubs; i++)
        for (s = l->subs[i]; s != NULL; s = s->next)
            s->state = s->refused = 0;
    l->sub_lost(l);
}

static lsub *sub_find(dlock_loop *l, const char *chan, size_t len);

/* A message or confirmation on the subscriber. */
static void sub_reply(dlock_loop *l, redisReply *r)
{
    lsub *s;
    if (r->type == REDIS_REPLY_ERROR) {
        /* A SUBSCRIBE refused (NOPERM: no channel permission): no message
         * will come, so the channels waiting for a confirmation are
         * settled as refused (the error does not say which one it was:
         * every one asked) and their waiters go on by the wait's fallback
         * (waits.c: sub_settled). A channel confirmed later is not. */
        size_t i;
        l->sub_refused = 1; /* dlock_loop_warning */
        for (i = 0; i < l->nsubs; i++)
            for (s = l->subs[i]; s != NULL; s = s->next)
                if (s->state == 1) {
                    s->state = 2;
                    s->refused = 1;
                    l->on_subscribed(l, s);
                }
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
        r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING)
        return;
    s = sub_find(l, r->element[1]->str, r->element[1]->len);
    if (s == NULL)
        return;
    if (strcmp(r->element[0]->str, "subscribe") == 0) {
        s->state = 2;
        s->refused = 0;
        l->on_subscribed(l, s);
    } else if (strcmp(r->element[0]->str, "message") == 0 &&
               r->element[2]->type == REDIS_REPLY_STRING) {
        l->on_message(l, s, r->element[2]->str, r->element[2]->len);
    }
}

/* The subscriber's messages and confirmations (they come unasked). */
static int sub_collect(dlock_loop *l, char *err, size_t len)
{
    redisReply *rep;
    int got = 0;
    while (l->sub.p.conn != NULL &&
           (got = dlock__conn_pop_reply(l->sub.p.conn, &rep, err, len)) > 0) {
        sub_reply(l, rep);
        freeReplyObject(rep);
    }
    return l->sub.p.conn != NULL && got < 0 ? DLOCK_EPROTO : DLOCK_OK;
}

static void sub_fail_rc(dlock_loop *l, int rc, const char *err)
{
    (void)rc;
    (void)err;
    sub_fail(l);
}

static const lconn_ops sub_ops = {sub_flush, sub_collect, sub_fail_rc};

void dloop__sub_io(dlock_loop *l, short revents)
{
    dloop__lc_io(l, &l->sub, &sub_ops, revents);
}

/* See loop_impl.h. */
void dloop__conns_time(dlock_loop *l, int64_t now)
{
    char err[LOOP_ERRLEN];
    int rc;
    dloop__cmd_time(l, now);
    if (l->sub.open != NULL &&
        now >= dlock__node_opening_deadline(l->sub.open)) {
        sub_fail(l);
    } else if (l->subcount == 0 && l->sub.p.conn != NULL) {
        dloop__lc_unreg(l, &l->sub);
        dlock__conn_close(l->sub.p.conn); /* nothing waits */
        l->sub.p.conn = NULL;
    } else if (l->subcount > 0 && l->sub.p.conn == NULL &&
               l->sub.open == NULL && now >= l->sub.retry_at) {
        rc = dloop__lc_open(l, &l->sub, err, sizeof err);
        if (rc == DLOCK_OK)
            sub_flush(l);
        else if (rc != DLOCK__OPEN_AGAIN)
            sub_fail(l);
    }
    dloop__conns_update(l);
}

/* See loop_impl.h. */
int64_t dloop__conns_wake(const dlock_loop *l)
{
    int64_t w = dloop__cmd_wake(l);
    if (l->sub.open != NULL) {
        int64_t s = dlock__node_opening_deadline(l->sub.open);
        if (w < 0 || s < w)
            w = s;
    } else if (l->subcount > 0 && l->sub.p.conn == NULL) {
        if (w < 0 || l->sub.retry_at < w)
            w = l->sub.retry_at;
    }
    return w;
}

/* See loop_impl.h. */
void dloop__conns_close(dlock_loop *l)
{
    size_t i;
    lsub *s, *n;
    dloop__cmd_fail(l, DLOCK_CANCELED, "the loop was freed");
    dloop__lc_unreg(l, &l->sub);
    dlock__node_opening_free(l->sub.open);
    dlock__conn_close(l->sub.p.conn);
    l->sub.open = NULL;
    l->sub.p.conn = NULL;
    for (i = 0; i < l->nsubs; i++)
        for (s = l->subs[i]; s != NULL; s = n) {
            n = s->next;
            free(s);
        }
}

static size_t sub_hash(const dlock_loop *l, const char *chan, size_t len)
{
    size_t h = 5381, i;
    for (i = 0; i < len; i++)
        h = h * 33 + (unsigned char)chan[i];
    return h & (l->nsubs - 1);
}

static lsub *sub_find(dlock_loop *l, const char *chan, size_t len)
{
    lsub *s = l->subs[sub_hash(l, chan, len)];
    while (s != NULL && (s->len != len || memcmp(s->chan, chan, len) != 0))
        s = s->next;
    return s;
}

lsub *dloop__sub_get(dlock_loop *l, const char *chan, size_t len)
{
    lsub *s = sub_find(l, chan, len);
    size_t b;
    if (s == NULL) {
        s = calloc(1, sizeof *s + len + 1);
        if (s == NULL)
            return NULL;
        s->chan = (char *)(s + 1);
        memcpy(s->chan, chan, len);
        s->len = len;
        b = sub_hash(l, chan, len);
        s->next = l->subs[b];
        l->subs[b] = s;
    }
    if (s->refs++ == 0) {
        l->subcount++;
        if (l->sub.p.conn != NULL) {
            /* This channel only: a walk of every channel per new one made
             * N waiters cost N^2 (10,000 stalled the loop for seconds). */
            if (s->state == 0)
                sub_one(l, s);
            dloop__lc_reg(l, &l->sub);
        } else {
            dloop__signal(l);
        }
    }
    return s;
}

void dloop__sub_put(dlock_loop *l, lsub *s)
{
    lsub **p;
    if (s == NULL || --s->refs > 0)
        return;
    l->subcount--;
    if (s->state != 0 && l->sub.p.conn != NULL) {
        const char *argv[2] = {"UNSUBSCRIBE", s->chan};
        size_t lens[2] = {11, s->len};
        dlock__conn_append_argv(l->sub.p.conn, 2, argv, lens);
        dloop__lc_reg(l, &l->sub);
    }
    for (p = &l->subs[sub_hash(l, s->chan, s->len)]; *p != s; p = &(*p)->next)
        ;
    *p = s->next;
    free(s);
}
