/*
 * chancheck.c - whether the server lets this client's user use the
 * lock's pub/sub channels. Redis 7 creates ACL users without channel
 * permission (acl-pubsub-default resetchannels): the release script's
 * PUBLISH and the waiters' SUBSCRIBE are then refused with NOPERM. The
 * lock still works (release.lua catches the refusal; waiters poll), but
 * slower and with more requests, so dlock_client_check() names it and
 * the ACL rule that fixes it.
 */
#include <stdio.h>
#include <string.h>

#include "api/chancheck.h"
#include "io/conn.h"

/* See chancheck.h. */
int dlock__check_channels(dlock_client *c, dlock__node *nd, char *out,
                          size_t len)
{
    const char *host = dlock__node_name(nd);
    int64_t deadline = dlock__now_ms() + c->opts.command_timeout_ms;
    char chan[DLOCK_PREFIX_MAX + 16], err[DLOCK__ERRLEN];
    const char *argv[3] = {"PUBLISH", chan, ""};
    redisReply *r = NULL;
    dlock__conn *conn = NULL;
    int rc, refused = 0;

    snprintf(chan, sizeof chan, "%s:check", c->key_prefix);
    rc = dlock__node_take(&c->ns, nd, &conn, deadline, err, sizeof err);
    if (rc == DLOCK_OK)
        rc = dlock__conn_append_argv(conn, 3, argv, NULL);
    if (rc == DLOCK_OK)
        rc = dlock__conn_roundtrip(conn, 1, &r, deadline, -1, err, sizeof err);
    if (conn != NULL)
        dlock__node_give(&c->ns, nd, conn, rc == DLOCK_OK);
    if (rc == DLOCK_OK) {
        atomic_fetch_add(&c->stats.requests, 1);
        refused =
            r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOPERM", 6) == 0;
        freeReplyObject(r);
    }
    if (!refused)
        return 0;
    snprintf(out, len,
             "%s: NOPERM: this user may not use the lock's pub/sub channels "
             "(Redis 7 gives new ACL users none): releases are not "
             "announced and waiters poll (slower, more requests); allow "
             "them with the ACL rule &%s:* (or allchannels)",
             host, c->key_prefix);
    return 1;
}
