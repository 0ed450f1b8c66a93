/*  err.h: the one error convention of p2pkv.

    Functions return 0 (or a count) on success and a negative errno on
    failure.  Where a caller needs to know why, it passes err, a buffer of
    PK_ERRLEN bytes (or NULL), which the failing function fills with one
    sentence naming what was wrong: the field, the argument, the peer.
    Constructors return NULL on failure, with *rc_p (may be NULL) set to
    the negative errno and err to the sentence.  One length everywhere, so
    a message can be passed up a layer without being cut.
*/
#ifndef PK_ERR_H_INCLUDED
#define PK_ERR_H_INCLUDED

#include <stddef.h>

#define PK_ERRLEN 256

/*  Formats into err (PK_ERRLEN bytes; nothing when err is NULL) and
    returns rc, so a failure reads "return pk_err(err, -EINVAL, ...)".  */
int pk_err(char *err, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*  Sets *rc_p (when not NULL) and returns NULL: a constructor's failure.  */
void *pk_err_null(int *rc_p, int rc);

#endif
