/* fuse.h - running a fused elementwise group tile by tile (both executors).
 *
 * The groups are planned once, by analysis/fusion.h (the lowering records a
 * program's groups; the reference plans its graph's with the same function).
 * A group goes through its tensors a tile of FUSE_TILE elements at a time;
 * a member whose result lives in a scratch tile is never written to memory.
 * Each element goes through the same float operations as op by op (the same
 * kernel functions on shorter runs), so a fused run gives the same bits as an
 * unfused one; test_exec checks that.  CARVE_FUSE=0 in the environment plans
 * no group (every op alone, for comparison).
 */
#ifndef CARVE_EXEC_FUSE_H
#define CARVE_EXEC_FUSE_H

#include <stdint.h>

#include "analysis/fusion.h"

#define FUSE_TILE 512 /* elements per tile */

/* Runs the group of `len` members steps[0..len) over numel elements.
 * in[2 * i + k] is member i's operand k when it is read from memory (src
 * -1); out[i] its result buffer when slot is -1. */
void exec_fuse_run(const spmd_fuse_step *steps, int len, int64_t numel, const float *const *in, float *const *out);

#endif
