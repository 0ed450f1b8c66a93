/*  dir_entry.c: the directory's URL, Redis key names and the server
    record's JSON (dir_entry.h).  */
#include "cluster/dir_entry.h"
#include "base/err.h"
#include "base/key.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

//  The record's version: a reader skips records of another one (counted
//  as junk) instead of guessing at their fields.
#define S_VERSION 1

static int
s_url_bad(char *err, const char *url)
{
    _Static_assert(PK_DIR_MAX_SEEDS == 16, "PK_DIR_URL_FORM says 16 nodes");
    return pk_err(err, -EINVAL, "--directory: expected " PK_DIR_URL_FORM ", got \"%.150s\"",
                  url);
}

//  A decimal in lo..hi, the whole of [s, end): 0 or -1.
static int
s_number(const char *s, const char *end, long lo, long hi, int *out)
{
    if (s == end || end - s > 6)
        return -1;
    long v = 0;
    for (const char *c = s; c < end; c++) {
        if (*c < '0' || *c > '9')
            return -1;
        v = v * 10 + (*c - '0');
    }
    if (v < lo || v > hi)
        return -1;
    *out = (int) v;
    return 0;
}

//  One HOST:PORT of [s, end) into node: 0 or -1.
static int
s_node_parse(const char *s, const char *end, pk_dir_node_t *node)
{
    const char *host = s, *host_end, *colon;
    if (*host == '[') {                     //  [IPv6]:PORT
        host_end = memchr(host, ']', (size_t) (end - host));
        if (!host_end || host_end + 1 >= end || host_end[1] != ':')
            return -1;
        host++;
        colon = host_end + 1;
    }
    else {
        colon = memchr(host, ':', (size_t) (end - host));
        host_end = colon;
    }
    if (!colon || host_end == host || (size_t) (host_end - host) > PK_DIR_MAX_HOST)
        return -1;
    for (const char *c = host; c < host_end; c++)
        if (*c <= ' ' || *c == '/' || *c == '@' || *c == ','
            || (unsigned char) *c >= 0x7f)
            return -1;
    if (s_number(colon + 1, end, 1, 65535, &node->port) != 0)
        return -1;
    memcpy(node->host, host, (size_t) (host_end - host));
    node->host[host_end - host] = '\0';
    return 0;
}

int
pk_dir_url_parse(const char *url, pk_dir_url_t *out, char *err)
{
    static const char scheme[] = "redis://";
    if (!url || strncmp(url, scheme, sizeof scheme - 1) != 0)
        return s_url_bad(err, url ? url : "");
    const char *at = url + sizeof scheme - 1;
    //  the DB is after the last node: the first '/' past any [IPv6]
    const char *close = strrchr(at, ']');
    const char *slash = strchr(close ? close : at, '/');
    const char *nodes_end = slash ? slash : at + strlen(at);
    pk_dir_url_t *u = calloc(1, sizeof *u);
    if (!u)
        return pk_err(err, -ENOMEM, "out of memory");
    int rc = 0;
    while (rc == 0) {
        const char *comma = memchr(at, ',', (size_t) (nodes_end - at));
        //  a comma inside [IPv6] is not a separator, but none is valid there
        const char *end = comma ? comma : nodes_end;
        if (u->nnodes == PK_DIR_MAX_SEEDS || s_node_parse(at, end, &u->node[u->nnodes]) != 0)
            rc = s_url_bad(err, url);
        else
            u->nnodes++;
        if (!comma)
            break;
        at = comma + 1;
    }
    if (rc == 0 && slash && s_number(slash + 1, slash + 1 + strlen(slash + 1), 0, 15, &u->db) != 0)
        rc = s_url_bad(err, url);
    if (rc == 0 && out) {
        u->nseeds = u->nnodes;
        *out = *u;
    }
    free(u);
    return rc;
}

void
pk_dir_url_learn(pk_dir_url_t *self, const char *host, int port)
{
    if (!host || !*host || strlen(host) > PK_DIR_MAX_HOST || self->nnodes == PK_DIR_MAX_NODES)
        return;
    for (size_t i = 0; i < self->nnodes; i++)
        if (self->node[i].port == port && strcmp(self->node[i].host, host) == 0)
            return;
    pk_dir_node_t *n = &self->node[self->nnodes++];
    n->port = port;
    snprintf(n->host, sizeof n->host, "%s", host);
}

char *
pk_dir_record_encode(const pk_dir_record_t *r)
{
    json_t *o = json_pack("{s:i, s:s, s:s, s:s, s:I, s:I, s:s, s:s, s:s}", "v", S_VERSION,
                          "peer_id", r->peer_id, "endpoint", r->endpoint, "host", r->host,
                          "block_len", (json_int_t) r->block_len, "pool_blocks",
                          (json_int_t) r->pool_blocks, "provider", r->provider,
                          "fingerprint", r->fingerprint, "host_id", r->host_id);
    //  no list: the record says what an older server's says, its provider
    json_t *providers = r->nproviders ? json_array() : NULL;
    for (size_t i = 0; providers && i < r->nproviders; i++)
        json_array_append_new(providers, json_string(r->providers[i]));
    if (o && providers && json_object_set_new(o, "providers", providers) != 0) {
        json_decref(o);
        o = NULL;
    }
    else if (!o)
        json_decref(providers);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return text;
}

//  Copies a string of at most cap - 1 bytes: 0 or -1.
static int
s_string(const json_t *v, char *out, size_t cap, bool nonempty)
{
    if (!json_is_string(v))
        return -1;
    size_t len = json_string_length(v);
    if (len >= cap || (nonempty && len == 0) || memchr(json_string_value(v), 0, len))
        return -1;
    memcpy(out, json_string_value(v), len + 1);
    return 0;
}

//  A string member, as s_string.
static int
s_field(json_t *o, const char *name, char *out, size_t cap, bool nonempty)
{
    return s_string(json_object_get(o, name), out, cap, nonempty);
}

//  providers and host_id came later: absent, the record is an older
//  server's (its one provider, no identity); present, they must be right.
//  0 or -1.
static int
s_later_fields(json_t *o, pk_dir_record_t *out)
{
    json_t *list = json_object_get(o, "providers");
    out->nproviders = 0;
    out->host_id[0] = '\0';
    if (!list) {
        snprintf(out->providers[0], sizeof out->providers[0], "%s", out->provider);
        out->nproviders = *out->provider != '\0';
    }
    else if (!json_is_array(list) || json_array_size(list) == 0
             || json_array_size(list) > PK_DIR_MAX_PROVIDERS)
        return -1;
    for (size_t i = 0; list && i < json_array_size(list); i++) {
        if (s_string(json_array_get(list, i), out->providers[i], sizeof out->providers[i],
                     true) != 0)
            return -1;
        out->nproviders++;
    }
    if (json_object_get(o, "host_id")
        && s_field(o, "host_id", out->host_id, sizeof out->host_id, false) != 0)
        return -1;
    return 0;
}

int
pk_dir_record_parse(const char *text, size_t len, pk_dir_record_t *out)
{
    json_t *o = text ? json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
    json_t *v = json_object_get(o, "v");
    json_t *bl = json_object_get(o, "block_len");
    json_t *pb = json_object_get(o, "pool_blocks");
    int rc = -EINVAL;
    if (json_is_integer(v) && json_integer_value(v) == S_VERSION && json_is_integer(bl)
        && json_integer_value(bl) > 0 && json_is_integer(pb) && json_integer_value(pb) > 0
        && s_field(o, "peer_id", out->peer_id, sizeof out->peer_id, true) == 0
        && s_field(o, "endpoint", out->endpoint, sizeof out->endpoint, true) == 0
        && s_field(o, "host", out->host, sizeof out->host, false) == 0
        && s_field(o, "provider", out->provider, sizeof out->provider, false) == 0
        && s_field(o, "fingerprint", out->fingerprint, sizeof out->fingerprint, false) == 0
        && s_later_fields(o, out) == 0) {
        out->block_len = (uint64_t) json_integer_value(bl);
        out->pool_blocks = (uint64_t) json_integer_value(pb);
        rc = 0;
    }
    json_decref(o);
    return rc;
}

int
pk_dir_key_name(const uint8_t *key, size_t len, char *out, size_t cap)
{
    size_t need = PK_DIR_KEY_NAME_LEN(len);
    if (need > cap)
        return -ENOSPC;
    memcpy(out, PK_DIR_KEY_PREFIX, sizeof PK_DIR_KEY_PREFIX - 1);
    pk_hex_encode(key, len, out + sizeof PK_DIR_KEY_PREFIX - 1);
    return (int) (need - 1);
}

static int
s_name(char *out, size_t cap, const char *fmt, const char *peer_id)
{
    int n = snprintf(out, cap, fmt, peer_id);
    return n < 0 || (size_t) n >= cap ? -ENOSPC : n;
}

int
pk_dir_record_name(const char *peer_id, char *out, size_t cap)
{
    return s_name(out, cap, PK_DIR_SERVERS ":rec:%s", peer_id);
}

int
pk_dir_held_name(const char *peer_id, char *out, size_t cap)
{
    return s_name(out, cap, "p2pkv:held:{%s}", peer_id);
}
