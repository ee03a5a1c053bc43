/*
 * harness_selftest.c - tests of the test harness itself (tests/harness),
 * not of the library: servers start, stop, restart with their AOF data,
 * pause and resume; the fake servers behave per mode; the certificates
 * verify (or fail to) as they should. Every other integration test relies
 * on these behaviours, so a harness bug shows up here first and by name.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <cmocka.h>

#include "harness.h"

/* Is pid alive (and not a zombie of ours)? */
static int alive(pid_t pid)
{
    return pid > 0 && kill(pid, 0) == 0;
}

/* Connect to 127.0.0.1:port with a receive timeout of timeout_ms.
 * Returns the fd or -1. */
static int tcp_connect(int port, int timeout_ms)
{
    struct sockaddr_in sa;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Send a PING to a fake server and read what comes back within
 * timeout_ms into buf (NUL-terminated). Returns the byte count, 0 on EOF
 * before any byte, -1 on timeout without bytes. */
static ssize_t fake_exchange(int port, char *buf, size_t len, int timeout_ms)
{
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";
    int fd = tcp_connect(port, timeout_ms);
    ssize_t got = 0;

    assert_true(fd >= 0);
    /* "close" mode may already have closed: a failed send is fine. */
    (void)send(fd, ping, sizeof(ping) - 1, MSG_NOSIGNAL);
    for (;;) {
        ssize_t r = recv(fd, buf + got, len - 1 - (size_t)got, 0);
        if (r > 0) {
            got += r;
            if ((size_t)got >= len - 1)
                break;
            continue;
        }
        if (r == 0)
            break;
        /* timeout (EAGAIN) or reset */
        if (got == 0)
            got = (errno == EAGAIN || errno == EWOULDBLOCK) ? -1 : 0;
        break;
    }
    close(fd);
    buf[got > 0 ? got : 0] = '\0';
    return got;
}

/* Run argv (NULL-terminated) quietly and return its exit status. */
static int run_quiet(char *const argv[])
{
    pid_t pid = fork();
    int st;

    assert_true(pid >= 0);
    if (pid == 0) {
        freopen("/dev/null", "w", stdout);
        freopen("/dev/null", "w", stderr);
        execvp(argv[0], argv);
        _exit(127);
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A server starts on loopback, answers, has its dir and socket, and is
 * gone with its dir after stop; a second stop is harmless. */
static void test_start_stop(void **state)
{
    th_server s;
    redisReply *r;
    struct stat st;
    char dir[256];

    (void)state;
    assert_int_equal(th_server_start(&s, NULL), 0);
    assert_true(alive(s.pid));
    assert_true(s.port > 0);
    assert_int_equal(stat(s.unix_path, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    assert_non_null(strstr(s.url, "redis://127.0.0.1:"));
    assert_non_null(strstr(s.unix_url, "unix:///"));
    assert_non_null(th_url(&s));

    r = th_cmd(&s, "SET %s %s", "k", "v");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    assert_int_equal(th_cmd_int(&s, "EXISTS %s", "k"), 1);
    /* DEBUG is enabled for local connections. */
    r = th_cmd(&s, "DEBUG SLEEP 0");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    /* Loopback only, no persistence unless asked. */
    r = th_cmd(&s, "CONFIG GET bind");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_string_equal(r->element[1]->str, "127.0.0.1");
    freeReplyObject(r);
    r = th_cmd(&s, "CONFIG GET appendonly");
    assert_non_null(r);
    assert_string_equal(r->element[1]->str, "no");
    freeReplyObject(r);

    snprintf(dir, sizeof(dir), "%s", s.dir);
    pid_t pid = s.pid;
    th_server_stop(&s);
    assert_int_equal(s.pid, 0);
    assert_false(alive(pid));
    assert_int_not_equal(stat(dir, &st), 0);
    th_server_stop(&s);
}

/* Two servers at once get different ports and dirs. */
static void test_two_servers(void **state)
{
    th_server a, b;

    (void)state;
    assert_int_equal(th_server_start(&a, NULL), 0);
    assert_int_equal(th_server_start(&b, NULL), 0);
    assert_int_not_equal(a.port, b.port);
    assert_string_not_equal(a.dir, b.dir);
    assert_int_equal(th_cmd_int(&a, "INCR %s", "x"), 1);
    assert_int_equal(th_cmd_int(&b, "EXISTS %s", "x"), 0);
    th_server_stop(&a);
    th_server_stop(&b);
}

/* A password server: the URL carries it, th_cmd authenticates, an
 * unauthenticated command is refused; the ACL user exists. */
static void test_password(void **state)
{
    th_server_opts o = {0};
    th_server s;
    redisContext *c;
    redisReply *r;
    struct timeval tv = {2, 0};

    (void)state;
    o.password = "p@ss word";
    o.acl_user = "alice";
    o.acl_pass = "wonder";
    assert_int_equal(th_server_start(&s, &o), 0);
    assert_non_null(strstr(s.url, "redis://:p%40ss%20word@127.0.0.1:"));
    assert_int_equal(th_cmd_int(&s, "INCR %s", "n"), 1);

    c = redisConnectWithTimeout("127.0.0.1", s.port, tv);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    r = redisCommand(c, "GET n");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
    r = redisCommand(c, "AUTH alice wonder");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = redisCommand(c, "GET n");
    assert_non_null(r);
    assert_string_equal(r->str, "1");
    freeReplyObject(r);
    redisFree(c);
    th_server_stop(&s);
}

/* kill -9 then restart on the same port: with appendfsync always the
 * data written before the kill is there again. */
static void test_restart_keeps_aof(void **state)
{
    th_server_opts o = {0};
    th_server s;
    int port;
    redisReply *r;

    (void)state;
    o.aof_always = 1;
    assert_int_equal(th_server_start(&s, &o), 0);
    port = s.port;
    r = th_cmd(&s, "CONFIG GET appendfsync");
    assert_non_null(r);
    assert_string_equal(r->element[1]->str, "always");
    freeReplyObject(r);
    assert_int_equal(th_cmd_int(&s, "INCRBY %s 41", "kept"), 41);
    assert_int_equal(th_cmd_int(&s, "INCR %s", "kept"), 42);

    pid_t old = s.pid;
    th_server_kill9(&s);
    assert_int_equal(s.pid, 0);
    assert_false(alive(old));
    assert_null(th_cmd(&s, "PING"));

    assert_int_equal(th_server_restart(&s), 0);
    assert_int_equal(s.port, port);
    assert_true(alive(s.pid));
    r = th_cmd(&s, "GET kept");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "42");
    freeReplyObject(r);
    th_server_stop(&s);
}

/* Without AOF, a restart comes back empty (what "node lost its data"
 * tests rely on). */
static void test_restart_without_aof_is_empty(void **state)
{
    th_server s;

    (void)state;
    assert_int_equal(th_server_start(&s, NULL), 0);
    assert_int_equal(th_cmd_int(&s, "INCR %s", "gone"), 1);
    th_server_kill9(&s);
    assert_int_equal(th_server_restart(&s), 0);
    assert_int_equal(th_cmd_int(&s, "EXISTS %s", "gone"), 0);
    th_server_stop(&s);
}

/* A paused server does not answer (th_cmd gives up after its timeout);
 * resumed, it answers again. Stopping a paused server works too. */
static void test_pause_resume(void **state)
{
    th_server s;
    int fd;
    char buf[64];
    static const char ping[] = "*1\r\n$4\r\nPING\r\n";

    (void)state;
    assert_int_equal(th_server_start(&s, NULL), 0);
    th_server_pause(&s);
    /* The kernel still accepts; nobody answers. */
    fd = tcp_connect(s.port, 300);
    assert_true(fd >= 0);
    assert_int_equal(send(fd, ping, sizeof(ping) - 1, MSG_NOSIGNAL),
                     (ssize_t)sizeof(ping) - 1);
    assert_true(recv(fd, buf, sizeof(buf), 0) < 0);
    th_server_resume(&s);
    memset(buf, 0, sizeof(buf));
    {
        struct timeval tv = {5, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    }
    assert_int_equal(recv(fd, buf, sizeof(buf) - 1, 0), 7);
    assert_string_equal(buf, "+PONG\r\n");
    close(fd);

    th_server_pause(&s);
    int64_t t0 = th_now_ms();
    pid_t pid = s.pid;
    th_server_stop(&s);
    assert_true(th_now_ms() - t0 < 6000);
    assert_false(alive(pid));
}

/* Each fake server mode behaves as the header says; stop is prompt even
 * with a client still connected. */
static void test_fake_servers(void **state)
{
    char buf[512];
    int port, fd;
    int64_t t0;

    (void)state;
    port = th_fake_server_start("garbage");
    assert_true(port > 0);
    assert_true(fake_exchange(port, buf, sizeof(buf), 1000) > 0);
    assert_null(strchr("+-:$*", buf[0]));
    th_fake_server_stop(port);

    port = th_fake_server_start("silent");
    assert_true(port > 0);
    assert_int_equal(fake_exchange(port, buf, sizeof(buf), 300), -1);
    /* Stop while a client is connected and waiting. */
    fd = tcp_connect(port, 300);
    assert_true(fd >= 0);
    t0 = th_now_ms();
    th_fake_server_stop(port);
    assert_true(th_now_ms() - t0 < 1000);
    {
        /* Closed (or reset if it was never accepted), not a timeout. */
        ssize_t r = recv(fd, buf, sizeof(buf), 0);
        assert_true(r == 0 || (r < 0 && errno == ECONNRESET));
    }
    close(fd);

    port = th_fake_server_start("truncate");
    assert_true(port > 0);
    assert_true(fake_exchange(port, buf, sizeof(buf), 300) > 0);
    assert_int_equal(buf[0], '$');
    {
        /* Fewer bytes arrived than the bulk header promised. */
        long want = strtol(buf + 1, NULL, 10);
        char *body = strstr(buf, "\r\n");
        assert_non_null(body);
        assert_true((long)strlen(body + 2) < want);
    }
    th_fake_server_stop(port);

    port = th_fake_server_start("close");
    assert_true(port > 0);
    assert_int_equal(fake_exchange(port, buf, sizeof(buf), 1000), 0);
    th_fake_server_stop(port);

    port = th_fake_server_start("wrongtype");
    assert_true(port > 0);
    assert_true(fake_exchange(port, buf, sizeof(buf), 300) > 0);
    assert_string_equal(buf, "+OK\r\n");
    th_fake_server_stop(port);

    port = th_fake_server_start("http");
    assert_true(port > 0);
    assert_true(fake_exchange(port, buf, sizeof(buf), 1000) > 0);
    assert_memory_equal(buf, "HTTP/1.1 400", 12);
    th_fake_server_stop(port);

    assert_int_equal(th_fake_server_start("nonsense"), -1);
    th_fake_server_stop(1); /* unknown port: harmless */
}

/* wrongtype answers one +OK per pipelined command, through hiredis. */
static void test_fake_wrongtype_pipeline(void **state)
{
    struct timeval tv = {2, 0};
    redisContext *c;
    int port;

    (void)state;
    port = th_fake_server_start("wrongtype");
    assert_true(port > 0);
    c = redisConnectWithTimeout("127.0.0.1", port, tv);
    assert_non_null(c);
    redisSetTimeout(c, tv);
    for (int i = 0; i < 3; i++)
        redisAppendCommand(c, "GET k%d", i);
    for (int i = 0; i < 3; i++) {
        void *reply = NULL;
        assert_int_equal(redisGetReply(c, &reply), REDIS_OK);
        assert_int_equal(((redisReply *)reply)->type, REDIS_REPLY_STATUS);
        freeReplyObject(reply);
    }
    redisFree(c);
    th_fake_server_stop(port);
}

/* The certificates exist and verify as intended. */
static void test_certs(void **state)
{
    const th_cert_set *c = th_certs();

    (void)state;
    assert_non_null(c);
    assert_ptr_equal(c, th_certs());
    const char *files[] = {
        c->ca,           c->ca_key,         c->server_cert,  c->server_key,
        c->expired_cert, c->expired_key,    c->other_ca,     c->client_cert,
        c->client_key,   c->wrongname_cert, c->wrongname_key};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        assert_int_equal(access(files[i], R_OK), 0);

    {
        char *argv[] = {"openssl",
                        "verify",
                        "-CAfile",
                        (char *)c->ca,
                        (char *)c->server_cert,
                        NULL};
        assert_int_equal(run_quiet(argv), 0);
    }
    {
        char *argv[] = {"openssl",
                        "verify",
                        "-CAfile",
                        (char *)c->ca,
                        (char *)c->client_cert,
                        NULL};
        assert_int_equal(run_quiet(argv), 0);
    }
    {
        char *argv[] = {"openssl",
                        "verify",
                        "-CAfile",
                        (char *)c->ca,
                        (char *)c->expired_cert,
                        NULL};
        assert_int_not_equal(run_quiet(argv), 0);
    }
    {
        char *argv[] = {"openssl",
                        "verify",
                        "-CAfile",
                        (char *)c->other_ca,
                        (char *)c->server_cert,
                        NULL};
        assert_int_not_equal(run_quiet(argv), 0);
    }
    {
        /* Chain is fine, the name is not: verify with -verify_ip. */
        char *argv[] = {"openssl",
                        "verify",
                        "-CAfile",
                        (char *)c->ca,
                        "-verify_ip",
                        "127.0.0.1",
                        (char *)c->wrongname_cert,
                        NULL};
        assert_int_not_equal(run_quiet(argv), 0);
    }
    {
        char *argv[] = {"openssl",
                        "verify",
                        "-CAfile",
                        (char *)c->ca,
                        "-verify_ip",
                        "127.0.0.1",
                        (char *)c->server_cert,
                        NULL};
        assert_int_equal(run_quiet(argv), 0);
    }
}

/* A TLS server: a port, a rediss:// URL, and a real TLS handshake that
 * verifies against the CA (checked with openssl s_client). */
static void test_tls_server(void **state)
{
    th_server_opts o = {0};
    th_server s;
    char addr[64];

    (void)state;
    o.tls = 1;
    assert_int_equal(th_server_start(&s, &o), 0);
    assert_true(s.tls_port > 0);
    assert_non_null(strstr(s.tls_url, "rediss://127.0.0.1:"));
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", s.tls_port);
    {
        char *argv[] = {"sh",
                        "-c",
                        "echo | timeout 10 openssl s_client -connect \"$1\" "
                        "-CAfile \"$2\" -verify_return_error "
                        "-verify_ip 127.0.0.1",
                        "sh",
                        addr,
                        (char *)th_certs()->ca,
                        NULL};
        assert_int_equal(run_quiet(argv), 0);
    }
    {
        char *argv[] = {"sh",
                        "-c",
                        "echo | timeout 10 openssl s_client -connect \"$1\" "
                        "-CAfile \"$2\" -verify_return_error",
                        "sh",
                        addr,
                        (char *)th_certs()->other_ca,
                        NULL};
        assert_int_not_equal(run_quiet(argv), 0);
    }
    th_server_stop(&s);
}

/* A TLS server can be started with the expired or wrong-name certificate
 * and with tls-auth-clients yes. */
static void test_tls_variants(void **state)
{
    th_server_opts o = {0};
    th_server s;
    redisReply *r;

    (void)state;
    o.tls = 1;
    o.tls_cert = th_certs()->expired_cert;
    o.tls_key = th_certs()->expired_key;
    assert_int_equal(th_server_start(&s, &o), 0);
    th_server_stop(&s);

    o.tls_cert = th_certs()->wrongname_cert;
    o.tls_key = th_certs()->wrongname_key;
    o.tls_auth_clients_yes = 1;
    assert_int_equal(th_server_start(&s, &o), 0);
    r = th_cmd(&s, "CONFIG GET tls-auth-clients");
    assert_non_null(r);
    assert_string_equal(r->element[1]->str, "yes");
    freeReplyObject(r);
    th_server_stop(&s);
}

/* th_url follows DLOCK_TEST_TRANSPORT; with tls the server got TLS even
 * though the options did not ask. */
static void test_transport_urls(void **state)
{
    th_server s;
    const char *t = th_transport();

    (void)state;
    assert_int_equal(th_server_start(&s, NULL), 0);
    if (strcmp(t, "tls") == 0) {
        assert_true(s.tls_port > 0);
        assert_string_equal(th_url(&s), s.tls_url);
        assert_non_null(th_ca_file());
    } else if (strcmp(t, "unix") == 0) {
        assert_string_equal(th_url(&s), s.unix_url);
        assert_null(th_ca_file());
    } else {
        assert_string_equal(t, "tcp");
        assert_string_equal(th_url(&s), s.url);
        assert_null(th_ca_file());
    }
    th_server_stop(&s);
}

/* A forked child that exits does not take the parent's servers with it
 * (the atexit cleanup belongs to the process that started them). */
static void test_child_exit_leaves_servers(void **state)
{
    th_server s;
    pid_t pid;
    int st;

    (void)state;
    assert_int_equal(th_server_start(&s, NULL), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        exit(0);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(alive(s.pid));
    assert_int_equal(th_cmd_int(&s, "INCR %s", "still"), 1);
    th_server_stop(&s);
}

/* th_tempdir makes a fresh private directory each time. */
static void test_tempdir(void **state)
{
    char a[256], b[256];
    struct stat st;

    (void)state;
    assert_int_equal(th_tempdir(a, sizeof(a), "x"), 0);
    assert_int_equal(th_tempdir(b, sizeof(b), "x"), 0);
    assert_string_not_equal(a, b);
    assert_int_equal(stat(a, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 077, 0);
    rmdir(a);
    rmdir(b);
    assert_int_equal(th_tempdir(a, 10, "too-long-for-the-buffer"), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tempdir),
        cmocka_unit_test(test_start_stop),
        cmocka_unit_test(test_two_servers),
        cmocka_unit_test(test_password),
        cmocka_unit_test(test_restart_keeps_aof),
        cmocka_unit_test(test_restart_without_aof_is_empty),
        cmocka_unit_test(test_pause_resume),
        cmocka_unit_test(test_fake_servers),
        cmocka_unit_test(test_fake_wrongtype_pipeline),
        cmocka_unit_test(test_certs),
        cmocka_unit_test(test_tls_server),
        cmocka_unit_test(test_tls_variants),
        cmocka_unit_test(test_transport_urls),
        cmocka_unit_test(test_child_exit_leaves_servers),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
