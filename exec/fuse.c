/* fuse.c - running one planned elementwise group tile by tile (fuse.h). */
#include "exec/fuse.h"

#include "exec/kernels.h"

void exec_fuse_run(const spmd_fuse_step *steps, int len, int64_t numel, const float *const *in, float *const *out)
{
    static _Alignas(64) __thread float tile[FUSE_MAX_SLOTS][FUSE_TILE];
    for (int64_t t0 = 0; t0 < numel; t0 += FUSE_TILE) {
        int64_t n = numel - t0 < FUSE_TILE ? numel - t0 : FUSE_TILE;
        for (int i = 0; i < len; i++) {
            const spmd_fuse_step *st = &steps[i];
            const float *a[2] = {NULL, NULL};
            for (int k = 0; k < st->n_in; k++) {
                int m = st->src[k];
                if (m < 0) a[k] = st->splat ? in[2 * i + k] : in[2 * i + k] + t0;
                else a[k] = steps[m].slot >= 0 ? tile[steps[m].slot] : out[m] + t0;
            }
            float *y = st->slot >= 0 ? tile[st->slot] : out[i] + t0;
            if (st->splat) {
                exec_splat(a[0][0], y, n);
            } else {
                exec_elementwise(st->kind, st->scalar, a[0], a[1], y, n);
            }
        }
    }
}
