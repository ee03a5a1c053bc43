/*
 * hold.c - what `dlock run`, `dlock acquire` and `dlock elect` hold, and
 * the wait that gets it, on libdlock's event loop (dlock_loop.h).
 *
 * The wait: one dlock_loop over the client, and one ppoll() in the main
 * thread over the loop's descriptor and the self-pipe of signals.c, with
 * the handled signals unblocked only there and the loop's timeout as
 * ppoll's. A SIGINT, SIGTERM, SIGHUP... cancels the waiting operation
 * (dlock_op_cancel: its fair queue place and anything granted meanwhile
 * are given back), and the loop is driven until those requests are
 * answered (dlock_loop_pending) before dlock exits. No thread of dlock's
 * own waits or cancels.
 *
 * The hold: the loop renews it (run, elect) while run.c and elect.c sleep
 * in cli_hold_sleep(), the same ppoll over the loop's fd, the self-pipe
 * (signals, COMMAND's exit through SIGCHLD) and their own timers; a lease
 * found lost is reported by the loop's on_lost callback, which writes to
 * the self-pipe like the blocking API's lost callback.
 *
 * Every topology waits here: one server, several servers (Redlock),
 * Sentinel and Cluster (src/loop/multi_node.c waits there as the blocking
 * API does: notifications, the fair FIFO queue, election), and so do
 * --wait-replicas, --lock-delay, --prefer-readers and --metrics-file.
 * acquire_blocking() is left for one case: a first try the server
 * refuses (a name of another kind, a key not dlock's) is asked again
 * through the blocking API, whose message names the kind and the stored
 * limit.
 *
 * Beside signals.c in the tool's layers: signals.c, shared.c, report.c,
 * util.c below it.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

/* The longest dlock drives a loop for what is still out (each request
 * ends by the command timeout anyway): a bound, not a wait. */
#define CLI_DRAIN_MAX_MS (24 * 3600 * 1000LL)

/* elect's campaign through the blocking API (cli_cancelable's call). */
struct campaign {
    const struct cli *o;
    dlock_client *c;
    dlock_election *e;
    int64_t wait_ms; /* this call's wait: 0 for the first try */
};

static int campaign_fn(void *arg)
{
    struct campaign *k = arg;
    dlock_acquire_options ao;

    dlock_acquire_options_init(&ao);
    ao.wait_ms = k->wait_ms;
    ao.lease_ms = k->o->lease_ms;
    ao.on_lost = cli_lost_cb;
    /* Outages: cli_wait_through_outages says so and tries again. */
    ao.flags = DLOCK_ACQUIRE_NO_OUTAGE_WAIT;
    return dlock_campaign(&k->e, k->c, k->o->key,
                          k->o->value != NULL ? k->o->value : "", &ao);
}

/*
 * The blocking path, for what the loop does not serve yet (see the top of
 * the file): run's and acquire's locks through cli_acquire (signals.c:
 * the watchdog renews them when RENEW is set), elect's campaign through
 * dlock_campaign; a canceler thread turns a signal into a cancel.
 */
static int acquire_blocking(const struct cli *o, dlock_client *c, int renew,
                            struct cli_hold *h, int *signo)
{
    struct campaign k = {o, c, NULL, 0};
    int64_t t0 = cli_now_ms();
    int rc;

    if (o->cmd != CMD_ELECT) {
        rc = cli_acquire(o, c, renew, h->locks, signo);
        if (h->locks[0] != NULL)
            h->n = o->nkeys;
        return rc;
    }
    /* A first try, then the wait: servers that stop answering during the
     * wait (a restart) are tried again while it lasts; a first try that
     * cannot reach them fails at once. */
    rc = cli_cancelable(c, campaign_fn, &k, signo);
    if ((rc == DLOCK_BUSY || rc == DLOCK_TIMEDOUT) && *signo == 0 &&
        o->wait_ms != 0) {
        k.wait_ms = o->wait_ms < 0 ? -1 : o->wait_ms - (cli_now_ms() - t0);
        if (k.wait_ms != 0)
            rc = o->wait_ms >= 0 && k.wait_ms < 0
                     ? DLOCK_TIMEDOUT
                     : cli_wait_through_outages(o, c, campaign_fn, &k,
                                                &k.wait_ms, t0, signo);
    }
    h->e = k.e;
    if (k.e != NULL)
        h->n = 1;
    return rc;
}

/* One operation of the loop path and what its callback said. */
struct lwait {
    dlock_op *op; /* live until its callback ran */
    int done, status;
    dlock_hold *holds[DLOCK_MULTI_MAX];
    int nholds;
    dlock_leader_info *leader; /* a leader wait's answer goes here */
    char err[512];
};

static void lwait_cb(dlock_op *op, int status, dlock_hold *hold, void *ud)
{
    struct lwait *w = ud;

    w->done = 1;
    w->op = NULL;
    w->status = status;
    snprintf(w->err, sizeof w->err, "%s", dlock_op_errmsg(op));
    if (status == DLOCK_OK && w->leader != NULL) {
        dlock_op_leader(op, w->leader);
    } else if (status == DLOCK_OK && hold != NULL) {
        w->holds[0] = hold;
        w->nholds = 1;
    } else if (status == DLOCK_OK) {
        int n = dlock_op_holds(op, w->holds);
        w->nholds = n > 0 ? n : 0;
    }
}

/* A hold of ours was found lost (from dlock_loop_process): wake the main
 * loop as the blocking API's lost callback does. */
static void hold_lost_cb(dlock_hold *hold, int status, void *ud)
{
    (void)hold;
    (void)status;
    (void)ud;
    cli_lost_note();
}

/* Start O's acquire on loop L with wait WAIT_MS: the locks of several
 * KEYs, a permit, a read lock, the leadership or the lock. */
static int start_op(const struct cli *o, dlock_client *c, dlock_loop *l,
                    int renew, int64_t wait_ms, struct lwait *w)
{
    dlock_loop_acquire ao;

    memset(w, 0, sizeof *w);
    dlock_loop_acquire_init(&ao, c);
    ao.wait_ms = wait_ms;
    ao.lease_ms = o->lease_ms;
    ao.renew = renew;
    if (renew)
        ao.on_lost = hold_lost_cb;
    if (o->cmd == CMD_ELECT)
        return dlock_loop_campaign(&w->op, l, o->key,
                                   o->value != NULL ? o->value : "", &ao,
                                   lwait_cb, w);
    if (o->nkeys > 1)
        return dlock_loop_lock_all(&w->op, l, (const char *const *)o->keys,
                                   (int)o->nkeys, &ao, lwait_cb, w);
    if (o->limit > 0)
        return dlock_loop_sem_acquire(&w->op, l, o->key, o->limit, &ao,
                                      lwait_cb, w);
    if (o->shared)
        return dlock_loop_read_acquire_ex(
            &w->op, l, o->key, o->prefer_readers ? DLOCK_RW_PREFER_READERS : 0,
            &ao, lwait_cb, w);
    return dlock_loop_lock(&w->op, l, o->key, &ao, lwait_cb, w);
}

/* Sleep in ppoll over the self-pipe and L's fd, with the handled signals
 * unblocked (MASK), at most LEFT ms (-1: no limit) and never past the
 * loop's timeout; then empty the pipe and run the loop's process. 0, or
 * -1 with errno set. */
static int loop_sleep(dlock_loop *l, const sigset_t *mask, int64_t left)
{
    struct pollfd p[2] = {{cli_signals_pipe(), POLLIN, 0},
                          {dlock_loop_fd(l), POLLIN, 0}};
    int64_t t = dlock_loop_timeout_ms(l);
    struct timespec ts;

    if (t < 0 || (left >= 0 && left < t))
        t = left;
    ts.tv_sec = t / 1000;
    ts.tv_nsec = (long)(t % 1000) * 1000000;
    if (ppoll(p, 2, t >= 0 ? &ts : NULL, mask) < 0 && errno != EINTR)
        return -1;
    cli_drain_pipe();
    dlock_loop_process(l);
    return 0;
}

/* Drive W's operation on L until its callback ran. A forwarded signal
 * cancels it (*signo set). While it waits, an attempt that failed for an
 * outage is said once ("trying again while the wait lasts": the loop
 * rides it out). Returns the operation's status. */
static int loop_wait(const struct cli *o, dlock_loop *l, struct lwait *w,
                     int *signo)
{
    sigset_t mask;
    const char *msg;
    int s, f, said = 0;

    cli_signals_wait_mask(&mask);
    while (!w->done) {
        if (loop_sleep(l, &mask, -1) < 0) {
            int e = errno;
            dlock_op_cancel(w->op);
            errno = e;
            return DLOCK_EIO;
        }
        if (*signo == 0 && (s = cli_signals_take()) != 0) {
            *signo = s;
            if (w->op != NULL)
                dlock_op_cancel(w->op);
        }
        if (!said && w->op != NULL &&
            (f = dlock_op_last_failure(w->op, &msg)) != DLOCK_OK &&
            cli_is_outage_msg(o, f, msg)) {
            cli_err("\"%s\": %s (%s): trying again while the wait lasts",
                    o->key, dlock_strerror(f), msg);
            said = 1;
        }
    }
    return w->status;
}

/* Keep W's holds (the acquire succeeded) in H. */
static void keep_holds(struct cli_hold *h, const struct lwait *w)
{
    for (int i = 0; i < w->nholds; i++)
        h->holds[i] = w->holds[i];
    h->n = (size_t)w->nholds;
}

/* Run L's process until nothing is out, or BOUND_MS have passed; the
 * handled signals stay blocked (they wait, pending, for the next
 * ppoll). */
static void loop_drain(dlock_loop *l, const int *left, int64_t bound_ms)
{
    int64_t end = cli_now_ms() + bound_ms;

    while ((left != NULL ? *left > 0 : dlock_loop_pending(l) > 0) &&
           cli_now_ms() < end) {
        struct pollfd p = {dlock_loop_fd(l), POLLIN, 0};
        int64_t t = dlock_loop_timeout_ms(l), rest = end - cli_now_ms();

        if (t < 0 || t > rest)
            t = rest > 0 ? rest : 0;
        if (poll(&p, 1, (int)t) < 0 && errno != EINTR)
            return;
        dlock_loop_process(l);
    }
}

/*
 * The wait started at BEGAN, driven to its end. dlock rides an outage
 * for the whole of -w (dlock.1): the library's wait does so itself
 * (dlock.c: set_outage_ride), unless DLOCK_OUTAGE_RIDE caps it; then a
 * wait that ended in an outage after a second or more is started again
 * (saying so) while -w lasts. Returns its status (w->err its message).
 */
static int ride_on(const struct cli *o, dlock_client *c, struct cli_hold *h,
                   int renew, int64_t t0, int64_t began, struct lwait *w,
                   int *signo)
{
    int64_t left;
    int rc = loop_wait(o, h->loop, w, signo);

    while (rc != DLOCK_OK && *signo == 0 && cli_is_outage_msg(o, rc, w->err) &&
           cli_now_ms() - began >= 1000 && (left = cli_wait_left(o, t0)) != 0) {
        cli_err("\"%s\": the library's wait gave up on the outage "
                "(DLOCK_OUTAGE_RIDE): starting it again while -w lasts",
                o->key);
        loop_drain(h->loop, NULL, CLI_DRAIN_MAX_MS);
        began = cli_now_ms();
        rc = start_op(o, c, h->loop, renew, left, w);
        if (rc != DLOCK_OK) {
            snprintf(w->err, sizeof w->err, "%s", dlock_errmsg(c));
            return rc;
        }
        rc = loop_wait(o, h->loop, w, signo);
    }
    return rc;
}

/* The loop path of cli_hold_acquire: a first try, so that -v can say
 * whom it waits for, then the wait for the rest of -w. */
static int acquire_loop(const struct cli *o, dlock_client *c, int renew,
                        struct cli_hold *h, int *signo)
{
    struct lwait w;
    int64_t t0 = cli_now_ms(), left, began;
    int rc = dlock_loop_new(&h->loop, c);

    if (rc == DLOCK_OK)
        rc = start_op(o, c, h->loop, renew, 0, &w);
    if (rc != DLOCK_OK) {
        snprintf(h->err, sizeof h->err, "%s", dlock_errmsg(c));
        return rc;
    }
    rc = loop_wait(o, h->loop, &w, signo);
    if ((rc == DLOCK_ESERVER || rc == DLOCK_EINVAL) && *signo == 0 &&
        !cli_is_outage_msg(o, rc, w.err)) {
        /* The server refused the first try: a name of another kind, or
         * a key that is not dlock's. The blocking API's acquire says
         * which (the kind, the stored limit): ask it. */
        cli_hold_end(h);
        rc = acquire_blocking(o, c, renew, h, signo);
        snprintf(h->err, sizeof h->err, "%s", dlock_errmsg(c));
        return rc;
    }
    /* Too few replicas (--wait-replicas): the grant was given back; the
     * wait tries again while it lasts, saying so (loop_wait). On
     * Sentinel a first try's outage (the sentinels still name a master
     * that died) is ridden out by the wait too, as the blocking path's
     * first try is (cli_first_rides). */
    if (rc != DLOCK_BUSY && rc != DLOCK_NOT_REPLICATED && o->wait_ms != 0 &&
        *signo == 0 && cli_first_rides(o, rc, w.err))
        cli_err("\"%s\": %s (%s): trying again while the wait lasts", o->key,
                dlock_strerror(rc), w.err);
    if ((rc == DLOCK_BUSY || cli_first_rides(o, rc, w.err)) &&
        o->wait_ms != 0 && *signo == 0) {
        /* What the try gave back (the names of several KEYs it took
         * before one was busy) must be released before the wait asks for
         * them again: until then the loop counts them as its own. */
        loop_drain(h->loop, NULL, CLI_DRAIN_MAX_MS);
        if (o->verbose)
            cli_say_waiting(o, c);
        if ((left = cli_wait_left(o, t0)) == 0)
            return DLOCK_TIMEDOUT;
        began = cli_now_ms();
        rc = start_op(o, c, h->loop, renew, left, &w);
        if (rc != DLOCK_OK) {
            snprintf(h->err, sizeof h->err, "%s", dlock_errmsg(c));
            return rc;
        }
        rc = ride_on(o, c, h, renew, t0, began, &w, signo);
    }
    if (rc == DLOCK_OK) {
        keep_holds(h, &w);
        /* As the blocking API's one warning of a wait that had to poll. */
        if (*dlock_loop_warning(h->loop) != '\0')
            cli_err("%s", dlock_loop_warning(h->loop));
    }
    snprintf(h->err, sizeof h->err, "%s", w.err);
    return rc;
}

/* See cli.h. */
int cli_hold_acquire(const struct cli *o, dlock_client *c, int renew,
                     struct cli_hold *h, int *signo)
{
    char took[32];
    int64_t t0 = cli_now_ms();
    int rc;

    memset(h, 0, sizeof *h);
    h->c = c;
    *signo = 0;
    rc = acquire_loop(o, c, renew, h, signo);
    if (*signo == 0)
        *signo = cli_signals_stop_pending();
    if (rc == DLOCK_OK && h->loop != NULL && o->cmd != CMD_ELECT) {
        cli_format_ms(cli_now_ms() - t0, took, sizeof took);
        for (size_t i = 0; i < h->n; i++)
            cli_verbose(o, "acquired \"%s\" after %s, fencing token %llu",
                        o->keys[i], took,
                        (unsigned long long)cli_hold_token(h, i));
    }
    return rc;
}

/* See cli.h. */
int cli_hold_leader_wait(const struct cli *o, struct cli_hold *h,
                         const dlock_leader_info *known, dlock_leader_info *out,
                         int *signo)
{
    struct lwait w;
    int rc;

    *signo = 0;
    memset(&w, 0, sizeof w);
    w.leader = out;
    rc = h->loop == NULL ? dlock_loop_new(&h->loop, h->c) : DLOCK_OK;
    if (rc == DLOCK_OK)
        rc = dlock_loop_leader_wait(&w.op, h->loop, o->key, known, -1, lwait_cb,
                                    &w);
    if (rc != DLOCK_OK) {
        snprintf(h->err, sizeof h->err, "%s", dlock_errmsg(h->c));
        return rc;
    }
    rc = loop_wait(o, h->loop, &w, signo);
    snprintf(h->err, sizeof h->err, "%s", w.err);
    return rc;
}

/* See cli.h. */
int cli_with_hold(const struct cli *o, dlock_client *c, void *arg,
                  int (*fn)(const struct cli *o, dlock_client *c,
                            struct cli_hold *h, void *arg))
{
    struct cli_hold h;
    int code;

    memset(&h, 0, sizeof h);
    code = fn(o, c, &h, arg);
    cli_hold_end(&h);
    return code;
}

/* See cli.h. */
const char *cli_hold_errmsg(const struct cli_hold *h)
{
    return h->err;
}

/* See cli.h. */
uint64_t cli_hold_token(const struct cli_hold *h, size_t i)
{
    if (h->loop != NULL)
        return dlock_hold_token(h->holds[i]);
    if (h->e != NULL)
        return dlock_election_epoch(h->e);
    return dlock_lock_token(h->locks[i]);
}

/* See cli.h. */
const char *cli_hold_name(const struct cli_hold *h, size_t i)
{
    return h->loop != NULL ? dlock_hold_name(h->holds[i])
                           : dlock_lock_name(h->locks[i]);
}

/* See cli.h. */
const char *cli_hold_owner(const struct cli_hold *h, size_t i)
{
    return h->loop != NULL ? dlock_hold_owner(h->holds[i])
                           : dlock_lock_owner(h->locks[i]);
}

/* The status of hold I. */
static int status_of(const struct cli_hold *h, size_t i)
{
    if (h->loop != NULL)
        return dlock_hold_status(h->holds[i]);
    if (h->e != NULL)
        return cli_lost_seen() ? DLOCK_LOST : DLOCK_OK;
    return dlock_lock_status(h->locks[i]);
}

/* See cli.h. */
int cli_hold_status(const struct cli_hold *h, size_t *which)
{
    int rc;

    *which = 0;
    for (size_t i = 0; i < h->n; i++)
        if ((rc = status_of(h, i)) != DLOCK_OK) {
            *which = i;
            return rc;
        }
    return h->n > 0 ? DLOCK_OK : DLOCK_LOST;
}

/* See cli.h. */
int cli_hold_lost_reason(const struct cli_hold *h, size_t i, const char **why)
{
    if (h->loop != NULL)
        return dlock_hold_lost_reason(h->holds[i], why);
    return dlock_lock_lost_reason(h->locks[i], why);
}

/* A release's answer on the loop path. */
struct lrel {
    int left;   /* callbacks still to come */
    int status; /* the first that was not DLOCK_OK */
};

static void lrel_cb(dlock_op *op, int status, dlock_hold *hold, void *ud)
{
    struct lrel *r = ud;

    (void)op;
    (void)hold;
    r->left--;
    if (status != DLOCK_OK && r->status == DLOCK_OK)
        r->status = status;
}

/* See cli.h. */
int cli_hold_release(struct cli_hold *h)
{
    struct lrel r = {0, DLOCK_OK};
    int rc;

    if (h->n == 0)
        return DLOCK_OK;
    if (h->e != NULL) {
        rc = dlock_election_resign(h->e);
        h->e = NULL;
    } else if (h->loop == NULL) {
        rc = h->n > 1 ? dlock_lock_release_all(h->locks, h->n)
                      : dlock_lock_release(h->locks[0]);
    } else {
        for (size_t i = 0; i < h->n; i++) {
            rc = dlock_loop_release(NULL, h->loop, h->holds[i], lrel_cb, &r);
            if (rc == DLOCK_OK)
                r.left++;
            else if (r.status == DLOCK_OK)
                r.status = rc;
        }
        /* Each release ends by the command timeout at most. */
        loop_drain(h->loop, &r.left, CLI_DRAIN_MAX_MS);
        rc = r.status;
    }
    memset(h->locks, 0, sizeof h->locks);
    memset(h->holds, 0, sizeof h->holds);
    h->n = 0;
    return rc;
}

/* See cli.h. */
void cli_hold_detach(struct cli_hold *h)
{
    if (h->loop == NULL)
        for (size_t i = 0; i < h->n; i++)
            dlock_lock_detach(h->locks[i]);
    /* A loop's holds stay held when it is freed (cli_hold_end). */
    h->n = 0;
}

/* See cli.h. */
int cli_hold_sleep(struct cli_hold *h, const sigset_t *mask, int64_t left)
{
    if (h->loop == NULL)
        return cli_signals_sleep(mask, left);
    return loop_sleep(h->loop, mask, left);
}

/* See cli.h. */
void cli_hold_end(struct cli_hold *h)
{
    if (h->loop == NULL)
        return;
    /* Give-backs of a cancelled wait, releases: let them be answered. */
    loop_drain(h->loop, NULL, CLI_DRAIN_MAX_MS);
    dlock_loop_free(h->loop);
    h->loop = NULL;
}
