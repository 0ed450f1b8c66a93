/*  load.c: a load of consumers (consumer.c) against one server, started
    together, timed together: one repetition's figures.  The consumers are
    processes, or with cfg->threads the threads of one process.  */
#include "bench.h"
#include "base/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
pkb_load_start(pkb_consumer_t *cs, size_t nc, const pkb_consumer_cfg_t *cfg, char *err,
               size_t size)
{
    static pkb_consumer_cfg_t cfgs[1024];
    int rc = 0;
    size_t started = 0;
    for (size_t i = 0; i < nc; i++) {
        cfgs[i] = *cfg;
        cfgs[i].id = (int) i;
    }
    if (cfg->threads) {
        rc = pkb_consumer_start_threads(cs, cfgs, nc);
        started = rc == 0 ? nc : 0;
    }
    for (size_t i = 0; !cfg->threads && rc == 0 && i < nc; i++)
        if ((rc = pkb_consumer_start(&cs[i], &cfgs[i])) == 0)
            started++;
    if (rc)
        snprintf(err, size, "cannot start a consumer: %s", strerror(-rc));
    for (size_t i = 0; rc == 0 && i < nc; i++)
        rc = pkb_consumer_ready(&cs[i], err, size);
    if (rc)
        pkb_load_stop(cs, started);
    return rc;
}

//  Last to first: with threads the first reaps their process, after every
//  thread was told to quit.
void
pkb_load_stop(pkb_consumer_t *cs, size_t nc)
{
    for (size_t i = nc; i-- > 0;)
        pkb_consumer_stop(&cs[i]);
}

static void
s_pcts(double *v, size_t n, double out[3])
{
    out[0] = pkb_quantile(v, n, 0.50) * 1e3;
    out[1] = pkb_quantile(v, n, 0.99) * 1e3;
    out[2] = pkb_quantile(v, n, 0.999) * 1e3;
}

int
pkb_load_rep(pkb_consumer_t *cs, size_t nc, pid_t server, uint64_t nkeys, pkb_rep_t *out,
             char *err, size_t size)
{
    double *lk = NULL, *ft = NULL;
    size_t nlk = 0, nft = 0;
    double s0 = pkb_proc_cpu(server), t0 = 1e300, t1 = 0, cli = 0;
    uint64_t sw0 = pkb_context_switches();
    uint64_t bytes = 0, iters = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < nc; i++)
        rc = pkb_consumer_go(&cs[i]);
    for (size_t i = 0; rc == 0 && i < nc; i++) {
        pkb_phase_t ph;
        rc = pkb_consumer_result(&cs[i], &ph, &lk, &nlk, &ft, &nft);
        if (rc)
            snprintf(err, size, "consumer %zu: %s", i, ph.rc ? ph.err : strerror(-rc));
        t0 = ph.t0 < t0 ? ph.t0 : t0;
        t1 = ph.t1 > t1 ? ph.t1 : t1;
        cli += ph.cpu;
        bytes += ph.bytes;
        iters += ph.iterations;
    }
    double srv = pkb_proc_cpu(server) - s0, span = t1 - t0;
    //  The whole machine's, from go to the last result: on this bench's
    //  machine only its processes run, and a wake is what the crowd pays
    //  for (doc/design.md, "Where the end-to-end time goes").
    double switches = (double) (pkb_context_switches() - sw0);
    if (rc == 0) {
        memset(out, 0, sizeof *out);
        out->bytes = bytes;
        out->samples = nlk;
        out->gbps = (double) bytes / span / 1e9;
        out->ops_per_s = (double) iters / span;
        out->keys_per_s = (double) (iters * nkeys) / span;
        s_pcts(lk, nlk, out->lk);
        s_pcts(ft, nft, out->ft);
        out->srv_cpu_gb = bytes ? srv / ((double) bytes / 1e9) : 0;
        out->cli_cpu_gb = bytes ? cli / ((double) bytes / 1e9) : 0;
        out->srv_cpu_s = srv / span;
        out->cli_cpu_s = cli / span;
        out->switches_per_mb = bytes ? switches / ((double) bytes / 1e6) : 0;
    }
    free(lk);
    free(ft);
    return rc;
}
