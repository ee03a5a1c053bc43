/*
 * conn.c - one connection to one Redis server, whatever carries it: the
 * output queue and our RESP command writer, hiredis's reply reader, the
 * poll-driven progress step, and the blocking round trip built on it.
 *
 * We own the socket instead of using redisContext so that every socket is
 * non-blocking and bounded by a monotonic deadline, and one thread can
 * poll() many connections (node.c fans one script out to every server at
 * once): dlock__conn_events() says what to wait for,
 * dlock__conn_progress() does the I/O poll() allowed. hiredis only parses
 * replies (redisReader); commands are formatted here (see
 * dlock__conn_append_argv for why).
 *
 * The bytes move through the connection's I/O table (conn_io.h): the plain
 * socket entries below, or TLS's (tls.c); no function here asks which. A
 * connection is dead after any failure; callers close it and open
 * another. A dlock__conn is used by one thread at a time.
 *
 * Layer: the bottom of the transport; tls.c and net.c are above it.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "io/conn.h"
#include "io/conn_io.h"

/* How much one read takes from the socket. */
#define READ_CHUNK 16384
/* Reads per progress call on a plain socket before yielding to the caller
 * (poll is level-triggered, so nothing is lost by stopping). */
#define READ_ROUNDS 64

/* A request given up on (see dlock__conn_abandon_eval): its EVAL form
 * in RESP, or none. */
struct dlock__stale {
    struct dlock__stale *next;
    char *eval;
    size_t len;
};

/* Queue a stale entry (eval may be NULL); 0, or -1 out of memory. */
static int stale_push(dlock__conn *c, char *eval, size_t len)
{
    struct dlock__stale *e = calloc(1, sizeof *e);
    if (e == NULL)
        return -1;
    e->eval = eval;
    e->len = len;
    if (c->stale_tail != NULL)
        c->stale_tail->next = e;
    else
        c->stale_head = e;
    c->stale_tail = e;
    return 0;
}
/*
 * Caps on what a peer may announce. hiredis 0.14's reader allocates an
 * array's element table as soon as it reads "*N\r\n", before any element
 * arrives: "*88888882" alone costs ~700 MB (hiredis 1.x has maxelements,
 * 0.14 has not). Our largest legitimate replies are small: an extend
 * batch has one element per lock renewed in the round (at most 256), an
 * inspect a few per holder, CONFIG GET two; so a million elements (8 MB
 * of table) is a wide margin. A bulk string is allocated only once all
 * of it has arrived, so its cost is what the peer really sent; it is
 * capped at Redis's own proto-max-bulk-len default (512 MB: a fenced
 * value, the only user data we read, cannot be longer on a default
 * server), and so are the bytes buffered for one unfinished reply. Above
 * a cap the reader fails and the connection dies with DLOCK_EPROTO.
 */
#define REPLY_MAX_ELEMENTS (1 << 20)
#define REPLY_MAX_BULK ((size_t)512 * 1024 * 1024)

/* See conn_io.h. */
int dlock__conn_die(dlock__conn *c, int code)
{
    c->dead = 1;
    return code;
}

/* The hint added to "closed"/"reset" messages of a plain TCP connection
 * that never received a byte: that is how a TLS port treats a plain
 * client (OpenSSL rejects the first bytes and the server resets). */
static const char *plain_hint(const dlock__conn *c)
{
    return c->tcp && c->nread == 0
               ? " before any reply (is it a TLS port? then use rediss://)"
               : "";
}

/* Fail for a socket error (errno value e) on a plain connection, as
 * "connection closed/reset by PEER" or "OP PEER: strerror". */
static int sock_fail(dlock__conn *c, const char *op, int e, char *err,
                     size_t errlen)
{
    if (e == 0 || e == EPIPE)
        return dlock__conn_die(c, dlock__fail(err, errlen, DLOCK_EIO,
                                              "connection closed by %s%s",
                                              c->peer, plain_hint(c)));
    if (e == ECONNRESET)
        return dlock__conn_die(c, dlock__fail(err, errlen, DLOCK_EIO,
                                              "connection reset by %s%s",
                                              c->peer, plain_hint(c)));
    return dlock__conn_die(c, dlock__fail(err, errlen, DLOCK_EIO, "%s %s: %s",
                                          op, c->peer, strerror(e)));
}

/* The reply reader failed (not RESP, a reply above our caps, or out of
 * memory): the connection is dead. A refused reply also makes hiredis
 * say "Out of memory" (an object function returned NULL): our reason
 * wins. */
static int reader_failed(dlock__conn *c, char *err, size_t errlen)
{
    if (c->refused[0] != '\0')
        return dlock__conn_die(c, dlock__fail(err, errlen, DLOCK_EPROTO,
                                              "protocol error from %s: %s",
                                              c->peer, c->refused));
    return dlock__conn_die(
        c, dlock__fail(
               err, errlen,
               c->reader->err == REDIS_ERR_OOM ? DLOCK_ENOMEM : DLOCK_EPROTO,
               "protocol error from %s: %s", c->peer, c->reader->errstr));
}

/* hiredis's createArray, unless the peer announced more elements than
 * REPLY_MAX_ELEMENTS: then NULL, which fails the reader before anything
 * is allocated. (A negative count other than nil's -1 never gets here in
 * hiredis 0.14.1, "Multi-bulk length out of range"; refused all the
 * same, as calloc would see a huge size.) */
static void *cap_array(const redisReadTask *task, int elements)
{
    dlock__conn *c = task->privdata;
    if (elements < 0 || elements > REPLY_MAX_ELEMENTS) {
        snprintf(c->refused, sizeof c->refused,
                 "an array of %d elements announced (at most %d accepted)",
                 elements, REPLY_MAX_ELEMENTS);
        return NULL;
    }
    return c->base->createArray(task, elements);
}

/* hiredis's createString, unless longer than REPLY_MAX_BULK. */
static void *cap_string(const redisReadTask *task, char *str, size_t len)
{
    dlock__conn *c = task->privdata;
    if (len > REPLY_MAX_BULK) {
        snprintf(c->refused, sizeof c->refused,
                 "a string of %zu bytes (at most %zu accepted)", len,
                 REPLY_MAX_BULK);
        return NULL;
    }
    return c->base->createString(task, str, len);
}

/* See conn_io.h. Also refuses a peer that keeps sending one reply past
 * the bulk cap (hiredis would buffer all of it before parsing). */
int dlock__conn_feed(dlock__conn *c, const char *buf, size_t n, char *err,
                     size_t errlen)
{
    c->nread += n;
    if (redisReaderFeed(c->reader, buf, n) != REDIS_OK)
        return reader_failed(c, err, errlen);
    if (c->reader->len - c->reader->pos > REPLY_MAX_BULK + 64) {
        snprintf(c->refused, sizeof c->refused, "a reply longer than %zu bytes",
                 REPLY_MAX_BULK);
        return reader_failed(c, err, errlen);
    }
    return DLOCK_OK;
}

/* Write as much queued output as the socket takes now. DLOCK_OK when it
 * all went or the socket is full; an error otherwise. */
static int plain_write(dlock__conn *c, char *err, size_t errlen)
{
    while (c->outpos < c->outlen) {
        size_t left = c->outlen - c->outpos;
        ssize_t n = send(c->fd, c->out + c->outpos, left, MSG_NOSIGNAL);
        if (n >= 0) {
            c->outpos += (size_t)n;
            continue;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return DLOCK_OK;
        return sock_fail(c, "write to", errno, err, errlen);
    }
    return DLOCK_OK;
}

/* Read what can be read now into the reader, at most READ_ROUNDS chunks.
 * DLOCK_OK, or an error (EOF included: the peer closed). */
static int plain_read(dlock__conn *c, char *err, size_t errlen)
{
    char buf[READ_CHUNK];
    int rounds;
    for (rounds = 0; rounds < READ_ROUNDS; rounds++) {
        ssize_t n = recv(c->fd, buf, sizeof buf, 0);
        if (n > 0) {
            int r;
            if (c->nread == 0 && n >= 2 &&
                ((unsigned char)buf[0] == 0x15 ||
                 (unsigned char)buf[0] == 0x16) &&
                buf[1] == 0x03) {
                /* A TLS alert or handshake record where RESP should be: a
                 * plain client talking to a TLS port. */
                return dlock__conn_die(
                    c, dlock__fail(err, errlen, DLOCK_EPROTO,
                                   "protocol error from %s: the server "
                                   "answered with TLS: is it a TLS port? "
                                   "(use rediss://)",
                                   c->peer));
            }
            r = dlock__conn_feed(c, buf, (size_t)n, err, errlen);
            if (r != DLOCK_OK)
                return r;
            if ((size_t)n < sizeof buf)
                return DLOCK_OK;
            continue;
        }
        if (n == 0)
            return sock_fail(c, "read from", 0, err, errlen);
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return DLOCK_OK;
        return sock_fail(c, "read from", errno, err, errlen);
    }
    return DLOCK_OK;
}

static const dlock__conn_io plain_io = {
    .read = plain_read,
    .write = plain_write,
    .close = NULL,
};

/* See conn_io.h. */
dlock__conn *dlock__conn_new(const char *peer)
{
    dlock__conn *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->fd = -1;
    c->io = &plain_io;
    c->peer = strdup(peer);
    c->reader = redisReaderCreate();
    if (c->peer == NULL || c->reader == NULL) {
        dlock__conn_close(c);
        return NULL;
    }
    /* Our caps around hiredis's object functions, per connection (no
     * global table): the tasks carry the connection as privdata. */
    c->base = c->reader->fn;
    c->fns = *c->base;
    c->fns.createArray = cap_array;
    c->fns.createString = cap_string;
    c->reader->fn = &c->fns;
    c->reader->privdata = c;
    return c;
}

/* Close the socket (with a best-effort TLS close_notify on a healthy
 * connection) and free everything. Accepts NULL. */
void dlock__conn_close(dlock__conn *c)
{
    if (c == NULL)
        return;
    if (c->io != NULL && c->io->close != NULL)
        c->io->close(c);
    if (c->fd >= 0) {
        /* Read what has arrived first: closing a TCP socket with unread
         * data sends a reset, and a reset can make the server drop a
         * request of ours it has received but not read yet (an undo
         * queued behind a request that timed out, say). */
        char buf[4096];
        int k;
        for (k = 0; k < 16; k++) {
            ssize_t r = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
            if (r <= 0 && !(r < 0 && errno == EINTR))
                break;
        }
        close(c->fd);
    }
    if (c->reader != NULL)
        redisReaderFree(c->reader);
    while (c->stale_head != NULL) {
        struct dlock__stale *e = c->stale_head;
        c->stale_head = e->next;
        free(e->eval);
        free(e);
    }
    free(c->out);
    free(c->peer);
    free(c);
}

/* Append "<prefix><n>\r\n" at p; returns the new end. */
static char *put_len(char *p, char prefix, size_t n)
{
    *p++ = prefix;
    p += dlock__fmt_u64(p, n);
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

/* An upper bound of the RESP size of a command. */
static size_t resp_bound(int argc, const char **argv, const size_t *argvlen)
{
    size_t len = 3 + 20;
    int i;
    for (i = 0; i < argc; i++)
        len +=
            1 + 20 + 2 + (argvlen != NULL ? argvlen[i] : strlen(argv[i])) + 2;
    return len;
}

/* Write the command as RESP at p; returns the new end. */
static char *resp_write(char *p, int argc, const char **argv,
                        const size_t *argvlen)
{
    int i;
    p = put_len(p, '*', (size_t)argc);
    for (i = 0; i < argc; i++) {
        size_t n = argvlen != NULL ? argvlen[i] : strlen(argv[i]);
        p = put_len(p, '$', n);
        memcpy(p, argv[i], n);
        p += n;
        *p++ = '\r';
        *p++ = '\n';
    }
    return p;
}

/* Make room for len more bytes of output. DLOCK_OK or DLOCK_ENOMEM. */
static int out_reserve(dlock__conn *c, size_t len)
{
    size_t need;
    /* Reclaim what was already written before growing. Moving the unsent
     * bytes is fine even under a pending SSL_write retry: the context has
     * SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER and the bytes stay the same. */
    if (c->outpos > 0 && c->outlen + len > c->outcap) {
        memmove(c->out, c->out + c->outpos, c->outlen - c->outpos);
        c->outlen -= c->outpos;
        c->outpos = 0;
    }
    need = c->outlen + len;
    if (need > c->outcap) {
        size_t cap = c->outcap > 0 ? c->outcap : 1024;
        char *np;
        while (cap < need)
            cap *= 2;
        np = realloc(c->out, cap);
        if (np == NULL)
            return DLOCK_ENOMEM;
        c->out = np;
        c->outcap = cap;
    }
    return DLOCK_OK;
}

/* Format the command as RESP straight into the output queue. Our own
 * formatter rather than hiredis's redisFormatCommandArgv: that one
 * sprintf()s every length and made up close to half of the client's
 * instructions per lock cycle (callgrind). */
int dlock__conn_append_argv(dlock__conn *c, int argc, const char **argv,
                            const size_t *argvlen)
{
    char *p;
    if (argc <= 0)
        return DLOCK_EINVAL;
    if (out_reserve(c, resp_bound(argc, argv, argvlen)) != DLOCK_OK)
        return DLOCK_ENOMEM;
    p = resp_write(c->out + c->outlen, argc, argv, argvlen);
    c->outlen = (size_t)(p - c->out);
    return DLOCK_OK;
}

/* The socket of c, for poll(). */
int dlock__conn_fd(const dlock__conn *c)
{
    return c->fd;
}

/* 1 when nothing is queued for writing. */
int dlock__conn_flushed(const dlock__conn *c)
{
    return c->outpos >= c->outlen;
}

/* The events to poll for now. POLLIN is always wanted, so that a peer
 * that closes or answers while we are still writing is noticed. POLLOUT
 * while output is queued, unless TLS said its write must first read (then
 * a writable socket would only wake us in a loop), or when TLS said a
 * read must first write. */
short dlock__conn_events(const dlock__conn *c)
{
    short ev = POLLIN;
    if ((c->outpos < c->outlen && !c->write_wants_read) || c->read_wants_write)
        ev |= POLLOUT;
    return ev;
}

/* The peer's name for messages. */
const char *dlock__conn_peer(const dlock__conn *c)
{
    return c->peer;
}

/* Do the I/O poll() reported as possible; see conn.h. Reading is tried
 * on POLLIN/POLLHUP/POLLERR (and on POLLOUT when TLS wanted it for a
 * read), writing whenever output is queued: a write that cannot proceed
 * costs one EAGAIN. */
int dlock__conn_progress(dlock__conn *c, short revents, char *err,
                         size_t errlen)
{
    int r;
    if (c->dead)
        return dlock__fail(err, errlen, DLOCK_EIO,
                           "connection to %s is closed after an error",
                           c->peer);
    if (revents & POLLNVAL)
        return dlock__conn_die(
            c, dlock__fail(err, errlen, DLOCK_EIO,
                           "connection to %s: invalid socket", c->peer));
    /* Read before writing: when the peer has said its last words (a TLS
     * alert, "-ERR max number of clients reached") and closed, a write
     * first would only earn ECONNRESET and lose them. */
    if ((revents & (POLLIN | POLLHUP | POLLERR)) ||
        (c->read_wants_write && (revents & POLLOUT))) {
        r = c->io->read(c, err, errlen);
        if (r != DLOCK_OK)
            return r;
    }
    if (c->outpos < c->outlen) {
        r = c->io->write(c, err, errlen);
        if (r != DLOCK_OK)
            return r;
        if (c->outpos >= c->outlen)
            c->outpos = c->outlen = 0;
    }
    return DLOCK_OK;
}

/* Take one parsed reply if there is one. Replies that were complete
 * before the connection died are still handed out. */
int dlock__conn_pop_reply(dlock__conn *c, redisReply **out, char *err,
                          size_t errlen)
{
    for (;;) {
        void *rep = NULL;
        *out = NULL;
        if (redisReaderGetReply(c->reader, &rep) != REDIS_OK)
            return reader_failed(c, err, errlen);
        if (rep == NULL)
            return 0;
        if (c->stale > 0) { /* the answer to a request given up on */
            struct dlock__stale *e = c->stale_head;
            redisReply *r = rep;
            c->stale--;
            if (e != NULL) {
                c->stale_head = e->next;
                if (c->stale_head == NULL)
                    c->stale_tail = NULL;
            }
            if (e != NULL && e->eval != NULL && r->type == REDIS_REPLY_ERROR &&
                strncmp(r->str, "NOSCRIPT", 8) == 0 &&
                out_reserve(c, e->len) == DLOCK_OK &&
                stale_push(c, NULL, 0) == 0) {
                /* Its effect must not be lost: send the source now, and
                 * drop that answer too. The caller polls with
                 * dlock__conn_events(), which asks to write it. */
                memcpy(c->out + c->outlen, e->eval, e->len);
                c->outlen += e->len;
                c->stale++;
            }
            if (e != NULL)
                free(e->eval);
            free(e);
            freeReplyObject(rep);
            continue;
        }
        *out = rep;
        return 1;
    }
}

/* See conn.h. An entry that cannot be allocated only loses its EVAL
 * form: the count is what keeps the answers in line. */
int dlock__conn_abandon(dlock__conn *c)
{
    (void)stale_push(c, NULL, 0);
    return ++c->stale;
}

/* See conn.h. */
int dlock__conn_abandon_eval(dlock__conn *c, int argc, const char **argv,
                             const size_t *argvlen)
{
    size_t bound = resp_bound(argc, argv, argvlen);
    char *buf = malloc(bound);
    if (buf == NULL ||
        stale_push(c, buf,
                   (size_t)(resp_write(buf, argc, argv, argvlen) - buf)) != 0) {
        free(buf);
        dlock__conn_abandon(c);
        return DLOCK_ENOMEM;
    }
    c->stale++;
    return DLOCK_OK;
}

/* See conn.h. */
int dlock__conn_unsettled(const dlock__conn *c)
{
    const struct dlock__stale *e;
    if (c->dead)
        return 0;
    for (e = c->stale_head; e != NULL; e = e->next)
        if (e->eval != NULL)
            return 1;
    return !dlock__conn_flushed(c);
}

/* See conn.h. deadline_ms 0: one pass without waiting. */
void dlock__conn_settle(dlock__conn *c, int64_t deadline_ms)
{
    char err[DLOCK__ERRLEN];
    int once = deadline_ms == 0;
    while (dlock__conn_unsettled(c) &&
           (once || dlock__now_ms() < deadline_ms)) {
        struct pollfd p;
        redisReply *rep;
        p.fd = c->fd;
        p.events = dlock__conn_events(c);
        p.revents = 0;
        if (!once)
            dlock__nb_blocking();
        if (poll(&p, 1, once ? 0 : dlock__ms_left(deadline_ms)) < 0 &&
            errno != EINTR)
            return;
        if (p.revents != 0 &&
            dlock__conn_progress(c, p.revents, err, sizeof err) != DLOCK_OK)
            return;
        while (dlock__conn_pop_reply(c, &rep, err, sizeof err) == 1)
            freeReplyObject(rep); /* not ours: nobody asked on it */
        if (once && p.revents == 0)
            return;
    }
}

/* Free replies[0..n) and set them NULL. */
static void drop_replies(redisReply **replies, int n)
{
    int i;
    for (i = 0; i < n; i++) {
        if (replies[i] != NULL)
            freeReplyObject(replies[i]);
        replies[i] = NULL;
    }
}

/* See conn.h. */
int dlock__conn_collect(dlock__conn *c, int n, redisReply **replies, int *got,
                        short revents, char *err, size_t errlen)
{
    char perrmsg[DLOCK__ERRLEN];
    int r, perr = DLOCK_OK;
    if (c->dead)
        return dlock__fail(err, errlen, DLOCK_EIO,
                           "connection to %s is closed after an error",
                           c->peer);
    if (revents != 0)
        perr = dlock__conn_progress(c, revents, perrmsg, sizeof perrmsg);
    /* The peer may have answered and then closed: what is complete
     * counts before the failure does. */
    while (*got < n) {
        redisReply *rep;
        r = dlock__conn_pop_reply(c, &rep, perr != DLOCK_OK ? NULL : err,
                                  perr != DLOCK_OK ? 0 : errlen);
        if (r < 0 && perr == DLOCK_OK)
            return r;
        if (r <= 0)
            break;
        replies[(*got)++] = rep;
    }
    if (*got == n && dlock__conn_flushed(c))
        return 1;
    if (perr != DLOCK_OK)
        return dlock__fail(err, errlen, perr, "%s", perrmsg);
    return 0;
}

/* One poll() of c (and cancel_fd, when >= 0) until the deadline: the
 * connection's revents, or a failure (the connection then dead: timed
 * out, canceled, poll failed). *cancel_fd becomes -1 when it is not an
 * open descriptor (it could never cancel, and would wake every poll). */
static int wait_once(dlock__conn *c, int *cancel_fd, int64_t deadline_ms,
                     short *revents, char *err, size_t errlen)
{
    struct pollfd p[2];
    int np = 1, pr;
    *revents = 0;
    if (dlock__now_ms() >= deadline_ms)
        return dlock__conn_die(c, dlock__fail(err, errlen, DLOCK_ETIMEDOUT,
                                              "%s did not answer in time",
                                              c->peer));
    p[0] = (struct pollfd){.fd = c->fd, .events = dlock__conn_events(c)};
    if (*cancel_fd >= 0) {
        p[1] = (struct pollfd){.fd = *cancel_fd, .events = POLLIN};
        np = 2;
    }
    dlock__nb_blocking();
    pr = poll(p, (nfds_t)np, dlock__ms_left(deadline_ms));
    if (pr < 0)
        return errno == EINTR || errno == EAGAIN
                   ? DLOCK_OK
                   : dlock__conn_die(c,
                                     dlock__fail(err, errlen, DLOCK_EIO,
                                                 "poll: %s", strerror(errno)));
    if (np == 2 && (p[1].revents & POLLNVAL))
        *cancel_fd = -1;
    else if (np == 2 && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
        return dlock__conn_die(c, dlock__fail(err, errlen, DLOCK_CANCELED,
                                              "canceled while waiting for %s",
                                              c->peer));
    *revents = p[0].revents;
    return DLOCK_OK;
}

/* Write the queue and collect n replies before the deadline; see
 * conn.h: dlock__conn_collect's steps, each waited for by wait_once. A
 * timeout also kills the connection: its replies would arrive later and
 * be taken for the answers to the next commands. */
int dlock__conn_roundtrip(dlock__conn *c, int n, redisReply **replies,
                          int64_t deadline_ms, int cancel_fd, char *err,
                          size_t errlen)
{
    int got = 0, i, r;
    short rev = 0;
    for (i = 0; i < n; i++)
        replies[i] = NULL;
    for (;;) {
        r = dlock__conn_collect(c, n, replies, &got, rev, err, errlen);
        if (r == 1)
            return DLOCK_OK;
        if (r == 0)
            r = wait_once(c, &cancel_fd, deadline_ms, &rev, err, errlen);
        if (r != DLOCK_OK)
            break;
    }
    drop_replies(replies, n);
    return r;
}
