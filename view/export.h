/* export.h - a verified plan in JAX, Shardy, XLA and PyTorch form (export.c,
 * docs/export.md). */
#ifndef CARVE_VIEW_EXPORT_H
#define CARVE_VIEW_EXPORT_H

#include <stdio.h>

#include "plan/plan.h"

typedef enum { VIEW_EXPORT_JAX, VIEW_EXPORT_SHARDY, VIEW_EXPORT_XLA, VIEW_EXPORT_TORCH, VIEW_EXPORT_N } view_export_kind;

/* The kind named "jax", "shardy", "xla" or "torch", or -1. */
int view_export_kind_from_name(const char *name);
const char *view_export_kind_name(view_export_kind k);

/* Writes the plan (pl, read from `path`; st its replayed state, p its lowered
 * program) in form k to f.  Returns 0, or -1 when f reports a write error. */
/* Arguments (params, inputs) with a dim that its axes do not divide (carve
 * pads it): their count, and the first described in `first`.  Exports say
 * so, since JAX's device_put wants divisible dims. */
int view_export_uneven(const shard_state *st, char *first, size_t n);
int view_export(const plan *pl, const char *path, const shard_state *st, const spmd_program *p, view_export_kind k,
                FILE *f);

/* The HLO sharding string of a value of rank `rank` sharded as s on mesh m:
 * "{replicated}" or "{devices=[t0,..(,r)]<=[N]}" / "<=[sizes]T(perm)" with
 * " last_tile_dim_replicate" when some axes do not tile it.  Returns buf. */
char *view_hlo_sharding(const shard_mesh *m, const shard_spec *s, int rank, char *buf, size_t n);

#endif
