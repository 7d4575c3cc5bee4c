/* fill.c - seeded argument values, a pure function of (seed, name, index).
 *
 * Element i of argument `name` is made from output i of one PCG32 generator
 * seeded with (seed, stream = FNV-1a 64 hash of name), and from nothing else:
 * every element takes exactly one output (ids use a multiply-shift instead of
 * rejection sampling, so no element ever takes two).  Filling a range starts
 * the generator with pcg32_advance(start), so a device can fill its shard of
 * a parameter without making the whole tensor, and gets the same numbers.
 *
 * Mapping by ir_init (values are "uniform with std s": uniform on
 * [-sqrt(3) s, sqrt(3) s], whose standard deviation is s):
 *   AUTO   params/inputs f32: std 1/sqrt(dims[0]) for rank >= 2, else 0.02;
 *          optimizer states: zeros; i32: ids in [0, 2)
 *   NORMAL uniform with std init_arg        ZEROS / ONES
 *   IDS    ids in [0, init_arg)
 *   DATA   the elements attached to the graph (ir_data): copied, not drawn
 */
#include "exec/exec.h"
#include "ir/hash.h"
#include "ir/pcg32.h"

#include <math.h>
#include <string.h>

typedef enum { FILL_UNIFORM, FILL_CONST, FILL_IDS } fill_kind;

void exec_fill_range(const ir_graph *g, int v, uint64_t seed, int64_t start, int64_t count, void *dst)
{
    exec_fill_value(&g->values[v], ir_data(g, v), seed, start, count, dst);
}

void exec_fill_value(const ir_value *x, const void *data, uint64_t seed, int64_t start, int64_t count, void *dst)
{
    int is_int = x->dtype == IR_I32;
    if (x->init == IR_INIT_DATA) { /* exec_ref_new and exec_spmd_new refuse a graph missing its data */
        if (data) memcpy(dst, (const char *)data + 4 * start, (size_t)count * 4);
        else memset(dst, 0, (size_t)count * 4);
        return;
    }
    fill_kind kind = FILL_CONST;
    double c = 0, std = 0;
    uint32_t bound = 2;
    switch (x->init) {
    case IR_INIT_AUTO:
        if (x->role == IR_OPT_STATE) kind = FILL_CONST;
        else if (is_int) kind = FILL_IDS;
        else {
            kind = FILL_UNIFORM;
            std = x->rank >= 2 ? 1.0 / sqrt((double)x->dims[0]) : 0.02;
        }
        break;
    case IR_INIT_NORMAL:
        kind = is_int ? FILL_CONST : FILL_UNIFORM;
        std = x->init_arg;
        break;
    case IR_INIT_ZEROS:
        break;
    case IR_INIT_ONES:
        c = 1;
        break;
    case IR_INIT_IDS:
        kind = FILL_IDS;
        bound = x->init_arg >= 1 && x->init_arg <= 4294967295.0 ? (uint32_t)x->init_arg : 1;
        break;
    case IR_INIT_DATA:
    case IR_N_INITS:
        break;
    }
    if (kind == FILL_CONST) {
        for (int64_t i = 0; i < count; i++) {
            if (is_int) ((int32_t *)dst)[i] = (int32_t)c;
            else ((float *)dst)[i] = (float)c;
        }
        return;
    }
    pcg32 r;
    pcg32_seed(&r, seed, ir_fill_stream(x));
    pcg32_advance(&r, (uint64_t)start);
    double half_width = sqrt(3.0) * std;
    for (int64_t i = 0; i < count; i++) {
        uint32_t u = pcg32_next(&r);
        if (kind == FILL_IDS) {
            int32_t id = (int32_t)(((uint64_t)u * bound) >> 32);
            if (is_int) ((int32_t *)dst)[i] = id;
            else ((float *)dst)[i] = (float)id;
        } else {
            /* (u + 0.5) / 2^32 is in (0, 1): map it to (-1, 1) */
            double t = ((double)u + 0.5) * (2.0 / 4294967296.0) - 1.0;
            ((float *)dst)[i] = (float)(t * half_width); /* never i32: see the switch */
        }
    }
}
