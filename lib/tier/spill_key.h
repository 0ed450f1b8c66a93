/*  spill_key.h: the secret that keys the disk tier's check of what it
    reads back (--spill-key FILE; disk_tier.h).

    Each slot's header carries a MAC (keyed BLAKE2b, libsodium's
    crypto_generichash) of the header, its slot and so of the block's
    checksum it names, under a 32-byte key kept outside the spill
    directory.  Without it a writer of the spill directory who changed a
    block and recomputed its header's checksum had it served after a
    restart; with it, the changed header does not check (refused at
    start), and changed bytes alone fail the checksum the MAC vouches for
    (corrupt at read back).

    The key is a file of exactly 32 bytes, mode 0600 (refused if group or
    others may read or write it, or if it is not a regular file); the
    server makes it, random, at its first start when it is not there
    (and its directory, mode 0700, when that is missing).  Its default
    place is the user's state directory: $XDG_STATE_HOME/p2pkv/spill.key,
    else $HOME/.local/state/p2pkv/spill.key.
*/
#ifndef PK_SPILL_KEY_H_INCLUDED
#define PK_SPILL_KEY_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#define PK_SPILL_KEY_LEN 32

/*  The default key file's path into path (size bytes): 0, or -ENOENT
    when neither XDG_STATE_HOME nor HOME is set, -ENAMETOOLONG.  */
int pk_spill_key_default_path(char *path, size_t size);

/*  Reads the key at path into key, or makes it there (random, 0600) when
    the file does not exist.  0, or a negative errno with a sentence in
    err (PK_ERRLEN) naming what is wrong: -EINVAL (not 32 bytes, not a
    regular file), -EPERM (group or others may read or write it), else
    what open, read or write said.  */
int pk_spill_key_load(const char *path, uint8_t key[PK_SPILL_KEY_LEN], char *err);

#endif
