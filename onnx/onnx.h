/* onnx.h - ONNX files as a front end of carve's IR.
 *
 * onnx_import reads a model file (protobuf, through protobuf-c's reader of
 * onnx.proto: onnx/onnx.pb-c.c) and builds the forward graph carve derives a
 * training step from, as the graph JSON reader and the model builders do:
 *
 *   - every node becomes carve ops through one table (onnx/ops.def: ONNX op
 *     type and opset -> an emitter of carve ops, and a folder);
 *   - nodes whose inputs are all constants (Constant, ConstantOfShape,
 *     Shape of a static shape, the exporter's Equal/Where/Expand chains,
 *     initializers that are not trained) are evaluated here (onnx/fold.c):
 *     none of them reaches the partitioner as ops;
 *   - a float initializer that the loss depends on differentiably is a
 *     trainable param under its own name; other initializers are constants;
 *     graph inputs are the batch;
 *   - repeated blocks (the exporter's scoped names "/h.3/attn/...", the
 *     state_dict names "h.3.attn.c_attn.weight") get layer tags;
 *   - the loss is the graph's scalar output, or one appended (`loss`).
 *
 * Shapes must be static: a symbolic dim needs a value (`dims`).  Weights
 * (and constant tables) are attached to the graph (ir_data) only when asked;
 * without, nothing but shapes is read from the initializers that stay params,
 * so a model of many GB is imported in little memory (external data files
 * are then not even opened).
 */
#ifndef CARVE_ONNX_H
#define CARVE_ONNX_H

#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"

/* The opsets a model may declare for the default ONNX domain. */
#define ONNX_OPSET_MIN 13
#define ONNX_OPSET_MAX 20

typedef struct onnx_options {
    int weights;            /* 1: attach the params' values (the file's weights) for running */
    const char *dims;       /* values of symbolic dims, "batch=8,seq=128" (NULL: none) */
    const char *loss;       /* NULL: the graph's scalar output is the loss;
                               "cross_entropy:OUT[,LABELS]", "mse:OUT[,TARGET]" append one
                               (LABELS/TARGET: a graph input, or a new input of that name) */
    const char *frozen;     /* comma-separated globs of float initializers kept constant */
    int outputs;            /* 1: no loss; the graph's outputs become the graph's outputs
                               (tests that run single nodes) */
    int opset_lo;           /* lowest opset accepted (0: ONNX_OPSET_MIN); ops whose version in
                               effect there is the one carve implements are read (node tests) */
    const struct onnx_tensor *known; /* graph inputs given by value: constants, folded through */
    int n_known;
    int64_t max_const;      /* elements a folded constant may hold (0: 2^26) */
} onnx_options;

/* What an import found, for the command to report. */
typedef struct onnx_info {
    int opset;
    int64_t ir_version;
    int nodes;              /* nodes of the file */
    int folded;             /* nodes evaluated at import (constants) */
    int patterns;           /* runs of nodes imported as one carve op (onnx/patterns.c) */
    int params, consts, inputs;
    int layers;             /* repeated blocks tagged */
    int generated_names;    /* params under names the exporter made ("onnx::MatMul_928") */
    int heads_layout;       /* params held split as their one reader splits them (onnx/layout.c) */
    int fused_projections;  /* fused projections (q, k, v of one param) cut into their parts (onnx/fused.c) */
    char op_types[256];     /* the model's distinct op types, space-separated (cut at 255) */
    char notes[1024];       /* one-line remarks ("; "-separated): generated names, frozen
                               float initializers, dropped outputs; "" if none */
} onnx_info;

/* Imports the ONNX file at `path`.  Returns a new forward graph (caller frees
 * with ir_free) with a loss (or, with o->outputs, its outputs), or NULL with
 * one line in err: "PATH: node 'NAME' (OP, opset N): what is wrong",
 * "PATH: input 'x': dim 0 is symbolic ('batch'): give its value with --dim
 * batch=N", "PATH: not an ONNX model (...)".  info may be NULL. */
ir_graph *onnx_import(const char *path, const onnx_options *o, onnx_info *info, char *err, size_t errlen);
/* The same from bytes in memory (a fuzzer); external data is looked for in
 * folder `dir` (NULL: none allowed).  `name` is used in messages. */
ir_graph *onnx_import_bytes(const void *data, size_t n, const char *name, const char *dir, const onnx_options *o,
                            onnx_info *info, char *err, size_t errlen);

/* Attaches to g (a graph imported from path with options o without
 * weights, or its training step) the file's weights: every param of g that
 * has no data gets the elements of the initializer it was made from.
 * Returns 0, or -1 with a message (a missing external data file...). */
int onnx_load_weights(const char *path, const onnx_options *o, ir_graph *g, char *err, size_t errlen);

/* 1 when path names an ONNX file by its extension (.onnx): how commands
 * choose this reader over the graph JSON's. */
int onnx_is_onnx_path(const char *path);

/* ---- tensors (the node tests' input_N.pb / output_N.pb) ---------------- */

/* A tensor read from a TensorProto file: elements converted to what carve's
 * executors hold (float for floating types and bool, int32_t for integers). */
typedef struct onnx_tensor {
    char name[128];
    int elem_type;          /* ONNX TensorProto.DataType */
    int rank;
    int64_t dims[8];
    int64_t n;
    int is_int;             /* data holds int32_t */
    void *data;             /* n 4-byte elements, owned */
} onnx_tensor;

/* Reads a serialized TensorProto file.  Returns 0, or -1 with a message. */
int onnx_tensor_read(const char *path, onnx_tensor *t, char *err, size_t errlen);
void onnx_tensor_free(onnx_tensor *t);
/* Reads every initializer of a serialized GraphProto (the .ref.pb files of tests/onnx)
 * into a new array; *n receives the count.  NULL with a message on error. */
onnx_tensor *onnx_tensors_read_graph(const char *path, int *n, char *err, size_t errlen);

#endif
