/* test_memory.c - the memory tactics that rewrite the training step:
 * recomputation (ir/remat.c, the remat: tactic) and micro-batches
 * (ir/microbatch.c, the microbatch: tactic).
 *
 * - the rewritten step computes bit for bit what the original computes (the
 *   clones are the same ops on the same inputs, run by the same kernels);
 * - the backward pass reads no internal forward value of a recomputed layer;
 * - the activation peak of a GPT layer stack with every block recomputed
 *   grows by exactly one checkpoint (b x s x h) per layer, and above the
 *   checkpoints holds about one layer's working set;
 * - the recomputed FLOPs are a part of the layers' forward FLOPs; with full
 *   recomputation (remat:full) exactly the layers' forward FLOPs;
 * - bad ranges and a schedule applied without its rewrite are refused;
 * - N micro-batches compute the whole batch's loss and update (up to float
 *   summation order), hold about 1/N of the activations, and all-reduce
 *   each gradient once per step;
 * - the pricer's gather choice (autopart/pricer.c): keep where both policies fit
 *   (it is faster), regather where only it fits or neither does;
 * - the memory level (autopart/memory.c): its configurations, its order of
 *   plans (fits first, then the shorter step, then the smaller peak), and a
 *   --time limit shared by the whole level (no configuration after it).
 */
#include "analysis/pipeline.h"
#include "analysis/schedule.h"
#include "cost/cost.h"
#include "exec/exec.h"
#include "models/models.h"
#include "autopart/memory.h"
#include "tests/test.h"
#include "tests/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Applies the graph tactics of `sched` on a one-device mesh to *g and
 * returns the estimate of the schedule (f32, a100). */
static cost_estimate price(ir_graph **g, const char *mesh_text, const char *sched)
{
    char err[512];
    shard_mesh mesh;
    schedule sc;
    cost_estimate e;
    memset(&e, 0, sizeof e);
    if (shard_mesh_parse(mesh_text, &mesh, err, sizeof err) < 0 || sched_parse(sched, &mesh, &sc, err, sizeof err) < 0 ||
        sched_rewrite(&sc, g, err, sizeof err) < 0) {
        CHECKF(0, "%s: %s", sched, err);
        return e;
    }
    shard_state *st = shard_state_new(*g, &mesh);
    CHECKF(sched_apply(&sc, st, err, sizeof err) == 0, "%s: %s", sched, err);
    spmd_program *p = spmd_lower(st);
    cost_hw hw;
    cost_hw_preset("a100", &hw, err, sizeof err);
    cost_ws *ws = cost_ws_new(*g);
    CHECK(cost_estimate_program(ws, p, &hw, NULL, &e, err, sizeof err) == 0);
    cost_ws_free(ws);
    spmd_free(p);
    shard_state_free(st);
    return e;
}

/* Runs `steps` reference steps of a and b from seed 7 and returns 1 when
 * every output of a equals, bit for bit, the output of b of the same name. */
static int same_outputs(const ir_graph *a, const ir_graph *b, int steps)
{
    char err[512];
    exec_ref *ra = exec_ref_new(a, 0, err, sizeof err), *rb = exec_ref_new(b, 0, err, sizeof err);
    if (!ra || !rb) return 0;
    exec_ref_init_args(ra, 7);
    exec_ref_init_args(rb, 7);
    int same = a->n_outputs == b->n_outputs;
    for (int s = 0; s < steps && same; s++) {
        same = exec_ref_run(ra, err, sizeof err) == 0 && exec_ref_run(rb, err, sizeof err) == 0;
        for (int i = 0; i < a->n_outputs && same; i++) {
            int va = a->outputs[i].value, vb = ir_find(b, a->values[va].name);
            same = vb >= 0 && !memcmp(exec_ref_data(ra, va), exec_ref_data(rb, vb), ir_bytes(&a->values[va]));
            if (!same) fprintf(stderr, "step %d: output %s differs\n", s + 1, a->values[va].name);
        }
        exec_ref_apply_updates(ra);
        exec_ref_apply_updates(rb);
    }
    exec_ref_free(ra);
    exec_ref_free(rb);
    return same;
}

/* Whether op i of g is forward (the loss depends on its result). */
static unsigned char *forward_values(const ir_graph *g)
{
    unsigned char *fwd = calloc((size_t)g->n_values, 1);
    fwd[g->loss] = 1;
    for (int i = g->n_ops - 1; i >= 0; i--)
        if (fwd[g->ops[i].out])
            for (int k = 0; k < g->ops[i].n_in; k++) fwd[g->ops[i].in[k]] = 1;
    return fwd;
}

/* How many times a backward op of step r reads an internal value of a
 * layer (one no forward op of another layer reads): 0 after a remat
 * rewrite, whose backward ops read only checkpoints, params and inputs. */
static int internal_reads(const ir_graph *r)
{
    unsigned char *fwd = forward_values(r);
    int bad = 0;
    for (int i = 0; i < r->n_ops; i++) {
        const ir_op *o = &r->ops[i];
        if (fwd[o->out]) continue;
        for (int k = 0; k < o->n_in; k++) {
            int a = o->in[k], p = r->values[a].producer;
            if (p < 0 || !fwd[a] || r->ops[p].layer < 0) continue;
            int read_outside = 0; /* by a forward op of another layer */
            for (int j = 0; j < r->n_ops && !read_outside; j++)
                if (fwd[r->ops[j].out] && r->ops[j].layer != r->ops[p].layer)
                    read_outside = r->ops[j].in[0] == a || (r->ops[j].n_in > 1 && r->ops[j].in[1] == a);
            bad += !read_outside;
        }
    }
    free(fwd);
    return bad;
}

static void test_remat_rewrite(void)
{
    char err[512];
    ir_graph *g = test_build_step("gpt-tiny");
    int n = 0;
    ir_graph *r = ir_remat(g, 0, 99, &n, err, sizeof err);
    CHECKF(r != NULL, "%s", err);
    if (!r) {
        ir_free(g);
        return;
    }
    CHECK(ir_verify(r, err, sizeof err) == 0);
    int clones = 0, recorded = 0;
    for (int v = 0; v < r->n_values; v++) {
        const ir_value *x = &r->values[v];
        if (x->made_by != IR_MADE_BY_REMAT) continue;
        clones++; /* a clone records its original: the same op on a value of the same shape, made earlier */
        const ir_value *o = x->of >= 0 && x->of < v ? &r->values[x->of] : NULL;
        recorded += o && o->made_by == IR_MADE_BY_STEP && o->producer >= 0 && r->ops[o->producer].kind == r->ops[x->producer].kind &&
                    o->rank == x->rank && !memcmp(o->dims, x->dims, sizeof o->dims);
    }
    CHECKF(clones == n && recorded == n && n > 10 && r->n_ops == g->n_ops + n && r->rewrites.remat == 1 && !r->rewrites.remat_full,
           "%d clones (%d recorded), %d reported, %d -> %d ops", clones, recorded, n, g->n_ops, r->n_ops);
    int bad = internal_reads(r);
    CHECKF(bad == 0, "%d backward reads of internal forward values", bad);
    /* the same numbers, bit for bit, over two steps (the second from the
     * first's updates) */
    CHECK(same_outputs(g, r, 2));
    /* one layer only: fewer clones, same numbers */
    int n1 = 0;
    ir_graph *r1 = ir_remat(g, 1, 1, &n1, err, sizeof err);
    CHECKF(r1 && n1 > 0 && 2 * n1 == n, "layer 1 alone: %d clones of %d", n1, n);
    if (r1) CHECK(same_outputs(g, r1, 1));
    ir_free(r1);
    ir_free(r);
    ir_free(g);
}

/* Activation peak of a GPT stack, 4 and 8 layers, with and without every
 * block recomputed (f32, one device).  Without recomputation each layer adds
 * its saved activations A; with it, each layer adds exactly its checkpoint
 * (the block's output, b x s x h f32), and what stands above the checkpoints
 * is the working set of the layer being differentiated (its recomputed
 * activations plus its backward temporaries) and of the LM head: measured
 * 1.24 A here (a100 preset, 2026-11-23), checked <= 1.5 A. */
static void test_remat_memory(void)
{
    static const char *spec[2] = {"gpt:layers=4,hidden=128,heads=4,seq=64,batch=4,vocab=256",
                                  "gpt:layers=8,hidden=128,heads=4,seq=64,batch=4,vocab=256"};
    double act[2][2], flops[2][2], fwd_flops[2] = {0, 0};
    for (int m = 0; m < 2; m++)
        for (int rm = 0; rm < 2; rm++) {
            ir_graph *g = test_build_step(spec[m]);
            if (!rm) { /* FLOPs of the layers' forward ops (einsums as the estimator counts them) */
                unsigned char *fwd = forward_values(g);
                for (int i = 0; i < g->n_ops; i++)
                    if (fwd[g->ops[i].out] && g->ops[i].layer >= 0 && g->ops[i].kind == IR_OP_EINSUM)
                        fwd_flops[m] += ir_op_flops(g, i);
                free(fwd);
            }
            cost_estimate e = price(&g, "batch=1", rm ? "dp:batch,remat:all" : "dp:batch");
            act[m][rm] = e.activation_peak;
            flops[m][rm] = e.flops;
            ir_free(g);
        }
    double ckpt = 4.0 * 64 * 128 * 4, A = (act[1][0] - act[0][0]) / 4;
    double slope = (act[1][1] - act[0][1]) / 4, above = act[0][1] - 4 * ckpt;
    CHECKF(fabs(slope - ckpt) < 1e-6 * ckpt, "recomputed stack grows by %.0f bytes a layer, checkpoint is %.0f", slope, ckpt);
    CHECKF(above > 0.5 * A && above <= 1.5 * A, "above the checkpoints %.0f bytes, one layer's activations %.0f", above, A);
    CHECKF(act[1][1] < act[1][0] / 4, "8 layers: activation peak %.0f with remat, %.0f without", act[1][1], act[1][0]);
    /* extra FLOPs: a part of the layers' forward einsums (the einsums whose
     * results the backward pass does not read are not recomputed) */
    for (int m = 0; m < 2; m++) {
        double extra = flops[m][1] - flops[m][0];
        CHECKF(extra > 0.5 * fwd_flops[m] && extra <= fwd_flops[m] * 1.05, "%s: %.4g extra FLOPs, layers' forward %.4g",
               spec[m], extra, fwd_flops[m]);
        printf("%s: activation peak %.3g MB -> %.3g MB with remat:all, FLOPs +%.1f%%\n", spec[m], act[m][0] / 1e6,
               act[m][1] / 1e6, 100 * (flops[m][1] / flops[m][0] - 1));
    }
    printf("per layer: checkpoint %.0f bytes, activations without remat %.0f bytes; above the checkpoints %.2f layers\n",
           ckpt, A, above / A);
}

/* Full recomputation (remat:full, ir_remat_full): every forward op of every
 * layer is cloned, all of a layer's clones in one run before its backward
 * pass; the backward pass reads no internal value; the outputs are bit for
 * bit the plain step's; the extra FLOPs are exactly the layers' forward
 * FLOPs (the selective rewrite's are fewer); the activation peak still grows
 * by one checkpoint a layer. */
static void test_remat_full(void)
{
    char err[512];
    ir_graph *g = test_build_step("gpt-tiny");
    int ns = 0, nf = 0, n1 = 0, layer_ops = 0;
    ir_graph *sel = ir_remat(g, 0, 99, &ns, err, sizeof err), *r = ir_remat_full(g, 0, 99, &nf, err, sizeof err);
    CHECKF(sel && r, "%s", err);
    if (!sel || !r) goto out;
    unsigned char *fwd = forward_values(g);
    for (int i = 0; i < g->n_ops; i++) layer_ops += fwd[g->ops[i].out] && g->ops[i].layer >= 0;
    free(fwd);
    CHECKF(nf == layer_ops && nf > ns && r->n_ops == g->n_ops + nf, "full: %d clones, %d forward ops in layers, selective %d",
           nf, layer_ops, ns);
    CHECK(ir_verify(r, err, sizeof err) == 0 && internal_reads(r) == 0);
    /* each layer's clones are one run of values (re-run together) */
    int runs = 0, prev = -2, prev_layer = -2;
    for (int v = 0; v < r->n_values; v++) {
        if (r->values[v].made_by != IR_MADE_BY_REMAT) continue;
        int layer = r->ops[r->values[v].producer].layer;
        runs += v != prev + 1 || layer != prev_layer;
        prev = v;
        prev_layer = layer;
    }
    CHECKF(runs == g->n_layers, "%d runs of clones for %d layers", runs, g->n_layers);
    CHECK(same_outputs(g, r, 2));
    ir_graph *r1 = ir_remat_full(g, 1, 1, &n1, err, sizeof err);
    CHECKF(r1 && 2 * n1 == nf && same_outputs(g, r1, 1), "layer 1 alone: %d clones of %d", n1, nf);
    ir_free(r1);
    /* FLOPs and activation peaks on 4 and 8 layers (f32, one device) */
    static const char *spec[2] = {"gpt:layers=4,hidden=128,heads=4,seq=64,batch=4,vocab=256",
                                  "gpt:layers=8,hidden=128,heads=4,seq=64,batch=4,vocab=256"};
    double act[2];
    for (int m = 0; m < 2; m++) {
        ir_graph *a = test_build_step(spec[m]), *b = test_build_step(spec[m]), *c = test_build_step(spec[m]);
        double layer_fwd = 0;
        unsigned char *f = forward_values(a);
        for (int i = 0; i < a->n_ops; i++)
            if (f[a->ops[i].out] && a->ops[i].layer >= 0) layer_fwd += ir_op_flops(a, i);
        free(f);
        cost_estimate plain = price(&a, "batch=1", "dp:batch"), full = price(&b, "batch=1", "dp:batch,remat:full");
        cost_estimate selective = price(&c, "batch=1", "dp:batch,remat:all");
        double extra = full.flops - plain.flops;
        CHECKF(fabs(extra - layer_fwd) <= 1e-9 * layer_fwd && selective.flops < full.flops,
               "%s: full recomputation adds %.6g FLOPs, layers' forward %.6g", spec[m], extra, layer_fwd);
        printf("%s: FLOPs +%.1f%% with remat:full, +%.1f%% with remat:all\n", spec[m], 100 * extra / plain.flops,
               100 * (selective.flops / plain.flops - 1));
        act[m] = full.activation_peak;
        ir_free(a);
        ir_free(b);
        ir_free(c);
    }
    double ckpt = 4.0 * 64 * 128 * 4, slope = (act[1] - act[0]) / 4;
    CHECKF(fabs(slope - ckpt) < 1e-6 * ckpt, "remat:full stack grows by %.0f bytes a layer, checkpoint is %.0f", slope, ckpt);
out:
    ir_free(sel);
    ir_free(r);
    ir_free(g);
}

/* Attention-only recomputation (remat:attn, ir_remat_attn): per layer the
 * clones hold exactly one einsum, the scores of two activations (no
 * projection with a param is re-run), and the softmax, masks and dropout
 * around it; the backward pass reads no internal value of the cores; the
 * outputs are bit for bit the plain step's; the activation peak lies between
 * the plain step's and the selective rewrite's, and the extra FLOPs are far
 * below the selective rewrite's. */
static void test_remat_attn(void)
{
    char err[512];
    const char *spec = "gpt:layers=4,hidden=128,heads=4,seq=64,batch=4,vocab=256,dropout=0.1";
    ir_graph *g = test_build_step(spec);
    int n = 0;
    ir_graph *r = ir_remat_attn(g, 0, 99, &n, err, sizeof err);
    CHECKF(r != NULL, "%s", err);
    if (!r) {
        ir_free(g);
        return;
    }
    int einsums = 0, with_param = 0, masks = 0;
    for (int v = 0; v < r->n_values; v++) {
        if (strncmp(r->values[v].name, "remat/", 6)) continue;
        const ir_op *o = &r->ops[r->values[v].producer];
        einsums += o->kind == IR_OP_EINSUM;
        masks += o->kind == IR_OP_DROPOUT_MASK;
        for (int k = 0; k < o->n_in; k++) with_param += r->values[o->in[k]].role == IR_PARAM;
    }
    CHECKF(einsums == g->n_layers && with_param == 0 && masks == g->n_layers && n > 4 * g->n_layers,
           "%d clones: %d einsums, %d dropout masks, %d reads of params for %d layers", n, einsums, masks, with_param,
           g->n_layers);
    CHECK(ir_verify(r, err, sizeof err) == 0);
    CHECK(same_outputs(g, r, 2));
    ir_graph *one = ir_remat_attn(g, 2, 2, NULL, err, sizeof err);
    CHECK(one && same_outputs(g, one, 1));
    ir_free(one);
    ir_free(r);
    ir_free(g);
    ir_graph *a = test_build_step(spec), *b = test_build_step(spec), *c = test_build_step(spec);
    cost_estimate plain = price(&a, "batch=1", "dp:batch"), attn = price(&b, "batch=1", "dp:batch,remat:attn");
    cost_estimate sel = price(&c, "batch=1", "dp:batch,remat:all");
    CHECKF(attn.activation_peak < plain.activation_peak && attn.activation_peak > sel.activation_peak,
           "activation peaks: plain %.4g, remat:attn %.4g, remat:all %.4g", plain.activation_peak, attn.activation_peak,
           sel.activation_peak);
    CHECKF(attn.flops > plain.flops && attn.flops - plain.flops < 0.5 * (sel.flops - plain.flops),
           "extra FLOPs: remat:attn %.4g, remat:all %.4g", attn.flops - plain.flops, sel.flops - plain.flops);
    printf("%s: activation peak %.3g MB, %.3g MB with remat:attn (+%.1f%% FLOPs), %.3g MB with remat:all (+%.1f%%)\n", spec,
           plain.activation_peak / 1e6, attn.activation_peak / 1e6, 100 * (attn.flops / plain.flops - 1),
           sel.activation_peak / 1e6, 100 * (sel.flops / plain.flops - 1));
    ir_free(a);
    ir_free(b);
    ir_free(c);
    /* a model without an einsum of two activations */
    ir_graph *mlp = test_build_step("mlp-tiny");
    CHECK(ir_remat_attn(mlp, 0, 99, NULL, err, sizeof err) == NULL && strstr(err, "attention cores"));
    ir_free(mlp);
}

static ir_graph *build_micro(const char *spec, int micro, int sgd);

/* Full recomputation of a step of several micro-batches: each micro-batch's
 * copy of a layer is re-run before its own backward pass (it was once re-run
 * with the first copy's, before the second's forward had run, which dropped
 * gradients' all-reduces and priced less work than no recomputation).  The
 * numbers are the step's bit for bit; on two devices the collectives are
 * those of the selective rewrite; full recomputes more than selective. */
static void test_remat_full_micro(void)
{
    char err[512];
    ir_graph *g = build_micro("gpt-tiny:dropout=0.1", 2, 0);
    int nf = 0, ns = 0;
    ir_graph *full = ir_remat_full(g, 0, 99, &nf, err, sizeof err), *sel = ir_remat(g, 0, 99, &ns, err, sizeof err);
    CHECKF(full && sel && nf > ns, "%s", err);
    if (full) CHECK(ir_verify(full, err, sizeof err) == 0 && same_outputs(g, full, 1));
    ir_free(full);
    ir_free(sel);
    ir_free(g);
    ir_graph *a = build_micro("gpt-tiny", 2, 0), *b = build_micro("gpt-tiny", 2, 0), *c = build_micro("gpt-tiny", 2, 0);
    cost_estimate plain = price(&a, "batch=2", "dp:batch,microbatch:2"), f = price(&b, "batch=2", "dp:batch,microbatch:2,remat:full");
    cost_estimate s = price(&c, "batch=2", "dp:batch,microbatch:2,remat:all");
    CHECKF(f.comm_bytes == s.comm_bytes && f.comm_bytes == plain.comm_bytes && f.flops > s.flops && s.flops > plain.flops,
           "2 micro-batches: bytes %.6g (full) %.6g (selective) %.6g (none), FLOPs %.6g %.6g %.6g", f.comm_bytes, s.comm_bytes,
           plain.comm_bytes, f.flops, s.flops, plain.flops);
    ir_free(a);
    ir_free(b);
    ir_free(c);
}

static void test_remat_errors(void)
{
    char err[512];
    ir_graph *g = test_build_step("gpt-tiny");
    CHECK(ir_remat(g, 5, 7, NULL, err, sizeof err) == NULL && strstr(err, "layers 0-1"));
    CHECK(ir_remat(g, 1, 0, NULL, err, sizeof err) == NULL && strstr(err, "layers 1-0"));
    shard_mesh mesh;
    schedule sc;
    shard_mesh_parse("batch=2", &mesh, err, sizeof err);
    static const char *bad[] = {"remat", "remat:", "remat:x", "remat:2-1", "remat:1-", "remat:-1", "remat:1:2",
                                "remat:full:full", "remat:1:fll", "remat:all:full:x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECKF(sched_parse(bad[i], &mesh, &sc, err, sizeof err) < 0 && strstr(err, "remat:all"), "'%s' -> '%s'", bad[i], err);
    CHECK(sched_parse("remat:0-1,dp:batch", &mesh, &sc, err, sizeof err) == 0 && sc.t[0].lo == 0 && sc.t[0].hi == 1);
    char text[128];
    CHECK(!strcmp(sched_str(&sc, &mesh, text, sizeof text), "remat:0-1,dp:batch") && sc.t[0].dim == 0);
    /* full recomputation: remat:full, remat:LAYERS:full; remat:all:full prints as remat:full */
    CHECK(sched_parse("remat:full,remat:1:full,remat:0-1:full,remat:all:full", &mesh, &sc, err, sizeof err) == 0 &&
          sc.t[0].dim == 1 && sc.t[0].hi == 1 << 20 && sc.t[1].lo == 1 && sc.t[1].hi == 1 && sc.t[2].dim == 1);
    CHECK(!strcmp(sched_str(&sc, &mesh, text, sizeof text), "remat:full,remat:1:full,remat:0-1:full,remat:full"));
    /* attention-only: remat:attn, remat:LAYERS:attn */
    schedule sa;
    CHECK(sched_parse("remat:attn,remat:0-1:attn,remat:all:attn", &mesh, &sa, err, sizeof err) == 0 &&
          sa.t[0].dim == IR_REMAT_ATTN && sa.t[1].hi == 1 && sa.t[2].dim == IR_REMAT_ATTN);
    CHECK(!strcmp(sched_str(&sa, &mesh, text, sizeof text), "remat:attn,remat:0-1:attn,remat:attn"));
    CHECK(sched_parse("remat:attn:full", &mesh, &sa, err, sizeof err) < 0 && strstr(err, "remat:attn"));
    /* a schedule with remat applied to a step that was not rewritten */
    shard_state *st = shard_state_new(g, &mesh);
    CHECK(sched_apply(&sc, st, err, sizeof err) < 0 && strstr(err, "not rewritten"));
    shard_state_free(st);
    /* the MLP's layers are recomputed as well: same numbers */
    ir_graph *mlp = test_build_step("mlp-tiny");
    ir_graph *r = ir_remat(mlp, 0, 99, NULL, err, sizeof err);
    CHECKF(r && same_outputs(mlp, r, 2), "%s", r ? "outputs differ" : err);
    ir_free(r);
    ir_free(mlp);
    /* a graph without layer tags */
    ir_graph *f = ir_new("flat");
    int64_t d[1] = {4};
    int x = ir_arg(f, "x", IR_PARAM, IR_F32, 1, d);
    ir_set_loss(f, ir_reduce(f, IR_OP_REDUCE_SUM, ir_binary(f, IR_OP_MUL, x, x), 1, (int64_t[]){0}));
    ir_graph *fs = ir_train_step(f, NULL, err, sizeof err);
    CHECK(fs && ir_remat(fs, 0, 0, NULL, err, sizeof err) == NULL && strstr(err, "no layers"));
    ir_free(fs);
    ir_free(f);
    ir_free(g);
}

/* The step of `spec` in `micro` micro-batches (caller frees); SGD when
 * sgd, else Adam. */
static ir_graph *build_micro(const char *spec, int micro, int sgd)
{
    model_config cfg;
    char err[512];
    ir_graph *g = NULL;
    ir_optimizer opt = ir_default_adam();
    if (sgd) {
        opt.kind = IR_SGD;
        opt.lr = 0.05;
    }
    if (model_parse(spec, &cfg, err, sizeof err) == 0) g = model_build_microbatched_step(&cfg, &opt, micro, err, sizeof err);
    if (!g) {
        fprintf(stderr, "%s: %s\n", spec, err);
        exit(1);
    }
    return g;
}

/* Largest |a - b| over n floats, relative to the largest |a|. */
static double rel_diff(const float *a, const float *b, int64_t n)
{
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)a[i]));
    }
    return m > 0 ? d / m : d;
}

/* One SGD step of the whole batch and one of `micro` micro-batches from the
 * same params and the same examples (micro-batch k gets rows k B/N ..
 * (k+1) B/N of every input): the same loss and updated params (SGD: the
 * update is lr times the mean gradient, so this checks the accumulated
 * gradients; Adam divides by sqrt(v) and so magnifies the rounding of tiny
 * gradients, see tests/test_spmd.c).  Tolerance 1e-5
 * relative to each tensor's largest magnitude: both run in f32 and sum the
 * batch's terms in another order (per micro-batch, then across), which
 * moves results by a few units of roundoff (6e-8) times the terms; a
 * missing or doubled micro-batch moves the loss by far more. */
static void check_micro_equivalence(const char *spec, int micro)
{
    char err[512];
    ir_graph *g = build_micro(spec, 1, 1), *m = build_micro(spec, micro, 1);
    exec_ref *rg = exec_ref_new(g, 0, err, sizeof err), *rm = exec_ref_new(m, 0, err, sizeof err);
    exec_ref_init_args(rg, 11);
    exec_ref_init_args(rm, 11);
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role != IR_INPUT) continue;
        size_t part = ir_bytes(x) / (size_t)micro;
        for (int k = 0; k < micro; k++) { /* micro-batch k of input x, as the rewrite records it */
            int w = -1;
            for (int u = 0; u < m->n_values && w < 0; u++)
                if (m->values[u].batch_of && !strcmp(m->values[u].batch_of, x->name) && m->values[u].micro == k) w = u;
            CHECKF(w >= 0 && ir_bytes(&m->values[w]) == part && m->values[w].role == IR_INPUT, "%s: no micro-batch %d of %s of %zu bytes",
                   spec, k, x->name, part);
            if (w >= 0) memcpy(exec_ref_data(rm, w), (char *)exec_ref_data(rg, v) + (size_t)k * part, part);
        }
    }
    int rc_g = exec_ref_run(rg, err, sizeof err), rc_m = exec_ref_run(rm, err, sizeof err);
    CHECKF(rc_g == 0 && rc_m == 0, "%s: %s", spec, err);
    double loss = fabs(exec_ref_loss(rg) - exec_ref_loss(rm)) / fabs(exec_ref_loss(rg)), worst = 0;
    const char *worst_name = "-";
    for (int i = 0; i < g->n_outputs; i++) {
        int u = g->outputs[i].updates;
        if (u < 0 || g->values[u].role != IR_PARAM) continue;
        int w = -1;
        for (int j = 0; j < m->n_outputs && w < 0; j++)
            if (m->outputs[j].updates >= 0 && !strcmp(m->values[m->outputs[j].updates].name, g->values[u].name))
                w = m->outputs[j].value;
        CHECK(w >= 0);
        if (w < 0) continue;
        double d = rel_diff(exec_ref_data(rg, g->outputs[i].value), exec_ref_data(rm, w), ir_numel(&g->values[u]));
        if (d > worst) {
            worst = d;
            worst_name = g->values[u].name;
        }
    }
    CHECKF(loss < 1e-5 && worst < 1e-5, "%s in %d micro-batches: loss %.2e, params %.2e (%s)", spec, micro, loss, worst,
           worst_name);
    printf("%s in %d micro-batches vs the whole batch: loss %.1e, new params %.1e (%s)\n", spec, micro, loss, worst,
           worst_name);
    exec_ref_free(rg);
    exec_ref_free(rm);
    ir_free(g);
    ir_free(m);
}

static void test_microbatch(void)
{
    check_micro_equivalence("gpt-tiny", 2);
    check_micro_equivalence("gpt-tiny", 4);
    check_micro_equivalence("mlp-tiny", 4);
    /* with dropout each micro-batch draws its own masks: 7 sites, 4 copies, 28 seeds */
    ir_graph *dg = build_micro("gpt-tiny:dropout=0.1", 4, 0);
    int64_t seeds[64];
    int n_masks = 0, distinct = 1;
    for (int i = 0; i < dg->n_ops; i++) {
        if (dg->ops[i].kind != IR_OP_DROPOUT_MASK) continue;
        for (int j = 0; j < n_masks && n_masks < 64; j++) distinct &= seeds[j] != dg->ops[i].attrs.ints[0];
        if (n_masks < 64) seeds[n_masks] = dg->ops[i].attrs.ints[0];
        n_masks++;
    }
    CHECKF(n_masks == 28 && distinct, "4 micro-batches with dropout: %d masks, distinct seeds %d", n_masks, distinct);
    ir_free(dg);
    /* N micro-batches (f32, one device): the activation peak holds one
     * micro-batch's activations, 1/N of the whole batch's, plus the
     * accumulated gradient (4 bytes a param, an intermediate until the
     * last micro-batch); checked within 5% (the temporaries shaped like
     * weights, not like the batch, do not shrink with N) */
    const char *spec = "gpt:layers=4,hidden=128,heads=4,seq=64,batch=8,vocab=256";
    double act1 = 0;
    for (int n = 1; n <= 4; n *= 2) {
        ir_graph *g = build_micro(spec, n, 0);
        double acc = n > 1 ? 4.0 * (double)ir_param_count(g) : 0;
        char sched[64];
        snprintf(sched, sizeof sched, "dp:batch,microbatch:%d", n);
        cost_estimate e = price(&g, "batch=1", sched);
        if (n == 1) act1 = e.activation_peak;
        double r = (e.activation_peak - acc) / act1 * n;
        CHECKF(fabs(r - 1) < 0.05, "%d micro-batches: activation peak %.4g, accumulator %.4g, whole batch %.4g (x N = %.3f)", n,
               e.activation_peak, acc, act1, r);
        printf("%s, %d micro-batches: activation peak %.4g MB = %.3f of 1/N the whole batch's + %.3g MB accumulated "
               "gradients; FLOPs %.4g\n", spec, n, e.activation_peak / 1e6, r, acc / 1e6, e.flops);
        ir_free(g);
    }
    /* gradients all-reduced once per step, not per micro-batch */
    char err[512];
    shard_mesh mesh;
    shard_mesh_parse("batch=2", &mesh, err, sizeof err);
    int count[2] = {0, 0}, buckets[2] = {0, 0}, split = 0;
    for (int k = 0; k < 2; k++) {
        ir_graph *g = build_micro("gpt-tiny", k ? 4 : 1, 0);
        schedule sc;
        sched_parse(k ? "dp:batch,microbatch:4" : "dp:batch", &mesh, &sc, err, sizeof err);
        shard_state *st = shard_state_new(g, &mesh);
        CHECK(sched_apply(&sc, st, err, sizeof err) == 0);
        spmd_program *p = spmd_lower(st);
        for (int i = 0; i < p->n_instrs; i++) count[k] += p->instrs[i].kind == SPMD_ALL_REDUCE;
        buckets[k] = p->n_buckets;
        /* dp splits every micro-batch's inputs, not only the first's */
        for (int v = 0; v < g->n_values && k; v++)
            split += g->values[v].role == IR_INPUT && st->spec[v].n[0] == 1;
        spmd_free(p);
        shard_state_free(st);
        ir_free(g);
    }
    CHECKF(count[0] == count[1] && count[0] > 10, "all-reduces: %d in one batch, %d in 4 micro-batches", count[0], count[1]);
    CHECKF(buckets[0] == buckets[1], "gradient buckets: %d in one batch, %d in 4 micro-batches", buckets[0], buckets[1]);
    CHECKF(split == 8, "%d of the 4 micro-batches' 8 inputs split by dp", split);
    /* refused: a count that does not divide the batch, bad syntax, a step
     * that was not built for the tactic */
    model_config cfg;
    model_parse("gpt-tiny", &cfg, err, sizeof err);
    CHECK(model_build_microbatched_step(&cfg, NULL, 3, err, sizeof err) == NULL && strstr(err, "does not divide the batch of 8"));
    schedule sc;
    static const char *bad[] = {"microbatch", "microbatch:0", "microbatch:x", "microbatch:2:3", "microbatch:2000"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECKF(sched_parse(bad[i], &mesh, &sc, err, sizeof err) < 0 && strstr(err, "microbatch:N"), "'%s' -> '%s'", bad[i], err);
    CHECK(sched_parse("microbatch:2,dp:batch", &mesh, &sc, err, sizeof err) == 0 && sched_microbatches(&sc) == 2);
    ir_graph *g = test_build_step("gpt-tiny");
    shard_state *st = shard_state_new(g, &mesh);
    CHECK(sched_apply(&sc, st, err, sizeof err) < 0 && strstr(err, "not built for it"));
    shard_state_free(st);
    ir_graph *one = ir_microbatch(g, 1, err, sizeof err);
    CHECK(one && one->n_ops == g->n_ops);
    ir_free(one);
    CHECK(ir_microbatch(g, 0, err, sizeof err) == NULL && strstr(err, "1 to 1024"));
    ir_free(g);
}

/* The pricer's gather choice on an MLP under zero3 over 4 devices: keep
 * gathers each weight once (less communication, a longer-lived copy), so with
 * room for both it is chosen; with a capacity between the two peaks only
 * regather fits and is chosen; with room for neither the smaller peak
 * (regather) is kept. */
static void test_gather_choice(void)
{
    char err[512];
    /* weights of 16 MB, so the default 25 MiB gradient buckets close between
     * layers and do not set both peaks */
    ir_graph *g = test_build_step("mlp:layers=4,batch=4,in=2048,hidden=2048,out=2048");
    shard_mesh mesh;
    schedule sc;
    shard_mesh_parse("d=4", &mesh, err, sizeof err);
    sched_parse("zero3:d", &mesh, &sc, err, sizeof err);
    shard_state *st = shard_state_new(g, &mesh), *scratch = shard_state_new(g, &mesh);
    CHECK(sched_apply(&sc, st, err, sizeof err) == 0);
    cost_hw hw;
    cost_hw_preset("a100", &hw, err, sizeof err);
    cost_options opt = {COST_FP32, 0, 0, COST_GRADS_AUTO};
    autopart_pricer pr;
    CHECK(autopart_pricer_init(&pr, &hw, &opt, NULL, scratch, err, sizeof err) == 0);
    cost_estimate re, kp, e;
    st->gather_policy = SPMD_GATHER_REGATHER;
    autopart_price(&pr, st, &re);
    st->gather_policy = SPMD_GATHER_KEEP;
    autopart_price(&pr, st, &kp);
    CHECKF(kp.peak_memory > re.peak_memory && kp.step_time < re.step_time, "keep %.0f B %.3g s, regather %.0f B %.3g s",
           kp.peak_memory, kp.step_time, re.peak_memory, re.step_time);
    double caps[3] = {0, (re.peak_memory + kp.peak_memory) / 2, re.peak_memory / 2};
    int want[3] = {SPMD_GATHER_KEEP, SPMD_GATHER_REGATHER, SPMD_GATHER_REGATHER};
    for (int i = 0; i < 3; i++) {
        pr.opt.memory_capacity = caps[i];
        pr.gather_auto = 1;
        st->gather_policy = 1 - want[i];
        autopart_price(&pr, st, &e);
        CHECKF(st->gather_policy == want[i] && pr.p->opts.gather_policy == want[i], "capacity %.0f: chose %s", caps[i],
               spmd_gather_policy_name(st->gather_policy));
        CHECK(e.peak_memory == (want[i] == SPMD_GATHER_KEEP ? kp.peak_memory : re.peak_memory));
        cost_estimate other;
        CHECK(autopart_price_other_gather(&pr, st, &other) == 0 && other.peak_memory != e.peak_memory);
        CHECK(st->gather_policy == want[i]);
    }
    /* data parallel gathers nothing again: the policy makes no difference */
    shard_state_reset(st);
    sched_parse("dp:d", &mesh, &sc, err, sizeof err);
    sched_apply(&sc, st, err, sizeof err);
    autopart_price(&pr, st, &e);
    cost_estimate other;
    CHECK(st->gather_policy == SPMD_GATHER_REGATHER && autopart_price_other_gather(&pr, st, &other) < 0);
    /* the gather: tactic sets the state's policy, and the schedule prints it back */
    CHECK(sched_parse("zero3:d,gather:keep", &mesh, &sc, err, sizeof err) == 0 && sched_gather_policy(&sc) == SPMD_GATHER_KEEP);
    char buf[256];
    CHECKF(!strcmp(sched_str(&sc, &mesh, buf, sizeof buf), "zero3:d,gather:keep"), "%s", buf);
    shard_state_reset(st);
    CHECK(sched_apply(&sc, st, err, sizeof err) == 0 && st->gather_policy == SPMD_GATHER_KEEP);
    CHECK(sched_parse("gather:all", &mesh, &sc, err, sizeof err) < 0 && strstr(err, "gather:keep or gather:regather"));
    autopart_pricer_free(&pr);
    shard_state_free(st);
    shard_state_free(scratch);
    ir_free(g);
}

static void test_memory_level(void)
{
    char err[512], l0[64], l1[64], l5[64];
    autopart_config cfg[AUTOPART_MAX_CONFIGS];
    shard_mesh mesh;
    schedule sc;
    shard_mesh_parse("batch=2", &mesh, err, sizeof err);
    sched_parse("dp:batch,auto", &mesh, &sc, err, sizeof err);
    int n = autopart_memory_configs(&sc, cfg);
    autopart_config_str(&cfg[0], &mesh, l0, sizeof l0);
    autopart_config_str(&cfg[1], &mesh, l1, sizeof l1);
    autopart_config_str(&cfg[5], &mesh, l5, sizeof l5);
    CHECKF(n == 6 && !l0[0] && !strcmp(l1, "remat:all") && !strcmp(l5, "remat:all,microbatch:4"), "%d configs", n);
    CHECK(cfg[1].remat == AUTOPART_REMAT_SELECTIVE && cfg[5].microbatches == 4 && !autopart_config_piped(&cfg[5]));
    /* a configuration's schedule is tactics, not text: its tactics then the user's, and back as text */
    schedule full;
    char text[SCHED_STR_MAX];
    CHECK(autopart_config_schedule(&cfg[5], NULL, 1, &sc, &full, err, sizeof err) == 0);
    CHECKF(!strcmp(sched_str(&full, &mesh, text, sizeof text), "remat:all,microbatch:4,gather:keep,dp:batch,auto"), "%s", text);
    sched_parse("microbatch:2,auto", &mesh, &sc, err, sizeof err);
    CHECK(autopart_memory_configs(&sc, cfg) == 1 && autopart_config_str(&cfg[0], &mesh, l0, sizeof l0)[0] == 0);
    cost_estimate fast_big = {.step_time = 1, .peak_memory = 9, .fits = 0}, slow_small = {.step_time = 3, .peak_memory = 2, .fits = 1},
                  fast_small = {.step_time = 2, .peak_memory = 5, .fits = 1}, huge = {.step_time = 1, .peak_memory = 20, .fits = 0};
    CHECK(autopart_better(&slow_small, &fast_big) && !autopart_better(&fast_big, &slow_small));
    CHECK(autopart_better(&fast_small, &slow_small) && !autopart_better(&slow_small, &fast_small));
    CHECK(autopart_better(&fast_big, &huge) && !autopart_better(&huge, &fast_big));
    CHECK(!autopart_better(&fast_small, &fast_small));
    /* --time is the whole level's: the plain step gets 4 / (n + 3) of it */
    CHECK(autopart_plain_seconds(30, 1) == 30 && autopart_plain_seconds(0, 6) == 0);
    CHECKF(fabs(autopart_plain_seconds(36, 6) - 16) < 1e-12, "%g", autopart_plain_seconds(36, 6));
    /* past the deadline no configuration is built or searched, and each says why */
    sched_parse("dp:batch,auto", &mesh, &sc, err, sizeof err);
    n = autopart_memory_configs(&sc, cfg);
    autopart_step out[AUTOPART_MAX_CONFIGS];
    memset(out, 0, sizeof out);
    autopart_memory_level m = {.mesh = &mesh, .deadline = autopart_clock() - 1};
    CHECK(autopart_memory_search(&m, cfg, &n, out) == 0);
    for (int i = 1; i < n; i++)
        CHECKF(!out[i].ok && !out[i].g && strstr(out[i].why, "--time limit is spent") &&
                   !strcmp(out[i].tactics, autopart_config_str(&cfg[i], &mesh, l1, sizeof l1)) && out[i].config.remat == cfg[i].remat &&
                   out[i].config.microbatches == cfg[i].microbatches,
               "%s: %s", out[i].tactics, out[i].why);
}

/* A user's graph whose values are named like the rewrites' ("remat/h",
 * "mb1/x", "loss/scaled"): it is the plain step, and no tactic takes it
 * for a rewritten one (the rewrites are data on the graph, ir_rewrites). */
static ir_graph *named_like_rewrites(void)
{
    ir_graph *f = ir_new("impostor");
    int64_t xd[2] = {4, 8}, wd[2] = {8, 8};
    ir_set_layer(f, 0);
    int x = ir_arg(f, "mb1/x", IR_INPUT, IR_F32, 2, xd), w = ir_arg(f, "w", IR_PARAM, IR_F32, 2, wd);
    int h = ir_einsum(f, "bi,ij->bj", x, w);
    ir_rename(f, h, "remat/h");
    int t = ir_unary(f, IR_OP_TANH, h);
    int64_t dims[2] = {0, 1};
    int l = ir_scale(f, ir_reduce(f, IR_OP_REDUCE_SUM, ir_binary(f, IR_OP_MUL, t, t), 2, dims), 1.0 / 32);
    ir_rename(f, l, "loss/scaled");
    ir_set_loss(f, l);
    char err[512];
    ir_graph *g = ir_error(f) ? NULL : ir_train_step(f, NULL, err, sizeof err);
    CHECKF(g != NULL, "%s", ir_error(f) ? ir_error(f) : err);
    ir_free(f);
    return g;
}

static void test_typed_rewrites(void)
{
    char err[512];
    shard_mesh mesh;
    schedule sc;
    shard_mesh_parse("batch=2", &mesh, err, sizeof err);
    ir_graph *u = named_like_rewrites();
    if (u) {
        CHECK(!ir_rewritten(u) && pipe_body_microbatches(u) == 0);
        const char *tacs[] = {"remat:all", "microbatch:2"};
        for (int i = 0; i < 2; i++) {
            shard_state *st = shard_state_new(u, &mesh);
            int rc = sched_parse(tacs[i], &mesh, &sc, err, sizeof err) == 0 ? sched_apply(&sc, st, err, sizeof err) : 0;
            CHECKF(rc < 0 && strstr(err, "was not"), "%s on a step named like its rewrite: %s", tacs[i], err);
            shard_state_free(st);
        }
        ir_free(u);
    }
    /* micro-batches: each pass's values carry their micro-batch, the inputs
       the step's input they split, the sums and means are the rewrite's */
    ir_graph *m = build_micro("gpt-tiny", 2, 0);
    int inputs[2] = {0, 0}, passes[2] = {0, 0}, acc = 0, other = 0;
    for (int v = 0; v < m->n_values; v++) {
        const ir_value *x = &m->values[v];
        if (x->role == IR_INPUT) inputs[x->micro == 1] += x->batch_of && x->micro >= 0 && strstr(x->name, x->batch_of);
        else if (x->micro >= 0) passes[x->micro]++;
        else if (x->made_by == IR_MADE_BY_ACCUMULATE) acc++;
        else other += x->role == IR_INTERMEDIATE;
    }
    CHECKF(m->rewrites.microbatches == 2 && inputs[0] == 2 && inputs[1] == 2 && passes[0] == passes[1] && passes[0] > 100 &&
               acc == 2 * 36 + 2 && other > 0, /* a sum and a mean a param, and the loss's */
           "micro-batch records: inputs %d/%d, passes %d/%d, accumulation %d, optimizer %d", inputs[0], inputs[1], passes[0],
           passes[1], acc, other);
    /* recomputed after: every clone is of its own micro-batch's value; a copy keeps it all */
    ir_graph *r = ir_remat_full(m, 0, 99, NULL, err, sizeof err), *c = r ? ir_clone(r) : NULL;
    int clones = 0, same_micro = 0;
    for (int v = 0; c && v < c->n_values; v++) {
        const ir_value *x = &c->values[v];
        if (x->made_by != IR_MADE_BY_REMAT) continue;
        clones++;
        same_micro += x->of >= 0 && x->micro >= 0 && c->values[x->of].micro == x->micro;
    }
    CHECKF(c && c->rewrites.remat == 1 && c->rewrites.remat_full == 1 && c->rewrites.microbatches == 2 && clones > 0 &&
               same_micro == clones && ir_rewritten(c),
           "remat after micro-batches: %d clones, %d of their own micro-batch: %s", clones, same_micro, c ? "" : err);
    CHECK(!ir_microbatch(m, 2, err, sizeof err) && strstr(err, "micro-batched already"));
    ir_free(c);
    ir_free(r);
    ir_free(m);
    /* a pipeline's body says it is one: its micro-batches and its scaled loss */
    model_config cfg;
    ir_graph *b = model_parse("gpt-tiny", &cfg, err, sizeof err) == 0 ? model_build_pipeline_body(&cfg, NULL, 4, err, sizeof err) : NULL;
    CHECKF(b && pipe_body_microbatches(b) == 4 && b->rewrites.loss_scale == 0.25 && b->values[b->loss].made_by == IR_MADE_BY_LOSS_SCALE,
           "%s", b ? "" : err);
    ir_free(b);
}

int main(void)
{
    test_typed_rewrites();
    test_remat_rewrite();
    test_remat_memory();
    test_remat_full();
    test_remat_attn();
    test_remat_full_micro();
    test_remat_errors();
    test_microbatch();
    test_gather_choice();
    test_memory_level();
    return test_done();
}
