/*
 * th_pairfile.h - the shared resource of the failover mutual-exclusion
 * tests (sentinel.c, cluster_wait.c): a file holding "COUNT TOKEN" that
 * only a lock holder may read-modify-write. A lost update shows as a
 * count below the sum of the holders' own counts, a token that went
 * backwards as a TOKEN not above the last one written (th_pairfile.c).
 */
#ifndef DLOCK_TEST_TH_PAIRFILE_H
#define DLOCK_TEST_TH_PAIRFILE_H

#include <stdint.h>

/* Read path into *count and *tok: 0, or -1 (both 0) when the file is
 * missing or not a pair. */
int th_pair_read(const char *path, long long *count, unsigned long long *tok);

/* Replace path with "count tok" at once (a temp file renamed over it,
 * so a reader never sees half a pair). Errors are ignored: the next
 * read then shows the old pair. */
void th_pair_write(const char *path, long long count, unsigned long long tok);

/* Wait (bounded) until path's count reaches target; the count last
 * read. */
long long th_pair_wait(const char *path, long long target, int64_t timeout_ms);

#endif /* DLOCK_TEST_TH_PAIRFILE_H */
