/*
 * slot.c - the time slot of `dlock run --once-per / --slot` and its
 * done-marker (a lock under the markers' key prefix, never released).
 */
#include <stdlib.h>

#include "cli.h"

/* Work out the slot of this run, by the wall clock now: the slot a run is
 * for is the one it was started in, however long it then waits. */
void cli_slot_init(const struct cli *o, struct slot *sl)
{
    if (o->slot != NULL) {
        sl->name = o->slot;
        sl->end_wall_ms = -1;
    } else {
        int64_t now = cli_wall_ms(), n = now / o->once_per_ms;

        if (o->once_per_ms % 1000 == 0)
            snprintf(sl->slot, sizeof sl->slot, "%llds-%lld",
                     (long long)(o->once_per_ms / 1000), (long long)n);
        else
            snprintf(sl->slot, sizeof sl->slot, "%lldms-%lld",
                     (long long)o->once_per_ms, (long long)n);
        sl->name = sl->slot;
        sl->end_wall_ms = (n + 1) * o->once_per_ms;
    }
    snprintf(sl->marker, sizeof sl->marker, "%s:%s", o->key, sl->name);
}

/*
 * How long a done-marker left now must last. A clock slot's marker lasts
 * until the slot ends plus one more slot length (at least one slot length
 * from now): a machine whose clock is behind, or whose run started late or
 * waited long for the lock, still finds it. A --slot marker lasts
 * --once-per. A marker that outlives its slot costs a Redis key, nothing
 * more: the next slot has another name.
 */
static int64_t slot_marker_ttl(const struct cli *o, const struct slot *sl)
{
    int64_t left;

    if (sl->end_wall_ms < 0)
        return o->once_per_ms;
    left = sl->end_wall_ms - cli_wall_ms();
    return (left > 0 ? left : 0) + o->once_per_ms;
}

/* Is the slot done: does its marker exist? Asked while holding KEY, so
 * that no other run of KEY can be between this check and its own run.
 * Returns 1 (done), 0 (not done) or a library error. */
int cli_slot_done(const struct cli *o, dlock_client *marks,
                  const struct slot *sl)
{
    dlock_info info;
    char ttl[32];
    int rc = dlock_lock_inspect(marks, sl->marker, &info);

    if (rc != DLOCK_OK)
        return rc;
    if (!info.held) {
        cli_verbose(o, "slot %s of \"%s\" is not done yet", sl->name, o->key);
        return 0;
    }
    cli_format_ms(info.ttl_ms < 0 ? 0 : info.ttl_ms, ttl, sizeof ttl);
    cli_verbose(o,
                "slot %s of \"%s\" is done already (done-marker \"%s\", "
                "expires in %s): nothing to do, COMMAND is skipped",
                sl->name, o->key, sl->marker, ttl);
    return 1;
}

/* Leave the slot's done-marker after a run with status 0, still holding
 * KEY. Returns the marker's handle (the caller detaches it, or releases it
 * when the lease of KEY turns out lost), or NULL after saying why: then
 * another machine may run COMMAND again in this slot. */
dlock_lock *cli_slot_mark(const struct cli *o, dlock_client *marks,
                          const struct slot *sl)
{
    dlock_lock *m = NULL;
    int64_t ttl_ms = slot_marker_ttl(o, sl);
    char ttl[32];
    int rc = dlock_lock_acquire(&m, marks, sl->marker, 0, ttl_ms);

    if (rc != DLOCK_OK) {
        if (rc == DLOCK_BUSY)
            cli_verbose(o, "the done-marker \"%s\" exists already", sl->marker);
        else {
            cli_report(marks, "leave the done-marker", sl->marker, rc);
            cli_err("slot %s of \"%s\" is not marked done: another run may "
                    "run COMMAND again in it",
                    sl->name, o->key);
        }
        return NULL;
    }
    cli_format_ms(ttl_ms, ttl, sizeof ttl);
    cli_verbose(o, "left the done-marker \"%s\" for slot %s, for %s",
                sl->marker, sl->name, ttl);
    return m;
}
