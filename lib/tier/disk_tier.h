/*  disk_tier.h: the disk tier under the pool (--spill-dir, --spill-size;
    the store's seam, store/tier.h).

    Blocks the pool evicts go to one data file in the spill directory,
    p2pkv-spill.data, cut into slots of a 4 KiB header and the block
    (rounded up to 4 KiB): SIZE / slot bytes of them, reused least
    recently used first.  Not a file per block: one open file, one
    descriptor, offsets the tier computes, and a slot's header says whose
    bytes it holds (its key and namespace, the block's checksum, the
    slot's generation, the server's identity, its own place, and a MAC
    of all that under config->key, spill_key.h), so a slot is checked
    whole when it is read back, and one changed on disk without the key
    does not check.  The index
    (key -> slot) and the LRU are in memory.

    Nothing the store calls waits for the disk.  An eviction copies the
    block into a bounded staging queue (one memcpy under the store's
    lock) that a writer thread of the tier writes out; with the queue
    full the block is dropped and counted, the store never waits.  A
    lookup of a spilled key queues its read (promote) and answers
    HIT_PENDING; at the kick that ends the lookups' pass, a reader thread
    reads every slot asked since its last batch together (preadv one after the other, or one io_uring submit:
    disk_io.h), checks each against its header and its checksum, and
    lands it through the store's ordinary write path (pk_store_reserve
    under PK_STORE_OWNER_TIER, a copy, pk_store_commit_sums with the
    checksum handed at eviction).  A slot that does not check is a miss,
    counted (corrupt), never bytes served.  Then config->landed is told,
    once per batch, so the daemon wakes the lookups parked on it at once.

    A server started again on the same file (the same size) takes back
    every slot whose header checks and is its own (the same identity:
    peer id, block length, fingerprint, hash seed, namespaces; not the
    start's instance), the later of two copies of one key; the rest are
    dropped, counted (refused); a clean stop writes the pool's blocks out
    first (pk_disk_tier_flush).  A dropped key's header is zeroed, so it
    never comes back.  A slot torn by a crash fails its bytes' check when
    read back: a miss, never bytes served.

    The first write the disk refuses (ENOSPC, EIO) turns the writes off
    for the tier's life, said once through config->log; what it holds is
    still read back.

    Keys longer than PK_DISK_TIER_MAX_KEY bytes are not spilled (counted
    as dropped, and as too_long): the index keeps each slot's key inline,
    so a slot's index entry is a fixed 260 bytes, and 256 bytes hold the
    keys the engines here make (a hash of a prefix's tokens, with a model
    and a layer's name).
*/
#ifndef PK_DISK_TIER_H_INCLUDED
#define PK_DISK_TIER_H_INCLUDED

#include "base/counts.h"
#include "store/store.h"
#include "tier/spill_key.h"

#include <stdbool.h>
#include <stdint.h>

#define PK_DISK_TIER_MAX_KEY 256

/*  The data file's name in the spill directory.  */
#define PK_DISK_TIER_FILE "p2pkv-spill.data"

/*  A slot's header on disk (the block follows it).  */
#define PK_DISK_TIER_HEADER 4096

/*  The tier's counts, each with its metric (base/counts.h,
    metric_families.h); read by pk_disk_tier_stats.  */
#define PK_DISK_TIER_COUNTS(M, F) \
    M(blocks, SPILL_BLOCKS, "p2pkv_spill_blocks", GAUGE, \
      "Blocks held in the disk tier (--spill-dir)", NONE) \
    M(bytes, SPILL_BYTES, "p2pkv_spill_bytes", GAUGE, \
      "Bytes of blocks held in the disk tier", NONE) \
    M(writes, SPILL_WRITES, "p2pkv_spill_writes_total", COUNTER, \
      "Blocks the pool evicted and the disk tier wrote out", NONE) \
    M(reads, SPILL_READS, "p2pkv_spill_reads_total", COUNTER, \
      "Blocks read back from the disk tier and landed in the pool", NONE) \
    M(corrupt, SPILL_CORRUPT, "p2pkv_spill_corrupt_total", COUNTER, \
      "Blocks read back whose header or bytes did not match their checksum (a miss, " \
      "never served)", NONE) \
    M(dropped, SPILL_DROPPED, "p2pkv_spill_dropped_total", COUNTER, \
      "Evicted blocks the disk tier did not keep: its staging queue full, every slot busy, " \
      "a key too long, or its writes off", NONE) \
    M(write_errors, SPILL_WRITE_ERRORS, "p2pkv_spill_write_errors_total", COUNTER, \
      "Writes the disk refused (ENOSPC, EIO); the first turns the tier's writes off", NONE) \
    M(too_long, SPILL_TOO_LONG, "p2pkv_spill_too_long_total", COUNTER, \
      "Evicted blocks not spilled because their key is longer than 256 bytes (the tier's " \
      "index keeps keys inline); counted in p2pkv_spill_dropped_total too", NONE) \
    M(evictions, SPILL_EVICTIONS, "p2pkv_spill_evictions_total", COUNTER, \
      "Blocks the disk tier evicted, least recently used, for newer ones", NONE) \
    M(off, SPILL_OFF, "p2pkv_spill_off", GAUGE, \
      "1 once a write error turned the disk tier's writes off", NONE) \
    M(refused, SPILL_REFUSED, "p2pkv_spill_refused_total", COUNTER, \
      "Slots found at start whose header did not check (another server's identity or " \
      "block length, torn, damaged): dropped, never served", NONE) \
    F(recovered)                    /* slots found at start and held again */ \
    F(slots)                        /* the data file's slots */ \
    F(staged)                       /* blocks in the staging queue now */ \
    F(promotions)                   /* reads asked (promote) */ \
    F(read_us)                      /* promote to landed, summed over reads, in us */

typedef struct {
    PK_DISK_TIER_COUNTS(PK_COUNT_FIELD, PK_COUNT_FIELD_ONLY)
} pk_disk_tier_stats_t;

/*  A warning line (the tier turned its writes off).  */
typedef void (pk_disk_tier_log_fn)(void *arg, const char *line);
/*  A batch of n promotions ended, on the reader's thread, after the
    store's commits: each landed[i] (or not: corrupt, failed, the pool
    full), seconds[i] since its promote.  Once per batch, so that the
    lookups parked on it wake once.  Short: it wakes whoever waits.  */
typedef void (pk_disk_tier_landed_fn)(void *arg, size_t n, const bool *landed,
                                      const double *seconds);

typedef struct {
    const char *dir;                //  the spill directory; must exist
    uint64_t size;                  //  bytes of the data file
    uint64_t identity;              //  this server's (peer id, block length, ...), in
                                    //  each header; a slot of another does not check
    uint8_t key[PK_SPILL_KEY_LEN];  //  the headers' MAC key (spill_key.h): a slot
                                    //  sealed under another does not check
    pk_disk_tier_log_fn *log;
    void *log_arg;
    pk_disk_tier_landed_fn *landed;
    void *landed_arg;
} pk_disk_tier_config_t;

typedef struct _pk_disk_tier_t pk_disk_tier_t;

/*  Opens (creates) the data file in config->dir, sized config->size
    (sparse: the free space is checked now, ENOSPC later is handled),
    locks it against a second server, starts the two threads and puts
    the tier under store (pk_store_set_tier).  NULL with the reason in
    *rc_p and a sentence in err (PK_ERRLEN): -EINVAL when size holds no
    slot, -ENOSPC when the file system has less free than size, -EBUSY
    when another server holds the file, else what stat, open or
    ftruncate said.  */
pk_disk_tier_t *pk_disk_tier_new(const pk_disk_tier_config_t *config, pk_store_t *store,
                                 int *rc_p, char *err);

/*  Takes the tier from under the store (the null tier again), lets the
    writer finish what is staged, stops both threads, closes the file
    (left on disk).  */
void pk_disk_tier_destroy(pk_disk_tier_t **self_p);

/*  A clean stop: every READY block of the pool goes to the staging
    queue as an eviction would (a block the tier holds already, the same
    checksum, costs nothing), waiting for room rather than dropping, and
    then for the writer to be done, until deadline (CLOCK_MONOTONIC
    seconds); what is left then is dropped, counted.  The store's other
    calls wait meanwhile (pk_store_each_ready).  Returns the blocks of
    the pool the tier holds afterwards.  */
size_t pk_disk_tier_flush(pk_disk_tier_t *self, double deadline);

void pk_disk_tier_stats(pk_disk_tier_t *self, pk_disk_tier_stats_t *out);

/*  "pwrite" or "io_uring": how the tier does its I/O (disk_io.h).  */
const char *pk_disk_tier_io_kind(const pk_disk_tier_t *self);

/*  A slot's bytes in the data file: where slot i starts is i times it.  */
uint64_t pk_disk_tier_slot_len(uint64_t block_len);

#endif
