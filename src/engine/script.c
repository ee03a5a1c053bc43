/*
 * script.c - the scripts and the commands that run them: the script
 * table (one X-macro in step.h) with each script's SHA1, the command
 * builder (dlock__cmdbuf), and a command's wire form (EVALSHA or EVAL,
 * then its keys and arguments) that the engine (call.c) writes. Pure:
 * no connection, no node.
 */
#include <assert.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/script.h"

/* The sources, in DLOCK__S_* order. */
static const char *const script_src[DLOCK__S_COUNT] = {
#define DLOCK__SRC(id, file) dlock__lua_##file,
    DLOCK__SCRIPT_LIST(DLOCK__SRC)
#undef DLOCK__SRC
};

/* See step.h. */
void dlock__scripts_init(dlock__script *scripts)
{
    int i;
    for (i = 0; i < DLOCK__S_COUNT; i++) {
        scripts[i].src = script_src[i];
        dlock__sha1_hex(script_src[i], scripts[i].sha);
    }
}

/* SHA1 of a script as 40 hex digits (what EVALSHA wants). */
void dlock__sha1_hex(const char *src, char out[41])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0, i;
    EVP_Digest(src, strlen(src), md, &len, EVP_sha1(), NULL);
    for (i = 0; i < len && i < 20; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
    out[40] = '\0';
}

/* See step.h. */
void dlock__cmd_begin(dlock__cmdbuf *b, int script)
{
    b->cmd = (dlock__cmd){.script = script,
                          .keys = b->key,
                          .keylens = b->keylen,
                          .args = b->arg,
                          .arglens = b->arglen};
    b->nnum = 0;
}

/* See step.h. */
void dlock__cmd_key(dlock__cmdbuf *b, const char *key, size_t len)
{
    assert(b->cmd.nkeys < DLOCK__CMD_KEYS);
    b->key[b->cmd.nkeys] = key;
    b->keylen[b->cmd.nkeys++] = len;
}

/* See step.h. */
void dlock__cmd_arg(dlock__cmdbuf *b, const char *arg, size_t len)
{
    assert(b->cmd.nargs < DLOCK__CMD_ARGS);
    b->arg[b->cmd.nargs] = arg;
    b->arglen[b->cmd.nargs++] = len;
}

/* See step.h. Formatted without snprintf: on every request's path. */
void dlock__cmd_arg_i64(dlock__cmdbuf *b, int64_t v)
{
    char *p;
    assert(b->nnum < DLOCK__CMD_ARGS);
    p = b->num[b->nnum++];
    dlock__cmd_arg(b, p, dlock__fmt_i64(p, v));
}

/* See step.h. */
void dlock__cmd_arg_u64(dlock__cmdbuf *b, uint64_t v)
{
    char *p;
    size_t n;
    assert(b->nnum < DLOCK__CMD_ARGS);
    p = b->num[b->nnum++];
    n = dlock__fmt_u64(p, v);
    p[n] = '\0';
    dlock__cmd_arg(b, p, n);
}

/* See script.h. */
int dlock__callv_build(dlock__callv *v, const dlock__script *scripts,
                       const dlock__cmd *cmd, int full)
{
    const dlock__script *s = &scripts[cmd->script];
    int i, k = 0;
    v->argc = cmd->raw ? cmd->nkeys + cmd->nargs : 3 + cmd->nkeys + cmd->nargs;
    if (v->argc <= DLOCK__CALLV_SMALL) {
        v->argv = v->argv_small;
        v->lens = v->lens_small;
    } else {
        v->argv = malloc((size_t)v->argc * sizeof *v->argv);
        v->lens = malloc((size_t)v->argc * sizeof *v->lens);
        if (v->argv == NULL || v->lens == NULL) {
            free(v->argv);
            free(v->lens);
            v->argv = NULL;
            v->lens = NULL;
            return DLOCK_ENOMEM;
        }
    }
    if (cmd->raw) {
        /* A plain command: its name (args[0]), the keys, the rest. */
        v->argv[k] = cmd->args[0];
        v->lens[k++] = cmd->arglens[0];
    } else {
        v->argv[k] = full ? "EVAL" : "EVALSHA";
        v->lens[k++] = full ? 4 : 7;
        v->argv[k] = full ? s->src : s->sha;
        v->lens[k++] = full ? strlen(s->src) : 40;
        v->argv[k] = v->nkeys;
        v->lens[k++] = dlock__fmt_i64(v->nkeys, cmd->nkeys);
    }
    for (i = 0; i < cmd->nkeys; i++, k++) {
        v->argv[k] = cmd->keys[i];
        v->lens[k] = cmd->keylens[i];
    }
    for (i = cmd->raw ? 1 : 0; i < cmd->nargs; i++, k++) {
        v->argv[k] = cmd->args[i];
        v->lens[k] = cmd->arglens[i];
    }
    return DLOCK_OK;
}

/* See script.h. */
void dlock__callv_free(dlock__callv *v)
{
    if (v->argv != v->argv_small) {
        free(v->argv);
        free(v->lens);
    }
    v->argv = NULL;
    v->lens = NULL;
}
