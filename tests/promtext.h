/*  promtext.h: a strict checker of the Prometheus text exposition format,
    version 0.0.4, for the tests.

    Every line is # HELP, # TYPE or a sample; metric and label names use
    their charsets, label values and help only their escapes, values are
    floats (NaN, +Inf, -Inf included) with an optional integer timestamp;
    a family's TYPE comes once and before its samples; no series repeats;
    a histogram's _bucket series per label set rise with le, are
    cumulative, end at le="+Inf", and are followed by _sum and a _count
    equal to the +Inf bucket.
*/
#ifndef PK_TEST_PROMTEXT_H_INCLUDED
#define PK_TEST_PROMTEXT_H_INCLUDED

#include <stddef.h>

/*  NULL if the len bytes of text are valid, else a description of the
    first fault (a static buffer, overwritten by the next call).  */
const char *pt_validate(const char *text, size_t len);

#endif
