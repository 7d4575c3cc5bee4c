/* test_kernels.c - accelerator kernels (analysis/fusion.c spmd_plan_kernels)
 * and how the cost model prices them (fused_elementwise = 2): a matmul's
 * bias and activation epilogue in its kernel, softmax as one pass, a column
 * reduction ending its kernel, broadcasts folded into their readers, the
 * bytes of each kernel exactly, and the memory of results that stay in
 * registers; slices an einsum reads in place (strided); a dropout mask
 * drawn inside its reader's kernel, kept for the backward pass at one byte
 * an element; then GEMM efficiency by shape (tile and wave quantization)
 * and a GPT step (with and without dropout) priced
 * with kernels against the executor's groups.
 */
#include "analysis/schedule.h"
#include "analysis/spmd.h"
#include "cost/cost.h"
#include "models/blocks.h"
#include "tests/test.h"
#include "tests/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Sums of a few products of doubles: exact up to roundings far below 1e-9. */
static int close_rel(double a, double b, double tol) { return fabs(a - b) <= tol * fmax(fabs(a), fabs(b)) + 1e-300; }

/* g under schedule `sched` ("" for none) on mesh `mesh_text`. */
static spmd_program *lower(const ir_graph *g, const char *mesh_text, const char *sched)
{
    char err[512];
    shard_mesh mesh;
    schedule sc;
    if (shard_mesh_parse(mesh_text, &mesh, err, sizeof err) < 0) abort();
    shard_state *st = shard_state_new(g, &mesh);
    if (*sched) {
        int rc = sched_parse(sched, &mesh, &sc, err, sizeof err);
        if (rc == 0) rc = sched_apply(&sc, st, err, sizeof err);
        CHECKF(rc == 0, "%s: %s", sched, err);
    }
    spmd_program *p = spmd_lower(st);
    p->mesh = mesh;
    shard_state_free(st);
    return p;
}

/* g replicated on one device. */
static spmd_program *lower_one(const ir_graph *g) { return lower(g, "d=1", ""); }

/* The A100 preset made memory-bound (every kernel's time is its bytes over
 * 1 GB/s), with no launch cost, no GEMM efficiency model. */
static cost_hw slow_memory_a100(void)
{
    cost_hw hw;
    char err[256];
    if (cost_hw_preset("a100", &hw, err, sizeof err) < 0) abort();
    hw.mem_bandwidth = 1e9;
    hw.op_overhead = 0;
    hw.gemm_efficiency = 0;
    CHECK(hw.fused_elementwise == 2);
    return hw;
}

/* Priced in prec with gradients `grads`; the instructions' times copied to
 * times[] (p->n_instrs), since the estimate's array lives in the workspace. */
static cost_estimate estimate_in(const spmd_program *p, const cost_hw *hw, cost_precision prec, cost_grads grads,
                                 double *times)
{
    cost_options o = {prec, 0, 0, grads};
    cost_estimate e;
    char err[256];
    cost_ws *ws = cost_ws_new(p->g);
    CHECKF(cost_estimate_program(ws, p, hw, &o, &e, err, sizeof err) == 0, "%s", err);
    memcpy(times, e.instr_time, (size_t)p->n_instrs * sizeof *times);
    e.instr_time = times;
    cost_ws_free(ws);
    return e;
}

static cost_estimate estimate(const spmd_program *p, const cost_hw *hw)
{
    cost_options o = {COST_FP32, 0, 0, COST_GRADS_AUTO};
    cost_estimate e;
    char err[256];
    cost_ws *ws = cost_ws_new(p->g);
    CHECKF(cost_estimate_program(ws, p, hw, &o, &e, err, sizeof err) == 0, "%s", err);
    cost_ws_free(ws);
    return e;
}

/* Index of the instruction computing value v, or -1. */
static int instr_of(const spmd_program *p, int v)
{
    for (int i = 0; i < p->n_instrs; i++)
        if (p->instrs[i].kind == SPMD_COMPUTE && p->instrs[i].value == v) return i;
    return -1;
}

/* y = gelu(x @ w + bias): one kernel led by the einsum, the bias broadcast
 * folded; it reads x, w, bias once and writes only the gelu. */
static void test_epilogue(void)
{
    enum { M = 512, K = 256, F = 1024 };
    ir_graph *g = ir_new("epilogue");
    int64_t dx[2] = {M, K}, dw[2] = {K, F}, db[1] = {F}, dy[2] = {M, F}, map[1] = {1};
    int x = ir_arg(g, "x", IR_INPUT, IR_F32, 2, dx);
    int w = ir_arg(g, "w", IR_INPUT, IR_F32, 2, dw);
    int bias = ir_arg(g, "bias", IR_INPUT, IR_F32, 1, db);
    int bb = ir_broadcast(g, bias, 2, dy, map);
    int y = ir_einsum(g, "mk,kf->mf", x, w);
    int z = ir_binary(g, IR_OP_ADD, y, bb);
    int a = ir_unary(g, IR_OP_GELU, z);
    ir_add_output(g, a, -1);
    CHECK(ir_error(g) == NULL);
    spmd_program *p = lower_one(g);
    int ib = instr_of(p, bb), iy = instr_of(p, y), ia = instr_of(p, a);
    CHECK(ib >= 0 && iy >= 0 && ia >= 0);
    if (ib < 0 || iy < 0 || ia < 0) return;
    CHECK(p->fuse.kfold[ib] == 1 && p->fuse.n_folded == 1);
    CHECKF(p->fuse.klen[iy] == ia - iy + 1 && p->fuse.n_kernels == 1, "klen %d, kernels %d", p->fuse.klen[iy],
           p->fuse.n_kernels);
    cost_hw hw = slow_memory_a100();
    cost_estimate e = estimate(p, &hw);
    double in_bytes = 4.0 * (M * K + K * F + F), out_bytes = 4.0 * M * F;
    CHECKF(close_rel(e.compute_time, (in_bytes + out_bytes) / 1e9, 1e-9), "%g want %g", e.compute_time,
           (in_bytes + out_bytes) / 1e9);
    /* y and z stay in registers, the broadcast is never made */
    CHECKF(close_rel(e.peak_memory, in_bytes + out_bytes, 1e-9), "peak %g want %g", e.peak_memory, in_bytes + out_bytes);
    /* the executor's groups (add + gelu) write y and read it back, and make the broadcast */
    hw.fused_elementwise = 1;
    cost_estimate grp = estimate(p, &hw);
    CHECK(grp.compute_time > e.compute_time * 1.5 && grp.peak_memory > e.peak_memory);
    spmd_free(p);
    ir_free(g);
}

/* Softmax over rows: max, subtract, exp, sum, divide in one kernel that
 * reads x once and writes the probabilities once.  A reduction over the
 * leading dim (a column) ends its kernel. */
static void test_softmax_and_columns(void)
{
    enum { R = 64, C = 128 };
    for (int column = 0; column < 2; column++) {
        ir_graph *g = ir_new("softmax");
        int64_t dx[2] = {R, C}, red[1] = {column ? 0 : 1}, map[1] = {column ? 1 : 0};
        int x = ir_arg(g, "x", IR_INPUT, IR_F32, 2, dx);
        int m = ir_reduce(g, IR_OP_REDUCE_MAX, x, 1, red);
        int s = ir_binary(g, IR_OP_SUB, x, ir_broadcast(g, m, 2, dx, map));
        int ex = ir_unary(g, IR_OP_EXP, s);
        int sum = ir_reduce(g, IR_OP_REDUCE_SUM, ex, 1, red);
        int pr = ir_binary(g, IR_OP_DIV, ex, ir_broadcast(g, sum, 2, dx, map));
        ir_add_output(g, pr, -1);
        CHECK(ir_error(g) == NULL);
        spmd_program *p = lower_one(g);
        int im = instr_of(p, m), ip = instr_of(p, pr);
        CHECK(p->fuse.n_folded == 2);
        cost_hw hw = slow_memory_a100();
        cost_estimate e = estimate(p, &hw);
        if (!column) {
            CHECKF(im >= 0 && p->fuse.klen[im] == ip - im + 1 && p->fuse.n_kernels == 1, "kernels %d", p->fuse.n_kernels);
            CHECKF(close_rel(e.compute_time, 2 * 4.0 * R * C / 1e9, 1e-9), "%g", e.compute_time);
        } else {
            /* max | sub, exp, sum | div: the column max and sum each end a kernel */
            CHECKF(p->fuse.n_kernels == 3 && p->fuse.klen[im] == 1, "kernels %d", p->fuse.n_kernels);
            /* x, max; x, max -> exp, sum (exp kept for the divide); exp, sum -> probs */
            double want = 4.0 * ((R * C + C) + (R * C + C + R * C + C) + (R * C + C + R * C)) / 1e9;
            CHECKF(close_rel(e.compute_time, want, 1e-9), "%g want %g", e.compute_time, want);
        }
        spmd_free(p);
        ir_free(g);
    }
}

/* A broadcast read by an einsum is made (not folded): cuBLAS reads memory. */
static void test_unfolded_broadcast(void)
{
    ir_graph *g = ir_new("bcast-einsum");
    int64_t dv[1] = {64}, dm[2] = {32, 64}, map[1] = {1};
    int v = ir_arg(g, "v", IR_INPUT, IR_F32, 1, dv);
    int w = ir_arg(g, "w", IR_INPUT, IR_F32, 2, dm);
    int vb = ir_broadcast(g, v, 2, dm, map);
    int y = ir_einsum(g, "mk,nk->mn", vb, w);
    ir_add_output(g, y, -1);
    CHECK(ir_error(g) == NULL);
    spmd_program *p = lower_one(g);
    int ib = instr_of(p, vb);
    CHECK(ib >= 0 && !p->fuse.kfold[ib] && p->fuse.n_folded == 0 && p->fuse.klen[ib] == 1);
    spmd_free(p);
    ir_free(g);
}

/* A fused projection's parts, y_i = x @ W[:, i] of W [K, 3, F] (an imported
 * c_attn): each slice of W is read in place by its einsum (a strided matrix:
 * K rows of F, 3F apart), so it is folded, never written, and its einsum's
 * kernel reads only the slice's bytes.  Not folded: a slice an elementwise op
 * reads, one whose reshape merges its rows with its columns ([A, 1, B, F] to
 * [A B, F]: no fixed row distance), and one that is an output. */
static void test_strided_slices(void)
{
    enum { M = 64, K = 32, F = 16, A = 4, B = 8 };
    ir_graph *g = ir_new("slices");
    int64_t dx[2] = {M, K}, dw[3] = {K, 3, F}, dwi[2] = {K, F}, du[4] = {A, 3, B, F}, dui[2] = {A * B, F};
    int x = ir_arg(g, "x", IR_INPUT, IR_F32, 2, dx);
    int w = ir_arg(g, "w", IR_INPUT, IR_F32, 3, dw);
    int u = ir_arg(g, "u", IR_INPUT, IR_F32, 4, du);
    int sl[3], y[3];
    for (int i = 0; i < 3; i++) {
        sl[i] = ir_slice(g, w, 1, i, 1);
        y[i] = ir_einsum(g, "mk,kf->mf", x, ir_reshape(g, sl[i], 2, dwi));
        ir_add_output(g, y[i], -1);
    }
    int s_elem = ir_slice(g, w, 1, 0, 1), s_out = ir_slice(g, w, 1, 1, 1), s_merge = ir_slice(g, u, 1, 0, 1);
    ir_add_output(g, ir_unary(g, IR_OP_EXP, s_elem), -1);
    ir_add_output(g, s_out, -1);
    int64_t dm[2] = {M, A * B};
    int xm = ir_arg(g, "xm", IR_INPUT, IR_F32, 2, dm);
    ir_add_output(g, ir_einsum(g, "mk,kf->mf", xm, ir_reshape(g, s_merge, 2, dui)), -1);
    CHECK(ir_error(g) == NULL);
    spmd_program *p = lower_one(g);
    for (int i = 0; i < 3; i++) CHECKF(instr_of(p, sl[i]) >= 0 && p->fuse.kfold[instr_of(p, sl[i])] == 1, "part %d", i);
    int ie = instr_of(p, s_elem), io = instr_of(p, s_out), im = instr_of(p, s_merge);
    CHECK(ie >= 0 && io >= 0 && im >= 0);
    if (ie < 0 || io < 0 || im < 0) return;
    CHECK(!p->fuse.kfold[ie] && !p->fuse.kfold[io] && !p->fuse.kfold[im]);
    /* each part's kernel reads x and its slice and writes y_i; the exp reads
     * its slice, the output slice and the merged one are copies */
    cost_hw hw = slow_memory_a100();
    double times[256];
    CHECK(p->n_instrs <= 256);
    if (p->n_instrs > 256) return;
    cost_estimate e = estimate_in(p, &hw, COST_FP32, COST_GRADS_AUTO, times);
    int iy = instr_of(p, y[1]);
    double part = 4.0 * (M * K + K * F + M * F) / 1e9;
    CHECKF(iy >= 0 && close_rel(times[iy], part, 1e-9), "part %g want %g", iy >= 0 ? times[iy] : -1, part);
    CHECKF(times[im] > 0 && times[ie] > 0 && times[io] > 0, "copies %g %g %g", times[im], times[ie], times[io]);
    for (int i = 0; i < 3; i++) CHECKF(times[instr_of(p, sl[i])] == 0, "part %d's slice %g", i, times[instr_of(p, sl[i])]);
    CHECK(e.compute_time > 0);
    spmd_free(p);
    ir_free(g);
}

/* Dropout of a matmul's result, y = (x @ w) * dropout_mask: the mask is
 * drawn inside the einsum's kernel (never read from memory).  Kept for a
 * later reader (the backward pass; here an output), the kernel writes it as
 * a fused compiler keeps it, one byte an element; otherwise not at all. */
static void test_dropout_in_kernel(void)
{
    enum { M = 256, K = 128, F = 512 };
    for (int keep = 0; keep < 2; keep++) {
        ir_graph *g = ir_new("dropout");
        int64_t dx[2] = {M, K}, dw[2] = {K, F}, dy[2] = {M, F};
        int x = ir_arg(g, "x", IR_INPUT, IR_F32, 2, dx);
        int w = ir_arg(g, "w", IR_INPUT, IR_F32, 2, dw);
        int y = ir_einsum(g, "mk,kf->mf", x, w);
        int mask = ir_dropout_mask(g, 2, dy, 0.1, 7);
        int z = ir_binary(g, IR_OP_MUL, y, mask);
        ir_add_output(g, z, -1);
        if (keep) ir_add_output(g, mask, -1);
        CHECK(ir_error(g) == NULL);
        spmd_program *p = lower_one(g);
        int iy = instr_of(p, y), iz = instr_of(p, z);
        CHECKF(iy >= 0 && p->fuse.klen[iy] == iz - iy + 1 && p->fuse.n_kernels == 1, "kernels %d", p->fuse.n_kernels);
        cost_hw hw = slow_memory_a100();
        cost_estimate e = estimate(p, &hw);
        double want = 4.0 * (M * K + K * F) + 4.0 * M * F + (keep ? 1.0 * M * F : 0);
        CHECKF(close_rel(e.compute_time, want / 1e9, 1e-9), "keep %d: %g want %g", keep, e.compute_time, want / 1e9);
        CHECKF(close_rel(e.peak_memory, want, 1e-9), "keep %d: peak %g want %g", keep, e.peak_memory, want);
        spmd_free(p);
        ir_free(g);
    }
}

/* A GPT step on 2 A100s (data parallel, bf16): the compiler's kernels cost
 * less time and memory than the executor's elementwise groups, the
 * communication is the same, and every compute instruction lies in exactly
 * one kernel or is a folded broadcast. */
static void test_gpt_step(const char *spec)
{
    ir_graph *g = test_build_step(spec);
    char err[512];
    spmd_program *p = lower(g, "d=2", "dp:d");
    int covered = 0, computes = 0, masks = 0, masks_inside = 0;
    for (int i = 0; i < p->n_instrs; i++) {
        computes += p->instrs[i].kind == SPMD_COMPUTE;
        covered += p->fuse.kfold[i];
        if (p->fuse.klen[i] > 0)
            for (int j = i; j < i + p->fuse.klen[i]; j++) {
                covered += !p->fuse.kfold[j] && p->instrs[j].kind == SPMD_COMPUTE;
                if (p->instrs[j].kind == SPMD_COMPUTE && g->ops[p->instrs[j].op].kind == IR_OP_DROPOUT_MASK)
                    masks_inside += j > i; /* drawn inside a kernel that something else leads */
            }
        masks += p->instrs[i].kind == SPMD_COMPUTE && g->ops[p->instrs[i].op].kind == IR_OP_DROPOUT_MASK;
    }
    CHECKF(covered == computes && p->fuse.n_kernels < computes / 2, "%s: %d of %d, %d kernels", spec, covered, computes,
           p->fuse.n_kernels);
    /* with dropout: the embeddings' and 3 per layer (gpt-tiny has 2 layers) */
    CHECKF(masks == (strstr(spec, "dropout") ? 7 : 0) && masks_inside == masks, "%s: %d masks, %d inside kernels", spec,
           masks, masks_inside);
    cost_hw hw;
    CHECK(cost_hw_preset("a100", &hw, err, sizeof err) == 0);
    cost_options o = {COST_MIXED_BF16, 0, 0, COST_GRADS_AUTO};
    cost_estimate k, grp;
    cost_ws *ws = cost_ws_new(p->g);
    CHECK(cost_estimate_program(ws, p, &hw, &o, &k, err, sizeof err) == 0);
    hw.fused_elementwise = 1;
    CHECK(cost_estimate_program(ws, p, &hw, &o, &grp, err, sizeof err) == 0);
    CHECKF(k.compute_time < grp.compute_time && k.peak_memory < grp.peak_memory && k.comm_time == grp.comm_time,
           "kernels %g s %g B, groups %g s %g B", k.compute_time, k.peak_memory, grp.compute_time, grp.peak_memory);
    cost_ws_free(ws);
    spmd_free(p);
    ir_free(g);
}

/* Mixed precision computes the loss head in f32 (docs/cost-model.md,
 * section 4): in h = x @ w1, logits = h @ w2, loss = cross-entropy(logits),
 * the first einsum writes h at 2 bytes, the second writes the logits at 4,
 * and the backward einsum making w2's gradient reads the logits' gradient
 * at 4 (and h at 2; writes the gradient at 2 with working gradients, 4 with
 * f32).  Each einsum is a kernel alone, so on a memory-bound profile its
 * time is exactly its bytes.  In f32 every value is 4 bytes, as before. */
static void test_loss_head_f32(void)
{
    enum { B = 64, H = 128, V = 512 };
    ir_graph *f = ir_new("head");
    int64_t dx[2] = {B, H}, dw1[2] = {H, H}, dw2[2] = {H, V}, dl[1] = {B};
    int x = ir_arg(f, "x", IR_INPUT, IR_F32, 2, dx);
    ir_arg(f, "w1", IR_PARAM, IR_F32, 2, dw1);
    ir_arg(f, "w2", IR_PARAM, IR_F32, 2, dw2);
    int labels = ir_arg(f, "labels", IR_INPUT, IR_I32, 1, dl);
    int h = ir_einsum(f, "bh,hk->bk", x, ir_find(f, "w1"));
    int logits = ir_einsum(f, "bk,kv->bv", h, ir_find(f, "w2"));
    ir_set_loss(f, mb_cross_entropy(f, logits, labels));
    CHECKF(ir_error(f) == NULL, "%s", ir_error(f) ? ir_error(f) : "");
    char err[256];
    ir_optimizer adam = ir_default_adam();
    ir_graph *g = ir_train_step(f, &adam, err, sizeof err);
    CHECKF(g != NULL, "%s", err);
    if (!g) return;
    spmd_program *p = lower_one(g);
    int ih = instr_of(p, ir_find(g, f->values[h].name)), il = instr_of(p, ir_find(g, f->values[logits].name));
    int w2 = ir_find(g, "w2"), idw = -1;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].grad_of == w2) idw = instr_of(p, v);
    CHECK(ih >= 0 && il >= 0 && idw >= 0);
    if (ih < 0 || il < 0 || idw < 0) return;
    CHECKF(g->ops[p->instrs[idw].op].kind == IR_OP_EINSUM && p->fuse.klen[ih] == 1 && p->fuse.klen[il] == 1 &&
               p->fuse.klen[idw] == 1, "kernels %d %d %d", p->fuse.klen[ih], p->fuse.klen[il], p->fuse.klen[idw]);
    cost_hw hw = slow_memory_a100();
    double *times = calloc((size_t)p->n_instrs, sizeof *times);
    if (!times) abort();
    for (int grads = 0; grads < 2; grads++) {
        cost_estimate e = estimate_in(p, &hw, COST_MIXED_BF16, grads ? COST_GRADS_F32 : COST_GRADS_WORKING, times);
        double th = (2.0 * B * H + 2.0 * H * H + 2.0 * B * H) / 1e9, tl = (2.0 * B * H + 2.0 * H * V + 4.0 * B * V) / 1e9;
        double tdw = (2.0 * B * H + 4.0 * B * V + (grads ? 4.0 : 2.0) * H * V) / 1e9;
        CHECKF(close_rel(e.instr_time[ih], th, 1e-9), "h: %g want %g", e.instr_time[ih], th);
        CHECKF(close_rel(e.instr_time[il], tl, 1e-9), "logits: %g want %g", e.instr_time[il], tl);
        CHECKF(close_rel(e.instr_time[idw], tdw, 1e-9), "grad w2 (grads %d): %g want %g", grads, e.instr_time[idw], tdw);
    }
    cost_estimate e = estimate_in(p, &hw, COST_FP32, COST_GRADS_F32, times);
    CHECKF(close_rel(e.instr_time[il], 4.0 * (B * H + H * V + B * V) / 1e9, 1e-9), "f32 logits: %g", e.instr_time[il]);
    CHECKF(close_rel(e.instr_time[ih], 4.0 * (2 * B * H + H * H) / 1e9, 1e-9), "f32 h: %g", e.instr_time[ih]);
    free(times);
    spmd_free(p);
    ir_free(g);
    ir_free(f);
}

int main(void)
{
    test_loss_head_f32();
    test_epilogue();
    test_softmax_and_columns();
    test_unfolded_broadcast();
    test_strided_slices();
    test_dropout_in_kernel();
    test_gpt_step("gpt-tiny");
    test_gpt_step("gpt-tiny:dropout=0.1");
    return test_done();
}
