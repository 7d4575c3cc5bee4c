/* spmd_coll.c - what every collective backend shares: device groups, blocks
 * and boxes, the slice, and the dispatch of a collective instruction to the
 * backend (spmd_impl.h).
 *
 * Data movement works on boxes in global coordinates: a device's block of a
 * buffer is the box [origin, origin + local dims) where origin comes from
 * shard_dim_offset.  An all-gather, all-to-all or slice copies into its own
 * output block the intersection with each peer's input block; a
 * reduce-scatter sums (or maxes) the peers' input blocks over its output box;
 * a halo exchange copies the box its output block reads, shifted by the
 * offset, from the neighbours that hold it.
 * The backends (spmd_threads.c, spmd_mpi.c) move the bytes; a slice is a
 * local copy of the kept block on every backend.
 */
#include "exec/spmd_impl.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

double exec_spmd_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void spmd_group_of(const exec_spmd *r, unsigned mask, int dev, spmd_group *gr)
{
    const shard_mesh *m = &r->p->mesh;
    int64_t leader = dev, rank = 0, n = 1;
    for (int a = 0; a < m->n_axes; a++) {
        if (!(mask & (1u << a))) continue;
        int64_t c = shard_device_coord(m, dev, a);
        leader -= c * r->axis_stride[a];
        rank = rank * m->sizes[a] + c;
        n *= m->sizes[a];
    }
    gr->n = (int)n;
    gr->rank = (int)rank;
    gr->leader = (int)leader;
    if (!gr->members) return;
    for (int64_t j = 0; j < n; j++) {
        int64_t rest = j, e = leader;
        for (int a = m->n_axes - 1; a >= 0; a--) {
            if (!(mask & (1u << a))) continue;
            e += (rest % m->sizes[a]) * r->axis_stride[a];
            rest /= m->sizes[a];
        }
        gr->members[j] = (int)e;
    }
}

/* ---- boxes -------------------------------------------------------------- */

void spmd_run_op(spmd_box_kind k, const float *s, float *d, int64_t n)
{
    switch (k) {
    case SPMD_BOX_COPY: memcpy(d, s, (size_t)n * sizeof *d); return;
    case SPMD_BOX_ADD: for (int64_t i = 0; i < n; i++) d[i] += s[i]; return;
    case SPMD_BOX_MAX:
        for (int64_t i = 0; i < n; i++)
            if (s[i] > d[i] || s[i] != s[i]) d[i] = s[i];
        return;
    }
}

/* Runs of contiguous elements go through memcpy (or one loop). */
int64_t spmd_box_apply(spmd_box_kind k, int rank, const int64_t *lo, const int64_t *len, const spmd_block *src,
                       spmd_block *dst)
{
    int64_t ss[IR_MAX_RANK], ds[IR_MAX_RANK], so = 0, dof = 0, n = 1;
    exec_row_major_strides(rank, src->dims, ss);
    exec_row_major_strides(rank, dst->dims, ds);
    for (int d = 0; d < rank; d++) {
        if (len[d] <= 0) return 0;
        so += (lo[d] - src->org[d]) * ss[d];
        dof += (lo[d] - dst->org[d]) * ds[d];
        n *= len[d];
    }
    /* merge trailing dims that are whole in both blocks into one run */
    int k0 = rank ? rank - 1 : 0;
    int64_t inner = rank ? len[rank - 1] : 1;
    while (k0 > 0 && len[k0] == src->dims[k0] && len[k0] == dst->dims[k0]) inner *= len[--k0];
    int64_t idx[IR_MAX_RANK] = {0};
    for (int64_t done = 0; done < n; done += inner) {
        spmd_run_op(k, src->data + so, dst->data + dof, inner);
        for (int d = k0 - 1; d >= 0; d--) {
            so += ss[d];
            dof += ds[d];
            if (++idx[d] < len[d]) break;
            so -= ss[d] * len[d];
            dof -= ds[d] * len[d];
            idx[d] = 0;
        }
    }
    return n;
}

void spmd_block_of(const exec_spmd *r, int b, int dev, spmd_block *out)
{
    const spmd_program *p = r->p;
    const ir_value *v = &p->g->values[p->bufs[b].value];
    spmd_buffer_dims(p, b, out->dims);
    for (int d = 0; d < v->rank; d++) {
        out->org[d] = shard_dim_offset(&p->mesh, v, &p->bufs[b].spec, d, dev);
        out->valid[d] = shard_dim_valid(&p->mesh, v, &p->bufs[b].spec, d, dev);
    }
    out->data = r->arena[dev].base ? spmd_buf(r, dev, b) : NULL;
}

int spmd_box_meet(int rank, const spmd_block *a, const spmd_block *b, int64_t *lo, int64_t *len)
{
    for (int d = 0; d < rank; d++) {
        int64_t s = a->org[d] > b->org[d] ? a->org[d] : b->org[d];
        int64_t e1 = a->org[d] + a->valid[d], e2 = b->org[d] + b->valid[d];
        lo[d] = s;
        len[d] = (e1 < e2 ? e1 : e2) - s;
        if (len[d] <= 0) return 0;
    }
    return 1;
}

double spmd_halo_copy(exec_spmd *r, const spmd_instr *in, int dev, const spmd_group *gr)
{
    int rank = r->g->values[in->value].rank, d = in->dim;
    spmd_block want, src;
    spmd_block_of(r, in->out, dev, &want);
    memset(want.data, 0, (size_t)r->numel[in->out] * sizeof *want.data);
    /* my output row i reads input row i + offset: the box I want, in the
     * input's coordinates */
    want.org[d] += r->g->ops[in->op].attrs.ints[1];
    double moved = 0;
    for (int j = 0; j < gr->n; j++) {
        spmd_block_of(r, in->in[0], gr->members[j], &src);
        int64_t lo[IR_MAX_RANK], len[IR_MAX_RANK];
        if (!spmd_box_meet(rank, &want, &src, lo, len)) continue;
        int64_t n = spmd_box_apply(SPMD_BOX_COPY, rank, lo, len, &src, &want);
        if (gr->members[j] != dev) moved += 4.0 * (double)n;
    }
    return moved;
}

/* Fills the rows of dims [d, rank) of data (shape dims) outside valid;
 * no dim after `last` is padded. */
static void fill_outside(float *data, int rank, int d, int last, const int64_t *dims, const int64_t *valid, float x)
{
    int64_t inner = 1;
    for (int e = d + 1; e < rank; e++) inner *= dims[e];
    for (int64_t i = 0; i < dims[d]; i++) {
        float *row = data + i * inner;
        if (i >= valid[d]) {
            for (int64_t k = 0; k < inner; k++) row[k] = x;
        } else if (d < last) {
            fill_outside(row, rank, d + 1, last, dims, valid, x);
        }
    }
}

void spmd_fill_padding(exec_spmd *r, int b, int dev, float x)
{
    spmd_block blk;
    spmd_block_of(r, b, dev, &blk);
    int rank = r->g->values[r->p->bufs[b].value].rank, d0 = -1, last = -1;
    for (int d = 0; d < rank; d++)
        if (blk.valid[d] < blk.dims[d]) {
            if (d0 < 0) d0 = d;
            last = d;
        }
    if (d0 < 0 || !blk.data) return;
    /* the dims before the first padded one are whole: one pass per row of them */
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < d0; d++) outer *= blk.dims[d];
    for (int d = d0; d < rank; d++) inner *= blk.dims[d];
    for (int64_t i = 0; i < outer; i++) fill_outside(blk.data + i * inner, rank, d0, last, blk.dims, blk.valid, x);
}

/* A slice: copy the kept part of my input block into my output block. */
static double slice(exec_spmd *r, const spmd_instr *in, int dev)
{
    int rank = r->g->values[in->value].rank;
    spmd_block out, src;
    int64_t lo[IR_MAX_RANK], len[IR_MAX_RANK];
    spmd_block_of(r, in->out, dev, &out);
    spmd_block_of(r, in->in[0], dev, &src);
    if (!spmd_box_meet(rank, &out, &src, lo, len)) return 0;
    return 4.0 * (double)spmd_box_apply(SPMD_BOX_COPY, rank, lo, len, &src, &out);
}

int spmd_bucket_len(const spmd_program *p, int i)
{
    int n = 1, bk = p->instrs[i].bucket;
    while (bk >= 0 && i + n < p->n_instrs && p->instrs[i + n].bucket == bk) n++;
    return n;
}

int spmd_collective(exec_spmd *r, const spmd_instr *in, int n_in, int dev, int *members, double *moved, double *wait_s)
{
    if (in->kind == SPMD_SLICE) {
        *moved += slice(r, in, dev);
        return 0;
    }
    spmd_call c = {.in = in, .n_in = n_in, .dev = dev, .gr = {.members = members}};
    for (int m = 0; m < n_in; m++) c.release |= r->release[in + m - r->p->instrs];
    spmd_group_of(r, in->axes, dev, &c.gr);
    int rc = -1;
    switch ((spmd_kind)in->kind) {
    case SPMD_ALL_GATHER: rc = r->be->all_gather(r, &c); break;
    case SPMD_ALL_TO_ALL: rc = r->be->all_to_all(r, &c); break;
    case SPMD_REDUCE_SCATTER: rc = r->be->reduce_scatter(r, &c); break;
    case SPMD_ALL_REDUCE: rc = r->be->all_reduce(r, &c); break;
    case SPMD_HALO: rc = r->be->halo(r, &c); break;
    case SPMD_SEND: /* pipelined programs only (exec runs them through the pipeline runner) */
    case SPMD_RECV:
        spmd_set_error(r, "device %d: %s outside a pipelined run", dev, spmd_kind_name((spmd_kind)in->kind));
        r->be->fail(r);
        break;
    case SPMD_COMPUTE:
    case SPMD_SLICE:
    case SPMD_N_KINDS:
        break;
    }
    *moved += c.moved;
    *wait_s += c.wait_s;
    return rc;
}

int spmd_p2p_bad(exec_spmd *r, const spmd_p2p *m)
{
    const char *why = m->tag < 0 || m->tag > SPMD_P2P_MAX_TAG ? "a tag outside 0..32767"
                      : m->peer < 0 || m->peer >= r->n_dev || m->peer == m->dev ? "no other device of the mesh"
                      : m->n < 0 || (m->n && !m->data) ? "no data"
                      : NULL;
    if (!why) return 0;
    spmd_set_error(r, "device %d: a message to or from device %d with tag %d has %s", m->dev, m->peer, m->tag, why);
    r->be->fail(r);
    return 1;
}
