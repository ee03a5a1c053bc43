/*
 * step.h - one step of a lock operation: a script run on a set of nodes
 * in parallel, and the reading of the answers: the engine (call.h: the
 * state machine; loop.c: dlock__exec; reply.c; script.c). The scripts are
 * listed once, in DLOCK__SCRIPT_LIST; commands are built with
 * dlock__cmdbuf or designated initialisers. Above the node set (node.h)
 * and the error channel (errors.h).
 */
#ifndef DLOCK_STEP_H
#define DLOCK_STEP_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "base/errors.h"
#include "topo/node.h"

/* Every script: its id and its file, src/lua/<file>.lua, embedded at build
 * time as dlock__lua_<file> (cmake/embed_lua.cmake). Add a script here and
 * nowhere else. */
#define DLOCK__SCRIPT_LIST(X)                                                  \
    X(ACQUIRE, acquire)                                                        \
    X(RELEASE, release)                                                        \
    X(EXTEND, extend)                                                          \
    X(FENCE_RAISE, fence_raise)                                                \
    X(FENCED_SET, fenced_set)                                                  \
    X(INSPECT, inspect)                                                        \
    X(FENCED_GET, fenced_get)                                                  \
    X(FAIR_LEAVE, fair_leave)                                                  \
    X(HOLDER_SET, holder_set)                                                  \
    X(HOLDER_EXTEND, holder_extend)                                            \
    X(SEM_ACQUIRE, sem_acquire)                                                \
    X(SEM_RELEASE, sem_release)                                                \
    X(SEM_EXTEND, sem_extend)                                                  \
    X(SEM_LIMIT, sem_limit)                                                    \
    X(RW_ACQUIRE, rw_acquire)                                                  \
    X(RW_RELEASE, rw_release)                                                  \
    X(RW_EXTEND, rw_extend)                                                    \
    X(RW_DOWNGRADE, rw_downgrade)                                              \
    X(SHARED_INSPECT, shared_inspect)                                          \
    X(WAITERS, waiters)                                                        \
    X(ELECT_PROCLAIM, elect_proclaim)                                          \
    X(ELECT_LEADER, elect_leader)                                              \
    X(FENCED_READ, fenced_read)                                                \
    X(RW_LEAVE, rw_leave)                                                      \
    X(EXTEND_BACK, extend_back)                                                \
    X(CHECK, check)                                                            \
    X(KIND, kind)                                                              \
    X(RETAKE, retake)                                                          \
    X(S_ACQUIRE, s_acquire)                                                    \
    X(S_RELEASE, s_release)                                                    \
    X(S_EXTEND, s_extend)                                                      \
    X(S_STAMP, s_stamp)                                                        \
    X(S_SET_RELEASE, s_set_release)                                            \
    X(S_FENCED_SET, s_fenced_set)                                              \
    X(S_FENCED_GET, s_fenced_get)                                              \
    X(S_FENCED_READ, s_fenced_read)

#define DLOCK__LUA_DECL(id, file) extern const char dlock__lua_##file[];
DLOCK__SCRIPT_LIST(DLOCK__LUA_DECL)
#undef DLOCK__LUA_DECL

enum {
#define DLOCK__S_ENUM(id, file) DLOCK__S_##id,
    DLOCK__SCRIPT_LIST(DLOCK__S_ENUM)
#undef DLOCK__S_ENUM
        DLOCK__S_COUNT
};

/* A script and its SHA1 (hex), computed once at client creation. */
typedef struct dlock__script {
    const char *src;
    char sha[41];
} dlock__script;

/* Fill scripts[0..DLOCK__S_COUNT) with every script and its SHA1. */
void dlock__scripts_init(dlock__script *scripts);

/* SHA1 of a script's source as 40 hex digits. */
void dlock__sha1_hex(const char *src, char out[41]);

/* The outcome of one command on one node. */
typedef struct dlock__result {
    int status;        /* DLOCK_OK when reply is set */
    redisReply *reply; /* owned; may be an error reply only for non-scripts */
    char err[DLOCK__ERRLEN];
    int sent;    /* the request may have reached the server */
    int pending; /* not waited for: the outcome was certain without it
                  * (dlock__cmd.enough); status DLOCK_ETIMEDOUT */
    /* With cmd->wait_replicas: the replicas that acknowledged (WAIT's
     * answer), -1 when WAIT did not answer. */
    long long acks;
} dlock__result;

/* A command for dlock__exec: a script with its keys and arguments. */
typedef struct dlock__cmd {
    int script; /* DLOCK__S_* */
    int nkeys;
    const char *const *keys;
    const size_t *keylens;
    int nargs;
    const char *const *args;
    const size_t *arglens;
    /* Send the script's source (EVAL), not its SHA: for a request that
     * must not depend on the server's script cache even if its answer is
     * given up on (an undo: a NOSCRIPT nobody reads would lose it). An
     * undo is also sent when the node set is refused for two entries
     * being one server (ident.c): it only gives back what we may hold. */
    int eval;
    /* Optional, with several nodes: return as soon as enough(res, waiting,
     * n, enough_ud) says the outcome is certain (waiting: the nodes still
     * out; res holds the answers so far). The nodes still out are marked
     * pending and their requests given up on: their connections go to
     * pins with pin_out (the caller sends its next request for the same
     * hold over them, so it cannot overtake this one), else back to the
     * pool, where an answer NOSCRIPT makes the connection send the
     * script's source (dlock__conn_abandon_eval): the request is never
     * lost to a flushed script cache. */
    int (*enough)(const struct dlock__result *res, uint64_t waiting, int n,
                  const void *ud);
    const void *enough_ud;
    /* Optional: pins[i], when set, is the connection to use for node i
     * (taken: set to NULL). pin_out: pending nodes' connections are left
     * in pins (which must then be set). */
    dlock__conn **pins;
    int pin_out;
    /* A give-back (a release or an undo: repeating it is harmless): when
     * its answer is given up on (timeout), a NOSCRIPT arriving later still
     * makes the connection send the source. Never for an acquire: its
     * undo may already be queued behind it. */
    int give_back;
    /* > 0: a lock write that must reach this many replicas: WAIT
     * wait_replicas wait_timeout_ms follows the script in the same round
     * trip (the step's deadline grows by wait_timeout_ms), and its answer
     * lands in dlock__result.acks. */
    int wait_replicas;
    int64_t wait_timeout_ms;
    /* 1: a lock write (acquire, extend, fenced set): never sent to a
     * server known to be a replica (node.h). */
    int lock_write;
    /* 1: not a script but the plain command args[0] keys... args[1..]
     * (the string layout's fresh acquire, SET NX PX: kind.c); script
     * still names the script it stands in for (never sent). */
    int raw;
} dlock__cmd;

/* A builder for a command with a few keys and arguments, numbers
 * formatted in place: dlock__cmd_begin, then keys and arguments in order;
 * b->cmd is the command. b must stay where it is while cmd is used. */
#define DLOCK__CMD_KEYS 4
#define DLOCK__CMD_ARGS 10
typedef struct dlock__cmdbuf {
    dlock__cmd cmd;
    const char *key[DLOCK__CMD_KEYS];
    size_t keylen[DLOCK__CMD_KEYS];
    const char *arg[DLOCK__CMD_ARGS];
    size_t arglen[DLOCK__CMD_ARGS];
    char num[DLOCK__CMD_ARGS][24];
    int nnum;
} dlock__cmdbuf;

void dlock__cmd_begin(dlock__cmdbuf *b, int script);
void dlock__cmd_key(dlock__cmdbuf *b, const char *key, size_t len);
void dlock__cmd_arg(dlock__cmdbuf *b, const char *arg, size_t len);
void dlock__cmd_arg_i64(dlock__cmdbuf *b, int64_t v);
void dlock__cmd_arg_u64(dlock__cmdbuf *b, uint64_t v);

/*
 * Run cmd on the nodes of ns selected by mask (bit i = node i) in
 * parallel, each bounded by deadline_ms, and fill res[i] for every node
 * (res has ns->n entries). EVALSHA first, EVAL once on NOSCRIPT. A node
 * whose pooled connection fails is retried once on a fresh connection
 * while time remains: every script of ours is idempotent (see the
 * scripts). Script error replies become DLOCK_ESERVER (or DLOCK_EAUTH,
 * DLOCK_EREFUSED) with the server's text. With Redlock, a node's first
 * request is preceded by INFO server (ident.c); once two nodes are found
 * to be one server, every node's result is DLOCK_EINVAL (cmd->eval, an
 * undo, excepted). Returns the number of nodes with status DLOCK_OK.
 */
int dlock__exec(dlock__nodeset *ns, const dlock__script *scripts, uint64_t mask,
                const dlock__cmd *cmd, int64_t deadline_ms, dlock__result *res);

/* Free the replies in res[0..n-1] and reset them. */
void dlock__results_clear(dlock__result *res, int n);

/* Set res[0..n-1] to "not run yet" (no reply, DLOCK_EIO, acks -1)
 * without freeing anything. */
void dlock__results_reset(dlock__result *res, int n);

/*
 * Name the error reply msg that node nd gave into err ("<node>: msg",
 * with "a replica, not a master: " before READONLY and "not ready: "
 * before LOADING / MASTERDOWN) and return its status: a redirection
 * outside a cluster is DLOCK_EINVAL (the URL names a cluster node), a
 * failover-looking error under Sentinel DLOCK_ESERVER (located again),
 * else dlock__server_error_code's. *failover: 1 for READONLY, LOADING,
 * MASTERDOWN. The one place where a server's error is named.
 */
int dlock__reply_error(const dlock__nodeset *ns, const dlock__node *nd,
                       const char *msg, char *err, size_t errlen,
                       int *failover);

/* 1 when err, a message that dlock__reply_error named, says a server not
 * ready (LOADING, MASTERDOWN, BUSY, TRYAGAIN): the one mark of it. */
int dlock__reply_notready(const char *err);

/* How long one step may wait for one node: the command timeout, and with
 * Redlock also at most a tenth of the lease (at least 10 ms), so that a
 * stalled node cannot eat the validity. Returns the monotonic deadline. */
int64_t dlock__step_deadline(const dlock__nodeset *ns, int64_t command_ms,
                             int64_t lease_ms);

/* Set this thread's message for a failed step: the first node's, or all
 * of them ("3 of 5 nodes failed: a: ...; b: ..."). Returns code, except
 * that DLOCK_NO_QUORUM becomes DLOCK_EREFUSED (or DLOCK_EAUTH) when so
 * many nodes refused that no majority was possible, and that any code
 * becomes DLOCK_EINVAL once two nodes were found to be one server. */
int dlock__step_error(const dlock__nodeset *ns, const dlock__msgs *msgs,
                      const dlock__result *res, uint64_t mask, int code,
                      const char *what);

/* Integer element i of an array reply (a string is parsed); 0 if
 * missing. */
long long dlock__elem_int(const redisReply *r, size_t i);

/* Mark node i's reply as not the shape the script returns: the peer is
 * not behaving as Redis running our script does (DLOCK_EPROTO). */
void dlock__malformed(const dlock__nodeset *ns, dlock__result *res, int i,
                      const char *what);

#endif /* DLOCK_STEP_H */
