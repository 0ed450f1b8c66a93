/*  client_session.h: the consumer's half of a session (protocol.md
    sections 4-5), as a pure state machine: the mirror of server_session.

    One session per server.  It draws the consumer's epoch, sends connect
    (repeated every reconnect_interval until answered), checks the answer
    (connect_ack for our epoch, or a disconnect: incompatible stops it for
    good, anything else keeps it asking), stamps and checks epochs on every
    later message, pings after keepalive seconds without sending, declares
    the server gone after silence seconds without hearing from it, ends
    the session on a frame that does not decode or a message that only
    flows the other way (a violation, answered with disconnect), and after
    a loss starts a new session (new epoch, new resources) every
    reconnect_interval unless told not to.

    It owns no socket, channel or thread: what it needs from outside comes
    through pk_client_session_ops_t and the injected clock, so the client
    library, the tests' consumer and a unit test with a virtual clock run
    the same code.  What a live session carries (lookups, fetches: the
    client role) is the owner's: the session hands it every live message
    through deliver.  Not thread-safe: one owner drives one session.

        DOWN --start/tick--> CONNECTING --connect_ack--> UP
          ^                      |  disconnect incompatible    | gone: silence,
          |                      v                             | disconnect,
          +---- reconnect ---- STOPPED (for good)              | violation
          +----------------------------------------------------+
*/
#ifndef PK_CLIENT_SESSION_H_INCLUDED
#define PK_CLIENT_SESSION_H_INCLUDED

#include "base/clock.h"
#include "wire/protocol.h"

typedef enum {
    PK_CLIENT_SESSION_DOWN = 0,         //  no session; a new one at reconnect time
    PK_CLIENT_SESSION_CONNECTING,       //  connect sent, no answer yet
    PK_CLIENT_SESSION_UP,
    PK_CLIENT_SESSION_STOPPED           //  refused as incompatible: never retried
} pk_client_session_state_t;

typedef struct {
    double reconnect_interval;  //  connect repeated, and a new session after a loss (1 s)
    double keepalive;           //  ping after this long without sending (2 s)
    double silence;             //  the server is gone after this long unheard (10 s)
    bool no_reconnect;          //  a lost session stays DOWN
} pk_client_session_config_t;

#define PK_CLIENT_SESSION_CONFIG_DEFAULT { 1.0, 2.0, 10.0, false }

/*  What connect says about us.  Strings are copied.  */
typedef struct {
    const char *endpoint;       //  the server's, for reasons only
    const char *peer_id;
    uint64_t num_blocks, block_len;
    const char *fingerprint, *hash_seed;
    uint64_t wire_major;        //  0: ours (PK_WIRE_MAJOR); tests set others
    const char *caps;           //  capability words connect lists (NULL: none)
} pk_client_identity_t;

typedef struct {
    size_t size;                //  sizeof (pk_client_session_ops_t)
    void *self;
    /*  A new session's resources (a socket whose routing id derives from
        epoch, a data-plane channel exposing the pool): *blob_p, malloc'd
        and handed to the session, is the channel's address for connect.
        0, or a negative errno with err (PK_ERRLEN) saying why.  */
    int (*open)(void *self, const uint8_t *epoch, uint8_t **blob_p, size_t *len_p, char *err);
    /*  Ends them: the channel's endpoint and registration first (nothing
        of the old session lands afterwards), then the socket.  Called once
        per successful open, also when open failed half-way.  */
    void (*close)(void *self);
    /*  One encoded frame to the server, malloc'd and given to the op,
        which frees it whatever it returns (the client hands it to ZeroMQ
        as it is: a lookup of 65,536 keys is a 4.4 MB frame, and a copy of
        it was a second such block per request).  0, or -EAGAIN when it
        cannot go now (the socket is not connected yet).  Never blocks.  */
    int (*send)(void *self, char *frame, size_t len);
    /*  The session is UP: create what lives with it (the role).  A
        negative errno ends the session (DOWN, reconnect later).  */
    int (*up)(void *self);
    /*  A live message for the owner, epochs checked; returns 0, or -EPROTO
        with *why (static text) for a violation, which ends the session.  */
    int (*deliver)(void *self, const pk_msg_t *msg, const char **why);
    /*  The session ended while UP (silence, disconnect, violation): fail
        what is open.  Called before close.  */
    void (*gone)(void *self, const char *reason);
    /*  Every change of state, with its reason ("" when none).  */
    void (*state)(void *self, pk_client_session_state_t state, const char *reason);
} pk_client_session_ops_t;

typedef struct _pk_client_session_t pk_client_session_t;

/*  DOWN until pk_client_session_start.  NULL when out of memory or ops
    is older than this header (ops.size).  */
pk_client_session_t *pk_client_session_new(const pk_client_session_config_t *config,
                                           const pk_client_identity_t *id, pk_clock_t clock,
                                           const pk_client_session_ops_t *ops);

/*  Closes the session's resources, without a word to the server (see
    pk_client_session_disconnect).  */
void pk_client_session_destroy(pk_client_session_t **self_p);

/*  Opens a session now (DOWN -> CONNECTING; connect goes out at the next
    tick).  0, or the error of ops.open, with err (PK_ERRLEN).  -EALREADY
    when not DOWN.  */
int pk_client_session_start(pk_client_session_t *self, char *err);

/*  Everything due by now: a new session when one is due, connect when its
    repeat is due, ping and silence when UP.  Returns the next moment
    (clock seconds) something is due, for the owner's timer.  */
double pk_client_session_tick(pk_client_session_t *self);

/*  When pk_client_session_tick next has something to do, without doing
    it (INFINITY: never, until the owner starts it or a frame comes).  */
double pk_client_session_due(const pk_client_session_t *self);

/*  The capability words the server's connect_ack listed ("" before one
    came, or from a server older than capabilities); a session uses a
    capability both sides list (protocol.md section 4).  */
const char *pk_client_session_server_caps(const pk_client_session_t *self);

/*  One frame from the server.  While UP a frame that does not decode is a
    violation; before, it is dropped.  */
void pk_client_session_on_frame(pk_client_session_t *self, const void *data, size_t len);

/*  One decoded message from the server.  */
void pk_client_session_on_message(pk_client_session_t *self, const pk_msg_t *msg);

/*  Sends msg with this session's epochs (msg itself is not changed):
    0, -ENOTCONN when not UP, or what encoding or ops.send said.  The
    owner's role sends through this.  */
int pk_client_session_send(pk_client_session_t *self, const pk_msg_t *msg);

/*  Says goodbye when UP (disconnect with code and reason), closes the
    session's resources (ops.close) and stays DOWN: no reconnect follows
    until pk_client_session_start.  ops.gone is not called: what becomes
    of the owner's open work is the owner's choice (fail it first, or drop
    it at destroy).  */
void pk_client_session_disconnect(pk_client_session_t *self, pk_disconnect_code_t code,
                                  const char *reason);

/*  The owner found the server gone while UP (its transfer stalled): as
    silence would, ops.gone, then the resources close and a new session
    follows after reconnect_interval.  Nothing when not UP.  */
void pk_client_session_lost(pk_client_session_t *self, const char *reason);

pk_client_session_state_t pk_client_session_state(const pk_client_session_t *self);
/*  Why it is in its state: "" when UP.  */
const char *pk_client_session_reason(const pk_client_session_t *self);
/*  The current session's epochs (the server's zero until connect_ack).  */
const uint8_t *pk_client_session_epoch(const pk_client_session_t *self);
const uint8_t *pk_client_session_server_epoch(const pk_client_session_t *self);

#endif
