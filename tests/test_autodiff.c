/* test_autodiff.c - ir_train_step: the structure of the step graph (grads,
 * optimizer states, outputs, layer tags, error cases, linear size on a deep
 * graph) and, through the reference executor, finite-difference checks of
 * the VJP of every op and a numerical check of SGD and Adam. */
#include "ir/ir.h"
#include "ir/pcg32.h"
#include "tests/test.h"
#include "tests/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/exec.h"


/* ---- helpers ------------------------------------------------------------ */

static int param(ir_graph *g, const char *name, int rank, int64_t d0, int64_t d1, int64_t d2)
{
    int64_t d[3] = {d0, d1, d2};
    return ir_arg(g, name, IR_PARAM, IR_F32, rank, d);
}

static int input(ir_graph *g, const char *name, ir_dtype t, int rank, int64_t d0, int64_t d1, int64_t d2)
{
    int64_t d[3] = {d0, d1, d2};
    return ir_arg(g, name, IR_INPUT, t, rank, d);
}

/* Sum over every dim (x itself when it is a scalar). */
static int sum_all(ir_graph *g, int x)
{
    if (x < 0) return -1;
    int r = g->values[x].rank;
    if (r == 0) return x;
    int64_t dims[IR_MAX_RANK];
    for (int i = 0; i < r; i++) dims[i] = i;
    return ir_reduce(g, IR_OP_REDUCE_SUM, x, r, dims);
}

static int n_params(const ir_graph *g)
{
    int n = 0;
    for (int v = 0; v < g->n_values; v++) n += g->values[v].role == IR_PARAM;
    return n;
}

static int find_prefixed(const ir_graph *g, const char *prefix, int v)
{
    char name[256];
    snprintf(name, sizeof name, "%s%s", prefix, g->values[v].name);
    return ir_find(g, name);
}

static int producer_kind(const ir_graph *g, int v)
{
    return v >= 0 && g->values[v].producer >= 0 ? (int)g->ops[g->values[v].producer].kind : -1;
}

/* Two-layer MLP with an embedding, a label branch and odd params:
 *   emb (gathered), w1, b1 (layer 0), w2 (layer 1, used twice), pa/pb (added
 *   together: a shared cotangent), unused (does not reach the loss),
 *   frozen (only through stop_grad). */
static ir_graph *build_mlp(void)
{
    ir_graph *g = ir_new("mlp");
    int ids = input(g, "ids", IR_I32, 1, 4, 0, 0);
    int labels = input(g, "labels", IR_I32, 1, 4, 0, 0);
    int emb = param(g, "emb", 2, 10, 3, 0);
    int unused = param(g, "unused", 1, 7, 0, 0);
    ir_unary(g, IR_OP_EXP, unused); /* dead branch */
    ir_set_layer(g, 0);
    int w1 = param(g, "w1", 2, 3, 5, 0);
    int b1 = param(g, "b1", 1, 5, 0, 0);
    int x = ir_gather(g, emb, ids);
    int64_t hd[2] = {4, 5}, map1 = 1;
    int h = ir_binary(g, IR_OP_ADD, ir_einsum(g, "bi,io->bo", x, w1), ir_broadcast(g, b1, 2, hd, &map1));
    h = ir_unary(g, IR_OP_GELU, h);
    ir_set_layer(g, 1);
    int w2 = param(g, "w2", 2, 5, 2, 0);
    int logits = ir_einsum(g, "bo,oc->bc", h, w2);
    int again = ir_einsum(g, "bo,oc->bc", h, w2);
    logits = ir_binary(g, IR_OP_ADD, logits, ir_scale(g, again, 0.5));
    ir_set_layer(g, -1);
    int pa = param(g, "pa", 2, 4, 2, 0);
    int pb = param(g, "pb", 2, 4, 2, 0);
    int frozen = param(g, "frozen", 2, 4, 2, 0);
    logits = ir_binary(g, IR_OP_ADD, logits, ir_binary(g, IR_OP_ADD, pa, pb));
    logits = ir_binary(g, IR_OP_ADD, logits, ir_unary(g, IR_OP_STOP_GRAD, frozen));
    /* softmax cross-entropy with one_hot labels */
    int64_t red = 1, bd[2] = {4, 2}, map0 = 0;
    int mx = ir_reduce(g, IR_OP_REDUCE_MAX, logits, 1, &red);
    int z = ir_binary(g, IR_OP_SUB, logits, ir_broadcast(g, mx, 2, bd, &map0));
    int lse = ir_unary(g, IR_OP_LOG, ir_reduce(g, IR_OP_REDUCE_SUM, ir_unary(g, IR_OP_EXP, z), 1, &red));
    int picked = ir_reduce(g, IR_OP_REDUCE_SUM, ir_binary(g, IR_OP_MUL, z, ir_one_hot(g, labels, 2)), 1, &red);
    int nll = ir_binary(g, IR_OP_SUB, lse, picked);
    ir_set_loss(g, ir_scale(g, sum_all(g, nll), 0.25));
    return g;
}

/* ---- structure ---------------------------------------------------------- */

static void check_grads(const ir_graph *fwd, const ir_graph *st)
{
    char err[IR_ERR_LEN];
    CHECKF(ir_verify(st, err, sizeof err) == 0, "%s", err);
    /* the forward part is untouched, ids included */
    CHECK(st->n_values > fwd->n_values && st->n_ops > fwd->n_ops);
    int same = 1;
    for (int v = 0; v < fwd->n_values; v++)
        same &= strcmp(st->values[v].name, fwd->values[v].name) == 0 && st->values[v].producer == fwd->values[v].producer;
    for (int i = 0; i < fwd->n_ops; i++)
        same &= st->ops[i].kind == fwd->ops[i].kind && st->ops[i].out == fwd->ops[i].out && st->ops[i].layer == fwd->ops[i].layer;
    CHECK(same);
    CHECK(st->loss == fwd->loss && st->outputs[0].value == fwd->loss && st->outputs[0].updates == -1);
    /* one grad per param, named grad/P, shaped like P */
    int n_grads = 0;
    for (int v = 0; v < st->n_values; v++) {
        const ir_value *x = &st->values[v];
        if (x->grad_of < 0) continue;
        n_grads++;
        const ir_value *p = &st->values[x->grad_of];
        char want[256];
        snprintf(want, sizeof want, "grad/%s", p->name);
        CHECKF(strcmp(x->name, want) == 0, "grad of %s is named %s", p->name, x->name);
        CHECKF(x->rank == p->rank && memcmp(x->dims, p->dims, sizeof(int64_t) * (size_t)p->rank) == 0 && x->dtype == p->dtype,
               "grad of %s has another type", p->name);
    }
    CHECKF(n_grads == n_params(fwd), "%d grads for %d params", n_grads, n_params(fwd));
    for (int v = 0; v < fwd->n_values; v++)
        if (fwd->values[v].role == IR_PARAM) {
            int gv = find_prefixed(st, "grad/", v);
            CHECKF(gv >= 0 && st->values[gv].grad_of == v, "param %s has no grad", fwd->values[v].name);
        }
}

static void test_sgd_structure(void)
{
    ir_graph *fwd = build_mlp();
    CHECKF(!ir_error(fwd), "%s", ir_error(fwd));
    char err[IR_ERR_LEN];
    ir_optimizer sgd = {IR_SGD, 0.1, 0, 0, 0};
    ir_graph *st = ir_train_step(fwd, &sgd, err, sizeof err);
    CHECKF(st != NULL, "%s", err);
    if (!st) {
        ir_free(fwd);
        return;
    }
    check_grads(fwd, st);
    /* outputs: loss, then new/P for each param in order */
    CHECK(st->n_outputs == 1 + n_params(fwd));
    int k = 1;
    for (int v = 0; v < fwd->n_values; v++) {
        if (fwd->values[v].role != IR_PARAM) continue;
        int nv = find_prefixed(st, "new/", v);
        CHECKF(k < st->n_outputs && st->outputs[k].value == nv && st->outputs[k].updates == v, "output %d", k);
        CHECK(producer_kind(st, nv) == IR_OP_SUB);
        k++;
    }
    /* grads: unused -> constant 0; frozen (stop_grad only) -> constant 0;
     * w2 used twice -> an ADD; w1 used once -> the einsum itself;
     * pa/pb share a cotangent -> two distinct copies. */
    int gu = ir_find(st, "grad/unused"), gf = ir_find(st, "grad/frozen");
    CHECK(producer_kind(st, gu) == IR_OP_CONSTANT && st->ops[st->values[gu].producer].attrs.scalar == 0.0);
    CHECK(producer_kind(st, gf) == IR_OP_CONSTANT);
    CHECK(producer_kind(st, ir_find(st, "grad/w2")) == IR_OP_ADD);
    CHECK(producer_kind(st, ir_find(st, "grad/w1")) == IR_OP_EINSUM);
    CHECK(producer_kind(st, ir_find(st, "grad/emb")) == IR_OP_SCATTER_ADD);
    CHECK(producer_kind(st, ir_find(st, "grad/b1")) == IR_OP_REDUCE_SUM);
    int ga = ir_find(st, "grad/pa"), gb = ir_find(st, "grad/pb");
    CHECK(ga >= 0 && gb >= 0 && ga != gb);
    /* layer tags: backward ops follow the forward op, optimizer ops the param */
    CHECK(st->values[ir_find(st, "grad/w1")].layer == 0);
    CHECK(st->values[ir_find(st, "grad/w2")].layer == 1);
    CHECK(st->values[ir_find(st, "new/w2")].layer == 1);
    CHECK(st->values[ir_find(st, "new/b1")].layer == 0);
    CHECK(st->values[ir_find(st, "new/pa")].layer == -1);
    int gelu_grads = 0, bad_layer = 0;
    for (int i = fwd->n_ops; i < st->n_ops; i++) {
        if (st->ops[i].kind == IR_OP_GELU_GRAD) {
            gelu_grads++;
            bad_layer += st->ops[i].layer != 0;
        }
        /* nothing flows back into ids, labels, one_hot or the dead branch
         * (the optimizer's new/unused = unused - lr * 0 reads it, of course) */
        if (!strcmp(st->values[st->ops[i].out].name, "new/unused")) continue;
        for (int j = 0; j < st->ops[i].n_in; j++) {
            const char *in = st->values[st->ops[i].in[j]].name;
            CHECKF(strcmp(in, "labels") != 0 && strcmp(in, "unused") != 0, "backward op %d reads %s", i, in);
        }
    }
    CHECK(gelu_grads == 1 && bad_layer == 0);
    CHECK(st->cur_layer == fwd->cur_layer);
    ir_free(st);
    ir_free(fwd);
}

static void test_adam_structure(void)
{
    ir_graph *fwd = build_mlp();
    char err[IR_ERR_LEN];
    ir_optimizer adam = ir_default_adam();
    CHECK(adam.kind == IR_ADAM && adam.lr == 1e-3 && adam.beta1 == 0.9 && adam.beta2 == 0.999 && adam.eps == 1e-8);
    ir_graph *st = ir_train_step(fwd, &adam, err, sizeof err);
    CHECKF(st != NULL, "%s", err);
    if (!st) {
        ir_free(fwd);
        return;
    }
    check_grads(fwd, st);
    int np = n_params(fwd);
    CHECK(st->n_outputs == 1 + 3 * np + 1);
    int k = 1;
    for (int p = 0; p < fwd->n_values; p++) {
        if (fwd->values[p].role != IR_PARAM) continue;
        const ir_value *pv = &st->values[p];
        int m = find_prefixed(st, "adam.m/", p), v = find_prefixed(st, "adam.v/", p);
        CHECKF(m >= 0 && v >= 0, "states of %s", pv->name);
        if (m < 0 || v < 0) continue;
        for (int s = 0; s < 2; s++) {
            const ir_value *x = &st->values[s ? v : m];
            CHECKF(x->role == IR_OPT_STATE && x->tied == p && x->init == IR_INIT_ZEROS && x->layer == pv->layer,
                   "state %s", x->name);
            CHECK(x->rank == pv->rank && memcmp(x->dims, pv->dims, sizeof(int64_t) * (size_t)pv->rank) == 0);
        }
        int want[3][2] = {{find_prefixed(st, "new/", p), p},
                          {find_prefixed(st, "new/adam.m/", p), m},
                          {find_prefixed(st, "new/adam.v/", p), v}};
        for (int j = 0; j < 3; j++, k++)
            CHECKF(k < st->n_outputs && st->outputs[k].value == want[j][0] && st->outputs[k].updates == want[j][1],
                   "output %d of %s", j, pv->name);
    }
    int t = ir_find(st, "adam.t"), t1 = ir_find(st, "new/adam.t");
    CHECK(t >= 0 && st->values[t].role == IR_OPT_STATE && st->values[t].rank == 0 && st->values[t].tied == -1 &&
          st->values[t].dtype == IR_F32 && st->values[t].init == IR_INIT_ZEROS);
    CHECK(k == st->n_outputs - 1 && st->outputs[k].value == t1 && st->outputs[k].updates == t);
    CHECK(producer_kind(st, t1) == IR_OP_ADD_SCALAR && st->ops[st->values[t1].producer].in[0] == t);
    ir_free(st);
    ir_free(fwd);
}

/* A non-param branch (a chain of ops on an input) adds no backward ops. */
static void test_skips_constant_branches(void)
{
    int counts[2];
    for (int with_chain = 0; with_chain < 2; with_chain++) {
        ir_graph *g = ir_new("chain");
        int x = input(g, "x", IR_F32, 2, 2, 3, 0);
        int w = param(g, "w", 2, 2, 3, 0);
        int c = x;
        if (with_chain)
            for (int i = 0; i < 10; i++) c = ir_unary(g, i % 2 ? IR_OP_EXP : IR_OP_TANH, c);
        ir_set_loss(g, sum_all(g, ir_binary(g, IR_OP_MUL, w, c)));
        char err[IR_ERR_LEN];
        ir_optimizer sgd = {IR_SGD, 1, 0, 0, 0};
        ir_graph *st = ir_train_step(g, &sgd, err, sizeof err);
        CHECKF(st != NULL, "%s", err);
        counts[with_chain] = st ? st->n_ops - g->n_ops : -1;
        ir_free(st);
        ir_free(g);
    }
    CHECKF(counts[0] == counts[1] && counts[0] > 0, "backward ops %d without the chain, %d with", counts[0], counts[1]);
}

static void expect_error(ir_graph *g, const ir_optimizer *opt, const char *want)
{
    char err[IR_ERR_LEN] = "";
    ir_graph *st = ir_train_step(g, opt, err, sizeof err);
    CHECKF(st == NULL && strstr(err, want) != NULL, "wanted an error with '%s', got '%s'", want, st ? "(a graph)" : err);
    ir_free(st);
    ir_free(g);
}

static void test_errors(void)
{
    ir_optimizer adam = ir_default_adam(), sgd = {IR_SGD, 0.1, 0, 0, 0};
    ir_graph *g;
    /* no loss */
    g = ir_new("noloss");
    sum_all(g, param(g, "w", 1, 3, 0, 0));
    expect_error(g, &adam, "no loss");
    /* no params */
    g = ir_new("noparam");
    ir_set_loss(g, sum_all(g, input(g, "x", IR_F32, 1, 3, 0, 0)));
    expect_error(g, &sgd, "no params");
    /* gelu_grad between a param and the loss */
    g = ir_new("gg");
    ir_set_loss(g, sum_all(g, ir_unary(g, IR_OP_GELU_GRAD, param(g, "w", 1, 3, 0, 0))));
    expect_error(g, &sgd, "second derivative of gelu not supported");
    /* a graph with a builder error */
    g = ir_new("broken");
    int w = param(g, "w", 1, 3, 0, 0);
    ir_set_loss(g, sum_all(g, w));
    ir_binary(g, IR_OP_ADD, w, input(g, "x", IR_F32, 1, 4, 0, 0));
    expect_error(g, &sgd, "shape mismatch");
    /* bad optimizer settings */
    g = ir_new("beta");
    ir_set_loss(g, sum_all(g, param(g, "w", 1, 3, 0, 0)));
    ir_optimizer bad = adam;
    bad.beta1 = 1.0;
    expect_error(g, &bad, "betas");
    /* Adam on a bf16 param: no cast op to mix it with the f32 step count */
    g = ir_new("bf16");
    int64_t d3 = 3;
    ir_set_loss(g, sum_all(g, ir_arg(g, "w", IR_PARAM, IR_BF16, 1, &d3)));
    expect_error(g, &adam, "only f32 params");
    /* a training step is not a forward graph */
    g = ir_new("twice");
    ir_set_loss(g, sum_all(g, param(g, "w", 1, 3, 0, 0)));
    char err[IR_ERR_LEN];
    ir_graph *st = ir_train_step(g, &adam, err, sizeof err);
    CHECKF(st != NULL, "%s", err);
    ir_free(g);
    if (st) expect_error(st, &adam, "already holds");
}

/* gelu_grad on a branch that needs no gradient is fine; SGD on bf16 too. */
static void test_allowed(void)
{
    ir_graph *g = ir_new("ok");
    int x = input(g, "x", IR_F32, 1, 3, 0, 0);
    int w = param(g, "w", 1, 3, 0, 0);
    ir_set_loss(g, sum_all(g, ir_binary(g, IR_OP_MUL, w, ir_unary(g, IR_OP_GELU_GRAD, x))));
    char err[IR_ERR_LEN];
    ir_optimizer sgd = {IR_SGD, 0.1, 0, 0, 0};
    ir_graph *st = ir_train_step(g, &sgd, err, sizeof err);
    CHECKF(st != NULL, "%s", err);
    ir_free(st);
    ir_free(g);

    g = ir_new("bf16");
    int64_t d3 = 3;
    int v = ir_arg(g, "w", IR_PARAM, IR_BF16, 1, &d3);
    ir_set_loss(g, sum_all(g, ir_binary(g, IR_OP_MUL, v, v)));
    st = ir_train_step(g, &sgd, err, sizeof err);
    CHECKF(st != NULL && ir_verify(st, err, sizeof err) == 0, "%s", err);
    if (st) CHECK(st->values[ir_find(st, "grad/w")].dtype == IR_BF16);
    ir_free(st);
    ir_free(g);

    /* the loss is a param itself: its gradient is the seed 1 */
    g = ir_new("self");
    int s = ir_arg(g, "s", IR_PARAM, IR_F32, 0, NULL);
    ir_set_loss(g, s);
    st = ir_train_step(g, &sgd, err, sizeof err);
    CHECKF(st != NULL && ir_verify(st, err, sizeof err) == 0, "%s", err);
    if (st) {
        int gs = ir_find(st, "grad/s");
        CHECK(producer_kind(st, gs) == IR_OP_CONSTANT && st->ops[st->values[gs].producer].attrs.scalar == 1.0);
    }
    ir_free(st);
    ir_free(g);
}

/* A deep residual stack with ~10k forward ops: the step graph must stay a
 * small multiple of the forward graph (linear), and it is quick to build.
 * The build time is printed for the report, not checked (no timing tests). */
static void test_deep_graph(void)
{
    const int layers = 1000;
    ir_graph *g = ir_new("deep");
    int64_t xd[2] = {8, 16}, map1 = 1;
    int h = ir_arg(g, "x", IR_INPUT, IR_F32, 2, xd);
    for (int l = 0; l < layers; l++) {
        char name[32];
        ir_set_layer(g, l);
        snprintf(name, sizeof name, "l%d.w", l);
        int w = param(g, name, 2, 16, 16, 0);
        snprintf(name, sizeof name, "l%d.b", l);
        int b = param(g, name, 1, 16, 0, 0);
        int y = ir_einsum(g, "bi,io->bo", h, w);
        y = ir_binary(g, IR_OP_ADD, y, ir_broadcast(g, b, 2, xd, &map1));
        y = ir_unary(g, IR_OP_GELU, y);
        y = ir_unary(g, IR_OP_TANH, ir_scale(g, y, 0.5));
        h = ir_binary(g, IR_OP_ADD, h, y);
        int64_t rd = 1;
        int nrm = ir_reduce(g, IR_OP_REDUCE_SUM, ir_binary(g, IR_OP_MUL, h, h), 1, &rd);
        int64_t bd0 = 0;
        h = ir_binary(g, IR_OP_MUL, h, ir_broadcast(g, ir_unary(g, IR_OP_RSQRT, ir_add_scalar(g, nrm, 1e-5)), 2, xd, &bd0));
    }
    ir_set_layer(g, -1);
    ir_set_loss(g, sum_all(g, h));
    CHECKF(!ir_error(g), "%s", ir_error(g));
    char err[IR_ERR_LEN];
    ir_optimizer adam = ir_default_adam();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ir_graph *st = ir_train_step(g, &adam, err, sizeof err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECKF(st != NULL, "%s", err);
    if (st) {
        double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        printf("deep graph: %d forward ops -> %d step ops, %d values, built in %.1f ms\n", g->n_ops, st->n_ops,
               st->n_values, ms);
        CHECK(g->n_ops >= 10000);
        /* backward: at most ~3 ops per forward op; Adam: ~17 per param */
        CHECKF(st->n_ops < 3 * g->n_ops + 20 * n_params(g), "%d step ops for %d forward ops", st->n_ops, g->n_ops);
        CHECKF(ir_verify(st, err, sizeof err) == 0, "%s", err);
    }
    ir_free(st);
    ir_free(g);
}

/* ---- numerics (reference executor) ------------------------------------- */

/* One gradient-check case: a forward graph whose params go through one op;
 * `fill` writes the argument values so that no input sits within the
 * finite-difference step of a kink (relu at 0, ties in max). */
typedef struct fd_case {
    const char *name;
    ir_opkind kind;
    ir_graph *(*build)(ir_opkind k);
} fd_case;

/* loss = sum(y * W) with W a fixed input: every element of y gets its own weight. */
static void weighted_loss(ir_graph *g, int y)
{
    int64_t d[IR_MAX_RANK];
    memcpy(d, g->values[y].dims, sizeof d);
    int w = ir_arg(g, "W", IR_INPUT, IR_F32, g->values[y].rank, d);
    ir_set_loss(g, sum_all(g, ir_binary(g, IR_OP_MUL, y, w)));
}

static ir_graph *b_unary(ir_opkind k)
{
    ir_graph *g = ir_new(ir_op_name(k));
    int p = param(g, "P", 2, 2, 3, 0);
    int y = k == IR_OP_SCALE ? ir_scale(g, p, -1.7) : k == IR_OP_ADD_SCALAR ? ir_add_scalar(g, p, 0.3) : ir_unary(g, k, p);
    weighted_loss(g, y);
    return g;
}

static ir_graph *b_binary(ir_opkind k)
{
    ir_graph *g = ir_new(ir_op_name(k));
    int p = param(g, "P", 2, 2, 3, 0), q = param(g, "Q", 2, 2, 3, 0);
    weighted_loss(g, ir_binary(g, k, p, q));
    return g;
}

/* The same param on both sides: contributions summed. */
static ir_graph *b_square(ir_opkind k)
{
    ir_graph *g = ir_new("square");
    int p = param(g, "P", 2, 2, 3, 0);
    weighted_loss(g, ir_binary(g, k, p, p));
    return g;
}

static ir_graph *b_matmul(ir_opkind k)
{
    ir_graph *g = ir_new("matmul");
    int p = param(g, "P", 2, 2, 3, 0), q = param(g, "Q", 2, 3, 4, 0);
    weighted_loss(g, ir_einsum(g, "ik,kj->ij", p, q));
    return g;
}

/* batch letter, transposed operand and a permuted result */
static ir_graph *b_batched(ir_opkind k)
{
    ir_graph *g = ir_new("batched_einsum");
    int p = param(g, "P", 3, 2, 3, 2), q = param(g, "Q", 3, 4, 2, 3);
    weighted_loss(g, ir_einsum(g, "bkm,nbk->nbm", p, q));
    return g;
}

static ir_graph *b_broadcast(ir_opkind k)
{
    ir_graph *g = ir_new("broadcast");
    int p = param(g, "P", 1, 3, 0, 0);
    int64_t d[3] = {2, 3, 2}, map = 1;
    weighted_loss(g, ir_broadcast(g, p, 3, d, &map));
    return g;
}

static ir_graph *b_reduce(ir_opkind k)
{
    ir_graph *g = ir_new(ir_op_name(k));
    int p = param(g, "P", 3, 2, 3, 4);
    int64_t dims[2] = {0, 2};
    weighted_loss(g, ir_reduce(g, k, p, 2, dims));
    return g;
}

static ir_graph *b_transpose(ir_opkind k)
{
    ir_graph *g = ir_new("transpose");
    int p = param(g, "P", 3, 2, 3, 4);
    int64_t perm[3] = {2, 0, 1};
    weighted_loss(g, ir_transpose(g, p, perm));
    return g;
}

static ir_graph *b_reshape(ir_opkind k)
{
    ir_graph *g = ir_new("reshape");
    int p = param(g, "P", 3, 2, 3, 4);
    int64_t d[2] = {4, 6};
    weighted_loss(g, ir_reshape(g, p, 2, d));
    return g;
}

static ir_graph *b_gather(ir_opkind k)
{
    ir_graph *g = ir_new("gather");
    int p = param(g, "P", 2, 5, 3, 0);
    int ids = input(g, "ids", IR_I32, 2, 2, 2, 0);
    weighted_loss(g, ir_gather(g, p, ids));
    return g;
}

static ir_graph *b_scatter(ir_opkind k)
{
    ir_graph *g = ir_new("scatter_add");
    int p = param(g, "P", 3, 2, 2, 3);
    int ids = input(g, "ids", IR_I32, 2, 2, 2, 0);
    weighted_loss(g, ir_scatter_add(g, ids, p, 5));
    return g;
}

/* Everything at once: shared uses, softmax cross-entropy, a residual. */
static ir_graph *b_mlp(ir_opkind k) { return build_mlp(); }

static const fd_case fd_cases[] = {
    {"neg", IR_OP_NEG, b_unary},           {"exp", IR_OP_EXP, b_unary},
    {"log", IR_OP_LOG, b_unary},           {"sqrt", IR_OP_SQRT, b_unary},
    {"rsqrt", IR_OP_RSQRT, b_unary},       {"tanh", IR_OP_TANH, b_unary},
    {"gelu", IR_OP_GELU, b_unary},         {"relu", IR_OP_RELU, b_unary},
    {"scale", IR_OP_SCALE, b_unary},       {"add_scalar", IR_OP_ADD_SCALAR, b_unary},
    {"add", IR_OP_ADD, b_binary},          {"sub", IR_OP_SUB, b_binary},
    {"mul", IR_OP_MUL, b_binary},          {"div", IR_OP_DIV, b_binary},
    {"max", IR_OP_MAX, b_binary},          {"mul(P,P)", IR_OP_MUL, b_square},
    {"einsum", IR_OP_EINSUM, b_matmul},    {"einsum batched", IR_OP_EINSUM, b_batched},
    {"broadcast", IR_OP_BROADCAST, b_broadcast},
    {"reduce_sum", IR_OP_REDUCE_SUM, b_reduce},
    {"reduce_max", IR_OP_REDUCE_MAX, b_reduce},
    {"transpose", IR_OP_TRANSPOSE, b_transpose},
    {"reshape", IR_OP_RESHAPE, b_reshape},
    {"gather", IR_OP_GATHER, b_gather},    {"scatter_add", IR_OP_SCATTER_ADD, b_scatter},
    {"mlp", IR_OP_ADD, b_mlp},
};

/* Writes the argument values of a case into an executor (the same for the
 * forward and the step executors, so they agree).  Float params are distinct
 * values 0.1 apart in [0.5, 1.5] or [-1, 1]: positive where log/sqrt/rsqrt/div
 * need it, never within 0.05 of 0 (relu) and never tied or within 0.05 of the
 * other operand (max, reduce_max). */
static void fill(const ir_graph *g, exec_ref *r, const char *case_name)
{
    int positive = !strcmp(case_name, "log") || !strcmp(case_name, "sqrt") || !strcmp(case_name, "rsqrt") ||
                   !strcmp(case_name, "div");
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role == IR_INTERMEDIATE || x->role == IR_OPT_STATE) continue; /* states stay as initialised */
        int64_t n = ir_numel(x);
        if (x->dtype == IR_I32) {
            int32_t *d = exec_ref_data(r, v);
            /* ids 1, 0, 2, 1: row 1 is read twice (its gradients must add up),
             * rows 3 and 4 never (zero gradient); labels 0, 1, 0, 1 */
            int labels = strcmp(x->name, "labels") == 0;
            for (int64_t i = 0; i < n; i++) d[i] = (int32_t)(labels ? i % 2 : (i * 2 + 1) % 3);
            continue;
        }
        float *d = exec_ref_data(r, v);
        if (!strcmp(x->name, "W")) {
            pcg32 rng;
            pcg32_seed(&rng, 99, (uint64_t)v);
            for (int64_t i = 0; i < n; i++) d[i] = (float)(2 * pcg32_double(&rng) - 1);
            continue;
        }
        int salt = (int)strlen(x->name) + (x->name[0] == 'Q' ? 3 : 0);
        for (int64_t i = 0; i < n; i++) {
            /* a permutation of 0..n-1 (step coprime with n), spaced 0.1 */
            int64_t step = 7, j;
            while (n % step == 0 || (step % 2 == 0 && n % 2 == 0)) step += 2;
            j = (i * step + salt) % n;
            double u = (double)j / (double)n;  /* distinct in [0, 1) */
            double val = positive ? 0.5 + u : (j % 2 ? 1 : -1) * (0.1 + 0.9 * u);
            if (x->name[0] == 'Q' && !positive) val += 0.05 * (j % 2 ? 1 : -1); /* max: stay apart from P */
            d[i] = (float)val;
        }
    }
}

/* Central differences of the f32 forward graph against the step graph's
 * grad/P.  Step h = 1e-2; the loss is a sum of at most ~100 f32 terms of
 * size <= ~10, so its rounding error is ~1e-5 and contributes ~5e-4 to the
 * difference quotient; the truncation error h^2/6 f''' is ~2e-5 for the
 * smooth ops here.  Hence |fd - grad| <= 2e-3 + 2e-2 |grad|. */
static void fd_check(const fd_case *c)
{
    char err[IR_ERR_LEN];
    ir_graph *fwd = c->build(c->kind);
    CHECKF(!ir_error(fwd), "%s: %s", c->name, ir_error(fwd));
    ir_optimizer sgd = {IR_SGD, 1.0, 0, 0, 0};
    ir_graph *st = ir_train_step(fwd, &sgd, err, sizeof err);
    CHECKF(st != NULL, "%s: %s", c->name, err);
    exec_ref *rf = exec_ref_new(fwd, 0, err, sizeof err);
    exec_ref *rs = st ? exec_ref_new(st, 0, err, sizeof err) : NULL;
    CHECKF(rf && rs, "%s: %s", c->name, err);
    if (!rf || !rs) goto out;
    exec_ref_init_args(rf, 1);
    exec_ref_init_args(rs, 1);
    fill(fwd, rf, c->name);
    fill(st, rs, c->name);
    CHECKF(exec_ref_run(rs, err, sizeof err) == 0, "%s: %s", c->name, err);
    CHECKF(exec_ref_run(rf, err, sizeof err) == 0, "%s: %s", c->name, err);
    CHECKF(fabs(exec_ref_loss(rf) - exec_ref_loss(rs)) <= 1e-6 * (1 + fabs(exec_ref_loss(rf))), "%s: losses differ", c->name);
    const double h = 1e-2;
    int bad = 0, checked = 0;
    for (int p = 0; p < fwd->n_values; p++) {
        /* frozen only feeds stop_grad: its gradient is 0 by definition, and
         * test_sgd_structure checks it is a constant 0 */
        if (fwd->values[p].role != IR_PARAM || !strcmp(fwd->values[p].name, "frozen")) continue;
        int gv = find_prefixed(st, "grad/", p), nv = find_prefixed(st, "new/", p);
        const float *grad = exec_ref_data(rs, gv), *np = exec_ref_data(rs, nv), *p0 = exec_ref_data(rs, p);
        float *x = exec_ref_data(rf, p);
        for (int64_t i = 0; i < ir_numel(&fwd->values[p]); i++) {
            float saved = x[i];
            x[i] = saved + (float)h;
            exec_ref_run(rf, err, sizeof err);
            double up = exec_ref_loss(rf);
            x[i] = saved - (float)h;
            exec_ref_run(rf, err, sizeof err);
            double down = exec_ref_loss(rf);
            x[i] = saved;
            double fd = (up - down) / (2 * h), an = grad[i];
            checked++;
            if (!(fabs(fd - an) <= 2e-3 + 2e-2 * fabs(an))) {
                if (bad++ < 4)
                    fprintf(stderr, "%s: d loss / d %s[%lld]: finite difference %.6g, autodiff %.6g\n", c->name,
                            fwd->values[p].name, (long long)i, fd, an);
            }
            /* SGD with lr 1: new/P = P - grad/P, exactly up to one f32 rounding */
            if (!(fabs((double)p0[i] - an - np[i]) <= 1e-6 * (1 + fabs(p0[i]) + fabs(an)))) bad++;
        }
    }
    CHECKF(bad == 0 && checked > 0, "%s: %d of %d gradient elements wrong", c->name, bad, checked);
out:
    exec_ref_free(rf);
    exec_ref_free(rs);
    ir_free(st);
    ir_free(fwd);
}

/* Every op either has a finite-difference case or passes no gradient. */
static void test_fd_all_ops(void)
{
    int covered[IR_N_OPS] = {0};
    for (size_t i = 0; i < sizeof fd_cases / sizeof fd_cases[0]; i++) {
        fd_check(&fd_cases[i]);
        covered[fd_cases[i].kind] = 1;
    }
    static const ir_opkind no_grad[] = {IR_OP_CONSTANT, IR_OP_IOTA, IR_OP_STOP_GRAD, IR_OP_GE, IR_OP_ONE_HOT,
                                        IR_OP_GELU_GRAD};
    for (size_t i = 0; i < sizeof no_grad / sizeof no_grad[0]; i++) covered[no_grad[i]] = 1;
    /* test_ops checks every op of the table by finite differences too (ops
     * added since have their check there only); the cases here pick values
     * away from kinks and ties by hand */
    for (int k = 0; k <= IR_OP_ONE_HOT; k++)
        CHECKF(covered[k] || ir_op_elementwise(k), "op %s has no gradient check", ir_op_name(k));
}

/* Two Adam steps on loss = sum(P * W): grad = W; compare new P, m, v, t with
 * the formulas in double.  Tolerance 1e-5 relative: a handful of f32 ops. */
static void test_adam_numbers(void)
{
    ir_graph *g = ir_new("adam");
    int p = param(g, "P", 2, 2, 3, 0);
    weighted_loss(g, ir_binary(g, IR_OP_MUL, p, p));
    ir_optimizer o = {IR_ADAM, 0.05, 0.8, 0.95, 1e-3};
    char err[IR_ERR_LEN];
    ir_graph *st = ir_train_step(g, &o, err, sizeof err);
    CHECKF(st != NULL, "%s", err);
    exec_ref *r = st ? exec_ref_new(st, 0, err, sizeof err) : NULL;
    CHECKF(r != NULL, "%s", err);
    if (!r) goto out;
    exec_ref_init_args(r, 5);
    fill(st, r, "adam");
    int w = ir_find(st, "W"), m = ir_find(st, "adam.m/P"), v = ir_find(st, "adam.v/P"), t = ir_find(st, "adam.t");
    double P[6], M[6] = {0}, V[6] = {0};
    for (int i = 0; i < 6; i++) P[i] = ((float *)exec_ref_data(r, p))[i];
    int bad = 0;
    for (int step = 1; step <= 2; step++) {
        CHECKF(exec_ref_run(r, err, sizeof err) == 0, "%s", err);
        exec_ref_apply_updates(r);
        const float *W = exec_ref_data(r, w), *Pn = exec_ref_data(r, p), *Mn = exec_ref_data(r, m), *Vn = exec_ref_data(r, v);
        for (int i = 0; i < 6; i++) {
            double gr = 2 * P[i] * W[i];
            M[i] = o.beta1 * M[i] + (1 - o.beta1) * gr;
            V[i] = o.beta2 * V[i] + (1 - o.beta2) * gr * gr;
            double mh = M[i] / (1 - pow(o.beta1, step)), vh = V[i] / (1 - pow(o.beta2, step));
            P[i] -= o.lr * mh / (sqrt(vh) + o.eps);
            bad += !(fabs(Pn[i] - P[i]) <= 1e-5 * (1 + fabs(P[i])));
            bad += !(fabs(Mn[i] - M[i]) <= 1e-5 * (1 + fabs(M[i])));
            bad += !(fabs(Vn[i] - V[i]) <= 1e-5 * (1 + fabs(V[i])));
        }
        CHECKF(((float *)exec_ref_data(r, t))[0] == (float)step, "adam.t after step %d", step);
    }
    CHECKF(bad == 0, "%d Adam values differ from the formula", bad);
out:
    exec_ref_free(r);
    ir_free(st);
    ir_free(g);
}

/* The gpt-tiny training step (default Adam, lr 1e-3), run 20 times on the same
 * batch with the updates carried over, lowers the loss. */
static void test_gpt_tiny_trains(void)
{
    ir_graph *g = test_build_step("gpt-tiny");
    char err[512];
    exec_ref *r = exec_ref_new(g, 0, err, sizeof err);
    CHECKF(r != NULL, "%s", err);
    if (!r) {
        ir_free(g);
        return;
    }
    exec_ref_init_args(r, 1);
    double first = 0, last = 0;
    int decreasing = 1;
    for (int step = 0; step < 20; step++) {
        CHECKF(exec_ref_run(r, err, sizeof err) == 0, "%s", err);
        double loss = exec_ref_loss(r);
        if (step == 0) first = loss;
        else decreasing &= loss < last;
        last = loss;
        exec_ref_apply_updates(r);
    }
    printf("gpt-tiny, 20 Adam steps on one batch: loss %.4f -> %.4f\n", first, last);
    CHECK(isfinite(first) && isfinite(last));
    CHECK(decreasing);
    CHECKF(last < 0.8 * first, "loss %.4f -> %.4f", first, last);
    exec_ref_free(r);
    ir_free(g);
}

int main(void)
{
    test_gpt_tiny_trains();
    test_sgd_structure();
    test_adam_structure();
    test_skips_constant_branches();
    test_errors();
    test_allowed();
    test_deep_graph();
    test_fd_all_ops();
    test_adam_numbers();
    return test_done();
}
