/*
 * test_replycap.c - a peer that announces a huge reply is refused before
 * anything is allocated for it (docs/reliability.md, F4): hiredis 0.14's
 * reader allocates an array's element table as soon as it reads "*N", so
 * "*88888882\r\n" alone would cost ~700 MB. conn.c wraps the reader's
 * object functions with caps; this test plays such a peer (a thread of
 * the test on a loopback port) and checks that the call fails at once
 * with DLOCK_EPROTO and a message that says why, that the process's peak
 * virtual size did not grow by hundreds of MB, and that ordinary replies
 * still parse. Without the caps the call waits for elements that never
 * come and ends in DLOCK_ETIMEDOUT, after the whole deadline.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "io/conn.h"
#include "dlock.h"
#include "io/net.h"
#include "base/url.h"
#include "base/util.h"

/* A peer that answers every chunk it receives with REPLY and keeps the
 * connection open until the client closes it. */
typedef struct peer {
    int lfd, port;
    const char *reply;
    pthread_t thr;
} peer;

static void *peer_main(void *arg)
{
    peer *p = arg;
    char buf[4096];
    int fd;
    while ((fd = accept(p->lfd, NULL, NULL)) >= 0) {
        ssize_t n;
        while ((n = recv(fd, buf, sizeof buf, 0)) > 0)
            (void)send(fd, p->reply, strlen(p->reply), MSG_NOSIGNAL);
        close(fd);
    }
    return NULL;
}

static void peer_start(peer *p, const char *reply)
{
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    p->reply = reply;
    p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(p->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    getsockname(p->lfd, (struct sockaddr *)&sa, &sl);
    p->port = ntohs(sa.sin_port);
    assert_int_equal(listen(p->lfd, 8), 0);
    assert_int_equal(pthread_create(&p->thr, NULL, peer_main, p), 0);
}

static void peer_stop(peer *p)
{
    shutdown(p->lfd, SHUT_RDWR);
    close(p->lfd);
    pthread_join(p->thr, NULL);
}

/* The process's peak virtual size in kB (VmPeak), or -1. */
static long vm_peak_kb(void)
{
    char line[256];
    long kb = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmPeak: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

/* One PING round trip to p with a 3 s deadline; the reply (or NULL) in
 * *out, the status returned, the message in err. */
static int ping(const peer *p, redisReply **out, char *err, size_t errlen)
{
    dlock__endpoint ep;
    dlock__conn *c = NULL;
    char url[64];
    const char *argv[1] = {"PING"};
    int rc;

    snprintf(url, sizeof url, "redis://127.0.0.1:%d", p->port);
    assert_int_equal(dlock__url_parse(&ep, url, err, errlen), DLOCK_OK);
    rc = dlock__conn_open(&c, &ep, NULL, dlock__now_ms() + 3000, err, errlen);
    assert_int_equal(rc, DLOCK_OK);
    assert_int_equal(dlock__conn_append_argv(c, 1, argv, NULL), DLOCK_OK);
    rc = dlock__conn_roundtrip(c, 1, out, dlock__now_ms() + 3000, -1, err,
                               errlen);
    dlock__conn_close(c);
    dlock__endpoint_clear(&ep);
    return rc;
}

/* "*88888882": refused at once, EPROTO, no ~700 MB allocation. */
static void huge_array_refused(void **state)
{
    peer p;
    redisReply *r = NULL;
    char err[256] = "";
    long before, after;
    int64_t t0, took;
    int rc;
    (void)state;

    peer_start(&p, "*88888882\r\n");
    before = vm_peak_kb();
    t0 = dlock__now_ms();
    rc = ping(&p, &r, err, sizeof err);
    took = dlock__now_ms() - t0;
    after = vm_peak_kb();
    peer_stop(&p);
    print_message("rc %d (%s) in %lld ms: %s; VmPeak %ld -> %ld kB\n", rc,
                  dlock_status_name(rc), (long long)took, err, before, after);
    assert_int_equal(rc, DLOCK_EPROTO);
    assert_null(r);
    assert_non_null(strstr(err, "88888882"));
    /* Not the 3 s deadline: refused as soon as the header arrived. This
     * only tells EPROTO-at-once from waiting for elements that never
     * come (the bound is the test's deadline, not a timing claim). */
    assert_true(took < 3000);
    /* The array's table alone would be 88888882 * 8 bytes (~694 MB);
     * nothing else in this call needs more than a few MB. */
    assert_true(before > 0 && after > 0);
    assert_true(after - before < 256 * 1024);
}

/* A negative count other than nil's -1 is refused too (hiredis 0.14.1
 * says "Multi-bulk length out of range" itself; the cap would too). */
static void negative_array_refused(void **state)
{
    peer p;
    redisReply *r = NULL;
    char err[256] = "";
    int rc;
    (void)state;

    peer_start(&p, "*-5\r\n");
    rc = ping(&p, &r, err, sizeof err);
    peer_stop(&p);
    print_message("rc %d: %s\n", rc, err);
    assert_int_equal(rc, DLOCK_EPROTO);
}

/* Ordinary replies (arrays, nil arrays, strings) still parse. */
static void ordinary_replies_parse(void **state)
{
    peer p;
    redisReply *r = NULL;
    char err[256] = "";
    int rc;
    (void)state;

    peer_start(&p, "*3\r\n:1\r\n*-1\r\n$5\r\nhello\r\n");
    rc = ping(&p, &r, err, sizeof err);
    peer_stop(&p);
    assert_int_equal(rc, DLOCK_OK);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 3);
    assert_int_equal(r->element[0]->integer, 1);
    assert_int_equal(r->element[1]->type, REDIS_REPLY_NIL);
    assert_string_equal(r->element[2]->str, "hello");
    freeReplyObject(r);
}

/* Through the API: an acquire against such a peer says EPROTO with the
 * reason, at once. */
static void api_acquire_refused(void **state)
{
    peer p;
    dlock_options o;
    dlock_client *c = NULL;
    dlock_lock *l = NULL;
    char url[64], err[256] = "";
    const char *servers[1] = {url};
    int rc;
    (void)state;

    peer_start(&p, "*88888882\r\n");
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", p.port);
    dlock_options_init(&o);
    o.servers = servers;
    o.nservers = 1;
    o.command_timeout_ms = 3000;
    assert_int_equal(dlock_client_new(&c, &o, err, sizeof err), DLOCK_OK);
    rc = dlock_lock_acquire(&l, c, "k", 0, 1000);
    print_message("acquire: %s: %s\n", dlock_status_name(rc), dlock_errmsg(c));
    assert_int_equal(rc, DLOCK_EPROTO);
    assert_null(l);
    assert_non_null(strstr(dlock_errmsg(c), "88888882"));
    dlock_client_free(c);
    peer_stop(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(huge_array_refused),
        cmocka_unit_test(negative_array_refused),
        cmocka_unit_test(ordinary_replies_parse),
        cmocka_unit_test(api_acquire_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
