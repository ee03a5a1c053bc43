/*
 * elect.c - `dlock elect NAME -- COMMAND` and `dlock leader NAME`.
 *
 * elect is a hot standby: it campaigns for NAME (dlock_campaign: the
 * leader holds the lock NAME, renewed by the watchdog), and only once it
 * leads does it start COMMAND, as a job in its own process group
 * (job.c), with the leadership's epoch (its fencing token) and value in
 * the environment. Followers wait in the campaign; when the leader dies
 * its lease runs out and one of them takes over. When the leadership is
 * lost while COMMAND runs, the --on-lost policy applies to the whole group
 * (as for `run`) and dlock exits with the lost code; when COMMAND ends,
 * dlock resigns and exits with COMMAND's status. --ready-file names a file
 * that exists exactly while this process leads: made right after the win
 * (before COMMAND starts) and removed the moment the loss is seen (before
 * the policy's signal) and before resigning.
 *
 * leader prints who leads (dlock_leader); --watch prints a line at once
 * and one for each change (dlock_loop_leader_wait on one server, in the
 * same ppoll as the self-pipe; dlock_leader_wait with a canceler thread
 * on the blocking path), until a signal stops it.
 *
 * The campaign waits, and the leadership is renewed, on libdlock's event
 * loop (hold.c): the main loop's ppoll watches its fd beside the
 * self-pipe. Calls downward only: hold.c, signals.c (the self-pipe, the
 * cancelable wait of `leader --watch`), job.c, report.c, util.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

extern char **environ;

/* COMMAND's environment: ours with DLOCK_KEY, DLOCK_FENCING_TOKEN and
 * DLOCK_LEADER_VALUE set for this leadership (ENV_SET of them). NULL when
 * out of memory. Free with cli_env_free(env, ENV_SET). */
#define ENV_SET 3
static char **leader_env(const struct cli *o, uint64_t epoch)
{
    char *set[ENV_SET] = {
        cli_strf("DLOCK_KEY=%s", o->key),
        cli_strf("DLOCK_FENCING_TOKEN=%llu", (unsigned long long)epoch),
        cli_strf("DLOCK_LEADER_VALUE=%s", o->value != NULL ? o->value : ""),
    };
    return cli_env_with(set, ENV_SET);
}

/* Make the --ready-file: "EPOCH VALUE\n", written to a temporary name
 * and renamed, so that a reader never sees it half-written. 0, or -1
 * after saying why. */
static int ready_make(const struct cli *o, uint64_t epoch)
{
    char *tmp = NULL;
    FILE *f;
    int fd, ok;

    if (o->ready_file == NULL)
        return 0;
    if (asprintf(&tmp, "%s.%ld.tmp", o->ready_file, (long)getpid()) < 0) {
        cli_err("out of memory");
        return -1;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f == NULL) {
        cli_err("--ready-file %s: %s", tmp, strerror(errno));
        if (fd >= 0)
            close(fd);
        free(tmp);
        return -1;
    }
    fprintf(f, "%llu %s\n", (unsigned long long)epoch,
            o->value != NULL ? o->value : "");
    ok = fclose(f) == 0 && rename(tmp, o->ready_file) == 0;
    if (!ok) {
        cli_err("--ready-file %s: %s", o->ready_file, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    return ok ? 0 : -1;
}

/* Remove the --ready-file (once: done tells whether it was). */
static void ready_remove(const struct cli *o, int *done)
{
    if (o->ready_file == NULL || *done)
        return;
    *done = 1;
    if (unlink(o->ready_file) < 0 && errno != ENOENT)
        cli_err("--ready-file %s: cannot remove it: %s", o->ready_file,
                strerror(errno));
}

/* The leadership was lost while COMMAND runs: the ready-file goes first
 * (this process no longer leads), then the --on-lost policy. */
static void on_lost(const struct cli *o, struct cli_job *j, uint64_t epoch,
                    int *ready_gone, int64_t *kill_at)
{
    char grace[32];

    ready_remove(o, ready_gone);
    switch (o->on_lost) {
    case ON_LOST_TERM:
        cli_job_signal(j, SIGTERM);
        *kill_at = cli_now_ms() + o->grace_ms;
        cli_format_ms(o->grace_ms, grace, sizeof grace);
        cli_err("the leadership of \"%s\" (epoch %llu) was lost: sent "
                "SIGTERM to COMMAND's process group %ld, SIGKILL in %s",
                o->key, (unsigned long long)epoch, (long)j->pid, grace);
        break;
    case ON_LOST_KILL:
        cli_job_signal(j, SIGKILL);
        cli_err("the leadership of \"%s\" (epoch %llu) was lost: sent "
                "SIGKILL to COMMAND's process group %ld",
                o->key, (unsigned long long)epoch, (long)j->pid);
        break;
    case ON_LOST_IGNORE:
        cli_err("the leadership of \"%s\" (epoch %llu) was lost: COMMAND "
                "(process group %ld) goes on (--on-lost ignore)",
                o->key, (unsigned long long)epoch, (long)j->pid);
        break;
    }
}

/* Wait until no process of the job is left, forwarding signals and
 * applying the policy on a loss. 0, or -1 with errno set. */
static int wait_job(const struct cli *o, struct cli_hold *h, struct cli_job *j,
                    uint64_t epoch, int *ready_gone, int *lost)
{
    sigset_t mask;
    int64_t kill_at = -1;
    int s;

    cli_signals_wait_mask(&mask);
    for (;;) {
        int64_t left = -1, now = cli_now_ms();

        if (kill_at >= 0)
            left = kill_at > now ? kill_at - now : 0;
        if (j->exited && (left < 0 || left > 100))
            left = 100;
        if (cli_hold_sleep(h, &mask, left) < 0)
            return -1;
        while ((s = cli_signals_take()) != 0)
            cli_job_signal(j, s);
        if (!*lost && cli_lost_seen()) {
            *lost = 1;
            on_lost(o, j, epoch, ready_gone, &kill_at);
        }
        if (kill_at >= 0 && cli_now_ms() >= kill_at) {
            if (cli_job_signal(j, SIGKILL))
                cli_err("COMMAND's process group %ld still runs after the "
                        "grace period: sending SIGKILL",
                        (long)j->pid);
            kill_at = -1;
        }
        if (cli_job_reap(o, j) < 0)
            return -1;
        if (j->exited && !cli_job_alive(j))
            return 0;
    }
}

/* COMMAND's exit status as dlock passes it on (128+N for signal N). */
static int job_code(const struct cli_job *j)
{
    if (WIFEXITED(j->status))
        return WEXITSTATUS(j->status);
    if (WIFSIGNALED(j->status))
        return 128 + WTERMSIG(j->status);
    return CLI_EX_SOFTWARE;
}

/* cli_elect into H (cli_elect ends it). */
static int elect_holding(const struct cli *o, dlock_client *c,
                         struct cli_hold *h, void *arg)
{
    (void)arg;
    struct cli_job job;
    uint64_t epoch;
    char **envp;
    int rc, signo, exec_errno, code, lost = 0, ready_gone = 0;

    cli_verbose(o, "campaigning for \"%s\" with value \"%s\"", o->key,
                o->value != NULL ? o->value : "");
    rc = cli_hold_acquire(o, c, 1, h, &signo);
    if (signo != 0) {
        cli_hold_release(h);
        cli_verbose(o, "SIG%s while campaigning for \"%s\": giving up",
                    sigabbrev_np(signo) ? sigabbrev_np(signo) : "?", o->key);
        return 128 + signo;
    }
    if (rc != DLOCK_OK) {
        if (rc == DLOCK_BUSY || rc == DLOCK_TIMEDOUT)
            cli_verbose(o, "\"%s\" has another leader: %s", o->key,
                        dlock_strerror(rc));
        else
            cli_report_msg("campaign", o->key, rc, cli_hold_errmsg(h));
        return cli_exit_for(o, rc);
    }
    epoch = cli_hold_token(h, 0);
    cli_verbose(o, "leading \"%s\", epoch %llu", o->key,
                (unsigned long long)epoch);
    if (ready_make(o, epoch) < 0) {
        cli_hold_release(h);
        return CLI_EX_OSERR;
    }
    envp = leader_env(o, epoch);
    if (envp == NULL) {
        cli_err("out of memory");
        ready_remove(o, &ready_gone);
        cli_hold_release(h);
        return CLI_EX_OSERR;
    }
    memset(&job, 0, sizeof job);
    rc = cli_job_start(&job, o, envp, &exec_errno);
    cli_env_free(envp, ENV_SET);
    if (rc < 0) {
        if (exec_errno != 0)
            cli_err("cannot execute '%s': %s", o->command[0],
                    strerror(exec_errno));
        else
            cli_err("cannot start '%s': %s", o->command[0], strerror(errno));
        ready_remove(o, &ready_gone);
        cli_hold_release(h);
        if (exec_errno == 0)
            return CLI_EX_OSERR;
        return exec_errno == ENOENT ? CLI_EX_NOT_FOUND : CLI_EX_CANNOT_EXEC;
    }
    if (wait_job(o, h, &job, epoch, &ready_gone, &lost) < 0) {
        cli_err("waiting for COMMAND (pid %ld): %s", (long)job.pid,
                strerror(errno));
        ready_remove(o, &ready_gone);
        cli_hold_release(h);
        return CLI_EX_OSERR;
    }
    cli_job_end(&job);
    code = job_code(&job);
    ready_remove(o, &ready_gone);
    rc = cli_hold_release(h);
    if (lost || cli_lost_seen() || rc == DLOCK_LOST || rc == DLOCK_NOT_OWNER) {
        if (!lost)
            cli_err("the leadership of \"%s\" ran out before COMMAND "
                    "finished",
                    o->key);
        cli_err("COMMAND's status was %d; exiting with the lost code %d", code,
                o->lost_code);
        return o->lost_code;
    }
    if (rc != DLOCK_OK)
        cli_report(c, "resign", o->key, rc);
    else
        cli_verbose(o, "resigned \"%s\"", o->key);
    return code;
}

/*
 * `dlock elect NAME -- COMMAND`. Returns COMMAND's status when it ran
 * and the leadership held until it ended; the lost code when it was
 * lost; the conflict code when -w/-n gave up; 128+N when signal N ended
 * the campaign; 126/127 when COMMAND could not be executed; a sysexits(3)
 * code for other failures. The campaign and the leadership's renewal run
 * on the event loop (hold.c).
 */
int cli_elect(const struct cli *o, dlock_client *c)
{
    return cli_with_hold(o, c, NULL, elect_holding);
}

/* Print one leader line: "EPOCH VALUE" (the value's control bytes as
 * '?', as status and list print names: one line per change, nothing for
 * the terminal to act on) or "none"; with --json an object. 0, or the
 * exit status 74 after saying why it could not be written (SIGPIPE is
 * ignored: a reader of --watch that went away shows as EPIPE here, and
 * must end the watch). */
static int print_leader(const struct cli *o, const dlock_leader_info *li)
{
    char value[DLOCK_VALUE_MAX + 1];

    if (o->json) {
        fputs("{\"name\":", stdout);
        cli_json_string(stdout, o->key);
        printf(",\"leading\":%s", li->leading ? "true" : "false");
        if (li->leading) {
            printf(",\"epoch\":%llu,\"value\":", (unsigned long long)li->epoch);
            cli_json_string(stdout, li->value);
            printf(",\"proclaimed\":%s,\"owner\":",
                   li->proclaimed ? "true" : "false");
            cli_json_string(stdout, li->owner);
            printf(",\"since_ms\":%lld,\"ttl_ms\":%lld",
                   (long long)li->since_ms, (long long)li->ttl_ms);
        }
        fputs("}\n", stdout);
    } else if (li->leading) {
        cli_printable(li->value, value, sizeof value);
        printf("%llu %s\n", (unsigned long long)li->epoch, value);
    } else {
        puts("none");
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_err("writing to stdout: %s", strerror(errno));
        return 74;
    }
    return 0;
}

/* What one wait of --watch needs. */
struct watch {
    const struct cli *o;
    dlock_client *c;
    const dlock_leader_info *known;
    dlock_leader_info *out;
};

static int watch_fn(void *arg)
{
    struct watch *w = arg;

    return dlock_leader_wait(w->c, w->o->key, w->known, -1, w->out);
}

/*
 * `dlock leader NAME [--json] [--watch]`. Without --watch: 0 when someone
 * leads, 1 when nobody does, else the status for the failure. With
 * --watch: a line now and one per change, until a signal N ends it
 * (128+N); a server that cannot be asked is reported once and asked
 * again every half second.
 */
int cli_leader(const struct cli *o, dlock_client *c)
{
    dlock_leader_info cur, next;
    struct watch w = {o, c, &cur, &next};
    struct cli_hold h;
    sigset_t mask;
    int rc, signo = 0, failing = 0, code;
    /* One server: the watch waits on the loop (no canceler thread). */
    int loop = cli_hold_blocking_why(o) == NULL;

    rc = dlock_leader(c, o->key, &cur);
    if (rc != DLOCK_OK) {
        cli_report(c, "leader", o->key, rc);
        if (!o->watch)
            return cli_exit_for(o, rc);
        failing = 1;
        memset(&cur, 0, sizeof cur);
        cur.leading = -1; /* unknown: anything that comes is a change */
    } else if (print_leader(o, &cur) != 0) {
        return 74;
    }
    if (!o->watch)
        return cur.leading ? 0 : 1;
    memset(&h, 0, sizeof h);
    h.c = c;
    cli_signals_wait_mask(&mask);
    for (;;) {
        rc = loop ? cli_hold_leader_wait(o, &h, &cur, &next, &signo)
                  : cli_cancelable(c, watch_fn, &w, &signo);
        if (signo != 0) {
            code = 128 + signo;
            break;
        }
        if (rc == DLOCK_OK) {
            if (print_leader(o, &next) != 0) {
                code = 74;
                break;
            }
            cur = next;
            failing = 0;
            continue;
        }
        if (!failing)
            cli_report_msg("leader", o->key, rc,
                           loop ? cli_hold_errmsg(&h) : dlock_errmsg(c));
        failing = 1;
        cli_hold_sleep(&h, &mask, 500);
        if ((signo = cli_signals_take()) != 0) {
            code = 128 + signo;
            break;
        }
    }
    cli_hold_end(&h); /* a cancelled wait's unsubscribe goes out */
    return code;
}
