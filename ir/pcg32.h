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

#endif
