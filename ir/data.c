/* data.c - tensor data of arguments: a model file's weights, folded
 * constants, a given batch.
 *
 * A graph describes shapes only; the few arguments whose values matter (an
 * imported model's weights and constant tables, a test's batch) carry
 * IR_INIT_DATA and find their elements here.  The table belongs to the
 * graph and is keyed by value name, so the graphs that rewrites build from
 * it (the training step, recomputation, micro-batches: they keep argument
 * names) can share it; each block of elements is reference counted
 * (atomically: search threads clone graphs), so clones and shares copy no
 * elements.  Elements are stored as the executors hold them: 4 bytes each,
 * float for float dtypes, int32_t for i32.  An entry may also record the
 * shape the model file holds the argument in, where carve holds it in
 * another (ir_file_shape: the same elements in the same order).
 */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

typedef struct ir_blob {
    int refs;
    int64_t n;
    void *elems;      /* n 4-byte elements, owned */
} ir_blob;

typedef struct data_entry {
    char *name;       /* owned */
    ir_blob *blob;    /* NULL: no elements (an entry for its file shape alone) */
    int file_rank;    /* -1: the argument's own shape is the file's */
    int64_t file_dims[IR_MAX_RANK];
} data_entry;

struct ir_datatab {
    data_entry *e;
    int n, cap;
};

static void blob_release(ir_blob *b)
{
    if (b && __atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        free(b->elems);
        free(b);
    }
}

static int entry_of(const ir_datatab *t, const char *name)
{
    if (!t) return -1;
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->e[i].name, name) == 0) return i;
    return -1;
}

void ir_data_free(ir_datatab *t)
{
    if (!t) return;
    for (int i = 0; i < t->n; i++) {
        free(t->e[i].name);
        blob_release(t->e[i].blob);
    }
    free(t->e);
    free(t);
}

/* The entry of `name` in g's table, made (without elements or file shape)
 * when there is none. */
static data_entry *entry_put(ir_graph *g, const char *name)
{
    if (!g->data) g->data = ir_xcalloc(1, sizeof *g->data);
    ir_datatab *t = g->data;
    int i = entry_of(t, name);
    if (i >= 0) return &t->e[i];
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 16;
        t->e = ir_xrealloc(t->e, (size_t)t->cap * sizeof *t->e);
    }
    size_t len = strlen(name) + 1;
    data_entry *e = &t->e[t->n++];
    memset(e, 0, sizeof *e);
    e->name = ir_xrealloc(NULL, len);
    memcpy(e->name, name, len);
    e->file_rank = -1;
    return e;
}

/* Puts (name, b) in g's table, replacing the elements of an entry of that
 * name; takes one reference of b. */
static void put(ir_graph *g, const char *name, ir_blob *b)
{
    data_entry *e = entry_put(g, name);
    blob_release(e->blob);
    e->blob = b;
}

int ir_data_attach(ir_graph *g, int v, void *elems, int64_t n)
{
    if (v < 0 || v >= g->n_values || g->values[v].role == IR_INTERMEDIATE) {
        free(elems);
        return ir_fail(g, "data: value %d is not an argument", v);
    }
    if (n != ir_numel(&g->values[v])) {
        free(elems);
        return ir_fail(g, "data of '%s': %lld elements for a value of %lld", g->values[v].name, (long long)n,
                       (long long)ir_numel(&g->values[v]));
    }
    ir_blob *b = ir_xcalloc(1, sizeof *b);
    b->refs = 1;
    b->n = n;
    b->elems = elems;
    put(g, g->values[v].name, b);
    g->values[v].init = IR_INIT_DATA;
    g->values[v].init_arg = 0;
    return 0;
}

int ir_data_set(ir_graph *g, int v, const void *elems, int64_t n)
{
    size_t bytes;
    if (n < 0 || ir_mul_size((size_t)n, 4, &bytes) < 0) return ir_fail(g, "data: %lld elements", (long long)n);
    void *copy = ir_xrealloc(NULL, bytes);
    if (bytes) memcpy(copy, elems, bytes);
    return ir_data_attach(g, v, copy, n);
}

const void *ir_data(const ir_graph *g, int v)
{
    if (v < 0 || v >= g->n_values) return NULL;
    int i = entry_of(g->data, g->values[v].name);
    return i < 0 || !g->data->e[i].blob ? NULL : g->data->e[i].blob->elems;
}

void ir_data_share(ir_graph *dst, const ir_graph *src)
{
    const ir_datatab *t = src->data;
    if (!t || dst == src) return;
    for (int i = 0; i < t->n; i++) {
        const data_entry *s = &t->e[i];
        if (s->blob) {
            __atomic_add_fetch(&s->blob->refs, 1, __ATOMIC_ACQ_REL);
            put(dst, s->name, s->blob);
        }
        if (s->file_rank >= 0) {
            data_entry *e = entry_put(dst, s->name);
            e->file_rank = s->file_rank;
            memcpy(e->file_dims, s->file_dims, sizeof e->file_dims);
        }
    }
}

int ir_file_shape_set(ir_graph *g, int v, int rank, const int64_t *dims)
{
    if (v < 0 || v >= g->n_values || g->values[v].role == IR_INTERMEDIATE) return ir_fail(g, "file shape: value %d is not an argument", v);
    const ir_value *x = &g->values[v];
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        if (dims[d] < 1 || ir_mul_i64(n, dims[d], &n) < 0) n = -1, d = rank;
    if (rank < 0 || rank > IR_MAX_RANK || n != ir_numel(x))
        return ir_fail(g, "file shape of '%s': not %lld elements of rank at most %d", x->name, (long long)ir_numel(x), IR_MAX_RANK);
    data_entry *e = entry_put(g, x->name);
    e->file_rank = rank;
    memset(e->file_dims, 0, sizeof e->file_dims);
    memcpy(e->file_dims, dims, (size_t)rank * sizeof *dims);
    return 0;
}

int ir_file_shape(const ir_graph *g, int v, int *rank, int64_t *dims)
{
    if (v < 0 || v >= g->n_values) return 0;
    int i = entry_of(g->data, g->values[v].name);
    if (i < 0 || g->data->e[i].file_rank < 0) return 0;
    *rank = g->data->e[i].file_rank;
    memcpy(dims, g->data->e[i].file_dims, (size_t)*rank * sizeof *dims);
    return 1;
}

int ir_data_missing(const ir_graph *g)
{
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].role != IR_INTERMEDIATE && g->values[v].init == IR_INIT_DATA && !ir_data(g, v)) return v;
    return -1;
}
