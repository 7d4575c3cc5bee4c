/* spmd_run.c - the SPMD runtime: device arenas, argument filling, the device
 * loop, updates between steps.
 *
 * exec_spmd_step starts one OpenMP thread per device; each walks the whole
 * program in order.  A compute instruction runs the graph op through
 * exec_kernel_run on the device's local buffers (einsum through BLIS with one
 * thread), passing the block's global position where the op needs it: iota's
 * offsets, one_hot's depth offset, the first table row of a gather over a
 * row-sharded table (ids of other rows give zero rows: the result is a
 * partial sum) and the first result row of a scatter_add with sharded rows.
 * Collectives and slices are in spmd_coll.c.  Each device times its own
 * instructions; the stats are written once at the end of its loop.
 */
#include "exec/spmd_impl.h"

#include "exec/kernels.h"

#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t buffer_numel(const spmd_program *p, int b)
{
    int64_t dims[IR_MAX_RANK], n = 1;
    spmd_buffer_dims(p, b, dims);
    for (int d = 0; d < p->g->values[p->bufs[b].value].rank; d++) n *= dims[d];
    return n;
}

size_t exec_spmd_bytes(const spmd_program *p) { return exec_spmd_device_bytes(p) * (size_t)p->mesh.n_devices; }

/* Local FLOPs of compute instruction `in` (ir_op_flops_dims on its blocks). */
static double local_flops(const spmd_program *p, const spmd_instr *in)
{
    const ir_op *op = &p->g->ops[in->op];
    int rank[IR_MAX_OPERANDS] = {0};
    int64_t dims[IR_MAX_OPERANDS][IR_MAX_RANK], out[IR_MAX_RANK];
    for (int k = 0; k < op->n_in; k++) {
        rank[k] = p->g->values[op->in[k]].rank;
        spmd_buffer_dims(p, in->in[k], dims[k]);
    }
    spmd_buffer_dims(p, in->out, out);
    return ir_op_flops_dims(op, rank, (const int64_t(*)[IR_MAX_RANK])dims, p->g->values[op->out].rank, out);
}

/* Whether buffers share memory by liveness (spmd_mem.c): CARVE_REUSE=0 turns it off. */
static int reuse_enabled(void)
{
    const char *e = getenv("CARVE_REUSE");
    return !(e && !strcmp(e, "0"));
}

/* The memory layout of one device: local sizes, offsets by liveness over
 * the program's fused groups, the collectives after which peers may
 * overwrite what they read.  numel, off and release are caller's arrays
 * (n_bufs, n_bufs, n_instrs; release may be NULL).  Returns 0, or -1 when
 * out of memory. */
static int device_layout(const spmd_program *p, int64_t *numel, size_t *off, size_t *bytes, uint8_t *release)
{
    for (int b = 0; b < p->n_bufs; b++) numel[b] = buffer_numel(p, b);
    return spmd_layout(p, numel, reuse_enabled(), off, bytes, release);
}

size_t exec_spmd_device_bytes(const spmd_program *p)
{
    int64_t *numel = calloc((size_t)p->n_bufs + 1, sizeof *numel);
    size_t *off = calloc((size_t)p->n_bufs + 1, sizeof *off), bytes = 0;
    if (!numel || !off || device_layout(p, numel, off, &bytes, NULL) < 0) {
        bytes = 0; /* out of memory: the sum of every buffer, as without reuse */
        for (int b = 0; b < p->n_bufs; b++) bytes += exec_arena_size((size_t)buffer_numel(p, b) * 4);
    }
    free(numel);
    free(off);
    return bytes;
}

exec_spmd *exec_spmd_new(const spmd_program *p, size_t max_bytes, char *err, size_t errlen)
{
    return exec_spmd_new_on(p, EXEC_THREADS, max_bytes, err, errlen);
}

/* The runtime's per-buffer and per-instruction arrays, uneven splits and
 * local sizes.  Returns 0, or -1 when out of memory. */
static int alloc_tables(exec_spmd *r)
{
    const spmd_program *p = r->p;
    r->off = calloc((size_t)p->n_bufs + 1, sizeof *r->off);
    r->dev_off = calloc((size_t)r->n_dev, sizeof *r->dev_off);
    r->numel = calloc((size_t)p->n_bufs + 1, sizeof *r->numel);
    r->instr_flops = calloc((size_t)p->n_instrs + 1, sizeof *r->instr_flops);
    r->release = calloc((size_t)p->n_instrs + 1, 1);
    r->padded = calloc((size_t)p->n_bufs + 1, 1);
    r->arena = calloc((size_t)r->n_dev, sizeof *r->arena);
    r->stats.dev = calloc((size_t)r->n_dev, sizeof *r->stats.dev);
    if (!r->off || !r->dev_off || !r->numel || !r->instr_flops || !r->release || !r->padded || !r->arena || !r->stats.dev)
        return -1;
    for (int b = 0; b < p->n_bufs; b++) {
        const ir_value *v = &r->g->values[p->bufs[b].value];
        r->numel[b] = buffer_numel(p, b);
        for (int d = 0; d < v->rank; d++)
            if (shard_dim_block(&p->mesh, &p->bufs[b].spec, d, v->dims[d]) * shard_dim_shards(&p->mesh, &p->bufs[b].spec, d) != v->dims[d])
                r->padded[b] = 1;
    }
    return 0;
}

/* Maps the arenas of the local devices, after checking their sum against
 * max_bytes (0: no limit).  Returns 0, or -1 with a message. */
static int map_arenas(exec_spmd *r, size_t max_bytes, const char *mesh_text, char *err, size_t errlen)
{
    const spmd_program *p = r->p;
    size_t need = 0;
    for (int k = 0; k < r->n_local; k++) need += spmd_device_arena_bytes(r, r->local[k]);
    if (max_bytes && need > max_bytes)
        return ir_errf(err, errlen, "mesh %s: the SPMD run needs %zu bytes (%.1f MiB) of buffers (%zu per device), above the limit of %zu bytes",
                       mesh_text, need, (double)need / 1048576.0, r->dev_bytes, max_bytes);
    for (int k = 0; k < r->n_local; k++) {
        int dev = r->local[k];
        exec_arena *a = &r->arena[dev];
        if (exec_arena_map(a, spmd_device_arena_bytes(r, dev)) < 0)
            return ir_errf(err, errlen, "mesh %s: out of memory allocating %zu bytes of device buffers", mesh_text, need);
        for (int v = 0; v < r->g->n_values; v++) /* the rest are placed as they are written */
            if (p->arg_buf[v] >= 0 && spmd_holds(r, dev, p->arg_buf[v]))
                exec_arena_place(a, r->dev_off[dev][p->arg_buf[v]], (size_t)r->numel[p->arg_buf[v]] * 4);
    }
    return 0;
}

exec_spmd *spmd_runtime_new(const spmd_program *p, spmd_pipe *pipe, exec_backend backend, size_t max_bytes, char *err,
                            size_t errlen)
{
    const ir_graph *g = p->g;
    char mesh_text[128];
    shard_mesh_str(&p->mesh, mesh_text, sizeof mesh_text);
    if (p->mesh.n_devices < 1 || p->mesh.n_devices > 256) {
        ir_errf(err, errlen, "mesh %s: %lld devices; the runtime simulates 1 to 256", mesh_text, (long long)p->mesh.n_devices);
        spmd_pipe_free(pipe);
        return NULL;
    }
    int missing = ir_data_missing(g);
    if (missing >= 0) {
        ir_errf(err, errlen, "graph '%s': argument '%s' takes its values from data that was not loaded", g->name,
                g->values[missing].name);
        spmd_pipe_free(pipe);
        return NULL;
    }
    exec_spmd *r = calloc(1, sizeof *r);
    if (!r) {
        spmd_pipe_free(pipe);
        goto oom;
    }
    r->p = p;
    r->g = g;
    r->pipe = pipe;
    for (int i = 0; i < p->n_instrs && !r->p2p; i++) r->p2p = spmd_kind_is_p2p(p->instrs[i].kind); /* (a pipeline's) */
    r->be = backend == EXEC_MPI ? &spmd_mpi_backend : &spmd_threads_backend;
    r->n_dev = (int)p->mesh.n_devices;
    pthread_mutex_init(&r->err_mu, NULL);
    atomic_init(&r->abort, 0);
    for (int a = p->mesh.n_axes - 1, s = 1; a >= 0; a--) {
        r->axis_stride[a] = s;
        s *= (int)p->mesh.sizes[a];
    }
    if (alloc_tables(r) < 0) goto oom;
    for (int d = 0; d < r->n_dev; d++) r->dev_off[d] = r->off; /* one layout for every device */
    if (spmd_stages_layout(r, reuse_enabled()) < 0) goto oom;
    if (r->be->open(r, err, errlen) < 0 || map_arenas(r, max_bytes, mesh_text, err, errlen) < 0) {
        exec_spmd_free(r);
        return NULL;
    }
    r->stats.fused_groups = p->fuse.n_groups; /* the groups the lowering planned */
    r->stats.fused_ops = p->fuse.n_fused;
    r->stats.n_devices = r->n_dev;
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (in->kind == SPMD_COMPUTE && g->ops[in->op].kind == IR_OP_EINSUM) r->instr_flops[i] = local_flops(p, in);
        if (in->kind < SPMD_N_KINDS) {
            r->stats.count[in->kind]++;
            r->stats.bytes[in->kind] += (double)in->bytes;
        }
    }
    return r;
oom:
    ir_errf(err, errlen, "mesh %s: out of memory preparing the device buffers", mesh_text);
    exec_spmd_free(r);
    return NULL;
}

exec_spmd *exec_spmd_new_on(const spmd_program *p, exec_backend backend, size_t max_bytes, char *err, size_t errlen)
{
    return spmd_runtime_new(p, NULL, backend, max_bytes, err, errlen);
}

void exec_spmd_free(exec_spmd *r)
{
    if (!r) return;
    if (r->be && r->be->close) r->be->close(r);
    free(r->local);
    if (r->arena)
        for (int d = 0; d < r->n_dev; d++) exec_arena_unmap(&r->arena[d]);
    free(r->arena);
    free(r->off);
    free(r->dev_off);
    free(r->numel);
    free(r->instr_flops);
    free(r->release);
    free(r->padded);
    free(r->stats.dev);
    spmd_pipe_free(r->pipe);
    pthread_mutex_destroy(&r->err_mu);
    free(r);
}

int exec_spmd_devices(const exec_spmd *r) { return r->n_dev; }
int exec_spmd_is_root(const exec_spmd *r) { return r->root; }
void *exec_spmd_data(exec_spmd *r, int dev, int b) { return r->arena[dev].base ? spmd_buf(r, dev, b) : NULL; }
const exec_spmd_stats *exec_spmd_last_stats(const exec_spmd *r) { return &r->stats; }

/* ---- arguments ---------------------------------------------------------- */

/* One contiguous global run of the valid box at a time (padding: zeros). */
void spmd_fill_block(exec_spmd *r, const ir_value *x, const void *data, int b, int dev, uint64_t seed)
{
    int rank = x->rank;
    int64_t gs[IR_MAX_RANK], ls[IR_MAX_RANK], idx[IR_MAX_RANK] = {0};
    spmd_block blk;
    spmd_block_of(r, b, dev, &blk);
    uint32_t *dst = (uint32_t *)blk.data;
    if (rank == 0) {
        exec_fill_value(x, data, seed, 0, 1, dst);
        return;
    }
    if (r->padded[b]) memset(dst, 0, (size_t)r->numel[b] * 4);
    exec_row_major_strides(rank, x->dims, gs);
    exec_row_major_strides(rank, blk.dims, ls);
    int k0 = rank - 1;
    int64_t inner = blk.valid[k0], count = 1;
    while (k0 > 0 && blk.valid[k0] == x->dims[k0] && blk.dims[k0] == x->dims[k0]) inner *= blk.valid[--k0];
    for (int d = 0; d < k0; d++) count *= blk.valid[d];
    if (inner <= 0) return;
    for (int64_t done = 0; done < count; done++) {
        int64_t start = blk.org[k0] * gs[k0], lo = 0;
        for (int d = 0; d < k0; d++) {
            start += (blk.org[d] + idx[d]) * gs[d];
            lo += idx[d] * ls[d];
        }
        exec_fill_value(x, data, seed, start, inner, dst + lo);
        for (int d = k0 - 1; d >= 0; d--) {
            if (++idx[d] < blk.valid[d]) break;
            idx[d] = 0;
        }
    }
}

void exec_spmd_init_args(exec_spmd *r, uint64_t seed)
{
    const spmd_program *p = r->p;
    int n_threads = omp_get_num_procs();
    if (n_threads > r->n_local) n_threads = r->n_local;
#pragma omp parallel for num_threads(n_threads) schedule(dynamic, 1)
    for (int k = 0; k < r->n_local; k++)
        for (int v = 0, dev = r->local[k]; v < r->g->n_values; v++)
            if (p->arg_buf[v] >= 0 && spmd_holds(r, dev, p->arg_buf[v])) spmd_fill_arg(r, v, dev, seed);
}

void exec_spmd_apply_updates(exec_spmd *r)
{
    const spmd_program *p = r->p;
    const ir_graph *g = r->g;
    for (int k = 0; k < r->n_local; k++) {
        int dev = r->local[k];
        /* An output that is itself an argument's buffer must be read before
         * any argument is overwritten: those go through a copy. */
        void **saved = calloc((size_t)(g->n_outputs ? g->n_outputs : 1), sizeof *saved);
        if (!saved) {
            ir_oom(0);
        }
        for (int i = 0; i < g->n_outputs; i++) {
            int src = p->out_buf[i], upd = g->outputs[i].updates;
            if (upd < 0 || src == p->arg_buf[upd] || p->arg_buf[p->bufs[src].value] != src) continue;
            if (!spmd_holds(r, dev, src) || !spmd_holds(r, dev, p->arg_buf[upd])) continue;
            size_t n = (size_t)r->numel[src] * 4;
            saved[i] = malloc(n ? n : 4);
            if (!saved[i]) {
                ir_oom(n);
            }
            memcpy(saved[i], spmd_buf(r, dev, src), n);
        }
        for (int i = 0; i < g->n_outputs; i++) {
            int src = p->out_buf[i], upd = g->outputs[i].updates;
            if (upd < 0 || src == p->arg_buf[upd]) continue;
            int dst = p->arg_buf[upd];
            if (!spmd_holds(r, dev, src) || !spmd_holds(r, dev, dst)) continue; /* a stage updates what it holds */
            if (r->numel[dst] != r->numel[src]) continue; /* lowering keeps layouts: never */
            if (r->dev_off[dev][dst] == r->dev_off[dev][src]) continue; /* the output was written in place (donated) */
            memcpy(spmd_buf(r, dev, dst), saved[i] ? saved[i] : (void *)spmd_buf(r, dev, src), (size_t)r->numel[src] * 4);
            free(saved[i]);
        }
        free(saved);
    }
}

double exec_spmd_loss(exec_spmd *r)
{
    const ir_graph *g = r->g;
    if (g->loss < 0) return NAN;
    for (int i = 0; i < g->n_outputs; i++) {
        if (g->outputs[i].value != g->loss) continue;
        int dev = spmd_home_device(r, r->p->out_buf[i]); /* device 0, unless a pipeline's last stage holds it */
        return r->arena[dev].base ? (double)spmd_buf(r, dev, r->p->out_buf[i])[0] : NAN;
    }
    return NAN;
}

/* ---- the device loop ---------------------------------------------------- */

static exec_tensor tensor_of(exec_spmd *r, int dev, int b)
{
    const ir_value *v = &r->g->values[r->p->bufs[b].value];
    exec_tensor t = {.dtype = v->dtype, .rank = v->rank, .data = spmd_buf(r, dev, b)};
    spmd_buffer_dims(r->p, b, t.dims);
    return t;
}

/* Runs compute instruction `in` on device dev.  Returns 0 or -1 with msg. */
static int run_compute(exec_spmd *r, const spmd_instr *in, int dev, char *msg, size_t n)
{
    const spmd_program *p = r->p;
    const ir_op *op = &r->g->ops[in->op];
    exec_tensor args[IR_MAX_OPERANDS], out = tensor_of(r, dev, in->out);
    for (int k = 0; k < op->n_in; k++) args[k] = tensor_of(r, dev, in->in[k]);
    exec_kernel_opts o;
    memset(&o, 0, sizeof o);
    const spmd_buffer *ob = &p->bufs[in->out];
    const ir_value *ov = &r->g->values[ob->value];
    for (int d = 0; d < ov->rank; d++) o.out_offset[d] = shard_dim_offset(&p->mesh, ov, &ob->spec, d, dev);
    if (ir_op_count(op->kind) == IR_COUNT_ATTN) { /* the query rows' place, for a causal mask */
        const spmd_buffer *qb = &p->bufs[in->in[0]];
        const ir_value *qv = &r->g->values[qb->value];
        for (int d = 0; d < qv->rank; d++) o.in0_offset[d] = shard_dim_offset(&p->mesh, qv, &qb->spec, d, dev);
    }
    /* ids into a tiled dim (a gather's table rows, a scatter_add's result
     * rows, a one_hot's depth): the block's first global index; ids outside
     * it belong to another device */
    int target, last;
    if (ir_op_ids(op->kind, &target, &last) >= 0) {
        const spmd_buffer *tb = target >= 0 ? &p->bufs[in->in[target]] : ob;
        const ir_value *tv = &r->g->values[tb->value];
        int d = last ? tv->rank - 1 : 0;
        if (tb->spec.n[d]) {
            o.id_base = shard_dim_offset(&p->mesh, tv, &tb->spec, d, dev);
            o.ids_masked = 1;
            o.id_limit = tv->dims[d];
        }
    }
    /* Padding is zero, which a sum or a contraction ignores; a max over a
     * padded dim sees it as -inf for the time of the op (ops.def's pad). */
    float pad = ir_op_pad(op->kind);
    for (int k = 0; k < op->n_in && pad != 0.0f; k++)
        if (r->padded[in->in[k]]) spmd_fill_padding(r, in->in[k], dev, pad);
    ir_attrs attrs = op->attrs;
    int mb = op->kind == IR_OP_DROPOUT_MASK ? spmd_pipe_mb(r, (int)(in - p->instrs)) : -1;
    if (mb > 0) attrs.ints[0] = ir_microbatch_seed(attrs.ints[0], mb); /* micro-batch k's masks, as the unrolled step's */
    int rc = exec_kernel_run(op->kind, &attrs, op->n_in, args, &out, &o, msg, n);
    for (int k = 0; k < op->n_in && pad != 0.0f; k++)
        if (r->padded[in->in[k]]) spmd_fill_padding(r, in->in[k], dev, 0.0f);
    if (r->padded[in->out]) spmd_fill_padding(r, in->out, dev, 0.0f);
    return rc;
}

void spmd_set_error(exec_spmd *r, const char *fmt, ...)
{
    pthread_mutex_lock(&r->err_mu);
    if (!r->err[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err, sizeof r->err, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&r->err_mu);
}

/* Runs the fused group of instructions [i, i + len) on device dev. */
static void run_group(exec_spmd *r, int i, int len, int dev)
{
    const spmd_program *p = r->p;
    const float *in[2 * FUSE_MAX_GROUP];
    float *out[FUSE_MAX_GROUP];
    for (int m = 0; m < len; m++) {
        const spmd_instr *x = &p->instrs[i + m];
        for (int k = 0; k < 2; k++) in[2 * m + k] = x->in[k] >= 0 ? spmd_buf(r, dev, x->in[k]) : NULL;
        out[m] = spmd_buf(r, dev, x->out);
    }
    exec_fuse_run(&r->p->fuse.step[i], len, r->numel[p->instrs[i].out], in, out);
}

/* VmHWM of this process in bytes (0 when /proc says nothing). */
static double process_peak(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lf kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb * 1024;
}

/* A fused group [i, i + len) on device dev. */
static void run_fused(exec_spmd *r, int dev, int i, int len, exec_spmd_device_stats *st)
{
    const spmd_program *p = r->p;
    double t0 = exec_spmd_now();
    run_group(r, i, len, dev);
    for (int m = 0; m < len; m++) /* elementwise: padding stays padding, but is no longer zero */
        if (p->fuse.step[i + m].slot < 0 && r->padded[p->instrs[i + m].out]) spmd_fill_padding(r, p->instrs[i + m].out, dev, 0.0f);
    double dt = exec_spmd_now() - t0;
    st->compute_s += dt;
    st->fused_s += dt;
    st->kind_s[SPMD_COMPUTE] += dt;
}

/* Compute instruction i alone on device dev.  Returns 0, or -1 after
 * failing the run with a message naming the device and the op. */
static int run_alone(exec_spmd *r, int dev, int i, exec_spmd_device_stats *st)
{
    const spmd_instr *in = &r->p->instrs[i];
    const ir_op *op = &r->g->ops[in->op];
    char msg[320];
    double t0 = exec_spmd_now();
    if (run_compute(r, in, dev, msg, sizeof msg) < 0) {
        spmd_set_error(r, "device %d: instruction %d, op %d (%s -> '%s'): %s", dev, i, in->op, ir_op_name(op->kind),
                       r->g->values[op->out].name, msg);
        r->be->fail(r);
        return -1;
    }
    double dt = exec_spmd_now() - t0;
    st->compute_s += dt;
    if (r->instr_flops[i] > 0) {
        st->einsum_s += dt;
        st->einsum_flops += r->instr_flops[i];
    }
    st->kind_s[SPMD_COMPUTE] += dt;
    st->op_s[op->kind] += dt;
    return 0;
}

/* The collective at i on device dev, with the rest of its gradient bucket
 * (n instructions: one combined collective), or a slice.  Returns 0, or -1
 * when the run stopped. */
static int run_collective(exec_spmd *r, int dev, int i, int n, int *members, exec_spmd_device_stats *st)
{
    const spmd_instr *in = &r->p->instrs[i];
    double t0 = exec_spmd_now(), moved = 0;
    if (spmd_collective(r, in, n, dev, members, &moved, &st->wait_s) < 0) return -1;
    for (int m = 0; m < n; m++)
        if (r->padded[in[m].out]) spmd_fill_padding(r, in[m].out, dev, 0.0f);
    double dt = exec_spmd_now() - t0;
    st->collective_s += dt;
    st->moved_bytes += moved;
    st->launches += in->kind != SPMD_SLICE;
    if (in->kind < SPMD_N_KINDS) {
        st->kind_s[in->kind] += dt;
        st->kind_bytes[in->kind] += moved;
    }
    return 0;
}

int spmd_run_instr(exec_spmd *r, int dev, int i, int *members, exec_spmd_device_stats *st)
{
    const spmd_program *p = r->p;
    const spmd_instr *in = &p->instrs[i];
    int len = p->fuse.len[i], n = len > 1 ? len : in->kind == SPMD_COMPUTE ? 1 : spmd_bucket_len(p, i);
    for (int m = 0; m < n; m++) /* AddressSanitizer: the memory becomes this buffer's */
        if (len <= 1 || p->fuse.step[i + m].slot < 0) {
            int b = p->instrs[i + m].out;
            exec_arena_place(&r->arena[dev], r->dev_off[dev][b], (size_t)r->numel[b] * 4);
        }
    int rc = len > 1                     ? (run_fused(r, dev, i, len, st), 0)
             : in->kind == SPMD_COMPUTE ? run_alone(r, dev, i, st)
                                        : run_collective(r, dev, i, n, members, st);
    return rc < 0 ? -1 : n;
}

/* VmHWM and the arena's resident pages, after the device's step. */
void spmd_device_memory(exec_spmd *r, int dev, exec_spmd_device_stats *st)
{
    st->resident_bytes = (double)exec_arena_resident(&r->arena[dev]);
    st->process_peak_bytes = process_peak();
}

int *spmd_members_new(exec_spmd *r, int dev)
{
    int *members = malloc((size_t)r->n_dev * sizeof *members);
    if (!members) {
        spmd_set_error(r, "device %d: out of memory", dev);
        r->be->fail(r);
    }
    return members;
}

void spmd_run_device(exec_spmd *r, int dev)
{
    const spmd_program *p = r->p;
    exec_spmd_device_stats st;
    memset(&st, 0, sizeof st);
    int *members = spmd_members_new(r, dev);
    if (!members) return;
    for (int i = 0, n; i < p->n_instrs; i += n)
        if (atomic_load_explicit(&r->abort, memory_order_relaxed) || (n = spmd_run_instr(r, dev, i, members, &st)) < 0) break;
    free(members);
    spmd_device_memory(r, dev, &st);
    r->stats.dev[dev] = st;
}

int exec_spmd_step(exec_spmd *r, char *err, size_t errlen)
{
    exec_blis_setup();
    atomic_store(&r->abort, 0);
    r->err[0] = 0;
    return spmd_stages_step(r, err, errlen);
}

int exec_spmd_agree(exec_spmd *r, int rc) { return (int)r->be->max_all(r, (double)rc); }

/* ---- the backends' point to point, for the tests --------------------------- */

int exec_spmd_run_each(exec_spmd *r, void (*fn)(exec_spmd *r, int dev), char *err, size_t errlen)
{
    r->p2p = 1;
    atomic_store(&r->abort, 0);
    r->err[0] = 0;
    r->be->run(r, fn);
    if (atomic_load(&r->abort)) return ir_errf(err, errlen, "%s", r->err[0] ? r->err : "a device stopped");
    if (errlen) err[0] = 0;
    return 0;
}

int exec_spmd_send(exec_spmd *r, int dev, int peer, int tag, float *data, int64_t n, double *moved)
{
    spmd_p2p m = {.dev = dev, .peer = peer, .tag = tag, .data = data, .n = n};
    int rc = r->be->send(r, &m);
    if (moved) *moved = m.moved;
    return rc;
}

int exec_spmd_recv(exec_spmd *r, int dev, int peer, int tag, float *data, int64_t n, double *wait_s)
{
    spmd_p2p m = {.dev = dev, .peer = peer, .tag = tag, .data = data, .n = n};
    int rc = r->be->recv(r, &m);
    if (wait_s) *wait_s = m.wait_s;
    return rc;
}

void exec_spmd_fail(exec_spmd *r, int dev, const char *msg)
{
    spmd_set_error(r, "device %d: %s", dev, msg);
    r->be->fail(r);
}

int exec_spmd_local_devices(const exec_spmd *r, const int **local)
{
    *local = r->local;
    return r->n_local;
}

const char *exec_spmd_backend_name(const exec_spmd *r) { return r->be->name; }
