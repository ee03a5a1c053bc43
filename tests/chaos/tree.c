/*
 * tree.c - chaos_tree, the process-tree half of tests/chaos/run's
 * `dlock_run_tree` scenario: `dlock run` (the real CLI) with a job of
 * several processes on three levels, under SIGKILL of dlock, lost leases,
 * SIGSTOP of dlock and forwarded signals.
 *
 * The processes of a job are told apart by their environment, which every
 * process of the tree inherits: CHAOS_TREE (the scenario run's marker, set
 * by the driver on dlock), CHAOS_WID (the worker loop) and
 * DLOCK_FENCING_TOKEN (set by dlock run for COMMAND: it names the hold).
 * dlock and its guard have the first two only. So a look through
 * /proc/PID/environ finds every live process of every job of the run, the
 * shells between the logged nodes included, with the hold it belongs to.
 *
 * Modes (every time is CLOCK_MONOTONIC in ns, comparable across processes;
 * every log line is one write(2) to a file opened O_APPEND, so lines of
 * concurrent processes do not mix and a SIGKILL leaves whole lines):
 *
 *   node LOG ROLE MIN_MS MAX_MS [stubborn]
 *       One process of a job: logs "S tok wid pid ns role", then looks
 *       (twice) for live processes of the run with another token and logs
 *       each as "O tok pid ns othertok otherpid state"; then lives for a
 *       random MIN_MS..MAX_MS and logs "X tok wid pid ns done". On
 *       SIGTERM or SIGINT it logs "X ... term" and exits; with `stubborn`
 *       it ignores both (logging "I tok wid pid ns SIG") and only SIGKILL
 *       ends it early.
 *   after LOG WID RC
 *       Called by a worker loop right after its dlock exited with status
 *       RC: logs "Q wid rc ns", and "Z wid ns tok pid state" for every
 *       process of that worker's jobs still alive (outlived its dlock).
 *   log LOG WORD...
 *       The driver's fault records: the words and the time, one line
 *       ("K tok ns" dlock SIGKILLed, "L tok ns" lease deleted, "P tok ns"
 *       dlock SIGSTOPped past its lease, "G tok SIG ns" signal to dlock,
 *       "A tok pid state ns" a process of a SIGKILLed dlock's job alive
 *       when that hold's key was gone).
 *   scan MARKER
 *       Print "pid tok state" for every live process of the run that
 *       carries a token (the end-of-scenario check and the cleanup).
 *   check LOG...
 *       The checker, see check() below. Prints VIOLATION lines and a stats
 *       line; exits 1 on a violation.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* CLOCK_MONOTONIC in nanoseconds: comparable across processes. */
static long long now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Append one line to PATH in one write(2). Errors are reported, not
 * fatal: a missing line shows up in the checker's counts. */
static void logline(const char *path, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void logline(const char *path, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    int fd, n;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n <= 0 || (size_t)n >= sizeof buf)
        return;
    fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, buf, (size_t)n) != n)
        perror("chaos_tree: log");
    if (fd >= 0)
        close(fd);
}

/* ---- looking through /proc ---------------------------------------------- */

/* What a process's environment says about it. */
struct penv {
    int marked;             /* CHAOS_TREE equals the marker */
    int wid;                /* CHAOS_WID, -1 when absent */
    unsigned long long tok; /* DLOCK_FENCING_TOKEN, 0 when absent */
    char state;             /* from /proc/PID/stat */
};

/* Read /proc/PID/environ and stat into *e. Returns 0, or -1 when the
 * process is gone or unreadable. */
static int read_penv(long pid, const char *marker, struct penv *e)
{
    static char buf[1 << 18];
    char path[64];
    size_t len = 0, mlen = strlen(marker);
    ssize_t n;
    int fd;

    memset(e, 0, sizeof *e);
    e->wid = -1;
    snprintf(path, sizeof path, "/proc/%ld/environ", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    while (len < sizeof buf - 1 &&
           (n = read(fd, buf + len, sizeof buf - 1 - len)) > 0)
        len += (size_t)n;
    close(fd);
    buf[len] = '\0';
    for (size_t i = 0; i < len; i += strlen(buf + i) + 1) {
        const char *v = buf + i;

        if (!strncmp(v, "CHAOS_TREE=", 11) && !strncmp(v + 11, marker, mlen) &&
            v[11 + mlen] == '\0')
            e->marked = 1;
        else if (!strncmp(v, "CHAOS_WID=", 10))
            e->wid = atoi(v + 10);
        else if (!strncmp(v, "DLOCK_FENCING_TOKEN=", 20))
            e->tok = strtoull(v + 20, NULL, 10);
    }
    if (!e->marked)
        return 0;
    /* The state follows the last ')' (the command name may hold one). */
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    n = read(fd, buf, 511);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    {
        char *p = strrchr(buf, ')');

        e->state = p != NULL && p[1] == ' ' ? p[2] : '?';
    }
    return 0;
}

/* A process that still runs: not a zombie, not dead. A stopped one runs
 * for our purposes (it continues when told). */
static int live(char state)
{
    return state != 'Z' && state != 'X' && state != 'x' && state != '?';
}

/* Call FN for every live process carrying MARKER and a token. */
static void scan(const char *marker,
                 void (*fn)(long pid, const struct penv *e, void *arg),
                 void *arg)
{
    DIR *d = opendir("/proc");
    struct dirent *de;
    long self = (long)getpid();

    if (d == NULL) {
        perror("chaos_tree: /proc");
        return;
    }
    while ((de = readdir(d)) != NULL) {
        struct penv e;
        long pid;

        if (!isdigit((unsigned char)de->d_name[0]))
            continue;
        pid = atol(de->d_name);
        if (pid == self || read_penv(pid, marker, &e) < 0)
            continue;
        if (e.marked && e.tok != 0 && live(e.state))
            fn(pid, &e, arg);
    }
    closedir(d);
}

/* ---- node ----------------------------------------------------------------- */

static volatile sig_atomic_t got_sig;

static void on_sig(int s)
{
    got_sig = s;
}

struct node_ctx {
    const char *log;
    unsigned long long tok;
    long long seen[64]; /* foreign pids already logged */
    int nseen;
};

/* A live process of another hold: log it once. */
static void node_found(long pid, const struct penv *e, void *arg)
{
    struct node_ctx *c = arg;

    if (e->tok == c->tok)
        return;
    for (int i = 0; i < c->nseen; i++)
        if (c->seen[i] == pid)
            return;
    if (c->nseen < 64)
        c->seen[c->nseen++] = pid;
    logline(c->log, "O %llu %ld %lld %llu %ld %c\n", c->tok, (long)getpid(),
            now_ns(), e->tok, pid, e->state);
}

static int node(int argc, char **argv)
{
    const char *marker = getenv("CHAOS_TREE"),
               *t = getenv("DLOCK_FENCING_TOKEN");
    const char *w = getenv("CHAOS_WID");
    struct node_ctx c;
    struct sigaction sa;
    long long lo, hi, hold, until;
    uint32_t r = 0;
    int stubborn = argc > 6 && !strcmp(argv[6], "stubborn");
    int wid = w != NULL ? atoi(w) : -1;

    if (argc < 6 || marker == NULL || t == NULL) {
        fprintf(stderr, "usage: node LOG ROLE MIN_MS MAX_MS [stubborn] (with "
                        "CHAOS_TREE and DLOCK_FENCING_TOKEN set)\n");
        return 2;
    }
    memset(&c, 0, sizeof c);
    c.log = argv[2];
    c.tok = strtoull(t, NULL, 10);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sig;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    logline(c.log, "S %llu %d %ld %lld %s\n", c.tok, wid, (long)getpid(),
            now_ns(), argv[3]);
    /* Twice: a process of another hold that forks and exits between the
     * two slots of /proc the first look read is found the second time. */
    scan(marker, node_found, &c);
    scan(marker, node_found, &c);
    if (getrandom(&r, sizeof r, 0) != sizeof r)
        r = (uint32_t)now_ns();
    lo = atoll(argv[4]);
    hi = atoll(argv[5]);
    hold = lo + (hi > lo ? (long long)(r % (uint32_t)(hi - lo + 1)) : 0);
    until = now_ns() + hold * 1000000;
    for (;;) {
        long long left = until - now_ns();
        struct timespec ts;

        if (got_sig != 0) {
            int s = got_sig;

            got_sig = 0;
            if (!stubborn) {
                logline(c.log, "X %llu %d %ld %lld term\n", c.tok, wid,
                        (long)getpid(), now_ns());
                return 128 + s;
            }
            logline(c.log, "I %llu %d %ld %lld %s\n", c.tok, wid,
                    (long)getpid(), now_ns(), s == SIGTERM ? "TERM" : "INT");
        }
        if (left <= 0)
            break;
        ts.tv_sec = left / 1000000000;
        ts.tv_nsec = left % 1000000000;
        nanosleep(&ts, NULL); /* a signal ends it early: looked at above */
    }
    logline(c.log, "X %llu %d %ld %lld done\n", c.tok, wid, (long)getpid(),
            now_ns());
    return 0;
}

/* ---- after, log, scan ----------------------------------------------------- */

struct after_ctx {
    const char *log;
    int wid;
};

static void after_found(long pid, const struct penv *e, void *arg)
{
    struct after_ctx *c = arg;

    if (e->wid == c->wid)
        logline(c->log, "Z %d %lld %llu %ld %c\n", c->wid, now_ns(), e->tok,
                pid, e->state);
}

static int after(int argc, char **argv)
{
    const char *marker = getenv("CHAOS_TREE");
    struct after_ctx c;

    if (argc < 5 || marker == NULL) {
        fprintf(stderr, "usage: after LOG WID RC (with CHAOS_TREE set)\n");
        return 2;
    }
    c.log = argv[2];
    c.wid = atoi(argv[3]);
    logline(c.log, "Q %d %d %lld\n", c.wid, atoi(argv[4]), now_ns());
    scan(marker, after_found, &c);
    return 0;
}

static int log_words(int argc, char **argv)
{
    char line[400] = "";
    size_t n = 0;

    if (argc < 4) {
        fprintf(stderr, "usage: log LOG WORD...\n");
        return 2;
    }
    for (int i = 3; i < argc && n < 300; i++)
        n += (size_t)snprintf(line + n, sizeof line - n, "%s ", argv[i]);
    logline(argv[2], "%s%lld\n", line, now_ns());
    return 0;
}

static void print_found(long pid, const struct penv *e, void *arg)
{
    (void)arg;
    printf("%ld %llu %c\n", pid, e->tok, e->state);
}

/* ---- checker -------------------------------------------------------------- */

/* One logged process of a job. */
struct proc {
    unsigned long long tok;
    long pid;
    long long start, end; /* end -1: no X line (killed) */
};

/* One hold (token): what the driver did to it. */
struct hold {
    unsigned long long tok;
    long long first; /* first S of its job */
    int killed, lost, paused, signalled;
};

static struct proc *procs;
static size_t nprocs, capprocs;
static struct hold *holds;
static size_t nholds, capholds;

static struct hold *hold_of(unsigned long long tok)
{
    for (size_t i = 0; i < nholds; i++)
        if (holds[i].tok == tok)
            return &holds[i];
    if (nholds == capholds) {
        capholds = capholds ? capholds * 2 : 256;
        holds = realloc(holds, capholds * sizeof *holds);
    }
    memset(&holds[nholds], 0, sizeof *holds);
    holds[nholds].tok = tok;
    holds[nholds].first = -1;
    return &holds[nholds++];
}

/* An overlap of two holds, the older one first, counted once. */
struct pair {
    unsigned long long a, b;
    char how; /* 's' found alive by a look, 'l' from the logged times */
};
static struct pair *pairs;
static size_t npairs, cappairs;

static void add_pair(unsigned long long x, unsigned long long y, char how)
{
    unsigned long long a = x < y ? x : y, b = x < y ? y : x;

    for (size_t i = 0; i < npairs; i++)
        if (pairs[i].a == a && pairs[i].b == b)
            return;
    if (npairs == cappairs) {
        cappairs = cappairs ? cappairs * 2 : 64;
        pairs = realloc(pairs, cappairs * sizeof *pairs);
    }
    pairs[npairs].a = a;
    pairs[npairs].b = b;
    pairs[npairs++].how = how;
}

static int cmp_first(const void *x, const void *y)
{
    const struct hold *a = x, *b = y;

    return a->first < b->first ? -1 : a->first > b->first;
}

/* Why two holds may overlap without a broken promise: the older one's
 * lease was deleted (dlock learns it at its next renewal, a third of the
 * lease later at most, and only then signals its job), or its dlock was
 * stopped past its lease (nothing can act for it then). 0 when neither. */
static char excuse(const struct hold *older)
{
    if (older->lost)
        return 'L';
    if (older->paused)
        return 'P';
    return 0;
}

/*
 * check LOG...: the safety checker. Fails on
 *  - overlap: a process of one hold alive while a process of another hold
 *    runs: found alive by a node's look at its start, or seen in the
 *    logged start and exit times; unless the older hold's lease was
 *    deleted or its dlock stopped past its lease (counted apart);
 *  - token order: holds, in the order their jobs started, with tokens not
 *    increasing (again unless that pair overlapped with an excuse);
 *  - outlived: a process of a job still alive after its dlock exited,
 *    unless that dlock was SIGKILLed (its guard ends the job, and the next
 *    holder's look tells whether it did in time);
 *  - alive at lease end: a process of a job whose dlock was SIGKILLed still
 *    alive when the driver saw its lock key gone or taken (the moment the
 *    next holder could start; "A tok pid state" lines of the driver).
 */
static int check(int argc, char **argv)
{
    long done = 0, termed = 0, ignored = 0, nlooks = 0;
    long ex_ok = 0, ex_lost = 0, ex_killed = 0, ex_sig = 0, ex_busy = 0,
         ex_other = 0;
    long f_kill = 0, f_lost = 0, f_pause = 0, f_sig = 0;
    long outlived = 0, outlived_killed = 0;
    int viol = 0, v_overlap = 0, v_token = 0, v_outlived = 0, v_lease_end = 0;
    long ov_lost = 0, ov_paused = 0, unordered_excused = 0;
    long unended = 0, unended_excused = 0;
    char line[512];
    /* Z lines: a struct proc each (start = worker, end = state). */
    struct proc *zs = NULL;
    size_t nzs = 0, capzs = 0;

    for (int a = 2; a < argc; a++) {
        FILE *f = fopen(argv[a], "r");

        if (f == NULL)
            continue;
        while (fgets(line, sizeof line, f)) {
            unsigned long long tok, other;
            long pid, opid;
            long long t;
            int wid, rc;
            char w1[32], st;

            if (sscanf(line, "S %llu %d %ld %lld %31s", &tok, &wid, &pid, &t,
                       w1) == 5) {
                struct hold *h = hold_of(tok);

                if (nprocs == capprocs) {
                    capprocs = capprocs ? capprocs * 2 : 1024;
                    procs = realloc(procs, capprocs * sizeof *procs);
                }
                procs[nprocs].tok = tok;
                procs[nprocs].pid = pid;
                procs[nprocs].start = t;
                procs[nprocs++].end = -1;
                if (h->first < 0 || t < h->first)
                    h->first = t;
                nlooks++;
            } else if (sscanf(line, "X %llu %d %ld %lld %31s", &tok, &wid, &pid,
                              &t, w1) == 5) {
                for (size_t i = nprocs; i-- > 0;)
                    if (procs[i].pid == pid && procs[i].tok == tok) {
                        procs[i].end = t;
                        break;
                    }
                if (!strcmp(w1, "done"))
                    done++;
                else
                    termed++;
            } else if (sscanf(line, "I %llu %d %ld %lld", &tok, &wid, &pid,
                              &t) == 4) {
                ignored++;
            } else if (sscanf(line, "O %llu %ld %lld %llu %ld %c", &tok, &pid,
                              &t, &other, &opid, &st) == 6) {
                add_pair(tok, other, 's');
            } else if (sscanf(line, "Q %d %d %lld", &wid, &rc, &t) == 3) {
                if (rc == 0)
                    ex_ok++;
                else if (rc == 75)
                    ex_lost++;
                else if (rc == 137)
                    ex_killed++;
                else if (rc == 1)
                    ex_busy++;
                else if (rc > 128)
                    ex_sig++;
                else
                    ex_other++;
            } else if (sscanf(line, "Z %d %lld %llu %ld %c", &wid, &t, &tok,
                              &pid, &st) == 5) {
                /* Judged below, once every K line has been read. */
                if (nzs == capzs) {
                    capzs = capzs ? capzs * 2 : 64;
                    zs = realloc(zs, capzs * sizeof *zs);
                }
                zs[nzs].tok = tok;
                zs[nzs].pid = pid;
                zs[nzs].start = wid;
                zs[nzs++].end = st;
            } else if (sscanf(line, "A %llu %ld %c %lld", &tok, &pid, &st,
                              &t) == 4) {
                printf("VIOLATION alive at lease end: process %ld (state %c) "
                       "of hold %llu, whose dlock was SIGKILLed, still ran "
                       "when its lock key was gone\n",
                       pid, st, tok);
                v_lease_end++;
            } else if (sscanf(line, "K %llu %lld", &tok, &t) == 2) {
                hold_of(tok)->killed = 1;
                f_kill++;
            } else if (sscanf(line, "L %llu %lld", &tok, &t) == 2) {
                hold_of(tok)->lost = 1;
                f_lost++;
            } else if (sscanf(line, "P %llu %lld", &tok, &t) == 2) {
                hold_of(tok)->paused = 1;
                f_pause++;
            } else if (sscanf(line, "G %llu %31s %lld", &tok, w1, &t) == 3) {
                hold_of(tok)->signalled = 1;
                f_sig++;
            }
        }
        fclose(f);
    }
    for (size_t i = 0; i < nzs; i++) {
        if (hold_of(zs[i].tok)->killed) {
            outlived_killed++;
        } else {
            printf("VIOLATION outlived: process %ld (token %llu, state %c) "
                   "alive after worker %lld's dlock exited\n",
                   zs[i].pid, zs[i].tok, (char)zs[i].end, zs[i].start);
            outlived++;
        }
    }
    free(zs);
    v_outlived = (int)outlived;

    /* Overlaps in the logged times: a process of one hold ended (X) after
     * a process of another hold had started. */
    for (size_t i = 0; i < nprocs; i++) {
        if (procs[i].end < 0) {
            unended++;
            continue;
        }
        for (size_t j = 0; j < nprocs; j++)
            if (procs[j].tok != procs[i].tok &&
                procs[j].start > procs[i].start &&
                procs[j].start < procs[i].end)
                add_pair(procs[i].tok, procs[j].tok, 'l');
    }
    for (size_t i = 0; i < nprocs; i++) {
        const struct hold *h = hold_of(procs[i].tok);

        if (procs[i].end < 0 && (h->killed || excuse(h)))
            unended_excused++;
    }
    for (size_t i = 0; i < npairs; i++) {
        const struct hold *older = hold_of(pairs[i].a);
        char e = excuse(older);

        if (e == 'L') {
            ov_lost++;
        } else if (e == 'P') {
            ov_paused++;
        } else {
            const struct hold *newer = hold_of(pairs[i].b);

            printf("VIOLATION overlap (%s): a process of hold %llu (%s) "
                   "ran while one of hold %llu ran\n",
                   pairs[i].how == 's' ? "found alive" : "logged times",
                   older->tok,
                   older->killed      ? "its dlock SIGKILLed"
                   : older->signalled ? "its dlock signalled"
                                      : "no fault",
                   newer->tok);
            v_overlap++;
        }
    }
    /* Tokens increase in the order the jobs started. */
    qsort(holds, nholds, sizeof *holds, cmp_first);
    {
        size_t prev = (size_t)-1;

        for (size_t i = 0; i < nholds; i++) {
            if (holds[i].first < 0)
                continue;
            if (prev != (size_t)-1 && holds[i].tok <= holds[prev].tok) {
                if (excuse(&holds[prev]) || excuse(&holds[i])) {
                    unordered_excused++;
                } else {
                    printf("VIOLATION token: the job of token %llu started "
                           "after the job of token %llu\n",
                           holds[i].tok, holds[prev].tok);
                    v_token++;
                }
            }
            if (prev == (size_t)-1 || holds[i].tok > holds[prev].tok)
                prev = i;
        }
    }
    viol = v_overlap + v_token + v_outlived + v_lease_end;
    {
        long sections = 0;

        for (size_t i = 0; i < nholds; i++)
            sections += holds[i].first >= 0;
        printf("stats sections=%ld processes=%zu done=%ld termed=%ld "
               "ignored_term=%ld unended=%ld unended_after_fault=%ld "
               "looks=%ld faults_kill=%ld faults_lost=%ld faults_pause=%ld "
               "faults_signal=%ld exit_ok=%ld exit_lost=%ld "
               "exit_killed=%ld exit_signal=%ld exit_busy=%ld "
               "exit_other=%ld overlaps_lost=%ld overlaps_paused=%ld "
               "overlaps=%d tokens_unordered_excused=%ld token_viol=%d "
               "outlived=%d outlived_after_kill=%ld alive_at_lease_end=%d "
               "violations=%d\n",
               sections, nprocs, done, termed, ignored, unended,
               unended_excused, nlooks * 2, f_kill, f_lost, f_pause, f_sig,
               ex_ok, ex_lost, ex_killed, ex_sig, ex_busy, ex_other, ov_lost,
               ov_paused, v_overlap, unordered_excused, v_token, v_outlived,
               outlived_killed, v_lease_end, viol);
    }
    return viol ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "node"))
        return node(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "after"))
        return after(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "log"))
        return log_words(argc, argv);
    if (argc >= 3 && !strcmp(argv[1], "scan")) {
        scan(argv[2], print_found, NULL);
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "check"))
        return check(argc, argv);
    fprintf(stderr, "usage: chaos_tree node|after|log|scan|check ...\n");
    return 2;
}
