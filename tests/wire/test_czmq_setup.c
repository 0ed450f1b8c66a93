/*  test_czmq_setup.c: that the library's entry points finish czmq's set-up
    before any of our threads can make a socket (lib/wire/czmq_setup.c).

    czmq sets itself up on a process's first socket, marks itself done and
    lets go of its lock, then applies its thread settings, each of which
    asserts that no socket exists yet: a second thread's first socket in
    that gap aborts the process.  The gap is microseconds wide, so a test
    that only raced two threads would almost never see it.  This one holds
    it open: it defines zsys_set_max_msgsz, which czmq's zsys_init calls
    (through its PLT, so the executable's definition is the one called) in
    that gap, and there waits until a socket is made by another thread, or
    two seconds; it also defines zsys_socket, where czmq makes every
    socket, to see that.  With the once, the other thread cannot get past
    p2pkv_client_new until the set-up is over, so no socket is made in the
    gap, which the test asserts; without it, that thread's connect makes
    its socket in the gap, and czmq aborts the process when the set-up goes
    on (the test fails with signal 6).

    Each test runs in a process of its own (Check's fork), in which nothing
    touched czmq before: the process's first set-up is the one held.
*/
#include "p2pkv.h"
#include "base/clock.h"
#include "daemon.h"
#include "testutil.h"

#include <czmq.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdbool.h>
#include <string.h>

//  How long the held gap waits for another thread's socket: far above
//  what making and connecting a client takes (milliseconds, a few hundred
//  under ASan), so that without the once that socket is made inside it.
#define S_HOLD 2.0

static struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    bool in_gap;                //  czmq's set-up reached the held call
    bool gap_over;              //  ... and went on past it
    bool socket_in_gap;         //  another thread made a socket in between
    pthread_t holder;           //  the thread whose set-up is held
    int held;                   //  times the held call was made
} s_race = { .lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER };

//  Waits on s_race until *flag is set or limit seconds pass; whether it is.
static bool
s_wait_for(bool *flag, double limit)
{
    double deadline = pk_clock_monotonic() + limit;
    pthread_mutex_lock(&s_race.lock);
    while (!*flag) {
        double left = deadline - pk_clock_monotonic();
        if (left <= 0)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += (time_t) left;
        ts.tv_nsec += (long) ((left - (double) (time_t) left) * 1e9);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s_race.changed, &s_race.lock, &ts);
    }
    bool set = *flag;
    pthread_mutex_unlock(&s_race.lock);
    return set;
}

static void
s_set(bool *flag)
{
    pthread_mutex_lock(&s_race.lock);
    *flag = true;
    pthread_cond_broadcast(&s_race.changed);
    pthread_mutex_unlock(&s_race.lock);
}

//  czmq's own, called by its zsys_init after it marked itself done and
//  before its thread settings: the gap, held open here the first time.
void zsys_set_max_msgsz(int max_msgsz);

void
zsys_set_max_msgsz(int max_msgsz)
{
    void (*real)(int) = (void (*)(int)) dlsym(RTLD_NEXT, "zsys_set_max_msgsz");
    pthread_mutex_lock(&s_race.lock);
    bool first = s_race.held++ == 0;
    if (first)
        s_race.holder = pthread_self();
    pthread_mutex_unlock(&s_race.lock);
    if (first) {
        s_set(&s_race.in_gap);
        (void) s_wait_for(&s_race.socket_in_gap, S_HOLD);
    }
    if (real)
        real(max_msgsz);
    if (first)
        s_set(&s_race.gap_over);
}

//  czmq's own, where it makes every socket: one made by another thread
//  while the set-up is held is what the once is there to prevent.
void *zsys_socket(int type, const char *filename, size_t line_nbr);

void *
zsys_socket(int type, const char *filename, size_t line_nbr)
{
    void *(*real)(int, const char *, size_t) =
        (void *(*)(int, const char *, size_t)) dlsym(RTLD_NEXT, "zsys_socket");
    void *handle = real ? real(type, filename, line_nbr) : NULL;
    pthread_mutex_lock(&s_race.lock);
    bool inside = s_race.in_gap && !s_race.gap_over
                  && !pthread_equal(s_race.holder, pthread_self());
    pthread_mutex_unlock(&s_race.lock);
    if (inside)
        s_set(&s_race.socket_in_gap);
    return handle;
}

static p2pkv_client_t *
s_client_new(const char *peer_id)
{
    p2pkv_config_t cfg = { 0 };
    cfg.peer_id = peer_id;
    cfg.fingerprint = "fp";
    cfg.hash_seed = "7";
    cfg.provider = "tcp";
    cfg.node = "127.0.0.1";
    char err[256] = "";
    p2pkv_client_t *c = p2pkv_client_new(&cfg, NULL, 4, 4096, (p2pkv_callbacks_t) { 0 }, err);
    ck_assert_msg(c != NULL, "p2pkv_client_new(%s): %s", peer_id, err);
    return c;
}

//  The first thread: a client made and connected to endpoint (nothing
//  listens there: the connect makes its socket, then times out).
typedef struct {
    const char *endpoint;
    p2pkv_client_t *client;
    int rc;
} s_first_t;

static void *
s_first(void *arg)
{
    s_first_t *first = arg;
    first->client = s_client_new("c-first");
    char err[256] = "";
    first->rc = p2pkv_client_connect(first->client, first->endpoint, 0.1, err);
    return NULL;
}

START_TEST(test_no_socket_inside_czmq_setup)
{
    char endpoint[64];
    snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", td_free_port());

    //  the first thread's client: czmq sets itself up in p2pkv_client_new
    //  (with the once) or at its connect's socket (without), and is held
    s_first_t first = { .endpoint = endpoint };
    pthread_t thread;
    ck_assert_int_eq(pthread_create(&thread, NULL, s_first, &first), 0);
    ck_assert_msg(s_wait_for(&s_race.in_gap, 30),
                  "the first client never reached czmq's set-up (zsys_set_max_msgsz): "
                  "this test cannot hold the gap open (czmq changed?)");

    //  czmq is inside its set-up now: this thread's client must wait for it
    //  (without the once, its connect's socket aborts the process)
    p2pkv_client_t *second = s_client_new("c-second");
    char err[256] = "";
    //  (nothing listens there: refused, or timed out before the refusal was seen)
    int rc = p2pkv_client_connect(second, endpoint, 0.1, err);
    ck_assert_msg(rc == -ECONNREFUSED || rc == -ETIMEDOUT,
                  "connect to nothing: %d (%s), want -ECONNREFUSED or -ETIMEDOUT", rc, err);

    ck_assert_int_eq(pthread_join(thread, NULL), 0);
    ck_assert_ptr_nonnull(first.client);
    ck_assert_msg(first.rc == -ECONNREFUSED || first.rc == -ETIMEDOUT,
                  "first connect to nothing: %d, want -ECONNREFUSED or -ETIMEDOUT", first.rc);
    ck_assert_int_eq(s_race.held, 1);
    ck_assert_msg(s_race.gap_over && !s_race.socket_in_gap,
                  "a socket was made while czmq's set-up was under way in another thread");
    p2pkv_client_destroy(&first.client);
    p2pkv_client_destroy(&second);
}
END_TEST

int
main(void)
{
    if (sodium_init() < 0)
        return EXIT_FAILURE;
    Suite *suite = suite_create("czmq_setup");
    TCase *tc = tcase_create("czmq_setup");
    tcase_add_test(tc, test_no_socket_inside_czmq_setup);
    suite_add_tcase(suite, tc);
    return pk_test_run("test_czmq_setup", suite);
}
