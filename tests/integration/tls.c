/*
 * tls.c - rediss:// and authentication against real redis-servers,
 * through dlock.h only: a lock over TLS, AUTH with an ACL user, and every
 * way a TLS connection can be wrong (unknown CA, wrong name, expired
 * certificate, plain text to a TLS port and TLS to a plain port, a client
 * certificate required or not given). Each failure must come back within
 * the configured timeouts with its own code and a message that says what
 * happened, and never the password. Last, a peer that vanishes while we
 * write must not kill the process with SIGPIPE.
 *
 * Runs once (its name does not start with lock_): it starts the servers
 * it needs itself, whatever DLOCK_TEST_TRANSPORT says.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "dlock.h"
#include "harness.h"

#define DEFAULT_PW "Default-pw-1"
#define ALICE_PW "Sesame-42"
#define WRONG_PW "WrongPass-77"
#define CONNECT_MS 4000
#define COMMAND_MS 4000
/* Generous timeouts: the first TLS handshake of a process takes over a
 * second under valgrind (OpenSSL's lazy initialisation); failures here
 * come back at once anyway, except TLS to a plain port (own timeout).
 * A failure must come back within connect + command timeouts and this
 * much scheduling slack: a bound, not a speed requirement. */
#define SLACK_MS 3000

static th_server main_srv;  /* TLS + plain; default user and alice */
static th_server expired;   /* serves the expired certificate */
static th_server wrongname; /* serves a cert for wrong.dlock.invalid */
static th_server mtls;      /* tls-auth-clients yes */

/* What one attempt needs besides the URL; zero = defaults. */
typedef struct tweak {
    const char *ca;          /* default: th_certs()->ca */
    const char *server_name; /* tls_server_name */
    const char *cert, *key;  /* client certificate */
    const char *username, *password;
    int insecure;
    int64_t connect_ms; /* default CONNECT_MS */
} tweak;

/* The outcome of one attempt. */
typedef struct outcome {
    int rc;
    int64_t elapsed_ms;
    char msg[512];
} outcome;

/* Make a client for url with t, try to take a lock once (and release it
 * when taken) and report the acquire's code, how long it took and
 * dlock_errmsg(). The lock name is long so its command is not tiny. */
static outcome attempt(const char *url, const tweak *t)
{
    static const tweak none;
    dlock_options o;
    dlock_client *c = NULL;
    dlock_lock *l = NULL;
    outcome out;
    char name[400];
    int64_t t0;

    if (t == NULL)
        t = &none;
    memset(&out, 0, sizeof out);
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    dlock_options_init(&o);
    o.servers = &url;
    o.nservers = 1;
    o.connect_timeout_ms = t->connect_ms > 0 ? t->connect_ms : CONNECT_MS;
    o.command_timeout_ms = COMMAND_MS;
    o.tls_ca_file = t->ca != NULL ? t->ca : th_certs()->ca;
    o.tls_server_name = t->server_name;
    o.tls_cert_file = t->cert;
    o.tls_key_file = t->key;
    o.tls_insecure = t->insecure;
    o.username = t->username;
    o.password = t->password;
    out.rc = dlock_client_new(&c, &o, out.msg, sizeof out.msg);
    if (out.rc != DLOCK_OK)
        return out;
    t0 = th_now_ms();
    out.rc = dlock_lock_acquire(&l, c, name, 0, 10000);
    out.elapsed_ms = th_now_ms() - t0;
    if (out.rc == DLOCK_OK) {
        assert_int_equal(dlock_lock_release(l), DLOCK_OK);
    } else {
        assert_null(l);
        snprintf(out.msg, sizeof out.msg, "%s", dlock_errmsg(c));
    }
    dlock_client_free(c);
    return out;
}

/* Expect failure with one of the codes a/b (b may be a), the message
 * containing want, within the time bound. */
static void expect_fail(const outcome *o, int a, int b, const char *want,
                        int64_t connect_ms)
{
    if ((o->rc != a && o->rc != b) || strstr(o->msg, want) == NULL)
        print_error("got %s (%d) \"%s\", wanted %s/%s with \"%s\"\n",
                    dlock_status_name(o->rc), o->rc, o->msg,
                    dlock_status_name(a), dlock_status_name(b), want);
    print_message("  %s after %lld ms: %s\n", dlock_status_name(o->rc),
                  (long long)o->elapsed_ms, o->msg);
    assert_true(o->rc == a || o->rc == b);
    assert_non_null(strstr(o->msg, want));
    assert_true(o->elapsed_ms <= connect_ms + COMMAND_MS + SLACK_MS);
    assert_null(strstr(o->msg, DEFAULT_PW));
    assert_null(strstr(o->msg, ALICE_PW));
    assert_null(strstr(o->msg, WRONG_PW));
}

/* Expect success. */
static void expect_ok(const outcome *o)
{
    if (o->rc != DLOCK_OK)
        print_error("got %s: %s\n", dlock_status_name(o->rc), o->msg);
    assert_int_equal(o->rc, DLOCK_OK);
}

static int setup(void **state)
{
    th_server_opts o;
    const th_cert_set *certs = th_certs();
    (void)state;
    /* The library must never need SIGPIPE ignored: keep the default. */
    signal(SIGPIPE, SIG_DFL);
    if (certs == NULL)
        return -1;
    memset(&o, 0, sizeof o);
    o.tls = 1;
    o.password = DEFAULT_PW;
    o.acl_user = "alice";
    o.acl_pass = ALICE_PW;
    if (th_server_start(&main_srv, &o) != 0)
        return -1;
    memset(&o, 0, sizeof o);
    o.tls = 1;
    o.tls_cert = certs->expired_cert;
    o.tls_key = certs->expired_key;
    if (th_server_start(&expired, &o) != 0)
        return -1;
    o.tls_cert = certs->wrongname_cert;
    o.tls_key = certs->wrongname_key;
    if (th_server_start(&wrongname, &o) != 0)
        return -1;
    memset(&o, 0, sizeof o);
    o.tls = 1;
    o.tls_auth_clients_yes = 1;
    if (th_server_start(&mtls, &o) != 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    th_server_stop(&main_srv);
    th_server_stop(&expired);
    th_server_stop(&wrongname);
    th_server_stop(&mtls);
    return 0;
}

/* "rediss://[userinfo@]127.0.0.1:port" into buf. */
static const char *url_of(char *buf, size_t len, const char *scheme,
                          const char *userinfo, int port)
{
    snprintf(buf, len, "%s://%s%s127.0.0.1:%d", scheme,
             userinfo != NULL ? userinfo : "", userinfo != NULL ? "@" : "",
             port);
    return buf;
}

/* A lock over verified TLS, by IP and by name, with the default user's
 * password; and with the verification turned off. */
static void test_tls_ok(void **state)
{
    char url[256];
    tweak t;
    outcome o;
    (void)state;

    o = attempt(
        url_of(url, sizeof url, "rediss", ":" DEFAULT_PW, main_srv.tls_port),
        NULL);
    expect_ok(&o);
    snprintf(url, sizeof url, "rediss://:%s@localhost:%d/2", DEFAULT_PW,
             main_srv.tls_port);
    o = attempt(url, NULL);
    expect_ok(&o);

    memset(&t, 0, sizeof t);
    t.ca = th_certs()->other_ca;
    t.insecure = 1;
    o = attempt(
        url_of(url, sizeof url, "rediss", ":" DEFAULT_PW, main_srv.tls_port),
        &t);
    expect_ok(&o);
    /* ...and it is loud about it: the creating call's errbuf says so. */
    assert_non_null(strstr(o.msg, "TLS verification is OFF"));
}

/* AUTH with an ACL user and password over TLS, in the URL or in the
 * options; a wrong password is DLOCK_EAUTH and never shown. */
static void test_auth(void **state)
{
    char url[256];
    tweak t;
    outcome o;
    (void)state;

    o = attempt(
        url_of(url, sizeof url, "rediss", "alice:" ALICE_PW, main_srv.tls_port),
        NULL);
    expect_ok(&o);

    memset(&t, 0, sizeof t);
    t.username = "alice";
    t.password = ALICE_PW;
    o = attempt(url_of(url, sizeof url, "rediss", NULL, main_srv.tls_port), &t);
    expect_ok(&o);

    o = attempt(
        url_of(url, sizeof url, "rediss", "alice:" WRONG_PW, main_srv.tls_port),
        NULL);
    expect_fail(&o, DLOCK_EAUTH, DLOCK_EAUTH, "WRONGPASS", CONNECT_MS);

    /* The options' password overrides the URL's, and is hidden too. */
    memset(&t, 0, sizeof t);
    t.password = WRONG_PW;
    o = attempt(
        url_of(url, sizeof url, "rediss", ":" DEFAULT_PW, main_srv.tls_port),
        &t);
    expect_fail(&o, DLOCK_EAUTH, DLOCK_EAUTH, "WRONGPASS", CONNECT_MS);

    /* Same over plain TCP. */
    o = attempt(
        url_of(url, sizeof url, "redis", "alice:" WRONG_PW, main_srv.port),
        NULL);
    expect_fail(&o, DLOCK_EAUTH, DLOCK_EAUTH, "WRONGPASS", CONNECT_MS);

    /* Without any password the server refuses the commands. */
    o = attempt(url_of(url, sizeof url, "rediss", NULL, main_srv.tls_port),
                NULL);
    assert_int_not_equal(o.rc, DLOCK_OK);
    assert_non_null(strstr(o.msg, "NOAUTH"));
}

/* Verification failures, each with its own reason. */
static void test_verify_failures(void **state)
{
    char url[256];
    tweak t;
    outcome o;
    (void)state;

    /* A CA that did not sign the server's certificate. */
    memset(&t, 0, sizeof t);
    t.ca = th_certs()->other_ca;
    o = attempt(
        url_of(url, sizeof url, "rediss", ":" DEFAULT_PW, main_srv.tls_port),
        &t);
    expect_fail(&o, DLOCK_ETLS, DLOCK_ETLS, "certificate verify failed",
                CONNECT_MS);

    /* A name the certificate does not carry. */
    memset(&t, 0, sizeof t);
    t.server_name = "other.dlock.invalid";
    o = attempt(
        url_of(url, sizeof url, "rediss", ":" DEFAULT_PW, main_srv.tls_port),
        &t);
    expect_fail(&o, DLOCK_ETLS, DLOCK_ETLS, "hostname mismatch", CONNECT_MS);

    /* A certificate for another name, reached by IP, then by name. */
    o = attempt(url_of(url, sizeof url, "rediss", NULL, wrongname.tls_port),
                NULL);
    expect_fail(&o, DLOCK_ETLS, DLOCK_ETLS, "IP address mismatch", CONNECT_MS);
    snprintf(url, sizeof url, "rediss://localhost:%d", wrongname.tls_port);
    o = attempt(url, NULL);
    expect_fail(&o, DLOCK_ETLS, DLOCK_ETLS, "hostname mismatch", CONNECT_MS);
    /* ...and accepted when told the name it was issued for. */
    memset(&t, 0, sizeof t);
    t.server_name = "wrong.dlock.invalid";
    o = attempt(url_of(url, sizeof url, "rediss", NULL, wrongname.tls_port),
                &t);
    expect_ok(&o);

    /* An expired certificate. */
    o = attempt(url_of(url, sizeof url, "rediss", NULL, expired.tls_port),
                NULL);
    expect_fail(&o, DLOCK_ETLS, DLOCK_ETLS, "certificate has expired",
                CONNECT_MS);
}

/* The wrong protocol for the port, both ways. */
static void test_wrong_port(void **state)
{
    char url[256];
    tweak t;
    outcome o;
    (void)state;

    /* Plain text to the TLS port: the server resets the connection. With
     * a password the AUTH at connect time meets it; without, the first
     * command does. */
    o = attempt(
        url_of(url, sizeof url, "redis", ":" DEFAULT_PW, main_srv.tls_port),
        NULL);
    expect_fail(&o, DLOCK_EIO, DLOCK_EPROTO, "TLS port", CONNECT_MS);
    o = attempt(url_of(url, sizeof url, "redis", NULL, mtls.tls_port), NULL);
    expect_fail(&o, DLOCK_EIO, DLOCK_EPROTO, "TLS port", CONNECT_MS);

    /* TLS to the plain port: Redis waits for a line that never comes (or
     * answers an error to it): the connect timeout ends it at worst. */
    memset(&t, 0, sizeof t);
    t.connect_ms = 700;
    o = attempt(
        url_of(url, sizeof url, "rediss", ":" DEFAULT_PW, main_srv.port), &t);
    expect_fail(&o, DLOCK_ETIMEDOUT, DLOCK_ETLS, "TLS port", t.connect_ms);
}

/* A server that requires a client certificate. */
static void test_client_cert(void **state)
{
    char url[256];
    tweak t;
    outcome o;
    (void)state;

    memset(&t, 0, sizeof t);
    t.cert = th_certs()->client_cert;
    t.key = th_certs()->client_key;
    o = attempt(url_of(url, sizeof url, "rediss", NULL, mtls.tls_port), &t);
    expect_ok(&o);

    /* Without one: TLS 1.3 lets the client finish its handshake, and the
     * refusal arrives as an alert on the first read (or, if the server's
     * reset overtakes it, as a reset). */
    o = attempt(url_of(url, sizeof url, "rediss", NULL, mtls.tls_port), NULL);
    if (o.rc == DLOCK_ETLS)
        expect_fail(&o, DLOCK_ETLS, DLOCK_ETLS, "certificate required",
                    CONNECT_MS);
    else
        expect_fail(&o, DLOCK_EIO, DLOCK_EIO, "by 127.0.0.1:", CONNECT_MS);

    /* A key that does not belong to the certificate: refused at once. */
    memset(&t, 0, sizeof t);
    t.cert = th_certs()->client_cert;
    t.key = th_certs()->server_key;
    o = attempt(url_of(url, sizeof url, "rediss", NULL, mtls.tls_port), &t);
    assert_int_equal(o.rc, DLOCK_ETLS);
    assert_non_null(strstr(o.msg, "client key"));
}

/*
 * Peers that go away under our writes, with SIGPIPE at its default
 * disposition: a fake server that closes every connection at once, and a
 * TLS server killed while the client holds pooled connections to it.
 * Every call fails with an I/O error and the process lives on. (The
 * unit test test_transport.c forces the write-after-reset case
 * deterministically, plain and TLS.)
 */
static void test_no_sigpipe(void **state)
{
    char url[256];
    th_server victim;
    th_server_opts so;
    dlock_options o;
    dlock_client *c = NULL;
    dlock_lock *l = NULL;
    const char *u = url;
    char name[500];
    int i, port, rc;
    outcome out;
    (void)state;

    port = th_fake_server_start("close");
    assert_true(port > 0);
    for (i = 0; i < 10; i++) {
        out = attempt(url_of(url, sizeof url, "redis", NULL, port), NULL);
        assert_int_not_equal(out.rc, DLOCK_OK);
        assert_true(out.rc == DLOCK_EIO || out.rc == DLOCK_EPROTO);
    }
    th_fake_server_stop(port);

    memset(&so, 0, sizeof so);
    so.tls = 1;
    assert_int_equal(th_server_start(&victim, &so), 0);
    url_of(url, sizeof url, "rediss", NULL, victim.tls_port);
    dlock_options_init(&o);
    o.servers = &u;
    o.nservers = 1;
    o.connect_timeout_ms = CONNECT_MS;
    o.command_timeout_ms = COMMAND_MS;
    o.tls_ca_file = th_certs()->ca;
    assert_int_equal(dlock_client_new(&c, &o, NULL, 0), DLOCK_OK);
    memset(name, 'x', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    assert_int_equal(dlock_lock_acquire(&l, c, name, 0, 10000), DLOCK_OK);
    th_server_kill9(&victim);
    /* The held lock's release and new acquires meet the dead server. */
    rc = dlock_lock_release(l);
    assert_int_not_equal(rc, DLOCK_OK);
    for (i = 0; i < 5; i++) {
        rc = dlock_lock_acquire(&l, c, name, 0, 10000);
        assert_true(rc == DLOCK_EIO || rc == DLOCK_ETIMEDOUT);
        assert_null(l);
    }
    dlock_client_free(c);
    th_server_stop(&victim);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tls_ok),
        cmocka_unit_test(test_auth),
        cmocka_unit_test(test_verify_failures),
        cmocka_unit_test(test_wrong_port),
        cmocka_unit_test(test_client_cert),
        cmocka_unit_test(test_no_sigpipe),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
