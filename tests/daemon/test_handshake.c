/*  test_handshake.c: the handshake actor (lib/daemon/handshake.c) alone,
    with no node, door or fabric: a describe is answered with the
    description, junk with nothing, a frame other than connect with a
    disconnect, a connect whose blob the pick refuses with a disconnect
    incompatible naming why, and an accepted connect becomes a peer on
    the fabric the pick chose.  Every HELLO gets exactly one answer, and
    the backlog counts back to zero.  */
#include "daemon/handshake.h"
#include "daemon/pointer.h"
#include "testutil.h"

#include <errno.h>
#include <string.h>

static const uint8_t s_epoch[PK_EPOCH_LEN] = { 1, 2, 3 };
static const uint8_t s_zero[PK_EPOCH_LEN] = { 0 };
static int s_picks;

//  The node's pick: blob "good" is fabric 7's, anything else refused.
static int
s_pick(void *arg, const uint8_t *blob, size_t len, pk_peer_fabric_t *fabric, char *reason,
       size_t cap)
{
    s_picks++;
    if (len == 4 && memcmp(blob, "good", 4) == 0) {
        *fabric = (pk_peer_fabric_t) { (pk_fabric_t *) arg, "test" };
        return 0;
    }
    snprintf(reason, cap, "agent_metadata: provider nope, this server offers test");
    return -EPROTO;
}

static zframe_t *
s_frame(const pk_msg_t *m)
{
    char *text, err[PK_ERRLEN];
    size_t len;
    ck_assert_msg(pk_msg_encode(m, &text, &len, err) == 0, "%s", err);
    zframe_t *f = zframe_new(text, len);
    free(text);
    return f;
}

static pk_msg_t *
s_connect(const char *blob)
{
    pk_msg_t *m = pk_msg_new(PK_MSG_CONNECT);
    pk_msg_set_uint(m, PK_F_WIRE_MAJOR, 1);
    pk_msg_set_uint(m, PK_F_WIRE_MINOR, 1);
    pk_msg_set_string(m, PK_F_PEER_ID, "consumer-1");
    pk_msg_set_epochs(m, s_epoch, s_zero);
    pk_msg_set_metadata(m, blob, strlen(blob));
    pk_msg_set_uint(m, PK_F_BASE_ADDR, 0);
    pk_msg_set_uint(m, PK_F_NUM_BLOCKS, 64);
    pk_msg_set_uint(m, PK_F_BLOCK_LEN, 4096);
    pk_msg_set_string(m, PK_F_CONFIG_FINGERPRINT, "fp");
    pk_msg_set_string(m, PK_F_HASH_SEED, "7");
    return m;
}

//  Hands the actor frame from rid "r1" and reads its one answer: the word,
//  and (REPLY) the frame decoded, or NULL when empty, or (PEER) the peer.
static char *
s_hello(pk_handshake_t *hs, zframe_t *frame, pk_msg_t **reply_p, pk_peer_t **peer_p)
{
    zframe_t *rid = zframe_new("r1", 2);
    ck_assert_int_eq(pk_handshake_hello(hs, rid, frame, ""), 0);
    zframe_destroy(&rid);
    zframe_destroy(&frame);
    zmsg_t *msg = zmsg_recv(pk_handshake_actor(hs));
    ck_assert_ptr_nonnull(msg);
    char *word = zmsg_popstr(msg);
    zframe_t *back = zmsg_pop(msg);
    ck_assert_mem_eq(zframe_data(back), "r1", 2);
    zframe_destroy(&back);
    *reply_p = NULL;
    *peer_p = NULL;
    if (streq(word, "REPLY")) {
        zframe_t *what = zmsg_pop(msg);
        char err[PK_ERRLEN];
        if (zframe_size(what))
            ck_assert_int_eq(pk_msg_decode(zframe_data(what), zframe_size(what), reply_p, err),
                             0);
        zframe_destroy(&what);
    }
    else
        *peer_p = pk_pointer_pop(msg);
    zmsg_destroy(&msg);
    return word;
}

START_TEST(test_handshake_alone)
{
    pk_server_config_t config;
    ck_assert_int_eq(pk_server_config_defaults(&config), 0);
    config.log_level = PK_LOG_ERROR;
    pk_server_identity_t id = { "server-a", 4096, 128, "fp", "7", "test", NULL, 0, NULL, NULL };
    pk_peer_env_t env = { .config = &config, .id = &id };
    int fabric;
    pk_handshake_t *hs = pk_handshake_new(&env, s_pick, &fabric);
    ck_assert_ptr_nonnull(hs);
    pk_msg_t *reply;
    pk_peer_t *peer;

    pk_msg_t *m = pk_msg_new(PK_MSG_DESCRIBE);
    char *word = s_hello(hs, s_frame(m), &reply, &peer);
    pk_msg_destroy(&m);
    ck_assert_str_eq(word, "REPLY");
    ck_assert_ptr_nonnull(reply);
    ck_assert_int_eq(reply->type, PK_MSG_DESCRIPTION);
    ck_assert_str_eq(reply->peer_id, "server-a");
    pk_msg_destroy(&reply);
    zstr_free(&word);

    word = s_hello(hs, zframe_new("{junk", 5), &reply, &peer);
    ck_assert_str_eq(word, "REPLY");
    ck_assert_ptr_null(reply);                          //  dropped, answered with nothing
    zstr_free(&word);

    m = pk_msg_new(PK_MSG_PING);
    pk_msg_set_epochs(m, s_epoch, s_epoch);
    word = s_hello(hs, s_frame(m), &reply, &peer);
    pk_msg_destroy(&m);
    ck_assert_int_eq(reply->type, PK_MSG_DISCONNECT);
    ck_assert_int_eq(reply->code, PK_DISC_NO_SESSION);
    pk_msg_destroy(&reply);
    zstr_free(&word);
    ck_assert_int_eq(s_picks, 0);

    m = s_connect("nope");
    word = s_hello(hs, s_frame(m), &reply, &peer);
    pk_msg_destroy(&m);
    ck_assert_int_eq(s_picks, 1);
    ck_assert_int_eq(reply->type, PK_MSG_DISCONNECT);
    ck_assert_int_eq(reply->code, PK_DISC_INCOMPATIBLE);
    ck_assert_ptr_nonnull(strstr(reply->reason, "provider nope"));
    pk_msg_destroy(&reply);
    zstr_free(&word);

    m = s_connect("good");
    word = s_hello(hs, s_frame(m), &reply, &peer);
    pk_msg_destroy(&m);
    ck_assert_str_eq(word, "PEER");
    ck_assert_ptr_nonnull(peer);
    ck_assert_str_eq(peer->consumer, "consumer-1");
    ck_assert_ptr_eq(peer->fabric.fabric, (pk_fabric_t *) &fabric);
    ck_assert_str_eq(peer->fabric.provider, "test");
    ck_assert_ptr_eq(peer->env, &env);
    ck_assert_mem_eq(peer->rid, "r1", 2);
    pk_peer_destroy(&peer);
    zstr_free(&word);

    uint64_t frames, bytes;
    pk_handshake_backlog(hs, &frames, &bytes);
    ck_assert_uint_eq(frames, 0);
    ck_assert_uint_eq(bytes, 0);
    pk_handshake_destroy(&hs);
    ck_assert_ptr_null(hs);
    pk_server_config_fini(&config);
}
END_TEST

int
main(void)
{
    Suite *s = suite_create("handshake");
    TCase *tc = tcase_create("handshake");
    tcase_add_test(tc, test_handshake_alone);
    suite_add_tcase(s, tc);
    return pk_test_run("handshake", s);
}
