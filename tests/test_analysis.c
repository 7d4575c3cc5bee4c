/* test_analysis.c - meshes, shardings, factor rules, propagation, lowering
 * and the expert schedules' collective signatures. */
#include "analysis/schedule.h"
#include "analysis/spmd.h"
#include "ir/ir.h"
#include "tests/test.h"

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

static void test_bad_decisions(void)
{
    ir_graph *g = small_dot();
    shard_mesh m;
    char err[256];
    shard_mesh_parse("a=3", &m, err, sizeof err);
    shard_state *s = shard_state_new(g, &m);
    int x = ir_find(g, "x");
    err[0] = 0;
    CHECK(shard_apply(s, &(shard_decision){SHARD_TILE, 0, 0, x}, err, sizeof err) < 0 && strstr(err, "does not divide"));
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

int main(void)
{
    test_mesh();
    test_conflict();
    test_commute();
    test_bad_decisions();
    return test_done();
}
