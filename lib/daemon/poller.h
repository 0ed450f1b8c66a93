/*  poller.h: what the node's loop waits on (private to lib/daemon).

    A czmq zpoller asks every socket it holds for ZMQ_EVENTS each time it
    wakes, and each time it is called: a getpid and a poll per socket in
    libzmq, twice per call, so the door's six sockets cost about twenty
    system calls per frame, and a system call here costs 1.3-1.5 us (a
    paravirtualised guest).  pk_poller_t asks only the sockets that may
    hold something: those whose descriptor fired, those the loop just read
    a message from, and those the node did anything else with (a send may
    take the command that would have fired the descriptor: ZeroMQ's
    descriptors signal changes, not state).  doc/design.md, "The node's
    loop asks only the sockets that may hold something".
*/
#ifndef PK_POLLER_H_INCLUDED
#define PK_POLLER_H_INCLUDED

#include <czmq.h>
#include <stdbool.h>

typedef struct pk_poller_t pk_poller_t;

//  How many sockets one poller holds (the node has at most seven).
#define PK_POLLER_MAX 16

//  How long a socket that nothing marked goes unasked at most, in ms: the
//  net under a touch the node forgot, a stall of at most this long.
#define PK_POLLER_SWEEP_MS 100

pk_poller_t *pk_poller_new(void);
void pk_poller_destroy(pk_poller_t **self_p);

//  A zsock_t or zactor_t, asked at the next wait: 0 or a negative errno.
int pk_poller_add(pk_poller_t *self, void *sock);
int pk_poller_remove(pk_poller_t *self, void *sock);

//  A socket that may hold a message, at once when one may; else the
//  first whose descriptor fires within timeout_ms.  NULL: nothing (the
//  time passed, a signal came, or czmq's interrupt flag, zsys_interrupted,
//  is set: then at once).  The caller reads it with pk_poller_recv.
void *pk_poller_wait(pk_poller_t *self, int timeout_ms);

//  One message of sock, read without waiting (the poller only knows it
//  may hold one), and sock marked when there was one: more may be there.
//  NULL: none (the read left the descriptor armed).  A read that finds a
//  message costs no system call; one that finds none costs libzmq's look
//  at its mailbox, what asking ZMQ_EVENTS first would cost every time.
zmsg_t *pk_poller_recv(pk_poller_t *self, void *sock);

//  Says sock was used (a message read, a send, any libzmq call on it): it
//  is asked again before the poller sleeps.  Not a socket of this poller,
//  or no poller (a node without its loop: tests/fuzz): nothing.
void pk_poller_touch(pk_poller_t *self, void *sock);

#endif
