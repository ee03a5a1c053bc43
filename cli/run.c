/*
 * run.c - `dlock run KEY -- COMMAND`: run COMMAND while holding KEY.
 *
 * The lock is taken on libdlock's event loop (hold.c), which renews the
 * lease every third of it while COMMAND runs and calls back when the lease
 * is found lost: the main loop's ppoll watches the loop's descriptor too
 * and runs its process (with several servers, Sentinel or Cluster, the
 * library's watchdog thread renews it instead: hold.c's blocking path). COMMAND runs as a job in a process group of its own (job.c);
 * signals dlock receives are forwarded to the whole group, and the lock is
 * released when no process of the group is left. The main loop sleeps in
 * ppoll() on the self-pipe of signals.c, with the handled signals unblocked
 * only there (and the event loop's fd beside it), and reaps with waitpid(WNOHANG) after every wake-up. When the
 * lease is lost, the --on-lost policy applies to the group: SIGTERM then
 * SIGKILL after the grace period, SIGKILL at once, or nothing; dlock then
 * exits with the lost code whatever COMMAND's status, because COMMAND's
 * work was not protected by the lock all along.
 *
 * Several KEYs (`dlock run A B -- COMMAND`) are taken all or nothing in
 * one global order (dlock_lock_acquire_all), each renewed and watched for
 * loss as one; COMMAND gets every token (DLOCK_FENCING_TOKENS).
 *
 * For cron on several machines: --max-hold treats the lease as lost once
 * the lock was held that long; --min-hold keeps the lock after a short
 * COMMAND until that long after it started; --once-per / --slot run
 * COMMAND once per time slot: holding the lock, dlock looks for the slot's
 * done-marker (a lock of its own, in a second client whose key prefix ends
 * in ":done", left with a lease that outlasts the slot and never released)
 * and skips COMMAND when it exists, and leaves it after a run with status
 * 0 before releasing the lock.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "cli.h"

extern char **environ;

/* The signal's name without "SIG" ("TERM"), for messages. */
static const char *sig_name(int sig)
{
    const char *n = sigabbrev_np(sig);

    return n != NULL ? n : "?";
}

/*
 * COMMAND's environment: ours without any DLOCK_KEY, DLOCK_FENCING_TOKEN
 * or DLOCK_FENCING_TOKENS, plus DLOCK_KEY and DLOCK_FENCING_TOKEN for the
 * first KEY and DLOCK_FENCING_TOKENS, every KEY's token in the order the
 * KEYs were given, separated by spaces. Built before fork because the
 * child may only make async-signal-safe calls. Returns NULL when out of
 * memory. Free with cli_env_free(env, ENV_SET).
 */
#define ENV_SET 3
static char **child_env(const struct cli *o, const struct cli_hold *h)
{
    char *set[ENV_SET] = {NULL};
    size_t len;
    FILE *f = open_memstream(&set[0], &len);

    if (f != NULL) {
        fputs("DLOCK_FENCING_TOKENS=", f);
        for (size_t k = 0; k < o->nkeys; k++)
            fprintf(f, "%s%llu", k > 0 ? " " : "",
                    (unsigned long long)cli_hold_token(h, k));
        if (fclose(f) != 0) {
            free(set[0]);
            set[0] = NULL;
        }
    }
    set[1] = cli_strf("DLOCK_KEY=%s", o->key);
    set[2] = cli_strf("DLOCK_FENCING_TOKEN=%llu",
                      (unsigned long long)cli_hold_token(h, 0));
    return cli_env_with(set, ENV_SET);
}

/* The first of KEY's locks that is not held as far as this process knows
 * (the one the lost callback was about), or the first lock. */
static size_t lost_one(const struct cli_hold *h)
{
    size_t which;

    cli_hold_status(h, &which);
    return which;
}

/* State of the wait for the job. */
struct run_state {
    struct cli_job job;
    struct cli_hold *hold; /* KEY's locks; none once released early
                              (--max-hold, ignore) */
    int64_t kill_at;       /* when to send SIGKILL after SIGTERM, -1: not due */
    int64_t max_at;        /* when --max-hold is reached, -1: no --max-hold */
    int lost;              /* the lost policy was applied */
    int max_hold;          /* ... because --max-hold was reached */
    int stopped;           /* a signal that ends --min-hold came (SIGINT...) */
    int said_left;         /* -v said that COMMAND's group outlives it */
};

/* Does signal S end the --min-hold hold-on? The ones that ask to stop
 * (SIGINT, SIGTERM, SIGHUP, SIGQUIT) do, SIGUSR1 and SIGUSR2 do not: they
 * are only passed on to the job. */
static int ends_hold(int s)
{
    return s != SIGUSR1 && s != SIGUSR2;
}

/*
 * Why the lease was lost, into BUF, as the library recorded it
 * (dlock_lock_lost_reason): renewals failed (the servers out of reach or
 * refusing, until the validity ran out: the last failure is named), or
 * the servers said the lock is no longer ours. Only in that last case are
 * they asked (dlock_lock_inspect, after the policy's signal went out)
 * whether the key is gone or held by another owner now: they answered a
 * moment ago, so that is one quick round trip. A server that does not
 * answer is not asked again.
 */
static void lost_reason(const struct cli *o, dlock_client *c,
                        const struct cli_hold *h, size_t i, char *buf,
                        size_t len)
{
    dlock_info info;
    const char *why;
    int code;

    if (o->limit > 0 || o->shared) {
        cli_shared_lost_reason(o, c, buf, len);
        return;
    }
    code = cli_hold_lost_reason(h, i, &why);
    if (code == DLOCK_NOT_OWNER &&
        dlock_lock_inspect(c, cli_hold_name(h, i), &info) == 0) {
        if (!info.held) {
            snprintf(buf, len,
                     "the lock is free now: it expired or was deleted");
            return;
        }
        if (strcmp(info.owner, cli_hold_owner(h, i)) != 0) {
            snprintf(buf, len, "it is held by another owner now, %s",
                     info.owner);
            return;
        }
    }
    snprintf(buf, len, "%s", why);
}

/* Apply the --on-lost policy, once, when the watchdog reported the loss:
 * to every process of the job first, then say why. */
static void on_lease_lost(const struct cli *o, dlock_client *c,
                          struct run_state *rs, size_t i)
{
    char grace[32], why[512];
    unsigned long long token = cli_hold_token(rs->hold, i);
    const char *key = cli_hold_name(rs->hold, i);
    long pgid = (long)rs->job.pid;

    rs->lost = 1;
    if (o->on_lost == ON_LOST_TERM) {
        cli_job_signal(&rs->job, SIGTERM);
        rs->kill_at = cli_now_ms() + o->grace_ms;
    } else if (o->on_lost == ON_LOST_KILL) {
        cli_job_signal(&rs->job, SIGKILL);
    }
    lost_reason(o, c, rs->hold, i, why, sizeof why);
    switch (o->on_lost) {
    case ON_LOST_TERM:
        cli_format_ms(o->grace_ms, grace, sizeof grace);
        cli_err("the lease on \"%s\" (fencing token %llu) was lost (%s): "
                "sent SIGTERM to COMMAND's process group %ld, SIGKILL in %s",
                key, token, why, pgid, grace);
        break;
    case ON_LOST_KILL:
        cli_err("the lease on \"%s\" (fencing token %llu) was lost (%s): "
                "sent SIGKILL to COMMAND's process group %ld",
                key, token, why, pgid);
        break;
    case ON_LOST_IGNORE:
        cli_err("the lease on \"%s\" (fencing token %llu) was lost (%s): "
                "COMMAND (process group %ld) goes on without the lock "
                "(--on-lost ignore)",
                key, token, why, pgid);
        break;
    }
}

/*
 * --max-hold was reached: treat the lease as lost. The --on-lost policy
 * applies to the job as for a real loss; with term and kill the lock stays
 * held (and renewed) until no process of the job is left, at most the
 * grace period after SIGTERM, so that nothing of the job still runs when
 * the next holder gets it; with ignore the job goes on, so the lock is
 * released now: holding it while the job runs is what --max-hold forbids.
 */
static void on_max_hold(const struct cli *o, dlock_client *c,
                        struct run_state *rs)
{
    char held[32], grace[32];
    unsigned long long token = cli_hold_token(rs->hold, 0);
    long pgid = (long)rs->job.pid;
    int rc;

    rs->lost = 1;
    rs->max_hold = 1;
    cli_format_ms(o->max_hold_ms, held, sizeof held);
    switch (o->on_lost) {
    case ON_LOST_TERM:
        cli_job_signal(&rs->job, SIGTERM);
        rs->kill_at = cli_now_ms() + o->grace_ms;
        cli_format_ms(o->grace_ms, grace, sizeof grace);
        cli_err("max-hold reached: \"%s\" (fencing token %llu) was held for "
                "the --max-hold of %s: treating the lease as lost: sent "
                "SIGTERM to COMMAND's process group %ld, SIGKILL in %s; the "
                "lock is released once the group is gone",
                o->key, token, held, pgid, grace);
        break;
    case ON_LOST_KILL:
        cli_job_signal(&rs->job, SIGKILL);
        cli_err("max-hold reached: \"%s\" (fencing token %llu) was held for "
                "the --max-hold of %s: treating the lease as lost: sent "
                "SIGKILL to COMMAND's process group %ld",
                o->key, token, held, pgid);
        break;
    case ON_LOST_IGNORE:
        rc = cli_hold_release(rs->hold);
        if (rc != DLOCK_OK)
            cli_report(c, "release", o->key, rc);
        cli_err("max-hold reached: \"%s\" (fencing token %llu) was held for "
                "the --max-hold of %s: released it; COMMAND (process group "
                "%ld) goes on without the lock (--on-lost ignore)",
                o->key, token, held, pgid);
        break;
    }
}

/*
 * Wait until no process of the job is left, forwarding signals to its
 * group and applying the lost policy (on a lost lease, or when --max-hold
 * is reached). After COMMAND has exited, processes it left in its group
 * are waited for too (the lock still covers them); those that are not our
 * children may end without a SIGCHLD to us, so the group is then looked at
 * every 100 ms as well. Returns 0 with rs->job.status set, or -1 when
 * waitpid failed.
 */
static int wait_job(const struct cli *o, dlock_client *c, struct run_state *rs)
{
    sigset_t waitmask;
    struct cli_job *j = &rs->job;
    int s;

    cli_signals_wait_mask(&waitmask);
    for (;;) {
        int64_t left = -1, now = cli_now_ms();

        if (rs->kill_at >= 0)
            left = rs->kill_at > now ? rs->kill_at - now : 0;
        if (rs->max_at >= 0 && !rs->lost) {
            int64_t m = rs->max_at > now ? rs->max_at - now : 0;

            if (left < 0 || m < left)
                left = m;
        }
        if (j->exited && (left < 0 || left > 100))
            left = 100;
        if (cli_hold_sleep(rs->hold, &waitmask, left) < 0)
            return -1;

        while ((s = cli_signals_take()) != 0) {
            if (ends_hold(s))
                rs->stopped = 1;
            if (cli_job_signal(j, s))
                cli_verbose(o,
                            "forwarded SIG%s to COMMAND's process group "
                            "%ld",
                            sig_name(s), (long)j->pid);
        }
        if (!rs->lost && cli_lost_seen())
            on_lease_lost(o, c, rs, lost_one(rs->hold));
        if (!rs->lost && rs->max_at >= 0 && cli_now_ms() >= rs->max_at)
            on_max_hold(o, c, rs);
        if (rs->kill_at >= 0 && cli_now_ms() >= rs->kill_at) {
            if (cli_job_signal(j, SIGKILL))
                cli_err("COMMAND's process group %ld still runs after the "
                        "grace period: sending SIGKILL",
                        (long)j->pid);
            rs->kill_at = -1;
        }

        if (cli_job_reap(o, j) < 0)
            return -1;
        if (j->exited && !cli_job_alive(j))
            return 0;
        if (j->exited && !rs->said_left) {
            rs->said_left = 1;
            cli_verbose(o,
                        "COMMAND exited; waiting for the processes left "
                        "in its process group %ld",
                        (long)j->pid);
        }
    }
}

/*
 * --min-hold: COMMAND's job is over before UNTIL; keep the lock (the
 * watchdog goes on renewing it) until then. SIGINT, SIGTERM, SIGHUP or
 * SIGQUIT end the hold-on early, also when they came while the job ran
 * (it may have been over already when one came, and it went to nobody):
 * there is then no hold-on. The lease found lost ends it too. Returns 0,
 * or -1 when ppoll or waitpid failed.
 */
static int hold_on(const struct cli *o, struct run_state *rs, int64_t until)
{
    sigset_t waitmask;
    char left_s[32];
    int64_t now = cli_now_ms();
    int s;

    if (now >= until)
        return 0;
    if (rs->stopped) {
        cli_verbose(o, "no --min-hold hold-on: a signal asked to stop");
        return 0;
    }
    cli_format_ms(until - now, left_s, sizeof left_s);
    cli_verbose(o, "holding \"%s\" for %s more (--min-hold)", o->key, left_s);
    cli_signals_wait_mask(&waitmask);
    while ((now = cli_now_ms()) < until) {
        if (cli_hold_sleep(rs->hold, &waitmask, until - now) < 0)
            return -1;
        /* Children that left the job's group may still end: reap them. */
        if (cli_job_reap(o, &rs->job) < 0)
            return -1;
        while ((s = cli_signals_take()) != 0 && !ends_hold(s))
            ;
        if (s != 0) {
            cli_verbose(o,
                        "SIG%s during the --min-hold hold-on: releasing "
                        "\"%s\" now",
                        sig_name(s), o->key);
            return 0;
        }
        if (cli_lost_seen())
            return 0;
    }
    return 0;
}

/* Release HELD and say how it went: a failure reported, else -v's
 * "released". Returns the release's status. */
static int release_said(const struct cli *o, dlock_client *c,
                        struct cli_hold *held)
{
    int rc = cli_hold_release(held);

    if (rc != DLOCK_OK)
        cli_report(c, "release", o->key, rc);
    else
        cli_verbose(o, "released \"%s\"", o->key);
    return rc;
}

/* run's acquire: the slot of --once-per / --slot worked out (MARKS: the
 * client for done-markers, or NULL), KEY acquired with renewal (*t_acq:
 * when), and the slot found not done. 0 to go on; 1 when the run ends
 * here with exit status *code (a signal during the wait, the lock not
 * obtained, the slot done or not known to be). */
static int run_acquire(const struct cli *o, dlock_client *c,
                       struct cli_hold *held, dlock_client *marks,
                       struct slot *sl, int64_t *t_acq, int *code)
{
    char ends[32];
    int rc, signo;

    memset(sl, 0, sizeof *sl);
    if (marks != NULL) {
        cli_slot_init(o, sl);
        if (sl->end_wall_ms >= 0) {
            cli_format_ms(sl->end_wall_ms - cli_wall_ms(), ends, sizeof ends);
            cli_verbose(o,
                        "slot %s of \"%s\": it ends in %s by this "
                        "machine's clock",
                        sl->name, o->key, ends);
        }
    }
    rc = cli_hold_acquire(o, c, 1, held, &signo);
    *t_acq = cli_now_ms();
    if (signo != 0) {
        cli_hold_release(held);
        cli_verbose(o, "SIG%s while waiting for \"%s\": giving up",
                    sig_name(signo), o->key);
        *code = 128 + signo;
        return 1;
    }
    if (rc != DLOCK_OK) {
        if (rc == DLOCK_BUSY || rc == DLOCK_TIMEDOUT)
            cli_say_holder(o, c, dlock_strerror(rc));
        else
            cli_report_msg("acquire", o->key, rc, cli_hold_errmsg(held));
        *code = cli_exit_for(o, rc);
        return 1;
    }
    if (marks == NULL || (rc = cli_slot_done(o, marks, sl)) == 0)
        return 0;
    if (rc < 0) {
        cli_report(marks, "look for the done-marker", sl->marker, rc);
        cli_err("cannot tell whether slot %s of \"%s\" is done: COMMAND is "
                "not run",
                sl->name, o->key);
    }
    *code = rc < 0 ? cli_exit_for(o, rc) : o->done_code;
    release_said(o, c, held);
    return 1;
}

/* Start COMMAND as rs's job (rs set up: the hold, --max-hold's time from
 * T_ACQ). 0, or -1 with the exit status in *code (the lock released). */
static int run_start(const struct cli *o, dlock_client *c,
                     struct cli_hold *held, struct run_state *rs, int64_t t_acq,
                     int *code)
{
    char **envp = child_env(o, held);
    char lease[32];
    int exec_errno, rc;

    if (envp == NULL) {
        cli_err("out of memory");
        cli_hold_release(held);
        *code = CLI_EX_OSERR;
        return -1;
    }
    memset(rs, 0, sizeof *rs);
    rs->hold = held;
    rs->kill_at = -1;
    rs->max_at = o->max_hold_ms > 0 ? t_acq + o->max_hold_ms : -1;
    rc = cli_job_start(&rs->job, o, envp, &exec_errno);
    cli_env_free(envp, ENV_SET);
    if (rc < 0) {
        if (exec_errno != 0) {
            cli_err("cannot execute '%s': %s", o->command[0],
                    strerror(exec_errno));
            *code =
                exec_errno == ENOENT ? CLI_EX_NOT_FOUND : CLI_EX_CANNOT_EXEC;
        } else {
            cli_err("cannot start '%s': %s", o->command[0], strerror(errno));
            *code = CLI_EX_OSERR;
        }
        release_said(o, c, held);
        return -1;
    }
    cli_format_ms(o->lease_ms, lease, sizeof lease);
    cli_verbose(o,
                "running %s (pid %ld, its own process group%s), lease %s "
                "renewed while it runs",
                o->command[0], (long)rs->job.pid,
                rs->job.tty >= 0 ? ", in the terminal's foreground" : "",
                lease);
    return 0;
}

/* Wait for rs's job (started at T0) to be over: COMMAND's exit status
 * (128+N for signal N) in *code and 0, or -1 with the exit status in
 * *code when waiting failed (the lock released). */
static int run_wait(const struct cli *o, dlock_client *c, struct cli_hold *held,
                    struct run_state *rs, int64_t t0, int *code)
{
    char took[32];
    int st;

    if (wait_job(o, c, rs) < 0) {
        cli_err("waiting for COMMAND (pid %ld): %s", (long)rs->job.pid,
                strerror(errno));
        /* The guard then sends the --on-lost signal to what is left. */
        cli_hold_release(held);
        *code = CLI_EX_OSERR;
        return -1;
    }
    cli_job_end(&rs->job);
    cli_format_ms(cli_now_ms() - t0, took, sizeof took);
    st = rs->job.status;
    if (WIFEXITED(st)) {
        *code = WEXITSTATUS(st);
        cli_verbose(o, "%s exited with status %d after %s", o->command[0],
                    *code, took);
    } else if (WIFSIGNALED(st)) {
        *code = 128 + WTERMSIG(st);
        cli_verbose(o, "%s was killed by SIG%s after %s", o->command[0],
                    sig_name(WTERMSIG(st)), took);
    } else {
        *code = CLI_EX_SOFTWARE;
    }
    return 0;
}

/* After the job: release HELD (rc: the release's status, done by the
 * caller) and settle the exit status from COMMAND's CODE: the lost code
 * when the lease was lost during the job or had run out by the release
 * (the slot's MARKER, if any, then given back), COMMAND's own when only
 * the --min-hold hold-on after it (HELD_ON) was cut short. */
static int run_settle(const struct cli *o, dlock_client *c,
                      const struct run_state *rs, const struct slot *sl,
                      dlock_lock *marker, int rc, int code, int lost_in_job,
                      int held_on)
{
    int lost = cli_lost_seen() || rc == DLOCK_LOST || rc == DLOCK_NOT_OWNER;

    if (!lost_in_job && held_on && lost) {
        /* COMMAND's work was protected all along: only the hold-on after
         * it was cut short. */
        dlock_lock_detach(marker);
        cli_err("the lease on \"%s\" was lost during the --min-hold "
                "hold-on, after COMMAND had finished: another holder may "
                "have taken it sooner than --min-hold",
                o->key);
        return code;
    }
    if (lost) {
        if (!rs->lost)
            cli_err("the lease on \"%s\" ran out before COMMAND finished: "
                    "its work was not protected by the lock all along",
                    o->key);
        if (marker != NULL) {
            /* A run whose lease was lost leaves no marker. */
            dlock_lock_release(marker);
            cli_err("slot %s of \"%s\" is not marked done", sl->name, o->key);
        }
        cli_err("COMMAND's status was %d; exiting with the lost code %d", code,
                o->lost_code);
        return o->lost_code;
    }
    dlock_lock_detach(marker);
    if (rc != DLOCK_OK) {
        cli_report(c, "release", o->key, rc);
        cli_err("the lock stays held until its lease ends");
    } else {
        cli_verbose(o, "released \"%s\"", o->key);
    }
    return code;
}

/* After a job whose --max-hold was reached: release what is left and
 * exit with the lost code (COMMAND's status CODE said). */
static int run_max_held(const struct cli *o, dlock_client *c,
                        struct cli_hold *held, int code)
{
    int rc;

    if (held->n > 0) {
        rc = cli_hold_release(held);
        if (rc != DLOCK_OK && rc != DLOCK_LOST && rc != DLOCK_NOT_OWNER)
            cli_report(c, "release", o->key, rc);
        else
            cli_verbose(o, "released \"%s\"", o->key);
    }
    cli_err("COMMAND's status was %d; exiting with the lost code %d "
            "(max-hold reached)",
            code, o->lost_code);
    return o->lost_code;
}

/*
 * `dlock run` into HELD (cli_run ends it): acquire with renewal, run
 * COMMAND, release. With --once-per
 * (MARKS is then the client for done-markers), first check, holding the
 * lock, that the slot is not done; after a run with status 0, mark it done
 * before releasing. With --min-hold, hold the lock on after a short run;
 * with --max-hold, treat the lease as lost once it was held that long.
 * Returns the exit status for dlock: COMMAND's (128+N for signal N) when it
 * ran and the lease held all along; the lost code when the lease was lost,
 * had run out by the release, or --max-hold was reached; the done code when
 * the slot was done already; the conflict code when the lock was not
 * obtained; 126/127 when COMMAND could not be executed; 128+N when signal N
 * interrupted the wait; a sysexits(3) code for other failures.
 */
static int run_holding(const struct cli *o, dlock_client *c,
                       struct cli_hold *held, void *arg)
{
    dlock_client *marks = arg;
    struct run_state rs;
    struct slot sl;
    dlock_lock *marker = NULL;
    int code, lost_in_job, held_on = 0;
    int64_t t_acq, t0;
    size_t which;

    if (run_acquire(o, c, held, marks, &sl, &t_acq, &code) != 0)
        return code;
    t0 = cli_now_ms();
    if (run_start(o, c, held, &rs, t_acq, &code) < 0 ||
        run_wait(o, c, held, &rs, t0, &code) < 0)
        return code;
    if (rs.max_hold)
        return run_max_held(o, c, held, code);
    /* As far as this machine knows, the lease held until the job was
     * over; the release below asks the servers. */
    lost_in_job = cli_lost_seen() || cli_hold_status(held, &which) != DLOCK_OK;
    if (marks != NULL && code == 0 && !lost_in_job)
        marker = cli_slot_mark(o, marks, &sl);
    else if (marks != NULL)
        cli_verbose(o, "slot %s of \"%s\" is not marked done: %s", sl.name,
                    o->key,
                    lost_in_job ? "the lease was lost" : "COMMAND failed");
    if (o->min_hold_ms > 0 && !lost_in_job) {
        int64_t until = t0 + o->min_hold_ms;

        if (rs.max_at >= 0 && rs.max_at < until)
            until = rs.max_at;
        held_on = !rs.stopped && cli_now_ms() < until;
        if (hold_on(o, &rs, until) < 0)
            cli_err("during the --min-hold hold-on: %s", strerror(errno));
    }
    return run_settle(o, c, &rs, &sl, marker, cli_hold_release(held), code,
                      lost_in_job, held_on);
}

/* See cli.h (and run_holding above). */
int cli_run(struct cli *o, dlock_client *c, dlock_client *marks)
{
    return cli_with_hold(o, c, marks, run_holding);
}
