/* bench_einsum.c - GFLOP/s of the reference einsum kernel on GPT-125M-sized
 * matmuls, against one plain single-thread bli_sgemm_ex of the same m, n, k
 * on dense row-major operands (the rate BLIS itself reaches here).
 *
 * Prints one markdown section (bench/run.sh collects it into BENCHMARKS.md).
 * Each figure is the median of REPEATS timed runs after one warm-up run.
 * Never passes or fails on a time.  Checks: 64 elements of each einsum's
 * result, spread over it, against the same sums done one product at a time
 * (in double).  `--smoke`: the same einsums at sizes of a few dozen.
 */
#include "bench/bench_util.h"
#include "exec/exec.h"
#include "exec/kernels.h"
#include "ir/pcg32.h"

#include <blis.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPEATS 5

static float *random_floats(int64_t n, uint64_t seed)
{
    float *x = malloc((size_t)n * sizeof *x);
    if (!x) {
        fprintf(stderr, "bench_einsum: out of memory\n");
        exit(1);
    }
    pcg32 r;
    pcg32_seed(&r, seed, 1);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(pcg32_double(&r) - 0.5);
    return x;
}

typedef struct {
    const char *what;
    const char *subs;
    const char *letters;      /* letter names for the sizes below */
    int64_t sizes[8];
} bench_case;

static int64_t dims_of(const char *list, int rank, const bench_case *c, int64_t *dims)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        dims[i] = c->sizes[strchr(c->letters, list[i]) - c->letters];
        n *= dims[i];
    }
    return n;
}

/* Dense row-major operands for `batches` plain sgemm calls of m x n x k. */
typedef struct {
    int64_t batches, m, n, k;
    float *a, *b, *c;
} sgemm_case;

static double time_sgemm(const sgemm_case *g)
{
    rntm_t rntm = BLIS_RNTM_INITIALIZER;
    bli_rntm_set_num_threads(1, &rntm);
    float one = 1, zero = 0;
    int64_t m = g->m, n = g->n, k = g->k;
    double t0 = bench_now();
    for (int64_t i = 0; i < g->batches; i++)
        bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, n, k, &one, g->a + i * m * k, k, 1, g->b + i * k * n, n, 1,
                     &zero, g->c + i * m * n, n, 1, NULL, &rntm);
    return bench_now() - t0;
}

/* out[p] against the sum written out, for 64 positions p spread over the
 * result: the largest error relative to the sum of |products|. */
static double sampled_error(const ir_einsum_spec *e, const bench_case *c, const float *a, const int64_t *da, const float *b,
                            const int64_t *db, const float *out, const int64_t *dc, int64_t nc)
{
    char letters[2 * IR_MAX_RANK];
    int nl = 0;
    for (int i = 0; i < e->rank_a + e->rank_b; i++) { /* the contracted letters */
        char l = i < e->rank_a ? e->a[i] : e->b[i - e->rank_a];
        if (ir_einsum_pos(e->out, e->rank_out, l) < 0 && !memchr(letters, l, (size_t)nl)) letters[nl++] = l;
    }
    double worst = 0;
    for (int s = 0; s < 64; s++) {
        int64_t p = (int64_t)((double)s / 64 * (double)nc), rest = p, at[128] = {0};
        for (int i = e->rank_out - 1; i >= 0; i--) { /* the output letters' indices */
            at[(unsigned char)e->out[i]] = rest % dc[i];
            rest /= dc[i];
        }
        int64_t combos = 1;
        for (int i = 0; i < nl; i++) combos *= c->sizes[strchr(c->letters, letters[i]) - c->letters];
        double sum = 0, mag = 0;
        for (int64_t k = 0; k < combos; k++) {
            int64_t r = k;
            for (int i = nl - 1; i >= 0; i--) {
                int64_t n = c->sizes[strchr(c->letters, letters[i]) - c->letters];
                at[(unsigned char)letters[i]] = r % n;
                r /= n;
            }
            int64_t ia = 0, ib = 0;
            for (int i = 0; i < e->rank_a; i++) ia = ia * da[i] + at[(unsigned char)e->a[i]];
            for (int i = 0; i < e->rank_b; i++) ib = ib * db[i] + at[(unsigned char)e->b[i]];
            sum += (double)a[ia] * (double)b[ib];
            mag += fabs((double)a[ia] * (double)b[ib]);
        }
        double err = fabs((double)out[p] - sum) / (mag > 0 ? mag : 1);
        if (err > worst) worst = err;
    }
    return worst;
}

static void run_case(const bench_case *c)
{
    ir_einsum_spec e;
    char err[200];
    if (ir_einsum_parse(c->subs, -1, -1, &e, err, sizeof err) < 0) {
        printf("| %s | `%s` | error: %s | | | | |\n", c->what, c->subs, err);
        bench_check(0, "%s `%s`: %s", c->what, c->subs, err);
        return;
    }
    int64_t da[IR_MAX_RANK], db[IR_MAX_RANK], dc[IR_MAX_RANK];
    int64_t na = dims_of(e.a, e.rank_a, c, da), nb = dims_of(e.b, e.rank_b, c, db), nc = dims_of(e.out, e.rank_out, c, dc);
    /* GEMM sizes: product of m letters (a, out), n (b, out), k (a, b), batch (all). */
    int64_t m = 1, n = 1, k = 1, batch = 1;
    for (int i = 0; i < e.rank_a; i++) {
        int in_b = ir_einsum_pos(e.b, e.rank_b, e.a[i]) >= 0, in_c = ir_einsum_pos(e.out, e.rank_out, e.a[i]) >= 0;
        if (in_b && in_c) batch *= da[i];
        else if (in_c) m *= da[i];
        else k *= da[i];
    }
    for (int i = 0; i < e.rank_b; i++)
        if (ir_einsum_pos(e.a, e.rank_a, e.b[i]) < 0) n *= db[i];
    float *a = random_floats(na, 3), *b = random_floats(nb, 4), *out = malloc((size_t)nc * sizeof *out);
    sgemm_case g = {batch, m, n, k, random_floats(batch * m * k, 1), random_floats(batch * k * n, 2), NULL};
    g.c = malloc((size_t)(batch * m * n) * sizeof *g.c);
    if (!out || !g.c) {
        fprintf(stderr, "bench_einsum: out of memory\n");
        exit(1);
    }
    /* Alternate the two so both see the same machine load (it is shared). */
    double te_runs[REPEATS + 1], ts_runs[REPEATS + 1];
    for (int r = 0; r <= REPEATS; r++) {
        double t0 = bench_now();
        exec_einsum_f32(&e, da, a, db, b, dc, out);
        te_runs[r] = bench_now() - t0;
        ts_runs[r] = time_sgemm(&g);
    }
    double te = bench_median(te_runs + 1, REPEATS), ts = bench_median(ts_runs + 1, REPEATS);
    double worst = sampled_error(&e, c, a, da, b, db, out, dc, nc);
    bench_check(worst < 1e-5, "%s `%s`: 64 result elements within 1e-5 of their sums written out (worst %.1e)", c->what, c->subs,
                worst);
    free(a);
    free(b);
    free(out);
    free(g.a);
    free(g.b);
    free(g.c);
    double flops = 2.0 * (double)batch * (double)m * (double)n * (double)k;
    printf("| %s | `%s` | %lld x %lld x %lld | %lld | %lld | %.1f | %.1f | %.2f |\n", c->what, c->subs, (long long)m,
           (long long)n, (long long)k, (long long)batch, (long long)exec_einsum_copies(&e, da, db, dc),
           flops / te * 1e-9, flops / ts * 1e-9, ts / te);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    bench_parse_smoke(argc, argv);
    exec_blis_setup();
    /* GPT-125M: hidden 768, MLP 3072, 12 heads of 64, sequence 1024; a batch
     * of 2 sequences keeps each run well under a second. */
    static const bench_case cases[] = {
        {"MLP up, forward", "bsh,hf->bsf", "bshf", {2, 1024, 768, 3072}},
        {"MLP up, grad of input", "bsf,hf->bsh", "bshf", {2, 1024, 768, 3072}},
        {"MLP up, grad of weight", "bsh,bsf->hf", "bshf", {2, 1024, 768, 3072}},
        {"QKV head projection", "bsh,hnd->bsnd", "bshnd", {2, 1024, 768, 12, 64}},
        {"attention output projection", "bsnd,ndh->bsh", "bshnd", {2, 1024, 768, 12, 64}},
        {"attention scores", "bsnd,btnd->bnst", "bsndt", {1, 1024, 12, 64, 1024}},
        {"attention context", "bnst,btnd->bsnd", "bsndt", {1, 1024, 12, 64, 1024}},
        {"LM head (vocab 50304)", "bsh,vh->bsv", "bshv", {1, 512, 768, 50304}},
        /* not a GPT layout: rows (b,s) ordered differently in a and out, so
         * one operand goes through a temporary; shows what a copy costs */
        {"permuted rows (copies)", "bsh,hf->sbf", "bshf", {2, 1024, 768, 3072}},
    };
    const char *env = getenv("BLIS_ARCH_TYPE");
    printf("## einsum kernel vs single-thread sgemm\n\n");
    printf("`exec_einsum_f32` (one thread, strided `bli_sgemm_ex`, one call per batch index) against plain\n"
           "`bli_sgemm_ex` calls of the same m x n x k on dense row-major operands, one thread.\n"
           "BLIS kernels: **%s** (BLIS_ARCH_TYPE=%s). Median of %d runs after a warm-up; einsum and sgemm runs alternate.\n"
           "\"copied\" = elements the kernel copies into temporaries (0: strides only).\n\n",
           exec_blis_arch(), env ? env : "unset", REPEATS);
    printf("| case | einsum | m x n x k | batch | copied | einsum GFLOP/s | sgemm GFLOP/s | ratio |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bench_case c = cases[i];
        if (bench_is_smoke()) /* sizes of a few dozen: each letter's size over 32, at least 2 */
            for (int k = 0; k < 8; k++) c.sizes[k] = c.sizes[k] > 64 ? c.sizes[k] / 32 : c.sizes[k] > 2 ? 2 : c.sizes[k];
        run_case(&c);
    }
    printf("\nTarget: ratio >= 0.70 on the GPT-125M-sized matmuls (every row but the last).\n");
    return bench_finish(0);
}
