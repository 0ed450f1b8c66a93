/*  checksum.h: the block checksum of the data plane's end-to-end check.

    XXH3-64 (Debian's libxxhash), seed 0, over a block's block_len bytes:
    the store takes it when a block is committed, a lookup answer carries
    it to the consumer, and the consumer checks each block in its own
    memory once it landed (protocol.md section 7, "Block checksums").  It
    detects accidents and writes by anyone who is not the publisher (a
    stranger who observed a key, a bit flipped at rest or on the way); it
    is not a signature, as the server that sends the checksum is the one
    the consumer trusts for the bytes.  It runs at about 39 GB/s a core
    here (checksum.c), faster than the copies that land the blocks.
*/
#ifndef PK_CHECKSUM_H_INCLUDED
#define PK_CHECKSUM_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

uint64_t pk_checksum(const void *data, size_t len);

/*  Copies len bytes from src to dst and returns pk_checksum of them,
    hashed 64 KiB at a time right behind the copy, while each piece is
    still in the first levels of cache: a 1 MiB block copied then hashed
    is read back from further out (checksum.c).  */
uint64_t pk_checksum_copy(void *dst, const void *src, size_t len);

/*  A checksum as the wire writes it: 16 lowercase hex characters, most
    significant first, then a NUL (out: 17 bytes).  */
void pk_checksum_hex(uint64_t sum, char *out);
/*  The 16 characters at hex (not NUL-terminated) back: 0, or -EINVAL
    when they are not lowercase hex.  */
int pk_checksum_parse(const char *hex, uint64_t *sum);

#endif
