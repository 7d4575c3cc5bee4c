/* graph.c - the graph container, the op table and the builder.
 *
 * A graph owns three growable arrays (values, ops, outputs), a string arena
 * for names, and an open-addressing hash table from names to value ids.
 * Every builder call checks its operands and attributes, infers the result
 * type, and appends one op and one value; on a bad call it records the first
 * error in g->err and returns -1 (see ir.h).
 */
#include "ir.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- op table --------------------------------------------------------- */

static const char *const op_names[IR_N_OPS] = {
#define X(e, name, arity, cls) name,
#include "ops.def"
#undef X
};
static const int op_arity[IR_N_OPS] = {
#define X(e, name, arity, cls) arity,
#include "ops.def"
#undef X
};
static const ir_opclass op_class[IR_N_OPS] = {
#define X(e, name, arity, cls) IR_##cls,
#include "ops.def"
#undef X
};

const char *ir_op_name(ir_opkind k) { return (unsigned)k < IR_N_OPS ? op_names[k] : "?"; }
int ir_op_arity(ir_opkind k) { return op_arity[k]; }
ir_opclass ir_op_class(ir_opkind k) { return op_class[k]; }

int ir_op_from_name(const char *name)
{
    for (int k = 0; k < IR_N_OPS; k++)
        if (strcmp(op_names[k], name) == 0) return k;
    return -1;
}

static const char *const dtype_names[IR_N_DTYPES] = {"f32", "i32", "bf16", "f16"};
static const size_t dtype_sizes[IR_N_DTYPES] = {4, 4, 2, 2};
static const char *const role_names[IR_N_ROLES] = {"input", "param", "opt_state", "intermediate"};

static const char *const init_names[IR_N_INITS] = {"auto", "normal", "zeros", "ones", "ids"};

const char *ir_init_name(ir_init i) { return (unsigned)i < IR_N_INITS ? init_names[i] : "?"; }

int ir_init_from_name(const char *name)
{
    for (int i = 0; i < IR_N_INITS; i++)
        if (strcmp(init_names[i], name) == 0) return i;
    return -1;
}

int ir_set_init(ir_graph *g, int v, ir_init init, double arg)
{
    if (g->err[0] || v < 0) return -1;
    ir_value *x = &g->values[v];
    if (x->role == IR_INTERMEDIATE) return ir_fail(g, "init of '%s': only arguments are filled", x->name);
    if ((unsigned)init >= IR_N_INITS) return ir_fail(g, "init of '%s': unknown kind", x->name);
    if (init == IR_INIT_IDS && (x->dtype != IR_I32 || arg < 1 || arg > 2147483647.0))
        return ir_fail(g, "init of '%s': ids need an i32 value and a range in 1..2^31-1", x->name);
    if ((init == IR_INIT_NORMAL || init == IR_INIT_ONES) && x->dtype == IR_I32)
        return ir_fail(g, "init of '%s': %s needs a float value", x->name, init_names[init]);
    if (init == IR_INIT_NORMAL && !(arg >= 0 && arg < 1e6))
        return ir_fail(g, "init of '%s': std must be in [0, 1e6)", x->name);
    x->init = init;
    x->init_arg = arg;
    return 0;
}

const char *ir_dtype_name(ir_dtype t) { return (unsigned)t < IR_N_DTYPES ? dtype_names[t] : "?"; }
size_t ir_dtype_size(ir_dtype t) { return dtype_sizes[t]; }
const char *ir_role_name(ir_role r) { return (unsigned)r < IR_N_ROLES ? role_names[r] : "?"; }

int ir_dtype_from_name(const char *name)
{
    for (int i = 0; i < IR_N_DTYPES; i++)
        if (strcmp(dtype_names[i], name) == 0) return i;
    return -1;
}

int ir_role_from_name(const char *name)
{
    for (int i = 0; i < IR_N_ROLES; i++)
        if (strcmp(role_names[i], name) == 0) return i;
    return -1;
}

/* ---- memory ----------------------------------------------------------- */

void *ir_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "carve: out of memory (%zu bytes)\n", n);
        abort();
    }
    return q;
}

void *ir_xcalloc(size_t n, size_t size)
{
    void *q = calloc(n ? n : 1, size ? size : 1);
    if (!q) {
        fprintf(stderr, "carve: out of memory (%zu x %zu bytes)\n", n, size);
        abort();
    }
    return q;
}

/* The string arena: a list of blocks; strings are never freed one by one. */
struct ir_strbuf {
    struct ir_strbuf *next;
    size_t used, cap;
    char data[];
};

const char *ir_intern(ir_graph *g, const char *s)
{
    size_t n = strlen(s) + 1;
    ir_strbuf *b = g->strings;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 16384 ? n : 16384;
        ir_strbuf *nb = ir_xrealloc(NULL, sizeof *nb + cap);
        nb->next = b;
        nb->used = 0;
        nb->cap = cap;
        g->strings = b = nb;
    }
    char *p = b->data + b->used;
    memcpy(p, s, n);
    b->used += n;
    return p;
}

ir_graph *ir_new(const char *name)
{
    ir_graph *g = ir_xrealloc(NULL, sizeof *g);
    memset(g, 0, sizeof *g);
    g->name = strdup(name ? name : "graph");
    if (!g->name) abort();
    g->loss = -1;
    g->cur_layer = -1;
    return g;
}

void ir_free(ir_graph *g)
{
    if (!g) return;
    for (ir_strbuf *b = g->strings, *n; b; b = n) {
        n = b->next;
        free(b);
    }
    free(g->values);
    free(g->ops);
    free(g->outputs);
    free(g->name_index);
    free(g->name);
    free(g);
}

int ir_errf(char *err, size_t n, const char *fmt, ...)
{
    if (err && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

const char *ir_error(const ir_graph *g) { return g->err[0] ? g->err : NULL; }

int ir_fail(ir_graph *g, const char *fmt, ...)
{
    if (g->err[0]) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->err, sizeof g->err, fmt, ap);
    va_end(ap);
    if (!g->err[0]) strcpy(g->err, "error");
    return -1;
}

void ir_set_layer(ir_graph *g, int layer)
{
    g->cur_layer = layer;
    if (layer + 1 > g->n_layers) g->n_layers = layer + 1;
}

/* ---- name table ------------------------------------------------------- */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void index_insert(ir_graph *g, int id)
{
    size_t mask = (size_t)g->name_cap - 1;
    size_t i = hash_str(g->values[id].name) & mask;
    while (g->name_index[i] >= 0) i = (i + 1) & mask;
    g->name_index[i] = id;
}

/* Rebuilds the name index with room for twice the values (load <= 1/2). */
static void index_grow(ir_graph *g)
{
    int cap = 256;
    while (cap < 4 * g->n_values) cap *= 2;
    free(g->name_index);
    g->name_index = ir_xrealloc(NULL, (size_t)cap * sizeof(int));
    for (int i = 0; i < cap; i++) g->name_index[i] = -1;
    g->name_cap = cap;
    for (int v = 0; v < g->n_values; v++) index_insert(g, v);
}

int ir_find(const ir_graph *g, const char *name)
{
    if (!g->name_cap) return -1;
    size_t mask = (size_t)g->name_cap - 1;
    for (size_t i = hash_str(name) & mask; g->name_index[i] >= 0; i = (i + 1) & mask)
        if (strcmp(g->values[g->name_index[i]].name, name) == 0) return g->name_index[i];
    return -1;
}

int ir_rename(ir_graph *g, int v, const char *name)
{
    if (v < 0 || v >= g->n_values) return -1;
    if (!name || !name[0]) return ir_fail(g, "empty value name");
    int other = ir_find(g, name);
    if (other == v) return 0;
    if (other >= 0) return ir_fail(g, "duplicate name '%s'", name);
    g->values[v].name = ir_intern(g, name);
    index_grow(g); /* rebuild: the old name must not be found any more */
    return 0;
}

/* ---- values ----------------------------------------------------------- */

int64_t ir_numel(const ir_value *v)
{
    int64_t n = 1;
    for (int i = 0; i < v->rank; i++) n *= v->dims[i];
    return n;
}

size_t ir_bytes(const ir_value *v) { return (size_t)ir_numel(v) * ir_dtype_size(v->dtype); }

char *ir_type_str(const ir_value *v, char *buf, size_t n)
{
    size_t o = (size_t)snprintf(buf, n, "%s[", ir_dtype_name(v->dtype));
    for (int i = 0; i < v->rank && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? "," : "", (long long)v->dims[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
    return buf;
}

#define MAX_NUMEL ((int64_t)1 << 48)

static int check_shape(ir_graph *g, const char *what, int rank, const int64_t *dims)
{
    if (rank < 0 || rank > IR_MAX_RANK)
        return ir_fail(g, "%s: rank %d is outside 0..%d", what, rank, IR_MAX_RANK);
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] <= 0)
            return ir_fail(g, "%s: dimension %d is %lld (must be positive)", what, i, (long long)dims[i]);
        if (dims[i] > MAX_NUMEL || n > MAX_NUMEL / dims[i])
            return ir_fail(g, "%s: shape overflows (more than 2^48 elements)", what);
        n *= dims[i];
    }
    return 0;
}

static int new_value(ir_graph *g, const char *name, ir_role role, ir_dtype t, int rank,
                     const int64_t *dims, int producer)
{
    char autoname[32];
    if (name) {
        if (!name[0]) return ir_fail(g, "empty value name");
        if (name[0] == '%') return ir_fail(g, "value name '%s': names starting with %% are reserved", name);
        if (ir_find(g, name) >= 0) return ir_fail(g, "duplicate name '%s'", name);
    } else {
        snprintf(autoname, sizeof autoname, "%%%d", g->n_values);
        name = autoname;
    }
    if (g->n_values == g->cap_values) {
        g->cap_values = g->cap_values ? 2 * g->cap_values : 64;
        g->values = ir_xrealloc(g->values, (size_t)g->cap_values * sizeof *g->values);
    }
    int id = g->n_values++;
    ir_value *v = &g->values[id];
    memset(v, 0, sizeof *v);
    v->name = ir_intern(g, name);
    v->role = role;
    v->dtype = t;
    v->rank = rank;
    for (int i = 0; i < rank; i++) v->dims[i] = dims[i];
    v->producer = producer;
    v->layer = g->cur_layer;
    v->tied = -1;
    v->grad_of = -1;
    if (2 * g->n_values > g->name_cap) index_grow(g);
    else index_insert(g, id);
    return id;
}

int ir_arg(ir_graph *g, const char *name, ir_role role, ir_dtype t, int rank, const int64_t *dims)
{
    if (g->err[0]) return -1;
    if (!name) return ir_fail(g, "argument without a name");
    if ((unsigned)role >= IR_INTERMEDIATE) return ir_fail(g, "argument '%s': bad role", name);
    if ((unsigned)t >= IR_N_DTYPES) return ir_fail(g, "argument '%s': bad dtype", name);
    char what[160];
    snprintf(what, sizeof what, "argument '%s'", name);
    if (check_shape(g, what, rank, dims) < 0) return -1;
    return new_value(g, name, role, t, rank, dims, -1);
}

/* ---- shape inference -------------------------------------------------- */

static int is_float(ir_dtype t) { return t != IR_I32; }

static int same_shape(const ir_value *a, const ir_value *b)
{
    if (a->rank != b->rank) return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return 0;
    return 1;
}

static int ints_are_dims(const ir_attrs *a, int rank)
{
    for (int i = 0; i < a->n_ints; i++)
        if (a->ints[i] < 0 || a->ints[i] >= rank) return 0;
    return 1;
}

/* Infers result dtype and shape of op k on operands `in`; fills *t, *rank, dims.
 * Returns 0 or -1 with an error naming the op. */
static int infer(ir_graph *g, ir_opkind k, const int *in, const ir_attrs *a, ir_dtype *t,
                 int *rank, int64_t *dims, int hint_rank, const int64_t *hint)
{
    const char *on = ir_op_name(k);
    const ir_value *x = op_arity[k] >= 1 && in[0] >= 0 ? &g->values[in[0]] : NULL;
    const ir_value *y = op_arity[k] >= 2 ? &g->values[in[1]] : NULL;
    char ta[64], tb[64];
    switch (k) {
    case IR_OP_CONSTANT:
    case IR_OP_IOTA:
        if (!hint) return ir_fail(g, "%s: needs a shape", on);
        if (check_shape(g, on, hint_rank, hint) < 0) return -1;
        if (k == IR_OP_IOTA && (a->n_ints != 1 || a->ints[0] < 0 || a->ints[0] >= hint_rank))
            return ir_fail(g, "iota: needs one dim in 0..%d", hint_rank - 1);
        *rank = hint_rank;
        memcpy(dims, hint, sizeof(int64_t) * (size_t)hint_rank);
        return 0;
    case IR_OP_NEG: case IR_OP_EXP: case IR_OP_LOG: case IR_OP_SQRT: case IR_OP_RSQRT:
    case IR_OP_TANH: case IR_OP_GELU: case IR_OP_GELU_GRAD: case IR_OP_RELU:
    case IR_OP_SCALE: case IR_OP_ADD_SCALAR: case IR_OP_STOP_GRAD:
        if (!is_float(x->dtype)) return ir_fail(g, "%s: operand '%s' is %s, needs a float type", on, x->name, ir_dtype_name(x->dtype));
        *t = x->dtype;
        *rank = x->rank;
        memcpy(dims, x->dims, sizeof x->dims);
        return 0;
    case IR_OP_ADD: case IR_OP_SUB: case IR_OP_MUL: case IR_OP_DIV: case IR_OP_MAX: case IR_OP_GE:
        if (!is_float(x->dtype) || x->dtype != y->dtype)
            return ir_fail(g, "%s: operands '%s' (%s) and '%s' (%s) need one float type", on, x->name,
                           ir_dtype_name(x->dtype), y->name, ir_dtype_name(y->dtype));
        if (!same_shape(x, y))
            return ir_fail(g, "%s: shape mismatch: '%s' is %s, '%s' is %s (broadcast explicitly)", on,
                           x->name, ir_type_str(x, ta, sizeof ta), y->name, ir_type_str(y, tb, sizeof tb));
        *t = x->dtype;
        *rank = x->rank;
        memcpy(dims, x->dims, sizeof x->dims);
        return 0;
    case IR_OP_EINSUM: {
        ir_einsum_spec e;
        char err[200];
        if (ir_einsum_parse(a->subscripts, x->rank, y->rank, &e, err, sizeof err) < 0)
            return ir_fail(g, "einsum \"%s\": %s", a->subscripts, err);
        if (!is_float(x->dtype) || x->dtype != y->dtype)
            return ir_fail(g, "einsum: operands '%s' and '%s' need one float type", x->name, y->name);
        for (int i = 0; i < e.rank_a; i++) {
            int j = ir_einsum_pos(e.b, e.rank_b, e.a[i]);
            if (j >= 0 && x->dims[i] != y->dims[j])
                return ir_fail(g, "einsum \"%s\": letter '%c' is %lld in '%s' but %lld in '%s'", a->subscripts,
                               e.a[i], (long long)x->dims[i], x->name, (long long)y->dims[j], y->name);
        }
        for (int i = 0; i < e.rank_out; i++) {
            int j = ir_einsum_pos(e.a, e.rank_a, e.out[i]);
            dims[i] = j >= 0 ? x->dims[j] : y->dims[ir_einsum_pos(e.b, e.rank_b, e.out[i])];
        }
        *t = x->dtype;
        *rank = e.rank_out;
        return 0;
    }
    case IR_OP_BROADCAST: {
        if (!hint) return ir_fail(g, "broadcast: needs a result shape");
        if (check_shape(g, on, hint_rank, hint) < 0) return -1;
        if (a->n_ints != x->rank)
            return ir_fail(g, "broadcast of '%s': dims map has %d entries, operand rank is %d", x->name, a->n_ints, x->rank);
        for (int i = 0; i < x->rank; i++) {
            int64_t d = a->ints[i];
            if (d < 0 || d >= hint_rank || (i && d <= a->ints[i - 1]))
                return ir_fail(g, "broadcast of '%s': dims map must be increasing dims of the result", x->name);
            if (hint[d] != x->dims[i])
                return ir_fail(g, "broadcast of '%s': operand dim %d is %lld but result dim %lld is %lld", x->name,
                               i, (long long)x->dims[i], (long long)d, (long long)hint[d]);
        }
        *t = x->dtype;
        *rank = hint_rank;
        memcpy(dims, hint, sizeof(int64_t) * (size_t)hint_rank);
        return 0;
    }
    case IR_OP_REDUCE_SUM:
    case IR_OP_REDUCE_MAX: {
        if (!is_float(x->dtype)) return ir_fail(g, "%s: operand '%s' needs a float type", on, x->name);
        if (a->n_ints < 1 || !ints_are_dims(a, x->rank))
            return ir_fail(g, "%s of '%s': needs 1 or more dims in 0..%d", on, x->name, x->rank - 1);
        int keep = 0, seen = 0;
        for (int i = 0; i < a->n_ints; i++) {
            if (seen & (1 << a->ints[i])) return ir_fail(g, "%s of '%s': dim %lld repeated", on, x->name, (long long)a->ints[i]);
            seen |= 1 << a->ints[i];
        }
        for (int i = 0; i < x->rank; i++)
            if (!(seen & (1 << i))) dims[keep++] = x->dims[i];
        *t = x->dtype;
        *rank = keep;
        return 0;
    }
    case IR_OP_TRANSPOSE: {
        if (a->n_ints != x->rank || !ints_are_dims(a, x->rank))
            return ir_fail(g, "transpose of '%s': perm must list the %d dims", x->name, x->rank);
        int seen = 0;
        for (int i = 0; i < x->rank; i++) {
            if (seen & (1 << a->ints[i])) return ir_fail(g, "transpose of '%s': perm repeats dim %lld", x->name, (long long)a->ints[i]);
            seen |= 1 << a->ints[i];
            dims[i] = x->dims[a->ints[i]];
        }
        *t = x->dtype;
        *rank = x->rank;
        return 0;
    }
    case IR_OP_RESHAPE: {
        if (!hint) return ir_fail(g, "reshape: needs a result shape");
        if (check_shape(g, on, hint_rank, hint) < 0) return -1;
        int64_t n = 1;
        for (int i = 0; i < hint_rank; i++) n *= hint[i];
        if (n != ir_numel(x))
            return ir_fail(g, "reshape of '%s' (%s): %lld elements cannot become %lld", x->name,
                           ir_type_str(x, ta, sizeof ta), (long long)ir_numel(x), (long long)n);
        *t = x->dtype;
        *rank = hint_rank;
        memcpy(dims, hint, sizeof(int64_t) * (size_t)hint_rank);
        return 0;
    }
    case IR_OP_GATHER:
        if (!is_float(x->dtype) || x->rank < 1) return ir_fail(g, "gather: table '%s' needs a float type and rank >= 1", x->name);
        if (y->dtype != IR_I32) return ir_fail(g, "gather: ids '%s' must be i32", y->name);
        if (y->rank + x->rank - 1 > IR_MAX_RANK) return ir_fail(g, "gather: result rank above %d", IR_MAX_RANK);
        *rank = 0;
        for (int i = 0; i < y->rank; i++) dims[(*rank)++] = y->dims[i];
        for (int i = 1; i < x->rank; i++) dims[(*rank)++] = x->dims[i];
        *t = x->dtype;
        return 0;
    case IR_OP_SCATTER_ADD: {
        /* x = ids, y = updates */
        if (x->dtype != IR_I32) return ir_fail(g, "scatter_add: ids '%s' must be i32", x->name);
        if (!is_float(y->dtype)) return ir_fail(g, "scatter_add: updates '%s' need a float type", y->name);
        if (!hint || hint_rank < 1 || hint[0] <= 0) return ir_fail(g, "scatter_add: needs a positive row count");
        if (y->rank < x->rank) return ir_fail(g, "scatter_add: updates '%s' rank below ids '%s' rank", y->name, x->name);
        for (int i = 0; i < x->rank; i++)
            if (x->dims[i] != y->dims[i])
                return ir_fail(g, "scatter_add: updates '%s' dim %d is %lld, ids '%s' dim is %lld", y->name, i,
                               (long long)y->dims[i], x->name, (long long)x->dims[i]);
        dims[0] = hint[0];
        *rank = 1;
        for (int i = x->rank; i < y->rank; i++) dims[(*rank)++] = y->dims[i];
        *t = y->dtype;
        return check_shape(g, on, *rank, dims);
    }
    case IR_OP_ONE_HOT:
        if (x->dtype != IR_I32) return ir_fail(g, "one_hot: ids '%s' must be i32", x->name);
        if (x->rank + 1 > IR_MAX_RANK) return ir_fail(g, "one_hot: result rank above %d", IR_MAX_RANK);
        if (a->n_ints != 1 || a->ints[0] <= 0) return ir_fail(g, "one_hot: needs a positive depth");
        memcpy(dims, x->dims, sizeof x->dims);
        dims[x->rank] = a->ints[0];
        *rank = x->rank + 1;
        *t = IR_F32;
        return check_shape(g, on, *rank, dims);
    }
    return ir_fail(g, "unknown op %d", (int)k);
}

int ir_add_op(ir_graph *g, ir_opkind k, int n_in, const int *in, const ir_attrs *a, ir_dtype t,
              int rank, const int64_t *shape_hint, const char *name)
{
    if (g->err[0]) return -1;
    if ((unsigned)k >= IR_N_OPS) return ir_fail(g, "unknown op %d", (int)k);
    if (n_in != op_arity[k]) return ir_fail(g, "%s: takes %d operands, got %d", op_names[k], op_arity[k], n_in);
    for (int i = 0; i < n_in; i++)
        if (in[i] < 0 || in[i] >= g->n_values)
            return ir_fail(g, "%s: operand %d is not a value of the graph", op_names[k], i);
    ir_attrs at;
    if (a) at = *a;
    else memset(&at, 0, sizeof at);
    if (at.n_ints < 0 || at.n_ints > IR_MAX_RANK) return ir_fail(g, "%s: bad attribute count", op_names[k]);
    if (k == IR_OP_EINSUM && !memchr(at.subscripts, 0, sizeof at.subscripts))
        return ir_fail(g, "einsum: subscripts too long");
    int out_rank = 0;
    int64_t dims[IR_MAX_RANK] = {0};
    ir_dtype out_t = (unsigned)t < IR_N_DTYPES ? t : IR_F32;
    if (infer(g, k, in, &at, &out_t, &out_rank, dims, rank, shape_hint) < 0) return -1;
    if (k == IR_OP_CONSTANT || k == IR_OP_IOTA) out_t = t;
    if (g->n_ops == g->cap_ops) {
        g->cap_ops = g->cap_ops ? 2 * g->cap_ops : 64;
        g->ops = ir_xrealloc(g->ops, (size_t)g->cap_ops * sizeof *g->ops);
    }
    int v = new_value(g, name, IR_INTERMEDIATE, out_t, out_rank, dims, g->n_ops);
    if (v < 0) return -1;
    ir_op *op = &g->ops[g->n_ops++];
    memset(op, 0, sizeof *op);
    op->kind = k;
    op->n_in = n_in;
    for (int i = 0; i < n_in; i++) op->in[i] = in[i];
    op->out = v;
    op->layer = g->cur_layer;
    op->attrs = at;
    return v;
}

/* ---- typed builder wrappers ------------------------------------------ */

static int ok_ids(const ir_graph *g, int a, int b) { return !g->err[0] && a >= 0 && b >= 0; }

int ir_constant(ir_graph *g, double value, ir_dtype t, int rank, const int64_t *dims)
{
    ir_attrs a = {.scalar = value};
    return ir_add_op(g, IR_OP_CONSTANT, 0, NULL, &a, t, rank, dims, NULL);
}

int ir_iota(ir_graph *g, ir_dtype t, int rank, const int64_t *dims, int dim)
{
    ir_attrs a = {.n_ints = 1, .ints = {dim}};
    return ir_add_op(g, IR_OP_IOTA, 0, NULL, &a, t, rank, dims, NULL);
}

int ir_unary(ir_graph *g, ir_opkind k, int x)
{
    if (!ok_ids(g, x, 0)) return -1;
    if (op_class[k] != IR_UNARY) return ir_fail(g, "%s is not a unary op", op_names[k]);
    return ir_add_op(g, k, 1, &x, NULL, IR_F32, 0, NULL, NULL);
}

int ir_scale(ir_graph *g, int x, double s)
{
    if (!ok_ids(g, x, 0)) return -1;
    ir_attrs a = {.scalar = s};
    return ir_add_op(g, IR_OP_SCALE, 1, &x, &a, IR_F32, 0, NULL, NULL);
}

int ir_add_scalar(ir_graph *g, int x, double s)
{
    if (!ok_ids(g, x, 0)) return -1;
    ir_attrs a = {.scalar = s};
    return ir_add_op(g, IR_OP_ADD_SCALAR, 1, &x, &a, IR_F32, 0, NULL, NULL);
}

int ir_binary(ir_graph *g, ir_opkind k, int a, int b)
{
    if (!ok_ids(g, a, b)) return -1;
    if (op_class[k] != IR_BINARY) return ir_fail(g, "%s is not a binary op", op_names[k]);
    int in[2] = {a, b};
    return ir_add_op(g, k, 2, in, NULL, IR_F32, 0, NULL, NULL);
}

int ir_einsum(ir_graph *g, const char *subscripts, int a, int b)
{
    if (!ok_ids(g, a, b)) return -1;
    ir_attrs at;
    memset(&at, 0, sizeof at);
    if (strlen(subscripts) >= sizeof at.subscripts) return ir_fail(g, "einsum: subscripts too long");
    strcpy(at.subscripts, subscripts);
    int in[2] = {a, b};
    return ir_add_op(g, IR_OP_EINSUM, 2, in, &at, IR_F32, 0, NULL, NULL);
}

static int with_ints(ir_graph *g, ir_opkind k, int x, int n, const int64_t *ints, int rank, const int64_t *dims)
{
    if (!ok_ids(g, x, 0)) return -1;
    if (n < 0 || n > IR_MAX_RANK) return ir_fail(g, "%s: too many dims", op_names[k]);
    ir_attrs a;
    memset(&a, 0, sizeof a);
    a.n_ints = n;
    for (int i = 0; i < n; i++) a.ints[i] = ints[i];
    return ir_add_op(g, k, 1, &x, &a, IR_F32, rank, dims, NULL);
}

int ir_broadcast(ir_graph *g, int x, int rank, const int64_t *dims, const int64_t *map)
{
    if (!ok_ids(g, x, 0)) return -1;
    return with_ints(g, IR_OP_BROADCAST, x, g->values[x].rank, map, rank, dims);
}

int ir_reduce(ir_graph *g, ir_opkind k, int x, int n_dims, const int64_t *dims)
{
    if (k != IR_OP_REDUCE_SUM && k != IR_OP_REDUCE_MAX) return ir_fail(g, "%s is not a reduction", op_names[k]);
    return with_ints(g, k, x, n_dims, dims, 0, NULL);
}

int ir_transpose(ir_graph *g, int x, const int64_t *perm)
{
    if (!ok_ids(g, x, 0)) return -1;
    return with_ints(g, IR_OP_TRANSPOSE, x, g->values[x].rank, perm, 0, NULL);
}

int ir_reshape(ir_graph *g, int x, int rank, const int64_t *dims)
{
    return with_ints(g, IR_OP_RESHAPE, x, 0, NULL, rank, dims);
}

int ir_gather(ir_graph *g, int table, int ids)
{
    if (!ok_ids(g, table, ids)) return -1;
    int in[2] = {table, ids};
    return ir_add_op(g, IR_OP_GATHER, 2, in, NULL, IR_F32, 0, NULL, NULL);
}

int ir_scatter_add(ir_graph *g, int ids, int updates, int64_t rows)
{
    if (!ok_ids(g, ids, updates)) return -1;
    int in[2] = {ids, updates};
    return ir_add_op(g, IR_OP_SCATTER_ADD, 2, in, NULL, IR_F32, 1, &rows, NULL);
}

int ir_one_hot(ir_graph *g, int ids, int64_t depth)
{
    return with_ints(g, IR_OP_ONE_HOT, ids, 1, &depth, 0, NULL);
}

/* ---- outputs ---------------------------------------------------------- */

int ir_add_output(ir_graph *g, int v, int updates)
{
    if (g->err[0] || v < 0) return -1;
    if (v >= g->n_values) return ir_fail(g, "output: not a value of the graph");
    if (updates >= g->n_values) return ir_fail(g, "output '%s': updated argument out of range", g->values[v].name);
    if (updates >= 0) {
        const ir_value *a = &g->values[updates], *b = &g->values[v];
        char ta[64], tb[64];
        if (a->role == IR_INTERMEDIATE)
            return ir_fail(g, "output '%s': '%s' is not an argument and cannot be updated", b->name, a->name);
        if (!same_shape(a, b) || a->dtype != b->dtype)
            return ir_fail(g, "output '%s' (%s) cannot update '%s' (%s)", b->name, ir_type_str(b, tb, sizeof tb),
                           a->name, ir_type_str(a, ta, sizeof ta));
    }
    for (int i = 0; i < g->n_outputs; i++) {
        if (g->outputs[i].value == v) return ir_fail(g, "output '%s' listed twice", g->values[v].name);
        if (updates >= 0 && g->outputs[i].updates == updates)
            return ir_fail(g, "argument '%s' updated twice", g->values[updates].name);
    }
    if (g->n_outputs == g->cap_outputs) {
        g->cap_outputs = g->cap_outputs ? 2 * g->cap_outputs : 16;
        g->outputs = ir_xrealloc(g->outputs, (size_t)g->cap_outputs * sizeof *g->outputs);
    }
    g->outputs[g->n_outputs++] = (ir_output){v, updates};
    return 0;
}

int ir_set_loss(ir_graph *g, int v)
{
    if (g->err[0] || v < 0) return -1;
    if (v >= g->n_values) return ir_fail(g, "loss: not a value of the graph");
    if (g->values[v].rank != 0 || !is_float(g->values[v].dtype))
        return ir_fail(g, "loss '%s' must be a float scalar (rank 0), it has rank %d", g->values[v].name, g->values[v].rank);
    if (ir_add_output(g, v, -1) < 0) return -1;
    g->loss = v;
    return 0;
}

/* ---- clone and summaries --------------------------------------------- */

ir_graph *ir_clone(const ir_graph *g)
{
    ir_graph *c = ir_new(g->name);
    c->values = ir_xrealloc(NULL, (size_t)(g->n_values ? g->n_values : 1) * sizeof *c->values);
    c->ops = ir_xrealloc(NULL, (size_t)(g->n_ops ? g->n_ops : 1) * sizeof *c->ops);
    c->outputs = ir_xrealloc(NULL, (size_t)(g->n_outputs ? g->n_outputs : 1) * sizeof *c->outputs);
    if (g->n_values) memcpy(c->values, g->values, (size_t)g->n_values * sizeof *c->values);
    if (g->n_ops) memcpy(c->ops, g->ops, (size_t)g->n_ops * sizeof *c->ops);
    if (g->n_outputs) memcpy(c->outputs, g->outputs, (size_t)g->n_outputs * sizeof *c->outputs);
    c->n_values = c->cap_values = g->n_values;
    c->n_ops = c->cap_ops = g->n_ops;
    c->n_outputs = c->cap_outputs = g->n_outputs;
    if (!c->cap_values) c->cap_values = 1;
    if (!c->cap_ops) c->cap_ops = 1;
    if (!c->cap_outputs) c->cap_outputs = 1;
    for (int v = 0; v < c->n_values; v++) c->values[v].name = ir_intern(c, g->values[v].name);
    c->loss = g->loss;
    c->cur_layer = g->cur_layer;
    c->n_layers = g->n_layers;
    memcpy(c->err, g->err, sizeof c->err);
    index_grow(c);
    return c;
}

int64_t ir_param_count(const ir_graph *g)
{
    int64_t n = 0;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].role == IR_PARAM) n += ir_numel(&g->values[v]);
    return n;
}

double ir_op_flops(const ir_graph *g, int op)
{
    const ir_op *o = &g->ops[op];
    const ir_value *out = &g->values[o->out];
    switch (o->kind) {
    case IR_OP_EINSUM: {
        ir_einsum_spec e;
        const ir_value *a = &g->values[o->in[0]], *b = &g->values[o->in[1]];
        if (ir_einsum_parse(o->attrs.subscripts, a->rank, b->rank, &e, NULL, 0) < 0) return 0;
        double f = 2.0 * (double)ir_numel(out);
        for (int i = 0; i < e.rank_a; i++)
            if (ir_einsum_pos(e.out, e.rank_out, e.a[i]) < 0) f *= (double)a->dims[i];
        return f;
    }
    case IR_OP_REDUCE_SUM:
    case IR_OP_REDUCE_MAX:
        return (double)ir_numel(&g->values[o->in[0]]);
    case IR_OP_SCATTER_ADD:
        return (double)ir_numel(&g->values[o->in[1]]);
    case IR_OP_GELU:
    case IR_OP_GELU_GRAD:
        return 8.0 * (double)ir_numel(out);
    case IR_OP_CONSTANT: case IR_OP_IOTA: case IR_OP_BROADCAST: case IR_OP_TRANSPOSE:
    case IR_OP_RESHAPE: case IR_OP_GATHER: case IR_OP_ONE_HOT: case IR_OP_STOP_GRAD:
        return 0;
    case IR_OP_NEG: case IR_OP_EXP: case IR_OP_LOG: case IR_OP_SQRT: case IR_OP_RSQRT:
    case IR_OP_TANH: case IR_OP_RELU: case IR_OP_SCALE: case IR_OP_ADD_SCALAR:
    case IR_OP_ADD: case IR_OP_SUB: case IR_OP_MUL: case IR_OP_DIV: case IR_OP_MAX: case IR_OP_GE:
        return (double)ir_numel(out);
    }
    return 0;
}

double ir_graph_flops(const ir_graph *g)
{
    double f = 0;
    for (int i = 0; i < g->n_ops; i++) f += ir_op_flops(g, i);
    return f;
}
