/*  test_client_role.c: the consumer's role, with a virtual clock, a
    recording sender, a scripted landed count, a recorded cut-off and
    recorded "round over" calls (forget).
*/
#include "roles/client_role.h"
#include "base/miss_reason.h"
#include "testutil.h"

#include <errno.h>
#include <string.h>

typedef struct {
    double now;
    pk_client_role_t *role;
    //  sent messages: type, kv, round, key count, the first key bytes
    struct { pk_msg_type_t type; char kv[16]; uint64_t round; size_t n; uint8_t keys[8];
             char offer[32]; } sent[32];
    int nsent;
    uint64_t landed[64];
    bool cut;
    //  forget calls: the round, and how many loads had ended before it
    struct { uint64_t round; int ndone_before; } forgot[16];
    int nforgot;
    //  events
    struct { uint64_t id; pk_load_status_t status; bool cut_before; char reason[96]; } done[16];
    int ndone;
    int lookups_done;
    uint64_t last_lookup_round;
    //  every lookup_done: kv, round, keys (their one byte), hits
    struct {
        char kv[16];
        uint64_t round;
        size_t n;
        uint8_t keys[8];
        bool hits[8];
        uint64_t sums[8];           //  0 each without checksums
        bool has_sums;
        uint8_t reasons[8];         //  0 each without reasons
        bool has_reasons;
        bool unanswered;            //  hits NULL: the server went away
    } answers[8];
    uint8_t bytes[16];
    //  a channel of rails: counts per rail of the one round asked (0: none)
    size_t nrails;
    uint64_t rail_landed[2];
    uint64_t rail_slices[2];        //  slices per rail (capability slices)
    //  revoke_rail calls: the rail, and how many loads had ended before it
    struct { size_t rail; int ndone_before; } revoked[4];
    int nrevoked;
    //  rail offers made (capability rejoin), and whether they fail
    size_t offered[4];
    int noffered;
    bool offer_fails;
} s_h_t;

static s_h_t *H;

static double
s_now(void *a)
{
    return H->now;
}

static void
s_send(void *a, const pk_msg_t *m)
{
    ck_assert_int_lt(H->nsent, 32);
    //  every message the role sends is a valid frame once epochs are added
    static const uint8_t e1[PK_EPOCH_LEN] = { 1 }, e2[PK_EPOCH_LEN] = { 2 };
    pk_msg_t copy = *m;
    pk_msg_set_epochs(&copy, e1, e2);
    char *text = NULL, err[PK_ERRLEN] = "";
    ck_assert_msg(pk_msg_encode(&copy, &text, NULL, err) == 0, "invalid frame: %s", err);
    free(text);
    H->sent[H->nsent].type = m->type;
    snprintf(H->sent[H->nsent].kv, sizeof H->sent[0].kv, "%s", m->kv_request_id);
    H->sent[H->nsent].round = m->round_seq;
    H->sent[H->nsent].n = m->keys.count;
    snprintf(H->sent[H->nsent].offer, sizeof H->sent[0].offer, "%s",
             m->present & PK_BIT(PK_F_RAIL_OFFER) ? m->rail_offer : "");
    for (size_t i = 0; i < m->keys.count && i < 8; i++)
        H->sent[H->nsent].keys[i] = m->keys.v[i].bytes[0];
    H->nsent++;
}

static uint64_t
s_landed(void *a, uint64_t round)
{
    return H->cut ? 0 : H->landed[round % 64];
}

static size_t
s_landed_rails(void *a, uint64_t round, uint64_t *counts, size_t cap)
{
    (void) round;
    for (size_t i = 0; i < H->nrails && i < cap; i++)
        counts[i] = H->cut ? 0 : H->rail_landed[i];
    return H->nrails;
}

static size_t
s_landed_slices(void *a, uint64_t round, uint64_t *counts, size_t cap)
{
    (void) round;
    for (size_t i = 0; i < H->nrails && i < cap; i++)
        counts[i] = H->cut ? 0 : H->rail_slices[i];
    return H->nrails;
}

static void
s_cut(void *a)
{
    H->cut = true;
}

static void
s_forget(void *a, uint64_t round)
{
    ck_assert_int_lt(H->nforgot, 16);
    H->forgot[H->nforgot].round = round;
    H->forgot[H->nforgot].ndone_before = H->ndone;
    H->nforgot++;
}

static void
s_lookup_done(void *a, const char *kv, uint64_t round, const pk_key_t *keys, const bool *hits,
              const uint64_t *sums, const uint8_t *reasons, size_t n)
{
    ck_assert_int_lt(H->lookups_done, 8);
    ck_assert_uint_le(n, 8);
    snprintf(H->answers[H->lookups_done].kv, sizeof H->answers[0].kv, "%s", kv);
    H->answers[H->lookups_done].round = round;
    H->answers[H->lookups_done].n = n;
    H->answers[H->lookups_done].unanswered = hits == NULL;
    for (size_t i = 0; i < n; i++) {
        H->answers[H->lookups_done].keys[i] = keys[i].bytes[0];
        H->answers[H->lookups_done].hits[i] = hits && hits[i];
        H->answers[H->lookups_done].sums[i] = sums ? sums[i] : 0;
        H->answers[H->lookups_done].reasons[i] = reasons ? reasons[i] : 0;
    }
    H->answers[H->lookups_done].has_sums = sums != NULL;
    H->answers[H->lookups_done].has_reasons = reasons != NULL;
    H->lookups_done++;
    H->last_lookup_round = round;
}

static void
s_load_done(void *a, uint64_t id, pk_load_status_t status, const char *reason)
{
    ck_assert_int_lt(H->ndone, 16);
    H->done[H->ndone].id = id;
    H->done[H->ndone].status = status;
    H->done[H->ndone].cut_before = H->cut;
    snprintf(H->done[H->ndone].reason, sizeof H->done[0].reason, "%s", reason);
    H->ndone++;
}

static void
s_revoke_rail(void *a, size_t rail)
{
    (void) a;
    ck_assert_int_lt(H->nrevoked, 4);
    H->revoked[H->nrevoked].rail = rail;
    H->revoked[H->nrevoked].ndone_before = H->ndone;
    H->nrevoked++;
}

static void
s_setup(void)
{
    H = calloc(1, sizeof *H);
    H->now = 50;
    for (int i = 0; i < 16; i++)
        H->bytes[i] = (uint8_t) (0xa0 + i);
    pk_client_role_config_t cfg = { 30, 10, NULL, 1.0 };
    H->role = pk_client_role_new(&cfg, (pk_clock_t) { NULL, s_now }, (pk_sender_t) { NULL, s_send },
                                 (pk_client_transport_t) { .landed = s_landed, .cut_off = s_cut,
                                                           .forget = s_forget,
                                                           .landed_rails = s_landed_rails,
                                                           .revoke_rail = s_revoke_rail,
                                                           .landed_slices = s_landed_slices },
                                 (pk_client_events_t) { NULL, s_lookup_done, s_load_done });
    ck_assert_ptr_nonnull(H->role);
}

static void
s_teardown(void)
{
    pk_client_role_destroy(&H->role);
    free(H);
}

static pk_key_t
K(int i)
{
    return pk_key_make(&H->bytes[i], 1);
}

static pk_msg_t *
s_msg(pk_msg_type_t type, const char *kv, uint64_t round)
{
    pk_msg_t *m = pk_msg_new(type);
    pk_msg_set_string(m, PK_F_KV_REQUEST_ID, kv);
    pk_msg_set_uint(m, PK_F_ROUND_SEQ, round);
    return m;
}

static int
s_deliver(pk_msg_t *m)
{
    int rc = pk_client_role_on_message(H->role, m);
    pk_msg_destroy(&m);
    return rc;
}

//  A lookup_resp for keys K(first_key)...; hit i is bit i of hitbits.
static pk_msg_t *
s_resp_hits(const char *kv, uint64_t round, int n, int first_key, unsigned hitbits)
{
    pk_msg_t *m = s_msg(PK_MSG_LOOKUP_RESP, kv, round);
    pk_key_t keys[8];
    bool hits[8];
    for (int i = 0; i < n; i++) {
        keys[i] = K(first_key + i);
        hits[i] = (hitbits >> i) & 1;
    }
    pk_msg_set_keys(m, keys, (size_t) n);
    pk_msg_set_hits(m, hits, (size_t) n);
    return m;
}

//  The same answer as a server of wire 1.1 sends it to us: no keys, the
//  hits counting them.
static pk_msg_t *
s_keyless(const char *kv, uint64_t round, int n, unsigned hitbits)
{
    pk_msg_t *m = s_resp_hits(kv, round, n, 0, hitbits);
    m->present &= ~PK_BIT(PK_F_KEYS);
    free(m->keys.v);                //  as the decoder leaves it: count only
    m->keys.v = NULL;
    return m;
}

static pk_msg_t *
s_resp(const char *kv, uint64_t round, int n, int first_key)
{
    return s_resp_hits(kv, round, n, first_key, 0xff);
}

static void
s_probe(const char *kv, int first_key, int n)
{
    pk_key_t keys[8];
    for (int i = 0; i < n; i++)
        keys[i] = K(first_key + i);
    ck_assert_int_eq(pk_client_role_probe(H->role, kv, keys, (size_t) n), 0);
}

static int
s_try_fetch(const char *kv, int first_key, int n, uint64_t round)
{
    pk_key_t keys[8];
    uint32_t dest[8];
    for (int i = 0; i < n; i++) {
        keys[i] = K(first_key + i);
        dest[i] = (uint32_t) i;
    }
    uint64_t id = 0;
    return pk_client_role_fetch(H->role, kv, keys, dest, (size_t) n, round, 0, &id);
}

static pk_msg_t *
s_done(const char *kv, uint64_t round, bool success, uint64_t landing)
{
    pk_msg_t *m = s_msg(PK_MSG_TRANSFER_DONE, kv, round);
    pk_msg_set_bool(m, PK_F_SUCCESS, success);
    pk_msg_set_uint(m, PK_F_LANDING, landing);
    return m;
}

static pk_msg_t *
s_ack(const char *kv, uint64_t round, uint64_t landing)
{
    pk_msg_t *m = s_msg(PK_MSG_ABORT_ACK, kv, round);
    pk_msg_set_uint(m, PK_F_LANDING, landing);
    return m;
}

static uint64_t
s_fetch(const char *kv, int first_key, int n, uint64_t round, double deadline)
{
    pk_key_t keys[8];
    uint32_t dest[8];
    for (int i = 0; i < n; i++) {
        keys[i] = K(first_key + i);
        dest[i] = (uint32_t) i;
    }
    uint64_t id = 0;
    ck_assert_int_eq(pk_client_role_fetch(H->role, kv, keys, dest, (size_t) n, round, deadline,
                                          &id), 0);
    return id;
}

//  The clock at t, then a tick: what is due by t happens.
static void
s_tick_at(double t)
{
    H->now = t;
    pk_client_role_tick(H->role);
}

//  n blocks of round counted by the transport, then a tick.
static void
s_land(uint64_t round, uint64_t n)
{
    H->landed[round] = n;
    pk_client_role_tick(H->role);
}

//  ---------------------------------------------------------------------------

START_TEST(test_probes_batched_per_request)
{
    pk_key_t a[3] = { K(0), K(1), K(1) }, b[2] = { K(1), K(2) }, c[1] = { K(3) };
    pk_client_role_probe(H->role, "r1", a, 3);
    pk_client_role_probe(H->role, "r1", b, 2);
    pk_client_role_probe(H->role, "r2", c, 1);
    ck_assert_int_eq(H->nsent, 0);
    pk_client_role_flush(H->role);
    ck_assert_int_eq(H->nsent, 2);
    //  one lookup per request, the keys not yet sent, a fresh round each
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(H->sent[i].type, PK_MSG_LOOKUP);
        if (strcmp(H->sent[i].kv, "r1") == 0)
            ck_assert_uint_eq(H->sent[i].n, 3);
        else
            ck_assert_uint_eq(H->sent[i].n, 1);
    }
    ck_assert_uint_ne(H->sent[0].round, H->sent[1].round);
    pk_key_t d[2] = { K(0), K(4) };
    pk_client_role_probe(H->role, "r1", d, 2);
    pk_client_role_flush(H->role);
    ck_assert_int_eq(H->nsent, 3);
    ck_assert_uint_eq(H->sent[2].n, 1);         //  only the new key
    ck_assert_uint_eq(H->sent[2].round, 3);
    pk_client_role_flush(H->role);
    ck_assert_int_eq(H->nsent, 3);              //  nothing left to send
}
END_TEST

START_TEST(test_lookup_resp_matching_and_stale)
{
    pk_key_t a[2] = { K(0), K(1) };
    pk_client_role_probe(H->role, "r1", a, 2);
    pk_client_role_flush(H->role);
    uint64_t round = H->sent[0].round;
    s_deliver(s_resp("r1", round + 7, 2, 0));    //  a round never asked
    s_deliver(s_resp("r2", round, 2, 0));        //  another request
    ck_assert_int_eq(H->lookups_done, 0);
    s_deliver(s_resp("r1", round, 2, 0));
    ck_assert_int_eq(H->lookups_done, 1);
    ck_assert_uint_eq(H->last_lookup_round, round);
    s_deliver(s_resp("r1", round, 2, 0));        //  answered already: stale
    ck_assert_int_eq(H->lookups_done, 1);
    //  the hits are fetched under the lookup's round, once
    s_fetch("r1", 0, 2, round, 0);
    ck_assert_int_eq(H->sent[1].type, PK_MSG_FETCH);
    ck_assert_uint_eq(H->sent[1].round, round);
    pk_key_t k[1] = { K(0) };
    uint32_t dest[1] = { 0 };
    uint64_t id;
    ck_assert_int_eq(pk_client_role_fetch(H->role, "r1", k, dest, 1, round, 0, &id), -EINVAL);
}
END_TEST

START_TEST(test_landed_only_when_every_block_counted)
{
    uint64_t id = s_fetch("r1", 0, 3, 0, 0);
    uint64_t round = H->sent[0].round;
    ck_assert_uint_eq(round, 1);
    s_deliver(s_done("r1", round, true, 3));
    ck_assert_int_eq(H->ndone, 0);               //  immediates not counted yet
    s_land(round, 2);
    ck_assert_int_eq(H->ndone, 0);
    s_land(round, 3);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_uint_eq(H->done[0].id, id);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_LANDED);
    ck_assert(!H->cut);
    ck_assert_uint_eq(pk_client_role_open_loads(H->role), 0);
}
END_TEST

//  Over rails (capability rails) the answer says each rail's share: the
//  total counted is not enough while one rail lacks its share (a late
//  write on the other never makes up for it).
START_TEST(test_landed_only_when_every_rail_counted)
{
    H->nrails = 2;
    uint64_t id = s_fetch("r1", 0, 4, 0, 0);
    uint64_t round = H->sent[0].round;
    pk_msg_t *m = s_done("r1", round, true, 4);
    ck_assert_int_eq(pk_msg_set_string(m, PK_F_RAILS, "2 2"), 0);
    s_deliver(m);
    H->rail_landed[0] = 4;
    s_land(round, 4);                            //  all four counted, on one rail
    ck_assert_int_eq(H->ndone, 0);
    H->rail_landed[0] = 2;
    H->rail_landed[1] = 2;
    s_land(round, 4);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_uint_eq(H->done[0].id, id);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_LANDED);
}
END_TEST

//  Sliced blocks (capability slices): the answer says each rail's slices
//  too, and every block counted landed is not enough while a rail has
//  not read the slices the server saw confirmed on it (they may still be
//  in flight into a block the caller would reuse).
START_TEST(test_landed_only_when_every_rail_read_its_slices)
{
    H->nrails = 2;
    uint64_t id = s_fetch("r1", 0, 4, 0, 0);
    uint64_t round = H->sent[0].round;
    pk_msg_t *m = s_done("r1", round, true, 4);
    ck_assert_int_eq(pk_msg_set_string(m, PK_F_RAILS, "0 0"), 0);
    ck_assert_int_eq(pk_msg_set_string(m, PK_F_RAIL_SLICES, "16 18"), 0);
    s_deliver(m);
    H->rail_slices[0] = 16;
    H->rail_slices[1] = 17;
    s_land(round, 4);                            //  four blocks whole, one slice short
    ck_assert_int_eq(H->ndone, 0);
    H->rail_slices[1] = 18;
    s_land(round, 4);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_uint_eq(H->done[0].id, id);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_LANDED);
}
END_TEST

//  A rail the server took out (rails_failed): its count is what the
//  server saw confirmed there, and the consumer revokes that rail before
//  it reports the round, never after.
START_TEST(test_failed_rail_revoked_before_landed)
{
    H->nrails = 2;
    uint64_t id = s_fetch("r1", 0, 4, 0, 0);
    uint64_t round = H->sent[0].round;
    pk_msg_t *m = s_done("r1", round, true, 4);
    ck_assert_int_eq(pk_msg_set_string(m, PK_F_RAILS, "4 1"), 0);
    ck_assert_int_eq(pk_msg_set_string(m, PK_F_RAILS_FAILED, "1"), 0);
    s_deliver(m);
    H->rail_landed[0] = 4;
    s_land(round, 4);                            //  rail 1's confirmed block not yet
    ck_assert_int_eq(H->ndone, 0);
    ck_assert_int_eq(H->nrevoked, 0);
    H->rail_landed[1] = 1;
    s_land(round, 5);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_uint_eq(H->done[0].id, id);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_LANDED);
    ck_assert_int_eq(H->nrevoked, 1);
    ck_assert_uint_eq(H->revoked[0].rail, 1);
    ck_assert_int_eq(H->revoked[0].ndone_before, 0);
    ck_assert(!H->cut);
}
END_TEST

static int
s_offer(void *a, size_t rail, uint8_t **blob_p, size_t *len_p)
{
    (void) a;
    ck_assert_int_lt(H->noffered, 4);
    H->offered[H->noffered++] = rail;
    if (H->offer_fails)
        return -ENOMEM;
    *blob_p = malloc(5);
    memcpy(*blob_p, "PKOF\1", 5);
    *len_p = 5;
    return 0;
}

//  Capability rejoin: a rail revoked at a round's end is offered again,
//  once, on the next fetch (its fresh registration's blob in base64);
//  one whose registration cannot be made is not offered then, but tried
//  again on the rejoin back-off (twice the rail stall of 1 s, then 4 s)
//  and offered once it can be made; without the capability (no offer
//  function) nothing is.
START_TEST(test_revoked_rail_offered_on_next_fetch)
{
    H->nrails = 2;
    s_fetch("r0", 0, 1, 0, 0);
    ck_assert_str_eq(H->sent[0].offer, "");
    pk_client_role_set_rail_offer(H->role, s_offer, NULL);
    uint64_t round = H->sent[0].round;
    pk_msg_t *m = s_done("r0", round, true, 1);
    ck_assert_int_eq(pk_msg_set_string(m, PK_F_RAILS, "1 0"), 0);
    ck_assert_int_eq(pk_msg_set_string(m, PK_F_RAILS_FAILED, "1"), 0);
    s_deliver(m);
    H->rail_landed[0] = 1;
    s_land(round, 1);
    ck_assert_int_eq(H->nrevoked, 1);
    ck_assert_int_eq(H->noffered, 0);           //  made when a request goes
    s_fetch("r1", 0, 1, 0, 0);
    ck_assert_int_eq(H->noffered, 1);
    ck_assert_uint_eq(H->offered[0], 1);
    ck_assert_str_eq(H->sent[1].offer, "1 UEtPRgE=");
    s_fetch("r2", 0, 1, 0, 0);
    ck_assert_str_eq(H->sent[2].offer, "");
    ck_assert_int_eq(H->noffered, 1);
    //  rail 0 revoked next, its registration cannot be made: not offered
    round = H->sent[1].round;
    m = s_done("r1", round, true, 1);
    ck_assert_int_eq(pk_msg_set_string(m, PK_F_RAILS, "0 1"), 0);
    ck_assert_int_eq(pk_msg_set_string(m, PK_F_RAILS_FAILED, "0"), 0);
    s_deliver(m);
    H->rail_landed[0] = 0;
    H->rail_landed[1] = 1;
    s_land(round, 1);
    ck_assert_int_eq(H->nrevoked, 2);
    H->offer_fails = true;
    s_fetch("r3", 0, 1, 0, 0);
    ck_assert_int_eq(H->noffered, 2);
    ck_assert_str_eq(H->sent[3].offer, "");
    //  within its back-off: not tried
    s_tick_at(H->now + 1.9);
    s_fetch("r4", 0, 1, 0, 0);
    ck_assert_int_eq(H->noffered, 2);
    //  after it: tried, fails again, and the next wait is twice as long
    s_tick_at(H->now + 0.1);
    s_fetch("r5", 0, 1, 0, 0);
    ck_assert_int_eq(H->noffered, 3);
    ck_assert_uint_eq(H->offered[2], 0);
    ck_assert_str_eq(H->sent[5].offer, "");
    H->offer_fails = false;
    s_tick_at(H->now + 3.9);
    s_fetch("r6", 0, 1, 0, 0);
    ck_assert_int_eq(H->noffered, 3);
    s_tick_at(H->now + 0.1);
    s_fetch("r7", 0, 1, 0, 0);
    ck_assert_int_eq(H->noffered, 4);
    ck_assert_str_eq(H->sent[7].offer, "0 UEtPRgE=");
}
END_TEST

START_TEST(test_failed_waits_for_landing_blocks)
{
    s_fetch("r1", 0, 4, 0, 0);
    uint64_t round = H->sent[0].round;
    //  two blocks may still be on their way: the destination waits for them
    s_deliver(s_done("r1", round, false, 2));
    s_land(round, 1);
    ck_assert_int_eq(H->ndone, 0);
    s_land(round, 2);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_FAILED);
    ck_assert(!H->cut);
    //  one that never gets its landing blocks: cut off first, then freed
    s_fetch("r2", 0, 2, 0, 0);
    round = H->sent[1].round;
    s_deliver(s_done("r2", round, false, 1));
    s_tick_at(H->now + 9.9);
    ck_assert_int_eq(H->ndone, 1);
    s_tick_at(H->now + 0.1);
    ck_assert_int_eq(H->ndone, 2);
    ck_assert_int_eq(H->done[1].status, PK_LOAD_FAILED);
    ck_assert(H->done[1].cut_before);
}
END_TEST

START_TEST(test_timeout_abort_and_either_order)
{
    uint64_t id = s_fetch("r1", 0, 2, 0, 5);     //  the caller's own 5 s deadline
    uint64_t round = H->sent[0].round;
    s_tick_at(H->now + 4.9);
    ck_assert_int_eq(H->nsent, 1);
    s_tick_at(H->now + 0.1);
    ck_assert_int_eq(H->nsent, 2);
    ck_assert_int_eq(H->sent[1].type, PK_MSG_ABORT_FETCH);
    ck_assert_uint_eq(H->sent[1].round, round);
    ck_assert_int_eq(s_deliver(s_ack("r1", round, 0)), 0);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_uint_eq(H->done[0].id, id);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_ABORTED);
    //  the transfer_done that crossed the abort is not a conflict, once
    ck_assert_int_eq(s_deliver(s_done("r1", round, false, 0)), 0);
    ck_assert_int_eq(H->ndone, 1);
    //  a second transfer_done for the round is a violation
    ck_assert_int_eq(s_deliver(s_done("r1", round, false, 0)), -EPROTO);
}
END_TEST

START_TEST(test_abort_ack_timeout_cuts_off)
{
    s_fetch("r1", 0, 2, 0, 0);
    s_tick_at(H->now + 30);
    ck_assert_int_eq(H->sent[1].type, PK_MSG_ABORT_FETCH);
    s_tick_at(H->now + 10);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_FAILED);
    ck_assert(H->done[0].cut_before);
    ck_assert_str_eq(H->done[0].reason, "abort not acknowledged in time");
    uint64_t id;
    pk_key_t k[1] = { K(0) };
    uint32_t dest[1] = { 0 };
    ck_assert_int_eq(pk_client_role_fetch(H->role, "r1", k, dest, 1, 0, 0, &id), -ENOTCONN);
}
END_TEST

START_TEST(test_server_gone_cuts_off_first)
{
    s_fetch("r1", 0, 2, 0, 0);
    s_fetch("r1", 2, 2, 0, 0);      //  two loads of one request in flight
    ck_assert_uint_ne(H->sent[0].round, H->sent[1].round);
    pk_client_role_server_gone(H->role, "disconnect: retired");
    ck_assert_int_eq(H->ndone, 2);
    ck_assert(H->done[0].cut_before && H->done[1].cut_before);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_FAILED);
    ck_assert_str_eq(H->done[1].reason, "disconnect: retired");
}
END_TEST

//  A draining server says goodbye right after the transfer_done of a fetch
//  it finished; the last immediates, read just before (client.c,
//  s_session_gone), count every block: that load ends landed, before the
//  cut.  One still short of its blocks fails, cut off first.
START_TEST(test_server_gone_after_done_keeps_what_landed)
{
    uint64_t a = s_fetch("r1", 0, 3, 0, 0);
    uint64_t ra = H->sent[0].round;
    uint64_t b = s_fetch("r2", 0, 2, 0, 0);
    uint64_t rb = H->sent[1].round;
    s_deliver(s_done("r1", ra, true, 3));
    s_deliver(s_done("r2", rb, true, 2));
    ck_assert_int_eq(H->ndone, 0);                  //  immediates not counted yet
    H->landed[ra] = 3;                              //  read at the goodbye
    H->landed[rb] = 1;
    pk_client_role_server_gone(H->role, "server disconnected (shutdown)");
    ck_assert_int_eq(H->ndone, 2);
    ck_assert_uint_eq(H->done[0].id, a);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_LANDED);
    ck_assert(!H->done[0].cut_before);
    ck_assert_uint_eq(H->done[1].id, b);
    ck_assert_int_eq(H->done[1].status, PK_LOAD_FAILED);
    ck_assert(H->done[1].cut_before);
    ck_assert_uint_eq(pk_client_role_open_loads(H->role), 0);
}
END_TEST

START_TEST(test_loads_matched_by_round)
{
    uint64_t a = s_fetch("r1", 0, 1, 0, 0), b = s_fetch("r1", 1, 1, 0, 0);
    uint64_t ra = H->sent[0].round, rb = H->sent[1].round;
    H->landed[rb] = 1;
    s_deliver(s_done("r1", rb, true, 1));
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_uint_eq(H->done[0].id, b);
    H->landed[ra] = 1;
    s_deliver(s_done("r1", ra, true, 1));
    ck_assert_uint_eq(H->done[1].id, a);
    ck_assert_int_eq(H->done[1].status, PK_LOAD_LANDED);
}
END_TEST

//  What the client spins for (answer_spin): lookups sent and not answered.
//  Queued probes are not sent yet; an answer, a finish (its late answer is
//  stale) and the server's loss each take one out, once.
START_TEST(test_open_lookups_counted)
{
    s_probe("r1", 0, 2);
    s_probe("r2", 2, 1);
    s_probe("r3", 3, 1);
    ck_assert_uint_eq(pk_client_role_open_lookups(H->role), 0);
    pk_client_role_flush(H->role);
    ck_assert_uint_eq(pk_client_role_open_lookups(H->role), 3);
    uint64_t round[3];
    for (int i = 0; i < 3; i++)
        round[H->sent[i].kv[1] - '1'] = H->sent[i].round;
    ck_assert_int_eq(s_deliver(s_resp("r1", round[0], 2, 0)), 0);
    ck_assert_uint_eq(pk_client_role_open_lookups(H->role), 2);
    ck_assert_int_eq(s_deliver(s_resp("r1", round[0], 2, 0)), 0);    //  a repeat
    ck_assert_uint_eq(pk_client_role_open_lookups(H->role), 2);
    pk_client_role_finish(H->role, "r2");
    ck_assert_uint_eq(pk_client_role_open_lookups(H->role), 1);
    ck_assert_int_eq(s_deliver(s_resp("r2", round[1], 1, 0)), 0);    //  stale now
    ck_assert_uint_eq(pk_client_role_open_lookups(H->role), 1);
    pk_client_role_finish(H->role, "r1");       //  answered: nothing more to count
    ck_assert_uint_eq(pk_client_role_open_lookups(H->role), 1);
    pk_client_role_server_gone(H->role, "server disconnected");
    ck_assert_uint_eq(pk_client_role_open_lookups(H->role), 0);
}
END_TEST

START_TEST(test_terminal_fetch_on_finish)
{
    pk_key_t a[1] = { K(0) };
    pk_client_role_probe(H->role, "r1", a, 1);
    pk_client_role_flush(H->role);
    uint64_t round = H->sent[0].round;
    pk_client_role_finish(H->role, "r1");
    ck_assert_int_eq(H->nsent, 2);
    ck_assert_int_eq(H->sent[1].type, PK_MSG_FETCH);
    ck_assert_uint_eq(H->sent[1].n, 0);
    ck_assert_uint_eq(H->sent[1].round, round);  //  the open lookup's round
    //  its late answer is stale now
    s_deliver(s_resp("r1", round, 1, 0));
    ck_assert_int_eq(H->lookups_done, 0);
    //  a request that never looked up gets no terminal fetch (only the
    //  abort of its open load)
    s_fetch("r2", 0, 1, 0, 0);
    pk_client_role_finish(H->role, "r2");
    ck_assert_int_eq(H->nsent, 4);
    ck_assert_int_eq(H->sent[3].type, PK_MSG_ABORT_FETCH);
    ck_assert_uint_eq(H->sent[3].round, H->sent[2].round);
}
END_TEST

START_TEST(test_probe_sets_are_per_request)
{
    s_probe("r1", 0, 2);
    s_probe("r2", 0, 1);            //  the same key for another request
    pk_client_role_flush(H->role);
    ck_assert_int_eq(H->nsent, 2);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(H->sent[i].type, PK_MSG_LOOKUP);
        ck_assert_uint_eq(H->sent[i].keys[0], 0xa0);
        ck_assert_uint_eq(H->sent[i].n, strcmp(H->sent[i].kv, "r1") == 0 ? 2 : 1);
    }
    //  asked already, for each request: nothing goes out
    s_probe("r1", 0, 2);
    s_probe("r2", 0, 1);
    pk_client_role_flush(H->role);
    ck_assert_int_eq(H->nsent, 2);
}
END_TEST

//  A request's key sets go, emptied, to a later request (client_role.c,
//  s_spare_take): that one still asks every key of its own once.
START_TEST(test_tables_of_ended_request_reused_empty)
{
    s_probe("r1", 0, 6);
    pk_client_role_flush(H->role);
    ck_assert_int_eq(H->nsent, 1);
    ck_assert_uint_eq(H->sent[0].n, 6);
    pk_client_role_finish(H->role, "r1");
    //  the same keys for r2, in two lookups, in the tables r1 had: the
    //  second asks its keys, which r1 asked and r2 did not
    int sent = H->nsent;
    s_probe("r2", 0, 3);
    pk_client_role_flush(H->role);
    s_probe("r2", 3, 3);
    pk_client_role_flush(H->role);
    ck_assert_int_eq(H->nsent, sent + 2);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(H->sent[sent + i].type, PK_MSG_LOOKUP);
        ck_assert_str_eq(H->sent[sent + i].kv, "r2");
        ck_assert_uint_eq(H->sent[sent + i].n, 3);
        ck_assert_uint_eq(H->sent[sent + i].keys[0], H->sent[0].keys[3 * i]);
    }
    //  and what r2 asked stays asked
    s_probe("r2", 2, 6);
    pk_client_role_flush(H->role);
    ck_assert_int_eq(H->nsent, sent + 3);
    ck_assert_uint_eq(H->sent[sent + 2].n, 2);
}
END_TEST

START_TEST(test_split_lookups_answered_in_reverse)
{
    s_probe("r1", 0, 2);            //  K0 K1
    pk_client_role_flush(H->role);
    s_probe("r1", 1, 3);            //  K1 K2 K3: K1 was asked already
    pk_client_role_flush(H->role);
    ck_assert_int_eq(H->nsent, 2);
    ck_assert_uint_eq(H->sent[0].round, 1);
    ck_assert_uint_eq(H->sent[1].round, 2);
    ck_assert_uint_eq(H->sent[1].n, 2);
    ck_assert_uint_eq(H->sent[1].keys[0], 0xa2);
    ck_assert_uint_eq(H->sent[1].keys[1], 0xa3);
    //  the second lookup is answered first
    ck_assert_int_eq(s_deliver(s_resp_hits("r1", 2, 2, 2, 0x1)), 0);
    ck_assert_int_eq(H->lookups_done, 1);
    ck_assert_str_eq(H->answers[0].kv, "r1");
    ck_assert_uint_eq(H->answers[0].round, 2);
    ck_assert_uint_eq(H->answers[0].n, 2);
    ck_assert_uint_eq(H->answers[0].keys[0], 0xa2);
    ck_assert_uint_eq(H->answers[0].keys[1], 0xa3);
    ck_assert(H->answers[0].hits[0] && !H->answers[0].hits[1]);
    ck_assert_int_eq(s_deliver(s_resp_hits("r1", 1, 2, 0, 0x2)), 0);
    ck_assert_int_eq(H->lookups_done, 2);
    ck_assert_uint_eq(H->answers[1].round, 1);
    ck_assert_uint_eq(H->answers[1].n, 2);
    ck_assert_uint_eq(H->answers[1].keys[0], 0xa0);
    ck_assert_uint_eq(H->answers[1].keys[1], 0xa1);
    ck_assert(!H->answers[1].hits[0] && H->answers[1].hits[1]);
    //  each is delivered once
    ck_assert_int_eq(s_deliver(s_resp_hits("r1", 2, 2, 2, 0x1)), 0);
    ck_assert_int_eq(s_deliver(s_resp_hits("r1", 1, 2, 0, 0x2)), 0);
    ck_assert_int_eq(H->lookups_done, 2);
    //  the hits of each go under its own round, both loads in flight
    s_fetch("r1", 2, 1, 2, 0);
    s_fetch("r1", 1, 1, 1, 0);
    ck_assert_int_eq(H->sent[2].type, PK_MSG_FETCH);
    ck_assert_uint_eq(H->sent[2].round, 2);
    ck_assert_int_eq(H->sent[3].type, PK_MSG_FETCH);
    ck_assert_uint_eq(H->sent[3].round, 1);
    ck_assert_uint_eq(pk_client_role_open_loads(H->role), 2);
    ck_assert_int_eq(s_try_fetch("r1", 2, 1, 2), -EINVAL);
}
END_TEST

START_TEST(test_split_transfer_partial_landing)
{
    uint64_t id = s_fetch("r1", 0, 4, 0, 0);
    uint64_t round = H->sent[0].round;
    H->landed[round] = 2;           //  part of the round is in
    ck_assert_int_eq(s_deliver(s_done("r1", round, false, 3)), 0);
    ck_assert_int_eq(H->ndone, 0);  //  a third block may still land
    pk_client_role_tick(H->role);
    ck_assert_int_eq(H->ndone, 0);
    s_land(round, 3);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_uint_eq(H->done[0].id, id);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_FAILED);   //  part of it is not a load
    ck_assert_str_eq(H->done[0].reason, "the server could not serve the round");
    ck_assert(!H->cut);
    //  nothing can still land: released at once
    s_fetch("r2", 0, 2, 0, 0);
    ck_assert_int_eq(s_deliver(s_done("r2", H->sent[1].round, false, 0)), 0);
    ck_assert_int_eq(H->ndone, 2);
    ck_assert_int_eq(H->done[1].status, PK_LOAD_FAILED);
    ck_assert(!H->cut);
}
END_TEST

START_TEST(test_lookup_resp_other_keys_stale)
{
    s_probe("r1", 0, 2);
    pk_client_role_flush(H->role);
    uint64_t round = H->sent[0].round;
    ck_assert_int_eq(s_deliver(s_resp("r1", round, 1, 0)), 0);     //  fewer keys
    ck_assert_int_eq(s_deliver(s_resp("r1", round, 3, 0)), 0);     //  more keys
    ck_assert_int_eq(s_deliver(s_resp("r1", round, 2, 1)), 0);     //  other keys
    ck_assert_int_eq(H->lookups_done, 0);
    ck_assert_int_eq(s_deliver(s_resp("r1", round, 2, 0)), 0);
    ck_assert_int_eq(H->lookups_done, 1);
    //  a load's round is no lookup
    s_fetch("r1", 5, 1, 0, 0);
    ck_assert_int_eq(s_deliver(s_resp("r1", H->sent[1].round, 1, 5)), 0);
    ck_assert_int_eq(H->lookups_done, 1);
}
END_TEST

//  Wire 1.1: an answer without keys answers the lookup of its round with
//  that lookup's own keys; its request and number of hits must match, and
//  a conflicting repeat is a violation as with keys.
START_TEST(test_keyless_answer)
{
    s_probe("r1", 2, 3);
    pk_client_role_flush(H->role);
    uint64_t round = H->sent[0].round;
    ck_assert_int_eq(s_deliver(s_keyless("r2", round, 3, 0x5)), 0);    //  another request
    ck_assert_int_eq(s_deliver(s_keyless("r1", round, 2, 0x1)), 0);    //  too few hits
    ck_assert_int_eq(s_deliver(s_keyless("r1", round, 4, 0x5)), 0);    //  too many
    ck_assert_int_eq(H->lookups_done, 0);
    ck_assert_int_eq(s_deliver(s_keyless("r1", round, 3, 0x5)), 0);
    ck_assert_int_eq(H->lookups_done, 1);
    ck_assert_str_eq(H->answers[0].kv, "r1");
    ck_assert_uint_eq(H->answers[0].n, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq(H->answers[0].keys[i], 0xa2 + i);     //  the probed K(2)..K(4)
        ck_assert(H->answers[0].hits[i] == (i != 1));
    }
    //  repeats: the same answer, with keys or without, is harmless
    ck_assert_int_eq(s_deliver(s_keyless("r1", round, 3, 0x5)), 0);
    ck_assert_int_eq(s_deliver(s_resp_hits("r1", round, 3, 2, 0x5)), 0);
    ck_assert_ptr_null(pk_client_role_violation(H->role));
    ck_assert_int_eq(s_deliver(s_keyless("r1", round, 3, 0x4)), -EPROTO);
    ck_assert_str_eq(pk_client_role_violation(H->role), "a conflicting duplicate lookup_resp");
    ck_assert_int_eq(H->lookups_done, 1);
    //  the hits fetch under the lookup's round
    s_fetch("r1", 2, 1, round, 0);
    ck_assert_int_eq(H->sent[1].type, PK_MSG_FETCH);
    ck_assert_uint_eq(H->sent[1].round, round);
}
END_TEST

//  An answer with checksums (the capability) hands each hit's to the
//  owner, parallel to the keys, 0 at misses; one without hands none.
//  A get (capability get): one message with the keys and their blocks
//  under a fresh round; its get_resp gives the answer first (the keys are
//  the get's own, the hits, checksums and reasons the answer's), then the
//  load ends once the hits' blocks (not the misses') are counted.  A
//  second get_resp for the round is a violation, as a second
//  transfer_done is; a get's round answered by a transfer_done is stale.
START_TEST(test_get_one_message)
{
    pk_key_t keys[3] = { K(4), K(5), K(6) };
    uint32_t dest[3] = { 7, 8, 9 };
    uint64_t id = 0, named = 0;
    ck_assert_int_eq(pk_client_role_get(H->role, "g1", keys, dest, 3, 0, &id, &named), 0);
    ck_assert_int_eq(H->nsent, 1);
    ck_assert_int_eq(H->sent[0].type, PK_MSG_GET);
    ck_assert_uint_eq(H->sent[0].n, 3);
    uint64_t round = H->sent[0].round;
    ck_assert_uint_eq(named, round);        //  what its answer's lookup_done will name
    ck_assert_int_eq(s_deliver(s_done("g1", round, true, 3)), 0);
    ck_assert_int_eq(H->lookups_done + H->ndone, 0);
    //  hits for the get's 3 keys (bits 0 and 2), as the decoder leaves them
    pk_msg_t *m = s_keyless("g1", round, 3, 0x5);
    m->type = PK_MSG_GET_RESP;
    pk_msg_set_bool(m, PK_F_SUCCESS, true);
    pk_msg_set_uint(m, PK_F_LANDING, 2);
    ck_assert_int_eq(pk_msg_set_string(m, PK_F_CHECKSUMS, "00000000000000ab" "00000000000000cd"),
                     0);
    ck_assert_int_eq(pk_msg_set_string(m, PK_F_REASONS, "e"), 0);
    ck_assert_int_eq(s_deliver(m), 0);
    ck_assert_int_eq(H->lookups_done, 1);
    ck_assert_str_eq(H->answers[0].kv, "g1");
    ck_assert_uint_eq(H->answers[0].round, round);
    ck_assert_uint_eq(H->answers[0].n, 3);
    ck_assert_uint_eq(H->answers[0].keys[2], H->bytes[6]);
    ck_assert(H->answers[0].hits[0] && !H->answers[0].hits[1] && H->answers[0].hits[2]);
    ck_assert_uint_eq(H->answers[0].sums[2], 0xcd);
    ck_assert_uint_eq(H->answers[0].reasons[1], PK_MISS_EVICTED);
    ck_assert_int_eq(H->ndone, 0);                //  its 2 blocks not counted yet
    s_land(round, 1);
    ck_assert_int_eq(H->ndone, 0);
    s_land(round, 2);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_uint_eq(H->done[0].id, id);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_LANDED);
    m = s_keyless("g1", round, 3, 0x5);
    m->type = PK_MSG_GET_RESP;
    pk_msg_set_bool(m, PK_F_SUCCESS, true);
    pk_msg_set_uint(m, PK_F_LANDING, 2);
    ck_assert_int_eq(s_deliver(m), -EPROTO);
}
END_TEST

START_TEST(test_answer_checksums)
{
    s_probe("r1", 2, 3);
    pk_client_role_flush(H->role);
    uint64_t round = H->sent[0].round;
    pk_msg_t *m = s_keyless("r1", round, 3, 0x5);
    ck_assert_int_eq(pk_msg_set_string(m, PK_F_CHECKSUMS,
                                       "00000000000000ab" "ffffffffffffff01"), 0);
    ck_assert_int_eq(s_deliver(m), 0);
    ck_assert_int_eq(H->lookups_done, 1);
    ck_assert(H->answers[0].has_sums);
    ck_assert_uint_eq(H->answers[0].sums[0], 0xab);
    ck_assert_uint_eq(H->answers[0].sums[1], 0);
    ck_assert_uint_eq(H->answers[0].sums[2], UINT64_C(0xffffffffffffff01));
    s_probe("r2", 2, 1);
    pk_client_role_flush(H->role);
    ck_assert_int_eq(s_deliver(s_keyless("r2", H->sent[1].round, 1, 0x1)), 0);
    ck_assert_int_eq(H->lookups_done, 2);
    ck_assert(!H->answers[1].has_sums);
}
END_TEST

//  An answer with reasons (the capability) hands each miss's to the
//  owner, parallel to the keys, 0 at hits; one without hands none.
START_TEST(test_answer_reasons)
{
    s_probe("r1", 2, 4);
    pk_client_role_flush(H->role);
    pk_msg_t *m = s_keyless("r1", H->sent[0].round, 4, 0x4);      //  hits 0, 0, 1, 0
    ck_assert_int_eq(pk_msg_set_string(m, PK_F_REASONS, "eqd"), 0);
    ck_assert_int_eq(s_deliver(m), 0);
    ck_assert_int_eq(H->lookups_done, 1);
    ck_assert(H->answers[0].has_reasons);
    ck_assert_uint_eq(H->answers[0].reasons[0], PK_MISS_EVICTED);
    ck_assert_uint_eq(H->answers[0].reasons[1], PK_MISS_QUOTA);
    ck_assert_uint_eq(H->answers[0].reasons[2], 0);
    ck_assert_uint_eq(H->answers[0].reasons[3], PK_MISS_DRAINING);
    s_probe("r2", 2, 1);
    pk_client_role_flush(H->role);
    ck_assert_int_eq(s_deliver(s_keyless("r2", H->sent[1].round, 1, 0x0)), 0);
    ck_assert_int_eq(H->lookups_done, 2);
    ck_assert(!H->answers[1].has_reasons);
}
END_TEST

START_TEST(test_conflicting_duplicate_answer)
{
    s_probe("r1", 0, 3);
    pk_client_role_flush(H->role);
    ck_assert_int_eq(s_deliver(s_resp_hits("r1", 1, 3, 0, 0x5)), 0);
    ck_assert_int_eq(H->lookups_done, 1);
    //  the same answer again is harmless
    ck_assert_int_eq(s_deliver(s_resp_hits("r1", 1, 3, 0, 0x5)), 0);
    //  another request or other keys: stale, not a conflict
    ck_assert_int_eq(s_deliver(s_resp_hits("r2", 1, 3, 0, 0x2)), 0);
    ck_assert_int_eq(s_deliver(s_resp_hits("r1", 1, 2, 0, 0x2)), 0);
    ck_assert_int_eq(s_deliver(s_resp_hits("r1", 1, 3, 1, 0x2)), 0);
    ck_assert_ptr_null(pk_client_role_violation(H->role));
    //  other hits for the same question: a violation
    ck_assert_int_eq(s_deliver(s_resp_hits("r1", 1, 3, 0, 0x4)), -EPROTO);
    ck_assert_str_eq(pk_client_role_violation(H->role), "a conflicting duplicate lookup_resp");
    ck_assert_int_eq(H->lookups_done, 1);
    //  still once the hits were fetched and the request finished
    s_fetch("r1", 0, 1, 1, 0);
    pk_client_role_finish(H->role, "r1");
    ck_assert_int_eq(s_deliver(s_resp_hits("r1", 1, 3, 0, 0x5)), 0);
    ck_assert_int_eq(s_deliver(s_resp_hits("r1", 1, 3, 0, 0x7)), -EPROTO);
    ck_assert_int_eq(H->lookups_done, 1);
}
END_TEST

START_TEST(test_remembered_rounds_expire)
{
    s_probe("r1", 0, 1);
    pk_client_role_flush(H->role);
    s_deliver(s_resp_hits("r1", 1, 1, 0, 0x1));
    ck_assert_int_eq(H->lookups_done, 1);
    s_fetch("r2", 0, 1, 0, 0);
    H->landed[2] = 1;
    s_deliver(s_done("r2", 2, true, 1));
    ck_assert_int_eq(H->ndone, 1);
    //  both remembered for load_timeout + abort_ack_timeout (40 s)
    s_tick_at(89.9);
    ck_assert_int_eq(s_deliver(s_resp_hits("r1", 1, 1, 0, 0x0)), -EPROTO);
    ck_assert_int_eq(s_deliver(s_done("r2", 2, true, 1)), -EPROTO);
    s_tick_at(90);
    //  forgotten: a late duplicate is only stale
    ck_assert_int_eq(s_deliver(s_resp_hits("r1", 1, 1, 0, 0x0)), 0);
    ck_assert_int_eq(s_deliver(s_done("r2", 2, true, 1)), 0);
    ck_assert_int_eq(H->lookups_done, 1);
    ck_assert_int_eq(H->ndone, 1);
}
END_TEST

START_TEST(test_overlapping_rounds_any_order)
{
    s_probe("r1", 0, 2);
    pk_client_role_flush(H->role);
    s_deliver(s_resp("r1", 1, 2, 0));
    uint64_t a = s_fetch("r1", 0, 2, 1, 0);
    uint64_t b = s_fetch("r1", 2, 3, 0, 0);
    uint64_t c = s_fetch("r1", 5, 1, 0, 0);
    ck_assert_uint_eq(H->sent[1].round, 1);
    ck_assert_uint_eq(H->sent[2].round, 2);
    ck_assert_uint_eq(H->sent[3].round, 3);
    ck_assert_uint_eq(pk_client_role_open_loads(H->role), 3);
    //  round 3's blocks land first, but without transfer_done it is not done
    s_land(3, 1);
    ck_assert_int_eq(H->ndone, 0);
    //  round 2 answered, its blocks not all counted yet (a success waits
    //  for every block of the round, whatever its landing says)
    s_deliver(s_done("r1", 2, true, 2));
    s_land(2, 2);
    ck_assert_int_eq(H->ndone, 0);
    s_deliver(s_done("r1", 1, false, 0));
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_uint_eq(H->done[0].id, a);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_FAILED);
    s_deliver(s_done("r1", 3, true, 1));
    ck_assert_int_eq(H->ndone, 2);
    ck_assert_uint_eq(H->done[1].id, c);
    ck_assert_int_eq(H->done[1].status, PK_LOAD_LANDED);
    s_land(2, 3);
    ck_assert_int_eq(H->ndone, 3);
    ck_assert_uint_eq(H->done[2].id, b);
    ck_assert_int_eq(H->done[2].status, PK_LOAD_LANDED);
    ck_assert_uint_eq(pk_client_role_open_loads(H->role), 0);
    ck_assert(!H->cut);
}
END_TEST

START_TEST(test_rounds_from_one_counter)
{
    s_probe("r1", 0, 1);
    pk_client_role_flush(H->role);                  //  lookup, round 1
    s_fetch("r2", 0, 1, 0, 0);                      //  fresh, round 2
    s_probe("r2", 1, 1);
    pk_client_role_flush(H->role);                  //  lookup, round 3
    s_deliver(s_resp("r1", 1, 1, 0));
    s_fetch("r1", 0, 1, 1, 0);                      //  the lookup's round 1
    s_fetch("r1", 0, 1, 0, 0);                      //  fresh, round 4
    ck_assert_int_eq(s_try_fetch("r1", 0, 1, 1), -EINVAL);     //  fetched already
    ck_assert_int_eq(s_try_fetch("r2", 1, 1, 3), -EINVAL);     //  not answered yet
    s_deliver(s_resp("r2", 3, 1, 1));
    ck_assert_int_eq(s_try_fetch("r1", 1, 1, 3), -EINVAL);     //  another request's
    //  r2 holds an answered lookup not fetched: its round; r1 none: fresh;
    //  each request's open loads are aborted before its terminal fetch
    pk_client_role_finish(H->role, "r2");
    pk_client_role_finish(H->role, "r1");
    ck_assert_int_eq(H->nsent, 10);
    static const uint64_t rounds[10] = { 1, 2, 3, 1, 4, 2, 3, 1, 4, 5 };
    static const pk_msg_type_t types[10] = { PK_MSG_LOOKUP, PK_MSG_FETCH, PK_MSG_LOOKUP,
                                             PK_MSG_FETCH, PK_MSG_FETCH, PK_MSG_ABORT_FETCH,
                                             PK_MSG_FETCH, PK_MSG_ABORT_FETCH,
                                             PK_MSG_ABORT_FETCH, PK_MSG_FETCH };
    for (int i = 0; i < 10; i++) {
        ck_assert_int_eq(H->sent[i].type, types[i]);
        ck_assert_uint_eq(H->sent[i].round, rounds[i]);
    }
    ck_assert_uint_eq(H->sent[6].n, 0);
    ck_assert_str_eq(H->sent[6].kv, "r2");
    ck_assert_uint_eq(H->sent[9].n, 0);
    ck_assert_str_eq(H->sent[9].kv, "r1");
}
END_TEST

START_TEST(test_done_then_ack_while_landing)
{
    uint64_t id = s_fetch("r1", 0, 2, 0, 0);
    ck_assert_int_eq(s_deliver(s_done("r1", 1, true, 2)), 0);
    ck_assert_int_eq(s_deliver(s_ack("r1", 1, 0)), 0);        //  crossed it: no conflict
    ck_assert_int_eq(H->ndone, 0);
    ck_assert_int_eq(s_deliver(s_done("r1", 1, true, 2)), -EPROTO);
    ck_assert_str_eq(pk_client_role_violation(H->role), "two transfer_done for one round");
    s_land(1, 2);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_uint_eq(H->done[0].id, id);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_LANDED);    //  the first answer decides
    //  after it ended: an ack is harmless, a transfer_done a violation
    ck_assert_int_eq(s_deliver(s_ack("r1", 1, 0)), 0);
    ck_assert_int_eq(s_deliver(s_done("r1", 1, false, 0)), -EPROTO);
    ck_assert_int_eq(H->ndone, 1);
}
END_TEST

START_TEST(test_abort_ack_waits_for_landing)
{
    uint64_t a = s_fetch("r1", 0, 3, 0, 0);
    s_tick_at(80);
    ck_assert_int_eq(H->sent[1].type, PK_MSG_ABORT_FETCH);
    ck_assert_int_eq(s_deliver(s_ack("r1", 1, 2)), 0);
    s_land(1, 1);
    ck_assert_int_eq(H->ndone, 0);      //  a second block may still land
    ck_assert_int_eq(s_deliver(s_done("r1", 1, false, 2)), 0);
    ck_assert_int_eq(s_deliver(s_done("r1", 1, false, 2)), -EPROTO);
    s_land(1, 2);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_uint_eq(H->done[0].id, a);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_ABORTED);
    ck_assert(!H->cut);
    //  an ack whose landing blocks never come: cut off first, then failed
    uint64_t b = s_fetch("r1", 0, 1, 0, 0);
    s_tick_at(110);
    ck_assert_int_eq(H->sent[3].type, PK_MSG_ABORT_FETCH);
    ck_assert_uint_eq(H->sent[3].round, 2);
    s_deliver(s_ack("r1", 2, 1));
    s_tick_at(119.9);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert(!H->cut);
    s_tick_at(120);
    ck_assert_int_eq(H->ndone, 2);
    ck_assert_uint_eq(H->done[1].id, b);
    ck_assert_int_eq(H->done[1].status, PK_LOAD_FAILED);
    ck_assert(H->done[1].cut_before);
    ck_assert_str_eq(H->done[1].reason, "landing blocks did not arrive in time");
}
END_TEST

//  Round's load times out at t exactly: nothing is sent 0.1 s before, and
//  at t its abort_fetch, the next message.
static void
s_aborted_at(double t, uint64_t round)
{
    int before = H->nsent;
    s_tick_at(t - 0.1);
    ck_assert_int_eq(H->nsent, before);
    s_tick_at(t);
    ck_assert_int_eq(H->nsent, before + 1);
    ck_assert_int_eq(H->sent[before].type, PK_MSG_ABORT_FETCH);
    ck_assert_uint_eq(H->sent[before].round, round);
}

START_TEST(test_load_timeout_config_or_deadline)
{
    s_fetch("r1", 0, 1, 0, 0);      //  round 1: the configured 30 s
    s_fetch("r1", 1, 1, 0, 60);     //  round 2: its own 60 s
    s_fetch("r1", 2, 1, 0, 5);      //  round 3: its own 5 s
    s_aborted_at(55, 3);
    s_deliver(s_ack("r1", 3, 0));
    s_aborted_at(80, 1);
    s_deliver(s_ack("r1", 1, 0));
    s_aborted_at(110, 2);
    ck_assert_int_eq(H->ndone, 2);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_ABORTED);
    ck_assert_int_eq(H->done[1].status, PK_LOAD_ABORTED);
    ck_assert(!H->cut);
}
END_TEST

START_TEST(test_server_gone_fails_every_state)
{
    s_probe("r1", 0, 1);
    pk_client_role_flush(H->role);
    uint64_t a = s_fetch("r1", 0, 1, 0, 0);        //  waiting for an answer
    uint64_t b = s_fetch("r1", 1, 2, 0, 5);        //  to be aborted
    uint64_t c = s_fetch("r2", 0, 2, 0, 0);        //  waiting for its blocks
    s_deliver(s_done("r2", 4, true, 2));
    H->landed[4] = 1;
    s_tick_at(55);
    ck_assert_int_eq(H->sent[4].type, PK_MSG_ABORT_FETCH);
    ck_assert_int_eq(H->ndone, 0);
    pk_client_role_server_gone(H->role, "server silent");
    ck_assert_int_eq(H->ndone, 3);
    uint64_t ids[3] = { a, b, c };
    for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq(H->done[i].id, ids[i]);
        ck_assert_int_eq(H->done[i].status, PK_LOAD_FAILED);
        ck_assert(H->done[i].cut_before);
        ck_assert_str_eq(H->done[i].reason, "server silent");
    }
    ck_assert_uint_eq(pk_client_role_open_loads(H->role), 0);
    //  the unanswered lookup gets its one answer, without hits, after the
    //  loads failed
    ck_assert_int_eq(H->lookups_done, 1);
    ck_assert(H->answers[0].unanswered);
    ck_assert_str_eq(H->answers[0].kv, "r1");
    ck_assert_uint_eq(H->answers[0].round, 1);
    ck_assert_uint_eq(H->answers[0].n, 1);
    ck_assert_uint_eq(H->answers[0].keys[0], K(0).bytes[0]);
    //  nothing goes to a server cut off, not even the terminal fetch
    ck_assert_int_eq(s_try_fetch("r1", 0, 1, 0), -ENOTCONN);
    pk_client_role_finish(H->role, "r1");
    ck_assert_int_eq(H->nsent, 5);
}
END_TEST

//  Server gone: only lookups not answered get the answer without hits,
//  in round order, each once.
START_TEST(test_server_gone_answers_open_lookups_once)
{
    s_probe("r1", 0, 2);
    s_probe("r2", 2, 1);
    pk_client_role_flush(H->role);
    s_probe("r1", 3, 1);
    pk_client_role_flush(H->role);
    ck_assert_int_eq(H->nsent, 3);
    //  r2's lookup is answered; r1's two are not
    uint64_t r2_round = strcmp(H->sent[0].kv, "r2") == 0 ? H->sent[0].round : H->sent[1].round;
    ck_assert_int_eq(s_deliver(s_resp("r2", r2_round, 1, 2)), 0);
    ck_assert_int_eq(H->lookups_done, 1);
    ck_assert(!H->answers[0].unanswered);
    pk_client_role_server_gone(H->role, "server disconnected");
    ck_assert_int_eq(H->lookups_done, 3);
    ck_assert(H->answers[1].unanswered && H->answers[2].unanswered);
    ck_assert_str_eq(H->answers[1].kv, "r1");
    ck_assert_str_eq(H->answers[2].kv, "r1");
    ck_assert_uint_lt(H->answers[1].round, H->answers[2].round);
    ck_assert_uint_eq(H->answers[1].n + H->answers[2].n, 3);
    ck_assert(!H->answers[1].hits[0] && !H->answers[2].hits[0]);
    //  a late answer from the gone server changes nothing
    ck_assert_int_eq(s_deliver(s_resp("r1", H->answers[1].round, 2, 0)), 0);
    pk_client_role_server_gone(H->role, "again");
    ck_assert_int_eq(H->lookups_done, 3);
}
END_TEST

//  Load ids from the owner's counter: unique across its roles (sessions),
//  where each role's own would start at 1.
START_TEST(test_load_ids_from_the_owners_counter)
{
    uint64_t counter = 41;
    pk_client_role_config_t cfg = { 30, 10, &counter, 0 };
    pk_client_role_t *a = pk_client_role_new(&cfg, (pk_clock_t) { NULL, s_now },
                                             (pk_sender_t) { NULL, s_send },
                                             (pk_client_transport_t) { .landed = s_landed,
                                                                       .cut_off = s_cut },
                                             (pk_client_events_t) { NULL, s_lookup_done,
                                                                    s_load_done });
    pk_client_role_t *b = pk_client_role_new(&cfg, (pk_clock_t) { NULL, s_now },
                                             (pk_sender_t) { NULL, s_send },
                                             (pk_client_transport_t) { .landed = s_landed,
                                                                       .cut_off = s_cut },
                                             (pk_client_events_t) { NULL, s_lookup_done,
                                                                    s_load_done });
    pk_key_t k = K(0);
    uint32_t dest = 0;
    uint64_t ia, ib, ia2;
    ck_assert_int_eq(pk_client_role_fetch(a, "r", &k, &dest, 1, 0, 0, &ia), 0);
    ck_assert_int_eq(pk_client_role_fetch(b, "r", &k, &dest, 1, 0, 0, &ib), 0);
    ck_assert_int_eq(pk_client_role_fetch(a, "s", &k, &dest, 1, 0, 0, &ia2), 0);
    ck_assert_uint_eq(ia, 42);
    ck_assert_uint_eq(ib, 43);
    ck_assert_uint_eq(ia2, 44);
    ck_assert_uint_eq(counter, 44);
    //  the fixture's role counts on its own, from 1
    uint64_t own;
    ck_assert_int_eq(pk_client_role_fetch(H->role, "r", &k, &dest, 1, 0, 0, &own), 0);
    ck_assert_uint_eq(own, 1);
    pk_client_role_destroy(&a);
    pk_client_role_destroy(&b);
}
END_TEST

//  Every load's end tells the transport its round is over, once and before
//  load_done (so the tag's counter is gone before the destination is
//  reused), whichever way it ends: landed, failed, aborted, server gone.
//  Lookup-only rounds land nothing and are not forgotten.
START_TEST(test_round_over_tells_the_transport)
{
    s_fetch("r1", 0, 2, 0, 0);
    uint64_t r1 = H->sent[0].round;
    s_deliver(s_done("r1", r1, true, 2));
    ck_assert_int_eq(H->nforgot, 0);             //  still landing
    s_land(r1, 2);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_int_eq(H->nforgot, 1);
    ck_assert_uint_eq(H->forgot[0].round, r1);
    ck_assert_int_eq(H->forgot[0].ndone_before, 0);
    //  a failed one that landed nothing
    s_fetch("r2", 0, 2, 0, 0);
    uint64_t r2 = H->sent[1].round;
    s_deliver(s_done("r2", r2, false, 0));
    ck_assert_int_eq(H->ndone, 2);
    ck_assert_int_eq(H->nforgot, 2);
    ck_assert_uint_eq(H->forgot[1].round, r2);
    ck_assert_int_eq(H->forgot[1].ndone_before, 1);
    //  an open one when the server goes away
    s_fetch("r3", 0, 1, 0, 0);
    uint64_t r3 = H->sent[2].round;
    pk_client_role_server_gone(H->role, "gone");
    ck_assert_int_eq(H->ndone, 3);
    ck_assert_int_eq(H->nforgot, 3);
    ck_assert_uint_eq(H->forgot[2].round, r3);
    ck_assert_int_eq(H->forgot[2].ndone_before, 2);
    //  a late abort_ack for an ended round forgets nothing again
    ck_assert_int_eq(s_deliver(s_ack("r1", r1, 0)), 0);
    ck_assert_int_eq(H->nforgot, 3);
}
END_TEST

//  A transport with no forget (NULL) is fine: nothing to tell.
START_TEST(test_round_over_without_forget)
{
    pk_client_role_config_t cfg = { 30, 10, NULL, 0 };
    pk_client_role_t *r = pk_client_role_new(&cfg, (pk_clock_t) { NULL, s_now },
                                             (pk_sender_t) { NULL, s_send },
                                             (pk_client_transport_t) { .landed = s_landed,
                                                                       .cut_off = s_cut },
                                             (pk_client_events_t) { NULL, s_lookup_done, s_load_done });
    ck_assert_ptr_nonnull(r);
    pk_key_t k = K(0);
    uint32_t dest = 0;
    uint64_t id;
    ck_assert_int_eq(pk_client_role_fetch(r, "x", &k, &dest, 1, 0, 0, &id), 0);
    pk_client_role_server_gone(r, "gone");
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_int_eq(H->nforgot, 0);
    pk_client_role_destroy(&r);
}
END_TEST

//  ---------------------------------------------------------------------------
//  Cancel (p2pkv_client_cancel): one abort, one end, ABORTED, after the fence

START_TEST(test_cancel_aborts_once_and_waits_for_the_fence)
{
    uint64_t id = s_fetch("r1", 0, 3, 0, 0);
    uint64_t round = H->sent[0].round;
    ck_assert_int_eq(pk_client_role_cancel(H->role, id), 0);
    ck_assert_int_eq(H->nsent, 2);
    ck_assert_int_eq(H->sent[1].type, PK_MSG_ABORT_FETCH);
    ck_assert_uint_eq(H->sent[1].round, round);
    ck_assert_str_eq(H->sent[1].kv, "r1");
    //  a second cancel sends nothing and says it runs
    ck_assert_int_eq(pk_client_role_cancel(H->role, id), -EINPROGRESS);
    ck_assert_int_eq(pk_client_role_cancel(H->role, id + 7), -ENOENT);
    H->now += 9.9;                      //  within the abort-ack timeout
    pk_client_role_tick(H->role);
    ck_assert_int_eq(H->nsent, 2);
    ck_assert_int_eq(H->ndone, 0);
    //  acked with two blocks that may still land: not ended before both
    ck_assert_int_eq(s_deliver(s_ack("r1", round, 2)), 0);
    ck_assert_int_eq(H->ndone, 0);
    s_land(round, 1);
    ck_assert_int_eq(H->ndone, 0);
    s_land(round, 2);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_uint_eq(H->done[0].id, id);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_ABORTED);
    ck_assert(!H->cut);
    ck_assert_int_eq(strncmp(H->done[0].reason, "cancelled", 9), 0);
    //  ended: not the role's any more; a late transfer_done ends nothing
    ck_assert_int_eq(pk_client_role_cancel(H->role, id), -ENOENT);
    ck_assert_int_eq(s_deliver(s_done("r1", round, false, 2)), 0);
    s_tick_at(H->now + 60);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_int_eq(H->nsent, 2);
}
END_TEST

START_TEST(test_cancel_crossed_by_a_successful_transfer_done)
{
    uint64_t id = s_fetch("r1", 0, 2, 0, 0);
    uint64_t round = H->sent[0].round;
    ck_assert_int_eq(pk_client_role_cancel(H->role, id), 0);
    //  the transfer completed before the abort arrived: every block may
    //  still be on its way, so the fence is all of them
    ck_assert_int_eq(s_deliver(s_done("r1", round, true, 2)), 0);
    s_land(round, 1);
    ck_assert_int_eq(H->ndone, 0);
    s_land(round, 2);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_ABORTED);     //  not LANDED
    //  the ack that follows is not a conflict and ends nothing
    ck_assert_int_eq(s_deliver(s_ack("r1", round, 0)), 0);
    ck_assert_int_eq(H->ndone, 1);
}
END_TEST

START_TEST(test_cancel_not_acked_cuts_off_and_ends_once)
{
    uint64_t id = s_fetch("r1", 0, 2, 0, 0);
    ck_assert_int_eq(pk_client_role_cancel(H->role, id), 0);
    s_tick_at(H->now + 9.9);
    ck_assert_int_eq(H->ndone, 0);
    ck_assert(!H->cut);
    s_tick_at(H->now + 0.1);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_uint_eq(H->done[0].id, id);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_ABORTED);
    ck_assert(H->done[0].cut_before);
    ck_assert_str_eq(H->done[0].reason, "cancelled (abort not acknowledged in time)");
    s_tick_at(H->now + 60);
    pk_client_role_server_gone(H->role, "gone");
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_int_eq(H->nsent, 2);
}
END_TEST

START_TEST(test_cancel_late_in_the_load_sends_nothing)
{
    //  answered already (waiting for its landing blocks): no abort
    uint64_t a = s_fetch("r1", 0, 4, 0, 0);
    uint64_t ra = H->sent[0].round;
    s_deliver(s_done("r1", ra, false, 2));
    ck_assert_int_eq(pk_client_role_cancel(H->role, a), 0);
    ck_assert_int_eq(H->nsent, 1);
    s_land(ra, 2);
    ck_assert_int_eq(H->ndone, 1);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_ABORTED);
    //  aborting at its deadline already: no second abort
    uint64_t b = s_fetch("r1", 0, 1, 0, 5);
    uint64_t rb = H->sent[1].round;
    s_tick_at(H->now + 5);
    ck_assert_int_eq(H->nsent, 3);
    ck_assert_int_eq(pk_client_role_cancel(H->role, b), 0);
    ck_assert_int_eq(pk_client_role_cancel(H->role, b), -EINPROGRESS);
    ck_assert_int_eq(H->nsent, 3);
    s_deliver(s_ack("r1", rb, 0));
    ck_assert_int_eq(H->ndone, 2);
    ck_assert_int_eq(H->done[1].status, PK_LOAD_ABORTED);
    //  the server gone ends a cancelled load ABORTED too, cut off first
    uint64_t c = s_fetch("r1", 0, 1, 0, 0);
    ck_assert_int_eq(pk_client_role_cancel(H->role, c), 0);
    pk_client_role_server_gone(H->role, "silent");
    ck_assert_int_eq(H->ndone, 3);
    ck_assert_int_eq(H->done[2].status, PK_LOAD_ABORTED);
    ck_assert(H->done[2].cut_before);
}
END_TEST

START_TEST(test_finish_cancels_open_loads_before_the_terminal_fetch)
{
    pk_key_t a[2] = { K(0), K(1) };
    pk_client_role_probe(H->role, "r1", a, 2);
    pk_client_role_flush(H->role);
    uint64_t lr = H->sent[0].round;
    s_deliver(s_resp("r1", lr, 2, 0));
    uint64_t x = s_fetch("r1", 0, 2, lr, 0);        //  the lookup's hits
    uint64_t y = s_fetch("r1", 4, 1, 0, 0);         //  a fresh round
    uint64_t z = s_fetch("r2", 5, 1, 0, 0);         //  another request
    uint64_t ry = H->sent[2].round;
    ck_assert_int_eq(H->nsent, 4);
    ck_assert_int_eq(pk_client_role_finish(H->role, "r1"), 0);
    //  an abort for each open load of r1, then the terminal fetch
    ck_assert_int_eq(H->nsent, 7);
    ck_assert_int_eq(H->sent[4].type, PK_MSG_ABORT_FETCH);
    ck_assert_uint_eq(H->sent[4].round, lr);
    ck_assert_int_eq(H->sent[5].type, PK_MSG_ABORT_FETCH);
    ck_assert_uint_eq(H->sent[5].round, ry);
    ck_assert_int_eq(H->sent[6].type, PK_MSG_FETCH);
    ck_assert_uint_eq(H->sent[6].n, 0);
    ck_assert_uint_ne(H->sent[6].round, lr);
    ck_assert_uint_ne(H->sent[6].round, ry);
    ck_assert_int_eq(pk_client_role_cancel(H->role, x), -EINPROGRESS);
    ck_assert_int_eq(H->ndone, 0);
    s_deliver(s_ack("r1", ry, 0));
    s_deliver(s_ack("r1", lr, 0));
    ck_assert_int_eq(H->ndone, 2);
    ck_assert_uint_eq(H->done[0].id, y);
    ck_assert_uint_eq(H->done[1].id, x);
    ck_assert_int_eq(H->done[0].status, PK_LOAD_ABORTED);
    ck_assert_int_eq(H->done[1].status, PK_LOAD_ABORTED);
    //  r2 is untouched
    ck_assert_uint_eq(pk_client_role_open_loads(H->role), 1);
    ck_assert_int_eq(pk_client_role_cancel(H->role, z), 0);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("client_role");
    TCase *tc = tcase_create("client_role");
    tcase_add_checked_fixture(tc, s_setup, s_teardown);
    tcase_add_test(tc, test_probes_batched_per_request);
    tcase_add_test(tc, test_lookup_resp_matching_and_stale);
    tcase_add_test(tc, test_landed_only_when_every_block_counted);
    tcase_add_test(tc, test_landed_only_when_every_rail_counted);
    tcase_add_test(tc, test_landed_only_when_every_rail_read_its_slices);
    tcase_add_test(tc, test_failed_rail_revoked_before_landed);
    tcase_add_test(tc, test_revoked_rail_offered_on_next_fetch);
    tcase_add_test(tc, test_failed_waits_for_landing_blocks);
    tcase_add_test(tc, test_timeout_abort_and_either_order);
    tcase_add_test(tc, test_abort_ack_timeout_cuts_off);
    tcase_add_test(tc, test_server_gone_cuts_off_first);
    tcase_add_test(tc, test_server_gone_after_done_keeps_what_landed);
    tcase_add_test(tc, test_loads_matched_by_round);
    tcase_add_test(tc, test_terminal_fetch_on_finish);
    tcase_add_test(tc, test_probe_sets_are_per_request);
    tcase_add_test(tc, test_tables_of_ended_request_reused_empty);
    tcase_add_test(tc, test_split_lookups_answered_in_reverse);
    tcase_add_test(tc, test_split_transfer_partial_landing);
    tcase_add_test(tc, test_lookup_resp_other_keys_stale);
    tcase_add_test(tc, test_conflicting_duplicate_answer);
    tcase_add_test(tc, test_keyless_answer);
    tcase_add_test(tc, test_answer_checksums);
    tcase_add_test(tc, test_get_one_message);
    tcase_add_test(tc, test_answer_reasons);
    tcase_add_test(tc, test_remembered_rounds_expire);
    tcase_add_test(tc, test_overlapping_rounds_any_order);
    tcase_add_test(tc, test_rounds_from_one_counter);
    tcase_add_test(tc, test_done_then_ack_while_landing);
    tcase_add_test(tc, test_abort_ack_waits_for_landing);
    tcase_add_test(tc, test_load_timeout_config_or_deadline);
    tcase_add_test(tc, test_server_gone_fails_every_state);
    tcase_add_test(tc, test_server_gone_answers_open_lookups_once);
    tcase_add_test(tc, test_load_ids_from_the_owners_counter);
    tcase_add_test(tc, test_round_over_tells_the_transport);
    tcase_add_test(tc, test_round_over_without_forget);
    tcase_add_test(tc, test_cancel_aborts_once_and_waits_for_the_fence);
    tcase_add_test(tc, test_cancel_crossed_by_a_successful_transfer_done);
    tcase_add_test(tc, test_cancel_not_acked_cuts_off_and_ends_once);
    tcase_add_test(tc, test_cancel_late_in_the_load_sends_nothing);
    tcase_add_test(tc, test_finish_cancels_open_loads_before_the_terminal_fetch);
    tcase_add_test(tc, test_open_lookups_counted);
    suite_add_tcase(s, tc);
    return pk_test_run("client_role", s);
}
