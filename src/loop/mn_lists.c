/*
 * mn_lists.c - what an engine loop's process looks at of its jobs
 * (multi_node.h), so that its work follows the jobs that may go, not all
 * of them: the ready list (jobs whose calls got something, or whose
 * clock is due), the timer heap of the jobs' wake-up times, the list of
 * the finished jobs to complete. A list that cannot grow (out of memory)
 * says so (l->ready_all, l->fin_all): every job is looked at instead.
 */
#include <stdlib.h>

#include "loop/multi_node.h"

/* See multi_node.h. */
int dloop__jlist_push(mjob ***a, int *n, int *cap, mjob *j)
{
    if (*n == *cap) {
        int c = *cap ? 2 * *cap : 64;
        mjob **p = realloc(*a, (size_t)c * sizeof *p);
        if (p == NULL)
            return 0;
        *a = p;
        *cap = c;
    }
    (*a)[(*n)++] = j;
    return 1;
}

/* See multi_node.h. */
void dloop__jlist_null(mjob **a, int n, const mjob *j)
{
    int i;
    for (i = 0; i < n; i++)
        if (a[i] == j)
            a[i] = NULL;
}

/* See multi_node.h. */
void dloop__jlist_pack(mjob **a, int *n)
{
    int i, m = 0;
    for (i = 0; i < *n; i++)
        if (a[i] != NULL)
            a[m++] = a[i];
    *n = m;
}

/* See multi_node.h. */
void dloop__jready(dlock_loop *l, mjob *j)
{
    if (j->kicked)
        return;
    j->kicked = 1;
    if (!dloop__jlist_push(&l->jready, &l->nready, &l->capready, j))
        l->ready_all = 1; /* every job is looked at */
}

/* See multi_node.h. */
void dloop__jfinish(dlock_loop *l, mjob *j)
{
    j->finished = 1;
    if (!j->infin) {
        if (dloop__jlist_push(&l->jfin, &l->nfin, &l->capfin, j))
            j->infin = 1;
        else
            l->fin_all = 1;
    }
}

/* The timer heap's entries i and k change places. */
static void heap_swap(dlock_loop *l, int i, int k)
{
    struct jwake t = l->jheap[i];
    l->jheap[i] = l->jheap[k];
    l->jheap[k] = t;
    l->jheap[i].j->hidx = i + 1;
    l->jheap[k].j->hidx = k + 1;
}

/* The heap's entry i goes where its wake-up time belongs. */
static void heap_fix(dlock_loop *l, int i)
{
    struct jwake *h = l->jheap;
    while (i > 0 && h[i].wake < h[(i - 1) / 2].wake) {
        heap_swap(l, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
    for (;;) {
        int c = 2 * i + 1;
        if (c >= l->njheap)
            return;
        if (c + 1 < l->njheap && h[c + 1].wake < h[c].wake)
            c++;
        if (h[i].wake <= h[c].wake)
            return;
        heap_swap(l, i, c);
        i = c;
    }
}

/* See multi_node.h. */
void dloop__jheap_put(dlock_loop *l, mjob *j)
{
    if (j->hidx == 0) {
        if (l->njheap == l->capjheap) {
            int cap = l->capjheap ? 2 * l->capjheap : 64;
            struct jwake *p = realloc(l->jheap, (size_t)cap * sizeof *p);
            if (p == NULL) {
                l->ready_all = 1;
                return;
            }
            l->jheap = p;
            l->capjheap = cap;
        }
        l->jheap[l->njheap].j = j;
        j->hidx = ++l->njheap;
    }
    l->jheap[j->hidx - 1].wake = j->wake;
    heap_fix(l, j->hidx - 1);
}

/* See multi_node.h. */
void dloop__jheap_del(dlock_loop *l, mjob *j)
{
    int i = j->hidx - 1;
    if (j->hidx == 0)
        return;
    j->hidx = 0;
    if (i == --l->njheap)
        return;
    l->jheap[i] = l->jheap[l->njheap];
    l->jheap[i].j->hidx = i + 1;
    heap_fix(l, i);
}

/* See multi_node.h. */
void dloop__jheap_due(dlock_loop *l, int i, int64_t now)
{
    if (i >= l->njheap || l->jheap[i].wake > now)
        return;
    dloop__jready(l, l->jheap[i].j);
    dloop__jheap_due(l, 2 * i + 1, now);
    dloop__jheap_due(l, 2 * i + 2, now);
}
