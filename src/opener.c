/*
 * opener.c - open the connections a step over several servers lacks, one
 * thread per node, so that a node that accepts connections but does not
 * answer costs the step no more than its own slot (see opener.h).
 *
 * States of one node's open (struct job): RUNNING (its thread works; only
 * the thread writes conn, rc and err) -> DONE (the thread published them
 * with a release store of done and wrote to the eventfd) -> TAKEN (the
 * step took the result, or dlock__opener_finish pooled it). The threads
 * are always joined by dlock__opener_finish, so nothing outlives the
 * step: each open is bounded by the deadline of dlock__opener_start.
 * Signals are blocked in the threads: they stay with the caller's.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "opener.h"

/* One node's open. */
typedef struct job {
    struct dlock__opener *o;
    int i;
    pthread_t thread;
    int started;
    _Atomic int done;
    int taken;
    dlock__conn *conn;
    int rc;
    char err[DLOCK__ERRLEN];
} job;

struct dlock__opener {
    dlock__nodeset *ns;
    int64_t deadline_ms;
    int fd;         /* eventfd: one count per finished open */
    uint64_t nodes; /* started and not yet taken */
    job jobs[DLOCK_MAX_SERVERS];
};

/* The thread: open node i's connection, publish it, wake the step. */
static void *open_main(void *arg)
{
    job *j = arg;
    dlock__opener *o = j->o;
    uint64_t one = 1;
    int fresh;

    j->rc = dlock__node_get_ex(o->ns, j->i, &j->conn, o->deadline_ms, j->err,
                               sizeof j->err, &fresh);
    if (j->rc != DLOCK_OK)
        j->conn = NULL;
    atomic_store_explicit(&j->done, 1, memory_order_release);
    if (write(o->fd, &one, sizeof one) < 0) {
        /* The counter cannot overflow here; the step also looks at done
         * whenever poll returns. */
    }
    return NULL;
}

/* 1 when node n has an idle connection to take now. */
static int has_idle(dlock__node *n)
{
    int idle;
    pthread_mutex_lock(&n->mu);
    idle = n->nidle > 0;
    pthread_mutex_unlock(&n->mu);
    return idle;
}

/* See opener.h. */
dlock__opener *dlock__opener_start(dlock__nodeset *ns, uint64_t mask,
                                   int64_t deadline_ms)
{
    dlock__opener *o;
    sigset_t all, old;
    int i, want = 0;

    if (ns->n < 2 || ns->cluster != NULL || ns->locate != NULL)
        return NULL;
    for (i = 0; i < ns->n; i++)
        if ((mask & (1ULL << i)) && !has_idle(&ns->node[i]))
            want++;
    if (want == 0)
        return NULL;
    o = calloc(1, sizeof *o);
    if (o == NULL)
        return NULL;
    o->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (o->fd < 0) {
        free(o);
        return NULL;
    }
    o->ns = ns;
    o->deadline_ms = deadline_ms;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (i = 0; i < ns->n; i++) {
        job *j = &o->jobs[i];
        if (!(mask & (1ULL << i)) || has_idle(&ns->node[i]))
            continue;
        j->o = o;
        j->i = i;
        if (pthread_create(&j->thread, NULL, open_main, j) != 0)
            continue; /* the step opens this one itself */
        j->started = 1;
        o->nodes |= 1ULL << i;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (o->nodes == 0) {
        close(o->fd);
        free(o);
        return NULL;
    }
    return o;
}

/* See opener.h. */
uint64_t dlock__opener_nodes(const dlock__opener *o)
{
    return o != NULL ? o->nodes : 0;
}

/* See opener.h. */
int dlock__opener_fd(const dlock__opener *o)
{
    return o->fd;
}

/* See opener.h. */
void dlock__opener_ack(dlock__opener *o)
{
    uint64_t count;
    if (read(o->fd, &count, sizeof count) < 0) {
        /* EAGAIN: no open finished since the last call. */
    }
}

/* See opener.h. */
int dlock__opener_take(dlock__opener *o, int i, dlock__conn **conn, int *rc,
                       char *err, size_t errlen)
{
    job *j = &o->jobs[i];

    if (!(o->nodes & (1ULL << i)) ||
        !atomic_load_explicit(&j->done, memory_order_acquire))
        return 0;
    *conn = j->conn;
    *rc = j->rc;
    if (j->rc != DLOCK_OK)
        snprintf(err, errlen, "%s", j->err);
    j->conn = NULL;
    j->taken = 1;
    o->nodes &= ~(1ULL << i);
    return 1;
}

/* See opener.h. */
void dlock__opener_finish(dlock__opener *o)
{
    int i;
    if (o == NULL)
        return;
    for (i = 0; i < o->ns->n; i++) {
        job *j = &o->jobs[i];
        if (!j->started)
            continue;
        pthread_join(j->thread, NULL);
        if (!j->taken && j->conn != NULL)
            dlock__node_put(o->ns, i, j->conn, 1);
    }
    close(o->fd);
    free(o);
}
