/*  testutil.h: what every Check suite of p2pkv shares.

    pk_test_run runs a suite and, when the harness passes fd 9 (make check's
    AM_TESTS_FD_REDIRECT), copies Check's summary line there so it reaches
    the terminal instead of only the test's log.  */
#ifndef PK_TESTUTIL_H_INCLUDED
#define PK_TESTUTIL_H_INCLUDED

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline int
pk_test_run(const char *name, Suite *suite)
{
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    int run = srunner_ntests_run(sr);
    if (fcntl(9, F_GETFD) != -1)
        dprintf(9, "%s: %d%%: Checks: %d, Failures: %d\n", name,
                run ? 100 * (run - failed) / run : 0, run, failed);
    srunner_free(sr);
    return failed == 0 && run > 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif
