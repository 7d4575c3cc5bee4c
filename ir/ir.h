/* ir.h - carve's graph IR.
 *
 * A graph holds values (tensors) and ops in two growable arrays owned by the
 * graph; strings live in the graph's own string arena.  Ops are kept in
 * topological order (an op only reads values made earlier), each op makes
 * exactly one value.  Builders only record: nothing is computed while a graph
 * is built, so a 39B-parameter model is a few thousand small structs.
 *
 * Errors while building are sticky, as in SQLite's error buffer: the first
 * failing builder call stores a message in the graph and returns -1; every
 * later call that receives -1 as an operand returns -1 without a new message.
 * So model code can build a whole graph and check ir_error() once at the end.
 *
 * Value ids and op ids are plain ints (indices); -1 means "none".
 */
#ifndef CARVE_IR_H
#define CARVE_IR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define IR_MAX_RANK 6
#define IR_MAX_OPERANDS 4 /* attention_dq reads q, k, v and the result's cotangent */
#define IR_MAX_SUBSCRIPTS 48
#define IR_ERR_LEN 512

typedef enum { IR_F32, IR_I32, IR_BF16, IR_F16, IR_N_DTYPES } ir_dtype;

/* What a value is to the training step.  Arguments (everything but
 * IR_INTERMEDIATE) have no producing op. */
typedef enum {
    IR_INPUT,        /* batch data: tokens, labels, features */
    IR_PARAM,        /* trainable weight */
    IR_OPT_STATE,    /* optimizer state (Adam m, v, step count) */
    IR_CONST,        /* neither trained nor batched: rotary tables, masks (no gradient,
                        no optimizer state, never split by data parallelism) */
    IR_INTERMEDIATE, /* made by an op */
    IR_N_ROLES
} ir_role;

/* The ops, in the order of ir/ops.def (the one table of per-op facts). */
typedef enum {
#define X(e, ...) IR_OP_##e,
#include "ops.def"
#undef X
} ir_opkind;

/* The number of ops; a separate enum so switches over ir_opkind stay exhaustive. */
enum {
    IR_N_OPS = 0
#define X(e, ...) +1
#include "ops.def"
#undef X
};

/* What kind of work an op is (ops.def's class column). */
typedef enum { IR_NULLARY, IR_UNARY, IR_BINARY, IR_CONTRACTION, IR_REDUCTION, IR_MOVEMENT } ir_opclass;
/* Which element count an op's FLOPs and element rate are counted on. */
/* ATTN: the fused attention ops' b*heads*s*t*d (operand 0's elements times
 * operand 1's dim 1, the keys), halved when the op is causal. */
typedef enum { IR_COUNT_OUT, IR_COUNT_IN0, IR_COUNT_IN1, IR_COUNT_EINSUM, IR_COUNT_ATTN } ir_opcount;
/* The memory an op reads and writes. */
typedef enum { IR_BYTES_ALL, IR_BYTES_ROWS } ir_opbytes;
/* Whether an op's result may stay a partial sum (ops.def's partial column). */
typedef enum { IR_PARTIAL_NO, IR_PARTIAL_PAIR, IR_PARTIAL_SOLE } ir_oppartial;
/* Which operand of an op holds ids and what they index (ops.def's ids column). */
typedef enum { IR_IDS_NONE, IR_IDS_TABLE, IR_IDS_ROWS, IR_IDS_DEPTH } ir_opids;

typedef struct ir_attrs {
    double scalar;                       /* CONSTANT value, SCALE factor, ADD_SCALAR */
    int n_ints;
    int64_t ints[IR_MAX_RANK];           /* perm, reduce dims, broadcast map, iota dim */
    char subscripts[IR_MAX_SUBSCRIPTS];  /* EINSUM only */
} ir_attrs;

/* How the executors fill an argument with seeded values (see exec/exec.h). */
typedef enum {
    IR_INIT_AUTO,   /* f32: uniform with std 1/sqrt(dims[0]) for rank >= 2, else 0.02;
                       opt states: zeros; i32: ids in [0, 2) */
    IR_INIT_NORMAL, /* f32: uniform with std init_arg */
    IR_INIT_ZEROS,
    IR_INIT_ONES,
    IR_INIT_IDS,    /* i32: uniform ids in [0, init_arg) */
    IR_INIT_DATA,   /* the elements attached to the graph (ir_data_attach): weights, constant tables */
    IR_N_INITS
} ir_init;

/* Which rewrite of a training step made a value (ir_value.made_by): data on
 * the graph, set by the rewrites themselves, so nothing learns a value's
 * origin from its name (a user's value may be called "remat/x"). */
typedef enum {
    IR_MADE_BY_STEP,       /* the step as built: the model or file, autodiff and the optimizer, and a
                              micro-batch's copies of them (ir_value.micro says which) */
    IR_MADE_BY_REMAT,      /* a recomputed copy of value ir_value.of (ir_remat, ir_remat_full) */
    IR_MADE_BY_ACCUMULATE, /* gradient accumulation (ir_microbatch): the gradients' and losses' sums and means */
    IR_MADE_BY_LOSS_SCALE, /* the loss scaled (ir_scale_loss: a pipeline body's 1/M) */
    IR_N_MADE_BY
} ir_made_by;

/* The rewrites a training step went through (ir_graph.rewrites), in the
 * order of the fields' meaning, not of application: graph tactics are
 * applied micro-batches first (the model is built so), then recomputation. */
typedef struct ir_rewrites {
    int remat;        /* recomputation rewrites applied (ir_remat, ir_remat_full): 0 none */
    int remat_full;   /* how many of them re-ran whole layers (ir_remat_full) */
    int microbatches; /* ir_microbatch's micro-batches (0: none; a step of 1 is the step itself) */
    int pipe_body;    /* the step is a pipeline's body, one of this many micro-batches
                         (model_build_pipeline_body): 0 none */
    double loss_scale; /* ir_scale_loss's factor (0: the loss is not scaled) */
} ir_rewrites;

typedef struct ir_value {
    const char *name;     /* unique in the graph; owned by the graph's arena */
    ir_dtype dtype;
    int rank;
    int64_t dims[IR_MAX_RANK];
    ir_role role;
    int producer;         /* op id, or -1 for arguments */
    int layer;            /* repeated-layer index this value belongs to, or -1 */
    int tied;             /* IR_OPT_STATE: the param it belongs to; else -1 */
    int grad_of;          /* gradient of this param (set by autodiff); else -1 */
    ir_init init;         /* arguments only: how executors fill it */
    double init_arg;
    /* what made it, when a rewrite did (see ir_made_by); set by the rewrites, kept by ir_clone */
    ir_made_by made_by;
    int of;               /* IR_MADE_BY_REMAT: the value it recomputes; else -1 */
    int micro;            /* ir_microbatch: the micro-batch whose pass it belongs to (its inputs,
                             forward and backward values); -1 for the rest */
    const char *batch_of; /* an input of micro-batch `micro`: the name of the step's input it is that
                             micro-batch of (the executors fill it from that input's stream for that
                             micro-batch: exec_fill_stream); NULL for every other value */
    unsigned char listed; /* set by ir_add_output: bit 0 an output, bit 1 an argument an output updates */
} ir_value;

typedef struct ir_op {
    ir_opkind kind;
    int n_in;
    int in[IR_MAX_OPERANDS];
    int out;
    int layer;            /* copied from the builder's current layer */
    ir_attrs attrs;
} ir_op;

/* A graph output.  `updates` is the argument this output replaces in the next
 * training step (new param -> param), or -1 (the loss). */
typedef struct ir_output {
    int value;
    int updates;
} ir_output;

typedef struct ir_strbuf ir_strbuf;
typedef struct ir_datatab ir_datatab;

typedef struct ir_graph {
    char *name;              /* model name, owned by the graph */
    ir_value *values;
    int n_values, cap_values;
    ir_op *ops;
    int n_ops, cap_ops;
    ir_output *outputs;
    int n_outputs, cap_outputs;
    int loss;                /* scalar loss value, or -1 */
    int cur_layer;           /* layer tag given to new values and ops */
    int n_layers;            /* 1 + largest layer tag used */
    ir_rewrites rewrites;    /* what rewrote the step (zeros: the step as built) */
    int batch_coupled;       /* the loss couples the batch's examples: it is not a mean of per-example
                                terms (a mixture of experts' load-balancing loss, a product of batch
                                means), so micro-batches change the step itself (set by the builder) */
    int *name_index;         /* open-addressing table of value ids by name */
    int name_cap;
    ir_strbuf *strings;
    ir_datatab *data;        /* elements of IR_INIT_DATA arguments by name, or NULL (ir/data.c) */
    char err[IR_ERR_LEN];    /* first builder error, "" if none */
} ir_graph;

/* ---- op table (ir/ops.def) -------------------------------------------- */
const char *ir_op_name(ir_opkind k);
int ir_op_arity(ir_opkind k);
ir_opclass ir_op_class(ir_opkind k);
/* 1 for the elementwise classes (UNARY, BINARY). */
int ir_op_elementwise(ir_opkind k);
ir_opcount ir_op_count(ir_opkind k);
/* FLOPs per counted element (0: the op only moves data). */
double ir_op_coef(ir_opkind k);
ir_opbytes ir_op_bytes(ir_opkind k);
/* The attributes an op takes, as graph files name them (IR_ATTR_* bits). */
enum {
    IR_ATTR_SCALAR = 1 << 0,
    IR_ATTR_SHAPE = 1 << 1,         /* result shape given by the file (else "shape" is a check) */
    IR_ATTR_DIMS = 1 << 2,
    IR_ATTR_PERM = 1 << 3,
    IR_ATTR_DEPTH = 1 << 4,
    IR_ATTR_ROWS = 1 << 5,
    IR_ATTR_SUBSCRIPTS = 1 << 6,
    IR_ATTR_DTYPE = 1 << 7,         /* result dtype given by the file (else "dtype" is a check) */
    IR_ATTR_DIMS_OPTIONAL = 1 << 8,
    IR_ATTR_SEED = 1 << 9,          /* "seed": ints[0], an integer in 0..2^53 */
    IR_ATTR_CAUSAL = 1 << 10,       /* "causal": ints[0], 0 or 1 (JSON false or true; optional, false) */
};
unsigned ir_op_attrs(ir_opkind k);
/* Bit k set: a gradient flows from the result to operand k. */
unsigned ir_op_grads(ir_opkind k);
ir_oppartial ir_op_partial(ir_opkind k);
/* The operand of op k that holds i32 ids, or -1 (ops.def's ids column);
 * *target: the operand the ids index, or -1 for the result; *last: 1 when
 * they index its last dim (one_hot's depth), 0 its first (rows). */
int ir_op_ids(ir_opkind k, int *target, int *last);
/* Bit k set: operand k must be positive (log, sqrt, rsqrt) or non-zero (a
 * divisor); tests and calibration draw positive values there. */
unsigned ir_op_domain(ir_opkind k);
/* The value an operand's padding must hold while op k reads it: 0, or
 * -infinity for a max (ops.def's pad column). */
float ir_op_pad(ir_opkind k);
/* Returns the op with that name, or -1. */
int ir_op_from_name(const char *name);

const char *ir_dtype_name(ir_dtype t);
int ir_dtype_from_name(const char *name);  /* -1 if unknown */
size_t ir_dtype_size(ir_dtype t);
const char *ir_role_name(ir_role r);
int ir_role_from_name(const char *name);   /* -1 if unknown */

/* ---- graph ----------------------------------------------------------- */
/* Returns a new empty graph (never NULL; aborts only on out-of-memory).
 * The caller owns it and frees it with ir_free. */
ir_graph *ir_new(const char *name);
void ir_free(ir_graph *g);
/* Deep copy; the caller owns the result. */
ir_graph *ir_clone(const ir_graph *g);

/* The first builder error, or NULL if the graph is fine so far. */
const char *ir_error(const ir_graph *g);
/* Records an error (printf-style) if none is recorded yet; returns -1. */
int ir_fail(ir_graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Allocation that cannot fail quietly: on out-of-memory it prints one line
 * and exits 2 (ir_oom; bad input is refused long before: see exec_ref_new).  Sizes of
 * zero allocate one byte.  The caller owns and frees the result. */
/* Out of memory: one line on stderr, "carve: out of memory (N bytes ...)"
 * (N 0: not known), and exit status 2 (what bad input gets: an input too
 * large for the machine or its limit), never an abort.  Every allocation
 * that cannot fail gracefully ends here (ir_xrealloc, ir_xcalloc). */
void ir_oom(size_t bytes) __attribute__((noreturn));
void *ir_xrealloc(void *p, size_t n);
void *ir_xcalloc(size_t n, size_t size);

/* Writes a printf-style message into err (when err is not NULL and n > 0) and
 * returns -1: how every module reports an error into its caller's buffer. */
int ir_errf(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- checked size arithmetic ------------------------------------------ *
 * Every product of dims, devices or bytes goes through these: each returns 0
 * and sets *out, or returns -1 when the exact result does not fit (then *out
 * is the type's maximum, so a caller that only compares with a limit still
 * sees "too large", never a wrapped small number). */
static inline int ir_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    if (__builtin_mul_overflow(a, b, out)) {
        *out = INT64_MAX;
        return -1;
    }
    return 0;
}
static inline int ir_mul_size(size_t a, size_t b, size_t *out)
{
    if (__builtin_mul_overflow(a, b, out)) {
        *out = SIZE_MAX;
        return -1;
    }
    return 0;
}
static inline int ir_add_size(size_t a, size_t b, size_t *out)
{
    if (__builtin_add_overflow(a, b, out)) {
        *out = SIZE_MAX;
        return -1;
    }
    return 0;
}

/* ---- input files (ir/file.c) ------------------------------------------- */
/* Opens path for reading when it is a regular file (following links, as a
 * reader should): opened with O_NONBLOCK, so that a fifo cannot block the
 * open, then checked with fstat; a fifo, a device (/dev/zero), a socket or a
 * folder is refused before a byte is read.  Returns the descriptor
 * (O_NONBLOCK cleared, O_CLOEXEC set; the caller closes it), or -1 with the
 * reason in why ("No such file or directory", "is a fifo (named pipe), not a
 * regular file", ...), which the caller puts after the file's name. */
int ir_open_input(const char *path, char *why, size_t whylen);
/* The whole regular file at path (ir_open_input), at most max bytes, as a
 * malloc'd buffer with a NUL after its *n bytes (the caller frees it).
 * NULL with the reason in why (as ir_open_input; "larger than N MB" past
 * max; "out of memory"). */
char *ir_read_input(const char *path, size_t max, size_t *n, char *why, size_t whylen);
/* Why a file of mode m (st_mode) is no input ("is a fifo (named pipe), not
 * a regular file", ...), or NULL for a regular file. */
const char *ir_not_regular(unsigned m);
/* Remembers fd's file as an input (for a reader that opens its files
 * itself: ONNX external data, opened beneath the model's folder). */
void ir_input_note(int fd);
/* Reads through fd (ir_open_input's) until its end: len bytes at most.
 * Returns the bytes read, or -1 with errno set (EINTR retried). */
ssize_t ir_read_full(int fd, void *buf, size_t len);

/* Inputs an output may not replace.  With the guard on (carve's main turns
 * it on; library callers and tests may leave it off), every file opened by
 * ir_open_input is remembered by device and inode, and ir_out_check (so
 * every output carve writes) refuses a target that is one of them, whatever
 * name reaches it (a hard link, "./x", a link to its folder).  The same test
 * is ir_out_is_input for a path given before it is read. */
void ir_input_guard(int on);
/* 0 when `out` does not exist or is not the file `in` names (both followed
 * through links), else -1 with "OUT: is the input IN; ...". */
int ir_out_is_input(const char *out, const char *in, char *err, size_t errlen);

/* ---- output files (ir/file.c) ------------------------------------------ */
/* Checks, before any long work, that `path` can be written: an existing
 * target must be a writable regular file (not a link, device, folder, fifo)
 * and its folder must accept a new file (tried for real).  Returns 0 or -1
 * with "PATH: what is wrong". */
int ir_out_check(const char *path, char *err, size_t errlen);
/* Writes n bytes to path atomically (ir_out_check, a temporary file in the
 * same folder, fsync, rename): on failure the target is untouched and no
 * temporary file is left.  Returns 0 or -1 with "PATH: what failed: why". */
int ir_write_atomic(const char *path, const void *data, size_t n, char *err, size_t errlen);

/* Value id for a name, or -1. */
int ir_find(const ir_graph *g, const char *name);
/* fwd[v] = 1 for every value the loss depends on (g->n_values bytes,
 * cleared here): the forward pass of a step, however its ops are ordered (a
 * step of several micro-batches interleaves forward and backward ops). */
void ir_mark_forward(const ir_graph *g, unsigned char *fwd);
/* 1 when a rewrite made g from the step as built (recomputation,
 * micro-batches, a pipeline's body): g is not the user's plain step. */
int ir_rewritten(const ir_graph *g);
/* The stream executors fill argument x from (seeded): its own name's, or for
 * micro-batch k of input X (x->batch_of) the stream of X's micro-batch k, so
 * every graph holding that micro-batch of X (the micro-batched step, a
 * pipelined run's k-th pass over its body) draws the same values. */
uint64_t ir_fill_stream(const ir_value *x);
uint64_t ir_fill_stream_of(const char *name, int micro);
/* Elements and bytes of a value (checked: a value built through the IR has at
 * most 2^48 elements, larger products saturate at INT64_MAX / SIZE_MAX). */
int64_t ir_numel(const ir_value *v);
size_t ir_bytes(const ir_value *v);
/* Writes "f32[8,128,512]" into buf; returns buf. */
char *ir_type_str(const ir_value *v, char *buf, size_t n);
/* Copy a string into the graph's arena; the graph owns the copy. */
const char *ir_intern(ir_graph *g, const char *s);

/* Sets how an argument is filled by the executors. Returns 0 or -1. */
int ir_set_init(ir_graph *g, int v, ir_init init, double arg);
const char *ir_init_name(ir_init i);
int ir_init_from_name(const char *name);   /* -1 if unknown */

/* Tag every value and op created from now on with layer `layer` (-1: none). */
void ir_set_layer(ir_graph *g, int layer);

/* ---- argument data (ir/data.c) ----------------------------------------- *
 * An argument whose init is IR_INIT_DATA takes its elements from a table the
 * graph owns, keyed by name (an imported model's weights and constant
 * tables, a given batch).  Elements are 4 bytes each, as the executors hold
 * them: float for float dtypes, int32_t for i32.  Clones share the elements
 * (reference counted), and ir_data_share gives a rewritten graph the table of
 * the graph it was made from.                                              */
/* Attaches n elements (a malloc'd block: the graph takes it, also on error)
 * to argument v, whose init becomes IR_INIT_DATA.  n must be v's element
 * count.  Returns 0, or -1 with an error recorded in g. */
int ir_data_attach(ir_graph *g, int v, void *elems, int64_t n);
/* The same with a copy of elems. */
int ir_data_set(ir_graph *g, int v, const void *elems, int64_t n);
/* The elements attached to value v (by its name), or NULL. */
const void *ir_data(const ir_graph *g, int v);
/* dst reads the elements src holds, for the arguments dst names alike. */
void ir_data_share(ir_graph *dst, const ir_graph *src);
/* The first argument whose init is IR_INIT_DATA but that has no elements
 * attached, or -1. */
int ir_data_missing(const ir_graph *g);
void ir_data_free(ir_datatab *t);
/* The shape a model file holds argument v in, where carve holds it in
 * another of the same elements in the same order (an imported param split
 * into the heads layout: the file's [768, 768] as [12, 64, 768]).  Kept in
 * the data table, so the graphs rewritten from g keep it too.  Set: 0, or
 * -1 with an error recorded (not an argument, another element count). */
int ir_file_shape_set(ir_graph *g, int v, int rank, const int64_t *dims);
/* 1 with the file's shape when v has one recorded, else 0. */
int ir_file_shape(const ir_graph *g, int v, int *rank, int64_t *dims);

/* ---- builder --------------------------------------------------------- *
 * Each returns the new value id, or -1 on error (message in ir_error(g)).
 * `name` may be NULL for intermediates: an automatic name "%<id>" is used.
 * Names starting with '%' are reserved for automatic names.             */
int ir_arg(ir_graph *g, const char *name, ir_role role, ir_dtype t, int rank, const int64_t *dims);
int ir_constant(ir_graph *g, double value, ir_dtype t, int rank, const int64_t *dims);
int ir_iota(ir_graph *g, ir_dtype t, int rank, const int64_t *dims, int dim);
/* A dropout mask f32[dims] of rate p in [0, 1): element x is 1/(1-p) where
 * u(x) >= p, else 0, with u(x) = pcg32_counter(seed, rank, global
 * coordinates of x) / 2^32 (ir/pcg32.h), so every block of it is the same
 * wherever it is drawn.  seed in 0..2^53.  y = x * mask is dropout; the
 * mask takes no gradient. */
int ir_dropout_mask(ir_graph *g, int rank, const int64_t *dims, double p, int64_t seed);
/* The value of element `index` of ir_dropout_mask(rank, dims, p, seed). */
float ir_dropout_value(double p, int64_t seed, int rank, const int64_t *index);
int ir_unary(ir_graph *g, ir_opkind k, int x);
int ir_scale(ir_graph *g, int x, double s);
int ir_add_scalar(ir_graph *g, int x, double s);
int ir_binary(ir_graph *g, ir_opkind k, int a, int b);
int ir_einsum(ir_graph *g, const char *subscripts, int a, int b);
/* An einsum of n (2..16) operands, "ab,bc,cd->ad": built as n-1 two-operand
 * einsums, left to right (the operands' order is the contraction order),
 * each keeping only the letters the output or a later operand needs.
 * Returns the last one. */
int ir_einsum_n(ir_graph *g, const char *subscripts, int n, const int *in);
/* out dims are `rank, dims`; in dim i goes to out dim map[i] (strictly increasing). */
int ir_broadcast(ir_graph *g, int x, int rank, const int64_t *dims, const int64_t *map);
int ir_reduce(ir_graph *g, ir_opkind k, int x, int n_dims, const int64_t *dims);
int ir_transpose(ir_graph *g, int x, const int64_t *perm);
int ir_reshape(ir_graph *g, int x, int rank, const int64_t *dims);
int ir_gather(ir_graph *g, int table, int ids);
int ir_scatter_add(ir_graph *g, int ids, int updates, int64_t rows);
int ir_one_hot(ir_graph *g, int ids, int64_t depth);
/* x[..., start:start+length, ...] along dim; x zero-padded along dim; a and b
 * joined along dim (every other dim equal). */
int ir_slice(ir_graph *g, int x, int dim, int64_t start, int64_t length);
int ir_pad(ir_graph *g, int x, int dim, int64_t before, int64_t after);
int ir_concat(ir_graph *g, int a, int b, int dim);
/* out[..., i, ...] = x[..., i + offset, ...] along `dim`, zeros where i +
 * offset leaves the dim (a convolution tap); 0 < |offset| < dims[dim]. */
int ir_shift(ir_graph *g, int x, int dim, int64_t offset);
/* i32 index of the first largest element along dim (dim removed); the
 * inclusive running sum along dim. */
int ir_argmax(ir_graph *g, int x, int dim);
int ir_cumsum(ir_graph *g, int x, int dim);
/* The identity, marking a place where the value may change its layout
 * (expert parallelism's dispatch and combine): the lowering reshards the
 * operand into the result's layout (an all-to-all when an axis moves between
 * dims).  Sharding propagates across it in one direction only: dir 0 from the
 * operand to the result, dir 1 from the result back to the operand; so the
 * two sides can keep different layouts (docs/sharding.md). */
int ir_reshard(ir_graph *g, int x, int dir);
/* x converted to float type t (f32, bf16, f16), rounded to nearest even.
 * The executors hold every element in 4 bytes and compute in f32: a cast is
 * where a value's precision drops (docs/graph-format.md). */
int ir_cast(ir_graph *g, int x, ir_dtype t);
/* Fused scaled dot-product attention (FlashAttention's one kernel): the
 * context softmax(scale q.k, masked) v computed without holding the scores.  q [b,s,n,d] with k [b,t,n,d] and v [b,t,n,e] gives [b,s,n,e];
 * grouped-query q [b,s,k,g,d] with k [b,t,k,d], v [b,t,k,e] gives
 * [b,s,k,g,e].  scores = scale * q.k over d; causal masks key j > query i
 * (s = t). Its VJP is attention_dq, attention_dk, attention_dv, which
 * recompute the probabilities from q and k, as the fused backward kernel does
 * (docs/cost-model.md, "Fused attention"). */
int ir_attention(ir_graph *g, int q, int k, int v, double scale, int causal);
/* Attention written as primitive ops in forward graph g (scores einsum,
 * scale, a causal mask or none, softmax, context einsum: an ONNX export's
 * chain, a materialised preset's; ir/fuse_attention.c) replaced by fused
 * attention ops, with transposes where q, k, v or the context are in another
 * layout.  Chains with another mask, dropout on the probabilities or readers
 * outside the chain are kept.  Returns a new graph (caller frees; a copy when
 * nothing was fused) with *fused and *skipped counted and the first reason
 * for a skip in why (n bytes); NULL with a message in err. */
ir_graph *ir_fuse_attention(const ir_graph *g, int *fused, int *skipped, char *why, size_t n, char *err, size_t errlen);
/* Two dims a reshape merges ([S, B, H, D] -> [S, B*H, D], torch 1.13's
 * nn.MultiheadAttention) kept apart on every value after it where the ops
 * carry the merged dim only as an index they keep (elementwise ops, fills,
 * broadcast, reductions over other dims, transpose, an einsum letter of the
 * result), up to the reshapes that read it (ir/unmerge.c): so a split of
 * the minor factor (the heads) is a plain split.  Returns a new graph
 * (caller frees; a copy when nothing changed) with the regions rewritten in
 * *regions; NULL with a message in err (a rewrite that would not verify). */
ir_graph *ir_unmerge(const ir_graph *g, int *regions, char *err, size_t errlen);
/* Generic entry used by the JSON loader: checks arity and attrs, infers the
 * result shape (`shape_hint` is needed for CONSTANT, IOTA, BROADCAST, RESHAPE;
 * for SCATTER_ADD its dims[0] gives the rows; may be NULL otherwise). */
int ir_add_op(ir_graph *g, ir_opkind k, int n_in, const int *in, const ir_attrs *a,
              ir_dtype t, int rank, const int64_t *shape_hint, const char *name);
/* Rename a value (must be unique).  Returns 0, or -1 with an error recorded. */
int ir_rename(ir_graph *g, int v, const char *name);

/* Mark `v` a graph output replacing argument `updates` (or -1). */
int ir_add_output(ir_graph *g, int v, int updates);
/* Mark `v` the scalar loss and an output. */
int ir_set_loss(ir_graph *g, int v);

/* ---- einsum subscripts ------------------------------------------------ *
 * Every letter appears in exactly two or three of {a, b, out} and at most once
 * in each: batch letters (a,b,out), m (a,out), n (b,out), k (a,b).  This form is
 * closed under VJP and maps onto a batched GEMM.                          */
typedef struct ir_einsum_spec {
    int rank_a, rank_b, rank_out;
    char a[IR_MAX_RANK], b[IR_MAX_RANK], out[IR_MAX_RANK];
} ir_einsum_spec;
/* Parses `s`; checks ranks when rank_a/rank_b >= 0. Returns 0 or -1 with a message. */
int ir_einsum_parse(const char *s, int rank_a, int rank_b, ir_einsum_spec *e, char *err, size_t errlen);
/* Position of letter c in a subscript list of length n, or -1. */
int ir_einsum_pos(const char *list, int n, char c);

/* ---- checks and printing --------------------------------------------- */
/* Re-checks every invariant of g (topological order, shapes, names, roles,
 * outputs).  Returns 0, or -1 with a message naming the op or value. */
int ir_verify(const ir_graph *g, char *err, size_t errlen);

/* Optional per-value annotation for the printer (e.g. a sharding); writes
 * into buf and returns it, or returns NULL for none. */
typedef const char *(*ir_annot_fn)(void *ctx, const ir_graph *g, int value, char *buf, size_t n);
/* Prints the graph one op a line. */
void ir_print(const ir_graph *g, FILE *f);
/* The word of `words` (space-separated) nearest to w by edit distance, when
 * it is close enough to be a likely misspelling (at most 2 edits, fewer than
 * half of w's length), else NULL.  Returns a buffer of the calling thread's,
 * valid until its next call. */
const char *ir_nearest(const char *w, const char *words);
void ir_print_ex(const ir_graph *g, FILE *f, ir_annot_fn annot, void *ctx);
/* One op as text, without a newline. */
char *ir_op_str(const ir_graph *g, int op, char *buf, size_t n);

/* Summary figures. */
int64_t ir_param_count(const ir_graph *g);
/* FLOPs of one op on its global shapes, by ops.def's count and coef columns
 * (einsum: 2 * prod(all letters)). */
double ir_op_flops(const ir_graph *g, int op);
/* The same formula on any dims (one device's local blocks): in_rank/in_dims
 * per operand, then the result's. */
double ir_op_flops_dims(const ir_op *o, const int *in_rank, const int64_t (*in_dims)[IR_MAX_RANK], int out_rank,
                        const int64_t *out_dims);
double ir_graph_flops(const ir_graph *g);
/* FLOPs of g's matrix products as the model formulas count them: every
 * einsum, and a fused attention op's products whole (not halved for a
 * causal mask, no recomputation): forward 4 b n s t d, attention_dq 4,
 * attention_dk and _dv 2 each (what the materialised chain's einsums add up
 * to). */
double ir_matmul_flops(const ir_graph *g);
/* Model FLOPs of a training step (what MFU counts): 3 x the FLOPs of the
 * forward matrix products the loss depends on (einsums; a fused attention's
 * two products counted whole, causal or not), as Megatron-LM and PaLM count
 * them; recomputation and the optimizer are not counted.  0 without a loss. */
double ir_model_flops(const ir_graph *g);
/* The element count of a fused attention op (ops.def's ATTN count) on q's
 * dims and the number of keys: b*heads*s*t*d, halved when causal. */
double ir_attention_count(const ir_op *o, int q_rank, const int64_t *q_dims, int64_t keys);

/* ---- autodiff -------------------------------------------------------- */
typedef enum { IR_SGD, IR_ADAM } ir_optimizer_kind;
typedef struct ir_optimizer {
    ir_optimizer_kind kind;
    double lr, beta1, beta2, eps;
} ir_optimizer;
/* Default Adam: lr 1e-3, betas 0.9/0.999, eps 1e-8. */
ir_optimizer ir_default_adam(void);

/* Refuses a forward graph (with a loss) holding a param whose gradient would
 * always be zero: no op uses it, or the loss reaches it only through
 * stop_grad or non-differentiable operands.  Returns 0 or -1 with a message
 * naming the param.  (ir_train_step itself accepts such graphs: tests build
 * them on purpose; graph files are checked with this.) */
int ir_check_gradients(const ir_graph *fwd, char *err, size_t errlen);

/* From a forward graph with a scalar loss, returns a new graph (caller owns)
 * holding forward + backward + optimizer, or NULL with a message in err. */
ir_graph *ir_train_step(const ir_graph *fwd, const ir_optimizer *opt, char *err, size_t errlen);

/* ---- rewrites of a training step (ir/remat.c) ------------------------ */
/* Recomputation: a new graph (caller owns) in which the backward pass reads
 * recomputed copies of the internal forward values of layers lo..hi (hi is
 * clamped to the last layer), made from the layers' checkpoints just before
 * the backward pass of each layer needs them; n_recomputed (may be NULL)
 * receives how many forward ops are cloned.  NULL with a message for a graph
 * without a loss or layer tags, or a range outside its layers. */
ir_graph *ir_remat(const ir_graph *step, int lo, int hi, int *n_recomputed, char *err, size_t errlen);
/* Full recomputation (Megatron-LM's --checkpoint-activations): as ir_remat,
 * but every forward op of each layer lo..hi is re-run from the layer's input
 * before the layer's backward pass, whether the backward pass reads its
 * result or not; n_recomputed receives how many. */
ir_graph *ir_remat_full(const ir_graph *step, int lo, int hi, int *n_recomputed, char *err, size_t errlen);
/* Attention-only recomputation (Korthikanti et al. 2022's selective
 * recomputation): as ir_remat, but only each layer's attention core (the
 * values between the scores einsum of two activations and the context
 * einsum, with their masks) is recomputed; q, k, v and the context stay
 * saved.  An error when the layers have no einsum of two activations. */
ir_graph *ir_remat_attn(const ir_graph *step, int lo, int hi, int *n_recomputed, char *err, size_t errlen);
/* The recomputation policies (the remat: tactic's dim). */
enum { IR_REMAT_SELECTIVE, IR_REMAT_FULL, IR_REMAT_ATTN };

/* Gradient accumulation (ir/microbatch.c): from the training step of one
 * micro-batch, a new graph (caller owns) that runs the forward and backward
 * passes of n micro-batches in turn (inputs named "mbK/NAME", recorded as
 * micro-batch K of NAME: ir_value.micro and batch_of), averages their
 * gradients and losses and runs the optimizer once; rewrites.microbatches is
 * n.  n = 1 returns a copy.  NULL with a message for n outside 1..1024 or a
 * graph that is not a step or is micro-batched already. */
ir_graph *ir_microbatch(const ir_graph *step, int n, char *err, size_t errlen);
/* The seed micro-batch k's copy of a dropout_mask op with seed `seed` draws
 * with (ir_microbatch's copies; a pipelined run's k-th pass over the body). */
int64_t ir_microbatch_seed(int64_t seed, int k);
/* Makes forward graph g's loss `factor` times the loss (a scale op appended,
 * named "NAME/scaled", made_by IR_MADE_BY_LOSS_SCALE; it replaces the loss
 * among the outputs; rewrites.loss_scale records the factor), so every
 * gradient autodiff derives from it is scaled too.  A pipelined step's body
 * is a micro-batch's step with its loss scaled by 1/m.  Returns 0, or -1
 * with a message (no loss, a loss already scaled). */
int ir_scale_loss(ir_graph *g, double factor, char *err, size_t errlen);
/* Forward graph fwd (with its loss) built at 1/n of its batch (ir/rebatch.c):
 * every dim that batch marks (batch[v] bit d: dim d of value v holds the
 * batch, as its size or the major factor of a merged dim) divided by n, a
 * mean over the batch made the micro-batch's, a constant that holds the
 * batch cut to one micro-batch's rows (its n blocks must be equal).  A new
 * graph (caller frees), or NULL with a message (a batch dim n does not
 * divide, an op along the batch, a constant that differs by example).
 * *coupled is 1 when a reduction over the batch flows back into the
 * examples (a training-mode BatchNorm): the micro-batches' step is then not
 * the batch's. */
ir_graph *ir_rebatch(const ir_graph *fwd, int n, const unsigned *batch, int *coupled, char *err, size_t errlen);

/* ---- JSON (format "carve-graph/1", docs/graph-format.md) -------------- */
/* Returns a new graph or NULL with a one-line message naming the place. */
ir_graph *ir_load_json(const char *text, char *err, size_t errlen);
ir_graph *ir_load_json_file(const char *path, char *err, size_t errlen);
/* Returns a malloc'd JSON string (caller frees), or NULL on out-of-memory. */
char *ir_save_json(const ir_graph *g);
/* Writes atomically (temporary file then rename). Returns 0 or -1 with message. */
int ir_save_json_file(const ir_graph *g, const char *path, char *err, size_t errlen);
/* The first key that object o (a cJSON object) holds twice, or NULL.  cJSON
 * keeps both and its lookups return the first, so every reader of a JSON file
 * (graphs, plans, profiles, schedules) refuses such an object with this. */
struct cJSON;
const char *ir_json_repeated_key(const struct cJSON *o);

#endif
