/* fuse.c - grouping elementwise chains and running them tile by tile.
 *
 * Planning is one pass over the items: a group starts at a fusible item and
 * takes the following fusible items of the same element count, up to
 * FUSE_MAX_GROUP.  A member's result is written to memory when an item after
 * the group reads it, when nothing reads it, or when the caller observes it;
 * the others get scratch tiles, reused once their last reader in the group
 * has run.  A group that would need more than FUSE_MAX_SLOTS tiles at once is
 * cut before the member that does not fit, and planned again.
 */
#include "exec/fuse.h"

#include "exec/kernels.h"

#include <stdlib.h>
#include <string.h>

int exec_fuse_fusible(ir_opkind k, int n_in, const ir_dtype *in_dtype, const int64_t *in_numel, ir_dtype out_dtype,
                      int64_t numel, int *splat)
{
    *splat = 0;
    if (numel <= 0 || out_dtype == IR_I32) return 0;
    for (int i = 0; i < n_in; i++)
        if (in_dtype[i] == IR_I32) return 0;
    ir_opclass c = ir_op_class(k);
    if (c == IR_UNARY || c == IR_BINARY) {
        for (int i = 0; i < n_in; i++)
            if (in_numel[i] != numel) return 0;
        return 1;
    }
    if (k == IR_OP_BROADCAST && n_in == 1 && in_numel[0] == 1) return *splat = 1;
    return 0;
}

void exec_fuse_describe(exec_fuse_item *x, const ir_graph *g, const ir_op *op, const int *in, const int64_t *in_numel,
                        int out, int64_t numel)
{
    ir_dtype dt[IR_MAX_OPERANDS];
    memset(x, 0, sizeof *x);
    x->kind = op->kind;
    x->scalar = (float)op->attrs.scalar;
    x->n_in = op->n_in;
    for (int k = 0; k < op->n_in; k++) {
        x->in[k] = in[k];
        dt[k] = g->values[op->in[k]].dtype;
    }
    x->out = out;
    x->numel = numel;
    x->fusible = exec_fuse_fusible(op->kind, op->n_in, dt, in_numel, g->values[op->out].dtype, numel, &x->splat);
}

void exec_fuse_plan_free(exec_fuse_plan *pl)
{
    free(pl->len);
    free(pl->step);
    memset(pl, 0, sizeof *pl);
}

/* Plans members [s, s + len): sources, which results stay in tiles, tiles.
 * Returns len, or the number of members that fit in FUSE_MAX_SLOTS tiles. */
static int plan_group(exec_fuse_plan *pl, const exec_fuse_item *it, int s, int len, const int *last_use,
                      const uint8_t *observed)
{
    int e = s + len;
    int slot_free[FUSE_MAX_SLOTS];
    for (int i = 0; i < FUSE_MAX_SLOTS; i++) slot_free[i] = 1;
    for (int j = s; j < e; j++) {
        exec_fuse_step *st = &pl->step[j];
        memset(st, 0, sizeof *st);
        st->kind = it[j].kind;
        st->scalar = it[j].scalar;
        st->n_in = it[j].n_in;
        st->splat = it[j].splat;
        st->src[0] = st->src[1] = -1;
        for (int k = 0; k < it[j].n_in && k < 2; k++)
            for (int m = j - 1; m >= s; m--)
                if (it[m].out == it[j].in[k]) {
                    st->src[k] = m - s;
                    break;
                }
        /* tiles whose last reader is j can be reused after j; j's result
         * needs its own tile first (no aliasing of operand and result) */
        int o = it[j].out, kept = observed && observed[o] ? 1 : last_use[o] < 0 || last_use[o] >= e;
        st->slot = -1;
        if (!kept) {
            for (int t = 0; t < FUSE_MAX_SLOTS && st->slot < 0; t++)
                if (slot_free[t]) st->slot = t;
            if (st->slot < 0) return j - s;
            slot_free[st->slot] = 0;
        }
        for (int k = 0; k < st->n_in; k++) {
            int m = st->src[k];
            if (m >= 0 && pl->step[s + m].slot >= 0 && last_use[it[s + m].out] == j) slot_free[pl->step[s + m].slot] = 1;
        }
    }
    return len;
}

int exec_fuse_plan_build(exec_fuse_plan *pl, const exec_fuse_item *it, int n, int n_ids, const uint8_t *observed)
{
    memset(pl, 0, sizeof *pl);
    pl->len = calloc((size_t)(n ? n : 1), sizeof *pl->len);
    pl->step = calloc((size_t)(n ? n : 1), sizeof *pl->step);
    int *last_use = malloc((size_t)(n_ids ? n_ids : 1) * sizeof *last_use);
    if (!pl->len || !pl->step || !last_use) {
        free(last_use);
        exec_fuse_plan_free(pl);
        return -1;
    }
    for (int i = 0; i < n_ids; i++) last_use[i] = -1;
    for (int j = 0; j < n; j++)
        for (int k = 0; k < it[j].n_in; k++)
            if (it[j].in[k] >= 0) last_use[it[j].in[k]] = j;
    const char *env = getenv("CARVE_FUSE");
    int off = env && !strcmp(env, "0");
    for (int s = 0; s < n;) {
        int len = 1;
        if (!off && it[s].fusible && it[s].out >= 0)
            while (len < FUSE_MAX_GROUP && s + len < n && it[s + len].fusible && it[s + len].out >= 0 &&
                   it[s + len].numel == it[s].numel)
                len++;
        /* cutting a group can only free tiles (fewer results stay in tiles
         * when more readers fall outside it), so this ends */
        for (int fit; len > 1 && (fit = plan_group(pl, it, s, len, last_use, observed)) < len;) len = fit;
        pl->len[s] = len;
        if (len > 1) {
            pl->n_groups++;
            pl->n_fused += len;
        }
        s += len;
    }
    free(last_use);
    return 0;
}

void exec_fuse_run(const exec_fuse_step *steps, int len, int64_t numel, const float *const *in, float *const *out)
{
    static _Alignas(64) __thread float tile[FUSE_MAX_SLOTS][FUSE_TILE];
    for (int64_t t0 = 0; t0 < numel; t0 += FUSE_TILE) {
        int64_t n = numel - t0 < FUSE_TILE ? numel - t0 : FUSE_TILE;
        for (int i = 0; i < len; i++) {
            const exec_fuse_step *st = &steps[i];
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
