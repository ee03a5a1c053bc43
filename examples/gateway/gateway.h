/*
 * gateway.h - the de-duplication gateway's pieces (examples/gateway):
 * the HTTP side (gateway.c) and the de-duplication backends it drives
 * (floor.c: raw hiredis async, the benchmark's floor; dl.c: libdlock's
 * event-loop API).
 *
 * A request carrying "Idempotency-Key: K" is handed to a backend's begin.
 * The backend decides, once, through gw_decided: PROCESS (this request
 * holds dedup:K and must produce the result), STORED (a result for K is
 * kept: here it is), BUSY (reject mode: another processing holds K) or
 * FAIL. After PROCESS the gateway runs the simulated backend and calls
 * the backend's finish with the body; the backend stores it (fenced) and
 * releases K, then calls gw_finished.
 */
#ifndef DLOCK_GATEWAY_H
#define DLOCK_GATEWAY_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

enum gw_verdict { GW_PROCESS, GW_STORED, GW_BUSY, GW_FAIL };
enum gw_mode { GW_WAIT, GW_REJECT };

typedef struct gw_req gw_req;
typedef struct gw_backend gw_backend;

/* The settings every backend reads. */
typedef struct gw_config {
    const char *servers[16]; /* -s URL, in order */
    int nservers;
    int backend_ms; /* simulated backend time */
    int lease_ms;   /* lock lease (renewed while processing) */
    int keep_ms;    /* result retention in Redis, 0: kept until deleted */
    int poll_ms;    /* floor's wait mode: retry period */
    enum gw_mode mode;
    long long fence_retention_ms; /* dlock: -1 the library's default */
    int string_layout; /* dlock: --layout string (the default), 0 hash */
    /* dlock: 1 the holder's look is a plain fenced get sent with the try
     * (one round trip, but a holder paused past its lease may still store
     * its result after a newer holder looked); 0 (default) a fenced read
     * with the new hold's token once it is granted (shuts that holder
     * out) */
    int plain_get;
    /* dlock: -1 the client's default, else a dlock_wait_strategy */
    int strategy;
    const char *prefix; /* key prefix: PREFIX:dedup:K, PREFIX:result:K */
} gw_config;

/* One request being decided or processed. */
struct gw_req {
    char *key; /* the Idempotency-Key, NUL-terminated */
    size_t keylen;
    void *bctx;          /* the backend's per-request state */
    uint64_t t0_ns;      /* when the request was parsed */
    uint64_t decided_ns; /* when the verdict came */
    /* Gateway-private fields follow in gateway.c's wrapper. */
};

struct gw_backend_vt {
    /* Decide REQ: exactly one gw_decided(req, ...) later (never inside
     * begin itself is allowed too). */
    void (*begin)(gw_backend *b, gw_req *req);
    /* REQ was decided PROCESS: store BODY as K's result (fenced) and
     * release K; then exactly one gw_finished(req, ok, msg). */
    void (*finish)(gw_backend *b, gw_req *req, const char *body, size_t len);
    /* Requests still in the backend: how many (for a clean stop). */
    size_t (*pending)(gw_backend *b);
    /* Connections per server this backend holds. */
    int (*connections)(gw_backend *b);
    void (*destroy)(gw_backend *b);
};

struct gw_backend {
    const struct gw_backend_vt *vt;
    const gw_config *cfg;
    uv_loop_t *loop;
};

/* Verdict for REQ. BODY (for STORED) is copied. MSG (FAIL) is copied. */
void gw_decided(gw_req *req, enum gw_verdict v, const char *body, size_t len,
                const char *msg);
/* The result of REQ's processing is stored and K released (ok != 0), or
 * not (ok == 0, msg says why: the client gets 503). */
void gw_finished(gw_req *req, int ok, const char *msg);

/* Backend constructors: NULL and a message in err on failure. */
gw_backend *gw_floor_new(uv_loop_t *loop, const gw_config *cfg, char *err,
                         size_t errlen);
gw_backend *gw_dlock_new(uv_loop_t *loop, const gw_config *cfg, char *err,
                         size_t errlen);

/* Monotonic nanoseconds. */
uint64_t gw_now_ns(void);

#endif
