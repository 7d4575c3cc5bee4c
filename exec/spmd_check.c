/* spmd_check.c - global tensors from device blocks, and the comparison of an
 * SPMD step with the reference executor's.
 *
 * A buffer's layout splits the mesh axes three ways: axes that tile a dim
 * (each device holds a different block), partial axes (the devices along
 * them hold terms to be summed, or maxed) and the rest, on which devices hold
 * replicas.  Assembling takes each block from the devices whose coordinate on
 * every replica axis is 0, reduces over the partial axes, and compares every
 * other replica with the one it copies.
 */
#include "exec/spmd_impl.h"
#include "ir/hash.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Calls fn(global_offset, local_offset, run) for every run of contiguous
 * elements of device dev's block of buffer b. */
typedef struct run_ctx {
    int64_t org[IR_MAX_RANK], ld[IR_MAX_RANK], vd[IR_MAX_RANK], gs[IR_MAX_RANK];
    int rank;
} run_ctx;

static void run_ctx_of(exec_spmd *r, int b, int dev, run_ctx *c)
{
    const ir_value *v = &r->g->values[r->p->bufs[b].value];
    spmd_block blk;
    spmd_block_of(r, b, dev, &blk);
    c->rank = v->rank;
    memcpy(c->org, blk.org, sizeof c->org);
    memcpy(c->ld, blk.dims, sizeof c->ld);
    memcpy(c->vd, blk.valid, sizeof c->vd);
    exec_row_major_strides(v->rank, v->dims, c->gs);
}

typedef enum { PUT_COPY, PUT_ADD, PUT_MAX } put_kind;

static void put_block(const run_ctx *c, put_kind k, int is_int, const void *src, void *global)
{
    int rank = c->rank;
    int64_t inner = rank ? c->vd[rank - 1] : 1, idx[IR_MAX_RANK] = {0}, ls[IR_MAX_RANK], count = 1;
    exec_row_major_strides(rank, c->ld, ls);
    for (int d = 0; d < rank - 1; d++) count *= c->vd[d];
    if (inner <= 0) return;
    /* the runs of the valid box (padding holds no data) */
    for (int64_t run = 0; run < count; run++) {
        int64_t g0 = 0, l0 = 0;
        for (int d = 0; d < rank; d++) {
            g0 += (c->org[d] + (d < rank - 1 ? idx[d] : 0)) * c->gs[d];
            if (d < rank - 1) l0 += idx[d] * ls[d];
        }
        const float *s = (const float *)src + l0;
        float *o = (float *)global + g0;
        if (k == PUT_COPY || is_int) memcpy(o, s, (size_t)inner * 4);
        else if (k == PUT_ADD)
            for (int64_t i = 0; i < inner; i++) o[i] += s[i];
        else
            for (int64_t i = 0; i < inner; i++)
                if (s[i] > o[i] || s[i] != s[i]) o[i] = s[i];
        for (int d = rank - 2; d >= 0; d--) {
            if (++idx[d] < c->vd[d]) break;
            idx[d] = 0;
        }
    }
}

static double block_diff(const void *a, const void *b, int64_t n, int is_int)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double d;
        if (is_int) d = fabs((double)((const int32_t *)a)[i] - (double)((const int32_t *)b)[i]);
        else {
            float x = ((const float *)a)[i], y = ((const float *)b)[i];
            d = (isnan(x) || isnan(y)) ? (isnan(x) && isnan(y) ? 0 : INFINITY) : fabs((double)x - (double)y);
        }
        if (d > worst) worst = d;
    }
    return worst;
}

void exec_spmd_assemble(exec_spmd *r, int b, void *global, double *replica_diff)
{
    const spmd_program *p = r->p;
    const shard_mesh *m = &p->mesh;
    const spmd_buffer *sb = &p->bufs[b];
    const ir_value *v = &r->g->values[sb->value];
    int is_int = v->dtype == IR_I32;
    unsigned tiled = shard_spec_tiled(&sb->spec, v->rank), partial = sb->spec.partial;
    unsigned replica = ((1u << m->n_axes) - 1) & ~tiled & ~partial;
    double worst = 0;
    run_ctx c;
    /* a block from another process lands here (threads: never used) */
    void *tmp = r->n_local < r->n_dev ? malloc((size_t)r->numel[b] * 4 + 4) : NULL;
    if (r->n_local < r->n_dev && !tmp) {
        spmd_set_error(r, "device %d: out of memory assembling '%s'", r->local[0], v->name);
        r->be->fail(r);
        return;
    }
    /* a pipeline's stages hold different buffers: the value is its home stage's copy */
    int home = spmd_home_stage(r, b), pipe_axis = home >= 0 ? spmd_pipe_axis(r) : -1;
    for (int dev = 0; dev < r->n_dev; dev++) {
        int64_t rep = dev; /* the device with replica coordinates 0 (on a pipeline axis: home) */
        int on_partial = 0;
        if (!spmd_holds(r, dev, b)) continue;
        for (int a = 0; a < m->n_axes; a++) {
            int64_t coord = shard_device_coord(m, dev, a);
            if (replica & (1u << a)) rep -= (coord - (a == pipe_axis ? home : 0)) * r->axis_stride[a];
            if ((partial & (1u << a)) && coord) on_partial = 1;
        }
        if (rep != dev) {
            if (!replica_diff) continue;
            const void *other = r->be->fetch(r, b, (int)rep, dev, tmp);
            if (other) {
                double d = block_diff(spmd_buf(r, dev, b), other, r->numel[b], is_int);
                if (d > worst) worst = d;
            }
            continue;
        }
        /* devices with partial coordinates 0 come first in device order */
        const void *src = r->be->fetch(r, b, dev, 0, tmp);
        if (!src || !global) continue;
        run_ctx_of(r, b, dev, &c);
        put_kind k = !on_partial ? PUT_COPY : (sb->spec.partial_max & partial) ? PUT_MAX : PUT_ADD;
        put_block(&c, k, is_int, src, global);
    }
    free(tmp);
    if (replica_diff) *replica_diff = r->be->max_all(r, worst);
}

int exec_spmd_check_init(exec_spmd_check *c, const ir_graph *g, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->g = g;
    c->worst_param_out = c->worst_state_out = -1;
    c->loss = c->loss_ref = c->loss_rel = NAN;
    c->n_outputs = g->n_outputs;
    c->rel = calloc((size_t)(g->n_outputs ? g->n_outputs : 1), sizeof *c->rel);
    c->noise = calloc((size_t)(g->n_values ? g->n_values : 1), sizeof *c->noise);
    if (!c->rel || !c->noise) goto oom;
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role != IR_OPT_STATE || x->tied < 0 || c->noise[x->tied]) continue;
        c->noise[x->tied] = calloc((size_t)(ir_numel(&g->values[x->tied]) + 1), 1);
        if (!c->noise[x->tied]) goto oom;
    }
    return 0;
oom:
    if (err && errlen) snprintf(err, errlen, "out of memory preparing the check of '%s'", g->name);
    exec_spmd_check_free(c);
    return -1;
}

void exec_spmd_check_free(exec_spmd_check *c)
{
    if (!c) return;
    if (c->noise)
        for (int v = 0; v < c->g->n_values; v++) free(c->noise[v]);
    free(c->noise);
    free(c->rel);
    c->noise = NULL;
    c->rel = NULL;
}

int exec_spmd_check_ok(const exec_spmd_check *c, double tol)
{
    return c->steps > 0 && c->worst_loss <= tol && c->worst_param <= tol && c->worst_state <= tol;
}

/* max|x - ref| / max|ref| (absolute when ref is all zeros).  A value that
 * is not finite in either (NaN, an infinity) counts as infinitely wrong,
 * even where both agree: NaN against NaN proves nothing (a loss of NaN
 * passed the check before).  Elements with skip[i] set are not compared
 * (skip NULL: none); counts go to *compared and *excluded.  *magnitude: in,
 * a floor under max|ref| (0: none); out, the magnitude divided by. */
static double rel_error(const float *x, const float *ref, int64_t n, const uint8_t *skip, int64_t *compared,
                        int64_t *excluded, double *magnitude)
{
    double diff = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isfinite(ref[i]) && fabs((double)ref[i]) > mag) mag = fabs((double)ref[i]);
        if (skip && skip[i]) {
            (*excluded)++;
            continue;
        }
        (*compared)++;
        double d;
        if (!isfinite(x[i]) || !isfinite(ref[i])) d = INFINITY;
        else d = fabs((double)x[i] - (double)ref[i]);
        if (d > diff) diff = d;
    }
    if (*magnitude > mag) mag = *magnitude; /* the caller's floor (a param: the largest update) */
    else *magnitude = mag;
    return mag > 0 ? diff / mag : diff;
}

/* The largest change of any param element in the reference's step: each
 * updated param's output against its argument.  An update carries its
 * gradient's rounding error (under SGD lr times it), so a param whose values
 * are all smaller than this (a zero-initialised bias after a few steps,
 * whose gradient may be zero in exact arithmetic and rounding noise as
 * computed: BERT's key bias) is measured against it: its gradient against the
 * gradient scale of the whole model (docs/run.md). */
static double largest_update(const ir_graph *g, exec_ref *ref)
{
    double u = 0;
    for (int i = 0; i < g->n_outputs; i++) {
        const ir_output *o = &g->outputs[i];
        if (o->updates < 0 || g->values[o->updates].role != IR_PARAM || g->values[o->value].dtype == IR_I32) continue;
        const float *after = exec_ref_data(ref, o->value), *before = exec_ref_data(ref, o->updates);
        if (!after || !before) continue;
        for (int64_t k = 0; k < ir_numel(&g->values[o->value]); k++) {
            double d = fabs((double)after[k] - (double)before[k]);
            if (isfinite(d) && d > u) u = d;
        }
    }
    return u;
}

/* Marks, for every param with optimizer state, the elements whose reference
 * gradient of this step is below the noise floor (and clears the others). */
static void mark_noise(exec_spmd_check *c, exec_ref *ref)
{
    const ir_graph *g = c->g;
    double largest = 0;
    for (int v = 0; v < g->n_values; v++)
        if (c->noise[v]) memset(c->noise[v], 0, (size_t)ir_numel(&g->values[v]));
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->grad_of < 0 || x->dtype == IR_I32) continue;
        const float *d = exec_ref_data(ref, v);
        for (int64_t i = 0; i < ir_numel(x); i++)
            if (fabs((double)d[i]) > largest) largest = fabs((double)d[i]);
    }
    double floor = EXEC_SPMD_NOISE_FLOOR * largest;
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->grad_of < 0 || x->dtype == IR_I32 || !c->noise[x->grad_of]) continue;
        if (ir_numel(x) != ir_numel(&g->values[x->grad_of])) continue;
        const float *d = exec_ref_data(ref, v);
        uint8_t *m = c->noise[x->grad_of];
        for (int64_t i = 0; i < ir_numel(x); i++)
            if (fabs((double)d[i]) < floor) m[i] = 1;
    }
}

/* The check's output (of c->g, the reference's graph) that the runtime's
 * output i (of rg) is: the same index when both run one graph, else the
 * output updating the argument of the same name, or the loss (a pipeline's
 * body against the unrolled step).  -1 when there is none. */
static int ref_output(const exec_spmd_check *c, const ir_graph *rg, int i)
{
    const ir_graph *g = c->g;
    if (g == rg) return i;
    const ir_output *o = &rg->outputs[i];
    int u = o->updates >= 0 ? ir_find(g, rg->values[o->updates].name) : -1;
    for (int j = 0; j < g->n_outputs; j++)
        if (o->updates >= 0 ? g->outputs[j].updates == u && u >= 0 : o->value == rg->loss && g->outputs[j].value == g->loss) return j;
    return -1;
}

/* The error of output i of the check's graph (got: its elements assembled
 * from the devices) against the reference's (want): relative to its
 * largest magnitude, a param's to the step's largest update where that is
 * larger; Adam-updated elements below the noise floor skipped. */
static double output_error(exec_spmd_check *c, int i, const void *got, const void *want, int64_t *compared, int64_t *excluded)
{
    const ir_graph *g = c->g;
    const ir_output *o = &g->outputs[i];
    const ir_value *v = &g->values[o->value];
    int64_t n = ir_numel(v);
    if (v->dtype == IR_I32) return memcmp(got, want, (size_t)n * 4) ? 1.0 : 0.0;
    /* the param this output belongs to, when it is updated through state */
    int param = o->updates < 0 ? -1 : g->values[o->updates].role == IR_PARAM ? o->updates : g->values[o->updates].tied;
    const uint8_t *skip = NULL;
    if (param >= 0 && c->noise[param] && ir_numel(&g->values[param]) == n) skip = c->noise[param];
    int is_param = o->updates >= 0 && g->values[o->updates].role == IR_PARAM;
    double floor = is_param ? c->largest_update : 0, mag = floor;
    double e = rel_error(got, want, n, skip, compared, excluded, &mag);
    c->n_update_scaled += is_param && floor > 0 && mag == floor;
    return isnan(e) ? INFINITY : e;
}

/* Records output i's error e (the loss's: with its values) in c. */
static void record_error(exec_spmd_check *c, int i, double e, const void *got, const void *want, int64_t compared,
                         int64_t excluded)
{
    const ir_graph *g = c->g;
    const ir_output *o = &g->outputs[i];
    c->rel[i] = e;
    if (o->value == g->loss) {
        c->loss = (double)((const float *)got)[0];
        c->loss_ref = (double)((const float *)want)[0];
        c->loss_rel = e;
        if (e > c->worst_loss) c->worst_loss = e;
    }
    if (o->updates < 0) return;
    c->n_compared += compared;
    c->n_excluded += excluded;
    if (g->values[o->updates].role == IR_OPT_STATE) {
        if (c->worst_state_out < 0 || e > c->worst_state) {
            c->worst_state = e;
            c->worst_state_out = i;
        }
    } else if (c->worst_param_out < 0 || e > c->worst_param) {
        c->worst_param = e;
        c->worst_param_out = i;
    }
}

int exec_spmd_compare(exec_spmd *r, exec_ref *ref, exec_spmd_check *c, char *err, size_t errlen)
{
    const ir_graph *rg = r->g, *g = c->g;
    if (!ref) { /* not the root: send the blocks the root assembles */
        c->steps++;
        for (int i = 0; i < rg->n_outputs; i++) {
            double rd = 0;
            exec_spmd_assemble(r, r->p->out_buf[i], NULL, &rd);
        }
        return 0;
    }
    mark_noise(c, ref);
    c->steps++;
    c->n_compared = c->n_excluded = 0;
    c->largest_update = largest_update(g, ref);
    c->n_update_scaled = 0;
    c->digest = IR_FNV_OFFSET;
    for (int ri = 0; ri < rg->n_outputs; ri++) {
        int i = ref_output(c, rg, ri);
        if (i < 0 || ir_numel(&g->values[g->outputs[i].value]) != ir_numel(&rg->values[rg->outputs[ri].value])) {
            if (err && errlen)
                snprintf(err, errlen, "output '%s' of the run has no match in the reference '%s'", rg->values[rg->outputs[ri].value].name,
                         g->name);
            return -1;
        }
        int64_t n = ir_numel(&g->values[g->outputs[i].value]), compared = 0, excluded = 0;
        void *tmp = calloc((size_t)(n ? n : 1), 4);
        if (!tmp) {
            if (err && errlen) snprintf(err, errlen, "out of memory comparing '%s' with the reference", g->name);
            return -1;
        }
        double rd = 0;
        exec_spmd_assemble(r, r->p->out_buf[ri], tmp, &rd);
        if (rd > c->replica_diff) c->replica_diff = rd;
        const void *want = exec_ref_data(ref, g->outputs[i].value);
        c->digest = ir_fnv_bytes(c->digest, tmp, (size_t)n * 4);
        double e = output_error(c, i, tmp, want, &compared, &excluded);
        record_error(c, i, e, tmp, want, compared, excluded);
        free(tmp);
    }
    return 0;
}

void exec_spmd_sync_reference(exec_spmd *r, exec_ref *ref)
{
    const ir_graph *g = r->g, *rg = ref ? exec_ref_graph(ref) : NULL;
    for (int i = 0; i < g->n_outputs; i++) {
        int u = g->outputs[i].updates;
        if (u < 0 || r->p->arg_buf[u] < 0) continue;
        int ru = !rg || rg == g ? u : ir_find(rg, g->values[u].name); /* a pipeline's body: by name */
        exec_spmd_assemble(r, r->p->arg_buf[u], ref && ru >= 0 ? exec_ref_data(ref, ru) : NULL, NULL);
    }
}
