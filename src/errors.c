/*
 * errors.c - the status texts of dlock.h (one X-macro row per code) and
 * the per-thread message store behind dlock_errmsg(). See errors.h.
 */
#include <stdio.h>
#include <stdlib.h>

#include "errors.h"

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

/* See errors.h. Allocated on first use by each thread. */
char *dlock__msgs_buf(const dlock__msgs *cm)
{
    dlock__msgnode *e = pthread_getspecific(cm->key);
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
    const dlock__msgnode *e = pthread_getspecific(m->key);
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
