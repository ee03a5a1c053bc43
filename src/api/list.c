/*
 * list.c - dlock_list(): every held lock whose name matches a pattern,
 * with what dlock_lock_inspect() says of it (holder info included), for
 * operators (`dlock list`).
 *
 * Keys are found with SCAN (never KEYS: it blocks the server) on every
 * node of the node set: one server, each Redlock node (a lock held on
 * some of them is found on any), and, for Cluster, every master of the
 * slot map (read when the listing starts). Names
 * found on several nodes are listed once, sorted; each is then inspected
 * across the nodes like dlock_lock_inspect (majority rules for Redlock).
 *
 * Kinds: a table says, for each kind of lock, how its main key looks
 * ("<prefix>:{<name>}" for a lock, of Redis type hash) and how to
 * inspect it. Semaphores and read-write locks add a row here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo/cluster.h"
#include "io/conn.h"
#include "hold/core.h"

/* SCAN's COUNT: keys the server looks at per call (a hint). */
#define SCAN_COUNT "1000"

/* One kind of lock the listing knows. */
typedef struct kind {
    const char *name;   /* "lock" */
    const char *suffix; /* after "<prefix>:{<name>}" in the main key */
    const char *type;   /* the main key's Redis type, for SCAN TYPE */
} kind;

static const kind kinds[] = {
    {"lock", "", "hash"},
};

/* The names found so far (grown by doubling). */
typedef struct names {
    char **v;
    size_t n, cap;
} names;

/* Append a copy of the LEN bytes at S. 0 or -1 (out of memory). */
static int names_add(names *ns, const char *s, size_t len)
{
    char *copy;
    if (ns->n == ns->cap) {
        size_t cap = ns->cap ? ns->cap * 2 : 64;
        char **v = realloc(ns->v, cap * sizeof *v);
        if (v == NULL)
            return -1;
        ns->v = v;
        ns->cap = cap;
    }
    copy = malloc(len + 1);
    if (copy == NULL)
        return -1;
    memcpy(copy, s, len);
    copy[len] = '\0';
    ns->v[ns->n++] = copy;
    return 0;
}

static void names_free(names *ns)
{
    size_t i;
    for (i = 0; i < ns->n; i++)
        free(ns->v[i]);
    free(ns->v);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The SCAN pattern "<prefix>:{<pattern>}<suffix>" with the prefix's glob
 * characters escaped; malloc'd, or NULL. */
static char *scan_pattern(const dlock_client *c, const char *pattern,
                          const kind *k)
{
    size_t i, o = 0,
              len = 2 * c->prefixlen + strlen(pattern) + strlen(k->suffix) + 4;
    char *p = malloc(len);
    if (p == NULL)
        return NULL;
    for (i = 0; i < c->prefixlen; i++) {
        if (strchr("*?[]\\", c->key_prefix[i]) != NULL)
            p[o++] = '\\';
        p[o++] = c->key_prefix[i];
    }
    snprintf(p + o, len - o, ":{%s}%s", pattern, k->suffix);
    return p;
}

/* If KEY (LEN bytes) is the main key of a lock of kind k, add its name. */
static int take_key(const dlock_client *c, const kind *k, const char *key,
                    size_t len, names *out)
{
    size_t slen = strlen(k->suffix), head = c->prefixlen + 2;
    if (len < head + 1 + slen || memcmp(key, c->key_prefix, c->prefixlen) ||
        memcmp(key + c->prefixlen, ":{", 2) ||
        memcmp(key + len - slen, k->suffix, slen) || key[len - slen - 1] != '}')
        return 0;
    if (len - slen - 1 - head == 0 || len - slen - 1 - head > DLOCK_NAME_MAX)
        return 0;
    return names_add(out, key + head, len - slen - 1 - head);
}

/* SCAN node nd (of the node set, or a cluster master) for keys matching
 * PATTERN of TYPE to the end, adding the names of kind k to out. DLOCK_OK
 * or an error (message set). */
static int scan_node(dlock_client *c, dlock__node *nd, const kind *k,
                     const char *pat, names *out)
{
    char cursor[32] = "0", err[DLOCK__ERRLEN] = "";
    int64_t deadline;
    int rc = DLOCK_OK;

    do {
        const char *argv[8] = {"SCAN",  cursor,     "MATCH", pat,
                               "COUNT", SCAN_COUNT, "TYPE",  k->type};
        dlock__conn *conn = NULL;
        redisReply *r = NULL;
        const redisReply *keys;
        size_t j;

        deadline = dlock__now_ms() + c->opts.command_timeout_ms;
        rc = dlock__node_take(&c->ns, nd, &conn, deadline, err, sizeof err);
        if (rc == DLOCK_OK)
            rc = dlock__conn_append_argv(conn, 8, argv, NULL);
        if (rc == DLOCK_OK)
            rc = dlock__conn_roundtrip(conn, 1, &r, deadline, -1, err,
                                       sizeof err);
        if (conn != NULL)
            dlock__node_give(&c->ns, nd, conn, rc == DLOCK_OK);
        if (rc != DLOCK_OK)
            return dlock__set_error(c, rc, "list: %s", err);
        atomic_fetch_add(&c->stats.requests, 1);
        if (r->type == REDIS_REPLY_ERROR) {
            rc = dlock__set_error(c, DLOCK_ESERVER, "list: %s: SCAN: %.200s",
                                  dlock__node_name(nd), r->str);
            freeReplyObject(r);
            return rc;
        }
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING ||
            r->element[0]->len >= sizeof cursor ||
            r->element[1]->type != REDIS_REPLY_ARRAY) {
            freeReplyObject(r);
            return dlock__set_error(c, DLOCK_EPROTO,
                                    "list: %s: unexpected reply to SCAN",
                                    dlock__node_name(nd));
        }
        memcpy(cursor, r->element[0]->str, r->element[0]->len);
        cursor[r->element[0]->len] = '\0';
        keys = r->element[1];
        for (j = 0; rc == DLOCK_OK && j < keys->elements; j++)
            if (keys->element[j]->type == REDIS_REPLY_STRING &&
                take_key(c, k, keys->element[j]->str, keys->element[j]->len,
                         out) != 0)
                rc = dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
        freeReplyObject(r);
    } while (rc == DLOCK_OK && strcmp(cursor, "0") != 0);
    return rc;
}

/* The nodes to scan, into nodes: the node set's, or in a cluster every
 * master of the slot map, read now (a cluster's node set has one virtual
 * node, its first seed, which holds only the locks of its own slots).
 * Sets *need to how many must be scanned. The count, or an error. */
static int scan_nodes(dlock_client *c, dlock__node **nodes, int *need)
{
    char err[DLOCK__ERRLEN] = "";
    int i, n, rc;

    if (c->ns.cluster == NULL) {
        for (i = 0; i < c->ns.n; i++)
            nodes[i] = &c->ns.node[i];
        *need = c->ns.quorum;
        return c->ns.n;
    }
    rc = dlock__cluster_refresh(
        &c->ns, dlock__now_ms() + c->opts.command_timeout_ms, err, sizeof err);
    n = dlock__cluster_masters(&c->ns, nodes, DLOCK_MAX_SERVERS);
    if (rc != DLOCK_OK && n == 0)
        return dlock__set_error(c, rc, "list: cluster slot map: %s", err);
    /* A lock lives on one master only: each must be scanned. */
    *need = n;
    return n;
}

/* The names of kind k matching PATTERN on every node, sorted, each once.
 * With Redlock a node that cannot be scanned is skipped while a majority
 * can be (a lock held on a majority is on one of them); in a cluster
 * every master must be. */
static int find_names(dlock_client *c, const kind *k, const char *pattern,
                      names *out)
{
    dlock__node *nodes[DLOCK_MAX_SERVERS];
    char *pat;
    int i, n, need = 0, ok = 0, rc = DLOCK_OK, last = DLOCK_OK;
    size_t r, w;

    n = scan_nodes(c, nodes, &need);
    if (n < 0)
        return n;
    pat = scan_pattern(c, pattern, k);
    if (pat == NULL)
        return dlock__set_error(c, DLOCK_ENOMEM, "out of memory");
    for (i = 0; i < n; i++) {
        rc = scan_node(c, nodes[i], k, pat, out);
        if (rc == DLOCK_ENOMEM)
            break;
        if (rc == DLOCK_OK)
            ok++;
        else
            last = rc;
    }
    free(pat);
    if (rc == DLOCK_ENOMEM)
        return rc;
    if (ok < need)
        return n == 1 || c->ns.cluster != NULL
                   ? last
                   : dlock__set_error(c, DLOCK_NO_QUORUM,
                                      "list: %d of %d servers could "
                                      "be scanned",
                                      ok, n);
    if (out->n > 1)
        qsort(out->v, out->n, sizeof *out->v, cmp_str);
    for (r = 0, w = 0; r < out->n; r++) {
        if (w > 0 && strcmp(out->v[w - 1], out->v[r]) == 0) {
            free(out->v[r]);
            continue;
        }
        out->v[w++] = out->v[r];
    }
    out->n = w;
    return DLOCK_OK;
}

/* See dlock.h. */
int dlock_list(dlock_client *c, const char *pattern, dlock_list_cb cb,
               void *userdata)
{
    size_t t, i;
    int count = 0, rc = DLOCK_OK, stop = 0;

    if (c == NULL)
        return DLOCK_EINVAL;
    if (cb == NULL)
        return dlock__set_error(c, DLOCK_EINVAL, "list: cb is NULL");
    if (pattern == NULL)
        pattern = "*";
    if (pattern[0] == '\0' || strlen(pattern) > DLOCK_NAME_MAX)
        return dlock__set_error(c, DLOCK_EINVAL,
                                "list: the pattern must be 1 to %d bytes",
                                DLOCK_NAME_MAX);
    for (t = 0; !stop && t < sizeof kinds / sizeof kinds[0]; t++) {
        names found = {0};
        rc = find_names(c, &kinds[t], pattern, &found);
        for (i = 0; rc == DLOCK_OK && !stop && i < found.n; i++) {
            dlock_list_entry e;
            memset(&e, 0, sizeof e);
            e.kind = kinds[t].name;
            e.name = found.v[i];
            rc = dlock_lock_inspect(c, found.v[i], &e.info);
            if (rc == DLOCK_OK && e.info.held) {
                count++;
                stop = cb(&e, userdata) != 0;
            }
        }
        names_free(&found);
        if (rc != DLOCK_OK)
            return rc;
    }
    return count;
}
