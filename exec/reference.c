/* reference.c - the single-device reference executor.
 *
 * An exec_ref holds one buffer per value of a borrowed graph, sized for the
 * value's global shape, all in one arena (arena.h: huge pages, ASan guards
 * between buffers), and runs the ops in order through exec_kernel_run (BLIS
 * with one thread for einsum), except that runs of elementwise ops go
 * through fuse.h tile by tile, as on the SPMD devices.  Values the caller
 * may read after a run (outputs, the loss, gradients) are always written;
 * an intermediate that only feeds ops of its own group is not.  Every value is
 * stored with 4-byte elements: f32 and i32 as themselves, and bf16/f16
 * values are executed as f32 (the reference gives the numbers of the
 * computation, not of its rounding), so exec_ref_bytes counts 4 bytes per
 * element whatever the dtype.
 */
#include "exec/arena.h"
#include "exec/exec.h"
#include "exec/fuse.h"
#include "exec/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct exec_ref {
    const ir_graph *g;
    void **buf; /* one per value, in the arena */
    exec_arena arena;
    spmd_fuse_plan fuse;
};

static size_t value_bytes(const ir_value *v) { return (size_t)ir_numel(v) * 4; }

size_t exec_ref_bytes(const ir_graph *g)
{
    size_t n = 0;
    for (int v = 0; v < g->n_values; v++) n += exec_arena_size(value_bytes(&g->values[v]));
    return n;
}

/* Groups the graph's elementwise chains (fuse.h).  Observed: outputs, the
 * loss and gradients (the SPMD check reads the reference's gradients). */
static int plan_fusion(exec_ref *r)
{
    const ir_graph *g = r->g;
    spmd_fuse_item *it = calloc((size_t)(g->n_ops ? g->n_ops : 1), sizeof *it);
    uint8_t *observed = calloc((size_t)(g->n_values ? g->n_values : 1), 1);
    int rc = -1;
    if (!it || !observed) goto done;
    for (int v = 0; v < g->n_values; v++) observed[v] = g->values[v].grad_of >= 0;
    for (int i = 0; i < g->n_outputs; i++) observed[g->outputs[i].value] = 1;
    if (g->loss >= 0) observed[g->loss] = 1;
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *op = &g->ops[i];
        int64_t n[IR_MAX_OPERANDS];
        for (int k = 0; k < op->n_in; k++) n[k] = ir_numel(&g->values[op->in[k]]);
        spmd_fuse_describe(&it[i], g, op, op->in, n, op->out, ir_numel(&g->values[op->out]));
    }
    rc = spmd_fuse_plan_build(&r->fuse, it, g->n_ops, g->n_values, observed, !spmd_fuse_disabled_by_env());
done:
    free(it);
    free(observed);
    return rc;
}

exec_ref *exec_ref_new(const ir_graph *g, size_t max_bytes, char *err, size_t errlen)
{
    int missing = ir_data_missing(g);
    if (missing >= 0) {
        ir_errf(err, errlen, "graph '%s': argument '%s' takes its values from data that was not loaded", g->name,
                g->values[missing].name);
        return NULL;
    }
    size_t need = exec_ref_bytes(g);
    if (max_bytes && need > max_bytes) {
        if (err && errlen)
            snprintf(err, errlen, "graph '%s': the reference executor needs %zu bytes (%.1f MiB) of buffers, above the limit of %zu bytes",
                     g->name, need, (double)need / 1048576.0, max_bytes);
        return NULL;
    }
    exec_ref *r = calloc(1, sizeof *r);
    void **buf = calloc((size_t)(g->n_values ? g->n_values : 1), sizeof *buf);
    if (!r || !buf) goto oom;
    r->g = g;
    r->buf = buf;
    size_t layout = 0;
    for (int v = 0; v < g->n_values; v++) layout += exec_arena_slot(value_bytes(&g->values[v]));
    if (exec_arena_map(&r->arena, layout) < 0) goto oom;
    size_t off = 0;
    for (int v = 0; v < g->n_values; v++) {
        size_t n = value_bytes(&g->values[v]);
        buf[v] = r->arena.base + off;
        exec_arena_place(&r->arena, off, n);
        off += exec_arena_slot(n);
    }
    if (plan_fusion(r) < 0) goto oom;
    return r;
oom:
    if (err && errlen) snprintf(err, errlen, "graph '%s': out of memory allocating %zu bytes of buffers", g->name, need);
    if (r) {
        r->buf = buf;
        r->g = g;
        exec_ref_free(r);
    } else {
        free(buf);
    }
    return NULL;
}

void exec_ref_free(exec_ref *r)
{
    if (!r) return;
    exec_arena_unmap(&r->arena);
    spmd_fuse_plan_free(&r->fuse);
    free(r->buf);
    free(r);
}

void *exec_ref_data(exec_ref *r, int v) { return r->buf[v]; }

void exec_ref_init_args(exec_ref *r, uint64_t seed)
{
    for (int v = 0; v < r->g->n_values; v++) {
        const ir_value *x = &r->g->values[v];
        if (x->role != IR_INTERMEDIATE) exec_fill_range(r->g, v, seed, 0, ir_numel(x), r->buf[v]);
    }
}

static exec_tensor tensor_of(exec_ref *r, int v)
{
    const ir_value *x = &r->g->values[v];
    exec_tensor t = {.dtype = x->dtype, .rank = x->rank, .data = r->buf[v]};
    memcpy(t.dims, x->dims, sizeof t.dims);
    return t;
}

/* Runs the fused group of ops [i, i + len). */
static void run_group(exec_ref *r, int i, int len)
{
    const ir_graph *g = r->g;
    const float *in[2 * FUSE_MAX_GROUP];
    float *out[FUSE_MAX_GROUP];
    for (int m = 0; m < len; m++) {
        const ir_op *op = &g->ops[i + m];
        for (int k = 0; k < op->n_in && k < 2; k++) in[2 * m + k] = r->buf[op->in[k]];
        out[m] = r->buf[op->out];
    }
    exec_fuse_run(&r->fuse.step[i], len, ir_numel(&g->values[g->ops[i].out]), in, out);
}

int exec_ref_run(exec_ref *r, char *err, size_t errlen)
{
    const ir_graph *g = r->g;
    for (int i = 0; i < g->n_ops; i++) {
        int len = r->fuse.len[i];
        if (len > 1) {
            run_group(r, i, len);
            i += len - 1;
            continue;
        }
        const ir_op *op = &g->ops[i];
        exec_tensor in[IR_MAX_OPERANDS], out = tensor_of(r, op->out);
        for (int j = 0; j < op->n_in; j++) in[j] = tensor_of(r, op->in[j]);
        char msg[256];
        if (exec_kernel_run(op->kind, &op->attrs, op->n_in, in, &out, NULL, msg, sizeof msg) < 0) {
            if (err && errlen)
                snprintf(err, errlen, "op %d (%s -> '%s'): %s", i, ir_op_name(op->kind), g->values[op->out].name, msg);
            return -1;
        }
    }
    return 0;
}

void exec_ref_apply_updates(exec_ref *r)
{
    const ir_graph *g = r->g;
    /* An output that is itself an argument (e.g. a state passed through) must
     * be read before any argument is overwritten: swap through a copy. */
    void **saved = calloc((size_t)(g->n_outputs ? g->n_outputs : 1), sizeof *saved);
    if (!saved) {
        ir_oom(0);
    }
    for (int i = 0; i < g->n_outputs; i++) {
        const ir_output *o = &g->outputs[i];
        if (o->updates < 0 || o->updates == o->value || g->values[o->value].role == IR_INTERMEDIATE) continue;
        size_t n = value_bytes(&g->values[o->value]);
        saved[i] = malloc(n ? n : 4);
        if (!saved[i]) {
            ir_oom(n);
        }
        memcpy(saved[i], r->buf[o->value], n);
    }
    for (int i = 0; i < g->n_outputs; i++) {
        const ir_output *o = &g->outputs[i];
        if (o->updates < 0 || o->updates == o->value) continue;
        const void *src = saved[i] ? saved[i] : r->buf[o->value];
        memcpy(r->buf[o->updates], src, value_bytes(&g->values[o->updates]));
        free(saved[i]);
    }
    free(saved);
}

double exec_ref_loss(exec_ref *r)
{
    if (r->g->loss < 0) return NAN;
    return (double)((const float *)r->buf[r->g->loss])[0];
}

void exec_ref_fusion(const exec_ref *r, int *groups, int *fused_ops)
{
    *groups = r->fuse.n_groups;
    *fused_ops = r->fuse.n_fused;
}

const ir_graph *exec_ref_graph(const exec_ref *r) { return r->g; }
