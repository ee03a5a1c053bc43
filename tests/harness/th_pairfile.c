/*
 * th_pairfile.c - the "COUNT TOKEN" resource file of the failover tests
 * (see th_pairfile.h).
 */
#include "th_pairfile.h"

#include <stdio.h>
#include <unistd.h>

#include "harness.h"

int th_pair_read(const char *path, long long *count, unsigned long long *tok)
{
    FILE *f = fopen(path, "r");
    int ok;
    *count = 0;
    *tok = 0;
    if (f == NULL)
        return -1;
    ok = fscanf(f, "%lld %llu", count, tok) == 2;
    fclose(f);
    return ok ? 0 : -1;
}

void th_pair_write(const char *path, long long count, unsigned long long tok)
{
    char tmp[1100];
    FILE *f;
    snprintf(tmp, sizeof tmp, "%s.%d", path, (int)getpid());
    f = fopen(tmp, "w");
    if (f == NULL)
        return;
    fprintf(f, "%lld %llu\n", count, tok);
    fclose(f);
    rename(tmp, path);
}

long long th_pair_wait(const char *path, long long target, int64_t timeout_ms)
{
    long long n = 0;
    unsigned long long t;
    int64_t end = th_now_ms() + timeout_ms;
    do {
        th_pair_read(path, &n, &t);
        if (n >= target)
            break;
        th_sleep_ms(50);
    } while (th_now_ms() < end);
    return n;
}
