/* spmd_mem.c - where each buffer of an SPMD program lives in a device's
 * arena: offsets from liveness, so a device holds at once only the buffers
 * live at that point of the program, and its memory peaks where the plan
 * says (cost_estimate_program's peak_memory, priced by the same rules).
 *
 * Liveness follows the estimator: arguments (params, optimizer states,
 * inputs) and outputs stay for the whole step; any other buffer lives from
 * the instruction that writes it to its last reader.  A fused elementwise
 * group runs tile by tile over all its members at once (fuse.h), so it
 * counts as one instruction: every buffer it writes or reads is live over
 * the whole group; a result it keeps in a scratch tile (read only inside
 * the group) never reaches memory and takes none.  A gradient bucket (its
 * members consecutive, bucket.c) runs as one collective, so it too counts as
 * one instruction: its members' inputs and outputs are live at once.  An output that updates an argument in the same layout
 * takes the argument's memory (donation) when nothing reads the argument
 * after the output is written, or only the same elementwise instruction or
 * group does (which reads each element before writing it).
 *
 * Placement is greedy, largest buffer first, at the lowest offset that no
 * buffer live at an overlapping time occupies.  Buffers keep their offsets
 * across steps.  CARVE_REUSE=0 in the environment gives every buffer its own
 * memory (the layout before liveness; tests that read intermediate buffers
 * after a step use it).
 *
 * With threads, a collective reads its peers' buffers in place: before a
 * device overwrites memory a peer may still be reading, the group must have
 * finished the collective.  spmd_layout marks those collectives (release):
 * the threads backend waits at a barrier after them.
 */
#include "exec/spmd_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct span {
    int b;
    int lo, hi;      /* live over group times [lo, hi] */
    size_t size, off;
} span;

static int by_size_desc(const void *x, const void *y)
{
    const span *a = x, *b = y;
    if (a->size != b->size) return a->size < b->size ? 1 : -1;
    return a->b - b->b;
}

/* Lowest offset for s among the already placed spans live at the same
 * time: byoff holds the n_placed placed spans in order of offset (ties in
 * any order: the result does not depend on it), so one pass finds the first
 * gap, and no sort runs per span (a program of thousands of buffers). */
static size_t lowest_fit(const span *s, span *const *byoff, int n_placed)
{
    size_t off = 0;
    for (int k = 0; k < n_placed; k++) {
        const span *q = byoff[k];
        if (q->lo > s->hi || s->lo > q->hi) continue;
        if (q->off >= off + s->size) break;
        size_t end = q->off + q->size;
        if (end > off) off = end;
    }
    return off;
}

/* Puts placed span s into byoff (n_placed before it) by its offset. */
static void insert_by_off(span **byoff, int n_placed, span *s)
{
    int lo = 0, hi = n_placed;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (byoff[mid]->off <= s->off) lo = mid + 1;
        else hi = mid;
    }
    memmove(byoff + lo + 1, byoff + lo, (size_t)(n_placed - lo) * sizeof *byoff);
    byoff[lo] = s;
}

/* Whether output buffer ob (written by instruction j) may take argument
 * buffer ab's memory: same layout and size, and every reader of ab is
 * before j's group, or is in j's fused group (elementwise, tile by tile). */
static int can_donate(const spmd_program *p, const int *gstart, const int64_t *numel, int ob, int ab, int j)
{
    const spmd_fuse_plan *fuse = &p->fuse;
    const ir_graph *g = p->g;
    int rank = g->values[p->bufs[ab].value].rank;
    if (numel[ob] != numel[ab] || !shard_spec_equal(&p->bufs[ob].spec, &p->bufs[ab].spec, rank)) return 0;
    int g0 = gstart[j], g1 = g0 + (fuse->len[g0] > 1 ? fuse->len[g0] : 1);
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        int reads = 0;
        for (int k = 0; k < IR_MAX_OPERANDS; k++) reads |= in->in[k] == ab;
        if (!reads) continue;
        if (i < g0) continue;
        if (i >= g1 || g1 - g0 < 2) return 0; /* after j's group, or j alone (not known to be elementwise) */
    }
    return 1;
}

/* The layout's working arrays (one allocation each, freed together). */
typedef struct layout_ws {
    span *sp, **scratch; /* scratch: the placed spans by offset */
    int *gstart, *gend, *donor, *def_instr;
    size_t *size;
} layout_ws;

static void ws_free(layout_ws *w)
{
    free(w->sp);
    free(w->scratch);
    free(w->gstart);
    free(w->gend);
    free(w->donor);
    free(w->def_instr);
    free(w->size);
}

/* Times: a fused group or a bucket is one, [gstart, gend] of its instructions. */
static void group_times(const spmd_program *p, layout_ws *w)
{
    for (int i = 0, ni = p->n_instrs; i < ni;) {
        int len = p->fuse.len[i] > 1 ? p->fuse.len[i] : 1, bk = p->instrs[i].bucket;
        while (bk >= 0 && i + len < ni && p->instrs[i + len].bucket == bk) len++;
        for (int k = i; k < i + len; k++) {
            w->gstart[k] = i;
            w->gend[k] = i + len - 1;
        }
        i += len;
    }
}

/* Every buffer's span: from its writer's time to its last reader's;
 * arguments, outputs and pinned buffers the whole program; buffers nothing
 * uses take no memory.  Marks outputs that take an argument's memory
 * (donor).  */
static void live_spans(const spmd_program *p, const int64_t *numel, int reuse, const uint8_t *pinned, layout_ws *w)
{
    const spmd_fuse_plan *fuse = &p->fuse;
    const ir_graph *g = p->g;
    int nb = p->n_bufs, ni = p->n_instrs;
    span *sp = w->sp;
    for (int b = 0; b < nb; b++) {
        sp[b] = (span){.b = b, .lo = ni, .hi = -1, .size = exec_arena_slot((size_t)numel[b] * 4)};
        w->donor[b] = -1;
        w->def_instr[b] = -1;
    }
    /* a result a fused group keeps in a scratch tile never reaches memory */
    for (int i = 0; i < ni; i++)
        if (fuse->len[w->gstart[i]] > 1 && fuse->step[i].slot >= 0 && reuse) sp[p->instrs[i].out].size = 0;
    for (int i = 0; i < ni; i++) {
        const spmd_instr *in = &p->instrs[i];
        int g0 = w->gstart[i], g1 = w->gend[i];
        if (in->out >= 0) { /* (a pipeline's SEND writes nothing) */
            if (g0 < sp[in->out].lo) sp[in->out].lo = g0;
            if (g1 > sp[in->out].hi) sp[in->out].hi = g1;
            w->def_instr[in->out] = i;
        }
        for (int k = 0; k < IR_MAX_OPERANDS; k++)
            if (in->in[k] >= 0 && g1 > sp[in->in[k]].hi) sp[in->in[k]].hi = g1;
    }
    /* arguments and pinned buffers: the whole step */
    for (int v = 0; v < g->n_values; v++)
        if (p->arg_buf[v] >= 0) sp[p->arg_buf[v]] = (span){.b = p->arg_buf[v], .lo = -1, .hi = ni, .size = sp[p->arg_buf[v]].size};
    for (int b = 0; pinned && b < nb; b++)
        if (pinned[b]) sp[b].lo = -1, sp[b].hi = ni;
    for (int o = 0; o < g->n_outputs; o++) {
        int ob = p->out_buf[o], u = g->outputs[o].updates, ab = u >= 0 ? p->arg_buf[u] : -1;
        if (ob < 0) continue; /* not in this program (a pipeline stage's) */
        if (sp[ob].lo > sp[ob].hi) sp[ob].lo = -1; /* never written: an argument */
        sp[ob].hi = ni;
        if (reuse && ab >= 0 && ab != ob && p->arg_buf[p->bufs[ob].value] != ob && w->def_instr[ob] >= 0 &&
            can_donate(p, w->gstart, numel, ob, ab, w->def_instr[ob]))
            w->donor[ob] = ab;
    }
    for (int b = 0; b < nb; b++)
        if (sp[b].lo > sp[b].hi) sp[b].size = 0; /* nothing writes or reads it here */
}

/* Offsets: every buffer its own memory (reuse 0), or greedy by liveness.
 * Returns the arena's size. */
static size_t place(const spmd_program *p, int reuse, layout_ws *w, size_t *off)
{
    int nb = p->n_bufs;
    span *sp = w->sp;
    size_t total = 0;
    for (int b = 0; b < nb; b++) w->size[sp[b].b] = sp[b].size;
    if (!reuse) {
        for (int b = 0; b < nb; b++) {
            off[b] = total;
            total += sp[b].size;
        }
        return total;
    }
    qsort(sp, (size_t)nb, sizeof *sp, by_size_desc);
    int n_placed = 0;
    for (int k = 0; k < nb; k++) {
        span s = sp[k];
        if (w->donor[s.b] >= 0) continue;
        if (!s.size) { /* takes no memory (kept in a tile, or not here) */
            off[s.b] = 0;
            continue;
        }
        s.off = lowest_fit(&s, w->scratch, n_placed);
        sp[n_placed] = s; /* placed spans gather at the front (n_placed <= k), and stay there */
        insert_by_off(w->scratch, n_placed, &sp[n_placed]);
        n_placed++;
        off[s.b] = s.off;
        if (s.off + s.size > total) total = s.off + s.size;
    }
    for (int b = 0; b < nb; b++)
        if (w->donor[b] >= 0) off[b] = off[w->donor[b]];
    return total;
}

/* release[i]: collective i reads memory that a buffer written after it takes. */
static void mark_release(const spmd_program *p, int reuse, layout_ws *w, const size_t *off, uint8_t *release)
{
    int nb = p->n_bufs, ni = p->n_instrs;
    span *sp = w->sp;
    for (int b = 0; b < nb; b++) { /* spans back in buffer order, with offsets */
        sp[b].b = b;
        sp[b].off = off[b];
        sp[b].size = w->size[b];
        sp[b].lo = w->def_instr[b] >= 0 ? w->gstart[w->def_instr[b]] : -1;
    }
    for (int i = 0; i < ni; i++) {
        const spmd_instr *in = &p->instrs[i];
        release[i] = 0;
        if (in->kind == SPMD_COMPUTE || in->kind == SPMD_SLICE || !reuse) continue;
        int read[2] = {in->in[0], in->kind == SPMD_ALL_REDUCE ? in->out : -1};
        for (int k = 0; k < 2 && !release[i]; k++) {
            if (read[k] < 0) continue;
            const span *r = &sp[read[k]];
            for (int c = 0; c < nb && !release[i]; c++)
                release[i] = c != read[k] && sp[c].lo > i && sp[c].off < r->off + r->size && r->off < sp[c].off + sp[c].size;
        }
    }
}

int spmd_layout_ex(const spmd_program *p, const int64_t *numel, int reuse, const uint8_t *pinned, size_t *off, size_t *bytes,
                   uint8_t *release)
{
    int nb = p->n_bufs, ni = p->n_instrs;
    layout_ws w = {
        .sp = calloc((size_t)nb + 1, sizeof *w.sp),
        .scratch = calloc((size_t)nb + 1, sizeof *w.scratch),
        .gstart = calloc((size_t)ni + 1, sizeof *w.gstart),
        .gend = calloc((size_t)ni + 1, sizeof *w.gend),
        .donor = calloc((size_t)nb + 1, sizeof *w.donor),
        .def_instr = calloc((size_t)nb + 1, sizeof *w.def_instr),
        .size = calloc((size_t)nb + 1, sizeof *w.size),
    };
    if (!w.sp || !w.scratch || !w.gstart || !w.gend || !w.donor || !w.def_instr || !w.size) {
        ws_free(&w);
        return -1;
    }
    group_times(p, &w);
    live_spans(p, numel, reuse, pinned, &w);
    *bytes = place(p, reuse, &w, off);
    if (release) mark_release(p, reuse, &w, off, release);
    ws_free(&w);
    return 0;
}

int spmd_layout(const spmd_program *p, const int64_t *numel, int reuse, size_t *off, size_t *bytes, uint8_t *release)
{
    return spmd_layout_ex(p, numel, reuse, NULL, off, bytes, release);
}
