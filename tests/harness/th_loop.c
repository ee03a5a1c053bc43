/*
 * th_loop.c - see th_loop.h.
 */
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "th_loop.h"

void th_note(dlock_op *op, int status, dlock_hold *hold, void *userdata)
{
    th_seen *s = userdata;
    s->done++;
    s->status = status;
    s->hold = hold;
    snprintf(s->err, sizeof s->err, "%s", dlock_op_errmsg(op));
}

void th_vnote(dlock_op *op, int status, dlock_hold *hold, void *userdata)
{
    th_vseen *x = userdata;
    size_t len = 0, n;
    const char *v = dlock_op_value(op, &len, &x->fence);
    n = len < sizeof x->v ? len : sizeof x->v - 1;
    x->has = v != NULL;
    x->vl = len;
    if (n > 0)
        memcpy(x->v, v, n);
    x->v[n] = '\0';
    th_note(op, status, hold, &x->s);
}

/* One round: poll the loops' fds until the nearest timeout (at most
 * max_ms), then process each. */
static void round_once(dlock_loop **ls, int n, int64_t max_ms)
{
    struct pollfd p[8];
    int64_t t = max_ms;
    int i;
    for (i = 0; i < n; i++) {
        int64_t ti = dlock_loop_timeout_ms(ls[i]);
        p[i].fd = dlock_loop_fd(ls[i]);
        p[i].events = POLLIN;
        p[i].revents = 0;
        if (ti >= 0 && ti < t)
            t = ti;
    }
    poll(p, (nfds_t)n, (int)(t > 0 ? t : 0));
    for (i = 0; i < n; i++)
        dlock_loop_process(ls[i]);
}

int th_loop_run(dlock_loop **ls, int n, const int *flag)
{
    int64_t end = th_now_ms() + 30000;
    while (!*flag) {
        if (th_now_ms() >= end)
            return -1;
        round_once(ls, n, 50);
    }
    return 0;
}

void th_loop_run_for(dlock_loop **ls, int n, int64_t ms)
{
    int64_t end = th_now_ms() + ms, left;
    while ((left = end - th_now_ms()) > 0)
        round_once(ls, n, left);
}

int th_loop_lock(dlock_loop *l, const char *name, const dlock_loop_acquire *o,
                 dlock_hold **hold)
{
    th_seen s = {0};
    *hold = NULL;
    if (dlock_loop_lock(NULL, l, name, o, th_note, &s) != DLOCK_OK)
        return -1000;
    if (s.done != 0 || th_loop_run(&l, 1, &s.done) != 0)
        return -1001; /* run from inside the call, or a hang */
    if (s.status != DLOCK_OK)
        fprintf(stderr, "th_loop_lock %s: %d (%s)\n", name, s.status, s.err);
    *hold = s.hold;
    return s.status;
}

int th_loop_release(dlock_loop *l, dlock_hold *h)
{
    th_seen s = {0};
    if (dlock_loop_release(NULL, l, h, th_note, &s) != DLOCK_OK)
        return -1000;
    if (th_loop_run(&l, 1, &s.done) != 0)
        return -1001;
    if (s.status != DLOCK_OK)
        fprintf(stderr, "th_loop_release: %d (%s)\n", s.status, s.err);
    return s.status;
}

dlock_loop *th_loop_new(dlock_client *c)
{
    dlock_loop *l = NULL;
    if (dlock_loop_new(&l, c) != DLOCK_OK)
        fprintf(stderr, "dlock_loop_new: %s\n", dlock_errmsg(c));
    return l;
}

dlock_loop_acquire th_loop_opts(const dlock_client *c, int64_t wait_ms,
                                int64_t lease_ms)
{
    dlock_loop_acquire o;
    dlock_loop_acquire_init(&o, c);
    o.wait_ms = wait_ms;
    o.lease_ms = lease_ms;
    return o;
}
