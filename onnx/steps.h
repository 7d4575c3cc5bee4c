/* steps.h - the import's steps below its driver (not part of the API;
 * context.h says how the rooms are layered): the layer tags of the repeated
 * blocks (layers.c) and the heads layout of the params (layout.c).
 */
#ifndef CARVE_ONNX_STEPS_H
#define CARVE_ONNX_STEPS_H

#include "onnx/context.h"

/* ---- the heads layout (layout.c) ----------------------------------------- */
/* Gives each param whose one reader is a reshape splitting its dims that
 * shape (the file's shape recorded, ir_file_shape), c->g rebuilt without
 * the reshape.  0, or -1 with an error. */
int ox_heads_layout(ox_ctx *c);

/* ---- fused projections (fused.c) ------------------------------------------ */
/* Cuts each fused projection (one einsum with a param whose result is
 * sliced into equal parts along a column dim: q, k and v) into one
 * projection a part, each reading its slice of the param, the param held
 * with its column dim split as the parts and their readers split it (the
 * file's shape recorded).  0, or -1 with an error. */
int ox_fused_projections(ox_ctx *c);

/* ---- layers (layers.c) ----------------------------------------------------- */
/* Tags nodes and initializers with repeated-block numbers. */
void ox_layers(ox_ctx *c);

#endif
