/*
 * durability.c - the tool's durability and Sentinel settings: --wait-replicas
 * N, --wait-replicas-timeout SECONDS, --lock-delay SECONDS,
 * --fence-retention SECONDS and --layout hash|string (and their
 * DLOCK_WAIT_REPLICAS, DLOCK_WAIT_REPLICAS_TIMEOUT, DLOCK_LOCK_DELAY,
 * DLOCK_FENCE_RETENTION and DLOCK_LAYOUT variables), and the sentinels'
 * own credentials from DLOCK_SENTINEL_USER
 * and DLOCK_SENTINEL_PASSWORD (never an option: a command line is
 * readable by every user). dlock.c parses with cli_durability_opt() and
 * fills the client options with cli_durability_apply(). Calls util.c.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Parse a replica count (0 to 1000) into *n. 0 or -1. */
static int parse_count(const char *s, int *n)
{
    char *end;
    long v;
    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    v = strtol(s, &end, 10);
    if (*end != '\0' || v < 0 || v > 1000)
        return -1;
    *n = (int)v;
    return 0;
}

/* See cli.h. */
void cli_durability_init(struct cli *o)
{
    o->wait_replicas = -1;
    o->wait_replicas_timeout_ms = -1;
    o->lock_delay_ms = -2;
    o->fence_retention_ms = -1;
    o->layout = -1;
}

/* Parse VALUE (from option or variable NAME) for setting OPT into o.
 * Returns 0, or -1 with *why set. */
static int take(struct cli *o, int opt, const char *value, const char **why)
{
    int64_t ms;
    switch (opt) {
    case CLI_OPT_WAIT_REPLICAS:
        if (parse_count(value, &o->wait_replicas) < 0) {
            *why = "not a number of replicas from 0 to 1000";
            return -1;
        }
        return 0;
    case CLI_OPT_WAIT_REPLICAS_TIMEOUT:
        if (cli_parse_seconds(value, &ms, why) < 0)
            return -1;
        if (ms <= 0) {
            *why = "must be more than 0";
            return -1;
        }
        o->wait_replicas_timeout_ms = ms;
        return 0;
    case CLI_OPT_LOCK_DELAY:
        if (cli_parse_seconds(value, &ms, why) < 0)
            return -1;
        o->lock_delay_ms = ms;
        return 0;
    case CLI_OPT_FENCE_RETENTION:
        if (cli_parse_seconds(value, &ms, why) < 0)
            return -1;
        if (ms != 0 && (ms < 1000 || ms > 10LL * 366 * 24 * 3600 * 1000)) {
            *why = "must be 0 (keep nothing) or 1 second to 10 years";
            return -1;
        }
        o->fence_retention_ms = ms;
        return 0;
    case CLI_OPT_LAYOUT:
        if (strcmp(value, "hash") == 0)
            o->layout = DLOCK_LAYOUT_HASH;
        else if (strcmp(value, "string") == 0)
            o->layout = DLOCK_LAYOUT_STRING;
        else {
            *why = "must be hash or string";
            return -1;
        }
        return 0;
    default:
        *why = "unknown setting";
        return -1;
    }
}

/* See cli.h. */
int cli_durability_opt(struct cli *o, int opt, const char *arg,
                       const char **why)
{
    return take(o, opt, arg, why);
}

/* See cli.h. The options win over the variables. */
int cli_durability_apply(struct cli *o, dlock_options *opts,
                         const char **bad_var, const char **why)
{
    static const struct {
        const char *var;
        int opt;
    } vars[] = {{"DLOCK_WAIT_REPLICAS", CLI_OPT_WAIT_REPLICAS},
                {"DLOCK_WAIT_REPLICAS_TIMEOUT", CLI_OPT_WAIT_REPLICAS_TIMEOUT},
                {"DLOCK_LOCK_DELAY", CLI_OPT_LOCK_DELAY},
                {"DLOCK_FENCE_RETENTION", CLI_OPT_FENCE_RETENTION},
                {"DLOCK_LAYOUT", CLI_OPT_LAYOUT}};
    size_t i;
    const char *v;

    for (i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        int unset = vars[i].opt == CLI_OPT_WAIT_REPLICAS ? o->wait_replicas < 0
                    : vars[i].opt == CLI_OPT_WAIT_REPLICAS_TIMEOUT
                        ? o->wait_replicas_timeout_ms < 0
                    : vars[i].opt == CLI_OPT_FENCE_RETENTION
                        ? o->fence_retention_ms < 0
                    : vars[i].opt == CLI_OPT_LAYOUT ? o->layout < 0
                                                    : o->lock_delay_ms < -1;
        v = getenv(vars[i].var);
        if (!unset || v == NULL || *v == '\0')
            continue;
        if (take(o, vars[i].opt, v, why) < 0) {
            *bad_var = vars[i].var;
            return -1;
        }
    }
    if (o->wait_replicas >= 0)
        opts->wait_replicas = o->wait_replicas;
    if (o->wait_replicas_timeout_ms > 0)
        opts->wait_replicas_timeout_ms = o->wait_replicas_timeout_ms;
    if (o->lock_delay_ms >= 0)
        opts->lock_delay_ms = o->lock_delay_ms;
    if (o->fence_retention_ms >= 0)
        opts->fence_retention_ms = o->fence_retention_ms;
    v = getenv("DLOCK_SENTINEL_USER");
    if (v != NULL && *v != '\0')
        opts->sentinel_username = v;
    v = getenv("DLOCK_SENTINEL_PASSWORD");
    if (v != NULL && *v != '\0')
        opts->sentinel_password = v;
    return 0;
}
