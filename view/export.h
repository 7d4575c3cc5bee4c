/* export.h - what the exports of a plan share (export.c); each export is a
 * renderer of its own file (export_jax.c, export_shardy.c, export_xla.c,
 * export_torch.c; view.h).  Private to view/. */
#ifndef CARVE_VIEW_EXPORT_H
#define CARVE_VIEW_EXPORT_H

#include <stdint.h>
#include <stdio.h>

#include "view/view.h"

/* Writes export `name` of x's plan to f: its header lines (each starting
 * with `comment`), then write(f, x, each op's forward mark).  Returns 0,
 * or -1 when x is no verified plan or f reports an error. */
typedef void (*export_write_fn)(FILE *f, const view_explanation *x, const uint8_t *fwd);
int export_render(const view_explanation *x, const char *name, const char *comment, export_write_fn write, FILE *f);
/* Writes s as a double-quoted Python (mlir 0) or MLIR (mlir 1) string literal. */
void export_put_str(FILE *f, const char *s, int mlir);
/* Whether value v is listed: arguments, and the named values the forward
 * pass computes (the plan file's "activations"). */
int export_listed(const shard_state *st, const uint8_t *forward, int v);
/* MESH_AXES, MESH_SHAPE and DEVICE_IDS as Python constants. */
void export_py_mesh(FILE *f, const shard_mesh *m);
/* The four Python dicts of a table export: PARAM<params>, OPT_STATE<rest>,
 * INPUT<rest> and ACTIVATION<rest> (the last under the comment
 * activation_note), keyed by name; entry writes each value's sharding, its
 * comma, any comment and the newline. */
typedef void (*py_entry_fn)(FILE *f, const shard_state *st, int v);
void export_py_tables(FILE *f, const shard_state *st, const uint8_t *fwd, const char *params, const char *rest,
                      const char *activation_note, py_entry_fn entry);

/* The buffer of value v that its first forward reader computes with: the
 * argument's own, or the version the program gathers (ZeRO-3) or slices for
 * it; -1 when no forward instruction reads v. */
int export_compute_buf(const spmd_program *p, int v);
/* The layout that buffer has (the one v's first forward reader computes with)
 * when it is another than v's own (st->spec[v]) and holds no partial sum;
 * NULL otherwise or when p is NULL. */
const shard_spec *export_moved_use(const spmd_program *p, const shard_state *st, int v);
/* Writes the stages of pipelined program pp that hold param v (an argument
 * of pp's program), the one that updates it first: "0, 1". */
void export_param_stages(FILE *f, const pipe_program *pp, int v);
/* The Python the torch export writes after its tables: apply_plan and what
 * it needs (export_torch_runtime.c, generated from export_torch_runtime.py). */
extern const char export_torch_runtime[];

#endif
