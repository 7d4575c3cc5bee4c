/* pipeline.c - the pipeline spec (checks, layer splits) and the order in
 * which each device runs its micro-batches' forward and backward passes.
 * See pipeline.h.  The orders are Megatron-LM's (schedules.py): GPipe's
 * all-forward-then-all-backward, the non-interleaved 1F1B of PipeDream-flush,
 * and interleaved 1F1B over model chunks (Narayanan et al., SC 2021, 2.2). */
#include "pipeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const schedule_names[PIPE_N_SCHEDULES] = {"gpipe", "1f1b", "interleaved"};

const char *pipe_schedule_name(int schedule)
{
    return (unsigned)schedule < PIPE_N_SCHEDULES ? schedule_names[schedule] : "?";
}

pipe_spec pipe_spec_none(void)
{
    pipe_spec s;
    memset(&s, 0, sizeof s);
    s.axis = -1;
    return s;
}

void pipe_split_even(pipe_spec *s, int n_layers)
{
    int V = pipe_vstages(s);
    s->n_layers = n_layers;
    if (V <= 0) return;
    int base = n_layers / V, extra = n_layers % V;
    s->first[0] = 0;
    for (int i = 0; i < V; i++) s->first[i + 1] = s->first[i] + base + (i < extra);
}

int pipe_vstage_of_layer(const pipe_spec *s, int layer)
{
    int V = pipe_vstages(s);
    for (int i = 0; i < V; i++)
        if (layer < s->first[i + 1]) return i;
    return V > 0 ? V - 1 : 0;
}

int pipe_body_microbatches(const ir_graph *g) { return g->rewrites.pipe_body; }

int pipe_spec_check(const pipe_spec *s, const shard_mesh *mesh, int n_layers, char *err, size_t errlen)
{
    if (s->axis < 0) return 0;
    if (s->axis >= mesh->n_axes) return ir_errf(err, errlen, "pipeline: axis %d is not an axis of the mesh", s->axis);
    const char *ax = mesh->names[s->axis];
    if (mesh->sizes[s->axis] < 2)
        return ir_errf(err, errlen, "pipeline:%s: the axis has %lld device; a pipeline needs at least 2 stages", ax,
                       (long long)mesh->sizes[s->axis]);
    if (s->stages != mesh->sizes[s->axis] || s->stages > PIPE_MAX_STAGES)
        return ir_errf(err, errlen, "pipeline:%s: %d stages (at most %d, the axis' size %lld)", ax, s->stages,
                       PIPE_MAX_STAGES, (long long)mesh->sizes[s->axis]);
    if ((unsigned)s->schedule >= PIPE_N_SCHEDULES) return ir_errf(err, errlen, "pipeline:%s: unknown schedule %d", ax, s->schedule);
    int interleaved = s->schedule == PIPE_INTERLEAVED;
    if (interleaved ? s->chunks < 2 : s->chunks != 1)
        return ir_errf(err, errlen, "pipeline:%s: %s with %d model chunks per device (%s)", ax, pipe_schedule_name(s->schedule),
                       s->chunks, interleaved ? "interleaving needs at least 2" : "only interleaved takes chunks");
    if (s->chunks * s->stages > PIPE_MAX_VSTAGES)
        return ir_errf(err, errlen, "pipeline:%s: %d virtual stages, at most %d", ax, s->chunks * s->stages, PIPE_MAX_VSTAGES);
    if (s->microbatches < 1 || s->microbatches > PIPE_MAX_MICROBATCHES)
        return ir_errf(err, errlen, "pipeline:%s: %d micro-batches, must be 1 to %d", ax, s->microbatches, PIPE_MAX_MICROBATCHES);
    if (interleaved && s->microbatches % s->stages)
        return ir_errf(err, errlen, "pipeline:%s: interleaving needs the micro-batches (%d) to be a multiple of the stages (%d)",
                       ax, s->microbatches, s->stages);
    int V = pipe_vstages(s);
    if (n_layers < 0) return 0; /* the model is not known yet */
    if (n_layers < 1) return ir_errf(err, errlen, "pipeline:%s: the model has no layers (layer tags) to split into stages", ax);
    if (s->split_auto) return 0;
    if (s->n_layers != n_layers || s->first[0] != 0 || s->first[V] != n_layers)
        return ir_errf(err, errlen, "pipeline:%s: the split covers %d layers, the model has %d", ax, s->first[V] - s->first[0],
                       n_layers);
    for (int i = 0; i < V; i++)
        if (s->first[i + 1] < s->first[i]) return ir_errf(err, errlen, "pipeline:%s: virtual stage %d has a negative layer count", ax, i);
    return 0;
}

char *pipe_tactic_text(const pipe_spec *s, const shard_mesh *mesh, char *buf, size_t n)
{
    char sched[24];
    if (s->schedule == PIPE_INTERLEAVED) snprintf(sched, sizeof sched, "interleaved-%d", s->chunks);
    else snprintf(sched, sizeof sched, "%s", pipe_schedule_name(s->schedule));
    size_t k = (size_t)snprintf(buf, n, "pipeline:%s:%d:%s:%s", mesh->names[s->axis], s->microbatches, sched, s->split_auto ? "auto" : "");
    for (int i = 0; !s->split_auto && i < pipe_vstages(s) && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%d", i ? "/" : "", s->first[i + 1] - s->first[i]);
    return k < n ? buf : NULL;
}

char *pipe_choice_text(const pipe_choice *c, const shard_mesh *mesh, char *buf, size_t n)
{
    char sched[24];
    if (c->schedule == PIPE_INTERLEAVED) snprintf(sched, sizeof sched, "interleaved-%d", c->chunks);
    else snprintf(sched, sizeof sched, "%s", pipe_schedule_name(c->schedule));
    snprintf(buf, n, "pipeline:%s:%d:%s", mesh->names[c->axis], c->microbatches, sched);
    return buf;
}

int pipe_candidates(const shard_mesh *mesh, unsigned axes, int64_t batch, int n_layers, pipe_choice *out, int cap)
{
    int n = 0;
    for (int a = 0; a < mesh->n_axes; a++) {
        int64_t p = mesh->sizes[a];
        if ((axes && !(axes >> a & 1)) || p < 2 || p > n_layers || p > PIPE_MAX_STAGES) continue;
        /* m in p..8p, and the m of micro-batches of 1, 2 and 4 sequences a data-parallel replica when
           the other axes of the mask split the batch (Megatron-LM's --micro-batch-size) */
        int64_t ms[8], nm = 0, data = 1;
        for (int b = 0; b < mesh->n_axes; b++)
            if (b != a && (!axes || (axes >> b & 1))) data *= mesh->sizes[b];
        for (int64_t m = p; m <= 8 * p; m *= 2)
            if (m <= batch && batch % m == 0) ms[nm++] = m;
        for (int64_t mbs = 4; mbs >= 1; mbs /= 2) {
            int64_t m = batch % (data * mbs) ? 0 : batch / (data * mbs), seen = 0;
            for (int i = 0; i < nm; i++) seen |= ms[i] == m;
            if (m >= p && m <= 512 && !seen) {
                int i = nm++; /* in increasing order */
                while (i > 0 && ms[i - 1] > m) ms[i] = ms[i - 1], i--;
                ms[i] = m;
            }
        }
        if (!nm)
            for (int64_t m = p - 1; m >= 1 && !nm; m--)
                if (batch % m == 0) ms[nm++] = m;
        for (int i = 0; i < nm && n < cap; i++) {
            out[n++] = (pipe_choice){a, (int)ms[i], PIPE_1F1B, 1};
            if (ms[i] % p == 0 && n_layers >= 2 * p && n < cap) out[n++] = (pipe_choice){a, (int)ms[i], PIPE_INTERLEAVED, 2};
        }
        if (nm && n < cap) out[n++] = (pipe_choice){a, (int)ms[nm - 1], PIPE_GPIPE, 1};
    }
    return n;
}

/* ---- task order -------------------------------------------------------------- */

int pipe_task_count(const pipe_spec *s) { return s->axis < 0 ? 0 : 2 * s->microbatches * s->chunks; }

/* The forward (dir 0) or backward (dir 1) "virtual micro-batch" j of the
 * interleaved schedule as (micro-batch, chunk). */
static pipe_task interleaved_task(const pipe_spec *s, int j, int dir)
{
    int p = s->stages, v = s->chunks;
    int c = (j / p) % v;
    pipe_task t = {.mb = (j / (p * v)) * p + j % p, .chunk = dir ? v - 1 - c : c, .dir = dir};
    return t;
}

void pipe_task_order(const pipe_spec *s, int stage, pipe_task *out)
{
    int m = s->microbatches, p = s->stages, n = 0;
    if (s->axis < 0) return;
    if (s->schedule == PIPE_GPIPE) {
        for (int k = 0; k < m; k++) out[n++] = (pipe_task){k, 0, PIPE_FWD};
        for (int k = 0; k < m; k++) out[n++] = (pipe_task){k, 0, PIPE_BWD};
        return;
    }
    int total = s->schedule == PIPE_INTERLEAVED ? m * s->chunks : m;
    int warm = s->schedule == PIPE_INTERLEAVED ? 2 * (p - stage - 1) + (s->chunks - 1) * p : p - stage - 1;
    if (warm > total) warm = total;
    int f = 0, b = 0;
#define NEXT(dir, j) (s->schedule == PIPE_INTERLEAVED ? interleaved_task(s, (j), (dir)) : (pipe_task){(j), 0, (dir)})
    while (f < warm) out[n++] = NEXT(PIPE_FWD, f), f++;
    while (f < total) {
        out[n++] = NEXT(PIPE_FWD, f), f++;
        out[n++] = NEXT(PIPE_BWD, b), b++;
    }
    while (b < total) out[n++] = NEXT(PIPE_BWD, b), b++;
#undef NEXT
}

int pipe_max_in_flight(const pipe_spec *s, int stage)
{
    int n = pipe_task_count(s), cur = 0, best = 0;
    if (n <= 0) return 0;
    pipe_task *t = ir_xcalloc((size_t)n, sizeof *t);
    pipe_task_order(s, stage, t);
    for (int i = 0; i < n; i++) {
        cur += t[i].dir == PIPE_FWD ? 1 : -1;
        if (cur > best) best = cur;
    }
    free(t);
    return best;
}

int pipe_seg_stage(const pipe_spec *s, int seg)
{
    int V = pipe_vstages(s);
    if (seg < V) return seg % s->stages;
    if (seg < 2 * V) return (seg - V) % s->stages;
    return seg < 2 * V + s->stages ? seg - 2 * V : -1;
}

int pipe_task_seg(const pipe_spec *s, int stage, const pipe_task *t)
{
    int vs = t->chunk * s->stages + stage;
    return t->dir == PIPE_FWD ? vs : pipe_vstages(s) + vs;
}
