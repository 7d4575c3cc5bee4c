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

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

typedef struct preset {
    const char *name;
    double f32, bf16, f16, vector, mem_bw, mem_cap, overhead;
    int64_t node;
    cost_link intra, inter;
    int cores;
    const char *source;
} preset;

/* Per device (GPU or TPU chip).  Link bandwidths are per direction; the
 * latencies are assumptions of the usual order for these links (NCCL and
 * ICI step latencies of a few microseconds), stated as such in the docs. */
static const preset presets[] = {
    {"tpu-v3", 123e12 / 6, 123e12, 123e12, 123e12 / 6, 900e9, 32 * GIB, 0, 1024, {166e9, 1e-6}, {3.1e9, 20e-6}, 0,
     "Cloud TPU v3 system architecture (cloud.google.com/tpu/docs/v3): 123 TFLOP/s bf16 per chip, 32 GiB HBM2 at "
     "900 GB/s, 1024-chip pod, 340 TB/s pod all-reduce bandwidth; f32 matmul = 6 bf16 passes"},
    {"a100", 19.5e12, 312e12, 312e12, 19.5e12, 2039e9, 80 * GIB, 0, 8, {300e9, 3e-6}, {25e9, 8e-6}, 0,
     "NVIDIA A100 80GB SXM datasheet: 19.5 TFLOP/s fp32, 312 bf16/fp16 dense, 2039 GB/s HBM2e, NVLink 600 GB/s "
     "(300 each way), 8 GPUs per DGX node, one 200 Gb/s HDR InfiniBand port per GPU"},
    {"h100", 67e12, 989e12, 989e12, 67e12, 3350e9, 80 * GIB, 0, 8, {450e9, 3e-6}, {50e9, 8e-6}, 0,
     "NVIDIA H100 SXM datasheet: 67 TFLOP/s fp32, 989 bf16/fp16 dense, 3.35 TB/s HBM3, NVLink 900 GB/s (450 each "
     "way), 8 GPUs per DGX node, one 400 Gb/s NDR InfiniBand port per GPU"},
    {"cpu", 100e9, 100e9, 100e9, 4e9, 7.5e9, 4 * GIB, 1e-6, 1 << 20, {7.5e9, 5e-6}, {7.5e9, 5e-6}, 2,
     "nominal figures of the 2-core development VM (STYLE.md); run carve calibrate for measured ones"},
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
        hw->vector_flops = p->vector;
        hw->mem_bandwidth = p->mem_bw;
        hw->mem_capacity = p->mem_cap;
        hw->op_overhead = p->overhead;
        hw->node_devices = p->node;
        hw->intra = p->intra;
        hw->inter = p->inter;
        hw->cores = p->cores;
        return 0;
    }
    return ir_errf(err, errlen, "hardware '%s': unknown preset (presets: tpu-v3, a100, h100, cpu; or a carve-hw/1 JSON file)",
                name);
}

static int bad_num(double x, int allow_zero) { return !isfinite(x) || x < 0 || (!allow_zero && x == 0); }

int cost_hw_check(const cost_hw *hw, char *err, size_t errlen)
{
    const char *n = hw->name[0] ? hw->name : "profile";
    if (bad_num(hw->matmul_flops[IR_F32], 0)) return ir_errf(err, errlen, "hardware %s: peak_flops.f32 must be positive", n);
    if (bad_num(hw->matmul_flops[IR_BF16], 0)) return ir_errf(err, errlen, "hardware %s: peak_flops.bf16 must be positive", n);
    if (bad_num(hw->matmul_flops[IR_F16], 0)) return ir_errf(err, errlen, "hardware %s: peak_flops.f16 must be positive", n);
    if (bad_num(hw->vector_flops, 0)) return ir_errf(err, errlen, "hardware %s: vector_flops must be positive", n);
    if (bad_num(hw->mem_bandwidth, 0)) return ir_errf(err, errlen, "hardware %s: memory_bandwidth must be positive", n);
    if (bad_num(hw->mem_capacity, 0)) return ir_errf(err, errlen, "hardware %s: memory_capacity must be positive", n);
    if (bad_num(hw->op_overhead, 1)) return ir_errf(err, errlen, "hardware %s: op_overhead must be >= 0", n);
    if (hw->node_devices < 1) return ir_errf(err, errlen, "hardware %s: node_devices must be >= 1", n);
    if (hw->cores < 0) return ir_errf(err, errlen, "hardware %s: cores must be >= 0", n);
    if (bad_num(hw->alone_speedup, 1)) return ir_errf(err, errlen, "hardware %s: alone_speedup must be >= 0", n);
    if (bad_num(hw->gemm_call, 1)) return ir_errf(err, errlen, "hardware %s: gemm_call must be >= 0", n);
    if (bad_num(hw->gemm_bandwidth, 1)) return ir_errf(err, errlen, "hardware %s: gemm_bandwidth must be >= 0", n);
    if (bad_num(hw->oversub_latency, 1)) return ir_errf(err, errlen, "hardware %s: oversub_latency must be >= 0", n);
    if (hw->shared_memory != 0 && hw->shared_memory != 1) return ir_errf(err, errlen, "hardware %s: shared_memory must be 0 or 1", n);
    if (hw->fused_elementwise != 0 && hw->fused_elementwise != 1)
        return ir_errf(err, errlen, "hardware %s: fused_elementwise must be 0 or 1", n);
    for (int k = 0; k < IR_N_OPS; k++)
        if (bad_num(hw->op_rate[k], 1))
            return ir_errf(err, errlen, "hardware %s: op_rates.%s must be >= 0", n, ir_op_name((ir_opkind)k));
    const cost_link *l[2] = {&hw->intra, &hw->inter};
    static const char *const ln[2] = {"intra_link", "inter_link"};
    for (int i = 0; i < 2; i++) {
        if (bad_num(l[i]->bandwidth, 0)) return ir_errf(err, errlen, "hardware %s: %s.bandwidth must be positive", n, ln[i]);
        if (bad_num(l[i]->latency, 1)) return ir_errf(err, errlen, "hardware %s: %s.latency must be >= 0", n, ln[i]);
    }
    if (hw->n_axis_links < 0 || hw->n_axis_links > SHARD_MAX_AXES)
        return ir_errf(err, errlen, "hardware %s: at most %d axis_links", n, SHARD_MAX_AXES);
    for (int i = 0; i < hw->n_axis_links; i++) {
        if (bad_num(hw->axis_links[i].bandwidth, 0))
            return ir_errf(err, errlen, "hardware %s: axis_links.%s.bandwidth must be positive", n, hw->axis_names[i]);
        if (bad_num(hw->axis_links[i].latency, 1))
            return ir_errf(err, errlen, "hardware %s: axis_links.%s.latency must be >= 0", n, hw->axis_names[i]);
    }
    return 0;
}

cost_link cost_axis_link(const cost_hw *hw, const shard_mesh *mesh, int axis)
{
    for (int i = 0; i < hw->n_axis_links; i++)
        if (!strcmp(hw->axis_names[i], mesh->names[axis])) return hw->axis_links[i];
    int64_t stride = 1;
    for (int a = axis + 1; a < mesh->n_axes; a++) stride *= mesh->sizes[a];
    return stride * mesh->sizes[axis] <= hw->node_devices ? hw->intra : hw->inter;
}

/* ---- JSON ---------------------------------------------------------------- */

/* Reads number `key` of object `o` into *out.  Missing: error unless `dflt`
 * is not NULL (then *out = *dflt).  Negative (or zero when !allow_zero): error. */
static int get_num(const cJSON *o, const char *key, const char *path, const char *where, const double *dflt,
                   int allow_zero, double *out, char *err, size_t errlen)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x) {
        if (dflt) {
            *out = *dflt;
            return 0;
        }
        return ir_errf(err, errlen, "%s: missing field '%s%s'", where, path, key);
    }
    if (!cJSON_IsNumber(x)) return ir_errf(err, errlen, "%s: field '%s%s' must be a number", where, path, key);
    double v = x->valuedouble;
    if (bad_num(v, allow_zero))
        return ir_errf(err, errlen, "%s: field '%s%s' must be %s, got %g", where, path, key,
                    allow_zero ? "a number >= 0" : "a positive number", v);
    *out = v;
    return 0;
}

static int get_link(const cJSON *o, const char *key, const char *where, cost_link *l, char *err, size_t errlen)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!x) return ir_errf(err, errlen, "%s: missing field '%s'", where, key);
    if (!cJSON_IsObject(x)) return ir_errf(err, errlen, "%s: field '%s' must be an object {bandwidth, latency}", where, key);
    char path[80];
    snprintf(path, sizeof path, "%s.", key);
    if (get_num(x, "bandwidth", path, where, NULL, 0, &l->bandwidth, err, errlen) < 0) return -1;
    return get_num(x, "latency", path, where, NULL, 1, &l->latency, err, errlen);
}

static int parse_doc(const cJSON *root, const char *where, cost_hw *hw, char *err, size_t errlen)
{
    memset(hw, 0, sizeof *hw);
    if (!cJSON_IsObject(root)) return ir_errf(err, errlen, "%s: a hardware profile must be a JSON object", where);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt)) return ir_errf(err, errlen, "%s: missing field 'format' (\"%s\")", where, COST_HW_FORMAT);
    if (strcmp(fmt->valuestring, COST_HW_FORMAT))
        return ir_errf(err, errlen, "%s: format '%s' is not %s", where, fmt->valuestring, COST_HW_FORMAT);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
    if (!cJSON_IsString(name) || !name->valuestring[0]) return ir_errf(err, errlen, "%s: missing field 'name'", where);
    snprintf(hw->name, sizeof hw->name, "%s", name->valuestring);
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(root, "source");
    if (cJSON_IsString(src)) snprintf(hw->source, sizeof hw->source, "%s", src->valuestring);
    const cJSON *pf = cJSON_GetObjectItemCaseSensitive(root, "peak_flops");
    if (!pf) return ir_errf(err, errlen, "%s: missing field 'peak_flops'", where);
    if (!cJSON_IsObject(pf)) return ir_errf(err, errlen, "%s: field 'peak_flops' must be an object {f32, bf16, f16}", where);
    if (get_num(pf, "f32", "peak_flops.", where, NULL, 0, &hw->matmul_flops[IR_F32], err, errlen) < 0) return -1;
    if (get_num(pf, "bf16", "peak_flops.", where, NULL, 0, &hw->matmul_flops[IR_BF16], err, errlen) < 0) return -1;
    if (get_num(pf, "f16", "peak_flops.", where, &hw->matmul_flops[IR_BF16], 0, &hw->matmul_flops[IR_F16], err, errlen) < 0)
        return -1;
    double zero = 0, node, cores;
    if (get_num(root, "vector_flops", "", where, NULL, 0, &hw->vector_flops, err, errlen) < 0 ||
        get_num(root, "memory_bandwidth", "", where, NULL, 0, &hw->mem_bandwidth, err, errlen) < 0 ||
        get_num(root, "memory_capacity", "", where, NULL, 0, &hw->mem_capacity, err, errlen) < 0 ||
        get_num(root, "op_overhead", "", where, &zero, 1, &hw->op_overhead, err, errlen) < 0 ||
        get_num(root, "node_devices", "", where, NULL, 0, &node, err, errlen) < 0 ||
        get_num(root, "cores", "", where, &zero, 1, &cores, err, errlen) < 0)
        return -1;
    if (node != floor(node) || node > 1e15) return ir_errf(err, errlen, "%s: field 'node_devices' must be an integer", where);
    if (cores != floor(cores) || cores > 1e6) return ir_errf(err, errlen, "%s: field 'cores' must be an integer", where);
    hw->node_devices = (int64_t)node;
    hw->cores = (int)cores;
    double shm, fused;
    if (get_num(root, "alone_speedup", "", where, &zero, 1, &hw->alone_speedup, err, errlen) < 0 ||
        get_num(root, "gemm_call", "", where, &zero, 1, &hw->gemm_call, err, errlen) < 0 ||
        get_num(root, "gemm_bandwidth", "", where, &zero, 1, &hw->gemm_bandwidth, err, errlen) < 0 ||
        get_num(root, "oversub_latency", "", where, &zero, 1, &hw->oversub_latency, err, errlen) < 0 ||
        get_num(root, "shared_memory", "", where, &zero, 1, &shm, err, errlen) < 0 ||
        get_num(root, "fused_elementwise", "", where, &zero, 1, &fused, err, errlen) < 0)
        return -1;
    if (shm != 0 && shm != 1) return ir_errf(err, errlen, "%s: field 'shared_memory' must be 0 or 1", where);
    if (fused != 0 && fused != 1) return ir_errf(err, errlen, "%s: field 'fused_elementwise' must be 0 or 1", where);
    hw->shared_memory = (int)shm;
    hw->fused_elementwise = (int)fused;
    const cJSON *rates = cJSON_GetObjectItemCaseSensitive(root, "op_rates");
    if (rates) {
        if (!cJSON_IsObject(rates)) return ir_errf(err, errlen, "%s: field 'op_rates' must be an object of op name -> elements/s", where);
        const cJSON *x;
        cJSON_ArrayForEach(x, rates)
        {
            int k = 0;
            while (k < IR_N_OPS && strcmp(ir_op_name((ir_opkind)k), x->string ? x->string : "")) k++;
            if (k == IR_N_OPS || k == IR_OP_EINSUM)
                return ir_errf(err, errlen, "%s: op_rates: '%s' is not an op other than einsum", where, x->string ? x->string : "");
            if (get_num(rates, x->string, "op_rates.", where, NULL, 1, &hw->op_rate[k], err, errlen) < 0) return -1;
        }
    }
    if (get_link(root, "intra_link", where, &hw->intra, err, errlen) < 0) return -1;
    if (get_link(root, "inter_link", where, &hw->inter, err, errlen) < 0) return -1;
    const cJSON *al = cJSON_GetObjectItemCaseSensitive(root, "axis_links");
    if (al) {
        if (!cJSON_IsObject(al)) return ir_errf(err, errlen, "%s: field 'axis_links' must be an object of axis name -> link", where);
        const cJSON *x;
        cJSON_ArrayForEach(x, al)
        {
            if (hw->n_axis_links == SHARD_MAX_AXES) return ir_errf(err, errlen, "%s: axis_links: at most %d axes", where, SHARD_MAX_AXES);
            if (!x->string || !x->string[0] || strlen(x->string) >= SHARD_AXIS_NAME)
                return ir_errf(err, errlen, "%s: axis_links: axis names take 1 to %d characters", where, SHARD_AXIS_NAME - 1);
            char key[80];
            snprintf(key, sizeof key, "axis_links.%s", x->string);
            if (!cJSON_IsObject(x)) return ir_errf(err, errlen, "%s: field '%s' must be an object {bandwidth, latency}", where, key);
            snprintf(hw->axis_names[hw->n_axis_links], SHARD_AXIS_NAME, "%s", x->string);
            cost_link *l = &hw->axis_links[hw->n_axis_links++];
            strcat(key, ".");
            if (get_num(x, "bandwidth", key, where, NULL, 0, &l->bandwidth, err, errlen) < 0) return -1;
            if (get_num(x, "latency", key, where, NULL, 1, &l->latency, err, errlen) < 0) return -1;
        }
    }
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
    FILE *f = fopen(path, "rb");
    if (!f) return ir_errf(err, errlen, "hardware file '%s': %s", path, strerror(errno));
    char *text = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 8192;
            if (cap > (64u << 20)) {
                free(text);
                fclose(f);
                return ir_errf(err, errlen, "hardware file '%s': larger than 64 MB", path);
            }
            char *t = realloc(text, cap);
            if (!t) {
                free(text);
                fclose(f);
                return ir_errf(err, errlen, "hardware file '%s': out of memory", path);
            }
            text = t;
        }
        size_t k = fread(text + n, 1, 4096, f);
        n += k;
        if (k < 4096) break;
    }
    int rd_err = ferror(f);
    fclose(f);
    if (rd_err) {
        free(text);
        return ir_errf(err, errlen, "hardware file '%s': read error", path);
    }
    text[n] = 0;
    int rc = cost_hw_from_json(text, path, hw, err, errlen);
    free(text);
    return rc;
}

int cost_hw_lookup(const char *name_or_path, cost_hw *hw, char *err, size_t errlen)
{
    for (int i = 0; preset_names[i]; i++)
        if (!strcmp(preset_names[i], name_or_path)) return cost_hw_preset(name_or_path, hw, err, errlen);
    if (access(name_or_path, F_OK) == 0) return cost_hw_load(name_or_path, hw, err, errlen);
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
    cJSON_AddItemToObject(r, "peak_flops", pf);
    add_num(r, "vector_flops", hw->vector_flops);
    add_num(r, "memory_bandwidth", hw->mem_bandwidth);
    add_num(r, "memory_capacity", hw->mem_capacity);
    add_num(r, "op_overhead", hw->op_overhead);
    add_num(r, "node_devices", (double)hw->node_devices);
    add_num(r, "cores", hw->cores);
    if (hw->alone_speedup > 0) add_num(r, "alone_speedup", hw->alone_speedup);
    if (hw->gemm_call > 0) add_num(r, "gemm_call", hw->gemm_call);
    if (hw->gemm_bandwidth > 0) add_num(r, "gemm_bandwidth", hw->gemm_bandwidth);
    if (hw->shared_memory) add_num(r, "shared_memory", hw->shared_memory);
    if (hw->fused_elementwise) add_num(r, "fused_elementwise", hw->fused_elementwise);
    if (hw->oversub_latency > 0) add_num(r, "oversub_latency", hw->oversub_latency);
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
    char *s = cJSON_Print(r);
    cJSON_Delete(r);
    return s;
}

int cost_hw_save(const cost_hw *hw, const char *path, char *err, size_t errlen)
{
    char *s = cost_hw_to_json(hw);
    if (!s) return ir_errf(err, errlen, "%s: out of memory", path);
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (!tmp) {
        free(s);
        return ir_errf(err, errlen, "%s: out of memory", path);
    }
    snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    int rc = 0;
    if (!f) rc = ir_errf(err, errlen, "cannot write '%s': %s", tmp, strerror(errno));
    else {
        int ok = fputs(s, f) >= 0 && fputc('\n', f) != EOF;
        ok &= fflush(f) == 0 && fsync(fileno(f)) == 0;
        ok &= fclose(f) == 0;
        if (!ok) rc = ir_errf(err, errlen, "cannot write '%s': %s", tmp, strerror(errno));
        else if (rename(tmp, path) != 0) rc = ir_errf(err, errlen, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        if (rc) remove(tmp);
    }
    free(tmp);
    free(s);
    return rc;
}
