/* bench_util.h - timing helpers shared by the benchmark programs, their
 * smoke mode and their own checks. */
#ifndef CARVE_BENCH_UTIL_H
#define CARVE_BENCH_UTIL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double bench_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of x[0..n), n >= 1 (x is left as it is). */
static inline double bench_median(const double *x, int n)
{
    if (n < 1) abort(); /* also tells gcc -O1 (./build.sh asan) that n * 8 cannot wrap */
    double *s = malloc((size_t)n * sizeof *s);
    if (!s) abort();
    for (int i = 0; i < n; i++) s[i] = x[i];
    qsort(s, (size_t)n, sizeof *s, bench_cmp_double);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

/* ---- smoke mode and the bench's own checks ------------------------------
 * Every bench program takes `--smoke`: its cases at tiny sizes, a few
 * seconds, what tests/e2e_bench.sh runs in `./build.sh test`, so that a bench
 * that no longer runs, or whose own checks fail, fails the suite instead of
 * rotting.  The checks (bench_check) are what the bench can know is wrong
 * whatever the machine: a run that disagrees with the reference, a search
 * that ends worse than the plan it started from, a price that changes when
 * asked twice; never a time or a target, which are reported, not judged.
 * They run in both modes: a failed one prints a FAIL line (stderr) and makes
 * bench_finish return 1.  In smoke mode every check prints a line on stderr
 * and bench_finish prints the closing "N passed, N failed" line the test
 * runner reads. */
typedef struct bench_state {
    int smoke, passed, failed;
} bench_state;

static inline bench_state *bench_st(void)
{
    static bench_state s;
    return &s;
}

/* 1 in smoke mode. */
static inline int bench_is_smoke(void) { return bench_st()->smoke; }

/* Takes `--smoke` out of argv (returns the new argc) and sets smoke mode. */
static inline int bench_parse_smoke(int argc, char **argv)
{
    int n = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--smoke")) bench_st()->smoke = 1;
        else argv[n++] = argv[i];
    }
    argv[n] = NULL;
    return n;
}

/* Counts one of the bench's own checks; returns ok. */
static inline int bench_check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int bench_check(int ok, const char *fmt, ...)
{
    bench_state *s = bench_st();
    if (ok) s->passed++;
    else s->failed++;
    if (ok && !s->smoke) return ok;
    va_list ap;
    va_start(ap, fmt);
    fputs(ok ? "ok   " : "FAIL ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return ok;
}

/* The program's exit status: 1 when a check failed or status is non-zero.
 * In smoke mode it prints the closing line first (a non-zero status with no
 * failed check counts as one failure). */
static inline int bench_finish(int status)
{
    bench_state *s = bench_st();
    if (status && !s->failed) bench_check(0, "the bench stopped with status %d", status);
    fflush(stdout);
    if (s->smoke) fprintf(stderr, "%d passed, %d failed\n", s->passed, s->failed);
    return s->failed ? 1 : 0;
}

#endif
