/*  checksum.c: XXH3-64 of a block (checksum.h).  */
#include "base/checksum.h"

#include <xxhash.h>

uint64_t
pk_checksum(const void *data, size_t len)
{
    return (uint64_t) XXH3_64bits(data, len);
}
