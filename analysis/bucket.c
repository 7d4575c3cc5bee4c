/* bucket.c - gradient collectives combined into buckets.
 *
 * Lowering resolves each gradient where it is made: one all-reduce (or, for
 * ZeRO-2/3, one reduce-scatter) per parameter, right after the op that
 * finishes the gradient.  Priced and run one by one, each pays a collective's
 * latency (a ring of link latencies, or a barrier on this machine) however
 * small it is.  PyTorch DDP and DeepSpeed flatten gradients into buckets of
 * about 25 MB and reduce a bucket at once when its last gradient is ready;
 * XLA's all-reduce combiner merges them the same way.  This pass does that to
 * the program:
 *
 *  - a gradient collective is an all-reduce or reduce-scatter of a value that
 *    is a parameter's gradient (grad_of >= 0);
 *  - walking the instructions in order, each gradient collective joins the
 *    open bucket of its kind (all-reduce or reduce-scatter, sum or max, same
 *    mesh axes); a bucket that would pass opts.bucket_bytes is closed first,
 *    so a bucket holds at most that many bytes unless one gradient alone is
 *    larger (then it is a bucket of its own);
 *  - a closed bucket is placed, its members contiguous and in the order they
 *    joined, where it closed: when a member it does not fit comes, when an
 *    instruction reads one of its results, or at the end of the program.
 *    Members only move later than lowering put them and never past a reader,
 *    and their inputs were all made before, so the program computes the same
 *    thing.
 *
 * In a pipelined program (spmd_program.segment) every open bucket is also
 * closed where a segment ends, so a bucket stays in its stage's task.
 *
 * Every gradient collective gets a bucket id (instr.bucket; -1 for every other
 * instruction); members of one bucket are consecutive.  The cost model prices
 * a bucket as one collective of the members' summed bytes; the executor runs
 * it as one combined collective (exec/spmd_threads.c, exec/spmd_mpi.c).  The cap compares the
 * program's byte counts (the IR's f32 sizes); DDP's default 25 MiB is
 * SPMD_DEFAULT_BUCKET_BYTES.  bucket_bytes = 0 turns bucketing off (every
 * gradient collective its own bucket, at the place lowering gave it).
 */
#include "spmd.h"

#include <stdlib.h>
#include <string.h>

#define MAX_OPEN 16 /* open buckets at once (kinds x axis sets seen together) */

typedef struct open_bucket {
    unsigned key;  /* kind | reduce_max << 4 | axes << 5 */
    int first;     /* first member: index into the old instructions, chained by next[] */
    int last;
    int64_t bytes;
} open_bucket;

typedef struct bucketer {
    spmd_program *p;
    const spmd_instr *old; /* the instructions as lowering emitted them */
    const int *old_seg;    /* pipelined programs: their segments (spmd_program.segment), else NULL */
    int *next;             /* per old instruction: next member of its bucket, -1 */
    int *pending;          /* per buffer: open bucket holding the instruction writing it, -1 */
    open_bucket open[MAX_OPEN];
    int n_open, n_out, n_buckets;
} bucketer;

static int is_gradient_collective(const spmd_program *p, const spmd_instr *in)
{
    return (in->kind == SPMD_ALL_REDUCE || in->kind == SPMD_REDUCE_SCATTER) && p->g->values[in->value].grad_of >= 0;
}

/* Appends open bucket k's members to the program and removes it. */
static void place(bucketer *b, int k)
{
    for (int i = b->open[k].first; i >= 0; i = b->next[i]) {
        if (b->old_seg) b->p->segment[b->n_out] = b->old_seg[i];
        spmd_instr *in = &b->p->instrs[b->n_out++];
        *in = b->old[i];
        in->bucket = b->n_buckets;
        b->pending[in->out] = -1;
    }
    b->n_buckets++;
    b->open[k] = b->open[--b->n_open];
    /* the bucket moved into slot k holds other buffers: repoint them */
    if (k < b->n_open)
        for (int i = b->open[k].first; i >= 0; i = b->next[i]) b->pending[b->old[i].out] = k;
}

static void join(bucketer *b, int i, int64_t cap)
{
    const spmd_instr *in = &b->old[i];
    unsigned key = in->kind | (unsigned)in->reduce_max << 4 | (unsigned)in->axes << 5;
    int k = 0;
    while (k < b->n_open && b->open[k].key != key) k++;
    if (k < b->n_open && (cap <= 0 || b->open[k].bytes + in->bytes > cap)) {
        place(b, k);
        k = b->n_open;
    }
    if (k == b->n_open) {
        if (b->n_open == MAX_OPEN) place(b, 0);
        k = b->n_open++;
        b->open[k] = (open_bucket){key, -1, -1, 0};
    }
    open_bucket *o = &b->open[k];
    b->next[i] = -1;
    if (o->last >= 0) b->next[o->last] = i;
    else o->first = i;
    o->last = i;
    o->bytes += in->bytes;
    b->pending[in->out] = k;
}

void spmd_bucket_gradients(spmd_program *p)
{
    int n = p->n_instrs;
    p->n_buckets = 0;
    for (int i = 0; i < n; i++) p->instrs[i].bucket = -1;
    spmd_instr *old = ir_xrealloc(NULL, (size_t)(n ? n : 1) * sizeof *old);
    memcpy(old, p->instrs, (size_t)n * sizeof *old);
    int *old_seg = NULL;
    if (p->segment) {
        old_seg = ir_xrealloc(NULL, (size_t)(n ? n : 1) * sizeof *old_seg);
        memcpy(old_seg, p->segment, (size_t)n * sizeof *old_seg);
    }
    bucketer b = {.p = p, .old = old, .old_seg = old_seg};
    b.next = ir_xrealloc(NULL, (size_t)(n ? n : 1) * sizeof(int));
    b.pending = ir_xrealloc(NULL, (size_t)(p->n_bufs ? p->n_bufs : 1) * sizeof(int));
    for (int i = 0; i < p->n_bufs; i++) b.pending[i] = -1;
    for (int i = 0; i < n; i++) {
        const spmd_instr *in = &old[i];
        if (old_seg && i > 0 && old_seg[i] != old_seg[i - 1]) /* a bucket never leaves its segment */
            while (b.n_open) place(&b, b.n_open - 1);
        for (int k = 0; k < IR_MAX_OPERANDS; k++)
            if (in->in[k] >= 0 && b.pending[in->in[k]] >= 0) place(&b, b.pending[in->in[k]]);
        if (is_gradient_collective(p, in)) {
            /* bucket_bytes 0: one bucket per collective, left where it is */
            join(&b, i, p->opts.bucket_bytes);
            if (p->opts.bucket_bytes <= 0) place(&b, b.n_open - 1);
            continue;
        }
        if (old_seg) p->segment[b.n_out] = old_seg[i];
        p->instrs[b.n_out++] = *in;
    }
    /* outputs read a bucket's results after the last instruction */
    while (b.n_open) place(&b, b.n_open - 1);
    p->n_buckets = b.n_buckets;
    free(old);
    free(old_seg);
    free(b.next);
    free(b.pending);
}
