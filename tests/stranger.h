/*  stranger.h: a stranger on the data plane, for the tests.

    A libfabric peer (tcp provider, 127.0.0.1) with no session: it knows a
    target's endpoint address (read from the target's blob, as an observer
    of the control plane or a port scan would) but not its registration
    key, and writes one block at a time into the target's registered pool
    under keys it guesses.  The caller keeps the target progressing (the
    stranger calls progress(arg) while it waits) and checks afterwards that
    nothing of the stranger's landed: the target's bytes and its landed
    counters.  Used by test_ofi (with the right key as a control, so the
    check is shown to be able to fail) and by the hardening suite.
*/
#ifndef PK_TEST_STRANGER_H_INCLUDED
#define PK_TEST_STRANGER_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

typedef struct _ts_stranger_t ts_stranger_t;

typedef void (ts_progress_fn)(void *arg);

/*  A stranger whose writes carry fill in every byte and immediate data
    (round tag 1, one block), aimed at the address in blob.  NULL with err
    when its fabric cannot open or the blob is refused.  */
ts_stranger_t *ts_stranger_new(const uint8_t *blob, size_t len, uint64_t block_len,
                               uint8_t fill, char *err);
void ts_stranger_destroy(ts_stranger_t **self_p);

/*  The key the blob announced (for the control: a write under it lands).  */
uint64_t ts_stranger_blob_key(const ts_stranger_t *self);

/*  n writes of one block each, to block (i % blocks) of the target, under
    keys[i]; each waits for its completion (or error), at most timeout
    seconds in all.  Returns how many the stranger's side saw complete
    without error (over tcp a write completes at the writer once sent, so
    this says nothing about landing); -ETIMEDOUT when time ran out.  */
int64_t ts_stranger_write(ts_stranger_t *self, const uint64_t *keys, size_t n, uint64_t blocks,
                          double timeout, ts_progress_fn *progress, void *arg);

/*  Keys a stranger would try: count of them counting up from 1, then
    count random ones (libsodium).  malloc'd, 2 * count items.  */
uint64_t *ts_guessed_keys(size_t count);

#endif
