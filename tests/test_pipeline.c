/* test_pipeline.c - pipeline schedules: the task orders (every task once, a
 * micro-batch's backward after its forward, micro-batches in order per chunk),
 * the micro-batches in flight (1F1B: p - r at stage r; GPipe: m; interleaved:
 * its warm-up plus one), and the simulated step against the closed forms on
 * equal stages: GPipe and 1F1B idle (p-1)/(m+p-1) of the step, interleaved
 * 1F1B (p-1)/(v m) of the ideal time. */
#include "analysis/pipeline.h"
#include "analysis/schedule.h"
#include "cost/pipeline.h"
#include "models/models.h"
#include "autopart/memory.h"
#include "autopart/pipeline.h"
#include "tests/test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static pipe_spec make_spec(int sched, int p, int m, int v)
{
    pipe_spec s = pipe_spec_none();
    s.axis = 0;
    s.stages = p;
    s.microbatches = m;
    s.schedule = sched;
    s.chunks = sched == PIPE_INTERLEAVED ? v : 1;
    pipe_split_even(&s, s.chunks * p * 2);
    return s;
}

static int close_rel(double a, double b, double tol) { return fabs(a - b) <= tol * fmax(fabs(a), fabs(b)) + 1e-15; }

/* Every (micro-batch, chunk, direction) exactly once; forward before backward;
 * per chunk and direction micro-batches in increasing order. */
static void check_order(const pipe_spec *s)
{
    int n = pipe_task_count(s), m = s->microbatches, v = s->chunks;
    CHECK(n == 2 * m * v);
    pipe_task *t = calloc((size_t)n, sizeof *t);
    int *pos = malloc((size_t)n * sizeof *pos), *last = malloc((size_t)2 * v * sizeof *last);
    for (int r = 0; r < s->stages; r++) {
        pipe_task_order(s, r, t);
        for (int i = 0; i < n; i++) pos[i] = -1;
        for (int i = 0; i < 2 * v; i++) last[i] = -1;
        int ok = 1;
        for (int i = 0; i < n; i++) {
            if (t[i].mb < 0 || t[i].mb >= m || t[i].chunk < 0 || t[i].chunk >= v || (t[i].dir != PIPE_FWD && t[i].dir != PIPE_BWD)) {
                ok = 0;
                break;
            }
            int key = (t[i].mb * v + t[i].chunk) * 2 + t[i].dir;
            if (pos[key] >= 0) ok = 0;
            pos[key] = i;
            int *l = &last[t[i].chunk * 2 + t[i].dir];
            if (t[i].mb <= *l) ok = 0;
            *l = t[i].mb;
        }
        for (int k = 0; ok && k < m * v; k++) ok = pos[2 * k] >= 0 && pos[2 * k + 1] > pos[2 * k];
        CHECKF(ok, "%s p=%d m=%d v=%d: stage %d's order is not a valid order", pipe_schedule_name(s->schedule), s->stages, m, v, r);
    }
    free(t);
    free(pos);
    free(last);
}

static void test_orders(void)
{
    for (int p = 2; p <= 8; p *= 2)
        for (int m = 1; m <= 16; m++) {
            pipe_spec g = make_spec(PIPE_GPIPE, p, m, 1), f = make_spec(PIPE_1F1B, p, m, 1);
            check_order(&g);
            check_order(&f);
            for (int r = 0; r < p; r++) {
                CHECKF(pipe_max_in_flight(&g, r) == m, "gpipe p=%d m=%d stage %d: %d in flight", p, m, r, pipe_max_in_flight(&g, r));
                int want = p - r < m ? p - r : m;
                CHECKF(pipe_max_in_flight(&f, r) == want, "1f1b p=%d m=%d stage %d: %d in flight, want %d", p, m, r,
                       pipe_max_in_flight(&f, r), want);
            }
            for (int v = 2; v <= 4 && m % p == 0; v++) {
                pipe_spec s = make_spec(PIPE_INTERLEAVED, p, m, v);
                check_order(&s);
                for (int r = 0; r < p; r++) {
                    int warm = 2 * (p - r - 1) + (v - 1) * p, want = warm + 1 < m * v ? warm + 1 : m * v;
                    CHECKF(pipe_max_in_flight(&s, r) == want, "interleaved p=%d m=%d v=%d stage %d: %d in flight, want %d", p,
                           m, v, r, pipe_max_in_flight(&s, r), want);
                }
            }
        }
    /* 1F1B on 4 stages, 4 micro-batches, stage 1: F0 F1 F2 B0 F3 B1 B2 B3 */
    pipe_spec s = make_spec(PIPE_1F1B, 4, 4, 1);
    pipe_task t[8];
    pipe_task_order(&s, 1, t);
    static const int mb[8] = {0, 1, 2, 0, 3, 1, 2, 3}, dir[8] = {0, 0, 0, 1, 0, 1, 1, 1};
    int same = 1;
    for (int i = 0; i < 8; i++) same &= t[i].mb == mb[i] && t[i].dir == dir[i] && t[i].chunk == 0;
    CHECK(same);
    /* interleaved p=2, m=4, v=2, stage 0: forwards (mb, chunk) 0,0 1,0 0,1 1,1 | 2,0 ... */
    s = make_spec(PIPE_INTERLEAVED, 2, 4, 2);
    pipe_task u[16];
    pipe_task_order(&s, 0, u);
    CHECK(u[0].mb == 0 && u[0].chunk == 0 && u[1].mb == 1 && u[1].chunk == 0 && u[2].mb == 0 && u[2].chunk == 1 &&
          u[3].mb == 1 && u[3].chunk == 1 && u[4].mb == 2 && u[4].chunk == 0 && u[4].dir == PIPE_FWD);
    /* its first backward is micro-batch 0 on the last chunk */
    int first_b = 0;
    while (u[first_b].dir != PIPE_BWD) first_b++;
    CHECK(u[first_b].mb == 0 && u[first_b].chunk == 1);
}

/* Simulates the uniform model; returns the step, and the mean idle share. */
static double simulate(const pipe_spec *s, double tf, double tb, double xfer, double *idle_share, cost_pipe_result *keep)
{
    cost_pipe_model m;
    cost_pipe_result r;
    char err[256];
    if (cost_pipe_model_uniform(&m, s, tf, tb, xfer, 0, 1.0) < 0) return -1;
    if (cost_pipe_simulate(&m, &r, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        cost_pipe_model_free(&m);
        return -1;
    }
    double idle = 0;
    for (int st = 0; st < s->stages; st++) idle += (r.step - r.busy[st]) / r.step;
    if (idle_share) *idle_share = idle / s->stages;
    double step = r.step;
    if (keep) *keep = r;
    else cost_pipe_result_free(&r);
    cost_pipe_model_free(&m);
    return step;
}

static void test_closed_forms(void)
{
    static const double times[][2] = {{1.0, 2.0}, {1.0, 1.0}, {0.3, 0.7}};
    for (int p = 2; p <= 8; p *= 2)
        for (int m = 1; m <= 32; m = m < 4 ? m + 1 : 2 * m)
            for (size_t k = 0; k < sizeof times / sizeof times[0]; k++) {
                double tf = times[k][0], tb = times[k][1], idle;
                for (int sched = PIPE_GPIPE; sched <= PIPE_1F1B; sched++) {
                    pipe_spec s = make_spec(sched, p, m, 1);
                    double step = simulate(&s, tf, tb, 0, &idle, NULL);
                    CHECKF(close_rel(step, (m + p - 1) * (tf + tb), 1e-12), "%s p=%d m=%d: step %g, want %g",
                           pipe_schedule_name(sched), p, m, step, (m + p - 1) * (tf + tb));
                    CHECKF(close_rel(idle, (double)(p - 1) / (m + p - 1), 1e-12), "%s p=%d m=%d: bubble %g, want %g",
                           pipe_schedule_name(sched), p, m, idle, (double)(p - 1) / (m + p - 1));
                }
                for (int v = 2; v <= 4 && m % p == 0; v++) {
                    pipe_spec s = make_spec(PIPE_INTERLEAVED, p, m, v);
                    /* each chunk holds 1/v of a stage's layers */
                    double step = simulate(&s, tf / v, tb / v, 0, &idle, NULL), ideal = m * (tf + tb);
                    CHECKF(close_rel((step - ideal) / ideal, (double)(p - 1) / (v * m), 1e-12),
                           "interleaved p=%d m=%d v=%d (tf %g tb %g): bubble %g of the ideal, want %g", p, m, v, tf, tb,
                           (step - ideal) / ideal, (double)(p - 1) / (v * m));
                }
            }
    /* transfers: 2 stages, 1 micro-batch: F0, send, F1, B1, send, B0 */
    pipe_spec s = make_spec(PIPE_1F1B, 2, 1, 1);
    CHECK(close_rel(simulate(&s, 1, 2, 0.25, NULL, NULL), 2 * 1 + 2 * 2 + 2 * 0.25, 1e-12));
    /* memory: one unit of stash per micro-batch and chunk in flight */
    for (int sched = PIPE_GPIPE; sched <= PIPE_INTERLEAVED; sched++) {
        pipe_spec t = make_spec(sched, 4, 8, 2);
        cost_pipe_result r;
        if (simulate(&t, 1, 2, 0.1, NULL, &r) < 0) {
            CHECK(0);
            continue;
        }
        for (int st = 0; st < 4; st++)
            CHECKF(r.peak[st] == pipe_max_in_flight(&t, st) && r.in_flight[st] == pipe_max_in_flight(&t, st),
                   "%s stage %d: peak %g, %d in flight, order says %d", pipe_schedule_name(sched), st, r.peak[st], r.in_flight[st],
                   pipe_max_in_flight(&t, st));
        cost_pipe_result_free(&r);
    }
}

/* The uniform model of spec with cores sharing it: every work event's alone
 * time is `alone` of its time.  Simulated into *r (0), or -1. */
static int simulate_sharing(const pipe_spec *s, double tf, double tb, double xfer, int cores, double alone, cost_pipe_result *r)
{
    cost_pipe_model m;
    char err[256];
    if (cost_pipe_model_uniform(&m, s, tf, tb, xfer, 0, 1.0) < 0) return -1;
    m.cores = cores;
    m.stage_devices = 1;
    for (int e = 0; e < m.n_ev; e++)
        if (m.ev[e].kind == COST_PIPE_WORK) m.ev[e].alone = alone * m.ev[e].time;
    int rc = cost_pipe_simulate(&m, r, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    cost_pipe_model_free(&m);
    return rc;
}

/* Devices sharing a machine's cores: work runs at its alone time while
 * fewer devices than cores work (cost/pipeline.h). */
static void test_shared_cores(void)
{
    /* alone a hair faster than busy: the one clock of the shared simulation gives the stage sweep's step, work and
     * task times on every schedule; and with one core nothing ever runs alone */
    for (int sched = PIPE_GPIPE; sched <= PIPE_INTERLEAVED; sched++)
        for (int p = 2; p <= 4; p += 2) {
            int v = sched == PIPE_INTERLEAVED ? 2 : 1;
            pipe_spec s = make_spec(sched, p, 8, v);
            cost_pipe_result a, b, c;
            if (simulate(&s, 1.0 / v, 2.0 / v, 0.1, NULL, &a) < 0 || simulate_sharing(&s, 1.0 / v, 2.0 / v, 0.1, p, 1 - 1e-12, &b) < 0 ||
                simulate_sharing(&s, 1.0 / v, 2.0 / v, 0.1, 1, 0.5, &c) < 0) {
                CHECK(0);
                continue;
            }
            int same = close_rel(a.step, b.step, 1e-9) && close_rel(a.step, c.step, 1e-9);
            for (int st = 0; st < p; st++) {
                same &= close_rel(a.busy[st], b.busy[st], 1e-9) && close_rel(a.busy[st], c.busy[st], 1e-9);
                for (int t = 0; t < pipe_task_count(&s); t++) {
                    size_t k = (size_t)st * pipe_task_count(&s) + t;
                    same &= fabs(a.task_end[k] - b.task_end[k]) < 1e-9 && fabs(a.task_end[k] - c.task_end[k]) < 1e-9 &&
                            fabs(a.task_start[k] - b.task_start[k]) < 1e-9;
                }
            }
            CHECKF(same, "%s p=%d: shared clock step %g / %g, the sweep's %g", pipe_schedule_name(sched), p, b.step, c.step, a.step);
            cost_pipe_result_free(&a);
            cost_pipe_result_free(&b);
            cost_pipe_result_free(&c);
        }
    /* GPipe, 2 stages on 2 cores, 2 micro-batches, forward 1, backward 2, alone twice as fast, no transfer time:
     * stage 0's F0 alone (0-0.5); F1 beside stage 1's F0 (0.5-1.5); stage 1's F1 alone (1.5-2) and B0 alone (2-3);
     * its B1 beside stage 0's B0 (3-5); stage 0's B1 alone (5-6) */
    pipe_spec s = make_spec(PIPE_GPIPE, 2, 2, 1);
    cost_pipe_result r;
    if (simulate_sharing(&s, 1, 2, 0, 2, 0.5, &r) == 0) {
        CHECKF(close_rel(r.step, 6, 1e-12) && close_rel(r.busy[0], 4.5, 1e-12) && close_rel(r.busy[1], 4.5, 1e-12),
               "GPipe 2 x 2 sharing 2 cores: step %g (want 6), work %g and %g (want 4.5)", r.step, r.busy[0], r.busy[1]);
        CHECK(close_rel(r.task_end[0], 0.5, 1e-12) && close_rel(r.task_end[1], 1.5, 1e-12)); /* stage 0: F0, F1 */
        cost_pipe_result_free(&r);
    } else
        CHECK(0);
    /* a receive that no send feeds: a deadlock, reported, on the shared clock too */
    cost_pipe_model m;
    pipe_spec d = make_spec(PIPE_1F1B, 2, 2, 1);
    CHECK(cost_pipe_model_init(&m, &d) == 0);
    int x = cost_pipe_add_xfer(&m, 0, 0);
    CHECK(cost_pipe_add_event(&m, cost_pipe_seg_fwd(&d, 0), COST_PIPE_RECV, x, 0) == 0);
    CHECK(cost_pipe_add_event(&m, cost_pipe_seg_fwd(&d, 1), COST_PIPE_WORK, -1, 1) == 0);
    m.ev[m.n_ev - 1].alone = 0.5;
    m.cores = 2;
    m.stage_devices = 1;
    char err[256] = "";
    CHECK(cost_pipe_simulate(&m, &r, err, sizeof err) == -1 && strstr(err, "deadlock") && strstr(err, "stage 0"));
    cost_pipe_model_free(&m);
}

/* A receive that no send feeds is a deadlock, reported, not a hang. */
static void test_deadlock(void)
{
    pipe_spec s = make_spec(PIPE_1F1B, 2, 2, 1);
    cost_pipe_model m;
    CHECK(cost_pipe_model_init(&m, &s) == 0);
    int x = cost_pipe_add_xfer(&m, 0, 0);
    CHECK(cost_pipe_add_event(&m, cost_pipe_seg_fwd(&s, 0), COST_PIPE_RECV, x, 0) == 0);
    CHECK(cost_pipe_add_event(&m, cost_pipe_seg_fwd(&s, 1), COST_PIPE_WORK, -1, 1) == 0);
    CHECK(cost_pipe_add_event(&m, cost_pipe_seg_fwd(&s, 0), COST_PIPE_WORK, -1, 1) == -1); /* out of order */
    cost_pipe_result r;
    char err[256] = "";
    CHECK(cost_pipe_simulate(&m, &r, err, sizeof err) == -1 && strstr(err, "deadlock") && strstr(err, "stage 0"));
    cost_pipe_model_free(&m);
}

static void test_spec_check(void)
{
    shard_mesh mesh;
    char err[256];
    CHECK(shard_mesh_parse("data=2,pipe=4", &mesh, err, sizeof err) == 0);
    pipe_spec s = make_spec(PIPE_1F1B, 4, 8, 1);
    s.axis = 1;
    pipe_split_even(&s, 12);
    CHECK(pipe_spec_check(&s, &mesh, 12, err, sizeof err) == 0);
    CHECK(s.first[1] == 3 && s.first[4] == 12 && pipe_vstage_of_layer(&s, 5) == 1 && pipe_vstage_of_layer(&s, 11) == 3);
    CHECK(pipe_spec_check(&s, &mesh, 13, err, sizeof err) == -1 && strstr(err, "13"));
    pipe_spec bad = s;
    bad.axis = 0; /* size 2, but 4 stages */
    CHECK(pipe_spec_check(&bad, &mesh, 12, err, sizeof err) == -1);
    bad = s;
    bad.schedule = PIPE_INTERLEAVED;
    bad.chunks = 2;
    bad.microbatches = 6;
    CHECK(pipe_spec_check(&bad, &mesh, 12, err, sizeof err) == -1 && strstr(err, "multiple"));
    bad.chunks = 1;
    bad.microbatches = 8;
    CHECK(pipe_spec_check(&bad, &mesh, 12, err, sizeof err) == -1 && strstr(err, "at least 2"));
    bad = s;
    bad.microbatches = 0;
    CHECK(pipe_spec_check(&bad, &mesh, 12, err, sizeof err) == -1);
    pipe_split_even(&s, 5); /* the first stages take the extra layers */
    CHECK(pipe_spec_check(&s, &mesh, 5, err, sizeof err) == 0 && s.first[1] == 2 && s.first[2] == 3 && s.first[4] == 5);
    pipe_split_even(&s, 3); /* fewer layers than stages: a stage without layers is allowed */
    CHECK(pipe_spec_check(&s, &mesh, 3, err, sizeof err) == 0 && s.first[3] == 3 && s.first[4] == 3);
}

/* The body of `model` at m micro-batches, lowered on `mesh` under `sched`
 * and pipelined over axis `axis` with `sched_kind` (v chunks).  Returns the
 * graph (caller frees) and fills *pp; exits when the set-up fails. */
static ir_graph *lower_pipe_split(const char *model, int m, const char *mesh_text, const char *sched, const char *axis, int kind,
                                  int v, const int *counts, pipe_program *pp, shard_state **st_out);
static ir_graph *lower_pipe(const char *model, int m, const char *mesh_text, const char *sched, const char *axis,
                            int kind, int v, pipe_program *pp, shard_state **st_out)
{
    return lower_pipe_split(model, m, mesh_text, sched, axis, kind, v, NULL, pp, st_out);
}

/* lower_pipe with the layer counts per virtual stage given (NULL: even). */
static ir_graph *lower_pipe_split(const char *model, int m, const char *mesh_text, const char *sched, const char *axis, int kind,
                                  int v, const int *counts, pipe_program *pp, shard_state **st_out)
{
    char err[512];
    model_config cfg;
    shard_mesh mesh;
    schedule sc;
    ir_graph *g = NULL;
    if (model_parse(model, &cfg, err, sizeof err) < 0 || !(g = model_build_pipeline_body(&cfg, NULL, m, err, sizeof err)) ||
        shard_mesh_parse(mesh_text, &mesh, err, sizeof err) < 0 || (sched[0] && sched_parse(sched, &mesh, &sc, err, sizeof err) < 0)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    if (sched[0] && sched_rewrite(&sc, &g, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    shard_state *st = shard_state_new(g, &mesh);
    if (sched[0] && sched_apply(&sc, st, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    pipe_spec s = make_spec(kind, (int)mesh.sizes[shard_mesh_axis(&mesh, axis)], m, v);
    s.axis = shard_mesh_axis(&mesh, axis);
    pipe_split_even(&s, g->n_layers);
    for (int i = 0; counts && i < pipe_vstages(&s); i++) s.first[i + 1] = s.first[i] + counts[i];
    int rc = pipe_lower(st, &s, NULL, pp, err, sizeof err);
    CHECKF(rc == 0, "%s over %s: %s", model, mesh_text, err);
    if (rc) exit(1);
    *st_out = st;
    return g;
}

/* Walks each stage's segments in an order its tasks respect (forwards of
 * its virtual stages ascending, backwards descending, the common end, its
 * end) and checks that every buffer an instruction reads is there: an
 * argument the stage holds, or written before on the stage (by an
 * instruction or a RECV).  Returns the number of reads that fail. */
static int unavailable_reads(const pipe_program *pp)
{
    const spmd_program *p = pp->prog;
    const pipe_spec *s = &pp->spec;
    int V = pp->n_vstages, bad = 0;
    uint8_t *have = malloc((size_t)p->n_bufs + 1);
    int *order = malloc(((size_t)2 * V + 2) * sizeof *order);
    for (int r = 0; r < s->stages; r++) {
        int n = 0;
        for (int c = 0; c < s->chunks; c++) order[n++] = c * s->stages + r;
        for (int c = s->chunks - 1; c >= 0; c--) order[n++] = V + c * s->stages + r;
        order[n++] = pipe_seg_common(s);
        order[n++] = 2 * V + r;
        for (int b = 0; b < p->n_bufs; b++) have[b] = p->arg_buf[p->bufs[b].value] == b;
        for (int k = 0; k < n; k++)
            for (int i = pp->seg[order[k]].lo; i < pp->seg[order[k]].hi; i++) {
                const spmd_instr *in = &p->instrs[i];
                for (int j = 0; j < IR_MAX_OPERANDS; j++)
                    if (in->in[j] >= 0 && !have[in->in[j]]) {
                        if (bad++ < 5)
                            fprintf(stderr, "stage %d: instruction %d (%s of '%s', segment %d) reads buffer %d before it is there\n", r, i,
                                    spmd_kind_name((spmd_kind)in->kind), p->g->values[in->value].name, order[k], in->in[j]);
                    }
                if (in->kind != SPMD_SEND) have[in->out] = 1;
            }
    }
    free(have);
    free(order);
    return bad;
}

/* The lowering of a 4-layer GPT body over two or four stages. */
static void test_lower_gpt(void)
{
    static const struct {
        const char *mesh, *sched;
        int kind, v;
        const char *model; /* NULL: the 4-layer GPT */
    } cases[] = {{"pipe=2", "", PIPE_1F1B, 1, NULL}, {"data=2,pipe=2", "dp:data", PIPE_1F1B, 1, NULL},
                 {"pipe=2,model=2", "megatron:model", PIPE_GPIPE, 1, NULL}, {"pipe=2", "", PIPE_INTERLEAVED, 2, NULL},
                 {"data=2,pipe=4", "zero3:data", PIPE_1F1B, 1, NULL}, {"data=2,pipe=2", "zero1:data,remat:full", PIPE_1F1B, 1, NULL},
                 {"pipe=2,data=2", "zero2:data,remat:all", PIPE_INTERLEAVED, 2, NULL},
                 {"data=2,pipe=2", "dp:data", PIPE_GPIPE, 1, NULL},
                 {"pipe=2,model=2", "megatron:model", PIPE_1F1B, 1, "llama:layers=4,hidden=64,heads=4,kv_heads=2,ffn=128,seq=8,batch=8,vocab=64"},
                 {"pipe=4", "", PIPE_GPIPE, 1, "llama:layers=4,hidden=64,heads=4,kv_heads=2,ffn=128,seq=8,batch=8,vocab=64"}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        pipe_program pp;
        shard_state *st;
        const char *model = cases[t].model ? cases[t].model : "gpt:layers=4,hidden=32,heads=4,seq=8,batch=8,vocab=64";
        ir_graph *g = lower_pipe(model, 4, cases[t].mesh, cases[t].sched, "pipe", cases[t].kind, cases[t].v, &pp, &st);
        const spmd_program *p = pp.prog;
        int V = pp.n_vstages, P = pp.spec.stages;
        /* segments tile the program, in order */
        int at = 0, ok = 1;
        for (int k = 0; k < V; k++) ok &= pp.seg[k].lo == at, at = pp.seg[k].hi;
        for (int k = 2 * V - 1; k >= V; k--) ok &= pp.seg[k].lo == at, at = pp.seg[k].hi;
        for (int k = 2 * V + P; k >= 2 * V && k <= 2 * V + P; k = k == 2 * V + P ? 2 * V : k + 1) {
            ok &= pp.seg[k].lo == at, at = pp.seg[k].hi;
            if (k == 2 * V + P - 1) break;
        }
        CHECKF(ok && at == p->n_instrs, "%s: segments do not tile the program (%d of %d)", cases[t].mesh, at, p->n_instrs);
        for (int k = 0; k < pp.n_segs; k++)
            for (int i = pp.seg[k].lo; i < pp.seg[k].hi; i++) ok &= p->segment[i] == k;
        CHECK(ok);
        /* every SEND has its RECV on the peer, the same buffer; per
         * boundary one activation forward and one gradient backward */
        int sends_f = 0, sends_b = 0, matched = 1, never_axis = 1;
        for (int i = 0; i < p->n_instrs; i++) {
            const spmd_instr *in = &p->instrs[i];
            if (in->kind != SPMD_SEND && in->kind != SPMD_RECV) {
                never_axis &= !(in->axes & (1u << pp.spec.axis));
                continue;
            }
            int here = pipe_seg_stage(&pp.spec, p->segment[i]), found = 0;
            for (int j = 0; j < p->n_instrs && !found; j++) {
                const spmd_instr *o = &p->instrs[j];
                found = o->kind == (in->kind == SPMD_SEND ? SPMD_RECV : SPMD_SEND) && o->out == in->out && o->peer == here &&
                        pipe_seg_stage(&pp.spec, p->segment[j]) == in->peer;
            }
            matched &= found && in->bytes == (int64_t)spmd_buffer_bytes(p, in->out);
            if (in->kind == SPMD_SEND && p->segment[i] < V) sends_f++;
            if (in->kind == SPMD_SEND && p->segment[i] >= V && p->segment[i] < 2 * V) sends_b++;
        }
        CHECKF(matched, "%s: a SEND or RECV has no partner", cases[t].mesh);
        CHECKF(never_axis, "%s: a collective uses the pipeline axis", cases[t].mesh);
        CHECKF(sends_f == V - 1 && sends_b == V - 1, "%s: %d forward and %d backward sends, want %d each", cases[t].mesh, sends_f,
               sends_b, V - 1);
        CHECKF(unavailable_reads(&pp) == 0, "%s %s: reads of buffers a stage does not have", cases[t].mesh, cases[t].sched);
        if (cases[t].model) { /* LLaMA: its head is its own param (untied) */
            int head = ir_find(g, "lm_head");
            CHECK(head >= 0 && pp.owner[p->arg_buf[head]] == P - 1 && !pp.holds[p->arg_buf[head]]);
            goto next;
        }
        /* the tied embedding: held by the first and the last stage, owned
         * by the first; its new value goes to the last, the last stage's
         * share of its gradient to the first, once a step (in ends) */
        int wte = ir_find(g, "wte"), wb = p->arg_buf[wte];
        CHECK(pp.owner[wb] == 0 && pp.holds[wb] && pp.holds[(size_t)(P - 1) * p->n_bufs + wb]);
        int end_to_first = 0, end_to_last = 0;
        for (int i = pp.seg[2 * V].lo; i < p->n_instrs; i++) {
            const spmd_instr *in = &p->instrs[i];
            if (in->kind != SPMD_SEND) continue;
            int here = pipe_seg_stage(&pp.spec, p->segment[i]);
            end_to_first += here == P - 1 && in->peer == 0;
            end_to_last += here == 0 && in->peer == P - 1 && !strcmp(g->values[in->value].name, "new/wte");
        }
        CHECKF(end_to_first >= 1 && end_to_last == 1, "%s: wte's gradient share %d, new wte %d", cases[t].mesh, end_to_first, end_to_last);
        /* classes: params are state, the loss is accumulated, so is every
         * gradient the optimizer reads */
        int loss_out = -1;
        for (int o = 0; o < g->n_outputs; o++)
            if (g->outputs[o].value == g->loss) loss_out = p->out_buf[o];
        /* (with data parallelism the loss is all-reduced at the end, on its accumulated sum) */
        CHECKF(pp.buf_class[wb] == PIPE_BUF_STATE && loss_out >= 0 &&
                   pp.buf_class[loss_out] == (strstr(cases[t].sched, "data") ? PIPE_BUF_END : PIPE_BUF_ACC),
               "%s %s: wte class %d, loss class %d", cases[t].mesh, cases[t].sched, pp.buf_class[wb], pp.buf_class[loss_out]);
        int grads_acc = 1, n_grads = 0;
        for (int b = 0; b < p->n_bufs; b++) {
            const ir_value *x = &g->values[p->bufs[b].value];
            if (x->grad_of < 0 || x->producer < 0 || p->arg_buf[p->bufs[b].value] == b) continue;
            if (pp.buf_class[b] == PIPE_BUF_MB) grads_acc = 0;
            n_grads++;
        }
        CHECKF(grads_acc && n_grads > 0, "%s: a gradient is not accumulated", cases[t].mesh);
    next:
        pipe_program_free(&pp);
        shard_state_free(st);
        ir_free(g);
    }
}

/* More stages than layers, and splits leaving the first or last stages
 * without a layer: the embedding still runs on virtual stage 0, the head
 * and the loss on virtual stage V-1 (a stage of the split's own choosing
 * otherwise: with 1/1/0/0 the head followed layer 1 to stage 1). */
static void test_empty_stages(void)
{
    static const struct {
        int kind, v, counts[8];
    } cases[] = {{PIPE_1F1B, 1, {1, 1, 0, 0}}, {PIPE_1F1B, 1, {0, 1, 1, 0}}, {PIPE_GPIPE, 1, {2, 0, 0, 0}},
                 {PIPE_1F1B, 1, {0, 0, 0, 2}}, {PIPE_1F1B, 1, {0, 2, 0, 0}}, {PIPE_INTERLEAVED, 2, {0, 1, 0, 0, 0, 1, 0, 0}}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        pipe_program pp;
        shard_state *st;
        ir_graph *g = lower_pipe_split("gpt:layers=2,hidden=32,heads=4,seq=8,batch=8,vocab=64", 4, "pipe=4", "", "pipe",
                                       cases[t].kind, cases[t].v, cases[t].counts, &pp, &st);
        const spmd_program *p = pp.prog;
        int V = pp.n_vstages, loss_seg = -1, emb_seg = -1, tokens = ir_find(g, "tokens");
        for (int i = 0; i < p->n_instrs; i++) {
            const spmd_instr *in = &p->instrs[i];
            if (in->kind != SPMD_COMPUTE) continue;
            if (in->value == g->loss) loss_seg = p->segment[i];
            const ir_op *o = &g->ops[in->op];
            for (int k = 0; k < o->n_in; k++)
                if (o->in[k] == tokens && p->phase[in->op] == SPMD_FORWARD && emb_seg < 0) emb_seg = p->segment[i];
        }
        CHECKF(loss_seg == V - 1 && emb_seg == 0, "split %d/%d/%d/%d (v %d): the loss in segment %d (want %d), the embedding in %d (want 0)",
               cases[t].counts[0], cases[t].counts[1], cases[t].counts[2], cases[t].counts[3], cases[t].v, loss_seg, V - 1, emb_seg);
        /* the tied embedding's owner is the first stage, the last holds it for the head */
        int wb = p->arg_buf[ir_find(g, "wte")];
        CHECK(pp.owner[wb] == 0 && pp.holds[(size_t)3 * p->n_bufs + wb]);
        CHECKF(unavailable_reads(&pp) == 0, "split %d/%d/%d/%d: reads of buffers a stage does not have", cases[t].counts[0],
               cases[t].counts[1], cases[t].counts[2], cases[t].counts[3]);
        pipe_program_free(&pp);
        shard_state_free(st);
        ir_free(g);
    }
}

/* A pipelined GPT priced: the bubble the schedule leaves on near-equal
 * stages is the closed form's, memory follows the micro-batches in flight,
 * and the stages' work adds up to the unpipelined body's. */
static void test_price_gpt(void)
{
    const char *model = "gpt:layers=8,hidden=1024,heads=8,seq=512,batch=32,vocab=1024";
    char err[512];
    cost_hw hw;
    CHECK(cost_hw_preset("a100", &hw, err, sizeof err) == 0);
    hw.intra.bandwidth = 1e15; /* transfers next to free: the closed forms leave them out */
    hw.intra.latency = 1e-12;
    cost_options o = {.precision = COST_MIXED_BF16};
    double peak[PIPE_N_SCHEDULES][4] = {{0}};
    for (int kind = PIPE_GPIPE; kind <= PIPE_INTERLEAVED; kind++) {
        pipe_program pp;
        shard_state *st;
        int m = 8, P = 4;
        ir_graph *g = lower_pipe(model, m, "data=2,pipe=4", "dp:data", "pipe", kind, 2, &pp, &st);
        cost_estimate e, flat;
        cost_pipe_estimate pe;
        cost_ws *ws = cost_ws_new(g);
        int rc = cost_estimate_plan(ws, &pp, &hw, &o, &e, &pe, err, sizeof err);
        CHECKF(rc == 0, "%s: %s", pipe_schedule_name(kind), err);
        if (rc) {
            cost_ws_free(ws);
            continue;
        }
        /* the adds of each micro-batch's gradients (and loss) into their accumulators */
        double acc = 0;
        const double *bytes = cost_ws_buffer_bytes(ws);
        for (int i = 0; i < pp.seg[pp.n_vstages].hi; i++) { /* the forwards and backwards (backward 0 ends them) */
            const spmd_instr *in = &pp.prog->instrs[i];
            if (!spmd_kind_is_p2p(in->kind) && pp.prog->segment[i] < 2 * pp.n_vstages && pp.buf_class[in->out] == PIPE_BUF_ACC)
                acc += 3 * bytes[in->out] / hw.mem_bandwidth;
        }
        /* the body unpipelined: the same program's instructions, one micro-batch */
        spmd_program *body = spmd_lower(st);
        CHECK(cost_estimate_program(ws, body, &hw, &o, &flat, err, sizeof err) == 0);
        double work = 0, fb = 0, tf = 0, tb = 0;
        for (int r = 0; r < P; r++) {
            work += pe.stage[r].busy - pe.stage[r].end;
            fb += pe.stage[r].fwd + pe.stage[r].bwd;
            tf = fmax(tf, pe.stage[r].fwd);
            tb = fmax(tb, pe.stage[r].bwd);
            peak[kind][r] = pe.stage[r].peak;
            CHECKF(close_rel(pe.stage[r].idle, e.step_time - pe.stage[r].busy, 1e-12) && pe.stage[r].peak <= e.peak_memory,
                   "%s stage %d", pipe_schedule_name(kind), r);
        }
        /* the tasks' work: m forwards and backwards, and the sends (a send holds its stage; next to free here) */
        CHECKF(work >= m * fb * (1 - 1e-9) && work < 1.02 * m * fb, "%s: tasks' work %g, m x (fwd + bwd) %g", pipe_schedule_name(kind),
               work, m * fb);
        /* the stages' forward and backward passes are the body's forward and
         * backward (within 10%: the body's gradient reductions are in the
         * ends here, and fused groups are cut at stage boundaries) */
        double body_fb = flat.phase_compute[SPMD_FORWARD] + flat.phase_compute[SPMD_BACKWARD];
        CHECKF(fb - acc > 0.9 * body_fb && fb - acc < 1.1 * body_fb, "%s: stages' passes %g s (%g s of accumulation), the body's %g s",
               pipe_schedule_name(kind), fb, acc, body_fb);
        /* the bubble: (p-1)/(m+p-1) of the step (GPipe, 1F1B) or (p-1)/(vm)
         * of the ideal (interleaved), to 10% (stages differ: the embedding,
         * the head) */
        double want = kind == PIPE_INTERLEAVED ? (double)(P - 1) / (2.0 * m) * m * (tf + tb) : (double)(P - 1) / (m + P - 1) * e.step_time;
        double idle = 0, tasks_end = 0; /* the tasks' bubble: up to the last task's end, ends of step left out */
        for (int r = 0; r < P; r++) tasks_end = fmax(tasks_end, pe.task_end[(size_t)r * pe.n_tasks + pe.n_tasks - 1]);
        for (int r = 0; r < P; r++) idle += (tasks_end - (pe.stage[r].busy - pe.stage[r].end)) / P;
        /* interleaved: up to 1.3x, its chunks are less equal (the head is a larger share of one layer's chunk) */
        CHECKF(idle > 0.9 * want && idle < (kind == PIPE_INTERLEAVED ? 1.3 : 1.1) * want, "%s: idle %g s, closed form %g s",
               pipe_schedule_name(kind), idle, want);
        pipe_program_free(&pp);
        spmd_free(body);
        cost_ws_free(ws);
        cost_pipe_estimate_free(&pe);
        shard_state_free(st);
        ir_free(g);
    }
    /* 1F1B holds p - r micro-batches at stage r: its peaks fall along the
     * stages; GPipe holds all m everywhere, more than 1F1B's first stage */
    CHECK(peak[PIPE_1F1B][0] > peak[PIPE_1F1B][1] && peak[PIPE_1F1B][1] > peak[PIPE_1F1B][2] && peak[PIPE_1F1B][2] > peak[PIPE_1F1B][3]);
    CHECK(peak[PIPE_GPIPE][1] > peak[PIPE_1F1B][0]);
}

/* The cache model follows each stage's order (cost_price_spans): priced
 * along the body's own order as one span it gives the estimate's times
 * exactly; without a cache model nothing moves; with one, the last stage's
 * backward reads its stash from cache when it follows its own forward
 * (1F1B) and from memory after every forward (GPipe). */
static void test_cache_order(void)
{
    const char *model = "gpt:layers=4,hidden=128,heads=4,seq=64,batch=32,vocab=256";
    char err[512];
    cost_hw hw;
    CHECK(cost_hw_preset("cpu", &hw, err, sizeof err) == 0);
    hw.fused_elementwise = 1;
    double bwd[2] = {0}, bwd0[2] = {0};
    for (int j = 0; j < 2; j++) {
        pipe_program pp;
        shard_state *st;
        int m = 4, kind = j ? PIPE_1F1B : PIPE_GPIPE;
        ir_graph *g = lower_pipe(model, m, "pipe=2", "", "pipe", kind, 1, &pp, &st);
        cost_ws *ws = cost_ws_new(g);
        cost_estimate e;
        cost_pipe_estimate pe;
        hw.cache_bytes = 0; /* no cache model: the body's prices */
        CHECK(cost_estimate_plan(ws, &pp, &hw, NULL, &e, &pe, err, sizeof err) == 0);
        bwd0[j] = pe.stage[1].bwd;
        double stash = pe.stage[1].stash;
        cost_pipe_estimate_free(&pe);
        const spmd_program *p = pp.prog;
        uint8_t *shared = calloc((size_t)p->n_bufs + 1, 1);
        double *t = calloc((size_t)p->n_instrs + 1, sizeof *t);
        cost_span whole = {0, p->n_instrs, 0, -1};
        CHECK(cost_estimate_program(ws, p, &hw, NULL, &e, err, sizeof err) == 0);
        CHECK(cost_price_spans(ws, p, &hw, NULL, &whole, 1, shared, 1, t) == 1);
        hw.cache_bytes = 2 * 3 * stash; /* each of the 2 devices: 3 micro-batches' stash */
        CHECK(cost_estimate_program(ws, p, &hw, NULL, &e, err, sizeof err) == 0);
        CHECK(cost_price_spans(ws, p, &hw, NULL, &whole, 1, shared, 1, t) == 0);
        int same = 1;
        for (int i = 0; i < p->n_instrs; i++)
            if (!spmd_kind_is_p2p(p->instrs[i].kind)) same &= fabs(t[i] - e.instr_time[i]) <= 1e-12 * fmax(1e-9, e.instr_time[i]);
        CHECKF(same, "%s: the body's order as one span prices as the estimate", pipe_schedule_name(kind));
        CHECK(cost_estimate_plan(ws, &pp, &hw, NULL, &e, &pe, err, sizeof err) == 0);
        bwd[j] = pe.stage[1].bwd;
        cost_pipe_estimate_free(&pe);
        free(shared);
        free(t);
        pipe_program_free(&pp);
        cost_ws_free(ws);
        shard_state_free(st);
        ir_free(g);
    }
    CHECKF(bwd0[0] == bwd0[1], "without a cache model the schedule moves no price (%g, %g)", bwd0[0], bwd0[1]);
    CHECKF(bwd[0] > 1.005 * bwd[1], "the last stage's backward: GPipe %g s, 1F1B %g s", bwd[0], bwd[1]);
}

/* The pipeline: tactic: its text both ways, its errors, its spec. */
static void test_tactic(void)
{
    shard_mesh mesh;
    schedule sc;
    char err[512], buf[SCHED_STR_MAX];
    CHECK(shard_mesh_parse("data=2,pipe=4,model=2", &mesh, err, sizeof err) == 0);
    static const struct {
        const char *in, *out;
    } ok[] = {{"pipeline:pipe", "pipeline:pipe:auto:1f1b:auto"},
              {"dp:data,pipeline:pipe:8", "dp:data,pipeline:pipe:8:1f1b:auto"},
              {"pipeline:pipe:16:gpipe,megatron:model", "pipeline:pipe:16:gpipe:auto,megatron:model"},
              {"pipeline:pipe:8:interleaved-2:3/3/3/3/3/3/3/3", "pipeline:pipe:8:interleaved-2:3/3/3/3/3/3/3/3"},
              {"pipeline:pipe:4:1f1b:7/6/6/5,remat:all,auto", "pipeline:pipe:4:1f1b:7/6/6/5,remat:all,auto"}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int rc = sched_parse(ok[i].in, &mesh, &sc, err, sizeof err);
        CHECKF(rc == 0 && !strcmp(sched_str(&sc, &mesh, buf, sizeof buf), ok[i].out), "%s: %s", ok[i].in, rc ? err : buf);
        schedule again;
        CHECK(sched_parse(buf, &mesh, &again, err, sizeof err) == 0 && !memcmp(&again, &sc, sizeof sc));
    }
    static const struct {
        const char *in, *says;
    } bad[] = {{"pipeline", "write pipeline:AXIS"},
               {"pipeline:nope", "unknown mesh axis"},
               {"pipeline:pipe:0", "1..4096"},
               {"pipeline:pipe:x", "1..4096"},
               {"pipeline:pipe:8:zigzag", "1f1b, gpipe or interleaved-V"},
               {"pipeline:pipe:8:interleaved-1", "2..64"},
               {"pipeline:pipe:8:1f1b:3/3/3", "3 layer counts"},
               {"pipeline:pipe:8:1f1b:3//3", "SPLIT"},
               {"pipeline:pipe,pipeline:data", "two pipeline"},
               {"pipeline:pipe,dp:pipe", "pipeline's axis"},
               {"microbatch:2,pipeline:pipe", "own micro-batches"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = sched_parse(bad[i].in, &mesh, &sc, err, sizeof err);
        CHECKF(rc == -1 && strstr(err, bad[i].says), "%s: %s", bad[i].in, rc ? err : "accepted");
    }
    shard_mesh one;
    CHECK(shard_mesh_parse("data=2,pipe=1", &one, err, sizeof err) == 0);
    CHECK(sched_parse("pipeline:pipe", &one, &sc, err, sizeof err) == -1 && strstr(err, "at least 2 stages"));
    /* the spec: M by default the largest divisor of the batch up to 4p whose micro-batch the other axes (4 devices) divide: 6; the split given or even */
    pipe_spec s;
    CHECK(sched_parse("pipeline:pipe", &mesh, &sc, err, sizeof err) == 0);
    CHECK(sched_pipeline(&sc, &mesh, 24, 12, &s, err, sizeof err) == 1 && s.microbatches == 6 && s.stages == 4 && s.axis == 1 &&
          s.split_auto && s.first[1] == 3);
    CHECK(sched_pipeline(&sc, &mesh, 0, 12, &s, err, sizeof err) == -1 && strstr(err, "give the micro-batches"));
    CHECK(sched_parse("pipeline:pipe:8:interleaved-2:2/1/1/1/1/2/2/2", &mesh, &sc, err, sizeof err) == 0);
    CHECK(sched_pipeline(&sc, &mesh, 32, 12, &s, err, sizeof err) == 1 && !s.split_auto && s.chunks == 2 && s.first[1] == 2 &&
          s.first[2] == 3 && s.first[8] == 12);
    char tt[128];
    CHECK(!strcmp(pipe_tactic_text(&s, &mesh, tt, sizeof tt), "pipeline:pipe:8:interleaved-2:2/1/1/1/1/2/2/2"));
    /* 64 stages: the split (127 characters) is written whole, parses back and gives the same spec;
       a buffer too short for it is refused, not cut */
    {
        shard_mesh m64;
        schedule s64;
        pipe_spec a, b;
        char big[SCHED_STR_MAX], again[SCHED_STR_MAX], small[100];
        CHECK(shard_mesh_parse("pipe=64,data=2", &m64, err, sizeof err) == 0);
        CHECK(sched_parse("pipeline:pipe:64", &m64, &s64, err, sizeof err) == 0 && sched_pipeline(&s64, &m64, 64, 72, &a, err, sizeof err) == 1);
        a.split_auto = 0;
        for (int i = 0; i < 64; i++) a.first[i + 1] = a.first[i] + (i % 8 == 3 ? 2 : 1);
        const char *text = pipe_tactic_text(&a, &m64, big, sizeof big);
        CHECKF(text && strlen(text) == strlen("pipeline:pipe:64:1f1b:") + 127 && !strstr(text, "auto"), "%s", text ? text : "NULL");
        CHECK(sched_parse(big, &m64, &s64, err, sizeof err) == 0 && sched_pipeline(&s64, &m64, 64, 72, &b, err, sizeof err) == 1 &&
              !b.split_auto && !memcmp(a.first, b.first, sizeof a.first));
        CHECK(!strcmp(sched_str(&s64, &m64, again, sizeof again), big));
        CHECK(pipe_tactic_text(&a, &m64, small, sizeof small) == NULL);
    }
    CHECK(sched_pipeline(&sc, &mesh, 32, 13, &s, err, sizeof err) == -1 && strstr(err, "13"));
    CHECK(sched_pipeline(&sc, &mesh, 12, 12, &s, err, sizeof err) == -1 && strstr(err, "do not divide"));
    CHECK(sched_parse("dp:data", &mesh, &sc, err, sizeof err) == 0 && sched_pipeline(&sc, &mesh, 8, 2, &s, err, sizeof err) == 0 &&
          s.axis == -1);
    /* the axis is reserved: no decision may tile it, the search offers nothing on it */
    ir_graph *g = NULL;
    model_config cfg;
    CHECK(model_parse("gpt:layers=4,hidden=32,heads=4,seq=8,batch=8,vocab=64", &cfg, err, sizeof err) == 0);
    g = model_build_pipeline_body(&cfg, NULL, 2, err, sizeof err);
    CHECK(g != NULL);
    shard_state *st = shard_state_new(g, &mesh);
    CHECK(sched_parse("pipeline:pipe:2,dp:data", &mesh, &sc, err, sizeof err) == 0 && sched_apply(&sc, st, err, sizeof err) == 0);
    shard_decision d = {SHARD_TILE, 0, 1, ir_find(g, "tokens")};
    CHECK(shard_apply(st, &d, err, sizeof err) == -1 && strstr(err, "pipeline"));
    d.axis = 2;
    int rc = shard_apply(st, &d, err, sizeof err);
    CHECKF(rc >= 0, "%s", err);
    shard_state_free(st);
    ir_free(g);
    /* a plain step (not a micro-batch's body) is refused: the commands price pipelines on the body */
    g = model_build_step(&cfg, NULL, err, sizeof err);
    st = shard_state_new(g, &mesh);
    CHECK(sched_parse("pipeline:pipe,dp:data", &mesh, &sc, err, sizeof err) == 0 && sched_apply(&sc, st, err, sizeof err) == -1 &&
          strstr(err, "not built for it"));
    shard_state_free(st);
    ir_free(g);
}

/* The schedule simulated with given task times (cost_pipe_simulate_times,
 * bench_pipeline's measured ones): forwards 1 s, backwards 2 s, ends
 * nothing, on a real GPT body's program, give 1F1B's and GPipe's closed
 * form (p-1)/(m+p-1) on every stage and interleaving's (p-1)/(v m) of the
 * ideal; and with no times given (-1), the prediction's own idle shares. */
static void test_simulate_times(void)
{
    char err[512];
    cost_hw hw;
    CHECK(cost_hw_preset("cpu", &hw, err, sizeof err) == 0);
    for (int kind = PIPE_GPIPE; kind <= PIPE_INTERLEAVED; kind++) {
        pipe_program pp;
        shard_state *st;
        int m = 8, P = 4, v = kind == PIPE_INTERLEAVED ? 2 : 1, V = P * v;
        ir_graph *g = lower_pipe("gpt:layers=8,hidden=32,heads=4,seq=8,batch=8,vocab=64", m, "pipe=4", "", "pipe", kind, 2, &pp, &st);
        cost_ws *ws = cost_ws_new(g);
        double t[64], idle[4], idle_p[4];
        for (int k = 0; k < 2 * V + P; k++) t[k] = k < V ? 1 : k < 2 * V ? 2 : 0;
        int rc = cost_pipe_simulate_times(ws, &pp, &hw, NULL, t, idle, err, sizeof err);
        CHECKF(rc == 0, "%s: %s", pipe_schedule_name(kind), err);
        double want = kind == PIPE_INTERLEAVED ? (double)(P - 1) / (v * m) / (1 + (double)(P - 1) / (v * m)) : (double)(P - 1) / (m + P - 1);
        for (int r = 0; r < P && !rc; r++)
            CHECKF(close_rel(idle[r], want, 1e-9), "%s stage %d: idle %.6f, closed form %.6f", pipe_schedule_name(kind), r, idle[r], want);
        cost_estimate e;
        cost_pipe_estimate pe;
        for (int k = 0; k < 2 * V + P; k++) t[k] = -1;
        CHECK(cost_pipe_simulate_times(ws, &pp, &hw, NULL, t, idle_p, err, sizeof err) == 0 &&
              cost_estimate_plan(ws, &pp, &hw, NULL, &e, &pe, err, sizeof err) == 0);
        for (int r = 0; r < P; r++) /* (transfers take no time here: the prediction's are short) */
            CHECKF(fabs(idle_p[r] - pe.stage[r].idle / pe.step) < 0.02, "%s stage %d: %.4f against the prediction's %.4f",
                   pipe_schedule_name(kind), r, idle_p[r], pe.stage[r].idle / pe.step);
        cost_pipe_estimate_free(&pe);
        cost_ws_free(ws);
        pipe_program_free(&pp);
        shard_state_free(st);
        ir_free(g);
    }
}

/* A CPU profile whose threads run faster alone (alone_speedup,
 * alone_bandwidth): a pipelined step's tasks run at those rates while fewer
 * devices than cores work.  GPT on 2 stages, 2 cores, 1F1B: stage 0's first
 * forward (stage 1 waits for it) takes about 1 / 1.25 of its time with both
 * cores busy (what does not scale: call overheads), its second forward and
 * its last backward (beside stage 1's end of step) run beside stage 1 as
 * before, and stage 0 idles less of the step.  With a
 * device per core but 4 cores, a device always has cores to spare, priced
 * so: every forward of a stage takes the same time. */
static void test_price_alone(void)
{
    char err[512];
    cost_hw busy, fast, roomy;
    CHECK(cost_hw_preset("cpu", &busy, err, sizeof err) == 0);
    fast = busy;
    fast.alone_speedup = fast.alone_bandwidth = 1.25;
    roomy = fast;
    roomy.cores = 4;
    pipe_program pp;
    shard_state *st;
    ir_graph *g = lower_pipe("gpt:layers=4,hidden=32,heads=4,seq=8,batch=8,vocab=64", 4, "pipe=2", "", "pipe", PIPE_1F1B, 1, &pp, &st);
    cost_ws *ws = cost_ws_new(g);
    cost_estimate e;
    cost_pipe_estimate pe[3];
    const cost_hw *hw[3] = {&busy, &fast, &roomy};
    int ok = 1;
    for (int k = 0; k < 3; k++) {
        int rc = cost_estimate_plan(ws, &pp, hw[k], NULL, &e, &pe[k], err, sizeof err);
        CHECKF(rc == 0, "%s", err);
        ok &= rc == 0;
    }
    if (ok) {
        int n = pe[0].n_tasks;
        double span[3][3]; /* [profile][stage 0's first forward, its second, its last task (a backward)] */
        for (int k = 0; k < 3; k++)
            for (int j = 0; j < 3; j++) {
                int t = j < 2 ? j : n - 1;
                span[k][j] = pe[k].task_end[t] - pe[k].task_start[t];
            }
        CHECKF(close_rel(span[1][0], span[0][0] / 1.25, 0.02), "alone: first forward %g s; with both cores busy %g s", span[1][0],
               span[0][0]);
        CHECKF(close_rel(span[1][2], span[0][2], 1e-9), "the last backward beside stage 1's end of step: %g s, busy %g s", span[1][2],
               span[0][2]);
        CHECKF(close_rel(span[1][1], span[0][1], 1e-9), "a forward beside stage 1's work: %g s, busy %g s", span[1][1], span[0][1]);
        CHECK(pe[1].stage[0].idle / pe[1].step < pe[0].stage[0].idle / pe[0].step && pe[1].step < pe[0].step);
        CHECKF(close_rel(span[2][0], span[2][1], 1e-9), "4 cores: first forward %g s, second %g s", span[2][0], span[2][1]);
        CHECK(close_rel(span[0][0], span[0][1], 1e-9)); /* the cpu preset: no alone figures */
    }
    for (int k = 0; k < 3 && ok; k++) cost_pipe_estimate_free(&pe[k]);
    cost_ws_free(ws);
    pipe_program_free(&pp);
    shard_state_free(st);
    ir_free(g);
}

/* The cost model's split: a large vocabulary makes the last stage (head and
 * loss) heavy and the first stage's end of step (the embedding's gradient
 * reduction and update, after its last backward) long, so both get fewer
 * layers than the even split's 4, and the step is faster than the even
 * split's. */
static void test_balance(void)
{
    char err[512];
    cost_hw hw;
    CHECK(cost_hw_preset("a100", &hw, err, sizeof err) == 0);
    cost_options o = {.precision = COST_MIXED_BF16};
    pipe_program pp, bal = {0};
    shard_state *st;
    ir_graph *g = lower_pipe("gpt:layers=16,hidden=1024,heads=8,seq=512,batch=32,vocab=65536", 8, "data=2,pipe=4", "dp:data", "pipe",
                             PIPE_1F1B, 1, &pp, &st);
    cost_ws *ws = cost_ws_new(g);
    cost_estimate even, best;
    CHECK(cost_estimate_plan(ws, &pp, &hw, &o, &even, NULL, err, sizeof err) == 0);
    pipe_spec s = pp.spec;
    s.split_auto = 1;
    CHECK(cost_price_plan(ws, st, &s, NULL, &hw, &o, &bal, &best, NULL, err, sizeof err) == 0);
    int last = bal.spec.first[4] - bal.spec.first[3], first = bal.spec.first[1] - bal.spec.first[0];
    CHECKF(!bal.spec.split_auto && bal.spec.first[4] == 16 && last < 4 && first < 4 && best.step_time < even.step_time,
           "split %d/%d/%d/%d: %g s against the even split's %g s", bal.spec.first[1], bal.spec.first[2] - bal.spec.first[1],
           bal.spec.first[3] - bal.spec.first[2], last, best.step_time, even.step_time);
    pipe_program_free(&pp);
    pipe_program_free(&bal);
    shard_state_free(st);
    ir_free(g);
    cost_ws_free(ws);
}

/* The split refined on the simulated schedule: 10 layers on 8 virtual
 * stages (interleaved 2 over 4 stages) tie on the largest virtual stage
 * (every split has one of 2 layers), so the largest stage alone cannot
 * choose; the auto split is no slower than the even split, and faster than
 * the split that only makes the largest virtual stage least
 * (cost_pipe_balance's), which the schedule's fill and drain make slower. */
static void test_balance_schedule(void)
{
    char err[512];
    cost_hw hw;
    CHECK(cost_hw_preset("a100", &hw, err, sizeof err) == 0);
    cost_options o = {.precision = COST_MIXED_BF16};
    pipe_program pp, q = {0}, bal = {0};
    shard_state *st;
    ir_graph *g = lower_pipe("gpt:layers=10,hidden=1024,heads=8,seq=512,batch=32,vocab=65536", 8, "data=2,pipe=4", "dp:data", "pipe",
                             PIPE_INTERLEAVED, 2, &pp, &st);
    cost_ws *ws = cost_ws_new(g);
    cost_estimate even, dp, best;
    CHECK(cost_estimate_plan(ws, &pp, &hw, &o, &even, NULL, err, sizeof err) == 0);
    pipe_spec s = pp.spec, minmax;
    cost_pipe_balance(&pp, even.instr_time, &minmax); /* (no cache model: the prices the simulation runs on) */
    int rc = cost_price_plan(ws, st, &minmax, NULL, &hw, &o, &q, &dp, NULL, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    s.split_auto = 1;
    rc = cost_price_plan(ws, st, &s, NULL, &hw, &o, &bal, &best, NULL, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    int largest = 0, same = !memcmp(bal.spec.first, minmax.first, sizeof minmax.first);
    for (int v = 0; v < 8; v++)
        if (minmax.first[v + 1] - minmax.first[v] > largest) largest = minmax.first[v + 1] - minmax.first[v];
    CHECKF(largest == 2 && !bal.spec.split_auto && bal.spec.first[8] == 10, "largest virtual stage %d layers", largest);
    CHECKF(!same && best.step_time < dp.step_time * (1 - 1e-3) && best.step_time <= even.step_time,
           "auto split %g s, the largest stage's least %g s, even %g s", best.step_time, dp.step_time, even.step_time);
    pipe_program_free(&pp);
    pipe_program_free(&q);
    pipe_program_free(&bal);
    shard_state_free(st);
    ir_free(g);
    cost_ws_free(ws);
}

/* Sets s up on the 4-micro-batch body of a 4-layer GPT pipelined over
 * `pipe` (schedule pipeline:pipe:4) of mesh_text, on the a100 preset with
 * node_devices a node (0: the preset's), mixed bf16.  The mesh must outlive
 * s.  Returns autopart_step_setup's result, err its message. */
static int setup_piped(autopart_step *s, const char *mesh_text, int node_devices, shard_mesh *mesh, cost_hw *hw, char *err,
                       size_t errlen)
{
    model_config cfg;
    schedule sc;
    memset(s, 0, sizeof *s);
    if (model_parse("gpt:layers=4,hidden=256,heads=8,seq=128,batch=32,vocab=1024", &cfg, err, errlen) < 0 ||
        shard_mesh_parse(mesh_text, mesh, err, errlen) < 0 || cost_hw_preset("a100", hw, err, errlen) < 0 ||
        sched_parse("pipeline:pipe:4", mesh, &sc, err, errlen) < 0)
        return -1;
    if (node_devices) hw->node_devices = node_devices;
    ir_graph *g = model_build_pipeline_body(&cfg, NULL, 4, err, errlen);
    if (!g) return -1;
    CHECK(pipe_body_microbatches(g) == 4);
    cost_options o = {.precision = COST_MIXED_BF16};
    return autopart_step_setup(s, g, mesh, &sc, hw, &o, 1, err, errlen);
}

/* The search on a pipelined step: the pricer prices pipelines, the experts
 * leave the pipeline's axis alone, and the search's plan is at least as good
 * as the best of them. */
static void test_search_pipelined(void)
{
    char err[512];
    shard_mesh mesh;
    cost_hw hw;
    autopart_step s;
    int rc = setup_piped(&s, "data=2,pipe=2,model=2", 0, &mesh, &hw, err, sizeof err);
    CHECKF(rc == 0 && (s.pr.pipe.axis >= 0) && s.pr.pipe.axis == 1 && s.pr.pipe.microbatches == 4, "%s", err);
    search_budget b = {.simulations = 60, .seed = 1, .threads = 1};
    rc = rc ? rc : autopart_step_search(&s, &search_mcts, &b, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    if (rc == 0) {
        int best = autopart_best_expert(s.ex, s.n_ex), ok = 1, sends = 0;
        for (int i = 0; i < s.n_ex; i++) ok &= !strstr(s.ex[i].schedule, "pipe"); /* experts use data and model only */
        CHECK(ok && s.n_ex > 0 && best >= 0);
        CHECKF(best < 0 || s.e.step_time <= s.ex[best].e.step_time * (1 + 1e-9), "search %g s, best expert %g s", s.e.step_time,
               best >= 0 ? s.ex[best].e.step_time : 0);
        for (int i = 0; s.pr.p && i < s.pr.p->n_instrs; i++) sends += s.pr.p->instrs[i].kind == SPMD_SEND;
        CHECK(s.pr.pp.prog == s.pr.p && sends > 0 && s.pr.pe.n_stages == 2 && s.e.fits);
        CHECK(!(s.st->reserved_axes & 1) && (s.st->reserved_axes & 2));
    }
    autopart_step_free(&s);
}

/* Megatron-LM's 3D layout among the experts of a pipelined step: on a mesh
 * whose `model` axis stays inside a node (2 devices a node) and whose `pipe`
 * and `data` axes leave it, the expert `dp:data,megatron:model` applies to the
 * body and lowers to tensor parallelism inside the node (its activations'
 * all-reduces over `model`, in the stages' forwards and backwards), the
 * stages across nodes (sends and receives, no collective over `pipe`) and
 * data parallelism around both (the gradients all-reduced over `data` once a
 * step, in the ends). */
static void test_expert_3d(void)
{
    char err[512];
    shard_mesh mesh;
    cost_hw hw;
    autopart_step s;
    int rc = setup_piped(&s, "pipe=2,data=2,model=2", 2, &mesh, &hw, err, sizeof err); /* the last axis (model) inside a node */
    CHECKF(rc == 0 && (s.pr.pipe.axis >= 0), "%s", err);
    enum { PIPE = 1u << 0, DATA = 1u << 1, MODEL = 1u << 2 };
    CHECKF(autopart_pipeline_slow_axes(&hw, &mesh) == (PIPE | DATA), "slow axes %#x", autopart_pipeline_slow_axes(&hw, &mesh));
    autopart_expert *ex = NULL;
    int n = rc ? 0 : autopart_experts(s.g, &mesh, s.prefix, &s.pr, &ex), found = -1;
    for (int i = 0; i < n; i++)
        if (!strcmp(ex[i].schedule, "dp:data,megatron:model") || !strcmp(ex[i].schedule, "dp:data,megatron:model,gather:keep"))
            found = i; /* (the pricer may add its gather policy) */
    CHECKF(found >= 0 && ex[found].ok && ex[found].e.step_time > 0, "the 3D expert: %s", found >= 0 ? ex[found].why : "missing");
    if (found >= 0 && ex[found].ok) {
        pipe_spec spec = s.pr.pipe;
        pipe_split_even(&spec, s.g->n_layers);
        spec.split_auto = 0;
        pipe_program pp;
        rc = pipe_lower(ex[found].st, &spec, NULL, &pp, err, sizeof err);
        CHECKF(rc == 0, "%s", err);
        if (rc == 0) {
            const spmd_program *p = pp.prog;
            int V = pp.n_vstages, tp_in_stages = 0, dp_in_end = 0, dp_in_tasks = 0, over_pipe = 0, sends = 0;
            for (int i = 0; i < p->n_instrs; i++) {
                const spmd_instr *in = &p->instrs[i];
                int task = p->segment[i] < 2 * V;
                if (in->kind == SPMD_SEND) sends++;
                if (in->kind == SPMD_SEND || in->kind == SPMD_RECV) continue;
                over_pipe += (in->axes & PIPE) != 0;
                if (in->kind != SPMD_ALL_REDUCE) continue;
                tp_in_stages += task && in->axes == MODEL;
                dp_in_end += !task && (in->axes & DATA);
                dp_in_tasks += task && (in->axes & DATA);
            }
            CHECKF(tp_in_stages > 0 && dp_in_end > 0 && dp_in_tasks == 0 && over_pipe == 0 && sends > 0,
                   "3D: %d all-reduces over model in the stages, %d over data at the end (%d in tasks), %d collectives over pipe, %d sends",
                   tp_in_stages, dp_in_end, dp_in_tasks, over_pipe, sends);
            pipe_program_free(&pp);
        }
    }
    autopart_experts_free(ex, n);
    autopart_step_free(&s);
}

/* The pipelines the level considers. */
static void test_candidates(void)
{
    shard_mesh mesh;
    char err[256], c[64][64];
    pipe_choice pc[64];
    CHECK(shard_mesh_parse("x=8,data=4,model=2", &mesh, err, sizeof err) == 0);
    int n = pipe_candidates(&mesh, 1u, 256, 48, pc, 64); /* over x only */
    for (int i = 0; i < n; i++) pipe_choice_text(&pc[i], &mesh, c[i], sizeof c[i]);
    /* m = 8..64, and 64, 128, 256 for micro-batches of 4, 2, 1 (no other axis splits the batch) */
    CHECKF(n == 13 && !strcmp(c[0], "pipeline:x:8:1f1b") && !strcmp(c[1], "pipeline:x:8:interleaved-2") &&
               !strcmp(c[6], "pipeline:x:64:1f1b") && !strcmp(c[10], "pipeline:x:256:1f1b") && !strcmp(c[12], "pipeline:x:256:gpipe"),
           "%d: %s %s", n, n ? c[0] : "", n > 12 ? c[12] : "");
    schedule sc;
    for (int i = 0; i < n; i++) CHECKF(sched_parse(c[i], &mesh, &sc, err, sizeof err) == 0, "%s: %s", c[i], err);
    /* Megatron-LM's GPT-3: 16 stages, data parallel 8, batch 1536: micro-batches of 1 a replica, m = 192 */
    shard_mesh big;
    CHECK(shard_mesh_parse("pipe=16,data=8,model=8", &big, err, sizeof err) == 0);
    int nb = pipe_candidates(&big, 3u, 1536, 96, pc, 64), has192 = 0;
    for (int i = 0; i < nb; i++) has192 |= !strcmp(pipe_choice_text(&pc[i], &big, c[i], sizeof c[i]), "pipeline:pipe:192:1f1b");
    CHECK(has192);
    CHECK(pipe_candidates(&mesh, 0, 256, 48, pc, 64) >= 27); /* every axis */
    CHECK(pipe_candidates(&mesh, 0, 256, 4, pc, 64) >= 5 + 9); /* 4 layers: x=8 is too many stages, data=4 too few to interleave */
    CHECK(pipe_candidates(&mesh, 1u, 6, 48, pc, 64) == 2 && !strcmp(pipe_choice_text(&pc[0], &mesh, c[0], sizeof c[0]), "pipeline:x:6:1f1b")); /* 8 does not divide 6 */
}

/* A step builder for the level (what a command's loader does): the body for
 * a schedule with a pipeline, else the plain step; then its recomputation. */
static ir_graph *build_step(void *ctx, const schedule *sc, const char *label, char *err, size_t errlen)
{
    const char *spec = ctx;
    model_config cfg;
    shard_mesh mesh;
    pipe_spec ps;
    (void)label;
    if (model_parse(spec, &cfg, err, errlen) < 0 || shard_mesh_parse("x=4,data=2,model=2", &mesh, err, errlen) < 0 ||
        sched_pipeline(sc, &mesh, model_get(&cfg, "batch"), -1, &ps, err, errlen) < 0)
        return NULL;
    ir_graph *g = ps.axis >= 0 ? model_build_pipeline_body(&cfg, NULL, ps.microbatches, err, errlen) : model_build_step(&cfg, NULL, err, errlen);
    if (g && sched_rewrite(sc, &g, err, errlen) < 0) {
        ir_free(g);
        return NULL;
    }
    return g;
}

/* The pipeline level: candidates over the axes that leave a node, each
 * priced by its experts, the best searched. */
static void test_level(void)
{
    char err[256];
    shard_mesh mesh;
    cost_hw hw;
    CHECK(shard_mesh_parse("x=4,data=2,model=2", &mesh, err, sizeof err) == 0 && cost_hw_preset("a100", &hw, err, sizeof err) == 0);
    hw.node_devices = 2; /* model inside a node, x and data across */
    CHECK(autopart_pipeline_slow_axes(&hw, &mesh) == 3u);
    const char *model = "gpt:layers=8,hidden=256,heads=8,seq=128,batch=32,vocab=1024";
    schedule user;
    CHECK(sched_parse("auto", &mesh, &user, err, sizeof err) == 0);
    autopart_pipeline_level L = {.mesh = &mesh, .user = &user, .build = build_step, .build_ctx = (void *)model, .hw = &hw,
                             .opt = {.precision = COST_MIXED_BF16}, .algo = &search_mcts,
                             .b = {.simulations = 40, .seed = 1, .threads = 1}, .gather_auto = 1, .batch = 32, .n_layers = 8, .keep = 2};
    autopart_pipeline_candidate c[AUTOPART_PIPELINE_MAX];
    autopart_step out[2];
    int nc = 0, no = 0, best = autopart_pipeline_search(&L, c, &nc, out, &no);
    int priced = 0, searched = 0;
    for (int i = 0; i < nc; i++) {
        priced += c[i].ok;
        searched += c[i].searched >= 0;
    }
    CHECKF(nc == 2 * (9 + 9) && priced == nc && searched == 2 && no == 2 && best >= 0, "%d candidates, %d priced, %d searched, best %d", nc,
           priced, searched, best);
    if (best >= 0) {
        const autopart_step *s = &out[best];
        int cand = -1;
        for (int i = 0; i < nc; i++)
            if (c[i].searched == best) cand = i;
        CHECK(s->ok && s->e.fits && (s->pr.pipe.axis >= 0) && autopart_config_piped(&s->config) && strstr(s->tactics, "pipeline:") && cand >= 0);
        CHECKF(cand < 0 || s->e.step_time <= c[cand].e.step_time * (1 + 1e-9), "searched %g s, its best expert %g s", s->e.step_time,
               cand >= 0 ? c[cand].e.step_time : 0);
        for (int i = 0; i < nc; i++) /* the searched ones were the best priced */
            if (c[i].searched < 0 && c[i].ok && cand >= 0) CHECK(!autopart_better(&c[i].e, &c[cand].e) || c[i].e.fits == c[cand].e.fits);
    }
    for (int i = 0; i < no; i++) autopart_step_free(&out[i]);
    /* on two threads the candidates are priced side by side: the same candidates, prices and picks */
    autopart_pipeline_candidate c2[AUTOPART_PIPELINE_MAX];
    int nc2 = 0, same = 0;
    L.b.threads = 2;
    autopart_pipeline_search(&L, c2, &nc2, out, &no);
    for (int i = 0; i < nc && nc2 == nc; i++)
        same += !strcmp(c[i].tactics, c2[i].tactics) && c[i].ok == c2[i].ok && !strcmp(c[i].expert, c2[i].expert) &&
                c[i].e.step_time == c2[i].e.step_time && c[i].e.peak_memory == c2[i].e.peak_memory &&
                c[i].searched == c2[i].searched;
    CHECKF(nc2 == nc && same == nc, "two threads: %d candidates (%d on one), %d the same", nc2, nc, same);
    for (int i = 0; i < no; i++) autopart_step_free(&out[i]);
}

int main(void)
{
    test_orders();
    test_closed_forms();
    test_deadlock();
    test_shared_cores();
    test_spec_check();
    test_tactic();
    test_lower_gpt();
    test_empty_stages();
    test_price_gpt();
    test_cache_order();
    test_simulate_times();
    test_price_alone();
    test_balance();
    test_balance_schedule();
    test_search_pipelined();
    test_expert_3d();
    test_candidates();
    test_level();
    return test_done();
}
