/* plan.c - writing and reading plan files (see plan.h and docs/plan-format.md).
 *
 * plan_to_json builds the whole document from a plan's inputs (model, mesh,
 * hardware, options, schedule) and a propagated state, its program and its
 * estimate; plan_save writes it and plan_verify (verify.c) builds it again
 * from a loaded plan to compare.  Numbers that must come back exactly
 * (predicted times, bytes) are written with %.17g; cJSON would keep 15 digits.
 */
#define _GNU_SOURCE
#include "plan/plan.h"

#include "ir/hash.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

cJSON *plan_json_number(double x)
{
    char buf[40];
    if (x != x || x > 1e308 || x < -1e308) return cJSON_CreateNull();
    snprintf(buf, sizeof buf, "%.17g", x);
    return cJSON_CreateRaw(buf);
}

void plan_json_numbers(cJSON *o, const plan_json_field *f, size_t n)
{
    for (size_t i = 0; i < n; i++) cJSON_AddItemToObject(o, f[i].key, plan_json_number(f[i].value));
}

static cJSON *num(double x) { return plan_json_number(x); }

static cJSON *int_array(const int64_t *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, num((double)v[i]));
    return a;
}

cJSON *plan_pspec_json(const shard_mesh *m, const shard_spec *s, int rank)
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

char *plan_printable(const char *s, char *buf, size_t n)
{
    size_t k = 0;
    if (!n) return buf;
    for (; s && *s && k + 5 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c < 0x7f) buf[k++] = (char)c;
        else k += (size_t)snprintf(buf + k, n - k, "\\x%02x", c);
    }
    buf[k] = 0;
    return buf;
}

int plan_file_hash(const char *path, char out[24], char *why, size_t whylen)
{
    int fd = ir_open_input(path, why, whylen);
    if (fd < 0) return -1;
    /* at most what a graph file (256 MB) or an ONNX file (2 GiB) holds: not /proc/kcore's 128 TB */
    const uint64_t max = (uint64_t)2 << 30;
    const char *big = "larger than the 2 GiB a graph or ONNX file holds";
    struct stat st;
    uint64_t h = IR_FNV_OFFSET, total = 0;
    unsigned char buf[65536];
    int rc = fstat(fd, &st) == 0 && (uint64_t)st.st_size > max ? ir_errf(why, whylen, "%s", big) : 0;
    while (rc == 0) {
        ssize_t n = ir_read_full(fd, buf, sizeof buf);
        if (n < 0) rc = ir_errf(why, whylen, "cannot read: %s", strerror(errno));
        else if ((total += (uint64_t)n) > max) rc = ir_errf(why, whylen, "%s", big);
        else h = ir_fnv_bytes(h, buf, (size_t)n);
        if (n < (ssize_t)sizeof buf) break;
    }
    close(fd);
    snprintf(out, 24, "%016llx", (unsigned long long)h);
    return rc;
}

/* ---- the document ------------------------------------------------------- */

static void add_model(cJSON *j, const plan *pl, const ir_graph *g)
{
    cJSON *model = cJSON_AddObjectToObject(j, "model");
    if (pl->model[0]) cJSON_AddStringToObject(model, "spec", pl->model);
    else {
        cJSON_AddStringToObject(model, "graph", pl->graph_file);
        cJSON_AddStringToObject(model, "graph_hash", pl->graph_hash);
        if (pl->onnx_dims[0] || pl->onnx_loss[0] || pl->onnx_frozen[0] || pl->graph_attention[0]) { /* how it was read */
            cJSON *o = cJSON_AddObjectToObject(model, "import");
            if (pl->onnx_dims[0]) cJSON_AddStringToObject(o, "dims", pl->onnx_dims);
            if (pl->onnx_loss[0]) cJSON_AddStringToObject(o, "loss", pl->onnx_loss);
            if (pl->onnx_frozen[0]) cJSON_AddStringToObject(o, "frozen", pl->onnx_frozen);
            if (pl->graph_attention[0]) cJSON_AddStringToObject(o, "attention", pl->graph_attention);
        }
    }
    cJSON_AddStringToObject(model, "optimizer", pl->optimizer);
    cJSON_AddItemToObject(model, "params", num((double)ir_param_count(g)));
}

void plan_add_mesh(cJSON *j, const shard_mesh *m, int version)
{
    char buf[256];
    if (version == 1) {
        cJSON_AddStringToObject(j, "mesh", shard_mesh_str(m, buf, sizeof buf));
        cJSON_AddItemToObject(j, "devices", num((double)m->n_devices));
        return;
    }
    cJSON *mo = cJSON_AddObjectToObject(j, "mesh");
    cJSON *axes = cJSON_AddArrayToObject(mo, "axes");
    for (int a = 0; a < m->n_axes; a++) {
        cJSON *ax = cJSON_CreateObject();
        cJSON_AddStringToObject(ax, "name", m->names[a]);
        cJSON_AddItemToObject(ax, "size", num((double)m->sizes[a]));
        cJSON_AddItemToArray(axes, ax);
    }
    cJSON_AddStringToObject(mo, "device_order", "row-major");
    cJSON *ids = cJSON_AddArrayToObject(mo, "device_ids");
    for (int64_t d = 0; d < m->n_devices; d++) cJSON_AddItemToArray(ids, num((double)d));
    cJSON_AddItemToObject(j, "devices", num((double)m->n_devices));
}

static void add_decisions(cJSON *j, const shard_state *st)
{
    cJSON *dec = cJSON_AddArrayToObject(j, "decisions");
    for (int i = 0; i < st->n_log; i++) {
        const shard_decision *d = &st->log[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "kind", d->kind == SHARD_TILE ? "tile" : "atomic");
        cJSON_AddStringToObject(o, "arg", st->g->values[d->value].name);
        if (d->kind == SHARD_TILE) cJSON_AddNumberToObject(o, "dim", d->dim);
        cJSON_AddStringToObject(o, "axis", st->mesh.names[d->axis]);
        cJSON_AddItemToArray(dec, o);
    }
}

/* The sharding of value v: carve's text, the PartitionSpec, partial axes. */
static void add_sharding(cJSON *o, const shard_state *st, int v, int version)
{
    const ir_value *x = &st->g->values[v];
    const shard_spec *s = &st->spec[v];
    char buf[512];
    int64_t local[IR_MAX_RANK];
    cJSON_AddStringToObject(o, "sharding", shard_spec_str(&st->mesh, s, x->rank, buf, sizeof buf));
    cJSON_AddItemToObject(o, "partition_spec", plan_pspec_json(&st->mesh, s, x->rank));
    if (version >= 2) {
        cJSON *pa = cJSON_AddArrayToObject(o, "partial");
        for (int a = 0; a < st->mesh.n_axes; a++)
            if (s->partial & (1u << a)) cJSON_AddItemToArray(pa, cJSON_CreateString(st->mesh.names[a]));
        shard_local_dims(&st->mesh, x, s, local);
        cJSON_AddItemToObject(o, "local_shape", int_array(local, x->rank));
    }
    cJSON_AddItemToObject(o, "local_bytes", num((double)shard_local_bytes(&st->mesh, x, s)));
}

static void add_type(cJSON *o, const ir_value *x, int version)
{
    char buf[256];
    if (version == 1) {
        cJSON_AddStringToObject(o, "type", ir_type_str(x, buf, sizeof buf));
        return;
    }
    cJSON_AddStringToObject(o, "dtype", ir_dtype_name(x->dtype));
    cJSON_AddItemToObject(o, "shape", int_array(x->dims, x->rank));
}

static void add_arguments(cJSON *j, const shard_state *st, int version)
{
    const ir_graph *g = st->g;
    cJSON *args = cJSON_AddArrayToObject(j, "arguments");
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role == IR_INTERMEDIATE) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", x->name);
        cJSON_AddStringToObject(o, "role", ir_role_name(x->role));
        add_type(o, x, version);
        if (version >= 2) {
            cJSON_AddItemToObject(o, "layer", num(x->layer));
            if (x->role == IR_OPT_STATE && x->tied >= 0) cJSON_AddStringToObject(o, "of", g->values[x->tied].name);
        }
        add_sharding(o, st, v, version);
        cJSON_AddItemToArray(args, o);
    }
}

/* Named values the forward pass computes (not "%N" temporaries): where a user
 * of the plan finds them in their model and places a sharding constraint.
 * "boundary" marks the ones an op of another layer reads (layer outputs). */
static void add_activations(cJSON *j, const shard_state *st, const spmd_program *p)
{
    const ir_graph *g = st->g;
    cJSON *acts = cJSON_AddArrayToObject(j, "activations");
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role != IR_INTERMEDIATE || x->producer < 0 || x->name[0] == '%') continue;
        if (p->phase[x->producer] != SPMD_FORWARD) continue;
        int boundary = 0;
        for (int o = x->producer + 1; o < g->n_ops && !boundary; o++) {
            if (p->phase[o] != SPMD_FORWARD || g->ops[o].layer == x->layer) continue;
            for (int k = 0; k < g->ops[o].n_in; k++) boundary |= g->ops[o].in[k] == v;
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", x->name);
        cJSON_AddStringToObject(o, "op", ir_op_name(g->ops[x->producer].kind));
        cJSON_AddItemToObject(o, "layer", num(x->layer));
        cJSON_AddBoolToObject(o, "boundary", boundary);
        add_type(o, x, 2);
        add_sharding(o, st, v, 2);
        cJSON_AddItemToArray(acts, o);
    }
}

void plan_add_collectives(cJSON *j, const spmd_program *p)
{
    cJSON *coll = cJSON_AddObjectToObject(j, "collectives");
    for (int k = SPMD_ALL_GATHER; k < SPMD_N_KINDS; k++) {
        if (k == SPMD_SLICE) continue;
        if (spmd_kind_is_p2p(k) && !p->stats.count[k][SPMD_FORWARD] && !p->stats.count[k][SPMD_BACKWARD] &&
            !p->stats.count[k][SPMD_OPTIMIZER])
            continue;
        cJSON *ko = cJSON_AddObjectToObject(coll, spmd_kind_name((spmd_kind)k));
        for (int ph = 0; ph < SPMD_N_PHASES; ph++) {
            cJSON *po = cJSON_AddObjectToObject(ko, spmd_phase_name((spmd_phase)ph));
            cJSON_AddNumberToObject(po, "count", p->stats.count[k][ph]);
            cJSON_AddItemToObject(po, "bytes_per_device", num(p->stats.bytes[k][ph]));
        }
    }
}

static cJSON *at_peak(const cost_estimate *e)
{
    cJSON *pk = cJSON_CreateObject();
    PLAN_JSON_NUMBERS(pk, {"params", e->peak_params}, {"gathered_params", e->peak_gathered_params},
                          {"optimizer_states", e->peak_opt_states}, {"gradients", e->peak_grads},
                          {"activations", e->peak_activations}, {"other", e->peak_other});
    return pk;
}

/* Model states through the step (cost_estimate's model_state_*). */
static cJSON *model_states(const cost_estimate *e)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "params", num(e->model_state_params));
    cJSON_AddItemToObject(o, "optimizer_states", num(e->model_state_opt));
    cJSON_AddItemToObject(o, "gradients", num(e->model_state_grads));
    return o;
}

/* The one table of an estimate's figures as the documents name them. */
static cJSON *estimate_field(const cost_estimate *e, const char *key)
{
#define FIELD(name, item) \
    if (!strcmp(key, name)) return item;
    FIELD("step_time_s", num(e->step_time))
    FIELD("compute_s", num(e->compute_time))
    FIELD("communication_s", num(e->comm_time))
    FIELD("overlapped", cJSON_CreateBool(e->step_time < e->compute_time + e->comm_time))
    FIELD("serialisation", num(e->serialisation))
    FIELD("flops_per_device", num(e->flops))
    FIELD("communicated_bytes_per_device", num(e->comm_bytes))
    FIELD("wire_bytes_per_device", num(e->wire_bytes))
    FIELD("peak_memory_bytes", num(e->peak_memory))
    FIELD("memory_capacity_bytes", num(e->capacity))
    FIELD("fits", cJSON_CreateBool(e->fits))
    FIELD("at_peak_bytes", at_peak(e))
    FIELD("model_state_bytes", num(e->model_state_bytes))
    FIELD("model_states", model_states(e))
    FIELD("collective_launches", cJSON_CreateNumber(e->coll_launches))
#undef FIELD
    return NULL;
}

int plan_add_estimate(cJSON *j, const cost_estimate *e, const char *const *keys)
{
    for (; *keys; keys++) {
        cJSON *item = estimate_field(e, *keys);
        if (!item) return -1;
        cJSON_AddItemToObject(j, *keys, item);
    }
    return 0;
}

static void add_predicted(cJSON *j, const cost_estimate *e, int version)
{
    static const char *const v1[] = {"step_time_s", "compute_s", "communication_s", "peak_memory_bytes",
                                     "memory_capacity_bytes", "fits", NULL};
    static const char *const v2[] = {"flops_per_device", "communicated_bytes_per_device", "wire_bytes_per_device",
                                     "at_peak_bytes", NULL};
    cJSON *c = cJSON_AddObjectToObject(j, "predicted");
    plan_add_estimate(c, e, v1);
    if (version >= 2) plan_add_estimate(c, e, v2);
}

static void add_search(cJSON *j, const plan_search *s)
{
    char buf[32];
    cJSON *o = cJSON_AddObjectToObject(j, "search");
    cJSON_AddStringToObject(o, "algorithm", s->kind);
    PLAN_JSON_NUMBERS(o, {"budget_simulations", (double)s->budget}, {"budget_seconds", s->budget_seconds},
                         {"simulations", (double)s->simulations}, {"evaluations", (double)s->evaluations},
                         {"best_at_simulation", (double)s->best_at}, {"tree_nodes", (double)s->tree_nodes});
    cJSON_AddNumberToObject(o, "root_actions", s->root_actions);
    cJSON_AddItemToObject(o, "seconds", num(s->seconds));
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)s->seed);
    cJSON_AddItemToObject(o, "seed", cJSON_CreateRaw(buf));
    cJSON_AddNumberToObject(o, "threads", s->threads);
    cJSON_AddStringToObject(o, "stopped_by", s->stop);
    cJSON_AddBoolToObject(o, "gather_chosen", s->gather_chosen);
    plan_add_curve(o, s);
}

void plan_add_curve(cJSON *o, const plan_search *s)
{
    cJSON_AddItemToObject(o, "steps", num(s->steps));
    cJSON *c = cJSON_AddArrayToObject(o, "curve");
    for (int i = 0; i < s->n_curve; i++) {
        const search_point *p = &s->curve[i];
        cJSON *q = cJSON_CreateObject();
        PLAN_JSON_NUMBERS(q, {"steps", p->steps}, {"evaluations", (double)p->evaluations},
                             {"simulations", (double)p->simulations}, {"seconds", p->seconds}, {"step_time", p->best.step_time},
                             {"peak_bytes", p->best.peak_bytes});
        cJSON_AddBoolToObject(q, "fits", p->best.fits);
        cJSON_AddItemToArray(c, q);
    }
    cJSON *r = cJSON_AddArrayToObject(o, "experts_reached");
    for (int i = 0; i < s->n_reached; i++) {
        const plan_reached *e = &s->reached[i];
        cJSON *q = cJSON_CreateObject();
        cJSON_AddStringToObject(q, "schedule", e->schedule);
        cJSON_AddItemToObject(q, "step_time", num(e->step_time));
        if (e->steps >= 0) {
            cJSON_AddItemToObject(q, "steps", num(e->steps));
            cJSON_AddItemToObject(q, "seconds", num(e->seconds));
        } else {
            cJSON_AddNullToObject(q, "steps");
            cJSON_AddNullToObject(q, "seconds");
        }
        cJSON_AddItemToArray(r, q);
    }
}

cJSON *plan_to_json(const plan *pl, const shard_state *st, const spmd_program *p, const cost_estimate *e, int version)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "format", version == 1 ? PLAN_FORMAT_V1 : PLAN_FORMAT);
    add_model(j, pl, st->g);
    plan_add_mesh(j, &st->mesh, version);
    cJSON *hw = cJSON_AddObjectToObject(j, "hardware");
    cJSON_AddStringToObject(hw, "name", pl->hw_name);
    if (pl->hw) cJSON_AddItemToObject(hw, "profile", cJSON_Duplicate(pl->hw, 1));
    if (version >= 2) cJSON_AddItemToObject(j, "cost_options", plan_options_to_json(&pl->options));
    cJSON_AddStringToObject(j, "schedule", pl->schedule);
    add_decisions(j, st);
    add_arguments(j, st, version);
    if (version >= 2 && p) add_activations(j, st, p);
    if (p) plan_add_collectives(j, p);
    if (e) add_predicted(j, e, version);
    if (pl->search.kind[0]) add_search(j, &pl->search);
    return j;
}

/* ---- writing ------------------------------------------------------------ */

/* The folder of path (".", or up to its last slash), made absolute. */
static int abs_dir_of(const char *path, char *out)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else slash[slash == dir ? 1 : 0] = 0;
    return realpath(dir, out) ? 0 : -1;
}

/* The path of `target` relative to the folder `from` (both absolute). */
static void relative_to(const char *target, const char *from, char *out, size_t n)
{
    size_t common = 0, i = 0;
    for (; target[i] && target[i] == from[i]; i++)
        if (target[i] == '/') common = i;
    if (!from[i] && (target[i] == '/' || !target[i])) common = i; /* from is a prefix folder of target */
    size_t k = 0;
    out[0] = 0;
    for (const char *p = from + common; *p; p++)
        if (*p == '/' && k + 4 < n) k += (size_t)snprintf(out + k, n - k, "../");
    snprintf(out + k, n - k, "%s", target[common] == '/' ? target + common + 1 : target + common);
}

int plan_save(const char *path, plan *pl, const shard_state *st, const spmd_program *p, const cost_estimate *e,
              char *err, size_t errlen)
{
    if (!pl->model[0]) {
        char graph_abs[PATH_MAX], dir_abs[PATH_MAX];
        if (!realpath(pl->graph_path, graph_abs) || abs_dir_of(path, dir_abs) < 0)
            return ir_errf(err, errlen, "cannot write plan '%s': cannot resolve the graph file's path", path);
        relative_to(graph_abs, strcmp(dir_abs, "/") ? dir_abs : "", pl->graph_file, sizeof pl->graph_file);
    }
    cJSON *j = plan_to_json(pl, st, p, e, 2);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text) return ir_errf(err, errlen, "cannot write plan '%s': out of memory", path);
    size_t len = strlen(text);
    char *with_nl = malloc(len + 2);
    if (!with_nl) ir_oom(len + 2);
    memcpy(with_nl, text, len);
    with_nl[len] = '\n';
    with_nl[len + 1] = 0;
    cJSON_free(text);
    /* no link, device or partial file (ir/file.c) */
    int rc = ir_write_atomic(path, with_nl, len + 1, err, errlen);
    free(with_nl);
    return rc;
}
