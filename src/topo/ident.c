/*
 * ident.c - telling whether two nodes of a Redlock are one Redis server.
 *
 * A Redlock majority must come from independent servers. Two entries that
 * are one server (the same URL twice, another db of it, 127.0.0.1 and
 * localhost, its unix socket and its TCP port) would let one server
 * count twice: `A A DEAD` is "2 of 3" with one server up. So:
 *
 *  - at dlock_client_new (topology.c): two entries with the same host and
 *    port, or the same socket path, are refused whatever their db;
 *  - on a node's first connection, the first request to it is preceded
 *    by "INFO server" on the same connection (pipelined: no extra round
 *    trip) and its run_id is compared with every other node's. Two equal
 *    run_ids refuse the node set for good: every operation of the client
 *    but an undo fails with DLOCK_EINVAL from then on, and the step that
 *    found it counts no node (the engine), so the duplicate never makes a
 *    quorum. An undo still goes out: it only gives back what this
 *    client may have taken.
 *
 * A node's run_id is learned once (a restart changes it, but not which
 * server it is). A server that refuses INFO (ACL, rename-command) cannot
 * be compared by run_id: its URL check is all there is. Standalone
 * clients (one server) never ask.
 *
 * State: node->ident_run_id and node->ident under node->mu (ident also atomic
 * for the fast path), and ns->same_pair, set once by compare-and-swap. A
 * learner stores its run_id before it reads the others', each under the
 * node's mutex, so of two nodes learned at once the later reader sees the
 * other: a pair cannot be missed.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "topo/ident.h"

/* ns->same_pair encodes nodes a < b as 1 + a * DLOCK_MAX_SERVERS + b. */
static int pair_code(int a, int b)
{
    return 1 + a * DLOCK_MAX_SERVERS + b;
}

/* The same host: IP literals as addresses (::1 and 0::1 are one), names
 * without regard to case. */
static int same_host(const char *a, const char *b)
{
    unsigned char x[16], y[16];
    if (inet_pton(AF_INET, a, x) == 1 && inet_pton(AF_INET, b, y) == 1)
        return memcmp(x, y, 4) == 0;
    if (inet_pton(AF_INET6, a, x) == 1 && inet_pton(AF_INET6, b, y) == 1)
        return memcmp(x, y, 16) == 0;
    return strcasecmp(a, b) == 0;
}

/* 1 when endpoints a and b name the same place (db aside). */
static int same_place(const dlock__endpoint *a, const dlock__endpoint *b)
{
    if ((a->kind == DLOCK__EP_UNIX) != (b->kind == DLOCK__EP_UNIX))
        return 0;
    if (a->kind == DLOCK__EP_UNIX)
        return a->path != NULL && b->path != NULL &&
               strcmp(a->path, b->path) == 0;
    return a->port == b->port && a->host != NULL && b->host != NULL &&
           same_host(a->host, b->host);
}

/* See ident.h. */
int dlock__ident_check_urls(const dlock__nodeset *ns, char *err, size_t errlen)
{
    int i, j;
    for (i = 0; i < ns->n; i++)
        for (j = i + 1; j < ns->n; j++) {
            const dlock__endpoint *a = &ns->node[i].ep, *b = &ns->node[j].ep;
            if (!same_place(a, b))
                continue;
            return dlock__fail(err, errlen, DLOCK_EINVAL,
                               "servers %d (%s, db %d) and %d (%s, db %d) are "
                               "the same Redis server: a Redlock majority "
                               "needs independent servers",
                               i + 1, a->display, a->db, j + 1, b->display,
                               b->db);
        }
    return DLOCK_OK;
}

/* See ident.h. */
int dlock__ident_wanted(const dlock__nodeset *ns, int i)
{
    return ns->kind == DLOCK__TOPO_REDLOCK &&
           atomic_load(&ns->node[i].ident) == 0;
}

/* See ident.h. */
int dlock__ident_ask(dlock__conn *conn)
{
    const char *argv[2] = {"INFO", "server"};
    return dlock__conn_append_argv(conn, 2, argv, NULL);
}

/* The run_id (40 hex digits) in an INFO reply, into id (41 bytes); ""
 * when there is none. */
static void parse_run_id(const redisReply *r, char id[41])
{
    const char *p, *end;
    size_t k;
    id[0] = '\0';
    if (r == NULL || r->type != REDIS_REPLY_STRING)
        return;
    end = r->str + r->len;
    p = r->len >= 7 ? memmem(r->str, r->len, "run_id:", 7) : NULL;
    if (p == NULL)
        return;
    p += 7;
    for (k = 0; k < 40 && p + k < end; k++) {
        char ch = p[k];
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f')))
            break;
        id[k] = ch;
    }
    id[k == 40 ? 40 : 0] = '\0';
}

/* See ident.h. */
void dlock__ident_learn(dlock__nodeset *ns, int i, const redisReply *r)
{
    dlock__node *me = &ns->node[i];
    char id[41];
    int j, found = -1;

    parse_run_id(r, id);
    pthread_mutex_lock(&me->mu);
    memcpy(me->ident_run_id, id, sizeof id);
    atomic_store(&me->ident, 1);
    pthread_mutex_unlock(&me->mu);
    if (id[0] == '\0')
        return;
    for (j = 0; j < ns->n && found < 0; j++) {
        dlock__node *o = &ns->node[j];
        if (j == i)
            continue;
        pthread_mutex_lock(&o->mu);
        if (atomic_load(&o->ident) && strcmp(o->ident_run_id, id) == 0)
            found = j;
        pthread_mutex_unlock(&o->mu);
    }
    if (found >= 0) {
        int expect = 0;
        atomic_compare_exchange_strong(&ns->same_pair, &expect,
                                       found < i ? pair_code(found, i)
                                                 : pair_code(i, found));
    }
}

/* See ident.h. */
int dlock__ident_refused(const dlock__nodeset *ns, char *err, size_t errlen)
{
    int code = atomic_load(&((dlock__nodeset *)ns)->same_pair), a, b;
    char id[41];
    if (code == 0)
        return 0;
    if (err == NULL || errlen == 0)
        return 1;
    a = (code - 1) / DLOCK_MAX_SERVERS;
    b = (code - 1) % DLOCK_MAX_SERVERS;
    pthread_mutex_lock(&((dlock__nodeset *)ns)->node[a].mu);
    memcpy(id, ns->node[a].ident_run_id, sizeof id);
    pthread_mutex_unlock(&((dlock__nodeset *)ns)->node[a].mu);
    snprintf(err, errlen,
             "servers %d (%s) and %d (%s) are the same Redis server "
             "(run_id %.12s...): a Redlock majority needs independent "
             "servers",
             a + 1, ns->node[a].ep.display, b + 1, ns->node[b].ep.display, id);
    return 1;
}
