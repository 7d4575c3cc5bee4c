/* registry.h - what each row of models/models.def names, for models.c: the
 * functions every family defines beside its builder (models/<id>.c).
 *
 * model_<id>_params and model_<id>_flops are closed formulas (so `carve
 * models` lists a 175B model without building it; tests check them against
 * the built graphs).  model_<id>_check applies the family's rules beyond each
 * key's range and names its largest tensors in big[] (at most
 * MODEL_MAX_BIG), which models.c holds against the IR's element limit;
 * it returns their count, or -1 with "model '<spec>': ..." in err.
 */
#ifndef CARVE_MODELS_REGISTRY_H
#define CARVE_MODELS_REGISTRY_H

#include "models/models.h"

#define MODEL_MAX_BIG 4

typedef struct model_big {
    const char *what;
    double numel;
} model_big;

#define MODEL(E, id, ...)                                                                                              \
    int64_t model_##id##_params(const model_##id##_config *c);                                                         \
    double model_##id##_flops(const model_##id##_config *c);                                                           \
    int model_##id##_check(const model_##id##_config *c, const char *spec, model_big *big, char *err, size_t errlen);
#include "models/models.def"
#undef MODEL

#endif
