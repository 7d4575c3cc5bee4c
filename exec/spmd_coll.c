/* spmd_coll.c - collectives of the SPMD runtime over shared memory.
 *
 * Every collective is "wait until the whole device group has written its
 * input buffer, then read the peers' buffers directly".  Buffers are SSA (a
 * step writes each one once), so no device ever overwrites a buffer a peer
 * may still read within the step, and one barrier before reading is enough;
 * the all-reduce of a large buffer uses two (reduce one chunk each, then
 * gather the chunks).  Barriers block on a condition variable: with 16
 * devices on 2 cores a spinning barrier would starve the device it waits for.
 *
 * Data movement works on boxes in global coordinates: a device's block of a
 * buffer is the box [origin, origin + local dims) where origin comes from
 * shard_dim_offset.  An all-gather, all-to-all or slice copies into its own
 * output block the intersection with each peer's input block; a
 * reduce-scatter sums (or maxes) the peers' input blocks over its output box.
 * Sums run over the peers in group-rank order on every device, so replicas of
 * a reduced value agree bit for bit.
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

/* ---- groups and barriers ---------------------------------------------- */

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

int spmd_barriers_init(exec_spmd *r)
{
    const spmd_program *p = r->p;
    int n_slots = 0;
    for (int k = 0; k < SPMD_N_MASKS; k++) r->mask_slot[k] = -1;
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (in->kind == SPMD_COMPUTE || in->kind == SPMD_SLICE) continue;
        if (r->mask_slot[in->axes & (SPMD_N_MASKS - 1)] < 0) r->mask_slot[in->axes & (SPMD_N_MASKS - 1)] = n_slots++;
    }
    r->n_bars = n_slots * r->n_dev;
    r->bars = calloc((size_t)(r->n_bars ? r->n_bars : 1), sizeof *r->bars);
    if (!r->bars) return -1;
    for (int k = 0; k < SPMD_N_MASKS; k++) {
        if (r->mask_slot[k] < 0) continue;
        int size = (int)shard_axes_size(&p->mesh, (unsigned)k);
        for (int d = 0; d < r->n_dev; d++) {
            spmd_barrier *b = &r->bars[r->mask_slot[k] * r->n_dev + d];
            pthread_mutex_init(&b->mu, NULL);
            pthread_cond_init(&b->cv, NULL);
            b->size = size;
        }
    }
    return 0;
}

void spmd_barriers_free(exec_spmd *r)
{
    if (!r->bars) return;
    for (int k = 0; k < SPMD_N_MASKS; k++) {
        if (r->mask_slot[k] < 0) continue;
        for (int d = 0; d < r->n_dev; d++) {
            spmd_barrier *b = &r->bars[r->mask_slot[k] * r->n_dev + d];
            pthread_mutex_destroy(&b->mu);
            pthread_cond_destroy(&b->cv);
        }
    }
    free(r->bars);
    r->bars = NULL;
}

void spmd_barriers_reset(exec_spmd *r)
{
    for (int i = 0; i < r->n_bars; i++) r->bars[i].count = 0;
}

int spmd_barrier_wait(exec_spmd *r, unsigned mask, int leader, double *wait_s)
{
    int slot = r->mask_slot[mask & (SPMD_N_MASKS - 1)];
    if (slot < 0) return -1; /* cannot happen: every collective's mask has a slot */
    spmd_barrier *b = &r->bars[slot * r->n_dev + leader];
    double t0 = exec_spmd_now();
    int rc = 0;
    pthread_mutex_lock(&b->mu);
    if (atomic_load(&r->abort)) rc = -1;
    else if (++b->count == b->size) {
        b->count = 0;
        b->gen++;
        pthread_cond_broadcast(&b->cv);
    } else {
        unsigned gen = b->gen;
        while (gen == b->gen && !atomic_load(&r->abort)) pthread_cond_wait(&b->cv, &b->mu);
        if (gen == b->gen) rc = -1;
    }
    pthread_mutex_unlock(&b->mu);
    *wait_s += exec_spmd_now() - t0;
    return rc;
}

void spmd_abort_all(exec_spmd *r)
{
    atomic_store(&r->abort, 1);
    /* Taking each mutex before broadcasting means a device that checked the
     * flag before we set it is already waiting, so it gets the wake-up. */
    for (int i = 0; i < r->n_bars; i++) {
        if (!r->bars[i].size) continue;
        pthread_mutex_lock(&r->bars[i].mu);
        pthread_cond_broadcast(&r->bars[i].cv);
        pthread_mutex_unlock(&r->bars[i].mu);
    }
}

/* ---- boxes -------------------------------------------------------------- */

typedef enum { BOX_COPY, BOX_ADD, BOX_MAX } box_kind;

static void run_op(box_kind k, const float *s, float *d, int64_t n)
{
    switch (k) {
    case BOX_COPY: memcpy(d, s, (size_t)n * sizeof *d); return;
    case BOX_ADD: for (int64_t i = 0; i < n; i++) d[i] += s[i]; return;
    case BOX_MAX:
        for (int64_t i = 0; i < n; i++)
            if (s[i] > d[i] || s[i] != s[i]) d[i] = s[i];
        return;
    }
}

/* A block of a buffer: its origin in global coordinates, dims, data. */
typedef struct block {
    int64_t org[IR_MAX_RANK], dims[IR_MAX_RANK];
    float *data;
} block;

/* dst[box] = k(dst[box], src[box]) for the box [lo, lo + len) in global
 * coordinates, which both blocks contain.  Runs of contiguous elements go
 * through memcpy (or one loop).  Returns the elements read from src. */
static int64_t box_apply(box_kind k, int rank, const int64_t *lo, const int64_t *len, const block *src, block *dst)
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
        run_op(k, src->data + so, dst->data + dof, inner);
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

static void block_of(const exec_spmd *r, int b, int dev, block *out)
{
    const spmd_program *p = r->p;
    const ir_value *v = &p->g->values[p->bufs[b].value];
    spmd_buffer_dims(p, b, out->dims);
    for (int d = 0; d < v->rank; d++) out->org[d] = shard_dim_offset(&p->mesh, v, &p->bufs[b].spec, d, dev);
    out->data = spmd_buf(r, dev, b);
}

/* ---- the collectives -------------------------------------------------- */

/* All-gather, all-to-all, slice: copy into my output block the part of each
 * member's input block that falls in it. */
static double redistribute(exec_spmd *r, const spmd_instr *in, int dev, const spmd_group *gr)
{
    int rank = r->g->values[in->value].rank;
    block out, src;
    block_of(r, in->out, dev, &out);
    double moved = 0;
    for (int j = 0; j < gr->n; j++) {
        block_of(r, in->in[0], gr->members[j], &src);
        int64_t lo[IR_MAX_RANK], len[IR_MAX_RANK];
        int empty = 0;
        for (int d = 0; d < rank; d++) {
            int64_t a = out.org[d] > src.org[d] ? out.org[d] : src.org[d];
            int64_t e1 = out.org[d] + out.dims[d], e2 = src.org[d] + src.dims[d];
            lo[d] = a;
            len[d] = (e1 < e2 ? e1 : e2) - a;
            empty |= len[d] <= 0;
        }
        if (!empty) moved += 4.0 * (double)box_apply(BOX_COPY, rank, lo, len, &src, &out);
    }
    return moved;
}

/* Reduce-scatter: my output box, summed (or maxed) over the members' inputs. */
static double reduce_box(exec_spmd *r, const spmd_instr *in, int dev, const spmd_group *gr)
{
    int rank = r->g->values[in->value].rank;
    block out, src;
    block_of(r, in->out, dev, &out);
    double moved = 0;
    for (int j = 0; j < gr->n; j++) {
        block_of(r, in->in[0], gr->members[j], &src);
        box_kind k = j == 0 ? BOX_COPY : in->reduce_max ? BOX_MAX : BOX_ADD;
        moved += 4.0 * (double)box_apply(k, rank, out.org, out.dims, &src, &out);
    }
    return moved;
}

/* out[lo, hi) = reduction over the members of in[lo, hi) (flat ranges). */
static double reduce_range(exec_spmd *r, const spmd_instr *in, int dev, const spmd_group *gr, int64_t lo, int64_t hi)
{
    float *out = spmd_buf(r, dev, in->out);
    for (int j = 0; j < gr->n; j++) {
        const float *src = spmd_buf(r, gr->members[j], in->in[0]);
        box_kind k = j == 0 ? BOX_COPY : in->reduce_max ? BOX_MAX : BOX_ADD;
        if (hi > lo) run_op(k, src + lo, out + lo, hi - lo);
    }
    return 4.0 * (double)(hi > lo ? hi - lo : 0) * gr->n;
}

/* Below this many bytes an all-reduce sums the whole buffer on every device
 * (one barrier) instead of reduce-then-gather (two barriers). */
#define SMALL_ALL_REDUCE 16384

int spmd_collective(exec_spmd *r, const spmd_instr *in, int dev, int *members, double *moved, double *wait_s)
{
    spmd_group gr = {.members = members};
    if (in->kind == SPMD_SLICE) {
        gr.n = 1;
        gr.rank = 0;
        gr.leader = dev;
        members[0] = dev;
        *moved += redistribute(r, in, dev, &gr);
        return 0;
    }
    spmd_group_of(r, in->axes, dev, &gr);
    if (spmd_barrier_wait(r, in->axes, gr.leader, wait_s) < 0) return -1;
    switch ((spmd_kind)in->kind) {
    case SPMD_ALL_GATHER:
    case SPMD_ALL_TO_ALL:
        *moved += redistribute(r, in, dev, &gr);
        return 0;
    case SPMD_REDUCE_SCATTER:
        *moved += reduce_box(r, in, dev, &gr);
        return 0;
    case SPMD_ALL_REDUCE: {
        int64_t n = r->numel[in->out];
        if (n * 4 < SMALL_ALL_REDUCE || gr.n == 1) {
            *moved += reduce_range(r, in, dev, &gr, 0, n);
            return 0;
        }
        /* each member reduces one chunk, then copies the others' chunks */
        int64_t chunk = (n + gr.n - 1) / gr.n;
        int64_t lo = chunk * gr.rank, hi = lo + chunk < n ? lo + chunk : n;
        *moved += reduce_range(r, in, dev, &gr, lo, hi);
        if (spmd_barrier_wait(r, in->axes, gr.leader, wait_s) < 0) return -1;
        float *out = spmd_buf(r, dev, in->out);
        for (int j = 0; j < gr.n; j++) {
            int64_t l = chunk * j, h = l + chunk < n ? l + chunk : n;
            if (j == gr.rank || h <= l) continue;
            memcpy(out + l, spmd_buf(r, gr.members[j], in->out) + l, (size_t)(h - l) * sizeof *out);
            *moved += 4.0 * (double)(h - l);
        }
        return 0;
    }
    case SPMD_COMPUTE:
    case SPMD_SLICE:
    case SPMD_N_KINDS:
        break;
    }
    return -1;
}
