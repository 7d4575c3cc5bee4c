/* shrink.c - a plan's strategy tried small (`carve run --plan big.json
 * --shrink`, session.h): the same family and mesh, every size key made small
 * enough to run on this machine, the plan's decisions replayed by argument
 * name on the small step (those of layers it no longer has dropped), and the
 * run checked against the reference as any run is.
 *
 * The sizes: each key by its role (shrink_rows).  A dim a plan splits over
 * some axes is split over a product P of mesh sizes, and P divides N, the
 * devices of the axes that split dims (all but a pipeline's); a key made
 * gcd(value, N x c) keeps every such P that
 * divided the value (carve pads a split that does not divide, but it needs a
 * row per shard, so the small sizes stay at least N where they can).  Heads
 * become gcd(heads, N) (a tensor-parallel split of heads over axes of product
 * P keeps P), the head size at most 16, the hidden size heads x head size;
 * the layers 2, or a pipeline's stages x chunks.  The plan's derived fields
 * (shardings, collectives, predicted cost) are the big model's, so the small
 * plan is not checked against them; its strategy's practitioner name is
 * compared with the big plan's instead (view/practice.c).
 */
#include "session/session.h"

#include <stdio.h>
#include <string.h>

#include "models/models.h"

typedef enum { SH_KEEP, SH_LAYERS, SH_HEADS, SH_KV, SH_HIDDEN, SH_HEAD_SIZE, SH_WIDE, SH_SEQ, SH_BATCH } shrink_rule;

/* What each size key of the transformer families does (by key name: the
 * families share their keys' meanings, models.def). */
static const struct {
    const char *key;
    shrink_rule rule;
} shrink_rows[] = {
    {"layers", SH_LAYERS}, {"enc_layers", SH_LAYERS}, {"dec_layers", SH_LAYERS}, {"heads", SH_HEADS},
    {"kv_heads", SH_KV},   {"hidden", SH_HIDDEN},     {"dkv", SH_HEAD_SIZE},      {"ffn", SH_WIDE},
    {"mlp", SH_WIDE},      {"vocab", SH_WIDE},        {"classes", SH_WIDE},       {"seq", SH_SEQ},
    {"enc_seq", SH_SEQ},   {"dec_seq", SH_SEQ},       {"batch", SH_BATCH},        {"experts", SH_KEEP},
    {"topk", SH_KEEP},     {"capacity", SH_KEEP},     {"image", SH_KEEP},         {"patch", SH_KEEP},
    {"channels", SH_KEEP},
};

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* What the shrunk sizes must allow: the devices, the layers a pipeline
 * needs, the micro-batches a batch must divide into. */
typedef struct shrink_need {
    int64_t devices, layers, micro;
} shrink_need;

static int64_t shrink_key(shrink_rule r, int64_t v, const model_config *c, const shrink_need *n, int64_t heads)
{
    int64_t N = n->devices;
    switch (r) {
    case SH_KEEP: return v;
    case SH_LAYERS: return v < n->layers ? v : n->layers;
    case SH_HEADS: return gcd64(v, N) > 1 || v < 2 ? gcd64(v, N) : 2;
    case SH_KV: return gcd64(v, heads);
    case SH_HEAD_SIZE: return v < 16 ? v : 16;
    case SH_HIDDEN: { /* heads x a head size of at most 16 (even: rotary embeddings) */
        int64_t h0 = model_get(c, "heads"), dh = h0 > 0 ? v / h0 : v;
        return heads * (dh < 16 ? dh : 16);
    }
    case SH_WIDE: { /* at least N rows where the value has them */
        int64_t w = gcd64(v, N * 16);
        return w < N && v >= N ? N * ((v / N) % 2 ? 1 : 2) : w;
    }
    case SH_SEQ: return gcd64(v, N * 4) >= 8 || v < 8 ? gcd64(v, N * 4) : 8;
    case SH_BATCH: return gcd64(v, N * n->micro);
    }
    return v;
}

/* The spec of cfg shrunk under n, into out (n bytes).  Returns 0, or -1 with
 * a message (a family --shrink does not know). */
static int shrunk_spec(const model_config *cfg, const shrink_need *need, char *out, size_t n, char *err, size_t errlen)
{
    model_config c = *cfg;
    int64_t heads = 0;
    for (int pass = 0; pass < 2; pass++) /* heads first: kv_heads and hidden follow them */
        for (int i = 0; i < c.n_keys; i++) {
            int row = -1;
            for (size_t r = 0; r < sizeof shrink_rows / sizeof shrink_rows[0]; r++)
                if (!strcmp(shrink_rows[r].key, c.keys[i])) row = (int)r;
            if (row < 0)
                return ir_errf(err, errlen, "--shrink: model '%s' has a key '%s' it does not know how to shrink (it shrinks the "
                               "transformer families: gpt, llama, moe, vit, t5)", cfg->model, c.keys[i]);
            shrink_rule r = shrink_rows[row].rule;
            if ((pass == 0) != (r == SH_HEADS)) continue;
            c.values[i] = shrink_key(r, cfg->values[i], cfg, need, heads);
            if (r == SH_HEADS) heads = c.values[i];
        }
    model_config_str(&c, out, n);
    model_config check;
    char e2[512];
    if (model_parse(out, &check, e2, sizeof e2) < 0) return ir_errf(err, errlen, "--shrink: %s", e2);
    return 0;
}

/* The layers and micro-batches the plan's schedule needs. */
static void needs_of(const plan *pl, shrink_need *n)
{
    schedule sc;
    n->devices = pl->mesh.n_devices;
    n->layers = 2;
    n->micro = 1;
    if (!pl->schedule[0] || sched_parse(pl->schedule, &pl->mesh, &sc, NULL, 0) < 0) return;
    for (int i = 0; i < sc.n; i++) {
        const tactic *t = &sc.t[i];
        if (t->kind == TACTIC_MICROBATCH && t->lo > 1) n->micro *= t->lo;
        if (t->kind == TACTIC_PIPELINE) { /* its axis splits no dim: the others' devices do */
            int64_t stages = pl->mesh.sizes[t->axis], chunks = t->hi > 1 ? t->hi : 1;
            n->devices /= stages;
            if (stages * chunks > n->layers) n->layers = stages * chunks;
            n->micro *= t->lo > 0 ? t->lo : 2 * stages; /* its micro-batches (auto: 2 a stage, as a guess of size) */
        }
    }
}

/* Replays the decisions of pl whose arguments the small step has (by name),
 * in order, on st.  *dropped: how many name an argument it lacks (a layer
 * beyond its last).  Returns 0, or -1 with a message. */
static int replay_some(plan *pl, shard_state *st, int *dropped, char *err, size_t errlen)
{
    const ir_graph *g = st->g;
    char e2[256];
    schedule sc;
    *dropped = 0;
    if (pl->schedule[0] && sched_parse(pl->schedule, &pl->mesh, &sc, e2, sizeof e2) == 0 && sched_gather_policy(&sc) >= 0)
        st->gather_policy = sched_gather_policy(&sc);
    for (int i = 0; i < pl->n_decisions; i++) {
        char name[512];
        snprintf(name, sizeof name, "%s", pl->decision_names[i]);
        char *nl = strchr(name, '\n');
        if (!nl) return ir_errf(err, errlen, "decisions[%d]: damaged", i);
        *nl = 0;
        int v = ir_find(g, name), a = shard_mesh_axis(&st->mesh, nl + 1);
        if (v < 0 || a < 0) {
            (*dropped)++;
            continue;
        }
        shard_decision d = pl->decisions[i];
        d.value = v;
        d.axis = (int8_t)a;
        if (shard_apply(st, &d, e2, sizeof e2) < 0)
            return ir_errf(err, errlen, "--shrink: decision %d (%s over %s) does not apply to the small model: %s", i, name, nl + 1, e2);
    }
    return 0;
}

/* A pipeline's layer split, written for the big model's layers, made auto
 * (balanced on the small model by the cost model). */
static void auto_split(plan *pl)
{
    schedule sc;
    char text[SCHED_STR_MAX];
    if (!pl->schedule[0] || sched_parse(pl->schedule, &pl->mesh, &sc, NULL, 0) < 0 || !sc.split[0]) return;
    sc.split[0] = 0;
    if (strlen(sched_str(&sc, &pl->mesh, text, sizeof text)) < sizeof pl->schedule) snprintf(pl->schedule, sizeof pl->schedule, "%s", text);
}

/* The practitioner name of plan pl replayed on st (pipeline axis reserved). */
static void practice_of(const plan *pl, shard_state *st, char *buf, size_t n)
{
    pipe_spec ps;
    char err[256];
    if (session_plan_pipeline(pl, st->g, &ps, err, sizeof err) > 0) st->reserved_axes |= 1u << ps.axis;
    spmd_program *p = spmd_lower(st);
    view_practice_name(st, p, pl->schedule, buf, n);
    spmd_free(p);
}

/* The same for the plan file at path as it is (its big model); "" when it
 * does not open. */
static void practice_of_file(const char *path, char *buf, size_t n)
{
    plan pl;
    ir_graph *g;
    shard_state *st;
    char err[1024];
    buf[0] = 0;
    if (session_plan_open(path, &pl, &g, &st, err, sizeof err) < 0) return;
    practice_of(&pl, st, buf, n);
    shard_state_free(st);
    ir_free(g);
    plan_free(&pl);
}

int session_plan_open_shrunk(const char *path, plan *pl, ir_graph **g, shard_state **st, char *note, size_t n, char *err,
                             size_t errlen)
{
    *g = NULL;
    *st = NULL;
    note[0] = 0;
    if (plan_load(path, pl, err, errlen) < 0) return -1;
    session_plan_attention_form(pl);
    model_config big;
    char e2[1024], small[512];
    shrink_need need;
    needs_of(pl, &need);
    int rc = -1;
    if (!pl->model[0])
        ir_errf(err, errlen, "--shrink: plan '%s' is of a graph file; --shrink makes small models of carve's own families", path);
    else if (model_parse(pl->model, &big, e2, sizeof e2) < 0) ir_errf(err, errlen, "%s: model.spec: %s", path, e2);
    else if (shrunk_spec(&big, &need, small, sizeof small, err, errlen) == 0) rc = 0;
    if (rc == 0) {
        model_config_str(&big, note, n); /* as the user writes it (the default attention form not named) */
        snprintf(pl->model, sizeof pl->model, "%s", small);
        auto_split(pl);
        pl->has_predicted = 0; /* the big model's prediction */
        if (!(*g = session_plan_step(pl, path, err, errlen))) rc = -1;
    }
    int dropped = 0;
    if (rc == 0) {
        *st = shard_state_new(*g, &pl->mesh);
        rc = replay_some(pl, *st, &dropped, err, errlen);
    }
    if (rc == 0) {
        size_t k = strlen(note);
        char name_big[512], name_small[512];
        k += (size_t)snprintf(note + k, n - k, " shrunk to %s: %d of %d decisions replayed (%d name arguments of layers it "
                              "does not have)", small, pl->n_decisions - dropped, pl->n_decisions, dropped);
        practice_of_file(path, name_big, sizeof name_big);
        practice_of(pl, *st, name_small, sizeof name_small);
        if (k < n)
            snprintf(note + k, n - k, "\nshrink: the plan is %s%s%s", name_small,
                     !name_big[0] ? "" : strcmp(name_big, name_small) ? "; the big plan is " : " on both models",
                     !name_big[0] || !strcmp(name_big, name_small) ? "" : name_big);
        return 0;
    }
    shard_state_free(*st);
    ir_free(*g);
    *st = NULL;
    *g = NULL;
    plan_free(pl);
    return -1;
}
