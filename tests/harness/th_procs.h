/*
 * th_procs.h - forked processes of the integration tests (th_procs.c):
 * a holder that takes a lock and releases it when told, a waiter that
 * records its entry, and a group of contenders that increment a counter
 * under the lock.
 *
 * Each child makes its own client with the test's factory (a client is
 * never shared across fork), never returns into the test (no cmocka in a
 * child) and reports by its exit status only: 0 when all went well. The
 * parent reaps it with th_exited_ok(). Exit statuses of a child:
 *   3 the acquire failed   4 the pipe to the parent failed
 *   5 the release failed   9 the factory made no client
 * Loopback servers only, like everything in the harness.
 */
#ifndef DLOCK_TEST_TH_PROCS_H
#define DLOCK_TEST_TH_PROCS_H

#include <stdint.h>
#include <sys/types.h>

#include "dlock.h"
#include "harness.h"

/* A client factory: called in the child; NULL makes the child exit 9. */
typedef dlock_client *(*th_client_fn)(void *arg);

/* Wait for child p: 1 when it exited with status 0, else 0. */
int th_exited_ok(pid_t p);

/* The holder: a child that acquires NAME (try once, lease 30 s), writes
 * one byte to *ready_fd's pipe, reads one byte from *go_fd's pipe, then
 * releases and exits. The parent keeps the read end of the first pipe
 * (*ready_fd: a byte there means it holds) and the write end of the
 * second (*go_fd: write a byte to let it release); close both when done.
 * Returns the child's pid, or -1 (nothing started) when a pipe or the
 * fork failed. */
pid_t th_proc_holder(th_client_fn client, void *client_arg, const char *name,
                     int *ready_fd, int *go_fd);

/* A waiter child: acquire name (wait_ms, lease_ms); then record(idx,
 * record_arg) inside the hold (e.g. push its index onto a list, which
 * gives the order of service), hold for hold_ms, release. */
typedef struct th_proc_waiter {
    th_client_fn client;
    void *client_arg;
    const char *name;
    int64_t wait_ms, lease_ms, hold_ms;
    /* Inside the hold; its outcome is the test's to check. */
    void (*record)(dlock_client *c, dlock_lock *l, int idx, void *arg);
    void *record_arg;
} th_proc_waiter;

/* Fork waiter number idx. Its pid, or -1 when the fork failed. */
pid_t th_proc_waiter_start(const th_proc_waiter *w, int idx);

/* Contenders: procs children, each iters times: acquire name (wait_ms,
 * lease_ms), th_rmw(counter_srv, counter_key) (an increment that loses
 * updates unless the lock excludes), then inside() when given, release.
 * A child exits 1 when any of these failed (each failure said on
 * stderr), else 0. */
typedef struct th_contend {
    th_client_fn client;
    void *client_arg;
    const char *name;
    int64_t wait_ms, lease_ms;
    int procs, iters;
    const th_server *counter_srv;
    const char *counter_key;
    /* Optional, inside each hold after the increment: 0, or -1 to fail
     * the child. */
    int (*inside)(dlock_client *c, dlock_lock *l, void *arg);
    void *inside_arg;
} th_contend;

/* Run the contenders and reap them all. Returns how many did not exit
 * 0 (a failed fork counts as one). */
int th_contend_run(const th_contend *k);

#endif /* DLOCK_TEST_TH_PROCS_H */
