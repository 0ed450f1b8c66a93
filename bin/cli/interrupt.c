/*  interrupt.c: SIGINT or SIGTERM during a get (or lookup) of p2pkv.

    The signal cancels the get (p2pkv_client_finish of its request) and
    the get returns only once its fetch ended, so the tool never exits
    while a server still writes into its pool.  The signals are blocked
    in every thread and taken here with sigtimedwait; finish is repeated
    until the get returned, since one made before the get began has
    nothing to cancel yet.
*/
#include "cli.h"

#include <string.h>
#include <time.h>

static void *
s_interrupt_run(void *arg)
{
    cli_interrupt_t *self = arg;
    struct timespec tick = { 0, 50 * 1000 * 1000 };
    while (!atomic_load(&self->done)) {
        if (!atomic_load(&self->signo)) {
            int signo = sigtimedwait(&self->set, NULL, &tick);
            if (signo > 0 && signo != SIGUSR2)         //  SIGUSR2: cli_interrupt_end's wake
                atomic_store(&self->signo, signo);
            continue;
        }
        char kv[32];
        (void) p2pkv_client_finish(self->client, self->server,
                                   cli_pass_kv(atomic_load(&self->pass), kv, sizeof kv));
        nanosleep(&tick, NULL);
    }
    return NULL;
}

//  Before any thread starts, so that every one inherits the block.
void
cli_interrupt_init(cli_interrupt_t *self)
{
    memset(self, 0, sizeof *self);
    sigemptyset(&self->set);
    sigaddset(&self->set, SIGINT);
    sigaddset(&self->set, SIGTERM);
    sigaddset(&self->set, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &self->set, &self->old);
}

void
cli_interrupt_watch(cli_interrupt_t *self, p2pkv_client_t *client, int server)
{
    self->client = client;
    self->server = server;
    self->watching = pthread_create(&self->thread, NULL, s_interrupt_run, self) == 0;
}

//  The get returned: the signal it was cancelled for, or 0.
int
cli_interrupt_end(cli_interrupt_t *self)
{
    atomic_store(&self->done, true);
    //  woken at once: its wait is 50 ms, which every get paid at its end
    if (self->watching)
        pthread_kill(self->thread, SIGUSR2);
    if (self->watching)
        pthread_join(self->thread, NULL);
    self->watching = false;
    return atomic_load(&self->signo);
}
