/*  engine.c: the engine handle: open (describe, then map the pool),
    close, the pool, this handle's reservations and p2pkv_engine_write.
    The commands are in commands.c, the socket and events in link.c.
*/
#include "engine/engine_internal.h"
#include "wire/czmq_setup.h"
#include "base/err.h"
#include "base/key.h"
#include "base/checksum.h"
#include "base/clock.h"
#include "base/local_path.h"
#include "wire/protocol.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(P2PKV_ENGINE_MAX_KEY == PK_MAX_KEY_BYTES, "the server's key limit");
_Static_assert(P2PKV_ENGINE_MAX_LIST == PK_MAX_LIST, "the server's list limit");

#define S_DEFAULT_TIMEOUT 10.0
#define S_LEASE_SHARE 0.9       //  of a reservation's lease, for writes to start in

//  A string of describe's answer into a field of info: 0, or -EPROTO.
static int
s_copy(char *dst, size_t size, const json_t *answer, const char *name, char *err)
{
    const char *v = json_string_value(json_object_get(answer, name));
    if (!v || !*v || strlen(v) >= size)
        return pk_err(err, -EPROTO, "describe: the server's \"%s\" is missing or too long", name);
    memcpy(dst, v, strlen(v) + 1);
    return 0;
}

static int
s_info(p2pkv_engine_t *self, const json_t *d, char *err)
{
    p2pkv_engine_info_t *info = &self->info;
    int rc = s_copy(info->peer_id, sizeof info->peer_id, d, "peer_id", err);
    if (!rc)
        rc = s_copy(info->endpoint, sizeof info->endpoint, d, "endpoint", err);
    if (!rc)
        rc = s_copy(info->pool_name, sizeof info->pool_name, d, "pool_name", err);
    json_int_t nb = json_integer_value(json_object_get(d, "num_blocks"));
    json_int_t bl = json_integer_value(json_object_get(d, "block_len"));
    if (!rc && (nb <= 0 || (uint64_t) nb > PK_MAX_NUM_BLOCKS || bl <= 0
                || (uint64_t) bl > SIZE_MAX / (uint64_t) nb))
        rc = pk_err(err, -EPROTO, "describe: the server's pool of %lld x %lld bytes is not "
                    "a pool this process can map", (long long) nb, (long long) bl);
    info->num_blocks = (uint64_t) nb;
    info->block_len = (uint64_t) bl;
    //  absent from a server older than the rule: nothing to name, and
    //  nothing checked
    const json_t *inst = json_object_get(d, "instance");
    //  the same for the lease: without it, writes are not timed
    const json_t *lease = json_object_get(d, "lease_timeout");
    self->lease = json_is_number(lease) && json_number_value(lease) > 0
                  ? json_number_value(lease) : 0;
    if (!rc && inst)
        rc = s_copy(self->instance, sizeof self->instance, d, "instance", err);
    return rc;
}

//  The server's pool, mapped read-write; it must be as large as it said.
static int
s_map(p2pkv_engine_t *self, char *err)
{
    const char *name = self->info.pool_name;
    size_t len = (size_t) (self->info.num_blocks * self->info.block_len);
    int rc, fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return pk_err(err, -errno, "pool_name: cannot open the pool \"%s\": %s", name,
                      strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0 || (uint64_t) st.st_size < (uint64_t) len) {
        rc = pk_err(err, -EPROTO, "pool_name: the pool \"%s\" has %lld bytes, the server "
                    "said %zu", name, (long long) st.st_size, len);
        goto undo_fd;
    }
    //  The server reserves its pool's memory before it says ready
    //  (store/pool.c), so every page exists and no write of ours can SIGBUS.
    //  A pool with fewer bytes allocated than its size (a server before
    //  that rule) is reserved here, or refused: an error now, not a
    //  SIGBUS at the first block there is no room for.  Costs nothing
    //  when the server did it (the fstat above says so).
    if ((uint64_t) st.st_blocks * 512 < (uint64_t) len) {
        int e;
        do
            e = posix_fallocate(fd, 0, (off_t) len);
        while (e == EINTR);
        if (e) {
            rc = pk_err(err, -e, "pool_name: cannot reserve the pool \"%s\"'s %zu bytes "
                        "(its /dev/shm is too small?): %s", name, len, strerror(e));
            goto undo_fd;
        }
    }
    void *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        rc = pk_err(err, -errno, "pool_name: cannot map the pool \"%s\": %s", name,
                    strerror(errno));
        goto undo_fd;
    }
    close(fd);                  //  the mapping keeps the object
    self->pool = base;
    self->pool_len = len;
    return 0;

undo_fd:
    close(fd);
    return rc;
}

//  describe, its answer into info, and the mapping: 0 or -errno.
static int
s_attach(p2pkv_engine_t *self, const char *endpoint, char *err)
{
    int rc;
    json_t *d = pk_elink_ask(self, json_pack("{s:s}", "cmd", "describe"), "describe", &rc, err);
    if (rc == -ETIMEDOUT)
        return pk_err(err, rc, "local_endpoint: no answer from \"%.128s\" within %g s (is "
                      "p2pkv-server running with --local there?)", endpoint, self->timeout);
    if (!d)
        return rc;
    rc = s_info(self, d, err);
    json_decref(d);
    if (rc)
        return rc;
    rc = s_map(self, err);
    if (rc)
        return rc;
    self->held = calloc((size_t) (self->info.num_blocks / 8 + 1), 1);
    self->held_at = calloc((size_t) self->info.num_blocks, sizeof *self->held_at);
    if (!self->held || !self->held_at) {
        munmap(self->pool, self->pool_len);
        self->pool = NULL;
        return pk_err(err, -ENOMEM, "out of memory");
    }
    return 0;
}

//  The user the server's socket must belong to: $P2PKV_LOCAL_OWNER (a
//  user name or uid) for a server of another user, else this process's.
static int
s_owner(uid_t *uid_p, char *err)
{
    const char *want = getenv("P2PKV_LOCAL_OWNER");
    *uid_p = geteuid();
    if (!want || !*want)
        return 0;
    struct passwd *pw = getpwnam(want);
    char *end;
    unsigned long n = strtoul(want, &end, 10);
    if (pw)
        *uid_p = pw->pw_uid;
    else if (!*end && n < (uid_t) -1)
        *uid_p = (uid_t) n;
    else
        return pk_err(err, -EINVAL, "P2PKV_LOCAL_OWNER: no user \"%.64s\" on this host", want);
    return 0;
}

//  The server's socket file, checked (local_path.h) once it is there: an
//  engine may start before its server, and used to wait for it up to
//  timeout (ZeroMQ connects when the file appears); it still does, looking
//  every 10 ms, so that the socket is checked before anything connects.
static int
s_await_socket(const char *file, uid_t owner, double timeout, char *err)
{
    double deadline = pk_clock_monotonic() + timeout;
    struct stat st;
    while (lstat(file, &st) != 0 && errno == ENOENT) {
        if (pk_clock_monotonic() >= deadline)
            return pk_err(err, -ETIMEDOUT, "local_endpoint: no answer from \"ipc://%.128s\" "
                          "within %g s (is p2pkv-server running with --local there?)", file,
                          timeout);
        usleep(10000);
    }
    return pk_local_check_owner(file, owner, err);
}

p2pkv_engine_t *
p2pkv_engine_open(const char *local_endpoint, double timeout, p2pkv_engine_event_fn *on_event,
                  void *arg, char *err)
{
    pk_czmq_setup();
    //  no endpoint: the server's default, by the rule it follows itself
    char dflt[PK_LOCAL_MAX_PATH + sizeof "ipc://"];
    if (!local_endpoint || !*local_endpoint) {
        if (pk_local_default(NULL, dflt, sizeof dflt) != 0) {
            pk_err(err, -ENAMETOOLONG, "local_endpoint: the default is too long for a "
                   "socket (this host's name is long): name the server's --local");
            return NULL;
        }
        local_endpoint = dflt;
    }
    if (!(timeout > 0)) {
        pk_err(err, -EINVAL, "timeout: expected seconds > 0");
        return NULL;
    }
    uid_t owner;
    const char *file = pk_local_file(local_endpoint);
    if (s_owner(&owner, err) || (file && s_await_socket(file, owner, timeout, err)))
        return NULL;
    p2pkv_engine_t *self = calloc(1, sizeof *self);
    if (!self) {
        pk_err(err, -ENOMEM, "out of memory");
        return NULL;
    }
    self->timeout = timeout;
    self->on_event = on_event;
    self->arg = arg;
    self->owner = owner;
    if (file && !(self->local_file = strdup(file))) {
        pk_err(err, -ENOMEM, "out of memory");
        goto undo_self;
    }
    if (pk_elink_open(self, local_endpoint, err))
        goto undo_self;
    if (s_attach(self, local_endpoint, err))
        goto undo_link;
    self->timeout = S_DEFAULT_TIMEOUT;
    return self;

undo_link:
    pk_elink_close(self);
undo_self:
    free(self->local_file);
    free(self);
    return NULL;
}

void
p2pkv_engine_close(p2pkv_engine_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    p2pkv_engine_t *self = *self_p;
    size_t at = 0;
    for (pk_keymap_entry_t *e; (e = pk_keymap_next(&self->reserved, &at)); )
        free((void *) (uintptr_t) e->b);
    pk_keymap_fini(&self->reserved);
    free(self->sums);
    free(self->summed);
    free(self->held);
    free(self->held_at);
    if (self->pool)
        munmap(self->pool, self->pool_len);
    pk_elink_close(self);
    free(self->local_file);
    free(self);
    *self_p = NULL;
}

const p2pkv_engine_info_t *
p2pkv_engine_info(const p2pkv_engine_t *self)
{
    return self ? &self->info : NULL;
}

uint8_t *
p2pkv_engine_pool(p2pkv_engine_t *self)
{
    return self ? self->pool : NULL;
}

void
p2pkv_engine_set_timeout(p2pkv_engine_t *self, double timeout)
{
    if (self && timeout > 0)
        self->timeout = timeout;
}

int
pk_engine_check_keys(const p2pkv_key_t *keys, size_t n, char *err)
{
    if (!keys)
        return pk_err(err, -EINVAL, "keys: NULL");
    if (n == 0 || n > P2PKV_ENGINE_MAX_LIST)
        return pk_err(err, -EINVAL, "n: %zu keys, expected 1..%d", n, P2PKV_ENGINE_MAX_LIST);
    for (size_t i = 0; i < n; i++)
        if (!keys[i].bytes || keys[i].len == 0 || keys[i].len > P2PKV_ENGINE_MAX_KEY)
            return pk_err(err, -EINVAL, "keys[%zu]: %zu bytes%s, expected 1..%d", i,
                          keys[i].len, keys[i].bytes ? "" : " at NULL", P2PKV_ENGINE_MAX_KEY);
    return 0;
}

json_t *
pk_engine_keys_json(const p2pkv_key_t *keys, size_t n)
{
    json_t *arr = json_array();
    char *hex = malloc(2 * P2PKV_ENGINE_MAX_KEY + 1);
    for (size_t i = 0; arr && hex && i < n; i++) {
        pk_hex_encode(keys[i].bytes, keys[i].len, hex);
        if (json_array_append_new(arr, json_string(hex)) < 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    if (!hex) {
        json_decref(arr);
        arr = NULL;
    }
    free(hex);
    return arr;
}

int
pk_engine_hold(p2pkv_engine_t *self, const p2pkv_key_t *keys, size_t n, const uint32_t *blocks)
{
    if (pk_keymap_reserve(&self->reserved, pk_keymap_size(&self->reserved) + n) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        uint8_t *copy = malloc(keys[i].len);
        if (!copy) {
            pk_engine_unhold(self, keys, i);
            return -ENOMEM;
        }
        memcpy(copy, keys[i].bytes, keys[i].len);
        pk_key_t k = pk_key_make(copy, keys[i].len);
        pk_engine_unhold(self, &keys[i], 1);     //  a lease that ran out, reserved again
        pk_keymap_put(&self->reserved, &k, blocks[i], (uintptr_t) copy);
        self->held[blocks[i] / 8] |= (uint8_t) (1u << (blocks[i] % 8));
    }
    return 0;
}

void
pk_engine_unhold(p2pkv_engine_t *self, const p2pkv_key_t *keys, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        pk_key_t k = pk_key_make(keys[i].bytes, keys[i].len);
        uint64_t block, copy;
        if (!pk_keymap_take(&self->reserved, &k, &block, &copy))
            continue;
        free((void *) (uintptr_t) copy);
        self->held[block / 8] &= (uint8_t) ~(1u << (block % 8));
    }
}

int
p2pkv_engine_write(p2pkv_engine_t *self, uint32_t block, size_t offset, const void *data,
                   size_t len, char *err)
{
    if (!self)
        return pk_err(err, -EINVAL, "self: NULL");
    if (!data && len)
        return pk_err(err, -EINVAL, "data: NULL");
    if (self->restarted)
        return pk_err(err, -ESTALE, "the server restarted; reopen the engine (this handle's "
                      "pool is the old server's)");
    if (block >= self->info.num_blocks || !(self->held[block / 8] & (1u << (block % 8))))
        return pk_err(err, -EINVAL, "block: %u is not reserved by this handle (or is "
                      "committed already)", block);
    if (offset > self->info.block_len)
        return pk_err(err, -EINVAL, "offset: %zu is past the block's %llu bytes", offset,
                      (unsigned long long) self->info.block_len);
    if (len > self->info.block_len - offset)
        return pk_err(err, -EINVAL, "len: %zu bytes at offset %zu overrun the block's %llu",
                      len, offset, (unsigned long long) self->info.block_len);
    //  Past S_LEASE_SHARE of its lease (timed from before the reserve was
    //  asked, so never later than the server's own start of it), the
    //  server may already have freed the block and given it to another
    //  writer, whose committed bytes this copy would change under their
    //  checksum.  The share left is the copy's time to finish: 10% of the
    //  default 30 s lease is 3 s for a copy of one block.
    double age = self->lease > 0 ? pk_clock_monotonic() - self->held_at[block] : 0;
    if (self->lease > 0 && age >= S_LEASE_SHARE * self->lease)
        return pk_err(err, -ETIMEDOUT, "block: %u was reserved %.3f s ago, past %.0f%% of the "
                      "server's %g s lease (--lease-timeout): it may be another writer's now; "
                      "reserve its key again", block, age, S_LEASE_SHARE * 100, self->lease);
    uint8_t *to = self->pool + (size_t) block * self->info.block_len + offset;
    if (offset == 0 && len == self->info.block_len)
        pk_engine_note_sum(self, block, true, pk_checksum_copy(to, data, len));
    else {
        if (len)
            memcpy(to, data, len);
        pk_engine_note_sum(self, block, false, 0);
    }
    return 0;
}

void
pk_engine_note_sum(p2pkv_engine_t *self, uint32_t block, bool whole, uint64_t sum)
{
    uint8_t bit = (uint8_t) (1u << (block % 8));
    if (!whole) {
        //  a partial write leaves what a checksum covered behind: the
        //  server takes the block's own at commit
        if (self->summed)
            self->summed[block / 8] &= (uint8_t) ~bit;
        return;
    }
    //  made at the first whole write: 8 bytes and a bit a block of the pool
    if (!self->summed) {
        self->sums = malloc(self->info.num_blocks * sizeof *self->sums);
        self->summed = calloc((self->info.num_blocks + 7) / 8, 1);
        if (!self->sums || !self->summed) {
            free(self->sums);
            free(self->summed);
            self->sums = NULL;
            self->summed = NULL;
            return;                 //  the server takes the checksums itself
        }
    }
    self->sums[block] = sum;
    self->summed[block / 8] |= bit;
}

bool
pk_engine_take_written(p2pkv_engine_t *self, uint32_t block, uint64_t *sum)
{
    uint8_t bit = (uint8_t) (1u << (block % 8));
    if (!self->summed || !(self->summed[block / 8] & bit))
        return false;
    self->summed[block / 8] &= (uint8_t) ~bit;
    *sum = self->sums[block];
    return true;
}
