/* test_onnx.c - the ONNX reader: every fixture of tests/onnx/fixtures (five
 * module families exported by torch 1.13, opsets 14 and 17, training and
 * eval exports; tests/onnx/gen.py) imports, and its training step computes
 * torch's numbers: the loss within 1e-5 relative and every param's gradient
 * within 1e-4 of its largest magnitude (or of 1e-3 of the largest gradient
 * of any param where that is more: a gradient zero in exact arithmetic, a
 * key bias's under softmax, is rounding noise in both), on one device (the
 * reference executor) and under two plans on 4 simulated devices (the SPMD
 * runtime on threads).  Also: layers found, params named as the state_dict,
 * constants folded (no Shape/ConstantOfShape/Where chain reaches carve),
 * weights not read without `weights`, and the errors of bad input.
 * Then every model x export of tests/onnx/hf (transformers' models, a
 * ResNet-18, nn.MultiheadAttention and a capacity-routed MoE through torch
 * 2.13's two exporters and torch 1.13's; tests/onnx/hf.py): it imports with
 * its config's layers, or is refused with the one line expected, and its
 * step computes torch's loss and the gradients of the params the file keeps
 * under their state_dict names, on 1 device and under two plans on 4
 * (CARVE_ONNX_HF_TABLE=FILE writes the rows of docs/onnx.md's table).
 *
 * The fixtures and their reference values are committed; where torch is
 * there, tests/e2e_onnx.sh regenerates them and compares.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis/schedule.h"
#include "analysis/spmd.h"
#include "analysis/structure.h"
#include "exec/exec.h"
#include "exec/runtime.h"
#include "onnx/onnx.h"
#include "onnx/onnx.pb-c.h"
#include "tests/test.h"

#define LOSS_TOL 1e-5
#define GRAD_TOL 1e-4
#define NOISE_FLOOR 1e-3

static const char *root(void)
{
    const char *r = getenv("CARVE_ROOT");
    return r ? r : ".";
}

static const char *const families[] = {"gpt2", "llama", "bert", "vit", "resnet", "mlp"};
static const int opsets[] = {14, 17};

/* The two plans each fixture runs under on 4 devices. */
static const char *const plans[][2] = {
    {"batch=2,model=2", "dp:batch,megatron:model"},
    {"batch=4", "zero3:batch"},
};
/* a CNN has no Megatron pairs (its weights reach the contractions through
 * slices, one per kernel tap): its first plan splits the params instead */
static const char *const cnn_plan[2] = {"batch=2,model=2", "dp:batch,zero3:model"};

typedef struct fixture {
    char name[64], model[512], ref[512];
    onnx_tensor *t;
    int n;
    int partial; /* the reference has gradients for the state_dict params only (tests/onnx/hf.py) */
    int unmerged; /* load: the places ir_unmerge kept merged dims apart */
} fixture;

static const onnx_tensor *ref_get(const fixture *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

/* The forward graph of fixture f with its weights, the batch attached to
 * its inputs. */
static ir_graph *load(fixture *f, onnx_info *info)
{
    char err[1024];
    onnx_options o = {.weights = 1};
    ir_graph *g = onnx_import(f->model, &o, info, err, sizeof err), *h;
    CHECKF(g != NULL, "%s", err);
    if (!g) return NULL;
    h = ir_unmerge(g, &f->unmerged, err, sizeof err); /* as carve's commands import it */
    CHECKF(h != NULL, "%s: %s", f->name, err);
    ir_free(g);
    if (!(g = h)) return NULL;
    for (int v = 0; v < g->n_values; v++) {
        if (g->values[v].role != IR_INPUT) continue;
        const onnx_tensor *t = ref_get(f, g->values[v].name);
        CHECKF(t && t->n == ir_numel(&g->values[v]) && t->is_int == (g->values[v].dtype == IR_I32),
               "%s: input %s has no matching batch in the reference", f->name, g->values[v].name);
        if (t) ir_data_set(g, v, t->data, t->n);
    }
    CHECKF(!ir_error(g), "%s: %s", f->name, ir_error(g));
    return g;
}

/* The training step with every param's gradient as an output too (so the
 * SPMD run assembles it); grad_out[p] = output index of param p's gradient. */
static ir_graph *step_with_grads(const fixture *f, ir_graph *fwd, int **grad_out)
{
    char err[512];
    ir_optimizer sgd = {IR_SGD, 0.01, 0, 0, 0};
    ir_graph *s = ir_train_step(fwd, &sgd, err, sizeof err);
    CHECKF(s != NULL, "%s: %s", f->name, err);
    if (!s) return NULL;
    *grad_out = calloc((size_t)s->n_values, sizeof(int));
    for (int v = 0; v < s->n_values; v++) (*grad_out)[v] = -1;
    for (int v = 0; v < s->n_values; v++) {
        int p = s->values[v].grad_of;
        if (p < 0) continue;
        (*grad_out)[p] = s->n_outputs;
        ir_add_output(s, v, -1);
    }
    CHECKF(!ir_error(s), "%s: %s", f->name, ir_error(s));
    return s;
}

/* The largest gradient magnitude of any param in the reference. */
static double ref_grad_max(const fixture *f)
{
    double m = 0;
    for (int i = 0; i < f->n; i++) {
        if (strncmp(f->t[i].name, "grad:", 5)) continue;
        for (int64_t k = 0; k < f->t[i].n; k++) m = fmax(m, fabs(((const float *)f->t[i].data)[k]));
    }
    return m;
}

typedef struct result {
    double loss_rel, worst_grad;
    char worst[160];
    int params, compared;
} result;

/* Compares a run's loss and gradients (get(ctx, output index) -> floats)
 * with torch's. */
static void compare(const fixture *f, const ir_graph *s, const int *grad_out, double loss,
                    const float *(*get)(void *, int), void *ctx, result *res)
{
    const onnx_tensor *lt = ref_get(f, "loss");
    CHECKF(lt && lt->n == 1, "%s: no reference loss", f->name);
    if (!lt) return;
    double want = ((const float *)lt->data)[0], floor = NOISE_FLOOR * ref_grad_max(f);
    res->loss_rel = fabs(loss - want) / fmax(fabs(want), 1e-30);
    res->worst_grad = 0;
    res->params = res->compared = 0;
    for (int p = 0; p < s->n_values; p++) {
        if (s->values[p].role != IR_PARAM) continue;
        res->params++;
        char key[300];
        snprintf(key, sizeof key, "grad:%s", s->values[p].name);
        const onnx_tensor *gt = ref_get(f, key);
        if (!gt && f->partial) continue; /* a float initializer the exporter made, not a module param */
        CHECKF(gt && grad_out[p] >= 0, "%s: param %s has no reference gradient", f->name, s->values[p].name);
        if (!gt || grad_out[p] < 0) continue;
        const float *got = get(ctx, grad_out[p]), *w = gt->data;
        double diff = 0, mag = 0;
        for (int64_t k = 0; k < gt->n; k++) {
            diff = fmax(diff, fabs((double)got[k] - w[k]));
            mag = fmax(mag, fabs((double)w[k]));
        }
        double e = diff / fmax(mag, floor);
        if (e > res->worst_grad || e != e) {
            res->worst_grad = e;
            snprintf(res->worst, sizeof res->worst, "%s", s->values[p].name);
        }
        res->compared++;
    }
}

typedef struct ref_ctx {
    exec_ref *r;
    const ir_graph *s;
} ref_ctx;

static const float *ref_out(void *ctx, int i)
{
    ref_ctx *c = ctx;
    return exec_ref_data(c->r, c->s->outputs[i].value);
}

typedef struct spmd_ctx {
    exec_spmd *r;
    const spmd_program *p;
    float **out;
} spmd_ctx;

static const float *spmd_out(void *ctx, int i)
{
    spmd_ctx *c = ctx;
    return c->out[i];
}

/* One device: the reference executor. */
static void run_reference(const fixture *f, ir_graph *s, const int *grad_out, result *out)
{
    char err[512];
    exec_ref *r = exec_ref_new(s, 0, err, sizeof err);
    CHECKF(r != NULL, "%s: %s", f->name, err);
    if (!r) return;
    exec_ref_init_args(r, 1);
    CHECKF(exec_ref_run(r, err, sizeof err) == 0, "%s: %s", f->name, err);
    result res;
    if (!out) out = &res;
    ref_ctx ctx = {r, s};
    compare(f, s, grad_out, exec_ref_loss(r), ref_out, &ctx, &res);
    *out = res;
    CHECKF(res.loss_rel <= LOSS_TOL, "%s (1 device): loss differs from torch's by %.3g relative", f->name, res.loss_rel);
    CHECKF(res.worst_grad <= GRAD_TOL, "%s (1 device): gradient of %s differs by %.3g of its largest magnitude", f->name,
           res.worst, res.worst_grad);
    printf("  %-20s 1 device:  loss %.2e rel, worst gradient %.2e (%s), %d of %d params\n", f->name, res.loss_rel,
           res.worst_grad, res.worst, res.compared, res.params);
    exec_ref_free(r);
}

/* 4 devices on threads under a plan. */
static void run_plan(const fixture *f, ir_graph *s, const int *grad_out, const char *mesh_text, const char *sched, result *got)
{
    char err[512];
    shard_mesh mesh;
    schedule sc;
    CHECK(shard_mesh_parse(mesh_text, &mesh, err, sizeof err) == 0 && sched_parse(sched, &mesh, &sc, err, sizeof err) == 0);
    shard_state *st = shard_state_new(s, &mesh);
    int applied = sched_apply(&sc, st, err, sizeof err) == 0;
    CHECKF(applied, "%s: %s: %s", f->name, sched, err);
    if (!applied) {
        shard_state_free(st);
        return;
    }
    spmd_program *p = spmd_lower(st);
    exec_spmd *r = exec_spmd_new(p, 0, err, sizeof err);
    CHECKF(r != NULL, "%s: %s", f->name, err);
    if (r) {
        exec_spmd_init_args(r, 1);
        CHECKF(exec_spmd_step(r, err, sizeof err) == 0, "%s: %s", f->name, err);
        float **out = calloc((size_t)s->n_outputs, sizeof *out);
        for (int i = 0; i < s->n_outputs; i++) {
            out[i] = calloc((size_t)ir_numel(&s->values[s->outputs[i].value]) + 1, 4);
            exec_spmd_assemble(r, p->out_buf[i], out[i], NULL);
        }
        spmd_ctx ctx = {r, p, out};
        result res;
        compare(f, s, grad_out, exec_spmd_loss(r), spmd_out, &ctx, &res);
        if (got) *got = res;
        CHECKF(res.loss_rel <= LOSS_TOL, "%s (%s, %s): loss differs from torch's by %.3g relative", f->name, mesh_text, sched,
               res.loss_rel);
        CHECKF(res.worst_grad <= GRAD_TOL, "%s (%s, %s): gradient of %s differs by %.3g", f->name, mesh_text, sched, res.worst,
               res.worst_grad);
        printf("  %-20s %-17s %-26s loss %.2e rel, worst gradient %.2e (%s)\n", f->name, mesh_text, sched, res.loss_rel,
               res.worst_grad, res.worst);
        for (int i = 0; i < s->n_outputs; i++) free(out[i]);
        free(out);
        exec_spmd_free(r);
    }
    spmd_free(p);
    shard_state_free(st);
}

/* Import facts of a fixture: layers, names, folding. */
static void check_import(const fixture *f, const ir_graph *g, const onnx_info *info, int train)
{
    int expect_layers = !strncmp(f->name, "resnet", 6) ? 4 : 2;
    CHECKF(info->layers == expect_layers && g->n_layers == expect_layers, "%s: %d layers found, %d expected", f->name,
           info->layers, expect_layers);
    int tagged = 0, named = 0;
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role == IR_PARAM) {
            tagged += x->layer >= 0;
            named += strncmp(x->name, "onnx::", 6) != 0;
        }
    }
    CHECKF(tagged > 0, "%s: no param carries a layer tag", f->name);
    if (train) CHECKF(named == info->params && !info->generated_names, "%s: %d of %d params keep state_dict names", f->name, named, info->params);
    else CHECKF(!info->generated_names || strstr(info->notes, "do_constant_folding=False"), "%s: the generated names are not noted",
                f->name);
    if (!train && strncmp(f->name, "mlp", 3)) CHECKF(info->generated_names > 0, "%s: an eval export without generated names", f->name);
    if (strncmp(f->name, "mlp", 3)) CHECKF(info->folded > 0, "%s: nothing folded", f->name);
    /* folded means no op is left that computes from constants alone: each op
     * (but the nullary ones, a broadcast or reshape bringing a constant to
     * the shape its reader needs, and a causal mask made on the device from
     * iotas alone) reads something the batch or a param reaches */
    unsigned char *live = calloc((size_t)g->n_values, 1), *iota = calloc((size_t)g->n_values, 1);
    int dead = 0, masks = 0;
    const char *first = "";
    for (int v = 0; v < g->n_values; v++) live[v] = g->values[v].role == IR_INPUT || g->values[v].role == IR_PARAM;
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        iota[o->out] = o->kind == IR_OP_IOTA || o->n_in > 0;
        for (int k = 0; k < o->n_in; k++) live[o->out] |= live[o->in[k]], iota[o->out] &= iota[o->in[k]];
        masks += o->kind == IR_OP_GE && iota[o->out];
        if (o->n_in && !live[o->out] && !iota[o->out] && o->kind != IR_OP_BROADCAST && o->kind != IR_OP_RESHAPE && !dead++)
            first = g->values[o->out].name;
    }
    CHECKF(dead == 0, "%s: %d ops compute from constants alone (the first makes '%s')", f->name, dead, first);
    if (!strncmp(f->name, "gpt2", 4) || !strncmp(f->name, "llama", 5)) /* their causal masks: on the device, no const argument */
        CHECKF(masks == 1, "%s: %d causal masks made from iotas, not 1", f->name, masks);
    free(live);
    free(iota);
}

static void test_fixture(const char *fam, int opset, int train)
{
    fixture f;
    memset(&f, 0, sizeof f);
    snprintf(f.name, sizeof f.name, "%s-o%d-%s", fam, opset, train ? "train" : "eval");
    snprintf(f.model, sizeof f.model, "%s/tests/onnx/fixtures/%s.onnx", root(), f.name);
    snprintf(f.ref, sizeof f.ref, "%s/tests/onnx/fixtures/%s.ref.pb", root(), f.name);
    char err[1024];
    f.t = onnx_tensors_read_graph(f.ref, &f.n, err, sizeof err);
    CHECKF(f.t != NULL, "%s", err);
    if (!f.t) return;
    onnx_info info;
    ir_graph *g = load(&f, &info);
    if (g) {
        check_import(&f, g, &info, train);
        int *grad_out = NULL;
        ir_graph *s = step_with_grads(&f, g, &grad_out);
        if (s) {
            run_reference(&f, s, grad_out, NULL);
            for (size_t k = 0; k < sizeof plans / sizeof plans[0]; k++) {
                const char *const *pl = k == 0 && !strcmp(fam, "resnet") ? cnn_plan : plans[k];
                run_plan(&f, s, grad_out, pl[0], pl[1], NULL);
            }
        }
        free(grad_out);
        ir_free(s);
        ir_free(g);
    }
    for (int i = 0; i < f.n; i++) onnx_tensor_free(&f.t[i]);
    free(f.t);
}

/* ---- the models people train (tests/onnx/hf.py) ------------------------- */

/* The fixtures an exporter wrote that carve refuses, with the line it says. */
static const char *const hf_refused[][2] = {
    {"mixtral-t113", "data-dependent"},
};

/* The two plans on 4 devices of the models of tests/onnx/hf (batch 2). */
static const char *const hf_plans[][2] = {
    {"batch=2,model=2", "dp:batch,megatron:model"},
    {"batch=4", "zero3:batch"},
};

static void hf_row(FILE *t, const char *name, const char *cells)
{
    if (t) fprintf(t, "| %s | %s |\n", name, cells);
}

/* The model family's fused projections (one param for q, k, v) whose parts
 * onnx/fused.c cuts out: a layer each. */
static int fused_expected(const char *name) { return !strncmp(name, "gpt2-", 5) || !strncmp(name, "mha-", 4); }

/* Megatron on an import (issue 44 item 4): each fused q/k/v projection cut
 * into its parts (one a layer), and every attention or MLP weight of a block
 * a forward contraction reads split by a Megatron block (none in
 * shard_megatron's unsplit list).  torch 1.13's nn.MultiheadAttention
 * computes on [S, B*H, D]: its merged dims are kept apart (ir_unmerge, in
 * load as in carve's commands), two places a layer ([S, B*H, D], then
 * [S*B, E] once that is a merge of two dims), so its heads split too;
 * no other fixture has such a place. */
static void check_megatron(const char *name, const ir_graph *g, const onnx_info *info, int layers, int unmerged)
{
    if (fused_expected(name))
        CHECKF(info->fused_projections == layers, "%s: %d fused projections cut, %d expected", name, info->fused_projections,
               layers);
    int want = strcmp(name, "mha-t113") ? 0 : 2 * layers; /* [S, B*H, D] and then [S*B, E] */
    CHECKF(unmerged == want, "%s: merged dims kept apart in %d places, %d expected", name, unmerged, want);
    static const char *const block_weights[] = {"attn", "attention", "q_proj", "k_proj", "v_proj", "o_proj", "query", "key",
                                                "value", "qkv", "mlp", "fc", "gate_proj", "up_proj", "down_proj", "DenseReluDense",
                                                "intermediate", ".q.", ".k.", ".v.", ".o."};
    shard_megatron *mg = shard_megatron_build(g);
    for (int i = 0; i < mg->n_unsplit; i++) {
        const ir_value *x = &g->values[mg->unsplit[i].value];
        int block = 0;
        for (size_t k = 0; k < sizeof block_weights / sizeof *block_weights; k++) block |= strstr(x->name, block_weights[k]) != NULL;
        CHECKF(!block || x->layer < 0, "%s: Megatron leaves %s whole: %s", name, x->name, mg->unsplit[i].why);
    }
    shard_megatron_free(mg);
}

/* One fixture of tests/onnx/hf: imports (or is refused with the line the
 * table expects), its layers are its config's, and its training step
 * computes torch's loss and gradients on 1 device and under hf_plans. */
/* GPT-2's Conv1D flattens the tokens ([b, s, k] -> [b * s, k]) around its
 * addmm: the import keeps them as [b, s] (onnx/unflatten.c), so no reshape
 * merges two leading dims into dim 0; and each bias an einsum's add reads
 * is made before the einsum (onnx/order.c), so the product and its epilogue
 * are adjacent. */
static void check_rows(const char *name, const ir_graph *g)
{
    int merges = 0, late = 0, epilogues = 0;
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        const ir_value *x = &g->values[o->in[0]], *y = &g->values[o->out];
        if (o->kind == IR_OP_RESHAPE && x->rank >= 2 && y->rank >= 1 && x->dims[0] > 1 && x->dims[1] > 1 &&
            y->dims[0] == x->dims[0] * x->dims[1])
            merges++;
        if (o->kind != IR_OP_EINSUM || i + 1 >= g->n_ops || g->ops[i + 1].kind != IR_OP_ADD) continue;
        const ir_op *a = &g->ops[i + 1];
        int bias = a->in[0] == o->out ? a->in[1] : a->in[1] == o->out ? a->in[0] : -1;
        if (bias < 0 || g->values[bias].producer < 0 || g->ops[g->values[bias].producer].kind != IR_OP_BROADCAST) continue;
        epilogues++;
        late += g->values[bias].producer > i;
    }
    CHECKF(merges == 0, "%s: %d reshapes merge the batch and the sequence", name, merges);
    CHECKF(epilogues > 0 && late == 0, "%s: %d of %d bias broadcasts after their einsum", name, late, epilogues);
}

static void test_hf_fixture(const char *name, int layers, FILE *table)
{
    fixture f;
    memset(&f, 0, sizeof f);
    f.partial = 1;
    snprintf(f.name, sizeof f.name, "%.60s", name);
    snprintf(f.model, sizeof f.model, "%s/tests/onnx/hf/%s.onnx", root(), name);
    snprintf(f.ref, sizeof f.ref, "%s/tests/onnx/hf/%s.ref.pb", root(), name);
    char err[1024], cells[1024];
    const char *refusal = NULL;
    for (size_t i = 0; i < sizeof hf_refused / sizeof hf_refused[0]; i++)
        if (!strcmp(hf_refused[i][0], name)) refusal = hf_refused[i][1];
    onnx_options o = {.weights = 1};
    onnx_info info;
    ir_graph *g = onnx_import(f.model, &o, &info, err, sizeof err);
    if (refusal) {
        CHECKF(!g && strstr(err, refusal) && !strchr(err, '\n'), "%s: expected a refusal naming '%s', got: %s", name, refusal,
               g ? "an import" : err);
        const char *why = strstr(err, ": node ");
        snprintf(cells, sizeof cells, "refused: `%.900s` | | | | | |", why ? why + 2 : err);
        hf_row(table, name, cells);
        ir_free(g);
        return;
    }
    CHECKF(g != NULL, "%s: %s", name, err);
    if (!g) {
        hf_row(table, name, "FAILS | | | | | |");
        return;
    }
    ir_free(g);
    f.t = onnx_tensors_read_graph(f.ref, &f.n, err, sizeof err);
    CHECKF(f.t != NULL, "%s", err);
    if (!f.t) return;
    g = load(&f, &info);
    CHECKF(g && info.layers == layers, "%s: %d layers found, the config has %d", name, g ? info.layers : -1, layers);
    if (g) check_megatron(name, g, &info, layers, f.unmerged);
    /* GPT-2's gelu_new (0.5 * x, then the tanh formula): one gelu op a layer (onnx/patterns.c) */
    if (g && !strncmp(name, "gpt2-", 5)) {
        int gelu = 0, tanh_ops = 0;
        for (int i = 0; i < g->n_ops; i++) gelu += g->ops[i].kind == IR_OP_GELU, tanh_ops += g->ops[i].kind == IR_OP_TANH;
        CHECKF(info.patterns == layers && gelu == layers && tanh_ops == 0, "%s: %d patterns, %d gelu, %d tanh ops (%d layers)", name,
               info.patterns, gelu, tanh_ops, layers);
        check_rows(name, g);
    }
    int named = 0;
    for (int v = 0; g && v < g->n_values; v++) {
        char key[300];
        snprintf(key, sizeof key, "grad:%s", g->values[v].name);
        named += g->values[v].role == IR_PARAM && ref_get(&f, key) != NULL;
    }
    result r[3];
    memset(r, 0, sizeof r);
    int *grad_out = NULL;
    ir_graph *s = g ? step_with_grads(&f, g, &grad_out) : NULL;
    if (s) {
        run_reference(&f, s, grad_out, &r[0]);
        for (int k = 0; k < 2; k++) {
            const char *const *pl = k == 0 && !strncmp(name, "resnet", 6) ? cnn_plan : hf_plans[k];
            run_plan(&f, s, grad_out, pl[0], pl[1], &r[1 + k]);
        }
        double worst = fmax(r[0].worst_grad, fmax(r[1].worst_grad, r[2].worst_grad));
        snprintf(cells, sizeof cells, "imports | %d of %d | %d of %d | %.1e | %.1e | %.1e | %.1e (%d params compared)",
                 info.layers, layers, named, info.params, r[0].loss_rel, r[1].loss_rel, r[2].loss_rel, worst, r[0].compared);
        hf_row(table, name, cells);
    }
    free(grad_out);
    ir_free(s);
    ir_free(g);
    for (int i = 0; i < f.n; i++) onnx_tensor_free(&f.t[i]);
    free(f.t);
}

/* Every model x export of tests/onnx/hf/manifest.tsv that an exporter wrote. */
static void test_hf(void)
{
    char path[512], line[512];
    snprintf(path, sizeof path, "%s/tests/onnx/hf/manifest.tsv", root());
    FILE *m = fopen(path, "r");
    CHECKF(m != NULL, "%s: cannot open", path);
    if (!m) return;
    const char *tp = getenv("CARVE_ONNX_HF_TABLE");
    FILE *table = tp ? fopen(tp, "w") : NULL;
    int n = 0;
    while (fgets(line, sizeof line, m)) {
        char model[64], exp[64], status[256];
        int layers;
        if (line[0] == '#' || sscanf(line, "%63[^\t]\t%63[^\t]\t%d\t%255[^\n]", model, exp, &layers, status) != 4) continue;
        char name[160];
        snprintf(name, sizeof name, "%s-%s", model, exp);
        if (strncmp(status, "exported", 8)) {
            char cells[400];
            snprintf(cells, sizeof cells, "refused by the exporter (%s.refused) | | | | | |", name);
            hf_row(table, name, cells);
            continue;
        }
        test_hf_fixture(name, layers, table);
        n++;
    }
    fclose(m);
    if (table) fclose(table);
    CHECKF(n >= 20, "only %d exported fixtures in %s", n, path);
}

/* The loss of forward graph g on the reference executor (NAN on failure). */
static double forward_loss(const char *name, ir_graph *g)
{
    char err[512];
    exec_ref *r = exec_ref_new(g, 0, err, sizeof err);
    CHECKF(r != NULL, "%s: %s", name, err);
    if (!r) return NAN;
    exec_ref_init_args(r, 1);
    int ran = exec_ref_run(r, err, sizeof err) == 0;
    CHECKF(ran, "%s: %s", name, err);
    double loss = ran ? exec_ref_loss(r) : NAN;
    exec_ref_free(r);
    return loss;
}

/* ir_rebatch (issue 44 item 8): an exported GPT-2, LLaMA and torch 1.13's
 * nn.MultiheadAttention (its merged [S, B*H, D] and [S*B, E] kept apart:
 * ir_unmerge) built at half their batch and run on each half of torch's batch: the mean of the two
 * halves' losses is the batch's (every example has as many tokens), so the
 * micro-batch step computes the model's function; the batch dim is found
 * from the inputs and the loss's reduction; a training-mode BatchNorm
 * (whose statistics couple the examples) is flagged. */
static void test_rebatch(void)
{
    const char *names[] = {"gpt2-legacy", "llama-legacy", "resnet-legacy", "mha-t113"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        fixture f;
        memset(&f, 0, sizeof f);
        char err[512];
        snprintf(f.name, sizeof f.name, "%s", names[i]);
        snprintf(f.model, sizeof f.model, "%s/tests/onnx/hf/%s.onnx", root(), names[i]);
        snprintf(f.ref, sizeof f.ref, "%s/tests/onnx/hf/%s.ref.pb", root(), names[i]);
        f.t = onnx_tensors_read_graph(f.ref, &f.n, err, sizeof err);
        CHECKF(f.t != NULL, "%s", err);
        ir_graph *g = f.t ? load(&f, NULL) : NULL;
        if (!g) continue;
        double full = forward_loss(f.name, g), halves = 0;
        shard_groups *gs = shard_groups_build(g);
        unsigned *mask = calloc((size_t)g->n_values + 1, sizeof *mask);
        int64_t batch = 0;
        int coupled = 0, found = shard_batch_dims(g, gs, mask, &batch, err, sizeof err) == 0;
        CHECKF(found && batch == 4, "%s: batch %lld: %s", f.name, (long long)batch, err);
        ir_graph *h = found ? ir_rebatch(g, 2, mask, &coupled, err, sizeof err) : NULL;
        CHECKF(h != NULL, "%s: %s", f.name, err);
        CHECKF(coupled == !strncmp(f.name, "resnet", 6), "%s: coupled %d", f.name, coupled);
        for (int k = 0; h && !coupled && k < 2; k++) {
            for (int v = 0; v < h->n_values; v++) {
                const onnx_tensor *t = h->values[v].role == IR_INPUT ? ref_get(&f, h->values[v].name) : NULL;
                if (!t) continue;
                CHECKF(mask[ir_find(g, h->values[v].name)] == 1u && ir_numel(&h->values[v]) * 2 == t->n, "%s: input %s", f.name,
                       h->values[v].name);
                ir_data_set(h, v, (const char *)t->data + 4 * (size_t)k * (size_t)(t->n / 2), t->n / 2);
            }
            halves += forward_loss(f.name, h) / 2;
        }
        if (h && !coupled) {
            CHECKF(fabs(halves - full) <= 1e-6 * fabs(full), "%s: halves' mean loss %.9g, the batch's %.9g", f.name, halves, full);
            printf("  %-14s rebatched to 2: loss %.9g, the halves' mean %.9g\n", f.name, full, halves);
        }
        ir_free(h);
        free(mask);
        shard_groups_free(gs);
        ir_free(g);
        for (int k = 0; k < f.n; k++) onnx_tensor_free(&f.t[k]);
        free(f.t);
    }
}

/* A batch mean written with a constant tensor, as exporters write it
 * (`sum * (1 / n)`, `sum / n`, `-sum / n`), over x[4, 3] * w: built at half
 * the batch, the halves' mean loss is the batch's (before, the product with
 * a constant kept 1 / 12 and each half's loss was half its mean). */
static void test_rebatch_means(void)
{
    const float xs[12] = {1, -2, 3, 0.5f, 4, -1, 2, 2, -3, 1.5f, 0, 7}, ws[3] = {0.25f, -1, 2};
    const int64_t xd[2] = {4, 3}, wd[1] = {3}, red[2] = {0, 1}, map[1] = {1};
    const char *forms[] = {"mul", "div", "neg-div", "mul-rank1"};
    for (int f = 0; f < 4; f++) {
        char err[512] = "";
        ir_graph *g = ir_new("mean");
        int x = ir_arg(g, "x", IR_INPUT, IR_F32, 2, xd), w = ir_arg(g, "w", IR_PARAM, IR_F32, 1, wd);
        int sum = ir_reduce(g, IR_OP_REDUCE_SUM, ir_binary(g, IR_OP_MUL, x, ir_broadcast(g, w, 2, xd, map)), 2, red), loss;
        const int64_t one[1] = {1};
        if (f == 0) loss = ir_binary(g, IR_OP_MUL, ir_constant(g, 1.0 / 12, IR_F32, 0, one), sum);
        else if (f == 1) loss = ir_binary(g, IR_OP_DIV, sum, ir_constant(g, 12, IR_F32, 0, one));
        else if (f == 2) loss = ir_binary(g, IR_OP_DIV, sum, ir_constant(g, -12, IR_F32, 0, one));
        else loss = ir_reshape(g, ir_binary(g, IR_OP_MUL, ir_reshape(g, sum, 1, one), ir_constant(g, 1.0 / 12, IR_F32, 1, one)), 0, one);
        ir_set_loss(g, loss);
        ir_data_set(g, x, xs, 12);
        ir_data_set(g, w, ws, 3);
        CHECKF(!ir_error(g), "%s: %s", forms[f], ir_error(g));
        unsigned *mask = calloc((size_t)g->n_values + 1, sizeof *mask);
        mask[x] = 1u;
        for (int v = 0; v < g->n_values; v++)
            if (g->values[v].rank == 2) mask[v] = 1u; /* x, w broadcast, their product: dim 0 the batch */
        int coupled = 0;
        ir_graph *h = ir_error(g) ? NULL : ir_rebatch(g, 2, mask, &coupled, err, sizeof err);
        CHECKF(h != NULL, "%s: %s", forms[f], err);
        double full = h ? forward_loss(forms[f], g) : NAN, halves = 0;
        for (int k = 0; h && k < 2; k++) {
            ir_data_set(h, ir_find(h, "x"), xs + 6 * k, 6);
            ir_data_set(h, ir_find(h, "w"), ws, 3);
            halves += forward_loss(forms[f], h) / 2;
        }
        CHECKF(h && fabs(halves - full) <= 1e-6 * fabs(full), "%s: the halves' mean loss %.9g, the batch's %.9g", forms[f], halves, full);
        ir_free(h);
        ir_free(g);
        free(mask);
    }
}

/* ---- models built here (protobuf-c), for the errors -------------------- */

/* A float tensor's value info (name, shape): the three structs it points into,
 * alive until the model is packed. */
typedef struct {
    Onnx__ValueInfoProto vi;
    Onnx__TypeProto type;
    Onnx__TypeProto__Tensor tt;
} float_info;

static Onnx__ValueInfoProto *float_info_init(float_info *f, const char *name, Onnx__TensorShapeProto *shape)
{
    onnx__value_info_proto__init(&f->vi);
    onnx__type_proto__init(&f->type);
    onnx__type_proto__tensor__init(&f->tt);
    f->tt.has_elem_type = 1;
    f->tt.elem_type = 1;
    f->tt.shape = shape;
    f->type.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    f->type.tensor_type = &f->tt;
    f->vi.name = (char *)name;
    f->vi.type = &f->type;
    return &f->vi;
}

/* Graph g as a model of the default domain at `opset` (IR version 8): the
 * packed bytes (malloc'ed), their count in *len. */
static uint8_t *pack_model(Onnx__GraphProto *g, int opset, size_t *len)
{
    Onnx__OperatorSetIdProto os = ONNX__OPERATOR_SET_ID_PROTO__INIT, *oss[1] = {&os};
    os.domain = "";
    os.has_version = 1;
    os.version = opset;
    Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
    m.has_ir_version = 1;
    m.ir_version = 8;
    m.n_opset_import = 1;
    m.opset_import = oss;
    m.graph = g;
    *len = onnx__model_proto__get_packed_size(&m);
    uint8_t *buf = malloc(*len + 1);
    onnx__model_proto__pack(&m, buf);
    return buf;
}

/* A one-node model: input x (float, dims; a dim of -1 is symbolic "batch"),
 * node `op` named "n1" reading x, output y declared with x's first y_rank dims. */
static uint8_t *one_node(int opset, const char *op, int rank, const int64_t *dims, int y_rank, size_t *len)
{
    Onnx__TensorShapeProto__Dimension dv[8], *dp[8], yv[8], *yp[8];
    for (int i = 0; i < rank; i++) {
        onnx__tensor_shape_proto__dimension__init(&dv[i]);
        if (dims[i] < 0) {
            dv[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dv[i].dim_param = "batch";
        } else {
            dv[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dv[i].dim_value = dims[i];
        }
        dp[i] = &dv[i];
    }
    for (int i = 0; i < y_rank; i++) {
        onnx__tensor_shape_proto__dimension__init(&yv[i]);
        yv[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        yv[i].dim_value = dims[i] > 0 ? dims[i] : 1;
        yp[i] = &yv[i];
    }
    Onnx__TensorShapeProto shape = ONNX__TENSOR_SHAPE_PROTO__INIT, yshape = ONNX__TENSOR_SHAPE_PROTO__INIT;
    shape.n_dim = (size_t)rank;
    shape.dim = dp;
    yshape.n_dim = (size_t)y_rank;
    yshape.dim = yp;
    float_info in, out;
    Onnx__ValueInfoProto *ins[1] = {float_info_init(&in, "x", &shape)}, *outs[1] = {float_info_init(&out, "y", &yshape)};
    char *nin[1] = {"x"}, *nout[1] = {"y"};
    Onnx__NodeProto node = ONNX__NODE_PROTO__INIT, *nodes[1] = {&node};
    node.n_input = node.n_output = 1;
    node.input = nin;
    node.output = nout;
    node.name = "n1";
    node.op_type = (char *)op;
    Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
    g.name = "one";
    g.n_node = 1;
    g.node = nodes;
    g.n_input = g.n_output = 1;
    g.input = ins;
    g.output = outs;
    return pack_model(&g, opset, len);
}

/* Imports bytes; returns the graph (or NULL) with the message in err. */
static ir_graph *import_bytes(const uint8_t *b, size_t n, const onnx_options *o, char *err, size_t len)
{
    err[0] = 0;
    ir_graph *g = onnx_import_bytes(b, n, "m.onnx", NULL, o, NULL, err, len);
    CHECKF(g || (err[0] && !strchr(err, '\n')), "a refusal without one line: '%s'", err);
    return g;
}

static void test_errors(void)
{
    char err[1024], path[600];
    size_t n;
    int64_t d2[2] = {4, 3}, sym[2] = {-1, 3}, huge[3] = {(int64_t)1 << 31, (int64_t)1 << 31, (int64_t)1 << 31};
    onnx_options none = {0}, outs = {.outputs = 1};
    /* an unsupported op, named with its node and opset */
    uint8_t *b = one_node(14, "Hardmax", 2, d2, 2, &n);
    ir_graph *g = import_bytes(b, n, &outs, err, sizeof err);
    CHECKF(!g && strstr(err, "m.onnx: node 'n1' (Hardmax, opset 14): unsupported op Hardmax"), "%s", err);
    free(b);
    /* opsets outside 13-20 (20: torch 2.13's default exporter's); 18-20 read */
    for (int v = 12; v <= 21; v += 9) {
        b = one_node(v, "Relu", 2, d2, 2, &n);
        g = import_bytes(b, n, &outs, err, sizeof err);
        char want[64];
        snprintf(want, sizeof want, "opset %d is outside 13-20", v);
        CHECKF(!g && strstr(err, want), "opset %d: %s", v, err);
        free(b);
    }
    /* a symbolic dim: named, with the option that fixes it */
    b = one_node(14, "Relu", 2, sym, 2, &n);
    g = import_bytes(b, n, &outs, err, sizeof err);
    CHECKF(!g && strstr(err, "dim 0 is symbolic ('batch')") && strstr(err, "--dim batch=N"), "%s", err);
    onnx_options with_dim = {.outputs = 1, .dims = "batch=4"};
    g = import_bytes(b, n, &with_dim, err, sizeof err);
    CHECKF(g && g->values[0].dims[0] == 4, "--dim batch=4: %s", err);
    ir_free(g);
    onnx_options bad_dim = {.outputs = 1, .dims = "batch=-4"};
    g = import_bytes(b, n, &bad_dim, err, sizeof err);
    CHECKF(!g && strstr(err, "--dim"), "--dim batch=-4: %s", err);
    free(b);
    /* an element count that overflows */
    b = one_node(14, "Relu", 3, huge, 3, &n);
    g = import_bytes(b, n, &outs, err, sizeof err);
    CHECKF(!g && strstr(err, "overflows"), "%s", err);
    free(b);
    /* no scalar output to train on, then a loss appended */
    b = one_node(14, "Relu", 2, d2, 2, &n);
    g = import_bytes(b, n, &none, err, sizeof err);
    CHECKF(!g && strstr(err, "--loss"), "%s", err);
    onnx_options ce = {.loss = "cross_entropy:y"}, mse = {.loss = "mse:y,want"}, badloss = {.loss = "hinge:y"};
    g = import_bytes(b, n, &ce, err, sizeof err);
    CHECKF(g && g->loss >= 0 && ir_find(g, "labels") >= 0 && g->values[ir_find(g, "labels")].dtype == IR_I32, "%s", err);
    ir_free(g);
    g = import_bytes(b, n, &mse, err, sizeof err);
    CHECKF(g && g->loss >= 0 && ir_find(g, "want") >= 0, "%s", err);
    ir_free(g);
    g = import_bytes(b, n, &badloss, err, sizeof err);
    CHECKF(!g && strstr(err, "unknown kind 'hinge'"), "%s", err);
    /* truncated and corrupt files */
    g = import_bytes(b, n / 2, &outs, err, sizeof err);
    CHECKF(!g && strstr(err, "not an ONNX model"), "truncated: %s", err);
    int parsed = 0;
    for (size_t k = 0; k < n; k++) { /* every byte flipped in turn: refused with a message, or a valid graph */
        uint8_t *c = malloc(n);
        memcpy(c, b, n);
        c[k] ^= 0x5a;
        g = import_bytes(c, n, &outs, err, sizeof err);
        if (g) {
            parsed++;
            CHECK(ir_verify(g, err, sizeof err) == 0);
        }
        ir_free(g);
        free(c);
    }
    printf("  corrupt one-node models: %d of %zu flipped bytes still import\n", parsed, n);
    free(b);
    /* a file that is not there, or not a file */
    g = onnx_import("/nonexistent/model.onnx", &outs, NULL, err, sizeof err);
    CHECKF(!g && strstr(err, "/nonexistent/model.onnx: cannot open"), "%s", err);
    g = onnx_import("/tmp", &outs, NULL, err, sizeof err);
    CHECKF(!g && strstr(err, "not a regular file"), "%s", err);
    /* external data: read from its file only with weights; a missing file is named */
    snprintf(path, sizeof path, "%s/tests/onnx/fixtures/external/mlp.onnx", root());
    onnx_options w = {.weights = 1};
    ir_graph *ext = onnx_import(path, &w, NULL, err, sizeof err);
    CHECKF(ext != NULL, "%s", err);
    snprintf(path, sizeof path, "%s/tests/onnx/fixtures/mlp-o14-train.onnx", root());
    ir_graph *inl = onnx_import(path, &w, NULL, err, sizeof err);
    CHECKF(inl != NULL, "%s", err);
    int same = ext && inl, params = 0;
    for (int v = 0; same && v < inl->n_values; v++) {
        if (inl->values[v].role != IR_PARAM) continue;
        int x = ir_find(ext, inl->values[v].name);
        params++;
        same = x >= 0 && ir_data(ext, x) && !memcmp(ir_data(ext, x), ir_data(inl, v), (size_t)ir_numel(&inl->values[v]) * 4);
    }
    CHECKF(same && params == 6, "the external data's weights differ from the inline ones (%d params)", params);
    ir_free(ext);
    ir_free(inl);
    char dir[] = "/tmp/carve-onnx-XXXXXX", copy[700], cmd[1600];
    if (mkdtemp(dir)) {
        snprintf(copy, sizeof copy, "%s/mlp.onnx", dir);
        snprintf(cmd, sizeof cmd, "cp '%s/tests/onnx/fixtures/external/mlp.onnx' '%s'", root(), copy);
        CHECK(system(cmd) == 0);
        g = onnx_import(copy, &none, NULL, err, sizeof err); /* shapes only: the data file is never opened */
        CHECKF(g != NULL && g->loss >= 0, "without weights: %s", err);
        ir_free(g);
        g = onnx_import(copy, &w, NULL, err, sizeof err);
        CHECKF(!g && strstr(err, "external data file") && strstr(err, "mlp.data"), "%s", err);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        CHECK(system(cmd) == 0);
    }
}

/* fills_model's node m: op reading io[0..n_in-1], writing io[2]. */
static Onnx__NodeProto *fill_node(Onnx__NodeProto *m, char **io, const char *op, int n_in)
{
    onnx__node_proto__init(m);
    m->input = io;
    m->output = io + 2;
    m->n_input = (size_t)n_in;
    m->n_output = 1;
    m->op_type = (char *)op;
    return m;
}

/* Fills (issue 43): `count` fills of `elems` elements, all made before any
 * is added to input x (x float[elems]), then ReduceSum.  Variant 0:
 * ConstantOfShape(n) of 0.5; 1: the same, read by a folded Neg; 2: passed through a folded Reshape(c,
 * n), multiplied into x; 3: Expand of a scalar 0.5 to n; 4: ConstantOfShape
 * of an int64 2 (an integer fill used as a number). */
static uint8_t *fills_model(int count, int64_t elems, int variant, size_t *len)
{
    enum { MAXN = 64 };
    static char names[4 * MAXN][16];
    char *nm = names[0];
    int used = 0;
#define NAME(...) (snprintf(nm = names[used++], 16, __VA_ARGS__), nm)
    Onnx__TensorShapeProto__Dimension dv = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT, *dp[1] = {&dv};
    dv.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
    dv.dim_value = elems;
    Onnx__TensorShapeProto shape = ONNX__TENSOR_SHAPE_PROTO__INIT, scalar_shape = ONNX__TENSOR_SHAPE_PROTO__INIT;
    shape.n_dim = 1;
    shape.dim = dp;
    float_info in, out;
    Onnx__ValueInfoProto *ins[1] = {float_info_init(&in, "x", &shape)}, *outs[1] = {float_info_init(&out, "loss", &scalar_shape)};
    /* initializers: n = [elems] (int64), s = 0.5 (a float scalar) */
    int64_t nv = elems, one_dim = 1;
    float half = 0.5f;
    Onnx__TensorProto n_init = ONNX__TENSOR_PROTO__INIT, s_init = ONNX__TENSOR_PROTO__INIT, value = ONNX__TENSOR_PROTO__INIT,
                      *inits[2] = {&n_init, &s_init};
    n_init.name = "n";
    n_init.has_data_type = 1;
    n_init.data_type = 7;
    n_init.n_dims = 1;
    n_init.dims = &one_dim;
    n_init.n_int64_data = 1;
    n_init.int64_data = &nv;
    s_init.name = "s";
    s_init.has_data_type = 1;
    s_init.data_type = 1;
    s_init.n_float_data = 1;
    s_init.float_data = &half;
    int64_t two = 2;
    value.has_data_type = 1;
    value.n_dims = 1;
    value.dims = &one_dim;
    if (variant == 4) {
        value.data_type = 7;
        value.n_int64_data = 1;
        value.int64_data = &two;
    } else {
        value.data_type = 1;
        value.n_float_data = 1;
        value.float_data = &half;
    }
    Onnx__AttributeProto va = ONNX__ATTRIBUTE_PROTO__INIT, *vas[1] = {&va};
    va.name = "value";
    va.has_type = 1;
    va.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
    va.t = &value;
    Onnx__AttributeProto kd = ONNX__ATTRIBUTE_PROTO__INIT, *kds[1] = {&kd};
    kd.name = "keepdims";
    kd.has_type = kd.has_i = 1;
    kd.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    kd.i = 0;
    static Onnx__NodeProto nodes[3 * MAXN + 1];
    static Onnx__NodeProto *np[3 * MAXN + 1];
    static char *io[3 * MAXN + 1][4];
    int k = 0;
    const char *prev = "x";
    if (count > MAXN) count = MAXN;
    char *fs[MAXN];
    for (int i = 0; i < count; i++) { /* the fills c_i and what reads them (f_i), all alive together */
        char *c = NAME("c%d", i), *f = c;
        Onnx__NodeProto *m = fill_node(&nodes[k], io[k], variant == 3 ? "Expand" : "ConstantOfShape", variant == 3 ? 2 : 1);
        if (variant == 3) {
            io[k][0] = "s";
            io[k][1] = "n";
        } else {
            io[k][0] = "n";
            m->n_attribute = 1;
            m->attribute = vas;
        }
        io[k][2] = c;
        np[k] = m;
        k++;
        if (variant == 1 || variant == 2) {
            m = fill_node(&nodes[k], io[k], variant == 2 ? "Reshape" : "Neg", variant == 2 ? 2 : 1);
            io[k][0] = c;
            io[k][1] = "n";
            io[k][2] = f = NAME("f%d", i);
            np[k] = m;
            k++;
        }
        fs[i] = f;
    }
    for (int i = 0; i < count; i++) { /* then the adds */
        Onnx__NodeProto *m = fill_node(&nodes[k], io[k], variant == 2 ? "Mul" : "Add", 2);
        io[k][0] = (char *)prev;
        io[k][1] = fs[i];
        io[k][2] = NAME("s%d", i);
        prev = io[k][2];
        np[k] = m;
        k++;
    }
    Onnx__NodeProto *m = fill_node(&nodes[k], io[k], "ReduceSum", 1);
    m->n_attribute = 1;
    m->attribute = kds;
    io[k][0] = (char *)prev;
    io[k][2] = "loss";
    np[k] = m;
    k++;
#undef NAME
    Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
    g.name = "fills";
    g.n_node = (size_t)k;
    g.node = np;
    g.n_input = g.n_output = 1;
    g.input = ins;
    g.output = outs;
    g.n_initializer = 2;
    g.initializer = inits;
    return pack_model(&g, 17, len);
}

/* A fill is kept without its elements until a folder reads them: ten fills
 * of 5000 elements (400 KB as doubles) import under a bound of 160 KB
 * (max_const 10000) as graph constants with no table, and the bound still
 * holds where folders read them. */
static void test_lazy_fills(void)
{
    char err[1024];
    size_t n;
    onnx_options o = {.max_const = 10000};
    static const char *const what[] = {"ConstantOfShape", "read by Neg", "through Reshape", "Expand of a scalar", "int64 fill"};
    for (int variant = 0; variant < 5; variant++) {
        uint8_t *b = fills_model(10, 5000, variant, &n);
        onnx_info info;
        memset(&info, 0, sizeof info);
        ir_graph *g = onnx_import_bytes(b, n, "m.onnx", NULL, &o, &info, err, sizeof err);
        if (variant == 1) { /* ten tables of 40 KB made by Neg: past the bound */
            CHECKF(!g && strstr(err, "carve folds in all") && !strchr(err, '\n'), "fills %s: %s", what[variant], err);
        } else {
            double want = variant == 4 ? 2.0 : 0.5;
            int scalars = 0, tables = 0;
            for (int i = 0; g && i < g->n_ops; i++) {
                const ir_op *op = &g->ops[i];
                if ((op->kind == IR_OP_ADD_SCALAR || op->kind == IR_OP_SCALE || op->kind == IR_OP_CONSTANT) && op->attrs.scalar == want)
                    scalars++;
            }
            for (int v = 0; g && v < g->n_values; v++) tables += g->values[v].role == IR_CONST && ir_data(g, v) != NULL;
            CHECKF(g && scalars == 10 && tables == 0 && info.consts == 0, "fills %s: %s (%d scalar ops, %d tables)", what[variant],
                   g ? "" : err, scalars, tables);
        }
        ir_free(g);
        free(b);
    }
    /* two fills read by Neg fit the bound: made, then folded into -0.5 constants */
    uint8_t *b = fills_model(2, 5000, 1, &n);
    ir_graph *g = onnx_import_bytes(b, n, "m.onnx", NULL, &o, NULL, err, sizeof err);
    int scalars = 0;
    for (int i = 0; g && i < g->n_ops; i++) scalars += g->ops[i].kind == IR_OP_ADD_SCALAR && g->ops[i].attrs.scalar == -0.5;
    CHECKF(g && scalars == 2, "two fills read by Neg: %s (%d)", g ? "" : err, scalars);
    ir_free(g);
    free(b);
}

/* --frozen keeps a float initializer constant (LLaMA's inv_freq buffer). */
static void test_frozen(void)
{
    char path[600], err[1024];
    snprintf(path, sizeof path, "%s/tests/onnx/fixtures/llama-o14-train.onnx", root());
    onnx_options o = {.frozen = "inv_*"};
    onnx_info info;
    ir_graph *g = onnx_import(path, &o, &info, err, sizeof err);
    CHECKF(g && ir_find(g, "inv_freq") < 0 && strstr(info.notes, "kept constant by --frozen ('inv_freq')"), "%s %s", err, g ? info.notes : "");
    /* the rotary tables then fold: no sin or cos op is left */
    int trig = 0;
    for (int i = 0; g && i < g->n_ops; i++) trig += g->ops[i].kind == IR_OP_SIN || g->ops[i].kind == IR_OP_COS;
    CHECKF(g && trig == 0, "%d sin/cos ops left", trig);
    ir_free(g);
}

/* Slices whose steps are far beyond their dim (tests/onnx/regress/slice_step.py:
 * 2^62 on an input, -2^63 on a folded constant; fuzz_onnx found such a step
 * overflowing the folded slice's strides) take their start alone. */
static void test_slice_steps(void)
{
    char path[600], err[1024];
    snprintf(path, sizeof path, "%s/tests/onnx/regress/slice_step.onnx", root());
    onnx_options o = {.weights = 1, .outputs = 1, .frozen = "C"}; /* C constant: its slice folds */
    ir_graph *g = onnx_import(path, &o, NULL, err, sizeof err);
    CHECKF(g != NULL, "%s", err);
    int y = g ? ir_find(g, "y") : -1, cs = -1;
    CHECKF(y >= 0 && g->values[y].rank == 2 && g->values[y].dims[0] == 4 && g->values[y].dims[1] == 1, "y not [4, 1]");
    for (int v = 0; g && v < g->n_values; v++)
        if (ir_data(g, v) && g->values[v].rank == 2 && g->values[v].dims[1] == 1) cs = v;
    const float *c = cs >= 0 ? ir_data(g, cs) : NULL; /* C's last column, folded */
    CHECKF(c && c[0] == 5 && c[1] == 11 && c[2] == 17 && c[3] == 23, "folded slice: %g %g", c ? c[0] : -1.0, c ? c[3] : -1.0);
    ir_free(g);
    o.frozen = NULL; /* C a param: both slices are ops (a gather of one column each) */
    g = onnx_import(path, &o, NULL, err, sizeof err);
    y = g ? ir_find(g, "y") : -1;
    CHECKF(y >= 0 && g->values[y].rank == 2 && g->values[y].dims[0] == 4 && g->values[y].dims[1] == 1, "%s", g ? "y not [4, 1]" : err);
    ir_free(g);
}

/* The heads layout (onnx/layout.c): LLaMA's q, k, v and o projections are
 * held split as their one reshape splits them, no reshape of a param is
 * left, the file's shapes are recorded and survive the graph JSON, the
 * weights are the file's bytes in order, and other params keep their shape. */
static void test_heads_layout(void)
{
    char path[600], err[1024];
    snprintf(path, sizeof path, "%s/tests/onnx/fixtures/llama-o14-train.onnx", root());
    onnx_options o = {.weights = 1};
    onnx_info info;
    ir_graph *g = onnx_import(path, &o, &info, err, sizeof err);
    CHECKF(g && info.heads_layout == 8, "%s: %d params in the heads layout, 8 expected", err, g ? info.heads_layout : -1);
    if (!g) return;
    static const struct {
        const char *name;
        int rank;
        int64_t dims[3];
        int frank;
        int64_t fdims[2];
    } want[] = {
        {"layers.0.self_attn.q_proj.weight", 3, {4, 4, 16}, 2, {16, 16}}, {"layers.1.self_attn.k_proj.weight", 3, {2, 4, 16}, 2, {8, 16}},
        {"layers.0.self_attn.v_proj.weight", 3, {2, 4, 16}, 2, {8, 16}}, {"layers.1.self_attn.o_proj.weight", 3, {16, 4, 4}, 2, {16, 16}},
        {"layers.0.gate_proj.weight", 2, {32, 16}, -1, {0}},             {"embed_tokens.weight", 2, {32, 16}, -1, {0}},
    };
    int frank;
    int64_t fdims[IR_MAX_RANK];
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int v = ir_find(g, want[i].name), held = v >= 0 && ir_file_shape(g, v, &frank, fdims);
        int same = v >= 0 && g->values[v].rank == want[i].rank && !memcmp(g->values[v].dims, want[i].dims, (size_t)want[i].rank * 8);
        CHECKF(same && (want[i].frank < 0 ? !held : held && frank == 2 && !memcmp(fdims, want[i].fdims, 16)), "%s: shape or file shape",
               want[i].name);
    }
    int param_reshapes = 0;
    for (int i = 0; i < g->n_ops; i++)
        param_reshapes += g->ops[i].kind == IR_OP_RESHAPE && g->values[g->ops[i].in[0]].role == IR_PARAM;
    CHECKF(param_reshapes == 0, "%d reshapes of params left", param_reshapes);
    /* the weights are the file's bytes in their order (the initializer's raw data) */
    int v = ir_find(g, "layers.1.self_attn.o_proj.weight");
    const float *w = ir_data(g, v);
    FILE *fp = fopen(path, "rb");
    uint8_t *bytes = malloc(1 << 20);
    size_t nb = fp ? fread(bytes, 1, 1 << 20, fp) : 0;
    if (fp) fclose(fp);
    Onnx__ModelProto *m = nb ? onnx__model_proto__unpack(NULL, nb, bytes) : NULL;
    int same_bytes = 0;
    for (size_t i = 0; m && m->graph && i < m->graph->n_initializer; i++) {
        const Onnx__TensorProto *p = m->graph->initializer[i];
        if (strcmp(p->name, "layers.1.self_attn.o_proj.weight")) continue;
        same_bytes = w && p->raw_data.len == 256 * 4 && !memcmp(p->raw_data.data, w, 256 * 4);
    }
    CHECKF(same_bytes, "o_proj's weights are not the file's bytes in order");
    if (m) onnx__model_proto__free_unpacked(m, NULL);
    free(bytes);
    /* the training step and a JSON round trip keep the file's shapes */
    ir_optimizer adam = ir_default_adam();
    ir_graph *s = ir_train_step(g, &adam, err, sizeof err);
    int sv = s ? ir_find(s, "layers.1.self_attn.o_proj.weight") : -1;
    CHECKF(sv >= 0 && ir_file_shape(s, sv, &frank, fdims) && frank == 2 && fdims[1] == 16, "the step lost the file shape: %s", err);
    char *json = ir_save_json(g);
    ir_graph *back = json ? ir_load_json(json, err, sizeof err) : NULL;
    int bv = back ? ir_find(back, "layers.1.self_attn.o_proj.weight") : -1;
    CHECKF(bv >= 0 && ir_file_shape(back, bv, &frank, fdims) && frank == 2 && fdims[0] == 16, "JSON lost the file shape: %s", err);
    CHECKF(json && strstr(json, "\"file_shape\": [16, 16]"), "no file_shape in the graph JSON");
    /* a file shape of another element count is refused, naming it */
    char *at = json ? strstr(json, "\"file_shape\": [16, 16]") : NULL;
    if (at) memcpy(at, "\"file_shape\": [16, 17]", 22);
    ir_graph *bad = at ? ir_load_json(json, err, sizeof err) : NULL;
    CHECKF(at && !bad && strstr(err, "file shape of 'layers.0.self_attn.q_proj.weight'"), "%s", err);
    ir_free(bad);
    free(json);
    ir_free(back);
    ir_free(s);
    ir_free(g);
}

/* `test_onnx --mpi NAME MESH SCHEDULE` under mpirun: fixture NAME's step
 * under the plan, one MPI rank per device (tests/e2e_onnx.sh runs it on 2
 * ranks); rank 0 compares with torch and prints the closing line. */
static int mpi_main(const char *name, const char *mesh_text, const char *sched)
{
    char err[1024];
    int rank, size;
    if (exec_mpi_init(&rank, &size, err, sizeof err) < 0) {
        printf("%s\n0 passed, 1 failed\n", err);
        return 1;
    }
    fixture f;
    memset(&f, 0, sizeof f);
    snprintf(f.name, sizeof f.name, "%s", name);
    snprintf(f.model, sizeof f.model, "%s/tests/onnx/fixtures/%s.onnx", root(), name);
    snprintf(f.ref, sizeof f.ref, "%s/tests/onnx/fixtures/%s.ref.pb", root(), name);
    f.t = onnx_tensors_read_graph(f.ref, &f.n, err, sizeof err);
    onnx_info info;
    ir_graph *g = f.t ? load(&f, &info) : NULL;
    int *grad_out = NULL;
    ir_graph *s = g ? step_with_grads(&f, g, &grad_out) : NULL;
    shard_mesh mesh;
    schedule sc;
    int ok = s && shard_mesh_parse(mesh_text, &mesh, err, sizeof err) == 0 && sched_parse(sched, &mesh, &sc, err, sizeof err) == 0;
    shard_state *st = ok ? shard_state_new(s, &mesh) : NULL;
    ok = ok && sched_apply(&sc, st, err, sizeof err) == 0;
    spmd_program *p = ok ? spmd_lower(st) : NULL;
    exec_spmd *r = p ? exec_spmd_new_on(p, EXEC_MPI, 0, err, sizeof err) : NULL;
    CHECKF(r != NULL, "%s on %d ranks: %s", name, size, err);
    if (r) {
        exec_spmd_init_args(r, 1);
        CHECKF(exec_spmd_step(r, err, sizeof err) == 0, "%s: %s", name, err);
        float **out = calloc((size_t)s->n_outputs, sizeof *out);
        for (int i = 0; i < s->n_outputs; i++) {
            out[i] = calloc((size_t)ir_numel(&s->values[s->outputs[i].value]) + 1, 4);
            exec_spmd_assemble(r, p->out_buf[i], exec_spmd_is_root(r) ? out[i] : NULL, NULL);
        }
        if (exec_spmd_is_root(r)) {
            spmd_ctx ctx = {r, p, out};
            result res;
            compare(&f, s, grad_out, exec_spmd_loss(r), spmd_out, &ctx, &res);
            CHECKF(res.loss_rel <= LOSS_TOL, "%s (%d MPI ranks): loss differs from torch's by %.3g", name, size, res.loss_rel);
            CHECKF(res.worst_grad <= GRAD_TOL, "%s (%d MPI ranks): gradient of %s differs by %.3g", name, size, res.worst,
                   res.worst_grad);
            printf("  %-20s %d MPI ranks, %s %s: loss %.2e rel, worst gradient %.2e (%s), %d params\n", name, size, mesh_text, sched,
                   res.loss_rel, res.worst_grad, res.worst, res.compared);
        }
        for (int i = 0; i < s->n_outputs; i++) free(out[i]);
        free(out);
    }
    int root_rank = !r || exec_spmd_is_root(r);
    exec_spmd_free(r);
    spmd_free(p);
    shard_state_free(st);
    ir_free(s);
    ir_free(g);
    free(grad_out);
    for (int i = 0; i < f.n; i++) onnx_tensor_free(&f.t[i]);
    free(f.t);
    exec_mpi_finalize();
    if (!root_rank) return 0; /* rank 0 speaks for the run */
    return test_done();
}

int main(int argc, char **argv)
{
    exec_blis_setup();
    if (argc == 5 && !strcmp(argv[1], "--mpi")) return mpi_main(argv[2], argv[3], argv[4]);
    test_errors();
    test_lazy_fills();
    test_frozen();
    test_slice_steps();
    test_heads_layout();
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        for (size_t o = 0; o < sizeof opsets / sizeof opsets[0]; o++)
            for (int train = 1; train >= 0; train--) test_fixture(families[i], opsets[o], train);
    test_hf();
    test_rebatch();
    test_rebatch_means();
    return test_done();
}
