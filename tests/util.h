/* util.h - helpers shared by the test programs that build models. */
#ifndef CARVE_TEST_UTIL_H
#define CARVE_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "models/models.h"

/* The training step (Adam) of model `spec`; exits with the message if the
 * spec or the build fails (a test cannot go on without its graph). */
static inline ir_graph *test_build_step(const char *spec)
{
    model_config cfg;
    char err[512];
    ir_graph *g = NULL;
    if (model_parse(spec, &cfg, err, sizeof err) == 0) g = model_build_step(&cfg, NULL, err, sizeof err);
    if (!g) {
        fprintf(stderr, "%s: %s\n", spec, err);
        exit(1);
    }
    return g;
}

#endif
