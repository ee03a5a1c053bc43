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
 * When a subscriber connection fails, every waiter is woken to retry
 * (messages may have been lost) and the thread reconnects with backoff and
 * subscribes again.
 *
 * Direct reading (one server): when a thread is the only waiter of the
 * client, it reads the subscriber connection itself instead of sleeping
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
 * Locking: one mutex (n->mu) guards the channel table, every waiter field
 * and the links' direct state; a thread drops it around socket I/O that
 * can block, and only the thread the state names (the notifier, or
 * n->reader) touches a link's connection.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "conn.h"
#include "core.h"
#include "net.h"
#include "notify.h"

/* A channel nobody waits on stays subscribed this long, so that a process
 * that contends for a lock again and again does not pay a SUBSCRIBE and an
 * UNSUBSCRIBE per acquisition. */
#define LINGER_MS 2000

typedef struct chan {
    struct chan *next;
    char *name;
    size_t len;
    int refs;
    uint64_t want;      /* nodes on which it should be subscribed */
    uint64_t sent;      /* SUBSCRIBE sent, not yet confirmed */
    uint64_t ok;        /* confirmed */
    uint64_t unsent;    /* UNSUBSCRIBE sent */
    uint64_t gen;       /* bumped by every release message / lost link */
    int64_t idle_since; /* when refs fell to 0 (monotonic ms) */
    char seen[8][64];   /* ids of the last releases heard (Redlock echoes) */
    int seen_next;
    int turn; /* a thread of this process holds the turn */
    struct dlock__waiter *waiters;
    pthread_cond_t cv;
} chan;

struct dlock__waiter {
    struct dlock__waiter *next;
    dlock_client *c;
    chan *ch;
    uint64_t cancel_gen;
    uint64_t seen; /* ch->gen when it last looked */
    int has_turn;
    const char *me; /* fair: the owner id it waits to be handed */
    int handed;
    uint64_t token;
};

typedef struct sub_link {
    dlock__conn *conn;
    int64_t retry_at;
    int64_t backoff;
    int direct; /* read by n->reader, or parked: not the thread's */
} sub_link;

struct dlock__notifier {
    dlock_client *c;
    pthread_mutex_t mu;
    pthread_t thread;
    int started;
    int stop;
    int wake_fd;
    int reader_fd;         /* wakes n->reader (eventfd) */
    int nwaiters;          /* waiters of every channel */
    dlock__waiter *reader; /* the waiter reading a direct link, if any */
    chan *chans;
    sub_link *links;
};

/* See notify.h. The thread starts on first use. */
int dlock__notify_init(dlock_client *c)
{
    dlock__notifier *n = calloc(1, sizeof *n);
    if (n == NULL)
        return DLOCK_ENOMEM;
    n->links = calloc((size_t)c->ns.n, sizeof *n->links);
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
    n->c = c;
    pthread_mutex_init(&n->mu, NULL);
    c->notifier = n;
    return DLOCK_OK;
}

static void poke(int fd)
{
    uint64_t one = 1;
    ssize_t r = write(fd, &one, sizeof one);
    (void)r; /* EAGAIN: the counter is already non-zero, it will wake */
}

static void drain(int fd)
{
    uint64_t v;
    ssize_t r = read(fd, &v, sizeof v);
    (void)r;
}

static void wake_thread(dlock__notifier *n)
{
    poke(n->wake_fd);
}

static void chan_free(chan *ch)
{
    pthread_cond_destroy(&ch->cv);
    free(ch->name);
    free(ch);
}

/* See notify.h. */
void dlock__notify_free(dlock_client *c)
{
    dlock__notifier *n = c->notifier;
    int i;
    if (n == NULL)
        return;
    pthread_mutex_lock(&n->mu);
    n->stop = 1;
    pthread_mutex_unlock(&n->mu);
    if (n->started) {
        wake_thread(n);
        pthread_join(n->thread, NULL);
    }
    for (i = 0; i < c->ns.n; i++)
        dlock__conn_close(n->links[i].conn);
    while (n->chans != NULL) {
        chan *next = n->chans->next;
        chan_free(n->chans);
        n->chans = next;
    }
    close(n->wake_fd);
    close(n->reader_fd);
    free(n->links);
    pthread_mutex_destroy(&n->mu);
    free(n);
    c->notifier = NULL;
}

/* Wake every waiter of every channel (cancellation). */
void dlock__notify_cancel(dlock_client *c)
{
    dlock__notifier *n = c->notifier;
    chan *ch;
    if (n == NULL)
        return;
    pthread_mutex_lock(&n->mu);
    for (ch = n->chans; ch != NULL; ch = ch->next)
        pthread_cond_broadcast(&ch->cv);
    if (n->reader != NULL)
        poke(n->reader_fd);
    pthread_mutex_unlock(&n->mu);
}

static chan *chan_find(dlock__notifier *n, const char *name, size_t len)
{
    chan *ch;
    for (ch = n->chans; ch != NULL; ch = ch->next)
        if (ch->len == len && memcmp(ch->name, name, len) == 0)
            return ch;
    return NULL;
}

/* Send (UN)SUBSCRIBE for one channel on one link. Caller holds mu. */
static int send_sub(dlock__notifier *n, int i, chan *ch, int sub)
{
    const char *argv[2] = {sub ? "SUBSCRIBE" : "UNSUBSCRIBE", ch->name};
    size_t lens[2] = {sub ? 9u : 11u, ch->len};
    atomic_fetch_add(&n->c->stats.requests, 1);
    return dlock__conn_append_argv(n->links[i].conn, 2, argv, lens);
}

/* Bring every channel's subscriptions on link i in line with its refs.
 * Caller holds mu. */
static void sync_link(dlock__notifier *n, int i)
{
    uint64_t bit = 1ULL << i;
    int64_t now = dlock__now_ms();
    chan *ch;
    if (n->links[i].conn == NULL)
        return;
    for (ch = n->chans; ch != NULL; ch = ch->next) {
        if (ch->refs > 0 && !(ch->sent & bit) && !(ch->ok & bit) &&
            !(ch->unsent & bit)) {
            if (send_sub(n, i, ch, 1) == DLOCK_OK)
                ch->sent |= bit;
        } else if (ch->refs == 0 && (ch->ok & bit) && !(ch->unsent & bit) &&
                   now - ch->idle_since >= LINGER_MS) {
            if (send_sub(n, i, ch, 0) == DLOCK_OK) {
                ch->unsent |= bit;
                ch->ok &= ~bit;
            }
        }
    }
}

/* Drop channels nobody waits on and no link still has business with. */
static void gc_chans(dlock__notifier *n)
{
    chan **pp = &n->chans;
    while (*pp != NULL) {
        chan *ch = *pp;
        if (ch->refs == 0 && ch->ok == 0 && ch->sent == 0 && ch->unsent == 0 &&
            ch->waiters == NULL) {
            *pp = ch->next;
            chan_free(ch);
        } else {
            pp = &ch->next;
        }
    }
}

/* 1 when link i has subscription business: a channel to subscribe or
 * unsubscribe, or a confirmation still to come. Caller holds mu. */
static int link_work(dlock__notifier *n, int i)
{
    uint64_t bit = 1ULL << i;
    int64_t now = dlock__now_ms();
    chan *ch;
    for (ch = n->chans; ch != NULL; ch = ch->next) {
        if ((ch->sent | ch->unsent) & bit)
            return 1;
        if (ch->refs > 0 && !(ch->ok & bit))
            return 1;
        if (ch->refs == 0 && (ch->ok & bit) &&
            now - ch->idle_since >= LINGER_MS)
            return 1;
    }
    return 0;
}

/* Give a direct link back to the notifier thread; a waiter reading it
 * notices and goes back to sleeping on its channel. Caller holds mu. */
static void direct_giveback(dlock__notifier *n)
{
    if (!n->links[0].direct)
        return;
    n->links[0].direct = 0;
    if (n->reader != NULL) {
        n->reader = NULL;
        poke(n->reader_fd);
    }
    wake_thread(n);
}

/* Link i failed: forget its subscriptions, wake everyone (messages may
 * have been missed), retry with backoff. Caller holds mu. */
static void link_down(dlock__notifier *n, int i)
{
    uint64_t bit = 1ULL << i;
    sub_link *l = &n->links[i];
    chan *ch;
    if (l->direct) {
        l->direct = 0;
        n->reader = NULL;
        wake_thread(n); /* it reconnects */
    }
    dlock__conn_close(l->conn);
    l->conn = NULL;
    l->backoff = l->backoff == 0 ? 50 : l->backoff * 2;
    if (l->backoff > 2000)
        l->backoff = 2000;
    l->retry_at = dlock__now_ms() + l->backoff;
    for (ch = n->chans; ch != NULL; ch = ch->next) {
        ch->sent &= ~bit;
        ch->ok &= ~bit;
        ch->unsent &= ~bit;
        ch->gen++;
        pthread_cond_broadcast(&ch->cv);
    }
}

/* A push from link i: subscribe confirmations and messages. */
static void on_push(dlock__notifier *n, int i, const redisReply *r)
{
    uint64_t bit = 1ULL << i;
    const redisReply *kind, *name;
    chan *ch;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3)
        return;
    kind = r->element[0];
    name = r->element[1];
    if (kind->type != REDIS_REPLY_STRING || name->type != REDIS_REPLY_STRING)
        return;
    ch = chan_find(n, name->str, name->len);
    if (ch == NULL)
        return;
    if (strcmp(kind->str, "subscribe") == 0) {
        ch->sent &= ~bit;
        ch->ok |= bit;
        pthread_cond_broadcast(&ch->cv);
    } else if (strcmp(kind->str, "unsubscribe") == 0) {
        ch->unsent &= ~bit;
    } else if (strcmp(kind->str, "message") == 0) {
        const redisReply *m = r->element[2];
        if (m->type == REDIS_REPLY_STRING && m->len > 2 && m->str[0] == 'r' &&
            m->len < sizeof ch->seen[0]) {
            /* "r ID": with Redlock every node announces the release; wake
             * the waiters once per release, not once per node. */
            int k;
            for (k = 0; k < 8; k++)
                if (strcmp(ch->seen[k], m->str + 2) == 0)
                    return;
            memcpy(ch->seen[ch->seen_next], m->str + 2, m->len - 1);
            ch->seen_next = (ch->seen_next + 1) % 8;
        }
        ch->gen++;
        if (m->type == REDIS_REPLY_STRING && m->len > 2 && m->str[0] == 'h') {
            /* "h TOKEN OWNER": a fair handoff for one waiter. */
            char *sp = NULL;
            unsigned long long tok = strtoull(m->str + 2, &sp, 10);
            struct dlock__waiter *w;
            if (sp != NULL && *sp == ' ')
                for (w = ch->waiters; w != NULL; w = w->next)
                    if (w->me != NULL && strcmp(w->me, sp + 1) == 0) {
                        w->handed = 1;
                        w->token = tok;
                    }
        }
        pthread_cond_broadcast(&ch->cv);
    }
}

/* Hand what link i has delivered to on_push; on a protocol error the link
 * is down. Returns the number of pushes (+1 when the link went down).
 * Caller holds mu. */
static int link_read(dlock__notifier *n, int i)
{
    redisReply *rep;
    char err[DLOCK__ERRLEN];
    int got, k = 0;
    while ((got = dlock__conn_pop_reply(n->links[i].conn, &rep, err,
                                        sizeof err)) == 1) {
        on_push(n, i, rep);
        freeReplyObject(rep);
        k++;
    }
    if (got < 0)
        link_down(n, i);
    return got < 0 ? k + 1 : k;
}

/* Do link i's I/O for poll's revents, then link_read(). Caller holds mu. */
static void link_pump(dlock__notifier *n, int i, short revents)
{
    char err[DLOCK__ERRLEN];
    if (dlock__conn_progress(n->links[i].conn, revents, err, sizeof err) !=
        DLOCK_OK)
        link_down(n, i);
    else
        link_read(n, i);
}

/* The subscriber thread: keep links up, subscriptions in sync, and turn
 * pushes into wake-ups, until told to stop. */
static void *notifier_main(void *arg)
{
    dlock__notifier *n = arg;
    dlock_client *c = n->c;
    struct pollfd *pfd = calloc((size_t)c->ns.n + 1, sizeof *pfd);
    int *idx = calloc((size_t)c->ns.n + 1, sizeof *idx);
    char err[DLOCK__ERRLEN];

    if (pfd == NULL || idx == NULL) {
        free(pfd);
        free(idx);
        return NULL;
    }
    pthread_mutex_lock(&n->mu);
    while (!n->stop) {
        int i, np = 1, timeout = 1000;
        int64_t now = dlock__now_ms();
        int any = n->chans != NULL;

        for (i = 0; i < c->ns.n; i++) {
            sub_link *l = &n->links[i];
            if (l->conn == NULL && any && now >= l->retry_at) {
                dlock__conn *conn = NULL;
                int rc;
                pthread_mutex_unlock(&n->mu);
                rc = dlock__conn_open(&conn, &c->ns.node[i].ep, c->ns.tls,
                                      now + c->opts.connect_timeout_ms, err,
                                      sizeof err);
                pthread_mutex_lock(&n->mu);
                if (rc == DLOCK_OK) {
                    atomic_fetch_add(&c->stats.reconnects, 1);
                    l->conn = conn;
                    l->backoff = 0;
                } else {
                    l->backoff = l->backoff == 0 ? 50 : l->backoff * 2;
                    if (l->backoff > 2000)
                        l->backoff = 2000;
                    l->retry_at = dlock__now_ms() + l->backoff;
                }
            }
            if (l->conn != NULL && l->direct && link_work(n, i))
                direct_giveback(n);
            if (l->conn != NULL && !l->direct)
                sync_link(n, i);
        }
        gc_chans(n);

        pfd[0].fd = n->wake_fd;
        pfd[0].events = POLLIN;
        pfd[0].revents = 0;
        for (i = 0; i < c->ns.n; i++) {
            sub_link *l = &n->links[i];
            if (l->conn == NULL) {
                if (any && l->retry_at - now < timeout)
                    timeout =
                        (int)(l->retry_at - now < 0 ? 0 : l->retry_at - now);
                continue;
            }
            if (l->direct)
                continue; /* a waiter's */
            pfd[np].fd = dlock__conn_fd(l->conn);
            pfd[np].events = dlock__conn_events(l->conn);
            pfd[np].revents = 0;
            idx[np++] = i;
        }
        pthread_mutex_unlock(&n->mu);
        poll(pfd, (nfds_t)np, timeout);
        pthread_mutex_lock(&n->mu);
        if (pfd[0].revents & POLLIN)
            drain(n->wake_fd);
        for (i = 1; i < np; i++) {
            sub_link *l = &n->links[idx[i]];
            if (l->conn == NULL || l->direct || pfd[i].revents == 0)
                continue; /* gone, or taken by a waiter meanwhile */
            link_pump(n, idx[i], pfd[i].revents);
        }
    }
    pthread_mutex_unlock(&n->mu);
    free(pfd);
    free(idx);
    return NULL;
}

/* How many nodes must confirm a subscription: a majority, since a release
 * is announced by every node that held the lock, which is a majority. */
static int subscribed_enough(const dlock_client *c, const chan *ch)
{
    return __builtin_popcountll(ch->ok) >= c->ns.quorum;
}

/* See notify.h. */
int dlock__notify_subscribed(dlock_client *c, const char *name, size_t len)
{
    dlock__notifier *n = c->notifier;
    chan *ch;
    int yes;
    pthread_mutex_lock(&n->mu);
    ch = chan_find(n, name, len);
    yes = ch != NULL && subscribed_enough(c, ch);
    pthread_mutex_unlock(&n->mu);
    return yes;
}

/* See notify.h. */
int dlock__notify_begin(dlock_client *c, const char *name, size_t len,
                        const char *me, dlock__waiter **out,
                        int64_t deadline_ms, uint64_t cancel_gen)
{
    dlock__notifier *n = c->notifier;
    dlock__waiter *w;
    chan *ch;
    int rc = DLOCK_OK;

    *out = NULL;
    w = calloc(1, sizeof *w);
    if (w == NULL)
        return DLOCK_ENOMEM;
    pthread_mutex_lock(&n->mu);
    if (!n->started) {
        if (pthread_create(&n->thread, NULL, notifier_main, n) != 0) {
            pthread_mutex_unlock(&n->mu);
            free(w);
            return dlock__set_error(c, DLOCK_ENOMEM,
                                    "cannot start the notifier thread");
        }
        n->started = 1;
    }
    ch = chan_find(n, name, len);
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
    w->c = c;
    w->ch = ch;
    w->cancel_gen = cancel_gen;
    w->me = me;
    w->next = ch->waiters;
    ch->waiters = w;
    if (++n->nwaiters > 1)
        direct_giveback(n); /* several waiters: the thread reads for all */
    if (n->links[0].direct && n->reader == NULL) {
        /* A parked link: take in what arrived while nobody read it (this
         * process's own releases, say) before the wait starts counting
         * releases, so that none of them wakes it. */
        link_pump(n, 0, POLLIN);
    }
    if (!subscribed_enough(c, ch)) {
        direct_giveback(n);
        wake_thread(n); /* a lingering subscription needs no round trip */
    }
    while (!subscribed_enough(c, ch)) {
        if (atomic_load(&c->cancel_gen) != cancel_gen) {
            rc = DLOCK_CANCELED;
            break;
        }
        if (dlock__cond_wait_until(&ch->cv, &n->mu, deadline_ms) == ETIMEDOUT &&
            !subscribed_enough(c, ch)) {
            rc = dlock__set_error(c, DLOCK_ETIMEDOUT,
                                  "no subscription to %s in time", ch->name);
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
int dlock__notify_turn(dlock__waiter *w, int64_t deadline_ms)
{
    dlock__notifier *n = w->c->notifier;
    chan *ch = w->ch;
    int rc = 1;
    if (w->has_turn)
        return 1;
    pthread_mutex_lock(&n->mu);
    while (ch->turn) {
        if (atomic_load(&w->c->cancel_gen) != w->cancel_gen) {
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

/* Can waiter w read the subscriber connection itself? Only with one
 * server, as the client's only waiter, and while the link has no
 * subscription business for the notifier thread. Caller holds mu. */
static int direct_ok(dlock__notifier *n, const dlock__waiter *w)
{
    return n->c->ns.n == 1 && n->nwaiters == 1 && n->links[0].conn != NULL &&
           (n->reader == NULL || n->reader == w) && !link_work(n, 0);
}

/* One wait step of a direct reader: poll the subscriber connection (and
 * reader_fd) until something arrives or until_ms, then hand the pushes
 * to on_push. Called and returns with mu held. */
static void direct_step(dlock__notifier *n, dlock__waiter *w, int64_t until_ms)
{
    sub_link *l = &n->links[0];
    dlock__conn *conn = l->conn;
    struct pollfd pfd[2];
    int64_t left;

    if (!l->direct) {
        l->direct = 1;
        wake_thread(n); /* it drops the connection from its poll set */
    }
    n->reader = w;
    if (link_read(n, 0) > 0) /* already buffered (TLS records) */
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
        drain(n->reader_fd);
    if (n->reader != w || l->conn != conn || !l->direct)
        return; /* taken back meanwhile */
    if (pfd[0].revents != 0)
        link_pump(n, 0, pfd[0].revents);
}

/* Sleep on the channel until pred says stop; shared by the two waits. */
static int wait_on(dlock__waiter *w, int64_t until_ms, int fair)
{
    dlock__notifier *n = w->c->notifier;
    chan *ch = w->ch;
    int rc = 0;
    pthread_mutex_lock(&n->mu);
    for (;;) {
        if (atomic_load(&w->c->cancel_gen) != w->cancel_gen) {
            rc = DLOCK_CANCELED;
            break;
        }
        if (fair && w->handed) {
            rc = 1;
            break;
        }
        if (!fair && ch->gen != w->seen) {
            rc = 1;
            break;
        }
        if (dlock__now_ms() >= until_ms)
            break;
        if (direct_ok(n, w)) {
            direct_step(n, w, until_ms);
            continue;
        }
        if (n->reader == w || (n->links[0].direct && n->reader == NULL))
            direct_giveback(n); /* nobody would read a parked link */
        dlock__cond_wait_until(&ch->cv, &n->mu, until_ms);
    }
    if (n->reader == w) {
        /* Keep the link parked for this process's next wait, unless
         * others need the thread to read for them. */
        n->reader = NULL;
        if (n->nwaiters > 1 || link_work(n, 0))
            direct_giveback(n);
    }
    w->seen = ch->gen;
    pthread_mutex_unlock(&n->mu);
    if (rc == 1)
        atomic_fetch_add(&w->c->stats.wakeups, 1);
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

/* See notify.h. */
uint64_t dlock__notify_handoff_token(const dlock__waiter *w)
{
    return w->token;
}

/* See notify.h. */
void dlock__notify_end(dlock__waiter *w)
{
    dlock__notifier *n;
    chan *ch;
    dlock__waiter **pp;
    if (w == NULL)
        return;
    n = w->c->notifier;
    ch = w->ch;
    pthread_mutex_lock(&n->mu);
    for (pp = &ch->waiters; *pp != NULL; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    if (w->has_turn) {
        ch->turn = 0;
        pthread_cond_broadcast(&ch->cv);
    }
    n->nwaiters--;
    if (--ch->refs == 0)
        ch->idle_since = dlock__now_ms(); /* unsubscribed after LINGER_MS */
    pthread_mutex_unlock(&n->mu);
    free(w);
}
