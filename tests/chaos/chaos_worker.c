/*
 * chaos_worker.c - the C half of the fault-injection suite (tests/chaos/run).
 *
 * One binary, several modes:
 *   worker  take the lock NAME again and again for a bounded time; inside
 *           each critical section read a counter with dlock_fenced_get and
 *           write counter+1 with dlock_fenced_set under the lock's token.
 *           Every section is logged (CLOCK_MONOTONIC, system-wide):
 *             E wid token enter_ns validity_ms
 *             X wid token enter_ns exit_ns valid read_fence ws_ns wc_ns wrc
 *             R wid token start_ns end_ns release_status
 *           and acquire failures as "F wid status start_ns end_ns".
 *           Options after the positional arguments:
 *           strategy=notify|spin|fair, ca=PATH.
 *   check   read worker logs and fail on a safety violation (see check()).
 *   try     one acquire against the given servers; prints the status name
 *           (Redlock quorum scenarios).
 *   badinput  every public call with invalid arguments, and a client
 *           against each fake-server mode; every call bounded by alarm().
 *
 * The shell driver starts servers, injects faults and reads the summary.
 */
#include <dlock.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chaos_common.h"
#include "harness.h"

/* Split a comma-separated list of URLs into a NULL-terminated array. */
static size_t split_urls(char *list, const char **out, size_t max)
{
    size_t n = 0;
    for (char *tok = strtok(list, ","); tok && n < max; tok = strtok(NULL, ","))
        out[n++] = tok;
    return n;
}

/* Worker options given as KEY=VALUE after the positional arguments. */
typedef struct wopts {
    dlock_wait_strategy strategy; /* strategy=notify|spin|fair */
    const char *ca;               /* ca=PATH: trust this CA (rediss://) */
} wopts;

/* Parse KEY=VALUE arguments into *w; 0, or -1 on an unknown one. */
static int parse_wopts(int argc, char **argv, wopts *w)
{
    w->strategy = DLOCK_WAIT_NOTIFY;
    w->ca = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strncmp(argv[i], "strategy=", 9) &&
            chaos_strategy(argv[i] + 9, &w->strategy) == 0)
            continue;
        if (!strncmp(argv[i], "ca=", 3)) {
            w->ca = argv[i] + 3;
            continue;
        }
        fprintf(stderr, "chaos_worker: unknown option %s\n", argv[i]);
        return -1;
    }
    return 0;
}

static dlock_client *make_client(char *urls, int64_t timeout_ms, const wopts *w)
{
    const char *servers[16];
    /* A sentinel URL has commas of its own: it is the only server. */
    size_t n = strncmp(urls, "redis+sentinel://", 17) == 0
                   ? (servers[0] = urls, 1)
                   : split_urls(urls, servers, 16);
    const char *e;
    dlock_options o;
    dlock_options_init(&o);
    o.servers = servers;
    o.nservers = n;
    o.connect_timeout_ms = timeout_ms;
    o.command_timeout_ms = timeout_ms;
    if (w) {
        o.wait_strategy = w->strategy;
        o.tls_ca_file = w->ca;
    }
    /* Durability settings of the sentinel scenarios. */
    if ((e = getenv("CHAOS_WAIT_REPLICAS")) != NULL)
        o.wait_replicas = atoi(e);
    if ((e = getenv("CHAOS_LOCK_DELAY_MS")) != NULL)
        o.lock_delay_ms = atoll(e);
    return chaos_client(&o);
}

/*
 * worker URLS NAME WID LOG SECONDS LEASE_MS HOLD_MS WATCHDOG HOLDERFILE
 *        [strategy=notify|spin|fair] [ca=PATH]
 * Runs for SECONDS, or until the file named by CHAOS_STOP_FILE (when set)
 * exists: it then ends after the section it is in; returns 0 (faults are
 * expected, failures are logged).
 */
static int worker(int argc, char **argv)
{
    wopts w;
    if (argc < 11 || parse_wopts(argc - 11, argv + 11, &w) != 0) {
        fprintf(stderr, "usage: worker URLS NAME WID LOG SECONDS LEASE_MS "
                        "HOLD_MS WATCHDOG HOLDERFILE [strategy=S] [ca=F]\n");
        return 2;
    }
    chaos_wk r;
    if (chaos_wk_open(&r, argv) != 0)
        return 2;
    const char *name = r.name;
    int wid = r.wid, fd = r.fd;
    int64_t until = r.until, lease = r.lease, hold = r.hold;
    int wd = atoi(argv[9]);
    const char *holderfile = argv[10];
    char key[600];
    snprintf(key, sizeof key, "chaos:{%s}:counter", name);
    const char *stopfile = getenv("CHAOS_STOP_FILE");
    dlock_client *c = make_client(r.urls, 300, &w);
    if (!c)
        return 2;
    for (int i = 0; i < 100000 && chaos_now_ns() < until &&
                    (stopfile == NULL || access(stopfile, F_OK) != 0);
         i++) {
        dlock_acquire_options ao;
        dlock_acquire_options_init(&ao);
        ao.wait_ms = 1000;
        ao.lease_ms = lease;
        ao.watchdog = wd;
        dlock_lock *l = NULL;
        int64_t asked = chaos_now_ns();
        int rc = dlock_lock_acquire_ex(&l, c, name, &ao);
        if (rc != DLOCK_OK) {
            chaos_log(fd, "F %d %s %lld %lld\n", wid, dlock_status_name(rc),
                      (long long)asked, (long long)chaos_now_ns());
            chaos_sleep_ms(1 + (int64_t)(chaos_rnd() % 20));
            continue;
        }
        uint64_t tok = dlock_lock_token(l);
        if (tok == 0) {
            /* The string layout without retention issues the token when
             * first asked: a hold lost (or a server not answering) by
             * then has none, and a fenced writer must not go in. */
            chaos_log(fd, "F %d NO_TOKEN %lld %lld\n", wid, (long long)asked,
                      (long long)chaos_now_ns());
            dlock_lock_release(l);
            continue;
        }
        int64_t enter = chaos_now_ns();
        chaos_log(fd, "E %d %llu %lld %lld\n", wid, (unsigned long long)tok,
                  (long long)enter, (long long)dlock_lock_validity_ms(l));
        if (holderfile[0] != '-') {
            char tmp[600], pid[32];
            snprintf(tmp, sizeof tmp, "%s.%d", holderfile, wid);
            int hf = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (hf >= 0) {
                int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
                if (write(hf, pid, (size_t)n) < 0)
                    perror("holder");
                close(hf);
                rename(tmp, holderfile);
            }
        }
        char *val = NULL;
        size_t len = 0;
        uint64_t fence = 0;
        long long counter = 0;
        int grc = dlock_fenced_get(c, key, &val, &len, &fence);
        if (grc == DLOCK_OK && val)
            counter = atoll(val);
        free(val);
        /* CHAOS_HOLD_FIXED: hold exactly HOLD_MS (a holder that must
         * still be inside when a failover is over). */
        if (hold > 0)
            chaos_sleep_ms(getenv("CHAOS_HOLD_FIXED") != NULL
                               ? hold
                               : (int64_t)(chaos_rnd() % (uint64_t)hold));
        int64_t ws = chaos_now_ns(), wc = ws;
        int wrc = grc;
        if (grc == DLOCK_OK) {
            char nv[32];
            int n = snprintf(nv, sizeof nv, "%lld", counter + 1);
            wrc = dlock_fenced_set(c, key, tok, nv, (size_t)n);
            wc = chaos_now_ns();
        }
        int valid =
            dlock_lock_validity_ms(l) > 0 && dlock_lock_status(l) == DLOCK_OK;
        int64_t exitt = chaos_now_ns();
        chaos_log(fd, "X %d %llu %lld %lld %d %llu %lld %lld %d\n", wid,
                  (unsigned long long)tok, (long long)enter, (long long)exitt,
                  valid, (unsigned long long)fence, (long long)ws,
                  (long long)wc, wrc);
        int64_t rs = chaos_now_ns();
        int rrc = dlock_lock_release(l);
        chaos_log(fd, "R %d %llu %lld %lld %s\n", wid, (unsigned long long)tok,
                  (long long)rs, (long long)chaos_now_ns(),
                  dlock_status_name(rrc));
        /* CHAOS_PAUSE_MS: rest up to that long after a release, so that
         * a contender of another process can take the lock. */
        if (getenv("CHAOS_PAUSE_MS") != NULL && atoll(getenv("CHAOS_PAUSE_MS")))
            chaos_sleep_ms((int64_t)(chaos_rnd() % (uint64_t)atoll(getenv(
                                                       "CHAOS_PAUSE_MS"))));
    }
    dlock_client_free(c);
    close(fd);
    return 0;
}

/* ---- checker ----------------------------------------------------------- */

/* How a section's release ended (its R line). */
enum { REL_NONE, REL_OK, REL_LOST, REL_NOT_OWNER, REL_OTHER };

typedef struct cs {
    int wid, valid, wrc, open, rel;
    unsigned long long tok, fence;
    long long enter, exit, ws, wc;
    long long granted_after; /* the server granted it after this (ns) */
} cs;

static int cmp_enter(const void *a, const void *b)
{
    const cs *x = a, *y = b;
    return x->enter < y->enter ? -1 : x->enter > y->enter;
}

/*
 * check LEASE_MS COUNTER_VALUE LOG...
 * Fails (prints "VIOLATION ..." lines, exits 1) when two workers were
 * inside at once both claiming validity, a token was not greater than
 * every earlier one (by enter time), or an accepted write carried a token
 * lower than one already accepted before it started. COUNTER_VALUE (or -1)
 * is the final counter: it must lie between the accepted writes logged and
 * that plus the sections left open by killed workers. A section another
 * worker entered during must not have been released with OK (the holder
 * has to learn that its hold was lost). Prints a stats line.
 */
static int check(int argc, char **argv)
{
    size_t cap = 1024, n = 0;
    cs *v = malloc(cap * sizeof *v);
    long long lease = atoll(argv[2]);
    long long counter = atoll(argv[3]);
    /* The client's validity at entry is lease - drift - (entry - the time
     * the granting request was sent); default drift: 1 % + 2 ms. */
    long long drift = lease / 100 + 2;
    int viol = 0;
    long fails = 0;
    for (int a = 4; a < argc; a++) {
        FILE *f = fopen(argv[a], "r");
        char line[512];
        if (!f)
            continue;
        while (fgets(line, sizeof line, f)) {
            cs x;
            memset(&x, 0, sizeof x);
            long long validity = 0;
            if (n == cap)
                v = realloc(v, (cap *= 2) * sizeof *v);
            if (line[0] == 'E' && sscanf(line, "E %d %llu %lld %lld", &x.wid,
                                         &x.tok, &x.enter, &validity) == 4) {
                /* Until its X line arrives it is open: claimed valid for
                 * the validity it had at entry. */
                x.open = 1;
                x.valid = validity > 0;
                x.exit = x.enter + validity * 1000000;
                x.wrc = 1;
                /* 2 ms for rounding; a fair handoff counts from the
                 * message's arrival, a little after the grant. */
                x.granted_after =
                    x.enter - (lease - drift - validity + 2) * 1000000;
                v[n++] = x;
            } else if (line[0] == 'X' &&
                       sscanf(line, "X %d %llu %lld %lld %d %llu %lld %lld %d",
                              &x.wid, &x.tok, &x.enter, &x.exit, &x.valid,
                              &x.fence, &x.ws, &x.wc, &x.wrc) == 9) {
                /* Close the matching E entry. */
                for (size_t i = n; i-- > 0;)
                    if (v[i].open && v[i].wid == x.wid &&
                        v[i].enter == x.enter) {
                        x.granted_after = v[i].granted_after;
                        v[i] = x;
                        break;
                    }
            } else if (line[0] == 'R') {
                /* The release of the last closed section of this worker
                 * with this token. */
                char st[32];
                long long rs = 0, re = 0;
                if (sscanf(line, "R %d %llu %lld %lld %31s", &x.wid, &x.tok,
                           &rs, &re, st) != 5)
                    continue;
                for (size_t i = n; i-- > 0;)
                    if (!v[i].open && v[i].wid == x.wid && v[i].tok == x.tok &&
                        v[i].rel == REL_NONE) {
                        v[i].rel = !strcmp(st, "OK")          ? REL_OK
                                   : !strcmp(st, "LOST")      ? REL_LOST
                                   : !strcmp(st, "NOT_OWNER") ? REL_NOT_OWNER
                                                              : REL_OTHER;
                        break;
                    }
            } else if (line[0] == 'F') {
                fails++;
            }
        }
        fclose(f);
    }
    qsort(v, n, sizeof *v, cmp_enter);
    unsigned long long maxtok = 0;
    int maxwid = -1;
    long reentered = 0, unordered = 0;
    int v_overlap = 0, v_token = 0, v_stale = 0, v_counter = 0;
    long accepted = 0, stale = 0, opened = 0, invalid = 0, maybe = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].open)
            opened++;
        if (!v[i].valid)
            invalid++;
        if (v[i].wrc == DLOCK_OK)
            accepted++;
        if (v[i].wrc == DLOCK_STALE)
            stale++;
        /* A write whose reply was lost (timeout, dropped connection) may
         * or may not have been applied. */
        if (v[i].wrc == DLOCK_EIO || v[i].wrc == DLOCK_ETIMEDOUT ||
            v[i].wrc == DLOCK_NOT_REPLICATED)
            maybe++;
        /* The same owner getting the same token again is a reentrant
         * acquire (its earlier release failed, e.g. the server was down):
         * allowed by the API, counted, not a violation. */
        if (i > 0 && v[i].tok == maxtok && v[i].wid == maxwid) {
            reentered++;
        } else if (i > 0 && v[i].tok <= maxtok) {
            /* Entry order is grant order while the lock excludes. When it
             * did not (sections overlapping: the lock was lost, e.g.
             * evicted), replies can arrive in another order than the
             * grants: only an earlier section k that was surely granted
             * before this one (k ended before this one entered, or this
             * one's request was sent after k entered) counts. */
            size_t k;
            for (k = 0; k < i; k++)
                if (v[k].tok >= v[i].tok &&
                    !(v[k].tok == v[i].tok && v[k].wid == v[i].wid) &&
                    (v[k].exit <= v[i].enter ||
                     v[i].granted_after > v[k].enter))
                    break;
            if (k < i) {
                printf("VIOLATION token: worker %d got %llu at %lld, not "
                       "above %llu granted earlier (worker %d at %lld)\n",
                       v[i].wid, v[i].tok, v[i].enter, v[k].tok, v[k].wid,
                       v[k].enter);
                viol++;
                v_token++;
            } else {
                unordered++;
            }
        }
        if (v[i].tok > maxtok) {
            maxtok = v[i].tok;
            maxwid = v[i].wid;
        }
        for (size_t j = i + 1; j < n && v[j].enter < v[i].exit; j++) {
            if (v[i].valid && v[j].valid && v[i].wid != v[j].wid) {
                printf("VIOLATION overlap: worker %d (token %llu, %lld..%lld)"
                       " and worker %d (token %llu, %lld..%lld) both valid\n",
                       v[i].wid, v[i].tok, v[i].enter, v[i].exit, v[j].wid,
                       v[j].tok, v[j].enter, v[j].exit);
                viol++;
                v_overlap++;
            }
        }
    }
    /* Stale write accepted: A accepted with token Ta although a write with
     * a higher token had already been accepted before A started. */
    for (size_t i = 0; i < n; i++) {
        if (v[i].wrc != DLOCK_OK || v[i].open)
            continue;
        for (size_t j = 0; j < n; j++)
            if (v[j].wrc == DLOCK_OK && !v[j].open && v[j].tok > v[i].tok &&
                v[j].wc < v[i].ws) {
                printf("VIOLATION stale write accepted: worker %d token %llu"
                       " after token %llu was written\n",
                       v[i].wid, v[i].tok, v[j].tok);
                viol++;
                v_stale++;
                break;
            }
    }
    /* Lost hold reported as released: another worker entered while this
     * one was inside (its hold was gone: expired, evicted, taken over),
     * yet its release said OK. The holder must learn of the loss, at the
     * latest from the release (LOST or NOT_OWNER). */
    int v_unreported = 0;
    long rel_lost = 0, rel_not_owner = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].rel == REL_LOST)
            rel_lost++;
        if (v[i].rel == REL_NOT_OWNER)
            rel_not_owner++;
        if (v[i].rel != REL_OK)
            continue;
        /* Only a j granted after i entered (see the token check). */
        for (size_t j = i + 1; j < n && v[j].enter < v[i].exit; j++)
            if (v[j].wid != v[i].wid && v[j].granted_after > v[i].enter) {
                printf("VIOLATION unreported loss: worker %d (token %llu, "
                       "%lld..%lld) released OK, but worker %d entered at "
                       "%lld (token %llu)\n",
                       v[i].wid, v[i].tok, v[i].enter, v[i].exit, v[j].wid,
                       v[j].enter, v[j].tok);
                viol++;
                v_unreported++;
                break;
            }
    }
    if (counter >= 0 &&
        (counter < accepted || counter > accepted + opened + maybe)) {
        printf("VIOLATION counter: %lld, but %ld accepted writes logged "
               "(+%ld unfinished, +%ld with unknown outcome)\n",
               counter, accepted, opened, maybe);
        viol++;
        v_counter++;
    }
    printf("stats sections=%zu accepted=%ld stale_rejected=%ld "
           "unknown_outcome=%ld unfinished=%ld invalid_at_exit=%ld "
           "acquire_failures=%ld reentered=%ld tokens_unordered=%ld "
           "released_lost=%ld "
           "released_not_owner=%ld overlaps=%d token_viol=%d "
           "stale_accepted=%d counter_viol=%d unreported_loss=%d "
           "violations=%d\n",
           n, accepted, stale, maybe, opened, invalid, fails, reentered,
           unordered, rel_lost, rel_not_owner, v_overlap, v_token, v_stale,
           v_counter, v_unreported, viol);
    free(v);
    (void)argc;
    return viol ? 1 : 0;
}

/* try URLS NAME LEASE_MS: one acquire; prints the status name, releases. */
static int try_once(int argc, char **argv)
{
    if (argc < 5)
        return 2;
    dlock_client *c = make_client(argv[2], 300, NULL);
    if (!c)
        return 2;
    dlock_lock *l = NULL;
    int rc = dlock_lock_acquire(&l, c, argv[3], 0, atoll(argv[4]));
    printf("%s\n", dlock_status_name(rc));
    if (l)
        dlock_lock_release(l);
    dlock_client_free(c);
    return 0;
}

/* ---- bad input --------------------------------------------------------- */

static int bad_fail;

/* A status must be one of the list's codes. */
static int known(int rc)
{
    return strcmp(dlock_status_name(rc), "UNKNOWN") != 0;
}

#define EXPECT(cond, what)                                                     \
    do {                                                                       \
        if (!(cond)) {                                                         \
            printf("VIOLATION badinput: %s (line %d)\n", what, __LINE__);      \
            bad_fail++;                                                        \
        }                                                                      \
    } while (0)

/* One client against fake server MODE: every call must return a known
 * error code within the bound. */
static void against_fake(const char *mode)
{
    int port = th_fake_server_start(mode);
    if (port < 0) {
        printf("VIOLATION badinput: fake server %s did not start\n", mode);
        bad_fail++;
        return;
    }
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    dlock_client *c = make_client(url, 200, NULL);
    EXPECT(c != NULL, "client for fake server");
    if (!c) {
        th_fake_server_stop(port);
        return;
    }
    int64_t t0 = chaos_now_ns();
    alarm(20);
    dlock_lock *l = NULL;
    int rc = dlock_lock_acquire(&l, c, "x", 0, 1000);
    EXPECT(rc != DLOCK_OK && known(rc) && l == NULL, "acquire vs fake");
    rc = dlock_lock_acquire(&l, c, "x", 300, 1000);
    EXPECT(rc != DLOCK_OK && known(rc) && l == NULL, "waiting acquire vs fake");
    dlock_info info;
    memset(&info, 0, sizeof info);
    rc = dlock_lock_inspect(c, "x", &info);
    if (rc == DLOCK_OK)
        printf("   inspect vs %s gave OK: held=%d owner='%s' reentry=%lld "
               "ttl_ms=%lld last_token=%llu nodes_holding=%d\n",
               mode, info.held, info.owner, (long long)info.reentry,
               (long long)info.ttl_ms, (unsigned long long)info.last_token,
               info.nodes_holding);
    EXPECT(rc != DLOCK_OK && known(rc), "inspect vs fake");
    char *val = NULL;
    size_t len = 0;
    uint64_t fence = 0;
    rc = dlock_fenced_get(c, "k", &val, &len, &fence);
    EXPECT(rc != DLOCK_OK && known(rc), "fenced_get vs fake");
    free(val);
    rc = dlock_fenced_set(c, "k", 5, "v", 1);
    EXPECT(rc != DLOCK_OK && known(rc), "fenced_set vs fake");
    rc = dlock_lock_adopt(&l, c, "x", "a:b", 1);
    EXPECT(rc != DLOCK_OK && known(rc), "adopt vs fake");
    alarm(0);
    int64_t ms = (chaos_now_ns() - t0) / 1000000;
    EXPECT(ms < 10000, "calls vs fake server took too long");
    printf("fake %-9s ok in %lld ms (%s)\n", mode, (long long)ms,
           dlock_errmsg(c));
    dlock_client_free(c);
    th_fake_server_stop(port);
}

static int badinput(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    alarm(60); /* the whole mode: a hang dies by SIGALRM, the driver sees it */
    dlock_options o;
    dlock_options_init(&o);
    dlock_client *c = NULL;
    char err[128];
    EXPECT(dlock_client_new(NULL, &o, err, sizeof err) == DLOCK_EINVAL,
           "client_new(NULL out)");
    EXPECT(dlock_client_new(&c, NULL, err, sizeof err) == DLOCK_EINVAL && !c,
           "client_new(NULL opts)");
    EXPECT(dlock_client_new(&c, &o, NULL, 0) == DLOCK_EINVAL && !c,
           "client_new(no servers)");
    const char *bad[] = {
        "",         "redis://",     "redis://h:0", "redis://h:70000",
        "http://h", "redis://[::1", "unix://",     NULL};
    for (int i = 0; bad[i]; i++) {
        o.servers = &bad[i];
        o.nservers = 1;
        EXPECT(dlock_client_new(&c, &o, err, sizeof err) == DLOCK_EINVAL && !c,
               bad[i]);
    }
    const char *nul[] = {NULL};
    o.servers = nul;
    EXPECT(dlock_client_new(&c, &o, err, sizeof err) == DLOCK_EINVAL,
           "NULL url");
    o.servers = NULL;
    o.nservers = 3;
    EXPECT(dlock_client_new(&c, &o, err, sizeof err) == DLOCK_EINVAL,
           "NULL servers with nservers 3");
    const char *good[] = {"redis://127.0.0.1:1"};
    dlock_options_init(&o);
    o.servers = good;
    o.nservers = 1;
    o.command_timeout_ms = -5;
    EXPECT(dlock_client_new(&c, &o, err, sizeof err) == DLOCK_EINVAL,
           "negative timeout");
    dlock_options_init(&o);
    o.servers = good;
    o.nservers = 1;
    o.version = 99;
    int rc = dlock_client_new(&c, &o, err, sizeof err);
    EXPECT(rc == DLOCK_EINVAL, "options version 99");
    dlock_client_free(c);
    c = NULL;
    dlock_options_init(&o);
    o.servers = good;
    o.nservers = 1;
    o.connect_timeout_ms = 200;
    o.command_timeout_ms = 200;
    rc = dlock_client_new(&c, &o, err, sizeof err);
    EXPECT(rc == DLOCK_OK && c, "client for closed port");
    if (c) {
        dlock_lock *l = NULL;
        char big[600];
        memset(big, 'a', sizeof big - 1);
        big[sizeof big - 1] = 0;
        EXPECT(dlock_lock_acquire(NULL, c, "x", 0, 1000) == DLOCK_EINVAL,
               "acquire NULL out");
        EXPECT(dlock_lock_acquire(&l, NULL, "x", 0, 1000) == DLOCK_EINVAL,
               "acquire NULL client");
        EXPECT(dlock_lock_acquire(&l, c, NULL, 0, 1000) == DLOCK_EINVAL,
               "acquire NULL name");
        EXPECT(dlock_lock_acquire(&l, c, "", 0, 1000) == DLOCK_EINVAL,
               "acquire empty name");
        EXPECT(dlock_lock_acquire(&l, c, big, 0, 1000) == DLOCK_EINVAL,
               "acquire 599-byte name");
        EXPECT(dlock_lock_acquire(&l, c, "x", 0, 0) == DLOCK_EINVAL,
               "acquire lease 0");
        EXPECT(dlock_lock_acquire(&l, c, "x", 0, -1) == DLOCK_EINVAL,
               "acquire lease -1");
        dlock_acquire_options ao;
        dlock_acquire_options_init(&ao);
        ao.version = 77;
        EXPECT(dlock_lock_acquire_ex(&l, c, "x", &ao) == DLOCK_EINVAL,
               "acquire_ex version 77");
        rc = dlock_lock_acquire(&l, c, "x", 0, 1000);
        EXPECT((rc == DLOCK_EIO || rc == DLOCK_ETIMEDOUT) && !l,
               "acquire on closed port is EIO");
        EXPECT(dlock_lock_release(NULL) == DLOCK_EINVAL, "release NULL");
        EXPECT(dlock_lock_extend(NULL, 1000) == DLOCK_EINVAL, "extend NULL");
        EXPECT(dlock_lock_token(NULL) == 0, "token NULL");
        EXPECT(dlock_lock_validity_ms(NULL) == 0, "validity NULL");
        EXPECT(dlock_lock_status(NULL) != DLOCK_OK, "status NULL");
        EXPECT(dlock_fenced_set(NULL, "k", 1, "v", 1) == DLOCK_EINVAL,
               "fenced_set NULL client");
        EXPECT(dlock_fenced_set(c, NULL, 1, "v", 1) == DLOCK_EINVAL,
               "fenced_set NULL key");
        EXPECT(dlock_fenced_set(c, "k", 1, NULL, 1) == DLOCK_EINVAL,
               "fenced_set NULL value with len 1");
        EXPECT(dlock_fenced_get(c, "k", NULL, NULL, NULL) == DLOCK_EINVAL,
               "fenced_get NULL outs");
        EXPECT(dlock_lock_inspect(c, "x", NULL) == DLOCK_EINVAL,
               "inspect NULL out");
        EXPECT(dlock_lock_inspect(NULL, "x", NULL) == DLOCK_EINVAL,
               "inspect NULL client");
        EXPECT(dlock_lock_adopt(&l, c, "x", NULL, 1) == DLOCK_EINVAL,
               "adopt NULL owner");
        EXPECT(dlock_with_lock(c, "x", NULL, NULL, NULL, NULL) == DLOCK_EINVAL,
               "with_lock NULL fn");
        EXPECT(strcmp(dlock_strerror(-999), "unknown status") == 0,
               "strerror(-999)");
        dlock_client_cancel(NULL);
        dlock_client_stats(NULL, NULL);
        dlock_client_free(c);
    }
    dlock_client_free(NULL);
    alarm(0);
    const char *modes[] = {"garbage", "silent",    "truncate",
                           "close",   "wrongtype", "http"};
    for (int i = 0; i < 6; i++)
        against_fake(modes[i]);
    printf("stats badinput violations=%d\n", bad_fail);
    return bad_fail ? 1 : 0;
}

/* ---- delaying TCP proxy ------------------------------------------------- */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

/* Bytes in flight one way: delivered at `at` (ns), in order. */
typedef struct chunk {
    struct chunk *next;
    int64_t at;
    size_t len, off;
    char data[];
} chunk;

typedef struct pipe_dir {
    chunk *head, *tail;
} pipe_dir;

typedef struct pconn {
    int fd[2];      /* 0: client side, 1: server side */
    pipe_dir to[2]; /* to[k]: bytes waiting to be written to fd[k] */
    int closing;    /* one side closed: flush, then close both */
} pconn;

static int64_t read_delay_ms(const char *path)
{
    FILE *f = fopen(path, "re");
    long long v = 0;
    if (f) {
        if (fscanf(f, "%lld", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v < 0 ? 0 : v;
}

static void pconn_free(pconn *p)
{
    for (int k = 0; k < 2; k++) {
        if (p->fd[k] >= 0)
            close(p->fd[k]);
        p->fd[k] = -1;
        while (p->to[k].head) {
            chunk *c = p->to[k].head;
            p->to[k].head = c->next;
            free(c);
        }
        p->to[k].tail = NULL;
    }
}

/* An address to listen on or connect to: TCP on loopback or a unix
 * socket. */
typedef struct paddr {
    int family;
    struct sockaddr_storage ss;
    socklen_t len;
} paddr;

/* TARGET "/path" is a unix socket, anything else a loopback port. */
static void paddr_of(paddr *p, const char *target)
{
    memset(p, 0, sizeof *p);
    if (target[0] == '/') {
        struct sockaddr_un *u = (struct sockaddr_un *)&p->ss;
        u->sun_family = AF_UNIX;
        snprintf(u->sun_path, sizeof u->sun_path, "%s", target);
        p->family = AF_UNIX;
        p->len = sizeof *u;
    } else {
        struct sockaddr_in *in = (struct sockaddr_in *)&p->ss;
        in->sin_family = AF_INET;
        in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        in->sin_port = htons((uint16_t)atoi(target));
        p->family = AF_INET;
        p->len = sizeof *in;
    }
}

/*
 * proxy PORTFILE TARGET DELAYFILE SECONDS
 * Forwards each connection to TARGET (a loopback port, or a unix socket
 * when it starts with '/'), holding every chunk of bytes (both ways) for
 * the delay in DELAYFILE (ms, re-read every 50 ms) before passing it on,
 * in order. Listens on a free loopback port, or for a unix TARGET on the
 * unix socket PORTFILE.sock; writes the port or the path to PORTFILE.
 * Exits after SECONDS. Loopback only; no qdisc.
 */
static int proxy(int argc, char **argv)
{
    if (argc < 6)
        return 2;
    paddr tgt, lst;
    char lpath[512];
    paddr_of(&tgt, argv[3]);
    snprintf(lpath, sizeof lpath, "%s.sock", argv[2]);
    paddr_of(&lst, tgt.family == AF_UNIX ? lpath : "0");
    const char *delayfile = argv[4];
    int64_t until = chaos_now_ns() + atoll(argv[5]) * 1000000000LL;
    signal(SIGPIPE, SIG_IGN);
    if (tgt.family == AF_UNIX)
        unlink(lpath);
    int lfd = socket(lst.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t al = lst.len;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&lst.ss, lst.len) != 0 ||
        listen(lfd, 64) != 0 ||
        getsockname(lfd, (struct sockaddr *)&lst.ss, &al) != 0) {
        perror("proxy: listen");
        return 2;
    }
    FILE *pf = fopen(argv[2], "w");
    if (!pf)
        return 2;
    if (tgt.family == AF_UNIX)
        fprintf(pf, "%s\n", lpath);
    else
        fprintf(pf, "%d\n", ntohs(((struct sockaddr_in *)&lst.ss)->sin_port));
    fclose(pf);
    enum { MAXC = 128 };
    static pconn cs_[MAXC];
    for (int i = 0; i < MAXC; i++)
        cs_[i].fd[0] = cs_[i].fd[1] = -1;
    int64_t delay = 0, next_read = 0;
    while (chaos_now_ns() < until) {
        int64_t now = chaos_now_ns();
        if (now >= next_read) {
            delay = read_delay_ms(delayfile);
            next_read = now + 50000000LL;
        }
        struct pollfd pfd[1 + 2 * MAXC];
        int map[1 + 2 * MAXC];
        int n = 0;
        pfd[n].fd = lfd;
        pfd[n].events = POLLIN;
        map[n++] = -1;
        int64_t wake = now + 50000000LL;
        for (int i = 0; i < MAXC; i++) {
            pconn *p = &cs_[i];
            if (p->fd[0] < 0)
                continue;
            for (int k = 0; k < 2; k++) {
                short ev = p->closing ? 0 : POLLIN;
                chunk *h = p->to[k].head;
                if (h && h->at <= now)
                    ev |= POLLOUT;
                else if (h && h->at < wake)
                    wake = h->at;
                pfd[n].fd = p->fd[k];
                pfd[n].events = ev;
                map[n++] = i * 2 + k;
            }
        }
        int tmo = (int)((wake - now) / 1000000) + 1;
        if (poll(pfd, (nfds_t)n, tmo) < 0 && errno != EINTR)
            break;
        now = chaos_now_ns();
        if (pfd[0].revents & POLLIN) {
            int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            int slot = -1;
            for (int i = 0; i < MAXC && cfd >= 0; i++)
                if (cs_[i].fd[0] < 0) {
                    slot = i;
                    break;
                }
            if (cfd >= 0 && slot < 0)
                close(cfd);
            if (slot >= 0) {
                int sfd = socket(tgt.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (sfd < 0 ||
                    connect(sfd, (struct sockaddr *)&tgt.ss, tgt.len) != 0) {
                    close(cfd);
                    if (sfd >= 0)
                        close(sfd);
                } else {
                    fcntl(sfd, F_SETFL, O_NONBLOCK);
                    memset(&cs_[slot], 0, sizeof cs_[slot]);
                    cs_[slot].fd[0] = cfd;
                    cs_[slot].fd[1] = sfd;
                }
            }
        }
        for (int j = 1; j < n; j++) {
            int i = map[j] / 2, k = map[j] % 2;
            pconn *p = &cs_[i];
            if (p->fd[0] < 0)
                continue;
            if (pfd[j].revents & (POLLIN | POLLHUP | POLLERR)) {
                char buf[16384];
                ssize_t r = read(p->fd[k], buf, sizeof buf);
                if (r > 0) {
                    chunk *c = malloc(sizeof *c + (size_t)r);
                    if (!c)
                        abort();
                    c->next = NULL;
                    c->at = now + delay * 1000000;
                    c->len = (size_t)r;
                    c->off = 0;
                    memcpy(c->data, buf, (size_t)r);
                    pipe_dir *d = &p->to[1 - k];
                    if (d->tail)
                        d->tail->next = c;
                    else
                        d->head = c;
                    d->tail = c;
                } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
                    p->closing = 1;
                }
            }
            if (pfd[j].revents & POLLOUT) {
                pipe_dir *d = &p->to[k];
                while (d->head && d->head->at <= now) {
                    chunk *c = d->head;
                    ssize_t w = send(p->fd[k], c->data + c->off,
                                     c->len - c->off, MSG_NOSIGNAL);
                    if (w < 0) {
                        if (errno != EAGAIN)
                            p->closing = 1;
                        break;
                    }
                    c->off += (size_t)w;
                    if (c->off < c->len)
                        break;
                    d->head = c->next;
                    if (!d->head)
                        d->tail = NULL;
                    free(c);
                }
            }
            /* A closed side: deliver what is due, then close both (the
             * delayed close is what a slow network does too). */
            if (p->closing && !p->to[0].head && !p->to[1].head)
                pconn_free(p);
        }
    }
    for (int i = 0; i < MAXC; i++)
        if (cs_[i].fd[0] >= 0)
            pconn_free(&cs_[i]);
    close(lfd);
    if (tgt.family == AF_UNIX)
        unlink(lpath);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: chaos_worker worker|check|try|badinput ...\n");
        return 2;
    }
    if (!strcmp(argv[1], "worker"))
        return worker(argc, argv);
    if (!strcmp(argv[1], "check") && argc >= 4)
        return check(argc, argv);
    if (!strcmp(argv[1], "try"))
        return try_once(argc, argv);
    if (!strcmp(argv[1], "proxy"))
        return proxy(argc, argv);
    if (!strcmp(argv[1], "badinput"))
        return badinput(argc, argv);
    fprintf(stderr, "chaos_worker: unknown mode %s\n", argv[1]);
    return 2;
}
