/* pcg32.c - see pcg32.h. */
#include "pcg32.h"

#define PCG32_MULT 6364136223846793005ull

uint32_t pcg32_next(pcg32 *r)
{
    uint64_t old = r->state;
    r->state = old * PCG32_MULT + r->inc;
    uint32_t xorshifted = (uint32_t)(((old >> 18u) ^ old) >> 27u);
    uint32_t rot = (uint32_t)(old >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((-rot) & 31u));
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
