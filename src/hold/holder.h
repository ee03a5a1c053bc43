/*
 * holder.h - holder info (holder.c): who holds a lock, recorded beside it
 * in <prefix>:{<name>}:i by clients that ask for it (holder_info in
 * dlock_options), renewed with the lease, read by inspect. Lock layer,
 * above core.h.
 */
#ifndef DLOCK_HOLDER_H
#define DLOCK_HOLDER_H

#include <hiredis/hiredis.h>
#include <stddef.h>

#include "hold/core.h"
#include "hold/held.h"

/* The suffix of the info key after "<prefix>:{<name>}". */
#define DLOCK__HOLDER_SUFFIX ":i"

/* Check and copy the holder options of o into c (host name, pid, label)
 * when o->holder_info is set; c->holder stays NULL otherwise. DLOCK_OK,
 * DLOCK_EINVAL (label too long) or DLOCK_ENOMEM, message in err. */
int dlock__holder_init(dlock_client *c, const dlock_options *o, char *err,
                       size_t errlen);

/* Free what dlock__holder_init made. Accepts a client without it. */
void dlock__holder_free(dlock_client *c);

/* 1 when c records holder info. */
int dlock__holder_on(const dlock_client *c);

/* The info key of lock key KEY (KEYLEN bytes) into buf (KEYLEN + 3 bytes
 * at least); returns its length. */
size_t dlock__holder_key(char *buf, const char *key, size_t keylen);

/* holder_set.lua for the hold of keys k by owner, into b, for a client
 * that records holder info (c->holder set). ikey: room for the info key
 * (k->keylen + sizeof DLOCK__HOLDER_SUFFIX bytes), which b refers to. */
void dlock__holder_set_cmd(const dlock_client *c, dlock__cmdbuf *b,
                           const dlock__keys *k, char *ikey, const char *owner);

/* After a fresh acquisition of h: record the holder info on the nodes
 * that granted it (one round trip), when c records it. Best effort: the
 * lock is held whatever happens here; a failure leaves no info (status
 * tools then show none) and no message. */
void dlock__holder_record(dlock_client *c, const dlock__held *h);

/* Fill the holder fields of *out from the fields and values of an info
 * hash (inspect.lua's fifth element, "age" included); leaves them empty
 * for an empty or malformed array. */
void dlock__holder_parse(const redisReply *r, dlock_info *out);

#endif /* DLOCK_HOLDER_H */
