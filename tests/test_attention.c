/* test_attention.c - fused attention (ir_attention) against the
 * materialised form it replaces.
 *
 * - The transformer presets built with attention=fused and with
 *   attention=materialized compute the same training step: the loss, every
 *   gradient and every updated param and optimizer state of the reference
 *   executor agree within 1e-4 of each tensor's largest magnitude (the fused
 *   kernel sums in double, the materialised ops in float: a few units of f32
 *   roundoff; a wrong mask or a missing term is off by 1e-2 or more).  GPT
 *   (causal), LLaMA (causal, grouped-query), ViT (no mask) and the MoE model.
 * - The fused graph holds no scores: no value of the step is [b,n,s,t].
 * - Its FLOPs are the fused kernel's: forward 4 b n s t d (half of it causal),
 *   backward 10 b n s t d (the probabilities recomputed), against the
 *   materialised einsums' 4 and 8.
 * - The cost model's activation peak of one replicated step falls by at
 *   least the scores and probabilities the materialised step holds
 *   (2 x b n s s x 4 bytes a layer, f32), and the fused step's peak is
 *   below the materialised one's.
 * - A graph file round-trips the op and its "causal" flag; a bad causal
 *   value and mismatched shapes are refused with a message.
 * - ir_fuse_attention finds the materialised chains of the presets (GPT,
 *   ViT) and of ONNX exports (GPT-2 and LLaMA from torch's exporter, opsets
 *   14 and 17: heads-first layouts, transposed; torch 2's exporter's LLaMA:
 *   q and k scaled before the product, k and v repeated to q's heads, the
 *   NaN guard), and the training step of the fused graph agrees with the
 *   original's (loss within 1e-5, gradients within 1e-4); BERT's padding
 *   mask, the llama preset's grouped-query chains (q of rank 5) and a mask
 *   table that is a param are kept, with the reason.  A mask table is fused
 *   when every block is causal, as a bias or as torch 2's where(M, 0, min)
 *   over a 0/1 table, and kept when one element is not or it has no data.
 */
#include "analysis/schedule.h"
#include "cost/cost.h"
#include "exec/exec.h"
#include "models/models.h"
#include "onnx/onnx.h"
#include "tests/test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static ir_graph *step_of(const char *spec)
{
    char err[512];
    model_config c;
    if (model_parse(spec, &c, err, sizeof err) < 0) {
        CHECKF(0, "%s: %s", spec, err);
        return NULL;
    }
    ir_graph *g = model_build_step(&c, NULL, err, sizeof err);
    CHECKF(g, "%s: %s", spec, err);
    return g;
}

/* Largest |a - b| over value `name` of both runs, relative to its largest
 * |a|; -1 when one of them lacks it. */
static double tensor_diff(exec_ref *ra, const ir_graph *ga, exec_ref *rb, const ir_graph *gb, const char *name)
{
    int va = ir_find(ga, name), vb = ir_find(gb, name);
    if (va < 0 || vb < 0) return -1;
    const float *a = exec_ref_data(ra, va), *b = exec_ref_data(rb, vb);
    int64_t n = ir_numel(&ga->values[va]);
    double big = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) {
        big = fmax(big, fabs((double)a[i]));
        worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
    }
    return big > 0 ? worst / big : worst;
}

static void same_step(const char *model)
{
    char fused[128], mat[128], err[512];
    snprintf(fused, sizeof fused, "%s:attention=fused", model);
    snprintf(mat, sizeof mat, "%s:attention=materialized", model);
    ir_graph *gf = step_of(fused), *gm = step_of(mat);
    exec_ref *rf = gf ? exec_ref_new(gf, 0, err, sizeof err) : NULL;
    exec_ref *rm = gm ? exec_ref_new(gm, 0, err, sizeof err) : NULL;
    CHECKF(rf && rm, "%s: %s", model, err);
    if (!rf || !rm) goto out;
    exec_ref_init_args(rf, 7);
    exec_ref_init_args(rm, 7);
    int rc = exec_ref_run(rf, err, sizeof err);
    if (rc == 0) rc = exec_ref_run(rm, err, sizeof err);
    CHECKF(rc == 0, "%s: %s", model, err);
    double dl = fabs(exec_ref_loss(rf) - exec_ref_loss(rm)) / fmax(1, fabs(exec_ref_loss(rm)));
    CHECKF(dl < 1e-5, "%s: loss %.9g fused, %.9g materialised", model, exec_ref_loss(rf), exec_ref_loss(rm));
    /* every gradient whose largest element is above 1e-6 of the largest
     * gradient's: the key bias's gradient is zero in exact arithmetic (a
     * softmax does not see a shift common to a row), so both hold roundoff
     * there; the Adam updates divide by sqrt(v) and blow such noise up */
    int compared = 0, zero = 0;
    double worst = 0, largest = 0;
    const char *worst_name = "";
    for (int v = 0; v < gm->n_values; v++) {
        if (gm->values[v].grad_of < 0) continue;
        const float *a = exec_ref_data(rm, v);
        for (int64_t i = 0; i < ir_numel(&gm->values[v]); i++) largest = fmax(largest, fabs((double)a[i]));
    }
    for (int v = 0; v < gm->n_values; v++) {
        if (gm->values[v].grad_of < 0) continue;
        const float *a = exec_ref_data(rm, v);
        double big = 0;
        for (int64_t i = 0; i < ir_numel(&gm->values[v]); i++) big = fmax(big, fabs((double)a[i]));
        if (big < 1e-6 * largest) {
            zero++;
            continue;
        }
        double d = tensor_diff(rm, gm, rf, gf, gm->values[v].name);
        CHECKF(d >= 0, "%s: %s missing from the fused step", model, gm->values[v].name);
        if (d > worst) worst = d, worst_name = gm->values[v].name;
        compared++;
    }
    printf("%s: %d gradients agree within %.2g (worst %s), %d zero in exact arithmetic not compared\n", model, compared,
           worst, worst_name, zero);
    CHECKF(compared > 10 && worst < 1e-4, "%s: %d tensors, worst %s off by %.3g", model, compared, worst_name, worst);
    /* no value holds the scores [.., s, t] of a layer */
    int scores = 0, att = 0;
    for (int i = 0; i < gf->n_ops; i++) att += gf->ops[i].kind == IR_OP_ATTENTION;
    for (int v = 0; v < gf->n_values; v++) scores += strstr(gf->values[v].name, ".scores") != NULL;
    CHECKF(att > 0 && scores == 0, "%s: %d attention ops, %d score values", model, att, scores);
out:
    exec_ref_free(rf);
    exec_ref_free(rm);
    ir_free(gf);
    ir_free(gm);
}

/* FLOPs of the attention ops of a step by kind. */
static void attention_flops(const ir_graph *g, double *fwd, double *bwd)
{
    *fwd = *bwd = 0;
    for (int i = 0; i < g->n_ops; i++) {
        ir_opkind k = g->ops[i].kind;
        if (k == IR_OP_ATTENTION) *fwd += ir_op_flops(g, i);
        if (k == IR_OP_ATTENTION_DQ || k == IR_OP_ATTENTION_DK || k == IR_OP_ATTENTION_DV) *bwd += ir_op_flops(g, i);
    }
}

static void test_flops(void)
{
    /* gpt-tiny: 2 layers, b 8, 8 heads of 8, s 16, causal: b n s s d = 8*8*16*16*8 */
    ir_graph *g = step_of("gpt-tiny:attention=fused");
    if (!g) return;
    double f, b, n = 8.0 * 8 * 16 * 16 * 8;
    attention_flops(g, &f, &b);
    CHECKF(f == 2 * 4 * n * 0.5 && b == 2 * 10 * n * 0.5, "forward %.6g (want %.6g), backward %.6g (want %.6g)", f,
           2 * 4 * n * 0.5, b, 2 * 10 * n * 0.5);
    ir_free(g);
    /* vit-tiny: no mask; 2 layers, b 8, 8 heads of 8, 17 tokens */
    g = step_of("vit-tiny:attention=fused");
    if (!g) return;
    n = 8.0 * 8 * 17 * 17 * 8;
    attention_flops(g, &f, &b);
    CHECKF(f == 2 * 4 * n && b == 2 * 10 * n, "vit: forward %.6g (want %.6g), backward %.6g (want %.6g)", f, 2 * 4 * n, b,
           2 * 10 * n);
    ir_free(g);
}

/* The replicated step of spec on one device of the a100 profile in f32. */
static cost_estimate price_plain(const char *spec)
{
    cost_estimate e;
    memset(&e, 0, sizeof e);
    char err[512];
    ir_graph *g = step_of(spec);
    shard_mesh mesh;
    if (!g || shard_mesh_parse("batch=1", &mesh, err, sizeof err) < 0) {
        ir_free(g);
        return e;
    }
    shard_state *st = shard_state_new(g, &mesh);
    spmd_program *p = spmd_lower(st);
    cost_hw hw;
    cost_hw_preset("a100", &hw, err, sizeof err);
    cost_options o = {.precision = COST_FP32};
    cost_ws *ws = cost_ws_new(g);
    CHECKF(cost_estimate_program(ws, p, &hw, &o, &e, err, sizeof err) == 0, "%s: %s", spec, err);
    cost_ws_free(ws);
    spmd_free(p);
    shard_state_free(st);
    ir_free(g);
    return e;
}

static void test_memory(void)
{
    /* gpt:layers=4,hidden=256,heads=8,seq=256,batch=4: the scores and the
     * probabilities of a layer are 4*8*256*256 f32 each, 8 MiB */
    const char *m = "gpt:layers=4,hidden=256,heads=8,seq=256,batch=4,vocab=512";
    char fused[160], mat[160];
    snprintf(fused, sizeof fused, "%s,attention=fused", m);
    snprintf(mat, sizeof mat, "%s,attention=materialized", m);
    cost_estimate ef = price_plain(fused), em = price_plain(mat);
    double scores = 4.0 * 8 * 256 * 256 * 4;
    CHECKF(ef.peak_memory > 0 && ef.peak_memory < em.peak_memory, "peak fused %.4g, materialised %.4g", ef.peak_memory,
           em.peak_memory);
    CHECKF(em.activation_peak - ef.activation_peak >= 4 * 2 * scores * 0.99,
           "activations: fused %.4g, materialised %.4g bytes: the %d layers' scores and probabilities are %.4g", ef.activation_peak,
           em.activation_peak, 4, 4 * 2 * scores);
    printf("activation peak of %s: fused %.2f MiB, materialised %.2f MiB\n", m, ef.activation_peak / 1048576,
           em.activation_peak / 1048576);
}

static void test_graph_file(void)
{
    ir_graph *g = step_of("llama-tiny:attention=fused");
    if (!g) return;
    char *text = ir_save_json(g), err[512];
    CHECK(text && strstr(text, "\"op\": \"attention\"") && strstr(text, "\"causal\": true"));
    ir_graph *back = text ? ir_load_json(text, err, sizeof err) : NULL;
    CHECKF(back && back->n_ops == g->n_ops, "round trip: %s", back ? "op count" : err);
    int same = back != NULL;
    for (int i = 0; back && i < g->n_ops; i++)
        same &= back->ops[i].kind == g->ops[i].kind && back->ops[i].attrs.scalar == g->ops[i].attrs.scalar &&
                back->ops[i].attrs.n_ints == g->ops[i].attrs.n_ints &&
                (!g->ops[i].attrs.n_ints || back->ops[i].attrs.ints[0] == g->ops[i].attrs.ints[0]);
    CHECK(same);
    ir_free(back);
    free(text);
    ir_free(g);

    const char *bad_causal =
        "{\"format\": \"carve-graph/1\", \"name\": \"a\", \"args\": ["
        "{\"name\": \"q\", \"role\": \"param\", \"shape\": [1, 4, 2, 8]},"
        "{\"name\": \"k\", \"role\": \"param\", \"shape\": [1, 4, 2, 8]},"
        "{\"name\": \"v\", \"role\": \"param\", \"shape\": [1, 4, 2, 8]}],"
        "\"ops\": [{\"name\": \"y\", \"op\": \"attention\", \"scalar\": 0.35, \"causal\": 1, \"in\": [\"q\", \"k\", \"v\"]}]}";
    ir_graph *b = ir_load_json(bad_causal, err, sizeof err);
    CHECKF(!b && strstr(err, "causal"), "bad causal: %s", b ? "loaded" : err);
    ir_free(b);
    const char *bad_shape =
        "{\"format\": \"carve-graph/1\", \"name\": \"a\", \"args\": ["
        "{\"name\": \"q\", \"role\": \"param\", \"shape\": [1, 4, 2, 8]},"
        "{\"name\": \"k\", \"role\": \"param\", \"shape\": [1, 4, 2, 4]},"
        "{\"name\": \"v\", \"role\": \"param\", \"shape\": [1, 4, 2, 8]}],"
        "\"ops\": [{\"name\": \"y\", \"op\": \"attention\", \"scalar\": 0.35, \"in\": [\"q\", \"k\", \"v\"]}]}";
    b = ir_load_json(bad_shape, err, sizeof err);
    CHECKF(!b && strstr(err, "head size"), "bad shape: %s", b ? "loaded" : err);
    ir_free(b);
}

static void test_spec(void)
{
    model_config c;
    char err[256], buf[256];
    CHECK(model_parse("gpt-tiny:attention=fused", &c, err, sizeof err) == 0 && model_attention_fused(&c));
    CHECK(model_parse(model_config_str(&c, buf, sizeof buf), &c, err, sizeof err) == 0 && model_attention_fused(&c));
    CHECK(model_parse("gpt-tiny:attention=materialized", &c, err, sizeof err) == 0 && !model_attention_fused(&c));
    CHECK(model_parse(model_config_str(&c, buf, sizeof buf), &c, err, sizeof err) == 0 && !model_attention_fused(&c));
    CHECK(model_parse("gpt-tiny:dropout=0.1", &c, err, sizeof err) == 0 && !model_attention_fused(&c));
    CHECK(model_parse("gpt-tiny:attention=flash", &c, err, sizeof err) < 0 && strstr(err, "fused or materialized"));
    CHECK(model_parse("gpt-tiny:attention=fused,dropout=0.1", &c, err, sizeof err) < 0 && strstr(err, "dropout"));
    CHECK(model_parse("t5-tiny:attention=fused", &c, err, sizeof err) < 0 && strstr(err, "unknown key"));
    CHECK(model_parse("gpt-tiny:attention=fused,attention=fused", &c, err, sizeof err) < 0 && strstr(err, "twice"));
}

/* The training steps of forward graphs a (materialised) and b (fused by
 * ir_fuse_attention) run from one seed: the loss and every gradient agree
 * (the tolerance of same_step: gradients within 1e-4 of their largest
 * element, those zero in exact arithmetic left out). */
static void same_training(const char *what, const ir_graph *fa, const ir_graph *fb)
{
    char err[512];
    ir_graph *ga = ir_train_step(fa, NULL, err, sizeof err), *gb = ga ? ir_train_step(fb, NULL, err, sizeof err) : NULL;
    exec_ref *ra = gb ? exec_ref_new(ga, 0, err, sizeof err) : NULL, *rb = ra ? exec_ref_new(gb, 0, err, sizeof err) : NULL;
    CHECKF(rb, "%s: %s", what, err);
    if (rb) {
        exec_ref_init_args(ra, 5);
        exec_ref_init_args(rb, 5);
        int rc = exec_ref_run(ra, err, sizeof err);
        if (!rc) rc = exec_ref_run(rb, err, sizeof err);
        CHECKF(rc == 0, "%s: %s", what, err);
        double la = exec_ref_loss(ra), lb = exec_ref_loss(rb), worst = 0, largest = 0;
        CHECKF(fabs(la - lb) <= 1e-5 * fmax(1, fabs(la)), "%s: loss %.9g, fused %.9g", what, la, lb);
        for (int v = 0; v < ga->n_values; v++)
            if (ga->values[v].grad_of >= 0)
                for (int64_t i = 0; i < ir_numel(&ga->values[v]); i++)
                    largest = fmax(largest, fabs((double)((float *)exec_ref_data(ra, v))[i]));
        for (int v = 0; v < ga->n_values; v++) {
            if (ga->values[v].grad_of < 0) continue;
            const float *a = exec_ref_data(ra, v);
            double big = 0;
            for (int64_t i = 0; i < ir_numel(&ga->values[v]); i++) big = fmax(big, fabs((double)a[i]));
            double d = big < 1e-6 * largest ? 0 : tensor_diff(ra, ga, rb, gb, ga->values[v].name);
            CHECKF(d >= 0, "%s: %s missing from the fused step", what, ga->values[v].name);
            worst = fmax(worst, d);
        }
        CHECKF(worst < 1e-4, "%s: a gradient off by %.3g", what, worst);
        printf("%s: the fused step's loss and gradients agree (worst %.2g)\n", what, worst);
    }
    exec_ref_free(ra);
    exec_ref_free(rb);
    ir_free(ga);
    ir_free(gb);
}

/* Materialised presets' forward graphs: every layer's chain fused, the
 * graph computes the same step as before, and as the fused preset. */
static void fuse_preset(const char *model, int layers, int kept)
{
    char spec[128], err[512], why[200];
    snprintf(spec, sizeof spec, "%s:attention=materialized", model);
    model_config c;
    ir_graph *f = model_parse(spec, &c, err, sizeof err) == 0 ? model_build_forward(&c, err, sizeof err) : NULL;
    CHECKF(f, "%s: %s", spec, err);
    if (!f) return;
    int fused, skipped;
    ir_graph *g = ir_fuse_attention(f, &fused, &skipped, why, sizeof why, err, sizeof err);
    CHECKF(g && fused == layers && skipped == kept, "%s: %d fused, %d skipped (%s) %s", model, fused, skipped, why, g ? "" : err);
    if (kept) printf("%s: %d chains kept: %s\n", model, skipped, why);
    if (!layers) {
        ir_free(g);
        ir_free(f);
        return;
    }
    int att = 0, scores = 0;
    for (int i = 0; g && i < g->n_ops; i++) att += g->ops[i].kind == IR_OP_ATTENTION;
    for (int v = 0; g && v < g->n_values; v++) scores += strstr(g->values[v].name, ".scores") != NULL;
    CHECKF(att == layers && scores == 0 && g->n_ops < f->n_ops, "%s: %d attention ops, %d score values, %d of %d ops", model, att, scores,
           g ? g->n_ops : 0, f->n_ops);
    if (g) same_training(model, f, g);
    ir_free(g);
    ir_free(f);
}

/* ONNX exports (torch's legacy exporter: MatMul, Div, Where, Softmax,
 * MatMul): GPT-2 and LLaMA fused, BERT's padding mask kept.  frozen: the
 * initializers kept constant (onnx_options.frozen; NULL: none), weights:
 * the file's params attached (as `carve run` reads a file). */
static void fuse_onnx_with(const char *name, const char *frozen, int weights, int want_fused, int want_skipped)
{
    char path[1024], err[512], why[200];
    const char *root = getenv("CARVE_ROOT");
    snprintf(path, sizeof path, "%s/tests/onnx/%s%s.onnx", root ? root : ".", strchr(name, '/') ? "" : "fixtures/", name);
    onnx_options o;
    memset(&o, 0, sizeof o);
    o.weights = weights;
    o.frozen = frozen;
    ir_graph *f = onnx_import(path, &o, NULL, err, sizeof err);
    CHECKF(f, "%s: %s", name, err);
    if (!f) return;
    int fused, skipped;
    ir_graph *g = ir_fuse_attention(f, &fused, &skipped, why, sizeof why, err, sizeof err);
    CHECKF(g && fused == want_fused && skipped == want_skipped, "%s: %d fused, %d skipped (%s) %s", name, fused, skipped, why,
           g ? "" : err);
    if (skipped) printf("%s: %d chains kept: %s\n", name, skipped, why);
    if (g && fused) same_training(name, f, g);
    ir_free(g);
    ir_free(f);
}

static void fuse_onnx(const char *name, int want_fused, int want_skipped)
{
    fuse_onnx_with(name, NULL, 0, want_fused, want_skipped);
}

/* ir_unmerge: torch 1.13's nn.MultiheadAttention, written on [S, B*H, D] and
 * [S*B, E], computes the same training step with its merged dims kept apart
 * (two places a layer), and then its chains fuse; the presets' merges (the
 * heads merged before the output projection contracts them) stay as
 * written. */
static void unmerge_mha(void)
{
    char path[1024], err[512], why[200];
    const char *root = getenv("CARVE_ROOT");
    snprintf(path, sizeof path, "%s/tests/onnx/hf/mha-t113.onnx", root ? root : ".");
    onnx_options o;
    memset(&o, 0, sizeof o);
    ir_graph *f = onnx_import(path, &o, NULL, err, sizeof err);
    CHECKF(f, "mha-t113: %s", err);
    if (!f) return;
    int n = -1, fused = -1, skipped = -1;
    ir_graph *w = ir_fuse_attention(f, &fused, &skipped, why, sizeof why, err, sizeof err); /* as written: [S, B*H, D] */
    CHECKF(w && fused == 0, "mha-t113 as written: %d chains fused, none expected", fused);
    ir_free(w);
    ir_graph *u = ir_unmerge(f, &n, err, sizeof err), *z = NULL;
    CHECKF(u && n == 4, "mha-t113: merged dims kept apart in %d places, 4 expected %s", n, u ? "" : err);
    if (u) {
        same_training("mha-t113 with its merged dims kept apart", f, u);
        z = ir_fuse_attention(u, &fused, &skipped, why, sizeof why, err, sizeof err);
        CHECKF(z && fused == 2 && skipped == 0, "mha-t113 kept apart: %d fused, %d skipped (%s)", fused, skipped, why);
    }
    if (z) same_training("mha-t113 kept apart and fused", f, z);
    ir_free(z);
    ir_free(u);
    ir_free(f);
    const char *presets[] = {"gpt-tiny:attention=materialized", "llama-tiny:attention=materialized", "vit-tiny"};
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        model_config c;
        ir_graph *g = model_parse(presets[i], &c, err, sizeof err) == 0 ? model_build_forward(&c, err, sizeof err) : NULL;
        ir_graph *h = g ? ir_unmerge(g, &n, err, sizeof err) : NULL;
        CHECKF(h && n == 0 && h->n_ops == g->n_ops, "%s: merged dims kept apart in %d places, none expected", presets[i], n);
        ir_free(h);
        ir_free(g);
    }
}

/* The bias of mask test `form` over scores sd: 0 the table m [b, s, t]
 * read as it is; 1 torch 2's exporter's where(M, 0, finfo.min) as the ONNX
 * reader writes it, 0*M + min*(1 - M), m a 0/1 table [1, 1, s, t] reshaped
 * and broadcast to [b, 1, s, t] and the bias reshaped to [b, s, t] (the
 * scores [2, 2, 4, 4]). */
static int mask_bias(ir_graph *g, int m, int form)
{
    if (!form) return m;
    int64_t r3[3] = {1, 4, 4}, b4[4] = {2, 1, 4, 4}, map[3] = {1, 2, 3}, bst[3] = {2, 4, 4};
    int x = ir_broadcast(g, ir_reshape(g, m, 3, r3), 4, b4, map);
    int zero = ir_binary(g, IR_OP_MUL, ir_constant(g, 0, IR_F32, 4, b4), x);
    int off = ir_binary(g, IR_OP_MUL, ir_constant(g, -3.4028234663852886e38, IR_F32, 4, b4),
                        ir_add_scalar(g, ir_unary(g, IR_OP_NEG, x), 1));
    return ir_reshape(g, ir_binary(g, IR_OP_ADD, zero, off), 3, bst);
}

/* Scores [b=2, n=2, s=4, t=4] plus a constant mask table read through a
 * broadcast (transformers' mask, folded by the ONNX reader; form 1: the
 * where(M, 0, min) of torch 2's exporter over a folded 0/1 table): the chain
 * is fused when every block of the table is causal, and kept when one
 * element is not (bad >= 0: that block's last row lets a later key
 * through), the table has no elements (a model from shapes alone) or is a
 * param (param: trained, its gradient the step's). */
static void fuse_mask_table(int form, int bad, int with_data, int param)
{
    ir_graph *g = ir_new("mask-table");
    int64_t qd[4] = {2, 4, 2, 8}, sd[4] = {2, 2, 4, 4}, table[4] = {2, 4, 4}, ones[4] = {1, 1, 4, 4}, map[3] = {0, 2, 3};
    int blocks = form ? 1 : 2;
    int q = ir_arg(g, "q", IR_PARAM, IR_F32, 4, qd), k = ir_arg(g, "k", IR_PARAM, IR_F32, 4, qd);
    int v = ir_arg(g, "v", IR_PARAM, IR_F32, 4, qd), m = ir_arg(g, "mask", param ? IR_PARAM : IR_CONST, IR_F32, form ? 4 : 3, form ? ones : table);
    float *t = malloc((size_t)blocks * 16 * sizeof *t);
    for (int i = 0; i < blocks * 16; i++) t[i] = form ? (i % 4) <= (i / 4) % 4 : (i % 4) <= (i / 4) % 4 ? 0.0f : -3.4028235e38f;
    if (bad >= 0) t[(bad % blocks) * 16 + 3 * 4 + 3] = form ? 0.0f : -3.4028235e38f; /* the last query cannot see itself */
    if (with_data) ir_data_attach(g, m, t, blocks * 16);
    else free(t);
    int sc = ir_scale(g, ir_einsum(g, "bsnd,btnd->bnst", q, k), 0.125);
    int x = ir_binary(g, IR_OP_ADD, sc, ir_broadcast(g, mask_bias(g, m, form), 4, sd, map));
    int64_t last = 3, keep[3] = {0, 1, 2};
    int mx = ir_broadcast(g, ir_unary(g, IR_OP_STOP_GRAD, ir_reduce(g, IR_OP_REDUCE_MAX, x, 1, &last)), 4, sd, keep);
    int e = ir_unary(g, IR_OP_EXP, ir_binary(g, IR_OP_SUB, x, mx));
    int p = ir_binary(g, IR_OP_DIV, e, ir_broadcast(g, ir_reduce(g, IR_OP_REDUCE_SUM, e, 1, &last), 4, sd, keep));
    int ctx = ir_einsum(g, "bnst,btnd->bsnd", p, v);
    int64_t all[4] = {0, 1, 2, 3};
    ir_set_loss(g, ir_reduce(g, IR_OP_REDUCE_SUM, ir_binary(g, IR_OP_MUL, ctx, ctx), 4, all));
    char err[512], why[200];
    int fused, skipped;
    CHECKF(!ir_error(g), "mask table: %s", ir_error(g) ? ir_error(g) : "");
    ir_graph *f = ir_fuse_attention(g, &fused, &skipped, why, sizeof why, err, sizeof err);
    int want = bad < 0 && with_data && !param;
    CHECKF(f && fused == want && skipped == !want, "mask table (form %d, bad %d, data %d, param %d): %d fused, %d kept (%s)", form, bad,
           with_data, param, fused, skipped, why);
    CHECKF(!param || strstr(why, "'--frozen mask'"), "mask table (form %d): a param table's reason: %s", form, why);
    if (f && want) same_training(form ? "mask where(M, 0, min)" : "mask table", g, f);
    ir_free(f);
    ir_free(g);
}

int main(void)
{
    exec_blis_setup();
    test_spec();
    same_step("gpt-tiny");
    same_step("llama-tiny");
    same_step("vit-tiny");
    same_step("moe-tiny");
    test_flops();
    test_memory();
    test_graph_file();
    fuse_preset("gpt-tiny", 2, 0);
    fuse_preset("llama-tiny", 0, 2); /* grouped-query chains (q of rank 5) are kept: attention=fused builds them fused */
    fuse_preset("vit-tiny", 2, 0);
    fuse_onnx("gpt2-o17-train", 2, 0);
    fuse_onnx("gpt2-o14-train", 2, 0);
    fuse_onnx("llama-o17-train", 2, 0);
    fuse_onnx("bert-o17-train", 0, 2);
    /* transformers' exports: the causal mask a constant table (finfo.min above the diagonal, one block an example) */
    fuse_onnx("hf/gpt2-legacy", 2, 0);
    fuse_onnx("hf/llama-legacy", 2, 0);
    /* torch 2's exporter: q and k scaled before the product, k and v repeated to q's heads (read unrepeated, q
     * grouped), the NaN guard on the probabilities; its causal mask table val_137 an initializer: fused where it
     * is kept constant, kept where it is a param (trained: its gradient is the step's), with or without its data */
    fuse_onnx_with("hf/llama-dynamo", "val_137", 0, 2, 0);
    fuse_onnx_with("hf/llama-dynamo", "val_137", 1, 2, 0);
    fuse_onnx_with("hf/llama-dynamo", NULL, 1, 0, 2);
    fuse_onnx("hf/llama-dynamo", 0, 2);
    fuse_onnx("hf/qwen2-t113", 2, 0);
    fuse_onnx("hf/bert-legacy", 0, 2);
    unmerge_mha();
    for (int form = 0; form < 2; form++) {
        fuse_mask_table(form, -1, 1, 0);
        fuse_mask_table(form, 1, 1, 0);
        fuse_mask_table(form, -1, 0, 0);
        fuse_mask_table(form, -1, 1, 1);
    }
    return test_done();
}
