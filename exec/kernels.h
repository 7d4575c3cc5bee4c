/* kernels.h - one op on dense buffers, independent of any graph.
 *
 * A kernel is "run op k with these attributes on these operand buffers and
 * dims into this result buffer".  The dims are whatever the caller has: the
 * global shapes (reference executor) or one device's local shapes (the SPMD
 * runtime).  Buffers are dense row-major; float dtypes (f32, and bf16/f16,
 * which carve executes as f32) are float*, i32 is int32_t*.
 *
 * Ops whose values depend on where a local block sits in the global tensor
 * (iota, gather/scatter_add/one_hot on a sharded id range) take that position
 * from exec_kernel_opts; NULL opts means "the whole tensor".
 */
#ifndef CARVE_EXEC_KERNELS_H
#define CARVE_EXEC_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"

/* A dense row-major buffer with its dims; does not own data. */
typedef struct exec_tensor {
    ir_dtype dtype;
    int rank;
    int64_t dims[IR_MAX_RANK];
    void *data;
} exec_tensor;

typedef struct exec_kernel_opts {
    /* Global index of the block's first element along each result dim (iota). */
    int64_t out_offset[IR_MAX_RANK];
    /* The same for operand 0 (the fused attention ops: q's first query row,
     * for the causal mask). */
    int64_t in0_offset[IR_MAX_RANK];
    /* Global id of row 0 of the local table (gather), of the local result
     * rows (scatter_add), of the local depth slice (one_hot). */
    int64_t id_base;
    /* 0: an id outside the local range is an error (gather, scatter_add).
     * 1: it is skipped (gather writes a zero row): the block holds only part
     *    of the id range and another device handles that id. */
    int ids_masked;
    /* With ids_masked: when > 0, an id outside [0, id_limit) (the whole
     * table, not just this block) is still an error. */
    int64_t id_limit;
} exec_kernel_opts;

/* Runs op `k` with attributes `a` on operands in[0..n_in) into *out.  All dims
 * must already agree with the op's shape rule (the caller built them from a
 * verified graph); only data-dependent problems are reported.  Returns 0, or
 * -1 with a message in err (an id out of range, out of memory). */
int exec_kernel_run(ir_opkind k, const ir_attrs *a, int n_in, const exec_tensor *in, exec_tensor *out,
                    const exec_kernel_opts *opts, char *err, size_t errlen);

/* The fused attention ops (attention, attention_dq, _dk, _dv; exec/attention.c):
 * as exec_kernel_run, for one of those ops. */
int exec_attention(ir_opkind k, const ir_attrs *a, const exec_tensor *in, exec_tensor *out, const exec_kernel_opts *o,
                   char *err, size_t errlen);

/* Elementwise op k (unary or binary class) over n floats: y = k(a), or
 * k(a, b); s is the scalar of scale and add_scalar.  y may be a. */
void exec_elementwise(ir_opkind k, float s, const float *a, const float *b, float *y, int64_t n);

/* y[0..n) = v. */
void exec_splat(float v, float *y, int64_t n);

/* Copies a strided view into a dense array: dst[i] (row-major over dims) =
 * src[sum_d idx_d * src_strides[d]].  Works on any 4-byte element type. */
void exec_copy_strided32(int rank, const int64_t *dims, const void *src, const int64_t *src_strides, void *dst);

/* Row-major strides of dims, in elements; returns the element count. */
int64_t exec_row_major_strides(int rank, const int64_t *dims, int64_t *strides);

/* einsum as exec_einsum_f32 (exec.h), but returns -1 with a message instead
 * of aborting when a temporary cannot be allocated. */
int exec_einsum_run(const ir_einsum_spec *e, const int64_t *dims_a, const float *a, const int64_t *dims_b,
                    const float *b, const int64_t *dims_c, float *c, char *err, size_t errlen);

/* Elements the einsum kernel would copy into temporaries for these dims (0
 * when every operand is used in place through strides). */
int64_t exec_einsum_copies(const ir_einsum_spec *e, const int64_t *dims_a, const int64_t *dims_b, const int64_t *dims_c);

#endif
