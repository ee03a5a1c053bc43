/*
 * th_waiter.c - the waiter thread (see th_waiter.h for its contract).
 */
#include "th_waiter.h"

#include <string.h>

#include "harness.h"

/* The thread: acquire, record the entry, hold and release (or keep). */
static void *waiter_main(void *arg)
{
    th_waiter *w = arg;
    th_acquire_fn acquire = w->acquire ? w->acquire : dlock_lock_acquire;
    dlock_lock *l = NULL;
    w->rc = acquire(&l, w->c, w->name, w->wait_ms, w->lease_ms);
    w->done_ms = th_now_ms();
    if (w->rc == DLOCK_OK) {
        if (w->order != NULL)
            w->seq[atomic_fetch_add(w->order, 1)] = w->id;
        if (w->entered != NULL)
            atomic_fetch_add(w->entered, 1);
        atomic_store(&w->got, 1);
    }
    if (w->hold_ms == TH_WAITER_KEEP) {
        w->l = l;
        return NULL;
    }
    if (l != NULL) {
        if (w->hold_ms > 0)
            th_sleep_ms(w->hold_ms);
        dlock_lock_release(l);
    }
    return NULL;
}

int th_waiter_start(th_waiter *w)
{
    w->rc = 1; /* not a status: the acquire has not returned */
    atomic_store(&w->got, 0);
    w->done_ms = 0;
    w->l = NULL;
    return pthread_create(&w->t, NULL, waiter_main, w);
}

int th_waiter_join(th_waiter *w)
{
    return pthread_join(w->t, NULL);
}

dlock_shared_info th_shared_info(dlock_client *c, const char *name)
{
    dlock_shared_info info;
    if (dlock_shared_inspect(c, name, &info, NULL, 0) != DLOCK_OK) {
        memset(&info, 0, sizeof info);
        info.kind = -1;
        info.limit = info.holders = info.waiters = info.writer_waiting_ms = -1;
    }
    return info;
}

/* See th_waiter.h. */
th_waiter th_waiter_keeping(dlock_client *c, const char *name)
{
    return (th_waiter){.c = c,
                       .name = name,
                       .wait_ms = 20000,
                       .lease_ms = 10000,
                       .hold_ms = TH_WAITER_KEEP};
}

/* See th_waiter.h. */
int th_await_queued(const th_server *s, const char *name, long long n)
{
    int64_t end = th_now_ms() + 10000;
    while (th_cmd_int(s, "ZCARD dlock:{%s}:q", name) != n) {
        if (th_now_ms() >= end)
            return -1;
        th_sleep_ms(1);
    }
    return 0;
}

/* See th_waiter.h. */
int th_wait_busy(dlock_client *c, unsigned long long n, int64_t timeout_ms)
{
    dlock_stats st;
    int64_t end = th_now_ms() + timeout_ms;
    do {
        dlock_client_stats(c, &st);
        if (st.busy >= n)
            return 0;
        th_sleep_ms(5);
    } while (th_now_ms() < end);
    return -1;
}

/* See th_waiter.h. */
int th_release_heard(th_waiter *w, dlock_lock *l)
{
    if (th_waiter_start(w) != 0)
        return -1;
    if (th_wait_busy(w->c, 2, 10000) != 0 ||
        dlock_lock_release(l) != DLOCK_OK) {
        th_waiter_join(w);
        return -1;
    }
    if (th_waiter_join(w) != 0)
        return -1;
    return w->rc == DLOCK_OK ? 0 : -1;
}
