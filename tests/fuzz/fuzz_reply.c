/*
 * fuzz_reply.c - libFuzzer target for the interpretation of server
 * replies, through the real code path.
 *
 * A fake server thread on a loopback port answers the first command of
 * every connection with the fuzz input bytes and closes it. A dlock client
 * with tiny timeouts connects to it and calls acquire, inspect,
 * fenced_get, fenced_set and release (when an acquire "succeeded"). So the
 * bytes pass through hiredis's reader into the library's handling of every
 * reply. Every result must be a known dlock status; ASan and LeakSanitizer
 * catch crashes and leaks; a call may not take much longer than its
 * timeouts (no hang).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <dlock.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint8_t reply_buf[65536];
static size_t reply_len;
static int port;

/* Serve: accept, read one command (or whatever arrives in 100 ms), send
 * the current input, close. One connection at a time is enough: the
 * client's calls are sequential. */
static void *serve(void *arg)
{
    int lfd = *(int *)arg;
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            continue;
        struct pollfd p = {fd, POLLIN, 0};
        char buf[4096];
        if (poll(&p, 1, 100) > 0 && read(fd, buf, sizeof buf) <= 0) {
            close(fd);
            continue;
        }
        pthread_mutex_lock(&mu);
        size_t off = 0;
        while (off < reply_len) {
            ssize_t w = send(fd, reply_buf + off, reply_len - off,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w <= 0)
                break;
            off += (size_t)w;
        }
        pthread_mutex_unlock(&mu);
        shutdown(fd, SHUT_WR);
        close(fd);
    }
    return NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    static int lfd;
    lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(lfd, 64) != 0 ||
        getsockname(lfd, (struct sockaddr *)&a, &al) != 0)
        abort();
    port = ntohs(a.sin_port);
    pthread_t t;
    if (pthread_create(&t, NULL, serve, &lfd) != 0)
        abort();
    pthread_detach(t);
    return 0;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void known(int rc)
{
    if (strcmp(dlock_status_name(rc), "UNKNOWN") == 0) {
        fprintf(stderr, "unknown status %d\n", rc);
        abort();
    }
}

/*
 * Huge aggregate headers ("*88888882\r\n") are not skipped: the library
 * refuses them before hiredis allocates (conn.c's reply caps,
 * docs/reliability.md F4), so the fuzzer may try them like any input.
 */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > sizeof reply_buf)
        return 0;
    pthread_mutex_lock(&mu);
    memcpy(reply_buf, data, size);
    reply_len = size;
    pthread_mutex_unlock(&mu);

    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    const char *servers[] = {url};
    dlock_options o;
    dlock_options_init(&o);
    o.servers = servers;
    o.nservers = 1;
    o.connect_timeout_ms = 50;
    o.command_timeout_ms = 50;
    o.pool_size = 1;
    dlock_client *c = NULL;
    if (dlock_client_new(&c, &o, NULL, 0) != DLOCK_OK)
        abort();
    int64_t t0 = now_ms();
    dlock_lock *l = NULL;
    int rc = dlock_lock_acquire(&l, c, "f", 0, 1000);
    known(rc);
    if ((rc == DLOCK_OK) != (l != NULL))
        abort();
    if (l) {
        (void)dlock_lock_token(l);
        (void)dlock_lock_validity_ms(l);
        known(dlock_lock_extend(l, 1000));
        known(dlock_lock_release(l));
    }
    dlock_info info;
    known(dlock_lock_inspect(c, "f", &info));
    char *val = NULL;
    size_t len = 0;
    uint64_t fence = 0;
    rc = dlock_fenced_get(c, "k", &val, &len, &fence);
    known(rc);
    if (val && strlen(val) > len)
        abort(); /* NUL-terminated at len */
    free(val);
    known(dlock_fenced_set(c, "k", 7, "v", 1));
    if (now_ms() - t0 > 5000) {
        fprintf(stderr, "calls took %lld ms\n", (long long)(now_ms() - t0));
        abort();
    }
    dlock_client_free(c);
    return 0;
}
