/*
 * multi.c - several locks at once through a loop (include/dlock_loop.h),
 * with dlock_lock_acquire_all's rules: all or nothing, taken one after
 * the other in one global order (names sorted bytewise, shorter first on
 * a common prefix) so that two such acquires never deadlock, each with
 * the time left of wait_ms; when one cannot be had, those taken are
 * released again (reverse order, requests nobody waits for) and the
 * operation completes with that lock's status.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loop/loop_impl.h"

/* The state of one several-locks operation (one allocation with the
 * names' copies). */
struct lmulti {
    int n, next;
    int *order;        /* indexes into names, in the global order */
    const char **name; /* copies */
    dlock_hold **hold; /* by index into names */
    dlock_op *child;   /* the lock being acquired */
    dlock_loop_acquire opts;
    int64_t deadline; /* -1: none, 0: try */
};

/* See loop_impl.h. */
dlock_op *dloop__multi_child(const dlock_op *parent)
{
    return parent->multi != NULL ? parent->multi->child : NULL;
}

/* Sort order[0..n) by name: bytewise, a prefix first (strcmp); an
 * insertion sort (n <= DLOCK_MULTI_MAX, no shared state). */
static void sort_order(int *order, const char *const *name, int n)
{
    int i, j;
    for (i = 1; i < n; i++) {
        int x = order[i];
        for (j = i; j > 0 && strcmp(name[order[j - 1]], name[x]) > 0; j--)
            order[j] = order[j - 1];
        order[j] = x;
    }
}

static void ignore(dlock_op *op, int status, dlock_hold *h, void *ud)
{
    (void)op;
    (void)status;
    (void)h;
    (void)ud;
}

/* Give back every lock taken so far, last first. */
static void give_back(dlock_loop *l, struct lmulti *m)
{
    int i;
    for (i = m->next - 1; i >= 0; i--) {
        dlock_hold *h = m->hold[m->order[i]];
        if (h != NULL &&
            dlock_loop_release(NULL, l, h, ignore, NULL) == DLOCK_OK)
            m->hold[m->order[i]] = NULL;
    }
}

static void child_done(dlock_op *op, int status, dlock_hold *h, void *ud);

/* Start the lock of m->next, with what is left of the wait. */
static void take_next(dlock_op *parent)
{
    struct lmulti *m = parent->multi;
    int64_t left;
    int rc;
    m->opts.wait_ms = m->deadline;
    if (m->deadline > 0) {
        left = m->deadline - dlock__now_ms();
        m->opts.wait_ms = left > 0 ? left : 0;
    }
    rc = dlock_loop_lock(&m->child, parent->loop, m->name[m->order[m->next]],
                         &m->opts, child_done, parent);
    if (rc != DLOCK_OK) {
        m->child = NULL;
        give_back(parent->loop, m);
        dloop__complete(parent, rc, "%s",
                        dlock__msgs_peek(&parent->loop->c->msgs));
    }
}

static void child_done(dlock_op *op, int status, dlock_hold *h, void *ud)
{
    dlock_op *parent = ud;
    struct lmulti *m = parent->multi;
    m->child = NULL;
    if (parent->state == ST_DONE) /* cancelled meanwhile */
        return;
    if (status != DLOCK_OK) {
        give_back(parent->loop, m);
        dloop__complete(parent, status, "%s: %s", m->name[m->order[m->next]],
                        dlock_op_errmsg(op));
        return;
    }
    m->hold[m->order[m->next++]] = h;
    if (m->next == m->n)
        dloop__complete(parent, DLOCK_OK, "%s", "");
    else
        take_next(parent);
}

/* The parent ends early (cancel, loop freed): its lock in progress is
 * cancelled and what was taken given back. */
void dloop__multi_abort(dlock_op *parent)
{
    struct lmulti *m = parent->multi;
    if (m == NULL || parent->status == DLOCK_OK)
        return;
    if (m->child != NULL)
        dloop__complete(m->child, DLOCK_CANCELED, "cancelled");
    m->child = NULL;
    give_back(parent->loop, m);
}

int dlock_loop_lock_all(dlock_op **out, dlock_loop *l, const char *const *names,
                        int n, const dlock_loop_acquire *opts, dlock_op_cb cb,
                        void *userdata)
{
    struct lmulti *m;
    dlock_op *op;
    size_t bytes = 0;
    char *cur;
    int i, j;
    if (out != NULL)
        *out = NULL;
    if (l == NULL)
        return DLOCK_EINVAL;
    if (names == NULL || n < 1 || n > DLOCK_MULTI_MAX || cb == NULL)
        return dlock__set_error(l->c, DLOCK_EINVAL,
                                "dlock_loop_lock_all: 1 to %d names and a "
                                "callback",
                                DLOCK_MULTI_MAX);
    for (i = 0; i < n; i++) {
        if (names[i] == NULL || names[i][0] == '\0')
            return dlock__set_error(l->c, DLOCK_EINVAL,
                                    "dlock_loop_lock_all: name %d is empty", i);
        for (j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0)
                return dlock__set_error(l->c, DLOCK_EINVAL,
                                        "dlock_loop_lock_all: %s is named "
                                        "twice",
                                        names[i]);
        bytes += strlen(names[i]) + 1;
    }
    m = calloc(1,
               sizeof *m +
                   n * (sizeof(int) + sizeof(char *) + sizeof(dlock_hold *)) +
                   bytes);
    op = m != NULL ? dloop__op_new(l, OP_MULTI, cb, userdata) : NULL;
    if (op == NULL) {
        free(m);
        return dlock__set_error(l->c, DLOCK_ENOMEM, "out of memory");
    }
    m->n = n;
    m->hold = (dlock_hold **)(m + 1);
    m->name = (const char **)(m->hold + n);
    m->order = (int *)(m->name + n);
    cur = (char *)(m->order + n);
    for (i = 0; i < n; i++) {
        size_t len = strlen(names[i]) + 1;
        memcpy(cur, names[i], len);
        m->name[i] = cur;
        m->order[i] = i;
        cur += len;
    }
    sort_order(m->order, m->name, n);
    if (opts != NULL)
        m->opts = *opts;
    else
        dlock_loop_acquire_init(&m->opts, l->c);
    m->deadline = m->opts.wait_ms <= 0 ? m->opts.wait_ms
                                       : dlock__now_ms() + m->opts.wait_ms;
    op->multi = m;
    op->end = dloop__multi_abort;
    op->state = ST_OUT;
    if (out != NULL)
        *out = op;
    take_next(op);
    return DLOCK_OK;
}

int dlock_op_holds(const dlock_op *op, dlock_hold **holds)
{
    const struct lmulti *m;
    if (op == NULL || holds == NULL || op->type != OP_MULTI ||
        op->status != DLOCK_OK || op->multi == NULL)
        return DLOCK_EINVAL;
    m = op->multi;
    memcpy(holds, m->hold, (size_t)m->n * sizeof *holds);
    return m->n;
}
