/*  replay.h: p2pkv-replay's engine (doc/replay.md), apart from its
    command line, so that the fuzz target tests/fuzz/fuzz_replay.c runs
    the very code the binary runs.
*/
#ifndef PK_REPLAY_H_INCLUDED
#define PK_REPLAY_H_INCLUDED

#include <stdbool.h>
#include <stdio.h>

/*  Reads the scenario from in to its end, feeding one server role made
    for peer, and prints every effect to out (and with mark a {"line":N}
    after each event's).  Returns 0 when the whole script ran, or 2 after
    an input error (its message on err, as "p2pkv-replay: line N: ...");
    either way everything it made is freed.  Not reentrant: one run at a
    time per process.  */
int pk_replay_run(FILE *in, FILE *out, FILE *err, const char *peer, bool mark);

#endif
