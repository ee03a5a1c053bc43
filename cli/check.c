/*
 * check.c - `dlock check KEY [TOKEN]`: exit 0 when TOKEN is the fencing
 * token of KEY's current hold, the lost code otherwise, so that a
 * resource outside Redis (a deploy hook, a cron job's last step, another
 * machine) can verify a caller's token before acting. TOKEN defaults to
 * $DLOCK_FENCING_TOKEN, which `dlock run` gives COMMAND. Calls
 * include/dlock.h (dlock_lock_check) and report.c.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

#include "cli.h"

/* See cli.h. A token: 1 to 2^53 in decimal, nothing else. */
int cli_parse_token(const char *s, uint64_t *token)
{
    uint64_t v = 0;
    const char *p = s;

    if (s == NULL || *p == '\0')
        return -1;
    for (; *p; p++) {
        if (!isdigit((unsigned char)*p))
            return -1;
        v = v * 10 + (uint64_t)(*p - '0');
        if (v > (1ULL << 53))
            return -1;
    }
    if (v == 0)
        return -1;
    *token = v;
    return 0;
}

/* See cli.h. */
int cli_cmd_check(const struct cli *o, dlock_client *c)
{
    int rc = dlock_lock_check(c, o->key, o->token);

    switch (rc) {
    case DLOCK_OK:
        cli_verbose(o, "token %llu holds \"%s\"", (unsigned long long)o->token,
                    o->key);
        return 0;
    case DLOCK_STALE:
    case DLOCK_NOT_OWNER:
        /* The expected "no": said with -v only, like a busy lock. */
        cli_verbose(o, "%s", dlock_errmsg(c));
        return o->lost_code;
    default:
        cli_report(c, "check", o->key, rc);
        return cli_exit_for(o, rc);
    }
}
