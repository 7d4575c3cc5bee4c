/* run.c - a checked run (session.h): a program run on simulated devices and
 * compared, step by step, with the single-device reference executor.
 *
 * Both executors start from the same seeded arguments.  After each step the
 * loss and every updated param and optimizer state are compared
 * (exec_spmd_compare); before the next one the devices apply their updates
 * and the reference starts from the devices' values, so each step is judged
 * from the same state.  The check passes when every error is within
 * EXEC_SPMD_TOLERANCE.
 *
 * With the MPI backend every rank runs this code on its own device; rank 0
 * also holds the reference.  The ranks agree (the largest status wins) at
 * each point where one of them may fail alone: the set-up (each rank's
 * command line, plan and memory), the executors, each step.  A rank that
 * fails says why itself; where the reason is the same on every rank, rank 0
 * alone says it.
 *
 * The program is the plan's (analysis/pipeline.h: stages of segments, one
 * of each without a pipeline), run by exec_program_new: every device walks
 * it, or in a pipeline runs its stage's tasks.  A pipeline's body is checked
 * against the unrolled step of the same micro-batches (the run's reference
 * graph); any other program against its own step.  A run whose step a
 * rewrite made is also checked against the user's plain step (oracle.c,
 * session_run_set_plain).
 */
#include "session/run_impl.h"
#include "session/oracle.h"

#include "cost/pipeline.h"
#include "ir/hash.h"
#include "models/models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int session_world_init(session_world *w, exec_backend b, char *err, size_t errlen)
{
    memset(w, 0, sizeof *w);
    w->backend = b;
    w->size = 1;
    if (b != EXEC_MPI) return 0;
    char e2[512];
    if (exec_mpi_init(&w->rank, &w->size, e2, sizeof e2) < 0) return ir_errf(err, errlen, "run: --backend mpi: %s", e2);
    return 0;
}

/* Every rank's set-up status, agreed: the largest rc.  A rank that did not
 * fail itself says why it stops (only rank 0, to keep it one line). */
static int agree_setup(session_world *w, int rc, char *err, size_t errlen)
{
    if (w->backend != EXEC_MPI) return rc;
    w->agreed = 1;
    int all = exec_mpi_agree(rc);
    if (all && !rc && w->rank == 0) ir_errf(err, errlen, "run: stopping: another rank failed during set-up (its message is above)");
    return all;
}

int session_world_same(session_world *w, const session_setting *s, int n, char *err, size_t errlen)
{
    err[0] = 0;
    if (w->backend != EXEC_MPI) return 0;
    for (int i = 0; i < n; i++)
        if (!exec_mpi_same((uint64_t)s[i].value)) {
            if (w->rank == 0)
                ir_errf(err, errlen, "run: the ranks were started with different %s (give every rank the same command line)",
                        s[i].name);
            return SESSION_BAD_INPUT;
        }
    return 0;
}

int session_world_end(session_world *w, int rc, char *err, size_t errlen)
{
    err[0] = 0;
    if (w->backend != EXEC_MPI) return rc;
    if (!w->agreed) rc = agree_setup(w, rc, err, errlen); /* failed before the run: tell the others */
    exec_mpi_finalize();
    return rc;
}

/* FNV-1a of the program's pipeline spec, instructions, buffer layouts and
 * mesh: ranks that lowered different plans (different files on different
 * hosts) differ. */
static uint64_t prog_hash(const pipe_program *pp)
{
    const spmd_program *p = pp->prog;
    uint64_t h = ir_fnv_bytes(IR_FNV_OFFSET, &pp->spec, sizeof pp->spec);
    h = ir_fnv_bytes(h, p->instrs, (size_t)p->n_instrs * sizeof *p->instrs);
    h = ir_fnv_bytes(h, p->bufs, (size_t)p->n_bufs * sizeof *p->bufs);
    for (int a = 0; a < p->mesh.n_axes; a++) h = ir_fnv_str(ir_fnv_word(h, (uint64_t)p->mesh.sizes[a]), p->mesh.names[a]);
    return h;
}

/* What the run needs in memory: each device its stage's arena. */
static int measure(session_run *r, session_run_memory *mem, char *err, size_t errlen)
{
    const spmd_program *p = r->p;
    const pipe_spec *s = &r->pp->spec;
    int mpi = r->w->backend == EXEC_MPI;
    mem->reference = exec_ref_bytes(session_run_check_graph(r));
    mem->available = exec_memory_available(mem->why, sizeof mem->why);
    size_t *stage = calloc((size_t)pipe_stage_count(s), sizeof *stage);
    char e2[400];
    if (!stage || exec_program_bytes(r->pp, stage, e2, sizeof e2) < 0) {
        free(stage);
        return ir_errf(err, errlen, "run: %s", stage ? e2 : "out of memory");
    }
    mem->device = mem->spmd = 0;
    for (int d = 0; d < p->mesh.n_devices; d++) {
        size_t b = stage[pipe_device_stage(s, &p->mesh, d)];
        if (b > mem->device) mem->device = b;
        if (!mpi || d == r->w->rank) mem->spmd += b;
    }
    free(stage);
    mem->mine = mem->spmd + (r->w->rank == 0 ? mem->reference : 0);
    return 0;
}

int session_run_open(session_run **out, session_world *w, const pipe_program *pp, ir_graph *ref, const char *label,
                     uint64_t seed, session_run_memory *mem, char *err, size_t errlen)
{
    *out = NULL;
    err[0] = 0;
    const spmd_program *p = pp->prog;
    int mpi = w->backend == EXEC_MPI, rc = agree_setup(w, 0, err, errlen);
    if (rc) {
        ir_free(ref);
        return rc;
    }
    if (mpi && w->size != p->mesh.n_devices) { /* the same on every rank: rank 0 says it */
        if (w->rank == 0)
            ir_errf(err, errlen, "run: the mesh has %lld devices but mpirun started %d ranks (run mpirun -n %lld: one rank per device)",
                    (long long)p->mesh.n_devices, w->size, (long long)p->mesh.n_devices);
        ir_free(ref);
        return SESSION_BAD_INPUT;
    }
    if (mpi && !exec_mpi_same(prog_hash(pp))) {
        if (w->rank == 0) ir_errf(err, errlen, "run: the ranks lowered different programs (give every rank the same plan, model and mesh)");
        ir_free(ref);
        return SESSION_BAD_INPUT;
    }
    session_run *r = ir_xcalloc(1, sizeof *r);
    r->w = w;
    r->p = p;
    r->pp = pp;
    r->ref_g = ref;
    r->label = label;
    r->seed = seed;
    if (measure(r, mem, err, errlen) < 0) {
        session_run_free(r); /* (and ref with it) */
        return SESSION_BAD_INPUT;
    }
    r->mem = *mem;
    *out = r;
    return 0;
}

int session_run_hw(const char *name_or_path, cost_hw *hw, char *err, size_t errlen)
{
    return cost_hw_lookup(name_or_path ? name_or_path : "cpu", hw, err, errlen);
}

void session_run_set_hw(session_run *r, const cost_hw *hw) { r->hw = hw; }
const cost_hw *session_run_get_hw(const session_run *r) { return r->hw; }

/* What a run is priced on, in *h: hw (NULL: the `cpu` preset), with the
 * executor's fused groups (as it runs).  Returns 0, or -1 with a message. */
static int run_hw(const cost_hw *hw, cost_hw *h, char *err, size_t errlen)
{
    if (hw) *h = *hw;
    else if (session_run_hw(NULL, h, err, errlen) < 0) return -1;
    h->fused_elementwise = 1;
    return 0;
}

shard_state *session_run_state(const ir_graph *g, const shard_mesh *mesh, const schedule *sc, pipe_spec *ps, char *err,
                               size_t errlen)
{
    shard_state *st = shard_state_new(g, mesh);
    if (sched_pipeline_step(sc, g, mesh, ps, err, errlen) < 0 || sched_apply(sc, st, err, errlen) < 0) {
        shard_state_free(st);
        return NULL;
    }
    return st;
}

/* st's step lowered under ps for a run (session_run_program.pp), an auto
 * split balanced on hw's prices as the executor runs it.  Returns 0, or -1
 * with a message. */
static int lower_run(shard_state *st, const pipe_spec *ps, const cost_hw *hw, pipe_program *pp, char *err, size_t errlen)
{
    cost_estimate e;
    cost_options opt = {.precision = COST_FP32};
    cost_hw h;
    if (run_hw(hw, &h, err, errlen) < 0) return -1;
    cost_ws *ws = cost_ws_new(st->g);
    int rc = ws ? cost_price_plan(ws, st, ps, NULL, &h, &opt, pp, &e, NULL, err, errlen) : ir_errf(err, errlen, "out of memory");
    cost_ws_free(ws);
    return rc;
}

/* What a run under ps is checked against when it is not the program's own
 * step (session_run_program.ref): a pipeline's body, one micro-batch, is the
 * unrolled step of its micro-batches, src loaded under microbatch:M (a model
 * built at the micro-batch, an ONNX file's batch cut: load.c).  *ref NULL
 * otherwise.  Returns 0, or -1 with a message. */
static int reference(const pipe_spec *ps, const session_source *src, ir_graph **ref, char *err, size_t errlen)
{
    *ref = NULL;
    if (ps->microbatches < 1) return 0; /* (no pipeline: pipe_spec_none's 0) */
    if (!src || (!src->model && !src->graph))
        return ir_errf(err, errlen, "run: a pipelined run is checked against its model's unrolled step: give --model");
    schedule sc = {.n = 1, .t = {sched_microbatch_tactic(ps->microbatches)}};
    session_source s = *src;
    s.sched = &sc;
    s.mesh = NULL;
    s.micro_as_tactic = 0;
    s.weights = 1; /* (a file's run starts from its weights) */
    s.notes = NULL;
    char label[1024], e2[IR_ERR_LEN + 640];
    *ref = session_load_step(&s, label, sizeof label, NULL, e2, sizeof e2);
    return *ref ? 0 : ir_errf(err, errlen, "run: the unrolled step of %d micro-batches: %s", ps->microbatches, e2);
}

int session_run_program_build(session_run_program *rp, shard_state *st, const pipe_spec *ps, const session_source *src,
                              const cost_hw *hw, char *err, size_t errlen)
{
    memset(rp, 0, sizeof *rp);
    if (reference(ps, src, &rp->ref, err, errlen) < 0 || lower_run(st, ps, hw, &rp->pp, err, errlen) < 0) {
        session_run_program_free(rp);
        return -1;
    }
    rp->p = rp->pp.prog;
    return 0;
}

void session_run_program_free(session_run_program *rp)
{
    pipe_program_free(&rp->pp);
    ir_free(rp->ref);
    memset(rp, 0, sizeof *rp);
}

const pipe_program *session_run_plan(const session_run *r) { return r->pp; }
const ir_graph *session_run_check_graph(const session_run *r) { return r->ref_g ? r->ref_g : r->p->g; }

/* Refuses a run whose buffers do not fit in the memory available (per rank
 * with MPI: its device, plus the reference on rank 0). */
static int check_memory(const session_run *r, char *err, size_t errlen)
{
    const session_run_memory *m = &r->mem;
    const spmd_program *p = r->p;
    char ms[256];
    shard_mesh_str(&p->mesh, ms, sizeof ms);
    if (!m->available || m->mine <= m->available) return 0;
    if (r->w->backend == EXEC_MPI)
        ir_errf(err, errlen, "run: rank %d of %d: %s on mesh %s needs %zu bytes (%.2f GiB) on this rank, but %s %zu bytes (%.2f GiB) available",
                r->w->rank, r->w->size, r->label, ms, m->mine, (double)m->mine / 1073741824.0, m->why, m->available,
                (double)m->available / 1073741824.0);
    else
        ir_errf(err, errlen, "run: %s on mesh %s needs %zu bytes (%.2f GiB: %zu per device x %lld devices + %zu for the reference), "
                "but %s %zu bytes (%.2f GiB) available",
                r->label, ms, m->mine, (double)m->mine / 1073741824.0, m->device, (long long)p->mesh.n_devices, m->reference, m->why,
                m->available, (double)m->available / 1073741824.0);
    return SESSION_BAD_INPUT;
}

/* Creates the reference (rank 0 only under MPI) and the runtime, with every
 * rank agreeing on the outcome. */
static int open_executors(session_run *r, char *err, size_t errlen)
{
    char e2[640];
    int mpi = r->w->backend == EXEC_MPI, rc = 0;
    if (r->w->rank == 0 && !(r->ref = exec_ref_new(session_run_check_graph(r), 0, e2, sizeof e2))) {
        ir_errf(err, errlen, "run: %s", e2);
        rc = SESSION_BAD_INPUT;
    }
    if (mpi) rc = exec_mpi_agree(rc); /* exec_spmd_new_on splits communicators: every rank or none */
    if (!rc) r->rt = exec_program_new(r->pp, r->w->backend, 0, e2, sizeof e2);
    if (!rc && !r->rt) {
        if (mpi) ir_errf(err, errlen, "run: rank %d of %d: %s", r->w->rank, r->w->size, e2);
        else ir_errf(err, errlen, "run: %s", e2);
        rc = SESSION_BAD_INPUT;
    }
    if (mpi) rc = exec_mpi_agree(rc);
    if (rc) {
        exec_spmd_free(r->rt);
        exec_ref_free(r->ref);
        r->rt = NULL;
        r->ref = NULL;
    }
    return rc;
}

int session_run_start(session_run *r, char *err, size_t errlen)
{
    char e2[640];
    err[0] = 0;
    int rc = check_memory(r, err, errlen);
    if (r->w->backend == EXEC_MPI) rc = exec_mpi_agree(rc);
    if (rc || (rc = open_executors(r, err, errlen))) return rc;
    if (r->ref) exec_ref_init_args(r->ref, r->seed);
    exec_spmd_init_args(r->rt, r->seed);
    if (exec_spmd_check_init(&r->c, session_run_check_graph(r), e2, sizeof e2) < 0) {
        ir_errf(err, errlen, "run: %s", e2);
        rc = SESSION_BAD_INPUT;
    }
    r->check_ready = rc == 0;
    if (!rc && r->oracle && session_oracle_start(r->oracle, r->ref, session_run_check_graph(r), r->seed, e2, sizeof e2) < 0) {
        ir_errf(err, errlen, "run: %s", e2);
        rc = SESSION_BAD_INPUT;
    }
    return exec_spmd_agree(r->rt, rc) ? SESSION_BAD_INPUT : 0;
}

/* Step `step` of the plain step (the root's) and the run's outputs
 * compared with it (every rank), after the first check passed.  Returns 0
 * or the command's status with a message. */
static int plain_step(session_run *r, int64_t step, session_step_times *t, char *err, size_t errlen)
{
    char e2[640];
    double t0 = exec_spmd_now();
    int rc = session_oracle_run(r->oracle, e2, sizeof e2) < 0 ? SESSION_BAD_INPUT : 0;
    if (rc) ir_errf(err, errlen, "run: at step %lld: %s", (long long)step, e2);
    t->ref_s += exec_spmd_now() - t0;
    if (exec_spmd_agree(r->rt, rc)) return SESSION_BAD_INPUT;
    if (session_oracle_compare(r->oracle, r->rt, e2, sizeof e2) < 0) {
        if (r->w->backend == EXEC_MPI) exec_mpi_fail(SESSION_CHECK_FAILED, e2);
        ir_errf(err, errlen, "run: %s", e2);
        return SESSION_CHECK_FAILED;
    }
    return 0;
}

int session_run_step(session_run *r, int64_t step, session_step_times *t, char *err, size_t errlen)
{
    char e2[640];
    err[0] = 0;
    double t0 = exec_spmd_now();
    int rc = 0;
    if (r->ref && exec_ref_run(r->ref, e2, sizeof e2) < 0) {
        ir_errf(err, errlen, "run: the reference executor failed at step %lld: %s", (long long)step, e2);
        rc = SESSION_BAD_INPUT;
    }
    t->ref_s = exec_spmd_now() - t0;
    if (exec_spmd_agree(r->rt, rc)) return SESSION_BAD_INPUT;
    if (exec_spmd_step(r->rt, e2, sizeof e2) < 0) { /* threads only: an MPI rank that fails stops every rank */
        ir_errf(err, errlen, "run: the SPMD run failed at step %lld: %s", (long long)step, e2);
        return SESSION_CHECK_FAILED;
    }
    t->spmd_s = exec_spmd_last_stats(r->rt)->wall_s;
    if (exec_spmd_compare(r->rt, r->ref, &r->c, e2, sizeof e2) < 0) {
        if (r->w->backend == EXEC_MPI) exec_mpi_fail(SESSION_CHECK_FAILED, e2);
        ir_errf(err, errlen, "run: %s", e2);
        return SESSION_CHECK_FAILED;
    }
    int rc_plain = r->oracle ? plain_step(r, step, t, err, errlen) : 0;
    if (rc_plain) return rc_plain;
    session_run_record_step(r, step, t);
    return 0;
}

void session_run_advance(session_run *r)
{
    exec_spmd_apply_updates(r->rt);
    exec_spmd_sync_reference(r->rt, r->ref);
    if (r->oracle) session_oracle_advance(r->oracle, r->rt);
}

int session_run_agree(session_run *r, int rc) { return exec_spmd_agree(r->rt, rc); }
int session_run_is_root(const session_run *r) { return exec_spmd_is_root(r->rt); }
const exec_spmd_stats *session_run_stats(const session_run *r) { return exec_spmd_last_stats(r->rt); }
const exec_spmd_check *session_run_check(const session_run *r) { return &r->c; }
exec_spmd *session_run_runtime(session_run *r) { return r->rt; }
int session_run_ok(const session_run *r)
{
    return exec_spmd_check_ok(&r->c, EXEC_SPMD_TOLERANCE) && (!r->oracle || session_oracle_ok(r->oracle));
}

void session_run_set_plain(session_run *r, ir_graph *plain, session_run_memory *mem)
{
    session_oracle_free(r->oracle);
    r->oracle = session_oracle_new(plain, r->p->g, session_run_check_graph(r), r->w->rank == 0);
    size_t bytes = session_oracle_bytes(r->oracle);
    r->mem.reference += bytes;
    if (r->w->rank == 0) r->mem.mine += bytes;
    if (mem) *mem = r->mem;
}

session_plain_check session_run_plain(const session_run *r)
{
    if (r->oracle) return session_oracle_report(r->oracle);
    return (session_plain_check){SESSION_PLAIN_SAME, NULL, NULL, ""};
}

double session_run_predicted_peak(const session_run *r)
{
    char err[256];
    cost_pipe_estimate pe;
    double peak = -1;
    if (session_run_stages(r, &pe, err, sizeof err) < 0) return -1;
    for (int s = 0; s < pe.n_stages; s++) /* the largest stage's */
        if (pe.stage[s].peak > peak) peak = pe.stage[s].peak;
    cost_pipe_estimate_free(&pe);
    return peak;
}

int session_run_price_program(const pipe_program *pp, const cost_hw *hw, cost_pipe_estimate *pe, char *err, size_t errlen)
{
    cost_estimate e;
    cost_options opt = {.precision = COST_FP32};
    memset(pe, 0, sizeof *pe);
    cost_hw h;
    if (run_hw(hw, &h, err, errlen) < 0) return -1;
    cost_ws *ws = cost_ws_new(pp->prog->g);
    int rc = ws ? cost_estimate_plan(ws, pp, &h, &opt, &e, pe, err, errlen) : ir_errf(err, errlen, "out of memory");
    cost_ws_free(ws);
    return rc;
}

int session_run_stages(const session_run *r, cost_pipe_estimate *pe, char *err, size_t errlen)
{
    return session_run_price_program(r->pp, r->hw, pe, err, errlen);
}

int64_t session_run_largest_sum(const session_run *r)
{
    const spmd_program *p = r->p;
    int64_t k = 1;
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (in->kind != SPMD_ALL_REDUCE && in->kind != SPMD_REDUCE_SCATTER) continue;
        int64_t n = shard_axes_size(&p->mesh, in->axes);
        if (n > k) k = n;
    }
    return k;
}

void session_run_free(session_run *r)
{
    if (!r) return;
    view_run_free(&r->v);
    if (r->check_ready) exec_spmd_check_free(&r->c);
    session_oracle_free(r->oracle);
    exec_spmd_free(r->rt);
    exec_ref_free(r->ref);
    ir_free(r->ref_g);
    free(r->grad_value);
    free(r);
}
