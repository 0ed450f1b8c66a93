/*  unsent.c: the bytes of answers handed to ZeroMQ and not yet written
    (unsent.h says why).
*/
#include "daemon/unsent.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct pk_unsent {
    atomic_uint_fast64_t bytes;
    atomic_uint_fast64_t refs;      //  the owner's and one per message counted
    pk_unsent_t *parent;
};

//  A counted message's buffer: this header, then the frame's bytes.
typedef struct {
    pk_unsent_t *counter;
    size_t len;
} s_head_t;

pk_unsent_t *
pk_unsent_new(pk_unsent_t *parent)
{
    pk_unsent_t *self = calloc(1, sizeof *self);
    if (!self)
        return NULL;
    atomic_init(&self->bytes, 0);
    atomic_init(&self->refs, 1);
    self->parent = parent;
    if (parent)
        atomic_fetch_add(&parent->refs, 1);
    return self;
}

static void
s_unref(pk_unsent_t *self)
{
    while (self && atomic_fetch_sub(&self->refs, 1) == 1) {
        pk_unsent_t *parent = self->parent;
        free(self);
        self = parent;
    }
}

void
pk_unsent_release(pk_unsent_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    s_unref(*self_p);
    *self_p = NULL;
}

uint64_t
pk_unsent_bytes(const pk_unsent_t *self)
{
    return atomic_load(&((pk_unsent_t *) self)->bytes);
}

//  libzmq's free function: on the thread that let go of the message (an
//  I/O thread once it was written, the sender's when a send failed).
static void
s_free(void *data, void *hint)
{
    s_head_t *head = hint;
    for (pk_unsent_t *u = head->counter; u; u = u->parent)
        atomic_fetch_sub(&u->bytes, head->len);
    s_unref(head->counter);
    free(head);
}

int
pk_unsent_msg(pk_unsent_t *self, const void *frame, size_t len, zmq_msg_t *msg)
{
    s_head_t *head = malloc(sizeof *head + len);
    if (!head)
        return -ENOMEM;
    head->counter = self;
    head->len = len;
    uint8_t *data = (uint8_t *) (head + 1);
    if (len)
        memcpy(data, frame, len);
    if (zmq_msg_init_data(msg, data, len, s_free, head) != 0) {
        free(head);
        return -ENOMEM;
    }
    atomic_fetch_add(&self->refs, 1);
    for (pk_unsent_t *u = self; u; u = u->parent)
        atomic_fetch_add(&u->bytes, len);
    return 0;
}
