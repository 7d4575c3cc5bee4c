/* test_pipe_run.c - pipelined programs run on simulated devices
 * (exec_program_new, exec/spmd_pipe.c), checked against the single-device
 * reference of the unrolled step (the same model and micro-batches).
 *
 * For GPT and LLaMA bodies on 2, 4 and 8 devices, under GPipe, 1F1B and
 * interleaved 1F1B, alone and with data parallelism, Megatron tensor
 * parallelism or ZeRO-3 inside the stages: two steps of Adam (and one of SGD,
 * where nothing is excluded from the comparison) must match the reference
 * within the runtime's tolerance, every updated param and state (the tied
 * embedding, updated on the first stage and sent back to the last,
 * included).  Then what the run measures: each device ran each of its
 * tasks once, in its schedule's order (start times increase, every task has
 * an end after its start); a stage's arena under 1F1B is no larger than under
 * GPipe (fewer micro-batches in flight) and, on the stages that do not hold
 * the whole model, grows with the micro-batches GPipe has in flight; idle
 * time is non-negative and the first stage under GPipe waits (its
 * backwards wait for the last stage).  No test depends on a timing's size.
 */
#include "analysis/pipeline.h"
#include "cost/pipeline.h"
#include "exec/runtime.h"
#include "session/session.h"
#include "tests/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct pcase {
    const char *model;
    int m;
    const char *mesh, *sched; /* the other axes' tactics */
    int kind, v;
    int sgd;
} pcase;

typedef struct prun {
    ir_graph *body, *ref_g;
    shard_state *st;
    pipe_program pp;
    exec_spmd *r;
    exec_ref *ref;
    exec_spmd_check c;
} prun;

static void prun_free(prun *x)
{
    exec_spmd_check_free(&x->c);
    exec_ref_free(x->ref);
    exec_spmd_free(x->r);
    pipe_program_free(&x->pp);
    if (x->st) {
        shard_state_free(x->st);
    }
    ir_free(x->body);
    ir_free(x->ref_g);
}

/* Builds, lowers and opens the case on threads; 0, or -1 after a failed check. */
static int prun_open_on(const pcase *t, exec_backend be, prun *x)
{
    char err[640];
    model_config cfg;
    ir_optimizer opt = ir_default_adam();
    if (t->sgd) {
        opt.kind = IR_SGD;
        opt.lr = 0.05;
    }
    memset(x, 0, sizeof *x);
    shard_mesh mesh;
    schedule sc;
    int rc = model_parse(t->model, &cfg, err, sizeof err);
    if (!rc) rc = (x->body = model_build_pipeline_body(&cfg, &opt, t->m, err, sizeof err)) ? 0 : -1;
    if (!rc) rc = (x->ref_g = model_build_microbatched_step(&cfg, &opt, t->m, err, sizeof err)) ? 0 : -1;
    if (!rc) rc = shard_mesh_parse(t->mesh, &mesh, err, sizeof err);
    if (!rc && t->sched[0]) rc = sched_parse(t->sched, &mesh, &sc, err, sizeof err);
    if (!rc) {
        x->st = shard_state_new(x->body, &mesh);
        if (t->sched[0]) rc = sched_apply(&sc, x->st, err, sizeof err);
    }
    if (!rc) {
        pipe_spec s = pipe_spec_none();
        s.axis = shard_mesh_axis(&x->st->mesh, "pipe");
        s.stages = (int)x->st->mesh.sizes[s.axis];
        s.schedule = t->kind;
        s.chunks = t->kind == PIPE_INTERLEAVED ? t->v : 1;
        s.microbatches = t->m;
        pipe_split_even(&s, x->body->n_layers);
        rc = pipe_lower(x->st, &s, NULL, &x->pp, err, sizeof err);
    }
    if (!rc) rc = (x->r = exec_program_new(&x->pp, be, 0, err, sizeof err)) ? 0 : -1;
    if (!rc && exec_spmd_is_root(x->r)) rc = (x->ref = exec_ref_new(x->ref_g, 0, err, sizeof err)) ? 0 : -1;
    if (!rc) rc = exec_spmd_check_init(&x->c, x->ref_g, err, sizeof err);
    CHECKF(rc == 0, "%s m=%d over %s (%s, %s): %s", t->model, t->m, t->mesh, t->sched, pipe_schedule_name(t->kind), err);
    return rc;
}

static int prun_open(const pcase *t, prun *x) { return prun_open_on(t, EXEC_THREADS, x); }

/* Runs `steps` checked steps; returns 0 when every one ran. */
static int prun_steps(prun *x, int steps, const char *what)
{
    char err[640];
    exec_spmd_init_args(x->r, 7);
    if (x->ref) exec_ref_init_args(x->ref, 7);
    for (int s = 0; s < steps; s++) {
        int rc = x->ref ? exec_ref_run(x->ref, err, sizeof err) : 0;
        if (!rc) rc = exec_spmd_step(x->r, err, sizeof err);
        if (!rc) rc = exec_spmd_compare(x->r, x->ref, &x->c, err, sizeof err);
        CHECKF(rc == 0, "%s, step %d: %s", what, s + 1, err);
        if (rc) return -1;
        exec_spmd_apply_updates(x->r);
        exec_spmd_sync_reference(x->r, x->ref);
    }
    return 0;
}

/* ---- the check against the reference ------------------------------------ */

/* Runs t for `steps` checked steps on backend be and checks the result (on
 * the root).  Returns the last step's outputs digest there, else 0. */
static uint64_t check_case_on(const pcase *t, int steps, exec_backend be)
{
    prun x;
    char what[300];
    uint64_t digest = 0;
    snprintf(what, sizeof what, "%s m=%d over %s (%s) %s%s%s", t->model, t->m, t->mesh, t->sched[0] ? t->sched : "-",
             pipe_schedule_name(t->kind), t->sgd ? " sgd" : "", be == EXEC_MPI ? " on MPI" : "");
    if (prun_open_on(t, be, &x) == 0 && prun_steps(&x, steps, what) == 0 && exec_spmd_is_root(x.r)) {
        const exec_spmd_check *c = &x.c;
        if (getenv("VERBOSE"))
            printf("%s: loss %.9g ref %.9g, worst loss %.2e params %.2e states %.2e, %lld of %lld excluded\n", what, c->loss, c->loss_ref,
                   c->worst_loss, c->worst_param, c->worst_state, (long long)c->n_excluded, (long long)(c->n_excluded + c->n_compared));
        CHECKF(exec_spmd_check_ok(c, EXEC_SPMD_TOLERANCE), "%s: loss %.2e params %.2e states %.2e (loss %.7g vs %.7g)", what, c->worst_loss, c->worst_param,
               c->worst_state, c->loss, c->loss_ref);
        CHECKF(c->replica_diff == 0, "%s: replicas differ by %.2e", what, c->replica_diff);
        if (t->sgd) CHECKF(c->n_excluded == 0, "%s: %lld elements excluded under SGD", what, (long long)c->n_excluded);
        if (be == EXEC_THREADS) /* (with MPI the root, on the first stage, does not hold it) */
            CHECKF(isfinite(exec_spmd_loss(x.r)) && exec_spmd_loss(x.r) == c->loss, "%s: the loss the last stage holds %.9g, checked %.9g",
                   what, exec_spmd_loss(x.r), c->loss);
        digest = c->digest;
    }
    prun_free(&x);
    return digest;
}

static void check_case(const pcase *t, int steps) { check_case_on(t, steps, EXEC_THREADS); }

#define GPT "gpt:layers=4,hidden=32,heads=4,seq=8,batch=8,vocab=64"
#define GPT8 "gpt:layers=8,hidden=32,heads=4,seq=8,batch=8,vocab=64"
#define LLAMA "llama:layers=4,hidden=32,heads=4,kv_heads=2,ffn=64,seq=8,batch=8,vocab=64"

static void test_against_reference(void)
{
    const pcase cases[] = {
        {GPT, 4, "pipe=2", "", PIPE_1F1B, 1, 0},
        {GPT, 4, "pipe=2", "", PIPE_GPIPE, 1, 0},
        {GPT, 4, "pipe=2", "", PIPE_INTERLEAVED, 2, 0},
        {GPT, 4, "pipe=4", "", PIPE_1F1B, 1, 0},
        {GPT, 4, "pipe=4", "", PIPE_GPIPE, 1, 1},
        {GPT8, 8, "pipe=4", "", PIPE_INTERLEAVED, 2, 0},
        {GPT, 1, "pipe=2", "", PIPE_1F1B, 1, 0},           /* one micro-batch: no accumulation */
        {GPT, 4, "data=2,pipe=2", "dp:data", PIPE_1F1B, 1, 0},
        {GPT, 4, "pipe=2,model=2", "megatron:model", PIPE_GPIPE, 1, 0},
        {GPT, 4, "pipe=2,model=2", "megatron:model", PIPE_INTERLEAVED, 2, 1},
        {GPT, 4, "data=2,pipe=4", "zero3:data", PIPE_1F1B, 1, 0},
        {GPT, 4, "data=2,pipe=2,model=2", "dp:data,megatron:model", PIPE_1F1B, 1, 0},
        {LLAMA, 4, "pipe=2", "", PIPE_1F1B, 1, 0},
        {LLAMA, 4, "pipe=2", "", PIPE_INTERLEAVED, 2, 0},
        {LLAMA, 4, "pipe=2,model=2", "megatron:model", PIPE_1F1B, 1, 1},
        {LLAMA, 4, "pipe=4,model=2", "megatron:model", PIPE_GPIPE, 1, 0},
        {"gpt:layers=4,hidden=32,heads=4,seq=8,batch=8,vocab=64,dropout=0.1", 4, "pipe=2", "", PIPE_1F1B, 1, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) check_case(&cases[k], 2);
}

/* A wrong number on one stage is caught: a param the last stage holds,
 * perturbed after the arguments are filled. */
static void test_check_can_fail(void)
{
    pcase t = {GPT, 4, "pipe=2", "", PIPE_1F1B, 1, 1};
    prun x;
    char err[640];
    if (prun_open(&t, &x) == 0) {
        exec_spmd_init_args(x.r, 7);
        exec_ref_init_args(x.ref, 7);
        int v = ir_find(x.body, "ln_f.g"), b = v >= 0 ? x.pp.prog->arg_buf[v] : -1, dev = 1; /* stage 1 of pipe=2 */
        CHECK(b >= 0 && x.pp.owner[b] == 1);
        float *w = b >= 0 ? exec_spmd_data(x.r, dev, b) : NULL;
        CHECK(w != NULL);
        if (w) w[3] += 0.5f;
        int rc = exec_ref_run(x.ref, err, sizeof err);
        if (!rc) rc = exec_spmd_step(x.r, err, sizeof err);
        if (!rc) rc = exec_spmd_compare(x.r, x.ref, &x.c, err, sizeof err);
        CHECKF(rc == 0, "%s", err);
        CHECKF(!exec_spmd_check_ok(&x.c, EXEC_SPMD_TOLERANCE), "a perturbed param passed the check (params %.2e, loss %.2e)", x.c.worst_param,
               x.c.worst_loss);
    }
    prun_free(&x);
}

/* What a run measures: task times in order, idle time, each stage's arena
 * by what its schedule keeps in flight. */
static void test_measures(void)
{
    const char *model = "gpt:layers=8,hidden=32,heads=4,seq=32,batch=32,vocab=64";
    size_t bytes[2][4] = {{0}};
    for (int k = 0; k < 2; k++) {
        pcase t = {model, 8, "pipe=4", "", k ? PIPE_GPIPE : PIPE_1F1B, 1, 0};
        prun x;
        if (prun_open(&t, &x) == 0 && prun_steps(&x, 1, model) == 0) {
            const exec_spmd_stats *st = exec_spmd_last_stats(x.r);
            int n_tasks = pipe_task_count(&x.pp.spec), in_order = 1;
            for (int d = 0; d < 4; d++) {
                const double *tt = exec_pipe_task_times(x.r, d);
                for (int i = 0; i < n_tasks; i++)
                    in_order &= tt[2 * i] <= tt[2 * i + 1] && (i == 0 || tt[2 * i] >= tt[2 * i - 1]) && tt[2 * i + 1] <= st->dev[d].span_s;
                CHECKF(st->dev[d].idle_s >= 0 && st->dev[d].idle_s <= st->wall_s && st->dev[d].p2p_wait_s <= st->dev[d].p2p_s,
                       "device %d: idle %g, wall %g", d, st->dev[d].idle_s, st->wall_s);
                CHECK(st->dev[d].accumulate_s > 0 && st->dev[d].kind_bytes[SPMD_SEND] > 0);
                bytes[k][d] = exec_pipe_stage_bytes(x.r, d);
            }
            size_t before[4] = {0}; /* what a caller can know before making the runtime */
            char err[300];
            int brc = exec_program_bytes(&x.pp, before, err, sizeof err);
            CHECKF(brc == 0 && !memcmp(before, bytes[k], sizeof before), "exec_program_bytes: %s", brc ? err : "other sizes");
            CHECKF(in_order, "%s: tasks out of order", pipe_schedule_name(t.kind));
            /* the replay with a core per device: at least the busiest stage's CPU time, at most all of it */
            double cpu_max = 0, cpu_sum = 0;
            for (int d = 0; d < 4; d++) {
                cpu_max = st->dev[d].cpu_s > cpu_max ? st->dev[d].cpu_s : cpu_max;
                cpu_sum += st->dev[d].cpu_s;
                CHECKF(st->dev[d].replay_idle_s >= 0 && st->dev[d].replay_idle_s <= st->replay_s, "device %d: replayed idle %g of %g", d,
                       st->dev[d].replay_idle_s, st->replay_s);
            }
            CHECKF(st->replay_s >= cpu_max && st->replay_s <= cpu_sum * 1.000001, "replayed step %g, CPU: most %g, sum %g", st->replay_s, cpu_max,
                   cpu_sum);
            /* GPipe: the first stage's backwards wait for every other stage's last forward */
            if (t.kind == PIPE_GPIPE) CHECK(st->dev[0].replay_idle_s > 0 && st->dev[0].p2p_wait_s > 0);
            /* every stage sends once per micro-batch and boundary: activations, gradients */
            CHECK(st->dev[0].kind_bytes[SPMD_RECV] == 0 && st->dev[3].kind_bytes[SPMD_SEND] > 0);
        }
        CHECK(exec_pipe_task_times(x.r, 0) != NULL);
        prun_free(&x);
    }
    /* 1F1B holds p - r micro-batches at stage r, GPipe all 8: every stage but the last holds more under GPipe */
    for (int d = 0; d < 4; d++) {
        CHECKF(bytes[0][d] <= bytes[1][d], "stage %d: 1F1B's arena %zu above GPipe's %zu", d, bytes[0][d], bytes[1][d]);
        if (d < 3) CHECKF(bytes[0][d] < bytes[1][d], "stage %d: 1F1B's arena %zu not below GPipe's %zu", d, bytes[0][d], bytes[1][d]);
    }
    CHECKF(bytes[0][0] > bytes[0][2], "1F1B: stage 0 (4 in flight) %zu, stage 2 (2 in flight) %zu", bytes[0][0], bytes[0][2]);
}

/* One run's estimate on profile hw (session_run_set_hw). */
static int estimate_on(session_run *r, const cost_hw *hw, cost_pipe_estimate *pe)
{
    char err[400];
    session_run_set_hw(r, hw);
    int rc = session_run_stages(r, pe, err, sizeof err);
    CHECKF(rc == 0, "estimate on %s: %s", hw ? hw->name : "the default", err);
    return rc;
}

/* `carve run --hw`: the predictions come from the profile given.  def is the
 * run's default estimate (the `cpu` preset).  The `cpu` preset by name gives
 * it again; another profile (a100) another step; the same profile written to
 * a file and read back (session_run_hw on a path) the same estimate to the
 * bit; names that are no profile fail with a message. */
static void check_run_hw(session_run *r, const cost_pipe_estimate *def)
{
    char err[600], path[] = "/tmp/carve-test-hw-XXXXXX";
    cost_hw *cpu = calloc(1, sizeof *cpu), *a100 = calloc(1, sizeof *a100), *back = calloc(1, sizeof *back);
    cost_pipe_estimate pe;
    int fd = mkstemp(path);
    CHECK(cpu && a100 && back && fd >= 0);
    if (!cpu || !a100 || !back || fd < 0) goto out;
    close(fd);
    CHECKF(session_run_hw(NULL, cpu, err, sizeof err) == 0 && !strcmp(cpu->name, "cpu"), "default profile: %s", err);
    CHECKF(session_run_hw("a100", a100, err, sizeof err) == 0, "a100: %s", err);
    if (estimate_on(r, cpu, &pe) == 0) {
        CHECKF(pe.step == def->step && pe.stage[0].idle == def->stage[0].idle && pe.stage[1].peak == def->stage[1].peak,
               "--hw cpu: step %g, the default's %g", pe.step, def->step);
        cost_pipe_estimate_free(&pe);
    }
    double a100_step = -1, a100_idle = -1;
    if (estimate_on(r, a100, &pe) == 0) {
        a100_step = pe.step;
        a100_idle = pe.stage[0].idle;
        CHECKF(pe.step < def->step / 10, "a100: step %g, the cpu preset's %g", pe.step, def->step);
        cost_pipe_estimate_free(&pe);
    }
    CHECKF(cost_hw_save(a100, path, err, sizeof err) == 0 && session_run_hw(path, back, err, sizeof err) == 0, "profile file: %s", err);
    if (estimate_on(r, back, &pe) == 0) {
        CHECKF(pe.step == a100_step && pe.stage[0].idle == a100_idle, "a100 read back from a file: step %g, %g", pe.step, a100_step);
        cost_pipe_estimate_free(&pe);
    }
    CHECK(session_run_hw("no-such-preset", back, err, sizeof err) < 0 && strstr(err, "no-such-preset"));
    CHECK(session_run_hw("/nonexistent/cal.json", back, err, sizeof err) < 0 && strstr(err, "/nonexistent/cal.json"));
    session_run_set_hw(r, NULL);
    unlink(path);
out:
    free(cpu);
    free(a100);
    free(back);
}

/* The checked run a command makes (session/run.c) on a pipelined program:
 * it takes the unrolled reference, checks two steps, prices the pipeline. */
static void test_session_run(void)
{
    pcase t = {GPT, 4, "pipe=2,model=2", "megatron:model", PIPE_1F1B, 1, 0};
    prun x;
    char err[800];
    if (prun_open(&t, &x) == 0) {
        session_world w;
        session_run *r = NULL;
        session_run_memory mem;
        int rc = session_world_init(&w, EXEC_THREADS, err, sizeof err);
        ir_graph *ref = x.ref_g;
        exec_spmd_check_free(&x.c); /* its check reads ref, which the run frees */
        x.ref_g = NULL; /* the run owns it now */
        if (!rc) rc = session_run_open(&r, &w, &x.pp, ref, "gpt (pipelined)", 3, &mem, err, sizeof err);
        if (!rc) rc = session_run_start(r, err, sizeof err);
        for (int64_t step = 1; step <= 2 && !rc; step++) {
            session_step_times tm;
            rc = session_run_step(r, step, &tm, err, sizeof err);
            if (!rc && step < 2) session_run_advance(r);
        }
        CHECKF(rc == 0 && session_run_ok(r), "session run: rc %d, %s", rc, err);
        CHECK(rc != 0 || (session_run_plan(r) == &x.pp && session_run_check_graph(r) == ref && mem.device >= exec_pipe_stage_bytes(session_run_runtime(r), 0)));
        cost_pipe_estimate pe;
        int prc = r ? session_run_stages(r, &pe, err, sizeof err) : -1;
        CHECKF(prc == 0 && pe.n_stages == 2 && pe.step > 0, "pipe estimate: %s", err);
        double peak = r ? session_run_predicted_peak(r) : -1;
        CHECK(prc != 0 || peak == fmax(pe.stage[0].peak, pe.stage[1].peak));
        if (prc == 0 && r) check_run_hw(r, &pe);
        if (prc == 0) cost_pipe_estimate_free(&pe);
        session_run_free(r);
        session_world_end(&w, rc, err, sizeof err);
    }
    prun_free(&x);
}

/* ---- on MPI ranks ------------------------------------------------------- */

/* Every sum over devices has at most 2 terms, so MPI's results equal the
 * threads backend's bit for bit (docs/run.md): the digests must agree.
 * Device order puts the pipeline axis first where there is a second axis,
 * so ranks split by slots between two hosts (tests/e2e_netns.sh) put the
 * stages on different hosts and a stage's tensor parallel pair on one. */
static const pcase mpi_cases[] = {
    {GPT, 4, "pipe=2", "", PIPE_1F1B, 1, 0},
    {GPT, 4, "pipe=4", "", PIPE_GPIPE, 1, 0},
    {GPT, 4, "pipe=2,model=2", "megatron:model", PIPE_INTERLEAVED, 2, 0},
    {LLAMA, 4, "pipe=4,data=2", "dp:data", PIPE_1F1B, 1, 0},
};
#define N_MPI_CASES ((int)(sizeof mpi_cases / sizeof mpi_cases[0]))

/* `test_pipe_run --mpi K`: one rank of MPI case K; the root prints the
 * digest and the closing line (its checks; failures: the most any rank had). */
static int mpi_child(int k)
{
    int rank = 0, size = 1;
    char err[512];
    if (k < 0 || k >= N_MPI_CASES || exec_mpi_init(&rank, &size, err, sizeof err) < 0) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    uint64_t digest = check_case_on(&mpi_cases[k], 2, EXEC_MPI);
    int failed = exec_mpi_agree(test_failed);
    exec_mpi_finalize();
    if (rank == 0) printf("digest %016llx\n%d passed, %d failed\n", (unsigned long long)digest, test_passed, failed);
    return failed != 0;
}

static int mesh_devices(const char *text)
{
    shard_mesh m;
    char err[200];
    return shard_mesh_parse(text, &m, err, sizeof err) < 0 ? 0 : (int)m.n_devices;
}

static void test_mpi(const char *self)
{
    if (!test_have_mpi("the MPI cases")) return;
    static char out[1 << 16];
    for (int k = 0; k < N_MPI_CASES; k++) {
        uint64_t want = check_case_on(&mpi_cases[k], 2, EXEC_THREADS);
        char arg[16], what[200];
        snprintf(arg, sizeof arg, "%d", k);
        snprintf(what, sizeof what, "mpirun case %d (%s over %s)", k, pipe_schedule_name(mpi_cases[k].kind), mpi_cases[k].mesh);
        int rc = test_mpirun(self, mesh_devices(mpi_cases[k].mesh), arg, out, sizeof out);
        unsigned long long got = 0;
        const char *d = strstr(out, "digest ");
        int read = d && sscanf(d, "digest %llx", &got) == 1;
        if (test_count_child(what, rc, out))
            CHECKF(read && got == want, "%s: MPI's digest %016llx, the threads backend's %016llx", what, got, (unsigned long long)want);
    }
}

int main(int argc, char **argv)
{
    if (argc > 2 && !strcmp(argv[1], "--mpi")) return mpi_child(atoi(argv[2]));
    test_against_reference();
    test_check_can_fail();
    test_measures();
    test_session_run();
    test_mpi(argv[0]);
    return test_done();
}
