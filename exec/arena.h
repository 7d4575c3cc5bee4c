/* arena.h - the executors' storage: many buffers in one anonymous mapping.
 *
 * The reference executor keeps every value of a training step and the SPMD
 * runtime every buffer of a device: gigabytes of buffers, first written
 * during the first step.  One mapping with transparent huge pages requested
 * faults them in 2 MiB at a time instead of 4 KiB (a 4 KiB fault costs about
 * 20 us on these virtual machines: 5 GB of small pages is 25 s in the
 * kernel).  Pages are zero until written.
 *
 * Built with AddressSanitizer, each buffer is followed by a poisoned guard,
 * so a kernel that writes past a buffer is caught as it would be with one
 * malloc per buffer.  Guards are not counted in the bytes the executors
 * report (exec_arena_size), only mapped.
 */
#ifndef CARVE_EXEC_ARENA_H
#define CARVE_EXEC_ARENA_H

#include <stddef.h>

typedef struct exec_arena {
    char *base;
    size_t mapped;
} exec_arena;

/* Bytes a buffer of n bytes counts for: n rounded up to 64 (every buffer
 * starts 64-byte aligned). */
size_t exec_arena_size(size_t n);
/* Bytes it takes in the arena's layout: exec_arena_size plus the guard. */
size_t exec_arena_slot(size_t n);
/* Maps `bytes` (a layout made of exec_arena_slot sizes).  Returns 0, or -1
 * when the mapping fails. */
int exec_arena_map(exec_arena *a, size_t bytes);
/* Declares a buffer of n bytes at offset off (makes it addressable and
 * poisons its guard).  Buffers whose lifetimes do not overlap may share
 * memory: the SPMD runtime declares each one again as it is written. */
void exec_arena_place(exec_arena *a, size_t off, size_t n);
void exec_arena_unmap(exec_arena *a);
/* Bytes of the mapping resident in memory now (mincore; 0 on failure).
 * Pages once written stay until unmapped, so after a step this is the
 * arena's peak. */
size_t exec_arena_resident(const exec_arena *a);

#endif
