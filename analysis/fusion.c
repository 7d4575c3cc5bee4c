/* fusion.c - grouping elementwise chains (fusion.h).
 *
 * Planning is one pass over the items: a group starts at a fusible item and
 * takes the following fusible items of the same element count, up to
 * FUSE_MAX_GROUP.  A member's result is written to memory when an item after
 * the group reads it, when nothing reads it, or when the caller observes it;
 * the others get scratch tiles, reused once their last reader in the group
 * has run.  A group that would need more than FUSE_MAX_SLOTS tiles at once is
 * cut before the member that does not fit, and planned again.
 */
#include "fusion.h"
#include "spmd.h"

#include <stdlib.h>
#include <string.h>

int spmd_fuse_disabled_by_env(void)
{
    const char *env = getenv("CARVE_FUSE");
    return env && !strcmp(env, "0");
}

int spmd_fuse_fusible(ir_opkind k, int n_in, const ir_dtype *in_dtype, const int64_t *in_numel, ir_dtype out_dtype,
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

void spmd_fuse_describe(spmd_fuse_item *x, const ir_graph *g, const ir_op *op, const int *in, const int64_t *in_numel,
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
    x->fusible = spmd_fuse_fusible(op->kind, op->n_in, dt, in_numel, g->values[op->out].dtype, numel, &x->splat);
}

void spmd_fuse_plan_free(spmd_fuse_plan *pl)
{
    free(pl->len);
    free(pl->step);
    free(pl->klen);
    free(pl->kfold);
    memset(pl, 0, sizeof *pl);
}

/* Plans members [s, s + len): sources, which results stay in tiles, tiles.
 * Returns len, or the number of members that fit in FUSE_MAX_SLOTS tiles. */
static int plan_group(spmd_fuse_plan *pl, const spmd_fuse_item *it, int s, int len, const int *last_use,
                      const uint8_t *observed)
{
    int e = s + len;
    int slot_free[FUSE_MAX_SLOTS];
    for (int i = 0; i < FUSE_MAX_SLOTS; i++) slot_free[i] = 1;
    for (int j = s; j < e; j++) {
        spmd_fuse_step *st = &pl->step[j];
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

int spmd_fuse_plan_build(spmd_fuse_plan *pl, const spmd_fuse_item *it, int n, int n_ids, const uint8_t *observed,
                         int enabled)
{
    if (n > pl->cap || !pl->len) {
        int cap = n > 256 ? n : 256;
        int *len = realloc(pl->len, (size_t)cap * sizeof *pl->len);
        if (len) pl->len = len;
        spmd_fuse_step *step = realloc(pl->step, (size_t)cap * sizeof *pl->step);
        if (step) pl->step = step;
        if (!len || !step) {
            spmd_fuse_plan_free(pl);
            return -1;
        }
        pl->cap = cap;
    }
    memset(pl->len, 0, (size_t)(n ? n : 1) * sizeof *pl->len);
    pl->n_groups = pl->n_fused = 0;
    int *last_use = malloc((size_t)(n_ids ? n_ids : 1) * sizeof *last_use);
    if (!last_use) return -1;
    for (int i = 0; i < n_ids; i++) last_use[i] = -1;
    for (int j = 0; j < n; j++)
        for (int k = 0; k < it[j].n_in; k++)
            if (it[j].in[k] >= 0) last_use[it[j].in[k]] = j;
    for (int s = 0; s < n;) {
        int len = 1;
        if (enabled && it[s].fusible && it[s].out >= 0)
            while (len < FUSE_MAX_GROUP && s + len < n && it[s + len].fusible && it[s + len].out >= 0 &&
                   it[s + len].numel == it[s].numel && !it[s + len].cut)
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


static int64_t buf_numel(const spmd_program *p, int b)
{
    int64_t dims[IR_MAX_RANK], n = 1;
    spmd_buffer_dims(p, b, dims);
    for (int d = 0; d < p->g->values[p->bufs[b].value].rank; d++) n *= dims[d];
    return n;
}

/* Every buffer's local element count (the planners read each several times). */
static int64_t *buffer_numels(const spmd_program *p)
{
    int64_t *numel = ir_xrealloc(NULL, (size_t)(p->n_bufs ? p->n_bufs : 1) * sizeof *numel);
    for (int b = 0; b < p->n_bufs; b++) numel[b] = buf_numel(p, b);
    return numel;
}

static void plan_kernels(spmd_program *p, int enabled, const int64_t *numel);

/* Collectives are items too (not fusible), so a buffer they read is written
 * to memory; the outputs are observed (the executor assembles them). */
void spmd_plan_fusion(spmd_program *p)
{
    const ir_graph *g = p->g;
    int n = p->n_instrs;
    spmd_fuse_item *it = ir_xcalloc((size_t)(n ? n : 1), sizeof *it);
    uint8_t *observed = ir_xcalloc((size_t)(p->n_bufs ? p->n_bufs : 1), 1);
    int64_t *numel = buffer_numels(p);
    for (int i = 0; i < g->n_outputs; i++) observed[p->out_buf[i]] = 1;
    for (int i = 0; i < n; i++) {
        const spmd_instr *in = &p->instrs[i];
        spmd_fuse_item *x = &it[i];
        int cut = p->segment && i > 0 && p->segment[i] != p->segment[i - 1];
        if (in->kind == SPMD_COMPUTE) {
            const ir_op *op = &g->ops[in->op];
            int64_t in_numel[IR_MAX_OPERANDS];
            for (int k = 0; k < op->n_in; k++) in_numel[k] = numel[in->in[k]];
            spmd_fuse_describe(x, g, op, in->in, in_numel, in->out, numel[in->out]);
            x->cut = cut;
            continue;
        }
        x->out = in->out;
        for (int k = 0; k < IR_MAX_OPERANDS; k++)
            if (in->in[k] >= 0) x->in[x->n_in++] = in->in[k];
    }
    if (spmd_fuse_plan_build(&p->fuse, it, n, p->n_bufs, observed, p->opts.fuse) < 0) ir_oom(0);
    free(it);
    free(observed);
    plan_kernels(p, p->opts.fuse, numel);
    free(numel);
}

/* ---- accelerator kernels (fusion.h, spmd_plan_kernels) ------------------- */

enum { KC_OTHER, KC_ELEM, KC_REDUCE, KC_EINSUM };

/* What an instruction is to the kernel planner; *row: a reduction over the
 * trailing dims of its operand. */
static int kernel_class(const spmd_program *p, const spmd_instr *in, int *row)
{
    *row = 0;
    if (in->kind != SPMD_COMPUTE) return KC_OTHER;
    const ir_graph *g = p->g;
    const ir_op *op = &g->ops[in->op];
    if (g->values[op->out].dtype == IR_I32) return KC_OTHER;
    for (int k = 0; k < op->n_in; k++)
        if (g->values[op->in[k]].dtype == IR_I32) return KC_OTHER;
    ir_opclass c = ir_op_class(op->kind);
    /* a dropout mask is drawn inside the kernel from its coordinates */
    if (c == IR_UNARY || c == IR_BINARY || op->kind == IR_OP_DROPOUT_MASK) return KC_ELEM;
    if (op->kind == IR_OP_EINSUM) return KC_EINSUM;
    if (op->kind == IR_OP_REDUCE_SUM || op->kind == IR_OP_REDUCE_MAX) {
        int rank = g->values[op->in[0]].rank, n = op->attrs.n_ints, trailing = n > 0;
        for (int k = 0; k < n; k++) trailing &= op->attrs.ints[k] >= rank - n;
        *row = trailing;
        return KC_REDUCE;
    }
    return KC_OTHER;
}

/* A reshape whose local block keeps its element count: a view of its
 * operand's buffer (row-major and contiguous, as every buffer is), which a
 * GPU framework never copies (torch's .view, XLA's bitcast). */
static int is_view(const spmd_program *p, const spmd_instr *in, const int64_t *numel)
{
    return in->kind == SPMD_COMPUTE && p->g->ops[in->op].kind == IR_OP_RESHAPE && numel[in->in[0]] == numel[in->out];
}

/* Where a slice's result is a strided matrix of its operand's buffer: for
 * instruction i a slice along dim d of local dims [.., n_d, ..], the product
 * of the dims before d (each run of len x inner elements then starts
 * n_d x inner elements after the last); 0 when i is no slice. */
static int64_t slice_outer(const spmd_program *p, const spmd_instr *in)
{
    if (in->kind != SPMD_COMPUTE || p->g->ops[in->op].kind != IR_OP_SLICE) return 0;
    int64_t dims[IR_MAX_RANK], outer = 1;
    spmd_buffer_dims(p, in->in[0], dims);
    for (int k = 0; k < p->g->ops[in->op].attrs.ints[0]; k++) outer *= dims[k];
    return outer;
}

/* 1 when buffer b's local dims have a prefix whose product is outer (a
 * reshape of a strided matrix that keeps its rows apart). */
static int keeps_rows(const spmd_program *p, int b, int64_t outer)
{
    int64_t dims[IR_MAX_RANK], prod = 1;
    spmd_buffer_dims(p, b, dims);
    for (int k = 0; prod < outer && k < p->g->values[p->bufs[b].value].rank; k++) prod *= dims[k];
    return prod == outer;
}

/* Slices read in place (fold[i] = 1): a slice every reader of which is an
 * einsum, directly or through reshape views that keep its rows apart, and
 * whose result is no output.  Its result is a strided matrix of its
 * operand's buffer (rows of len x inner elements, a fixed distance apart),
 * which a GEMM reads as it is (BLAS's and cuBLAS's leading dimension, BLIS's
 * row and column strides): torch's split and narrow are such views, and
 * addmm reads them without a copy.  outer: per buffer, the rows of the
 * strided matrix it is (0: none); gemm_only: per buffer, read by einsums
 * alone (both scratch, n_bufs long). */
static void fold_strided_slices(spmd_program *p, uint8_t *fold, const uint8_t *bad, const int64_t *numel,
                                int64_t *outer, uint8_t *gemm_only)
{
    int n = p->n_instrs, any = 0;
    memset(outer, 0, (size_t)p->n_bufs * sizeof *outer);
    for (int i = 0; i < n; i++) {
        const spmd_instr *in = &p->instrs[i];
        int64_t o = slice_outer(p, in);
        if (in->out < 0) continue;
        if (!o && is_view(p, in, numel) && outer[in->in[0]] > 0 && keeps_rows(p, in->out, outer[in->in[0]]))
            o = outer[in->in[0]];
        outer[in->out] = o;
        any |= o > 0;
    }
    if (!any) return;
    memset(gemm_only, 1, (size_t)p->n_bufs);
    for (int i = n - 1; i >= 0; i--) { /* readers come after their operands' producers */
        const spmd_instr *in = &p->instrs[i];
        int einsum = in->kind == SPMD_COMPUTE && p->g->ops[in->op].kind == IR_OP_EINSUM;
        int view = is_view(p, in, numel) && outer[in->out] > 0 && gemm_only[in->out] && !(bad[in->out] & 2);
        for (int k = 0; k < IR_MAX_OPERANDS; k++)
            if (in->in[k] >= 0 && !einsum && !view) gemm_only[in->in[k]] = 0;
    }
    for (int i = 0; i < n; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (slice_outer(p, in) && gemm_only[in->out] && !(bad[in->out] & 2)) fold[i] = 1;
    }
}

/* Folded into their readers (no kernel, never written): broadcasts every
 * reader of which is an elementwise op or a reduction, reshapes (views:
 * any reader reads the operand's buffer) and slices read in place by
 * einsums (fold_strided_slices); none when its result is an output.
 * cls: each instruction's kernel_class. */
static void fold_broadcasts(spmd_program *p, uint8_t *fold, const uint8_t *cls, const int64_t *numel)
{
    int n = p->n_instrs, slices = 0;
    uint8_t *bad = ir_xcalloc((size_t)(p->n_bufs ? p->n_bufs : 1), 1); /* bit 0: read by a non-fusing reader; 1: an output */
    for (int i = 0; i < p->g->n_outputs; i++)
        if (p->out_buf[i] >= 0) bad[p->out_buf[i]] = 3;
    for (int i = 0; i < n; i++) {
        const spmd_instr *in = &p->instrs[i];
        int c = cls[i] >> 1;
        for (int k = 0; k < IR_MAX_OPERANDS; k++)
            if (in->in[k] >= 0 && c != KC_ELEM && c != KC_REDUCE) bad[in->in[k]] = 1;
    }
    for (int i = 0; i < n; i++) {
        const spmd_instr *in = &p->instrs[i];
        fold[i] = in->kind == SPMD_COMPUTE && p->g->ops[in->op].kind == IR_OP_BROADCAST &&
                  p->g->values[p->g->ops[in->op].out].dtype != IR_I32 && !bad[in->out];
        fold[i] |= is_view(p, in, numel) && !(bad[in->out] & 2);
        slices |= in->kind == SPMD_COMPUTE && p->g->ops[in->op].kind == IR_OP_SLICE;
    }
    if (!slices) {
        free(bad);
        return;
    }
    int64_t *outer = ir_xrealloc(NULL, (size_t)(p->n_bufs ? p->n_bufs : 1) * sizeof *outer);
    uint8_t *gemm_only = ir_xrealloc(NULL, (size_t)(p->n_bufs ? p->n_bufs : 1));
    fold_strided_slices(p, fold, bad, numel, outer, gemm_only);
    free(outer);
    free(gemm_only);
    free(bad);
}

/* The kernel being grown by spmd_plan_kernels. */
typedef struct kstate {
    int start, last;   /* first and last member; start < 0: none open */
    int64_t loop;      /* element count of its iteration space */
    int64_t row;       /* element count of its row reductions' results (0: none) */
    int closed, phase;
} kstate;

/* Whether instruction i of class c may join the open kernel k. */
static int kernel_joins(const spmd_program *p, const kstate *k, int i, int c, int row, const int64_t *numel_of)
{
    const spmd_instr *in = &p->instrs[i];
    if (k->start < 0 || k->closed || in->phase != k->phase || i - k->start >= FUSE_MAX_KERNEL) return 0;
    if (p->segment && p->segment[i] != p->segment[k->start]) return 0;
    int64_t numel = numel_of[in->out];
    int einsum_led = p->instrs[k->start].kind == SPMD_COMPUTE && p->g->ops[p->instrs[k->start].op].kind == IR_OP_EINSUM;
    if (c == KC_ELEM) return numel == k->loop || (k->row > 0 && numel == k->row);
    if (c == KC_REDUCE)
        return !einsum_led && numel_of[in->in[0]] == k->loop && (!row || !k->row || numel == k->row);
    return 0;
}

void spmd_plan_kernels(spmd_program *p, int enabled)
{
    int64_t *numel = buffer_numels(p);
    plan_kernels(p, enabled, numel);
    free(numel);
}

/* spmd_plan_kernels with every buffer's element count given. */
static void plan_kernels(spmd_program *p, int enabled, const int64_t *numel)
{
    spmd_fuse_plan *pl = &p->fuse;
    int n = p->n_instrs;
    if (n > pl->kcap || !pl->klen) {
        int cap = n > 256 ? n : 256;
        pl->klen = ir_xrealloc(pl->klen, (size_t)cap * sizeof *pl->klen);
        pl->kfold = ir_xrealloc(pl->kfold, (size_t)cap);
        pl->kcap = cap;
    }
    memset(pl->klen, 0, (size_t)(n ? n : 1) * sizeof *pl->klen);
    memset(pl->kfold, 0, (size_t)(n ? n : 1));
    pl->n_kernels = pl->n_folded = 0;
    uint8_t *cls = ir_xrealloc(NULL, (size_t)(n ? n : 1)); /* kernel_class << 1 | row */
    for (int i = 0; i < n; i++) {
        int row, c = kernel_class(p, &p->instrs[i], &row);
        cls[i] = (uint8_t)(c << 1 | row);
    }
    if (enabled) fold_broadcasts(p, pl->kfold, cls, numel);
    kstate k = {.start = -1};
    for (int i = 0; i <= n; i++) {
        if (i < n && pl->kfold[i]) {
            pl->n_folded++;
            continue;
        }
        int row = i < n ? cls[i] & 1 : 0, c = i < n ? cls[i] >> 1 : KC_OTHER;
        if (i < n && enabled && kernel_joins(p, &k, i, c, row, numel)) {
            k.last = i;
            if (c == KC_REDUCE) {
                if (row) k.row = numel[p->instrs[i].out];
                else k.closed = 1; /* a column reduction needs every block: nothing after it */
            }
            continue;
        }
        if (k.start >= 0) {
            pl->klen[k.start] = k.last - k.start + 1;
            pl->n_kernels++;
        }
        k.start = -1;
        if (i == n || p->instrs[i].kind != SPMD_COMPUTE) continue;
        const spmd_instr *in = &p->instrs[i];
        k = (kstate){.start = i, .last = i, .phase = in->phase, .closed = c == KC_OTHER,
                     .loop = c == KC_REDUCE ? numel[in->in[0]] : numel[in->out]};
        if (c == KC_REDUCE) {
            if (row) k.row = numel[in->out];
            else k.closed = 1;
        }
    }
    free(cls);
}
