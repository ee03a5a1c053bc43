/*
 * ops_start.c - the public acquires of the loop (dlock_loop_lock,
 * dlock_loop_sem_acquire, dlock_loop_read_acquire[_ex]): their checks and
 * defaults, the op and its hold made, the first dloop__attempt (ops.c) or the
 * engine loop's acquire (the loop's hook).
 */
#include <string.h>

#include "hold/kind.h"
#include "hold/held.h"
#include "loop/loop_impl.h"

/* Start an acquire of kind (limit: a semaphore's) for NAME; what
 * dlock_loop_lock and dlock_loop_sem_acquire share. */
static int start(dlock_op **out, dlock_loop *l, const char *name, int kind,
                 int64_t limit, unsigned flags, const dlock_loop_acquire *opts,
                 dlock_op_cb cb, void *userdata)
{
    dlock_op *op;
    dlock_hold *h;
    op = dloop__op_new(l, OP_LOCK, cb, userdata);
    if (op == NULL)
        return dlock__set_error(l->c, DLOCK_ENOMEM, "out of memory");
    if (out != NULL)
        *out = op;
    if (kind == DLOCK__KIND_LOCK && dloop__name_find(l, name) != NULL) {
        dloop__complete(op, DLOCK_BUSY,
                        "%s: this loop already holds or is acquiring it "
                        "(a loop hold is never re-entered)",
                        name);
        return DLOCK_OK;
    }
    h = dloop__hold_new(l, name, kind);
    if (h == NULL) {
        dloop__complete(op, DLOCK_ENOMEM, "out of memory");
        return DLOCK_OK;
    }
    h->lease_ms = opts->lease_ms;
    h->limit = limit;
    h->ignore_mark = !!(flags & DLOCK_RW_PREFER_READERS);
    h->renew = opts->renew;
    h->on_lost = opts->on_lost;
    h->lost_ud = opts->on_lost_userdata;
    /* Version 1's struct ends before lazy_token. */
    h->lazy = opts->version >= 2 && opts->lazy_token;
    op->hold = h;
    op->again = dloop__attempt;
    op->strategy = opts->strategy;
    /* A reader has no queue: it waits by notification (or spin). */
    op->fair = opts->strategy == DLOCK_WAIT_FAIR && kind != DLOCK__KIND_READ;
    op->deadline = opts->wait_ms == 0  ? 0
                   : opts->wait_ms < 0 ? -1
                                       : dlock__now_ms() + opts->wait_ms;
    if (l->engine)
        l->engine_acquire(op);
    else
        dloop__attempt(op);
    return DLOCK_OK;
}

/* Check an acquire's arguments; DLOCK_OK or DLOCK_EINVAL (message set). */
static int check_acquire(dlock_loop *l, const char *what, const char *name,
                         const dlock_loop_acquire *opts, dlock_op_cb cb)
{
    size_t n = name != NULL ? strlen(name) : 0;
    if (n == 0 || n > DLOCK_NAME_MAX || cb == NULL || opts->lease_ms <= 0 ||
        (opts->version != DLOCK_LOOP_ACQUIRE_VERSION && opts->version != 1) ||
        (opts->strategy != DLOCK_WAIT_NOTIFY &&
         opts->strategy != DLOCK_WAIT_SPIN &&
         opts->strategy != DLOCK_WAIT_FAIR))
        return dlock__set_error(l->c, DLOCK_EINVAL, "%s: %s", what,
                                n == 0 || n > DLOCK_NAME_MAX
                                    ? "the name must be 1 to 512 bytes"
                                : cb == NULL ? "no callback"
                                             : "bad options");
    return DLOCK_OK;
}

/* The public acquires' common entry: defaults, checks, start. */
static int begin(dlock_op **out, dlock_loop *l, const char *what,
                 const char *name, int kind, int64_t limit, unsigned flags,
                 const dlock_loop_acquire *opts, dlock_op_cb cb, void *ud)
{
    dlock_loop_acquire def;
    int rc;
    if (out != NULL)
        *out = NULL;
    if (l == NULL)
        return DLOCK_EINVAL;
    if (opts == NULL) {
        dlock_loop_acquire_init(&def, l->c);
        opts = &def;
    }
    rc = check_acquire(l, what, name, opts, cb);
    if (rc == DLOCK_OK && kind == DLOCK__KIND_READ)
        rc = dlock__layout_refuse(l->c, "read locks");
    if (rc == DLOCK_OK && kind == DLOCK__KIND_PERMIT &&
        (limit < 1 || limit > 1000000))
        rc = dlock__set_error(l->c, DLOCK_EINVAL,
                              "%s: the limit must be 1 to 1000000", what);
    if (rc == DLOCK_OK && (flags & ~(unsigned)DLOCK_RW_PREFER_READERS))
        rc = dlock__set_error(l->c, DLOCK_EINVAL, "%s: unknown flags %#x", what,
                              flags);
    if (rc != DLOCK_OK)
        return rc;
    return start(out, l, name, kind, limit, flags, opts, cb, ud);
}

int dlock_loop_lock(dlock_op **out, dlock_loop *l, const char *name,
                    const dlock_loop_acquire *opts, dlock_op_cb cb,
                    void *userdata)
{
    return begin(out, l, "dlock_loop_lock", name, DLOCK__KIND_LOCK, 0, 0, opts,
                 cb, userdata);
}

int dlock_loop_sem_acquire(dlock_op **out, dlock_loop *l, const char *name,
                           int64_t limit, const dlock_loop_acquire *opts,
                           dlock_op_cb cb, void *userdata)
{
    return begin(out, l, "dlock_loop_sem_acquire", name, DLOCK__KIND_PERMIT,
                 limit, 0, opts, cb, userdata);
}

int dlock_loop_read_acquire(dlock_op **out, dlock_loop *l, const char *name,
                            const dlock_loop_acquire *opts, dlock_op_cb cb,
                            void *userdata)
{
    return begin(out, l, "dlock_loop_read_acquire", name, DLOCK__KIND_READ, 0,
                 0, opts, cb, userdata);
}

int dlock_loop_read_acquire_ex(dlock_op **out, dlock_loop *l, const char *name,
                               unsigned flags, const dlock_loop_acquire *opts,
                               dlock_op_cb cb, void *userdata)
{
    return begin(out, l, "dlock_loop_read_acquire_ex", name, DLOCK__KIND_READ,
                 0, flags, opts, cb, userdata);
}

void dlock_loop_acquire_init(dlock_loop_acquire *o, const dlock_client *c)
{
    if (o == NULL)
        return;
    memset(o, 0, sizeof *o);
    o->version = DLOCK_LOOP_ACQUIRE_VERSION;
    o->lease_ms = 30000;
    o->renew = 1;
    o->strategy = c != NULL ? c->opts.wait_strategy : DLOCK_WAIT_FAIR;
}
