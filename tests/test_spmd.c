/* test_spmd.c - the SPMD runtime against the single-device reference.
 *
 * Every case builds a training step, applies a schedule (or random legal
 * group actions) on a mesh, lowers it, runs it on simulated devices and
 * compares the loss and every updated param and optimizer state with the
 * reference executor, step by step.
 *
 * The runs go through the checked run carve run uses (session/run.c), with
 * its tolerance, EXEC_SPMD_TOLERANCE (exec/runtime.h says why 1e-4: sums in
 * another order move results by 1e-7 to 2e-5 here; a wrong block, offset or
 * missing partial sum by 1e-2 or more).  Adam-updated elements whose
 * gradient is rounding noise are skipped (runtime.h, EXEC_SPMD_NOISE_FLOOR);
 * the SGD cases have no such exclusion, and there the params must match
 * everywhere.
 */
#include "analysis/groups.h"
#include "analysis/schedule.h"
#include "cost/cost.h"
#include "exec/runtime.h"
#include "ir/pcg32.h"
#include "models/models.h"
#include "session/session.h"
#include "tests/test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL EXEC_SPMD_TOLERANCE

static const char *GPT = "gpt-tiny";
static const char *MLP = "mlp-tiny";
static const char *GNS = "gns-tiny";
static const char *UNET = "unet-tiny";

static int kinds_seen[SPMD_N_KINDS], max_reductions_seen, fused_groups_seen, fused_ops_seen;
static spmd_options lower_opts; /* options schedule_case lowers with */

/* The step of `spec` (SGD or Adam) in `micro` micro-batches. */
static ir_graph *build_micro(const char *spec, int sgd, int micro)
{
    model_config cfg;
    char err[512];
    ir_optimizer opt = ir_default_adam();
    if (sgd) {
        opt.kind = IR_SGD;
        opt.lr = 0.05;
    }
    if (model_parse(spec, &cfg, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    ir_graph *g = model_build_microbatched_step(&cfg, &opt, micro, err, sizeof err);
    if (!g) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    return g;
}

static ir_graph *build(const char *spec, int sgd) { return build_micro(spec, sgd, 1); }

/* Rewrites *g for the schedule's graph tactics (remat) and applies it. */
static shard_state *schedule_state(ir_graph **g, const shard_mesh *mesh, const char *sched)
{
    char err[512];
    schedule sc;
    if (sched_parse(sched, mesh, &sc, err, sizeof err) < 0 || sched_rewrite(&sc, g, err, sizeof err) < 0) {
        fprintf(stderr, "%s: %s\n", sched, err);
        exit(1);
    }
    shard_state *st = shard_state_new(*g, mesh);
    if (sched_apply(&sc, st, err, sizeof err) < 0) {
        fprintf(stderr, "%s: %s\n", sched, err);
        exit(1);
    }
    return st;
}

/* 1 when every argument an output updates holds, bit for bit, that
 * output (after session_run_advance). */
static int updates_hold(exec_spmd *r, const spmd_program *p)
{
    const ir_graph *g = p->g;
    int ok = 1;
    for (int i = 0; i < g->n_outputs; i++) {
        int u = g->outputs[i].updates;
        if (u < 0) continue;
        int64_t n = ir_numel(&g->values[g->outputs[i].value]);
        float *want = malloc((size_t)(n + 1) * 4), *got = malloc((size_t)(n + 1) * 4);
        exec_spmd_assemble(r, p->out_buf[i], want, NULL);
        exec_spmd_assemble(r, p->arg_buf[u], got, NULL);
        ok &= memcmp(got, want, (size_t)n * 4) == 0;
        free(want);
        free(got);
    }
    return ok;
}

/* The check's verdict on a run of g (`what`; sgd: no element may be
 * excluded). */
static void check_result(const exec_spmd_check *c, const ir_graph *g, const char *what, int sgd)
{
    const char *pn = c->worst_param_out >= 0 ? g->values[g->outputs[c->worst_param_out].value].name : "-";
    const char *sn = c->worst_state_out >= 0 ? g->values[g->outputs[c->worst_state_out].value].name : "-";
    CHECKF(exec_spmd_check_ok(c, TOL), "%s: loss %.2e, params %.2e (%s), states %.2e (%s)", what, c->worst_loss,
           c->worst_param, pn, c->worst_state, sn);
    CHECKF(c->replica_diff == 0, "%s: replicas differ by %.3g", what, c->replica_diff);
    if (sgd) CHECKF(c->n_excluded == 0, "%s: %lld elements excluded with SGD", what, (long long)c->n_excluded);
    /* the exclusion must stay a minority of the elements: 1.6% for the GPT,
     * 16% for the tiny MLP, whose ReLU units that are dead for all 8
     * examples of the batch have gradients of exactly zero */
    CHECKF(c->n_excluded * 4 < c->n_compared, "%s: %lld of %lld elements excluded", what, (long long)c->n_excluded,
           (long long)(c->n_excluded + c->n_compared));
    printf("  %-62s loss %.1e  params %.1e  states %.1e  excluded %lld\n", what, c->worst_loss, c->worst_param,
           c->worst_state, (long long)c->n_excluded);
}

/* Runs `steps` steps of p as carve run does (session_run: each step's
 * reference starting from the SPMD run's updated state, seed 7) and checks
 * the result (check_result), or fails the test with the run's message. */
static void run_compare(const spmd_program *p, int steps, const char *what, int sgd)
{
    char err[2048];
    session_world w;
    session_run *r = NULL;
    session_run_memory mem;
    session_world_init(&w, EXEC_THREADS, err, sizeof err);
    pipe_program one = pipe_one_stage(p);
    int rc = session_run_open(&r, &w, &one, NULL, what, 7, &mem, err, sizeof err);
    if (rc == 0) rc = session_run_start(r, err, sizeof err);
    for (int s = 0; s < steps && rc == 0; s++) {
        session_step_times t;
        rc = session_run_step(r, s + 1, &t, err, sizeof err);
        if (rc == 0 && s + 1 < steps) {
            session_run_advance(r);
            CHECKF(updates_hold(session_run_runtime(r), p), "%s: step %d: an argument does not hold its update", what, s + 1);
        }
    }
    CHECKF(rc == 0, "%s: %s", what, err);
    if (rc == 0) {
        check_result(session_run_check(r), p->g, what, sgd);
        fused_groups_seen += session_run_stats(r)->fused_groups;
        fused_ops_seen += session_run_stats(r)->fused_ops;
    }
    for (int i = 0; i < p->n_instrs; i++) {
        kinds_seen[p->instrs[i].kind]++;
        max_reductions_seen += p->instrs[i].reduce_max;
    }
    session_run_free(r);
}

static void schedule_case(const char *model, int sgd, const char *mesh_text, const char *sched, int steps)
{
    char what[256], err[512];
    snprintf(what, sizeof what, "%s %s %s on %s, %d step%s", model, sgd ? "sgd" : "adam", sched, mesh_text, steps,
             steps > 1 ? "s" : "");
    shard_mesh mesh;
    schedule sc;
    if (shard_mesh_parse(mesh_text, &mesh, err, sizeof err) < 0 || sched_parse(sched, &mesh, &sc, err, sizeof err) < 0) {
        CHECKF(0, "%s: %s", what, err);
        return;
    }
    ir_graph *g = build_micro(model, sgd, sched_microbatches(&sc));
    shard_state *st = schedule_state(&g, &mesh, sched);
    spmd_program *p = spmd_lower_ex(st, NULL, &lower_opts);
    if (mesh.n_devices == 1) { /* nothing to communicate on one device */
        int comm = 0;
        for (int i = 0; i < p->n_instrs; i++) comm += p->instrs[i].kind != SPMD_COMPUTE;
        CHECKF(comm == 0, "%s: %d collectives", what, comm);
    }
    run_compare(p, steps, what, sgd);
    spmd_free(p);
    shard_state_free(st);
    ir_free(g);
}

static void test_expert_schedules(void)
{
    static const struct {
        const char *mesh, *sched;
    } cases[] = {
        {"batch=1", "dp:batch"},
        {"batch=2", "dp:batch"},
        {"batch=2", "zero3:batch"},
        {"model=2", "megatron:model"},
        {"batch=4", "dp:batch"},
        {"batch=4", "zero3:batch"},
        {"model=4", "megatron:model"},
        {"batch=2,model=2", "dp:batch,megatron:model"},
        {"batch=2,model=2", "dp:batch,megatron:model,zero3:batch"},
        {"batch=8", "dp:batch"},
        {"batch=8", "zero3:batch"},
        {"model=8", "megatron:model"},
        {"batch=4,model=2", "dp:batch,megatron:model"},
        {"batch=2,model=4", "dp:batch,megatron:model,zero3:batch"},
        {"batch=2,model=2,x=2", "dp:batch,megatron:model,zero3:x"},
        /* ZeRO-1 and ZeRO-2, alone and with dp, megatron and zero3 */
        {"batch=1", "zero1:batch"},
        {"batch=2", "zero1:batch"},
        {"batch=4", "zero2:batch"},
        {"batch=8", "zero1:batch"},
        {"batch=8", "zero2:batch"},
        {"batch=2,model=2", "zero1:batch,megatron:model"},
        {"batch=2,model=4", "zero2:batch,megatron:model"},
        {"batch=2,x=2", "dp:batch,zero2:x"},
        {"batch=2,model=2,x=2", "zero3:batch,megatron:model,zero1:x"},
        {"batch=2,model=2,x=2", "zero3:x,zero2:batch,megatron:model"},
        /* recomputation, alone and with dp, megatron, ZeRO */
        {"batch=1", "remat:all"},
        {"batch=2", "dp:batch,remat:all"},
        {"batch=4", "zero3:batch,remat:0"},
        {"batch=8", "zero2:batch,remat:all"},
        {"batch=2,model=2", "remat:1,dp:batch,megatron:model"},
        {"batch=2,model=4", "remat:all,zero1:batch,megatron:model"},
        /* full recomputation (each layer's whole forward re-run) */
        {"batch=2", "dp:batch,remat:full"},
        {"batch=4", "zero3:batch,remat:full"},
        {"batch=2,model=2", "remat:0:full,dp:batch,megatron:model"},
        /* 2 and 4 micro-batches, alone and with the rest */
        {"batch=1", "microbatch:2"},
        {"batch=2", "dp:batch,microbatch:2"},
        {"batch=2", "zero1:batch,microbatch:4"},
        {"batch=2,model=2", "microbatch:4,dp:batch,megatron:model"},
        {"batch=2,model=2", "microbatch:2,zero3:batch,megatron:model,remat:all"},
        {"batch=4,model=2", "microbatch:2,zero2:batch,megatron:model"},
        {"model=8", "microbatch:4,megatron:model"},
        {"batch=1", "microbatch:4"},
        {"batch=4", "dp:batch,microbatch:2"},
        {"batch=4", "zero1:batch,remat:all"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        schedule_case(GPT, 0, cases[i].mesh, cases[i].sched, 1);
        schedule_case(MLP, (int)(i % 2), cases[i].mesh, cases[i].sched, 1);
    }
    /* SGD on the GPT: no exclusions at all */
    schedule_case(GPT, 1, "batch=2,model=2", "dp:batch,megatron:model,zero3:batch", 1);
    schedule_case(GPT, 1, "model=4", "megatron:model", 1);
    /* several steps carry the updates through the argument buffers */
    schedule_case(GPT, 0, "batch=2,model=2", "dp:batch,megatron:model,zero3:batch", 3);
    schedule_case(GPT, 1, "batch=4,model=2", "dp:batch,megatron:model", 3);
    schedule_case(MLP, 0, "batch=4", "zero3:batch", 3);
    schedule_case(GPT, 0, "batch=4", "zero1:batch", 3);
    schedule_case(GPT, 1, "batch=2,model=2", "dp:batch,megatron:model,zero3:batch,remat:all", 2);
    schedule_case(GPT, 0, "batch=2,model=2", "dp:batch,megatron:model,microbatch:4", 3);
    schedule_case(GPT, 0, "batch=2,model=2", "zero2:batch,megatron:model", 3);
    /* ZeRO-3 keeping the forward's gathered weights for the backward */
    lower_opts.gather_policy = SPMD_GATHER_KEEP;
    schedule_case(GPT, 0, "batch=4", "zero3:batch", 2);
    schedule_case(GPT, 1, "batch=2,model=2", "dp:batch,megatron:model,zero3:batch", 1);
    schedule_case(GPT, 0, "batch=2", "microbatch:4,zero3:batch", 1); /* gathered once for every micro-batch */
    schedule_case(GPT, 0, "batch=8", "zero3:batch,remat:all", 1);
    schedule_case(MLP, 0, "batch=2,model=4", "zero3:batch,megatron:model,microbatch:2,remat:all", 1);
    lower_opts = spmd_default_options();
    /* dropout (Megatron's placement, rate 0.1): the masks are drawn from
     * global coordinates, so every plan computes the reference's numbers */
    static const struct {
        const char *model;
        int sgd;
        const char *mesh, *sched;
        int steps;
    } drop[] = {
        {"gpt-tiny:dropout=0.1", 1, "batch=4", "dp:batch", 2},
        {"gpt-tiny:dropout=0.1", 1, "model=4", "megatron:model", 1},
        {"gpt-tiny:dropout=0.1", 0, "batch=4", "zero3:batch", 1},
        {"gpt-tiny:dropout=0.1", 1, "batch=2,model=2", "dp:batch,megatron:model,zero3:batch", 1},
        {"gpt-tiny:dropout=0.1", 0, "batch=2,model=2", "remat:full,dp:batch,megatron:model", 1},
        {"gpt-tiny:dropout=0.1", 1, "batch=2", "dp:batch,microbatch:2", 1},
        {"vit-tiny:dropout=0.2", 1, "batch=2,model=2", "dp:batch,megatron:model", 1},
        {"t5-tiny:dropout=0.1", 1, "batch=2,model=2", "dp:batch,megatron:model", 1},
    };
    for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++)
        schedule_case(drop[i].model, drop[i].sgd, drop[i].mesh, drop[i].sched, drop[i].steps);
    /* 16 devices on this 2-core machine: 2-D and 4-D meshes */
    schedule_case(GPT, 0, "batch=4,model=4", "dp:batch,megatron:model", 1);
    schedule_case(GPT, 1, "batch=2,model=2,x=2,y=2", "dp:batch,megatron:model,zero3:x,dp:y", 2);
}

/* The GNS (gathers and scatter-adds by index) under data parallelism (nodes
 * and edges tiled), ZeRO-3, edge sharding (the edge index's dim group) and
 * their compositions on 2, 4 and 8 devices, 1-, 2- and 3-axis meshes. */
static void test_gns_schedules(void)
{
    static const struct {
        const char *mesh, *sched;
    } cases[] = {
        {"batch=2", "dp:batch"},
        {"batch=4", "zero3:batch"},
        {"batch=8", "dp:batch"},
        {"batch=2", "zero3:batch"},
        {"batch=2", "group:senders:0:batch"},
        {"batch=8", "group:senders:0:batch"},
        {"batch=2,model=2", "group:senders:0:batch,zero3:model"},
        {"batch=4,model=2", "group:senders:0:batch,dp:model"},
        {"batch=2,model=2,x=2", "group:senders:0:batch,zero3:model,dp:x"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) schedule_case(GNS, (int)(i % 2), cases[i].mesh, cases[i].sched, 1);
    schedule_case(GNS, 0, "batch=4", "group:senders:0:batch", 3);
}

/* The U-Net (convolutions as shifts and GEMMs, pooling, up-sampling, skip
 * connections) under data parallelism, ZeRO-3 and spatial tiling (rows: halo
 * exchanges; rows and columns; with the batch) on 2, 4 and 8 devices. */
static void test_unet_schedules(void)
{
    static const struct {
        const char *mesh, *sched;
    } cases[] = {
        {"batch=2", "dp:batch"},
        {"batch=4", "zero3:batch"},
        {"batch=4", "dp:batch"},
        {"batch=8", "zero3:batch"},
        {"x=2", "group:image:1:x"},
        {"x=4", "group:image:2:x"},
        {"x=8", "group:image:1:x"},
        {"batch=2,x=2", "dp:batch,group:image:1:x"},
        {"x=2,y=4", "group:image:1:x,group:image:2:y"},
        {"batch=2,x=2,y=2", "zero3:batch,group:image:1:x,group:image:2:y"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) schedule_case(UNET, (int)(i % 2), cases[i].mesh, cases[i].sched, 1);
}

/* Random legal decision sets: random group actions (analysis/groups.h) on a
 * random mesh, from a seeded PCG32. */
static void test_random_decisions(void)
{
    static const char *meshes[] = {"a=2,b=2", "a=4,b=2", "a=2,b=4", "a=2,b=2,c=2", "a=8", "a=2,b=2,c=2,d=2"};
    pcg32 rng;
    pcg32_seed(&rng, 2024, 5);
    for (int t = 0; t < 16; t++) {
        const char *model = t >= 12 ? GNS : t % 3 == 2 ? MLP : GPT;
        int sgd = t % 2;
        const char *mesh_text = meshes[pcg32_below(&rng, 6)];
        ir_graph *g = build(model, sgd);
        shard_mesh mesh;
        char err[256], what[512];
        shard_mesh_parse(mesh_text, &mesh, err, sizeof err);
        shard_state *st = shard_state_new(g, &mesh);
        shard_groups *gs = shard_groups_build(g);
        int applied = 0, tries = 4 + (int)pcg32_below(&rng, 8);
        size_t k = (size_t)snprintf(what, sizeof what, "random #%d %s %s on %s:", t, model, sgd ? "sgd" : "adam", mesh_text);
        for (int a = 0; a < tries * 4 && applied < tries; a++) {
            int grp = (int)pcg32_below(&rng, (uint32_t)gs->n), axis = (int)pcg32_below(&rng, (uint32_t)mesh.n_axes);
            if (!shard_group_legal(st, gs, grp, axis)) continue;
            shard_group_apply(st, gs, grp, axis);
            applied++;
            if (k < sizeof what - 40) k += (size_t)snprintf(what + k, sizeof what - k, " %s@%s", gs->groups[grp].name, mesh.names[axis]);
        }
        CHECKF(applied > 0, "%s: no legal action found", what);
        spmd_program *p = spmd_lower(st);
        run_compare(p, 1 + t % 2, what, sgd);
        spmd_free(p);
        shard_groups_free(gs);
        shard_state_free(st);
        ir_free(g);
    }
}

/* Device blocks of every argument are exactly the reference's values; a
 * partial buffer assembles to the sum of its terms. */
static void test_fill_and_assemble(void)
{
    char err[512];
    ir_graph *g = build(GPT, 0);
    shard_mesh mesh;
    shard_mesh_parse("batch=2,model=4", &mesh, err, sizeof err);
    shard_state *st = schedule_state(&g, &mesh, "dp:batch,megatron:model,zero3:batch");
    spmd_program *p = spmd_lower(st);
    exec_ref *ref = exec_ref_new(g, 0, err, sizeof err);
    /* the partial gradients read below are dead after the step: keep every buffer */
    setenv("CARVE_REUSE", "0", 1);
    exec_spmd *r = exec_spmd_new(p, 0, err, sizeof err);
    unsetenv("CARVE_REUSE");
    exec_ref_init_args(ref, 3);
    exec_spmd_init_args(r, 3);
    int bad = 0, n_args = 0;
    for (int v = 0; v < g->n_values; v++) {
        if (p->arg_buf[v] < 0) continue;
        size_t n = (size_t)ir_numel(&g->values[v]) * 4;
        void *tmp = calloc(n ? n : 4, 1);
        double rd = -1;
        exec_spmd_assemble(r, p->arg_buf[v], tmp, &rd);
        if (memcmp(tmp, exec_ref_data(ref, v), n) || rd != 0) {
            bad++;
            fprintf(stderr, "argument %s differs after filling\n", g->values[v].name);
        }
        n_args++;
        free(tmp);
    }
    CHECKF(bad == 0 && n_args > 10, "%d of %d arguments differ", bad, n_args);
    /* every partial-sum buffer of a gradient assembles to the reference gradient */
    int rc_ref = exec_ref_run(ref, err, sizeof err);
    CHECKF(rc_ref == 0, "reference: %s", err);
    int rc_spmd = exec_spmd_step(r, err, sizeof err);
    CHECKF(rc_spmd == 0, "spmd: %s", err);
    int partial = 0;
    double worst = 0;
    for (int b = 0; b < p->n_bufs; b++) {
        int v = p->bufs[b].value;
        if (!p->bufs[b].spec.partial || p->bufs[b].spec.partial_max || g->values[v].grad_of < 0) continue;
        int64_t n = ir_numel(&g->values[v]);
        float *tmp = calloc((size_t)n, 4);
        const float *want = exec_ref_data(ref, v);
        exec_spmd_assemble(r, b, tmp, NULL);
        double diff = 0, mag = 0;
        for (int64_t i = 0; i < n; i++) {
            diff = fmax(diff, fabs((double)tmp[i] - want[i]));
            mag = fmax(mag, fabs((double)want[i]));
        }
        /* a gradient's rounding scale is the largest terms', so relative to
         * the largest gradient magnitude (some gradients are zero exactly) */
        worst = fmax(worst, diff / 1e-3);
        (void)mag;
        partial++;
        free(tmp);
    }
    CHECKF(partial > 0, "no partial gradient buffer in the program");
    CHECKF(worst < TOL, "partial gradients assemble with error %.3g", worst);
    exec_spmd_free(r);
    exec_ref_free(ref);
    spmd_free(p);
    shard_state_free(st);
    ir_free(g);
}

/* A device whose gather meets an id outside the table stops every device:
 * the step returns (no deadlock) with a message naming the op; the runtime
 * then runs again from fixed data. */
static void test_failing_device(const char *mesh_text, const char *sched, int bad_dev)
{
    char err[640];
    ir_graph *g = build(GPT, 0);
    shard_mesh mesh;
    shard_mesh_parse(mesh_text, &mesh, err, sizeof err);
    shard_state *st = schedule_state(&g, &mesh, sched);
    spmd_program *p = spmd_lower(st);
    exec_spmd *r = exec_spmd_new(p, 0, err, sizeof err);
    exec_spmd_init_args(r, 1);
    int tokens = ir_find(g, "tokens");
    int32_t *tok = exec_spmd_data(r, bad_dev, p->arg_buf[tokens]);
    tok[3] = 1000000;
    err[0] = 0;
    int rc = exec_spmd_step(r, err, sizeof err);
    CHECKF(rc < 0, "%s: a bad id on device %d went unnoticed", mesh_text, bad_dev);
    char want[64];
    snprintf(want, sizeof want, "device %d:", bad_dev);
    CHECKF(strstr(err, "gather") && strstr(err, "embed.tok") && strstr(err, want) && strstr(err, "1000000"),
           "%s: message '%s'", mesh_text, err);
    exec_spmd_init_args(r, 1);
    CHECKF(exec_spmd_step(r, err, sizeof err) == 0, "%s: run after a failure: %s", mesh_text, err);
    CHECK(isfinite(exec_spmd_loss(r)));
    exec_spmd_free(r);
    spmd_free(p);
    shard_state_free(st);
    ir_free(g);
}

/* The check sees a wrong element in one device's block, and a replica that
 * differs from the copy it should equal. */
static void test_check_can_fail(void)
{
    char err[512];
    ir_graph *g = build(GPT, 1);
    shard_mesh mesh;
    shard_mesh_parse("batch=2,model=2", &mesh, err, sizeof err);
    shard_state *st = schedule_state(&g, &mesh, "megatron:model");
    spmd_program *p = spmd_lower(st);
    exec_ref *ref = exec_ref_new(g, 0, err, sizeof err);
    exec_spmd *r = exec_spmd_new(p, 0, err, sizeof err);
    exec_ref_init_args(ref, 5);
    exec_spmd_init_args(r, 5);
    int rc_ref = exec_ref_run(ref, err, sizeof err), rc_spmd = exec_spmd_step(r, err, sizeof err);
    CHECKF(rc_ref == 0 && rc_spmd == 0, "%s", err);
    exec_spmd_check c;
    exec_spmd_check_init(&c, g, err, sizeof err);
    int rc_cmp = exec_spmd_compare(r, ref, &c, err, sizeof err);
    CHECKF(rc_cmp == 0 && exec_spmd_check_ok(&c, TOL) && c.replica_diff == 0, "%s", err);
    exec_spmd_check_free(&c);
    /* the output updating wte (vocab-sharded over model, replicated over batch) */
    int out = -1;
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i].updates == ir_find(g, "wte")) out = i;
    CHECK(out >= 0);
    if (out >= 0) {
        float *block = exec_spmd_data(r, 3, p->out_buf[out]); /* batch 1, model 1: a replica */
        block[5] += 0.25f;
        exec_spmd_check_init(&c, g, err, sizeof err);
        exec_spmd_compare(r, ref, &c, err, sizeof err);
        CHECKF(exec_spmd_check_ok(&c, TOL) && c.replica_diff >= 0.2, "replica: diff %.3g", c.replica_diff);
        exec_spmd_check_free(&c);
        block = exec_spmd_data(r, 1, p->out_buf[out]); /* batch 0, model 1: the copy assembled */
        block[5] += 0.25f;
        exec_spmd_check_init(&c, g, err, sizeof err);
        exec_spmd_compare(r, ref, &c, err, sizeof err);
        CHECKF(!exec_spmd_check_ok(&c, TOL) && c.worst_param_out == out && c.worst_param > 0.1,
               "corrupted wte: worst param %.3g at output %d", c.worst_param, c.worst_param_out);
        exec_spmd_check_free(&c);
    }
    exec_spmd_free(r);
    exec_ref_free(ref);
    spmd_free(p);
    shard_state_free(st);
    ir_free(g);
}

/* One step of p from seed 5; every output assembled, concatenated into a
 * new array (caller frees), its length in *n; *launches (when not NULL):
 * the collectives device 0 ran, a bucket counting once. */
static float *step_outputs_ex(const spmd_program *p, int64_t *n, double *launches)
{
    char err[512];
    const ir_graph *g = p->g;
    *n = 0;
    for (int i = 0; i < g->n_outputs; i++) *n += ir_numel(&g->values[g->outputs[i].value]);
    float *all = calloc((size_t)*n + 1, 4);
    exec_spmd *r = exec_spmd_new(p, 0, err, sizeof err);
    if (!r || !all) {
        exec_spmd_free(r);
        return all;
    }
    exec_spmd_init_args(r, 5);
    CHECKF(exec_spmd_step(r, err, sizeof err) == 0, "step: %s", err);
    if (launches) *launches = exec_spmd_last_stats(r)->dev[0].launches;
    for (int i = 0, at = 0; i < g->n_outputs; i++) {
        exec_spmd_assemble(r, p->out_buf[i], all + at, NULL);
        at += (int)ir_numel(&g->values[g->outputs[i].value]);
    }
    exec_spmd_free(r);
    return all;
}

static float *step_outputs(const spmd_program *p, int64_t *n) { return step_outputs_ex(p, n, NULL); }

/* Collectives of p as they run: a gradient bucket counts once, slices not. */
static int program_launches(const spmd_program *p, int *multi)
{
    int n = 0;
    *multi = 0;
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (in->kind == SPMD_COMPUTE || in->kind == SPMD_SLICE) continue;
        if (in->bucket >= 0 && i > 0 && p->instrs[i - 1].bucket == in->bucket) continue;
        n++;
        *multi += in->bucket >= 0 && i + 1 < p->n_instrs && p->instrs[i + 1].bucket == in->bucket;
    }
    return n;
}

/* A gradient bucket runs as one combined collective (one all-reduce over
 * its members' concatenated elements, or its reduce-scatters after one
 * barrier): device 0 runs as many collectives as the program has launches,
 * fewer than with every gradient on its own; the step passes the check
 * against the reference; and it gives the same bits as the per-member path
 * (bucket_bytes 0), since every element is summed in the same order (group
 * rank 0 first).  Caps: DDP's 25 MiB (one bucket for gpt-tiny's gradients)
 * and 8 KiB (many buckets, some below and some above the threads backend's
 * 16 KiB one-barrier threshold, and members cut at chunk boundaries). */
static void test_buckets(void)
{
    const struct {
        const char *model, *mesh, *sched;
        int64_t cap;
    } cases[] = {
        {GPT, "batch=4", "dp:batch", SPMD_DEFAULT_BUCKET_BYTES},
        {GPT, "batch=4", "dp:batch", 8192},
        {GPT, "batch=4", "zero2:batch", SPMD_DEFAULT_BUCKET_BYTES},
        {GPT, "batch=2,model=2", "dp:batch,megatron:model,zero3:batch", 8192},
        {MLP, "batch=2", "dp:batch", SPMD_DEFAULT_BUCKET_BYTES},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char what[160];
        snprintf(what, sizeof what, "buckets of %lld bytes: %s %s on %s", (long long)cases[k].cap, cases[k].model, cases[k].sched,
                 cases[k].mesh);
        ir_graph *g = build(cases[k].model, 0);
        shard_mesh mesh;
        char err[256];
        shard_mesh_parse(cases[k].mesh, &mesh, err, sizeof err);
        shard_state *st = schedule_state(&g, &mesh, cases[k].sched);
        spmd_options on = spmd_default_options(), off = on;
        on.bucket_bytes = cases[k].cap;
        off.bucket_bytes = 0;
        spmd_program *pb = spmd_lower_ex(st, NULL, &on), *pm = spmd_lower_ex(st, NULL, &off);
        int multi_b, multi_m, lb = program_launches(pb, &multi_b), lm = program_launches(pm, &multi_m);
        CHECKF(multi_b > 0 && multi_m == 0 && lb < lm, "%s: %d launches (%d buckets of several) against %d", what, lb, multi_b, lm);
        run_compare(pb, 2, what, 0);
        int64_t nb = 0, nm = 0;
        double run_b = 0, run_m = 0;
        float *ob = step_outputs_ex(pb, &nb, &run_b), *om = step_outputs_ex(pm, &nm, &run_m);
        CHECKF(run_b == lb && run_m == lm, "%s: device 0 ran %.0f and %.0f collectives, the programs have %d and %d", what, run_b,
               run_m, lb, lm);
        CHECKF(ob && om && nb == nm && !memcmp(ob, om, (size_t)nb * 4), "%s: bits differ from the per-member path", what);
        free(ob);
        free(om);
        spmd_free(pb);
        spmd_free(pm);
        shard_state_free(st);
        ir_free(g);
    }
}

/* Buffers share memory by liveness (spmd_mem.c): a device's arena is close
 * to the cost model's peak, far below every buffer at once, and the step
 * gives the same bits as with every buffer in its own memory. */
static void test_liveness(void)
{
    const struct {
        const char *model, *mesh, *sched;
    } cases[] = {
        {GPT, "batch=2,model=2", "dp:batch,megatron:model,zero3:batch"},
        {GPT, "batch=4", "zero3:batch"},
        {GPT, "model=2", "megatron:model"},
        {MLP, "batch=2", "dp:batch"},
        {GNS, "batch=2", "dp:batch"},
    };
    char err[512];
    cost_hw hw;
    CHECK(cost_hw_preset("cpu", &hw, err, sizeof err) == 0);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ir_graph *g = build(cases[k].model, 0);
        shard_mesh mesh;
        shard_mesh_parse(cases[k].mesh, &mesh, err, sizeof err);
        shard_state *st = schedule_state(&g, &mesh, cases[k].sched);
        spmd_program *p = spmd_lower(st);
        cost_options opt = {.precision = COST_FP32};
        cost_estimate e;
        cost_ws *ws = cost_ws_new(g);
        CHECK(cost_estimate_program(ws, p, &hw, &opt, &e, err, sizeof err) == 0);
        cost_ws_free(ws);
        size_t laid = exec_spmd_device_bytes(p);
        int64_t n1, n2;
        float *reused = step_outputs(p, &n1);
        setenv("CARVE_REUSE", "0", 1);
        size_t all = exec_spmd_device_bytes(p);
        float *apart = step_outputs(p, &n2);
        unsetenv("CARVE_REUSE");
        /* each buffer is rounded up to 64 bytes in the arena, not in the estimate */
        double slack = 0.03 * e.peak_memory + 64.0 * p->n_bufs;
        CHECKF(fabs((double)laid - e.peak_memory) <= slack, "%s %s on %s: arena %zu bytes, predicted peak %.0f",
               cases[k].model, cases[k].sched, cases[k].mesh, laid, e.peak_memory);
        CHECKF(laid < all, "%s on %s: arena %zu, every buffer %zu", cases[k].sched, cases[k].mesh, laid, all);
        CHECKF(n1 == n2 && reused && apart && !memcmp(reused, apart, (size_t)n1 * 4), "%s %s on %s: bits differ with reuse",
               cases[k].model, cases[k].sched, cases[k].mesh);
        free(reused);
        free(apart);
        spmd_free(p);
        shard_state_free(st);
        ir_free(g);
    }
}

static void test_memory_and_bad_input(void)
{
    char err[512];
    ir_graph *g = build(GPT, 0);
    shard_mesh mesh;
    shard_mesh_parse("batch=2,model=2", &mesh, err, sizeof err);
    shard_state *st = schedule_state(&g, &mesh, "dp:batch,megatron:model");
    spmd_program *p = spmd_lower(st);
    size_t dev = exec_spmd_device_bytes(p), args = 0;
    for (int v = 0; v < g->n_values; v++)
        if (p->arg_buf[v] >= 0) args += spmd_buffer_bytes(p, p->arg_buf[v]);
    CHECK(exec_spmd_bytes(p) == 4 * dev);
    CHECK(dev >= args && args > 0);
    err[0] = 0;
    exec_spmd *r = exec_spmd_new(p, exec_spmd_bytes(p) - 1, err, sizeof err);
    CHECKF(!r && strstr(err, "bytes"), "limit: '%s'", err);
    exec_spmd_free(r);
    spmd_free(p);
    shard_state_free(st);
    ir_free(g);

}

int main(void)
{
    lower_opts = spmd_default_options();
    test_fill_and_assemble();
    test_check_can_fail();
    test_liveness();
    test_buckets();
    test_memory_and_bad_input();
    test_failing_device("batch=2,model=2", "dp:batch,megatron:model", 1);
    test_failing_device("batch=8", "dp:batch", 5);
    test_failing_device("batch=4,model=4", "dp:batch,megatron:model", 13);
    test_expert_schedules();
    test_gns_schedules();
    test_unet_schedules();
    test_random_decisions();
    printf("instruction kinds run:");
    for (int k = 0; k < SPMD_N_KINDS; k++) printf(" %s %d", spmd_kind_name((spmd_kind)k), kinds_seen[k]);
    printf("\n");
    for (int k = 0; k < SPMD_N_KINDS; k++) /* send and recv: pipelined runs only, not this program's plans */
        if (!spmd_kind_is_p2p(k)) CHECKF(kinds_seen[k] > 0, "no %s instruction was exercised", spmd_kind_name((spmd_kind)k));
    CHECKF(max_reductions_seen > 0, "no max collective was exercised");
    printf("max collectives run: %d\n", max_reductions_seen);
    /* the comparisons above ran fused elementwise groups on the devices */
    CHECKF(fused_groups_seen > 0 && fused_ops_seen > 2 * fused_groups_seen, "fused groups %d, ops %d", fused_groups_seen,
           fused_ops_seen);
    printf("fused elementwise groups run: %d (%d ops)\n", fused_groups_seen, fused_ops_seen);
    return test_done();
}
