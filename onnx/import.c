/* import.c - the ONNX reader's driver: file, checks, params, nodes, loss.
 *
 * An import (onnx.h) goes in steps, each a function below:
 *   read      the file (or bytes) unpacked by protobuf-c into a ModelProto;
 *   check     the opset (13-20 for the default domain), every node's op
 *             against the table (onnx/ops.def: type, opset, input and output
 *             counts, attributes), names;
 *   values    initializers and graph inputs enter the value table; inputs
 *             get static shapes (symbolic dims from `dims`);
 *   loss      the value the loss is (the graph's scalar output, or the OUT
 *             of `loss`), and which initializers the loss depends on
 *             differentiably (each op's differentiable inputs: the table's
 *             diff column): those become params, the rest constants;
 *   layers    repeated blocks from scoped names (onnx/layers.c);
 *   nodes     in order: folded when every input is constant and the op has
 *             a folder, else emitted as carve ops;
 *   finish    the appended loss or the outputs, the notes.
 * The first error stops the import; the message names the file and, inside
 * a node, the node, its op and the opset.
 */
#include "onnx/rows.h"
#include "onnx/steps.h"
#include "onnx/views.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* protobuf holds at most 2 GB in one message */
#define OX_MAX_FILE ((size_t)2 << 30)

int onnx_is_onnx_path(const char *path)
{
    size_t n = path ? strlen(path) : 0;
    return n > 5 && !strcmp(path + n - 5, ".onnx");
}

/* ---- check ----------------------------------------------------------------------- */

/* Ops whose output shape depends on the values of their input. */
static const char *const data_shaped_ops[] = {"NonZero", "Unique", "Compress", "NonMaxSuppression"};

/* The module a node belongs to, for messages: its scoped name's path
 * ("/model/layers.0/block_sparse_moe/NonZero": model.layers.0.block_sparse_moe)
 * or its deepest module scope (torch 2's metadata); "" when neither. */
static void node_module(const Onnx__NodeProto *n, char *out, size_t len)
{
    out[0] = 0;
    const char *name = n->name ? n->name : "", *last = strrchr(name, '/');
    if (name[0] == '/' && last && last > name) {
        snprintf(out, len, "%.*s", (int)(last - name - 1), name + 1);
        for (char *p = out; *p; p++)
            if (*p == '/') *p = '.';
        return;
    }
    for (size_t i = 0; i < n->n_metadata_props; i++) {
        const Onnx__StringStringEntryProto *e = n->metadata_props[i];
        if (!e->key || !e->value || strcmp(e->key, "pkg.torch.onnx.name_scopes")) continue;
        const char *q = strrchr(e->value, '\''), *p = q && q > e->value ? q - 1 : NULL;
        while (p && p > e->value && *p != '\'') p--;
        if (p && q > p + 1) snprintf(out, len, "%.*s", (int)(q - p - 1), p + 1);
    }
}

/* A node of a data-shaped op reading a value the graph's inputs reach
 * (a MoE router's NonZero): refused before anything else, naming its
 * module.  Values reached from initializers alone fold, so they pass. */
static int check_static_shapes(ox_ctx *c)
{
    const Onnx__GraphProto *gp = c->graph;
    unsigned char *data = ir_xcalloc((size_t)c->n_vals + 1, 1); /* per val: reached from the graph's inputs */
    int rc = 0;
    for (size_t i = 0; i < gp->n_input; i++) {
        ox_val *v = gp->input[i]->name ? ox_val_get(c, gp->input[i]->name) : NULL;
        if (v && v->kind != OX_INIT) data[v - c->vals] = 1;
    }
    for (size_t i = 0; i < gp->n_node && !rc; i++) {
        const Onnx__NodeProto *n = c->node = gp->node[i];
        int reached = 0;
        for (size_t k = 0; k < n->n_input; k++) {
            ox_val *v = n->input[k] && n->input[k][0] ? ox_val_get(c, n->input[k]) : NULL;
            reached |= v && data[v - c->vals];
        }
        for (size_t k = 0; reached && n->op_type && k < sizeof data_shaped_ops / sizeof data_shaped_ops[0]; k++) {
            if (strcmp(n->op_type, data_shaped_ops[k])) continue;
            char mod[256];
            node_module(n, mod, sizeof mod);
            rc = ox_fail(c, "a data-dependent shape (its output's size depends on the values of its input%s%.200s%s): carve "
                            "partitions static shapes; route the experts with a fixed capacity (docs/onnx.md, \"Mixture of "
                            "experts\")", mod[0] ? ", in module '" : "", mod, mod[0] ? "'" : "");
        }
        for (size_t k = 0; reached && k < n->n_output; k++) {
            ox_val *v = n->output[k] && n->output[k][0] ? ox_val_get(c, n->output[k]) : NULL;
            if (v) data[v - c->vals] = 1;
        }
    }
    free(data);
    if (!rc) c->node = NULL;
    return rc;
}

/* The graph and the opset of the default domain, noted in info. */
static int check_model_opset(ox_ctx *c)
{
    Onnx__ModelProto *m = c->model;
    if (!m->graph) return ox_fail(c, "not an ONNX model (no graph)");
    c->graph = m->graph;
    int lo = c->opt->opset_lo > 0 ? c->opt->opset_lo : ONNX_OPSET_MIN;
    c->opset = -1;
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        if (!o->domain || !o->domain[0] || !strcmp(o->domain, "ai.onnx")) c->opset = o->has_version ? (int)o->version : -1;
    }
    if (c->info) {
        c->info->opset = c->opset;
        c->info->ir_version = m->has_ir_version ? m->ir_version : 0;
        c->info->nodes = (int)c->graph->n_node;
    }
    if (c->opset < 0) return ox_fail(c, "the model declares no opset of the default ONNX domain");
    if (c->opset < lo || c->opset > ONNX_OPSET_MAX)
        return ox_fail(c, "opset %d is outside %d-%d, the opsets carve reads (export with opset_version=%d or %d)", c->opset,
                       lo, ONNX_OPSET_MAX, ONNX_OPSET_MIN + 1, ONNX_OPSET_MAX);
    for (size_t i = 0; i < c->graph->n_node && c->info; i++) {
        const char *op = c->graph->node[i]->op_type;
        char *t = c->info->op_types;
        size_t len = op ? strlen(op) : 0, k = strlen(t);
        const char *p = t;
        int seen = 0;
        while (len && (p = strstr(p, op)))
            seen |= (p == t || p[-1] == ' ') && (p[len] == ' ' || !p[len]), p += len;
        if (len && !seen && k + len + 2 < sizeof c->info->op_types) snprintf(t + k, sizeof c->info->op_types - k, "%s%s", k ? " " : "", op);
    }
    return 0;
}

/* Every node's op against the table: type, opset, counts, attributes. */
static int check_model(ox_ctx *c)
{
    for (size_t i = 0; i < c->graph->n_node; i++) {
        const Onnx__NodeProto *n = c->node = c->graph->node[i];
        if (!n->op_type || !n->op_type[0]) return ox_fail(c, "a node without an op type");
        if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx"))
            return ox_fail(c, "op of domain '%.60s': carve reads the default ONNX domain only", n->domain);
        int other = 0;
        const ox_row *r = ox_row_find(n->op_type, c->opset, &other);
        if (!r) {
            if (other) return ox_fail(c, "this version of %.60s is not supported (carve reads it at other opsets)", n->op_type);
            return ox_fail(c, "unsupported op %.60s (docs/onnx.md lists the ops carve reads)", n->op_type);
        }
        int nin = ox_n_in(n);
        if (nin < r->in_min || nin > r->in_max)
            return ox_fail(c, "%d inputs (%.60s takes %d to %d)", nin, n->op_type, r->in_min, r->in_max);
        if ((int)n->n_output < 1 || (int)n->n_output > r->out_max)
            return ox_fail(c, "%zu outputs (%.60s makes at most %d)", n->n_output, n->op_type, r->out_max);
        for (size_t a = 0; a < n->n_attribute; a++) {
            const char *an = n->attribute[a]->name ? n->attribute[a]->name : "";
            int known = ox_row_reads_attr(r, an);
            if (!known) return ox_fail(c, "attribute '%.60s' is not supported", an);
            if (n->attribute[a]->ref_attr_name && n->attribute[a]->ref_attr_name[0])
                return ox_fail(c, "attribute '%.60s' refers to a function's attribute", an);
        }
    }
    c->node = NULL;
    return 0;
}

/* ---- values: initializers and inputs -------------------------------------------------- */

/* The value of symbolic dim `sym` from opt->dims ("batch=8,seq=128"), or -1. */
static int64_t dim_value(ox_ctx *c, const char *sym)
{
    const char *s = c->opt->dims;
    size_t len = strlen(sym);
    while (s && *s) {
        const char *eq = strchr(s, '='), *end = strchr(s, ',');
        if (!end) end = s + strlen(s);
        if (eq && eq < end && (size_t)(eq - s) == len && !strncmp(s, sym, len)) {
            char *e;
            long long v = strtoll(eq + 1, &e, 10);
            return e == end && v > 0 ? v : 0;
        }
        s = *end ? end + 1 : end;
    }
    return -1;
}

/* 1 when a graph input of the file has the symbolic dim name[0..len). */
static int has_symbolic_dim(const ox_ctx *c, const char *name, size_t len)
{
    for (size_t i = 0; i < c->graph->n_input; i++) {
        const Onnx__TypeProto *t = c->graph->input[i]->type;
        const Onnx__TensorShapeProto *sh = t && t->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && t->tensor_type
                                               ? t->tensor_type->shape : NULL;
        for (size_t d = 0; sh && d < sh->n_dim; d++) {
            const char *p = sh->dim[d]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM ? sh->dim[d]->dim_param : NULL;
            if (p && strlen(p) == len && !strncmp(p, name, len)) return 1;
        }
    }
    return 0;
}

/* Checks that every entry of --dim is NAME=N with N positive, names a
 * symbolic dim of the file's inputs, and is given once. */
static int check_dims_option(ox_ctx *c)
{
    const char *s = c->opt->dims;
    while (s && *s) {
        const char *eq = strchr(s, '='), *end = strchr(s, ',');
        if (!end) end = s + strlen(s);
        char *e;
        if (!eq || eq > end || eq == s) return ox_fail(c, "--dim: '%.*s' is not NAME=SIZE", (int)(end - s), s);
        int len = (int)(eq - s);
        errno = 0;
        long long v = strtoll(eq + 1, &e, 10);
        if (e != end || v <= 0 || errno) return ox_fail(c, "--dim: size of '%.*s' must be a positive integer", len, s);
        for (const char *q = c->opt->dims; q < s; q = strchr(q, ',') + 1)
            if (!strncmp(q, s, (size_t)len + 1)) return ox_fail(c, "--dim: '%.*s' is given twice", len, s);
        if (!has_symbolic_dim(c, s, (size_t)len))
            return ox_fail(c, "--dim: the file's inputs have no symbolic dim '%.*s' (a typo? carve show --graph FILE names "
                              "the ones it needs)", len, s);
        s = *end ? end + 1 : end;
    }
    return 0;
}

/* Checks that every glob of --frozen matches an initializer of the file (a
 * glob that matches nothing is a typo that would train what was meant to
 * stay constant). */
static int check_frozen_option(ox_ctx *c)
{
    const char *s = c->opt->frozen;
    char pat[256];
    while (s && *s) {
        const char *end = strchr(s, ',');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        if (len >= sizeof pat) return ox_fail(c, "--frozen: a glob of %zu characters (at most %zu)", len, sizeof pat - 1);
        memcpy(pat, s, len);
        pat[len] = 0;
        int hit = 0;
        for (size_t i = 0; i < c->graph->n_initializer && !hit; i++)
            hit = c->graph->initializer[i]->name && !fnmatch(pat, c->graph->initializer[i]->name, 0);
        if (!hit) return ox_fail(c, "--frozen: '%s' matches no initializer of the file", pat);
        s += len + (end ? 1 : 0);
    }
    return 0;
}

/* A graph input given by value (onnx_options.known) becomes a constant of
 * the type the graph declares (bfloat16 given as its uint16 bits, as numpy
 * holds it, is read as bfloat16). */
static int known_input(ox_ctx *c, ox_val *v, const onnx_tensor *t, int declared)
{
    int bits = declared == OX_BFLOAT16 && t->elem_type == OX_UINT16;
    ox_tensor *x = ox_tensor_new(c, bits ? OX_BFLOAT16 : t->elem_type, t->rank, t->dims);
    if (!x) return -1;
    for (int64_t i = 0; i < t->n; i++) {
        if (bits) {
            uint32_t u = (uint32_t)((const int32_t *)t->data)[i] << 16;
            float f;
            memcpy(&f, &u, 4);
            x->v[i] = f;
        } else x->v[i] = t->is_int ? ((const int32_t *)t->data)[i] : ((const float *)t->data)[i];
    }
    v->kind = OX_CONST;
    v->c = x;
    v->type = x->type;
    return 0;
}

static int add_input(ox_ctx *c, const Onnx__ValueInfoProto *in)
{
    const char *name = in->name;
    int declared = in->type && in->type->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && in->type->tensor_type &&
                   in->type->tensor_type->has_elem_type ? in->type->tensor_type->elem_type : 0;
    for (int k = 0; k < c->opt->n_known; k++)
        if (!strcmp(c->opt->known[k].name, name)) return known_input(c, ox_val_get(c, name), &c->opt->known[k], declared);
    const Onnx__TypeProto *t = in->type;
    if (!t || t->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !t->tensor_type)
        return ox_fail(c, "input '%.120s': not a tensor", name);
    const Onnx__TypeProto__Tensor *tt = t->tensor_type;
    int type = tt->has_elem_type ? tt->elem_type : 0;
    int dt = ox_ir_dtype(type);
    if (dt < 0) return ox_fail(c, "input '%.120s': element type %s is not supported", name, ox_type_name(type));
    if (!tt->shape) return ox_fail(c, "input '%.120s': no shape (carve needs static shapes)", name);
    if (tt->shape->n_dim > IR_MAX_RANK) return ox_fail(c, "input '%.120s': rank %zu (at most %d)", name, tt->shape->n_dim, IR_MAX_RANK);
    int64_t dims[IR_MAX_RANK];
    for (size_t d = 0; d < tt->shape->n_dim; d++) {
        const Onnx__TensorShapeProto__Dimension *dm = tt->shape->dim[d];
        if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && dm->dim_value > 0) {
            dims[d] = dm->dim_value;
            continue;
        }
        if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && dm->dim_param && dm->dim_param[0]) {
            int64_t v = dim_value(c, dm->dim_param);
            if (v > 0) {
                dims[d] = v;
                continue;
            }
            return ox_fail(c, "input '%.120s': dim %zu is symbolic ('%.60s'): give its size with --dim %.60s=N", name, d,
                           dm->dim_param, dm->dim_param);
        }
        if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
            return ox_fail(c, "input '%.120s': dim %zu is %lld", name, d, (long long)dm->dim_value);
        return ox_fail(c, "input '%.120s': dim %zu has no size (carve needs static shapes: export with fixed shapes)", name, d);
    }
    char buf[256];
    if (!ox_is_printable(name)) return ox_fail(c, "input name with non-printable bytes");
    int x = ox_arg_at_layer(c, -1, ox_fresh_name(c, name, buf, sizeof buf), IR_INPUT, (ir_dtype)dt, (int)tt->shape->n_dim, dims);
    if (x < 0) return ox_check_ir(c);
    ox_val *v = ox_val_get(c, name);
    v->kind = OX_IR;
    v->ir = x;
    v->type = type;
    if (c->info) c->info->inputs++;
    return 0;
}

/* 1 when name matches one of the comma-separated globs of --frozen. */
static int frozen(ox_ctx *c, const char *name)
{
    const char *s = c->opt->frozen;
    char pat[256];
    while (s && *s) {
        const char *end = strchr(s, ',');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        if (len < sizeof pat) {
            memcpy(pat, s, len);
            pat[len] = 0;
            if (!fnmatch(pat, name, 0)) return 1;
        }
        s += len + (end ? 1 : 0);
    }
    return 0;
}

static int add_values(ox_ctx *c)
{
    const Onnx__GraphProto *gp = c->graph;
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *t = gp->initializer[i];
        if (!t->name || !t->name[0]) return ox_fail(c, "initializer %zu has no name", i);
        if (ox_val_get(c, t->name)) return ox_fail(c, "two initializers are named '%.120s'", t->name);
        if (!ox_is_printable(t->name)) return ox_fail(c, "initializer %zu: name with non-printable bytes", i);
        ox_val *v = ox_val_put(c, t->name);
        v->kind = OX_INIT;
        v->init = (int)i;
        v->type = t->has_data_type ? t->data_type : 0;
    }
    for (size_t i = 0; i < gp->n_input; i++) {
        const char *name = gp->input[i]->name;
        if (!name || !name[0]) return ox_fail(c, "graph input %zu has no name", i);
        ox_val *v = ox_val_get(c, name);
        if (v && v->kind == OX_INIT) continue; /* an initializer listed as an input too */
        if (v) return ox_fail(c, "two graph inputs are named '%.120s'", name);
        ox_val_put(c, name);
    }
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *n = c->node = gp->node[i];
        for (size_t k = 0; k < n->n_output; k++) {
            if (!n->output[k] || !n->output[k][0]) continue;
            if (ox_val_get(c, n->output[k])) return ox_fail(c, "output '%.120s' is made twice", n->output[k]);
            ox_val_put(c, n->output[k]);
        }
    }
    c->node = NULL;
    return 0;
}

/* ---- the loss and the params ----------------------------------------------------------- */

/* The name of the value the loss is computed from, or NULL with an error. */
static const char *loss_source(ox_ctx *c, char *kind, size_t klen, char *second, size_t slen)
{
    const Onnx__GraphProto *gp = c->graph;
    kind[0] = second[0] = 0;
    if (c->opt->loss) {
        const char *s = c->opt->loss, *colon = strchr(s, ':');
        if (!colon || colon == s || (size_t)(colon - s) >= klen)
            return ox_fail(c, "--loss '%.80s': expected cross_entropy:OUTPUT[,LABELS] or mse:OUTPUT[,TARGET]", s), NULL;
        memcpy(kind, s, (size_t)(colon - s));
        kind[colon - s] = 0;
        if (strcmp(kind, "cross_entropy") && strcmp(kind, "mse"))
            return ox_fail(c, "--loss: unknown kind '%.40s' (cross_entropy or mse)", kind), NULL;
        const char *out = colon + 1, *comma = strchr(out, ',');
        static char outname[256];
        size_t len = comma ? (size_t)(comma - out) : strlen(out);
        if (!len || len >= sizeof outname) return ox_fail(c, "--loss '%.80s': no output named", s), NULL;
        memcpy(outname, out, len);
        outname[len] = 0;
        snprintf(second, slen, "%s", comma ? comma + 1 : strcmp(kind, "mse") ? "labels" : "target");
        if (!ox_val_get(c, outname)) return ox_fail(c, "--loss: the model has no value '%.120s'", outname), NULL;
        return outname;
    }
    for (size_t i = 0; i < gp->n_output; i++) {
        const Onnx__ValueInfoProto *o = gp->output[i];
        const Onnx__TypeProto *t = o->type;
        if (!o->name || !t || t->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !t->tensor_type) continue;
        const Onnx__TypeProto__Tensor *tt = t->tensor_type;
        if (!ox_type_is_float(tt->has_elem_type ? tt->elem_type : 0) || !tt->shape) continue;
        int scalar = 1; /* every dim 1 (a symbolic one is not): the product would overflow on a file's dims */
        for (size_t d = 0; d < tt->shape->n_dim; d++)
            scalar &= tt->shape->dim[d]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
                      tt->shape->dim[d]->dim_value == 1;
        if (scalar) return o->name;
    }
    ox_fail(c, "the graph has no scalar float output to train on: export the module with its loss, or give --loss "
               "cross_entropy:OUTPUT or mse:OUTPUT");
    return NULL;
}

/* 1 when initializer p holds one element: torch 2's exporter lifts every
 * scalar literal (GELU's 0.044715, Pow's exponent 3, a Where's 0) into an
 * initializer; they stay constants (a module's scalar parameter too). */
static int one_element(const Onnx__TensorProto *p)
{
    int one = 1; /* every dim 1 (fuzz_onnx: the product of a file's dims overflowed, undefined behaviour) */
    for (size_t d = 0; d < p->n_dims; d++) one &= p->dims[d] == 1;
    return one;
}

/* 1 when float initializer p holds an element that is not finite in the
 * file (inline f32 data only): an attention mask the exporter wrote as an
 * initializer (-inf above the diagonal, nn.MultiheadAttention's float
 * mask).  No update can train it (an SGD or Adam step of -inf is NaN), so it
 * stays a constant. */
static int not_finite(const Onnx__TensorProto *p)
{
    if (p->data_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT) return 0;
    for (size_t i = 0; i < p->n_float_data; i++)
        if (!isfinite(p->float_data[i])) return 1;
    for (size_t i = 0; p->has_raw_data && i + 4 <= p->raw_data.len; i += 4) {
        uint32_t u = (uint32_t)p->raw_data.data[i] | (uint32_t)p->raw_data.data[i + 1] << 8 |
                     (uint32_t)p->raw_data.data[i + 2] << 16 | (uint32_t)p->raw_data.data[i + 3] << 24;
        if ((u & 0x7f800000u) == 0x7f800000u) return 1; /* an infinity or a NaN */
    }
    return 0;
}

/* Marks what the loss depends on differentiably, then makes params of the
 * float initializers among it (minus --frozen, minus those holding
 * non-finite elements: not_finite). */
static int mark_params(ox_ctx *c, const char *const *roots, int n_roots)
{
    for (int i = 0; i < n_roots; i++) {
        ox_val *v = ox_val_get(c, roots[i]);
        if (v) v->needs_grad = 1;
    }
    const Onnx__GraphProto *gp = c->graph;
    for (size_t i = gp->n_node; i-- > 0;) {
        const Onnx__NodeProto *n = gp->node[i];
        int any = 0;
        for (size_t k = 0; k < n->n_output; k++) {
            ox_val *v = n->output[k] && n->output[k][0] ? ox_val_get(c, n->output[k]) : NULL;
            any |= v && v->needs_grad;
        }
        if (!any) continue;
        const ox_row *r = ox_row_find(n->op_type, c->opset, NULL);
        for (size_t k = 0; k < n->n_input && k < 32; k++) {
            ox_val *v = n->input[k] && n->input[k][0] ? ox_val_get(c, n->input[k]) : NULL;
            if (v && r && (r->diff >> k & 1)) v->needs_grad = 1;
        }
    }
    int frozen_floats = 0, masks = 0;
    char first[128] = "", mask[128] = "";
    for (int i = 0; i < c->n_vals; i++) {
        ox_val *v = &c->vals[i];
        if (v->kind != OX_INIT || !ox_type_is_float(v->type) || !v->needs_grad || one_element(c->graph->initializer[v->init])) continue;
        if (frozen(c, v->name)) {
            if (!frozen_floats++) snprintf(first, sizeof first, "%.100s", v->name);
            continue;
        }
        if (not_finite(c->graph->initializer[v->init])) {
            if (!masks++) snprintf(mask, sizeof mask, "%.100s", v->name);
            continue;
        }
        v->param = 1;
    }
    size_t k = c->info ? strlen(c->info->notes) : 0;
    if (frozen_floats && c->info)
        k += (size_t)snprintf(c->info->notes + k, sizeof c->info->notes - k, "%s%d float initializer%s kept constant by --frozen ('%s'%s)",
                              k ? "; " : "", frozen_floats, frozen_floats > 1 ? "s" : "", first, frozen_floats > 1 ? ", ..." : "");
    if (masks && c->info && k < sizeof c->info->notes)
        snprintf(c->info->notes + k, sizeof c->info->notes - k, "%s%d float initializer%s holding -inf or NaN kept constant (a mask: "
                 "no update trains it; '%s'%s)", k ? "; " : "", masks, masks > 1 ? "s" : "", mask, masks > 1 ? ", ..." : "");
    return 0;
}

/* ---- the appended loss ------------------------------------------------------------------- */

/* The input `name` (an existing graph input, or a new one of `rank, dims`). */
static int loss_input(ox_ctx *c, const char *name, ir_dtype dt, int rank, const int64_t *dims, double ids)
{
    ox_val *v = ox_val_get(c, name);
    if (v) {
        if (v->kind != OX_IR || c->g->values[v->ir].producer >= 0) return ox_fail(c, "--loss: '%.120s' is not a graph input", name);
        const ir_value *x = &c->g->values[v->ir];
        if (x->dtype != dt || x->rank != rank || memcmp(x->dims, dims, sizeof(int64_t) * (size_t)rank))
            return ox_fail(c, "--loss: input '%.120s' has not the shape and type the loss needs", name);
        return v->ir;
    }
    if (ir_find(c->g, name) >= 0) return ox_fail(c, "--loss: '%.120s' names a value of the graph", name);
    int x = ox_arg_at_layer(c, -1, name, IR_INPUT, dt, rank, dims);
    if (x >= 0 && ids > 0) ir_set_init(c->g, x, IR_INIT_IDS, ids);
    return x < 0 ? ox_check_ir(c) : x;
}

static int append_loss(ox_ctx *c, const char *kind, const char *out, const char *second)
{
    ox_val *v = ox_val_get(c, out);
    int x = v ? ox_ir(c, v) : -1;
    if (x < 0) return -1;
    const ir_value *xv = &c->g->values[x];
    int r = xv->rank;
    int64_t dims[IR_MAX_RANK], all[IR_MAX_RANK], n = 1;
    memcpy(dims, xv->dims, sizeof dims);
    for (int i = 0; i < r; i++) all[i] = i, n *= dims[i];
    ir_set_layer(c->g, -1);
    int loss;
    if (!strcmp(kind, "mse")) {
        int t = loss_input(c, second, IR_F32, r, dims, 0);
        if (t < 0) return -1;
        int d = ir_binary(c->g, IR_OP_SUB, x, t);
        loss = ir_scale(c->g, ir_reduce(c->g, IR_OP_REDUCE_SUM, ir_binary(c->g, IR_OP_MUL, d, d), r, all), 1.0 / (double)n);
    } else {
        if (r < 1) return ox_fail(c, "--loss cross_entropy: '%.120s' is a scalar, not logits", out);
        int labels = loss_input(c, second, IR_I32, r - 1, dims, (double)dims[r - 1]);
        if (labels < 0) return -1;
        int lead = r - 1;
        int64_t keep[IR_MAX_RANK];
        for (int i = 0; i < lead; i++) keep[i] = i;
        int64_t last = r - 1;
        int mx = ir_unary(c->g, IR_OP_STOP_GRAD, ir_reduce(c->g, IR_OP_REDUCE_MAX, x, 1, &last));
        int z = ir_binary(c->g, IR_OP_SUB, x, ir_broadcast(c->g, mx, r, dims, keep));
        int lse = ir_unary(c->g, IR_OP_LOG, ir_reduce(c->g, IR_OP_REDUCE_SUM, ir_unary(c->g, IR_OP_EXP, z), 1, &last));
        int picked = ir_reduce(c->g, IR_OP_REDUCE_SUM, ir_binary(c->g, IR_OP_MUL, z, ir_one_hot(c->g, labels, dims[r - 1])), 1, &last);
        int nll = ir_binary(c->g, IR_OP_SUB, lse, picked);
        loss = lead ? ir_reduce(c->g, IR_OP_REDUCE_SUM, nll, lead, all) : nll;
        loss = ir_scale(c->g, loss, 1.0 / (double)(n / dims[r - 1]));
    }
    if (loss < 0) return ox_check_ir(c);
    ir_rename(c->g, loss, ir_find(c->g, "loss") < 0 ? "loss" : "carve.loss");
    ir_set_loss(c->g, loss);
    return ox_check_ir(c);
}

/* ---- nodes --------------------------------------------------------------------------------- */

static int import_nodes(ox_ctx *c)
{
    const Onnx__GraphProto *gp = c->graph;
    /* Constant nodes first (ops that read nothing): a pattern anchored
     * earlier sees the constants of its chain */
    for (size_t i = 0; i < gp->n_node && !c->failed; i++) {
        const Onnx__NodeProto *n = c->node = gp->node[i];
        c->row = ox_row_find(n->op_type, c->opset, NULL);
        if (c->row->in_max > 0) continue;
        if (ox_fold_node(c, n) < 0) return -1;
        if (c->info) c->info->folded++;
        c->done[i] = 1;
        ox_release_inputs(c, n);
    }
    for (size_t i = 0; i < gp->n_node && !c->failed; i++) {
        const Onnx__NodeProto *n = c->node = gp->node[i];
        if (c->done[i]) {
            if (ox_row_find(n->op_type, c->opset, NULL)->in_max > 0) ox_release_inputs(c, n); /* a pattern's node */
            continue;
        }
        c->row = ox_row_find(n->op_type, c->opset, NULL);
        int all_const = 1, nin = ox_n_in(n);
        for (int k = 0; k < nin; k++) {
            ox_val *v = ox_in(c, n, k);
            if (!v && n->input[k] && n->input[k][0]) return -1;
            if (v && !ox_is_const(v)) all_const = 0;
        }
        ir_set_layer(c->g, c->node_layer[i]);
        /* an Expand of a constant past what carve folds (a causal mask expanded to a big batch) runs as a broadcast */
        if (c->row->fold && (all_const || !c->row->emit) && !(all_const && c->row->emit && ox_fold_too_big(c, n))) {
            if (ox_fold_node(c, n) < 0) return -1;
            if (c->info) c->info->folded++;
            ox_release_inputs(c, n);
            continue;
        }
        if (!c->row->emit) return ox_fail(c, "its inputs must be constants (carve folds %.60s, it does not run it)", n->op_type);
        int pr = ox_patterns(c, (int)i);
        if (pr < 0) return ox_check_ir(c) < 0 ? -1 : (c->failed ? -1 : ox_fail(c, "not imported"));
        if (pr) {
            ox_release_inputs(c, n);
            continue;
        }
        if (c->row->emit(c, n) < 0) return ox_check_ir(c) < 0 ? -1 : (c->failed ? -1 : ox_fail(c, "not imported"));
        ox_release_inputs(c, n);
        for (size_t k = 0; k < n->n_output; k++) {
            ox_val *v = n->output[k] && n->output[k][0] ? ox_val_get(c, n->output[k]) : NULL;
            if (v && v->kind == OX_UNSET && v->needs_grad) return ox_fail(c, "output %zu is not made", k);
        }
    }
    c->node = NULL;
    return c->failed ? -1 : 0;
}

static int finish_outputs(ox_ctx *c)
{
    for (size_t i = 0; i < c->graph->n_output; i++) {
        const char *name = c->graph->output[i]->name;
        ox_val *v = name ? ox_val_get(c, name) : NULL;
        if (!v || v->kind == OX_UNSET) return ox_fail(c, "graph output '%.120s' is not made", name ? name : "");
        int x = ox_ir(c, v);
        if (x < 0) return -1;
        if (c->g->values[x].producer < 0 || c->g->values[x].role != IR_INTERMEDIATE) {
            /* an argument as an output: a copy, so the output is an op's result */
            x = ir_reshape(c->g, x, c->g->values[x].rank, c->g->values[x].dims);
        }
        ir_add_output(c->g, x, -1);
        if (ox_check_ir(c) < 0) return -1;
    }
    return 0;
}

static int finish_loss(ox_ctx *c, const char *src, const char *kind, const char *second)
{
    if (kind[0]) return append_loss(c, kind, src, second);
    ox_val *v = ox_val_get(c, src);
    if (!v || v->kind != OX_IR) return ox_fail(c, "the loss '%.120s' does not depend on any param or input", src);
    int x = ox_ir(c, v);
    if (x < 0) return -1;
    if (c->g->values[x].rank > 0 && (x = ox_ir_reshape(c, x, 0, NULL)) < 0) return -1;
    if (c->g->values[x].producer < 0) return ox_fail(c, "the loss '%.120s' is a graph input", src);
    if (c->g->values[x].dtype == IR_I32) return ox_fail(c, "the loss '%.120s' is an integer", src);
    ir_set_loss(c->g, x);
    int extra = (int)c->graph->n_output - 1;
    if (extra > 0 && c->info) {
        size_t k = strlen(c->info->notes);
        snprintf(c->info->notes + k, sizeof c->info->notes - k, "%s%d other graph output%s not kept (carve trains on the loss '%.60s')",
                 k ? "; " : "", extra, extra > 1 ? "s" : "", src);
    }
    return ox_check_ir(c);
}

/* Integer inputs a run draws ids for: below what they index (ops.def's ids
 * column: a gather's table rows, a one_hot's depth, a scatter_add's rows),
 * the least where several ops read them, reached through reshapes,
 * transposes, slices and concats.  Others keep [0, 2) (a mask given as
 * integers). */
static void id_bounds(ir_graph *g)
{
    for (int v = 0; v < g->n_values; v++) {
        ir_value *x = &g->values[v];
        if (x->role != IR_INPUT || x->dtype != IR_I32 || x->init != IR_INIT_AUTO) continue;
        double bound = 0;
        unsigned char *seen = ir_xcalloc((size_t)g->n_values + 1, 1);
        seen[v] = 1;
        for (int i = 0; i < g->n_ops; i++) {
            const ir_op *o = &g->ops[i];
            int target, last, k = ir_op_ids(o->kind, &target, &last), reads = 0;
            for (int j = 0; j < o->n_in; j++) reads |= seen[o->in[j]];
            if (!reads) continue;
            if (o->kind == IR_OP_RESHAPE || o->kind == IR_OP_TRANSPOSE || o->kind == IR_OP_SLICE || o->kind == IR_OP_CONCAT)
                seen[o->out] = 1;
            if (k < 0 || !seen[o->in[k]]) continue;
            const ir_value *t = &g->values[target >= 0 ? o->in[target] : o->out];
            double b = (double)t->dims[last ? t->rank - 1 : 0];
            if (b >= 1 && (bound == 0 || b < bound)) bound = b;
        }
        free(seen);
        if (bound >= 1) ir_set_init(g, v, IR_INIT_IDS, bound);
    }
}

static void note_generated(ox_ctx *c)
{
    onnx_info *in = c->info;
    if (!in || !in->generated_names) return;
    size_t k = strlen(in->notes);
    snprintf(in->notes + k, sizeof in->notes - k,
             "%s%d of %d params have names the exporter made (\"onnx::...\": folded or transposed copies of the module's "
             "weights); export with training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False to keep the "
             "state_dict names",
             k ? "; " : "", in->generated_names, in->params);
}

/* The causal masks made on the device (causal_ops: ops on iotas alone)
 * moved to the front of the op list, as carve's builders make theirs: made
 * where a layer first reads them, they would split that layer's attention
 * kernel (a fusing compiler's kernel is a run of adjacent ops). */
static void hoist_masks(ir_graph *g)
{
    uint8_t *on_iota = ir_xcalloc((size_t)g->n_values + 1, 1);
    ir_op *ops = ir_xcalloc((size_t)g->n_ops + 1, sizeof *ops);
    int n = 0, moved = 0;
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        int only = o->kind == IR_OP_IOTA || o->n_in > 0;
        for (int k = 0; k < o->n_in; k++) only &= on_iota[o->in[k]];
        on_iota[o->out] = (uint8_t)only;
        if (only && o->layer < 0) moved |= i != n, ops[n++] = *o; /* a layer's broadcast of it stays in the layer */
    }
    for (int i = 0; i < g->n_ops && moved; i++)
        if (!on_iota[g->ops[i].out] || g->ops[i].layer >= 0) ops[n++] = g->ops[i];
    if (moved) {
        memcpy(g->ops, ops, (size_t)g->n_ops * sizeof *ops);
        for (int i = 0; i < g->n_ops; i++) g->values[g->ops[i].out].producer = i;
    }
    free(ops);
    free(on_iota);
}

/* ---- the whole import ------------------------------------------------------------------------ */

static ir_graph *import_model(ox_ctx *c)
{
    char kind[32], second[256];
    const char *src = NULL;
    if (check_model_opset(c) < 0 || check_dims_option(c) < 0 || check_frozen_option(c) < 0 || add_values(c) < 0 ||
        check_static_shapes(c) < 0 || check_model(c) < 0)
        return NULL;
    const char *name = c->graph->name && c->graph->name[0] && ox_is_printable(c->graph->name) ? c->graph->name : "onnx";
    c->g = ir_new(name);
    for (size_t i = 0; i < c->graph->n_input && !c->failed; i++) {
        ox_val *v = c->graph->input[i]->name ? ox_val_get(c, c->graph->input[i]->name) : NULL;
        if (v && v->kind == OX_UNSET) add_input(c, c->graph->input[i]);
    }
    if (c->failed) return NULL;
    if (c->opt->outputs) {
        const char **roots = ir_xcalloc(c->graph->n_output + 1, sizeof *roots);
        for (size_t i = 0; i < c->graph->n_output; i++) roots[i] = c->graph->output[i]->name;
        mark_params(c, roots, (int)c->graph->n_output);
        free(roots);
    } else {
        if (!(src = loss_source(c, kind, sizeof kind, second, sizeof second))) return NULL;
        mark_params(c, &src, 1);
    }
    ox_layers(c);
    ox_consumers_build(c);
    if (import_nodes(c) < 0) return NULL;
    if (c->opt->outputs ? finish_outputs(c) < 0 : finish_loss(c, src, kind, second) < 0) return NULL;
    if (c->info) c->info->layers = c->g->n_layers;
    if (ox_heads_layout(c) < 0 || ox_fused_projections(c) < 0 || ox_unflatten_rows(c) < 0 ||
        ox_collapse_views(c) < 0 || ox_hoist_epilogues(c) < 0) return NULL;
    hoist_masks(c->g);
    id_bounds(c->g);
    note_generated(c);
    char msg[IR_ERR_LEN];
    if (ir_verify(c->g, msg, sizeof msg) < 0) return ox_fail(c, "the imported graph is not valid: %s", msg), NULL;
    ir_graph *g = c->g;
    c->g = NULL;
    return g;
}

static void ctx_free(ox_ctx *c)
{
    for (int i = 0; i < c->n_vals; i++) {
        if (c->vals[i].kind == OX_CONST) ox_tensor_free(c->vals[i].c);
        free(c->vals[i].lazy);
    }
    free(c->vals);
    free(c->index);
    free(c->shared);
    free(c->node_layer);
    free(c->use_start);
    free(c->uses);
    free(c->is_output);
    free(c->done);
    free(c->remaining);
    if (c->model) onnx__model_proto__free_unpacked(c->model, NULL);
    if (c->g) ir_free(c->g);
}

/* Sets up c for one import. */
static void ctx_init(ox_ctx *c, const char *path, const char *dir, const onnx_options *o, onnx_info *info, char *err,
                     size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->path = path;
    c->dir = dir;
    c->opt = o;
    c->info = info;
    c->err = err;
    c->errlen = errlen;
    if (info) memset(info, 0, sizeof *info);
    if (err && errlen) err[0] = 0;
}

/* The ModelProto in b[0..n) into c->model (NULL when it does not parse),
 * its nesting checked first (onnx/depth.c): 0, or -1 with a message. */
static int unpack_model(ox_ctx *c, const uint8_t *b, size_t n)
{
    if (ox_proto_depth(&onnx__model_proto__descriptor, b, n) > OX_MAX_DEPTH)
        return ox_fail(c, "messages nested more than %d deep (a chain of sequence or map types, or of subgraphs): refused "
                          "before they are read", OX_MAX_DEPTH);
    c->model = onnx__model_proto__unpack(NULL, n, b);
    return 0;
}

/* Imports c->model (NULL: the bytes did not parse), frees c, and prefixes a
 * message with the file's name. */
static ir_graph *import_unpacked(ox_ctx *c)
{
    ir_graph *g = NULL;
    if (!c->model) ox_fail(c, "not an ONNX model (the protobuf does not parse as a ModelProto: truncated or corrupt)");
    else g = import_model(c);
    ctx_free(c);
    if (!g && c->err && c->errlen) {
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "%s", c->err[0] ? c->err : "import failed");
        snprintf(c->err, c->errlen, "%s: %s", c->path, tmp);
    }
    return g;
}

ir_graph *onnx_import_bytes(const void *data, size_t n, const char *name, const char *dir, const onnx_options *o,
                            onnx_info *info, char *err, size_t errlen)
{
    static const onnx_options none;
    ox_ctx c;
    ctx_init(&c, name ? name : "model", dir, o ? o : &none, info, err, errlen);
    unpack_model(&c, data, n);
    return import_unpacked(&c);
}

ir_graph *onnx_import(const char *path, const onnx_options *o, onnx_info *info, char *err, size_t errlen)
{
    char why[160];
    size_t n;
    char *buf = ir_read_input(path, OX_MAX_FILE, &n, why, sizeof why);
    if (!buf && !strncmp(why, "larger than", 11))
        return ir_errf(err, errlen, "%s: more than the 2 GiB a protobuf holds (weights beyond go in external data)", path), NULL;
    if (!buf) return ir_errf(err, errlen, "%s: cannot open: %s", path, why), NULL;
    char dir[4096];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash == path ? 1 : slash - path) : 1, slash ? path : ".");
    static const onnx_options none;
    ox_ctx c;
    ctx_init(&c, path, dir, o ? o : &none, info, err, errlen);
    /* unpack copies what it keeps: the file's bytes go before the import runs */
    unpack_model(&c, (const uint8_t *)buf, n);
    free(buf);
    return import_unpacked(&c);
}

int onnx_load_weights(const char *path, const onnx_options *o, ir_graph *g, char *err, size_t errlen)
{
    onnx_options w = o ? *o : (onnx_options){0};
    w.weights = 1;
    ir_graph *full = onnx_import(path, &w, NULL, err, errlen);
    if (!full) return -1;
    int missing = 0;
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role != IR_PARAM || ir_data(g, v)) continue;
        int f = ir_find(full, x->name);
        missing += f < 0 || !ir_data(full, f) || ir_numel(&full->values[f]) != ir_numel(x);
    }
    if (missing) {
        ir_free(full);
        return ir_errf(err, errlen, "%s: %d params of the graph are not in the file (was it imported from another?)", path, missing);
    }
    /* the params' (and constants') elements, shared by name */
    ir_data_share(g, full);
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].role == IR_PARAM && ir_data(g, v)) ir_set_init(g, v, IR_INIT_DATA, 0);
    ir_free(full);
    return 0;
}
