/* test_exec.c - kernels, einsum layouts, argument filling, the reference executor. */
#include "exec/exec.h"
#include "exec/fuse.h"
#include "exec/kernels.h"
#include "exec/runtime.h"
#include "models/models.h"
#include "ir/pcg32.h"
#include "tests/test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- einsum against a naive loop -------------------------------------- */

/* Naive einsum in double: loops over every combination of all letters.  Also
 * returns, per result element, the sum of |a*b| (the scale of its rounding
 * error). */
static void naive_einsum(const ir_einsum_spec *e, const int64_t *da, const float *a, const int64_t *db, const float *b,
                         const int64_t *dc, double *c, double *mag)
{
    char letters[3 * IR_MAX_RANK];
    int64_t size[3 * IR_MAX_RANK];
    int n = 0;
    const char *lists[3] = {e->a, e->b, e->out};
    const int ranks[3] = {e->rank_a, e->rank_b, e->rank_out};
    const int64_t *dims[3] = {da, db, dc};
    for (int l = 0; l < 3; l++)
        for (int i = 0; i < ranks[l]; i++)
            if (!memchr(letters, lists[l][i], (size_t)n)) {
                letters[n] = lists[l][i];
                size[n++] = dims[l][i];
            }
    int64_t nc = 1, total = 1;
    for (int i = 0; i < e->rank_out; i++) nc *= dc[i];
    for (int i = 0; i < n; i++) total *= size[i];
    for (int64_t i = 0; i < nc; i++) c[i] = mag[i] = 0;
    int64_t idx[3 * IR_MAX_RANK] = {0};
    for (int64_t t = 0; t < total; t++) {
        int64_t off[3] = {0, 0, 0};
        for (int l = 0; l < 3; l++)
            for (int i = 0; i < ranks[l]; i++) {
                int p = (int)((char *)memchr(letters, lists[l][i], (size_t)n) - letters);
                off[l] = off[l] * dims[l][i] + idx[p];
            }
        double prod = (double)a[off[0]] * (double)b[off[1]];
        c[off[2]] += prod;
        mag[off[2]] += fabs(prod);
        for (int i = n - 1; i >= 0; i--) {
            if (++idx[i] < size[i]) break;
            idx[i] = 0;
        }
    }
}

static int64_t dims_from(const char *letters, int rank, const char *names, const int64_t *sizes, int64_t *dims)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        dims[i] = sizes[strchr(names, letters[i]) - names];
        n *= dims[i];
    }
    return n;
}

static void fill_random(float *x, int64_t n, pcg32 *r)
{
    for (int64_t i = 0; i < n; i++) x[i] = (float)(pcg32_double(r) * 2.0 - 1.0);
}

static void check_einsum(const char *subs, const char *names, const int64_t *sizes)
{
    ir_einsum_spec e;
    char err[200];
    if (ir_einsum_parse(subs, -1, -1, &e, err, sizeof err) < 0) {
        CHECKF(0, "%s: %s", subs, err);
        return;
    }
    int64_t da[IR_MAX_RANK], db[IR_MAX_RANK], dc[IR_MAX_RANK];
    int64_t na = dims_from(e.a, e.rank_a, names, sizes, da);
    int64_t nb = dims_from(e.b, e.rank_b, names, sizes, db);
    int64_t nc = dims_from(e.out, e.rank_out, names, sizes, dc);
    float *a = malloc((size_t)na * 4), *b = malloc((size_t)nb * 4), *c = malloc((size_t)nc * 4);
    double *want = malloc((size_t)nc * 8), *mag = malloc((size_t)nc * 8);
    pcg32 r;
    pcg32_seed(&r, 11, (uint64_t)nc);
    fill_random(a, na, &r);
    fill_random(b, nb, &r);
    for (int64_t i = 0; i < nc; i++) c[i] = 1e30f; /* every element must be written */
    exec_einsum_f32(&e, da, a, db, b, dc, c);
    naive_einsum(&e, da, a, db, b, dc, want, mag);
    /* A float dot product of K terms has error at most about K * 2^-24 times
     * the sum of |a*b|; K <= 60 here, so 1e-5 * sum|a*b| bounds it with room
     * (and differs from a wrong answer by orders of magnitude). */
    int64_t bad = -1;
    for (int64_t i = 0; i < nc && bad < 0; i++)
        if (!(fabs(c[i] - want[i]) <= 1e-5 * mag[i] + 1e-7)) bad = i;
    CHECKF(bad < 0 && nc > 0, "%s: element %lld of %lld is %g, want %g", subs, (long long)bad, (long long)nc,
           bad >= 0 ? c[bad] : 0.0, bad >= 0 ? want[bad] : 0.0);
    free(a);
    free(b);
    free(c);
    free(want);
    free(mag);
}

static void test_einsum_layouts(void)
{
    /* letters: b s h f n d t v i j k and a few more; sizes kept small and
     * different from one another so a swapped dimension shows. */
    const char *names = "bshfndtvijkpqr";
    const int64_t sizes[] = {2, 5, 6, 7, 3, 4, 6, 9, 3, 4, 5, 2, 3, 4};
    static const char *const layouts[] = {
        "bsh,hf->bsf", "bsf,hf->bsh", "bsh,bsf->hf", "bsnd,btnd->bnst", "bnst,btnd->bsnd", "bsnd,ndh->bsh",
        "bsh,hnd->bsnd", "bsh,vh->bsv",
        /* transposed and permuted operands */
        "ij,jk->ik", "ji,jk->ki", "ij,kj->ik", "ji,kj->ki",
        /* groups whose orders disagree: some operand must be copied */
        "bsh,hf->sbf", "shb,hf->bsf", "pqr,prs->qs", "bsnd,btnd->bnts", "bsh,hnd->bdns",
        /* batch letters in odd places, outer product, dot, matrix-vector */
        "sbh,bhf->fbs", "hsb,hf->fsb", "i,j->ij", "i,i->", "ij,j->i", "bi,bi->b", "b,b->b", "ib,jb->bji",
    };
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) check_einsum(layouts[i], names, sizes);
    /* The common layouts run in place; layouts whose group orders disagree
     * copy exactly one operand (the smallest that resolves it). */
    for (size_t i = 0; i < 8; i++) {
        ir_einsum_spec e;
        int64_t da[IR_MAX_RANK], db[IR_MAX_RANK], dc[IR_MAX_RANK];
        ir_einsum_parse(layouts[i], -1, -1, &e, NULL, 0);
        dims_from(e.a, e.rank_a, names, sizes, da);
        dims_from(e.b, e.rank_b, names, sizes, db);
        dims_from(e.out, e.rank_out, names, sizes, dc);
        CHECKF(exec_einsum_copies(&e, da, db, dc) == 0, "%s copies", layouts[i]);
    }
    {
        ir_einsum_spec e;
        ir_einsum_parse("bsh,hf->sbf", -1, -1, &e, NULL, 0);
        int64_t da[3] = {2, 5, 6}, db[2] = {6, 7}, dc[3] = {5, 2, 7};
        /* b,s must be one row index: a is [2,5,6] = 60 elements, out 70 */
        CHECK(exec_einsum_copies(&e, da, db, dc) == 60);
        ir_einsum_parse("pqr,prs->qs", -1, -1, &e, NULL, 0);
        int64_t dp[3] = {2, 3, 4}, dq[3] = {2, 4, 5}, dr[2] = {3, 5};
        /* contracted p,r are apart in a: copy a (24) rather than b (40) */
        CHECK(exec_einsum_copies(&e, dp, dq, dr) == 24);
    }
    /* size-1 dims (a local shard of 1, a batch of 1) */
    const int64_t ones[] = {1, 1, 6, 7, 1, 4, 6, 9, 1, 4, 1, 2, 3, 4};
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) check_einsum(layouts[i], names, ones);
}

/* ---- single ops on small hand-computed cases -------------------------- */

static exec_tensor tens(ir_dtype t, int rank, const int64_t *dims, void *data)
{
    exec_tensor x = {.dtype = t, .rank = rank, .data = data};
    for (int i = 0; i < rank; i++) x.dims[i] = dims[i];
    return x;
}

static int near(const float *got, const float *want, int n, float tol)
{
    for (int i = 0; i < n; i++)
        if (!(fabsf(got[i] - want[i]) <= tol)) {
            fprintf(stderr, "  element %d: got %.8g want %.8g\n", i, got[i], want[i]);
            return 0;
        }
    return 1;
}

static int run1(ir_opkind k, const ir_attrs *a, exec_tensor x, exec_tensor *y)
{
    char err[200];
    return exec_kernel_run(k, a, 1, &x, y, NULL, err, sizeof err);
}

static void test_unary_binary(void)
{
    int64_t d3[1] = {3}, d4[1] = {4};
    float x[3] = {0.25f, 1.0f, 4.0f}, y[3];
    ir_attrs none = {0};
    struct {
        ir_opkind k;
        float want[3];
    } un[] = {
        {IR_OP_NEG, {-0.25f, -1, -4}},
        {IR_OP_EXP, {1.2840254f, 2.7182818f, 54.598150f}},
        {IR_OP_LOG, {-1.3862944f, 0, 1.3862944f}},
        {IR_OP_SQRT, {0.5f, 1, 2}},
        {IR_OP_RSQRT, {2, 1, 0.5f}},
        {IR_OP_TANH, {0.24491866f, 0.76159416f, 0.99932930f}},
        {IR_OP_RELU, {0.25f, 1, 4}},
        {IR_OP_STOP_GRAD, {0.25f, 1, 4}},
    };
    /* Values from a calculator to 8 digits; float math is good to ~1e-7
     * relative, so 1e-5 absolute (values <= 55) is several ulps of slack. */
    for (size_t i = 0; i < sizeof un / sizeof un[0]; i++) {
        CHECK(run1(un[i].k, &none, tens(IR_F32, 1, d3, x), &(exec_tensor){.dtype = IR_F32, .rank = 1, .dims = {3}, .data = y}) == 0);
        CHECKF(near(y, un[i].want, 3, 2e-5f), "%s", ir_op_name(un[i].k));
    }
    float xn[3] = {-1.0f, 0.0f, 2.0f};
    ir_attrs s = {.scalar = -1.5};
    exec_tensor out = tens(IR_F32, 1, d3, y);
    run1(IR_OP_SCALE, &s, tens(IR_F32, 1, d3, xn), &out);
    CHECK(near(y, (float[]){1.5f, 0, -3}, 3, 0));
    run1(IR_OP_ADD_SCALAR, &s, tens(IR_F32, 1, d3, xn), &out);
    CHECK(near(y, (float[]){-2.5f, -1.5f, 0.5f}, 3, 0));
    run1(IR_OP_RELU, &none, tens(IR_F32, 1, d3, xn), &out);
    CHECK(near(y, (float[]){0, 0, 2}, 3, 0));
    /* gelu (tanh form) at -1, 0, 2: -0.15880801, 0, 1.9545977 (calculator). */
    run1(IR_OP_GELU, &none, tens(IR_F32, 1, d3, xn), &out);
    CHECKF(near(y, (float[]){-0.15880801f, 0, 1.9545977f}, 3, 1e-6f), "gelu");
    /* gelu_grad against a central difference of gelu in double: step 1e-4
     * gives truncation error ~1e-8, float evaluation error ~1e-7. */
    float xs[6] = {-3.0f, -1.0f, -0.3f, 0.0f, 0.7f, 2.5f}, gg[6], want[6];
    int64_t d6[1] = {6};
    exec_tensor g6 = tens(IR_F32, 1, d6, gg);
    run1(IR_OP_GELU_GRAD, &none, tens(IR_F32, 1, d6, xs), &g6);
    for (int i = 0; i < 6; i++) {
        double h = 1e-4, c = sqrt(2.0 / M_PI), xp = xs[i] + h, xm = xs[i] - h;
        double gp = 0.5 * xp * (1 + tanh(c * (xp + 0.044715 * xp * xp * xp)));
        double gm = 0.5 * xm * (1 + tanh(c * (xm + 0.044715 * xm * xm * xm)));
        want[i] = (float)((gp - gm) / (2 * h));
    }
    CHECKF(near(gg, want, 6, 1e-5f), "gelu_grad");
    CHECK(gg[3] == 0.5f);

    float a[4] = {1, 2, 3, 4}, b[4] = {4, 3, 2, 1}, c[4];
    struct {
        ir_opkind k;
        float want[4];
    } bin[] = {
        {IR_OP_ADD, {5, 5, 5, 5}}, {IR_OP_SUB, {-3, -1, 1, 3}}, {IR_OP_MUL, {4, 6, 6, 4}},
        {IR_OP_DIV, {0.25f, 2.0f / 3.0f, 1.5f, 4}}, {IR_OP_MAX, {4, 3, 3, 4}}, {IR_OP_GE, {0, 0, 1, 1}},
    };
    for (size_t i = 0; i < sizeof bin / sizeof bin[0]; i++) {
        exec_tensor in[2] = {tens(IR_F32, 1, d4, a), tens(IR_F32, 1, d4, b)}, o = tens(IR_F32, 1, d4, c);
        char err[100];
        CHECK(exec_kernel_run(bin[i].k, &none, 2, in, &o, NULL, err, sizeof err) == 0);
        CHECKF(near(c, bin[i].want, 4, 0), "%s", ir_op_name(bin[i].k));
    }
}

/* exp, gelu and gelu_grad are computed without libm (vectorized); sweep
 * them against the formulas in double.  exp: 2 ulp relative over its whole
 * range.  gelu (relative) and gelu_grad (absolute): 2e-7 plus 4e-7 |u|,
 * because u = c (x + a x^3) is rounded a few times in float and exp(-2u)
 * turns an absolute error of k ulps of 2u into a relative error of about
 * 2|u| k 6e-8 (measured: 3e-7 |u| at x = -9). */
static void test_vector_math(void)
{
    enum { N = 200001 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    int64_t dn[1] = {N};
    ir_attrs none = {0};
    exec_tensor out = tens(IR_F32, 1, dn, y);
    for (int i = 0; i < N; i++) x[i] = -87.0f + 175.0f * (float)i / (N - 1);
    run1(IR_OP_EXP, &none, tens(IR_F32, 1, dn, x), &out);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double e = exp((double)x[i]), r = fabs((double)y[i] - e) / e;
        if (r > worst) worst = r;
    }
    CHECKF(worst < 2.4e-7, "exp: worst relative error %.3g over [-87, 88]", worst);
    double worst_g = 0, worst_d = 0;
    for (int i = 0; i < N; i++) x[i] = -12.0f + 24.0f * (float)i / (N - 1);
    float *dy = malloc(N * sizeof *dy);
    exec_tensor dout = tens(IR_F32, 1, dn, dy);
    run1(IR_OP_GELU, &none, tens(IR_F32, 1, dn, x), &out);
    run1(IR_OP_GELU_GRAD, &none, tens(IR_F32, 1, dn, x), &dout);
    for (int i = 0; i < N; i++) {
        double v = x[i], c = sqrt(2.0 / M_PI), u = c * (v + 0.044715 * v * v * v), s = 1 / (1 + exp(-2 * u));
        double g = v * s, d = s + 2 * v * s * (1 - s) * c * (1 + 3 * 0.044715 * v * v);
        double allow = 2e-7 + 4e-7 * fabs(u);
        double eg = fabs((double)y[i] - g) / (fabs(g) + 1e-30), ed = fabs((double)dy[i] - d);
        if (eg / allow > worst_g && fabs(g) > 1e-30) worst_g = eg / allow;
        if (ed / allow > worst_d) worst_d = ed / allow;
    }
    CHECKF(worst_g <= 1, "gelu: worst error %.3g of the allowance", worst_g);
    CHECKF(worst_d <= 1, "gelu_grad: worst error %.3g of the allowance", worst_d);
    printf("  vector math: exp worst %.2e relative; gelu, gelu_grad at %.2f, %.2f of their allowance\n", worst,
           worst_g, worst_d);
    /* edges: what expf gives */
    float ex[6] = {-INFINITY, -100.0f, 0.0f, 100.0f, INFINITY, NAN}, ey[6];
    int64_t d6[1] = {6};
    exec_tensor e6 = tens(IR_F32, 1, d6, ey);
    run1(IR_OP_EXP, &none, tens(IR_F32, 1, d6, ex), &e6);
    CHECK(ey[0] == 0 && ey[1] == 0 && ey[2] == 1 && isinf(ey[3]) && isinf(ey[4]) && isnan(ey[5]));
    run1(IR_OP_GELU, &none, tens(IR_F32, 1, d6, ex), &e6);
    CHECK(fabsf(ey[1]) < 1e-30f && ey[2] == 0 && ey[3] == 100.0f && isinf(ey[4]) && isnan(ey[5]));
    run1(IR_OP_GELU_GRAD, &none, tens(IR_F32, 1, d6, ex), &e6);
    CHECK(fabsf(ey[1]) < 1e-30f && ey[2] == 0.5f && ey[3] == 1.0f && isnan(ey[5]));
    free(x);
    free(y);
    free(dy);
}

static void test_movement(void)
{
    float x6[6] = {1, 2, 3, 4, 5, 6}, y[24];
    int64_t d23[2] = {2, 3}, d3[1] = {3}, d2[1] = {2}, d32[2] = {3, 2}, d243[3] = {2, 4, 3};
    /* broadcast [3] -> [2,3] along rows, [2] -> [2,3] along columns */
    ir_attrs bm = {.n_ints = 1, .ints = {1}};
    exec_tensor o = tens(IR_F32, 2, d23, y);
    run1(IR_OP_BROADCAST, &bm, tens(IR_F32, 1, d3, x6), &o);
    CHECK(near(y, (float[]){1, 2, 3, 1, 2, 3}, 6, 0));
    bm.ints[0] = 0;
    run1(IR_OP_BROADCAST, &bm, tens(IR_F32, 1, d2, x6), &o);
    CHECK(near(y, (float[]){1, 1, 1, 2, 2, 2}, 6, 0));
    ir_attrs b3 = {.n_ints = 2, .ints = {0, 2}};
    o = tens(IR_F32, 3, d243, y);
    run1(IR_OP_BROADCAST, &b3, tens(IR_F32, 2, d23, x6), &o);
    int ok = 1;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 3; k++) ok &= y[(i * 4 + j) * 3 + k] == x6[i * 3 + k];
    CHECK(ok);
    /* transpose [2,3] -> [3,2]; [2,4,3] perm {2,0,1} -> [3,2,4] */
    ir_attrs tp = {.n_ints = 2, .ints = {1, 0}};
    o = tens(IR_F32, 2, d32, y);
    run1(IR_OP_TRANSPOSE, &tp, tens(IR_F32, 2, d23, x6), &o);
    CHECK(near(y, (float[]){1, 4, 2, 5, 3, 6}, 6, 0));
    float x24[24], t24[24];
    for (int i = 0; i < 24; i++) x24[i] = (float)i;
    ir_attrs tp3 = {.n_ints = 3, .ints = {2, 0, 1}};
    int64_t d324[3] = {3, 2, 4};
    o = tens(IR_F32, 3, d324, t24);
    run1(IR_OP_TRANSPOSE, &tp3, tens(IR_F32, 3, d243, x24), &o);
    ok = 1;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 4; j++) ok &= t24[(k * 2 + i) * 4 + j] == x24[(i * 4 + j) * 3 + k];
    CHECK(ok);
    /* transpose of i32 data moves the bits unchanged */
    int32_t ia[6] = {-1, 7, 2147483647, 0, 5, -9}, ib[6];
    o = tens(IR_I32, 2, d32, ib);
    run1(IR_OP_TRANSPOSE, &tp, tens(IR_I32, 2, d23, ia), &o);
    CHECK(ib[0] == -1 && ib[1] == 0 && ib[2] == 7 && ib[4] == 2147483647 && ib[5] == -9);
    /* reshape is a copy */
    o = tens(IR_F32, 2, d32, y);
    run1(IR_OP_RESHAPE, &(ir_attrs){0}, tens(IR_F32, 2, d23, x6), &o);
    CHECK(near(y, x6, 6, 0));
}

static void test_reduce(void)
{
    float x[6] = {1, 2, 3, 4, 5, 6}, y[3];
    int64_t d23[2] = {2, 3}, d2[1] = {2}, d3[1] = {3};
    ir_attrs r1 = {.n_ints = 1, .ints = {1}}, r0 = {.n_ints = 1, .ints = {0}}, r01 = {.n_ints = 2, .ints = {1, 0}};
    exec_tensor o2 = tens(IR_F32, 1, d2, y), o3 = tens(IR_F32, 1, d3, y), o0 = tens(IR_F32, 0, NULL, y);
    run1(IR_OP_REDUCE_SUM, &r1, tens(IR_F32, 2, d23, x), &o2);
    CHECK(near(y, (float[]){6, 15}, 2, 0));
    run1(IR_OP_REDUCE_SUM, &r0, tens(IR_F32, 2, d23, x), &o3);
    CHECK(near(y, (float[]){5, 7, 9}, 3, 0));
    run1(IR_OP_REDUCE_SUM, &r01, tens(IR_F32, 2, d23, x), &o0);
    CHECK(y[0] == 21);
    float m[6] = {1, -5, 3, -4, 8, -6};
    run1(IR_OP_REDUCE_MAX, &r1, tens(IR_F32, 2, d23, m), &o2);
    CHECK(near(y, (float[]){3, 8}, 2, 0));
    run1(IR_OP_REDUCE_MAX, &r0, tens(IR_F32, 2, d23, m), &o3);
    CHECK(near(y, (float[]){1, 8, 3}, 3, 0));
    /* [2,3,4] summed over dims {0,2}: result[j] = sum_i,k x[i][j][k] with x = index */
    float x24[24], s[3];
    for (int i = 0; i < 24; i++) x24[i] = (float)i;
    int64_t d234[3] = {2, 3, 4};
    ir_attrs r02 = {.n_ints = 2, .ints = {0, 2}};
    exec_tensor os = tens(IR_F32, 1, d3, s);
    run1(IR_OP_REDUCE_SUM, &r02, tens(IR_F32, 3, d234, x24), &os);
    /* j=0: (0+1+2+3) + (12+13+14+15) = 60; each j adds 4 per element: +32 */
    CHECK(near(s, (float[]){60, 92, 124}, 3, 0));
    run1(IR_OP_REDUCE_MAX, &r02, tens(IR_F32, 3, d234, x24), &os);
    CHECK(near(s, (float[]){15, 19, 23}, 3, 0));
    /* a long sum stays exact-ish: 1e6 copies of 0.1 (double accumulation
     * gives 100000 to float precision; a float running sum drifts by ~1%). */
    int64_t dn[1] = {1000000};
    float *big = malloc(sizeof(float) * 1000000);
    for (int i = 0; i < 1000000; i++) big[i] = 0.1f;
    r0.ints[0] = 0;
    run1(IR_OP_REDUCE_SUM, &r0, tens(IR_F32, 1, dn, big), &o0);
    CHECKF(fabsf(y[0] - 100000.0f) < 1.0f, "sum %g", y[0]);
    free(big);
}

static void test_indexing(void)
{
    float table[8] = {0, 1, 2, 3, 4, 5, 6, 7}, y[12];
    int32_t ids[4] = {3, 0, 3, 1};
    int64_t d42[2] = {4, 2}, d3[1] = {3}, d32[2] = {3, 2};
    exec_tensor in[2] = {tens(IR_F32, 2, d42, table), tens(IR_I32, 1, d3, ids)}, o = tens(IR_F32, 2, d32, y);
    char err[200];
    CHECK(exec_kernel_run(IR_OP_GATHER, &(ir_attrs){0}, 2, in, &o, NULL, err, sizeof err) == 0);
    CHECK(near(y, (float[]){6, 7, 0, 1, 6, 7}, 6, 0));
    int32_t badids[3] = {1, 4, 0};
    in[1].data = badids;
    CHECK(exec_kernel_run(IR_OP_GATHER, &(ir_attrs){0}, 2, in, &o, NULL, err, sizeof err) == -1);
    CHECKF(strstr(err, "id 4") && strstr(err, "position 1"), "%s", err);
    /* a table shard holding rows [2, 4): other ids give zero rows */
    exec_kernel_opts shard = {.id_base = 2, .ids_masked = 1};
    int64_t d22[2] = {2, 2};
    in[0] = tens(IR_F32, 2, d22, table + 4);
    in[1].data = ids;
    CHECK(exec_kernel_run(IR_OP_GATHER, &(ir_attrs){0}, 2, in, &o, &shard, err, sizeof err) == 0);
    CHECK(near(y, (float[]){6, 7, 0, 0, 6, 7}, 6, 0));

    /* scatter_add: ids {1,0,1}, updates [3,2] -> [2,2] */
    float upd[6] = {1, 2, 10, 20, 100, 200}, s[4];
    int32_t sid[3] = {1, 0, 1};
    exec_tensor si[2] = {tens(IR_I32, 1, d3, sid), tens(IR_F32, 2, d32, upd)}, so = tens(IR_F32, 2, d22, s);
    CHECK(exec_kernel_run(IR_OP_SCATTER_ADD, &(ir_attrs){0}, 2, si, &so, NULL, err, sizeof err) == 0);
    CHECK(near(s, (float[]){10, 20, 101, 202}, 4, 0));
    sid[2] = -1;
    CHECK(exec_kernel_run(IR_OP_SCATTER_ADD, &(ir_attrs){0}, 2, si, &so, NULL, err, sizeof err) == -1);
    CHECKF(strstr(err, "id -1") != NULL, "%s", err);

    /* one_hot: ids {2,0,5,-1}, depth 3; out of range gives a zero row */
    int32_t oh[4] = {2, 0, 5, -1};
    int64_t d4[1] = {4}, d43[2] = {4, 3};
    exec_tensor oo = tens(IR_F32, 2, d43, y);
    ir_attrs depth = {.n_ints = 1, .ints = {3}};
    CHECK(run1(IR_OP_ONE_HOT, &depth, tens(IR_I32, 1, d4, oh), &oo) == 0);
    CHECK(near(y, (float[]){0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0}, 12, 0));

    /* iota along dim 1 (float) and dim 0 (i32); with an offset for a shard */
    int64_t d23[2] = {2, 3};
    exec_tensor io = tens(IR_F32, 2, d23, y);
    ir_attrs dim1 = {.n_ints = 1, .ints = {1}}, dim0 = {.n_ints = 1, .ints = {0}};
    CHECK(exec_kernel_run(IR_OP_IOTA, &dim1, 0, NULL, &io, NULL, err, sizeof err) == 0);
    CHECK(near(y, (float[]){0, 1, 2, 0, 1, 2}, 6, 0));
    int32_t ii[6];
    exec_tensor ioi = tens(IR_I32, 2, d23, ii);
    exec_kernel_opts off = {.out_offset = {4, 0}};
    CHECK(exec_kernel_run(IR_OP_IOTA, &dim0, 0, NULL, &ioi, &off, err, sizeof err) == 0);
    CHECK(ii[0] == 4 && ii[2] == 4 && ii[3] == 5 && ii[5] == 5);

    /* constants */
    ir_attrs cv = {.scalar = 2.5};
    CHECK(exec_kernel_run(IR_OP_CONSTANT, &cv, 0, NULL, &io, NULL, err, sizeof err) == 0);
    CHECK(near(y, (float[]){2.5f, 2.5f, 2.5f, 2.5f, 2.5f, 2.5f}, 6, 0));
    cv.scalar = 7;
    CHECK(exec_kernel_run(IR_OP_CONSTANT, &cv, 0, NULL, &ioi, NULL, err, sizeof err) == 0);
    CHECK(ii[0] == 7 && ii[5] == 7);
}

/* ---- filling ---------------------------------------------------------- */

static void test_fill(void)
{
    ir_graph *g = ir_new("fill");
    int64_t dw[2] = {64, 1000}, db[1] = {300}, di[2] = {4, 500};
    int w = ir_arg(g, "w", IR_PARAM, IR_F32, 2, dw);
    int w2 = ir_arg(g, "w2", IR_PARAM, IR_F32, 2, dw);
    int bias = ir_arg(g, "bias", IR_PARAM, IR_F32, 1, db);
    int m = ir_arg(g, "m", IR_OPT_STATE, IR_F32, 2, dw);
    int tok = ir_arg(g, "tok", IR_INPUT, IR_I32, 2, di);
    int tok5 = ir_arg(g, "tok5", IR_INPUT, IR_I32, 2, di);
    int ones = ir_arg(g, "ones", IR_INPUT, IR_F32, 1, db);
    int nrm = ir_arg(g, "nrm", IR_INPUT, IR_F32, 1, db);
    ir_set_init(g, tok5, IR_INIT_IDS, 5);
    ir_set_init(g, ones, IR_INIT_ONES, 0);
    ir_set_init(g, nrm, IR_INIT_NORMAL, 3.0);
    CHECK(ir_error(g) == NULL);
    int64_t n = 64000;
    float *full = malloc((size_t)n * 4), *part = malloc(1000 * 4), *other = malloc((size_t)n * 4);
    exec_fill_range(g, w, 5, 0, n, full);
    /* a sub-range equals the slice of the full fill, at several offsets */
    int64_t starts[3] = {0, 123, 63000};
    for (int i = 0; i < 3; i++) {
        exec_fill_range(g, w, 5, starts[i], 1000, part);
        CHECKF(memcmp(part, full + starts[i], 1000 * 4) == 0, "start %lld", (long long)starts[i]);
    }
    /* deterministic, and different for another seed or another name */
    exec_fill_range(g, w, 5, 0, n, other);
    CHECK(memcmp(full, other, (size_t)n * 4) == 0);
    exec_fill_range(g, w, 6, 0, n, other);
    CHECK(memcmp(full, other, (size_t)n * 4) != 0);
    exec_fill_range(g, w2, 5, 0, n, other);
    CHECK(memcmp(full, other, (size_t)n * 4) != 0);
    /* AUTO for a rank-2 param: uniform with std 1/sqrt(64) = 0.125, so inside
     * +-0.2165.  With 64000 samples the sample std is within ~0.2% of 0.125
     * (one standard error); 2% is ten standard errors. */
    double sum = 0, sq = 0, lim = sqrt(3.0) * 0.125;
    int inside = 1;
    for (int64_t i = 0; i < n; i++) {
        sum += full[i];
        sq += (double)full[i] * full[i];
        inside &= fabs(full[i]) <= lim;
    }
    CHECK(inside);
    CHECKF(fabs(sum / n) < 0.005, "mean %g", sum / n);
    CHECKF(fabs(sqrt(sq / n) - 0.125) < 0.0025, "std %g", sqrt(sq / n));
    /* rank-1 AUTO: std 0.02; NORMAL 3: |x| <= 3 sqrt(3); ONES */
    exec_fill_range(g, bias, 5, 0, 300, part);
    inside = 1;
    for (int i = 0; i < 300; i++) inside &= fabsf(part[i]) <= sqrtf(3.0f) * 0.02f;
    CHECK(inside);
    exec_fill_range(g, nrm, 5, 0, 300, part);
    double mx = 0;
    for (int i = 0; i < 300; i++) mx = fmax(mx, fabs(part[i]));
    CHECKF(mx <= 3 * sqrt(3.0) && mx > 3.0, "max |x| = %g", mx);
    exec_fill_range(g, ones, 5, 0, 300, part);
    CHECK(part[0] == 1 && part[299] == 1);
    /* opt state AUTO: zeros */
    exec_fill_range(g, m, 5, 100, 1000, part);
    int zeros = 1;
    for (int i = 0; i < 1000; i++) zeros &= part[i] == 0;
    CHECK(zeros);
    /* i32 AUTO: ids in [0,2); IDS 5: ids in [0,5), every id occurs */
    int32_t ids[2000];
    int hist[5] = {0}, okr = 1;
    exec_fill_range(g, tok, 5, 0, 2000, ids);
    for (int i = 0; i < 2000; i++) okr &= ids[i] == 0 || ids[i] == 1;
    CHECK(okr);
    exec_fill_range(g, tok5, 5, 0, 2000, ids);
    for (int i = 0; i < 2000; i++) {
        okr &= ids[i] >= 0 && ids[i] < 5;
        if (ids[i] >= 0 && ids[i] < 5) hist[ids[i]]++;
    }
    CHECK(okr);
    for (int i = 0; i < 5; i++) CHECKF(hist[i] > 300 && hist[i] < 500, "id %d occurs %d times", i, hist[i]);
    int32_t sub[100];
    exec_fill_range(g, tok5, 5, 777, 100, sub);
    CHECK(memcmp(sub, ids + 777, sizeof sub) == 0);
    free(full);
    free(part);
    free(other);
    ir_free(g);
}

/* ---- the reference executor ------------------------------------------- */

static void test_ref_limits_and_errors(void)
{
    ir_graph *g = ir_new("big");
    int64_t d[2] = {1000, 1000}, dt[2] = {5, 3}, di[1] = {4};
    int w = ir_arg(g, "w", IR_PARAM, IR_F32, 2, d);
    ir_unary(g, IR_OP_NEG, w);
    char err[300];
    size_t need = exec_ref_bytes(g);
    CHECK(need == 8000000);
    CHECK(exec_ref_new(g, 1000000, err, sizeof err) == NULL);
    CHECKF(strstr(err, "8000000") != NULL, "%s", err);
    exec_ref *r = exec_ref_new(g, need, err, sizeof err);
    CHECK(r != NULL);
    exec_ref_free(r);
    ir_free(g);

    /* gather with a bad id: the run fails naming the op and the id */
    g = ir_new("emb");
    int table = ir_arg(g, "table", IR_PARAM, IR_F32, 2, dt);
    int ids = ir_arg(g, "ids", IR_INPUT, IR_I32, 1, di);
    int e = ir_gather(g, table, ids);
    ir_rename(g, e, "emb");
    CHECK(ir_error(g) == NULL);
    r = exec_ref_new(g, 0, err, sizeof err);
    exec_ref_init_args(r, 1);
    CHECK(exec_ref_run(r, err, sizeof err) == 0); /* AUTO ids are in [0,2) */
    ((int32_t *)exec_ref_data(r, ids))[2] = 9;
    CHECK(exec_ref_run(r, err, sizeof err) == -1);
    CHECKF(strstr(err, "gather") && strstr(err, "'emb'") && strstr(err, "id 9"), "%s", err);
    CHECK(isnan(exec_ref_loss(r)));
    exec_ref_free(r);
    ir_free(g);
}

static void test_apply_updates(void)
{
    ir_graph *g = ir_new("upd");
    int64_t d[1] = {5};
    int w = ir_arg(g, "w", IR_PARAM, IR_F32, 1, d);
    int c = ir_arg(g, "count", IR_OPT_STATE, IR_F32, 1, d);
    int w2 = ir_scale(g, w, 0.5);
    int c2 = ir_add_scalar(g, c, 1.0);
    ir_add_output(g, w2, w);
    ir_add_output(g, c2, c);
    CHECK(ir_error(g) == NULL);
    char err[200];
    exec_ref *r = exec_ref_new(g, 0, err, sizeof err);
    exec_ref_init_args(r, 3);
    float w0[5];
    memcpy(w0, exec_ref_data(r, w), sizeof w0);
    for (int step = 0; step < 2; step++) {
        CHECK(exec_ref_run(r, err, sizeof err) == 0);
        exec_ref_apply_updates(r);
    }
    const float *wp = exec_ref_data(r, w), *cp = exec_ref_data(r, c);
    int ok = 1;
    for (int i = 0; i < 5; i++) ok &= wp[i] == 0.25f * w0[i] && cp[i] == 2.0f;
    CHECK(ok);
    CHECK(w0[0] != 0);
    exec_ref_free(r);
    ir_free(g);
}

/* Linear regression y = x w_true, trained by hand-written SGD:
 *   loss = sum((x w - y)^2) / N,  grad = (2/N) x^T (x w - y),  w -= lr grad. */
static void test_sgd_linear_regression(void)
{
    enum { N = 32, D = 4 };
    ir_graph *g = ir_new("linreg");
    int64_t dx[2] = {N, D}, dw[2] = {D, 1};
    int x = ir_arg(g, "x", IR_INPUT, IR_F32, 2, dx);
    int wt = ir_arg(g, "w_true", IR_INPUT, IR_F32, 2, dw);
    int w = ir_arg(g, "w", IR_PARAM, IR_F32, 2, dw);
    ir_set_init(g, x, IR_INIT_NORMAL, 1.0);
    ir_set_init(g, wt, IR_INIT_NORMAL, 1.0);
    ir_set_init(g, w, IR_INIT_ZEROS, 0);
    int y = ir_einsum(g, "nd,do->no", x, wt);
    int pred = ir_einsum(g, "nd,do->no", x, w);
    int diff = ir_binary(g, IR_OP_SUB, pred, y);
    int64_t all[2] = {0, 1};
    int sq = ir_binary(g, IR_OP_MUL, diff, diff);
    int loss = ir_scale(g, ir_reduce(g, IR_OP_REDUCE_SUM, sq, 2, all), 1.0 / N);
    int grad = ir_scale(g, ir_einsum(g, "nd,no->do", x, diff), 2.0 / N);
    int w_new = ir_binary(g, IR_OP_SUB, w, ir_scale(g, grad, 0.1));
    ir_set_loss(g, loss);
    ir_add_output(g, w_new, w);
    char err[300];
    CHECKF(ir_error(g) == NULL && ir_verify(g, err, sizeof err) == 0, "%s", ir_error(g) ? ir_error(g) : err);
    exec_ref *r = exec_ref_new(g, 0, err, sizeof err);
    exec_ref_init_args(r, 42);
    /* step 0 has w = 0, so the loss is mean((x w_true)^2), computed here in double */
    const float *xp = exec_ref_data(r, x), *wtp = exec_ref_data(r, wt);
    double want0 = 0;
    for (int i = 0; i < N; i++) {
        double t = 0;
        for (int j = 0; j < D; j++) t += (double)xp[i * D + j] * wtp[j];
        want0 += t * t / N;
    }
    double losses[8];
    for (int step = 0; step < 8; step++) {
        CHECK(exec_ref_run(r, err, sizeof err) == 0);
        losses[step] = exec_ref_loss(r);
        exec_ref_apply_updates(r);
    }
    /* float loss of 32 terms vs double: relative error ~1e-6 */
    CHECKF(fabs(losses[0] - want0) <= 1e-5 * want0, "loss %g want %g", losses[0], want0);
    CHECK(losses[0] > 0.1);
    int down = 1;
    for (int s = 1; s < 8; s++) down &= losses[s] < losses[s - 1];
    CHECKF(down, "losses %g %g ... %g", losses[0], losses[1], losses[7]);
    CHECKF(losses[7] < 0.2 * losses[0], "loss %g -> %g", losses[0], losses[7]);
    exec_ref_free(r);
    ir_free(g);
}

static void test_blis_arch(void)
{
    int user_set = getenv("BLIS_ARCH_TYPE") != NULL;
    exec_blis_setup();
    const char *arch = exec_blis_arch();
    CHECK(arch && arch[0]);
    if (!user_set && __builtin_cpu_supports("avx512f")) CHECKF(strcmp(arch, "skx") == 0, "arch %s", arch);
}

/* ---- fused elementwise groups (fuse.h) -------------------------------- */

static spmd_fuse_item fitem(ir_opkind k, float s, int a, int b, int out, int64_t numel)
{
    spmd_fuse_item x = {.fusible = 1, .kind = k, .scalar = s, .n_in = b >= 0 ? 2 : 1, .in = {a, b}, .out = out,
                        .numel = numel};
    return x;
}

/* Planning: where groups start and end, which results stay in tiles. */
static void test_fuse_plan(void)
{
    /* ids: 0 x, 1 a, 2 b, 3 y, 4 c, 5 e, 6 d */
    spmd_fuse_item it[5] = {
        fitem(IR_OP_SCALE, 2, 0, -1, 1, 100),   /* a = 2x */
        fitem(IR_OP_MUL, 0, 1, 1, 2, 100),      /* b = a a */
        fitem(IR_OP_ADD, 0, 2, 3, 4, 100),      /* c = b + y */
        {.fusible = 0, .n_in = 1, .in = {1}, .out = 5, .numel = 7}, /* something else reads a */
        fitem(IR_OP_NEG, 0, 4, -1, 6, 50),      /* another element count: not in the group */
    };
    spmd_fuse_plan pl = {0};
    CHECK(spmd_fuse_plan_build(&pl, it, 5, 7, NULL, 1) == 0);
    CHECK(pl.len[0] == 3 && pl.len[1] == 0 && pl.len[2] == 0 && pl.len[3] == 1 && pl.len[4] == 1);
    CHECK(pl.n_groups == 1 && pl.n_fused == 3);
    CHECK(pl.step[0].slot < 0);                          /* a: read after the group */
    CHECK(pl.step[1].slot >= 0 && pl.step[1].src[0] == 0 && pl.step[1].src[1] == 0); /* b: only in the group */
    CHECK(pl.step[2].slot < 0 && pl.step[2].src[0] == 1 && pl.step[2].src[1] == -1); /* c: read by d */
    spmd_fuse_plan_free(&pl);
    uint8_t observed[7] = {0, 0, 1, 0, 0, 0, 0}; /* the caller reads b */
    CHECK(spmd_fuse_plan_build(&pl, it, 5, 7, observed, 1) == 0);
    CHECK(pl.len[0] == 3 && pl.step[1].slot < 0);
    spmd_fuse_plan_free(&pl);

    /* 14 values live at once need 14 tiles: the group is cut where the tiles
     * run out, and the values read after the cut are written */
    enum { K = 14, N = 1000 };
    spmd_fuse_item ch[2 * K];
    int n = 0;
    for (int k = 0; k < K; k++) ch[n++] = fitem(IR_OP_SCALE, (float)(k + 1), 0, -1, 1 + k, N); /* t_k = (k+1) x */
    ch[n++] = fitem(IR_OP_ADD, 0, 1, 2, 1 + K, N);                                             /* s_1 = t_0 + t_1 */
    for (int k = 2; k < K; k++) ch[n++] = fitem(IR_OP_ADD, 0, K + k - 1, 1 + k, K + k, N);      /* s_k = s_k-1 + t_k */
    CHECK(spmd_fuse_plan_build(&pl, ch, n, 2 * K + 1, NULL, 1) == 0);
    int max_slot = -1, covered = 0;
    for (int i = 0; i < n; i++) {
        if (pl.step[i].slot > max_slot) max_slot = pl.step[i].slot;
        covered += pl.len[i];
    }
    CHECKF(pl.len[0] == FUSE_MAX_SLOTS, "first group %d long", pl.len[0]);
    CHECK(max_slot < FUSE_MAX_SLOTS && covered == n);
    /* run it group by group, fused, against op by op: the same bits */
    float *buf[2 * K + 1], *want[2 * K + 1];
    for (int v = 0; v <= 2 * K; v++) {
        buf[v] = calloc(N, sizeof(float));
        want[v] = calloc(N, sizeof(float));
    }
    for (int i = 0; i < N; i++) buf[0][i] = want[0][i] = (float)(i % 37) * 0.37f - 3.1f;
    for (int i = 0; i < n; i++)
        exec_elementwise(ch[i].kind, ch[i].scalar, want[ch[i].in[0]], ch[i].n_in > 1 ? want[ch[i].in[1]] : NULL,
                         want[ch[i].out], N);
    for (int i = 0; i < n; i += pl.len[i]) {
        const float *in[2 * FUSE_MAX_GROUP];
        float *out[FUSE_MAX_GROUP];
        for (int m = 0; m < pl.len[i]; m++) {
            in[2 * m] = buf[ch[i + m].in[0]];
            in[2 * m + 1] = ch[i + m].n_in > 1 ? buf[ch[i + m].in[1]] : NULL;
            out[m] = buf[ch[i + m].out];
        }
        exec_fuse_run(&pl.step[i], pl.len[i], N, in, out);
    }
    CHECK(memcmp(buf[2 * K], want[2 * K], N * sizeof(float)) == 0);
    for (int v = 0; v <= 2 * K; v++) {
        free(buf[v]);
        free(want[v]);
    }
    spmd_fuse_plan_free(&pl);

    /* a chain of 40 where each value feeds only the next: two tiles do */
    spmd_fuse_item chain[40];
    for (int k = 0; k < 40; k++) chain[k] = fitem(k % 2 ? IR_OP_EXP : IR_OP_SCALE, 0.5f, k, -1, k + 1, N);
    CHECK(spmd_fuse_plan_build(&pl, chain, 40, 41, NULL, 1) == 0);
    max_slot = -1;
    for (int k = 0; k < 39; k++)
        if (pl.step[k].slot > max_slot) max_slot = pl.step[k].slot;
    CHECK(pl.len[0] == 40 && pl.n_groups == 1 && max_slot == 1 && pl.step[39].slot < 0);
    spmd_fuse_plan_free(&pl);

    /* what may join: float elementwise of one count, and broadcasts of one element */
    int splat;
    ir_dtype f2[2] = {IR_F32, IR_F32}, i1[1] = {IR_I32};
    CHECK(spmd_fuse_fusible(IR_OP_DIV, 2, f2, (int64_t[]){9, 9}, IR_F32, 9, &splat) == 1 && !splat);
    CHECK(spmd_fuse_fusible(IR_OP_BROADCAST, 1, f2, (int64_t[]){1}, IR_F32, 9, &splat) == 1 && splat);
    CHECK(spmd_fuse_fusible(IR_OP_BROADCAST, 1, f2, (int64_t[]){3}, IR_F32, 9, &splat) == 0);
    CHECK(spmd_fuse_fusible(IR_OP_ADD, 2, f2, (int64_t[]){1, 9}, IR_F32, 9, &splat) == 0);
    CHECK(spmd_fuse_fusible(IR_OP_NEG, 1, i1, (int64_t[]){9}, IR_I32, 9, &splat) == 0);
    CHECK(spmd_fuse_fusible(IR_OP_EINSUM, 2, f2, (int64_t[]){9, 9}, IR_F32, 9, &splat) == 0);
}

/* Whole training steps with and without fusion (CARVE_FUSE=0): the outputs
 * and gradients agree bit for bit, over steps, and fusion happened. */
static void test_fuse_reference(void)
{
    const char *specs[] = {"gpt-tiny", "mlp:batch=3,hidden=37,layers=3"};
    for (int c = 0; c < 2; c++) {
        char err[300];
        model_config cfg;
        CHECKF(model_parse(specs[c], &cfg, err, sizeof err) == 0, "%s", err);
        ir_graph *g = model_build_step(&cfg, NULL, err, sizeof err);
        CHECKF(g != NULL, "%s", err);
        if (!g) continue;
        setenv("CARVE_FUSE", "0", 1);
        exec_ref *plain = exec_ref_new(g, 0, err, sizeof err);
        unsetenv("CARVE_FUSE");
        exec_ref *fused = exec_ref_new(g, 0, err, sizeof err);
        int groups, ops, groups0, ops0;
        exec_ref_fusion(fused, &groups, &ops);
        exec_ref_fusion(plain, &groups0, &ops0);
        CHECKF(groups > 0 && ops > 2 * groups && groups0 == 0 && ops0 == 0, "%s: %d groups, %d ops", specs[c], groups, ops);
        exec_ref_init_args(plain, 5);
        exec_ref_init_args(fused, 5);
        int same = 1;
        for (int step = 0; step < 3; step++) {
            int rc_plain = exec_ref_run(plain, err, sizeof err), rc_fused = exec_ref_run(fused, err, sizeof err);
            CHECKF(rc_plain == 0 && rc_fused == 0, "%s step %d: %s", specs[c], step, err);
            for (int v = 0; v < g->n_values; v++) {
                int seen = g->values[v].grad_of >= 0 || v == g->loss;
                for (int i = 0; i < g->n_outputs; i++) seen |= g->outputs[i].value == v;
                if (seen && memcmp(exec_ref_data(plain, v), exec_ref_data(fused, v), (size_t)ir_numel(&g->values[v]) * 4)) {
                    fprintf(stderr, "%s step %d: '%s' differs\n", specs[c], step, g->values[v].name);
                    same = 0;
                }
            }
            exec_ref_apply_updates(plain);
            exec_ref_apply_updates(fused);
        }
        CHECKF(same, "%s: fused and op-by-op runs differ", specs[c]);
        exec_ref_free(plain);
        exec_ref_free(fused);
        ir_free(g);
    }
}

/* ---- memory available to a run (exec/sysmem.c), on fake /proc and /sys trees ---- */

static void put(const char *root, const char *rel, const char *text)
{
    char path[512], cmd[600];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
    if (system(cmd) != 0) return;
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_memory_available(void)
{
    char root[64], why[2400], cmd[128];
    snprintf(root, sizeof root, "/tmp/carve-test-sysmem-%d", (int)getpid());
    const char *mi = "MemTotal: 16000000 kB\nMemAvailable:    8000000 kB\n";
    /* no cgroup limit: MemAvailable */
    put(root, "proc/meminfo", mi);
    put(root, "proc/self/cgroup", "0::/\n");
    put(root, "sys/fs/cgroup/memory.max", "max\n");
    CHECK(exec_memory_available_at(root, why, sizeof why) == 8000000ull * 1024 && strstr(why, "machine"));
    /* v2: a 1 GiB limit on an ancestor binds, minus usage, plus inactive file pages */
    put(root, "proc/self/cgroup", "0::/ci/job\n");
    put(root, "sys/fs/cgroup/ci/memory.max", "1073741824\n");
    put(root, "sys/fs/cgroup/ci/memory.current", "536870912\n");
    put(root, "sys/fs/cgroup/ci/memory.stat", "anon 1\ninactive_file 134217728\nactive_file 5\n");
    put(root, "sys/fs/cgroup/ci/job/memory.max", "max\n");
    size_t a = exec_memory_available_at(root, why, sizeof why);
    CHECKF(a == 1073741824ull - 536870912ull + 134217728ull && strstr(why, "cgroup v2") && strstr(why, "/ci"), "%zu %s", a, why);
    /* v1 (hybrid: v2 at unified without memory files): the container's own cgroup is the root */
    snprintf(cmd, sizeof cmd, "rm -rf %s/sys", root);
    CHECK(system(cmd) == 0);
    put(root, "proc/self/cgroup", "5:cpu,cpuacct:/x\n4:memory:/process_api/abc\n0::/\n");
    put(root, "sys/fs/cgroup/unified/cgroup.controllers", "\n");
    put(root, "sys/fs/cgroup/memory/memory.limit_in_bytes", "209715200\n");
    put(root, "sys/fs/cgroup/memory/memory.usage_in_bytes", "10485760\n");
    put(root, "sys/fs/cgroup/memory/memory.stat", "inactive_file 1\ntotal_inactive_file 0\n");
    a = exec_memory_available_at(root, why, sizeof why);
    CHECKF(a == 209715200ull - 10485760ull && strstr(why, "cgroup v1"), "%zu %s", a, why);
    /* v1 without a limit (the kernel's 2^63 - 4096): MemAvailable again */
    put(root, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    CHECK(exec_memory_available_at(root, why, sizeof why) == 8000000ull * 1024);
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    test_memory_available();
    test_blis_arch();
    test_einsum_layouts();
    test_unary_binary();
    test_vector_math();
    test_movement();
    test_reduce();
    test_indexing();
    test_fill();
    test_ref_limits_and_errors();
    test_apply_updates();
    test_sgd_linear_regression();
    test_fuse_plan();
    test_fuse_reference();
    return test_done();
}
