/*
 * errors.c - the status texts of dlock.h (one X-macro row per code) and
 * the per-thread message store behind dlock_errmsg(). See errors.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/errors.h"

static const struct {
    int code;
    const char *name;
    const char *text;
} status_table[] = {
#define DLOCK__ROW(name, value, text) {value, #name, text},
    DLOCK_STATUS_LIST(DLOCK__ROW)
#undef DLOCK__ROW
};

/* See dlock.h. */
const char *dlock_strerror(int code)
{
    size_t i;
    for (i = 0; i < sizeof status_table / sizeof status_table[0]; i++)
        if (status_table[i].code == code)
            return status_table[i].text;
    return "unknown status";
}

/* See dlock.h. */
const char *dlock_status_name(int code)
{
    size_t i;
    for (i = 0; i < sizeof status_table / sizeof status_table[0]; i++)
        if (status_table[i].code == code)
            return status_table[i].name;
    return "UNKNOWN";
}

/* 1 when the len bytes at s begin with prefix. */
static int starts(const char *s, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len >= n && memcmp(s, prefix, n) == 0;
}

/* See errors.h. Redis puts the error's class first ("NOPERM ...",
 * "READONLY ...", also when a script's call failed: Redis 7 keeps the
 * called command's code); the ACL's refusal of a key or command inside a
 * script is an "ERR" with its own words. */
int dlock__server_error_code(const char *msg, size_t len)
{
    static const char *const refused_within[] = {
        "ERR The user executing the script can't",
        "ERR unknown command",
        "ERR unknown subcommand",
    };
    size_t i;
    if (msg == NULL)
        return DLOCK_ESERVER;
    if (starts(msg, len, "NOAUTH") || starts(msg, len, "WRONGPASS") ||
        memmem(msg, len, "unauthenticated", 15) != NULL)
        return DLOCK_EAUTH;
    if (starts(msg, len, "NOPERM") || starts(msg, len, "READONLY"))
        return DLOCK_EREFUSED;
    for (i = 0; i < sizeof refused_within / sizeof refused_within[0]; i++)
        if (starts(msg, len, refused_within[i]))
            return DLOCK_EREFUSED;
    return DLOCK_ESERVER;
}

/* One thread's message buffer, linked into its store. */
typedef struct dlock__msgnode {
    struct dlock__msgnode *next, *prev;
    dlock__msgs *m;
    char msg[DLOCK__MSGLEN];
} dlock__msgnode;

/* Thread exit: unlink and free this thread's buffer. */
static void free_node(void *p)
{
    dlock__msgnode *e = p;
    dlock__msgs *m = e->m;
    pthread_mutex_lock(&m->mu);
    if (e->prev != NULL)
        e->prev->next = e->next;
    else
        m->list = e->next;
    if (e->next != NULL)
        e->next->prev = e->prev;
    pthread_mutex_unlock(&m->mu);
    free(e);
}

/* See errors.h. */
int dlock__msgs_init(dlock__msgs *m)
{
    m->list = NULL;
    if (pthread_key_create(&m->key, free_node) != 0)
        return -1;
    pthread_mutex_init(&m->mu, NULL);
    return 0;
}

/* See errors.h. */
void dlock__msgs_destroy(dlock__msgs *m)
{
    pthread_key_delete(m->key);
    while (m->list != NULL) {
        dlock__msgnode *next = m->list->next;
        free(m->list);
        m->list = next;
    }
    pthread_mutex_destroy(&m->mu);
}

/* The buffer of an operation that keeps its own message, or NULL. */
static __thread char *captured;

/* See errors.h. */
char *dlock__msgs_capture(char *buf)
{
    char *prev = captured;
    captured = buf;
    return prev;
}

/* See errors.h. Allocated on first use by each thread. */
char *dlock__msgs_buf(const dlock__msgs *cm)
{
    dlock__msgnode *e;
    if (captured != NULL)
        return captured;
    e = pthread_getspecific(cm->key);
    if (e == NULL) {
        dlock__msgs *m = (dlock__msgs *)cm; /* the list is not API state */
        e = calloc(1, sizeof *e);
        if (e == NULL)
            return NULL;
        e->m = m;
        pthread_mutex_lock(&m->mu);
        e->next = m->list;
        if (m->list != NULL)
            m->list->prev = e;
        m->list = e;
        pthread_mutex_unlock(&m->mu);
        pthread_setspecific(m->key, e);
    }
    return e->msg;
}

/* See errors.h. */
const char *dlock__msgs_peek(const dlock__msgs *m)
{
    const dlock__msgnode *e;
    if (captured != NULL)
        return captured;
    e = pthread_getspecific(m->key);
    return e != NULL ? e->msg : "";
}

/* See errors.h. */
int dlock__msgs_vset(const dlock__msgs *m, int code, const char *fmt,
                     va_list ap)
{
    char *b = dlock__msgs_buf(m);
    if (b != NULL)
        vsnprintf(b, DLOCK__MSGLEN, fmt, ap);
    return code;
}
