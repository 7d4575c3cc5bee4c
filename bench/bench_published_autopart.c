/* bench_published_autopart.c - autopart against the configurations that
 * Megatron-LM's authors tuned by hand and published (issue 47).
 *
 * Each row is a published training run on A100 80 GB nodes (8 GPUs a node
 * over NVLink, HDR InfiniBand between nodes: the a100 preset): Narayanan et
 * al., SC 2021, Table 1 (1.7B to 1T on up to 3072 GPUs; the configurations
 * from Megatron-LM's examples/sc21/run_table_1.sh: TP, PP, micro-batch size,
 * interleaving, full recomputation, fp16) and Korthikanti et al., 2022,
 * Table 5 (22B to 1T; tensor parallel 8, pipeline parallel as published,
 * sequence parallelism and selective recomputation of the attention core;
 * priced in bf16 as bench_published prices the 22B).  The model, the GPU
 * count, the cluster, the global batch, the sequence (2048), the vocabulary
 * (51200), Adam, the precision and Megatron-LM's dropout (0.1) are fixed;
 * everything the authors chose is left to `carve autopart` at its default
 * options, given the bare hardware (--mesh node=N,gpu=8; gpu=8 for one node).
 *
 * Per row it prints: the published configuration priced by carve (the same
 * pricing as the layout level's: autopart/layout.h, the even layer split
 * Megatron-LM uses; where the paper leaves a choice open, every reading is
 * priced and the fastest that fits is the published price: the micro-batch
 * size of the 22B, the pipeline schedule of Table 5's pipelined rows),
 * autopart's plan, the ratio, the search's wall and CPU seconds, the memory
 * per device, and what autopart did differently.  With --grid, the
 * exhaustive 3D grid of issue 47 (every TP x PP x DP split with TP inside a
 * node, interleaving up to 4, micro-batches of 1, 2, 4 sequences, and the
 * whole replica batch without a pipeline, recomputation none, selective,
 * full, ZeRO-1 off and on; each priced with the cost model's balanced split
 * as carve cost prices it; a heavier recomputation priced only where the
 * lighter does not fit, since it only adds work) against autopart.
 * Usage: bench_published_autopart [--smoke] [--grid | --grid-only] [--run] [--only I,J,...]
 * (--grid-only: the published configurations and the grid, without autopart)
 * Prints markdown; the bench's own checks: autopart's plan fits, and a
 * published configuration priced twice has one price.  Never a time, nor
 * the targets (reported, not judged).
 */
#include "bench/bench_util.h"
#include "models/models.h"
#include "session/session.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

typedef struct row {
    const char *source, *name;
    int layers, hidden, heads, batch, gpus;
    int tp, pp, mbs;      /* published */
    int chunks;           /* 1: 1F1B, v: interleaved; 0: not published (every reading priced) */
    autopart_remat remat; /* full (SC21), or attention only with sequence parallelism (Korthikanti et al.) */
    int sp;
    cost_precision precision;
    double measured_s;    /* the published step time (the source's FLOPs over its throughput), for reference */
} row;

#define SEQ 2048
#define VOCAB 51200
#define SC21 "Narayanan et al. SC21, Table 1"
#define K22 "Korthikanti et al. 2022, Table 5"
#define FULL AUTOPART_REMAT_FULL
#define ATTN AUTOPART_REMAT_ATTN

/* SC21 Table 1 (measured: model FLOPs, eq. 3 with recomputation, over GPUs x published TFLOP/s; bench_published)
 * and Korthikanti et al. Table 5 ("present work" iteration times; micro-batch size 0: not published). */
static const row rows[] = {
    {SC21, "GPT 1.7B", 24, 2304, 24, 512, 32, 1, 1, 16, 1, FULL, 0, COST_MIXED_FP16, 0},
    {SC21, "GPT 3.6B", 30, 3072, 32, 512, 64, 2, 1, 16, 1, FULL, 0, COST_MIXED_FP16, 0},
    {SC21, "GPT 7.5B", 36, 4096, 32, 512, 128, 4, 1, 16, 1, FULL, 0, COST_MIXED_FP16, 0},
    {SC21, "GPT 18.4B", 40, 6144, 48, 1024, 256, 8, 1, 8, 1, FULL, 0, COST_MIXED_FP16, 0},
    {SC21, "GPT 39.1B", 48, 8192, 64, 1536, 512, 8, 2, 4, 1, FULL, 0, COST_MIXED_FP16, 0},
    {SC21, "GPT 76.1B", 60, 10240, 80, 1792, 1024, 8, 4, 2, 3, FULL, 0, COST_MIXED_FP16, 0},
    {SC21, "GPT 145.6B", 80, 12288, 96, 2304, 1536, 8, 8, 2, 2, FULL, 0, COST_MIXED_FP16, 0},
    {SC21, "GPT 310.1B", 96, 16384, 128, 2160, 1920, 8, 16, 1, 2, FULL, 0, COST_MIXED_FP16, 0},
    {SC21, "GPT 529.6B", 105, 20480, 128, 2520, 2520, 8, 35, 1, 3, FULL, 0, COST_MIXED_FP16, 0},
    {SC21, "GPT 1008B", 128, 25600, 160, 3072, 3072, 8, 64, 1, 1, FULL, 0, COST_MIXED_FP16, 0},
    {K22, "GPT 22B", 48, 6144, 64, 4, 8, 8, 1, 0, 1, ATTN, 1, COST_MIXED_BF16, 1.10},
    {K22, "GPT 175B", 96, 12288, 96, 64, 64, 8, 8, 1, 0, ATTN, 1, COST_MIXED_BF16, 13.75},
    {K22, "GPT 530B", 105, 20480, 128, 280, 280, 8, 35, 1, 0, ATTN, 1, COST_MIXED_BF16, 37.83},
    {K22, "GPT 1T", 128, 25600, 160, 512, 512, 8, 64, 1, 0, ATTN, 1, COST_MIXED_BF16, 71.49},
};
#define N_ROWS ((int)(sizeof rows / sizeof rows[0]))

/* Smoke mode: two small rows of the same shape, seconds. */
static const row smoke_rows[] = {
    {SC21, "GPT (smoke, 2 nodes)", 8, 512, 8, 64, 16, 8, 2, 2, 1, FULL, 0, COST_MIXED_FP16, 0},
    {K22, "GPT (smoke, 1 node)", 4, 512, 8, 8, 8, 8, 1, 0, 1, ATTN, 1, COST_MIXED_BF16, 0},
};

static double cpu_seconds(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec + (double)u.ru_stime.tv_sec +
           1e-6 * (double)u.ru_stime.tv_usec;
}

static void model_spec(const row *r, char *buf, size_t n)
{
    snprintf(buf, n, "gpt:layers=%d,hidden=%d,heads=%d,seq=%d,batch=%d,vocab=%d,dropout=0.1", r->layers, r->hidden, r->heads,
             SEQ, r->batch, VOCAB);
}

static void hw_mesh(const row *r, char *buf, size_t n)
{
    if (r->gpus <= 8) snprintf(buf, n, "gpu=%d", r->gpus);
    else snprintf(buf, n, "node=%d,gpu=8", r->gpus / 8);
}

/* ---- the layout level's pricing, for the published configurations and the grid ---- */

typedef struct builder {
    char spec[256];
} builder;

/* A level for row r: its model (built by bd), mesh and profile. */
static int level_for(const row *r, builder *bd, shard_mesh *mesh, cost_hw *hw, autopart_layout_level *L, char *err, size_t errlen)
{
    char m[64];
    model_spec(r, bd->spec, sizeof bd->spec);
    hw_mesh(r, m, sizeof m);
    if (shard_mesh_parse(m, mesh, err, errlen) < 0 || cost_hw_preset("a100", hw, err, errlen) < 0) return -1;
    memset(L, 0, sizeof *L);
    L->mesh = mesh;
    L->build = session_spec_step;
    L->build_ctx = bd->spec;
    L->hw = hw;
    L->opt = (cost_options){r->precision, 0, 0, COST_GRADS_AUTO};
    L->batch = r->batch;
    L->n_layers = r->layers;
    /* the layers' params: 12 h^2 + 13 h per GPT block (q, k, v, o with biases, the 4h MLP, two norms) */
    L->layer_params = (double)r->layers * (12.0 * r->hidden * r->hidden + 13.0 * r->hidden);
    L->sp_ok = L->tp_ok = 1;
    return 0;
}

/* The published configuration of r priced: every reading of what the
 * paper leaves open, the fastest that fits kept (else the smallest peak).
 * *best receives it; returns how many readings were priced. */
static int price_published(const autopart_layout_level *L, const row *r, autopart_layout_row *best)
{
    int dp = r->gpus / (r->tp * r->pp), n = 0, have = 0;
    for (int mbs = 1; mbs <= r->batch / dp; mbs *= 2) {
        if (r->mbs && mbs != r->mbs) continue;
        if ((r->batch / dp) % mbs) continue;
        for (int v = 1; v <= (r->chunks ? 1 : AUTOPART_LAYOUT_CHUNKS); v++) {
            /* Korthikanti et al. overlap the backward's second all-gather with the input gradient's GEMM: priced with
               all of the tensor-parallel communication overlapped, the most favourable reading */
            autopart_layout_config c = {.tp = r->tp, .pp = r->pp, .dp = dp, .mbs = mbs, .m = r->batch / (dp * mbs),
                                        .chunks = r->chunks ? r->chunks : v, .remat = r->remat, .sp = r->sp, .overlap = r->sp};
            if (r->pp < 2) c.chunks = 1;
            if (c.chunks > 1 && (c.m % c.pp || c.chunks * c.pp > r->layers)) continue;
            if (r->pp < 2 && v > 1) continue;
            autopart_layout_row x;
            autopart_layout_price(L, &c, 0, &x);
            n++;
            if (x.ok && (!have || autopart_better(&x.e, &best->e))) *best = x, have = 1;
        }
    }
    if (!have) memset(best, 0, sizeof *best);
    return n;
}

/* ---- what autopart did differently ---------------------------------------------- */

static void differ(const autopart_layout_config *p, const autopart_layout_config *a, char *buf, size_t n)
{
    static const char *const remat[] = {[AUTOPART_REMAT_NONE] = "none", [AUTOPART_REMAT_SELECTIVE] = "selective (remat:all)",
                                        [AUTOPART_REMAT_FULL] = "full", [AUTOPART_REMAT_ATTN] = "attention only"};
    buf[0] = 0;
#define SAY(...)                                                                                                            \
    do {                                                                                                                    \
        size_t k_ = strlen(buf);                                                                                            \
        snprintf(buf + k_, n - k_, "%s", k_ ? "; " : "");                                                                   \
        k_ = strlen(buf);                                                                                                   \
        snprintf(buf + k_, n - k_, __VA_ARGS__);                                                                            \
    } while (0)
    if (a->tp != p->tp) SAY("tensor parallel %d instead of %d", a->tp, p->tp);
    if (a->pp != p->pp) SAY("pipeline %d instead of %d", a->pp, p->pp);
    if (a->dp != p->dp) SAY("data parallel %d instead of %d", a->dp, p->dp);
    if (a->mbs != p->mbs) SAY("micro-batch %d (%d micro-batches) instead of %d (%d)", a->mbs, a->m, p->mbs, p->m);
    const char *sa = a->chunks > 1 ? "interleaved" : "1F1B", *sp = p->pp < 2 ? "no pipeline" : p->chunks > 1 ? "interleaved" : "1F1B";
    if (a->pp > 1 && strcmp(sa, sp)) SAY("%s instead of %s", sa, sp);
    if (a->pp > 1 && a->chunks > 1 && a->chunks != p->chunks) SAY("%d chunks a device", a->chunks);
    if (a->remat != p->remat)
        SAY("recomputation %s instead of %s", remat[a->remat], remat[p->remat]);
    if ((a->sp && a->tp > 1) != (p->sp && p->tp > 1)) SAY("%s", a->sp && a->tp > 1 ? "sequence parallel" : "no sequence parallelism");
    if (a->zero != p->zero) SAY("%s", a->zero ? (a->zero == 2 ? "ZeRO-2 over data" : "ZeRO-1 over data") : "no ZeRO");
    if (a->pp > 1) SAY("layers split by the cost model (balanced), not evenly");
    if (!buf[0]) SAY("the same configuration");
#undef SAY
}

/* ---- the same plan shape, scaled down, run -------------------------------------- */

/* c scaled to what this machine runs on simulated devices: TP, PP and DP
 * cut to at most 4, 4 and 2, the same schedule, interleaving,
 * recomputation, sequence parallelism, overlap and ZeRO stage; a GPT of one
 * layer a virtual stage (two without a pipeline), hidden 64, 4 heads,
 * sequence 32, micro-batches of at most 2 sequences, 2 a stage.  Writes the
 * model spec and the scaled configuration. */
static void scale_down(const autopart_layout_config *c, char *spec, size_t n, autopart_layout_config *s)
{
    *s = *c;
    s->tp = c->tp >= 4 ? 4 : c->tp;
    s->pp = c->pp > 4 ? 4 : c->pp;
    s->dp = c->dp > 2 ? 2 : c->dp;
    s->mbs = c->mbs > 2 ? 2 : c->mbs;
    s->m = c->pp > 1 ? 2 * s->pp : (c->m > 1 ? 2 : 1);
    int layers = c->pp > 1 ? s->pp * s->chunks : 2;
    snprintf(spec, n, "gpt:layers=%d,hidden=64,heads=4,seq=32,batch=%d,vocab=128,dropout=0.1", layers, s->dp * s->mbs * s->m);
}

/* Runs the scaled plan of c with `carve run` (one step, checked against the
 * single-device step); prints what it ran and whether it passed.  Returns 1
 * when the check passed. */
static int run_scaled(const char *name, const autopart_layout_config *c)
{
    char spec[256], mesh[96], sched[256], cmd[1024], line[512];
    autopart_layout_config s;
    scale_down(c, spec, sizeof spec, &s);
    shard_mesh m;
    autopart_layout_mesh(&s, &m);
    shard_mesh_str(&m, mesh, sizeof mesh);
    autopart_layout_label(&s, sched, sizeof sched);
    const char *carve = getenv("CARVE_BIN") ? getenv("CARVE_BIN") : "build/carve";
    snprintf(cmd, sizeof cmd, "%s run --model '%s' --mesh %s --schedule '%s' --steps 1 2>&1", carve, spec, mesh,
             sched[0] ? sched : "dp:data");
    double t0 = bench_now();
    FILE *f = popen(cmd, "r");
    int passed = 0;
    while (f && fgets(line, sizeof line, f)) passed |= !strncmp(line, "check: passed", 13);
    int rc = f ? pclose(f) : -1;
    passed &= rc == 0;
    printf("| %s | `%s` | `%s` | `%s` | %lld | %s | %.1f s |\n", name, spec, mesh, sched[0] ? sched : "dp:data",
           (long long)m.n_devices, passed ? "check: passed" : "FAILED", bench_now() - t0);
    fflush(stdout);
    bench_check(passed, "%s: the scaled-down plan runs and passes its check (%s)", name, cmd);
    return passed;
}

/* ---- one row -------------------------------------------------------------------- */

typedef struct result {
    double published_s, autopart, wall, cpu, memory, grid_best;
    int fits, grid_n, grid_fit;
    int has_layout;                 /* autopart's plan is a layout level's configuration: */
    autopart_layout_config layout;  /* this one */
    autopart_layout_config published; /* the published configuration (its reading priced) */
} result;

static session_autopart ap; /* large: one at a time */

/* The exhaustive grid on r's level: its best configuration printed
 * against autopart's step (autopart_s; NAN: not run, the grid against the
 * published price pub_s instead).  Fills out's grid fields. */
static void grid_row(autopart_layout_level *L, const row *r, double autopart_s, double pub_s, result *out)
{
    autopart_layout_row *g = NULL;
    double g0 = bench_now(), gc0 = cpu_seconds();
    L->threads = 2;
    int n = autopart_layout_grid(L, 0, 0, 1, &g), b = autopart_layout_best(g, n), fit = 0;
    for (int k = 0; k < n; k++) fit += g[k].ok && g[k].e.fits;
    out->grid_n = n;
    out->grid_fit = fit;
    char gdesc[256] = "none fits";
    if (b >= 0) {
        autopart_layout_describe(&g[b].c, gdesc, sizeof gdesc);
        out->grid_best = g[b].e.step_time;
    }
    double wall = bench_now() - g0, cpu = cpu_seconds() - gc0;
    fprintf(stderr, "%s: grid of %d configurations (%d fit) in %.0f s (%.0f s CPU)\n", r->name, n, fit, wall, cpu);
    if (isfinite(autopart_s))
        printf("|   | grid | %s | %d configurations priced, %d fit | best: %s | %.3f s | autopart / grid **%.3f** | %.0f / %.0f | | |\n",
               r->name, n, fit, gdesc, out->grid_best, autopart_s / out->grid_best, wall, cpu);
    else
        printf("| %s | %d configurations priced, %d fit | best: %s | %.3f s | grid / published **%.3f** | %.0f / %.0f |\n", r->name,
               n, fit, gdesc, out->grid_best, out->grid_best / pub_s, wall, cpu);
    fflush(stdout);
    free(g);
}

/* Runs default autopart on r (a user's command: carve autopart --model
 * SPEC --mesh node=N,gpu=8 --hw a100 --precision P) and prints its table
 * row against pub, the published configuration priced. */
static int autopart_row(int i, const row *r, const autopart_layout_row *pub, int readings, result *out)
{
    char err[1024], spec[256], mesh_text[64], pdesc[256], adesc[SCHED_STR_MAX + 128], diff[1280];
    model_spec(r, spec, sizeof spec);
    hw_mesh(r, mesh_text, sizeof mesh_text);
    autopart_layout_describe(&pub->c, pdesc, sizeof pdesc);
    memset(&ap, 0, sizeof ap);
    ap.src = (session_source){.model = spec, .optimizer = "adam"};
    session_pricing pricing = {"a100", cost_precision_name(r->precision), NULL, 0, 0};
    if (shard_mesh_parse(mesh_text, &ap.mesh, err, sizeof err) < 0 || sched_parse("auto", &ap.mesh, &ap.sc, err, sizeof err) < 0 ||
        session_cost_options(&pricing, &ap.hw, &ap.opt, err, sizeof err) < 0) {
        fprintf(stderr, "bench_published_autopart: %s: %s\n", r->name, err);
        return -1;
    }
    ap.algo = search_algo_find("mcts");
    ap.b = (search_budget){.simulations = SEARCH_AUTO_CAP, .converge = 1, .seed = 1, .threads = 1};
    ap.memory_tactics = 1;
    double t0 = bench_now(), c0 = cpu_seconds();
    int rc = session_autopart_run(&ap, err, sizeof err);
    double wall = bench_now() - t0, cpu = cpu_seconds() - c0;
    if (rc < 0) {
        fprintf(stderr, "bench_published_autopart: %s: autopart: %s\n", r->name, err);
        session_autopart_free(&ap);
        return -1;
    }
    session_autopart_explain(&ap);
    const autopart_step *s = &ap.steps[ap.chosen];
    int from_layout = ap.chosen >= ap.layout_first && ap.chosen < ap.layout_first + 2 && ap.layout_first < ap.n_steps;
    if (from_layout) {
        const autopart_layout_config *c = &ap.layout_configs[ap.chosen - ap.layout_first];
        autopart_layout_describe(c, adesc, sizeof adesc);
        differ(&pub->c, c, diff, sizeof diff);
    } else {
        snprintf(adesc, sizeof adesc, "%s on %s", ap.schedule, shard_mesh_str(&s->st->mesh, mesh_text, sizeof mesh_text));
        snprintf(diff, sizeof diff, "not a Megatron layout of the hardware's devices: %s", ap.x.practice);
    }
    double ratio = pub->ok ? s->e.step_time / pub->e.step_time : NAN;
    printf("| %d | %s | %s | %d | %s: %.3f s, %.1f GiB%s%s | %s | **%.3f s** | **%.3f** | %.1f / %.1f | %.1f%s | %s. In practice's words: %s |\n", i + 1,
           r->source, r->name, r->gpus, pdesc, pub->e.step_time, pub->e.peak_memory / 1073741824.0, pub->e.fits ? "" : " (does not fit)",
           readings > 1 ? " (best of the readings)" : "", adesc, s->e.step_time, ratio, wall, cpu, s->e.peak_memory / 1073741824.0,
           s->e.fits ? "" : " (does not fit)", diff, ap.x.practice);
    fflush(stdout);
    bench_check(s->ok && s->e.fits, "%s: autopart's plan fits (%.4g GiB)", r->name, s->e.peak_memory / 1073741824.0);
    *out = (result){pub->e.step_time, s->e.step_time, wall, cpu, s->e.peak_memory, NAN, s->e.fits, 0, 0, from_layout, {0}, pub->c};
    if (from_layout) out->layout = ap.layout_configs[ap.chosen - ap.layout_first];
    session_autopart_free(&ap);
    return 0;
}

/* Row r: the published configuration priced, then default autopart
 * (unless grid == 2: the grid alone), then the grid (grid >= 1). */
static int run_row(int i, const row *r, int grid, result *out)
{
    char err[1024];
    builder bd;
    shard_mesh mesh;
    cost_hw hw;
    autopart_layout_level L;
    if (level_for(r, &bd, &mesh, &hw, &L, err, sizeof err) < 0) {
        fprintf(stderr, "bench_published_autopart: %s: %s\n", r->name, err);
        return -1;
    }
    autopart_layout_row pub, again;
    int readings = price_published(&L, r, &pub);
    autopart_layout_price(&L, &pub.c, 0, &again);
    bench_check(pub.ok && again.ok && again.e.step_time == pub.e.step_time && again.e.peak_memory == pub.e.peak_memory,
                "%s: the published configuration priced twice: %.6g and %.6g s", r->name, pub.e.step_time, again.e.step_time);
    *out = (result){pub.e.step_time, NAN, NAN, NAN, NAN, NAN, 0, 0, 0, 0, {0}, pub.c};
    if (grid != 2 && autopart_row(i, r, &pub, readings, out) < 0) return -1;
    if (grid) grid_row(&L, r, out->autopart, pub.e.step_time, out);
    return 0;
}

int main(int argc, char **argv)
{
    argc = bench_parse_smoke(argc, argv);
    int grid = 0, run = 0;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--grid")) grid = 1;
        else if (!strcmp(argv[i], "--grid-only")) grid = 2;
        else if (!strcmp(argv[i], "--run")) run = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else {
            fprintf(stderr, "usage: bench_published_autopart [--smoke] [--grid | --grid-only] [--run] [--only I,J,...]\n");
            return 2;
        }
    }
    const row *rs = bench_is_smoke() ? smoke_rows : rows;
    int n = bench_is_smoke() ? 2 : N_ROWS;
    if (bench_is_smoke()) grid = run = 1;
    static result res_of[N_ROWS];
    int done[N_ROWS] = {0};
    if (grid == 2) run = 0; /* no autopart plan to run */
    printf("## autopart against the published configurations (bench_published_autopart)\n\n");
    if (grid == 2)
        printf("| model | the grid | its best configuration | step | grid / published | grid s (wall / CPU) |\n"
               "|---|---|---|---|---|---|\n");
    else
        printf("| # | source | model | GPUs | published configuration, priced by carve | autopart's plan (default options) | step | "
           "autopart / published | search s (wall / CPU) | GiB per device | what autopart did differently |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|\n");
    double ratios[N_ROWS];
    int nr = 0, status = 0;
    for (int i = 0; i < n; i++) {
        if (only) {
            char key[16];
            snprintf(key, sizeof key, ",%d,", i + 1);
            char list[256];
            snprintf(list, sizeof list, ",%s,", only);
            if (!strstr(list, key)) continue;
        }
        result res;
        if (run_row(i, &rs[i], grid, &res) < 0) {
            status = 1;
            continue;
        }
        res_of[i] = res;
        done[i] = 1;
        if (isfinite(res.published_s) && res.published_s > 0 && isfinite(res.autopart)) ratios[nr++] = res.autopart / res.published_s;
    }
    if (nr) {
        double worst = 0;
        for (int i = 0; i < nr; i++) worst = ratios[i] > worst ? ratios[i] : worst;
        printf("\n- rows: %d; median autopart / published **%.3f** (issue 47: <= 0.90), worst **%.3f** (<= 1)\n\n", nr,
               bench_median(ratios, nr), worst);
    }
    if (run) {
        printf("### The same plan shapes, scaled down, under carve run\n\n| row | model | mesh | schedule | devices | check | "
               "wall |\n|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < n; i++)
            if (done[i] && res_of[i].has_layout) run_scaled(rs[i].name, &res_of[i].layout);
            else if (done[i]) printf("| %s | autopart's plan is not a layout: not scaled | | | | | |\n", rs[i].name);
        for (int i = 0; i < n && bench_is_smoke(); i++) /* the published shapes too: pipelines, full recomputation */
            if (done[i]) run_scaled("published", &res_of[i].published);
        printf("\n");
    }
    return bench_finish(status);
}
