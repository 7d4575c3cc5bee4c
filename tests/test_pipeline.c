/* test_pipeline.c - pipeline schedules: the task orders (every task once, a
 * micro-batch's backward after its forward, micro-batches in order per chunk),
 * the micro-batches in flight (1F1B: p - r at stage r; GPipe: m; interleaved:
 * its warm-up plus one), and the simulated step against the closed forms on
 * equal stages: GPipe and 1F1B idle (p-1)/(m+p-1) of the step, interleaved
 * 1F1B (p-1)/(v m) of the ideal time. */
#include "analysis/pipeline.h"
#include "cost/pipeline.h"
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

int main(void)
{
    test_orders();
    test_closed_forms();
    test_deadlock();
    test_spec_check();
    return test_done();
}
