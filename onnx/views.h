/* views.h - views followed as digits, and the chains of views an export
 * leaves collapsed (not part of the API; the import's steps below its
 * driver, as steps.h's).
 *
 * A value reached from a root value by reshapes and transposes (views) is a
 * permutation of the root's elements: each of its dims is a run of the
 * root's dims' factors, its "digits" (a root dim [12 * 64] read by a reshape
 * as [12, 64] is two digits, a merge of [4, 8] into [32] a run of two).
 * Following the views one by one (ox_dg_view) cuts a root digit where a
 * reshape ends a dim inside one; what comes out says which root factors each
 * dim of the value holds, so any chain of views is one reshape of the root
 * to its digits, one transpose and one reshape (onnx/fused.c cuts fused
 * projections with it; ox_collapse_views below rewrites chains so).
 */
#ifndef CARVE_ONNX_VIEWS_H
#define CARVE_ONNX_VIEWS_H

#include "onnx/context.h"

#define DG_MAX 24 /* digits of one root (a value of rank 6 cut into 4 each) */

/* A value reached from a root by views: each dim a run of the root's digits
 * (major first).  The digits of root dim r are root[r][0..nroot[r]) in
 * order; a digit is cut in place (the major part keeps its id).  Size-1
 * dims have no digits. */
typedef struct ox_digits {
    int n;                            /* digits made */
    int64_t size[DG_MAX];
    int of[DG_MAX];                   /* the root dim it is part of */
    int rank_root;
    int nroot[IR_MAX_RANK], root[IR_MAX_RANK][DG_MAX];
    int rank;                         /* the value */
    int64_t dims[IR_MAX_RANK];
    int nd[IR_MAX_RANK], d[IR_MAX_RANK][DG_MAX];
} ox_digits;

/* The root itself: each dim of size above 1 one digit. */
void ox_dg_init(ox_digits *g, int rank, const int64_t *dims);
/* Cuts digit id into a major part of size a (keeping the id) and a minor
 * part (the new id, returned), in the root and in the value.  -1 when the
 * digits run out. */
int ox_dg_cut(ox_digits *g, int id, int64_t a);
/* The value reshaped to dims, transposed by perm, or by view op o (a
 * reshape or transpose of ir).  -1 when a reshape's cut does not divide a
 * digit (or the digits run out). */
int ox_dg_reshape(ox_digits *g, int rank, const int64_t *dims);
void ox_dg_transpose(ox_digits *g, const int64_t *perm);
int ox_dg_view(ox_digits *g, const ir_graph *ir, const ir_op *o);
/* Keeps in root (a root as ox_dg_init made it, perhaps cut) the cuts that dg,
 * started as a copy of it, made. */
void ox_dg_commit(ox_digits *root, const ox_digits *dg);

/* The one reshape, transpose and reshape that view src (of rank `rank`) as
 * dg (src's digits followed to a value): dd[0..*nd) src cut into its digits,
 * perm[0..*nt) the value's digits as places in dd, pd their sizes (the
 * transposed dims).  Returns 1 when perm is the identity. */
int ox_dg_composite(const ox_digits *dg, int rank, int64_t *dd, int *nd, int64_t *perm, int64_t *pd, int *nt);

/* 1 for a reshape or a transpose. */
int ox_is_view(const ir_op *o);

/* The ops reading each value of a graph (CSR); a graph output counts as two
 * readers of op -1, so it is never a value's one reader. */
typedef struct ox_readers {
    int *start, *op;              /* the ops reading value v: op[start[v] .. start[v + 1]) */
} ox_readers;
void ox_readers_build(const ir_graph *g, ox_readers *r);
void ox_readers_free(ox_readers *r);
/* The one op reading v, or -1 (none, several, or a graph output). */
int ox_sole_reader(const ox_readers *r, int v);

/* g rebuilt in a new graph, value by value in order: fn->value (when set)
 * returns the new value for v (made in n from map, the new value of each
 * value before v), OX_DROP (v has no new value: nothing reads it) or OX_COPY
 * (an argument copied with its file shape, an op with map's operands); the
 * outputs and the loss mapped, the layers and the data table kept.  NULL
 * with an error ("WHAT: ...") in c. */
enum { OX_COPY = -2, OX_DROP = -3 };
typedef struct ox_rebuild_fns {
    int (*value)(void *ctx, ir_graph *n, const ir_graph *g, int v, const int *map);
    void *ctx;
} ox_rebuild_fns;
ir_graph *ox_rebuild(ox_ctx *c, const ir_graph *g, const ox_rebuild_fns *fn, const char *what);
/* Argument v of g copied into n as ox_rebuild copies it (role, init, file
 * shape, layer).  The new value, or -1. */
int ox_copy_arg(ir_graph *n, const ir_graph *g, int v);

/* Rewrites each chain of views and elementwise unary ops (scale: they
 * commute with views) whose inner values have no other reader into the
 * unary ops on the chain's source, then at most one reshape, one transpose
 * and one reshape, where that is fewer views than the chain had: the
 * exporter's `[B, H, T, D] -> [B * H, T, D] -> transpose -> [B, H, D, T]`
 * becomes one transpose, and a dim the chain merged as the minor part of
 * another and split out again (which no sharding passes) is never merged.
 * c->g replaced.  0, or -1 with an error. */
int ox_collapse_views(ox_ctx *c);

#endif
