/*
 * loop_epoll.c - the event-loop API (dlock_loop.h) in a plain epoll loop:
 * N "requests" for K lock names on one thread; the first for a name gets
 * its lock, writes a fenced value with its token, then releases; the
 * others for a name in progress are refused at once (DLOCK_BUSY: a loop
 * never re-enters a name it holds or is acquiring), as a de-duplicating
 * gateway refuses a duplicate. Exit 0 when every request completed and
 * every write was accepted.
 *
 *   loop_epoll redis://127.0.0.1:6379 [N [K]]
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>

#include <dlock.h>
#include <dlock_loop.h>

static dlock_loop *loop;
static int pending, failed, refused;

static void released(dlock_op *op, int status, dlock_hold *hold, void *ud)
{
    (void)hold;
    (void)ud;
    if (status != DLOCK_OK) {
        fprintf(stderr, "release: %s\n", dlock_op_errmsg(op));
        failed++;
    }
    pending--;
}

static void written(dlock_op *op, int status, dlock_hold *hold, void *ud)
{
    dlock_hold *h = ud; /* the hold the write was made under */
    (void)hold;
    if (status != DLOCK_OK) {
        fprintf(stderr, "fenced set: %s\n", dlock_op_errmsg(op));
        failed++;
    }
    if (dlock_loop_release(NULL, loop, h, released, NULL) != DLOCK_OK)
        failed++, pending--;
}

static void acquired(dlock_op *op, int status, dlock_hold *hold, void *ud)
{
    char key[64];
    (void)ud;
    if (status == DLOCK_BUSY) {
        refused++;
        pending--;
        return;
    }
    if (status != DLOCK_OK) {
        fprintf(stderr, "acquire: %s\n", dlock_op_errmsg(op));
        failed++;
        pending--;
        return;
    }
    snprintf(key, sizeof key, "loop_epoll:%s", dlock_hold_name(hold));
    if (dlock_loop_fenced_set(NULL, loop, key, dlock_hold_token(hold), "x", 1,
                              written, hold) != DLOCK_OK)
        failed++, pending--;
}

int main(int argc, char **argv)
{
    dlock_options o;
    dlock_client *c;
    dlock_loop_acquire ao;
    char err[256], name[32];
    int n = argc > 2 ? atoi(argv[2]) : 100, k = argc > 3 ? atoi(argv[3]) : 10;
    int ep, i;
    struct epoll_event ev = {.events = EPOLLIN};
    if (argc < 2 || n < 1 || k < 1) {
        fprintf(stderr, "usage: loop_epoll URL [N [K]]\n");
        return 2;
    }
    dlock_options_init(&o);
    o.servers = (const char *const *)&argv[1];
    o.nservers = 1;
    if (dlock_client_new(&c, &o, err, sizeof err) != DLOCK_OK ||
        dlock_loop_new(&loop, c) != DLOCK_OK) {
        fprintf(stderr, "loop_epoll: %s\n", err);
        return 1;
    }
    dlock_loop_acquire_init(&ao, c);
    ao.wait_ms = 10000; /* wait for the name, at most 10 s */
    ao.lease_ms = 5000;
    for (i = 0; i < n; i++, pending++) {
        snprintf(name, sizeof name, "name-%d", i % k);
        if (dlock_loop_lock(NULL, loop, name, &ao, acquired, NULL) != DLOCK_OK)
            return 1;
    }
    ep = epoll_create1(0);
    epoll_ctl(ep, EPOLL_CTL_ADD, dlock_loop_fd(loop), &ev);
    while (pending > 0) {
        int64_t t = dlock_loop_timeout_ms(loop);
        epoll_wait(ep, &ev, 1, t < 0 || t > 1000 ? 1000 : (int)t);
        dlock_loop_process(loop);
    }
    printf("%d requests: %d done, %d refused, %d failed\n", n,
           n - refused - failed, refused, failed);
    dlock_loop_free(loop);
    dlock_client_free(c);
    return failed == 0 ? 0 : 1;
}
