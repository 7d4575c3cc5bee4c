/* test_conv.c - convolutions as shifts and GEMMs (models/unet.c), and their
 * spatial partitioning with halo exchange.
 *
 *  1. model_conv2d against a direct convolution written out here (zero
 *     padding, strides 1 and 2, dilations 1 and 2), max pooling and
 *     up-sampling against their definitions, on the reference executor.
 *     Tolerance 1e-5 absolute: values of size ~1, sums of <= 27 products in
 *     float32 in another order (roundoff ~1e-6).
 *  2. Halo bytes: the conv's image (strides 1 and 2) tiled along its rows
 *     over 4 devices; the lowered program exchanges, per shift of the rows,
 *     |offset| rows of the local block (GSPMD's halo: 1 row from each
 *     neighbour for a 3x3 conv, 2 for dilation 2), and the runtime's measured bytes read from other
 *     devices are exactly the border rows (a device at the image's edge gets
 *     one side only), plus the loss's scalar all-reduce.
 *  3. The same convs trained sharded (rows, columns, both, with the batch)
 *     against the single-device reference, tolerance EXEC_SPMD_TOLERANCE (1e-4), as test_spmd.
 */
#include "analysis/schedule.h"
#include "cost/cost.h"
#include "exec/runtime.h"
#include "models/models.h"
#include "tests/test.h"
#include "tests/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, H = 8, W = 8, C = 3, O = 4 };

/* x [B,H,W,C] input, w [9,C,O] param, y = conv (loss sum(y * R), R an input
 * shaped like y); returns the graph, y's id in *y. */
static ir_graph *conv_graph(int stride, int dil, int *y)
{
    ir_graph *g = ir_new("conv");
    int64_t xd[4] = {B, H, W, C}, wd[3] = {9, C, O};
    int x = ir_arg(g, "x", IR_INPUT, IR_F32, 4, xd);
    int w = ir_arg(g, "w", IR_PARAM, IR_F32, 3, wd);
    ir_set_init(g, x, IR_INIT_NORMAL, 1.0);
    ir_set_init(g, w, IR_INIT_NORMAL, 0.3);
    *y = model_conv2d(g, x, w, 3, stride, dil);
    const ir_value *v = &g->values[*y];
    int r = ir_arg(g, "r", IR_INPUT, IR_F32, 4, v->dims);
    ir_set_init(g, r, IR_INIT_NORMAL, 1.0);
    int64_t all[4] = {0, 1, 2, 3};
    ir_set_loss(g, ir_reduce(g, IR_OP_REDUCE_SUM, ir_binary(g, IR_OP_MUL, *y, r), 4, all));
    return g;
}

static void test_direct(void)
{
    static const int cases[4][2] = {{1, 1}, {2, 1}, {1, 2}, {2, 2}};
    for (int k = 0; k < 4; k++) {
        int s = cases[k][0], d = cases[k][1], yv;
        char err[512];
        ir_graph *g = conv_graph(s, d, &yv);
        CHECKF(!ir_error(g), "%s", ir_error(g));
        exec_ref *r = ir_error(g) ? NULL : exec_ref_new(g, 0, err, sizeof err);
        if (!r) {
            ir_free(g);
            continue;
        }
        exec_ref_init_args(r, 11);
        CHECKF(exec_ref_run(r, err, sizeof err) == 0, "%s", err);
        const float *x = exec_ref_data(r, ir_find(g, "x")), *w = exec_ref_data(r, ir_find(g, "w"));
        const float *y = exec_ref_data(r, yv);
        double worst = 0;
        int ho = H / s, wo = W / s;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < ho; i++)
                for (int j = 0; j < wo; j++)
                    for (int o = 0; o < O; o++) {
                        double want = 0;
                        for (int t = 0; t < 9; t++) {
                            int r0 = i * s + (t / 3 - 1) * d, c0 = j * s + (t % 3 - 1) * d;
                            if (r0 < 0 || r0 >= H || c0 < 0 || c0 >= W) continue;
                            for (int c = 0; c < C; c++)
                                want += (double)x[((b * H + r0) * W + c0) * C + c] * w[(t * C + c) * O + o];
                        }
                        double e = fabs(want - y[((b * ho + i) * wo + j) * O + o]);
                        if (e > worst) worst = e;
                    }
        CHECKF(worst < 1e-5, "conv stride %d dilation %d: worst error %.3g", s, d, worst);
        exec_ref_free(r);
        ir_free(g);
    }
}

/* max pooling and up-sampling of x [1,4,4,2] against their definitions */
static void test_pool_upsample(void)
{
    ir_graph *g = ir_new("pool");
    int64_t xd[4] = {1, 4, 4, 2};
    int x = ir_arg(g, "x", IR_INPUT, IR_F32, 4, xd);
    ir_set_init(g, x, IR_INIT_NORMAL, 1.0);
    int p = model_max_pool2(g, x), u = model_upsample2(g, x);
    int64_t all[4] = {0, 1, 2, 3};
    ir_set_loss(g, ir_binary(g, IR_OP_ADD, ir_reduce(g, IR_OP_REDUCE_SUM, p, 4, all), ir_reduce(g, IR_OP_REDUCE_SUM, u, 4, all)));
    char err[256];
    exec_ref *r = exec_ref_new(g, 0, err, sizeof err);
    CHECK(r && g->values[p].dims[1] == 2 && g->values[u].dims[2] == 8);
    if (r) {
        exec_ref_init_args(r, 5);
        CHECKF(exec_ref_run(r, err, sizeof err) == 0, "%s", err);
        const float *xs = exec_ref_data(r, x), *ps = exec_ref_data(r, p), *us = exec_ref_data(r, u);
        int bad = 0;
        for (int i = 0; i < 8; i++)
            for (int j = 0; j < 8; j++)
                for (int c = 0; c < 2; c++) {
                    bad += us[(i * 8 + j) * 2 + c] != xs[((i / 2) * 4 + j / 2) * 2 + c];
                    if (i >= 2 || j >= 2) continue;
                    float m = -INFINITY;
                    for (int a = 0; a < 4; a++) m = fmaxf(m, xs[((2 * i + a / 2) * 4 + 2 * j + a % 2) * 2 + c]);
                    bad += ps[(i * 2 + j) * 2 + c] != m;
                }
        CHECKF(bad == 0, "%d pooled or up-sampled elements wrong", bad);
    }
    exec_ref_free(r);
    ir_free(g);
}

/* The forward conv with its rows tiled over 4 devices (2 rows each), at
 * strides 1 and 2 (a strided conv shifts at full resolution, then keeps
 * every other row: the same halos) and dilations 1 and 2. */
static void test_halo_bytes(void)
{
    static const int cases[4][2] = {{1, 1}, {1, 2}, {2, 1}, {2, 2}};
    for (int k = 0; k < 4; k++) {
        int d = cases[k][1], yv;
        char err[512];
        ir_graph *g = conv_graph(cases[k][0], d, &yv);
        shard_state *st;
        spmd_program *p = test_lower_sched(g, "a=4", "tile:x:1:a", &st);
        double row = (double)B * W * C * 4; /* one image row of the local block, bytes */
        int halos = 0, others = 0;
        for (int i = 0; i < p->n_instrs; i++) {
            const spmd_instr *in = &p->instrs[i];
            if (in->kind == SPMD_HALO) {
                halos++;
                CHECKF(in->dim == 1 && (double)in->bytes == d * row, "halo of %lld bytes, want %g", (long long)in->bytes, d * row);
            } else if (in->kind != SPMD_COMPUTE) {
                others++;
            }
        }
        /* priced as what one device receives from a neighbour */
        CHECK(cost_wire_bytes(SPMD_HALO, 4, d * row) == d * row);
        /* two row shifts (up and down); the column shifts stay local; the loss is all-reduced */
        CHECKF(halos == 2 && others == 1, "stride %d dilation %d: %d halo exchanges, %d other collectives", cases[k][0], d,
               halos, others);
        exec_spmd *r = exec_spmd_new(p, 0, err, sizeof err);
        CHECKF(r, "%s", err);
        if (r) {
            exec_spmd_init_args(r, 3);
            CHECKF(exec_spmd_step(r, err, sizeof err) == 0, "%s", err);
            const exec_spmd_stats *s = exec_spmd_last_stats(r);
            /* device 0 and 3 hold the image's top and bottom: d rows from one
             * neighbour; devices 1, 2 get d rows from each; the scalar loss's
             * all-reduce reads 4 bytes from each of the 4 devices */
            for (int dev = 0; dev < 4; dev++) {
                double want = (dev == 0 || dev == 3 ? 1 : 2) * d * row + 16;
                CHECKF(s->dev[dev].moved_bytes == want, "dilation %d device %d moved %.0f bytes, want %.0f", d, dev,
                       s->dev[dev].moved_bytes, want);
            }
            printf("conv 3x3 stride %d dilation %d, rows over 4 devices: halo %g bytes per exchange (block %g)\n",
                   cases[k][0], d, d * row, row * H / 4);
        }
        exec_spmd_free(r);
        spmd_free(p);
        shard_state_free(st);
        ir_free(g);
    }
}

/* Training steps of the strided and dilated convs, sharded, against the reference. */
static void test_sharded_numerics(void)
{
    static const struct {
        int stride, dil;
        const char *mesh, *sched;
    } cases[] = {
        {1, 1, "a=2", "tile:x:1:a"},          {2, 1, "a=4", "tile:x:1:a"},
        {1, 2, "a=4", "tile:x:1:a"},          {2, 2, "a=2,b=2", "tile:x:1:a,tile:x:2:b"},
        {1, 1, "a=2,b=2,c=2", "tile:x:0:a,tile:x:1:b,tile:x:2:c"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512];
        int yv;
        ir_graph *fwd = conv_graph(cases[i].stride, cases[i].dil, &yv);
        ir_optimizer sgd = {IR_SGD, 0.05, 0, 0, 0};
        ir_graph *g = ir_train_step(fwd, &sgd, err, sizeof err);
        ir_free(fwd);
        CHECKF(g, "%s", err);
        if (!g) continue;
        shard_state *st;
        spmd_program *p = test_lower_sched(g, cases[i].mesh, cases[i].sched, &st);
        exec_ref *ref = exec_ref_new(g, 0, err, sizeof err);
        exec_spmd *r = exec_spmd_new(p, 0, err, sizeof err);
        exec_spmd_check c;
        memset(&c, 0, sizeof c);
        if (ref && r && exec_spmd_check_init(&c, g, err, sizeof err) == 0) {
            exec_ref_init_args(ref, 9);
            exec_spmd_init_args(r, 9);
            int ok = exec_ref_run(ref, err, sizeof err) == 0 && exec_spmd_step(r, err, sizeof err) == 0 &&
                     exec_spmd_compare(r, ref, &c, err, sizeof err) == 0;
            CHECKF(ok && exec_spmd_check_ok(&c, EXEC_SPMD_TOLERANCE) && c.replica_diff == 0 && p->stats.count[SPMD_HALO][SPMD_FORWARD] > 0,
                   "stride %d dilation %d %s on %s: %s loss %.2e params %.2e", cases[i].stride, cases[i].dil,
                   cases[i].sched, cases[i].mesh, ok ? "" : err, c.worst_loss, c.worst_param);
        } else {
            CHECKF(0, "%s", err);
        }
        exec_spmd_check_free(&c);
        exec_spmd_free(r);
        exec_ref_free(ref);
        spmd_free(p);
        shard_state_free(st);
        ir_free(g);
    }
}

int main(void)
{
    setenv("CARVE_FUSE", "0", 1); /* every value written, so the conv's result can be read */
    test_direct();
    test_pool_upsample();
    test_halo_bytes();
    test_sharded_numerics();
    return test_done();
}
