/*
 * commands.c - the small subcommands of the dlock tool: `status` (what the
 * servers know about a lock), and `acquire`, `release` and `extend`, which
 * let a shell script hold a lock across several commands without renewal.
 * dlock.c parses the command line and calls these; they use report.c for
 * messages and exit statuses, signals.c for an acquire that a signal can
 * interrupt, and util.c for formatting.
 */
#include <errno.h>
#include <string.h>

#include "cli.h"

/* Cut the next line off *p (in place) and return it; NULL at the end. */
static char *take_line(char **p)
{
    char *line = *p, *nl;
    if (*line == '\0')
        return NULL;
    nl = strchr(line, '\n');
    if (nl != NULL) {
        *nl = '\0';
        *p = nl + 1;
    } else {
        *p = line + strlen(line);
    }
    return line;
}

/* A count for JSON: the number, or null when unknown (< 0). */
static void json_count(int64_t n)
{
    if (n >= 0)
        printf("%lld", (long long)n);
    else
        fputs("null", stdout);
}

/* `dlock status --json`: info's fields (readers: a read-write lock's
 * readers when not held exclusively), the topology's lines and the
 * check's warnings (topo, checks: one per line; cut up in place), as one
 * JSON object on stdout. */
static void status_json(const struct cli *o, const dlock_info *info,
                        int64_t readers, char *topo, char *checks)
{
    char *line, *next;

    fputs("{\"key\":", stdout);
    cli_json_string(stdout, o->key);
    printf(",\"held\":%s,\"owner\":", info->held ? "true" : "false");
    if (info->held)
        cli_json_string(stdout, info->owner);
    else
        fputs("null", stdout);
    printf(",\"reentry\":%lld", (long long)(info->held ? info->reentry : 0));
    if (info->held && info->ttl_ms >= 0)
        printf(",\"ttl_ms\":%lld", (long long)info->ttl_ms);
    else
        fputs(",\"ttl_ms\":null", stdout);
    printf(",\"token\":%llu", (unsigned long long)info->last_token);
    fputs(",\"waiters\":", stdout);
    json_count(info->waiters);
    fputs(",\"notify_waiters\":", stdout);
    json_count(info->notify_waiters);
    fputs(",\"fair_queue\":", stdout);
    json_count(info->fair_queue);
    fputs(",\"readers\":", stdout);
    json_count(readers);
    fputs(",\"holder\":", stdout);
    cli_holder_json(stdout, info);
    printf(",\"nodes_holding\":%d,\"nodes\":%zu,\"topology\":[",
           info->nodes_holding, o->nservers);
    for (next = topo; (line = take_line(&next)) != NULL;) {
        if (line != topo)
            fputc(',', stdout);
        cli_json_string(stdout, line);
    }
    fputs("],\"warnings\":[", stdout);
    for (next = checks; (line = take_line(&next)) != NULL;) {
        if (line != checks)
            fputc(',', stdout);
        cli_json_string(stdout, line);
    }
    fputs("]}\n", stdout);
}

/* `dlock status`'s text: info as status_json's, with the library's
 * count of waiters and the semaphore readers (cli_shared_readers). */
static void status_text(const struct cli *o, dlock_client *c,
                        const dlock_info *info, int64_t readers, char *topo,
                        char *checks)
{
    char ttl[32], *line, *next;
    char who[DLOCK_LABEL_MAX + DLOCK_HOST_MAX + 160];

    printf("key:      %s\n", o->key);
    /* "held by HOST pid PID `COMMAND` for 3m12s, token T, lease 21 s
     * left": the line an operator looks for. */
    cli_describe_holder(info, who, sizeof who);
    if (readers > 0)
        snprintf(who, sizeof who, "held shared by %lld reader%s",
                 (long long)readers, readers == 1 ? "" : "s");
    printf("state:    %s\n", who);
    if (info->held) {
        cli_format_ms(info->ttl_ms < 0 ? 0 : info->ttl_ms, ttl, sizeof ttl);
        printf("owner:    %s\n", info->owner);
        printf("reentry:  %lld\n", (long long)info->reentry);
        printf("ttl:      %s\n", info->ttl_ms < 0 ? "none" : ttl);
    }
    printf("token:    %llu%s\n", (unsigned long long)info->last_token,
           info->last_token == 0 ? " (never granted)" : "");
    /* The library's count: processes waiting by notification plus the
     * fair-mode queue (every `dlock run -w`: fair is the default); -1
     * when the servers could not say, and then 0 would claim what nobody
     * knows. */
    if (info->waiters >= 0)
        printf("waiters:  %lld", (long long)info->waiters);
    else
        printf("waiters:  unknown");
    if (info->fair_queue > 0)
        printf(" (%lld queued in fair mode)", (long long)info->fair_queue);
    putchar('\n');
    cli_shared_readers(o, c);
    if (o->nservers > 1)
        printf("nodes:    %d of %zu hold it\n", info->nodes_holding,
               o->nservers);
    for (next = topo; (line = take_line(&next)) != NULL;)
        printf("topology: %s\n", line);
    for (next = checks; (line = take_line(&next)) != NULL;)
        printf("warning:  %s\n", line);
}

/* `dlock status KEY [--json]`: what the servers know about KEY, and
 * any server setting that weakens the lock (dlock_client_check). The
 * number of waiters is the library's count (dlock_info: processes
 * waiting by notification plus the fair-mode queue), "unknown" when the
 * servers could not say. */
int cli_cmd_status(const struct cli *o, dlock_client *c)
{
    dlock_info info;
    char checks[4096], topo[4096];
    int64_t readers = 0;
    int done, rc = cli_shared_status(o, c, &done);

    if (done || rc != 0)
        return rc; /* a semaphore (shared.c) */
    rc = dlock_lock_inspect(c, o->key, &info);
    if (rc != DLOCK_OK) {
        cli_report(c, "status", o->key, rc);
        return cli_exit_for(o, rc);
    }
    if (dlock_client_check(c, checks, sizeof checks) <= 0)
        checks[0] = '\0';
    if (dlock_client_topology(c, topo, sizeof topo) <= 0)
        topo[0] = '\0';
    /* Not held exclusively may still be held shared (a read-write lock's
     * readers): then it is not free. */
    if (!info.held)
        readers = cli_shared_reader_count(o, c);
    if (o->json)
        status_json(o, &info, readers, topo, checks);
    else
        status_text(o, c, &info, readers, topo, checks);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_err("writing to stdout: %s", strerror(errno));
        return 74;
    }
    return 0;
}

/*
 * `dlock acquire KEY`: take the lock, print the owner handle and exit still
 * holding it (no renewal; the wait is on the event loop, hold.c). If the
 * handle cannot be written the lock is
 * released again, since nobody could release it before the lease ends.
 */
static int acquire_holding(const struct cli *o, dlock_client *c,
                           struct cli_hold *h, void *arg)
{
    (void)arg;
    int signo, rc = cli_hold_acquire(o, c, 0, h, &signo);
    char lease[32];

    if (signo != 0) {
        cli_hold_release(h);
        cli_verbose(o, "interrupted by signal %d", signo);
        return 128 + signo;
    }
    if (rc != DLOCK_OK) {
        if (rc == DLOCK_BUSY || rc == DLOCK_TIMEDOUT)
            cli_say_holder(o, c, dlock_strerror(rc));
        else
            cli_report_msg("acquire", o->key, rc, cli_hold_errmsg(h));
        return cli_exit_for(o, rc);
    }
    if (o->export_env) {
        fputs("DLOCK_KEY=", stdout);
        cli_shell_quote(stdout, o->key);
        fputs("; DLOCK_OWNER=", stdout);
        cli_shell_quote(stdout, cli_hold_owner(h, 0));
        printf("; DLOCK_FENCING_TOKEN=%llu; export DLOCK_KEY DLOCK_OWNER "
               "DLOCK_FENCING_TOKEN\n",
               (unsigned long long)cli_hold_token(h, 0));
    } else {
        printf("%s %llu\n", cli_hold_owner(h, 0),
               (unsigned long long)cli_hold_token(h, 0));
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_err("writing the owner to stdout: %s; releasing \"%s\"",
                strerror(errno), o->key);
        cli_hold_release(h);
        return 74;
    }
    cli_format_ms(o->lease_ms, lease, sizeof lease);
    cli_verbose(o, "holding \"%s\" for %s (not renewed)", o->key, lease);
    /* The lock outlives us: leave it held, unrenewed. */
    cli_hold_detach(h);
    return 0;
}

/* See above (acquire_holding). */
int cli_cmd_acquire(const struct cli *o, dlock_client *c)
{
    return cli_with_hold(o, c, NULL, acquire_holding);
}

/* Adopt KEY as --owner for release and extend. Returns 0 with *lock set,
 * or an exit status after printing why. */
static int adopt(const struct cli *o, dlock_client *c, dlock_lock **lock)
{
    int rc = dlock_lock_adopt(lock, c, o->key, o->owner, 0);

    if (rc == DLOCK_NOT_OWNER) {
        cli_err("\"%s\" is not held by %s: its lease ran out, or it was "
                "released or taken",
                o->key, o->owner);
        return o->lost_code;
    }
    if (rc != DLOCK_OK) {
        cli_report(c, o->cmd_name, o->key, rc);
        return cli_exit_for(o, rc);
    }
    return 0;
}

/* `dlock release KEY --owner OWNER`. */
int cli_cmd_release(const struct cli *o, dlock_client *c)
{
    dlock_lock *lock;
    int rc = adopt(o, c, &lock);

    if (rc != 0)
        return rc;
    rc = dlock_lock_release(lock);
    if (rc == DLOCK_NOT_OWNER || rc == DLOCK_LOST) {
        cli_err("\"%s\": the lease of %s ran out before the release", o->key,
                o->owner);
        return o->lost_code;
    }
    if (rc != DLOCK_OK) {
        cli_report(c, "release", o->key, rc);
        return cli_exit_for(o, rc);
    }
    cli_verbose(o, "released \"%s\"", o->key);
    return 0;
}

/* `dlock extend KEY --owner OWNER -l SECONDS`. */
int cli_cmd_extend(const struct cli *o, dlock_client *c)
{
    dlock_lock *lock;
    char lease[32];
    int rc = adopt(o, c, &lock);

    if (rc != 0)
        return rc;
    /* Whatever the extension's outcome, the lock is not released here. */
    rc = dlock_lock_extend(lock, o->lease_ms);
    dlock_lock_detach(lock);
    if (rc == DLOCK_NOT_OWNER || rc == DLOCK_LOST) {
        cli_err("\"%s\": the lease of %s ran out before the extension", o->key,
                o->owner);
        return o->lost_code;
    }
    if (rc != DLOCK_OK) {
        cli_report(c, "extend", o->key, rc);
        return cli_exit_for(o, rc);
    }
    cli_format_ms(o->lease_ms, lease, sizeof lease);
    cli_verbose(o, "extended \"%s\": lease ends in %s", o->key, lease);
    return 0;
}
