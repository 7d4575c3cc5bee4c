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
#include "exec/exec.h"
#include "exec/runtime.h"
#include "onnx/onnx.h"
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
} fixture;

static const onnx_tensor *ref_get(const fixture *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return &f->t[i];
    return NULL;
}

/* The forward graph of fixture f with its weights, the batch attached to
 * its inputs. */
static ir_graph *load(const fixture *f, onnx_info *info)
{
    char err[1024];
    onnx_options o = {.weights = 1};
    ir_graph *g = onnx_import(f->model, &o, info, err, sizeof err);
    CHECKF(g != NULL, "%s", err);
    if (!g) return NULL;
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
static void run_reference(const fixture *f, ir_graph *s, const int *grad_out)
{
    char err[512];
    exec_ref *r = exec_ref_new(s, 0, err, sizeof err);
    CHECKF(r != NULL, "%s: %s", f->name, err);
    if (!r) return;
    exec_ref_init_args(r, 1);
    CHECKF(exec_ref_run(r, err, sizeof err) == 0, "%s: %s", f->name, err);
    result res;
    ref_ctx ctx = {r, s};
    compare(f, s, grad_out, exec_ref_loss(r), ref_out, &ctx, &res);
    CHECKF(res.loss_rel <= LOSS_TOL, "%s (1 device): loss differs from torch's by %.3g relative", f->name, res.loss_rel);
    CHECKF(res.worst_grad <= GRAD_TOL, "%s (1 device): gradient of %s differs by %.3g of its largest magnitude", f->name,
           res.worst, res.worst_grad);
    printf("  %-20s 1 device:  loss %.2e rel, worst gradient %.2e (%s), %d of %d params\n", f->name, res.loss_rel,
           res.worst_grad, res.worst, res.compared, res.params);
    exec_ref_free(r);
}

/* 4 devices on threads under a plan. */
static void run_plan(const fixture *f, ir_graph *s, const int *grad_out, const char *mesh_text, const char *sched)
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
            run_reference(&f, s, grad_out);
            for (size_t k = 0; k < sizeof plans / sizeof plans[0]; k++) {
                const char *const *pl = k == 0 && !strcmp(fam, "resnet") ? cnn_plan : plans[k];
                run_plan(&f, s, grad_out, pl[0], pl[1]);
            }
        }
        free(grad_out);
        ir_free(s);
        ir_free(g);
    }
    for (int i = 0; i < f.n; i++) onnx_tensor_free(&f.t[i]);
    free(f.t);
}

int main(void)
{
    exec_blis_setup();
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        for (size_t o = 0; o < sizeof opsets / sizeof opsets[0]; o++)
            for (int train = 1; train >= 0; train--) test_fixture(families[i], opsets[o], train);
    return test_done();
}
