/*
 * kind.c - say what a name's key holds when it is not the kind asked for
 * (see kind.h).
 */
#include <stdlib.h>
#include <string.h>

#include "held.h"
#include "kind.h"
#include "step.h"

/* See kind.h. */
int dlock__foreign_error(dlock_client *c, const char *what, const char *name,
                         const char *type)
{
    return dlock__set_error(c, DLOCK_EINVAL,
                            "%s %s: its key holds a Redis %s that dlock did "
                            "not write: not dlock's (left as it is; use "
                            "another name or another key prefix)",
                            what, name, type);
}

/* See kind.h. */
int dlock__lock_kind_error(dlock_client *c, const char *name, int rc)
{
    dlock__result res[DLOCK_MAX_SERVERS];
    const char *msg = dlock__errbuf(c);
    char type[32] = "";
    dlock__keys *keys;
    dlock__cmdbuf b;
    int i, sem = 0;

    if (msg == NULL || strstr(msg, "WRONGTYPE") == NULL)
        return rc;
    keys = dlock__keys_new(c, name);
    if (keys != NULL) {
        dlock__cmd_begin(&b, DLOCK__S_KIND);
        dlock__cmd_key(&b, keys->key, keys->keylen);
        dlock__cmd_key(&b, keys->fkey, keys->fkeylen);
        dlock__run(c, dlock__all_nodes(c), &b.cmd, dlock__deadline(c, 0), res);
        /* The first node whose key is not a lock's hash says what it is. */
        for (i = 0; i < c->ns.n && type[0] == '\0'; i++) {
            const redisReply *r = res[i].reply;
            if (res[i].status != DLOCK_OK || r->type != REDIS_REPLY_ARRAY ||
                r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
                r->element[1]->type != REDIS_REPLY_INTEGER ||
                strcmp(r->element[0]->str, "hash") == 0 ||
                strcmp(r->element[0]->str, "none") == 0)
                continue;
            snprintf(type, sizeof type, "%s", r->element[0]->str);
            sem = r->element[1]->integer == 1;
        }
        dlock__results_clear(res, c->ns.n);
        free(keys);
    }
    if (type[0] != '\0' && !sem)
        return dlock__foreign_error(c, "lock", name, type);
    return dlock__set_error(c, DLOCK_EINVAL,
                            "acquire %s: the name is a semaphore, not a lock "
                            "(the servers keep it for 7 days after its last "
                            "use)",
                            name);
}
