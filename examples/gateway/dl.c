/*
 * dl.c - the gateway's de-duplication on libdlock's event-loop API
 * (include/dlock_loop.h, issue 30). Not written yet: the API is not in
 * this tree. --impl dlock says so and the gateway exits 1; it never
 * falls back to something else.
 */
#include "gateway.h"

#include <stdio.h>

gw_backend *gw_dlock_new(uv_loop_t *loop, const gw_config *cfg, char *err,
                         size_t errlen)
{
    (void)loop;
    (void)cfg;
    snprintf(err, errlen,
             "--impl dlock: libdlock's event-loop API (dlock_loop.h) is "
             "not in this build yet; --impl floor runs the hiredis floor");
    return NULL;
}
