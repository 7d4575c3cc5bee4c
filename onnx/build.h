/* build.h - the ONNX reader's second room: carve values made from ONNX
 * values (not part of the API; context.h says how the rooms are layered).
 *
 * build.c holds the builders every emitter calls (reshape, broadcast to a
 * shape, elementwise ops with numpy broadcasting, reductions, slices), the
 * carve values of params (an initializer the loss depends on) and of
 * constants (a `constant` op for a splat, a const argument with its
 * elements otherwise, a causal mask made on the device), and the outputs of
 * a node.  lazy.c holds the values not made yet (views and linears) and
 * ox_ir, which makes any value's carve value when a reader needs it.
 */
#ifndef CARVE_ONNX_BUILD_H
#define CARVE_ONNX_BUILD_H

#include "onnx/context.h"

/* ---- carve values of values (build.c; ox_ir: lazy.c) -------------------------- */
/* The carve value of v: makes lazy values, params, const arguments and
 * constant ops as needed (lazy.c). */
int ox_ir(ox_ctx *c, ox_val *v);
/* Output k of the node becomes carve value `ir` of ONNX type `type`
 * (named after the output when it is the node's last value made). */
int ox_out_ir(ox_ctx *c, const Onnx__NodeProto *n, int k, int ir, int type);
/* Output k of the node becomes a constant (taken). */
int ox_out_const(ox_ctx *c, const Onnx__NodeProto *n, int k, ox_tensor *t);
/* A carve value for a constant tensor: a constant op for a splat, else a
 * const argument with its elements attached (one per contents). */
int ox_ir_of_tensor(ox_ctx *c, const ox_tensor *t);

/* The carve value of v when it is not lazy (a carve value already, a param
 * made on first use, a constant as ox_ir_of_tensor makes it). */
int ox_made_ir(ox_ctx *c, ox_val *v);
/* A graph argument (param, input, const) made at layer tag `layer`, the
 * builder's own tag left as it was. */
int ox_arg_at_layer(ox_ctx *c, int layer, const char *name, ir_role role, ir_dtype t, int rank, const int64_t *dims);
/* A name for a new value made from ONNX name `base`, unique in the graph:
 * `base` itself, or base#2, base#3... ('%' names are carve's own). */
const char *ox_fresh_name(ox_ctx *c, const char *base, char *buf, size_t n);

/* ---- carve ops (build.c): each checks the builder's error (-1 with it) and
 * takes -1 operands through (an error already recorded) ---------------------- */
/* x broadcast (numpy rules) to shape (rank, dims). */
int ox_ir_broadcast_to(ox_ctx *c, int x, int rank, const int64_t *dims);
int ox_ir_reshape(ox_ctx *c, int x, int rank, const int64_t *dims);
int ox_ir_reduce(ox_ctx *c, ir_opkind k, int x, int n, const int64_t *axes);
/* carve value x (its rank, dims, dtype) */
const ir_value *ox_irv(ox_ctx *c, int x);
/* a carve value for a scalar constant `v` of shape like x's */
int ox_ir_const_like(ox_ctx *c, int x, double v);
/* x * s (x itself for s = 1) */
int ox_ir_scale(ox_ctx *c, int x, double s);
int ox_ir_binary(ox_ctx *c, ir_opkind k, int a, int b);
int ox_ir_unary(ox_ctx *c, ir_opkind k, int x);
int ox_ir_add_scalar(ox_ctx *c, int x, double s);
/* x[start:start+len] along axis (x itself when that is all of it) */
int ox_ir_slice(ox_ctx *c, int x, int axis, int64_t start, int64_t len);
int ox_ir_transpose(ox_ctx *c, int x, const int64_t *perm);

/* ---- lazy values (lazy.c) ------------------------------------------------------ */
/* v's lazy description when it is not made yet, else NULL. */
ox_lazy *ox_lazy_of(const ox_val *v);
/* v as a view of a carve value (itself, for a plain value). */
int ox_view_describe(ox_ctx *c, ox_val *v, ox_lazy *out);
/* Output o becomes the view (or its source, when the view is all of it). */
int ox_view_set(ox_ctx *c, ox_val *o, const ox_lazy *view, int type);
/* 1 when the view is a transpose only. */
int ox_view_is_plain_perm(ox_ctx *c, const ox_lazy *v);
/* v broadcast to (rank, dims), from a view's source where the view only
 * moves size-1 dims. */
int ox_view_broadcast(ox_ctx *c, ox_val *v, int rank, const int64_t *dims);
/* y becomes the lazy linear einsum "sa,sw->so"(a, w). */
void ox_linear_set(ox_val *y, int a, int w, const char *sa, const char *sw, const char *so);
/* z = y + bias (a vector over y's last dim) when y is a lazy linear
 * without one: returns 1 (z lazy), else 0. */
int ox_linear_add_bias(ox_ctx *c, ox_val *z, ox_val *y, int bias);
/* The carve value of z reshaped to (rank, dims) when z is a lazy linear
 * whose last dim the reshape splits: the weight (and bias) reshaped, one
 * einsum.  -2 when it does not apply, -1 on error. */
int ox_linear_split(ox_ctx *c, ox_val *z, int rank, const int64_t *dims);

#endif
