/*  err.c: the error convention's two helpers.  */
#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>

int
pk_err(char *err, int rc, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, PK_ERRLEN, fmt, ap);
        va_end(ap);
    }
    return rc;
}

void *
pk_err_null(int *rc_p, int rc)
{
    if (rc_p)
        *rc_p = rc;
    return NULL;
}
