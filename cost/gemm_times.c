/* gemm_times.c - einsum shapes timed on this machine (cost_hw.gemm_times).
 *
 * A CPU profile calibrated at a model's own shapes (`carve calibrate --model`,
 * bench/bench_fidelity.c) carries, for every distinct einsum the model's
 * programs run (subscripts and local dims), the seconds one instruction took
 * through carve's einsum kernel: with its operands in cache and out of cache,
 * with one thread alone and with every core running one.  On this machine
 * the same FLOPs take 18 to 74 GFLOP/s depending on the shape and on which
 * operand is transposed (BLIS packs each operand into its own layout), which
 * no single peak or fitted formula reproduces; the estimator prices an einsum
 * of a timed shape by its times (cost_gemm_time_price) and every other einsum
 * by the profile's fitted figures.  The table is part of the profile: it is
 * written to and read from its JSON ("gemm_times") and checked with it.
 * Accelerator profiles have no table and are priced as before.
 */
#include "cost/gemm_times.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int same_dims(const int64_t *x, const int64_t *y, int rank)
{
    for (int d = 0; d < rank; d++)
        if (x[d] != y[d]) return 0;
    return 1;
}

const cost_gemm_time *cost_gemm_time_find(const cost_hw *hw, const ir_einsum_spec *e, const int64_t *dims_a,
                                          const int64_t *dims_b, const int64_t *dims_out)
{
    for (int i = 0; i < hw->n_gemm_times; i++) {
        const cost_gemm_time *t = &hw->gemm_times[i];
        const ir_einsum_spec *s = &t->spec;
        if (s->rank_a != e->rank_a || s->rank_b != e->rank_b || s->rank_out != e->rank_out ||
            memcmp(s->a, e->a, (size_t)e->rank_a) || memcmp(s->b, e->b, (size_t)e->rank_b) ||
            memcmp(s->out, e->out, (size_t)e->rank_out))
            continue;
        if (same_dims(t->dims_a, dims_a, e->rank_a) && same_dims(t->dims_b, dims_b, e->rank_b) &&
            same_dims(t->dims_out, dims_out, e->rank_out))
            return t;
    }
    return NULL;
}

double cost_gemm_time_price(const cost_hw *hw, const cost_gemm_time *t, int64_t n_devices, double missed)
{
    int cores = hw->cores > 0 ? hw->cores : 1;
    const double *x = n_devices == 1 && cores > 1 ? t->alone : t->busy;
    double m = missed < 0 ? 0 : missed > 1 ? 1 : missed;
    double s = x[0] + m * (x[1] - x[0]);
    return n_devices > cores ? s * (double)n_devices / cores : s;
}

/* "ab,bc->ac" from a spec. */
static void spec_text(const ir_einsum_spec *e, char *buf, size_t n)
{
    snprintf(buf, n, "%.*s,%.*s->%.*s", e->rank_a, e->a, e->rank_b, e->b, e->rank_out, e->out);
}

int cost_gemm_times_check(const cost_hw *hw, const char *who, char *err, size_t errlen)
{
    if (hw->n_gemm_times < 0 || hw->n_gemm_times > COST_MAX_GEMM_TIMES)
        return ir_errf(err, errlen, "%s: gemm_times: at most %d shapes", who, COST_MAX_GEMM_TIMES);
    for (int i = 0; i < hw->n_gemm_times; i++) {
        const cost_gemm_time *t = &hw->gemm_times[i];
        const ir_einsum_spec *e = &t->spec;
        if (e->rank_a < 1 || e->rank_a > IR_MAX_RANK || e->rank_b < 1 || e->rank_b > IR_MAX_RANK || e->rank_out < 0 ||
            e->rank_out > IR_MAX_RANK)
            return ir_errf(err, errlen, "%s: gemm_times[%d]: bad einsum ranks", who, i);
        const int64_t *dims[3] = {t->dims_a, t->dims_b, t->dims_out};
        const char *let[3] = {e->a, e->b, e->out};
        int rank[3] = {e->rank_a, e->rank_b, e->rank_out};
        for (int k = 0; k < 3; k++)
            for (int d = 0; d < rank[k]; d++) {
                if (dims[k][d] < 1) return ir_errf(err, errlen, "%s: gemm_times[%d]: dims must be >= 1", who, i);
                for (int q = 0; q < 3; q++) { /* one size per letter */
                    int p = ir_einsum_pos(let[q], rank[q], let[k][d]);
                    if (p >= 0 && dims[q][p] != dims[k][d])
                        return ir_errf(err, errlen, "%s: gemm_times[%d]: letter '%c' has sizes %lld and %lld", who, i,
                                       let[k][d], (long long)dims[k][d], (long long)dims[q][p]);
                }
            }
        for (int k = 0; k < 2; k++)
            if (!(t->alone[k] > 0 && t->alone[k] < 1e6) || !(t->busy[k] > 0 && t->busy[k] < 1e6))
                return ir_errf(err, errlen, "%s: gemm_times[%d]: times must be positive seconds", who, i);
    }
    return 0;
}

static int read_dims(const cJSON *o, const char *key, int rank, int64_t *dims, const char *where, int i, char *err,
                     size_t errlen)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != rank)
        return ir_errf(err, errlen, "%s: gemm_times[%d].%s: must be an array of %d dims", where, i, key, rank);
    int d = 0;
    for (const cJSON *x = a->child; x; x = x->next, d++) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble > 9e15 || x->valuedouble != floor(x->valuedouble))
            return ir_errf(err, errlen, "%s: gemm_times[%d].%s: dims must be whole numbers >= 1", where, i, key);
        dims[d] = (int64_t)x->valuedouble;
    }
    return 0;
}

static int read_pair(const cJSON *o, const char *key, double *v, const char *where, int i, char *err, size_t errlen)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 2 || !cJSON_IsNumber(a->child) || !cJSON_IsNumber(a->child->next))
        return ir_errf(err, errlen, "%s: gemm_times[%d].%s: must be [seconds in cache, seconds from memory]", where, i, key);
    v[0] = a->child->valuedouble;
    v[1] = a->child->next->valuedouble;
    return 0;
}

int cost_gemm_times_read(const cJSON *arr, cost_hw *hw, const char *where, char *err, size_t errlen)
{
    if (!cJSON_IsArray(arr)) return ir_errf(err, errlen, "%s: gemm_times: must be an array", where);
    if (cJSON_GetArraySize(arr) > COST_MAX_GEMM_TIMES)
        return ir_errf(err, errlen, "%s: gemm_times: at most %d shapes", where, COST_MAX_GEMM_TIMES);
    int i = 0;
    for (const cJSON *o = arr->child; o; o = o->next, i++) {
        cost_gemm_time *t = &hw->gemm_times[i];
        memset(t, 0, sizeof *t);
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "einsum");
        char e2[256];
        if (!cJSON_IsObject(o) || !cJSON_IsString(s))
            return ir_errf(err, errlen, "%s: gemm_times[%d]: must be an object with an \"einsum\" string", where, i);
        if (ir_einsum_parse(s->valuestring, -1, -1, &t->spec, e2, sizeof e2) < 0)
            return ir_errf(err, errlen, "%s: gemm_times[%d].einsum: %s", where, i, e2);
        if (read_dims(o, "a", t->spec.rank_a, t->dims_a, where, i, err, errlen) < 0 ||
            read_dims(o, "b", t->spec.rank_b, t->dims_b, where, i, err, errlen) < 0 ||
            read_dims(o, "out", t->spec.rank_out, t->dims_out, where, i, err, errlen) < 0 ||
            read_pair(o, "alone", t->alone, where, i, err, errlen) < 0 || read_pair(o, "busy", t->busy, where, i, err, errlen) < 0)
            return -1;
        hw->n_gemm_times = i + 1;
    }
    return 0;
}

static cJSON *dims_json(const int64_t *d, int rank)
{
    cJSON *a = cJSON_CreateArray();
    for (int k = 0; k < rank; k++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)d[k]));
    return a;
}

/* [in cache, from memory], written with %.17g so the profile round-trips
 * exactly (cJSON prints 15 digits). */
static cJSON *pair_json(const double *v)
{
    cJSON *a = cJSON_CreateArray();
    for (int k = 0; k < 2; k++) {
        char buf[40];
        snprintf(buf, sizeof buf, "%.17g", v[k]);
        cJSON_AddItemToArray(a, cJSON_CreateRaw(buf));
    }
    return a;
}

cJSON *cost_gemm_times_json(const cost_hw *hw)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < hw->n_gemm_times; i++) {
        const cost_gemm_time *t = &hw->gemm_times[i];
        cJSON *o = cJSON_CreateObject();
        char sub[3 * IR_MAX_RANK + 8];
        spec_text(&t->spec, sub, sizeof sub);
        cJSON_AddStringToObject(o, "einsum", sub);
        cJSON_AddItemToObject(o, "a", dims_json(t->dims_a, t->spec.rank_a));
        cJSON_AddItemToObject(o, "b", dims_json(t->dims_b, t->spec.rank_b));
        cJSON_AddItemToObject(o, "out", dims_json(t->dims_out, t->spec.rank_out));
        cJSON_AddItemToObject(o, "alone", pair_json(t->alone));
        cJSON_AddItemToObject(o, "busy", pair_json(t->busy));
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}
