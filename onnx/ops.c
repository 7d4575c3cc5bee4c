/* ops.c - the table of ONNX ops (onnx/ops.def) and its lookup. */
#include "onnx/internal.h"

#include <stdio.h>
#include <string.h>

/* every emitter and folder the table names */
#define X(op, since, until, in_min, in_max, out_max, diff, attrs, emit, fold) \
    int emit_##emit(ox_ctx *c, const Onnx__NodeProto *n);                     \
    int fold_##fold(ox_ctx *c, const Onnx__NodeProto *n, ox_tensor **in, int n_in, ox_tensor **out, int n_out);
#include "onnx/ops.def"
#undef X
#define emit_none NULL
#define fold_none NULL

static const ox_row rows[] = {
#define X(op, since, until, in_min, in_max, out_max, diff, attrs, emit, fold) \
    {#op, since, until, in_min, in_max, out_max, diff, attrs, emit_##emit, fold_##fold},
#include "onnx/ops.def"
#undef X
};

const ox_row *ox_row_find(const char *op, int opset, int *other_versions)
{
    if (other_versions) *other_versions = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (strcmp(rows[i].op, op)) continue;
        if (opset >= rows[i].since && opset <= rows[i].until) return &rows[i];
        if (other_versions) *other_versions = 1;
    }
    return NULL;
}

void ox_ops_list(char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0] && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? " " : "", rows[i].op);
}
