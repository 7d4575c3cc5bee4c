/* test_compose.c - metamorphic tests over compositions of tactics (issue 43).
 *
 * Every pair and every triple of the rewriting, memory and sharding tactics
 * (four recomputation variants, micro-batches, a pipeline, ZeRO-1/2/3, data
 * parallelism, Megatron, sequence parallelism, expert parallelism), in every
 * order, on small GPT, LLaMA, MoE and U-Net steps.  Each composition is
 * loaded, sharded and lowered as `carve run` does it (session/), then:
 *
 *  - run on simulated devices (threads) for one training step and checked
 *    against the single-device run of the rewritten step and against the
 *    user's plain step (session_run_set_plain: the model as written, same
 *    batch, no recomputation, no micro-batches, no pipeline); orders that
 *    lower to the same program (the same instructions, buffers and pipeline
 *    on the same step) are run once and counted as that program's;
 *  - invariants that hold by construction, whatever the numbers:
 *    the FLOPs of a recomputed step are the step's before the rewrite plus
 *    exactly the recomputed forward ops (each clone the FLOPs of the op it
 *    copies; with full recomputation every forward op of the layers once per
 *    micro-batch), in the graph and as priced per device (the difference
 *    between the plan with and without recomputation is the clones' own
 *    instructions);
 *    every param's gradient is reduced (all-reduce or reduce-scatter) over
 *    every mesh axis that splits the batch;
 *    graph rewrites (recomputation, micro-batches, a pipeline's body) do not
 *    change what the sharding tactics decide for params and optimizer
 *    states (the same layouts as without the rewrite).
 *
 * A tactic that does not apply to a model (ep on a dense model,
 * attention-only recomputation on the U-Net's convolutions) is skipped
 * by construction, and carve is
 * checked to refuse it alone with its reason; compositions refused by design
 * (micro-batches with a pipeline, which makes its own) are checked to be
 * refused with one message.  Both are counted and named in the output.
 */
#include "session/session.h"
#include "tests/test.h"

#include "analysis/groups.h"
#include "analysis/structure.h"
#include "ir/hash.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { REWRITE, PIPE, SHARD };
enum { AX_DATA = 1, AX_MODEL = 2, AX_PIPE = 4 };

/* The tactics composed: a name, the text (a model may spell it: sequence),
 * the mesh axes it needs and what it is. */
typedef struct tac {
    const char *name, *text;
    unsigned axes;
    int kind;
} tac;

static const tac tactics[] = {
    {"remat:all", "remat:all", 0, REWRITE},   {"remat:full", "remat:full", 0, REWRITE}, {"remat:1", "remat:1", 0, REWRITE},
    {"remat:attn", "remat:attn", 0, REWRITE}, {"microbatch:2", "microbatch:2", 0, REWRITE}, {"pipeline", NULL, AX_PIPE, PIPE},
    {"dp", "dp:data", AX_DATA, SHARD},        {"zero1", "zero1:data", AX_DATA, SHARD},  {"zero2", "zero2:data", AX_DATA, SHARD},
    {"zero3", "zero3:data", AX_DATA, SHARD},  {"megatron", "megatron:model", AX_MODEL, SHARD},
    {"sequence", NULL, AX_MODEL, SHARD},      {"ep", "ep:data", AX_DATA, SHARD},
};
enum {
    N_TAC = (int)(sizeof tactics / sizeof tactics[0]),
    T_ATTN = 3, T_MICRO = 4, T_PIPE = 5, T_MEGATRON = 10, T_SEQ = 11, T_EP = 12
};

/* The small models: spec, how sequence parallelism and the pipeline are
 * written for them, and the tactics that do not apply (a bit per tactic). */
typedef struct model {
    const char *name, *spec, *sequence, *pipeline;
    unsigned skip;
} model;

/* gpt and moe with materialised attention (remat:attn recomputes its
 * scores), llama with fused attention (the default: it holds no scores, so
 * remat:attn has nothing to recompute and is refused) */
static const model models[] = {
    {"gpt", "gpt:layers=2,hidden=16,heads=2,seq=8,batch=8,vocab=32,attention=materialized", "sp:model",
     "pipeline:pipe:2:1f1b:1/1", 1u << T_EP},
    {"llama", "llama:layers=2,hidden=16,heads=2,kv_heads=2,ffn=32,seq=8,batch=8,vocab=32", "sp:model", "pipeline:pipe:2:1f1b:1/1",
     (1u << T_EP) | (1u << T_ATTN)},
    {"moe", "moe:layers=2,hidden=16,heads=2,kv_heads=2,ffn=16,experts=4,topk=2,capacity=200,seq=8,batch=8,vocab=32,attention=materialized", "sp:model",
     "pipeline:pipe:2:1f1b:1/1", 0},
    /* the U-Net's counterpart of a sequence split: its images' rows (convolutions exchange halos) */
    {"unet", "unet:levels=2,base=4,size=8,batch=8,in=2,out=2", "group:image:1:model", "pipeline:pipe:2:1f1b:2/1",
     (1u << T_EP) | (1u << T_ATTN)},
};
enum { N_MODELS = (int)(sizeof models / sizeof models[0]) };

static const char *tac_text(const model *m, int t)
{
    return t == T_SEQ ? m->sequence : t == T_PIPE ? m->pipeline : tactics[t].text;
}

/* ---- caches: steps by their rewrites, programs by their bits ------------------- */

typedef struct step_entry {
    char key[160];  /* the rewrite tactics in order, and the mesh (a pipeline's body depends on it) */
    ir_graph *g;
} step_entry;

typedef struct counts {
    int orders, refused, skipped, programs, same_program, numeric_fail;
    int flops_graph, flops_priced, grads, gathered, layouts;
    int plain_skipped; /* programs whose plain-step check does not apply by design (said why) */
} counts;

typedef struct ctx {
    const model *m;
    ir_graph *plain;          /* the model as written */
    step_entry steps[64];
    int n_steps;
    uint64_t *seen;           /* program hashes run */
    int n_seen, cap_seen;
    cost_hw hw;
    session_world w;
    counts c;
} ctx;

/* The step of schedule sc on mesh (built as carve run builds it), cached by
 * what its rewrites make: each layer's recomputation (remat: tactics
 * combine per layer, the most any asks for: sched_rewrite), the
 * micro-batches, the pipeline and its mesh.  NULL with a message. */
static const ir_graph *step_of(ctx *x, const schedule *sc, const shard_mesh *mesh, const char *mesh_text, char *err, size_t n)
{
    char key[160] = "remat ", mode[64] = "";
    static const char rank[] = {[IR_REMAT_ATTN] = '1', [IR_REMAT_SELECTIVE] = '2', [IR_REMAT_FULL] = '3'};
    int L = x->plain->n_layers < 63 ? x->plain->n_layers : 63;
    memset(mode, '0', (size_t)L);
    size_t len = strlen(key);
    for (int i = 0; i < sc->n; i++) {
        const tactic *t = &sc->t[i];
        for (int l = t->lo; t->kind == TACTIC_REMAT && l <= t->hi && l < L; l++)
            if (mode[l] < rank[t->dim]) mode[l] = rank[t->dim];
        if (t->kind == TACTIC_MICROBATCH) len += (size_t)snprintf(key + len, sizeof key - len, "micro %d ", t->lo);
        if (t->kind == TACTIC_PIPELINE) len += (size_t)snprintf(key + len, sizeof key - len, "pipe %d %d %s @%s ", t->lo, t->dim, sc->split, mesh_text);
    }
    snprintf(key + len, sizeof key - len, "%s", mode);
    for (int i = 0; i < x->n_steps; i++)
        if (!strcmp(x->steps[i].key, key)) return x->steps[i].g;
    char label[256];
    session_source src = {.model = x->m->spec, .optimizer = "adam", .sched = sc, .mesh = mesh};
    ir_graph *g = session_load_step(&src, label, sizeof label, NULL, err, n);
    if (g && x->n_steps < 64) {
        snprintf(x->steps[x->n_steps].key, sizeof x->steps[0].key, "%s", key);
        x->steps[x->n_steps++].g = g;
    }
    return g;
}

/* FNV-1a of a lowered program and the step it runs. */
static uint64_t program_hash(const session_run_program *rp, const ir_graph *g)
{
    const spmd_program *p = rp->p;
    uint64_t h = ir_fnv_word(IR_FNV_OFFSET, (uint64_t)(uintptr_t)g);
    h = ir_fnv_bytes(h, &rp->pp.spec, sizeof rp->pp.spec);
    h = ir_fnv_bytes(h, p->instrs, (size_t)p->n_instrs * sizeof *p->instrs);
    h = ir_fnv_bytes(h, p->bufs, (size_t)p->n_bufs * sizeof *p->bufs);
    for (int a = 0; a < p->mesh.n_axes; a++) h = ir_fnv_word(h, (uint64_t)p->mesh.sizes[a]);
    return h;
}

static int seen_before(ctx *x, uint64_t h)
{
    for (int i = 0; i < x->n_seen; i++)
        if (x->seen[i] == h) return 1;
    if (x->n_seen == x->cap_seen) {
        x->cap_seen = x->cap_seen ? 2 * x->cap_seen : 256;
        x->seen = realloc(x->seen, (size_t)x->cap_seen * sizeof *x->seen);
        if (!x->seen) abort();
    }
    x->seen[x->n_seen++] = h;
    return 0;
}

/* ---- the checks ---------------------------------------------------------------- */

/* One training step of program rp on simulated devices, checked against the
 * rewritten step's reference and the plain step.  Returns 1 when both pass. */
static int run_numeric(ctx *x, session_run_program *rp, const char *what, char *err, size_t n)
{
    session_run *r = NULL;
    session_run_memory mem;
    int rc = session_run_open(&r, &x->w, &rp->pp, rp->ref, what, 7, &mem, err, n);
    rp->ref = NULL; /* the run took it over */
    if (rc) return 0;
    session_run_set_plain(r, ir_clone(x->plain), NULL);
    session_step_times t;
    rc = session_run_start(r, err, n);
    if (!rc) rc = session_run_step(r, 1, &t, err, n);
    session_plain_check pc = session_run_plain(r);
    /* a micro-batched step of a loss that couples the batch (the MoE's load balancing) is another step: said, not compared */
    int coupled = x->plain->batch_coupled && (rp->pp.spec.axis >= 0 || rp->p->g->rewrites.microbatches > 1);
    int ok = !rc && session_run_ok(r) && pc.state == (coupled ? SESSION_PLAIN_SKIPPED : SESSION_PLAIN_CHECKED);
    if (ok && coupled && !x->c.plain_skipped++) printf("  %s: not compared with the plain step: %s\n", x->m->name, pc.note);
    if (!ok && !rc) {
        const exec_spmd_check *c = session_run_check(r);
        int k = snprintf(err, n, "rewritten step: loss %.2e params %.2e states %.2e; plain step (state %d%s%s)", c->worst_loss,
                         c->worst_param, c->worst_state, (int)pc.state, pc.note[0] ? ": " : "", pc.note);
        if (pc.c && k > 0 && (size_t)k < n)
            snprintf(err + k, n - (size_t)k, ": loss %.2e params %.2e states %.2e", pc.c->worst_loss, pc.c->worst_param, pc.c->worst_state);
    }
    session_run_free(r);
    return ok;
}

/* The mask of axes that split the batch: those tiling a dim of an input in
 * the batch groups (structure.h). */
static unsigned batch_axes(const shard_state *st)
{
    const ir_graph *g = st->g;
    const shard_groups *gs = shard_state_groups(st);
    int grps[64];
    char why[160];
    int n = shard_batch_groups(g, gs, grps, 64, why, sizeof why);
    unsigned axes = 0;
    for (int j = 0; j < n; j++) {
        const shard_group *G = &gs->groups[grps[j]];
        for (int k = 0; k < G->n; k++) {
            const shard_member *m = &gs->members[G->first + k];
            const shard_spec *s = &st->spec[m->value];
            for (int i = 0; i < s->n[m->dim]; i++) axes |= 1u << s->axes[m->dim][i];
        }
    }
    return axes;
}

/* Every param's gradient reduced over every axis that splits the batch: a
 * term of it (the completed gradient, the terms that sum to it: each
 * micro-batch's, a tied param's uses, and scalings of them) computed with
 * the batch split over an axis is a partial sum over that axis, and the
 * all-reduces and reduce-scatters of those values cover every such axis
 * (where lowering gathered the batch for the contraction instead, the terms
 * are whole and need none: counted in *gathered).  In a step of several
 * micro-batches every micro-batch makes a term of every param's gradient.
 * Returns the params that miss one (0: none), naming the first in err. */
static int check_gradients(const shard_state *st, const spmd_program *p, int *gathered, char *err, size_t n)
{
    const ir_graph *g = p->g;
    unsigned need = batch_axes(st) & ~st->reserved_axes;
    int *gp = malloc((size_t)g->n_values * sizeof *gp); /* the param a value is a gradient of, or -1 */
    unsigned *got = calloc((size_t)g->n_values, sizeof *got), *partial = calloc((size_t)g->n_values, sizeof *partial);
    uint64_t *micros = calloc((size_t)g->n_values, sizeof *micros);
    if (!gp || !got || !partial || !micros) abort();
    for (int v = 0; v < g->n_values; v++) gp[v] = g->values[v].grad_of;
    for (int i = g->n_ops - 1; i >= 0; i--) { /* back through the sums that make it (micro-batches', a tied param's terms) */
        const ir_op *o = &g->ops[i];
        int sum = o->kind == IR_OP_ADD || o->kind == IR_OP_SCALE || g->values[o->out].made_by == IR_MADE_BY_ACCUMULATE;
        if (gp[o->out] < 0 || !sum) continue;
        for (int k = 0; k < o->n_in; k++) gp[o->in[k]] = gp[o->out];
    }
    for (int i = 0; i < g->n_ops; i++) { /* forward through scalings (Adam's first use) */
        const ir_op *o = &g->ops[i];
        if (o->kind == IR_OP_SCALE && gp[o->in[0]] >= 0 && gp[o->out] < 0) gp[o->out] = gp[o->in[0]];
    }
    for (int v = 0; v < g->n_values; v++)
        if (gp[v] >= 0 && g->values[v].micro >= 0 && g->values[v].micro < 64) micros[gp[v]] |= 1ull << g->values[v].micro;
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (gp[in->value] < 0) continue;
        if (in->kind == SPMD_ALL_REDUCE || in->kind == SPMD_REDUCE_SCATTER) got[gp[in->value]] |= in->axes;
        if (in->kind == SPMD_COMPUTE) partial[gp[in->value]] |= p->bufs[in->out].spec.partial;
    }
    int bad = 0, mb = g->rewrites.microbatches;
    uint64_t all = mb > 1 ? (mb >= 64 ? ~0ull : (1ull << mb) - 1) : 0;
    for (int v = 0; v < g->n_values; v++) {
        if (g->values[v].role != IR_PARAM) continue;
        int has_grad = 0;
        for (int u = 0; u < g->n_values && !has_grad; u++) has_grad = g->values[u].grad_of == v;
        if (!has_grad) continue;
        *gathered += __builtin_popcount(need & ~partial[v] & ~got[v]);
        if ((partial[v] & ~got[v]) && !bad++)
            snprintf(err, n, "'%s': gradient terms partial over axes %#x, reduced over %#x (the batch is split over %#x)", g->values[v].name,
                     partial[v], got[v], need);
        else if (mb > 1 && micros[v] != all && !bad++)
            snprintf(err, n, "'%s': gradient terms from micro-batches %#llx of %d", g->values[v].name, (unsigned long long)micros[v], mb);
    }
    free(gp);
    free(got);
    free(partial);
    free(micros);
    return bad;
}

/* Graph FLOPs of a recomputed step r against the step s it was made from
 * (the same schedule without its remat: tactics): r has s's FLOPs plus its
 * clones', each clone the FLOPs of the op it copies.  Returns 1 when so. */
static int check_remat_flops_graph(const ir_graph *s, const ir_graph *r, char *err, size_t n)
{
    double clones = 0, originals = 0;
    for (int i = 0; i < r->n_ops; i++) {
        const ir_value *x = &r->values[r->ops[i].out];
        if (x->made_by != IR_MADE_BY_REMAT) continue;
        clones += ir_op_flops(r, i);
        originals += x->of >= 0 && r->values[x->of].producer >= 0 ? ir_op_flops(r, r->values[x->of].producer) : NAN;
    }
    double fs = ir_graph_flops(s), fr = ir_graph_flops(r);
    int ok = clones > 0 && clones == originals && fabs(fr - (fs + clones)) <= 1e-9 * fr;
    if (!ok) snprintf(err, n, "recomputed step %.6g FLOPs, step %.6g + clones %.6g (their originals %.6g)", fr, fs, clones, originals);
    return ok;
}

/* Per-device FLOPs of compute instructions whose value was made by a
 * recomputation (made_by), as the cost model counts them. */
static double clone_flops_per_device(const spmd_program *p)
{
    const ir_graph *g = p->g;
    double f = 0;
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (in->kind != SPMD_COMPUTE || g->values[in->value].made_by != IR_MADE_BY_REMAT) continue;
        const ir_op *o = &g->ops[in->op];
        int rank[IR_MAX_OPERANDS] = {0};
        int64_t dims[IR_MAX_OPERANDS][IR_MAX_RANK], out[IR_MAX_RANK];
        for (int k = 0; k < o->n_in; k++) {
            rank[k] = g->values[o->in[k]].rank;
            spmd_buffer_dims(p, in->in[k], dims[k]);
        }
        spmd_buffer_dims(p, in->out, out);
        f += ir_op_flops_dims(o, rank, (const int64_t(*)[IR_MAX_RANK])dims, g->values[in->value].rank, out);
    }
    return f;
}

/* The per-device FLOPs of a program as priced (f32, the cpu profile). */
static double priced_flops(const ctx *x, const spmd_program *p)
{
    cost_estimate e;
    char err[256];
    cost_options opt = {.precision = COST_FP32};
    cost_ws *ws = cost_ws_new(p->g);
    int rc = cost_estimate_program(ws, p, &x->hw, &opt, &e, err, sizeof err);
    cost_ws_free(ws);
    return rc < 0 ? NAN : e.flops;
}

/* 1 when the params' and optimizer states' layouts of a and b agree (by name). */
static int same_layouts(const shard_state *a, const shard_state *b, char *err, size_t n)
{
    for (int v = 0; v < a->g->n_values; v++) {
        const ir_value *x = &a->g->values[v];
        if (x->role != IR_PARAM && x->role != IR_OPT_STATE) continue;
        int u = ir_find(b->g, x->name);
        if (u < 0) continue;
        shard_spec sa = a->spec[v], sb = b->spec[u];
        if (memcmp(sa.n, sb.n, sizeof sa.n) || memcmp(sa.axes, sb.axes, sizeof sa.axes)) {
            snprintf(err, n, "'%s' is laid out differently with the rewrite", x->name);
            return 0;
        }
    }
    return 1;
}

/* ---- one composition ---------------------------------------------------------------- */

/* The schedule of the tactics `order` (k of them) without those of `drop`
 * (a mask over tactic kinds: REWRITE, PIPE), as text into buf. */
static void schedule_text(const model *m, const int *order, int k, unsigned drop, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < k; i++)
        if (!(drop >> tactics[order[i]].kind & 1))
            len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? "," : "", tac_text(m, order[i]));
}

static void mesh_text(unsigned axes, char *buf, size_t n)
{
    snprintf(buf, n, "%s%s%s%s", axes & AX_PIPE ? "pipe=2," : "", axes & AX_DATA ? "data=2," : "", axes & AX_MODEL ? "model=2," : "",
             axes ? "" : "data=2,");
    buf[strlen(buf) - 1] = 0;
}

/* The state of schedule `text` on mesh (its step built), or NULL with a message. */
static shard_state *state_of(ctx *x, const char *text, const char *mtext, const ir_graph **g, pipe_spec *ps, char *err,
                             size_t n)
{
    shard_mesh mesh;
    schedule sc;
    if (shard_mesh_parse(mtext, &mesh, err, n) < 0 || sched_parse(text[0] ? text : "auto", &mesh, &sc, err, n) < 0) return NULL;
    if (!text[0]) sc.n = 0;
    if (!(*g = step_of(x, &sc, &mesh, mtext, err, n))) return NULL;
    return session_run_state(*g, &mesh, &sc, ps, err, n);
}

/* The invariants of one lowered composition (its state st, program rp). */
static void invariants(ctx *x, const int *order, int k, const char *mtext, const ir_graph *g, shard_state *st,
                       const session_run_program *rp, const char *sched)
{
    char err[512], without[512];
    int has_remat = 0, has_rewrite = 0;
    for (int i = 0; i < k; i++) {
        has_remat |= !strncmp(tactics[order[i]].name, "remat", 5);
        has_rewrite |= tactics[order[i]].kind != SHARD;
    }
    x->c.grads++;
    CHECKF(check_gradients(st, rp->p, &x->c.gathered, err, sizeof err) == 0, "%s %s on %s: %s", x->m->name, sched, mtext, err);
    if (!has_rewrite) return;
    /* the same sharding tactics without the rewrites (a pipeline's axis stays, unused) */
    schedule_text(x->m, order, k, 1u << REWRITE | 1u << PIPE, without, sizeof without);
    const ir_graph *g0;
    pipe_spec ps0;
    shard_state *st0 = state_of(x, without, mtext, &g0, &ps0, err, sizeof err);
    CHECKF(st0 != NULL, "%s %s without its rewrites: %s", x->m->name, sched, err);
    if (!st0) return;
    x->c.layouts++;
    CHECKF(same_layouts(st, st0, err, sizeof err), "%s %s on %s: %s (as '%s' lays it out)", x->m->name, sched, mtext, err, without);
    if (has_remat && rp->pp.spec.axis < 0) {
        /* the step before recomputation: the same schedule without its remat: tactics */
        char no_remat[512];
        size_t len = 0;
        no_remat[0] = 0;
        for (int i = 0; i < k; i++)
            if (strncmp(tactics[order[i]].name, "remat", 5))
                len += (size_t)snprintf(no_remat + len, sizeof no_remat - len, "%s%s", len ? "," : "", tac_text(x->m, order[i]));
        const ir_graph *gs;
        pipe_spec pss;
        shard_state *ss = state_of(x, no_remat, mtext, &gs, &pss, err, sizeof err);
        if (ss && !(x->c.flops_graph++, check_remat_flops_graph(gs, g, err, sizeof err)))
            CHECKF(0, "%s %s: %s", x->m->name, sched, err);
        if (ss) {
            spmd_program *p0 = spmd_lower(ss);
            double fr = priced_flops(x, rp->p), f0 = priced_flops(x, p0), fc = clone_flops_per_device(rp->p);
            x->c.flops_priced++;
            CHECKF(fc > 0 && fabs(fr - (f0 + fc)) <= 1e-9 * fr, "%s %s on %s: priced %.6g FLOPs per device, without remat %.6g + clones %.6g",
                   x->m->name, sched, mtext, fr, f0, fc);
            spmd_free(p0);
            shard_state_free(ss);
        }
    }
    shard_state_free(st0);
}

/* Composition `order` (k tactics) of model x->m: lowered, run when its program
 * is new, its invariants checked; or refused as designed. */
static void compose(ctx *x, const int *order, int k)
{
    char sched[512], mtext[64], err[1024];
    unsigned axes = 0;
    int micro = 0, pipe = 0;
    for (int i = 0; i < k; i++) {
        axes |= tactics[order[i]].axes;
        micro |= order[i] == T_MICRO;
        pipe |= order[i] == T_PIPE;
    }
    schedule_text(x->m, order, k, 0, sched, sizeof sched);
    mesh_text(axes, mtext, sizeof mtext);
    x->c.orders++;
    const ir_graph *g = NULL;
    pipe_spec ps;
    shard_state *st = state_of(x, sched, mtext, &g, &ps, err, sizeof err);
    if (micro && pipe) { /* by design: the pipeline makes its own micro-batches */
        x->c.refused++;
        CHECKF(!st && strstr(err, "the pipeline makes its own micro-batches"), "%s %s: '%s'", x->m->name, sched, err);
        shard_state_free(st);
        return;
    }
    CHECKF(st != NULL, "%s %s on %s: %s", x->m->name, sched, mtext, err);
    if (!st) return;
    session_run_program rp;
    int rc = session_run_program_build(&rp, st, &ps, &(session_source){.model = x->m->spec, .optimizer = "adam"}, &x->hw, err, sizeof err);
    CHECKF(rc == 0, "%s %s on %s: %s", x->m->name, sched, mtext, err);
    if (rc == 0) {
        if (seen_before(x, program_hash(&rp, g))) {
            x->c.same_program++;
        } else {
            char what[640];
            snprintf(what, sizeof what, "%s %s on %s", x->m->name, sched, mtext);
            x->c.programs++;
            int ok = run_numeric(x, &rp, what, err, sizeof err);
            x->c.numeric_fail += !ok;
            CHECKF(ok, "%s: %s", what, err);
            invariants(x, order, k, mtext, g, st, &rp, sched);
        }
        session_run_program_free(&rp);
    }
    shard_state_free(st);
}

/* Every order of the tactics in `set` (k of them). */
static void permute(ctx *x, int *set, int k, int at)
{
    if (at == k) {
        compose(x, set, k);
        return;
    }
    for (int i = at; i < k; i++) {
        int t = set[at];
        set[at] = set[i];
        set[i] = t;
        permute(x, set, k, at + 1);
        set[i] = set[at];
        set[at] = t;
    }
}

/* A tactic skipped by construction for model m: carve refuses it alone. */
static void check_skipped(ctx *x, int t)
{
    char err[512] = "", mtext[64];
    const ir_graph *g;
    pipe_spec ps;
    mesh_text(tactics[t].axes, mtext, sizeof mtext);
    shard_state *st = state_of(x, tac_text(x->m, t), mtext, &g, &ps, err, sizeof err);
    CHECKF(!st && err[0], "%s: %s applies, but the test skips it", x->m->name, tactics[t].name);
    shard_state_free(st);
    if (!st) printf("  skipped by construction: %s (carve refuses it: %s)\n", tactics[t].name, err);
}

static void test_model(const model *m, counts *total)
{
    char err[512];
    ctx *x = calloc(1, sizeof *x);
    if (!x) abort();
    x->m = m;
    session_source src = {.model = m->spec, .optimizer = "adam"};
    x->plain = session_load_plain(&src, err, sizeof err);
    CHECKF(x->plain && session_run_hw(NULL, &x->hw, err, sizeof err) == 0 && session_world_init(&x->w, EXEC_THREADS, err, sizeof err) == 0,
           "%s: %s", m->name, err);
    if (!x->plain) return;
    int usable[N_TAC], nu = 0, skipped_orders = 0;
    for (int t = 0; t < N_TAC; t++) {
        if (m->skip >> t & 1) check_skipped(x, t);
        else usable[nu++] = t;
    }
    int n_skip = N_TAC - nu; /* orders of the pairs and triples holding a skipped tactic */
    skipped_orders = 2 * (N_TAC * (N_TAC - 1) / 2 - nu * (nu - 1) / 2) +
                     6 * (N_TAC * (N_TAC - 1) * (N_TAC - 2) / 6 - nu * (nu - 1) * (nu - 2) / 6);
    (void)n_skip;
    for (int a = 0; a < nu; a++)
        for (int b = a + 1; b < nu; b++) {
            int set[2] = {usable[a], usable[b]};
            permute(x, set, 2, 0);
            for (int c = b + 1; c < nu; c++) {
                int set3[3] = {usable[a], usable[b], usable[c]};
                permute(x, set3, 3, 0);
            }
        }
    x->c.skipped = skipped_orders;
    printf("%s: %d orders of %d pairs and triples: %d programs run and checked (%d failed; %d of them against the rewritten step "
           "only, by design), %d orders the "
           "same program as one of them, %d refused by design (microbatch with pipeline), %d skipped by construction; invariants: "
           "gradient reductions %d (%d param-axis pairs where the batch was gathered for the contraction instead), layouts "
           "unchanged by rewrites %d, recomputed FLOPs %d in the graph and %d priced\n",
           m->name, x->c.orders, nu * (nu - 1) / 2 + nu * (nu - 1) * (nu - 2) / 6, x->c.programs, x->c.numeric_fail,
           x->c.plain_skipped, x->c.same_program, x->c.refused, x->c.skipped, x->c.grads, x->c.gathered, x->c.layouts, x->c.flops_graph, x->c.flops_priced);
    total->orders += x->c.orders;
    total->programs += x->c.programs;
    total->same_program += x->c.same_program;
    total->refused += x->c.refused;
    total->skipped += x->c.skipped;
    total->numeric_fail += x->c.numeric_fail;
    total->plain_skipped += x->c.plain_skipped;
    total->grads += x->c.grads;
    total->layouts += x->c.layouts;
    total->flops_graph += x->c.flops_graph;
    total->flops_priced += x->c.flops_priced;
    for (int i = 0; i < x->n_steps; i++) ir_free(x->steps[i].g);
    ir_free(x->plain);
    session_world_end(&x->w, 0, err, sizeof err);
    free(x->seen);
    free(x);
}

/* One checked run of step g (taken over) under `sched` on `mesh_text`,
 * with the plain step of `spec`; its plain-step report in *pc (state and
 * whether the whole run passed).  Returns session_run_ok, or -1 when the
 * run could not be made. */
static int checked_run(const char *spec, ir_graph *g, const char *mesh_text, const char *sched, session_plain_state *state)
{
    char err[1024];
    shard_mesh mesh;
    schedule sc;
    session_world w;
    cost_hw hw;
    session_source src = {.model = spec, .optimizer = "adam"};
    ir_graph *plain = session_load_plain(&src, err, sizeof err);
    int ok = -1;
    pipe_spec ps;
    shard_state *st = NULL;
    session_run_program rp;
    session_run *r = NULL;
    session_run_memory mem;
    if (!plain || shard_mesh_parse(mesh_text, &mesh, err, sizeof err) < 0 || sched_parse(sched, &mesh, &sc, err, sizeof err) < 0 ||
        session_world_init(&w, EXEC_THREADS, err, sizeof err) < 0 || session_run_hw(NULL, &hw, err, sizeof err) < 0 ||
        !(st = session_run_state(g, &mesh, &sc, &ps, err, sizeof err)) ||
        session_run_program_build(&rp, st, &ps, &(session_source){.model = spec, .optimizer = "adam"}, &hw, err, sizeof err) < 0) {
        CHECKF(0, "%s: %s", sched, err);
        ir_free(plain);
        shard_state_free(st);
        ir_free(g);
        return -1;
    }
    int rc = session_run_open(&r, &w, &rp.pp, rp.ref, sched, 7, &mem, err, sizeof err);
    rp.ref = NULL; /* the run took it over */
    if (!rc) {
        session_run_set_plain(r, plain, NULL);
        plain = NULL;
        session_step_times t;
        rc = session_run_start(r, err, sizeof err);
        if (!rc) rc = session_run_step(r, 1, &t, err, sizeof err);
        *state = session_run_plain(r).state;
        ok = session_run_ok(r) && (!rc || rc == SESSION_CHECK_FAILED);
    }
    session_run_free(r);
    session_run_program_free(&rp);
    ir_free(plain);
    shard_state_free(st);
    ir_free(g);
    return ok;
}

/* The plain-step check fails closed on the rewrites it exists for: a step
 * whose rewrite drops an update, or scales a gradient wrongly, passes the
 * check against its own single-device run (the reference runs the same
 * wrong step) and fails the one against the plain step; dropout under
 * micro-batches is said, not compared. */
static void test_oracle_catches(void)
{
    const char *spec = "gpt:layers=2,hidden=16,heads=2,seq=8,batch=8,vocab=32";
    char err[512], label[256];
    shard_mesh mesh;
    schedule sc;
    shard_mesh_parse("data=2", &mesh, err, sizeof err);
    sched_parse("microbatch:2,dp:data", &mesh, &sc, err, sizeof err);
    session_source src = {.model = spec, .optimizer = "adam", .sched = &sc, .mesh = &mesh};
    session_plain_state state = SESSION_PLAIN_SAME;
    /* one param's mean over the micro-batches taken as their sum */
    ir_graph *g = session_load_step(&src, label, sizeof label, NULL, err, sizeof err);
    int scaled = 0;
    for (int i = 0; g && i < g->n_ops && !scaled; i++) {
        const ir_value *x = &g->values[g->ops[i].out];
        if (x->made_by == IR_MADE_BY_ACCUMULATE && x->grad_of >= 0 && g->ops[i].kind == IR_OP_SCALE) g->ops[i].attrs.scalar = 1.0, scaled = 1;
    }
    int ok = g ? checked_run(spec, g, "data=2", "microbatch:2,dp:data", &state) : -1;
    CHECKF(scaled && ok == 0 && state == SESSION_PLAIN_CHECKED, "a wrongly averaged gradient: ok %d, state %d", ok, (int)state);
    /* an update dropped (the last param's) */
    g = session_load_step(&src, label, sizeof label, NULL, err, sizeof err);
    for (int i = g ? g->n_outputs - 1 : -1; i >= 0; i--)
        if (g->outputs[i].updates >= 0 && g->values[g->outputs[i].updates].role == IR_PARAM) {
            memmove(&g->outputs[i], &g->outputs[i + 1], (size_t)(g->n_outputs - i - 1) * sizeof *g->outputs);
            g->n_outputs--;
            break;
        }
    ok = g ? checked_run(spec, g, "data=2", "microbatch:2,dp:data", &state) : -1;
    CHECKF(ok == 0 && state == SESSION_PLAIN_MISSING, "an update dropped: ok %d, state %d", ok, (int)state);
    /* dropout drawn per micro-batch: said, not compared; the run passes on its first check */
    const char *drop = "gpt:layers=2,hidden=16,heads=2,seq=8,batch=8,vocab=32,dropout=0.1";
    session_source dsrc = {.model = drop, .optimizer = "adam", .sched = &sc, .mesh = &mesh};
    g = session_load_step(&dsrc, label, sizeof label, NULL, err, sizeof err);
    ok = g ? checked_run(drop, g, "data=2", "microbatch:2,dp:data", &state) : -1;
    CHECKF(ok == 1 && state == SESSION_PLAIN_SKIPPED, "dropout under micro-batches: ok %d, state %d", ok, (int)state);
}

int main(int argc, char **argv)
{
    /* hundreds of short runs of a few device threads each: idle OpenMP
       threads sleep rather than spin (the executor's numbers do not depend
       on it); libgomp reads the policy when it loads, so the test starts
       itself again with it set */
    if (!getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        execv("/proc/self/exe", argv);
    }
    counts total = {0};
    if (argc < 2 || !strcmp(argv[1], "oracle")) test_oracle_catches();
    for (int i = 0; i < N_MODELS; i++)
        if (argc < 2 || !strcmp(argv[1], models[i].name)) test_model(&models[i], &total);
    printf("all models: %d orders, %d programs run (%d failed), %d of them against the plain step and %d against the rewritten step "
           "only (by design), %d orders sharing a program run, %d refused by design, %d skipped by construction\n",
           total.orders, total.programs, total.numeric_fail, total.programs - total.plain_skipped, total.plain_skipped, total.same_program,
           total.refused, total.skipped);
    return test_done();
}
