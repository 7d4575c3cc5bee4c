/* export.h - a verified plan in JAX, Shardy, XLA and PyTorch form (export.c,
 * docs/export.md). */
#ifndef CARVE_PLAN_EXPORT_H
#define CARVE_PLAN_EXPORT_H

#include <stdio.h>

#include "plan/plan.h"

typedef enum { PLAN_EXPORT_JAX, PLAN_EXPORT_SHARDY, PLAN_EXPORT_XLA, PLAN_EXPORT_TORCH, PLAN_EXPORT_N } plan_export_kind;

/* The kind named "jax", "shardy", "xla" or "torch", or -1. */
int plan_export_kind_from_name(const char *name);
const char *plan_export_kind_name(plan_export_kind k);

/* Writes the plan (pl, read from `path`; st its replayed state, p its lowered
 * program) in form k to f.  Returns 0, or -1 when f reports a write error. */
/* Arguments (params, inputs) with a dim that its axes do not divide (carve
 * pads it): their count, and the first described in `first`.  Exports say
 * so, since JAX's device_put wants divisible dims. */
int plan_export_uneven(const shard_state *st, char *first, size_t n);
int plan_export(const plan *pl, const char *path, const shard_state *st, const spmd_program *p, plan_export_kind k,
                FILE *f);

/* The HLO sharding string of a value of rank `rank` sharded as s on mesh m:
 * "{replicated}" or "{devices=[t0,..(,r)]<=[N]}" / "<=[sizes]T(perm)" with
 * " last_tile_dim_replicate" when some axes do not tile it.  Returns buf. */
char *plan_hlo_sharding(const shard_mesh *m, const shard_spec *s, int rank, char *buf, size_t n);

#endif
