/* spmd_pipe.c - pipelined programs (analysis/pipeline.h) on the SPMD runtime:
 * each device runs only its stage's tasks, in its schedule's order, with real
 * transfers between stages.
 *
 * A pipe_program is one body program (the step of one micro-batch) cut into
 * segments: the forward and backward of every virtual stage, the end of step
 * of every stage, and the common end every stage runs.  The runtime expands
 * it once into one ordinary SPMD program, the *stream*: for every stage, its
 * tasks in pipe_task_order (each a copy of its segment's instructions), then
 * the common end and its own end.  In a task of micro-batch k, every buffer
 * of class MB or ACC (docs/pipeline.md) is renamed to micro-batch k's
 * instance (a buffer of its own), so the stream is SSA per device and the
 * existing machinery runs it unchanged: fused groups, gradient buckets,
 * collectives inside a stage (groups over the other axes: every member is
 * on the same stage, at the same point of the same stream), the arena laid
 * out by liveness (spmd_layout_ex over the stage's part of the stream).
 *
 * ACC buffers (values the end of step reads: gradients, the loss) have one
 * accumulator each besides the instances; right after the instruction
 * writing an instance runs, the instance is added into the accumulator
 * (micro-batch 0 copies), and the end of step, the outputs and the SENDs at
 * the start of an end read the accumulator.  An accumulator a stage adds
 * into lives for the whole step, as do the inputs' instances (filled once);
 * every other buffer from its writer to its last reader in the stream, so a
 * stage holds at once the activations of the micro-batches its schedule has
 * in flight, and its arena is the peak of that.
 *
 * SEND and RECV go through the backend's send and recv (spmd_impl.h) to the
 * device with the same coordinates on the other axes and the peer's stage on
 * the pipeline axis.  The tag of a transfer is j * m + k: j numbers the
 * buffers that travel (in body order), k is the micro-batch (0 in an end).
 *
 * Timings: each device records when each of its tasks starts and ends (from
 * its own start of the step), its time in transfers and, of that, blocked in
 * a recv.  After the step, idle_s = the step's wall time minus the device's
 * busy time (compute, collectives, transfers not blocked): its share of the
 * pipeline's bubble when every device has a core of its own.  Each device
 * thread also records its CPU seconds at every transfer, and the step is
 * replayed from that trace as if it had (replay(): the bubble on a machine
 * with fewer free cores than devices).
 */
#include "exec/spmd_impl.h"

#include "analysis/pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct spmd_pipe {
    const pipe_program *pp;
    spmd_program e;     /* the stream (arrays owned here) */
    int p, m, axis, n_tasks;
    int *task_at;       /* [stage * (n_tasks + 2) + t]: first instruction of task t in e; t = n_tasks: the
                           end of step; n_tasks + 1: the stage's last instruction + 1 */
    int *acc_to;        /* per instruction of e: the accumulator its result is added into, or -1 */
    uint8_t *acc_add;   /* per instruction of e: add (1) or copy (0: micro-batch 0) */
    int *mb;            /* per instruction of e: its micro-batch (-1: end of step) */
    int *tag;           /* per instruction of e: SEND / RECV: the transfer's tag */
    int *inst;          /* per body buffer: the id of its instance for micro-batch 1 (then 2, ...), or -1 */
    int *accum;         /* per body buffer: its accumulator, or -1 */
    int *body;          /* per buffer of e: the body buffer it is an instance or accumulator of */
    uint8_t *held;      /* [stage * e.n_bufs + b]: the stage uses buffer b of e */
    uint8_t *pinned;    /* [stage * e.n_bufs + b]: live over the whole step on the stage */
    int *home;          /* per buffer of e: the stage whose copy is the value (outputs, arguments) */
    size_t *off;        /* [stage * e.n_bufs + b]: offsets */
    size_t *bytes;      /* per stage: its arena */
    double *task_t;     /* [dev * 2 n_tasks + 2 t (+ 1)]: start and end of task t (seconds from the device's start) */
    double *task_cpu;   /* the same in the device thread's CPU seconds; [dev * (2 n_tasks + 2) + 2 n_tasks (+ 1)]:
                           its end of step */
    /* the CPU-time trace (the replay below) */
    int *p2p_ord;       /* per instruction of e: its rank among its stage's SENDs and RECVs, or -1 */
    int *match;         /* per RECV of e: the SEND of its message; else -1 */
    int n_p2p;          /* the most SENDs and RECVs a stage has */
    double *cpu_t;      /* [dev * (2 n_p2p + 1) + 2k (+ 1)]: the device thread's CPU seconds at the start and end
                           of its k-th transfer; [.. + 2 n_p2p]: at its end of step */
};

/* ---- the stream --------------------------------------------------------------- */

static int stage_of(const exec_spmd *r, int dev) { return (int)shard_device_coord(&r->p->mesh, dev, r->pipe->axis); }

/* Buffer b of the body as micro-batch k's task sees it (k < 0: the end of step). */
static int rename_buf(const spmd_pipe *s, int b, int k)
{
    if (b < 0) return b;
    int cls = s->pp->buf_class[b];
    if (k < 0) return cls == PIPE_BUF_ACC ? s->accum[b] : b;
    if ((cls == PIPE_BUF_MB || cls == PIPE_BUF_ACC) && k > 0) return s->inst[b] + k - 1;
    return b;
}

/* Buffers of e: the body's, the instances of micro-batches 1..m-1 of MB and
 * ACC buffers, one accumulator per ACC buffer. */
static void make_buffers(spmd_pipe *s)
{
    const spmd_program *p = s->pp->prog;
    int nb = p->n_bufs, n = nb;
    s->inst = ir_xcalloc((size_t)nb + 1, sizeof *s->inst);
    s->accum = ir_xcalloc((size_t)nb + 1, sizeof *s->accum);
    for (int b = 0; b < nb; b++) {
        int cls = s->pp->buf_class[b];
        s->inst[b] = s->accum[b] = -1;
        if (cls == PIPE_BUF_MB || cls == PIPE_BUF_ACC) s->inst[b] = n, n += s->m - 1;
        if (cls == PIPE_BUF_ACC) s->accum[b] = n++;
    }
    s->e.bufs = ir_xcalloc((size_t)n + 1, sizeof *s->e.bufs);
    s->body = ir_xcalloc((size_t)n + 1, sizeof *s->body);
    s->e.n_bufs = s->e.cap_bufs = n;
    for (int b = 0; b < nb; b++) {
        for (int k = 0; k < s->m; k++) {
            int x = rename_buf(s, b, k);
            s->e.bufs[x] = p->bufs[b];
            s->body[x] = b;
        }
        if (s->accum[b] >= 0) {
            s->e.bufs[s->accum[b]] = p->bufs[b];
            s->body[s->accum[b]] = b;
        }
    }
}

/* Appends segment seg of the body, as micro-batch k's (k < 0: an end). */
static void emit_segment(spmd_pipe *s, int seg, int k, int *n, int *bucket)
{
    const spmd_program *p = s->pp->prog;
    const pipe_range *rg = &s->pp->seg[seg];
    int first_bucket = -1, last_old = -1;
    for (int i = rg->lo; i < rg->hi; i++) {
        spmd_instr in = p->instrs[i];
        in.out = in.kind == SPMD_SEND ? -1 : rename_buf(s, in.out, k); /* a SEND writes nothing here */
        for (int j = 0; j < IR_MAX_OPERANDS; j++) in.in[j] = rename_buf(s, in.in[j], k);
        if (in.bucket >= 0) { /* a fresh bucket number per copy: copies never merge */
            if (in.bucket != last_old) first_bucket = (*bucket)++;
            last_old = in.bucket;
            in.bucket = first_bucket;
        }
        int x = (*n)++;
        s->e.instrs[x] = in;
        s->e.fuse.len[x] = p->fuse.len[i];
        s->e.fuse.step[x] = p->fuse.step[i];
        s->mb[x] = k;
        s->acc_to[x] = -1;
        int cls = s->pp->buf_class[p->instrs[i].out];
        if (k >= 0 && in.kind != SPMD_SEND && cls == PIPE_BUF_ACC) {
            s->acc_to[x] = s->accum[p->instrs[i].out];
            s->acc_add[x] = k > 0;
        }
    }
}

/* Tags: the buffers that travel, numbered in body order. */
static int make_tags(spmd_pipe *s, char *err, size_t errlen)
{
    const spmd_program *p = s->pp->prog;
    int *j_of = ir_xcalloc((size_t)p->n_bufs + 1, sizeof *j_of), n = 0;
    for (int b = 0; b < p->n_bufs; b++) j_of[b] = -1;
    for (int i = 0; i < p->n_instrs; i++)
        if (spmd_kind_is_p2p(p->instrs[i].kind) && j_of[p->instrs[i].out] < 0) j_of[p->instrs[i].out] = n++;
    for (int x = 0; x < s->e.n_instrs; x++) {
        const spmd_instr *in = &s->e.instrs[x];
        if (!spmd_kind_is_p2p(in->kind)) continue;
        int b = s->body[in->kind == SPMD_SEND ? in->in[0] : in->out];
        s->tag[x] = j_of[b] * s->m + (s->mb[x] > 0 ? s->mb[x] : 0);
    }
    free(j_of);
    if ((int64_t)n * s->m - 1 > SPMD_P2P_MAX_TAG)
        return ir_errf(err, errlen, "pipeline: %d buffers travel between stages, %d times each: more tags than the %d MPI promises", n,
                       s->m, SPMD_P2P_MAX_TAG + 1);
    return 0;
}

/* The stream: every stage's tasks, then its ends. */
static int make_stream(spmd_pipe *s, char *err, size_t errlen)
{
    const pipe_program *pp = s->pp;
    const pipe_spec *sp = &pp->spec;
    int total = 0, n = 0, bucket = 0;
    pipe_task *order = ir_xcalloc((size_t)s->n_tasks + 1, sizeof *order);
    for (int r = 0; r < s->p; r++) {
        pipe_task_order(sp, r, order);
        for (int t = 0; t < s->n_tasks; t++) total += pp->seg[pipe_task_seg(sp, r, &order[t])].hi - pp->seg[pipe_task_seg(sp, r, &order[t])].lo;
        total += pp->seg[pipe_seg_common(sp)].hi - pp->seg[pipe_seg_common(sp)].lo + pp->seg[2 * pp->n_vstages + r].hi -
                 pp->seg[2 * pp->n_vstages + r].lo;
    }
    s->e.instrs = ir_xcalloc((size_t)total + 1, sizeof *s->e.instrs);
    s->e.n_instrs = s->e.cap_instrs = total;
    s->e.fuse.len = ir_xcalloc((size_t)total + 1, sizeof *s->e.fuse.len);
    s->e.fuse.step = ir_xcalloc((size_t)total + 1, sizeof *s->e.fuse.step);
    s->e.fuse.cap = total;
    s->acc_to = ir_xcalloc((size_t)total + 1, sizeof *s->acc_to);
    s->acc_add = ir_xcalloc((size_t)total + 1, 1);
    s->mb = ir_xcalloc((size_t)total + 1, sizeof *s->mb);
    s->tag = ir_xcalloc((size_t)total + 1, sizeof *s->tag);
    s->task_at = ir_xcalloc((size_t)s->p * (size_t)(s->n_tasks + 2) + 1, sizeof *s->task_at);
    for (int r = 0; r < s->p; r++) {
        int *at = s->task_at + (size_t)r * (size_t)(s->n_tasks + 2);
        pipe_task_order(sp, r, order);
        for (int t = 0; t < s->n_tasks; t++) {
            at[t] = n;
            emit_segment(s, pipe_task_seg(sp, r, &order[t]), order[t].mb, &n, &bucket);
        }
        at[s->n_tasks] = n;
        emit_segment(s, pipe_seg_common(sp), -1, &n, &bucket);
        emit_segment(s, 2 * pp->n_vstages + r, -1, &n, &bucket);
        at[s->n_tasks + 1] = n;
    }
    free(order);
    s->e.n_buckets = bucket;
    for (int i = 0; i < n; i++)
        if (s->e.fuse.len[i] > 1) s->e.fuse.n_groups++, s->e.fuse.n_fused += s->e.fuse.len[i];
    return make_tags(s, err, errlen);
}

/* Each stage's transfers numbered in its order, and each RECV's SEND (same
 * tag, the two stages swapped). */
static void make_trace(spmd_pipe *s)
{
    const spmd_program *e = &s->e;
    s->p2p_ord = ir_xcalloc((size_t)e->n_instrs + 1, sizeof *s->p2p_ord);
    s->match = ir_xcalloc((size_t)e->n_instrs + 1, sizeof *s->match);
    int *first_send = ir_xcalloc((size_t)SPMD_P2P_MAX_TAG + 1, sizeof *first_send), *next = ir_xcalloc((size_t)e->n_instrs + 1, sizeof *next);
    for (int t = 0; t <= SPMD_P2P_MAX_TAG; t++) first_send[t] = -1;
    for (int r = 0; r < s->p; r++) {
        const int *at = s->task_at + (size_t)r * (size_t)(s->n_tasks + 2);
        int k = 0;
        for (int i = at[0]; i < at[s->n_tasks + 1]; i++) {
            s->p2p_ord[i] = s->match[i] = next[i] = -1;
            if (!spmd_kind_is_p2p(e->instrs[i].kind)) continue;
            s->p2p_ord[i] = k++;
            if (e->instrs[i].kind == SPMD_SEND) next[i] = first_send[s->tag[i]], first_send[s->tag[i]] = i;
        }
        if (k > s->n_p2p) s->n_p2p = k;
    }
    for (int r = 0; r < s->p; r++) {
        const int *at = s->task_at + (size_t)r * (size_t)(s->n_tasks + 2);
        for (int i = at[0]; i < at[s->n_tasks + 1]; i++)
            if (e->instrs[i].kind == SPMD_RECV)
                for (int j = first_send[s->tag[i]]; j >= 0 && s->match[i] < 0; j = next[j])
                    if (e->instrs[j].peer == r && j >= s->task_at[(size_t)e->instrs[i].peer * (size_t)(s->n_tasks + 2)] &&
                        j < s->task_at[(size_t)e->instrs[i].peer * (size_t)(s->n_tasks + 2) + (size_t)s->n_tasks + 1])
                        s->match[i] = j;
    }
    free(first_send);
    free(next);
}

/* ---- per stage: what it holds, its layout -------------------------------- */

/* held and pinned of stage r: every buffer its part of the stream uses, the
 * arguments it holds (pipe_program.holds), the accumulators it adds into and
 * the instances of the inputs it reads (filled once: the whole step). */
static void stage_buffers(spmd_pipe *s, int r)
{
    const spmd_program *e = &s->e, *p = s->pp->prog;
    int nb = e->n_bufs, *at = s->task_at + (size_t)r * (size_t)(s->n_tasks + 2);
    uint8_t *held = s->held + (size_t)r * nb, *pinned = s->pinned + (size_t)r * nb;
    for (int i = at[0]; i < at[s->n_tasks + 1]; i++) {
        const spmd_instr *in = &e->instrs[i];
        if (in->out >= 0) held[in->out] = 1;
        for (int j = 0; j < IR_MAX_OPERANDS; j++)
            if (in->in[j] >= 0) held[in->in[j]] = 1;
        if (s->acc_to[i] >= 0) held[s->acc_to[i]] = pinned[s->acc_to[i]] = 1;
    }
    for (int v = 0; v < p->g->n_values; v++) {
        int b = p->arg_buf[v];
        if (b < 0 || !s->pp->holds[(size_t)r * p->n_bufs + b]) continue;
        held[b] = 1;
        if (s->pp->buf_class[b] != PIPE_BUF_MB) continue;
        for (int k = 0; k < s->m; k++) held[rename_buf(s, b, k)] = pinned[rename_buf(s, b, k)] = 1;
    }
}

/* Stage r's part of the stream as a program of its own (instructions,
 * fused groups; arguments and outputs it holds), for spmd_layout_ex. */
static spmd_program stage_view(const spmd_pipe *s, int r, int *arg_buf, int *out_buf)
{
    const spmd_program *e = &s->e;
    const int *at = s->task_at + (size_t)r * (size_t)(s->n_tasks + 2);
    const uint8_t *held = s->held + (size_t)r * e->n_bufs;
    spmd_program v = *e;
    v.instrs = e->instrs + at[0];
    v.n_instrs = at[s->n_tasks + 1] - at[0];
    v.fuse.len = e->fuse.len + at[0];
    v.fuse.step = e->fuse.step + at[0];
    for (int x = 0; x < e->g->n_values; x++) arg_buf[x] = e->arg_buf[x] >= 0 && held[e->arg_buf[x]] ? e->arg_buf[x] : -1;
    for (int o = 0; o < e->g->n_outputs; o++) out_buf[o] = held[e->out_buf[o]] ? e->out_buf[o] : -1;
    v.arg_buf = arg_buf;
    v.out_buf = out_buf;
    return v;
}

/* Every stage's offsets and arena (s->off, s->bytes) from the buffers'
 * sizes; release (per instruction of the stream, may be NULL) as
 * spmd_layout's.  Returns 0, or -1 when out of memory. */
static int layout_stages(spmd_pipe *s, const int64_t *numel, int reuse, uint8_t *release)
{
    const spmd_program *e = &s->e;
    int nb = e->n_bufs, rc = 0;
    int *arg_buf = calloc((size_t)e->g->n_values + 1, sizeof *arg_buf), *out_buf = calloc((size_t)e->g->n_outputs + 1, sizeof *out_buf);
    if (!arg_buf || !out_buf) rc = -1;
    for (int st = 0; st < s->p && !rc; st++) {
        spmd_program v = stage_view(s, st, arg_buf, out_buf);
        const int *at = s->task_at + (size_t)st * (size_t)(s->n_tasks + 2);
        rc = spmd_layout_ex(&v, numel, reuse, s->pinned + (size_t)st * nb, s->off + (size_t)st * nb, &s->bytes[st],
                            release ? release + at[0] : NULL);
    }
    free(arg_buf);
    free(out_buf);
    return rc;
}

int spmd_stages_layout(exec_spmd *r, int reuse)
{
    spmd_pipe *s = r->pipe;
    if (!s) return spmd_layout(r->p, r->numel, reuse, r->off, &r->dev_bytes, r->release); /* one stage */
    if (layout_stages(s, r->numel, reuse, r->release) < 0) return -1;
    for (int st = 0; st < s->p; st++)
        if (s->bytes[st] > r->dev_bytes) r->dev_bytes = s->bytes[st];
    for (int d = 0; d < r->n_dev; d++) r->dev_off[d] = s->off + (size_t)stage_of(r, d) * s->e.n_bufs;
    return 0;
}

int exec_program_bytes(const pipe_program *pp, size_t *stage_bytes, char *err, size_t errlen)
{
    if (pp->n_segs <= 1) { /* one stage */
        stage_bytes[0] = exec_spmd_device_bytes(pp->prog);
        return 0;
    }
    spmd_pipe *s = spmd_pipe_new(pp, err, errlen);
    if (!s) return -1;
    const spmd_program *e = &s->e;
    int64_t *numel = calloc((size_t)e->n_bufs + 1, sizeof *numel);
    int rc = numel ? 0 : -1;
    for (int b = 0; numel && b < e->n_bufs; b++) {
        int64_t dims[IR_MAX_RANK];
        spmd_buffer_dims(e, b, dims);
        numel[b] = 1;
        for (int d = 0; d < e->g->values[e->bufs[b].value].rank; d++) numel[b] *= dims[d];
    }
    const char *reuse = getenv("CARVE_REUSE");
    if (!rc) rc = layout_stages(s, numel, !(reuse && !strcmp(reuse, "0")), NULL);
    if (!rc) memcpy(stage_bytes, s->bytes, (size_t)s->p * sizeof *stage_bytes);
    else ir_errf(err, errlen, "out of memory laying out the stages' buffers");
    free(numel);
    spmd_pipe_free(s);
    return rc;
}

size_t spmd_device_arena_bytes(const exec_spmd *r, int dev) { return r->pipe ? r->pipe->bytes[stage_of(r, dev)] : r->dev_bytes; }

/* ---- building and freeing -------------------------------------------------- */

/* The home stage of each buffer of e: where its value is read from by the
 * check: an argument's owner (else stage 0), an output's maker. */
static void make_homes(spmd_pipe *s)
{
    const spmd_program *e = &s->e, *p = s->pp->prog;
    s->home = ir_xcalloc((size_t)e->n_bufs + 1, sizeof *s->home);
    for (int b = 0; b < e->n_bufs; b++) {
        s->home[b] = -1;
        for (int st = 0; st < s->p && s->home[b] < 0; st++)
            if (s->held[(size_t)st * e->n_bufs + b]) s->home[b] = st;
        int own = s->pp->owner[s->body[b]];
        if (own >= 0 && s->body[b] == b && s->held[(size_t)own * e->n_bufs + b]) s->home[b] = own;
    }
    /* an output: the stage whose instruction (not a RECV) writes it */
    for (int o = 0; o < e->g->n_outputs; o++) {
        int b = e->out_buf[o];
        for (int st = 0; st < s->p; st++) {
            const int *at = s->task_at + (size_t)st * (size_t)(s->n_tasks + 2);
            for (int i = at[0]; i < at[s->n_tasks + 1]; i++)
                if ((e->instrs[i].out == b && e->instrs[i].kind != SPMD_RECV) || s->acc_to[i] == b) s->home[b] = st;
        }
    }
    (void)p;
}

void spmd_pipe_free(spmd_pipe *s)
{
    if (!s) return;
    free(s->e.bufs);
    free(s->e.instrs);
    free(s->e.arg_buf);
    free(s->e.out_buf);
    free(s->e.fuse.len);
    free(s->e.fuse.step);
    free(s->task_at);
    free(s->acc_to);
    free(s->acc_add);
    free(s->mb);
    free(s->tag);
    free(s->inst);
    free(s->accum);
    free(s->body);
    free(s->held);
    free(s->pinned);
    free(s->home);
    free(s->off);
    free(s->bytes);
    free(s->task_t);
    free(s->task_cpu);
    free(s->p2p_ord);
    free(s->match);
    free(s->cpu_t);
    free(s);
}

spmd_pipe *spmd_pipe_new(const pipe_program *pp, char *err, size_t errlen)
{
    const spmd_program *p = pp->prog;
    spmd_pipe *s = ir_xcalloc(1, sizeof *s);
    s->pp = pp;
    s->p = pp->spec.stages;
    s->m = pp->spec.microbatches;
    s->axis = pp->spec.axis;
    s->n_tasks = pipe_task_count(&pp->spec);
    s->e.g = p->g;
    s->e.mesh = p->mesh;
    s->e.opts = p->opts;
    make_buffers(s);
    if (make_stream(s, err, errlen) < 0) {
        spmd_pipe_free(s);
        return NULL;
    }
    const ir_graph *g = p->g;
    s->e.arg_buf = ir_xcalloc((size_t)g->n_values + 1, sizeof *s->e.arg_buf);
    s->e.out_buf = ir_xcalloc((size_t)g->n_outputs + 1, sizeof *s->e.out_buf);
    memcpy(s->e.arg_buf, p->arg_buf, (size_t)g->n_values * sizeof *s->e.arg_buf);
    for (int o = 0; o < g->n_outputs; o++) s->e.out_buf[o] = rename_buf(s, p->out_buf[o], -1);
    for (int i = 0; i < s->e.n_instrs; i++) {
        const spmd_instr *in = &s->e.instrs[i];
        if (in->kind < SPMD_N_KINDS) s->e.stats.count[in->kind][in->phase]++, s->e.stats.bytes[in->kind][in->phase] += (double)in->bytes;
    }
    size_t nb = (size_t)s->e.n_bufs;
    s->held = ir_xcalloc((size_t)s->p * nb + 1, 1);
    s->pinned = ir_xcalloc((size_t)s->p * nb + 1, 1);
    s->off = ir_xcalloc((size_t)s->p * nb + 1, sizeof *s->off);
    s->bytes = ir_xcalloc((size_t)s->p + 1, sizeof *s->bytes);
    for (int r = 0; r < s->p; r++) stage_buffers(s, r);
    make_homes(s);
    s->task_t = ir_xcalloc((size_t)p->mesh.n_devices * 2 * (size_t)s->n_tasks + 1, sizeof *s->task_t);
    s->task_cpu = ir_xcalloc((size_t)p->mesh.n_devices * (2 * (size_t)s->n_tasks + 2) + 1, sizeof *s->task_cpu);
    make_trace(s);
    s->cpu_t = ir_xcalloc((size_t)p->mesh.n_devices * (2 * (size_t)s->n_p2p + 1) + 1, sizeof *s->cpu_t);
    return s;
}

const spmd_program *spmd_pipe_stream(const spmd_pipe *s) { return &s->e; }

exec_spmd *exec_program_new(const pipe_program *pp, exec_backend backend, size_t max_bytes, char *err, size_t errlen)
{
    if (pp->n_segs <= 1) return spmd_runtime_new(pp->prog, NULL, backend, max_bytes, err, errlen); /* one stage */
    spmd_pipe *pipe = spmd_pipe_new(pp, err, errlen);
    return pipe ? spmd_runtime_new(spmd_pipe_stream(pipe), pipe, backend, max_bytes, err, errlen) : NULL;
}

/* ---- running -------------------------------------------------------------- */

/* CPU seconds of the calling thread (the device's work, not the time it
 * waits or another thread runs on its core). */
static double thread_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* SEND or RECV instruction i on device dev, whose thread had cpu_start CPU
 * seconds at its start of the step.  Returns 0, or -1 when the run stopped. */
static int transfer(exec_spmd *r, int dev, int i, double cpu_start, exec_spmd_device_stats *st)
{
    spmd_pipe *s = r->pipe;
    const spmd_instr *in = &r->p->instrs[i];
    int send = in->kind == SPMD_SEND, b = send ? in->in[0] : in->out;
    int my = stage_of(r, dev);
    spmd_p2p m = {.dev = dev, .peer = dev + (in->peer - my) * (int)r->axis_stride[s->axis], .tag = s->tag[i],
                  .data = spmd_buf(r, dev, b), .n = r->numel[b]};
    if (!send) exec_arena_place(&r->arena[dev], r->dev_off[dev][b], (size_t)r->numel[b] * 4);
    double *cpu = s->cpu_t + (size_t)dev * (2 * (size_t)s->n_p2p + 1) + 2 * (size_t)s->p2p_ord[i];
    cpu[0] = thread_cpu() - cpu_start;
    double t0 = exec_spmd_now();
    int rc = send ? r->be->send(r, &m) : r->be->recv(r, &m);
    double dt = exec_spmd_now() - t0;
    cpu[1] = thread_cpu() - cpu_start;
    st->p2p_s += dt;
    st->p2p_wait_s += m.wait_s;
    st->moved_bytes += m.moved;
    st->kind_s[in->kind] += dt;
    st->kind_bytes[in->kind] += m.moved;
    return rc;
}

/* Adds the result of instruction i into its accumulator (or copies it, for
 * micro-batch 0). */
static void accumulate(exec_spmd *r, int dev, int i, exec_spmd_device_stats *st)
{
    spmd_pipe *s = r->pipe;
    int src = r->p->instrs[i].out, dst = s->acc_to[i];
    double t0 = exec_spmd_now();
    if (!s->acc_add[i]) exec_arena_place(&r->arena[dev], r->dev_off[dev][dst], (size_t)r->numel[dst] * 4);
    spmd_run_op(s->acc_add[i] ? SPMD_BOX_ADD : SPMD_BOX_COPY, spmd_buf(r, dev, src), spmd_buf(r, dev, dst), r->numel[src]);
    double dt = exec_spmd_now() - t0;
    st->compute_s += dt;
    st->accumulate_s += dt;
}

/* Instructions [lo, hi) of the stream on device dev.  Returns 0, or -1 when
 * the run stopped. */
static int run_span(exec_spmd *r, int dev, int lo, int hi, double cpu_start, int *members, exec_spmd_device_stats *st)
{
    spmd_pipe *s = r->pipe;
    for (int i = lo, n; i < hi; i += n) {
        if (atomic_load_explicit(&r->abort, memory_order_relaxed)) return -1;
        if (spmd_kind_is_p2p(r->p->instrs[i].kind)) n = transfer(r, dev, i, cpu_start, st) < 0 ? -1 : 1;
        else n = spmd_run_instr(r, dev, i, members, st);
        if (n < 0) return -1;
        for (int k = i; k < i + n; k++)
            if (s->acc_to[k] >= 0) accumulate(r, dev, k, st);
    }
    return 0;
}

/* The device loop of a pipelined step: the stage's tasks in order, each
 * timed, then its end of step. */
static void run_pipe_device(exec_spmd *r, int dev)
{
    spmd_pipe *s = r->pipe;
    exec_spmd_device_stats st;
    memset(&st, 0, sizeof st);
    int *members = spmd_members_new(r, dev);
    if (!members) return;
    const int *at = s->task_at + (size_t)stage_of(r, dev) * (size_t)(s->n_tasks + 2);
    double *tt = s->task_t + (size_t)dev * 2 * (size_t)s->n_tasks, start = exec_spmd_now(), cpu = thread_cpu();
    double *tc = s->task_cpu + (size_t)dev * (2 * (size_t)s->n_tasks + 2);
    int rc = 0;
    for (int t = 0; t < s->n_tasks && !rc; t++) {
        tt[2 * t] = exec_spmd_now() - start;
        tc[2 * t] = thread_cpu() - cpu;
        rc = run_span(r, dev, at[t], at[t + 1], cpu, members, &st);
        tt[2 * t + 1] = exec_spmd_now() - start;
        tc[2 * t + 1] = thread_cpu() - cpu;
    }
    tc[2 * s->n_tasks] = thread_cpu() - cpu;
    if (!rc) run_span(r, dev, at[s->n_tasks], at[s->n_tasks + 1], cpu, members, &st);
    tc[2 * s->n_tasks + 1] = thread_cpu() - cpu;
    st.span_s = exec_spmd_now() - start;
    st.cpu_s = thread_cpu() - cpu;
    s->cpu_t[(size_t)dev * (2 * (size_t)s->n_p2p + 1) + 2 * (size_t)s->n_p2p] = st.cpu_s;
    free(members);
    spmd_device_memory(r, dev, &st);
    r->stats.dev[dev] = st;
}

/* A step replayed from a CPU-time trace (trace: per device its CPU seconds
 * at the start and end of each transfer and at its end, as cpu_t), as if
 * every device had a core of its own: each stage (its devices' slowest CPU
 * time at each point, since its collectives keep them together) works for
 * its CPU time between transfers; a RECV waits until its SEND has ended on
 * the other stage.  Sets *step (the replayed step) and idle[d] (the step less
 * device d's stage's CPU time).  Returns 0, or -1 when the trace cannot be
 * replayed (a RECV whose SEND never ends: the run itself would have failed). */
static int replay_trace(const exec_spmd *r, const double *trace, double *step, double *idle)
{
    const spmd_pipe *s = r->pipe;
    const spmd_program *e = &s->e;
    size_t w = 2 * (size_t)s->n_p2p + 1;
    double *cpu = ir_xcalloc((size_t)s->p * w + 1, sizeof *cpu), *clock = ir_xcalloc((size_t)s->p + 1, sizeof *clock);
    double *sent = ir_xcalloc((size_t)e->n_instrs + 1, sizeof *sent), *last = ir_xcalloc((size_t)s->p + 1, sizeof *last);
    int *pos = ir_xcalloc((size_t)s->p + 1, sizeof *pos), done = 0, moved = 1, rc = 0;
    for (int i = 0; i < e->n_instrs; i++) sent[i] = -1;
    for (int d = 0; d < r->n_dev; d++) /* a stage: its slowest device at each point */
        for (size_t k = 0; k < w; k++) {
            double *c = &cpu[(size_t)stage_of(r, d) * w + k], x = trace[(size_t)d * w + k];
            if (x > *c) *c = x;
        }
    for (int r0 = 0; r0 < s->p; r0++) pos[r0] = s->task_at[(size_t)r0 * (size_t)(s->n_tasks + 2)];
    while (done < s->p && moved) {
        moved = 0;
        for (int st = 0; st < s->p; st++) {
            int hi = s->task_at[(size_t)st * (size_t)(s->n_tasks + 2) + (size_t)s->n_tasks + 1];
            const double *c = cpu + (size_t)st * w;
            for (; pos[st] < hi; pos[st]++) {
                int i = pos[st];
                if (s->p2p_ord[i] < 0) continue;
                const double *at = c + 2 * s->p2p_ord[i];
                double t = clock[st] + (at[0] - last[st]);
                if (e->instrs[i].kind == SPMD_RECV) {
                    if (s->match[i] < 0 || sent[s->match[i]] < 0) break; /* not sent yet */
                    if (sent[s->match[i]] > t) t = sent[s->match[i]];
                }
                clock[st] = t + (at[1] - at[0]);
                last[st] = at[1];
                if (e->instrs[i].kind == SPMD_SEND) sent[i] = clock[st];
                moved = 1;
            }
            if (pos[st] == hi) {
                clock[st] += c[w - 1] - last[st]; /* after its last transfer */
                last[st] = c[w - 1];
                pos[st]++;
                done++;
            }
        }
    }
    if (done < s->p) rc = -1;
    *step = 0;
    for (int st = 0; st < s->p && !rc; st++)
        if (clock[st] > *step) *step = clock[st];
    for (int d = 0; d < r->n_dev && !rc; d++) idle[d] = *step - cpu[(size_t)stage_of(r, d) * w + w - 1];
    free(cpu);
    free(clock);
    free(sent);
    free(last);
    free(pos);
    return rc;
}

/* The last step replayed from its own trace (stats.replay_s, replay_idle_s). */
static int replay(exec_spmd *r)
{
    double *idle = ir_xcalloc((size_t)r->n_dev + 1, sizeof *idle);
    int rc = replay_trace(r, r->pipe->cpu_t, &r->stats.replay_s, idle);
    for (int d = 0; d < r->n_dev && !rc; d++) r->stats.dev[d].replay_idle_s = idle[d];
    free(idle);
    return rc;
}

int exec_pipe_replay(const exec_spmd *r, const double *trace, double *step, double *idle)
{
    return r->pipe ? replay_trace(r, trace, step, idle) : -1;
}

int exec_pipe_trace_len(const exec_spmd *r) { return r->pipe ? 2 * r->pipe->n_p2p + 1 : 0; }

const double *exec_pipe_cpu_trace(const exec_spmd *r, int dev)
{
    return r->pipe ? r->pipe->cpu_t + (size_t)dev * (2 * (size_t)r->pipe->n_p2p + 1) : NULL;
}

int spmd_stages_step(exec_spmd *r, char *err, size_t errlen)
{
    spmd_pipe *s = r->pipe;
    r->be->run(r, s ? run_pipe_device : spmd_run_device);
    if (atomic_load(&r->abort)) return ir_errf(err, errlen, "%s", r->err[0] ? r->err : "a device stopped");
    if (!s) return 0; /* one stage: no transfers to replay */
    r->be->gather(r, s->task_t, 2 * (size_t)s->n_tasks * sizeof *s->task_t);
    r->be->gather(r, s->task_cpu, (2 * (size_t)s->n_tasks + 2) * sizeof *s->task_cpu);
    r->be->gather(r, s->cpu_t, (2 * (size_t)s->n_p2p + 1) * sizeof *s->cpu_t);
    if (r->root && replay(r) < 0) return ir_errf(err, errlen, "pipeline: the step's transfers cannot be replayed in order");
    /* idle: the step's wall time less what the device was busy with */
    for (int d = 0; d < r->n_dev && r->root; d++) {
        exec_spmd_device_stats *st = &r->stats.dev[d];
        double busy = st->compute_s + st->collective_s + st->p2p_s - st->p2p_wait_s;
        st->idle_s = r->stats.wall_s > busy ? r->stats.wall_s - busy : 0;
    }
    return 0;
}

/* ---- arguments, homes ------------------------------------------------------- */

int spmd_holds(const exec_spmd *r, int dev, int b)
{
    return !r->pipe || r->pipe->held[(size_t)stage_of(r, dev) * (size_t)r->p->n_bufs + (size_t)b];
}

int spmd_home_stage(const exec_spmd *r, int b) { return r->pipe ? r->pipe->home[b] : -1; }

int spmd_home_device(const exec_spmd *r, int b)
{
    int h = spmd_home_stage(r, b);
    return h > 0 ? h * (int)r->axis_stride[r->pipe->axis] : 0;
}

void spmd_fill_arg(exec_spmd *r, int v, int dev, uint64_t seed)
{
    spmd_pipe *s = r->pipe;
    int b = r->p->arg_buf[v];
    ir_value x = r->g->values[v];
    if (!s || s->pp->buf_class[b] != PIPE_BUF_MB) { /* (one stage: every argument so) */
        spmd_fill_block(r, &x, ir_data(r->g, v), b, dev, seed);
        return;
    }
    /* micro-batch k's values are micro-batch k of the input (ir_fill_stream:
       those of the unrolled step's input of that micro-batch; one micro-batch:
       the plain step's input); an input given as data has a fixed batch, which
       is not split into micro-batches */
    for (int k = 0; k < s->m; k++) {
        x.batch_of = s->m > 1 ? r->g->values[v].name : NULL;
        x.micro = s->m > 1 ? k : -1;
        spmd_fill_block(r, &x, s->m > 1 ? NULL : ir_data(r->g, v), rename_buf(s, b, k), dev, seed);
    }
}

const double *exec_pipe_task_times(const exec_spmd *r, int dev)
{
    return r->pipe ? r->pipe->task_t + (size_t)dev * 2 * (size_t)r->pipe->n_tasks : NULL;
}

const double *exec_pipe_task_cpu(const exec_spmd *r, int dev)
{
    return r->pipe ? r->pipe->task_cpu + (size_t)dev * (2 * (size_t)r->pipe->n_tasks + 2) : NULL;
}

size_t exec_pipe_stage_bytes(const exec_spmd *r, int stage) { return r->pipe ? r->pipe->bytes[stage] : r->dev_bytes; }

int spmd_pipe_mb(const exec_spmd *r, int i) { return r->pipe ? r->pipe->mb[i] : -1; }

int spmd_pipe_axis(const exec_spmd *r) { return r->pipe ? r->pipe->axis : -1; }
