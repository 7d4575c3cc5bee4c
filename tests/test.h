/* test.h - the one assertion macro every test program uses (chibicc style).
 * A test program calls CHECK as often as it likes and ends with
 * `return test_done();`, which prints "N passed, N failed" as its last line
 * and returns non-zero when anything failed. */
#ifndef CARVE_TEST_H
#define CARVE_TEST_H

#include <stdio.h>

static int test_passed, test_failed;

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

static inline int test_done(void)
{
    printf("%d passed, %d failed\n", test_passed, test_failed);
    return test_failed != 0;
}

#endif
