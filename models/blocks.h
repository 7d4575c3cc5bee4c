/* blocks.h - pieces the transformer builders share (gpt.c, llama.c).
 *
 * Each returns a new value id of the graph, or -1 with the error recorded in
 * the graph (sticky errors: a -1 operand gives -1 without a new message).
 */
#ifndef CARVE_MODELS_BLOCKS_H
#define CARVE_MODELS_BLOCKS_H

#include "ir/ir.h"

/* Unary, binary or scalar op k on a (and b), named `name` (NULL: automatic). */
int mb_named(ir_graph *g, const char *name, ir_opkind k, int a, int b, double scalar);
int mb_einsum(ir_graph *g, const char *name, const char *subscripts, int a, int b);
/* Writes "<prefix>.<suffix>" into buf; returns buf. */
const char *mb_cat(char *buf, size_t n, const char *prefix, const char *suffix);
/* A param "<prefix>.<suffix>" of f32[dims] filled by init (AUTO: the default). */
int mb_param(ir_graph *g, const char *prefix, const char *suffix, int rank, const int64_t *dims, ir_init init,
             double arg);
int mb_reduce1(ir_graph *g, ir_opkind k, int x, int64_t dim);
/* Softmax of x over its last dim; the max subtracted first is a constant
 * shift (stop_grad).  Named `name`. */
int mb_softmax(ir_graph *g, int x, const char *name);
/* The causal mask [s,s] (1 where query >= key, named "causal_mask") and its
 * additive bias ((mask - 1) * 1e9, "causal_bias"). */
void mb_causal(ir_graph *g, int64_t s, int *mask, int *bias);
/* scores * mask + bias, mask and bias [s,t] broadcast to the last two dims of
 * scores; named `name`. */
int mb_mask(ir_graph *g, int scores, int mask, int bias, const char *name);
/* Mean cross-entropy of logits [b,s,v] against i32 labels [b,s]; "loss". */
int mb_cross_entropy(ir_graph *g, int logits, int labels);

/* The mixture-of-experts MLP (moe.c) on x [b,s,h]: returns "<prefix>.out"
 * and the layer's load-balancing loss in *aux. */
typedef struct mb_moe_dims {
    int64_t b, s, h, f, experts, topk, capacity; /* capacity: percent of an even share */
} mb_moe_dims;
int mb_moe(ir_graph *g, int x, const char *prefix, const mb_moe_dims *d, int *aux);

#endif
