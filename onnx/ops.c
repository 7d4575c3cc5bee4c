/* ops.c - the table of ONNX ops (onnx/ops.def) and its lookup. */
#include "onnx/rows.h"

#include <stdio.h>
#include <string.h>

/* the table's `none`: no emitter, folder, carve op or scalar function */
#define emit_none NULL
#define fold_none NULL
#define sc_none NULL
#define IR_OP_none ((ir_opkind)IR_N_OPS)

static const ox_row rows[] = {
#define X(op, since, until, in_min, in_max, out_max, diff, attrs, emit, fold, ir, scalar) \
    {#op, since, until, in_min, in_max, out_max, diff, attrs, emit_##emit, fold_##fold, IR_OP_##ir, sc_##scalar},
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
