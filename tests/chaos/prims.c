/*
 * prims.c - the fault-injection suite's workers and checker for the
 * primitives built on the lock (tests/chaos/prims.bash, run by
 * tests/chaos/run): the counting semaphore, the read-write lock, several
 * locks at once (all or nothing) and leader election. Built as
 * chaos_prims.
 *
 * Modes:
 *   sem URLS NAME WID LOG SECS LEASE HOLD INDIR LIMIT
 *       take a permit of semaphore NAME (LIMIT) again and again; inside,
 *       read the fenced resource, hold, write it with the permit's token.
 *   rw URLS NAME WID LOG SECS LEASE HOLD INDIR r|w
 *       r: read-lock NAME and read the counter; w: lock NAME (the writer)
 *       and add one to the counter: a fenced read, a fenced write.
 *   multi URLS NAME WID LOG SECS LEASE HOLD INDIR ROUNDS
 *       ROUNDS times: all of a random subset of the locks NAME-a..NAME-d,
 *       asked for in a random order; add one to each key's counter (a
 *       fenced read, a fenced write, each with that key's token).
 *   elect URLS NAME WID LOG SECS LEASE HOLD INDIR
 *       campaign for NAME; while leading, write "wid:epoch:n" to the
 *       fenced log with the epoch every 20..HOLD ms for a random term,
 *       then resign.
 *   observe URLS NAME LOG SECS
 *       follow NAME's leader with dlock_leader_wait; log every change.
 *   sig SIGNAL PID LOG
 *       send SIGNAL (KILL, STOP, CONT) to PID and log it with the time.
 *   check KIND LEASE LIMIT ROUNDS [KEY=COUNTER...] -- LOG...
 *       the safety checker (see check()).
 *
 * Log lines, one write(2) each (a kill -9 leaves whole lines), times in
 * ns of CLOCK_MONOTONIC (system-wide), KEY "-" for a single name:
 *   P wid pid t                      a worker started
 *   E wid kind key tok sent enter validity_ms
 *                                    entered (kind p permit, r reader,
 *                                    w writer, m one lock of several,
 *                                    l leader); sent: the granting
 *                                    request was sent after it
 *   A wid key tok ws wc wrc t valid_ms
 *                                    a fenced write inside (wrc its
 *                                    status), then the validity at t
 *   X wid key tok enter exit valid   left (valid: lease left and status
 *                                    OK at exit)
 *   R wid key tok start end status   its release
 *   F wid status                     an acquire failed
 *   D wid rounds t                   the worker ended
 *   K signal pid t                   the driver signalled pid (sig)
 *   O t leading epoch owner          the observer saw a change
 * While a worker holds, the file INDIR/in.KIND.WID holds its pid (the
 * driver picks a victim among them).
 */
#include <dlock.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chaos_common.h"

/* ---- workers ------------------------------------------------------------ */

/* What every worker mode shares: the common prologue's arguments and
 * log (r), and the primitives' own. */
typedef struct wk {
    chaos_wk r;
    const char *indir;
    int watchdog; /* sem, rw: odd workers renew by the watchdog */
    dlock_client *c;
    char kind; /* p r w m l */
} wk;

static dlock_client *make_client(const char *url, int64_t timeout_ms)
{
    const char *servers[1] = {url};
    dlock_options o;
    dlock_options_init(&o);
    o.servers = servers;
    o.nservers = 1;
    o.connect_timeout_ms = timeout_ms;
    o.command_timeout_ms = timeout_ms;
    /* CHAOS_STRATEGY=notify|spin|fair; unset (or another name): the
     * library's default. */
    const char *st = getenv("CHAOS_STRATEGY");
    if (st != NULL)
        (void)chaos_strategy(st, &o.wait_strategy);
    return chaos_client(&o);
}

/* argv: MODE URLS NAME WID LOG SECS LEASE HOLD INDIR ...; 0 or -1. */
static int wk_open(wk *w, int argc, char **argv, char kind)
{
    if (argc < 10)
        return -1;
    memset(w, 0, sizeof *w);
    if (chaos_wk_open(&w->r, argv) != 0)
        return -1;
    w->indir = argv[9];
    w->kind = kind;
    w->watchdog = w->r.wid % 2;
    w->c = make_client(w->r.urls, 300);
    if (!w->c)
        return -1;
    /* The string layout (CHAOS_LAYOUT) has no read locks or elections:
     * their scenarios keep the hash layout, writers with them. */
    if (kind != 0 && strchr("rwl", kind) != NULL)
        (void)dlock_client_set_layout(w->c, DLOCK_LAYOUT_HASH);
    chaos_log(w->r.fd, "P %d %d %lld\n", w->r.wid, (int)getpid(),
              (long long)chaos_now_ns());
    return 0;
}

static void wk_close(wk *w, int rounds)
{
    chaos_log(w->r.fd, "D %d %d %lld\n", w->r.wid, rounds,
              (long long)chaos_now_ns());
    dlock_client_free(w->c);
    close(w->r.fd);
}

/* INDIR/in.KIND.WID: holds the pid while inside (the driver's victims). */
static void wk_inside(const wk *w, int in)
{
    char path[600], tmp[620], pid[32];
    snprintf(path, sizeof path, "%s/in.%c.%d", w->indir, w->kind, w->r.wid);
    if (!in) {
        unlink(path);
        return;
    }
    /* Hidden: the driver's glob in.?.* must not see it half-written. */
    snprintf(tmp, sizeof tmp, "%s/.in.%c.%d", w->indir, w->kind, w->r.wid);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (write(fd, pid, (size_t)n) < 0)
        perror("chaos_prims: inside");
    close(fd);
    rename(tmp, path);
}

/* Log the entry. SENT is when the granting request was sent at the
 * earliest: the call's start, or, for a hold the watchdog has not renewed
 * yet (renewed ones move their validity on), what its validity tells:
 * validity = lease - drift - (now - sent), with the default drift (1 %
 * + 2 ms) and 2 ms for rounding. The library promises a token above
 * every hold granted before that send (docs/design.md, "Which grants the
 * tokens order"): a handoff taken from its message counts from the
 * waiter's attempt before the release that granted it; one confirmed by
 * a later attempt counts from that attempt, and a permit gets a fresh
 * token there (F9: it kept the handoff's, granted before holds that
 * entered first, which the token check then reported). */
static void log_enter(const wk *w, const char *key, dlock_lock *l, int64_t call,
                      int64_t enter, int renewed)
{
    int64_t validity = dlock_lock_validity_ms(l), sent = call;
    int64_t by_validity =
        enter - (w->r.lease - (w->r.lease / 100 + 2) - validity + 2) * 1000000;
    if (!renewed && by_validity > sent)
        sent = by_validity;
    chaos_log(w->r.fd, "E %d %c %s %llu %lld %lld %lld\n", w->r.wid, w->kind,
              key, (unsigned long long)dlock_lock_token(l), (long long)sent,
              (long long)enter, (long long)validity);
}

static int still_valid(dlock_lock *l)
{
    return dlock_lock_validity_ms(l) > 0 && dlock_lock_status(l) == DLOCK_OK;
}

/* One fenced write of VALUE to RES with TOK, logged as an A line with the
 * validity of L after it. Returns the write's status. */
static int fenced_write(const wk *w, const char *key, dlock_lock *l,
                        const char *res, uint64_t tok, const char *value)
{
    int64_t ws = chaos_now_ns();
    int wrc = dlock_fenced_set(w->c, res, tok, value, strlen(value));
    int64_t wc = chaos_now_ns();
    chaos_log(w->r.fd, "A %d %s %llu %lld %lld %d %lld %lld\n", w->r.wid, key,
              (unsigned long long)tok, (long long)ws, (long long)wc, wrc,
              (long long)chaos_now_ns(),
              (long long)(dlock_lock_status(l) == DLOCK_OK
                              ? dlock_lock_validity_ms(l)
                              : 0));
    return wrc;
}

static void log_exit(const wk *w, const char *key, dlock_lock *l, int64_t enter)
{
    chaos_log(w->r.fd, "X %d %s %llu %lld %lld %d\n", w->r.wid, key,
              (unsigned long long)dlock_lock_token(l), (long long)enter,
              (long long)chaos_now_ns(), still_valid(l));
}

static void log_release(const wk *w, const char *key, uint64_t tok, int64_t rs,
                        int rrc)
{
    chaos_log(w->r.fd, "R %d %s %llu %lld %lld %s\n", w->r.wid, key,
              (unsigned long long)tok, (long long)rs, (long long)chaos_now_ns(),
              dlock_status_name(rrc));
}

/* The options of a worker's acquire: wait WAIT_MS, the worker's lease,
 * the watchdog as given. */
static dlock_acquire_options wk_opts(const wk *w, int64_t wait_ms, int wd)
{
    dlock_acquire_options ao;
    dlock_acquire_options_init(&ao);
    ao.wait_ms = wait_ms;
    ao.lease_ms = w->r.lease;
    ao.watchdog = wd;
    return ao;
}

/* A failed acquire: its F line, then a pause of 1..20 ms. */
static void wk_failed(const wk *w, int rc)
{
    chaos_log(w->r.fd, "F %d %s\n", w->r.wid, dlock_status_name(rc));
    chaos_sleep_ms(chaos_rnd_in(1, 20));
}

/* Enter the hold L of the worker's one name (key "-"), asked for at CALL
 * (RENEWED: see log_enter): its E line, then into INDIR. Returns the
 * entry time. */
static int64_t wk_enter(const wk *w, dlock_lock *l, int64_t call, int renewed)
{
    int64_t enter = chaos_now_ns();
    log_enter(w, "-", l, call, enter, renewed);
    wk_inside(w, 1);
    return enter;
}

/* Leave the hold L of the worker's one name (key "-") entered at ENTER:
 * out of INDIR, its X line, then the release and its R line. */
static void wk_leave(const wk *w, dlock_lock *l, int64_t enter)
{
    wk_inside(w, 0);
    log_exit(w, "-", l, enter);
    uint64_t tok = dlock_lock_token(l);
    int64_t rs = chaos_now_ns();
    log_release(w, "-", tok, rs, dlock_lock_release(l));
}

/* Read the fenced counter RES: its value (0 when none) and status. With
 * a token (TOK > 0: the read of a read-modify-write) the read is
 * dlock_fenced_read, which makes TOK the counter's floor: a holder paused
 * past its lease that resumes after this read has its write refused,
 * rather than accepted and then overwritten by ours (a lost update,
 * multi_chaos seed 1453); DLOCK_STALE when a newer holder read first. */
static int read_counter(const wk *w, const char *res, uint64_t tok,
                        long long *out)
{
    char *val = NULL;
    size_t len = 0;
    uint64_t fence = 0;
    int rc = tok > 0 ? dlock_fenced_read(w->c, res, tok, &val, &len, &fence)
                     : dlock_fenced_get(w->c, res, &val, &len, &fence);
    *out = rc == DLOCK_OK && val ? atoll(val) : 0;
    free(val);
    return rc;
}

/* Semaphore: permits of LIMIT; the fenced resource takes the permit's
 * token as its value. */
static int sem_worker(int argc, char **argv)
{
    wk w;
    if (argc < 11 || wk_open(&w, argc, argv, 'p') != 0)
        return 2;
    int64_t limit = atoll(argv[10]);
    char res[600];
    snprintf(res, sizeof res, "chaos:{%s}:res", w.r.name);
    int i;
    for (i = 0; i < 100000 && chaos_now_ns() < w.r.until; i++) {
        dlock_acquire_options ao = wk_opts(&w, 1000, w.watchdog);
        dlock_lock *l = NULL;
        int64_t call = chaos_now_ns();
        int rc = dlock_sem_acquire(&l, w.c, w.r.name, limit, &ao);
        if (rc != DLOCK_OK) {
            wk_failed(&w, rc);
            continue;
        }
        int64_t enter = wk_enter(&w, l, call, w.watchdog);
        long long seen;
        read_counter(&w, res, 0, &seen);
        chaos_sleep_ms(chaos_rnd_in(0, w.r.hold));
        char v[32];
        snprintf(v, sizeof v, "%llu", (unsigned long long)dlock_lock_token(l));
        fenced_write(&w, "-", l, res, dlock_lock_token(l), v);
        wk_leave(&w, l, enter);
    }
    wk_close(&w, i);
    return 0;
}

/* Read-write lock: readers read the counter, writers add one to it. */
static int rw_worker(int argc, char **argv)
{
    wk w;
    if (argc < 11 || (argv[10][0] != 'r' && argv[10][0] != 'w') ||
        wk_open(&w, argc, argv, argv[10][0]) != 0)
        return 2;
    char res[600];
    snprintf(res, sizeof res, "chaos:{%s}:counter", w.r.name);
    int i;
    for (i = 0; i < 100000 && chaos_now_ns() < w.r.until; i++) {
        dlock_acquire_options ao = wk_opts(&w, 1000, w.watchdog);
        dlock_lock *l = NULL;
        int64_t call = chaos_now_ns();
        int rc = w.kind == 'r'
                     ? dlock_rw_acquire_shared(&l, w.c, w.r.name, 0, &ao)
                     : dlock_lock_acquire_ex(&l, w.c, w.r.name, &ao);
        if (rc != DLOCK_OK) {
            wk_failed(&w, rc);
            continue;
        }
        int64_t enter = wk_enter(&w, l, call, w.watchdog);
        long long counter;
        /* Readers only look; the writer's read is fenced. */
        int grc = read_counter(&w, res, w.kind == 'w' ? dlock_lock_token(l) : 0,
                               &counter);
        chaos_sleep_ms(chaos_rnd_in(0, w.r.hold));
        if (w.kind == 'w' && grc == DLOCK_OK) {
            char v[32];
            snprintf(v, sizeof v, "%lld", counter + 1);
            fenced_write(&w, "-", l, res, dlock_lock_token(l), v);
        }
        wk_leave(&w, l, enter);
        /* Writers pause between holds: readers get their turns too
         * (writers are preferred while they wait). */
        if (w.kind == 'w')
            chaos_sleep_ms(chaos_rnd_in(0, w.r.hold));
    }
    wk_close(&w, i);
    return 0;
}

/* Several locks: ROUNDS successful holds of random subsets of the four
 * names, each in a random order. Ends early only at SECS + 15 s. */
static int multi_worker(int argc, char **argv)
{
    wk w;
    if (argc < 11 || wk_open(&w, argc, argv, 'm') != 0)
        return 2;
    int rounds = atoi(argv[10]), done = 0;
    int64_t hard = w.r.until + 15000000000LL;
    static const char *const keys[4] = {"a", "b", "c", "d"};
    char names[4][600], res[4][640];
    for (int k = 0; k < 4; k++) {
        snprintf(names[k], sizeof names[k], "%s-%s", w.r.name, keys[k]);
        snprintf(res[k], sizeof res[k], "chaos:{%.599s}:counter", names[k]);
    }
    for (int tries = 0;
         done < rounds && tries < 100000 && chaos_now_ns() < hard; tries++) {
        /* A random non-empty subset in a random order. */
        int idx[4] = {0, 1, 2, 3}, n = (int)chaos_rnd_in(1, 4);
        for (int k = 3; k > 0; k--) {
            int j = (int)chaos_rnd_in(0, k), t = idx[k];
            idx[k] = idx[j];
            idx[j] = t;
        }
        const char *pick[4];
        for (int k = 0; k < n; k++)
            pick[k] = names[idx[k]];
        /* Long enough that a deadlock shows as a worker that does not
         * finish its rounds, not as a timeout it retries after; the
         * watchdog: the first leases run while waiting for more. */
        dlock_acquire_options ao = wk_opts(&w, 10000, 1);
        dlock_lock *ls[4] = {NULL, NULL, NULL, NULL};
        int64_t call = chaos_now_ns();
        int rc = dlock_lock_acquire_all(ls, w.c, pick, (size_t)n, &ao);
        if (rc != DLOCK_OK) {
            wk_failed(&w, rc);
            continue;
        }
        int64_t enter = chaos_now_ns();
        for (int k = 0; k < n; k++)
            log_enter(&w, keys[idx[k]], ls[k], call, enter, 1);
        wk_inside(&w, 1);
        long long counter[4];
        int grc[4];
        for (int k = 0; k < n; k++)
            grc[k] = read_counter(&w, res[idx[k]], dlock_lock_token(ls[k]),
                                  &counter[k]);
        chaos_sleep_ms(chaos_rnd_in(0, w.r.hold));
        for (int k = 0; k < n; k++) {
            if (grc[k] != DLOCK_OK)
                continue;
            char v[32];
            snprintf(v, sizeof v, "%lld", counter[k] + 1);
            fenced_write(&w, keys[idx[k]], ls[k], res[idx[k]],
                         dlock_lock_token(ls[k]), v);
        }
        wk_inside(&w, 0);
        uint64_t tok[4];
        for (int k = 0; k < n; k++) {
            log_exit(&w, keys[idx[k]], ls[k], enter);
            tok[k] = dlock_lock_token(ls[k]);
        }
        /* One by one (not release_all) to log each key's outcome. */
        for (int k = 0; k < n; k++) {
            int64_t rs = chaos_now_ns();
            log_release(&w, keys[idx[k]], tok[k], rs,
                        dlock_lock_release(ls[k]));
        }
        done++;
    }
    wk_close(&w, done);
    return 0;
}

/* Election: campaign; while leading, fenced writes to the log with the
 * epoch, until the term (0.3..2.5 s) ends or the leadership is lost. */
static int elect_worker(int argc, char **argv)
{
    wk w;
    if (wk_open(&w, argc, argv, 'l') != 0)
        return 2;
    char res[600], val[64];
    snprintf(res, sizeof res, "chaos:{%s}:log", w.r.name);
    snprintf(val, sizeof val, "w%d", w.r.wid);
    int terms = 0;
    for (int i = 0; i < 100000 && chaos_now_ns() < w.r.until; i++) {
        /* Until the run ends: a follower leads next only because the
         * library woke it (a release, or the dead leader's lease end),
         * never because its own wait ran out and it tried again. */
        dlock_acquire_options ao =
            wk_opts(&w, (w.r.until - chaos_now_ns()) / 1000000 + 1, 0);
        dlock_election *e = NULL;
        int64_t call = chaos_now_ns();
        int rc = dlock_campaign(&e, w.c, w.r.name, val, &ao);
        if (rc != DLOCK_OK) {
            wk_failed(&w, rc);
            continue;
        }
        dlock_lock *l = dlock_election_lock(e);
        uint64_t ep = dlock_election_epoch(e);
        int64_t enter = wk_enter(&w, l, call, 1);
        terms++;
        int64_t term_end = enter + chaos_rnd_in(300, 2500) * 1000000;
        /* The first act of a new leader is a write: from then on the
         * fence refuses every older epoch. */
        for (int n = 0; n < 1000; n++) {
            char v[96];
            snprintf(v, sizeof v, "%d:%llu:%d", w.r.wid, (unsigned long long)ep,
                     n);
            fenced_write(&w, "-", l, res, ep, v);
            if (dlock_election_status(e) != DLOCK_OK ||
                dlock_lock_validity_ms(l) <= 0 || chaos_now_ns() >= term_end)
                break;
            chaos_sleep_ms(chaos_rnd_in(20, w.r.hold));
        }
        wk_inside(&w, 0);
        log_exit(&w, "-", l, enter);
        int64_t rs = chaos_now_ns();
        log_release(&w, "-", ep, rs, dlock_election_resign(e));
        chaos_sleep_ms(chaos_rnd_in(0, 200));
    }
    wk_close(&w, terms);
    return 0;
}

/* observe URLS NAME LOG SECS: log every leader change seen. */
static int observe(int argc, char **argv)
{
    if (argc < 6)
        return 2;
    int fd = open(argv[4], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int64_t until = chaos_now_ns() + atoll(argv[5]) * 1000000000LL;
    dlock_client *c = make_client(argv[2], 300);
    if (fd < 0 || !c)
        return 2;
    (void)dlock_client_set_layout(c, DLOCK_LAYOUT_HASH); /* as wk_open */
    signal(SIGPIPE, SIG_IGN);
    dlock_leader_info known, cur;
    memset(&known, 0, sizeof known);
    int have = 0;
    for (int i = 0; i < 100000 && chaos_now_ns() < until; i++) {
        int rc =
            dlock_leader_wait(c, argv[3], have ? &known : NULL, 1000, &cur);
        if (rc != DLOCK_OK && rc != DLOCK_TIMEDOUT) {
            chaos_sleep_ms(50);
            continue;
        }
        if (!have || rc == DLOCK_OK)
            chaos_log(fd, "O %lld %d %llu %s\n", (long long)chaos_now_ns(),
                      cur.leading, (unsigned long long)cur.epoch,
                      cur.owner[0] ? cur.owner : "-");
        known = cur;
        have = 1;
    }
    dlock_client_free(c);
    close(fd);
    return 0;
}

/* sig KILL|STOP|CONT PID LOG: signal PID and log it (K line). */
static int sig(int argc, char **argv)
{
    if (argc < 5)
        return 2;
    int s = !strcmp(argv[2], "KILL")   ? SIGKILL
            : !strcmp(argv[2], "STOP") ? SIGSTOP
            : !strcmp(argv[2], "CONT") ? SIGCONT
                                       : 0;
    int fd = open(argv[4], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (!s || fd < 0)
        return 2;
    int64_t t = chaos_now_ns();
    int rc = kill((pid_t)atoi(argv[3]), s);
    if (rc == 0)
        chaos_log(fd, "K %s %s %lld\n", argv[2], argv[3], (long long)t);
    close(fd);
    return rc == 0 ? 0 : 1;
}

/* ---- checker ------------------------------------------------------------ */

enum { REL_NONE, REL_OK, REL_LOST, REL_NOT_OWNER, REL_OTHER };

/* One hold of one name (one key of several). */
typedef struct sec {
    int wid, open, valid, rel, pid;
    char kind, key[8];
    unsigned long long tok;
    long long enter, exit, validity;
    long long sent_after; /* its granting request was sent after this */
    long long upto;       /* valid (by its own count) until this */
} sec;

/* One fenced write. */
typedef struct wr {
    int wid, rc;
    char key[8];
    unsigned long long tok;
    long long ws, wc;
} wr;

typedef struct worker_info {
    int wid, pid, killed, done, rounds;
    long long start, end;
} worker_info;

typedef struct fault {
    char sig[8];
    int pid;
    long long t;
} fault;

typedef struct obs {
    long long t;
    int leading;
    unsigned long long epoch;
} obs;

#define GROW(arr, n, cap)                                                      \
    do {                                                                       \
        if ((n) == (cap)) {                                                    \
            (cap) = (cap) ? (cap)*2 : 256;                                     \
            (arr) = realloc((arr), (cap) * sizeof *(arr));                     \
            if (!(arr))                                                        \
                abort();                                                       \
        }                                                                      \
    } while (0)

static struct {
    sec *s;
    size_t ns, cs;
    wr *w;
    size_t nw, cw;
    worker_info *wi;
    size_t nwi, cwi;
    fault *f;
    size_t nf, cf;
    obs *o;
    size_t no, co;
} L;

static int viol;

static void violation(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static void violation(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("VIOLATION ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    viol++;
}

static worker_info *worker_of(int wid)
{
    for (size_t i = 0; i < L.nwi; i++)
        if (L.wi[i].wid == wid)
            return &L.wi[i];
    GROW(L.wi, L.nwi, L.cwi);
    worker_info *w = &L.wi[L.nwi++];
    memset(w, 0, sizeof *w);
    w->wid = wid;
    return w;
}

/* The open section of wid on key entered at enter (or the latest). */
static sec *find_sec(int wid, const char *key, unsigned long long tok,
                     int open_only)
{
    for (size_t i = L.ns; i-- > 0;)
        if (L.s[i].wid == wid && L.s[i].tok == tok &&
            !strcmp(L.s[i].key, key) && (!open_only || L.s[i].open))
            return &L.s[i];
    return NULL;
}

static int rel_of(const char *st)
{
    return !strcmp(st, "OK")          ? REL_OK
           : !strcmp(st, "LOST")      ? REL_LOST
           : !strcmp(st, "NOT_OWNER") ? REL_NOT_OWNER
                                      : REL_OTHER;
}

static void read_log(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[512];
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        int wid = 0, pid = 0, rc = 0, valid = 0, leading = 0;
        char kind = 0, key[8] = "", st[32] = "";
        unsigned long long tok = 0;
        long long a = 0, b = 0, c = 0, d = 0;
        if (sscanf(line, "P %d %d %lld", &wid, &pid, &a) == 3) {
            worker_info *w = worker_of(wid);
            w->pid = pid;
            w->start = a;
        } else if (sscanf(line, "E %d %c %7s %llu %lld %lld %lld", &wid, &kind,
                          key, &tok, &a, &b, &c) == 7) {
            GROW(L.s, L.ns, L.cs);
            sec *s = &L.s[L.ns++];
            memset(s, 0, sizeof *s);
            s->wid = wid;
            s->kind = kind;
            snprintf(s->key, sizeof s->key, "%s", key);
            s->tok = tok;
            s->sent_after = a;
            s->enter = b;
            s->validity = c;
            s->open = 1;
            s->valid = c > 0;
            s->upto = b + c * 1000000;
            s->exit = s->upto;
        } else if (sscanf(line, "A %d %7s %llu %lld %lld %d %lld %lld", &wid,
                          key, &tok, &a, &b, &rc, &c, &d) == 8) {
            GROW(L.w, L.nw, L.cw);
            wr *x = &L.w[L.nw++];
            x->wid = wid;
            snprintf(x->key, sizeof x->key, "%s", key);
            x->tok = tok;
            x->ws = a;
            x->wc = b;
            x->rc = rc;
            sec *s = find_sec(wid, key, tok, 1);
            if (s && d > 0 && c + d * 1000000 > s->upto)
                s->upto = c + d * 1000000;
        } else if (sscanf(line, "X %d %7s %llu %lld %lld %d", &wid, key, &tok,
                          &a, &b, &valid) == 6) {
            sec *s = find_sec(wid, key, tok, 1);
            if (!s)
                continue;
            s->open = 0;
            s->exit = b;
            s->valid = valid;
            /* Valid at exit: inside with a lease all along. Otherwise
             * as long as its own count said so. */
            if (valid || s->upto > b)
                s->upto = b;
        } else if (sscanf(line, "R %d %7s %llu %lld %lld %31s", &wid, key, &tok,
                          &a, &b, st) == 6) {
            sec *s = find_sec(wid, key, tok, 0);
            if (s && !s->open && s->rel == REL_NONE)
                s->rel = rel_of(st);
        } else if (sscanf(line, "D %d %d %lld", &wid, &rc, &a) == 3) {
            worker_info *w = worker_of(wid);
            w->done = 1;
            w->rounds = rc;
            w->end = a;
        } else if (sscanf(line, "K %7s %d %lld", st, &pid, &a) == 3) {
            GROW(L.f, L.nf, L.cf);
            fault *x = &L.f[L.nf++];
            snprintf(x->sig, sizeof x->sig, "%.7s", st);
            x->pid = pid;
            x->t = a;
        } else if (sscanf(line, "O %lld %d %llu", &a, &leading, &tok) == 3) {
            GROW(L.o, L.no, L.co);
            L.o[L.no++] = (obs){a, leading, tok};
        }
    }
    fclose(f);
}

static int cmp_enter(const void *a, const void *b)
{
    const sec *x = a, *y = b;
    return x->enter < y->enter ? -1 : x->enter > y->enter;
}

static int exclusive(char kind)
{
    return kind == 'w' || kind == 'm' || kind == 'l';
}

/* A sweep event: at t, section i comes in (+1) or goes (-1). */
typedef struct ev {
    long long t;
    int d;
    size_t i;
} ev;

static int cmp_ev(const void *a, const void *b)
{
    const ev *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return x->d - y->d; /* ends first at the same instant */
}

/* Per key: how many were inside at once with valid leases. cap: the
 * most allowed (the semaphore's limit; 1 for a lock); rw: a writer with
 * anyone else is too many. Sets *maxin and *readers2 (episodes with two
 * or more readers inside). Returns the violations. */
static int sweep(const char *key, int cap, int rw, long *maxin, long *readers2)
{
    size_t n = 0;
    ev *e = malloc((2 * L.ns + 1) * sizeof *e);
    int v = 0;
    for (size_t i = 0; i < L.ns; i++) {
        sec *s = &L.s[i];
        if (strcmp(s->key, key) || s->upto <= s->enter)
            continue;
        e[n++] = (ev){s->enter, 1, i};
        e[n++] = (ev){s->upto, -1, i};
    }
    qsort(e, n, sizeof *e, cmp_ev);
    size_t *in = malloc((L.ns + 1) * sizeof *in), nin = 0;
    int bad = 0, two = 0;
    for (size_t k = 0; k < n; k++) {
        if (e[k].d < 0) {
            for (size_t j = 0; j < nin; j++)
                if (in[j] == e[k].i) {
                    in[j] = in[--nin];
                    break;
                }
        } else {
            in[nin++] = e[k].i;
        }
        size_t writers = 0, readers = 0;
        for (size_t j = 0; j < nin; j++) {
            if (L.s[in[j]].kind == 'r')
                readers++;
            else
                writers++;
        }
        if ((long)nin > *maxin)
            *maxin = (long)nin;
        int now_two = readers >= 2;
        if (now_two && !two)
            (*readers2)++;
        two = now_two;
        int now_bad = rw ? writers >= 1 && nin >= 2 : (int)nin > cap;
        if (now_bad && !bad) {
            char who[400] = "";
            size_t o = 0;
            for (size_t j = 0; j < nin && o < sizeof who - 60; j++) {
                sec *s = &L.s[in[j]];
                o += (size_t)snprintf(who + o, sizeof who - o,
                                      " w%d/%c/%llu(%lld..%lld)", s->wid,
                                      s->kind, s->tok, s->enter, s->upto);
            }
            violation("overlap on %s at %lld: %zu inside with valid "
                      "leases (at most %s):%s",
                      key, e[k].t, nin, rw ? "one writer alone" : "the limit",
                      who);
            v++;
        }
        bad = now_bad;
    }
    free(in);
    free(e);
    return v;
}

/*
 * check KIND LEASE LIMIT ROUNDS [KEY=COUNTER...] -- LOG...
 * KIND sem, rw, multi or elect. Fails (VIOLATION lines, exit 1) on:
 *  - overlap: per name, more holders inside with valid leases at once
 *    than allowed (sem: LIMIT; rw: a writer with anyone; multi, elect:
 *    one). A section counts from its entry until its exit if it was still
 *    valid then, else until the end of the validity it last saw (a
 *    killed holder: the same, from its last log line);
 *  - tokens: two holds of one name with the same token, or a hold whose
 *    token is not above one granted surely before it (its request was
 *    sent after that one entered; for exclusive holds also: that one had
 *    left before it entered);
 *  - stale write accepted: a fenced write accepted although a write with
 *    a higher token to the same resource had been accepted before it
 *    started;
 *  - counter (rw, multi: KEY=COUNTER, the final value): outside
 *    [accepted, accepted + unfinished + unknown outcome];
 *  - unreported loss (exclusive kinds): a hold released with OK although
 *    another worker, whose request was sent after it entered, entered
 *    while it was inside;
 *  - liveness: sem: LIMIT never reached; rw: no two readers ever inside
 *    at once; multi: a worker not killed that did not finish its ROUNDS;
 *    elect: a killed or paused leader not followed by another within
 *    LIMIT ms (for elect LIMIT is that bound), or no leader at all for
 *    longer than gap=MS (given among the counters); the observer seeing
 *    an older epoch after a newer one.
 * Prints a stats line.
 */
static int check(int argc, char **argv)
{
    if (argc < 7)
        return 2;
    const char *kind = argv[2];
    long long limit = atoll(argv[4]); /* argv[3], the lease: in the logs */
    int rounds = atoi(argv[5]);
    int a = 6;
    const char *counters[8];
    int ncounters = 0;
    long long gap_ms = 0;
    for (; a < argc && strcmp(argv[a], "--"); a++)
        if (!strncmp(argv[a], "gap=", 4))
            gap_ms = atoll(argv[a] + 4);
        else if (ncounters < 8)
            counters[ncounters++] = argv[a];
    for (a++; a < argc; a++)
        read_log(argv[a]);
    qsort(L.s, L.ns, sizeof *L.s, cmp_enter);
    int is_sem = !strcmp(kind, "sem"), is_rw = !strcmp(kind, "rw");
    int is_multi = !strcmp(kind, "multi"), is_elect = !strcmp(kind, "elect");
    static const char *const mkeys[4] = {"a", "b", "c", "d"};
    const char *const single[1] = {"-"};
    const char *const *keys = is_multi ? mkeys : single;
    int nkeys = is_multi ? 4 : 1;
    int v_overlap = 0, v_token = 0, v_stale = 0, v_counter = 0;
    int v_unreported = 0, v_live = 0;
    long maxin = 0, readers2 = 0, unordered = 0, reentered = 0;
    long opened = 0, invalid = 0;
    for (size_t i = 0; i < L.ns; i++) {
        opened += L.s[i].open;
        invalid += !L.s[i].open && !L.s[i].valid;
    }

    for (int k = 0; k < nkeys; k++) {
        long m = 0;
        v_overlap +=
            sweep(keys[k], is_sem ? (int)limit : 1, is_rw, &m, &readers2);
        if (m > maxin)
            maxin = m;
    }

    /* Tokens: distinct per name, and increasing in the order the grants
     * surely had. */
    for (size_t i = 0; i < L.ns; i++) {
        sec *s = &L.s[i];
        for (size_t j = 0; j < L.ns; j++) {
            sec *p = &L.s[j];
            if (i == j || strcmp(s->key, p->key))
                continue;
            if (p->tok == s->tok) {
                if (p->wid == s->wid && j < i) {
                    reentered++;
                } else if (p->wid != s->wid && j < i) {
                    violation("token %llu on %s given twice: worker %d at "
                              "%lld and worker %d at %lld",
                              s->tok, s->key, p->wid, p->enter, s->wid,
                              s->enter);
                    v_token++;
                }
                continue;
            }
            if (p->tok < s->tok || p->enter >= s->enter)
                continue;
            /* p entered first with a higher token: a violation only when
             * p was surely granted first. */
            int sure = s->sent_after > p->enter ||
                       (exclusive(p->kind) && exclusive(s->kind) && !p->open &&
                        p->exit <= s->enter);
            if (sure) {
                violation("token order on %s: worker %d got %llu at %lld, "
                          "below %llu of worker %d granted before "
                          "(entered %lld)",
                          s->key, s->wid, s->tok, s->enter, p->tok, p->wid,
                          p->enter);
                v_token++;
            } else {
                unordered++;
            }
        }
    }

    /* Stale writes accepted. Late writes (begun after their own hold's
     * validity had run out: a paused holder's) are counted apart. */
    long accepted = 0, stale = 0, maybe = 0, late = 0, late_rej = 0;
    for (size_t i = 0; i < L.nw; i++) {
        wr *x = &L.w[i];
        accepted += x->rc == DLOCK_OK;
        stale += x->rc == DLOCK_STALE;
        maybe += x->rc == DLOCK_EIO || x->rc == DLOCK_ETIMEDOUT;
        sec *own = find_sec(x->wid, x->key, x->tok, 0);
        if (own && x->ws > own->upto) {
            late++;
            late_rej += x->rc == DLOCK_STALE;
        }
        if (x->rc != DLOCK_OK)
            continue;
        for (size_t j = 0; j < L.nw; j++) {
            wr *y = &L.w[j];
            if (y->rc == DLOCK_OK && !strcmp(y->key, x->key) &&
                y->tok > x->tok && y->wc < x->ws) {
                violation("stale write accepted on %s: worker %d token %llu "
                          "at %lld after token %llu (worker %d) was written",
                          x->key, x->wid, x->tok, x->ws, y->tok, y->wid);
                v_stale++;
                break;
            }
        }
    }

    /* Counters (exclusive writers' read-modify-write). */
    for (int c = 0; c < ncounters; c++) {
        char key[8] = "";
        long long val = -1;
        if (sscanf(counters[c], "%7[^=]=%lld", key, &val) != 2)
            continue;
        long acc = 0, unk = 0, unf = 0;
        for (size_t i = 0; i < L.nw; i++) {
            if (strcmp(L.w[i].key, key))
                continue;
            acc += L.w[i].rc == DLOCK_OK;
            unk += L.w[i].rc == DLOCK_EIO || L.w[i].rc == DLOCK_ETIMEDOUT;
        }
        for (size_t i = 0; i < L.ns; i++)
            unf +=
                L.s[i].open && L.s[i].kind != 'r' && !strcmp(L.s[i].key, key);
        if (val < acc || val > acc + unk + unf) {
            violation("counter %s: %lld, but %ld accepted writes (+%ld "
                      "unfinished, +%ld unknown outcome)",
                      key, val, acc, unf, unk);
            v_counter++;
        }
    }

    /* Unreported loss (exclusive holds). */
    long rel_lost = 0, rel_not_owner = 0;
    for (size_t i = 0; i < L.ns; i++) {
        sec *s = &L.s[i];
        rel_lost += s->rel == REL_LOST;
        rel_not_owner += s->rel == REL_NOT_OWNER;
        if (s->rel != REL_OK || !exclusive(s->kind))
            continue;
        for (size_t j = i + 1; j < L.ns && L.s[j].enter < s->exit; j++) {
            sec *o = &L.s[j];
            if (o->wid != s->wid && !strcmp(o->key, s->key) &&
                exclusive(o->kind) && o->sent_after > s->enter) {
                violation("unreported loss on %s: worker %d (token %llu, "
                          "%lld..%lld) released OK, but worker %d entered at "
                          "%lld",
                          s->key, s->wid, s->tok, s->enter, s->exit, o->wid,
                          o->enter);
                v_unreported++;
                break;
            }
        }
    }

    /* Liveness and what each primitive must show. */
    long killed = 0;
    for (size_t i = 0; i < L.nf; i++)
        for (size_t j = 0; j < L.nwi; j++)
            if (L.wi[j].pid == L.f[i].pid && !strcmp(L.f[i].sig, "KILL"))
                L.wi[j].killed = 1;
    for (size_t j = 0; j < L.nwi; j++)
        killed += L.wi[j].killed;
    char extra[600] = "";
    if (is_sem && maxin < limit) {
        violation("semaphore limit %lld never reached (at most %ld inside)",
                  limit, maxin);
        v_live++;
    }
    if (is_rw && readers2 == 0) {
        violation("no two readers were ever inside at once");
        v_live++;
    }
    if (is_multi) {
        long short_of = 0;
        for (size_t j = 0; j < L.nwi; j++) {
            worker_info *w = &L.wi[j];
            if (w->killed)
                continue;
            if (!w->done || w->rounds < rounds) {
                violation("worker %d did %d of %d rounds%s", w->wid, w->rounds,
                          rounds, w->done ? "" : " (no end)");
                short_of++;
            }
        }
        v_live += (int)short_of;
        long fin = 0;
        long long last = 0, first = 0;
        for (size_t j = 0; j < L.nwi; j++) {
            worker_info *w = &L.wi[j];
            if (w->killed || !w->done)
                continue;
            fin++;
            if (w->end - w->start > last)
                last = w->end - w->start;
            if (!first || w->end - w->start < first)
                first = w->end - w->start;
        }
        snprintf(extra, sizeof extra,
                 " workers_finished=%ld rounds_each=%d finish_ms=%lld..%lld",
                 fin, rounds, first / 1000000, last / 1000000);
    }
    if (is_elect) {
        /* Takeovers: a signalled leader's successor. */
        long long bound = limit * 1000000, gapb = gap_ms * 1000000, tk[256];
        int ntk = 0, missed = 0;
        for (size_t i = 0; i < L.nf; i++) {
            fault *f = &L.f[i];
            if (strcmp(f->sig, "KILL") && strcmp(f->sig, "STOP"))
                continue;
            int wid = -1;
            for (size_t j = 0; j < L.nwi; j++)
                if (L.wi[j].pid == f->pid)
                    wid = L.wi[j].wid;
            sec *vic = NULL;
            for (size_t j = 0; j < L.ns; j++)
                if (L.s[j].wid == wid && L.s[j].enter <= f->t &&
                    (L.s[j].open || L.s[j].exit >= f->t))
                    vic = &L.s[j];
            if (!vic) {
                missed++;
                continue;
            }
            sec *next = NULL;
            for (size_t j = 0; j < L.ns && !next; j++)
                if (L.s[j].wid != wid && L.s[j].enter >= f->t)
                    next = &L.s[j];
            long long end = 0;
            for (size_t j = 0; j < L.nwi; j++)
                if (!L.wi[j].killed && L.wi[j].done &&
                    (!end || L.wi[j].end < end))
                    end = L.wi[j].end;
            if (!next && end && end - f->t < bound)
                continue; /* the run ended first */
            long long t = next ? next->enter - f->t : -1;
            if (!next || t > bound) {
                violation("no new leader within %lld ms after %s of the "
                          "leader "
                          "(worker %d, epoch %llu) at %lld%s",
                          limit, f->sig, wid, vic->tok, f->t,
                          next ? "" : ": none at all");
                v_live++;
            }
            if (next && ntk < 256)
                tk[ntk++] = t / 1000000;
        }
        /* Gaps: from the end of one leader's valid time to the next
         * leader's entry, within the time every worker ran. */
        long long from = 0, to = 0, maxgap = 0;
        for (size_t j = 0; j < L.nwi; j++) {
            if (L.wi[j].start && (!from || L.wi[j].start < from))
                from = L.wi[j].start;
            if (!L.wi[j].killed && L.wi[j].done && (!to || L.wi[j].end < to))
                to = L.wi[j].end;
        }
        long long covered = from;
        for (size_t j = 0; j < L.ns; j++) {
            sec *s = &L.s[j];
            if (to && s->enter > to)
                break;
            long long gap = s->enter - covered;
            if (gap > maxgap)
                maxgap = gap;
            if (gap > gapb) {
                violation("no leader for %lld ms (%lld..%lld)", gap / 1000000,
                          covered, s->enter);
                v_live++;
            }
            if (s->upto > covered)
                covered = s->upto;
        }
        if (to && to - covered > gapb) {
            violation("no leader for %lld ms at the end (%lld..%lld)",
                      (to - covered) / 1000000, covered, to);
            v_live++;
        }
        /* The observer: epochs never go back. */
        unsigned long long seen = 0;
        long changes = 0;
        for (size_t i = 0; i < L.no; i++) {
            if (!L.o[i].leading)
                continue;
            changes++;
            if (L.o[i].epoch < seen) {
                violation("observer saw epoch %llu at %lld after %llu",
                          L.o[i].epoch, L.o[i].t, seen);
                v_token++;
            }
            if (L.o[i].epoch > seen)
                seen = L.o[i].epoch;
        }
        /* Sort the takeover times for the figures. */
        for (int x = 1; x < ntk; x++)
            for (int y = x; y > 0 && tk[y - 1] > tk[y]; y--) {
                long long t = tk[y];
                tk[y] = tk[y - 1];
                tk[y - 1] = t;
            }
        int o = snprintf(extra, sizeof extra,
                         " terms=%zu takeovers=%d missed_faults=%d "
                         "max_gap_ms=%lld observed=%ld takeover_ms=",
                         L.ns, ntk, missed, maxgap / 1000000, changes);
        for (int x = 0; x < ntk && o < (int)sizeof extra - 12; x++)
            o += snprintf(extra + o, sizeof extra - (size_t)o, "%s%lld",
                          x ? "," : "", tk[x]);
        if (!ntk)
            snprintf(extra + o, sizeof extra - (size_t)o, "-");
    }
    if (is_rw)
        snprintf(extra, sizeof extra, " reader_overlaps=%ld", readers2);
    printf("stats sections=%zu writes=%zu accepted=%ld stale_rejected=%ld "
           "late_writes=%ld late_rejected=%ld "
           "unknown_outcome=%ld unfinished=%ld invalid_at_exit=%ld "
           "max_inside=%ld tokens_unordered=%ld reentered=%ld "
           "released_lost=%ld released_not_owner=%ld killed=%ld "
           "overlaps=%d token_viol=%d stale_accepted=%d counter_viol=%d "
           "unreported_loss=%d liveness=%d%s violations=%d\n",
           L.ns, L.nw, accepted, stale, late, late_rej, maybe, opened, invalid,
           maxin, unordered, reentered, rel_lost, rel_not_owner, killed,
           v_overlap, v_token, v_stale, v_counter, v_unreported, v_live, extra,
           viol);
    return viol ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: chaos_prims sem|rw|multi|elect|observe|sig|"
                        "check ...\n");
        return 2;
    }
    if (!strcmp(argv[1], "sem"))
        return sem_worker(argc, argv);
    if (!strcmp(argv[1], "rw"))
        return rw_worker(argc, argv);
    if (!strcmp(argv[1], "multi"))
        return multi_worker(argc, argv);
    if (!strcmp(argv[1], "elect"))
        return elect_worker(argc, argv);
    if (!strcmp(argv[1], "observe"))
        return observe(argc, argv);
    if (!strcmp(argv[1], "sig"))
        return sig(argc, argv);
    if (!strcmp(argv[1], "check"))
        return check(argc, argv);
    fprintf(stderr, "chaos_prims: unknown mode %s\n", argv[1]);
    return 2;
}
