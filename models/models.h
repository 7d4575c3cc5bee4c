/* models.h - model builders and named presets.
 *
 * A model spec is "NAME" or "NAME:key=value,key=value" where NAME is a model
 * (mlp, gpt, gns, unet, llama, moe, vit, t5) or a preset (gpt-tiny, ..., llama2-7b, vit-b16, t5-base, ...) and the keys
 * override its configuration, e.g. "gpt:layers=4,hidden=256" or
 * "gpt-1.3b:batch=16".  Builders record a forward graph with a scalar loss;
 * ir_train_step turns it into a training step.  The families, their keys
 * and the presets are rows of models/models.def (the model registry).
 */
#ifndef CARVE_MODELS_H
#define CARVE_MODELS_H

#include <stdio.h>

#include "ir/ir.h"

#define MODEL_MAX_KEYS 12

/* The model families, in the order of models/models.def; MODEL_NONE: a
 * config that did not parse. */
typedef enum {
    MODEL_NONE,
#define MODEL(E, ...) MODEL_##E,
#include "models/models.def"
#undef MODEL
} model_family;

/* The typed config of each family, model_<id>_config: its keys as int64_t
 * fields, in canonical order (e.g. model_gpt_config: layers, hidden, heads,
 * seq, batch, vocab). */
#define MODEL_KEY_FIELD(key, def, limit) int64_t key;
#define MODEL(E, id, keys, ...) typedef struct model_##id##_config { keys(MODEL_KEY_FIELD) } model_##id##_config;
#include "models/models.def"
#undef MODEL
#undef MODEL_KEY_FIELD

typedef struct model_config {
    char model[16];                  /* the family's name: "mlp", "gpt", "gns", "unet", "llama", "moe", "vit" or "t5" */
    model_family family;
    char preset[24];                 /* the preset it came from, or "" */
    int n_keys;
    const char *keys[MODEL_MAX_KEYS]; /* key names in canonical order */
    union {                          /* the key values: by index, or typed by family (cfg->gpt.hidden) */
        int64_t values[MODEL_MAX_KEYS];
#define MODEL(E, id, ...) model_##id##_config id;
#include "models/models.def"
#undef MODEL
    };
    double dropout;                  /* gpt, vit, t5: dropout rate in [0, 1) (key "dropout"), 0: none */
    int attention;                   /* gpt, vit, llama, moe: MODEL_ATTENTION_* (key "attention") */
} model_config;

/* How a builder writes attention (models.def's attn column): FUSED as one
 * ir_attention op (FlashAttention, PyTorch's scaled_dot_product_attention:
 * no scores held), MATERIALIZED as scores, mask, softmax and context ops (the
 * scores held for the backward pass).  0 in a config: none named, which is
 * MODEL_ATTENTION_DEFAULT, or MATERIALIZED with dropout (the fused op draws no
 * dropout on the probabilities). */
enum { MODEL_ATTENTION_FUSED = 1, MODEL_ATTENTION_MATERIALIZED = 2 };
#define MODEL_ATTENTION_DEFAULT MODEL_ATTENTION_FUSED
/* 1 when cfg's builder writes fused attention. */
int model_attention_fused(const model_config *cfg);
/* 1 when cfg's family takes attention=fused|materialized. */
int model_takes_attention(const model_config *cfg);
/* model_config_str with the attention form always written for a family that
 * takes one (what a plan records: it means the same whatever the default). */
char *model_config_str_form(const model_config *cfg, char *buf, size_t n);

/* Parses a spec into a full configuration (defaults filled in).  Returns 0 or
 * -1 with a one-line message naming the bad part (unknown model or key, bad
 * number, a value out of range, heads not dividing hidden, ...).  gpt, vit
 * and t5 also take dropout=P, a rate in [0, 1) (default 0, not part of the
 * canonical text then): for gpt and vit Megatron-LM's placement, on the
 * embeddings, the attention probabilities and each block's attention and MLP
 * outputs; for t5 T5's (models/t5.c). */
int model_parse(const char *spec, model_config *cfg, char *err, size_t errlen);
/* Value of a key named at run time, or -1 if the model has no such key
 * (for tools and tests that walk every family; the library reads the typed
 * fields). */
int64_t model_get(const model_config *cfg, const char *key);
/* Index in cfg->values of the key that holds the batch size, or -1 (gns). */
int model_batch_key(const model_config *cfg);
/* Canonical text of a config: "gpt:layers=24,hidden=2048,..." (",dropout=P"
 * at the end when the rate is not 0, ",attention=fused|materialized" when
 * the form is not MODEL_ATTENTION_DEFAULT). */
char *model_config_str(const model_config *cfg, char *buf, size_t n);

/* Builds the forward graph (caller owns), or NULL with a message. */
ir_graph *model_build_forward(const model_config *cfg, char *err, size_t errlen);
/* Forward graph, then ir_train_step with `opt` (NULL: default Adam). */
ir_graph *model_build_step(const model_config *cfg, const ir_optimizer *opt, char *err, size_t errlen);

/* The step of `micro` micro-batches of the model (ir_microbatch over the
 * model built at batch / micro): gradients accumulated, one update.  NULL
 * with a message when micro does not divide the model's batch. */
ir_graph *model_build_microbatched_step(const model_config *cfg, const ir_optimizer *opt, int micro, char *err,
                                        size_t errlen);

/* The body of a pipelined step of `micro` micro-batches (analysis/pipeline.h):
 * the training step of one micro-batch (the model at batch / micro) with its
 * loss scaled by 1 / micro (ir_scale_loss), so the gradients summed over the
 * micro-batches are the whole batch's and so is the loss.  micro = 1 gives
 * the plain step with its loss scaled by 1.  NULL with a message when micro
 * does not divide the model's batch. */
ir_graph *model_build_pipeline_body(const model_config *cfg, const ir_optimizer *opt, int micro, char *err, size_t errlen);

/* Parameter count and training-step FLOPs from the model's formulas, without
 * building a graph (used by `carve models` and checked against the graph). */
int64_t model_param_count(const model_config *cfg);
/* FLOPs of the forward pass's einsums (2 per multiply-add; elementwise ops not
 * counted), and of a training step's einsums (3x: backward is twice the
 * forward).  Both from formulas; the forward one matches the graph exactly. */
double model_forward_flops(const model_config *cfg);
double model_step_flops(const model_config *cfg);
/* What one training step consumes, for throughput: tokens (batch x seq; t5:
 * batch x (enc_seq + dec_seq)) for the token models, else samples (the
 * batch; gns: one graph).  *unit gets "tokens" or "samples". */
double model_step_units(const model_config *cfg, const char **unit);

/* The per-model builders behind model_build_forward (cfg->family must match);
 * they return a new forward graph (caller owns) or NULL with a message. */
ir_graph *model_build_mlp(const model_config *cfg, char *err, size_t errlen);
ir_graph *model_build_gpt(const model_config *cfg, char *err, size_t errlen);
ir_graph *model_build_gns(const model_config *cfg, char *err, size_t errlen);
ir_graph *model_build_unet(const model_config *cfg, char *err, size_t errlen);

/* Image ops (models/unet.c) on x [batch, height, width, channels]; each
 * returns the new value or -1 with the error in the graph.
 * model_conv2d: k x k convolution, "same" zero padding, with weight w
 * [k*k, in, out] (tap i*k+j), every `stride`-th row and column of the
 * result kept (stride dividing height and width), taps `dilation` apart:
 * one shift (a halo exchange when the dim is tiled) and one GEMM per tap.
 * model_max_pool2: 2x2 windows, stride 2.  model_upsample2: nearest 2x. */
int model_conv2d(ir_graph *g, int x, int w, int k, int stride, int dilation);
int model_max_pool2(ir_graph *g, int x);
int model_upsample2(ir_graph *g, int x);
ir_graph *model_build_llama(const model_config *cfg, char *err, size_t errlen);
ir_graph *model_build_moe(const model_config *cfg, char *err, size_t errlen); /* the llama model with MoE MLPs (llama.c) */
ir_graph *model_build_vit(const model_config *cfg, char *err, size_t errlen);
ir_graph *model_build_t5(const model_config *cfg, char *err, size_t errlen);

/* Names of the models and presets, NULL-terminated; a one-line description. */
const char *const *model_names(void);
const char *model_describe(const char *name);

#endif
