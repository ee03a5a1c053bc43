/*
 * subscriber.c - the notifier's background thread and its links: one
 * subscriber connection per server, kept up (reconnect with backoff),
 * its subscriptions kept in line with the channels' reference counts
 * (SUBSCRIBE on first use, UNSUBSCRIBE after LINGER_MS idle), and every
 * push turned into a wake-up of the channel's waiters. A link can be
 * "direct": read by a waiter itself (notify.c); the thread then leaves
 * it alone until it has subscription work for it.
 *
 * When a link fails, every waiter is woken to retry (messages may have
 * been lost) and the thread reconnects and subscribes again.
 *
 * Redis Cluster: sharded pub/sub. There is a link per node of the
 * cluster's table (opened only when a channel needs it), and a channel is
 * SSUBSCRIBEd on one link: the master serving its slot (its "home", from
 * the slot map). When the slot moves, the old master drops the
 * subscription itself (an unasked "sunsubscribe" push): the waiters are
 * woken to retry, and the channel is subscribed again at its new home; an
 * SSUBSCRIBE that reaches a node no longer serving the slot is answered
 * MOVED, which updates the map the same way a command's MOVED does.
 *
 * Locking: see notify.c. Only the thread the state names (this one, or
 * n->reader) touches a link's connection.
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "topo/cluster.h"
#include "io/net.h"
#include "topo/node.h"
#include "notify/notify_impl.h"

/* See notify_impl.h. */
void dlock__sub_poke(int fd)
{
    uint64_t one = 1;
    ssize_t r = write(fd, &one, sizeof one);
    (void)r; /* EAGAIN: the counter is already non-zero, it will wake */
}

/* See notify_impl.h. */
void dlock__sub_drain(int fd)
{
    uint64_t v;
    ssize_t r = read(fd, &v, sizeof v);
    (void)r;
}

static void wake_thread(dlock__notifier *n)
{
    dlock__sub_poke(n->wake_fd);
}

/* See notify_impl.h. */
void dlock__sub_chan_free(chan *ch)
{
    pthread_cond_destroy(&ch->cv);
    free(ch->name);
    free(ch);
}

/* See notify_impl.h. */
chan *dlock__sub_chan_find(dlock__notifier *n, const char *name, size_t len)
{
    chan *ch;
    for (ch = n->chans; ch != NULL; ch = ch->next)
        if (ch->len == len && memcmp(ch->name, name, len) == 0)
            return ch;
    return NULL;
}

/* See notify_impl.h. */
int dlock__sub_chan_home(dlock__notifier *n, const chan *ch)
{
    if (n->x.ns->cluster == NULL)
        return -2;
    return dlock__cluster_lookup(n->x.ns, dlock__key_slot(ch->name, ch->len));
}

/* Send (UN)SUBSCRIBE for one channel on one link (SSUBSCRIBE and
 * SUNSUBSCRIBE in a cluster). Caller holds mu. */
static int send_sub(dlock__notifier *n, int i, chan *ch, int sub)
{
    int sharded = n->x.ns->cluster != NULL;
    const char *argv[2] = {sub ? (sharded ? "SSUBSCRIBE" : "SUBSCRIBE")
                               : (sharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE"),
                           ch->name};
    size_t lens[2] = {strlen(argv[0]), ch->len};
    atomic_fetch_add(&n->x.stats->requests, 1);
    return dlock__conn_append_argv(n->links[i].conn, 2, argv, lens);
}

/* Bring every channel's subscriptions on link i in line with its refs
 * (and in a cluster with its home: a channel whose slot moved away is
 * unsubscribed here). Caller holds mu. */
static void sync_link(dlock__notifier *n, int i)
{
    uint64_t bit = 1ULL << i;
    int64_t now = dlock__now_ms();
    chan *ch;
    if (n->links[i].conn == NULL)
        return;
    for (ch = n->chans; ch != NULL; ch = ch->next) {
        int home = dlock__sub_chan_home(n, ch);
        int here = home == -2 || home == i;
        int away = home >= 0 && home != i;
        if (ch->refs > 0 && here && !(ch->sent & bit) && !(ch->ok & bit) &&
            !(ch->unsent & bit) && !(ch->refused & bit)) {
            if (send_sub(n, i, ch, 1) == DLOCK_OK)
                ch->sent |= bit;
        } else if ((ch->ok & bit) && !(ch->unsent & bit) &&
                   (away ||
                    (ch->refs == 0 && now - ch->idle_since >= LINGER_MS))) {
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
            dlock__sub_chan_free(ch);
        } else {
            pp = &ch->next;
        }
    }
}

/* Milliseconds until the first lingering channel is due to be
 * unsubscribed (0 when one is due now), or -1 when none lingers: a
 * channel nobody waits on that some link still has subscribed. The
 * thread sleeps no longer than this, so that the linger is LINGER_MS and
 * not LINGER_MS plus a poll period. Caller holds mu. */
int64_t dlock__sub_linger_left(const dlock__notifier *n, int64_t now)
{
    const chan *ch;
    int64_t best = -1;
    for (ch = n->chans; ch != NULL; ch = ch->next) {
        int64_t left;
        if (ch->refs != 0 || (ch->ok & ~ch->unsent) == 0)
            continue;
        left = ch->idle_since + LINGER_MS - now;
        if (left < 0)
            left = 0;
        if (best < 0 || left < best)
            best = left;
    }
    return best;
}

/* 1 when link i has subscription business: a channel to subscribe or
 * unsubscribe, or a confirmation still to come. Caller holds mu. */
int dlock__sub_link_work(dlock__notifier *n, int i)
{
    uint64_t bit = 1ULL << i;
    int64_t now = dlock__now_ms();
    chan *ch;
    for (ch = n->chans; ch != NULL; ch = ch->next) {
        int home = dlock__sub_chan_home(n, ch);
        if ((ch->sent | ch->unsent) & bit)
            return 1;
        if (ch->refs > 0 && !(ch->ok & bit) && !(ch->refused & bit) &&
            (home == -2 || home == i))
            return 1;
        if ((ch->ok & bit) && home >= 0 && home != i)
            return 1;
        if (ch->refs == 0 && (ch->ok & bit) &&
            now - ch->idle_since >= LINGER_MS)
            return 1;
    }
    return 0;
}

/* Give a direct link back to the notifier thread; a waiter reading it
 * notices and goes back to sleeping on its channel. Caller holds mu. */
void dlock__sub_giveback(dlock__notifier *n)
{
    if (n->dlink < 0 || !n->links[n->dlink].direct)
        return;
    n->links[n->dlink].direct = 0;
    n->dlink = -1;
    if (n->reader != NULL) {
        n->reader = NULL;
        dlock__sub_poke(n->reader_fd);
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
        n->dlink = -1;
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
        ch->refused &= ~bit;
        ch->gen++;
        pthread_cond_broadcast(&ch->cv);
    }
}

/* An error on link i: the answer to a SUBSCRIBE (our only commands on
 * it). Returns 1 for NOPERM: the user may not use our channels (ACL channel rules are
 * patterns, so one refusal stands for all of them): every pending
 * subscription is refused, its waiters told, and the client polls
 * instead (the client's nopub). Caller holds mu. */
static int on_noperm(dlock__notifier *n, int i, const redisReply *r)
{
    uint64_t bit = 1ULL << i;
    chan *ch;
    if (strncmp(r->str, "NOPERM", 6) != 0)
        return 0;
    atomic_store(n->x.nopub, 1);
    for (ch = n->chans; ch != NULL; ch = ch->next)
        if (ch->sent & bit) {
            ch->sent &= ~bit;
            ch->refused |= bit;
            pthread_cond_broadcast(&ch->cv);
        }
    return 1;
}

/* "w ID OWNER" from link i: node i has freed the lock and OWNER is the
 * first live waiter in its queue (Redlock fair). Counted per release ID;
 * a majority of nodes wakes that waiter alone. Caller holds mu. */
static void on_wake(dlock__notifier *n, int i, chan *ch, const char *msg,
                    size_t len)
{
    const char *sp = memchr(msg, ' ', len);
    size_t idlen;
    struct dlock__waiter *w;
    if (sp == NULL || (idlen = (size_t)(sp - msg)) >= sizeof w->wrel)
        return;
    for (w = ch->waiters; w != NULL; w = w->next) {
        if (w->me == NULL || strlen(w->me) != len - idlen - 1 ||
            memcmp(w->me, sp + 1, len - idlen - 1) != 0)
            continue;
        if (strlen(w->wrel) != idlen || memcmp(w->wrel, msg, idlen) != 0) {
            memcpy(w->wrel, msg, idlen);
            w->wrel[idlen] = '\0';
            w->wmask = 0;
        }
        w->wmask |= 1ULL << i;
        if (__builtin_popcountll(w->wmask) >= n->x.ns->quorum) {
            w->woken = 1;
            pthread_cond_broadcast(&ch->cv);
        }
    }
}

/* A push from link i: subscribe confirmations and messages. */
static void on_push(dlock__notifier *n, int i, const redisReply *r)
{
    uint64_t bit = 1ULL << i;
    const redisReply *kind, *name;
    const char *what;
    chan *ch;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 3)
        return;
    kind = r->element[0];
    name = r->element[1];
    if (kind->type != REDIS_REPLY_STRING || name->type != REDIS_REPLY_STRING)
        return;
    ch = dlock__sub_chan_find(n, name->str, name->len);
    if (ch == NULL)
        return;
    what = kind->str[0] == 's' && n->x.ns->cluster != NULL ? kind->str + 1
                                                           : kind->str;
    if (strcmp(what, "subscribe") == 0) {
        ch->sent &= ~bit;
        ch->ok |= bit;
        pthread_cond_broadcast(&ch->cv);
    } else if (strcmp(what, "unsubscribe") == 0) {
        if (!(ch->unsent & bit) && (ch->ok & bit)) {
            /* Not asked for: the node no longer serves the channel's
             * slot (cluster resharding or failover). A release may now
             * be announced where nobody of ours listens: wake the
             * waiters to look, and subscribe at the new home. */
            dlock__cluster_stale(n->x.ns);
            ch->gen++;
            pthread_cond_broadcast(&ch->cv);
        }
        ch->unsent &= ~bit;
        ch->ok &= ~bit;
    } else if (strcmp(what, "message") == 0) {
        const redisReply *m = r->element[2];
        if (m->type == REDIS_REPLY_STRING && m->len > 2 && m->str[0] == 'w') {
            on_wake(n, i, ch, m->str + 2, m->len - 2);
            return;
        }
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

/* Cluster: an error answering an SSUBSCRIBE or SUNSUBSCRIBE on link i.
 * MOVED names the slot: the map learns its new master, and what was sent
 * here for that slot's channels is forgotten (sync_link sends it to the
 * new home). Anything else cannot be matched to a channel: 0, the link
 * is then taken down and everything subscribed again after a backoff.
 * NOPERM first (on_noperm), in a cluster too. Caller holds mu. */
static int on_error(dlock__notifier *n, int i, const redisReply *r)
{
    uint64_t bit = 1ULL << i;
    dlock__node *to = NULL;
    int slot = -1;
    chan *ch;
    if (on_noperm(n, i, r))
        return 1; /* refused: the client polls */
    if (n->x.ns->cluster == NULL)
        return 1; /* not ours to judge: as before, ignored */
    if (dlock__cluster_redirect(n->x.ns, dlock__cluster_node(n->x.ns, i),
                                r->str, &to, &slot) != DLOCK__REDIR_MOVED)
        return 0;
    for (ch = n->chans; ch != NULL; ch = ch->next) {
        if (dlock__key_slot(ch->name, ch->len) != slot)
            continue;
        ch->sent &= ~bit;
        ch->unsent &= ~bit;
        ch->ok &= ~bit;
    }
    wake_thread(n);
    return 1;
}

/* Hand what link i has delivered to on_push; on a protocol error the
 * link is down. Returns the number of pushes (+1 when the link went
 * down). Caller holds mu. */
int dlock__sub_read(dlock__notifier *n, int i)
{
    redisReply *rep;
    char err[DLOCK__ERRLEN];
    int got, k = 0;
    while ((got = dlock__conn_pop_reply(n->links[i].conn, &rep, err,
                                        sizeof err)) == 1) {
        if (rep->type == REDIS_REPLY_ERROR && !on_error(n, i, rep)) {
            freeReplyObject(rep);
            got = -1;
            break;
        }
        on_push(n, i, rep);
        freeReplyObject(rep);
        k++;
    }
    if (got < 0)
        link_down(n, i);
    return got < 0 ? k + 1 : k;
}

/* Do link i's I/O for poll's revents, then dlock__sub_read(). Caller
 * holds mu. */
void dlock__sub_pump(dlock__notifier *n, int i, short revents)
{
    char err[DLOCK__ERRLEN];
    if (dlock__conn_progress(n->links[i].conn, revents, err, sizeof err) !=
        DLOCK_OK)
        link_down(n, i);
    else
        dlock__sub_read(n, i);
}

/* 1 when link i should be up: always outside a cluster (while any
 * channel exists), in a cluster when some channel lives there or still
 * has business there. Caller holds mu. */
static int link_needed(dlock__notifier *n, int i)
{
    uint64_t bit = 1ULL << i;
    chan *ch;
    if (n->x.ns->cluster == NULL)
        return 1;
    for (ch = n->chans; ch != NULL; ch = ch->next)
        if ((ch->refs > 0 && dlock__sub_chan_home(n, ch) == i) ||
            ((ch->ok | ch->sent | ch->unsent) & bit))
            return 1;
    return 0;
}

/* Open link i's connection (its time came: retry_at), with backoff on
 * failure (50 ms doubling to 2 s). Caller holds mu; dropped around the
 * I/O. */
static void link_open(dlock__notifier *n, int i, int64_t now)
{
    sub_link *l = &n->links[i];
    dlock__conn *conn = NULL;
    char err[DLOCK__ERRLEN];
    int rc;
    pthread_mutex_unlock(&n->mu);
    /* A node of the set is checked and located (Sentinel) as any new
     * connection; a cluster's links are not. */
    if (n->x.ns->cluster == NULL)
        rc = dlock__node_open(n->x.ns, i, &conn, now + n->x.connect_timeout_ms,
                              err, sizeof err);
    else
        rc = dlock__conn_open(&conn, dlock__link_ep(n->x.ns, i), n->x.ns->tls,
                              now + n->x.connect_timeout_ms, err, sizeof err);
    pthread_mutex_lock(&n->mu);
    if (rc == DLOCK_OK) {
        atomic_fetch_add(&n->x.stats->reconnects, 1);
        l->conn = conn;
        l->backoff = 0;
    } else {
        l->backoff = l->backoff == 0 ? 50 : l->backoff * 2;
        if (l->backoff > 2000)
            l->backoff = 2000;
        l->retry_at = dlock__now_ms() + l->backoff;
    }
}

/* Bring the first nl links in line with the channels (any: some channel
 * exists): open the missing ones that are due, drop one whose node moved
 * (Sentinel failover: subscribe on the new master; the waiters retry
 * meanwhile), take back a direct link with work for the thread, and send
 * what the thread's links owe. Caller holds mu. */
static void links_tend(dlock__notifier *n, int nl, int any, int64_t now)
{
    int i;
    for (i = 0; i < nl; i++) {
        sub_link *l = &n->links[i];
        if (l->conn == NULL && any && now >= l->retry_at && link_needed(n, i))
            link_open(n, i, now);
        if (l->conn != NULL && n->x.ns->cluster == NULL &&
            strcmp(dlock__conn_peer(l->conn),
                   dlock__node_name(&n->x.ns->node[i])) != 0) {
            if (l->direct)
                dlock__sub_giveback(n);
            else
                link_down(n, i);
            continue;
        }
        if (l->conn != NULL && l->direct && dlock__sub_link_work(n, i))
            dlock__sub_giveback(n);
        if (l->conn != NULL && !l->direct)
            sync_link(n, i);
    }
}

/* The poll set of the thread: pfd[0] its wake-up, then its links'
 * connections (idx[k]: the link of pfd[k]; direct links are a waiter's);
 * *timeout lowered to the next retry of a missing link that is needed.
 * Returns the descriptors in pfd. Caller holds mu. */
static int links_pollfds(dlock__notifier *n, int nl, int any, int64_t now,
                         struct pollfd *pfd, int *idx, int *timeout)
{
    int i, np = 1;
    pfd[0].fd = n->wake_fd;
    pfd[0].events = POLLIN;
    pfd[0].revents = 0;
    for (i = 0; i < nl; i++) {
        sub_link *l = &n->links[i];
        if (l->conn == NULL) {
            if (any && link_needed(n, i) && l->retry_at - now < *timeout)
                *timeout = (int)(l->retry_at - now < 0 ? 0 : l->retry_at - now);
            continue;
        }
        if (l->direct)
            continue; /* a waiter's */
        pfd[np].fd = dlock__conn_fd(l->conn);
        pfd[np].events = dlock__conn_events(l->conn);
        pfd[np].revents = 0;
        idx[np++] = i;
    }
    return np;
}

/* The subscriber thread: keep links up, subscriptions in sync, and turn
 * pushes into wake-ups, until told to stop. */
void *dlock__sub_main(void *arg)
{
    dlock__notifier *n = arg;
    int nmax = dlock__links_max(n->x.ns);
    struct pollfd *pfd = calloc((size_t)nmax + 1, sizeof *pfd);
    int *idx = calloc((size_t)nmax + 1, sizeof *idx);
    char err[DLOCK__ERRLEN];

    if (pfd == NULL || idx == NULL) {
        free(pfd);
        free(idx);
        return NULL;
    }
    pthread_mutex_lock(&n->mu);
    while (!n->stop) {
        int i, nl, np, timeout = 1000;
        int64_t now = dlock__now_ms();
        int64_t linger;
        int any = n->chans != NULL;

        if (any && n->x.ns->cluster != NULL &&
            dlock__cluster_wants_refresh(n->x.ns)) {
            /* Where do the channels belong? (at most every 100 ms) */
            pthread_mutex_unlock(&n->mu);
            dlock__cluster_refresh(n->x.ns, now + n->x.connect_timeout_ms, err,
                                   sizeof err);
            pthread_mutex_lock(&n->mu);
            now = dlock__now_ms();
        }
        nl = dlock__links_count(n->x.ns);
        links_tend(n, nl, any, now);
        gc_chans(n);
        np = links_pollfds(n, nl, any, now, pfd, idx, &timeout);
        /* At least 5 ms: a channel whose UNSUBSCRIBE could not be sent
         * stays due, and must not make this a busy loop. */
        linger = dlock__sub_linger_left(n, dlock__now_ms());
        if (linger >= 0 && linger < timeout)
            timeout = linger < 5 ? 5 : (int)linger;
        pthread_mutex_unlock(&n->mu);
        poll(pfd, (nfds_t)np, timeout);
        pthread_mutex_lock(&n->mu);
        if (pfd[0].revents & POLLIN)
            dlock__sub_drain(n->wake_fd);
        for (i = 1; i < np; i++) {
            sub_link *l = &n->links[idx[i]];
            if (l->conn == NULL || l->direct || pfd[i].revents == 0)
                continue; /* gone, or taken by a waiter meanwhile */
            dlock__sub_pump(n, idx[i], pfd[i].revents);
        }
    }
    pthread_mutex_unlock(&n->mu);
    free(pfd);
    free(idx);
    return NULL;
}
