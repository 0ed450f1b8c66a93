/*  pointer.h: a pointer handed between the daemon's threads in a frame
    (private to lib/daemon).

    The actors hand each other objects (a peer, a held store, a pull) as
    zsock_send's "p": the receiver owns what it pops.  */
#ifndef PK_POINTER_H_INCLUDED
#define PK_POINTER_H_INCLUDED

#include <czmq.h>
#include <string.h>

/*  The pointer sent with "p" at the head of msg (popped), or NULL when
    that frame is not one.  */
static inline void *
pk_pointer_pop(zmsg_t *msg)
{
    zframe_t *f = zmsg_pop(msg);
    void *p = NULL;
    if (f && zframe_size(f) == sizeof p)
        memcpy(&p, zframe_data(f), sizeof p);
    zframe_destroy(&f);
    return p;
}

#endif
