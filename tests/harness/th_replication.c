/*
 * th_replication.c - stalling replication, picking names by master, the
 * lock-delay retry and the durable client of the topology tests (see
 * th_replication.h for each one's contract).
 */
#include "th_replication.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* SIGSTOP or SIGCONT the replicas of the master on master_port. */
static void signal_replicas(th_sentinel *t, int master_port, int pause)
{
    int k;
    for (k = 0; k < TH_SENTINEL_DATA; k++) {
        if (t->data[k].port == master_port)
            continue;
        if (pause)
            th_server_pause(&t->data[k]);
        else
            th_server_resume(&t->data[k]);
    }
}

void th_sentinel_pause_replicas(th_sentinel *t, int master_port)
{
    signal_replicas(t, master_port, 1);
}

void th_sentinel_resume_replicas(th_sentinel *t, int master_port)
{
    signal_replicas(t, master_port, 0);
}

int th_ballast(const th_server *m, const char *key)
{
    size_t blen = 16u << 20;
    char *b = calloc(1, blen);
    redisReply *r;
    int ok;
    if (b == NULL) {
        fprintf(stderr, "th_ballast: out of memory\n");
        return -1;
    }
    r = th_cmd(m, "SET %s %b", key, b, blen);
    free(b);
    ok = r != NULL && r->type == REDIS_REPLY_STATUS;
    if (!ok)
        fprintf(stderr, "th_ballast: SET %s on port %d: %s\n", key, m->port,
                r != NULL && r->type == REDIS_REPLY_ERROR ? r->str
                                                          : "no answer");
    if (r != NULL)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

int th_cluster_pick(const th_cluster *c, char *buf, size_t len,
                    const char *prefix, int lock_key, int port, int want)
{
    int i;
    for (i = 0; i < 1000; i++) {
        char key[128];
        snprintf(buf, len, "%s-%d", prefix, i);
        snprintf(key, sizeof key, lock_key ? "dlock:{%s}" : "%s", buf);
        if ((th_cluster_key_port(c, key, strlen(key)) == port) == want)
            return 0;
    }
    fprintf(stderr, "th_cluster_pick: no %s-N for port %d\n", prefix, port);
    return -1;
}

int th_try_until_delay_fn(dlock_lock **l, dlock_client *c, const char *name,
                          th_acquire_fn acquire, int64_t lease_ms,
                          int64_t timeout_ms)
{
    int64_t t0 = th_now_ms();
    int rc;
    do {
        rc = acquire(l, c, name, 0, lease_ms);
        if (rc != DLOCK_LOCK_DELAY && rc != DLOCK_OK)
            th_sleep_ms(100);
    } while (rc != DLOCK_LOCK_DELAY && rc != DLOCK_OK &&
             th_now_ms() - t0 < timeout_ms);
    return rc;
}

int th_try_until_delay(dlock_lock **l, dlock_client *c, const char *name,
                       int64_t lease_ms, int64_t timeout_ms)
{
    return th_try_until_delay_fn(l, c, name, dlock_lock_acquire, lease_ms,
                                 timeout_ms);
}

void th_durable_init(th_durable *d)
{
    d->wait_replicas = 0;
    d->wait_timeout_ms = 1000;
    d->lock_delay_ms = TH_DEFAULT_LOCK_DELAY;
    d->command_timeout_ms = 1000;
    d->on_event = NULL;
    d->wait_strategy = DLOCK_WAIT_FAIR;
    d->fence_retention_ms = -1;
    d->string_layout = 0;
}

dlock_client *th_durable_new(const char *url, const th_durable *d, char *err,
                             size_t errlen, int *rc)
{
    dlock_options o;
    dlock_client *c = NULL;
    const char *urls[1] = {url};
    char buf[256];
    int st;
    dlock_options_init(&o);
    o.servers = urls;
    o.nservers = 1;
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = d->command_timeout_ms;
    o.wait_replicas = d->wait_replicas;
    o.wait_replicas_timeout_ms = d->wait_timeout_ms;
    if (d->lock_delay_ms >= -1)
        o.lock_delay_ms = d->lock_delay_ms;
    o.on_event = d->on_event;
    o.wait_strategy = (dlock_wait_strategy)d->wait_strategy;
    if (d->fence_retention_ms >= 0)
        o.fence_retention_ms = d->fence_retention_ms;
    if (err == NULL) {
        err = buf;
        errlen = sizeof buf;
    }
    st = dlock_client_new(&c, &o, err, errlen);
    if (st == DLOCK_OK && d->string_layout &&
        dlock_client_set_layout(c, DLOCK_LAYOUT_STRING) != DLOCK_OK) {
        snprintf(err, errlen, "set_layout: %s", dlock_errmsg(c));
        dlock_client_free(c);
        c = NULL;
        st = DLOCK_EINVAL;
    }
    if (st != DLOCK_OK && err == buf)
        fprintf(stderr, "th_durable_new: %s: %s\n", url, err);
    if (rc != NULL)
        *rc = st;
    return st == DLOCK_OK ? c : NULL;
}

dlock_client *th_durable_client(const char *url, int wait_replicas,
                                int64_t wait_timeout_ms, int64_t lock_delay_ms,
                                char *err, size_t errlen, int *rc)
{
    th_durable d;
    th_durable_init(&d);
    d.wait_replicas = wait_replicas;
    d.wait_timeout_ms = wait_timeout_ms;
    d.lock_delay_ms = lock_delay_ms;
    return th_durable_new(url, &d, err, errlen, rc);
}

int th_replica_link(th_server *replica, const th_server *master,
                    int64_t timeout_ms)
{
    int64_t end = th_now_ms() + timeout_ms;
    redisReply *r = th_cmd(replica, "REPLICAOF 127.0.0.1 %d", master->port);
    int up = 0;
    if (r == NULL) {
        fprintf(stderr, "th_replica_link: no answer to REPLICAOF\n");
        return -1;
    }
    freeReplyObject(r);
    while (th_now_ms() < end) {
        r = th_cmd(replica, "INFO replication");
        if (r != NULL && r->type == REDIS_REPLY_STRING &&
            strstr(r->str, "master_link_status:up") != NULL)
            up = 1;
        if (r != NULL)
            freeReplyObject(r);
        if (up && th_cmd_int(master, "WAIT 1 %d", 1000) == 1) /* it acks */
            return 0;
        th_sleep_ms(50);
    }
    fprintf(stderr,
            "th_replica_link: port %d did not come up as a replica "
            "of %d\n",
            replica->port, master->port);
    return -1;
}

int th_not_replicated(dlock_client *c, int rc, const dlock_lock *l,
                      const char *what)
{
    if (rc == DLOCK_NOT_REPLICATED && l == NULL)
        return 0;
    fprintf(stderr, "%s: expected NOT_REPLICATED and no lock, got %s%s: %s\n",
            what, dlock_status_name(rc), l != NULL ? " and a lock" : "",
            dlock_errmsg(c));
    return -1;
}

int th_pair_start(th_server *master, th_server *replica, int64_t timeout_ms)
{
    if (th_server_start(master, NULL) != 0 ||
        th_server_start(replica, NULL) != 0)
        return -1;
    return th_replica_link(replica, master, timeout_ms);
}

void th_pair_stop(th_server *master, th_server *replica)
{
    th_server_stop(replica);
    th_server_stop(master);
}
