/*
 * harness.h - throwaway redis-server processes for the tests.
 *
 * Every server runs on a free loopback port (the kernel picks it), in its
 * own mktemp -d directory, with --enable-debug-command local, a unix
 * socket in that directory and, on request, a TLS port with certificates
 * generated at test time. Tests talk to the library through dlock.h only;
 * they use th_cmd() (a plain hiredis connection) to look at or disturb
 * the server from outside.
 *
 * DLOCK_TEST_TRANSPORT=tcp|tls|unix (default tcp) chooses which URL
 * th_url() gives, so one test binary runs over every transport.
 */
#ifndef DLOCK_TEST_HARNESS_H
#define DLOCK_TEST_HARNESS_H

#include <hiredis/hiredis.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct th_server_opts {
    int tls;              /* also listen with TLS (th_certs()) */
    int aof_always;       /* appendonly yes, appendfsync always */
    const char *password; /* requirepass for the default user */
    const char *acl_user; /* an extra ACL user with all rights... */
    const char *acl_pass; /* ...and this password */
    const char *tls_cert; /* server cert (default: th_certs()->server) */
    const char *tls_key;
    int tls_auth_clients_yes; /* tls-auth-clients yes (default optional) */
    const char *extra_conf;   /* more redis.conf lines, written last */
} th_server_opts;

typedef struct th_server {
    pid_t pid;           /* 0 when not running */
    int port;            /* plain TCP port on 127.0.0.1 */
    int tls_port;        /* 0 without TLS */
    char dir[256];       /* its own temp dir */
    char unix_path[320]; /* dir/redis.sock */
    char url[400];       /* redis://127.0.0.1:port (with password if set) */
    char tls_url[400];   /* rediss://127.0.0.1:tls_port or "" */
    char unix_url[400];  /* unix://dir/redis.sock */
    th_server_opts opts;
} th_server;

/* Paths of certificates made once per test process under a temp dir by
 * the openssl CLI: a CA, a server cert for 127.0.0.1/localhost signed by
 * it, an expired server cert, a second unrelated CA, a client cert. */
typedef struct th_cert_set {
    char dir[256];
    char ca[320], ca_key[320];
    char server_cert[320], server_key[320];
    char expired_cert[320], expired_key[320];
    char other_ca[320];
    char client_cert[320], client_key[320];
    /* signed by the CA for DNS:wrong.dlock.invalid only (name mismatch) */
    char wrongname_cert[320], wrongname_key[320];
} th_cert_set;

/* Generate (once) and return the certificates; NULL on failure. */
const th_cert_set *th_certs(void);

/* Start a server (opts may be NULL). Returns 0, or -1 with a message on
 * stderr. Waits until it answers PING. */
int th_server_start(th_server *s, const th_server_opts *opts);
/* SIGTERM, wait, remove its directory. Safe on a stopped server. */
void th_server_stop(th_server *s);
/* kill -9 and reap (directory and data kept). */
void th_server_kill9(th_server *s);
/* Start again on the same ports and directory (after kill9). 0 or -1. */
int th_server_restart(th_server *s);
/* SIGSTOP / SIGCONT the server process. */
void th_server_pause(th_server *s);
void th_server_resume(th_server *s);

/* The URL for DLOCK_TEST_TRANSPORT (tcp, tls or unix). */
const char *th_url(const th_server *s);
/* The TLS CA file to use with th_url() (NULL unless transport is tls). */
const char *th_ca_file(void);
/* "tcp", "tls" or "unix". */
const char *th_transport(void);

/* Run a command on a new plain-TCP hiredis connection (authenticated when
 * the server has a password). Returns the reply (freeReplyObject it) or
 * NULL. */
redisReply *th_cmd(const th_server *s, const char *fmt, ...);
/* th_cmd returning an integer reply (or -1 on anything else). */
long long th_cmd_int(const th_server *s, const char *fmt, ...);

/* The calls of command cmd (lower case: "evalsha") s has run so far,
 * its scripts' included (INFO commandstats); -1 when INFO fails. Counts,
 * not times: what a test of a request budget reads. */
long long th_calls(const th_server *s, const char *cmd);
/* The scripts (EVALSHA and EVAL) s has run so far. */
long long th_scripts_run(const th_server *s);

/* Increment the integer at KEY without any lock, slowly (GET, 200 us,
 * SET), so that an update lost to a race shows in the count. 0 or -1. */
int th_rmw(const th_server *s, const char *key);

/* Milliseconds on CLOCK_MONOTONIC, for bounded waits. */
int64_t th_now_ms(void);

/* Sleep for ms milliseconds (restarted on EINTR). */
void th_sleep_ms(int64_t ms);

/* A fake server on a free loopback port, run by a thread: for every
 * accepted connection it reads whatever arrives and answers with MODE:
 *   "garbage"  bytes that are not RESP
 *   "silent"   nothing, ever (connection kept open)
 *   "truncate" half a bulk reply, then nothing
 *   "close"    closes the connection at once
 *   "wrongtype" a valid RESP reply of an unexpected type (+OK) to all
 *   "http"     an HTTP/1.1 400 response, then close
 * Returns the port, or -1. */
int th_fake_server_start(const char *mode);
void th_fake_server_stop(int port);

/* A dlock client for urls[0..n-1] with the given wait strategy, the TLS
 * CA of th_ca_file(), and the timeouts when > 0 (th_client.c). NULL, with
 * the reason on stderr, when dlock_client_new fails. */
struct dlock_client;
struct dlock_client *th_client(const char *const *urls, size_t n, int strategy,
                               int64_t cmd_timeout_ms,
                               int64_t connect_timeout_ms);
/* A default (fair) client of one server url with the fence retention
 * keep_ms (issue 31; th_client.c). NULL as th_client. */
struct dlock_client *th_client_keep(const char *url, int64_t keep_ms);
/* A client of one server url with wait strategy strategy and the spin
 * backoff's bounds (dlock_options.spin_min_ms, spin_max_ms). NULL as
 * th_client. */
struct dlock_client *th_client_spin(const char *url, int strategy,
                                    int64_t spin_min_ms, int64_t spin_max_ms);
/* A notify client of one server url in the string layout
 * (dlock_client_set_layout) with the fence retention keep_ms. NULL as
 * th_client. */
struct dlock_client *th_client_string(const char *url, int64_t keep_ms);
/* The same with wait strategy strategy (DLOCK_WAIT_*). */
struct dlock_client *th_client_string_wait(const char *url, int64_t keep_ms,
                                           int strategy);

/* th_client logging in as ACL user USER with PASSWORD (NULL: the URL's). */
struct dlock_client *th_client_user(const char *const *urls, size_t n,
                                    int strategy, int64_t cmd_timeout_ms,
                                    int64_t connect_timeout_ms,
                                    const char *user, const char *password);

/* dlock_lock_inspect(c, name)'s nodes_holding once it is want, asked
 * again every 20 ms for up to 20 s (a Redlock call returns at a majority:
 * the other nodes apply it a moment later); the last count, or -1 when
 * the inspect fails (th_client.c). */
int th_nodes_holding(struct dlock_client *c, const char *name, int want);

/* mkdtemp under TMPDIR (or /tmp) into buf; 0 or -1. */
int th_tempdir(char *buf, size_t len, const char *tag);

/*
 * Notes on the implementation (harness.c):
 * - Servers run from dir/redis.conf (mode 600), log to dir/redis.log.
 *   DLOCK_REDIS_SERVER overrides the redis-server binary.
 * - A server gets SIGKILL when the thread that started it exits
 *   (PR_SET_PDEATHSIG follows the creating thread): start servers from
 *   the test's main thread. Servers still running at exit() of the
 *   process that started them are killed -9 and their dirs removed;
 *   forked children of a test do not run that cleanup.
 * - With DLOCK_TEST_TRANSPORT=tls, th_server_start() enables TLS even
 *   when opts->tls is 0.
 */

#endif
