/*
 * report.c - what the dlock tool says and how it exits: messages on stderr
 * ("dlock: ...", and the -v ones), the report of a failed library call, and
 * the mapping of library status codes to exit statuses. Every other file of
 * the tool calls down into this one; it calls only include/dlock.h.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* Print "dlock: MESSAGE" on stderr. */
void cli_err(const char *fmt, ...)
{
    va_list ap;

    fputs("dlock: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* Print "dlock: MESSAGE" on stderr when -v was given. */
void cli_verbose(const struct cli *o, const char *fmt, ...)
{
    va_list ap;

    if (!o->verbose)
        return;
    fputs("dlock: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/*
 * The exit status for a library status code: the conflict code when the
 * lock is held by someone else, the lost code when our hold is gone, and
 * sysexits(3) values for the rest.
 */
int cli_exit_for(const struct cli *o, int rc)
{
    switch (rc) {
    case DLOCK_OK:
        return 0;
    case DLOCK_BUSY:
    case DLOCK_TIMEDOUT:
    case DLOCK_LOCK_DELAY: /* not obtainable now: a conflict, said why */
        return o->conflict_code;
    case DLOCK_NOT_REPLICATED: /* the replicas cannot promise it */
        return CLI_EX_UNAVAILABLE;
    case DLOCK_NOT_OWNER:
    case DLOCK_LOST:
        return o->lost_code;
    case DLOCK_EIO:
    case DLOCK_ETIMEDOUT:
        /* cron(8) and systemd start jobs without the login shell's
         * environment: a DLOCK_SERVERS set there is missing, and the
         * default server is tried instead. Say so. */
        if (o->servers_from != NULL && strcmp(o->servers_from, "default") == 0)
            cli_err("no -s was given and DLOCK_SERVERS is not set, so the "
                    "default server %s was used (cron and systemd do not "
                    "read a login shell's environment)",
                    CLI_DEFAULT_SERVER);
        return CLI_EX_UNAVAILABLE;
    case DLOCK_NO_QUORUM:
    case DLOCK_EPROTO:
    case DLOCK_ESERVER:
    case DLOCK_ETLS:
        return CLI_EX_UNAVAILABLE;
    case DLOCK_EAUTH:
    case DLOCK_EREFUSED:
        /* Both are the server saying no whatever we retry (credentials,
         * or an ACL, a read-only replica, a disabled command): EX_NOPERM,
         * so that a wrapper that retries on 69 stops. The message says
         * which. */
        return CLI_EX_NOPERM;
    case DLOCK_EINVAL:
        return CLI_EX_USAGE;
    case DLOCK_ENOMEM:
        return CLI_EX_OSERR;
    default:
        return CLI_EX_SOFTWARE;
    }
}

/* Print why a library call on KEY failed: "dlock: "KEY": text (details)",
 * the details naming the operation; without details "dlock: WHAT "KEY":
 * text". */
void cli_report(dlock_client *c, const char *what, const char *key, int rc)
{
    cli_report_msg(what, key, rc, c != NULL ? dlock_errmsg(c) : "");
}

/* cli_report with the details given (an event-loop operation's message:
 * dlock_op_errmsg). */
void cli_report_msg(const char *what, const char *key, int rc,
                    const char *detail)
{
    if (detail != NULL && *detail != '\0')
        cli_err("\"%s\": %s (%s)", key, dlock_strerror(rc), detail);
    else
        cli_err("%s \"%s\": %s", what, key, dlock_strerror(rc));
}
