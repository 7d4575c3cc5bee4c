/* hash.h - FNV-1a, the one 64-bit hash of the tree (names in the graph's
 * and the loader's tables, dropout keys, fill seeds, a plan file's hash, the
 * checked run's digests and the ranks' program hash).  FNV-1a as Fowler,
 * Noll and Vo publish it: start at the offset basis, then for each byte
 * h = (h ^ byte) * prime.  ir_fnv_word mixes a whole 64-bit word in one step
 * (not FNV-1a's byte order, but the same offset and prime), for hashes that
 * mix integers rather than bytes.  Lives in ir/ so every layer may use it. */
#ifndef CARVE_HASH_H
#define CARVE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define IR_FNV_OFFSET 1469598103934665603ull
#define IR_FNV_PRIME 1099511628211ull

/* h continued over n bytes at p. */
static inline uint64_t ir_fnv_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * IR_FNV_PRIME;
    return h;
}

/* h continued over the bytes of s (not its terminator). */
static inline uint64_t ir_fnv_str(uint64_t h, const char *s)
{
    for (; *s; s++) h = (h ^ (unsigned char)*s) * IR_FNV_PRIME;
    return h;
}

/* h continued by one whole word x. */
static inline uint64_t ir_fnv_word(uint64_t h, uint64_t x) { return (h ^ x) * IR_FNV_PRIME; }

/* FNV-1a of a string. */
static inline uint64_t ir_fnv(const char *s) { return ir_fnv_str(IR_FNV_OFFSET, s); }

#endif
