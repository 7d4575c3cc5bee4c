/* spmd_mpi.c - the MPI backend: one device per rank of MPI_COMM_WORLD
 * (device number = world rank), each rank holding only its own buffers.
 *
 * Groups: for every axes mask a collective names, MPI_Comm_split puts the
 * ranks of one device group (same coordinates off the mask) in one
 * communicator, keyed by group rank, so communicator rank = group rank =
 * the order of the members' blocks along a dim those axes tile.
 *
 * Collectives take the device buffers directly:
 *   all-reduce      MPI_Allreduce(input, output) (sum, or max for a partial max)
 *   reduce-scatter  MPI_Reduce_scatter_block(input, output) when each
 *                   member's part of my input is one contiguous run, in group
 *                   rank order (a split of the leading dim); otherwise the
 *                   input is packed into that order first (one copy: the call
 *                   takes a single datatype for its input and output)
 *   all-gather      MPI_Allgather(input, output) when the members' blocks
 *                   are consecutive runs of my output; otherwise
 *                   MPI_Alltoallw with a subarray datatype per member, which
 *                   lands each block in its strided place without a copy
 *   all-to-all      MPI_Alltoallw with subarray datatypes on both sides
 *   a gradient bucket (bucket.c) is one collective: its all-reduces packed
 *   member after member into one buffer, one MPI_Allreduce in place, then
 *   unpacked; its reduce-scatters packed by destination (every member's part
 *   for group rank j together), one MPI_Reduce_scatter_block, unpacked
 *   halo            the same, each member's box being its output block
 *                   shifted by the offset: only neighbours' border rows move
 *   send            a copy of the data, MPI_Isend on a duplicate of
 *                   MPI_COMM_WORLD (so it never waits for the receiver: a
 *                   plain MPI_Send of more than the eager limit would, and
 *                   1F1B's neighbours that send before they receive would
 *                   deadlock); the copy is freed when MPI is done with it,
 *                   at the latest at the end of the step
 *   recv            MPI_Recv straight into the device buffer
 * Padded blocks (uneven splits) move only their valid boxes; the direct
 * MPI_Allgather and MPI_Reduce_scatter_block paths are for unpadded ones.
 * Bytes counted per rank are the bytes this rank hands MPI to send to other
 * ranks (what leaves the rank, whatever algorithm MPI picks).
 *
 * Reduction order: Open MPI chooses the order of the terms of a sum.  Two
 * terms sum the same either way (IEEE addition commutes), so on groups of 1
 * or 2 ranks the results equal the threads backend's bit for bit; on larger
 * groups they may differ in the last bits (docs/run.md).
 *
 * Faults: a kernel error or out-of-memory on a rank prints the message with
 * the rank and calls MPI_Abort, which ends every rank with a non-zero status;
 * so does a message sent and never received (the ranks compare counts of
 * messages after a step that sends point to point) or of another size than
 * its receive;
 * a rank killed by a signal makes mpirun end the others.  No rank waits
 * forever on a peer that is gone.
 */
#include "exec/spmd_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef CARVE_MPI

int exec_mpi_available(void) { return 0; }

int exec_mpi_init(int *rank, int *size, char *err, size_t errlen)
{
    *rank = 0;
    *size = 1;
    return ir_errf(err, errlen, "this carve was built without MPI (install libopenmpi-dev and rebuild)");
}

int exec_mpi_agree(int rc) { return rc; }
int exec_mpi_same(uint64_t x) { return 1; }
void exec_mpi_finalize(void) {}
double exec_mpi_allreduce_loop(const int64_t *counts, int n) { return -1; }

void exec_mpi_fail(int code, const char *msg)
{
    fprintf(stderr, "carve: %s\n", msg);
    exit(code);
}

static int no_mpi_open(exec_spmd *r, char *err, size_t errlen)
{
    return ir_errf(err, errlen, "this carve was built without MPI (install libopenmpi-dev and rebuild)");
}

const spmd_backend spmd_mpi_backend = {.name = "mpi", .open = no_mpi_open};

#else

#include <mpi.h>

typedef struct mpi_state {
    MPI_Comm comm[SPMD_N_MASKS]; /* per axes mask: this rank's group, MPI_COMM_NULL unused */
    int rank;
    float *pack;                 /* packed reduce-scatter inputs and buckets, grown on demand */
    size_t pack_bytes;
    MPI_Comm p2p;                /* point to point: MPI_COMM_WORLD's ranks, errors returned */
    int tag_ub;
    MPI_Request *req;            /* sends in flight, and the copies they send */
    float **copy;
    int n_req, cap_req;
    int *sent, *got;             /* per rank: messages sent to it, received from it, this step */
} mpi_state;

int exec_mpi_available(void) { return 1; }

int exec_mpi_init(int *rank, int *size, char *err, size_t errlen)
{
    int on = 0;
    MPI_Initialized(&on);
    if (!on && MPI_Init(NULL, NULL) != MPI_SUCCESS) return ir_errf(err, errlen, "MPI_Init failed");
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return 0;
}

int exec_mpi_agree(int rc)
{
    int all = rc;
    MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return all;
}

int exec_mpi_same(uint64_t x)
{
    uint64_t lo = x, hi = x;
    MPI_Allreduce(&x, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&x, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

void exec_mpi_finalize(void)
{
    int on = 0, off = 0;
    MPI_Initialized(&on);
    MPI_Finalized(&off);
    if (on && !off) MPI_Finalize();
}

void exec_mpi_fail(int code, const char *msg)
{
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    fprintf(stderr, "carve: rank %d of %d: %s; stopping every rank\n", rank, size, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code); /* MPI_Abort does not return; this keeps the compiler sure of it */
}

double exec_mpi_allreduce_loop(const int64_t *counts, int n)
{
    int64_t most = 1;
    for (int i = 0; i < n; i++)
        if (counts[i] > most) most = counts[i];
    float *in = calloc((size_t)most, 4), *out = calloc((size_t)most, 4);
    double t = -1, mine;
    if (!in || !out) goto done;
    MPI_Barrier(MPI_COMM_WORLD);
    mine = exec_spmd_now();
    for (int i = 0; i < n; i++) MPI_Allreduce(in, out, (int)counts[i], MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    mine = exec_spmd_now() - mine;
    MPI_Allreduce(&mine, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
done:
    free(in);
    free(out);
    return t;
}

static void mpi_close(exec_spmd *r)
{
    mpi_state *s = r->be_state;
    if (!s) return;
    for (int k = 0; k < SPMD_N_MASKS; k++)
        if (s->comm[k] != MPI_COMM_NULL) MPI_Comm_free(&s->comm[k]);
    for (int i = 0; i < s->n_req; i++) { /* an aborted step's sends */
        MPI_Cancel(&s->req[i]);
        MPI_Request_free(&s->req[i]);
        free(s->copy[i]);
    }
    if (s->p2p != MPI_COMM_NULL) MPI_Comm_free(&s->p2p);
    free(s->req);
    free(s->copy);
    free(s->sent); /* and got: one allocation */
    free(s->pack);
    free(s);
    r->be_state = NULL;
}

static int mpi_open(exec_spmd *r, char *err, size_t errlen)
{
    const spmd_program *p = r->p;
    int on = 0, size = 0, rank = 0;
    MPI_Initialized(&on);
    if (!on) return ir_errf(err, errlen, "the MPI backend needs MPI initialised (exec_mpi_init)");
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (size != r->n_dev)
        return ir_errf(err, errlen, "the mesh has %d devices but MPI started %d ranks (run it with mpirun -n %d: one rank per device)",
                       r->n_dev, size, r->n_dev);
    mpi_state *s = calloc(1, sizeof *s);
    r->local = calloc(1, sizeof *r->local);
    int *counts = calloc((size_t)size * 2, sizeof *counts);
    if (!s || !r->local || !counts) {
        free(s);
        free(counts);
        return ir_errf(err, errlen, "rank %d: out of memory", rank);
    }
    r->be_state = s;
    s->sent = counts;
    s->got = counts + size;
    int *ub = NULL, has_ub = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &has_ub);
    s->tag_ub = has_ub && ub ? *ub : SPMD_P2P_MAX_TAG;
    MPI_Comm_dup(MPI_COMM_WORLD, &s->p2p);
    MPI_Comm_set_errhandler(s->p2p, MPI_ERRORS_RETURN);
    s->rank = rank;
    r->n_local = 1;
    r->local[0] = rank;
    r->root = rank == 0;
    uint8_t used[SPMD_N_MASKS] = {0};
    for (int i = 0; i < p->n_instrs; i++)
        if (p->instrs[i].kind != SPMD_COMPUTE && p->instrs[i].kind != SPMD_SLICE && !spmd_kind_is_p2p(p->instrs[i].kind))
            used[p->instrs[i].axes & (SPMD_N_MASKS - 1)] = 1;
    /* every rank splits for the same masks in the same order */
    for (int k = 0; k < SPMD_N_MASKS; k++) {
        s->comm[k] = MPI_COMM_NULL;
        if (!used[k]) continue;
        spmd_group gr = {0};
        spmd_group_of(r, (unsigned)k, rank, &gr);
        MPI_Comm_split(MPI_COMM_WORLD, gr.leader, gr.rank, &s->comm[k]);
    }
    return 0;
}

static void mpi_fail(exec_spmd *r) { exec_mpi_fail(1, r->err[0] ? r->err : "a device failed"); }

/* Frees the copies of the sends MPI is done with (all of them, waiting for
 * them, when `all`). */
static void reap_sends(mpi_state *s, int all)
{
    int kept = 0;
    for (int i = 0; i < s->n_req; i++) {
        int done = 1;
        if (all) MPI_Wait(&s->req[i], MPI_STATUS_IGNORE);
        else MPI_Test(&s->req[i], &done, MPI_STATUS_IGNORE);
        if (done) {
            free(s->copy[i]);
            continue;
        }
        s->req[kept] = s->req[i];
        s->copy[kept++] = s->copy[i];
    }
    s->n_req = kept;
}

/* After a step that sends point to point: every message sent to this rank
 * was received (counts compared over all ranks), then the sends are
 * completed.  A message left over fails the run on every rank. */
static void finish_p2p(exec_spmd *r)
{
    mpi_state *s = r->be_state;
    int n = r->n_dev, *expect = calloc((size_t)n, sizeof *expect);
    if (!expect) exec_mpi_fail(1, "out of memory checking messages");
    MPI_Alltoall(s->sent, 1, MPI_INT, expect, 1, MPI_INT, MPI_COMM_WORLD);
    for (int j = 0; j < n; j++)
        if (expect[j] != s->got[j]) {
            char msg[200];
            snprintf(msg, sizeof msg, "device %d sent device %d %d messages, %d of them received in the step", j, s->rank,
                     expect[j], s->got[j]);
            exec_mpi_fail(1, msg);
        }
    free(expect);
    reap_sends(s, 1);
    memset(s->sent, 0, (size_t)n * 2 * sizeof *s->sent);
}

static void mpi_run(exec_spmd *r, spmd_device_fn fn)
{
    mpi_state *s = r->be_state;
    /* start together: the root may have spent the time on the reference */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = exec_spmd_now();
    fn(r, s->rank);
    if (r->p2p) finish_p2p(r);
    double wall = exec_spmd_now() - t0;
    MPI_Allreduce(&wall, &r->stats.wall_s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    r->be->gather(r, r->stats.dev, sizeof(exec_spmd_device_stats));
}

static void mpi_gather(exec_spmd *r, void *all, size_t each)
{
    mpi_state *s = r->be_state;
    int n = (int)each;
    if (r->root) MPI_Gather(MPI_IN_PLACE, n, MPI_BYTE, all, n, MPI_BYTE, 0, MPI_COMM_WORLD);
    else MPI_Gather((char *)all + (size_t)s->rank * each, n, MPI_BYTE, NULL, n, MPI_BYTE, 0, MPI_COMM_WORLD);
}

static MPI_Comm comm_of(exec_spmd *r, const spmd_instr *in)
{
    return ((mpi_state *)r->be_state)->comm[in->axes & (SPMD_N_MASKS - 1)];
}

static int64_t box_numel(int rank, const int64_t *len)
{
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= len[d];
    return n;
}

/* Flat offset of box [lo, lo + len) in block b when the box is one
 * contiguous run of it, else -1. */
static int64_t box_run(int rank, const spmd_block *b, const int64_t *lo, const int64_t *len)
{
    int64_t st[IR_MAX_RANK], off = 0;
    exec_row_major_strides(rank, b->dims, st);
    int d = 0;
    while (d < rank && len[d] == 1) d++;   /* leading dims of one element */
    for (int e = d + 1; e < rank; e++)     /* after the first longer dim, whole dims only */
        if (len[e] != b->dims[e]) return -1;
    for (int e = 0; e < rank; e++) off += (lo[e] - b->org[e]) * st[e];
    return off;
}

/* A datatype for box [lo, lo + len) of block b (4-byte elements). */
static MPI_Datatype box_type(int rank, const spmd_block *b, const int64_t *lo, const int64_t *len)
{
    MPI_Datatype t;
    if (rank == 0) {
        MPI_Type_contiguous(1, MPI_FLOAT, &t);
    } else {
        int sizes[IR_MAX_RANK], sub[IR_MAX_RANK], start[IR_MAX_RANK];
        for (int d = 0; d < rank; d++) {
            sizes[d] = (int)b->dims[d];
            sub[d] = (int)len[d];
            start[d] = (int)(lo[d] - b->org[d]);
        }
        MPI_Type_create_subarray(rank, sizes, sub, start, MPI_ORDER_C, MPI_FLOAT, &t);
    }
    MPI_Type_commit(&t);
    return t;
}

/* The box of member m's output block in the input's coordinates: the block
 * itself, or for a halo exchange the block shifted by the shift's offset
 * (output row i reads input row i + offset). */
static void wanted_box(exec_spmd *r, const spmd_instr *in, int m, spmd_block *b)
{
    spmd_block_of(r, in->out, m, b);
    if (in->kind == SPMD_HALO) b->org[in->dim] += r->g->ops[in->op].attrs.ints[1];
}

/* All-gather, all-to-all and halo exchange through MPI_Alltoallw: to each
 * member j the part of my input block inside the box j's output wants, from
 * each member the part of j's input block inside mine; subarray datatypes
 * address both in place.  Only valid boxes move (padding stays behind), so
 * a halo exchange sends its neighbours their border rows and nothing else. */
static int exchange_boxes(exec_spmd *r, spmd_call *c)
{
    const spmd_instr *in = c->in;
    /* an all-gather of unpadded blocks sends my whole input to everyone */
    int gather = in->kind == SPMD_ALL_GATHER && !r->padded[in->in[0]];
    int n = c->gr.n, rank = r->g->values[in->value].rank;
    int *cnt = calloc((size_t)n * 4, sizeof *cnt);
    MPI_Datatype *ty = calloc((size_t)n * 2, sizeof *ty);
    if (!cnt || !ty) {
        free(cnt);
        free(ty);
        spmd_set_error(r, "device %d: out of memory in a collective", c->dev);
        r->be->fail(r);
        return -1;
    }
    int *scnt = cnt, *rcnt = cnt + n, *sdisp = cnt + 2 * n, *rdisp = cnt + 3 * n;
    MPI_Datatype *sty = ty, *rty = ty + n;
    spmd_block mine_in, mine_out, peer;
    spmd_block_of(r, in->in[0], c->dev, &mine_in);
    wanted_box(r, in, c->dev, &mine_out);
    int64_t lo[IR_MAX_RANK], len[IR_MAX_RANK];
    for (int j = 0; j < n; j++) {
        int m = c->gr.members[j];
        sty[j] = rty[j] = MPI_FLOAT;
        if (gather) { /* my whole input goes to everyone */
            scnt[j] = (int)r->numel[in->in[0]];
        } else {
            wanted_box(r, in, m, &peer);
            if (spmd_box_meet(rank, &mine_in, &peer, lo, len)) {
                sty[j] = box_type(rank, &mine_in, lo, len);
                scnt[j] = 1;
                if (m != c->dev) c->moved += 4.0 * (double)box_numel(rank, len);
            }
        }
        spmd_block_of(r, in->in[0], m, &peer);
        if (spmd_box_meet(rank, &peer, &mine_out, lo, len)) {
            rty[j] = box_type(rank, &mine_out, lo, len);
            rcnt[j] = 1;
        }
    }
    if (gather) c->moved += 4.0 * (double)r->numel[in->in[0]] * (n - 1);
    MPI_Alltoallw(mine_in.data, scnt, sdisp, sty, mine_out.data, rcnt, rdisp, rty, comm_of(r, in));
    for (int j = 0; j < 2 * n; j++)
        if (ty[j] != MPI_FLOAT) MPI_Type_free(&ty[j]);
    free(cnt);
    free(ty);
    return 0;
}

static int mpi_all_gather(exec_spmd *r, spmd_call *c)
{
    const spmd_instr *in = c->in;
    int rank = r->g->values[in->value].rank;
    int64_t n_in = r->numel[in->in[0]], lo[IR_MAX_RANK], len[IR_MAX_RANK];
    spmd_block out, peer;
    spmd_block_of(r, in->out, c->dev, &out);
    int direct = n_in <= 0x7fffffff;
    for (int j = 0; j < c->gr.n && direct; j++) {
        spmd_block_of(r, in->in[0], c->gr.members[j], &peer);
        direct = spmd_box_meet(rank, &peer, &out, lo, len) && box_numel(rank, len) == n_in &&
                 box_run(rank, &out, lo, len) == j * n_in;
    }
    if (!direct) return exchange_boxes(r, c);
    MPI_Allgather(spmd_buf(r, c->dev, in->in[0]), (int)n_in, MPI_FLOAT, out.data, (int)n_in, MPI_FLOAT, comm_of(r, in));
    c->moved += 4.0 * (double)n_in * (c->gr.n - 1);
    return 0;
}

static int mpi_all_to_all(exec_spmd *r, spmd_call *c) { return exchange_boxes(r, c); }

/* Halo exchange: rows beyond the dim's ends are zeros (the shift's fill),
 * the rest comes from the neighbours that hold them. */
static int mpi_halo(exec_spmd *r, spmd_call *c)
{
    memset(spmd_buf(r, c->dev, c->in->out), 0, (size_t)r->numel[c->in->out] * 4);
    return exchange_boxes(r, c);
}

/* The backend's scratch, at least `bytes` long (grown on demand), or NULL
 * after failing the run with a message naming `what`. */
static float *scratch(exec_spmd *r, spmd_call *c, size_t bytes, const char *what)
{
    mpi_state *s = r->be_state;
    if (bytes > s->pack_bytes) {
        float *p = realloc(s->pack, bytes);
        if (!p) {
            spmd_set_error(r, "device %d: out of memory packing %s (%zu bytes)", c->dev, what, bytes);
            r->be->fail(r);
            return NULL;
        }
        s->pack = p;
        s->pack_bytes = bytes;
    }
    return s->pack;
}

static int too_long(exec_spmd *r, spmd_call *c, int64_t n, const char *what)
{
    if (n <= 0x7fffffff) return 0;
    spmd_set_error(r, "device %d: %s of %lld elements is above MPI's int count", c->dev, what, (long long)n);
    r->be->fail(r);
    return 1;
}

/* An all-reduce straight on the device buffers; a bucket of them packed
 * into one buffer (member after member), one MPI_Allreduce in place,
 * unpacked into the members' outputs. */
static int mpi_all_reduce(exec_spmd *r, spmd_call *c)
{
    const spmd_instr *in = c->in;
    MPI_Op op = in->reduce_max ? MPI_MAX : MPI_SUM;
    int64_t n = 0;
    for (int m = 0; m < c->n_in; m++) n += r->numel[in[m].out];
    if (too_long(r, c, n, c->n_in > 1 ? "a bucket of all-reduces" : "an all-reduce")) return -1;
    if (c->n_in == 1) {
        MPI_Allreduce(spmd_buf(r, c->dev, in->in[0]), spmd_buf(r, c->dev, in->out), (int)n, MPI_FLOAT, op, comm_of(r, in));
    } else {
        float *pack = scratch(r, c, (size_t)n * 4, "a bucket of all-reduces");
        if (!pack) return -1;
        for (int m = 0, at = 0; m < c->n_in; at += (int)r->numel[in[m].out], m++)
            memcpy(pack + at, spmd_buf(r, c->dev, in[m].in[0]), (size_t)r->numel[in[m].out] * 4);
        MPI_Allreduce(MPI_IN_PLACE, pack, (int)n, MPI_FLOAT, op, comm_of(r, in));
        for (int m = 0, at = 0; m < c->n_in; at += (int)r->numel[in[m].out], m++)
            memcpy(spmd_buf(r, c->dev, in[m].out), pack + at, (size_t)r->numel[in[m].out] * 4);
    }
    if (c->gr.n > 1) c->moved += 4.0 * (double)n;
    return 0;
}

/* Whether every member j's output block, cut from my input of instruction
 * `in`, is chunk j of the input (what MPI_Reduce_scatter_block reads). */
static int scatter_in_place(exec_spmd *r, const spmd_call *c, const spmd_instr *in)
{
    int rank = r->g->values[in->value].rank;
    int64_t chunk = r->numel[in->out], lo[IR_MAX_RANK], len[IR_MAX_RANK];
    spmd_block src, peer;
    spmd_block_of(r, in->in[0], c->dev, &src);
    if (r->padded[in->in[0]] || r->padded[in->out]) return 0; /* padded blocks move valid boxes only */
    for (int j = 0; j < c->gr.n; j++) {
        spmd_block_of(r, in->out, c->gr.members[j], &peer);
        if (!spmd_box_meet(rank, &src, &peer, lo, len) || box_run(rank, &src, lo, len) != j * chunk) return 0;
    }
    return 1;
}

/* Reduce-scatter: MPI_Reduce_scatter_block on the device buffers when each
 * member's part of my input is already chunk j of it; otherwise, and for a
 * bucket, the input is packed by destination (for group member j: every
 * bucket member's part for j, member after member, `total` elements), one
 * call reduces it, and a bucket's result is unpacked into the outputs. */
static int mpi_reduce_scatter(exec_spmd *r, spmd_call *c)
{
    const spmd_instr *in = c->in;
    int n = c->gr.n;
    int64_t total = 0;
    for (int m = 0; m < c->n_in; m++) total += r->numel[in[m].out];
    if (too_long(r, c, total * n, "a reduce-scatter")) return -1;
    MPI_Op op = in->reduce_max ? MPI_MAX : MPI_SUM;
    if (c->n_in == 1 && scatter_in_place(r, c, in)) {
        MPI_Reduce_scatter_block(spmd_buf(r, c->dev, in->in[0]), spmd_buf(r, c->dev, in->out), (int)total, MPI_FLOAT, op,
                                 comm_of(r, in));
        c->moved += 4.0 * (double)total * (n - 1);
        return 0;
    }
    float *pack = scratch(r, c, (size_t)total * (size_t)(n + 1) * 4, "a reduce-scatter");
    if (!pack) return -1;
    int64_t at = 0; /* member m's offset inside each destination's part */
    for (int m = 0; m < c->n_in; at += r->numel[in[m].out], m++) {
        int rank = r->g->values[in[m].value].rank;
        spmd_block src, dst;
        spmd_block_of(r, in[m].in[0], c->dev, &src);
        for (int j = 0; j < n; j++) {
            spmd_block_of(r, in[m].out, c->gr.members[j], &dst);
            dst.data = pack + (size_t)j * (size_t)total + (size_t)at;
            spmd_box_apply(SPMD_BOX_COPY, rank, dst.org, dst.valid, &src, &dst); /* padding: reset after */
        }
    }
    float *got = pack + (size_t)n * (size_t)total;
    MPI_Reduce_scatter_block(pack, c->n_in == 1 ? spmd_buf(r, c->dev, in->out) : got, (int)total, MPI_FLOAT, op, comm_of(r, in));
    if (c->n_in > 1)
        for (int m = 0, off = 0; m < c->n_in; off += (int)r->numel[in[m].out], m++)
            memcpy(spmd_buf(r, c->dev, in[m].out), got + off, (size_t)r->numel[in[m].out] * 4);
    c->moved += 4.0 * (double)total * (n - 1);
    return 0;
}

/* ---- point to point ----------------------------------------------------- */

/* Fails the run when m cannot go through MPI (tag, count); returns 1 then. */
static int p2p_bad(exec_spmd *r, spmd_p2p *m)
{
    mpi_state *s = r->be_state;
    if (spmd_p2p_bad(r, m)) return 1;
    if (m->tag > s->tag_ub) { /* cannot happen: the standard says at least 32767 */
        spmd_set_error(r, "device %d: message tag %d is above this MPI's MPI_TAG_UB %d", m->dev, m->tag, s->tag_ub);
        r->be->fail(r);
        return 1;
    }
    spmd_call c = {.dev = m->dev};
    return too_long(r, &c, m->n, "a message");
}

static int mpi_send(exec_spmd *r, spmd_p2p *m)
{
    mpi_state *s = r->be_state;
    size_t bytes = (size_t)m->n * sizeof(float);
    if (p2p_bad(r, m)) return -1;
    reap_sends(s, 0);
    if (s->n_req == s->cap_req) {
        int cap = s->cap_req ? 2 * s->cap_req : 16;
        MPI_Request *req = realloc(s->req, (size_t)cap * sizeof *req);
        if (req) s->req = req;
        float **copy = realloc(s->copy, (size_t)cap * sizeof *copy);
        if (copy) s->copy = copy;
        if (!req || !copy) goto oom;
        s->cap_req = cap;
    }
    float *copy = malloc(bytes ? bytes : 1);
    if (!copy) goto oom;
    if (bytes) memcpy(copy, m->data, bytes);
    if (MPI_Isend(copy, (int)m->n, MPI_FLOAT, m->peer, m->tag, s->p2p, &s->req[s->n_req]) != MPI_SUCCESS) {
        free(copy);
        spmd_set_error(r, "device %d: MPI_Isend to device %d (tag %d) failed", m->dev, m->peer, m->tag);
        r->be->fail(r);
        return -1;
    }
    s->copy[s->n_req++] = copy;
    s->sent[m->peer]++;
    if (m->peer != m->dev) m->moved += (double)bytes;
    return 0;
oom:
    spmd_set_error(r, "device %d: out of memory sending %zu bytes to device %d", m->dev, bytes, m->peer);
    r->be->fail(r);
    return -1;
}

static int mpi_recv(exec_spmd *r, spmd_p2p *m)
{
    mpi_state *s = r->be_state;
    if (p2p_bad(r, m)) return -1;
    MPI_Status st;
    int got = -1;
    double t0 = exec_spmd_now();
    int rc = MPI_Recv(m->data, (int)m->n, MPI_FLOAT, m->peer, m->tag, s->p2p, &st);
    m->wait_s += exec_spmd_now() - t0;
    if (rc == MPI_SUCCESS) MPI_Get_count(&st, MPI_FLOAT, &got);
    if (got != (int)m->n) {
        char why[MPI_MAX_ERROR_STRING] = "";
        int len = 0;
        if (rc != MPI_SUCCESS) MPI_Error_string(rc, why, &len);
        spmd_set_error(r, "device %d: the message from device %d (tag %d): %s%s; the receive expects %lld elements", m->dev,
                       m->peer, m->tag, rc == MPI_SUCCESS ? "shorter" : "MPI_Recv failed: ", why, (long long)m->n);
        r->be->fail(r);
        return -1;
    }
    s->got[m->peer]++;
    return 0;
}

/* ---- the check ---------------------------------------------------------- */

static const void *mpi_fetch(exec_spmd *r, int b, int from, int to, void *tmp)
{
    mpi_state *s = r->be_state;
    int n = (int)r->numel[b];
    if (from == to) return s->rank == from ? spmd_buf(r, from, b) : NULL;
    if (s->rank == from) MPI_Send(spmd_buf(r, from, b), n, MPI_FLOAT, to, b & 0x7fff, MPI_COMM_WORLD);
    if (s->rank != to) return NULL;
    MPI_Recv(tmp, n, MPI_FLOAT, from, b & 0x7fff, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return tmp;
}

static double mpi_max_all(exec_spmd *r, double x)
{
    double all = x;
    MPI_Allreduce(&x, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return all;
}

const spmd_backend spmd_mpi_backend = {
    .name = "mpi",
    .open = mpi_open,
    .close = mpi_close,
    .run = mpi_run,
    .all_gather = mpi_all_gather,
    .all_reduce = mpi_all_reduce,
    .reduce_scatter = mpi_reduce_scatter,
    .all_to_all = mpi_all_to_all,
    .halo = mpi_halo,
    .send = mpi_send,
    .recv = mpi_recv,
    .fail = mpi_fail,
    .fetch = mpi_fetch,
    .max_all = mpi_max_all,
    .gather = mpi_gather,
};

#endif
