/* pipeline.c (cost) - the schedule of a pipelined step, simulated.
 *
 * The model (pipeline.h) is a list of events per segment.  The simulation
 * keeps, per stage, a cursor (task, event) and its clock; per transfer and
 * micro-batch the time its data arrives (-1 until its send has run).  It
 * sweeps the stages round-robin, running each as far as it can: work moves
 * its clock, a send moves it by the transfer's time and stamps the arrival
 * (Megatron-LM's point-to-point calls wait for their transfers before the
 * next kernel, megatron/p2p_communication.py; carve's executor copies a
 * send out before it goes on), a receive whose data has not been
 * sent stops the stage until a later sweep.  Stages run their own fixed
 * orders, so the times are exact for the model (no event queue needed); a
 * sweep in which no stage moves while some are unfinished is a deadlock of
 * the orders, reported.  Memory follows each stage's order alone: the
 * (micro-batch, chunk) stashes between a forward's end and its backward's
 * end, plus the running segment's temporaries, over what the stage holds
 * all step.
 */
#include "cost/pipeline.h"

#include <math.h>
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
    m->params = calloc((size_t)p + 1, sizeof *m->params);
    m->opt_states = calloc((size_t)p + 1, sizeof *m->opt_states);
    m->grads = calloc((size_t)p + 1, sizeof *m->grads);
    if (!m->seg_first || !m->stash || !m->transient || !m->base || !m->params || !m->opt_states || !m->grads) {
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
    free(m->params);
    free(m->opt_states);
    free(m->grads);
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
    m->ev[m->n_ev++] = (cost_pipe_event){kind, xfer, time, 0};
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

/* The model's segment of stage st's task t (NULL: its end of step). */
static int task_segment(const pipe_spec *s, int st, const pipe_task *t)
{
    return t ? pipe_task_seg(s, st, t) : cost_pipe_seg_end(s, st);
}

/* The transfer slot of event x in micro-batch k. */
static size_t xfer_slot(const cost_pipe_model *m, const cost_pipe_event *x, int k)
{
    return (size_t)x->xfer * m->spec.microbatches + (m->xfer_end && x->xfer >= 0 && m->xfer_end[x->xfer] ? 0 : k);
}

/* The deadlock error: the first stage not done waits for a transfer that
 * no send will make.  Returns -1. */
static int deadlock(const pipe_spec *s, const pipe_task *order, const cursor *cur, char *err, size_t errlen)
{
    int st = 0, n = pipe_task_count(s);
    while (cur[st].task > n) st++;
    const pipe_task *t = cur[st].task < n ? &order[(size_t)st * n + cur[st].task] : NULL;
    return ir_errf(err, errlen, "pipeline simulation: the %s schedule deadlocks: stage %d waits in %s (micro-batch %d, chunk %d)",
                   pipe_schedule_name(s->schedule), st, !t ? "its end of step" : t->dir == PIPE_FWD ? "a forward" : "a backward",
                   t ? t->mb : 0, t ? t->chunk : 0);
}

/* Stage st's current segment starts at `now` (its first work or send, its
 * data in): recorded once. */
static void mark_start(cost_pipe_result *r, int st, int n, cursor *c, double now)
{
    if (c->started) return;
    c->started = 1;
    if (c->task < n) r->task_start[(size_t)st * n + c->task] = now;
    else r->end_start[st] = now;
}

/* Whether m's devices share the cores: some work runs faster alone. */
static int shares_cores(const cost_pipe_model *m)
{
    for (int e = 0; m->cores > 0 && e < m->n_ev; e++)
        if (m->ev[e].kind == COST_PIPE_WORK && m->ev[e].alone > 0 && m->ev[e].alone != m->ev[e].time) return 1;
    return 0;
}

/* The simulation's state: the model, what it fills, each stage's order and
 * cursor, and each transfer's arrival per micro-batch (-1: not sent yet). */
typedef struct sim {
    const cost_pipe_model *m;
    cost_pipe_result *r;
    const pipe_task *order; /* [stage * n + i] */
    double *arrive;         /* [xfer * m + k] (xfer_slot) */
    cursor *cur;            /* per stage */
    int p, n;               /* stages, tasks a stage */
    int left;               /* stages not done */
    /* simulate_shared's: */
    double now;             /* the shared clock */
    double *rem;            /* per stage working: priced seconds left of its event */
    double *speed;          /* per stage: priced seconds a second, at the moment */
    const cost_pipe_event **on; /* per stage: its event under way; NULL: not working */
} sim;

/* Stage st's current task (NULL: its end of step). */
static const pipe_task *sim_task(const sim *z, int st)
{
    return z->cur[st].task < z->n ? &z->order[(size_t)st * z->n + z->cur[st].task] : NULL;
}

/* Stage st has finished its current task (or end of step) at `now`. */
static void sim_task_done(sim *z, int st, double now)
{
    cursor *c = &z->cur[st];
    const pipe_task *t = sim_task(z, st);
    mark_start(z->r, st, z->n, c, now);
    if (t) z->r->task_end[(size_t)st * z->n + c->task] = now;
    if (now > z->r->step) z->r->step = now;
    c->task++;
    c->ev = 0;
    c->started = 0;
    if (c->task > z->n) z->left--;
}

/* simulate_shared: stage st goes on at the clock's time through its
 * receives whose data are in and its segment boundaries, until it works
 * (a work or send event under way), waits or is done.  Returns the arrival
 * it waits for when that is later (else INFINITY). */
static double shared_begin(sim *z, int st)
{
    const cost_pipe_model *m = z->m;
    cursor *c = &z->cur[st];
    while (!z->on[st] && c->task <= z->n) {
        const pipe_task *t = sim_task(z, st);
        int lo, hi, k = t ? t->mb : 0;
        seg_events(m, task_segment(&m->spec, st, t), &lo, &hi);
        if (lo + c->ev >= hi) {
            sim_task_done(z, st, z->now);
            continue;
        }
        const cost_pipe_event *x = &m->ev[lo + c->ev];
        if (x->kind == COST_PIPE_RECV) {
            double a = z->arrive[xfer_slot(m, x, k)];
            if (a < 0 || a > z->now) return a > z->now ? a : INFINITY;
            c->ev++;
            continue;
        }
        mark_start(z->r, st, z->n, c, z->now);
        z->on[st] = x;
        z->rem[st] = x->kind == COST_PIPE_WORK ? x->time : m->xfer_time[x->xfer];
    }
    return INFINITY;
}

/* simulate_shared: how far the clock moves (to the first event end, or to
 * next, the first arrival a stage waits for), each working stage's speed set
 * for it: its work at its alone rate while fewer than `cores` devices work. */
static double shared_dt(sim *z, double next)
{
    const cost_pipe_model *m = z->m;
    int working = 0;
    for (int st = 0; st < z->p; st++) working += z->on[st] ? m->stage_devices : 0;
    double dt = next - z->now;
    for (int st = 0; st < z->p; st++) {
        const cost_pipe_event *x = z->on[st];
        z->speed[st] = !x ? 0 : x->kind == COST_PIPE_WORK && working < m->cores && x->alone > 0 ? x->time / x->alone : 1;
        if (x && z->rem[st] / z->speed[st] < dt) dt = z->rem[st] / z->speed[st];
    }
    return dt;
}

/* simulate_shared: the clock moves by dt; the events it ends are done (a
 * send's data arrive). */
static void shared_progress(sim *z, double dt)
{
    z->now += dt;
    for (int st = 0; st < z->p; st++) {
        const cost_pipe_event *x = z->on[st];
        if (!x) continue;
        z->r->busy[st] += dt;
        z->rem[st] -= dt * z->speed[st];
        if (z->rem[st] > 1e-9 * dt * z->speed[st]) continue; /* (left over by rounding: done) */
        if (x->kind == COST_PIPE_SEND) {
            const pipe_task *t = sim_task(z, st);
            z->arrive[xfer_slot(z->m, x, t ? t->mb : 0)] = z->now;
        }
        z->on[st] = NULL;
        z->cur[st].ev++;
    }
}

/* cost_pipe_simulate where the devices share the cores: one clock for all
 * stages (the sweep below gives each stage its own clock, which is exact
 * only while no work's speed depends on what the other stages do).  A stage is working (a work or send event under way), waiting
 * (for a receive's data) or done.  At each step of the clock every stage
 * that can goes on through its receives whose data are in and its segment
 * boundaries; then the clock moves to the first event end or arrival, each
 * working stage's work progressing at its alone rate while fewer than
 * `cores` devices work (sends at their link's time). */
static int simulate_shared(sim *z, char *err, size_t errlen)
{
    int p = z->p, rc = 0;
    z->rem = calloc(2 * (size_t)p + 1, sizeof *z->rem);
    z->on = calloc((size_t)p + 1, sizeof *z->on);
    if (!z->rem || !z->on) rc = ir_errf(err, errlen, "pipeline simulation: out of memory");
    else z->speed = z->rem + p;
    while (!rc) {
        double next = INFINITY; /* the first arrival a waiting stage waits for */
        for (int st = 0; st < p; st++) next = fmin(next, shared_begin(z, st));
        if (!z->left) break;
        double dt = shared_dt(z, next);
        if (!(dt < INFINITY)) rc = deadlock(&z->m->spec, z->order, z->cur, err, errlen);
        else shared_progress(z, dt);
    }
    free(z->rem);
    free(z->on);
    return rc;
}

/* The own-clock sweep: stage st runs as far as it can (its work and sends
 * move its clock; a receive whose data has not been sent stops it).  Returns
 * whether it moved. */
static int sweep_stage(sim *z, int st)
{
    const cost_pipe_model *m = z->m;
    cursor *c = &z->cur[st];
    int moved = 0;
    while (c->task <= z->n) {
        const pipe_task *t = sim_task(z, st);
        int k = t ? t->mb : 0, lo, hi;
        seg_events(m, task_segment(&m->spec, st, t), &lo, &hi);
        for (int e = lo + c->ev; e < hi; e++, c->ev++) {
            const cost_pipe_event *x = &m->ev[e];
            size_t slot = xfer_slot(m, x, k);
            if (x->kind == COST_PIPE_RECV) {
                if (z->arrive[slot] < 0) return moved;
                if (z->arrive[slot] > c->t) c->t = z->arrive[slot];
                continue;
            }
            mark_start(z->r, st, z->n, c, c->t);
            double dt = x->kind == COST_PIPE_WORK ? x->time : m->xfer_time[x->xfer];
            c->t += dt;
            z->r->busy[st] += dt;
            if (x->kind == COST_PIPE_SEND) z->arrive[slot] = c->t; /* a send holds its stage until its data has left */
            moved = 1;
        }
        sim_task_done(z, st, c->t);
        moved = 1;
    }
    return moved;
}

/* The result's arrays for p stages of n tasks.  Returns 0, or -1 when out
 * of memory. */
static int result_alloc(cost_pipe_result *r, int p, int n)
{
    memset(r, 0, sizeof *r);
    r->busy = calloc((size_t)p, sizeof *r->busy);
    r->end_start = calloc((size_t)p, sizeof *r->end_start);
    r->task_start = calloc((size_t)p * (size_t)n + 1, sizeof *r->task_start);
    r->task_end = calloc((size_t)p * (size_t)n + 1, sizeof *r->task_end);
    r->peak = calloc((size_t)p, sizeof *r->peak);
    r->in_flight = calloc((size_t)p, sizeof *r->in_flight);
    return r->busy && r->end_start && r->task_start && r->task_end && r->peak && r->in_flight ? 0 : -1;
}

int cost_pipe_simulate(const cost_pipe_model *m, cost_pipe_result *r, char *err, size_t errlen)
{
    const pipe_spec *s = &m->spec;
    int p = s->stages, n = pipe_task_count(s), mb = s->microbatches, rc = 0;
    pipe_task *order = malloc(((size_t)p * (size_t)n + 1) * sizeof *order);
    sim z = {.m = m, .r = r, .order = order, .p = p, .n = n, .left = p};
    z.arrive = malloc(((size_t)m->n_xfers * (size_t)mb + 1) * sizeof *z.arrive);
    z.cur = calloc((size_t)p, sizeof *z.cur);
    if (result_alloc(r, p, n) < 0 || !order || !z.arrive || !z.cur) rc = ir_errf(err, errlen, "pipeline simulation: out of memory");
    for (size_t i = 0; !rc && i < (size_t)m->n_xfers * (size_t)mb; i++) z.arrive[i] = -1;
    for (int st = 0; st < p && !rc; st++) {
        pipe_task_order(s, st, order + (size_t)st * n);
        stage_memory(m, st, order + (size_t)st * n, n, &r->peak[st], &r->in_flight[st]);
    }
    if (!rc && shares_cores(m)) rc = simulate_shared(&z, err, errlen);
    else
        for (int moved = 1; !rc && z.left > 0;) { /* sweeps until every stage is done; one that moves nothing: a deadlock */
            if (!moved) rc = deadlock(s, order, z.cur, err, errlen);
            moved = 0;
            for (int st = 0; st < p && !rc; st++) moved |= sweep_stage(&z, st);
        }
    free(order);
    free(z.arrive);
    free(z.cur);
    if (rc) cost_pipe_result_free(r);
    return rc;
}

/* ---- a pipelined program priced ------------------------------------------------ */

/* The link between stages a and b of axis `axis`: the axis' own link when
 * the profile names it, else intra-node when the two devices (other axes at
 * 0) share a node by their numbers, else inter-node. */
static cost_link p2p_link(const cost_hw *hw, const shard_mesh *m, int axis, int a, int b)
{
    for (int i = 0; i < hw->n_axis_links; i++)
        if (!strcmp(hw->axis_names[i], m->names[axis])) return hw->axis_links[i];
    if (hw->shared_memory) return hw->intra;
    int64_t stride = 1;
    for (int k = axis + 1; k < m->n_axes; k++) stride *= m->sizes[k];
    int64_t node = hw->node_devices > 0 ? hw->node_devices : 1;
    return (a * stride) / node == (b * stride) / node ? hw->intra : hw->inter;
}

typedef struct xkey {
    int buf, to, id;
} xkey;

static int cmp_xkey(const void *a, const void *b)
{
    const xkey *x = a, *y = b;
    return x->buf != y->buf ? (x->buf > y->buf) - (x->buf < y->buf) : (x->to > y->to) - (x->to < y->to);
}

typedef struct pricer {
    const pipe_program *pp;
    const spmd_program *p;
    const double *it;     /* per instruction: seconds */
    const double *bytes;  /* per buffer */
    cost_ws *ws;
    cost_pipe_model m;
    xkey *keys;
    int n_keys;
    int *send_id;         /* per instruction: its transfer (SEND), else -1 */
    int *last_read;       /* per buffer: last instruction of the stage being counted reading it */
    int *wseg;            /* per buffer: segment writing it on that stage */
    int *opt_of;          /* per value: a param's first optimizer state, else -1 */
    double mem_bandwidth; /* the profile's */
    const double *alone;  /* per instruction: its price alone over its price with every core busy (NULL: the
                             devices do not share cores) */
} pricer;

static int key_of(const pricer *c, int buf, int to)
{
    xkey k = {buf, to, 0}, *f = bsearch(&k, c->keys, (size_t)c->n_keys, sizeof k, cmp_xkey);
    return f ? f->id : -1;
}

/* A work event of `work` seconds, `alone` while fewer devices than cores work. */
static int add_work(cost_pipe_model *m, int seg, double work, double alone)
{
    if (cost_pipe_add_event(m, seg, COST_PIPE_WORK, -1, work) < 0) return -1;
    m->ev[m->n_ev - 1].alone = alone;
    return 0;
}

/* Events of the instructions [lo, hi) of segment `seg` (of model segment ms).
 * A forward or backward instruction making an accumulated buffer (a
 * gradient, the loss) also adds it into its accumulator: one elementwise add
 * (read two, write one) at the memory bandwidth, as the executor runs it. */
static int add_events(pricer *c, int ms, int seg, int lo, int hi, int stage)
{
    const spmd_program *p = c->p;
    double work = 0, alone = 0;
    int rc = 0, fb = seg < 2 * c->pp->n_vstages;
    for (int i = lo; i < hi && !rc; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (!spmd_kind_is_p2p(in->kind)) {
            double t = c->it[i] + (fb && c->pp->buf_class[in->out] == PIPE_BUF_ACC ? 3 * c->bytes[in->out] / c->mem_bandwidth : 0);
            work += t;
            alone += c->alone ? t * c->alone[i] : t;
            continue;
        }
        if (work > 0) rc |= add_work(&c->m, ms, work, alone);
        work = alone = 0;
        int x = in->kind == SPMD_SEND ? c->send_id[i] : key_of(c, in->out, stage);
        if (x < 0) return -1;
        rc |= cost_pipe_add_event(&c->m, ms, in->kind == SPMD_SEND ? COST_PIPE_SEND : COST_PIPE_RECV, x, 0);
    }
    (void)seg;
    if (work > 0 && !rc) rc |= add_work(&c->m, ms, work, alone);
    return rc;
}

/* The transfers (one per SEND) and every segment's events. */
static int build_model(pricer *c, const cost_hw *hw)
{
    const pipe_program *pp = c->pp;
    const spmd_program *p = c->p;
    const pipe_spec *s = &pp->spec;
    int V = pp->n_vstages, P = s->stages;
    c->keys = malloc(((size_t)pp->n_xfers + 1) * sizeof *c->keys);
    c->send_id = malloc(((size_t)p->n_instrs + 1) * sizeof *c->send_id);
    if (!c->keys || !c->send_id || cost_pipe_model_init(&c->m, s) < 0) return -1;
    if (c->alone) { /* the devices share the cores (alone_prices) */
        c->m.cores = hw->cores;
        c->m.stage_devices = (int)(p->mesh.n_devices / P);
    }
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        c->send_id[i] = -1;
        if (in->kind != SPMD_SEND) continue;
        int from = pipe_seg_stage(s, p->segment[i]);
        cost_link l = p2p_link(hw, &p->mesh, s->axis, from, in->peer);
        int id = cost_pipe_add_xfer(&c->m, c->bytes[in->out] / l.bandwidth + l.latency, p->segment[i] >= 2 * V);
        if (id < 0 || c->n_keys > pp->n_xfers) return -1;
        c->send_id[i] = id;
        c->keys[c->n_keys++] = (xkey){in->out, in->peer, id};
    }
    qsort(c->keys, (size_t)c->n_keys, sizeof *c->keys, cmp_xkey);
    const pipe_range *common = &pp->seg[pipe_seg_common(s)];
    for (int k = 0; k < 2 * V + P; k++) {
        int st = pipe_seg_stage(s, k);
        if (k >= 2 * V && add_events(c, k, pipe_seg_common(s), common->lo, common->hi, st) < 0) return -1;
        if (add_events(c, k, k, pp->seg[k].lo, pp->seg[k].hi, st) < 0) return -1;
    }
    return 0;
}

/* Each instruction's seconds as the stages run it (cost_price_spans): stage
 * r's tasks in its schedule's order, each a copy of its segment for its
 * micro-batch (a micro-batch's activations and gradients are buffers of
 * their own, added into accumulators that every micro-batch shares, as the
 * executor runs them), then the common end and its own end, from an empty
 * cache; a forward or backward instruction gets the mean of its m runs, the
 * common end's the mean over the stages.  So the cache model sees what a
 * device runs between a forward and its backward (other micro-batches' and
 * chunks' tasks), not the body's order (every forward, then every
 * backward).  Without a cache model (accelerator profiles) the body's prices.
 * rate: as cost_price_spans_at's (0: the mesh's devices; body priced alike).
 * Returns the times (free them), a copy of body[] where nothing changes
 * (SEND, RECV), or NULL when out of memory. */
static double *scheduled_prices(cost_ws *ws, const pipe_program *pp, const cost_hw *hw, const cost_options *opt, const double *body,
                                int64_t rate)
{
    const spmd_program *p = pp->prog;
    const pipe_spec *s = &pp->spec;
    int P = s->stages, m = s->microbatches, n = pipe_task_count(s), rc = 0;
    double *it = malloc(((size_t)p->n_instrs + 1) * sizeof *it), *sum = calloc((size_t)p->n_instrs + 1, sizeof *sum);
    int *runs = calloc((size_t)p->n_instrs + 1, sizeof *runs);
    uint8_t *per = malloc((size_t)p->n_bufs + 1);
    cost_span *sp = malloc(((size_t)n + 2) * sizeof *sp);
    pipe_task *order = malloc(((size_t)n + 1) * sizeof *order);
    if (!it || !sum || !runs || !per || !sp || !order) rc = -1;
    else memcpy(it, body, (size_t)p->n_instrs * sizeof *it);
    for (int b = 0; !rc && b < p->n_bufs; b++)
        per[b] = pp->buf_class[b] == PIPE_BUF_ACC ? 2 : pp->buf_class[b] == PIPE_BUF_MB;
    for (int r = 0; r < P && !rc; r++) {
        pipe_task_order(s, r, order);
        for (int t = 0; t < n; t++) {
            const pipe_range *g = &pp->seg[pipe_task_seg(s, r, &order[t])];
            sp[t] = (cost_span){g->lo, g->hi, order[t].mb, m};
        }
        const pipe_range *common = &pp->seg[pipe_seg_common(s)], *end = &pp->seg[2 * pp->n_vstages + r];
        sp[n] = (cost_span){common->lo, common->hi, m, -1}; /* copy m: the accumulators the ends read */
        sp[n + 1] = (cost_span){end->lo, end->hi, m, -1};
        rc = cost_price_spans_at(ws, p, hw, opt, rate, sp, n + 2, per, m + 1, sum);
        for (int j = 0; j < n + 2 && !rc; j++)
            for (int i = sp[j].lo; i < sp[j].hi; i++) runs[i]++;
    }
    for (int i = 0; i < p->n_instrs && !rc; i++)
        if (runs[i] && !spmd_kind_is_p2p(p->instrs[i].kind)) it[i] = sum[i] / runs[i];
    free(sum);
    free(runs);
    free(per);
    free(sp);
    free(order);
    if (rc < 0) {
        free(it);
        return NULL;
    }
    return it; /* rc 1: no cache model, the body's prices */
}

/* Instructions [lo, hi): the bytes written there that die there at the
 * most (transient), and, for a forward segment, those read by a backward
 * (stash).  last_read and wseg describe the stage. */
static double sweep(pricer *c, int seg, int lo, int hi, double *stash)
{
    const spmd_program *p = c->p;
    const pipe_program *pp = c->pp;
    double cur = 0, peak = 0;
    for (int i = lo; i < hi; i++) {
        const spmd_instr *in = &p->instrs[i];
        int b = in->out;
        if (in->kind != SPMD_SEND && c->wseg[b] == seg && pp->buf_class[b] != PIPE_BUF_STATE && cost_ws_buffer_stored(c->ws, b)) {
            cur += c->bytes[b];
            if (cur > peak) peak = cur;
            int beyond = c->last_read[b] >= hi || c->last_read[b] < lo;
            int later = c->last_read[b] >= 0 ? p->segment[c->last_read[b]] : -1; /* read by a backward: stashed */
            if (stash && beyond && later >= pp->n_vstages && later < 2 * pp->n_vstages && pp->buf_class[b] != PIPE_BUF_ACC)
                *stash += c->bytes[b];
            if (c->last_read[b] < 0) cur -= c->bytes[b]; /* read by nothing */
        }
        for (int k = 0; k < IR_MAX_OPERANDS; k++) {
            int r = in->in[k];
            if (r >= 0 && c->last_read[r] == i && c->wseg[r] == seg && pp->buf_class[r] != PIPE_BUF_STATE &&
                pp->buf_class[r] != PIPE_BUF_ACC && cost_ws_buffer_stored(c->ws, r) && !(k == 1 && in->in[0] == r))
                cur -= c->bytes[r];
        }
    }
    return peak;
}

/* Master weights (f32 copies under mixed precision) of a param, split as its
 * first optimizer state (ZeRO partitions them with the states); opt_of:
 * per param, its first optimizer state, or -1. */
static double master_bytes(const spmd_program *p, int param, const int *opt_of)
{
    const ir_graph *g = p->g;
    int b = opt_of[param] >= 0 && p->arg_buf[opt_of[param]] >= 0 ? p->arg_buf[opt_of[param]] : p->arg_buf[param];
    int64_t dims[IR_MAX_RANK], n = 1;
    spmd_buffer_dims(p, b, dims);
    for (int d = 0; d < g->values[param].rank; d++) n *= dims[d];
    return 4.0 * (double)n;
}

/* Stage r's memory in the model: base, stash per forward segment, transient
 * per segment. */
static void stage_bytes(pricer *c, int r, int mixed)
{
    const pipe_program *pp = c->pp;
    const spmd_program *p = c->p;
    const pipe_spec *s = &pp->spec;
    int V = pp->n_vstages, nb = p->n_bufs;
    const uint8_t *h = pp->holds + (size_t)r * nb;
    int segs[2 * PIPE_MAX_VSTAGES / 2 + 2], ns = 0;
    for (int ch = 0; ch < s->chunks; ch++) segs[ns++] = ch * s->stages + r;
    for (int ch = s->chunks - 1; ch >= 0; ch--) segs[ns++] = V + ch * s->stages + r;
    segs[ns++] = pipe_seg_common(s);
    segs[ns++] = 2 * V + r;
    for (int b = 0; b < nb; b++) c->last_read[b] = c->wseg[b] = -1;
    for (int k = 0; k < ns; k++)
        for (int i = pp->seg[segs[k]].lo; i < pp->seg[segs[k]].hi; i++) {
            const spmd_instr *in = &p->instrs[i];
            for (int j = 0; j < IR_MAX_OPERANDS; j++)
                if (in->in[j] >= 0) c->last_read[in->in[j]] = i;
            if (in->kind != SPMD_SEND && c->wseg[in->out] < 0) c->wseg[in->out] = segs[k];
        }
    double base = 0, params = 0, opt = 0, grads = 0;
    const ir_graph *g = p->g;
    for (int b = 0; b < nb; b++) {
        if (!h[b]) continue;
        int v = p->bufs[b].value, arg = p->arg_buf[v] == b;
        if (arg && pp->buf_class[b] == PIPE_BUF_STATE) {
            base += c->bytes[b];
            if (g->values[v].role == IR_PARAM) params += c->bytes[b];
            else opt += c->bytes[b];
            if (mixed && g->values[v].role == IR_PARAM && pp->owner[b] == r) {
                double mb = master_bytes(p, v, c->opt_of);
                base += mb;
                opt += mb;
            }
        } else if (arg) {
            base += c->bytes[b]; /* an input: one micro-batch's, filled as it comes */
        } else if (pp->buf_class[b] == PIPE_BUF_ACC && c->wseg[b] >= 0 && c->wseg[b] < 2 * V) {
            base += c->bytes[b]; /* the accumulator */
            if (g->values[v].grad_of >= 0) grads += c->bytes[b];
        }
    }
    c->m.base[r] = base;
    c->m.params[r] = params;
    c->m.opt_states[r] = opt;
    c->m.grads[r] = grads;
    for (int k = 0; k < ns; k++) {
        int seg = segs[k];
        double stash = 0;
        double t = sweep(c, seg, pp->seg[seg].lo, pp->seg[seg].hi, seg < V ? &stash : NULL);
        if (seg < V) c->m.stash[seg] = stash;
        int ms = seg == pipe_seg_common(s) ? 2 * V + r : seg;
        if (seg == pipe_seg_common(s)) c->m.transient[ms] = t;
        else if (seg >= 2 * V) c->m.transient[ms] += t;
        else c->m.transient[ms] = t;
    }
}

void cost_pipe_estimate_free(cost_pipe_estimate *pe)
{
    if (!pe) return;
    free(pe->stage);
    free(pe->task_start);
    free(pe->task_end);
    free(pe->end_start);
    memset(pe, 0, sizeof *pe);
}

int cost_plan_mesh_order_warning(cost_ws *ws, const pipe_program *pp, const cost_hw *hw, const cost_options *opt,
                                 const cost_estimate *e, char *buf, size_t n)
{
    buf[0] = 0;
    return pipe_schedule_count(pp) ? 0 : cost_mesh_order_warning(ws, pp->prog, hw, opt, e, buf, n);
}

/* Per-stage sums of compute and collective time (a step: tasks times m). */
static void stage_times(const pricer *c, cost_pipe_stage *st, int r)
{
    const pipe_program *pp = c->pp;
    const spmd_program *p = c->p;
    const pipe_spec *s = &pp->spec;
    int V = pp->n_vstages, m = s->microbatches;
    for (int k = 0; k < pp->n_segs; k++) {
        int sr = pipe_seg_stage(s, k);
        if (sr != r && sr >= 0) continue;
        double comp = 0, comm = 0;
        for (int i = pp->seg[k].lo; i < pp->seg[k].hi; i++) {
            const spmd_instr *in = &p->instrs[i];
            if (spmd_kind_is_p2p(in->kind)) {
                if (in->kind == SPMD_SEND) st->send_bytes += c->bytes[in->out] * (k < 2 * V ? m : 1);
                continue;
            }
            if (in->kind == SPMD_COMPUTE) comp += c->it[i];
            else comm += c->it[i];
            if (k < 2 * V && pp->buf_class[in->out] == PIPE_BUF_ACC) comp += 3 * c->bytes[in->out] / c->mem_bandwidth;
        }
        if (k < V) st->fwd += comp + comm;
        else if (k < 2 * V) st->bwd += comp + comm;
        else st->end += comp + comm;
        double times = k < 2 * V ? m : 1;
        st->compute += comp * times;
        st->comm += comm * times;
    }
}

/* The scheduled prices of pp's instructions at the rates of rate devices
 * running at once (cost_estimate_program_at), or NULL with a message. */
static double *scheduled_at(cost_ws *ws, const pipe_program *pp, const cost_hw *hw, const cost_options *opt, int64_t rate,
                            char *err, size_t errlen)
{
    cost_estimate e;
    if (cost_estimate_program_at(ws, pp->prog, hw, opt, rate, &e, err, errlen) < 0) return NULL;
    double *t = scheduled_prices(ws, pp, hw, opt, e.instr_time, rate);
    if (!t) ir_errf(err, errlen, "pipeline: out of memory pricing the schedule");
    return t;
}

/* Where pp's devices share a CPU's cores (a profile with cores; at least as
 * many devices as cores: with fewer, every device has cores to spare all the
 * time and is priced so), *alone gets each instruction's scheduled price
 * alone (one device running: the rates of a thread whose machine is
 * otherwise idle, as the profile measured them), and where the devices
 * outnumber the cores *busy its price with as many devices running as cores
 * (the waits for a core that the mesh's prices add are not the alone rates'
 * business); else NULL.  Made before the program's own prices, which leave
 * the workspace as the callers need it.  Returns 0, or -1 with a message. */
static int alone_prices(cost_ws *ws, const pipe_program *pp, const cost_hw *hw, const cost_options *opt, double **alone, double **busy,
                        char *err, size_t errlen)
{
    const spmd_program *p = pp->prog;
    *alone = *busy = NULL;
    if (hw->cores <= 0 || p->mesh.n_devices < hw->cores) return 0;
    if (!(*alone = scheduled_at(ws, pp, hw, opt, 1, err, errlen))) return -1;
    if (p->mesh.n_devices > hw->cores && !(*busy = scheduled_at(ws, pp, hw, opt, hw->cores, err, errlen))) {
        free(*alone);
        *alone = NULL;
        return -1;
    }
    return 0;
}

/* alone[i] over busy[i] (busy: the prices with every core busy: the
 * program's own where the devices are as many as the cores), in alone[];
 * frees busy unless it is `own`. */
static void alone_over_busy(double *alone, double *busy, const double *own, int n)
{
    const double *b = busy ? busy : own;
    for (int i = 0; alone && i < n; i++) alone[i] = b[i] > 0 ? alone[i] / b[i] : 1;
    free(busy);
}

/* The prices the model of pp is built from: *out the body's estimate, *it
 * each instruction's scheduled price, *alone its alone ratio where the
 * devices share cores (else NULL).  Returns 0, or -1 with a message. */
static int model_prices(cost_ws *ws, const pipe_program *pp, const cost_hw *hw, const cost_options *opt, cost_estimate *out,
                        double **it, double **alone, char *err, size_t errlen)
{
    double *busy;
    *it = NULL;
    if (alone_prices(ws, pp, hw, opt, alone, &busy, err, errlen) < 0) return -1;
    int rc = cost_estimate_program(ws, pp->prog, hw, opt, out, err, errlen);
    if (!rc && !(*it = scheduled_prices(ws, pp, hw, opt, out->instr_time, 0)))
        rc = ir_errf(err, errlen, "pipeline: out of memory pricing the schedule");
    if (rc) {
        free(*alone);
        free(busy);
        *alone = NULL;
        return -1;
    }
    alone_over_busy(*alone, busy, *it, pp->prog->n_instrs);
    return 0;
}

/* c's per-buffer and per-value arrays (a param's first optimizer state in
 * opt_of), then the model's transfers and events.  Returns 0, or -1 when
 * out of memory. */
static int pricer_open(pricer *c, const cost_hw *hw)
{
    const spmd_program *p = c->p;
    const ir_graph *g = p->g;
    c->last_read = malloc(((size_t)p->n_bufs + 1) * sizeof *c->last_read);
    c->wseg = malloc(((size_t)p->n_bufs + 1) * sizeof *c->wseg);
    c->opt_of = malloc(((size_t)g->n_values + 1) * sizeof *c->opt_of);
    if (!c->last_read || !c->wseg || !c->opt_of) return -1;
    for (int v = 0; v < g->n_values; v++) c->opt_of[v] = -1;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].role == IR_OPT_STATE && g->values[v].tied >= 0 && c->opt_of[g->values[v].tied] < 0) c->opt_of[g->values[v].tied] = v;
    return build_model(c, hw);
}

static void pricer_close(pricer *c)
{
    free(c->keys);
    free(c->send_id);
    free(c->last_read);
    free(c->wseg);
    free(c->opt_of);
    cost_pipe_model_free(&c->m);
}

/* Stage r's figures: its times, and from the model and the simulation its
 * busy and idle time, memory and layers. */
static void stage_result(const pricer *c, const cost_pipe_result *res, int r, cost_pipe_stage *st)
{
    const pipe_spec *s = &c->pp->spec;
    stage_times(c, st, r);
    st->busy = res->busy[r];
    st->idle = res->step - res->busy[r];
    st->peak = res->peak[r];
    st->base = c->m.base[r];
    st->params = c->m.params[r];
    st->opt_states = c->m.opt_states[r];
    st->grads = c->m.grads[r];
    st->in_flight = res->in_flight[r];
    for (int ch = 0; ch < s->chunks; ch++) {
        int vs = ch * s->stages + r;
        st->stash += c->m.stash[vs];
        st->n_layers += s->first[vs + 1] - s->first[vs];
    }
    st->first_layer = s->first[r];
}

/* The step's estimate from its stages (out holds the body's estimate): the
 * simulated step, the busiest stage's compute (the rest of its step is comm:
 * collectives, transfers, waiting) and sends, the largest stage's memory. */
static void step_estimate(const cost_pipe_stage *stg, double step, const pipe_spec *s, const cost_hw *hw, const cost_options *opt,
                          cost_estimate *out)
{
    int P = s->stages, busiest = 0, top = 0;
    for (int r = 1; r < P; r++) {
        if (stg[r].busy > stg[busiest].busy || (stg[r].peak > stg[busiest].peak && stg[r].busy == stg[busiest].busy)) busiest = r;
        if (stg[r].peak > stg[top].peak) top = r;
    }
    out->step_time = step;
    out->compute_time = stg[busiest].compute;
    out->comm_time = step - stg[busiest].compute;
    out->flops *= (double)s->microbatches / P; /* mean per device */
    out->comm_bytes = out->wire_bytes = stg[busiest].send_bytes;
    out->peak_memory = stg[top].peak;
    out->capacity = opt->memory_capacity > 0 ? opt->memory_capacity : hw->mem_capacity;
    out->fits = out->peak_memory <= out->capacity;
    out->activation_peak = stg[top].peak - stg[top].base;
    /* what the largest stage holds at its peak (its other held bytes, inputs and the loss's sum, with "other") */
    out->peak_params = stg[top].params;
    out->peak_opt_states = stg[top].opt_states;
    out->peak_grads = stg[top].grads;
    out->peak_activations = stg[top].peak - stg[top].base;
    out->peak_other = stg[top].base - stg[top].params - stg[top].opt_states - stg[top].grads;
    out->peak_gathered_params = 0; /* a stage's copies of params count with its held bytes */
    out->model_state_params = stg[top].params;
    out->model_state_opt = stg[top].opt_states;
    out->model_state_grads = stg[top].grads;
    out->model_state_bytes = stg[top].params + stg[top].opt_states + stg[top].grads;
}

/* *pe from the stages (taken over) and the simulation's task times (taken
 * over from res): the bubble, the ideal step, the busiest link's time. */
static void pipe_estimate(cost_pipe_stage *stg, cost_pipe_result *res, const pipe_program *pp, const cost_hw *hw,
                          cost_pipe_estimate *pe)
{
    const pipe_spec *s = &pp->spec;
    int P = s->stages;
    memset(pe, 0, sizeof *pe);
    double idle = 0, ideal = 0;
    for (int r = 0; r < P; r++) {
        idle += stg[r].idle / res->step;
        if (s->microbatches * (stg[r].fwd + stg[r].bwd) > ideal) ideal = s->microbatches * (stg[r].fwd + stg[r].bwd);
    }
    pe->n_stages = P;
    pe->stage = stg;
    pe->step = res->step;
    pe->bubble = idle / P;
    pe->ideal = ideal;
    pe->n_tasks = pipe_task_count(s);
    pe->task_start = res->task_start;
    pe->task_end = res->task_end;
    pe->end_start = res->end_start;
    res->task_start = res->task_end = res->end_start = NULL;
    for (int r = 0; r < P; r++)
        pe->xfer_time = fmax(pe->xfer_time, pe->stage[r].send_bytes / p2p_link(hw, &pp->prog->mesh, s->axis, r, r + 1 < P ? r + 1 : r - 1).bandwidth);
}

/* cost_estimate_plan of a pipelined program; when prices is not NULL, *prices gets the
 * per-instruction prices the simulation ran on (scheduled_prices) and
 * *alone_out their alone ratios (NULL where the devices do not share cores;
 * free both), for a caller that balances the split on them. */
static int estimate_pipeline(cost_ws *ws, const pipe_program *pp, const cost_hw *hw, const cost_options *opt, cost_estimate *out,
                             cost_pipe_estimate *pe, double **prices, double **alone_out, char *err, size_t errlen)
{
    static const cost_options defaults = {COST_FP32, 0, 0, COST_GRADS_AUTO};
    if (!opt) opt = &defaults;
    double *it, *alone;
    if (model_prices(ws, pp, hw, opt, out, &it, &alone, err, errlen) < 0) return -1;
    pricer c = {.pp = pp, .p = pp->prog, .it = it, .bytes = cost_ws_buffer_bytes(ws), .ws = ws, .mem_bandwidth = hw->mem_bandwidth,
                .alone = alone};
    int P = pp->spec.stages, rc = 0, mixed = opt->precision == COST_MIXED_BF16 || opt->precision == COST_MIXED_FP16;
    cost_pipe_result res;
    memset(&res, 0, sizeof res);
    cost_pipe_stage *stg = calloc((size_t)P, sizeof *stg);
    if (!stg || pricer_open(&c, hw) < 0) rc = ir_errf(err, errlen, "pipeline: out of memory pricing the schedule");
    for (int r = 0; r < P && !rc; r++) stage_bytes(&c, r, mixed);
    if (!rc) rc = cost_pipe_simulate(&c.m, &res, err, errlen);
    for (int r = 0; r < P && !rc; r++) stage_result(&c, &res, r, &stg[r]);
    if (!rc) step_estimate(stg, res.step, &pp->spec, hw, opt, out);
    if (!rc && pe) {
        pipe_estimate(stg, &res, pp, hw, pe);
        stg = NULL;
    }
    if (prices && !rc) {
        *prices = it;
        *alone_out = alone;
    } else {
        free(it);
        free(alone);
    }
    free(stg);
    pricer_close(&c);
    cost_pipe_result_free(&res);
    return rc;
}

int cost_pipe_simulate_times(cost_ws *ws, const pipe_program *pp, const cost_hw *hw, const cost_options *opt, const double *seg_time,
                             double *idle, char *err, size_t errlen)
{
    static const cost_options defaults = {COST_FP32, 0, 0, COST_GRADS_AUTO};
    cost_estimate e;
    double *it, *alone;
    if (!opt) opt = &defaults;
    if (model_prices(ws, pp, hw, opt, &e, &it, &alone, err, errlen) < 0) return -1;
    pricer c = {.pp = pp, .p = pp->prog, .it = it, .bytes = cost_ws_buffer_bytes(ws), .ws = ws, .mem_bandwidth = hw->mem_bandwidth,
                .alone = alone};
    cost_pipe_result res;
    memset(&res, 0, sizeof res);
    int rc = build_model(&c, hw) < 0 ? ir_errf(err, errlen, "pipeline: out of memory pricing the schedule") : 0;
    for (int k = 0; k < c.m.n_segs && !rc; k++) { /* the measured time replaces the segment's work and sends, alone or not */
        int lo, hi;
        double work = 0;
        if (seg_time[k] < 0) continue;
        seg_events(&c.m, k, &lo, &hi);
        for (int i = lo; i < hi; i++) work += c.m.ev[i].kind == COST_PIPE_WORK ? c.m.ev[i].time : 0;
        for (int i = lo; i < hi; i++) /* (a segment without work keeps none: only transfers, nothing measured to place) */
            if (c.m.ev[i].kind == COST_PIPE_WORK) {
                c.m.ev[i].time *= seg_time[k] / work;
                c.m.ev[i].alone = 0;
            }
    }
    for (int x = 0; x < c.m.n_xfers && !rc; x++) c.m.xfer_time[x] = 0;
    if (!rc) rc = cost_pipe_simulate(&c.m, &res, err, errlen);
    for (int r = 0; r < pp->spec.stages && !rc; r++) idle[r] = (res.step - res.busy[r]) / res.step;
    free(it);
    free(alone);
    pricer_close(&c);
    cost_pipe_result_free(&res);
    return rc;
}

/* ---- the layer split ---------------------------------------------------------- */

void cost_pipe_balance(const pipe_program *pp, const double *instr_time, pipe_spec *out)
{
    const spmd_program *p = pp->prog;
    const pipe_spec *s = &pp->spec;
    int V = pp->n_vstages, L = s->n_layers, m = s->microbatches;
    *out = *s;
    out->split_auto = 0;
    if (V <= 1 || L <= 0) return;
    double *w = calloc((size_t)L + 1, sizeof *w), *extra = calloc((size_t)V, sizeof *extra);
    double *best = malloc((size_t)(V + 1) * (L + 1) * sizeof *best);
    int *cut = malloc((size_t)(V + 1) * (L + 1) * sizeof *cut);
    if (!w || !extra || !best || !cut) goto done;
    for (int k = 0; k < pp->n_segs; k++) {
        int fb = k < 2 * V, vs = k < V ? k : k < 2 * V ? k - V : -1;
        for (int i = pp->seg[k].lo; i < pp->seg[k].hi; i++) {
            const spmd_instr *in = &p->instrs[i];
            if (spmd_kind_is_p2p(in->kind)) continue;
            double t = instr_time[i] * (fb ? m : 1);
            if (in->layer >= 0 && in->layer < L) w[in->layer] += t;
            else if (vs >= 0) extra[vs] += t;
        }
    }
    /* best[v][j]: the least largest work of virtual stages 0..v-1 holding layers 0..j-1 */
#define B(v, j) best[(size_t)(v) * (L + 1) + (j)]
#define C(v, j) cut[(size_t)(v) * (L + 1) + (j)]
    for (int j = 0; j <= L; j++) B(0, j) = j ? 1e300 : 0;
    for (int v = 1; v <= V; v++)
        for (int j = 0; j <= L; j++) {
            double sum = extra[v - 1], b = 1e300;
            int at = j;
            /* stage v-1 holds layers i..j-1: at least one when there are layers enough (no stage idles; the
               embedding stays on virtual stage 0 and the head on V-1 whatever the split, pipe_lower) */
            for (int i = L >= V ? j - 1 : j; i >= 0; i--) {
                sum += i < j ? w[i] : 0;
                double x = B(v - 1, i) > sum ? B(v - 1, i) : sum;
                if (x < b * (1 - 1e-12)) b = x, at = i;
            }
            B(v, j) = b;
            C(v, j) = at;
        }
    out->first[V] = L;
    for (int v = V, j = L; v > 0; v--) {
        j = C(v, j);
        out->first[v - 1] = j;
    }
    out->first[0] = 0;
#undef B
#undef C
done:
    free(w);
    free(extra);
    free(best);
    free(cut);
}

/* ---- the split refined on the schedule ------------------------------------------ */

/* Another split of pp's layers simulated without lowering it again: pp's
 * model (its events at pp's split) with each segment's work scaled to what
 * the segment holds under that split, its untagged work as at pp's split
 * plus its layers' (each layer's instructions priced as in pp, with the adds
 * into accumulators add_events counts); the transfers as at pp's split (a
 * boundary sends the same activations wherever it falls). */
typedef struct resplit {
    pricer c;              /* pp's model, c.m: its work events rescaled per split */
    double *time0, *alone0; /* per event: its time and alone time at pp's split */
    double *seg0;          /* per model segment: its work at pp's split */
    double *rest;          /* per model segment: its untagged work */
    double *pre;           /* [3 * (L + 1)]: prefix sums over the layers of their forward, backward (one
                              micro-batch) and end-of-step work */
    int V, P, L;
    double tasks_left;     /* simulated tasks the refinement may still run (REFINE_TASKS) */
} resplit;

/* The most tasks (stages times their tasks, summed over simulations) one
 * refinement simulates: a bound on its work for the largest pipelines (about
 * 1.5 s of one core of a 2-vCPU Xeon VM), not a setting of its result below
 * it (LLaMA-2-70B's 32 virtual stages over 8 devices, 8 micro-batches: both
 * descents together 5.3M; 1T's 64 stages of 512 micro-batches, 1F1B: 65,536
 * a simulation, and a round of single moves 4,032 simulations, so there the
 * bound ends the descents within their first round). */
#define REFINE_TASKS 33554432.0

/* The work of layers [a, b) of kind k (0 forward, 1 backward, 2 end). */
static double layer_work(const resplit *z, int k, int a, int b)
{
    const double *p = z->pre + (size_t)k * (z->L + 1);
    return p[b] - p[a];
}

/* Each instruction's work into its layer (by the kind of its segment) or
 * its model segment's untagged rest (the common end's into every stage's). */
static void resplit_work(resplit *z, double *lw)
{
    const pipe_program *pp = z->c.pp;
    const spmd_program *p = pp->prog;
    int V = z->V, P = z->P, L = z->L;
    for (int k = 0; k <= 2 * V + P; k++) {
        int kind = k < V ? 0 : k < 2 * V ? 1 : 2, fb = k < 2 * V;
        for (int i = pp->seg[k].lo; i < pp->seg[k].hi; i++) {
            const spmd_instr *in = &p->instrs[i];
            if (spmd_kind_is_p2p(in->kind)) continue;
            double t = z->c.it[i] + (fb && pp->buf_class[in->out] == PIPE_BUF_ACC ? 3 * z->c.bytes[in->out] / z->c.mem_bandwidth : 0);
            if (k == 2 * V + P)
                for (int r = 0; r < P; r++) z->rest[2 * V + r] += t;
            else if (in->layer >= 0 && in->layer < L) lw[(size_t)kind * L + in->layer] += t;
            else z->rest[k] += t;
        }
    }
}

/* z for pp (priced: it, alone as estimate_pipeline's model ran on them; ws
 * holding pp's buffers).  Returns 0, or -1 when out of memory (z freed). */
static void resplit_free(resplit *z);
static int resplit_open(resplit *z, cost_ws *ws, const pipe_program *pp, const cost_hw *hw, const double *it, const double *alone)
{
    memset(z, 0, sizeof *z);
    z->c = (pricer){.pp = pp, .p = pp->prog, .it = it, .bytes = cost_ws_buffer_bytes(ws), .ws = ws, .mem_bandwidth = hw->mem_bandwidth,
                    .alone = alone};
    z->V = pp->n_vstages;
    z->P = pp->spec.stages;
    z->L = pp->spec.n_layers;
    int L = z->L, ns = 2 * z->V + z->P;
    double *lw = calloc(3 * (size_t)L + 1, sizeof *lw);
    z->pre = calloc(3 * ((size_t)L + 1), sizeof *z->pre);
    z->seg0 = calloc((size_t)ns, sizeof *z->seg0);
    z->rest = calloc((size_t)ns, sizeof *z->rest);
    if (!lw || !z->pre || !z->seg0 || !z->rest || build_model(&z->c, hw) < 0) goto fail;
    cost_pipe_model *m = &z->c.m;
    z->time0 = malloc(((size_t)m->n_ev + 1) * sizeof *z->time0);
    z->alone0 = malloc(((size_t)m->n_ev + 1) * sizeof *z->alone0);
    if (!z->time0 || !z->alone0) goto fail;
    for (int e = 0; e < m->n_ev; e++) {
        z->time0[e] = m->ev[e].time;
        z->alone0[e] = m->ev[e].alone;
    }
    for (int k = 0; k < ns; k++) {
        int lo, hi;
        seg_events(m, k, &lo, &hi);
        for (int e = lo; e < hi; e++) z->seg0[k] += m->ev[e].kind == COST_PIPE_WORK ? m->ev[e].time : 0;
    }
    resplit_work(z, lw);
    for (int k = 0; k < 3; k++)
        for (int l = 0; l < L; l++) z->pre[(size_t)k * (L + 1) + l + 1] = z->pre[(size_t)k * (L + 1) + l] + lw[(size_t)k * L + l];
    free(lw);
    return 0;
fail:
    free(lw);
    resplit_free(z);
    return -1;
}

static void resplit_free(resplit *z)
{
    free(z->time0);
    free(z->alone0);
    free(z->seg0);
    free(z->rest);
    free(z->pre);
    pricer_close(&z->c);
    memset(z, 0, sizeof *z);
}

/* The simulated step of split first[] (V + 1 entries), or INFINITY where
 * the model cannot carry it (a segment without work at pp's split that
 * would get some; a deadlock) or the refinement's tasks are spent. */
static double resplit_step(resplit *z, const int *first)
{
    cost_pipe_model *m = &z->c.m;
    int V = z->V, P = z->P;
    if (z->tasks_left <= 0) return INFINITY;
    z->tasks_left -= (double)P * pipe_task_count(&m->spec);
    for (int k = 0; k < 2 * V + P; k++) {
        double want = z->rest[k];
        if (k < 2 * V) want += layer_work(z, k < V ? 0 : 1, first[k % V], first[k % V + 1]);
        else
            for (int vs = k - 2 * V; vs < V; vs += P) want += layer_work(z, 2, first[vs], first[vs + 1]);
        if (z->seg0[k] <= 0 && want > 0) return INFINITY;
        double f = z->seg0[k] > 0 ? want / z->seg0[k] : 0;
        int lo, hi;
        seg_events(m, k, &lo, &hi);
        for (int e = lo; e < hi; e++)
            if (m->ev[e].kind == COST_PIPE_WORK) {
                m->ev[e].time = z->time0[e] * f;
                m->ev[e].alone = z->alone0[e] * f;
            }
    }
    cost_pipe_result res;
    char err[160];
    if (cost_pipe_simulate(m, &res, err, sizeof err) < 0) return INFINITY; /* it freed res */
    double step = res.step;
    cost_pipe_result_free(&res);
    return step;
}

/* Moves one layer from virtual stage a to virtual stage b (the stages
 * between keep their counts; each passes one layer on). */
static void move_layer(int *first, int a, int b)
{
    if (a < b)
        for (int k = a + 1; k <= b; k++) first[k]--;
    else
        for (int k = b + 1; k <= a; k++) first[k]++;
}

/* A descent from split first[] (its simulated step `step`): each round
 * moves the one layer, from any virtual stage to any other, that shortens
 * the simulated step most, until none does (or the tasks are spent: the
 * best move of the round so far is taken).  Returns the step it ends on. */
static double descend(resplit *z, int *first, double step)
{
    int V = z->V, L = z->L, least = L >= V ? 1 : 0;
    for (int round = 0; round < L * V && step < INFINITY; round++) {
        int ba = -1, bb = -1;
        double to = step * (1 - 1e-9);
        for (int a = 0; a < V; a++) {
            if (first[a + 1] - first[a] <= least) continue;
            for (int b = 0; b < V; b++) {
                if (b == a) continue;
                move_layer(first, a, b);
                double t = resplit_step(z, first);
                move_layer(first, b, a);
                if (t < to) to = t, ba = a, bb = b;
            }
        }
        if (ba < 0) break;
        move_layer(first, ba, bb);
        step = to;
        if (z->tasks_left <= 0) break;
    }
    return step;
}

/* The even split whose extra layers go to the middle virtual stages. */
static void split_middle(int *first, int V, int L)
{
    int base = L / V, extra = L % V, from = (V - extra) / 2;
    first[0] = 0;
    for (int v = 0; v < V; v++) first[v + 1] = first[v] + base + (v >= from && v < from + extra);
}

/* Refines s's split (V + 1 entries of first[]) on z's simulated schedule:
 * descents (descend) from s's split and from the even split that gives its
 * extra layers to the middle virtual stages; the shorter end is kept (s's
 * on a tie).  The largest virtual stage alone (cost_pipe_balance) cannot
 * tell apart the splits that tie on it (80 layers on 32 virtual stages:
 * every split has a stage of 3), yet a step is more than its largest stage:
 * a device runs the sum of its chunks, and the fill and drain run the first
 * and last virtual stages with little to overlap them (hence the second
 * start: the middle stages are the ones the schedule overlaps).  A descent
 * takes one move at a time, so it can stop short (a local optimum): two
 * starts find the same best split on LLaMA-2-70B's 80 layers whether the
 * layers carry the imported graph's extra work or not. */
static void refine_split(resplit *z, pipe_spec *s)
{
    int mid[PIPE_MAX_VSTAGES + 1];
    split_middle(mid, z->V, z->L);
    z->tasks_left = REFINE_TASKS / 2; /* half for each descent */
    double a = descend(z, s->first, resplit_step(z, s->first));
    z->tasks_left += REFINE_TASKS / 2;
    double b = descend(z, mid, resplit_step(z, mid));
    if (b < a) memcpy(s->first, mid, (size_t)(z->V + 1) * sizeof *mid);
}

/* Lowers and prices split s into *q (its stages into *qe when qe).
 * Returns 0, or -1 (nothing to free) when it does not lower or price. */
static int price_split(cost_ws *ws, shard_state *st, const pipe_spec *s, const spmd_options *opts, const cost_hw *hw,
                       const cost_options *opt, pipe_program *q, cost_estimate *f, cost_pipe_estimate *qe)
{
    char err[256];
    if (pipe_lower(st, s, opts, q, err, sizeof err) < 0) return -1;
    if (estimate_pipeline(ws, q, hw, opt, f, qe, NULL, NULL, err, sizeof err) == 0) return 0;
    pipe_program_free(q);
    return -1;
}

/* The splits an auto spec is priced at beside the even one pp has, priced
 * on `it` and `alone` (the prices pp's simulation ran on; taken over):
 * cost_pipe_balance's, and that one refined on pp's simulated schedule
 * (refine_split; where the refinement cannot run, the balanced one alone).
 * Returns how many of out[2] differ from pp's split and from each other. */
static int auto_splits(cost_ws *ws, const pipe_program *pp, const cost_hw *hw, double *it, double *alone, pipe_spec *out)
{
    cost_pipe_balance(pp, it, &out[0]);
    out[1] = out[0];
    resplit z;
    if (resplit_open(&z, ws, pp, hw, it, alone) == 0) {
        refine_split(&z, &out[1]);
        resplit_free(&z);
    }
    free(it);
    free(alone);
    int n = 0;
    for (int k = 0; k < 2; k++)
        if (memcmp(out[k].first, pp->spec.first, sizeof out[k].first) && (!n || memcmp(out[k].first, out[0].first, sizeof out[k].first)))
            out[n++] = out[k];
    return n;
}

/* The best of pp's split and auto_splits' (priced in that order: the refined
 * one, the likeliest, last) becomes *pp, *e and *pe (a plan that fits first,
 * then the shorter step; among misfits the smaller peak).  A split that
 * fails to lower or price is passed over.  Returns 0, or -1 with a message
 * (pp freed). */
static int balance_split(cost_ws *ws, shard_state *st, const spmd_options *opts, const cost_hw *hw, const cost_options *opt,
                         double *it, double *alone, pipe_program *pp, cost_estimate *e, cost_pipe_estimate *pe, char *err,
                         size_t errlen)
{
    pipe_spec cand[2];
    int n = auto_splits(ws, pp, hw, it, alone, cand), held = 1; /* held: the workspace holds *pp's buffers */
    for (int k = 0; k < n; k++) {
        pipe_program q;
        cost_estimate f;
        cost_pipe_estimate qe;
        if (price_split(ws, st, &cand[k], opts, hw, opt, &q, &f, pe ? &qe : NULL) < 0) {
            held = 0; /* (a price that failed may have left the workspace half filled) */
            continue;
        }
        held = f.fits != e->fits ? f.fits : f.fits ? f.step_time < e->step_time : f.peak_memory < e->peak_memory;
        if (!held) {
            pipe_program_free(&q);
            if (pe) cost_pipe_estimate_free(&qe);
            continue;
        }
        pipe_program_free(pp);
        *pp = q;
        *e = f;
        if (pe) {
            cost_pipe_estimate_free(pe);
            *pe = qe;
        }
    }
    if (held) return 0;
    /* the workspace holds a split that lost: price the kept one again */
    if (estimate_pipeline(ws, pp, hw, opt, e, NULL, NULL, NULL, err, errlen) == 0) return 0;
    pipe_program_free(pp);
    if (pe) cost_pipe_estimate_free(pe);
    return -1;
}

/* cost_price_plan of a pipelined plan: an auto split priced at the even split
 * and at the balanced ones (balance_split). */
static int price_pipelined(cost_ws *ws, shard_state *st, const pipe_spec *spec, const spmd_options *opts, const cost_hw *hw,
                           const cost_options *opt, pipe_program *pp, cost_estimate *e, cost_pipe_estimate *pe, char *err,
                           size_t errlen)
{
    pipe_spec sp = *spec;
    int autos = sp.split_auto;
    if (autos) {
        pipe_split_even(&sp, st->g->n_layers);
        sp.split_auto = 0;
    }
    double *it = NULL, *alone = NULL; /* the prices the simulation ran on, to balance the split on */
    if (pipe_lower(st, &sp, opts, pp, err, errlen) < 0) return -1;
    if (estimate_pipeline(ws, pp, hw, opt, e, pe, autos ? &it : NULL, &alone, err, errlen) < 0) {
        pipe_program_free(pp);
        return -1;
    }
    return autos ? balance_split(ws, st, opts, hw, opt, it, alone, pp, e, pe, err, errlen) : 0;
}

/* ---- every plan ---------------------------------------------------------------- */

/* The one stage of a plan without a pipeline, from its estimate e: all of
 * the step its work, its phases as one micro-batch's forward, backward and
 * end, nothing idle, sent or stashed.  Returns 0, or -1 when out of memory. */
static int one_stage(const pipe_program *pp, const cost_estimate *e, cost_pipe_estimate *pe, char *err, size_t errlen)
{
    memset(pe, 0, sizeof *pe);
    if (!(pe->stage = calloc(1, sizeof *pe->stage))) return ir_errf(err, errlen, "out of memory");
    cost_pipe_stage *s = pe->stage;
    s->busy = e->step_time;
    s->fwd = e->phase_compute[SPMD_FORWARD] + e->phase_comm[SPMD_FORWARD];
    s->bwd = e->phase_compute[SPMD_BACKWARD] + e->phase_comm[SPMD_BACKWARD];
    s->end = e->phase_compute[SPMD_OPTIMIZER] + e->phase_comm[SPMD_OPTIMIZER];
    s->compute = e->compute_time;
    s->comm = e->comm_time;
    s->peak = e->peak_memory;
    s->base = e->peak_memory - e->peak_activations;
    s->params = e->peak_params;
    s->opt_states = e->peak_opt_states;
    s->grads = e->peak_grads;
    s->n_layers = pp->prog->g->n_layers;
    pe->n_stages = 1;
    pe->step = pe->ideal = e->step_time;
    return 0;
}

int cost_estimate_plan(cost_ws *ws, const pipe_program *pp, const cost_hw *hw, const cost_options *opt, cost_estimate *out,
                       cost_pipe_estimate *pe, char *err, size_t errlen)
{
    if (pp->spec.axis >= 0) return estimate_pipeline(ws, pp, hw, opt, out, pe, NULL, NULL, err, errlen);
    if (cost_estimate_program(ws, pp->prog, hw, opt, out, err, errlen) < 0) return -1;
    return pe ? one_stage(pp, out, pe, err, errlen) : 0;
}

int cost_price_plan(cost_ws *ws, shard_state *st, const pipe_spec *spec, const spmd_options *opts, const cost_hw *hw,
                    const cost_options *opt, pipe_program *pp, cost_estimate *e, cost_pipe_estimate *pe, char *err,
                    size_t errlen)
{
    if (pe) memset(pe, 0, sizeof *pe);
    if (spec->axis >= 0) {
        pipe_program_free(pp);
        return price_pipelined(ws, st, spec, opts, hw, opt, pp, e, pe, err, errlen);
    }
    if (pipe_lower(st, spec, opts, pp, err, errlen) < 0) return -1;
    return cost_estimate_plan(ws, pp, hw, opt, e, pe, err, errlen);
}
