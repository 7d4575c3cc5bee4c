/* pcg32.c - see pcg32.h. */
#include "pcg32.h"

#define PCG32_MULT 6364136223846793005ull

/* PCG32's output function (XSH-RR) of a 64-bit state. */
static uint32_t output(uint64_t old)
{
    uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u);
    uint32_t rot = (uint32_t)(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((-rot) & 31u));
}

uint32_t pcg32_next(pcg32 *r)
{
    uint64_t old = r->state;
    r->state = old * PCG32_MULT + r->inc;
    return output(old);
}

/* SplitMix64's finalizer (Steele, Lea and Flood, "Fast splittable
 * pseudorandom number generators", OOPSLA 2014): a bijection of 64-bit
 * words in which every input bit changes about half of the output bits. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t pcg32_counter_prefix(uint64_t key, int n, const int64_t *index)
{
    uint64_t h = mix64(key + 0x9e3779b97f4a7c15ull);
    for (int d = 0; d < n; d++) h = mix64(h ^ (uint64_t)index[d]);
    return h;
}

uint32_t pcg32_counter_last(uint64_t prefix, int64_t last)
{
    return output(mix64(prefix ^ (uint64_t)last) * PCG32_MULT + 1442695040888963407ull);
}

uint32_t pcg32_counter(uint64_t key, int n, const int64_t *index)
{
    return pcg32_counter_last(pcg32_counter_prefix(key, n - 1, index), index[n - 1]);
}

void pcg32_seed(pcg32 *r, uint64_t seed, uint64_t seq)
{
    r->state = 0;
    r->inc = (seq << 1u) | 1u;
    pcg32_next(r);
    r->state += seed;
    pcg32_next(r);
}

uint32_t pcg32_below(pcg32 *r, uint32_t bound)
{
    uint32_t threshold = (uint32_t)(-bound) % bound;
    for (;;) {
        uint32_t x = pcg32_next(r);
        if (x >= threshold) return x % bound;
    }
}

double pcg32_double(pcg32 *r) { return (double)pcg32_next(r) * (1.0 / 4294967296.0); }

void pcg32_advance(pcg32 *r, uint64_t delta)
{
    uint64_t mult = PCG32_MULT, plus = r->inc, acc_mult = 1, acc_plus = 0;
    while (delta) {
        if (delta & 1) {
            acc_mult *= mult;
            acc_plus = acc_plus * mult + plus;
        }
        plus = (mult + 1) * plus;
        mult *= mult;
        delta >>= 1;
    }
    r->state = acc_mult * r->state + acc_plus;
}
