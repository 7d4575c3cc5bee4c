/* step.c - model_build_step: a model's forward graph turned into a training
 * step by ir_train_step (ir/autodiff).  Kept in its own file so that programs
 * which only build forward graphs link without the autodiff module. */
#include "models.h"

#include <string.h>

ir_graph *model_build_step(const model_config *cfg, const ir_optimizer *opt, char *err, size_t errlen)
{
    ir_graph *fwd = model_build_forward(cfg, err, errlen);
    if (!fwd) return NULL;
    ir_optimizer adam = ir_default_adam();
    ir_graph *step = ir_train_step(fwd, opt ? opt : &adam, err, errlen);
    ir_free(fwd);
    return step;
}

/* cfg at batch / micro in *mc.  Returns 0, or -1 with a message (`what`
 * names the tactic). */
static int micro_config(const model_config *cfg, int micro, const char *what, model_config *mc, char *err, size_t errlen)
{
    *mc = *cfg;
    int b = model_batch_key(cfg);
    if (b < 0) return ir_errf(err, errlen, "%s: model '%s' has no batch size", what, cfg->model);
    if (micro < 1 || mc->values[b] % micro != 0)
        return ir_errf(err, errlen, "%s:%d: does not divide the batch of %lld", what, micro, (long long)mc->values[b]);
    mc->values[b] /= micro;
    return 0;
}

ir_graph *model_build_pipeline_body(const model_config *cfg, const ir_optimizer *opt, int micro, char *err, size_t errlen)
{
    model_config mc;
    if (micro_config(cfg, micro, "pipeline micro-batches", &mc, err, errlen) < 0) return NULL;
    ir_graph *fwd = model_build_forward(&mc, err, errlen);
    if (!fwd) return NULL;
    ir_graph *step = NULL;
    if (ir_scale_loss(fwd, 1.0 / micro, err, errlen) == 0) {
        ir_optimizer adam = ir_default_adam();
        step = ir_train_step(fwd, opt ? opt : &adam, err, errlen);
    }
    ir_free(fwd);
    if (step) step->rewrites.pipe_body = micro; /* the record pipe_body_microbatches reads */
    return step;
}

ir_graph *model_build_microbatched_step(const model_config *cfg, const ir_optimizer *opt, int micro, char *err,
                                        size_t errlen)
{
    if (micro == 1) return model_build_step(cfg, opt, err, errlen);
    model_config mc;
    if (micro_config(cfg, micro, "microbatch", &mc, err, errlen) < 0) return NULL;
    ir_graph *one = model_build_step(&mc, opt, err, errlen);
    if (!one || micro == 1) return one;
    ir_graph *g = ir_microbatch(one, micro, err, errlen);
    ir_free(one);
    return g;
}
