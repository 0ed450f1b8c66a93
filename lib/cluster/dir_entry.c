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
    return pk_err(err, -EINVAL, "--directory: expected redis://HOST:PORT[/DB] (PORT 1..65535, "
                  "DB 0..15), got \"%.150s\"", url);
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

int
pk_dir_url_parse(const char *url, pk_dir_url_t *out, char *err)
{
    static const char scheme[] = "redis://";
    if (!url || strncmp(url, scheme, sizeof scheme - 1) != 0)
        return s_url_bad(err, url ? url : "");
    const char *host = url + sizeof scheme - 1, *host_end;
    const char *colon;
    if (*host == '[') {                     //  [IPv6]:PORT
        host_end = strchr(host, ']');
        if (!host_end || host_end[1] != ':')
            return s_url_bad(err, url);
        host++;
        colon = host_end + 1;
    }
    else {
        colon = strchr(host, ':');
        host_end = colon;
    }
    if (!colon || host_end == host || (size_t) (host_end - host) > PK_DIR_MAX_HOST)
        return s_url_bad(err, url);
    for (const char *c = host; c < host_end; c++)
        if (*c <= ' ' || *c == '/' || *c == '@' || (unsigned char) *c >= 0x7f)
            return s_url_bad(err, url);
    const char *port = colon + 1;
    const char *slash = strchr(port, '/');
    const char *port_end = slash ? slash : port + strlen(port);
    pk_dir_url_t u = { .db = 0 };
    if (s_number(port, port_end, 1, 65535, &u.port) != 0
        || (slash && s_number(slash + 1, slash + 1 + strlen(slash + 1), 0, 15, &u.db) != 0))
        return s_url_bad(err, url);
    memcpy(u.host, host, (size_t) (host_end - host));
    u.host[host_end - host] = '\0';
    *out = u;
    return 0;
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
