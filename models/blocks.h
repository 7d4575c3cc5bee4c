/* blocks.h - pieces the transformer builders share (gpt.c, vit.c, llama.c,
 * moe.c, t5.c).
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
/* LayerNorm over the last dim of x with params "<prefix>.g" (ones) and
 * "<prefix>.b" (zeros), eps 1e-5; returns "<prefix>.out". */
int mb_layer_norm(ir_graph *g, int x, const char *prefix);
/* RMSNorm over the last dim of x: x * rsqrt(mean(x^2) + eps) * "<prefix>.g";
 * returns "<prefix>.out". */
int mb_rms_norm(ir_graph *g, int x, const char *prefix, double eps);

/* Scaled dot-product attention on projected heads, the part every
 * transformer shares: q [b,s,n,d] with k, v [b,t,n,d], or grouped-query
 * q [b,s,k,g,d] with k, v [b,t,k,d]; scores = q.k / sqrt(d) ("<prefix>.scores"),
 * plus pos_bias [n,s,t] when >= 0, masked (mb_mask) when mask >= 0
 * ("<prefix>.masked"), softmax over t ("<prefix>.probs"); returns the context
 * "<prefix>.ctx", shaped like q.  With m->fused, the same context as one
 * fused op (ir_attention). */
typedef struct mb_attn_mask {
    int mask, bias; /* mb_causal's pair, or -1: every key visible */
    int pos_bias;   /* additive [n,s,t] (relative position bias), or -1 */
    double dropout; /* rate on the probabilities ("<prefix>.probs.drop") and, in
                       mb_gpt_block, on the attention and MLP outputs; 0: none */
    int causal;     /* with fused: keys after the query masked (mask and bias unused) */
    int fused;      /* 1: one ir_attention op (causal when `causal`) named
                       "<prefix>.ctx", no scores held; needs pos_bias < 0 and
                       no dropout on the probabilities */
} mb_attn_mask;
int mb_attend(ir_graph *g, int q, int k, int v, const mb_attn_mask *m, const char *prefix);

/* The GPT block (also ViT's encoder block): x + attn(ln1(x)), then
 * + gelu MLP of width f (ln2), with biases everywhere; heads an explicit dim
 * of wq, wk, wv [h,heads,dh] and wo [heads,dh,h].  Sets layer tag L and
 * returns "h<L>.out". */
int mb_gpt_block(ir_graph *g, int x, int layer, int64_t heads, int64_t f, const mb_attn_mask *m);

/* Dropout of rate p on x: x * ir_dropout_mask(p), named `name`, the mask's
 * seed a hash of `name` (so each site draws its own mask and a rebuilt or
 * recomputed graph draws the same one).  p = 0 returns x (no op). */
int mb_dropout(ir_graph *g, int x, double p, const char *name);

/* Mean cross-entropy of logits [b,s,v] against i32 labels [b,s]; "loss". */
int mb_cross_entropy(ir_graph *g, int logits, int labels);

/* Ends a builder: loss set; on a graph error, the graph freed and NULL
 * with "model '<gname>': <error>" in err.  Returns g or NULL. */
ir_graph *mb_finish(ir_graph *g, int loss, const char *gname, char *err, size_t errlen);

/* The mixture-of-experts MLP (moe.c) on x [b,s,h]: returns "<prefix>.out"
 * and the layer's load-balancing loss in *aux. */
typedef struct mb_moe_dims {
    int64_t b, s, h, f, experts, topk, capacity; /* capacity: percent of an even share */
} mb_moe_dims;
int mb_moe(ir_graph *g, int x, const char *prefix, const mb_moe_dims *d, int *aux);

#endif
