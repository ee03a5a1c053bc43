/*
 * dlock-gateway - an HTTP/1.1 de-duplication gateway on libuv (issue 30).
 *
 *   dlock-gateway --listen HOST:PORT -s URL [-s URL...] --backend-ms N
 *                 [--mode wait|reject] [--lease-ms N] [--keep-ms N]
 *                 [--impl dlock|floor] [--prefix P] [--poll-ms N]
 *                 [--wait-strategy fair|notify|spin]
 *                 [--fence-retention-ms N] [--read fenced|plain]
 *                 [--layout hash|string]
 *
 * Any method and path. A request with "Idempotency-Key: K": the first for
 * K is processed (a simulated backend: a timer of N ms) and answered 200
 * with {"key":K,"processing_id":ID,...}, ID unique to that processing;
 * concurrent duplicates get the same body when it is done (wait) or 409
 * at once (reject); a later request for K gets the stored body. No key:
 * 400. Malformed: 400 and the connection closed. Keep-alive and
 * pipelining (responses in request order). Each response carries
 * X-Decision-Us: the microseconds from the parsed request to the
 * de-duplication decision.
 *
 * --impl dlock (default) de-duplicates with libdlock's event-loop API;
 * --impl floor with raw hiredis async on the same loop (the benchmark's
 * floor; its duplicates in wait mode ask again every --poll-ms, default
 * 10). --wait-strategy: how dlock's duplicates wait (default notify
 * with the string layout: a fair try is a script, a notify or spin try
 * a plain SET NX PX; the client's default with the hash layout). --fence-retention-ms (dlock; default 0): how long a
 * released, free lock name keeps its fence record; 0 keeps nothing (no
 * key left per request's name: dlock_options' fence_retention_ms; the
 * tokens of a name's later holds then rest on the server's clock not
 * stepping back). --layout (dlock; default string): the key layout of
 * its locks (dlock_client_set_layout). string: on one server a request
 * costs Redis one script (a plain SET NX PX try, a plain GET look, the
 * store and the release in one script: dlock_loop_fenced_set_release;
 * the result one string "<fence> <body>");
 * hash: the library's default layout (four scripts a request). Gateways
 * on one Redis that must act as one must all use the same layout (and
 * prefix): a lock of one layout is WRONGTYPE to the other.
 * --read (dlock; default fenced): how the holder of K
 * looks for a stored result: "fenced", a fenced read with its token once
 * the lock is granted (a processor paused past its lease can then no
 * longer store its result over the newer holder's look); "plain", a
 * fenced get sent with the try (one round trip less, that window open).
 * --lease-ms (default 10000): the lock's lease,
 * renewed while the backend runs; --keep-ms (floor only; default 0, kept
 * until deleted): the stored result's retention. --prefix (default gw):
 * the keys' prefix; gateways that must act as one use the same. Prints
 * "listening HOST:PORT" on stdout once bound (PORT 0 picks a free port).
 * SIGINT/SIGTERM: stop accepting, finish what is in flight, exit 0.
 */
#include "gateway.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HDR_MAX 16384    /* bytes of a request's head */
#define BODY_MAX 1048576 /* bytes of a request's body */
#define KEY_MAX 256      /* bytes of an Idempotency-Key */
#define NHDR_MAX 100     /* header lines */
#define READ_MAX 4194304 /* unparsed bytes buffered per connection */

typedef struct conn conn;

/* A request as the gateway keeps it: the public part first. */
typedef struct greq {
    gw_req pub;
    conn *c; /* NULL once the connection is gone */
    struct greq *next;
    int ready;
    int close_after;
    char *resp;
    size_t resp_len;
    char *body; /* the processing's result, once processed */
    size_t body_len;
} greq;

struct conn {
    uv_tcp_t tcp;
    char *buf;
    size_t len, cap;
    greq *head, *tail;
    int closing;      /* uv_close called */
    int close_after;  /* close once the queued responses are written */
    int stop_reading; /* a bad request: read no more */
};

static uv_loop_t *loop;
static uv_tcp_t listener;
static gw_backend *backend;
static gw_config cfg;
static uint64_t inflight;  /* requests not yet answered (or orphaned) */
static uint64_t processed; /* processings this process ran */
static uint64_t seq;
static uint32_t boot_id;
static int stopping;
static uv_signal_t sigint_h, sigterm_h;
static uv_timer_t stop_timer;

/* Monotonic nanoseconds. */
uint64_t gw_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void conn_flush(conn *c);
static void conn_close(conn *c);

/* Free REQ (its response and key). */
static void req_free(greq *r)
{
    free(r->pub.key);
    free(r->resp);
    free(r->body);
    free(r);
    inflight--;
}

/* Set REQ's response: STATUS with BODY; CLOSE: the connection closes
 * after it. Then write what is ready, or free an orphaned request. */
static void req_respond(greq *r, int status, const char *body, size_t len,
                        int close)
{
    const char *reason = status == 200   ? "OK"
                         : status == 400 ? "Bad Request"
                         : status == 409 ? "Conflict"
                         : status == 501 ? "Not Implemented"
                                         : "Service Unavailable";
    char head[256];
    uint64_t dec = r->pub.decided_ns > r->pub.t0_ns
                       ? (r->pub.decided_ns - r->pub.t0_ns) / 1000
                       : 0;
    int n = snprintf(
        head, sizeof head,
        "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
        "Content-Length: %zu\r\nX-Decision-Us: %" PRIu64 "\r\n%s\r\n",
        status, reason, len, dec, close ? "Connection: close\r\n" : "");
    r->resp = malloc((size_t)n + len);
    if (!r->resp) {
        fprintf(stderr, "dlock-gateway: out of memory\n");
        abort();
    }
    memcpy(r->resp, head, (size_t)n);
    memcpy(r->resp + n, body, len);
    r->resp_len = (size_t)n + len;
    r->ready = 1;
    r->close_after = r->close_after || close;
    if (!r->c) {
        req_free(r);
        return;
    }
    conn_flush(r->c);
}

/* A JSON error body {"error":MSG} with MSG's quotes and controls blanked. */
static void respond_error(greq *r, int status, const char *msg, int close)
{
    char body[320];
    char clean[256];
    size_t i;
    for (i = 0; msg[i] && i < sizeof clean - 1; i++)
        clean[i] =
            (msg[i] == '"' || msg[i] == '\\' || (unsigned char)msg[i] < 0x20)
                ? ' '
                : msg[i];
    clean[i] = 0;
    int n = snprintf(body, sizeof body, "{\"error\":\"%s\"}\n", clean);
    req_respond(r, status, body, (size_t)n, close);
}

void gw_decided(gw_req *req, enum gw_verdict v, const char *body, size_t len,
                const char *msg);

/* The simulated backend's timer for a PROCESS verdict. */
static void backend_done(uv_timer_t *t)
{
    greq *r = t->data;
    char body[512];
    int n = snprintf(body, sizeof body,
                     "{\"key\":\"%s\",\"processing_id\":\"%08" PRIx32
                     "-%d-%" PRIu64 "\",\"backend_ms\":%d}\n",
                     r->pub.key, boot_id, (int)getpid(), ++seq, cfg.backend_ms);
    processed++;
    uv_close((uv_handle_t *)t, (uv_close_cb)free);
    r->body = malloc((size_t)n + 1);
    if (!r->body) {
        fprintf(stderr, "dlock-gateway: out of memory\n");
        abort();
    }
    memcpy(r->body, body, (size_t)n + 1);
    r->body_len = (size_t)n;
    backend->vt->finish(backend, &r->pub, r->body, r->body_len);
}

void gw_decided(gw_req *req, enum gw_verdict v, const char *body, size_t len,
                const char *msg)
{
    greq *r = (greq *)req;
    r->pub.decided_ns = gw_now_ns();
    switch (v) {
    case GW_PROCESS: {
        uv_timer_t *t = malloc(sizeof *t);
        if (!t) {
            fprintf(stderr, "dlock-gateway: out of memory\n");
            abort();
        }
        uv_timer_init(loop, t);
        t->data = r;
        uv_timer_start(t, backend_done, (uint64_t)cfg.backend_ms, 0);
        break;
    }
    case GW_STORED:
        req_respond(r, 200, body, len, 0);
        break;
    case GW_BUSY: {
        char b[400];
        int n = snprintf(b, sizeof b,
                         "{\"error\":\"busy: another request with this "
                         "key is being processed\",\"key\":\"%s\"}\n",
                         r->pub.key);
        req_respond(r, 409, b, (size_t)n, 0);
        break;
    }
    case GW_FAIL:
        respond_error(r, 503, msg ? msg : "backend failure", 0);
        break;
    }
}

void gw_finished(gw_req *req, int ok, const char *msg)
{
    greq *r = (greq *)req;
    if (!ok) {
        respond_error(r, 503, msg ? msg : "could not store the result", 0);
        return;
    }
    req_respond(r, 200, r->body, r->body_len, 0);
}

/* ---- HTTP/1.1 request parsing ---------------------------------------- */

/* A parsed request head: what the gateway needs of it. */
typedef struct http_req {
    size_t total; /* head + body bytes */
    int keep_alive;
    const char *key;
    size_t keylen;
    int status; /* 0: fine; else the error status to answer */
    const char *why;
} http_req;

/* A token character (RFC 9110 tchar). */
static int tchar(int ch)
{
    return isalnum(ch) || (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* Case-insensitive compare of [p, p+n) with the NUL-terminated S. */
static int ieq(const char *p, size_t n, const char *s)
{
    size_t m = strlen(s);
    if (n != m)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (tolower((unsigned char)p[i]) != tolower((unsigned char)s[i]))
            return 0;
    return 1;
}

/* Does the comma-separated header value [v, v+n) hold the token TOK? */
static int has_token(const char *v, size_t n, const char *tok)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t s = i;
        while (i < n && v[i] != ',')
            i++;
        size_t e = i;
        while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
            e--;
        if (ieq(v + s, e - s, tok))
            return 1;
    }
    return 0;
}

/*
 * Parse one request from [p, p+n). Returns 1 with *out filled (out->status
 * non-zero for a request to refuse: the connection then closes), 0 when
 * more bytes are needed. Never reads past n.
 */
static int http_parse(const char *p, size_t n, http_req *out)
{
    memset(out, 0, sizeof *out);
    const char *end = NULL;
    size_t lim = n < HDR_MAX ? n : HDR_MAX;
    for (size_t i = 0; i + 3 < lim; i++)
        if (p[i] == '\r' && p[i + 1] == '\n' && p[i + 2] == '\r' &&
            p[i + 3] == '\n') {
            end = p + i + 2; /* the empty line's start */
            break;
        }
    if (!end) {
        if (n >= HDR_MAX) {
            out->status = 400;
            out->why = "request head too large";
            return 1;
        }
        /* A stray byte no request line can start with: refuse now. */
        for (size_t i = 0; i < n; i++) {
            unsigned char ch = (unsigned char)p[i];
            if (ch == 0 || (ch >= 0x80)) {
                out->status = 400;
                out->why = "binary data in the request head";
                return 1;
            }
        }
        return 0;
    }
    /* Request line: METHOD SP TARGET SP HTTP/1.x CRLF */
    const char *q = p;
    const char *eol = memchr(q, '\r', (size_t)(end - q));
    size_t i = 0, ll = (size_t)(eol - q);
    while (i < ll && tchar((unsigned char)q[i]))
        i++;
    if (i == 0 || i > 32 || i >= ll || q[i] != ' ') {
        out->status = 400;
        out->why = "bad request line (method)";
        return 1;
    }
    size_t t0 = ++i;
    while (i < ll && (unsigned char)q[i] > 0x20 && (unsigned char)q[i] < 0x7f)
        i++;
    if (i == t0 || i >= ll || q[i] != ' ') {
        out->status = 400;
        out->why = "bad request line (target)";
        return 1;
    }
    i++;
    int minor;
    if (ll - i == 8 && memcmp(q + i, "HTTP/1.", 7) == 0 &&
        (q[i + 7] == '0' || q[i + 7] == '1')) {
        minor = q[i + 7] - '0';
    } else {
        out->status = 400;
        out->why = "bad request line (version)";
        return 1;
    }
    out->keep_alive = minor == 1;
    /* Header lines. */
    q = eol + 2;
    int nh = 0, have_cl = 0;
    uint64_t cl = 0;
    while (q < end) {
        eol = memchr(q, '\r', (size_t)(end - q) + 1);
        if (!eol || eol[1] != '\n') {
            out->status = 400;
            out->why = "bare CR in the request head";
            return 1;
        }
        size_t len = (size_t)(eol - q);
        if (++nh > NHDR_MAX) {
            out->status = 400;
            out->why = "too many header lines";
            return 1;
        }
        size_t k = 0;
        while (k < len && tchar((unsigned char)q[k]))
            k++;
        if (k == 0 || k >= len || q[k] != ':') {
            out->status = 400;
            out->why = "bad header line";
            return 1;
        }
        size_t vs = k + 1;
        while (vs < len && (q[vs] == ' ' || q[vs] == '\t'))
            vs++;
        size_t ve = len;
        while (ve > vs && (q[ve - 1] == ' ' || q[ve - 1] == '\t'))
            ve--;
        for (size_t j = vs; j < ve; j++) {
            unsigned char ch = (unsigned char)q[j];
            if ((ch < 0x20 && ch != '\t') || ch == 0x7f) {
                out->status = 400;
                out->why = "control character in a header value";
                return 1;
            }
        }
        const char *v = q + vs;
        size_t vn = ve - vs;
        if (ieq(q, k, "content-length")) {
            uint64_t x = 0;
            if (vn == 0 || vn > 10) {
                out->status = 400;
                out->why = "bad Content-Length";
                return 1;
            }
            for (size_t j = 0; j < vn; j++) {
                if (v[j] < '0' || v[j] > '9') {
                    out->status = 400;
                    out->why = "bad Content-Length";
                    return 1;
                }
                x = x * 10 + (uint64_t)(v[j] - '0');
            }
            if (have_cl && x != cl) {
                out->status = 400;
                out->why = "conflicting Content-Length headers";
                return 1;
            }
            have_cl = 1;
            cl = x;
        } else if (ieq(q, k, "transfer-encoding")) {
            out->status = 501;
            out->why = "Transfer-Encoding is not supported";
            return 1;
        } else if (ieq(q, k, "connection")) {
            if (has_token(v, vn, "close"))
                out->keep_alive = 0;
            else if (has_token(v, vn, "keep-alive"))
                out->keep_alive = 1;
        } else if (ieq(q, k, "idempotency-key")) {
            if (out->key) {
                out->status = 400;
                out->why = "more than one Idempotency-Key";
                return 1;
            }
            if (vn == 0 || vn > KEY_MAX) {
                out->status = 400;
                out->why = "Idempotency-Key empty or too long";
                return 1;
            }
            for (size_t j = 0; j < vn; j++) {
                unsigned char ch = (unsigned char)v[j];
                if (ch <= 0x20 || ch >= 0x7f || ch == '"' || ch == '\\') {
                    out->status = 400;
                    out->why = "Idempotency-Key: visible ASCII only, no "
                               "quotes or backslashes";
                    return 1;
                }
            }
            out->key = v;
            out->keylen = vn;
        }
        q = eol + 2;
    }
    if (cl > BODY_MAX) {
        out->status = 400;
        out->why = "body too large";
        return 1;
    }
    size_t head = (size_t)(end - p) + 2;
    if (n - head < cl)
        return 0;
    out->total = head + (size_t)cl;
    return 1;
}

/* ---- connections ------------------------------------------------------ */

static void on_closed(uv_handle_t *h)
{
    conn *c = (conn *)h;
    free(c->buf);
    free(c);
}

/* Empty C's queue: ready requests are dropped, pending ones orphaned
 * (their backend work still completes and releases; the answer is
 * dropped). */
static void conn_drop_queue(conn *c)
{
    greq *r = c->head;
    while (r) {
        greq *nx = r->next;
        if (r->ready)
            req_free(r);
        else {
            r->c = NULL;
            r->next = NULL;
        }
        r = nx;
    }
    c->head = c->tail = NULL;
}

/* Close C (its queue emptied as conn_drop_queue). */
static void conn_close(conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    conn_drop_queue(c);
    uv_close((uv_handle_t *)&c->tcp, on_closed);
}

typedef struct wreq {
    uv_write_t w;
    conn *c;
    int close_after;
    unsigned n;
    char *bufs[64];
} wreq;

static void on_written(uv_write_t *w, int status)
{
    wreq *wr = (wreq *)w;
    for (unsigned i = 0; i < wr->n; i++)
        free(wr->bufs[i]);
    if ((status < 0 || wr->close_after) && !wr->c->closing)
        conn_close(wr->c);
    free(wr);
}

/* Write C's ready responses at the head of its queue, in order. */
static void conn_flush(conn *c)
{
    while (!c->closing && c->head && c->head->ready) {
        wreq *wr = calloc(1, sizeof *wr);
        uv_buf_t bufs[64];
        if (!wr) {
            conn_close(c);
            return;
        }
        wr->c = c;
        while (c->head && c->head->ready && wr->n < 64) {
            greq *r = c->head;
            c->head = r->next;
            if (!c->head)
                c->tail = NULL;
            bufs[wr->n] = uv_buf_init(r->resp, (unsigned)r->resp_len);
            wr->bufs[wr->n++] = r->resp;
            r->resp = NULL;
            if (r->close_after)
                wr->close_after = 1;
            req_free(r);
            if (wr->close_after)
                break;
        }
        if (uv_write(&wr->w, (uv_stream_t *)&c->tcp, bufs, wr->n, on_written) !=
            0) {
            for (unsigned i = 0; i < wr->n; i++)
                free(wr->bufs[i]);
            free(wr);
            conn_close(c);
            return;
        }
        if (wr->close_after) {
            /* Nothing after it is answered. */
            conn_drop_queue(c);
            return;
        }
    }
}

/* Queue a new request on C (answered in order). */
static greq *conn_new_req(conn *c)
{
    greq *r = calloc(1, sizeof *r);
    if (!r) {
        fprintf(stderr, "dlock-gateway: out of memory\n");
        abort();
    }
    r->c = c;
    r->pub.t0_ns = gw_now_ns();
    inflight++;
    if (c->tail)
        c->tail->next = r;
    else
        c->head = r;
    c->tail = r;
    return r;
}

/* Parse and start every complete request in C's buffer. */
static void conn_parse(conn *c)
{
    size_t off = 0;
    while (!c->stop_reading && off < c->len) {
        http_req h;
        if (!http_parse(c->buf + off, c->len - off, &h))
            break;
        greq *r = conn_new_req(c);
        if (h.status) {
            c->stop_reading = 1;
            uv_read_stop((uv_stream_t *)&c->tcp);
            respond_error(r, h.status, h.why, 1);
            break;
        }
        off += h.total;
        int close = !h.keep_alive || stopping;
        if (close) {
            c->stop_reading = 1;
            uv_read_stop((uv_stream_t *)&c->tcp);
        }
        if (!h.key) {
            respond_error(r, 400, "no Idempotency-Key header", close);
            continue;
        }
        r->close_after = close;
        r->pub.key = malloc(h.keylen + 1);
        if (!r->pub.key) {
            fprintf(stderr, "dlock-gateway: out of memory\n");
            abort();
        }
        memcpy(r->pub.key, h.key, h.keylen);
        r->pub.key[h.keylen] = 0;
        r->pub.keylen = h.keylen;
        backend->vt->begin(backend, &r->pub);
    }
    if (c->closing)
        return;
    if (off) {
        memmove(c->buf, c->buf + off, c->len - off);
        c->len -= off;
    }
}

static void on_alloc(uv_handle_t *h, size_t want, uv_buf_t *buf)
{
    conn *c = (conn *)h;
    (void)want;
    if (c->cap - c->len < 16384) {
        size_t nc = c->cap ? c->cap * 2 : 65536;
        char *nb = nc <= READ_MAX + 65536 ? realloc(c->buf, nc) : NULL;
        if (!nb) {
            *buf = uv_buf_init(NULL, 0);
            return;
        }
        c->buf = nb;
        c->cap = nc;
    }
    *buf = uv_buf_init(c->buf + c->len, (unsigned)(c->cap - c->len));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    conn *c = (conn *)s;
    (void)buf;
    if (n < 0 || (n == 0 && !buf->base)) {
        conn_close(c);
        return;
    }
    c->len += (size_t)n;
    conn_parse(c);
    if (!c->closing && !c->stop_reading && c->len >= READ_MAX) {
        c->stop_reading = 1;
        uv_read_stop(s);
        respond_error(conn_new_req(c), 400, "request too large", 1);
    }
}

/* A request the gateway closes with: answered with close_after. A
 * pending one (key being decided) sets it through r->close_after. */

static void on_connection(uv_stream_t *srv, int status)
{
    if (status < 0)
        return;
    conn *c = calloc(1, sizeof *c);
    if (!c)
        return;
    uv_tcp_init(loop, &c->tcp);
    if (uv_accept(srv, (uv_stream_t *)&c->tcp) != 0) {
        uv_close((uv_handle_t *)&c->tcp, on_closed);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/* ---- main ------------------------------------------------------------- */

static void stop_check(uv_timer_t *t)
{
    (void)t;
    if (inflight == 0 && backend->vt->pending(backend) == 0) {
        uv_timer_stop(&stop_timer);
        uv_stop(loop);
    }
}

static void on_signal(uv_signal_t *h, int sig)
{
    (void)h;
    (void)sig;
    if (stopping)
        return;
    stopping = 1;
    uv_close((uv_handle_t *)&listener, NULL);
    uv_timer_start(&stop_timer, stop_check, 0, 20);
}

static void usage(FILE *f)
{
    fprintf(
        f, "usage: dlock-gateway --listen HOST:PORT -s URL [-s URL...] "
           "--backend-ms N\n"
           "                     [--mode wait|reject] [--lease-ms N] "
           "[--keep-ms N]\n"
           "                     [--impl dlock|floor] [--prefix P] "
           "[--poll-ms N]\n"
           "                     [--wait-strategy fair|notify|spin] "
           "[--fence-retention-ms N]\n"
           "                     [--read fenced|plain] [--layout hash|string]\n"
           "--layout string (the default): one Redis script a request; hash: "
           "the\nlibrary's default layout. Gateways that act as one (the same "
           "--prefix)\nmust all use the same layout.\n");
}

/* Parse a non-negative int option value; exit 2 on junk. */
static int intarg(const char *opt, const char *v)
{
    char *e;
    errno = 0;
    long x = v ? strtol(v, &e, 10) : -1;
    if (!v || errno || *e || x < 0 || x > 100000000) {
        fprintf(stderr, "dlock-gateway: %s needs a number >= 0\n", opt);
        exit(2);
    }
    return (int)x;
}

int main(int argc, char **argv)
{
    const char *listen = NULL, *impl = "dlock";
    int have_backend_ms = 0;
    cfg.lease_ms = 10000;
    cfg.poll_ms = 10;
    cfg.mode = GW_WAIT;
    cfg.strategy = -1;
    cfg.fence_retention_ms = 0;
    cfg.prefix = "gw";
    cfg.string_layout = 1; /* --layout string: one script a request */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--listen") && v) {
            listen = v;
            i++;
        } else if ((!strcmp(a, "-s") || !strcmp(a, "--server")) && v) {
            if (cfg.nservers == 16) {
                fprintf(stderr, "dlock-gateway: at most 16 servers\n");
                return 2;
            }
            cfg.servers[cfg.nservers++] = v;
            i++;
        } else if (!strcmp(a, "--backend-ms")) {
            cfg.backend_ms = intarg(a, v);
            have_backend_ms = 1;
            i++;
        } else if (!strcmp(a, "--lease-ms")) {
            cfg.lease_ms = intarg(a, v);
            i++;
        } else if (!strcmp(a, "--keep-ms")) {
            cfg.keep_ms = intarg(a, v);
            i++;
        } else if (!strcmp(a, "--poll-ms")) {
            cfg.poll_ms = intarg(a, v);
            i++;
        } else if (!strcmp(a, "--mode") && v) {
            if (!strcmp(v, "wait"))
                cfg.mode = GW_WAIT;
            else if (!strcmp(v, "reject"))
                cfg.mode = GW_REJECT;
            else {
                fprintf(stderr, "dlock-gateway: --mode wait|reject\n");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--fence-retention-ms")) {
            cfg.fence_retention_ms = intarg(a, v);
            i++;
        } else if (!strcmp(a, "--layout") && v) {
            if (strcmp(v, "hash") && strcmp(v, "string")) {
                fprintf(stderr, "dlock-gateway: --layout hash|string\n");
                return 2;
            }
            cfg.string_layout = !strcmp(v, "string");
            i++;
        } else if (!strcmp(a, "--read") && v) {
            if (!strcmp(v, "fenced") || !strcmp(v, "plain"))
                cfg.plain_get = !strcmp(v, "plain");
            else {
                fprintf(stderr, "dlock-gateway: --read fenced|plain\n");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--wait-strategy") && v) {
            if (!strcmp(v, "notify"))
                cfg.strategy = 0;
            else if (!strcmp(v, "spin"))
                cfg.strategy = 1;
            else if (!strcmp(v, "fair"))
                cfg.strategy = 2;
            else {
                fprintf(stderr,
                        "dlock-gateway: --wait-strategy fair|notify|spin\n");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--impl") && v) {
            impl = v;
            i++;
        } else if (!strcmp(a, "--prefix") && v) {
            cfg.prefix = v;
            i++;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "dlock-gateway: bad argument: %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!listen || !cfg.nservers || !have_backend_ms) {
        usage(stderr);
        return 2;
    }
    if (cfg.lease_ms < 10 || cfg.poll_ms < 1) {
        fprintf(stderr, "dlock-gateway: --lease-ms >= 10, --poll-ms >= 1\n");
        return 2;
    }
    char host[256];
    const char *colon = strrchr(listen, ':');
    if (!colon || (size_t)(colon - listen) >= sizeof host) {
        fprintf(stderr, "dlock-gateway: --listen HOST:PORT\n");
        return 2;
    }
    memcpy(host, listen, (size_t)(colon - listen));
    host[colon - listen] = 0;
    int port = intarg("--listen's port", colon + 1);
    signal(SIGPIPE, SIG_IGN);
    {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        boot_id = (uint32_t)(ts.tv_nsec ^ (ts.tv_sec << 12) ^
                             ((unsigned)getpid() << 16));
    }
    loop = uv_default_loop();
    char err[512] = "";
    if (!strcmp(impl, "floor"))
        backend = gw_floor_new(loop, &cfg, err, sizeof err);
    else if (!strcmp(impl, "dlock"))
        backend = gw_dlock_new(loop, &cfg, err, sizeof err);
    else {
        fprintf(stderr, "dlock-gateway: --impl dlock|floor\n");
        return 2;
    }
    if (!backend) {
        fprintf(stderr, "dlock-gateway: %s\n", err);
        return 1;
    }
    struct sockaddr_storage sa;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&sa) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&sa) != 0) {
        fprintf(stderr, "dlock-gateway: bad listen address %s\n", listen);
        return 2;
    }
    uv_tcp_init(loop, &listener);
    int rc = uv_tcp_bind(&listener, (struct sockaddr *)&sa, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&listener, 4096, on_connection);
    if (rc != 0) {
        fprintf(stderr, "dlock-gateway: listen %s: %s\n", listen,
                uv_strerror(rc));
        return 1;
    }
    struct sockaddr_storage bound;
    int blen = sizeof bound;
    uv_tcp_getsockname(&listener, (struct sockaddr *)&bound, &blen);
    int bport = ntohs(bound.ss_family == AF_INET6
                          ? ((struct sockaddr_in6 *)&bound)->sin6_port
                          : ((struct sockaddr_in *)&bound)->sin_port);
    printf("listening %s:%d\n", host, bport);
    fflush(stdout);
    uv_timer_init(loop, &stop_timer);
    uv_signal_init(loop, &sigint_h);
    uv_signal_init(loop, &sigterm_h);
    uv_signal_start(&sigint_h, on_signal, SIGINT);
    uv_signal_start(&sigterm_h, on_signal, SIGTERM);
    uv_run(loop, UV_RUN_DEFAULT);
    int nc = backend->vt->connections(backend);
    if (nc >= 0)
        fprintf(stderr,
                "dlock-gateway: stopped; %" PRIu64 " processings, %d "
                "connection(s) to the server\n",
                processed, nc);
    else
        fprintf(stderr, "dlock-gateway: stopped; %" PRIu64 " processings\n",
                processed);
    backend->vt->destroy(backend);
    return 0;
}
