/*  miss_reason.c: the names and wire letters of the miss reasons
    (miss_reason.h).  */
#include "base/miss_reason.h"

#include <string.h>

static const char *const s_names[PK_MISS_COUNT] = {
    "unknown", "absent", "evicted", "pending", "quota", "writing", "draining"
};

//  One letter each, in enum order: the wire's alphabet.
static const char s_letters[PK_MISS_COUNT + 1] = "uaepqwd";

const char *
pk_miss_reason_name(pk_miss_reason_t reason)
{
    return (unsigned) reason < PK_MISS_COUNT ? s_names[reason] : "unknown";
}

char
pk_miss_reason_letter(pk_miss_reason_t reason)
{
    return (unsigned) reason < PK_MISS_COUNT ? s_letters[reason] : 0;
}

int
pk_miss_reason_of_letter(char letter)
{
    const char *at = letter ? strchr(s_letters, letter) : NULL;
    return at ? (int) (at - s_letters) : -1;
}
