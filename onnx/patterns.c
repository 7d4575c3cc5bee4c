/* patterns.c - runs of ONNX nodes that are one carve op.
 *
 * torch writes some functions as chains of elementwise nodes: GELU's tanh
 * approximation (nn.GELU(approximate="tanh"), GPT-2's gelu_new) is
 *   0.5 * (x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x*x*x))))
 * in ten nodes (transformers' NewGELUActivation: 0.5 * x first, then
 * Pow(x, 3): gelu_half_first).  carve has the function as one op (`gelu`, the same
 * formula), which its cost model prices as one pass and its VJP as one
 * more, where the chain would be priced node by node.  A pattern is tried
 * at the first node of its chain: it follows the chain's values forward
 * (each must have exactly one reader and not be a graph output), checks the
 * constants, and when everything matches emits the one op for the chain's
 * last value and marks the other nodes done.  Anything else is imported
 * node by node, with the same numbers up to rounding.
 */
#include "onnx/rows.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ox_consumers_build(ox_ctx *c)
{
    const Onnx__GraphProto *gp = c->graph;
    int nv = c->n_vals;
    c->use_start = ir_xcalloc((size_t)nv + 2, sizeof(int));
    for (size_t i = 0; i < gp->n_node; i++)
        for (size_t k = 0; k < gp->node[i]->n_input; k++) {
            ox_val *v = gp->node[i]->input[k] && gp->node[i]->input[k][0] ? ox_val_get(c, gp->node[i]->input[k]) : NULL;
            if (v) c->use_start[v - c->vals + 1]++;
        }
    for (int v = 0; v < nv; v++) c->use_start[v + 1] += c->use_start[v];
    c->uses = ir_xcalloc((size_t)c->use_start[nv] + 1, sizeof(int));
    int *fill = ir_xcalloc((size_t)nv + 1, sizeof(int));
    for (size_t i = 0; i < gp->n_node; i++)
        for (size_t k = 0; k < gp->node[i]->n_input; k++) {
            ox_val *v = gp->node[i]->input[k] && gp->node[i]->input[k][0] ? ox_val_get(c, gp->node[i]->input[k]) : NULL;
            if (v) c->uses[c->use_start[v - c->vals] + fill[v - c->vals]++] = (int)i;
        }
    free(fill);
    /* graph outputs count as a reader */
    c->is_output = ir_xcalloc((size_t)nv + 1, 1);
    for (size_t i = 0; i < gp->n_output; i++) {
        ox_val *v = gp->output[i]->name ? ox_val_get(c, gp->output[i]->name) : NULL;
        if (v) c->is_output[v - c->vals] = 1;
    }
    c->done = ir_xcalloc(gp->n_node + 1, 1);
    c->remaining = ir_xcalloc((size_t)nv + 1, sizeof(int));
    for (int v = 0; v < nv; v++) c->remaining[v] = c->use_start[v + 1] - c->use_start[v];
}

void ox_release_inputs(ox_ctx *c, const Onnx__NodeProto *n)
{
    for (size_t k = 0; k < n->n_input; k++) {
        ox_val *v = n->input[k] && n->input[k][0] ? ox_val_get(c, n->input[k]) : NULL;
        if (!v) continue;
        int i = (int)(v - c->vals);
        if (--c->remaining[i] > 0 || c->is_output[i] || v->kind != OX_CONST) continue;
        ox_tensor_free(v->c);
        v->c = NULL;
        v->kind = OX_UNSET; /* read again only by a broken graph: "not made" */
    }
}

/* The one node that reads value `name` (not a graph output), or NULL. */
static const Onnx__NodeProto *sole_reader(ox_ctx *c, const char *name, int *index)
{
    ox_val *v = ox_val_get(c, name);
    if (!v) return NULL;
    int i = (int)(v - c->vals);
    if (c->is_output[i] || c->use_start[i + 1] - c->use_start[i] != 1) return NULL;
    *index = c->uses[c->use_start[i]];
    const Onnx__NodeProto *n = c->graph->node[*index];
    return n->n_output == 1 && ox_n_in(n) == 2 ? n : n->n_output == 1 && ox_n_in(n) == 1 ? n : NULL;
}

/* Node n is `op` reading `name` and, as its other input, a constant scalar
 * equal to `value` within float rounding (value NAN: the other input is
 * `other`). */
static int is_step(ox_ctx *c, const Onnx__NodeProto *n, const char *op, const char *name, double value, const char *other)
{
    if (!n || strcmp(n->op_type, op) || (n->domain && n->domain[0])) return 0;
    int nin = ox_n_in(n);
    if (nin == 1) return !strcmp(n->input[0], name) && isnan(value) && !other;
    if (nin != 2) return 0;
    int k = !strcmp(n->input[0], name) ? 1 : !strcmp(n->input[1], name) ? 0 : -1;
    if (k < 0) return 0;
    if (other) return !strcmp(n->input[k], other);
    ox_val *v = ox_val_get(c, n->input[k]);
    if (!v || !ox_is_const(v)) return 0;
    ox_tensor *t = ox_const_lazy(c, v); /* a big fill is not one element: left lazy */
    return t && t->n == 1 && ox_type_is_float(t->type) && fabs(ox_tensor_first(t) - value) <= 1e-6 * fabs(value);
}

/* gelu(x) as the output of node `last`, the n nodes done[] marked imported.
 * Returns 1, or -1 on error. */
static int gelu_out(ox_ctx *c, ox_val *vx, const Onnx__NodeProto *last, const int *done, int n)
{
    int xi = ox_ir(c, vx);
    if (xi < 0) return -1;
    int y = ir_unary(c->g, IR_OP_GELU, xi);
    if (y < 0) return ox_check_ir(c);
    for (int i = 0; i < n; i++) c->done[done[i]] = 1;
    if (c->info) c->info->patterns++;
    return ox_out_ir(c, last, 0, y, vx->type) < 0 ? -1 : 1;
}

/* GELU, tanh form, anchored at Mul(x, x).  Returns 1 when emitted. */
static int gelu_tanh(ox_ctx *c, int at)
{
    const Onnx__NodeProto *n = c->graph->node[at];
    if (strcmp(n->op_type, "Mul") || ox_n_in(n) != 2 || strcmp(n->input[0], n->input[1]) || n->n_output != 1) return 0;
    const char *x = n->input[0];
    ox_val *vx = ox_val_get(c, x);
    if (!vx || ox_is_const(vx) || !ox_type_is_float(vx->type)) return 0;
    int idx[10], k = 0;
    const Onnx__NodeProto *s[10];
    s[k] = n, idx[k++] = at;
    static const struct { const char *op; double v; int other_x; } chain[] = {
        {"Mul", NAN, 1},         /* x * (x * x) */
        {"Mul", 0.044715, 0},    /* 0.044715 * x^3 */
        {"Add", NAN, 1},         /* x + ... */
        {"Mul", 0.7978845608028654, 0}, /* sqrt(2 / pi) * ... */
        {"Tanh", NAN, 0},
        {"Add", 1.0, 0},         /* 1 + tanh */
        {"Mul", NAN, 1},         /* x * (1 + tanh) */
        {"Mul", 0.5, 0},         /* 0.5 * ... */
    };
    for (size_t i = 0; i < sizeof chain / sizeof chain[0]; i++) {
        int j;
        const Onnx__NodeProto *next = sole_reader(c, s[k - 1]->output[0], &j);
        int ok = next && (!strcmp(chain[i].op, "Tanh") ? is_step(c, next, "Tanh", s[k - 1]->output[0], NAN, NULL)
                          : is_step(c, next, chain[i].op, s[k - 1]->output[0], chain[i].v, chain[i].other_x ? x : NULL));
        if (!ok) return 0;
        s[k] = next, idx[k++] = j;
    }
    return gelu_out(c, vx, s[k - 1], idx + 1, k - 1);
}

/* The reader of x (not a graph output) that is Pow(x, 3) and comes after
 * node `at`, or NULL. */
static const Onnx__NodeProto *cube_of(ox_ctx *c, const char *x, int at, int *index)
{
    ox_val *v = ox_val_get(c, x);
    int i = v ? (int)(v - c->vals) : -1;
    for (int u = i >= 0 ? c->use_start[i] : 0; i >= 0 && u < c->use_start[i + 1]; u++) {
        const Onnx__NodeProto *n = c->graph->node[c->uses[u]];
        if (c->uses[u] > at && n->n_output == 1 && !strcmp(n->input[0], x) && is_step(c, n, "Pow", x, 3.0, NULL))
            return *index = c->uses[u], n;
    }
    return NULL;
}

/* GELU, tanh form as transformers' NewGELUActivation (GPT-2's gelu_new) and
 * torch's exporters write it: 0.5 * x first, then
 *   h * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * Pow(x, 3))))
 * anchored at Mul(x, 0.5), whose one reader is the last Mul.  Every node of
 * the chain comes after the anchor (else nothing matches).  Returns 1 when
 * emitted. */
static int gelu_half_first(ox_ctx *c, int at)
{
    const Onnx__NodeProto *n = c->graph->node[at];
    if (strcmp(n->op_type, "Mul") || ox_n_in(n) != 2 || n->n_output != 1) return 0;
    ox_val *a = ox_val_get(c, n->input[0]);
    const char *x = a && ox_is_const(a) ? n->input[1] : n->input[0];
    ox_val *vx = ox_val_get(c, x);
    int idx[8], k = 0, j;
    if (!vx || ox_is_const(vx) || !ox_type_is_float(vx->type) || !is_step(c, n, "Mul", x, 0.5, NULL)) return 0;
    const Onnx__NodeProto *s[8], *cube = cube_of(c, x, at, &j), *last = sole_reader(c, n->output[0], &idx[7]);
    if (!cube || !last || idx[7] <= at) return 0;
    s[k] = cube, idx[k++] = j;
    static const struct { const char *op; double v; int other; } chain[] = {
        {"Mul", 0.044715, 0}, {"Add", NAN, 1}, {"Mul", 0.7978845608028654, 0}, {"Tanh", NAN, 0}, {"Add", 1.0, 0}, {"Mul", NAN, 2},
    };
    for (size_t i = 0; i < sizeof chain / sizeof chain[0]; i++) {
        const Onnx__NodeProto *next = sole_reader(c, s[k - 1]->output[0], &j);
        const char *other = chain[i].other == 1 ? x : chain[i].other == 2 ? n->output[0] : NULL;
        if (!next || j <= at || !is_step(c, next, chain[i].op, s[k - 1]->output[0], chain[i].v, other)) return 0;
        s[k] = next, idx[k++] = j;
    }
    if (s[k - 1] != last) return 0;
    return gelu_out(c, vx, s[k - 1], idx, k);
}

int ox_patterns(ox_ctx *c, int at)
{
    int r = gelu_tanh(c, at);
    return r ? r : gelu_half_first(c, at);
}
