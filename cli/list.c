/*
 * list.c - `dlock list [PATTERN] [--json]`: every held lock whose name
 * matches PATTERN (a Redis glob, default *), one line each: the name and
 * "held by HOST pid PID `COMMAND` for 3m12s, token T, lease 21 s left"
 * (holder.c); with --json one JSON object per line (kind, name, owner,
 * reentry, ttl_ms, token, fair_queue, holder, nodes_holding). Calls
 * include/dlock.h (dlock_list), holder.c and report.c.
 */
#include <errno.h>
#include <string.h>

#include "cli.h"

/* Print one entry; dlock_list's callback. */
static int print_entry(const dlock_list_entry *e, void *ud)
{
    const struct cli *o = ud;
    const dlock_info *in = &e->info;
    char who[DLOCK_LABEL_MAX + DLOCK_HOST_MAX + 160], name[DLOCK_NAME_MAX + 1];

    if (o->json) {
        fputs("{\"kind\":", stdout);
        cli_json_string(stdout, e->kind);
        fputs(",\"name\":", stdout);
        cli_json_string(stdout, e->name);
        fputs(",\"owner\":", stdout);
        cli_json_string(stdout, in->owner);
        printf(",\"reentry\":%lld,\"ttl_ms\":%lld,\"token\":%llu",
               (long long)in->reentry, (long long)in->ttl_ms,
               (unsigned long long)in->last_token);
        if (in->waiters >= 0)
            printf(",\"fair_queue\":%lld", (long long)in->waiters);
        else
            fputs(",\"fair_queue\":null", stdout);
        fputs(",\"holder\":", stdout);
        cli_holder_json(stdout, in);
        printf(",\"nodes_holding\":%d}\n", in->nodes_holding);
    } else {
        cli_printable(e->name, name, sizeof name);
        cli_describe_holder(in, who, sizeof who);
        if (in->waiters > 0)
            printf("%s  %s, %lld queued in fair mode\n", name, who,
                   (long long)in->waiters);
        else
            printf("%s  %s\n", name, who);
    }
    return ferror(stdout) ? 1 : 0;
}

/* See cli.h. Exit 0 also when nothing is held (nothing printed). */
int cli_cmd_list(const struct cli *o, dlock_client *c)
{
    int n = dlock_list(c, o->key, print_entry, (void *)o);

    if (n < 0) {
        cli_report(c, "list", o->key, n);
        return cli_exit_for(o, n);
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_err("writing to stdout: %s", strerror(errno));
        return 74;
    }
    cli_verbose(o, "%d held lock%s match \"%s\"", n, n == 1 ? "" : "s", o->key);
    return 0;
}
