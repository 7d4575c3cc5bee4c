/* steps.h - the import's steps below its driver (not part of the API;
 * context.h says how the rooms are layered): the layer tags of the repeated
 * blocks (layers.c), the heads layout of the params (layout.c), fused
 * projections (fused.c), token rows (unflatten.c) and the order of the ops
 * (order.c).
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

/* ---- token rows (unflatten.c) --------------------------------------------- */
/* Rewrites each closed region between a reshape merging leading dims into
 * rows ([b, s, k] -> [b * s, k], Conv1D's flatten) and the reshapes that
 * split them back with the rows as those dims (einsums, elementwise ops and
 * bias broadcasts widened), so a split of any of them passes.  c->g
 * replaced.  0, or -1 with an error. */
int ox_unflatten_rows(ox_ctx *c);

/* ---- the order of the ops (order.c) ---------------------------------------- */
/* Moves the ops computed from params and constants alone that an einsum's
 * epilogue (the elementwise ops after it: a bias add) reads to just before
 * the einsum, so the product and its epilogue are adjacent (one kernel on an
 * accelerator).  Only the order of the values changes.  c->g replaced.  0,
 * or -1 with an error. */
int ox_hoist_epilogues(ox_ctx *c);

/* ---- layers (layers.c) ----------------------------------------------------- */
/* Tags nodes and initializers with repeated-block numbers. */
void ox_layers(ox_ctx *c);

#endif
