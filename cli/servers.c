/*
 * servers.c - the server list of the command line: -s URL appended,
 * DLOCK_SERVERS or the default when none was given, a cluster's URL.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

/* Append a copy of URL to the server list (args.c masks its password in
 * argv once it is copied).
 * Returns 0, or -1 when out of memory. */
int cli_add_server(struct cli *o, char *url)
{
    char **grown = realloc(o->servers, (o->nservers + 1) * sizeof *grown);

    if (grown == NULL)
        return -1;
    o->servers = grown;
    o->servers[o->nservers] = strdup(url);
    if (o->servers[o->nservers] == NULL)
        return -1;
    o->nservers++;
    return 0;
}

/* See cli.h. */
int cli_is_cluster_url(const char *s)
{
    s += strspn(s, " \t");
    return strncasecmp(s, "redis+cluster://", 16) == 0 ||
           strncasecmp(s, "rediss+cluster://", 17) == 0;
}

/*
 * Fill the server list from DLOCK_SERVERS (comma-separated, blanks around
 * entries ignored) or, when it is not set, the default. Set but naming no
 * server ("", ",", " ") is a mistake, not a request for localhost. Returns
 * 0, or an exit status after printing why.
 */
int cli_default_servers(struct cli *o)
{
    const char *env = getenv("DLOCK_SERVERS");
    char *copy, *save = NULL, *tok;
    int rc = 0;

    if (env == NULL) {
        o->servers_from = "default";
        rc = cli_add_server(o, (char *)CLI_DEFAULT_SERVER);
    } else if (strspn(env, " \t,") == strlen(env)) {
        return cli_usage_error(o->cmd_name,
                               "DLOCK_SERVERS is set but names no server "
                               "(unset it for %s, or give -s URL)",
                               CLI_DEFAULT_SERVER);
    } else if (cli_is_cluster_url(env)) {
        /* A cluster's seeds are one URL: its commas are not a list. */
        copy = strdup(env + strspn(env, " \t"));
        if (copy == NULL)
            goto oom;
        copy[strcspn(copy, " \t")] = '\0';
        rc = cli_add_server(o, copy);
        free(copy);
        o->servers_from = "DLOCK_SERVERS";
    } else {
        copy = strdup(env);
        if (copy == NULL)
            goto oom;
        for (tok = strtok_r(copy, ",", &save); tok && rc == 0;
             tok = strtok_r(NULL, ",", &save)) {
            char *end;

            tok += strspn(tok, " \t");
            end = tok + strlen(tok);
            while (end > tok && (end[-1] == ' ' || end[-1] == '\t'))
                *--end = '\0';
            if (*tok != '\0')
                rc = cli_add_server(o, tok);
        }
        free(copy);
        o->servers_from = "DLOCK_SERVERS";
    }
    if (rc == 0)
        return 0;
oom:
    cli_err("out of memory");
    return CLI_EX_OSERR;
}
