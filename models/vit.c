/* vit.c - the vision transformer builder (ViT, Dosovitskiy et al. 2021).
 *
 * Forward graph with carve's primitive ops only:
 *   images [b, image, image, channels] -> patches [b, n, p*p*channels]
 *     (reshape to [b, image/p, p, image/p, p, c], transpose, reshape: the
 *     patch extraction is in the graph, so it shards like the rest);
 *   x = concat(cls, patches @ patch.w + patch.b) + pos     [b, n+1, h]
 *   per layer L:  the GPT block without a mask (blocks.c: pre-LN,
 *     multi-head attention with biases, GELU MLP of width `mlp`);
 *   logits = ln_f(x)[:, 0] @ head.w + head.b                [b, classes]
 *   loss = mean cross-entropy(logits, labels [b])
 * The class token's row is taken with a slice; no causal mask anywhere.
 * Layer L's params and ops carry layer tag L and are named as in gpt.c
 * ("h3.attn.wq", "h3.mlp.w1"); patch embedding, class token, position
 * table, ln_f and the head carry tag -1.
 */
#include "models/blocks.h"
#include "models/registry.h"

#include <string.h>

/* images [b, S, S, c] -> [b, (S/p)^2, p*p*c], rows of patches in raster order */
static int patchify(ir_graph *g, int images, int64_t b, int64_t S, int64_t p, int64_t c)
{
    int64_t split[6] = {b, S / p, p, S / p, p, c}, perm[6] = {0, 1, 3, 2, 4, 5};
    int64_t flat[3] = {b, (S / p) * (S / p), p * p * c};
    int t = ir_transpose(g, ir_reshape(g, images, 6, split), perm);
    int out = ir_reshape(g, t, 3, flat);
    if (out >= 0) ir_rename(g, out, "patches");
    return out;
}

/* patch embedding, class token and position table: x [b, n+1, h] */
static int embed(ir_graph *g, int patches, int64_t b, int64_t n, int64_t P, int64_t h)
{
    int64_t wd[2] = {P, h}, cd[2] = {1, h}, pd[2] = {n + 1, h};
    int64_t bnh[3] = {b, n, h}, b1h[3] = {b, 1, h}, bth[3] = {b, n + 1, h}, map2[1] = {2}, map12[2] = {1, 2};
    int w = mb_param(g, "patch", "w", 2, wd, IR_INIT_AUTO, 0);
    int bias = mb_param(g, "patch", "b", 1, &h, IR_INIT_ZEROS, 0);
    int cls = ir_arg(g, "cls", IR_PARAM, IR_F32, 2, cd);
    int pos = ir_arg(g, "pos", IR_PARAM, IR_F32, 2, pd);
    ir_set_init(g, cls, IR_INIT_NORMAL, 0.02);
    ir_set_init(g, pos, IR_INIT_NORMAL, 0.02);
    int tok = mb_named(g, "patch.out", IR_OP_ADD, ir_einsum(g, "bnp,ph->bnh", patches, w),
                       ir_broadcast(g, bias, 3, bnh, map2), 0);
    int x = ir_concat(g, ir_broadcast(g, cls, 3, b1h, map12), tok, 1);
    return mb_named(g, "embed", IR_OP_ADD, x, ir_broadcast(g, pos, 3, bth, map12), 0);
}

ir_graph *model_build_vit(const model_config *cfg, char *err, size_t errlen)
{
    const model_vit_config *vc = &cfg->vit;
    int64_t L = vc->layers, h = vc->hidden, heads = vc->heads, f = vc->mlp, S = vc->image, p = vc->patch;
    int64_t c = vc->channels, k = vc->classes, b = vc->batch;
    if (cfg->family != MODEL_VIT || L <= 0 || h <= 0 || heads <= 0 || f <= 0 || p <= 0 || S <= 0 || c <= 0 ||
        k <= 0 || b <= 0 || h % heads != 0 || S % p != 0) {
        ir_errf(err, errlen, "model_build_vit: config not checked (parse it with model_parse)");
        return NULL;
    }
    int64_t n = (S / p) * (S / p), P = p * p * c;
    char gname[200];
    ir_graph *g = ir_new(model_config_str(cfg, gname, sizeof gname));
    int64_t imd[4] = {b, S, S, c}, hk[2] = {h, k}, bk[2] = {b, k}, bh[2] = {b, h}, map1[1] = {1};
    int images = ir_arg(g, "images", IR_INPUT, IR_F32, 4, imd);
    int labels = ir_arg(g, "labels", IR_INPUT, IR_I32, 1, &b);
    ir_set_init(g, labels, IR_INIT_IDS, (double)k);
    int x = mb_dropout(g, embed(g, patchify(g, images, b, S, p, c), b, n, P, h), cfg->dropout, "embed.drop");
    mb_attn_mask none = {-1, -1, -1, cfg->dropout, 0, model_attention_fused(cfg)};
    for (int64_t l = 0; l < L; l++) x = mb_gpt_block(g, x, (int)l, heads, f, &none);
    ir_set_layer(g, -1);
    x = mb_layer_norm(g, x, "ln_f");
    int pooled = ir_reshape(g, ir_slice(g, x, 1, 0, 1), 2, bh);
    if (pooled >= 0) ir_rename(g, pooled, "pooled");
    int w = mb_param(g, "head", "w", 2, hk, IR_INIT_AUTO, 0);
    int bias = mb_param(g, "head", "b", 1, &k, IR_INIT_ZEROS, 0);
    int logits = mb_named(g, "logits", IR_OP_ADD, ir_einsum(g, "bh,hk->bk", pooled, w), ir_broadcast(g, bias, 2, bk, map1), 0);
    return mb_finish(g, mb_cross_entropy(g, logits, labels), gname, err, errlen);
}

/* ---- the registry's formulas and checks (models/registry.h) -------------- */

int64_t model_vit_params(const model_vit_config *c)
{
    int64_t L = c->layers, h = c->hidden, f = c->mlp, p = c->patch, S = c->image, k = c->classes;
    int64_t t = (S / p) * (S / p) + 1;
    /* patch embedding and bias, class token, positions; per layer q,k,v,o
     * with biases, the MLP with biases, two LayerNorms; ln_f; the head */
    return p * p * c->channels * h + h + h + t * h + L * (4 * h * h + 2 * h * f + f + 9 * h) + 2 * h + h * k + k;
}

double model_vit_flops(const model_vit_config *c)
{
    double L = (double)c->layers, h = (double)c->hidden, f = (double)c->mlp, b = (double)c->batch, p = (double)c->patch;
    int64_t np = (c->image / c->patch) * (c->image / c->patch);
    double n = (double)np, t = n + 1;
    /* patch embedding; per layer q,k,v,o 4 * 2bth^2, scores and context
     * 2 * 2bt^2h, MLP 2 * 2bthf; the head 2bhk */
    return 2 * b * n * p * p * (double)c->channels * h + L * (8 * b * t * h * h + 4 * b * t * t * h + 4 * b * t * h * f) +
           2 * b * h * (double)c->classes;
}

int model_vit_check(const model_vit_config *c, const char *spec, model_big *big, char *err, size_t errlen)
{
    int64_t hi = c->hidden, hs = c->heads, S = c->image, p = c->patch;
    if (hi % hs != 0)
        return ir_errf(err, errlen, "model '%s': heads=%lld does not divide hidden=%lld", spec, (long long)hs, (long long)hi);
    if (S % p != 0)
        return ir_errf(err, errlen, "model '%s': patch=%lld does not divide image=%lld", spec, (long long)p, (long long)S);
    double b = (double)c->batch, t = (double)((S / p) * (S / p) + 1);
    big[0] = (model_big){"attention scores [batch,heads,tokens,tokens]", b * (double)hs * t * t};
    big[1] = (model_big){"images [batch,image,image,channels]", b * (double)S * (double)S * (double)c->channels};
    big[2] = (model_big){"MLP activations [batch,tokens,mlp]", b * t * (double)c->mlp};
    big[3] = (model_big){"head weight [hidden,classes]", (double)hi * (double)c->classes};
    return 4;
}
