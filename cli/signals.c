/*
 * signals.c - signal handling of the dlock tool, and the acquire a signal
 * can interrupt.
 *
 * The handlers only set a flag and write a byte to a self-pipe; all the
 * work happens in ordinary code. The signals dlock handles are blocked in
 * the main thread from the start, before the client exists, so that the
 * library's threads (which inherit the mask) never run our handlers nor see
 * EINTR because of them. They are unblocked in exactly two places: in the
 * helper thread that watches for them while the main thread waits for the
 * lock (it cancels the wait through dlock_client_cancel(), which must not be
 * called from a handler), and atomically inside ppoll() in run.c's main
 * loop. The lease-lost callback, which runs on the library's watchdog
 * thread, writes to the same pipe.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* The signals forwarded to COMMAND. Their default action would kill dlock
 * and leave COMMAND running without anyone renewing its lease. */
static const int forwarded[] = {SIGINT,  SIGTERM, SIGHUP,
                                SIGQUIT, SIGUSR1, SIGUSR2};
#define NFORWARDED (sizeof forwarded / sizeof forwarded[0])

static volatile sig_atomic_t pending[NSIG];
static int self_pipe[2] = {-1, -1};
static sigset_t orig_mask; /* the mask dlock was started with */
static sigset_t handled;   /* the signals we installed handlers for */
static atomic_int lost_seen;

/* Record the signal and wake whoever polls the self-pipe. */
static void on_signal(int sig)
{
    int saved = errno;
    char b = 's';

    pending[sig] = 1;
    if (write(self_pipe[1], &b, 1) < 0) {
        /* A full pipe already holds a wake-up. */
    }
    errno = saved;
}

/*
 * Install the handlers (SIGCHLD and the forwarded signals, except those
 * that were ignored when dlock started: COMMAND inherits them ignored, as
 * it would without dlock), ignore SIGPIPE, make the self-pipe, and block the
 * handled signals in the calling (main) thread. Call before creating the
 * client. Returns 0, or -1 with errno set.
 */
int cli_signals_setup(void)
{
    struct sigaction sa, old;

    if (pipe2(self_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        return -1;
    if (pthread_sigmask(SIG_SETMASK, NULL, &orig_mask) != 0)
        return -1;
    sigemptyset(&handled);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigfillset(&sa.sa_mask);
    for (size_t i = 0; i < NFORWARDED; i++) {
        if (sigaction(forwarded[i], NULL, &old) == 0 &&
            old.sa_handler == SIG_IGN)
            continue;
        if (sigaction(forwarded[i], &sa, NULL) < 0)
            return -1;
        sigaddset(&handled, forwarded[i]);
    }
    /* Without SA_NOCLDSTOP: run.c must see COMMAND stop (Ctrl-Z). */
    if (sigaction(SIGCHLD, &sa, NULL) < 0)
        return -1;
    sigaddset(&handled, SIGCHLD);

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPIPE, &sa, NULL) < 0)
        return -1;
    if (pthread_sigmask(SIG_BLOCK, &handled, NULL) != 0)
        return -1;
    return 0;
}

/* The read end of the self-pipe. */
int cli_signals_pipe(void)
{
    return self_pipe[0];
}

/* The signal mask dlock was started with (COMMAND gets it back). */
const sigset_t *cli_signals_orig_mask(void)
{
    return &orig_mask;
}

/* The signals with handlers (blocked outside ppoll in the main thread). */
const sigset_t *cli_signals_set(void)
{
    return &handled;
}

/* Empty the self-pipe; the flags say what happened. */
void cli_drain_pipe(void)
{
    char buf[64];

    while (read(self_pipe[0], buf, sizeof buf) > 0)
        ;
}

/* Take one pending forwarded signal: returns its number and clears it, or
 * returns 0 when none is pending. SIGCHLD is not reported here. */
int cli_signals_take(void)
{
    for (size_t i = 0; i < NFORWARDED; i++) {
        int s = forwarded[i];

        if (pending[s]) {
            pending[s] = 0;
            return s;
        }
    }
    return 0;
}

/*
 * In the child between fork and exec: give back the default action to
 * every signal we handle and to SIGPIPE, and restore the original mask.
 * Only async-signal-safe calls: the parent has threads.
 */
void cli_signals_child_reset(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    for (int s = 1; s < NSIG; s++)
        if (sigismember(&handled, s) == 1)
            sigaction(s, &sa, NULL);
    sigaction(SIGPIPE, &sa, NULL);
    sigprocmask(SIG_SETMASK, &orig_mask, NULL);
}

/* The lease-lost callback, on the library's watchdog thread: note it and
 * wake the main loop. Nothing more: the callback must be short. */
void cli_lost_cb(dlock_lock *lock, void *userdata)
{
    (void)lock;
    (void)userdata;
    cli_lost_note();
}

/* See cli.h. */
void cli_lost_note(void)
{
    char b = 'l';

    atomic_store(&lost_seen, 1);
    if (write(self_pipe[1], &b, 1) < 0) {
        /* A full pipe already holds a wake-up. */
    }
}

/* 1 once the lost callback ran. */
int cli_lost_seen(void)
{
    return atomic_load(&lost_seen);
}

/* The helper thread that turns a signal into dlock_client_cancel(). */
struct canceler {
    dlock_client *client;
    int stop[2];
    int signo; /* the signal that cancelled the wait, 0 if none */
    pthread_t thread;
};

/*
 * Watch the self-pipe while the main thread waits for the lock. On a
 * forwarded signal, cancel the wait, and keep cancelling every 50 ms until
 * told to stop: a cancel that lands just before the main thread starts
 * waiting would otherwise be lost (acquires started after a cancel wait
 * normally).
 */
static void *canceler_main(void *arg)
{
    struct canceler *k = arg;

    pthread_sigmask(SIG_UNBLOCK, &handled, NULL);
    for (;;) {
        struct pollfd p[2] = {{self_pipe[0], POLLIN, 0},
                              {k->stop[0], POLLIN, 0}};

        if (poll(p, 2, k->signo ? 50 : -1) < 0 && errno != EINTR)
            break;
        if (p[1].revents)
            break;
        cli_drain_pipe();
        if (k->signo == 0)
            k->signo = cli_signals_take();
        if (k->signo != 0)
            dlock_client_cancel(k->client);
    }
    /* Back to blocked before the thread ends, so no signal is delivered
     * to a dying thread. */
    pthread_sigmask(SIG_BLOCK, &handled, NULL);
    return NULL;
}

/* A forwarded signal that came while no helper thread watched (it stays
 * pending, blocked, in the kernel): take it and return its number, or 0. */
int cli_signals_stop_pending(void)
{
    sigset_t set;
    struct timespec zero = {0, 0};
    int s = cli_signals_take();

    if (s != 0)
        return s;
    set = handled;
    sigdelset(&set, SIGCHLD);
    s = sigtimedwait(&set, NULL, &zero);
    return s > 0 ? s : 0;
}

/* Print who holds KEY, for -v before waiting. */
void cli_say_waiting(const struct cli *o, dlock_client *c)
{
    dlock_info info;
    char ttl[32], wait[48];

    if (o->wait_ms < 0)
        snprintf(wait, sizeof wait, "no time limit");
    else {
        cli_format_ms(o->wait_ms, ttl, sizeof ttl);
        snprintf(wait, sizeof wait, "up to %s", ttl);
    }
    if (dlock_lock_inspect(c, o->key, &info) == DLOCK_OK && info.held) {
        char who[DLOCK_LABEL_MAX + DLOCK_HOST_MAX + 160];
        cli_describe_holder(&info, who, sizeof who);
        cli_verbose(o, "waiting for \"%s\" (%s), %s", o->key, wait, who);
    } else {
        cli_verbose(o, "waiting for \"%s\" (%s)", o->key, wait);
    }
}

/* Acquire O's KEY (a lock, a semaphore permit or a read lock: shared.c),
 * or all its KEYs (locks, all or nothing) into out[0..nkeys-1] when there
 * are several. */
static int acquire_keys(const struct cli *o, dlock_client *c,
                        const dlock_acquire_options *ao, dlock_lock **out)
{
    if (o->nkeys > 1)
        return dlock_lock_acquire_all(out, c, (const char *const *)o->keys,
                                      o->nkeys, ao);
    return cli_acquire_kind(o, c, ao, out);
}

/*
 * Run FN(ARG), a call that waits in the library, while a helper thread
 * turns SIGINT, SIGTERM, SIGHUP... into dlock_client_cancel() on C (the
 * call then returns DLOCK_CANCELED). Returns FN's result, or DLOCK_ENOMEM
 * when the thread could not be started; *signo is the signal that came,
 * or 0.
 */
int cli_cancelable(dlock_client *c, int (*fn)(void *arg), void *arg, int *signo)
{
    struct canceler k;
    int rc, err;

    *signo = 0;
    memset(&k, 0, sizeof k);
    k.client = c;
    if (pipe2(k.stop, O_CLOEXEC) < 0)
        return DLOCK_ENOMEM;
    err = pthread_create(&k.thread, NULL, canceler_main, &k);
    if (err != 0) {
        close(k.stop[0]);
        close(k.stop[1]);
        errno = err;
        return DLOCK_ENOMEM;
    }
    rc = fn(arg);
    if (write(k.stop[1], "x", 1) < 0)
        pthread_detach(k.thread); /* cannot happen on a fresh pipe */
    else
        pthread_join(k.thread, NULL);
    close(k.stop[0]);
    close(k.stop[1]);
    *signo = k.signo != 0 ? k.signo : cli_signals_stop_pending();
    return rc;
}

/* acquire_keys() as a cli_cancelable() call. */
struct keys_call {
    const struct cli *o;
    dlock_client *c;
    const dlock_acquire_options *ao;
    dlock_lock **out;
};

static int keys_call_fn(void *arg)
{
    struct keys_call *kc = arg;
    return acquire_keys(kc->o, kc->c, kc->ao, kc->out);
}

/* Is the server a Sentinel deployment? */
static int is_sentinel(const struct cli *o)
{
    return o->nservers == 1 && strstr(o->servers[0], "+sentinel://") != NULL;
}

/* The servers could not be reached (or no majority of them), or one is
 * not ready (LOADING its data after a restart, MASTERDOWN, BUSY,
 * TRYAGAIN: the library's message says "not ready"), or too few replicas
 * acknowledged a grant (given back: a replica restarting), or on Sentinel
 * any server error (a failover: READONLY, sentinels naming a master that
 * died): an outage that may end, not an answer. The library's own wait
 * rides the same (dlock__outage_retryable); the CLI asks it not to, to say
 * so once and to be ended by a signal. */
static int is_outage(const struct cli *o, dlock_client *c, int rc)
{
    return cli_is_outage_msg(o, rc, dlock_errmsg(c));
}

/* See cli.h. */
int cli_is_outage_msg(const struct cli *o, int rc, const char *msg)
{
    return rc == DLOCK_EIO || rc == DLOCK_ETIMEDOUT || rc == DLOCK_NO_QUORUM ||
           rc == DLOCK_NOT_REPLICATED ||
           (rc == DLOCK_ESERVER &&
            (is_sentinel(o) || strstr(msg, ": not ready: ")));
}

/* See cli.h. */
int cli_first_rides(const struct cli *o, int rc, const char *msg)
{
    if (rc == DLOCK_NOT_REPLICATED)
        return 1;
    return is_sentinel(o) && cli_is_outage_msg(o, rc, msg);
}

/* See cli.h. */
int cli_wait_through_outages(const struct cli *o, dlock_client *c,
                             int (*fn)(void *arg), void *arg, int64_t *wait_ms,
                             int64_t t0, int *signo)
{
    int64_t left, pause = 500;
    int rc, said = 0;
    sigset_t mask;

    for (;;) {
        rc = cli_cancelable(c, fn, arg, signo);
        if (rc == DLOCK_BUSY)
            rc = DLOCK_TIMEDOUT;
        if (!is_outage(o, c, rc) || *signo != 0)
            return rc;
        left = o->wait_ms < 0 ? pause : o->wait_ms - (cli_now_ms() - t0);
        if (left <= 0)
            return rc;
        if (!said) {
            cli_err("\"%s\": %s (%s): trying again while the wait lasts",
                    o->key, dlock_strerror(rc), dlock_errmsg(c));
            said = 1;
        }
        cli_signals_wait_mask(&mask);
        cli_signals_sleep(&mask, left < pause ? left : pause);
        if ((*signo = cli_signals_stop_pending()) != 0)
            return DLOCK_CANCELED;
        pause = pause * 2 > 2000 ? 2000 : pause * 2;
        if (o->wait_ms >= 0) {
            *wait_ms = o->wait_ms - (cli_now_ms() - t0);
            if (*wait_ms <= 0)
                *wait_ms = 0; /* one last try */
        }
    }
}

/* See cli.h. */
int64_t cli_wait_left(const struct cli *o, int64_t t0)
{
    int64_t left;

    /* The first try may have used up -w (a slow server, a loaded
     * machine): then it is over, and a negative wait_ms (forever) must
     * not come out of the subtraction. */
    if (o->wait_ms < 0)
        return -1;
    left = o->wait_ms - (cli_now_ms() - t0);
    return left > 0 ? left : 0;
}

/*
 * Acquire O->key (O->keys, all or nothing, when there are several) with
 * O's lease and wait, with the watchdog and the lost
 * callback when WATCHDOG is set. Tries once first, so that -v can say that
 * it is waiting and for whom; then waits for the rest of -w while a helper
 * thread turns SIGINT, SIGTERM, SIGHUP... into a cancel. Returns the
 * library's status; *signo is the signal that interrupted the wait, or 0.
 * When a signal came but the lock was obtained anyway, *out is set too:
 * the caller releases it.
 */
int cli_acquire(const struct cli *o, dlock_client *c, int watchdog,
                dlock_lock **out, int *signo)
{
    dlock_acquire_options ao;
    int64_t t0 = cli_now_ms(), left;
    int rc;
    char took[32];

    *signo = 0;
    *out = NULL;
    dlock_acquire_options_init(&ao);
    ao.lease_ms = o->lease_ms;
    ao.watchdog = watchdog;
    if (watchdog)
        ao.on_lost = cli_lost_cb;
    ao.wait_ms = 0;
    /* Outages: cli_wait_through_outages says so and tries again. */
    ao.flags = DLOCK_ACQUIRE_NO_OUTAGE_WAIT;
    rc = acquire_keys(o, c, &ao, out);
    if ((rc == DLOCK_BUSY || cli_first_rides(o, rc, dlock_errmsg(c))) &&
        o->wait_ms != 0) {
        if (o->verbose && rc == DLOCK_BUSY)
            cli_say_waiting(o, c);
        if ((left = cli_wait_left(o, t0)) == 0)
            return rc == DLOCK_BUSY ? DLOCK_TIMEDOUT : rc;
        ao.wait_ms = left;
        struct keys_call kc = {o, c, &ao, out};
        rc = cli_wait_through_outages(o, c, keys_call_fn, &kc, &ao.wait_ms, t0,
                                      signo);
    }
    if (*signo == 0)
        *signo = cli_signals_stop_pending();
    if (rc == DLOCK_OK) {
        /* The library's one warning of a wait that had to poll (the
         * server's ACL refuses the lock's channels). */
        const char *m = dlock_errmsg(c);
        if (strncmp(m, "warning: ", 9) == 0)
            cli_err("%s", m);
        cli_format_ms(cli_now_ms() - t0, took, sizeof took);
        for (size_t i = 0; i < o->nkeys; i++)
            cli_verbose(o, "acquired \"%s\" after %s, fencing token %llu",
                        o->keys[i], took,
                        (unsigned long long)dlock_lock_token(out[i]));
    }
    return rc;
}

/* See cli.h. */
void cli_signals_wait_mask(sigset_t *m)
{
    const sigset_t *set = cli_signals_set();

    *m = *cli_signals_orig_mask();
    for (int s = 1; s < NSIG; s++)
        if (sigismember(set, s) == 1)
            sigdelset(m, s);
}

/* See cli.h. */
int cli_signals_sleep(const sigset_t *mask, int64_t left)
{
    struct pollfd p = {cli_signals_pipe(), POLLIN, 0};
    struct timespec ts;

    ts.tv_sec = left / 1000;
    ts.tv_nsec = (long)(left % 1000) * 1000000;
    if (ppoll(&p, 1, left >= 0 ? &ts : NULL, mask) < 0 && errno != EINTR)
        return -1;
    cli_drain_pipe();
    return 0;
}
