/* cost.h - hardware profiles and the cost model of an SPMD program.
 *
 * A hardware profile (cost_hw) describes one device (peak FLOP/s per dtype,
 * memory bandwidth and capacity) and the links between devices as a two-level
 * hierarchy: devices inside a node share a fast link (NVLink, ICI, shared
 * memory), nodes are joined by a slower one (InfiniBand, DCN).  A mesh axis
 * whose devices all sit in one node uses the fast link, otherwise the slow one
 * (cost_axis_link); a profile may also name axes and give them their own link.
 * Profiles come from presets (public specifications, docs/cost-model.md),
 * from JSON ("format": "carve-hw/1") or from `carve calibrate` (calib/, a
 * tool that measures this machine; cost/ includes no exec/ header).
 *
 * The estimator prices one spmd_program: per instruction a roofline time on
 * local shapes, ring alpha-beta times for collectives, and peak memory per
 * device by liveness.  It keeps its scratch in a cost_ws, made for one graph,
 * that the caller reuses across calls (the search prices thousands of
 * programs of one graph: per-graph facts are computed once, and a call
 * allocates nothing once the arrays have grown).  Everything is deterministic.
 */
#ifndef CARVE_COST_H
#define CARVE_COST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "analysis/spmd.h"
#include "ir/ir.h"

#define COST_NAME_LEN 48
#define COST_SOURCE_LEN 256
#define COST_HW_FORMAT "carve-hw/1"

/* ---- hardware profiles ------------------------------------------------ */
typedef struct cost_link {
    double bandwidth; /* bytes/s each device sends (and receives) at once */
    double latency;   /* seconds per step of a collective (alpha) */
    char name[32];    /* what the link is ("NVLink 3", "InfiniBand HDR"; a profile's "name"), "" unnamed */
} cost_link;

/* One einsum shape a CPU profile was calibrated at (`carve calibrate
 * --model`, bench_fidelity): subscripts and the local dims of both operands
 * and the result, and the seconds one instruction took through carve's einsum
 * kernel, [0] with its operands in cache, [1] with them out of cache; alone:
 * one thread with the other cores idle, busy: every core running one.  The
 * estimator prices an einsum of exactly this shape by these times
 * (docs/cost-model.md, "The CPU model"). */
typedef struct cost_gemm_time {
    ir_einsum_spec spec;
    int64_t dims_a[IR_MAX_RANK], dims_b[IR_MAX_RANK], dims_out[IR_MAX_RANK];
    double alone[2], busy[2];
} cost_gemm_time;
#define COST_MAX_GEMM_TIMES 256

typedef struct cost_hw {
    char name[COST_NAME_LEN];
    char source[COST_SOURCE_LEN];  /* where the figures come from */
    double matmul_flops[IR_N_DTYPES]; /* einsum FLOP/s per device by dtype (i32: unused, 0) */
    double tf32_flops;             /* einsum FLOP/s on f32 data through TF32 tensor cores (JSON
                                      peak_flops.tf32; absent: the f32 rate) */
    double vector_flops;           /* FLOP/s of elementwise ops and reductions */
    double mem_bandwidth;          /* bytes/s per device */
    double mem_capacity;           /* bytes per device */
    double op_overhead;            /* seconds per local op (launch / dispatch) */
    int64_t node_devices;          /* devices per node on the fast link */
    cost_link intra, inter;        /* inside a node, between nodes */
    int cores;                     /* CPU profiles: cores running the simulated devices; 0: none */
    /* CPU profiles (0 everywhere else; docs/cost-model.md, "The CPU model"): */
    double alone_speedup;          /* rate of a thread alone over its rate with every core busy (>= 1; 0: 1);
                                      with alone_bandwidth, of the compute terms only */
    double alone_bandwidth;        /* the same for the memory terms (bytes / memory_bandwidth, bytes /
                                      gemm_bandwidth): memory and shared caches, which a thread alone has
                                      to itself (>= 1; 0: alone_speedup prices the whole op) */
    double op_rate[IR_N_OPS];      /* elements/s of each non-einsum op kind with every core busy (0: price
                                      the op by vector_flops); elements as cost_op_elements counts them */
    double gemm_call;              /* seconds per GEMM call (an einsum makes one per batch index) */
    double gemm_bandwidth;         /* bytes/s at which an einsum's operands and result come from memory
                                      on top of its FLOP time (0: not priced) */
    double cache_bytes;            /* CPU profiles: the machine's cache (every core's private caches and
                                      the shared one), shared evenly by the devices; a buffer touched
                                      within that many bytes of traffic is read from cache (0: every
                                      operand comes from memory) */
    int shared_memory;             /* 1: collectives are the SPMD runtime's barrier + copies through
                                      shared memory (priced as such), 0: ring algorithms on links */
    double oversub_latency;        /* seconds per barrier when devices outnumber cores (0: intra.latency) */
    int fused_elementwise;         /* 2: the program's accelerator kernels (fusion.h: matmul epilogues,
                                      one-pass softmax and layernorm, folded broadcasts), as XLA fuses on a
                                      GPU; 1: its elementwise groups, as carve's executors run them
                                      (exec/fuse.h); 0: op by op */
    /* achievable GEMM rates (accelerators; 0: an einsum runs at the peak, docs/cost-model.md): */
    double gemm_efficiency;        /* fraction of the peak a large GEMM reaches (measured cuBLAS); 0: 1 */
    double attention_efficiency;   /* fraction of the matmul peak a fused attention kernel reaches
                                      (FlashAttention-2 as published, forward and backward); 0: gemm_efficiency */
    int gemm_tile;                 /* edge of the output tile one processor computes (cuBLAS 128x128) */
    int gemm_units;                /* processors running tiles at once (SMs); with gemm_tile: tile and
                                      wave quantization, cost_gemm_quantization */
    int n_gemm_times;              /* CPU profiles calibrated at a model's shapes: einsum shapes timed */
    cost_gemm_time gemm_times[COST_MAX_GEMM_TIMES];
    int n_axis_links;              /* links given per mesh axis name (override the hierarchy) */
    int axis_ordered;              /* 1: price mesh axis a as if it were the axis_order[a]-th (devices
                                      numbered in that order); never in a file: what-if pricing
                                      (cost_mesh_order_warning) */
    int8_t axis_order[SHARD_MAX_AXES];
    char axis_names[SHARD_MAX_AXES][SHARD_AXIS_NAME];
    cost_link axis_links[SHARD_MAX_AXES];
} cost_hw;

/* Names of the presets, NULL-terminated. */
const char *const *cost_hw_preset_names(void);
/* Fills *hw with preset `name`.  Returns 0, or -1 with a message listing the
 * presets. */
int cost_hw_preset(const char *name, cost_hw *hw, char *err, size_t errlen);
/* A preset name, or else the path of a carve-hw/1 JSON file.  Returns 0 or -1
 * with a one-line message. */
int cost_hw_lookup(const char *name_or_path, cost_hw *hw, char *err, size_t errlen);
/* Checks every field (positive rates, capacity, links...).  Returns 0 or -1
 * with a message naming the field. */
int cost_hw_check(const cost_hw *hw, char *err, size_t errlen);
/* Parses a carve-hw/1 document.  Missing, negative or non-numeric fields are
 * errors naming the field (`where` names the file in messages). */
int cost_hw_from_json(const char *text, const char *where, cost_hw *hw, char *err, size_t errlen);
int cost_hw_load(const char *path, cost_hw *hw, char *err, size_t errlen);
/* Returns a malloc'd carve-hw/1 document (caller frees), NULL on out-of-memory. */
char *cost_hw_to_json(const cost_hw *hw);
/* Writes atomically (temporary file in the same folder, then rename). */
int cost_hw_save(const cost_hw *hw, const char *path, char *err, size_t errlen);

/* The distance between neighbours of `axis` in device numbers: the product
 * of the sizes of the axes after it (in hw->axis_order when axis_ordered). */
int64_t cost_axis_stride(const cost_hw *hw, const shard_mesh *mesh, int axis);
/* The link a collective over mesh axis `axis` uses: the axis' own link if the
 * profile names it, else intra when stride(axis) * size(axis) <= node_devices
 * (devices numbered row-major, last axis fastest), else inter. */
cost_link cost_axis_link(const cost_hw *hw, const shard_mesh *mesh, int axis);
/* The levels a collective over mesh axis `axis` runs in: one (sizes[0] =
 * the axis size, on cost_axis_link) when the axis stays inside a node or has
 * its own link; two when its devices span nodes and a node holds a whole
 * number of them: sizes[0] devices inside each node on the intra link, then
 * sizes[1] nodes on the inter link (hierarchical, as NCCL runs it), so an
 * axis of 64 prices like the two axes node=8,gpu=8.  Returns the count. */
int cost_axis_levels(const cost_hw *hw, const shard_mesh *mesh, int axis, int64_t *sizes, cost_link *links);

/* How many "elements" an op of kind k processes, as op_rate counts them:
 * 0 = the result's elements, 1 = operand 0's (reductions), 2 = operand 1's
 * (scatter_add's updates); -1 for einsum (priced by FLOPs). */
int cost_op_elements(ir_opkind k);

/* Fraction of a processor array's work a GEMM of `batch` independent m x n
 * outputs uses (NVIDIA, Matrix Multiplication Background User's Guide: tile
 * and wave quantization): each dim is padded to whole tiles (edge `tile`, or
 * tile/2 for a dim that fits in that), and the batch * tiles_m * tiles_n
 * tiles run in waves of `units`; the last wave's empty slots are lost, except
 * below one wave (cuBLAS then splits K).  1 when tile or units is 0. */
double cost_gemm_quantization(double m, double n, double batch, int tile, int units);

/* The entry of hw->gemm_times for einsum `e` on these local dims (ranks as
 * in e), or NULL. */
const cost_gemm_time *cost_gemm_time_find(const cost_hw *hw, const ir_einsum_spec *e, const int64_t *dims_a,
                                          const int64_t *dims_b, const int64_t *dims_out);
/* Seconds one device spends on a timed einsum shape: with n_devices below the
 * cores a single device runs alone (its alone times; several share the
 * machine: busy), otherwise busy times, times n / cores when devices
 * outnumber the cores; in between the in-cache and out-of-cache times by the
 * fraction `missed` of its bytes that come from memory (the cache model's). */
double cost_gemm_time_price(const cost_hw *hw, const cost_gemm_time *t, int64_t n_devices, double missed);

/* Per-device time multiplier on a CPU profile for a mesh of n devices:
 * n / cores when devices share the cores, else 1 / alone_speedup when
 * fewer threads than cores run (each gets more of the machine), never below
 * that; 1 for profiles without cores. */
double cost_cpu_factor(const cost_hw *hw, int64_t n_devices);

/* ---- estimate --------------------------------------------------------- */
typedef enum {
    COST_FP32,       /* every value f32 as in the IR, matmuls at the f32 (non-tensor-core) rate */
    COST_MIXED_BF16, /* bf16 params, activations, gradients; f32 master weights,
                        Adam states and optimizer arithmetic (docs/cost-model.md) */
    COST_TF32,       /* f32 values; matmuls (only) at the TF32 tensor-core rate (JAX's default on
                        A100/H100) */
    COST_MIXED_FP16, /* as COST_MIXED_BF16 with fp16 (its own peak) */
    COST_N_PRECISIONS
} cost_precision;

/* "f32", "tf32", "bf16", "fp16" (the --precision names). */
const char *cost_precision_name(cost_precision p);
/* One line saying what a precision stores and computes in, for report headers. */
const char *cost_precision_describe(cost_precision p);
/* Parses a --precision name.  Returns 0, or -1 with a message listing the names. */
int cost_precision_parse(const char *text, cost_precision *out, char *err, size_t errlen);
/* The precision a profile is priced in when none is asked for: mixed bf16 with
 * f32 master weights and Adam states on accelerators (what large-model
 * training runs in), f32 on CPU profiles (cores > 0: what carve's executor
 * runs; it has no bf16 kernels). */
cost_precision cost_default_precision(const cost_hw *hw);
/* The einsum peak under a precision (optimizer einsums run on f32 master
 * weights: the f32 rate, TF32 under COST_TF32). */
double cost_matmul_peak(const cost_hw *hw, cost_precision p, int optimizer);

/* Under mixed precision, the precision of the parameter gradients (their
 * buffers, their all-reduces and reduce-scatters, what the optimizer reads):
 * AUTO is f32 under bf16 (Megatron-LM forces fp32 gradient accumulation and
 * all-reduce for bf16; PyTorch AMP and JAX differentiate the f32 master
 * weights) and the working 16-bit type under fp16 (Megatron-LM's and
 * DeepSpeed's fp16 default); no effect in f32 and tf32. */
typedef enum { COST_GRADS_AUTO, COST_GRADS_F32, COST_GRADS_WORKING, COST_N_GRADS } cost_grads;

typedef struct cost_options {
    cost_precision precision;
    int overlap;           /* 0: step = compute + comm; 1: step = max(compute, comm) */
    double memory_capacity; /* bytes per device; 0: the profile's */
    cost_grads grads;      /* gradient precision under mixed precision (0: AUTO) */
} cost_options;

/* "auto", "f32", "working" (the --grads names). */
const char *cost_grads_name(cost_grads g);
/* Parses a --grads name.  Returns 0, or -1 with a message listing the names. */
int cost_grads_parse(const char *text, cost_grads *out, char *err, size_t errlen);
/* 1 when the gradients are f32 under options o: mixed precision with grads
 * F32, or AUTO under bf16; 0 otherwise (f32 and tf32 steps have f32 values
 * anyway, priced as such). */
int cost_grads_f32(const cost_options *o);
/* Bytes per element of a parameter's optimizer shard that a mixed-precision
 * optimizer step moves beyond the program's fused update (which reads the
 * 16-bit working param and the gradient at its width, the f32 states, and
 * writes the f32 result and states), as Megatron-LM's mixed-precision
 * optimizer runs it (docs/cost-model.md, section 4): 8 for the f32 master
 * weights (read 4 where the program reads the 2-byte copy; a copy pass back
 * to the 16-bit working weights, read 4 and write 2), 8 more for 16-bit
 * gradients (a cast to f32 main gradients, read 2 and write 4, then read at
 * 4), 8 more under fp16 (the loss-scale unscale and inf/nan check, read and
 * write 4).  0 in f32 and tf32. */
double cost_mp_optimizer_bytes(const cost_options *o);

/* Bytes per parameter element of each model state (ZeRO paper notation:
 * params 2 + grads 2 + K = 12 for mixed-precision Adam). */
typedef struct cost_state_bytes {
    double param, grad, opt; /* opt: optimizer states incl. the f32 master copy (K) */
} cost_state_bytes;
/* Per-element bytes for an optimizer with `n_opt_states` f32 states per param
 * (Adam: 2) under a precision. */
cost_state_bytes cost_state_sizes(cost_precision prec, int n_opt_states);
/* Model-state bytes on one device for `psi` parameter elements whose params,
 * gradients and optimizer states are split over `shard_p`, `shard_g`, `shard_o`
 * devices: psi * (param/shard_p + grad/shard_g + opt/shard_o).  The estimator
 * sums this over the program's params (ZeRO stages 1-3 are shard_o = N,
 * shard_g = N, shard_p = N in turn). */
double cost_model_state_bytes(double psi, const cost_state_bytes *sz, double shard_p, double shard_g, double shard_o);

/* Bytes a device sends for one collective of `bytes` (the spmd_instr count)
 * over n devices on a ring: all-reduce 2(n-1)/n S, all-gather and
 * reduce-scatter (n-1)/n S, all-to-all (n-1)/n S; 0 for compute and slice. */
double cost_wire_bytes(spmd_kind kind, int64_t n, double bytes);
/* Time of one collective over the axes in `axes` (see docs: hierarchical over
 * several axes, fastest link first; with shared_memory, the SPMD runtime's
 * barrier and copies at intra_link, devices not sharing cores). */
double cost_collective_time(const cost_hw *hw, const shard_mesh *mesh, spmd_kind kind, unsigned axes, double bytes);

typedef struct cost_estimate {
    double step_time;       /* seconds per training step */
    double compute_time;    /* per device, incl. CPU serialisation over cores */
    double comm_time;
    double flops;           /* per device */
    double comm_bytes;      /* per device, as counted by lowering (precision-scaled) */
    double wire_bytes;      /* per device, sent on links by the ring algorithms */
    double peak_memory;     /* bytes per device */
    double capacity;        /* bytes per device used for `fits` */
    int fits;
    int peak_instr;         /* instruction at which memory peaks */
    /* what is live at the peak; the six add up to peak_memory (docs/cost-model.md, section 3):
     * params: the device's own param blocks (argument buffers), held all step;
     * gathered_params: other copies of params (ZeRO-3/FSDP's all-gathered weights, reshards);
     * opt_states: optimizer states and, under mixed precision, the f32 master weights;
     * grads: parameter gradients (any layout, partial sums included);
     * activations: forward-pass values (kept for the backward pass) and the inputs;
     * other: backward- and optimizer-pass temporaries and constants */
    double peak_params, peak_opt_states, peak_grads, peak_activations, peak_other, peak_gathered_params;
    /* model states over the step (ZeRO's count, cost_model_state_bytes summed over params):
     * model_state_bytes = model_state_params + model_state_grads + model_state_opt, where
     * params and opt are peak_params and peak_opt_states (the same buffers) and grads is
     * every param's whole gradient at its last split (live by the end of the backward pass) */
    double model_state_bytes, model_state_params, model_state_grads, model_state_opt;
    double activation_peak; /* most bytes of activations and temporaries (all but params,
                               optimizer states, gradients) live at once in the step */
    double serialisation;   /* factor applied to per-device times (cost_cpu_factor) */
    double comm_hidden;     /* tensor-parallel communication hidden behind einsums (the overlap: tactic; not in
                               comm_time) */
    /* breakdowns (seconds) */
    double op_time[IR_N_OPS];
    int op_count[IR_N_OPS];
    double coll_time[SPMD_N_KINDS];
    double coll_wire[SPMD_N_KINDS];
    int coll_count[SPMD_N_KINDS];
    int coll_launches;      /* collectives as they run: a gradient bucket counts once */
    double phase_compute[SPMD_N_PHASES], phase_comm[SPMD_N_PHASES];
    /* per layer: index 0 is "outside layers", 1 + L is layer L; arrays live
     * in the workspace and stay valid until its next use. */
    int n_layers;
    const double *layer_compute, *layer_comm, *layer_wire;
    const double *instr_time; /* seconds of each instruction of the program (timelines; in the workspace) */
} cost_estimate;

typedef struct cost_ws cost_ws;
/* A reusable workspace for the programs of graph g (g must outlive it and
 * not change meanwhile): its per-graph tables are built once, at the first
 * program.  Caller frees with cost_ws_free. */
cost_ws *cost_ws_new(const ir_graph *g);
void cost_ws_free(cost_ws *ws);

/* Prices program p (a program of ws's graph) on hw.  Fills *out (its layer
 * arrays point into ws).  Returns 0, or -1 with a message when hw fails
 * cost_hw_check or p is a program of another graph. */
int cost_estimate_program(cost_ws *ws, const spmd_program *p, const cost_hw *hw, const cost_options *opt,
                          cost_estimate *out, char *err, size_t errlen);

/* What cost_estimate_program found about each buffer of the program it
 * priced last in ws (valid until ws prices another): its local bytes under
 * the precision, and whether it is ever stored in memory (0: a result kept
 * in a fused kernel's registers or a scratch tile).  The pipeline cost model
 * (cost/pipeline.h) counts a stage's memory with them. */
const double *cost_ws_buffer_bytes(const cost_ws *ws);
int cost_ws_buffer_stored(const cost_ws *ws, int b);

/* One device's run of instructions [lo, hi) of a program as copy `copy`
 * (cost_price_spans); acc_copy >= 0: each result of an accumulated buffer
 * (per_copy 2) is then added into that copy's instance (its accumulator). */
typedef struct cost_span {
    int lo, hi, copy, acc_copy;
} cost_span;

/* The cache model (CPU profiles with cache_bytes) follows one device's
 * order of instructions, which for a pipelined step is not the program's:
 * a stage runs its segments micro-batch after micro-batch in its schedule's
 * order (cost/pipeline.h).  This prices p's instructions again along
 * spans[0..n_spans) in turn, from an empty cache, each span's instructions
 * in their order (SEND and RECV touch their bytes, priced elsewhere), the buffers with per_copy[b] != 0
 * kept once per copy (0..n_copies-1: a micro-batch's activations are not
 * another's), the others shared; it adds each priced time into time[i].  To
 * be called right after cost_estimate_program(w, p, hw, opt) (its buffer
 * sizes and lifetimes); the workspace's figures of that estimate
 * (instr_time, layer sums) are left as they were.  Returns 0; 1, adding
 * nothing, when hw has no cache model (the order changes no price); -1 when
 * out of memory or p is not a program of w's graph. */
int cost_price_spans(cost_ws *w, const spmd_program *p, const cost_hw *hw, const cost_options *opt, const cost_span *spans,
                     int n_spans, const uint8_t *per_copy, int n_copies, double *time);
/* cost_estimate_program and cost_price_spans with every device priced at
 * the rates it has on a CPU profile when rate_devices devices run at once
 * (cost_cpu_factor, the bandwidth factor, the einsums' alone or busy times,
 * a collective's latency when they outnumber the cores; 1: a device alone on
 * the machine); the cache share stays the mesh's.  0: the mesh's devices (the
 * functions above).  For a pipelined step, whose stages run alone while
 * others wait (cost/pipeline.h). */
int cost_estimate_program_at(cost_ws *w, const spmd_program *p, const cost_hw *hw, const cost_options *opt, int64_t rate_devices,
                             cost_estimate *out, char *err, size_t errlen);
int cost_price_spans_at(cost_ws *w, const spmd_program *p, const cost_hw *hw, const cost_options *opt, int64_t rate_devices,
                        const cost_span *spans, int n_spans, const uint8_t *per_copy, int n_copies, double *time);

/* Reward for the search: fitting plans get baseline_time / step_time (> 0,
 * higher is better); a plan that does not fit gets -(excess) / (1 + excess)
 * with excess = peak / capacity - 1, in (-1, 0): below every fitting plan and
 * worse the more it overflows. */
double cost_reward(const cost_estimate *e, double baseline_time);

/* A time for people: "12.345 ms" style (s, ms or us, three decimals). */
void cost_fmt_time(double s, char *buf, size_t n);

/* ---- links, throughput and MFU (throughput.c) ------------------------- */

/* What mesh axis `name` runs its collectives on (cost_axis_levels). */
typedef struct cost_axis_info {
    char name[SHARD_AXIS_NAME];
    int64_t size;
    int named;                 /* the profile gives this axis its own link (axis_links) */
    int across_nodes;          /* its devices lie in more than one node */
    int levels;                /* 1, or 2: inside each node, then across nodes (hierarchical) */
    int64_t level_size[2];
    cost_link level_link[2];
} cost_axis_info;
/* Fills out[0..mesh->n_axes) and returns the count. */
int cost_mesh_axes(const cost_hw *hw, const shard_mesh *mesh, cost_axis_info *out);
/* "NVLink 3, 200 GB/s" / "... among 8 in a node, then InfiniBand HDR, 21.2 GB/s
 * across 4 nodes".  Returns buf. */
char *cost_axis_link_str(const cost_hw *hw, const cost_axis_info *x, char *buf, size_t n);
/* The name of the link of level `level` ("NVLink 3"; "intra-node link" when
 * the profile names none). */
const char *cost_axis_link_name(const cost_hw *hw, const cost_axis_info *x, int level);
/* 1 with one line in buf when another order of p's mesh axes (devices are
 * numbered row-major, the last axis fastest, so the order decides which
 * axes stay inside a node) makes p's step at least 5% shorter: the order
 * whose collectives, each priced alone, take least is priced again in full
 * (ws: a workspace of p's graph, which this uses; e: p's estimate on hw),
 * and the line names it, the axis it brings inside a node and both step
 * times.  Else 0 and "".  Profiles that name per-axis links or share memory,
 * and pipelined plans (their transfers follow device numbers): 0. */
int cost_mesh_order_warning(cost_ws *ws, const spmd_program *p, const cost_hw *hw, const cost_options *opt,
                            const cost_estimate *e, char *buf, size_t n);

/* A step's throughput: `units` tokens (or samples) a step, model_flops a
 * step (all devices; docs/cost-model.md defines them), on `devices` devices
 * of matmul peak `peak` FLOP/s each. */
typedef struct cost_throughput {
    const char *unit;          /* "tokens" or "samples" */
    double per_step, per_second, per_device; /* units a step, a second, a second per device */
    double model_flops;        /* a step, all devices */
    double achieved;           /* model FLOP/s per device */
    double peak;               /* the matmul peak per device it is measured against */
    double mfu;                /* achieved / peak */
    int64_t devices;
} cost_throughput;
void cost_throughput_of(double units, const char *unit, double model_flops, double step_time, int64_t devices, double peak,
                        cost_throughput *out);


#endif
