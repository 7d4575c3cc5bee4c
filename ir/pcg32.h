/* pcg32.h - PCG32 random numbers (64-bit state, XSH-RR output), written from
 * M. O'Neill's published description (2014).  Lives in ir/ because both the
 * executors (parameter values) and the search (rollouts) need it and neither
 * may depend on the other.  A generator is a plain struct: one per thread. */
#ifndef CARVE_PCG32_H
#define CARVE_PCG32_H

#include <stdint.h>

typedef struct pcg32 {
    uint64_t state;
    uint64_t inc; /* always odd: selects the stream */
} pcg32;

/* Seeds generator `r` with initial state `seed` on stream `seq`. */
void pcg32_seed(pcg32 *r, uint64_t seed, uint64_t seq);
uint32_t pcg32_next(pcg32 *r);
/* Uniform in [0, bound) without modulo bias; bound > 0. */
uint32_t pcg32_below(pcg32 *r, uint32_t bound);
/* Moves the generator `delta` steps ahead in O(log delta) (Brown's LCG jump). */
void pcg32_advance(pcg32 *r, uint64_t delta);
/* Uniform in [0, 1). */
double pcg32_double(pcg32 *r);

/* Counter-based numbers: a pure function of (key, index[0..n)), with no
 * state, so any block of a tensor can be drawn alone (dropout masks drawn
 * from global element coordinates).  The key and each coordinate in turn go
 * through SplitMix64's finalizer (h = mix(h ^ index[d])); the last word
 * takes one PCG32 step and PCG32's output function.  n >= 1.
 * pcg32_counter(key, n, index) = pcg32_counter_last(pcg32_counter_prefix(
 * key, n - 1, index), index[n - 1]): a kernel hashes a row's leading
 * coordinates once. */
uint32_t pcg32_counter(uint64_t key, int n, const int64_t *index);
uint64_t pcg32_counter_prefix(uint64_t key, int n, const int64_t *index);
uint32_t pcg32_counter_last(uint64_t prefix, int64_t last);

#endif
