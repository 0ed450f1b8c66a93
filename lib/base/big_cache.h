/*  big_cache.h: large heap blocks kept for the next request of about
    their size.

    A lookup of 65,536 keys takes about 15 MB of blocks for one round trip
    (its frame, its keys' copies, the answer's checksums, the callback's
    copy) and gives them back when it ends.  Under glibc's default policy
    (an engine's: the library sets none of the process's) the heap's free
    top is given back to the kernel past twice the largest block freed, so
    every such lookup faulted its pages in again: per key it cost 4 to 10
    times a lookup of 1,024 keys (design.md, "Lookups linear in their
    keys").  Blocks of PK_BIG_MIN bytes or more freed here are kept,
    resident, at most PK_BIG_KEEP of them and PK_BIG_BYTES in all, and
    handed to the next pk_big_alloc they fit (at most twice its size).

    A block from pk_big_alloc is an ordinary malloc'd block (free and
    realloc take it); any malloc'd block may go to pk_big_free.
    Thread-safe.  */
#ifndef PK_BIG_CACHE_H_INCLUDED
#define PK_BIG_CACHE_H_INCLUDED

#include <stddef.h>

#define PK_BIG_MIN   (128u << 10)       //  glibc maps blocks this large by default
#define PK_BIG_KEEP  12
#define PK_BIG_BYTES (32u << 20)

/*  malloc(n), from the kept blocks when one fits.  */
void *pk_big_alloc(size_t n);
/*  calloc(n, size), likewise (a kept block is cleared).  */
void *pk_big_calloc(size_t n, size_t size);
/*  free(p), or p kept for a later pk_big_alloc.  */
void pk_big_free(void *p);
/*  Frees every kept block (a client going away).  */
void pk_big_trim(void);
/*  The bytes kept now.  */
size_t pk_big_kept(void);

#endif
