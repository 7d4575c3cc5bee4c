/* json.c - graph files: load and save the "carve-graph/1" JSON format
 * (docs/graph-format.md).
 *
 * Saving writes the text itself (not through cJSON's printer): one argument
 * and one op a line, doubles in the shortest form that reads back to the same
 * bits (cJSON would print 15 digits), infinities and NaN as strings.
 *
 * Loading parses with cJSON and rebuilds the graph only through the builder
 * (ir_arg, ir_add_op, ir_set_init, ir_add_output, ir_set_loss), so every
 * shape rule applies to files as it does to C code.  A loader owns, for the
 * time of one load, the parsed args, a hash table from every name in the file
 * to its value, and the caller's error buffer; the first error wins and is
 * one line that names its place ("ops[3] (\"h\"): ...").
 *
 * Arguments are created lazily, in file order, when an op first reads one or
 * when an automatic name "%<k>" says value k comes next: so a file saved from
 * a graph whose arguments were declared between ops (a model built layer by
 * layer, a training step that appends optimizer states) loads back with the
 * same value ids and the same automatic names.  A hand-edited file whose
 * "%<k>" labels no longer match their positions still loads: such values keep
 * their label as name (set directly, then the name index is rebuilt once by
 * cloning the graph).
 */
#include "hash.h"
#include "ir.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define JSON_FORMAT "carve-graph/1"
#define JSON_MAX_BYTES ((size_t)256 << 20) /* refuse files above 256 MB */
#define JSON_MAX_ENTRIES (1 << 22)         /* args, ops, outputs: at most 4M each */
#define JSON_MAX_LAYER (1 << 20)
#define JSON_MAX_INT 9007199254740992.0    /* 2^53: larger JSON numbers are not exact */

/* ---- what each op reads from its entry --------------------------------- */


/* The attribute fields op k takes (F_* bits, ops.def's attrs column); the
 * saver writes exactly these. */
static unsigned op_fields(ir_opkind k)
{
#define X(e, name, arity, cls, count, coef, bytes, grads, partial, ids, domain, pad, shape, rule, vjp, calib, kern, attrs) attrs,
    static const unsigned fields[IR_N_OPS] = {
#include "ops.def"
    };
#undef X
    return fields[k];
}

/* ======================================================================== *
 *  Saving                                                                  *
 * ======================================================================== */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_cat(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* A JSON string literal: quotes, backslashes and control bytes escaped; other
 * bytes (UTF-8) copied as they are. */
static void sb_str(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    const char *run = s;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        sb_put(b, run, (size_t)(s - run));
        run = s + 1;
        switch (c) {
        case '"': sb_cat(b, "\\\""); break;
        case '\\': sb_cat(b, "\\\\"); break;
        case '\n': sb_cat(b, "\\n"); break;
        case '\t': sb_cat(b, "\\t"); break;
        case '\r': sb_cat(b, "\\r"); break;
        default: sb_printf(b, "\\u%04x", c); break;
        }
    }
    sb_put(b, run, (size_t)(s - run));
    sb_put(b, "\"", 1);
}

/* A double in the shortest %.Ng (N = 15..17) that reads back to the same
 * value; infinities and NaN, which JSON has no numbers for, as strings. */
static void sb_double(sbuf *b, double x)
{
    if (isnan(x)) {
        sb_cat(b, signbit(x) ? "\"-nan\"" : "\"nan\"");
        return;
    }
    if (isinf(x)) {
        sb_cat(b, x < 0 ? "\"-inf\"" : "\"inf\"");
        return;
    }
    char tmp[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, x);
        if (strtod(tmp, NULL) == x) break;
    }
    sb_cat(b, tmp);
}

static void sb_dims(sbuf *b, int n, const int64_t *d)
{
    sb_put(b, "[", 1);
    for (int i = 0; i < n; i++) sb_printf(b, "%s%lld", i ? ", " : "", (long long)d[i]);
    sb_put(b, "]", 1);
}

static void sb_key(sbuf *b, const char *key)
{
    sb_cat(b, ", \"");
    sb_cat(b, key);
    sb_cat(b, "\": ");
}

/* An argument's attached elements (ir_data): integers, or floats in the
 * shortest form that reads back to the same f32 bits ("inf", "nan" as
 * strings), row-major. */
static void save_data(sbuf *b, const ir_value *x, const void *data)
{
    sb_key(b, "data");
    sb_cat(b, "[");
    int64_t n = ir_numel(x);
    for (int64_t i = 0; i < n; i++) {
        if (i) sb_cat(b, i % 16 ? ", " : ",\n      ");
        if (x->dtype == IR_I32) {
            sb_printf(b, "%d", ((const int32_t *)data)[i]);
            continue;
        }
        float f = ((const float *)data)[i];
        if (!isfinite(f)) {
            sb_double(b, f);
            continue;
        }
        char tmp[32];
        for (int prec = 6; prec <= 9; prec++) {
            snprintf(tmp, sizeof tmp, "%.*g", prec, (double)f);
            if (strtof(tmp, NULL) == f) break;
        }
        sb_cat(b, tmp);
    }
    sb_cat(b, "]");
}

static void save_arg(sbuf *b, const ir_graph *g, int v)
{
    const ir_value *x = &g->values[v];
    sb_cat(b, "    {\"name\": ");
    sb_str(b, x->name);
    sb_key(b, "role");
    sb_str(b, ir_role_name(x->role));
    if (x->dtype != IR_F32) {
        sb_key(b, "dtype");
        sb_str(b, ir_dtype_name(x->dtype));
    }
    sb_key(b, "shape");
    sb_dims(b, x->rank, x->dims);
    if (x->init != IR_INIT_AUTO) {
        sb_key(b, "init");
        sb_str(b, ir_init_name(x->init));
    }
    if (x->init_arg != 0 || signbit(x->init_arg)) {
        sb_key(b, "init_arg");
        sb_double(b, x->init_arg);
    }
    if (x->layer >= 0) {
        sb_key(b, "layer");
        sb_printf(b, "%d", x->layer);
    }
    if (x->tied >= 0) {
        sb_key(b, "tied");
        sb_str(b, g->values[x->tied].name);
    }
    if (x->grad_of >= 0) {
        sb_key(b, "grad_of");
        sb_str(b, g->values[x->grad_of].name);
    }
    int frank;
    int64_t fdims[IR_MAX_RANK];
    if (ir_file_shape(g, v, &frank, fdims)) {
        sb_key(b, "file_shape");
        sb_dims(b, frank, fdims);
    }
    const void *data = x->init == IR_INIT_DATA ? ir_data(g, v) : NULL;
    if (data) save_data(b, x, data);
    sb_cat(b, "}");
}

/* The attributes op o's kind has (its fields f), with its result out. */
static void save_op_attrs(sbuf *b, const ir_op *o, const ir_value *out, unsigned f)
{
    if ((f & IR_ATTR_DTYPE) && out->dtype != IR_F32) {
        sb_key(b, "dtype");
        sb_str(b, ir_dtype_name(out->dtype));
    }
    if (f & IR_ATTR_SHAPE) {
        sb_key(b, "shape");
        sb_dims(b, out->rank, out->dims);
    }
    if (f & IR_ATTR_SCALAR) {
        sb_key(b, "scalar");
        sb_double(b, o->attrs.scalar);
    }
    if (f & IR_ATTR_SUBSCRIPTS) {
        sb_key(b, "subscripts");
        sb_str(b, o->attrs.subscripts);
    }
    if (f & (IR_ATTR_DIMS | IR_ATTR_PERM)) {
        sb_key(b, f & IR_ATTR_PERM ? "perm" : "dims");
        sb_dims(b, o->attrs.n_ints, o->attrs.ints);
    }
    if (f & IR_ATTR_DEPTH) {
        sb_key(b, "depth");
        sb_printf(b, "%lld", (long long)o->attrs.ints[0]);
    }
    if (f & IR_ATTR_SEED) {
        sb_key(b, "seed");
        sb_printf(b, "%lld", (long long)o->attrs.ints[0]);
    }
    if ((f & IR_ATTR_CAUSAL) && o->attrs.n_ints && o->attrs.ints[0]) {
        sb_key(b, "causal");
        sb_cat(b, "true");
    }
    if (f & IR_ATTR_ROWS) {
        sb_key(b, "rows");
        sb_printf(b, "%lld", (long long)out->dims[0]);
    }
}

static void save_op(sbuf *b, const ir_graph *g, int i)
{
    const ir_op *o = &g->ops[i];
    const ir_value *out = &g->values[o->out];
    sb_cat(b, "    {\"name\": ");
    sb_str(b, out->name);
    sb_key(b, "op");
    sb_str(b, ir_op_name(o->kind));
    save_op_attrs(b, o, out, op_fields(o->kind));
    if (o->n_in) {
        sb_key(b, "in");
        sb_put(b, "[", 1);
        for (int k = 0; k < o->n_in; k++) {
            if (k) sb_cat(b, ", ");
            sb_str(b, g->values[o->in[k]].name);
        }
        sb_put(b, "]", 1);
    }
    if (o->layer >= 0) {
        sb_key(b, "layer");
        sb_printf(b, "%d", o->layer);
    }
    if (out->grad_of >= 0) {
        sb_key(b, "grad_of");
        sb_str(b, g->values[out->grad_of].name);
    }
    sb_cat(b, "}");
}

char *ir_save_json(const ir_graph *g)
{
    sbuf b = {0};
    sb_cat(&b, "{\n  \"format\": \"" JSON_FORMAT "\",\n  \"name\": ");
    sb_str(&b, g->name);
    if (g->n_layers > 0) sb_printf(&b, ",\n  \"layers\": %d", g->n_layers);
    sb_cat(&b, ",\n  \"args\": [");
    int first = 1;
    for (int v = 0; v < g->n_values; v++) {
        if (g->values[v].role == IR_INTERMEDIATE) continue;
        sb_cat(&b, first ? "\n" : ",\n");
        first = 0;
        save_arg(&b, g, v);
    }
    sb_cat(&b, first ? "],\n  \"ops\": [" : "\n  ],\n  \"ops\": [");
    for (int i = 0; i < g->n_ops; i++) {
        sb_cat(&b, i ? ",\n" : "\n");
        save_op(&b, g, i);
    }
    sb_cat(&b, g->n_ops ? "\n  ],\n  \"outputs\": [" : "],\n  \"outputs\": [");
    for (int i = 0; i < g->n_outputs; i++) {
        const ir_output *o = &g->outputs[i];
        sb_cat(&b, i ? ",\n    {\"value\": " : "\n    {\"value\": ");
        sb_str(&b, g->values[o->value].name);
        if (o->updates >= 0) {
            sb_key(&b, "updates");
            sb_str(&b, g->values[o->updates].name);
        }
        sb_cat(&b, "}");
    }
    sb_cat(&b, g->n_outputs ? "\n  ]" : "]");
    if (g->loss >= 0) {
        sb_cat(&b, ",\n  \"loss\": ");
        sb_str(&b, g->values[g->loss].name);
    }
    sb_cat(&b, "\n}\n");
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

int ir_save_json_file(const ir_graph *g, const char *path, char *err, size_t errlen)
{
    char none[1];
    if (!err || !errlen) {
        err = none;
        errlen = sizeof none;
    }
    if (g->err[0]) {
        snprintf(err, errlen, "%s: not saved, the graph has an error: %s", path, g->err);
        return -1;
    }
    char *text = ir_save_json(g);
    if (!text) {
        snprintf(err, errlen, "%s: out of memory while writing the graph", path);
        return -1;
    }
    int rc = ir_write_atomic(path, text, strlen(text), err, errlen);
    free(text);
    return rc;
}

/* ======================================================================== *
 *  Loading                                                                 *
 * ======================================================================== */

/* An argument entry, parsed before any value is created. */
typedef struct arg_spec {
    const char *name;        /* points into the cJSON tree */
    ir_role role;
    ir_dtype dtype;
    int rank;
    int64_t dims[IR_MAX_RANK];
    int has_init;
    ir_init init;
    double init_arg;
    int layer;
    const cJSON *tied, *grad_of;
    const cJSON *data;       /* "data": the elements of an init "data" argument */
    int has_file_shape;      /* "file_shape": the shape a model file holds it in (ir_file_shape) */
    int file_rank;
    int64_t file_dims[IR_MAX_RANK];
} arg_spec;

/* One name of the file: an argument (maybe not created yet) or an op result. */
typedef struct name_slot {
    const char *name;        /* NULL: empty slot; points into the cJSON tree or the graph */
    int value;               /* value id, or -1 for an argument not created yet */
    int arg, op;             /* where the file defines it (-1 for the other) */
} name_slot;

typedef struct loader {
    ir_graph *g;
    char *err;
    size_t errlen;
    int failed;
    char place[128];         /* e.g. ops[3] ("h") */
    arg_spec *args;
    int n_args, next_arg;
    const cJSON *ops;
    int n_ops;
    int *op_value;           /* value id made by ops[j] */
    name_slot *slots;
    size_t n_slots;          /* a power of two, at least twice the names */
    int renamed;             /* some "%<k>" label was set directly: rebuild the index */
} loader;

static int lfail(loader *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int lfail(loader *L, const char *fmt, ...)
{
    if (L->failed) return -1;
    L->failed = 1;
    if (!L->err || !L->errlen) return -1;
    size_t k = 0;
    if (L->place[0]) k = (size_t)snprintf(L->err, L->errlen, "%s: ", L->place);
    if (k < L->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(L->err + k, L->errlen - k, fmt, ap);
        va_end(ap);
    }
    /* One line: a name with a newline in it must not break the message. */
    for (char *p = L->err; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    return -1;
}

/* Records `what[i]` (and its name, shortened) as the place errors name. */
static void set_place(loader *L, const char *what, int i, const char *name)
{
    if (i < 0) snprintf(L->place, sizeof L->place, "%s", what);
    else if (!name) snprintf(L->place, sizeof L->place, "%s[%d]", what, i);
    else if (strlen(name) <= 60) snprintf(L->place, sizeof L->place, "%s[%d] (\"%s\")", what, i, name);
    else snprintf(L->place, sizeof L->place, "%s[%d] (\"%.57s...\")", what, i, name);
}

static const char *json_type(const cJSON *j)
{
    if (cJSON_IsNumber(j)) return "a number";
    if (cJSON_IsString(j)) return "a string";
    if (cJSON_IsArray(j)) return "an array";
    if (cJSON_IsObject(j)) return "an object";
    if (cJSON_IsBool(j)) return "a boolean";
    if (cJSON_IsNull(j)) return "null";
    return "something else";
}

/* Reads an integer (a JSON number with no fraction, |x| <= 2^53).  `what`
 * names it in messages.  Returns 0 or -1 with a message. */
static int get_int(loader *L, const cJSON *j, const char *what, int64_t *out)
{
    if (!cJSON_IsNumber(j)) return lfail(L, "%s must be an integer, got %s", what, json_type(j));
    double x = j->valuedouble;
    if (!isfinite(x) || fabs(x) > JSON_MAX_INT) return lfail(L, "%s is %.17g, beyond 2^53", what, x);
    if (x != floor(x)) return lfail(L, "%s must be an integer, got %.17g", what, x);
    *out = (int64_t)x;
    return 0;
}

static int get_int_range(loader *L, const cJSON *j, const char *what, int64_t lo, int64_t hi, int *out)
{
    int64_t x;
    if (get_int(L, j, what, &x) < 0) return -1;
    if (x < lo || x > hi) return lfail(L, "%s is %lld, outside %lld..%lld", what, (long long)x, (long long)lo, (long long)hi);
    *out = (int)x;
    return 0;
}

/* Reads a list of at most IR_MAX_RANK integers ("shape", "dims", "perm");
 * a bare number where the list belongs ("dims": 1) is refused. */
static int get_ints(loader *L, const cJSON *j, const char *what, int *n, int64_t *out)
{
    if (!cJSON_IsArray(j)) return lfail(L, "%s must be an array of integers, got %s", what, json_type(j));
    int k = 0;
    for (const cJSON *c = j->child; c; c = c->next, k++) {
        if (k == IR_MAX_RANK) return lfail(L, "%s has %d entries, at most %d", what, cJSON_GetArraySize(j), IR_MAX_RANK);
        char w[48];
        snprintf(w, sizeof w, "%s[%d]", what, k);
        if (!cJSON_IsNumber(c)) return lfail(L, "%s must be an array of integers (%s is %s)", what, w, json_type(c));
        if (get_int(L, c, w, &out[k]) < 0) return -1;
    }
    *n = k;
    return 0;
}

/* A double: a JSON number, or "inf", "-inf", "nan", "-nan". */
static int get_double(loader *L, const cJSON *j, const char *what, double *out)
{
    if (cJSON_IsNumber(j)) {
        *out = j->valuedouble;
        return 0;
    }
    if (cJSON_IsString(j)) {
        const char *s = j->valuestring;
        if (!strcmp(s, "inf")) *out = INFINITY;
        else if (!strcmp(s, "-inf")) *out = -INFINITY;
        else if (!strcmp(s, "nan")) *out = NAN;
        else if (!strcmp(s, "-nan")) *out = -NAN;
        else return lfail(L, "%s must be a number (or \"inf\", \"-inf\", \"nan\"), got \"%.40s\"", what, s);
        return 0;
    }
    return lfail(L, "%s must be a number, got %s", what, json_type(j));
}

static int get_string(loader *L, const cJSON *j, const char *what, const char **out)
{
    if (!cJSON_IsString(j) || !j->valuestring) return lfail(L, "%s must be a string, got %s", what, json_type(j));
    *out = j->valuestring;
    return 0;
}

const char *ir_json_repeated_key(const cJSON *o)
{
    for (const cJSON *a = o ? o->child : NULL; a; a = a->next)
        for (const cJSON *b = a->next; b; b = b->next)
            if (a->string && b->string && !strcmp(a->string, b->string)) return a->string;
    return NULL;
}

/* Checks that every key of object `o` is in `keys` (NULL-terminated) and
 * appears once.  `attr_keys` (may be NULL) are keys known to other ops:
 * they get a message naming `opname`.  Keys "comment" and "_..." are free. */
static int check_keys(loader *L, const cJSON *o, const char *const *keys, const char *const *attr_keys,
                      const char *opname)
{
    const char *twice = ir_json_repeated_key(o);
    if (twice) return lfail(L, "field \"%.40s\" appears twice", twice);
    for (const cJSON *c = o->child; c; c = c->next) {
        const char *k = c->string ? c->string : "";
        if (!strcmp(k, "comment") || k[0] == '_') continue;
        int ok = 0;
        for (int i = 0; keys[i] && !ok; i++) ok = !strcmp(keys[i], k);
        if (ok) continue;
        for (int i = 0; attr_keys && attr_keys[i]; i++)
            if (!strcmp(attr_keys[i], k)) return lfail(L, "%s takes no \"%s\"", opname, k);
        return lfail(L, "unknown field \"%.40s\"", k);
    }
    return 0;
}

/* ---- the name table ---------------------------------------------------- */

/* The slot holding `name`, or the empty slot where it would go. */
static name_slot *slot_of(loader *L, const char *name)
{
    size_t mask = L->n_slots - 1;
    for (size_t i = ir_fnv(name) & mask;; i = (i + 1) & mask)
        if (!L->slots[i].name || !strcmp(L->slots[i].name, name)) return &L->slots[i];
}

static const char *slot_place(const name_slot *s, char *buf, size_t n)
{
    if (s->arg >= 0) snprintf(buf, n, "args[%d]", s->arg);
    else snprintf(buf, n, "ops[%d]", s->op);
    return buf;
}

/* Adds a name defined by args[arg] or ops[op]; refuses duplicates. */
static int add_name(loader *L, const char *name, int value, int arg, int op)
{
    name_slot *s = slot_of(L, name);
    if (s->name) {
        char where[32];
        return lfail(L, "duplicate name \"%.60s\" (already used by %s)", name, slot_place(s, where, sizeof where));
    }
    *s = (name_slot){name, value, arg, op};
    return 0;
}

/* ---- arguments --------------------------------------------------------- */

static const char *const arg_keys[] = {"name", "role", "dtype", "shape", "init", "init_arg", "layer", "tied", "grad_of", "data", "file_shape", NULL};

/* Parses args[i] into L->args[i] (no value is created yet). */
static int parse_arg(loader *L, int i, const cJSON *o)
{
    arg_spec *a = &L->args[i];
    memset(a, 0, sizeof *a);
    a->layer = -1;
    set_place(L, "args", i, NULL);
    if (!cJSON_IsObject(o)) return lfail(L, "must be an object, got %s", json_type(o));
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    if (!name) return lfail(L, "missing field \"name\"");
    if (get_string(L, name, "name", &a->name) < 0) return -1;
    set_place(L, "args", i, a->name);
    if (check_keys(L, o, arg_keys, NULL, NULL) < 0) return -1;
    if (!a->name[0]) return lfail(L, "empty name");
    if (a->name[0] == '%') return lfail(L, "names starting with %% are reserved for automatic names");

    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, "role");
    const char *s = NULL;
    if (!j) return lfail(L, "missing field \"role\" (input, param or opt_state)");
    if (get_string(L, j, "role", &s) < 0) return -1;
    int r = ir_role_from_name(s);
    if (r < 0 || r == IR_INTERMEDIATE) return lfail(L, "role \"%.40s\" is not input, param, opt_state or const", s);
    a->role = (ir_role)r;

    a->dtype = IR_F32;
    if ((j = cJSON_GetObjectItemCaseSensitive(o, "dtype"))) {
        if (get_string(L, j, "dtype", &s) < 0) return -1;
        int t = ir_dtype_from_name(s);
        if (t < 0) return lfail(L, "unknown dtype \"%.40s\" (f32, i32, bf16, f16)", s);
        a->dtype = (ir_dtype)t;
    }
    if (!(j = cJSON_GetObjectItemCaseSensitive(o, "shape"))) return lfail(L, "missing field \"shape\"");
    if (get_ints(L, j, "shape", &a->rank, a->dims) < 0) return -1;

    if ((j = cJSON_GetObjectItemCaseSensitive(o, "init"))) {
        if (get_string(L, j, "init", &s) < 0) return -1;
        int k = ir_init_from_name(s);
        if (k < 0) return lfail(L, "unknown init \"%.40s\" (auto, normal, zeros, ones, ids, data)", s);
        a->init = (ir_init)k;
        a->has_init = 1;
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(o, "init_arg"))) {
        if (get_double(L, j, "init_arg", &a->init_arg) < 0) return -1;
        a->has_init = 1;
    }
    if ((j = cJSON_GetObjectItemCaseSensitive(o, "layer")) &&
        get_int_range(L, j, "layer", -1, JSON_MAX_LAYER - 1, &a->layer) < 0)
        return -1;
    a->tied = cJSON_GetObjectItemCaseSensitive(o, "tied");
    a->grad_of = cJSON_GetObjectItemCaseSensitive(o, "grad_of");
    if ((j = cJSON_GetObjectItemCaseSensitive(o, "file_shape"))) {
        if (get_ints(L, j, "file_shape", &a->file_rank, a->file_dims) < 0) return -1;
        a->has_file_shape = 1;
    }
    a->data = cJSON_GetObjectItemCaseSensitive(o, "data");
    if ((a->data != NULL) != (a->has_init && a->init == IR_INIT_DATA))
        return lfail(L, a->data ? "\"data\" needs \"init\": \"data\"" : "init \"data\" needs a \"data\" array of the elements");
    if (a->tied && get_string(L, a->tied, "tied", &s) < 0) return -1;
    if (a->grad_of && get_string(L, a->grad_of, "grad_of", &s) < 0) return -1;
    return add_name(L, a->name, -1, i, -1);
}

/* Reads the "data" array of argument v: one number (or "inf", "-inf",
 * "nan") per element, integers for i32. */
static int load_data(loader *L, int v, const cJSON *arr)
{
    const ir_value *x = &L->g->values[v];
    int64_t n = ir_numel(x);
    if (!cJSON_IsArray(arr)) return lfail(L, "data must be an array, got %s", json_type(arr));
    if ((int64_t)cJSON_GetArraySize(arr) != n)
        return lfail(L, "data has %d elements, the shape holds %lld", cJSON_GetArraySize(arr), (long long)n);
    size_t bytes;
    if (ir_mul_size((size_t)n, 4, &bytes) < 0) return lfail(L, "data: too many elements");
    void *elems = ir_xrealloc(NULL, bytes);
    int64_t i = 0;
    for (const cJSON *j = arr->child; j; j = j->next, i++) {
        if (x->dtype == IR_I32) {
            int64_t k;
            if (get_int(L, j, "data", &k) < 0 || ((k < INT32_MIN || k > INT32_MAX) && lfail(L, "data[%lld] is %lld, outside i32", (long long)i, (long long)k) < 0)) {
                free(elems);
                return -1;
            }
            ((int32_t *)elems)[i] = (int32_t)k;
        } else {
            double d;
            if (get_double(L, j, "data", &d) < 0) {
                free(elems);
                return -1;
            }
            ((float *)elems)[i] = (float)d;
        }
    }
    return ir_data_attach(L->g, v, elems, n) < 0 ? lfail(L, "%s", ir_error(L->g)) : 0;
}

/* Creates the arguments up to and including args[upto], in file order. */
static int create_args(loader *L, int upto)
{
    char keep[sizeof L->place];
    memcpy(keep, L->place, sizeof keep);
    for (; L->next_arg <= upto; L->next_arg++) {
        const arg_spec *a = &L->args[L->next_arg];
        set_place(L, "args", L->next_arg, a->name);
        ir_set_layer(L->g, a->layer);
        int v = ir_arg(L->g, a->name, a->role, a->dtype, a->rank, a->dims);
        if (v >= 0 && a->has_init) ir_set_init(L->g, v, a->init, a->init_arg);
        if (v >= 0 && a->data && load_data(L, v, a->data) < 0) return -1;
        if (v >= 0 && a->has_file_shape && ir_file_shape_set(L->g, v, a->file_rank, a->file_dims) < 0)
            return lfail(L, "%s", ir_error(L->g));
        if (ir_error(L->g)) return lfail(L, "%s", ir_error(L->g));
        slot_of(L, a->name)->value = v;
    }
    memcpy(L->place, keep, sizeof keep);
    return 0;
}

/* The value id of a name the file uses at the current place, creating a
 * pending argument if needed; -1 with a message if there is none yet. */
static int resolve(loader *L, const char *name, int from_op)
{
    name_slot *s = slot_of(L, name);
    if (s->name) {
        if (s->value < 0 && create_args(L, s->arg) < 0) return -1;
        return s->value;
    }
    /* Defined later in the file (or by this very op)? Then the order is wrong. */
    int j = 0;
    for (const cJSON *o = from_op >= 0 ? L->ops->child : NULL; o; o = o->next, j++) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "name");
        if (j >= from_op && cJSON_IsString(n) && !strcmp(n->valuestring, name))
            return lfail(L, "uses \"%.60s\" before it is defined (%s)", name,
                         j == from_op ? "an op cannot read its own result" : "ops must be in order; a cycle?");
    }
    return lfail(L, "unknown tensor name \"%.60s\"", name);
}

/* ---- ops --------------------------------------------------------------- */

static const char *const op_keys[] = {"name", "op", "in", "layer", "grad_of", "dtype", "shape", NULL};
static const char *const attr_keys[] = {"scalar", "dims", "perm", "depth", "rows", "subscripts", "seed", "causal", NULL};

/* Is `s` an automatic name "%<digits>"?  Sets *k to its number. */
static int auto_label(const char *s, long *k)
{
    if (s[0] != '%' || !s[1]) return 0;
    char *end;
    errno = 0;
    long x = strtol(s + 1, &end, 10);
    if (*end || errno || x < 0 || s[1] < '0' || s[1] > '9') return 0;
    *k = x;
    return 1;
}

/* Loading one op, step by step: its kind and name (load_op_kind), its fields
 * (check_op_fields), its operands (load_operands), its attributes
 * (load_attrs), the op itself (add_loaded_op), then its "shape" and "dtype"
 * checks (check_claims). */

/* What an op's entry says besides its kind and operands. */
typedef struct op_entry {
    ir_attrs at;
    int hint_rank, check_rank, have_dtype, layer;
    const char *nary_subs;                              /* an n-ary einsum's subscripts */
    int64_t hint[IR_MAX_RANK], check[IR_MAX_RANK];      /* result shape given (ops that need it), claimed */
    ir_dtype dtype;
} op_entry;

/* ops[j]'s name (NULL: none) and kind.  Returns 1 for a comment line (an
 * entry of only "comment" / "_..." fields), 0, or -1 with a message. */
static int load_op_kind(loader *L, int j, const cJSON *o, const char **name, ir_opkind *k)
{
    set_place(L, "ops", j, NULL);
    if (!cJSON_IsObject(o)) return lfail(L, "must be an object, got %s", json_type(o));
    const cJSON *jn = cJSON_GetObjectItemCaseSensitive(o, "name");
    const char *s = NULL;
    *name = NULL;
    if (jn) {
        if (get_string(L, jn, "name", name) < 0) return -1;
        set_place(L, "ops", j, *name);
    }
    const cJSON *jk = cJSON_GetObjectItemCaseSensitive(o, "op");
    if (!jk) {
        int only_comments = o->child != NULL;
        for (const cJSON *c = o->child; c && only_comments; c = c->next)
            only_comments = c->string && (!strcmp(c->string, "comment") || c->string[0] == '_');
        L->op_value[j] = -1;
        return only_comments ? 1 : lfail(L, "missing field \"op\"");
    }
    if (get_string(L, jk, "op", &s) < 0) return -1;
    int kind = ir_op_from_name(s);
    if (kind < 0) return lfail(L, "unknown op \"%.40s\"", s);
    *k = (ir_opkind)kind;
    return 0;
}

/* The entry's fields (the common ones plus op k's attributes) and its name:
 * not empty, not a reserved "%..." unless an automatic label (*label: its
 * number, else -1), not taken.  Returns 0 or -1 with a message. */
static int check_op_fields(loader *L, int j, const cJSON *o, ir_opkind k, const char *name, long *label)
{
    unsigned f = op_fields(k);
    const char *keys[16];
    int nk = 0;
    for (int i = 0; op_keys[i]; i++) keys[nk++] = op_keys[i];
    if (f & IR_ATTR_SCALAR) keys[nk++] = "scalar";
    if (f & IR_ATTR_DIMS) keys[nk++] = "dims";
    if (f & IR_ATTR_PERM) keys[nk++] = "perm";
    if (f & IR_ATTR_DEPTH) keys[nk++] = "depth";
    if (f & IR_ATTR_ROWS) keys[nk++] = "rows";
    if (f & IR_ATTR_SUBSCRIPTS) keys[nk++] = "subscripts";
    if (f & IR_ATTR_SEED) keys[nk++] = "seed";
    if (f & IR_ATTR_CAUSAL) keys[nk++] = "causal";
    keys[nk] = NULL;
    if (check_keys(L, o, keys, attr_keys, ir_op_name(k)) < 0) return -1;
    *label = -1;
    if (name) {
        if (!name[0]) return lfail(L, "empty name");
        if (name[0] == '%' && !auto_label(name, label))
            return lfail(L, "names starting with %% are reserved for automatic names (%%<number>)");
        if (slot_of(L, name)->name) return add_name(L, name, -1, -1, j); /* the duplicate message */
    }
    return 0;
}

/* Operands of ops[j] (op k) resolved into in[] (room for 16), their count in
 * *n_in.  Returns 0 or -1 with a message. */
static int load_operands(loader *L, int j, const cJSON *o, ir_opkind k, int *in, int *n_in)
{
    const char *on = ir_op_name(k);
    int arity = ir_op_arity(k);
    const cJSON *ji = cJSON_GetObjectItemCaseSensitive(o, "in");
    *n_in = 0;
    if (!ji && arity > 0) return lfail(L, "missing field \"in\" (%s takes %d operand%s)", on, arity, arity > 1 ? "s" : "");
    if (!ji) return 0;
    if (!cJSON_IsArray(ji)) return lfail(L, "\"in\" must be an array of tensor names, got %s", json_type(ji));
    *n_in = cJSON_GetArraySize(ji);
    /* an einsum of more operands is built as two-operand ones (ir_einsum_n) */
    int nary = k == IR_OP_EINSUM && *n_in > 2 && *n_in <= 16;
    if (*n_in != arity && !nary)
        return lfail(L, "%s takes %d operand%s, \"in\" has %d", on, arity, arity == 1 ? "" : "s", *n_in);
    int i = 0;
    for (const cJSON *c = ji->child; c; c = c->next, i++) {
        if (!cJSON_IsString(c)) return lfail(L, "\"in\" must be an array of tensor names (in[%d] is %s)", i, json_type(c));
        if ((in[i] = resolve(L, c->valuestring, j)) < 0) return -1;
    }
    return 0;
}

/* A required integer attribute `key` into *x.  Returns 0 or -1. */
static int required_int(loader *L, const cJSON *o, const char *key, int64_t *x)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!a) return lfail(L, "missing field \"%s\"", key);
    return get_int(L, a, key, x);
}

/* The attributes op k's fields ask for (with n_in operands: the n-ary einsum's
 * subscripts are kept apart) into e->at, "rows" into e's shape hint.  Returns 0
 * or -1 with a message. */
static int load_op_attrs(loader *L, const cJSON *o, ir_opkind k, int n_in, op_entry *e)
{
    unsigned f = op_fields(k);
    const char *s = NULL;
    const cJSON *a;
    ir_attrs *at = &e->at;
    if (f & IR_ATTR_SCALAR) {
        if (!(a = cJSON_GetObjectItemCaseSensitive(o, "scalar"))) return lfail(L, "missing field \"scalar\"");
        if (get_double(L, a, "scalar", &at->scalar) < 0) return -1;
    }
    if (f & IR_ATTR_SUBSCRIPTS) {
        if (!(a = cJSON_GetObjectItemCaseSensitive(o, "subscripts"))) return lfail(L, "missing field \"subscripts\"");
        if (get_string(L, a, "subscripts", &s) < 0) return -1;
        e->nary_subs = s;
        if (n_in <= 2 && strlen(s) >= sizeof at->subscripts)
            return lfail(L, "subscripts \"%.60s\" are too long (at most %d characters)", s, (int)sizeof at->subscripts - 1);
        strcpy(at->subscripts, s);
    }
    if (f & (IR_ATTR_DIMS | IR_ATTR_PERM)) {
        const char *key = f & IR_ATTR_PERM ? "perm" : "dims";
        if ((a = cJSON_GetObjectItemCaseSensitive(o, key))) {
            if (get_ints(L, a, key, &at->n_ints, at->ints) < 0) return -1;
        } else if (!(f & IR_ATTR_DIMS_OPTIONAL)) {
            return lfail(L, "missing field \"%s\"", key);
        }
    }
    if (f & IR_ATTR_DEPTH) {
        if (required_int(L, o, "depth", &at->ints[0]) < 0) return -1;
        at->n_ints = 1;
    }
    if (f & IR_ATTR_SEED) {
        if (required_int(L, o, "seed", &at->ints[0]) < 0) return -1;
        at->n_ints = 1;
    }
    if (f & IR_ATTR_CAUSAL) {
        at->n_ints = 1;
        if ((a = cJSON_GetObjectItemCaseSensitive(o, "causal"))) {
            if (!cJSON_IsBool(a)) return lfail(L, "\"causal\" must be true or false, got %s", json_type(a));
            at->ints[0] = cJSON_IsTrue(a);
        }
    }
    if (f & IR_ATTR_ROWS) {
        if (required_int(L, o, "rows", &e->hint[0]) < 0) return -1;
        e->hint_rank = 1;
    }
    return 0;
}

/* Attributes of an entry of op k with n_in operands, and its "shape",
 * "dtype", "layer" and "grad_of", into *e.  Returns 0 or -1 with a message. */
static int load_attrs(loader *L, const cJSON *o, ir_opkind k, int n_in, op_entry *e)
{
    unsigned f = op_fields(k);
    const char *s = NULL;
    memset(e, 0, sizeof *e);
    e->check_rank = -1;
    e->layer = -1;
    e->dtype = IR_F32;
    const cJSON *a;
    if ((a = cJSON_GetObjectItemCaseSensitive(o, "shape"))) {
        if (get_ints(L, a, "shape", &e->check_rank, e->check) < 0) return -1;
        if (f & IR_ATTR_SHAPE) {
            e->hint_rank = e->check_rank;
            memcpy(e->hint, e->check, sizeof e->hint);
            e->check_rank = -1;
        }
    } else if (f & IR_ATTR_SHAPE) {
        return lfail(L, "missing field \"shape\" (%s needs its result shape)", ir_op_name(k));
    }
    if ((a = cJSON_GetObjectItemCaseSensitive(o, "dtype"))) {
        if (get_string(L, a, "dtype", &s) < 0) return -1;
        int t = ir_dtype_from_name(s);
        if (t < 0) return lfail(L, "unknown dtype \"%.40s\" (f32, i32, bf16, f16)", s);
        e->dtype = (ir_dtype)t;
        e->have_dtype = 1;
    }
    if (load_op_attrs(L, o, k, n_in, e) < 0) return -1;
    if ((a = cJSON_GetObjectItemCaseSensitive(o, "layer")) && get_int_range(L, a, "layer", -1, JSON_MAX_LAYER - 1, &e->layer) < 0)
        return -1;
    if ((a = cJSON_GetObjectItemCaseSensitive(o, "grad_of")) && get_string(L, a, "grad_of", &s) < 0) return -1;
    return 0;
}

/* Records ops[j] (op k on in[0..n_in), named `name` or automatically, at
 * automatic label `label` or -1) in the graph and in the name index.
 * Returns its value id, or -1 with a message. */
static int add_loaded_op(loader *L, int j, ir_opkind k, const int *in, int n_in, const op_entry *e, const char *name,
                         long label)
{
    ir_graph *g = L->g;
    unsigned f = op_fields(k);
    /* An automatic label "%k" says k values come before this one. */
    if (label >= 0)
        while (g->n_values < label && L->next_arg < L->n_args)
            if (create_args(L, L->next_arg) < 0) return -1;

    ir_set_layer(g, e->layer);
    int nary = k == IR_OP_EINSUM && n_in > 2;
    int v = nary ? ir_einsum_n(g, e->nary_subs, n_in, in)
                     : ir_add_op(g, k, n_in, in, &e->at, (f & IR_ATTR_DTYPE) ? e->dtype : IR_F32, e->hint_rank,
                                 (f & (IR_ATTR_SHAPE | IR_ATTR_ROWS)) ? e->hint : NULL, label >= 0 ? NULL : name);
    if (nary && v >= 0 && label < 0 && name && ir_rename(g, v, name) < 0) v = -1;
    if (v < 0) return lfail(L, "%s", ir_error(g));
    if (label >= 0 && strcmp(g->values[v].name, name) != 0) {
        g->values[v].name = ir_intern(g, name); /* the index is rebuilt at the end */
        L->renamed = 1;
    }
    name_slot *slot = slot_of(L, g->values[v].name);
    if (slot->name) { /* an automatic name that a "%<k>" label elsewhere already took */
        char where[32];
        return lfail(L, "its automatic name \"%s\" is already used by %s", g->values[v].name,
                     slot_place(slot, where, sizeof where));
    }
    *slot = (name_slot){g->values[v].name, v, -1, j};
    L->op_value[j] = v;
    return v;
}

/* "shape" and "dtype" on ops that infer them are checks of value v.
 * Returns 0 or -1 with a message. */
static int check_claims(loader *L, int v, ir_opkind k, const op_entry *e)
{
    const ir_value *x = &L->g->values[v];
    ir_value claim = *x;
    if (e->check_rank >= 0) {
        claim.rank = e->check_rank;
        memcpy(claim.dims, e->check, sizeof claim.dims);
    }
    if (e->have_dtype && !(op_fields(k) & IR_ATTR_DTYPE)) claim.dtype = e->dtype;
    int same = claim.rank == x->rank && claim.dtype == x->dtype;
    for (int i = 0; same && i < x->rank; i++) same = claim.dims[i] == x->dims[i];
    if (!same) {
        char t1[96], t2[96];
        return lfail(L, "the op gives %s but the file says %s", ir_type_str(x, t1, sizeof t1),
                     ir_type_str(&claim, t2, sizeof t2));
    }
    return 0;
}

static int load_op(loader *L, int j, const cJSON *o)
{
    const char *name = NULL;
    ir_opkind k = IR_OP_EINSUM;
    int rc = load_op_kind(L, j, o, &name, &k);
    if (rc != 0) return rc > 0 ? 0 : -1;
    long label;
    if (check_op_fields(L, j, o, k, name, &label) < 0) return -1;
    int in[16] = {-1, -1}, n_in;
    if (load_operands(L, j, o, k, in, &n_in) < 0) return -1;
    op_entry e;
    if (load_attrs(L, o, k, n_in, &e) < 0) return -1;
    int v = add_loaded_op(L, j, k, in, n_in, &e, name, label);
    return v < 0 ? -1 : check_claims(L, v, k, &e);
}

/* ---- links resolved once every value exists ---------------------------- */

/* The param named by `j` ("tied"/"grad_of" of the current place), or -1. */
static int param_named(loader *L, const cJSON *j, const char *field)
{
    name_slot *s = slot_of(L, j->valuestring);
    if (!s->name) return lfail(L, "%s: unknown tensor name \"%.60s\"", field, j->valuestring);
    if (L->g->values[s->value].role != IR_PARAM)
        return lfail(L, "%s \"%.60s\" is not a param", field, j->valuestring);
    return s->value;
}

static int load_links(loader *L)
{
    ir_graph *g = L->g;
    for (int i = 0; i < L->n_args; i++) {
        const arg_spec *a = &L->args[i];
        int v = slot_of(L, a->name)->value, p;
        set_place(L, "args", i, a->name);
        if (a->tied) {
            if (a->role != IR_OPT_STATE) return lfail(L, "only opt_state args can be tied to a param");
            if ((p = param_named(L, a->tied, "tied")) < 0) return -1;
            g->values[v].tied = p;
        }
        if (a->grad_of) {
            if ((p = param_named(L, a->grad_of, "grad_of")) < 0) return -1;
            g->values[v].grad_of = p;
        }
    }
    int j = 0;
    for (const cJSON *o = L->ops->child; o; o = o->next, j++) {
        const cJSON *gr = cJSON_GetObjectItemCaseSensitive(o, "grad_of");
        if (!gr || L->op_value[j] < 0) continue;
        set_place(L, "ops", j, g->values[L->op_value[j]].name);
        int p = param_named(L, gr, "grad_of");
        if (p < 0) return -1;
        g->values[L->op_value[j]].grad_of = p;
    }
    return 0;
}

static int load_outputs(loader *L, const cJSON *outs, const cJSON *loss)
{
    ir_graph *g = L->g;
    int loss_v = -1, i = 0;
    if (loss) {
        set_place(L, "loss", -1, NULL);
        if (!cJSON_IsString(loss)) return lfail(L, "must be a tensor name, got %s", json_type(loss));
        if ((loss_v = resolve(L, loss->valuestring, -1)) < 0) return -1;
    }
    static const char *const out_keys[] = {"value", "updates", NULL};
    for (const cJSON *o = outs ? outs->child : NULL; o; o = o->next, i++) {
        set_place(L, "outputs", i, NULL);
        const cJSON *jv = o, *ju = NULL;
        if (cJSON_IsObject(o)) {
            if (check_keys(L, o, out_keys, NULL, NULL) < 0) return -1;
            if (!(jv = cJSON_GetObjectItemCaseSensitive(o, "value"))) return lfail(L, "missing field \"value\"");
            ju = cJSON_GetObjectItemCaseSensitive(o, "updates");
        }
        if (!cJSON_IsString(jv))
            return lfail(L, "an output is a tensor name or {\"value\": name, \"updates\": name}, got %s", json_type(jv));
        set_place(L, "outputs", i, jv->valuestring);
        int v = resolve(L, jv->valuestring, -1), u = -1;
        if (v < 0) return -1;
        if (ju) {
            if (!cJSON_IsString(ju)) return lfail(L, "updates must be a tensor name, got %s", json_type(ju));
            if ((u = resolve(L, ju->valuestring, -1)) < 0) return -1;
        }
        /* The loss listed among the outputs keeps its position there. */
        int r = v == loss_v && u < 0 && g->loss < 0 ? ir_set_loss(g, v) : ir_add_output(g, v, u);
        if (r < 0) return lfail(L, "%s", ir_error(g));
    }
    if (loss_v >= 0 && g->loss < 0) {
        set_place(L, "loss", -1, NULL);
        if (ir_set_loss(g, loss_v) < 0) return lfail(L, "%s", ir_error(g));
    }
    return 0;
}

/* ---- top level --------------------------------------------------------- */

/* Writes "line L, column C" of position `pos` in `text` into buf. */
static void line_col(const char *text, const char *pos, char *buf, size_t n)
{
    int line = 1;
    const char *bol = text;
    for (const char *p = text; p < pos; p++)
        if (*p == '\n') {
            line++;
            bol = p + 1;
        }
    snprintf(buf, n, "line %d, column %d", line, (int)(pos - bol) + 1);
}

/* An optional array field of the top object; NULL if absent. */
static int get_array(loader *L, const cJSON *root, const char *key, const cJSON **out, int *n)
{
    *out = cJSON_GetObjectItemCaseSensitive(root, key);
    *n = 0;
    if (!*out) return 0;
    set_place(L, key, -1, NULL);
    if (!cJSON_IsArray(*out)) return lfail(L, "must be an array, got %s", json_type(*out));
    *n = cJSON_GetArraySize(*out);
    if (*n > JSON_MAX_ENTRIES) return lfail(L, "%d entries, more than the limit of %d", *n, JSON_MAX_ENTRIES);
    return 0;
}

/* Largest id + 1 that the executors fill argument x with (exec/fill.c). */
static double id_bound(const ir_value *x)
{
    switch (x->init) {
    case IR_INIT_IDS: return x->init_arg;
    case IR_INIT_AUTO:
    case IR_INIT_ONES: return 2;
    case IR_INIT_DATA: return 0; /* given ids: gather checks them where it reads them */
    case IR_INIT_ZEROS:
    case IR_INIT_NORMAL:
    case IR_N_INITS: break;
    }
    return 1;
}

/* Ids drawn for an argument must index inside what they index: one_hot's
 * depth, gather's table rows, scatter_add's result rows (labels beyond the
 * depth would give a silently wrong loss, ids beyond a table a read outside
 * it).  Returns 0 or -1 with a message naming the op and the argument. */
static int check_ids(const ir_graph *g, char *err, size_t errlen)
{
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        int target, last, k = ir_op_ids(o->kind, &target, &last);
        if (k < 0) continue;
        const ir_value *t = &g->values[target >= 0 ? o->in[target] : o->out];
        int64_t limit = t->dims[last ? t->rank - 1 : 0];
        const char *what = target >= 0 ? "its table's row count" : last ? "its depth" : "its row count";
        const ir_value *x = &g->values[o->in[k]];
        if (x->producer >= 0 || x->dtype != IR_I32 || id_bound(x) <= (double)limit) continue;
        return ir_errf(err, errlen, "op '%s' (%s): ids '%s' are drawn from [0, %.0f) but %s is %lld", g->values[o->out].name,
                       ir_op_name(o->kind), x->name, id_bound(x), what, (long long)limit);
    }
    return 0;
}

/* The top level: an object of the known keys whose "format" is this carve's.  Returns 0 or -1. */
static int check_top(loader *L, const cJSON *root)
{
    static const char *const top_keys[] = {"format", "name", "layers", "args", "ops", "outputs", "loss", NULL};
    if (!cJSON_IsObject(root)) return lfail(L, "the top level must be an object, got %s", json_type(root));
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!fmt) return lfail(L, "missing field \"format\" (expected \"" JSON_FORMAT "\")");
    if (!cJSON_IsString(fmt)) return lfail(L, "format must be a string, got %s", json_type(fmt));
    if (strcmp(fmt->valuestring, JSON_FORMAT) != 0) {
        if (!strncmp(fmt->valuestring, "carve-graph/", 12))
            return lfail(L, "format \"%.40s\" is not supported (this carve reads \"" JSON_FORMAT "\")", fmt->valuestring);
        return lfail(L, "format \"%.40s\" is not a carve graph (expected \"" JSON_FORMAT "\")", fmt->valuestring);
    }
    return check_keys(L, root, top_keys, NULL, NULL);
}

/* The name index (a power of two, at least twice the names of args and ops), the
 * args' and the ops' tables.  Returns 0 or -1. */
static int alloc_index(loader *L)
{
    size_t names = (size_t)L->n_args + (size_t)L->n_ops;
    L->n_slots = 16;
    while (L->n_slots < 2 * names) L->n_slots *= 2;
    L->slots = calloc(L->n_slots, sizeof *L->slots);
    L->args = calloc((size_t)L->n_args + 1, sizeof *L->args);
    L->op_value = calloc((size_t)L->n_ops + 1, sizeof *L->op_value);
    if (!L->slots || !L->args || !L->op_value) return lfail(L, "out of memory");
    return 0;
}

/* The loaded graph's layer count ("layers", or -1: as its tags say), its name index
 * rebuilt where names were set directly, and the whole of it verified.  Returns 0 or -1. */
static int finish_tree(loader *L, int layers)
{
    if (layers >= 0) {
        set_place(L, "layers", -1, NULL);
        if (layers < L->g->n_layers) return lfail(L, "is %d, but layer tags go up to %d", layers, L->g->n_layers - 1);
        L->g->n_layers = layers;
    }
    if (L->renamed) { /* names were set directly: a clone rebuilds the name index */
        ir_graph *c = ir_clone(L->g);
        ir_free(L->g);
        L->g = c;
    }
    char verr[IR_ERR_LEN];
    L->place[0] = 0;
    if (ir_verify(L->g, verr, sizeof verr) < 0) return lfail(L, "the loaded graph does not verify: %s", verr);
    if (check_ids(L->g, verr, sizeof verr) < 0) return lfail(L, "%s", verr);
    return 0;
}

static ir_graph *load_tree(loader *L, const cJSON *root)
{
    if (check_top(L, root) < 0) return NULL;
    const cJSON *jname = cJSON_GetObjectItemCaseSensitive(root, "name");
    const char *gname = "graph";
    if (jname && get_string(L, jname, "name", &gname) < 0) return NULL;
    int layers = -1;
    const cJSON *jl = cJSON_GetObjectItemCaseSensitive(root, "layers");
    if (jl && get_int_range(L, jl, "layers", 0, JSON_MAX_LAYER, &layers) < 0) return NULL;

    const cJSON *args, *outs;
    int n_outs;
    if (get_array(L, root, "args", &args, &L->n_args) < 0 || get_array(L, root, "ops", &L->ops, &L->n_ops) < 0 ||
        get_array(L, root, "outputs", &outs, &n_outs) < 0)
        return NULL;
    static const cJSON empty = {0};
    if (!L->ops) L->ops = &empty;
    if (alloc_index(L) < 0) return NULL;
    int i = 0;
    for (const cJSON *a = args ? args->child : NULL; a; a = a->next, i++)
        if (parse_arg(L, i, a) < 0) return NULL;

    L->g = ir_new(gname);
    i = 0;
    for (const cJSON *o = L->ops->child; o; o = o->next, i++)
        if (load_op(L, i, o) < 0) return NULL;
    if (create_args(L, L->n_args - 1) < 0) return NULL;
    ir_set_layer(L->g, -1);
    if (load_links(L) < 0 || load_outputs(L, outs, cJSON_GetObjectItemCaseSensitive(root, "loss")) < 0) return NULL;
    if (finish_tree(L, layers) < 0) return NULL;
    ir_graph *g = L->g;
    L->g = NULL;
    return g;
}

ir_graph *ir_load_json(const char *text, char *err, size_t errlen)
{
    loader L;
    memset(&L, 0, sizeof L);
    L.err = err;
    L.errlen = errlen;
    if (err && errlen) err[0] = 0;
    size_t len = strlen(text);
    if (len > JSON_MAX_BYTES) {
        lfail(&L, "the graph text is %zu MB, more than the limit of %zu MB", len >> 20, JSON_MAX_BYTES >> 20);
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        char where[64], near[40];
        if (!end || end < text || end > text + len) end = text + len;
        line_col(text, end, where, sizeof where);
        size_t k = 0;
        for (const char *p = end; *p && *p != '\n' && *p != '\r' && k < 20; p++)
            near[k++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
        near[k] = 0;
        if (k) lfail(&L, "%s: malformed JSON near '%s'", where, near);
        else lfail(&L, "%s: malformed JSON (unexpected end of %s)", where, *end ? "line" : "input");
        return NULL;
    }
    ir_graph *g = load_tree(&L, root);
    ir_free(L.g); /* non-NULL only after an error */
    free(L.slots);
    free(L.args);
    free(L.op_value);
    cJSON_Delete(root);
    return g;
}

ir_graph *ir_load_json_file(const char *path, char *err, size_t errlen)
{
    char none[1];
    if (!err || !errlen) {
        err = none;
        errlen = sizeof none;
    }
    char why[160];
    size_t n;
    char *buf = ir_read_input(path, JSON_MAX_BYTES, &n, why, sizeof why);
    if (!buf) {
        if (!strncmp(why, "larger than", 11))
            snprintf(err, errlen, "'%s' is more than the limit of %zu MB for a graph file", path, JSON_MAX_BYTES >> 20);
        else snprintf(err, errlen, "cannot read '%s': %s", path, why);
        return NULL;
    }
    char msg[IR_ERR_LEN + 64];
    ir_graph *g = NULL;
    const char *nul = memchr(buf, 0, n);
    if (nul) {
        char where[64];
        line_col(buf, nul, where, sizeof where);
        snprintf(msg, sizeof msg, "%s: a NUL byte (a binary file?)", where);
    } else {
        g = ir_load_json(buf, msg, sizeof msg);
    }
    if (!g) snprintf(err, errlen, "%s: %s", path, msg);
    free(buf);
    return g;
}
