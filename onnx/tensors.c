/* tensors.c - TensorProto files as carve's executors hold tensors: the
 * node tests' input_N.pb and output_N.pb, and the reference values of
 * tests/onnx (a GraphProto whose initializers are the batch, the loss and the
 * gradients). */
#include "onnx/context.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole file at path (a regular file of at most 2 GiB; the caller
 * frees it) holding a message of type d nested at most OX_MAX_DEPTH deep,
 * or NULL with a message. */
static unsigned char *slurp(const char *path, const ProtobufCMessageDescriptor *d, size_t *n, char *err, size_t errlen)
{
    char why[160];
    unsigned char *buf = (unsigned char *)ir_read_input(path, (size_t)2 << 30, n, why, sizeof why);
    if (!buf) return ir_errf(err, errlen, "%s: cannot open: %s", path, why), NULL;
    if (ox_proto_depth(d, buf, *n) > OX_MAX_DEPTH) {
        free(buf);
        return ir_errf(err, errlen, "%s: messages nested more than %d deep", path, OX_MAX_DEPTH), NULL;
    }
    return buf;
}

/* Converts one TensorProto into t. */
static int convert(const char *path, const Onnx__TensorProto *p, onnx_tensor *t, char *err, size_t errlen)
{
    ox_ctx c;
    memset(&c, 0, sizeof c);
    c.err = err;
    c.errlen = errlen;
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", p->name ? p->name : "");
    ox_tensor *x = ox_tensor_from_proto(&c, p, p->name && p->name[0] ? p->name : "tensor");
    if (!x) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s", err);
        return ir_errf(err, errlen, "%s: %s", path, tmp);
    }
    t->elem_type = x->type;
    t->rank = x->rank;
    memcpy(t->dims, x->dims, sizeof t->dims);
    t->n = x->n;
    t->is_int = ox_type_is_int(x->type) && x->type != OX_BOOL;
    t->data = ir_xrealloc(NULL, (size_t)(x->n ? x->n : 1) * 4);
    for (int64_t i = 0; i < x->n; i++) {
        if (t->is_int) ((int32_t *)t->data)[i] = x->v[i] < INT32_MIN ? INT32_MIN : x->v[i] > INT32_MAX ? INT32_MAX : (int32_t)x->v[i];
        else ((float *)t->data)[i] = (float)x->v[i];
    }
    ox_tensor_free(x);
    return 0;
}

int onnx_tensor_read(const char *path, onnx_tensor *t, char *err, size_t errlen)
{
    size_t n;
    unsigned char *buf = slurp(path, &onnx__tensor_proto__descriptor, &n, err, errlen);
    if (!buf) return -1;
    Onnx__TensorProto *p = onnx__tensor_proto__unpack(NULL, n, buf);
    free(buf);
    if (!p) return ir_errf(err, errlen, "%s: not a TensorProto", path);
    int rc = convert(path, p, t, err, errlen);
    onnx__tensor_proto__free_unpacked(p, NULL);
    return rc;
}

void onnx_tensor_free(onnx_tensor *t)
{
    if (!t) return;
    free(t->data);
    t->data = NULL;
}

onnx_tensor *onnx_tensors_read_graph(const char *path, int *count, char *err, size_t errlen)
{
    size_t n;
    unsigned char *buf = slurp(path, &onnx__graph_proto__descriptor, &n, err, errlen);
    if (!buf) return NULL;
    Onnx__GraphProto *g = onnx__graph_proto__unpack(NULL, n, buf);
    free(buf);
    if (!g) return ir_errf(err, errlen, "%s: not a GraphProto", path), NULL;
    onnx_tensor *ts = ir_xcalloc(g->n_initializer + 1, sizeof *ts);
    for (size_t i = 0; i < g->n_initializer; i++) {
        if (convert(path, g->initializer[i], &ts[i], err, errlen) < 0) {
            for (size_t j = 0; j < i; j++) onnx_tensor_free(&ts[j]);
            free(ts);
            onnx__graph_proto__free_unpacked(g, NULL);
            return NULL;
        }
    }
    *count = (int)g->n_initializer;
    onnx__graph_proto__free_unpacked(g, NULL);
    return ts;
}
