/* plan.c - writing, reading and replaying plan files (see plan.h and
 * docs/plan-format.md).  Numbers that must come back exactly (predicted times,
 * bytes) are written with %.17g; cJSON would keep 15 digits. */
#define _GNU_SOURCE
#include "plan.h"

#include "cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static cJSON *num(double x)
{
    char buf[40];
    if (x != x || x > 1e308 || x < -1e308) return cJSON_CreateNull();
    snprintf(buf, sizeof buf, "%.17g", x);
    return cJSON_CreateRaw(buf);
}

static cJSON *pspec_json(const shard_mesh *m, const shard_spec *s, int rank)
{
    cJSON *a = cJSON_CreateArray();
    for (int d = 0; d < rank; d++) {
        if (s->n[d] == 0) cJSON_AddItemToArray(a, cJSON_CreateNull());
        else if (s->n[d] == 1) cJSON_AddItemToArray(a, cJSON_CreateString(m->names[s->axes[d][0]]));
        else {
            cJSON *b = cJSON_CreateArray();
            for (int k = 0; k < s->n[d]; k++) cJSON_AddItemToArray(b, cJSON_CreateString(m->names[s->axes[d][k]]));
            cJSON_AddItemToArray(a, b);
        }
    }
    return a;
}

int plan_file_hash(const char *path, char out[24])
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    uint64_t h = 1469598103934665603ull;
    int c;
    while ((c = getc(f)) != EOF) h = (h ^ (unsigned char)c) * 1099511628211ull;
    fclose(f);
    snprintf(out, 24, "%016llx", (unsigned long long)h);
    return 0;
}

/* Writes text to path atomically (ir_write_atomic: no link, device or
 * partial file). */
static int write_atomic(const char *path, const char *text, char *err, size_t errlen)
{
    return ir_write_atomic(path, text, strlen(text), err, errlen);
}

int plan_save(const char *path, const plan *pl, const shard_state *st, const spmd_program *p, char *err, size_t errlen)
{
    const ir_graph *g = st->g;
    const shard_mesh *m = st->mesh;
    char buf[512];
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", "carve-plan/1");
    cJSON *model = cJSON_AddObjectToObject(j, "model");
    if (pl->model[0]) cJSON_AddStringToObject(model, "spec", pl->model);
    else {
        cJSON_AddStringToObject(model, "graph", pl->graph_file);
        cJSON_AddStringToObject(model, "graph_hash", pl->graph_hash);
    }
    cJSON_AddStringToObject(model, "optimizer", pl->optimizer);
    cJSON_AddItemToObject(model, "params", num((double)ir_param_count(g)));
    cJSON_AddStringToObject(j, "mesh", shard_mesh_str(m, buf, sizeof buf));
    cJSON_AddItemToObject(j, "devices", num((double)m->n_devices));
    cJSON *hw = cJSON_AddObjectToObject(j, "hardware");
    cJSON_AddStringToObject(hw, "name", pl->hw_name);
    if (pl->hw) cJSON_AddItemToObject(hw, "profile", cJSON_Duplicate(pl->hw, 1));
    cJSON_AddStringToObject(j, "schedule", pl->schedule);
    cJSON *dec = cJSON_AddArrayToObject(j, "decisions");
    for (int i = 0; i < st->n_log; i++) {
        const shard_decision *d = &st->log[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "kind", d->kind == SHARD_TILE ? "tile" : "atomic");
        cJSON_AddStringToObject(o, "arg", g->values[d->value].name);
        if (d->kind == SHARD_TILE) cJSON_AddNumberToObject(o, "dim", d->dim);
        cJSON_AddStringToObject(o, "axis", m->names[d->axis]);
        cJSON_AddItemToArray(dec, o);
    }
    cJSON *args = cJSON_AddArrayToObject(j, "arguments");
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role == IR_INTERMEDIATE) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", x->name);
        cJSON_AddStringToObject(o, "role", ir_role_name(x->role));
        cJSON_AddStringToObject(o, "type", ir_type_str(x, buf, sizeof buf));
        cJSON_AddStringToObject(o, "sharding", shard_spec_str(m, &st->spec[v], x->rank, buf, sizeof buf));
        cJSON_AddItemToObject(o, "partition_spec", pspec_json(m, &st->spec[v], x->rank));
        cJSON_AddItemToObject(o, "local_bytes", num((double)shard_local_bytes(m, x, &st->spec[v])));
        cJSON_AddItemToArray(args, o);
    }
    if (p) {
        cJSON *coll = cJSON_AddObjectToObject(j, "collectives");
        for (int k = SPMD_ALL_GATHER; k < SPMD_N_KINDS; k++) {
            if (k == SPMD_SLICE) continue;
            cJSON *ko = cJSON_AddObjectToObject(coll, spmd_kind_name((spmd_kind)k));
            for (int ph = 0; ph < SPMD_N_PHASES; ph++) {
                cJSON *po = cJSON_AddObjectToObject(ko, spmd_phase_name((spmd_phase)ph));
                cJSON_AddNumberToObject(po, "count", p->stats.count[k][ph]);
                cJSON_AddItemToObject(po, "bytes_per_device", num(p->stats.bytes[k][ph]));
            }
        }
    }
    if (pl->cost.valid) {
        cJSON *c = cJSON_AddObjectToObject(j, "predicted");
        cJSON_AddItemToObject(c, "step_time_s", num(pl->cost.step_time));
        cJSON_AddItemToObject(c, "compute_s", num(pl->cost.compute));
        cJSON_AddItemToObject(c, "communication_s", num(pl->cost.comm));
        cJSON_AddItemToObject(c, "peak_memory_bytes", num(pl->cost.peak_bytes));
        cJSON_AddItemToObject(c, "memory_capacity_bytes", num(pl->cost.capacity_bytes));
        cJSON_AddBoolToObject(c, "fits", pl->cost.fits);
    }
    if (pl->search.kind[0]) {
        const plan_search *s = &pl->search;
        cJSON *o = cJSON_AddObjectToObject(j, "search");
        cJSON_AddStringToObject(o, "algorithm", s->kind);
        cJSON_AddItemToObject(o, "budget_simulations", num((double)s->budget));
        cJSON_AddItemToObject(o, "budget_seconds", num(s->budget_seconds));
        cJSON_AddItemToObject(o, "simulations", num((double)s->simulations));
        cJSON_AddItemToObject(o, "evaluations", num((double)s->evaluations));
        cJSON_AddItemToObject(o, "best_at_simulation", num((double)s->best_at));
        cJSON_AddItemToObject(o, "tree_nodes", num((double)s->tree_nodes));
        cJSON_AddNumberToObject(o, "root_actions", s->root_actions);
        cJSON_AddItemToObject(o, "seconds", num(s->seconds));
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)s->seed);
        cJSON_AddItemToObject(o, "seed", cJSON_CreateRaw(buf));
        cJSON_AddNumberToObject(o, "threads", s->threads);
        cJSON_AddStringToObject(o, "stopped_by", s->stop);
    }
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text) return ir_errf(err, errlen, "cannot write plan '%s': out of memory", path);
    size_t len = strlen(text);
    char *with_nl = malloc(len + 2);
    if (!with_nl) abort();
    memcpy(with_nl, text, len);
    with_nl[len] = '\n';
    with_nl[len + 1] = 0;
    cJSON_free(text);
    int rc = write_atomic(path, with_nl, err, errlen);
    free(with_nl);
    return rc;
}

/* ---- loading ------------------------------------------------------------ */

static char *read_file(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        ir_errf(err, errlen, "cannot open plan '%s': %s", path, strerror(errno));
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        ir_errf(err, errlen, "cannot read plan '%s' (not a regular file?)", path);
        return NULL;
    }
    long n = ftell(f);
    if (n < 0 || n > (1L << 28)) {
        fclose(f);
        ir_errf(err, errlen, "plan '%s': not a readable file under 256 MB", path);
        return NULL;
    }
    rewind(f);
    char *t = malloc((size_t)n + 1);
    if (!t) abort();
    if (fread(t, 1, (size_t)n, f) != (size_t)n) {
        free(t);
        fclose(f);
        ir_errf(err, errlen, "cannot read plan '%s'", path);
        return NULL;
    }
    t[n] = 0;
    fclose(f);
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

int plan_load(const char *path, plan *pl, char *err, size_t errlen)
{
    memset(pl, 0, sizeof *pl);
    char *text = read_file(path, err, errlen);
    if (!text) return -1;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(text, &end, 1);
    int rc = -1;
    if (!j) {
        size_t off = end ? (size_t)(end - text) : 0;
        ir_errf(err, errlen, "plan '%s': malformed JSON near byte %zu", path, off);
        goto out;
    }
    const char *fmt = get_str(j, "format");
    if (!fmt || strcmp(fmt, "carve-plan/1")) {
        ir_errf(err, errlen, "plan '%s': \"format\" must be \"carve-plan/1\"%s", path, fmt ? "" : " (is this a plan file?)");
        goto out;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (!cJSON_IsObject(model)) {
        ir_errf(err, errlen, "plan '%s': missing \"model\"", path);
        goto out;
    }
    const char *spec = get_str(model, "spec"), *graph = get_str(model, "graph");
    if (spec ? copy_str(pl->model, sizeof pl->model, spec) : graph ? copy_str(pl->graph_file, sizeof pl->graph_file, graph) : -1) {
        ir_errf(err, errlen, "plan '%s': \"model\" needs a \"spec\" or a \"graph\" (string)", path);
        goto out;
    }
    if (graph && copy_str(pl->graph_hash, sizeof pl->graph_hash, get_str(model, "graph_hash") ? get_str(model, "graph_hash") : "")) {
        ir_errf(err, errlen, "plan '%s': bad \"graph_hash\"", path);
        goto out;
    }
    const char *opt = get_str(model, "optimizer");
    if (copy_str(pl->optimizer, sizeof pl->optimizer, opt ? opt : "adam") || (strcmp(pl->optimizer, "adam") && strcmp(pl->optimizer, "sgd"))) {
        ir_errf(err, errlen, "plan '%s': \"optimizer\" must be adam or sgd", path);
        goto out;
    }
    if (copy_str(pl->mesh, sizeof pl->mesh, get_str(j, "mesh"))) {
        ir_errf(err, errlen, "plan '%s': missing or bad \"mesh\"", path);
        goto out;
    }
    const char *sched = get_str(j, "schedule");
    copy_str(pl->schedule, sizeof pl->schedule, sched ? sched : "");
    const cJSON *hw = cJSON_GetObjectItemCaseSensitive(j, "hardware");
    if (cJSON_IsObject(hw)) {
        const char *hn = get_str(hw, "name");
        copy_str(pl->hw_name, sizeof pl->hw_name, hn ? hn : "");
        const cJSON *prof = cJSON_GetObjectItemCaseSensitive(hw, "profile");
        if (cJSON_IsObject(prof)) pl->hw = cJSON_Duplicate(prof, 1);
    }
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(j, "decisions");
    if (!cJSON_IsArray(dec)) {
        ir_errf(err, errlen, "plan '%s': missing \"decisions\" (an array)", path);
        goto out;
    }
    int n = cJSON_GetArraySize(dec);
    pl->decisions = calloc((size_t)n + 1, sizeof *pl->decisions);
    pl->decision_names = calloc((size_t)n + 1, sizeof *pl->decision_names);
    if (!pl->decisions || !pl->decision_names) abort();
    /* axis names are resolved at replay; keep them in the names array as "arg\naxis" */
    int i = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, dec)
    {
        const char *kind = get_str(d, "kind"), *arg = get_str(d, "arg"), *axis = get_str(d, "axis");
        const cJSON *dim = cJSON_GetObjectItemCaseSensitive(d, "dim");
        int tile = kind && !strcmp(kind, "tile");
        if (!kind || (!tile && strcmp(kind, "atomic")) || !arg || !axis ||
            (tile && (!cJSON_IsNumber(dim) || dim->valuedouble < 0 || dim->valuedouble >= IR_MAX_RANK ||
                      dim->valuedouble != (int)dim->valuedouble))) {
            ir_errf(err, errlen, "plan '%s': decisions[%d] needs \"kind\" (tile or atomic), \"arg\", \"axis\" and, to tile, \"dim\"",
                 path, i);
            goto out;
        }
        pl->decisions[i] = (shard_decision){tile ? SHARD_TILE : SHARD_ATOMIC, (int8_t)(tile ? dim->valueint : 0), -1, -1};
        size_t la = strlen(arg), lx = strlen(axis);
        char *nm = malloc(la + lx + 2);
        if (!nm) abort();
        memcpy(nm, arg, la);
        nm[la] = '\n';
        memcpy(nm + la + 1, axis, lx + 1);
        pl->decision_names[i] = nm;
        pl->n_decisions = ++i;
    }
    /* expected argument shardings, kept for the replay check */
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(j, "arguments");
    if (!cJSON_IsArray(args)) {
        ir_errf(err, errlen, "plan '%s': missing \"arguments\" (an array)", path);
        goto out;
    }
    pl->search.kind[0] = 0;
    const cJSON *pc = cJSON_GetObjectItemCaseSensitive(j, "predicted");
    if (cJSON_IsObject(pc)) {
        pl->cost.valid = 1;
        pl->cost.step_time = get_num(pc, "step_time_s", 0);
        pl->cost.compute = get_num(pc, "compute_s", 0);
        pl->cost.comm = get_num(pc, "communication_s", 0);
        pl->cost.peak_bytes = get_num(pc, "peak_memory_bytes", 0);
        pl->cost.capacity_bytes = get_num(pc, "memory_capacity_bytes", 0);
        pl->cost.fits = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pc, "fits"));
    }
    const cJSON *se = cJSON_GetObjectItemCaseSensitive(j, "search");
    if (cJSON_IsObject(se)) {
        const char *alg = get_str(se, "algorithm"), *stop = get_str(se, "stopped_by");
        copy_str(pl->search.kind, sizeof pl->search.kind, alg ? alg : "");
        copy_str(pl->search.stop, sizeof pl->search.stop, stop ? stop : "");
        pl->search.simulations = get_int(se, "simulations", 0, 0, 9e15);
        pl->search.evaluations = get_int(se, "evaluations", 0, 0, 9e15);
        pl->search.best_at = get_int(se, "best_at_simulation", 0, 0, 9e15);
        pl->search.seconds = get_num(se, "seconds", 0);
        pl->search.budget = get_int(se, "budget_simulations", 0, 0, 9e15);
        pl->search.budget_seconds = get_num(se, "budget_seconds", 0);
        pl->search.seed = (uint64_t)get_int(se, "seed", 0, 0, 9e15);
        pl->search.threads = (int)get_int(se, "threads", 1, 1, 1 << 20);
        pl->search.root_actions = (int)get_int(se, "root_actions", 0, 0, 1 << 30);
        pl->search.tree_nodes = get_int(se, "tree_nodes", 0, 0, 9e15);
    }
    rc = 0;
out:
    cJSON_Delete(j);
    free(text);
    if (rc) plan_free(pl);
    return rc;
}

int plan_replay(plan *pl, const char *path, shard_state *st, char *err, size_t errlen)
{
    const ir_graph *g = st->g;
    const shard_mesh *m = st->mesh;
    char e2[256];
    for (int i = 0; i < pl->n_decisions; i++) {
        char name[512];
        snprintf(name, sizeof name, "%s", pl->decision_names[i]);
        char *nl = strchr(name, '\n');
        if (!nl) return ir_errf(err, errlen, "plan '%s': decisions[%d] is damaged", path, i);
        *nl = 0;
        int v = ir_find(g, name), a = shard_mesh_axis(m, nl + 1);
        if (v < 0) return ir_errf(err, errlen, "plan '%s' does not match the model: no argument '%s' (decisions[%d])", path, name, i);
        if (a < 0) return ir_errf(err, errlen, "plan '%s' does not match the mesh: no axis '%s' (decisions[%d])", path, nl + 1, i);
        pl->decisions[i].value = v;
        pl->decisions[i].axis = (int8_t)a;
        if (shard_apply(st, &pl->decisions[i], e2, sizeof e2) < 0)
            return ir_errf(err, errlen, "plan '%s' does not match the model: decisions[%d]: %s", path, i, e2);
    }
    /* The argument shardings must come out as the file says. */
    char *text = read_file(path, err, errlen);
    if (!text) return -1;
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *args = j ? cJSON_GetObjectItemCaseSensitive(j, "arguments") : NULL, *a;
    int rc = 0, seen = 0;
    char buf[256], ty[128];
    cJSON_ArrayForEach(a, args)
    {
        const char *name = get_str(a, "name"), *sh = get_str(a, "sharding"), *type = get_str(a, "type");
        int v = name ? ir_find(g, name) : -1;
        if (v < 0 || g->values[v].role == IR_INTERMEDIATE) {
            rc = ir_errf(err, errlen, "plan '%s' does not match the model: it has no argument '%s'", path, name ? name : "?");
            break;
        }
        seen++;
        if (type && strcmp(type, ir_type_str(&g->values[v], ty, sizeof ty))) {
            rc = ir_errf(err, errlen, "plan '%s' does not match the model: '%s' is %s in the plan but %s here", path, name, type, ty);
            break;
        }
        shard_spec_str(m, &st->spec[v], g->values[v].rank, buf, sizeof buf);
        if (!sh || strcmp(sh, buf)) {
            rc = ir_errf(err, errlen, "plan '%s': '%s' comes out sharded %s here but %s in the plan (another model or mesh, or an edited file?)",
                      path, name, buf, sh ? sh : "(missing)");
            break;
        }
    }
    if (!rc) {
        int n_args = 0;
        for (int v = 0; v < g->n_values; v++) n_args += g->values[v].role != IR_INTERMEDIATE;
        if (seen != n_args)
            rc = ir_errf(err, errlen, "plan '%s' does not match the model: it lists %d arguments, the model has %d", path, seen, n_args);
    }
    cJSON_Delete(j);
    return rc;
}

void plan_free(plan *pl)
{
    if (pl->decision_names)
        for (int i = 0; i < pl->n_decisions; i++) free(pl->decision_names[i]);
    free(pl->decision_names);
    free(pl->decisions);
    cJSON_Delete(pl->hw);
    pl->decision_names = NULL;
    pl->decisions = NULL;
    pl->hw = NULL;
    pl->n_decisions = 0;
}

ir_graph *plan_build_graph(const plan *pl, const char *path)
{
    cli_opts o;
    memset(&o, 0, sizeof o);
    o.optimizer = pl->optimizer;
    o.mesh = pl->mesh;
    o.schedule = pl->schedule[0] ? pl->schedule : NULL;
    char text[512];
    if (pl->model[0]) {
        o.model = pl->model;
    } else {
        char h[24];
        if (plan_file_hash(pl->graph_file, h) < 0) {
            cli_error("plan '%s': its graph file '%s' cannot be read", path, pl->graph_file);
            return NULL;
        }
        if (strcmp(h, pl->graph_hash)) {
            cli_error("plan '%s': graph file '%s' changed since the plan was made (hash %s, plan has %s)", path,
                      pl->graph_file, h, pl->graph_hash);
            return NULL;
        }
        o.graph = pl->graph_file;
    }
    return cli_load_step(&o, text, sizeof text);
}

int plan_open(const char *cmd, const char *path, plan *pl, shard_mesh *mesh, ir_graph **g, shard_state **st)
{
    char err[512];
    *g = NULL;
    *st = NULL;
    if (plan_load(path, pl, err, sizeof err) < 0) {
        cli_error("%s: %s", cmd, err);
        return CLI_BAD_INPUT;
    }
    if (shard_mesh_parse(pl->mesh, mesh, err, sizeof err) < 0) {
        cli_error("%s: plan '%s': %s", cmd, path, err);
        plan_free(pl);
        return CLI_BAD_INPUT;
    }
    if (!(*g = plan_build_graph(pl, path))) {
        plan_free(pl);
        return CLI_BAD_INPUT;
    }
    *st = shard_state_new(*g, mesh);
    if (plan_replay(pl, path, *st, err, sizeof err) < 0) {
        cli_error("%s: %s", cmd, err);
        shard_state_free(*st);
        ir_free(*g);
        *st = NULL;
        *g = NULL;
        plan_free(pl);
        return CLI_BAD_INPUT;
    }
    return 0;
}
