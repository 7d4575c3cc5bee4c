/* layout.c (autopart) - autopart's layout level (see layout.h).
 *
 * The steps it prices are few and large (the body of one micro-batch of a
 * model of up to 128 layers): a configuration's graph depends only on its
 * graph tactics (the micro-batches and the recomputation), so graphs are
 * built once and shared, by key, between the configurations and the threads
 * that price them (a small cache behind one lock; a graph is only read while
 * priced).  Rows already priced are looked up, not priced again.
 */
#include "autopart/layout.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/structure.h"

/* ---- configurations as schedules ------------------------------------------ */

void autopart_layout_mesh(const autopart_layout_config *c, shard_mesh *out)
{
    memset(out, 0, sizeof *out);
    const char *names[3] = {"pipe", "data", "model"};
    int sizes[3] = {c->pp, c->dp, c->tp};
    for (int a = 0; a < 3; a++)
        if (sizes[a] > 1) {
            snprintf(out->names[out->n_axes], SHARD_AXIS_NAME, "%s", names[a]);
            out->sizes[out->n_axes++] = sizes[a];
        }
    if (!out->n_axes) { /* one device */
        snprintf(out->names[0], SHARD_AXIS_NAME, "data");
        out->sizes[out->n_axes++] = 1;
    }
    out->n_devices = (int64_t)c->tp * c->pp * c->dp;
}

/* Appends ",text" (or text when buf is empty). */
static void append(char *buf, size_t n, const char *text)
{
    size_t k = strlen(buf);
    if (text && *text && k < n) snprintf(buf + k, n - k, "%s%s", k ? "," : "", text);
}

autopart_config autopart_layout_graph(const autopart_layout_config *c)
{
    autopart_config g = autopart_config_none();
    g.remat = c->remat;
    if (c->pp > 1) {
        g.pipe = (pipe_choice){0, c->m, c->chunks > 1 ? PIPE_INTERLEAVED : PIPE_1F1B, c->chunks > 1 ? c->chunks : 1};
    } else if (c->m > 1) {
        g.microbatches = c->m;
    }
    return g;
}

/* c's sharding tactics as text ("zero1:data,megatron:model,sp:model"). */
static char *sharding_text(const autopart_layout_config *c, char *buf, size_t n)
{
    buf[0] = 0;
    if (c->dp > 1) append(buf, n, c->zero == 2 ? "zero2:data" : c->zero == 1 ? "zero1:data" : "dp:data");
    if (c->tp > 1) append(buf, n, "megatron:model");
    if (c->tp > 1 && c->sp) append(buf, n, "sp:model");
    if (c->tp > 1 && c->sp && c->overlap) append(buf, n, "overlap:model");
    return buf;
}

int autopart_layout_tail(const autopart_layout_config *c, schedule *out, char *err, size_t errlen)
{
    char text[128];
    shard_mesh mesh;
    autopart_layout_mesh(c, &mesh);
    sharding_text(c, text, sizeof text);
    append(text, sizeof text, "auto");
    return sched_parse(text, &mesh, out, err, errlen);
}

char *autopart_layout_label(const autopart_layout_config *c, char *buf, size_t n)
{
    shard_mesh mesh;
    autopart_layout_mesh(c, &mesh);
    autopart_config g = autopart_layout_graph(c);
    char shd[128];
    autopart_config_str(&g, &mesh, buf, n);
    append(buf, n, sharding_text(c, shd, sizeof shd));
    return buf;
}

char *autopart_layout_describe(const autopart_layout_config *c, char *buf, size_t n)
{
    static const char *const remat[] = {[AUTOPART_REMAT_NONE] = "no recomputation",
                                        [AUTOPART_REMAT_SELECTIVE] = "selective recomputation (remat:all)",
                                        [AUTOPART_REMAT_FULL] = "full recomputation", [AUTOPART_REMAT_ATTN] = "attention-only recomputation"};
    char sched[48];
    if (c->pp < 2) snprintf(sched, sizeof sched, "%s", c->m > 1 ? "gradient accumulation" : "no pipeline");
    else if (c->chunks > 1) snprintf(sched, sizeof sched, "interleaved 1F1B, %d chunks", c->chunks);
    else snprintf(sched, sizeof sched, "1F1B");
    snprintf(buf, n, "TP %d x PP %d x DP %d, micro-batch %d (%d micro-batches), %s, %s%s%s%s", c->tp, c->pp, c->dp, c->mbs, c->m,
             sched, remat[c->remat],
             c->sp && c->tp > 1 ? (c->overlap ? ", sequence parallel, TP communication overlapped" : ", sequence parallel") : "",
             c->zero ? (c->zero == 2 ? ", ZeRO-2" : ", ZeRO-1") : "", c->dp > 1 && !c->zero ? ", data parallel" : "");
    return buf;
}

/* ---- graphs, shared by key --------------------------------------------------- */

#define CACHE_CAP 8

typedef struct graph_slot {
    char key[96];    /* the graph tactics it was built with ("" for none) */
    ir_graph *g;     /* NULL: the build failed (why) */
    shard_state *base; /* g's op rules, dim groups and Megatron dims, which every state of g shares */
    char why[256];
    int users;
    long last;
} graph_slot;

typedef struct graph_cache {
    graph_slot slot[CACHE_CAP];
    long clock;
} graph_cache;

/* The key of a configuration's step: what the step depends on (a pipeline
 * or not, the micro-batches, the recomputation; neither the pipeline's
 * schedule nor the sharding). */
static void graph_key(const autopart_layout_config *c, char *buf, size_t n)
{
    snprintf(buf, n, "%s:%d:%d", c->pp > 1 ? "pipe" : "step", c->m, (int)c->remat);
}

/* The slot of key, or NULL. */
static graph_slot *slot_find(graph_cache *gc, const char *key)
{
    for (int i = 0; i < CACHE_CAP; i++)
        if ((gc->slot[i].g || gc->slot[i].why[0]) && !strcmp(gc->slot[i].key, key)) return &gc->slot[i];
    return NULL;
}

/* An empty slot for key, else the least recently used one nobody holds
 * (emptied), or NULL when every slot is held. */
static graph_slot *slot_fresh(graph_cache *gc, const char *key)
{
    graph_slot *s = NULL;
    for (int i = 0; i < CACHE_CAP; i++) {
        graph_slot *x = &gc->slot[i];
        if (x->users) continue;
        if (!x->g && !x->why[0]) {
            s = x;
            break;
        }
        if (!s || x->last < s->last) s = x;
    }
    if (!s) return NULL;
    shard_state_free(s->base);
    ir_free(s->g);
    memset(s, 0, sizeof *s);
    snprintf(s->key, sizeof s->key, "%s", key);
    s->last = ++gc->clock;
    return s;
}

/* Builds slot s's step for c: without recomputation through L's builder;
 * with it, c's recomputation rewrites the step without (built or found in
 * its own slot), as sched_rewrite would (the model is built and
 * differentiated once for every recomputation). */
static void slot_build(graph_cache *gc, const autopart_layout_level *L, const autopart_layout_config *c, const shard_mesh *mesh,
                       graph_slot *s)
{
    if (c->remat == AUTOPART_REMAT_NONE) {
        autopart_config g = autopart_layout_graph(c);
        schedule none, sc;
        memset(&none, 0, sizeof none);
        char label[96];
        if (autopart_config_schedule(&g, NULL, 0, &none, &sc, s->why, sizeof s->why) == 0)
            s->g = L->build(L->build_ctx, mesh, &sc, autopart_config_str(&g, mesh, label, sizeof label), s->why, sizeof s->why);
    } else {
        static ir_graph *(*const rewrite[])(const ir_graph *, int, int, int *, char *, size_t) = {
            [AUTOPART_REMAT_SELECTIVE] = ir_remat, [AUTOPART_REMAT_FULL] = ir_remat_full, [AUTOPART_REMAT_ATTN] = ir_remat_attn};
        autopart_layout_config plain = *c;
        plain.remat = AUTOPART_REMAT_NONE;
        char key[96];
        graph_key(&plain, key, sizeof key);
        s->users++; /* held while its source takes a slot */
        graph_slot *p = slot_find(gc, key);
        if (!p && (p = slot_fresh(gc, key))) slot_build(gc, L, &plain, mesh, p);
        s->users--;
        if (!p) snprintf(s->why, sizeof s->why, "no room for another step (every cached step in use)");
        else if (!p->g) snprintf(s->why, sizeof s->why, "%s", p->why);
        else s->g = rewrite[c->remat](p->g, 0, SCHED_ALL_LAYERS, NULL, s->why, sizeof s->why);
    }
    if (!s->g && !s->why[0]) snprintf(s->why, sizeof s->why, "the step could not be built");
    if (s->g) s->base = shard_state_new(s->g, mesh);
}

/* The base state of c's graph tactics' step (shared; release it), or NULL
 * with why. */
static const shard_state *cache_get(graph_cache *gc, const autopart_layout_level *L, const autopart_layout_config *c,
                                    const shard_mesh *mesh, char *why, size_t n)
{
    char key[96];
    graph_key(c, key, sizeof key);
    const shard_state *base = NULL;
#pragma omp critical(autopart_layout_cache)
    {
        graph_slot *s = slot_find(gc, key);
        if (!s && (s = slot_fresh(gc, key))) slot_build(gc, L, c, mesh, s);
        if (!s) {
            snprintf(why, n, "no room for another step (every cached step in use)");
        } else {
            s->last = ++gc->clock;
            if (s->g) {
                s->users++;
                base = s->base;
            } else {
                snprintf(why, n, "%s", s->why);
            }
        }
    }
    return base;
}

static void cache_release(graph_cache *gc, const shard_state *base)
{
#pragma omp critical(autopart_layout_cache)
    for (int i = 0; i < CACHE_CAP; i++)
        if (gc->slot[i].base == base) gc->slot[i].users--;
}

static void cache_free(graph_cache *gc)
{
    for (int i = 0; i < CACHE_CAP; i++) {
        shard_state_free(gc->slot[i].base);
        ir_free(gc->slot[i].g);
    }
    memset(gc, 0, sizeof *gc);
}

/* ---- pricing ------------------------------------------------------------------ */

/* Prices c on the step of base (c's graph tactics already applied to it). */
static void price_on(const autopart_layout_level *L, const shard_state *base, const autopart_layout_config *c, int balanced,
                     autopart_layout_row *row)
{
    const ir_graph *g = base->g;
    shard_mesh mesh;
    autopart_layout_mesh(c, &mesh);
    char err[256];
    autopart_config gc = autopart_layout_graph(c);
    schedule tail, sc;
    if (autopart_layout_tail(c, &tail, err, sizeof err) < 0 || autopart_config_schedule(&gc, NULL, 0, &tail, &sc, err, sizeof err) < 0) {
        snprintf(row->why, sizeof row->why, "%s", err);
        return;
    }
    shard_state *st = shard_state_new_like(base); /* base's rules and groups; c's own mesh */
    st->mesh = mesh;
    st->record_conflicts = 0;
    pipe_spec ps;
    int piped = sched_apply(&sc, st, err, sizeof err) < 0 ? -1 : sched_pipeline_step(&sc, g, &mesh, &ps, err, sizeof err);
    cost_ws *ws = piped < 0 ? NULL : cost_ws_new(g);
    int rc = -1;
    if (piped >= 0) { /* one function prices both shapes of plan */
        if (piped > 0 && !balanced) {
            pipe_split_even(&ps, g->n_layers);
            ps.split_auto = 0;
        }
        pipe_program pp;
        memset(&pp, 0, sizeof pp);
        rc = cost_price_plan(ws, st, &ps, NULL, L->hw, &L->opt, &pp, &row->e, NULL, err, sizeof err);
        pipe_program_free(&pp);
    }
    row->e.layer_compute = row->e.layer_comm = row->e.layer_wire = row->e.instr_time = NULL; /* the workspace's */
    if (rc == 0) row->ok = 1;
    else snprintf(row->why, sizeof row->why, "%s", err);
    cost_ws_free(ws);
    shard_state_free(st);
}

static void price_cached(const autopart_layout_level *L, graph_cache *gc, const autopart_layout_config *c, int balanced,
                         autopart_layout_row *row)
{
    memset(row, 0, sizeof *row);
    row->c = *c;
    shard_mesh mesh;
    autopart_layout_mesh(c, &mesh);
    const shard_state *base = cache_get(gc, L, c, &mesh, row->why, sizeof row->why);
    if (!base) return;
    price_on(L, base, c, balanced, row);
    cache_release(gc, base);
}

void autopart_layout_price(const autopart_layout_level *L, const autopart_layout_config *c, int balanced,
                           autopart_layout_row *row)
{
    graph_cache gc;
    memset(&gc, 0, sizeof gc);
    price_cached(L, &gc, c, balanced, row);
    cache_free(&gc);
}

static int row_better(const autopart_layout_row *a, const autopart_layout_row *b)
{
    if (!a->ok || !b->ok) return a->ok > b->ok;
    return autopart_better(&a->e, &b->e);
}

int autopart_layout_best(const autopart_layout_row *rows, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (rows[i].ok && (best < 0 || row_better(&rows[i], &rows[best]))) best = i;
    return best;
}

/* ---- the layouts ---------------------------------------------------------------- */

/* Devices a node has under L's profile (the whole mesh when smaller). */
static int64_t node_size(const autopart_layout_level *L)
{
    int64_t n = L->hw->node_devices > 0 ? L->hw->node_devices : L->mesh->n_devices;
    return n < L->mesh->n_devices ? n : L->mesh->n_devices;
}

/* A lower bound of the model states per device of layout c: the layers'
 * params over TP x PP at mixed precision's bytes, gradients and optimizer
 * states split over DP (ZeRO-2's). */
static double states_bound(const autopart_layout_level *L, const autopart_layout_config *c)
{
    cost_state_bytes sz = cost_state_sizes(L->opt.precision, 2);
    return L->layer_params / ((double)c->tp * c->pp) * (sz.param + (sz.grad + sz.opt) / c->dp);
}

static double capacity(const autopart_layout_level *L)
{
    return L->opt.memory_capacity > 0 ? L->opt.memory_capacity : L->hw->mem_capacity;
}

/* The layouts (tp, pp, dp) of L's devices: TP dividing a node's devices (1
 * where the step has no Megatron blocks), PP from 1 to the layers (1 only
 * under no_pipeline), DP the
 * rest dividing the batch; those whose model states cannot fit are left out.
 * Writes at most cap into out (mbs, m, chunks, remat, sp, zero unset);
 * returns how many. */
static int layouts(const autopart_layout_level *L, autopart_layout_config *out, int cap)
{
    int64_t N = L->mesh->n_devices, node = node_size(L);
    int n = 0;
    for (int64_t tp = 1; tp <= node; tp++) {
        if (node % tp || N % tp || (tp > 1 && !L->tp_ok)) continue;
        int64_t pp_max = L->no_pipeline ? 1 : PIPE_MAX_STAGES;
        for (int64_t pp = 1; pp <= N / tp && pp <= L->n_layers && pp <= pp_max; pp++) {
            if ((N / tp) % pp) continue;
            int64_t dp = N / tp / pp;
            if (L->batch % dp) continue;
            autopart_layout_config c = {.tp = (int)tp, .pp = (int)pp, .dp = (int)dp, .mbs = 1, .m = 1, .chunks = 1};
            if (states_bound(L, &c) > capacity(L)) continue;
            if (n < cap) out[n++] = c;
        }
    }
    return n;
}

/* Sets c's micro-batch size to mbs (and m); 0 when the batch does not
 * allow it.  Interleaving needs m a multiple of PP: otherwise c falls back
 * to 1F1B. */
static int set_mbs(const autopart_layout_level *L, autopart_layout_config *c, int64_t mbs)
{
    int64_t per = L->batch / c->dp;
    if (mbs < 1 || per % mbs) return 0;
    c->mbs = (int)mbs;
    c->m = (int)(per / mbs);
    if (c->pp < 2 && c->m > 8) return 0; /* gradient accumulation: the step is copied m times (ir/microbatch.c) */
    if (c->chunks > 1 && c->m % c->pp) c->chunks = 1;
    return 1;
}

/* The recomputations from the lightest (fastest) to the heaviest. */
static const autopart_remat remat_order[] = {AUTOPART_REMAT_NONE, AUTOPART_REMAT_ATTN, AUTOPART_REMAT_SELECTIVE,
                                             AUTOPART_REMAT_FULL};
#define N_REMAT 4

static int remat_rank(autopart_remat remat)
{
    for (int i = 0; i < N_REMAT; i++)
        if (remat_order[i] == remat) return i;
    return 0;
}

/* ---- the level's rows: priced once, looked up after ---------------------------- */

typedef struct rowset {
    autopart_layout_row *rows;
    int n, cap;
} rowset;

static int same_config(const autopart_layout_config *a, const autopart_layout_config *b)
{
    return a->tp == b->tp && a->pp == b->pp && a->dp == b->dp && a->mbs == b->mbs && a->m == b->m && a->chunks == b->chunks &&
           a->remat == b->remat && a->sp == b->sp && a->overlap == b->overlap && a->zero == b->zero;
}

/* The row of c, priced when new (even split).  Thread-safe; returns a copy. */
static autopart_layout_row row_of(const autopart_layout_level *L, graph_cache *gc, rowset *rs, const autopart_layout_config *c)
{
    autopart_layout_row r;
    int found = 0;
#pragma omp critical(autopart_layout_rows)
    for (int i = 0; i < rs->n && !found; i++)
        if (same_config(&rs->rows[i].c, c)) r = rs->rows[i], found = 1;
    if (found) return r;
    price_cached(L, gc, c, 0, &r);
#pragma omp critical(autopart_layout_rows)
    {
        if (rs->n == rs->cap) {
            rs->cap = rs->cap ? 2 * rs->cap : 64;
            rs->rows = ir_xrealloc(rs->rows, (size_t)rs->cap * sizeof *rs->rows);
        }
        rs->rows[rs->n++] = r;
    }
    return r;
}

static int out_of_time(const autopart_layout_level *L)
{
    return search_interrupted || (L->deadline > 0 && autopart_clock() >= L->deadline);
}

/* The lightest recomputation with which c fits, searched from c's own:
 * lighter while they fit, heavier until one does.  Returns the row of the
 * result (c->remat set), or the heaviest's when none fits. */
static autopart_layout_row fit_remat(const autopart_layout_level *L, graph_cache *gc, rowset *rs, autopart_layout_config *c)
{
    int k = remat_rank(c->remat);
    autopart_layout_row r = row_of(L, gc, rs, c);
    if (r.ok && r.e.fits) {
        while (k > 0 && !out_of_time(L)) {
            autopart_layout_config d = *c;
            d.remat = remat_order[k - 1];
            autopart_layout_row x = row_of(L, gc, rs, &d);
            if (!(x.ok && x.e.fits)) break;
            *c = d;
            r = x;
            k--;
        }
        return r;
    }
    while (k + 1 < N_REMAT && !out_of_time(L)) {
        autopart_layout_config d = *c;
        d.remat = remat_order[++k];
        autopart_layout_row x = row_of(L, gc, rs, &d);
        if (x.ok && (!r.ok || row_better(&x, &r))) {
            *c = d;
            r = x;
        }
        if (x.ok && x.e.fits) break;
    }
    return r;
}

/* Phase 1: the first configuration of layout c (layout.h). */
static autopart_layout_row first_config(const autopart_layout_level *L, graph_cache *gc, rowset *rs, autopart_layout_config c)
{
    c.sp = c.overlap = c.tp > 1 && L->sp_ok;
    c.zero = c.dp > 1 ? 1 : 0;
    c.chunks = 1;
    c.remat = AUTOPART_REMAT_NONE;
    if (!set_mbs(L, &c, c.pp > 1 ? 1 : L->batch / c.dp)) {
        autopart_layout_row r;
        memset(&r, 0, sizeof r);
        r.c = c;
        snprintf(r.why, sizeof r.why, "the batch does not split into micro-batches of one sequence");
        return r;
    }
    return fit_remat(L, gc, rs, &c);
}

/* The moves of phase 2 from c: every other micro-batch size, interleaving,
 * sequence parallelism and ZeRO stage, one at a time.  Writes at most cap;
 * returns how many. */
static int moves(const autopart_layout_level *L, const autopart_layout_config *c, autopart_layout_config *out, int cap)
{
    int n = 0;
    int64_t per = L->batch / c->dp;
    /* micro-batch sizes: 1, 2, 4, 8 sequences (a pipeline), or 1, 2, 4, 8 micro-batches (without) */
    for (int k = 1; k <= 8 && n < cap; k *= 2) {
        autopart_layout_config d = *c;
        int64_t mbs = c->pp > 1 ? k : (per % k ? 0 : per / k);
        if (mbs != c->mbs && set_mbs(L, &d, mbs)) out[n++] = d;
    }
    for (int v = 1; c->pp > 1 && v <= AUTOPART_LAYOUT_CHUNKS && n < cap; v++) {
        if (v == c->chunks || (v > 1 && (c->m % c->pp || v * c->pp > L->n_layers))) continue;
        autopart_layout_config d = *c;
        d.chunks = v;
        out[n++] = d;
    }
    if (c->tp > 1 && L->sp_ok && n < cap) {
        autopart_layout_config d = *c;
        d.sp = d.overlap = !c->sp; /* with it, its communication overlapped: never slower under the cost model */
        out[n++] = d;
    }
    for (int z = 0; c->dp > 1 && z <= 2 && n < cap; z++)
        if (z != c->zero) {
            autopart_layout_config d = *c;
            d.zero = z;
            out[n++] = d;
        }
    return n;
}

/* Phase 2: coordinate descent from row *best (layout.h), each round's moves
 * priced side by side on `threads` threads. */
static void descend(const autopart_layout_level *L, graph_cache *gc, rowset *rs, autopart_layout_row *best, int threads)
{
    for (int round = 0; round < 8 && best->ok && !out_of_time(L); round++) {
        autopart_layout_config mv[16];
        autopart_layout_row got[16];
        int n = moves(L, &best->c, mv, 16);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
        for (int i = 0; i < n; i++) {
            got[i].ok = 0;
            if (!out_of_time(L)) got[i] = fit_remat(L, gc, rs, &mv[i]);
        }
        autopart_layout_row step = *best;
        for (int i = 0; i < n; i++)
            if (got[i].ok && row_better(&got[i], &step)) step = got[i];
        if (same_config(&step.c, &best->c)) return;
        *best = step;
    }
}

static int pricing_threads(const autopart_layout_level *L)
{
    if (L->threads > 0) return L->threads;
    int t = L->b.threads > 1 ? L->b.threads : 2, procs = omp_get_num_procs();
    return t < procs ? t : procs > 0 ? procs : 1;
}

/* qsort order of layouts: by data parallel size (so by micro-batches:
 * the layouts that share a step come together), then TP, PP. */
static int by_dp(const void *a, const void *b)
{
    const autopart_layout_config *x = a, *y = b;
    if (x->dp != y->dp) return x->dp < y->dp ? -1 : 1;
    if (x->tp != y->tp) return x->tp < y->tp ? -1 : 1;
    return x->pp < y->pp ? -1 : x->pp > y->pp;
}

/* Phases 1 and 2: the best configuration of each layout (firsts[], n of
 * them, the best AUTOPART_LAYOUT_DESCEND improved).  Every row priced is in rs. */
static int first_and_descend(const autopart_layout_level *L, graph_cache *gc, rowset *rs, autopart_layout_row **out)
{
    autopart_layout_config lay[512];
    int n = layouts(L, lay, 512), threads = pricing_threads(L);
    qsort(lay, (size_t)n, sizeof *lay, by_dp);
    autopart_layout_row *firsts = ir_xcalloc((size_t)n + 1, sizeof *firsts);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
    for (int i = 0; i < n; i++)
        if (!out_of_time(L)) firsts[i] = first_config(L, gc, rs, lay[i]);
    /* the best layouts by their first configuration, in order */
    int order[AUTOPART_LAYOUT_DESCEND], k = 0;
    for (; k < AUTOPART_LAYOUT_DESCEND; k++) {
        int pick = -1;
        for (int i = 0; i < n; i++) {
            int taken = 0;
            for (int j = 0; j < k; j++) taken |= order[j] == i;
            if (!taken && firsts[i].ok && (pick < 0 || row_better(&firsts[i], &firsts[pick]))) pick = i;
        }
        if (pick < 0) break;
        order[k] = pick;
    }
    for (int j = 0; j < k; j++) descend(L, gc, rs, &firsts[order[j]], threads);
    *out = firsts;
    return n;
}

/* ---- phase 3: the search on top of the best configurations ------------------- */

/* Searches configuration c into s (memset by the caller): its step built
 * afresh, its schedule the manual tactics, the search on top.  On failure
 * s->why says why. */
static void search_config(const autopart_layout_level *L, const autopart_layout_config *c, autopart_step *s)
{
    char err[512];
    shard_mesh mesh;
    autopart_layout_mesh(c, &mesh);
    s->config = autopart_layout_graph(c);
    autopart_layout_label(c, s->tactics, sizeof s->tactics);
    if (out_of_time(L)) {
        snprintf(s->why, sizeof s->why, "not searched: %s", search_interrupted ? "interrupted" : "the --time limit is spent");
        return;
    }
    schedule tail, sc;
    /* an eighth: the configuration is already a whole plan; what the search adds on top is small */
    search_budget b = autopart_budget_share(L->b, 8, L->deadline);
    s->skip_experts = 1; /* the configuration is the start; the experts are another layout's */
    if (autopart_layout_tail(c, &tail, err, sizeof err) < 0 ||
        autopart_config_schedule(&s->config, NULL, 0, &tail, &sc, err, sizeof err) < 0) {
        snprintf(s->why, sizeof s->why, "%s", err);
        return;
    }
    ir_graph *g = L->build(L->build_ctx, &mesh, &sc, s->tactics, err, sizeof err);
    sc.n--; /* the manual tactics: auto is last */
    if (!g || autopart_step_setup(s, g, &mesh, &sc, L->hw, &L->opt, L->gather_auto, err, sizeof err) < 0 ||
        autopart_step_search(s, L->algo, &b, err, sizeof err) < 0) { /* s owns g from its setup on */
        snprintf(s->why, sizeof s->why, "%s", err);
        s->ok = 0;
    }
}

int autopart_layout_search(const autopart_layout_level *L, autopart_layout_row **rows, int *n_rows, autopart_step *out,
                           autopart_layout_config *configs, int *n_out, char *why, size_t whylen)
{
    *rows = NULL;
    *n_rows = *n_out = 0;
    if (L->mesh->n_devices < 2 || L->n_layers < 1 || L->batch < 1) {
        snprintf(why, whylen, "a mesh of one device, or a model without layers or batch");
        return -1;
    }
    graph_cache gc;
    memset(&gc, 0, sizeof gc);
    rowset rs = {0};
    autopart_layout_row *firsts = NULL;
    int n = first_and_descend(L, &gc, &rs, &firsts);
    cache_free(&gc);
    if (!n) snprintf(why, whylen, "no layout's model states fit in memory");
    /* the best `keep` distinct configurations, searched */
    int keep = L->keep > 0 ? L->keep : 1, best = -1;
    for (int k = 0; k < keep; k++) {
        int pick = -1;
        for (int i = 0; i < n; i++) {
            int taken = 0;
            for (int j = 0; j < *n_out; j++) taken |= out[j].layout_index == i + 1;
            if (!taken && firsts[i].ok && (pick < 0 || row_better(&firsts[i], &firsts[pick]))) pick = i;
        }
        if (pick < 0) break;
        configs[*n_out] = firsts[pick].c;
        autopart_step *s = &out[(*n_out)++];
        memset(s, 0, sizeof *s);
        s->layout_index = pick + 1;
        search_config(L, &firsts[pick].c, s);
        if (s->ok && (best < 0 || autopart_better(&s->e, &out[best].e))) best = *n_out - 1;
    }
    if (n && best < 0 && !why[0]) snprintf(why, whylen, "no configuration could be searched");
    free(firsts);
    *rows = rs.rows;
    *n_rows = rs.n;
    return best;
}

/* ---- the exhaustive grid ---------------------------------------------------------- */

/* qsort order: configurations of one step (pipelined or not, micro-batches)
 * together. */
static int by_graph(const void *a, const void *b)
{
    const autopart_layout_config *x = a, *y = b;
    int kx[2] = {x->pp > 1, x->m}, ky[2] = {y->pp > 1, y->m};
    for (int i = 0; i < 2; i++)
        if (kx[i] != ky[i]) return kx[i] < ky[i] ? -1 : 1;
    return 0;
}

/* The grid's configurations without their recomputation (layout.h); *out
 * receives them (free); returns how many. */
static int grid_configs(const autopart_layout_level *L, int sp, autopart_layout_config **out)
{
    autopart_layout_config lay[512], *all = NULL;
    int nl = layouts(L, lay, 512), n = 0, cap = 0;
    for (int i = 0; i < nl; i++) {
        int64_t per = L->batch / lay[i].dp, sizes[4] = {1, 2, 4, per};
        for (int s = 0; s < 4; s++) {
            if ((s == 3 && (lay[i].pp > 1 || per <= 4)) || (s < 3 && sizes[s] > per)) continue;
            for (int v = 1; v <= (lay[i].pp > 1 ? AUTOPART_LAYOUT_CHUNKS : 1); v++)
                for (int z = 0; z <= (lay[i].dp > 1 ? 1 : 0); z++)
                    for (int q = 0; q <= (sp && lay[i].tp > 1 && L->sp_ok ? 1 : 0); q++) {
                        autopart_layout_config c = lay[i];
                        c.chunks = v;
                        c.remat = AUTOPART_REMAT_NONE;
                        c.zero = z;
                        c.sp = c.overlap = q;
                        if (!set_mbs(L, &c, sizes[s]) || c.chunks != v || (v > 1 && v * c.pp > L->n_layers)) continue;
                        if (n == cap) all = ir_xrealloc(all, (size_t)(cap = cap ? 2 * cap : 256) * sizeof *all);
                        all[n++] = c;
                    }
        }
    }
    qsort(all, (size_t)n, sizeof *all, by_graph);
    *out = all;
    return n;
}

int autopart_layout_grid(const autopart_layout_level *L, int attn, int sp, int balanced, autopart_layout_row **rows)
{
    static const autopart_remat with_attn[] = {AUTOPART_REMAT_NONE, AUTOPART_REMAT_ATTN, AUTOPART_REMAT_SELECTIVE, AUTOPART_REMAT_FULL},
                                without[] = {AUTOPART_REMAT_NONE, AUTOPART_REMAT_SELECTIVE, AUTOPART_REMAT_FULL};
    const autopart_remat *chain = attn ? with_attn : without;
    int links = attn ? 4 : 3;
    autopart_layout_config *base = NULL;
    int n = grid_configs(L, sp, &base);
    /* each configuration's recomputations from the lightest, until one fits (a heavier one only adds work) */
    autopart_layout_row *got = ir_xcalloc((size_t)n * (size_t)links + 1, sizeof *got);
    graph_cache gc;
    memset(&gc, 0, sizeof gc);
    int threads = pricing_threads(L);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
    for (int i = 0; i < n; i++)
        for (int k = 0; k < links; k++) {
            autopart_layout_config c = base[i];
            c.remat = chain[k];
            price_cached(L, &gc, &c, balanced, &got[(size_t)i * links + k]);
            if (got[(size_t)i * links + k].ok && got[(size_t)i * links + k].e.fits) break;
        }
    cache_free(&gc);
    free(base);
    int m = 0; /* the rows priced, in order */
    for (int i = 0; i < n * links; i++)
        if (got[i].ok || got[i].why[0]) got[m++] = got[i];
    *rows = got;
    return m;
}
