/* test_padding.c - uneven shapes: a dim that its mesh axes do not divide is
 * padded (analysis/mesh.c, docs/sharding.md), and the runtime keeps the
 * padding zero so that reductions ignore it (exec/).
 *
 *  1. Layout: for even, uneven and nested splits (6 over 4, 6 over 2x2, 100
 *     over 8, 7 over 2x2x2, ...), every row of the dim is held by exactly one
 *     block, blocks have one size, and a block's data lies inside the block of
 *     the level above (so gathering the minor axis is local to that block).
 *  2. Reductions over a padded dim, in training steps (SGD) against the
 *     single-device reference: a sum and a mean, a softmax (max, exp, sum), a
 *     layer norm's statistics, a matmul contracting the padded dim, and a max
 *     of all-negative values (zero padding would win it: the runtime masks it
 *     with -inf), on 1-, 2- and 3-axis meshes.  Tolerance EXEC_SPMD_TOLERANCE (1e-4) relative to
 *     each tensor's largest magnitude, as test_spmd.
 *  3. Halo exchange on an image of 10 rows over 4 devices (blocks of 3, the
 *     last holding 1 row): the runtime reads exactly the border rows that hold
 *     data (1, 2, 2, 1 rows), and the conv trains to the reference's numbers
 *     with rows over 4 and 8 devices.
 *  4. The padding report (spmd_padding_of) on a 6-row input over 4 devices,
 *     and none for an even split.
 */
#include "analysis/schedule.h"
#include "exec/runtime.h"
#include "models/models.h"
#include "tests/test.h"
#include "tests/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- 1. layout ------------------------------------------------------------ */

static void layout_case(int64_t D, const char *mesh_text, int n_axes_on_dim)
{
    shard_mesh m;
    char err[256];
    CHECKF(shard_mesh_parse(mesh_text, &m, err, sizeof err) == 0, "%s", err);
    ir_value v;
    memset(&v, 0, sizeof v);
    v.rank = 1;
    v.dims[0] = D;
    v.dtype = IR_F32;
    shard_spec s;
    memset(&s, 0, sizeof s);
    s.n[0] = (uint8_t)n_axes_on_dim;
    for (int i = 0; i < n_axes_on_dim; i++) s.axes[0][i] = (uint8_t)i;
    int64_t block;
    shard_local_dims(&m, &v, &s, &block);
    int *hits = calloc((size_t)D, sizeof *hits);
    int bad = 0;
    for (int64_t dev = 0; dev < m.n_devices; dev++) {
        /* devices off the dim's axes hold replicas: count coordinate 0 only */
        int replica = 0;
        for (int a = n_axes_on_dim; a < m.n_axes; a++) replica |= shard_device_coord(&m, dev, a) != 0;
        int64_t org = shard_dim_offset(&m, &v, &s, 0, dev), valid = shard_dim_valid(&m, &v, &s, 0, dev);
        if (valid < 0 || valid > block || (valid > 0 && org + valid > D)) bad++;
        /* inside the enclosing block of the level above (the minor axis gathered) */
        if (n_axes_on_dim > 1 && valid > 0) {
            shard_spec up = s;
            up.n[0]--;
            int64_t uo = shard_dim_offset(&m, &v, &up, 0, dev), uv = shard_dim_valid(&m, &v, &up, 0, dev);
            if (org < uo || org + valid > uo + uv) bad++;
        }
        if (replica) continue;
        for (int64_t i = org; i < org + valid; i++) hits[i]++;
    }
    for (int64_t i = 0; i < D; i++) bad += hits[i] != 1;
    CHECKF(bad == 0, "%lld rows over %s (%d axes on the dim): %d rows not held exactly once or blocks misplaced",
           (long long)D, mesh_text, n_axes_on_dim, bad);
    free(hits);
}

static void test_layout(void)
{
    static const struct {
        int64_t d;
        const char *mesh;
        int n;
    } cases[] = {{8, "a=4", 1},       {6, "a=4", 1},       {6, "a=2,b=2", 2},     {100, "a=8", 1}, {100, "a=2,b=2,c=2", 3},
                 {7, "a=2,b=2,c=2", 3}, {10, "a=3,b=2", 2}, {6, "a=4,b=2", 1},     {13, "a=2,b=3", 2}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) layout_case(cases[i].d, cases[i].mesh, cases[i].n);
    /* the examples of docs/sharding.md */
    shard_mesh m;
    char err[128];
    ir_value v;
    memset(&v, 0, sizeof v);
    v.rank = 1;
    v.dims[0] = 6;
    shard_spec s;
    memset(&s, 0, sizeof s);
    s.n[0] = 2;
    s.axes[0][1] = 1;
    shard_mesh_parse("a=2,b=2", &m, err, sizeof err);
    static const int64_t org[4] = {0, 2, 3, 5}, valid[4] = {2, 1, 2, 1};
    for (int dev = 0; dev < 4; dev++)
        CHECKF(shard_dim_offset(&m, &v, &s, 0, dev) == org[dev] && shard_dim_valid(&m, &v, &s, 0, dev) == valid[dev],
               "6 over 2x2, device %d: offset %lld valid %lld", dev, (long long)shard_dim_offset(&m, &v, &s, 0, dev),
               (long long)shard_dim_valid(&m, &v, &s, 0, dev));
    shard_mesh_parse("a=8", &m, err, sizeof err);
    s.n[0] = 1;
    v.dims[0] = 100;
    int64_t block;
    shard_local_dims(&m, &v, &s, &block);
    CHECK(block == 13 && shard_dim_valid(&m, &v, &s, 0, 7) == 9 && shard_dim_offset(&m, &v, &s, 0, 7) == 91);
    CHECK(shard_split_ok(6, 4) && shard_split_ok(8, 4) && !shard_split_ok(3, 4));
}

/* ---- 2. reductions over a padded dim --------------------------------------- */

enum { ROWS = 6, K = 5, N = 7 };

/* x [ROWS,K] input, w [K,N] param, h = x w; then per kind:
 * 0 sum and mean over the rows; 1 softmax over the rows; 2 layer norm over
 * N; 3 the max over the rows of h - 100 (all negative). */
static ir_graph *reduce_graph(int kind)
{
    ir_graph *g = ir_new("padding");
    int64_t xd[2] = {ROWS, K}, wd[2] = {K, N}, hd[2] = {ROWS, N}, d0[1] = {0}, d1[1] = {1};
    int x = ir_arg(g, "x", IR_INPUT, IR_F32, 2, xd), w = ir_arg(g, "w", IR_PARAM, IR_F32, 2, wd);
    int r = ir_arg(g, "r", IR_INPUT, IR_F32, 2, hd);
    ir_set_init(g, x, IR_INIT_NORMAL, 1.0);
    ir_set_init(g, w, IR_INIT_NORMAL, 0.5);
    ir_set_init(g, r, IR_INIT_NORMAL, 1.0);
    int h = ir_einsum(g, "mk,kn->mn", x, w), y;
    int64_t cols[1] = {1}, rows_map[1] = {0};
    if (kind == 0) {
        int s = ir_reduce(g, IR_OP_REDUCE_SUM, ir_binary(g, IR_OP_MUL, h, r), 1, d0); /* [N] */
        y = ir_scale(g, ir_binary(g, IR_OP_MUL, s, s), 1.0 / ROWS);
    } else if (kind == 1) {
        int mx = ir_broadcast(g, ir_reduce(g, IR_OP_REDUCE_MAX, h, 1, d0), 2, hd, cols);
        int e = ir_unary(g, IR_OP_EXP, ir_binary(g, IR_OP_SUB, h, mx));
        int den = ir_broadcast(g, ir_reduce(g, IR_OP_REDUCE_SUM, e, 1, d0), 2, hd, cols);
        y = ir_binary(g, IR_OP_MUL, ir_binary(g, IR_OP_DIV, e, den), r);
    } else if (kind == 2) {
        int mean = ir_broadcast(g, ir_scale(g, ir_reduce(g, IR_OP_REDUCE_SUM, h, 1, d1), 1.0 / N), 2, hd, rows_map);
        int c = ir_binary(g, IR_OP_SUB, h, mean);
        int var = ir_scale(g, ir_reduce(g, IR_OP_REDUCE_SUM, ir_binary(g, IR_OP_MUL, c, c), 1, d1), 1.0 / N);
        int inv = ir_broadcast(g, ir_unary(g, IR_OP_RSQRT, ir_add_scalar(g, var, 1e-5)), 2, hd, rows_map);
        y = ir_binary(g, IR_OP_MUL, ir_binary(g, IR_OP_MUL, c, inv), r);
    } else {
        int mx = ir_reduce(g, IR_OP_REDUCE_MAX, ir_add_scalar(g, h, -100.0), 1, d0); /* [N], all < 0 */
        y = ir_binary(g, IR_OP_MUL, mx, mx);
    }
    int64_t all[2] = {0, 1};
    ir_set_loss(g, ir_reduce(g, IR_OP_REDUCE_SUM, y, g->values[y].rank, all));
    return g;
}

/* One SGD step of forward graph fwd under sched on mesh, against the
 * reference; 1 when it matched.  *padded: the program computes padding. */
static int train_matches(ir_graph *fwd, const char *mesh, const char *sched, double *padded)
{
    char err[512];
    ir_optimizer sgd = {IR_SGD, 0.05, 0, 0, 0};
    ir_graph *g = ir_train_step(fwd, &sgd, err, sizeof err);
    CHECKF(g, "%s", err);
    if (!g) return 0;
    shard_state *st;
    spmd_program *p = test_lower_sched(g, mesh, sched, &st);
    spmd_padding pad;
    spmd_padding_of(p, &pad);
    *padded = pad.padded_elems;
    exec_ref *ref = exec_ref_new(g, 0, err, sizeof err);
    exec_spmd *r = exec_spmd_new(p, 0, err, sizeof err);
    exec_spmd_check c;
    memset(&c, 0, sizeof c);
    int ok = 0;
    if (ref && r && exec_spmd_check_init(&c, g, err, sizeof err) == 0) {
        exec_ref_init_args(ref, 5);
        exec_spmd_init_args(r, 5);
        ok = exec_ref_run(ref, err, sizeof err) == 0 && exec_spmd_step(r, err, sizeof err) == 0 &&
             exec_spmd_compare(r, ref, &c, err, sizeof err) == 0 && exec_spmd_check_ok(&c, EXEC_SPMD_TOLERANCE) && c.replica_diff == 0;
        if (!ok) fprintf(stderr, "  %s on %s: %s loss %.2e params %.2e\n", sched, mesh, err, c.worst_loss, c.worst_param);
    } else {
        fprintf(stderr, "  %s on %s: %s\n", sched, mesh, err);
    }
    exec_spmd_check_free(&c);
    exec_spmd_free(r);
    exec_ref_free(ref);
    spmd_free(p);
    shard_state_free(st);
    ir_free(g);
    return ok;
}

static void test_reductions(void)
{
    static const char *const names[4] = {"sum/mean", "softmax", "layernorm", "max of negatives"};
    static const char *const cases[][2] = {
        {"a=4", "tile:x:0:a"},                          /* rows 6 over 4 */
        {"a=2,b=2", "tile:x:0:a,tile:x:0:b"},           /* rows 6 over 2x2, nested */
        {"a=4", "tile:w:1:a"},                          /* N 7 over 4 */
        {"a=4", "tile:x:1:a"},                          /* contraction K 5 over 4 */
        {"a=2,b=2,c=2", "tile:x:0:a,tile:x:0:b,tile:w:1:c"}, /* rows 6 over 2x2, N 7 over 2 */
        {"a=3,b=2", "tile:x:0:b,tile:x:1:a"},           /* rows 6 over 2 (even), K 5 over 3 */
    };
    for (int kind = 0; kind < 4; kind++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            ir_graph *fwd = reduce_graph(kind);
            CHECKF(!ir_error(fwd), "%s", ir_error(fwd));
            double padded = 0;
            CHECKF(train_matches(fwd, cases[i][0], cases[i][1], &padded), "%s: %s on %s differs from the reference",
                   names[kind], cases[i][1], cases[i][0]);
            CHECKF(padded > 0, "%s: %s on %s has no padding", names[kind], cases[i][1], cases[i][0]);
            ir_free(fwd);
        }
}

/* ---- 3. halo exchange over padded rows ------------------------------------- */

enum { HB = 2, HH = 10, HW = 4, HC = 3, HO = 2 };

static ir_graph *conv10(int stride)
{
    ir_graph *g = ir_new("conv10");
    int64_t xd[4] = {HB, HH, HW, HC}, wd[3] = {9, HC, HO};
    int x = ir_arg(g, "x", IR_INPUT, IR_F32, 4, xd), w = ir_arg(g, "w", IR_PARAM, IR_F32, 3, wd);
    ir_set_init(g, x, IR_INIT_NORMAL, 1.0);
    ir_set_init(g, w, IR_INIT_NORMAL, 0.3);
    int y = model_conv2d(g, x, w, 3, stride, 1);
    int r = ir_arg(g, "r", IR_INPUT, IR_F32, 4, g->values[y].dims);
    ir_set_init(g, r, IR_INIT_NORMAL, 1.0);
    int64_t all[4] = {0, 1, 2, 3};
    ir_set_loss(g, ir_reduce(g, IR_OP_REDUCE_SUM, ir_binary(g, IR_OP_MUL, y, r), 4, all));
    return g;
}

static void test_halo(void)
{
    char err[512];
    ir_graph *g = conv10(1);
    shard_state *st;
    spmd_program *p = test_lower_sched(g, "a=4", "tile:x:1:a", &st);
    exec_spmd *r = exec_spmd_new(p, 0, err, sizeof err);
    CHECKF(r, "%s", err);
    if (r) {
        exec_spmd_init_args(r, 3);
        CHECKF(exec_spmd_step(r, err, sizeof err) == 0, "%s", err);
        const exec_spmd_stats *s = exec_spmd_last_stats(r);
        /* rows 0-2, 3-5, 6-8, 9: the border rows that exist, one row each
         * (row -1 and row 10 are the conv's zero padding), and the scalar
         * loss's all-reduce (4 bytes from each of 4 devices) */
        double row = (double)HB * HW * HC * 4;
        static const int rows[4] = {1, 2, 2, 1};
        for (int dev = 0; dev < 4; dev++)
            CHECKF(s->dev[dev].moved_bytes == rows[dev] * row + 16, "device %d moved %.0f bytes, want %.0f", dev,
                   s->dev[dev].moved_bytes, rows[dev] * row + 16);
    }
    exec_spmd_free(r);
    spmd_free(p);
    shard_state_free(st);
    ir_free(g);
    static const char *const cases[][2] = {{"a=4", "tile:x:1:a"}, {"a=8", "tile:x:1:a"}, {"a=2,b=4", "tile:x:0:a,tile:x:1:b"}};
    for (int stride = 1; stride <= 2; stride++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            ir_graph *fwd = conv10(stride);
            double padded = 0;
            CHECKF(train_matches(fwd, cases[i][0], cases[i][1], &padded), "conv stride %d, 10 rows: %s on %s", stride,
                   cases[i][1], cases[i][0]);
            ir_free(fwd);
        }
}

/* ---- 4. the padding report -------------------------------------------------- */

static void test_report(void)
{
    static const int64_t rows[2] = {6, 8};
    for (int k = 0; k < 2; k++) {
        ir_graph *g = ir_new("report");
        int64_t xd[2] = {rows[k], K}, wd[2] = {K, N}, all[2] = {0, 1};
        int x = ir_arg(g, "x", IR_INPUT, IR_F32, 2, xd), w = ir_arg(g, "w", IR_PARAM, IR_F32, 2, wd);
        ir_set_loss(g, ir_reduce(g, IR_OP_REDUCE_SUM, ir_einsum(g, "mk,kn->mn", x, w), 2, all));
        shard_state *st;
        spmd_program *p = test_lower_sched(g, "a=4", "tile:x:0:a", &st);
        spmd_padding pad;
        spmd_padding_of(p, &pad);
        /* x: blocks of 2 rows x 5 (40 bytes); 6 rows hold 30 bytes per device
         * on average: 10 padded; w [5,7] whole: 140 bytes, none */
        if (k == 0) {
            CHECKF(pad.arg_bytes == 180 && pad.padded_arg_bytes == 10, "args %g bytes, %g padded", pad.arg_bytes,
                   pad.padded_arg_bytes);
            /* x w: [2,7] per device, a quarter of it padding on average */
            CHECKF(pad.padded_elems >= 3.5 && pad.padded_elems < pad.elems, "%g of %g elements padded", pad.padded_elems,
                   pad.elems);
        } else {
            CHECK(pad.padded_elems == 0 && pad.padded_comm_bytes == 0 && pad.padded_arg_bytes == 0);
        }
        spmd_free(p);
        shard_state_free(st);
        ir_free(g);
    }
}

int main(void)
{
    test_layout();
    test_reductions();
    test_halo();
    test_report();
    return test_done();
}
