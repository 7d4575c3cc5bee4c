/* test_schedules.c - the expert schedules reproduce the collective signatures
 * published for them (data parallel, Megatron-LM, ZeRO-3, edge sharding of
 * a graph network), and the dim-group action space does not grow with depth. */
#include "analysis/groups.h"
#include "analysis/schedule.h"
#include "analysis/spmd.h"
#include "models/models.h"
#include "tests/test.h"
#include "tests/util.h"

#include <stdlib.h>
#include <string.h>

/* Applies `sched` on `mesh` and lowers. */
static spmd_program *lower(const ir_graph *g, const char *mesh_text, const char *sched, shard_mesh *mesh,
                           shard_state **st_out)
{
    char err[512];
    schedule sc;
    if (shard_mesh_parse(mesh_text, mesh, err, sizeof err) < 0 || sched_parse(sched, mesh, &sc, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    shard_state *st = shard_state_new(g, mesh);
    int rc = sched_apply(&sc, st, err, sizeof err);
    CHECKF(rc == 0, "%s: %s", sched, err);
    spmd_program *p = spmd_lower(st);
    if (st_out) *st_out = st;
    else shard_state_free(st);
    return p;
}

static int count(const spmd_program *p, spmd_kind k, int phase, int layer)
{
    int n = 0;
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        n += in->kind == k && (phase < 0 || in->phase == phase) && (layer == -2 || in->layer == layer);
    }
    return n;
}

static double param_bytes(const ir_graph *g)
{
    double b = 0;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].role == IR_PARAM) b += (double)ir_bytes(&g->values[v]);
    return b;
}

static void test_dp_mlp(void)
{
    static const char *meshes[] = {"batch=2", "batch=4", "batch=8"};
    ir_graph *g = test_build_step("mlp:layers=3,batch=32,in=64,hidden=128,out=16");
    for (int m = 0; m < 3; m++) {
        shard_mesh mesh;
        spmd_program *p = lower(g, meshes[m], "dp:batch", &mesh, NULL);
        int fwd = 0;
        for (int k = SPMD_ALL_GATHER; k < SPMD_N_KINDS; k++)
            if (k != SPMD_SLICE) fwd += p->stats.count[k][SPMD_FORWARD];
        CHECKF(fwd == 0, "%s: %d forward collectives", meshes[m], fwd);
        /* one all-reduce per parameter gradient, together the size of all weights */
        CHECKF(p->stats.count[SPMD_ALL_REDUCE][SPMD_BACKWARD] == 6, "%s: %d backward all-reduces", meshes[m],
               p->stats.count[SPMD_ALL_REDUCE][SPMD_BACKWARD]);
        CHECKF(p->stats.bytes[SPMD_ALL_REDUCE][SPMD_BACKWARD] == param_bytes(g), "%s: %.0f vs %.0f", meshes[m],
               p->stats.bytes[SPMD_ALL_REDUCE][SPMD_BACKWARD], param_bytes(g));
        CHECK(count(p, SPMD_ALL_GATHER, -1, -2) == 0 && count(p, SPMD_REDUCE_SCATTER, -1, -2) == 0);
        spmd_free(p);
    }
    ir_free(g);
}

static void test_megatron_gpt(void)
{
    ir_graph *g = test_build_step("gpt-tiny");
    model_config cfg;
    char err[256];
    model_parse("gpt-tiny", &cfg, err, sizeof err);
    int64_t b = model_get(&cfg, "batch"), s = model_get(&cfg, "seq"), h = model_get(&cfg, "hidden");
    static const char *meshes[] = {"model=2", "model=4"};
    for (int m = 0; m < 2; m++) {
        shard_mesh mesh;
        spmd_program *p = lower(g, meshes[m], "megatron:model", &mesh, NULL);
        for (int L = 0; L < g->n_layers; L++) {
            int fwd = 0, bwd = 0, ok_bytes = 1;
            for (int i = 0; i < p->n_instrs; i++) {
                const spmd_instr *in = &p->instrs[i];
                if (in->layer != L || in->kind != SPMD_ALL_REDUCE) continue;
                fwd += in->phase == SPMD_FORWARD;
                bwd += in->phase == SPMD_BACKWARD;
                ok_bytes &= in->bytes == b * s * h * 4;
            }
            CHECKF(fwd == 2 && bwd == 2, "%s layer %d: %d forward, %d backward all-reduces", meshes[m], L, fwd, bwd);
            CHECKF(ok_bytes, "%s layer %d: all-reduce of something other than b x s x h", meshes[m], L);
            /* no all-gather of activations inside the layers */
            int ag = 0;
            for (int i = 0; i < p->n_instrs; i++) {
                const spmd_instr *in = &p->instrs[i];
                ag += in->layer == L && (in->kind == SPMD_ALL_GATHER || in->kind == SPMD_ALL_TO_ALL) &&
                      p->g->values[in->value].role == IR_INTERMEDIATE;
            }
            CHECKF(ag == 0, "%s layer %d: %d activation gathers", meshes[m], L, ag);
        }
        spmd_free(p);
    }
    ir_free(g);
}

static void check_zero3(const char *model, const char *mesh_text, const char *sched, int64_t divide)
{
    ir_graph *g = test_build_step(model);
    shard_mesh mesh;
    shard_state *st;
    spmd_program *p = lower(g, mesh_text, sched, &mesh, &st);
    int n_params = 0;
    for (int v = 0; v < g->n_values; v++) n_params += g->values[v].role == IR_PARAM;
    CHECKF(p->stats.count[SPMD_ALL_REDUCE][SPMD_BACKWARD] == 0 || strstr(sched, "megatron"),
           "%s %s: %d gradient all-reduces", model, sched, p->stats.count[SPMD_ALL_REDUCE][SPMD_BACKWARD]);
    /* each weight gradient reduce-scattered over batch, each weight gathered before use */
    int rs = 0, ag_params = 0;
    int *gathered = calloc((size_t)g->n_values, sizeof(int));
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (in->kind == SPMD_REDUCE_SCATTER && g->values[in->value].grad_of >= 0) rs++;
        if (in->kind == SPMD_ALL_GATHER && in->phase == SPMD_FORWARD && g->values[in->value].role == IR_PARAM &&
            !gathered[in->value]++)
            ag_params++;
    }
    CHECKF(rs == n_params, "%s %s: %d of %d gradients reduce-scattered", model, sched, rs, n_params);
    CHECKF(ag_params == n_params, "%s %s: %d of %d params gathered in the forward pass", model, sched, ag_params, n_params);
    free(gathered);
    /* model states per device: every param and optimizer state is tiled over
     * batch (so 1/N of it per device), and with megatron the weights Megatron
     * splits over model too (1/(N x M)); adam.t, a scalar, stays whole. */
    int untiled = 0, both = 0;
    double local = 0, total = 0;
    unsigned batch = 1u << shard_mesh_axis(&mesh, "batch");
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role != IR_PARAM && x->role != IR_OPT_STATE) continue;
        local += (double)shard_local_bytes(&mesh, x, &st->spec[v]);
        total += (double)ir_bytes(x);
        unsigned tiled = shard_spec_tiled(&st->spec[v], x->rank);
        if (x->rank && !(tiled & batch)) untiled++;
        if (strstr(x->name, "attn.wq") && shard_axes_size(&mesh, tiled) == mesh.n_devices) both++;
        if (x->rank) CHECK(shard_local_bytes(&mesh, x, &st->spec[v]) * (size_t)shard_axes_size(&mesh, tiled) == ir_bytes(x));
    }
    CHECKF(untiled == 0, "%s %s: %d model states not tiled over batch", model, sched, untiled);
    if (divide > mesh.sizes[0]) CHECKF(both > 0, "%s %s: wq not tiled over both axes", model, sched);
    printf("%s %s on %s: model states per device %.4g MB of %.4g MB (1/%.2f)\n", model, sched, mesh_text, local / 1e6,
           total / 1e6, total / local);
    spmd_free(p);
    shard_state_free(st);
    ir_free(g);
}

static void test_groups(void)
{
    ir_graph *g2 = test_build_step("gpt:layers=2,hidden=64,heads=4,seq=16,batch=4,vocab=128");
    ir_graph *g8 = test_build_step("gpt:layers=8,hidden=64,heads=4,seq=16,batch=4,vocab=128");
    shard_groups *a = shard_groups_build(g2), *b = shard_groups_build(g8);
    CHECKF(a->n == b->n, "groups: %d for 2 layers, %d for 8", a->n, b->n);
    CHECK(a->n >= 6 && a->n <= 12);
    /* the heads group holds every layer's q, k, v, o heads dims */
    int heads = -1;
    for (int i = 0; i < b->n; i++)
        if (!strcmp(b->groups[i].name, "h0.attn.wq:1")) heads = i;
    CHECK(heads >= 0);
    if (heads >= 0) {
        int wq = 0;
        for (int k = 0; k < b->groups[heads].n; k++) {
            const char *nm = g8->values[b->members[b->groups[heads].first + k].value].name;
            wq += strstr(nm, ".attn.wq") != NULL && strncmp(nm, "adam", 4) != 0;
        }
        CHECKF(wq == 8, "heads group holds %d wq", wq);
    }
    shard_groups_free(a);
    shard_groups_free(b);
    ir_free(g2);
    ir_free(g8);
}

/* Edge sharding of the GNS (group:senders:0:AXIS, the dim group of the edge
 * index): the edge inputs are tiled, the node inputs stay whole; node rows
 * are gathered to the local edges without communication (gather's indexing
 * dims pass through), and the scatter-add of the local edges' messages is a
 * partial sum (its indexing dims are SUM factors): one all-reduce of the
 * [nodes,hidden] aggregate per step is the forward's only collective.
 * Gradients: the edge MLPs' params are all-reduced (their gradients sum
 * over edges), the node MLPs' are not (every device computes them whole). */
static void test_edge_sharding(void)
{
    ir_graph *g = test_build_step("gns-tiny");
    static const char *meshes[] = {"batch=2", "batch=4", "batch=8"};
    for (int m = 0; m < 3; m++) {
        shard_mesh mesh;
        shard_state *st;
        spmd_program *p = lower(g, meshes[m], "group:senders:0:batch", &mesh, &st);
        static const char *tiled[] = {"senders", "receivers", "e"}, *whole[] = {"x", "y", "p0.node.w2", "p1.edge.w2"};
        for (int i = 0; i < 3; i++) {
            const shard_spec *sp = &st->spec[ir_find(g, tiled[i])];
            CHECKF(sp->n[0] == 1 && sp->axes[0][0] == 0, "%s: %s not tiled on dim 0", meshes[m], tiled[i]);
        }
        for (int i = 0; i < 4; i++)
            CHECKF(shard_spec_tiled(&st->spec[ir_find(g, whole[i])], 2) == 0, "%s: %s tiled", meshes[m], whole[i]);
        int fwd = 0;
        for (int k = SPMD_ALL_GATHER; k < SPMD_N_KINDS; k++) fwd += p->stats.count[k][SPMD_FORWARD];
        double agg_bytes = 16.0 * 16 * 4; /* nodes x hidden f32 */
        CHECKF(fwd == 2 && count(p, SPMD_ALL_REDUCE, SPMD_FORWARD, -2) == 2 &&
               p->stats.bytes[SPMD_ALL_REDUCE][SPMD_FORWARD] == 2 * agg_bytes,
               "%s: %d forward collectives, %.0f all-reduce bytes", meshes[m], fwd, p->stats.bytes[SPMD_ALL_REDUCE][SPMD_FORWARD]);
        for (int i = 0; i < p->n_instrs; i++) {
            const spmd_instr *in = &p->instrs[i];
            if (in->kind == SPMD_ALL_REDUCE && in->phase == SPMD_FORWARD)
                CHECKF(strstr(g->values[in->value].name, ".agg") != NULL, "forward all-reduce of %s", g->values[in->value].name);
            if (in->kind != SPMD_COMPUTE && g->values[in->value].grad_of >= 0) {
                const char *pn = g->values[g->values[in->value].grad_of].name;
                CHECKF(strstr(pn, "edge.") != NULL, "%s: gradient of %s communicated", meshes[m], pn);
            }
        }
        spmd_free(p);
        shard_state_free(st);
    }
    /* bad group tactics: unknown name, a dim the argument does not have */
    shard_mesh mesh;
    schedule sc;
    char err[256];
    shard_mesh_parse("batch=2", &mesh, err, sizeof err);
    shard_state *st = shard_state_new(g, &mesh);
    CHECK(sched_parse("group:nothing:0:batch", &mesh, &sc, err, sizeof err) == 0);
    CHECK(sched_apply(&sc, st, err, sizeof err) < 0 && strstr(err, "no argument"));
    CHECK(sched_parse("group:senders:1:batch", &mesh, &sc, err, sizeof err) == 0);
    CHECK(sched_apply(&sc, st, err, sizeof err) < 0 && strstr(err, "no dim 1"));
    CHECK(sched_parse("group:senders:0", &mesh, &sc, err, sizeof err) < 0 && strstr(err, "group:NAME:DIM:AXIS"));
    char buf[128];
    CHECK(sched_parse("group:senders:0:batch,zero3:batch", &mesh, &sc, err, sizeof err) == 0 &&
          !strcmp(sched_str(&sc, &mesh, buf, sizeof buf), "group:senders:0:batch,zero3:batch"));
    shard_state_free(st);
    ir_free(g);
}

/* Megatron-LM's sequence parallelism (megatron:model,sp:model; Korthikanti
 * et al. 2022, section 4.2.2): in each layer the forward pass all-gathers
 * the sequence twice (before attention and before the MLP, b x s x h each)
 * and reduce-scatters twice (after them) instead of two all-reduces; the
 * backward pass does the transposes and gathers the norms' outputs again
 * for the weight gradients, and all-reduces no activation, only the
 * gradients of the params applied to the split sequence (as Megatron-LM
 * all-reduces the norms' gradients); the norms work on 1/n of the sequence.  On a model without token ids sp: is
 * refused with its reason. */
static void test_sequence_parallel(void)
{
    ir_graph *g = test_build_step("gpt-tiny:dropout=0.1");
    model_config cfg;
    char err[256];
    model_parse("gpt-tiny", &cfg, err, sizeof err);
    int64_t b = model_get(&cfg, "batch"), s = model_get(&cfg, "seq"), h = model_get(&cfg, "hidden");
    shard_mesh mesh;
    shard_state *st;
    spmd_program *p = lower(g, "model=2", "megatron:model,sp:model", &mesh, &st);
    for (int L = 0; L < g->n_layers; L++) {
        int n[SPMD_N_KINDS] = {0}, grads = 0, odd = 0;
        for (int i = 0; i < p->n_instrs; i++) {
            const spmd_instr *in = &p->instrs[i];
            const ir_value *x = &p->g->values[in->value];
            if (in->layer != L || x->role != IR_INTERMEDIATE) continue;
            if (x->grad_of >= 0) {
                grads += in->kind == SPMD_ALL_REDUCE;
                continue;
            }
            n[in->kind]++;
            odd += (in->kind == SPMD_ALL_GATHER || in->kind == SPMD_REDUCE_SCATTER) && in->bytes != b * s * h * 4;
        }
        /* forward: 2 all-gathers, 2 reduce-scatters; backward: their transposes (2 reduce-scatters, 2 all-gathers)
           and the norms' outputs gathered again for the weight gradients (2) */
        CHECKF(n[SPMD_ALL_GATHER] == 6 && n[SPMD_REDUCE_SCATTER] == 4 && n[SPMD_ALL_REDUCE] == 0,
               "layer %d: %d all-gathers, %d reduce-scatters, %d all-reduces of activations", L, n[SPMD_ALL_GATHER],
               n[SPMD_REDUCE_SCATTER], n[SPMD_ALL_REDUCE]);
        /* the gradients of what is applied to the split sequence (2 norms' gain and bias, the 2 row-parallel biases) */
        CHECKF(grads == 6, "layer %d: %d gradients all-reduced", L, grads);
        CHECKF(odd == 0, "layer %d: %d gathers or scatters of something other than b x s x h", L, odd);
    }
    int ln = ir_find(g, "h0.ln1.out");
    CHECKF(ln >= 0 && st->spec[ln].n[1] == 1 && st->spec[ln].axes[1][0] == 0, "h0.ln1.out is not split by sequence");
    schedule sc;
    CHECK(sched_parse("megatron:model,sp:model", &mesh, &sc, err, sizeof err) == 0 && sc.t[1].kind == TACTIC_SP);
    char text[64];
    CHECK(!strcmp(sched_str(&sc, &mesh, text, sizeof text), "megatron:model,sp:model"));
    shard_state_free(st);
    spmd_free(p);
    ir_free(g);
    ir_graph *mlp = test_build_step("mlp-tiny");
    shard_state *ms = shard_state_new(mlp, &mesh);
    CHECK(sched_parse("sp:model", &mesh, &sc, err, sizeof err) == 0);
    CHECK(sched_apply(&sc, ms, err, sizeof err) < 0 && strstr(err, "token ids"));
    shard_state_free(ms);
    ir_free(mlp);
}

int main(void)
{
    test_dp_mlp();
    test_megatron_gpt();
    test_sequence_parallel();
    check_zero3("mlp:layers=2,batch=32,in=64,hidden=128,out=16", "batch=4", "zero3:batch", 4);
    check_zero3("gpt-tiny", "batch=4", "zero3:batch", 4);
    check_zero3("gpt-tiny", "batch=2,model=2", "dp:batch,megatron:model,zero3:batch", 4);
    test_groups();
    test_edge_sharding();
    return test_done();
}
