/*
 * url.h - server URLs (redis://, rediss://, unix://) parsed into the
 * endpoint the transport connects to (url.c). Above util.h only.
 */
#ifndef DLOCK_URL_H
#define DLOCK_URL_H

#include <stddef.h>

#include "util.h"

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

#endif /* DLOCK_URL_H */
