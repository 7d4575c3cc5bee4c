/* rows.h - the ONNX reader's third room: the op table and the functions its
 * rows name (not part of the API; context.h says how the rooms are layered).
 *
 * One row of onnx/ops.def per op version says everything the reader does
 * with a node of it: its counts and attributes (checked before any node is
 * read), which inputs carry a gradient, the emitter that makes carve ops of
 * it, the folder that evaluates it at import, the carve op the emitter
 * applies and the scalar function the folder applies.  No emitter or folder
 * asks which op it was called for: what differs between the ops one emitter
 * serves is a column of the row (c->row).
 */
#ifndef CARVE_ONNX_ROWS_H
#define CARVE_ONNX_ROWS_H

#include "onnx/build.h"

/* What a scalar function reads besides its operands. */
typedef struct ox_scalar_arg {
    double alpha;           /* LeakyRelu's and Elu's alpha */
    int is_int;             /* the operands are integers (Div truncates, Mod of 0 is 0) */
    int fmod;               /* Mod's fmod attribute */
} ox_scalar_arg;

typedef int (*ox_emit_fn)(ox_ctx *c, const Onnx__NodeProto *n);
typedef int (*ox_fold_fn)(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out);
/* An element of a folded result: f(a) for one input, f(a, b) for two, the
 * accumulator f(acc, x) for a reduction or a variadic op. */
typedef double (*ox_scalar_fn)(double a, double b, const ox_scalar_arg *p);

/* every emitter, folder and scalar function ops.def names (emit_none,
 * fold_none, sc_none: no function) */
#define X(op, since, until, in_min, in_max, out_max, diff, attrs, emit, fold, ir, scalar)  \
    int emit_##emit(ox_ctx *c, const Onnx__NodeProto *n);                                 \
    int fold_##fold(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out); \
    double sc_##scalar(double a, double b, const ox_scalar_arg *p);
#include "onnx/ops.def"
#undef X

struct ox_row {
    const char *op;
    int since, until;       /* opsets whose version of the op this row implements */
    int in_min, in_max, out_max;
    unsigned diff;          /* bit k: the loss's gradient flows to input k */
    const char *attrs;      /* attributes it reads, space-separated (NAME=DEFAULT for some) */
    ox_emit_fn emit;        /* NULL: only folded (its inputs must be constant) */
    ox_fold_fn fold;        /* NULL: never folded */
    ir_opkind ir;           /* the carve op its emitter applies (IR_N_OPS: none) */
    ox_scalar_fn scalar;    /* the function its folder applies to elements (NULL: none) */
};
/* The row of op type `op` at opset `opset`, or NULL (*other_versions set
 * when rows exist for other opsets). */
const ox_row *ox_row_find(const char *op, int opset, int *other_versions);
/* Every op type of the table, space-separated (docs and messages). */
void ox_ops_list(char *buf, size_t n);
/* 1 when `name` is an attribute the row reads. */
static inline int ox_row_reads_attr(const ox_row *r, const char *name) { return ox_attr_listed(r->attrs, name) != NULL; }
/* Float attribute `name` of node n, else the default its row gives
 * ("alpha=0.01"), else 0. */
static inline double ox_attr_float_row(const ox_ctx *c, const Onnx__NodeProto *n, const char *name)
{
    return ox_attr_float_listed(n, name, c->row ? c->row->attrs : NULL);
}

/* ---- folding (fold.c) --------------------------------------------------------- */
/* Evaluates node n (every input constant) with its row's folder. */
int ox_fold_node(ox_ctx *c, const Onnx__NodeProto *n);
/* 1 when node n (its row's) folded would make a constant past what carve
 * folds and its row can run it instead: an Expand of a constant (a causal
 * mask expanded to a big batch becomes a broadcast, never held). */
int ox_fold_too_big(ox_ctx *c, const Onnx__NodeProto *n);

/* ---- patterns (patterns.c) --------------------------------------------------- */
/* Builds the readers of every value (before the nodes are imported). */
void ox_consumers_build(ox_ctx *c);
/* Tries the patterns anchored at node `at`: 1 when one matched (its nodes
 * imported), 0 when none, -1 on error. */
int ox_patterns(ox_ctx *c, int at);
/* Node n has been imported: a constant input no later node reads (and no
 * graph output) is freed, so a model's per-layer masks and tables are not
 * all held at once. */
void ox_release_inputs(ox_ctx *c, const Onnx__NodeProto *n);

#endif
