/*
 * errors.h - the library's error channel. Inside the library a failure is
 * a status code plus one detail message written where it happened; at the
 * API boundary the message goes to the calling thread's buffer, which
 * dlock_errmsg() returns. This header is that per-thread message store;
 * errors.c also holds the status texts of dlock.h (dlock_strerror).
 * Above util.h only.
 */
#ifndef DLOCK_ERRORS_H
#define DLOCK_ERRORS_H

#include <pthread.h>
#include <stdarg.h>

#include "base/util.h"

/* The per-thread message of dlock_errmsg(): room for several nodes'
 * errors. */
#define DLOCK__MSGLEN 1280

/* One message buffer per thread that ever failed a call, all listed so
 * that the store can free the buffers of threads still alive when it goes
 * (pthread_key_delete runs no destructors). Lives in a dlock_client. */
typedef struct dlock__msgs {
    pthread_key_t key;
    pthread_mutex_t mu;          /* guards list */
    struct dlock__msgnode *list; /* every thread's buffer */
} dlock__msgs;

/* Make the store. 0, or -1 when no thread-specific key is left. */
int dlock__msgs_init(dlock__msgs *m);

/* Free every buffer and the key. */
void dlock__msgs_destroy(dlock__msgs *m);

/* This thread's buffer (DLOCK__MSGLEN bytes), made on first use; NULL
 * when out of memory. The store is not API state: const is fine. */
char *dlock__msgs_buf(const dlock__msgs *m);

/* Send the messages this thread sets from now on (through any store) to
 * buf (DLOCK__MSGLEN bytes; NULL: back to the thread's own buffers), and
 * return the buffer they went to before, to restore it. An operation
 * that keeps its own message (an attempt, hold/attempt.h) runs its steps
 * with it set; the blocking API copies it to the thread's message. */
char *dlock__msgs_capture(char *buf);

/* This thread's message, "" when it has none (allocates nothing). */
const char *dlock__msgs_peek(const dlock__msgs *m);

/* The status for an error reply of a server (msg, len bytes, as Redis
 * sent it): DLOCK_EAUTH for credentials refused (NOAUTH, WRONGPASS, an
 * unauthenticated request), DLOCK_EREFUSED for refusals a retry cannot
 * cure (NOPERM, READONLY, an unknown or disabled command, a script's
 * call the ACL denies), DLOCK_ESERVER for every other error. */
int dlock__server_error_code(const char *msg, size_t len);

/* Format this thread's message and return code. */
int dlock__msgs_vset(const dlock__msgs *m, int code, const char *fmt,
                     va_list ap) __attribute__((format(printf, 3, 0)));

#endif /* DLOCK_ERRORS_H */
