/*
 * cli.h - what the files of the dlock command-line tool share.
 *
 * The tool is a client of include/dlock.h only. Its files call downward:
 *
 *   dlock.c      makes the client, dispatches to the subcommand
 *   args.c       the command line and DLOCK_SERVERS: which options each
 *                subcommand takes, their values checked, KEYs, COMMAND
 *   usage.c      the --help text and usage errors
 *   servers.c    the server list: -s URL, DLOCK_SERVERS, the default
 *   run.c        `dlock run`: holds a lock while a child process runs
 *   commands.c   status, acquire, release, extend
 *   elect.c      `dlock elect`: COMMAND runs while this process leads;
 *                `dlock leader`: who leads, and --watch for changes
 *   slot.c       run --once-per / --slot: the run's time slot and its
 *                done-marker
 *   job.c        COMMAND as a job: its own process group, signalled and
 *                waited for as a whole, and a guard that kills it if dlock
 *                dies
 *   hold.c       what run, acquire and elect hold, and the wait for it:
 *                on the event loop (dlock_loop.h), one ppoll over its fd
 *                and the self-pipe; the blocking path where it cannot
 *   signals.c    the signal handlers, the self-pipe they and the lease-lost
 *                callback write to, and the blocking acquire a signal can
 *                interrupt (a canceler thread)
 *   check.c      `check KEY TOKEN`: is TOKEN the current holder's?
 *   list.c       `list [PATTERN]`: every held lock and its holder
 *   metrics.c    run --metrics-file: Prometheus text when run ends
 *   holder.c     who holds a lock: the label recorded for our holds, the
 *                "held by HOST pid PID `COMMAND` for 3m12s" sentence
 *   shared.c     semaphores (--limit, `dlock limit`) and read locks
 *                (--shared): their acquire, status and lost reason
 *   report.c     messages on stderr and exit statuses
 *   util.c       pure helpers (strict number parsing, URL redaction,
 *                quoting)
 *
 * A file never calls one above it in this list (run.c and commands.c are
 * side by side and do not call each other).
 */
#ifndef DLOCK_CLI_H
#define DLOCK_CLI_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "dlock.h"
#include "dlock_loop.h"

/* Exit statuses of dlock itself (sysexits(3) values, as flock(1) uses). */
#define CLI_EX_USAGE 64       /* bad command line */
#define CLI_EX_UNAVAILABLE 69 /* no server or no quorum reachable */
#define CLI_EX_SOFTWARE 70    /* unexpected library answer */
#define CLI_EX_OSERR 71       /* fork, pipe, thread... failed */
#define CLI_EX_NOPERM 77      /* the server refused us: credentials, ACL... */
#define CLI_EX_CONFIG 78      /* TLS files could not be loaded */
#define CLI_EX_CANNOT_EXEC 126
#define CLI_EX_NOT_FOUND 127

#define CLI_DEFAULT_SERVER "redis://127.0.0.1:6379"
#define CLI_DEFAULT_LEASE_MS 30000
/* The shortest -l: the library refuses nothing above 0 but needs the lease
 * to outlast a round trip plus its clock-drift allowance (2 ms + 1% by
 * default: below ~3 ms every acquire fails with "validity used up", at 5 ms
 * renewals every lease/3 already miss on a loaded machine). 100 ms leaves
 * 30 times the fixed drift and renews every 33 ms. */
#define CLI_MIN_LEASE_MS 100
#define CLI_DEFAULT_GRACE_MS 5000
#define CLI_DEFAULT_LOST_CODE 75
#define CLI_DEFAULT_CONFLICT_CODE 1
#define CLI_DEFAULT_DONE_CODE 0
/* --once-per: the shortest slot. The done-marker is a lock whose lease is
 * about a slot long; a slot must also be far longer than the clock skew
 * between machines and the delay of their schedulers. */
#define CLI_MIN_ONCE_PER_MS 1000
/* --slot: the longest slot name, and the suffix of the key prefix under
 * which the done-markers are kept ("dlock" -> "dlock:done"). */
#define CLI_MAX_SLOT_LEN 128
#define CLI_DONE_PREFIX_SUFFIX ":done"

enum cli_cmd {
    CMD_RUN,
    CMD_ACQUIRE,
    CMD_RELEASE,
    CMD_EXTEND,
    CMD_STATUS,
    CMD_CHECK, /* check.c */
    CMD_LIST,  /* list.c */
    CMD_LIMIT,
    CMD_ELECT,
    CMD_LEADER
};

enum cli_on_lost { ON_LOST_TERM, ON_LOST_KILL, ON_LOST_IGNORE };

/* Everything the command line and the environment decided. */
struct cli {
    enum cli_cmd cmd;
    const char *cmd_name;
    const char *key; /* the (first) KEY */
    char **keys;     /* run: every KEY as given (keys[0] == key) */
    size_t nkeys;    /* 1, or more for `run A B -- COMMAND` */
    char **command;  /* run: COMMAND and its arguments, NULL-terminated */

    char **servers; /* copies (the argv originals are masked) */
    size_t nservers;
    const char *servers_from; /* "--server", "DLOCK_SERVERS", "default" */
    const char *user;
    const char *cacert;
    const char *tls_cert; /* TLS client certificate (PEM) */
    const char *tls_key;  /* and its private key */
    const char *prefix;
    int insecure;
    int verbose;

    int64_t wait_ms; /* -1: forever, 0: try once */
    int64_t lease_ms;
    int64_t grace_ms;
    int64_t timeout_ms; /* --timeout; 0: $DLOCK_TIMEOUT or the default */
    int conflict_code;
    int lost_code;
    enum cli_on_lost on_lost;

    /* run, cron semantics (0 / NULL: not asked for) */
    int64_t once_per_ms; /* --once-per: the slot length, or with --slot the
                            done-marker's lifetime */
    const char *slot;    /* --slot NAME */
    int64_t min_hold_ms; /* --min-hold */
    int64_t max_hold_ms; /* --max-hold */
    int done_code;       /* exit status when the slot was done already */
    int64_t limit;       /* --limit N: a semaphore permit (limit: N) */
    int shared;          /* --shared: a read lock */
    int prefer_readers;  /* --prefer-readers */

    int json;       /* status --json */
    int export_env; /* acquire --export */
    const char *owner;

    /* durability.c: -1 (-2 for the delay) when not given */
    int wait_replicas;
    int64_t wait_replicas_timeout_ms;
    int64_t lock_delay_ms;
    int64_t fence_retention_ms; /* --fence-retention; -1 when not given */
    int layout; /* --layout, DLOCK_LAYOUT: DLOCK_LAYOUT_*; -1 not given */
    const char *label;        /* run, acquire: --label (holder info) */
    uint64_t token;           /* check: TOKEN */
    const char *metrics_file; /* run: --metrics-file */
    /* elect, leader */
    const char *value;      /* elect --value */
    const char *ready_file; /* elect --ready-file */
    int watch;              /* leader --watch */
};

/* durability.c: --wait-replicas, --wait-replicas-timeout, --lock-delay,
 * --fence-retention, --layout
 * (option ids from dlock.c's enum) and the DLOCK_SENTINEL_* variables. */
enum {
    CLI_OPT_WAIT_REPLICAS = 512,
    CLI_OPT_WAIT_REPLICAS_TIMEOUT,
    CLI_OPT_LOCK_DELAY,
    CLI_OPT_FENCE_RETENTION,
    CLI_OPT_LAYOUT
};
void cli_durability_init(struct cli *o);
int cli_durability_opt(struct cli *o, int opt, const char *arg,
                       const char **why);
int cli_durability_apply(struct cli *o, dlock_options *opts,
                         const char **bad_var, const char **why);

/* report.c */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_verbose(const struct cli *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int cli_exit_for(const struct cli *o, int rc);
void cli_report(dlock_client *c, const char *what, const char *key, int rc);
void cli_report_msg(const char *what, const char *key, int rc,
                    const char *detail);

/* run.c: MARKS is the client for the done-markers of --once-per (its key
 * prefix is O's plus CLI_DONE_PREFIX_SUFFIX), NULL without --once-per. */
int cli_run(struct cli *o, dlock_client *c, dlock_client *marks);

/*
 * The slot of --once-per / --slot. The done-marker of a slot is a lock,
 * taken with the client for markers (key prefix "<prefix>:done") under the
 * name "KEY:SLOT" and never released: it expires by itself. SLOT never
 * contains ':' (--slot refuses it), so KEY:SLOT names one (KEY, SLOT) pair.
 * The slot's own name is --slot, or "<length>-<n>" with n = floor(Unix
 * time / length), e.g. "30s-59012345" for --once-per 30.
 */
struct slot {
    char slot[64];       /* the slot's name when it comes from the clock */
    const char *name;    /* the slot's name: --slot, or slot */
    char marker[600];    /* the done-marker's lock name, KEY:SLOT */
    int64_t end_wall_ms; /* clock slots: when the slot ends (Unix ms) */
};

/* slot.c: work out this run's slot by the wall clock now; is it done
 * (1 done, 0 not, or a library error); leave its done-marker after a
 * run with status 0 (NULL: not left, said why). */
void cli_slot_init(const struct cli *o, struct slot *sl);
int cli_slot_done(const struct cli *o, dlock_client *marks,
                  const struct slot *sl);
dlock_lock *cli_slot_mark(const struct cli *o, dlock_client *marks,
                          const struct slot *sl);

/* elect.c */
int cli_elect(const struct cli *o, dlock_client *c);
int cli_leader(const struct cli *o, dlock_client *c);

/* commands.c */
int cli_cmd_status(const struct cli *o, dlock_client *c);
int cli_cmd_acquire(const struct cli *o, dlock_client *c);
int cli_cmd_release(const struct cli *o, dlock_client *c);
int cli_cmd_extend(const struct cli *o, dlock_client *c);

/* job.c: COMMAND's process group, led by COMMAND (pgid == pid). */
struct cli_job {
    pid_t pid;    /* COMMAND */
    int status;   /* its wait status, once exited */
    int exited;   /* COMMAND was reaped */
    int gone;     /* no process of the group is left */
    int tty;      /* the terminal the job has, -1: none */
    pid_t guard;  /* the guard process, -1: none */
    int guard_fd; /* the pipe to it */
};
int cli_job_start(struct cli_job *j, const struct cli *o, char **envp,
                  int *exec_errno);
int cli_job_alive(struct cli_job *j);
int cli_job_signal(struct cli_job *j, int sig);
int cli_job_reap(const struct cli *o, struct cli_job *j);
void cli_job_end(struct cli_job *j);

/* signals.c */
int cli_signals_setup(void);
int cli_signals_pipe(void);
const sigset_t *cli_signals_orig_mask(void);
const sigset_t *cli_signals_set(void);
int cli_signals_take(void);
void cli_signals_child_reset(void);
void cli_lost_cb(dlock_lock *lock, void *userdata);
/* Note a lost lease and wake the main loop (the lost callbacks). */
void cli_lost_note(void);
/* A forwarded signal that came while none was watched for: its number
 * (taken), or 0. */
int cli_signals_stop_pending(void);
/* -v: say for whom the acquire of O's KEY waits. */
void cli_say_waiting(const struct cli *o, dlock_client *c);
/* Is RC (with the library's message MSG) an outage that a wait rides
 * out (the servers out of reach, not ready...)? */
int cli_is_outage_msg(const struct cli *o, int rc, const char *msg);
/* A first try's failure (RC, message MSG) that the wait rides out rather
 * than report at once (issue 29 item 19): too few replicas (given back),
 * or on Sentinel an outage (the sentinels still name a master that died:
 * the 2-4 s an HA setup exists for). Elsewhere a first try that cannot
 * reach the servers fails at once (a wrong URL, a server not there). */
int cli_first_rides(const struct cli *o, int rc, const char *msg);
int cli_lost_seen(void);
void cli_drain_pipe(void);
/* The signal mask to sleep with: dlock's original one without the signals
 * it handles, so that they arrive only inside ppoll(). */
void cli_signals_wait_mask(sigset_t *m);
/* Sleep with MASK until the self-pipe is written to (a signal, the lost
 * callback) or LEFT ms have passed (-1: no limit), then empty the pipe.
 * Returns 0, or -1 with errno set. Used by run.c and elect.c. */
int cli_signals_sleep(const sigset_t *mask, int64_t left);
/* What is left of O's -w, counted from T0: -1 forever, 0 used up. */
int64_t cli_wait_left(const struct cli *o, int64_t t0);
int cli_acquire(const struct cli *o, dlock_client *c, int watchdog,
                dlock_lock **out, int *signo);
int cli_cancelable(dlock_client *c, int (*fn)(void *arg), void *arg,
                   int *signo);
/* The wait that follows a first try which found the lock (or the
 * leadership) taken: FN(ARG) waits in the library for *WAIT_MS, as a
 * cli_cancelable call. When the servers stop answering during it (EIO,
 * ETIMEDOUT, NO_QUORUM), say so once and call FN again every 0.5 to 2 s,
 * with *WAIT_MS set to what is left of O's -w counted from T0, while the
 * wait lasts. Returns FN's last status (BUSY as TIMEDOUT; the outage's
 * when the wait ended during it; CANCELED when a signal came, *signo
 * set). */
int cli_wait_through_outages(const struct cli *o, dlock_client *c,
                             int (*fn)(void *arg), void *arg, int64_t *wait_ms,
                             int64_t t0, int *signo);

/* hold.c: what run, acquire and elect hold, on the event loop (or, for
 * what it does not serve yet, through the blocking API). */
struct cli_hold {
    dlock_client *c;
    dlock_loop *loop;                   /* NULL: the blocking path */
    dlock_hold *holds[DLOCK_MULTI_MAX]; /* the loop path's */
    dlock_lock *locks[DLOCK_MULTI_MAX]; /* the blocking path's (run, acquire) */
    dlock_election *e;                  /* the blocking path's (elect) */
    size_t n;                           /* how many are held (0: none) */
    char err[512];                      /* the acquire's message */
};
/* Acquire what O asks for into *H: the locks of O's KEYs (run, acquire:
 * a permit with --limit, a read lock with --shared), or the leadership
 * (elect, campaigning with --value), renewed until released when RENEW
 * is set (the loss is noted: cli_lost_seen). Tries once, then waits for
 * the rest of -w; a forwarded signal ends the wait (*signo set, the wait
 * cancelled; when the lock was had anyway it is in *H: release it).
 * Returns the library's status, its message in cli_hold_errmsg(H).
 * Call cli_hold_end(H) whatever the outcome. */
int cli_hold_acquire(const struct cli *o, dlock_client *c, int renew,
                     struct cli_hold *h, int *signo);
const char *cli_hold_errmsg(const struct cli_hold *h);
/* `dlock leader --watch` on the loop (one server): wait on H's loop
 * (made when H has none; H->c set) until who leads O->key differs from
 * KNOWN, the answer in *OUT. A forwarded signal cancels the wait (*signo
 * set). Returns the library's status, its message in
 * cli_hold_errmsg(H). */
int cli_hold_leader_wait(const struct cli *o, struct cli_hold *h,
                         const dlock_leader_info *known, dlock_leader_info *out,
                         int *signo);
/* FN(O, C, H, ARG) with a cleared hold H, then cli_hold_end(H);
 * returns FN's exit status. */
int cli_with_hold(const struct cli *o, dlock_client *c, void *arg,
                  int (*fn)(const struct cli *o, dlock_client *c,
                            struct cli_hold *h, void *arg));
/* The token (elect: the epoch), name and owner of hold I < h->n. */
uint64_t cli_hold_token(const struct cli_hold *h, size_t i);
const char *cli_hold_name(const struct cli_hold *h, size_t i);
const char *cli_hold_owner(const struct cli_hold *h, size_t i);
/* DLOCK_OK while every hold is believed held, else the first other
 * status (*which: its index); DLOCK_LOST when nothing is held. */
int cli_hold_status(const struct cli_hold *h, size_t *which);
/* Hold I's status and, once lost, why (the library's words). */
int cli_hold_lost_reason(const struct cli_hold *h, size_t i, const char **why);
/* Release (elect: resign) everything held; h->n is 0 after. DLOCK_OK or
 * the first failure (DLOCK_LOST, DLOCK_NOT_OWNER...). */
int cli_hold_release(struct cli_hold *h);
/* Leave everything held, unrenewed (acquire). */
void cli_hold_detach(struct cli_hold *h);
/* cli_signals_sleep, and on the loop path the loop's fd in the same
 * ppoll and its process after it (renewals, the loss). */
int cli_hold_sleep(struct cli_hold *h, const sigset_t *mask, int64_t left);
/* Let what is still out reach the server (give-backs, releases), then
 * free the loop. */
void cli_hold_end(struct cli_hold *h);

/* check.c, list.c */
int cli_parse_token(const char *s, uint64_t *token);
int cli_cmd_check(const struct cli *o, dlock_client *c);
int cli_cmd_list(const struct cli *o, dlock_client *c);
int cli_metrics_write(const struct cli *o, dlock_client *c, int code);

/* holder.c */
void cli_holder_label(const struct cli *o, char *buf, size_t len, int64_t *pid);
void cli_format_age(int64_t ms, char *out, size_t len);
void cli_describe_holder(const dlock_info *info, char *buf, size_t len);
void cli_holder_json(FILE *f, const dlock_info *info);
void cli_say_holder(const struct cli *o, dlock_client *c, const char *what);
void cli_printable(const char *s, char *out, size_t len);
/* shared.c */
int cli_acquire_kind(const struct cli *o, dlock_client *c,
                     const dlock_acquire_options *ao, dlock_lock **out);
void cli_shared_lost_reason(const struct cli *o, dlock_client *c, char *buf,
                            size_t len);
int cli_cmd_limit(const struct cli *o, dlock_client *c);
int cli_shared_status(const struct cli *o, dlock_client *c, int *done);
void cli_shared_readers(const struct cli *o, dlock_client *c);
int64_t cli_shared_reader_count(const struct cli *o, dlock_client *c);

/* args.c: parse argv for subcommand o->cmd (argv[0] is its name).
 * Returns 0, CLI_EX_USAGE after printing the problem, or -1 for
 * "--help/--version printed: exit 0". */
int cli_parse_args(struct cli *o, int argc, char **argv);

/* servers.c: 1 when S (blanks first ignored) is a redis+cluster:// or
 * rediss+cluster:// URL. */
int cli_is_cluster_url(const char *s);
/* Append a copy of URL to o's server list. 0, or -1 out of memory. */
int cli_add_server(struct cli *o, char *url);
/* Fill o's server list from DLOCK_SERVERS or the default. 0, or an exit
 * status after printing why. */
int cli_default_servers(struct cli *o);

/* usage.c */
void cli_print_usage(void);
/* Report a usage error ("dlock CMD: ...", then a pointer to --help) and
 * return the status for it (CLI_EX_USAGE). CMD may be NULL. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* util.c */
int cli_parse_seconds(const char *s, int64_t *ms, const char **why);
int cli_parse_code(const char *s, int *code);
const char *cli_check_slot_name(const char *s);
int64_t cli_wall_ms(void);
int cli_parse_limit(const char *s, int64_t *out);
/* COMMAND's environment, built before fork (the child may only make
 * async-signal-safe calls): environ without the variables set[0..nset-1]
 * name, plus those ("NAME=value" strings, malloc'ed, taken over: a NULL
 * among them, as cli_strf() gives when out of memory, fails the call).
 * NULL when out of memory (set's strings freed). Free with
 * cli_env_free(env, nset). */
char **cli_env_with(char **set, size_t nset);
void cli_env_free(char **env, size_t nset);
/* A formatted string in new memory, NULL when out of memory. */
char *cli_strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_redact_url(const char *url, char *out, size_t outlen);
int cli_mask_password(char *url);
void cli_json_string(FILE *f, const char *s);
/* The length of the valid UTF-8 sequence at P (1 to 4; an ASCII byte is
 * 1), or 0 when the byte at P does not begin one. */
int cli_utf8_len(const unsigned char *p);
void cli_shell_quote(FILE *f, const char *s);
int64_t cli_now_ms(void);
void cli_format_ms(int64_t ms, char *out, size_t outlen);

#endif /* DLOCK_CLI_H */
