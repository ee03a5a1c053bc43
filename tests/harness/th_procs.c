/*
 * th_procs.c - the forked holder, waiter and contenders of the
 * integration tests (see th_procs.h for their contract).
 */
#include "th_procs.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int th_exited_ok(pid_t p)
{
    int st;
    if (waitpid(p, &st, 0) != p)
        return 0;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* In a child: the factory's client, or exit 9. */
static dlock_client *child_client(th_client_fn client, void *arg)
{
    dlock_client *c = client(arg);
    if (c == NULL)
        _exit(9);
    return c;
}

pid_t th_proc_holder(th_client_fn client, void *client_arg, const char *name,
                     int *ready_fd, int *go_fd)
{
    int rp[2], gp[2];
    pid_t p;
    if (pipe(rp) != 0)
        return -1;
    if (pipe(gp) != 0) {
        close(rp[0]);
        close(rp[1]);
        return -1;
    }
    p = fork();
    if (p == 0) {
        dlock_client *c = child_client(client, client_arg);
        dlock_lock *l;
        char b = 'r';
        close(rp[0]);
        close(gp[1]);
        if (dlock_lock_acquire(&l, c, name, 0, 30000) != DLOCK_OK)
            _exit(3);
        if (write(rp[1], &b, 1) != 1 || read(gp[0], &b, 1) != 1)
            _exit(4);
        _exit(dlock_lock_release(l) == DLOCK_OK ? 0 : 5);
    }
    close(rp[1]);
    close(gp[0]);
    if (p < 0) {
        close(rp[0]);
        close(gp[1]);
        return -1;
    }
    *ready_fd = rp[0];
    *go_fd = gp[1];
    return p;
}

pid_t th_proc_waiter_start(const th_proc_waiter *w, int idx)
{
    pid_t p = fork();
    if (p == 0) {
        dlock_client *c = child_client(w->client, w->client_arg);
        dlock_lock *l;
        if (dlock_lock_acquire(&l, c, w->name, w->wait_ms, w->lease_ms) !=
            DLOCK_OK)
            _exit(3);
        if (w->record != NULL)
            w->record(c, l, idx, w->record_arg);
        th_sleep_ms(w->hold_ms);
        _exit(dlock_lock_release(l) == DLOCK_OK ? 0 : 5);
    }
    return p;
}

/* One contender's loop; never returns. */
static void contender(const th_contend *k)
{
    dlock_client *c = child_client(k->client, k->client_arg);
    int i, fail = 0;
    for (i = 0; i < k->iters; i++) {
        dlock_lock *l;
        int rc = dlock_lock_acquire(&l, c, k->name, k->wait_ms, k->lease_ms);
        if (rc != DLOCK_OK) {
            fprintf(stderr, "acquire: %s (%s)\n", dlock_strerror(rc),
                    dlock_errmsg(c));
            fail = 1;
            continue;
        }
        if (th_rmw(k->counter_srv, k->counter_key) != 0) {
            fprintf(stderr, "rmw failed\n");
            fail = 1;
        }
        if (k->inside != NULL && k->inside(c, l, k->inside_arg) != 0)
            fail = 1;
        rc = dlock_lock_release(l);
        if (rc != DLOCK_OK) {
            fprintf(stderr, "release: %s (%s)\n", dlock_strerror(rc),
                    dlock_errmsg(c));
            fail = 1;
        }
    }
    dlock_client_free(c);
    _exit(fail);
}

int th_contend_run(const th_contend *k)
{
    pid_t *pids = calloc((size_t)k->procs, sizeof *pids);
    int i, bad = 0;
    if (pids == NULL)
        return k->procs;
    for (i = 0; i < k->procs; i++) {
        pids[i] = fork();
        if (pids[i] == 0)
            contender(k);
    }
    for (i = 0; i < k->procs; i++)
        if (pids[i] < 0 || !th_exited_ok(pids[i]))
            bad++;
    free(pids);
    return bad;
}
