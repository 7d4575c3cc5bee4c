/* test_json.c - graph JSON load/save (ir/json.c): round trips of graphs that
 * use every op and every per-value tag, exact doubles, the hand-written
 * example in tests/graphs/, bad files (each must fail with a one-line message
 * naming its place), atomic saving, and truncated or mutated files (which
 * must never crash; run under ASan by ./build.sh asan). */
#include "ir/ir.h"
#include "ir/pcg32.h"
#include "models/models.h"
#include "tests/test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *print_str(const ir_graph *g)
{
    char *s = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&s, &n);
    ir_print(g, f);
    fclose(f);
    return s;
}

static const char *root_dir(void)
{
    const char *r = getenv("CARVE_ROOT");
    return r && *r ? r : ".";
}

static void graph_path(char *buf, size_t n, const char *file)
{
    snprintf(buf, n, "%s/tests/graphs/%s", root_dir(), file);
}

/* Saves g, loads it back, and checks: it loads and verifies, prints the same,
 * saves to the same bytes, and (when `same_ids`) keeps every value id. */
static void check_round_trip(const ir_graph *g, int same_ids, const char *what)
{
    char err[512] = "";
    char *s1 = ir_save_json(g);
    CHECKF(s1 != NULL, "%s: save", what);
    if (!s1) return;
    ir_graph *g2 = ir_load_json(s1, err, sizeof err);
    CHECKF(g2 != NULL, "%s: load of the saved text: %s", what, err);
    if (!g2) {
        free(s1);
        return;
    }
    CHECKF(ir_verify(g2, err, sizeof err) == 0, "%s: verify: %s", what, err);
    char *p1 = print_str(g), *p2 = print_str(g2);
    CHECKF(strcmp(p1, p2) == 0, "%s: printer output differs:\n--- saved\n%s--- loaded\n%s", what, p1, p2);
    char *s2 = ir_save_json(g2);
    CHECKF(s2 && strcmp(s1, s2) == 0, "%s: save(load(save(g))) differs from save(g)", what);
    if (same_ids) {
        int same = g->n_values == g2->n_values;
        for (int v = 0; same && v < g->n_values; v++) same = strcmp(g->values[v].name, g2->values[v].name) == 0;
        CHECKF(same, "%s: value ids changed", what);
    }
    /* Per-value tags and attributes, field by field (doubles bit for bit). */
    int tags = g->n_values == g2->n_values && g->n_ops == g2->n_ops;
    for (int v = 0; tags && v < g->n_values; v++) {
        const ir_value *a = &g->values[v];
        int w = ir_find(g2, a->name);
        if (w < 0) {
            tags = 0;
            break;
        }
        const ir_value *b = &g2->values[w];
        tags = a->layer == b->layer && a->init == b->init && memcmp(&a->init_arg, &b->init_arg, sizeof(double)) == 0 &&
               (a->tied < 0) == (b->tied < 0) && (a->grad_of < 0) == (b->grad_of < 0) && a->role == b->role &&
               a->dtype == b->dtype;
        if (tags && a->tied >= 0) tags = !strcmp(g->values[a->tied].name, g2->values[b->tied].name);
        if (tags && a->grad_of >= 0) tags = !strcmp(g->values[a->grad_of].name, g2->values[b->grad_of].name);
    }
    for (int i = 0; tags && i < g->n_ops; i++)
        tags = memcmp(&g->ops[i].attrs, &g2->ops[i].attrs, sizeof(ir_attrs)) == 0 || (
            /* padding and unused bytes may differ: compare the fields */
            g->ops[i].attrs.n_ints == g2->ops[i].attrs.n_ints &&
            memcmp(&g->ops[i].attrs.scalar, &g2->ops[i].attrs.scalar, sizeof(double)) == 0 &&
            memcmp(g->ops[i].attrs.ints, g2->ops[i].attrs.ints, sizeof(int64_t) * (size_t)g->ops[i].attrs.n_ints) == 0 &&
            strcmp(g->ops[i].attrs.subscripts, g2->ops[i].attrs.subscripts) == 0);
    CHECKF(tags, "%s: tags or attributes differ after the round trip", what);
    CHECK(g->n_layers == g2->n_layers && (g->loss >= 0) == (g2->loss >= 0));
    free(p1);
    free(p2);
    free(s1);
    free(s2);
    ir_free(g2);
}

/* A graph using every op, layer tags, an argument declared between ops, an
 * optimizer state tied to its param, a gradient tag, inits, odd names and
 * doubles that 15 digits would not keep. */
static ir_graph *build_all_ops(void)
{
    ir_graph *g = ir_new("all ops \"quoted\"");
    int64_t d46[2] = {4, 6}, d4[1] = {4}, d10_6[2] = {10, 6}, d63[2] = {6, 3}, d43[2] = {4, 3}, d12[1] = {12};
    int x = ir_arg(g, "x", IR_INPUT, IR_F32, 2, d46);
    int ids = ir_arg(g, "ids", IR_INPUT, IR_I32, 1, d4);
    ir_set_init(g, ids, IR_INIT_IDS, 10);
    ir_set_layer(g, 0);
    int table = ir_arg(g, "table", IR_PARAM, IR_F32, 2, d10_6);
    ir_set_init(g, table, IR_INIT_NORMAL, 0.1 + 0.2);
    int c = ir_constant(g, 0.1 + 0.2, IR_F32, 2, d46);
    int io = ir_iota(g, IR_F32, 2, d46, 1);
    ir_iota(g, IR_I32, 1, d4, 0); /* an i32 iota nobody reads */
    int n = ir_unary(g, IR_OP_NEG, x);
    int e = ir_unary(g, IR_OP_EXP, n);
    int l = ir_unary(g, IR_OP_LOG, e);
    int s = ir_unary(g, IR_OP_SQRT, e);
    int r = ir_unary(g, IR_OP_RSQRT, s);
    int t = ir_unary(g, IR_OP_TANH, r);
    int ge1 = ir_unary(g, IR_OP_GELU, t);
    int gg = ir_unary(g, IR_OP_GELU_GRAD, ge1);
    int re = ir_unary(g, IR_OP_RELU, gg);
    int sc = ir_scale(g, re, 1e-300);
    int as = ir_add_scalar(g, sc, -0.0);
    int sg = ir_unary(g, IR_OP_STOP_GRAD, as);
    ir_rename(g, sg, "we\"ird\\name\n\t\x01 \xe2\x9c\x93");
    /* every other elementwise op of the table, on x */
    for (int k = 0; k < IR_N_OPS; k++) {
        int used = 0;
        for (int i = 0; i < g->n_ops; i++) used |= g->ops[i].kind == (ir_opkind)k;
        int in[2] = {x, x};
        if (!used && ir_op_elementwise(k)) ir_add_op(g, k, ir_op_arity(k), in, NULL, IR_F32, 0, NULL, NULL);
    }
    ir_set_layer(g, 1);
    int w = ir_arg(g, "w", IR_PARAM, IR_F32, 2, d63); /* declared between ops */
    int ad = ir_binary(g, IR_OP_ADD, sg, c);
    int su = ir_binary(g, IR_OP_SUB, ad, io);
    int mu = ir_binary(g, IR_OP_MUL, su, l);
    int dv = ir_binary(g, IR_OP_DIV, mu, e);
    int mx = ir_binary(g, IR_OP_MAX, dv, x);
    int gq = ir_binary(g, IR_OP_GE, mx, x);
    int es = ir_einsum(g, "bi,ij->bj", gq, w);
    int64_t red0 = 0, red1 = 1, map1 = 1, perm[2] = {1, 0};
    int rs = ir_reduce(g, IR_OP_REDUCE_SUM, es, 1, &red0);
    int bc = ir_broadcast(g, rs, 2, d43, &map1);
    ir_rename(g, bc, "bias/b");
    int rm = ir_reduce(g, IR_OP_REDUCE_MAX, bc, 1, &red1);
    int tr = ir_transpose(g, es, perm);
    int rh = ir_reshape(g, tr, 1, d12);
    ir_set_layer(g, -1);
    int ga = ir_gather(g, table, ids);
    int sa = ir_scatter_add(g, ids, ga, 10);
    int oh = ir_one_hot(g, ids, 10);
    ir_concat(g, ir_pad(g, ir_slice(g, x, 1, 1, 3), 1, 2, 1), x, 0);
    ir_shift(g, x, 1, -2);
    ir_binary(g, IR_OP_MUL, x, ir_dropout_mask(g, g->values[x].rank, g->values[x].dims, 0.1, 9007199254740992));
    ir_argmax(g, ir_reshard(g, ir_cast(g, ir_cast(g, ir_cumsum(g, x, 1), IR_BF16), IR_F32), 1), 1);
    { /* fused attention (causal) and its three backward ops on [1,4,2,3] */
        int64_t qd[4] = {1, 4, 2, 3};
        int q = ir_reshape(g, x, 4, qd);
        int at = ir_attention(g, q, q, q, 0.125, 1), qkvg[4] = {q, q, q, at}, qkg[3] = {q, q, at};
        ir_attrs aa = g->ops[g->values[at].producer].attrs;
        ir_add_op(g, IR_OP_ATTENTION_DQ, 4, qkvg, &aa, IR_F32, 0, NULL, NULL);
        ir_add_op(g, IR_OP_ATTENTION_DK, 4, qkvg, &aa, IR_F32, 0, NULL, NULL);
        ir_add_op(g, IR_OP_ATTENTION_DV, 3, qkg, &aa, IR_F32, 0, NULL, NULL);
    }
    int64_t all1 = 0;
    int loss_v = ir_reduce(g, IR_OP_REDUCE_SUM, rh, 1, &all1);
    ir_rename(g, loss_v, "loss");
    ir_set_loss(g, loss_v);
    (void)rm;
    (void)oh;
    /* Backward-ish and optimizer-ish tail: a gradient, a tied state, updates. */
    int gw = ir_einsum(g, "bi,bj->ij", gq, bc);
    g->values[gw].grad_of = w;
    int m = ir_arg(g, "m.w", IR_OPT_STATE, IR_F32, 2, d63);
    ir_set_init(g, m, IR_INIT_ZEROS, 0);
    g->values[m].tied = w;
    int new_m = ir_binary(g, IR_OP_ADD, m, gw);
    int new_w = ir_binary(g, IR_OP_SUB, w, ir_scale(g, new_m, 0.1));
    int new_t = ir_binary(g, IR_OP_SUB, table, ir_scale(g, sa, 1.0 / 3.0));
    ir_rename(g, new_w, "new/w");
    ir_add_output(g, new_w, w);
    ir_add_output(g, new_m, m);
    ir_add_output(g, new_t, table);
    ir_set_layer(g, 3); /* n_layers 4: more than the tags used */
    ir_set_layer(g, -1);
    return g;
}

static void test_all_ops(void)
{
    ir_graph *g = build_all_ops();
    char err[512];
    CHECKF(ir_error(g) == NULL, "%s", ir_error(g));
    CHECKF(ir_verify(g, err, sizeof err) == 0, "%s", err);
    int seen[IR_N_OPS] = {0}, missing = 0;
    for (int i = 0; i < g->n_ops; i++) seen[g->ops[i].kind] = 1;
    for (int k = 0; k < IR_N_OPS; k++)
        if (!seen[k]) {
            missing++;
            fprintf(stderr, "op %s not covered\n", ir_op_name((ir_opkind)k));
        }
    CHECK(missing == 0);
    CHECK(g->n_layers == 4);
    check_round_trip(g, 1, "all ops");
    /* Text details: shortest exact doubles, escapes, strings for what JSON lacks. */
    char *s = ir_save_json(g);
    CHECK(strstr(s, "\"scalar\": 0.30000000000000004") != NULL);
    CHECK(strstr(s, "\"init_arg\": 0.30000000000000004") != NULL);
    CHECK(strstr(s, "\"scalar\": 0.1,") != NULL);
    CHECK(strstr(s, "\"scalar\": -0,") != NULL);
    CHECK(strstr(s, "we\\\"ird\\\\name\\n\\t\\u0001 \xe2\x9c\x93") != NULL);
    CHECK(strstr(s, "\"layers\": 4") != NULL);
    free(s);
    ir_free(g);
}

/* Doubles must come back bit for bit (so 0.1+0.2 stays 0.30000000000000004). */
static void test_doubles(void)
{
    const double vals[] = {0.1 + 0.2, 0.1, 1.0 / 3.0, 1e-300, 5e-324, DBL_MAX, -DBL_MIN, -0.0, 0.0,
                           123456789.123456789, 9007199254740993.0, INFINITY, -INFINITY, NAN, -NAN, 2.5e15};
    int nv = (int)(sizeof vals / sizeof vals[0]);
    ir_graph *g = ir_new("doubles");
    int64_t d1 = 1;
    int x = ir_arg(g, "x", IR_INPUT, IR_F32, 1, &d1);
    for (int i = 0; i < nv; i++) {
        ir_constant(g, vals[i], IR_F32, 0, &d1); /* rank 0: dims unread but needed */
        ir_scale(g, x, vals[i]);
    }
    ir_set_init(g, x, IR_INIT_AUTO, 0.1 + 0.2);
    CHECKF(ir_error(g) == NULL && g->n_ops == 2 * nv, "%s", ir_error(g));
    char err[512];
    char *s = ir_save_json(g);
    ir_graph *g2 = ir_load_json(s, err, sizeof err);
    CHECKF(g2 != NULL, "%s", err);
    if (g2 && g2->n_ops == 2 * nv) {
        for (int i = 0; i < nv; i++)
            for (int k = 0; k < 2; k++)
                CHECKF(memcmp(&g2->ops[2 * i + k].attrs.scalar, &vals[i], sizeof(double)) == 0, "value %d (%.17g) came back as %.17g",
                       i, vals[i], g2->ops[2 * i + k].attrs.scalar);
        double want = 0.1 + 0.2;
        CHECK(memcmp(&g2->values[0].init_arg, &want, sizeof want) == 0);
        ir_free(g2);
    }
    check_round_trip(g, 1, "doubles");
    free(s);
    ir_free(g);
}

/* A training step as autodiff will make one: forward, gradients tagged
 * grad_of, Adam states declared after the backward ops and tied to their
 * params, updated params and states as outputs.  All auto-named except a few. */
static void test_train_step_shape(void)
{
    ir_graph *g = ir_new("mlp-step");
    int64_t dx[2] = {8, 16}, dw1[2] = {16, 32}, dw2[2] = {32, 4}, dy[2] = {8, 4};
    int x = ir_arg(g, "x", IR_INPUT, IR_F32, 2, dx);
    int y = ir_arg(g, "y", IR_INPUT, IR_F32, 2, dy);
    ir_set_layer(g, 0);
    int w1 = ir_arg(g, "w1", IR_PARAM, IR_F32, 2, dw1);
    int h = ir_einsum(g, "bi,ih->bh", x, w1);
    int a = ir_unary(g, IR_OP_GELU, h);
    ir_set_layer(g, 1);
    int w2 = ir_arg(g, "w2", IR_PARAM, IR_F32, 2, dw2);
    int o = ir_einsum(g, "bh,hc->bc", a, w2);
    ir_set_layer(g, -1);
    int d = ir_binary(g, IR_OP_SUB, o, y);
    int sq = ir_binary(g, IR_OP_MUL, d, d);
    int64_t all[2] = {0, 1};
    int loss = ir_scale(g, ir_reduce(g, IR_OP_REDUCE_SUM, sq, 2, all), 1.0 / 32);
    ir_rename(g, loss, "loss");
    ir_set_loss(g, loss);
    /* backward */
    int dd = ir_scale(g, d, 2.0 / 32);
    int gw2 = ir_einsum(g, "bh,bc->hc", a, dd);
    g->values[gw2].grad_of = w2;
    int da = ir_einsum(g, "bc,hc->bh", dd, w2);
    int dh = ir_binary(g, IR_OP_MUL, da, ir_unary(g, IR_OP_GELU_GRAD, h));
    int gw1 = ir_einsum(g, "bi,bh->ih", x, dh);
    g->values[gw1].grad_of = w1;
    /* Adam, states declared here, after the backward ops */
    int ws[2] = {w1, w2}, gs[2] = {gw1, gw2};
    for (int p = 0; p < 2; p++) {
        char nm[32];
        const ir_value *wv = &g->values[ws[p]];
        snprintf(nm, sizeof nm, "m.%s", wv->name);
        int m = ir_arg(g, nm, IR_OPT_STATE, IR_F32, wv->rank, wv->dims);
        snprintf(nm, sizeof nm, "v.%s", g->values[ws[p]].name);
        int v = ir_arg(g, nm, IR_OPT_STATE, IR_F32, g->values[ws[p]].rank, g->values[ws[p]].dims);
        g->values[m].tied = g->values[v].tied = ws[p];
        int nm_ = ir_binary(g, IR_OP_ADD, ir_scale(g, m, 0.9), ir_scale(g, gs[p], 0.1));
        int nv_ = ir_binary(g, IR_OP_ADD, ir_scale(g, v, 0.999), ir_scale(g, ir_binary(g, IR_OP_MUL, gs[p], gs[p]), 0.001));
        int upd = ir_binary(g, IR_OP_DIV, nm_, ir_add_scalar(g, ir_unary(g, IR_OP_SQRT, nv_), 1e-8));
        int nw = ir_binary(g, IR_OP_SUB, ws[p], ir_scale(g, upd, 1e-3));
        snprintf(nm, sizeof nm, "new/%s", g->values[ws[p]].name);
        ir_rename(g, nw, nm);
        ir_add_output(g, nw, ws[p]);
        ir_add_output(g, nm_, m);
        ir_add_output(g, nv_, v);
    }
    char err[512];
    CHECKF(ir_verify(g, err, sizeof err) == 0, "%s", err);
    check_round_trip(g, 1, "training step");
    ir_free(g);
}

static void test_example_file(void)
{
    char path[1024], err[512] = "";
    graph_path(path, sizeof path, "mlp-by-hand.json");
    ir_graph *g = ir_load_json_file(path, err, sizeof err);
    CHECKF(g != NULL, "%s", err);
    if (!g) return;
    CHECKF(ir_verify(g, err, sizeof err) == 0, "%s", err);
    CHECK(strcmp(g->name, "mlp-by-hand") == 0);
    CHECK(ir_param_count(g) == 16 * 32 + 32 + 32 * 4 + 4);
    CHECK(g->n_ops == 20); /* the comment line is not an op */
    CHECK(g->loss >= 0 && g->values[g->loss].rank == 0 && strcmp(g->values[g->loss].name, "loss") == 0);
    CHECK(g->n_outputs == 1 && g->outputs[0].value == g->loss);
    CHECK(g->n_layers == 2);
    int a = ir_find(g, "a"), w1 = ir_find(g, "w1"), lab = ir_find(g, "labels"), t = ir_find(g, "target");
    CHECK(a >= 0 && g->values[a].rank == 2 && g->values[a].dims[1] == 32 && g->values[a].layer == 0);
    CHECK(w1 >= 0 && g->values[w1].init == IR_INIT_NORMAL && g->values[w1].init_arg == 0.25);
    CHECK(lab >= 0 && g->values[lab].dtype == IR_I32 && g->values[lab].init == IR_INIT_IDS);
    CHECK(t >= 0 && g->values[t].dtype == IR_F32 && g->values[t].dims[1] == 4);
    check_round_trip(g, 1, "mlp-by-hand");
    ir_free(g);
}

/* Every message is one line containing `want`; returns 1 if so. */
static int fails_with(ir_graph *g, const char *err, const char *want, const char *what)
{
    int ok = g == NULL && strstr(err, want) != NULL && strchr(err, '\n') == NULL;
    CHECKF(ok, "%s: expected failure with \"%s\", got %s \"%s\"", what, want, g ? "a graph and" : "", err);
    ir_free(g);
    return ok;
}

#define HDR "{\"format\": \"carve-graph/1\", "
#define ARGX "{\"name\": \"x\", \"role\": \"input\", \"shape\": [8, 16]}"
#define ARGW "{\"name\": \"w\", \"role\": \"param\", \"shape\": [16, 32]}"

static void test_bad_inline(void)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        /* malformed JSON, with its line and column */
        {"{\n  \"format\": \"carve-graph/1\",\n  \"args\": [1,,2]\n}", "line 3, column 14: malformed JSON"},
        {"", "line 1, column 1: malformed JSON"},
        {HDR "\"args\": [" ARGX "]", "malformed JSON (unexpected end of input)"},
        {HDR "\"args\": []} trailing", "line 1, column 41: malformed JSON near 'trailing'"},
        {"[1, 2]", "the top level must be an object"},
        /* format */
        {"{\"args\": []}", "missing field \"format\" (expected \"carve-graph/1\")"},
        {"{\"format\": \"carve-graph/7\"}", "format \"carve-graph/7\" is not supported"},
        {"{\"format\": \"onnx\"}", "is not a carve graph"},
        {"{\"format\": 1}", "format must be a string"},
        {HDR "\"opps\": []}", "unknown field \"opps\""},
        {HDR "\"args\": {}}", "args: must be an array, got an object"},
        /* unknown op, unknown names, order */
        {HDR "\"args\": [" ARGX "], \"ops\": [{\"name\": \"y\", \"op\": \"softplus\", \"in\": [\"x\"]}]}",
         "ops[0] (\"y\"): unknown op \"softplus\""},
        {HDR "\"args\": [" ARGX "], \"ops\": [{\"name\": \"y\", \"op\": \"einsum\", \"subscripts\": \"bi,ih->bh\", \"in\": [\"x\", \"w9\"]}]}",
         "ops[0] (\"y\"): unknown tensor name \"w9\""},
        {HDR "\"args\": [" ARGX "], \"ops\": [{\"name\": \"a\", \"op\": \"exp\", \"in\": [\"a\"]}]}",
         "ops[0] (\"a\"): uses \"a\" before it is defined"},
        {HDR "\"args\": [" ARGX "], \"outputs\": [\"nope\"]}", "outputs[0] (\"nope\"): unknown tensor name \"nope\""},
        {HDR "\"args\": [" ARGX "], \"loss\": \"x\"}", "loss: loss 'x' must be a float scalar"},
        /* duplicates */
        {HDR "\"args\": [" ARGX ", " ARGX "]}", "args[1] (\"x\"): duplicate name \"x\" (already used by args[0])"},
        {HDR "\"args\": [" ARGX "], \"ops\": [{\"name\": \"x\", \"op\": \"exp\", \"in\": [\"x\"]}]}",
         "ops[0] (\"x\"): duplicate name \"x\" (already used by args[0])"},
        {HDR "\"args\": [{\"name\": \"x\", \"role\": \"input\", \"shape\": [8], \"shape\": [9]}]}",
         "args[0] (\"x\"): field \"shape\" appears twice"},
        /* shapes and dims */
        {HDR "\"args\": [{\"name\": \"x\", \"role\": \"input\", \"shape\": [8, -3]}]}",
         "args[0] (\"x\"): argument 'x': dimension 1 is -3 (must be positive)"},
        {HDR "\"args\": [{\"name\": \"x\", \"role\": \"input\", \"shape\": [0]}]}", "dimension 0 is 0 (must be positive)"},
        {HDR "\"args\": [{\"name\": \"x\", \"role\": \"input\", \"shape\": [8, 1e20]}]}", "args[0] (\"x\"): shape[1] is 1e+20, beyond 2^53"},
        {HDR "\"args\": [{\"name\": \"x\", \"role\": \"input\", \"shape\": [1099511627776, 1099511627776]}]}",
         "shape overflows (more than 2^48 elements)"},
        {HDR "\"args\": [{\"name\": \"x\", \"role\": \"input\", \"shape\": [8, 2.5]}]}", "shape[1] must be an integer, got 2.5"},
        {HDR "\"args\": [{\"name\": \"x\", \"role\": \"input\", \"shape\": [1,1,1,1,1,1,1]}]}", "shape has 7 entries, at most 6"},
        {HDR "\"args\": [{\"name\": \"x\", \"role\": \"input\", \"shape\": \"8x16\"}]}",
         "args[0] (\"x\"): shape must be an array of integers, got a string"},
        {HDR "\"args\": [{\"name\": \"x\", \"role\": \"input\", \"shape\": [8, \"16\"]}]}",
         "shape must be an array of integers (shape[1] is a string)"},
        {HDR "\"args\": [" ARGX ", " ARGW "], \"ops\": [{\"name\": \"h\", \"op\": \"einsum\", \"subscripts\": \"bi,ij->bh\", \"in\": [\"x\", \"w\"]}]}",
         "ops[0] (\"h\"): einsum \"bi,ij->bh\": letter"},
        {HDR "\"args\": [" ARGX ", " ARGW "], \"ops\": [{\"name\": \"h\", \"op\": \"einsum\", \"subscripts\": \"bj,ih->bh\", \"in\": [\"x\", \"w\"]}]}",
         "letter 'j' appears only once"},
        {HDR "\"args\": [" ARGX "], \"ops\": [{\"name\": \"r\", \"op\": \"reshape\", \"shape\": [7], \"in\": [\"x\"]}]}",
         "ops[0] (\"r\"): reshape of 'x' (f32[8,16]): 128 elements cannot become 7"},
        {HDR "\"args\": [" ARGX "], \"ops\": [{\"name\": \"r\", \"op\": \"relu\", \"in\": [\"x\"], \"shape\": [8, 15]}]}",
         "ops[0] (\"r\"): the op gives f32[8,16] but the file says f32[8,15]"},
        {HDR "\"args\": [" ARGX "], \"ops\": [{\"op\": \"reduce_sum\", \"dims\": [2], \"in\": [\"x\"]}]}",
         "ops[0]: reduce_sum of 'x': needs 1 or more dims in 0..1"},
        /* missing fields, wrong types, wrong fields */
        {HDR "\"args\": [" ARGX ", {\"name\": \"w\", \"role\": \"param\"}]}", "args[1] (\"w\"): missing field \"shape\""},
        {HDR "\"args\": [{\"role\": \"param\", \"shape\": [2]}]}", "args[0]: missing field \"name\""},
        {HDR "\"args\": [{\"name\": \"w\", \"shape\": [2]}]}", "args[0] (\"w\"): missing field \"role\""},
        {HDR "\"args\": [{\"name\": \"w\", \"role\": \"weight\", \"shape\": [2]}]}", "role \"weight\" is not input, param, opt_state or const"},
        {HDR "\"args\": [{\"name\": \"w\", \"role\": \"param\", \"dtype\": \"f64\", \"shape\": [2]}]}", "unknown dtype \"f64\""},
        {HDR "\"args\": [{\"name\": 3, \"role\": \"param\", \"shape\": [2]}]}", "args[0]: name must be a string, got a number"},
        {HDR "\"args\": [" ARGX "], \"ops\": [{\"name\": \"s\", \"op\": \"scale\", \"in\": [\"x\"]}]}", "ops[0] (\"s\"): missing field \"scalar\""},
        {HDR "\"args\": [" ARGX "], \"ops\": [{\"name\": \"s\", \"op\": \"scale\", \"scalar\": \"big\", \"in\": [\"x\"]}]}",
         "scalar must be a number (or \"inf\""},
        {HDR "\"args\": [" ARGX "], \"ops\": [{\"name\": \"s\", \"op\": \"relu\", \"perm\": [1, 0], \"in\": [\"x\"]}]}",
         "ops[0] (\"s\"): relu takes no \"perm\""},
        {HDR "\"args\": [" ARGX "], \"ops\": [{\"name\": \"s\", \"op\": \"relu\", \"subscript\": \"x\", \"in\": [\"x\"]}]}",
         "unknown field \"subscript\""},
        {HDR "\"args\": [" ARGX "], \"ops\": [{\"name\": \"s\", \"op\": \"add\", \"in\": [\"x\"]}]}", "add takes 2 operands, \"in\" has 1"},
        {HDR "\"args\": [" ARGX "], \"ops\": [{\"name\": \"s\", \"op\": \"exp\"}]}", "missing field \"in\""},
        {HDR "\"args\": [" ARGX "], \"ops\": [{\"name\": \"s\", \"op\": \"exp\", \"in\": \"x\"}]}", "\"in\" must be an array of tensor names"},
        {HDR "\"args\": [" ARGX "], \"ops\": [{\"name\": \"s\", \"in\": [\"x\"]}]}", "ops[0] (\"s\"): missing field \"op\""},
        {HDR "\"ops\": [{\"name\": \"c\", \"op\": \"constant\", \"scalar\": 1}]}", "ops[0] (\"c\"): missing field \"shape\""},
        {HDR "\"args\": [" ARGX "], \"ops\": [{\"name\": \"%foo\", \"op\": \"exp\", \"in\": [\"x\"]}]}", "reserved for automatic names"},
        {HDR "\"args\": [{\"name\": \"%1\", \"role\": \"input\", \"shape\": [2]}]}", "reserved for automatic names"},
        /* tags, outputs, inits */
        {HDR "\"args\": [" ARGX ", {\"name\": \"m\", \"role\": \"opt_state\", \"shape\": [2], \"tied\": \"x\"}]}",
         "args[1] (\"m\"): tied \"x\" is not a param"},
        {HDR "\"args\": [" ARGW ", {\"name\": \"m\", \"role\": \"param\", \"shape\": [2], \"tied\": \"w\"}]}",
         "only opt_state args can be tied"},
        {HDR "\"args\": [" ARGX "], \"ops\": [{\"name\": \"g\", \"op\": \"exp\", \"in\": [\"x\"], \"grad_of\": \"q\"}]}",
         "ops[0] (\"g\"): grad_of: unknown tensor name \"q\""},
        {HDR "\"args\": [" ARGX "], \"ops\": [{\"name\": \"e\", \"op\": \"exp\", \"in\": [\"x\"]}], \"outputs\": [{\"value\": \"x\", \"updates\": \"e\"}]}",
         "outputs[0] (\"x\"): output 'x': 'e' is not an argument"},
        {HDR "\"args\": [{\"name\": \"i\", \"role\": \"input\", \"dtype\": \"i32\", \"shape\": [2], \"init\": \"normal\"}]}",
         "args[0] (\"i\"): init of 'i': normal needs a float value"},
        {HDR "\"args\": [{\"name\": \"i\", \"role\": \"input\", \"shape\": [2], \"init\": \"gaussian\"}]}", "unknown init \"gaussian\""},
        {HDR "\"layers\": 1, \"args\": [{\"name\": \"w\", \"role\": \"param\", \"shape\": [2], \"layer\": 3}]}",
         "layers: is 1, but layer tags go up to 3"},
        {HDR "\"args\": [{\"name\": \"w\", \"role\": \"param\", \"shape\": [2], \"layer\": -2}]}", "layer is -2, outside -1.."},
        /* automatic labels: a clash between a moved label and a fresh automatic name */
        {HDR "\"args\": [{\"name\": \"x\", \"role\": \"input\", \"shape\": [2]}], \"ops\": [{\"name\": \"%2\", \"op\": \"exp\", \"in\": [\"x\"]}, "
             "{\"op\": \"neg\", \"in\": [\"%2\"]}]}",
         "ops[1]: its automatic name \"%2\" is already used by ops[0]"},
    };
    char err[512];
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        char what[32];
        snprintf(what, sizeof what, "inline case %d", i);
        err[0] = 0;
        fails_with(ir_load_json(cases[i].text, err, sizeof err), err, cases[i].want, what);
    }
}

static void test_bad_files(void)
{
    static const struct {
        const char *file, *want;
    } cases[] = {
        {"bad-cycle.json", "ops[0] (\"a\"): uses \"b\" before it is defined (ops must be in order; a cycle?)"},
        {"bad-einsum.json", "ops[0] (\"h\"): einsum \"bi,jh->bh\": letter 'i' appears only once"},
        {"bad-malformed.json", "bad-malformed.json: line 5, column 5: malformed JSON near '{\"name\": \"w\", \"role\"'"},
        {"bad-version.json", "format \"carve-graph/2\" is not supported (this carve reads \"carve-graph/1\")"},
        {"bad-shape-mismatch.json", "ops[0] (\"c\"): add: shape mismatch: 'a' is f32[4,5], 'b' is f32[5,4]"},
        {"no-such-file.json", "No such file or directory"},
    };
    char path[1024], err[512];
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        graph_path(path, sizeof path, cases[i].file);
        err[0] = 0;
        fails_with(ir_load_json_file(path, err, sizeof err), err, cases[i].want, cases[i].file);
        CHECKF(strstr(err, cases[i].file) != NULL, "%s: the message does not name the file: %s", cases[i].file, err);
    }
}

/* A file whose "%<k>" labels no longer match their positions (edited by hand)
 * still loads; the labels stay the names, and lookups by name work. */
static void test_moved_labels(void)
{
    const char *text = HDR "\"args\": [{\"name\": \"x\", \"role\": \"input\", \"shape\": [2]}], \"ops\": ["
                           "{\"name\": \"%7\", \"op\": \"exp\", \"in\": [\"x\"]}, {\"op\": \"neg\", \"in\": [\"%7\"]}],"
                           "\"outputs\": [\"%2\"]}";
    char err[512] = "";
    ir_graph *g = ir_load_json(text, err, sizeof err);
    CHECKF(g != NULL, "%s", err);
    if (!g) return;
    CHECK(ir_find(g, "%7") == 1 && ir_find(g, "%2") == 2 && ir_find(g, "%1") < 0);
    CHECKF(ir_verify(g, err, sizeof err) == 0, "%s", err);
    CHECK(g->n_outputs == 1 && g->outputs[0].value == 2);
    check_round_trip(g, 1, "moved labels");
    ir_free(g);
}

/* A larger graph (600 values, 100 of them renamed) round-trips; with an extra
 * argument inserted in front of its saved text, every automatic label moves,
 * which makes the loader rebuild the name index (through ir_clone) once. */
static void test_many_values(void)
{
    ir_graph *g = ir_new("chain");
    int64_t d[2] = {4, 4};
    int x = ir_arg(g, "x", IR_INPUT, IR_F32, 2, d);
    for (int l = 0; l < 20; l++) {
        char nm[32];
        snprintf(nm, sizeof nm, "w%d", l);
        ir_set_layer(g, l);
        int w = ir_arg(g, nm, IR_PARAM, IR_F32, 2, d);
        for (int k = 0; k < 14; k++) {
            x = ir_einsum(g, "ij,jk->ik", x, w);
            x = ir_unary(g, IR_OP_TANH, x);
            if (k % 3 == 0) {
                snprintf(nm, sizeof nm, "h%d.%d", l, k);
                ir_rename(g, x, nm);
            }
        }
    }
    ir_set_layer(g, -1);
    CHECKF(ir_error(g) == NULL && g->n_values > 256, "%s", ir_error(g));
    check_round_trip(g, 1, "many values");
    char *s = ir_save_json(g);
    const char *ins = "    {\"name\": \"extra\", \"role\": \"input\", \"shape\": [1]},\n";
    char *at = strstr(s, "\"args\": [\n") + strlen("\"args\": [\n");
    char *s2 = malloc(strlen(s) + strlen(ins) + 1);
    memcpy(s2, s, (size_t)(at - s));
    strcpy(s2 + (at - s), ins);
    strcat(s2, at);
    char err[512] = "";
    ir_graph *g2 = ir_load_json(s2, err, sizeof err);
    CHECKF(g2 != NULL, "%s", err);
    if (g2) {
        /* Every op result keeps its name, one value later than before. */
        int same = g2->n_values == g->n_values + 1;
        for (int i = 0; same && i < g->n_ops; i++)
            same = !strcmp(g->values[g->ops[i].out].name, g2->values[g2->ops[i].out].name) &&
                   ir_find(g2, g->values[g->ops[i].out].name) == g2->ops[i].out;
        CHECK(same);
        CHECKF(ir_verify(g2, err, sizeof err) == 0, "%s", err);
        ir_free(g2);
    }
    free(s2);
    free(s);
    ir_free(g);
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void test_files(void)
{
    char dir[] = "/tmp/carve-test-json-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECKF(0, "mkdtemp: %s", strerror(errno));
        return;
    }
    char path[256], err[512], sub[256];
    ir_graph *g = build_all_ops();

    /* Save, overwrite, load back. */
    snprintf(path, sizeof path, "%s/g.json", dir);
    CHECKF(ir_save_json_file(g, path, err, sizeof err) == 0, "%s", err);
    CHECKF(ir_save_json_file(g, path, err, sizeof err) == 0, "%s", err);
    ir_graph *g2 = ir_load_json_file(path, err, sizeof err);
    CHECKF(g2 != NULL, "%s", err);
    if (g2) {
        char *p1 = print_str(g), *p2 = print_str(g2);
        CHECK(strcmp(p1, p2) == 0);
        free(p1);
        free(p2);
        ir_free(g2);
    }
    CHECK(count_entries(dir) == 1);

    /* The target is a directory: rename fails; no temporary file is left. */
    snprintf(sub, sizeof sub, "%s/taken.json", dir);
    CHECK(mkdir(sub, 0755) == 0);
    err[0] = 0;
    CHECK(ir_save_json_file(g, sub, err, sizeof err) == -1);
    CHECKF(strstr(err, sub) && strstr(err, strerror(EISDIR)), "%s", err);
    CHECKF(count_entries(dir) == 2, "%d entries left in %s", count_entries(dir), dir);

    /* A folder that does not exist. */
    snprintf(path, sizeof path, "%s/missing/g.json", dir);
    CHECK(ir_save_json_file(g, path, err, sizeof err) == -1);
    CHECKF(strstr(err, path) && strstr(err, strerror(ENOENT)), "%s", err);

    /* A graph with a builder error is not saved. */
    ir_graph *bad = ir_new("bad");
    ir_arg(bad, "a", IR_INPUT, IR_F32, 0, NULL);
    ir_arg(bad, "a", IR_INPUT, IR_F32, 0, NULL);
    snprintf(path, sizeof path, "%s/bad.json", dir);
    CHECK(ir_save_json_file(bad, path, err, sizeof err) == -1 && strstr(err, "duplicate name"));
    CHECK(access(path, F_OK) != 0);
    ir_free(bad);

    /* Loading: a directory, a NUL byte, a file above the size limit (sparse). */
    CHECK(fails_with(ir_load_json_file(sub, err, sizeof err), err, "is a directory", "dir"));
    snprintf(path, sizeof path, "%s/nul.json", dir);
    FILE *f = fopen(path, "wb");
    fwrite("{\n  \"format\"\0: 1}", 1, 17, f);
    fclose(f);
    CHECK(fails_with(ir_load_json_file(path, err, sizeof err), err, "line 2, column 11: a NUL byte", "nul"));
    snprintf(path, sizeof path, "%s/huge.json", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, ((off_t)257) << 20) == 0);
    if (fd >= 0) close(fd);
    CHECK(fails_with(ir_load_json_file(path, err, sizeof err), err, "more than the limit of 256 MB", "huge"));

    /* Clean up. */
    unlink(path);
    snprintf(path, sizeof path, "%s/nul.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/g.json", dir);
    unlink(path);
    rmdir(sub);
    CHECK(rmdir(dir) == 0);
    ir_free(g);
}

/* Every strict prefix of a saved file fails cleanly; random byte edits either
 * fail with a one-line message or give a graph that verifies and round-trips.
 * Deterministic (PCG32, fixed seed). */
static void test_damaged(void)
{
    ir_graph *g = build_all_ops();
    char *text = ir_save_json(g);
    size_t n = strlen(text);
    char *buf = malloc(n + 1), err[512];
    int prefix_ok = 1;
    for (size_t k = 0; k + 1 < n; k++) { /* text[n-1] is the final newline */
        memcpy(buf, text, k);
        buf[k] = 0;
        ir_graph *h = ir_load_json(buf, err, sizeof err);
        if (h || !err[0] || strchr(err, '\n')) prefix_ok = 0;
        ir_free(h);
    }
    CHECK(prefix_ok);
    static const char alphabet[] = "{}[],:\"0123456789-.eE %\\xaz\n";
    pcg32 r;
    pcg32_seed(&r, 2024, 7);
    int loaded = 0, bad_msg = 0, bad_graph = 0;
    for (int t = 0; t < 3000; t++) {
        memcpy(buf, text, n + 1);
        int edits = 1 + (int)pcg32_below(&r, 3);
        for (int e = 0; e < edits; e++)
            buf[pcg32_below(&r, (uint32_t)n)] = alphabet[pcg32_below(&r, sizeof alphabet - 1)];
        err[0] = 0;
        ir_graph *h = ir_load_json(buf, err, sizeof err);
        if (!h) {
            if (!err[0] || strchr(err, '\n')) bad_msg++;
            continue;
        }
        loaded++;
        char *s1 = ir_save_json(h);
        ir_graph *h2 = ir_load_json(s1, err, sizeof err);
        char *s2 = h2 ? ir_save_json(h2) : NULL;
        if (ir_verify(h, err, sizeof err) < 0 || !h2 || strcmp(s1, s2) != 0) bad_graph++;
        free(s1);
        free(s2);
        ir_free(h2);
        ir_free(h);
    }
    CHECKF(bad_msg == 0, "%d damaged files failed without a one-line message", bad_msg);
    CHECKF(bad_graph == 0, "%d damaged files loaded into graphs that do not round-trip", bad_graph);
    printf("damaged files: %d of 3000 random edits still loaded\n", loaded);
    /* Some edits are harmless (inside a name, a layer tag): they must load. */
    CHECKF(loaded > 0, "no damaged file loaded at all (%d)", loaded);
    free(buf);
    free(text);
    ir_free(g);
}

/* A real training step (autodiff output: forward, backward, Adam) round-trips. */
static void test_real_steps(void)
{
    static const char *specs[] = {"gpt-tiny", "mlp-tiny"};
    for (int i = 0; i < 2; i++) {
        model_config cfg;
        char err[512];
        CHECK(model_parse(specs[i], &cfg, err, sizeof err) == 0);
        ir_graph *g = model_build_step(&cfg, NULL, err, sizeof err);
        CHECK(g != NULL);
        if (!g) continue;
        char *text = ir_save_json(g);
        ir_graph *h = ir_load_json(text, err, sizeof err);
        CHECKF(h != NULL, "%s: %s", specs[i], err);
        if (h) {
            char *a = print_str(g), *b = print_str(h);
            CHECKF(strcmp(a, b) == 0, "%s: printer output differs after a round trip", specs[i]);
            char *text2 = ir_save_json(h);
            CHECK(strcmp(text, text2) == 0);
            free(text2);
            free(a);
            free(b);
            ir_free(h);
        }
        free(text);
        ir_free(g);
    }
}

int main(void)
{
    test_real_steps();
    test_all_ops();
    test_doubles();
    test_train_step_shape();
    test_example_file();
    test_bad_inline();
    test_bad_files();
    test_moved_labels();
    test_many_values();
    test_files();
    test_damaged();
    return test_done();
}
