/* test_calib.c - the calibration tool (calib/).
 *
 * The quick mode gives a valid profile with every field the CPU model needs;
 * no time is compared (the machine is shared and noisy), only that the
 * figures exist, are positive and pass cost_hw_check.  Calibration at a
 * model's shapes is tested without timing: the einsums collected from a
 * program against the graph's FLOPs, and the profile written from given
 * times (calib_apply_gemms) against the estimator that reads it. */
#include "analysis/schedule.h"
#include "calib/calib.h"
#include "models/models.h"
#include "tests/test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Relative closeness of sums of products of doubles: exact up to a few
 * roundings, so 1e-9 is far above rounding and far below any real gap. */
static int close_rel(double a, double b, double tol) { return fabs(a - b) <= tol * fmax(fabs(a), fabs(b)) + 1e-300; }

static ir_graph *gpt_tiny(void)
{
    model_config cfg;
    char err[256];
    ir_optimizer opt = ir_default_adam();
    if (model_parse("gpt-tiny:attention=materialized", &cfg, err, sizeof err) < 0) return NULL; /* batched attention einsums */
    return model_build_step(&cfg, &opt, err, sizeof err);
}

/* g lowered on mesh under sched ("" for none). */
static spmd_program *lower(const ir_graph *g, const char *mesh_text, const char *sched)
{
    char err[512];
    shard_mesh mesh;
    schedule sc;
    if (shard_mesh_parse(mesh_text, &mesh, err, sizeof err) < 0 || (*sched && sched_parse(sched, &mesh, &sc, err, sizeof err) < 0)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    shard_state *st = shard_state_new(g, &mesh);
    if (*sched) CHECKF(sched_apply(&sc, st, err, sizeof err) == 0, "%s", err);
    spmd_program *p = spmd_lower(st);
    p->mesh = mesh;
    shard_state_free(st);
    return p;
}

/* A calibrated profile's fused attention (the executor's kernels, measured): its share of the GEMM's rate, and the
 * estimator prices the attention ops of a program at it (not at vector_flops, as before the measurement). */
static void check_attention_priced(const cost_hw *hw)
{
    static const ir_opkind attn[4] = {IR_OP_ATTENTION, IR_OP_ATTENTION_DQ, IR_OP_ATTENTION_DK, IR_OP_ATTENTION_DV};
    char err[256];
    CHECKF(hw->attention_efficiency >= 0.001 && hw->attention_efficiency <= 1, "attention_efficiency %g", hw->attention_efficiency);
    model_config cfg;
    ir_optimizer opt = ir_default_adam();
    CHECKF(model_parse("gpt-tiny", &cfg, err, sizeof err) == 0, "%s", err); /* fused attention */
    ir_graph *g = model_build_step(&cfg, &opt, err, sizeof err);
    CHECKF(g != NULL, "%s", err);
    if (!g) return;
    spmd_program *p = lower(g, "d=1", "");
    double attn_flops = 0, attn_time = 0;
    cost_estimate e;
    cost_options co = {COST_FP32, 0, 0, COST_GRADS_AUTO};
    cost_ws *ws = cost_ws_new(p->g);
    CHECKF(cost_estimate_program(ws, p, hw, &co, &e, err, sizeof err) == 0, "%s", err);
    for (int k = 0; k < 4; k++) {
        attn_time += e.op_time[attn[k]];
        for (int o = 0; o < g->n_ops; o++)
            if (g->ops[o].kind == attn[k]) attn_flops += ir_op_flops(g, o);
    }
    /* at the measured rate, per thread with every core busy, times the cores factor of one device (as every op) */
    double want = attn_flops / (hw->matmul_flops[IR_F32] * hw->attention_efficiency) * e.serialisation;
    CHECKF(attn_flops > 0 && attn_time >= want * (1 - 1e-9) && attn_time <= want * 1.5,
           "attention priced %.4g s, its FLOPs at the measured rate %.4g s", attn_time, want);
    cost_ws_free(ws);
    spmd_free(p);
    ir_free(g);
}

static void test_calibrate_quick(void)
{
    cost_hw hw;
    char err[256];
    int rc = calib_profile(&hw, 1, NULL, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    /* positive, finite figures and a valid profile; no time is compared */
    CHECK(hw.matmul_flops[IR_F32] > 0 && hw.vector_flops > 0 && hw.mem_bandwidth > 0 && hw.intra.bandwidth > 0);
    CHECK(hw.cores >= 1 && hw.mem_capacity > 0 && cost_hw_check(&hw, err, sizeof err) == 0);
    /* the CPU model's figures: every op but the contractions (einsum: the
     * GEMM's rate; the fused attention ops: priced by FLOPs) has a rate */
    int rates = 1;
    for (int k = 0; k < IR_N_OPS; k++) rates &= ir_op_class(k) == IR_CONTRACTION ? hw.op_rate[k] == 0 : hw.op_rate[k] > 0;
    CHECK(rates && hw.alone_speedup >= 1 && hw.alone_bandwidth >= 1 && hw.shared_memory == 1 && hw.fused_elementwise == 1 && hw.gemm_call >= 0 && hw.oversub_latency >= 0 &&
          hw.gemm_bandwidth >= 0);
    check_attention_priced(&hw);
}

/* FLOPs and instructions the collected einsums stand for. */
static void gemm_totals(const calib_gemms *s, double *flops, int *count)
{
    *flops = 0;
    *count = 0;
    for (int i = 0; i < s->n; i++) {
        *flops += s->g[i].count * s->g[i].flops;
        *count += s->g[i].count;
    }
}

/* The einsums of gpt-tiny's program: every einsum instruction counted once,
 * their FLOPs the graph's on one device and half of them per device under
 * dp over 2; attention's batched einsums make one GEMM call per (batch,
 * head) of the local block. */
static void test_collect(const ir_graph *g)
{
    char err[256];
    double graph_flops = 0;
    int graph_einsums = 0;
    for (int i = 0; i < g->n_ops; i++)
        if (g->ops[i].kind == IR_OP_EINSUM) {
            graph_flops += ir_op_flops(g, i);
            graph_einsums++;
        }
    spmd_program *p1 = lower(g, "d=1", ""), *p2 = lower(g, "batch=2", "dp:batch");
    calib_gemms s1, s2;
    CHECKF(calib_collect_gemms(p1, &s1, err, sizeof err) == 0, "%s", err);
    CHECKF(calib_collect_gemms(p2, &s2, err, sizeof err) == 0, "%s", err);
    double f1, f2;
    int n1, n2;
    gemm_totals(&s1, &f1, &n1);
    gemm_totals(&s2, &f2, &n2);
    CHECKF(n1 == graph_einsums && n2 == graph_einsums, "%d and %d einsum instructions, the graph has %d", n1, n2, graph_einsums);
    CHECKF(close_rel(f1, graph_flops, 1e-9), "1 device: %.6g FLOPs collected, the graph has %.6g", f1, graph_flops);
    CHECKF(close_rel(f2, graph_flops / 2, 1e-9), "dp over 2: %.6g FLOPs per device, half the graph's is %.6g", f2, graph_flops / 2);
    CHECK(s1.n > 1 && s1.n < n1); /* repeated layers share shapes */
    /* distinct entries, and the batched ones call once per batch index: gpt-tiny
     * has batch 8 and 8 heads, so a (batch, head)-batched einsum makes 64 calls
     * on one device and 32 on each of two under dp */
    int distinct = 1, batched = 0;
    for (int i = 0; i < s1.n; i++)
        for (int j = 0; j < i; j++)
            distinct &= memcmp(&s1.g[i].spec, &s1.g[j].spec, sizeof s1.g[i].spec) || memcmp(s1.g[i].dims_a, s1.g[j].dims_a, sizeof s1.g[i].dims_a) ||
                        memcmp(s1.g[i].dims_b, s1.g[j].dims_b, sizeof s1.g[i].dims_b);
    for (int i = 0; i < s1.n; i++) batched += s1.g[i].calls == 64;
    int batched2 = 0;
    for (int i = 0; i < s2.n; i++) batched2 += s2.g[i].calls == 32;
    CHECK(distinct);
    CHECKF(batched > 0 && batched2 == batched, "%d einsums with 64 calls on one device, %d with 32 on two", batched, batched2);
    calib_gemms_free(&s1);
    calib_gemms_free(&s2);
    spmd_free(p1);
    spmd_free(p2);
}

/* A profile written from given times is what the estimator reads back: times
 * made from known figures give those figures again, and the estimator's
 * einsum time on the calibrated program is the measured one. */
static void test_apply(const ir_graph *g)
{
    char err[256];
    spmd_program *p = lower(g, "batch=2", "dp:batch");
    calib_gemms s;
    CHECKF(calib_collect_gemms(p, &s, err, sizeof err) == 0, "%s", err);
    const double peak = 50e9, bw = 10e9, call = 2e-6, ovh = 1e-6;
    double busy = 0;
    for (int i = 0; i < s.n; i++) {
        calib_gemm *x = &s.g[i];
        x->t_busy = x->flops / peak + x->bytes / bw + x->calls * call + ovh;
        x->t_alone = x->t_busy / 1.5;
        busy += x->count * x->t_busy;
    }
    cost_hw hw;
    CHECK(cost_hw_preset("cpu", &hw, err, sizeof err) == 0);
    hw.op_overhead = ovh;
    hw.mem_bandwidth = 1e15; /* so the roofline's byte time never wins */
    hw.cores = 2;
    CHECKF(calib_apply_gemms(&hw, &s, call, 1.5, 0.5, err, sizeof err) == 0, "%s", err);
    CHECKF(close_rel(hw.matmul_flops[IR_F32], peak, 1e-6) && close_rel(hw.gemm_bandwidth, bw, 1e-6),
           "fitted %.6g FLOP/s and %.6g B/s from times made with %.6g and %.6g", hw.matmul_flops[IR_F32], hw.gemm_bandwidth, peak, bw);
    CHECK(hw.gemm_call == call && close_rel(hw.alone_speedup, 1.5, 1e-12) && hw.tf32_flops == hw.matmul_flops[IR_F32]);
    /* 2 devices on 2 cores: no serialisation factor, so the einsum time priced
     * is the summed measured one */
    cost_ws *ws = cost_ws_new(p->g);
    cost_options opt = {COST_FP32, 0, 0, COST_GRADS_AUTO};
    cost_estimate e;
    CHECKF(cost_estimate_program(ws, p, &hw, &opt, &e, err, sizeof err) == 0, "%s", err);
    CHECKF(close_rel(e.op_time[IR_OP_EINSUM], busy, 1e-9), "priced %.6g s of einsums, measured %.6g", e.op_time[IR_OP_EINSUM], busy);

    /* times no FLOP/byte split explains (every einsum at one rate plus noise
     * by shape): the fit differs, the summed time still holds */
    for (int i = 0; i < s.n; i++) s.g[i].t_busy *= 1 + 0.2 * (i % 3);
    busy = 0;
    for (int i = 0; i < s.n; i++) busy += s.g[i].count * s.g[i].t_busy;
    CHECKF(calib_apply_gemms(&hw, &s, call, 1.5, 0.5, err, sizeof err) == 0, "%s", err);
    CHECK(cost_estimate_program(ws, p, &hw, &opt, &e, err, sizeof err) == 0);
    CHECKF(close_rel(e.op_time[IR_OP_EINSUM], busy, 1e-9), "priced %.6g s, measured %.6g", e.op_time[IR_OP_EINSUM], busy);

    /* a call overhead measured above the einsums' time is lowered so the
     * FLOPs keep 10% of it; the sum still holds */
    CHECKF(calib_apply_gemms(&hw, &s, 1.0, 1.5, 0.5, err, sizeof err) == 0, "%s", err);
    CHECK(hw.gemm_call < 1.0 && hw.gemm_call > 0 && hw.matmul_flops[IR_F32] > 0);
    CHECK(cost_estimate_program(ws, p, &hw, &opt, &e, err, sizeof err) == 0);
    CHECKF(close_rel(e.op_time[IR_OP_EINSUM], busy, 1e-9), "priced %.6g s, measured %.6g", e.op_time[IR_OP_EINSUM], busy);

    /* alone: the einsums' speed-up (1.5 here) and the other kernels' (1.0),
     * weighted by the einsums' share of the step */
    for (int i = 0; i < s.n; i++) s.g[i].t_alone = s.g[i].t_busy / 1.5;
    double alone[3];
    for (int k = 0; k < 3; k++) {
        CHECK(calib_apply_gemms(&hw, &s, call, 1.0, 0.5 * k, err, sizeof err) == 0);
        alone[k] = hw.alone_speedup;
    }
    CHECKF(close_rel(alone[0], 1.0, 1e-12) && close_rel(alone[1], sqrt(1.5), 1e-12) && close_rel(alone[2], 1.5, 1e-12),
           "alone_speedup %.6g %.6g %.6g with the einsums 0%%, 50%% and 100%% of the step", alone[0], alone[1], alone[2]);

    /* with alone_bandwidth, the einsums' bytes term is sped up by it and
     * alone_speedup keeps what is left for their FLOP term: times alone made
     * with the FLOPs 1.5x and the bytes 2x faster (overheads unchanged) give
     * 1.5 back */
    for (int i = 0; i < s.n; i++) {
        calib_gemm *x = &s.g[i];
        x->t_busy = x->flops / peak + x->bytes / bw + x->calls * call + ovh;
        x->t_alone = x->flops / peak / 1.5 + x->bytes / bw / 2 + x->calls * call + ovh;
    }
    hw.alone_bandwidth = 2;
    CHECK(calib_apply_gemms(&hw, &s, call, 1.0, 1.0, err, sizeof err) == 0);
    CHECKF(close_rel(hw.alone_speedup, 1.5, 1e-9), "alone_speedup %.9g, made with 1.5", hw.alone_speedup);
    hw.alone_bandwidth = 0;

    /* the profile survives its JSON form */
    char *json = cost_hw_to_json(&hw);
    cost_hw back;
    CHECKF(json && cost_hw_from_json(json, "test", &back, err, sizeof err) == 0, "%s", err);
    CHECK(back.matmul_flops[IR_F32] == hw.matmul_flops[IR_F32] && back.gemm_bandwidth == hw.gemm_bandwidth &&
          back.gemm_call == hw.gemm_call && back.alone_speedup == hw.alone_speedup);
    free(json);

    /* refused: a missing time, a program without einsums */
    s.g[0].t_alone = 0;
    CHECK(calib_apply_gemms(&hw, &s, call, 1.5, 0.5, err, sizeof err) < 0 && strstr(err, "no measured time"));
    calib_gemms none = {0};
    CHECK(calib_apply_gemms(&hw, &none, call, 1.5, 0.5, err, sizeof err) < 0 && strstr(err, "no einsum"));
    cost_ws_free(ws);
    calib_gemms_free(&s);
    spmd_free(p);
}

/* Einsum instruction time the estimator gives program p on hw. */
static double einsum_time(const spmd_program *p, const cost_hw *hw)
{
    char err[256];
    cost_ws *ws = cost_ws_new(p->g);
    cost_options opt = {COST_FP32, 0, 0, COST_GRADS_AUTO};
    cost_estimate e;
    double t = -1;
    if (cost_estimate_program(ws, p, hw, &opt, &e, err, sizeof err) == 0) t = e.op_time[IR_OP_EINSUM];
    cost_ws_free(ws);
    return t;
}

/* p lowered on a copy of g's mesh text, its einsums' summed given times:
 * k = 0 alone in cache, 1 alone from memory, 2 busy in cache, 3 busy from
 * memory. */
static double summed(const calib_gemms *s, int k)
{
    double t = 0;
    for (int i = 0; i < s->n; i++) {
        const calib_gemm *x = &s->g[i];
        t += x->count * (k == 0 ? x->t_alone_in : k == 1 ? x->t_alone : k == 2 ? x->t_busy_in : x->t_busy);
    }
    return t;
}

/* The timed shapes of a profile (calib_gemm_table): the shapes of several
 * programs collected together, each program's einsums priced by exactly the
 * times given for them (alone on one device, busy on as many as the cores,
 * busy x n / cores beyond; in cache or from memory as the cache model says),
 * other shapes by the fitted figures, and the table kept by the JSON. */
static void test_table(const ir_graph *g)
{
    char err[256];
    spmd_program *p1 = lower(g, "d=1", ""), *p2 = lower(g, "batch=2", "dp:batch"), *p4 = lower(g, "batch=4", "dp:batch"),
                 *pm = lower(g, "model=2", "megatron:model");
    calib_gemms s, s1, s2, s4;
    CHECKF(calib_collect_gemms(p1, &s, err, sizeof err) == 0, "%s", err);
    CHECK(calib_add_gemms(p2, &s, err, sizeof err) == 0 && calib_add_gemms(p4, &s, err, sizeof err) == 0);
    CHECK(calib_collect_gemms(p1, &s1, err, sizeof err) == 0 && calib_collect_gemms(p2, &s2, err, sizeof err) == 0 &&
          calib_collect_gemms(p4, &s4, err, sizeof err) == 0);
    /* the union: as many instructions as the three programs, no shape twice
     * (dp over 2 and 4 halve and quarter the batch, so few are shared) */
    int n_all = 0, n_each = 0;
    for (int i = 0; i < s.n; i++) n_all += s.g[i].count;
    for (int i = 0; i < s1.n; i++) n_each += s1.g[i].count;
    for (int i = 0; i < s2.n; i++) n_each += s2.g[i].count;
    for (int i = 0; i < s4.n; i++) n_each += s4.g[i].count;
    CHECKF(n_all == n_each && s.n <= s1.n + s2.n + s4.n && s.n > s1.n, "%d instructions in the union, %d in the three; %d shapes",
           n_all, n_each, s.n);
    /* times made up per shape, unrelated to its FLOPs (no fitted rate can
     * give them back), different in each of the four conditions */
    calib_gemms *sets[3] = {&s1, &s2, &s4};
    for (int i = 0; i < s.n; i++) {
        calib_gemm *x = &s.g[i];
        double base = 1e-4 * (1 + i % 5);
        x->t_alone_in = base, x->t_alone = 1.3 * base, x->t_busy_in = 1.2 * base, x->t_busy = 1.7 * base;
        for (int k = 0; k < 3; k++) /* the same times on each program's own entries */
            for (int j = 0; j < sets[k]->n; j++) {
                calib_gemm *y = &sets[k]->g[j];
                if (!memcmp(&y->spec, &x->spec, sizeof y->spec) && !memcmp(y->dims_a, x->dims_a, sizeof y->dims_a) &&
                    !memcmp(y->dims_b, x->dims_b, sizeof y->dims_b) && !memcmp(y->dims_out, x->dims_out, sizeof y->dims_out)) {
                    y->t_alone_in = x->t_alone_in, y->t_alone = x->t_alone, y->t_busy_in = x->t_busy_in, y->t_busy = x->t_busy;
                }
            }
    }
    cost_hw hw;
    CHECK(cost_hw_preset("cpu", &hw, err, sizeof err) == 0);
    hw.cores = 2;
    hw.alone_speedup = 1.25;
    hw.cache_bytes = 0; /* every operand from memory: the out-of-cache times */
    double before = einsum_time(pm, &hw);
    CHECKF(calib_gemm_table(&hw, &s, err, sizeof err) == 0, "%s", err);
    CHECK(hw.n_gemm_times == s.n);
    /* sums of the given times up to rounding: 1e-9 */
    double t1 = einsum_time(p1, &hw), t2 = einsum_time(p2, &hw), t4 = einsum_time(p4, &hw);
    CHECKF(close_rel(t1, summed(&s1, 1), 1e-9), "1 device: priced %.9g s of einsums, alone from memory %.9g", t1, summed(&s1, 1));
    CHECKF(close_rel(t2, summed(&s2, 3), 1e-9), "2 devices: priced %.9g s, busy from memory %.9g", t2, summed(&s2, 3));
    CHECKF(close_rel(t4, 2 * summed(&s4, 3), 1e-9), "4 devices on 2 cores: priced %.9g s, twice busy %.9g", t4, summed(&s4, 3));
    /* megatron's shapes were not timed: the fitted figures price them, as before */
    CHECKF(einsum_time(pm, &hw) == before, "megatron: %.9g s with the table, %.9g without", einsum_time(pm, &hw), before);
    /* a cache as big as everything: only what the step reads first (its
     * arguments) comes from memory, so the time lies between the in-cache
     * and the from-memory sums, below the latter */
    hw.cache_bytes = 1e12;
    double tc = einsum_time(p2, &hw);
    CHECKF(tc >= summed(&s2, 2) * (1 - 1e-9) && tc < summed(&s2, 3), "with a cache: %.9g s, in cache %.9g, from memory %.9g", tc,
           summed(&s2, 2), summed(&s2, 3));
    /* the JSON keeps the table to the bit */
    char *json = cost_hw_to_json(&hw);
    cost_hw back;
    CHECKF(json && cost_hw_from_json(json, "test", &back, err, sizeof err) == 0, "%s", err);
    int same = back.n_gemm_times == hw.n_gemm_times;
    for (int i = 0; same && i < hw.n_gemm_times; i++) {
        const cost_gemm_time *x = &hw.gemm_times[i], *y = &back.gemm_times[i];
        same = !memcmp(x->alone, y->alone, sizeof x->alone) && !memcmp(x->busy, y->busy, sizeof x->busy) &&
               cost_gemm_time_find(&back, &x->spec, x->dims_a, x->dims_b, x->dims_out) == y;
    }
    CHECK(same && einsum_time(p2, &back) == tc);
    /* a bad entry: one line naming it, no crash */
    const char *bad[] = {"\"einsum\": \"mk,kn->mn\", \"a\": [2, 3], \"b\": [4, 5], \"out\": [2, 5], \"alone\": [1, 1], \"busy\": [1, 1]",
                         "\"einsum\": \"mk,kn->mn\", \"a\": [2, 3], \"b\": [3, 5], \"out\": [2, 5], \"alone\": [0, 1], \"busy\": [1, 1]",
                         "\"einsum\": \"mk,kn->mn\", \"a\": [2, 3], \"b\": [3], \"out\": [2, 5], \"alone\": [1, 1], \"busy\": [1, 1]",
                         "\"einsum\": \"mk,kn-\", \"a\": [2, 3], \"b\": [3, 5], \"out\": [2, 5], \"alone\": [1, 1], \"busy\": [1, 1]"};
    const char *why[] = {"letter 'k'", "positive", "array of 2 dims", "gemm_times[0].einsum"};
    for (int k = 0; k < 4 && json; k++) {
        char *doc = malloc(strlen(json) + 512);
        char *cut = strstr(json, "\"gemm_times\"");
        CHECK(doc && cut);
        if (!doc || !cut) break;
        snprintf(doc, strlen(json) + 512, "%.*s\"gemm_times\": [{%s}]}", (int)(cut - json), json, bad[k]);
        CHECKF(cost_hw_from_json(doc, "bad.json", &back, err, sizeof err) < 0 && strstr(err, why[k]) && strstr(err, "bad.json"),
               "case %d: %s", k, err);
        free(doc);
    }
    free(json);
    /* refused: an entry without all four times */
    s.g[1].t_busy_in = 0;
    CHECK(calib_gemm_table(&hw, &s, err, sizeof err) < 0 && strstr(err, "no measured time"));
    calib_gemms_free(&s);
    calib_gemms_free(&s1);
    calib_gemms_free(&s2);
    calib_gemms_free(&s4);
    spmd_free(p1);
    spmd_free(p2);
    spmd_free(p4);
    spmd_free(pm);
}

/* Rounds: each einsum's four times become their medians over the rounds
 * (made-up times: one round slow on every entry, another on one entry
 * only; the median is the undisturbed round's wherever one round is off). */
static void test_median(const ir_graph *g)
{
    spmd_program *p = lower(g, "batch=2", "dp:batch");
    calib_gemms s;
    char err[256];
    CHECKF(calib_collect_gemms(p, &s, err, sizeof err) == 0, "%s", err);
    calib_gemm *r[3];
    for (int k = 0; k < 3; k++) {
        r[k] = malloc((size_t)s.n * sizeof *r[k]);
        memcpy(r[k], s.g, (size_t)s.n * sizeof *r[k]);
        for (int i = 0; i < s.n; i++) {
            double t = 1e-6 * (i + 1), f = k == 1 ? 3.0 : k == 2 && i == 0 ? 0.25 : 1.0;
            r[k][i].t_busy = 2 * t * f;
            r[k][i].t_alone = t * f;
            r[k][i].t_busy_in = 1.5 * t * f;
            r[k][i].t_alone_in = 0.75 * t * f;
        }
    }
    calib_gemms_median(&s, (const calib_gemm *const *)r, 3);
    int ok = 1;
    for (int i = 0; i < s.n; i++) {
        double t = 1e-6 * (i + 1);
        ok &= s.g[i].t_busy == 2 * t && s.g[i].t_alone == t && s.g[i].t_busy_in == 1.5 * t && s.g[i].t_alone_in == 0.75 * t;
    }
    CHECK(ok);
    /* two rounds: the mean of the two */
    calib_gemms_median(&s, (const calib_gemm *const *)r, 2);
    CHECK(close_rel(s.g[1].t_busy, 2 * 2e-6 * 2.0, 1e-12));
    for (int k = 0; k < 3; k++) free(r[k]);
    calib_gemms_free(&s);
    spmd_free(p);
}

/* The quick mode at a program's shapes measures every entry and writes a
 * valid profile (no time compared), over two rounds; a round count out of
 * 1..CALIB_MAX_ROUNDS is refused before anything is measured. */
static void test_model_quick(const ir_graph *g)
{
    char err[256];
    spmd_program *p = lower(g, "batch=2", "dp:batch");
    calib_gemms s;
    cost_hw hw;
    CHECK(calib_profile_model(&hw, 1, 0, p, &s, "gpt-tiny", NULL, err, sizeof err) < 0 && strstr(err, "rounds"));
    CHECK(calib_profile_model(&hw, 1, CALIB_MAX_ROUNDS + 1, p, &s, "gpt-tiny", NULL, err, sizeof err) < 0 && s.n == 0);
    CHECKF(calib_profile_model(&hw, 1, 2, p, &s, "gpt-tiny", NULL, err, sizeof err) == 0, "%s", err);
    CHECK(strstr(hw.source, "medians of 2 rounds") != NULL);
    CHECK(s.n > 1);
    int timed = 1;
    for (int i = 0; i < s.n; i++) timed &= s.g[i].t_busy > 0 && s.g[i].t_alone > 0;
    CHECK(timed && hw.matmul_flops[IR_F32] > 0 && hw.gemm_call >= 0 && hw.alone_speedup >= 1 && strstr(hw.source, "gpt-tiny"));
    CHECK(cost_hw_check(&hw, err, sizeof err) == 0);
    /* every shape of the program is in the profile's table, in and out of cache */
    CHECK(hw.n_gemm_times == s.n);
    for (int i = 0; i < hw.n_gemm_times; i++) timed &= hw.gemm_times[i].alone[0] > 0 && hw.gemm_times[i].busy[0] > 0;
    CHECK(timed);
    calib_gemms_free(&s);
    spmd_free(p);
}

int main(void)
{
    test_calibrate_quick();
    ir_graph *g = gpt_tiny();
    CHECK(g != NULL);
    if (g) {
        test_collect(g);
        test_apply(g);
        test_table(g);
        test_median(g);
        test_model_quick(g);
    }
    ir_free(g);
    return test_done();
}
