/* exec.h - running graphs on the CPU.
 *
 * The reference executor runs a whole (global) graph on one device in f32/i32:
 * one buffer per value, einsum through BLIS (bli_sgemm_ex, one thread per call),
 * everything else as plain loops.  It is the ground truth for numerics.
 *
 * Argument values are a pure function of (seed, value name, element index):
 * element i of argument `name` is output i of a PCG32 generator seeded with
 * (seed, stream = FNV-1a hash of name), mapped by the value's ir_init.  So the
 * SPMD runtime can fill any shard without building the global tensor
 * (exec_fill_range uses pcg32_advance).
 */
#ifndef CARVE_EXEC_H
#define CARVE_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"

/* Selects BLIS kernels before BLIS initialises: when the CPU has AVX-512 and
 * the user did not set BLIS_ARCH_TYPE, it sets it so the AVX-512 (skx)
 * kernels run.  Safe to call more than once; call before any BLIS use. */
void exec_blis_setup(void);
/* Name of the BLIS kernel set in use (e.g. "skx", "haswell", "generic"). */
const char *exec_blis_arch(void);

/* Fills elements [start, start+count) of argument v's global row-major array
 * into dst (float* for float dtypes, int32_t* for i32). */
void exec_fill_range(const ir_graph *g, int v, uint64_t seed, int64_t start, int64_t count, void *dst);
/* The same for a value described by x (its name, dtype, dims, role and
 * init decide the numbers; data: its elements where its init is
 * IR_INIT_DATA, else NULL): a pipeline's body fills micro-batch k's input
 * with the values of the unrolled step's input "mbK/NAME". */
void exec_fill_value(const ir_value *x, const void *data, uint64_t seed, int64_t start, int64_t count, void *dst);

/* One buffer per value of a graph. */
typedef struct exec_ref exec_ref;

/* Returns a new executor for g, or NULL with a message when the buffers would
 * need more than `max_bytes` (0: no limit) or on out-of-memory.  The executor
 * borrows g (g must outlive it). */
exec_ref *exec_ref_new(const ir_graph *g, size_t max_bytes, char *err, size_t errlen);
void exec_ref_free(exec_ref *r);
/* Total bytes the buffers of g would take (what exec_ref_new checks). */
size_t exec_ref_bytes(const ir_graph *g);
/* Buffer of value v: float* for float dtypes, int32_t* for i32.  After a
 * run it holds v's value when v is an argument, an output, the loss, a
 * gradient or read by an op outside v's fused group; an intermediate that
 * only feeds ops of its own group stays in scratch tiles and its buffer is
 * not written (fuse.h; CARVE_FUSE=0 in the environment writes every value). */
void *exec_ref_data(exec_ref *r, int v);
/* Fills every argument from `seed` (see above). */
void exec_ref_init_args(exec_ref *r, uint64_t seed);
/* Runs every op once.  Returns 0, or -1 with a message naming the op (e.g. an
 * id out of range in gather). */
int exec_ref_run(exec_ref *r, char *err, size_t errlen);
/* Copies each output that updates an argument into that argument, so the
 * next exec_ref_run does the next training step. */
void exec_ref_apply_updates(exec_ref *r);
/* Value of the scalar loss after a run (NAN when the graph has no loss). */
double exec_ref_loss(exec_ref *r);
/* The fused elementwise groups the executor runs (fuse.h): how many, and
 * how many ops they hold. */
void exec_ref_fusion(const exec_ref *r, int *groups, int *fused_ops);
/* The graph it runs. */
const ir_graph *exec_ref_graph(const exec_ref *r);

/* Kernels shared by the reference executor and the SPMD runtime. ---------- */

/* C = einsum(A, B) on dense row-major arrays with the given dims (global or
 * local shapes alike).  Maps the letters onto a batched GEMM (batch, m, n, k)
 * and calls bli_sgemm_ex with strides; copies only when a layout needs it. */
void exec_einsum_f32(const ir_einsum_spec *e, const int64_t *dims_a, const float *a, const int64_t *dims_b,
                     const float *b, const int64_t *dims_c, float *c);

#endif
