/*
 * run.c - `dlock run KEY -- COMMAND`: run COMMAND while holding KEY.
 *
 * The lock is taken with the library's watchdog, which renews the lease
 * every third of it while COMMAND runs and calls back when the lease is
 * found lost. COMMAND runs as a job in a process group of its own (job.c);
 * signals dlock receives are forwarded to the whole group, and the lock is
 * released when no process of the group is left. The main loop sleeps in
 * ppoll() on the self-pipe of signals.c, with the handled signals unblocked
 * only there, and reaps with waitpid(WNOHANG) after every wake-up. When the
 * lease is lost, the --on-lost policy applies to the group: SIGTERM then
 * SIGKILL after the grace period, SIGKILL at once, or nothing; dlock then
 * exits with the lost code whatever COMMAND's status, because COMMAND's
 * work was not protected by the lock all along.
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
 * COMMAND's environment: ours without any DLOCK_KEY or DLOCK_FENCING_TOKEN,
 * plus those two for this lock. Built before fork because the child may
 * only make async-signal-safe calls. Returns NULL when out of memory.
 */
static char **child_env(const struct cli *o, uint64_t token)
{
    size_t n = 0, j = 0;
    char **env;

    while (environ[n] != NULL)
        n++;
    env = calloc(n + 3, sizeof *env);
    if (env == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "DLOCK_KEY=", 10) != 0 &&
            strncmp(environ[i], "DLOCK_FENCING_TOKEN=", 20) != 0)
            env[j++] = environ[i];
    if (asprintf(&env[j], "DLOCK_KEY=%s", o->key) < 0) {
        free(env);
        return NULL;
    }
    j++;
    if (asprintf(&env[j], "DLOCK_FENCING_TOKEN=%llu",
                 (unsigned long long)token) < 0) {
        free(env[j - 1]);
        free(env);
        return NULL;
    }
    return env;
}

/* Free what child_env() made (the two strings it added, and the array). */
static void free_env(char **env)
{
    size_t n = 0;

    if (env == NULL)
        return;
    while (env[n] != NULL)
        n++;
    free(env[n - 1]);
    free(env[n - 2]);
    free(env);
}

/* State of the wait for the job. */
struct run_state {
    struct cli_job job;
    int64_t kill_at; /* when to send SIGKILL after SIGTERM, -1: not due */
    int lost;        /* the lost policy was applied */
    int said_left;   /* -v said that COMMAND's group outlives it */
};

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
static void lost_reason(const struct cli *o, dlock_client *c, dlock_lock *lock,
                        char *buf, size_t len)
{
    dlock_info info;
    const char *why;
    int code = dlock_lock_lost_reason(lock, &why);

    if (code == DLOCK_NOT_OWNER && dlock_lock_inspect(c, o->key, &info) == 0) {
        if (!info.held) {
            snprintf(buf, len,
                     "the lock is free now: it expired or was deleted");
            return;
        }
        if (strcmp(info.owner, dlock_lock_owner(lock)) != 0) {
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
                          struct run_state *rs, dlock_lock *lock)
{
    char grace[32], why[256];
    unsigned long long token = dlock_lock_token(lock);
    long pgid = (long)rs->job.pid;

    rs->lost = 1;
    if (o->on_lost == ON_LOST_TERM) {
        cli_job_signal(&rs->job, SIGTERM);
        rs->kill_at = cli_now_ms() + o->grace_ms;
    } else if (o->on_lost == ON_LOST_KILL) {
        cli_job_signal(&rs->job, SIGKILL);
    }
    lost_reason(o, c, lock, why, sizeof why);
    switch (o->on_lost) {
    case ON_LOST_TERM:
        cli_format_ms(o->grace_ms, grace, sizeof grace);
        cli_err("the lease on \"%s\" (fencing token %llu) was lost (%s): "
                "sent SIGTERM to COMMAND's process group %ld, SIGKILL in %s",
                o->key, token, why, pgid, grace);
        break;
    case ON_LOST_KILL:
        cli_err("the lease on \"%s\" (fencing token %llu) was lost (%s): "
                "sent SIGKILL to COMMAND's process group %ld",
                o->key, token, why, pgid);
        break;
    case ON_LOST_IGNORE:
        cli_err("the lease on \"%s\" (fencing token %llu) was lost (%s): "
                "COMMAND (process group %ld) goes on without the lock "
                "(--on-lost ignore)",
                o->key, token, why, pgid);
        break;
    }
}

/*
 * Wait until no process of the job is left, forwarding signals to its
 * group and applying the lost policy. After COMMAND has exited, processes
 * it left in its group are waited for too (the lock still covers them);
 * those that are not our children may end without a SIGCHLD to us, so the
 * group is then looked at every 100 ms as well. Returns 0 with
 * rs->job.status set, or -1 when waitpid failed.
 */
static int wait_job(const struct cli *o, dlock_client *c, struct run_state *rs,
                    dlock_lock *lock)
{
    sigset_t waitmask = *cli_signals_orig_mask();
    const sigset_t *handled = cli_signals_set();
    struct cli_job *j = &rs->job;
    struct pollfd p;
    struct timespec ts;
    int s;

    for (s = 1; s < NSIG; s++)
        if (sigismember(handled, s) == 1)
            sigdelset(&waitmask, s);
    for (;;) {
        int64_t left = -1;

        if (rs->kill_at >= 0) {
            left = rs->kill_at - cli_now_ms();
            if (left < 0)
                left = 0;
        }
        if (j->exited && (left < 0 || left > 100))
            left = 100;
        ts.tv_sec = left / 1000;
        ts.tv_nsec = (long)(left % 1000) * 1000000;
        p.fd = cli_signals_pipe();
        p.events = POLLIN;
        p.revents = 0;
        if (ppoll(&p, 1, left >= 0 ? &ts : NULL, &waitmask) < 0 &&
            errno != EINTR)
            return -1;
        cli_drain_pipe();

        while ((s = cli_signals_take()) != 0)
            if (cli_job_signal(j, s))
                cli_verbose(o,
                            "forwarded SIG%s to COMMAND's process group "
                            "%ld",
                            sig_name(s), (long)j->pid);
        if (!rs->lost && cli_lost_seen())
            on_lease_lost(o, c, rs, lock);
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
 * `dlock run`: acquire with renewal, run COMMAND, release. Returns the exit
 * status for dlock: COMMAND's (128+N for signal N) when it ran and the lease
 * held all along; the lost code when the lease was lost or had run out by
 * the release; the conflict code when the lock was not obtained; 126/127
 * when COMMAND could not be executed; 128+N when signal N interrupted the
 * wait; a sysexits(3) code for other failures.
 */
int cli_run(struct cli *o, dlock_client *c)
{
    struct run_state rs;
    dlock_lock *lock = NULL;
    char **envp;
    char took[32], lease[32];
    int rc, signo, exec_errno, code;
    int64_t t0;

    rc = cli_acquire(o, c, 1, &lock, &signo);
    if (signo != 0) {
        if (lock != NULL)
            dlock_lock_release(lock);
        cli_verbose(o, "SIG%s while waiting for \"%s\": giving up",
                    sig_name(signo), o->key);
        return 128 + signo;
    }
    if (rc != DLOCK_OK) {
        if (rc == DLOCK_BUSY || rc == DLOCK_TIMEDOUT)
            cli_verbose(o, "\"%s\" is held: %s", o->key, dlock_strerror(rc));
        else
            cli_report(c, "acquire", o->key, rc);
        return cli_exit_for(o, rc);
    }

    envp = child_env(o, dlock_lock_token(lock));
    if (envp == NULL) {
        cli_err("out of memory");
        dlock_lock_release(lock);
        return CLI_EX_OSERR;
    }
    cli_format_ms(o->lease_ms, lease, sizeof lease);
    t0 = cli_now_ms();
    memset(&rs, 0, sizeof rs);
    rs.kill_at = -1;
    rc = cli_job_start(&rs.job, o, envp, &exec_errno);
    free_env(envp);
    if (rc < 0) {
        if (exec_errno != 0) {
            cli_err("cannot execute '%s': %s", o->command[0],
                    strerror(exec_errno));
            code = exec_errno == ENOENT ? CLI_EX_NOT_FOUND : CLI_EX_CANNOT_EXEC;
        } else {
            cli_err("cannot start '%s': %s", o->command[0], strerror(errno));
            code = CLI_EX_OSERR;
        }
        rc = dlock_lock_release(lock);
        if (rc != DLOCK_OK)
            cli_report(c, "release", o->key, rc);
        else
            cli_verbose(o, "released \"%s\"", o->key);
        return code;
    }
    cli_verbose(o,
                "running %s (pid %ld, its own process group%s), lease %s "
                "renewed while it runs",
                o->command[0], (long)rs.job.pid,
                rs.job.tty >= 0 ? ", in the terminal's foreground" : "", lease);

    if (wait_job(o, c, &rs, lock) < 0) {
        cli_err("waiting for COMMAND (pid %ld): %s", (long)rs.job.pid,
                strerror(errno));
        /* The guard then sends the --on-lost signal to what is left. */
        dlock_lock_release(lock);
        return CLI_EX_OSERR;
    }
    cli_job_end(&rs.job);
    cli_format_ms(cli_now_ms() - t0, took, sizeof took);
    if (WIFEXITED(rs.job.status)) {
        code = WEXITSTATUS(rs.job.status);
        cli_verbose(o, "%s exited with status %d after %s", o->command[0], code,
                    took);
    } else if (WIFSIGNALED(rs.job.status)) {
        code = 128 + WTERMSIG(rs.job.status);
        cli_verbose(o, "%s was killed by SIG%s after %s", o->command[0],
                    sig_name(WTERMSIG(rs.job.status)), took);
    } else {
        code = CLI_EX_SOFTWARE;
    }

    rc = dlock_lock_release(lock);
    if (cli_lost_seen() || rc == DLOCK_LOST || rc == DLOCK_NOT_OWNER) {
        if (!rs.lost)
            cli_err("the lease on \"%s\" ran out before COMMAND finished: "
                    "its work was not protected by the lock all along",
                    o->key);
        cli_err("COMMAND's status was %d; exiting with the lost code %d", code,
                o->lost_code);
        return o->lost_code;
    }
    if (rc != DLOCK_OK) {
        cli_report(c, "release", o->key, rc);
        cli_err("the lock stays held until its lease ends");
    } else {
        cli_verbose(o, "released \"%s\"", o->key);
    }
    return code;
}
