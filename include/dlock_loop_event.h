/*
 * dlock_loop_event.h - run a dlock_loop (dlock_loop.h) inside a libevent
 * event_base, as hiredis's adapters do: a persistent read event on
 * dlock_loop_fd() and a timer for dlock_loop_timeout_ms(); both call
 * dlock_loop_process() and re-arm the timer. Header only (link libevent
 * yourself).
 *
 *   dlock_loop_event a;
 *   dlock_loop_event_attach(&a, base, loop);
 *   ... dlock_loop_lock(...) ...; event_base_dispatch(base);
 *   dlock_loop_event_detach(&a); dlock_loop_free(loop);
 *
 * The dlock_loop is used from the event_base's thread only.
 */
#ifndef DLOCK_LOOP_EVENT_H
#define DLOCK_LOOP_EVENT_H

#include <event2/event.h>

#include "dlock_loop.h"

typedef struct dlock_loop_event {
    struct event *rd;
    struct event *tm;
    dlock_loop *loop;
} dlock_loop_event;

/* Process, then arm the timer for the loop's next deadline. */
static inline void dlock_loop_event__cb(evutil_socket_t fd, short what,
                                        void *arg)
{
    dlock_loop_event *a = (dlock_loop_event *)arg;
    int64_t t;
    (void)fd;
    (void)what;
    dlock_loop_process(a->loop);
    t = dlock_loop_timeout_ms(a->loop);
    if (t >= 0) {
        struct timeval tv;
        tv.tv_sec = (long)(t / 1000);
        tv.tv_usec = (long)(t % 1000) * 1000;
        evtimer_add(a->tm, &tv);
    } else {
        evtimer_del(a->tm);
    }
}

/* Watch loop from base. Returns 0, or -1 (out of memory). */
static inline int dlock_loop_event_attach(dlock_loop_event *a,
                                          struct event_base *base,
                                          dlock_loop *loop)
{
    struct timeval now = {0, 0};
    a->loop = loop;
    a->rd = event_new(base, dlock_loop_fd(loop), EV_READ | EV_PERSIST,
                      dlock_loop_event__cb, a);
    a->tm = evtimer_new(base, dlock_loop_event__cb, a);
    if (a->rd == NULL || a->tm == NULL || event_add(a->rd, NULL) != 0) {
        if (a->rd != NULL)
            event_free(a->rd);
        if (a->tm != NULL)
            event_free(a->tm);
        a->rd = a->tm = NULL;
        return -1;
    }
    evtimer_add(a->tm, &now);
    return 0;
}

/* Stop watching and free the events. */
static inline void dlock_loop_event_detach(dlock_loop_event *a)
{
    if (a->rd != NULL)
        event_free(a->rd);
    if (a->tm != NULL)
        event_free(a->tm);
    a->rd = a->tm = NULL;
}

#endif /* DLOCK_LOOP_EVENT_H */
