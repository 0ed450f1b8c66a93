/*  tenants.c: the --tenants file, parsed into namespace names and a map
    from CURVE key to namespace.

    The keys are held in one array (with the line that named each, for the
    duplicate's message) and indexed by a keymap built once the file is
    read, so the array never moves under the map's views.  A lookup is one
    SipHash and one probe, paid once per session start.
*/
#include "daemon/tenants.h"
#include "base/err.h"
#include "base/keymap.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

typedef struct {
    char key[PK_CURVE_KEY_Z85 + 1];
    unsigned ns;
    size_t line;
} s_entry_t;

struct _pk_tenants_t {
    char names[PK_NS_MAX][PK_NS_MAX_NAME + 1];
    size_t count;               //  names in use, shared included
    unsigned fallback;          //  the `*` line's namespace, else shared
    size_t fallback_line;       //  0: no `*` line
    s_entry_t *entries;
    size_t nentries, cap;
    pk_keymap_t by_key;         //  key -> a: index into entries
};

static const char s_z85[] =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

bool
pk_tenants_name_ok(const char *name)
{
    size_t len = name ? strlen(name) : 0;
    if (len < 1 || len > PK_NS_MAX_NAME || !(islower((unsigned char) name[0])
                                             || isdigit((unsigned char) name[0])))
        return false;
    for (size_t i = 0; i < len; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyz0123456789_-", name[i]))
            return false;
    return true;
}

//  40 characters of the Z85 alphabet that decode to 32 bytes (a group of
//  five may still overflow 32 bits, which zmq_z85_decode refuses).
static bool
s_key_ok(const char *key)
{
    uint8_t raw[32];
    if (strlen(key) != PK_CURVE_KEY_Z85 || strspn(key, s_z85) != PK_CURVE_KEY_Z85)
        return false;
    for (size_t i = 0; i < PK_CURVE_KEY_Z85; i += 5) {
        //  each group's value must fit 32 bits: 84 * 85^4 + ... < 2^32
        uint64_t v = 0;
        for (size_t j = 0; j < 5; j++)
            v = v * 85 + (uint64_t) (strchr(s_z85, key[i + j]) - s_z85);
        if (v > UINT32_MAX)
            return false;
    }
    return zmq_z85_decode(raw, key) != NULL;
}

//  The namespace called name, added if new: its id, or -ENOSPC.
static int
s_intern(pk_tenants_t *self, const char *name)
{
    for (size_t i = 0; i < self->count; i++)
        if (strcmp(self->names[i], name) == 0)
            return (int) i;
    if (self->count == PK_NS_MAX)
        return -ENOSPC;
    snprintf(self->names[self->count], sizeof self->names[0], "%s", name);
    return (int) self->count++;
}

static int
s_add_entry(pk_tenants_t *self, const char *key, unsigned ns, size_t line)
{
    if (self->nentries == self->cap) {
        size_t cap = self->cap ? 2 * self->cap : 16;
        s_entry_t *grown = realloc(self->entries, cap * sizeof *grown);
        if (!grown)
            return -ENOMEM;
        self->entries = grown;
        self->cap = cap;
    }
    s_entry_t *e = &self->entries[self->nentries++];
    snprintf(e->key, sizeof e->key, "%s", key);
    e->ns = ns;
    e->line = line;
    return 0;
}

//  One line (NUL-terminated, no newline): 0, or -EINVAL/-ENOMEM/-ENOSPC
//  with err naming where.
static int
s_line(pk_tenants_t *self, char *text, const char *where, size_t line, char *err)
{
    char *save = NULL;
    char *key = strtok_r(text, " \t\r", &save);
    if (!key || (key[0] == '#' && key[1] == '\0'))
        return 0;               //  blank, or a comment: "#" then a blank or nothing
    char *name = strtok_r(NULL, " \t\r", &save);
    if (!name || strtok_r(NULL, " \t\r", &save))
        return pk_err(err, -EINVAL, "%s:%zu: expected KEY NAMESPACE (KEY a Z85 CURVE public "
                      "key or *)", where, line);
    if (!pk_tenants_name_ok(name))
        return pk_err(err, -EINVAL, "%s:%zu: namespace \"%.40s\": expected 1..%d of a-z 0-9 "
                      "_ -, the first a letter or digit", where, line, name, PK_NS_MAX_NAME);
    int ns = s_intern(self, name);
    if (ns < 0)
        return pk_err(err, ns, "%s:%zu: more than %d namespaces", where, line, PK_NS_MAX);
    if (strcmp(key, "*") == 0) {
        if (self->fallback_line)
            return pk_err(err, -EINVAL, "%s:%zu: a second * line (the first is line %zu)",
                          where, line, self->fallback_line);
        self->fallback = (unsigned) ns;
        self->fallback_line = line;
        return 0;
    }
    if (!s_key_ok(key))
        return pk_err(err, -EINVAL, "%s:%zu: key \"%.48s\": expected a CURVE public key in "
                      "Z85 (%d characters)", where, line, key, PK_CURVE_KEY_Z85);
    return s_add_entry(self, key, (unsigned) ns, line) ? pk_err(err, -ENOMEM, "out of memory")
                                                       : 0;
}

//  The keys' index, built once every line is in: a duplicate is an error.
static int
s_index(pk_tenants_t *self, const char *where, char *err)
{
    if (pk_keymap_reserve(&self->by_key, self->nentries) < 0)
        return pk_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < self->nentries; i++) {
        s_entry_t *e = &self->entries[i];
        pk_key_t k = pk_key_make((const uint8_t *) e->key, PK_CURVE_KEY_Z85);
        pk_keymap_entry_t *at;
        int rc = pk_keymap_get_or_put(&self->by_key, &k, i, 0, &at);
        if (rc < 0)
            return pk_err(err, rc, "out of memory");
        if (rc == 0)
            return pk_err(err, -EINVAL, "%s:%zu: key already listed on line %zu", where,
                          e->line, self->entries[at->a].line);
    }
    return 0;
}

static pk_tenants_t *
s_parse(FILE *file, const char *where, char *err, int *rc_p)
{
    pk_tenants_t *self = calloc(1, sizeof *self);
    if (!self)
        return pk_err_null(rc_p, pk_err(err, -ENOMEM, "out of memory"));
    snprintf(self->names[0], sizeof self->names[0], "%s", PK_NS_SHARED_NAME);
    self->count = 1;
    self->by_key = (pk_keymap_t) PK_KEYMAP_INIT;
    char *text = NULL;
    size_t cap = 0, line = 0;
    int rc = 0;
    ssize_t got;
    while (rc == 0 && (got = getline(&text, &cap, file)) >= 0) {
        line++;
        size_t len = (size_t) got;
        if (len && text[len - 1] == '\n')
            text[--len] = '\0';
        if (strlen(text) != len)
            rc = pk_err(err, -EINVAL, "%s:%zu: a NUL byte", where, line);
        else
            rc = s_line(self, text, where, line, err);
    }
    free(text);
    if (rc == 0 && ferror(file))
        rc = pk_err(err, -EIO, "%s: read error", where);
    if (rc == 0)
        rc = s_index(self, where, err);
    if (rc) {
        pk_tenants_destroy(&self);
        return pk_err_null(rc_p, rc);
    }
    if (rc_p)
        *rc_p = 0;
    return self;
}

pk_tenants_t *
pk_tenants_load(const char *path, int *rc_p, char *err)
{
    FILE *file = path ? fopen(path, "r") : NULL;
    if (!file) {
        int rc = path ? -errno : -EINVAL;
        return pk_err_null(rc_p, pk_err(err, rc, "%s: %s", path ? path : "(null)",
                                        strerror(-rc)));
    }
    pk_tenants_t *self = s_parse(file, path, err, rc_p);
    fclose(file);
    return self;
}

pk_tenants_t *
pk_tenants_parse(const char *text, const char *where, int *rc_p, char *err)
{
    //  fmemopen wants at least one byte: an empty text reads as one blank line.
    if (text && !*text)
        text = "\n";
    FILE *file = text ? fmemopen((void *) text, strlen(text), "r") : NULL;
    if (!file)
        return pk_err_null(rc_p, pk_err(err, -EINVAL, "%s: no text", where));
    pk_tenants_t *self = s_parse(file, where, err, rc_p);
    fclose(file);
    return self;
}

void
pk_tenants_destroy(pk_tenants_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pk_keymap_fini(&(*self_p)->by_key);
    free((*self_p)->entries);
    free(*self_p);
    *self_p = NULL;
}

int
pk_tenants_reload(pk_tenants_t *self, const char *path, char *err)
{
    if (!self)
        return pk_err(err, -EINVAL, "no --tenants map to reload");
    int rc;
    pk_tenants_t *fresh = pk_tenants_load(path, &rc, err);
    if (!fresh)
        return rc;
    for (size_t i = 1; i < fresh->count; i++)
        if (pk_tenants_find(self, fresh->names[i]) < 0) {
            rc = pk_err(err, -EINVAL, "%s: namespace \"%s\" is new: the namespaces are fixed "
                        "at start (restart the server to add one)", path, fresh->names[i]);
            pk_tenants_destroy(&fresh);
            return rc;
        }
    //  Renumbered into the running map's ids; the names stay as they are.
    for (size_t i = 0; i < fresh->nentries; i++)
        fresh->entries[i].ns = (unsigned) pk_tenants_find(self, fresh->names[fresh->entries[i].ns]);
    fresh->fallback = (unsigned) pk_tenants_find(self, fresh->names[fresh->fallback]);
    memcpy(fresh->names, self->names, sizeof self->names);
    fresh->count = self->count;
    pk_keymap_fini(&self->by_key);
    free(self->entries);
    *self = *fresh;
    free(fresh);                //  its map and entries are self's now
    return 0;
}

size_t
pk_tenants_count(const pk_tenants_t *self)
{
    return self ? self->count : 1;
}

const char *
pk_tenants_name(const pk_tenants_t *self, size_t ns)
{
    return ns < pk_tenants_count(self) ? (self ? self->names[ns] : PK_NS_SHARED_NAME) : NULL;
}

int
pk_tenants_find(const pk_tenants_t *self, const char *name)
{
    if (!name || strcmp(name, PK_NS_SHARED_NAME) == 0)
        return PK_NS_SHARED;
    for (size_t i = 1; self && i < self->count; i++)
        if (strcmp(self->names[i], name) == 0)
            return (int) i;
    return -ENOENT;
}

size_t
pk_tenants_of(const pk_tenants_t *self, const char *curve_key)
{
    if (!self)
        return PK_NS_SHARED;
    if (curve_key && strlen(curve_key) == PK_CURVE_KEY_Z85) {
        pk_key_t k = pk_key_make((const uint8_t *) curve_key, PK_CURVE_KEY_Z85);
        pk_keymap_entry_t *e = pk_keymap_find(&self->by_key, &k);
        if (e)
            return self->entries[e->a].ns;
    }
    return self->fallback;
}
