/*
 * holder.c - holder info: who holds a lock and since when, for operators
 * ("held by HOST pid PID `COMMAND` for 3m12s").
 *
 * A client with holder_info on records, after each fresh acquisition, a
 * hash <prefix>:{<name>}:i (same hash tag, so the same Cluster slot) with
 * the owner id, host name, pid, label, library version and the server's
 * time at the start (holder_set.lua). It carries the lock's remaining
 * lease and is renewed with it: the watchdog and dlock_lock_extend use
 * holder_extend.lua instead of extend.lua (renew.c), which renews both in
 * the same call. After the release it is left to expire: it costs no
 * round trip, and inspect.lua shows info only while its owner id holds
 * the lock, so info of an earlier hold is never taken for the holder's.
 *
 * Clients without holder_info pay nothing: no key, no round trip, the
 * plain extend script.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hold/holder.h"

/* What a recording client writes with every hold. */
typedef struct dlock__holder {
    char host[DLOCK_HOST_MAX];
    char pid[24];
    char *label;
} dlock__holder;

/* See holder.h. */
int dlock__holder_init(dlock_client *c, const dlock_options *o, char *err,
                       size_t errlen)
{
    dlock__holder *hd;
    const char *label = o->holder_label != NULL ? o->holder_label : "";

    c->opts.holder_label = NULL;
    if (!o->holder_info)
        return DLOCK_OK;
    if (strlen(label) >= DLOCK_LABEL_MAX)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "holder_label is %zu bytes, at most %d",
                           strlen(label), DLOCK_LABEL_MAX - 1);
    if (o->holder_pid < 0)
        return dlock__fail(err, errlen, DLOCK_EINVAL,
                           "holder_pid must be >= 0");
    hd = calloc(1, sizeof *hd);
    if (hd == NULL || (hd->label = strdup(label)) == NULL) {
        free(hd);
        return dlock__fail(err, errlen, DLOCK_ENOMEM, "out of memory");
    }
    if (gethostname(hd->host, sizeof hd->host) != 0)
        snprintf(hd->host, sizeof hd->host, "unknown");
    hd->host[sizeof hd->host - 1] = '\0';
    dlock__fmt_i64(hd->pid, o->holder_pid > 0 ? o->holder_pid : getpid());
    c->holder = hd;
    c->opts.holder_label = hd->label;
    return DLOCK_OK;
}

/* See holder.h. */
void dlock__holder_free(dlock_client *c)
{
    if (c->holder == NULL)
        return;
    free(c->holder->label);
    free(c->holder);
    c->holder = NULL;
}

/* See holder.h. */
int dlock__holder_on(const dlock_client *c)
{
    return c->holder != NULL;
}

/* See holder.h. */
size_t dlock__holder_key(char *buf, const char *key, size_t keylen)
{
    memcpy(buf, key, keylen);
    memcpy(buf + keylen, DLOCK__HOLDER_SUFFIX, sizeof DLOCK__HOLDER_SUFFIX);
    return keylen + sizeof DLOCK__HOLDER_SUFFIX - 1;
}

/* See holder.h. */
void dlock__holder_set_cmd(const dlock_client *c, dlock__cmdbuf *b,
                           const dlock__keys *k, char *ikey, const char *owner)
{
    const dlock__holder *hd = c->holder;
    size_t ilen = dlock__holder_key(ikey, k->key, k->keylen);

    dlock__cmd_begin(b, DLOCK__S_HOLDER_SET);
    dlock__cmd_key(b, k->key, k->keylen);
    dlock__cmd_key(b, ikey, ilen);
    dlock__cmd_arg(b, owner, strlen(owner));
    dlock__cmd_arg(b, hd->host, strlen(hd->host));
    dlock__cmd_arg(b, hd->pid, strlen(hd->pid));
    dlock__cmd_arg(b, hd->label, strlen(hd->label));
    dlock__cmd_arg(b, DLOCK_VERSION, strlen(DLOCK_VERSION));
}

/* See holder.h. */
void dlock__holder_record(dlock_client *c, const dlock__held *h)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    dlock__cmdbuf b;
    char *ikey;

    if (c->holder == NULL)
        return;
    ikey = malloc(h->k.keylen + sizeof DLOCK__HOLDER_SUFFIX);
    if (ikey == NULL)
        return;
    dlock__holder_set_cmd(c, &b, &h->k, ikey, h->owner);
    dlock__run(c, h->nodes != 0 ? h->nodes : dlock__all_nodes(c), &b.cmd,
               dlock__deadline(c, h->lease_ms), res);
    dlock__results_clear(res, c->ns.n);
    free(ikey);
}

/* Copy a reply string into a fixed buffer, cut to fit. */
static void copy_str(char *dst, size_t len, const redisReply *s)
{
    size_t n = s->len < len - 1 ? s->len : len - 1;
    memcpy(dst, s->str, n);
    dst[n] = '\0';
}

/* See holder.h. */
void dlock__holder_parse(const redisReply *r, dlock_info *out)
{
    size_t i;

    out->has_holder = 0;
    out->held_ms = -1;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->elements % 2 != 0)
        return;
    for (i = 0; i < r->elements; i++)
        if (r->element[i]->type != REDIS_REPLY_STRING)
            return;
    for (i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i], *v = r->element[i + 1];
        if (k->len != 1 && strcmp(k->str, "age") != 0)
            continue;
        if (strcmp(k->str, "h") == 0)
            copy_str(out->holder_host, sizeof out->holder_host, v);
        else if (strcmp(k->str, "p") == 0)
            out->holder_pid = strtoll(v->str, NULL, 10);
        else if (strcmp(k->str, "l") == 0)
            copy_str(out->holder_label, sizeof out->holder_label, v);
        else if (strcmp(k->str, "v") == 0)
            copy_str(out->holder_version, sizeof out->holder_version, v);
        else if (strcmp(k->str, "age") == 0) /* < 0: a clock stepped back */
            out->held_ms = v->str[0] == '-' ? 0 : strtoll(v->str, NULL, 10);
    }
    out->has_holder = 1;
}
