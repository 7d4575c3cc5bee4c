/* test.h - the one assertion macro every test program uses (chibicc style).
 * A test program calls CHECK as often as it likes and ends with
 * `return test_done();`, which prints "N passed, N failed" as its last line
 * ("N passed, N failed, N skipped" when SKIP was called) and returns
 * non-zero when anything failed.
 *
 * A CHECK states a fact about work already done: call the function, keep
 * its result, then CHECK the result.  A call that changes state inside a
 * CHECK hides the work from the reader, and after && or || it may not run
 * at all while the test goes on with the state it did not make. */
#ifndef CARVE_TEST_H
#define CARVE_TEST_H

#include <stdio.h>

static int test_passed, test_failed, test_skipped;

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (cond) test_passed++;                                                        \
        else {                                                                          \
            test_failed++;                                                              \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);   \
        }                                                                               \
    } while (0)

/* CHECK with a printf-style explanation printed on failure. */
#define CHECKF(cond, ...)                                                               \
    do {                                                                                \
        if (cond) test_passed++;                                                        \
        else {                                                                          \
            test_failed++;                                                              \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                               \
            fputc('\n', stderr);                                                        \
        }                                                                               \
    } while (0)

/* A check that cannot run here (printf-style reason on stdout): counted in
 * the closing line, never as a pass. */
#define SKIP(...)                                                                       \
    do {                                                                                \
        test_skipped++;                                                                 \
        printf("skip %s:%d: ", __FILE__, __LINE__);                                     \
        printf(__VA_ARGS__);                                                            \
        putchar('\n');                                                                  \
    } while (0)

static inline int test_done(void)
{
    if (test_skipped) printf("%d passed, %d failed, %d skipped\n", test_passed, test_failed, test_skipped);
    else printf("%d passed, %d failed\n", test_passed, test_failed);
    return test_failed != 0;
}

#endif
