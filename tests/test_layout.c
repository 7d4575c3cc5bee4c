/* test_layout.c - autopart's layout level (autopart/layout.h): a
 * configuration as a mesh and a schedule, its price against carve cost's,
 * the level's choice (the best row it priced, whatever the threads), the
 * exhaustive grid's rows, and a whole autopart over two nodes whose plan is
 * a cut of the hardware's devices that replays. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "session/session.h"
#include "tests/test.h"
#include "tests/util.h"

#define SPEC "gpt:layers=8,hidden=256,heads=8,seq=256,batch=64,vocab=1024,dropout=0.1"

typedef struct builder {
    const char *spec;
} builder;

/* A level over mesh_text for SPEC on the a100 preset in fp16. */
static void level(autopart_layout_level *L, builder *bd, shard_mesh *mesh, cost_hw *hw, const char *mesh_text)
{
    char err[256];
    bd->spec = SPEC;
    CHECK(shard_mesh_parse(mesh_text, mesh, err, sizeof err) == 0 && cost_hw_preset("a100", hw, err, sizeof err) == 0);
    memset(L, 0, sizeof *L);
    L->mesh = mesh;
    L->build = session_spec_step;
    L->build_ctx = (void *)bd->spec;
    L->hw = hw;
    L->opt = (cost_options){COST_MIXED_FP16, 0, 0, COST_GRADS_AUTO};
    L->algo = search_algo_find("mcts");
    L->b = (search_budget){.simulations = 40, .seed = 1, .threads = 1};
    L->batch = 64;
    L->n_layers = 8;
    L->layer_params = 8 * (12.0 * 256 * 256 + 13 * 256);
    L->sp_ok = L->tp_ok = 1;
    L->keep = 1;
}

/* A configuration's mesh, label and schedule; its price is carve cost's
 * price of that schedule on that mesh (pipelines: at the even split). */
static void test_config(void)
{
    autopart_layout_config c = {.tp = 4, .pp = 2, .dp = 2, .mbs = 2, .m = 16, .chunks = 2, .remat = AUTOPART_REMAT_ATTN, .sp = 1,
                                .overlap = 1, .zero = 1};
    shard_mesh m;
    char buf[256], err[512];
    autopart_layout_mesh(&c, &m);
    CHECK(!strcmp(shard_mesh_str(&m, buf, sizeof buf), "pipe=2,data=2,model=4"));
    autopart_layout_label(&c, buf, sizeof buf);
    CHECKF(!strcmp(buf, "pipeline:pipe:16:interleaved-2,remat:attn,zero1:data,megatron:model,sp:model,overlap:model"), "%s", buf);
    autopart_layout_config one = {.tp = 1, .pp = 1, .dp = 16, .mbs = 2, .m = 2, .chunks = 1};
    autopart_layout_mesh(&one, &m);
    autopart_layout_label(&one, buf, sizeof buf);
    CHECKF(!strcmp(buf, "microbatch:2,dp:data"), "%s", buf);
    /* the price: the schedule as carve cost prices it, the layers split evenly */
    autopart_layout_level L;
    builder bd;
    shard_mesh hwm;
    cost_hw hw;
    level(&L, &bd, &hwm, &hw, "node=2,gpu=8");
    autopart_layout_row r;
    autopart_layout_price(&L, &c, 0, &r);
    CHECKF(r.ok, "%s", r.why);
    autopart_layout_mesh(&c, &m);
    schedule tail, sc;
    autopart_config gc = autopart_layout_graph(&c);
    CHECK(autopart_layout_tail(&c, &tail, err, sizeof err) == 0 && autopart_config_schedule(&gc, NULL, 0, &tail, &sc, err, sizeof err) == 0);
    sc.n--; /* auto */
    ir_graph *g = session_spec_step((void *)bd.spec, &m, &sc, "test", err, sizeof err);
    CHECKF(g != NULL, "%s", err);
    if (!g) return;
    shard_state *st = shard_state_new(g, &m);
    CHECK(sched_apply(&sc, st, err, sizeof err) == 0);
    pipe_spec ps;
    CHECK(sched_pipeline_step(&sc, g, &m, &ps, err, sizeof err) == 1 && ps.chunks == 2 && ps.microbatches == 16);
    pipe_split_even(&ps, g->n_layers);
    ps.split_auto = 0;
    cost_ws *ws = cost_ws_new(g);
    cost_estimate e;
    pipe_program pp;
    memset(&pp, 0, sizeof pp);
    L.opt.overlap = 0;
    CHECK(cost_price_plan(ws, st, &ps, NULL, &hw, &L.opt, &pp, &e, NULL, err, sizeof err) == 0);
    CHECKF(e.step_time == r.e.step_time && e.peak_memory == r.e.peak_memory, "level %.9g s %.6g B, carve cost %.9g s %.6g B",
           r.e.step_time, r.e.peak_memory, e.step_time, e.peak_memory);
    CHECKF(st->overlap_axes == 1u << 2 && pp.prog->opts.overlap_axes == 1u << 2 && e.comm_hidden > 0, "overlap:model %#x, %g s hidden",
           st->overlap_axes, e.comm_hidden);
    pipe_program_free(&pp);
    cost_ws_free(ws);
    shard_state_free(st);
    ir_free(g);
}

/* The level: its searched configuration is the best row it priced (a row
 * that fits first), the same on one thread and on two, and its plan fits;
 * the rows of a layout's heavier recomputations are there only where a
 * lighter one did not fit. */
static void test_level(void)
{
    autopart_layout_level L;
    builder bd;
    shard_mesh hwm;
    cost_hw hw;
    level(&L, &bd, &hwm, &hw, "node=2,gpu=8");
    autopart_layout_config cfg[2][2];
    double t[2] = {0, 0};
    for (int threads = 1; threads <= 2; threads++) {
        L.threads = threads;
        autopart_layout_row *rows = NULL;
        autopart_step out[2];
        int n_rows = 0, n_out = 0;
        char why[256] = "";
        int best = autopart_layout_search(&L, &rows, &n_rows, out, cfg[threads - 1], &n_out, why, sizeof why);
        CHECKF(best == 0 && n_out == 1 && out[0].ok && out[0].e.fits, "%d threads: best %d of %d: %s %s", threads, best, n_out, why,
               n_out ? out[0].why : "");
        int b = autopart_layout_best(rows, n_rows);
        CHECKF(b >= 0 && !memcmp(&rows[b].c, &cfg[threads - 1][0], sizeof rows[b].c), "%d threads: searched a row that is not the best of %d",
               threads, n_rows);
        if (best == 0) t[threads - 1] = out[0].e.step_time;
        /* the searched plan is the configuration's (or better), priced with the cost model's split */
        CHECKF(b >= 0 && best == 0 && out[0].e.step_time <= rows[b].e.step_time * (1 + 1e-9), "searched %.6g s, its row %.6g s",
               best == 0 ? out[0].e.step_time : 0, b >= 0 ? rows[b].e.step_time : 0);
        for (int i = 0; i < n_out; i++) autopart_step_free(&out[i]);
        free(rows);
    }
    CHECKF(t[0] == t[1] && !memcmp(&cfg[0][0], &cfg[1][0], sizeof cfg[0][0]), "one thread %.9g s, two %.9g s", t[0], t[1]);
    char d[256];
    printf("layout level over node=2,gpu=8: %s, %.4g ms\n", autopart_layout_describe(&cfg[0][0], d, sizeof d), 1e3 * t[0]);
}

/* The grid: every row is a layout of the devices; a layout's heavier
 * recomputation is priced only where the lighter one did not fit; no row is
 * better than the grid's best. */
static void test_grid(void)
{
    autopart_layout_level L;
    builder bd;
    shard_mesh hwm;
    cost_hw hw;
    level(&L, &bd, &hwm, &hw, "gpu=8");
    L.opt.memory_capacity = 0.6 * 1073741824.0; /* so that some need recomputation */
    autopart_layout_row *rows = NULL;
    int n = autopart_layout_grid(&L, 1, 1, 0, &rows), bad = 0, heavier = 0, b = autopart_layout_best(rows, n);
    for (int i = 0; i < n; i++) {
        const autopart_layout_config *c = &rows[i].c;
        bad += c->tp * c->pp * c->dp != 8 || !rows[i].ok;
        if (c->remat == AUTOPART_REMAT_NONE || !rows[i].ok) continue;
        heavier++;
        int lighter_fits = 0; /* the same configuration one recomputation lighter */
        for (int j = 0; j < n; j++) {
            autopart_layout_config x = rows[j].c;
            static const autopart_remat prev[] = {[AUTOPART_REMAT_ATTN] = AUTOPART_REMAT_NONE,
                                                  [AUTOPART_REMAT_SELECTIVE] = AUTOPART_REMAT_ATTN,
                                                  [AUTOPART_REMAT_FULL] = AUTOPART_REMAT_SELECTIVE};
            x.remat = c->remat;
            if (!memcmp(&x, c, sizeof x) && rows[j].c.remat == prev[c->remat] && rows[j].e.fits) lighter_fits = 1;
        }
        bad += lighter_fits;
    }
    CHECKF(n > 20 && bad == 0 && heavier > 0 && b >= 0, "%d rows, %d bad, %d with recomputation", n, bad, heavier);
    for (int i = 0; i < n && b >= 0; i++) bad += rows[i].ok && autopart_better(&rows[i].e, &rows[b].e);
    CHECK(bad == 0);
    free(rows);
}

/* carve autopart over two nodes as a user runs it: the plan's mesh is a cut
 * of the 16 devices, its schedule starts with the layout's tactics, and the
 * plan file replays (session_plan_open checks every derived field). */
static void test_session(void)
{
    static session_autopart a;
    char err[1024], path[] = "/tmp/carve_test_layout_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    memset(&a, 0, sizeof a);
    a.src = (session_source){.model = SPEC, .optimizer = "adam"};
    session_pricing pricing = {"a100", "fp16", NULL, 0, 0};
    CHECK(shard_mesh_parse("node=2,gpu=8", &a.mesh, err, sizeof err) == 0 && sched_parse("auto", &a.mesh, &a.sc, err, sizeof err) == 0 &&
          session_cost_options(&pricing, &a.hw, &a.opt, err, sizeof err) == 0);
    a.algo = search_algo_find("mcts");
    a.b = (search_budget){.simulations = 60, .seed = 1, .threads = 1};
    a.memory_tactics = 1;
    a.out = path;
    int rc = session_autopart_run(&a, err, sizeof err);
    CHECKF(rc == 0 && a.written, "%s %s", err, a.save_err);
    CHECKF(a.n_layout_rows > 0 && a.layout_first < a.n_steps && !a.layout_why[0], "the layout level did not run: %s", a.layout_why);
    if (rc == 0 && a.chosen >= a.layout_first) {
        char ms[64];
        CHECKF(strcmp(shard_mesh_str(&a.pl.mesh, ms, sizeof ms), "node=2,gpu=8") && a.pl.mesh.n_devices == 16, "plan mesh %s", ms);
    }
    printf("autopart over node=2,gpu=8: %s on mesh chosen from step %d (layouts from %d): %.4g ms\n", a.schedule, a.chosen,
           a.layout_first, rc == 0 ? 1e3 * a.steps[a.chosen].e.step_time : 0);
    session_autopart_free(&a);
    plan pl;
    ir_graph *g = NULL;
    shard_state *st = NULL;
    CHECKF(session_plan_open(path, &pl, &g, &st, err, sizeof err) == 0, "%s", err);
    if (g) {
        shard_state_free(st);
        ir_free(g);
        plan_free(&pl);
    }
    /* --layouts none, a schedule with manual tactics, one node's named axes: the level does not run, and says why */
    static const struct {
        const char *mesh, *sched;
        int layouts;
        const char *why;
    } off[] = {{"node=2,gpu=8", "auto", SESSION_PIPELINE_NONE, "--layouts none"},
               {"node=2,gpu=8", "dp:node,auto", SESSION_PIPELINE_AUTO, "manual tactics"},
               {"data=4,model=2", "auto", SESSION_PIPELINE_AUTO, "one node"}};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
        memset(&a, 0, sizeof a);
        a.src = (session_source){.model = SPEC, .optimizer = "adam"};
        CHECK(shard_mesh_parse(off[i].mesh, &a.mesh, err, sizeof err) == 0 && sched_parse(off[i].sched, &a.mesh, &a.sc, err, sizeof err) == 0 &&
              session_cost_options(&pricing, &a.hw, &a.opt, err, sizeof err) == 0);
        a.algo = search_algo_find("mcts");
        a.b = (search_budget){.simulations = 20, .seed = 1, .threads = 1};
        a.layouts = off[i].layouts;
        rc = session_autopart_run(&a, err, sizeof err);
        CHECKF(rc == 0 && a.n_layout_rows == 0 && strstr(a.layout_why, off[i].why), "%s %s: '%s'", off[i].mesh, off[i].sched, a.layout_why);
        session_autopart_free(&a);
    }
    unlink(path);
}

int main(void)
{
    test_config();
    test_level();
    test_grid();
    test_session();
    return test_done();
}
