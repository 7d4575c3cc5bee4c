/* pipeline.c (cost) - the schedule of a pipelined step, simulated.
 *
 * The model (pipeline.h) is a list of events per segment.  The simulation
 * keeps, per stage, a cursor (task, event) and its clock; per transfer and
 * micro-batch the time its data arrives (-1 until its send has run).  It
 * sweeps the stages round-robin, running each as far as it can: work moves
 * its clock, a send stamps an arrival, a receive whose data has not been
 * sent stops the stage until a later sweep.  Stages run their own fixed
 * orders, so the times are exact for the model (no event queue needed); a
 * sweep in which no stage moves while some are unfinished is a deadlock of
 * the orders, reported.  Memory follows each stage's order alone: the
 * (micro-batch, chunk) stashes between a forward's end and its backward's
 * end, plus the running segment's temporaries, over what the stage holds
 * all step.
 */
#include "cost/pipeline.h"

#include <stdlib.h>
#include <string.h>

int cost_pipe_model_init(cost_pipe_model *m, const pipe_spec *spec)
{
    memset(m, 0, sizeof *m);
    m->spec = *spec;
    int V = pipe_vstages(spec), p = spec->stages;
    m->n_segs = 2 * V + p;
    m->last_seg = -1;
    m->seg_first = calloc((size_t)m->n_segs + 1, sizeof *m->seg_first);
    m->stash = calloc((size_t)V + 1, sizeof *m->stash);
    m->transient = calloc((size_t)m->n_segs + 1, sizeof *m->transient);
    m->base = calloc((size_t)p + 1, sizeof *m->base);
    if (!m->seg_first || !m->stash || !m->transient || !m->base) {
        cost_pipe_model_free(m);
        return -1;
    }
    return 0;
}

void cost_pipe_model_free(cost_pipe_model *m)
{
    free(m->seg_first);
    free(m->ev);
    free(m->xfer_time);
    free(m->xfer_end);
    free(m->stash);
    free(m->transient);
    free(m->base);
    memset(m, 0, sizeof *m);
}

int cost_pipe_add_event(cost_pipe_model *m, int seg, int kind, int xfer, double time)
{
    if (m->n_ev == m->cap_ev) {
        int cap = m->cap_ev ? 2 * m->cap_ev : 64;
        cost_pipe_event *e = realloc(m->ev, (size_t)cap * sizeof *e);
        if (!e) return -1;
        m->ev = e;
        m->cap_ev = cap;
    }
    if (seg < m->last_seg || seg >= m->n_segs) return -1; /* segments are filled in order */
    for (int k = m->last_seg + 1; k <= seg; k++) m->seg_first[k] = m->n_ev;
    m->last_seg = seg;
    m->ev[m->n_ev++] = (cost_pipe_event){kind, xfer, time};
    return 0;
}

/* The events of segment k: [*lo, *hi). */
static void seg_events(const cost_pipe_model *m, int k, int *lo, int *hi)
{
    *lo = k <= m->last_seg ? m->seg_first[k] : m->n_ev;
    *hi = k < m->last_seg ? m->seg_first[k + 1] : m->n_ev;
}

int cost_pipe_add_xfer(cost_pipe_model *m, double time, int end)
{
    if ((m->n_xfers & (m->n_xfers - 1)) == 0) { /* grow at powers of two */
        int cap = m->n_xfers ? 2 * m->n_xfers : 1;
        double *t = realloc(m->xfer_time, (size_t)cap * sizeof *t);
        if (!t) return -1;
        m->xfer_time = t;
        uint8_t *e = realloc(m->xfer_end, (size_t)cap);
        if (!e) return -1;
        m->xfer_end = e;
    }
    m->xfer_time[m->n_xfers] = time;
    m->xfer_end[m->n_xfers] = (uint8_t)(end != 0);
    return m->n_xfers++;
}

int cost_pipe_model_uniform(cost_pipe_model *m, const pipe_spec *spec, double tf, double tb, double xfer, double end,
                            double stash)
{
    if (cost_pipe_model_init(m, spec) < 0) return -1;
    int V = pipe_vstages(spec), rc = 0;
    int *act = malloc((size_t)V * sizeof *act), *grad = malloc((size_t)V * sizeof *grad);
    if (!act || !grad) rc = -1;
    for (int s = 0; s + 1 < V && !rc; s++) { /* act[s]: s -> s + 1; grad[s]: s + 1 -> s */
        act[s] = cost_pipe_add_xfer(m, xfer, 0);
        grad[s] = cost_pipe_add_xfer(m, xfer, 0);
        if (act[s] < 0 || grad[s] < 0) rc = -1;
    }
    for (int s = 0; s < V && !rc; s++) {
        int seg = cost_pipe_seg_fwd(spec, s);
        if (s > 0) rc |= cost_pipe_add_event(m, seg, COST_PIPE_RECV, act[s - 1], 0);
        rc |= cost_pipe_add_event(m, seg, COST_PIPE_WORK, -1, tf);
        if (s + 1 < V) rc |= cost_pipe_add_event(m, seg, COST_PIPE_SEND, act[s], 0);
        m->stash[s] = stash;
    }
    for (int s = 0; s < V && !rc; s++) {
        int seg = cost_pipe_seg_bwd(spec, s);
        if (s + 1 < V) rc |= cost_pipe_add_event(m, seg, COST_PIPE_RECV, grad[s], 0);
        rc |= cost_pipe_add_event(m, seg, COST_PIPE_WORK, -1, tb);
        if (s > 0) rc |= cost_pipe_add_event(m, seg, COST_PIPE_SEND, grad[s - 1], 0);
    }
    for (int r = 0; r < spec->stages && !rc; r++) rc |= cost_pipe_add_event(m, cost_pipe_seg_end(spec, r), COST_PIPE_WORK, -1, end);
    free(act);
    free(grad);
    if (rc) cost_pipe_model_free(m);
    return rc ? -1 : 0;
}

void cost_pipe_result_free(cost_pipe_result *r)
{
    free(r->busy);
    free(r->end_start);
    free(r->task_start);
    free(r->task_end);
    free(r->peak);
    free(r->in_flight);
    memset(r, 0, sizeof *r);
}

/* Peak bytes and most stashes in flight of stage r over its order. */
static void stage_memory(const cost_pipe_model *m, int r, const pipe_task *t, int n, double *peak, int *in_flight)
{
    const pipe_spec *s = &m->spec;
    double cur = 0, best = m->base[r] + m->transient[cost_pipe_seg_end(s, r)];
    int k = 0, most = 0;
    for (int i = 0; i < n; i++) {
        int vs = t[i].chunk * s->stages + r;
        int seg = t[i].dir == PIPE_FWD ? cost_pipe_seg_fwd(s, vs) : cost_pipe_seg_bwd(s, vs);
        double during = m->base[r] + cur + m->transient[seg];
        if (during > best) best = during;
        if (t[i].dir == PIPE_FWD) {
            cur += m->stash[vs];
            if (++k > most) most = k;
        } else {
            cur -= m->stash[vs];
            k--;
        }
    }
    *peak = best;
    *in_flight = most;
}

/* Where one stage stands in the simulation. */
typedef struct cursor {
    int task;    /* index into its order; n = the end of step; n + 1 = done */
    int ev;      /* next event of the current segment */
    int started; /* the current segment's first event has run */
    double t;    /* its clock */
} cursor;

int cost_pipe_simulate(const cost_pipe_model *m, cost_pipe_result *r, char *err, size_t errlen)
{
    const pipe_spec *s = &m->spec;
    int p = s->stages, n = pipe_task_count(s), mb = s->microbatches, rc = 0;
    memset(r, 0, sizeof *r);
    r->busy = calloc((size_t)p, sizeof *r->busy);
    r->end_start = calloc((size_t)p, sizeof *r->end_start);
    r->task_start = calloc((size_t)p * (size_t)n + 1, sizeof *r->task_start);
    r->task_end = calloc((size_t)p * (size_t)n + 1, sizeof *r->task_end);
    r->peak = calloc((size_t)p, sizeof *r->peak);
    r->in_flight = calloc((size_t)p, sizeof *r->in_flight);
    pipe_task *order = malloc(((size_t)p * (size_t)n + 1) * sizeof *order);
    double *arrive = malloc(((size_t)m->n_xfers * (size_t)mb + 1) * sizeof *arrive);
    cursor *cur = calloc((size_t)p, sizeof *cur);
    if (!r->busy || !r->end_start || !r->task_start || !r->task_end || !r->peak || !r->in_flight || !order || !arrive || !cur) {
        rc = ir_errf(err, errlen, "pipeline simulation: out of memory");
        goto done;
    }
    for (size_t i = 0; i < (size_t)m->n_xfers * (size_t)mb; i++) arrive[i] = -1;
    for (int st = 0; st < p; st++) {
        pipe_task_order(s, st, order + (size_t)st * n);
        stage_memory(m, st, order + (size_t)st * n, n, &r->peak[st], &r->in_flight[st]);
    }
    for (int left = p, moved = 1; left > 0;) {
        if (!moved) {
            int st = 0;
            while (cur[st].task > n) st++;
            const pipe_task *t = cur[st].task < n ? &order[(size_t)st * n + cur[st].task] : NULL;
            rc = ir_errf(err, errlen, "pipeline simulation: the %s schedule deadlocks: stage %d waits in %s (micro-batch %d, chunk %d)",
                         pipe_schedule_name(s->schedule), st, !t ? "its end of step" : t->dir == PIPE_FWD ? "a forward" : "a backward",
                         t ? t->mb : 0, t ? t->chunk : 0);
            goto done;
        }
        moved = 0;
        for (int st = 0; st < p; st++) {
            cursor *c = &cur[st];
            while (c->task <= n) {
                const pipe_task *t = c->task < n ? &order[(size_t)st * n + c->task] : NULL;
                int seg = !t ? cost_pipe_seg_end(s, st)
                          : t->dir == PIPE_FWD ? cost_pipe_seg_fwd(s, t->chunk * p + st)
                                               : cost_pipe_seg_bwd(s, t->chunk * p + st);
                int k = t ? t->mb : 0, blocked = 0, lo, hi;
                seg_events(m, seg, &lo, &hi);
                for (int e = lo + c->ev; e < hi; e++, c->ev++) {
                    const cost_pipe_event *x = &m->ev[e];
                    size_t slot = (size_t)x->xfer * mb + (m->xfer_end && x->xfer >= 0 && m->xfer_end[x->xfer] ? 0 : k);
                    if (x->kind == COST_PIPE_RECV) {
                        if (arrive[slot] < 0) {
                            blocked = 1;
                            break;
                        }
                        if (arrive[slot] > c->t) c->t = arrive[slot];
                        continue;
                    }
                    if (!c->started) { /* the segment starts with its first work or send, its data in */
                        c->started = 1;
                        if (t) r->task_start[(size_t)st * n + c->task] = c->t;
                        else r->end_start[st] = c->t;
                    }
                    if (x->kind == COST_PIPE_WORK) {
                        c->t += x->time;
                        r->busy[st] += x->time;
                    } else {
                        arrive[slot] = c->t + m->xfer_time[x->xfer];
                    }
                    moved = 1;
                }
                if (blocked) break;
                if (!c->started) {
                    if (t) r->task_start[(size_t)st * n + c->task] = c->t;
                    else r->end_start[st] = c->t;
                }
                if (t) r->task_end[(size_t)st * n + c->task] = c->t;
                if (c->t > r->step) r->step = c->t;
                c->task++;
                c->ev = 0;
                c->started = 0;
                moved = 1;
                if (c->task > n) left--;
            }
        }
    }
done:
    free(order);
    free(arrive);
    free(cur);
    if (rc) cost_pipe_result_free(r);
    return rc;
}
