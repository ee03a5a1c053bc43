/*
 * notify.c - release notifications: one subscriber connection per server,
 * owned by one background thread per client and shared by every waiter
 * of every lock in the process.
 *
 * Channels are subscribed on demand and reference-counted: the first
 * waiter on a lock subscribes its channel, the last one to leave
 * unsubscribes it. A waiter returns from dlock__notify_begin() only once
 * the subscription is confirmed (on a majority of servers), so a release
 * after its next attempt cannot be missed.
 *
 * Coalescing: of the threads of this process waiting on one lock, only
 * the one holding the channel's "turn" sends attempts to Redis; the others
 * sleep until it is done. A release message wakes the turn holder.
 *
 * Fair mode: the release script names the waiter it handed the lock to
 * ("h TOKEN OWNER"); the message wakes exactly that waiter.
 *
 * Waking: every wake of a channel (a message, a lost link, a confirmed
 * subscription, a turn given up, a cancel) broadcasts its condition
 * variable, on which the blocking waits sleep, and signals the eventfd
 * of each of its waiters that asked for one (dlock__waiter_fd), which a
 * non-blocking driver polls; it then looks with the same calls and an
 * until_ms already past.
 *
 * When a subscriber connection fails, every waiter is woken to retry
 * (messages may have been lost) and the thread reconnects with backoff and
 * subscribes again.
 *
 * Direct reading (one server, or the slot's master in a Redis Cluster):
 * when a thread is the only waiter of the client, it reads the subscriber
 * connection its channel is on itself instead of sleeping
 * until the notifier thread has read a message and woken it. That saves
 * a thread wake-up on every hand-over, the critical path of a contended
 * lock. The link is then "direct": the notifier thread leaves it alone
 * (not in its poll set) until it has subscription work for it, and takes
 * it back at once when a second waiter appears. A waiter leaving a direct
 * link it was the only one to need keeps it direct ("parked": unread
 * until the next waiter), so the next wait costs no wake-up either; the
 * notifier thread still checks every second whether a parked link has
 * work (an idle channel to unsubscribe).
 *
 * The thread and the links are subscriber.c's; this file is the waiters'
 * side.
 *
 * Locking: one mutex (n->mu) guards the channel table, every waiter field
 * and the links' direct state; a thread drops it around socket I/O that
 * can block, and only the thread the state names (the notifier, or
 * n->reader) touches a link's connection.
 */
#include <errno.h>
#include <stdarg.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "topo/cluster.h"
#include "notify/notify.h"
#include "notify/notify_impl.h"

/* Write this thread's message on n's client and return code. */
static int fail(const dlock__notifier *n, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(const dlock__notifier *n, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    code = dlock__msgs_vset(n->x.msgs, code, fmt, ap);
    va_end(ap);
    return code;
}

/* See notify.h. The thread starts on first use. */
int dlock__notify_init(dlock__notifier **out, const dlock__notify_ctx *x)
{
    dlock__notifier *n = calloc(1, sizeof *n);
    if (n == NULL)
        return DLOCK_ENOMEM;
    n->links = calloc((size_t)dlock__links_max(x->ns), sizeof *n->links);
    n->dlink = -1;
    n->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    n->reader_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (n->links == NULL || n->wake_fd < 0 || n->reader_fd < 0) {
        int rc = n->links == NULL ? DLOCK_ENOMEM : DLOCK_EIO;
        if (n->wake_fd >= 0)
            close(n->wake_fd);
        if (n->reader_fd >= 0)
            close(n->reader_fd);
        free(n->links);
        free(n);
        return rc;
    }
    n->x = *x;
    pthread_mutex_init(&n->mu, NULL);
    *out = n;
    return DLOCK_OK;
}

/* See notify.h. */
void dlock__notify_free(dlock__notifier *n)
{
    int i;
    if (n == NULL)
        return;
    pthread_mutex_lock(&n->mu);
    n->stop = 1;
    pthread_mutex_unlock(&n->mu);
    if (n->started) {
        dlock__sub_poke(n->wake_fd);
        pthread_join(n->thread, NULL);
    }
    for (i = 0; i < dlock__links_max(n->x.ns); i++)
        dlock__conn_close(n->links[i].conn);
    while (n->chans != NULL) {
        chan *next = n->chans->next;
        dlock__sub_chan_free(n->chans);
        n->chans = next;
    }
    close(n->wake_fd);
    close(n->reader_fd);
    free(n->links);
    pthread_mutex_destroy(&n->mu);
    free(n);
}

/* See notify.h. */
void dlock__notify_rename(dlock__notifier *n, char *buf, size_t len,
                          const char *owner)
{
    size_t k = strlen(owner);
    if (len == 0)
        return;
    if (k >= len)
        k = len - 1;
    pthread_mutex_lock(&n->mu);
    memcpy(buf, owner, k);
    buf[k] = '\0';
    pthread_mutex_unlock(&n->mu);
}

/* Wake every waiter of every channel (cancellation). */
void dlock__notify_cancel(dlock__notifier *n)
{
    chan *ch;
    if (n == NULL)
        return;
    pthread_mutex_lock(&n->mu);
    for (ch = n->chans; ch != NULL; ch = ch->next)
        dlock__sub_chan_wake(ch);
    if (n->reader != NULL)
        dlock__sub_poke(n->reader_fd);
    pthread_mutex_unlock(&n->mu);
}

/* How many nodes must confirm a subscription: a majority, since a release
 * is announced by every node that held the lock, which is a majority. In
 * a cluster: the master serving the channel's slot, where the release
 * script publishes. */
static int subscribed_enough(dlock__notifier *n, const chan *ch)
{
    if (n->x.ns->cluster != NULL) {
        int home = dlock__sub_chan_home(n, ch);
        return home >= 0 && (ch->ok & (1ULL << home)) != 0;
    }
    return __builtin_popcountll(ch->ok) >= n->x.ns->quorum;
}

/* See notify.h. */
int dlock__notify_subscribed(dlock__notifier *n, const char *name, size_t len)
{
    chan *ch;
    int yes;
    pthread_mutex_lock(&n->mu);
    ch = dlock__sub_chan_find(n, name, len);
    yes = ch != NULL && subscribed_enough(n, ch);
    pthread_mutex_unlock(&n->mu);
    return yes;
}

/* See notify.h. The registration, without waiting for the
 * subscription. */
int dlock__notify_join(dlock__notifier *n, const char *name, size_t len,
                       const char *me, dlock__waiter **out, uint64_t cancel_gen)
{
    dlock__waiter *w;
    chan *ch;

    *out = NULL;
    w = calloc(1, sizeof *w);
    if (w == NULL)
        return DLOCK_ENOMEM;
    pthread_mutex_lock(&n->mu);
    if (!n->started) {
        if (pthread_create(&n->thread, NULL, dlock__sub_main, n) != 0) {
            pthread_mutex_unlock(&n->mu);
            free(w);
            return fail(n, DLOCK_ENOMEM, "cannot start the notifier thread");
        }
        n->started = 1;
    }
    ch = dlock__sub_chan_find(n, name, len);
    if (ch == NULL) {
        ch = calloc(1, sizeof *ch);
        if (ch == NULL || (ch->name = malloc(len + 1)) == NULL) {
            pthread_mutex_unlock(&n->mu);
            free(ch);
            free(w);
            return DLOCK_ENOMEM;
        }
        memcpy(ch->name, name, len);
        ch->name[len] = '\0';
        ch->len = len;
        dlock__cond_init(&ch->cv);
        ch->next = n->chans;
        n->chans = ch;
    }
    ch->refs++;
    w->n = n;
    w->ch = ch;
    w->cancel_gen = cancel_gen;
    w->me = me;
    w->efd = -1;
    w->ticket = ch->tickets++;
    w->next = ch->waiters;
    ch->waiters = w;
    if (++n->nwaiters > 1)
        dlock__sub_giveback(n); /* several waiters: the thread reads for all */
    if (n->dlink >= 0 && n->reader == NULL) {
        /* A parked link: take in what arrived while nobody read it (this
         * process's own releases, say) before the wait starts counting
         * releases, so that none of them wakes it. */
        dlock__sub_pump(n, n->dlink, POLLIN);
    }
    if (!subscribed_enough(n, ch)) {
        dlock__sub_giveback(n);
        dlock__sub_poke(
            n->wake_fd); /* a lingering subscription needs no round trip */
    }
    w->seen = ch->gen;
    pthread_mutex_unlock(&n->mu);
    *out = w;
    return DLOCK_OK;
}

/* 1 when too many nodes refused w's channel (ACL) for a subscription to
 * be enough. Caller holds mu. */
static int refused_enough(const dlock__notifier *n, const chan *ch)
{
    return __builtin_popcountll(ch->refused) > n->x.ns->n - n->x.ns->quorum;
}

/* See notify.h. */
int dlock__notify_begin(dlock__notifier *n, const char *name, size_t len,
                        const char *me, dlock__waiter **out,
                        int64_t deadline_ms, uint64_t cancel_gen)
{
    dlock__waiter *w;
    chan *ch;
    int rc = dlock__notify_join(n, name, len, me, &w, cancel_gen);
    if (rc != DLOCK_OK)
        return rc;
    ch = w->ch;
    pthread_mutex_lock(&n->mu);
    while (!subscribed_enough(n, ch)) {
        if (atomic_load(n->x.cancel_gen) != cancel_gen) {
            rc = DLOCK_CANCELED;
            break;
        }
        if (refused_enough(n, ch)) {
            rc = fail(n, DLOCK_EAUTH,
                      "SUBSCRIBE %s: NOPERM: this user may not "
                      "use the lock's channels",
                      ch->name);
            break;
        }
        if (dlock__cond_wait_until(&ch->cv, &n->mu, deadline_ms) == ETIMEDOUT &&
            !subscribed_enough(n, ch)) {
            rc = fail(n, DLOCK_ETIMEDOUT, "no subscription to %s in time",
                      ch->name);
            break;
        }
    }
    w->seen = ch->gen;
    pthread_mutex_unlock(&n->mu);
    if (rc != DLOCK_OK) {
        dlock__notify_end(w);
        return rc;
    }
    *out = w;
    return DLOCK_OK;
}

/* See notify.h. */
int dlock__notify_ready(dlock__waiter *w)
{
    dlock__notifier *n = w->n;
    int rc = 0;
    pthread_mutex_lock(&n->mu);
    if (subscribed_enough(n, w->ch)) {
        w->seen = w->ch->gen; /* counted from the confirmation */
        rc = 1;
    } else if (refused_enough(n, w->ch)) {
        rc = fail(n, DLOCK_EAUTH,
                  "SUBSCRIBE %s: NOPERM: this user may not use the lock's "
                  "channels",
                  w->ch->name);
    }
    pthread_mutex_unlock(&n->mu);
    return rc;
}

/* 1 when no other waiter of w's channel came before w: the turn goes
 * to the threads of a process in the order they began to wait. Caller
 * holds mu. */
static int first_in_line(const dlock__waiter *w)
{
    const dlock__waiter *o;
    for (o = w->ch->waiters; o != NULL; o = o->next)
        if (o != w && o->ticket < w->ticket)
            return 0;
    return 1;
}

/* See notify.h. */
int dlock__notify_turn(dlock__waiter *w, int64_t deadline_ms)
{
    dlock__notifier *n = w->n;
    chan *ch = w->ch;
    int rc = 1;
    if (w->has_turn)
        return 1;
    pthread_mutex_lock(&n->mu);
    while (ch->turn || !first_in_line(w)) {
        if (atomic_load(w->n->x.cancel_gen) != w->cancel_gen) {
            rc = DLOCK_CANCELED;
            break;
        }
        if (deadline_ms >= 0 && dlock__now_ms() >= deadline_ms) {
            rc = 0;
            break;
        }
        dlock__cond_wait_until(&ch->cv, &n->mu, deadline_ms);
    }
    if (rc == 1) {
        ch->turn = 1;
        w->has_turn = 1;
    }
    pthread_mutex_unlock(&n->mu);
    return rc;
}

/* The one link waiter w's messages come on: 0 with one server, the
 * master of its channel's slot in a cluster; -1 with Redlock (several
 * links) or while the slot map does not know. Caller holds mu. */
static int waiter_link(dlock__notifier *n, const dlock__waiter *w)
{
    if (n->x.ns->cluster == NULL)
        return n->x.ns->n == 1 ? 0 : -1;
    return dlock__sub_chan_home(n, w->ch);
}

/* Can waiter w read its subscriber connection (link li) itself? Only as
 * the client's only waiter, while that link has no subscription business
 * for the notifier thread and no other link is direct. Caller holds mu. */
static int direct_ok(dlock__notifier *n, const dlock__waiter *w, int li)
{
    return li >= 0 && n->nwaiters == 1 && w->efd < 0 &&
           n->links[li].conn != NULL && (n->reader == NULL || n->reader == w) &&
           (n->dlink < 0 || n->dlink == li) && !dlock__sub_link_work(n, li);
}

/* One wait step of a direct reader of link li: poll the subscriber
 * connection (and reader_fd) until something arrives or until_ms, then
 * hand the pushes to on_push. Called and returns with mu held. */
static void direct_step(dlock__notifier *n, dlock__waiter *w, int li,
                        int64_t until_ms)
{
    sub_link *l = &n->links[li];
    dlock__conn *conn = l->conn;
    struct pollfd pfd[2];
    int64_t left;

    if (!l->direct) {
        l->direct = 1;
        n->dlink = li;
        dlock__sub_poke(
            n->wake_fd); /* it drops the connection from its poll set */
    }
    n->reader = w;
    if (dlock__sub_read(n, li) > 0) /* already buffered (TLS records) */
        return;
    left = until_ms - dlock__now_ms();
    if (left < 0)
        left = 0;
    pfd[0].fd = dlock__conn_fd(conn);
    pfd[0].events = dlock__conn_events(conn);
    pfd[0].revents = 0;
    pfd[1].fd = n->reader_fd;
    pfd[1].events = POLLIN;
    pfd[1].revents = 0;
    pthread_mutex_unlock(&n->mu);
    poll(pfd, 2, left > 60000 ? 60000 : (int)left);
    pthread_mutex_lock(&n->mu);
    if (pfd[1].revents & POLLIN)
        dlock__sub_drain(n->reader_fd);
    if (n->reader != w || l->conn != conn || !l->direct)
        return; /* taken back meanwhile */
    if (pfd[0].revents != 0)
        dlock__sub_pump(n, li, pfd[0].revents);
}

/* Sleep on the channel until something for w came (1), until_ms (0;
 * one already past only looks), or a cancel; shared by the two waits. */
static int wait_on(dlock__waiter *w, int64_t until_ms, int fair)
{
    dlock__notifier *n = w->n;
    chan *ch = w->ch;
    int rc = 0, li;
    pthread_mutex_lock(&n->mu);
    for (;;) {
        if (atomic_load(w->n->x.cancel_gen) != w->cancel_gen) {
            rc = DLOCK_CANCELED;
            break;
        }
        if (fair && (w->handed || w->woken)) {
            w->woken = 0; /* consumed: the next wait sleeps again */
            rc = 1;
            break;
        }
        if (!fair && ch->gen != w->seen) {
            rc = 1;
            break;
        }
        if (dlock__now_ms() >= until_ms)
            break;
        li = waiter_link(n, w);
        if (n->reader == NULL && n->dlink >= 0 && n->dlink != li)
            dlock__sub_giveback(n); /* parked, but not the link we need */
        if (direct_ok(n, w, li)) {
            direct_step(n, w, li, until_ms);
            continue;
        }
        if (n->reader == w || (n->dlink >= 0 && n->reader == NULL))
            dlock__sub_giveback(n); /* nobody would read a parked link */
        dlock__cond_wait_until(&ch->cv, &n->mu, until_ms);
    }
    if (n->reader == w) {
        /* Keep the link parked for this process's next wait, unless
         * others need the thread to read for them. */
        n->reader = NULL;
        if (n->nwaiters > 1 || n->dlink < 0 ||
            dlock__sub_link_work(n, n->dlink))
            dlock__sub_giveback(n);
    }
    w->seen = ch->gen;
    pthread_mutex_unlock(&n->mu);
    if (rc == 1)
        atomic_fetch_add(&w->n->x.stats->wakeups, 1);
    return rc;
}

/* See notify.h. The waiter keeps its turn while it sleeps: the other
 * threads of the process stay quiet until it has the lock or gives up. */
int dlock__notify_wait(dlock__waiter *w, int64_t until_ms)
{
    return wait_on(w, until_ms, 0);
}

/* See notify.h. */
int dlock__notify_wait_handoff(dlock__waiter *w, int64_t until_ms)
{
    return wait_on(w, until_ms, 1);
}

/* See notify.h. A loop's waiter is not ended by the client's cancel
 * (its loop cancels it): its cancel generation follows the client's. */
int dlock__notify_look(dlock__waiter *w, int fair)
{
    pthread_mutex_lock(&w->n->mu);
    w->cancel_gen = atomic_load(w->n->x.cancel_gen);
    pthread_mutex_unlock(&w->n->mu);
    return wait_on(w, 0, fair) == 1;
}

/* See notify.h. */
uint64_t dlock__notify_handoff_token(const dlock__waiter *w)
{
    return w->token;
}

/* See notify.h. Only this waiter's thread reads it after a wait returned,
 * but the notifier sets it under mu. */
int dlock__notify_handed(dlock__waiter *w)
{
    dlock__notifier *n = w->n;
    int handed;
    pthread_mutex_lock(&n->mu);
    handed = w->handed;
    pthread_mutex_unlock(&n->mu);
    return handed;
}

/* See notify.h. Under mu: the subscriber sets handed under it. */
void dlock__notify_handoff_reset(dlock__waiter *w)
{
    pthread_mutex_lock(&w->n->mu);
    w->handed = 0;
    w->token = 0;
    pthread_mutex_unlock(&w->n->mu);
}

/* See notify.h. */
void dlock__notify_end(dlock__waiter *w)
{
    dlock__notifier *n;
    chan *ch;
    dlock__waiter **pp;
    if (w == NULL)
        return;
    n = w->n;
    ch = w->ch;
    pthread_mutex_lock(&n->mu);
    for (pp = &ch->waiters; *pp != NULL; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    if (w->has_turn)
        ch->turn = 0;
    /* The turn may be free now, or the next in line may be first now. */
    if (ch->waiters != NULL)
        dlock__sub_chan_wake(ch);
    n->nwaiters--;
    if (--ch->refs == 0)
        ch->idle_since = dlock__now_ms(); /* unsubscribed after LINGER_MS */
    pthread_mutex_unlock(&n->mu);
    if (w->efd >= 0)
        close(w->efd);
    free(w);
}

/* See notify.h. Made on first use: a blocking wait never needs it, and
 * the subscriber then signals no descriptor for it. The thread must read
 * the waiter's link itself from now on: a link this process's last wait
 * left parked (read by nobody until the next blocking wait) is given
 * back to it. */
int dlock__waiter_fd(dlock__waiter *w)
{
    dlock__notifier *n = w->n;
    int fd, err = 0;
    pthread_mutex_lock(&n->mu);
    if (w->efd < 0) {
        w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        err = errno;
        if (w->efd >= 0) {
            dlock__sub_giveback(n);
            /* What came before the descriptor: look once. */
            dlock__sub_poke(w->efd);
        }
    }
    fd = w->efd;
    pthread_mutex_unlock(&n->mu);
    if (fd < 0)
        return fail(n, DLOCK_EIO, "cannot make the waiter's eventfd: %s",
                    strerror(err));
    return fd;
}

/* See notify.h. */
void dlock__waiter_fd_clear(dlock__waiter *w)
{
    if (w->efd >= 0)
        dlock__sub_drain(w->efd);
}
