/*
 * shared.c - the tool's semaphores and read-write locks: `dlock run
 * --limit N` / `--shared` (and acquire) take a permit or a read lock
 * instead of the lock, `dlock limit KEY N` changes a semaphore's limit,
 * and `dlock status` shows a semaphore's holders, limit and waiters, or a
 * lock's readers. Beside signals.c in the tool's layers: report.c and
 * util.c below it, the library's dlock.h only.
 */
#include <errno.h>
#include <string.h>

#include "cli.h"

/* The acquire of what O asks for: a permit (--limit), a read lock
 * (--shared) or the lock. */
int cli_acquire_kind(const struct cli *o, dlock_client *c,
                     const dlock_acquire_options *ao, dlock_lock **out)
{
    if (o->limit > 0)
        return dlock_sem_acquire(out, c, o->key, o->limit, ao);
    if (o->shared)
        return dlock_rw_acquire_shared(
            out, c, o->key, o->prefer_readers ? DLOCK_RW_PREFER_READERS : 0,
            ao);
    return dlock_lock_acquire_ex(out, c, o->key, ao);
}

/* Why a permit or read lease was lost, into BUF (see run.c's
 * lost_reason for the lock). */
void cli_shared_lost_reason(const struct cli *o, dlock_client *c, char *buf,
                            size_t len)
{
    dlock_shared_info info;
    int rc = dlock_shared_inspect(c, o->key, &info, NULL, 0);
    if (rc != DLOCK_OK)
        snprintf(buf, len, "renewals failed: %s", dlock_errmsg(c));
    else
        snprintf(buf, len,
                 "its lease ran out or was taken away; %lld %s hold%s it now",
                 (long long)info.holders,
                 o->limit > 0 ? "permit holders" : "readers",
                 info.holders == 1 ? "s" : "");
}

/* `dlock limit KEY N`: set semaphore KEY's limit. */
int cli_cmd_limit(const struct cli *o, dlock_client *c)
{
    int64_t old = 0;
    int rc = dlock_sem_set_limit(c, o->key, o->limit, &old);
    if (rc != DLOCK_OK) {
        cli_report(c, "limit", o->key, rc);
        return cli_exit_for(o, rc);
    }
    if (old == 0)
        cli_verbose(o, "semaphore \"%s\" made with limit %lld", o->key,
                    (long long)o->limit);
    else
        cli_verbose(o, "semaphore \"%s\": limit %lld (was %lld)", o->key,
                    (long long)o->limit, (long long)old);
    return 0;
}

/* Print a semaphore's status (text or JSON); the holders listed are at
 * most 64. */
static void print_sem(const struct cli *o, const dlock_shared_info *info,
                      const dlock_holder *hs)
{
    char ttl[32];
    size_t i;
    if (o->json) {
        fputs("{\"key\":", stdout);
        cli_json_string(stdout, o->key);
        printf(",\"kind\":\"semaphore\",\"limit\":%lld,\"holders\":%lld,"
               "\"waiters\":%lld,\"token\":%llu,\"permits\":[",
               (long long)info->limit, (long long)info->holders,
               (long long)info->waiters, (unsigned long long)info->last_token);
        for (i = 0; i < info->listed; i++) {
            printf("%s{\"owner\":", i ? "," : "");
            cli_json_string(stdout, hs[i].owner);
            printf(",\"ttl_ms\":%lld,\"token\":%llu}", (long long)hs[i].ttl_ms,
                   (unsigned long long)hs[i].token);
        }
        fputs("]}\n", stdout);
        return;
    }
    printf("key:      %s\n", o->key);
    printf("kind:     semaphore\n");
    printf("limit:    %lld\n", (long long)info->limit);
    printf("holders:  %lld\n", (long long)info->holders);
    for (i = 0; i < info->listed; i++) {
        cli_format_ms(hs[i].ttl_ms, ttl, sizeof ttl);
        printf("permit:   %s token %llu ttl %s\n", hs[i].owner,
               (unsigned long long)hs[i].token, ttl);
    }
    printf("waiters:  %lld queued (spin waiters are not counted)\n",
           (long long)info->waiters);
    printf("token:    %llu\n", (unsigned long long)info->last_token);
}

/* `dlock status` for a semaphore: printed, *done = 1. For a lock with
 * readers, the readers are printed after the lock's own status by
 * cli_shared_readers(). Returns 0 or an exit status. */
int cli_shared_status(const struct cli *o, dlock_client *c, int *done)
{
    dlock_shared_info info;
    dlock_holder hs[64];
    int rc = dlock_shared_inspect(c, o->key, &info, hs, 64);

    *done = 0;
    if (rc != DLOCK_OK || info.kind != DLOCK_KIND_SEMAPHORE)
        return 0; /* the lock's status says what went wrong */
    *done = 1;
    print_sem(o, &info, hs);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_err("writing to stdout: %s", strerror(errno));
        return 74;
    }
    return 0;
}

/* The text status lines of a read-write lock's readers (none when no
 * reader holds KEY and no writer waits). */
void cli_shared_readers(const struct cli *o, dlock_client *c)
{
    dlock_shared_info info;
    dlock_holder hs[64];
    char ttl[32];
    size_t i;
    if (dlock_shared_inspect(c, o->key, &info, hs, 64) != DLOCK_OK ||
        (info.holders == 0 && info.writer_waiting_ms == 0))
        return;
    printf("readers:  %lld\n", (long long)info.holders);
    for (i = 0; i < info.listed; i++) {
        cli_format_ms(hs[i].ttl_ms, ttl, sizeof ttl);
        printf("reader:   %s token %llu ttl %s\n", hs[i].owner,
               (unsigned long long)hs[i].token, ttl);
    }
    if (info.writer_waiting_ms > 0) {
        cli_format_ms(info.writer_waiting_ms, ttl, sizeof ttl);
        printf("writer:   waiting (new readers kept out for %s)\n", ttl);
    }
}

/* How many readers hold lock KEY (0 when none, or KEY is unused); -1
 * when the servers could not say. */
int64_t cli_shared_reader_count(const struct cli *o, dlock_client *c)
{
    dlock_shared_info info;
    if (dlock_shared_inspect(c, o->key, &info, NULL, 0) != DLOCK_OK)
        return -1;
    return info.kind == DLOCK_KIND_LOCK ? info.holders : 0;
}
