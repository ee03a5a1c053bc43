/*
 * handler.c - a request handler guarded by dlock: duplicate requests are
 * rejected while the first is in flight, and the handler's
 * read-modify-write is a fenced write, so a holder whose lease ran out
 * (a pause, a GC, a swapped-out process) cannot overwrite newer data.
 *
 *   handler URL
 *
 * The demonstration:
 *  1. two threads submit the same request id; the first takes the lock
 *     "request:<id>" with wait 0 and works, the second finds it held and
 *     answers "duplicate, rejected";
 *  2. the first one's work is a read-modify-write of the fenced key
 *     "demo:handler:balance" (dlock_fenced_get, then dlock_fenced_set with
 *     the lock's fencing token);
 *  3. a late write carrying an older token is refused (DLOCK_STALE) and
 *     changes nothing.
 * Exits 0 when exactly that happened, 1 otherwise.
 *
 * It uses the public API only (dlock.h).
 */
#include <dlock.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BALANCE_KEY "demo:handler:balance"

typedef struct request {
    dlock_client *client;
    const char *id;
    long long amount;
    /* The first handler holds until the second has been turned away. */
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
    int *in_flight; /* set by the handler that got the lock */
    int *dup_seen;  /* set by main once the duplicate was rejected */
    int outcome;    /* 0 done, 1 duplicate rejected, -1 error */
    uint64_t token; /* the token the work ran under */
} request;

/* Read-modify-write of the balance, fenced by the lock's token. */
static int add_to_balance(dlock_client *client, dlock_lock *lock,
                          long long amount)
{
    char *value = NULL, buf[32];
    size_t len = 0;
    uint64_t fence = 0;
    long long balance = 0;
    int rc = dlock_fenced_get(client, BALANCE_KEY, &value, &len, &fence);
    if (rc != DLOCK_OK) {
        fprintf(stderr, "handler: read: %s\n", dlock_errmsg(client));
        return rc;
    }
    if (value != NULL)
        balance = atoll(value);
    free(value);
    snprintf(buf, sizeof buf, "%lld", balance + amount);
    rc = dlock_fenced_set(client, BALANCE_KEY, dlock_lock_token(lock), buf,
                          strlen(buf));
    if (rc != DLOCK_OK)
        fprintf(stderr, "handler: write: %s\n", dlock_strerror(rc));
    return rc;
}

static void *handle(void *arg)
{
    request *r = arg;
    dlock_lock *lock = NULL;
    char name[128];
    int rc;

    snprintf(name, sizeof name, "request:%s", r->id);
    rc = dlock_lock_acquire(&lock, r->client, name, 0, 10000);
    if (rc == DLOCK_BUSY) {
        printf("request %s: duplicate, rejected\n", r->id);
        r->outcome = 1;
        return NULL;
    }
    if (rc != DLOCK_OK) {
        fprintf(stderr, "handler: %s\n", dlock_errmsg(r->client));
        r->outcome = -1;
        return NULL;
    }
    r->token = dlock_lock_token(lock);
    printf("request %s: accepted (token %" PRIu64 ")\n", r->id, r->token);

    /* "Work" that takes a while: until the duplicate has come and gone. */
    pthread_mutex_lock(r->mu);
    *r->in_flight = 1;
    pthread_cond_broadcast(r->cv);
    while (!*r->dup_seen)
        pthread_cond_wait(r->cv, r->mu);
    pthread_mutex_unlock(r->mu);

    rc = add_to_balance(r->client, lock, r->amount);
    r->outcome = rc == DLOCK_OK ? 0 : -1;
    rc = dlock_lock_release(lock);
    if (rc != DLOCK_OK) {
        /* The lease ran out while working: the fenced write already
         * refused anything stale, but say so. */
        fprintf(stderr, "handler: release: %s\n", dlock_strerror(rc));
        r->outcome = -1;
    }
    printf("request %s: done\n", r->id);
    return NULL;
}

static int read_balance(dlock_client *client, long long *out, uint64_t *fence)
{
    char *value = NULL;
    size_t len;
    int rc = dlock_fenced_get(client, BALANCE_KEY, &value, &len, fence);
    if (rc != DLOCK_OK)
        return rc;
    *out = value != NULL ? atoll(value) : 0;
    free(value);
    return DLOCK_OK;
}

int main(int argc, char **argv)
{
    dlock_options opts;
    dlock_client *client = NULL;
    const char *servers[1];
    char err[256] = "";
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    int in_flight = 0, dup_seen = 0, ok = 1, rc;
    request first, second;
    pthread_t t1, t2;
    long long before = 0, after = 0, final = 0;
    uint64_t fence = 0;
    dlock_lock *lock = NULL;

    if (argc != 2) {
        fprintf(stderr, "usage: handler URL\n");
        return 2;
    }
    servers[0] = argv[1];
    dlock_options_init(&opts);
    opts.servers = servers;
    opts.nservers = 1;
    opts.tls_ca_file = getenv("DLOCK_CA_FILE");
    if (dlock_client_new(&client, &opts, err, sizeof err) != DLOCK_OK) {
        fprintf(stderr, "handler: %s\n", err);
        return 1;
    }
    if (read_balance(client, &before, &fence) != DLOCK_OK) {
        fprintf(stderr, "handler: %s\n", dlock_errmsg(client));
        dlock_client_free(client);
        return 1;
    }

    /* 1 + 2: the same request twice, the second while the first works. */
    first = (request){client, "42", 10, &mu, &cv, &in_flight, &dup_seen, -1, 0};
    second = first;
    pthread_create(&t1, NULL, handle, &first);
    pthread_mutex_lock(&mu);
    while (!in_flight)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    pthread_create(&t2, NULL, handle, &second);
    pthread_join(t2, NULL);
    pthread_mutex_lock(&mu);
    dup_seen = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(t1, NULL);

    if (first.outcome != 0 || second.outcome != 1) {
        fprintf(stderr, "handler: expected one accepted and one rejected\n");
        ok = 0;
    }
    if (read_balance(client, &after, &fence) != DLOCK_OK ||
        after != before + 10) {
        fprintf(stderr, "handler: balance %lld, expected %lld\n", after,
                before + 10);
        ok = 0;
    }
    printf("balance: %lld -> %lld (fence %" PRIu64 ")\n", before, after, fence);

    /* 3: a newer owner writes; a write with the first request's (older)
     * token is then refused and changes nothing. */
    rc = dlock_lock_acquire(&lock, client, "request:43", 5000, 10000);
    if (rc != DLOCK_OK || add_to_balance(client, lock, 5) != DLOCK_OK) {
        fprintf(stderr, "handler: %s\n", dlock_errmsg(client));
        ok = 0;
    }
    dlock_lock_release(lock);
    rc = dlock_fenced_set(client, BALANCE_KEY, first.token, "0", 1);
    printf("late write with token %" PRIu64 ": %s\n", first.token,
           dlock_status_name(rc));
    if (rc != DLOCK_STALE)
        ok = 0;
    if (read_balance(client, &final, &fence) != DLOCK_OK ||
        final != after + 5) {
        fprintf(stderr, "handler: balance %lld, expected %lld\n", final,
                after + 5);
        ok = 0;
    }
    printf("balance: %lld (fence %" PRIu64 ")\n", final, fence);
    printf("%s\n", ok ? "ok" : "FAILED");
    dlock_client_free(client);
    return ok ? 0 : 1;
}
