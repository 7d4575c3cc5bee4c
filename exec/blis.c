/* blis.c - BLIS setup and the einsum kernel.
 *
 * An einsum "bsh,hf->bsf" is a batched GEMM: every letter is a batch letter
 * (in a, b and out), a row letter m (a and out), a column letter n (b and
 * out) or a contracted letter k (a and b).  The kernel plans, for one call:
 *   - an order for the letters of each group (m, n, k).  A group fuses into a
 *     single GEMM dimension with a single stride in an operand when, in that
 *     operand, each letter's stride is the next letter's stride times the next
 *     letter's size (adjacent and in the same order; size-1 letters are
 *     dropped first).  Each group's order is taken from one of the two
 *     operands holding it; of the 8 combinations the one copying the fewest
 *     elements wins;
 *   - an operand that cannot be described by strides is copied into a dense
 *     temporary laid out as [batch, rows, cols] (the output is computed into
 *     such a temporary and then scattered into place);
 *   - one bli_sgemm_ex call per batch index, with row and column strides and
 *     a runtime object asking for one thread.
 * So the common layouts (matmul, its two backward forms, attention scores and
 * context, head projections) run without any copy.
 */
#include "exec/exec.h"
#include "exec/kernels.h"

#include <blis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- BLIS setup --------------------------------------------------------- */

static pthread_once_t blis_once = PTHREAD_ONCE_INIT;

/* 1 when `s` is the number of a kernel set this BLIS was built with.  BLIS
 * 0.9.0 aborts the process on any other BLIS_ARCH_TYPE value. */
static int arch_env_valid(const char *s)
{
    static const int built[] = {
#ifdef BLIS_CONFIG_SKX
        BLIS_ARCH_SKX,
#endif
#ifdef BLIS_CONFIG_KNL
        BLIS_ARCH_KNL,
#endif
#ifdef BLIS_CONFIG_HASWELL
        BLIS_ARCH_HASWELL,
#endif
#ifdef BLIS_CONFIG_SANDYBRIDGE
        BLIS_ARCH_SANDYBRIDGE,
#endif
#ifdef BLIS_CONFIG_PENRYN
        BLIS_ARCH_PENRYN,
#endif
#ifdef BLIS_CONFIG_ZEN3
        BLIS_ARCH_ZEN3,
#endif
#ifdef BLIS_CONFIG_ZEN2
        BLIS_ARCH_ZEN2,
#endif
#ifdef BLIS_CONFIG_ZEN
        BLIS_ARCH_ZEN,
#endif
#ifdef BLIS_CONFIG_EXCAVATOR
        BLIS_ARCH_EXCAVATOR,
#endif
#ifdef BLIS_CONFIG_STEAMROLLER
        BLIS_ARCH_STEAMROLLER,
#endif
#ifdef BLIS_CONFIG_PILEDRIVER
        BLIS_ARCH_PILEDRIVER,
#endif
#ifdef BLIS_CONFIG_BULLDOZER
        BLIS_ARCH_BULLDOZER,
#endif
        BLIS_ARCH_GENERIC,
    };
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end) return 0;
    for (size_t i = 0; i < sizeof built / sizeof built[0]; i++)
        if (v == built[i]) return 1;
    return 0;
}

static void blis_setup_once(void)
{
    const char *user = getenv("BLIS_ARCH_TYPE");
    if (user && !arch_env_valid(user)) {
        fprintf(stderr, "carve: ignoring BLIS_ARCH_TYPE=%s (not a kernel set of this BLIS build); choosing kernels automatically\n", user);
        unsetenv("BLIS_ARCH_TYPE");
        user = NULL;
    }
    /* BLIS_ARCH_TYPE=0 selects the skx (AVX-512) kernels in BLIS 0.9.0; on
     * virtual machines BLIS cannot identify the CPU and otherwise falls back
     * to its generic kernels (about 5x slower here). */
    if (!user && __builtin_cpu_supports("avx512f")) setenv("BLIS_ARCH_TYPE", "0", 0);
    /* BLIS 0.9.0 aborts in bli_arch_query_id when BLIS_ARCH_TYPE is set and
     * the kernel table is not initialised yet, so initialise it here. */
    bli_init();
}

void exec_blis_setup(void) { pthread_once(&blis_once, blis_setup_once); }

const char *exec_blis_arch(void)
{
    exec_blis_setup();
    return bli_arch_string(bli_arch_query_id());
}

/* ---- strided copies ----------------------------------------------------- */

int64_t exec_row_major_strides(int rank, const int64_t *dims, int64_t *strides)
{
    int64_t n = 1;
    for (int d = rank - 1; d >= 0; d--) {
        strides[d] = n;
        n *= dims[d];
    }
    return n;
}

void exec_copy_strided32(int rank, const int64_t *dims, const void *src, const int64_t *src_strides, void *dst)
{
    const uint32_t *s = src;
    uint32_t *o = dst;
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= dims[d];
    if (n == 0) return;
    if (rank == 0) {
        o[0] = s[0];
        return;
    }
    int64_t inner = dims[rank - 1], is = src_strides[rank - 1];
    int64_t idx[IR_MAX_RANK] = {0}, off = 0;
    for (int64_t done = 0; done < n; done += inner) {
        if (is == 1) memcpy(o, s + off, (size_t)inner * sizeof *o);
        else if (is == 0) {
            uint32_t v = s[off];
#pragma omp simd
            for (int64_t i = 0; i < inner; i++) o[i] = v;
        } else
            for (int64_t i = 0; i < inner; i++) o[i] = s[off + i * is];
        o += inner;
        /* odometer over the outer dims */
        for (int d = rank - 2; d >= 0; d--) {
            off += src_strides[d];
            if (++idx[d] < dims[d]) break;
            off -= src_strides[d] * dims[d];
            idx[d] = 0;
        }
    }
}

/* ---- einsum planning ---------------------------------------------------- */

enum { OP_A, OP_B, OP_C };
enum { G_M, G_N, G_K };

typedef struct {
    int n;                      /* letters in the group, size-1 letters dropped */
    char l[IR_MAX_RANK];
} group;

typedef struct {
    const char *letters[3];
    int rank[3];
    const int64_t *dims[3];
    int64_t strides[3][IR_MAX_RANK]; /* row-major strides of each operand */
    int64_t numel[3];
} operands;

static int letter_pos(const operands *o, int x, char c) { return ir_einsum_pos(o->letters[x], o->rank[x], c); }

static int64_t letter_size(const operands *o, char c)
{
    for (int x = 0; x < 3; x++) {
        int p = letter_pos(o, x, c);
        if (p >= 0) return o->dims[x][p];
    }
    return 1;
}

/* The group's letters (size > 1) in the order they appear in operand x. */
static group group_in(const operands *o, int x, const char *members, int n_members)
{
    group g = {0};
    for (int i = 0; i < o->rank[x]; i++) {
        char c = o->letters[x][i];
        if (o->dims[x][i] > 1 && memchr(members, c, (size_t)n_members)) g.l[g.n++] = c;
    }
    return g;
}

/* 1 when group g, in its order, is one stride in operand x. */
static int fuses(const operands *o, int x, const group *g)
{
    for (int i = 0; i + 1 < g->n; i++) {
        int p = letter_pos(o, x, g->l[i]), q = letter_pos(o, x, g->l[i + 1]);
        if (o->strides[x][p] != o->strides[x][q] * o->dims[x][q]) return 0;
    }
    return 1;
}

static int64_t group_size(const operands *o, const group *g)
{
    int64_t n = 1;
    for (int i = 0; i < g->n; i++) n *= letter_size(o, g->l[i]);
    return n;
}

/* Strides of every letter in the layout an operand is used in: its own, or a
 * dense [batch, g1, g2] temporary. */
typedef struct {
    char l[IR_MAX_RANK];
    int64_t s[IR_MAX_RANK];
    int n;
} layout;

static int64_t layout_stride(const layout *L, char c)
{
    for (int i = 0; i < L->n; i++)
        if (L->l[i] == c) return L->s[i];
    return 0;
}

static layout own_layout(const operands *o, int x)
{
    layout L = {.n = o->rank[x]};
    for (int i = 0; i < L.n; i++) {
        L.l[i] = o->letters[x][i];
        L.s[i] = o->strides[x][i];
    }
    return L;
}

static layout dense_layout(const operands *o, const group *batch, const group *g1, const group *g2)
{
    layout L = {0};
    const group *gs[3] = {batch, g1, g2};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < gs[k]->n; i++) L.l[L.n++] = gs[k]->l[i];
    int64_t s = 1;
    for (int i = L.n - 1; i >= 0; i--) {
        L.s[i] = s;
        s *= letter_size(o, L.l[i]);
    }
    return L;
}

/* Strides for a GEMM operand of rows x cols; a dimension of size 1 has no
 * letter and gets a stride that keeps BLIS's layout checks happy. */
static void gemm_strides(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t *out_rs, int64_t *out_cs)
{
    if (rows == 1 && cols == 1) rs = cs = 1;
    else if (rows == 1) rs = cs == 1 ? cols : 1;
    else if (cols == 1) cs = rs == 1 ? rows : 1;
    *out_rs = rs;
    *out_cs = cs;
}

static void *xmalloc_floats(int64_t n) { return malloc((size_t)(n > 0 ? n : 1) * sizeof(float)); }

/* The plan of one einsum call: group orders and which operands are copied. */
typedef struct {
    operands o;
    group batch, gm, gn, gk;
    int copy[3];
} einsum_plan;

static void plan_einsum(const ir_einsum_spec *e, const int64_t *dims_a, const int64_t *dims_b, const int64_t *dims_c,
                        einsum_plan *p)
{
    memset(p, 0, sizeof *p);
    operands *o = &p->o;
    o->letters[OP_A] = e->a;
    o->letters[OP_B] = e->b;
    o->letters[OP_C] = e->out;
    o->rank[OP_A] = e->rank_a;
    o->rank[OP_B] = e->rank_b;
    o->rank[OP_C] = e->rank_out;
    o->dims[OP_A] = dims_a;
    o->dims[OP_B] = dims_b;
    o->dims[OP_C] = dims_c;
    for (int x = 0; x < 3; x++) o->numel[x] = exec_row_major_strides(o->rank[x], o->dims[x], o->strides[x]);

    /* Classify letters. */
    char mem[3][IR_MAX_RANK], bat[IR_MAX_RANK];
    int n_mem[3] = {0}, n_bat = 0;
    for (int i = 0; i < e->rank_a; i++) {
        char ch = e->a[i];
        int in_b = letter_pos(o, OP_B, ch) >= 0, in_c = letter_pos(o, OP_C, ch) >= 0;
        if (in_b && in_c) bat[n_bat++] = ch;
        else if (in_c) mem[G_M][n_mem[G_M]++] = ch;
        else mem[G_K][n_mem[G_K]++] = ch;
    }
    for (int i = 0; i < e->rank_b; i++)
        if (letter_pos(o, OP_A, e->b[i]) < 0) mem[G_N][n_mem[G_N]++] = e->b[i];
    p->batch = group_in(o, OP_C, bat, n_bat);

    /* Candidate orders: each group from either operand holding it. */
    static const int holders[3][2] = {{OP_A, OP_C}, {OP_B, OP_C}, {OP_A, OP_B}};
    group cand[3][2];
    for (int g = 0; g < 3; g++)
        for (int h = 0; h < 2; h++) cand[g][h] = group_in(o, holders[g][h], mem[g], n_mem[g]);

    int64_t best_cost = -1;
    for (int combo = 0; combo < 8; combo++) {
        const group *gm = &cand[G_M][combo & 1], *gn = &cand[G_N][(combo >> 1) & 1], *gk = &cand[G_K][(combo >> 2) & 1];
        int copy[3];
        copy[OP_A] = !fuses(o, OP_A, gm) || !fuses(o, OP_A, gk);
        copy[OP_B] = !fuses(o, OP_B, gk) || !fuses(o, OP_B, gn);
        copy[OP_C] = !fuses(o, OP_C, gm) || !fuses(o, OP_C, gn);
        int64_t cost = 0;
        for (int x = 0; x < 3; x++) cost += copy[x] ? o->numel[x] : 0;
        if (best_cost < 0 || cost < best_cost) {
            best_cost = cost;
            p->gm = *gm;
            p->gn = *gn;
            p->gk = *gk;
            memcpy(p->copy, copy, sizeof copy);
        }
    }
}

int64_t exec_einsum_copies(const ir_einsum_spec *e, const int64_t *dims_a, const int64_t *dims_b, const int64_t *dims_c)
{
    einsum_plan p;
    plan_einsum(e, dims_a, dims_b, dims_c, &p);
    int64_t n = 0;
    for (int x = 0; x < 3; x++) n += p.copy[x] ? p.o.numel[x] : 0;
    return n;
}

/* exec_einsum_run's operands in the layouts the plan chose: each of a, b
 * and c either in place (its own layout) or a dense temporary in tmp[] (a
 * and b gathered into theirs; c's filled by the GEMMs, scattered after).
 * Sets lay[] and the pointers the GEMMs use.  Returns 0, or -1 with a
 * message (out of memory; no temporary left allocated). */
static int prepare_operands(const einsum_plan *plan, const float *a, const float *b, float *c, layout *lay, float **tmp,
                            const float **pa, const float **pb, float **pc, char *err, size_t errlen)
{
    const operands *o = &plan->o;
    const group *pairs[3][2] = {{&plan->gm, &plan->gk}, {&plan->gk, &plan->gn}, {&plan->gm, &plan->gn}};
    *pa = a;
    *pb = b;
    *pc = c;
    for (int x = 0; x < 3; x++) {
        if (!plan->copy[x]) {
            lay[x] = own_layout(o, x);
            continue;
        }
        lay[x] = dense_layout(o, &plan->batch, pairs[x][0], pairs[x][1]);
        tmp[x] = xmalloc_floats(o->numel[x]);
        if (!tmp[x]) {
            for (int y = 0; y < x; y++) free(tmp[y]);
            if (err && errlen) snprintf(err, errlen, "einsum: out of memory for a %lld-element temporary", (long long)o->numel[x]);
            return -1;
        }
        if (x == OP_C) {
            *pc = tmp[x];
            continue;
        }
        /* Gather the operand into the temporary: walk the dense layout and
         * read the source with the source strides of the same letters. */
        int64_t dims[IR_MAX_RANK], src_s[IR_MAX_RANK];
        for (int i = 0; i < lay[x].n; i++) {
            int p = letter_pos(o, x, lay[x].l[i]);
            dims[i] = o->dims[x][p];
            src_s[i] = o->strides[x][p];
        }
        exec_copy_strided32(lay[x].n, dims, x == OP_A ? (const void *)a : (const void *)b, src_s, tmp[x]);
        if (x == OP_A) *pa = tmp[x];
        else *pb = tmp[x];
    }
    return 0;
}

/* One serial GEMM (M x K by K x N) per index of the plan's batch letters,
 * on operands in layouts lay[]. */
static void run_gemms(const einsum_plan *plan, const layout *lay, const float *pa, const float *pb, float *pc)
{
    const operands *o = &plan->o;
    const group *gm = &plan->gm, *gn = &plan->gn, *gk = &plan->gk, *batch = &plan->batch;
    int64_t M = group_size(o, gm), N = group_size(o, gn), K = group_size(o, gk);
    /* The innermost letter of a fused group carries the group's stride. */
#define INNER(L, g) ((g)->n ? layout_stride(L, (g)->l[(g)->n - 1]) : 0)
    int64_t rs_a, cs_a, rs_b, cs_b, rs_c, cs_c;
    gemm_strides(M, K, INNER(&lay[OP_A], gm), INNER(&lay[OP_A], gk), &rs_a, &cs_a);
    gemm_strides(K, N, INNER(&lay[OP_B], gk), INNER(&lay[OP_B], gn), &rs_b, &cs_b);
    gemm_strides(M, N, INNER(&lay[OP_C], gm), INNER(&lay[OP_C], gn), &rs_c, &cs_c);
#undef INNER

    int64_t bdims[IR_MAX_RANK], bs[3][IR_MAX_RANK], n_batches = 1;
    for (int i = 0; i < batch->n; i++) {
        bdims[i] = letter_size(o, batch->l[i]);
        n_batches *= bdims[i];
        for (int x = 0; x < 3; x++) bs[x][i] = layout_stride(&lay[x], batch->l[i]);
    }

    rntm_t rntm = BLIS_RNTM_INITIALIZER;
    bli_rntm_set_num_threads(1, &rntm);
    float one = 1.0f, zero = 0.0f;
    int64_t idx[IR_MAX_RANK] = {0}, off[3] = {0, 0, 0};
    for (int64_t t = 0; t < n_batches; t++) {
        bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, M, N, K, &one, (float *)pa + off[OP_A], rs_a, cs_a,
                     (float *)pb + off[OP_B], rs_b, cs_b, &zero, pc + off[OP_C], rs_c, cs_c, NULL, &rntm);
        for (int d = batch->n - 1; d >= 0; d--) {
            for (int x = 0; x < 3; x++) off[x] += bs[x][d];
            if (++idx[d] < bdims[d]) break;
            for (int x = 0; x < 3; x++) off[x] -= bs[x][d] * bdims[d];
            idx[d] = 0;
        }
    }
}

int exec_einsum_run(const ir_einsum_spec *e, const int64_t *dims_a, const float *a, const int64_t *dims_b,
                    const float *b, const int64_t *dims_c, float *c, char *err, size_t errlen)
{
    exec_blis_setup();
    einsum_plan plan;
    plan_einsum(e, dims_a, dims_b, dims_c, &plan);
    const operands *o = &plan.o;
    if (o->numel[OP_C] == 0) return 0;
    if (o->numel[OP_A] == 0 || o->numel[OP_B] == 0) {
        memset(c, 0, (size_t)o->numel[OP_C] * sizeof *c);
        return 0;
    }
    const float *pa, *pb;
    float *pc, *tmp[3] = {NULL, NULL, NULL};
    layout lay[3];
    if (prepare_operands(&plan, a, b, c, lay, tmp, &pa, &pb, &pc, err, errlen) < 0) return -1;
    run_gemms(&plan, lay, pa, pb, pc);
    if (plan.copy[OP_C]) {
        /* Scatter the [batch, m, n] temporary into c's own layout. */
        int64_t src_s[IR_MAX_RANK];
        for (int i = 0; i < o->rank[OP_C]; i++) src_s[i] = layout_stride(&lay[OP_C], o->letters[OP_C][i]);
        exec_copy_strided32(o->rank[OP_C], dims_c, pc, src_s, c);
    }
    for (int x = 0; x < 3; x++) free(tmp[x]);
    return 0;
}

void exec_einsum_f32(const ir_einsum_spec *e, const int64_t *dims_a, const float *a, const int64_t *dims_b,
                     const float *b, const int64_t *dims_c, float *c)
{
    char err[160];
    if (exec_einsum_run(e, dims_a, a, dims_b, b, dims_c, c, err, sizeof err) < 0) {
        fprintf(stderr, "carve: %s\n", err);
        abort();
    }
}
