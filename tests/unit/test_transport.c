/*
 * test_transport.c - unit tests of the connection layer (src/transport.c)
 * without a Redis server: a tiny scripted peer runs in a thread of the
 * test on a loopback port or a unix socket, so every failure the layer
 * must explain (refused, closed, reset, garbage, silence, TLS where plain
 * was expected and the reverse, a peer gone mid-write) can be produced on
 * demand. The real servers are in tests/integration/tls.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "io/conn.h"
#include "io/net.h"
#include "io/tls.h"
#include "base/url.h"
#include "base/util.h"

/* What the scripted peer does with its one connection. */
typedef struct peer {
    int lfd;           /* listening socket */
    int port;          /* TCP port, or 0 for the unix socket */
    char path[108];    /* unix socket path */
    char dir[64];      /* its temp dir */
    const char *reply; /* bytes to send once enough has arrived */
    size_t replylen;
    size_t expect;     /* bytes to receive before replying (0: any) */
    int drip;          /* send the reply one byte at a time */
    int then_close;    /* close right after replying */
    int close_at_once; /* close as soon as accepted (and handshaken) */
    SSL_CTX *tls;      /* speak TLS (server side) when set */
    size_t got;        /* bytes received (read back by the test) */
    char seen[512];    /* the first bytes received */
    pthread_t thr;
} peer;

/* Receive on the peer's connection, through TLS when it has it. */
static ssize_t peer_recv(int fd, SSL *ssl, char *buf, size_t len)
{
    if (ssl != NULL) {
        int n = SSL_read(ssl, buf, (int)len);
        return n > 0 ? n : -1;
    }
    return recv(fd, buf, len, 0);
}

/* Send on the peer's connection. */
static void peer_send(int fd, SSL *ssl, const char *buf, size_t len)
{
    if (ssl != NULL)
        (void)SSL_write(ssl, buf, (int)len);
    else
        (void)send(fd, buf, len, MSG_NOSIGNAL);
}

/* The peer's thread: accept once, play the script, drain until the
 * client goes away. */
static void *peer_main(void *arg)
{
    peer *p = arg;
    char buf[65536];
    SSL *ssl = NULL;
    sigset_t pipe_set;
    int fd;

    /* The peer's own TLS writes go through OpenSSL's socket BIO (write(),
     * not send(MSG_NOSIGNAL)): a client that hung up must not kill the
     * test from this thread. The client side, under test, runs in the
     * main thread with SIGPIPE at its default. */
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);
    fd = accept(p->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    if (p->tls != NULL) {
        ssl = SSL_new(p->tls);
        SSL_set_fd(ssl, fd);
        if (SSL_accept(ssl) != 1)
            goto out;
    }
    if (p->close_at_once)
        goto out;
    for (;;) {
        ssize_t n = peer_recv(fd, ssl, buf, sizeof buf);
        if (n <= 0)
            break;
        if (p->got < sizeof p->seen) {
            size_t k = sizeof p->seen - 1 - p->got;
            memcpy(p->seen + p->got, buf, (size_t)n < k ? (size_t)n : k);
        }
        p->got += (size_t)n;
        if (p->reply != NULL && p->got >= p->expect) {
            size_t i;
            if (p->drip) {
                for (i = 0; i < p->replylen; i++) {
                    peer_send(fd, ssl, p->reply + i, 1);
                    usleep(2000);
                }
            } else {
                peer_send(fd, ssl, p->reply, p->replylen);
            }
            p->reply = NULL;
            if (p->then_close)
                break;
        }
    }
out:
    SSL_free(ssl);
    close(fd);
    return NULL;
}

/* A server SSL_CTX with a fresh self-signed P-256 certificate for
 * CN=127.0.0.1, made in memory. */
static SSL_CTX *server_tls(void)
{
    EVP_PKEY *pkey = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    X509_NAME *name;
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    assert_non_null(pkey);
    assert_non_null(x);
    assert_non_null(ctx);
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -60);
    X509_gmtime_adj(X509_getm_notAfter(x), 3600);
    X509_set_pubkey(x, pkey);
    name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               (const unsigned char *)"127.0.0.1", -1, -1, 0);
    X509_set_issuer_name(x, name);
    assert_true(X509_sign(x, pkey, EVP_sha256()) > 0);
    assert_int_equal(SSL_CTX_use_certificate(ctx, x), 1);
    assert_int_equal(SSL_CTX_use_PrivateKey(ctx, pkey), 1);
    X509_free(x);
    EVP_PKEY_free(pkey);
    return ctx;
}

/* Start a peer on TCP (unix == 0) or a unix socket with the given
 * script. */
static void peer_start(peer *p, int unix_sock)
{
    if (unix_sock) {
        struct sockaddr_un sa;
        strcpy(p->dir, "/tmp/dlock-ut-XXXXXX");
        assert_non_null(mkdtemp(p->dir));
        snprintf(p->path, sizeof p->path, "%s/s.sock", p->dir);
        p->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        memset(&sa, 0, sizeof sa);
        sa.sun_family = AF_UNIX;
        strcpy(sa.sun_path, p->path);
        assert_int_equal(bind(p->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    } else {
        struct sockaddr_in sa;
        socklen_t sl = sizeof sa;
        p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        memset(&sa, 0, sizeof sa);
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_int_equal(bind(p->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
        getsockname(p->lfd, (struct sockaddr *)&sa, &sl);
        p->port = ntohs(sa.sin_port);
    }
    assert_int_equal(listen(p->lfd, 4), 0);
    assert_int_equal(pthread_create(&p->thr, NULL, peer_main, p), 0);
}

/* Wait for the peer's thread (the client must have closed) and clean. */
static void peer_stop(peer *p)
{
    pthread_join(p->thr, NULL);
    close(p->lfd);
    if (p->path[0] != '\0') {
        unlink(p->path);
        rmdir(p->dir);
    }
}

/* Fill ep for the peer: TCP on 127.0.0.1 or its unix socket, with the
 * given kind, password and db. */
static void peer_ep(const peer *p, dlock__endpoint *ep, dlock__ep_kind kind,
                    const char *user, const char *pw, int db)
{
    char url[400];
    char err[DLOCK__ERRLEN];
    char auth[128] = "";
    if (pw != NULL)
        snprintf(auth, sizeof auth, "%s:%s@", user != NULL ? user : "", pw);
    if (kind == DLOCK__EP_UNIX)
        snprintf(url, sizeof url, "unix://%s%s?db=%d", auth, p->path, db);
    else
        snprintf(url, sizeof url, "%s://%s127.0.0.1:%d/%d",
                 kind == DLOCK__EP_TLS ? "rediss" : "redis", auth, p->port, db);
    assert_int_equal(dlock__url_parse(ep, url, err, sizeof err), DLOCK_OK);
}

/* Send PING on c and wait for one reply before the deadline. */
static int ping(dlock__conn *c, int64_t ms, redisReply **rep, char *err,
                size_t errlen)
{
    const char *argv[] = {"PING"};
    assert_int_equal(dlock__conn_append_argv(c, 1, argv, NULL), DLOCK_OK);
    return dlock__conn_roundtrip(c, 1, rep, dlock__now_ms() + ms, -1, err,
                                 errlen);
}

/* A plain exchange over TCP: flags on the socket, pipelined replies, a
 * reply that arrives one byte at a time. */
static void test_tcp_roundtrip(void **state)
{
    static const char answer[] = "+OK\r\n$6\r\nv\r\n\0xy\r\n:42\r\n";
    static const char wire[] =
        "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$6\r\nv\r\n\0xy\r\n"
        "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
        "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
    peer p = {0};
    dlock__endpoint ep;
    dlock__conn *c = NULL;
    char err[DLOCK__ERRLEN] = "";
    redisReply *rep[3];
    const char *a1[] = {"SET", "k", "v\r\n\0xy"};
    size_t l1[] = {3, 1, 6};
    const char *a2[] = {"GET", "k"};
    int fd, fl, on = 0;
    socklen_t sl = sizeof on;
    (void)state;

    p.reply = answer;
    p.replylen = sizeof answer - 1;
    p.drip = 1;
    p.expect = sizeof wire - 1;
    peer_start(&p, 0);
    peer_ep(&p, &ep, DLOCK__EP_TCP, NULL, NULL, 0);
    assert_int_equal(dlock__conn_open(&c, &ep, NULL, dlock__now_ms() + 2000,
                                      err, sizeof err),
                     DLOCK_OK);
    assert_string_equal(dlock__conn_peer(c), ep.display);

    fd = dlock__conn_fd(c);
    fl = fcntl(fd, F_GETFD);
    assert_true(fl & FD_CLOEXEC);
    assert_true(fcntl(fd, F_GETFL) & O_NONBLOCK);
    assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, &sl), 0);
    assert_true(on);
    assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, &sl), 0);
    assert_true(on);

    assert_true(dlock__conn_flushed(c));
    assert_int_equal(dlock__conn_events(c) & POLLOUT, 0);
    assert_int_equal(dlock__conn_append_argv(c, 3, a1, l1), DLOCK_OK);
    assert_int_equal(dlock__conn_append_argv(c, 2, a2, NULL), DLOCK_OK);
    assert_int_equal(dlock__conn_append_argv(c, 2, a2, NULL), DLOCK_OK);
    assert_false(dlock__conn_flushed(c));
    assert_true(dlock__conn_events(c) & POLLOUT);
    assert_int_equal(dlock__conn_roundtrip(c, 3, rep, dlock__now_ms() + 5000,
                                           -1, err, sizeof err),
                     DLOCK_OK);
    assert_int_equal(rep[0]->type, REDIS_REPLY_STATUS);
    assert_string_equal(rep[0]->str, "OK");
    assert_int_equal(rep[1]->type, REDIS_REPLY_STRING);
    assert_int_equal(rep[1]->len, 6);
    assert_memory_equal(rep[1]->str, "v\r\n\0xy", 6);
    assert_int_equal(rep[2]->type, REDIS_REPLY_INTEGER);
    assert_int_equal(rep[2]->integer, 42);
    freeReplyObject(rep[0]);
    freeReplyObject(rep[1]);
    freeReplyObject(rep[2]);
    /* What went out is the exact RESP of the three commands. */
    dlock__conn_close(c);
    peer_stop(&p);
    assert_int_equal(p.got, sizeof wire - 1);
    assert_memory_equal(p.seen, wire, sizeof wire - 1);
    dlock__endpoint_clear(&ep);
}

/* The poll-driven interface, as node.c uses it: events, progress,
 * pop_reply; over a unix socket. */
static void test_unix_poll_driven(void **state)
{
    peer p = {0};
    dlock__endpoint ep;
    dlock__conn *c = NULL;
    char err[DLOCK__ERRLEN] = "";
    const char *argv[] = {"PING"};
    redisReply *r = NULL;
    int64_t deadline;
    int got = 0;
    (void)state;

    p.reply = "+PONG\r\n+PONG\r\n";
    p.replylen = 14;
    p.expect = 28;
    peer_start(&p, 1);
    peer_ep(&p, &ep, DLOCK__EP_UNIX, NULL, NULL, 0);
    assert_int_equal(dlock__conn_open(&c, &ep, NULL, dlock__now_ms() + 2000,
                                      err, sizeof err),
                     DLOCK_OK);
    assert_true(fcntl(dlock__conn_fd(c), F_GETFD) & FD_CLOEXEC);
    assert_int_equal(dlock__conn_append_argv(c, 1, argv, NULL), DLOCK_OK);
    assert_int_equal(dlock__conn_append_argv(c, 1, argv, NULL), DLOCK_OK);
    assert_int_equal(dlock__conn_pop_reply(c, &r, err, sizeof err), 0);
    deadline = dlock__now_ms() + 5000;
    while (got < 2 && dlock__now_ms() < deadline) {
        struct pollfd pf = {dlock__conn_fd(c), dlock__conn_events(c), 0};
        assert_true(poll(&pf, 1, 1000) >= 0);
        if (pf.revents == 0)
            continue;
        assert_int_equal(dlock__conn_progress(c, pf.revents, err, sizeof err),
                         DLOCK_OK);
        while (dlock__conn_pop_reply(c, &r, err, sizeof err) == 1) {
            assert_string_equal(r->str, "PONG");
            freeReplyObject(r);
            got++;
        }
    }
    assert_int_equal(got, 2);
    assert_true(dlock__conn_flushed(c));
    dlock__conn_close(c);
    peer_stop(&p);
    dlock__endpoint_clear(&ep);
}

/* AUTH user password and SELECT are pipelined on open; a refused AUTH
 * is DLOCK_EAUTH with the server's words and no password; a database
 * the server does not have is DLOCK_EREFUSED (a configuration no retry
 * cures: the tool's exit 77, not 69). */
static void test_auth_select(void **state)
{
    static const char want[] =
        "*3\r\n$4\r\nAUTH\r\n$5\r\nalice\r\n$8\r\nPa55w0rd\r\n"
        "*2\r\n$6\r\nSELECT\r\n$1\r\n7\r\n";
    static const char want2[] = "*2\r\n$4\r\nAUTH\r\n$8\r\nPa55w0rd\r\n";
    peer p = {0};
    dlock__endpoint ep;
    dlock__conn *c = NULL;
    char err[DLOCK__ERRLEN] = "";
    int r;
    (void)state;

    /* Accepted: +OK +OK, and the commands on the wire are as expected. */
    p.reply = "+OK\r\n+OK\r\n";
    p.replylen = 10;
    p.expect = sizeof want - 1;
    peer_start(&p, 0);
    peer_ep(&p, &ep, DLOCK__EP_TCP, "alice", "Pa55w0rd", 7);
    assert_int_equal(dlock__conn_open(&c, &ep, NULL, dlock__now_ms() + 2000,
                                      err, sizeof err),
                     DLOCK_OK);
    dlock__conn_close(c);
    peer_stop(&p);
    assert_int_equal(p.got, sizeof want - 1);
    assert_memory_equal(p.seen, want, sizeof want - 1);
    dlock__endpoint_clear(&ep);

    /* Refused password. */
    memset(&p, 0, sizeof p);
    p.reply = "-WRONGPASS invalid username-password pair\r\n"
              "-NOAUTH Authentication required.\r\n";
    p.replylen = strlen(p.reply);
    p.expect = 1;
    peer_start(&p, 0);
    peer_ep(&p, &ep, DLOCK__EP_TCP, "alice", "Pa55w0rd", 7);
    r = dlock__conn_open(&c, &ep, NULL, dlock__now_ms() + 2000, err,
                         sizeof err);
    assert_int_equal(r, DLOCK_EAUTH);
    assert_null(c);
    assert_non_null(strstr(err, "WRONGPASS"));
    assert_non_null(strstr(err, ep.display));
    assert_null(strstr(err, "Pa55w0rd"));
    peer_stop(&p);
    dlock__endpoint_clear(&ep);

    /* A server that echoes the password in its error: masked. */
    memset(&p, 0, sizeof p);
    p.reply = "-ERR unknown command 'AUTH', with args beginning with: "
              "'alice' 'Pa55w0rd' 'Pa55w0rd'\r\n";
    p.replylen = strlen(p.reply);
    p.expect = 1;
    peer_start(&p, 0);
    peer_ep(&p, &ep, DLOCK__EP_TCP, "alice", "Pa55w0rd", 0);
    r = dlock__conn_open(&c, &ep, NULL, dlock__now_ms() + 2000, err,
                         sizeof err);
    assert_int_equal(r, DLOCK_EAUTH);
    assert_null(strstr(err, "Pa55"));
    assert_non_null(strstr(err, "'alice' '***' '***'"));
    peer_stop(&p);
    dlock__endpoint_clear(&ep);

    /* Password only, then a bad database. */
    memset(&p, 0, sizeof p);
    p.reply = "+OK\r\n-ERR DB index is out of range\r\n";
    p.replylen = strlen(p.reply);
    p.expect = 1;
    peer_start(&p, 0);
    peer_ep(&p, &ep, DLOCK__EP_TCP, NULL, "Pa55w0rd", 99);
    r = dlock__conn_open(&c, &ep, NULL, dlock__now_ms() + 2000, err,
                         sizeof err);
    assert_int_equal(r, DLOCK_EREFUSED);
    assert_non_null(strstr(err, "SELECT 99"));
    assert_non_null(strstr(err, "out of range"));
    assert_null(strstr(err, "Pa55w0rd"));
    peer_stop(&p);
    assert_memory_equal(p.seen, want2, sizeof want2 - 1);
    dlock__endpoint_clear(&ep);

    /* Something that is not an answer to AUTH. */
    memset(&p, 0, sizeof p);
    p.reply = ":1\r\n";
    p.replylen = 4;
    p.expect = 1;
    peer_start(&p, 0);
    peer_ep(&p, &ep, DLOCK__EP_TCP, NULL, "Pa55w0rd", 0);
    r = dlock__conn_open(&c, &ep, NULL, dlock__now_ms() + 2000, err,
                         sizeof err);
    assert_int_equal(r, DLOCK_EPROTO);
    assert_non_null(strstr(err, "unexpected reply to AUTH"));
    peer_stop(&p);
    dlock__endpoint_clear(&ep);
}

/* Refused, closed, reset, garbage, a TLS answer to plain text, silence
 * and cancellation: each with its code and a message naming the peer. */
static void test_failures(void **state)
{
    peer p;
    dlock__endpoint ep;
    dlock__conn *c = NULL;
    char err[DLOCK__ERRLEN] = "";
    redisReply *rep = NULL;
    int64_t t0;
    int pfd[2];
    (void)state;

    /* Refused: a port that was just closed. */
    memset(&p, 0, sizeof p);
    p.close_at_once = 1;
    peer_start(&p, 0);
    peer_ep(&p, &ep, DLOCK__EP_TCP, NULL, NULL, 0);
    {
        /* Make the accept() return so the thread ends, then close. */
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa;
        memset(&sa, 0, sizeof sa);
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sa.sin_port = htons((uint16_t)p.port);
        assert_int_equal(connect(s, (struct sockaddr *)&sa, sizeof sa), 0);
        close(s);
    }
    peer_stop(&p);
    assert_int_equal(dlock__conn_open(&c, &ep, NULL, dlock__now_ms() + 2000,
                                      err, sizeof err),
                     DLOCK_EIO);
    assert_null(c);
    assert_non_null(strstr(err, "Connection refused"));
    assert_non_null(strstr(err, ep.display));
    dlock__endpoint_clear(&ep);

    /* Closed by the peer after the command. */
    memset(&p, 0, sizeof p);
    p.reply = "";
    p.replylen = 0;
    p.then_close = 1;
    peer_start(&p, 0);
    peer_ep(&p, &ep, DLOCK__EP_TCP, NULL, NULL, 0);
    assert_int_equal(dlock__conn_open(&c, &ep, NULL, dlock__now_ms() + 2000,
                                      err, sizeof err),
                     DLOCK_OK);
    assert_int_equal(ping(c, 2000, &rep, err, sizeof err), DLOCK_EIO);
    assert_null(rep);
    assert_non_null(strstr(err, "by 127.0.0.1:"));
    /* Dead from now on. */
    assert_int_equal(ping(c, 2000, &rep, err, sizeof err), DLOCK_EIO);
    dlock__conn_close(c);
    peer_stop(&p);
    dlock__endpoint_clear(&ep);

    /* A reply, then close: the reply still counts. */
    memset(&p, 0, sizeof p);
    p.reply = "+PONG\r\n";
    p.replylen = 7;
    p.then_close = 1;
    peer_start(&p, 0);
    peer_ep(&p, &ep, DLOCK__EP_TCP, NULL, NULL, 0);
    assert_int_equal(dlock__conn_open(&c, &ep, NULL, dlock__now_ms() + 2000,
                                      err, sizeof err),
                     DLOCK_OK);
    assert_int_equal(ping(c, 2000, &rep, err, sizeof err), DLOCK_OK);
    assert_string_equal(rep->str, "PONG");
    freeReplyObject(rep);
    dlock__conn_close(c);
    peer_stop(&p);
    dlock__endpoint_clear(&ep);

    /* Garbage: an HTTP answer. */
    memset(&p, 0, sizeof p);
    p.reply = "HTTP/1.1 400 Bad Request\r\n\r\n";
    p.replylen = strlen(p.reply);
    peer_start(&p, 0);
    peer_ep(&p, &ep, DLOCK__EP_TCP, NULL, NULL, 0);
    assert_int_equal(dlock__conn_open(&c, &ep, NULL, dlock__now_ms() + 2000,
                                      err, sizeof err),
                     DLOCK_OK);
    assert_int_equal(ping(c, 2000, &rep, err, sizeof err), DLOCK_EPROTO);
    assert_non_null(strstr(err, "protocol error from 127.0.0.1:"));
    dlock__conn_close(c);
    peer_stop(&p);
    dlock__endpoint_clear(&ep);

    /* A TLS alert record where RESP was expected. */
    memset(&p, 0, sizeof p);
    p.reply = "\x15\x03\x03\x00\x02\x02\x46";
    p.replylen = 7;
    peer_start(&p, 0);
    peer_ep(&p, &ep, DLOCK__EP_TCP, NULL, NULL, 0);
    assert_int_equal(dlock__conn_open(&c, &ep, NULL, dlock__now_ms() + 2000,
                                      err, sizeof err),
                     DLOCK_OK);
    assert_int_equal(ping(c, 2000, &rep, err, sizeof err), DLOCK_EPROTO);
    assert_non_null(strstr(err, "TLS port"));
    dlock__conn_close(c);
    peer_stop(&p);
    dlock__endpoint_clear(&ep);

    /* Silence: the deadline ends the wait, and kills the connection. */
    memset(&p, 0, sizeof p);
    peer_start(&p, 0);
    peer_ep(&p, &ep, DLOCK__EP_TCP, NULL, NULL, 0);
    assert_int_equal(dlock__conn_open(&c, &ep, NULL, dlock__now_ms() + 2000,
                                      err, sizeof err),
                     DLOCK_OK);
    t0 = dlock__now_ms();
    assert_int_equal(ping(c, 200, &rep, err, sizeof err), DLOCK_ETIMEDOUT);
    assert_true(dlock__now_ms() - t0 >= 190);
    assert_true(dlock__now_ms() - t0 < 200 + 2000);
    assert_non_null(strstr(err, "did not answer in time"));
    assert_int_equal(dlock__conn_progress(c, POLLIN, err, sizeof err),
                     DLOCK_EIO);
    dlock__conn_close(c);
    peer_stop(&p);
    dlock__endpoint_clear(&ep);

    /* Cancellation through the cancel fd. */
    memset(&p, 0, sizeof p);
    peer_start(&p, 0);
    peer_ep(&p, &ep, DLOCK__EP_TCP, NULL, NULL, 0);
    assert_int_equal(dlock__conn_open(&c, &ep, NULL, dlock__now_ms() + 2000,
                                      err, sizeof err),
                     DLOCK_OK);
    assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
    assert_int_equal(write(pfd[1], "x", 1), 1);
    {
        const char *argv[] = {"PING"};
        dlock__conn_append_argv(c, 1, argv, NULL);
    }
    t0 = dlock__now_ms();
    assert_int_equal(
        dlock__conn_roundtrip(c, 1, &rep, t0 + 5000, pfd[0], err, sizeof err),
        DLOCK_CANCELED);
    assert_null(rep);
    assert_true(dlock__now_ms() - t0 < 2000);
    close(pfd[0]);
    close(pfd[1]);
    dlock__conn_close(c);
    peer_stop(&p);
    dlock__endpoint_clear(&ep);

    /* A cancel fd that is not open is ignored, not spun on. */
    memset(&p, 0, sizeof p);
    p.reply = "+PONG\r\n";
    p.replylen = 7;
    peer_start(&p, 0);
    peer_ep(&p, &ep, DLOCK__EP_TCP, NULL, NULL, 0);
    assert_int_equal(dlock__conn_open(&c, &ep, NULL, dlock__now_ms() + 2000,
                                      err, sizeof err),
                     DLOCK_OK);
    {
        const char *argv[] = {"PING"};
        dlock__conn_append_argv(c, 1, argv, NULL);
    }
    assert_int_equal(dlock__conn_roundtrip(c, 1, &rep, dlock__now_ms() + 2000,
                                           1000000, err, sizeof err),
                     DLOCK_OK);
    freeReplyObject(rep);
    dlock__conn_close(c);
    peer_stop(&p);
    dlock__endpoint_clear(&ep);

    /* A unix socket nobody listens on. */
    assert_int_equal(dlock__url_parse(&ep, "unix:///nonexistent/dlock.sock",
                                      err, sizeof err),
                     DLOCK_OK);
    assert_int_equal(dlock__conn_open(&c, &ep, NULL, dlock__now_ms() + 2000,
                                      err, sizeof err),
                     DLOCK_EIO);
    assert_non_null(strstr(err, "/nonexistent/dlock.sock"));
    dlock__endpoint_clear(&ep);
}

/*
 * Write to a peer that has gone, until the write fails: progress() is
 * told only POLLOUT so it keeps writing (roundtrip would read first and
 * notice the close). With SIGPIPE at its default disposition a single
 * write without MSG_NOSIGNAL would kill the test. tls: the same through
 * our TLS BIO.
 */
static void write_to_dead_peer(int tls)
{
    peer p = {0};
    dlock__endpoint ep;
    dlock__conn *c = NULL;
    dlock__tls_ctx *t = NULL;
    dlock__tls_opts o;
    char err[DLOCK__ERRLEN] = "";
    size_t big = 1u << 20;
    char *v = calloc(1, big);
    const char *argv[] = {"SET", "k", v};
    size_t lens[] = {3, 1, big};
    struct sigaction sa;
    int i, r = DLOCK_OK;

    assert_non_null(v);
    assert_int_equal(sigaction(SIGPIPE, NULL, &sa), 0);
    assert_true(sa.sa_handler == SIG_DFL);
    memset(&o, 0, sizeof o);
    o.insecure = 1;
    if (tls) {
        p.tls = server_tls();
        assert_int_equal(dlock__tls_ctx_new(&t, &o, err, sizeof err), DLOCK_OK);
    }
    p.close_at_once = 1;
    peer_start(&p, 0);
    peer_ep(&p, &ep, tls ? DLOCK__EP_TLS : DLOCK__EP_TCP, NULL, NULL, 0);
    assert_int_equal(
        dlock__conn_open(&c, &ep, t, dlock__now_ms() + 2000, err, sizeof err),
        DLOCK_OK);
    peer_stop(&p); /* the peer has closed */
    for (i = 0; i < 200 && r == DLOCK_OK; i++) {
        if (dlock__conn_flushed(c))
            assert_int_equal(dlock__conn_append_argv(c, 3, argv, lens),
                             DLOCK_OK);
        r = dlock__conn_progress(c, POLLOUT, err, sizeof err);
        if (r == DLOCK_OK)
            usleep(5000);
    }
    assert_int_equal(r, DLOCK_EIO);
    assert_non_null(strstr(err, "127.0.0.1:"));
    dlock__conn_close(c);
    dlock__tls_ctx_free(t);
    SSL_CTX_free(p.tls);
    dlock__endpoint_clear(&ep);
    free(v);
}

/* A peer gone mid-write: EIO, and the process lives on. */
static void test_no_sigpipe(void **state)
{
    (void)state;
    write_to_dead_peer(0);
    write_to_dead_peer(1);
}

/* A TLS exchange with a peer of our own (verification off: its
 * certificate is self-signed), then verification on against it. */
static void test_tls_roundtrip(void **state)
{
    peer p = {0};
    dlock__endpoint ep;
    dlock__conn *c = NULL;
    dlock__tls_ctx *t = NULL;
    dlock__tls_opts o;
    char err[DLOCK__ERRLEN] = "";
    redisReply *rep = NULL;
    (void)state;

    memset(&o, 0, sizeof o);
    o.insecure = 1;
    assert_int_equal(dlock__tls_ctx_new(&t, &o, err, sizeof err), DLOCK_OK);
    p.tls = server_tls();
    p.reply = "+OK\r\n+PONG\r\n";
    p.replylen = 12;
    p.expect = 1;
    peer_start(&p, 0);
    peer_ep(&p, &ep, DLOCK__EP_TLS, NULL, "pw", 0);
    assert_int_equal(
        dlock__conn_open(&c, &ep, t, dlock__now_ms() + 2000, err, sizeof err),
        DLOCK_OK);
    assert_true(fcntl(dlock__conn_fd(c), F_GETFD) & FD_CLOEXEC);
    assert_int_equal(ping(c, 2000, &rep, err, sizeof err), DLOCK_OK);
    assert_string_equal(rep->str, "PONG");
    freeReplyObject(rep);
    dlock__conn_close(c);
    peer_stop(&p);
    dlock__tls_ctx_free(t);

    /* Verification on, system store: the self-signed peer is refused. */
    memset(&o, 0, sizeof o);
    assert_int_equal(dlock__tls_ctx_new(&t, &o, err, sizeof err), DLOCK_OK);
    p.reply = NULL;
    p.got = 0;
    peer_start(&p, 0);
    dlock__endpoint_clear(&ep);
    peer_ep(&p, &ep, DLOCK__EP_TLS, NULL, NULL, 0);
    assert_int_equal(
        dlock__conn_open(&c, &ep, t, dlock__now_ms() + 2000, err, sizeof err),
        DLOCK_ETLS);
    assert_null(c);
    assert_non_null(strstr(err, "certificate verify failed: "));
    assert_non_null(strstr(err, "self-signed"));
    peer_stop(&p);
    dlock__tls_ctx_free(t);
    SSL_CTX_free(p.tls);
    dlock__endpoint_clear(&ep);
}

/* TLS contexts that cannot be built, and handshakes with peers that do
 * not speak TLS. */
static void test_tls_failures(void **state)
{
    dlock__tls_ctx *t = NULL;
    dlock__tls_opts o;
    peer p;
    dlock__endpoint ep;
    dlock__conn *c = NULL;
    char err[DLOCK__ERRLEN] = "";
    int64_t t0;
    (void)state;

    memset(&o, 0, sizeof o);
    o.ca_file = "/nonexistent/ca.pem";
    assert_int_equal(dlock__tls_ctx_new(&t, &o, err, sizeof err), DLOCK_ETLS);
    assert_null(t);
    assert_non_null(strstr(err, "/nonexistent/ca.pem"));

    memset(&o, 0, sizeof o);
    o.key_file = "/nonexistent/key.pem";
    assert_int_equal(dlock__tls_ctx_new(&t, &o, err, sizeof err), DLOCK_ETLS);
    assert_non_null(strstr(err, "without a client certificate"));

    memset(&o, 0, sizeof o);
    o.cert_file = "/nonexistent/cert.pem";
    assert_int_equal(dlock__tls_ctx_new(&t, &o, err, sizeof err), DLOCK_ETLS);
    assert_non_null(strstr(err, "client certificate"));

    /* The system store, verification on. */
    memset(&o, 0, sizeof o);
    assert_int_equal(dlock__tls_ctx_new(&t, &o, err, sizeof err), DLOCK_OK);

    /* rediss:// without a context is refused. */
    memset(&p, 0, sizeof p);
    p.port = 1;
    peer_ep(&p, &ep, DLOCK__EP_TLS, NULL, NULL, 0);
    assert_int_equal(dlock__conn_open(&c, &ep, NULL, dlock__now_ms() + 2000,
                                      err, sizeof err),
                     DLOCK_EINVAL);
    dlock__endpoint_clear(&ep);

    /* A plain Redis answering the ClientHello with an error. */
    memset(&p, 0, sizeof p);
    p.reply = "-ERR unknown command\r\n";
    p.replylen = strlen(p.reply);
    p.then_close = 1;
    peer_start(&p, 0);
    peer_ep(&p, &ep, DLOCK__EP_TLS, NULL, NULL, 0);
    assert_int_equal(
        dlock__conn_open(&c, &ep, t, dlock__now_ms() + 2000, err, sizeof err),
        DLOCK_ETLS);
    assert_null(c);
    assert_non_null(strstr(err, "is it a TLS port?"));
    assert_non_null(strstr(err, "-ERR unknown command"));
    peer_stop(&p);
    /* The ClientHello went out, with no SNI for an IP literal. */
    assert_true(p.got > 5);
    assert_int_equal((unsigned char)p.seen[0], 0x16);
    dlock__endpoint_clear(&ep);

    /* A peer that never answers the handshake: the deadline ends it. */
    memset(&p, 0, sizeof p);
    peer_start(&p, 0);
    peer_ep(&p, &ep, DLOCK__EP_TLS, NULL, NULL, 0);
    t0 = dlock__now_ms();
    assert_int_equal(dlock__conn_open(&c, &ep, t, t0 + 300, err, sizeof err),
                     DLOCK_ETIMEDOUT);
    assert_true(dlock__now_ms() - t0 < 300 + 2000);
    assert_non_null(strstr(err, "TLS handshake"));
    peer_stop(&p);
    dlock__endpoint_clear(&ep);

    /* A peer that closes during the handshake. */
    memset(&p, 0, sizeof p);
    p.reply = "";
    p.then_close = 1;
    peer_start(&p, 0);
    peer_ep(&p, &ep, DLOCK__EP_TLS, NULL, NULL, 0);
    assert_int_equal(
        dlock__conn_open(&c, &ep, t, dlock__now_ms() + 2000, err, sizeof err),
        DLOCK_EIO);
    assert_non_null(strstr(err, "during the TLS handshake"));
    peer_stop(&p);
    dlock__endpoint_clear(&ep);

    dlock__tls_ctx_free(t);
    dlock__tls_ctx_free(NULL);
    dlock__conn_close(NULL);
}

/* Whatever the length of the server's text, no prefix of the password
 * survives where the message is cut (errors longer than 160 bytes), nor
 * where the server cut its echo of it short. */
static void test_auth_echo_cut(void **state)
{
    char reply[400];
    peer p;
    dlock__endpoint ep;
    dlock__conn *c = NULL;
    char err[DLOCK__ERRLEN] = "";
    int pad;
    (void)state;

    for (pad = 140; pad < 170; pad++) {
        memset(&p, 0, sizeof p);
        /* pad x's, then 1 to 8 leading bytes of the password. */
        memset(reply, 0, sizeof reply);
        memcpy(reply, "-ERR ", 5);
        memset(reply + 5, 'x', (size_t)pad);
        reply[5 + pad] = ' ';
        memcpy(reply + 6 + pad, "Pa55w0rd", (size_t)(pad % 8 + 1));
        strcat(reply, "\r\n");
        p.reply = reply;
        p.replylen = strlen(reply);
        p.expect = 1;
        peer_start(&p, 0);
        peer_ep(&p, &ep, DLOCK__EP_TCP, NULL, "Pa55w0rd", 0);
        assert_int_equal(dlock__conn_open(&c, &ep, NULL, dlock__now_ms() + 2000,
                                          err, sizeof err),
                         DLOCK_EAUTH);
        assert_null(strstr(err, " P"));
        peer_stop(&p);
        dlock__endpoint_clear(&ep);
    }
}

/* ---- name lookup bounded by the connect deadline ----------------------- */

/* A resolver that answers only when the test lets it (or after 5 s), for
 * names ending in ".slow"; "*.fast" resolves to 127.0.0.1 at once. */
static pthread_mutex_t slow_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t slow_cv = PTHREAD_COND_INITIALIZER;
static int slow_release, slow_done;

static int fake_resolver(const char *host, const char *port,
                         const struct addrinfo *hints, struct addrinfo **res)
{
    size_t n = strlen(host);
    if (n > 5 && strcmp(host + n - 5, ".slow") == 0) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 5;
        pthread_mutex_lock(&slow_mu);
        while (!slow_release &&
               pthread_cond_timedwait(&slow_cv, &slow_mu, &until) == 0)
            ;
        slow_done++;
        pthread_cond_broadcast(&slow_cv);
        pthread_mutex_unlock(&slow_mu);
        return EAI_NONAME;
    }
    if (n > 5 && strcmp(host + n - 5, ".fast") == 0)
        return getaddrinfo("127.0.0.1", port, hints, res);
    return getaddrinfo(host, port, hints, res);
}

static void test_resolve_bounded(void **state)
{
    peer p = {0};
    dlock__endpoint ep;
    dlock__conn *c = NULL;
    char err[DLOCK__ERRLEN] = "", url[128];
    redisReply *rep = NULL;
    (void)state;

    dlock__resolver = fake_resolver;
    /* A lookup that does not answer: the connect deadline still holds
     * (without the bound this returns only when the resolver gives up,
     * 5 s later, and with its EAI_NONAME). */
    assert_int_equal(
        dlock__url_parse(&ep, "redis://cache.slow:6379", err, sizeof err),
        DLOCK_OK);
    assert_int_equal(
        dlock__conn_open(&c, &ep, NULL, dlock__now_ms() + 200, err, sizeof err),
        DLOCK_ETIMEDOUT);
    assert_null(c);
    assert_non_null(strstr(err, "resolve cache.slow"));
    dlock__endpoint_clear(&ep);
    pthread_mutex_lock(&slow_mu);
    slow_release = 1;
    pthread_cond_broadcast(&slow_cv);
    while (slow_done < 1)
        pthread_cond_wait(&slow_cv, &slow_mu);
    pthread_mutex_unlock(&slow_mu);

    /* A name resolved on the helper thread in time: connects. */
    p.reply = "+PONG\r\n";
    p.replylen = 7;
    peer_start(&p, 0);
    snprintf(url, sizeof url, "redis://cache.fast:%d", p.port);
    assert_int_equal(dlock__url_parse(&ep, url, err, sizeof err), DLOCK_OK);
    assert_int_equal(dlock__conn_open(&c, &ep, NULL, dlock__now_ms() + 2000,
                                      err, sizeof err),
                     DLOCK_OK);
    assert_int_equal(ping(c, 2000, &rep, err, sizeof err), DLOCK_OK);
    assert_int_equal(rep->type, REDIS_REPLY_STATUS);
    freeReplyObject(rep);
    dlock__conn_close(c);
    dlock__endpoint_clear(&ep);
    peer_stop(&p);
    dlock__resolver = getaddrinfo;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tcp_roundtrip),
        cmocka_unit_test(test_unix_poll_driven),
        cmocka_unit_test(test_auth_select),
        cmocka_unit_test(test_auth_echo_cut),
        cmocka_unit_test(test_failures),
        cmocka_unit_test(test_no_sigpipe),
        cmocka_unit_test(test_tls_roundtrip),
        cmocka_unit_test(test_tls_failures),
        cmocka_unit_test(test_resolve_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
