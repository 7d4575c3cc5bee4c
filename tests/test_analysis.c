/* test_analysis.c - meshes, shardings, factor rules, propagation, lowering
 * and the expert schedules' collective signatures. */
#include "analysis/groups.h"
#include "analysis/schedule.h"
#include "analysis/spmd.h"
#include "ir/ir.h"
#include "tests/test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void test_mesh(void)
{
    shard_mesh m;
    char err[256], buf[128];
    CHECK(shard_mesh_parse("batch=4,model=2", &m, err, sizeof err) == 0);
    CHECK(m.n_axes == 2 && m.n_devices == 8 && m.sizes[1] == 2);
    CHECK(strcmp(shard_mesh_str(&m, buf, sizeof buf), "batch=4,model=2") == 0);
    CHECK(shard_mesh_parse("4x2", &m, err, sizeof err) == 0 && !strcmp(m.names[1], "model"));
    /* device 5 = (batch 2, model 1) row-major */
    CHECK(shard_device_coord(&m, 5, 0) == 2 && shard_device_coord(&m, 5, 1) == 1);
    const char *bad[] = {"", "batch=0", "batch=4,batch=2", "batch", "a=1,b=1,c=1,d=1,e=1", "batch=4,", "=4", "batch=x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CHECKF(shard_mesh_parse(bad[i], &m, err, sizeof err) < 0 && strstr(err, "mesh"), "'%s' -> '%s'", bad[i], err);
    }
    /* issue 18: 2^20 * 2^20 * 2^20 * 16 = 2^64 wrapped to 0 devices before
     * the product was checked (UBSan: signed overflow) */
    const char *huge[] = {"a=1048576,b=1048576,c=1048576,d=16", "a=1048576,b=1048576,c=1048576,d=4", "1048576x2",
                          "a=1048576,b=1048576,c=1048576,d=1048576"};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++)
        CHECKF(shard_mesh_parse(huge[i], &m, err, sizeof err) < 0 && strstr(err, "more than 1048576 devices"), "'%s' -> '%s'",
               huge[i], err);
    int64_t p;
    CHECK(ir_mul_i64(INT64_MAX / 2, 3, &p) == -1 && p == INT64_MAX);
    CHECK(ir_mul_i64(-4, 5, &p) == 0 && p == -20);
    size_t z;
    CHECK(ir_mul_size(SIZE_MAX / 2 + 1, 2, &z) == -1 && z == SIZE_MAX && ir_add_size(SIZE_MAX, 1, &z) == -1);
    CHECK(ir_mul_size(1u << 20, 1u << 20, &z) == 0 && z == (size_t)1 << 40);
}

/* x[8,16] @ w[16,32] -> y, then a loss. */
static ir_graph *small_dot(void)
{
    ir_graph *g = ir_new("dot");
    int64_t xd[2] = {8, 16}, wd[2] = {16, 32}, all[2] = {0, 1};
    int x = ir_arg(g, "x", IR_INPUT, IR_F32, 2, xd);
    int w = ir_arg(g, "w", IR_PARAM, IR_F32, 2, wd);
    int y = ir_einsum(g, "mk,kn->mn", x, w);
    ir_set_loss(g, ir_reduce(g, IR_OP_REDUCE_SUM, y, 2, all));
    return g;
}

static int count_kind(const spmd_program *p, spmd_kind k)
{
    int n = 0;
    for (int i = 0; i < p->n_instrs; i++) n += p->instrs[i].kind == k;
    return n;
}

static void test_conflict(void)
{
    ir_graph *g = small_dot();
    shard_mesh m;
    char err[256];
    shard_mesh_parse("a=2", &m, err, sizeof err);
    int x = ir_find(g, "x"), w = ir_find(g, "w"), y = g->ops[0].out;
    shard_decision dx = {SHARD_TILE, 1, 0, x}, dw = {SHARD_TILE, 1, 0, w};
    /* x first: propagation already put the axis on w's contracting dim, so
     * the decision on w is blocked and recorded as a conflict. */
    shard_state *s = shard_state_new(g, &m);
    CHECK(shard_apply(s, &dx, err, sizeof err) == 0);
    CHECK(s->spec[w].n[0] == 1 && s->n_conflicts == 0);
    CHECK(shard_apply(s, &dw, err, sizeof err) == 1);
    CHECK(s->n_conflicts == 1 && s->conflicts[0].value == w && s->conflicts[0].op == -1);
    CHECK(s->spec[w].n[1] == 0);
    spmd_program *p = spmd_lower(s);
    CHECK(p->bufs[p->instrs[0].out].spec.partial == 1); /* contraction split: partial sums */
    spmd_free(p);
    shard_state_free(s);
    /* w first: the two shardings meet at the dot; the conflict is recorded
     * there, the earlier decision (n on a) wins and x is gathered before the
     * dot instead of being silently used split. */
    s = shard_state_new(g, &m);
    CHECK(shard_apply(s, &dw, err, sizeof err) == 0);
    CHECK(shard_apply(s, &dx, err, sizeof err) == 0);
    int at_dot = 0;
    for (int i = 0; i < s->n_conflicts; i++) at_dot |= s->conflicts[i].op == 0 && s->conflicts[i].axis == 0;
    CHECK(at_dot);
    CHECK(s->spec[y].n[1] == 1 && s->spec[x].n[1] == 1);
    p = spmd_lower(s);
    const spmd_instr *dot = NULL;
    for (int i = 0; i < p->n_instrs; i++)
        if (p->instrs[i].kind == SPMD_COMPUTE && p->instrs[i].op == 0) dot = &p->instrs[i];
    CHECK(dot && p->bufs[dot->out].spec.partial == 0 && p->bufs[dot->out].spec.n[1] == 1);
    CHECK(dot && p->bufs[dot->in[0]].spec.n[1] == 0);
    CHECK(count_kind(p, SPMD_ALL_GATHER) == 1);
    spmd_free(p);
    shard_state_free(s);
    ir_free(g);
}

static void test_commute(void)
{
    ir_graph *g = small_dot();
    shard_mesh m;
    char err[256];
    shard_mesh_parse("a=2,b=2", &m, err, sizeof err);
    int x = ir_find(g, "x"), w = ir_find(g, "w");
    shard_decision d1 = {SHARD_TILE, 0, 0, x}, d2 = {SHARD_TILE, 1, 1, w};
    shard_state *s1 = shard_state_new(g, &m), *s2 = shard_state_new(g, &m), *s3 = shard_state_new(g, &m);
    shard_apply(s1, &d1, err, sizeof err);
    shard_apply(s1, &d2, err, sizeof err);
    shard_apply(s2, &d2, err, sizeof err);
    shard_apply(s2, &d1, err, sizeof err);
    shard_apply(s3, &d1, err, sizeof err);
    shard_apply(s3, &d2, err, sizeof err);
    shard_apply(s3, &d1, err, sizeof err); /* twice: nothing changes */
    int same12 = 1, same13 = 1;
    for (int v = 0; v < g->n_values; v++) {
        same12 &= shard_spec_equal(&s1->spec[v], &s2->spec[v], g->values[v].rank);
        same13 &= shard_spec_equal(&s1->spec[v], &s3->spec[v], g->values[v].rank);
    }
    CHECK(same12 && same13);
    int y = g->ops[0].out;
    CHECK(s1->spec[y].n[0] == 1 && s1->spec[y].n[1] == 1);
    CHECK(s1->n_conflicts == 0);
    shard_state_free(s1);
    shard_state_free(s2);
    shard_state_free(s3);
    ir_free(g);
}

/* A state made like another shares its rules and use lists, propagates as a
 * state of its own, and outlives the state it was made from. */
static void test_state_like(void)
{
    ir_graph *g = small_dot();
    shard_mesh m;
    char err[256];
    shard_mesh_parse("a=2,b=2", &m, err, sizeof err);
    int x = ir_find(g, "x"), w = ir_find(g, "w");
    shard_decision d1 = {SHARD_TILE, 0, 0, x}, d2 = {SHARD_TILE, 1, 1, w};
    shard_state *fresh = shard_state_new(g, &m), *base = shard_state_new(g, &m);
    shard_state *like = shard_state_new_like(base), *like2 = shard_state_new_like(like);
    CHECK(like->rules == base->rules && like2->uses == base->uses && base->shared->refs == 3);
    CHECK(like->queue != base->queue && like->spec != base->spec);
    const shard_groups *gs = shard_state_groups(like2), *built = shard_groups_build(g);
    CHECK(gs && gs == shard_state_groups(base) && base->shared->groups == gs); /* built once for all three */
    int alike = gs->n == built->n && gs->n > 0 && gs->period == built->period;
    for (int c = 0; alike && c < gs->n; c++)
        alike = gs->groups[c].first == built->groups[c].first && gs->groups[c].n == built->groups[c].n &&
                !memcmp(&gs->members[gs->groups[c].first], &built->members[built->groups[c].first],
                        (size_t)gs->groups[c].n * sizeof *gs->members);
    CHECK(alike);
    shard_groups_free((shard_groups *)built);
    shard_apply(base, &d1, err, sizeof err); /* base's decision stays base's */
    shard_state_free(base);                  /* the tables live on in like and like2 */
    CHECK(like->shared->refs == 2 && shard_state_groups(like) == gs);
    shard_apply(fresh, &d1, err, sizeof err);
    shard_apply(fresh, &d2, err, sizeof err);
    shard_apply(like, &d2, err, sizeof err);
    CHECK(like->spec[x].n[0] == 0); /* nothing of base's */
    shard_apply(like, &d1, err, sizeof err);
    shard_state_copy(like2, like);
    int same = 1;
    for (int v = 0; v < g->n_values; v++)
        same &= shard_spec_equal(&fresh->spec[v], &like->spec[v], g->values[v].rank) &&
                shard_spec_equal(&fresh->spec[v], &like2->spec[v], g->values[v].rank);
    CHECK(same);
    shard_state *saved = shard_state_new_saved(g, &m), *own = shard_state_new_like(saved);
    CHECK(!saved->shared && own->rules && own->shared->refs == 1); /* a saved state has no tables to share */
    CHECK(!shard_state_groups(saved) && shard_state_groups(own) != gs);
    const shard_groups *seen[4] = {0};
#pragma omp parallel for num_threads(4)
    for (int t = 0; t < 4; t++) seen[t] = shard_state_groups(fresh); /* side by side: one kept, the others freed */
    CHECK(seen[0] && seen[0] == seen[1] && seen[1] == seen[2] && seen[2] == seen[3] && fresh->shared->groups == seen[0]);
    shard_state_free(saved);
    shard_state_free(own);
    shard_state_free(like);
    shard_state_free(like2);
    shard_state_free(fresh);
    ir_free(g);
}

static void test_bad_decisions(void)
{
    ir_graph *g = small_dot();
    shard_mesh m;
    char err[256];
    shard_mesh_parse("a=16", &m, err, sizeof err);
    shard_state *s = shard_state_new(g, &m);
    int x = ir_find(g, "x");
    err[0] = 0;
    /* x's dim 0 (8 rows) cannot be split in 16 even with padding */
    CHECK(shard_apply(s, &(shard_decision){SHARD_TILE, 0, 0, x}, err, sizeof err) < 0 && strstr(err, "smaller than its 16 shards"));
    CHECK(shard_apply(s, &(shard_decision){SHARD_TILE, 5, 0, x}, err, sizeof err) < 0 && strstr(err, "no dim 5"));
    CHECK(shard_apply(s, &(shard_decision){SHARD_TILE, 0, 3, x}, err, sizeof err) < 0 && strstr(err, "no mesh axis"));
    CHECK(shard_apply(s, &(shard_decision){SHARD_TILE, 0, 0, g->ops[0].out}, err, sizeof err) < 0 && strstr(err, "only arguments"));
    CHECK(shard_apply(s, &(shard_decision){SHARD_ATOMIC, 0, 0, g->ops[0].out}, err, sizeof err) < 0 && strstr(err, "only arguments"));
    schedule sc;
    const char *bad[][2] = {{"", "empty"},         {"dp:model", "unknown mesh axis"}, {"dp", "write dp:AXIS"},
                            {"foo:a", "unknown tactic"}, {"dp:a,,dp:a", "empty tactic"}, {"tile:x:9:a", "DIM"},
                            {"dp:a,", "empty tactic"}, {"missing.json", "cannot open"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CHECKF(sched_parse(bad[i][0], &m, &sc, err, sizeof err) < 0 && strstr(err, bad[i][1]), "'%s' -> '%s'", bad[i][0], err);
    }
    CHECK(sched_parse("tile:nothing*:0:a", &m, &sc, err, sizeof err) == 0);
    CHECK(sched_apply(&sc, s, err, sizeof err) < 0 && strstr(err, "no argument"));
    shard_state_free(s);
    ir_free(g);
}

/* A training step (SGD) of n projections of one input x [8,16] by params
 * w0..w{n-1} [16,32], combined elementwise (n = 2: gelu(x w0) * (x w1), a
 * SwiGLU-like gate and up; n = 3: (x w0) * (x w1) + x w2, q/k/v-like), then
 * the sum as the loss. */
static ir_graph *projections(int n)
{
    ir_graph *g = ir_new("projections");
    int64_t xd[2] = {8, 16}, wd[2] = {16, 32}, all[2] = {0, 1};
    int x = ir_arg(g, "x", IR_INPUT, IR_F32, 2, xd), y[3];
    char name[16];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "w%d", i);
        y[i] = ir_einsum(g, "mk,kn->mn", x, ir_arg(g, name, IR_PARAM, IR_F32, 2, wd));
    }
    int h = ir_binary(g, IR_OP_MUL, n == 2 ? ir_unary(g, IR_OP_GELU, y[0]) : y[0], y[1]);
    if (n == 3) h = ir_binary(g, IR_OP_ADD, h, y[2]);
    ir_set_loss(g, ir_reduce(g, IR_OP_REDUCE_SUM, h, 2, all));
    ir_optimizer opt = ir_default_adam();
    opt.kind = IR_SGD;
    char err[256];
    ir_graph *step = ir_train_step(g, &opt, err, sizeof err);
    ir_free(g);
    return step;
}

/* Count and bytes of all-gathers in a phase. */
static int gathers(const spmd_program *p, spmd_phase ph, double *bytes)
{
    *bytes = p->stats.bytes[SPMD_ALL_GATHER][ph];
    return p->stats.count[SPMD_ALL_GATHER][ph];
}

/* The projections' weights split on their output dim (Megatron's column
 * split) and x on its contracting dim (as sequence parallelism leaves an
 * activation): every projection needs x whole.  One all-gather of x serves
 * every reader of a phase; the backward gathers again (re-gather), or reuses
 * the forward's (keep). */
static void test_shared_reshard(void)
{
    shard_mesh m;
    char err[256];
    shard_mesh_parse("a=2", &m, err, sizeof err);
    for (int n = 2; n <= 3; n++) {
        ir_graph *g = projections(n);
        CHECK(g != NULL);
        if (!g) return;
        shard_state *s = shard_state_new(g, &m);
        for (int i = 0; i < n; i++) {
            char name[16];
            snprintf(name, sizeof name, "w%d", i);
            /* 1: propagation through the elementwise combination put it there already */
            CHECK(shard_apply(s, &(shard_decision){SHARD_TILE, 1, 0, ir_find(g, name)}, err, sizeof err) >= 0);
            CHECK(s->spec[ir_find(g, name)].n[1] == 1);
        }
        CHECK(shard_apply(s, &(shard_decision){SHARD_TILE, 1, 0, ir_find(g, "x")}, err, sizeof err) == 0);
        spmd_program *p = spmd_lower(s);
        double fb, bb, x_bytes = 8 * 16 * 4; /* the gathered x: whole on every device */
        CHECKF(gathers(p, SPMD_FORWARD, &fb) == 1 && fb == x_bytes, "n=%d forward: %d gathers, %g bytes", n,
               gathers(p, SPMD_FORWARD, &fb), fb);
        /* the weight gradients x^T dy read the same gathered x in the backward */
        CHECKF(gathers(p, SPMD_BACKWARD, &bb) == 1 && bb == x_bytes, "n=%d backward: %d gathers, %g bytes", n,
               gathers(p, SPMD_BACKWARD, &bb), bb);
        CHECK(p->opts.gather_policy == SPMD_GATHER_REGATHER);
        spmd_options keep = spmd_default_options();
        keep.gather_policy = SPMD_GATHER_KEEP;
        p = spmd_lower_ex(s, p, &keep);
        CHECK(gathers(p, SPMD_FORWARD, &fb) == 1 && gathers(p, SPMD_BACKWARD, &bb) == 0 && bb == 0);
        spmd_free(p);
        shard_state_free(s);
        ir_free(g);
    }
}

/* Axes of size 1 split nothing: they make no collective. */
static void test_unit_axes(void)
{
    ir_graph *g = projections(2);
    shard_mesh m;
    char err[256];
    shard_mesh_parse("a=1,b=2", &m, err, sizeof err);
    shard_state *s = shard_state_new(g, &m);
    /* x split on its batch dim over a (data parallel on one device) and on
     * its contracting dim over b: only b communicates */
    CHECK(shard_apply(s, &(shard_decision){SHARD_TILE, 0, 0, ir_find(g, "x")}, err, sizeof err) == 0);
    CHECK(shard_apply(s, &(shard_decision){SHARD_TILE, 1, 1, ir_find(g, "x")}, err, sizeof err) == 0);
    spmd_program *p = spmd_lower(s);
    int comm = 0, on_a = 0;
    for (int i = 0; i < p->n_instrs; i++) {
        comm += p->instrs[i].kind != SPMD_COMPUTE;
        on_a += p->instrs[i].kind != SPMD_COMPUTE && (p->instrs[i].axes & 1u);
    }
    CHECK(comm > 0 && on_a == 0);
    for (int b = 0; b < p->n_bufs; b++) CHECK(!(shard_spec_tiled(&p->bufs[b].spec, 2) & 1u) && !(p->bufs[b].spec.partial & 1u));
    spmd_free(p);
    shard_state_free(s);
    /* on a 1-device mesh nothing communicates */
    shard_mesh_parse("a=1", &m, err, sizeof err);
    s = shard_state_new(g, &m);
    CHECK(shard_apply(s, &(shard_decision){SHARD_TILE, 0, 0, ir_find(g, "x")}, err, sizeof err) == 0);
    CHECK(shard_apply(s, &(shard_decision){SHARD_TILE, 1, 0, ir_find(g, "w0")}, err, sizeof err) == 1 ||
          s->spec[ir_find(g, "w0")].n[1] == 1);
    p = spmd_lower(s);
    comm = 0;
    for (int i = 0; i < p->n_instrs; i++) comm += p->instrs[i].kind != SPMD_COMPUTE;
    CHECKF(comm == 0, "%d collectives on a 1-device mesh", comm);
    spmd_free(p);
    shard_state_free(s);
    ir_free(g);
}

int main(void)
{
    test_mesh();
    test_conflict();
    test_commute();
    test_state_like();
    test_bad_decisions();
    test_shared_reshard();
    test_unit_axes();
    return test_done();
}
