/*  tenants.h: which namespace of the block store each consumer sees
    (--tenants FILE).

    The file maps a consumer's identity to a namespace: lines

        KEY NAMESPACE       a consumer's CURVE public key, Z85 (40 chars)
        * NAMESPACE         every consumer the file does not list by key,
                            those without a CURVE key (CURVE off) included

    with blank lines and # comments.  At most one `*` line; without one,
    unlisted consumers are in the shared namespace.  A NAMESPACE is 1..32
    characters of a-z 0-9 _ -, the first a letter or digit; "shared" names
    the shared namespace, which always exists (id PK_NS_SHARED) and which
    every consumer sees beside its own.  The namespaces are exactly those
    the file names (at most PK_NS_MAX, shared included): metrics label
    them, so their number is bounded by the operator, never by a peer.

    Without --tenants there is no map (NULL): every function below takes
    NULL as "the shared namespace only", so the daemon behaves as before.
    Main thread only (the door resolves a consumer's namespace when its
    session starts; the engine API names them; a reload happens there).
*/
#ifndef PK_TENANTS_H_INCLUDED
#define PK_TENANTS_H_INCLUDED

#include "store/namespace.h"

#include <stdbool.h>
#include <stddef.h>

#define PK_NS_MAX_NAME 32
#define PK_NS_SHARED_NAME "shared"
#define PK_CURVE_KEY_Z85 40

typedef struct _pk_tenants_t pk_tenants_t;

/*  Reads the file at path.  NULL on failure with *rc_p (may be NULL) and
    err (PK_ERRLEN bytes, or NULL) naming the file and line, e.g.
    "tenants.conf:3: key already listed on line 1": -EINVAL for a bad
    line, -ENOMEM, or what fopen said.  */
pk_tenants_t *pk_tenants_load(const char *path, int *rc_p, char *err);

/*  The same from text in memory; where names it in errors.  */
pk_tenants_t *pk_tenants_parse(const char *text, const char *where, int *rc_p, char *err);

void pk_tenants_destroy(pk_tenants_t **self_p);

/*  Re-reads path and, if it is good, replaces the key -> namespace map
    (SIGHUP; its caller is the signal handling's, not this module's).
    The namespaces are fixed at start (the store's counters and the
    metrics' label values are sized for them): a file naming a namespace
    the running map does not have is refused (-EINVAL, err naming the
    line), as is any bad file; then the running map stays.  Sessions
    already open keep the namespace they started with.  Returns 0.  */
int pk_tenants_reload(pk_tenants_t *self, const char *path, char *err);

/*  Namespaces, shared included: 1 for NULL.  */
size_t pk_tenants_count(const pk_tenants_t *self);

/*  The name of namespace ns ("shared" for 0), or NULL past the count.  */
const char *pk_tenants_name(const pk_tenants_t *self, size_t ns);

/*  The id of the namespace called name ("shared" or NULL: 0), or -ENOENT.  */
int pk_tenants_find(const pk_tenants_t *self, const char *name);

/*  The namespace of a consumer with CURVE public key curve_key (Z85;
    "" or NULL without CURVE): its line, else the `*` line's, else shared.  */
size_t pk_tenants_of(const pk_tenants_t *self, const char *curve_key);

/*  Whether name is a valid namespace name (the rule above).  */
bool pk_tenants_name_ok(const char *name);

#endif
