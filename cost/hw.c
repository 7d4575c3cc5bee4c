/* hw.c - hardware profiles: presets, checks, JSON load and save, links.
 *
 * A cost_hw is a flat struct of rates and sizes; this file owns the table of
 * presets (figures from public specifications, cited in docs/cost-model.md),
 * the carve-hw/1 JSON form, and the rule that picks the link a mesh axis
 * uses.  Every number read from a file is checked (present, a finite number,
 * not negative, positive where zero makes no sense) and a bad one is reported
 * by its field name.
 */
#include "cost/cost.h"
#include "cost/gemm_times.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

typedef struct preset {
    const char *name;
    double f32, tf32, bf16, f16, vector, mem_bw, mem_cap, overhead;
    int64_t node;
    cost_link intra, inter;
    int cores;
    double gemm_eff, attn_eff;
    int gemm_tile, gemm_units;
    const char *source;
} preset;

/* Per device (GPU or TPU chip).  Matmul rates are the data sheets' peaks;
 * the GPUs' memory and link bandwidths are achievable rates (a fraction of
 * the data sheet measured by published microbenchmarks) and their GEMMs
 * reach gemm_eff of the peak, less on shapes that fill few tiles
 * (docs/cost-model.md cites every figure).  Link bandwidths are per
 * direction; the latencies are assumptions of the usual order for these
 * links (NCCL and ICI step latencies of a few microseconds), stated as such
 * in the docs. */
static const preset presets[] = {
    {"tpu-v3", 123e12 / 6, 123e12 / 6, 123e12, 123e12, 123e12 / 6, 900e9, 32 * GIB, 0, 1024, {166e9, 1e-6, "ICI"}, {3.1e9, 20e-6, "DCN"}, 0,
     0, 0, 0, 0,
     "Cloud TPU v3 system architecture (cloud.google.com/tpu/docs/v3): 123 TFLOP/s bf16 per chip, 32 GiB HBM2 at "
     "900 GB/s, 1024-chip pod, 340 TB/s pod all-reduce bandwidth; f32 matmul = 6 bf16 passes"},
    {"a100", 19.5e12, 156e12, 312e12, 312e12, 19.5e12, 1820e9, 80 * GIB, 0, 8, {200e9, 3e-6, "NVLink 3"}, {21.2e9, 8e-6, "InfiniBand HDR"}, 0,
     0.85, 0.60, 128, 108,
     "A100 80GB SXM: data-sheet peaks 19.5 fp32, 156 tf32, 312 bf16 TFLOP/s; achievable: GEMM 0.85 of peak on 108 SMs, "
     "HBM2e 1820 of 2039 GB/s, NVLink 200 of 300 GB/s, HDR IB 21.2 of 25 GB/s per GPU; 8 per node"},
    {"h100", 67e12, 494.7e12, 989e12, 989e12, 67e12, 2980e9, 80 * GIB, 0, 8, {300e9, 3e-6, "NVLink 4"}, {42.4e9, 8e-6, "InfiniBand NDR"}, 0,
     0.80, 0.35, 128, 132,
     "H100 SXM: data-sheet peaks 67 fp32, 494.7 tf32, 989 bf16 TFLOP/s; achievable: GEMM 0.80 of peak on 132 SMs, "
     "HBM3 2980 of 3350 GB/s, NVLink 300 of 450 GB/s, NDR IB 42.4 of 50 GB/s per GPU; 8 per node"},
    {"cpu", 100e9, 100e9, 100e9, 100e9, 4e9, 7.5e9, 4 * GIB, 1e-6, 1 << 20, {7.5e9, 5e-6, "shared memory"}, {7.5e9, 5e-6, "shared memory"}, 2, 0, 0, 0, 0,
     "nominal figures of a 2-core development VM (docs/cost-model.md, \"The CPU model\"); run carve calibrate for measured ones"},
};
#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

static const char *const preset_names[] = {"tpu-v3", "a100", "h100", "cpu", NULL};

const char *const *cost_hw_preset_names(void) { return preset_names; }

int cost_hw_preset(const char *name, cost_hw *hw, char *err, size_t errlen)
{
    for (int i = 0; i < N_PRESETS; i++) {
        const preset *p = &presets[i];
        if (strcmp(p->name, name)) continue;
        memset(hw, 0, sizeof *hw);
        snprintf(hw->name, sizeof hw->name, "%s", p->name);
        snprintf(hw->source, sizeof hw->source, "%s", p->source);
        hw->matmul_flops[IR_F32] = p->f32;
        hw->matmul_flops[IR_BF16] = p->bf16;
        hw->matmul_flops[IR_F16] = p->f16;
        hw->tf32_flops = p->tf32;
        hw->vector_flops = p->vector;
        hw->mem_bandwidth = p->mem_bw;
        hw->mem_capacity = p->mem_cap;
        hw->op_overhead = p->overhead;
        hw->node_devices = p->node;
        hw->intra = p->intra;
        hw->inter = p->inter;
        hw->cores = p->cores;
        hw->gemm_efficiency = p->gemm_eff;
        hw->attention_efficiency = p->attn_eff;
        hw->gemm_tile = p->gemm_tile;
        hw->gemm_units = p->gemm_units;
        /* accelerators: a compiler's kernels (epilogues, one-pass softmax and layernorm); the nominal cpu: op by op */
        hw->fused_elementwise = p->cores == 0 ? 2 : 0;
        return 0;
    }
    return ir_errf(err, errlen, "hardware '%s': unknown preset (presets: tpu-v3, a100, h100, cpu; or a carve-hw/1 JSON file)",
                name);
}

/* ---- the field table ------------------------------------------------------
 *
 * Every number a profile holds is one row: its JSON key, where it lives in
 * cost_hw (or in a cost_link), its kind and its documented range (the table in
 * docs/cost-model.md).  The reader and cost_hw_check both walk these rows, so
 * a new field is one row.  A value outside [lo, hi] is refused, except 0 where
 * HW_ZERO_OK says 0 means "not given"; ranges start well above the subnormal
 * numbers, so 5e-324 is refused as a rate. */
typedef enum { HW_REAL, HW_INT, HW_INT64, HW_BOOL, HW_OBJECT } hw_kind;
enum { HW_REQUIRED = 1, HW_ZERO_OK = 2 };

typedef struct hw_row {
    const char *key;
    size_t offset;              /* from the struct the table describes */
    hw_kind kind;
    double lo, hi;              /* inclusive range of numbers */
    int flags;
    const struct hw_row *sub;   /* HW_OBJECT: rows of the nested object */
    int n_sub;
    int dflt_row;               /* optional row: when absent, copy this row's value (-1: 0) */
} hw_row;

#define HW_SECONDS 1e-15, 10.0
#define HW_RATE 1, 1e18
#define HW_BYTES 1e3, 1e18
#define ROWS(t) t, (int)(sizeof t / sizeof t[0])

static const hw_row link_rows[] = {
    {"bandwidth", offsetof(cost_link, bandwidth), HW_REAL, HW_RATE, HW_REQUIRED, NULL, 0, -1},
    {"latency", offsetof(cost_link, latency), HW_REAL, HW_SECONDS, HW_REQUIRED | HW_ZERO_OK, NULL, 0, -1},
};
static const hw_row flops_rows[] = {
    {"f32", IR_F32 * sizeof(double), HW_REAL, HW_RATE, HW_REQUIRED, NULL, 0, -1},
    {"bf16", IR_BF16 * sizeof(double), HW_REAL, HW_RATE, HW_REQUIRED, NULL, 0, -1},
    {"f16", IR_F16 * sizeof(double), HW_REAL, HW_RATE, 0, NULL, 0, 1 /* bf16 */},
    /* tf32 lives beside the array, at this offset from its start; absent: the f32 rate */
    {"tf32", offsetof(cost_hw, tf32_flops) - offsetof(cost_hw, matmul_flops), HW_REAL, HW_RATE, 0, NULL, 0, 0 /* f32 */},
};
static const hw_row hw_rows[] = {
    {"peak_flops", offsetof(cost_hw, matmul_flops), HW_OBJECT, 0, 0, HW_REQUIRED, ROWS(flops_rows), -1},
    {"vector_flops", offsetof(cost_hw, vector_flops), HW_REAL, HW_RATE, HW_REQUIRED, NULL, 0, -1},
    {"memory_bandwidth", offsetof(cost_hw, mem_bandwidth), HW_REAL, HW_RATE, HW_REQUIRED, NULL, 0, -1},
    {"memory_capacity", offsetof(cost_hw, mem_capacity), HW_REAL, HW_BYTES, HW_REQUIRED, NULL, 0, -1},
    {"op_overhead", offsetof(cost_hw, op_overhead), HW_REAL, HW_SECONDS, HW_ZERO_OK, NULL, 0, -1},
    {"node_devices", offsetof(cost_hw, node_devices), HW_INT64, 1, 1 << 30, HW_REQUIRED, NULL, 0, -1},
    {"cores", offsetof(cost_hw, cores), HW_INT, 1, 65536, HW_ZERO_OK, NULL, 0, -1},
    {"alone_speedup", offsetof(cost_hw, alone_speedup), HW_REAL, 1, 1000, HW_ZERO_OK, NULL, 0, -1},
    {"alone_bandwidth", offsetof(cost_hw, alone_bandwidth), HW_REAL, 1, 1000, HW_ZERO_OK, NULL, 0, -1},
    {"gemm_call", offsetof(cost_hw, gemm_call), HW_REAL, HW_SECONDS, HW_ZERO_OK, NULL, 0, -1},
    {"gemm_bandwidth", offsetof(cost_hw, gemm_bandwidth), HW_REAL, HW_RATE, HW_ZERO_OK, NULL, 0, -1},
    {"cache_bytes", offsetof(cost_hw, cache_bytes), HW_REAL, HW_BYTES, HW_ZERO_OK, NULL, 0, -1},
    {"oversub_latency", offsetof(cost_hw, oversub_latency), HW_REAL, HW_SECONDS, HW_ZERO_OK, NULL, 0, -1},
    {"shared_memory", offsetof(cost_hw, shared_memory), HW_BOOL, 0, 1, 0, NULL, 0, -1},
    {"fused_elementwise", offsetof(cost_hw, fused_elementwise), HW_INT, 1, 2, HW_ZERO_OK, NULL, 0, -1},
    {"gemm_efficiency", offsetof(cost_hw, gemm_efficiency), HW_REAL, 0.01, 1, HW_ZERO_OK, NULL, 0, -1},
    {"attention_efficiency", offsetof(cost_hw, attention_efficiency), HW_REAL, 0.001, 1, HW_ZERO_OK, NULL, 0, -1},
    {"gemm_tile", offsetof(cost_hw, gemm_tile), HW_INT, 1, 65536, HW_ZERO_OK, NULL, 0, -1},
    {"gemm_units", offsetof(cost_hw, gemm_units), HW_INT, 1, 1 << 20, HW_ZERO_OK, NULL, 0, -1},
    {"intra_link", offsetof(cost_hw, intra), HW_OBJECT, 0, 0, HW_REQUIRED, ROWS(link_rows), -1},
    {"inter_link", offsetof(cost_hw, inter), HW_OBJECT, 0, 0, HW_REQUIRED, ROWS(link_rows), -1},
};
/* op_rates.OP (elements/s) and axis_links.AXIS (a link) have names for keys. */
static const hw_row op_rate_row = {"", 0, HW_REAL, HW_RATE, HW_ZERO_OK, NULL, 0, -1};

static double row_get(const hw_row *r, const void *base)
{
    const char *p = (const char *)base + r->offset;
    switch (r->kind) {
    case HW_REAL: return *(const double *)p;
    case HW_INT:
    case HW_BOOL: return *(const int *)p;
    case HW_INT64: return (double)*(const int64_t *)p;
    case HW_OBJECT: break;
    }
    return 0;
}

static void row_set(const hw_row *r, void *base, double v)
{
    char *p = (char *)base + r->offset;
    switch (r->kind) {
    case HW_REAL: *(double *)p = v; break;
    case HW_INT:
    case HW_BOOL: *(int *)p = (int)v; break;
    case HW_INT64: *(int64_t *)p = (int64_t)v; break;
    case HW_OBJECT: break;
    }
}

/* NULL when v is allowed in row r, else what is wrong with it (static text). */
static const char *row_problem(const hw_row *r, double v, char *buf, size_t n)
{
    if (!isfinite(v)) return "must be a finite number";
    if (v == 0 && (r->flags & HW_ZERO_OK)) return NULL;
    if ((r->kind == HW_INT || r->kind == HW_INT64) && v != floor(v)) return "must be an integer";
    if (r->kind == HW_BOOL && v != 0 && v != 1) return "must be 0 or 1";
    if (v < r->lo || v > r->hi) {
        snprintf(buf, n, "must be %sin [%g, %g]", r->flags & HW_ZERO_OK ? "0 or " : "", r->lo, r->hi);
        return buf;
    }
    return NULL;
}

/* Checks rows `rows` of the struct at `base`; `path` prefixes keys in messages. */
static int check_rows(const hw_row *rows, int n, const void *base, const char *who, const char *path, char *err,
                      size_t errlen)
{
    for (int i = 0; i < n; i++) {
        const hw_row *r = &rows[i];
        if (r->kind == HW_OBJECT) {
            char sub[96];
            snprintf(sub, sizeof sub, "%s%s.", path, r->key);
            if (check_rows(r->sub, r->n_sub, (const char *)base + r->offset, who, sub, err, errlen) < 0) return -1;
            continue;
        }
        char buf[96];
        double v = row_get(r, base);
        const char *why = row_problem(r, v, buf, sizeof buf);
        if (why) return ir_errf(err, errlen, "%s: %s%s: %s, got %g", who, path, r->key, why, v);
    }
    return 0;
}

int cost_hw_check(const cost_hw *hw, char *err, size_t errlen)
{
    char who[COST_NAME_LEN + 16];
    snprintf(who, sizeof who, "hardware %s", hw->name[0] ? hw->name : "profile");
    if (check_rows(hw_rows, (int)(sizeof hw_rows / sizeof hw_rows[0]), hw, who, "", err, errlen) < 0) return -1;
    for (int k = 0; k < IR_N_OPS; k++) {
        char buf[96];
        const char *why = row_problem(&op_rate_row, hw->op_rate[k], buf, sizeof buf);
        if (why) return ir_errf(err, errlen, "%s: op_rates.%s: %s, got %g", who, ir_op_name((ir_opkind)k), why, hw->op_rate[k]);
    }
    if (cost_gemm_times_check(hw, who, err, errlen) < 0) return -1;
    if (hw->n_axis_links < 0 || hw->n_axis_links > SHARD_MAX_AXES)
        return ir_errf(err, errlen, "%s: axis_links: at most %d axes", who, SHARD_MAX_AXES);
    for (int i = 0; i < hw->n_axis_links; i++) {
        char path[SHARD_AXIS_NAME + 16];
        snprintf(path, sizeof path, "axis_links.%s.", hw->axis_names[i]);
        if (check_rows(link_rows, 2, &hw->axis_links[i], who, path, err, errlen) < 0) return -1;
    }
    return 0;
}

int64_t cost_axis_stride(const cost_hw *hw, const shard_mesh *mesh, int axis)
{
    int64_t stride = 1;
    for (int a = 0; a < mesh->n_axes; a++)
        if (hw->axis_ordered ? hw->axis_order[a] > hw->axis_order[axis] : a > axis) stride *= mesh->sizes[a];
    return stride;
}

cost_link cost_axis_link(const cost_hw *hw, const shard_mesh *mesh, int axis)
{
    for (int i = 0; i < hw->n_axis_links; i++)
        if (!strcmp(hw->axis_names[i], mesh->names[axis])) return hw->axis_links[i];
    int64_t stride = cost_axis_stride(hw, mesh, axis);
    return stride * mesh->sizes[axis] <= hw->node_devices ? hw->intra : hw->inter;
}

int cost_axis_levels(const cost_hw *hw, const shard_mesh *mesh, int axis, int64_t *sizes, cost_link *links)
{
    int64_t n = mesh->sizes[axis], stride = cost_axis_stride(hw, mesh, axis);
    int named = 0;
    for (int i = 0; i < hw->n_axis_links; i++) named |= !strcmp(hw->axis_names[i], mesh->names[axis]);
    int64_t inner = stride < hw->node_devices && hw->node_devices % stride == 0 ? hw->node_devices / stride : 1;
    if (named || stride * n <= hw->node_devices || inner < 2 || n % inner) {
        sizes[0] = n;
        links[0] = cost_axis_link(hw, mesh, axis);
        return 1;
    }
    sizes[0] = inner; /* the axis' devices inside one node */
    links[0] = hw->intra;
    sizes[1] = n / inner; /* one per node, across nodes */
    links[1] = hw->inter;
    return 2;
}

/* ---- JSON ---------------------------------------------------------------- */

/* Refuses an object holding one key twice (cJSON keeps both; the first would
 * win silently). */
static int no_duplicates(const cJSON *o, const char *where, const char *path, char *err, size_t errlen)
{
    const char *twice = ir_json_repeated_key(o);
    return twice ? ir_errf(err, errlen, "%s: %s%s: key given twice", where, path, twice) : 0;
}

/* Reads the number x for row r into the struct at base. */
static int read_num(const cJSON *x, const hw_row *r, void *base, const char *where, const char *path, char *err,
                    size_t errlen)
{
    double v;
    if (r->kind == HW_BOOL && cJSON_IsBool(x)) v = cJSON_IsTrue(x);
    else if (cJSON_IsNumber(x)) v = x->valuedouble;
    else return ir_errf(err, errlen, "%s: %s%s: must be a number", where, path, r->key);
    char buf[96];
    const char *why = row_problem(r, v, buf, sizeof buf);
    if (why) return ir_errf(err, errlen, "%s: %s%s: %s, got %g", where, path, r->key, why, v);
    row_set(r, base, v);
    return 0;
}

/* A link object's optional "name" (what the link is: "NVLink 3"). */
static const char *const link_extras[] = {"name", NULL};
static int read_link_name(const cJSON *o, cost_link *l, const char *where, const char *path, char *err, size_t errlen)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "name");
    if (!x) return 0;
    if (!cJSON_IsString(x) || strlen(x->valuestring) >= sizeof l->name || !x->valuestring[0])
        return ir_errf(err, errlen, "%s: %sname: must be a string of 1 to %zu characters", where, path, sizeof l->name - 1);
    for (const char *c = x->valuestring; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) return ir_errf(err, errlen, "%s: %sname: a control character", where, path);
    memcpy(l->name, x->valuestring, strlen(x->valuestring) + 1);
    return 0;
}

/* Reads object o by rows: every key must be a row (or one of the named
 * extras handled by the caller), none twice; required rows present. */
static int read_rows(const cJSON *o, const hw_row *rows, int n, void *base, const char *where, const char *path,
                     const char *const *extras, char *err, size_t errlen)
{
    if (!cJSON_IsObject(o)) return ir_errf(err, errlen, "%s: %.*s: must be an object", where, (int)strlen(path) - 1, path);
    if (no_duplicates(o, where, path, err, errlen) < 0) return -1;
    unsigned long long seen = 0;
    for (const cJSON *x = o->child; x; x = x->next) {
        const char *key = x->string ? x->string : "";
        int i = 0;
        while (i < n && strcmp(rows[i].key, key)) i++;
        if (i == n) {
            int extra = 0;
            for (int k = 0; extras && extras[k]; k++) extra |= !strcmp(extras[k], key);
            if (!extra) return ir_errf(err, errlen, "%s: %s%s: unknown key", where, path, key);
            continue;
        }
        seen |= 1ull << i;
        const hw_row *r = &rows[i];
        if (r->kind == HW_OBJECT) {
            char sub[96];
            snprintf(sub, sizeof sub, "%s%s.", path, r->key);
            if (read_rows(x, r->sub, r->n_sub, (char *)base + r->offset, where, sub, r->sub == link_rows ? link_extras : NULL,
                          err, errlen) < 0)
                return -1;
            if (r->sub == link_rows && read_link_name(x, (cost_link *)((char *)base + r->offset), where, sub, err, errlen) < 0)
                return -1;
        } else if (read_num(x, r, base, where, path, err, errlen) < 0) {
            return -1;
        }
    }
    for (int i = 0; i < n; i++) {
        if (seen >> i & 1) continue;
        if (rows[i].flags & HW_REQUIRED) return ir_errf(err, errlen, "%s: %s%s: missing", where, path, rows[i].key);
        if (rows[i].dflt_row >= 0) row_set(&rows[i], base, row_get(&rows[rows[i].dflt_row], base));
    }
    return 0;
}

/* Copies string field `key` of root into dst (cap bytes): absent is "" unless
 * required; longer than the field holds is refused, never cut. */
static int read_str(const cJSON *root, const char *key, int required, char *dst, size_t cap, const char *where,
                    char *err, size_t errlen)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!x && !required) return 0;
    if (!x) return ir_errf(err, errlen, "%s: %s: missing", where, key);
    if (!cJSON_IsString(x)) return ir_errf(err, errlen, "%s: %s: must be a string", where, key);
    size_t len = strlen(x->valuestring);
    if (required && !len) return ir_errf(err, errlen, "%s: %s: must not be empty", where, key);
    if (len >= cap) return ir_errf(err, errlen, "%s: %s: longer than %zu characters", where, key, cap - 1);
    memcpy(dst, x->valuestring, len + 1);
    return 0;
}

static int read_op_rates(const cJSON *rates, cost_hw *hw, const char *where, char *err, size_t errlen)
{
    if (!cJSON_IsObject(rates)) return ir_errf(err, errlen, "%s: op_rates: must be an object of op name -> elements/s", where);
    if (no_duplicates(rates, where, "op_rates.", err, errlen) < 0) return -1;
    for (const cJSON *x = rates->child; x; x = x->next) {
        int k = ir_op_from_name(x->string ? x->string : "");
        if (k < 0 || k == IR_OP_EINSUM)
            return ir_errf(err, errlen, "%s: op_rates.%s: not an op other than einsum", where, x->string ? x->string : "");
        hw_row r = op_rate_row;
        r.key = x->string;
        r.offset = (size_t)k * sizeof(double);
        if (read_num(x, &r, hw->op_rate, where, "op_rates.", err, errlen) < 0) return -1;
    }
    return 0;
}

static int read_axis_links(const cJSON *al, cost_hw *hw, const char *where, char *err, size_t errlen)
{
    if (!cJSON_IsObject(al)) return ir_errf(err, errlen, "%s: axis_links: must be an object of axis name -> link", where);
    if (no_duplicates(al, where, "axis_links.", err, errlen) < 0) return -1;
    for (const cJSON *x = al->child; x; x = x->next) {
        if (hw->n_axis_links == SHARD_MAX_AXES) return ir_errf(err, errlen, "%s: axis_links: at most %d axes", where, SHARD_MAX_AXES);
        if (!x->string || !x->string[0] || strlen(x->string) >= SHARD_AXIS_NAME)
            return ir_errf(err, errlen, "%s: axis_links: axis names take 1 to %d characters", where, SHARD_AXIS_NAME - 1);
        char path[SHARD_AXIS_NAME + 16];
        snprintf(path, sizeof path, "axis_links.%s.", x->string);
        snprintf(hw->axis_names[hw->n_axis_links], SHARD_AXIS_NAME, "%s", x->string);
        cost_link *l = &hw->axis_links[hw->n_axis_links++];
        if (read_rows(x, link_rows, 2, l, where, path, link_extras, err, errlen) < 0 ||
            read_link_name(x, l, where, path, err, errlen) < 0)
            return -1;
    }
    return 0;
}

static int parse_doc(const cJSON *root, const char *where, cost_hw *hw, char *err, size_t errlen)
{
    static const char *const extras[] = {"format", "name", "source", "op_rates", "axis_links", "gemm_times", NULL};
    memset(hw, 0, sizeof *hw);
    if (!cJSON_IsObject(root)) return ir_errf(err, errlen, "%s: a hardware profile must be a JSON object", where);
    char fmt[32];
    if (read_str(root, "format", 1, fmt, sizeof fmt, where, err, errlen) < 0) return -1;
    if (strcmp(fmt, COST_HW_FORMAT)) return ir_errf(err, errlen, "%s: format: '%s' is not %s", where, fmt, COST_HW_FORMAT);
    if (read_str(root, "name", 1, hw->name, sizeof hw->name, where, err, errlen) < 0 ||
        read_str(root, "source", 0, hw->source, sizeof hw->source, where, err, errlen) < 0 ||
        read_rows(root, hw_rows, (int)(sizeof hw_rows / sizeof hw_rows[0]), hw, where, "", extras, err, errlen) < 0)
        return -1;
    const cJSON *rates = cJSON_GetObjectItemCaseSensitive(root, "op_rates");
    if (rates && read_op_rates(rates, hw, where, err, errlen) < 0) return -1;
    const cJSON *al = cJSON_GetObjectItemCaseSensitive(root, "axis_links");
    if (al && read_axis_links(al, hw, where, err, errlen) < 0) return -1;
    const cJSON *gt = cJSON_GetObjectItemCaseSensitive(root, "gemm_times");
    if (gt && cost_gemm_times_read(gt, hw, where, err, errlen) < 0) return -1;
    char e2[256];
    if (cost_hw_check(hw, e2, sizeof e2) < 0) return ir_errf(err, errlen, "%s: %s", where, e2);
    return 0;
}

int cost_hw_from_json(const char *text, const char *where, cost_hw *hw, char *err, size_t errlen)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 0);
    if (!root) {
        size_t off = end && end >= text ? (size_t)(end - text) : 0;
        return ir_errf(err, errlen, "%s: malformed JSON near byte %zu", where, off);
    }
    int rc = parse_doc(root, where, hw, err, errlen);
    cJSON_Delete(root);
    return rc;
}

int cost_hw_load(const char *path, cost_hw *hw, char *err, size_t errlen)
{
    char why[160];
    size_t n;
    char *text = ir_read_input(path, (size_t)64 << 20, &n, why, sizeof why);
    if (!text) return ir_errf(err, errlen, "hardware file '%s': %s", path, why);
    int rc = cost_hw_from_json(text, path, hw, err, errlen);
    free(text);
    return rc;
}

int cost_hw_lookup(const char *name_or_path, cost_hw *hw, char *err, size_t errlen)
{
    for (int i = 0; preset_names[i]; i++)
        if (!strcmp(preset_names[i], name_or_path)) return cost_hw_preset(name_or_path, hw, err, errlen);
    size_t len = strlen(name_or_path);
    /* a file, or a path (no preset has a '/' or ends in .json) that is not there: the file's own error, not
     * "unknown preset" */
    if (access(name_or_path, F_OK) == 0 || strchr(name_or_path, '/') ||
        (len > 5 && !strcmp(name_or_path + len - 5, ".json")))
        return cost_hw_load(name_or_path, hw, err, errlen);
    return cost_hw_preset(name_or_path, hw, err, errlen); /* the unknown-preset message */
}

/* cJSON prints 15 significant digits; numbers are written with %.17g so a
 * profile round-trips exactly. */
static void add_num(cJSON *o, const char *key, double v)
{
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", v);
    cJSON_AddItemToObject(o, key, cJSON_CreateRaw(buf));
}

static cJSON *link_json(const cost_link *l)
{
    cJSON *o = cJSON_CreateObject();
    add_num(o, "bandwidth", l->bandwidth);
    add_num(o, "latency", l->latency);
    if (l->name[0]) cJSON_AddStringToObject(o, "name", l->name);
    return o;
}

char *cost_hw_to_json(const cost_hw *hw)
{
    cJSON *r = cJSON_CreateObject();
    if (!r) return NULL;
    cJSON_AddStringToObject(r, "format", COST_HW_FORMAT);
    cJSON_AddStringToObject(r, "name", hw->name);
    cJSON_AddStringToObject(r, "source", hw->source);
    cJSON *pf = cJSON_CreateObject();
    add_num(pf, "f32", hw->matmul_flops[IR_F32]);
    add_num(pf, "bf16", hw->matmul_flops[IR_BF16]);
    add_num(pf, "f16", hw->matmul_flops[IR_F16]);
    add_num(pf, "tf32", hw->tf32_flops);
    cJSON_AddItemToObject(r, "peak_flops", pf);
    add_num(r, "vector_flops", hw->vector_flops);
    add_num(r, "memory_bandwidth", hw->mem_bandwidth);
    add_num(r, "memory_capacity", hw->mem_capacity);
    add_num(r, "op_overhead", hw->op_overhead);
    add_num(r, "node_devices", (double)hw->node_devices);
    add_num(r, "cores", hw->cores);
    if (hw->alone_speedup > 0) add_num(r, "alone_speedup", hw->alone_speedup);
    if (hw->alone_bandwidth > 0) add_num(r, "alone_bandwidth", hw->alone_bandwidth);
    if (hw->gemm_call > 0) add_num(r, "gemm_call", hw->gemm_call);
    if (hw->gemm_bandwidth > 0) add_num(r, "gemm_bandwidth", hw->gemm_bandwidth);
    if (hw->cache_bytes > 0) add_num(r, "cache_bytes", hw->cache_bytes);
    if (hw->shared_memory) add_num(r, "shared_memory", hw->shared_memory);
    if (hw->fused_elementwise) add_num(r, "fused_elementwise", hw->fused_elementwise);
    if (hw->oversub_latency > 0) add_num(r, "oversub_latency", hw->oversub_latency);
    if (hw->gemm_efficiency > 0) add_num(r, "gemm_efficiency", hw->gemm_efficiency);
    if (hw->attention_efficiency > 0) add_num(r, "attention_efficiency", hw->attention_efficiency);
    if (hw->gemm_tile > 0) add_num(r, "gemm_tile", hw->gemm_tile);
    if (hw->gemm_units > 0) add_num(r, "gemm_units", hw->gemm_units);
    int any_rate = 0;
    for (int k = 0; k < IR_N_OPS; k++) any_rate |= hw->op_rate[k] > 0;
    if (any_rate) {
        cJSON *rates = cJSON_CreateObject();
        for (int k = 0; k < IR_N_OPS; k++)
            if (hw->op_rate[k] > 0) add_num(rates, ir_op_name((ir_opkind)k), hw->op_rate[k]);
        cJSON_AddItemToObject(r, "op_rates", rates);
    }
    cJSON_AddItemToObject(r, "intra_link", link_json(&hw->intra));
    cJSON_AddItemToObject(r, "inter_link", link_json(&hw->inter));
    if (hw->n_axis_links) {
        cJSON *al = cJSON_CreateObject();
        for (int i = 0; i < hw->n_axis_links; i++) cJSON_AddItemToObject(al, hw->axis_names[i], link_json(&hw->axis_links[i]));
        cJSON_AddItemToObject(r, "axis_links", al);
    }
    if (hw->n_gemm_times) cJSON_AddItemToObject(r, "gemm_times", cost_gemm_times_json(hw));
    char *s = cJSON_Print(r);
    cJSON_Delete(r);
    return s;
}

int cost_hw_save(const cost_hw *hw, const char *path, char *err, size_t errlen)
{
    char *s = cost_hw_to_json(hw);
    if (!s) return ir_errf(err, errlen, "%s: out of memory", path);
    size_t n = strlen(s);
    char *t = realloc(s, n + 2);
    if (!t) {
        free(s);
        return ir_errf(err, errlen, "%s: out of memory", path);
    }
    t[n] = '\n';
    t[n + 1] = 0;
    int rc = ir_write_atomic(path, t, n + 1, err, errlen);
    free(t);
    return rc;
}
