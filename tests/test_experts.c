/* test_experts.c - expert strategies found from structure (analysis/
 * structure.c), the expert schedules (autopart/experts.c) and the search started
 * from them: on any graph, at a budget that covers the experts, the search is
 * never slower than the best expert that fits. */
#include <stdlib.h>
#include <string.h>

#include "analysis/schedule.h"
#include "analysis/structure.h"
#include "autopart/experts.h"
#include "autopart/memory.h"
#include "analysis/groups.h"
#include "search/search.h"
#include "tests/test.h"
#include "tests/util.h"

/* The training step of graph JSON `path` (relative to CARVE_ROOT or "."). */
static ir_graph *load_step(const char *path)
{
    char full[1024], err[512];
    const char *root = getenv("CARVE_ROOT");
    snprintf(full, sizeof full, "%s/%s", root ? root : ".", path);
    ir_graph *fwd = ir_load_json_file(full, err, sizeof err);
    if (!fwd) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    ir_optimizer opt = ir_default_adam();
    ir_graph *g = ir_train_step(fwd, &opt, err, sizeof err);
    ir_free(fwd);
    if (!g) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    return g;
}

/* A LLaMA-like shape: a rotary-style table [seq, dim] is an input whose dim 0
 * is not the batch; data parallelism must split x's batch dim only. */
static const char *rope_graph =
    "{\"format\": \"carve-graph/1\", \"name\": \"rope\", \"args\": ["
    "{\"name\": \"x\", \"role\": \"input\", \"shape\": [8, 16, 32]},"
    "{\"name\": \"rope\", \"role\": \"input\", \"shape\": [16, 32]},"
    "{\"name\": \"proj\", \"role\": \"param\", \"shape\": [32, 4]}],"
    "\"ops\": ["
    "{\"name\": \"r\", \"op\": \"broadcast\", \"shape\": [8, 16, 32], \"dims\": [1, 2], \"in\": [\"rope\"]},"
    "{\"name\": \"xr\", \"op\": \"mul\", \"in\": [\"x\", \"r\"]},"
    "{\"name\": \"y\", \"op\": \"einsum\", \"subscripts\": \"bsd,dc->bsc\", \"in\": [\"xr\", \"proj\"]},"
    "{\"name\": \"sq\", \"op\": \"mul\", \"in\": [\"y\", \"y\"]},"
    "{\"name\": \"t\", \"op\": \"reduce_sum\", \"dims\": [0, 1, 2], \"in\": [\"sq\"]},"
    "{\"name\": \"loss\", \"op\": \"scale\", \"scalar\": 0.001, \"in\": [\"t\"]}],"
    "\"outputs\": [], \"loss\": \"loss\"}";

static void batch_from_the_loss(void)
{
    char err[512];
    ir_graph *fwd = ir_load_json(rope_graph, err, sizeof err);
    CHECKF(fwd != NULL, "%s", err);
    if (!fwd) return;
    ir_optimizer opt = ir_default_adam();
    ir_graph *g = ir_train_step(fwd, &opt, err, sizeof err);
    ir_free(fwd);
    shard_mesh mesh;
    shard_mesh_parse("data=4", &mesh, err, sizeof err);
    schedule sc;
    CHECK(sched_parse("dp:data", &mesh, &sc, err, sizeof err) == 0);
    shard_state *st = shard_state_new(g, &mesh);
    CHECKF(sched_apply(&sc, st, err, sizeof err) == 0, "%s", err);
    int x = ir_find(g, "x"), rope = ir_find(g, "rope");
    CHECK(shard_dim_shards(&mesh, &st->spec[x], 0) == 4);        /* the batch is split */
    CHECK(shard_spec_tiled(&st->spec[rope], 2) == 0);             /* the table's sequence dim is not */
    CHECK(st->n_conflicts == 0);
    shard_state_free(st);
    ir_free(g);
}

/* Megatron found on a graph whose names carve does not know: every attention
 * and MLP block of the ViT-like encoder, and the classifier head. */
static void megatron_on_a_user_graph(void)
{
    ir_graph *g = load_step("tests/graphs/vit-tiny.json");
    shard_member dims[64];
    int blocks = 0;
    char why[160] = "";
    int n = shard_megatron_dims(g, dims, 64, &blocks, why, sizeof why);
    CHECKF(blocks == 4, "%d blocks, want 4 (attention and MLP in 2 layers): %s", blocks, why);
    CHECKF(n == 13, "%d params split, want 13 (q, k, v, out, fc_in, fc_out per layer, and the head)", n);
    int found_q = 0, found_out = 0;
    for (int i = 0; i < n; i++) {
        const char *name = g->values[dims[i].value].name;
        found_q += !strcmp(name, "encoder/block1/attn/query/kernel") && dims[i].dim == 1;  /* heads, column */
        found_out += !strcmp(name, "encoder/block1/attn/out/kernel") && dims[i].dim == 0; /* heads, row */
        CHECKF(strcmp(name, "embedding/kernel"), "the embedding feeds a residual stream, not a block");
    }
    CHECK(found_q == 1 && found_out == 1);
    /* the states sharing a graph's rules share its dims, built once and
     * equal to the function's; megatron:AXIS tiles exactly those */
    shard_mesh mesh;
    CHECK(shard_mesh_parse("model=2", &mesh, why, sizeof why) == 0);
    shard_state *st = shard_state_new(g, &mesh), *like = shard_state_new_like(st);
    const shard_megatron *mg = shard_state_megatron(st);
    CHECK(mg && mg == shard_state_megatron(like) && mg->n == n && mg->blocks == blocks);
    for (int i = 0; mg && i < n && i < mg->n; i++) CHECK(mg->dims[i].value == dims[i].value && mg->dims[i].dim == dims[i].dim);
    schedule sc;
    CHECK(sched_parse("megatron:model", &mesh, &sc, why, sizeof why) == 0);
    CHECKF(sched_apply(&sc, like, why, sizeof why) == 0, "%s", why);
    int tiled = 0;
    for (int i = 0; i < n; i++) tiled += shard_dim_shards(&mesh, &like->spec[dims[i].value], dims[i].dim) == 2;
    CHECKF(tiled == n, "%d of %d Megatron dims tiled over model", tiled, n);
    shard_state_free(like);
    shard_state_free(st);
    ir_free(g);
    /* a graph with no contraction pair says why */
    ir_graph *fwd = ir_load_json(rope_graph, why, sizeof why);
    ir_optimizer opt = ir_default_adam();
    g = ir_train_step(fwd, &opt, why, sizeof why);
    ir_free(fwd);
    CHECK(shard_megatron_dims(g, dims, 64, &blocks, why, sizeof why) == 0 && strstr(why, "no pair of contractions"));
    ir_free(g);
}

/* Every expert uses every axis of the mesh; ones that do not apply keep
 * their row with a reason. */
static void experts_use_every_axis(void)
{
    ir_graph *g = test_build_step("gpt-tiny");
    const char *meshes[] = {"a=2,b=2,c=2", "a=2,b=2,c=2,d=2", "batch=8"};
    for (int m = 0; m < 3; m++) {
        shard_mesh mesh;
        char err[256];
        shard_mesh_parse(meshes[m], &mesh, err, sizeof err);
        cost_hw hw;
        cost_hw_lookup("a100", &hw, err, sizeof err);
        cost_options opt = {COST_FP32, 0, 0, COST_GRADS_AUTO};
        shard_state *scratch = shard_state_new(g, &mesh);
        autopart_pricer pr;
        autopart_pricer_init(&pr, &hw, &opt, NULL, scratch, err, sizeof err);
        autopart_expert *ex;
        int n = autopart_experts(g, &mesh, NULL, &pr, &ex), ok = 0, refused = 0;
        CHECKF(n >= (1 << mesh.n_axes), "%s: %d experts", meshes[m], n);
        for (int i = 0; i < n; i++) {
            for (int a = 0; a < mesh.n_axes; a++) {
                char tag[40];
                snprintf(tag, sizeof tag, ":%s", mesh.names[a]);
                CHECKF(strstr(ex[i].schedule, tag), "%s: expert %s leaves axis %s unused", meshes[m], ex[i].schedule,
                       mesh.names[a]);
            }
            ok += ex[i].ok;
            if (!ex[i].ok) refused += ex[i].why[0] != 0;
        }
        CHECKF(ok > 0 && ok + refused == n, "%s: %d applied, %d refused with a reason, of %d", meshes[m], ok, refused, n);
        autopart_experts_free(ex, n);
        autopart_pricer_free(&pr);
        shard_state_free(scratch);
    }
    ir_free(g);
}

/* The search with the experts as seeds, at a budget that covers them: never
 * slower than the best expert that fits, for 3 seeds, on zoo models and on a
 * user's graph, meshes of 1 to 4 axes. */
static void never_below_the_experts(void)
{
    struct {
        const char *model, *mesh;
    } cases[] = {
        {"gpt-tiny", "a=2,b=2,c=2"},
        {"gpt:layers=2,hidden=256,heads=8,seq=64,batch=16,vocab=512", "batch=4,model=2"},
        {"mlp:layers=4,batch=64,in=512,hidden=512,out=512", "x=2,y=2,z=2,w=2"},
        {"tests/graphs/vit-tiny.json", "data=2,model=2"},
        {"tests/graphs/vit-tiny.json", "x=4"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ir_graph *g = strstr(cases[c].model, ".json") ? load_step(cases[c].model) : test_build_step(cases[c].model);
        shard_mesh mesh;
        char err[256];
        shard_mesh_parse(cases[c].mesh, &mesh, err, sizeof err);
        cost_hw hw;
        cost_hw_lookup("a100", &hw, err, sizeof err);
        cost_options opt = {COST_FP32, 0, 0, COST_GRADS_AUTO};
        shard_state *prefix = shard_state_new(g, &mesh);
        autopart_pricer pr;
        autopart_pricer_init(&pr, &hw, &opt, NULL, prefix, err, sizeof err);
        autopart_expert *ex;
        int n = autopart_experts(g, &mesh, NULL, &pr, &ex), best = autopart_best_expert(ex, n);
        const shard_state **seeds = calloc((size_t)n + 1, sizeof *seeds);
        int n_seeds = 0;
        for (int i = 0; i < n; i++)
            if (ex[i].ok) seeds[n_seeds++] = ex[i].st;
        shard_groups *gs = shard_groups_build(g);
        search_evaluator ev = autopart_evaluator;
        ev.cfg = &pr;
        for (uint64_t seed = 1; seed <= 3; seed++) {
            search_budget b = {.simulations = n_seeds + 40, .seed = seed, .threads = 1, .seeds = seeds, .n_seeds = n_seeds};
            search_result r;
            CHECK(search_run(&search_mcts, prefix, gs, &ev, &b, &r, err, sizeof err) == 0);
            if (best >= 0)
                CHECKF(r.best.fits && r.best.step_time <= ex[best].e.step_time, "%s on %s, seed %llu: %.6g s vs expert %s %.6g s",
                       cases[c].model, cases[c].mesh, (unsigned long long)seed, r.best.step_time, ex[best].schedule,
                       ex[best].e.step_time);
        }
        printf("%s on %s: %d experts (%d apply), best %s\n", cases[c].model, cases[c].mesh, n, n_seeds,
               best >= 0 ? ex[best].schedule : "(none fits)");
        free(seeds);
        shard_groups_free(gs);
        autopart_experts_free(ex, n);
        autopart_pricer_free(&pr);
        shard_state_free(prefix);
        ir_free(g);
    }
}

/* autopart_all_experts on three threads: the rows of autopart_experts and
 * autopart_zero_experts on one, in order, at the same prices. */
static void experts_on_threads(void)
{
    ir_graph *g = test_build_step("gpt-tiny");
    shard_mesh mesh;
    char err[256];
    shard_mesh_parse("batch=2,model=2", &mesh, err, sizeof err);
    cost_hw hw;
    cost_hw_lookup("a100", &hw, err, sizeof err);
    cost_options opt = {COST_FP32, 0, 0, COST_GRADS_AUTO};
    shard_state *prefix = shard_state_new(g, &mesh);
    autopart_pricer pr;
    autopart_pricer_init(&pr, &hw, &opt, NULL, prefix, err, sizeof err);
    pr.gather_auto = 1; /* the pricer chooses the gather policy, as autopart's: a per-plan choice to agree on */
    autopart_expert *ex, *zero, *all;
    int n = autopart_experts(g, &mesh, prefix, &pr, &ex), nz = autopart_zero_experts(g, &mesh, prefix, &pr, &zero);
    int na = autopart_all_experts(g, &mesh, prefix, &pr, 3, &all), same = na == n + nz;
    for (int i = 0; same && i < na; i++) {
        const autopart_expert *x = i < n ? &ex[i] : &zero[i - n];
        same = !strcmp(x->schedule, all[i].schedule) && x->ok == all[i].ok && !strcmp(x->why, all[i].why) &&
               x->e.step_time == all[i].e.step_time && x->e.peak_memory == all[i].e.peak_memory &&
               x->e.fits == all[i].e.fits && (!x->ok || x->st->gather_policy == all[i].st->gather_policy);
        CHECKF(same, "row %d: %s %.17g s on one thread, %s %.17g s on three", i, x->schedule, x->e.step_time,
               all[i].schedule, all[i].e.step_time);
    }
    CHECKF(na == n + nz && nz > 0, "%d rows on three threads, %d + %d on one", na, n, nz);
    autopart_experts_free(ex, n);
    autopart_experts_free(zero, nz);
    autopart_experts_free(all, na);
    autopart_pricer_free(&pr);
    shard_state_free(prefix);
    ir_free(g);
}

/* A U-Net over two axes: the experts tile the image in two dimensions
 * (rows over one axis, columns over the other, both ways), both apply, and
 * the search's budget gets each as its group actions, which applied to the
 * prefix reach the expert's own state (the local search's re-base writes a
 * seed out as them, search/mcts.c); the tilings with data parallelism over
 * the other axes are not group actions alone. */
static void tiles_in_two_dims(void)
{
    char err[512];
    shard_mesh mesh;
    cost_hw hw;
    autopart_step s;
    memset(&s, 0, sizeof s);
    CHECK(shard_mesh_parse("x=2,y=2", &mesh, err, sizeof err) == 0 && cost_hw_preset("a100", &hw, err, sizeof err) == 0);
    ir_graph *g = test_build_step("unet:levels=2,base=4,size=16,batch=2,in=2,out=2");
    schedule none;
    memset(&none, 0, sizeof none);
    cost_options o = {.precision = COST_MIXED_BF16};
    int rc = autopart_step_setup(&s, g, &mesh, &none, &hw, &o, 1, err, sizeof err);
    search_budget b = {.simulations = 30, .seed = 1, .threads = 1};
    rc = rc ? rc : autopart_step_search(&s, &search_mcts, &b, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    const char *want[] = {"group:image:1:y,group:image:2:x", "group:image:1:x,group:image:2:y"};
    int found = 0, expanded = 0, whole = 0;
    for (int i = 0, k = 0; rc == 0 && i < s.n_ex; i++) {
        if (!s.ex[i].ok) continue;
        int n = s.b.seed_actions ? s.b.seed_action_at[k + 1] - s.b.seed_action_at[k] : 0;
        for (int w = 0; w < 2; w++)
            if (!strncmp(s.ex[i].schedule, want[w], strlen(want[w]))) {
                found |= 1 << w;
                CHECKF(n == 2, "%s: %d group actions", s.ex[i].schedule, n);
            }
        if (strstr(s.ex[i].schedule, "dp:")) CHECKF(n == 0, "%s: %d group actions", s.ex[i].schedule, n);
        if (n > 0) { /* its actions on the prefix reach its state */
            expanded++;
            shard_state *st = shard_state_new_like(s.prefix);
            shard_state_copy(st, s.prefix);
            for (int j = 0; j < n; j++) {
                int a = s.b.seed_actions[s.b.seed_action_at[k] + j];
                shard_group_apply(st, s.gs, a / mesh.n_axes, a % mesh.n_axes);
            }
            whole += shard_state_hash(st) == shard_state_hash(s.ex[i].st);
            CHECKF(shard_state_hash(st) == shard_state_hash(s.ex[i].st), "%s: its actions reach another state", s.ex[i].schedule);
            shard_state_free(st);
        }
        k++;
    }
    CHECKF(found == 3, "two-dimensional tilings found: %#x", found);
    printf("unet over x=2,y=2: %d experts, %d written out as group actions (%d reach the expert's state)\n", s.n_ex, expanded,
           whole);
    autopart_step_free(&s);
}

int main(void)
{
    batch_from_the_loss();
    megatron_on_a_user_graph();
    experts_use_every_axis();
    experts_on_threads();
    never_below_the_experts();
    tiles_in_two_dims();
    return test_done();
}
