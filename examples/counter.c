/*
 * counter.c - the demo: several processes increment one shared counter
 * under a dlock lock, and not one increment is lost.
 *
 *   counter [-u] URL NPROC NITER
 *
 * forks NPROC processes; each one, NITER times, acquires the lock
 * "demo:counter" (waiting as long as it takes, 10 s lease), reads the
 * counter, writes it back plus one, and releases the lock. The read and
 * the write are two separate requests - a deliberately non-atomic
 * read-modify-write, the kind of update a lock exists to protect. The
 * write is a fenced write (dlock_fenced_set) carrying the lock's token,
 * so a holder whose lease had run out could not overwrite a newer one.
 *
 * The parent reads the counter before and after, prints both against
 * what was expected, and exits 0 only if nothing was lost.
 *
 * -u runs the same loop without the lock (on its own key), to show what
 * the lock prevents: updates are lost. It still exits 0.
 *
 * It uses the public API only (dlock.h). Each process makes its own
 * client after fork(): a client's threads and connections do not survive
 * a fork.
 */
#include <dlock.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LOCK_NAME "demo:counter"
#define LOCKED_KEY "demo:value"
#define UNLOCKED_KEY "demo:value:unlocked"

/* Make a client for url, or print why not and return NULL. */
static dlock_client *connect_client(const char *url)
{
    dlock_options opts;
    dlock_client *client = NULL;
    char err[256] = "";
    const char *servers[1];

    servers[0] = url;
    dlock_options_init(&opts);
    opts.servers = servers;
    opts.nservers = 1;
    /* The demo's throwaway servers may use the test CA (rediss://). */
    opts.tls_ca_file = getenv("DLOCK_CA_FILE");
    if (dlock_client_new(&client, &opts, err, sizeof(err)) != DLOCK_OK) {
        fprintf(stderr, "counter: %s\n", err);
        return NULL;
    }
    return client;
}

/* Read the counter at key into *out (0 when it was never written).
 * Returns a dlock status. */
static int read_counter(dlock_client *client, const char *key, long *out)
{
    char *value = NULL;
    size_t len = 0;
    uint64_t fence = 0;
    int rc = dlock_fenced_get(client, key, &value, &len, &fence);

    if (rc != DLOCK_OK)
        return rc;
    *out = value ? strtol(value, NULL, 10) : 0;
    free(value);
    return DLOCK_OK;
}

/* Add one to the counter at key: read, pause a little so that a race
 * would show, write back with token. Returns a dlock status. */
static int bump(dlock_client *client, const char *key, uint64_t token)
{
    struct timespec pause = {0, 100000}; /* 0.1 ms */
    char buf[32];
    long v;
    int rc = read_counter(client, key, &v);

    if (rc != DLOCK_OK)
        return rc;
    nanosleep(&pause, NULL);
    snprintf(buf, sizeof(buf), "%ld", v + 1);
    return dlock_fenced_set(client, key, token, buf, strlen(buf));
}

/* One worker process: niter increments. Returns the exit status. */
static int worker(const char *url, long niter, int unlocked)
{
    dlock_client *client = connect_client(url);
    int status = 0;

    if (client == NULL)
        return 1;
    for (long i = 0; i < niter; i++) {
        dlock_lock *lock = NULL;
        int rc;

        if (unlocked) {
            /* Token 1 always: no fencing either, the point of -u. */
            rc = bump(client, UNLOCKED_KEY, 1);
            if (rc != DLOCK_OK) {
                fprintf(stderr, "counter[%d]: write: %s (%s)\n", (int)getpid(),
                        dlock_strerror(rc), dlock_errmsg(client));
                status = 1;
                break;
            }
            continue;
        }
        rc = dlock_lock_acquire(&lock, client, LOCK_NAME, -1, 10000);
        if (rc != DLOCK_OK) {
            fprintf(stderr, "counter[%d]: acquire: %s (%s)\n", (int)getpid(),
                    dlock_strerror(rc), dlock_errmsg(client));
            status = 1;
            break;
        }
        rc = bump(client, LOCKED_KEY, dlock_lock_token(lock));
        if (rc != DLOCK_OK) {
            fprintf(stderr, "counter[%d]: fenced write: %s (%s)\n",
                    (int)getpid(), dlock_strerror(rc), dlock_errmsg(client));
            status = 1;
        }
        rc = dlock_lock_release(lock);
        if (rc != DLOCK_OK) {
            fprintf(stderr, "counter[%d]: release: %s (%s)\n", (int)getpid(),
                    dlock_strerror(rc), dlock_errmsg(client));
            status = 1;
        }
        if (status)
            break;
    }
    dlock_client_free(client);
    return status;
}

/* Parse a positive count or exit with usage. */
static long count_arg(const char *s, const char *what)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end || v < 1 || v > 1000000) {
        fprintf(stderr, "counter: %s must be 1..1000000, not '%s'\n", what, s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    const char *url, *key;
    long nproc, niter, before, after, expected;
    int unlocked = 0, workers_failed = 0;
    dlock_client *client;
    int rc;

    if (argc > 1 && strcmp(argv[1], "-u") == 0) {
        unlocked = 1;
        argv++;
        argc--;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: counter [-u] URL NPROC NITER\n");
        return 2;
    }
    url = argv[1];
    nproc = count_arg(argv[2], "NPROC");
    niter = count_arg(argv[3], "NITER");
    if (nproc > 256) {
        fprintf(stderr, "counter: at most 256 processes\n");
        return 2;
    }
    key = unlocked ? UNLOCKED_KEY : LOCKED_KEY;

    client = connect_client(url);
    if (client == NULL)
        return 1;
    rc = read_counter(client, key, &before);
    if (rc != DLOCK_OK) {
        fprintf(stderr, "counter: read %s: %s (%s)\n", key, dlock_strerror(rc),
                dlock_errmsg(client));
        dlock_client_free(client);
        return 1;
    }
    /* No client threads may exist across fork(): free it first. */
    dlock_client_free(client);

    fflush(stdout);
    fflush(stderr);
    for (long i = 0; i < nproc; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("counter: fork");
            workers_failed++;
            break;
        }
        if (pid == 0)
            _exit(worker(url, niter, unlocked));
    }
    for (;;) {
        int st;
        pid_t pid = wait(&st);
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            workers_failed++;
    }

    client = connect_client(url);
    if (client == NULL)
        return 1;
    rc = read_counter(client, key, &after);
    dlock_client_free(client);
    if (rc != DLOCK_OK) {
        fprintf(stderr, "counter: read %s: %s\n", key, dlock_strerror(rc));
        return 1;
    }

    expected = nproc * niter;
    printf("counter: %ld processes x %ld increments %s: %s went from %ld "
           "to %ld, +%ld, expected +%ld\n",
           nproc, niter, unlocked ? "WITHOUT the lock" : "under the lock", key,
           before, after, after - before, expected);
    if (workers_failed) {
        printf("counter: FAILED: %d worker(s) failed\n", workers_failed);
        return 1;
    }
    if (after - before == expected) {
        printf("counter: nothing lost\n");
        return 0;
    }
    printf("counter: %ld increments LOST\n", expected - (after - before));
    return unlocked ? 0 : 1;
}
