/*
 * job.c - COMMAND of `dlock run` as a job: its own process group, signalled
 * as a whole, waited for as a whole, and killed even if dlock is.
 *
 * The lock protects the job, not one pid: COMMAND is often a shell whose
 * children do the work. So COMMAND leads a process group of its own; every
 * signal dlock passes on, the --on-lost signal and the SIGKILL after the
 * grace period go to the whole group; and dlock waits, while it renews the
 * lease, until no process of the group is left, not only until COMMAND has
 * exited. dlock is a child subreaper (PR_SET_CHILD_SUBREAPER), so that the
 * children COMMAND leaves behind become dlock's and their exit wakes it.
 *
 * If dlock itself dies (SIGKILL, a crash), nobody renews the lease any
 * more: a guard process, forked without exec and alone in a process group
 * of its own (so that a signal to dlock's group does not reach it), waits
 * on a pipe only dlock writes to. EOF without the "done" byte means dlock is
 * gone: the guard sends the --on-lost signal to the group, and SIGKILL after
 * the grace period. COMMAND does not exec before the guard exists (it waits
 * on a second pipe), so there is no window in which it runs unguarded. With
 * --on-lost ignore there is no guard: the job goes on, as that policy says.
 *
 * What escapes: a process that leaves the group (setsid(1), a daemon that
 * double-forks into a new session). Only a cgroup (systemd-run --scope)
 * holds those; dlock.1 says so.
 *
 * The terminal: when dlock's standard input is the terminal and dlock is in
 * its foreground process group, the job's group is made the foreground one
 * (tcsetpgrp), so that COMMAND can read the terminal and Ctrl-C or Ctrl-\
 * reach every process of the job directly, once. When the job stops
 * (Ctrl-Z), dlock takes the terminal back and stops itself, so that the
 * shell sees a stopped job; when continued in the foreground it gives the
 * terminal back to the job and continues it. Otherwise (no terminal, or
 * dlock in the background) a terminal's signals reach dlock, which passes
 * them on like any other.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* The guard's loop, in a process forked from a threaded one: only
 * async-signal-safe calls, and _exit. It never returns. */
static void guard_main(int rfd, pid_t pgid, int sig, int64_t grace_ms)
{
    struct timespec t0, now;
    ssize_t n;
    char b;

    /* Every signal stays blocked (spawn blocked them before fork). */
    setpgid(0, 0);
    if (rfd > 0)
        close_range(0, (unsigned)rfd - 1, 0);
    close_range((unsigned)rfd + 1, ~0U, 0);
    do
        n = read(rfd, &b, 1);
    while (n < 0 && errno == EINTR);
    if (n == 1 || kill(-pgid, sig) < 0)
        _exit(0);
    if (sig != SIGKILL) {
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (;;) {
            if (kill(-pgid, 0) < 0 && errno == ESRCH)
                _exit(0);
            clock_gettime(CLOCK_MONOTONIC, &now);
            if ((now.tv_sec - t0.tv_sec) * 1000 +
                    (now.tv_nsec - t0.tv_nsec) / 1000000 >=
                grace_ms)
                break;
            poll(NULL, 0, 50);
        }
        kill(-pgid, SIGKILL);
    }
    _exit(0);
}

/* Start the guard of group PGID (see the top of the file). Returns its pid
 * with *wfd the pipe to it, or -1 with errno set. */
static pid_t start_guard(const struct cli *o, pid_t pgid, int *wfd)
{
    int gp[2], sig = o->on_lost == ON_LOST_KILL ? SIGKILL : SIGTERM;
    sigset_t all, old;
    pid_t pid;
    int e;

    if (pipe2(gp, O_CLOEXEC) < 0)
        return -1;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid = fork();
    if (pid == 0)
        guard_main(gp[0], pgid, sig, o->grace_ms);
    e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(gp[0]);
    if (pid < 0) {
        close(gp[1]);
        errno = e;
        return -1;
    }
    /* Also in the parent, so that dlock's group never holds it. */
    setpgid(pid, pid);
    *wfd = gp[1];
    return pid;
}

/* Give the terminal to process group PGRP. dlock may be in the background
 * of it then: tcsetpgrp() would stop us with SIGTTOU unless blocked. */
static void give_tty(int fd, pid_t pgrp)
{
    sigset_t ttou, old;

    sigemptyset(&ttou);
    sigaddset(&ttou, SIGTTOU);
    pthread_sigmask(SIG_BLOCK, &ttou, &old);
    tcsetpgrp(fd, pgrp);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/*
 * The child between fork and exec: lead a new process group, take the
 * terminal if the job is to have it, wait until dlock says go (EOF: dlock
 * died before the guard existed, so do not run at all), reset signals and
 * exec. Only async-signal-safe calls. Never returns.
 */
static void child_main(const struct cli *o, char **envp, int tty, int go,
                       int ep)
{
    ssize_t n;
    char b;
    int e;

    setpgid(0, 0);
    if (tty >= 0)
        tcsetpgrp(tty, getpid()); /* SIGTTOU is blocked here */
    do
        n = read(go, &b, 1);
    while (n < 0 && errno == EINTR);
    if (n != 1)
        _exit(CLI_EX_SOFTWARE);
    close(go);
    cli_signals_child_reset();
    execvpe(o->command[0], o->command, envp);
    e = errno;
    if (write(ep, &e, sizeof e) < 0) {
        /* The parent then sees EOF and the exit status below. */
    }
    _exit(e == ENOENT ? CLI_EX_NOT_FOUND : CLI_EX_CANNOT_EXEC);
}

/* The terminal to hand to the job: standard input, when it is a terminal
 * whose foreground process group is ours; else -1. */
static int job_tty(void)
{
    if (!isatty(STDIN_FILENO))
        return -1;
    return tcgetpgrp(STDIN_FILENO) == getpgrp() ? STDIN_FILENO : -1;
}

/* Close a pipe, ignoring what is already closed. */
static void close_pair(int p[2])
{
    if (p[0] >= 0)
        close(p[0]);
    if (p[1] >= 0)
        close(p[1]);
}

/*
 * Start COMMAND as the job (see the top of the file). A CLOEXEC pipe tells
 * whether exec worked: EOF on success, the errno otherwise. Returns 0 with
 * *j filled; or -1 with *exec_errno set when COMMAND could not be executed,
 * or with errno set and *exec_errno 0 when fork, pipe or the guard failed
 * (nothing was run then).
 */
int cli_job_start(struct cli_job *j, const struct cli *o, char **envp,
                  int *exec_errno)
{
    int ep[2] = {-1, -1}, go[2] = {-1, -1}, e;
    sigset_t all, old;
    ssize_t n;

    memset(j, 0, sizeof *j);
    j->guard = -1;
    j->guard_fd = -1;
    *exec_errno = 0;
    /* Orphans of the job become our children: we see them exit. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    if (pipe2(ep, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0) {
        e = errno;
        close_pair(ep);
        errno = e;
        return -1;
    }
    j->tty = job_tty();
    /* No handler may run in the child before it has reset them. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    j->pid = fork();
    if (j->pid == 0) {
        close(ep[0]);
        close(go[1]);
        child_main(o, envp, j->tty, go[0], ep[1]);
    }
    e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(ep[1]);
    close(go[0]);
    if (j->pid < 0) {
        close(ep[0]);
        close(go[1]);
        errno = e;
        return -1;
    }
    setpgid(j->pid, j->pid);
    if (j->tty >= 0)
        tcsetpgrp(j->tty, j->pid);
    if (o->on_lost != ON_LOST_IGNORE) {
        j->guard = start_guard(o, j->pid, &j->guard_fd);
        if (j->guard < 0) {
            /* Closing go makes the child exit without running COMMAND. */
            e = errno;
            close(go[1]);
            close(ep[0]);
            while (waitpid(j->pid, NULL, 0) < 0 && errno == EINTR)
                ;
            cli_job_end(j);
            errno = e;
            return -1;
        }
    }
    if (write(go[1], "g", 1) < 0) {
        /* The child is gone: its exit status tells. */
    }
    close(go[1]);
    do
        n = read(ep[0], &e, sizeof e);
    while (n < 0 && errno == EINTR);
    close(ep[0]);
    if (n == (ssize_t)sizeof e) {
        while (waitpid(j->pid, NULL, 0) < 0 && errno == EINTR)
            ;
        cli_job_end(j);
        *exec_errno = e;
        return -1;
    }
    return 0;
}

/* 1 while some process of the job's group exists (a zombie included),
 * else 0; sticks at 0 once the group is found empty, so that its id, free
 * for reuse from then on, is never signalled. */
int cli_job_alive(struct cli_job *j)
{
    if (j->gone)
        return 0;
    if (kill(-j->pid, 0) < 0 && errno == ESRCH)
        j->gone = 1;
    return !j->gone;
}

/* Send SIG to every process of the job. Returns 1 if it was sent, 0 when
 * the group is empty. */
int cli_job_signal(struct cli_job *j, int sig)
{
    if (!cli_job_alive(j))
        return 0;
    return kill(-j->pid, sig) == 0 || errno == EPERM;
}

/*
 * COMMAND stopped (Ctrl-Z, SIGTTIN...). With the terminal: take it back,
 * stop dlock the same way so that the shell sees the job stopped, and when
 * continued, give the terminal back if we are in the foreground again and
 * continue the job. Without: nothing (someone stopped it on purpose, and
 * continues it).
 */
static void job_stopped(const struct cli *o, struct cli_job *j, int sig)
{
    if (j->tty < 0)
        return;
    cli_verbose(o, "COMMAND stopped (SIG%s): stopping too",
                sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
    give_tty(j->tty, getpgrp());
    raise(SIGTSTP);
    /* Continued (fg or bg). */
    if (tcgetpgrp(j->tty) == getpgrp())
        give_tty(j->tty, j->pid);
    cli_job_signal(j, SIGCONT);
}

/*
 * Reap every child that has exited without blocking: COMMAND (its status
 * goes to j->status, j->exited is set and the terminal comes back to dlock),
 * the orphans of the job that were reparented to us, and the guard should
 * it have died. Handles COMMAND stopping. Returns 0, or -1 with errno set
 * when waitpid failed.
 */
int cli_job_reap(const struct cli *o, struct cli_job *j)
{
    int st;
    pid_t r;

    for (;;) {
        r = waitpid(-1, &st, WNOHANG | WUNTRACED);
        if (r == 0 || (r < 0 && errno == ECHILD))
            return 0;
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == j->pid && WIFSTOPPED(st)) {
            job_stopped(o, j, WSTOPSIG(st));
        } else if (r == j->pid) {
            j->status = st;
            j->exited = 1;
            if (j->tty >= 0)
                give_tty(j->tty, getpgrp());
        } else if (r == j->guard && !WIFSTOPPED(st)) {
            j->guard = -1;
        }
    }
}

/*
 * The job is over (or never ran): tell the guard so that it exits without
 * signalling anything, reap it, and take the terminal back.
 */
void cli_job_end(struct cli_job *j)
{
    if (j->guard_fd >= 0) {
        if (write(j->guard_fd, "d", 1) < 0) {
            /* The guard is gone already. */
        }
        close(j->guard_fd);
        j->guard_fd = -1;
    }
    if (j->guard > 0) {
        while (waitpid(j->guard, NULL, 0) < 0 && errno == EINTR)
            ;
        j->guard = -1;
    }
    if (j->tty >= 0) {
        give_tty(j->tty, getpgrp());
        j->tty = -1;
    }
}
