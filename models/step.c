/* step.c - model_build_step: a model's forward graph turned into a training
 * step by ir_train_step (ir/autodiff).  Kept in its own file so that programs
 * which only build forward graphs link without the autodiff module. */
#include "models.h"

ir_graph *model_build_step(const model_config *cfg, const ir_optimizer *opt, char *err, size_t errlen)
{
    ir_graph *fwd = model_build_forward(cfg, err, errlen);
    if (!fwd) return NULL;
    ir_optimizer adam = ir_default_adam();
    ir_graph *step = ir_train_step(fwd, opt ? opt : &adam, err, errlen);
    ir_free(fwd);
    return step;
}
