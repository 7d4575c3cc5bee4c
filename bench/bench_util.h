/* bench_util.h - timing helpers shared by the benchmark programs. */
#ifndef CARVE_BENCH_UTIL_H
#define CARVE_BENCH_UTIL_H

#include <stdlib.h>
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
    double *s = malloc((size_t)n * sizeof *s);
    if (!s) abort();
    for (int i = 0; i < n; i++) s[i] = x[i];
    qsort(s, (size_t)n, sizeof *s, bench_cmp_double);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

#endif
