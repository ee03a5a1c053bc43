/*
 * verdict.h - the decision of an acquire attempt of any kind, apart from
 * its I/O (verdict.c; the attempt is attempt.c). An attempt sends its
 * kind's acquire script to every node; the answers are classified and
 * counted into a tally, and the verdict (granted, busy, our earlier hold
 * expired, validity used up, too few answers) and the nodes to give back
 * follow from the tally alone: pure functions, unit-tested without
 * servers (tests/unit/test_acquire.c, test_hold.c).
 */
#ifndef DLOCK_HOLD_VERDICT_H
#define DLOCK_HOLD_VERDICT_H

#include <stdint.h>

#include "engine/step.h"

/* The answers of one acquire attempt, counted. */
typedef struct dlock__tally {
    int granted;       /* nodes that granted (or confirmed a retry) */
    int busy;          /* nodes where another owner holds it */
    int gone;          /* nodes where our expected depth differs */
    uint64_t gmask;    /* nodes that granted */
    uint64_t bad;      /* nodes whose reply had the wrong shape */
    uint64_t unknown;  /* nodes where the request may have been applied
                        * but no usable answer came (lost, or bad) */
    uint64_t tmax;     /* the highest token granted */
    int tokens_differ; /* granting nodes returned different tokens */
    int depth;         /* the depth a granting node reported */
    int64_t pttl;      /* busy: the shortest lease left, -1 if none */
    uint64_t nbusy;    /* busy, fair queue mode: the highest last token
                        * granted the busy nodes reported (0: none) */
    int ahead;         /* a node said: free, but a live fair waiter is
                        * ahead of this one in its queue (-2) */
    int64_t place_ms;  /* queued: the shortest time a node keeps the
                        * place (a busy reply's 4th element), 0: none */
} dlock__tally;

/* What an attempt comes to. */
typedef enum dlock__verdict {
    DLOCK__V_GRANTED,   /* a quorum granted, validity left */
    DLOCK__V_NOT_OWNER, /* reentrant: our earlier hold has expired */
    DLOCK__V_BUSY,      /* held by another owner (enough nodes say so) */
    DLOCK__V_TOO_LATE,  /* a quorum granted, but no validity is left */
    DLOCK__V_FAILED     /* too few usable answers */
} dlock__verdict;

/* What one node's acquire reply says, for every kind (their scripts
 * answer in one shape): DLOCK__R_GRANTED {1, token, depth}, DLOCK__R_BUSY
 * {0, pttl[, last token[, place ttl]]}, DLOCK__R_GONE {-1, ...} (a reentry whose
 * earlier level expired), or DLOCK_EPROTO for any other reply (a kind's
 * refusal, {-2, limit} or {-3, kind}, is read before: kind.h). */
enum { DLOCK__R_GONE = -1, DLOCK__R_BUSY = 0, DLOCK__R_GRANTED = 1 };
int dlock__classify(const redisReply *r);

/* Count the answers res[0..n) of an acquire into *t. A reply of the
 * wrong shape is counted in t->bad (the caller marks it DLOCK_EPROTO). */
void dlock__acquire_tally(dlock__tally *t, const dlock__result *res, int n);

/* The same for an acquire sent as a plain SET NX PX (plain 1, the
 * string layout's fresh acquire, kind.h): its OK is a grant of depth 1
 * whose token is not issued yet (0). A script's acquire (plain 0) that
 * answers OK is of the wrong shape. */
void dlock__acquire_tally_as(dlock__tally *t, const dlock__result *res, int n,
                             int plain);

/* The verdict for tally t with this quorum, the depth the owner expected
 * (0: a fresh hold) and the validity left (lease - elapsed - drift). */
dlock__verdict dlock__acquire_verdict(const dlock__tally *t, int quorum,
                                      int depth, int64_t validity_ms);

/* The nodes to give back after an attempt that did not acquire: partial
 * grants and nodes whose request may have been applied unanswered. 0
 * when nothing can have been taken: a reentrant attempt without grants
 * (the release would take our earlier level), or a single server that
 * answered busy. n is the number of nodes. */
uint64_t dlock__acquire_undo_mask(const dlock__tally *t, dlock__verdict v,
                                  int n, int depth);

/* The nodes where an attempt that a node refused (another limit or kind)
 * may have taken something: those that granted, and requests sent but
 * not answered. */
uint64_t dlock__refused_undo_mask(const dlock__result *res, int n);

/* Whether an attempt's grants that may not last (withdraw.h: withdrawn
 * nodes) decide its status rather than the verdict: when the verdict is
 * neither granted nor busy. */
int dlock__withdraw_decides(uint64_t withdrawn, dlock__verdict v);

/* The answers of a read-write downgrade (rw_downgrade.lua: 1 done, 0
 * not the owner), counted: by dlock_rw_downgrade (api/shared.c) and a
 * loop's (loop/downgrade.c). */
typedef struct dlock__downgraded {
    int ok, no, unacked; /* granted, refused, granted but too few acks */
    uint64_t granted;    /* nodes that granted (acknowledged) */
    uint64_t unknown;    /* nodes that may hold either form */
    int fail;            /* the first node whose request failed, -1: none */
} dlock__downgraded;

/* Count res[0..n) (node i of ns) into *d, wait_replicas the replicas a
 * grant must have reached (0: none). A reply of the wrong shape is
 * unknown, and its result is marked malformed (dlock__malformed). */
void dlock__downgrade_count(const dlock__nodeset *ns, int wait_replicas,
                            dlock__result *res, int n, dlock__downgraded *d);

#endif /* DLOCK_HOLD_VERDICT_H */
