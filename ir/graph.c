/* graph.c - the graph container, the op table and the builder.
 *
 * A graph owns three growable arrays (values, ops, outputs), a string arena
 * for names, and an open-addressing hash table from names to value ids.
 * Every builder call checks its operands and attributes, infers the result
 * type, and appends one op and one value; on a bad call it records the first
 * error in g->err and returns -1 (see ir.h).
 */
#include "hash.h"
#include "ir.h"
#include "pcg32.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- op table --------------------------------------------------------- */

#define PAD_ZERO 0.0f
#define PAD_NEG_INF (-INFINITY)
#define X(e, name, arity, cls, count, coef, bytes, grads, partial, ids, domain, pad, shape, rule, vjp, calib, kern, attrs) \
    {name, arity, IR_##cls, IR_COUNT_##count, coef, IR_BYTES_##bytes, grads, attrs, IR_PARTIAL_##partial, IR_IDS_##ids, \
     domain, PAD_##pad},
static const struct op_row {
    const char *name;
    int arity;
    ir_opclass cls;
    ir_opcount count;
    double coef;
    ir_opbytes bytes;
    unsigned grads;
    unsigned attrs;
    ir_oppartial partial;
    ir_opids ids;
    unsigned domain;
    float pad;
} op_table[IR_N_OPS] = {
#include "ops.def"
};
#undef X
#undef PAD_ZERO
#undef PAD_NEG_INF

const char *ir_op_name(ir_opkind k) { return (unsigned)k < IR_N_OPS ? op_table[k].name : "?"; }
int ir_op_arity(ir_opkind k) { return op_table[k].arity; }
ir_opclass ir_op_class(ir_opkind k) { return op_table[k].cls; }
int ir_op_elementwise(ir_opkind k) { return op_table[k].cls == IR_UNARY || op_table[k].cls == IR_BINARY; }
ir_opcount ir_op_count(ir_opkind k) { return op_table[k].count; }
double ir_op_coef(ir_opkind k) { return op_table[k].coef; }
ir_opbytes ir_op_bytes(ir_opkind k) { return op_table[k].bytes; }
unsigned ir_op_grads(ir_opkind k) { return op_table[k].grads; }
unsigned ir_op_attrs(ir_opkind k) { return op_table[k].attrs; }
ir_oppartial ir_op_partial(ir_opkind k) { return op_table[k].partial; }
unsigned ir_op_domain(ir_opkind k) { return op_table[k].domain; }
float ir_op_pad(ir_opkind k) { return op_table[k].pad; }

int ir_op_ids(ir_opkind k, int *target, int *last)
{
    static const struct {
        int ids, target, last;
    } at[] = {[IR_IDS_NONE] = {-1, -1, 0}, [IR_IDS_TABLE] = {1, 0, 0}, [IR_IDS_ROWS] = {0, -1, 0}, [IR_IDS_DEPTH] = {0, -1, 1}};
    ir_opids i = op_table[k].ids;
    if (target) *target = at[i].target;
    if (last) *last = at[i].last;
    return at[i].ids;
}

int ir_op_from_name(const char *name)
{
    for (int k = 0; k < IR_N_OPS; k++)
        if (strcmp(op_table[k].name, name) == 0) return k;
    return -1;
}

static const char *const dtype_names[IR_N_DTYPES] = {"f32", "i32", "bf16", "f16"};
static const size_t dtype_sizes[IR_N_DTYPES] = {4, 4, 2, 2};
static const char *const role_names[IR_N_ROLES] = {"input", "param", "opt_state", "const", "intermediate"};

static const char *const init_names[IR_N_INITS] = {"auto", "normal", "zeros", "ones", "ids", "data"};

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

void ir_oom(size_t bytes)
{
    char msg[160];
    int n = bytes ? snprintf(msg, sizeof msg, "carve: out of memory (%zu bytes more were needed; a memory limit or a smaller input)\n", bytes)
                  : snprintf(msg, sizeof msg, "carve: out of memory (a memory limit or a smaller input)\n");
    fflush(stdout);
    if (write(2, msg, (size_t)n) < 0) n = 0;
    _exit(2);
}

void *ir_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) ir_oom(n);
    return q;
}

void *ir_xcalloc(size_t n, size_t size)
{
    void *q = calloc(n ? n : 1, size ? size : 1);
    if (!q) ir_oom(n * size);
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
    if (!g->name) ir_oom(0);
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
    ir_data_free(g->data);
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

static void index_insert(ir_graph *g, int id)
{
    size_t mask = (size_t)g->name_cap - 1;
    size_t i = ir_fnv(g->values[id].name) & mask;
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
    for (size_t i = ir_fnv(name) & mask; g->name_index[i] >= 0; i = (i + 1) & mask)
        if (strcmp(g->values[g->name_index[i]].name, name) == 0) return g->name_index[i];
    return -1;
}

/* Removes value v's entry from the name index: the entries after it in its
 * probe run move back into the hole when their home slot allows (deletion
 * in linear probing without tombstones). */
static void index_remove(ir_graph *g, int v)
{
    size_t mask = (size_t)g->name_cap - 1, i = ir_fnv(g->values[v].name) & mask;
    while (g->name_index[i] != v) {
        if (g->name_index[i] < 0) return;
        i = (i + 1) & mask;
    }
    for (size_t j = (i + 1) & mask; g->name_index[j] >= 0; j = (j + 1) & mask) {
        size_t home = ir_fnv(g->values[g->name_index[j]].name) & mask;
        /* j's entry may fill the hole at i unless its home lies in (i, j] */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            g->name_index[i] = g->name_index[j];
            i = j;
        }
    }
    g->name_index[i] = -1;
}

int ir_rename(ir_graph *g, int v, const char *name)
{
    if (v < 0 || v >= g->n_values) return -1;
    if (!name || !name[0]) return ir_fail(g, "empty value name");
    int other = ir_find(g, name);
    if (other == v) return 0;
    if (other >= 0) return ir_fail(g, "duplicate name '%s'", name);
    index_remove(g, v); /* the old name must not be found any more */
    g->values[v].name = ir_intern(g, name);
    index_insert(g, v);
    return 0;
}

/* ---- values ----------------------------------------------------------- */

int64_t ir_numel(const ir_value *v)
{
    int64_t n = 1;
    for (int i = 0; i < v->rank; i++) ir_mul_i64(n, v->dims[i], &n);
    return n;
}

size_t ir_bytes(const ir_value *v)
{
    size_t n;
    ir_mul_size((size_t)ir_numel(v), ir_dtype_size(v->dtype), &n);
    return n;
}

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
        if (ir_mul_i64(n, dims[i], &n) < 0 || n > MAX_NUMEL)
            return ir_fail(g, "%s: shape overflows (more than 2^48 elements)", what);
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
    v->of = -1;
    v->micro = -1;
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

/* Shape inference: one function per shape column of ops.def.  Each reads
 * the operands and attributes in *c and sets c->t, c->rank and c->dims, or
 * returns -1 with an error naming the op.  c->t starts as the dtype the
 * caller asked for (nullary ops keep it). */
typedef struct shape_ctx {
    ir_graph *g;
    ir_opkind k;
    const char *on;          /* the op's name */
    const ir_value *x, *y;   /* operands 0 and 1, or NULL */
    const ir_value *in[IR_MAX_OPERANDS]; /* every operand (NULL past the arity) */
    const ir_attrs *a;
    int hint_rank;
    const int64_t *hint;     /* result shape given by the caller, or NULL */
    ir_dtype t;
    int rank;
    int64_t dims[IR_MAX_RANK];
} shape_ctx;

static void same_as(shape_ctx *c, const ir_value *v)
{
    c->t = v->dtype;
    c->rank = v->rank;
    memcpy(c->dims, v->dims, sizeof v->dims);
}

/* The result takes the caller's shape (hint). */
static int hinted(shape_ctx *c, const char *what)
{
    if (!c->hint) return ir_fail(c->g, "%s: needs %s", c->on, what);
    if (check_shape(c->g, c->on, c->hint_rank, c->hint) < 0) return -1;
    c->rank = c->hint_rank;
    memcpy(c->dims, c->hint, sizeof(int64_t) * (size_t)c->hint_rank);
    return 0;
}

static int infer_nullary(shape_ctx *c)
{
    if (hinted(c, "a shape") < 0) return -1;
    if (c->k == IR_OP_IOTA && (c->a->n_ints != 1 || c->a->ints[0] < 0 || c->a->ints[0] >= c->hint_rank))
        return ir_fail(c->g, "iota: needs one dim in 0..%d", c->hint_rank - 1);
    if (c->k == IR_OP_DROPOUT_MASK) {
        if (!(c->a->scalar >= 0 && c->a->scalar < 1))
            return ir_fail(c->g, "dropout_mask: rate %g is outside [0, 1)", c->a->scalar);
        if (c->a->n_ints != 1 || c->a->ints[0] < 0 || c->a->ints[0] > ((int64_t)1 << 53))
            return ir_fail(c->g, "dropout_mask: needs one seed in 0..2^53");
        if (c->hint_rank < 1) return ir_fail(c->g, "dropout_mask: needs a shape of rank 1 or more");
        c->t = IR_F32;
    }
    return 0;
}

static int infer_unary(shape_ctx *c)
{
    if (!is_float(c->x->dtype))
        return ir_fail(c->g, "%s: operand '%s' is %s, needs a float type", c->on, c->x->name, ir_dtype_name(c->x->dtype));
    same_as(c, c->x);
    return 0;
}

static int infer_binary(shape_ctx *c)
{
    const ir_value *x = c->x, *y = c->y;
    char ta[64], tb[64];
    if (!is_float(x->dtype) || x->dtype != y->dtype)
        return ir_fail(c->g, "%s: operands '%s' (%s) and '%s' (%s) need one float type", c->on, x->name,
                       ir_dtype_name(x->dtype), y->name, ir_dtype_name(y->dtype));
    if (!same_shape(x, y))
        return ir_fail(c->g, "%s: shape mismatch: '%s' is %s, '%s' is %s (broadcast explicitly)", c->on, x->name,
                       ir_type_str(x, ta, sizeof ta), y->name, ir_type_str(y, tb, sizeof tb));
    same_as(c, x);
    return 0;
}

static int infer_einsum(shape_ctx *c)
{
    const ir_value *x = c->x, *y = c->y;
    const char *sub = c->a->subscripts;
    ir_einsum_spec e;
    char err[200];
    if (ir_einsum_parse(sub, x->rank, y->rank, &e, err, sizeof err) < 0)
        return ir_fail(c->g, "einsum \"%s\": %s", sub, err);
    if (!is_float(x->dtype) || x->dtype != y->dtype)
        return ir_fail(c->g, "einsum: operands '%s' and '%s' need one float type", x->name, y->name);
    for (int i = 0; i < e.rank_a; i++) {
        int j = ir_einsum_pos(e.b, e.rank_b, e.a[i]);
        if (j >= 0 && x->dims[i] != y->dims[j])
            return ir_fail(c->g, "einsum \"%s\": letter '%c' is %lld in '%s' but %lld in '%s'", sub, e.a[i],
                           (long long)x->dims[i], x->name, (long long)y->dims[j], y->name);
    }
    for (int i = 0; i < e.rank_out; i++) {
        int j = ir_einsum_pos(e.a, e.rank_a, e.out[i]);
        c->dims[i] = j >= 0 ? x->dims[j] : y->dims[ir_einsum_pos(e.b, e.rank_b, e.out[i])];
    }
    c->t = x->dtype;
    c->rank = e.rank_out;
    return 0;
}

static int infer_broadcast(shape_ctx *c)
{
    const ir_value *x = c->x;
    const ir_attrs *a = c->a;
    if (hinted(c, "a result shape") < 0) return -1;
    if (a->n_ints != x->rank)
        return ir_fail(c->g, "broadcast of '%s': dims map has %d entries, operand rank is %d", x->name, a->n_ints, x->rank);
    for (int i = 0; i < x->rank; i++) {
        int64_t d = a->ints[i];
        if (d < 0 || d >= c->rank || (i && d <= a->ints[i - 1]))
            return ir_fail(c->g, "broadcast of '%s': dims map must be increasing dims of the result", x->name);
        if (c->dims[d] != x->dims[i])
            return ir_fail(c->g, "broadcast of '%s': operand dim %d is %lld but result dim %lld is %lld", x->name, i,
                           (long long)x->dims[i], (long long)d, (long long)c->dims[d]);
    }
    c->t = x->dtype;
    return 0;
}

/* Bit mask of the dims listed in a->ints (checked to lie in 0..rank-1), or
 * -1 with an error when one is listed twice. */
static int dims_mask(shape_ctx *c, int rank, const char *what)
{
    const ir_attrs *a = c->a;
    int seen = 0;
    for (int i = 0; i < a->n_ints; i++) {
        if (seen & (1 << a->ints[i]))
            return ir_fail(c->g, "%s of '%s': %s repeats dim %lld", c->on, c->x->name, what, (long long)a->ints[i]);
        seen |= 1 << a->ints[i];
    }
    return seen;
}

static int infer_reduce(shape_ctx *c)
{
    const ir_value *x = c->x;
    if (!is_float(x->dtype)) return ir_fail(c->g, "%s: operand '%s' needs a float type", c->on, x->name);
    if (c->a->n_ints < 1 || !ints_are_dims(c->a, x->rank))
        return ir_fail(c->g, "%s of '%s': needs 1 or more dims in 0..%d", c->on, x->name, x->rank - 1);
    int seen = dims_mask(c, x->rank, "dims");
    if (seen < 0) return -1;
    c->rank = 0;
    for (int i = 0; i < x->rank; i++)
        if (!(seen & (1 << i))) c->dims[c->rank++] = x->dims[i];
    c->t = x->dtype;
    return 0;
}

static int infer_transpose(shape_ctx *c)
{
    const ir_value *x = c->x;
    if (c->a->n_ints != x->rank || !ints_are_dims(c->a, x->rank))
        return ir_fail(c->g, "transpose of '%s': perm must list the %d dims", x->name, x->rank);
    if (dims_mask(c, x->rank, "perm") < 0) return -1;
    for (int i = 0; i < x->rank; i++) c->dims[i] = x->dims[c->a->ints[i]];
    c->t = x->dtype;
    c->rank = x->rank;
    return 0;
}

static int infer_reshape(shape_ctx *c)
{
    const ir_value *x = c->x;
    char ta[64];
    if (hinted(c, "a result shape") < 0) return -1;
    int64_t n = 1;
    for (int i = 0; i < c->rank; i++) n *= c->dims[i];
    if (n != ir_numel(x))
        return ir_fail(c->g, "reshape of '%s' (%s): %lld elements cannot become %lld", x->name,
                       ir_type_str(x, ta, sizeof ta), (long long)ir_numel(x), (long long)n);
    c->t = x->dtype;
    return 0;
}

static int infer_gather(shape_ctx *c)
{
    const ir_value *x = c->x, *y = c->y;
    if (!is_float(x->dtype) || x->rank < 1) return ir_fail(c->g, "gather: table '%s' needs a float type and rank >= 1", x->name);
    if (y->dtype != IR_I32) return ir_fail(c->g, "gather: ids '%s' must be i32", y->name);
    if (y->rank + x->rank - 1 > IR_MAX_RANK) return ir_fail(c->g, "gather: result rank above %d", IR_MAX_RANK);
    c->rank = 0;
    for (int i = 0; i < y->rank; i++) c->dims[c->rank++] = y->dims[i];
    for (int i = 1; i < x->rank; i++) c->dims[c->rank++] = x->dims[i];
    c->t = x->dtype;
    return 0;
}

static int infer_scatter_add(shape_ctx *c)
{
    const ir_value *x = c->x, *y = c->y; /* ids, updates */
    if (x->dtype != IR_I32) return ir_fail(c->g, "scatter_add: ids '%s' must be i32", x->name);
    if (!is_float(y->dtype)) return ir_fail(c->g, "scatter_add: updates '%s' need a float type", y->name);
    if (!c->hint || c->hint_rank < 1 || c->hint[0] <= 0) return ir_fail(c->g, "scatter_add: needs a positive row count");
    if (y->rank < x->rank) return ir_fail(c->g, "scatter_add: updates '%s' rank below ids '%s' rank", y->name, x->name);
    for (int i = 0; i < x->rank; i++)
        if (x->dims[i] != y->dims[i])
            return ir_fail(c->g, "scatter_add: updates '%s' dim %d is %lld, ids '%s' dim is %lld", y->name, i,
                           (long long)y->dims[i], x->name, (long long)x->dims[i]);
    c->dims[0] = c->hint[0];
    c->rank = 1;
    for (int i = x->rank; i < y->rank; i++) c->dims[c->rank++] = y->dims[i];
    c->t = y->dtype;
    return check_shape(c->g, c->on, c->rank, c->dims);
}

static int infer_one_hot(shape_ctx *c)
{
    const ir_value *x = c->x;
    if (x->dtype != IR_I32) return ir_fail(c->g, "one_hot: ids '%s' must be i32", x->name);
    if (x->rank + 1 > IR_MAX_RANK) return ir_fail(c->g, "one_hot: result rank above %d", IR_MAX_RANK);
    if (c->a->n_ints != 1 || c->a->ints[0] <= 0) return ir_fail(c->g, "one_hot: needs a positive depth");
    memcpy(c->dims, x->dims, sizeof x->dims);
    c->dims[x->rank] = c->a->ints[0];
    c->rank = x->rank + 1;
    c->t = IR_F32;
    return check_shape(c->g, c->on, c->rank, c->dims);
}

/* ints = {dim, a, b}: dim of x, and two counts checked by the callers */
static int dim_and_two(shape_ctx *c, const char *what)
{
    const ir_value *x = c->x;
    const ir_attrs *a = c->a;
    if (a->n_ints != 3 || a->ints[0] < 0 || a->ints[0] >= x->rank)
        return ir_fail(c->g, "%s of '%s': needs dims = [dim, %s] with dim in 0..%d", c->on, x->name, what, x->rank - 1);
    same_as(c, x);
    return (int)a->ints[0];
}

static int infer_slice(shape_ctx *c)
{
    int d = dim_and_two(c, "start, length");
    if (d < 0) return -1;
    int64_t start = c->a->ints[1], len = c->a->ints[2];
    if (start < 0 || len < 1 || start > c->x->dims[d] - len)
        return ir_fail(c->g, "slice of '%s': [%lld, %lld) is not inside dim %d (size %lld)", c->x->name, (long long)start,
                       (long long)(start + len), d, (long long)c->x->dims[d]);
    c->dims[d] = len;
    return 0;
}

static int infer_pad(shape_ctx *c)
{
    int d = dim_and_two(c, "before, after");
    if (d < 0) return -1;
    if (!is_float(c->x->dtype)) return ir_fail(c->g, "pad: operand '%s' needs a float type", c->x->name);
    int64_t before = c->a->ints[1], after = c->a->ints[2];
    if (before < 0 || after < 0 || before > MAX_NUMEL || after > MAX_NUMEL)
        return ir_fail(c->g, "pad of '%s': before and after must be >= 0", c->x->name);
    c->dims[d] += before + after;
    return check_shape(c->g, c->on, c->rank, c->dims);
}

/* ints = {dim, offset}: same shape; |offset| below the dim's size */
static int infer_shift(shape_ctx *c)
{
    const ir_value *x = c->x;
    const ir_attrs *a = c->a;
    if (a->n_ints != 2 || a->ints[0] < 0 || a->ints[0] >= x->rank)
        return ir_fail(c->g, "shift of '%s': needs dims = [dim, offset] with dim in 0..%d", x->name, x->rank - 1);
    if (!is_float(x->dtype)) return ir_fail(c->g, "shift: operand '%s' needs a float type", x->name);
    int64_t off = a->ints[1], n = x->dims[a->ints[0]];
    if (off <= -n || off >= n || off == 0)
        return ir_fail(c->g, "shift of '%s': offset %lld must be nonzero and inside (-%lld, %lld)", x->name, (long long)off,
                       (long long)n, (long long)n);
    same_as(c, x);
    return 0;
}

static int infer_concat(shape_ctx *c)
{
    const ir_value *x = c->x, *y = c->y;
    char ta[64], tb[64];
    if (c->a->n_ints != 1 || c->a->ints[0] < 0 || c->a->ints[0] >= x->rank)
        return ir_fail(c->g, "concat of '%s': needs dims = [dim] with dim in 0..%d", x->name, x->rank - 1);
    int d = (int)c->a->ints[0];
    int ok = x->dtype == y->dtype && x->rank == y->rank;
    for (int i = 0; ok && i < x->rank; i++) ok = i == d || x->dims[i] == y->dims[i];
    if (!ok)
        return ir_fail(c->g, "concat along dim %d: '%s' is %s, '%s' is %s (dtypes and the other dims must agree)", d,
                       x->name, ir_type_str(x, ta, sizeof ta), y->name, ir_type_str(y, tb, sizeof tb));
    same_as(c, x);
    c->dims[d] += y->dims[d];
    return check_shape(c->g, c->on, c->rank, c->dims);
}

/* ints = {dim}: one dim of a float x */
static int one_dim(shape_ctx *c)
{
    const ir_value *x = c->x;
    if (!is_float(x->dtype)) return ir_fail(c->g, "%s: operand '%s' needs a float type", c->on, x->name);
    if (c->a->n_ints != 1 || c->a->ints[0] < 0 || c->a->ints[0] >= x->rank)
        return ir_fail(c->g, "%s of '%s': needs dims = [dim] with dim in 0..%d", c->on, x->name, x->rank - 1);
    return (int)c->a->ints[0];
}

static int infer_argmax(shape_ctx *c)
{
    int d = one_dim(c);
    if (d < 0) return -1;
    c->rank = 0;
    for (int i = 0; i < c->x->rank; i++)
        if (i != d) c->dims[c->rank++] = c->x->dims[i];
    c->t = IR_I32;
    return 0;
}

static int infer_unary_any(shape_ctx *c)
{
    if (one_dim(c) < 0) return -1;
    same_as(c, c->x);
    return 0;
}

/* the operand's shape in the float type the caller gives (c->t) */
static int infer_cast(shape_ctx *c)
{
    if (!is_float(c->t))
        return ir_fail(c->g, "cast of '%s' from %s to %s: casts go to float types (f32, bf16, f16)", c->x->name,
                       ir_dtype_name(c->x->dtype), ir_dtype_name(c->t));
    ir_dtype t = c->t;
    same_as(c, c->x);
    c->t = t;
    return 0;
}

static int infer_reshard(shape_ctx *c)
{
    if (!is_float(c->x->dtype)) return ir_fail(c->g, "%s: operand '%s' needs a float type", c->on, c->x->name);
    if (c->a->n_ints != 1 || (c->a->ints[0] != 0 && c->a->ints[0] != 1))
        return ir_fail(c->g, "%s of '%s': needs dims = [dir] with dir 0 (the result follows the operand) or 1 (the reverse)",
                       c->on, c->x->name);
    same_as(c, c->x);
    return 0;
}

/* ---- fused attention ---------------------------------------------------- *
 * q [b,s,n,d] (or grouped [b,s,k,g,d]), k [b,t,k,d], v [b,t,k,e]; the
 * context is q's shape with e last.  attn_check checks q and k (and v when
 * given) and the attributes; the context's last dim goes to *e. */
static int attn_mismatch(shape_ctx *c, const char *what, const ir_value *a, const ir_value *b)
{
    char ta[64], tb[64];
    return ir_fail(c->g, "%s: %s: '%s' is %s, '%s' is %s", c->on, what, a->name, ir_type_str(a, ta, sizeof ta), b->name,
                   ir_type_str(b, tb, sizeof tb));
}

static int attn_check(shape_ctx *c, const ir_value *q, const ir_value *k, const ir_value *v)
{
    const ir_value *all[3] = {q, k, v};
    for (int i = 0; i < 3; i++)
        if (all[i] && (!is_float(all[i]->dtype) || all[i]->dtype != q->dtype))
            return ir_fail(c->g, "%s: operands need one float type ('%s' is %s)", c->on, all[i]->name,
                           ir_dtype_name(all[i]->dtype));
    if (q->rank != 4 && q->rank != 5)
        return ir_fail(c->g, "%s: q '%s' has rank %d, needs [b,s,heads,d] or grouped [b,s,kv_heads,group,d]", c->on,
                       q->name, q->rank);
    if (k->rank != 4) return ir_fail(c->g, "%s: k '%s' has rank %d, needs [b,t,kv_heads,d]", c->on, k->name, k->rank);
    int qr = q->rank;
    if (k->dims[0] != q->dims[0] || k->dims[2] != q->dims[2] || k->dims[3] != q->dims[qr - 1])
        return attn_mismatch(c, "q and k differ in batch, heads or head size", q, k);
    if (v && (v->rank != 4 || v->dims[0] != k->dims[0] || v->dims[1] != k->dims[1] || v->dims[2] != k->dims[2]))
        return attn_mismatch(c, "v needs k's batch, keys and heads", k, v);
    if (c->a->n_ints > 1 || (c->a->n_ints == 1 && c->a->ints[0] != 0 && c->a->ints[0] != 1))
        return ir_fail(c->g, "%s: causal must be 0 or 1", c->on);
    if (c->a->n_ints == 1 && c->a->ints[0] && q->dims[1] != k->dims[1])
        return attn_mismatch(c, "causal attention needs as many queries as keys", q, k);
    if (!isfinite(c->a->scalar)) return ir_fail(c->g, "%s: the scale must be finite", c->on);
    return 0;
}

/* attention: q's shape with v's last dim */
static int infer_attention(shape_ctx *c)
{
    if (attn_check(c, c->in[0], c->in[1], c->in[2]) < 0) return -1;
    same_as(c, c->in[0]);
    c->dims[c->rank - 1] = c->in[2]->dims[3];
    return 0;
}

/* attention_dq (q, k, v, dy) -> q's shape; attention_dk (q, k, v, dy) ->
 * k's; attention_dv (q, k, dy) -> k's with dy's last dim.  dy is shaped as
 * the forward's result. */
static int infer_attention_grad(shape_ctx *c)
{
    int dv = c->k == IR_OP_ATTENTION_DV;
    const ir_value *q = c->in[0], *k = c->in[1], *v = dv ? NULL : c->in[2], *dy = c->in[dv ? 2 : 3];
    if (attn_check(c, q, k, v) < 0) return -1;
    int ok = dy->rank == q->rank && dy->dtype == q->dtype && (!v || dy->dims[q->rank - 1] == v->dims[3]);
    for (int i = 0; i < q->rank - 1; i++) ok &= dy->dims[i] == q->dims[i];
    if (!ok) return attn_mismatch(c, "the cotangent needs the context's shape", q, dy);
    same_as(c, c->k == IR_OP_ATTENTION_DQ ? q : k);
    if (dv) c->dims[3] = dy->dims[q->rank - 1];
    return 0;
}

#define X(e, name, arity, cls, count, coef, bytes, grads, partial, ids, domain, pad, shape, ...) infer_##shape,
static int (*const infer_of[IR_N_OPS])(shape_ctx *) = {
#include "ops.def"
};
#undef X

int ir_add_op(ir_graph *g, ir_opkind k, int n_in, const int *in, const ir_attrs *a, ir_dtype t,
              int rank, const int64_t *shape_hint, const char *name)
{
    if (g->err[0]) return -1;
    if ((unsigned)k >= IR_N_OPS) return ir_fail(g, "unknown op %d", (int)k);
    if (n_in != op_table[k].arity) return ir_fail(g, "%s: takes %d operands, got %d", op_table[k].name, op_table[k].arity, n_in);
    for (int i = 0; i < n_in; i++)
        if (in[i] < 0 || in[i] >= g->n_values)
            return ir_fail(g, "%s: operand %d is not a value of the graph", op_table[k].name, i);
    ir_attrs at;
    if (a) at = *a;
    else memset(&at, 0, sizeof at);
    if (at.n_ints < 0 || at.n_ints > IR_MAX_RANK) return ir_fail(g, "%s: bad attribute count", op_table[k].name);
    if (k == IR_OP_EINSUM && !memchr(at.subscripts, 0, sizeof at.subscripts))
        return ir_fail(g, "einsum: subscripts too long");
    shape_ctx c = {.g = g, .k = k, .on = op_table[k].name, .a = &at, .hint_rank = rank, .hint = shape_hint,
                   .t = (unsigned)t < IR_N_DTYPES ? t : IR_F32};
    for (int i = 0; i < n_in; i++) c.in[i] = &g->values[in[i]];
    c.x = c.in[0];
    c.y = c.in[1];
    if (infer_of[k](&c) < 0) return -1;
    if (g->n_ops == g->cap_ops) {
        g->cap_ops = g->cap_ops ? 2 * g->cap_ops : 64;
        g->ops = ir_xrealloc(g->ops, (size_t)g->cap_ops * sizeof *g->ops);
    }
    int v = new_value(g, name, IR_INTERMEDIATE, c.t, c.rank, c.dims, g->n_ops);
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

int ir_dropout_mask(ir_graph *g, int rank, const int64_t *dims, double p, int64_t seed)
{
    ir_attrs a = {.scalar = p, .n_ints = 1, .ints = {seed}};
    return ir_add_op(g, IR_OP_DROPOUT_MASK, 0, NULL, &a, IR_F32, rank, dims, NULL);
}

float ir_dropout_value(double p, int64_t seed, int rank, const int64_t *index)
{
    double u = (double)pcg32_counter((uint64_t)seed, rank, index) * (1.0 / 4294967296.0);
    return u >= p ? (float)(1.0 / (1.0 - p)) : 0.0f;
}

int ir_unary(ir_graph *g, ir_opkind k, int x)
{
    if (!ok_ids(g, x, 0)) return -1;
    if (op_table[k].cls != IR_UNARY) return ir_fail(g, "%s is not a unary op", op_table[k].name);
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
    if (op_table[k].cls != IR_BINARY) return ir_fail(g, "%s is not a binary op", op_table[k].name);
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

/* Letters of `add` not yet in `set` appended to it (set holds < 64). */
static void add_letters(char *set, const char *add)
{
    size_t n = strlen(set);
    for (; *add && n < 63; add++)
        if (!strchr(set, *add)) set[n++] = *add, set[n] = 0;
}

/* An einsum of n operands as n-1 pairwise einsums, left to right: step i
 * contracts the running result with operand i and keeps the letters that the
 * output or a later operand still needs (docs/sharding.md). */
int ir_einsum_n(ir_graph *g, const char *subscripts, int n, const int *in)
{
    if (g->err[0]) return -1;
    for (int i = 0; i < n; i++)
        if (in[i] < 0) return -1;
    char buf[256], *ops[16];
    const char *arrow = strstr(subscripts, "->");
    if (n < 2 || n > 16) return ir_fail(g, "einsum: %d operands (2 to 16)", n);
    if (!arrow || strlen(subscripts) >= sizeof buf) return ir_fail(g, "einsum '%s': needs '->' (and at most 255 characters)", subscripts);
    memcpy(buf, subscripts, (size_t)(arrow - subscripts));
    buf[arrow - subscripts] = 0;
    const char *out = arrow + 2;
    int k = 0;
    for (char *p = buf, *q; k < 16; p = q + 1) {
        ops[k++] = p;
        if (!(q = strchr(p, ','))) break;
        *q = 0;
    }
    if (k != n) return ir_fail(g, "einsum '%s': %d operand subscripts for %d operands", subscripts, k, n);
    for (const char *c = subscripts; *c; c++) { /* as for two operands: each letter in two places */
        if (*c == ',' || *c == '-' || *c == '>') continue;
        int seen = strchr(out, *c) != NULL;
        for (int i = 0; i < n; i++) seen += strchr(ops[i], *c) != NULL;
        if (seen < 2) return ir_fail(g, "einsum '%s': letter '%c' appears only once (each letter must be in two of the operands and the output)", subscripts, *c);
    }
    char cur[64] = "";
    add_letters(cur, ops[0]);
    if (strlen(cur) != strlen(ops[0])) return ir_fail(g, "einsum '%s': a letter repeats in one operand", subscripts);
    int v = in[0];
    for (int i = 1; i < n && v >= 0; i++) {
        char need[64] = "", keep[64] = "", step[400]; /* cur, an operand's subscripts (< 256), keep */
        add_letters(need, out);
        for (int j = i + 1; j < n; j++) add_letters(need, ops[j]);
        if (i == n - 1) {
            snprintf(keep, sizeof keep, "%s", out);
        } else {
            char both[64] = "";
            add_letters(both, cur);
            add_letters(both, ops[i]);
            size_t m = 0;
            for (const char *c = both; *c; c++)
                if (strchr(need, *c)) keep[m++] = *c;
            keep[m] = 0;
        }
        snprintf(step, sizeof step, "%s,%s->%s", cur, ops[i], keep);
        v = ir_einsum(g, step, v, in[i]);
        snprintf(cur, sizeof cur, "%s", keep);
    }
    return v;
}

static int with_ints(ir_graph *g, ir_opkind k, int x, int n, const int64_t *ints, int rank, const int64_t *dims)
{
    if (!ok_ids(g, x, 0)) return -1;
    if (n < 0 || n > IR_MAX_RANK) return ir_fail(g, "%s: too many dims", op_table[k].name);
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
    if (k != IR_OP_REDUCE_SUM && k != IR_OP_REDUCE_MAX) return ir_fail(g, "%s is not a reduction", op_table[k].name);
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

int ir_slice(ir_graph *g, int x, int dim, int64_t start, int64_t length)
{
    int64_t a[3] = {dim, start, length};
    return with_ints(g, IR_OP_SLICE, x, 3, a, 0, NULL);
}

int ir_pad(ir_graph *g, int x, int dim, int64_t before, int64_t after)
{
    int64_t a[3] = {dim, before, after};
    return with_ints(g, IR_OP_PAD, x, 3, a, 0, NULL);
}

int ir_shift(ir_graph *g, int x, int dim, int64_t offset)
{
    int64_t a[2] = {dim, offset};
    return with_ints(g, IR_OP_SHIFT, x, 2, a, 0, NULL);
}

int ir_concat(ir_graph *g, int a, int b, int dim)
{
    if (!ok_ids(g, a, b)) return -1;
    ir_attrs at = {.n_ints = 1, .ints = {dim}};
    int in[2] = {a, b};
    return ir_add_op(g, IR_OP_CONCAT, 2, in, &at, IR_F32, 0, NULL, NULL);
}

int ir_argmax(ir_graph *g, int x, int dim)
{
    int64_t d = dim;
    return with_ints(g, IR_OP_ARGMAX, x, 1, &d, 0, NULL);
}

int ir_cumsum(ir_graph *g, int x, int dim)
{
    int64_t d = dim;
    return with_ints(g, IR_OP_CUMSUM, x, 1, &d, 0, NULL);
}

int ir_cast(ir_graph *g, int x, ir_dtype t)
{
    if (!ok_ids(g, x, 0)) return -1;
    return ir_add_op(g, IR_OP_CAST, 1, &x, NULL, t, 0, NULL, NULL);
}

int ir_reshard(ir_graph *g, int x, int dir)
{
    int64_t d = dir;
    return with_ints(g, IR_OP_RESHARD, x, 1, &d, 0, NULL);
}

int ir_attention(ir_graph *g, int q, int k, int v, double scale, int causal)
{
    if (!ok_ids(g, q, k) || v < 0) return -1;
    ir_attrs a = {.scalar = scale, .n_ints = 1, .ints = {causal != 0}};
    int in[3] = {q, k, v};
    return ir_add_op(g, IR_OP_ATTENTION, 3, in, &a, IR_F32, 0, NULL, NULL);
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
    /* marks on the values, not a scan of the outputs (a step of a large model has thousands) */
    if (g->values[v].listed & 1) return ir_fail(g, "output '%s' listed twice", g->values[v].name);
    if (updates >= 0 && (g->values[updates].listed & 2))
        return ir_fail(g, "argument '%s' updated twice", g->values[updates].name);
    g->values[v].listed |= 1;
    if (updates >= 0) g->values[updates].listed |= 2;
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
    for (int v = 0; v < c->n_values; v++) {
        c->values[v].name = ir_intern(c, g->values[v].name);
        if (g->values[v].batch_of) c->values[v].batch_of = ir_intern(c, g->values[v].batch_of);
    }
    c->loss = g->loss;
    c->rewrites = g->rewrites;
    c->batch_coupled = g->batch_coupled;
    c->cur_layer = g->cur_layer;
    c->n_layers = g->n_layers;
    memcpy(c->err, g->err, sizeof c->err);
    index_grow(c);
    ir_data_share(c, g);
    return c;
}

void ir_mark_forward(const ir_graph *g, unsigned char *fwd)
{
    memset(fwd, 0, (size_t)g->n_values);
    if (g->loss < 0) return;
    fwd[g->loss] = 1;
    for (int i = g->n_ops - 1; i >= 0; i--) {
        const ir_op *o = &g->ops[i];
        if (!fwd[o->out]) continue;
        for (int k = 0; k < o->n_in; k++) fwd[o->in[k]] = 1;
    }
}

int ir_rewritten(const ir_graph *g)
{
    const ir_rewrites *r = &g->rewrites;
    return r->remat > 0 || r->microbatches > 1 || r->pipe_body > 0 || r->loss_scale != 0;
}

uint64_t ir_fill_stream_of(const char *name, int micro)
{
    if (micro < 0) return ir_fnv(name);
    char k[24]; /* the hash of "mbK/NAME": the streams runs drew before the record existed */
    snprintf(k, sizeof k, "mb%d/", micro);
    return ir_fnv_str(ir_fnv(k), name);
}

uint64_t ir_fill_stream(const ir_value *x)
{
    return x->batch_of ? ir_fill_stream_of(x->batch_of, x->micro) : ir_fnv(x->name);
}

int64_t ir_param_count(const ir_graph *g)
{
    int64_t n = 0;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].role == IR_PARAM) n += ir_numel(&g->values[v]);
    return n;
}

double ir_attention_count(const ir_op *o, int q_rank, const int64_t *q_dims, int64_t keys)
{
    double n = (double)keys;
    for (int i = 0; i < q_rank; i++) n *= (double)q_dims[i];
    return o->attrs.n_ints && o->attrs.ints[0] ? 0.5 * n : n;
}

double ir_op_flops_dims(const ir_op *o, const int *in_rank, const int64_t (*in_dims)[IR_MAX_RANK], int out_rank,
                        const int64_t *out_dims)
{
    double n = 1;
    switch (op_table[o->kind].count) {
    case IR_COUNT_OUT:
        for (int i = 0; i < out_rank; i++) n *= (double)out_dims[i];
        break;
    case IR_COUNT_IN0:
    case IR_COUNT_IN1: {
        int k = op_table[o->kind].count == IR_COUNT_IN1;
        for (int i = 0; i < in_rank[k]; i++) n *= (double)in_dims[k][i];
        break;
    }
    case IR_COUNT_EINSUM: { /* the result's elements times the contracted letters */
        ir_einsum_spec e;
        if (ir_einsum_parse(o->attrs.subscripts, in_rank[0], in_rank[1], &e, NULL, 0) < 0) return 0;
        for (int i = 0; i < out_rank; i++) n *= (double)out_dims[i];
        for (int i = 0; i < e.rank_a; i++)
            if (ir_einsum_pos(e.out, e.rank_out, e.a[i]) < 0) n *= (double)in_dims[0][i];
        break;
    }
    case IR_COUNT_ATTN:
        n = ir_attention_count(o, in_rank[0], in_dims[0], in_dims[1][1]);
        break;
    }
    return op_table[o->kind].coef * n;
}

double ir_op_flops(const ir_graph *g, int op)
{
    const ir_op *o = &g->ops[op];
    const ir_value *out = &g->values[o->out];
    int rank[IR_MAX_OPERANDS] = {0};
    int64_t dims[IR_MAX_OPERANDS][IR_MAX_RANK];
    for (int k = 0; k < o->n_in; k++) {
        rank[k] = g->values[o->in[k]].rank;
        memcpy(dims[k], g->values[o->in[k]].dims, sizeof dims[k]);
    }
    return ir_op_flops_dims(o, rank, (const int64_t(*)[IR_MAX_RANK])dims, out->rank, out->dims);
}

/* FLOPs of op i's matrix products as the model formulas count them: an
 * einsum's, a fused attention op's products whole (not halved for a causal
 * mask, no recomputation): forward and attention_dq 4 b n s t d, _dk and _dv
 * 2 each; 0 for any other op. */
static double matmul_flops(const ir_graph *g, int i)
{
    const ir_op *o = &g->ops[i];
    if (o->kind == IR_OP_EINSUM) return ir_op_flops(g, i);
    if (ir_op_count(o->kind) != IR_COUNT_ATTN) return 0;
    const ir_value *q = &g->values[o->in[0]];
    ir_op whole = *o;
    whole.attrs.n_ints = 0;
    double n = ir_attention_count(&whole, q->rank, q->dims, g->values[o->in[1]].dims[1]);
    return (o->kind == IR_OP_ATTENTION || o->kind == IR_OP_ATTENTION_DQ ? 4 : 2) * n;
}

double ir_matmul_flops(const ir_graph *g)
{
    double f = 0;
    for (int i = 0; i < g->n_ops; i++) f += matmul_flops(g, i);
    return f;
}

double ir_model_flops(const ir_graph *g)
{
    if (g->loss < 0) return 0;
    unsigned char *need = ir_xcalloc((size_t)g->n_values + 1, 1);
    need[g->loss] = 1;
    double f = 0;
    for (int i = g->n_ops - 1; i >= 0; i--) {
        const ir_op *o = &g->ops[i];
        if (!need[o->out]) continue;
        for (int k = 0; k < o->n_in; k++) need[o->in[k]] = 1;
        if (o->kind == IR_OP_EINSUM || o->kind == IR_OP_ATTENTION) f += matmul_flops(g, i); /* the forward's */
    }
    free(need);
    return 3 * f;
}

double ir_graph_flops(const ir_graph *g)
{
    double f = 0;
    for (int i = 0; i < g->n_ops; i++) f += ir_op_flops(g, i);
    return f;
}
