/*
 * dlock_loop_uv.h - run a dlock_loop (dlock_loop.h) inside a libuv loop,
 * as hiredis's adapters do: a uv_poll_t on dlock_loop_fd() and a
 * uv_timer_t for dlock_loop_timeout_ms(); both call dlock_loop_process()
 * and re-arm the timer. Header only (link libuv yourself).
 *
 *   dlock_loop_uv a;
 *   dlock_loop_uv_attach(&a, uv_default_loop(), loop);
 *   ... dlock_loop_lock(...) ...; uv_run(uv_default_loop(), UV_RUN_DEFAULT);
 *   dlock_loop_uv_detach(&a); (then let uv run the handles' close, then
 *   dlock_loop_free(loop))
 *
 * The struct must stay where it is while attached and until libuv has
 * closed its handles (the loop's next iteration after detach). The
 * dlock_loop is used from the uv loop's thread only.
 */
#ifndef DLOCK_LOOP_UV_H
#define DLOCK_LOOP_UV_H

#include <uv.h>

#include "dlock_loop.h"

typedef struct dlock_loop_uv {
    uv_poll_t poll;
    uv_timer_t timer;
    dlock_loop *loop;
} dlock_loop_uv;

static inline void dlock_loop_uv__timer_cb(uv_timer_t *t);

/* Process, then arm the timer for the loop's next deadline. */
static inline void dlock_loop_uv__run(dlock_loop_uv *a)
{
    int64_t t;
    dlock_loop_process(a->loop);
    t = dlock_loop_timeout_ms(a->loop);
    if (t >= 0)
        uv_timer_start(&a->timer, dlock_loop_uv__timer_cb, (uint64_t)t, 0);
    else
        uv_timer_stop(&a->timer);
}

static inline void dlock_loop_uv__timer_cb(uv_timer_t *t)
{
    dlock_loop_uv__run((dlock_loop_uv *)t->data);
}

static inline void dlock_loop_uv__poll_cb(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    dlock_loop_uv__run((dlock_loop_uv *)p->data);
}

/* Watch loop from uvl. Returns 0, or a libuv error code. */
static inline int dlock_loop_uv_attach(dlock_loop_uv *a, uv_loop_t *uvl,
                                       dlock_loop *loop)
{
    int rc;
    a->loop = loop;
    rc = uv_poll_init(uvl, &a->poll, dlock_loop_fd(loop));
    if (rc != 0)
        return rc;
    rc = uv_timer_init(uvl, &a->timer);
    if (rc != 0) {
        uv_close((uv_handle_t *)&a->poll, NULL);
        return rc;
    }
    a->poll.data = a;
    a->timer.data = a;
    rc = uv_poll_start(&a->poll, UV_READABLE, dlock_loop_uv__poll_cb);
    if (rc == 0)
        uv_timer_start(&a->timer, dlock_loop_uv__timer_cb, 0, 0);
    return rc;
}

/* Stop watching: the handles are closed (libuv finishes that on its next
 * iteration; a must stay valid until then). */
static inline void dlock_loop_uv_detach(dlock_loop_uv *a)
{
    uv_poll_stop(&a->poll);
    uv_timer_stop(&a->timer);
    uv_close((uv_handle_t *)&a->poll, NULL);
    uv_close((uv_handle_t *)&a->timer, NULL);
}

#endif /* DLOCK_LOOP_UV_H */
