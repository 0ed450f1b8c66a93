/*  callbacks.h: what a client's callbacks (p2pkv.h, p2pkv_callbacks_t)
    saw, for the suites whose clients may run a progress thread: the
    callbacks then run on that thread, so the fields a test waits on are
    atomics.
*/
#ifndef PK_TEST_CALLBACKS_H_INCLUDED
#define PK_TEST_CALLBACKS_H_INCLUDED

#include "p2pkv.h"

#include <stdatomic.h>

typedef struct {
    atomic_int lookups, fetches, hits;  //  hits: of the last lookup answered
    atomic_int status;                  //  the last fetch's end; -1 before any
    atomic_uint_fast64_t round, round_of[8];   //  the last lookup's round (of server < 8)
    atomic_int ups, downs, stops, connecting;  //  server states entered
    atomic_int unanswered;              //  lookups ended by the server going away
    atomic_int keys_answered;
    char reason[256];                   //  the last server state's
    char fetch_reason[256];             //  the last fetch's
} cb_seen_t;

//  Which callbacks record (the others are NULL, as a client without them has).
enum { CB_LOOKUP = 1, CB_FETCH = 2, CB_SERVER = 4 };

//  seen zeroed, status -1; the callbacks of which, recording into it.
p2pkv_callbacks_t cb_seen_start(cb_seen_t *seen, unsigned which);

#endif
