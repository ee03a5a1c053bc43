/*
 * script.h - a command's wire form, for the engine (script.c; the script
 * table and the command builder are declared in step.h). Pure.
 */
#ifndef DLOCK_SCRIPT_H
#define DLOCK_SCRIPT_H

#include <stddef.h>

#include "engine/step.h"

/* Arguments held without an allocation: every call but a large renewal
 * batch. */
#define DLOCK__CALLV_SMALL 32

/* The argv of one script call: EVALSHA sha (or EVAL source), numkeys,
 * keys, args. */
typedef struct dlock__callv {
    int argc;
    const char **argv;
    size_t *lens;
    char nkeys[24];
    const char *argv_small[DLOCK__CALLV_SMALL];
    size_t lens_small[DLOCK__CALLV_SMALL];
} dlock__callv;

/* Build cmd's argv in v, by SHA (full 0) or with the source (full 1).
 * v must stay where it is while used. DLOCK_OK or DLOCK_ENOMEM; free it
 * with dlock__callv_free either way. */
int dlock__callv_build(dlock__callv *v, const dlock__script *scripts,
                       const dlock__cmd *cmd, int full);

/* Free what dlock__callv_build allocated. */
void dlock__callv_free(dlock__callv *v);

#endif /* DLOCK_SCRIPT_H */
