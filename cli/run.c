/*
 * run.c - `dlock run KEY -- COMMAND`: run COMMAND while holding KEY.
 *
 * The lock is taken with the library's watchdog, which renews the lease
 * every third of it while COMMAND runs and calls back when the lease is
 * found lost. COMMAND is a child process in dlock's own process group (as
 * with flock(1)); signals dlock receives are forwarded to it, and the lock
 * is released when it has exited. The main loop sleeps in ppoll() on the
 * self-pipe of signals.c, with the handled signals unblocked only there, and
 * reaps the child with waitpid(WNOHANG) after every wake-up. When the lease
 * is lost, the --on-lost policy applies: SIGTERM then SIGKILL after the
 * grace period, SIGKILL at once, or nothing; dlock then exits with the lost
 * code whatever COMMAND's status, because COMMAND's work was not protected
 * by the lock all along.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

/*
 * Start COMMAND. The child resets the signals dlock handles, restores the
 * original signal mask and, unless --on-lost ignore, asks the kernel to
 * send it the --on-lost signal should dlock die (nobody would renew the
 * lease any more). A CLOEXEC pipe tells the parent whether exec worked:
 * it reads EOF on success, the errno otherwise. Returns the pid; or -1 with
 * *exec_errno set when COMMAND could not be executed, or with errno set and
 * *exec_errno 0 when fork or pipe failed.
 */
static pid_t spawn(const struct cli *o, char **envp, int *exec_errno)
{
    int ep[2], e;
    int deathsig = o->on_lost == ON_LOST_KILL   ? SIGKILL
                   : o->on_lost == ON_LOST_TERM ? SIGTERM
                                                : 0;
    sigset_t all, old;
    pid_t pid, parent = getpid();
    ssize_t n;

    *exec_errno = 0;
    if (pipe2(ep, O_CLOEXEC) < 0)
        return -1;
    /* No handler may run in the child before it has reset them. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid = fork();
    if (pid == 0) {
        close(ep[0]);
        if (deathsig != 0) {
            prctl(PR_SET_PDEATHSIG, deathsig);
            if (getppid() != parent)
                _exit(CLI_EX_SOFTWARE);
        }
        cli_signals_child_reset();
        execvpe(o->command[0], o->command, envp);
        e = errno;
        if (write(ep[1], &e, sizeof e) < 0) {
            /* The parent then sees EOF and the exit status below. */
        }
        _exit(e == ENOENT ? CLI_EX_NOT_FOUND : CLI_EX_CANNOT_EXEC);
    }
    e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(ep[1]);
    if (pid < 0) {
        close(ep[0]);
        errno = e;
        return -1;
    }
    do
        n = read(ep[0], &e, sizeof e);
    while (n < 0 && errno == EINTR);
    close(ep[0]);
    if (n == (ssize_t)sizeof e) {
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        *exec_errno = e;
        return -1;
    }
    return pid;
}

/* State of the wait for COMMAND. */
struct child {
    pid_t pid;
    int status;
    int64_t kill_at; /* when to send SIGKILL after SIGTERM, -1: not due */
    int lost;        /* the lost policy was applied */
};

/* Apply the --on-lost policy, once, when the watchdog reported the loss. */
static void on_lease_lost(const struct cli *o, struct child *ch,
                          dlock_lock *lock)
{
    char grace[32];

    ch->lost = 1;
    switch (o->on_lost) {
    case ON_LOST_TERM:
        cli_format_ms(o->grace_ms, grace, sizeof grace);
        cli_err("the lease on \"%s\" (fencing token %llu) was lost: sending "
                "SIGTERM to COMMAND (pid %ld), SIGKILL in %s",
                o->key, (unsigned long long)dlock_lock_token(lock),
                (long)ch->pid, grace);
        kill(ch->pid, SIGTERM);
        ch->kill_at = cli_now_ms() + o->grace_ms;
        break;
    case ON_LOST_KILL:
        cli_err("the lease on \"%s\" (fencing token %llu) was lost: sending "
                "SIGKILL to COMMAND (pid %ld)",
                o->key, (unsigned long long)dlock_lock_token(lock),
                (long)ch->pid);
        kill(ch->pid, SIGKILL);
        break;
    case ON_LOST_IGNORE:
        cli_err("the lease on \"%s\" (fencing token %llu) was lost: COMMAND "
                "(pid %ld) goes on without the lock (--on-lost ignore)",
                o->key, (unsigned long long)dlock_lock_token(lock),
                (long)ch->pid);
        break;
    }
}

/*
 * Wait for COMMAND to exit, forwarding signals and applying the lost
 * policy. A Ctrl-C or Ctrl-\ from the terminal already reached COMMAND
 * when it is in our process group, so it is not sent a second time (many
 * programs treat a second Ctrl-C as "quit now"). Signals are sent before
 * reaping, so never to a pid that was reaped and could be reused. Returns
 * 0 with ch->status set, or -1 when waitpid failed.
 */
static int wait_child(const struct cli *o, struct child *ch, dlock_lock *lock)
{
    sigset_t waitmask = *cli_signals_orig_mask();
    const sigset_t *handled = cli_signals_set();
    struct pollfd p;
    struct timespec ts;
    int s, tty;
    pid_t r;

    for (s = 1; s < NSIG; s++)
        if (sigismember(handled, s) == 1)
            sigdelset(&waitmask, s);
    for (;;) {
        int64_t left = -1;

        if (ch->kill_at >= 0) {
            left = ch->kill_at - cli_now_ms();
            if (left < 0)
                left = 0;
            ts.tv_sec = left / 1000;
            ts.tv_nsec = (long)(left % 1000) * 1000000;
        }
        p.fd = cli_signals_pipe();
        p.events = POLLIN;
        p.revents = 0;
        if (ppoll(&p, 1, left >= 0 ? &ts : NULL, &waitmask) < 0 &&
            errno != EINTR)
            return -1;
        cli_drain_pipe();

        while ((s = cli_signals_take(&tty)) != 0) {
            if (tty && (s == SIGINT || s == SIGQUIT) &&
                getpgid(ch->pid) == getpgrp()) {
                cli_verbose(o,
                            "SIG%s came from the terminal: COMMAND got "
                            "it too",
                            sig_name(s));
                continue;
            }
            cli_verbose(o, "forwarding SIG%s to COMMAND (pid %ld)", sig_name(s),
                        (long)ch->pid);
            kill(ch->pid, s);
        }
        if (!ch->lost && cli_lost_seen())
            on_lease_lost(o, ch, lock);
        if (ch->kill_at >= 0 && cli_now_ms() >= ch->kill_at) {
            cli_err("COMMAND (pid %ld) still runs after the grace period: "
                    "sending SIGKILL",
                    (long)ch->pid);
            kill(ch->pid, SIGKILL);
            ch->kill_at = -1;
        }

        r = waitpid(ch->pid, &ch->status, WNOHANG);
        if (r == ch->pid)
            return 0;
        if (r < 0 && errno != EINTR)
            return -1;
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
    struct child ch = {0, 0, -1, 0};
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
    ch.pid = spawn(o, envp, &exec_errno);
    free_env(envp);
    if (ch.pid < 0) {
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
    cli_verbose(o, "running %s (pid %ld), lease %s renewed while it runs",
                o->command[0], (long)ch.pid, lease);

    if (wait_child(o, &ch, lock) < 0) {
        cli_err("waiting for COMMAND (pid %ld): %s", (long)ch.pid,
                strerror(errno));
        dlock_lock_release(lock);
        return CLI_EX_OSERR;
    }
    cli_format_ms(cli_now_ms() - t0, took, sizeof took);
    if (WIFEXITED(ch.status)) {
        code = WEXITSTATUS(ch.status);
        cli_verbose(o, "%s exited with status %d after %s", o->command[0], code,
                    took);
    } else if (WIFSIGNALED(ch.status)) {
        code = 128 + WTERMSIG(ch.status);
        cli_verbose(o, "%s was killed by SIG%s after %s", o->command[0],
                    sig_name(WTERMSIG(ch.status)), took);
    } else {
        code = CLI_EX_SOFTWARE;
    }

    rc = dlock_lock_release(lock);
    if (cli_lost_seen() || rc == DLOCK_LOST || rc == DLOCK_NOT_OWNER) {
        if (!ch.lost)
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
