/*
 * url.h - server URLs (redis://, rediss://, unix://) parsed into the
 * endpoint the transport connects to (url.c). Above util.h only.
 */
#ifndef DLOCK_URL_H
#define DLOCK_URL_H

#include <stddef.h>

#include "base/util.h"

typedef enum dlock__ep_kind {
    DLOCK__EP_TCP,
    DLOCK__EP_TLS,
    DLOCK__EP_UNIX
} dlock__ep_kind;

/* One parsed server address. Strings are malloc'd and owned. */
typedef struct dlock__endpoint {
    dlock__ep_kind kind;
    char *host;     /* TCP/TLS: name or IP literal (IPv6 without []) */
    int port;       /* TCP/TLS, default 6379 */
    char *path;     /* UNIX */
    char *user;     /* ACL user, NULL for none */
    char *password; /* NULL for none; never printed */
    int db;         /* SELECT index, 0 by default */
    char *display;  /* "host:port" / "[v6]:port" / path, for messages */
} dlock__endpoint;

/*
 * Parse a server URL:
 *   redis://[user[:password]@]host[:port][/db]
 *   rediss://... (TLS)
 *   unix:///absolute/path[?db=N]   (user/password also allowed:
 *   unix://[user[:password]@]/path)
 * host may be [IPv6]. User and password are percent-decoded. Rejects
 * empty hosts, ports outside 1..65535, db outside 0..2^31-1, unknown
 * schemes, trailing garbage. Returns DLOCK_OK or DLOCK_EINVAL /
 * DLOCK_ENOMEM with a message in err (never containing the password).
 * On failure *ep is left cleared.
 */
int dlock__url_parse(dlock__endpoint *ep, const char *url, char *err,
                     size_t errlen);

/* Free the strings of ep and zero it. Accepts a zeroed endpoint. */
void dlock__endpoint_clear(dlock__endpoint *ep);

/* ---- Sentinel URLs ------------------------------------------------------ */

#define DLOCK__SENTINELS_MAX 16 /* sentinels in one URL */
#define DLOCK__SENTINEL_PORT 26379

/* A parsed redis+sentinel:// or rediss+sentinel:// URL. Strings are
 * malloc'd and owned. */
typedef struct dlock__sentinel_url {
    int n;                                          /* sentinels */
    dlock__endpoint sentinel[DLOCK__SENTINELS_MAX]; /* host, port, display;
                                                       kind TCP or TLS */
    char *master;                                   /* the master's name */
    char *user, *password; /* for the data nodes, NULL for none */
    int db;
    int tls; /* rediss+sentinel: TLS to sentinels and data nodes */
} dlock__sentinel_url;

/* 1 when url starts with redis+sentinel:// or rediss+sentinel:// (any
 * case), else 0. */
int dlock__url_is_sentinel(const char *url);

/*
 * Parse
 *   redis+sentinel://[user[:password]@]HOST[:PORT][,HOST[:PORT]...]/NAME[?db=N]
 *   rediss+sentinel://... (TLS)
 * PORT defaults to 26379; HOST may be [IPv6]; NAME (1 to 255 bytes,
 * percent-decoded, no space or control character) is the master's name
 * as the sentinels know it. The user information is for the data nodes.
 * DLOCK_OK, or DLOCK_EINVAL / DLOCK_ENOMEM with a message in err that
 * never contains the password; on failure *su is left cleared.
 */
int dlock__sentinel_url_parse(dlock__sentinel_url *su, const char *url,
                              char *err, size_t errlen);

/* Free the strings of su and zero it. Accepts a zeroed one. */
void dlock__sentinel_url_clear(dlock__sentinel_url *su);

#endif /* DLOCK_URL_H */
