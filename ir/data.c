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
 * float for float dtypes, int32_t for i32.
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
    ir_blob *blob;
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

/* Puts (name, b) in g's table, replacing an entry of that name; takes one
 * reference of b. */
static void put(ir_graph *g, const char *name, ir_blob *b)
{
    if (!g->data) g->data = ir_xcalloc(1, sizeof *g->data);
    ir_datatab *t = g->data;
    int i = entry_of(t, name);
    if (i >= 0) {
        blob_release(t->e[i].blob);
        t->e[i].blob = b;
        return;
    }
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 16;
        t->e = ir_xrealloc(t->e, (size_t)t->cap * sizeof *t->e);
    }
    size_t len = strlen(name) + 1;
    t->e[t->n].name = ir_xrealloc(NULL, len);
    memcpy(t->e[t->n].name, name, len);
    t->e[t->n++].blob = b;
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
    return i < 0 ? NULL : g->data->e[i].blob->elems;
}

void ir_data_share(ir_graph *dst, const ir_graph *src)
{
    const ir_datatab *t = src->data;
    if (!t || dst == src) return;
    for (int i = 0; i < t->n; i++) {
        __atomic_add_fetch(&t->e[i].blob->refs, 1, __ATOMIC_ACQ_REL);
        put(dst, t->e[i].name, t->e[i].blob);
    }
}

int ir_data_missing(const ir_graph *g)
{
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].role != IR_INTERMEDIATE && g->values[v].init == IR_INIT_DATA && !ir_data(g, v)) return v;
    return -1;
}
