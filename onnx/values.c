/* values.c - constants and shapes of the import's values (onnx/context.h).
 *
 * A value is constant when it is a folded tensor or an initializer the loss
 * does not train; its tensor is read from the file on first use (ox_const),
 * and a shape is known for every kind of value without making it: a carve
 * value's, a lazy view's or linear's (onnx/lazy.c), an initializer's from
 * its TensorProto header, a constant's.
 */
#include "onnx/context.h"

#include <stdio.h>
#include <string.h>

int ox_is_const(const ox_val *v) { return v && (v->kind == OX_CONST || (v->kind == OX_INIT && !v->param)); }

ox_tensor *ox_const(ox_ctx *c, ox_val *v)
{
    ox_tensor *t = ox_const_lazy(c, v);
    return t && ox_tensor_materialise(c, t) < 0 ? NULL : t;
}

ox_tensor *ox_const_lazy(ox_ctx *c, ox_val *v)
{
    if (v->kind == OX_CONST) return v->c;
    if (v->kind != OX_INIT || v->param) {
        ox_fail(c, "'%.120s' must be a constant (it depends on the model's inputs or params)", v->name);
        return NULL;
    }
    char what[200];
    snprintf(what, sizeof what, "initializer '%.120s'", v->name);
    ox_tensor *t = ox_tensor_from_proto(c, c->graph->initializer[v->init], what);
    if (!t) return NULL;
    v->kind = OX_CONST;
    v->c = t;
    v->type = t->type;
    return t;
}

int ox_shape(ox_ctx *c, ox_val *v, int *rank, int64_t *dims)
{
    if (v->kind == OX_IR && v->ir < 0 && v->lazy && v->lazy->kind == OX_LAZY_VIEW) {
        *rank = v->lazy->rank;
        memcpy(dims, v->lazy->dims, sizeof(int64_t) * (size_t)*rank);
        return 0;
    }
    if (v->kind == OX_IR && v->ir < 0 && v->lazy) { /* a linear: the einsum's result letters */
        const ox_lazy *l = v->lazy;
        const ir_value *a = &c->g->values[l->a], *w = &c->g->values[l->w];
        *rank = (int)strlen(l->so);
        for (int i = 0; i < *rank; i++) {
            const char *p = strchr(l->sa, l->so[i]);
            dims[i] = p ? a->dims[p - l->sa] : w->dims[strchr(l->sw, l->so[i]) - l->sw];
        }
        return 0;
    }
    if (v->kind == OX_IR) {
        const ir_value *x = &c->g->values[v->ir];
        *rank = x->rank;
        memcpy(dims, x->dims, sizeof(int64_t) * (size_t)x->rank);
        return 0;
    }
    if (v->kind == OX_INIT) {
        int64_t n;
        char what[200];
        snprintf(what, sizeof what, "initializer '%.120s'", v->name);
        return ox_proto_shape(c, c->graph->initializer[v->init], what, rank, dims, &n);
    }
    if (v->kind == OX_CONST) {
        *rank = v->c->rank;
        memcpy(dims, v->c->dims, sizeof(int64_t) * (size_t)v->c->rank);
        return 0;
    }
    return ox_fail(c, "'%.120s' has no value", v->name);
}

int ox_const_ints(ox_ctx *c, ox_val *v, const char *what, int64_t *out, int max, int *count)
{
    ox_tensor *t = ox_const(c, v);
    if (!t) return -1;
    if (t->rank > 1) return ox_fail(c, "%s must be a vector, got rank %d", what, t->rank);
    if (!ox_type_is_int(t->type)) return ox_fail(c, "%s must be integers, got %s", what, ox_type_name(t->type));
    if (t->n > max) return ox_fail(c, "%s has %lld entries (at most %d)", what, (long long)t->n, max);
    for (int64_t i = 0; i < t->n; i++) out[i] = ox_i64(t->v[i]);
    *count = (int)t->n;
    return 0;
}
