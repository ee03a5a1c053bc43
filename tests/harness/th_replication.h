/*
 * th_replication.h - what the Sentinel and Cluster tests do to
 * replication and to the slots (th_replication.c): stop a master's
 * replicas and fill their links (so that a grant reaches the master only
 * and dies with it), pick names that a given master serves, retry a try
 * across a failover until the lock-delay answers, and make a client for
 * a topology URL with durability settings.
 */
#ifndef DLOCK_TEST_TH_REPLICATION_H
#define DLOCK_TEST_TH_REPLICATION_H

#include <stddef.h>
#include <stdint.h>

#include "dlock.h"
#include "harness.h"
#include "th_waiter.h"
#include "topology.h"

/* SIGSTOP (pause) or SIGCONT (resume) every data node of t but the one
 * on master_port: the master's replicas. */
void th_sentinel_pause_replicas(th_sentinel *t, int master_port);
void th_sentinel_resume_replicas(th_sentinel *t, int master_port);

/* Ballast: SET key to 16 MB of zeros on m. A stopped replica's socket
 * still takes what its master sends on loopback; this much fills it, so
 * that what the master writes next (a grant) waits in the master's
 * output buffer and dies with the master. 0, or -1 (on stderr). */
int th_ballast(const th_server *m, const char *key);

/* Write prefix-N into buf (len bytes) for the first N in 0..999 whose
 * key is served by the master on port (want 1) or by another master
 * (want 0). The key is buf itself (lock_key 0), or the key of the lock
 * named buf, dlock:{buf} (lock_key 1). 0, or -1 when no N fits. */
int th_cluster_pick(const th_cluster *c, char *buf, size_t len,
                    const char *prefix, int lock_key, int port, int want);

/* After a failover that lost a grant: try NAME (wait 0, lease_ms) again
 * and again until the client answers DLOCK_LOCK_DELAY or DLOCK_OK; any
 * other status (the client still finding the new master) is retried
 * after 100 ms, for up to timeout_ms. Returns the last status (*l set
 * on DLOCK_OK). */
int th_try_until_delay(dlock_lock **l, dlock_client *c, const char *name,
                       int64_t lease_ms, int64_t timeout_ms);

/* th_try_until_delay with another kind of acquire (acquire, called with
 * wait 0 and lease_ms: a permit, a reader). */
int th_try_until_delay_fn(dlock_lock **l, dlock_client *c, const char *name,
                          th_acquire_fn acquire, int64_t lease_ms,
                          int64_t timeout_ms);

/* lock_delay_ms: leave the library's default (any value below -1). */
#define TH_DEFAULT_LOCK_DELAY (-2)

/* A test client's settings beyond its one URL (th_durable_new). Start
 * from th_durable_init(), then set what the test needs. */
typedef struct th_durable {
    int wait_replicas;          /* WAIT for this many (init: 0, no WAIT) */
    int64_t wait_timeout_ms;    /* WAIT's timeout (init: 1000) */
    int64_t lock_delay_ms;      /* init: TH_DEFAULT_LOCK_DELAY */
    int64_t command_timeout_ms; /* init: 1000 (connect: always 1000) */
    dlock_event_cb on_event;    /* init: NULL (no events) */
    int wait_strategy;          /* init: DLOCK_WAIT_FAIR (the default) */
    int64_t fence_retention_ms; /* init: -1, the default */
    int string_layout;          /* init: 0; 1: DLOCK_LAYOUT_STRING */
} th_durable;

void th_durable_init(th_durable *d);

/* A client of the one URL url (a redis:// server or a redis+sentinel://
 * or redis+cluster:// topology) with connect timeout 1 s and d's
 * settings. NULL on failure, with the status in *rc (when rc is not
 * NULL) and the detail in err (err NULL: on stderr). */
dlock_client *th_durable_new(const char *url, const th_durable *d, char *err,
                             size_t errlen, int *rc);

/* A client of the one topology URL url (redis+sentinel:// or
 * redis+cluster://) with connect and command timeouts of 1 s,
 * wait_replicas with WAIT timeout wait_timeout_ms, and lock_delay_ms
 * (below -1, TH_DEFAULT_LOCK_DELAY: the default). NULL on failure, with the
 * status in *rc (when rc is not NULL) and the detail in err. */
dlock_client *th_durable_client(const char *url, int wait_replicas,
                                int64_t wait_timeout_ms, int64_t lock_delay_ms,
                                char *err, size_t errlen, int *rc);

/* Make replica a replica of master (REPLICAOF) and wait, at most
 * timeout_ms, until its link is up and master's WAIT 1 counts it. 0, or
 * -1 (on stderr). */
int th_replica_link(th_server *replica, const th_server *master,
                    int64_t timeout_ms);

/* Start master and replica (each its own throwaway redis-server) and
 * link the replica (th_replica_link, at most timeout_ms): 0, or -1 (on
 * stderr). th_pair_stop stops both. For a group's setup/teardown. */
int th_pair_start(th_server *master, th_server *replica, int64_t timeout_ms);
void th_pair_stop(th_server *master, th_server *replica);

/* Was an acquire refused for want of replicas: rc DLOCK_NOT_REPLICATED
 * and no lock (l NULL)? 0; else -1, with what (the caller's name for it),
 * rc and the client's message on stderr. */
int th_not_replicated(dlock_client *c, int rc, const dlock_lock *l,
                      const char *what);

#endif /* DLOCK_TEST_TH_REPLICATION_H */
