/* context.h - the ONNX reader's lowest room: the import's context, its
 * values, constants, attributes, errors and what the shape ops mean (not part
 * of the API).
 *
 * The reader's files are layered, each room calling only the rooms below it:
 *   context.h  context.c (errors, the value table, inputs, attributes),
 *              tensor.c (constant tensors, TensorProto data), values.c
 *              (constants and shapes of values), shape.c (what Reshape,
 *              Slice, Split, Pad... mean, for folder and emitter alike);
 *   build.h    build.c (carve ops from values: builders, params, const
 *              arguments, causal masks, outputs), lazy.c (views, linears,
 *              and ox_ir, the carve value of any value);
 *   rows.h     the op table (ops.def, ops.c) and what its rows name: the
 *              emitters (emit*.c), the folders and scalar functions
 *              (fold.c), the patterns (patterns.c);
 *   steps.h    the import's steps below the driver: layers.c, layout.c;
 *   import.c   the driver (onnx.h's entry points), above them all.
 *
 * An import walks the graph's nodes in order with one ox_ctx.  Every ONNX
 * value name maps to an ox_val: a constant (a host tensor of doubles: the
 * folder's world), a carve value (the emitters' world), or an initializer
 * not read yet.  A node whose inputs are all constant is folded when its op
 * has a folder (onnx/fold.c); otherwise its emitter (onnx/emit_*.c) turns it
 * into carve ops, making carve values of constant inputs as it needs them
 * (a splat becomes a `constant` op, any other tensor a const argument with
 * its elements attached, shared by every use of equal contents).
 */
#ifndef CARVE_ONNX_CONTEXT_H
#define CARVE_ONNX_CONTEXT_H

#include <stdint.h>

#include "onnx/onnx.h"
#include "onnx/onnx.pb-c.h"

#define OX_MAX_RANK 8
/* Constants the folder makes or reads are held as doubles: at most this
 * many elements each (512 MiB; onnx_options.max_const lowers it). */
#define OX_MAX_CONST ((int64_t)1 << 26)
/* ... and all of them together, with the constant tables the graph keeps
 * (4 bytes an element), at most this many bytes (1 GiB; 16 x max_const
 * when onnx_options.max_const lowers it): a file of a few KB cannot ask for
 * more, however many constants it makes. */
#define OX_MAX_CONST_BYTES ((int64_t)1 << 30)

/* Messages nest at most this deep (a model is 1, its graph 2, ...; the
 * limit of Python's and C++'s protobuf readers): protobuf-c's unpack
 * recurses once a level with no limit of its own (onnx/depth.c). */
#define OX_MAX_DEPTH 100
/* How deep the message of type d in b[0..n) nests (1: no message inside),
 * read without recursion; OX_MAX_DEPTH + 1 as soon as it is deeper. */
int ox_proto_depth(const ProtobufCMessageDescriptor *d, const uint8_t *b, size_t n);

/* ONNX TensorProto.DataType */
enum {
    OX_FLOAT = 1, OX_UINT8 = 2, OX_INT8 = 3, OX_UINT16 = 4, OX_INT16 = 5, OX_INT32 = 6, OX_INT64 = 7,
    OX_STRING = 8, OX_BOOL = 9, OX_FLOAT16 = 10, OX_DOUBLE = 11, OX_UINT32 = 12, OX_UINT64 = 13,
    OX_BFLOAT16 = 16
};

/* A constant tensor: element type, shape, values as doubles (integers exact
 * up to 2^53; floats rounded to their type after every folded op).
 *
 * A fill (ConstantOfShape's result, an Expand of one element) of more than
 * OX_FILL_EAGER elements is kept without its elements (v NULL, fill set):
 * a file of a few hundred bytes can make any number of them.  Its elements
 * are made (ox_tensor_materialise, counted against OX_MAX_CONST_BYTES) only
 * when something reads them: a folder (ox_fold_node; Identity, Reshape and
 * the like, and Expand, pass a fill on as a fill), or any reader of
 * ox_const.  Only fill-aware readers take ox_const_lazy: the emitters make a
 * float fill a `constant` op, which holds no table. */
#define OX_FILL_EAGER 4096
typedef struct ox_tensor {
    int type;
    int rank;
    int64_t dims[OX_MAX_RANK];
    int64_t n;
    double *v;              /* n values, owned; NULL for a fill not materialised */
    int fill;               /* every element is fill_value (set for a lazy fill) */
    double fill_value;
    int64_t *live;          /* the import's count of constant bytes (ox_ctx.const_bytes), less n x 8 when freed */
} ox_tensor;

typedef enum { OX_UNSET, OX_CONST, OX_IR, OX_INIT } ox_kind;

/* A value not made as carve ops yet (onnx/lazy.c). */
enum { OX_LAZY_VIEW = 1, OX_LAZY_LINEAR };
typedef struct ox_val ox_val;
typedef struct ox_lazy {
    int kind;
    /* view: reshape(transpose(src, perm), dims); view dim i of the transpose is src dim perm[i] */
    int src;
    int8_t perm[OX_MAX_RANK];
    int rank;
    int64_t dims[OX_MAX_RANK];
    /* linear: einsum "sa,sw->so"(a, w) [+ bias over the last dim] */
    int a, w, bias;
    char sa[8], sw[8], so[8];
    ox_val *mm;             /* the MatMul's value (holds the einsum once made) */
} ox_lazy;

/* What an ONNX value name stands for. */
struct ox_val {
    const char *name;       /* points into the model (protobuf) */
    ox_kind kind;
    int type;               /* ONNX element type */
    ox_tensor *c;           /* OX_CONST: owned */
    int ir;                 /* OX_IR: carve value id */
    int init;               /* OX_INIT: index into graph->initializer */
    int param;              /* OX_INIT: becomes a trainable param */
    int needs_grad;         /* the loss depends on it differentiably */
    int layer;              /* layer tag of an initializer (-1: none) */
    ox_lazy *lazy;          /* OX_IR with ir = -1: what to make when a reader needs it (owned) */
};

/* A const argument made from a tensor, found again by contents. */
typedef struct ox_shared {
    uint64_t hash;
    int ir;
    /* a causal mask made on the device (import.c): rows x cols, `on` where
     * col <= row + k, `off` elsewhere; mask = 0: a const argument */
    int mask;
    int64_t rows, cols, k;
    double on, off;
} ox_shared;

typedef struct ox_row ox_row;

typedef struct ox_ctx {
    const char *path;       /* for messages */
    const char *dir;        /* the model's folder (external data), or NULL */
    const onnx_options *opt;
    onnx_info *info;
    Onnx__ModelProto *model;
    Onnx__GraphProto *graph;
    int opset;
    ir_graph *g;
    ox_val *vals;
    int n_vals, cap_vals;
    int *index;             /* open addressing over vals by name */
    int index_cap;
    ox_shared *shared;
    int n_shared, cap_shared;
    int *node_layer;        /* layer tag of each node */
    int *use_start, *uses;  /* the nodes reading each value (CSR over vals) */
    unsigned char *is_output; /* per val: a graph output */
    unsigned char *done;    /* per node: imported already, by a pattern (onnx/patterns.c) */
    int *remaining;         /* per val: readers not imported yet (a constant is freed at 0) */
    const Onnx__NodeProto *node; /* the node being imported (messages) */
    const ox_row *row;      /* the node's row of the op table (rows.h): emitters and folders read its columns */
    char *err;
    size_t errlen;
    int failed;
    int n_layers;
    int uid;                /* counter for the names of made values */
    int64_t const_bytes;    /* held by the constants alive and the graph's constant tables (OX_MAX_CONST_BYTES) */
} ox_ctx;

/* ---- errors (context.c) ------------------------------------------------------ */
/* Records the first error, prefixed with the node being imported; -1. */
int ox_fail(ox_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The graph builder's sticky error as an import error (-1), or 0. */
int ox_check_ir(ox_ctx *c);

/* 1 when s holds printable ASCII only (names carve keeps). */
int ox_is_printable(const char *s);

/* ---- the value table and inputs (context.c) ------------------------------------ */
ox_val *ox_val_get(ox_ctx *c, const char *name);     /* NULL when unknown */
ox_val *ox_val_put(ox_ctx *c, const char *name);     /* creates an OX_UNSET slot */
/* Input k of node n: its value, or NULL (absent optional input); a missing
 * name is an error. */
ox_val *ox_in(ox_ctx *c, const Onnx__NodeProto *n, int k);
int ox_n_in(const Onnx__NodeProto *n);               /* inputs up to the last present one */

/* ---- attributes (context.c) ----------------------------------------------------- */
const Onnx__AttributeProto *ox_attr(const Onnx__NodeProto *n, const char *name);
int64_t ox_attr_int(const Onnx__NodeProto *n, const char *name, int64_t dflt);
double ox_attr_float(const Onnx__NodeProto *n, const char *name, double dflt);
/* The ints of an attribute: count, or -1 when absent; at most max kept. */
int ox_attr_ints(const Onnx__NodeProto *n, const char *name, int64_t *out, int max);
/* The string of an attribute into buf ("" when absent). */
const char *ox_attr_str(const Onnx__NodeProto *n, const char *name, char *buf, size_t len);
/* Where `name` is in a space-separated attribute list (NAME or
 * NAME=DEFAULT, as ops.def's attrs column writes them), or NULL. */
const char *ox_attr_listed(const char *list, const char *name);
/* Float attribute `name` of n, else the default `list` gives it, else 0. */
double ox_attr_float_listed(const Onnx__NodeProto *n, const char *name, const char *list);

/* ---- tensors (tensor.c) ------------------------------------------------- */
ox_tensor *ox_tensor_new(ox_ctx *c, int type, int rank, const int64_t *dims);
/* Counts `bytes` more of constants against the import's bound
 * (OX_MAX_CONST_BYTES): 0, or -1 with a message when they do not fit. */
int ox_const_reserve(ox_ctx *c, int64_t bytes);
void ox_tensor_free(ox_tensor *t);
/* A tensor of `dims` whose elements all equal value (rounded to type): made
 * at once up to OX_FILL_EAGER elements, else kept lazy (v NULL). */
ox_tensor *ox_tensor_fill(ox_ctx *c, int type, int rank, const int64_t *dims, double value);
/* Makes a lazy fill's elements (counted against the bound); 0 or -1. */
int ox_tensor_materialise(ox_ctx *c, ox_tensor *t);
/* The first element (a lazy fill's value); t->n > 0. */
static inline double ox_tensor_first(const ox_tensor *t) { return t->v ? t->v[0] : t->fill_value; }
ox_tensor *ox_tensor_scalar(ox_ctx *c, int type, double v);
int ox_type_is_float(int type);
int ox_type_is_int(int type);  /* integers and bool */
const char *ox_type_name(int type);
/* Rounds x to what an element of `type` holds. */
double ox_round_to(int type, double x);
/* Reads a TensorProto (inline or external data) into a new constant. */
ox_tensor *ox_tensor_from_proto(ox_ctx *c, const Onnx__TensorProto *p, const char *what);
/* Checks a TensorProto's type and dims (rank <= OX_MAX_RANK, dims >= 0,
 * element count within 2^48); dims into out. */
int ox_proto_shape(ox_ctx *c, const Onnx__TensorProto *p, const char *what, int *rank, int64_t *dims, int64_t *n);
/* Reads the elements of a float TensorProto as n floats into dst. */
int ox_proto_read_f32(ox_ctx *c, const Onnx__TensorProto *p, const char *what, float *dst, int64_t n);
/* The carve dtype of an ONNX element type for data (-1: not supported). */
int ox_ir_dtype(int type);
/* 1 when every element of t equals the first. */
int ox_tensor_splat(const ox_tensor *t);
/* Numpy broadcasting of two shapes; -1 with an error when they do not fit. */
int ox_broadcast_shape(ox_ctx *c, int ra, const int64_t *a, int rb, const int64_t *b, int *r, int64_t *out);
/* A tensor of shape (rank, dims) broadcast to out_dims (rank out_rank),
 * walked in output order: after init, ox_bcast_next returns the input
 * offset of each output element in turn. */
typedef struct ox_bcast {
    int rank;
    int64_t dims[OX_MAX_RANK], stride[OX_MAX_RANK], idx[OX_MAX_RANK], off;
} ox_bcast;
void ox_bcast_init(ox_bcast *b, int rank, const int64_t *dims, int out_rank, const int64_t *out_dims);
static inline int64_t ox_bcast_next(ox_bcast *b)
{
    int64_t at = b->off;
    for (int d = b->rank - 1; d >= 0; d--) {
        b->off += b->stride[d];
        if (++b->idx[d] < b->dims[d]) break;
        b->off -= b->stride[d] * b->dims[d];
        b->idx[d] = 0;
    }
    return at;
}
/* Normalises an axis in [-rank, rank) to [0, rank); -1 with an error. */
int ox_axis(ox_ctx *c, int64_t axis, int rank, int64_t *out);
/* x as an int64, saturating (int64 values beyond 2^53, such as Slice's
 * INT64_MAX "to the end", come back as the nearest int64). */
int64_t ox_i64(double x);

/* ---- constants and shapes of values (values.c) ------------------------------ */
/* 1 when v is a constant the folder can read (a const, or an initializer not trained). */
int ox_is_const(const ox_val *v);
/* The constant tensor of v (reads an initializer on first use; makes a
 * lazy fill's elements), or NULL with an error. */
ox_tensor *ox_const(ox_ctx *c, ox_val *v);
/* The same, a lazy fill left lazy (v NULL): for readers that handle one. */
ox_tensor *ox_const_lazy(ox_ctx *c, ox_val *v);
/* v's shape (rank and dims), for carve values and constants alike. */
int ox_shape(ox_ctx *c, ox_val *v, int *rank, int64_t *dims);
/* Integer vector of a 0-D or 1-D integer constant (shape, axes, pads...). */
int ox_const_ints(ox_ctx *c, ox_val *v, const char *what, int64_t *out, int max, int *count);

/* ---- what shape ops mean, for folder and emitter alike (shape.c) --------- */
/* The result shape of a Reshape, Flatten, Squeeze or Unsqueeze node n on an
 * input of shape (rank, dims). */
typedef int (*ox_dims_fn)(ox_ctx *c, const Onnx__NodeProto *n, int rank, const int64_t *dims, int *out_rank, int64_t *out);
int ox_reshape_dims(ox_ctx *c, const Onnx__NodeProto *n, int rank, const int64_t *dims, int *out_rank, int64_t *out);
int ox_flatten_dims(ox_ctx *c, const Onnx__NodeProto *n, int rank, const int64_t *dims, int *out_rank, int64_t *out);
int ox_squeeze_dims(ox_ctx *c, const Onnx__NodeProto *n, int rank, const int64_t *dims, int *out_rank, int64_t *out);
int ox_unsqueeze_dims(ox_ctx *c, const Onnx__NodeProto *n, int rank, const int64_t *dims, int *out_rank, int64_t *out);
/* Slice's starts, ends (clamped, exclusive) and steps for every axis of an
 * input of shape (rank, dims): axes not sliced get 0, dims[d], 1. */
int ox_slice_params(ox_ctx *c, const Onnx__NodeProto *n, int rank, const int64_t *dims, int64_t *start, int64_t *end,
                    int64_t *step);
/* Split's axis and the size of each of its n_out pieces. */
int ox_split_sizes(ox_ctx *c, const Onnx__NodeProto *n, int rank, const int64_t *dims, int64_t *axis, int64_t *sizes, int n_out);
/* Transpose's permutation (reversed dims by default). */
int ox_perm(ox_ctx *c, const Onnx__NodeProto *n, int rank, int64_t *perm);
/* Pad's zero-based (before, after) per dim and the constant value. */
int ox_pad_params(ox_ctx *c, const Onnx__NodeProto *n, int rank, int64_t *before, int64_t *after, double *value);
/* Reduction axes of a Reduce* node (input 1 where `axes_input`, else the
 * attribute): a mask over the input's dims; *none when the node reduces
 * nothing. */
int ox_reduce_axes(ox_ctx *c, const Onnx__NodeProto *n, int rank, int axes_input, unsigned *mask, int *none);

#endif
