/*
 * registry.c - the client's registry of held locks, the records it keeps,
 * and owner ids.
 *
 * The client keeps one dlock__held per lock and owner (owner = client +
 * thread + hold number), shared by the handles of reentrant acquisitions.
 * It gives reentrancy its expected depth, which makes every script
 * idempotent (a retry after a lost reply cannot count twice), and gives
 * the watchdog the list of leases to renew.
 *
 * Life of a held record (h->life); every move is made under
 * client->held_mu:
 *
 *   NEW -> LIVE              the acquire (or adopt) succeeded:
 *                            dlock__held_link()
 *   NEW -> freed             the acquire failed; nobody else saw it
 *   LIVE -> RELEASING        a release of the last level starts, or detach
 *   RELEASING -> LIVE        the release left levels (dlock__handle_drop)
 *   LIVE, RELEASING
 *            -> UNLINKED     no level left (dlock__handle_drop, depth 0)
 *   UNLINKED -> freed        by its last user: the last handle, or the
 *                            last watchdog round holding a reference
 *
 *   NEW        made by an acquire (dlock__held_new), seen only by the
 *              acquiring thread; freed by it if the acquire fails.
 *   LIVE       in c->held: found by its thread for reentry, renewed by
 *              the watchdog, handed to its lost callback.
 *   RELEASING  in c->held, its last level being given back: the watchdog
 *              neither renews it nor reports it lost (the release's own
 *              "not owner" is not a loss).
 *   UNLINKED   out of c->held (depth 0): nothing finds it any more. It is
 *              freed by whoever drops the last use: the last handle
 *              (dlock__handle_drop) or the last watchdog round holding a
 *              reference (wd_refs).
 *
 * Who moves it: the owner thread (acquire: NEW -> LIVE; release, detach:
 * LIVE -> RELEASING -> UNLINKED, or back to LIVE while levels remain);
 * client_free frees what is left. The watchdog only takes references
 * (wd_refs) and sets state LOST; it never moves h->life.
 *
 * Invariants (assert()ed where they must hold): handles >= 0 and
 * wd_refs >= 0; a record is freed only when NEW or UNLINKED with no
 * handle, no watchdog reference and no callback running; only a NEW
 * record is linked, only a linked one unlinked; depth is changed only by
 * its owner thread (so it may read it without the mutex).
 *
 * The asserts are compiled out with NDEBUG (CMake's Release and
 * RelWithDebInfo builds): they check bookkeeping that the Debug, ASan and
 * TSan suites exercise, and a library must not abort the process that
 * holds a lock over a bookkeeping slip it can survive.
 *
 * An undo entry (dlock__undo) is a separate record: a maybe-taken lock to
 * give back, queued on c->undos for the watchdog.
 *
 * Indexes: c->held is a doubly linked list of every registered record
 * (the watchdog walks it); c->held_tab is a hash table of the reentrant
 * ones (not adopted, not DLOCK__HELD_SOLE) by name and thread serial, chained through hnext, doubled
 * when it holds as many records as buckets. Finding, linking and
 * unlinking cost the same with 100,000 holds as with none (a list walk
 * per acquire and release took most of a client's CPU at 10,000). Should
 * the table not grow (out of memory), its chains grow longer instead; with
 * no table at all, find walks the list.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hold/core.h"
#include "hold/held.h"

/* Write "<prefix>:{<name>}<suffix>" at *cur (NUL-terminated), advance
 * *cur past it, and return where it starts; its length in *outlen. */
static char *put_key(char **cur, const dlock_client *c, const char *name,
                     size_t nlen, const char *suffix, size_t *outlen)
{
    char *k = *cur;
    size_t slen = strlen(suffix);
    memcpy(k, c->key_prefix, c->prefixlen);
    memcpy(k + c->prefixlen, ":{", 2);
    memcpy(k + c->prefixlen + 2, name, nlen);
    k[c->prefixlen + 2 + nlen] = '}';
    memcpy(k + c->prefixlen + 3 + nlen, suffix, slen + 1);
    *outlen = c->prefixlen + 3 + nlen + slen;
    *cur = k + *outlen + 1;
    return k;
}

/* Bytes of the strings of a dlock__keys for NAME. */
size_t dlock__keys_size(const dlock_client *c, const char *name)
{
    size_t nlen = strlen(name);
    size_t base = c->prefixlen + 3 + nlen + 1; /* "<prefix>:{<name>}" + NUL */
    /* name, key, :f, :c, :q, :qt, :c:<client id>, :r */
    return (nlen + 1) + base + (base + 2) + (base + 2) + (base + 2) +
           (base + 3) + (base + 2 + 33) + (base + 2);
}

/* Fill k with the names of NAME's keys, the strings at cur (keys_size
 * bytes). */
void dlock__keys_fill(dlock__keys *k, char *cur, const dlock_client *c,
                      const char *name)
{
    size_t nlen = strlen(name);
    k->namelen = nlen;
    k->name = cur;
    memcpy(cur, name, nlen + 1);
    cur += nlen + 1;
    k->key = put_key(&cur, c, name, nlen, "", &k->keylen);
    k->fkey = put_key(&cur, c, name, nlen, ":f", &k->fkeylen);
    k->chan = put_key(&cur, c, name, nlen, ":c", &k->chanlen);
    k->qkey = put_key(&cur, c, name, nlen, ":q", &k->qkeylen);
    k->qtkey = put_key(&cur, c, name, nlen, ":qt", &k->qtkeylen);
    /* Fair handoffs are published on "<channel>:<client id>": only the
     * process of the waiter that got the lock is woken. */
    k->hchan = put_key(&cur, c, name, nlen, ":c:", &k->hchanlen);
    memcpy(k->hchan + k->hchanlen, c->idhex, 33);
    k->hchanlen += 32;
    cur = k->hchan + k->hchanlen + 1;
    k->rkey = put_key(&cur, c, name, nlen, ":r", &k->rkeylen);
}

/* See held.h. One allocation for the record and all its key and channel
 * names (this is on every fresh acquire's path). */
dlock__held *dlock__held_new(dlock_client *c, const char *name,
                             const char *owner)
{
    dlock__held *h = calloc(1, sizeof *h + dlock__keys_size(c, name));
    if (h == NULL)
        return NULL;
    dlock__keys_fill(&h->k, (char *)(h + 1), c, name);
    snprintf(h->owner, sizeof h->owner, "%s", owner);
    h->life = DLOCK__HELD_NEW;
    h->attempt_end_ms = -1;
    atomic_store(&h->state, DLOCK_OK);
    h->since_us = dlock__now_us(); /* an acquire sets it again when held */
    return h;
}

/* See held.h. */
void dlock__held_free(dlock__held *h)
{
    assert(h->life == DLOCK__HELD_NEW || h->life == DLOCK__HELD_UNLINKED);
    assert(h->wd_refs == 0);
    assert(!(h->flags & DLOCK__HELD_CB));
    assert(h->pins == NULL);
    free(h->lost_why);
    free(h);
}

/* See held.h. A pinned connection still carries the acquire's answer,
 * which its next user drops. */
void dlock__held_drop_pins(dlock_client *c, dlock__held *h)
{
    int i;
    if (h->pins == NULL)
        return;
    for (i = 0; i < c->ns.n; i++)
        dlock__node_put(&c->ns, i, h->pins[i], 1);
    free(h->pins);
    h->pins = NULL;
}

/* See held.h. */
dlock__undo *dlock__undo_new(dlock_client *c, const char *name,
                             const char *owner)
{
    dlock__undo *u = calloc(1, sizeof *u + dlock__keys_size(c, name));
    if (u == NULL)
        return NULL;
    dlock__keys_fill(&u->k, (char *)(u + 1), c, name);
    snprintf(u->owner, sizeof u->owner, "%s", owner);
    return u;
}

/* See held.h. */
dlock__keys *dlock__keys_new(dlock_client *c, const char *name)
{
    dlock__keys *k = calloc(1, sizeof *k + dlock__keys_size(c, name));
    if (k != NULL)
        dlock__keys_fill(k, (char *)(k + 1), c, name);
    return k;
}

/* FNV-1a over the name's bytes and the thread's: which bucket a
 * reentrant hold is in. */
static uint64_t held_hash(const char *name, uint64_t self)
{
    uint64_t x = 14695981039346656037ULL;
    const unsigned char *p;
    size_t i;
    for (p = (const unsigned char *)name; *p != '\0'; p++)
        x = (x ^ *p) * 1099511628211ULL;
    p = (const unsigned char *)&self;
    for (i = 0; i < sizeof self; i++)
        x = (x ^ p[i]) * 1099511628211ULL;
    return x;
}

/* Put h at the head of its bucket. */
static void tab_put(dlock__held **tab, size_t sz, dlock__held *h)
{
    size_t b = (size_t)(h->hash & (sz - 1));
    h->hnext = tab[b];
    tab[b] = h;
}

/* Double the table (64 buckets at first), refilled from the list, so
 * that every reentrant record is in it even after a failed growth; on
 * failure keep the old one (or none). Caller holds held_mu. */
static void tab_grow(dlock_client *c)
{
    size_t sz = c->held_tabsz == 0 ? 64 : c->held_tabsz * 2, n = 0;
    dlock__held **tab = calloc(sz, sizeof *tab);
    dlock__held *h;
    if (tab == NULL)
        return;
    for (h = c->held; h != NULL; h = h->next) {
        if (h->flags & DLOCK__HELD_NOT_FOUND)
            continue;
        h->hash = held_hash(h->k.name, h->thread);
        tab_put(tab, sz, h);
        n++;
    }
    free(c->held_tab);
    c->held_tab = tab;
    c->held_tabsz = sz;
    c->held_count = n;
}

/* See held.h. */
dlock__held *dlock__held_find(dlock_client *c, const char *name, uint64_t self)
{
    dlock__held *h;
    uint64_t x;
    if (c->held_tabsz == 0) {
        for (h = c->held; h != NULL; h = h->next)
            if (!(h->flags & DLOCK__HELD_NOT_FOUND) && h->thread == self &&
                strcmp(h->k.name, name) == 0)
                return h;
        return NULL;
    }
    x = held_hash(name, self);
    for (h = c->held_tab[x & (c->held_tabsz - 1)]; h != NULL; h = h->hnext)
        if (h->hash == x && h->thread == self && strcmp(h->k.name, name) == 0)
            return h;
    return NULL;
}

/* See held.h. */
void dlock__held_link(dlock_client *c, dlock__held *h)
{
    int reentrant = !(h->flags & DLOCK__HELD_NOT_FOUND);
    assert(h->life == DLOCK__HELD_NEW);
    h->id = ++c->held_seq;
    if (reentrant && c->held_count >= c->held_tabsz)
        tab_grow(c); /* before h is in the list: it is put below */
    h->prev = NULL;
    h->next = c->held;
    if (c->held != NULL)
        c->held->prev = h;
    c->held = h;
    h->life = DLOCK__HELD_LIVE;
    if (!reentrant || c->held_tabsz == 0)
        return; /* never found for reentry; or no table: find walks */
    h->hash = held_hash(h->k.name, h->thread);
    tab_put(c->held_tab, c->held_tabsz, h);
    c->held_count++;
}

/* Take h out of its bucket, if it is in one. */
static void tab_remove(dlock_client *c, dlock__held *h)
{
    dlock__held **pp;
    if (c->held_tabsz == 0 || (h->flags & DLOCK__HELD_NOT_FOUND))
        return;
    for (pp = &c->held_tab[h->hash & (c->held_tabsz - 1)]; *pp != NULL;
         pp = &(*pp)->hnext)
        if (*pp == h) {
            *pp = h->hnext;
            c->held_count--;
            return;
        }
}

/* See held.h. */
void dlock__held_unlink(dlock_client *c, dlock__held *h)
{
    assert(h->life == DLOCK__HELD_LIVE || h->life == DLOCK__HELD_RELEASING);
    if (h->prev != NULL)
        h->prev->next = h->next;
    else
        c->held = h->next;
    if (h->next != NULL)
        h->next->prev = h->prev;
    h->next = h->prev = NULL;
    tab_remove(c, h);
    h->hnext = NULL;
    h->life = DLOCK__HELD_UNLINKED;
}

/* See held.h. The background threads have stopped: nothing else looks. */
void dlock__registry_clear(dlock_client *c)
{
    dlock__held *h, *next;
    dlock__undo *u, *unext;
    for (h = c->held; h != NULL; h = next) {
        next = h->next;
        h->life = DLOCK__HELD_UNLINKED;
        dlock__held_drop_pins(c, h);
        dlock__held_free(h);
    }
    c->held = NULL;
    free(c->held_tab);
    c->held_tab = NULL;
    c->held_tabsz = c->held_count = 0;
    for (u = c->undos; u != NULL; u = unext) {
        unext = u->next;
        free(u);
    }
    c->undos = NULL;
}

/* See held.h. The hold number makes every hold's owner id unique, so
 * that a late message of an earlier hold (a release, an undo or a renewal
 * delayed on the network past its timeout) can never act on a later hold
 * of the same thread. */
void dlock__owner_id(dlock_client *c, char *buf, size_t len)
{
    /* 32 + 1 + 20 + 1 + 20 + NUL; formatted by hand (hot path). */
    char *p = buf;
    if (len < 75) {
        snprintf(buf, len, "?");
        return;
    }
    memcpy(p, c->idhex, 32);
    p += 32;
    *p++ = ':';
    p += dlock__fmt_i64(p, dlock__thread_id());
    *p++ = ':';
    p += dlock__fmt_u64(p, atomic_fetch_add(&c->hold_seq, 1) + 1);
    *p = '\0';
}

/* Check a caller's string: not NULL, 1 to max bytes; what names it. */
static int check_text(const dlock_client *c, const char *what, const char *s,
                      int max)
{
    size_t n;
    if (s == NULL)
        return dlock__set_error(c, DLOCK_EINVAL, "%s is NULL", what);
    n = strlen(s);
    if (n == 0 || n > (size_t)max)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "%s must be 1 to %d bytes (got %zu)", what, max,
                                n);
    return DLOCK_OK;
}

/* See held.h. */
int dlock__check_name(const dlock_client *c, const char *name)
{
    int rc = check_text(c, "lock name", name, DLOCK_NAME_MAX);
    if (rc == DLOCK_OK && name[0] == '}' && c->ns.cluster != NULL)
        /* <prefix>:{}...}: Redis Cluster takes "{}" for no hash tag and
         * hashes each whole key, so the name's keys (lock, fence, queue)
         * would fall in different slots. */
        return dlock__set_error(
            c, DLOCK_EINVAL,
            "lock name '%.40s': a name beginning with '}' cannot be used in "
            "a Redis Cluster (its keys <prefix>:{NAME}... would have no "
            "hash tag, and so no common slot); a '}' further in is fine",
            name);
    return rc;
}

/* See held.h. */
int dlock__check_key(const dlock_client *c, const char *key)
{
    return check_text(c, "key", key, DLOCK_KEY_MAX);
}

/* ---- handles and the start of a hold --------------------------------- */

/* See held.h. */
int dlock__handle_new(dlock_client *c, dlock__held *h, dlock_lock **out)
{
    dlock_lock *l = calloc(1, sizeof *l);
    if (l == NULL)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    l->client = c;
    l->held = h;
    *out = l;
    return DLOCK_OK;
}

/* See held.h. A critical section shorter than half of what is left of a
 * fair handoff's lease never pays the confirming round trip (and with the
 * 2 s handoff lease the watchdog, which looks every second, need not be
 * woken). */
void dlock__held_started(dlock_client *c, dlock__held *h, int64_t lease_ms,
                         int64_t valid_until)
{
    int64_t due = dlock__now_ms();
    due += h->confirm_pending ? (valid_until - due) / 2 : lease_ms / 3;
    int kick = h->watchdog || h->confirm_pending;
    h->next_renew_ms = due;
    pthread_mutex_unlock(&c->held_mu);
    atomic_fetch_add(&c->stats.acquisitions, 1);
    if (kick)
        dlock__work_due(c, due);
}

/* See held.h. */
int dlock__handle_give(dlock_client *c, dlock__held *h, int watchdog,
                       dlock_lock **out)
{
    int rc = dlock__handle_new(c, h, out);
    if (rc != DLOCK_OK)
        return rc; /* the lease runs out by itself */
    if (watchdog) {
        pthread_mutex_lock(&c->held_mu);
        h->wd_handle = *out;
        pthread_mutex_unlock(&c->held_mu);
    }
    return DLOCK_OK;
}

/* See held.h. */
void dlock__handle_drop(dlock_client *c, dlock__held *h, dlock_lock *l,
                        int gone)
{
    int free_it;
    pthread_mutex_lock(&c->held_mu);
    assert(h->handles > 0);
    h->handles--;
    if (gone)
        h->depth = 0;
    else if (h->depth > 0)
        h->depth--;
    if (h->wd_handle == l)
        h->wd_handle = NULL;
    if (h->depth <= 0 && h->life != DLOCK__HELD_UNLINKED)
        dlock__held_unlink(c, h);
    if (h->depth > 0 && h->life == DLOCK__HELD_RELEASING)
        h->life = DLOCK__HELD_LIVE; /* levels remain: renew it again */
    free_it =
        h->life == DLOCK__HELD_UNLINKED && h->handles <= 0 && h->wd_refs == 0;
    pthread_mutex_unlock(&c->held_mu);
    free(l);
    if (free_it) {
        dlock__held_drop_pins(c, h);
        dlock__held_free(h);
    }
}

/* See held.h. A thread asleep until no later than due_ms will see the
 * work in time: it is left asleep. One that is running rescans (kicked). */
void dlock__work_due(dlock_client *c, int64_t due_ms)
{
    dlock__due *d = &c->due;
    pthread_mutex_lock(&c->held_mu);
    if (!d->started && !d->stop && d->start != NULL)
        d->started = d->start(c) == 0;
    if (!(d->sleeping && d->sleep_until <= due_ms)) {
        d->kicked = 1;
        if (d->sleeping)
            pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&c->held_mu);
}
