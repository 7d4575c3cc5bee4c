/* verify.c - re-checks every invariant of a graph.  Builders keep these true;
 * the verifier guards graphs made by transformations (autodiff, loading) and
 * is what tests call after every change. */
#include "ir.h"

#include <string.h>

/* Each value: named once, a sane type, its role, producer, tie and gradient consistent. */
static int verify_values(const ir_graph *g, char *err, size_t errlen)
{
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (!x->name || !x->name[0]) return ir_errf(err, errlen, "value %d has no name", v);
        if (ir_find(g, x->name) != v) return ir_errf(err, errlen, "value name '%s' is not unique", x->name);
        if (x->rank < 0 || x->rank > IR_MAX_RANK) return ir_errf(err, errlen, "value '%s': bad rank", x->name);
        for (int i = 0; i < x->rank; i++)
            if (x->dims[i] <= 0) return ir_errf(err, errlen, "value '%s': dim %d is not positive", x->name, i);
        if ((x->role == IR_INTERMEDIATE) != (x->producer >= 0))
            return ir_errf(err, errlen, "value '%s': role %s but producer %d", x->name, ir_role_name(x->role), x->producer);
        if (x->producer >= g->n_ops || (x->producer >= 0 && g->ops[x->producer].out != v))
            return ir_errf(err, errlen, "value '%s': producer does not make it", x->name);
        if (x->tied >= 0 && (x->role != IR_OPT_STATE || x->tied >= g->n_values || g->values[x->tied].role != IR_PARAM))
            return ir_errf(err, errlen, "value '%s': tied to something that is not a param", x->name);
        if (x->grad_of >= 0 && (x->grad_of >= g->n_values || g->values[x->grad_of].role != IR_PARAM))
            return ir_errf(err, errlen, "value '%s': gradient of something that is not a param", x->name);
    }
    return 0;
}

/* Each op: its result made by it, its operands in range and made before it (topological order). */
static int verify_ops(const ir_graph *g, char *err, size_t errlen)
{
    for (int i = 0; i < g->n_ops; i++) {
        const ir_op *o = &g->ops[i];
        if (o->out < 0 || o->out >= g->n_values || g->values[o->out].producer != i)
            return ir_errf(err, errlen, "op %d (%s): bad result", i, ir_op_name(o->kind));
        for (int k = 0; k < o->n_in; k++) {
            int in = o->in[k];
            if (in < 0 || in >= g->n_values) return ir_errf(err, errlen, "op %d (%s): operand out of range", i, ir_op_name(o->kind));
            if (g->values[in].producer >= i)
                return ir_errf(err, errlen, "op '%s' (%s) reads '%s' before it is made (not topological, or a cycle)",
                            g->values[o->out].name, ir_op_name(o->kind), g->values[in].name);
        }
    }
    return 0;
}

/* Rebuild each op through a scratch graph's inference: same shapes? */
static int verify_rebuild(const ir_graph *g, char *err, size_t errlen)
{
    ir_graph *s = ir_new("verify");
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        /* Recreate each value in the same position: args as args, op results by inference. */
        if (x->role != IR_INTERMEDIATE) {
            ir_arg(s, x->name, x->role, x->dtype, x->rank, x->dims);
            continue;
        }
        const ir_op *o = &g->ops[x->producer];
        /* Values may be created out of op order only by transformations that we do not have. */
        int r = ir_add_op(s, o->kind, o->n_in, o->in, &o->attrs, x->dtype, x->rank, x->dims, x->name[0] == '%' ? NULL : x->name);
        if (r < 0) break;
        const ir_value *y = &s->values[r];
        int same = y->rank == x->rank && y->dtype == x->dtype;
        for (int d = 0; same && d < x->rank; d++) same = y->dims[d] == x->dims[d];
        if (!same) {
            char a[96], b[96];
            ir_fail(s, "op '%s' (%s) is recorded as %s but its operands give %s", x->name, ir_op_name(o->kind),
                    ir_type_str(x, a, sizeof a), ir_type_str(y, b, sizeof b));
            break;
        }
    }
    int rc = 0;
    if (ir_error(s)) rc = ir_errf(err, errlen, "%s", ir_error(s));
    ir_free(s);
    return rc;
}

int ir_verify(const ir_graph *g, char *err, size_t errlen)
{
    if (g->err[0]) return ir_errf(err, errlen, "%s", g->err);
    int rc = verify_values(g, err, errlen);
    if (!rc) rc = verify_ops(g, err, errlen);
    if (!rc) rc = verify_rebuild(g, err, errlen);
    if (rc) return rc;
    for (int i = 0; i < g->n_outputs; i++) {
        const ir_output *o = &g->outputs[i];
        if (o->value < 0 || o->value >= g->n_values) return ir_errf(err, errlen, "output %d out of range", i);
        if (o->updates >= 0 && (o->updates >= g->n_values || g->values[o->updates].role == IR_INTERMEDIATE))
            return ir_errf(err, errlen, "output '%s' updates a non-argument", g->values[o->value].name);
    }
    if (g->loss >= 0 && (g->loss >= g->n_values || g->values[g->loss].rank != 0))
        return ir_errf(err, errlen, "loss is not a scalar value");
    return 0;
}
