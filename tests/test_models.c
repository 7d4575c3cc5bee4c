/* test_models.c - model specs, presets, builders and size formulas.
 *
 * Parses specs (and every kind of bad spec), checks the registry's rows
 * (typed configs, key order, batch key, presets), builds MLP and GPT forward
 * graphs for several configs and checks them with ir_verify, checks the
 * parameter-count and FLOP formulas against the built graphs, checks layer
 * tags and that repeated layers have the same op sequence, and builds the
 * gpt-39b forward graph (shapes only), printing its build time and memory
 * (reported, not asserted: timings are noisy).  Training steps (through
 * ir_train_step) are built for mlp-tiny, gpt-tiny and gpt-39b and checked for
 * gradients, optimizer outputs and repeated layer structure.
 */
#include "models/models.h"
#include "tests/test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static long max_rss_kb(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

static void test_parse(void)
{
    model_config c;
    char err[512], buf[256];
    CHECKF(model_parse("mlp", &c, err, sizeof err) == 0, "%s", err);
    CHECK(strcmp(c.model, "mlp") == 0 && c.preset[0] == 0);
    CHECK(model_get(&c, "layers") == 2 && model_get(&c, "batch") == 32 && model_get(&c, "in") == 64);
    CHECK(model_get(&c, "hidden") == 256 && model_get(&c, "out") == 16);
    CHECK(model_get(&c, "heads") == -1);
    CHECK(strcmp(model_config_str(&c, buf, sizeof buf), "mlp:layers=2,batch=32,in=64,hidden=256,out=16") == 0);

    CHECKF(model_parse("gpt-1.3b", &c, err, sizeof err) == 0, "%s", err);
    CHECK(strcmp(c.model, "gpt") == 0 && strcmp(c.preset, "gpt-1.3b") == 0);
    CHECK(model_get(&c, "layers") == 24 && model_get(&c, "hidden") == 2048 && model_get(&c, "heads") == 32);
    CHECK(model_get(&c, "seq") == 1024 && model_get(&c, "vocab") == 51200 && model_get(&c, "batch") == 8);

    /* Overrides apply on top of a preset; keys in any order. */
    CHECKF(model_parse("gpt-1.3b:batch=16,layers=4", &c, err, sizeof err) == 0, "%s", err);
    CHECK(strcmp(c.preset, "gpt-1.3b") == 0 && model_get(&c, "batch") == 16 && model_get(&c, "layers") == 4);
    CHECK(model_get(&c, "hidden") == 2048);
    model_config_str(&c, buf, sizeof buf);
    CHECK(strcmp(buf, "gpt:layers=4,hidden=2048,heads=32,seq=1024,batch=16,vocab=51200") == 0);

    /* The canonical string parses back to the same values. */
    model_config d;
    CHECKF(model_parse(buf, &d, err, sizeof err) == 0, "%s", err);
    CHECK(d.n_keys == c.n_keys && memcmp(d.values, c.values, sizeof c.values) == 0);

    CHECKF(model_parse("gpt:layers=2,hidden=64,heads=4,seq=8,batch=2,vocab=100", &c, err, sizeof err) == 0, "%s", err);
    CHECK(model_get(&c, "vocab") == 100 && model_get(&c, "heads") == 4);

    /* Every model and preset name parses on its own and describes itself. */
    int n = 0;
    for (const char *const *p = model_names(); *p; p++, n++) {
        CHECKF(model_parse(*p, &c, err, sizeof err) == 0, "%s: %s", *p, err);
        const char *desc = model_describe(*p);
        CHECKF(desc && desc[0] && !strchr(desc, '\n'), "%s: '%s'", *p, desc ? desc : "(null)");
    }
    CHECK(n == 44);
    CHECK(model_describe("gpt-7b") == NULL);
    CHECK(strstr(model_describe("gpt-1.3b"), "GPT-3 XL") != NULL);
    CHECK(strstr(model_describe("gpt"), "GPT decoder") != NULL);
}

static void test_parse_errors(void)
{
    static const struct {
        const char *spec, *want, *want2;
    } cases[] = {
        {"", "empty", NULL},
        {"foo", "unknown model 'foo' (models: mlp, gpt, gns, unet, llama, moe, vit, t5; presets: carve models)", NULL},
        {"gpt-7b:layers=2", "unknown model 'gpt-7b'", "did you mean gpt-76b?"},
        {"llama2-7", "unknown model 'llama2-7'", "did you mean llama2-7b?"}, /* the end of the list once fell off */
        {"t5-smal", "unknown model 't5-smal'", "did you mean t5-small?"},
        {":layers=2", "unknown model ''", NULL},
        {"averyveryveryverylongmodelname-that-is-long", "unknown model", NULL},
        {"gpt:depth=3", "unknown key 'depth' for gpt", "keys: layers, hidden, heads, seq, batch, vocab"},
        {"mlp:heads=2", "unknown key 'heads' for mlp", "keys: layers, batch, in, hidden, out"},
        {"gpt:layers=x", "bad number 'x' for key 'layers'", NULL},
        {"gpt:layers=", "bad number '' for key 'layers'", NULL},
        {"gpt:layers=3x", "bad number '3x'", NULL},
        {"gpt:layers=1.5", "bad number '1.5'", NULL},
        {"gpt:layers=+3", "bad number '+3'", NULL},
        {"gpt:layers=99999999999999999999", "bad number", NULL},
        {"gpt:layers=0", "layers=0 must be positive", NULL},
        {"gpt-tiny:batch=-4", "batch=-4 must be positive", NULL},
        {"gpt:heads=5", "heads=5 does not divide hidden=768", NULL},
        {"gpt-tiny:hidden=60", "heads=8 does not divide hidden=60", NULL},
        {"gpt:layers=100000", "layers=100000 is too large (at most 4096)", NULL},
        {"gpt:vocab=1000000000", "vocab=1000000000 is too large", NULL},
        {"gpt:seq=1048576,batch=1048576", "too large: attention scores", "limit 2^48"},
        {"gpt:seq=1048576,batch=65536,heads=1", "too large: attention scores", NULL},
        {"gpt:batch=1048576,seq=32,vocab=16777216", "too large: logits", NULL},
        {"mlp:in=16777217", "in=16777217 is too large (at most 16777216)", NULL},
        {"gpt:dropout=1", "bad dropout '1' (expected a rate in [0, 1)", NULL},
        {"gpt:dropout=abc", "bad dropout 'abc'", NULL},
        {"gpt:dropout=-0.1", "bad dropout '-0.1'", NULL},
        {"gpt:dropout=0.1,dropout=0.2", "key 'dropout' given twice", NULL},
        {"llama-tiny:dropout=0.1", "unknown key 'dropout' for llama", NULL},
        {"gpt:", "nothing after ':'", NULL},
        {"gpt:layers=2,", "trailing ','", NULL},
        {"gpt:layers=2,,heads=4", "expected key=value, got ''", NULL},
        {"gpt:layers", "expected key=value, got 'layers'", NULL},
        {"gns:edges=0", "edges=0 must be positive", NULL},
        {"unet:size=100", "size=100 must be a multiple of 2^(levels-1) = 16", NULL},
        {"unet:levels=5,size=16", "at least twice that", NULL},
        {"unet:size=65536,batch=65536", "too large: decoder activations", NULL},
        {"gns:nodes=2147483648", "nodes=2147483648 is too large", NULL},
        {"gns:edges=68719476736,hidden=65536", "too large: edge latents [edges,hidden]", NULL},
        {"gpt:=3", "expected key=value, got '=3'", NULL},
        {"gpt:layers=2,layers=3", "key 'layers' given twice", NULL},
    };
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        model_config c;
        char err[512] = "";
        int rc = model_parse(cases[i].spec, &c, err, sizeof err);
        CHECKF(rc == -1, "spec '%s' was accepted", cases[i].spec);
        CHECKF(strstr(err, cases[i].want) != NULL, "spec '%s': got '%s', want '%s'", cases[i].spec, err, cases[i].want);
        if (cases[i].want2)
            CHECKF(strstr(err, cases[i].want2) != NULL, "spec '%s': got '%s', want '%s'", cases[i].spec, err,
                   cases[i].want2);
        CHECKF(!strchr(err, '\n'), "spec '%s': message is not one line", cases[i].spec);
        /* The message names the input (all but the empty spec). */
        if (cases[i].spec[0]) CHECKF(strstr(err, cases[i].spec) != NULL, "spec '%s': '%s'", cases[i].spec, err);
        /* A NULL error buffer is allowed. */
        CHECK(model_parse(cases[i].spec, &c, NULL, 0) == -1);
    }
    CHECK(model_parse(NULL, &(model_config){0}, NULL, 0) == -1);

    /* Builders refuse a config of the other model. */
    model_config c;
    char err[256] = "";
    model_parse("mlp-tiny", &c, NULL, 0);
    CHECK(model_build_gpt(&c, err, sizeof err) == NULL && strstr(err, "not gpt"));
    model_parse("gpt-tiny", &c, NULL, 0);
    CHECK(model_build_mlp(&c, err, sizeof err) == NULL && strstr(err, "not mlp"));
}

/* The registry (models/models.def): each family parses under its name with
 * its defaults, its typed fields are the values the string lookup finds, in
 * the key order the text form writes; the batch key is where the row says;
 * the builders refuse a config of another family (or none); every preset
 * parses to its family with every key set. */
#define KEY_AGREES(key, def, limit)                                                                                    \
    ok &= typed->key == model_get(&c, #key) && typed->key == (def) && !strcmp(c.keys[k], #key) && c.values[k] == (def); \
    k++;
static void test_registry(void)
{
    int families = 0;
#define MODEL(E, id, key_list, batch, dropout, attn, about)                                                                \
    {                                                                                                                  \
        model_config c;                                                                                                \
        CHECK(model_parse(#id, &c, NULL, 0) == 0 && c.family == MODEL_##E && !strcmp(c.model, #id));                   \
        const model_##id##_config *typed = &c.id;                                                                      \
        int ok = 1, k = 0;                                                                                             \
        key_list(KEY_AGREES);                                                                                          \
        CHECKF(ok && k == c.n_keys, "%s: typed config and key list disagree", #id);                                    \
        int b = model_batch_key(&c);                                                                                   \
        CHECKF((b >= 0) == (model_get(&c, "batch") >= 0) && (b < 0 || !strcmp(c.keys[b], "batch")),                    \
               "%s: batch key %d", #id, b);                                                                            \
        ir_graph *g = model_build_forward(&c, NULL, 0);                                                                \
        CHECKF(g != NULL, "%s: default config does not build", #id);                                                   \
        ir_free(g);                                                                                                    \
        families++;                                                                                                    \
    }
#include "models/models.def"
#undef MODEL
    CHECK(families == 8);
    model_config none;
    memset(&none, 0, sizeof none);
    char err[200] = "";
    CHECK(model_build_forward(&none, err, sizeof err) == NULL && strstr(err, "unknown model"));
    CHECK(model_param_count(&none) == -1 && model_forward_flops(&none) == -1 && model_batch_key(&none) == -1);
    model_config gns;
    CHECK(model_parse("gns-tiny", &gns, NULL, 0) == 0 && model_batch_key(&gns) == -1);
    int presets = 0;
    for (const char *const *n = model_names(); *n; n++) {
        model_config c;
        CHECKF(model_parse(*n, &c, err, sizeof err) == 0, "%s: %s", *n, err);
        if (!strcmp(c.model, *n)) continue; /* a family */
        presets++;
        CHECKF(!strcmp(c.preset, *n) && c.family > MODEL_NONE && model_describe(*n), "preset %s", *n);
        for (int i = 0; i < c.n_keys; i++) CHECKF(c.values[i] > 0, "preset %s: key %s unset", *n, c.keys[i]);
    }
    CHECK(presets == 36);
}
#undef KEY_AGREES

/* The FLOPs of a graph's matrix products as the registry's formulas count
 * them (ir_matmul_flops: its einsums, and a fused attention's products whole,
 * what the materialised chain's einsums add up to), counted from the graph. */
static double einsum_flops(const ir_graph *g)
{
    return ir_matmul_flops(g);
}

/* Ops of layers a and b: same count, same kinds, same attributes, in order. */
static int same_layer_structure(const ir_graph *g, int a, int b, int *n_ops)
{
    int ia = 0, ib = 0, n = 0;
    for (;;) {
        while (ia < g->n_ops && g->ops[ia].layer != a) ia++;
        while (ib < g->n_ops && g->ops[ib].layer != b) ib++;
        if (ia == g->n_ops || ib == g->n_ops) {
            *n_ops = n;
            return ia == g->n_ops && ib == g->n_ops;
        }
        const ir_op *x = &g->ops[ia++], *y = &g->ops[ib++];
        if (x->kind != y->kind || x->n_in != y->n_in || memcmp(&x->attrs, &y->attrs, sizeof x->attrs) != 0) return 0;
        const ir_value *vx = &g->values[x->out], *vy = &g->values[y->out];
        if (vx->rank != vy->rank || memcmp(vx->dims, vy->dims, sizeof vx->dims) != 0) return 0;
        n++;
    }
}

/* Builds `spec`, verifies it and checks the formulas against it.  Returns the
 * graph (caller frees) or NULL. */
static ir_graph *build_checked(const char *spec)
{
    model_config c;
    char err[512] = "";
    CHECKF(model_parse(spec, &c, err, sizeof err) == 0, "%s: %s", spec, err);
    ir_graph *g = model_build_forward(&c, err, sizeof err);
    CHECKF(g != NULL, "%s: %s", spec, err);
    if (!g) return NULL;
    CHECKF(ir_verify(g, err, sizeof err) == 0, "%s: %s", spec, err);
    CHECKF(ir_param_count(g) == model_param_count(&c), "%s: graph has %lld params, formula %lld", spec,
           (long long)ir_param_count(g), (long long)model_param_count(&c));
    /* Exact: every term is an integer below 2^53. */
    CHECKF(einsum_flops(g) == model_forward_flops(&c), "%s: graph einsum FLOPs %.17g, formula %.17g", spec,
           einsum_flops(g), model_forward_flops(&c));
    CHECK(g->loss >= 0 && g->values[g->loss].rank == 0 && strcmp(g->values[g->loss].name, "loss") == 0);
    int64_t layers = model_get(&c, "layers") >= 0       ? model_get(&c, "layers")
                     : model_get(&c, "steps") >= 0      ? model_get(&c, "steps")
                     : model_get(&c, "enc_layers") >= 0 ? model_get(&c, "enc_layers") + model_get(&c, "dec_layers")
                                                        : 2 * model_get(&c, "levels") - 1;
    CHECK(g->n_layers == layers);
    CHECK(g->n_outputs == 1 && g->outputs[0].value == g->loss);
    return g;
}

static void test_mlp(void)
{
    const char *specs[] = {"mlp", "mlp-tiny", "mlp:layers=1", "mlp:layers=5,batch=3,in=7,hidden=11,out=2"};
    for (int i = 0; i < 4; i++) {
        ir_graph *g = build_checked(specs[i]);
        if (!g) continue;
        for (int l = 0; l < g->n_layers; l++) {
            char name[32];
            snprintf(name, sizeof name, "layer%d.w", l);
            int w = ir_find(g, name);
            CHECKF(w >= 0 && g->values[w].layer == l && g->values[w].role == IR_PARAM, "%s: %s", specs[i], name);
            snprintf(name, sizeof name, "layer%d.b", l);
            int b = ir_find(g, name);
            CHECKF(b >= 0 && g->values[b].layer == l && g->values[b].rank == 1, "%s: %s", specs[i], name);
        }
        /* ReLU between layers only: layers - 1 of them. */
        int relus = 0;
        for (int k = 0; k < g->n_ops; k++) relus += g->ops[k].kind == IR_OP_RELU;
        CHECK(relus == g->n_layers - 1);
        ir_free(g);
    }
    /* Inner layers of mlp-tiny repeat (layer 2 is the last: no ReLU). */
    ir_graph *g = build_checked("mlp-tiny");
    int n = 0;
    CHECK(g && same_layer_structure(g, 0, 1, &n) && n == 4);
    CHECK(g && !same_layer_structure(g, 1, 2, &n));
    int x = g ? ir_find(g, "x") : -1, y = g ? ir_find(g, "y") : -1;
    CHECK(x >= 0 && g->values[x].role == IR_INPUT && g->values[x].dims[0] == 8 && g->values[x].dims[1] == 16);
    CHECK(y >= 0 && g->values[y].role == IR_INPUT && g->values[y].dims[1] == 8);
    ir_free(g);
}

static void test_gpt_graph(void)
{
    const char *specs[] = {"gpt-tiny", "gpt:layers=1,hidden=32,heads=2,seq=8,batch=2,vocab=50",
                           "gpt:layers=3,hidden=48,heads=3,seq=5,batch=3,vocab=7",
                           "gpt:layers=2,hidden=16,heads=16,seq=1,batch=1,vocab=1"};
    for (int i = 0; i < 4; i++) {
        ir_graph *g = build_checked(specs[i]);
        if (!g) continue;
        model_config c;
        model_parse(specs[i], &c, NULL, 0);
        int64_t h = model_get(&c, "hidden"), L = model_get(&c, "layers");
        /* Per layer params are exactly 12h^2 + 13h; the rest have tag -1. */
        for (int64_t l = -1; l < L; l++) {
            int64_t n = 0;
            for (int v = 0; v < g->n_values; v++)
                if (g->values[v].role == IR_PARAM && g->values[v].layer == l) n += ir_numel(&g->values[v]);
            int64_t want = l < 0 ? (model_get(&c, "vocab") + model_get(&c, "seq") + 2) * h : 12 * h * h + 13 * h;
            CHECKF(n == want, "%s layer %lld: %lld params, want %lld", specs[i], (long long)l, (long long)n, (long long)want);
        }
        /* Layers are tagged and every layer repeats layer 0's op sequence. */
        for (int64_t l = 1; l < L; l++) {
            int n = 0;
            CHECKF(same_layer_structure(g, 0, (int)l, &n) && n > 50, "%s: layer %lld differs from layer 0", specs[i],
                   (long long)l);
        }
        /* Each layer's ops are one contiguous run, in layer order. */
        int last = -1, ok = 1;
        for (int k = 0; k < g->n_ops; k++) {
            int l = g->ops[k].layer;
            if (l >= 0 && l < last) ok = 0;
            if (l >= 0) last = l;
        }
        CHECK(ok);
        ir_free(g);
    }

    /* Shapes, names, inits and tags of gpt-tiny. */
    ir_graph *g = build_checked("gpt-tiny:attention=materialized"); /* the materialised chain's values */
    if (!g) return;
    struct {
        const char *name;
        int layer, rank;
        int64_t dims[4];
    } want[] = {
        {"tokens", -1, 2, {8, 16}},           {"labels", -1, 2, {8, 16}},
        {"wte", -1, 2, {128, 64}},            {"wpe", -1, 2, {16, 64}},
        {"causal_mask", -1, 2, {16, 16}},     {"embed", -1, 3, {8, 16, 64}},
        {"h0.ln1.g", 0, 1, {64}},             {"h1.ln1.b", 1, 1, {64}},
        {"h1.attn.wq", 1, 3, {64, 8, 8}},     {"h1.attn.bv", 1, 2, {8, 8}},
        {"h1.attn.wo", 1, 3, {8, 8, 64}},     {"h1.attn.bo", 1, 1, {64}},
        {"h1.attn.q", 1, 4, {8, 16, 8, 8}},   {"h1.attn.scores", 1, 4, {8, 8, 16, 16}},
        {"h1.attn.probs", 1, 4, {8, 8, 16, 16}}, {"h1.attn.ctx", 1, 4, {8, 16, 8, 8}},
        {"h1.mlp.w1", 1, 2, {64, 256}},       {"h1.mlp.b1", 1, 1, {256}},
        {"h1.mlp.w2", 1, 2, {256, 64}},       {"h1.mlp.act", 1, 3, {8, 16, 256}},
        {"h1.out", 1, 3, {8, 16, 64}},        {"ln_f.g", -1, 1, {64}},
        {"logits", -1, 3, {8, 16, 128}},      {"ce.nll", -1, 2, {8, 16}},
    };
    for (int i = 0; i < (int)(sizeof want / sizeof want[0]); i++) {
        int v = ir_find(g, want[i].name);
        CHECKF(v >= 0, "no value '%s'", want[i].name);
        if (v < 0) continue;
        const ir_value *x = &g->values[v];
        CHECKF(x->layer == want[i].layer, "%s: layer %d", want[i].name, x->layer);
        CHECKF(x->rank == want[i].rank && memcmp(x->dims, want[i].dims, sizeof(int64_t) * (size_t)x->rank) == 0,
               "%s: wrong shape", want[i].name);
    }
    int tok = ir_find(g, "tokens");
    CHECK(g->values[tok].dtype == IR_I32 && g->values[tok].init == IR_INIT_IDS && g->values[tok].init_arg == 128);
    CHECK(g->values[ir_find(g, "h0.ln2.g")].init == IR_INIT_ONES);
    CHECK(g->values[ir_find(g, "h0.ln2.b")].init == IR_INIT_ZEROS);
    /* The LM head is tied: wte is read by the gather and by the logits einsum. */
    int wte = ir_find(g, "wte"), uses = 0;
    for (int k = 0; k < g->n_ops; k++)
        for (int j = 0; j < g->ops[k].n_in; j++) uses += g->ops[k].in[j] == wte;
    CHECK(uses == 2);
    CHECK(g->ops[g->values[ir_find(g, "logits")].producer].kind == IR_OP_EINSUM);
    /* One stop_grad a layer (the softmax max), one in the loss; the mask is
     * built once (2 iotas, 1 ge), not per layer. */
    int sg = 0, oh = 0, mask_ops = 0;
    for (int k = 0; k < g->n_ops; k++) {
        sg += g->ops[k].kind == IR_OP_STOP_GRAD;
        oh += g->ops[k].kind == IR_OP_ONE_HOT;
        mask_ops += g->ops[k].kind == IR_OP_IOTA || g->ops[k].kind == IR_OP_GE;
    }
    CHECK(sg == 2 + 1 && oh == 1 && mask_ops == 3);

    /* Building is deterministic: the same spec prints the same graph. */
    char *a = NULL, *b = NULL;
    size_t na, nb;
    FILE *fa = open_memstream(&a, &na), *fb = open_memstream(&b, &nb);
    ir_graph *g2 = build_checked("gpt-tiny:attention=materialized");
    ir_print(g, fa);
    if (g2) ir_print(g2, fb);
    fclose(fa);
    fclose(fb);
    CHECK(strcmp(a, b) == 0);
    CHECK(strstr(a, "h1.attn.scores = scale 0.353553391(") != NULL);
    free(a);
    free(b);
    ir_free(g2);
    ir_free(g);
}

static void test_preset_counts(void)
{
    static const struct {
        const char *name;
        double nominal;
    } p[] = {{"gpt-125m", 125e6}, {"gpt-350m", 350e6}, {"gpt-760m", 760e6}, {"gpt-1.3b", 1.3e9},
             {"gpt-2.6b", 2.6e9}, {"gpt-6.7b", 6.7e9}, {"gpt-15b", 15e9},   {"gpt-39b", 39e9}};
    for (int i = 0; i < 8; i++) {
        model_config c;
        model_parse(p[i].name, &c, NULL, 0);
        int64_t L = model_get(&c, "layers"), h = model_get(&c, "hidden");
        int64_t n = model_param_count(&c);
        int64_t per_layer = 12 * h * h + 13 * h;
        CHECK(n == L * per_layer + (model_get(&c, "vocab") + model_get(&c, "seq") + 2) * h);
        /* Within 10% of the size in the preset's name (names are rounded). */
        CHECKF(fabs((double)n / p[i].nominal - 1) < 0.10, "%s has %lld params", p[i].name, (long long)n);
        printf("%-9s L=%-2lld h=%-5lld heads=%-2lld params %14lld (per layer %lld), step %.3g TFLOP (einsums)\n",
               p[i].name, (long long)L, (long long)h, (long long)model_get(&c, "heads"), (long long)n,
               (long long)per_layer, model_step_flops(&c) / 1e12);
    }
    /* A mid-size preset built for real agrees with its formula. */
    ir_graph *g = build_checked("gpt-125m");
    ir_free(g);
}

/* llama: formulas against the graphs, published sizes, structure, errors. */
static void test_llama(void)
{
    const char *specs[] = {"llama-tiny", "llama:layers=1,hidden=32,heads=4,kv_heads=2,ffn=48,seq=8,batch=2,vocab=50",
                           "llama-tiny:kv_heads=16", "llama-tiny:kv_heads=1"};
    for (int i = 0; i < 4; i++) ir_free(build_checked(specs[i]));
    /* published parameter counts: Llama 2 7B 6.74B, 70B 68.98B (Touvron et
     * al. 2023), Llama 3 8B 8.03B (model card), within 0.5% */
    static const struct {
        const char *name;
        double published;
    } p[] = {{"llama2-7b", 6.74e9}, {"llama2-70b", 68.98e9}, {"llama3-8b", 8.03e9}};
    for (int i = 0; i < 3; i++) {
        model_config c;
        CHECK(model_parse(p[i].name, &c, NULL, 0) == 0);
        CHECKF(fabs((double)model_param_count(&c) / p[i].published - 1) < 0.005, "%s has %lld params", p[i].name,
               (long long)model_param_count(&c));
    }
    ir_free(build_checked("llama2-7b"));
    ir_graph *g = build_checked("llama-tiny");
    if (!g) return;
    int n = 0, inputs = 0;
    CHECK(same_layer_structure(g, 0, 1, &n) && n > 0);
    for (int v = 0; v < g->n_values; v++) inputs += g->values[v].role == IR_INPUT;
    /* the rotary tables are made in the graph: no batch input, no param */
    CHECK(inputs == 2 && ir_find(g, "rope.cos") >= 0 && g->values[ir_find(g, "rope.cos")].role == IR_INTERMEDIATE);
    CHECK(ir_find(g, "lm_head") >= 0 && ir_find(g, "h1.attn.wq") >= 0 && g->values[ir_find(g, "h1.attn.wq")].rank == 4);
    ir_free(g);
    static const char *const bad[][2] = {
        {"llama-tiny:kv_heads=3", "kv_heads=3 does not divide heads=16"},
        {"llama-tiny:heads=128", "even head size"},
        {"llama:ffn=0", "ffn=0 must be positive"},
    };
    for (int i = 0; i < 3; i++) {
        model_config c;
        char err[256] = "";
        CHECKF(model_parse(bad[i][0], &c, err, sizeof err) < 0 && strstr(err, bad[i][1]), "%s: %s", bad[i][0], err);
    }
}

/* moe: formulas against the graphs, Mixtral's published size, errors. */
static void test_moe(void)
{
    const char *specs[] = {"moe-tiny", "moe-tiny:topk=1,capacity=100", "moe-tiny:experts=4,topk=3,layers=1"};
    for (int i = 0; i < 3; i++) ir_free(build_checked(specs[i]));
    model_config c;
    CHECK(model_parse("mixtral-8x7b", &c, NULL, 0) == 0);
    /* Mixtral 8x7B: 46.7B parameters (Jiang et al. 2024) */
    CHECKF(fabs((double)model_param_count(&c) / 46.7e9 - 1) < 0.005, "mixtral has %lld params", (long long)model_param_count(&c));
    ir_graph *g = build_checked("moe-tiny");
    if (g) {
        int w1 = ir_find(g, "h0.moe.w1");
        CHECK(w1 >= 0 && g->values[w1].rank == 3 && g->values[w1].dims[0] == 8);
        CHECK(ir_find(g, "h1.moe.xe") >= 0 && ir_find(g, "ce.loss") >= 0);
    }
    ir_free(g);
    char err[256] = "";
    CHECKF(model_parse("moe-tiny:topk=9", &c, err, sizeof err) < 0 && strstr(err, "topk=9 is too large"), "%s", err);
    CHECKF(model_parse("moe-tiny:experts=2,topk=3", &c, err, sizeof err) < 0 && strstr(err, "topk=3 is more than experts=2"),
           "%s", err);
}

/* Published parameter counts of `n` presets, within `tol` (relative). */
static void check_published(const char *const *names, const double *published, int n, double tol)
{
    for (int i = 0; i < n; i++) {
        model_config c;
        CHECK(model_parse(names[i], &c, NULL, 0) == 0);
        CHECKF(fabs((double)model_param_count(&c) / published[i] - 1) < tol, "%s has %lld params, published %.4g", names[i],
               (long long)model_param_count(&c), published[i]);
    }
}

/* vit: formulas against the graphs, published sizes, structure, errors. */
static void test_vit(void)
{
    const char *specs[] = {"vit-tiny", "vit-tiny:patch=8,layers=1", "vit:layers=1,hidden=24,heads=3,mlp=40,image=12,patch=3,channels=2,classes=5,batch=3"};
    for (int i = 0; i < 3; i++) ir_free(build_checked(specs[i]));
    ir_free(build_checked("vit-b16"));
    /* ViT-B/16 86.6M, L/16 304.3M, H/14 632M (Dosovitskiy et al. 2021, table 1; timm's counts) */
    static const char *const names[] = {"vit-b16", "vit-l16", "vit-h14"};
    static const double published[] = {86.57e6, 304.33e6, 632.0e6};
    check_published(names, published, 3, 0.002);
    ir_graph *g = build_checked("vit-tiny:attention=materialized");
    if (!g) return;
    int n = 0, x = ir_find(g, "embed"), pooled = ir_find(g, "pooled");
    CHECK(same_layer_structure(g, 0, 1, &n) && n > 0);
    /* 16 patches and the class token; the class token's row is pooled */
    CHECK(x >= 0 && g->values[x].dims[1] == 17 && pooled >= 0 && g->values[pooled].rank == 2);
    CHECK(ir_find(g, "h0.attn.masked") < 0 && ir_find(g, "h0.attn.probs") >= 0 && ir_find(g, "cls") >= 0);
    ir_free(g);
    model_config c;
    char err[256] = "";
    CHECKF(model_parse("vit-tiny:patch=5", &c, err, sizeof err) < 0 && strstr(err, "patch=5 does not divide image=16"), "%s", err);
    CHECKF(model_parse("vit-tiny:heads=3", &c, err, sizeof err) < 0 && strstr(err, "heads=3 does not divide hidden=64"), "%s", err);
}

/* t5: formulas against the graphs, published sizes, structure, errors. */
static void test_t5(void)
{
    const char *specs[] = {"t5-tiny", "t5-tiny:enc_layers=1,dec_layers=3,dec_seq=5", "t5-tiny:heads=3,dkv=5,hidden=12"};
    for (int i = 0; i < 3; i++) ir_free(build_checked(specs[i]));
    ir_free(build_checked("t5-small"));
    /* T5 v1.0 checkpoints: small 60,506,624 (with the 32-bucket tables,
     * exactly), base 222.9M, large 737.7M, 3B 2.85B (Raffel et al. 2020) */
    static const char *const names[] = {"t5-small", "t5-base", "t5-large", "t5-3b"};
    static const double published[] = {60506624, 222.90e6, 737.67e6, 2.8516e9};
    check_published(names, published, 4, 0.002);
    model_config c;
    CHECK(model_parse("t5-small", &c, NULL, 0) == 0 && model_param_count(&c) == 60506624);
    ir_graph *g = build_checked("t5-tiny");
    if (!g) return;
    int n = 0;
    CHECK(same_layer_structure(g, 0, 1, &n) && n > 0); /* the two encoder layers */
    CHECK(!same_layer_structure(g, 0, 2, &n));         /* the decoder layer has cross-attention */
    int xk = ir_find(g, "dec0.xattn.k"), pb = ir_find(g, "enc.pos_bias");
    /* cross-attention keys come from the 16 encoder positions; the bias is [heads,s,t] */
    CHECK(xk >= 0 && g->values[xk].dims[1] == 16 && ir_find(g, "dec0.attn.masked") >= 0 && ir_find(g, "enc0.attn.masked") < 0);
    CHECK(pb >= 0 && g->values[pb].dims[0] == 8 && g->values[pb].dims[1] == 16 && g->values[pb].dims[2] == 16);
    ir_free(g);
}

static void test_gpt_39b(void)
{
    model_config c;
    char err[512] = "";
    CHECKF(model_parse("gpt-39b", &c, err, sizeof err) == 0, "%s", err);
    long rss0 = max_rss_kb();
    double t0 = now_s();
    ir_graph *g = model_build_forward(&c, err, sizeof err);
    double t1 = now_s();
    CHECKF(g != NULL, "%s", err);
    if (!g) return;
    size_t bytes = (size_t)g->cap_values * sizeof(ir_value) + (size_t)g->cap_ops * sizeof(ir_op) +
                   (size_t)g->name_cap * sizeof(int);
    printf("gpt-39b forward: %d values, %d ops, %lld params; built in %.1f ms; arrays %.2f MB; max RSS +%ld KB\n",
           g->n_values, g->n_ops, (long long)ir_param_count(g), 1e3 * (t1 - t0), (double)bytes / 1e6,
           max_rss_kb() - rss0);
    CHECKF(ir_verify(g, err, sizeof err) == 0, "%s", err);
    CHECK(ir_param_count(g) == model_param_count(&c));
    CHECK(einsum_flops(g) == model_forward_flops(&c));
    CHECK(g->n_layers == 48);
    int n = 0;
    CHECK(same_layer_structure(g, 0, 47, &n) && n > 50);
    int s = ir_find(g, "h47.attn.ctx"); /* fused attention (the default): its context [b, s, heads, d] */
    CHECK(s >= 0 && g->values[s].dims[1] == 1024 && g->values[s].dims[2] == 64 && ir_find(g, "h47.attn.scores") < 0);
    ir_free(g);
}

/* Checks a training step built from `spec`: every param has a gradient
 * "grad/P" and is updated by one output; Adam adds m and v per param (updated
 * too) and a step count.  Returns the step (caller frees) or NULL. */
static ir_graph *step_checked(const char *spec, const ir_optimizer *opt, double *build_s)
{
    model_config c;
    char err[512] = "";
    CHECKF(model_parse(spec, &c, err, sizeof err) == 0, "%s: %s", spec, err);
    double t0 = now_s();
    ir_graph *g = model_build_step(&c, opt, err, sizeof err);
    if (build_s) *build_s = now_s() - t0;
    CHECKF(g != NULL, "%s: %s", spec, err);
    if (!g) return NULL;
    CHECKF(ir_verify(g, err, sizeof err) == 0, "%s: %s", spec, err);
    CHECK(ir_param_count(g) == model_param_count(&c));
    int params = 0, states = 0, graded = 0, updated = 0;
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role == IR_OPT_STATE) states++;
        if (x->role != IR_PARAM) continue;
        params++;
        char name[96];
        snprintf(name, sizeof name, "grad/%s", x->name);
        int gv = ir_find(g, name);
        graded += gv >= 0 && g->values[gv].grad_of == v && g->values[gv].rank == x->rank;
        int n = 0;
        for (int o = 0; o < g->n_outputs; o++) n += g->outputs[o].updates == v;
        updated += n == 1;
    }
    CHECKF(graded == params, "%s: %d of %d params have a gradient", spec, graded, params);
    CHECKF(updated == params, "%s: %d of %d params updated once", spec, updated, params);
    int adam = !opt || opt->kind == IR_ADAM;
    CHECKF(states == (adam ? 2 * params + 1 : 0), "%s: %d optimizer states for %d params", spec, states, params);
    CHECKF(g->n_outputs == 1 + params + states, "%s: %d outputs", spec, g->n_outputs);
    CHECK(g->loss >= 0 && strcmp(g->values[g->loss].name, "loss") == 0);
    return g;
}

static void test_steps(void)
{
    ir_optimizer sgd = {.kind = IR_SGD, .lr = 0.1};
    ir_graph *g = step_checked("mlp-tiny", &sgd, NULL);
    ir_free(g);
    g = step_checked("mlp", NULL, NULL);
    ir_free(g);
    g = step_checked("gpt:layers=3,hidden=48,heads=3,seq=5,batch=3,vocab=7", NULL, NULL);
    /* In a GPT every einsum operand but none of the inputs needs a gradient,
     * so the step's einsums are exactly 3x the forward ones (the formula).
     * (Not so for the MLP: the input x gets no gradient.) */
    model_config c;
    model_parse("gpt:layers=3,hidden=48,heads=3,seq=5,batch=3,vocab=7", &c, NULL, 0);
    CHECKF(g && einsum_flops(g) == model_step_flops(&c), "step einsum FLOPs %.17g, formula %.17g",
           g ? einsum_flops(g) : 0.0, model_step_flops(&c));
    int n01 = 0, n02 = 0;
    /* Forward, backward and optimizer ops of every layer repeat layer 0's. */
    CHECK(g && same_layer_structure(g, 0, 1, &n01) && same_layer_structure(g, 0, 2, &n02) && n01 == n02);
    ir_free(g);

    double t;
    g = step_checked("gpt-tiny", NULL, &t);
    if (g) printf("gpt-tiny step: %d values, %d ops; built in %.1f ms\n", g->n_values, g->n_ops, 1e3 * t);
    ir_free(g);

    long rss0 = max_rss_kb();
    g = step_checked("gpt-39b", NULL, &t);
    if (g) {
        size_t bytes = (size_t)g->cap_values * sizeof(ir_value) + (size_t)g->cap_ops * sizeof(ir_op) +
                       (size_t)g->name_cap * sizeof(int);
        int n = 0;
        CHECK(same_layer_structure(g, 0, 47, &n));
        printf("gpt-39b step: %d values, %d ops (%d a layer); built in %.1f ms; arrays %.2f MB; max RSS +%ld KB\n",
               g->n_values, g->n_ops, n, 1e3 * t, (double)bytes / 1e6, max_rss_kb() - rss0);
    }
    ir_free(g);

    /* A config that did not come from model_parse is refused, not built. */
    model_config bad;
    memset(&bad, 0, sizeof bad);
    snprintf(bad.model, sizeof bad.model, "rnn");
    char err[256] = "";
    CHECK(model_build_step(&bad, NULL, err, sizeof err) == NULL && strstr(err, "unknown model"));
}

/* The GNS: formulas (build_checked), per step two gathers of node rows to
 * the edges and one scatter-add back, all indexed by the i32 edge inputs;
 * steps are layers with the same op sequence; the 2M-edge preset builds. */
static void test_gns(void)
{
    const char *specs[] = {"gns-tiny", "gns:steps=3,nodes=5,edges=7,hidden=6,node_in=3,edge_in=2,out=1", "gns-large"};
    for (int i = 0; i < 3; i++) {
        ir_graph *g = build_checked(specs[i]);
        if (!g) continue;
        int n_gather = 0, n_scatter = 0;
        for (int k = 0; k < g->n_ops; k++) {
            const ir_op *o = &g->ops[k];
            if (o->kind == IR_OP_GATHER) {
                n_gather++;
                const char *ids = g->values[o->in[1]].name;
                CHECK(!strcmp(ids, "senders") || !strcmp(ids, "receivers"));
                CHECK(g->values[o->in[0]].role == IR_INTERMEDIATE && o->layer >= 0);
            }
            if (o->kind == IR_OP_SCATTER_ADD) {
                n_scatter++;
                CHECK(!strcmp(g->values[o->in[0]].name, "receivers"));
                CHECK(g->values[o->out].dims[0] == g->values[ir_find(g, "x")].dims[0]);
            }
        }
        CHECKF(n_gather == 2 * g->n_layers && n_scatter == g->n_layers, "%s: %d gathers, %d scatter-adds", specs[i],
               n_gather, n_scatter);
        int s = ir_find(g, "senders"), w = ir_find(g, "p1.edge.w1_2");
        CHECK(s >= 0 && g->values[s].dtype == IR_I32 && g->values[s].init == IR_INIT_IDS &&
              g->values[s].init_arg == (double)g->values[ir_find(g, "x")].dims[0]);
        CHECK(w >= 0 && g->values[w].layer == 1 && ir_find(g, "p1.agg") >= 0);
        int n_ops = 0;
        CHECK(same_layer_structure(g, 0, g->n_layers - 1, &n_ops) && n_ops > 20);
        ir_free(g);
    }
}

/* The U-Net: formulas (build_checked), per 3x3 convolution two row shifts
 * and two column shifts of each of the three rows of taps, pooling and up-sampling between the levels,
 * one skip concatenation per decoder level; the 2048x2048 preset builds. */
static void test_unet(void)
{
    const char *specs[] = {"unet-tiny", "unet:levels=3,base=2,size=8,batch=1,in=1,out=1", "unet-2048"};
    for (int i = 0; i < 3; i++) {
        ir_graph *g = build_checked(specs[i]);
        if (!g) continue;
        model_config c;
        model_parse(specs[i], &c, NULL, 0);
        int64_t L = model_get(&c, "levels"), convs = 2 * L + 3 * (L - 1);
        int n[IR_N_OPS] = {0};
        for (int k = 0; k < g->n_ops; k++) n[g->ops[k].kind]++;
        CHECKF(n[IR_OP_SHIFT] == 8 * convs && n[IR_OP_REDUCE_MAX] == L - 1 && n[IR_OP_CONCAT] == L - 1,
               "%s: %d shifts, %d pools, %d concats", specs[i], n[IR_OP_SHIFT], n[IR_OP_REDUCE_MAX], n[IR_OP_CONCAT]);
        CHECK(ir_find(g, "d0.c1.w") >= 0 && ir_find(g, "u0.c2.w") >= 0 && ir_find(g, "head.w") >= 0);
        ir_free(g);
    }
}

/* dropout=P (gpt, vit, t5): 0 builds exactly the graph without the key;
 * P > 0 adds, for gpt and vit, one mask on the embeddings and three per
 * block (probabilities, attention output, MLP output), for t5 one per
 * embedding and final norm, 4 per encoder layer and 6 per decoder layer;
 * each read by one multiply, each with its own seed; the canonical text
 * carries it and parses back. */
static void test_dropout(void)
{
    model_config c, d;
    char err[512], buf[256];
    CHECKF(model_parse("gpt-tiny:dropout=0.1", &c, err, sizeof err) == 0 && c.dropout == 0.1, "%s", err);
    model_config_str(&c, buf, sizeof buf);
    CHECKF(!strcmp(buf, "gpt:layers=2,hidden=64,heads=8,seq=16,batch=8,vocab=128,dropout=0.1"), "%s", buf);
    CHECK(model_parse(buf, &d, err, sizeof err) == 0 && d.dropout == c.dropout);
    CHECK(model_parse("gpt-tiny:dropout=0", &c, err, sizeof err) == 0 && c.dropout == 0);
    CHECK(!strcmp(model_config_str(&c, buf, sizeof buf), "gpt:layers=2,hidden=64,heads=8,seq=16,batch=8,vocab=128"));
    static const char *pairs[][2] = {
        {"gpt-tiny", "gpt-tiny:dropout=0"}, {"vit-tiny", "vit-tiny:dropout=0.0"}, {"t5-tiny", "t5-tiny:dropout=0"}};
    for (int i = 0; i < 3; i++) {
        ir_graph *a = build_checked(pairs[i][0]), *b = build_checked(pairs[i][1]);
        char *ja = a ? ir_save_json(a) : NULL, *jb = b ? ir_save_json(b) : NULL;
        CHECKF(ja && jb && !strcmp(ja, jb), "%s and %s build different graphs", pairs[i][0], pairs[i][1]);
        free(ja);
        free(jb);
        ir_free(a);
        ir_free(b);
    }
    static const struct {
        const char *spec;
        int masks;            /* expected */
        const char *names[4]; /* values that must exist */
    } cases[3] = {
        {"gpt-tiny:dropout=0.1", 1 + 3 * 2, {"embed.drop", "h1.attn.probs.drop", "h0.attn.drop", "h1.mlp.drop"}},
        {"vit-tiny:dropout=0.25", 1 + 3 * 2, {"embed.drop", "h1.attn.probs.drop", "h0.attn.drop", "h1.mlp.drop"}},
        {"t5-tiny:dropout=0.1", 2 + 2 + 4 * 2 + 6 * 1, {"enc.embed.drop", "enc1.mlp.act.drop", "dec0.xattn.drop", "dec.ln_f.drop"}},
    };
    for (int i = 0; i < 3; i++) {
        const char *spec = cases[i].spec;
        ir_graph *g = build_checked(spec);
        if (!g) continue;
        int masks = 0, readers_ok = 1, seeds_distinct = 1;
        int64_t seeds[64];
        for (int k = 0; k < g->n_ops; k++) {
            const ir_op *o = &g->ops[k];
            if (o->kind != IR_OP_DROPOUT_MASK) continue;
            int readers = 0;
            for (int j = 0; j < g->n_ops; j++)
                for (int q = 0; q < g->ops[j].n_in; q++) readers += g->ops[j].in[q] == o->out && g->ops[j].kind == IR_OP_MUL;
            readers_ok &= readers == 1;
            for (int j = 0; j < masks && masks < 64; j++) seeds_distinct &= seeds[j] != o->attrs.ints[0];
            if (masks < 64) seeds[masks] = o->attrs.ints[0];
            masks++;
        }
        CHECKF(masks == cases[i].masks && readers_ok && seeds_distinct, "%s: %d masks, want %d", spec, masks,
               cases[i].masks);
        for (int k = 0; k < 4; k++) CHECKF(ir_find(g, cases[i].names[k]) >= 0, "%s: no %s", spec, cases[i].names[k]);
        ir_free(g);
    }
}

int main(void)
{
    test_parse();
    test_parse_errors();
    test_registry();
    test_mlp();
    test_gpt_graph();
    test_gns();
    test_unet();
    test_preset_counts();
    test_llama();
    test_moe();
    test_vit();
    test_t5();
    test_gpt_39b();
    test_steps();
    test_dropout();
    return test_done();
}
