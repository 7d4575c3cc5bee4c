/* load.c - reading a plan file (v1 and v2) into a plan (see plan.h).
 *
 * Only the inputs are taken from the file: model, optimizer, mesh, hardware,
 * cost options, schedule, decisions, search statistics.  Everything else in it
 * (argument shardings, activations, collectives, predicted cost) follows from
 * those and is checked by plan_verify against a rebuild, never trusted.  Every
 * message has the form "FILE: KEY: what is wrong" with printable characters
 * only (plan_printable).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plan/plan.h"

static const char *const keys_v2[] = {"format",    "model",     "mesh",      "devices",     "hardware",
                                      "cost_options", "schedule", "decisions", "arguments", "activations",
                                      "collectives", "predicted", "search", NULL};
static const char *const keys_v1[] = {"format",    "model",       "mesh",      "devices", "hardware", "schedule",
                                      "decisions", "arguments", "collectives", "predicted", "search", NULL};

static char *read_text(const char *path, char *err, size_t errlen)
{
    char pp[512], why[160];
    size_t n;
    char *t = ir_read_input(path, (size_t)1 << 28, &n, why, sizeof why);
    if (!t) {
        plan_printable(path, pp, sizeof pp);
        if (!strncmp(why, "larger than", 11)) ir_errf(err, errlen, "plan '%s': not a readable file under 256 MB", pp);
        else ir_errf(err, errlen, "cannot open plan '%s': %s", pp, why);
    }
    return t;
}

static const char *get_str(const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

static double get_num(const cJSON *o, const char *k, double dflt)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(x) ? x->valuedouble : dflt;
}

/* An integer field of a plan's statistics: dflt when absent, not a number or
 * outside [lo, hi] (a cast of 2e100 to an integer is undefined). */
static int64_t get_int(const cJSON *o, const char *k, int64_t dflt, double lo, double hi)
{
    double v = get_num(o, k, (double)dflt);
    return v >= lo && v <= hi ? (int64_t)v : dflt;
}

static int copy_str(char *dst, size_t n, const char *src)
{
    if (!src || strlen(src) >= n) return -1;
    strcpy(dst, src);
    return 0;
}

/* "FILE: KEY: what" (printable). Returns -1. */
__attribute__((format(printf, 5, 6))) static int fail(char *err, size_t errlen, const char *path, const char *key,
                                                      const char *fmt, ...)
{
    char pp[512], what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    char pw[1024];
    return ir_errf(err, errlen, "%s: %s: %s", plan_printable(path, pp, sizeof pp), key, plan_printable(what, pw, sizeof pw));
}

/* The first key held twice by any object inside j, or NULL. */
static const char *repeated_key_anywhere(const cJSON *j)
{
    const char *twice = cJSON_IsObject(j) ? ir_json_repeated_key(j) : NULL;
    for (const cJSON *c = j->child; c && !twice; c = c->next) twice = repeated_key_anywhere(c);
    return twice;
}

static int check_keys(const cJSON *j, const char *const *known, const char *path, char *err, size_t errlen)
{
    const cJSON *x;
    char pk[96];
    const char *twice = repeated_key_anywhere(j);
    if (twice) return fail(err, errlen, path, plan_printable(twice, pk, sizeof pk), "key given twice in one object");
    cJSON_ArrayForEach(x, j)
    {
        int i = 0;
        while (known[i] && strcmp(known[i], x->string)) i++;
        if (!known[i]) return fail(err, errlen, path, plan_printable(x->string, pk, sizeof pk), "unknown key (a plan has %s)", "format, model, mesh, hardware, schedule, decisions, ... (docs/plan-format.md)");
    }
    return 0;
}

static int load_model(const cJSON *j, plan *pl, const char *path, char *err, size_t errlen)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (!cJSON_IsObject(model)) return fail(err, errlen, path, "model", "missing (an object)");
    const char *spec = get_str(model, "spec"), *graph = get_str(model, "graph");
    if (spec ? copy_str(pl->model, sizeof pl->model, spec) : graph ? copy_str(pl->graph_file, sizeof pl->graph_file, graph) : -1)
        return fail(err, errlen, path, "model", "needs a \"spec\" or a \"graph\" (string)");
    if (graph && copy_str(pl->graph_hash, sizeof pl->graph_hash, get_str(model, "graph_hash") ? get_str(model, "graph_hash") : ""))
        return fail(err, errlen, path, "model.graph_hash", "must be 16 hex digits");
    const char *opt = get_str(model, "optimizer");
    if (copy_str(pl->optimizer, sizeof pl->optimizer, opt ? opt : "adam") || (strcmp(pl->optimizer, "adam") && strcmp(pl->optimizer, "sgd")))
        return fail(err, errlen, path, "model.optimizer", "must be adam or sgd");
    const cJSON *imp = cJSON_GetObjectItemCaseSensitive(model, "import");
    if (imp) { /* an ONNX file's import options (docs/onnx.md) */
        static const char *const keys[] = {"dims", "loss", "frozen", "attention", NULL};
        char *dst[] = {pl->onnx_dims, pl->onnx_loss, pl->onnx_frozen, pl->graph_attention};
        if (!graph || !cJSON_IsObject(imp)) return fail(err, errlen, path, "model.import", "must be an object, with a graph");
        for (const cJSON *x = imp->child; x; x = x->next) {
            int k = 0;
            while (keys[k] && strcmp(keys[k], x->string)) k++;
            if (!keys[k]) return fail(err, errlen, path, "model.import", "unknown key (dims, loss, frozen, attention)");
            if (!cJSON_IsString(x) || copy_str(dst[k], sizeof pl->onnx_dims, x->valuestring))
                return fail(err, errlen, path, "model.import", "values must be strings of at most 255 bytes");
        }
        if (pl->graph_attention[0] && strcmp(pl->graph_attention, "fused") && strcmp(pl->graph_attention, "materialized"))
            return fail(err, errlen, path, "model.import.attention", "must be fused or materialized");
    }
    if (!graph) return 0;
    /* v2: relative to the plan's folder; v1: relative to where carve ran, else the plan's folder */
    const char *slash = strrchr(path, '/');
    int in_dir = graph[0] != '/' && slash && (pl->version >= 2 || access(graph, F_OK) != 0);
    if (in_dir) snprintf(pl->graph_path, sizeof pl->graph_path, "%.*s/%s", (int)(slash - path), path, graph);
    else snprintf(pl->graph_path, sizeof pl->graph_path, "%s", graph);
    return 0;
}

static int load_mesh(const cJSON *j, plan *pl, const char *path, char *err, size_t errlen)
{
    char text[256], e2[256];
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "mesh");
    if (pl->version == 1) {
        if (!cJSON_IsString(m) || strlen(m->valuestring) >= sizeof text) return fail(err, errlen, path, "mesh", "missing or not a string");
        snprintf(text, sizeof text, "%s", m->valuestring);
    } else {
        const cJSON *axes = cJSON_GetObjectItemCaseSensitive(m, "axes"), *ax;
        if (!cJSON_IsObject(m) || !cJSON_IsArray(axes) || !cJSON_GetArraySize(axes))
            return fail(err, errlen, path, "mesh.axes", "missing (a list of {\"name\", \"size\"})");
        size_t k = 0;
        int i = 0;
        cJSON_ArrayForEach(ax, axes)
        {
            const char *name = get_str(ax, "name");
            double size = get_num(ax, "size", -1);
            if (!name || !(size >= 1 && size <= 1 << 20) || size != (double)(int64_t)size || strlen(name) > 32) {
                char key[32];
                snprintf(key, sizeof key, "mesh.axes[%d]", i);
                return fail(err, errlen, path, key, "needs a \"name\" and a positive integer \"size\"");
            }
            k += (size_t)snprintf(text + k, sizeof text - k, "%s%s=%lld", i++ ? "," : "", name, (long long)size);
            if (k >= sizeof text) return fail(err, errlen, path, "mesh.axes", "too long");
        }
    }
    if (shard_mesh_parse(text, &pl->mesh, e2, sizeof e2) < 0) return fail(err, errlen, path, "mesh", "%s", e2);
    return 0;
}

static int load_decisions(const cJSON *j, plan *pl, const char *path, char *err, size_t errlen)
{
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(j, "decisions"), *d;
    if (!cJSON_IsArray(dec)) return fail(err, errlen, path, "decisions", "missing (an array)");
    int n = cJSON_GetArraySize(dec), i = 0;
    pl->decisions = calloc((size_t)n + 1, sizeof *pl->decisions);
    pl->decision_names = calloc((size_t)n + 1, sizeof *pl->decision_names);
    if (!pl->decisions || !pl->decision_names) ir_oom(0);
    /* axis names are resolved at replay; keep them in the names array as "arg\naxis" */
    cJSON_ArrayForEach(d, dec)
    {
        const char *kind = get_str(d, "kind"), *arg = get_str(d, "arg"), *axis = get_str(d, "axis");
        const cJSON *dim = cJSON_GetObjectItemCaseSensitive(d, "dim");
        int tile = kind && !strcmp(kind, "tile");
        if (!kind || (!tile && strcmp(kind, "atomic")) || !arg || !axis ||
            (tile && (!cJSON_IsNumber(dim) || dim->valuedouble < 0 || dim->valuedouble >= IR_MAX_RANK ||
                      dim->valuedouble != (int)dim->valuedouble))) {
            char key[32];
            snprintf(key, sizeof key, "decisions[%d]", i);
            return fail(err, errlen, path, key, "needs \"kind\" (tile or atomic), \"arg\", \"axis\" and, to tile, \"dim\"");
        }
        pl->decisions[i] = (shard_decision){tile ? SHARD_TILE : SHARD_ATOMIC, (int8_t)(tile ? dim->valueint : 0), -1, -1};
        size_t la = strlen(arg), lx = strlen(axis);
        char *nm = malloc(la + lx + 2);
        if (!nm) ir_oom(la + lx + 2);
        memcpy(nm, arg, la);
        nm[la] = '\n';
        memcpy(nm + la + 1, axis, lx + 1);
        pl->decision_names[i] = nm;
        pl->n_decisions = ++i;
    }
    return 0;
}

static void load_search(const cJSON *se, plan_search *s)
{
    const char *alg = get_str(se, "algorithm"), *stop = get_str(se, "stopped_by");
    copy_str(s->kind, sizeof s->kind, alg ? alg : "");
    copy_str(s->stop, sizeof s->stop, stop ? stop : "");
    s->simulations = get_int(se, "simulations", 0, 0, 9e15);
    s->evaluations = get_int(se, "evaluations", 0, 0, 9e15);
    s->best_at = get_int(se, "best_at_simulation", 0, 0, 9e15);
    s->seconds = get_num(se, "seconds", 0);
    s->budget = get_int(se, "budget_simulations", 0, 0, 9e15);
    s->budget_seconds = get_num(se, "budget_seconds", 0);
    s->seed = (uint64_t)get_int(se, "seed", 0, 0, 9e15);
    s->threads = (int)get_int(se, "threads", 1, 1, 1 << 20);
    s->root_actions = (int)get_int(se, "root_actions", 0, 0, 1 << 30);
    s->gather_chosen = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(se, "gather_chosen"));
    s->tree_nodes = get_int(se, "tree_nodes", 0, 0, 9e15);
    s->steps = get_num(se, "steps", 0);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(se, "curve"), *q;
    s->n_curve = 0;
    if (!cJSON_IsArray(c)) c = NULL;
    cJSON_ArrayForEach(q, c)
    {
        if (s->n_curve == SEARCH_CURVE_MAX || !cJSON_IsObject(q)) break;
        const cJSON *fits = cJSON_GetObjectItemCaseSensitive(q, "fits");
        s->curve[s->n_curve++] = (search_point){get_num(q, "steps", 0), get_int(q, "evaluations", 0, 0, 9e15),
                                                get_int(q, "simulations", 0, 0, 9e15), get_num(q, "seconds", 0),
                                                {0, get_num(q, "step_time", 0), get_num(q, "peak_bytes", 0), cJSON_IsTrue(fits)}};
    }
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(se, "experts_reached");
    s->n_reached = 0;
    if (!cJSON_IsArray(r)) r = NULL;
    cJSON_ArrayForEach(q, r)
    {
        if (s->n_reached == PLAN_REACHED_MAX || !cJSON_IsObject(q)) break;
        plan_reached *e = &s->reached[s->n_reached++];
        const char *sched = get_str(q, "schedule");
        e->schedule[0] = 0;
        copy_str(e->schedule, sizeof e->schedule, sched ? sched : "");
        e->step_time = get_num(q, "step_time", 0);
        e->steps = get_num(q, "steps", -1);
        e->seconds = get_num(q, "seconds", -1);
    }
}

static int load_doc(const cJSON *j, plan *pl, const char *path, char *err, size_t errlen)
{
    const char *fmt = get_str(j, "format");
    if (fmt && !strcmp(fmt, PLAN_FORMAT)) pl->version = 2;
    else if (fmt && !strcmp(fmt, PLAN_FORMAT_V1)) pl->version = 1;
    else return fail(err, errlen, path, "format", "must be \"%s\" or \"%s\"%s", PLAN_FORMAT, PLAN_FORMAT_V1, fmt ? "" : " (is this a plan file?)");
    if (check_keys(j, pl->version == 2 ? keys_v2 : keys_v1, path, err, errlen) < 0) return -1;
    if (load_model(j, pl, path, err, errlen) < 0 || load_mesh(j, pl, path, err, errlen) < 0) return -1;
    const char *sched = get_str(j, "schedule");
    if (copy_str(pl->schedule, sizeof pl->schedule, sched ? sched : ""))
        return fail(err, errlen, path, "schedule", "longer than %zu characters", sizeof pl->schedule - 1);
    const cJSON *hw = cJSON_GetObjectItemCaseSensitive(j, "hardware");
    if (cJSON_IsObject(hw)) {
        const char *hn = get_str(hw, "name");
        copy_str(pl->hw_name, sizeof pl->hw_name, hn ? hn : "");
        const cJSON *prof = cJSON_GetObjectItemCaseSensitive(hw, "profile");
        if (cJSON_IsObject(prof)) pl->hw = cJSON_Duplicate(prof, 1);
    }
    if (pl->version >= 2) {
        char e2[256];
        const cJSON *co = cJSON_GetObjectItemCaseSensitive(j, "cost_options");
        if (!co) return fail(err, errlen, path, "cost_options", "missing (an object)");
        if (plan_options_from_json(co, &pl->options, e2, sizeof e2) < 0) return fail(err, errlen, path, "cost_options", "%s", e2);
    }
    if (load_decisions(j, pl, path, err, errlen) < 0) return -1;
    if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(j, "arguments")))
        return fail(err, errlen, path, "arguments", "missing (an array)");
    const cJSON *pc = cJSON_GetObjectItemCaseSensitive(j, "predicted");
    if (cJSON_IsObject(pc)) {
        pl->has_predicted = 1;
        pl->predicted.step_time = get_num(pc, "step_time_s", 0);
        pl->predicted.compute_time = get_num(pc, "compute_s", 0);
        pl->predicted.comm_time = get_num(pc, "communication_s", 0);
        pl->predicted.peak_memory = get_num(pc, "peak_memory_bytes", 0);
        pl->predicted.capacity = get_num(pc, "memory_capacity_bytes", 0);
        pl->predicted.fits = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pc, "fits"));
    }
    const cJSON *se = cJSON_GetObjectItemCaseSensitive(j, "search");
    if (cJSON_IsObject(se)) load_search(se, &pl->search);
    return 0;
}

int plan_load(const char *path, plan *pl, char *err, size_t errlen)
{
    memset(pl, 0, sizeof *pl);
    char *text = read_text(path, err, errlen);
    if (!text) return -1;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(text, &end, 1);
    int rc = -1;
    if (!j) {
        char pp[512];
        ir_errf(err, errlen, "plan '%s': malformed JSON near byte %zu", plan_printable(path, pp, sizeof pp),
                end ? (size_t)(end - text) : 0);
    } else if (!cJSON_IsObject(j)) {
        fail(err, errlen, path, "(top)", "a plan is a JSON object");
    } else {
        rc = load_doc(j, pl, path, err, errlen);
    }
    free(text);
    if (rc) {
        cJSON_Delete(j);
        plan_free(pl);
    } else {
        pl->doc = j;
    }
    return rc;
}

void plan_free(plan *pl)
{
    if (pl->decision_names)
        for (int i = 0; i < pl->n_decisions; i++) free(pl->decision_names[i]);
    free(pl->decision_names);
    free(pl->decisions);
    cJSON_Delete(pl->hw);
    cJSON_Delete(pl->doc);
    pl->decision_names = NULL;
    pl->decisions = NULL;
    pl->hw = NULL;
    pl->doc = NULL;
    pl->n_decisions = 0;
}
