/*
 * dlock-gateway-load - the gateway's load generator (issue 30).
 *
 *   dlock-gateway-load -t HOST:PORT [-t HOST:PORT...] -k INFLIGHT
 *                      -n TOTAL [-c CONNS] [--dup-pct P] [--run ID]
 *
 * Keeps INFLIGHT requests outstanding, pipelined over CONNS keep-alive
 * connections (default 4, spread round-robin over the targets), TOTAL in
 * all. Keys are ID-0, ID-1, ...; with --dup-pct P a request reuses, with
 * probability P %, one of the last 16 new keys (most still in flight: a
 * concurrent duplicate, often sent to another target). Measures
 * throughput, end-to-end latency and the gateway's decision latency
 * (X-Decision-Us) at p50/p99, and checks the processing ids: every 200
 * for one key must carry the same processing_id (else that key was
 * processed twice: double_processed). Prints one JSON line.
 * Exit: 0 ran clean; 3 a key processed twice; 1 errors (connection lost,
 * a response not understood, a status other than 200/409).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#define RING 16

typedef struct pend {
    uint32_t key;
    uint64_t t0;
} pend;

typedef struct lconn {
    uv_tcp_t tcp;
    uv_connect_t creq;
    int connected;
    pend *q; /* outstanding requests, FIFO ring */
    size_t qcap, qhead, qlen;
    char *buf;
    size_t len, cap;
    int want; /* requests this connection keeps in flight */
} lconn;

static uv_loop_t *loop;
static lconn *conns;
static int nconns = 4;
static uint64_t total, issued, done_n, inflight_goal;
static unsigned dup_pct;
static const char *run_id = "run";
static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint32_t next_key;
static uint32_t ring[RING];
static unsigned ring_n;
static char **ids; /* per key: the processing id first seen */
static uint64_t *lat, *dec;
static uint64_t n200, n409, nother, nerr, ndup, ndouble;
static uint64_t t_start, t_end;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t xrand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void on_written(uv_write_t *w, int status)
{
    (void)status;
    free(w->data);
    free(w);
}

/* Send one request on C (a new key or a duplicate). */
static void issue(lconn *c)
{
    uint32_t k;
    if (ring_n && xrand() % 100 < dup_pct) {
        k = ring[xrand() % (ring_n < RING ? ring_n : RING)];
        ndup++;
    } else {
        k = next_key++;
        ring[ring_n++ % RING] = k;
    }
    if (c->qlen == c->qcap) {
        size_t nc = c->qcap ? c->qcap * 2 : 64;
        pend *nq = malloc(nc * sizeof *nq);
        if (!nq)
            abort();
        for (size_t i = 0; i < c->qlen; i++)
            nq[i] = c->q[(c->qhead + i) % c->qcap];
        free(c->q);
        c->q = nq;
        c->qcap = nc;
        c->qhead = 0;
    }
    c->q[(c->qhead + c->qlen++) % c->qcap] = (pend){k, now_ns()};
    issued++;
    char *req = malloc(256);
    if (!req)
        abort();
    int n = snprintf(req, 256,
                     "POST /orders HTTP/1.1\r\nHost: gw\r\n"
                     "Idempotency-Key: %s-%" PRIu32
                     "\r\nContent-Length: 2\r\n\r\n{}",
                     run_id, k);
    uv_write_t *w = malloc(sizeof *w);
    if (!w)
        abort();
    w->data = req;
    uv_buf_t b = uv_buf_init(req, (unsigned)n);
    if (uv_write(w, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0) {
        free(req);
        free(w);
        nerr++;
    }
}

static void finish_all(void)
{
    t_end = now_ns();
    for (int i = 0; i < nconns; i++)
        if (!uv_is_closing((uv_handle_t *)&conns[i].tcp))
            uv_close((uv_handle_t *)&conns[i].tcp, NULL);
}

/* Handle one response for C's oldest request: STATUS, DEC_US, BODY. */
static void got(lconn *c, int status, uint64_t dec_us, const char *body,
                size_t blen)
{
    if (!c->qlen) {
        nerr++;
        return;
    }
    pend p = c->q[c->qhead];
    c->qhead = (c->qhead + 1) % c->qcap;
    c->qlen--;
    lat[done_n] = (now_ns() - p.t0) / 1000;
    dec[done_n] = dec_us;
    done_n++;
    if (status == 200) {
        n200++;
        const char *tag = "\"processing_id\":\"";
        const char *s = NULL;
        size_t tl = strlen(tag);
        for (size_t i = 0; i + tl <= blen; i++)
            if (!memcmp(body + i, tag, tl)) {
                s = body + i + tl;
                break;
            }
        const char *e = s ? memchr(s, '"', (size_t)(body + blen - s)) : NULL;
        if (!e) {
            nerr++;
        } else if (!ids[p.key]) {
            ids[p.key] = strndup(s, (size_t)(e - s));
        } else if (strncmp(ids[p.key], s, (size_t)(e - s)) ||
                   ids[p.key][e - s]) {
            if (ids[p.key][0] != '!') {
                ndouble++;
                fprintf(stderr,
                        "load: key %s-%" PRIu32 " processed twice: %s and "
                        "%.*s\n",
                        run_id, p.key, ids[p.key], (int)(e - s), s);
                char *m = malloc(strlen(ids[p.key]) + 2);
                if (m) {
                    m[0] = '!';
                    strcpy(m + 1, ids[p.key]);
                    free(ids[p.key]);
                    ids[p.key] = m;
                }
            }
        }
    } else if (status == 409)
        n409++;
    else
        nother++;
    if (issued < total)
        issue(c);
    if (done_n == total)
        finish_all();
}

/* Parse the complete responses in C's buffer. */
static void parse(lconn *c)
{
    size_t off = 0;
    for (;;) {
        char *p = c->buf + off;
        size_t n = c->len - off;
        char *end = NULL;
        for (size_t i = 0; i + 3 < n; i++)
            if (!memcmp(p + i, "\r\n\r\n", 4)) {
                end = p + i + 4;
                break;
            }
        if (!end)
            break;
        int status = 0;
        if (n < 12 || memcmp(p, "HTTP/1.1 ", 9) ||
            sscanf(p + 9, "%3d", &status) != 1) {
            nerr++;
            finish_all();
            return;
        }
        size_t cl = 0;
        uint64_t dus = 0;
        for (char *h = memchr(p, '\n', (size_t)(end - p)); h && h < end;
             h = memchr(h + 1, '\n', (size_t)(end - h - 1))) {
            if (!strncasecmp(h + 1, "Content-Length:", 15))
                cl = strtoul(h + 16, NULL, 10);
            else if (!strncasecmp(h + 1, "X-Decision-Us:", 14))
                dus = strtoull(h + 15, NULL, 10);
        }
        size_t hl = (size_t)(end - p);
        if (n < hl + cl)
            break;
        got(c, status, dus, end, cl);
        off += hl + cl;
        if (done_n == total)
            break;
    }
    memmove(c->buf, c->buf + off, c->len - off);
    c->len -= off;
}

static void on_alloc(uv_handle_t *h, size_t want, uv_buf_t *buf)
{
    lconn *c = (lconn *)h;
    (void)want;
    if (c->cap - c->len < 65536) {
        size_t nc = c->cap ? c->cap * 2 : 262144;
        char *nb = realloc(c->buf, nc);
        if (!nb)
            abort();
        c->buf = nb;
        c->cap = nc;
    }
    *buf = uv_buf_init(c->buf + c->len, (unsigned)(c->cap - c->len));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    lconn *c = (lconn *)s;
    (void)buf;
    if (n < 0) {
        if (done_n < total) {
            fprintf(stderr, "load: connection lost: %s\n", uv_strerror((int)n));
            nerr += c->qlen + 1;
            finish_all();
        }
        return;
    }
    c->len += (size_t)n;
    parse(c);
}

static int nconnected;

static void on_connect(uv_connect_t *r, int status)
{
    lconn *c = r->data;
    if (status < 0) {
        fprintf(stderr, "load: connect: %s\n", uv_strerror(status));
        nerr++;
        finish_all();
        return;
    }
    c->connected = 1;
    uv_tcp_nodelay(&c->tcp, 1);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (++nconnected == nconns) {
        t_start = now_ns();
        /* Round-robin the first INFLIGHT requests over the connections. */
        for (uint64_t i = 0; i < inflight_goal && issued < total; i++)
            issue(&conns[i % (uint64_t)nconns]);
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t pct(uint64_t *v, uint64_t n, double p)
{
    if (!n)
        return 0;
    uint64_t i = (uint64_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

static void usage(void)
{
    fprintf(stderr, "usage: dlock-gateway-load -t HOST:PORT [-t ...] -k "
                    "INFLIGHT -n TOTAL [-c CONNS] [--dup-pct P] [--run "
                    "ID]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *targets[16];
    int nt = 0;
    /* Every option takes a value: they come in pairs. */
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage();
        if (!strcmp(a, "-t") && nt < 16)
            targets[nt++] = v;
        else if (!strcmp(a, "-k"))
            inflight_goal = strtoull(v, NULL, 10);
        else if (!strcmp(a, "-n"))
            total = strtoull(v, NULL, 10);
        else if (!strcmp(a, "-c"))
            nconns = atoi(v);
        else if (!strcmp(a, "--dup-pct"))
            dup_pct = (unsigned)atoi(v);
        else if (!strcmp(a, "--run"))
            run_id = v;
        else
            usage();
    }
    if (!nt || !inflight_goal || !total || nconns < 1 || nconns > 1024 ||
        dup_pct > 100 || total > 100000000)
        usage();
    rng ^= (uint64_t)time(NULL);
    ids = calloc(total, sizeof *ids);
    lat = calloc(total, sizeof *lat);
    dec = calloc(total, sizeof *dec);
    conns = calloc((size_t)nconns, sizeof *conns);
    if (!ids || !lat || !dec || !conns)
        abort();
    loop = uv_default_loop();
    for (int i = 0; i < nconns; i++) {
        const char *t = targets[i % nt];
        const char *colon = strrchr(t, ':');
        char host[256];
        if (!colon || (size_t)(colon - t) >= sizeof host)
            usage();
        memcpy(host, t, (size_t)(colon - t));
        host[colon - t] = 0;
        struct sockaddr_in sa;
        if (uv_ip4_addr(host, atoi(colon + 1), &sa) != 0)
            usage();
        uv_tcp_init(loop, &conns[i].tcp);
        conns[i].creq.data = &conns[i];
        uv_tcp_connect(&conns[i].creq, &conns[i].tcp, (struct sockaddr *)&sa,
                       on_connect);
    }
    uv_run(loop, UV_RUN_DEFAULT);
    if (!t_end)
        t_end = now_ns();
    double secs = t_start ? (double)(t_end - t_start) / 1e9 : 0;
    qsort(lat, done_n, sizeof *lat, cmp_u64);
    qsort(dec, done_n, sizeof *dec, cmp_u64);
    uint64_t keys = 0;
    for (uint64_t i = 0; i < total; i++)
        if (ids[i])
            keys++;
    printf("{\"requests\":%" PRIu64 ",\"completed\":%" PRIu64
           ",\"inflight\":%" PRIu64 ",\"conns\":%d,\"secs\":%.4f,"
           "\"throughput\":%.1f,\"p50_us\":%" PRIu64 ",\"p99_us\":%" PRIu64
           ",\"decision_p50_us\":%" PRIu64 ",\"decision_p99_us\":%" PRIu64
           ",\"status_200\":%" PRIu64 ",\"status_409\":%" PRIu64
           ",\"status_other\":%" PRIu64 ",\"errors\":%" PRIu64
           ",\"keys_processed\":%" PRIu64 ",\"dup_requests\":%" PRIu64
           ",\"double_processed\":%" PRIu64 "}\n",
           total, done_n, inflight_goal, nconns, secs,
           secs > 0 ? (double)done_n / secs : 0, pct(lat, done_n, 0.5),
           pct(lat, done_n, 0.99), pct(dec, done_n, 0.5),
           pct(dec, done_n, 0.99), n200, n409, nother, nerr, keys, ndup,
           ndouble);
    if (ndouble)
        return 3;
    return nerr || nother || done_n < total ? 1 : 0;
}
