/*  checks.c: the end-to-end check of the consumer (issue 34; protocol.md
    section 7, "Block checksums").

    A server with the checksum capability sends each hit's checksum in its
    lookup answer.  The client keeps them per server, as one record per
    answered lookup (pk_answer_t), until a fetch under that round takes
    them: the fetch then holds its blocks' checksums, and when it lands
    each block is hashed in the client's pool and compared, before the
    fetch is reported.  A record whose round is never fetched goes when
    its request finishes or the session goes, so what is kept is bounded
    by the lookups answered and not yet fetched or finished (each costs
    its keys' bytes and 9 bytes a key).  Everything here runs under the
    client's lock.
*/
#include "client/client_internal.h"
#include "base/big_cache.h"
#include "base/checksum.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  A block whose checksum is known and that nobody checked yet; its
//  transport's copies (pk_client_fetch_ended) or pk_client_fetch_check
//  make it PK_VERDICT_OK or PK_VERDICT_CORRUPT.
enum { S_PENDING = 8 };

typedef struct pk_answer {
    uint64_t round;
    char *kv;
    size_t n;
    pk_key_t *keys;                 //  the answer's hits, bytes after the array
    uint64_t *sums;
    struct pk_answer *next;
} pk_answer_t;

int
pk_client_answer_keep(s_server_t *s, const char *kv, uint64_t round, const pk_key_t *keys,
                      const bool *hits, const uint64_t *sums, size_t n)
{
    size_t nhit = 0, bytes = 0;
    for (size_t i = 0; i < n; i++)
        if (hits[i]) {
            nhit++;
            bytes += keys[i].len;
        }
    if (nhit == 0)
        return 0;
    size_t kvlen = strlen(kv) + 1;
    pk_answer_t *a = pk_big_alloc(sizeof *a + nhit * (sizeof *a->keys + sizeof *a->sums)
                                  + bytes + kvlen);
    if (!a)
        return -ENOMEM;             //  this answer's blocks then land unchecked
    a->round = round;
    a->n = nhit;
    a->sums = (uint64_t *) (a + 1);
    a->keys = (pk_key_t *) (a->sums + nhit);
    uint8_t *at = (uint8_t *) (a->keys + nhit);
    for (size_t i = 0, j = 0; i < n; i++) {
        if (!hits[i])
            continue;
        memcpy(at, keys[i].bytes, keys[i].len);
        a->keys[j] = (pk_key_t) { at, keys[i].len, keys[i].hash };
        a->sums[j++] = sums[i];
        at += keys[i].len;
    }
    a->kv = (char *) at;
    memcpy(a->kv, kv, kvlen);
    a->next = s->answers;
    s->answers = a;
    return 0;
}

void
pk_client_answers_drop(s_server_t *s, const char *kv)
{
    for (pk_answer_t **p = &s->answers; *p; ) {
        pk_answer_t *a = *p;
        if (kv && strcmp(a->kv, kv) != 0) {
            p = &a->next;
            continue;
        }
        *p = a->next;
        pk_big_free(a);
    }
}

//  The round's record gives each fetched key its checksum; a key it does
//  not list (not a hit of that answer) is left unchecked.  The record
//  goes: a round is fetched once.
int
pk_client_fetch_sums(s_server_t *s, const char *kv, uint64_t round, const pk_key_t *keys,
                     const uint32_t *dest, size_t n, s_fetch_t *f, bool expect)
{
    pk_answer_t **p = &s->answers;
    while (*p && !((*p)->round == round && strcmp((*p)->kv, kv) == 0))
        p = &(*p)->next;
    pk_answer_t *a = *p;
    if (!a)
        return 0;
    *p = a->next;
    int rc = -ENOMEM;
    pk_keymap_t map = PK_KEYMAP_INIT;
    if (pk_keymap_reserve(&map, a->n) == 0) {
        for (size_t j = 0; j < a->n; j++)
            pk_keymap_put(&map, &a->keys[j], j, 0);
        //  one allocation, the widest first (each array aligned)
        f->sums = pk_big_alloc(n * (sizeof *f->sums + sizeof *f->dest + sizeof *f->verdict));
        if (f->sums) {
            f->dest = (uint32_t *) (f->sums + n);
            f->verdict = (uint8_t *) (f->dest + n);
            f->n = n;
            memcpy(f->dest, dest, n * sizeof *dest);
            size_t nexp = 0;
            for (size_t i = 0; i < n; i++) {
                pk_keymap_entry_t *e = pk_keymap_find(&map, &keys[i]);
                f->verdict[i] = e ? S_PENDING : PK_VERDICT_NONE;
                f->sums[i] = e ? a->sums[e->a] : 0;
                nexp += e != NULL;
            }
            rc = 0;
            //  a transport that copies the blocks itself checks each one
            //  in its copy (transport.h); all or none of this fetch's
            if (expect && nexp == n && s->channel
                && pk_channel_expect(s->channel, f->dest, f->sums, n) == 0)
                f->expected = s->channel;
        }
    }
    pk_keymap_fini(&map);
    pk_big_free(a);
    return rc;
}

void
pk_client_fetch_ended(s_server_t *s, s_fetch_t *f)
{
    if (!f->expected)
        return;
    //  the channel of this session still (a reconnect makes a new one,
    //  and the old one's states went with it); it writes the verdicts of
    //  the blocks its copies checked and leaves the others pending
    if (s->channel == f->expected)
        pk_channel_verdicts(s->channel, f->dest, f->verdict, f->n);
    f->expected = NULL;
}

bool
pk_client_fetch_check(p2pkv_client_t *c, s_server_t *s, s_fetch_t *f)
{
    if (!f->dest) {                 //  nothing announced: landed unchecked
        c->unchecked += f->blocks;
        return true;
    }
    size_t checked = 0, corrupt = 0;
    bool hostile = false;
    unsigned limit = c->config.max_corrupt ? c->config.max_corrupt : 8;
    for (size_t i = 0; i < f->n; i++) {
        if (f->verdict[i] == PK_VERDICT_NONE)
            continue;
        //  checked in the copy already (pk_client_fetch_ended), else here,
        //  block by block, read back from memory after the round landed
        bool ok = f->verdict[i] == S_PENDING
                  ? pk_checksum(c->pool + (size_t) f->dest[i] * c->block_len, c->block_len)
                    == f->sums[i]
                  : f->verdict[i] == PK_VERDICT_OK;
        f->verdict[i] = ok ? PK_VERDICT_OK : PK_VERDICT_CORRUPT;
        if (ok) {
            checked++;
            s->corrupt_run = 0;
            continue;
        }
        corrupt++;
        if (++s->corrupt_run == limit)
            hostile = true;
    }
    c->checked += checked;
    c->corrupt += corrupt;
    c->unchecked += f->n - checked - corrupt;
    if (hostile) {
        char why[128];
        snprintf(why, sizeof why, "hostile: %u blocks in a row failed their checksums", limit);
        c->hostile++;
        s->corrupt_run = 0;
        pk_client_session_lost(s->session, why);
    }
    return corrupt == 0;
}

void
pk_client_fetch_free(s_fetch_t *f)
{
    if (f) {
        pk_big_free(f->sums);
        free(f->get_dest);
        free(f->get_kv);
        free(f->get_request);
    }
    free(f);
}
