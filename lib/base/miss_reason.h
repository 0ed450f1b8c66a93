/*  miss_reason.h: why a lookup key is a miss (protocol.md, capability
    `reasons`; issue 36, point 4).

    The server role answers each missing key with one of these, the wire
    carries each as one letter (a lookup_resp's `reasons`), the consumer
    turns it into its public p2pkv_miss_reason_t, and the server counts
    misses by it (p2pkv_lookup_misses_by_reason_total).  A reason never
    says more than the consumer's namespace may know: a key only another
    tenant holds (or evicted, or is writing) is ABSENT to it.

    Appended only: the wire letters and the metric's label values are
    names operators and old consumers keep.
*/
#ifndef PK_MISS_REASON_H_INCLUDED
#define PK_MISS_REASON_H_INCLUDED

#include <stdint.h>

typedef enum {
    PK_MISS_UNKNOWN = 0,        //  the server could not tell (u)
    PK_MISS_ABSENT,             //  not held here, or held by another namespace only (a)
    PK_MISS_EVICTED,            //  held until the pool evicted it, and still remembered (e)
    PK_MISS_PENDING,            //  being written (or brought up) when the lookup came,
                                //  and not landed by its deadline (p)
    PK_MISS_QUOTA,              //  held, but the consumer's pin quota was full (q)
    PK_MISS_WRITING,            //  reserved by an engine and not committed when the
                                //  answer was made, though not waited for (w)
    PK_MISS_DRAINING,           //  the server is draining (SIGTERM): every key misses (d)
    PK_MISS_COUNT
} pk_miss_reason_t;

/*  The reason's name ("absent", ...), the label value of its metric and
    the word the CLI and the Python package show; "unknown" past the end.  */
const char *pk_miss_reason_name(pk_miss_reason_t reason);

/*  Its one letter on the wire, and back: 0 for a letter that names no
    reason (the codec refuses such a `reasons`).  */
char pk_miss_reason_letter(pk_miss_reason_t reason);
int pk_miss_reason_of_letter(char letter);      //  a pk_miss_reason_t, or -1

#endif
